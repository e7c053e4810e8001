"""One error base and one reader of the environment: every Argus exception is an ArgusError with
its place and fix, bad ARGUS_* values are explained, and the CLI prints them without a traceback."""

from __future__ import annotations

import importlib
import inspect
import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner

import argus
from argus import env
from argus.cli import main
from argus.errors import ArgusError
from argus.ir.types import IRError, SourceLoc
from argus.isa_cdna3.emu import HazardError, UnsupportedOpcodeError

#: Exceptions that are control flow inside one module, never shown to a user.
INTERNAL = {"argus.smt.minimise.GaveUp", "argus.search.evaluate._Stop",
            "argus.search.planners.llm.LLMFailure"}
#: Test outcomes, not errors: argus.testing's checks fail a user's test as pytest expects, with an
#: AssertionError subclass.
TEST_FAILURES = {"argus.testing.checks.ArgusCheckFailure"}


def _argus_exceptions() -> dict[str, type]:
    """Exception classes of every module under argus/ (namespace packages included)."""
    root = Path(argus.__file__).parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        loaded = importlib.import_module(module)
        for name, value in vars(loaded).items():
            if (inspect.isclass(value) and issubclass(value, BaseException)
                    and value.__module__ == module):
                found[f"{module}.{name}"] = value
    return found


def test_every_argus_exception_has_the_common_base():
    found = _argus_exceptions()
    assert len(found) >= 22
    lacking = sorted(name for name, cls in found.items()
                     if not issubclass(cls, ArgusError) and name not in INTERNAL | TEST_FAILURES)
    assert not lacking, f"exception classes without ArgusError as a base: {lacking}"


def test_ir_error_carries_its_location_apart_from_the_message():
    loc = SourceLoc("k.py", 7, 3)
    error = IRError("mfma: operand A has the wrong layout", loc, fix="use T.mfma_layout")
    assert error.loc is loc and error.message == "mfma: operand A has the wrong layout"
    assert str(error) == "k.py:7:3: mfma: operand A has the wrong layout"
    assert error.render().endswith("\n  fix: use T.mfma_layout")


def test_errors_keep_their_fields_across_processes():
    hazard_free = UnsupportedOpcodeError("k", {"v_foo": ["0x10"]})
    again = pickle.loads(pickle.dumps(hazard_free))
    assert type(again) is UnsupportedOpcodeError and again.missing == {"v_foo": ["0x10"]}
    assert str(again) == str(hazard_free)
    located = pickle.loads(pickle.dumps(IRError("bad", SourceLoc("f.py", 1, 2), fix="do x")))
    assert located.loc == SourceLoc("f.py", 1, 2) and located.fix == "do x"
    assert issubclass(HazardError, ArgusError)


@pytest.mark.parametrize("name, value, text", [
    ("ARGUS_DEBUG", "yes", "ARGUS_DEBUG='yes' is not a debug level"),
    ("ARGUS_DEBUG", "9", "ARGUS_DEBUG='9' is not a debug level"),
    ("ARGUS_JOBS", "many", "ARGUS_JOBS='many' is not a whole number"),
    ("ARGUS_JOBS", "0", "ARGUS_JOBS=0 must be at least 1"),
])
def test_bad_environment_is_an_argus_error_naming_the_values(monkeypatch, name, value, text):
    monkeypatch.setenv(name, value)
    with pytest.raises(env.EnvError, match=text) as caught:
        env.current()
    assert caught.value.fix


def test_environment_is_read_in_one_place(monkeypatch, tmp_path):
    monkeypatch.setenv("ARGUS_DEBUG", "3")
    monkeypatch.setenv("ARGUS_JOBS", "2")
    monkeypatch.setenv("ARGUS_CACHE", str(tmp_path))
    assert (env.debug_level(), env.jobs(), env.cache_dir()) == (3, 2, tmp_path)
    monkeypatch.delenv("ARGUS_DEBUG")
    assert env.debug_level() == 0


def test_cli_prints_message_place_and_fix_without_a_traceback(monkeypatch):
    outcome = CliRunner().invoke(main, ["prove", "x < 2", "--var", "x=0:2"],
                                 env={"ARGUS_DEBUG": "yes"})
    assert outcome.exit_code == 1, outcome.output
    assert "Error: ARGUS_DEBUG='yes' is not a debug level" in outcome.output
    assert "fix: set ARGUS_DEBUG to one of 0 nothing" in outcome.output
    assert "Traceback" not in outcome.output and isinstance(outcome.exception, SystemExit)


def test_cli_shows_a_dsl_error_at_the_authors_line(tmp_path):
    source = tmp_path / "broken.py"
    source.write_text("import argus.lang as T\n\n\n@T.kernel\ndef broken(A: T.Tensor):\n"
                      "    pass\n")
    outcome = CliRunner().invoke(main, ["verify", f"{source}:broken"])
    assert outcome.exit_code == 1, outcome.output
    assert "broken.py:5: argument 'A' needs an annotation" in outcome.output
    assert "Traceback" not in outcome.output

"""One error base and one reader of the environment: every Argus exception is an ArgusError with
its place and fix, bad ARGUS_* values are explained, and the CLI prints them without a traceback."""

from __future__ import annotations

import importlib
import inspect
import pickle
import re
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
INTERNAL = {"argus.smt.minimise.GaveUp", "argus.search.evaluate._Stop"}
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


def test_every_argus_exception_declares_a_known_kind():
    from argus.errors import KINDS

    found = _argus_exceptions()
    kinds = {name: cls.kind for name, cls in found.items() if issubclass(cls, ArgusError)}
    assert set(kinds.values()) <= set(KINDS)
    # the classes whose kind is not the default, each for its reason
    assert kinds["argus.env.EnvError"] == "environment"
    assert kinds["argus.asm.toolchain.ToolchainError"] == "environment"
    assert kinds["argus.asm.hip.HipUnavailable"] == "environment"
    assert kinds["argus.search.planners.llm.LLMFailure"] == "environment"
    assert kinds["argus.isa_cdna3.emu.state.UnsupportedOpcodeError"] == "unsupported"
    assert kinds["argus.asm.lower.exprgen.UnsupportedError"] == "unsupported"
    assert kinds["argus.ir.types.IRError"] == kinds["argus.lang.errors.DSLError"] == "input"


def test_a_raise_site_may_give_its_own_kind_and_it_survives_pickling():
    from argus.isa_cdna3.abi import LaunchError

    plain, scratch = LaunchError("grid too big"), LaunchError("scratch", kind="unsupported")
    assert (plain.kind, scratch.kind) == ("input", "unsupported")
    assert pickle.loads(pickle.dumps(scratch)).kind == "unsupported"
    with pytest.raises(ValueError, match="not one of"):
        ArgusError("x", kind="fatal")
    with pytest.raises(TypeError, match="is not one of"):
        type("Bad", (ArgusError,), {"kind": "fatal"})
    assert "bug in Argus" in ArgusError("x", kind="internal").render()
    assert "bug in Argus" not in plain.render()


def test_llm_failure_is_an_environment_error_with_its_reason():
    from argus.search.planners.llm import LLMFailure

    failure = LLMFailure("timeout", "no answer within 1 s")
    assert isinstance(failure, ArgusError) and failure.kind == "environment"
    assert failure.reason == "timeout" and str(failure) == "no answer within 1 s"


def test_the_search_maps_kinds_to_verdicts():
    from argus.pipeline import outcome_of
    from argus.search.evaluate import ERROR, INVALID, STATUS_OF

    kinds = ("input", "unsupported", "environment", "internal")
    assert [STATUS_OF[outcome_of(ArgusError("x", kind=k))] for k in kinds] == [
        INVALID, INVALID, ERROR, ERROR]


#: `os.environ` / `os.getenv` reads, with the variable's name on the same line.
ENVIRON_READ = re.compile(r"os\.(?:environ|getenv)\b[^\n]*ARGUS_"
                          r"|ARGUS_\w+[\"']\s*(?:not\s+)?in\s+os\.environ")


def test_no_argus_variable_is_read_outside_env_py():
    root = Path(argus.__file__).parent
    reads = [f"{path.relative_to(root.parent)}:{number}: {line.strip()}"
             for path in sorted(root.rglob("*.py")) if path.name != "env.py" or
             path.parent != root
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if ENVIRON_READ.search(line)]
    assert not reads, "read ARGUS_* through argus.env:\n" + "\n".join(reads)
    named = {name for path in root.rglob("*.py") if path.name != "env.py"
             for name in re.findall(r"\bARGUS_[A-Z_]+[A-Z]\b", path.read_text())}
    assert named <= set(env.KNOBS), f"missing from env.KNOBS: {sorted(named - set(env.KNOBS))}"


def test_the_string_knobs_come_from_env_py(monkeypatch, tmp_path):
    monkeypatch.setenv("ARGUS_REPRO_DIR", str(tmp_path))
    monkeypatch.setenv("ARGUS_HIP_LIBRARY", "/opt/x/libamdhip64.so")
    monkeypatch.setenv("ARGUS_LLM_BASE_URL", "http://localhost:8000/v1")
    monkeypatch.setenv("ARGUS_LLM_MODEL", " qwen ")
    monkeypatch.delenv("ARGUS_LLM_API_KEY", raising=False)
    monkeypatch.setenv(env.LLM_KEY_FALLBACK, "sk-fallback")
    monkeypatch.setenv("MY_KEY", "sk-mine")
    assert env.repro_dir() == tmp_path and env.hip_library() == "/opt/x/libamdhip64.so"
    assert env.llm_server() == ("http://localhost:8000/v1", "qwen")
    assert env.llm_api_key() == "sk-fallback" and env.llm_api_key("MY_KEY") == "sk-mine"
    monkeypatch.setenv("ARGUS_LLM_API_KEY", "sk-argus")
    assert env.llm_api_key() == "sk-argus" and env.llm_api_key("UNSET_KEY_VARIABLE") is None
    monkeypatch.setenv("ARGUS_JOBS", "2")  # recorded, so the write below is undone
    monkeypatch.delenv("ARGUS_JOBS")
    assert env.configured_jobs() is None
    env.default_jobs(1)
    assert env.configured_jobs() == 1 and env.jobs() == 1
    monkeypatch.setenv("ARGUS_JOBS", "3")
    env.default_jobs(1)
    assert env.configured_jobs() == 3


def test_the_solver_limit_comes_from_argus_smt_timeout_ms(monkeypatch):
    """A loaded machine can raise the per-query limit without touching code; a bad value is
    an EnvError naming the variable."""
    from argus import env
    from argus.search.evaluate import Evaluator
    from argus.search.space import Problem

    monkeypatch.setenv("ARGUS_SMT_TIMEOUT_MS", "60000")
    assert env.smt_timeout_ms(10_000) == 60_000
    problem = Problem("gemm", {"M": 64, "N": 64, "K": 64})
    assert Evaluator(problem).verify_timeout_ms == 60_000
    monkeypatch.setenv("ARGUS_SMT_TIMEOUT_MS", "soon")
    with pytest.raises(env.EnvError, match="ARGUS_SMT_TIMEOUT_MS='soon'"):
        env.smt_timeout_ms(10_000)
    monkeypatch.delenv("ARGUS_SMT_TIMEOUT_MS")
    assert env.smt_timeout_ms(10_000) == 10_000

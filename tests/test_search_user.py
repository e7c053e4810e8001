"""Tuning a kernel of one's own: `argus tune FILE.py:NAME` takes a `LibraryKernel` the user's
file defines (kernel, output, default sizes, numpy reference, tolerance, knobs), resolves it in
every worker by name, and refuses a file, name or knob it cannot use with the fix."""

from __future__ import annotations

import json
import textwrap

import pytest
from click.testing import CliRunner

from argus.cli import main
from argus.search import Budget, Problem, tune
from argus.search.space import SearchError, family

KERNEL = '''
import numpy as np

import argus.lang as T
from argus.kernels import Knob, LibraryKernel


@T.kernel(waves=1)
def scale_rows(X: T.Tensor("f32", "R", 256), Y: T.Tensor("f32", "R", 256), *, rows: int = 4):
    R = X.shape[0]
    T.assume((R % rows).eq(0))
    T.grid(R // rows)
    r0 = T.program_id(0) * rows
    spec = T.copy_layout((rows, 256), 1, 4)
    x = X.load((r0, 0), spec)
    Y.store((r0, 0), T.maximum(x, T.zeros(spec)) * SCALE)


def reference(inputs, params):
    return 2 * np.maximum(inputs["X"], 0)


SCALE = 2.0
TUNABLE = LibraryKernel(scale_rows, "Y", {"R": 64}, reference, 1e-6,
                        knobs=(Knob("rows", (1, 4, 8, 16), "rows per workgroup"),))
UNTUNABLE = LibraryKernel(scale_rows, "Y", {"R": 64}, reference, 1e-6)
BAD_KNOB = LibraryKernel(scale_rows, "Y", {"R": 64}, reference, 1e-6,
                         knobs=(Knob("tile", (1, 2)),))
'''


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(textwrap.dedent(KERNEL))
    return path


def test_a_user_family_is_tuned_proved_and_checked_against_its_reference(user_file, tmp_path):
    problem = Problem(f"{user_file}:TUNABLE", {"R": 4096}, {"rows": [4, 16]})
    run = tmp_path / "run.jsonl"
    progress = tune(problem, run_file=run, budget=Budget(2, None, 300), jobs=1, fresh=True)
    results = [e for e in progress.state.evaluations if e.status == "ok"]
    rows = {dict(e.candidate.params)["rows"] for e in results}
    # the pinned values only; the model's pre-screen puts the fastest (16 rows) first and
    # skips a point it already timed slower than a result
    assert 16 in rows and rows <= {4, 16}
    assert all(e.verdict.startswith("proved") or "proved" in e.verdict for e in results)
    assert all(e.time_us and e.time_us > 0 for e in results)
    header = json.loads(run.read_text().splitlines()[0])
    assert header["problem"]["family"].endswith("mine.py:TUNABLE")


def test_a_wrong_reference_makes_every_candidate_wrong(user_file, tmp_path):
    user_file.write_text(user_file.read_text().replace("SCALE = 2.0", "SCALE = 3.0"))
    problem = Problem(f"{user_file}:TUNABLE", {"R": 4096}, {"rows": 4})
    progress = tune(problem, run_file=tmp_path / "run.jsonl", budget=Budget(1, None, 300),
                    jobs=1, fresh=True)
    assert [e.status for e in progress.state.evaluations] == ["wrong"]


@pytest.mark.parametrize("name, message", [
    ("missing.py:TUNABLE", "no such file"),
    ("{file}:NOPE", "defines no 'NOPE'"),
    ("{file}:scale_rows", "is a KernelDef, not a LibraryKernel"),
    ("{file}:UNTUNABLE", "declares no knobs"),
    ("{file}:BAD_KNOB", "knob 'tile' is no keyword parameter of scale_rows"),
    ("{file}", "no tunable family"),
])
def test_what_cannot_be_tuned_is_refused_with_the_fix(user_file, name, message):
    with pytest.raises(SearchError, match=message) as err:
        family(name.format(file=user_file))
    assert err.value.fix or "choose one of" in str(err.value)


def test_the_cli_names_the_run_directory_after_the_file(user_file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["tune", f"{user_file}:TUNABLE", "--shape", "1024",
                                       "--param", "rows=16", "--budget", "1", "--jobs", "1",
                                       "--fresh"])
    assert result.exit_code == 0, result.output
    run = tmp_path / "argus-tune" / "mine-TUNABLE-1024"
    assert (run / "winner.json").is_file()
    # the run's picture is readable by others (not mkstemp's private 0600)
    import os

    umask = os.umask(0o022)
    try:
        shown = CliRunner().invoke(main, ["tune", "--report", str(run / "run.jsonl"), "--plot",
                                          str(tmp_path / "run.png")])
    finally:
        os.umask(umask)
    assert shown.exit_code == 0, shown.output
    assert (tmp_path / "run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "run.png").stat().st_mode & 0o777 == 0o644


def test_the_tutorial_s_example_file_is_a_tunable_family_whose_default_is_proved():
    from pathlib import Path

    import argus

    entry = family(str(Path(__file__).resolve().parents[1] / "docs" / "examples"
                       / "scale_rows.py") + ":TUNABLE")
    assert entry.knob("rows").values == (1, 4, 8, 16)
    assert argus.verify(entry.kernel).ok

"""KernelBench problems as search targets: the knobs are the route's templates' fields, every
point is screened by the model, and a counted candidate is correct on the emulator by
KernelBench's rule, proved, and timed (the in-repo copy of level1/23_Softmax)."""

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")  # the argus[kernelbench] extra; CI installs it

from click.testing import CliRunner  # noqa: E402

from argus.cli import main  # noqa: E402
from argus.kernelbench.tune import load_target, with_knobs  # noqa: E402

PROBLEMS = Path(__file__).parent / "kernelbench"


def test_a_softmax_problem_is_tuned_over_its_row_programs_waves(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["tune", "kernelbench:level1/23_Softmax", "--problems",
                                       str(PROBLEMS), "--budget", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in (out / "run.jsonl").read_text().splitlines()]
    assert events[0]["kind"] == "run" and events[0]["knobs"] == [[0, "waves", [1, 2, 4, 8]]]
    screen = next(e for e in events if e["kind"] == "screen")
    assert screen["timed"] == 4 == screen["points"]
    evals = [e for e in events if e["kind"] == "eval"]
    assert [e["move"] for e in evals] == ["default", "screen"]  # the budget: 2 full checks
    assert all(e["status"] == "ok" and e["verdict"] == "proved" for e in evals)
    assert evals[0]["params"] == {"0.waves": 4} and evals[0]["reward"] == 1.0
    # the second is the screen's fastest other point, and its counted time is the screened one
    fastest = min((r for r in screen["ranking"] if r["params"] != {"0.waves": 4}),
                  key=lambda r: r["time_us"])
    assert evals[1]["params"] == fastest["params"]
    assert evals[1]["time_us"] == pytest.approx(fastest["time_us"])
    assert "best: 0.waves=" in result.output


def test_a_bad_target_names_the_fix(tmp_path):
    result = CliRunner().invoke(main, ["tune", "kernelbench:level1/999_Nothing", "--problems",
                                       str(PROBLEMS)])
    assert result.exit_code == 1 and "kernelbench:level1/23_Softmax" in result.output
    result = CliRunner().invoke(main, ["tune", "kernelbench:level1/23_Softmax"])
    assert result.exit_code == 1 and "--problems DIR" in result.output


def test_knob_values_reach_the_plans_templates():
    target = load_target("kernelbench:level1/23_Softmax", PROBLEMS)
    plan = with_knobs(target.plan, {"0.waves": 2})
    assert plan.steps[0].template.waves == 2 and target.plan.steps[0].template.waves == 4
    assert len(target.points()) == 4 and target.default() == {"0.waves": 4}

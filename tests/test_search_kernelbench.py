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


# ------------------------------------------------- convolution knobs and the epilogue rewrite
CONV = "kernelbench:level2/54_Conv2d_Scale_GELU_Clamp"   # conv, bias, scale, gelu, clamp


@pytest.fixture(scope="module")
def conv_target():
    return load_target(CONV, PROBLEMS)


def test_a_convolution_is_tuned_over_engine_tiles_and_its_epilogue(conv_target, tmp_path):
    from argus.kernelbench.templates import conv_fitting
    from argus.kernelbench.tune import tune

    conv = conv_target.plan.steps[0].template
    assert [(i, f) for i, f, _ in conv_target.knobs()] == [(0, "engine"), (0, "tiles"),
                                                            (0, "epilogue")]
    # the route's point is the kernel it really runs, not a choice the template replaced
    default = conv_target.default()
    assert (default["0.engine"], default["0.tiles"]) == conv.fitted()
    assert default["0.epilogue"] == "fused"
    points = conv_target.points()
    # (mfma_f32 and mfma_f32_16: the 4 searched tiles, and the route's own where it is not
    # one of them (the 16x16 engine's 4 position tiles on a wide row), fma: (1, 1) only) x
    # (fused, split)
    tiles = {f: v for _, f, v in conv_target.knobs()}["tiles"]
    assert len(tiles) == 4 + (conv.tiles not in ((1, 1), (1, 2), (2, 1), (2, 2)))
    assert len(points) == (2 * len(tiles) + 1) * 2
    assert all(p["0.tiles"] == (1, 1) for p in points if p["0.engine"] == "fma")
    run_file = tmp_path / "run.jsonl"
    rows = tune(conv_target, run_file=run_file, budget=1, echo=lambda *_: None)
    events = [json.loads(line) for line in run_file.read_text().splitlines()]
    screened = [e for e in events if e["kind"] == "screened"]
    screen = next(e for e in events if e["kind"] == "screen")
    assert screen["timed"] + len(screened) == screen["points"] == len(points)
    # a point is screened out exactly when its kernel would not be the one asked for
    for point in points:
        engine, tiles = point["0.engine"], point["0.tiles"]
        epilogue = conv.epilogue if point["0.epilogue"] == "fused" else ("bias",)
        fits = conv_fitting(2, engine, tiles, epilogue, **conv.geometry) == (engine, tiles)
        out = [e for e in screened if e["params"] == json.loads(json.dumps(point))]
        assert bool(out) == (not fits), point
        assert all("does not fit a wave's registers" in e["why"] for e in out)
    evals = [e for e in events if e["kind"] == "eval"]   # the budget: the route's plan
    assert [e["move"] for e in evals] == ["default"] and len(rows) == 1
    assert evals[0]["status"] == "ok" and evals[0]["verdict"] == "proved"
    assert evals[0]["params"] == json.loads(json.dumps(default)) and rows[0]["reward"] == 1.0


def test_a_split_epilogue_is_checked_like_the_fused_one(conv_target):
    from argus.kernelbench.templates import Conv, Elementwise
    from argus.kernelbench.tune import evaluate, modelled_us

    fused = conv_target.default()
    split = {**fused, "0.epilogue": "split"}
    plan = with_knobs(conv_target.plan, split)
    # the convolution keeps its bias; scale, gelu and clamp run in a launch of their own
    assert [type(s.template) for s in plan.steps] == [Conv, Elementwise]
    assert plan.steps[0].template.epilogue == ("bias",)
    assert plan.steps[1].inputs[0][1] == plan.steps[0].output
    assert plan.steps[1].output == conv_target.plan.steps[0].output
    row = evaluate(conv_target, split)   # the full check the fused plan passes above
    assert row["status"] == "ok" and row["verdict"] == "proved", row
    assert row["params"]["0.epilogue"] == "split"
    # the split writes and reads the convolution's output once more: modelled slower
    assert modelled_us(conv_target, fused) < row["time_us"]


def test_a_matmul_epilogue_reading_a_vector_splits_into_a_broadcast():
    import numpy as np
    import torch

    from argus.kernelbench.route import route, split_epilogue
    from argus.kernelbench.solution import Context, from_plan
    from argus.kernelbench.templates import Broadcast, Matmul

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(40, 24))
            self.s = torch.nn.Parameter(torch.randn(40))

        def forward(self, x):
            return torch.relu(x @ self.w.T) * self.s

    model, x = Scaled(), torch.randn(3, 70, 24)
    plan = split_epilogue(route(model, [x]), 0)
    assert [type(s.template) for s in plan.steps] == [Matmul, Broadcast]
    assert plan.steps[0].template.epilogue == ("acc",)
    params = dict(model.named_parameters())
    y = from_plan(plan).forward(Context(True), x.numpy(),
                                *[params[a].detach().numpy() for _, a in plan.params])
    assert np.abs(y - model(x).detach().numpy()).max() < 1e-4


def test_every_searched_field_is_a_choice_a_scaled_plan_may_take():
    """The harness pins a scaled plan to the published plan's values of `CHOICES` only; a
    knob outside it would let tuning change what a kernel computes behind the pin."""
    from argus.kernelbench.templates import CHOICES
    from argus.kernelbench.tune import KNOBS

    searched = {field for fields in KNOBS.values() for field in fields}
    assert searched and searched <= CHOICES


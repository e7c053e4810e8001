"""The search's data and planner logic without the pipeline: space, knowledge base, store,
budget, the offline planner on a known landscape, and results never drawn from rejections."""

import json

import pytest
from fakes.landscape import BEST, Landscape
from hypothesis import given
from hypothesis import strategies as st

from argus.search import Budget, Problem, SearchError, parse_shape
from argus.search.kb import Context, moves_for
from argus.search.loop import run
from argus.search.planners import SearchState
from argus.search.planners.offline import OfflinePlanner
from argus.search.space import (
    MFMA_16,
    Action,
    Candidate,
    apply,
    default_candidate,
    every_candidate,
    family,
)
from argus.search.store import Store, read
from argus.search.view import final_table, write_winner
from argus.search.workers import InlineWorkers, Task

GEMM = Problem("gemm", {"M": 4096, "N": 4096, "K": 4096})


def test_shapes_and_knob_values_are_checked():
    assert parse_shape("gemm", "4096x1024x512") == {"M": 4096, "N": 1024, "K": 512}
    with pytest.raises(SearchError, match="MxNxK"):
        parse_shape("gemm", "4096x4096")
    with pytest.raises(SearchError, match="choose one of"):
        parse_shape("conv", "1x2")
    base = default_candidate(GEMM)
    with pytest.raises(SearchError, match="outside gemm's space"):
        apply(base, [Action("block_m", 96)])
    assert apply(base, [Action("block_m", 128)]).param_dict["block_m"] == 128


def test_candidate_keys_are_content_hashes():
    a = Candidate("gemm", {"block_m": 64, "block_n": 128})
    b = Candidate("gemm", {"block_n": 128, "block_m": 64})
    assert a.key == b.key
    assert Candidate("gemm", a.params, source="x = 1").key != a.key
    assert Candidate.from_dict(json.loads(json.dumps(a.to_dict()))) == a


def test_attention_fixes_head_dim_from_the_shape():
    problem = Problem("attention_fwd", parse_shape("attention_fwd", "16x4096x128"))
    assert default_candidate(problem).param_dict == {"head_dim": 128, "unroll": 1,
                                                      "policy": "interleave"}
    assert {m.knob for m in moves_for(problem)} == {"unroll", "policy"}
    assert len(list(every_candidate(problem))) == 6


def test_the_policy_knob_is_the_backends_list():
    from argus.asm.lower import POLICIES

    assert set(family("gemm").knob("policy").values) == set(POLICIES)
    assert family("gemm").knob("policy").values[0] == "interleave"  # compile()'s default


@given(st.sampled_from(list(every_candidate(GEMM))))
def test_every_applicable_move_changes_only_its_knob_inside_the_space(candidate):
    ctx = Context(GEMM, candidate)
    for move in moves_for(GEMM):
        actions = move.propose(ctx)
        if not actions:
            continue
        moved = apply(candidate, actions)  # raises if a value left the space
        changed = {k for k, v in moved.params if candidate.param_dict[k] != v}
        assert changed == {move.knob}, move.id


def test_store_resumes_and_repairs_a_torn_last_line(tmp_path):
    path = tmp_path / "run.jsonl"
    header = {"problem": GEMM.to_dict(), "planner": "offline"}
    store = Store(path, header)
    evaluation = Landscape()(default_candidate(GEMM))
    store.record(evaluation)
    with open(path, "a") as handle:
        handle.write('{"kind": "eval", "evaluat')  # killed mid-write
    resumed = Store(path, header, resume=True)
    assert [e.key for e in resumed.evaluations] == [evaluation.key]
    assert all(json.loads(line) for line in path.read_text().splitlines())
    with pytest.raises(SearchError, match="already holds a run"):
        Store(path, header)
    other = {"problem": Problem("gemm", {"M": 64, "N": 64, "K": 64}).to_dict()}
    with pytest.raises(SearchError, match="give the same family"):
        Store(path, other, resume=True)
    path.write_text('{"kind": "run"}\nnot json\n{"kind": "end"}\n')
    with pytest.raises(SearchError, match=r"run.jsonl:2"):
        read(path)


def test_budget_rejects_nonsense():
    with pytest.raises(SearchError, match="--budget"):
        Budget(0)
    with pytest.raises(SearchError, match="--timeout"):
        Budget(5, candidate_s=0)


def test_offline_planner_climbs_to_the_peak_within_budget(tmp_path, seed=1):
    state = SearchState(GEMM)
    store = Store(tmp_path / "run.jsonl", {"problem": GEMM.to_dict()})
    # every point counts as runnable here: the landscape stands for the whole pipeline
    planner = OfflinePlanner(GEMM, seed, legal=lambda candidate: "")
    progress = run(state, planner, InlineWorkers(Landscape()), store, Budget(64))
    assert len(state.evaluations) == 64
    assert len({e.key for e in state.evaluations}) == 64  # nothing evaluated twice
    assert state.best.candidate.param_dict == BEST, progress.stopped
    assert {e.move for e in state.evaluations} >= {"default", "optuna"}


@pytest.mark.parametrize("status", ["refuted", "wrong", "unknown", "incomplete", "timeout",
                                    "error"])
def test_a_rejected_candidate_is_never_a_result(tmp_path, status):
    state = SearchState(GEMM)
    store = Store(tmp_path / "run.jsonl", {"problem": GEMM.to_dict()})
    best = Candidate("gemm", BEST)
    # the real precheck keeps the fake landscape's points buildable (the winner is compiled)
    planner = OfflinePlanner(GEMM, 0)
    workers = InlineWorkers(Landscape(reject_best=status))
    workers.submit(Task(best, "test"))
    state.evaluations.extend(workers.wait())
    run(state, planner, workers, store, Budget(12))
    rejected = [e for e in state.evaluations if e.status == status]
    assert rejected and rejected[0].reward == 2.0  # the hostile stage attached a number
    assert all(e.status == "ok" for e in state.results)
    assert state.best.reward < 2.0
    written = write_winner(tmp_path / "out", GEMM, state.evaluations)
    assert json.loads(written[0].read_text())["status"] == "ok"
    assert written[1].name == "winner.s" and "v_mfma" in written[1].read_text()
    rows = final_table(state.evaluations).columns[1]._cells
    assert best.describe() not in rows
    assert family("gemm").knob("block_m").step(256, 1) is None


def test_a_resumed_run_continues_where_it_stopped(tmp_path):
    path = tmp_path / "run.jsonl"
    header = {"problem": GEMM.to_dict()}
    state = SearchState(GEMM)
    run(state, OfflinePlanner(GEMM, 0, legal=lambda c: ""), InlineWorkers(Landscape()),
        Store(path, header), Budget(5))
    first = [e.key for e in state.evaluations]
    store = Store(path, header, resume=True)
    again = SearchState(GEMM, list(store.evaluations))
    run(again, OfflinePlanner(GEMM, 0, legal=lambda c: ""), InlineWorkers(Landscape()), store,
        Budget(9))
    keys = [e["evaluation"]["key"] for e in read(path) if e["kind"] == "eval"]
    assert keys[:5] == first and len(keys) == 9 and len(set(keys)) == 9
    assert [e["kind"] for e in read(path)].count("resume") == 1


def test_pinned_and_restricted_knobs_shape_the_space():
    problem = Problem("gemm", GEMM.sizes, {"swizzle": True, "block_k": [64, 32],
                                           "instr": MFMA_16})
    names = [k.name for k in problem.knobs()]
    assert "swizzle" not in names and "instr" not in names
    assert problem.knob("block_k").values == (32, 64)  # the family's order
    points = list(every_candidate(problem))
    # the tiles the GEMM declares buildable: at block_k 32 all 3 x 3 but 256x256 (registers),
    # at 64 those whose double-buffered tiles fit 64 KiB of LDS (block_m + block_n <= 256)
    assert len(points) == (8 + 4) * 4 * 2 * 2
    from argus.search.space import infeasible

    big = Candidate("gemm", {**points[0].param_dict, "block_m": 256, "block_n": 256})
    assert "registers" in infeasible(big) and big not in points
    wide = Candidate("gemm", {**points[0].param_dict, "block_m": 256, "block_k": 64})
    assert "LDS" in infeasible(wide) and wide not in points
    assert all(p.param_dict["swizzle"] is True and p.param_dict["instr"] == MFMA_16
               for p in points)
    assert default_candidate(problem).param_dict["block_k"] == 32
    assert {m.knob for m in moves_for(problem)} == {"block_m", "block_n", "block_k",
                                                    "split_k", "prefetch", "policy"}
    with pytest.raises(SearchError, match="outside gemm's values"):
        Problem("gemm", GEMM.sizes, {"block_k": [48]}).knobs()
    with pytest.raises(SearchError, match="not a searched knob"):
        apply(default_candidate(problem), [Action("swizzle", False)], problem)


def test_the_wall_clock_budget_stops_the_run(tmp_path):
    from fakes.landscape import Sleeper

    state = SearchState(GEMM)
    # every candidate takes 0.4 s; a 1 s budget leaves room for three at most
    planner = OfflinePlanner(GEMM, 0, legal=lambda candidate: "")
    store = Store(tmp_path / "run.jsonl", {"problem": GEMM.to_dict()})
    progress = run(state, planner, InlineWorkers(Sleeper(0.4, every=True)), store,
                   Budget(50, wall_s=1.0))
    assert 1 <= len(state.evaluations) <= 3
    assert progress.stopped.startswith("wall-clock limit of 1 s")


@pytest.mark.parametrize("args, words", [
    (["tune", "gemm", "--shape", "12x"], "MxNxK"),
    (["tune", "gemm"], "give FAMILY and --shape"),
    (["tune", "gemm", "--shape", "64x64x64", "--param", "block_k=48,32"], "outside gemm's"),
    (["tune", "gemm", "--shape", "64x64x64", "--planner", "llm"], "--llm-base-url"),
], ids=["shape", "no-shape", "param", "llm"])
def test_tune_command_errors_name_the_fix(args, words, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from argus.cli import main

    monkeypatch.delenv("ARGUS_LLM_BASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, args)
    assert result.exit_code in (1, 2) and words in result.output, result.output
    assert "Traceback" not in result.output
    assert not list(tmp_path.rglob("run.jsonl"))  # nothing half-written


def test_report_of_a_file_that_is_not_a_run(tmp_path):
    from click.testing import CliRunner

    from argus.cli import main

    bogus = tmp_path / "notes.jsonl"
    bogus.write_text('{"kind": "eval"}\n')
    result = CliRunner().invoke(main, ["tune", "--report", str(bogus)])
    assert result.exit_code == 1 and "no run header" in result.output


def test_a_run_without_results_says_where_candidates_stopped():
    from argus.search.evaluate import INVALID, Evaluation
    from argus.search.view import best_line

    base = default_candidate(GEMM)
    stopped = [Evaluation(base.key, base, INVALID, "compile", "UnsupportedError: no rule")]
    assert "1 of 1 stopped at compile: UnsupportedError" in best_line(stopped)


def test_the_default_output_directory_never_holds_an_old_run(tmp_path, monkeypatch):
    from argus.cli import _free_directory

    monkeypatch.chdir(tmp_path)
    stem = "argus-tune/gemm-64x64x64"
    assert _free_directory(stem) == stem
    for expected in (stem, f"{stem}-2"):
        Store(tmp_path / expected / "run.jsonl", {"problem": GEMM.to_dict()})
    assert _free_directory(stem) == f"{stem}-3"


def test_the_readme_setup_command_tunes_with_options_that_work(tmp_path, monkeypatch):
    """The set-up section holds exactly two commands; the first ends in `argus tune`, whose
    options are run here with a budget of one evaluation (the whole run takes minutes)."""
    import re
    import shlex
    from pathlib import Path

    from click.testing import CliRunner

    from argus.cli import main

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    setup = readme.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)\n```", setup, re.S)
    assert len(commands) == 2 and commands[1].startswith("HYPOTHESIS_PROFILE=ci python3 -m pytest")
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert commands[1] in ci.splitlines()       # CI runs the README's test command itself
    words = shlex.split(commands[0].split("&&")[-1])
    assert words[:2] == ["argus", "tune"]
    budget = words.index("--budget")
    assert int(words[budget + 1]) <= 16  # small: the set-up must finish in minutes
    # the last --jobs wins: evaluate in this process; without the model-only pre-screen the one
    # evaluation is the default configuration, the quickest to prove (the screen's own choice
    # at this shape is tested in test_search_screen.py)
    args = [*words[1:budget], "--budget", "1", *words[budget + 2:], "--jobs", "0", "--out",
            str(tmp_path / "out"), "--no-screen"]
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    events = read(tmp_path / "out" / "run.jsonl")
    assert [e["evaluation"]["status"] for e in events if e["kind"] == "eval"] == ["ok"]
    assert (tmp_path / "out" / "winner.s").is_file()


def test_the_value_model_learns_a_landscape_from_a_sample_of_it():
    import random

    import numpy as np

    from argus.search.planners.model import ValueModel

    points = list(every_candidate(GEMM))
    model = ValueModel(GEMM)
    for candidate in random.Random(3).sample(points, 40):
        model.observe(candidate, Landscape()(candidate).reward)
    mean, covariance = model.posterior()
    assert np.all(np.linalg.eigvalsh(covariance) > 0)
    predicted = np.array([model.features(c) for c in points]) @ mean
    truth = np.array([Landscape()(c).reward for c in points])
    top = np.argsort(-predicted)[: len(points) // 20]  # the model's best 5%
    assert truth[top].max() >= 0.8 * truth.max()
    assert np.corrcoef(predicted, np.log(truth))[0, 1] > 0.8
    # a Thompson sample ranks every point once
    ranked = model.ranked(points, np.random.default_rng(0))
    assert sorted(c.key for c in ranked) == sorted(c.key for c in points)
    assert model.ranked([], np.random.default_rng(0)) == []


def test_moe_staging_moves_turn_the_lds_knob_where_they_apply():
    moe = Problem("moe_gemm", {"TOKENS": 4096, "H": 4096, "E": 8, "N": 4096})
    ids = {m.id for m in moves_for(moe)}
    assert {"stage_through_lds", "direct_operands"} <= ids
    staged = default_candidate(moe)
    assert staged.param_dict["lds"] is True          # the kernel's default, first in the knob
    direct = apply(staged, [Action("lds", False)], moe)
    by_id = {m.id: m for m in moves_for(moe)}
    assert by_id["stage_through_lds"].propose(Context(moe, direct)) == (Action("lds", True),)
    assert not by_id["stage_through_lds"].propose(Context(moe, staged))
    limited = Context(moe, staged, {"occupancy_limited_by": "32768 B of LDS per workgroup"})
    assert by_id["direct_operands"].favoured(limited)
    assert not by_id["direct_operands"].favoured(Context(moe, staged, {}))


def test_the_value_model_starts_from_past_runs_at_other_shapes():
    """Experience rows of a past run at another shape (rewards there, against that shape's
    own reference) are prior observations: with none of its own, the model already ranks the
    landscape's good points first; rows outside the knob values or without sizes are left
    out."""
    import random

    import numpy as np

    from argus.search.planners.model import ValueModel

    elsewhere = {"M": 1024, "N": 1024, "K": 8192}
    points = list(every_candidate(GEMM))
    rows = [{"run": "past", "status": "ok", "sizes": elsewhere, "candidate": c.to_dict(),
             "reward": 3.0 * Landscape()(c).reward}  # another reference: another scale
            for c in random.Random(5).sample(points, 40)]
    odd = Candidate("gemm", {**default_candidate(GEMM).param_dict, "block_m": 96})
    rows += [{"run": "past", "status": "ok", "sizes": elsewhere, "candidate": odd.to_dict(),
              "reward": 9.0},
             {"run": "older", "status": "ok", "candidate": points[0].to_dict(), "reward": 1.0}]
    model = ValueModel(GEMM)
    assert model.learn_from(rows) == 40 and not model.ys
    mean, _ = model.posterior()
    predicted = np.array([model.features(c) for c in points]) @ mean
    truth = np.log([Landscape()(c).reward for c in points])
    assert np.corrcoef(predicted, truth)[0, 1] > 0.7
    assert ValueModel(GEMM).learn_from([]) == 0

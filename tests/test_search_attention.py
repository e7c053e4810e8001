"""Flash attention's declared search space: every point traces and proves at both head dims, a
sample compiles to different code and matches numpy in the emulator, and the knowledge base's
unroll moves stay inside the space and read their preconditions from the evaluation's facts."""

import argus
from argus.ir import ops as O
from argus.kernels import library
from argus.search.evaluate import OK, Evaluator, compile_params, kernel_params
from argus.search.kb import Context, move, moves_for
from argus.search.space import (
    Action,
    Candidate,
    Problem,
    apply,
    default_candidate,
    every_candidate,
    parse_shape,
)

HD128 = Problem("attention_fwd", parse_shape("attention_fwd", "16x2048x128"))
HD64 = Problem("attention_fwd", parse_shape("attention_fwd", "32x4096x64"))
KERNEL = library()["attention_fwd"].kernel


def test_the_space_is_the_unroll_times_the_schedule_at_the_shapes_head_dim():
    for problem, head_dim in ((HD128, 128), (HD64, 64)):
        points = list(every_candidate(problem))
        assert {(c.param_dict["unroll"], c.param_dict["policy"]) for c in points} == {
            (u, p) for u in (1, 2, 4) for p in ("interleave", "simple")}
        assert {c.param_dict["head_dim"] for c in points} == {head_dim}
        assert default_candidate(problem).param_dict == {"head_dim": head_dim, "unroll": 1,
                                                          "policy": "interleave"}
        for candidate in points:
            ir = KERNEL.trace(**kernel_params(candidate))
            loop = next(op for op in ir.ops() if isinstance(op, O.For))
            assert loop.unroll == candidate.param_dict["unroll"]


def _mfmas_per_loop_trip(text: str) -> int:
    """MFMAs between the key loop's label and its backward branch: the copies of the loop
    body one trip runs."""
    lines = [line.strip() for line in text.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith(".Lloop"))
    label = lines[start].rstrip(":")
    end = next(i for i, line in enumerate(lines)
               if line.startswith("s_cbranch") and line.split()[-1] == label)
    return sum(line.startswith("v_mfma") for line in lines[start:end])


def test_a_sample_compiles_to_distinct_unrolled_code():
    """Under `simple` each unroll is its own loop body count; under `interleave` 1 and 2
    coincide, to the byte (the two LDS stages already unroll the loop twice), and 4 differs.
    (The text once differed in a full-suite run: sums were ordered by node creation, which
    depended on what the process had built before; test_determinism covers that now.)"""
    mfmas, texts = {}, {}
    for unroll, policy in ((1, "simple"), (2, "simple"), (1, "interleave"), (2, "interleave"),
                           (4, "interleave")):
        candidate = Candidate("attention_fwd", {"head_dim": 64, "unroll": unroll,
                                                "policy": policy})
        compiled = argus.compile(KERNEL.trace(**kernel_params(candidate)),
                                 **compile_params(candidate))
        texts[unroll, policy] = compiled.text
        mfmas[unroll, policy] = _mfmas_per_loop_trip(compiled.text)
    assert mfmas[2, "simple"] == 2 * mfmas[1, "simple"] > 0
    assert mfmas[1, "interleave"] == mfmas[2, "interleave"] == 2 * mfmas[1, "simple"]
    assert mfmas[4, "interleave"] == 2 * mfmas[2, "interleave"]
    assert texts[1, "interleave"] == texts[2, "interleave"]


def test_unrolled_points_prove_and_match_numpy_in_the_emulator():
    problem = Problem("attention_fwd", {"BH": 2, "S": 256, "D": 64})
    evaluator = Evaluator(problem, trials=2, reference={"name": "pretend", "time_us": 1e3})
    base = default_candidate(problem)
    for actions in ([Action("unroll", 4), Action("policy", "simple")], [Action("unroll", 4)]):
        evaluation = evaluator(apply(base, actions, problem))
        assert evaluation.status == OK, evaluation.message
        assert " 0 refuted, 0 unknown" in evaluation.verdict
        assert evaluation.correctness["emulator"]["ok"]


def test_unroll_moves_stay_in_the_space_and_cite_their_preconditions():
    assert {m.id for m in moves_for(HD64)} >= {"unroll_kv", "roll_kv", "schedule_simple"}
    values = HD64.knob("unroll").values
    for candidate in every_candidate(HD64):
        for m in moves_for(HD64):
            actions = m.propose(Context(HD64, candidate))
            if actions is not None:
                moved = apply(candidate, actions, HD64)
                assert moved != candidate and moved.param_dict["unroll"] in values
    up, down = move("unroll_kv"), move("roll_kv")
    top = Candidate("attention_fwd", {"head_dim": 64, "unroll": 4, "policy": "simple"})
    assert up.propose(Context(HD64, top)) is None
    # interleave at unroll 1 -> 2 changes no instruction, so the move is not favoured there
    plain = default_candidate(HD64)
    assert up.prior_at(Context(HD64, plain)) == up.prior / 4
    assert up.prior_at(Context(HD64, apply(plain, [Action("policy", "simple")]))) == up.prior
    short = Problem("attention_fwd", {"BH": 32, "S": 128, "D": 64})
    assert up.prior_at(Context(short, apply(plain, [Action("policy", "simple")]))) < up.prior
    limited = {"occupancy_limited_by": "136 VGPRs per wave"}
    assert down.prior_at(Context(HD64, top, limited)) == down.prior
    assert down.prior_at(Context(HD64, top)) == down.prior / 4

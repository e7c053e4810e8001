"""`T.distinct`, a declared fact about index data: traced with errors at the author's line,
printed and parsed, checked by the interpreter on the actual data, and used by the verifier's
cross-workgroup race check (moe_gemm fully proved; seeded races refuted and replayed)."""

from __future__ import annotations

import pathlib

import attrs
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from markers import expect_misuse_at, line_marked

import argus.lang as T
from argus.absint.concrete import repeated_entries, run
from argus.absint.report import PROVED, REFUTED, UNKNOWN
from argus.absint.verify import verify
from argus.ir import ops as O
from argus.ir.text import ParseError, parse_kernel, print_kernel
from argus.ir.types import GlobalType, IRError, SourceLoc, Value
from argus.kernels import library, moe
from argus.kernels.moe import moe_gemm
from argus.lang import DSLError, Tensor

HERE = pathlib.Path(__file__)
SPEC = T.copy_layout((16, 16), 1, 4)
MOE_SIZES = {"TOKENS": 100, "E": 2, "H": 32, "N": 64}


def marked(tag: str) -> int:
    return line_marked(HERE, tag)


def expect_misuse(kernel_def, tag: str, *fragments: str):
    expect_misuse_at(HERE, kernel_def, tag, *fragments)


# ---------------------------------------------------------------------------------------------
# the DSL and the IR


def test_declaration_traces_to_a_distinct_op_at_the_authors_line():
    ops = [op for op in moe_gemm.ir.ops() if isinstance(op, O.Distinct)]
    assert len(ops) == 1
    op = ops[0]
    assert op.tensor.name == "sorted_ids" and str(op.lo) == "0" and str(op.hi) == "TOKENS"
    assert op.loc.file == "argus/kernels/moe.py"
    line = pathlib.Path(moe.__file__).read_text().splitlines()[op.loc.line - 1]
    # moe_gemm's routes are its tokens (top-1: Y's rows are X's)
    assert "T.distinct(sorted_ids, 0, ROUTES)" in line


def test_index_tensor_must_be_rank_1_i32():
    @T.kernel(waves=1)
    def floats(ids: Tensor("f32", "P"), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        T.distinct(ids, 0, 4)  # float-ids

    @T.kernel(waves=1)
    def matrix(ids: Tensor("i32", "P", 2), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        T.distinct(ids, 0, 4)  # matrix-ids

    @T.kernel(waves=1)
    def tile(X: Tensor("f32", 16, 16)):
        T.grid(1)
        T.distinct(X.load((0, 0), SPEC), 0, 4)  # tile-ids

    expect_misuse(floats, "float-ids", "rank-1 i32 index tensor; ids is f32 of rank 1")
    expect_misuse(matrix, "matrix-ids", "ids is i32 of rank 2")
    expect_misuse(tile, "tile-ids", "about an index tensor argument, not Tile")


def test_bounds_must_be_integers_of_sizes_and_scalars():
    @T.kernel(waves=1)
    def fractional(ids: Tensor("i32", "P"), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        T.distinct(ids, 0, 2.5)  # fraction

    @T.kernel(waves=1)
    def condition(ids: Tensor("i32", "P"), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        T.distinct(ids, 0, ids.shape[0] > 3)  # condition

    @T.kernel(waves=1)
    def per_workgroup(ids: Tensor("i32", "P"), Y: Tensor("f32", 16, 16)):
        T.grid(ids.shape[0])
        T.distinct(ids, T.program_id(0), ids.shape[0])  # per-workgroup

    @T.kernel(waves=1)
    def by_size(ids: Tensor("i32", "P"), Y: Tensor("f32", 16, 16), top: T.Scalar(0, 99)):
        T.grid(1)
        T.distinct(ids, 0, ids.shape[0] + top)

    expect_misuse(fractional, "fraction", "hi must be an integer or a size expression, not 2.5")
    expect_misuse(condition, "condition", "hi must be an integer or a size expression")
    expect_misuse(per_workgroup, "per-workgroup", "uses ['wg0']",
                  "only sizes and scalar arguments")
    op = next(op for op in by_size.ir.ops() if isinstance(op, O.Distinct))
    assert str(op.hi) == "P + top"


def test_declared_inside_a_loop_or_branch_or_outside_a_kernel():
    @T.kernel(waves=1)
    def in_loop(ids: Tensor("i32", "P"), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        for _ in T.range(0, 4):
            T.distinct(ids, 0, 4)  # in-loop

    @T.kernel(waves=1)
    def in_branch(ids: Tensor("i32", "P"), Y: Tensor("f32", 16, 16)):
        T.grid(2)
        with T.when(T.program_id(0).eq(0)):
            T.distinct(ids, 0, 4)  # in-branch

    expect_misuse(in_loop, "in-loop", "top of the kernel body, outside loops and branches")
    expect_misuse(in_branch, "in-branch", "outside loops and branches")
    ids = Value("ids", GlobalType("i32", (16,)))
    with pytest.raises(DSLError, match="only work inside a function traced by @kernel"):
        T.distinct(T.Global(ids), 0, 4)


def test_ir_op_verifies_its_operands():
    loc = SourceLoc("k.py", 3, 5)
    with pytest.raises(IRError, match=r"k.py:3:5: distinct: %X must be a rank-1 i32 index"):
        O.Distinct(Value("X", GlobalType("f32", (16,))), 0, 4, loc=loc).verify()
    ids = Value("ids", GlobalType("i32", (16,)))
    with pytest.raises(IRError, match="hi = '.*' must be an integer expression, not a condition"):
        O.Distinct(ids, 0, ids.type.shape[0] > 3, loc=loc).verify()


def test_text_form_round_trips_and_rejects_a_malformed_range():
    text = print_kernel(moe_gemm.ir)
    assert "distinct tensor=%sorted_ids, lo=0, hi=TOKENS @argus/kernels/moe.py:" in text
    again = parse_kernel(text)
    assert again == moe_gemm.ir and print_kernel(again) == text
    with pytest.raises(ParseError, match=r"distinct: missing field\(s\) \['hi'\]"):
        parse_kernel(text.replace(", hi=TOKENS", ""))
    with pytest.raises(ParseError, match=r"no field\(s\) \['high'\]"):
        parse_kernel(text.replace("hi=TOKENS", "high=TOKENS"))


# ---------------------------------------------------------------------------------------------
# the interpreter checks the declaration on the data


@given(st.lists(st.integers(-3, 9), max_size=24), st.integers(-2, 5), st.integers(0, 10))
def test_repeated_entries_match_brute_force(values, lo, hi):
    ids = np.asarray(values, np.int64)
    pairs = [(p, q) for q in range(len(values)) for p in range(q)
             if values[p] == values[q] and lo <= values[p] < hi]
    found = repeated_entries(ids, lo, hi)
    if not pairs:
        assert found is None
        return
    p, q = found
    assert (p, q) in pairs
    # the earliest position that repeats, with the next position holding its value
    assert p == min(a for a, _ in pairs)
    assert q == min(b for a, b in pairs if a == p)


def _moe_inputs(seed=4):
    return library()["moe_gemm"].inputs(MOE_SIZES, {}, seed=seed)


def test_good_routing_keeps_the_declaration_and_padding_may_repeat():
    inputs = _moe_inputs()
    ids = inputs["sorted_ids"]
    assert np.count_nonzero(ids == MOE_SIZES["TOKENS"]) > 1
    assert run(moe_gemm.ir, inputs).ok


def test_a_token_routed_twice_is_reported_with_both_positions():
    inputs = _moe_inputs()
    ids = inputs["sorted_ids"].copy()
    real = np.flatnonzero(ids < MOE_SIZES["TOKENS"])
    first, second = int(real[3]), int(real[-2])
    ids[second] = ids[first]
    inputs["sorted_ids"] = ids
    result = run(moe_gemm.ir, inputs, max_violations=1000)
    broken = [v for v in result.violations if v.kind == "distinct"]
    assert len(broken) == 1
    violation = broken[0]
    token = int(ids[first])
    assert violation.element == {f"sorted_ids[{first}]": token, f"sorted_ids[{second}]": token}
    assert f"sorted_ids[{first}] = sorted_ids[{second}] = {token}" in violation.detail
    assert "[0, TOKENS)" in violation.message
    assert violation.fails_at(position=second) and not violation.fails_at(position=real[0])
    # the interpreter's own race check sees the two workgroups store one token row
    races = [v for v in result.violations if v.kind == "global-race"]
    if first // 64 != second // 64:
        assert races and all("write/write race" in v.message for v in races)


@st.composite
def index_data(draw):
    """Sizes and index tensors for moe_gemm that keep the declaration: any tokens, each at
    most once, at any positions; the other positions hold ids outside [0, TOKENS)."""
    tokens, experts, blocks = (draw(st.integers(1, 150)), draw(st.integers(1, 3)),
                               draw(st.integers(1, 4)))
    positions = blocks * 64
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    used = min(tokens, positions, draw(st.integers(0, positions)))
    ids = rng.choice([-7, -1, tokens, tokens + 5], positions).astype(np.int32)
    ids[rng.choice(positions, used, replace=False)] = rng.choice(tokens, used, replace=False)
    block_expert = rng.integers(0, experts, blocks).astype(np.int32)
    return tokens, experts, ids, block_expert, rng


@given(index_data(), st.booleans())
def test_data_that_keeps_the_declaration_never_races(data, repeat):
    """The oracle behind the proof: on any index data the declaration allows, the interpreter
    finds no race and no other violation; repeating one token is reported as such."""
    tokens, experts, ids, block_expert, rng = data
    real = np.flatnonzero((ids >= 0) & (ids < tokens))
    if repeat and real.size:
        spare = np.flatnonzero((ids < 0) | (ids >= tokens))
        if not spare.size:
            spare = np.setdiff1d(np.arange(ids.size), real[:1])
        ids = ids.copy()
        ids[rng.choice(spare)] = ids[real[0]]
    x = rng.standard_normal((tokens, 32)).astype(np.float32)
    w = rng.standard_normal((experts, 64, 32)).astype(np.float32)
    inputs = {"X": x, "W": w, "sorted_ids": ids, "block_expert": block_expert,
              "Y": np.zeros((tokens, 64), np.float32)}
    result = run(moe_gemm.ir, inputs, max_violations=1000)
    kinds = {v.kind for v in result.violations}
    if repeat and real.size:
        # a repeated row meets itself across workgroups (global-race) or within one
        assert "distinct" in kinds and kinds <= {"distinct", "global-race", "global-order"}, \
            result.report()
    else:
        assert result.ok, result.report()


# ---------------------------------------------------------------------------------------------
# the verifier


def test_moe_gemm_is_fully_proved():
    report = verify(moe_gemm)
    assert report.ok and all(o.verdict == PROVED for o in report.obligations), str(report)
    assert any(o.kind == "global-race" for o in report.obligations)


def _without_declaration(kernel: O.Kernel) -> O.Kernel:
    ops = tuple(op for op in kernel.body.ops if not isinstance(op, O.Distinct))
    return attrs.evolve(kernel, body=attrs.evolve(kernel.body, ops=ops)).verify()


def _bug(name: str):
    """A module of the bug corpus (tests/bugs)."""
    import importlib
    import sys

    folder = str(HERE.parent / "bugs")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


def test_without_the_declaration_the_gathered_store_stays_unknown_and_names_the_fix():
    report = verify(_without_declaration(moe_gemm.ir))
    open_items = [o for o in report.obligations if o.verdict != PROVED]
    # across workgroups the verifier names the declaration; within one, index data with a
    # repeated row is an admissible input: two threads of the scatter meet (global_order)
    assert sorted((o.kind, o.verdict) for o in open_items) == \
        [("global-order", REFUTED), ("global-race", UNKNOWN)], str(report)
    race = next(o for o in open_items if o.kind == "global-race")
    assert "T.distinct(sorted_ids, lo, hi)" in race.reason
    assert all(o.counterexample.confirmed for o in report.refuted)


def test_workgroups_sharing_a_row_block_are_refuted_and_replayed():
    report = verify(_bug("bug_15_moe_workgroups_share_rows").KERNEL)
    refuted = report.refuted
    assert [o.kind for o in refuted] == ["global-race"], str(report)
    cex = refuted[0].counterexample
    assert cex.confirmed
    assert cex.workgroup[0] // 2 == cex.others[0] // 2 and cex.workgroup[0] != cex.others[0]
    assert all(o.verdict == PROVED for o in report.obligations if o.kind != "global-race")


def test_a_declaration_narrower_than_the_rows_leaves_a_real_race():
    kernel = moe_gemm.ir

    def narrower(op):
        if isinstance(op, O.Distinct):
            return attrs.evolve(op, hi=op.hi - 1)
        return op
    ops = tuple(narrower(op) for op in kernel.body.ops)
    report = verify(attrs.evolve(kernel, body=attrs.evolve(kernel.body, ops=ops)).verify())
    refuted = report.refuted
    # the repeated token meets itself across workgroups and within one (global_order)
    assert sorted(o.kind for o in refuted) == ["global-order", "global-race"], str(report)
    for o in refuted:
        cex = o.counterexample
        assert cex.confirmed
        # only the token the declaration leaves out may repeat
        assert cex.element["Y[0]"] == cex.sizes["TOKENS"] - 1


def test_scalars_loaded_by_two_workgroups_are_two_values():
    @T.kernel(waves=1)
    def shifted(X: Tensor("f32", 16, 16), shift: Tensor("i32", 2), Y: Tensor("f32", 3, 16, 16)):
        T.grid(2)
        p = T.program_id(0)
        s = T.load_scalar(shift, (p,), 0, 2)
        Y.store((p + s, 0, 0), X.load((0, 0), SPEC))

    report = verify(shifted)
    refuted = report.refuted
    assert [o.kind for o in refuted] == ["global-race"], str(report)
    assert refuted[0].counterexample.confirmed
    assert refuted[0].counterexample.element["Y[0]"] == 1


def test_a_witness_that_needs_a_repeated_token_is_never_reported_as_a_bug():
    """Only the race check reads the declaration; elsewhere a witness with a repeated id is
    rejected by the replay instead of being shown as a counterexample."""
    @T.kernel(waves=1)
    def pairs(X: Tensor("f32", "TOKENS", 16), ids: Tensor("i32", 32), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        T.distinct(ids, 0, X.shape[0])
        T.tag(X, lambda t, h: {"token": t, "k": h})
        first = X.load((0, 0), SPEC, gather=T.Gather(ids, 0), guard=True)
        second = X.load((0, 0), SPEC, gather=T.Gather(ids, 16), guard=True)
        total = first + second
        tokens = X.shape[0]
        T.tag_assert(lambda a, b: a.token.ne(b.token) | (a.token < 0) | (a.token >= tokens),
                     "two positions hold two tokens")
        Y.store((0, 0), total)

    report = verify(pairs)
    assertion = next(o for o in report.obligations if o.kind == "tag-assertion")
    assert assertion.verdict != REFUTED, str(report)
    if assertion.verdict == UNKNOWN:
        assert "breaks the declaration" in assertion.reason

"""The else body of `T.when` (`with br.otherwise():`): results against numpy, verifier proofs
and a refutation seeded only in the else branch, the IR text round trip, and misuse errors at
the author's line."""

from __future__ import annotations

import pathlib

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from markers import expect_misuse_at, line_marked

import argus.lang as T
from argus.absint.concrete import run
from argus.absint.report import PROVED
from argus.absint.verify import verify
from argus.ir import ops as O
from argus.ir.text import parse_kernel, print_kernel
from argus.ir.types import ThreadLayout
from argus.lang import Tensor, TileSpec

HERE = pathlib.Path(__file__)
SPEC = T.copy_layout((16, 16), 1, 4)
#: the same tile with rows and columns exchanged between the threads
TRANSPOSED = TileSpec(SPEC.shape, ThreadLayout(1, 4, SPEC.layout.coords[::-1]))


def marked(tag: str) -> int:
    return line_marked(HERE, tag)


def expect_misuse(kernel_def, tag: str, *fragments: str):
    expect_misuse_at(HERE, kernel_def, tag, *fragments)


def _tags(*tensors):
    for tensor in tensors:
        T.tag(tensor, lambda b, i, j: {"blk": b, "row": i, "col": j})


@T.kernel(waves=1)
def halve_or_shift(X: Tensor("f32", "P", 16, 16), S: Tensor("f32", "P", 16, 16),
                   Y: Tensor("f32", "P", 16, 16), *, period: int = 2, else_spec=SPEC):
    """Workgroups p with p % period == period - 1 halve x and keep y; the others keep x and
    set y = x + S[p] (S read through `else_spec`, the seeded bug when transposed)."""
    T.grid(X.shape[0])
    p = T.program_id(0)
    _tags(X, S, Y)
    x = X.load((p, 0, 0), SPEC)
    y = x * 0.0
    with T.when((p % period).eq(period - 1), x=x, y=y) as br:
        br.x = br.x * 0.5
    with br.otherwise():  # else-line
        shift = S.load((p, 0, 0), else_spec)
        br.y = br.x + shift
        T.tag_assert(lambda a, b: a.row.eq(b.row) & a.col.eq(b.col),  # else-assert
                     "x and the shift meet on one element")
    Y.store((p, 0, 0), br.x + br.y)
    T.tag_assert(lambda V, D: V.blk.eq(D.blk) & V.row.eq(D.row) & V.col.eq(D.col),
                 "each element goes back to its place")


def reference(x, s, period):
    then = (np.arange(x.shape[0]) % period == period - 1)[:, None, None]
    return np.where(then, x * 0.5, x + (x + s))


@given(st.integers(1, 6), st.sampled_from([1, 2, 3]), st.integers(0, 2**16))
def test_results_match_numpy(blocks, period, seed):
    rng = np.random.default_rng(seed)
    x, s = (rng.standard_normal((blocks, 16, 16)).astype(np.float32) for _ in range(2))
    result = run(halve_or_shift.trace(period=period), {"X": x, "S": s, "Y": np.zeros_like(x)})
    assert result.ok, result.report()
    np.testing.assert_allclose(result.outputs["Y"], reference(x, s, period), rtol=1e-6,
                               atol=1e-6)


def test_each_body_yields_what_it_assigned_and_the_old_value_otherwise():
    kernel = halve_or_shift.ir
    branch = next(op for op in kernel.ops() if isinstance(op, O.If))
    then_yield, else_yield = branch.then.ops[-1], branch.orelse.ops[-1]
    before = kernel.body.ops[:kernel.body.ops.index(branch)]
    x = next(op.result for op in before if isinstance(op, O.GlobalLoad))
    y = before[-1].result
    assert then_yield.values[1] == y and then_yield.values[0] != x
    assert else_yield.values[0] == x and else_yield.values[1] != y
    assert [r.name.split(".")[0] for r in branch.results] == ["x", "y"]
    assert else_yield.loc.line == marked("else-line")


def test_verifier_proves_both_bodies():
    report = verify(halve_or_shift)
    assert report.ok and all(o.verdict == PROVED for o in report.obligations), str(report)


def test_a_bug_only_in_the_else_body_is_refuted_in_a_workgroup_that_takes_it():
    report = verify(halve_or_shift.trace(else_spec=TRANSPOSED))
    refuted = report.refuted
    # the mismatched sum also reaches the store, as ⊤ tags, in the same workgroups
    assert [o.message for o in refuted] == ["x and the shift meet on one element",
                                            "each element goes back to its place"], str(report)
    assert refuted[0].loc.startswith(f"tests/test_when_else.py:{marked('else-assert')}:")
    for obligation in refuted:
        cex = obligation.counterexample
        assert cex.confirmed
        assert cex.workgroup[0] % 2 == 0  # the else body runs where p % 2 != 1
    first = refuted[0].counterexample
    assert first.tags["X"]["row"] == first.tags["Y"]["col"] != first.tags["Y"]["row"]


@T.kernel(waves=1)
def alternating_sum(X: Tensor("f32", "K", 16, 16), Y: Tensor("f32", 16, 16)):
    """Y = X[0] - X[1] + X[2] - ...: the branch and its else body inside a loop."""
    T.grid(1)
    T.tag(X, lambda k, i, j: {"row": i, "col": j})
    T.tag(Y, lambda i, j: {"row": i, "col": j})
    loop = T.range(0, X.shape[0], acc=X.load((0, 0, 0), SPEC) * 0.0, name="k")
    for k in loop:
        x = X.load((k, 0, 0), SPEC)
        with T.when((k % 2).eq(0), acc=loop.acc) as br:
            br.acc = br.acc + x
        with br.otherwise():
            br.acc = br.acc - x
        loop.acc = br.acc
    Y.store((0, 0), loop.acc)
    T.tag_assert(lambda V, D: V.row.eq(D.row) & V.col.eq(D.col), "each element goes home")


@given(st.integers(1, 7), st.integers(0, 2**16))
def test_else_body_in_a_loop_matches_numpy(depth, seed):
    x = np.random.default_rng(seed).standard_normal((depth, 16, 16)).astype(np.float32)
    result = run(alternating_sum.ir, {"X": x, "Y": np.zeros((16, 16), np.float32)})
    assert result.ok, result.report()
    np.testing.assert_allclose(result.outputs["Y"], x[0::2].sum(0) - x[1::2].sum(0),
                               rtol=1e-5, atol=1e-5)


def test_else_body_in_a_loop_is_proved():
    report = verify(alternating_sum)
    assert report.ok and all(o.verdict == PROVED for o in report.obligations), str(report)


def test_text_form_round_trips():
    for kernel in (halve_or_shift.ir, halve_or_shift.trace(period=3, else_spec=TRANSPOSED),
                   alternating_sum.ir):
        text = print_kernel(kernel)
        assert "} else {" in text and "binary" in text.split("} else {")[1].split("yield")[0]
        again = parse_kernel(text)
        assert again == kernel and print_kernel(again) == text


# ---------------------------------------------------------------------------------------------
# misuse


def test_otherwise_twice():
    @T.kernel(waves=1)
    def twice(X: Tensor("f32", "P", 16, 16)):
        T.grid(X.shape[0])
        x = X.load((T.program_id(0), 0, 0), SPEC)
        with T.when(T.program_id(0).eq(0), x=x) as br:
            br.x = br.x * 2.0
        with br.otherwise():
            br.x = br.x * 3.0
        with br.otherwise():  # second-else
            br.x = br.x * 4.0

    expect_misuse(twice, "second-else", "already has an else body")


def test_otherwise_after_other_work():
    @T.kernel(waves=1)
    def late(X: Tensor("f32", "P", 16, 16)):
        T.grid(X.shape[0])
        x = X.load((T.program_id(0), 0, 0), SPEC)
        with T.when(T.program_id(0).eq(0), x=x) as br:
            br.x = br.x * 2.0
        X.store((T.program_id(0), 0, 0), br.x)
        with br.otherwise():  # late-else
            br.x = br.x * 3.0

    expect_misuse(late, "late-else", "must follow its `with T.when(...)` block directly")


def test_otherwise_inside_its_own_when_or_in_another_block():
    @T.kernel(waves=1)
    def inside(X: Tensor("f32", "P", 16, 16)):
        T.grid(X.shape[0])
        x = X.load((T.program_id(0), 0, 0), SPEC)
        with T.when(T.program_id(0).eq(0), x=x) as br:
            with br.otherwise():  # inside-else
                br.x = br.x * 3.0

    @T.kernel(waves=1)
    def elsewhere(X: Tensor("f32", "P", 16, 16)):
        T.grid(X.shape[0])
        x = X.load((T.program_id(0), 0, 0), SPEC)
        with T.when(T.program_id(0).eq(0), x=x) as br:
            br.x = br.x * 2.0
        with T.when(T.program_id(0).eq(1)):
            with br.otherwise():  # nested-else
                pass

    expect_misuse(inside, "inside-else", "after its `with T.when(...)` block has closed")
    expect_misuse(elsewhere, "nested-else", "in the same block")


def test_else_body_may_only_reassign_carried_values():
    @T.kernel(waves=1)
    def stray(X: Tensor("f32", "P", 16, 16)):
        T.grid(X.shape[0])
        x = X.load((T.program_id(0), 0, 0), SPEC)
        with T.when(T.program_id(0).eq(0), x=x) as br:
            br.x = br.x * 2.0
        with br.otherwise():
            br.z = br.x * 3.0  # stray

    @T.kernel(waves=1)
    def retyped(X: Tensor("f32", "P", 16, 16)):
        T.grid(X.shape[0])
        x = X.load((T.program_id(0), 0, 0), SPEC)
        with T.when(T.program_id(0).eq(0), x=x) as br:
            br.x = br.x * 2.0
        with br.otherwise():
            br.x = br.x.to("bf16")  # retyped

    expect_misuse(stray, "stray", "'z' is not a carried value (carried are ['x'])")
    expect_misuse(retyped, "retyped", "changes type")


def test_a_when_is_entered_once():
    @T.kernel(waves=1)
    def reused(X: Tensor("f32", "P", 16, 16)):
        T.grid(X.shape[0])
        x = X.load((T.program_id(0), 0, 0), SPEC)
        branch = T.when(T.program_id(0).eq(0), x=x)
        with branch:
            branch.x = branch.x * 2.0
        with branch:  # reentered
            branch.x = branch.x * 3.0

    expect_misuse(reused, "reentered", "already entered; open a new T.when per branch")


@T.kernel(waves=1)
def swap_in_other_tags(X: Tensor("f32", "P", 16, 16), Z: Tensor("f32", "P", 16, 16),
                       Y: Tensor("f32", "P", 16, 16)):
    """Odd workgroups replace x by a tile of Z, whose tags have other names: after the branch,
    x carries `row` only where the branch was not taken."""
    T.grid(X.shape[0])
    p = T.program_id(0)
    _tags(X, Y)
    T.tag(Z, lambda b, i, j: {"blk": b, "r": i, "c": j})
    x = X.load((p, 0, 0), SPEC)
    with T.when((p % 2).eq(1), x=x) as br:
        br.x = Z.load((p, 0, 0), SPEC)
    Y.store((p, 0, 0), br.x)
    T.tag_assert(lambda V, D: V.row.eq(D.row) & V.col.eq(D.col),  # missing-row
                 "each element goes back to its place")


def test_a_tag_one_branch_lacks_is_refuted_and_confirmed_as_missing():
    report = verify(swap_in_other_tags)
    [refuted] = report.refuted
    cex = refuted.counterexample
    assert refuted.kind == "tag-assertion" and cex.confirmed
    assert refuted.loc.endswith(f"test_when_else.py:{marked('missing-row')}:5"), refuted.loc
    assert cex.workgroup[0] % 2 == 1
    assert "row" in cex.detail

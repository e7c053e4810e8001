"""Loop induction on ring buffers (verifier-notes property 10): an S-slot LDS ring with
prefetch distance d is correct iff d < S. Proved must mean that brute-force runs of the
interpreter for every trip count up to 2S+2 find no stale read; a stale read found by the
interpreter must never be Proved; a refutation names the smallest violating iteration."""

from __future__ import annotations

from functools import cache

from hypothesis import given
from hypothesis import strategies as st

import argus.lang as T
from argus.absint.verify import verify
from argus.ir.expr import And
from argus.ir.types import ThreadLayout
from argus.lang import Tensor, TileSpec
from argus.testing import as_program, assert_sound, interpreter_violations

ROWS, COLS = 64, 2


def _reversed_rows(spec: TileSpec) -> TileSpec:
    """The copy layout with rows reversed: readers are other lanes than the writers."""
    row, col = spec.layout.coords
    return TileSpec(spec.shape, ThreadLayout(spec.layout.waves, spec.layout.slots,
                                             (ROWS - 1 - row, col)))


def copy_kernel_setup(A, C):
    """The preamble of the single-workgroup copy kernels: ROWS rows, K a multiple of COLS,
    A and C tagged by (row, k); returns K and the copy layout of one tile."""
    M, K = A.shape
    T.assume(M.eq(ROWS))
    T.assume((K % COLS).eq(0))
    T.grid(1)
    T.tag(A, lambda m, k: {"row": m, "k": k})
    T.tag(C, lambda m, k: {"row": m, "k": k})
    return K, T.copy_layout((ROWS, COLS), 1, 2)


@cache
def ring(slots: int, distance: int):
    @T.kernel(waves=1)
    def ring_buffer(A: Tensor("bf16", "M", "K"), C: Tensor("bf16", "M", "K")):
        K, copy = copy_kernel_setup(A, C)
        ring = T.lds((slots, ROWS, COLS), "bf16")
        nk = K // COLS
        for p in range(distance):
            with T.when(nk > p):
                ring.store((p % slots, 0, 0), A.load((0, p * COLS), copy))
        T.barrier()
        for kt in T.range(0, nk, stages=slots):
            with T.when(kt + distance < nk):
                ring.store(((kt + distance) % slots, 0, 0),
                           A.load((0, (kt + distance) * COLS), copy))
            T.barrier()
            x = ring.load((kt % slots, 0, 0), _reversed_rows(copy))
            C.store((0, kt * COLS), x)
            T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.k.eq(D.k)),
                         "tile kt lands on tile kt")
            T.barrier()
    return ring_buffer


@cache
def _observed(slots: int, distance: int):
    """Verdict and brute-force runs of one ring (only 20 exist; hypothesis repeats them); the
    verdict is sound against those runs (argus.testing)."""
    program = as_program(ring(slots, distance))
    sizes = {n: {"M": ROWS, "K": n * COLS} for n in range(1, 2 * slots + 3)}
    report = assert_sound(program, sizes=list(sizes.values()))
    return report, {n: interpreter_violations(program, s) for n, s in sizes.items()}


@given(st.integers(1, 4), st.integers(0, 4))
def test_ring_buffer_verdicts_match_unrolling(slots, distance):
    report, runs = _observed(slots, distance)
    stale = {n: v for n, v in runs.items() if v}
    if report.ok:
        assert not stale, (slots, distance, stale)
        assert distance < slots
        return
    if distance < slots:
        # a correct ring may stay Unknown, but never Refuted
        assert not report.refuted, str(report)
        return
    assert stale, (slots, distance)
    for ob in report.refuted:
        assert ob.counterexample.confirmed
    [first_size] = [min(stale)] if stale else [None]
    assertions = [o for o in report.refuted if o.kind == "tag-assertion"]
    if assertions:
        cex = assertions[0].counterexample
        seen = [v for v in runs[cex.sizes["K"] // COLS] if v.kind == "tag-assertion"]
        assert seen and min(v.iteration[next(iter(v.iteration))] for v in seen) == \
            next(iter(cex.iteration.values()))
        assert cex.sizes["K"] // COLS == first_size or not any(
            v.kind == "tag-assertion" for v in runs[first_size])


@cache
def nested(read_half: int):
    """An inner loop stages two half tiles per outer iteration; the reader wants the second."""
    @T.kernel(waves=1)
    def halves(A: Tensor("bf16", "M", "K"), C: Tensor("bf16", "M", "K")):
        M, K = A.shape
        T.assume(M.eq(ROWS))
        T.assume((K % (2 * COLS)).eq(0))
        T.grid(1)
        T.tag(A, lambda m, k: {"row": m, "k": k})
        T.tag(C, lambda m, k: {"row": m, "k": k})
        copy = T.copy_layout((ROWS, COLS), 1, 2)
        buf = T.lds((2, ROWS, COLS), "bf16")
        for kt in T.range(0, K // (2 * COLS)):
            for half in T.range(0, 2):
                buf.store((half, 0, 0), A.load((0, (2 * kt + half) * COLS), copy))
            T.barrier()
            x = buf.load((read_half, 0, 0), _reversed_rows(copy))
            C.store((0, (2 * kt + 1) * COLS), x)
            T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.k.eq(D.k)), "second half lands")
            T.barrier()
    return halves


def test_writes_of_a_nested_loop_reach_the_outer_loop():
    assert verify(nested(1)).ok
    wrong = verify(nested(0))
    [refuted] = [o for o in wrong.refuted if o.kind == "tag-assertion"]
    cex = refuted.counterexample
    assert cex.confirmed and cex.tags["V"]["k"] == cex.tags["D"]["k"] - COLS
    assert interpreter_violations(as_program(nested(0)), {"M": ROWS, "K": 2 * COLS})


@T.kernel(waves=1)
def accumulate_rows(A: Tensor("f32", "M", "K"), C: Tensor("f32", "M", "K")):
    """Sum the K tiles of A into one carried tile: its `k` tag changes every iteration, its
    `row` tag never does."""
    K, copy = copy_kernel_setup(A, C)
    acc = T.tag(T.zeros(copy), lambda r, c: {"row": r, "k": c})
    loop = T.range(0, K // COLS, acc=acc)
    for kt in loop:
        loop.acc = loop.acc + A.load((0, kt * COLS), copy)
    C.store((0, 0), loop.acc)
    T.tag_assert(lambda V, D: V.row.eq(D.row), "each row's sum lands on its row")


def test_widening_is_per_tag_a_changing_tag_leaves_the_stable_ones_exact():
    # issue 13: an accumulation made every tag of the carried tile ⊤, so the assertion on the
    # row (which never changes) was Unknown
    report = verify(accumulate_rows)
    assert report.ok and not report.unknown, str(report)
    assert not interpreter_violations(as_program(accumulate_rows), {"M": ROWS, "K": 3 * COLS})

"""The LDS model against brute force: address-map inverses and tile coverage by enumeration,
and a store / barrier / load round trip through two views of one buffer with random XOR
swizzles, whose verdict must agree with the reference interpreter."""

from __future__ import annotations

from functools import cache

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import argus.lang as T
from argus.absint import lds as L
from argus.absint.concrete import run
from argus.absint.verify import verify
from argus.ir.expr import And
from argus.ir.types import AddressMap, ThreadLayout, coord_vars
from argus.lang import Tensor, TileSpec
from argus.testing import slow_examples

ROWS, COLS = 32, 8
SWIZZLES = [None, (1, 0, 3), (1, 1, 3), (2, 0, 3), (2, 1, 3), (1, 0, 4), (3, 0, 3), (1, 2, 3),
            (2, 0, 4)]


def test_bijection_and_coverage_by_enumeration():
    c0, c1 = coord_vars((4, 8))
    assert L.is_bijection(AddressMap((4, 8), c0 * 8 + c1))
    assert L.is_bijection(AddressMap((4, 8), c0 * 8 + (c1 ^ c0)))
    assert not L.is_bijection(AddressMap((4, 8), c0 * 8 + c1 // 2))
    assert not L.is_bijection(AddressMap((4, 8), c0 * 9 + c1))
    copy = T.copy_layout((ROWS, COLS), 1, 2).layout
    assert L.covers_tile(copy, (ROWS, COLS))
    half = ThreadLayout(1, copy.slots, (copy.coords[0] // 2, copy.coords[1]))
    assert not L.covers_tile(half, (ROWS, COLS))


def _reversed_rows(spec: TileSpec) -> TileSpec:
    row, col = spec.layout.coords
    return TileSpec(spec.shape, ThreadLayout(spec.layout.waves, spec.layout.slots,
                                             (ROWS - 1 - row, col)))


@cache
def round_trip(write_swizzle, read_swizzle, barrier: bool):
    @T.kernel(waves=1)
    def lds_round_trip(A: Tensor("bf16", "M", "K"), C: Tensor("bf16", "M", "K")):
        M, K = A.shape
        T.assume(M.eq(ROWS))
        T.assume(K.eq(COLS))
        T.grid(1)
        T.tag(A, lambda m, k: {"row": m, "k": k})
        T.tag(C, lambda m, k: {"row": m, "k": k})
        copy = T.copy_layout((ROWS, COLS), 1, 2)
        buffer = T.lds((ROWS, COLS), "bf16", swizzle=write_swizzle)
        view = buffer.view(T.lds_layout((ROWS, COLS), read_swizzle))
        buffer.store((0, 0), A.load((0, 0), copy))
        if barrier:
            T.barrier()
        x = view.load((0, 0), _reversed_rows(copy))
        C.store((0, 0), x)
        T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.k.eq(D.k)), "round trip")
    return lds_round_trip


@settings(max_examples=slow_examples())   # a proof and interpreter runs an example
@given(st.sampled_from(SWIZZLES), st.sampled_from(SWIZZLES), st.booleans())
def test_round_trip_verdict_matches_the_interpreter(write, read, barrier):
    kernel = round_trip(write, read, barrier)
    report = verify(kernel)
    zeros = np.zeros((ROWS, COLS), np.float32)
    violations = run(kernel.trace(), {"A": zeros, "C": zeros}).violations
    assert report.ok == (not violations), (write, read, barrier, str(report))
    if report.ok:
        return
    assert all(o.counterexample.confirmed for o in report.refuted)
    found = {v.kind for v in violations}
    assert {o.kind for o in report.refuted} <= found | {"tag-assertion"}
    if not barrier:
        assert any(o.kind == "lds-race" for o in report.refuted)


@T.kernel(waves=1)
def lds_reuse(A: Tensor("f32", "M", "K"), B: Tensor("f32", "M", "K"),
              C: Tensor("f32", "M", "K")):
    """One LDS block holds A's tile (tags row, k), then B's (tag key): the overwrite replaces
    the block's tags, so the second read carries `key` alone and A's tags stay exact in the
    sum (attention kernels reuse one block for P and then K the same way)."""
    M, K = A.shape
    T.assume(M.eq(ROWS))
    T.assume(K.eq(COLS))
    T.grid(1)
    T.tag(A, lambda m, k: {"row": m, "k": k})
    T.tag(B, lambda m, k: {"key": m})
    T.tag(C, lambda m, k: {"row": m, "k": k})
    copy = T.copy_layout((ROWS, COLS), 1, 2)
    block = T.lds((ROWS, COLS), "f32")
    block.store((0, 0), A.load((0, 0), copy))
    T.barrier()
    a = block.load((0, 0), copy)
    T.barrier()
    block.store((0, 0), B.load((0, 0), copy))
    T.barrier()
    b = block.load((0, 0), copy)
    C.store((0, 0), a + b)
    T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.k.eq(D.k)), "A's element lands in place")


def test_an_lds_overwrite_replaces_the_regions_tags():
    # issue 13: the old names stayed as ⊤ after the overwrite (false alarm, "confirmed" by the
    # interpreter, which applied the same rule)
    report = verify(lds_reuse)
    assert report.ok and not report.unknown, str(report)
    inputs = {n: np.zeros((ROWS, COLS), np.float32) for n in "ABC"}
    assert not run(lds_reuse.trace(), inputs).violations

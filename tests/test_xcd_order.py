"""The XCD-aware grid order (`xcd_order`, issue 23) of the GEMM, attention and MoE kernels:
each runs its tiles with the axis of the shared operand's readers fastest, so that (with the
dispatcher dealing flat ids to the XCDs round-robin) those readers share one XCD's L2. Proved
for every size, ragged grids (tile counts not a multiple of 8) included, and right in the
reference interpreter on such grids."""

from __future__ import annotations

import pytest
from roads import interpreted

import argus
from argus.kernels import gemm


def test_the_gemm_in_xcd_order_is_proved_for_every_size():
    """The race and bounds obligations over symbolic M, N, K: no two workgroups store one C
    element and every index stays inside, whatever the tile counts (the grid has exactly one
    workgroup per tile, so the order covers every tile once)."""
    report = argus.verify(gemm.gemm, xcd_order=True)
    assert report.ok and not report.unknown, str(report)
    assert "N >> 6, M >> 6" in str(report)          # the grid runs N fastest


@pytest.mark.parametrize("sizes,params", [
    ({"M": 192, "N": 320, "K": 64}, {}),                          # 3 x 5 tiles: ragged
    ({"M": 64, "N": 576, "K": 128}, {"split_k": 2}),              # 1 x 9 tiles, 2 splits
])
def test_the_gemm_in_xcd_order_computes_every_tile_of_a_ragged_grid(sizes, params):
    check = interpreted("gemm", sizes, {"xcd_order": True, **params}).interp
    assert check.run.ok, check.run.report()
    assert check.max_error < 1e-4


@pytest.mark.parametrize("name,sizes,params", [
    ("attention_fwd_gqa", {"BH": 3, "G": 2, "S": 96, "D": 64}, {"head_dim": 64, "causal": True}),
    ("attention_fwd", {"BH": 3, "S": 96, "D": 64}, {"head_dim": 64}),
    ("moe_gemm", {"TOKENS": 130, "E": 3, "H": 64, "N": 192}, {}),
])
def test_attention_and_moe_in_xcd_order_are_right_on_ragged_grids(name, sizes, params):
    check = interpreted(name, sizes, {"xcd_order": True, **params}).interp
    assert check.run.ok, check.run.report()
    assert check.max_error < (2e-2 if name.startswith("attention") else 1e-5)


def test_the_xcd_order_runs_a_shared_operands_readers_a_multiple_of_8_ids_apart():
    """The orders are the grids': key/value heads first for grouped attention (a causal grid
    keeps its heaviest query tiles first, on the slowest axis), column blocks first for the
    MoE GEMM. In the model (`readers_of`, `past_l2`) the readers of a K/V head, of a W tile,
    then sit on one of the 8 XCDs instead of all of them."""
    import math

    from argus.ir.expr import evaluate
    from argus.isa_cdna3.perf.model import past_l2
    from argus.isa_cdna3.perf.sample import readers_of
    from argus.kernels import attention, moe

    cases = ((attention.attention_fwd_gqa, {"head_dim": 128, "causal": True},
              {"BH": 8, "G": 8, "S": 1024, "D": 128}, "K", (8, 8, 8)),
             (moe.moe_gemm_fp8_kblocked, {}, {"TOKENS": 512, "ROUTES": 512, "H": 6144, "E": 8,
                                              "KT": 96, "N": 8192, "P": 1024, "BLOCKS": 32}, "W",
              (64, 32)))
    for kernel, params, sizes, shared, grid in cases:
        fetched = {}
        for order in (False, True):
            ir = kernel.trace(**params, xcd_order=order)
            extents = tuple(int(evaluate(e, sizes)) for e in ir.grid)
            readers = dict(zip([t.name for t in ir.tensors], readers_of(ir, extents, sizes)))
            fetched[order] = past_l2([readers[shared]], 8, math.prod(extents), 1216)[0]
            if order:
                assert extents == grid
        assert fetched[True] == readers[shared][0] < fetched[False], kernel.name


def test_the_searchs_transpose_grid_rewrite_reaches_the_xcd_order():
    """The search needs no knob for it: its `transpose_grid` rewrite (axes 0 and 1 swapped)
    gives the xcd_order grid and readers of each tuning family it applies to (the GEMM, the MoE
    GEMM, attention; the grouped-query kernels, whose order moves the third axis, are no
    tuning family)."""
    from argus.ir.expr import evaluate
    from argus.isa_cdna3.perf.sample import readers_of
    from argus.kernels import attention, moe
    from argus.search.rewrites import apply_rewrites

    for kernel, sizes in ((gemm.gemm, {"M": 384, "N": 4096, "K": 4096}),
                          (moe.moe_gemm_fp8_kblocked, {"TOKENS": 512, "ROUTES": 512, "H": 6144,
                                                       "E": 8, "KT": 96, "N": 8192, "P": 1024,
                                                       "BLOCKS": 32}),
                          (attention.attention_fwd, {"BH": 8, "S": 2048, "D": 64})):
        seen = []
        for ir in (apply_rewrites(kernel.trace(), [("transpose_grid", (0,))]),
                   kernel.trace(xcd_order=True)):
            grid = tuple(int(evaluate(e, sizes)) for e in ir.grid)
            seen.append((grid, readers_of(ir, grid, sizes)))
        assert seen[0] == seen[1], kernel.name
        default = tuple(int(evaluate(e, sizes)) for e in kernel.trace().grid)
        assert seen[0][0] == default[::-1] != default, kernel.name

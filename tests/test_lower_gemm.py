"""The backend end to end: the library GEMM compiled to a gfx942 code object and run in the
strict emulator (no hazard, no missing wait, strict memory) against numpy, with several sizes
per code object."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ml_dtypes import bfloat16

import argus
import argus.lang as T
from argus.isa_cdna3.abi import LaunchError
from argus.kernels import library
from argus.lang import Tensor

GEMM = library()["gemm"]
SMALL = "v_mfma_f32_16x16x16_bf16"

#: (tile parameters, sizes run with the same code object)
CONFIGS = [
    ({}, [(64, 64, 32), (128, 192, 96)]),
    ({"block_m": 128, "block_n": 128}, [(128, 256, 64)]),
    ({"block_k": 64}, [(192, 64, 128)]),
    ({"instr": SMALL}, [(64, 128, 64)]),
    ({"split_k": 2}, [(64, 128, 128)]),
    ({"split_k": 4, "block_k": 64, "block_n": 128}, [(128, 128, 256)]),
    # prefetch=2: 2 K tiles (no loop iteration), odd and even trip counts, split-K, 16x16x16
    ({"prefetch": 2}, [(64, 64, 64), (64, 128, 160), (128, 64, 192)]),
    ({"prefetch": 2, "block_k": 64, "split_k": 2}, [(64, 64, 256), (64, 128, 384)]),
    ({"prefetch": 2, "instr": SMALL, "block_k": 128}, [(64, 64, 512)]),
    ({"direct_lds": True}, [(64, 64, 32), (128, 64, 96)]),
    ({"direct_lds": True, "split_k": 2, "instr": SMALL}, [(64, 128, 128)]),
    # swizzled DMA copies at the other swizzles of swizzle_for, and unswizzled
    ({"direct_lds": True, "block_k": 64}, [(64, 64, 192)]),
    ({"direct_lds": True, "block_k": 128}, [(64, 64, 256)]),
    ({"direct_lds": True, "swizzle": False}, [(64, 64, 64)]),
]


def run_gemm(compiled, params, M, N, K, seed=0):
    inputs = GEMM.inputs({"M": M, "N": N, "K": K}, params, seed)
    emulation = compiled.run(inputs["A"], inputs["B"], inputs["C"], check="strict")
    reference = GEMM.reference(inputs, params)
    error = np.abs(inputs["C"] - reference).max() / max(np.abs(reference).max(), 1)
    return error, emulation


@pytest.mark.parametrize("params,sizes", CONFIGS,
                         ids=[",".join(f"{k}={v}" for k, v in p.items()) or "default"
                              for p, _ in CONFIGS])
def test_gemm_matches_numpy_on_the_strict_emulator(params, sizes):
    compiled = argus.compile(GEMM.kernel, **params)
    for M, N, K in sizes:
        error, emulation = run_gemm(compiled, params, M, N, K)
        assert error < GEMM.tolerance, (params, M, N, K, error)
        assert not emulation.hazards
        want = compiled.grid(M=M, N=N, K=K)
        assert emulation.workgroups == np.prod(want)


@settings(max_examples=max(3, settings.default.max_examples // 10), deadline=None)
@given(tile=st.sampled_from([({}, 64, 64, 32), ({"instr": SMALL, "block_k": 64}, 64, 64, 64),
                             ({"split_k": 2}, 64, 64, 64)]),
       m=st.integers(1, 3), n=st.integers(1, 3), k=st.integers(1, 4), seed=st.integers(0, 9))
def test_gemm_sizes_and_tiles(tile, m, n, k, seed):
    params, bm, bn, bk = tile
    compiled = argus.compile(GEMM.kernel, **params)
    error, _ = run_gemm(compiled, params, m * bm, n * bn, k * bk, seed)
    assert error < GEMM.tolerance


def test_sizes_that_break_an_assumption_are_refused():
    compiled = argus.compile(GEMM.kernel)
    inputs = GEMM.inputs({"M": 64, "N": 64, "K": 48}, {})
    with pytest.raises(LaunchError, match="assumption"):
        compiled.run(inputs["A"], inputs["B"], inputs["C"])


def test_prefetch_two_refuses_a_single_k_tile():
    """prefetch=2 consumes two K tiles outside its loop: K = one tile breaks its assumption."""
    compiled = argus.compile(GEMM.kernel, prefetch=2)
    inputs = GEMM.inputs({"M": 64, "N": 64, "K": 32}, {"prefetch": 2})
    with pytest.raises(argus.pipeline.LaunchError, match="assumption"):
        compiled.run(inputs["A"], inputs["B"], inputs["C"])


@pytest.mark.parametrize("block_k", [32, 64])
def test_swizzled_operand_reads_are_conflict_free(block_k):
    """The swizzle chosen for block_k spreads each ds_read_b64 phase (16 rows at one 8-byte
    chunk) over all 32 banks: the model sees no LDS conflicts (the fixed Sw<3,2,3> made both
    2-way, 4-way at block_k 64)."""
    compiled = argus.compile(GEMM.kernel, block_m=128, block_n=128, block_k=block_k)
    estimate = argus.time(compiled, sizes={"M": 128, "N": 128, "K": 2 * block_k})
    assert estimate.lds_conflict == 1.0


def test_resources_and_layout():
    compiled = argus.compile(GEMM.kernel)
    assert [k[0] for k in compiled.kernargs] == ["A", "B", "C", "M", "K", "N"]
    res = compiled.resources
    assert res["lds_bytes"] == 2 * 2 * 64 * 32 * 2
    assert 0 < res["vgprs"] <= 256 and 0 < res["sgprs"] <= 102
    assert 1 <= res["waves_per_simd"] <= 8
    assert compiled.code.kernels[0].group_segment_size == res["lds_bytes"]
    assert compiled.grid(M=128, N=192, K=32) == (2, 3)


def test_an_empty_grid_is_refused_and_compilations_are_cached():
    compiled = argus.compile(GEMM.kernel)
    assert argus.compile(GEMM.kernel) is compiled
    assert argus.compile(GEMM.kernel, policy="simple") is not compiled
    inputs = GEMM.inputs({"M": 64, "N": 64, "K": 32}, {})
    # M=0 lies outside the range [1, 2^31) the kernel declares for M, so no launch is tried
    with pytest.raises(LaunchError, match=r"M=0 is not a whole number in its range \[1, "):
        compiled.run(inputs["A"][:0], inputs["B"], np.zeros((0, 64), np.float32))


@T.kernel(waves=4)
def row_sums_by_mfma(A: Tensor("bf16", "M", "K"), B: Tensor("bf16", 32, "K"),
                     C: Tensor("f32", "M", 32), *, unroll: int = 4):
    """C = A @ B.T with one 32x32x8 MFMA step per iteration and no LDS: the loop's unroll hint
    is honoured for any trip count (a remainder runs the iterations left over)."""
    instr = "v_mfma_f32_32x32x8_bf16"
    M, K = A.shape
    T.assume((M % 128).eq(0))
    T.assume((K % 8).eq(0))
    T.grid(M // 128)
    a_spec = T.mfma_layout(instr, "a", (4, 1))
    b_spec = T.mfma_layout(instr, "b", (4, 1))
    row = T.program_id(0) * 128
    loop = T.range(0, K // 8, unroll=unroll, name="k",
                   acc=T.zeros(T.mfma_layout(instr, "c", (4, 1))))
    for k in loop:
        a = A.load((row, k * 8), a_spec)
        b = B.load((0, k * 8), b_spec)
        loop.acc = T.mfma(instr, a, b, loop.acc)
    C.store((row, 0), loop.acc)


@pytest.mark.parametrize("policy", ["simple", "interleave"])
def test_unroll_hint_with_every_remainder(policy):
    compiled = argus.compile(row_sums_by_mfma, policy=policy)
    assert compiled.text.count("v_mfma_f32_32x32x8_bf16") >= 4 + 3
    rng = np.random.default_rng(3)
    for k in (8, 16, 24, 32, 40, 56):
        A = rng.standard_normal((128, k)).astype(bfloat16)
        B = rng.standard_normal((32, k)).astype(bfloat16)
        C = np.zeros((128, 32), np.float32)
        compiled.run(A, B, C)
        reference = A.astype(np.float32) @ B.astype(np.float32).T
        assert np.abs(C - reference).max() < 1e-3 * max(1, np.abs(reference).max()), k


@T.kernel(waves=4)
def copy_or_swap(X: Tensor("bf16", "R", 32), Y: Tensor("bf16", "R", 32),
                 Z: Tensor("bf16", "R", 32)):
    """Workgroups in the first half of the rows copy X, the others Z, through a uniform
    branch with a result; tiles in the last quarter of the rows skip the store entirely."""
    R = X.shape[0]
    T.assume((R % 256).eq(0))
    T.grid(R // 64)
    row = T.program_id(0) * 64
    spec = T.copy_layout((64, 32), 4, 8)
    tile = X.load((row, 0), spec)
    with T.when(row * 2 >= R, tile=tile) as br:
        br.tile = Z.load((row, 0), spec)
    with T.when(row * 4 < R * 3):
        Y.store((row, 0), br.tile)


@pytest.mark.parametrize("policy", ["simple", "interleave"])
def test_uniform_branches(policy):
    compiled = argus.compile(copy_or_swap, policy=policy)
    assert "s_cbranch_scc0" in compiled.text
    rng = np.random.default_rng(4)
    for rows in (256, 512):
        X, Z = (rng.standard_normal((rows, 32)).astype(bfloat16) for _ in range(2))
        Y = np.zeros_like(X)
        compiled.run(X, Y, Z)
        want = np.concatenate([X[:rows // 2], Z[rows // 2:]]).view(np.uint16).copy()
        want[rows * 3 // 4:] = 0
        assert np.array_equal(Y.view(np.uint16), want)


@T.kernel(waves=4)
def copy_band(X: Tensor("bf16", "R", 32), Y: Tensor("bf16", "R", 32)):
    """Only the tiles in the middle half of the rows are copied (a compound condition)."""
    R = X.shape[0]
    T.assume((R % 256).eq(0))
    T.grid(R // 64)
    row = T.program_id(0) * 64
    with T.when(((row * 4 >= R) & (row * 4 < R * 3)) | (row < 0)):
        Y.store((row, 0), X.load((row, 0), T.copy_layout((64, 32), 4, 8)))


def test_compound_uniform_condition():
    compiled = argus.compile(copy_band)
    assert "s_cselect_b32" in compiled.text and "s_and_b32" in compiled.text
    X = np.random.default_rng(5).standard_normal((512, 32)).astype(bfloat16)
    Y = np.zeros_like(X)
    compiled.run(X, Y)
    want = np.zeros_like(X.view(np.uint16))
    want[128:384] = X.view(np.uint16)[128:384]
    assert np.array_equal(Y.view(np.uint16), want)


@pytest.mark.parametrize("params", [{}, {"block_m": 128, "block_k": 64}])
def test_moe_gemm_gathers_rows_and_matches_numpy(params):
    """The MoE GEMM: expert id by a scalar load, token rows gathered through the index tensor
    (padding rows read 0 and are not written, by the buffer resource's bound)."""
    from roads import emulated

    for sizes in ({"TOKENS": 200, "H": 64, "E": 4, "N": 128},
                  {"TOKENS": 77, "H": 128, "E": 3, "N": 64}):
        done = emulated("moe_gemm", sizes, params, seed=2)
        assert done.emulated.ok and not done.emulated.run.hazards, (sizes, done.emulated.message)
    assert "s_load_dword" in done.compiled.text


@T.kernel(waves=4)
def alternate(X: Tensor("f32", 64, 32), Y: Tensor("f32", "ROUNDS", 64, 32)):
    """Two loop-carried tiles that start equal and swap every iteration: round r stores the
    tile carried in `a`, so rounds alternate between X and the zeros."""
    T.grid(1)
    spec = T.copy_layout((64, 32), 4, 4)
    x = X.load((0, 0), spec)
    loop = T.range(0, Y.shape[0], name="r", a=x, b=T.zeros(spec))
    for r in loop:
        Y.store((r, 0, 0), loop.a, axes=(1, 2))
        loop.a, loop.b = loop.b, loop.a


@T.kernel(waves=4)
def twice(X: Tensor("f32", 64, 32), Y: Tensor("f32", "ROUNDS", 64, 32)):
    """One tile carried twice from the same initial value."""
    T.grid(1)
    spec = T.copy_layout((64, 32), 4, 4)
    x = X.load((0, 0), spec)
    loop = T.range(0, Y.shape[0], name="r", a=x, b=x)
    for r in loop:
        Y.store((r, 0, 0), loop.b, axes=(1, 2))
        loop.a, loop.b = T.zeros(spec), loop.a


@pytest.mark.parametrize("policy", ["simple", "interleave"])
def test_loop_carried_values_swap_and_share_an_initial_value(policy):
    X = np.arange(64 * 32, dtype=np.float32).reshape(64, 32) + 1
    Y = np.full((5, 64, 32), -1, np.float32)
    argus.compile(alternate, policy=policy).run(X, Y)
    for r in range(5):
        assert np.array_equal(Y[r], X if r % 2 == 0 else 0 * X), r
    Y = np.full((3, 64, 32), -1, np.float32)
    argus.compile(twice, policy=policy).run(X, Y)
    assert np.array_equal(Y[0], X) and np.array_equal(Y[1], X) and not Y[2].any()


@T.kernel(waves=4)
def copy_from(X: Tensor("bf16", "R", 32), Y: Tensor("bf16", "R", 32), first: T.Scalar(0, 1 << 20)):
    """Copies the 64-row tiles from row `first` on; earlier tiles stay untouched."""
    R = X.shape[0]
    T.assume((R % 64).eq(0))
    T.assume((first % 64).eq(0))
    T.assume(first <= R)
    T.grid(R // 64)
    row = T.program_id(0) * 64
    with T.when(row >= first):
        Y.store((row, 0), X.load((row, 0), T.copy_layout((64, 32), 4, 8)))


def test_scalar_arguments_are_passed_and_checked():
    compiled = argus.compile(copy_from)
    assert [k[0] for k in compiled.kernargs] == ["X", "Y", "R", "first"]
    X = np.random.default_rng(6).standard_normal((256, 32)).astype(bfloat16)
    Y = np.zeros_like(X)
    compiled.run(X, Y, first=128)
    assert not Y[:128].view(np.uint16).any()
    assert np.array_equal(Y[128:].view(np.uint16), X[128:].view(np.uint16))
    with pytest.raises(LaunchError, match="first="):
        compiled.run(X, Y)
    with pytest.raises(LaunchError, match="assumption"):
        compiled.run(X, Y, first=100)
    with pytest.raises(LaunchError, match="declared range"):
        compiled.run(X, Y, first=-64)


@T.kernel(waves=4)
def elementwise(X: Tensor("f32", "R", 32), Y: Tensor("bf16", "R", 32), Z: Tensor("f32", "R", 32)):
    """f32 arithmetic and transcendentals, a cast to bf16 (round to nearest even) and back."""
    R = X.shape[0]
    T.assume((R % 64).eq(0))
    T.grid(R // 64)
    row = T.program_id(0) * 64
    spec = T.copy_layout((64, 32), 4, 4)
    x = X.load((row, 0), spec)
    y = T.maximum(T.exp2(x * 0.5) - x, -x) * T.rcp(T.full(spec, 4.0))
    y16 = y.to("bf16")
    Y.store((row, 0), y16)
    Z.store((row, 0), T.minimum(y16.to("f32"), T.full(spec, 1e30)))


def test_elementwise_ops_and_rounding_casts():
    compiled = argus.compile(elementwise)
    rng = np.random.default_rng(7)
    X = (rng.standard_normal((128, 32)) * 4).astype(np.float32)
    X[0, :4] = [np.nan, 100.0, -np.inf, 0.0]
    Y, Z = np.zeros((128, 32), bfloat16), np.zeros((128, 32), np.float32)
    compiled.run(X, Y, Z)
    with np.errstate(invalid="ignore"):
        want = np.maximum(np.exp2(X * 0.5) - X, -X) * np.float32(0.25)
    want16 = want.astype(bfloat16)                 # ml_dtypes rounds to nearest even
    close = np.isclose(Y.astype(np.float32), want16.astype(np.float32), rtol=2e-2, atol=1e-6,
                       equal_nan=True)
    assert close.all(), np.argwhere(~close)[:5]
    finite = np.isfinite(want)
    exact = Y.view(np.uint16)[finite] == want16.view(np.uint16)[finite]
    assert exact.mean() > 0.95                     # v_exp_f32 may differ from numpy in the last bit
    assert np.isnan(Y[0, 0].astype(np.float32))
    assert Z[0, 0] == np.float32(1e30)             # v_min_f32 is minNum: NaN yields the other
    assert np.array_equal(Z[1:], np.minimum(Y[1:].astype(np.float32), 1e30))


C_SPEC_MFMA = "v_mfma_f32_32x32x8_bf16"


@T.kernel(waves=4)
def column_softmax(S: Tensor("f32", 32, 128), M: Tensor("f32", 128), L: Tensor("f32", 128),
                   P: Tensor("f32", 32, 128)):
    """Softmax statistics down the columns of an MFMA accumulator tile: a coordinate mask, a
    max reduction, a broadcast back, exp2 and a sum reduction (flash attention's steps)."""
    T.grid(1)
    spec = T.mfma_layout(C_SPEC_MFMA, "c", (1, 4))
    column = T.reduced(spec, 0)
    s = T.mask(S.load((0, 0), spec), lambda i, j: i <= j % 32 + 4, -float("inf"))
    m = T.reduce(s, "max", 0, column)
    p = T.exp2(s - T.broadcast(m, 0, spec))
    M.store((0,), m)
    L.store((0,), T.reduce(p, "sum", 0, column))
    P.store((0, 0), p)


def test_reductions_broadcasts_and_masks_across_lanes():
    compiled = argus.compile(column_softmax)
    assert "ds_bpermute_b32" in compiled.text and "v_cndmask_b32_e64" in compiled.text
    S = np.random.default_rng(8).standard_normal((32, 128)).astype(np.float32)
    M, L, P = np.zeros(128, np.float32), np.zeros(128, np.float32), np.zeros_like(S)
    compiled.run(S, M, L, P)
    i, j = np.meshgrid(np.arange(32), np.arange(128), indexing="ij")
    masked = np.where(i <= j % 32 + 4, S, -np.inf)
    m = masked.max(axis=0)
    p = np.exp2(masked - m)
    assert np.array_equal(M, m)
    assert np.allclose(P, p, rtol=1e-5, atol=0) and np.allclose(L, p.sum(axis=0), rtol=1e-5)


@pytest.mark.parametrize("sizes,params", [({"BH": 1, "S": 128}, {}),
                                          ({"BH": 2, "S": 256}, {"causal": True})],
                         ids=["plain", "causal"])
def test_flash_attention_matches_numpy(sizes, params):
    """The library's flash attention forward: online softmax (masks, cross-lane max and sum,
    exp2), bf16 casts, V staged transposed with 16-bit LDS stores so that V^T is read in whole
    registers, transposed bf16 stores."""
    from roads import emulated

    done = emulated("attention_fwd", sizes, params)
    assert done.emulated.ok and not done.emulated.run.hazards, done.emulated.message
    text = done.compiled.text
    assert "ds_bpermute_b32" in text and "ds_write_b16" in text and "ds_read_u16" not in text


def test_direct_lds_gemm_is_proved_and_copies_without_registers():
    """`direct_lds`: A and B reach LDS by `buffer_load_dword ... lds` (M0 set per copy, the
    copy's group waited for by vmcnt), none by ds_write; proved for symbolic sizes."""
    report = argus.verify(GEMM.kernel, direct_lds=True)
    assert report.ok and not report.unknown, str(report)
    text = argus.compile(GEMM.kernel, direct_lds=True).text
    body = [line.split() for line in text.splitlines() if line.startswith(" ")]
    copies = [words for words in body if words[0] == "buffer_load_dword"]
    assert copies and all(words[-1] == "lds" for words in copies)
    assert not any(words[0].startswith("ds_write") for words in body)
    assert any(words[0] == "s_mov_b32" and words[1].rstrip(",") == "m0" for words in body)


def test_direct_lds_copies_into_swizzled_lds_without_bank_conflicts():
    """Under `swizzle` each lane of a DMA copy fetches the element whose swizzled LDS dword it
    writes (`dma_copy_layout`), so the MFMA operand reads are conflict-free (modelled factor
    1.0; the unswizzled DMA'd tiles read 4-way conflicted) and the copies stay one
    `buffer_load_dword ... lds` per dword; the layout is a bijection onto the tile."""
    from argus.ir.layout import Swizzle
    from argus.kernels.gemm import dma_copy_layout, swizzle_for

    for block_k in (32, 64, 128):
        sw = swizzle_for(block_k)
        rows, cols = dma_copy_layout((64, block_k), 4, sw).layout.table()   # (wave, lane, slot)
        assert len(set(zip(rows.ravel(), cols.ravel()))) == 64 * block_k      # a bijection
        placed = np.vectorize(Swizzle(*sw))(rows * block_k + cols)           # swizzled offset
        # slot s of lane l of wave w lands at dword (s // 2) * 256 + 64 w + l of the tile
        wave, lane, slot = np.meshgrid(np.arange(4), np.arange(64), np.arange(rows.shape[2]),
                                       indexing="ij")
        assert (placed == ((slot // 2) * 256 + wave * 64 + lane) * 2 + slot % 2).all()
    sizes = {"M": 1024, "N": 1024, "K": 1024}
    swizzled = argus.time(argus.compile(GEMM.kernel, verify=False, direct_lds=True),
                          sizes=sizes, gpu="mi300x")
    plain = argus.time(argus.compile(GEMM.kernel, verify=False, direct_lds=True, swizzle=False),
                       sizes=sizes, gpu="mi300x")
    assert swizzled.lds_conflict < 1.05 < 3 < plain.lds_conflict
    assert swizzled.microseconds < 0.8 * plain.microseconds
    text = argus.compile(GEMM.kernel, verify=False, direct_lds=True).text
    assert "ds_write" not in text and " lds" in text

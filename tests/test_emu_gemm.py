"""Conformance: AMD's hand-written bf16 GEMMs (amd-aiter, gfx942) run in the emulator give numpy's
A @ B.T. Kernel arguments, grid and block follow aiter's csrc/py_itfs_cu/asm_gemm_a16w16.cu."""

import ml_dtypes
import numpy as np
import pytest

from argus.asm import CodeObject
from argus.asm.launch import emulate, unsupported_opcodes

pytestmark = pytest.mark.aiter

TILES = (32, 48, 64, 96)


@pytest.fixture(scope="module", params=TILES, ids=lambda t: f"tile{t}x64")
def gemm(request, aiter_root):
    path = (aiter_root / "aiter_meta" / "hsa" / "gfx942" / "bf16gemm"
            / f"bf16gemm_outf32_tn_{request.param}x64_pf3.co")
    code = CodeObject.from_file(path)
    code.disassemble(code.kernels[0])
    return request.param, code


def run_gemm(code, tile, m, n, k, splitk=1, seed=0, check="strict"):
    """What gemm_a16w16_asm does: strides in bytes, gdx = N/64, gdy = ceil(M/tile), gdz = splitk."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    out = np.zeros((m, n), np.float32)
    args = dict(D=out, A=a.view(np.uint16), B=b.view(np.uint16), alpha=1.0, beta=0.0,
                strideD0=n * 4, strideC0=n * 4, strideA0=k * 2, strideB0=k * 2,
                Mdim=m, Ndim=n, Kdim=k, splitk=splitk)
    run = emulate(code, grid=(n // 64, -(-m // tile), splitk), block=256, args=args, check=check)
    reference = a.astype(np.float64) @ b.astype(np.float64).T
    return out, reference, run


def assert_bf16_gemm_close(out, reference, k):
    # bf16 inputs make every product exact in f32; only the f32 summation order differs.
    bound = 4 * k * np.finfo(np.float32).eps * (np.abs(reference).max() + 1)
    np.testing.assert_allclose(out, reference, rtol=0, atol=bound)


@pytest.mark.parametrize("shape", [(1, 1, 128), (2, 2, 64), (1, 2, 320)],
                         ids=lambda s: f"{s[0]}x{s[1]}tiles_k{s[2]}")
def test_vendor_gemm_matches_numpy(gemm, shape):
    tile, code = gemm
    m, n, k = shape[0] * tile, shape[1] * 64, shape[2]
    out, reference, run = run_gemm(code, tile, m, n, k)
    assert_bf16_gemm_close(out, reference, k)
    assert run.hazards == [] and run.wave_instructions > 0


def test_vendor_gemm_partial_m_tile_reads_zero_out_of_bounds(gemm):
    """M not a multiple of the tile: aiter relies on buffer range checks (OOB loads read 0,
    OOB stores are dropped); the rows past M must not be written."""
    tile, code = gemm
    m, n, k = tile + tile // 2 + 3, 64, 64
    out, reference, _ = run_gemm(code, tile, m, n, k, seed=1)
    assert_bf16_gemm_close(out, reference, k)


def test_vendor_gemm_split_k_accumulates_with_atomics(gemm):
    tile, code = gemm
    out, reference, run = run_gemm(code, tile, tile, 128, 256, splitk=2, seed=2)
    assert_bf16_gemm_close(out, reference, 256)
    assert run.opcode_counts()["global_atomic_add_f32"] > 0


def test_vendor_gemm_trace_counts_and_bytes(gemm):
    tile, code = gemm
    m, n, k = tile, 64, 128
    _, _, run = run_gemm(code, tile, m, n, k)
    opcodes = run.opcode_counts()
    # 4 waves each need at least one 16x16x16 MFMA per 16 of K
    assert opcodes["v_mfma_f32_16x16x16_bf16"] >= 4 * k // 16
    assert opcodes["s_endpgm"] == 4
    loaded = sum(run.bytes[pc] for pc, c in run.counts.items()
                 if any(i.address == pc and i.opcode.startswith("buffer_load")
                        for i in run.instructions))
    assert loaded >= (m * k + n * k) * 2      # every A and B element crosses at least once


def test_vendor_gemms_have_no_unsupported_opcodes(gemm):
    _, code = gemm
    assert unsupported_opcodes(code) == {}

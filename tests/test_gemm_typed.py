"""The GEMM over f16 and the gfx942 8-bit floats (fp8 = e4m3fnuz, bf8 = e5m2fnuz): each typed
library kernel is proved for symbolic sizes and, compiled, matches numpy in the strict emulator
on its own MFMAs (the 32x32 and the 16x16 one); mixing element types is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

import argus
import argus.lang as T
from argus.isa_cdna3.numerics import ELEMENT_DTYPES
from argus.kernels import dense_mfmas, library
from argus.kernels.gemm import DEFAULT_MFMA, gemm_program, swizzle_for
from argus.lang import Tensor
from argus.pipeline import road

CASES = [("gemm_f16", "f16", {}), ("gemm_fp8", "fp8", {}), ("gemm_bf8", "bf8", {}),
         ("gemm_fp8", "fp8", {"instr": "v_mfma_f32_16x16x32_fp8_fp8", "block_k": 64,
                              "prefetch": 2}),
         ("gemm_f16", "f16", {"instr": "v_mfma_f32_16x16x16_f16", "block_k": 32})]


@pytest.mark.parametrize("name, dtype, params", CASES,
                         ids=[f"{n}-{p.get('instr', 'default')[-20:]}" for n, _, p in CASES])
def test_typed_gemm_is_proved_and_right_in_the_strict_emulator(name, dtype, params):
    entry = library()[name]
    assert entry.kernel.trace(**params).tensors[0].type.dtype == dtype
    done = road(name, until="emulate", sizes={"M": 64, "N": 128, "K": 192}, **params)
    assert done.report.ok and len(done.report.obligations) > 40
    assert done.emulated.ok and done.interp.ok
    # the instruction really is the typed MFMA
    assert params.get("instr", DEFAULT_MFMA[dtype]) in done.compiled.text


def test_fp8_products_are_exact_so_the_error_is_f32_summation_only():
    compiled = argus.compile("gemm_fp8")
    rng = np.random.default_rng(3)
    m, n, k = 64, 128, 384
    a = (rng.standard_normal((m, k)) * 4).astype(ELEMENT_DTYPES["fp8"])
    b = (rng.standard_normal((n, k)) * 4).astype(ELEMENT_DTYPES["fp8"])
    c = np.full((m, n), np.nan, np.float32)
    compiled.run(a, b, c, check="strict")
    want = a.astype(np.float64) @ b.astype(np.float64).T
    bound = 2 * k * np.finfo(np.float32).eps * np.abs(want).max()
    assert np.abs(c - want).max() <= bound


def test_each_type_gets_its_own_mfmas_as_the_instr_knob():
    for dtype in ("f16", "fp8", "bf8"):
        knob = library()[f"gemm_{dtype}"].knob("instr")
        assert knob.values == dense_mfmas(dtype) and len(knob.values) == 2
        assert all(f"_{dtype}" in v for v in knob.values)


def test_the_lds_swizzle_is_in_elements_of_the_operand_type():
    # the same byte pattern: chunks of 8 bytes, XORed with the row bits above a 128-byte line
    for block_k in (16, 32, 64, 128):          # bf16: unchanged from the bf16-only formula
        log_k = block_k.bit_length() - 1
        assert swizzle_for(block_k) == (min(4, log_k - 2), 2, max(4, log_k - 2))
    assert swizzle_for(128, 1) == (4, 3, 4)
    assert swizzle_for(64, 1) == (3, 3, 4)


def test_a_wrong_mfma_or_mixed_types_are_refused_with_the_fix():
    @T.kernel(waves=4)
    def mixed(A: Tensor("fp8", "M", "K"), B: Tensor("bf16", "N", "K"),
              C: Tensor("f32", "M", "N")):
        gemm_program(A, B, C, block_m=64, block_n=64, block_k=64, swizzle=True)

    with pytest.raises(argus.ArgusError, match="A is fp8 and B is bf16"):
        mixed.trace()
    with pytest.raises(argus.ArgusError, match="multiplies bf16 by bf16, not fp8") as err:
        library()["gemm_fp8"].kernel.trace(instr="v_mfma_f32_32x32x8_bf16")
    assert "v_mfma_f32_32x32x16_fp8_fp8" in str(err.value.fix)

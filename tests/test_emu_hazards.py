"""Bug detection: a missing s_waitcnt or an MFMA result read too early is a HazardError in strict
mode, a recorded Hazard in warn mode, and stale data (as on hardware) in off mode."""

import ml_dtypes
import numpy as np
import pytest

from argus.asm import assemble
from argus.asm.launch import emulate
from argus.isa_cdna3.emu import HazardError
from argus.isa_cdna3.kernel_template import kernel_source

LOAD_ADD_STORE = """
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  v_lshlrev_b32_e32 v1, 2, v0
  s_waitcnt lgkmcnt(0)
  v_mov_b32_e32 v2, 7
  global_load_dword v2, v1, s[4:5]
  {wait}
  v_add_u32_e32 v3, 1, v2
  global_store_dword v1, v3, s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm
"""


@pytest.fixture(scope="module")
def load_kernels():
    args = [("src", "ptr"), ("dst", "ptr")]
    good = assemble(kernel_source("good", LOAD_ADD_STORE.format(wait="s_waitcnt vmcnt(0)"), args))
    bad = assemble(kernel_source("bad", LOAD_ADD_STORE.format(wait=""), args))
    return good, bad


def test_waited_load_is_correct(load_kernels):
    good, _ = load_kernels
    src = np.arange(64, dtype=np.uint32) * 3
    dst = np.zeros(64, np.uint32)
    run = emulate(good, grid=1, block=64, args=[src, dst])
    np.testing.assert_array_equal(dst, src + 1)
    assert run.hazards == []


def test_missing_waitcnt_is_caught_in_strict_mode(load_kernels):
    _, bad = load_kernels
    with pytest.raises(HazardError) as err:
        emulate(bad, grid=1, block=64, args=[np.zeros(64, np.uint32), np.zeros(64, np.uint32)])
    hazard = err.value.hazard
    assert hazard.kind == "pending-load" and hazard.register == "v2"
    assert "global_load_dword" in hazard.producer and "v_add_u32" in hazard.consumer
    assert "s_waitcnt vmcnt" in str(err.value)


def test_missing_waitcnt_reads_stale_data_when_unchecked(load_kernels):
    _, bad = load_kernels
    src = np.arange(64, dtype=np.uint32) + 100
    dst = np.zeros(64, np.uint32)
    emulate(bad, grid=1, block=64, args=[src, dst], check="off")
    np.testing.assert_array_equal(dst, np.full(64, 8))      # the 7 written before the load


def test_warn_mode_records_the_hazard_per_occurrence(load_kernels):
    _, bad = load_kernels
    run = emulate(bad, grid=4, block=128, args=[np.zeros(512, np.uint32),
                                                np.zeros(512, np.uint32)], check="warn")
    assert len(run.hazards) >= 1
    assert {h.kind for h in run.hazards} == {"pending-load"}


MFMA_BODY = """
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  s_load_dwordx2 s[8:9], s[0:1], 0x10
  v_lshlrev_b32_e32 v1, 3, v0
  v_lshlrev_b32_e32 v20, 4, v0
  v_mov_b32_e32 v6, 0
  v_mov_b32_e32 v7, 0
  v_mov_b32_e32 v8, 0
  v_mov_b32_e32 v9, 0
  s_waitcnt lgkmcnt(0)
  global_load_dwordx2 v[2:3], v1, s[4:5]
  global_load_dwordx2 v[4:5], v1, s[6:7]
  s_waitcnt vmcnt(0)
  v_mfma_f32_16x16x16_bf16 v[6:9], v[2:3], v[4:5], v[6:9]
  {gap}
  global_store_dwordx4 v20, v[6:9], s[8:9]
  s_waitcnt vmcnt(0)
  s_endpgm
"""


def run_mfma(gap, check):
    code = assemble(kernel_source("mfma", MFMA_BODY.format(gap=gap),
                                  [("a", "ptr"), ("b", "ptr"), ("d", "ptr")]))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 4)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((64, 4)).astype(ml_dtypes.bfloat16)
    d = np.full((64, 4), 5.0, np.float32)
    run = emulate(code, grid=1, block=64, args=[a.view(np.uint16), b.view(np.uint16), d],
                  check=check)
    # lane l holds A[l % 16][4 * (l // 16) + s]; D[lane][r] = C[4 * (l // 16) + r][l % 16]
    a_mat = np.zeros((16, 16), np.float32)
    b_mat = np.zeros((16, 16), np.float32)
    for lane in range(64):
        for s in range(4):
            a_mat[lane % 16, 4 * (lane // 16) + s] = a[lane, s]
            b_mat[4 * (lane // 16) + s, lane % 16] = b[lane, s]
    c = a_mat @ b_mat
    expect = np.array([[c[4 * (lane // 16) + r, lane % 16] for r in range(4)]
                       for lane in range(64)], np.float32)
    return d, expect, run


def test_mfma_result_after_enough_wait_states_is_correct():
    d, expect, run = run_mfma("s_nop 6", "strict")          # 16x16x16: 4 passes + 3 = 7
    np.testing.assert_allclose(d, expect, rtol=1e-5, atol=1e-5)
    assert run.hazards == []


def test_mfma_result_read_too_early_is_caught():
    with pytest.raises(HazardError) as err:
        run_mfma("s_nop 4", "strict")
    hazard = err.value.hazard
    assert hazard.kind == "mfma-result" and "v_mfma_f32_16x16x16_bf16" in hazard.producer
    assert "global_store_dwordx4" in hazard.consumer


def test_mfma_result_read_too_early_stores_the_previous_value_when_unchecked():
    d, expect, _ = run_mfma("s_nop 4", "off")
    np.testing.assert_array_equal(d, np.zeros((64, 4), np.float32))   # C before the MFMA
    assert not np.allclose(expect, 0)


def test_valu_write_then_mfma_read_needs_two_wait_states():
    body = MFMA_BODY.replace("  s_waitcnt vmcnt(0)\n  v_mfma", "  s_waitcnt vmcnt(0)\n"
                             "  v_mov_b32_e32 v2, v2\n  v_mfma").format(gap="s_nop 7")
    code = assemble(kernel_source("valu_mfma", body, [("a", "ptr"), ("b", "ptr"), ("d", "ptr")]))
    zeros = np.zeros(256, np.uint16)
    with pytest.raises(HazardError, match="valu-to-mfma"):
        emulate(code, grid=1, block=64, args=[zeros, zeros, np.zeros(256, np.float32)])


@pytest.mark.parametrize("nops, ok", [(5, False), (6, True)])
def test_mfma_to_valu_wait_states_boundary(nops, ok):
    """16x16x16 bf16: 4 passes, XDL -> 7 wait states (`s_nop 6`), LLVM's gfx940 table."""
    if ok:
        run_mfma(f"s_nop {nops}", "strict")
    else:
        with pytest.raises(HazardError, match="1 missing"):
            run_mfma(f"s_nop {nops}", "strict")


def test_back_to_back_accumulation_needs_no_wait_but_overlapping_srcc_does():
    same = "v_mfma_f32_16x16x16_bf16 v[6:9], v[2:3], v[4:5], v[6:9]\n  s_nop 6"
    d, expect, _ = run_mfma(same, "strict")
    np.testing.assert_allclose(d, 2 * expect, rtol=1e-5, atol=1e-5)
    overlap = "v_mfma_f32_16x16x16_bf16 v[10:13], v[2:3], v[4:5], v[8:11]\n  s_nop 6"
    with pytest.raises(HazardError, match="mfma-result"):
        run_mfma(overlap, "strict")


def test_v_cmpx_then_mfma_needs_four_wait_states():
    body = MFMA_BODY.replace("  s_waitcnt vmcnt(0)\n  v_mfma", "  s_waitcnt vmcnt(0)\n"
                             "  v_cmpx_le_u32_e32 vcc, 0, v0\n  s_nop 1\n  v_mfma").format(
        gap="s_nop 7")
    code = assemble(kernel_source("cmpx_mfma", body, [("a", "ptr"), ("b", "ptr"), ("d", "ptr")]))
    zeros = np.zeros(256, np.uint16)
    with pytest.raises(HazardError, match="exec needs 4 wait states"):
        emulate(code, grid=1, block=64, args=[zeros, zeros, np.zeros(256, np.float32)])
    fixed = assemble(kernel_source("cmpx_mfma_ok", body.replace("s_nop 1\n  v_mfma",
                                                                "s_nop 3\n  v_mfma"),
                                   [("a", "ptr"), ("b", "ptr"), ("d", "ptr")]))
    emulate(fixed, grid=1, block=64, args=[zeros, zeros, np.zeros(256, np.float32)])

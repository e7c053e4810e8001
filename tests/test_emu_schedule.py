"""Timing the emulator models like silicon: waves at different PCs progress together (AMD's MoE
kernel overwrites LDS right after a barrier that other waves are still reading behind), and in
`warn` mode a load read before its `s_waitcnt` has landed (recorded as a hazard) while `off` mode
keeps the adversarial stale value. Plus the v_cmp/v_cndmask row mask of the attention kernels."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from argus.asm import assemble
from argus.asm.launch import emulate
from argus.isa_cdna3.emu import HazardError
from argus.isa_cdna3.kernel_template import kernel_source

# Wave 1 (the lower PC) seeds LDS, then both waves meet at a barrier; wave 0 reads LDS at once
# while wave 1 overwrites it 160 wait states later. The old "lowest PC runs to its next barrier"
# order let the late write win.
READ_BEFORE_LATE_WRITE = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_lshrrev_b32_e32 v1, 6, v0
  v_readfirstlane_b32 s6, v1
  v_mov_b32_e32 v3, 0
  s_cmp_eq_u32 s6, 0
  s_cbranch_scc1 reader
  v_mov_b32_e32 v2, 0x11
  ds_write_b32 v3, v2
  s_waitcnt lgkmcnt(0)
  s_barrier
{nops}
  v_mov_b32_e32 v4, 0x22
  ds_write_b32 v3, v4
  s_waitcnt lgkmcnt(0)
  s_barrier
  s_endpgm
reader:
  s_barrier
  ds_read_b32 v5, v3
  s_waitcnt lgkmcnt(0)
  s_barrier
  v_lshlrev_b32_e32 v6, 2, v0
  s_waitcnt lgkmcnt(0)
  global_store_dword v6, v5, s[4:5]
  s_waitcnt vmcnt(0)
  s_endpgm
"""


def test_waves_at_other_pcs_run_concurrently_not_one_to_its_barrier():
    body = READ_BEFORE_LATE_WRITE.format(nops="\n".join(["  s_nop 7"] * 20))
    code = assemble(kernel_source("late_write", body, [("out", "ptr")], lds_bytes=256,
                                  max_block=128))
    out = np.zeros(128, np.uint32)
    emulate(code, grid=1, block=128, args=[out])
    np.testing.assert_array_equal(out[:64], 0x11)   # wave 0 read before wave 1's late write
    np.testing.assert_array_equal(out[64:], 0)      # wave 1 stores nothing


LOAD_ADD_STORE = """
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  v_lshlrev_b32_e32 v1, 2, v0
  s_waitcnt lgkmcnt(0)
  v_mov_b32_e32 v2, 7
  global_load_dword v2, v1, s[4:5]
  v_add_u32_e32 v3, 1, v2
  global_store_dword v1, v3, s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm
"""


def test_warn_mode_delivers_the_landed_load_and_off_mode_the_stale_register():
    code = assemble(kernel_source("no_wait", LOAD_ADD_STORE, [("src", "ptr"), ("dst", "ptr")]))
    src = np.arange(256, dtype=np.uint32) * 5
    dst = np.zeros(256, np.uint32)
    run = emulate(code, grid=1, block=256, args=[src, dst], check="warn")
    np.testing.assert_array_equal(dst, src + 1)
    assert run.hazards and {h.kind for h in run.hazards} == {"pending-load"}
    emulate(code, grid=1, block=256, args=[src, dst], check="off")
    np.testing.assert_array_equal(dst, np.full(256, 8))


# The masking idiom of AMD's attention kernels: a wave-uniform row index compared with an SGPR
# limit, the lane mask then selecting between the data and an inline 0.
ROW_MASK = """
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  s_load_dwordx2 s[40:41], s[0:1], 0x10
  v_lshlrev_b32_e32 v1, 2, v0
  s_waitcnt lgkmcnt(0)
  global_load_dword v5, v1, s[4:5]
  v_mov_b32_e32 v16, s41
  v_cmp_lt_u32_e64 s[12:13], v16, s40
  v_cmp_lt_u32_e64 s[14:15], v0, s40
  s_waitcnt vmcnt(0)
  v_cndmask_b32_e64 v6, 0, v5, s[12:13]
  v_cndmask_b32_e64 v7, 0, v5, s[14:15]
  v_lshlrev_b32_e32 v8, 3, v0
  global_store_dwordx2 v8, v[6:7], s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm
"""


@given(limit=st.integers(0, 2**32 - 1) | st.integers(0, 80), row=st.integers(0, 2**32 - 1)
       | st.integers(0, 80), seed=st.integers(0, 2**16))
def test_uniform_and_per_lane_row_masks_match_numpy(row_mask_kernel, limit, row, seed):
    data = np.random.default_rng(seed).integers(1, 2**32, 64, dtype=np.uint32)
    out = np.zeros((64, 2), np.uint32)
    emulate(row_mask_kernel, grid=1, block=64,
            args=[data, out, np.uint32(limit), np.uint32(row)], check="strict")
    np.testing.assert_array_equal(out[:, 0], np.where(row < limit, data, 0))
    np.testing.assert_array_equal(out[:, 1], np.where(np.arange(64) < limit, data, 0))


def pytest_generate_tests(metafunc):
    if "row_mask_kernel" in metafunc.fixturenames:
        metafunc.parametrize("row_mask_kernel", [assemble(kernel_source(
            "row_mask", ROW_MASK, [("src", "ptr"), ("dst", "ptr"), ("limit", "u32"),
                                   ("row", "u32")], sgprs=48))], ids=["row_mask"])


# Wave 1 idles at another PC, so wave 0 hands over its turn between the VALU write and the MFMA
# that reads it too soon; the hazard must survive the hand-over.
VALU_THEN_MFMA_ACROSS_TURNS = """
  v_lshrrev_b32_e32 v1, 6, v0
  v_readfirstlane_b32 s6, v1
  s_cmp_eq_u32 s6, 0
  s_cbranch_scc0 idle
  v_mov_b32_e32 v2, 1.0
  v_mov_b32_e32 v3, 1.0
  v_mfma_f32_32x32x8_f16 v[4:19], v[2:3], v[2:3], 0
  s_endpgm
idle:
{nops}
  s_endpgm
"""


def test_valu_to_mfma_hazard_is_seen_when_the_group_hands_over_its_turn(monkeypatch):
    import argus.isa_cdna3.emu.emulator as emulator

    body = VALU_THEN_MFMA_ACROSS_TURNS.format(nops="\n".join(["  s_nop 0"] * 8))
    code = assemble(kernel_source("turns", body, max_block=128))
    monkeypatch.setattr(emulator, "QUANTUM", 1)         # hand over after every instruction
    with pytest.raises(HazardError, match="valu-to-mfma"):
        emulate(code, grid=1, block=128)

"""Memory, control flow and MFMA instructions in small assembled kernels, against numpy:
LDS reads/writes across waves with s_barrier, buffer range checks, LDS DMA, permutes, atomics,
divergent branches and EXEC masking, faults, and every dense MFMA end to end."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.asm import assemble
from argus.asm.launch import emulate, unsupported_opcodes
from argus.isa_cdna3 import MFMA
from argus.isa_cdna3.abi import LaunchError
from argus.isa_cdna3.emu import EmulatorError, MemoryFault, UnsupportedOpcodeError
from argus.isa_cdna3.kernel_template import kernel_source

IO = [("inp", "ptr"), ("out", "ptr")]
PROLOGUE = """
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  v_lshlrev_b32_e32 v1, 2, v0
  s_waitcnt lgkmcnt(0)
"""


def build(name, body, args=IO, **kw):
    return assemble(kernel_source(name, PROLOGUE + body, args, **kw))


@pytest.fixture(scope="module")
def lds_reverse():
    """Each of 4 waves writes its lane values to LDS; after a barrier every work-item reads the
    value of work-item 255 - tid, i.e. mostly another wave's data."""
    body = """
  s_lshl_b32 s8, s2, 10
  s_add_u32 s4, s4, s8
  s_addc_u32 s5, s5, 0
  s_add_u32 s6, s6, s8
  s_addc_u32 s7, s7, 0
  global_load_dword v2, v1, s[4:5]
  s_waitcnt vmcnt(0)
  ds_write_b32 v1, v2 offset:16
  s_waitcnt lgkmcnt(0)
  s_barrier
  v_sub_u32_e32 v3, 0x3fc, v1
  ds_read_b32 v4, v3 offset:16
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v4, s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm
"""
    return build("lds_reverse", body, lds_bytes=1040)


@given(seed=st.integers(0, 2**31))
@settings(max_examples=10)
def test_lds_exchange_across_waves_with_barrier(lds_reverse, seed):
    data = np.random.default_rng(seed).integers(0, 2**32, 512, dtype=np.uint64).astype(np.uint32)
    out = np.zeros(512, np.uint32)
    emulate(lds_reverse, grid=2, block=256, args=[data, out])
    np.testing.assert_array_equal(out, data.reshape(2, 256)[:, ::-1].reshape(-1))


def test_lds_is_private_to_each_workgroup(lds_reverse):
    data = np.arange(1024, dtype=np.uint32)
    out = np.zeros(1024, np.uint32)
    emulate(lds_reverse, grid=4, block=256, args=[data, out])
    np.testing.assert_array_equal(out.reshape(4, 256), data.reshape(4, 256)[:, ::-1])


def test_lds_access_past_the_allocation_faults():
    body = """
  ds_write_b32 v1, v0 offset:256
  s_endpgm
"""
    code = build("lds_oob", body, lds_bytes=256)
    with pytest.raises(MemoryFault, match="outside the workgroup's 256-byte LDS"):
        emulate(code, grid=1, block=64, args=[None, None])


def test_wide_lds_accesses_and_read2():
    body = """
  v_lshlrev_b32_e32 v9, 4, v0
  global_load_dwordx4 v[2:5], v9, s[4:5]
  s_waitcnt vmcnt(0)
  ds_write_b128 v9, v[2:5]
  s_waitcnt lgkmcnt(0)
  ds_read_b64 v[6:7], v9 offset:8
  ds_read2_b32 v[10:11], v9 offset0:0 offset1:3
  s_waitcnt lgkmcnt(0)
  v_lshlrev_b32_e32 v12, 4, v0
  global_store_dwordx2 v12, v[6:7], s[6:7]
  global_store_dwordx2 v12, v[10:11], s[6:7] offset:8
  s_waitcnt vmcnt(0)
  s_endpgm
"""
    code = build("lds_wide", body, lds_bytes=1024)
    data = np.arange(256, dtype=np.uint32).reshape(64, 4) * 7 + 1
    out = np.zeros((64, 4), np.uint32)
    emulate(code, grid=1, block=64, args=[data, out])
    np.testing.assert_array_equal(out[:, :2], data[:, 2:])
    np.testing.assert_array_equal(out[:, 2], data[:, 0])
    np.testing.assert_array_equal(out[:, 3], data[:, 3])


BUFFER_COPY = """
  s_load_dword s12, s[0:1], 0x10
  s_mov_b32 s8, s4
  s_and_b32 s9, s5, 0xffff
  s_mov_b32 s11, 0x20000
  s_mov_b32 s16, s6
  s_and_b32 s17, s7, 0xffff
  s_mov_b32 s19, 0x20000
  s_waitcnt lgkmcnt(0)
  s_mov_b32 s10, s12
  s_mov_b32 s18, s12
  v_lshlrev_b32_e32 v9, 4, v0
  buffer_load_dwordx4 v[2:5], v9, s[8:11], 0 offen offset:4
  s_waitcnt vmcnt(0)
  buffer_store_dwordx4 v[2:5], v9, s[16:19], 0 offen
  s_waitcnt vmcnt(0)
  s_endpgm
"""


@given(records=st.integers(0, 1100))
@settings(max_examples=15)
def test_buffer_range_check_reads_zero_and_drops_stores(buffer_copy, records):
    """num_records bounds each dword: loads past it read 0, stores past it are dropped."""
    data = np.arange(1, 257 + 16, dtype=np.uint32)
    out = np.full(256 + 16, 0xDEAD, np.uint32)
    emulate(buffer_copy, grid=1, block=64, args=[data, out, records])
    offsets = np.arange(256) * 4
    loaded = np.where(offsets + 4 + 4 <= records, data[1:257], 0)
    expect = np.where(offsets + 4 <= records, loaded, 0xDEAD)
    np.testing.assert_array_equal(out[:256], expect)
    assert (out[256:] == 0xDEAD).all()


@pytest.fixture(scope="module")
def buffer_copy():
    return build("buffer_copy", BUFFER_COPY, IO + [("records", "u32")])


def test_global_access_outside_every_buffer_faults_with_location():
    body = """
  v_add_u32_e32 v1, 0x100000, v1
  global_load_dword v2, v1, s[4:5]
  s_endpgm
"""
    code = build("global_oob", body)
    with pytest.raises(MemoryFault, match=r"workgroup 0 wave 0 pc 0x[0-9a-f]+ `global_load"):
        emulate(code, grid=1, block=64, args=[np.zeros(64, np.uint32), np.zeros(64, np.uint32)])


def test_buffer_load_to_lds_lands_at_m0_after_vmcnt():
    body = """
  s_mov_b32 s8, s4
  s_and_b32 s9, s5, 0xffff
  s_mov_b32 s10, 1024
  s_mov_b32 s11, 0x20000
  s_mov_b32 m0, 0x40
  buffer_load_dword v1, s[8:11], 0 offen lds
  s_waitcnt vmcnt(0)
  s_barrier
  v_add_u32_e32 v3, 0x40, v1
  ds_read_b32 v2, v3
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v2, s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm
"""
    code = build("lds_dma", body, lds_bytes=512)
    data = np.arange(64, dtype=np.uint32) * 11
    out = np.zeros(64, np.uint32)
    emulate(code, grid=1, block=64, args=[data, out])
    np.testing.assert_array_equal(out, data)


def test_lds_dma_without_vmcnt_leaves_lds_stale():
    body = """
  s_mov_b32 s8, s4
  s_and_b32 s9, s5, 0xffff
  s_mov_b32 s10, 1024
  s_mov_b32 s11, 0x20000
  s_mov_b32 m0, 0
  buffer_load_dword v1, s[8:11], 0 offen lds
  s_barrier
  ds_read_b32 v2, v1
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v2, s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm
"""
    code = build("lds_dma_stale", body, lds_bytes=512)
    out = np.full(64, 9, np.uint32)
    emulate(code, grid=1, block=64, args=[np.arange(1, 65, dtype=np.uint32), out], check="off")
    np.testing.assert_array_equal(out, 0)


def test_ds_bpermute_gathers_from_other_lanes():
    body = """
  global_load_dword v2, v1, s[4:5]
  s_waitcnt vmcnt(0)
  v_xor_b32_e32 v3, 0xfc, v1
  ds_bpermute_b32 v4, v3, v2
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v4, s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm
"""
    code = build("bpermute", body)
    data = np.arange(64, dtype=np.uint32) + 1000
    out = np.zeros(64, np.uint32)
    emulate(code, grid=1, block=64, args=[data, out])
    np.testing.assert_array_equal(out, data[np.arange(64) ^ 63])


def test_atomic_add_from_every_lane_of_every_wave():
    body = """
  s_lshl_b32 s8, s2, 8
  v_add_u32_e32 v4, s8, v1
  global_load_dword v2, v4, s[4:5]
  v_mov_b32_e32 v3, 0
  s_waitcnt vmcnt(0)
  global_atomic_add_f32 v3, v2, s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm
"""
    code = build("atomics", body)
    data = np.random.default_rng(3).integers(0, 100, 256).astype(np.float32)
    out = np.zeros(1, np.float32)
    emulate(code, grid=4, block=64, args=[data, out])
    assert out[0] == data.sum()


@pytest.mark.parametrize("opcode, dtype", [("global_atomic_pk_add_bf16", ml_dtypes.bfloat16),
                                           ("global_atomic_pk_add_f16", np.float16)])
def test_packed_16bit_atomics_add_both_halves(opcode, dtype):
    body = f"""
  global_load_dword v2, v1, s[4:5]
  v_and_b32_e32 v3, 12, v1
  s_waitcnt vmcnt(0)
  {opcode} v3, v2, s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm
"""
    code = build(opcode, body)
    values = np.random.default_rng(5).integers(-8, 8, (64, 2)).astype(dtype)
    out = np.zeros((4, 2), dtype)
    emulate(code, grid=1, block=64, args=[values.view(np.uint32).reshape(-1), out.view(np.uint32)])
    expect = values.astype(np.float64).reshape(16, 4, 2).sum(0)    # small integers: exact
    np.testing.assert_array_equal(out.astype(np.float64), expect)


def test_divergent_branches_and_exec_masking():
    """Odd work-items take one path, even ones another (per-lane via EXEC); waves 2k and
    2k+1 branch differently on a scalar condition."""
    body = """
  s_lshl_b32 s8, s2, 8
  v_add_u32_e32 v1, s8, v1
  global_load_dword v2, v1, s[4:5]
  s_waitcnt vmcnt(0)
  s_and_b32 s8, s2, 1
  s_cmp_eq_u32 s8, 0
  s_cbranch_scc1 .Leven_group
  v_add_u32_e32 v2, 1000, v2
  s_branch .Ljoin
.Leven_group:
  v_add_u32_e32 v2, 2000, v2
.Ljoin:
  v_and_b32_e32 v3, 1, v0
  v_cmp_eq_u32_e32 vcc, 1, v3
  s_and_saveexec_b64 s[10:11], vcc
  s_cbranch_execz .Lskip
  v_mul_lo_u32 v2, v2, 3
.Lskip:
  s_mov_b64 exec, s[10:11]
  global_store_dword v1, v2, s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm
"""
    code = build("diverge", body)
    data = np.arange(256, dtype=np.uint32)
    out = np.zeros(256, np.uint32)
    run = emulate(code, grid=4, block=64, args=[data, out])
    group = np.repeat(np.arange(4), 64)
    expect = data + np.where(group % 2 == 0, 2000, 1000)
    expect = np.where(np.arange(256) % 2 == 1, expect * 3, expect)
    np.testing.assert_array_equal(out, expect)
    assert run.counts[min(run.counts)] == 4
    per_wave = run.wave_instruction_counts()
    assert per_wave.shape == (4, 1) and per_wave.sum() == run.wave_instructions
    assert per_wave[0, 0] == per_wave[2, 0] and per_wave[0, 0] != per_wave[1, 0]


def test_unsupported_opcodes_are_listed_before_running():
    body = """
  v_cmp_lt_f32_sdwa vcc, v1, v3 src0_sel:WORD_1 src1_sel:DWORD
  v_sin_f32_e32 v3, v1
  v_sin_f32_e32 v4, v1
  s_endpgm
"""
    code = build("unsupported", body)
    missing = unsupported_opcodes(code)
    assert set(missing) == {"v_cmp_lt_f32_sdwa (v_cmp_lt_f32_sdwa: SDWA form of this opcode is "
                            "not implemented)", "v_sin_f32_e32"}
    assert len(missing["v_sin_f32_e32"]) == 2
    with pytest.raises(UnsupportedOpcodeError, match="nothing was executed"):
        emulate(code, grid=1, block=64, args=[None, None])


def test_dpp_moves_between_lanes():
    body = """
  v_mov_b32_e32 v2, v0
  v_mov_b32_e32 v3, 0
  v_mov_b32_e32 v4, 0
  s_nop 1
  v_mov_b32_dpp v3, v2 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
  v_mov_b32_dpp v4, v2 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0
  v_add_u32_dpp v5, v2, v2 row_newbcast:3 row_mask:0xf bank_mask:0xf
  v_lshlrev_b32_e32 v1, 4, v0
  global_store_dwordx4 v1, v[2:5], s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm
"""
    code = build("dpp", body)
    out = np.zeros((64, 4), np.uint32)
    emulate(code, grid=1, block=64, args=[None, out])
    lane = np.arange(64)
    np.testing.assert_array_equal(out[:, 1], lane ^ 1)
    np.testing.assert_array_equal(out[:, 2], np.where(lane % 16 == 0, 0, lane - 1))
    np.testing.assert_array_equal(out[:, 3], lane // 16 * 16 + 3 + lane)


def test_launch_errors_name_the_fix():
    code = build("launch", "  s_endpgm\n")
    with pytest.raises(LaunchError, match="takes 2 arguments"):
        emulate(code, grid=1, block=64, args=[None])
    with pytest.raises(LaunchError, match="no argument"):
        emulate(code, grid=1, block=64, args={"bogus": 1})
    with pytest.raises(LaunchError, match="max_flat_workgroup_size"):
        emulate(code, grid=1, block=1024, args={})
    with pytest.raises(LaunchError, match="check must be"):
        emulate(code, grid=1, block=64, args={}, check="loud")
    with pytest.raises(LaunchError, match="distinct workgroup ids in 0..3"):
        emulate(code, grid=4, block=64, args={}, groups=[1, 4])


def test_a_launch_runs_chosen_workgroups_with_their_own_ids():
    # the performance model samples chosen workgroups (a causal mask's heavy query tiles):
    # each runs with its id in the whole grid, and no other workgroup runs
    body = """
  v_mov_b32_e32 v2, s2
  s_lshl_b32 s8, s2, 2
  v_mov_b32_e32 v1, s8
  global_store_dword v1, v2, s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm
"""
    out = np.full(8, 99, np.uint32)
    run = emulate(build("ids", body), grid=8, block=64, args=[None, out], groups=[5, 2])
    assert out.tolist() == [99, 99, 2, 99, 99, 5, 99, 99] and run.workgroups == 2


def test_endless_loop_is_reported():
    code = build("spin", ".Lspin:\n  s_branch .Lspin\n  s_endpgm\n")
    with pytest.raises(EmulatorError, match="without finishing"):
        emulate(code, grid=1, block=64, args={}, max_wave_instructions=1000)


# --- every dense MFMA, end to end through registers loaded from memory -----------------------
DENSE = [info for info in MFMA.values() if not info.sparse]
_ELEMENT = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8": ml_dtypes.float8_e4m3fnuz,
            "bf8": ml_dtypes.float8_e5m2fnuz, "i8": np.int8, "f32": np.float32,
            "xf32": np.float32, "f64": np.float64}


def _mfma_body():
    """For MFMA number t: load A/B/C registers of every lane from inp + t*8 KiB, run it, store D
    to out + t*4 KiB. A at v[40:41], B at v[42:43], C/D at v[0:31]."""
    lines = ["  v_lshlrev_b32_e32 v50, 3, v0", "  v_lshlrev_b32_e32 v51, 7, v0"]
    for info in DENSE:
        ab = "dwordx2" if info.a_regs == 2 else "dword"
        a = "v[40:41]" if info.a_regs == 2 else "v40"
        b = "v[42:43]" if info.b_regs == 2 else "v42"
        lines += [f"  global_load_{ab} {a}, v50, s[4:5]",
                  f"  global_load_{ab} {b}, v50, s[4:5] offset:512"]
        for r in range(0, info.c_regs, 4):
            lines.append(f"  global_load_dwordx4 v[{r}:{r + 3}], v51, s[4:5] offset:{1024 + 4 * r}"
                         if r + 4 <= info.c_regs else
                         f"  global_load_dwordx2 v[{r}:{r + 1}], v51, s[4:5] offset:{1024 + 4 * r}")
        lines += ["  s_waitcnt vmcnt(0)",
                  f"  {info.name} v[0:{info.c_regs - 1}], {a}, {b}, v[0:{info.c_regs - 1}]",
                  "  s_nop 15", "  s_nop 15"]
        for r in range(0, info.c_regs, 2):
            lines.append(f"  global_store_dwordx2 v51, v[{r}:{r + 1}], s[6:7] offset:{4 * r}")
        lines += ["  s_waitcnt vmcnt(0)",
                  "  s_add_u32 s4, s4, 0x2400", "  s_addc_u32 s5, s5, 0",
                  "  s_add_u32 s6, s6, 0x2000", "  s_addc_u32 s7, s7, 0"]
    return "\n".join(lines) + "\n  s_endpgm\n"


@pytest.fixture(scope="module")
def mfma_suite():
    return build("mfma_suite", _mfma_body(), vgprs=64)


def _operand(rng, element, shape):
    if element == "i8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.uniform(-2, 2, shape).astype(_ELEMENT[element])


@given(seed=st.integers(0, 2**31))
@settings(max_examples=5)
def test_every_dense_mfma_end_to_end(mfma_suite, seed):
    """Operands packed by the documented layouts (cdna3-facts.md §1 / the AMD calculator),
    read back the same way; D must equal numpy's A @ B + C per block."""
    rng = np.random.default_rng(seed)
    inp = np.zeros((len(DENSE), 0x2400), np.uint8)
    cases = []
    for t, info in enumerate(DENSE):
        a = _operand(rng, info.a_type, (info.blocks, info.m, info.k))
        b = _operand(rng, info.b_type, (info.blocks, info.k, info.n))
        c_type = {"f32": np.float32, "i32": np.int32, "f64": np.float64}[info.c_type]
        c = (rng.integers(-99, 99, (info.blocks, info.m, info.n)) if info.c_type == "i32"
             else rng.uniform(-1, 1, (info.blocks, info.m, info.n))).astype(c_type)
        lane, slot = np.arange(64)[:, None], np.arange(info.k_per_lane)[None, :]
        a_lanes = a[info.a_coord(lane, slot)]
        bb, bk, bj = info.b_coord(lane, slot)
        b_lanes = b[bb, bk, bj]
        values = np.arange(info.c_values)[None, :]
        c_lanes = c[info.c_coord(lane, values)]
        inp[t, :512] = _lane_rows(a_lanes, 8)
        inp[t, 512:1024] = _lane_rows(b_lanes, 8)
        inp[t, 1024:1024 + 8192] = _lane_rows(c_lanes, 128)
        cases.append((info, a, b, c, c_type))
    out = np.zeros((len(DENSE), 64, 128), np.uint8)
    emulate(mfma_suite, grid=1, block=64, args=[inp, out])
    for t, (info, a, b, c, c_type) in enumerate(cases):
        wide = np.int64 if info.c_type == "i32" else np.float64
        expect = np.matmul(a.astype(wide), b.astype(wide)) + c
        lane, values = np.arange(64)[:, None], np.arange(info.c_values)[None, :]
        got = out[t, :, :4 * info.c_regs].copy().view(c_type)
        want = expect[info.c_coord(lane, values)]
        if info.c_type == "i32":
            np.testing.assert_array_equal(got, want, err_msg=info.name)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * info.k,
                                       err_msg=info.name)


def _lane_rows(lanes, row_bytes):
    """Each lane's register bytes at lane * row_bytes, as the kernel's loads expect."""
    raw = np.ascontiguousarray(lanes).view(np.uint8).reshape(64, -1)
    rows = np.zeros((64, row_bytes), np.uint8)
    rows[:, : raw.shape[1]] = raw
    return rows.ravel()


def _bank_cycles_oracle(addr, lanes, access_bytes, phases):
    words = max(1, access_bytes // 4)
    total = 0
    for wave in range(addr.shape[0]):
        for phase in phases:
            banks = {}
            for lane in phase:
                if lanes[wave, lane]:
                    for k in range(words):
                        dword = int(addr[wave, lane]) // 4 + k
                        banks.setdefault(dword % 32, set()).add(dword)
            total += max((len(v) for v in banks.values()), default=0)
    return total


@given(seed=st.integers(0, 2**31), size=st.sampled_from([4, 8, 16]),
       spread=st.sampled_from([4, 64, 128, 4096]), read=st.booleans())
@settings(max_examples=20)
def test_lds_bank_cycles_match_a_brute_force_count(seed, size, spread, read):
    from argus.isa_cdna3.emu.memory_ops import lds_cycles
    from argus.isa_cdna3.isa import lds_phases

    rng = np.random.default_rng(seed)
    addr = (rng.integers(0, spread, (2, 64)) * 4).astype(np.int64)
    lanes = rng.random((2, 64)) < 0.9
    phases = lds_phases(size, read=read)
    assert sorted(lane for phase in phases for lane in phase) == list(range(64))
    assert lds_cycles(addr, lanes, size, read=read) == _bank_cycles_oracle(addr, lanes, size,
                                                                           phases)


def test_vendor_gemm_lds_reads_are_conflict_free_under_the_read_phase_model(aiter_root):
    from argus.vendor.harness import run_vendor

    outcome = run_vendor("bf16gemm_outf32_tn_64x64_pf3", root=aiter_root,
                         shape={"m": 64, "n": 64, "k": 128}, bank_conflicts=True)
    run = outcome.emulation
    reads = [pc for pc in run.lds_cycles if pc in {i.address for i in run.instructions
                                                   if i.opcode == "ds_read_b128"}]
    assert reads and all(run.lds_conflict_factor(pc) == 1.0 for pc in reads)


@pytest.mark.parametrize("stride, factor", [(4, 1.0), (8, 2.0), (128, 32.0)])
def test_strided_ds_read_reports_its_bank_conflict_factor(stride, factor):
    body = f"""
  v_mul_u32_u24_e32 v2, {stride}, v0
  ds_read_b32 v3, v2
  s_waitcnt lgkmcnt(0)
  s_endpgm
"""
    code = build(f"banks{stride}", body, lds_bytes=64 * stride + 4)
    run = emulate(code, grid=1, block=64, args=[None, None], bank_conflicts=True)
    (pc,) = run.lds_cycles
    assert run.lds_conflict_factor(pc) == factor


def test_over_read_faults_naming_the_wave_or_reads_zero_in_lenient_memory():
    """Wave 1 of the workgroup reads one row past the buffer: strict memory names that wave;
    lenient memory (vendor kernels over-read inside a V# range) reads 0 and counts it."""
    body = """
  v_add_u32_e32 v1, 0x100, v1
  global_load_dword v2, v1, s[4:5]
  s_waitcnt vmcnt(0)
  v_subrev_u32_e32 v1, 0x100, v1
  global_store_dword v1, v2, s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm
"""
    code = build("overread", body)
    data = np.arange(1, 129, dtype=np.uint32)
    out = np.zeros(128, np.uint32)
    with pytest.raises(MemoryFault, match=r"workgroup 0 wave 1 .*\(lane 0\)"):
        emulate(code, grid=1, block=128, args=[data, out])
    run = emulate(code, grid=1, block=128, args=[data, out], memory="lenient")
    np.testing.assert_array_equal(out, np.concatenate([data[64:], np.zeros(64, np.uint32)]))
    assert run.unmapped_accesses == 64


def test_a_loop_that_never_reaches_its_bound_stops_at_the_per_wave_budget_naming_the_loop():
    import inspect

    from argus.isa_cdna3.emu import emulator

    assert inspect.signature(emulator.run).parameters["max_wave_instructions"].default == (
        emulator.MAX_WAVE_INSTRUCTIONS) <= 1 << 20
    # the counter steps by 2 and never equals 7: its state changes every iteration
    body = """
  s_mov_b32 s8, 0
.Lcount:
  s_add_u32 s8, s8, 2
  s_cmp_eq_u32 s8, 7
  s_cbranch_scc0 .Lcount
  s_endpgm
"""
    with pytest.raises(EmulatorError, match=r"more than 2000 instructions.*loop at pc "
                                            r"0x[0-9a-f]+ \(`s_(add|cmp|cbranch)"):
        emulate(build("count", body), grid=4, block=128, args={}, max_wave_instructions=2000)


SPIN = """
  global_load_dword v2, v1, s[4:5] sc0 sc1
  s_waitcnt vmcnt(0)
  v_cmp_eq_u32_e32 vcc, 7, v2
  s_cbranch_vccz .Lwait
  global_store_dword v1, v2, s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm
"""


def test_a_spin_on_a_flag_nobody_sets_stops_in_seconds_on_a_large_grid_naming_the_loop():
    """2048 waves wait for a flag no wave writes: their state repeats exactly, so the emulator
    stops after a few iterations instead of at the per-wave budget (hours at this grid)."""
    import time

    code = build("spin", ".Lwait:" + SPIN)
    flag, out = np.zeros(64, np.uint32), np.zeros(64, np.uint32)
    started = time.perf_counter()
    with pytest.raises(EmulatorError, match=r"spin forever in the loop at pc 0x[0-9a-f]+ "
                                            r"\(`global_load_dword v2, v1.*closed by 0x[0-9a-f]+ "
                                            r"\(`s_cbranch_vccz"):
        emulate(code, grid=2048, block=64, args=[flag, out], memory="lenient")
    assert time.perf_counter() - started < 30


def test_a_wait_on_a_flag_another_workgroup_sets_later_is_not_a_spin():
    """Workgroup 0 polls the flag while workgroup 1 counts down 400 iterations and then sets
    it: the poll's state repeats, but another wave still runs, so it is no run-away."""
    body = """
  s_cmp_eq_u32 s2, 0
  s_cbranch_scc1 .Lwait
  s_movk_i32 s8, 400
.Lcount:
  s_sub_u32 s8, s8, 1
  s_cmp_eq_u32 s8, 0
  s_cbranch_scc0 .Lcount
  v_mov_b32_e32 v2, 7
  global_store_dword v1, v2, s[4:5]
  s_waitcnt vmcnt(0)
  s_endpgm
.Lwait:""" + SPIN
    flag, out = np.zeros(64, np.uint32), np.zeros(64, np.uint32)
    emulate(build("flag", body), grid=2, block=64, args=[flag, out])
    np.testing.assert_array_equal(out, np.full(64, 7, np.uint32))


def test_launches_the_emulator_cannot_run_are_refused_before_running():
    code = build("copy", "  global_load_dword v2, v1, s[4:5]\n  s_waitcnt vmcnt(0)\n"
                 "  global_store_dword v1, v2, s[6:7]\n  s_endpgm\n")
    inp, out = np.arange(64, dtype=np.uint32), np.zeros(64, np.uint32)
    for grid in ["12", 2.0, (1, 0), (True,), None]:
        with pytest.raises(LaunchError, match="grid must be"):
            emulate(code, grid=grid, block=64, args=[inp, out])
    with pytest.raises(LaunchError, match="exceeds the dispatch limits"):
        emulate(code, grid=(1, 2**16), block=64, args=[inp, out])
    out.flags.writeable = False
    with pytest.raises(LaunchError, match="'out' is a read-only array"):
        emulate(code, grid=1, block=64, args=[inp, out])
    out.flags.writeable = True
    with pytest.raises(LaunchError, match="'inp' is an array of Python objects"):
        emulate(code, grid=1, block=64, args=[np.array([object()] * 64), out])
    for budget in (0, -5, "many", 2.5, True):
        with pytest.raises(LaunchError, match="max_wave_instructions must be a whole number"):
            emulate(code, grid=1, block=64, args=[inp, out], max_wave_instructions=budget)
    emulate(code, grid=1, block=64, args=[inp, out])
    np.testing.assert_array_equal(out, inp)


def test_a_code_object_for_another_processor_is_refused():
    source = kernel_source("other", PROLOGUE + "  s_endpgm\n", IO).replace("--gfx942", "--gfx90a")
    gfx90a = assemble(source, mcpu="gfx90a")
    assert gfx90a.mcpu == "gfx90a"
    with pytest.raises(LaunchError, match="built for gfx90a.*CDNA3") as error:
        emulate(gfx90a, grid=1, block=64, args=[None, None])
    assert "--mcpu gfx942" in error.value.fix

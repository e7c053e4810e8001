"""The operand forms and rare opcodes AMD's kernels need beyond the core set, against per-lane
Python references: SDWA (byte/word selects with sext; destination fields padded, sign-extended or
preserved; abs/neg/clamp), fp8 and 4-bit conversions, M0-indexed VGPRs (s_set_gpr_idx_on/off),
scalar stores and atomics, and the flat-aperture registers."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from argus.asm import assemble
from argus.asm.launch import emulate
from argus.isa_cdna3.kernel_template import kernel_source

FIELDS = {"BYTE_0": (0, 8), "BYTE_1": (8, 8), "BYTE_2": (16, 8), "BYTE_3": (24, 8),
          "WORD_0": (0, 16), "WORD_1": (16, 16), "DWORD": (0, 32)}
OLD = 0x5A5AA5A5     # what every destination holds before its instruction


def select(value: int, sel: str, signed: bool = False) -> int:
    shift, width = FIELDS[sel]
    field = (value >> shift) & ((1 << width) - 1)
    if signed and field >> (width - 1):
        field -= 1 << width
    return field & 0xFFFFFFFF


def place(result: int, sel: str, unused: str) -> int:
    shift, width = FIELDS[sel]
    if width == 32:
        return result & 0xFFFFFFFF
    field = (result & ((1 << width) - 1)) << shift
    if unused == "UNUSED_PRESERVE":
        return (OLD & ~(((1 << width) - 1) << shift) & 0xFFFFFFFF) | field
    if unused == "UNUSED_SEXT" and (field >> (shift + width - 1)) & 1:
        return field | (0xFFFFFFFF << (shift + width)) & 0xFFFFFFFF
    return field


def f32_bits(x) -> int:
    return int(np.float32(x).view(np.uint32))


def f32_of(bits: int) -> np.float32:
    return np.uint32(bits).view(np.float32)


def f16_of(bits: int) -> np.float16:
    return np.uint16(bits & 0xFFFF).view(np.float16)


def fp8_of(byte: int) -> float:
    return float(np.uint8(byte).view(ml_dtypes.float8_e4m3fnuz))


# (instruction writing v10 (v[10:11] for pairs) from a=v2, b=v3; reference(a, b) -> words)
CASES = [
    ("v_cvt_f16_f32_sdwa v10, v2 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:DWORD",
     lambda a, b: [place(int(np.float16(f32_of(a)).view(np.uint16)), "WORD_1",
                         "UNUSED_PRESERVE")]),
    ("v_cvt_f32_f16_sdwa v10, v2 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1",
     lambda a, b: [f32_bits(np.float32(f16_of(a >> 16)))]),
    ("v_cvt_off_f32_i4_sdwa v10, v2 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_1",
     lambda a, b: [f32_bits(np.float32(((((a >> 8) & 0xF) ^ 8) - 8) / 16))]),
    ("v_cvt_off_f32_i4_e32 v10, v3", lambda a, b: [f32_bits(np.float32((((b & 0xF) ^ 8) - 8)
                                                                       / 16))]),
    ("v_add_u32_sdwa v10, sext(v2), v3 dst_sel:BYTE_2 dst_unused:UNUSED_SEXT src0_sel:WORD_1 "
     "src1_sel:BYTE_0",
     lambda a, b: [place(select(a, "WORD_1", True) + select(b, "BYTE_0"), "BYTE_2",
                         "UNUSED_SEXT")]),
    ("v_sub_u32_sdwa v10, v2, sext(v3) dst_sel:WORD_0 dst_unused:UNUSED_PRESERVE "
     "src0_sel:BYTE_3 src1_sel:WORD_0",
     lambda a, b: [place(select(a, "BYTE_3") - select(b, "WORD_0", True), "WORD_0",
                         "UNUSED_PRESERVE")]),
    ("v_mov_b32_sdwa v10, v2 dst_sel:BYTE_1 dst_unused:UNUSED_PRESERVE src0_sel:BYTE_3",
     lambda a, b: [place(select(a, "BYTE_3"), "BYTE_1", "UNUSED_PRESERVE")]),
    ("v_mul_f32_sdwa v10, v2, -v3 dst_sel:WORD_0 dst_unused:UNUSED_PAD src0_sel:DWORD "
     "src1_sel:DWORD",
     lambda a, b: [None if np.isnan(f32_of(a) * f32_of(b)) else
                   place(f32_bits(f32_of(a) * -f32_of(b)), "WORD_0", "UNUSED_PAD")]),
    ("v_add_f32_sdwa v10, v2, |v3| clamp dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1 "
     "src1_sel:DWORD",
     lambda a, b: [f32_bits(np.clip(f32_of(a >> 16) + abs(f32_of(b)), 0, 1))]),
    ("v_cvt_pk_f32_fp8_sdwa v[10:11], v2 src0_sel:WORD_1",
     lambda a, b: [f32_bits(fp8_of((a >> 16) & 0xFF)), f32_bits(fp8_of(a >> 24))]),
    ("v_cvt_f32_fp8_sdwa v10, v3 src0_sel:BYTE_2",
     lambda a, b: [f32_bits(fp8_of((b >> 16) & 0xFF))]),
    # constants and SGPRs are SDWA sources too; an f16 operand's inline constant is f16 bits
    ("v_cvt_f32_f16_sdwa v10, -2.0 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_0",
     lambda a, b: [f32_bits(-2.0)]),
    ("v_add_u32_sdwa v10, 7, v3 dst_sel:WORD_1 dst_unused:UNUSED_PAD src0_sel:DWORD "
     "src1_sel:BYTE_1", lambda a, b: [place(7 + select(b, "BYTE_1"), "WORD_1", "UNUSED_PAD")]),
    ("s_mov_b32 s9, 0x3c00c500\n  v_cvt_f32_f16_sdwa v10, s9 dst_sel:DWORD dst_unused:UNUSED_PAD "
     "src0_sel:WORD_1", lambda a, b: [f32_bits(1.0)]),
]


def _body() -> str:
    """Every case reads a=v2, b=v3 and writes v[10:11]; its two words go to dst[case, lane]."""
    lines = ["  s_load_dwordx4 s[4:7], s[0:1], 0x0",
             "  v_lshlrev_b32_e32 v1, 3, v0",
             "  s_waitcnt lgkmcnt(0)",
             "  global_load_dwordx2 v[2:3], v1, s[4:5]",
             "  s_waitcnt vmcnt(0)"]
    for text, _ in CASES:
        lines += [f"  v_mov_b32_e32 v10, {OLD:#x}", f"  v_mov_b32_e32 v11, {OLD:#x}",
                  f"  {text}", "  global_store_dwordx2 v1, v[10:11], s[6:7]",
                  "  s_add_u32 s6, s6, 512", "  s_addc_u32 s7, s7, 0"]
    return "\n".join(lines + ["  s_waitcnt vmcnt(0)", "  s_endpgm"])


@pytest.fixture(scope="module")
def kernel():
    return assemble(kernel_source("sdwa", _body(), [("src", "ptr"), ("dst", "ptr")]))


WORDS = st.integers(0, 2**32 - 1) | st.sampled_from(
    [0, 0x3C00, 0x3C000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x80000000, 0x3F800000,
     0x00008000, 0x0080, 0x7FFF_FFFF, 0xBF80_0000, 0x0000_7C00])


@given(st.lists(WORDS, min_size=128, max_size=128))
def test_sdwa_forms_match_per_lane_reference(kernel, words):
    operands = np.array(words, np.uint32).reshape(64, 2)
    out = np.zeros((len(CASES), 64, 2), np.uint32)
    emulate(kernel, grid=1, block=64, args=[operands, out])
    for (text, reference), results in zip(CASES, out):
        for lane in range(64):
            a, b = (int(v) for v in operands[lane])
            for got, want in zip(results[lane], reference(a, b)):
                if want is None:        # a NaN's payload bits are not specified
                    continue
                assert got == want or (np.isnan(f32_of(got)) and np.isnan(f32_of(want))), (
                    f"{text}\n lane {lane} a={a:#010x} b={b:#010x}: got {got:#010x} "
                    f"want {want:#010x}")


# --- VGPR indexing (s_set_gpr_idx_on/off), scalar stores and scalar atomics -------------------
GPR_IDX = """
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  v_lshrrev_b32_e32 v1, 6, v0
  v_readfirstlane_b32 s8, v1
  v_mov_b32_e32 v10, 100
  v_mov_b32_e32 v11, 200
  v_mov_b32_e32 v12, 300
  v_mov_b32_e32 v13, 400
  v_mov_b32_e32 v2, 0
  v_mov_b32_e32 v3, 0
  v_mov_b32_e32 v20, 7
  s_mov_b32 m0, 0x12345
  s_set_gpr_idx_on s8, gpr_idx(SRC0,DST)
  v_add_u32_e32 v2, v10, v20
  s_set_gpr_idx_off
  v_add_u32_e32 v4, v10, v20
  v_lshlrev_b32_e32 v5, 4, v0
  s_waitcnt lgkmcnt(0)
  global_store_dwordx4 v5, v[2:5], s[4:5]
  v_mov_b32_e32 v6, m0
  global_store_dword v5, v6, s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm
"""


def test_gpr_indexing_offsets_the_enabled_operands_per_wave():
    code = assemble(kernel_source("gpr_idx", GPR_IDX, [("out", "ptr"), ("m0", "ptr")],
                                  max_block=256))
    out = np.zeros((256, 4), np.uint32)
    m0 = np.zeros((256, 4), np.uint32)
    emulate(code, grid=1, block=256, args=[out, m0])
    wave = np.arange(256) // 64
    # dst v2 + wave, src0 v10 + wave; v3 is written by the wave with index 1 only
    expected_v2 = np.where(wave == 0, 100 + 7, 0)
    np.testing.assert_array_equal(out[:, 0], expected_v2)
    np.testing.assert_array_equal(out[:, 1], np.where(wave == 1, 200 + 7, 0))
    np.testing.assert_array_equal(out[:, 2], 100 + 7)           # after _off: no indexing
    np.testing.assert_array_equal(m0[:, 0], (0x12345 & ~0xF0FF) | wave | (0b1001 << 12))


SCALAR_WRITES = """
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  s_load_dword s10, s[0:1], 0x10
  s_waitcnt lgkmcnt(0)
  s_lshl_b32 s11, s2, 2
  s_add_u32 s12, s4, s11
  s_addc_u32 s13, s5, 0
  s_store_dword s10, s[12:13], 0x0
  s_mov_b32 s14, s10
  s_atomic_inc s14, s[6:7], 0x0 glc
  s_waitcnt lgkmcnt(0)
  s_store_dword s14, s[12:13], 0x100
  s_waitcnt lgkmcnt(0)
  s_endpgm
"""


@given(limit=st.integers(0, 12), start=st.integers(0, 20))
def test_scalar_store_and_atomic_inc_match_the_isa_definition(scalar_kernel, limit, start):
    stores = np.zeros(128, np.uint32)
    counter = np.array([start], np.uint32)
    workgroups = 9
    emulate(scalar_kernel, grid=workgroups, block=64, args=[stores, counter, np.uint32(limit)])
    np.testing.assert_array_equal(stores[:workgroups], limit)
    # s_atomic_inc: new = old >= limit ? 0 : old + 1, applied once per workgroup in some order
    value, seen = start, []
    for _ in range(workgroups):
        seen.append(value)
        value = 0 if value >= limit else value + 1
    assert counter[0] == value
    assert sorted(stores[64:64 + workgroups].tolist()) == sorted(seen)


@pytest.fixture(scope="module")
def scalar_kernel():
    return assemble(kernel_source("scalar_writes", SCALAR_WRITES,
                                  [("stores", "ptr"), ("counter", "ptr"), ("limit", "u32")]))


APERTURE = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  s_mov_b64 s[6:7], src_shared_base
  s_mov_b32 s8, src_private_base
  v_mov_b32_e32 v2, s6
  v_mov_b32_e32 v3, s7
  v_mov_b32_e32 v4, s8
  v_mov_b32_e32 v0, 0
  s_waitcnt lgkmcnt(0)
  global_store_dwordx3 v0, v[2:4], s[4:5]
  s_waitcnt vmcnt(0)
  s_endpgm
"""


def test_aperture_registers_read_the_linux_flat_apertures():
    out = np.zeros(3, np.uint32)
    emulate(assemble(kernel_source("aperture", APERTURE, [("out", "ptr")])), grid=1, block=64,
            args=[out])
    np.testing.assert_array_equal(out, [0, 0x10000, 0x20000])

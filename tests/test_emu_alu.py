"""ALU instruction tests: one assembled kernel per suite runs every opcode on hypothesis-chosen
operands (different per lane / per wave); results are compared with numpy reference semantics
(integer ops bit-exact, f32 arithmetic correctly rounded, transcendentals within 1 ulp)."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from argus.asm import assemble
from argus.asm.launch import emulate
from argus.isa_cdna3.kernel_template import kernel_source

M32 = 0xFFFFFFFF


def s32(x):
    x = np.asarray(x, np.int64) & M32
    return np.where(x >= 2**31, x - 2**32, x)


def u32(x):
    return np.asarray(x, np.int64) & M32


def f32(bits):
    return np.asarray(bits, np.uint32).view(np.float32)


def bfe(value, offset, width, signed):
    """Bits [offset, offset + width); signed fields sign-extend from their top bit, or from bit 31
    when they run past it (LLVM folds llvm.amdgcn.sbfe the same way)."""
    out = []
    for v, o, w in np.broadcast(value, offset, width):
        o, w, v = int(o) & 31, int(w), int(v) & M32
        if w == 0:
            out.append(0)
        elif not signed:
            out.append((v >> o) & ((1 << w) - 1))
        elif o + w >= 32:
            out.append(int(s32(v)) >> o)
        else:
            field = (v >> o) & ((1 << w) - 1)
            out.append(field - (1 << w) if field >> (w - 1) else field)
    return np.array(out, dtype=object).reshape(np.broadcast(value, offset, width).shape)


def perm(s0, s1, sel):
    out = np.zeros_like(u32(s0))
    for lane in range(out.size):
        data = (int(s0.flat[lane]) << 32) | int(s1.flat[lane])
        result = 0
        for i in range(4):
            s = (int(sel.flat[lane]) >> (8 * i)) & 0xFF
            if s < 8:
                byte = (data >> (8 * s)) & 0xFF
            elif s < 12:
                sign_byte = {8: 1, 9: 3, 10: 5, 11: 7}[s]
                byte = 0xFF if (data >> (8 * sign_byte + 7)) & 1 else 0
            else:
                byte = 0 if s == 12 else 0xFF
            result |= byte << (8 * i)
        out.flat[lane] = result
    return out


def i24(x):
    x = u32(x) & 0xFFFFFF
    return np.where(x >= 2**23, x - 2**24, x)


# (assembly with a=v2, b=v3, c=v4 and result v10, reference(a, b, c) -> uint32 bits)
INTEGER_OPS = [
    ("v_add_u32_e32 v10, v2, v3", lambda a, b, c: a + b),
    ("v_sub_u32_e32 v10, v2, v3", lambda a, b, c: a - b),
    ("v_subrev_u32_e32 v10, v2, v3", lambda a, b, c: b - a),
    ("v_add3_u32 v10, v2, v3, v4", lambda a, b, c: a + b + c),
    ("v_lshl_add_u32 v10, v2, v3, v4", lambda a, b, c: (a << (b & 31)) + c),
    ("v_lshl_or_b32 v10, v2, v3, v4", lambda a, b, c: (a << (b & 31)) | c),
    ("v_and_or_b32 v10, v2, v3, v4", lambda a, b, c: (a & b) | c),
    ("v_or3_b32 v10, v2, v3, v4", lambda a, b, c: a | b | c),
    ("v_xor_b32_e32 v10, v2, v3", lambda a, b, c: a ^ b),
    ("v_and_b32_e32 v10, v2, v3", lambda a, b, c: a & b),
    ("v_or_b32_e32 v10, v2, v3", lambda a, b, c: a | b),
    ("v_not_b32_e32 v10, v2", lambda a, b, c: ~a),
    ("v_lshlrev_b32_e32 v10, v2, v3", lambda a, b, c: b << (a & 31)),
    ("v_lshrrev_b32_e32 v10, v2, v3", lambda a, b, c: b >> (a & 31)),
    ("v_ashrrev_i32_e32 v10, v2, v3", lambda a, b, c: s32(b) >> (a & 31)),
    ("v_mul_lo_u32 v10, v2, v3", lambda a, b, c: a * b),
    ("v_mul_hi_u32 v10, v2, v3", lambda a, b, c: (a.astype(object) * b.astype(object)) >> 32),
    ("v_mul_hi_i32 v10, v2, v3", lambda a, b, c: (s32(a).astype(object) * s32(b)) >> 32),
    ("v_mul_u32_u24_e32 v10, v2, v3", lambda a, b, c: (a & 0xFFFFFF) * (b & 0xFFFFFF)),
    ("v_mul_i32_i24_e32 v10, v2, v3", lambda a, b, c: i24(a) * i24(b)),
    ("v_mad_u32_u24 v10, v2, v3, v4", lambda a, b, c: (a & 0xFFFFFF) * (b & 0xFFFFFF) + c),
    ("v_min_u32_e32 v10, v2, v3", lambda a, b, c: np.minimum(a, b)),
    ("v_max_i32_e32 v10, v2, v3", lambda a, b, c: np.maximum(s32(a), s32(b))),
    ("v_max3_u32 v10, v2, v3, v4", lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    ("v_min3_i32 v10, v2, v3, v4", lambda a, b, c: np.minimum(np.minimum(s32(a), s32(b)),
                                                               s32(c))),
    ("v_bfe_u32 v10, v2, v3, v4", lambda a, b, c: bfe(a, b, c & 31, False)),
    ("v_bfe_i32 v10, v2, v3, v4", lambda a, b, c: bfe(a, b, c & 31, True)),
    ("v_bfi_b32 v10, v2, v3, v4", lambda a, b, c: (a & b) | (~a & c)),
    ("v_alignbit_b32 v10, v2, v3, v4", lambda a, b, c: ((a.astype(object) << 32) | b)
     >> (c & 31)),
    ("v_perm_b32 v10, v2, v3, v4", lambda a, b, c: perm(u32(a), u32(b), u32(c))),
    ("v_bcnt_u32_b32 v10, v2, v3", lambda a, b, c: np.array(
        [bin(int(x)).count("1") for x in a.flat]).reshape(a.shape) + b),
    ("v_add_u32_e32 v10, 0x12345, v2", lambda a, b, c: a + 0x12345),
    ("v_add_u32_e64 v10, v2, -7", lambda a, b, c: a - 7),
    ("v_cvt_f32_u32_e32 v10, v2", lambda a, b, c: a.astype(np.float64).astype(np.float32)
     .view(np.uint32)),
    ("v_cmp_lt_u32_e32 vcc, v2, v3\n  v_cndmask_b32_e32 v10, v4, v2, vcc",
     lambda a, b, c: np.where(a < b, a, c)),
    ("v_cmp_gt_i32_e64 s[20:21], v2, v3\n  v_cndmask_b32_e64 v10, v3, v4, s[20:21]",
     lambda a, b, c: np.where(s32(a) > s32(b), c, b)),
    ("v_add_co_u32_e32 v10, vcc, v2, v3\n  v_addc_co_u32_e32 v10, vcc, v10, v4, vcc",
     lambda a, b, c: a + b + c + ((a + b) >> 32)),
    ("v_sub_co_u32_e64 v11, s[20:21], v2, v3\n  v_cndmask_b32_e64 v10, 0, 1, s[20:21]",
     lambda a, b, c: (a < b).astype(np.int64)),
    ("v_mad_u64_u32 v[10:11], s[20:21], v2, v3, v[4:5]\n  v_mov_b32_e32 v10, v11",
     lambda a, b, c: (a.astype(object) * b + c) >> 32),
    ("v_mbcnt_lo_u32_b32 v10, v2, v3", lambda a, b, c: np.array(
        [bin(int(a.flat[i]) & ((1 << (i % 64)) - 1 if i % 64 < 32 else M32)).count("1")
         for i in range(a.size)]).reshape(a.shape) + b),
    ("v_readfirstlane_b32 s20, v2\n  v_mov_b32_e32 v10, s20",
     lambda a, b, c: np.repeat(a.reshape(-1, 64)[:, :1], 64, axis=1).reshape(a.shape)),
    ("v_accvgpr_write_b32 a3, v2\n  s_nop 1\n  v_accvgpr_read_b32 v10, a3", lambda a, b, c: a),
    ("v_pk_mov_b32 v[10:11], v[2:3], v[4:5] op_sel:[1,0]", lambda a, b, c: b),
    ("v_min_i32_e32 v10, v2, v3", lambda a, b, c: np.minimum(s32(a), s32(b))),
    ("v_max_u32_e32 v10, v2, v3", lambda a, b, c: np.maximum(a, b)),
    ("v_min3_u32 v10, v2, v3, v4", lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    ("v_max3_i32 v10, v2, v3, v4", lambda a, b, c: np.maximum(np.maximum(s32(a), s32(b)),
                                                               s32(c))),
    ("v_mad_i32_i24 v10, v2, v3, v4", lambda a, b, c: i24(a) * i24(b) + c),
    ("v_mul_hi_u32_u24_e32 v10, v2, v3", lambda a, b, c: ((a & 0xFFFFFF) * (b & 0xFFFFFF))
     >> 32),
    ("v_alignbyte_b32 v10, v2, v3, v4", lambda a, b, c: ((a.astype(object) << 32) | b)
     >> (8 * (c & 3))),
    ("v_xad_u32 v10, v2, v3, v4", lambda a, b, c: (a ^ b) + c),
    ("v_add_lshl_u32 v10, v2, v3, v4", lambda a, b, c: ((a + b) & M32) << (c & 31)),
    ("v_bfrev_b32_e32 v10, v2", lambda a, b, c: np.array(
        [int(f"{int(x):032b}"[::-1], 2) for x in a.flat]).reshape(a.shape)),
    ("v_add_i32 v10, v2, v3", lambda a, b, c: a + b),
    ("v_sub_i32 v10, v2, v3", lambda a, b, c: a - b),
    ("v_subrev_co_u32_e32 v10, vcc, v2, v3", lambda a, b, c: b - a),
    ("v_sub_co_u32_e32 v10, vcc, v2, v3\n  v_subb_co_u32_e32 v10, vcc, v10, v4, vcc",
     lambda a, b, c: a - b - c - (a < b)),
    ("v_sub_co_u32_e32 v10, vcc, v2, v3\n  v_subbrev_co_u32_e32 v10, vcc, v10, v4, vcc",
     lambda a, b, c: c - ((a - b) & M32) - (a < b)),
    ("v_cvt_f32_i32_e32 v10, v2", lambda a, b, c: s32(a).astype(np.float64).astype(np.float32)
     .view(np.uint32)),
    ("v_cvt_f32_ubyte0_e32 v10, v2", lambda a, b, c: (a & 0xFF).astype(np.float32)
     .view(np.uint32)),
    ("v_cvt_f32_ubyte1_e32 v10, v2", lambda a, b, c: (a >> 8 & 0xFF).astype(np.float32)
     .view(np.uint32)),
    ("v_cvt_f32_ubyte2_e32 v10, v2", lambda a, b, c: (a >> 16 & 0xFF).astype(np.float32)
     .view(np.uint32)),
    ("v_cvt_f32_ubyte3_e32 v10, v2", lambda a, b, c: (a >> 24).astype(np.float32)
     .view(np.uint32)),
    ("v_pack_b32_f16 v10, v2, v3", lambda a, b, c: (a & 0xFFFF) | ((b & 0xFFFF) << 16)),
    ("v_mbcnt_hi_u32_b32 v10, v2, v3", lambda a, b, c: np.array(
        [bin(int(a.flat[i]) & ((1 << max(i % 64 - 32, 0)) - 1)).count("1")
         for i in range(a.size)]).reshape(a.shape) + b),
    ("v_readlane_b32 s20, v2, 5\n  v_mov_b32_e32 v10, s20",
     lambda a, b, c: np.repeat(a.reshape(-1, 64)[:, 5:6], 64, axis=1).reshape(a.shape)),
    ("v_readfirstlane_b32 s20, v4\n  v_mov_b32_e32 v10, v3\n  v_writelane_b32 v10, s20, 7",
     lambda a, b, c: np.where(np.arange(64) == 7, c.reshape(-1, 64)[:, :1], b)),
    ("v_mov_b64 v[10:11], v[2:3]", lambda a, b, c: a),
    ("v_mov_b64 v[10:11], v[2:3]\n  v_mov_b32_e32 v10, v11", lambda a, b, c: b),
    ("v_lshl_add_u64 v[10:11], v[2:3], 2, v[4:5]", lambda a, b, c: (a << 2) + c),
    ("v_lshl_add_u64 v[10:11], v[2:3], 2, v[4:5]\n  v_mov_b32_e32 v10, v11",
     lambda a, b, c: ((((b.astype(object) << 32) | a) << 2) + c) >> 32),
    ("v_mad_i64_i32 v[10:11], s[20:21], v2, v3, v[4:5]\n  v_mov_b32_e32 v10, v11",
     lambda a, b, c: (s32(a).astype(object) * s32(b) + c) >> 32),
    ("v_pk_mov_b32 v[10:11], v[4:5], v[2:3] op_sel:[0,1]", lambda a, b, c: c),
    ("v_pk_mov_b32 v[10:11], v[4:5], v[2:3] op_sel:[0,1]\n  v_mov_b32_e32 v10, v11",
     lambda a, b, c: b),
]


def _valu_kernel(ops, name):
    lines = [
        "  s_load_dwordx4 s[4:7], s[0:1], 0x0",
        "  s_mul_i32 s8, s2, 768",                   # this workgroup's 3 x 64 inputs
        "  v_lshlrev_b32_e32 v1, 2, v0",
        "  v_mov_b32_e32 v5, 0",
        "  s_waitcnt lgkmcnt(0)",
        "  s_add_u32 s4, s4, s8",
        "  s_addc_u32 s5, s5, 0",
        f"  s_mul_i32 s8, s2, {256 * len(ops)}",
        "  s_add_u32 s6, s6, s8",
        "  s_addc_u32 s7, s7, 0",
        "  global_load_dword v2, v1, s[4:5]",
        "  global_load_dword v3, v1, s[4:5] offset:256",
        "  global_load_dword v4, v1, s[4:5] offset:512",
        "  s_waitcnt vmcnt(0)",
    ]
    for asm, *_ in ops:
        lines += [f"  {asm}", "  s_nop 1", "  global_store_dword v1, v10, s[6:7]",
                  "  s_add_u32 s6, s6, 256", "  s_addc_u32 s7, s7, 0"]
    lines += ["  s_waitcnt vmcnt(0)", "  s_endpgm"]
    return assemble(kernel_source(name, "\n".join(lines), [("inp", "ptr"), ("out", "ptr")],
                                  vgprs=16, agprs=4, sgprs=32))


@pytest.fixture(scope="module")
def integer_kernel():
    return _valu_kernel(INTEGER_OPS, "integer_suite")


WAVES = 2
SPECIAL_WORDS = [0, 1, 31, 32, 0x7FFFFFFF, 0x80000000, M32]


def word_arrays(shape, specials):
    """Random uint32 operands with edge values planted at random places (drawing each element
    through hypothesis would dominate the test's run time)."""
    def build(seed, planted):
        rng = np.random.default_rng(seed)
        words = rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
        flat = words.reshape(-1)
        for position, value in planted:
            flat[position % flat.size] = value
        return words
    return st.builds(build, st.integers(0, 2**32 - 1), st.lists(
        st.tuples(st.integers(0, 2**16), st.sampled_from(specials)), max_size=32))


words = word_arrays((WAVES, 3, 64), SPECIAL_WORDS)


def run_suite(code, inputs, n_ops):
    out = np.zeros((inputs.shape[0], n_ops, 64), np.uint32)
    emulate(code, grid=inputs.shape[0], block=64, args=[np.ascontiguousarray(inputs), out])
    return out


@given(inputs=words)
def test_integer_valu_ops_are_bit_exact(integer_kernel, inputs):
    out = run_suite(integer_kernel, inputs, len(INTEGER_OPS))
    a, b, c = (u32(inputs[:, i, :]) for i in range(3))
    for k, (asm, reference) in enumerate(INTEGER_OPS):
        expect = u32(np.asarray(reference(a, b, c)).astype(object) & M32).astype(np.uint32)
        np.testing.assert_array_equal(out[:, k, :], expect, err_msg=asm)


def _ulp_close(got_bits, expect, ulps, what):
    got = f32(got_bits).astype(np.float64)
    expect = np.asarray(expect, np.float64)
    both_nan = np.isnan(got) & np.isnan(expect)
    spacing = np.spacing(np.abs(expect).astype(np.float32)).astype(np.float64)
    ok = both_nan | (got == expect) | (np.abs(got - expect) <= ulps * spacing)
    assert ok.all(), f"{what}: got {got[~ok][:4]}, expected {expect[~ok][:4]}"


def rounded(x):
    with np.errstate(all="ignore"):
        return np.asarray(x, np.float64).astype(np.float32).astype(np.float64)


# (assembly, reference in float64 of float64 inputs, allowed ulps)
FLOAT_OPS = [
    ("v_add_f32_e32 v10, v2, v3", lambda a, b, c: a + b, 0),
    ("v_sub_f32_e32 v10, v2, v3", lambda a, b, c: a - b, 0),
    ("v_mul_f32_e32 v10, v2, v3", lambda a, b, c: a * b, 0),
    ("v_fma_f32 v10, v2, v3, v4", lambda a, b, c: a * b + c, 1),
    ("v_mov_b32_e32 v12, v4\n  v_fmac_f32_e32 v12, v2, v3\n  v_mov_b32_e32 v10, v12",
     lambda a, b, c: a * b + c, 1),
    ("v_max_f32_e32 v10, v2, v3", lambda a, b, c: np.maximum(a, b), 0),
    ("v_min3_f32 v10, v2, v3, v4", lambda a, b, c: np.minimum(np.minimum(a, b), c), 0),
    ("v_add_f32_e64 v10, -v2, |v3|", lambda a, b, c: -a + np.abs(b), 0),
    ("v_mul_f32_e32 v10, 0.5, v2", lambda a, b, c: 0.5 * a, 0),
    ("v_mul_f32_e32 v10, 0x3fc00000, v2", lambda a, b, c: 1.5 * a, 0),
    ("v_exp_f32_e32 v10, v2", lambda a, b, c: np.exp2(a), 1),
    ("v_log_f32_e32 v10, v2", lambda a, b, c: np.log2(np.where(a >= 0, a, np.nan)), 1),
    ("v_rcp_f32_e32 v10, v2", lambda a, b, c: 1 / a, 1),
    ("v_rsq_f32_e32 v10, v2", lambda a, b, c: 1 / np.sqrt(np.where(a >= 0, a, np.nan)), 1),
    ("v_sqrt_f32_e32 v10, v2", lambda a, b, c: np.sqrt(np.where(a >= 0, a, np.nan)), 1),
    ("v_cvt_u32_f32_e32 v10, v2", None, 0),
    ("v_cvt_i32_f32_e32 v10, v2", None, 0),
    ("v_cmp_lt_f32_e32 vcc, v2, v3\n  v_cndmask_b32_e64 v10, 0, 1.0, vcc",
     lambda a, b, c: np.where(a < b, 1.0, 0.0), 0),
    ("v_pk_mul_f32 v[10:11], v[2:3], v[2:3] op_sel_hi:[0,0]",
     lambda a, b, c: a * a, 0),
    ("v_cvt_pkrtz_f16_f32 v10, v2, v3", None, 0),
    ("v_subrev_f32_e32 v10, v2, v3", lambda a, b, c: b - a, 0),
    ("v_min_f32_e32 v10, v2, v3", lambda a, b, c: np.minimum(a, b), 0),
    ("v_max3_f32 v10, v2, v3, v4", lambda a, b, c: np.maximum(np.maximum(a, b), c), 0),
    ("v_med3_f32 v10, v2, v3, v4", lambda a, b, c: np.median(np.stack([a, b, c]), axis=0), 0),
    ("v_mul_f32_e64 v10, v2, v3 clamp", lambda a, b, c: np.clip(a * b, 0, 1), 0),
    ("v_add_f32_e64 v10, v2, v3 mul:2", lambda a, b, c: 2 * rounded(a + b), 0),
    ("v_trunc_f32_e32 v10, v2", lambda a, b, c: np.trunc(a), 0),
    ("v_floor_f32_e32 v10, v2", lambda a, b, c: np.floor(a), 0),
    ("v_ceil_f32_e32 v10, v2", lambda a, b, c: np.ceil(a), 0),
    ("v_rndne_f32_e32 v10, v2", lambda a, b, c: np.rint(a), 0),
    ("v_fract_f32_e32 v10, v2", lambda a, b, c: np.minimum(rounded(a - np.floor(a)),
                                                            0.99999994039535522), 0),
    ("v_rcp_iflag_f32_e32 v10, v2", lambda a, b, c: 1 / a, 1),
    ("v_cvt_f16_f32_e32 v10, v2", None, 0),
    ("v_cvt_f32_f16_e32 v10, v2", None, 0),
    ("v_mov_b32_e32 v10, 0\n  v_cvt_pk_fp8_f32 v10, v2, v3", None, 0),
    ("v_mov_b32_e32 v10, 0\n  v_cvt_pk_bf8_f32 v10, v2, v3", None, 0),
    ("v_cvt_f32_fp8_e32 v10, v2", None, 0),
    ("v_cvt_f32_bf8_e32 v10, v2", None, 0),
    ("v_pk_add_f32 v[10:11], v[2:3], v[4:5]", lambda a, b, c: a + c, 0),
    ("v_pk_fma_f32 v[10:11], v[2:3], v[4:5], v[2:3]", lambda a, b, c: a * c + a, 1),
]

F16_VALUES = np.sort(np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)[
    np.isfinite(np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16))].astype(
    np.float64))


def f16_toward_zero(x):
    """The f16 of largest magnitude not exceeding |x|, by search over all finite f16 values."""
    magnitude = np.abs(x)
    positive = F16_VALUES[F16_VALUES >= 0]
    floor = positive[np.searchsorted(positive, magnitude, side="right") - 1]
    return np.where(np.isnan(x), np.nan, np.copysign(floor, x)).astype(np.float16)


@pytest.fixture(scope="module")
def float_kernel():
    return _valu_kernel(FLOAT_OPS, "float_suite")


def float_arrays(shape):
    """Random finite f32 operands over many binades (no denormals: their flush mode is a
    kernel-descriptor setting the emulator does not model) with planted edge values."""
    def build(seed, planted):
        rng = np.random.default_rng(seed)
        values = (rng.uniform(-1, 1, shape) * 2.0 ** rng.integers(-40, 40, shape)).astype(
            np.float32)
        flat = values.reshape(-1)
        for position, value in planted:
            flat[position % flat.size] = value
        return values
    edges = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0**-126, 3.0e38, -3.0e38, 1e-30]
    return st.builds(build, st.integers(0, 2**32 - 1), st.lists(
        st.tuples(st.integers(0, 2**16), st.sampled_from(edges)), max_size=32))


float_inputs = float_arrays((WAVES, 3, 64))


@given(inputs=float_inputs)
def test_float_valu_ops_are_correctly_rounded(float_kernel, inputs):
    out = run_suite(float_kernel, inputs.view(np.uint32), len(FLOAT_OPS))
    a, b, c = (inputs[:, i, :].astype(np.float64) for i in range(3))
    for k, (asm, reference, ulps) in enumerate(FLOAT_OPS):
        if "cvt_u32" in asm:
            np.testing.assert_array_equal(out[:, k, :], np.clip(np.trunc(a), 0, M32)
                                          .astype(np.uint32), err_msg=asm)
            continue
        if asm.endswith("f16_f32_e32 v10, v2"):
            expect = a.astype(np.float32).astype(np.float16).view(np.uint16).astype(np.uint32)
            np.testing.assert_array_equal(out[:, k, :], expect, err_msg=asm)
            continue
        if "f32_f16" in asm:
            half = (inputs[:, 0, :].view(np.uint32) & 0xFFFF).astype(np.uint16).view(np.float16)
            _ulp_close(out[:, k, :], half.astype(np.float64), 0, asm)
            continue
        if "cvt_pk_" in asm:
            dtype = ml_dtypes.float8_e4m3fnuz if "fp8" in asm else ml_dtypes.float8_e5m2fnuz
            limit = float(ml_dtypes.finfo(dtype).max)
            for byte, source in ((0, a), (1, b)):
                got = (out[:, k, :] >> (8 * byte) & 0xFF).astype(np.uint8).view(dtype)
                inside = np.abs(source) <= limit     # beyond: ml_dtypes' overflow, unverified
                np.testing.assert_array_equal(got[inside].astype(np.float64),
                                              source[inside].astype(np.float32).astype(dtype)
                                              .astype(np.float64), err_msg=asm)
            assert (out[:, k, :] >> 16 == 0).all(), asm
            continue
        if "cvt_f32_fp8" in asm or "cvt_f32_bf8" in asm:
            dtype = ml_dtypes.float8_e4m3fnuz if "fp8" in asm else ml_dtypes.float8_e5m2fnuz
            byte = (inputs[:, 0, :].view(np.uint32) & 0xFF).astype(np.uint8).view(dtype)
            _ulp_close(out[:, k, :], byte.astype(np.float64), 0, asm)
            continue
        if "pkrtz" in asm:
            packed = out[:, k, :]
            for half, source in ((0, a), (1, b)):
                got = (packed >> (16 * half) & 0xFFFF).astype(np.uint16).view(np.float16)
                np.testing.assert_array_equal(got, f16_toward_zero(source), err_msg=asm)
            continue
        if "cvt_i32" in asm:
            np.testing.assert_array_equal(out[:, k, :].view(np.int32), np.clip(
                np.trunc(a), -2**31, 2**31 - 1).astype(np.int32), err_msg=asm)
            continue
        with np.errstate(all="ignore"):
            expect = rounded(reference(a, b, c))
        _ulp_close(out[:, k, :], expect, ulps, asm)


SCALAR_OPS = [
    ("s_add_u32 s20, s10, s11", lambda a, b, c, scc: (a + b, (a + b) >> 32)),
    ("s_addc_u32 s20, s10, s11", lambda a, b, c, scc: (a + b + scc, (a + b + scc) >> 32)),
    ("s_sub_u32 s20, s10, s11", lambda a, b, c, scc: (a - b, int(b > a))),
    ("s_subb_u32 s20, s10, s11", lambda a, b, c, scc: (a - b - scc, int(b + scc > a))),
    ("s_add_i32 s20, s10, s11", lambda a, b, c, scc: (
        a + b, int(not -2**31 <= int(s32(a)) + int(s32(b)) < 2**31))),
    ("s_sub_i32 s20, s10, s11", lambda a, b, c, scc: (
        a - b, int(not -2**31 <= int(s32(a)) - int(s32(b)) < 2**31))),
    ("s_mul_i32 s20, s10, s11", lambda a, b, c, scc: (a * b, scc)),
    ("s_mul_hi_u32 s20, s10, s11", lambda a, b, c, scc: ((a * b) >> 32, scc)),
    ("s_lshl_b32 s20, s10, s11", lambda a, b, c, scc: (r := (a << (b & 31)) & M32, int(r != 0))),
    ("s_lshr_b32 s20, s10, s11", lambda a, b, c, scc: (r := a >> (b & 31), int(r != 0))),
    ("s_ashr_i32 s20, s10, s11", lambda a, b, c, scc: (
        r := int(s32(a)) >> (b & 31), int(r & M32 != 0))),
    ("s_and_b32 s20, s10, s11", lambda a, b, c, scc: (a & b, int(a & b != 0))),
    ("s_or_b32 s20, s10, s11", lambda a, b, c, scc: (a | b, int(a | b != 0))),
    ("s_xor_b32 s20, s10, s11", lambda a, b, c, scc: (a ^ b, int(a ^ b != 0))),
    ("s_andn2_b32 s20, s10, s11", lambda a, b, c, scc: (a & ~b & M32, int(a & ~b & M32 != 0))),
    ("s_cselect_b32 s20, s10, s11", lambda a, b, c, scc: (a if scc else b, scc)),
    ("s_min_u32 s20, s10, s11", lambda a, b, c, scc: (min(a, b), int(a < b))),
    ("s_max_i32 s20, s10, s11", lambda a, b, c, scc: (
        max(int(s32(a)), int(s32(b))), int(s32(a) > s32(b)))),
    ("s_bfe_u32 s20, s10, s11", lambda a, b, c, scc: (
        r := int(bfe(a, b, min((b >> 16) & 0x7F, 32), False)) & M32, int(r != 0))),
    ("s_cmp_lt_i32 s10, s11\n  s_mov_b32 s20, 0", lambda a, b, c, scc: (0, int(s32(a) < s32(b)))),
    ("s_cmp_ge_u32 s10, s11\n  s_mov_b32 s20, 0", lambda a, b, c, scc: (0, int(a >= b))),
    ("s_cmp_eq_u32 s10, s11\n  s_mov_b32 s20, 0", lambda a, b, c, scc: (0, int(a == b))),
    ("s_addk_i32 s10, 0x8001\n  s_mov_b32 s20, s10", lambda a, b, c, scc: (
        a - 0x7FFF, int(not -2**31 <= int(s32(a)) - 0x7FFF < 2**31))),
    ("s_movk_i32 s20, 0x9234", lambda a, b, c, scc: (0xFFFF9234, scc)),
    ("s_not_b32 s20, s10", lambda a, b, c, scc: (~a & M32, int(~a & M32 != 0))),
    ("s_bcnt1_i32_b32 s20, s10", lambda a, b, c, scc: (
        r := bin(a).count("1"), int(r != 0))),
    ("s_lshl_b64 s[20:21], s[10:11], s14\n  s_mov_b32 s20, s21", lambda a, b, c, scc: (
        (r := (((b << 32) | a) << (c & 63)) & (2**64 - 1)) >> 32, int(r != 0))),
    ("s_mul_hi_i32 s20, s10, s11", lambda a, b, c, scc: ((int(s32(a)) * int(s32(b))) >> 32,
                                                           scc)),
    ("s_min_i32 s20, s10, s11", lambda a, b, c, scc: (
        min(int(s32(a)), int(s32(b))), int(s32(a) < s32(b)))),
    ("s_max_u32 s20, s10, s11", lambda a, b, c, scc: (max(a, b), int(a > b))),
    ("s_ashr_i64 s[20:21], s[10:11], s14", lambda a, b, c, scc: (
        r := (int(s32(b)) * 2**32 + a) >> (c & 63), int(r & (2**64 - 1) != 0))),
    ("s_lshr_b64 s[20:21], s[10:11], s14\n  s_mov_b32 s20, s21", lambda a, b, c, scc: (
        (r := ((b << 32) | a) >> (c & 63)) >> 32, int(r != 0))),
    ("s_bfe_i32 s20, s10, s11", lambda a, b, c, scc: (
        r := int(bfe(a, b, min((b >> 16) & 0x7F, 32), True)), int(r & M32 != 0))),
    ("s_bfm_b32 s20, s10, s11", lambda a, b, c, scc: (((1 << (a & 31)) - 1) << (b & 31), scc)),
    ("s_lshl2_add_u32 s20, s10, s11", lambda a, b, c, scc: (
        r := (a << 2) + b, int(r >= 2**32))),
    ("s_absdiff_i32 s20, s10, s11", lambda a, b, c, scc: (
        r := abs(int(s32(a)) - int(s32(b))), int(r & M32 != 0))),
    ("s_orn2_b32 s20, s10, s11", lambda a, b, c, scc: (r := (a | ~b) & M32, int(r != 0))),
    ("s_nand_b32 s20, s10, s11", lambda a, b, c, scc: (r := ~(a & b) & M32, int(r != 0))),
    ("s_nor_b32 s20, s10, s11", lambda a, b, c, scc: (r := ~(a | b) & M32, int(r != 0))),
    ("s_xnor_b32 s20, s10, s11", lambda a, b, c, scc: (r := ~(a ^ b) & M32, int(r != 0))),
    ("s_and_b64 s[20:21], s[10:11], s[16:17]\n  s_mov_b32 s20, s21", lambda a, b, c, scc: (
        b & a, int(((b << 32 | a) & (a << 32 | c)) != 0))),
    ("s_not_b64 s[20:21], s[10:11]", lambda a, b, c, scc: (~a & M32, int((b << 32 | a)
                                                                         != 2**64 - 1))),
    ("s_cselect_b64 s[20:21], s[10:11], s[16:17]", lambda a, b, c, scc: (a if scc else c,
                                                                         scc)),
    ("s_brev_b32 s20, s10", lambda a, b, c, scc: (int(f"{a:032b}"[::-1], 2), scc)),
    ("s_bcnt1_i32_b64 s20, s[10:11]", lambda a, b, c, scc: (
        r := bin(a).count("1") + bin(b).count("1"), int(r != 0))),
    ("s_ff1_i32_b32 s20, s10", lambda a, b, c, scc: (
        (a & -a).bit_length() - 1 if a else M32, scc)),
    ("s_ff1_i32_b64 s20, s[10:11]", lambda a, b, c, scc: (
        ((v := b << 32 | a) & -v).bit_length() - 1 if (b << 32 | a) else M32, scc)),
    ("s_abs_i32 s20, s10", lambda a, b, c, scc: (r := abs(int(s32(a))) & M32, int(r != 0))),
    ("s_sext_i32_i8 s20, s10", lambda a, b, c, scc: ((a & 0xFF) - (a & 0x80) * 2, scc)),
    ("s_sext_i32_i16 s20, s10", lambda a, b, c, scc: ((a & 0xFFFF) - (a & 0x8000) * 2, scc)),
    ("s_mov_b32 s20, s11\n  s_cmov_b32 s20, s10", lambda a, b, c, scc: (a if scc else b, scc)),
    ("s_mov_b32 s20, s10\n  s_mulk_i32 s20, 0xfff3", lambda a, b, c, scc: (a * -13, scc)),
    ("s_cmpk_lt_i32 s10, 0xff00\n  s_mov_b32 s20, 0", lambda a, b, c, scc: (
        0, int(s32(a) < -256))),
    ("s_cmpk_ge_u32 s10, 0xff00\n  s_mov_b32 s20, 0", lambda a, b, c, scc: (0, int(a >= 0xFF00))),
    ("s_bitcmp1_b32 s10, s11\n  s_mov_b32 s20, 0", lambda a, b, c, scc: (0, a >> (b & 31) & 1)),
    ("s_bitcmp0_b32 s10, s11\n  s_mov_b32 s20, 0", lambda a, b, c, scc: (
        0, 1 - (a >> (b & 31) & 1))),
    ("s_cmp_eq_u64 s[10:11], s[16:17]\n  s_mov_b32 s20, 0", lambda a, b, c, scc: (
        0, int(a == c and b == a))),
    ("s_cmp_lg_u64 s[10:11], s[16:17]\n  s_mov_b32 s20, 0", lambda a, b, c, scc: (
        0, int(a != c or b != a))),
    ("s_and_saveexec_b64 s[22:23], s[10:11]\n  s_mov_b32 s20, exec_lo\n"
     "  s_mov_b64 exec, s[22:23]", lambda a, b, c, scc: (a, int((a | (b << 32)) != 0))),
]


@pytest.fixture(scope="module")
def scalar_kernel():
    lines = [
        "  s_load_dwordx4 s[4:7], s[0:1], 0x0",
        "  s_mul_i32 s8, s2, 16",
        f"  s_mul_i32 s9, s2, {8 * len(SCALAR_OPS)}",
        "  v_mov_b32_e32 v1, 0",
        "  s_waitcnt lgkmcnt(0)",
        "  s_add_u32 s4, s4, s8",
        "  s_addc_u32 s5, s5, 0",
        "  s_add_u32 s6, s6, s9",
        "  s_addc_u32 s7, s7, 0",
        "  s_load_dwordx4 s[12:15], s[4:5], 0x0",
        "  s_waitcnt lgkmcnt(0)",
    ]
    for asm, _ in SCALAR_OPS:
        lines += ["  s_mov_b32 s10, s12", "  s_mov_b32 s11, s13",
                  "  s_mov_b32 s16, s14", "  s_mov_b32 s17, s12",   # s[16:17] = (c, a)
                  "  s_cmp_lg_u32 s14, 0",                      # SCC := c != 0
                  f"  {asm}",
                  "  s_cselect_b32 s21, 1, 0",
                  "  v_mov_b32_e32 v10, s20", "  v_mov_b32_e32 v11, s21",
                  "  global_store_dwordx2 v1, v[10:11], s[6:7]",
                  "  s_add_u32 s6, s6, 8", "  s_addc_u32 s7, s7, 0"]
    lines += ["  s_waitcnt vmcnt(0)", "  s_endpgm"]
    return assemble(kernel_source("scalar_suite", "\n".join(lines),
                                  [("inp", "ptr"), ("out", "ptr")], vgprs=16, sgprs=40))


@given(inputs=word_arrays((3, 4), SPECIAL_WORDS))
def test_scalar_alu_ops_and_scc_are_bit_exact(scalar_kernel, inputs):
    out = np.zeros((3, len(SCALAR_OPS), 2), np.uint32)
    emulate(scalar_kernel, grid=3, block=64, args=[inputs, out])
    for wave in range(3):
        a, b, c = (int(x) for x in inputs[wave, :3])
        scc_in = int(c != 0)
        for k, (asm, reference) in enumerate(SCALAR_OPS):
            value, scc = reference(a, b, c, scc_in)
            assert int(out[wave, k, 0]) == int(value) & M32, (asm, a, b, c)
            assert int(out[wave, k, 1]) == int(scc), (asm, a, b, c, "scc")

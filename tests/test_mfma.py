"""The gfx942 MFMA catalogue: register counts against LLVM's assembler, operand layouts against the
formulas of cdna3-facts.md §1 / AMD's matrix instruction calculator, bijectivity, and the
execution semantics against a scatter reference."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.asm import find_toolchain
from argus.ir.expr import Var, evaluate
from argus.isa_cdna3 import MFMA, MfmaLayoutError, UnknownMfmaError, mfma
from argus.isa_cdna3.emu.mfma_exec import multiply

DENSE = [info for info in MFMA.values() if not info.sparse]
SINGLE_BLOCK = [i for i in DENSE if i.blocks == 1 and i.c_type != "f64"]
LANES = np.arange(64)


def test_catalogue_has_all_46_gfx942_matrix_instructions():
    assert len(MFMA) == 46
    assert sum(i.sparse for i in MFMA.values()) == 14
    assert {i.c_type for i in MFMA.values()} == {"f32", "i32", "f64"}
    bf16 = mfma("v_mfma_f32_32x32x8_bf16")
    assert (bf16.m, bf16.n, bf16.k, bf16.blocks) == (32, 32, 8, 1)
    assert (bf16.a_type, bf16.b_type, bf16.c_type) == ("bf16", "bf16", "f32")
    assert (bf16.cycles, bf16.passes, bf16.a_regs, bf16.c_regs) == (32, 8, 2, 16)
    assert bf16.k_per_lane == 4 and bf16.is_xdl
    mixed = mfma("v_mfma_f32_16x16x32_fp8_bf8")
    assert (mixed.a_type, mixed.b_type, mixed.k_per_lane) == ("fp8", "bf8", 8)
    assert not mfma("v_mfma_f32_32x32x2_f32").is_xdl and mfma("v_mfma_f32_32x32x2_f32").passes == 16
    assert mfma("v_mfma_f64_16x16x4_f64").c_values == 4


def test_flops_per_instruction_match_throughput_table():
    # FLOPs/CU/clk = flops / cycles * 4 SIMDs (cdna3-facts.md §1 table)
    assert mfma("v_mfma_f32_32x32x8_bf16").flops / 32 * 4 == 2048
    assert mfma("v_mfma_f32_16x16x32_fp8_fp8").flops / 16 * 4 == 4096
    assert mfma("v_mfma_f32_32x32x2_f32").flops / 64 * 4 == 256
    assert mfma("v_mfma_f64_4x4x4_4b_f64").flops / 16 * 4 == 128


def test_unknown_name_suggests_close_matches():
    with pytest.raises(UnknownMfmaError, match="v_mfma_f32_32x32x8_bf16") as err:
        mfma("v_mfma_f32_32x32x8bf16_1k")
    assert isinstance(err.value, KeyError) and isinstance(err.value, ValueError)
    assert mfma("V_MFMA_F32_16X16X16_BF16_e64") is MFMA["v_mfma_f32_16x16x16_bf16"]


def _asm_line(info, c_regs=None):
    c = c_regs if c_regs is not None else info.c_regs

    def rng(base, n):
        return f"v{base}" if n == 1 else f"v[{base}:{base + n - 1}]"
    src_c = "v60" if info.sparse else rng(0, c)
    return f"{info.name} {rng(0, c)}, {rng(40, info.a_regs)}, {rng(44, info.b_regs)}, {src_c}"


def test_register_counts_are_what_llvm_accepts():
    mc = find_toolchain()
    text = "\n".join(_asm_line(info) for info in MFMA.values()) + "\n"
    done = mc.run("mc", ["-arch=amdgcn", "-mcpu=gfx942", "-show-encoding", "-"],
                  stdin=text.encode())
    assert done.returncode == 0, done.stderr.decode()
    listing = done.stdout.decode()
    for info in MFMA.values():
        assert info.name in listing
    wrong = "\n".join(_asm_line(info, info.c_regs // 2) for info in DENSE if info.c_regs > 2)
    done = mc.run("mc", ["-arch=amdgcn", "-mcpu=gfx942", "-"], stdin=(wrong + "\n").encode())
    assert done.stderr.decode().count("error") == len(wrong.splitlines())


def test_opcodes_match_llvm_encoding():
    mc = find_toolchain()
    text = "\n".join(_asm_line(info) for info in MFMA.values()) + "\n"
    listing = mc.run("mc", ["-arch=amdgcn", "-mcpu=gfx942", "-show-encoding", "-"],
                     stdin=text.encode()).stdout.decode()
    for line in listing.splitlines():
        if "encoding" not in line:
            continue
        name = line.split()[0]
        encoding = [int(b, 16) for b in line.split("encoding: [")[1].rstrip("]").split(",")]
        word = int.from_bytes(bytes(encoding[:4]), "little")
        assert (word >> 16) & 0x7F == MFMA[name].opcode, name


def _facts_a(info, lane, slot):
    """cdna3-facts.md §1: i = l % M, k = kpl * (l // M) + s (B identical with j)."""
    return lane % info.m, info.k_per_lane * (lane // info.m) + slot


def _facts_c(info, lane, reg):
    if info.m == 16:
        return 4 * (lane // 16) + reg, lane % 16
    return 8 * (reg // 4) + 4 * (lane // 32) + reg % 4, lane % 32


@pytest.mark.parametrize("info", SINGLE_BLOCK, ids=lambda i: i.name)
def test_single_block_layouts_follow_the_documented_formulas(info):
    lane = LANES[:, None]
    slot = np.arange(info.k_per_lane)[None, :]
    block, i, k = info.a_coord(lane, slot)
    expect_i, expect_k = _facts_a(info, lane, slot)
    shape = expect_k.shape
    assert np.all(block == 0) and np.array_equal(k, expect_k)
    assert np.array_equal(np.broadcast_to(i, shape), np.broadcast_to(expect_i, shape))
    block, k, j = info.b_coord(lane, slot)
    assert np.array_equal(np.broadcast_to(j, expect_k.shape),
                          np.broadcast_to(expect_i, expect_k.shape))
    assert np.array_equal(k, expect_k)
    reg = np.arange(info.c_regs)[None, :]
    block, i, j = info.c_coord(lane, reg)
    expect_i, expect_j = _facts_c(info, lane, reg)
    assert np.array_equal(np.broadcast_to(i, (64, info.c_regs)), expect_i)
    assert np.array_equal(np.broadcast_to(j, (64, info.c_regs)),
                          np.broadcast_to(expect_j, (64, info.c_regs)))


# Multi-block and f64 mappings as printed by `matrix_calculator.py -a cdna3 -d` (v1.3.2).
CALCULATOR_C = {
    (32, "f32"): lambda l, r: (r // 16, (8 * (r // 4)) % 32 + 4 * (l // 32) + r % 4, l % 32),
    (16, "f32"): lambda l, r: (r // 4, 4 * (l // 16) + r % 4, l % 16),
    (4, "f32"): lambda l, r: (l // 4, r % 4, l % 4),
    (16, "f64"): lambda l, v: (0 * l, 4 * v + l // 16, l % 16),
    (4, "f64"): lambda l, v: ((l // 4) % 4, l // 16 + 0 * v, l % 4),
}


@pytest.mark.parametrize("info", DENSE, ids=lambda i: i.name)
def test_layouts_match_the_calculator_and_cover_every_element_once(info):
    lane = LANES[:, None]
    slot = np.arange(info.k_per_lane)[None, :]
    shape = (64, info.k_per_lane)
    block, i, k = (np.broadcast_to(x, shape) for x in info.a_coord(lane, slot))
    assert np.array_equal(i, np.broadcast_to(lane % info.m, shape))
    assert len(set(zip(block.ravel(), i.ravel(), k.ravel()))) == info.blocks * info.m * info.k
    assert k.max() < info.k and block.max() < info.blocks
    block, k, j = (np.broadcast_to(x, shape) for x in info.b_coord(lane, slot))
    assert len(set(zip(block.ravel(), k.ravel(), j.ravel()))) == info.blocks * info.k * info.n
    value = np.arange(info.c_values)[None, :]
    got = [np.broadcast_to(x, (64, info.c_values)) for x in info.c_coord(lane, value)]
    kind = "f64" if info.c_type == "f64" else "f32"
    expect = [np.broadcast_to(x, (64, info.c_values))
              for x in CALCULATOR_C[(info.m, kind)](lane, value)]
    for g, e in zip(got, expect):
        assert np.array_equal(g, e)
    cells = set(zip(*(g.ravel() for g in got)))
    assert len(cells) == info.blocks * info.m * info.n


@pytest.mark.parametrize("info", DENSE[::3], ids=lambda i: i.name)
def test_layouts_evaluate_on_symbolic_expressions(info):
    lane, slot = Var("lane", 0, 64), Var("slot", 0, info.k_per_lane)
    symbolic = info.a_coord(lane, slot)
    env = {"lane": LANES[:, None], "slot": np.arange(info.k_per_lane)[None, :]}
    for term, concrete in zip(symbolic, info.a_coord(env["lane"], env["slot"])):
        value = evaluate(term, env) if not isinstance(term, int) else term
        assert np.array_equal(np.broadcast_to(value, (64, info.k_per_lane)),
                              np.broadcast_to(concrete, (64, info.k_per_lane)))
    reg = Var("reg", 0, info.c_values)
    for term, concrete in zip(info.c_coord(lane, reg), info.c_coord(env["lane"],
                                                                   np.arange(info.c_values))):
        value = evaluate(term, {"lane": env["lane"], "reg": np.arange(info.c_values)})
        assert np.array_equal(np.broadcast_to(value, (64, info.c_values)),
                              np.broadcast_to(concrete, (64, info.c_values)))


def test_sparse_layouts_raise_a_clear_error():
    with pytest.raises(MfmaLayoutError, match="sparse"):
        mfma("v_smfmac_f32_16x16x32_f16").a_coord(0, 0)


_DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8": ml_dtypes.float8_e4m3fnuz,
           "bf8": ml_dtypes.float8_e5m2fnuz, "i8": np.int8, "f32": np.float32,
           "xf32": np.float32, "f64": np.float64}


def random_operand(rng, element, shape):
    if element == "i8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.uniform(-2, 2, shape).astype(_DTYPES[element])


def scatter(info, matrix, coord, per_lane, bits):
    """Registers [1, 64, regs] holding `matrix` where coord(lane, slot) says: the reference
    packing, written element by element with no vectorised shortcut."""
    values = np.zeros((64, per_lane), matrix.dtype)
    for lane in range(64):
        for slot in range(per_lane):
            values[lane, slot] = matrix[tuple(int(x) for x in coord(lane, slot))]
    return np.ascontiguousarray(values).view(np.uint32)[None]


@pytest.mark.parametrize("info", DENSE, ids=lambda i: i.name)
@settings(max_examples=4)  # the element-by-element reference loop is slow; 32 entries x 4
@given(seed=st.integers(0, 2**32 - 1))
def test_mfma_semantics_against_scatter_reference(info, seed):
    rng = np.random.default_rng(seed)
    a = random_operand(rng, info.a_type, (info.blocks, info.m, info.k))
    b = random_operand(rng, info.b_type, (info.blocks, info.k, info.n))
    c_dtype = {"f32": np.float32, "i32": np.int32, "f64": np.float64}[info.c_type]
    if info.c_type == "i32":
        c = rng.integers(-1000, 1000, (info.blocks, info.m, info.n)).astype(np.int32)
    else:
        c = rng.uniform(-4, 4, (info.blocks, info.m, info.n)).astype(c_dtype)
    a_regs = scatter(info, a, info.a_coord, info.k_per_lane, info.a_regs)
    b_regs = scatter(info, b, lambda l, s: (lambda blk, k, j: (blk, k, j))(*info.b_coord(l, s)),
                     info.k_per_lane, info.b_regs)
    c_regs = scatter(info, c, info.c_coord, info.c_values, info.c_regs)
    registers = [np.moveaxis(x, -1, 0) for x in (a_regs, b_regs, c_regs)]   # [regs, 1, 64]
    d_regs = np.moveaxis(multiply(info, *registers), 0, -1)
    wide = np.int64 if info.c_type == "i32" else np.float64
    expect = np.matmul(a.astype(wide), b.astype(wide)) + c.astype(wide)
    d = d_regs[0].view(c_dtype)
    for lane in range(64):
        for value in range(info.c_values):
            cell = tuple(int(x) for x in info.c_coord(lane, value))
            if info.c_type == "i32":
                assert d[lane, value] == expect[cell]
            else:
                # in float64: a product of fp8 maxima overflows fp8 (e4m3fnuz tops out at 240)
                bound = 1e-5 * (float(np.abs(a.astype(np.float64)).max())
                                * float(np.abs(b.astype(np.float64)).max()) * info.k + 4)
                assert abs(float(d[lane, value]) - expect[cell]) <= bound

"""The 14 sparse v_smfmac_* instructions of gfx942: operand layouts against literal entries printed
by AMD's matrix instruction calculator, layout coverage, execution against a numpy reference
(decompress A with its 2-bit indices, then A @ B + D), CBSZ/ABID index-set selection, and whole
kernels assembled by clang-19 running in the emulator."""

import itertools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.asm import assemble
from argus.asm.launch import emulate
from argus.ir.expr import Var, evaluate
from argus.isa_cdna3 import MFMA, MfmaLayoutError, mfma
from argus.isa_cdna3.emu import HazardError, UnsupportedOpcodeError
from argus.isa_cdna3.emu.mfma_exec import SparseIndexError, sparse_multiply
from argus.isa_cdna3.kernel_template import kernel_source

SPARSE = [info for info in MFMA.values() if info.sparse]
LANES = np.arange(64)
#: The increasing index pairs of 4:2 sparsity (hipSPARSELt MI300 docs: index0 < index1).
PAIRS = list(itertools.combinations(range(4), 2))
_DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8": ml_dtypes.float8_e4m3fnuz,
           "bf8": ml_dtypes.float8_e5m2fnuz, "i8": np.int8}
_ACCUMULATOR = {"f32": np.float32, "i32": np.int32}


# --- layouts ----------------------------------------------------------------------------------

def _holders(info, i, k, cbsz=0, abid=0):
    """(lane, A slots, index bits) holding logical A[i][k], found by brute force over every lane,
    slot and index value through sparse_a_coord / index_bit."""
    found = [(lane, slot) for lane in range(64) for slot in range(info.k_per_lane)
             for index in range(4) if info.sparse_a_coord(lane, slot, index) == (0, i, k)]
    lanes = {lane for lane, _ in found}
    assert len(lanes) == 1, found
    slots = sorted(slot for _, slot in found)
    return lanes.pop(), slots, [info.index_bit(s, cbsz, abid) for s in slots]


# Literal outputs of ROCm/amd_matrix_instruction_calculator (HEAD 2ef9189), e.g.
#   ./matrix_calculator.py -a cdna3 -i v_smfmac_f32_16x16x32_f16 --get-register -I 2 -K 31 -k
#   -> K[2][31] = v0{50}.[7:4]
# A 4-bit K field holds the indices of one stored pair (first value in the low 2 bits, README
# "Printing Compression Index Information"); A[i][k] names the register that may hold it.
CALCULATOR_K = [
    # instruction, I, K, extra flags, lane, low bit of the 4-bit field
    ("v_smfmac_f32_16x16x32_f16", 2, 31, {}, 50, 4),
    ("v_smfmac_f32_16x16x32_f16", 2, 31, {"cbsz": 0, "abid": 3}, 50, 28),
    ("v_smfmac_f32_32x32x16_bf16", 5, 13, {}, 37, 4),
    ("v_smfmac_f32_32x32x32_fp8_bf8", 30, 27, {}, 62, 8),
    ("v_smfmac_i32_16x16x64_i8", 7, 58, {"abid": 1}, 55, 24),
    ("v_smfmac_i32_32x32x32_i8", 9, 20, {"cbsz": 2, "abid": 1}, 41, 4),
]
CALCULATOR_A = [
    # instruction, I, K, lane, register, bit range of the stored pair in it
    ("v_smfmac_f32_32x32x16_bf16", 5, 13, 37, 1, (0, 31)),        # A[5][13] = v1{37}
    ("v_smfmac_f32_32x32x32_fp8_bf8", 30, 27, 62, 1, (0, 15)),    # A[30][27] = v1{62}.[15:0]
    ("v_smfmac_i32_16x16x64_i8", 7, 58, 55, 1, (0, 15)),          # A[7][58] = v1{55}.[15:0]
    ("v_smfmac_i32_16x16x64_i8", 0, 6, 0, 0, (16, 31)),           # --matrix-layout -A, lane 0
]


@pytest.mark.parametrize("name, i, k, mods, lane, low", CALCULATOR_K)
def test_index_field_matches_the_calculator(name, i, k, mods, lane, low):
    info = mfma(name)
    got_lane, slots, bits = _holders(info, i, k, **mods)
    assert got_lane == lane
    assert bits == [low, low + 2]
    assert slots[1] == slots[0] + 1 and slots[0] % 2 == 0


@pytest.mark.parametrize("name, i, k, lane, register, bits", CALCULATOR_A)
def test_stored_a_register_matches_the_calculator(name, i, k, lane, register, bits):
    info = mfma(name)
    got_lane, slots, _ = _holders(info, i, k)
    element_bits = 32 * info.a_regs // info.k_per_lane
    assert got_lane == lane
    assert {s * element_bits // 32 for s in slots} == {register}
    low = slots[0] * element_bits % 32
    assert (low, low + 2 * element_bits - 1) == bits


def test_b_and_d_entries_match_the_calculator():
    # --get-register -B -K 58 -J 7 -> B[58][7] = v2{55}.[23:16]; 8-bit elements, 4 per register
    assert mfma("v_smfmac_i32_16x16x64_i8").b_coord(55, 2 * 4 + 2) == (0, 58, 7)
    # -B -K 11 -J 3 -> B[11][3] = v1{35}.[31:16]
    assert mfma("v_smfmac_f32_32x32x16_f16").b_coord(35, 1 * 2 + 1) == (0, 11, 3)
    # -D -I 13 -J 3 -> D[13][3] = v5{35}
    assert mfma("v_smfmac_f32_32x32x16_f16").c_coord(35, 5) == (0, 13, 3)
    # --matrix-entry -A -r 1 -l 37 on the 16x16x32 f16 one -> A[5][20..23]
    info = mfma("v_smfmac_f32_16x16x32_f16")
    assert {info.sparse_a_coord(37, s, x)[2] for s in (2, 3) for x in range(4)} == {20, 21, 22, 23}


def test_registers_and_throughput_match_the_calculator():
    # `-d`: "GPRs required for A: 2, B: 4, D: 4|16", "FLOPs: 16384", "FLOPs/CU/cycle: 4096"
    f16 = mfma("v_smfmac_f32_16x16x32_f16")
    assert (f16.a_regs, f16.b_regs, f16.c_regs, f16.flops, f16.cycles) == (2, 4, 4, 16384, 16)
    assert f16.flops // f16.cycles * 4 == 4096
    fp8 = mfma("v_smfmac_f32_32x32x32_fp8_bf8")
    assert (fp8.a_type, fp8.b_type, fp8.c_regs, fp8.flops // fp8.cycles * 4) == ("fp8", "bf8", 16,
                                                                                 8192)
    assert all((i.k_per_lane, i.b_per_lane, i.index_sets) ==
               ((4, 8, 4) if i.a_type in ("f16", "bf16") else (8, 16, 2)) for i in SPARSE)


@pytest.mark.parametrize("info", SPARSE, ids=lambda i: i.name)
def test_layouts_cover_every_element(info):
    lane, slot = LANES[:, None], np.arange(info.k_per_lane)[None, :]
    shape = (64, info.k_per_lane)
    block, i, c = (np.broadcast_to(x, shape) for x in info.compressed_a_coord(lane, slot))
    assert not block.any()
    assert len(set(zip(i.ravel(), c.ravel()))) == info.m * info.k // 2
    # the two values of a stored pair stand for the same four k, in the same lane
    for index in range(4):
        _, _, k = info.sparse_a_coord(lane, slot, index)
        assert np.array_equal(k[:, 0::2] // 4, k[:, 1::2] // 4)
        assert np.array_equal(k % 4, np.full(shape, index))
    groups = {(int(r), int(kk) // 4) for r, kk in
              zip(i.ravel(), np.broadcast_to(info.sparse_a_coord(lane, slot, 0)[2], shape).ravel())}
    assert len(groups) == info.m * info.k // 4
    b_slot = np.arange(info.b_per_lane)[None, :]
    assert info.b_per_lane == 2 * info.k_per_lane
    b = [np.broadcast_to(x, (64, info.b_per_lane)) for x in info.b_coord(lane, b_slot)]
    assert len(set(zip(*(x.ravel() for x in b)))) == info.k * info.n
    value = np.arange(info.c_values)[None, :]
    d = [np.broadcast_to(x, (64, info.c_values)) for x in info.c_coord(lane, value)]
    assert len(set(zip(*(x.ravel() for x in d)))) == info.m * info.n
    # index fields of one set tile its 8 (16-bit types) or 16 (8-bit types) bits exactly
    for abid in range(info.index_sets):
        bits = sorted(info.index_bit(s, 0, abid) for s in range(info.k_per_lane))
        assert bits == list(range(abid * 2 * info.k_per_lane, (abid + 1) * 2 * info.k_per_lane, 2))


@pytest.mark.parametrize("info", SPARSE[::4], ids=lambda i: i.name)
def test_sparse_layouts_evaluate_on_symbolic_expressions(info):
    lane, slot, index = Var("lane", 0, 64), Var("slot", 0, info.k_per_lane), Var("index", 0, 4)
    env = {"lane": LANES[:, None, None], "slot": np.arange(info.k_per_lane)[None, :, None],
           "index": np.arange(4)[None, None, :]}
    shape = (64, info.k_per_lane, 4)
    concrete = info.sparse_a_coord(env["lane"], env["slot"], env["index"])
    for term, value in zip(info.sparse_a_coord(lane, slot, index), concrete):
        got = evaluate(term, env) if not isinstance(term, int) else term
        assert np.array_equal(np.broadcast_to(got, shape), np.broadcast_to(value, shape))
    bit = evaluate(info.index_bit(slot, 0, 1), env)
    assert np.array_equal(np.ravel(bit), info.index_bit(np.arange(info.k_per_lane), 0, 1))


def test_dense_entry_points_reject_sparse_and_vice_versa():
    sparse, dense = mfma("v_smfmac_f32_16x16x32_f16"), mfma("v_mfma_f32_16x16x16_f16")
    with pytest.raises(MfmaLayoutError, match="sparse_a_coord"):
        sparse.a_coord(0, 0)
    with pytest.raises(MfmaLayoutError, match="dense MFMA"):
        dense.sparse_a_coord(0, 0, 0)
    with pytest.raises(MfmaLayoutError, match="dense MFMA"):
        dense.index_bit(0)
    with pytest.raises(MfmaLayoutError, match="dense MFMA"):
        dense.compressed_a_coord(0, 0)
    with pytest.raises(MfmaLayoutError, match="sets 0..1"):
        mfma("v_smfmac_i32_16x16x64_i8").index_set(cbsz=0, abid=2)
    assert sparse.index_set(cbsz=0, abid=3) == 3 and sparse.index_set(cbsz=3, abid=15) == 0


# --- execution against numpy ------------------------------------------------------------------

def _random_problem(info, rng, pair=None):
    """Stored values [m, K/4, 2], their increasing index pairs [m, K/4, 2], dense B and C."""
    groups = info.k // 4
    choice = rng.integers(0, len(PAIRS), (info.m, groups)) if pair is None else \
        np.full((info.m, groups), pair)
    index = np.array(PAIRS)[choice]
    if info.a_type == "i8":
        stored = rng.integers(-128, 128, (info.m, groups, 2)).astype(np.int8)
        b = rng.integers(-128, 128, (info.k, info.n)).astype(np.int8)
        c = rng.integers(-2**20, 2**20, (info.m, info.n)).astype(np.int32)
    else:
        stored = rng.uniform(-2, 2, (info.m, groups, 2)).astype(_DTYPES[info.a_type])
        b = rng.uniform(-2, 2, (info.k, info.n)).astype(_DTYPES[info.b_type])
        c = rng.uniform(-4, 4, (info.m, info.n)).astype(np.float32)
    return stored, index, b, c


def _decompressed(info, stored, index):
    """The logical M x K A: zeros except the stored values at 4 * group + index."""
    dense = np.zeros((info.m, info.k), np.float64)
    for i, group, p in itertools.product(range(info.m), range(info.k // 4), range(2)):
        dense[i, 4 * group + index[i, group, p]] = float(stored[i, group, p])
    return dense


def _lane_values(info, stored, index, b, c, index_set=0, noise=None):
    """Per-lane register contents [64, bytes] written element by element from the layouts: A
    from compressed_a_coord, the index VGPR (other sets filled with `noise`), B and C."""
    a_lanes = np.zeros((64, info.k_per_lane), stored.dtype)
    words = np.zeros(64, np.uint32) if noise is None else noise.astype(np.uint32).copy()
    set_mask = sum(3 << info.index_bit(s, 0, index_set) for s in range(info.k_per_lane))
    words &= np.uint32(~set_mask & 0xFFFFFFFF)
    for lane, slot in itertools.product(range(64), range(info.k_per_lane)):
        _, i, col = info.compressed_a_coord(lane, slot)
        a_lanes[lane, slot] = stored[i, col // 2, col % 2]
        words[lane] |= np.uint32(int(index[i, col // 2, col % 2])
                                 << info.index_bit(slot, 0, index_set))
    b_lanes = np.zeros((64, info.b_per_lane), b.dtype)
    for lane, slot in itertools.product(range(64), range(info.b_per_lane)):
        _, k, j = info.b_coord(lane, slot)
        b_lanes[lane, slot] = b[k, j]
    c_lanes = np.zeros((64, info.c_values), c.dtype)
    for lane, value in itertools.product(range(64), range(info.c_values)):
        _, i, j = info.c_coord(lane, value)
        c_lanes[lane, value] = c[i, j]
    return a_lanes, words, b_lanes, c_lanes


def _registers(lanes):
    """[64, n] elements -> register-major [regs, 1, 64] uint32, as the emulator holds them."""
    return np.ascontiguousarray(lanes).view(np.uint32).reshape(64, -1).T[:, None, :]


def _check_d(info, d_lanes, stored, index, b, c):
    """Every D element against float64 / int64 numpy: decompressed A @ B + C."""
    expect = _decompressed(info, stored, index) @ b.astype(np.float64) + c.astype(np.float64)
    bound = 1e-5 * (float(np.abs(stored.astype(np.float64)).max())
                    * float(np.abs(b.astype(np.float64)).max()) * info.k / 2 + 4)
    for lane, value in itertools.product(range(64), range(info.c_values)):
        _, i, j = info.c_coord(lane, value)
        got = d_lanes[lane, value]
        if info.c_type == "i32":
            assert int(got) == int(expect[i, j]), (info.name, lane, value)
        else:
            assert abs(float(got) - expect[i, j]) <= bound, (info.name, lane, value)


@pytest.mark.parametrize("info", SPARSE, ids=lambda i: i.name)
@given(seed=st.integers(0, 2**32 - 1), pair=st.one_of(st.none(), st.integers(0, 5)),
       data=st.data())
def test_smfmac_semantics_against_decompressed_numpy(info, seed, pair, data):
    rng = np.random.default_rng(seed)
    stored, index, b, c = _random_problem(info, rng, pair)
    index_set = data.draw(st.integers(0, info.index_sets - 1), label="index_set")
    noise = rng.integers(0, 2**32, 64, dtype=np.uint64)
    a_lanes, words, b_lanes, c_lanes = _lane_values(info, stored, index, b, c, index_set, noise)
    d = sparse_multiply(info, _registers(a_lanes), _registers(b_lanes), words[None, None, :],
                        _registers(c_lanes), index_set)
    d_lanes = d[:, 0, :].T.copy().view(_ACCUMULATOR[info.c_type])
    _check_d(info, d_lanes, stored, index, b, c)


def test_decreasing_or_repeated_index_pairs_are_not_modelled():
    info = mfma("v_smfmac_f32_16x16x32_f16")
    rng = np.random.default_rng(1)
    stored, index, b, c = _random_problem(info, rng)
    a_lanes, words, b_lanes, c_lanes = _lane_values(info, stored, index, b, c)
    regs = [_registers(x) for x in (a_lanes, b_lanes, c_lanes)]
    words[37] = (words[37] & ~np.uint32(0xF0)) | np.uint32(0b0101 << 4)   # slots 2/3: (1, 1)
    with pytest.raises(SparseIndexError, match=r"lane 37 .*\(1, 1\) for A slots 2/3"):
        sparse_multiply(info, regs[0], regs[1], words[None, None, :], regs[2])
    words[37] = (words[37] & ~np.uint32(0xF0)) | np.uint32(0b0011 << 4)   # (3, 0)
    with pytest.raises(SparseIndexError, match="index0 < index1"):
        sparse_multiply(info, regs[0], regs[1], words[None, None, :], regs[2])


def test_pruned_positions_are_skipped_not_multiplied():
    """A non-finite B value where A was pruned does not reach D: SMFMAC multiplies each stored
    value with the B row its index selects (the calculator README: the zero-multiplications are
    skipped). A decompress-then-multiply model would give NaN here."""
    info = mfma("v_smfmac_f32_16x16x32_bf16")
    rng = np.random.default_rng(2)
    stored, index, b, c = _random_problem(info, rng, pair=PAIRS.index((0, 1)))
    b[2::4] = np.inf      # every pruned k (positions 2 and 3 of each group)
    a_lanes, words, b_lanes, c_lanes = _lane_values(info, stored, index, b, c)
    d = sparse_multiply(info, _registers(a_lanes), _registers(b_lanes), words[None, None, :],
                        _registers(c_lanes))
    assert np.isfinite(d.view(np.float32)).all()
    b[2::4] = 0
    _check_d(info, d[:, 0, :].T.copy().view(np.float32), stored, index, b, c)


# --- whole kernels through clang-19 and the emulator ------------------------------------------

IO = [("inp", "ptr"), ("out", "ptr")]
IN_BYTES, OUT_BYTES = 0x1700, 0x1000      # A 512 | B 1024 | index 256 | C 4096; D 4096
# each instruction twice: the last index set by ABID, then CBSZ != 0 (set 0, ABID ignored)
CASES = [(info, mods) for info in SPARSE
         for mods in ({"cbsz": 0, "abid": info.index_sets - 1}, {"cbsz": 1, "abid": 1})]


def _suite_body():
    lines = ["  s_load_dwordx4 s[4:7], s[0:1], 0x0",
             "  v_lshlrev_b32_e32 v50, 3, v0", "  v_lshlrev_b32_e32 v51, 4, v0",
             "  v_lshlrev_b32_e32 v52, 2, v0", "  v_lshlrev_b32_e32 v53, 6, v0",
             "  s_waitcnt lgkmcnt(0)"]
    for info, mods in CASES:
        lines += ["  global_load_dwordx2 v[40:41], v50, s[4:5]",
                  "  global_load_dwordx4 v[44:47], v51, s[4:5] offset:512",
                  "  global_load_dword v48, v52, s[4:5] offset:1536"]
        lines += [f"  global_load_dwordx4 v[{r}:{r + 3}], v53, s[4:5] offset:{1792 + 4 * r}"
                  for r in range(0, info.c_regs, 4)]
        flags = " ".join(f"{k}:{v}" for k, v in mods.items() if v)
        lines += ["  s_waitcnt vmcnt(0)",
                  f"  {info.name} v[0:{info.c_regs - 1}], v[40:41], v[44:47], v48 {flags}",
                  "  s_nop 15", "  s_nop 15"]
        lines += [f"  global_store_dwordx4 v53, v[{r}:{r + 3}], s[6:7] offset:{4 * r}"
                  for r in range(0, info.c_regs, 4)]
        lines += ["  s_waitcnt vmcnt(0)",
                  f"  s_add_u32 s4, s4, {IN_BYTES:#x}", "  s_addc_u32 s5, s5, 0",
                  f"  s_add_u32 s6, s6, {OUT_BYTES:#x}", "  s_addc_u32 s7, s7, 0"]
    return "\n".join(lines) + "\n  s_endpgm\n"


@pytest.fixture(scope="module")
def smfmac_suite():
    return assemble(kernel_source("smfmac_suite", _suite_body(), IO, vgprs=64))


def _rows(lanes, row_bytes):
    raw = np.ascontiguousarray(lanes).view(np.uint8).reshape(64, -1)
    rows = np.zeros((64, row_bytes), np.uint8)
    rows[:, :raw.shape[1]] = raw
    return rows.ravel()


@settings(max_examples=10)   # ~80 ms an example; one run covers all 28 instruction/modifier cases
@given(seed=st.integers(0, 2**32 - 1))
def test_every_smfmac_end_to_end_in_an_assembled_kernel(smfmac_suite, seed):
    rng = np.random.default_rng(seed)
    inp = np.zeros((len(CASES), IN_BYTES), np.uint8)
    problems = []
    for t, (info, mods) in enumerate(CASES):
        problem = _random_problem(info, rng)
        index_set = info.index_set(**mods)
        noise = rng.integers(0, 2**32, 64, dtype=np.uint64)
        a_lanes, words, b_lanes, c_lanes = _lane_values(info, *problem, index_set, noise)
        inp[t, :512] = _rows(a_lanes, 8)
        inp[t, 512:1536] = _rows(b_lanes, 16)
        inp[t, 1536:1792] = _rows(words, 4)
        inp[t, 1792:] = _rows(c_lanes, 64)
        problems.append(problem)
    out = np.zeros((len(CASES), 64, 64), np.uint8)
    emulate(smfmac_suite, grid=1, block=64, args=[inp, out])
    for t, (info, _) in enumerate(CASES):
        d_lanes = out[t, :, :4 * info.c_regs].copy().view(_ACCUMULATOR[info.c_type])
        _check_d(info, d_lanes, *problems[t])


def _one_smfmac(line, *, before=""):
    body = ("  s_load_dwordx4 s[4:7], s[0:1], 0x0\n  s_waitcnt lgkmcnt(0)\n"
            f"{before}  {line}\n  s_nop 15\n  s_nop 15\n  s_endpgm\n")
    return assemble(kernel_source("one_smfmac", body, IO, vgprs=64))


def test_index_set_the_modifiers_do_not_select_is_rejected_before_running():
    code = _one_smfmac("v_smfmac_i32_16x16x64_i8 v[0:3], v[40:41], v[44:47], v48 abid:2")
    with pytest.raises(UnsupportedOpcodeError, match="abid:2 .*not modelled"):
        emulate(code, grid=1, block=64, args=[None, None])


def test_invalid_index_pair_in_a_kernel_names_the_wave_and_lane():
    # v48 = 0 on every lane: each pair reads (0, 0)
    code = _one_smfmac("v_smfmac_f32_16x16x32_f16 v[0:3], v[40:41], v[44:47], v48",
                       before="  v_mov_b32_e32 v48, 0\n  s_nop 4\n")
    with pytest.raises(SparseIndexError, match=r"workgroup 0 wave 0 .*lane 0 .*\(0, 0\)"):
        emulate(code, grid=1, block=64, args=[None, None])


def test_valu_write_of_the_index_register_is_an_mfma_source_hazard():
    # 0x44 = pairs (0, 1) in the low two fields: valid, so only the missing wait states matter
    code = _one_smfmac("v_smfmac_f32_16x16x32_f16 v[0:3], v[40:41], v[44:47], v48",
                       before="  v_mov_b32_e32 v48, 0x44\n")
    with pytest.raises(HazardError, match="valu-to-mfma.*v48"):
        emulate(code, grid=1, block=64, args=[None, None])


@pytest.mark.parametrize("file", ["v", "a"])
def test_back_to_back_smfmacs_accumulate_in_place_without_wait_states(file):
    """vdst is the accumulator (VGPRs or AGPRs): a second SMFMAC on the same registers reads the
    first one's result with no wait states (the SrcC forwarding rule of the same registers)."""
    info = mfma("v_smfmac_f32_16x16x32_f16")
    smfmac = f"{info.name} {file}[0:3], v[40:41], v[44:47], v48 abid:2"
    to_acc = "".join(f"  v_accvgpr_write_b32 a{r}, v{r}\n" for r in range(4)) + "  s_nop 2\n"
    from_acc = "".join(f"  v_accvgpr_read_b32 v{r}, a{r}\n" for r in range(4))
    body = ("  s_load_dwordx4 s[4:7], s[0:1], 0x0\n"
            "  v_lshlrev_b32_e32 v50, 3, v0\n  v_lshlrev_b32_e32 v51, 4, v0\n"
            "  v_lshlrev_b32_e32 v52, 2, v0\n  v_lshlrev_b32_e32 v53, 6, v0\n"
            "  s_waitcnt lgkmcnt(0)\n"
            "  global_load_dwordx2 v[40:41], v50, s[4:5]\n"
            "  global_load_dwordx4 v[44:47], v51, s[4:5] offset:512\n"
            "  global_load_dword v48, v52, s[4:5] offset:1536\n"
            "  global_load_dwordx4 v[0:3], v53, s[4:5] offset:1792\n  s_waitcnt vmcnt(0)\n"
            + (to_acc if file == "a" else "")
            + f"  {smfmac}\n  {smfmac}\n  s_nop 15\n  s_nop 15\n"
            + (from_acc if file == "a" else "")
            + "  s_nop 2\n  global_store_dwordx4 v53, v[0:3], s[6:7]\n  s_endpgm\n")
    code = assemble(kernel_source("smfmac_chain", body, IO, vgprs=64, agprs=4 if file == "a"
                                  else 0))
    rng = np.random.default_rng(7)
    stored, index, b, c = _random_problem(info, rng)
    noise = rng.integers(0, 2**32, 64, dtype=np.uint64)
    a_lanes, words, b_lanes, c_lanes = _lane_values(info, stored, index, b, c, 2, noise)
    inp = np.concatenate([_rows(a_lanes, 8), _rows(b_lanes, 16), _rows(words, 4),
                          _rows(c_lanes, 64)])
    out = np.zeros((64, 64), np.uint8)
    emulate(code, grid=1, block=64, args=[inp, out], check="strict")
    twice = (stored.astype(np.float32) * 2).astype(np.float16)     # exact: |values| <= 4
    _check_d(info, out[:, :16].copy().view(np.float32), twice, index, b, c)

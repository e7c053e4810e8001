"""What each gfx942 opcode does, as numpy over a group of waves.

`compile_instruction(inst, accum_offset)` turns one `Instruction` into an executor
`run(machine, group) -> None | target | DIVERGED`: None falls through, an int jumps the whole group,
DIVERGED means the executor set per-wave PCs (divergent branch, barrier, end of program).
Unknown opcodes raise `OperandError`/`KeyError` at load time, never halfway through a run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from argus.isa_cdna3 import isa, numerics
from argus.isa_cdna3.emu.memory_ops import compile_memory, memory_row
from argus.isa_cdna3.emu.mfma_exec import check_valu_to_reader, compile_mfma
from argus.isa_cdna3.emu.operands import (
    OperandError,
    constant_bits,
    finish,
    is_vgpr,
    lane_mask_bits,
    lane_mask_reader,
    scalar_reader,
    scalar_writer,
    sgpr_index,
    to_bits,
    typed,
    vector_reader,
    vgpr_index,
)
from argus.isa_cdna3.emu.state import AT_BARRIER, ENDED, EXEC_WRITE, Group, Machine
from argus.isa_cdna3.instruction import Imm, Instruction, Label, Special
from argus.isa_cdna3.lanemaps import LaneMapError, dpp_lane_map, lane_table
from argus.isa_cdna3.mfma import MFMA
from argus.isa_cdna3.opcodes import (
    BARRIER_RELEASES,
    LGKMCNT,
    OPCODES,
    VMCNT,
    Unit,
    classify,
    unit,
)

DIVERGED = -1
Executor = Callable[[Machine, Group], Any]

U32 = np.uint32
U64 = np.uint64
_M32 = np.uint64(0xFFFFFFFF)


def base_opcode(opcode: str) -> str:
    for suffix in ("_e32", "_e64", "_vop3", "_dpp"):
        if opcode.endswith(suffix):
            return opcode[: -len(suffix)]
    return opcode


# ------------------------------------------------------------------------------------ SALU
def _sext16(value: int) -> int:
    return value - 0x10000 if value & 0x8000 else value


def _i32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.uint32).view(np.int32).astype(np.int64)


def _carry_add(a, b, scc):
    wide = a.astype(np.uint64) + b.astype(np.uint64) + scc
    return (wide & _M32).astype(U32), (wide >> np.uint64(32)).astype(U32)


def _shift_add(a, b, shift):
    """s_lshlN_add_u32: SCC is the carry out of the 64-bit (S0 << N) + S1."""
    wide = (a.astype(np.uint64) << np.uint64(shift)) + b.astype(np.uint64)
    return (wide & _M32).astype(U32), (wide >> np.uint64(32) != 0).astype(U32)


def _borrow_sub(a, b, scc):
    wide = a.astype(np.int64) - b.astype(np.int64) - scc.astype(np.int64)
    return (wide & 0xFFFFFFFF).astype(U32), (wide < 0).astype(U32)


def _signed_overflow(a, b, result, sub=False):
    sa, sb, sr = a >> U32(31), b >> U32(31), result >> U32(31)
    if sub:
        return ((sa != sb) & (sr != sa)).astype(U32)
    return ((sa == sb) & (sr != sa)).astype(U32)


def _nonzero(x):
    return (x != 0).astype(U32)


def _bfe(value, spec, signed, bits):
    """s_bfe_*: the field of `width` bits at `offset` of a `bits`-wide value, zero- or
    sign-extended; a width of `bits` or more takes everything above the offset."""
    offset = (spec & U32(bits - 1)).astype(np.int64)
    width = np.minimum((spec >> U32(16)) & U32(0x7F), U32(bits)).astype(np.int64)
    wide = value.astype(np.uint64)
    if signed:
        wide = wide.view(np.int64) if bits == 64 else value.astype(np.uint32).view(
            np.int32).astype(np.int64)
    shifted = wide >> offset.astype(wide.dtype)
    keep = np.minimum(width, bits - offset)
    if signed:
        lost = 64 - np.maximum(keep, 1)
        field = (shifted.astype(np.int64) << lost) >> lost
        field = np.where(width >= bits - offset, shifted, np.where(width == 0, 0, field))
        return field.astype(np.int64).view(np.uint64)
    mask = np.where(keep >= 64, np.uint64(2**64 - 1),
                    (np.uint64(1) << keep.astype(np.uint64)) - np.uint64(1))
    return shifted.astype(np.uint64) & mask


# name -> (wide result, wide sources, fn(a, b, scc) -> (result, new scc or None))
SOP2: dict[str, tuple[bool, bool, Callable]] = {
    "s_add_u32": (False, False, lambda a, b, c: _carry_add(a, b, 0)),
    "s_addc_u32": (False, False, lambda a, b, c: _carry_add(a, b, c.astype(np.uint64))),
    "s_sub_u32": (False, False, lambda a, b, c: _borrow_sub(a, b, np.zeros_like(c))),
    "s_subb_u32": (False, False, lambda a, b, c: _borrow_sub(a, b, c)),
    "s_add_i32": (False, False, lambda a, b, c: (r := a + b, _signed_overflow(a, b, r))),
    "s_sub_i32": (False, False, lambda a, b, c: (r := a - b, _signed_overflow(a, b, r, True))),
    "s_mul_i32": (False, False, lambda a, b, c: (a * b, None)),
    "s_mul_hi_u32": (False, False, lambda a, b, c: (
        ((a.astype(U64) * b.astype(U64)) >> U64(32)).astype(U32), None)),
    "s_mul_hi_i32": (False, False, lambda a, b, c: (
        ((_i32(a) * _i32(b)) >> 32).astype(np.int64).astype(U32), None)),
    "s_min_i32": (False, False, lambda a, b, c: (
        np.minimum(_i32(a), _i32(b)).astype(U32), (_i32(a) < _i32(b)).astype(U32))),
    "s_max_i32": (False, False, lambda a, b, c: (
        np.maximum(_i32(a), _i32(b)).astype(U32), (_i32(a) > _i32(b)).astype(U32))),
    "s_min_u32": (False, False, lambda a, b, c: (np.minimum(a, b), (a < b).astype(U32))),
    "s_max_u32": (False, False, lambda a, b, c: (np.maximum(a, b), (a > b).astype(U32))),
    "s_cselect_b32": (False, False, lambda a, b, c: (np.where(c != 0, a, b), None)),
    "s_cselect_b64": (True, True, lambda a, b, c: (np.where(c != 0, a, b), None)),
    "s_lshl_b32": (False, False, lambda a, b, c: (r := a << (b & U32(31)), _nonzero(r))),
    "s_lshr_b32": (False, False, lambda a, b, c: (r := a >> (b & U32(31)), _nonzero(r))),
    "s_ashr_i32": (False, False, lambda a, b, c: (
        r := (a.view(np.int32) >> (b & U32(31)).astype(np.int32)).view(U32), _nonzero(r))),
    "s_lshl_b64": (True, True, lambda a, b, c: (r := a << (b & U64(63)), _nonzero(r))),
    "s_lshr_b64": (True, True, lambda a, b, c: (r := a >> (b & U64(63)), _nonzero(r))),
    "s_ashr_i64": (True, True, lambda a, b, c: (
        r := (a.view(np.int64) >> (b & U64(63)).astype(np.int64)).view(U64), _nonzero(r))),
    "s_bfe_u32": (False, False, lambda a, b, c: (
        r := _bfe(a, b, False, 32).astype(U32), _nonzero(r))),
    "s_bfe_i32": (False, False, lambda a, b, c: (
        r := (_bfe(a, b, True, 32) & _M32).astype(U32), _nonzero(r))),
    "s_bfm_b32": (False, False, lambda a, b, c: (
        ((U32(1) << (a & U32(31))) - U32(1)) << (b & U32(31)), None)),
    "s_bfm_b64": (True, False, lambda a, b, c: (
        ((U64(1) << (a & U32(63)).astype(U64)) - U64(1)) << (b & U32(63)).astype(U64), None)),
    "s_lshl1_add_u32": (False, False, lambda a, b, c: _shift_add(a, b, 1)),
    "s_lshl2_add_u32": (False, False, lambda a, b, c: _shift_add(a, b, 2)),
    "s_lshl3_add_u32": (False, False, lambda a, b, c: _shift_add(a, b, 3)),
    "s_lshl4_add_u32": (False, False, lambda a, b, c: _shift_add(a, b, 4)),
    "s_absdiff_i32": (False, False, lambda a, b, c: (
        r := np.abs(_i32(a) - _i32(b)).astype(U32), _nonzero(r))),
}
for _width, _dtype in (("b32", False), ("b64", True)):
    SOP2[f"s_and_{_width}"] = (_dtype, _dtype, lambda a, b, c: (r := a & b, _nonzero(r)))
    SOP2[f"s_or_{_width}"] = (_dtype, _dtype, lambda a, b, c: (r := a | b, _nonzero(r)))
    SOP2[f"s_xor_{_width}"] = (_dtype, _dtype, lambda a, b, c: (r := a ^ b, _nonzero(r)))
    SOP2[f"s_andn2_{_width}"] = (_dtype, _dtype, lambda a, b, c: (r := a & ~b, _nonzero(r)))
    SOP2[f"s_orn2_{_width}"] = (_dtype, _dtype, lambda a, b, c: (r := a | ~b, _nonzero(r)))
    SOP2[f"s_nand_{_width}"] = (_dtype, _dtype, lambda a, b, c: (r := ~(a & b), _nonzero(r)))
    SOP2[f"s_nor_{_width}"] = (_dtype, _dtype, lambda a, b, c: (r := ~(a | b), _nonzero(r)))
    SOP2[f"s_xnor_{_width}"] = (_dtype, _dtype, lambda a, b, c: (r := ~(a ^ b), _nonzero(r)))

SOP1: dict[str, tuple[bool, Callable]] = {
    "s_mov_b32": (False, lambda a, c: (a, None)),
    "s_mov_b64": (True, lambda a, c: (a, None)),
    "s_not_b32": (False, lambda a, c: (r := ~a, _nonzero(r))),
    "s_not_b64": (True, lambda a, c: (r := ~a, _nonzero(r))),
    "s_brev_b32": (False, lambda a, c: (_bitreverse32(a), None)),
    "s_bcnt1_i32_b32": (False, lambda a, c: (r := _popcount(a.astype(U64)), _nonzero(r))),
    "s_bcnt1_i32_b64": (True, lambda a, c: (r := _popcount(a), _nonzero(r))),
    "s_ff1_i32_b32": (False, lambda a, c: (_ff1(a.astype(U64), 32), None)),
    "s_ff1_i32_b64": (True, lambda a, c: (_ff1(a, 64), None)),
    "s_abs_i32": (False, lambda a, c: (r := np.abs(_i32(a)).astype(U32), _nonzero(r))),
    "s_sext_i32_i8": (False, lambda a, c: (a.astype(np.int8).astype(np.int32).view(U32), None)),
    "s_sext_i32_i16": (False, lambda a, c: (a.astype(np.int16).astype(np.int32).view(U32), None)),
    "s_cmov_b32": (False, None),
    "s_cmov_b64": (True, None),
}


def _popcount(x: np.ndarray) -> np.ndarray:
    x = x.astype(U64)
    return np.unpackbits(x.view(np.uint8).reshape(*x.shape, 8), axis=-1).sum(-1).astype(U32)


def _ff1(x: np.ndarray, bits: int) -> np.ndarray:
    x = x.astype(U64)
    low = x & (~x + U64(1))
    result = np.where(x == 0, 0xFFFFFFFF, np.log2(np.maximum(low, U64(1)).astype(np.float64)))
    return result.astype(np.int64).astype(U32)


def _bitreverse32(x: np.ndarray) -> np.ndarray:
    as_bytes = x.astype(U32).view(np.uint8).reshape(*x.shape, 4)
    bits = np.unpackbits(as_bytes, axis=-1, bitorder="little")[..., ::-1]
    return np.packbits(bits, axis=-1, bitorder="little").view(U32).reshape(x.shape)


SOPC: dict[str, Callable] = {}
for _sfx, _conv in (("i32", _i32), ("u32", lambda x: x.astype(np.int64))):
    SOPC[f"s_cmp_eq_{_sfx}"] = lambda a, b, f=_conv: f(a) == f(b)
    SOPC[f"s_cmp_lg_{_sfx}"] = lambda a, b, f=_conv: f(a) != f(b)
    SOPC[f"s_cmp_lt_{_sfx}"] = lambda a, b, f=_conv: f(a) < f(b)
    SOPC[f"s_cmp_le_{_sfx}"] = lambda a, b, f=_conv: f(a) <= f(b)
    SOPC[f"s_cmp_gt_{_sfx}"] = lambda a, b, f=_conv: f(a) > f(b)
    SOPC[f"s_cmp_ge_{_sfx}"] = lambda a, b, f=_conv: f(a) >= f(b)
SOPC["s_cmp_eq_u64"] = lambda a, b: a == b
SOPC["s_cmp_lg_u64"] = lambda a, b: a != b
SOPC["s_bitcmp0_b32"] = lambda a, b: ((a >> (b & U32(31))) & U32(1)) == 0
SOPC["s_bitcmp1_b32"] = lambda a, b: ((a >> (b & U32(31))) & U32(1)) == 1


def _compile_sop2(inst: Instruction) -> Executor:
    wide_dst, wide_src, fn = SOP2[inst.opcode]
    dst, a_op, b_op = inst.operands
    a = scalar_reader(a_op, inst, wide=wide_src)
    # 64-bit shifts take a 32-bit shift amount
    b = scalar_reader(b_op, inst, wide=wide_src and "sh" not in inst.opcode)
    write = scalar_writer(dst, wide=wide_dst)

    def run(m: Machine, g: Group) -> None:
        av, bv = a(m, g), b(m, g)
        if wide_src and bv.dtype != np.uint64:
            bv = bv.astype(np.uint64)
        result, scc = fn(av, bv, m.scc[g.sel])
        write(m, g, result)
        if scc is not None:
            m.scc[g.sel] = scc
    return run


def _compile_sop1(inst: Instruction) -> Executor:
    name = inst.opcode
    wide, fn = SOP1[name]
    dst, src_op = inst.operands
    src = scalar_reader(src_op, inst, wide=wide)
    write = scalar_writer(dst, wide=wide)
    if fn is None:  # s_cmov: move only where SCC is set
        old = scalar_reader(dst, inst, wide=wide)

        def cmov(m: Machine, g: Group) -> None:
            write(m, g, np.where(m.scc[g.sel] != 0, src(m, g), old(m, g)))
        return cmov

    def run(m: Machine, g: Group) -> None:
        result, scc = fn(src(m, g), m.scc[g.sel])
        write(m, g, result)
        if scc is not None:
            m.scc[g.sel] = scc
    return run


SAVEEXEC = {"and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e,
            "andn2": lambda s, e: s & ~e, "orn2": lambda s, e: s | ~e,
            "nand": lambda s, e: ~(s & e), "nor": lambda s, e: ~(s | e)}


def _compile_saveexec(inst: Instruction) -> Executor:
    """s_{and,or,xor,andn2,orn2}_saveexec_b64: D = EXEC; EXEC = op(S0, EXEC); SCC = EXEC != 0."""
    fn = SAVEEXEC[inst.opcode.removeprefix("s_").removesuffix("_saveexec_b64")]
    dst, src_op = inst.operands
    src = scalar_reader(src_op, inst, wide=True)
    exec_read = scalar_reader(EXEC_OPERAND, inst, wide=True)
    write = scalar_writer(dst, wide=True)
    exec_write = scalar_writer(EXEC_OPERAND, wide=True)

    def run(m: Machine, g: Group) -> None:
        old = exec_read(m, g)
        new = fn(src(m, g), old)
        write(m, g, old)
        exec_write(m, g, new)
        m.scc[g.sel] = _nonzero(new)
    return run


EXEC_OPERAND = Special("exec")
VCC_OPERAND = Special("vcc")


def _compile_sopk(inst: Instruction) -> Executor:
    name = inst.opcode
    dst, imm = inst.operands
    value = imm.value if isinstance(imm, Imm) else None
    if value is None:
        raise OperandError(f"{name} needs an immediate")
    simm = _sext16(value & 0xFFFF)
    write = scalar_writer(dst)
    if name == "s_movk_i32":
        return lambda m, g: write(m, g, np.full(g.n, simm & 0xFFFFFFFF, U32))
    old = scalar_reader(dst, inst)
    if name == "s_addk_i32":
        def addk(m: Machine, g: Group) -> None:
            a = old(m, g)
            b = np.full(g.n, simm & 0xFFFFFFFF, U32)
            result = a + b
            overflow = _signed_overflow(a, b, result)   # before the write: `a` is a view
            write(m, g, result)
            m.scc[g.sel] = overflow
        return addk
    if name == "s_mulk_i32":
        return lambda m, g: write(m, g, old(m, g) * U32(simm & 0xFFFFFFFF))
    if name.startswith("s_cmpk_"):
        kind = name[-3:]
        cmp = SOPC["s_cmp_" + name[len("s_cmpk_"):]]
        const = simm & 0xFFFFFFFF if kind == "i32" else value & 0xFFFF

        def cmpk(m: Machine, g: Group) -> None:
            m.scc[g.sel] = cmp(old(m, g), np.full(g.n, const, U32)).astype(U32)
        return cmpk
    raise KeyError(name)


def _compile_sopc(inst: Instruction) -> Executor:
    fn = SOPC[inst.opcode]
    wide = inst.opcode.endswith("u64")
    a = scalar_reader(inst.operands[0], inst, wide=wide)
    b = scalar_reader(inst.operands[1], inst, wide=wide)

    def run(m: Machine, g: Group) -> None:
        m.scc[g.sel] = fn(a(m, g), b(m, g)).astype(U32)
    return run


# ------------------------------------------------------------------------------------ SOPP
BRANCHES = ("s_branch", "s_cbranch_scc0", "s_cbranch_scc1", "s_cbranch_vccz", "s_cbranch_vccnz",
            "s_cbranch_execz", "s_cbranch_execnz")
CONTROL = ("s_waitcnt", "s_endpgm", "s_barrier", "s_setvskip", "s_set_gpr_idx_on",
           "s_set_gpr_idx_off")
SOPK = ("s_movk_i32", "s_addk_i32", "s_mulk_i32")


def _branch_condition(name: str) -> Callable[[Machine, Group], np.ndarray] | None:
    def vcc_zero(m, g):
        return (m.sgpr[isa.VCC][g.sel] | m.sgpr[isa.VCC + 1][g.sel]) == 0

    def exec_zero(m, g):
        return (m.sgpr[isa.EXEC][g.sel] | m.sgpr[isa.EXEC + 1][g.sel]) == 0

    return {
        "s_branch": None,
        "s_cbranch_scc0": lambda m, g: m.scc[g.sel] == 0,
        "s_cbranch_scc1": lambda m, g: m.scc[g.sel] != 0,
        "s_cbranch_vccz": vcc_zero,
        "s_cbranch_vccnz": lambda m, g: ~vcc_zero(m, g),
        "s_cbranch_execz": exec_zero,
        "s_cbranch_execnz": lambda m, g: ~exec_zero(m, g),
    }[name]


def _compile_branch(inst: Instruction) -> Executor:
    (label,) = inst.operands
    if not isinstance(label, Label):
        raise OperandError(f"{inst.opcode} target is not a label: {label}")
    target = label.target
    cond = _branch_condition(inst.opcode)
    if cond is None:
        return lambda m, g: target
    fallthrough = inst.next_address

    def run(m: Machine, g: Group) -> Any:
        taken = cond(m, g)
        if taken.all():
            return target
        if not taken.any():
            return None
        m.pc[g.sel] = np.where(taken, target, fallthrough)
        return DIVERGED
    return run


def _compile_waitcnt(inst: Instruction) -> Executor:
    vm = inst.mod("vmcnt", isa.VMCNT_MAX)
    lgkm = inst.mod("lgkmcnt", isa.LGKMCNT_MAX)

    def run(m: Machine, g: Group) -> None:
        if vm < isa.VMCNT_MAX:
            m.wait(g, VMCNT, vm)
        if lgkm < isa.LGKMCNT_MAX:
            m.wait(g, LGKMCNT, lgkm)
    return run


def _compile_setvskip(inst: Instruction) -> Executor:
    """s_setvskip S0, S1: VSKIP = bit S1[4:0] of S0; while set, vector instructions are skipped."""
    value = scalar_reader(inst.operands[0], inst)
    bit = scalar_reader(inst.operands[1], inst)

    def run(m: Machine, g: Group) -> None:
        m.vskip[g.sel] = ((value(m, g) >> (bit(m, g) & U32(31))) & U32(1)).astype(bool)
    return run


def is_vector(inst: Instruction) -> bool:
    """Instructions VSKIP suppresses: VALU, MFMA, VMEM and LDS."""
    return unit(inst.opcode) in (Unit.VALU, Unit.MFMA, Unit.VMEM, Unit.LDS)


def _end(m: Machine, g: Group) -> int:
    m.state[g.sel] = ENDED
    return DIVERGED


GPR_IDX_SLOTS = {"SRC0": 1, "SRC1": 2, "SRC2": 3, "DST": 0}    # operand position of each mode


def _compile_set_gpr_idx_on(inst: Instruction) -> Executor:
    """s_set_gpr_idx_on S0, gpr_idx(...): M0[7:0] = S0[7:0], M0[15:12] = the enabled operands."""
    index = scalar_reader(inst.operands[0], inst)
    modes = tuple(inst.mod("gpr_idx", ()))
    mode_bits = sum(1 << ("SRC0", "SRC1", "SRC2", "DST").index(mode) for mode in modes)

    def run(m: Machine, g: Group) -> None:
        m0 = m.sgpr[isa.M0][g.sel]
        m.write_s(g, isa.M0, (m0 & U32(~0xF0FF & 0xFFFFFFFF)) | (index(m, g) & U32(0xFF))
                  | U32(mode_bits << 12))
    return run


def compile_gpr_indexed(inst: Instruction, accum: int, modes: tuple[str, ...]) -> Executor:
    """A VALU instruction between s_set_gpr_idx_on and _off: the VGPR operands named by `modes`
    are offset by M0[7:0] of each wave (waves with different offsets run one after another)."""
    slots = {GPR_IDX_SLOTS[mode] for mode in modes}
    compiled: dict[int, Executor] = {}

    def shifted(offset: int) -> Executor:
        if offset not in compiled:
            operands = tuple(attrs.evolve(op, index=op.index + offset)
                             if i in slots and getattr(op, "file", None) == "v" else op
                             for i, op in enumerate(inst.operands))
            compiled[offset] = compile_instruction(attrs.evolve(inst, operands=operands), accum)
        return compiled[offset]

    shifted(0)      # operand errors surface when the kernel is loaded

    def run(m: Machine, g: Group) -> Any:
        offsets = m.sgpr[isa.M0][g.sel] & U32(0xFF)
        first = int(offsets[0])
        if (offsets == first).all():
            return shifted(first)(m, g)
        for offset in np.unique(offsets):
            rows = offsets == offset
            part = Group(g.waves[rows], m.waves, g.pc)
            part.exec, part.exec_full = g.exec[rows], bool(g.exec[rows].all())
            part.tick, part.recent_valu = g.tick, g.recent_valu
            shifted(int(offset))(m, part)
        return None
    return run


def _barrier(inst: Instruction) -> Executor:
    after = inst.next_address

    def run(m: Machine, g: Group) -> int:
        _check_writes_retired(m, g, inst)
        m.state[g.sel] = AT_BARRIER
        m.pc[g.sel] = after
        return DIVERGED
    return run


#: Per counter, what a write still in flight at `s_barrier` is reported as: (kind, the memory
#: it writes, the wait that retires it).
_IN_FLIGHT = ((LGKMCNT, "lds-write-in-flight", "LDS", "an LDS write", "lgkmcnt"),
              (VMCNT, "global-write-in-flight", "memory", "a global store", "vmcnt"))


def _check_writes_retired(m: Machine, g: Group, inst: Instruction) -> None:
    """LLVM's GFX942 memory model (AMDGPUUsage) orders neither the LDS operations nor the
    vector memory writes of different waves, so a `ds_write`, global store or atomic still in
    flight at `s_barrier` may land after another wave's access behind the barrier; LLVM
    retires it with `s_waitcnt` first (`opcodes.BARRIER_RELEASES`). Strict mode holds code to
    that rule; the emulator writes memory at issue, so this check is what shows the missing
    wait. AMD's hand-written attention kernels rely on the LDS queue serving requests in
    arrival order instead, so "warn" and "off" (the vendor-kernel modes) do not report it."""
    if m.check != "strict":
        return
    for counter, kind, where, what, wait in _IN_FLIGHT:
        for entry in m.queue[counter]:
            if classify(entry.text.partition(" ")[0]) not in BARRIER_RELEASES:
                continue
            rows = np.isin(g.waves, entry.waves[~entry.done])
            if rows.any():
                m.report(g, rows, kind, inst, entry.pc, entry.text, where,
                         f"{what} is still in flight at s_barrier; other waves may read the old "
                         f"data: insert `s_waitcnt {wait}(0)` (or the count that retires it)")
                return


NOP_OPCODES = {"s_nop", "v_nop", "s_setprio", "s_sleep", "s_dcache_wb", "s_icache_inv",
               "s_dcache_inv", "s_sethalt", "s_ttracedata", "buffer_wbinvl1", "buffer_wbinvl1_vol",
               "buffer_inv", "buffer_wbl2", "s_setreg_imm32_b32"}


# ------------------------------------------------------------------------------------ VALU
F1, F2, F3 = ("f32",), ("f32", "f32"), ("f32", "f32", "f32")


def _fma64(a, b, c):
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def _u24(x):
    return (x & U32(0xFFFFFF)).astype(U64)


def _i24(x):
    return ((x & U32(0xFFFFFF)).astype(np.int64) ^ 0x800000) - 0x800000


def _mul_u64(a, b):
    return a.astype(U64) * b.astype(U64)


def _perm(s0, s1, sel):
    """v_perm_b32: byte i of the result is chosen by byte i of `sel` from the 8 bytes {s0, s1}."""
    combined = (s0.astype(U64) << U64(32)) | s1.astype(U64)
    sel = np.broadcast_to(sel, np.broadcast_shapes(np.shape(combined), np.shape(sel)))
    combined = np.broadcast_to(combined, sel.shape)
    result = np.zeros(sel.shape, U32)
    for i in range(4):
        s = (sel >> U32(8 * i)) & U32(0xFF)
        byte = ((combined >> (s.astype(U64) & U64(7)) * U64(8)) & U64(0xFF)).astype(U32)
        sign_src = np.where(s == 8, 1, np.where(s == 9, 3, np.where(s == 10, 5, 7)))
        sign = ((combined >> (sign_src.astype(U64) * U64(8) + U64(7))) & U64(1)).astype(U32)
        byte = np.where(s < 8, byte, np.where(s < 12, sign * U32(0xFF),
                                              np.where(s == 12, U32(0), U32(0xFF))))
        result |= byte << U32(8 * i)
    return result


def _bfe_v(value, offset, width, signed):
    """v_bfe_*: bits [offset, offset + width) of S0; the signed form sign-extends from the
    field's top bit, or from bit 31 when the field runs past it (LLVM's amdgcn.sbfe folding)."""
    offset = offset & U32(31)
    width = width & U32(31)
    if not signed:
        return (value >> offset) & ((U32(1) << width) - U32(1))
    keep = np.minimum(width, U32(32) - offset)
    lost = (U32(32) - keep).astype(np.int32)
    shifted = (value.view(np.int32) >> offset.astype(np.int32)).view(U32)
    field = ((shifted << lost.astype(U32)).view(np.int32) >> lost).view(U32)
    return np.where(width == 0, U32(0), field)


def _f16_rtz(x: np.ndarray) -> np.ndarray:
    """f32 -> f16 rounding toward zero (numpy rounds to nearest; step back where it rounded up)."""
    nearest = np.asarray(x, np.float32).astype(np.float16)
    grew = np.abs(nearest.astype(np.float32)) > np.abs(x)
    return np.where(grew, np.nextafter(nearest, np.float16(0)), nearest)


def _cvt_pkrtz(a, b):
    lo = _f16_rtz(a).view(np.uint16).astype(U32)
    hi = _f16_rtz(b).view(np.uint16).astype(U32)
    return lo | (hi << U32(16))


def _cvt_pk_fp8(a, b, old, hi, dtype):
    lo_bytes = np.stack([np.asarray(a, np.float32).astype(dtype).view(np.uint8),
                         np.asarray(b, np.float32).astype(dtype).view(np.uint8)], -1)
    packed = lo_bytes[..., 0].astype(U32) | (lo_bytes[..., 1].astype(U32) << U32(8))
    if hi:
        return (old & U32(0xFFFF)) | (packed << U32(16))
    return (old & U32(0xFFFF0000)) | packed


# name -> (operand kinds, fn) ; the result dtype says how it is stored
VOP: dict[str, tuple[tuple[str, ...], Callable]] = {
    "v_mov_b32": (("u32",), lambda a: a),
    "v_not_b32": (("u32",), lambda a: ~a),
    "v_bfrev_b32": (("u32",), _bitreverse32),
    "v_add_u32": (("u32", "u32"), lambda a, b: a + b),
    "v_sub_u32": (("u32", "u32"), lambda a, b: a - b),
    "v_subrev_u32": (("u32", "u32"), lambda a, b: b - a),
    "v_add_i32": (("u32", "u32"), lambda a, b: a + b),
    "v_sub_i32": (("u32", "u32"), lambda a, b: a - b),
    "v_add3_u32": (("u32", "u32", "u32"), lambda a, b, c: a + b + c),
    "v_lshl_add_u32": (("u32", "u32", "u32"), lambda a, b, c: (a << (b & U32(31))) + c),
    "v_add_lshl_u32": (("u32", "u32", "u32"), lambda a, b, c: (a + b) << (c & U32(31))),
    "v_lshl_or_b32": (("u32", "u32", "u32"), lambda a, b, c: (a << (b & U32(31))) | c),
    "v_and_or_b32": (("u32", "u32", "u32"), lambda a, b, c: (a & b) | c),
    "v_or3_b32": (("u32", "u32", "u32"), lambda a, b, c: a | b | c),
    "v_xad_u32": (("u32", "u32", "u32"), lambda a, b, c: (a ^ b) + c),
    "v_and_b32": (("u32", "u32"), lambda a, b: a & b),
    "v_or_b32": (("u32", "u32"), lambda a, b: a | b),
    "v_xor_b32": (("u32", "u32"), lambda a, b: a ^ b),
    "v_lshlrev_b32": (("u32", "u32"), lambda a, b: b << (a & U32(31))),
    "v_lshrrev_b32": (("u32", "u32"), lambda a, b: b >> (a & U32(31))),
    "v_ashrrev_i32": (("u32", "i32"), lambda a, b: b >> (a & U32(31)).astype(np.int32)),
    "v_mul_lo_u32": (("u32", "u32"), lambda a, b: a * b),
    "v_mul_hi_u32": (("u32", "u32"), lambda a, b: (_mul_u64(a, b) >> U64(32)).astype(U32)),
    "v_mul_hi_i32": (("i32", "i32"), lambda a, b: (
        (a.astype(np.int64) * b.astype(np.int64)) >> 32).astype(np.int64).astype(U32)),
    "v_mul_u32_u24": (("u32", "u32"), lambda a, b: (_u24(a) * _u24(b)).astype(U32)),
    "v_mul_hi_u32_u24": (("u32", "u32"), lambda a, b: ((_u24(a) * _u24(b)) >> U64(32))
                         .astype(U32)),
    "v_mul_i32_i24": (("u32", "u32"), lambda a, b: (_i24(a) * _i24(b)).astype(U32)),
    "v_mad_u32_u24": (("u32", "u32", "u32"), lambda a, b, c: (_u24(a) * _u24(b)).astype(U32)
                      + c),
    "v_mad_i32_i24": (("u32", "u32", "u32"), lambda a, b, c: (_i24(a) * _i24(b)).astype(U32)
                      + c),
    "v_min_u32": (("u32", "u32"), np.minimum),
    "v_max_u32": (("u32", "u32"), np.maximum),
    "v_min_i32": (("i32", "i32"), np.minimum),
    "v_max_i32": (("i32", "i32"), np.maximum),
    "v_min3_u32": (("u32", "u32", "u32"), lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    "v_max3_u32": (("u32", "u32", "u32"), lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    "v_min3_i32": (("i32", "i32", "i32"), lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    "v_max3_i32": (("i32", "i32", "i32"), lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    "v_bfe_u32": (("u32", "u32", "u32"), lambda a, b, c: _bfe_v(a, b, c, False)),
    "v_bfe_i32": (("u32", "u32", "u32"), lambda a, b, c: _bfe_v(a, b, c, True)),
    "v_bfi_b32": (("u32", "u32", "u32"), lambda a, b, c: (a & b) | (~a & c)),
    "v_alignbit_b32": (("u32", "u32", "u32"), lambda a, b, c: (
        ((a.astype(U64) << U64(32)) | b.astype(U64)) >> (c & U32(31)).astype(U64)).astype(U32)),
    "v_alignbyte_b32": (("u32", "u32", "u32"), lambda a, b, c: (
        ((a.astype(U64) << U64(32)) | b.astype(U64)) >> ((c & U32(3)) * U32(8)).astype(U64))
        .astype(U32)),
    "v_perm_b32": (("u32", "u32", "u32"), _perm),
    "v_bcnt_u32_b32": (("u32", "u32"), lambda a, b: _popcount(a) + b),
    "v_cvt_f32_u32": (("u32",), numerics.cvt_f32_u32),
    "v_cvt_f32_i32": (("i32",), lambda a: a.astype(np.float32)),
    "v_cvt_u32_f32": (("f32",), numerics.cvt_u32_f32),
    "v_cvt_i32_f32": (("f32",), numerics.cvt_i32_f32),
    "v_cvt_f16_f32": (("f32",), lambda a: a.astype(np.float16).view(np.uint16).astype(U32)),
    "v_cvt_f32_f16": (("f16",), lambda a: a.astype(np.float32)),
    "v_cvt_f32_ubyte0": (("u32",), lambda a: (a & U32(0xFF)).astype(np.float32)),
    "v_cvt_f32_ubyte1": (("u32",), lambda a: ((a >> U32(8)) & U32(0xFF)).astype(np.float32)),
    "v_cvt_f32_ubyte2": (("u32",), lambda a: ((a >> U32(16)) & U32(0xFF)).astype(np.float32)),
    "v_cvt_f32_ubyte3": (("u32",), lambda a: (a >> U32(24)).astype(np.float32)),
    # S0[3:0] as a signed 4-bit integer, in units of 1/16
    "v_cvt_off_f32_i4": (("u32",), lambda a: (((a & U32(0xF)).astype(np.int32) ^ 8) - 8)
                         .astype(np.float32) * np.float32(0.0625)),
    "v_pack_b32_f16": (("u32", "u32"), lambda a, b: (a & U32(0xFFFF)) | (b << U32(16))),
    "v_cvt_pkrtz_f16_f32": (("f32", "f32"), _cvt_pkrtz),
    "v_add_f32": (F2, lambda a, b: a + b),
    "v_sub_f32": (F2, lambda a, b: a - b),
    "v_subrev_f32": (F2, lambda a, b: b - a),
    "v_mul_f32": (F2, lambda a, b: a * b),
    "v_max_f32": (F2, numerics.max_f32),
    "v_min_f32": (F2, numerics.min_f32),
    "v_max3_f32": (F3, lambda a, b, c: numerics.max_f32(numerics.max_f32(a, b), c)),
    "v_min3_f32": (F3, lambda a, b, c: numerics.min_f32(numerics.min_f32(a, b), c)),
    "v_med3_f32": (F3, lambda a, b, c: numerics.max_f32(numerics.min_f32(a, b), numerics.min_f32(
        numerics.max_f32(a, b), c))),
    "v_fma_f32": (F3, _fma64),
    "v_exp_f32": (F1, numerics.exp2),
    "v_log_f32": (F1, numerics.log2),
    "v_rcp_f32": (F1, numerics.rcp),
    "v_rcp_iflag_f32": (F1, numerics.rcp),
    "v_rsq_f32": (F1, numerics.rsq),
    "v_sqrt_f32": (F1, numerics.sqrt),
    "v_trunc_f32": (F1, np.trunc),
    "v_floor_f32": (F1, np.floor),
    "v_ceil_f32": (F1, np.ceil),
    "v_rndne_f32": (F1, np.rint),
    # the largest f32 below 1.0 bounds the result (a tiny negative input would round to 1.0)
    "v_fract_f32": (F1, lambda a: np.minimum(a - np.floor(a), np.float32(0.99999994))),
}


def _omod_clamp(inst: Instruction, value: Any) -> Any:
    if value.dtype != np.float32:
        return value
    if inst.has("mul"):
        value = value * np.float32(inst.mod("mul"))
    if inst.has("div"):
        value = value / np.float32(inst.mod("div"))
    if inst.has("clamp"):
        value = np.clip(value, np.float32(0), np.float32(1))
    return value


_LANES = np.arange(isa.WAVE_SIZE)
_DPP_MASKS = ("row_mask", "bank_mask", "bound_ctrl")


def dpp_source_lanes(inst: Instruction) -> np.ndarray:
    """For each lane, the lane its DPP src0 comes from (-1: no valid source), from the control's
    map in isa_cdna3.lanemaps."""
    controls = [(name, value) for name, value in inst.modifiers if name not in _DPP_MASKS]
    if len(controls) != 1:
        raise OperandError(f"{inst.opcode}: expected one DPP control in `{inst.text}`, found "
                           f"{[name for name, _ in controls]}")
    try:
        name, params = dpp_lane_map(*controls[0])
    except LaneMapError as error:
        raise OperandError(f"{inst.opcode}: {error} (in `{inst.text}`)") from None
    return lane_table(name, params)


def _dpp_write_lanes(inst: Instruction) -> np.ndarray:
    row_mask = int(inst.mod("row_mask", 0xF))
    bank_mask = int(inst.mod("bank_mask", 0xF))
    return (((row_mask >> (_LANES // 16)) & 1) & ((bank_mask >> (_LANES // 4 % 4)) & 1)
            ).astype(bool)


def _check_valu_to_dpp(m: Machine, g: Group, inst: Instruction, regs: frozenset[int]) -> None:
    """DPP reads its sources before a recent VALU result reaches them: a VALU write of a source
    VGPR needs 2 wait states, a VALU write of EXEC (v_cmpx) 5."""
    check_valu_to_reader(m, g, inst, regs, "valu-to-dpp", "a DPP read",
                         isa.VALU_WRITE_VGPR_TO_DPP_READ, isa.VALU_WRITE_EXEC_TO_DPP)


def _compile_dpp(inst: Instruction, accum: int, kinds, fn) -> Executor:
    """VOP1/VOP2 with DPP: src0 comes from another lane of the wave; an invalid or inactive
    source lane reads 0 with bound_ctrl, otherwise the lane is left unwritten."""
    dst, *srcs = inst.operands
    readers = [vector_reader(op, inst, accum, kind) for op, kind in zip(srcs, kinds)]
    idx = vgpr_index(dst, accum)
    source = dpp_source_lanes(inst)
    valid = source >= 0
    gather = np.where(valid, source, 0)
    enabled = _dpp_write_lanes(inst)
    # LLVM encodes bound_ctrl:0 and bound_ctrl:1 alike (BOUND_CTRL = 1) on gfx9
    zero_fill = inst.has("bound_ctrl")

    read_vgprs = frozenset(vgpr_index(op, accum) for op in srcs if is_vgpr(op))

    def run(m: Machine, g: Group) -> None:
        _check_valu_to_dpp(m, g, inst, read_vgprs)
        src0 = np.broadcast_to(readers[0](m, g), (g.n, isa.WAVE_SIZE))
        ok = valid & g.exec[:, gather]
        src0 = np.where(ok, src0[:, gather], src0.dtype.type(0))
        value = to_bits(fn(src0, *(r(m, g) for r in readers[1:])), g.n)
        lanes = g.exec & enabled & (ok | zero_fill)
        m.write_v(g, idx, np.where(lanes, value, m.vgpr[idx][g.sel]), inst, masked=False)
    return run


def _compile_vop(inst: Instruction, accum: int) -> Executor:
    kinds, fn = VOP[base_opcode(inst.opcode)]
    dst, *srcs = inst.operands
    if len(srcs) != len(kinds):
        raise OperandError(f"{inst.opcode} expects {len(kinds)} sources, got {len(srcs)}")
    if inst.opcode.endswith("_dpp"):
        return _compile_dpp(inst, accum, kinds, fn)
    readers = [vector_reader(op, inst, accum, kind) for op, kind in zip(srcs, kinds)]
    idx = vgpr_index(dst, accum)
    if len(readers) == 1:
        (r0,) = readers

        def run1(m: Machine, g: Group) -> None:
            m.write_v(g, idx, to_bits(_omod_clamp(inst, fn(r0(m, g))), g.n), inst)
        return run1
    if len(readers) == 2:
        r0, r1 = readers

        def run2(m: Machine, g: Group) -> None:
            m.write_v(g, idx, to_bits(_omod_clamp(inst, fn(r0(m, g), r1(m, g))), g.n), inst)
        return run2

    def run(m: Machine, g: Group) -> None:
        value = fn(*(r(m, g) for r in readers))
        m.write_v(g, idx, to_bits(_omod_clamp(inst, value), g.n), inst)
    return run


SDWA_FIELDS = {"BYTE_0": (0, 8), "BYTE_1": (8, 8), "BYTE_2": (16, 8), "BYTE_3": (24, 8),
               "WORD_0": (0, 16), "WORD_1": (16, 16), "DWORD": (0, 32)}


def sdwa_select(bits: np.ndarray, sel: str, signed: bool) -> np.ndarray:
    """An SDWA source: the `sel` field of the operand's bits, zero- or (`sext`) sign-extended."""
    shift, width = SDWA_FIELDS[sel]
    if width == 32:
        return bits
    field = (bits >> U32(shift)) & U32((1 << width) - 1)
    if not signed:
        return field
    top = U32(1 << (width - 1))
    return (field ^ top) - top          # wraps modulo 2^32: the sign-extended field


def sdwa_place(result: np.ndarray, old: np.ndarray, sel: str, unused: str) -> np.ndarray:
    """An SDWA destination: the low bits of `result` in the `sel` field; the other bits zero
    (UNUSED_PAD), copies of the field's sign bit above it (UNUSED_SEXT) or kept (PRESERVE)."""
    shift, width = SDWA_FIELDS[sel]
    if width == 32:
        return result
    mask = U32(((1 << width) - 1) << shift)
    field = (result << U32(shift)) & mask
    if unused == "UNUSED_PRESERVE":
        return (old & ~mask) | field
    if unused == "UNUSED_SEXT":
        above = U32((0xFFFFFFFF << (shift + width)) & 0xFFFFFFFF)
        negative = (field >> U32(shift + width - 1)) & U32(1)
        return field | (negative * above)
    return field


def _f16_constant_bits(op: Imm) -> Callable[[Machine, Group], np.ndarray]:
    bits = np.array([[constant_bits(attrs.evolve(op, neg=False, abs=False), "f16")]], U32)
    return lambda m, g: bits


def _compile_sdwa(inst: Instruction, accum: int) -> Executor:
    """VOP1/VOP2 with SDWA: each source is a byte/word field of its register (src0_sel,
    src1_sel, `sext`), then abs/neg; the result goes to a field of the destination (dst_sel)
    with the rest padded, sign-extended or preserved (dst_unused); clamp/omod as usual."""
    base = inst.opcode.removesuffix("_sdwa")
    if base not in VOP:
        raise OperandError(f"{inst.opcode}: SDWA form of this opcode is not implemented")
    kinds, fn = VOP[base]
    dst, *srcs = inst.operands
    if len(srcs) != len(kinds):
        raise OperandError(f"{inst.opcode} expects {len(kinds)} sources, got {len(srcs)}")
    sels = [str(inst.mod(f"src{i}_sel", "DWORD")) for i in range(len(srcs))]
    dst_sel = str(inst.mod("dst_sel", "DWORD"))
    unused = str(inst.mod("dst_unused", "UNUSED_PAD"))
    for sel in (*sels, dst_sel):
        if sel not in SDWA_FIELDS:
            raise OperandError(f"{inst.opcode}: unknown SDWA select {sel} in `{inst.text}`")
    # raw bits first (an f16 operand's inline constant is f16 bits); modifiers after the select
    raw = [_f16_constant_bits(op) if isinstance(op, Imm) and kind == "f16" else
           vector_reader(attrs.evolve(op, neg=False, abs=False, sext=False), inst, accum, "u32")
           for op, kind in zip(srcs, kinds)]
    signed = [bool(getattr(op, "sext", False)) for op in srcs]
    idx = vgpr_index(dst, accum)

    def run(m: Machine, g: Group) -> None:
        values = [finish(op, typed(sdwa_select(r(m, g), sel, sx), kind), kind)
                  for op, r, sel, sx, kind in zip(srcs, raw, sels, signed, kinds)]
        result = to_bits(_omod_clamp(inst, fn(*values)), g.n)
        m.write_v(g, idx, sdwa_place(result, m.vgpr[idx][g.sel], dst_sel, unused), inst)
    return run


def _compile_fmac(inst: Instruction, accum: int) -> Executor:
    """v_fmac_f32: D = S0 * S1 + D with one rounding (gfx90a+ has no v_mac_f32)."""
    dst, s0, s1 = inst.operands
    r0 = vector_reader(s0, inst, accum, "f32")
    r1 = vector_reader(s1, inst, accum, "f32")
    rd = vector_reader(dst, inst, accum, "f32")
    idx = vgpr_index(dst, accum)

    def run(m: Machine, g: Group) -> None:
        a, b, c = r0(m, g), r1(m, g), rd(m, g)
        value = _fma64(a, b, c)
        m.write_v(g, idx, to_bits(_omod_clamp(inst, value), g.n), inst)
    return run


def _compile_pk_f32(inst: Instruction, accum: int) -> Executor:
    """v_pk_{add,mul,fma}_f32 on register pairs; op_sel/op_sel_hi pick each source's halves."""
    op = inst.opcode.removeprefix("v_pk_").removesuffix("_f32")
    fn = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "fma": _fma64}[op]
    dst, *srcs = inst.operands
    op_sel = inst.mod("op_sel", (0,) * len(srcs))
    op_sel_hi = inst.mod("op_sel_hi", (1,) * len(srcs))
    neg_lo = inst.mod("neg_lo", (0,) * len(srcs))
    neg_hi = inst.mod("neg_hi", (0,) * len(srcs))
    readers = [vector_reader(op_, inst, accum, "u64") for op_ in srcs]
    idx = vgpr_index(dst, accum)

    def half(bits64, hi):
        word = (bits64 >> U64(32)) if hi else (bits64 & _M32)
        return word.astype(U32).view(np.float32)

    def run(m: Machine, g: Group) -> None:
        values = [r(m, g) for r in readers]
        lo = [half(v, op_sel[i]) * (np.float32(-1) if neg_lo[i] else np.float32(1))
              for i, v in enumerate(values)]
        hi = [half(v, op_sel_hi[i]) * (np.float32(-1) if neg_hi[i] else np.float32(1))
              for i, v in enumerate(values)]
        m.write_v(g, idx, to_bits(np.asarray(fn(*lo), np.float32), g.n), inst)
        m.write_v(g, idx + 1, to_bits(np.asarray(fn(*hi), np.float32), g.n), inst)
    return run


def _compile_pk_mov(inst: Instruction, accum: int) -> Executor:
    """v_pk_mov_b32 D, S0, S1 op_sel:[a,b]: D.lo = S0 half a, D.hi = S1 half b (64-bit pairs)."""
    dst, s0, s1 = inst.operands
    op_sel = inst.mod("op_sel", (0, 1))
    r0 = vector_reader(s0, inst, accum, "u64")
    r1 = vector_reader(s1, inst, accum, "u64")
    idx = vgpr_index(dst, accum)

    def half(value, high):
        return ((value >> U64(32)) if high else (value & _M32)).astype(U32)

    def run(m: Machine, g: Group) -> None:
        lo = half(r0(m, g), op_sel[0])
        hi = half(r1(m, g), op_sel[1])
        m.write_v(g, idx, to_bits(lo, g.n), inst)
        m.write_v(g, idx + 1, to_bits(hi, g.n), inst)
    return run


def _compile_mov64(inst: Instruction, accum: int) -> Executor:
    dst, src = inst.operands
    read = vector_reader(src, inst, accum, "u64")
    idx = vgpr_index(dst, accum)

    def run(m: Machine, g: Group) -> None:
        value = np.broadcast_to(read(m, g), (g.n, isa.WAVE_SIZE))
        m.write_v(g, idx, (value & _M32).astype(U32), inst)
        m.write_v(g, idx + 1, (value >> U64(32)).astype(U32), inst)
    return run


def _compile_lshl_add_u64(inst: Instruction, accum: int) -> Executor:
    dst, s0, s1, s2 = inst.operands
    r0 = vector_reader(s0, inst, accum, "u64")
    r1 = vector_reader(s1, inst, accum, "u32")
    r2 = vector_reader(s2, inst, accum, "u64")
    idx = vgpr_index(dst, accum)

    def run(m: Machine, g: Group) -> None:
        shift = (r1(m, g) & U32(7)).astype(U64)
        value = np.broadcast_to((r0(m, g) << shift) + r2(m, g), (g.n, isa.WAVE_SIZE))
        m.write_v(g, idx, (value & _M32).astype(U32), inst)
        m.write_v(g, idx + 1, (value >> U64(32)).astype(U32), inst)
    return run


def _compile_mad_u64_u32(inst: Instruction, accum: int) -> Executor:
    dst, carry, s0, s1, s2 = inst.operands
    r0 = vector_reader(s0, inst, accum, "u32")
    r1 = vector_reader(s1, inst, accum, "u32")
    r2 = vector_reader(s2, inst, accum, "u64")
    idx = vgpr_index(dst, accum)
    signed = inst.opcode.startswith("v_mad_i64")
    carry_write = _mask_writer(carry)

    def run(m: Machine, g: Group) -> None:
        a, b, c = r0(m, g), r1(m, g), r2(m, g)
        if signed:
            prod = (a.view(np.int32).astype(np.int64) * b.view(np.int32).astype(np.int64)).view(U64)
        else:
            prod = a.astype(U64) * b.astype(U64)
        total = np.broadcast_to(prod + c, (g.n, isa.WAVE_SIZE))
        overflow = np.broadcast_to(total < prod, (g.n, isa.WAVE_SIZE))
        m.write_v(g, idx, (total & _M32).astype(U32), inst)
        m.write_v(g, idx + 1, (total >> U64(32)).astype(U32), inst)
        carry_write(m, g, overflow & g.exec)
    return run


def _mask_writer(op) -> Callable[[Machine, Group, np.ndarray], None]:
    idx = sgpr_index(op)

    def write(m: Machine, g: Group, lanes: np.ndarray) -> None:
        lo, hi = lane_mask_bits(np.ascontiguousarray(lanes))
        m.write_s(g, idx, lo)
        m.write_s(g, idx + 1, hi)
    return write


def _compile_carry(inst: Instruction, accum: int) -> Executor:
    """v_{add,sub,subrev}_co_u32 and v_{add,sub,subrev}_co_ci_u32 / v_addc_co_u32."""
    name = base_opcode(inst.opcode)
    with_carry_in = name in ("v_addc_co_u32", "v_subb_co_u32", "v_subbrev_co_u32")
    ops = list(inst.operands)
    dst, carry_out = ops[0], ops[1]
    a_op, b_op = ops[2], ops[3]
    carry_in = lane_mask_reader(ops[4], inst) if with_carry_in else None
    ra = vector_reader(a_op, inst, accum, "u32")
    rb = vector_reader(b_op, inst, accum, "u32")
    idx = vgpr_index(dst, accum)
    write_carry = _mask_writer(carry_out)
    reverse = "rev" in name
    subtract = "sub" in name

    def run(m: Machine, g: Group) -> None:
        a = ra(m, g).astype(np.int64)
        b = rb(m, g).astype(np.int64)
        if reverse:
            a, b = b, a
        cin = carry_in(m, g).astype(np.int64) if carry_in else 0
        wide = a - b - cin if subtract else a + b + cin
        out = (wide < 0) if subtract else (wide > 0xFFFFFFFF)
        m.write_v(g, idx, to_bits((wide & 0xFFFFFFFF).astype(U32), g.n), inst)
        write_carry(m, g, np.broadcast_to(out, (g.n, isa.WAVE_SIZE)) & g.exec)
    return run


_CMP = {"eq": np.equal, "ne": np.not_equal, "lg": np.not_equal, "lt": np.less,
        "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
        "f": lambda a, b: np.zeros(np.broadcast_shapes(np.shape(a), np.shape(b)), bool),
        "t": lambda a, b: np.ones(np.broadcast_shapes(np.shape(a), np.shape(b)), bool),
        "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)),
        "u": lambda a, b: np.isnan(a) | np.isnan(b),
        "neq": lambda a, b: ~(a == b), "nlg": lambda a, b: ~(a != b) | np.isnan(a) | np.isnan(b),
        "nlt": lambda a, b: ~(a < b), "nle": lambda a, b: ~(a <= b),
        "ngt": lambda a, b: ~(a > b), "nge": lambda a, b: ~(a >= b)}
_CMP_KIND = {"f32": "f32", "i32": "i32", "u32": "u32", "f16": "f16", "f64": "f64",
             "u64": "u64", "i64": "u64"}
#: The compare decoder reads v_cmp[x]_<condition>_<type> for these conditions and types.
COMPARES, COMPARE_TYPES = tuple(_CMP), tuple(_CMP_KIND)


def _compile_vopc(inst: Instruction, accum: int) -> Executor:
    """v_cmp[x]_<op>_<type>: lane bits to VCC / an SGPR pair (inactive lanes 0); cmpx also EXEC."""
    name = base_opcode(inst.opcode)
    parts = name.split("_")
    op, kind = parts[2], parts[3]
    is_x = parts[1] == "cmpx"
    fn = _CMP[op]
    k = _CMP_KIND[kind]
    ops = list(inst.operands)
    if len(ops) == 2:
        dst = None
        a_op, b_op = ops
    else:
        dst, a_op, b_op = ops
    ra = vector_reader(a_op, inst, accum, k)
    rb = vector_reader(b_op, inst, accum, k)
    if kind == "i64":
        def signed(v):
            return v.view(np.int64)
    else:
        def signed(v):
            return v
    write = _mask_writer(dst) if dst is not None else None
    write_exec = _mask_writer(EXEC_OPERAND)
    if dst is None and not is_x:
        write = _mask_writer(VCC_OPERAND)

    def run(m: Machine, g: Group) -> None:
        with np.errstate(invalid="ignore"):
            lanes = fn(signed(ra(m, g)), signed(rb(m, g)))
        lanes = np.broadcast_to(lanes, (g.n, isa.WAVE_SIZE)) & g.exec
        if write is not None:
            write(m, g, lanes)
        if is_x:
            write_exec(m, g, lanes)
            g.recent_valu.append((g.tick, EXEC_WRITE, inst))
    return run


def _compile_cndmask(inst: Instruction, accum: int) -> Executor:
    dst, a_op, b_op, *mask_op = inst.operands
    ra = vector_reader(a_op, inst, accum, "f32" if _has_fmods(a_op) else "u32")
    rb = vector_reader(b_op, inst, accum, "f32" if _has_fmods(b_op) else "u32")
    mask = lane_mask_reader(mask_op[0] if mask_op else VCC_OPERAND, inst)
    idx = vgpr_index(dst, accum)

    def run(m: Machine, g: Group) -> None:
        a = to_bits(ra(m, g), g.n)
        b = to_bits(rb(m, g), g.n)
        m.write_v(g, idx, np.where(mask(m, g), b, a), inst)
    return run


def _has_fmods(op) -> bool:
    return bool(getattr(op, "neg", False) or getattr(op, "abs", False))


def _compile_readfirstlane(inst: Instruction, accum: int) -> Executor:
    dst, src = inst.operands
    read = vector_reader(src, inst, accum, "u32")
    write = scalar_writer(dst)

    def run(m: Machine, g: Group) -> None:
        values = np.broadcast_to(read(m, g), (g.n, isa.WAVE_SIZE))
        first = np.where(g.exec.any(axis=1), g.exec.argmax(axis=1), 0)
        write(m, g, values[np.arange(g.n), first])
    return run


def _compile_readlane(inst: Instruction, accum: int) -> Executor:
    dst, src, lane_op = inst.operands
    read = vector_reader(src, inst, accum, "u32")
    lane = scalar_reader(lane_op, inst)
    write = scalar_writer(dst)

    def run(m: Machine, g: Group) -> None:
        values = np.broadcast_to(read(m, g), (g.n, isa.WAVE_SIZE))
        write(m, g, values[np.arange(g.n), lane(m, g) & U32(63)])
    return run


def _compile_writelane(inst: Instruction, accum: int) -> Executor:
    dst, src, lane_op = inst.operands
    value = scalar_reader(src, inst)
    lane = scalar_reader(lane_op, inst)
    idx = vgpr_index(dst, accum)

    def run(m: Machine, g: Group) -> None:
        current = m.vgpr[idx][g.sel].copy()
        current[np.arange(g.n), lane(m, g) & U32(63)] = value(m, g)
        m.write_v(g, idx, current, inst, masked=False)
    return run


def _compile_mbcnt(inst: Instruction, accum: int) -> Executor:
    """v_mbcnt_{lo,hi}_u32_b32: count of mask bits below this lane in the low/high 32 lanes."""
    dst, mask_op, add_op = inst.operands
    mask = vector_reader(mask_op, inst, accum, "u32")
    add = vector_reader(add_op, inst, accum, "u32")
    idx = vgpr_index(dst, accum)
    hi = "_hi_" in inst.opcode
    lanes = np.arange(isa.WAVE_SIZE)
    bits = (lanes - 32) if hi else lanes
    below = np.where(bits <= 0, U32(0),
                     np.where(bits >= 32, U32(0xFFFFFFFF),
                              (U32(1) << np.clip(bits, 0, 31).astype(U32)) - U32(1))).astype(U32)

    def run(m: Machine, g: Group) -> None:
        masked = np.broadcast_to(mask(m, g), (g.n, isa.WAVE_SIZE)) & below
        m.write_v(g, idx, _popcount(masked) + add(m, g), inst)
    return run


def _compile_accvgpr(inst: Instruction, accum: int) -> Executor:
    dst, src = inst.operands
    read = vector_reader(src, inst, accum, "u32")
    idx = vgpr_index(dst, accum)

    def run(m: Machine, g: Group) -> None:
        m.write_v(g, idx, to_bits(read(m, g), g.n), inst)
    return run


def _compile_cvt_pk_fp8(inst: Instruction, accum: int) -> Executor:
    """v_cvt_pk_{fp8,bf8}_f32 D, S0, S1 [op_sel:[0,0,1]]: two f32 -> two fnuz bytes, RNE."""
    dst, s0, s1 = inst.operands
    dtype = numerics.FP8 if "fp8" in inst.opcode else numerics.BF8
    r0 = vector_reader(s0, inst, accum, "f32")
    r1 = vector_reader(s1, inst, accum, "f32")
    rd = vector_reader(dst, inst, accum, "u32")
    idx = vgpr_index(dst, accum)
    op_sel = inst.mod("op_sel", (0, 0, 0))
    hi = bool(op_sel[-1]) if len(op_sel) > 2 else False

    def run(m: Machine, g: Group) -> None:
        with np.errstate(all="ignore"):
            value = _cvt_pk_fp8(r0(m, g), r1(m, g), rd(m, g), hi, dtype)
        m.write_v(g, idx, to_bits(value, g.n), inst)
    return run


def _compile_cvt_f32_fp8(inst: Instruction, accum: int) -> Executor:
    """v_cvt_f32_{fp8,bf8}: byte `sel` (SDWA byte_sel, default 0) of S0 -> f32."""
    dst, src = inst.operands
    dtype = numerics.FP8 if "fp8" in inst.opcode else numerics.BF8
    read = vector_reader(src, inst, accum, "u32")
    idx = vgpr_index(dst, accum)
    byte = {"BYTE_0": 0, "BYTE_1": 1, "BYTE_2": 2, "BYTE_3": 3}.get(
        str(inst.mod("src0_sel", "BYTE_0")), 0)
    op_sel = inst.mod("op_sel", None)
    if op_sel is not None:
        byte = int(op_sel[0]) + 2 * int(op_sel[1]) if len(op_sel) > 1 else int(op_sel[0])

    def run(m: Machine, g: Group) -> None:
        raw = ((read(m, g) >> U32(8 * byte)) & U32(0xFF)).astype(np.uint8)
        m.write_v(g, idx, to_bits(raw.view(dtype).astype(np.float32), g.n), inst)
    return run


def _compile_cvt_pk_f32_fp8(inst: Instruction, accum: int) -> Executor:
    """v_cvt_pk_f32_{fp8,bf8} D[0:1], S0: the two fnuz bytes of a word of S0 -> two f32; the high
    word with SDWA src0_sel:WORD_1 or VOP3 op_sel:[1,0]."""
    dst, src = inst.operands
    dtype = numerics.FP8 if "fp8" in inst.opcode else numerics.BF8
    read = vector_reader(src, inst, accum, "u32")
    idx = vgpr_index(dst, accum)
    op_sel = inst.mod("op_sel", (0,))
    high = str(inst.mod("src0_sel", "WORD_0")) == "WORD_1" or bool(op_sel[0])

    def run(m: Machine, g: Group) -> None:
        word = read(m, g) >> U32(16) if high else read(m, g)
        for byte in range(2):
            raw = ((word >> U32(8 * byte)) & U32(0xFF)).astype(np.uint8)
            m.write_v(g, idx + byte, to_bits(raw.view(dtype).astype(np.float32), g.n), inst)
    return run


# ------------------------------------------------------------------------------------ table
_SPECIAL_SDWA: dict[str, Callable[[Instruction, int], Executor]] = {
    "v_cvt_f32_fp8": _compile_cvt_f32_fp8,
    "v_cvt_f32_bf8": _compile_cvt_f32_fp8,
    "v_cvt_pk_f32_fp8": _compile_cvt_pk_f32_fp8,
    "v_cvt_pk_f32_bf8": _compile_cvt_pk_f32_fp8,
}

_SPECIAL_VALU: dict[str, Callable[[Instruction, int], Executor]] = {
    "v_fmac_f32": _compile_fmac,
    "v_pk_add_f32": _compile_pk_f32,
    "v_pk_mul_f32": _compile_pk_f32,
    "v_pk_fma_f32": _compile_pk_f32,
    "v_mov_b64": _compile_mov64,
    "v_pk_mov_b32": _compile_pk_mov,
    "v_lshl_add_u64": _compile_lshl_add_u64,
    "v_mad_u64_u32": _compile_mad_u64_u32,
    "v_mad_i64_i32": _compile_mad_u64_u32,
    "v_add_co_u32": _compile_carry,
    "v_sub_co_u32": _compile_carry,
    "v_subrev_co_u32": _compile_carry,
    "v_addc_co_u32": _compile_carry,
    "v_subb_co_u32": _compile_carry,
    "v_subbrev_co_u32": _compile_carry,
    "v_cndmask_b32": _compile_cndmask,
    "v_readfirstlane_b32": _compile_readfirstlane,
    "v_readlane_b32": _compile_readlane,
    "v_writelane_b32": _compile_writelane,
    "v_mbcnt_lo_u32_b32": _compile_mbcnt,
    "v_mbcnt_hi_u32_b32": _compile_mbcnt,
    "v_accvgpr_read_b32": _compile_accvgpr,
    "v_accvgpr_write_b32": _compile_accvgpr,
    "v_accvgpr_mov_b32": _compile_accvgpr,
    "v_cvt_pk_fp8_f32": _compile_cvt_pk_fp8,
    "v_cvt_pk_bf8_f32": _compile_cvt_pk_fp8,
    "v_cvt_f32_fp8": _compile_cvt_f32_fp8,
    "v_cvt_f32_bf8": _compile_cvt_f32_fp8,
    "v_cvt_pk_f32_fp8": _compile_cvt_pk_f32_fp8,
    "v_cvt_pk_f32_bf8": _compile_cvt_pk_f32_fp8,
}


def implemented_opcodes() -> set[str]:
    """Every opcode a dispatch table here names (compares, decoded generically from their name,
    excepted: see COMPARES); memory opcodes are dispatched on the opcode table's rows."""
    cmpk = {f"s_cmpk_{name.removeprefix('s_cmp_')}" for name in SOPC
            if name.startswith("s_cmp_") and name.endswith(("_i32", "_u32"))}
    return (set(SOP2) | set(SOP1) | set(SOPC) | set(SOPK) | cmpk | set(BRANCHES) | set(CONTROL)
            | {f"s_{op}_saveexec_b64" for op in SAVEEXEC} | NOP_OPCODES | set(VOP)
            | set(_SPECIAL_VALU) | set(_SPECIAL_SDWA) | set(MFMA)
            | {name for name, row in OPCODES.items() if row.access})


def supported(inst: Instruction) -> bool:
    try:
        compile_instruction(inst, 256)
    except (OperandError, KeyError, ValueError, IndexError, TypeError):
        return False
    return True


def _scalar(compile_: Callable[[Instruction], Executor]):
    """A compiler of scalar instructions (they have no accumulation registers) as a table entry."""
    return lambda inst, accum: compile_(inst)


def _no_effect(m, g):
    return None


def _by_name() -> dict[str, Callable[[Instruction, int], Executor]]:
    """Opcodes dispatched by their exact name. Built so that where two tables name an opcode
    the earlier of NOP_OPCODES, the control opcodes, BRANCHES, SOP2, SOP1, SOPC, SOPK wins (no
    opcode of SOPC or SOPK is a `_saveexec_b64` one, which the family rules take)."""
    table: dict[str, Callable[[Instruction, int], Executor]] = {}
    for names, compile_ in ((SOPK, _compile_sopk), (SOPC, _compile_sopc), (SOP1, _compile_sop1),
                            (SOP2, _compile_sop2), (BRANCHES, _compile_branch)):
        table.update(dict.fromkeys(names, _scalar(compile_)))
    table.update({
        "s_waitcnt": _scalar(_compile_waitcnt), "s_endpgm": lambda inst, accum: _end,
        "s_barrier": _scalar(_barrier), "s_setvskip": _scalar(_compile_setvskip),
        "s_set_gpr_idx_on": _scalar(_compile_set_gpr_idx_on),
        "s_set_gpr_idx_off": lambda inst, accum: _no_effect,
    })
    table.update(dict.fromkeys(NOP_OPCODES, lambda inst, accum: _no_effect))
    return table


BY_NAME = _by_name()
#: (matches(name, base opcode), compiler) tried in order for opcodes not in BY_NAME: the
#: families named by a prefix or suffix, the MFMA catalogue, the opcode table's memory rows
#: and the vector ALU tables
BY_FAMILY: tuple = (
    (lambda name, base: name.startswith("s_cmpk_"), _scalar(_compile_sopk)),
    (lambda name, base: name.endswith("_saveexec_b64"), _scalar(_compile_saveexec)),
    (lambda name, base: base in MFMA,
     lambda inst, accum: compile_mfma(inst, MFMA[base_opcode(inst.opcode)], accum)),
    (lambda name, base: memory_row(name) is not None or memory_row(base) is not None,
     compile_memory),
    (lambda name, base: base in _SPECIAL_VALU,
     lambda inst, accum: _SPECIAL_VALU[base_opcode(inst.opcode)](inst, accum)),
    (lambda name, base: base.startswith(("v_cmp_", "v_cmpx_")), _compile_vopc),
    (lambda name, base: base in VOP, _compile_vop),
)


def compile_instruction(inst: Instruction, accum: int) -> Executor:
    """The executor of `inst`; raises OperandError/KeyError for anything not implemented."""
    name = inst.opcode
    base = base_opcode(name)
    if name.endswith("_sdwa"):
        special = _SPECIAL_SDWA.get(name.removesuffix("_sdwa"))
        return special(inst, accum) if special else _compile_sdwa(inst, accum)
    if name.endswith("_dpp") and base not in VOP:
        raise OperandError(f"{name}: this DPP operand form is not implemented")
    compile_ = BY_NAME.get(name)
    if compile_ is None:
        compile_ = next((c for matches, c in BY_FAMILY if matches(name, base)), None)
    if compile_ is None:
        raise KeyError(name)
    return compile_(inst, accum)

"""Executing MFMA instructions: gather A/B/C through the catalogue's layouts, multiply, scatter D.

Products of 16- and 8-bit inputs are exact in f32 and summed in f32 (numpy's order, the
hardware's is undocumented: results agree to f32 rounding of a K-term sum); i8 sums are exact in
int32; xf32 inputs are used at full f32 precision (hardware rounds them, so xf32 results are
more accurate here than on silicon). MFMAs execute on all 64 lanes regardless of EXEC, as gem5's
MI300 model does (src/arch/amdgpu/vega/insts/vop3p_mai.cc); AMD's ISA guides we could consult do
not define a partial-EXEC MFMA, and none of the vendor kernels we run issues one.

Sparse SMFMACs multiply each stored A value only with the B row its compression index selects
(the pruned zeros are skipped, not multiplied, as AMD's calculator README describes), so an
inf/NaN in a pruned B position does not reach D. Index pairs must be increasing (index0 <
index1, AMD's hipSPARSELt MI300 documentation); other pairs are not modelled and raise.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from argus.isa_cdna3 import isa, numerics
from argus.isa_cdna3.emu.operands import OperandError, constant_bits, is_vgpr, vgpr_index
from argus.isa_cdna3.emu.state import EXEC_WRITE, EmulatorError, Group, Machine
from argus.isa_cdna3.instruction import Imm, Instruction
from argus.isa_cdna3.mfma import MfmaInfo

U32 = np.uint32


class SparseIndexError(EmulatorError, ValueError):
    """An SMFMAC compression-index pair outside what gfx942 defines (index0 < index1)."""

    def __init__(self, message: str, *, row: int):
        super().__init__(message)
        self.row = row            # which wave of the executing batch


@functools.cache
def operand_maps(info: MfmaInfo) -> dict[str, np.ndarray]:
    """Flat gather indices between per-lane registers and matrices, from the layouts.

    a: for every (block, i, k), the position lane * k_per_lane + slot holding A[block][i][k]
    (for SMFMAC: of the stored A[block][i][c], c < K/2); b: likewise for B[block][k][j] with
    b_per_lane; c: for every (lane, value), the position
    (block * m + i) * n + j of the D element that lane/value holds.
    """
    lanes = np.arange(isa.WAVE_SIZE)[:, None]
    a_slots = np.arange(info.k_per_lane)[None, :]
    a_shape = (isa.WAVE_SIZE, info.k_per_lane)
    # an SMFMAC's A operand is the stored M x K/2 matrix; its indices are gathered the same way
    a_columns = info.k // 2 if info.sparse else info.k
    a_coord = info.compressed_a_coord if info.sparse else info.a_coord
    a_pos = np.zeros((info.blocks, info.m, a_columns), np.int64)
    blk, i, k = (np.broadcast_to(x, a_shape) for x in a_coord(lanes, a_slots))
    a_pos[blk, i, k] = lanes * info.k_per_lane + a_slots
    b_slots = np.arange(info.b_per_lane)[None, :]
    b_pos = np.zeros((info.blocks, info.k, info.n), np.int64)
    blk, k, j = (np.broadcast_to(x, (isa.WAVE_SIZE, info.b_per_lane))
                 for x in info.b_coord(lanes, b_slots))
    b_pos[blk, k, j] = lanes * info.b_per_lane + b_slots
    values = np.arange(info.c_values)[None, :]
    blk, i, j = (np.broadcast_to(x, (isa.WAVE_SIZE, info.c_values))
                 for x in info.c_coord(lanes, values))
    c_pos = (blk * info.m + i) * info.n + j
    return {"a": a_pos.reshape(-1), "b": b_pos.reshape(-1), "c": c_pos.reshape(-1)}


def _elements(regs: np.ndarray, element: str) -> np.ndarray:
    """Register-major [r, n, 64] uint32 -> [n, 64 * elements] of `element`, lane-major, so that
    position lane * k_per_lane + slot holds the lane's slot (the layout maps index this)."""
    lane_major = np.ascontiguousarray(regs.transpose(1, 2, 0))
    values = numerics.unpack(lane_major, element)
    return values.reshape(values.shape[0], -1)


def multiply(info: MfmaInfo, a_regs: np.ndarray, b_regs: np.ndarray, c_regs: np.ndarray
             ) -> np.ndarray:
    """D registers of one MFMA for n waves: register-major [regs, n, 64] uint32 in and out.

    This is the reference semantics the emulator executes: gather A and B through the layout
    maps, multiply in the accumulation type, add C, scatter D back through the C layout."""
    maps = operand_maps(info)
    count = a_regs.shape[1]
    # gather the narrow elements first, then widen: fewer bytes move through the gathers
    a_mat = numerics.to_f32_exact(np.take(_elements(a_regs, info.a_type), maps["a"], axis=1))
    b_mat = numerics.to_f32_exact(np.take(_elements(b_regs, info.b_type), maps["b"], axis=1))
    product = np.matmul(a_mat.reshape(count, info.blocks, info.m, info.k),
                        b_mat.reshape(count, info.blocks, info.k, info.n)).reshape(count, -1)
    return _accumulate(info, c_regs, product)


def sparse_multiply(info: MfmaInfo, a_regs: np.ndarray, b_regs: np.ndarray,
                    index_regs: np.ndarray, c_regs: np.ndarray, index_set: int = 0) -> np.ndarray:
    """D registers of one SMFMAC for n waves: A [a_regs, n, 64] holds the stored values, the
    index VGPR [1, n, 64] their 2-bit positions (set `index_set`), B is dense. Each stored value
    meets exactly the B row its index selects; raises SparseIndexError (naming the wave and lane)
    for a pair that is not increasing."""
    maps = operand_maps(info)
    count = a_regs.shape[1]
    stored = np.take(_elements(a_regs, info.a_type), maps["a"], axis=1)
    slots = np.arange(info.k_per_lane, dtype=U32)
    shifts = info.index_bit(slots, 0, index_set).astype(U32)
    index = (index_regs[0][:, :, None] >> shifts) & U32(3)          # [n, 64, k_per_lane]
    pairs = index.reshape(count, isa.WAVE_SIZE, -1, 2)
    if not np.all(pairs[..., 0] < pairs[..., 1]):
        row, lane, pair = (int(x[0]) for x in np.nonzero(pairs[..., 0] >= pairs[..., 1]))
        raise SparseIndexError(
            f"{info.name}: lane {lane} has compression indices "
            f"({pairs[row, lane, pair, 0]}, {pairs[row, lane, pair, 1]}) for A slots "
            f"{2 * pair}/{2 * pair + 1} (index VGPR bits {int(shifts[2 * pair])}.."
            f"{int(shifts[2 * pair]) + 3}); gfx942 defines SMFMAC only for index0 < index1, "
            f"the result of other pairs is not modelled. Prune every group of four k to two "
            f"and write their positions in increasing order", row=row)
    lanes = np.arange(isa.WAVE_SIZE)[:, None]
    _, _, k_lanes = info.sparse_a_coord(lanes, slots.astype(np.int64), index.astype(np.int64))
    k = np.take(k_lanes.reshape(count, -1), maps["a"], axis=1).reshape(count, info.m, -1)
    b_mat = numerics.to_f32_exact(np.take(_elements(b_regs, info.b_type), maps["b"], axis=1))
    b_mat = b_mat.reshape(count, info.k, info.n)
    chosen = b_mat[np.arange(count)[:, None, None], k]              # [n, m, K/2, n]
    a_mat = numerics.to_f32_exact(stored).reshape(count, info.m, 1, -1)
    product = np.matmul(a_mat, chosen).reshape(count, -1)
    return _accumulate(info, c_regs, product)


def _accumulate(info: MfmaInfo, c_regs: np.ndarray, product: np.ndarray) -> np.ndarray:
    """C + product scattered back through the C layout, in the accumulation type."""
    count = product.shape[0]
    gathered = np.take(product, operand_maps(info)["c"], axis=1)
    gathered = gathered.reshape(count, isa.WAVE_SIZE, info.c_values)
    if info.c_type == "f64":
        c = np.ascontiguousarray(c_regs.transpose(1, 2, 0)).view(np.float64)
        d = np.ascontiguousarray(c + gathered).view(U32)
        return d.transpose(2, 0, 1)
    if info.c_type == "i32":
        c = c_regs.view(np.int32).transpose(1, 2, 0).astype(np.int64)
        return ((c + gathered) & 0xFFFFFFFF).astype(U32).transpose(2, 0, 1)
    c = c_regs.view(np.float32).transpose(1, 2, 0)
    return (c + gathered).view(U32).transpose(2, 0, 1)


def compile_mfma(inst: Instruction, info: MfmaInfo, accum: int
                 ) -> Callable[[Machine, Group], Any]:
    if info.sparse:
        return compile_smfmac(inst, info, accum)
    for name in ("cbsz", "abid", "blgp"):
        if inst.mod(name, 0):
            raise OperandError(f"{info.name}: {name} broadcast modifiers are not implemented")
    if inst.has("neg"):
        raise OperandError(f"{info.name}: neg modifiers are not implemented")
    d_op, a_op, b_op, c_op = inst.operands[:4]
    d_idx = vgpr_index(d_op, accum)
    a_idx = vgpr_index(a_op, accum)
    b_idx = vgpr_index(b_op, accum)
    if is_vgpr(c_op):
        c_idx = vgpr_index(c_op, accum)
        c_const = None
    elif isinstance(c_op, Imm):
        c_idx = None
        kind = "f64" if info.c_type == "f64" else "u32"
        c_const = constant_bits(c_op, kind)
    else:
        raise OperandError(f"{info.name}: SrcC must be registers or an inline constant")
    src_regs = [a_idx + r for r in range(info.a_regs)] + [b_idx + r for r in range(info.b_regs)]
    if c_idx is not None:
        src_regs += [c_idx + r for r in range(info.c_regs)]
    src_set = frozenset(src_regs)

    def run(m: Machine, g: Group) -> None:
        _check_valu_to_mfma(m, g, inst, src_set)
        a = m.read_block(g, a_idx, info.a_regs, inst)
        b = m.read_block(g, b_idx, info.b_regs, inst)
        if c_idx is not None:
            c = m.read_block(g, c_idx, info.c_regs, inst, mfma_srcc=(c_idx, info.c_regs))
        elif info.c_type == "f64":
            pair = np.array([c_const], np.uint64).view(U32)
            c = np.tile(pair, (g.n, isa.WAVE_SIZE, info.c_values)).transpose(2, 0, 1)
        else:
            c = np.full((info.c_regs, g.n, isa.WAVE_SIZE), c_const, U32)
        _write_result(m, g, inst, info, d_idx, multiply(info, a, b, c))
    return run


def _write_result(m: Machine, g: Group, inst: Instruction, info: MfmaInfo, d_idx: int,
                  d: np.ndarray) -> None:
    dest = slice(d_idx, d_idx + info.c_regs)
    if m.check == "off":   # only unchecked runs hand out values read too early
        m.stale[dest, g.sel] = m.vgpr[dest, g.sel]
    m.vgpr[dest, g.sel] = d
    m.mfma_issued[dest, g.sel] = m.clocks(g)
    key = (inst.address, d_idx)
    if key not in m.mfma_producer_ids:
        m.mfma_producer_ids[key] = len(m.mfma_producers)
        m.mfma_producers.append((inst, info, d_idx, info.c_regs))
    m.mfma_from[dest, g.sel] = m.mfma_producer_ids[key]
    m.mfma_producer.update(range(d_idx, d_idx + info.c_regs))


def _check_valu_to_mfma(m: Machine, g: Group, inst: Instruction, regs: frozenset[int]) -> None:
    """A VALU write of an MFMA source needs 2 wait states before the MFMA reads it, a VALU write
    of EXEC (v_cmpx) 4. The group remembers its latest VALU writes; a divergent branch starts a
    fresh history."""
    check_valu_to_reader(m, g, inst, regs, "valu-to-mfma", "an MFMA",
                         isa.VALU_WRITE_VGPR_TO_MFMA_READ, isa.VALU_WRITE_EXEC_TO_MFMA)


def check_valu_to_reader(m: Machine, g: Group, inst: Instruction, regs: frozenset[int],
                         kind: str, reader: str, vgpr_states: int, exec_states: int) -> None:
    """Report `kind` where `inst` reads one of `regs` (or runs under EXEC) fewer wait states
    after the group's VALU write of it than the ISA requires (`vgpr_states`, `exec_states`)."""
    for tick, reg, producer in g.recent_valu:
        waited = g.tick - tick - 1
        if reg == EXEC_WRITE and waited < exec_states:
            need, what = exec_states, "exec"
        elif reg in regs and waited < vgpr_states:
            need, what = vgpr_states, m.vgpr_name(reg)
        else:
            continue
        m.report(g, np.ones(g.n, bool), kind, inst, producer.address, producer.text,
                 what, f"a VALU write of {what} needs {need} wait states before {reader}; "
                 f"insert `s_nop {need - 1 - max(waited, 0)}` or more")


def compile_smfmac(inst: Instruction, info: MfmaInfo, accum: int
                   ) -> Callable[[Machine, Group], Any]:
    """`v_smfmac_* vdst, srcA, srcB, vidx`: D += A_sparse @ B in place (vdst is the accumulator,
    read like an MFMA's SrcC of the same registers); CBSZ/ABID choose the index set."""
    if inst.mod("blgp", 0) or inst.has("neg") or inst.has("neg_lo") or inst.has("neg_hi"):
        raise OperandError(f"{info.name}: SMFMAC takes no blgp/neg modifiers (only cbsz/abid, "
                           f"which select the compression-index set)")
    cbsz, abid = inst.mod("cbsz", 0), inst.mod("abid", 0)
    try:
        index_set = info.index_set(cbsz, abid)
    except ValueError as err:
        raise OperandError(str(err)) from err
    d_op, a_op, b_op, index_op = inst.operands[:4]
    if not (is_vgpr(index_op) and index_op.file == "v"):
        raise OperandError(f"{info.name}: the compression index must be an architected VGPR "
                           f"(v0..v255), got {index_op}")
    d_idx = vgpr_index(d_op, accum)
    a_idx = vgpr_index(a_op, accum)
    b_idx = vgpr_index(b_op, accum)
    index_idx = vgpr_index(index_op, accum)
    src_set = frozenset([a_idx + r for r in range(info.a_regs)]
                        + [b_idx + r for r in range(info.b_regs)]
                        + [index_idx] + [d_idx + r for r in range(info.c_regs)])

    def run(m: Machine, g: Group) -> None:
        _check_valu_to_mfma(m, g, inst, src_set)
        a = m.read_block(g, a_idx, info.a_regs, inst)
        b = m.read_block(g, b_idx, info.b_regs, inst)
        index = m.read_block(g, index_idx, 1, inst)
        c = m.read_block(g, d_idx, info.c_regs, inst, mfma_srcc=(d_idx, info.c_regs))
        try:
            d = sparse_multiply(info, a, b, index, c, index_set)
        except SparseIndexError as err:
            wave = int(g.waves[err.row])
            raise SparseIndexError(
                f"workgroup {int(m.workgroup[wave])} wave {int(m.wave_in_group[wave])} at pc "
                f"0x{g.pc:x} (`{inst.text or inst}`): {err}", row=err.row) from None
        _write_result(m, g, inst, info, d_idx, d)
    return run

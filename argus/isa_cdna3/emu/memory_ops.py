"""Memory instructions: SMEM, MUBUF (buffer_*), FLAT-global (global_*) and LDS (ds_*).

Loads read memory when issued and hand their data to the machine's queue; registers (or LDS, for
`buffer_load ... lds`) change only when `s_waitcnt` retires them, so a missing wait reads stale
data exactly as on hardware. Stores and atomics write when issued and still occupy their counter.
Buffer accesses are range-checked per dword against V#.num_records, on the whole offset
(soffset + voffset + inst_offset): AMD's attention kernels step soffset past the end of K/V and
rely on those loads reading 0. Out-of-range loads read 0 and stores are dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from argus.isa_cdna3 import isa, numerics
from argus.isa_cdna3.emu.operands import (
    OperandError,
    is_vgpr,
    scalar_reader,
    sgpr_index,
    vector_reader,
    vgpr_index,
)
from argus.isa_cdna3.emu.state import Group, Machine, MemoryFault
from argus.isa_cdna3.instruction import Instruction, Reg, Special
from argus.isa_cdna3.lanemaps import LaneMapError, lane_table, swizzle_lane_map
from argus.isa_cdna3.lds import access_cycles
from argus.isa_cdna3.opcodes import OPCODES, Opcode, Unit, unit

U32 = np.uint32
U64 = np.uint64

# 32-bit scalar atomics: new memory value from (old, data)
SMEM_ATOMICS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "s_atomic_add": lambda old, data: old + data,
    "s_atomic_sub": lambda old, data: old - data,
    "s_atomic_swap": lambda old, data: data,
    "s_atomic_and": lambda old, data: old & data,
    "s_atomic_or": lambda old, data: old | data,
    "s_atomic_xor": lambda old, data: old ^ data,
    "s_atomic_umin": np.minimum,
    "s_atomic_umax": np.maximum,
    "s_atomic_inc": lambda old, data: np.where(old >= data, U32(0), old + U32(1)),
    "s_atomic_dec": lambda old, data: np.where((old == 0) | (old > data), data, old - U32(1)),
}


def memory_row(opcode: str) -> Opcode | None:
    """The opcode-table row of a memory instruction this module executes (it moves data)."""
    found = OPCODES.get(opcode)
    return found if found is not None and found.access else None


def compile_memory(inst: Instruction, accum: int) -> Callable[[Machine, Group], Any]:
    """The executor of a memory instruction, chosen by its opcode-table row."""
    found = memory_row(inst.opcode)
    if found is None:
        raise KeyError(inst.opcode)
    if found.unit is Unit.SMEM:
        return _smem(inst, found) if found.access == "load" else _smem_write(inst, found)
    if found.access == "atomic":
        return _atomic(inst, found, accum)
    if found.cls in ("buffer load", "buffer store"):
        return _buffer(inst, found, accum)
    if found.cls in ("global load", "global store"):
        return _global(inst, found, accum)
    if found.name == "ds_swizzle_b32":
        return _swizzle(inst, found, accum)
    if found.cls == "DS other":
        return _permute(inst, found, accum)
    return (_ds_read if found.access == "load" else _ds_write)(inst, found, accum)


def _width(row: Opcode) -> str:
    """The width/extension suffix of a memory opcode (`dwordx4`, `ubyte`, `b64`, `i16`)."""
    return row.name.rsplit("_", 1)[1]


def _account(m: Machine, g: Group, inst: Instruction, nbytes: int, lanes: int | None = None
             ) -> None:
    active = lanes if lanes is not None else (
        g.n * isa.WAVE_SIZE if g.exec_full else int(g.exec.sum()))
    m.bytes_moved[inst.address] = m.bytes_moved.get(inst.address, 0) + active * nbytes


def _dword_count(nbytes: int) -> int:
    return max(1, nbytes // 4)


def _extend(raw: np.ndarray, kind: str) -> np.ndarray:
    """Sub-dword loads: zero- or sign-extend the loaded bytes into a dword."""
    if kind in ("ubyte", "u8"):
        return (raw & U32(0xFF))
    if kind in ("sbyte", "i8"):
        return (raw & U32(0xFF)).astype(np.uint8).view(np.int8).astype(np.int32).view(U32)
    if kind in ("ushort", "u16"):
        return raw & U32(0xFFFF)
    if kind in ("sshort", "i16"):
        return (raw & U32(0xFFFF)).astype(np.uint16).view(np.int16).astype(np.int32).view(U32)
    return raw


def _register_commit(m: Machine, g: Group, regs: list[int], block: np.ndarray,
                     lanes: np.ndarray | None) -> Callable[[np.ndarray], None]:
    """Commit action writing `block` [k, n, 64] into consecutive VGPRs `regs` for the retired
    rows (waves) of the group, in active lanes only."""
    waves, sel = g.waves, g.sel
    first, count = regs[0], len(regs)
    full = lanes is None or bool(lanes.all())

    def commit(rows: np.ndarray) -> None:
        target = m.vgpr[first:first + count]
        if rows.all():
            ids, new, mask = sel, block, lanes
        else:
            ids, new = waves[rows], block[:, rows]
            mask = lanes[rows] if lanes is not None else None
        if not full:
            new = np.where(mask, new, target[:, ids])
        target[:, ids] = new
    return commit


# ---------------------------------------------------------------------------------- SMEM
def _smem(inst: Instruction, row: Opcode) -> Callable[[Machine, Group], Any]:
    count = _dword_count(row.bytes)
    buffered = inst.opcode.startswith("s_buffer_")      # the base is a V#, not an address
    counter = row.counter
    dst, base_op, offset_op = inst.operands[:3]
    dst_idx = sgpr_index(dst)
    base = scalar_reader(base_op, inst, wide=not buffered)
    base_idx = sgpr_index(base_op)
    offset = scalar_reader(offset_op, inst)
    sgprs = tuple(range(dst_idx, dst_idx + count))

    def run(m: Machine, g: Group) -> None:
        if buffered:
            lo = m.read_s(g, base_idx, inst).astype(U64)
            hi = (m.read_s(g, base_idx + 1, inst) & U32(0xFFFF)).astype(U64)
            addr = lo | (hi << U64(32))
        else:
            addr = base(m, g)
        addr = (addr + offset(m, g).astype(U64)) & ~U64(3)
        where = _checked(m, g, inst, addr[:, None], 4 * count, np.ones((g.n, 1), bool))
        values = m.memory.read_dwords(where[:, 0], count)
        waves = g.waves.copy()

        def commit(rows: np.ndarray) -> None:
            ids = waves[rows]
            for k, reg in enumerate(sgprs):
                m.sgpr[reg][ids] = values[rows, k]
        m.enqueue(g, counter, commit, inst, sgprs=sgprs)
        _account(m, g, inst, 4 * count, lanes=g.n)
    return run


def _smem_write(inst: Instruction, row: Opcode) -> Callable[[Machine, Group], Any]:
    """s_store_dword{,x2,x4} and the 32-bit s_atomic_*: write when issued, waves in order; an
    atomic with glc returns the old value to its data SGPR at the lgkmcnt, like a load."""
    count = _dword_count(row.bytes)
    counter = row.counter
    update = SMEM_ATOMICS[inst.opcode] if row.access == "atomic" else None
    returns = update is not None and (inst.has("glc") or inst.has("sc0"))
    data_op, base_op, offset_op = inst.operands[:3]
    data_idx = sgpr_index(data_op)
    base = scalar_reader(base_op, inst, wide=True)
    offset = scalar_reader(offset_op, inst)

    def run(m: Machine, g: Group) -> None:
        addr = (base(m, g) + offset(m, g).astype(U64)) & ~U64(3)
        where = _checked(m, g, inst, addr[:, None], 4 * count, np.ones((g.n, 1), bool))[:, 0]
        data = np.stack([m.read_s(g, data_idx + k, inst) for k in range(count)], axis=1)
        old = np.zeros(g.n, U32)
        for row in range(g.n):          # one wave after another, as the scalar cache serialises
            slots = where[row] + 4 * np.arange(count)
            if update is None:
                m.memory.write_words(slots, data[row], np.ones(count, bool))
                continue
            old[row] = m.memory.read_words(slots[:1])[0]
            m.memory.write_words(slots[:1], update(old[row:row + 1], data[row, :1]),
                                 np.ones(1, bool))
        waves = g.waves.copy()

        def commit(rows: np.ndarray) -> None:
            m.sgpr[data_idx][waves[rows]] = old[rows]
        if returns:
            m.enqueue(g, counter, commit, inst, sgprs=(data_idx,))
        else:
            m.enqueue(g, counter, None, inst)
        _account(m, g, inst, 4 * count, lanes=g.n)
    return run


def _checked(m: Machine, g: Group, inst: Instruction, addr: np.ndarray, nbytes: int,
             active: np.ndarray) -> np.ndarray:
    if m.trace is not None and unit(inst.opcode) is Unit.VMEM:    # vector memory only
        m.trace.memory(g.waves, addr, active)
    try:
        return m.memory.check(addr, nbytes, active)
    except MemoryFault as fault:
        wave = int(g.waves[fault.row or 0])
        raise MemoryFault(
            f"workgroup {int(m.workgroup[wave])} wave {int(m.wave_in_group[wave])} pc "
            f"0x{inst.address:x} `{inst.text or inst}`: {fault}") from None


# ---------------------------------------------------------------------------------- MUBUF
def _buffer_operands(inst: Instruction, accum: int, *, has_data: bool):
    ops = list(inst.operands)
    data = ops.pop(0) if has_data else None
    vaddr, rsrc, soffset = ops[:3]
    if not isinstance(rsrc, Reg) or rsrc.file not in ("s", "ttmp") or rsrc.count != 4:
        raise OperandError(f"{inst.opcode}: resource must be an SGPR quad, got {rsrc}")
    offen, idxen = inst.has("offen"), inst.has("idxen")
    vaddr_idx = vgpr_index(vaddr, accum) if is_vgpr(vaddr) else None
    if (offen or idxen) and vaddr_idx is None:
        raise OperandError(f"{inst.opcode}: offen/idxen need a VGPR address, got {vaddr}")
    return data, vaddr_idx, sgpr_index(rsrc), scalar_reader(soffset, inst), offen, idxen


def _buffer_address(m: Machine, g: Group, inst: Instruction, vaddr_idx, rsrc_idx, soffset,
                    offen: bool, idxen: bool, nbytes: int):
    """Byte addresses [k, n, 64] of each dword k and lane (int64), and which are in range."""
    word0 = m.read_s(g, rsrc_idx, inst).astype(np.int64)
    word1 = m.read_s(g, rsrc_idx + 1, inst).astype(np.int64)
    num_records = m.read_s(g, rsrc_idx + 2, inst).astype(np.int64)[:, None]
    base = word0 | ((word1 & 0xFFFF) << 32)
    offset = int(inst.mod("offset", 0)) + soffset(m, g).astype(np.int64)[:, None]
    if offen:
        offset = m.read_v(g, vaddr_idx + (1 if idxen else 0), inst).astype(np.int64) + offset
    else:
        offset = np.broadcast_to(offset, (g.n, isa.WAVE_SIZE))
    words = _dword_count(nbytes)
    step = (np.arange(words, dtype=np.int64) * 4)[:, None, None]
    if idxen:
        index = m.read_v(g, vaddr_idx, inst).astype(np.int64)
        stride = (word1 >> 16) & 0x3FFF
        in_range = np.broadcast_to(index < num_records, (words, g.n, isa.WAVE_SIZE))
        offset = offset + index * stride[:, None]
    elif words == 1:
        in_range = (offset + min(nbytes, 4) <= num_records)[None]
    else:
        in_range = offset + step + 4 <= num_records
    start = base[:, None] + offset
    address = start[None] if words == 1 else start + step
    active = in_range & g.exec if not g.exec_full else in_range
    return address, np.broadcast_to(active, address.shape)


def _read(m: Machine, where: np.ndarray, nbytes: int, kind: str) -> np.ndarray:
    """Dwords read from memory; sub-dword loads are zero- or sign-extended by `kind`."""
    if nbytes >= 4:
        return m.memory.read_words(where)
    return _extend(_bytes_to_u32(m.memory.read_bytes(where, nbytes)), kind)


def _store(m: Machine, g: Group, inst: Instruction, where: np.ndarray, data_idx: int,
           words: int, nbytes: int, active: np.ndarray, counter: str) -> None:
    """Write the data registers to memory where `active`; counted like a load."""
    values = m.read_block(g, data_idx, words, inst)
    if nbytes >= 4:
        m.memory.write_words(where, values, active)
    else:
        raw = np.ascontiguousarray(values[0]).view(np.uint8).reshape(
            g.n, isa.WAVE_SIZE, 4)[..., :nbytes]
        m.memory.write_bytes(where[0], raw, active[0])
    m.enqueue(g, counter, None, inst)


def _buffer(inst: Instruction, row: Opcode, accum: int) -> Callable[[Machine, Group], Any]:
    kind, nbytes, counter = _width(row), row.bytes, row.counter
    words = _dword_count(nbytes)
    to_lds = inst.has("lds")
    is_load = row.access == "load"
    data, vaddr_idx, rsrc_idx, soffset, offen, idxen = _buffer_operands(
        inst, accum, has_data=not (is_load and to_lds))
    data_idx = vgpr_index(data, accum) if data is not None else None
    inst_offset = int(inst.mod("offset", 0))
    regs = [data_idx + k for k in range(words)] if data_idx is not None else []

    def run(m: Machine, g: Group) -> None:
        addr, active = _buffer_address(m, g, inst, vaddr_idx, rsrc_idx, soffset, offen, idxen,
                                       nbytes)
        where = _checked(m, g, inst, addr, min(nbytes, 4), active)
        everything = bool(active.all())
        if is_load:
            values = _read(m, where, nbytes, kind)
            if not everything:
                values = np.where(active, values, U32(0))
            if to_lds:
                _queue_lds_dma(m, g, inst, values[0], inst_offset, nbytes, counter)
            else:
                m.enqueue(g, counter, _register_commit(m, g, regs, values, g.exec), inst,
                          vgprs=tuple(regs))
        else:
            _store(m, g, inst, where, data_idx, words, nbytes, active, counter)
        _account(m, g, inst, nbytes)
    return run


def _bytes_to_u32(raw: np.ndarray) -> np.ndarray:
    padded = np.zeros((*raw.shape[:-1], 4), np.uint8)
    padded[..., : raw.shape[-1]] = raw
    return padded.view(U32)[..., 0]


def _queue_lds_dma(m: Machine, g: Group, inst: Instruction, values: np.ndarray,
                   inst_offset: int, nbytes: int, counter: str) -> None:
    """buffer/global load ... lds: LDS[M0 + inst_offset + lane * 4] = data, at the vmcnt."""
    m0 = (m.read_s(g, isa.M0, inst) & U32(0x3FFFF)).astype(np.int64)
    lds_addr = m0[:, None] + inst_offset + np.arange(isa.WAVE_SIZE) * 4
    lanes = g.exec.copy()
    _check_lds(m, g, inst, lds_addr, 4, lanes)
    words_per_group = m.lds.shape[1]
    if nbytes >= 4:
        flat = m.workgroup[g.waves][:, None] * words_per_group + (lds_addr >> 2)
    else:
        flat = m.workgroup[g.waves][:, None] * (4 * words_per_group) + lds_addr
    full = bool(lanes.all())

    def commit(rows: np.ndarray) -> None:
        target = m.lds.reshape(-1) if nbytes >= 4 else m.lds.reshape(-1).view(np.uint8)
        data = values if nbytes >= 4 else values.astype(np.uint8)
        if full and rows.all():
            target[flat.reshape(-1)] = data.reshape(-1)
            return
        active = lanes & rows[:, None]
        target[flat[active]] = data[active]
    m.enqueue(g, counter, commit, inst)


# ---------------------------------------------------------------------------------- global
def _global_address(m: Machine, g: Group, inst: Instruction, vaddr_op, saddr_op, accum: int
                    ) -> np.ndarray:
    offset = np.int64(inst.mod("offset", 0))
    vaddr_idx = vgpr_index(vaddr_op, accum)
    if isinstance(saddr_op, Special) and saddr_op.name == "off":
        lo = m.read_v(g, vaddr_idx, inst).astype(U64)
        hi = m.read_v(g, vaddr_idx + 1, inst).astype(U64)
        return ((lo | (hi << U64(32))).astype(np.int64) + offset).astype(U64)
    base = scalar_reader(saddr_op, inst, wide=True)(m, g)
    voff = m.read_v(g, vaddr_idx, inst).astype(np.int64)
    return (base.astype(np.int64)[:, None] + voff + offset).astype(U64)


def _global(inst: Instruction, row: Opcode, accum: int) -> Callable[[Machine, Group], Any]:
    op, kind, nbytes, counter = row.access, _width(row), row.bytes, row.counter
    if inst.opcode == "global_load_lds_dword":
        vaddr_op, saddr_op = inst.operands[:2]
        data = None
    elif op == "load":
        data, vaddr_op, saddr_op = inst.operands[:3]
    else:
        vaddr_op, data, saddr_op = inst.operands[:3]
    words = _dword_count(nbytes)
    data_idx = vgpr_index(data, accum) if data is not None else None

    regs = [data_idx + k for k in range(words)] if data_idx is not None else []
    step = (np.arange(words, dtype=np.int64) * 4)[:, None, None]

    def run(m: Machine, g: Group) -> None:
        start = _global_address(m, g, inst, vaddr_op, saddr_op, accum)
        addr = start[None] + step
        active = np.broadcast_to(g.exec, addr.shape)
        where = _checked(m, g, inst, addr, min(nbytes, 4), active)
        if op == "load":
            values = _read(m, where, nbytes, kind)
            if data_idx is None:
                _queue_lds_dma(m, g, inst, values[0], 0, 4, counter)
            else:
                m.enqueue(g, counter, _register_commit(m, g, regs, values, g.exec), inst,
                          vgprs=tuple(regs))
        else:
            _store(m, g, inst, where, data_idx, words, nbytes, active, counter)
        _account(m, g, inst, nbytes)
    return run


# ---------------------------------------------------------------------------------- atomics
def _atomic(inst: Instruction, row: Opcode, accum: int) -> Callable[[Machine, Group], Any]:
    name, counter = inst.opcode, row.counter
    returns = inst.has("sc0") or inst.has("glc")
    ops = list(inst.operands)
    ret = ops.pop(0) if returns else None
    ret_idx = vgpr_index(ret, accum) if ret is not None else None
    is_buffer = row.cls == "buffer atomic"
    if is_buffer:
        data, vaddr_idx, rsrc_idx, soffset, offen, idxen = _buffer_operands(
            inst, accum, has_data=True)
    else:
        vaddr_op, data, saddr_op = ops[:3]
    data_idx = vgpr_index(data, accum)
    kind = name.rsplit("_", 1)[-1]
    if "_pk_add_" in name:
        kind = "pk_" + kind
    elif kind == "add":             # buffer/global_atomic_add: the 32-bit integer add
        kind = "u32"

    def run(m: Machine, g: Group) -> None:
        if is_buffer:
            addr, active = _buffer_address(m, g, inst, vaddr_idx, rsrc_idx, soffset, offen,
                                           idxen, 4)
            addr, active = addr[0], active[0]
        else:
            addr = _global_address(m, g, inst, vaddr_op, saddr_op, accum)
            active = g.exec
        where = _checked(m, g, inst, addr, 4, active)
        value = m.read_v(g, data_idx, inst)
        old = m.memory.read_words(where)
        lands = active & (where >= m.memory.GUARD)       # not the zero page (lenient memory)
        _apply_atomic(m.memory.heap, where[lands], value[lands], kind)
        if ret_idx is not None:
            m.enqueue(g, counter, _register_commit(m, g, [ret_idx], old[None], active), inst,
                      vgprs=(ret_idx,))
        else:
            m.enqueue(g, counter, None, inst)
        _account(m, g, inst, 4)
    return run


def _apply_atomic(heap: np.ndarray, offsets: np.ndarray, values: np.ndarray, kind: str) -> None:
    """Read-modify-write each lane in turn; lanes hitting the same address all take effect."""
    if offsets.size == 0:
        return
    words = heap[: len(heap) // 4 * 4].view(U32)
    index = offsets >> 2
    if kind == "f32":
        np.add.at(words.view(np.float32), index, values.view(np.float32))
        return
    if kind == "u32":
        np.add.at(words, index, values)
        return
    pending_index, pending_values = index, values
    while pending_index.size:  # 16-bit rounding per add: one lane per address per round
        _, first = np.unique(pending_index, return_index=True)
        idx, val = pending_index[first], pending_values[first]
        current = words[idx]
        lo = _half_add(current & U32(0xFFFF), val & U32(0xFFFF), kind)
        hi = _half_add(current >> U32(16), val >> U32(16), kind)
        words[idx] = lo | (hi << U32(16))
        keep = np.ones(pending_index.size, bool)
        keep[first] = False
        pending_index, pending_values = pending_index[keep], pending_values[keep]


def _half_add(a: np.ndarray, b: np.ndarray, kind: str) -> np.ndarray:
    """Add two 16-bit floats (bf16 or f16 bit patterns in uint32) with one rounding."""
    dtype = numerics.BF16 if kind == "pk_bf16" else np.dtype(np.float16)
    fa = a.astype(np.uint16).view(dtype).astype(np.float32)
    fb = b.astype(np.uint16).view(dtype).astype(np.float32)
    return (fa + fb).astype(dtype).view(np.uint16).astype(U32)


# ---------------------------------------------------------------------------------- LDS
def _check_lds(m: Machine, g: Group, inst: Instruction, addr: np.ndarray, nbytes: int,
               lanes: np.ndarray) -> None:
    bad = lanes & ((addr < 0) | (addr + nbytes > m.lds_bytes))
    if bad.any():
        row, lane = (int(x) for x in np.argwhere(bad)[0])
        wave = int(g.waves[row])
        raise MemoryFault(
            f"workgroup {int(m.workgroup[wave])} wave {int(m.wave_in_group[wave])} lane {lane} "
            f"pc 0x{inst.address:x} `{inst.text or inst}`: LDS address "
            f"0x{int(addr[row, lane]):x} (+{nbytes} bytes) is outside the workgroup's "
            f"{m.lds_bytes}-byte LDS allocation (group_segment_fixed_size)")


def _lds_gather(m: Machine, g: Group, addr: np.ndarray, words: int) -> np.ndarray:
    """[words, n, 64] dwords of each wave's own workgroup LDS at byte addresses `addr`."""
    per_group = m.lds.shape[1]
    base = (m.workgroup[g.waves] * per_group)[:, None]
    safe = np.clip(addr, 0, 4 * per_group - 4 * words)
    if not (safe & 3).any():
        index = (base + (safe >> 2))[None] + np.arange(words)[:, None, None]
        return m.lds.reshape(-1).take(index)
    lds_bytes = m.lds.reshape(-1).view(np.uint8)
    index = (4 * base + safe)[..., None] + np.arange(4 * words)
    raw = np.ascontiguousarray(lds_bytes.take(index)).view(U32)     # [n, 64, words]
    return np.moveaxis(raw, -1, 0)


def _lds_scatter(m: Machine, g: Group, addr: np.ndarray, values: np.ndarray, lanes: np.ndarray
                 ) -> None:
    """Write register-major `values` [words, n, 64] at byte addresses `addr` in active lanes."""
    per_group = m.lds.shape[1]
    base = (m.workgroup[g.waves] * per_group)[:, None]
    words = values.shape[0]
    if not (addr & 3).any():
        index = (base + (addr >> 2))[None] + np.arange(words)[:, None, None]
        if lanes.all():
            m.lds.reshape(-1)[index.reshape(-1)] = values.reshape(-1)
        else:
            m.lds.reshape(-1)[index[:, lanes]] = values[:, lanes]
        return
    index = (4 * base + addr)[lanes][:, None] + np.arange(4 * words)
    lane_major = np.ascontiguousarray(np.moveaxis(values, 0, -1)[lanes])
    m.lds.reshape(-1).view(np.uint8)[index] = lane_major.view(np.uint8)


def lds_cycles(addr: np.ndarray, lanes: np.ndarray, access_bytes: int, *, read: bool) -> int:
    """LDS cycles of one access by n waves ([n, 64] byte addresses), by the bank model."""
    return access_cycles(addr, access_bytes, read=read, lanes=lanes)


def lds_ideal_cycles(inst: Instruction) -> int:
    """Conflict-free LDS cycles of one wave executing `inst`: one per phase (per address of
    ds_read2/ds_write2)."""
    row = memory_row(inst.opcode)
    size, addresses = _lds_access(row) if row is not None else (4, 1)
    read = row is not None and row.access == "load"
    return addresses * len(isa.lds_phases(size, read=read))


def _lds_access(row: Opcode) -> tuple[int, int]:
    """(bytes per address, addresses per lane) of an LDS opcode: ds_read2/ds_write2 move two
    elements of the width their name ends in."""
    two = row.name.startswith(("ds_read2", "ds_write2"))
    return row.bytes // (2 if two else 1), 2 if two else 1


def _record_lds(m: Machine, g: Group, inst: Instruction, addr: np.ndarray, size: int,
                read: bool) -> None:
    if m.lds_cycles is not None:
        cycles = lds_cycles(addr, g.exec, size, read=read)
        m.lds_cycles[inst.address] = m.lds_cycles.get(inst.address, 0) + cycles
        if m.trace is not None:
            m.trace.lds_access(cycles, g.n)


def _ds_read(inst: Instruction, row: Opcode, accum: int) -> Callable[[Machine, Group], Any]:
    kind, counter = _width(row), row.counter
    size, addresses = _lds_access(row)
    if addresses == 2:
        unit = size * (64 if "st64" in row.name else 1)
        offsets = [int(inst.mod("offset0", 0)) * unit, int(inst.mod("offset1", 0)) * unit]
    else:
        offsets = [int(inst.mod("offset", 0))]
    dst, vaddr = inst.operands[:2]
    dst_idx = vgpr_index(dst, accum)
    addr_idx = vgpr_index(vaddr, accum)
    words = _dword_count(size)

    def run(m: Machine, g: Group) -> None:
        base = m.read_v(g, addr_idx, inst).astype(np.int64)
        parts = []
        for off in offsets:
            addr = base + off
            _check_lds(m, g, inst, addr, size, g.exec)
            _record_lds(m, g, inst, addr, size, True)
            if size >= 4:
                parts.append(_lds_gather(m, g, addr, words))
            else:
                raw = m.lds.view(np.uint8)[m.workgroup[g.waves][:, None, None],
                                           np.clip(addr, 0, m.lds_bytes - 1)[..., None]
                                           + np.arange(size)]
                parts.append(_extend(_bytes_to_u32(raw), kind)[None])
        values = parts[0] if len(parts) == 1 else np.concatenate(parts, 0)
        regs = [dst_idx + k for k in range(values.shape[0])]
        m.enqueue(g, counter, _register_commit(m, g, regs, values, g.exec), inst,
                  vgprs=tuple(regs))
        _account(m, g, inst, size * len(offsets))
    return run


def _ds_write(inst: Instruction, row: Opcode, accum: int) -> Callable[[Machine, Group], Any]:
    counter = row.counter
    size, addresses = _lds_access(row)
    if addresses == 2:
        unit = size * (64 if "st64" in row.name else 1)
        vaddr, d0, d1 = inst.operands[:3]
        plan = [(int(inst.mod("offset0", 0)) * unit, vgpr_index(d0, accum)),
                (int(inst.mod("offset1", 0)) * unit, vgpr_index(d1, accum))]
    else:
        vaddr, d0 = inst.operands[:2]
        plan = [(int(inst.mod("offset", 0)), vgpr_index(d0, accum))]
    addr_idx = vgpr_index(vaddr, accum)
    words = _dword_count(size)

    def run(m: Machine, g: Group) -> None:
        base = m.read_v(g, addr_idx, inst).astype(np.int64)
        for off, data_idx in plan:
            addr = base + off
            _check_lds(m, g, inst, addr, size, g.exec)
            _record_lds(m, g, inst, addr, size, False)
            values = m.read_block(g, data_idx, words, inst)
            if size >= 4:
                _lds_scatter(m, g, addr, values, g.exec)
            else:
                lanes = g.exec
                wgs = np.broadcast_to(m.workgroup[g.waves][:, None], addr.shape)[lanes]
                raw = np.ascontiguousarray(values[0]).view(np.uint8).reshape(
                    *addr.shape, 4)[..., :size]
                index = addr[lanes][:, None] + np.arange(size)
                m.lds.view(np.uint8)[wgs[:, None], index] = raw[lanes]
        m.enqueue(g, counter, None, inst)
        _account(m, g, inst, size * len(plan))
    return run


def _permute(inst: Instruction, row: Opcode, accum: int) -> Callable[[Machine, Group], Any]:
    """ds_bpermute_b32: D[l] = S[addr[l] / 4]; ds_permute_b32: D[addr[l] / 4] = S[l]."""
    dst, vaddr, data = inst.operands[:3]
    dst_idx = vgpr_index(dst, accum)
    read_addr = vector_reader(vaddr, inst, accum)
    read_data = vector_reader(data, inst, accum)
    offset = int(inst.mod("offset", 0))
    backward = inst.opcode == "ds_bpermute_b32"

    def run(m: Machine, g: Group) -> None:
        lane = ((read_addr(m, g).astype(np.int64) + offset) >> 2) & 63
        src = np.broadcast_to(read_data(m, g), (g.n, isa.WAVE_SIZE))
        rows = np.arange(g.n)[:, None]
        if backward:
            values = src[rows, lane]
        else:
            values = np.zeros((g.n, isa.WAVE_SIZE), U32)
            lanes = g.exec
            values[np.broadcast_to(rows, lane.shape)[lanes], lane[lanes]] = src[lanes]
        m.enqueue(g, row.counter, _register_commit(m, g, [dst_idx], values[None], g.exec),
                  inst, vgprs=(dst_idx,))
    return run


def _swizzle(inst: Instruction, row: Opcode, accum: int) -> Callable[[Machine, Group], Any]:
    """ds_swizzle_b32: D[l] = S[source(l)], the source from the offset's lane map
    (isa_cdna3.lanemaps); returned through the LDS queue like ds_bpermute_b32."""
    dst, data = inst.operands[:2]
    dst_idx = vgpr_index(dst, accum)
    read_data = vector_reader(data, inst, accum)
    try:
        name, params = swizzle_lane_map(int(inst.mod("offset", 0)))
    except LaneMapError as error:
        raise OperandError(f"{inst.opcode}: {error} (in `{inst.text}`)") from None
    source = lane_table(name, params)     # a swizzle's read is valid in every lane

    def run(m: Machine, g: Group) -> None:
        values = np.broadcast_to(read_data(m, g), (g.n, isa.WAVE_SIZE))[:, source]
        m.enqueue(g, row.counter, _register_commit(m, g, [dst_idx], values[None], g.exec),
                  inst, vgprs=(dst_idx,))
    return run

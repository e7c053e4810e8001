"""Operand access compiled once per instruction: readers and writers of registers and constants.

An instruction's operands are resolved when the kernel is loaded (register index in the unified
file, constant bits for the operand type), so executing it costs only numpy indexing.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from argus.errors import ArgusError
from argus.isa_cdna3 import isa
from argus.isa_cdna3.emu.state import Group, Machine
from argus.isa_cdna3.instruction import Imm, Instruction, Label, Operand, Reg, Special


class OperandError(ArgusError):
    """An operand form the emulator does not implement; collected before execution starts."""

    kind = "unsupported"


Reader = Callable[[Machine, Group], Any]


def sgpr_index(op: Operand) -> int:
    """Index into the SGPR file (0..127) of a scalar register or special register operand."""
    if isinstance(op, Reg) and op.file == "s":
        return op.index
    if isinstance(op, Reg) and op.file == "ttmp":
        return isa.TTMP_BASE + op.index
    if isinstance(op, Special):
        if op.name in isa.SPECIAL_SGPR_PAIRS:
            return isa.SPECIAL_SGPR_PAIRS[op.name]
        if op.name in isa.SPECIAL_SGPRS:
            return isa.SPECIAL_SGPRS[op.name]
    raise OperandError(f"not a scalar register: {op}")


def sgpr_count(op: Operand) -> int:
    if isinstance(op, Reg):
        return op.count
    return 2 if isinstance(op, Special) and op.name in isa.SPECIAL_SGPR_PAIRS else 1


def vgpr_index(op: Operand, accum_offset: int) -> int:
    if isinstance(op, Reg) and op.file == "v":
        return op.index
    if isinstance(op, Reg) and op.file == "a":
        return accum_offset + op.index
    raise OperandError(f"not a vector register: {op}")


def is_vgpr(op: Operand) -> bool:
    return isinstance(op, Reg) and op.file in ("v", "a")


def constant_bits(op: Imm, kind: str) -> int:
    """Bits of an inline/literal constant for an operand of `kind` (u32/i32/f32/f16/u64/f64)."""
    value = op.value
    if isinstance(value, float):
        if kind in ("f64", "u64"):
            return struct.unpack("<Q", struct.pack("<d", value))[0]
        if kind == "f16":
            return int(np.float16(value).view(np.uint16))
        return struct.unpack("<I", struct.pack("<f", value))[0]
    if kind in ("u64", "f64"):
        if kind == "f64" and op.literal:
            return (value & 0xFFFFFFFF) << 32  # a 64-bit float literal holds the high dword
        return value & 0xFFFFFFFFFFFFFFFF
    return value & 0xFFFFFFFF


def scalar_reader(op: Operand, inst: Instruction, *, wide: bool = False) -> Reader:
    """Per-wave value ([n] uint32, or uint64 when `wide`) of a scalar source."""
    if isinstance(op, Imm):
        bits = constant_bits(op, "u64" if wide else "u32")
        const = np.uint64(bits) if wide else np.uint32(bits)
        return lambda m, g: np.full(g.n, const)
    if isinstance(op, Special) and op.name == "scc":
        return lambda m, g: m.scc[g.sel].astype(np.uint64 if wide else np.uint32)
    if isinstance(op, Special) and op.name in ("vccz", "execz"):
        base = isa.VCC if op.name == "vccz" else isa.EXEC
        return lambda m, g: ((m.sgpr[base][g.sel] | m.sgpr[base + 1][g.sel]) == 0).astype(
            np.uint32)
    if isinstance(op, Label):
        raise OperandError(f"label {op} used as a value")
    if isinstance(op, Special) and op.name in isa.APERTURES:
        aperture = isa.APERTURES[op.name]
        value = np.uint64(aperture) if wide else np.uint32(aperture >> 32)
        return lambda m, g: np.full(g.n, value)
    idx = sgpr_index(op)
    if wide:
        return lambda m, g: (m.read_s(g, idx, inst).astype(np.uint64)
                             | (m.read_s(g, idx + 1, inst).astype(np.uint64) << np.uint64(32)))
    return lambda m, g: m.read_s(g, idx, inst)


def scalar_writer(op: Operand, *, wide: bool = False) -> Callable[[Machine, Group, Any], None]:
    idx = sgpr_index(op)
    if wide:
        def write64(m: Machine, g: Group, value: Any) -> None:
            value = np.asarray(value, np.uint64)
            m.write_s(g, idx, (value & np.uint64(0xFFFFFFFF)).astype(np.uint32))
            m.write_s(g, idx + 1, (value >> np.uint64(32)).astype(np.uint32))
        return write64
    return lambda m, g, value: m.write_s(g, idx, np.asarray(value).astype(np.uint32))


def _float_mods(op: Operand, values: Any, dtype: Any) -> Any:
    if getattr(op, "abs", False):
        values = np.abs(values)
    if getattr(op, "neg", False):
        values = -values
    return values.astype(dtype) if hasattr(values, "astype") else dtype(values)


def vector_reader(op: Operand, inst: Instruction, accum_offset: int, kind: str = "u32",
                  *, srcc: tuple[int, int] | None = None) -> Reader:
    """Per-lane value of a VALU source ([n, 64], or [n, 1] for scalars and constants) as `kind`:
    u32/i32 raw, f32 float32 with abs/neg applied, f16 low half as float16, u64/f64 from a pair."""
    wide = kind in ("u64", "f64")
    if isinstance(op, Imm):
        bits = constant_bits(op, kind)
        raw = np.array([[bits]], np.uint64 if wide else np.uint32)
        value = typed(raw, kind)
        value = _float_mods(op, value, value.dtype) if kind in ("f32", "f16", "f64") else value
        return lambda m, g: value
    if is_vgpr(op):
        idx = vgpr_index(op, accum_offset)
        if wide:
            def read_pair(m: Machine, g: Group) -> Any:
                lo = m.read_v(g, idx, inst).astype(np.uint64)
                hi = m.read_v(g, idx + 1, inst).astype(np.uint64)
                return finish(op, typed(lo | (hi << np.uint64(32)), kind), kind)
            return read_pair
        if kind == "u32":
            return lambda m, g: m.read_v(g, idx, inst, mfma_srcc=srcc)
        return lambda m, g: finish(op, typed(m.read_v(g, idx, inst), kind), kind)
    scalar = scalar_reader(op, inst, wide=wide)
    return lambda m, g: finish(op, typed(scalar(m, g)[:, None], kind), kind)


def typed(raw: np.ndarray, kind: str) -> np.ndarray:
    """Raw uint32 (uint64 for 64-bit kinds) operand bits viewed as `kind`."""
    if kind == "i32":
        return raw.view(np.int32)
    if kind == "f32":
        return raw.view(np.float32)
    if kind == "f16":
        return (raw & np.uint32(0xFFFF)).astype(np.uint16).view(np.float16)
    if kind == "f64":
        return raw.view(np.float64)
    return raw


def finish(op: Operand, value: np.ndarray, kind: str) -> np.ndarray:
    """Apply the operand's abs/neg modifiers to a float value."""
    if kind in ("f32", "f16", "f64") and (getattr(op, "abs", False) or getattr(op, "neg", False)):
        return _float_mods(op, value, value.dtype)
    return value


def to_bits(value: Any, n: int) -> np.ndarray:
    """Any VALU result (float32, int32, uint32, bool) as a [n, 64] uint32 array."""
    value = np.asarray(value)
    if value.dtype == np.float32 or value.dtype == np.int32:
        value = value.view(np.uint32)
    elif value.dtype != np.uint32:
        value = value.astype(np.uint32)
    if value.shape != (n, isa.WAVE_SIZE):
        value = np.broadcast_to(value, (n, isa.WAVE_SIZE))
    return value


def lane_mask_bits(lanes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[n, 64] bool -> (lo, hi) uint32 words of a 64-bit lane mask."""
    packed = np.packbits(lanes, axis=1, bitorder="little")
    words = np.ascontiguousarray(packed).view(np.uint32)
    return words[:, 0], words[:, 1]


_BITS = np.arange(32, dtype=np.uint32)


def mask_lanes(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """(lo, hi) uint32 words -> [n, 64] bool."""
    return np.concatenate([(lo[:, None] >> _BITS) & 1, (hi[:, None] >> _BITS) & 1],
                          axis=1).astype(bool)


def lane_mask_reader(op: Operand, inst: Instruction) -> Reader:
    """A 64-bit lane mask source (vcc, s[n:n+1], or a constant) as [n, 64] bool."""
    wide = scalar_reader(op, inst, wide=True)

    def read(m: Machine, g: Group) -> np.ndarray:
        value = wide(m, g)
        return mask_lanes((value & np.uint64(0xFFFFFFFF)).astype(np.uint32),
                          (value >> np.uint64(32)).astype(np.uint32))
    return read

"""IR value types: global tensors, register tiles with thread layouts, LDS buffers, and the
layouts themselves — every map a tuple of `ir.expr` terms, so the verifier composes them by
substitution and the interpreter evaluates them on numpy arrays.
"""

from __future__ import annotations

import attrs
import numpy as np

from argus.errors import ArgusError
from argus.ir.expr import Expr, Var, as_expr, evaluate, free_vars, substitute
from argus.isa_cdna3 import isa

#: Bytes per element of each value dtype the IR knows.
DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "fp8": 1, "bf8": 1, "i8": 1, "u8": 1}

#: The machine limits a kernel is checked against: lanes per wave, the unified (arch + acc)
#: VGPR file per lane, LDS bytes per workgroup. The numbers live in the ISA tables.
LANES = isa.WAVE_SIZE
VGPR_BUDGET = isa.VGPRS_UNIFIED
LDS_BUDGET = isa.LDS_BYTES
#: Bounds of the integer tags and symbolic sizes the IR declares (wide enough, finite for SMT).
TAG_RANGE = (-(2**31), 2**31)
SIZE_RANGE = (1, 2**31)


class IRError(ArgusError, ValueError):
    """An IR invariant does not hold; the message names the op, `loc` its source location."""


@attrs.frozen
class SourceLoc:
    """Where an op came from in the kernel author's Python source."""

    file: str
    line: int
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


UNKNOWN_LOC = SourceLoc("<unknown>", 0, 0)


def check_dtype(dtype: str, where: str) -> str:
    if dtype not in DTYPE_BYTES:
        raise IRError(f"{where}: unknown dtype {dtype!r}; use one of {sorted(DTYPE_BYTES)}")
    return dtype


def thread_vars(waves: int, slots: int) -> tuple[Var, Var, Var]:
    """The (wave, lane, slot) variables a register-tile layout is written in."""
    return Var("wave", 0, waves), Var("lane", 0, LANES), Var("slot", 0, slots)


def coord_vars(shape: tuple[int, ...]) -> tuple[Var, ...]:
    """Variables c0, c1, ... ranging over a tile's logical coordinates."""
    return tuple(Var(f"c{axis}", 0, extent) for axis, extent in enumerate(shape))


@attrs.frozen
class ThreadLayout:
    """(wave, lane, slot) -> logical tile coordinate: which element each register slot holds.

    Several threads may hold the same element (a row vector replicated over the lanes of an
    MFMA accumulator); every element of the tile must be held by some thread.
    """

    waves: int
    slots: int
    coords: tuple[Expr, ...] = attrs.field(converter=lambda cs: tuple(as_expr(c) for c in cs))

    def __attrs_post_init__(self):
        allowed = set(thread_vars(self.waves, self.slots))
        for c in self.coords:
            stray = free_vars(c) - allowed
            if stray:
                names = ", ".join(sorted(f"{v.name}[{v.lo},{v.hi})" for v in stray))
                raise IRError(
                    f"thread layout coordinate '{c}' mentions {names}; a register layout may "
                    f"only use wave[0,{self.waves}), lane[0,{LANES}) and slot[0,{self.slots})")

    @property
    def rank(self) -> int:
        return len(self.coords)

    def __call__(self, wave, lane, slot) -> tuple:
        env = {"wave": wave, "lane": lane, "slot": slot}
        return tuple(evaluate(c, env) for c in self.coords)

    def table(self) -> tuple[np.ndarray, ...]:
        """Every thread's coordinates as int arrays of shape (waves, 64, slots)."""
        wave, lane, slot = np.meshgrid(
            np.arange(self.waves), np.arange(LANES), np.arange(self.slots), indexing="ij")
        return tuple(np.broadcast_to(np.asarray(evaluate(c, {"wave": wave, "lane": lane,
                                                             "slot": slot})), wave.shape)
                     for c in self.coords)

    def permute(self, order: tuple[int, ...]) -> ThreadLayout:
        return ThreadLayout(self.waves, self.slots, tuple(self.coords[i] for i in order))

    def __str__(self) -> str:
        return f"{{wave {self.waves}, slot {self.slots} -> {', '.join(map(str, self.coords))}}}"


@attrs.frozen
class AddressMap:
    """Logical LDS coordinate -> element offset in an LDS allocation (swizzles included)."""

    shape: tuple[int, ...]
    offset: Expr = attrs.field(converter=as_expr)

    def __attrs_post_init__(self):
        stray = free_vars(self.offset) - set(coord_vars(self.shape))
        if stray:
            raise IRError(
                f"LDS address map '{self.offset}' mentions {sorted(v.name for v in stray)}; it "
                f"may only use the coordinates "
                f"{', '.join(f'{v.name}[0,{v.hi})' for v in coord_vars(self.shape))}")

    def __call__(self, *coord):
        return evaluate(self.offset, {f"c{axis}": c for axis, c in enumerate(coord)})

    def at(self, coord: tuple) -> Expr:
        """The symbolic address of a symbolic coordinate."""
        return substitute(self.offset, {f"c{axis}": c for axis, c in enumerate(coord)})

    def __str__(self) -> str:
        return f"{{{', '.join(map(str, self.shape))} -> {self.offset}}}"


@attrs.frozen
class GlobalType:
    """A row-major global-memory tensor whose extents may be symbolic sizes."""

    dtype: str
    shape: tuple[Expr, ...] = attrs.field(converter=lambda s: tuple(as_expr(d) for d in s))

    def __str__(self) -> str:
        return f"global<{self.dtype}>[{', '.join(map(str, self.shape))}]"


@attrs.frozen
class RegType:
    """A register tile: logical `shape`, and the layout saying which thread slot holds what."""

    dtype: str
    shape: tuple[int, ...]
    layout: ThreadLayout

    @property
    def vgprs(self) -> int:
        """32-bit registers per lane this tile occupies (narrow elements pack into a VGPR)."""
        return -(-self.layout.slots * DTYPE_BYTES[self.dtype] // 4)

    def __str__(self) -> str:
        return f"reg<{self.dtype}>[{', '.join(map(str, self.shape))}] {self.layout}"


@attrs.frozen
class LdsType:
    """An LDS allocation of `size` elements; its views are AddressMaps on the accessing ops."""

    dtype: str
    size: int

    @property
    def nbytes(self) -> int:
        return self.size * DTYPE_BYTES[self.dtype]

    def __str__(self) -> str:
        return f"lds<{self.dtype}>[{self.size}]"


Type = GlobalType | RegType | LdsType


@attrs.frozen
class Value:
    """An SSA value: a name unique in its kernel, and its type."""

    name: str
    type: GlobalType | RegType | LdsType

    def __str__(self) -> str:
        return f"%{self.name}"

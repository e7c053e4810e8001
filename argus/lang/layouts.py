"""Layout helpers for kernel authors: MFMA operand fragments over a wave grid, vectorised copy
layouts, XOR-swizzled LDS views. MFMA facts come from `argus.isa_cdna3.mfma`; a helper only
places the catalogue's per-wave layout into a tile.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from argus.ir.expr import Var, evaluate, free_vars, simplify, substitute
from argus.ir.layout import Layout, Swizzle
from argus.ir.types import LANES, AddressMap, ThreadLayout, coord_vars, thread_vars
from argus.lang.errors import DSLError, user_loc


@attrs.frozen
class TileSpec:
    """A register tile's logical shape and the thread layout that holds it."""

    shape: tuple[int, ...]
    layout: ThreadLayout

    @property
    def slots(self) -> int:
        return self.layout.slots

    def permute(self, order: tuple[int, ...]) -> TileSpec:
        return TileSpec(tuple(self.shape[i] for i in order), self.layout.permute(order))


def _mfma_info(instr: str):
    from argus.isa_cdna3.mfma import UnknownMfmaError, mfma

    try:
        info = mfma(instr)
    except UnknownMfmaError as error:
        raise DSLError(str(error), user_loc()) from None
    if info.blocks != 1 or info.sparse:
        raise DSLError(f"{info.name}: the wave-grid helpers place single-block dense MFMAs; "
                       "write the layout by hand for multi-block or sparse instructions",
                       user_loc())
    return info


def mfma_layout(instr: str, operand: str, wave_grid: tuple[int, int] = (1, 1), *,
                pack: int = 1) -> TileSpec:
    """The fragment of one MFMA per wave, waves tiled row-major over `wave_grid` (rows, cols).

    "a" is an (rows*m, k) tile, "b" an (cols*n, k) tile (K-minor, as for C = A @ B.T) and "c" an
    (rows*m, cols*n) tile. Waves in the same grid row share A, in the same grid column share B.

    `pack` > 1 ("a" and "b") lays out `pack` consecutive k steps so that each lane holds its
    pack * k_per_lane k's contiguously (k = pack * the lane's first k + slot, over pack * k):
    one wide load (16 fp8 bytes: a dwordx4 or ds_read_b128) then feeds `pack` MFMAs. Which k an
    MFMA step takes does not change the contraction as long as A and B take the same, so both
    are packed alike; step s is `T.slots(tile, s * k_per_lane, mfma_layout(instr, operand,
    wave_grid))`, whose tags (k among them) travel with the data, so the MFMA's assertions see
    the packed k's.
    """
    info = _mfma_info(instr)
    rows, cols = wave_grid
    waves = rows * cols
    if pack != 1:
        return _packed(info, operand, rows, cols, pack)
    slots = info.c_values if operand == "c" else info.k_per_lane
    wave, lane, slot = thread_vars(waves, slots)
    grid_row, grid_col = wave // cols, wave % cols
    if operand == "a":
        _, i, k = info.a_coord(lane, slot)
        return TileSpec((rows * info.m, info.k),
                        ThreadLayout(waves, slots, (grid_row * info.m + i, k)))
    if operand == "b":
        _, k, j = info.b_coord(lane, slot)
        return TileSpec((cols * info.n, info.k),
                        ThreadLayout(waves, slots, (grid_col * info.n + j, k)))
    if operand == "c":
        _, i, j = info.c_coord(lane, slot)
        return TileSpec((rows * info.m, cols * info.n),
                        ThreadLayout(waves, slots, (grid_row * info.m + i, grid_col * info.n + j)))
    raise DSLError(f"operand {operand!r} is not 'a', 'b' or 'c'", user_loc())


def _packed(info, operand: str, rows: int, cols: int, pack: int) -> TileSpec:
    """`mfma_layout`'s A or B fragment of `pack` k steps packed per lane."""
    if operand not in ("a", "b"):
        raise DSLError(f"pack={pack!r}: only the A and B operands are packed along k, not "
                       f"{operand!r}", user_loc(), fix="give operand 'a' or 'b'")
    if not _whole(pack):
        raise DSLError(f"pack={pack!r}: the k steps packed per lane are a whole number >= 1",
                       user_loc(), fix="e.g. pack=2")
    kpl = info.k_per_lane
    probe_lane, probe_slot = np.arange(LANES)[:, None], np.arange(kpl)[None, :]
    coord = info.a_coord if operand == "a" else info.b_coord
    k_of = coord(Var("lane", 0, LANES), Var("slot", 0, kpl))[2 if operand == "a" else 1]
    ks = np.asarray(evaluate(k_of, {"lane": probe_lane, "slot": probe_slot}))
    if not ((ks - ks[:, :1]) == probe_slot).all() or (ks[:, 0] % kpl).any():
        raise DSLError(f"{info.name}: a lane's {operand.upper()} k's are not one contiguous "
                       f"run of {kpl} starting at a multiple of {kpl}, so they cannot be "
                       "packed", user_loc(), fix="use pack=1 with this instruction")
    waves = rows * cols
    slots = kpl * pack
    wave, lane, slot = thread_vars(waves, slots)
    at_first = coord(lane, 0)
    # A's coordinates are (block, i, k), B's (block, k, j)
    first_k, other = (at_first[2], at_first[1]) if operand == "a" else at_first[1:]
    k = simplify(first_k * pack + slot)
    if operand == "a":
        return TileSpec((rows * info.m, pack * info.k),
                        ThreadLayout(waves, slots, ((wave // cols) * info.m + other, k)))
    return TileSpec((cols * info.n, pack * info.k),
                    ThreadLayout(waves, slots, ((wave % cols) * info.n + other, k)))


def reduced(spec: TileSpec, axis: int) -> TileSpec:
    """The layout a reduction along `axis` produces: each thread keeps its other coordinates
    (one slot if they do not depend on the slot)."""
    coords = spec.layout.coords[:axis] + spec.layout.coords[axis + 1:]
    shape = spec.shape[:axis] + spec.shape[axis + 1:]
    slot = thread_vars(spec.layout.waves, spec.layout.slots)[2]
    if any(slot in free_vars(c) for c in coords):
        return TileSpec(shape, ThreadLayout(spec.layout.waves, spec.layout.slots, coords))
    one = Var("slot", 0, 1)
    coords = tuple(substitute(c, {"slot": one}) for c in coords)
    return TileSpec(shape, ThreadLayout(spec.layout.waves, 1, coords))


def copy_layout(shape: tuple[int, int], waves: int, vector: int) -> TileSpec:
    """Row-major tile copied by all threads, each moving `vector` contiguous elements at a time
    (8 bf16 = one 16-byte load), consecutive threads on consecutive vectors."""
    if (len(tuple(shape)) != 2 or not all(_whole(x) for x in (*shape, waves, vector))):
        raise DSLError(f"copy_layout(shape={shape!r}, waves={waves!r}, vector={vector!r}): "
                       "give a (rows, cols) shape, waves and vector as whole numbers >= 1",
                       user_loc())
    rows, cols = shape
    threads = waves * LANES
    if cols % vector or (rows * cols) % (threads * vector):
        raise DSLError(f"a {rows}x{cols} tile cannot be split into {vector}-element vectors over "
                       f"{threads} threads; pick sizes where {vector} divides {cols} and "
                       f"{threads * vector} divides {rows * cols}", user_loc())
    slots = rows * cols // threads
    wave, lane, slot = thread_vars(waves, slots)
    element = ((slot // vector) * threads + wave * LANES + lane) * vector + slot % vector
    return TileSpec(shape, ThreadLayout(waves, slots, (element // cols, element % cols)))


def rows_layout(shape: tuple[int, int], waves: int, vector: int = 1) -> TileSpec:
    """Row-major (rows, cols) tile whose rows are split into `waves` consecutive blocks, one per
    wave, each wave's block read by its lanes `vector` contiguous elements at a time: a row
    never leaves its wave, so `T.reduce(x, fn, 1, T.reduced(spec, 1))` and scans along the
    row stay within the wave (lanes of one row differ in fixed lane bits when the row's
    length is a power of two or a multiple of 64 * vector)."""
    if (len(tuple(shape)) != 2 or not all(_whole(x) for x in (*shape, waves, vector))):
        raise DSLError(f"rows_layout(shape={shape!r}, waves={waves!r}, vector={vector!r}): "
                       "give a (rows, cols) shape, waves and vector as whole numbers >= 1",
                       user_loc())
    rows, cols = shape
    per_wave = rows * cols // waves if rows % waves == 0 else 0
    if not per_wave or cols % vector or per_wave % (LANES * vector):
        raise DSLError(f"a {rows}x{cols} tile cannot give each of {waves} waves whole rows read "
                       f"as {vector}-element vectors by {LANES} lanes; pick sizes where "
                       f"{waves} divides {rows}, {vector} divides {cols} and {LANES * vector} "
                       f"divides {rows // max(waves, 1)}*{cols}", user_loc())
    slots = per_wave // LANES
    wave, lane, slot = thread_vars(waves, slots)
    element = wave * per_wave + ((slot // vector) * LANES + lane) * vector + slot % vector
    return TileSpec(shape, ThreadLayout(waves, slots, (element // cols, element % cols)))


def lds_layout(shape: tuple[int, ...], swizzle: tuple[int, int, int] | None = None) -> AddressMap:
    """Row-major LDS addresses for `shape`; the XOR swizzle (bits, base, shift), in elements,
    permutes each trailing 2-D tile so that the lanes of one access hit different banks."""
    coords = coord_vars(shape)
    inner = math.prod(shape[-2:])
    tile = Layout(tuple(shape[-2:]), (shape[-1], 1))(*coords[-2:])
    if swizzle is not None:
        sw = Swizzle(*swizzle)
        if sw.span > inner:
            raise DSLError(f"swizzle {sw} permutes {sw.span} elements but a {shape[-2]}x"
                           f"{shape[-1]} tile has {inner}; use fewer bits or a smaller shift",
                           user_loc())
        tile = sw(tile)
    if len(shape) == 2:
        return AddressMap(tuple(shape), tile)
    lead = coords[0]
    for axis in range(1, len(shape) - 2):
        lead = lead * shape[axis] + coords[axis]
    return AddressMap(tuple(shape), lead * inner + tile)


def cosize(addr: AddressMap) -> int:
    """One past the largest address the view touches (by enumeration)."""
    grids = np.meshgrid(*(np.arange(n) for n in addr.shape), indexing="ij")
    offsets = np.asarray(evaluate(addr.offset, {f"c{a}": g for a, g in enumerate(grids)}))
    return int(offsets.max()) + 1


def _whole(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 1

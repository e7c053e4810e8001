"""Lane maps of gfx942's cross-lane data movement: for each DPP control, `ds_swizzle_b32` mode,
`ds_bpermute_b32` pattern and `v_permlane*` form we use, which lane each lane reads and where that
read is valid (an invalid DPP source leaves the destination lane unwritten).

Each map is arithmetic on the reading lane, written once here for any value with integer
operators: on an `ir.expr` variable it is the formula the verifier proves over and the backend
materialises as a `ds_bpermute_b32` address; on `numpy.arange(64)` it is the interpreter's
table; the emulator reads its DPP and ds_swizzle_b32 semantics from it. `maximum` is that
value's max (`ir.expr.max_`, `numpy.maximum`). The encodings (DPP control text, swizzle offset)
of the maps are converted both ways at the end.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import numpy as np

from argus.errors import ArgusError
from argus.isa_cdna3.isa import WAVE_SIZE

_ROW = 16  # DPP rows: lanes 16r .. 16r + 15


def _everywhere(lane):
    """A read valid in every lane (as a condition of the lane's kind)."""
    return lane >= 0


def _quad_perm(lane, sel: tuple[int, ...], maximum):
    within = lane % 4
    source = lane - within
    for k, pick in enumerate(sel):
        # 1 where within == k, else 0: written with max only, which the backend emits
        source = source + maximum(0, 1 - maximum(within - k, k - within)) * pick
    return source, _everywhere(lane)


def _row_shr(lane, n: tuple[int], maximum):
    return lane - n[0], lane % _ROW >= n[0]


def _row_shl(lane, n: tuple[int], maximum):
    return lane + n[0], lane % _ROW < _ROW - n[0]


def _row_ror(lane, n: tuple[int], maximum):
    within = lane % _ROW
    return lane - within + (within + _ROW - n[0]) % _ROW, _everywhere(lane)


def _row_mirror(lane, _: tuple, maximum):
    return lane + (_ROW - 1) - 2 * (lane % _ROW), _everywhere(lane)


def _row_half_mirror(lane, _: tuple, maximum):
    return lane + 7 - 2 * (lane % 8), _everywhere(lane)


def _row_bcast15(lane, _: tuple, maximum):
    return lane - lane % _ROW - 1, lane >= _ROW


def _row_bcast31(lane, _: tuple, maximum):
    return lane - lane + 31, lane >= 32


def _row_newbcast(lane, n: tuple[int], maximum):
    return lane - lane % _ROW + n[0], _everywhere(lane)


def _wave_shl(lane, _: tuple, maximum):
    return lane + 1, lane < WAVE_SIZE - 1


def _wave_shr(lane, _: tuple, maximum):
    return lane - 1, lane >= 1


def _wave_rol(lane, _: tuple, maximum):
    return (lane + 1) % WAVE_SIZE, _everywhere(lane)


def _wave_ror(lane, _: tuple, maximum):
    return (lane + WAVE_SIZE - 1) % WAVE_SIZE, _everywhere(lane)


def _swizzle_bitmask(lane, masks: tuple[int, int, int], maximum):
    """ds_swizzle_b32 bitmask mode: within each group of 32 lanes, ((lane & and) | or) ^ xor."""
    keep, force, flip = masks
    within = lane % 32
    return lane - within + (((within & keep) | force) ^ flip), _everywhere(lane)


def _xor(lane, mask: tuple[int], maximum):
    return lane ^ mask[0], _everywhere(lane)


def _rotate(lane, n: tuple[int], maximum):
    return (lane + n[0]) % WAVE_SIZE, _everywhere(lane)


def _broadcast(lane, k: tuple[int], maximum):
    return lane - lane + k[0], _everywhere(lane)


def _halves(lane, _: tuple, maximum):
    return lane ^ 32, _everywhere(lane)


@attrs.frozen
class LaneMap:
    """One cross-lane primitive: its instruction form, parameter count and ranges, and the
    source lane (with its validity) as formulas in the reading lane."""

    name: str
    instruction: str          # the gfx942 instruction and control, as in the ISA manual
    params: tuple[tuple[str, int, int], ...]  # (name, lo, hi) per parameter, hi exclusive
    source: Callable = attrs.field(eq=False)  # (lane, params, maximum) -> (source, valid)
    gfx942: bool = True       # False: the instruction exists on later CDNA parts only


LANE_MAPS = {m.name: m for m in (
    LaneMap("dpp.quad_perm", "DPP quad_perm:[a,b,c,d]",
            (("a", 0, 4), ("b", 0, 4), ("c", 0, 4), ("d", 0, 4)), _quad_perm),
    LaneMap("dpp.row_shr", "DPP row_shr:n", (("n", 1, 16),), _row_shr),
    LaneMap("dpp.row_shl", "DPP row_shl:n", (("n", 1, 16),), _row_shl),
    LaneMap("dpp.row_ror", "DPP row_ror:n", (("n", 1, 16),), _row_ror),
    LaneMap("dpp.row_mirror", "DPP row_mirror", (), _row_mirror),
    LaneMap("dpp.row_half_mirror", "DPP row_half_mirror", (), _row_half_mirror),
    LaneMap("dpp.row_bcast15", "DPP row_bcast:15", (), _row_bcast15),
    LaneMap("dpp.row_bcast31", "DPP row_bcast:31", (), _row_bcast31),
    LaneMap("dpp.row_newbcast", "DPP row_newbcast:n (gfx90a+)", (("n", 0, 16),),
            _row_newbcast),
    LaneMap("dpp.wave_shl", "DPP wave_shl:1", (), _wave_shl),
    LaneMap("dpp.wave_shr", "DPP wave_shr:1", (), _wave_shr),
    LaneMap("dpp.wave_rol", "DPP wave_rol:1", (), _wave_rol),
    LaneMap("dpp.wave_ror", "DPP wave_ror:1", (), _wave_ror),
    LaneMap("swizzle.bitmask", "ds_swizzle_b32 offset:swizzle(BITMASK_PERM) and/or/xor masks",
            (("and", 0, 32), ("or", 0, 32), ("xor", 0, 32)), _swizzle_bitmask),
    LaneMap("swizzle.quad_perm", "ds_swizzle_b32 offset:swizzle(QUAD_PERM,a,b,c,d)",
            (("a", 0, 4), ("b", 0, 4), ("c", 0, 4), ("d", 0, 4)), _quad_perm),
    LaneMap("bpermute.xor", "ds_bpermute_b32 with address (lane ^ mask) * 4",
            (("mask", 0, WAVE_SIZE),), _xor),
    LaneMap("bpermute.rotate", "ds_bpermute_b32 with address ((lane + n) % 64) * 4",
            (("n", 0, WAVE_SIZE),), _rotate),
    LaneMap("bpermute.broadcast", "ds_bpermute_b32 with address k * 4",
            (("k", 0, WAVE_SIZE),), _broadcast),
    LaneMap("permlane32_swap", "v_permlane32_swap (gfx950: swaps the halves of a wave)", (),
            _halves, gfx942=False),
)}


class LaneMapError(ArgusError, ValueError):
    """An unknown lane map or parameters outside its ranges."""


def lane_map(name: str, params: tuple[int, ...]) -> LaneMap:
    """The primitive `name`, with `params` checked against its ranges."""
    found = LANE_MAPS.get(name)
    if found is None:
        raise LaneMapError(f"unknown lane map {name!r}; use one of {sorted(LANE_MAPS)}")
    if len(params) != len(found.params):
        raise LaneMapError(f"{name} takes {len(found.params)} parameter(s) "
                           f"{[p for p, _, _ in found.params]}, got {list(params)}")
    for value, (what, lo, hi) in zip(params, found.params):
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value < hi:
            raise LaneMapError(f"{name}: {what} = {value!r} must be a whole number in "
                               f"[{lo}, {hi})")
    return found


def source_lane(name: str, params: tuple[int, ...], lane, maximum):
    """(the lane that `lane` reads, whether that read is valid) for primitive `name`; the
    source lies in [0, 64) wherever the read is valid."""
    return lane_map(name, params).source(lane, tuple(params), maximum)


def lane_table(name: str, params: tuple[int, ...]) -> np.ndarray:
    """The lane each of the 64 lanes reads under `name`, -1 where the read is invalid."""
    lanes = np.arange(WAVE_SIZE)
    source, valid = (np.broadcast_to(e, lanes.shape)
                     for e in source_lane(name, params, lanes, np.maximum))
    return np.where(valid.astype(bool), source, -1).astype(np.int64)


# --- encodings: the DPP control and the ds_swizzle_b32 offset of a map, and back ------------

#: DPP controls as LLVM spells them, valued (`row_shr:n`) or bare (`row_mirror`), and their maps;
#: `row_bcast` takes 15 or 31, the wave shifts only 1.
_DPP_VALUED = {"row_shl": "dpp.row_shl", "row_shr": "dpp.row_shr", "row_ror": "dpp.row_ror",
               "row_newbcast": "dpp.row_newbcast"}
_DPP_BARE = {"row_mirror": "dpp.row_mirror", "row_half_mirror": "dpp.row_half_mirror",
             "row_bcast:15": "dpp.row_bcast15", "row_bcast:31": "dpp.row_bcast31",
             "wave_shl:1": "dpp.wave_shl", "wave_shr:1": "dpp.wave_shr",
             "wave_rol:1": "dpp.wave_rol", "wave_ror:1": "dpp.wave_ror"}
#: ds_swizzle_b32 offset (gfx9): bit 15 set selects quad-perm mode (2-bit selectors in bits 7:0),
#: clear selects bitmask mode over 32-lane halves (and, or, xor masks in bits 4:0, 9:5, 14:10).
SWIZZLE_QUAD_MODE = 1 << 15


def dpp_lane_map(control: str, value=True) -> tuple[str, tuple[int, ...]]:
    """The lane map of DPP control `control` with its value as the instruction holds it
    (`quad_perm`, (1, 0, 3, 2)), (`row_shr`, 3), (`row_bcast`, 15), (`row_mirror`, True)."""
    if control == "quad_perm":
        return "dpp.quad_perm", tuple(int(v) for v in value)
    if control in _DPP_VALUED:
        return _DPP_VALUED[control], (int(value),)
    spelled = control if value is True else f"{control}:{int(value)}"
    if spelled in _DPP_BARE:
        return _DPP_BARE[spelled], ()
    raise LaneMapError(f"DPP control {spelled!r} has no lane map; gfx942 DPP controls are "
                       f"quad_perm, {', '.join(_DPP_VALUED)}, {', '.join(_DPP_BARE)}")


def dpp_control(name: str, params: tuple[int, ...]) -> str:
    """The DPP control text of map `name` (a `dpp.*` map)."""
    lane_map(name, params)
    if name == "dpp.quad_perm":
        return f"quad_perm:[{','.join(map(str, params))}]"
    for control, found in _DPP_VALUED.items():
        if found == name:
            return f"{control}:{params[0]}"
    for control, found in _DPP_BARE.items():
        if found == name:
            return control
    raise LaneMapError(f"{name} is not a DPP lane map")


def swizzle_lane_map(offset: int) -> tuple[str, tuple[int, ...]]:
    """The lane map of ds_swizzle_b32 with raw offset `offset` (gfx9 has only these two modes)."""
    if not 0 <= offset < 1 << 16:
        raise LaneMapError(f"ds_swizzle_b32 offset {offset:#x} is not a 16-bit pattern")
    if offset & SWIZZLE_QUAD_MODE:
        return "swizzle.quad_perm", tuple((offset >> (2 * k)) & 3 for k in range(4))
    return "swizzle.bitmask", (offset & 31, (offset >> 5) & 31, (offset >> 10) & 31)


def swizzle_offset(name: str, params: tuple[int, ...]) -> int:
    """The raw ds_swizzle_b32 offset of a `swizzle.*` map."""
    lane_map(name, params)
    if name == "swizzle.quad_perm":
        return SWIZZLE_QUAD_MODE | sum(p << (2 * k) for k, p in enumerate(params))
    if name == "swizzle.bitmask":
        keep, force, flip = params
        return keep | force << 5 | flip << 10
    raise LaneMapError(f"{name} is not a ds_swizzle_b32 lane map")


__all__ = ["LANE_MAPS", "SWIZZLE_QUAD_MODE", "LaneMap", "LaneMapError", "dpp_control",
           "dpp_lane_map", "lane_map", "lane_table", "source_lane", "swizzle_lane_map",
           "swizzle_offset"]

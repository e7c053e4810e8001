"""Lowering rules that look across the lanes of a wave: reductions along a tile axis,
broadcasts back along it, and coordinate masks. Which lanes and register slots hold which
coordinates is read off the layouts by enumerating every (wave, lane, slot), so a rule applies
exactly when the data movement it needs is the one it emits: in-lane combining of slots, then
exchanges between lanes that differ in a fixed set of lane bits, each by the cheapest
instruction with its lane table (DPP with the combine fused, ds_swizzle_b32, ds_bpermute_b32).
"""

from __future__ import annotations

import functools
import itertools
import struct

import numpy as np

from argus.asm.lower.exprgen import UnsupportedError
from argus.asm.lower.isel import Selector, rule
from argus.asm.lower.program import Ref, Spread, VReg
from argus.ir import ops as O
from argus.ir.expr import Const, Var, max_, simplify, substitute
from argus.ir.types import LANES, ThreadLayout
from argus.isa_cdna3.lanemaps import (
    LANE_MAPS,
    dpp_control,
    lane_map,
    lane_table,
    source_lane,
    swizzle_offset,
)

COMBINE = {"max": "v_max_f32_e32", "sum": "v_add_f32_e32", "min": "v_min_f32_e32",
           "prod": "v_mul_f32_e32"}
#: combining shuffles fused into the DPP instruction: fn(moved element, own element)
DPP_COMBINE = {"max": "v_max_f32_dpp", "sum": "v_add_f32_dpp", "min": "v_min_f32_dpp",
               "prod": "v_mul_f32_dpp"}
#: every active lane written (an invalid read gives 0, replaced by the lane's own element after)
DPP_MASKS = "row_mask:0xf bank_mask:0xf bound_ctrl:1"


def _keys(layout: ThreadLayout, drop: int | None) -> np.ndarray:
    """Coordinates without axis `drop` of every (wave, lane, slot), as one integer each."""
    coords = [np.asarray(c, np.int64) for i, c in enumerate(layout.table()) if i != drop]
    key = np.zeros(coords[0].shape if coords else (layout.waves, LANES, layout.slots), np.int64)
    for c in coords:
        key = key * (1 << 20) + c
    return key


def _unsupported(op, what: str) -> UnsupportedError:
    return UnsupportedError(f"{op.mnemonic}: {what}; the backend combines register slots within "
                            "a lane and exchanges between lanes that differ in fixed lane bits",
                            op.loc, "lay the tile out so each wave holds whole rows along the "
                            "reduced axis (T.rows_layout, or the MFMA fragment layouts)")


def _slot_groups(op, key: np.ndarray) -> list[list[int]]:
    """Slots of equal key, the same partition in every lane."""
    first = key[0, 0]
    groups: dict[int, list[int]] = {}
    for s, k in enumerate(first):
        groups.setdefault(int(k), []).append(s)
    partition = list(groups.values())
    for slots in partition:
        if not (key[:, :, slots] == key[:, :, slots[:1]]).all():
            raise _unsupported(op, "its slots do not group the same way in every lane")
    return partition


def _lane_masks(op, key: np.ndarray, groups: list[list[int]], full: np.ndarray) -> list[int]:
    """Basis of the lane-XOR masks a butterfly exchanges along: masks pairing lanes that hold
    the same keys (per group), leaving out those pairing lanes that hold the very same
    elements (replicas, which a sum would count twice)."""
    lanes = np.arange(LANES)
    group_keys = np.stack([key[:, :, g[0]] for g in groups], axis=-1)      # (waves, 64, G)
    same = [m for m in range(1, LANES) if (group_keys[:, lanes ^ m] == group_keys).all()]
    held = [np.sort(full[:, :, g], axis=-1) for g in groups]
    replicas = [m for m in same if all((h[:, lanes ^ m] == h).all() for h in held)]
    basis: list[int] = []
    span = {0}
    for m in replicas:
        span |= {x ^ m for x in span}
    for m in same:
        if m not in span:
            basis.append(m)
            span |= {x ^ m for x in span}
    return basis


def _check_exactly_once(op, key: np.ndarray, full: np.ndarray, groups: list[list[int]],
                        basis: list[int]) -> None:
    """The butterfly over `basis` must combine, in every lane, each element its wave holds
    under that lane's key: once each for sum and product, at least once for max and min (the
    reference semantics reduce what each wave holds, so a tile every wave holds whole reduces
    in every wave)."""
    span = [0]
    for m in basis:
        span += [x ^ m for x in span]
    once = op.fn in ("sum", "prod")
    extent = op.x.type.shape[op.axis]
    for w in range(key.shape[0]):
        held: dict[int, set[int]] = {}
        for k, element in zip(key[w].reshape(-1).tolist(), full[w].reshape(-1).tolist()):
            held.setdefault(k, set()).add(element)
        for slots in groups:
            done: set[frozenset] = set()
            for lane in range(LANES):
                coset = frozenset(lane ^ b for b in span)
                if coset in done:
                    continue
                done.add(coset)
                collected = full[w][np.array(sorted(coset))][:, slots].reshape(-1).tolist()
                wanted = held[int(key[w, lane, slots[0]])]
                if len(wanted) != extent:
                    raise _unsupported(op, f"the reduced axis spans several waves: wave {w} "
                                           f"holds {len(wanted)} of the {extent} elements lane "
                                           f"{lane} reduces (a reduce op stays within its "
                                           "wave; T.reduce in argus.lang goes through LDS "
                                           "for such layouts)")
                if set(collected) != wanted:
                    raise _unsupported(op, f"in wave {w} the lanes holding lane {lane}'s "
                                           "reduction do not differ in fixed lane bits")
                if once and len(collected) != len(wanted):
                    raise _unsupported(op, f"in wave {w} lane {lane} an element is held twice "
                                           "where a butterfly would combine it twice")


def _plan(op, layout: ThreadLayout, axis: int):
    """(key table, slot groups without repeated elements, lane-XOR basis) of a reduction."""
    key, full = _keys(layout, axis), _keys(layout, None)
    groups = []
    for slots in _slot_groups(op, key):
        kept: list[int] = []
        for slot in slots:
            if not any((full[:, :, slot] == full[:, :, k]).all() for k in kept):
                kept.append(slot)
        groups.append(kept)
    basis = _cheapest_basis(_lane_masks(op, key, groups, full))
    _check_exactly_once(op, key, full, groups, basis)
    return key, groups, basis


#: how much a lane-XOR exchange costs by the instruction that makes it (`shuffle_form`): a DPP
#: one fuses the combine into one VALU instruction; a swizzle or permute goes through the LDS
#: unit, waits for it and combines after
_FORM_COST = {"dpp": 0, "swizzle": 1, "bpermute": 2}


def _cheapest_basis(basis: list[int]) -> list[int]:
    """`basis` with each mask m replaced by the cheapest m ^ e, e in the span of the masks
    before it: the lanes combined after each step are the same cosets (lane ^ 4 after lane ^ 1
    and ^ 2 combines the quads that lane ^ 7, DPP's row_half_mirror, does), so the butterfly
    reduces the same elements, each once, with fewer LDS-unit exchanges."""
    chosen: list[int] = []
    span = [0]
    for mask in basis:
        options = sorted({mask ^ e for e in span}, key=lambda m: (
            _FORM_COST[shuffle_form("bpermute.xor", (m,))[0].split(".")[0]], m != mask, m))
        chosen.append(options[0])
        span += [e ^ options[0] for e in span]
    return chosen


@rule(O.Reduce)
def _reduce(s: Selector, op: O.Reduce):
    x_layout, r_layout = op.x.type.layout, op.result.type.layout
    if op.x.type.dtype != "f32":
        raise _unsupported(op, f"reductions of {op.x.type.dtype} tiles are not lowered")
    key, groups, basis = _plan(op, x_layout, op.axis)
    x = s.tile(op.x)
    combine = COMBINE[op.fn]
    result_key = _keys(r_layout, None)
    out = s.new_tile(op.result)
    taken = []
    for r in range(out.size):
        match = [g for g, slots in enumerate(groups)
                 if (key[:, :, slots[0]] == result_key[:, :, r]).all()]
        if not match:
            raise _unsupported(op, f"result slot {r} is not held where it is reduced")
        taken.append(match[0])
    # each group is reduced in the first result register that takes it (no copy after), and
    # the first step reads x in place (no copy before)
    home = {g: out[taken.index(g)] if g in taken else VReg("v", 1, f"{op.fn}.part")
            for g in range(len(groups))}
    first = shuffle_form("bpermute.xor", (basis[0],)) if basis else None
    fused = first is not None and first[0].startswith("dpp.")
    for g, slots in enumerate(groups):
        acc = home[g]
        if len(slots) > 1:
            s.emit(combine, acc, x[slots[1]], x[slots[0]])
            for slot in slots[2:]:
                s.emit(combine, acc, x[slot], acc)
        elif fused:
            assert first is not None
            s.emit(DPP_COMBINE[op.fn], acc, x[slots[0]], x[slots[0]],
                   mods=f"{dpp_control(*first)} {DPP_MASKS}", note=f"lane ^ {basis[0]}")
        else:
            s.emit("v_mov_b32_e32", acc, x[slots[0]])
    partial = [home[g] for g in range(len(groups))]
    for i, mask in enumerate(basis):
        # lane ^ 1, 2, 3 are DPP quads, ^ 7, 8, 15 DPP rows, other masks below 32 swizzles
        form, params = shuffle_form("bpermute.xor", (mask,))
        note = f"lane ^ {mask}"
        if form.startswith("dpp."):
            mods = f"{dpp_control(form, params)} {DPP_MASKS}"
            for g, acc in enumerate(partial):
                if i > 0 or len(groups[g]) > 1 or not fused:
                    s.emit(DPP_COMBINE[op.fn], acc, acc, acc, mods=mods, note=note)
            continue
        address = None if form.startswith("swizzle.") else _bpermute_address(s, form, params)
        for acc in partial:
            other = VReg("v", 1, "swapped")
            if address is None:
                s.emit("ds_swizzle_b32", other, acc,
                       mods=f"offset:{swizzle_offset(form, params):#x}", note=note)
            else:
                s.emit("ds_bpermute_b32", other, address, acc, note=note)
            s.emit(combine, acc, other, acc)
    for r, g in enumerate(taken):
        if out[r] != home[g]:
            s.emit("v_mov_b32_e32", out[r], home[g])


def _bpermute_address(s: Selector, lanes: str, params: tuple[int, ...]) -> VReg:
    """The ds_bpermute_b32 address (source lane * 4) of a lane map from `isa_cdna3.lanemaps`;
    the instruction reads address bits 7:2, so an invalid lane's source (which may lie outside
    the wave) needs no wrapping."""
    source, _ = source_lane(lanes, params, Var("lane", 0, LANES), max_)
    return s.register(simplify(source * 4), "swap", cls="v")


@functools.cache
def _dpp_maps() -> dict[bytes, tuple[str, tuple[int, ...]]]:
    """Every gfx942 DPP lane map by its lane table (the first of equal tables in table order)."""
    found: dict[bytes, tuple[str, tuple[int, ...]]] = {}
    for name, entry in LANE_MAPS.items():
        if name.startswith("dpp.") and entry.gfx942:
            for params in itertools.product(*(range(lo, hi) for _, lo, hi in entry.params)):
                found.setdefault(lane_table(name, params).tobytes(), (name, params))
    return found


def _swizzle_map(table: np.ndarray) -> tuple[str, tuple[int, ...]] | None:
    """The ds_swizzle_b32 bitmask map with lane table `table`, if one has it: each bit of the
    source lane within its 32-lane half is that bit of the lane, its inverse or a constant."""
    lanes = np.arange(LANES)
    if (table < 0).any() or ((table >> 5) != (lanes >> 5)).any():
        return None
    within, source = lanes % 32, table % 32
    keep = force = flip = 0
    for bit in range(5):
        read, own = (source >> bit) & 1, (within >> bit) & 1
        if (read == own).all():
            keep |= 1 << bit
        elif (read != own).all():
            keep, flip = keep | 1 << bit, flip | 1 << bit
        elif (read == read[0]).all():
            force |= int(read[0]) << bit
        else:
            return None
    return "swizzle.bitmask", (keep, force, flip)


def shuffle_form(lanes: str, params: tuple[int, ...]) -> tuple[str, tuple[int, ...]]:
    """The cheapest instruction with the lane table of map `lanes`: a DPP map (a VALU
    instruction that also fuses the combine), else a ds_swizzle_b32 map (no address register),
    else the map itself (ds_bpermute_b32)."""
    table = lane_table(lanes, params)
    dpp = _dpp_maps().get(table.tobytes())
    if dpp is not None:
        return dpp
    if lanes.startswith("swizzle."):
        return lanes, tuple(params)
    return _swizzle_map(table) or (lanes, tuple(params))


@rule(O.Shuffle)
def _shuffle(s: Selector, op: O.Shuffle):
    """A lane map moves through DPP where a DPP control has its lane table (the combine fused),
    through ds_swizzle_b32 where a swizzle pattern has it, else through ds_bpermute_b32; a lane
    whose read is invalid keeps its own element."""
    found = lane_map(op.lanes, op.params)
    if not found.gfx942:
        raise UnsupportedError(f"{op.mnemonic} {op.lanes}: {found.instruction} does not exist "
                               "on gfx942", op.loc, "use a ds_bpermute_b32 map instead, e.g. "
                               "T.shuffle(x, 'bpermute.xor', 32) for the two halves")
    if op.x.type.dtype != "f32":
        raise _unsupported(op, f"shuffles of {op.x.type.dtype} tiles are not lowered")
    _, valid = source_lane(op.lanes, op.params, Var("lane", 0, LANES), max_)
    valid = simplify(valid)
    keep = None if isinstance(valid, Const) and valid.value else s.lane_mask(valid)
    form, params = shuffle_form(op.lanes, op.params)
    note = f"{op.lanes} {list(op.params)}"
    x, out = s.tile(op.x), s.new_tile(op.result)
    if form.startswith("dpp."):
        mods = f"{dpp_control(form, params)} {DPP_MASKS}"
        for slot in range(out.size):
            read = out[slot] if keep is None else VReg("v", 1, "shuffled")
            if op.combine:
                s.emit(DPP_COMBINE[op.combine], read, x[slot], x[slot], mods=mods, note=note)
            else:
                s.emit("v_mov_b32_dpp", read, x[slot], mods=mods, note=note)
            if keep is not None:
                s.emit("v_cndmask_b32_e64", out[slot], x[slot], read, keep)
        return
    address = None if form.startswith("swizzle.") else _bpermute_address(s, form, params)
    for slot in range(out.size):
        read = VReg("v", 1, "shuffled")
        if address is None:
            s.emit("ds_swizzle_b32", read, x[slot],
                   mods=f"offset:{swizzle_offset(form, params):#x}", note=note)
        else:
            s.emit("ds_bpermute_b32", read, address, x[slot], note=note)
        if op.combine:
            combined = VReg("v", 1, f"{op.combine}.step")
            s.emit(COMBINE[op.combine], combined, read, x[slot])
            read = combined
        if keep is None:
            s.emit("v_mov_b32_e32", out[slot], read)
        else:
            s.emit("v_cndmask_b32_e64", out[slot], x[slot], read, keep)


def predicated(s: Selector, op, lower) -> None:
    """A memory op only some threads take part in (`T.lanes`): the exec mask narrowed to them
    around the op's own rule, and restored after. Values the rule computes under the narrow
    mask are forgotten after it (inactive lanes never computed them)."""
    active = simplify(substitute(op.active, s.renamed)) if s.renamed else simplify(op.active)
    keep = s.lane_mask(active)
    saved = VReg("s", 2, "exec.saved", 2)
    s.emit("s_and_saveexec_b64", saved, keep, note=f"only where {active}")
    body: list = []
    with s.conditional(body):
        lower(s, op)
    s.out.extend(body)
    s.emit("s_mov_b64", "exec", saved, ndefs=0, note="every lane again")


@rule(O.Broadcast)
def _broadcast(s: Selector, op: O.Broadcast):
    x_key, r_key = _keys(op.x.type.layout, None), _keys(op.result.type.layout, op.axis)
    x = s.tile(op.x)
    if op.x.type.dtype != "f32":
        raise _unsupported(op, f"broadcasts of {op.x.type.dtype} tiles are not lowered")
    sources: list = []
    for r in range(op.result.type.vgprs):
        match = [sx for sx in range(x_key.shape[2]) if (x_key[:, :, sx] == r_key[:, :, r]).all()]
        sources.append(x[match[0]] if match else _slot_choice(op, x_key, r_key[:, :, r]))
    if s.only_read_by(op.result, O.Binary) and all(isinstance(r, Ref) for r in sources):
        # elementwise consumers read x's registers in place: no copies
        s.view(op.result, Spread(tuple(sources)))
        return
    out = s.new_tile(op.result)
    for r, source in enumerate(sources):
        if isinstance(source, Ref):
            s.emit("v_mov_b32_e32", out[r], source)
        else:
            _select_slots(s, out[r], x, *source)


def _slot_choice(op, x_key: np.ndarray, wanted: np.ndarray) -> tuple[list[int], list[int]]:
    """A result register whose element sits in a different slot of x from lane to lane (a
    reduced MFMA tile, replicated along the lanes of its channels, relaid one element a
    lane): (the lane bits the slot depends on, the slot per value of those bits), the same in
    every wave."""
    held = x_key == wanted[:, :, None]                      # (waves, lanes, x slots)
    if not held.any(axis=2).all():
        raise _unsupported(op, "a result slot needs a value another lane holds")
    choice = held.argmax(axis=2)
    if not (choice == choice[:1]).all():
        raise _unsupported(op, "a result slot takes its value from different slots in "
                               "different waves")
    lanes = np.arange(LANES)
    first = choice[0]
    bits = [b for b in range(6) if (first != first[lanes ^ (1 << b)]).any()]
    index = sum(((lanes >> b) & 1) << i for i, b in enumerate(bits))
    slots = []
    for value in range(1 << len(bits)):
        at = first[index == value]
        if not (at == at[0]).all() or not held[0, index == value, at[0]].all():
            raise _unsupported(op, "a result slot's source slot is not a function of its "
                                   "lane's bits")
        slots.append(int(at[0]))
    return bits, slots


def _select_slots(s: Selector, out, x, bits: list[int], slots: list[int]) -> None:
    """out = x[slot] with the slot chosen per lane by `bits` of the lane (`_slot_choice`):
    a tree of v_cndmask_b32 on one lane bit a level."""
    level: list = [x[slot] for slot in slots]
    lane = Var("lane", 0, LANES)
    for depth, bit in enumerate(bits):
        last = depth == len(bits) - 1
        mask = None
        merged = []
        for low, high in zip(level[::2], level[1::2], strict=True):
            if low == high and not last:
                merged.append(low)
                continue
            if mask is None:
                mask = s.lane_mask(((lane // (1 << bit)) % 2).eq(1))
            target = out if last else VReg("v", 1, "chosen")
            s.emit("v_cndmask_b32_e64", target, low, high, mask)
            merged.append(target)
        level = merged


@rule(O.Mask)
def _mask(s: Selector, op: O.Mask):
    layout = op.x.type.layout
    if op.x.type.dtype != "f32":
        raise _unsupported(op, f"masks of {op.x.type.dtype} tiles are not lowered")
    # the mask is the one scalar operand v_cndmask_b32_e64 may read (constant bus): fill in a VGPR
    fill = s.materialize(struct.unpack("<I", struct.pack("<f", op.fill))[0], "v")
    keep = simplify(substitute(op.keep, s.renamed)) if s.renamed else op.keep
    x, out = s.tile(op.x), s.new_tile(op.result)
    # slots whose coordinates meet the condition alike (an MFMA tile's output channel is the
    # lane's in every slot) share one lane mask: one compare, not one a slot
    masks: dict = {}
    for slot in range(layout.slots):
        coords = {f"c{a}": simplify(substitute(c, {"slot": slot}))
                  for a, c in enumerate(layout.coords)}
        condition = simplify(substitute(keep, coords))
        if isinstance(condition, Const):
            s.emit("v_mov_b32_e32", out[slot], x[slot] if condition.value else fill)
            continue
        if condition not in masks:
            masks[condition] = s.lane_mask(condition)
        s.emit("v_cndmask_b32_e64", out[slot], fill, x[slot], masks[condition])

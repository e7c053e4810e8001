"""Interpreter rules for register tiles: constants, elementwise math, casts, masks, MFMA,
reductions, broadcasts, lane shuffles, slot slices, and the tag-transfer rules the ops declare
(`argus.ir.transfer`), computed on (wave, lane, slot) arrays.
"""

from __future__ import annotations

import numpy as np

from argus.absint.interp.state import (
    TOP,
    InterpError,
    RegVal,
    first,
    layout_table,
    mfma_positions,
    to_dtype,
    truncated_bf16,
)
from argus.absint.rules import rule
from argus.ir import ops as O
from argus.ir.expr import Var, evaluate
from argus.ir.transfer import cover_names, cover_union
from argus.ir.types import LANES, RegType
from argus.isa_cdna3 import numerics


class Compute:
    """Register-tile rules of `_Workgroup` (a mixin: `self` is the workgroup)."""

    @rule(O.TagTile)
    def on_tag_tile(self, op: O.TagTile):
        x = self.values[op.x.name]
        self.values[op.result.name] = RegVal(x.data, self.result_tags(op))

    @rule(O.Full)
    def on_full(self, op: O.Full):
        t = op.result.type
        shape = (t.layout.waves, LANES, t.layout.slots)
        data = to_dtype(np.full(shape, op.value), t.dtype)
        self.values[op.result.name] = RegVal(data, self.result_tags(op))

    def result_tags(self, op) -> dict[str, np.ndarray]:
        transfer = RESULT_TAGS.get(op.transfer)
        if transfer is None:
            raise self.no_rule(op, f"tag rule '{op.transfer.value}'")
        return transfer(self, op)

    def fresh(self, op: O.Full) -> dict[str, np.ndarray]:
        return {}

    def retag(self, op: O.TagTile) -> dict[str, np.ndarray]:
        shape = self.values[op.x.name].data.shape
        coords = layout_table(op.result.type.layout)
        env = {**self.env, **{f"c{a}": c for a, c in enumerate(coords)}}
        return {name: np.broadcast_to(np.asarray(evaluate(e, env), np.int64), shape).copy()
                for name, e in op.tags}

    def keep(self, op) -> dict[str, np.ndarray]:
        return dict(self.values[op.operands[0].name].tags)

    def union(self, op: O.Binary) -> dict[str, np.ndarray]:
        return merge_tags(self.values[op.x.name].tags, self.values[op.y.name].tags)

    def shift(self, op: O.SlotSlice) -> dict[str, np.ndarray]:
        part = slice(op.start, op.start + op.result.type.layout.slots)
        return {n: t[:, :, part] for n, t in self.values[op.x.name].tags.items()}

    @rule(O.Mfma, O.MfmaBroadcast)
    def on_mfma(self, op: O.Mfma):
        info, (lane_k, slot_k), a_pos, b_pos, (lane_c, slot_c), c_pos = mfma_positions(op.instr)
        a, b, c = (self.values[v.name] for v in (op.a, op.b, op.c))
        waves = a.data.shape[0]

        def gather(value, pos, lanes, slots, shape):
            dense = np.zeros((waves,) + shape, value.dtype)
            dense[(slice(None),) + pos] = value[:, lanes, slots]
            return dense

        blocks = info.blocks
        a_shape, b_shape, c_shape = (blocks, info.m, info.k), (blocks, info.k, info.n), \
            (blocks, info.m, info.n)
        # with CBSZ/ABID every block reads A from the block a_block names
        reads = op.a_block(np.arange(blocks)) if isinstance(op, O.MfmaBroadcast) else \
            np.arange(blocks)
        a_mat = gather(a.data, a_pos, lane_k, slot_k, a_shape)[:, reads]
        b_mat = gather(b.data, b_pos, lane_k, slot_k, b_shape)
        c_mat = gather(c.data, c_pos, lane_c, slot_c, c_shape)
        d_mat = np.matmul(a_mat.astype(np.float32), b_mat.astype(np.float32)) + c_mat
        data = d_mat[:, c_pos[0], c_pos[1], c_pos[2]].astype(np.float32)

        def tag_mats(value, pos, lanes, slots, shape):
            return {n: gather(t, pos, lanes, slots, shape) for n, t in value.tags.items()}

        a_tags = {n: t[:, reads] for n, t in tag_mats(a, a_pos, lane_k, slot_k, a_shape).items()}
        b_tags = tag_mats(b, b_pos, lane_k, slot_k, b_shape)
        c_tags = tag_mats(c, c_pos, lane_c, slot_c, c_shape)
        if op.asserts:
            # broadcast every operand over (wave, block, i, j, k)
            roles = {"A": {n: t[:, :, :, None, :] for n, t in a_tags.items()},
                     "B": {n: t.transpose(0, 1, 3, 2)[:, :, None, :, :] for n, t in b_tags.items()},
                     "C": {n: t[:, :, :, :, None] for n, t in c_tags.items()}}
            self.check(op, roles, None, (waves, blocks, info.m, info.n, info.k))
        shared = set(a_tags) & set(b_tags)
        tags = {}
        for name, t in a_tags.items():
            if name not in shared:
                tags[name] = np.broadcast_to(t[:, :, :, :1], (waves,) + c_shape)
        for name, t in b_tags.items():
            if name not in shared:
                tags[name] = np.broadcast_to(t[:, :, :1, :], (waves,) + c_shape)
        if op.cover:
            tags.update(_contracted_cover(op.cover, a_tags, c_tags, (waves,) + c_shape))
        out_tags = {n: t[:, c_pos[0], c_pos[1], c_pos[2]] for n, t in tags.items()}
        self.values[op.result.name] = RegVal(data, out_tags)

    @rule(O.Unary)
    def on_unary(self, op: O.Unary):
        x = self.values[op.x.name]
        with np.errstate(all="ignore"):
            data = _UNARY[op.fn](x.data.astype(np.float32))
        self.check(op, {"X": x.tags}, op.x.type.layout, x.data.shape)
        self.values[op.result.name] = RegVal(data.astype(np.float32), self.result_tags(op))

    @rule(O.Binary)
    def on_binary(self, op: O.Binary):
        x, y = self.values[op.x.name], self.values[op.y.name]
        self.check(op, {"X": x.tags, "Y": y.tags}, op.x.type.layout, x.data.shape)
        with np.errstate(all="ignore"):
            data = _BINARY[op.fn](x.data, y.data).astype(np.float32)
        self.values[op.result.name] = RegVal(data, self.result_tags(op))

    @rule(O.Select)
    def on_select(self, op: O.Select):
        x, y, mask = (self.values[v.name] for v in (op.x, op.y, op.mask))
        self.check(op, {"X": x.tags, "Y": y.tags}, op.x.type.layout, x.data.shape)
        data = np.where(mask.data != 0, x.data, y.data).astype(np.float32)
        self.values[op.result.name] = RegVal(data, self.result_tags(op))

    @rule(O.Iota)
    def on_iota(self, op: O.Iota):
        t = op.result.type
        shape = (t.layout.waves, LANES, t.layout.slots)
        value = np.asarray(evaluate(op.start, self.env), np.int64)
        if op.axis >= 0:
            value = value + layout_table(t.layout)[op.axis]
        data = to_dtype(np.broadcast_to(value, shape).astype(np.float32), t.dtype)
        self.values[op.result.name] = RegVal(data, self.result_tags(op))

    @rule(O.Cast)
    def on_cast(self, op: O.Cast):
        x = self.values[op.x.name]
        data = (truncated_bf16(x.data) if op.rounding == "rtz"  # f32 -> bf16 (Cast.check)
                else to_dtype(x.data, op.result.type.dtype))
        self.values[op.result.name] = RegVal(data, self.result_tags(op))

    @rule(O.Mask)
    def on_mask(self, op: O.Mask):
        x = self.values[op.x.name]
        coords = layout_table(op.x.type.layout)
        env = {**self.env, **{f"c{a}": c for a, c in enumerate(coords)}}
        keep = np.broadcast_to(np.asarray(evaluate(op.keep, env), bool), x.data.shape)
        self.check(op, {"X": x.tags}, op.x.type.layout, x.data.shape, agree_with=keep)
        data = np.where(keep, x.data, np.float32(op.fill)).astype(np.float32)
        self.values[op.result.name] = RegVal(data, self.result_tags(op))

    def mark_trace(self, op: O.Mask) -> dict[str, np.ndarray]:
        """KEEP, and with a trace the tag `trace`: 1 where the mask kept the element (and an
        earlier mark with that name had 1), 0 where it filled it."""
        x = self.values[op.x.name]
        tags = dict(x.tags)
        if op.trace:
            coords = layout_table(op.x.type.layout)
            env = {**self.env, **{f"c{a}": c for a, c in enumerate(coords)}}
            keep = np.broadcast_to(np.asarray(evaluate(op.keep, env), bool), x.data.shape)
            earlier = tags.get(op.trace, np.ones(x.data.shape, np.int64))
            tags[op.trace] = np.where(keep, earlier, 0).astype(np.int64)
        return tags

    def dense(self, op, value: RegVal, t: RegType):
        """The wave-local view of a tile: (waves, *shape) arrays and which elements are held."""
        coords = layout_table(t.layout)
        waves = value.data.shape[0]
        wave_index = np.broadcast_to(np.arange(waves)[:, None, None], value.data.shape)
        key = (wave_index,) + tuple(coords)
        present = np.zeros((waves,) + t.shape, bool)
        present[key] = True
        data = np.zeros((waves,) + t.shape, np.float32)
        data[key] = value.data
        tags = {}
        for name, tag in value.tags.items():
            dense = np.full((waves,) + t.shape, TOP, np.int64)
            dense[key] = tag
            tags[name] = dense
        return data, tags, present

    @rule(O.Reduce)
    def on_reduce(self, op: O.Reduce):
        x = self.values[op.x.name]
        data, tags, present = self.dense(op, x, op.x.type)
        axis = op.axis + 1
        combine, identity = _REDUCE[op.fn]
        with np.errstate(all="ignore"):
            reduced = combine.reduce(np.where(present, data, identity), axis=axis)
        complete = present.all(axis=axis)
        out_tags = {}
        for name, tag in tags.items():
            if name in op.drop:
                continue
            big = np.iinfo(np.int64).max
            low = np.min(np.where(present, tag, big), axis=axis)
            high = np.max(np.where(present, tag, TOP), axis=axis)
            out_tags[name] = np.where((low == high) & (low != TOP), low, TOP)
        self.values[op.result.name] = self.gather(op, reduced, out_tags, complete,
                                                  op.result.type, None)

    @rule(O.Broadcast)
    def on_broadcast(self, op: O.Broadcast):
        x = self.values[op.x.name]
        data, tags, present = self.dense(op, x, op.x.type)
        self.values[op.result.name] = self.gather(op, data, tags, present, op.result.type,
                                                  op.axis)

    def gather(self, op, data, tags, present, t: RegType, drop_axis):
        """Read a wave-local dense tile out in layout `t` (without `drop_axis` of its coords)."""
        coords = list(layout_table(t.layout))
        if drop_axis is not None:
            del coords[drop_axis]
        waves = data.shape[0]
        wave_index = np.broadcast_to(np.arange(waves)[:, None, None],
                                     (waves, LANES, t.layout.slots))
        key = (wave_index,) + tuple(np.broadcast_to(c, wave_index.shape) for c in coords)
        held = present[key]
        if not held.all():
            w, lane, slot = first(~held)
            raise InterpError(
                f"{op.loc}: {op.mnemonic}: wave {w} lane {lane} slot {slot} needs element "
                f"{tuple(int(c[w, lane, slot]) for c in key[1:])}, which its own wave does not "
                f"hold in full; cross-lane exchange stays within a wave, so lay the tile out "
                f"so each wave holds whole rows")
        return RegVal(data[key].astype(np.float32), {n: tag[key] for n, tag in tags.items()})

    @rule(O.Shuffle)
    def on_shuffle(self, op: O.Shuffle):
        """Each lane reads the lane its lane map names (`isa_cdna3.lanemaps`), its own where
        the read is invalid; combining applies fn and records the covered range (as the
        verifier's `lanemap`)."""
        from argus.isa_cdna3.lanemaps import source_lane

        x = self.values[op.x.name]
        lanes = np.arange(LANES)
        source, valid = (np.broadcast_to(e, (LANES,))
                         for e in source_lane(op.lanes, op.params, lanes, np.maximum))
        valid = valid.astype(bool)
        source = np.where(valid, source, lanes).astype(np.int64)
        keep = valid[None, :, None]
        read = x.data[:, source, :]
        tags_read = {n: t[:, source, :] for n, t in x.tags.items()}
        if not op.combine:
            self.values[op.result.name] = RegVal(read.copy(), tags_read)
            return
        combine = _REDUCE[op.combine][0]
        data = np.where(keep, combine(x.data, read), x.data).astype(np.float32)
        covered = cover_names(op.cover) if op.cover else ()
        tags = {n: np.where(keep, np.where(t == tags_read[n], t, TOP), t)
                for n, t in x.tags.items() if n != op.cover and n not in covered}
        if op.cover:
            mine = covered_range(x.tags, op.cover, x.data.shape)
            theirs = tuple(t[:, source, :] for t in mine)
            known = np.logical_and.reduce([t != TOP for t in mine + theirs])
            env = {f"t{k}": np.where(known, t, 0) for k, t in enumerate(mine + theirs)}
            *union, exact = (np.broadcast_to(np.asarray(evaluate(e, env)), x.data.shape)
                             for e in _COVER_UNION)
            for name, value, old in zip(covered, union, mine):
                tags[name] = np.where(keep, np.where(known & exact.astype(bool), value, TOP), old)
        self.values[op.result.name] = RegVal(data, tags)

    @rule(O.SlotSlice)
    def on_slot_slice(self, op: O.SlotSlice):
        x = self.values[op.x.name]
        part = slice(op.start, op.start + op.result.type.layout.slots)
        self.values[op.result.name] = RegVal(x.data[:, :, part], self.result_tags(op))


MOVED_WITH_DATA = frozenset({O.Transfer.CONTRACT, O.Transfer.EXCHANGE, O.Transfer.LANEMAP})

#: The value-level reading of the other register-result transfer rules (`argus.ir.transfer`).
RESULT_TAGS = {
    O.Transfer.FRESH: Compute.fresh,
    O.Transfer.RETAG: Compute.retag,
    O.Transfer.KEEP: Compute.keep,
    O.Transfer.MARK: Compute.mark_trace,
    O.Transfer.SHIFT: Compute.shift,
    O.Transfer.UNION: Compute.union,
}


#: `cover_union` over the variables t0..t5 (first, last, step of the own element, then of the
#: element read), evaluated on arrays by `on_shuffle`.
_COVER_UNION = cover_union(*(Var(f"t{k}", -(2**62), 2**62) for k in range(6)))


def _contracted_cover(name: str, a_tags: dict, c_tags: dict, shape) -> dict:
    """An MFMA's `<name>first/last/step` on dense (wave, block, i, j) arrays (as the
    verifier's `contracted_cover`): C's recorded progression united with A's `name` values
    along the contraction, where those are a progression."""
    along = a_tags.get(name)
    if along is None:
        along = np.full(shape[:3] + (1,), TOP, np.int64)
    first, last = along[..., 0], along[..., -1]
    step = along[..., 1] - first if along.shape[-1] > 1 else np.ones_like(first)
    kk = np.arange(along.shape[-1])
    affine = (along != TOP).all(axis=-1) & (along == first[..., None] + kk * step[..., None]
                                            ).all(axis=-1)
    own = tuple(np.broadcast_to(np.where(affine, t, TOP)[..., None], shape)
                for t in (first, last, step))
    recorded = cover_names(name)
    if recorded[0] not in c_tags:
        return dict(zip(recorded, own))
    mine = tuple(c_tags[n] for n in recorded)
    known = np.logical_and.reduce([t != TOP for t in mine + own])
    env = {f"t{k}": np.where(known, t, 0) for k, t in enumerate(mine + own)}
    *union, exact = (np.broadcast_to(np.asarray(evaluate(e, env)), shape)
                     for e in _COVER_UNION)
    return {n: np.where(known & exact.astype(bool), v, TOP) for n, v in zip(recorded, union)}


def covered_range(tags: dict, name: str, shape) -> tuple[np.ndarray, ...]:
    """(first, last, step) arrays of what each element covers of tag `name` (as the
    verifier's `covered_range`)."""
    recorded = cover_names(name)
    if recorded[0] in tags:
        return tuple(tags[n] for n in recorded)
    if name in tags:
        tag = tags[name]
        return tag, tag, np.where(tag == TOP, TOP, 1)
    return tuple(np.full(shape, TOP, np.int64) for _ in recorded)


def merge_tags(x: dict, y: dict) -> dict:
    """Elementwise tag rule: the union of names; a name both carry keeps equal values, else ⊤."""
    tags = dict(x)
    for name, values in y.items():
        tags[name] = np.where(x[name] == values, values, TOP) if name in x else values
    return tags


# transcendentals as the hardware computes them (within an ulp), from the ISA tables
_UNARY = {"neg": np.negative, "abs": np.abs, "exp2": numerics.exp2, "log2": numerics.log2,
          "rcp": numerics.rcp, "sqrt": numerics.sqrt, "rsqrt": numerics.rsq,
          "floor": np.floor, "trunc": np.trunc}


def _mask(relation):
    return lambda x, y: relation(x, y).astype(np.float32)


_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
           "max": numerics.max_f32, "min": numerics.min_f32, "lt": _mask(np.less),
           "le": _mask(np.less_equal), "gt": _mask(np.greater), "ge": _mask(np.greater_equal),
           "eq": _mask(np.equal), "ne": _mask(np.not_equal)}
#: reductions and combining shuffles: (ufunc, identity); max/min are IEEE maxNum/minNum
_REDUCE = {"max": (numerics.max_f32, -np.inf), "min": (numerics.min_f32, np.inf),
           "sum": (np.add, 0.0), "prod": (np.multiply, 1.0)}

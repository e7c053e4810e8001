"""Interpreter rules for global memory: scalar and vector loads and stores, gathers and
`rows=` indices, bounds, atomic adds, and the race checks between workgroups (unordered) and
between the threads of one workgroup (`absint.global_order`), with stores held in flight under
the memory-ordering clock.
"""

from __future__ import annotations

import numpy as np

from argus.absint.interp.state import (
    MANY,
    TOP,
    GlobalInFlight,
    InterpError,
    RegVal,
    first,
    to_dtype,
)
from argus.absint.rules import rule
from argus.ir import access as A
from argus.ir import ops as O
from argus.ir.expr import Const, evaluate
from argus.ir.text import expr_text
from argus.ir.types import LANES


class Memory:
    """Global-memory rules of `_Workgroup` (a mixin: `self` is the workgroup)."""

    def global_index(self, op, tensor):
        """Every thread slot's tensor index by the op's formula (`ir.access`), the gathered
        axis reading the index tensor's data."""
        found, env, at = self.access(op, lds=False)
        active = self.active(op, at)
        if op.gather is not None:
            env[A.GATHERED_ROW.name] = self.gathered(op, found, env, at)
        if getattr(op, "rows", None) is not None:
            env[A.GATHERED_ROW.name] = self.register_rows(op, active)
        shape = self.run.arrays[tensor.name].shape
        index = [np.broadcast_to(np.asarray(evaluate(i, env), np.int64), at)
                 for i in found.index]
        inside = np.broadcast_to(np.asarray(evaluate(found.inside, env), bool), at)
        if not (inside | ~active).all() and not op.guard:
            self.report(op, "out-of-bounds",
                        f"out-of-bounds access outside {tensor} of shape {list(shape)}",
                        active & ~inside,
                        element=lambda w: {f"{tensor.name}[{a}]": int(index[a][w])
                                           for a in range(len(shape))})
        clipped = tuple(np.clip(i, 0, extent - 1) for i, extent in zip(index, shape))
        return index, clipped, inside & active

    def register_rows(self, op, active) -> np.ndarray:
        """Row ids a `rows=` access takes from its index registers, one per thread slot; each
        must be the entry of the source tensor that the index element's position tag names,
        which is what the verifier assumed."""
        rows = op.rows
        index = self.values[rows.index.name]
        values = np.rint(index.data).astype(np.int64)
        source = self.run.arrays[rows.source.name]
        position = index.tags.get(rows.at, np.full(values.shape, TOP, np.int64))
        named = (position != TOP) & (position >= 0) & (position < source.shape[0])
        expected = np.where(named, source[np.clip(position, 0, source.shape[0] - 1)], -1)
        wrong = active & (position != TOP) & (~named | (values != expected))
        if wrong.any():
            at = first(wrong)
            self.report(op, "indirect-row",
                        f"the row id taken from {rows.index} is not the entry of {rows.source} "
                        f"its tag '{rows.at}' names", wrong, position=at,
                        detail=f"{rows.index} holds {int(values[at])} where its tag says "
                               f"{rows.source.name}[{int(position[at])}]")
        return values

    def active(self, op, shape) -> np.ndarray:
        """Which thread slots take part in a memory op (`T.lanes`), over the (wave, lane,
        slot) grid of `shape`."""
        active = O.active_of(op)
        if isinstance(active, Const) and active.value:
            return np.ones(shape, bool)
        thread = {"wave": np.arange(shape[0])[:, None, None],
                  "lane": np.arange(shape[1])[None, :, None]}
        return np.broadcast_to(np.asarray(evaluate(active, {**self.env, **thread}), bool),
                               shape)

    def access(self, op, lds: bool | None = None):
        """The op's access formula (`ir.access`) in tile-coordinate variables, the environment
        evaluating it for every (wave, lane, slot), and that grid's shape: the formula and the
        layout's coordinate table are built once per op and run."""
        lds = isinstance(op, (O.LdsLoad, O.LdsStore)) if lds is None else lds
        cached = self.run.accesses.get((id(op), lds))
        if cached is None:
            formula = (A.lds_access if lds else A.global_access)(op, "tile")
            layout = A.tile_of(op).layout
            # the thread grid, from the layout: a scalar tile (a full reduction) has no
            # coordinate to take it from
            grid = (layout.waves, LANES, layout.slots)
            cached = formula, {f"t{a}": c for a, c in enumerate(layout.table())}, grid
            self.run.accesses[(id(op), lds)] = cached
        formula, coords, at = cached
        return formula, {**self.env, **coords}, at

    def gathered(self, op, found, env, at) -> np.ndarray:
        """Row ids read from the gather's index tensor, one per thread slot."""
        gather = op.gather
        ids = self.run.arrays[gather.index.name]
        where = np.broadcast_to(np.asarray(evaluate(found.gather_position, env), np.int64), at)
        valid = np.broadcast_to(np.asarray(evaluate(found.gather_inside, env), bool), at)
        if not valid.all():
            self.report(op, "out-of-bounds",
                        f"out-of-bounds gather: position outside {gather.index} of length "
                        f"{ids.shape[0]}",
                        ~valid, element=lambda w: {f"{gather.index.name}[0]": int(where[w])})
        return np.where(valid, ids[np.clip(where, 0, ids.shape[0] - 1)], -1).astype(np.int64)

    def tensor_tags(self, tensor, index, inside, guard=False) -> dict[str, np.ndarray]:
        """Tags by the tensor's formulas; unknown out of range unless the access is guarded
        (a guarded access is defined there: it reads 0 or writes nothing)."""
        tags = {}
        env = {**self.env, **{f"c{a}": i for a, i in enumerate(index)}}
        for name, e in self.run.tensor_tags.get(tensor.name, ()):
            value = np.broadcast_to(np.asarray(evaluate(e, env), np.int64), inside.shape)
            tags[name] = value if guard else np.where(inside, value, TOP)
        return tags

    @rule(O.ScalarLoad)
    def on_scalar_load(self, op: O.ScalarLoad):
        array = self.run.arrays[op.tensor.name]
        where, inside = A.scalar_access(op)
        index = tuple(self.scalar(e) for e in where)
        if not self.scalar(inside):
            raise InterpError(f"{op.loc}: scalar.load: index {index} is outside {op.tensor} of "
                              f"shape {list(array.shape)}")
        value = int(array[index])
        if not op.var.lo <= value < op.var.hi:
            raise InterpError(f"{op.loc}: scalar.load: {op.tensor}{list(index)} = {value} is "
                              f"outside the declared range [{op.var.lo}, {op.var.hi}) of "
                              f"{op.var.name}")
        if op.bounds:
            lo, hi = (self.scalar(b) for b in op.bounds)
            if not lo <= value < hi:
                raise InterpError(f"{op.loc}: scalar.load: {op.tensor}{list(index)} = {value} "
                                  f"is outside the declared range [{op.bounds[0]}, "
                                  f"{op.bounds[1]}) = [{lo}, {hi}) of {op.var.name}")
        self.env[op.var.name] = value

    @rule(O.Distinct)
    def on_distinct(self, op: O.Distinct):
        """Check the declared fact once per run: the index data is the same for every
        workgroup."""
        if not self.run.first_time(op):
            return
        ids = self.run.arrays[op.tensor.name].astype(np.int64)
        lo, hi = self.scalar(op.lo), self.scalar(op.hi)
        repeated = repeated_entries(ids, lo, hi)
        if repeated is None:
            return
        first, second = repeated
        value = int(ids[first])
        name = op.tensor.name
        again = (ids == value) & (ids >= lo) & (ids < hi)
        self.report(op, "distinct",
                    f"the entries of {op.tensor} in [{expr_text(op.lo)}, {expr_text(op.hi)}) "
                    "are declared distinct, but a value repeats", again, position=(0, 0, 0),
                    axes=("position",),
                    element={f"{name}[{first}]": value, f"{name}[{second}]": value},
                    detail=f"{name}[{first}] = {name}[{second}] = {value}, inside [{lo}, {hi}); "
                           "fix the index data or the declared range")

    @rule(O.GlobalLoad)
    def on_global_load(self, op: O.GlobalLoad):
        index, clipped, inside = self.global_index(op, op.tensor)
        data = self.global_data(op.tensor.name, clipped, inside)
        tags = self.tensor_tags(op.tensor, index, inside, op.guard)
        active = self.active(op, inside.shape)
        tags = {n: np.where(active, t, TOP) for n, t in tags.items()}
        self.values[op.result.name] = RegVal(data, tags)
        if op.tensor.name in self.run.stored:
            self.check_global_read(op, clipped, inside)
            self.global_order(op, clipped, inside, write=False)

    def global_data(self, name: str, clipped, inside) -> np.ndarray:
        """What each thread slot loads at `clipped`: memory, or the thread's own newest store
        still in flight there (a wave's vector memory operations are in order, so it sees its
        own stores at once)."""
        array = self.run.arrays[name]
        data = np.where(inside, array[clipped], 0).astype(np.float32)
        if not self.global_flying:
            return data
        flat = np.ravel_multi_index(clipped, array.shape)
        thread = np.broadcast_to(self.thread, inside.shape)
        found = np.zeros(inside.shape, bool)
        for write in reversed(self.global_flying):
            if write.tensor != name:
                continue
            where = np.full(array.size, -1)
            where[write.flat] = np.arange(write.flat.size)
            at = where[flat]
            hit = inside & ~found & (at >= 0)
            hit[hit] &= write.thread[at[hit]] == thread[hit]
            data[hit] = write.data[at[hit]]
            found |= hit
        return data

    def land_global(self):
        """A wait: this wave's global stores reach memory, in issue order (every wave waits
        alike, so all of them land)."""
        for write in self.global_flying:
            self.run.arrays[write.tensor].reshape(-1)[write.flat] = write.data
        self.global_flying = []

    def check_global_read(self, op, clipped, inside):
        """Reading what another (unordered) workgroup stores is a race either way round."""
        me = self.run.workgroup_index(self.pid)
        owner = self.run.owners.get(op.tensor.name)
        if owner is not None:
            writer = np.where(inside, owner[clipped], -1)
            clash = (writer >= 0) & (writer != me)
            if clash.any():
                position = first(clash)
                other = self.run.workgroup_of(int(writer[position]))
                self.report(op, "global-race",
                            f"read/write race on global memory: workgroup {self.pid} reads an "
                            f"element of {op.tensor} that workgroup {other} stores, and "
                            "workgroups are unordered", clash, position=position,
                            element={f"{op.tensor.name}[{a}]": int(c[position])
                                     for a, c in enumerate(clipped)})
        self.check_atomic_adders(op, clipped, inside, "reads")
        self.mark(self.run.readers, op.tensor.name, clipped, inside)

    def mark(self, table: dict, name: str, clipped, inside):
        """Record this workgroup in `table[name]` at the elements it touches (MANY where
        another workgroup already did)."""
        me = self.run.workgroup_index(self.pid)
        seen = table.setdefault(name, np.full(self.run.arrays[name].shape, -1, np.int64))
        where = tuple(c[inside] for c in clipped)
        previous = seen[where]
        seen[where] = np.where((previous == -1) | (previous == me), me, MANY)

    def check_atomic_adders(self, op, clipped, inside, verb: str):
        """An element another workgroup adds to atomically holds a partial sum whose value
        depends on the order of the workgroups: reading or storing it races with the add."""
        self.report_other_workgroup(
            op, self.run.adders.get(op.tensor.name), clipped, inside,
            lambda other: f"race with an atomic add on global memory: workgroup {self.pid} "
                          f"{verb} an element of {op.tensor} that {other} adds to atomically, "
                          "and workgroups are unordered")

    def report_other_workgroup(self, op, table, clipped, inside, message):
        """Report a global race at the first element of `op` that `table` (per element: the
        workgroup that touched it, MANY, or -1; None: nobody did) shows another workgroup
        touched; `message(other)` words it."""
        if table is None:
            return
        me = self.run.workgroup_index(self.pid)
        found = np.where(inside, table[clipped], -1)
        clash = (found != -1) & (found != me)
        if not clash.any():
            return
        position = first(clash)
        who = found[position]
        other = "several workgroups" if who == MANY else \
            f"workgroup {self.run.workgroup_of(int(who))}"
        self.report(op, "global-race", message(other), clash, position=position,
                    element={f"{op.tensor.name}[{a}]": int(c[position])
                             for a, c in enumerate(clipped)})

    @rule(O.GlobalStore, O.GlobalAtomicAdd)
    def on_global_store(self, op: O.GlobalStore):
        value = self.values[op.value.name]
        layout = op.value.type.layout
        index, clipped, inside = self.global_index(op, op.tensor)
        destination = self.tensor_tags(op.tensor, index, inside, op.guard)
        self.check(op, {"V": value.tags, "D": destination}, layout, value.data.shape,
                   where=self.active(op, value.data.shape))
        target = self.run.arrays[op.tensor.name]
        data = to_dtype(value.data, op.tensor.type.dtype)
        where = tuple(i[inside] for i in clipped)
        self.global_order(op, clipped, inside, write=True)
        # atomic adds commute with each other; they race with stores and loads of the element
        self.check_global_owner(op, clipped, inside, record=not isinstance(op, O.GlobalAtomicAdd))
        if isinstance(op, O.GlobalAtomicAdd):
            # adds land at once: they commute, and the ordering check reports a read that
            # a wait and barrier do not order after one
            self.mark(self.run.adders, op.tensor.name, clipped, inside)
            np.add.at(target, where, data[inside])
            target[...] = to_dtype(target, op.tensor.type.dtype)
        elif self.clock is not None:
            thread = np.broadcast_to(self.thread, inside.shape)
            self.global_flying.append(GlobalInFlight(
                op.tensor.name, np.ravel_multi_index(where, target.shape), thread[inside],
                data[inside]))
        else:
            target[where] = data[inside]

    @staticmethod
    def scatter_collisions(shape, safe, inside, thread):
        """Threads of one scatter meeting at one element (gathered rows that repeat): where,
        and per element the lowest thread storing it (so the one reported names another)."""
        flat = np.ravel_multi_index(safe, shape)
        lo = np.full(int(np.prod(shape)), np.iinfo(np.int64).max)
        hi = np.full(int(np.prod(shape)), -1)
        np.minimum.at(lo, flat[inside], thread[inside])
        np.maximum.at(hi, flat[inside], thread[inside])
        clash = inside & (lo[flat] != hi[flat]) & (thread != lo[flat])
        return clash, lo.reshape(shape)

    def global_order(self, op, clipped, inside, write: bool):
        """Inside this workgroup, an element one thread stores (or adds to) and another thread
        loads or stores in the same barrier epoch is a race (`absint.global_order`); with the
        clock, a store or add not yet landed by a wait and published by a barrier. Atomic adds
        commute, and threads of one op are not ordered against each other here."""
        name = op.tensor.name
        shape = self.run.arrays[name].shape
        if name not in self.own:
            self.own[name] = (np.full(shape, -1, np.int64), np.full(shape, -1, np.int64),
                              np.full(shape, -1, np.int64), np.zeros(shape, bool),
                              np.full(shape, -1, np.int64), np.full(shape, -1, np.int64),
                              np.full(shape, -1, np.int64))
        writer, write_epoch, write_op, added, reader, read_epoch, ticket = self.own[name]
        atomic = isinstance(op, O.GlobalAtomicAdd)
        thread = np.broadcast_to(self.thread, inside.shape)
        safe = tuple(np.where(inside, c, 0) for c in clipped)
        me = self.run.op_index(op)
        def unordered(at):
            if self.clock is None:
                return write_epoch[at] == self.epoch
            return (write_op[at] != -1) & (ticket[at] >= self.clock.published)
        clash = inside & unordered(safe) & (writer[safe] != thread) & \
            (write_op[safe] != me) & ~(added[safe] & atomic)
        who = writer
        if write and not clash.any():  # this write may overwrite what another thread reads
            clash = inside & (read_epoch[safe] == self.epoch) & (reader[safe] != -1) & \
                (reader[safe] != thread)
            who = reader
        gathered = op.gather is not None or getattr(op, "rows", None) is not None
        if write and not atomic and gathered and not clash.any():
            clash, who = self.scatter_collisions(shape, safe, inside, thread)
        if clash.any():
            position = first(clash)
            other = int(who[tuple(c[position] for c in safe)])
            when = "in the same barrier epoch" if self.clock is None else \
                "with no wait and barrier between"
            self.report(op, "global-order",
                        f"workgroup {self.pid}: another thread of the workgroup touches this "
                        f"element of {op.tensor} {when}, and one of the two writes it", clash,
                        position=position,
                        element={f"{name}[{a}]": int(c[position]) for a, c in enumerate(clipped)},
                        detail=f"also accessed by {self.thread_name(other)}")
        where = tuple(c[inside] for c in clipped)
        if write:
            # two threads' writes not ordered with each other: a later access by either
            # races with the other's, whichever landed last
            other = unordered(where) & (writer[where] != thread[inside]) & (writer[where] != -1)
            writer[where] = np.where(other, MANY, thread[inside])
            write_epoch[where] = self.epoch
            write_op[where], added[where] = me, atomic
            if self.clock is not None:
                ticket[where] = self.clock.waits
        else:
            previous = np.where(read_epoch[where] == self.epoch, reader[where], -1)
            reader[where] = np.where((previous == -1) | (previous == thread[inside]),
                                     thread[inside], MANY)
            read_epoch[where] = self.epoch

    def check_global_owner(self, op, clipped, inside, record=True):
        """Workgroups are unordered, so two of them storing one element is a race (an atomic
        add, `record` False, races with another workgroup's plain store or load)."""
        if record:
            self.check_atomic_adders(op, clipped, inside, "stores")
        owner = self.run.owners.setdefault(op.tensor.name, np.full(
            self.run.arrays[op.tensor.name].shape, -1, np.int64))
        me = self.run.workgroup_index(self.pid)
        previous = np.where(inside, owner[clipped], -1)
        clash = (previous >= 0) & (previous != me)
        if clash.any():
            position = first(clash)
            other = self.run.workgroup_of(int(previous[position]))
            self.report(op, "global-race",
                        f"write/write race on global memory: workgroups {other} and {self.pid} "
                        f"both store this element of {op.tensor}, and workgroups are unordered",
                        clash, position=position,
                        element={f"{op.tensor.name}[{a}]": int(c[position])
                                 for a, c in enumerate(clipped)})
        self.report_other_workgroup(
            op, self.run.readers.get(op.tensor.name), clipped, inside,
            lambda other: f"write/read race on global memory: workgroup {self.pid} stores an "
                          f"element of {op.tensor} that {other} reads, and workgroups are "
                          "unordered")
        if record:
            owner[tuple(c[inside] for c in clipped)] = me


def repeated_entries(ids: np.ndarray, lo: int, hi: int) -> tuple[int, int] | None:
    """The earliest position whose value, inside [lo, hi), appears again, and the next
    position holding that value; None when the entries inside [lo, hi) are distinct."""
    positions = np.flatnonzero((ids >= lo) & (ids < hi))
    order = np.argsort(ids[positions], kind="stable")
    ranked = positions[order]
    same = np.flatnonzero(ids[ranked[1:]] == ids[ranked[:-1]])
    if not same.size:
        return None
    pairs = sorted((int(ranked[k]), int(ranked[k + 1])) for k in same)
    return pairs[0]

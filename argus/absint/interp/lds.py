"""Interpreter rules for LDS: allocation, stores, atomic adds and loads, with the race
detector's shadow state per address (writer, reader, barrier epoch, group barriers) and, under
the memory-ordering clock, writes in flight that other threads do not see until they land.
"""

from __future__ import annotations

import numpy as np

from argus.absint.interp.state import (
    ABSENT,
    MANY,
    STORE,
    TOP,
    InFlight,
    LdsState,
    RegVal,
    first,
    to_dtype,
)
from argus.absint.rules import rule
from argus.ir import ops as O
from argus.ir.expr import evaluate
from argus.ir.types import LANES


class Lds:
    """LDS rules of `_Workgroup` (a mixin: `self` is the workgroup)."""

    @rule(O.LdsAlloc)
    def on_lds_alloc(self, op: O.LdsAlloc):
        self.values[op.result.name] = LdsState.fresh(op.result.type.size)

    def lds_addresses(self, op):
        """Every thread slot's LDS address by the op's formula, whether it is in bounds, and
        the view coordinates for reports (evaluated only when one is made)."""
        found, env, shape = self.access(op, lds=True)

        def each(e, dtype):
            return np.broadcast_to(np.asarray(evaluate(e, env), dtype), shape)

        def view(where):
            return {f"d{a}": int(each(v, np.int64)[where]) for a, v in enumerate(found.view)}
        address = each(found.address, np.int64)
        inside = each(found.inside, bool)
        active = self.active(op, shape)
        if not (inside | ~active).all():
            self.report(op, "out-of-bounds",
                        f"out-of-bounds LDS access outside the view {list(op.addr.shape)} / "
                        f"allocation of {op.buffer.type.size} elements", active & ~inside,
                        element=lambda w: {**view(w), "address": int(address[w])})
        return address, inside & active, view

    @rule(O.LdsStore, O.LdsAtomicAdd)
    def on_lds_store(self, op: O.LdsStore):
        lds: LdsState = self.values[op.buffer.name]
        value = self.values[op.value.name]
        layout = op.value.type.layout
        address, inside, full = self.lds_addresses(op)
        self.check(op, {"V": value.tags}, layout, value.data.shape,
                   where=self.active(op, value.data.shape))
        thread = np.broadcast_to(self.thread, address.shape)
        addr, who = address[inside], thread[inside]
        element = self.lds_element(full, address)
        # write/write by another thread in this epoch, or within this very op
        lo = np.full(lds.data.size, np.iinfo(np.int64).max)
        hi = np.full(lds.data.size, -1)
        np.minimum.at(lo, addr, who)
        np.maximum.at(hi, addr, who)
        atomic = isinstance(op, O.LdsAtomicAdd)
        same_op = np.zeros(address.shape, bool)
        same_op[inside] = (lo[addr] != hi[addr]) & (not atomic)
        earlier = np.zeros(address.shape, bool)
        earlier[inside] = self.unordered_write(lds, addr, who, write="store")
        if atomic:  # atomic adds commute: only a plain store in this epoch races with this one
            earlier[inside] &= ~self.run.lds_atomic[lds.write_op[addr]]
        if (clash := same_op | earlier).any():
            position = first(clash)
            other = self.other_thread(position, lds.writer, address, lo, hi)
            self.report(op, "lds-race",
                        "write/write race: two threads write one LDS address without a barrier "
                        "between", clash, element=element, position=position,
                        detail=f"the other writer is {other}")
        stale_read = np.zeros(address.shape, bool)
        stale_read[inside] = (lds.read_epoch[addr] == self.epoch) & (lds.reader[addr] != who) \
            & ~self.group_ordered(lds.read_groups[addr], lds.reader[addr], who)
        if stale_read.any():
            position = first(stale_read)
            reader = lds.reader[address[position]]
            by = "several threads" if reader == MANY else self.thread_name(reader)
            read_op = lds.read_op[address[position]]
            at = "" if read_op == MANY else self.run.op_loc(read_op)
            self.report(op, "lds-race",
                        "write-after-read race: this write may overwrite data another thread "
                        "has not read yet (no barrier since that read)", stale_read,
                        element=element, position=position,
                        detail=f"read by {by}" + (f" at {at}" if at else ""), other_loc=at)
        if atomic:
            self.add_to_lds(op, lds, value.data[inside], value.tags, addr, lo, hi)
            return
        if self.clock is not None:
            self.hold(lds, InFlight(False, self.clock.waits, op.buffer.name, addr, who,
                                     to_dtype(value.data[inside], op.buffer.type.dtype),
                                     {n: t[inside] for n, t in value.tags.items()},
                                     self.run.op_index(op), self.issue()))
            return
        lds.data[addr] = to_dtype(value.data[inside], op.buffer.type.dtype)
        # the write replaces the region's tags: names the value does not carry are absent
        for name in list(lds.tags) + [n for n in value.tags if n not in lds.tags]:
            if name not in lds.tags:  # unknown where nothing has been written yet
                lds.tags[name] = np.full(lds.data.size, TOP, np.int64)
            source = value.tags.get(name)
            lds.tags[name][addr] = ABSENT if source is None else source[inside]
        lds.written[addr] = True
        lds.write_epoch[addr] = self.epoch
        lds.write_groups[addr] = len(self.group_members)
        lds.writer[addr] = who
        lds.write_op[addr] = self.run.op_index(op)

    def issue(self) -> int:
        self.issued += 1
        return self.issued

    def newest_flying(self, lds: LdsState, addr) -> np.ndarray:
        """Per address: the newest write issued there is still in flight."""
        return (lds.pending_group[addr] != -1) & (lds.pending_seq[addr] > lds.seq[addr])

    def hold(self, lds: LdsState, write: InFlight):
        self.flying.append(write)
        for name in write.tags:  # unknown where nothing has landed yet
            lds.tags.setdefault(name, np.full(lds.data.size, TOP, np.int64))
        lds.pending_group[write.addr] = write.ticket if write.copy else STORE
        lds.pending_thread[write.addr] = write.thread
        lds.pending_seq[write.addr] = write.seq

    def in_flight_at(self, buffer: str, address: int) -> str:
        """Where the newest write in flight to `address` of `buffer` was issued."""
        found = [w for w in self.flying if w.buffer == buffer and (w.addr == address).any()]
        return self.run.op_loc(found[-1].op) if found else "?"

    def unordered_write(self, lds: LdsState, addr, who, write: str | None = None
                        ) -> np.ndarray:
        """Per address: a write there by another thread is not ordered before an access by
        `who` now — the last one, in the same barrier epoch; with the clock (`absint.sync`)
        a read sees the last write landed or its own newest in flight (an earlier write is
        overwritten), while a later `write` ("store" or "copy") is ordered against every
        write not yet waited for and published by a barrier, in flight or landed; an async
        copy in flight lands after a later store even of its own thread."""
        other = lds.writer[addr] != who
        if self.clock is None:
            ordered = self.group_ordered(lds.write_groups[addr], lds.writer[addr], who)
            return (lds.write_epoch[addr] == self.epoch) & other & ~ordered
        c = self.clock
        unpublished = np.where(lds.copied[addr], lds.ticket[addr] >= c.retired_published,
                               lds.ticket[addr] >= c.published)
        last = lds.written[addr] & other & unpublished
        if write is None:
            # the newest write issued there, unless the reader's own in flight (its store it
            # sees, its copy is async-pending)
            flying = self.newest_flying(lds, addr)
            return (last & ~flying) | (flying & (lds.pending_thread[addr] != who))
        name = next(n for n, v in self.values.items() if v is lds)
        clash = last
        earlier = [(w, False) for w in self.unpublished] + [(w, True) for w in self.flying]
        for landed_or_flying, flying in earlier:
            if landed_or_flying.buffer != name:
                continue
            by = np.full(lds.data.size, -1)
            by[landed_or_flying.addr] = landed_or_flying.thread
            hit = by[addr] != -1
            clash = clash | (hit & (by[addr] != who))
            if flying and landed_or_flying.copy and write == "store":
                clash = clash | hit
        return clash

    def group_ordered(self, passed, then, now) -> np.ndarray:
        """Per access: a group barrier (`T.group_barrier`) the workgroup passed after an
        earlier access by thread `then` (when `passed` had been passed) has the waves of both
        `then` and thread `now` in its group; several threads (MANY) are not ordered."""
        ordered = np.zeros(np.broadcast(passed, then, now).shape, bool)
        known = then >= 0
        then_wave, now_wave = np.where(known, then, 0) // LANES, now // LANES
        for k, members in enumerate(self.group_members):
            ordered |= known & (passed <= k) & members[then_wave] & members[now_wave]
        return ordered

    def forwarded(self, buffer: str, safe, mask, names) -> tuple[np.ndarray, np.ndarray, dict]:
        """Data and tags of the reader's own plain stores in flight where `mask` holds (the
        newest first), and per element whether one was found."""
        size = self.values[buffer].data.size
        found = np.zeros(safe.shape, bool)
        data = np.zeros(safe.shape, np.float32)
        tags = {n: np.full(safe.shape, ABSENT, np.int64) for n in names}
        for write in reversed(self.flying):
            if write.buffer != buffer or write.copy:
                continue
            where = np.full(size, -1)
            where[write.addr] = np.arange(write.addr.size)
            index = where[safe]
            hit = mask & ~found & (index >= 0)
            data[hit] = write.data[index[hit]]
            for name in names:
                if name in write.tags:
                    tags[name][hit] = write.tags[name][index[hit]]
            found |= hit
        return found, data, tags

    def add_to_lds(self, op, lds: LdsState, data: np.ndarray, value_names, addr, lo, hi):
        """ds_add: the addresses hold the old value plus every contribution; the sum's tags are
        ⊤ (as in the verifier); `written` is left alone, since the old value is part of the
        sum. An address several threads add to in this epoch records the writer MANY."""
        np.add.at(lds.data, addr, data)
        touched = np.unique(addr)
        lds.data[touched] = to_dtype(lds.data[touched], op.buffer.type.dtype)
        for name in value_names:
            lds.tags.setdefault(name, np.full(lds.data.size, TOP, np.int64))
        for tag in lds.tags.values():
            tag[touched] = TOP
        several = (lo[touched] != hi[touched]) | (
            (lds.write_epoch[touched] == self.epoch) & (lds.writer[touched] != lo[touched]))
        lds.writer[touched] = np.where(several, MANY, lo[touched])
        lds.write_epoch[touched] = self.epoch
        lds.write_op[touched] = self.run.op_index(op)
        if self.clock is not None:  # adds land at once (a wave's own LDS ops are in order)
            lds.ticket[touched], lds.copied[touched] = self.clock.waits, False
            lds.seq[touched] = self.issue()

    @rule(O.LdsLoad)
    def on_lds_load(self, op: O.LdsLoad):
        lds: LdsState = self.values[op.buffer.name]
        address, inside, full = self.lds_addresses(op)
        safe = np.where(inside, address, 0)
        thread = np.broadcast_to(self.thread, address.shape)
        element = self.lds_element(full, address)
        # with the clock, the reader's own async copy in flight: it reads the old data; its
        # own plain stores in flight it reads at once
        own = np.zeros(address.shape, bool)
        mine = np.zeros(address.shape, bool)
        if self.clock is not None:
            by_me = inside & self.newest_flying(lds, safe) & (lds.pending_thread[safe] == thread)
            own = by_me & (lds.pending_group[safe] >= 0)
            mine = by_me & (lds.pending_group[safe] == STORE)
        if own.any():
            position = first(own)
            self.report(op, "async-pending",
                        "reads LDS that this thread's own async copy has not landed in: no "
                        "wait_group has retired the copy's group", own, element=element,
                        position=position,
                        detail=f"copied at {self.in_flight_at(op.buffer.name, safe[position])}")
        never = inside & ~lds.written[safe] & ~own & ~mine
        if self.clock is not None:
            never &= ~self.newest_flying(lds, safe)
        if never.any():
            self.report(op, "lds-uninitialised",
                        "uninitialised LDS read: no thread has written this address", never,
                        element=element)
        racy = inside & self.unordered_write(lds, safe, thread) & ~own
        if racy.any():
            position = first(racy)
            a = safe[position]
            flying = bool(self.newest_flying(lds, np.asarray([a]))[0])
            writer = self.thread_name(lds.pending_thread[a] if flying else lds.writer[a])
            where = self.in_flight_at(op.buffer.name, a) if flying else \
                self.run.op_loc(lds.write_op[a])
            what = "an async copy" if lds.pending_group[a] >= 0 else "a store"
            self.report(op, "lds-race",
                        "read-after-write race: another thread wrote this LDS address with no "
                        "barrier in between" + (f" ({what} still in flight)" if flying else ""),
                        racy, element=element, position=position,
                        detail=f"written by {writer} at {where}", other_loc=where)
        racy |= own
        unknown = ~inside | never | racy
        data = np.where(inside, lds.data[safe], 0).astype(np.float32)
        seen = {name: tag[safe] for name, tag in lds.tags.items()}
        if mine.any():
            _, mine_data, mine_tags = self.forwarded(op.buffer.name, safe, mine, list(seen))
            data = np.where(mine, mine_data, data)
            seen = {name: np.where(mine, mine_tags[name], tag) for name, tag in seen.items()}
        # a name absent from every element read (overwritten with other names) is not
        # carried; where it is absent only in part, it is unknown there
        tags = {name: np.where(unknown | (tag == ABSENT), TOP, tag)
                for name, tag in seen.items()
                if not inside.any() or (tag != ABSENT)[inside].any()}
        self.values[op.result.name] = RegVal(data, tags)
        addr, who = address[inside], thread[inside]
        lo = np.full(lds.data.size, np.iinfo(np.int64).max)
        hi = np.full(lds.data.size, -1)
        np.minimum.at(lo, addr, who)
        np.maximum.at(hi, addr, who)
        touched = np.unique(addr)
        single = lo[touched] == hi[touched]
        same_epoch = lds.read_epoch[touched] == self.epoch
        previous = same_epoch & (lds.reader[touched] != lo[touched])
        lds.reader[touched] = np.where(single & ~previous, lo[touched], MANY)
        me = self.run.op_index(op)
        other_op = same_epoch & (lds.read_op[touched] != me)
        lds.read_op[touched] = np.where(other_op, MANY, me)
        lds.read_epoch[touched] = self.epoch
        lds.read_groups[touched] = len(self.group_members)

    def lds_element(self, view, address):
        return lambda w: {**view(w),
                          "address": int(address[w])}

    def thread_name(self, thread: int) -> str:
        if thread == MANY:
            return "several threads"
        return f"wave {int(thread) // LANES} lane {int(thread) % LANES}"

    def other_thread(self, position, writer, address, lo, hi) -> str:
        me = int(self.thread[position[0], position[1], 0])
        a = int(address[position])
        for candidate in (int(lo[a]), int(hi[a]), int(writer[a])):
            if candidate >= 0 and candidate != me and candidate != np.iinfo(np.int64).max:
                return self.thread_name(candidate)
        return "another thread"


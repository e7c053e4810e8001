"""Interpreter rules for synchronisation: barriers (epochs), group barriers, async copies and
their commit/wait groups, and waits, which land the writes in flight (`absint.sync` has the
clock's meaning).
"""

from __future__ import annotations

import attrs
import numpy as np

from argus.absint.interp.state import (
    ABSENT,
    STORE,
    TOP,
    Clock,
    InFlight,
    InterpError,
    LdsState,
    landing,
    to_dtype,
)
from argus.absint.rules import rule
from argus.ir import ops as O
from argus.ir.expr import evaluate


class Sync:
    """Synchronisation rules of `_Workgroup` (a mixin: `self` is the workgroup)."""

    @rule(O.GroupBarrier)
    def on_group_barrier(self, op: O.GroupBarrier):
        if self.clock is not None:
            raise InterpError(f"{op.loc}: barrier.group in a kernel with waits and async "
                              "copies is not modelled; use T.barrier()")
        waves = np.arange(self.waves)
        self.group_members.append(np.broadcast_to(
            np.asarray(evaluate(op.active, {**self.env, "wave": waves}), bool), waves.shape))

    @rule(O.AsyncCopy)
    def on_async_copy(self, op: O.AsyncCopy):
        """Read the source now, check the destination like a store, and hold the copy in
        flight until a wait retires its group (`land`)."""
        lds: LdsState = self.values[op.buffer.name]
        index, clipped, inside_g = self.global_index(op, op.tensor)
        data = self.global_data(op.tensor.name, clipped, inside_g)
        tags = self.tensor_tags(op.tensor, index, inside_g)
        if op.tensor.name in self.run.stored:
            self.check_global_read(op, clipped, inside_g)
            self.global_order(op, clipped, inside_g, write=False)
        address, inside, full = self.lds_addresses(op)
        thread = np.broadcast_to(self.thread, address.shape)
        addr, who = address[inside], thread[inside]
        clash = np.zeros(address.shape, bool)
        clash[inside] = self.unordered_write(lds, addr, who, write="copy")
        stale = np.zeros(address.shape, bool)
        stale[inside] = (lds.read_epoch[addr] == self.epoch) & (lds.reader[addr] != who)
        for mask, what in ((clash, "write/write race: this async copy and another write to "
                                   "one LDS address are not ordered (no wait and barrier "
                                   "between)"),
                           (stale, "write-after-read race: this async copy may land before "
                                   "another thread has read the old data (no barrier since "
                                   "that read)")):
            if mask.any():
                self.report(op, "lds-race", what, mask, element=self.lds_element(full, address))
        self.hold(lds, InFlight(True, self.clock.groups, op.buffer.name, addr, who,
                                 to_dtype(data[inside], op.buffer.type.dtype),
                                 {n: t[inside] for n, t in tags.items()}, self.run.op_index(op),
                                 self.issue()))

    @rule(O.CommitGroup)
    def on_commit_group(self, op: O.CommitGroup):
        self.clock = attrs.evolve(self.clock, groups=self.clock.groups + 1)

    @rule(O.WaitGroup)
    def on_wait_group(self, op: O.WaitGroup):
        # a group landed earlier stays landed (the verifier's count may undercount here)
        retired = max(self.clock.retired, self.clock.groups - op.pending)
        self.clock = attrs.evolve(self.clock, retired=retired)
        self.land(stores=False)

    @rule(O.Wait)
    def on_wait(self, op: O.Wait):
        c = self.clock
        self.clock = attrs.evolve(c, waits=c.waits + 1, retired=max(c.retired, c.groups))
        self.land(stores=True)
        self.land_global()

    def land(self, stores: bool):
        """The writes a wait lands (plain stores with `stores`, copies of retired groups)
        reach LDS now, in issue order; the rest stay in flight."""
        flying = []
        for write in self.flying:
            if (write.ticket >= self.clock.retired) if write.copy else not stores:
                flying.append(write)
                continue
            lds: LdsState = self.values[write.buffer]
            # where a newer write already landed (a write/write race reported at it) it stays
            keep = lds.seq[write.addr] < write.seq
            addr, write = write.addr[keep], landing(write, keep)
            lds.data[addr] = write.data
            # the write replaces the region's tags: names it does not carry are absent
            for name in list(lds.tags) + [n for n in write.tags if n not in lds.tags]:
                if name not in lds.tags:
                    lds.tags[name] = np.full(lds.data.size, TOP, np.int64)
                source = write.tags.get(name)
                lds.tags[name][addr] = ABSENT if source is None else source
            lds.written[addr], lds.write_epoch[addr] = True, self.epoch
            lds.writer[addr], lds.write_op[addr] = write.thread, write.op
            lds.ticket[addr], lds.copied[addr] = write.ticket, write.copy
            lds.seq[addr] = write.seq
            self.unpublished.append(write)
        self.flying = flying
        for lds in self.values.values():
            if isinstance(lds, LdsState):
                lds.pending_group[:] = -1
                lds.pending_thread[:] = -1
                lds.pending_seq[:] = -1
        for write in flying:
            lds = self.values[write.buffer]
            lds.pending_group[write.addr] = write.ticket if write.copy else STORE
            lds.pending_thread[write.addr] = write.thread
            lds.pending_seq[write.addr] = write.seq

    @rule(O.Barrier)
    def on_barrier(self, op: O.Barrier):
        self.epoch += 1
        if self.clock is not None:
            self.land(stores=True)
            self.land_global()
            c = self.clock
            self.publish(Clock(c.waits + 1, c.waits + 1, c.groups, c.retired, c.retired))

    @rule(O.BarrierNoWait)
    def on_barrier_no_wait(self, op: O.BarrierNoWait):
        self.epoch += 1
        c = self.clock
        self.publish(Clock(c.waits, c.waits, c.groups, c.retired, c.retired))

    def publish(self, clock: Clock):
        """A barrier: landed writes below the published counts are seen by every wave."""
        self.clock = clock
        self.unpublished = [w for w in self.unpublished if w.ticket >= (
            clock.retired_published if w.copy else clock.published)]


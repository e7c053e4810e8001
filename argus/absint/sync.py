"""The memory-ordering clock of a wave: how many waits, barriers and copy groups it has passed,
as formulas in the loop variables, so the LDS model can tell a store (or async copy) that has
landed and been published by a barrier from one still in flight.

A plain LDS store is visible to its own wave at once, to the others once a wait that follows it
(`T.wait`, or the one in `T.barrier`) is followed by a barrier. An async copy lands for its own
wave when a `wait_group`/`wait` retires its group, for the others at the next barrier after
that. Kernels without the fine-grained ops keep the classic rule (one barrier epoch), so this
clock is off for them (`uses_clock`).
"""

from __future__ import annotations

import attrs

from argus.absint.report import VerifyError
from argus.ir import ops as O
from argus.ir.expr import Const, Expr, Var, free_vars, ite, max_, simplify
from argus.ir.expr import substitute as subst

#: Ops whose presence switches the clock on: a kernel written with `T.barrier()` alone keeps
#: the one-epoch model (every barrier waits for the stores before it).
FINE_OPS = (O.AsyncCopy, O.CommitGroup, O.WaitGroup, O.Wait, O.BarrierNoWait)
SYNC_OPS = FINE_OPS[1:] + (O.Barrier,)

#: Depth to which a loop's "value at the previous iteration" is unfolded before it is named
#: as an unknown (a loop whose body resets a count only on some paths).
UNFOLD = 3


@attrs.frozen
class Clock:
    """Counts since the kernel began, for the whole workgroup (every wave runs the same waits
    and barriers): `waits` that landed LDS stores, and `published` = `waits` at the latest
    barrier (stores with a ticket below it are seen by every wave); copy `groups` committed,
    `retired` (groups below it have landed for their own wave) and `retired_published` =
    `retired` at the latest barrier."""

    waits: Expr = Const(0)
    published: Expr = Const(0)
    groups: Expr = Const(0)
    retired: Expr = Const(0)
    retired_published: Expr = Const(0)

    def substitute(self, mapping: dict) -> Clock:
        return Clock(*(simplify(subst(getattr(self, f), mapping)) for f in FIELDS))


FIELDS = ("waits", "published", "groups", "retired", "retired_published")
#: The counts that only grow, by a fixed amount per loop iteration.
COUNTS = ("waits", "groups")
#: The counts each reset to the value of another at an op (the latest such op decides).
LATEST = ("published", "retired", "retired_published")


def uses_clock(kernel: O.Kernel) -> bool:
    return any(isinstance(op, FINE_OPS) for op in kernel.ops())


def step(op: O.Op, clock: Clock) -> Clock:
    """The clock after a straight-line sync op (others leave it alone)."""
    if isinstance(op, O.Barrier):
        waits = simplify(clock.waits + 1)
        return attrs.evolve(clock, waits=waits, published=waits,
                            retired_published=clock.retired)
    if isinstance(op, O.BarrierNoWait):
        return attrs.evolve(clock, published=clock.waits, retired_published=clock.retired)
    if isinstance(op, O.Wait):
        return attrs.evolve(clock, waits=simplify(clock.waits + 1), retired=clock.groups)
    if isinstance(op, O.WaitGroup):
        # all but the newest `pending` groups have landed, and a group an earlier wait retired
        # stays landed. The max is taken where the counts decide it; inside a loop it would
        # tie each iteration to the one before, so there the newer count stands: a wait that
        # retires fewer than an earlier one then undercounts, which can only report a race the
        # replay fails to confirm (Unknown), never hide one
        newer = simplify(clock.groups - op.pending)
        gap = simplify(newer - clock.retired)
        if isinstance(gap, Const) and gap.value < 0:
            newer = clock.retired
        return attrs.evolve(clock, retired=newer)
    if isinstance(op, O.CommitGroup):
        return attrs.evolve(clock, groups=simplify(clock.groups + 1))
    return clock


def through(block: O.Block, clock: Clock) -> Clock:
    """The clock after running `block` from `clock` (loops summarised, branches refused)."""
    for op in block.ops:
        if isinstance(op, O.For):
            clock = after_loop(op, clock)
        elif isinstance(op, O.If):
            for inner in op.blocks:
                sync = next((x for x in O.walk(inner) if isinstance(x, SYNC_OPS)), None)
                if sync is not None:
                    raise VerifyError(f"{sync.loc}: {sync.mnemonic} inside a branch: every "
                                      "wave must pass the same waits, commits and barriers; "
                                      "move it out of the `when` block")
        else:
            clock = step(op, clock)
    return clock


def _trips(op: O.For) -> Expr:
    return max_(0, (op.stop - op.start + op.step - 1) // op.step)


def _increments(op: O.For) -> Clock:
    """What one iteration adds to the growing counts."""
    return through(op.body, Clock())


def body_start(op: O.For, entry: Clock, iv: Expr, depth: int = 0) -> Clock:
    """The clock where iteration `iv` of loop `op` begins, the loop entered at `entry`."""
    per = _increments(op)

    def counts(at):
        k = (at - op.start) // op.step
        return {f: simplify(getattr(entry, f) + k * getattr(per, f)) for f in COUNTS}
    start = counts(iv)
    # the body run at a symbolic iteration, its start's latest values left as placeholders,
    # then moved to the iteration before `iv`
    placeholders = {f: Var(f"{f}__at_{op.iv.name}", -(2**31), 2**31) for f in LATEST}
    previous = through(op.body, Clock(**counts(op.iv), **placeholders)
                       ).substitute({op.iv.name: iv - op.step})
    first = simplify(iv <= op.start)
    unknown = {v.name for v in placeholders.values()}
    for f in LATEST:
        value = getattr(previous, f)
        if value == placeholders[f]:
            start[f] = getattr(entry, f)  # nothing in the body resets it
            continue
        if {v.name for v in free_vars(value)} & unknown:
            # the body resets it only on some paths: unfold the previous iteration's start
            if depth >= UNFOLD:
                value = Var(f"{f}__unknown_{op.iv.name}", -(2**31), 2**31)
            else:
                before = body_start(op, entry, iv - op.step, depth + 1)
                value = subst(value, {placeholders[g].name: getattr(before, g) for g in LATEST})
        value = simplify(value)
        # the previous iteration's formula often gives the entry value at the first
        # iteration too (a wait in the prologue like the one in the body): no case split
        if simplify(subst(value, {op.iv.name: op.start})) == getattr(entry, f) and iv is op.iv:
            start[f] = value
        else:
            start[f] = simplify(ite(first, getattr(entry, f), value))
    return Clock(**start)


def after_loop(op: O.For, entry: Clock) -> Clock:
    """The clock after loop `op`, entered at `entry`."""
    trips = _trips(op)
    last = simplify(op.start + (trips - 1) * op.step)
    end = through(op.body, body_start(op, entry, last)).substitute({op.iv.name: last})
    ran = simplify(trips > 0)
    per = _increments(op)
    out = {f: simplify(getattr(entry, f) + trips * getattr(per, f)) for f in COUNTS}
    out |= {f: simplify(ite(ran, getattr(end, f), getattr(entry, f))) for f in LATEST}
    return Clock(**out)

"""`s_waitcnt` insertion from the counters' rules (isa_cdna3.opcodes.counter): vector memory
completes in order on vmcnt, LDS in order on lgkmcnt, scalar memory out of order on lgkmcnt.

Each instruction that reads or overwrites a register a pending load writes waits for exactly
that load: the count is the number of same-counter operations issued after it (the weakest
wait that makes the use safe). `s_barrier` waits for this wave's LDS writes and global stores
and atomics, so other waves see them after the barrier (`T.barrier()`; the verifier proves a
bare barrier only after a `T.wait`, so waiting here too is at least as strong). Loops are
solved to a fixpoint over the back edge; the pending lists of two paths merge newest-first.
"""

from __future__ import annotations

import re

import attrs

from argus.asm.lower.program import IfElse, Loop, MInst, Skip
from argus.isa_cdna3 import isa, opcodes
from argus.isa_cdna3.opcodes import LGKMCNT, VMCNT

LIMIT = {VMCNT: isa.VMCNT_MAX, LGKMCNT: isa.LGKMCNT_MAX}


@attrs.frozen
class Pending:
    """One outstanding memory operation: the registers it will write and what it is."""

    regs: frozenset
    #: a write other waves may read after a barrier (`opcodes.BARRIER_RELEASES`)
    shared_write: bool = False
    scalar: bool = False
    closes_group: bool = False  # the newest LDS DMA of a commit group


@attrs.frozen
class State:
    vm: tuple[Pending, ...] = ()
    lgkm: tuple[Pending, ...] = ()

    def merge(self, other: State) -> State:
        return State(_merge(self.vm, other.vm), _merge(self.lgkm, other.lgkm))


def _merge(a: tuple, b: tuple) -> tuple:
    n = max(len(a), len(b))
    a, b = (None,) * (n - len(a)) + a, (None,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x is None or y is None:
            out.append(x or y)
        else:
            # a closing mark from either path: the k-th newest mark can only move newer, so
            # a wait_group retires at least what each path needs
            out.append(Pending(x.regs | y.regs, x.shared_write or y.shared_write,
                               x.scalar or y.scalar, x.closes_group or y.closes_group))
    return tuple(out)


def _units(inst: MInst, which) -> frozenset:
    return frozenset(u for r in which for u in r.units())


def _needed(queue: tuple[Pending, ...], touched: frozenset, counter: str, barrier: bool
            ) -> int | None:
    """The largest count that retires every pending op this instruction depends on."""
    need = None
    for age, entry in enumerate(reversed(queue)):       # age 0 = newest
        hit = bool(entry.regs & touched) or (barrier and entry.shared_write)
        if not hit:
            continue
        if entry.scalar or (counter == LGKMCNT and any(e.scalar for e in queue)):
            return 0
        need = age if need is None else min(need, age)
    if need is None:
        return None
    # a count at the field's maximum reads as "no wait"
    return min(need, LIMIT[counter] - 1)


def _written_waits(inst: MInst) -> dict[str, int]:
    """The counts an `s_waitcnt` the program states itself (a `T.wait`) names."""
    return {c: int(n) for c, n in re.findall(r"(vm|lgkm)cnt\((\d+)\)", inst.mods)}


def _step(inst: MInst, state: State) -> tuple[State, dict[str, int]]:
    if inst.opcode == "s_waitcnt":
        if inst.groups_in_flight is not None:
            inst.mods = f"vmcnt({_group_count(state.vm, inst.groups_in_flight)})"
        # an explicit wait retires what it names: later uses need no wait of their own
        return _retire(state, _written_waits(inst)), {}
    touched = _units(inst, inst.uses) | _units(inst, inst.defs)
    barrier = inst.opcode == "s_barrier"
    waits = {}
    for counter, queue in ((VMCNT, state.vm), (LGKMCNT, state.lgkm)):
        n = _needed(queue, touched, counter, barrier)
        if n is not None:
            waits[counter] = n
    retired = _retire(state, waits)
    vm, lgkm = retired.vm, retired.lgkm
    counter = opcodes.counter(inst.opcode)
    if counter is not None:
        released = opcodes.classify(inst.opcode) in opcodes.BARRIER_RELEASES
        entry = Pending(_units(inst, inst.defs), released,
                        opcodes.unit(inst.opcode) is opcodes.Unit.SMEM, inst.closes_group)
        if counter == VMCNT:
            vm = _bounded(vm + (entry,), counter)
        else:
            lgkm = _bounded(lgkm + (entry,), counter)
    return State(vm, lgkm), waits


def _group_count(vm: tuple, in_flight: int) -> int:
    """The vmcnt of `wait_group(in_flight)`: every operation up to the closing DMA of the
    (in_flight + 1)-th newest commit group retires; with no such group pending nothing need
    (the count then names every pending operation)."""
    marks = [age for age, entry in enumerate(reversed(vm)) if entry.closes_group]
    if len(marks) <= in_flight:
        return min(len(vm), LIMIT[VMCNT] - 1)
    return min(marks[in_flight], LIMIT[VMCNT] - 1)


def _bounded(queue: tuple, counter: str) -> tuple:
    """Entries older than the largest count a wait can name are folded into one, the oldest
    kept: it sits at age LIMIT - 1, and a wait for that count retires every operation at least
    that old, so all the folded ones."""
    keep = LIMIT[counter]
    if len(queue) <= keep:
        return queue
    old = queue[:len(queue) - keep + 1]
    folded = Pending(frozenset().union(*(e.regs for e in old)), any(e.shared_write for e in old),
                     any(e.scalar for e in old), any(e.closes_group for e in old))
    return (folded,) + queue[len(queue) - keep + 1:]


def waitcnt_text(waits: dict[str, int]) -> str:
    return " ".join(f"{c}cnt({n})" for c, n in sorted(waits.items(),
                                                      key=lambda kv: kv[0] != VMCNT))


def _walk(items: list, state: State, insert: bool, memo: dict | None = None) -> State:
    memo = {} if memo is None else memo
    out = []
    for index, item in enumerate(items):
        if isinstance(item, Loop):
            entry = state
            while True:
                end = _trial_walk(item.body, entry, memo)
                merged = state.merge(end)
                if merged == entry:
                    break
                entry = merged
            end = _walk(item.body, entry, insert, memo)
            # leaving the loop: from the last iteration, or from the trip test before it
            state = state.merge(end)
            out.append(item)
            continue
        if isinstance(item, Skip):
            state = state.merge(_walk(item.body, state, insert, memo))  # run or jumped over
            out.append(item)
            continue
        if isinstance(item, IfElse):
            then, orelse = (_walk(arm, state, insert, memo) for arm in item.arms)
            state = then.merge(orelse)
            out.append(item)
            continue
        if isinstance(item, MInst):
            before = state
            state, waits = _step(item, state)
            if LGKMCNT in waits and _is_mfma(item):
                following = items[index + 1:index + MFMA_WAIT_GROUP]
                waits, state = _paired(following, item, before, waits, state)
            if waits and insert:
                out.append(MInst("s_waitcnt", (), 0, waitcnt_text(waits), item.loc,
                                 f"for {item.opcode}", inserted="waitcnt"))
        out.append(item)
    if insert:
        items[:] = out
    return state


def _trial_walk(body: list, entry: State, memo: dict) -> State:
    """The state after `body` from `entry`, inserting nothing. Memoised: a loop nested d deep
    is otherwise walked 2^d times or more (each enclosing loop walks its body to a fixpoint,
    then once more to insert), the same from the same entry each time. A trial walk changes
    nothing the inserting walk does not redo (a wait_group's count comes from the state)."""
    key = (id(body), len(body), entry)
    if key not in memo:
        memo[key] = (body, _walk(body, entry, False, memo))   # body kept: its id stays its
    return memo[key][1]


#: MFMAs whose LDS operand waits are merged into one `s_waitcnt` (the first of a run waits for
#: the next one's reads as well). An MFMA runs 8-16 passes, the reads it waits for arrive a few
#: cycles apart, so the delay is small; AMD's hand-written loops wait per group of MFMAs too.
MFMA_WAIT_GROUP = 2


def _is_mfma(inst) -> bool:
    return isinstance(inst, MInst) and inst.opcode.startswith("v_mfma")


def _paired(following: list, item: MInst, before: State, waits: dict, state: State):
    """The waits of an MFMA that needs an lgkmcnt, strengthened to cover the MFMAs right after
    it (`following`: the next MFMA_WAIT_GROUP - 1 items) when they need LDS
    reads of their own: one wait instead of one per MFMA. Returns the waits and the state after
    the instruction."""
    strongest, after = waits, state
    probe = state
    for follower in following:
        if not _is_mfma(follower):
            break
        probe, need = _step(follower, probe)
        if set(need) != {LGKMCNT}:
            break
        # the follower's reads must be older than the item's own results' readers: waiting
        # for them now retires them before the item issues
        merged = {**strongest, LGKMCNT: min(strongest[LGKMCNT], need[LGKMCNT])}
        after, _ = _step(item, _retire(before, merged))
        strongest = merged
    return strongest, after


def _retire(state: State, waits: dict) -> State:
    """`state` after an `s_waitcnt` with `waits` (counter -> count): each counter keeps only
    its newest `count` pending operations."""
    def kept(queue: tuple, counter: str) -> tuple:
        if counter not in waits:
            return queue
        n = waits[counter]
        return queue[max(0, len(queue) - n):] if n else ()
    return State(kept(state.vm, VMCNT), kept(state.lgkm, LGKMCNT))


def insert_waits(items: list) -> None:
    """Insert the `s_waitcnt`s the program needs (in place)."""
    _walk(items, State(), insert=True)

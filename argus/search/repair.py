"""Counterexample-guided repair: a refuted candidate's confirmed counterexample (obligation kind,
program point, the other access it names) is mapped to the program rewrites that may mend it,
most specific first. An LDS race at a write that another thread still reads grows that ring
(the overwritten slot was then read two iterations ago) or puts a barrier before the write; a
race or stale read at a read puts a barrier after the writes of that buffer; a tag assertion
over LDS data read through another map than it was written applies the writer's swizzle to the
reader; an out-of-bounds access is guarded; a ping-pong wave group that stages past the
loop's barrier hands its stores over before it. Undoing the candidate's last rewrite is always
the last resort. The planner tries these next and the run file records candidate ->
counterexample -> repair -> verdict.
"""

from __future__ import annotations

import re

import attrs

from argus.ir import ops as O
from argus.ir.rewrite import sites
from argus.search import rewrites as R
from argus.search.space import Candidate

#: repairs proposed per refuted candidate (the planner tries them before anything else)
MAX_REPAIRS = 4


@attrs.frozen
class Repair:
    """A candidate that may mend a refuted one, and the counterexample it answers."""

    candidate: Candidate
    rewrite: str  # the repair rewrite's name, or "undo:<name>" for dropping the last rewrite
    site: tuple
    kind: str  # the counterexample's obligation kind
    loc: str  # its program point
    why: str

    def to_dict(self) -> dict:
        return {"rewrite": self.rewrite, "site": list(self.site), "kind": self.kind,
                "loc": self.loc, "why": self.why, "candidate": self.candidate.to_dict()}


def counterexample_kind(evaluation) -> str:
    """The first refuted obligation's kind ("" when there is none)."""
    shown = evaluation.counterexamples
    return shown[0].get("kind", "") if shown else ""


def _located(kernel: O.Kernel, loc: str, kind) -> list[tuple[int, O.Op]]:
    """Ops of `kind` at source location `loc` (the verifier's program point)."""
    return [(i, op) for i, op, _ in sites(kernel) if isinstance(op, kind) and str(op.loc) == loc]


def _ordinal(kernel: O.Kernel, kind, index: int) -> int:
    return [i for i, op, _ in sites(kernel) if isinstance(op, kind)].index(index)


def _alloc_ordinal(kernel: O.Kernel, buffer) -> int:
    allocs = [op.result for _, op, _ in sites(kernel) if isinstance(op, O.LdsAlloc)]
    return allocs.index(buffer)


def _other_loc(counterexample: dict) -> str:
    """The other access a race names ("also read by wave 3 lane 16 at FILE:LINE:COL")."""
    detail = (counterexample or {}).get("detail", "")
    found = re.search(r" at (\S+:\d+:\d+)", detail)
    return found.group(1) if found else ""


def proposals(kernel: O.Kernel, candidate: Candidate, obligations) -> list[tuple[str, tuple,
                                                                                   str]]:
    """(rewrite, site, why) repairs for the refuted `obligations` (JSON dicts) of `candidate`,
    whose traced and rewritten IR is `kernel`; most specific first, no duplicates."""
    out: list[tuple[str, tuple, str]] = []

    def add(name: str, site: tuple, why: str) -> None:
        if (name, site) not in [(n, s) for n, s, _ in out] and \
                site in R.rewrite(name).sites(kernel):
            out.append((name, site, why))

    raced = {_alloc_ordinal(kernel, op.buffer) for ob in obligations
             if ob.get("kind") == "lds-race"
             for _, op in _located(kernel, ob.get("loc", ""), R.LDS_WRITES)}
    if len(raced) > 1:  # the writes into several rings race: deepen them together
        add("grow_rings", (0,), f"lds-race at the writes into {len(raced)} LDS rings: every "
            "ring twice as deep leaves each overwritten slot two iterations behind its reads")
    stores = {str(op.loc) for _, op, _ in sites(kernel) if isinstance(op, O.GlobalStore)}
    for ob in obligations:
        kind, loc, cex = ob.get("kind", ""), ob.get("loc", ""), ob.get("counterexample") or {}
        if kind in ("tag-assertion", "out-of-bounds") and loc in stores | _store_asserts(kernel):
            # a C tile stored elsewhere than its tags say: the epilogue's tile offsets may
            # assume another wave grid than the main loop computed the tiles on
            hooks = _hooks(candidate)
            for site in R.TRACE_REWRITES["regrid_epilogue"].sites(candidate.param_dict, hooks):
                if ("regrid_epilogue", site) not in [(n, s) for n, s, _ in out]:
                    out.append(("regrid_epilogue", site, f"{kind} at {loc}: the store's tile "
                                f"offsets assume the {_grid(hooks)[1]} wave grid, the main "
                                f"loop computed the tiles on {site}; store them where they "
                                "were computed"))
        if kind in ("lds-race", "lds-uninitialised", "async-pending"):
            # a ping-pong group staging past the loop's barrier: hand its stores over first
            hooks = _hooks(candidate)
            for site in R.TRACE_REWRITES["pingpong_handoff"].sites(candidate.param_dict, hooks):
                if ("pingpong_handoff", site) not in [(n, s) for n, s, _ in out]:
                    out.append(("pingpong_handoff", site, f"{kind} at {loc}: the late wave "
                                "group stores past the loop's barrier, so the next iteration "
                                "reads its share unordered; store it before the barrier"))
            _lds_repairs(kernel, loc, _other_loc(cex), kind, add)
        elif kind in ("tag-assertion", "tag-missing"):
            for n, alloc_site in enumerate(R.REWRITES["swizzle_reads"].sites(kernel)):
                add("swizzle_reads", alloc_site, f"{kind} at {loc}: LDS buffer {n} is read "
                    "through another map than its stores write it; read it as it is written")
        elif kind == "out-of-bounds":
            for index, _ in _located(kernel, loc, R.GUARDED):
                add("guard_access", (_ordinal(kernel, R.GUARDED, index),),
                    f"out-of-bounds at {loc}: guard the access (the tail of the tensor)")
        elif kind in ("global-race", "global-order"):
            for index, _ in _located(kernel, loc, R.LDS_WRITES):
                add("insert_barrier", (_ordinal(kernel, R.LDS_WRITES, index), 0),
                    f"{kind} at {loc}: order the accesses with a barrier")
    return out


def _hooks(candidate: Candidate) -> dict:
    try:
        return R.trace_hooks(candidate.family, candidate.param_dict, candidate.rewrites)
    except R.RewriteError:
        return {}


def _grid(hooks: dict) -> tuple[str, str]:
    grid, epilogue = R._grid_hooks(hooks)
    return "x".join(map(str, grid)), "x".join(map(str, epilogue))


def _store_asserts(kernel: O.Kernel) -> set[str]:
    """The program points of the tag assertions global stores carry (on the stored data)."""
    return {str(a.loc) for _, op, _ in sites(kernel) if isinstance(op, O.GlobalStore)
            for a in op.asserts}


def _lds_repairs(kernel, loc: str, other: str, kind: str, add) -> None:
    writes = _located(kernel, loc, R.LDS_WRITES)
    for index, op in writes:  # the write races an earlier read (write-after-read)
        alloc = _alloc_ordinal(kernel, op.buffer)
        add("grow_ring", (alloc,), f"{kind} at {loc}: the write overwrites a slot that "
            f"{other or 'another thread'} still reads; a deeper ring leaves it two "
            "iterations behind")
        add("insert_barrier", (_ordinal(kernel, R.LDS_WRITES, index), 0),
            f"{kind} at {loc}: a barrier before the write waits for {other or 'the reads'}")
    reads = _located(kernel, loc, (O.LdsLoad,))
    buffers = {op.buffer for _, op in reads}
    if other:
        buffers |= {op.buffer for _, op in _located(kernel, other, R.LDS_WRITES)}
    # a read sees a write not yet ordered before it: a barrier after the writes of that
    # buffer, the one the counterexample names first, then those inside loops (a race needs
    # two iterations or two threads), the latest first
    writers = [(n, op, loops) for n, (_, op, loops) in enumerate(R._ops(kernel, R.LDS_WRITES))
               if op.buffer in buffers]
    for n, op, _ in sorted(writers, key=lambda w: (str(w[1].loc) != other, not w[2], -w[0])):
        add("insert_barrier", (_end_of_run(kernel, n), 1), f"{kind} at {loc}: a barrier "
            f"after the write at {op.loc} orders it before the read")
    for alloc in {_alloc_ordinal(kernel, b) for b in buffers}:
        add("grow_ring", (alloc,), f"{kind} at {loc}: a deeper ring keeps the slot being read "
            "apart from the one being written")


def _end_of_run(kernel: O.Kernel, n: int) -> int:
    """The last LDS write of the run of consecutive writes that LDS write `n` is in (a barrier
    goes after the run, not between its writes)."""
    ordered = [op for _, op, _ in sites(kernel)]
    writes = [i for i, op in enumerate(ordered) if isinstance(op, R.LDS_WRITES)]
    position = writes[n]
    while position + 1 < len(ordered) and isinstance(ordered[position + 1], R.LDS_WRITES):
        position += 1
        n += 1
    return n


def repairs(kernel: O.Kernel, candidate: Candidate, obligations) -> list[Repair]:
    """Repaired candidates for a refuted one: its rewrites plus one repair each (most specific
    first), then the candidate without its last rewrite; at most MAX_REPAIRS."""
    kind = obligations[0].get("kind", "") if obligations else ""
    loc = obligations[0].get("loc", "") if obligations else ""
    out = [Repair(attrs.evolve(candidate, rewrites=R.with_rewrite(candidate.rewrites, name,
                                                                  site)),
                  name, site, kind, loc, why)
           for name, site, why in proposals(kernel, candidate, obligations)]
    if candidate.rewrites:
        name, site = candidate.rewrites[-1]
        out.append(Repair(attrs.evolve(candidate, rewrites=candidate.rewrites[:-1]),
                          f"undo:{name}", site, kind, loc,
                          f"{kind} at {loc}: the last rewrite ({name}) is what broke it"))
    return out[:MAX_REPAIRS]

"""Race checks of the verifier: LDS write/write and write-after-read races between two symbolic
threads of one workgroup (in the same barrier epoch, across iterations), and global-memory
races between two symbolic workgroups, which are unordered.
"""

from __future__ import annotations

import attrs

from argus.absint import lds as L
from argus.absint.domain import (
    FALSE,
    GATHERED,
    TRUE,
    distinct_constraints,
    fresh_in,
    fresh_var,
    node_vars,
    renamed_helpers,
)
from argus.absint.report import PROVED, UNKNOWN, Obligation
from argus.ir.expr import And, Expr, Not, Or, name_order
from argus.ir.expr import substitute as subst
from argus.ir.sizes import holds_at

#: Time the "different barrier epochs, so no race" shortcut of `race_pair` may take: when it
#: is not settled, the pair's race condition (which holds the epochs' equality as a conjunct)
#: is decided as an obligation anyway. A convolution's staged LDS weights ask it about a
#: mixed-radix epoch (`ocb * CG' * 2 + g * OCG' * CG' * 2 + c * 2`) that z3 leaves unknown
#: after the full limit, four to seven times a kernel, while the obligations are proved.
EPOCH_SHORTCUT_MS = 1000


@attrs.frozen
class GlobalAccess:
    """A global-memory access for the cross-workgroup race check."""

    op: object = attrs.field(eq=False)
    write: bool
    tensor: str
    index: tuple
    inside: Expr
    thread: tuple
    guard: Expr
    loops: tuple
    assumes: tuple
    order: int
    gathered: bool = False
    atomic: bool = False  # an atomic add: it commutes with other atomic adds, not with loads
    epoch: Expr = TRUE  # the barrier epoch (for the order of accesses inside one workgroup)
    #: constraints of the helpers in `index` (a row taken from index registers, `rows=`)
    defs: tuple = ()
    #: with the memory-ordering clock on (`absint.sync`): the wait count that lands a store or
    #: atomic add (None: a load, or the classic one-epoch model) and the clock at the access
    ticket: Expr | None = None
    clock: object = None

    @property
    def verb(self) -> str:
        return "stores" if self.write else "atomically adds to" if self.atomic else "loads"


def index_source(op):
    """The i32 tensor whose entries a gathered access uses as rows (`gather=` or `rows=`)."""
    return op.gather.index if op.gather is not None else op.rows.source


def conflict(a: GlobalAccess, b: GlobalAccess) -> bool:
    """Whether two workgroups' accesses to one element can race: unless both only load or both
    add atomically, the value someone sees (or the final one) depends on their order."""
    return a.write or b.write or a.atomic != b.atomic


LDS_RACE = ("this write may race with another thread's access to the same LDS address in the "
            "same barrier epoch (write/write or write-after-read)")


class Races:
    """The race obligations (mixed into the walk, which records the accesses)."""

    def check_races(self):
        """Write/write and write-after-read races: two symbolic threads, two iterations."""
        for later in self.accesses:
            if not later.write:
                continue
            pairs = [self.race_pair(earlier, later) for earlier in self.accesses
                     if earlier.buffer == later.buffer
                     and not (earlier.atomic and later.atomic)]
            pairs = [p for p in pairs if p is not None]
            if not pairs:
                self.obligations.append(Obligation("lds-race", LDS_RACE, str(later.op.loc),
                                                   PROVED, op=self.op_number(later.op)))
                continue
            thread = pairs[0][1]
            defs = [d for p in pairs for d in p[2]]
            saved_loops, self.loops = self.loops, list(later.loops)
            saved_assumes = self.assumes
            self.assumes = self.assumes + [b for c in later.loops for b in c.bounds()]
            conds = [p[0] for p in pairs]

            def describe(witness, pairs=pairs):
                for cond, _, _, earlier, other in pairs:
                    if holds_at(cond, witness):
                        kind = "written" if earlier.write else "read"
                        w, lane = (witness.get(v.name, 0) for v in other[:2])
                        return {"detail": f"also {kind} by wave {w} lane {lane} at "
                                          f"{earlier.op.loc}"}
                return {}
            self.obligation(later.op, "lds-race", LDS_RACE, Not(Or(*conds)), defs,
                            thread, describe)
            self.loops, self.assumes = saved_loops, saved_assumes

    def race_pair(self, earlier: L.Access, later: L.Access):
        ordered = earlier_iterations(earlier, later)
        if ordered is None:
            return None
        mapping, constraints = ordered
        context = self.assumes + [b for c in later.loops for b in c.bounds()] + constraints
        clocked = earlier.write and earlier.ticket is not None
        if not clocked:
            epoch_eq = subst(earlier.epoch, mapping).eq(later.epoch)
            if self.holds(Not(epoch_eq), context, timeout_ms=EPOCH_SHORTCUT_MS):
                return None
        thread, tid, address, inside = later.footprint({})
        other, tid_other, address_other, inside_other = earlier.footprint(mapping)
        if clocked:
            # the clock (`absint.sync`): the earlier write is ordered once waited for and
            # published by a barrier; an own async copy in flight races with its own wave too
            moved = attrs.evolve(earlier, ticket=subst(earlier.ticket, mapping),
                                 epoch=subst(earlier.epoch, mapping))
            race, pending = L.unordered(moved, later.epoch, later.clock, tid.ne(tid_other))
            # one wave's copies land in issue order, so an own copy in flight clashes only
            # with a later plain store (which the copy would overwrite when it lands)
            clash = race if later.copy else Or(race, pending)
            cond = And(*constraints, later.guard, subst(earlier.guard, mapping), inside,
                       inside_other, address.eq(address_other), clash)
        else:
            cond = And(*constraints, epoch_eq, later.guard, subst(earlier.guard, mapping),
                       inside, inside_other, address.eq(address_other), tid.ne(tid_other),
                       Not(L.group_ordered(L.runs_substituted(earlier.groups, mapping),
                                           later.groups, other[0], thread[0])))
        return cond, thread, [], earlier, other

    def check_global_races(self):
        """Workgroups are unordered: a store to an element that another workgroup stores or
        loads is a race. Two symbolic workgroups, threads and iterations per pair of ops.
        Where rows are gathered, the index data decides: the check needs every index tensor
        involved declared with `T.distinct`, and is Unknown otherwise."""
        stored = {a.tensor for a in self.global_accesses if a.write or a.atomic}
        for later in self.global_accesses:
            if later.tensor not in stored:
                continue
            pairs = [self.global_pair(other, later) for other in self.global_accesses
                     if other.tensor == later.tensor and conflict(other, later)
                     and other.order <= later.order]
            if not pairs:
                continue
            undeclared = self.undeclared_indices(later, pairs)
            if undeclared:
                self.obligations.append(self.undecided_race(later, pairs, undeclared))
                continue
            goal = Not(Or(*(c for c, _ in pairs)))
            saved = self.assumes, self.loops
            self.assumes, self.loops = list(later.assumes), list(later.loops)
            self.obligation(later.op, "global-race",
                            f"another workgroup accesses the element this op "
                            f"{later.verb}; workgroups are unordered",
                            goal, tuple(distinct_constraints([goal], self.distinct)),
                            later.thread, self.race_description(pairs))
            self.assumes, self.loops = saved

    def undeclared_indices(self, later: GlobalAccess, pairs) -> list[str]:
        """The gather index tensors the pairs' rows come from that no `T.distinct` declares."""
        indices = {index_source(a.op).name for a in [later, *(o for _, (o, _) in pairs)]
                   if a.gathered}
        return sorted(indices - {name for name, _, _ in self.distinct})

    def undecided_race(self, later: GlobalAccess, pairs, undeclared) -> Obligation:
        """Without distinctness facts for the gathered rows: Proved when no two workgroups
        meet whatever the index holds (a grid of one), else Unknown, naming the fix."""
        context = list(later.assumes) + [b for c in later.loops for b in c.bounds()]
        if self.holds(Not(Or(*(c for c, _ in pairs))), context):
            return Obligation("global-race", f"another workgroup accesses the element this op "
                              f"{later.verb}; workgroups are unordered", str(later.op.loc),
                              PROVED, op=self.op_number(later.op))
        return Obligation(
            "global-race", "another workgroup may access the element this op "
            f"{later.verb}", str(later.op.loc), UNKNOWN,
            reason=f"the rows come from the gather index {', '.join(undeclared)}, whose "
                   "contents decide it; if its entries in a range [lo, hi) never "
                   f"repeat, declare it with T.distinct({undeclared[0]}, lo, hi) at "
                   "the top of the kernel and the verifier will use that fact",
            op=self.op_number(later.op))

    def race_description(self, pairs):
        """The witness's other workgroup and the op it runs, for the counterexample."""
        def describe(witness):
            for cond, (other, pid_map) in pairs:
                if holds_at(cond, witness):
                    group = tuple(witness.get(pid_map[p.name].name, 0)
                                  for p in (self.pids.get(a) for a in range(3))
                                  if p is not None)
                    return {"detail": f"workgroup {group} also {other.verb} it at "
                                      f"{other.op.loc}", "workgroups": group}
            return {}
        return describe

    def global_pair(self, other: GlobalAccess, later: GlobalAccess):
        """Condition under which `other`, run by a second workgroup, touches what `later`
        touches; and the renaming of that workgroup's variables."""
        mapping = {}
        for pid in self.pids.values():
            mapping[pid.name] = fresh_var(pid.name, pid.lo, pid.hi)
        for ctx in other.loops:
            mapping[ctx.iv.name] = fresh_var(ctx.iv.name, ctx.iv.lo, ctx.iv.hi)
        for v in other.thread:
            mapping[v.name] = fresh_var(v.name, v.lo, v.hi)
        touched = [*other.index, other.inside, other.guard, *other.defs]
        # the second workgroup reads its own scalars and gathered rows: the same variable in
        # both workgroups would claim the index data holds one value at two positions
        positions = [GATHERED[v.name][2] for v in fresh_in(*touched) if v.name in GATHERED]
        loaded = {v for e in touched + positions for v in node_vars(e)
                  if v.name in self.scalar_loads}
        scalars_agree = []
        for var in sorted(loaded, key=lambda v: name_order(v.name)):
            tensor, index = self.scalar_loads[var.name]
            copy = fresh_var(var.name, var.lo, var.hi)
            mapping[var.name] = copy
            where = tuple(subst(i, mapping) for i in index)
            self.scalar_loads[copy.name] = (tensor, where)
            scalars_agree.append(Or(Not(And(*(a.eq(b) for a, b in zip(where, index)))),
                                    copy.eq(var)))
        mapping = renamed_helpers(touched, mapping)
        context = [subst(a, mapping) for a in other.assumes + other.defs] + list(later.defs)
        differ = Or(*(pid.ne(mapping[pid.name]) for pid in self.pids.values()))
        same = And(*(subst(i, mapping).eq(j) for i, j in zip(other.index, later.index)))
        cond = And(*context, *scalars_agree, *(v >= v.lo for v in other.thread),
                   subst(other.guard, mapping), later.guard, subst(other.inside, mapping),
                   later.inside, same, differ)
        return cond, (other, mapping)


def earlier_iterations(earlier, later):
    """(renaming, constraints) that put `earlier` at a fresh copy of its loop indices running
    before `later` in program order: an earlier iteration of a loop both are in, or the same
    iterations with `earlier` first in the body; None when `earlier` can never come first."""
    shared = [c for c in earlier.loops if c in later.loops]
    if earlier.order > later.order and not shared:
        return None
    mapping, constraints = {}, []
    for ctx in earlier.loops:
        iv = fresh_var(ctx.iv.name, ctx.iv.lo, ctx.iv.hi)
        mapping[ctx.iv.name] = iv
        constraints += ctx.bounds(iv)
    eqs, lex = [], []
    for ctx in shared:
        mine = mapping[ctx.iv.name]
        lex.append(And(*eqs, mine < ctx.iv))
        eqs.append(mine.eq(ctx.iv))
    constraints.append(Or(*lex, And(*eqs, TRUE if earlier.order <= later.order else FALSE)))
    return mapping, constraints

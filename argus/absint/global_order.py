"""Ordering of global-memory accesses inside one workgroup: a thread that loads (or stores) an
element another thread of its workgroup stored, or added to atomically, needs a barrier between
the two (a read-after-own-store through global memory, e.g. a tile written out and read back
in another layout). Two symbolic threads of one workgroup, two iterations per pair of ops; a
scatter (a plain store through gathered rows) is also paired with itself: two of its threads
may meet at one row, as the index data decides. With the memory-ordering clock on
(`absint.sync`) a store or add is ordered before another wave's access as an LDS store is: a
wait after it (`s_waitcnt vmcnt(0)`), then a barrier; a load before a later store by any barrier.
"""

from __future__ import annotations

from argus.absint.domain import distinct_constraints, fresh_var, renamed_helpers
from argus.absint.races import earlier_iterations
from argus.absint.report import PROVED, Obligation
from argus.ir.expr import And, Not, Or, simplify
from argus.ir.expr import substitute as subst
from argus.ir.sizes import holds_at
from argus.ir.types import LANES

ORDER = ("another thread of this workgroup accesses this global element in the same barrier "
         "epoch, and one of the two writes it (no barrier orders them)")
#: the same obligation with the clock on: a barrier alone does not publish a store
ORDER_CLOCKED = ("another thread of this workgroup accesses this global element, and one of "
                 "the two writes it with no wait and barrier between (a store reaches the "
                 "other waves once a wait lands it and a barrier follows)")


def _writes(a) -> bool:
    return a.write or a.atomic


def _scatters(a) -> bool:
    """A plain store through gathered rows: two of its own threads may meet at one row (the
    threads of a non-gathered store hold distinct elements or equal copies of one). Unless
    `T.distinct` rules it out, index data with a repeated row is an admissible input, so the
    solver may pick it and the replay runs on it."""
    return a.write and a.gathered


class GlobalOrder:
    """The intra-workgroup global race obligations (mixed into the walk, which records the
    accesses with their barrier epochs)."""

    def check_global_order(self):
        written = {a.tensor for a in self.global_accesses if _writes(a)}
        for later in self.global_accesses:
            if later.tensor not in written:
                continue
            pairs = [self.order_pair(earlier, later) for earlier in self.global_accesses
                     if earlier.tensor == later.tensor and (_writes(earlier) or _writes(later))
                     and not (earlier.atomic and later.atomic)
                     and (earlier.op is not later.op or _scatters(later))]
            pairs = [p for p in pairs if p is not None]
            what = ORDER if later.clock is None else ORDER_CLOCKED
            if not pairs:
                self.obligations.append(Obligation("global-order", what, str(later.op.loc),
                                                   PROVED, op=self.op_number(later.op)))
                continue
            def describe(witness, pairs=pairs):
                for cond, earlier, other in pairs:
                    if holds_at(cond, witness):
                        w, lane = (witness.get(v.name, 0) for v in other[:2])
                        return {"detail": f"wave {w} lane {lane} also {earlier.verb} it at "
                                          f"{earlier.op.loc}"}
                return {}
            saved = self.assumes, self.loops
            self.assumes = list(later.assumes) + [b for c in later.loops for b in c.bounds()]
            self.loops = list(later.loops)
            goal = Not(Or(*(p[0] for p in pairs)))
            self.obligation(later.op, "global-order", what, goal,
                            tuple(distinct_constraints([goal], self.distinct)), later.thread,
                            describe)
            self.assumes, self.loops = saved

    def order_pair(self, earlier, later):
        """Condition under which `earlier`, run by another thread of the same workgroup (in an
        earlier or the same iteration) and not ordered before `later`, touches what `later`
        touches: in the same barrier epoch, or with the clock a store or add whose wait count
        no barrier has published yet."""
        ordered = earlier_iterations(earlier, later)
        if ordered is None:
            return None
        mapping, constraints = ordered
        other = tuple(fresh_var(v.name, v.lo, v.hi) for v in earlier.thread)
        mapping.update({v.name: o for v, o in zip(earlier.thread, other)})
        touched = [*earlier.index, earlier.inside, earlier.guard, earlier.epoch, *earlier.defs]
        mapping = renamed_helpers(touched, mapping)
        me = later.thread[0] * LANES + later.thread[1]
        them = other[0] * LANES + other[1]
        if earlier.ticket is not None:
            # the counts are linear in the loop variables: often a constant here
            unordered = simplify(subst(earlier.ticket, mapping) >= later.clock.published)
        else:
            unordered = subst(earlier.epoch, mapping).eq(later.epoch)
        cond = And(*constraints, *(And(o >= o.lo, o < o.hi) for o in other),
                   unordered, later.guard,
                   subst(earlier.guard, mapping), later.inside, subst(earlier.inside, mapping),
                   *(subst(i, mapping).eq(j) for i, j in zip(earlier.index, later.index)),
                   *(subst(d, mapping) for d in earlier.defs), *later.defs,
                   me.ne(them))
        return cond, earlier, other

"""Proof obligations of the verifier: recording one per assertion or built-in check with its
context, deciding them (in forked children while the walk goes on, or all at the end, spread
over worker processes), and turning a verdict into a report entry — a refutation only after
its witness replays on the reference interpreter.
"""

from __future__ import annotations

import time

import attrs

from argus.absint import queries as Q
from argus.absint.domain import FALSE, GATHERED, Tag, connected_defs, gather_constraints
from argus.absint.kleene import symbolic_goal
from argus.absint.parallel import can_fork
from argus.absint.replay import NumbersRight, ReplayError, replay_obligation
from argus.absint.report import PROVED, REFUTED, UNKNOWN, Counterexample, Obligation
from argus.ir import ops as O
from argus.ir.expr import Expr, Not, Or, evaluate, free_vars, name_order
from argus.ir.expr import substitute as subst
from argus.ir.sizes import holds_at
from argus.smt import Proved, Refuted

#: Obligations decided by a forked child while the walk goes on, at least this many at once
#: (each child costs a fork).
EARLY_BATCH = 16
#: Sizes tried first when minimising a witness.
SMALL_SIZE = 1024


@attrs.frozen
class Pending:
    """An obligation recorded during the walk, decided afterwards."""

    op: object = attrs.field(eq=False)
    kind: str
    message: str
    goal: Expr
    assume: tuple
    thread: tuple
    describe: object = attrs.field(eq=False)
    loc: str
    loops: tuple
    #: the op's tag assertion this is (its index in `op.asserts`), -1 for other kinds
    assertion: int = -1


class Obligations:
    """The verifier's obligation bookkeeping (mixed into the walk, whose state it reads)."""

    def op_number(self, op) -> int:
        """The op's position in the kernel's walk (`Obligation.op`), -1 for none of its ops."""
        numbers = self.__dict__.get("op_numbers")
        if numbers is None:
            numbers = self.op_numbers = {id(o): n for n, o in enumerate(self.kernel.ops())}
        return numbers.get(id(op), -1)

    def minimize_order(self, thread, loops) -> list[str]:
        names = [v.name for v in self.kernel.sizes + self.kernel.scalars]
        names += [c.iv.name for c in loops]
        names += [self.pids[a].name for a in sorted(self.pids)]
        return names + [v.name for v in thread]

    def obligation(self, op, kind: str, message: str, goal: Expr, defs=(), thread=(),
                   describe=None, loc=None, assertion: int = -1):
        """Record that `goal` must hold at every point of the current context."""
        if not self.collect:
            return
        rows = gather_constraints([goal, *defs], self.distinct)
        defs = connected_defs([goal, *rows], defs) + tuple(rows)
        assume = self.assumes + list(defs) + [v >= v.lo for v in thread]
        self.pending.append(Pending(op, kind, message, goal, tuple(assume), tuple(thread),
                                     describe, str(loc or op.loc), tuple(self.loops),
                                     assertion))

    def decide_all(self):
        """Decide the recorded obligations one query each, spread over the worker processes;
        witnesses are replayed here, where the interpreter's inputs are built. Proving them in
        batches (one conjunction per dozen) was measured slower: z3 answers the small queries
        in milliseconds and a failing batch costs extra rounds."""
        rest = Q.decide(self.queries(self.pending[self.dispatched:]), self.solver,
                        self.timeout_ms, self.jobs)
        answers = [answer for _, batch in self.early for answer in batch.finish()] + rest
        self.obligations += [self.conclude(item, verdict, seconds)
                             for item, (verdict, seconds) in zip(self.pending, answers)]
        self.pending, self.early, self.dispatched = [], [], 0

    def decide_early(self):
        """Between top-level ops every recorded obligation is final (a loop's speculative
        passes are over), so a batch of them can be decided by a forked child while this
        process walks on: the walk is serial, and deciding would otherwise wait for its end."""
        ready = len(self.pending) - self.dispatched
        if self.jobs < 2 or ready < EARLY_BATCH or not can_fork():
            return
        if sum(batch.running() for _, batch in self.early) >= self.jobs - 1:
            return  # the other cores are busy; the next op boundary tries again
        items = self.pending[self.dispatched:]
        self.early.append((self.dispatched, Q.decide_in_background(
            self.queries(items), self.solver, self.timeout_ms)))
        self.dispatched = len(self.pending)

    def queries(self, items) -> list:
        # witnesses are searched first among small sizes and iterations: cheap to minimise and
        # to replay
        small = tuple(v <= SMALL_SIZE for v in self.kernel.sizes + self.kernel.scalars)
        return [Q.canonical(item.goal, item.assume,
                            self.minimize_order(item.thread, item.loops), small)
                for item in items]

    def holds(self, goal: Expr, assume, timeout_ms: int | None = None) -> bool:
        """Is `goal` proved under `assume`? (the walk's own questions: invariants, agreement)
        `timeout_ms` below the verifier's own for a question that is only a shortcut."""
        limit = self.timeout_ms if timeout_ms is None else min(timeout_ms, self.timeout_ms)
        return isinstance(Q.decide_one(goal, assume, self.solver, limit), Proved)

    def conclude(self, item: Pending, verdict, seconds: float) -> Obligation:
        """The obligation's entry in the report; a refutation counts only once replayed."""
        started = time.perf_counter() - seconds
        if isinstance(verdict, Proved):
            return Obligation(item.kind, item.message, item.loc, PROVED, seconds=seconds,
                              op=self.op_number(item.op))
        if not isinstance(verdict, Refuted):
            return Obligation(item.kind, item.message, item.loc, UNKNOWN,
                              reason=verdict.reason, seconds=seconds, op=self.op_number(item.op))
        witness = verdict.witness
        broken = [a for a in item.assume
                  if free_vars(a) <= witness.keys() and not holds_at(a, witness)]
        if broken:
            # e.g. a workgroup outside the grid, where the remapping divides by zero
            return Obligation(item.kind, item.message, item.loc, UNKNOWN,
                              reason=f"the solver's witness {witness} violates the assumption "
                                     f"{broken[0]}, so it is no witness",
                              seconds=time.perf_counter() - started, op=self.op_number(item.op))
        cex = self.counterexample(witness, item.thread, item.describe, item.loops)
        verdict_name, reason = REFUTED, ""
        if self.replay:
            try:
                cex = replay_obligation(self.kernel, item.op, item.kind, cex, witness,
                                        self.witness_data(witness), self.reference,
                                        loc=item.loc, assertion=item.assertion)
            except NumbersRight as error:
                verdict_name, reason = UNKNOWN, f"not confirmed: {error}"
                cex = attrs.evolve(cex, confirmed=False)
            except ReplayError as error:
                verdict_name, reason = UNKNOWN, f"the solver's witness did not replay: {error}"
                cex = attrs.evolve(cex, confirmed=False)
        else:
            verdict_name, reason = UNKNOWN, "refuted by the solver; replay was switched off"
            cex = attrs.evolve(cex, confirmed=False)
        return Obligation(item.kind, item.message, item.loc, verdict_name, cex, reason,
                          time.perf_counter() - started, op=self.op_number(item.op))

    def witness_data(self, witness: dict) -> dict:
        """Elements of i32 index tensors the witness fixes: gathered row ids and loaded
        scalars, so the replay reads what the solver assumed. A tensor declared distinct on
        [lo, hi) holds a value outside that range elsewhere (-1, no row of any tensor, where
        the range allows), so the replayed data keeps the declaration."""
        data: dict = {}
        sizes = {v.name: witness.get(v.name, v.lo) for v in self.kernel.sizes + self.kernel.scalars}
        ranges: dict = {}
        for tensor, lo, hi in self.distinct:
            try:
                ranges.setdefault(tensor, []).append(
                    tuple(int(evaluate(b, {**sizes, **witness})) for b in (lo, hi)))
            except (KeyError, ZeroDivisionError, ValueError):
                continue
        for tensor, bounds in ranges.items():
            outside = -1 if all(lo > -1 for lo, _ in bounds) else max(hi for _, hi in bounds)
            data[tensor] = {...: outside}
        for name, value in witness.items():
            if name in GATHERED:
                tensor, length, position = GATHERED[name]
                try:
                    where = (int(evaluate(position, witness)),)
                except (KeyError, ZeroDivisionError, ValueError):
                    continue
                data.setdefault(tensor, {})[where] = value
            elif name in self.scalar_loads:
                tensor, index = self.scalar_loads[name]
                try:
                    where = tuple(int(evaluate(i, witness)) for i in index)
                except (KeyError, ZeroDivisionError, ValueError):
                    continue
                data.setdefault(tensor, {})[where] = value
        return data

    def counterexample(self, witness: dict, thread, describe, loops) -> Counterexample:
        sizes = {v.name: witness.get(v.name, v.lo) for v in self.kernel.sizes + self.kernel.scalars}
        workgroup = tuple(witness.get(self.pids[a].name, 0) if a in self.pids else 0
                          for a in range(3))
        point = [witness.get(v.name, 0) for v in thread] + [0, 0, 0]
        try:
            extra = describe(witness) if describe else {}
        except (KeyError, ArithmeticError, ValueError) as error:
            # the description reads something the witness does not fix; the replay still
            # locates the violation, and nothing but a report may leave verify
            extra = {"detail": f"(the witness could not be described: {error})"}
        return Counterexample(
            workgroup, point[0], point[1], point[2],
            iteration={c.iv.name: witness.get(c.iv.name, 0) for c in loops},
            element=extra.get("element", {}), tags=extra.get("tags", {}), sizes=sizes,
            detail=extra.get("detail", ""), confirmed=False,
            others=tuple(extra.get("workgroups", ())))

    def assertions(self, op, roles: dict, defs, thread, element=None, agree=None, where=None):
        """Obligations for the op's tag assertions; `roles` maps role -> {tag name: Tag}; only
        threads where `where` holds (those taking part in the op) must satisfy them."""
        for index, assertion in enumerate(getattr(op, "asserts", ())):
            # role variables only: a loop index or size may have an underscore in its name too
            # in name order: a set of Vars iterates by address, and the tops' order is the
            # query's text
            used = sorted((v for v in free_vars(assertion.predicate) if O.is_role_var(v)),
                          key=lambda v: name_order(v.name))
            missing = sorted({f"{r}.{t}" for r, t in (O.split_role_var(v.name) for v in used)
                              if t not in roles.get(r, {})})
            if missing:
                carried = {r: sorted(t) for r, t in roles.items()}
                self.obligation(op, "tag-missing",
                                f"assertion '{assertion.message}' reads {', '.join(missing)}, "
                                f"which the operands do not carry (they have {carried})",
                                FALSE, defs, thread, loc=assertion.loc, assertion=index)
                continue
            mapping, tops = {}, {}
            for v in used:
                role, tag = O.split_role_var(v.name)
                mapping[v.name] = roles[role][tag].value
                tops[v.name] = roles[role][tag].top
            # three-valued: a comparison reading a ⊤ tag is unknown, and the assertion must
            # surely hold (`absint.kleene`): a disjunct that holds makes it hold
            goal = subst(symbolic_goal(assertion.predicate, tops, agree), mapping)
            if where is not None:
                goal = Or(Not(where), goal)

            def describe(witness, roles=roles, predicate=assertion.predicate):
                shown = {r: {n: show_tag(t, witness) for n, t in tags.items()}
                         for r, tags in roles.items()}
                meaning = f"; {O.MASK_AGREEMENT}" if agree is not None else ""
                return {"element": element(witness) if element else {}, "tags": shown,
                        "detail": f"predicate: {predicate}{meaning}"}
            self.obligation(op, "tag-assertion", assertion.message, goal, defs, thread,
                            describe, loc=assertion.loc, assertion=index)


def show_tag(tag: Tag, witness: dict):
    try:
        if evaluate(tag.top, witness):
            return None
        return int(evaluate(tag.value, witness))
    except (KeyError, ZeroDivisionError, ValueError):
        return None


def evaluator(named: dict):
    def element(witness):
        out = {}
        for name, e in named.items():
            try:
                out[name] = int(evaluate(e, witness))
            except (KeyError, ZeroDivisionError, ValueError):
                out[name] = None
        return out
    return element

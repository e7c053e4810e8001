"""`verify(kernel, **sizes) -> Report`: prove every tag assertion and built-in check of a kernel
for all workgroups, waves, lanes, slots and loop iterations, with symbolic sizes, by abstract
interpretation over tag maps (`domain`) and the LDS model (`lds`) and quantifier-free SMT
queries. A refutation is reported only after its witness replays on the reference interpreter.
With `unroll=N` loops run as N copies of their body instead, for sizes where they fit in N.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time

import attrs

from argus.absint import lds as L
from argus.absint import queries as Q
from argus.absint.domain import (
    FALSE,
    GATHERED,
    TOP_TAG,
    TRUE,
    Tag,
    TileTags,
    connected_defs,
    distinct_constraints,
    equal_tags,
    fresh_in,
    fresh_var,
    gather_constraints,
    gathered_row,
    join_tags,
    merge_tags,
    node_vars,
    renamed_rows,
    tile_tags,
)
from argus.absint.parallel import can_fork, default_jobs
from argus.absint.replay import ReplayError, replay_obligation
from argus.absint.report import PROVED, REFUTED, UNKNOWN, Counterexample, Obligation, Report
from argus.ir import ops as O
from argus.ir.expr import And, Const, Expr, Not, Or, Var, evaluate, free_vars, max_, simplify
from argus.ir.expr import substitute as subst
from argus.ir.types import LANES, LDS_BUDGET, VGPR_BUDGET, RegType, thread_vars
from argus.smt import Proved, Refuted

MAX_LOOP_PASSES = 6
#: Obligations decided by a forked child while the walk goes on, at least this many at once
#: (each child costs a fork).
EARLY_BATCH = 16
#: Largest unroll a refused bounded run suggests instead.
MAX_SUGGESTED_UNROLL = 64
#: Sizes tried first when minimising a witness.
SMALL_SIZE = 1024


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off for the duration: the walk allocates millions of
    small, acyclic expression nodes that stay alive, and rescanning them took a third of the
    verification time (measured on flash attention); cycles left behind are collected when the
    collector runs again."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class VerifyError(ValueError):
    """The kernel uses a construct the verifier does not model; the message says which."""


@attrs.frozen
class _Pending:
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


@attrs.frozen
class _GlobalAccess:
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


@attrs.frozen
class LoopCtx:
    iv: Var
    start: Expr
    stop: Expr
    step: int

    def bounds(self, iv=None) -> list[Expr]:
        iv = self.iv if iv is None else iv
        return [self.start <= iv, iv < self.stop, ((iv - self.start) % self.step).eq(0)]


def verify(kernel, *, solver: str = "z3", timeout_ms: int = 20_000, replay: bool = True,
           jobs: int | None = None, unroll: int | None = None, **sizes_or_params) -> Report:
    """Verify `kernel` (a traced IR kernel or an `@kernel` function).

    Keyword arguments that name kernel parameters choose the trace; those that name sizes pin
    them (`M=256`), every other size stays symbolic. `jobs` worker processes decide the
    obligations (default: `ARGUS_JOBS`, else every core this process may use).

    `unroll=N` checks bounded executions instead: every loop runs its first N iterations as
    separate copies of its body, and sizes (or workgroups) for which some loop would run more
    than N iterations are assumed away. A Proved verdict then holds only for those sizes (the
    report says so); a Refuted one is still replayed, at sizes whose loops run at most N times.
    It finds bugs whose symbolic proof ends Unknown, at the price of generality."""
    started = time.perf_counter()
    ir, pins = _trace(kernel, sizes_or_params)
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise VerifyError(f"jobs={jobs}: give at least 1 worker process")
    if unroll is not None and (isinstance(unroll, bool) or not isinstance(unroll, int)
                               or unroll < 1):
        raise VerifyError(f"unroll={unroll!r}: give a whole number N >= 1 of loop iterations "
                          "to check, or None for the symbolic proof of every size")
    verifier = _Verifier(ir, pins, solver, timeout_ms, replay, jobs, unroll)
    with collector_paused():
        verifier.run()
    report = Report(ir.name, pins, tuple(verifier.obligations), tuple(verifier.bank_facts),
                    time.perf_counter() - started, unroll=unroll)
    if int(os.environ.get("ARGUS_DEBUG") or 0) >= 1:
        print(report.summary(), file=sys.stderr)
    return report


def _trace(kernel, kwargs: dict):
    if isinstance(kernel, O.Kernel):
        ir, rest = kernel, dict(kwargs)
    else:
        params = {k: v for k, v in kwargs.items() if k in getattr(kernel, "params", {})}
        rest = {k: v for k, v in kwargs.items() if k not in params}
        ir = kernel.trace(**params)
    names = {v.name for v in ir.sizes + ir.scalars}
    unknown = set(rest) - names
    if unknown:
        raise VerifyError(f"kernel {ir.name} has no size or parameter {sorted(unknown)}; its "
                          f"sizes are {sorted(names)}")
    return ir, {k: int(v) for k, v in rest.items()}


class _Verifier:
    def __init__(self, kernel: O.Kernel, pins: dict, solver: str, timeout_ms: int,
                 replay: bool, jobs: int = 1, unroll: int | None = None):
        self.kernel, self.solver, self.timeout_ms, self.replay = kernel, solver, timeout_ms, replay
        self.jobs, self.unroll = jobs, unroll
        sizes = {v.name: v for v in kernel.sizes + kernel.scalars}
        self.assumes: list[Expr] = [v >= v.lo for v in sizes.values()]
        self.assumes += list(kernel.assumes) + [sizes[n].eq(v) for n, v in pins.items()]
        #: (loop, where reached, trip count) per loop copy: a bounded run decides every
        #: obligation only where no loop outruns its copies
        self.trip_bounds = [] if unroll is None else _trip_bounds(kernel.body, unroll)
        self.assumes += [_at_most(reached, trips, unroll) for _, reached, trips in
                         self.trip_bounds]
        self.values: dict = {}
        self.tensor_tags: dict = {}
        self.lds: dict = {}
        self.lds_size: dict = {}
        self.epoch: Expr = Const(0)
        self.guard: Expr = TRUE
        self.loops: list[LoopCtx] = []
        self.loop_writes: list[dict] = []
        self.accesses: list[L.Access] = []
        self.global_accesses: list[_GlobalAccess] = []
        self.scalar_loads: dict = {}
        #: declared facts about index data: (index tensor name, lo, hi) per `T.distinct`
        self.distinct: tuple = ()
        self.pids: dict[int, Var] = {}
        self.collect = True
        self.scouting = False
        self.in_branch = False
        self.obligations: list[Obligation] = []
        self.pending: list[_Pending] = []
        #: (first pending index, decisions under way in a forked child) per early batch
        self.early: list = []
        self.dispatched = 0
        self.bank_facts: list = []
        self.order = 0

    # driver

    def run(self):
        if self.unroll is not None:
            self.check_bounded_sizes()
        self.execute(self.kernel.body)
        self.check_races()
        self.check_global_races()
        self.decide_all()
        self.check_budgets()
        from argus.absint.banks import bank_facts

        self.bank_facts = bank_facts(self.kernel)

    def execute(self, block: O.Block):
        for op in block.ops:
            if isinstance(op, O.Yield):
                return [self.values[v.name] for v in op.values]
            handler = getattr(self, "op_" + type(op).__name__, None)
            if handler is None:
                raise VerifyError(f"{op.loc}: {op.mnemonic}: the verifier has no rule for this "
                                  "op")
            handler(op)
            if block is self.kernel.body:
                self.decide_early()
        return []

    # obligations

    def minimize_order(self, thread, loops) -> list[str]:
        names = [v.name for v in self.kernel.sizes + self.kernel.scalars]
        names += [c.iv.name for c in loops]
        names += [self.pids[a].name for a in sorted(self.pids)]
        return names + [v.name for v in thread]

    def obligation(self, op, kind: str, message: str, goal: Expr, defs=(), thread=(),
                   describe=None, loc=None):
        """Record that `goal` must hold at every point of the current context."""
        if not self.collect:
            return
        rows = gather_constraints([goal, *defs], self.distinct)
        defs = connected_defs([goal, *rows], defs) + tuple(rows)
        assume = self.assumes + list(defs) + [v >= v.lo for v in thread]
        self.pending.append(_Pending(op, kind, message, goal, tuple(assume), tuple(thread),
                                     describe, str(loc or op.loc), tuple(self.loops)))

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

    def holds(self, goal: Expr, assume) -> bool:
        """Is `goal` proved under `assume`? (the walk's own questions: invariants, agreement)"""
        return isinstance(Q.decide_one(goal, assume, self.solver, self.timeout_ms), Proved)

    def conclude(self, item: _Pending, verdict, seconds: float) -> Obligation:
        """The obligation's entry in the report; a refutation counts only once replayed."""
        started = time.perf_counter() - seconds
        if isinstance(verdict, Proved):
            return Obligation(item.kind, item.message, item.loc, PROVED, seconds=seconds)
        if not isinstance(verdict, Refuted):
            return Obligation(item.kind, item.message, item.loc, UNKNOWN,
                              reason=verdict.reason, seconds=seconds)
        witness = verdict.witness
        cex = self.counterexample(witness, item.thread, item.describe, item.loops)
        verdict_name, reason = REFUTED, ""
        if self.replay:
            try:
                cex = replay_obligation(self.kernel, item.op, item.kind, cex, witness,
                                        self.witness_data(witness))
            except ReplayError as error:
                verdict_name, reason = UNKNOWN, f"the solver's witness did not replay: {error}"
                cex = attrs.evolve(cex, confirmed=False)
        else:
            verdict_name, reason = UNKNOWN, "refuted by the solver; replay was switched off"
            cex = attrs.evolve(cex, confirmed=False)
        return Obligation(item.kind, item.message, item.loc, verdict_name, cex, reason,
                          time.perf_counter() - started)

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
        extra = describe(witness) if describe else {}
        return Counterexample(
            workgroup, point[0], point[1], point[2],
            iteration={c.iv.name: witness.get(c.iv.name, 0) for c in loops},
            element=extra.get("element", {}), tags=extra.get("tags", {}), sizes=sizes,
            detail=extra.get("detail", ""), confirmed=False,
            others=tuple(extra.get("workgroups", ())))

    def assertions(self, op, roles: dict, defs, thread, element=None, agree=None):
        """Obligations for the op's tag assertions; `roles` maps role -> {tag name: Tag}."""
        for assertion in getattr(op, "asserts", ()):
            used = [v for v in free_vars(assertion.predicate) if "_" in v.name]
            missing = sorted({f"{r}.{t}" for r, t in (O.split_role_var(v.name) for v in used)
                              if t not in roles.get(r, {})})
            if missing:
                carried = {r: sorted(t) for r, t in roles.items()}
                self.obligation(op, "tag-missing",
                                f"assertion '{assertion.message}' reads {', '.join(missing)}, "
                                f"which the operands do not carry (they have {carried})",
                                FALSE, defs, thread)
                continue
            mapping, tops = {}, []
            for v in used:
                role, tag = O.split_role_var(v.name)
                mapping[v.name] = roles[role][tag].value
                tops.append(roles[role][tag].top)
            holds = subst(assertion.predicate, mapping)
            if agree is not None:
                holds = holds.eq(agree)
            goal = And(Not(Or(*tops)), holds)

            def describe(witness, roles=roles, predicate=assertion.predicate):
                shown = {r: {n: _show(t, witness) for n, t in tags.items()}
                         for r, tags in roles.items()}
                return {"element": element(witness) if element else {}, "tags": shown,
                        "detail": f"predicate: {predicate}"}
            self.obligation(op, "tag-assertion", assertion.message, goal, defs, thread,
                            describe, loc=assertion.loc)

    # helpers

    def tags(self, value) -> TileTags:
        return self.values[value.name]

    @staticmethod
    def thread(t: RegType):
        return thread_vars(t.layout.waves, t.layout.slots)

    # scalars and tags

    def op_ProgramId(self, op: O.ProgramId):
        self.pids[op.axis] = op.var
        if op.axis < len(self.kernel.grid):
            self.assumes += [op.var >= 0, op.var < self.kernel.grid[op.axis]]
        else:
            self.assumes.append(op.var.eq(0))

    def op_TagDef(self, op: O.TagDef):
        self.tensor_tags[op.tensor.name] = op.tags

    def op_TagTile(self, op: O.TagTile):
        t = op.result.type
        coords = {f"c{a}": c for a, c in enumerate(t.layout.coords)}
        self.values[op.result.name] = tile_tags(
            self.thread(t), {n: Tag(subst(e, coords)) for n, e in op.tags})

    def op_Full(self, op: O.Full):
        self.values[op.result.name] = TileTags(self.thread(op.result.type))

    # global memory

    def global_index(self, op, tensor, origin, axes, layout):
        index = list(origin)
        for tile_axis, tensor_axis in enumerate(axes):
            index[tensor_axis] = index[tensor_axis] + layout.coords[tile_axis]
        gather = getattr(op, "gather", None)
        if gather is not None:
            position = gather.origin + layout.coords[gather.tile_axis]
            length = gather.index.type.shape[0]
            self.check_bounds(op, And(0 <= position, position < length),
                              thread_vars(layout.waves, layout.slots),
                              f"gather position outside {gather.index} of length {length}",
                              _evaluator({f"{gather.index.name}[0]": position}))
            index[gather.axis] = gathered_row(gather.index.name, length, position)
        inside = And(*(And(0 <= i, i < e) for i, e in zip(index, tensor.type.shape)))
        return index, simplify(inside)

    def global_tags(self, tensor, index, inside, guard=False) -> dict:
        """The tensor's tag formulas at `index`; ⊤ outside unless the access is guarded."""
        env = {f"c{a}": i for a, i in enumerate(index)}
        return {n: Tag(subst(e, env), FALSE if guard else Not(inside))
                for n, e in self.tensor_tags.get(tensor.name, ())}

    def check_bounds(self, op, inside, thread, what, element):
        def describe(witness):
            return {"element": element(witness)}
        self.obligation(op, "out-of-bounds", what, inside, (), thread, describe)

    def global_access(self, op, tensor, t: RegType, write: bool):
        index, inside = self.global_index(op, tensor, op.origin, op.axes, t.layout)
        if not op.guard:
            self.check_bounds(op, inside, self.thread(t),
                              f"access outside {tensor} of shape [{_shape(tensor)}]",
                              _evaluator({f"{tensor.name}[{a}]": i for a, i in enumerate(index)}))
        if self.collect:
            self.order += 1
            self.global_accesses.append(_GlobalAccess(
                op, write and not isinstance(op, O.GlobalAtomicAdd), tensor.name,
                tuple(index), inside, self.thread(t), self.guard, tuple(self.loops),
                tuple(self.assumes), self.order, op.gather is not None))
        return index, inside

    def op_Distinct(self, op: O.Distinct):
        self.distinct = self.distinct + ((op.tensor.name, op.lo, op.hi),)

    def op_ScalarLoad(self, op: O.ScalarLoad):
        if self.loops:
            raise VerifyError(f"{op.loc}: scalar.load inside a loop: the verifier binds a "
                              "loaded scalar once per workgroup; load it before the loop")
        t = op.tensor.type
        inside = And(*(And(0 <= i, i < e) for i, e in zip(op.index, t.shape)))
        self.check_bounds(op, inside, (), f"scalar read outside {op.tensor} of shape "
                                          f"[{_shape(op.tensor)}]",
                          _evaluator({f"{op.tensor.name}[{a}]": i
                                      for a, i in enumerate(op.index)}))
        # any value in the declared range: the interpreter rejects values outside it
        self.assumes += [op.var >= op.var.lo, op.var < op.var.hi]
        if op.bounds:
            lo, hi = op.bounds
            self.assumes += [op.var >= lo, op.var < hi]
        self.scalar_loads[op.var.name] = (op.tensor.name, op.index)

    def op_GlobalLoad(self, op: O.GlobalLoad):
        t = op.result.type
        index, inside = self.global_access(op, op.tensor, t, write=False)
        self.values[op.result.name] = tile_tags(
            self.thread(t), self.global_tags(op.tensor, index, inside, op.guard))

    def op_GlobalStore(self, op: O.GlobalStore):
        t = op.value.type
        thread = self.thread(t)
        index, inside = self.global_access(op, op.tensor, t, write=True)
        value = self.tags(op.value).at(*thread)
        roles = {"V": value.tags, "D": self.global_tags(op.tensor, index, inside, op.guard)}
        self.assertions(op, roles, value.defs, thread, _coords(t))

    op_GlobalAtomicAdd = op_GlobalStore

    # elementwise

    def op_Unary(self, op: O.Unary):
        thread = self.thread(op.x.type)
        x = self.tags(op.x).at(*thread)
        self.assertions(op, {"X": x.tags}, x.defs, thread, _coords(op.x.type))
        self.values[op.result.name] = self.tags(op.x)

    def op_Cast(self, op: O.Cast):
        self.values[op.result.name] = self.tags(op.x)

    def op_Binary(self, op: O.Binary):
        thread = self.thread(op.x.type)
        if self.tags(op.x) == self.tags(op.y):
            x = self.tags(op.x).at(*thread)
            self.assertions(op, {"X": x.tags, "Y": x.tags}, x.defs, thread, _coords(op.x.type))
            self.values[op.result.name] = self.tags(op.x)
            return
        x, y = self.tags(op.x).at(*thread), self.tags(op.y).at(*thread)
        self.assertions(op, {"X": x.tags, "Y": y.tags}, x.defs + y.defs, thread,
                        _coords(op.x.type))
        merged = dict(x.tags)
        for name, tag in y.tags.items():
            merged[name] = merge_tags(x.tags[name], tag) if name in x.tags else tag
        self.values[op.result.name] = tile_tags(thread, merged, x.defs + y.defs)

    def op_Mask(self, op: O.Mask):
        t = op.x.type
        thread = self.thread(t)
        keep = subst(op.keep, {f"c{a}": c for a, c in enumerate(t.layout.coords)})
        x = self.tags(op.x).at(*thread)
        self.assertions(op, {"X": x.tags}, x.defs, thread, _coords(t), agree=keep)
        self.values[op.result.name] = self.tags(op.x)

    # cross-lane

    def holder(self, x_type: RegType, x: TileTags, wave, wanted, axis_dropped):
        """A fresh thread of x's layout (same wave) holding an element whose coordinates,
        without `axis_dropped`, equal `wanted`: (instance, holding condition)."""
        lane = fresh_var("hlane", 0, LANES)
        slot = fresh_var("hslot", 0, x_type.layout.slots)
        coords = list(L.thread_exprs(x_type.layout, wave, lane, slot))
        if axis_dropped is not None:
            del coords[axis_dropped]
        held = And(*(c.eq(w) for c, w in zip(coords, wanted)))
        return x.at(wave, lane, slot), held

    def exchange(self, op, x_type, result_type, wanted_axis, drop_names=()):
        """Tags after a cross-lane exchange: any holder's value, ⊤ unless all holders agree."""
        thread = self.thread(result_type)
        coords = list(result_type.layout.coords)
        if wanted_axis is not None and len(coords) > len(x_type.shape):
            del coords[wanted_axis]
        x = self.tags(op.x)
        dropped = wanted_axis if len(coords) < len(x_type.shape) else None
        first, held_first = self.holder(x_type, x, thread[0], coords, dropped)
        other, held_other = self.holder(x_type, x, thread[0], coords, dropped)
        kept = [n for n in first.tags if n not in drop_names]
        # When every holder of an element carries the same tags (one query), any holder
        # stands for all; this keeps later queries linear in the number of exchanges.
        agree = Or(Not(held_other), *[] if not kept else
                   [And(*(equal_tags(first.tags[n], other.tags[n]) for n in kept))])
        context = self.assumes + [held_first] + list(first.defs + other.defs)
        context += gather_constraints([agree, *context], self.distinct)
        if not kept or (not self.scouting and self.holds(agree, context)):
            tags = {n: first.tags[n] for n in kept}
            self.values[op.result.name] = tile_tags(thread, tags, (held_first,) + first.defs)
            return
        tags = {}
        for name in kept:
            tag, alt = first.tags[name], other.tags[name]
            tags[name] = Tag(tag.value, Or(tag.top, And(held_other, Or(alt.top,
                                                                       alt.value.ne(tag.value)))))
        defs = (held_first,) + first.defs + other.defs
        self.values[op.result.name] = tile_tags(thread, tags, defs)

    def op_Reduce(self, op: O.Reduce):
        self.exchange(op, op.x.type, op.result.type, op.axis, op.drop)

    def op_Broadcast(self, op: O.Broadcast):
        self.exchange(op, op.x.type, op.result.type, op.axis)

    def op_SlotSlice(self, op: O.SlotSlice):
        thread = self.thread(op.result.type)
        inst = self.tags(op.x).at(thread[0], thread[1], thread[2] + op.start)
        self.values[op.result.name] = tile_tags(thread, inst.tags, inst.defs)

    # MFMA

    def op_Mfma(self, op: O.Mfma):
        from argus.isa_cdna3.mfma import mfma

        info = mfma(op.instr)
        a_type = op.a.type
        wave, lane, slot = thread_vars(a_type.layout.waves, info.k_per_lane)
        lb, sb = fresh_var("lane_b", 0, LANES), fresh_var("slot_b", 0, info.k_per_lane)
        lc, sc = fresh_var("lane_c", 0, LANES), fresh_var("slot_c", 0, info.c_values)
        blk, i, k = info.a_coord(lane, slot)
        blk_b, k_b, j = info.b_coord(lb, sb)
        blk_c, i_c, j_c = info.c_coord(lc, sc)
        meet = [blk.eq(blk_b), blk.eq(blk_c), k.eq(k_b), i.eq(i_c), j.eq(j_c)]
        a = self.tags(op.a).at(wave, lane, slot)
        b = self.tags(op.b).at(wave, lb, sb)
        c = self.tags(op.c).at(wave, lc, sc)

        def element(witness):
            env = dict(witness)
            return {"block": evaluate(blk, env), "i": evaluate(i, env),
                    "j": evaluate(j, env), "k": evaluate(k, env)}
        self.assertions(op, {"A": a.tags, "B": b.tags, "C": c.tags},
                        meet + list(a.defs + b.defs + c.defs), (wave, lane, slot), element)
        self.values[op.result.name] = self.mfma_result(op, info)

    def mfma_result(self, op, info) -> TileTags:
        """Row tags from A[i, 0], column tags from B[0, j]; tags both carry are dropped."""
        thread = self.thread(op.result.type)
        blk, i, j = info.c_coord(thread[1], thread[2])
        la, sa = fresh_var("alane", 0, LANES), fresh_var("aslot", 0, info.k_per_lane)
        lb, sb = fresh_var("blane", 0, LANES), fresh_var("bslot", 0, info.k_per_lane)
        a_blk, a_i, a_k = info.a_coord(la, sa)
        b_blk, b_k, b_j = info.b_coord(lb, sb)
        defs = [And(a_blk.eq(blk), a_i.eq(i), a_k.eq(0)), And(b_blk.eq(blk), b_j.eq(j),
                                                               b_k.eq(0))]
        a = self.tags(op.a).at(thread[0], la, sa)
        b = self.tags(op.b).at(thread[0], lb, sb)
        shared = set(a.tags) & set(b.tags)
        tags = {n: t for n, t in a.tags.items() if n not in shared}
        tags.update({n: t for n, t in b.tags.items() if n not in shared})
        return tile_tags(thread, tags, defs + list(a.defs + b.defs))

    # LDS

    def op_LdsAlloc(self, op: O.LdsAlloc):
        self.lds[op.result.name] = L.Empty()
        self.lds_size[op.result.name] = op.result.type.size

    def lds_access(self, op, buffer, t: RegType):
        thread = self.thread(t)
        view = L.view_coords(op.addr, op.origin, t.layout.coords)
        address = op.addr.at(view)
        inside = simplify(L.inside_view(op.addr, view, address, self.lds_size[buffer.name]))
        shown = {f"d{a}": v for a, v in enumerate(view)} | {"address": address}
        self.check_bounds(op, inside, thread,
                          f"LDS access outside the view {list(op.addr.shape)} / allocation of "
                          f"{self.lds_size[buffer.name]} elements", _evaluator(shown))
        if self.collect:
            self.order += 1
            self.accesses.append(L.Access(
                op, isinstance(op, O.LdsStore), buffer.name, op.addr, op.origin, t.layout,
                self.lds_size[buffer.name], self.guard, self.epoch, tuple(self.loops),
                self.order))
        return thread, view, address, inside, _evaluator(shown)

    def op_LdsStore(self, op: O.LdsStore):
        t = op.value.type
        thread, *_ , element = self.lds_access(op, op.buffer, t)
        value = self.tags(op.value)
        inst = value.at(*thread)
        self.assertions(op, {"V": inst.tags}, inst.defs, thread, _coords(t))
        record = L.WriteRec(op, op.addr, op.origin, value, t.layout, t.shape,
                            self.lds_size[op.buffer.name], self.guard, self.epoch)
        self.lds[op.buffer.name] = L.push(self.lds[op.buffer.name], record)
        if self.loop_writes:
            written = self.loop_writes[-1].setdefault(op.buffer.name, [])
            if written is not None:
                written.append(record)

    def op_LdsLoad(self, op: O.LdsLoad):
        t = op.result.type
        thread, view, address, inside, element = self.lds_access(op, op.buffer, t)
        state = self.lds[op.buffer.name]
        site = L.ReadSite(op.addr, view, address, thread[0] * LANES + thread[1], self.epoch)
        names = sorted(L.record_names(state))
        res = L.resolve(state, site, names)
        tags = {n: Tag(res.values[n], Or(res.tops[n], Not(inside))) for n in names}
        self.values[op.result.name] = tile_tags(thread, tags, res.defs)
        self.obligation(op, "lds-race",
                        "read-after-write race: another thread wrote this LDS address with no "
                        "barrier in between",
                        Or(Not(inside), And(Not(res.race), Not(res.opaque))), res.defs, thread,
                        lambda w: {"element": element(w)})
        self.obligation(op, "lds-uninitialised", "reads LDS that no thread has written",
                        Or(Not(inside), And(Not(res.uninitialised), Not(res.opaque))),
                        res.defs, thread, lambda w: {"element": element(w)})

    def op_Barrier(self, op: O.Barrier):
        if self.in_branch:
            raise VerifyError(f"{op.loc}: barrier inside a branch: every wave must reach the "
                              "same barriers; move it out of the `when` block")
        self.epoch = simplify(self.epoch + 1)

    # control flow

    def op_If(self, op: O.If):
        outer_guard, outer_branch = self.guard, self.in_branch
        produced = []
        for cond, block in ((op.cond, op.then), (Not(op.cond), op.orelse)):
            self.assumes.append(cond)
            self.guard, self.in_branch = simplify(And(outer_guard, cond)), True
            produced.append(self.execute(block))
            self.assumes.pop()
        self.guard, self.in_branch = outer_guard, outer_branch
        for result, then, orelse in zip(op.results, *produced):
            self.values[result.name] = _join(op.cond, then, orelse, self.thread(result.type))

    def op_For(self, op: O.For):
        if self.unroll is not None:
            self.unrolled_for(op)
            return
        loop = LoopCtx(op.iv, op.start, op.stop, op.step)
        trips = _trips(op)
        barriers = _barriers(op.body)
        entry_epoch, entry_lds = self.epoch, dict(self.lds)
        depth = max(1, op.stages - 1)
        inits = [self.tags(v) for v in op.inits]
        cands = list(inits)
        widened: set[int] = set()
        records = None
        outer_collect = self.collect
        self.collect = False
        converged = False
        for _ in range(MAX_LOOP_PASSES):
            stable_check = records is not None
            # a pass that turns out to be the fixpoint is the final one: collect its
            # obligations speculatively and drop them otherwise
            self.collect = outer_collect and stable_check
            # the first pass only learns which LDS writes the body makes: skip its queries
            outer_scouting, self.scouting = self.scouting, self.scouting or not stable_check
            mark = self.mark()
            yields, writes, failing = self.loop_pass(
                op, loop, cands, records, depth, entry_epoch, entry_lds, barriers,
                widened if stable_check else set(range(len(inits))))
            self.collect, self.scouting = False, outer_scouting
            if stable_check and not failing and _same_records(records, writes):
                converged = True
                break
            self.rewind(mark)
            if not stable_check or not _same_records(records, writes):
                records = writes
                continue
            for index in failing:
                cands[index] = _widen(inits[index], yields[index], op.iv.eq(op.start))
                widened.add(index)
        if not converged:
            # no inductive LDS layering: older iterations' writes become ⊤
            records = None
            for _ in range(MAX_LOOP_PASSES):
                yields, writes, failing = self.loop_pass(op, loop, cands, None, depth,
                                                         entry_epoch, entry_lds, barriers,
                                                         widened)
                for index in failing:
                    cands[index] = _widen(inits[index], yields[index], op.iv.eq(op.start))
                    widened.add(index)
                if not failing:
                    break
            else:
                cands = [_widen(i, i, op.iv.eq(op.start)) for i in inits]
        self.collect = outer_collect
        if not converged:
            yields, writes, _ = self.loop_pass(op, loop, cands, records, depth, entry_epoch,
                                               entry_lds, barriers, set(range(len(inits))))
        last = simplify(op.start + (trips - 1) * op.step)
        ran = simplify(trips > 0)
        for result, init, y in zip(op.results, inits, yields):
            self.values[result.name] = _join(ran, y.substitute({op.iv.name: last}), init,
                                             self.thread(result.type))
        exit_at = simplify(op.start + trips * op.step)
        for name, state in entry_lds.items():
            if name in writes:
                known = None if records is None else records[name]
                self.lds[name] = L.Layers(op.iv, op.start, op.step,
                                          None if known is None else tuple(known),
                                          depth, exit_at, state)
            else:
                self.lds[name] = state
        if self.loop_writes:
            # an enclosing loop cannot replay these writes as flat records of its own body
            self.loop_writes[-1].update({name: None for name in writes})
        self.epoch = simplify(entry_epoch + trips * barriers)

    # bounded unrolling

    def check_bounded_sizes(self):
        """Refuse a bound that no size satisfies: every obligation would hold vacuously."""
        grid = [bound for op in O.walk(self.kernel.body) if isinstance(op, O.ProgramId)
                for bound in ((op.var >= 0, op.var < self.kernel.grid[op.axis])
                              if op.axis < len(self.kernel.grid) else (op.var.eq(0),))]
        if not self.holds(FALSE, self.assumes + grid):
            return
        base = self.assumes[:len(self.assumes) - len(self.trip_bounds)] + grid
        for op, reached, trips in self.trip_bounds:
            if self.holds(FALSE, base + [_at_most(reached, trips, self.unroll)]):
                least = next((n for n in range(self.unroll + 1, MAX_SUGGESTED_UNROLL + 1)
                              if not self.holds(FALSE, base + [_at_most(reached, trips, n)])),
                             None)
                need = (f"give unroll={least} or more" if least else
                        f"it runs more than {MAX_SUGGESTED_UNROLL}: pin smaller sizes")
                raise VerifyError(f"{op.loc}: unroll={self.unroll} leaves no size to check: "
                                  f"this loop runs more than {self.unroll} iterations at "
                                  f"every size kernel {self.kernel.name} admits; {need}")
        raise VerifyError(f"unroll={self.unroll} leaves no size to check for kernel "
                          f"{self.kernel.name}: its loops cannot all run at most "
                          f"{self.unroll} iterations at one size (with the sizes pinned); give "
                          "a larger unroll, or pin other sizes")

    def unrolled_for(self, op: O.For):
        """The loop's first `unroll` iterations, each a copy of the body run only where the
        loop has that many trips (a path condition, as in a branch). Inside copy i the
        induction variable is pinned to start + i*step by an assumption; whatever the copy
        leaves behind (carried tiles, LDS writes, recorded accesses) gets the value
        substituted, so the next copy may pin the same variable again."""
        loop = LoopCtx(op.iv, op.start, op.stop, op.step)
        trips = _trips(op)
        entry_epoch, barriers = self.epoch, _barriers(op.body)
        outer_values, outer_assumes, outer_guard = dict(self.values), list(self.assumes), \
            self.guard
        carried = [self.tags(v) for v in op.inits]
        results = list(carried)
        for copy in range(self.unroll):
            at = simplify(op.start + copy * op.step)
            runs = simplify(Const(copy) < trips)
            if runs is FALSE:
                break  # a loop of constant trip count needs no more copies
            mark, entry_lds = self.mark(), dict(self.lds)
            self.assumes = outer_assumes + [runs, op.iv.eq(at)]
            self.guard = simplify(And(outer_guard, runs))
            self.loops.append(loop)
            for arg, tile in zip(op.body.args, carried):
                self.values[arg.name] = tile
            yields = self.execute(op.body)
            self.loops.pop()
            pin = {op.iv.name: at}
            carried = [tile.substitute(pin) for tile in yields]
            self.settle_copy(mark, entry_lds, pin, loop)
            results = [_join(runs, tile, before, self.thread(result.type))
                       for result, tile, before in zip(op.results, carried, results)]
        self.values, self.assumes, self.guard = outer_values, outer_assumes, outer_guard
        for result, tile in zip(op.results, results):
            self.values[result.name] = tile
        self.epoch = simplify(entry_epoch + trips * barriers)

    def settle_copy(self, mark: tuple, entry_lds: dict, pin: dict, loop: LoopCtx):
        """Fix the induction variable to its value in what a copy of a loop body recorded
        since `mark`: its LDS writes, LDS and global accesses, and the epoch it ends in. The
        accesses stop naming the loop: the race checks pair copies as straight-line code."""
        for name, state in self.lds.items():
            self.lds[name] = _settled(entry_lds.get(name), state, pin)
        _, accesses, global_accesses, _ = mark
        for index in range(accesses, len(self.accesses)):
            access = self.accesses[index]
            self.accesses[index] = attrs.evolve(
                access, origin=tuple(simplify(subst(o, pin)) for o in access.origin),
                guard=simplify(subst(access.guard, pin)),
                epoch=simplify(subst(access.epoch, pin)),
                loops=tuple(c for c in access.loops if c is not loop))
        for index in range(global_accesses, len(self.global_accesses)):
            access = self.global_accesses[index]
            # a gathered row read in this copy is the index entry at this copy's position
            mapping = renamed_rows([*access.index, access.inside, access.guard], pin)
            self.global_accesses[index] = attrs.evolve(
                access, index=tuple(subst(i, mapping) for i in access.index),
                inside=subst(access.inside, mapping), guard=subst(access.guard, mapping),
                assumes=tuple(subst(a, mapping) for a in access.assumes),
                loops=tuple(c for c in access.loops if c is not loop))
        self.epoch = simplify(subst(self.epoch, pin))

    def mark(self) -> tuple:
        return len(self.pending), len(self.accesses), len(self.global_accesses), self.order

    def rewind(self, mark: tuple):
        """Forget what a speculative loop pass recorded."""
        pending, accesses, global_accesses, self.order = mark
        del self.pending[pending:], self.accesses[accesses:]
        del self.global_accesses[global_accesses:]

    def loop_pass(self, op, loop, cands, records, depth, entry_epoch, entry_lds, barriers,
                  trusted):
        """One abstract run of the body at symbolic iteration iv: returns the yielded maps, the
        LDS writes per buffer and the carried values whose candidate invariant failed."""
        saved = (dict(self.values), dict(self.lds), self.epoch, list(self.assumes))
        self.loops.append(loop)
        self.loop_writes.append({})
        self.assumes += loop.bounds()
        self.epoch = simplify(entry_epoch + (op.iv - op.start) // op.step * barriers)
        for name, state in entry_lds.items():
            known = None if records is None else records.get(name, ())
            body = None if known is None else tuple(known)
            self.lds[name] = L.Layers(op.iv, op.start, op.step, body, depth, op.iv, state)
        for arg, cand in zip(op.body.args, cands):
            self.values[arg.name] = cand
        yields = self.execute(op.body)
        failing = [index for index, (y, cand) in enumerate(zip(yields, cands))
                   if index not in trusted and not self.same_tags(y, cand)]
        writes = {n: None if rs is None else list(rs)
                  for n, rs in self.loop_writes.pop().items()}
        self.loops.pop()
        self.values, self.lds, self.epoch, self.assumes = saved
        return yields, writes, failing

    def same_tags(self, y: TileTags, cand: TileTags) -> bool:
        """Does the body preserve the candidate invariant of this carried tile?"""
        if set(y.names) != set(cand.names):
            return False
        a, b = y.at(*cand.thread), cand.at(*cand.thread)
        goal = And(*(equal_tags(a.tags[n], b.tags[n]) for n in cand.names))
        context = self.assumes + list(a.defs + b.defs)
        context += gather_constraints([goal, *context], self.distinct)
        return self.holds(goal, context)

    # races and budgets

    def check_races(self):
        """Write/write and write-after-read races: two symbolic threads, two iterations."""
        for later in self.accesses:
            if not later.write:
                continue
            pairs = [self.race_pair(earlier, later) for earlier in self.accesses
                     if earlier.buffer == later.buffer]
            pairs = [p for p in pairs if p is not None]
            if not pairs:
                self.obligations.append(Obligation("lds-race", LDS_RACE,
                                                   str(later.op.loc), PROVED))
                continue
            thread = pairs[0][1]
            defs = [d for p in pairs for d in p[2]]
            saved_loops, self.loops = self.loops, list(later.loops)
            saved_assumes = self.assumes
            self.assumes = self.assumes + [b for c in later.loops for b in c.bounds()]
            conds = [p[0] for p in pairs]

            def describe(witness, pairs=pairs):
                for cond, _, _, earlier, other in pairs:
                    if evaluate(cond, witness):
                        kind = "written" if earlier.write else "read"
                        w, lane = (witness.get(v.name, 0) for v in other[:2])
                        return {"detail": f"also {kind} by wave {w} lane {lane} at "
                                          f"{earlier.op.loc}"}
                return {}
            self.obligation(later.op, "lds-race", LDS_RACE, Not(Or(*conds)), defs,
                            thread, describe)
            self.loops, self.assumes = saved_loops, saved_assumes

    def race_pair(self, earlier: L.Access, later: L.Access):
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
        same_iteration_first = TRUE if earlier.order <= later.order else FALSE
        constraints.append(Or(*lex, And(*eqs, same_iteration_first)))
        epoch_eq = subst(earlier.epoch, mapping).eq(later.epoch)
        context = self.assumes + [b for c in later.loops for b in c.bounds()] + constraints
        if self.holds(Not(epoch_eq), context):
            return None
        thread, tid, address, inside = later.footprint({})
        other, tid_other, address_other, inside_other = earlier.footprint(mapping)
        cond = And(*constraints, epoch_eq, later.guard, subst(earlier.guard, mapping), inside,
                   inside_other, address.eq(address_other), tid.ne(tid_other))
        return cond, thread, [], earlier, other

    def check_global_races(self):
        """Workgroups are unordered: a store to an element that another workgroup stores or
        loads is a race. Two symbolic workgroups, threads and iterations per pair of ops.
        Where rows are gathered, the index data decides: the check needs every index tensor
        involved declared with `T.distinct`, and is Unknown otherwise."""
        stored = {a.tensor for a in self.global_accesses if a.write}
        for later in self.global_accesses:
            if later.tensor not in stored:
                continue
            pairs = [self.global_pair(other, later) for other in self.global_accesses
                     if other.tensor == later.tensor and (other.write or later.write)
                     and other.order <= later.order]
            if not pairs:
                continue
            indices = {a.op.gather.index.name for a in [later, *(o for _, (o, _) in pairs)]
                       if a.gathered}
            undeclared = sorted(indices - {name for name, _, _ in self.distinct})
            if undeclared:
                self.obligations.append(Obligation(
                    "global-race", "another workgroup may access the element this op "
                    f"{'stores' if later.write else 'loads'}", str(later.op.loc), UNKNOWN,
                    reason=f"the rows come from the gather index {', '.join(undeclared)}, whose "
                           "contents decide it; if its entries in a range [lo, hi) never "
                           f"repeat, declare it with T.distinct({undeclared[0]}, lo, hi) at "
                           "the top of the kernel and the verifier will use that fact"))
                continue
            conds = [c for c, _ in pairs]
            goal = Not(Or(*conds))

            def describe(witness, pairs=pairs, later=later):
                for cond, (other, pid_map) in pairs:
                    if evaluate(cond, witness):
                        group = tuple(witness.get(pid_map[p.name].name, 0)
                                      for p in (self.pids.get(a) for a in range(3))
                                      if p is not None)
                        return {"detail": f"workgroup {group} also "
                                          f"{'stores' if other.write else 'loads'} it at "
                                          f"{other.op.loc}", "workgroups": group}
                return {}
            saved = self.assumes, self.loops
            self.assumes, self.loops = list(later.assumes), list(later.loops)
            self.obligation(later.op, "global-race",
                            f"another workgroup accesses the element this op "
                            f"{'stores' if later.write else 'loads'}; workgroups are unordered",
                            goal, tuple(distinct_constraints([goal], self.distinct)),
                            later.thread, describe)
            self.assumes, self.loops = saved

    def global_pair(self, other: _GlobalAccess, later: _GlobalAccess):
        """Condition under which `other`, run by a second workgroup, touches what `later`
        touches; and the renaming of that workgroup's variables."""
        mapping = {}
        for pid in self.pids.values():
            mapping[pid.name] = fresh_var(pid.name, pid.lo, pid.hi)
        for ctx in other.loops:
            mapping[ctx.iv.name] = fresh_var(ctx.iv.name, ctx.iv.lo, ctx.iv.hi)
        for v in other.thread:
            mapping[v.name] = fresh_var(v.name, v.lo, v.hi)
        touched = [*other.index, other.inside, other.guard]
        # the second workgroup reads its own scalars and gathered rows: the same variable in
        # both workgroups would claim the index data holds one value at two positions
        positions = [GATHERED[v.name][2] for v in fresh_in(*touched) if v.name in GATHERED]
        loaded = {v for e in touched + positions for v in node_vars(e)
                  if v.name in self.scalar_loads}
        scalars_agree = []
        for var in sorted(loaded, key=lambda v: v.name):
            tensor, index = self.scalar_loads[var.name]
            copy = fresh_var(var.name, var.lo, var.hi)
            mapping[var.name] = copy
            where = tuple(subst(i, mapping) for i in index)
            self.scalar_loads[copy.name] = (tensor, where)
            scalars_agree.append(Or(Not(And(*(a.eq(b) for a, b in zip(where, index)))),
                                    copy.eq(var)))
        mapping = renamed_rows(touched, mapping)
        context = [subst(a, mapping) for a in other.assumes]
        differ = Or(*(pid.ne(mapping[pid.name]) for pid in self.pids.values()))
        same = And(*(subst(i, mapping).eq(j) for i, j in zip(other.index, later.index)))
        cond = And(*context, *scalars_agree, *(v >= v.lo for v in other.thread),
                   subst(other.guard, mapping), later.guard, subst(other.inside, mapping),
                   later.inside, same, differ)
        return cond, (other, mapping)

    def check_budgets(self):
        lds_bytes = self.kernel.lds_bytes
        self.obligations.append(Obligation(
            "budget", f"LDS use {lds_bytes} of {LDS_BUDGET} bytes per workgroup",
            str(self.kernel.loc), PROVED if lds_bytes <= LDS_BUDGET else REFUTED))
        widest = max((v.type.vgprs for op in self.kernel.ops() for v in op.results
                      if isinstance(v.type, RegType)), default=0)
        self.obligations.append(Obligation(
            "budget", f"largest register tile {widest} of {VGPR_BUDGET} VGPRs per lane",
            str(self.kernel.loc), PROVED if widest <= VGPR_BUDGET else REFUTED))


def _shape(tensor) -> str:
    return ", ".join(map(str, tensor.type.shape))


LDS_RACE = ("this write may race with another thread's access to the same LDS address in the "
            "same barrier epoch (write/write or write-after-read)")


def _barriers(block: O.Block) -> Expr:
    count: Expr = Const(0)
    for op in block.ops:
        if isinstance(op, O.Barrier):
            count = count + 1
        elif isinstance(op, O.For):
            trips = max_(0, (op.stop - op.start + op.step - 1) // op.step)
            count = count + trips * _barriers(op.body)
        elif isinstance(op, O.If):
            for inner in op.blocks:
                if any(isinstance(x, O.Barrier) for x in O.walk(inner)):
                    raise VerifyError(f"{op.loc}: barrier inside a branch: every wave must "
                                      "reach the same barriers; move it out of the branch")
    return simplify(count)


def _trips(op: O.For) -> Expr:
    return max_(0, (op.stop - op.start + op.step - 1) // op.step)


def _at_most(reached: Expr, trips: Expr, unroll: int) -> Expr:
    return simplify(Or(Not(reached), trips <= unroll))


def _trip_bounds(block: O.Block, unroll: int, reached: Expr = TRUE, pins=None) -> list:
    """(loop, where it is reached, its trip count) per loop and per unrolled copy of its
    enclosing loops. Outer induction variables are replaced by each copy's value, so the
    formulas mention sizes, scalars and workgroup ids only."""
    pins = pins or {}
    bounds = []
    for op in block.ops:
        if isinstance(op, O.For):
            trips = subst(_trips(op), pins)
            bounds.append((op, reached, trips))
            for copy in range(unroll):
                runs = simplify(Const(copy) < trips)
                if runs is FALSE:
                    break
                inner = {**pins, op.iv.name: subst(op.start + copy * op.step, pins)}
                bounds += _trip_bounds(op.body, unroll, And(reached, runs), inner)
        elif isinstance(op, O.If):
            cond = subst(op.cond, pins)
            bounds += _trip_bounds(op.then, unroll, And(reached, cond), pins)
            bounds += _trip_bounds(op.orelse, unroll, And(reached, Not(cond)), pins)
        else:
            for inner_block in op.blocks:
                bounds += _trip_bounds(inner_block, unroll, reached, pins)
    return bounds


def _settled(entry, state, pin: dict):
    """`state` with the writes made since `entry` given the pinned induction variable."""
    if state is entry or not isinstance(state, L.Writes):
        return state
    kept = 0
    if isinstance(entry, L.Writes) and state.below is entry.below and \
            all(a is b for a, b in zip(state.records, entry.records)):
        kept = len(entry.records)
    made = tuple(record.substitute(pin) for record in state.records[kept:])
    return L.Writes(state.records[:kept] + made, state.below)


def _join(cond, then: TileTags, orelse: TileTags, thread) -> TileTags:
    if then == orelse and then.thread == tuple(thread):
        return then
    a, b = then.at(*thread), orelse.at(*thread)
    names = list(dict.fromkeys(list(a.tags) + list(b.tags)))
    tags = {n: join_tags(cond, a.tags.get(n, TOP_TAG), b.tags.get(n, TOP_TAG)) for n in names}
    return tile_tags(thread, tags, a.defs + b.defs)


def _widen(init: TileTags, y: TileTags, first) -> TileTags:
    """The init's tags at the first iteration, ⊤ afterwards."""
    names = list(dict.fromkeys(list(init.names) + list(y.names)))
    inst = init.at(*init.thread)
    tags = {n: join_tags(first, inst.tags.get(n, TOP_TAG), TOP_TAG) for n in names}
    return tile_tags(init.thread, tags, inst.defs)


def _canonical(tile: TileTags):
    ordered = sorted(tile.fresh, key=lambda v: int(v.name.rpartition("__")[2]))
    mapping = {v.name: Var(f"{v.name.rpartition('__')[0]}__c{n}", v.lo, v.hi)
               for n, v in enumerate(ordered)}
    return tile.substitute(mapping)


def _same_records(old: dict, new: dict) -> bool:
    if set(old) != set(new):
        return False
    for name in old:
        if old[name] is None or new[name] is None:
            if old[name] is not new[name]:
                return False
            continue
        if len(old[name]) != len(new[name]):
            return False
        for a, b in zip(old[name], new[name]):
            if a.op is not b.op or attrs.evolve(a, tile=_canonical(a.tile)) != \
                    attrs.evolve(b, tile=_canonical(b.tile)):
                return False
    return True


def _show(tag: Tag, witness: dict):
    try:
        if evaluate(tag.top, witness):
            return None
        return int(evaluate(tag.value, witness))
    except (KeyError, ZeroDivisionError, ValueError):
        return None


def _evaluator(named: dict):
    def element(witness):
        out = {}
        for name, e in named.items():
            try:
                out[name] = int(evaluate(e, witness))
            except (KeyError, ZeroDivisionError, ValueError):
                out[name] = None
        return out
    return element


def _coords(t: RegType):
    return _evaluator({f"c{a}": c for a, c in enumerate(t.layout.coords)})


__all__ = ["verify", "VerifyError"]

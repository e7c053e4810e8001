"""`verify(kernel, **sizes) -> Report`: prove every tag assertion and built-in check of a kernel
for all workgroups, waves, lanes, slots and loop iterations, with symbolic sizes, by abstract
interpretation over tag maps (`domain`) and the LDS model (`lds`) and quantifier-free SMT
queries. A refutation is reported only after its witness replays on the reference interpreter.
With `unroll=N` loops run as N copies of their body instead, for sizes where they fit in N.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import time

import numpy as np

from argus import env
from argus.absint import lds as L
from argus.absint import sync as S
from argus.absint.admissible import check_admissible, coverage
from argus.absint.domain import (
    FALSE,
    ROW_RANGE,
    TOP_TAG,
    TRUE,
    Tag,
    TileTags,
    equal_tags,
    forget_run_memos,
    fresh_var,
    gather_constraints,
    gathered_row,
    join_tags,
    join_tiles,
    merge_tags,
    tabulated,
    tabulated_over,
    tile_tags,
)
from argus.absint.global_order import GlobalOrder
from argus.absint.loops import LoopCtx, Loops, at_most, trip_bounds
from argus.absint.obligations import Obligations, Pending, evaluator
from argus.absint.races import GlobalAccess, Races
from argus.absint.report import (
    PROVED,
    REFUTED,
    Obligation,
    Report,
    VerifyError,
)
from argus.absint.rules import Walker, rule
from argus.ir import access as A
from argus.ir import ops as O
from argus.ir.expr import And, Const, Expr, Not, Or, Var, evaluate, free_vars, ite, max_, simplify
from argus.ir.expr import substitute as subst
from argus.ir.sizes import size_value
from argus.ir.transfer import cover_names, cover_union
from argus.ir.types import LANES, LDS_BUDGET, VGPR_BUDGET, RegType, thread_vars
from argus.smt import DEFAULT_TIMEOUT_MS, SmtError, check_options


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


def verify(kernel, *, solver: str = "z3", timeout_ms: int | None = None,
           replay: bool = True, jobs: int | None = None, unroll: int | None = None,
           rules: type | None = None,
           reference=None, **sizes_or_params) -> Report:
    """Verify `kernel` (a traced IR kernel or an `@kernel` function).

    Keyword arguments that name kernel parameters choose the trace; those that name sizes pin
    them (`M=256`), every other size stays symbolic. `jobs` worker processes decide the
    obligations (default: `ARGUS_JOBS`, else every core this process may use).

    `unroll=N` checks bounded executions instead: every loop runs its first N iterations as
    separate copies of its body, and sizes (or workgroups) for which some loop would run more
    than N iterations are assumed away. A Proved verdict then holds only for those sizes (the
    report says so); a Refuted one is still replayed, at sizes whose loops run at most N times.
    It finds bugs whose symbolic proof ends Unknown, at the price of generality.

    `timeout_ms` limits each solver query (default: ARGUS_SMT_TIMEOUT_MS, else
    argus.smt.DEFAULT_TIMEOUT_MS).

    `rules` replaces the transfer rules by a subclass of `Rules` (`argus.testing` plants
    deliberately wrong ones this way to show its soundness checks catch them).

    `reference(inputs) -> {output tensor name: expected array}` lets a replay check numbers:
    a tag assertion whose replayed violation still computes the reference's values at the
    asserted elements is reported Unknown, not Refuted (`argus.absint.replay`)."""
    started = time.perf_counter()
    if timeout_ms is None:
        timeout_ms = env.smt_timeout_ms(DEFAULT_TIMEOUT_MS)
    ir, pins = _trace(kernel, sizes_or_params)
    jobs = env.jobs() if jobs is None else jobs
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise VerifyError(f"jobs={jobs!r}: give at least 1 worker process (a whole number)")
    try:
        check_options(solver, timeout_ms)
    except SmtError as error:
        raise VerifyError(error.message) from None
    if unroll is not None and (isinstance(unroll, bool) or not isinstance(unroll, int)
                               or unroll < 1):
        raise VerifyError(f"unroll={unroll!r}: give a whole number N >= 1 of loop iterations "
                          "to check, or None for the symbolic proof of every size")
    if reference is not None and not callable(reference):
        raise VerifyError(f"reference={reference!r}: give a function inputs -> {{output tensor "
                          "name: expected array}}")
    verifier = (rules or _Verifier)(ir, pins, solver, timeout_ms, replay, jobs, unroll)
    verifier.reference = reference
    check_admissible(verifier, ir, pins)
    try:
        with collector_paused():
            verifier.run()
    finally:
        forget_run_memos()
    report = Report(ir.name, pins, tuple(verifier.obligations), tuple(verifier.bank_facts),
                    time.perf_counter() - started, unroll=unroll, coverage=coverage(ir, pins),
                    ir=ir)
    if env.debug_level() >= 1:
        print(report.summary(), file=sys.stderr)
    return report


def _trace(kernel, kwargs: dict):
    if isinstance(kernel, O.Kernel):
        ir, rest = kernel, dict(kwargs)
    elif not (callable(getattr(kernel, "trace", None))   # an @kernel (numpy arrays have .trace)
              and isinstance(getattr(kernel, "params", None), dict)):
        raise VerifyError(f"verify takes an @kernel function, a traced kernel or a library "
                          f"kernel name, not {kernel!r}")
    else:
        params = {k: v for k, v in kwargs.items() if k in getattr(kernel, "params", {})}
        rest = {k: v for k, v in kwargs.items() if k not in params}
        ir = kernel.trace(**params)
    sizes = {v.name: v for v in ir.sizes + ir.scalars}
    unknown = set(rest) - sizes.keys()
    if unknown:
        raise VerifyError(f"kernel {ir.name} has no size or parameter {sorted(unknown)}; its "
                          f"sizes are {sorted(sizes)}")
    return ir, {k: size_value(ir, sizes[k], v, error=VerifyError) for k, v in rest.items()}


class _Verifier(Obligations, Races, GlobalOrder, Loops, Walker):
    """The walk: one abstract transfer rule per op over the tag maps and the LDS model."""

    WHAT = "the verifier"
    ERROR = VerifyError
    #: the numeric reference a replay checks a tag violation against (`verify(reference=)`)
    reference = None

    def __init__(self, kernel: O.Kernel, pins: dict, solver: str, timeout_ms: int,
                 replay: bool, jobs: int = 1, unroll: int | None = None):
        self.kernel, self.solver, self.timeout_ms, self.replay = kernel, solver, timeout_ms, replay
        self.jobs, self.unroll = jobs, unroll
        sizes = {v.name: v for v in kernel.sizes + kernel.scalars}
        self.assumes: list[Expr] = [v >= v.lo for v in sizes.values()]
        self.assumes += list(kernel.assumes) + [sizes[n].eq(v) for n, v in pins.items()]
        #: (loop, where reached, trip count) per loop copy: a bounded run decides every
        #: obligation only where no loop outruns its copies
        self.trip_bounds = [] if unroll is None else trip_bounds(kernel.body, unroll)
        self.assumes += [at_most(reached, trips, unroll) for _, reached, trips in
                         self.trip_bounds]
        self.values: dict = {}
        self.tensor_tags: dict = {}
        self.lds: dict = {}
        self.lds_size: dict = {}
        self.epoch: Expr = Const(0)
        #: per group barrier of the kernel (`T.group_barrier`), its condition on `wave` and
        #: how many times it has run so far, a formula in the loop variables like the epoch
        self.group_ops = [op for op in kernel.ops() if isinstance(op, O.GroupBarrier)]
        self.groups: tuple = tuple((op.active, Const(0)) for op in self.group_ops)
        #: waits, barriers and copy groups passed (`absint.sync`); None: the classic model
        self.clock: S.Clock | None = S.Clock() if S.uses_clock(kernel) else None
        self.guard: Expr = TRUE
        self.loops: list[LoopCtx] = []
        self.loop_writes: list[dict] = []
        self.accesses: list[L.Access] = []
        self.global_accesses: list[GlobalAccess] = []
        self.scalar_loads: dict = {}
        #: declared facts about index data: (index tensor name, lo, hi) per `T.distinct`
        self.distinct: tuple = ()
        self.pids: dict[int, Var] = {}
        self.collect = True
        self.scouting = False
        self.in_branch = False
        self.obligations: list[Obligation] = []
        self.pending: list[Pending] = []
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
        self.check_global_order()
        self.decide_all()
        self.check_budgets()
        from argus.absint.banks import bank_facts

        self.bank_facts = bank_facts(self.kernel)

    def execute(self, block: O.Block):
        for op in block.ops:
            if isinstance(op, O.Yield):
                return [self.values[v.name] for v in op.values]
            # the op's own checks and effects, then its result's tags by its declared rule
            handler = self.rule_for(op)
            result = RESULT_TAGS.get(op.transfer)
            if handler is None and result is None:
                raise self.no_rule(op)
            if handler is not None:
                handler(self, op)
            if self.clock is not None and not op.blocks:
                self.clock = S.step(op, self.clock)
            if result is not None:
                self.values[op.results[0].name] = result(self, op)
            if block is self.kernel.body:
                self.decide_early()
        return []

    # helpers

    def tags(self, value) -> TileTags:
        return self.values[value.name]

    @staticmethod
    def thread(t: RegType):
        return thread_vars(t.layout.waves, t.layout.slots)

    # scalars and tags

    @rule(O.ProgramId)
    def on_program_id(self, op: O.ProgramId):
        self.pids[op.axis] = op.var
        if op.axis < len(self.kernel.grid):
            self.assumes += [op.var >= 0, op.var < self.kernel.grid[op.axis]]
        else:
            self.assumes.append(op.var.eq(0))

    @rule(O.TagDef)
    def on_tag_def(self, op: O.TagDef):
        self.tensor_tags[op.tensor.name] = op.tags

    def retag(self, op: O.TagTile) -> TileTags:
        t = op.result.type
        coords = {f"c{a}": c for a, c in enumerate(t.layout.coords)}
        return tile_tags(self.thread(t), {n: Tag(subst(e, coords)) for n, e in op.tags})

    def fresh(self, op: O.Full) -> TileTags:
        return TileTags(self.thread(op.result.type))

    # global memory

    def global_index(self, op):
        """The op's index formula (`ir.access`), a gathered row standing for the index data,
        and the constraints of the helpers a `rows=` index brings: (index, inside, defs)."""
        found = A.global_access(op)
        index, inside = found.index, found.inside
        if op.gather is not None:
            gather = op.gather
            length = gather.index.type.shape[0]
            self.check_bounds(op, found.gather_inside, self.thread(A.tile_of(op)),
                              f"gather position outside {gather.index} of length {length}",
                              evaluator({f"{gather.index.name}[0]": found.gather_position}))
            row = {A.GATHERED_ROW.name: gathered_row(gather.index.name, length,
                                                     found.gather_position)}
            index = tuple(subst(i, row) for i in index)
            inside = simplify(subst(inside, row))
        defs = ()
        if getattr(op, "rows", None) is not None:
            row, defs = self.register_row(op)
            index = tuple(subst(i, {A.GATHERED_ROW.name: row}) for i in index)
            inside = simplify(subst(inside, {A.GATHERED_ROW.name: row}))
        return list(index), inside, defs

    def register_row(self, op):
        """The row a `rows=` access takes from its index tile at this thread: the entry of the
        source tensor at the index element's position tag (any row where that tag is ⊤), and
        the constraints of the tag's helpers."""
        rows = op.rows
        inst = self.tags(rows.index).at(*self.thread(A.tile_of(op)))
        tag = inst.tags.get(rows.at)
        if tag is None:
            raise VerifyError(f"{op.loc}: {op.mnemonic}: rows index {rows.index} carries no tag "
                              f"{rows.at!r}, so nothing says which entry of {rows.source} it "
                              f"holds; tag {rows.source} with its positions, e.g. "
                              f"T.tag({rows.source.name}, lambda p: {{'{rows.at}': p}})")
        known = gathered_row(rows.source.name, rows.source.type.shape[0], tag.value)
        if tag.top is FALSE:
            return known, inst.defs
        return ite(tag.top, fresh_var("row", *ROW_RANGE), known), inst.defs

    def global_tags(self, tensor, index, inside, guard=False) -> dict:
        """The tensor's tag formulas at `index`; ⊤ outside unless the access is guarded."""
        env = {f"c{a}": i for a, i in enumerate(index)}
        return {n: Tag(subst(e, env), FALSE if guard else Not(inside))
                for n, e in self.tensor_tags.get(tensor.name, ())}

    def check_bounds(self, op, inside, thread, what, element, defs=()):
        def describe(witness):
            return {"element": element(witness)}
        self.obligation(op, "out-of-bounds", what, inside, defs, thread, describe)

    def global_access(self, op, tensor, t: RegType, write: bool):
        index, inside, defs = self.global_index(op)
        if not op.guard:
            self.check_bounds(op, Or(Not(O.active_of(op)), inside), self.thread(t),
                              f"access outside {tensor} of shape [{_shape(tensor)}]",
                              evaluator({f"{tensor.name}[{a}]": i for a, i in enumerate(index)}),
                              defs)
        if self.collect:
            self.order += 1
            self.global_accesses.append(GlobalAccess(
                op, write and not isinstance(op, O.GlobalAtomicAdd), tensor.name,
                tuple(index), inside, self.thread(t), And(self.guard, O.active_of(op)),
                tuple(self.loops),
                tuple(self.assumes), self.order,
                op.gather is not None or getattr(op, "rows", None) is not None,
                isinstance(op, O.GlobalAtomicAdd), self.epoch, tuple(defs),
                self.clock.waits if self.clock is not None and write else None, self.clock))
        return index, inside

    @rule(O.Distinct)
    def on_distinct(self, op: O.Distinct):
        self.distinct = self.distinct + ((op.tensor.name, op.lo, op.hi),)

    @rule(O.ScalarLoad)
    def on_scalar_load(self, op: O.ScalarLoad):
        if self.loops:
            raise VerifyError(f"{op.loc}: scalar.load inside a loop: the verifier binds a "
                              "loaded scalar once per workgroup; load it before the loop")
        _, inside = A.scalar_access(op)
        self.check_bounds(op, inside, (), f"scalar read outside {op.tensor} of shape "
                                          f"[{_shape(op.tensor)}]",
                          evaluator({f"{op.tensor.name}[{a}]": i
                                      for a, i in enumerate(op.index)}))
        # any value in the declared range: the interpreter rejects values outside it
        self.assumes += [op.var >= op.var.lo, op.var < op.var.hi]
        if op.bounds:
            lo, hi = op.bounds
            self.assumes += [op.var >= lo, op.var < hi]
        self.scalar_loads[op.var.name] = (op.tensor.name, op.index)

    @rule(O.GlobalLoad)
    def on_global_load(self, op: O.GlobalLoad):
        t = op.result.type
        index, inside = self.global_access(op, op.tensor, t, write=False)
        tags = self.global_tags(op.tensor, index, inside, op.guard)
        self.values[op.result.name] = tile_tags(self.thread(t), inactive_top(tags, op.active))

    @rule(O.GlobalStore, O.GlobalAtomicAdd)
    def on_global_store(self, op: O.GlobalStore):
        t = op.value.type
        thread = self.thread(t)
        index, inside = self.global_access(op, op.tensor, t, write=True)
        value = self.tags(op.value).at(*thread)
        roles = {"V": value.tags, "D": self.global_tags(op.tensor, index, inside, op.guard)}
        self.assertions(op, roles, value.defs, thread, _coords(t), where=op.active)

    # elementwise

    @rule(O.Unary)
    def on_unary(self, op: O.Unary):
        thread = self.thread(op.x.type)
        x = self.tags(op.x).at(*thread)
        self.assertions(op, {"X": x.tags}, x.defs, thread, _coords(op.x.type))

    def keep(self, op) -> TileTags:
        return self.tags(op.operands[0])

    def mark_trace(self, op: O.Mask) -> TileTags:
        """KEEP, and with a trace the tag `trace`: 1 where the mask kept the element (and an
        earlier mark with that name had 1), 0 where it filled it."""
        if not op.trace:
            return self.keep(op)
        t = op.x.type
        thread = self.thread(t)
        keep = subst(op.keep, {f"c{a}": c for a, c in enumerate(t.layout.coords)})
        x = self.tags(op.x).at(*thread)
        earlier = x.tags.get(op.trace, Tag(Const(1)))
        tags = dict(x.tags)
        tags[op.trace] = Tag(ite(keep, earlier.value, Const(0)), And(keep, earlier.top))
        return tile_tags(thread, tags, x.defs)

    @rule(O.Binary)
    def on_binary(self, op: O.Binary):
        thread = self.thread(op.x.type)
        if self.tags(op.x) == self.tags(op.y):
            x = self.tags(op.x).at(*thread)
            self.assertions(op, {"X": x.tags, "Y": x.tags}, x.defs, thread, _coords(op.x.type))
            return
        x, y = self.tags(op.x).at(*thread), self.tags(op.y).at(*thread)
        self.assertions(op, {"X": x.tags, "Y": y.tags}, x.defs + y.defs, thread,
                        _coords(op.x.type))

    @rule(O.Select)
    def on_select(self, op: O.Select):
        """The assertions of a select read X and Y as at a binary op (the mask has no role)."""
        self.on_binary(op)

    def union(self, op: O.Binary) -> TileTags:
        if self.tags(op.x) == self.tags(op.y):
            return self.tags(op.x)
        thread = self.thread(op.x.type)
        x, y = self.tags(op.x).at(*thread), self.tags(op.y).at(*thread)
        merged = dict(x.tags)
        for name, tag in y.tags.items():
            merged[name] = merge_tags(x.tags[name], tag) if name in x.tags else tag
        return tile_tags(thread, merged, x.defs + y.defs)

    @rule(O.Mask)
    def on_mask(self, op: O.Mask):
        t = op.x.type
        thread = self.thread(t)
        keep = subst(op.keep, {f"c{a}": c for a, c in enumerate(t.layout.coords)})
        x = self.tags(op.x).at(*thread)
        self.assertions(op, {"X": x.tags}, x.defs, thread, _coords(t), agree=keep)

    # cross-lane

    def holder(self, x_type: RegType, x: TileTags, wave, wanted, axis_dropped):
        """A fresh thread of x's layout (same wave) holding an element whose coordinates,
        without `axis_dropped`, equal `wanted`: (instance, holding condition)."""
        lane = fresh_var("hlane", 0, LANES)
        slot = fresh_var("hslot", 0, x_type.layout.slots)
        coords = list(A.tile_coords(x_type.layout, (wave, lane, slot)))
        if axis_dropped is not None:
            del coords[axis_dropped]
        held = And(*(c.eq(w) for c, w in zip(coords, wanted)))
        return x.at(wave, lane, slot), held

    def exchange(self, op: O.Reduce | O.Broadcast) -> TileTags:
        """Tags after a cross-lane exchange: any holder's value, ⊤ unless all holders agree."""
        x_type, result_type, wanted_axis = op.x.type, op.result.type, op.axis
        drop_names = getattr(op, "drop", ())
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
            return tile_tags(thread, tags, (held_first,) + first.defs)
        tags = {}
        for name in kept:
            tag, alt = first.tags[name], other.tags[name]
            tags[name] = Tag(tag.value, Or(tag.top, And(held_other, Or(alt.top,
                                                                       alt.value.ne(tag.value)))))
        defs = (held_first,) + first.defs + other.defs
        return tile_tags(thread, tags, defs)

    def shift(self, op: O.SlotSlice) -> TileTags:
        thread = self.thread(op.result.type)
        inst = self.tags(op.x).at(thread[0], thread[1], thread[2] + op.start)
        return tile_tags(thread, inst.tags, inst.defs)

    def lanemap(self, op: O.Shuffle) -> TileTags:
        """Tags after a shuffle: those of the element read (at the lane the lane map names),
        the lane's own where the read is invalid; a combining shuffle keeps agreeing names and
        records the covered range of `op.cover`."""
        from argus.isa_cdna3.lanemaps import source_lane

        thread = self.thread(op.result.type)
        wave, lane, slot = thread
        source, valid = source_lane(op.lanes, op.params, lane, max_)
        valid = simplify(valid)
        x = self.tags(op.x)
        own, read = x.at(wave, lane, slot), x.at(wave, source, slot)
        defs = own.defs + read.defs
        if not op.combine:
            return tile_tags(thread, {n: join_tags(valid, read.tags[n], t)
                                      for n, t in own.tags.items()}, defs)
        covered = cover_names(op.cover) if op.cover else ()
        kept = [n for n in own.tags if n != op.cover and n not in covered]
        mine, theirs = covered_range(own.tags, op.cover), covered_range(read.tags, op.cover)
        # the lanes combined agree on the other names and on where the covered ones are ⊤
        # (one query): then the lane's own tags stand for both, and formulas do not double
        # with every step
        agree = Or(Not(valid), And(*(equal_tags(own.tags[n], read.tags[n]) for n in kept),
                                   *(a.top.eq(b.top) for a, b in zip(mine, theirs))))
        same = not self.scouting and self.holds(agree, self.assumes + list(defs))
        if same:
            tags = {n: own.tags[n] for n in kept}
        else:
            tags = {n: join_tags(valid, merge_tags(own.tags[n], read.tags[n]), own.tags[n])
                    for n in kept}
        if op.cover:
            *union, exact = cover_union(*(t.value for t in mine + theirs))
            unknown = [t.top for t in (mine if same else mine + theirs)]
            top = Or(*unknown, tabulated(Not(exact), thread))
            for name, value, old in zip(covered, union, mine):
                tag = join_tags(valid, Tag(tabulated(value, thread), top), old)
                tags[name] = Tag(tabulated(tag.value, thread), tag.top)
        return tile_tags(thread, tags, defs)

    # MFMA

    @rule(O.Mfma, O.MfmaBroadcast)
    def on_mfma(self, op: O.Mfma):
        from argus.isa_cdna3.mfma import mfma

        info = mfma(op.instr)
        a_type = op.a.type
        wave, lane, slot = thread_vars(a_type.layout.waves, info.k_per_lane)
        lb, sb = fresh_var("lane_b", 0, LANES), fresh_var("slot_b", 0, info.k_per_lane)
        lc, sc = fresh_var("lane_c", 0, LANES), fresh_var("slot_c", 0, info.c_values)
        blk, i, k = info.a_coord(lane, slot)
        blk_b, k_b, j = info.b_coord(lb, sb)
        blk_c, i_c, j_c = info.c_coord(lc, sc)
        # with CBSZ/ABID, block blk_b reads A from block a_block(blk_b)
        reads = op.a_block(blk_b) if isinstance(op, O.MfmaBroadcast) else blk_b
        meet = [blk.eq(reads), blk_b.eq(blk_c), k.eq(k_b), i.eq(i_c), j.eq(j_c)]
        a = self.tags(op.a).at(wave, lane, slot)
        b = self.tags(op.b).at(wave, lb, sb)
        c = self.tags(op.c).at(wave, lc, sc)

        def element(witness):
            # a helper the query's simplification dropped is free: its lowest value will do
            env = dict(witness) | {v.name: v.lo for e in (blk, i, j, k) for v in free_vars(e)
                                   if v.name not in witness}
            return {"block": evaluate(blk, env), "i": evaluate(i, env),
                    "j": evaluate(j, env), "k": evaluate(k, env)}
        self.assertions(op, {"A": a.tags, "B": b.tags, "C": c.tags},
                        meet + list(a.defs + b.defs + c.defs), (wave, lane, slot), element)

    def contract(self, op: O.Mfma) -> TileTags:
        """Row tags from A[i, 0], column tags from B[0, j]; tags both carry are dropped."""
        from argus.isa_cdna3.mfma import mfma

        info = mfma(op.instr)
        thread = self.thread(op.result.type)
        blk, i, j = info.c_coord(thread[1], thread[2])
        la, sa = fresh_var("alane", 0, LANES), fresh_var("aslot", 0, info.k_per_lane)
        lb, sb = fresh_var("blane", 0, LANES), fresh_var("bslot", 0, info.k_per_lane)
        a_blk, a_i, a_k = info.a_coord(la, sa)
        b_blk, b_k, b_j = info.b_coord(lb, sb)
        reads = op.a_block(blk) if isinstance(op, O.MfmaBroadcast) else blk
        defs = [And(a_blk.eq(reads), a_i.eq(i), a_k.eq(0)), And(b_blk.eq(blk), b_j.eq(j),
                                                               b_k.eq(0))]
        a = self.tags(op.a).at(thread[0], la, sa)
        b = self.tags(op.b).at(thread[0], lb, sb)
        shared = set(a.tags) & set(b.tags)
        tags = {n: t for n, t in a.tags.items() if n not in shared}
        tags.update({n: t for n, t in b.tags.items() if n not in shared})
        defs += list(a.defs + b.defs)
        if op.cover:
            covered, more = self.contracted_cover(op, info, thread, reads, i)
            tags.update(covered)
            defs += more
        return tile_tags(thread, tags, defs)

    def contracted_cover(self, op: O.Mfma, info, thread, reads, i) -> tuple[dict, list]:
        """The `<cover>first/last/step` tags of an MFMA result: C's recorded progression
        united with the instruction's own, A's `cover` values at contraction index 0, 1 and
        K-1; the own one is exact only where A's values at every index kk are first + kk *
        step (one query over a symbolic kk), the union as `cover_union` says."""
        name = op.cover
        a_tags = self.tags(op.a)
        holder = _a_holders(info, op)

        shape = tuple(v.hi - v.lo for v in thread)

        def at_index(index: int) -> tuple[Tag, tuple]:
            # the lane and slot holding A[reads, i, index] for each result thread, as
            # formulas over the thread (no helper variable for the position)
            lane, slot = (tabulated_over(np.broadcast_to(t[index], shape), thread)
                          for t in holder)
            found = a_tags.at(thread[0], lane, slot)
            return found.tags.get(name, TOP_TAG), found.defs

        (first, d0), (second, d1), (last, d2) = (at_index(x) for x in
                                                 (0, min(1, info.k - 1), info.k - 1))
        step = second.value - first.value if info.k > 1 else Const(1)
        # every contraction index kk: A's value is first + kk * step
        kk = fresh_var("kk", 0, info.k)
        lane, slot = fresh_var("klane", 0, LANES), fresh_var("kslot", 0, info.k_per_lane)
        blk, row, k = info.a_coord(lane, slot)
        found = a_tags.at(thread[0], lane, slot)
        anywhere = found.tags.get(name, TOP_TAG)
        defs = list(dict.fromkeys(d0 + d1 + d2))
        affine = And(Not(first.top), Not(second.top), Not(last.top), Not(anywhere.top),
                     anywhere.value.eq(first.value + kk * step))
        context = (self.assumes + defs + [And(blk.eq(reads), row.eq(i), k.eq(kk))]
                   + list(found.defs))
        exact = not self.scouting and self.holds(
            affine, context + gather_constraints([affine, *context], self.distinct))
        own = (first.value, last.value, step)
        own_top = FALSE if exact else TRUE
        c = self.tags(op.c).at(*thread)
        if cover_names(name)[0] not in c.tags:
            values, top = own, own_top
        else:
            mine = covered_range(c.tags, name)
            *values, union_exact = cover_union(*(t.value for t in mine), *own)
            top = Or(own_top, *(t.top for t in mine), Not(union_exact))
        tags = {n: Tag(v, top) for n, v in zip(cover_names(name), values)}
        return tags, defs + list(c.defs)

    # LDS

    @rule(O.LdsAlloc)
    def on_lds_alloc(self, op: O.LdsAlloc):
        self.lds[op.result.name] = L.Empty()
        self.lds_size[op.result.name] = op.result.type.size

    def ticket(self, op) -> Expr | None:
        """The count that lands a write (`absint.sync`): its copy group or its wait."""
        if self.clock is None or not isinstance(op, O.LdsStore | O.AsyncCopy):
            return None
        return self.clock.groups if isinstance(op, O.AsyncCopy) else self.clock.waits

    def lds_access(self, op, buffer, t: RegType):
        thread = self.thread(t)
        found = A.lds_access(op)
        view, address, inside = found.view, found.address, found.inside
        shown = {f"d{a}": v for a, v in enumerate(view)} | {"address": address}
        self.check_bounds(op, Or(Not(O.active_of(op)), inside), thread,
                          f"LDS access outside the view {list(op.addr.shape)} / allocation of "
                          f"{self.lds_size[buffer.name]} elements", evaluator(shown))
        if self.collect:
            self.order += 1
            self.accesses.append(L.Access(
                op, isinstance(op, O.LdsStore | O.AsyncCopy), buffer.name, op.addr, op.origin,
                t.layout, self.lds_size[buffer.name], self.guard, self.epoch, tuple(self.loops),
                self.order, isinstance(op, O.LdsAtomicAdd), self.ticket(op),
                isinstance(op, O.AsyncCopy), self.clock, O.active_of(op), self.groups))
        return thread, view, address, inside, evaluator(shown)

    @rule(O.LdsStore, O.LdsAtomicAdd)
    def on_lds_store(self, op: O.LdsStore):
        t = op.value.type
        thread, *_ , element = self.lds_access(op, op.buffer, t)
        value = self.tags(op.value)
        inst = value.at(*thread)
        self.assertions(op, {"V": inst.tags}, inst.defs, thread, _coords(t), where=op.active)
        self.write_lds(op, L.WriteRec(op, op.addr, op.origin, value, t.layout, t.shape,
                                      self.lds_size[op.buffer.name], self.guard, self.epoch,
                                      isinstance(op, O.LdsAtomicAdd), self.ticket(op),
                                      active=op.active, groups=self.groups))

    def write_lds(self, op, record: L.WriteRec):
        self.lds[op.buffer.name] = L.push(self.lds[op.buffer.name], record)
        if self.loop_writes:
            written = self.loop_writes[-1].setdefault(op.buffer.name, [])
            if written is not None:
                written.append(record)

    @rule(O.AsyncCopy)
    def on_async_copy(self, op: O.AsyncCopy):
        """The copied elements carry the tensor's tags into LDS; the write lands with its
        group (`lds.unordered` reads the ticket)."""
        t = op.tile
        index, inside = self.global_access(op, op.tensor, t, write=False)
        self.lds_access(op, op.buffer, t)
        data = tile_tags(self.thread(t), self.global_tags(op.tensor, index, inside))
        self.write_lds(op, L.WriteRec(op, op.addr, op.origin, data, t.layout, t.shape,
                                      self.lds_size[op.buffer.name], self.guard, self.epoch,
                                      ticket=self.ticket(op), copy=True, groups=self.groups))

    @rule(O.LdsLoad)
    def on_lds_load(self, op: O.LdsLoad):
        t = op.result.type
        thread, view, address, inside, element = self.lds_access(op, op.buffer, t)
        state = self.lds[op.buffer.name]
        site = L.ReadSite(op.addr, view, address, thread[0] * LANES + thread[1], self.epoch,
                          self.clock, self.groups)
        names = sorted(L.record_names(state))
        res = L.resolve(state, site, names)
        read = And(op.active, inside)
        tags = {n: Tag(res.values[n], Or(res.tops[n], Not(read))) for n in names
                if not self.absent_everywhere(res.absent[n], read, res.defs)}
        self.values[op.result.name] = tile_tags(thread, tags, res.defs)
        self.obligation(op, "lds-race",
                        "read-after-write race: another thread wrote this LDS address with no "
                        "barrier in between",
                        Or(Not(read), And(Not(res.race), Not(res.opaque))), res.defs, thread,
                        lambda w: {"element": element(w)})
        if self.clock is not None:
            self.obligation(op, "async-pending",
                            "reads LDS that this thread's own async copy has not landed in: no "
                            "wait_group has retired the copy's group",
                            Or(Not(inside), Not(res.pending)), res.defs, thread,
                            lambda w: {"element": element(w)})
        self.obligation(op, "lds-uninitialised", "reads LDS that no thread has written",
                        Or(Not(read), And(Not(res.uninitialised), Not(res.opaque))),
                        res.defs, thread, lambda w: {"element": element(w)})

    def absent_everywhere(self, absent: Expr, inside: Expr, defs) -> bool:
        """Whether a tag name is missing from what every in-bounds element of a read sees
        (the region was overwritten with other names): then the tile does not carry it."""
        if absent is FALSE or self.scouting:
            return False
        return absent is TRUE or self.holds(Or(Not(inside), absent), self.assumes + list(defs))

    @rule(O.Barrier, O.BarrierNoWait)
    def on_barrier(self, op: O.Barrier | O.BarrierNoWait):
        self.uniform(op)
        self.epoch = simplify(self.epoch + 1)

    @rule(O.GroupBarrier)
    def on_group_barrier(self, op: O.GroupBarrier):
        """Orders the LDS accesses of the waves in its group (`lds.group_ordered`): counts its
        runs, with the one-epoch barrier model. Its group must be the same in every iteration
        of the loops around it (a count says that it ran, not which group it had then)."""
        self.uniform(op)
        if self.clock is not None:
            raise VerifyError(f"{op.loc}: barrier.group in a kernel with waits and async copies "
                              "is not modelled; use T.barrier()")
        ivs = {ctx.iv.name for ctx in self.loops} & {v.name for v in free_vars(op.active)}
        if ivs:
            raise VerifyError(f"{op.loc}: barrier.group's condition '{op.active}' changes with "
                              f"the loop variable {', '.join(sorted(ivs))}: the verifier orders "
                              "by group barriers whose group is fixed; write one "
                              "T.group_barrier per group, each with a condition on the wave")
        index = next(k for k, g in enumerate(self.group_ops) if g is op)
        self.groups = tuple((g, simplify(n + 1) if k == index else n)
                            for k, (g, n) in enumerate(self.groups))

    @rule(O.Wait, O.WaitGroup, O.CommitGroup)
    def uniform(self, op):
        """Waits, commits and barriers must be passed by every wave alike (the clock moves)."""
        if self.in_branch:
            raise VerifyError(f"{op.loc}: {op.mnemonic} inside a branch: every wave must pass "
                              "the same barriers, waits and commits; move it out of the `when` "
                              "block")

    # control flow

    @rule(O.If)
    def on_if(self, op: O.If):
        outer_guard, outer_branch = self.guard, self.in_branch
        produced = []
        for cond, block in ((op.cond, op.then), (Not(op.cond), op.orelse)):
            self.assumes.append(cond)
            self.guard, self.in_branch = simplify(And(outer_guard, cond)), True
            produced.append(self.execute(block))
            self.assumes.pop()
        self.guard, self.in_branch = outer_guard, outer_branch
        for result, then, orelse in zip(op.results, *produced):
            self.values[result.name] = join_tiles(op.cond, then, orelse,
                                                  self.thread(result.type))

    # budgets

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


def _a_holders(info, op) -> tuple[np.ndarray, np.ndarray]:
    """(lane, slot) tables [k index, 1, lane, slot] of the A register holding A[block, i, k]
    for each result lane/slot (block, i from the C layout; the block read, under CBSZ/ABID):
    the catalogue layouts of `mfma_positions` inverted."""
    from argus.absint.interp.state import mfma_positions

    _, (lane_k, slot_k), (blk, row, k), _, _, (c_blk, c_row, _) = mfma_positions(op.instr)
    lane_at = np.zeros((info.blocks, info.m, info.k), np.int64)
    slot_at = np.zeros_like(lane_at)
    lane_at[blk, row, k], slot_at[blk, row, k] = lane_k, slot_k
    reads = op.a_block(c_blk) if isinstance(op, O.MfmaBroadcast) else c_blk
    index = (reads[None], c_row[None], np.arange(info.k)[:, None, None])
    return lane_at[index][:, None], slot_at[index][:, None]


def covered_range(tags: dict, name: str) -> tuple[Tag, Tag, Tag]:
    """(first, last, step) of what an element covers of tag `name`: recorded by an earlier
    combining shuffle, or the element's own value once; ⊤ when it carries neither."""
    recorded = cover_names(name)
    if recorded[0] in tags:
        return tuple(tags[n] for n in recorded)
    if name in tags:
        tag = tags[name]
        return tag, tag, Tag(Const(1), tag.top)
    return TOP_TAG, TOP_TAG, TOP_TAG


def inactive_top(tags: dict, active: Expr) -> dict:
    """Tags of a load where only the threads satisfying `active` read: ⊤ for the others."""
    if active is TRUE:
        return tags
    return {n: Tag(t.value, Or(t.top, Not(active))) for n, t in tags.items()}


def _shape(tensor) -> str:
    return ", ".join(map(str, tensor.type.shape))


def _coords(t: RegType):
    return evaluator({f"c{a}": c for a, c in enumerate(t.layout.coords)})


#: The transfer rules `verify` runs (subclass it to try a rule: `verify(..., rules=Sub)`).
Rules = _Verifier

__all__ = ["verify", "VerifyError", "Rules"]


#: The value-level reading of each register-result transfer rule (`argus.ir.transfer`); the
#: other rules (load, store, define, carry, none) act on memory or control flow, so the op's
#: own handler applies them.
RESULT_TAGS = {
    O.Transfer.FRESH: _Verifier.fresh,
    O.Transfer.RETAG: _Verifier.retag,
    O.Transfer.KEEP: _Verifier.keep,
    O.Transfer.MARK: _Verifier.mark_trace,
    O.Transfer.SHIFT: _Verifier.shift,
    O.Transfer.EXCHANGE: _Verifier.exchange,
    O.Transfer.LANEMAP: _Verifier.lanemap,
    O.Transfer.UNION: _Verifier.union,
    O.Transfer.CONTRACT: _Verifier.contract,
}

"""Loops in the verifier: a symbolic iteration checked against candidate invariants of the
carried tiles (Houdini-style: a failing tag is lifted to the body's yield one iteration
earlier, then widened) and of the LDS ring buffer (the body's writes layered by iteration),
or with `unroll=N` the first N iterations as copies.
"""

from __future__ import annotations

import attrs

from argus.absint import lds as L
from argus.absint import sync as S
from argus.absint.domain import (
    FALSE,
    GATHERED,
    TOP_TAG,
    TRUE,
    Tag,
    TileTags,
    equal_tags,
    gather_constraints,
    join_tags,
    join_tiles,
    renamed_helpers,
    substitute_all,
    tabulated,
    tile_tags,
)
from argus.absint.report import VerifyError
from argus.absint.rules import rule
from argus.ir import ops as O
from argus.ir.expr import And, Const, Expr, Not, Or, Var, max_, simplify
from argus.ir.expr import substitute as subst

#: Candidate-invariant passes over a loop body before its LDS layering is given up.
MAX_LOOP_PASSES = 6
#: How often one carried tag's candidate may be lifted to the body's shifted yield before it
#: is widened: a tile handed down a chain of carried tiles (a pipeline that many loads deep)
#: needs one lift per link.
MAX_LIFTS = 3
#: Largest unroll a refused bounded run suggests instead.
MAX_SUGGESTED_UNROLL = 64


@attrs.frozen
class LoopCtx:
    """A loop the walk is inside: iv runs from start below stop in steps of step."""

    iv: Var
    start: Expr
    stop: Expr
    step: int

    def bounds(self, iv=None) -> list[Expr]:
        iv = self.iv if iv is None else iv
        return [self.start <= iv, iv < self.stop, ((iv - self.start) % self.step).eq(0)]


@attrs.define
class _LoopRun:
    """One symbolic loop's fixpoint search: the loop, what the walk had on entry, and the
    candidate invariants of the carried tiles with their widening history."""

    op: O.For
    loop: LoopCtx
    barriers: Expr
    entry_epoch: Expr
    entry_lds: dict
    depth: int
    inits: list
    cands: list
    #: per carried tile, the tag names widened so far (each tag on its own: one tag that
    #: changes per iteration leaves the stable ones exact)
    widened: dict = attrs.field(factory=dict)
    #: per carried tile, how often each tag's candidate was lifted to the shifted yield
    lifted: dict = attrs.field(factory=dict)


class Loops:
    """The loop rules of the walk (mixed into it: they run the body with the walk's state)."""

    @rule(O.For)
    def on_for(self, op: O.For):
        if self.unroll is not None:
            self.unrolled_for(op)
            return
        inits = [self.tags(v) for v in op.inits]
        run = _LoopRun(op, LoopCtx(op.iv, op.start, op.stop, op.step), _barriers(op.body),
                       self.epoch, dict(self.lds), max(1, op.stages - 1), inits, list(inits))
        outer_collect = self.collect
        self.collect = False
        found = self.layered_fixpoint(run, outer_collect)
        if found is None:
            # no inductive LDS layering: older iterations' writes become ⊤
            self.flat_fixpoint(run)
        self.collect = outer_collect
        if found is None:
            records = None
            yields, writes, _ = self.run_pass(run, None, None)
        else:
            records, yields, writes = found
        self.leave_loop(run, records, yields, writes)

    def run_pass(self, run: _LoopRun, records, widened):
        return self.loop_pass(run.op, run.loop, run.cands, records, run.depth, run.entry_epoch,
                              run.entry_lds, run.barriers, widened)

    def layered_fixpoint(self, run: _LoopRun, outer_collect: bool):
        """Search candidate invariants whose passes agree on the LDS writes the body makes
        (one layer per iteration): (records, yields, writes) of the final pass, whose
        obligations are kept, or None when the search runs out of passes."""
        records = None
        passes, budget = 0, MAX_LOOP_PASSES
        while passes < budget:
            passes += 1
            stable_check = records is not None
            # a pass that turns out to be the fixpoint is the final one: collect its
            # obligations speculatively and drop them otherwise
            self.collect = outer_collect and stable_check
            # the first pass only learns which LDS writes the body makes: skip its queries
            outer_scouting, self.scouting = self.scouting, self.scouting or not stable_check
            mark = self.mark()
            yields, writes, failing = self.run_pass(run, records,
                                                    run.widened if stable_check else None)
            self.collect, self.scouting = False, outer_scouting
            if stable_check and not failing and _same_records(records, writes):
                return records, yields, writes
            self.rewind(mark)
            if not stable_check or not _same_records(records, writes):
                records = writes
                continue
            if self.widen(run.op, run.inits, run.cands, failing, run.widened, yields,
                          run.lifted):
                budget += 2   # a lifted candidate changes the LDS records: one pass to learn them
        return None

    def flat_fixpoint(self, run: _LoopRun):
        """Candidates that hold with every older iteration's LDS writes read as ⊤; the inits
        widened everywhere but at the first iteration when the passes run out."""
        for _ in range(MAX_LOOP_PASSES):
            yields, _, failing = self.run_pass(run, None, run.widened)
            self.widen(run.op, run.inits, run.cands, failing, run.widened, yields, run.lifted)
            if not failing:
                return
        op = run.op
        run.cands = [_widen(i, i, i.names, op.iv.eq(op.start)) for i in run.inits]

    def leave_loop(self, run: _LoopRun, records, yields, writes):
        """The state after the loop: results from the last iteration's yields (the inits when
        it runs no iteration), the LDS layered by the iterations' writes, the epoch, group
        barrier counts and clock advanced by its trip count."""
        op, entry_lds = run.op, run.entry_lds
        trips = _trips(op)
        last = simplify(op.start + (trips - 1) * op.step)
        ran = simplify(trips > 0)
        for result, init, y in zip(op.results, run.inits, yields):
            self.values[result.name] = join_tiles(ran, y.substitute({op.iv.name: last}), init,
                                                  self.thread(result.type))
        exit_at = simplify(op.start + trips * op.step)
        for name, state in entry_lds.items():
            if name in writes:
                known = None if records is None else records[name]
                self.lds[name] = L.Layers(op.iv, op.start, op.step,
                                          None if known is None else tuple(known),
                                          run.depth, exit_at, state)
            else:
                self.lds[name] = state
        if self.loop_writes:
            # an enclosing loop cannot replay these writes as flat records of its own body
            self.loop_writes[-1].update({name: None for name in writes})
        self.epoch = simplify(run.entry_epoch + trips * run.barriers)
        self.groups = self.group_runs(op, self.groups, trips)
        self.clock = None if self.clock is None else S.after_loop(op, self.clock)

    def group_runs(self, op: O.For, entry: tuple, iterations: Expr) -> tuple:
        """The group barriers' run counts (`lds.group_ordered`) after `iterations` iterations
        of loop `op` entered with the counts `entry`."""
        return tuple((g, simplify(n + iterations * _runs(op.body, gop)))
                     for gop, (g, n) in zip(self.group_ops, entry))

    def check_bounded_sizes(self):
        """Refuse a bound that no size satisfies: every obligation would hold vacuously."""
        grid = [bound for op in O.walk(self.kernel.body) if isinstance(op, O.ProgramId)
                for bound in ((op.var >= 0, op.var < self.kernel.grid[op.axis])
                              if op.axis < len(self.kernel.grid) else (op.var.eq(0),))]
        if not self.holds(FALSE, self.assumes + grid):
            return
        base = self.assumes[:len(self.assumes) - len(self.trip_bounds)] + grid
        for op, reached, trips in self.trip_bounds:
            if self.holds(FALSE, base + [at_most(reached, trips, self.unroll)]):
                least = next((n for n in range(self.unroll + 1, MAX_SUGGESTED_UNROLL + 1)
                              if not self.holds(FALSE, base + [at_most(reached, trips, n)])),
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
        entry_clock, entry_groups = self.clock, self.groups
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
            results = [join_tiles(runs, tile, before, self.thread(result.type))
                       for result, tile, before in zip(op.results, carried, results)]
        self.values, self.assumes, self.guard = outer_values, outer_assumes, outer_guard
        for result, tile in zip(op.results, results):
            self.values[result.name] = tile
        self.epoch = simplify(entry_epoch + trips * barriers)
        self.groups = self.group_runs(op, entry_groups, trips)
        self.clock = None if entry_clock is None else S.after_loop(op, entry_clock)

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
                ticket=None if access.ticket is None else simplify(subst(access.ticket, pin)),
                clock=None if access.clock is None else access.clock.substitute(pin),
                active=simplify(subst(access.active, pin)),
                groups=L.runs_substituted(access.groups, pin),
                loops=tuple(c for c in access.loops if c is not loop))
        for index in range(global_accesses, len(self.global_accesses)):
            access = self.global_accesses[index]
            # a gathered row read in this copy is the index entry at this copy's position
            mapping = renamed_helpers([*access.index, access.inside, access.guard,
                                       *access.defs], pin)
            self.global_accesses[index] = attrs.evolve(
                access, index=tuple(subst(i, mapping) for i in access.index),
                defs=tuple(subst(d, mapping) for d in access.defs),
                inside=subst(access.inside, mapping), guard=subst(access.guard, mapping),
                assumes=tuple(subst(a, mapping) for a in access.assumes),
                epoch=simplify(subst(access.epoch, pin)),
                ticket=None if access.ticket is None else simplify(subst(access.ticket, pin)),
                clock=None if access.clock is None else access.clock.substitute(pin),
                loops=tuple(c for c in access.loops if c is not loop))
        self.epoch = simplify(subst(self.epoch, pin))
        self.groups = L.runs_substituted(self.groups, pin)
        if self.clock is not None:
            self.clock = self.clock.substitute(pin)

    def mark(self) -> tuple:
        return len(self.pending), len(self.accesses), len(self.global_accesses), self.order

    def rewind(self, mark: tuple):
        """Forget what a speculative loop pass recorded."""
        pending, accesses, global_accesses, self.order = mark
        del self.pending[pending:], self.accesses[accesses:]
        del self.global_accesses[global_accesses:]

    def widen(self, op, inits, cands, failing: dict, widened: dict, yields, lifted: dict) -> bool:
        """Weaken the candidates of the failing tags of each carried tile (`loop_pass`): a tag
        the body yields is first lifted (`lift`), up to MAX_LIFTS times; then, or when the
        body drops it, it is widened. Returns whether a tag was lifted."""
        grew = False
        for index, names in failing.items():
            counts = lifted.setdefault(index, {})
            yielded = set(yields[index].names)
            stepped = {n for n in names if n in yielded and n in inits[index].names
                       and ("affine", n) not in counts}
            for n in stepped:
                counts[("affine", n)] = 1
            found = self.affine(op, inits[index], cands[index], yields[index], stepped)
            if found is not None:
                # the other names may have failed only with these (a shared ⊤ condition):
                # the next pass tells
                cands[index] = found[0]
                grew = True
                continue
            lift = {n for n in names if n in yielded and n in inits[index].names
                    and counts.get(n, 0) < MAX_LIFTS}
            if lift:
                cands[index] = self.lift(op, inits[index], cands[index], yields[index], lift)
                for n in lift:
                    counts[n] = counts.get(n, 0) + 1
                grew = True
            if names - lift:
                cands[index] = _widen(inits[index], cands[index], names - lift,
                                      op.iv.eq(op.start))
                widened.setdefault(index, set()).update(names - lift)
        return grew

    def affine(self, op, init: TileTags, cand: TileTags, y: TileTags, names):
        """(`cand` with the tags of `names` that change by a constant per iteration replaced
        by init + (iv - start) / step * delta, the names left), or None when none does. delta
        is what the first iteration adds (its yield minus the init); such a tag counts
        iterations, like the last k an accumulation has covered. The next pass checks the
        guess like any candidate."""
        if not names:
            return None
        start = init.at(*init.thread)
        first = y.substitute({op.iv.name: op.start}).at(*init.thread)
        kept = start if cand is init else cand.at(*init.thread)
        tags, stepped = dict(kept.tags), set()
        count = (op.iv - op.start) // op.step
        for n in names:
            delta = self.constant(simplify(first.tags[n].value - start.tags[n].value),
                                  init.thread, list(first.defs + start.defs))
            if isinstance(delta, Const) and delta.value != 0:
                tags[n] = Tag(simplify(start.tags[n].value + count * delta), start.tags[n].top)
                stepped.add(n)
        if not stepped:
            return None
        defs = tuple(dict.fromkeys(kept.defs + start.defs))
        return tile_tags(init.thread, tags, defs), set(names) - stepped

    def constant(self, e: Expr, thread, defs: list) -> Expr:
        """`e` as a Const when it has one value wherever the walk's assumptions and `defs`
        hold: read off the thread table, else from one model and then proved; else `e`."""
        from argus.absint import queries as Q
        from argus.ir.expr import evaluate, free_vars
        from argus.smt.verdict import Refuted

        e = tabulated(e, thread)
        if isinstance(e, Const) or self.scouting:
            return e
        context = self.assumes + defs
        context += gather_constraints([e, *context], self.distinct)
        model = Q.decide_one(FALSE, context, self.solver, self.timeout_ms)
        if not isinstance(model, Refuted):
            return e
        env = dict(model.witness) | {v.name: v.lo for v in free_vars(e)
                                     if v.name not in model.witness}
        try:
            value = Const(int(evaluate(e, env)))
        except (ArithmeticError, KeyError, TypeError, ValueError):
            return e
        return value if self.holds(e.eq(value), context) else e

    def lift(self, op, init: TileTags, cand: TileTags, y: TileTags, names) -> TileTags:
        """`cand` with the tags `names` replaced by what the body yielded one iteration
        earlier: the init at the first iteration, `y` at iv - step afterwards. A pipeline
        carries the tile the body loaded for a later iteration (prefetch distance d: the tile
        of iv + d); the invariant "the carried tile is the one loaded at the previous
        iteration" is a function of iv that no iv-independent candidate expresses. When the
        shifted yield already equals the init at the first iteration, it stands alone."""
        start = init.at(*init.thread)
        kept = start if cand is init else cand.at(*init.thread)
        earlier = y.substitute({op.iv.name: op.iv - op.step}).at(*init.thread)
        before = y.substitute({op.iv.name: op.start - op.step}).at(*init.thread)
        first = op.iv.eq(op.start)
        tags = dict(kept.tags)
        context = self.assumes + list(start.defs + before.defs)
        for n in names:
            goal = equal_tags(start.tags[n], before.tags[n])
            if self.holds(goal, context + gather_constraints([goal, *context], self.distinct)):
                tags[n] = earlier.tags[n]
            else:
                tags[n] = join_tags(first, start.tags[n], earlier.tags[n])
        defs = tuple(dict.fromkeys(kept.defs + start.defs + earlier.defs))
        return tile_tags(init.thread, tags, defs)

    def loop_pass(self, op, loop, cands, records, depth, entry_epoch, entry_lds, barriers,
                  widened):
        """One abstract run of the body at symbolic iteration iv: returns the yielded maps, the
        LDS writes per buffer and, per carried tile, the tag names whose candidate invariant
        failed (tags in `widened` hold by construction; widened=None checks nothing)."""
        saved = (dict(self.values), dict(self.lds), self.epoch, list(self.assumes), self.clock,
                 self.groups)
        self.loops.append(loop)
        self.loop_writes.append({})
        self.assumes += loop.bounds()
        self.epoch = simplify(entry_epoch + (op.iv - op.start) // op.step * barriers)
        self.groups = self.group_runs(op, self.groups, (op.iv - op.start) // op.step)
        if self.clock is not None:
            self.clock = S.body_start(op, self.clock, op.iv)
        for name, state in entry_lds.items():
            known = None if records is None else records.get(name, ())
            body = None if known is None else tuple(known)
            self.lds[name] = L.Layers(op.iv, op.start, op.step, body, depth, op.iv, state)
        for arg, cand in zip(op.body.args, cands):
            self.values[arg.name] = cand
        yields = self.execute(op.body)
        failing = {}
        if widened is not None:
            for index, (y, cand) in enumerate(zip(yields, cands)):
                if op.iv in cand.scalars():
                    # a lifted candidate: the body must yield its value at the next iteration
                    cand = cand.substitute({op.iv.name: op.iv + op.step})
                names = self.unstable_tags(y, cand, widened.get(index, set()))
                if names:
                    failing[index] = names
        writes = {n: None if rs is None else list(rs)
                  for n, rs in self.loop_writes.pop().items()}
        self.loops.pop()
        self.values, self.lds, self.epoch, self.assumes, self.clock, self.groups = saved
        return yields, writes, failing

    def unstable_tags(self, y: TileTags, cand: TileTags, settled: set) -> set:
        """The tag names of a carried tile whose candidate invariant the body does not
        preserve: those only one side carries, and those whose value may change (one query
        for all, then one per tag when that fails). `settled` tags are already widened."""
        unstable = (set(y.names) ^ set(cand.names)) - settled
        check = [n for n in cand.names if n in y.names and n not in settled]
        if not check:
            return unstable
        a, b = y.at(*cand.thread), cand.at(*cand.thread)
        context = self.assumes + list(a.defs + b.defs)

        def preserved(names) -> bool:
            goal = And(*(equal_tags(a.tags[n], b.tags[n]) for n in names))
            return self.holds(goal, context + gather_constraints([goal, *context],
                                                                 self.distinct))
        if preserved(check):
            return unstable
        return unstable | {n for n in check if len(check) == 1 or not preserved([n])}


def _barriers(block: O.Block) -> Expr:
    count: Expr = Const(0)
    for op in block.ops:
        if isinstance(op, O.Barrier | O.BarrierNoWait):
            count = count + 1
        elif isinstance(op, O.For):
            trips = max_(0, (op.stop - op.start + op.step - 1) // op.step)
            count = count + trips * _barriers(op.body)
        elif isinstance(op, O.If):
            for inner in op.blocks:
                if any(isinstance(x, O.Barrier | O.BarrierNoWait) for x in O.walk(inner)):
                    raise VerifyError(f"{op.loc}: barrier inside a branch: every wave must "
                                      "reach the same barriers; move it out of the branch")
    return simplify(count)


def _runs(block: O.Block, target: O.Op) -> Expr:
    """How many times `target` (a group barrier) runs in one run of `block` (never inside a
    branch: `uniform` refuses that)."""
    count: Expr = Const(0)
    for op in block.ops:
        if op is target:
            count = count + 1
        elif isinstance(op, O.For):
            count = count + _trips(op) * _runs(op.body, target)
    return simplify(count)


def _trips(op: O.For) -> Expr:
    return max_(0, (op.stop - op.start + op.step - 1) // op.step)


def at_most(reached: Expr, trips: Expr, unroll: int) -> Expr:
    return simplify(Or(Not(reached), trips <= unroll))


def trip_bounds(block: O.Block, unroll: int, reached: Expr = TRUE, pins=None) -> list:
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
                bounds += trip_bounds(op.body, unroll, And(reached, runs), inner)
        elif isinstance(op, O.If):
            cond = subst(op.cond, pins)
            bounds += trip_bounds(op.then, unroll, And(reached, cond), pins)
            bounds += trip_bounds(op.orelse, unroll, And(reached, Not(cond)), pins)
        else:
            for inner_block in op.blocks:
                bounds += trip_bounds(inner_block, unroll, reached, pins)
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


def _widen(init: TileTags, cand: TileTags, names, first) -> TileTags:
    """`cand` with the tags `names` widened: the init's value at the first iteration, ⊤
    afterwards."""
    start = init.at(*init.thread)
    kept = start if cand is init else cand.at(*init.thread)
    tags = dict(kept.tags)
    for n in names:
        tags[n] = join_tags(first, start.tags.get(n, TOP_TAG), TOP_TAG)
    defs = start.defs if kept is start else tuple(dict.fromkeys(kept.defs + start.defs))
    return tile_tags(init.thread, tags, defs)


def _canonical(tile: TileTags) -> tuple:
    """A comparable form of a tile's tags: its helpers renamed by creation order, and each
    gathered row helper (`GATHERED`) stood for by the index entry it reads, so two passes
    that gather the same rows compare equal although each pass made its own helpers."""
    ordered = sorted(tile.fresh, key=lambda v: int(v.name.rpartition("__")[2]))
    mapping = {v.name: Var(f"{v.name.rpartition('__')[0]}__c{n}", v.lo, v.hi)
               for n, v in enumerate(ordered)}
    flat = [e for _, t in tile.tags for e in (t.value, t.top)]
    done = substitute_all(flat + list(tile.defs), mapping)
    rows = tuple((mapping[v.name].name, GATHERED[v.name][0],
                  *substitute_all(GATHERED[v.name][1:], mapping))
                 for v in ordered if v.name in GATHERED)
    return tile.thread, tuple(n for n, _ in tile.tags), tuple(done), rows


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
            if a.op is not b.op or _canonical(a.tile) != _canonical(b.tile) or \
                    attrs.evolve(a, tile=None) != attrs.evolve(b, tile=None):
                return False
    return True

"""Obligations as canonical SMT queries, decided once and on several cores.

Every use of a tile renames its helper variables, so obligations of one kernel (and of its
variants during a search) repeat the same formulas under different helper names. Renaming the
helpers by first occurrence makes those queries identical terms: the simplifier's and the
lowering's per-node memos then apply, equal queries are decided once, and verdicts are kept
across `verify` calls. Witnesses are translated back to the obligation's own names.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import attrs

from argus.absint.domain import canonical_renaming, node_vars, substitute_all
from argus.absint.parallel import Batch, map_items
from argus.ir.expr import Expr
from argus.smt import Refuted, Unknown, prove

#: Verdicts kept across calls (final answers only: Unknown may change with more time).
CACHE_SIZE = 8192
_verdicts: OrderedDict = OrderedDict()


@attrs.frozen
class Query:
    """A goal under assumptions, helper names canonical; `small` are the extra assumptions
    tried first when a witness is minimised (small sizes replay quickly)."""

    goal: Expr
    assume: tuple
    order: tuple = ()
    small: tuple = ()
    back: dict = attrs.field(factory=dict, eq=False, hash=False)

    def original(self, verdict):
        """The verdict with the witness in the obligation's own variable names."""
        if not isinstance(verdict, Refuted) or not self.back:
            return verdict
        witness = {self.back.get(name, name): value for name, value in verdict.witness.items()}
        return Refuted(witness, minimal=verdict.minimal)


def canonical(goal: Expr, assume, order=(), small=()) -> Query:
    """The obligation with its helpers renamed canonically; `order` names the variables to
    minimise a witness over (those the query does not mention are dropped)."""
    mapping = canonical_renaming([goal, *assume])
    renamed = substitute_all([goal, *assume], mapping)
    mentioned = {v.name for e in renamed for v in node_vars(e)} | set(mapping)
    order = tuple(mapping[n].name if n in mapping else n for n in order if n in mentioned)
    back = {v.name: name for name, v in mapping.items()}
    return Query(renamed[0], tuple(renamed[1:]), order, tuple(small), back)


def decide(queries, solver: str, timeout_ms: int, jobs: int = 1) -> list:
    """(verdict, seconds) per query, in order: cached answers first, every other distinct
    query solved once, spread over `jobs` processes."""
    pending = _Decisions(queries, solver, timeout_ms)
    return pending.finish(map_items(pending.solve, pending.misses, jobs, _lost))


def decide_in_background(queries, solver: str, timeout_ms: int):
    """Start deciding `queries` in a forked child while the caller goes on; `.finish()` on
    the result gives what `decide` would."""
    pending = _Decisions(queries, solver, timeout_ms)
    pending.batch = Batch(pending.solve, pending.misses, _lost) if pending.misses else None
    return pending


class _Decisions:
    """Queries split into cached answers and distinct misses; `finish` stores the misses'
    verdicts and hands every query its own."""

    def __init__(self, queries, solver: str, timeout_ms: int):
        self.queries = list(queries)
        self.solve = _Solve(solver, timeout_ms)
        self.answers: list = [None] * len(self.queries)
        self.todo: dict = {}
        self.batch = None
        for index, query in enumerate(self.queries):
            key = (query, solver)
            if key in _verdicts:
                _verdicts.move_to_end(key)
                self.answers[index] = (query.original(_verdicts[key]), 0.0)
            else:
                self.todo.setdefault(key, []).append(index)
        self.misses = [key[0] for key in self.todo]

    def running(self) -> bool:
        return self.batch is not None and self.batch.running()

    def finish(self, solved=None) -> list:
        if solved is None:
            solved = self.batch.results() if self.batch is not None else []
        for (key, indices), (verdict, seconds) in zip(self.todo.items(), solved):
            if _final(verdict, key[0]):
                _verdicts[key] = verdict
                if len(_verdicts) > CACHE_SIZE:
                    _verdicts.popitem(last=False)
            for index in indices:
                self.answers[index] = (self.queries[index].original(verdict), seconds)
        return self.answers


def decide_one(goal: Expr, assume, solver: str, timeout_ms: int):
    """The verdict on one obligation (no minimisation), through the same cache."""
    verdict, _ = decide([canonical(goal, assume)], solver, timeout_ms)[0]
    return verdict


def _lost(_query: Query, reason: str):
    return Unknown(reason), 0.0


def _final(verdict, query: Query) -> bool:
    if isinstance(verdict, Unknown):
        return False
    return not (isinstance(verdict, Refuted) and query.order and not verdict.minimal)


@attrs.frozen
class _Solve:
    """Decide one canonical query: the verdict (the smallest witness over `order` when
    refuted, searched first under `small`) and the seconds it took."""

    solver: str
    timeout_ms: int

    def __call__(self, query: Query):
        started = time.perf_counter()
        verdict = prove(query.goal, query.assume, solver=self.solver, vacuity=False,
                        timeout_ms=self.timeout_ms, minimize=query.order, prefer=query.small)
        return verdict, time.perf_counter() - started


def clear_cache() -> None:
    """Forget every kept verdict (tests comparing cached with fresh answers)."""
    _verdicts.clear()

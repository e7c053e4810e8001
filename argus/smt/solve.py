"""Deciding proof obligations: `prove(goal, assume)` with z3 (natively, `native`) or cvc5
(through pysmt, `encode`).

A query asks for a point inside the variable bounds where the assumptions hold and the goal
fails (or is undefined). Models are replayed with `evaluate` before they are reported, witnesses
can be minimised lexicographically, timeouts become Unknown, and verdicts are cached.
"""

from __future__ import annotations

import functools
import io
import sys
import time
from collections import OrderedDict

from pysmt.exceptions import InternalSolverError, SolverReturnedUnknownResultError
from pysmt.logics import QF_BV
from pysmt.smtlib.script import smtlibscript_from_formula

from argus import env
from argus.errors import ArgusError
from argus.ir.expr import Const, Expr, Var, as_expr, evaluate, free_vars, simplify
from argus.smt import native
from argus.smt.encode import defined, environment, lower, width_for
from argus.smt.minimise import GaveUp, lexicographic, smallest
from argus.smt.verdict import Proved, Refuted, Unknown

SOLVERS = ("z3", "cvc5")
#: Time one query may take. The obligations of the library and of the bug corpus take at most
#: about a second of CPU each (`bench/bench_verify.py` prints the slowest); a query that needs
#: more is made cheaper (case splits, sizes in whole tiles) rather than waited on. The limit is
#: wall time, and with this machine's cores shared five to seven ways the slowest (a split-K
#: store) took 4.4-5.3 s: 5 s made it a false alarm, so the limit leaves twice that.
DEFAULT_TIMEOUT_MS = 10_000
_CACHE_SIZE = 4096
_cache: OrderedDict = OrderedDict()
_stats = {"hits": 0, "misses": 0}


def _variables(root: Expr) -> frozenset:
    """`free_vars`, which caches per node: queries of one kernel share most of their subterms
    (assumptions, layouts), and the abstract domain has already walked many of them."""
    return free_vars(root)


def _timeout_option(solver: str, timeout_ms: int) -> dict:
    return {"timeout": timeout_ms} if solver == "z3" else {"tlimit-per": timeout_ms}


class SmtError(ArgusError, ValueError):
    """A query `prove` cannot take: an unknown solver, a bad time limit, clashing variables."""


class SmtSortError(SmtError, TypeError):
    """An integer where `prove` needs a condition."""


def check_options(solver, timeout_ms) -> None:
    """Refuse a solver or time limit `prove` and `verify` cannot use, naming the argument."""
    if not isinstance(solver, str) or solver not in SOLVERS:
        raise SmtError(f"unknown solver {solver!r}; choose one of {', '.join(SOLVERS)}")
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 1:
        raise SmtError(f"timeout_ms={timeout_ms!r}: give the solver's time limit per query as "
                       f"a whole number of milliseconds >= 1 (default {DEFAULT_TIMEOUT_MS})")


class _Query:
    """A goal and its assumptions, simplified, with the pieces the solver needs."""

    def __init__(self, goal, assume, extra_variables=(), prefer=()):
        goal = as_expr(goal)
        assume = tuple(as_expr(a) for a in assume)
        prefer = tuple(as_expr(p) for p in prefer)
        for what, e in ([("goal", goal)] + [("assumption", a) for a in assume]
                        + [("preference", p) for p in prefer]):
            if not e.is_bool:
                raise SmtSortError(f"the {what} '{e}' is an integer; state a condition such as "
                                f"'({e}).eq(0)' or '{e} < n'")
        self.original_goal, self.original_assume = goal, assume
        self.goal = simplify(goal)
        self.assume = tuple(simplify(a) for a in assume)
        # from the original terms: simplification may drop an undefined subterm (x//0 - x//0)
        self.goal_defined = simplify(defined(goal))
        self.assume_defined = tuple(simplify(defined(a)) for a in assume)
        # conditions a witness meets when it can (small sizes replay quickly); never a premise
        self.prefer = tuple(simplify(p) for p in prefer)
        terms = (self.goal, self.goal_defined) + self.assume + self.assume_defined
        # variables that simplification removed still belong in the witness
        mentioned = (goal,) + assume + prefer + terms
        self.variables = sorted(set().union(*(_variables(t) for t in mentioned),
                                            extra_variables), key=lambda v: v.name)
        names = [v.name for v in self.variables]
        for v in self.variables:
            if names.count(v.name) > 1:
                clash = [repr(w) for w in self.variables if w.name == v.name]
                raise SmtError(f"variable name {v.name!r} is used with different ranges: "
                                 f"{', '.join(clash)}; give each range its own name")
        self.key = (self.goal, self.goal_defined,
                    frozenset(zip(self.assume, self.assume_defined)), self.prefer)

    @functools.cached_property
    def width(self) -> int:
        """The one width of the pysmt encoding (the z3 path sizes each subterm itself)."""
        terms = (self.goal, self.goal_defined) + self.assume + self.assume_defined + self.prefer
        return width_for(terms + tuple(self.variables))

    def domain(self):
        """Variable bounds ∧ assumptions (where defined): the points the goal is asked about."""
        fm = environment(self.width).formula_manager
        parts = []
        for v in self.variables:
            symbol = lower(v, self.width)
            parts.append(fm.BVSLE(fm.SBV(v.lo, self.width), symbol))
            parts.append(fm.BVSLE(symbol, fm.SBV(v.hi - 1, self.width)))
        for a, d in zip(self.assume, self.assume_defined):
            parts += [lower(d, self.width), lower(a, self.width)]
        return [p for p in parts if not p.is_true()]

    def formula(self):
        """domain ∧ ¬(goal defined and true): satisfiable iff refuted."""
        fm = environment(self.width).formula_manager
        holds = lower(self.goal, self.width)
        if self.goal_defined is not Const(True):
            holds = fm.And(lower(self.goal_defined, self.width), holds)
        return fm.And(self.domain() + [fm.Not(holds)])

    def violated_at(self, point) -> bool:
        """Replays a witness: assumptions true and the goal false or undefined at `point`."""
        if not all(evaluate(a, point) for a in self.original_assume):
            return False
        try:
            return not evaluate(self.original_goal, point)
        except (ZeroDivisionError, ValueError):
            return True


def prove(goal, assume=(), *, solver="z3", timeout_ms=DEFAULT_TIMEOUT_MS, minimize=(),
          prefer=(), vacuity=True):
    """Decide whether `goal` holds for all variable values in range where `assume` holds.

    Returns Proved(), Refuted(witness) with a replayed counterexample (lexicographically
    smallest over the `minimize` variables, given as Vars or names), or Unknown(reason).
    A witness also meets the conditions `prefer` when some witness does (they narrow the
    search, never the proof). The witness names every variable of the goal, the assumptions,
    `prefer` and `minimize`.
    `vacuity=False` skips the second query that sets `Proved.vacuous` (always False then),
    for callers that only need the verdict.
    """
    check_options(solver, timeout_ms)
    assume, minimize = _as_tuple(assume), _as_tuple(minimize)
    query = _Query(goal, assume, [v for v in minimize if isinstance(v, Var)], _as_tuple(prefer))
    order = tuple(v.name if isinstance(v, Var) else v for v in minimize)
    unknown_names = set(order) - {v.name for v in query.variables}
    if unknown_names:
        raise SmtError(f"minimize names {sorted(unknown_names)} that the goal and "
                         f"assumptions do not mention; they mention "
                         f"{[v.name for v in query.variables]}")
    key = (query.key, solver, order, tuple(query.variables), vacuity)
    if key in _cache:
        _stats["hits"] += 1
        _cache.move_to_end(key)
        return _cache[key]
    _stats["misses"] += 1
    verdict = _decide(query, solver, timeout_ms, order, vacuity)
    # an unfinished minimisation may finish with more time, so only final answers are kept
    unfinished = isinstance(verdict, Refuted) and order and not verdict.minimal
    if not isinstance(verdict, Unknown) and not unfinished:
        _cache[key] = verdict
        if len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    _debug(query, solver, verdict)
    return verdict


def _as_tuple(items) -> tuple:
    """One expression, Var or name, or a sequence of them."""
    return (items,) if isinstance(items, (Expr, str)) else tuple(items)


def _decide(query, solver, timeout_ms, order, vacuity=True):
    if Const(False) in query.assume:
        return Proved(vacuous=True)
    if query.goal is Const(True) and query.goal_defined is Const(True):
        return Proved()
    if solver == "z3":
        found = native.decide(query, timeout_ms, order, vacuity)
    else:
        found = _decide_pysmt(query, solver, timeout_ms, order, vacuity)
    if not isinstance(found, tuple):
        return found
    point, minimal = found
    if not query.violated_at(point):
        return Unknown(f"{solver} returned a model that does not replay: {point}; "
                       "this is a bug in the SMT encoding, please report it with to_smtlib()")
    return Refuted(point, minimal=minimal and bool(order))


def _decide_pysmt(query, solver, timeout_ms, order, vacuity):
    """The pysmt path (cvc5, or z3 through pysmt): one width for the whole query."""
    deadline = time.monotonic() + timeout_ms / 1000
    env = environment(query.width)
    with env.factory.Solver(name=solver, logic=QF_BV, incremental=True,
                            solver_options=_timeout_option(solver, timeout_ms)) as smt:
        smt.add_assertion(query.formula())
        try:
            if not smt.solve():
                return Proved(vacuous=vacuity and bool(query.assume)
                              and _domain_is_empty(query, solver, timeout_ms))
        except SolverReturnedUnknownResultError:
            return Unknown(f"{solver} returned unknown within {timeout_ms} ms "
                           f"({query.width}-bit query)")
        except InternalSolverError as error:
            return Unknown(f"{solver} failed: {error}")
        # the witness search is a run of short checks with a time limit of its own
        deadline = time.monotonic() + timeout_ms / 1000
        first = _model(smt, query)
        point = (_preferred(smt, query) if order else None) or first
        return lexicographic(order, point,
                             lambda name, point: _minimise(smt, query, name, point, deadline))


def _domain_is_empty(query, solver, timeout_ms) -> bool:
    """Whether the assumptions contradict each other or the bounds, so a proof says nothing."""
    env = environment(query.width)
    with env.factory.Solver(name=solver, logic=QF_BV,
                            solver_options=_timeout_option(solver, timeout_ms)) as smt:
        smt.add_assertion(env.formula_manager.And(query.domain()))
        try:
            return not smt.solve()
        except (SolverReturnedUnknownResultError, InternalSolverError):
            return False


def _model(smt, query) -> dict[str, int]:
    symbols = [lower(v, query.width) for v in query.variables]
    native = getattr(smt, "z3", None)
    if native is not None and hasattr(smt, "converter"):
        # pysmt's get_value re-fetches the model and converts each value back into a pysmt
        # term; reading the one z3 model directly is an order of magnitude faster
        model = native.model()
        return {v.name: model.eval(smt.converter.convert(s), model_completion=True)
                .as_signed_long() for v, s in zip(query.variables, symbols)}
    return {v.name: smt.get_value(s).bv_signed_value() for v, s in zip(query.variables, symbols)}


def _preferred(smt, query):
    """Keep `query.prefer` for the rest of the search when some witness meets it."""
    if not query.prefer:
        return None
    fm = environment(query.width).formula_manager
    wanted = fm.FreshSymbol()
    smt.add_assertion(fm.Implies(wanted, fm.And([lower(p, query.width) for p in query.prefer])))
    try:
        if not smt.solve([wanted]):
            return None
    except (SolverReturnedUnknownResultError, InternalSolverError):
        return None
    point = _model(smt, query)
    smt.add_assertion(wanted)
    return point


def _minimise(smt, query, name, point, deadline):
    """Fix `name` at its smallest value with the earlier variables fixed; returns the new model
    and whether the search finished before the deadline."""
    var = next(v for v in query.variables if v.name == name)
    fm = environment(query.width).formula_manager
    symbol = lower(var, query.width)

    def model_below(bound):
        # a fresh literal implying the bound, assumed for one check: pysmt would otherwise
        # push and pop a scope around the bound, which costs z3 more than the check
        below = fm.FreshSymbol()
        smt.add_assertion(fm.Implies(below, fm.BVSLE(symbol, fm.SBV(bound, query.width))))
        try:
            return _model(smt, query) if smt.solve([below]) else None
        except (SolverReturnedUnknownResultError, InternalSolverError):
            raise GaveUp from None

    point, value, complete = smallest(name, var.lo, point, model_below, deadline)
    # `point` is a model with name == value, so it stays valid under the new constraint
    smt.add_assertion(fm.Equals(symbol, fm.SBV(value, query.width)))
    return point, complete


def to_smtlib(goal, assume=()) -> str:
    """An SMT-LIB 2 script for the obligation: `sat` means refuted, `unsat` means proved."""
    query = _Query(goal, _as_tuple(assume))
    script = smtlibscript_from_formula(query.formula(), logic=QF_BV)
    out = io.StringIO()
    out.write(f"; argus obligation: {query.original_goal}\n")
    for a in query.original_assume:
        out.write(f"; assuming: {a}\n")
    out.write(f"; {query.width}-bit signed bit-vectors; sat = refuted, unsat = proved\n")
    script.serialize(out, daggify=False)
    return out.getvalue()


def cache_info() -> dict[str, int]:
    """Hits, misses and size of the process-wide verdict cache of `prove`."""
    return {**_stats, "size": len(_cache)}


def clear_cache() -> None:
    """Forget every cached verdict and reset the hit/miss counts."""
    _cache.clear()
    _stats.update(hits=0, misses=0)


def _debug(query, solver, verdict):
    if env.debug_level() >= 1:
        print(f"argus.smt [{solver}, {query.width}-bit] {query.original_goal}: {verdict}",
              file=sys.stderr)

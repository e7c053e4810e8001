"""Nonlinear queries over unbounded integers: products of two unknowns and divisions by an
unknown (grouped or XCD-remapped workgroup ids: `pid % (GROUP * pn) % height`), which a
bit-vector solver must bit-blast as multiplier and divider circuits and rarely finishes.

Every division x // y and x % y becomes a fresh quotient and remainder fixed by
x = y*q + r with r between 0 and y (floor semantics, either sign of y), and z3's nonlinear
arithmetic (its core solver, then nlsat) decides the purified formula. Integers make the
encoding exact, so an unsat answer proves the query and a model is a witness (the caller
replays it); an unknown answer, or a query with a bitwise operator the integers cannot
express, leaves it to the bit-vector path.
"""

from __future__ import annotations

import math
import time
import weakref

import z3

from argus.ir.expr import Const, Term, Var, bounds, missing_subterms
from argus.smt.verdict import checked

#: Bitwise operators with no integer counterpart (a constant mask or shift has one).
_BITWISE = {"xor", "or"}


def nonlinear(query) -> bool:
    """Whether the query multiplies two unknowns or divides by an unknown (and nothing in it
    needs bit-level reasoning)."""
    kinds = [_kind(root) for root in (query.goal, query.goal_defined, *query.assume,
                                      *query.assume_defined)]
    return BITWISE not in kinds and NONLINEAR in kinds


LINEAR, NONLINEAR, BITWISE = 0, 1, 2
#: node -> the worst kind among its subterms (nodes are interned and immutable)
_KINDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _kind(root) -> int:
    for e in missing_subterms(root, _KINDS):
        kind = max((_KINDS[a] for a in e.args), default=LINEAR) if isinstance(e, Term) \
            else LINEAR
        if isinstance(e, Term):
            if e.op in _BITWISE or (e.op in ("and", "shl", "shr") and not _constant_bits(e)):
                kind = BITWISE
            elif (e.op == "mul" and not any(isinstance(a, Const) for a in e.args)) or \
                    (e.op in ("floordiv", "mod") and not isinstance(e.args[1], Const)):
                kind = max(kind, NONLINEAR)
        _KINDS[e] = kind
    return _KINDS[root]


def _constant_bits(e) -> bool:
    """x & (2^k - 1), x >> k, x << k with a constant k: floor arithmetic on integers."""
    mask = e.args[1]
    if not isinstance(mask, Const):
        return False
    if e.op == "and":
        return mask.value >= 0 and (mask.value + 1) & mask.value == 0
    return mask.value >= 0


class _Lowering:
    """Expressions as z3 integer terms, divisions purified into side conditions. A variable
    the assumptions declare a multiple of k is k times a fresh integer, and an integer
    comparison is tightened to the form its integrality implies (below), so that nlsat, which
    reasons over the reals, sees what holds only for integers."""

    def __init__(self, ctx, multiples: dict):
        self.ctx = ctx
        self.multiples = multiples
        self.memo: dict = {}
        self.side: list = []
        #: z3 term id -> interval bounds of the expression it lowers
        self.bounds: dict = {}
        #: (dividend, divisor) -> (q, r): x >> k, x & (2^k - 1), x // 2^k and x % 2^k share one
        self.divisions: dict = {}

    def term(self, root):
        for e in missing_subterms(root, self.memo):
            self.memo[e] = self.node(e)
            if not e.is_bool:
                self.bounds[self.memo[e].get_id()] = bounds(e)
        return self.memo[root]

    def node(self, e):
        ctx = self.ctx
        if isinstance(e, Var):
            k = self.multiples.get(e.name, 1)
            if k == 1:
                return z3.Int(e.name, ctx)
            scaled = z3.Int(f"{e.name}!over{k}", ctx)
            self.bounds[scaled.get_id()] = (-(-e.lo // k), (e.hi - 1) // k)
            return k * scaled
        if isinstance(e, Const):
            return z3.BoolVal(e.value, ctx) if e.is_bool else z3.IntVal(e.value, ctx)
        a = [self.memo[x] for x in e.args]
        op = e.op
        if op in ("lt", "le") or (op in ("eq", "ne") and not e.args[0].is_bool):
            return self.compare(op, a[0], a[1])
        simple = {
            "add": lambda: a[0] + a[1], "sub": lambda: a[0] - a[1], "mul": lambda: a[0] * a[1],
            "neg": lambda: -a[0], "eq": lambda: a[0] == a[1], "ne": lambda: a[0] != a[1],
            "land": lambda: z3.And(a[0], a[1]), "lor": lambda: z3.Or(a[0], a[1]),
            "lnot": lambda: z3.Not(a[0]), "ite": lambda: z3.If(a[0], a[1], a[2]),
            "min": lambda: z3.If(a[0] <= a[1], a[0], a[1]),
            "max": lambda: z3.If(a[0] <= a[1], a[1], a[0]),
        }
        if op in simple:
            return simple[op]()
        if op == "shl":
            return a[0] * (1 << e.args[1].value)
        x, y = e.args
        if op in ("and", "shr"):   # x & (2^k - 1) = x mod 2^k, x >> k = x // 2^k
            y = Const(y.value + 1 if op == "and" else 1 << y.value)
        q, r = self.divide(x, y)
        return r if op in ("and", "mod") else q

    def divide(self, x, y):
        """A fresh (q, r) with x = y*q + r, r in [0, y) for y > 0 and (y, 0] for y < 0; free
        where y = 0, where evaluation raises (the query's definedness conditions rule those
        points in or out)."""
        key = (x, y)
        if key not in self.divisions:
            n = len(self.divisions)
            q, r = z3.Int(f"div!{n}", self.ctx), z3.Int(f"mod!{n}", self.ctx)
            tx, ty = self.term(x), self.term(y)
            form = _linear(tx) if isinstance(y, Const) and y.value > 0 else None
            if form is not None and all(c % y.value == 0 for c in form.values()):
                # a multiple of the divisor divides exactly: keep the quotient linear
                quotient = sum((c // y.value) * (_TERMS[t] if t is not None else 1)
                               for t, c in form.items())
                self.divisions[key] = z3.IntVal(0, self.ctx) + quotient, z3.IntVal(0, self.ctx)
                return self.divisions[key]
            exact = tx == ty * q + r
            # strict bounds written as integers' non-strict ones (nlsat reasons over the reals)
            if bounds(y)[0] > 0:
                self.side += [exact, 0 <= r, r <= ty - 1]
            else:
                # (y > 0, not y >= 1: a real 0 < y < 1 must meet the empty range and vanish)
                self.side += [z3.Implies(ty > 0, z3.And(exact, 0 <= r, r <= ty - 1)),
                              z3.Implies(ty < 0, z3.And(exact, ty + 1 <= r, r <= 0))]
            self.divisions[key] = q, r
        return self.divisions[key]

    def compare(self, op, a, b):
        """a < b, a <= b, a == b, a != b on integers. With a - b = k*X + R, the rest R of
        known bounds narrower than k: k*X + R < 0 iff X <= floor((-R - 1) / k), which is one
        constant t over R's range, so the comparison is X <= t (an equation: X = 0 and R = 0
        when R's range is inside (-k, k))."""
        plain = {"lt": lambda: a <= b - 1, "le": lambda: a <= b, "eq": lambda: a == b,
                 "ne": lambda: a != b}[op]
        split = self.split(a - b)
        if split is None:
            return plain()
        k, big, lo, hi, rest = split
        if op in ("lt", "le"):
            shift = 0 if op == "lt" else 1   # a <= b iff a - b - 1 < 0
            t_lo, t_hi = (-(hi - shift) - 1) // k, (-(lo - shift) - 1) // k
            return big <= t_lo if t_lo == t_hi else plain()
        if -k < lo and hi < k:
            same = z3.And(big == 0, rest() == 0)
            return same if op == "eq" else z3.Not(same)
        return plain()

    def split(self, difference):
        """(k, X, lo, hi, R) with `difference` = k*X + R: k > 1 the gcd of the coefficients of
        the atoms too wide to leave in the rest, R (built on demand) the narrow atoms and the
        constant, within [lo, hi]. None when the difference is not linear, an atom's bounds
        are unknown or no k > 1 divides the wide part."""
        form = _linear(difference)
        if form is None:
            return None
        const = form.pop(None, 0)
        widths = {t: self.width(t) for t in form}
        if not form or any(w is None for w in widths.values()):
            return None
        biggest = max(abs(c) for c in form.values())
        small = {t: c for t, c in form.items() if abs(c) * widths[t][1] < biggest}
        k = math.gcd(*(c for t, c in form.items() if t not in small))
        if k <= 1:
            return None
        ends = [sorted((c * widths[t][0], c * (widths[t][0] + widths[t][1])))
                for t, c in small.items()]
        lo, hi = const + sum(e[0] for e in ends), const + sum(e[1] for e in ends)
        big = sum((c // k) * _TERMS[t] for t, c in form.items() if t not in small)
        return k, big, lo, hi, lambda: sum(c * _TERMS[t] for t, c in small.items()) + const

    def width(self, term_id):
        """(lowest value, range) of an atom of a linear form, from its expression's bounds."""
        found = self.bounds.get(term_id)
        return None if found is None else (found[0], found[1] - found[0])


#: atom id -> z3 term, for the linear forms being built (ids are stable while terms live)
_TERMS: dict = {}


def _linear(term) -> dict | None:
    """{atom id: coefficient, None: constant} of an integer z3 term built from +, -, * by a
    numeral and atoms; None when the term is not of that form."""
    form: dict = {}
    stack = [(term, 1)]
    while stack:
        t, coef = stack.pop()
        if z3.is_int_value(t):
            form[None] = form.get(None, 0) + coef * t.as_long()
        elif z3.is_add(t):
            stack.extend((c, coef) for c in t.children())
        elif z3.is_sub(t):
            first, *rest = t.children()
            stack.append((first, coef))
            stack.extend((c, -coef) for c in rest)
        elif t.decl().kind() == z3.Z3_OP_UMINUS:
            stack.append((t.children()[0], -coef))
        elif z3.is_mul(t) and sum(z3.is_int_value(c) for c in t.children()) == 1:
            value = next(c for c in t.children() if z3.is_int_value(c)).as_long()
            other = next(c for c in t.children() if not z3.is_int_value(c))
            stack.append((other, coef * value))
        else:
            _TERMS[t.get_id()] = t
            form[t.get_id()] = form.get(t.get_id(), 0) + coef
    return {k: v for k, v in form.items() if v or k is None}


def multiples(query) -> dict:
    """Variables the assumptions declare multiples of a constant: x % k == 0, x & (2^j-1) == 0."""
    found = {}
    for a in query.assume:
        if isinstance(a, Term) and a.op == "eq" and a.args[1] is Const(0) and \
                isinstance(a.args[0], Term) and isinstance(a.args[0].args[0], Var):
            inner = a.args[0]
            k = inner.args[1]
            if not isinstance(k, Const) or k.value <= 1:
                continue
            if inner.op == "mod":
                found[inner.args[0].name] = math.lcm(found.get(inner.args[0].name, 1), k.value)
            elif inner.op == "and" and (k.value + 1) & k.value == 0:
                found[inner.args[0].name] = math.lcm(found.get(inner.args[0].name, 1),
                                                     k.value + 1)
    return found


#: z3's arithmetic core (incremental linearisation) first, then nlsat (cylindrical algebraic
#: decomposition over the reals): each proves remappings the other gives up on. Each gets a
#: resource limit (z3's deterministic work count) so that verdicts do not depend on the load
#: of the machine; the query's time limit still applies. A remapped 1-D grid's injectivity
#: costs about 1.4M (measured on the XCD remap).
_TACTICS = (("smt", 4_000_000), ("qfnra-nlsat", 1_000_000))


def _unknowns(term, memo: dict) -> frozenset:
    """Ids of the uninterpreted constants in a z3 term, memoised per shared subterm."""
    stack = [(term, False)]
    while stack:
        t, expanded = stack.pop()
        key = t.get_id()
        if key in memo:
            continue
        children = t.children()
        if not expanded and children:
            stack.append((t, True))
            stack.extend((c, False) for c in children if c.get_id() not in memo)
            continue
        if z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            memo[key] = frozenset((key,))
        else:
            memo[key] = frozenset().union(*(memo[c.get_id()] for c in children))
    return memo[term.get_id()]


def _cone(goal, constraints) -> list:
    """The constraints connected to `goal` through shared unknowns: nlsat's effort grows
    steeply with the number of unknowns, and the others (lanes and slots of an index that
    the tightened goal no longer mentions) cannot make the rest unsatisfiable."""
    memo: dict = {}
    unknowns = [_unknowns(c, memo) for c in constraints]
    reached = set(_unknowns(goal, memo))
    kept = [False] * len(constraints)
    changed = True
    while changed:
        changed = False
        for i, names in enumerate(unknowns):
            if not kept[i] and (names & reached or not names):
                kept[i], changed = True, True
                reached |= names
    return [c for c, keep in zip(constraints, kept) if keep]


def decide(query, timeout_ms: int):
    """"unsat", a model {name: int}, or None (unknown or out of time)."""
    ctx, lowering, kept, negated, complete = formula(query)
    answer = z3.unknown
    deadline = time.monotonic() + timeout_ms / 1000
    for tactic, work in _TACTICS:
        solver = z3.Tactic(tactic, ctx).solver()
        solver.set("rlimit", work)
        solver.set("timeout", max(1, int((deadline - time.monotonic()) * 1000)))
        solver.add(*kept, negated)
        answer = checked(solver)
        if answer != z3.unknown:
            break
    _TERMS.clear()
    if answer == z3.unsat:
        return "unsat"
    if answer != z3.sat or not complete:
        return None   # a model of the cone alone may violate the constraints left out
    model = solver.model()
    point = {}
    for v in query.variables:
        value = model.eval(lowering.memo[v], model_completion=True)
        if not z3.is_int_value(value):
            return None
        point[v.name] = value.as_long()
    return point


def formula(query):
    """(context, lowering, constraints kept, negated goal, whether every constraint was kept):
    the purified integer formula of a query, in a z3 context of its own. z3's nonlinear
    heuristics follow term ids, and in the shared main context those depend on every term any
    earlier query built: the grouped remap's race check, proved in 0.5 s in a fresh process,
    ran out of its resource limit in CI after a thousand other tests. The query's names are
    canonical already (`absint.queries.canonical`), so in its own context a query is decided
    the same way wherever it is asked."""
    ctx = z3.Context()
    lowering = _Lowering(ctx, multiples(query))
    parts = []
    for v in query.variables:
        x = lowering.term(v)
        parts += [x >= v.lo, x <= v.hi - 1]
    for a, d in zip(query.assume, query.assume_defined):
        parts += [lowering.term(d), lowering.term(a)]
    holds = lowering.term(query.goal)
    if query.goal_defined is not Const(True):
        holds = z3.And(lowering.term(query.goal_defined), holds)
    negated = z3.Not(holds)
    kept = _cone(negated, parts + lowering.side)
    return ctx, lowering, kept, negated, len(kept) == len(parts) + len(lowering.side)


__all__ = ["decide", "multiples", "nonlinear"]

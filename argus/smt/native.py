"""The z3 path: expressions lowered straight to z3 terms, each subterm only as wide as its bounds.

The pysmt encoding (`encode`) gives every term of a query one width, that of its widest
subterm, so a lane formula next to a 2^31-sized dimension is bit-blasted at 40 bits. Here a
subterm is a signed bit-vector wide enough for its interval bounds plus a spare bit, and an
operation sign-extends its operands to the widest of them and of its result, where two's
complement arithmetic is exact (the true result fits). Verdicts equal the uniform encoding's;
the solver's circuits are several times smaller.
"""

from __future__ import annotations

import time
import weakref

import z3

from argus.ir.expr import Const, Term, Var, bounds, missing_subterms
from argus.smt import nonlinear
from argus.smt.encode import division_kind, signed_bits
from argus.smt.minimise import GaveUp, lexicographic, smallest
from argus.smt.verdict import Proved, Unknown, checked

_CONTEXT = z3.main_ctx()
#: node -> (z3 term, width); width 0 for conditions. Widths follow from the node's bounds, so a
#: node lowers the same way in every query.
_LOWERED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def width_of(e) -> int:
    """Bits of a signed bit-vector holding every value of `e`, and one spare."""
    lo, hi = bounds(e)
    return max(signed_bits(lo), signed_bits(hi)) + 1


def lower(expr):
    """(z3 term, width) for `expr`; conditions have width 0."""
    hit = _LOWERED.get(expr)
    if hit is not None:
        return hit
    for e in missing_subterms(expr, _LOWERED):
        _LOWERED[e] = _lower_node(e)
    return _LOWERED[expr]


def condition(expr):
    """The z3 boolean term of a condition."""
    term, width = lower(expr)
    assert width == 0, f"{expr} is an integer, not a condition"
    return term


def symbol(var: Var):
    return lower(var)[0]


def _extend(term, width: int, to: int, e=None):
    """`term` (of `e`, `width` bits) at `to` bits. Non-negative values are zero-extended: the
    new bits are then constants the bit-blaster folds away (a narrow operand of a product stays
    a narrow circuit), where sign bits would be unknowns until the solver learns them."""
    if width == to:
        return term
    if e is not None and bounds(e)[0] >= 0:
        return z3.ZeroExt(to - width, term)
    return z3.SignExt(to - width, term)


def _lower_node(e):
    if isinstance(e, Var):
        width = width_of(e)
        if e.lo >= 0:
            # only the magnitude bits are unknowns; the sign bit is the constant 0
            magnitude = max(1, (e.hi - 1).bit_length())
            raw = z3.BitVec(e.name, magnitude, _CONTEXT)
            return (raw if magnitude == width else z3.ZeroExt(width - magnitude, raw)), width
        return z3.BitVec(e.name, width, _CONTEXT), width
    if isinstance(e, Const):
        if e.is_bool:
            return z3.BoolVal(e.value, _CONTEXT), 0
        width = width_of(e)
        return z3.BitVecVal(e.value, width, _CONTEXT), width
    lowered = [_LOWERED[a] for a in e.args]
    op = e.op
    if op in ("land", "lor"):
        return (z3.And if op == "land" else z3.Or)(lowered[0][0], lowered[1][0]), 0
    if op == "lnot":
        return z3.Not(lowered[0][0]), 0
    if op == "ite" and e.is_bool:
        return z3.If(lowered[0][0], lowered[1][0], lowered[2][0]), 0
    if op in ("eq", "ne") and e.args[0].is_bool:
        same = lowered[0][0] == lowered[1][0]
        return (same if op == "eq" else z3.Not(same)), 0
    if op in ("lt", "le", "eq", "ne"):
        to = max(lowered[0][1], lowered[1][1])
        a, b = (_extend(t, w, to, arg) for (t, w), arg in zip(lowered, e.args))
        term = {"lt": lambda: a < b, "le": lambda: a <= b, "eq": lambda: a == b,
                "ne": lambda: a != b}[op]()
        return term, 0
    width = width_of(e)
    if op == "ite":
        to = max(width, lowered[1][1], lowered[2][1])
        return z3.If(lowered[0][0], _extend(*lowered[1], to, e.args[1]),
                     _extend(*lowered[2], to, e.args[2])), to
    to = max([width] + [w for _, w in lowered])
    args = [_extend(t, w, to, arg) for (t, w), arg in zip(lowered, e.args)]
    return _arithmetic(op, e, args, to), to


def _arithmetic(op, e, args, width):
    if op == "add":
        return args[0] + args[1]
    if op == "sub":
        return args[0] - args[1]
    if op == "mul":
        return args[0] * args[1]
    if op == "neg":
        return -args[0]
    if op == "and":
        return args[0] & args[1]
    if op == "or":
        return args[0] | args[1]
    if op == "xor":
        return args[0] ^ args[1]
    if op == "shl":
        return args[0] << args[1]  # logical left shift; counts past the width give 0
    if op == "shr":
        return args[0] >> args[1]  # arithmetic right shift: floor division by 2^n
    if op == "min":
        return z3.If(args[0] <= args[1], args[0], args[1])
    if op == "max":
        return z3.If(args[0] <= args[1], args[1], args[0])
    if op in ("floordiv", "mod"):
        return _floor_div_mod(op, e, args, width)
    raise AssertionError(f"no z3 lowering for operator {op!r}")


def _floor_div_mod(op, e, args, width):
    x, y = args
    kind = division_kind(e)
    if kind[0] == "pow2":
        return x >> kind[1] if op == "floordiv" else x & ((1 << kind[1]) - 1)
    if kind[0] == "unsigned":
        return z3.UDiv(x, y) if op == "floordiv" else z3.URem(x, y)
    zero = z3.BitVecVal(0, width, _CONTEXT)
    remainder = z3.SRem(x, y)
    # truncating division rounds towards zero; floor differs when the remainder is non-zero and
    # its sign differs from the divisor's
    off_by_one = z3.And(remainder != zero, z3.Xor(remainder < zero, y < zero))
    if op == "floordiv":
        quotient = x / y  # z3's `/` on bit-vectors is signed, truncating division
        return z3.If(off_by_one, quotient - 1, quotient)
    return z3.If(off_by_one, remainder + y, remainder)


# ---------------------------------------------------------------------------------------------
# deciding


def domain(query) -> list:
    """Variable bounds ∧ assumptions (where defined), as z3 conditions."""
    parts = []
    for v in query.variables:
        term, width = lower(v)
        parts.append(z3.BitVecVal(v.lo, width, _CONTEXT) <= term)
        parts.append(term <= z3.BitVecVal(v.hi - 1, width, _CONTEXT))
    for a, d in zip(query.assume, query.assume_defined):
        parts += [condition(d), condition(a)]
    return [p for p in parts if not z3.is_true(p)]


def decide(query, timeout_ms: int, order, vacuity: bool):
    """Proved, Unknown, or (witness, minimal): a model minimised over `order`, which the
    caller replays before reporting it."""
    deadline = time.monotonic() + timeout_ms / 1000
    holds = condition(query.goal)
    if query.goal_defined is not Const(True):
        holds = z3.And(condition(query.goal_defined), holds)
    rewrite = _alignment(query)
    formula = [rewrite(p) for p in [*domain(query), z3.Not(holds)]]

    def proved():
        return Proved(vacuous=vacuity and bool(query.assume)
                      and _domain_is_empty(query, timeout_ms))

    cases = _case_splits(query)
    # a witness to minimise is searched here too: the bit-vector solver minimises it
    solver = _solver(int(_remaining_ms(deadline) * (WHOLE_FIRST_SHARE if cases else 1)))
    solver.add(*formula)
    answer = checked(solver) if cases else z3.unknown
    found = None
    if answer == z3.unknown:
        if _unsat_in_every_case(formula, cases, deadline, rewrite):
            return proved()
        if not nonlinear.nonlinear(query):
            # a linear query the bit-blaster does not settle quickly is often easy over the
            # integers (shifts and masks by constants become quotients and remainders): the
            # causal mask of attention with SK != SQ took z3's bit-vectors over 10 s and the
            # integer encoding 0.03 s
            solver.set("timeout", min(BITVECTOR_FIRST_MS, _remaining_ms(deadline)))
            answer = checked(solver)
        if answer == z3.unknown and _remaining_ms(deadline) > 1:
            found = nonlinear.decide(query, int(_remaining_ms(deadline) * NONLINEAR_SHARE))
            if found == "unsat":
                return proved()
            if found is not None and not order:
                return found, False
        if answer == z3.unknown:
            solver.set("timeout", _remaining_ms(deadline))
            answer = checked(solver)
    if answer == z3.unsat:
        return proved()
    if answer == z3.unknown:
        if found is not None:
            return found, False
        return Unknown(f"z3 returned unknown within {timeout_ms} ms "
                       f"({solver.reason_unknown()})")
    # the witness search is a run of short checks with a time limit of its own
    deadline = time.monotonic() + timeout_ms / 1000
    solver.set("timeout", timeout_ms)
    # each variable's rewritten term, built once: a model is read many times while minimising
    terms = {v.name: rewrite(symbol(v)) for v in query.variables}
    first = _model(solver, terms)
    point = (_preferred(solver, query, rewrite, terms) if order else None) or first
    return lexicographic(order, point, lambda name, point: _minimise(solver, query, name, point,
                                                                     deadline, terms))


def _alignment(query):
    """A rewrite of z3 terms that writes each variable the assumptions make a multiple of 2^k
    (`K & 127 == 0`, a size in whole tiles) as its high bits followed by k zero bits. Every
    model of the query has those zeros, so the rewritten query has the same models; but the
    bit-blaster now sees constants where it saw unknowns (`K >> 7` becomes a plain variable),
    and a split-K obligation is decided several times faster."""
    zeros: dict = {}
    for fact in query.assume:
        for conjunct in _conjuncts(fact):
            var, bits = _multiple_of_power_of_two(conjunct)
            if var is not None:
                zeros[var] = max(zeros.get(var, 0), bits)
    pairs = []
    for var, bits in sorted(zeros.items(), key=lambda item: item[0].name):
        raw = _raw(var)
        width = raw.size()
        high = (z3.Concat(z3.BitVec(f"{var.name}>>{bits}", width - bits, _CONTEXT),
                          z3.BitVecVal(0, bits, _CONTEXT)) if bits < width
                else z3.BitVecVal(0, width, _CONTEXT))
        pairs.append((raw, high))
    if not pairs:
        return lambda term: term
    return lambda term: z3.substitute(term, *pairs)


def _conjuncts(e):
    if isinstance(e, Term) and e.op == "land":
        return [c for a in e.args for c in _conjuncts(a)]
    return [e]


def _multiple_of_power_of_two(fact):
    """(v, k) when `fact` is `v & (2^k - 1) == 0` for a non-negative variable v, else
    (None, 0)."""
    if not (isinstance(fact, Term) and fact.op == "eq" and Const(0) in fact.args):
        return None, 0
    masked = fact.args[0] if fact.args[1] == Const(0) else fact.args[1]
    if not (isinstance(masked, Term) and masked.op == "and"):
        return None, 0
    var = next((a for a in masked.args if isinstance(a, Var)), None)
    mask = next((a for a in masked.args if isinstance(a, Const) and not a.is_bool), None)
    if var is None or mask is None or var.lo < 0 or mask.value < 1:
        return None, 0
    if mask.value & (mask.value + 1):
        return None, 0
    return var, mask.value.bit_length()


def _raw(var):
    """The z3 constant `lower` made for a non-negative variable (its magnitude bits)."""
    term = lower(var)[0]
    return term.arg(0) if z3.is_app_of(term, z3.Z3_OP_ZERO_EXT) else term


#: Time a linear query gets on the bit-vector solver alone before the integer encoding is
#: tried (then the bit-vector solver again with what is left).
BITVECTOR_FIRST_MS = 1000
#: Share of a nonlinear query's time the integer attempt may take (it stops earlier at its
#: resource limits) before the bit-vector path gets the rest.
NONLINEAR_SHARE = 0.8
#: A variable with at most this many values that multiplies a non-constant term is split on:
#: fixed, the product is linear. Split-K offsets (`wg2 * (K >> 7)`) made queries 30x slower
#: as one nonlinear query than as four linear ones (measured on gemm with split_k=4) -- until
#: `_alignment` wrote K as whole tiles: the query whole is then 2-3x faster than its cases,
#: so it is tried first, for `WHOLE_FIRST_SHARE` of the time.
SPLIT_VALUES = 8
#: Largest number of cases a query is split into.
MAX_CASES = 16
#: Share of the time the whole query gets before a query with case splits is split.
WHOLE_FIRST_SHARE = 0.5


def _case_splits(query) -> list:
    """Assignments of the small factors of nonlinear products, covering their whole ranges;
    [] when the query has none (or too many cases)."""
    factors: dict = {}
    seen: set = set()
    stack = [query.goal, *query.assume]
    while stack:
        e = stack.pop()
        if e in seen or not isinstance(e, Term):
            continue
        seen.add(e)
        if e.op == "mul" and not any(isinstance(a, Const) for a in e.args):
            for a in e.args:
                if isinstance(a, Var) and a.hi - a.lo <= SPLIT_VALUES:
                    factors[a.name] = a
        stack.extend(e.args)
    cases = [[]]
    for var in sorted(factors.values(), key=lambda v: v.name):
        cases = [case + [(var, value)] for case in cases for value in range(var.lo, var.hi)]
        if len(cases) > MAX_CASES:
            return []
    return cases if factors else []


def _unsat_in_every_case(formula, cases, deadline, rewrite) -> bool:
    """Whether each case (a fresh solver, so z3's preprocessing substitutes the fixed values)
    is unsatisfiable within the query's time; any other answer leaves the query to be solved
    whole."""
    for case in cases:
        solver = _solver(_remaining_ms(deadline))
        solver.add(*formula, *(rewrite(symbol(var) == z3.BitVecVal(value, width_of(var),
                                                                   _CONTEXT))
                               for var, value in case))
        if checked(solver) != z3.unsat:
            return False
    return bool(cases)


def _remaining_ms(deadline: float) -> int:
    return max(1, int((deadline - time.monotonic()) * 1000))


def _solver(timeout_ms: int):
    solver = z3.SolverFor("QF_BV", ctx=_CONTEXT)
    solver.set("timeout", int(timeout_ms))
    return solver


def _domain_is_empty(query, timeout_ms) -> bool:
    solver = _solver(timeout_ms)
    solver.add(*domain(query))
    return checked(solver) == z3.unsat


def _model(solver, terms: dict) -> dict[str, int]:
    """The solver's model, read at each variable's (rewritten) term."""
    model = solver.model()
    return {name: model.eval(term, model_completion=True).as_signed_long()
            for name, term in terms.items()}


def _preferred(solver, query, rewrite, terms):
    """Keep `query.prefer` for the rest of the search when some witness meets it (a model);
    None when none does or z3 cannot tell."""
    if not query.prefer:
        return None
    wanted = z3.FreshBool(ctx=_CONTEXT)
    solver.add(z3.Implies(wanted, z3.And([rewrite(condition(p)) for p in query.prefer])))
    if checked(solver, wanted) != z3.sat:
        return None
    point = _model(solver, terms)
    solver.add(wanted)
    return point


def _minimise(solver, query, name, point, deadline, terms):
    """Fix `name` at its smallest value with the earlier variables fixed; returns the new model
    and whether the search finished before the deadline."""
    var = next(v for v in query.variables if v.name == name)
    term, width = terms[name], lower(var)[1]

    def model_below(bound):
        # a fresh literal implying the bound, assumed for one check, instead of a scope
        below = z3.FreshBool(ctx=_CONTEXT)
        solver.add(z3.Implies(below, term <= z3.BitVecVal(bound, width, _CONTEXT)))
        answer = checked(solver, below)
        if answer == z3.unknown:
            raise GaveUp
        return _model(solver, terms) if answer == z3.sat else None

    point, value, complete = smallest(name, var.lo, point, model_below, deadline)
    # `point` is a model with name == value, so it stays valid under the new constraint
    solver.add(term == z3.BitVecVal(value, width, _CONTEXT))
    return point, complete

"""Lowering of `argus.ir.expr` terms to pysmt bit-vector formulas that cannot overflow.

The width is chosen from the interval bounds of every subterm, so signed two's-complement
arithmetic at that width equals integer arithmetic; floor division and modulo are encoded
exactly for negative operands. Points where a term is undefined are made explicit by `defined`.
"""

from __future__ import annotations

import weakref

from pysmt.environment import Environment

from argus.ir.expr import Const, Expr, Term, Var, as_expr, bounds, ite, missing_subterms

_ENVIRONMENTS: dict[int, Environment] = {}
_LOWERED: dict[int, weakref.WeakKeyDictionary] = {}


def environment(width: int) -> Environment:
    """One pysmt environment per width, so a variable keeps its plain name in every query."""
    env = _ENVIRONMENTS.get(width)
    if env is None:
        env = _ENVIRONMENTS[width] = Environment()
        _LOWERED[width] = weakref.WeakKeyDictionary()
    return env


def signed_bits(value: int) -> int:
    """Bits of the narrowest two's-complement bit-vector holding `value`."""
    return (value if value >= 0 else ~value).bit_length() + 1


def width_for(exprs) -> int:
    """Bit width holding every value of every subterm, plus a spare bit, rounded up to bytes."""
    needed = 1
    for e in exprs:
        lo, hi = _extremes(as_expr(e))
        needed = max(needed, signed_bits(lo), signed_bits(hi))
    return max(8, -(-(needed + 1) // 8) * 8)


_EXTREMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _extremes(root: Expr) -> tuple[int, int]:
    """The smallest lower and largest upper bound over every subterm of `root`, cached per node
    (nodes are interned and immutable, so queries sharing subterms walk them once). The widest
    signed value of a set lies at its minimum or its maximum."""
    stack = [(root, False)]
    while stack:
        e, ready = stack.pop()
        if e in _EXTREMES:
            continue
        if not isinstance(e, Term):
            _EXTREMES[e] = bounds(e)
        elif ready:
            lo, hi = bounds(e)
            for a in e.args:
                a_lo, a_hi = _EXTREMES[a]
                lo, hi = min(lo, a_lo), max(hi, a_hi)
            _EXTREMES[e] = (lo, hi)
        else:
            stack.append((e, True))
            stack.extend((a, False) for a in e.args if a not in _EXTREMES)
    return _EXTREMES[root]


def defined(expr) -> Expr:
    """Condition under which evaluating `expr` raises nothing: divisors are non-zero and shift
    counts non-negative wherever evaluation reaches them (ite evaluates one branch). The
    condition is itself safe to evaluate: each check runs only where its operand is defined.
    Answers are cached per node (nodes are interned), so only subterms new to the process are
    visited."""
    expr = as_expr(expr)
    memo = _DEFINED
    if (hit := memo.get(expr)) is not None:
        return hit
    for e in missing_subterms(expr, memo):
        if not isinstance(e, Term):
            memo[e] = Const(True)
        elif e.op == "ite":
            c, a, b = e.args
            branches = memo[a] if memo[a] is memo[b] else ite(c, memo[a], memo[b])
            memo[e] = _only_where(memo[c], branches)
        elif e.op in ("land", "lor"):
            memo[e] = _decided(e.op, *e.args, memo)
        else:
            result = Const(True)
            for arg in e.args:
                result = _conjoin(result, memo[arg])
            if e.op in ("floordiv", "mod", "shl", "shr"):
                operand = e.args[1]
                check = _operand_defined(e.op, operand)
                result = _conjoin(result, _only_where(memo[operand], check))
            memo[e] = result
    return memo[expr]


_DEFINED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _decided(op, a, b, memo) -> Expr:
    """`a & b` is defined where both sides are, or where one defined side is false (`a | b`:
    true), which decides it, as evaluation does."""
    da, db = memo[a], memo[b]
    if da is Const(True) and db is Const(True):
        return Const(True)

    def deciding(side, defined_side):
        decides = side if op == "lor" else ~side
        return _only_where(defined_side, decides)
    both = _conjoin(da, db)
    return both | deciding(a, da) | deciding(b, db)


def _operand_defined(op, operand):
    lo, hi = bounds(operand)
    if op in ("floordiv", "mod"):
        return operand.ne(0) if lo <= 0 <= hi else Const(True)
    return operand >= 0 if lo < 0 else Const(True)


def _only_where(guard, condition):
    """guard ∧ condition, evaluating condition only where guard holds."""
    if guard is Const(True) or condition is Const(True):
        return _conjoin(guard, condition)
    return ite(guard, condition, Const(False))


def _conjoin(a, b):
    if a is Const(True):
        return b
    return a if b is Const(True) else a & b


def lower(expr, width: int):
    """The pysmt term for `expr` over signed bit-vectors of `width` bits, in the pysmt
    environment `environment(width)`."""
    env = environment(width)
    cache = _LOWERED[width]
    fm = env.formula_manager
    bv_type = env.type_manager.BVType(width)
    expr = as_expr(expr)
    for e in missing_subterms(expr, cache):
        cache[e] = _lower_node(e, fm, bv_type, width, cache)
    return cache[expr]


def _lower_node(e, fm, bv_type, width, cache):
    if isinstance(e, Var):
        return fm.Symbol(e.name, bv_type)
    if isinstance(e, Const):
        if e.is_bool:
            return fm.Bool(e.value)
        return fm.SBV(e.value, width)
    args = [cache[a] for a in e.args]
    op = e.op
    if op in _SIMPLE:
        return getattr(fm, _SIMPLE[op])(*args)
    if op == "eq":
        return fm.Iff(*args) if e.args[0].is_bool else fm.Equals(*args)
    if op == "ne":
        return fm.Not(fm.Iff(*args) if e.args[0].is_bool else fm.Equals(*args))
    if op == "min":
        return fm.Ite(fm.BVSLE(*args), *args)
    if op == "max":
        return fm.Ite(fm.BVSLE(*args), args[1], args[0])
    if op in ("floordiv", "mod"):
        return _floor_div_mod(op, e, args, fm, width)
    raise AssertionError(f"no SMT lowering for operator {op!r}")


_SIMPLE = {
    "add": "BVAdd", "sub": "BVSub", "mul": "BVMul", "neg": "BVNeg", "and": "BVAnd",
    "or": "BVOr", "xor": "BVXor", "shl": "BVLShl", "shr": "BVAShr", "lt": "BVSLT",
    "le": "BVSLE", "land": "And", "lor": "Or", "lnot": "Not", "ite": "Ite",
}


def division_kind(e) -> tuple:
    """How both encodings compute e = x // y or x % y exactly: ("pow2", k) for a constant
    divisor 2^k (an arithmetic shift is floor division, a two's-complement mask floor modulo),
    ("unsigned",) when x >= 0 and y > 0, else ("signed",) (truncating division, corrected)."""
    divisor = e.args[1].value if isinstance(e.args[1], Const) else None
    if divisor is not None and divisor > 0 and divisor & (divisor - 1) == 0:
        return ("pow2", divisor.bit_length() - 1)
    if bounds(e.args[0])[0] >= 0 and bounds(e.args[1])[0] > 0:
        return ("unsigned",)
    return ("signed",)


def _floor_div_mod(op, e, args, fm, width):
    x, y = args
    kind = division_kind(e)
    if kind[0] == "pow2":
        if op == "floordiv":
            return fm.BVAShr(x, fm.BV(kind[1], width))
        return fm.BVAnd(x, fm.BV((1 << kind[1]) - 1, width))
    if kind[0] == "unsigned":
        return (fm.BVUDiv if op == "floordiv" else fm.BVURem)(x, y)
    zero = fm.BV(0, width)
    remainder = fm.BVSRem(x, y)
    # truncating division rounds towards zero; floor differs when the remainder is non-zero and
    # its sign differs from the divisor's
    off_by_one = fm.And(fm.Not(fm.Equals(remainder, zero)),
                        fm.Xor(fm.BVSLT(remainder, zero), fm.BVSLT(y, zero)))
    if op == "floordiv":
        quotient = fm.BVSDiv(x, y)
        return fm.Ite(off_by_one, fm.BVSub(quotient, fm.BV(1, width)), quotient)
    return fm.Ite(off_by_one, fm.BVAdd(remainder, y), remainder)

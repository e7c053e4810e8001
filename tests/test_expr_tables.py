"""The expression operator tables agree: every operator of `ir.expr` has an evaluation, interval
bounds, an encoding in both SMT back ends (z3 natively, pysmt for cvc5) and a printed form that
the one reader parses back, nested under every other operator. An operator added to one table
and not the others fails here."""

from __future__ import annotations

import itertools

import pytest
import z3

from argus.ir import expr as E
from argus.ir.expr import Term, Var, bounds, evaluate, parse
from argus.smt import encode, native

X, Y = Var("x", -20, 20), Var("y", 1, 8)
P, Q = X < Y, Y.eq(3)
POINTS = [{"x": x, "y": y} for x, y in [(-17, 3), (-1, 1), (0, 7), (5, 2), (19, 4), (-8, 8 - 1)]]
OPERATORS = sorted(E._OPS)


def _sorts(op: str) -> list[bool]:
    """Whether each operand of `op` is a condition."""
    arity = E._OPS[op][0]
    if op == "ite":
        return [True, False, False]
    return [op in E._BOOL_OPERANDS] * arity


def _term(op: str, ints=(X, Y, X + 1), conds=(P, Q, Y < 5)) -> Term:
    ints, conds = iter(ints), iter(conds)
    return Term(op, tuple(next(conds) if is_bool else next(ints) for is_bool in _sorts(op)))


def test_every_operator_has_an_evaluation_and_interval_bounds():
    assert set(E._OPS) == set(E._EVAL) == set(E._INTERVAL)


@pytest.mark.parametrize("op", OPERATORS)
def test_interval_bounds_contain_every_value(op):
    term = _term(op)
    lo, hi = bounds(term)
    for point in POINTS:
        assert lo <= int(evaluate(term, point)) <= hi, (op, point)


def _z3_value(term, point):
    lowered, width = native.lower(term)
    pairs = []
    for var in (X, Y):
        symbol, var_width = native.lower(var)
        pairs.append((symbol, z3.BitVecVal(point[var.name], var_width)))
    done = z3.simplify(z3.substitute(lowered, *pairs))
    return z3.is_true(done) if width == 0 else done.as_signed_long()


def _pysmt_value(term, point):
    width = encode.width_for([term])
    env = encode.environment(width)
    fm = env.formula_manager
    lowered = encode.lower(term, width)
    subs = {encode.lower(v, width): fm.SBV(point[v.name], width) for v in (X, Y)}
    done = env.simplifier.simplify(env.substituter.substitute(lowered, subs))
    return done.constant_value() if done.is_bool_constant() else done.bv_signed_value()


@pytest.mark.parametrize("op", OPERATORS)
def test_both_smt_encodings_compute_what_evaluate_computes(op):
    term = _term(op)
    for point in POINTS:
        expected = evaluate(term, point)
        expected = bool(expected) if term.is_bool else int(expected)
        assert _z3_value(term, point) == expected, (op, point, "z3")
        assert _pysmt_value(term, point) == expected, (op, point, "pysmt")


@pytest.mark.parametrize("outer", OPERATORS)
def test_printing_and_parsing_agree_under_every_nesting(outer):
    """The printer's precedences (`_OPS`) and the reader's grammar (Python's) agree: every
    operator, as every operand of every other, prints to text that parses to the same node."""
    variables = {"x": X, "y": Y}
    plain = _term(outer)
    assert parse(str(plain), variables) is plain
    for inner, position in itertools.product(OPERATORS, range(E._OPS[outer][0])):
        nested = _term(inner)
        if nested.is_bool != _sorts(outer)[position]:
            continue
        args = list(plain.args)
        args[position] = nested
        term = Term(outer, tuple(args))
        assert parse(str(term), variables) is term, (outer, inner, position, str(term))

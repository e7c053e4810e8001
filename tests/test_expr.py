"""Symbolic expressions: evaluation, interval bounds and the normaliser, checked exhaustively.

Random expressions are evaluated over the full grid of their variables' ranges with numpy, so
"bounds contain every value" and "simplify preserves evaluate" are checked for every point.
"""

import gc
import pickle
import weakref

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from argus.ir import expr as expr_module
from argus.ir.expr import (
    And,
    Const,
    Expr,
    ExprSyntaxError,
    Not,
    Or,
    Term,
    Var,
    bounds,
    evaluate,
    free_vars,
    ite,
    max_,
    min_,
    parse,
    simplify,
    substitute,
)

X = Var("x", -8, 8)
Y = Var("y", 0, 16)
Z = Var("z", -3, 5)
SHIFT = Var("s", 0, 4)
POS = Var("d", 1, 5)
NEG = Var("n", -4, -1)
VARS = (X, Y, Z, SHIFT, POS, NEG)
ITERATION = Var("i", 0, 1 << 20)


def grid_env():
    """Every combination of the variables' values, one numpy axis per variable."""
    env = {}
    for axis, v in enumerate(VARS):
        shape = [1] * len(VARS)
        shape[axis] = v.hi - v.lo
        env[v.name] = np.arange(v.lo, v.hi).reshape(shape)
    return env


GRID = grid_env()

leaves = st.one_of(st.sampled_from(VARS), st.integers(-10, 10).map(Const))


def nonzero_divisor(sub):
    return st.one_of(
        st.integers(-6, 6).filter(bool).map(Const),
        st.sampled_from([POS, NEG]),
        sub.map(lambda e: e % 5 + 1),
        sub.map(lambda e: -max_(e, 1)),
    )


def shift_count(sub):
    return st.one_of(st.integers(0, 4).map(Const), st.just(SHIFT), sub.map(lambda e: e % 4))


def extend(sub):
    binary = st.sampled_from(["+", "-", "*", "^", "&", "|", "min", "max"])
    conditions = st.builds(
        lambda op, a, b: {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b,
                          "eq": a.eq(b), "ne": a.ne(b)}[op],
        st.sampled_from(["<", "<=", ">", ">=", "eq", "ne"]), sub, sub)
    return st.one_of(
        st.builds(_binary, binary, sub, sub),
        st.builds(lambda a, d: a // d, sub, nonzero_divisor(sub)),
        st.builds(lambda a, d: a % d, sub, nonzero_divisor(sub)),
        st.builds(lambda a, k: a << k, sub, shift_count(sub)),
        st.builds(lambda a, k: a >> k, sub, shift_count(sub)),
        st.builds(lambda a: -a, sub),
        st.builds(lambda a: ~a, sub),
        st.builds(ite, conditions, sub, sub),
        st.builds(ite, st.builds(_logic, st.sampled_from("&|~"), conditions, conditions), sub, sub),
    )


def _binary(op, a, b):
    import operator

    fns = {"+": operator.add, "-": operator.sub, "*": operator.mul, "^": operator.xor,
           "&": operator.and_, "|": operator.or_, "min": min_, "max": max_}
    return fns[op](a, b)


def _logic(op, c, d):
    return {"&": c & d, "|": c | d, "~": ~c}[op]


def as_expr_tree(e):
    return e if isinstance(e, Expr) else Const(e)


int_exprs = st.recursive(leaves, extend, max_leaves=10).map(as_expr_tree)
conditions = st.builds(lambda a, b: a < b, int_exprs, int_exprs) | st.builds(
    lambda a, b: And(a.ne(b), Not(a < 0)), int_exprs, int_exprs)


def on_grid(e):
    return np.broadcast_to(evaluate(e, GRID), [v.hi - v.lo for v in VARS])


@given(int_exprs)
def test_bounds_contain_every_value(e):
    values = on_grid(e)
    lo, hi = bounds(e)
    assert lo <= values.min() and values.max() <= hi


@given(int_exprs)
def test_simplify_preserves_evaluate(e):
    simple = simplify(e)
    assert np.array_equal(on_grid(simple), on_grid(e)), f"{e}  ->  {simple}"
    lo, hi = bounds(simple)
    assert lo <= on_grid(simple).min() and on_grid(simple).max() <= hi


@given(conditions)
def test_simplify_preserves_conditions(c):
    assert c.is_bool
    assert np.array_equal(on_grid(simplify(c)), on_grid(c)), f"{c}  ->  {simplify(c)}"


@given(int_exprs, int_exprs, st.integers(-7, 7), st.integers(1, 6), st.integers(-3, 3),
       st.booleans())
def test_simplify_decides_residues_a_constant_apart(e, f, c, n, k, equal):
    """x % n == y % n (or the power-of-two mask form) is decided when x - y is a constant plus
    multiples of n: the ring-buffer slots of two iterations, `(i + 2) % 3 == i % 3`."""
    def residues(base):
        x = base + n * k * f + c
        left, right = (x & (n - 1), base & (n - 1)) if n & (n - 1) == 0 else (x % n, base % n)
        return left.eq(right) if equal else left.ne(right)

    compare = residues(e)
    assert np.array_equal(on_grid(simplify(compare)), on_grid(compare))
    # an iteration variable spans many periods, so neither side folds away by its bounds
    assert simplify(residues(ITERATION + e)) == Const((c % n == 0) == equal)


@given(int_exprs, st.data())
def test_array_evaluation_matches_scalar_evaluation(e, data):
    point = {v.name: data.draw(st.integers(v.lo, v.hi - 1), label=v.name) for v in VARS}
    index = tuple(point[v.name] - v.lo for v in VARS)
    scalar = evaluate(e, point)
    assert isinstance(scalar, int)
    assert on_grid(e)[index] == scalar


@given(st.one_of(int_exprs, conditions))
def test_printed_form_parses_back_to_the_same_term(e):
    assert parse(str(e), VARS) is e
    assert parse(str(simplify(e)), VARS) is simplify(e)


def test_parse_reads_python_syntax_without_running_it():
    lane, slot = Var("lane", 0, 64), Var("slot", 0, 4)
    assert parse("lane // 32 * 4 + slot", [lane, slot]) is lane // 32 * 4 + slot
    assert parse("0 <= slot < 4 and not lane == 3", [lane, slot]) is And(
        And(Const(0) <= slot, slot < 4), Not(lane.eq(3)))
    assert parse("slot if lane < 32 else -slot", {"lane": lane, "slot": slot}) is ite(
        lane < 32, slot, -slot)
    with pytest.raises(ExprSyntaxError, match="unknown name 'wave'"):
        parse("wave + 1", [lane])
    with pytest.raises(ExprSyntaxError, match="not part of the expression language"):
        parse("lane ** 2", [lane])
    with pytest.raises(ExprSyntaxError, match="unknown function '__import__'"):
        parse("__import__('os')", [lane])
    with pytest.raises(ExprSyntaxError, match="cannot parse"):
        parse("lane +", [lane])


@given(int_exprs)
def test_simplify_is_idempotent(e):
    once = simplify(e)
    forget_simplifications()
    assert simplify(once) is once


@given(int_exprs)
def test_memoised_simplify_equals_a_fresh_one(e):
    memoised = simplify(e)
    forget_simplifications()
    assert simplify(e) is memoised


def forget_simplifications():
    expr_module.clear_memos()


def _memo_fodder(name: str) -> list:
    lane, reg = Var(name, 0, 64), Var(f"reg_{name}", 0, 4)
    return [(lane * k + reg) // (k + 1) % 7 + reg * k + lane for k in range(1, 20)]


def test_clear_memos_forgets_every_memo_of_every_live_node():
    # twice: the first call scans every live node, a later one only the nodes memoised since;
    # each memo on nodes of its own (fresh variables), so that no other memo hides a lost one
    kept = []
    for round_ in range(2):
        for name, memoise in (("b", bounds), ("f", free_vars), ("s", simplify), ("m", None)):
            exprs = _memo_fodder(f"{name}{round_}")
            kept += exprs   # alive, memos and all
            kept += [memoise(e) if memoise else
                     evaluate(e, {f"m{round_}": np.arange(64), f"reg_m{round_}": 1})
                     for e in exprs]
        live = [n for ref in list(expr_module._INTERNED.data.values()) if (n := ref()) is not None]
        assert all(any(getattr(n, slot) is not None for n in live)
                   for slot in expr_module._MEMO_SLOTS)
        expr_module.clear_memos()
        live = [n for ref in list(expr_module._INTERNED.data.values()) if (n := ref()) is not None]
        assert [(n, slot) for n in live for slot in expr_module._MEMO_SLOTS
                if getattr(n, slot) is not None] == []


def test_hash_consing_makes_equal_terms_identical():
    lane, reg = Var("lane", 0, 64), Var("reg", 0, 4)
    assert Var("lane", 0, 64) is lane
    assert lane // 32 * 4 + reg is Var("lane", 0, 64) // 32 * 4 + Var("reg", 0, 4)
    assert Var("lane", 0, 32) is not lane
    assert Const(1) is not Const(True)
    assert {lane * 2: "twice"}[lane * 2] == "twice"
    assert pickle.loads(pickle.dumps(lane // 32 + reg)) is lane // 32 + reg


def test_intern_table_does_not_keep_dead_terms_alive():
    temporary = Var("scratch_variable", 0, 1000) * 12345 + 678
    bounds(temporary)  # the bounds cache must not keep it alive either
    alive = weakref.ref(temporary)
    key = (Term, ("add", temporary.args))
    assert expr_module._INTERNED[key] is temporary
    del temporary
    gc.collect()
    assert alive() is None
    assert key not in expr_module._INTERNED


def test_operators_follow_python_floor_semantics():
    a, b = Var("a", -20, 20), Var("b", -5, 6)
    env = {"a": np.arange(-20, 20)[:, None], "b": np.array([-5, -3, -1, 1, 2, 5])[None, :]}
    assert np.array_equal(evaluate(a // b, env), env["a"] // env["b"])
    assert np.array_equal(evaluate(a % b, env), env["a"] % env["b"])
    assert evaluate(a // b, {"a": -7, "b": 2}) == -4
    assert evaluate(a % b, {"a": -7, "b": 2}) == 1
    assert evaluate(a >> 2, {"a": -7}) == -2


def test_mixed_int_arithmetic_and_numpy_scalars():
    lane = Var("lane", 0, 64)
    assert np.int64(3) + lane is 3 + lane
    assert 3 + 4 == 7 and isinstance(Const(3) + 4, Const) and (Const(3) + 4).value == 7
    assert (~lane) is -lane - 1


def test_readable_printing():
    lane, reg, k = Var("lane", 0, 64), Var("reg", 0, 16), Var("k", 0, 8)
    assert str(lane // 32 * 4 + reg) == "lane // 32 * 4 + reg"
    assert str(8 * (reg // 4) + 4 * (lane // 32) + reg % 4) == \
        "8 * (reg // 4) + 4 * (lane // 32) + reg % 4"
    assert str(lane - (reg - 1)) == "lane - (reg - 1)"
    assert str(ite(lane < 32, k, -k)) == "ite(lane < 32, k, -k)"
    assert str(And(lane < 3, reg.eq(2))) == "(lane < 3) & (reg == 2)"
    assert str(lane * -3) == "lane * (-3)"
    assert str(simplify(Not(lane < 3))) == "lane >= 3"


def test_normaliser_rules_on_mfma_formulas():
    lane, reg, k = Var("lane", 0, 64), Var("reg", 0, 4), Var("k", 0, 1024)
    assert simplify(lane % 32 + 32 * (lane // 32)) is lane
    assert simplify((lane * 64 + reg) // 64) is lane
    assert simplify((lane * 64 + reg) % 64) is reg
    assert simplify(lane % 64) is lane
    assert simplify(lane // 64) is Const(0)
    assert simplify(lane // 32) is lane >> 5
    assert simplify(lane % 32) is lane & 31
    assert simplify(lane % 64 % 32) is lane & 31
    assert simplify(lane // 4 // 8) is lane >> 5
    assert simplify(lane * 1 + 0 - lane) is Const(0)
    assert simplify((k * 8 + reg + 4 * (lane // 32)) // 8) is k
    assert simplify(reg * 2 + reg * 2) is reg * 4
    assert simplify(ite(lane < 64, reg, lane)) is reg
    assert simplify(min_(reg, lane + 4)) is reg
    assert simplify(lane < 64) is Const(True)


def test_bounds_of_individual_operators():
    a, d, n = Var("a", -7, 10), Var("d", 2, 5), Var("n", -5, -1)
    assert bounds(a // d) == (-4, 4)
    assert bounds(a // n) == (-5, 3)
    assert bounds(a % d) == (0, 3)
    assert bounds(a % n) == (-4, 0)
    assert bounds(Var("u", 0, 16) & 5) == (0, 5)
    assert bounds(Var("u", 0, 16) ^ 5) == (0, 15)
    assert bounds(Var("u", 0, 16) << d) == (0, 240)
    assert bounds(a.eq(a + 20)) == (0, 0)
    assert bounds(Var("lane", 0, 64)) == (0, 63)


def test_evaluate_uses_exact_integers_when_int64_could_overflow():
    big = Var("big", 0, 4)
    values = evaluate(big * 2**62 * 4, {"big": np.arange(4)})
    assert list(values) == [i * 2**64 for i in range(4)]


def test_substitute_and_free_vars():
    lane, reg = Var("lane", 0, 64), Var("reg", 0, 4)
    e = lane // 32 * 4 + reg
    assert free_vars(e) == {lane, reg}
    assert substitute(e, {"lane": 33}) is 4 + reg
    assert substitute(e, {reg: lane}) is lane // 32 * 4 + lane
    assert free_vars(Const(3)) == frozenset()


def test_errors_name_the_problem():
    lane = Var("lane", 0, 64)
    with pytest.raises(ValueError, match="empty range"):
        Var("lane", 4, 4)
    with pytest.raises(ValueError, match="identifier"):
        Var("two words", 0, 4)
    with pytest.raises(TypeError, match="no Python truth value"):
        bool(lane < 3)
    with pytest.raises(ZeroDivisionError, match="constant 0"):
        lane // 0
    with pytest.raises(TypeError, match="needs integers"):
        (lane < 3) + 1
    with pytest.raises(TypeError, match="condition"):
        ite(lane, 1, 2)
    with pytest.raises(KeyError, match="no value for variable 'lane'"):
        evaluate(lane + 1, {"reg": 0})
    with pytest.raises(ZeroDivisionError, match="always divides by zero"):
        bounds(lane // Var("zero", 0, 1))
    with pytest.raises(TypeError, match="cannot use"):
        lane + 1.5
    with pytest.raises(ValueError, match="shift left by up to"):
        bounds(lane << Var("count", 0, 2**40))
    assert bounds(lane >> Var("count", 0, 2**40)) == (0, 63)
    with pytest.raises(ValueError, match="unknown operator 'pow'"):
        Term("pow", (lane, 2))
    with pytest.raises(ValueError, match="takes 1 operands"):
        Term("neg", (lane, 2))
    assert Or() is Const(False) and And() is Const(True)

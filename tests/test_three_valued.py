"""⊤ in tag assertions (issue 22, item 1): an assertion reads ⊤ tags in Kleene's three-valued
logic (`argus.absint.kleene`), the same way in the verifier, the interpreter and the replay. A
disjunct that holds makes an `Or` hold whatever the ⊤ side; a false conjunct makes an `And`
false; `Not` swaps. A replay never confirms a violation whose predicate surely holds at the
concrete tags. Properties over random predicates with ⊤ leaves.
"""

from __future__ import annotations

import functools
import itertools

import attrs
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import argus
import argus.lang as T
from argus.absint.concrete import Violation, run
from argus.absint.kleene import array_verdict, holds_at_tags, symbolic_goal
from argus.absint.replay import _confirming, surely_holds
from argus.ir import ops as O
from argus.ir.expr import And, Const, Not, Or, Var, evaluate, free_vars, ite
from argus.ir.expr import substitute as subst
from argus.lang import Tensor

XW, YW = O.role_var("X", "w"), O.role_var("Y", "w")
CONSTANTS = st.integers(-3, 70)


def _leaf():
    tag = st.sampled_from([XW, YW])
    return st.one_of(
        st.builds(lambda t, c: t >= c, tag, CONSTANTS),
        st.builds(lambda t, c: t < c, tag, CONSTANTS),
        st.builds(lambda t, c: t.eq(c), tag, CONSTANTS),
        st.builds(lambda t, c: t.ne(c), tag, CONSTANTS),
        st.builds(lambda d: (XW + d).eq(YW), st.integers(-2, 2)),
        st.builds(lambda c: (XW % 4).eq(c), st.integers(0, 3)))


def _connect(children):
    return st.one_of(
        st.builds(lambda a, b: Or(a, b), children, children),
        st.builds(lambda a, b: And(a, b), children, children),
        st.builds(Not, children),
        st.builds(lambda a, b: Or(Not(a), b), children, children),        # a implies b
        st.builds(lambda a, b: a.eq(b), children, children),
        st.builds(lambda c, a, b: ite(c, a, b), children, children, children))


PREDICATES = st.recursive(_leaf(), _connect, max_leaves=6)


def kleene(predicate, values: dict):
    """Reference three-valued evaluation, by the truth tables: True, False or None (unknown);
    `values[name]` None is ⊤."""
    if isinstance(predicate, Const):
        return bool(predicate.value)
    op = getattr(predicate, "op", None)
    args = getattr(predicate, "args", ())
    if op == "lnot":
        a = kleene(args[0], values)
        return None if a is None else not a
    if op in ("land", "lor"):
        a, b = (kleene(x, values) for x in args)
        stop = op == "lor"   # the value that decides: True for or, False for and
        if stop in (a, b):
            return stop
        return None if None in (a, b) else not stop
    if op in ("eq", "ne") and args[0].is_bool:
        a, b = (kleene(x, values) for x in args)
        if None in (a, b):
            return None
        return (a == b) if op == "eq" else (a != b)
    if op == "ite" and predicate.is_bool:
        c, a, b = (kleene(x, values) for x in args)
        if c is None:
            return a if a == b else None
        return a if c else b
    names = {v.name for v in free_vars(predicate)}
    if any(values.get(n) is None for n in names):
        return None
    return bool(evaluate(predicate, {n: values[n] for n in names}))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(PREDICATES, st.integers(0, 63), st.integers(0, 63), st.booleans(), st.booleans())
def test_the_three_readings_follow_the_truth_tables(predicate, x, y, x_top, y_top):
    values = {XW.name: None if x_top else x, YW.name: None if y_top else y}
    expected = kleene(predicate, values)
    # the verifier's goal, with ⊤ as a condition on two flags
    flag_x, flag_y = Var("flag_x", 0, 2), Var("flag_y", 0, 2)
    goal = symbolic_goal(predicate, {XW.name: flag_x.eq(1), YW.name: flag_y.eq(1)})
    point = {XW.name: x, YW.name: y, "flag_x": int(x_top), "flag_y": int(y_top)}
    assert bool(evaluate(goal, point)) == (expected is True)
    # the interpreter's arrays
    env = {XW.name: np.array([x]), YW.name: np.array([y])}
    tops = {XW.name: np.array([x_top]), YW.name: np.array([y_top])}
    assert bool(array_verdict(predicate, env, tops, (1,))[0]) == (expected is True)
    # the replay's check at one violation's tags
    tags = {"X": {"w": values[XW.name]}, "Y": {"w": values[YW.name]}}
    assert holds_at_tags(predicate, tags, {}) == (expected is True)
    # soundness: surely true means true whatever the ⊤ tags hold
    if expected is True:
        for fx, fy in itertools.product(range(-4, 72, 5), repeat=2):
            concrete = {XW.name: fx if x_top else x, YW.name: fy if y_top else y}
            assert evaluate(predicate, concrete)


@given(st.lists(PREDICATES, min_size=1, max_size=3), st.integers(0, 63), st.integers(0, 63))
def test_a_disjunct_that_holds_makes_the_assertion_hold_whatever_is_unknown(others, x, y):
    """The class of the issue's example: Or(true thing, anything reading ⊤) holds."""
    true_disjunct = XW >= 0
    predicate = Or(*others, true_disjunct)
    assert kleene(predicate, {XW.name: x, YW.name: None}) is True
    assert holds_at_tags(predicate, {"X": {"w": x}, "Y": {"w": None}}, {})


@functools.cache
def _lanes_kernel(predicate):
    """Y loaded by lanes 0..31 only (its other rows' tags are ⊤), X by every lane; the
    assertion on their sum. Row r of both tiles has tag w = r."""
    @T.kernel(waves=1)
    def masked(X: Tensor("f32", 64, 4), Y: Tensor("f32", 64, 4), Z: Tensor("f32", 64, 4)):
        T.grid(1)
        T.tag(X, lambda r, c: {"w": r})
        T.tag(Y, lambda r, c: {"w": r})
        layout = T.copy_layout((64, 4), 1, 4)
        x = X.load((0, 0), layout)
        with T.lanes(lambda wave, lane: lane < 32):
            y = Y.load((0, 0), layout)
        z = x + y
        T.tag_assert(lambda X, Y: subst(predicate, {XW.name: X.w, YW.name: Y.w}), "random")
        Z.store((0, 0), z)

    return masked.ir


def test_the_issues_example_is_proved_and_runs_clean():
    ir = _lanes_kernel(Or(XW >= 0, YW.eq(12345)))
    report = argus.verify(ir, jobs=1)
    assert report.ok, str(report)
    arrays = {n: np.zeros((64, 4), np.float32) for n in "XYZ"}
    assert run(ir, arrays).ok


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(PREDICATES)
def test_verifier_interpreter_and_replay_agree_after_a_lanes_masked_load(predicate):
    ir = _lanes_kernel(predicate)
    # row r: X.w = r; Y.w = r on the lanes that loaded it, else ⊤
    expected = all(kleene(predicate, {XW.name: r, YW.name: r if r < 32 else None}) is True
                   for r in range(64))
    arrays = {n: np.zeros((64, 4), np.float32) for n in "XYZ"}
    result = run(ir, arrays)
    assert result.ok == expected, result.report()
    report = argus.verify(ir, jobs=1)
    assert report.ok == expected, str(report)
    if not expected:
        refuted = [o for o in report.obligations if o.kind == "tag-assertion"]
        assert refuted and all(o.verdict == "refuted" for o in refuted), str(report)
        cex = refuted[0].counterexample
        # the confirmed point really is not surely true at its tags
        assert cex.confirmed and not holds_at_tags(predicate, cex.tags, {})


def test_a_replay_never_confirms_a_violation_whose_predicate_holds_at_its_tags():
    ir = _lanes_kernel(Or(XW >= 0, YW.eq(12345)))
    op = next(o for o in ir.ops() if isinstance(o, O.Binary))
    assertion = op.asserts[0]
    claimed = Violation("tag-assertion", "tag assertion 'random' does not hold",
                        str(assertion.loc), (0, 0, 0), 0, 32, 0, element={"c0": 32, "c1": 0},
                        tags={"X": {"w": 32}, "Y": {"w": None}}, assertion=0)
    assert surely_holds(ir, op, claimed, {})
    assert _confirming([claimed], ir, op, "tag-assertion", {}, str(assertion.loc), 0) == []
    # the same report where the true disjunct is false does confirm
    real = attrs.evolve(claimed, tags={"X": {"w": -1}, "Y": {"w": None}})
    assert _confirming([real], ir, op, "tag-assertion", {}, str(assertion.loc), 0) == [real]

"""How a tag assertion reads tags that may be ⊤ (unknown): Kleene's three-valued logic. A
comparison reading a ⊤ tag is unknown; `Or` is true when one side is true, `And` false when
one side is false, `Not` swaps true and false, and a boolean `ite` or `==` of conditions
follows the same table. The assertion holds only where it is surely true.

`definite(predicate, leaf, logic)` gives (surely true, surely false) of a condition, from what
`leaf` says of each comparison; `logic` is the algebra it is built in: `SYMBOLIC` conditions
for the verifier's SMT goals, `ARRAYS` numpy booleans for the interpreter and the replay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from argus.ir import ops as O
from argus.ir.expr import And, Const, Expr, Not, Or, Term, evaluate, free_vars


class Logic(NamedTuple):
    """The connectives one reading is built with."""

    and_: Callable
    or_: Callable
    not_: Callable
    const: Callable


TRUE, FALSE = Const(True), Const(False)


def _and(a: Expr, b: Expr) -> Expr:
    if a is FALSE or b is FALSE:
        return FALSE
    return b if a is TRUE else a if b is TRUE else And(a, b)


def _or(a: Expr, b: Expr) -> Expr:
    if a is TRUE or b is TRUE:
        return TRUE
    return b if a is FALSE else a if b is FALSE else Or(a, b)


def _not(a: Expr) -> Expr:
    return FALSE if a is TRUE else TRUE if a is FALSE else Not(a)


#: Conditions (constants folded, so an assertion without ⊤ tags keeps its plain goal).
SYMBOLIC = Logic(_and, _or, _not, lambda value: TRUE if value else FALSE)
#: numpy booleans, elementwise (scalars too).
ARRAYS = Logic(np.logical_and, np.logical_or, np.logical_not, np.bool_)

_CONNECTIVES = {"land", "lor", "lnot"}


def is_connective(e: Expr) -> bool:
    """Whether `e` combines conditions (and is not a comparison, a leaf of the logic)."""
    if not isinstance(e, Term):
        return False
    if e.op in _CONNECTIVES:
        return True
    if e.op in ("eq", "ne"):
        return e.args[0].is_bool
    return e.op == "ite" and e.is_bool


def definite(predicate: Expr, leaf: Callable, logic: Logic = SYMBOLIC):
    """(surely true, surely false) of the condition `predicate`; `leaf(e)` gives them for each
    comparison (or other non-connective condition) `e` in it."""
    and_, or_ = logic.and_, logic.or_
    if isinstance(predicate, Const):
        return logic.const(bool(predicate.value)), logic.const(not predicate.value)
    if not is_connective(predicate):
        return leaf(predicate)
    parts = [definite(a, leaf, logic) for a in predicate.args]
    op = predicate.op
    if op == "lnot":
        (t, f), = parts
        return f, t
    if op == "land":
        (at, af), (bt, bf) = parts
        return and_(at, bt), or_(af, bf)
    if op == "lor":
        (at, af), (bt, bf) = parts
        return or_(at, bt), and_(af, bf)
    if op in ("eq", "ne"):   # of two conditions: surely equal when both are surely known
        (at, af), (bt, bf) = parts
        same, differ = or_(and_(at, bt), and_(af, bf)), or_(and_(at, bf), and_(af, bt))
        return (same, differ) if op == "eq" else (differ, same)
    (ct, cf), (at, af), (bt, bf) = parts   # ite(c, a, b): either branch, or both agree
    return (or_(or_(and_(ct, at), and_(cf, bt)), and_(at, bt)),
            or_(or_(and_(ct, af), and_(cf, bf)), and_(af, bf)))


def role_vars(e: Expr) -> list:
    """The tag-role variables (A_k, V_row) `e` reads, in name order."""
    return sorted((v for v in free_vars(e) if O.is_role_var(v)), key=lambda v: v.name)


def symbolic_goal(predicate: Expr, tops: dict, agree: Expr | None = None) -> Expr:
    """The verifier's goal for an assertion whose role variable named n is ⊤ where `tops[n]`
    holds: surely true (with `agree`, a mask's condition: surely equal to it)."""
    def leaf(e):
        unknown = FALSE
        for v in role_vars(e):
            unknown = _or(unknown, tops.get(v.name, FALSE))
        known = _not(unknown)
        return _and(known, e), _and(known, _not(e))
    surely, never = definite(predicate, leaf, SYMBOLIC)
    if agree is None:
        return surely
    return _or(_and(agree, surely), _and(_not(agree), never))


def array_verdict(predicate: Expr, env: dict, tops: dict, shape, agree=None) -> np.ndarray:
    """Where the assertion surely holds, on arrays of `shape`: `env` gives every variable a
    value (a ⊤ tag any stand-in), `tops[n]` where role variable n is ⊤; with `agree` (a mask's
    keep array), where it surely equals it."""
    def leaf(e):
        unknown = np.zeros(shape, bool)
        for v in role_vars(e):
            if v.name in tops:
                unknown = unknown | np.broadcast_to(tops[v.name], shape)
        value = np.broadcast_to(np.asarray(evaluate(e, env), bool), shape)
        return ~unknown & value, ~unknown & ~value
    surely, never = definite(predicate, leaf, ARRAYS)
    if agree is None:
        return np.broadcast_to(surely, shape)
    return np.broadcast_to((agree & surely) | (~agree & never), shape)


def holds_at_tags(predicate: Expr, tags: dict, env: dict) -> bool:
    """Whether the assertion surely holds at one point: `tags` maps role -> {tag name: value,
    None for ⊤} (a replayed violation's), `env` the other variables; a comparison that cannot
    be evaluated there counts as unknown."""
    def leaf(e):
        values = dict(env)
        for v in role_vars(e):
            role, name = O.split_role_var(v.name)
            value = tags.get(role, {}).get(name)
            if value is None:
                return np.bool_(False), np.bool_(False)
            values[v.name] = value
        try:
            value = bool(evaluate(e, values))
        except (KeyError, ZeroDivisionError, ValueError):
            return np.bool_(False), np.bool_(False)
        return np.bool_(value), np.bool_(not value)
    return bool(definite(predicate, leaf, ARRAYS)[0])


__all__ = ["definite", "symbolic_goal", "array_verdict", "holds_at_tags", "SYMBOLIC", "ARRAYS",
           "Logic"]

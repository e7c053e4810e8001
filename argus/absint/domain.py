"""The abstract domain: symbolic tag maps of register tiles.

A tile's tags are formulas in its layout's thread variables (wave, lane, slot) and the kernel's
scalars; each tag carries a condition under which it is ⊤ (unknown). Holders of other elements
are named by fresh variables fixed by total, functional constraints (`defs`), so every query
stays quantifier-free; fresh variables are renamed at each use so two uses never share one.
"""

from __future__ import annotations

import itertools

import attrs

from argus.ir.expr import And, Const, Expr, Or, Var, free_vars, ite, substitute

TRUE, FALSE = Const(True), Const(False)

_counter = itertools.count()


def fresh_var(hint: str, lo: int, hi: int) -> Var:
    """A variable no other part of any query uses (its name ends in `__<n>`)."""
    return Var(f"{hint.partition('__')[0]}__{next(_counter)}", lo, hi)


def is_fresh(v: Var) -> bool:
    head, _, tail = v.name.rpartition("__")
    return bool(head) and tail.isdigit()


def fresh_in(*exprs) -> set:
    """The fresh variables the expressions mention."""
    return {v for e in exprs for v in free_vars(e) if is_fresh(v)}


@attrs.frozen
class Tag:
    """One tag: its value where known, and the condition under which it is ⊤."""

    value: Expr
    top: Expr = FALSE

    def map(self, fn) -> Tag:
        return Tag(fn(self.value), fn(self.top))


TOP_TAG = Tag(Const(0), TRUE)


def join_tags(cond: Expr, then: Tag, orelse: Tag) -> Tag:
    """The tag that is `then` where `cond` holds and `orelse` elsewhere."""
    if then == orelse:
        return then
    return Tag(ite(cond, then.value, orelse.value), ite(cond, then.top, orelse.top))


def merge_tags(x: Tag, y: Tag) -> Tag:
    """Elementwise rule: equal values are kept, different ones become ⊤."""
    if x == y:
        return x
    return Tag(x.value, Or(x.top, y.top, x.value.ne(y.value)))


@attrs.frozen
class Instance:
    """A tile's tags at one concrete-or-symbolic thread, with the constraints of its helpers."""

    tags: dict[str, Tag] = attrs.field(hash=False)
    defs: tuple[Expr, ...] = ()


@attrs.frozen
class TileTags:
    """Tags of a register tile as formulas in `thread` = (wave, lane, slot) of its layout."""

    thread: tuple[Var, Var, Var]
    tags: tuple[tuple[str, Tag], ...] = ()
    defs: tuple[Expr, ...] = ()
    fresh: frozenset = frozenset()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.tags)

    def tag(self, name: str) -> Tag:
        return dict(self.tags)[name]

    def at(self, wave, lane, slot) -> Instance:
        """The tags held by thread (wave, lane, slot); helper variables get fresh names."""
        mapping = {v.name: fresh_var(v.name, v.lo, v.hi) for v in self.fresh}
        mapping.update(zip((v.name for v in self.thread), (wave, lane, slot)))

        def put(e):
            return substitute(e, mapping)
        return Instance({n: t.map(put) for n, t in self.tags},
                        tuple(put(d) for d in self.defs))

    def substitute(self, mapping: dict) -> TileTags:
        """The same map with scalars (loop variables) replaced."""
        def put(e):
            return substitute(e, mapping)
        return TileTags(self.thread, tuple((n, t.map(put)) for n, t in self.tags),
                        tuple(put(d) for d in self.defs), self.fresh)

    def scalars(self) -> frozenset:
        """Variables besides thread and helpers that the map depends on."""
        used = frozenset().union(*(free_vars(t.value) | free_vars(t.top) for _, t in self.tags),
                                 *(free_vars(d) for d in self.defs))
        return used - set(self.thread) - self.fresh


def tile_tags(thread, tags: dict[str, Tag], defs=()) -> TileTags:
    """Build a map; its helper variables are found by name. Formulas are simplified once per
    query by the SMT layer, not here: simplifying every intermediate map costs more."""
    kept = tuple(tags.items())
    defs = tuple(d for d in defs if d is not TRUE)
    fresh = fresh_in(*(t.value for _, t in kept), *(t.top for _, t in kept), *defs)
    return TileTags(tuple(thread), kept, defs, frozenset(fresh))


def widened(thread, names) -> TileTags:
    """Every tag ⊤: what a loop-carried tile becomes when no invariant is found."""
    return TileTags(tuple(thread), tuple((n, TOP_TAG) for n in names))


def equal_tags(a: Tag, b: Tag) -> Expr:
    """The two tags are both ⊤, or both known and equal."""
    return And(a.top.eq(b.top), Or(a.top, a.value.eq(b.value)))

"""The abstract domain: symbolic tag maps of register tiles.

A tile's tags are formulas in its layout's thread variables (wave, lane, slot) and the kernel's
scalars; each tag carries a condition under which it is ⊤ (unknown). Holders of other elements
are named by fresh variables fixed by total, functional constraints (`defs`), so every query
stays quantifier-free; fresh variables are renamed at each use so two uses never share one.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import attrs
import numpy as np

from argus.ir.expr import (
    And,
    Const,
    Expr,
    Or,
    Term,
    Var,
    as_expr,
    evaluate,
    free_vars,
    ite,
    name_order,
    rebuild,
    substitute,
)

TRUE, FALSE = Const(True), Const(False)

_counter = itertools.count()


def fresh_var(hint: str, lo: int, hi: int) -> Var:
    """A variable no other part of any query uses (its name ends in `__<n>`)."""
    return Var(f"{hint.partition('__')[0]}__{next(_counter)}", lo, hi)


def is_fresh(v: Var) -> bool:
    head, _, tail = v.name.rpartition("__")
    return bool(head) and tail.isdigit()


def fresh_in(*exprs) -> set:
    """The fresh variables the expressions mention, and those a gathered row id among them
    depends on through its position (so the defs fixing them stay with the row)."""
    found: set = set()
    for e in exprs:
        found |= _helpers(e)
    rows = [v for v in found if v.name in GATHERED]
    while rows:
        _, length, position = GATHERED[rows.pop().name]
        for v in _helpers(position) | _helpers(length):
            if v not in found:
                found.add(v)
                if v.name in GATHERED:
                    rows.append(v)
    return found


@lru_cache(maxsize=1 << 16)
def _helpers(e: Expr) -> frozenset:
    # expressions are hash-consed and immutable, so the answer per node never changes
    return frozenset(v for v in node_vars(e) if is_fresh(v))


def forget_run_memos() -> None:
    """Drop the per-node helper memo after a run: its keys mention that run's fresh helpers,
    which no later run names again (the counter only grows), so kept they would only hold
    memory, up to the memo's bound, across a search loop's many runs."""
    _helpers.cache_clear()


def node_vars(root: Expr) -> frozenset:
    """`free_vars`, which caches per node, so a subterm shared by many tags and queries is
    walked once per process."""
    return free_vars(root)


def substitute_all(exprs, mapping: dict) -> list[Expr]:
    """`substitute` over many expressions at once (keys are variable names): one memo for all
    of them, and subterms that mention no replaced variable are kept without a walk."""
    mapping = {k: as_expr(v) for k, v in mapping.items()}
    replaced = frozenset(v for root in exprs for v in node_vars(root) if v.name in mapping)
    memo: dict = {}
    out = []
    for root in exprs:
        stack = [(root, False)]
        while stack:
            e, ready = stack.pop()
            if e in memo:
                continue
            if e.__class__ is Var:
                memo[e] = mapping.get(e.name, e)
            elif e.__class__ is not Term or replaced.isdisjoint(node_vars(e)):
                memo[e] = e
            elif ready:
                memo[e] = rebuild(e.op, tuple([memo[a] for a in e.args]))
            else:
                stack.append((e, True))
                stack.extend([(a, False) for a in e.args if a not in memo])
        out.append(memo[root])
    return out


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
        _rename_gathered(self.fresh, mapping)
        flat = [e for _, t in self.tags for e in (t.value, t.top)]
        done = substitute_all(flat + list(self.defs), mapping)
        tags = {n: Tag(done[2 * k], done[2 * k + 1]) for k, (n, _) in enumerate(self.tags)}
        return Instance(tags, tuple(done[len(flat):]))

    def substitute(self, mapping: dict) -> TileTags:
        """The same map with scalars (loop variables) replaced."""
        mapping = dict(mapping)
        rows = {v for v in self.fresh if v.name in GATHERED}
        mapping.update({v.name: fresh_var(v.name, v.lo, v.hi) for v in rows})
        _rename_gathered(rows, mapping)
        mapping = {(k.name if isinstance(k, Var) else k): v for k, v in mapping.items()}
        flat = [e for _, t in self.tags for e in (t.value, t.top)]
        done = substitute_all(flat + list(self.defs), mapping)
        tags = tuple((n, Tag(done[2 * k], done[2 * k + 1])) for k, (n, _) in enumerate(self.tags))
        return TileTags(self.thread, tags, tuple(done[len(flat):]),
                        frozenset(mapping[v.name] if v in rows else v for v in self.fresh))

    def scalars(self) -> frozenset:
        """Variables besides thread and helpers that the map depends on."""
        used = frozenset().union(*(free_vars(t.value) | free_vars(t.top) for _, t in self.tags),
                                 *(free_vars(d) for d in self.defs))
        return used - set(self.thread) - self.fresh


#: Row ids read through a gather: helper name -> (index tensor, its length, position formula).
#: Equal positions of one index tensor read equal ids (Ackermann's reduction of a function).
GATHERED: dict[str, tuple[str, Expr, Expr]] = {}
ROW_RANGE = (-(2**31), 2**31)


def gathered_row(tensor: str, length: Expr, position: Expr) -> Var:
    """A helper standing for `tensor[position]` (-1 where the position is out of range)."""
    row = fresh_var("row", *ROW_RANGE)
    GATHERED[row.name] = (tensor, length, position)
    return row


def _rename_gathered(helpers, mapping: dict):
    for v in helpers:
        if v.name in GATHERED:
            tensor, length, position = GATHERED[v.name]
            GATHERED[mapping[v.name].name] = (tensor, substitute(length, mapping),
                                              substitute(position, mapping))


def renamed_helpers(exprs, mapping: dict) -> dict:
    """`mapping` (variable name -> expression) plus a fresh copy of every helper that `exprs`
    use: the same access made by another workgroup, thread or loop copy reads its own values —
    a gathered row id is the index entry at the position the mapping gives, a row taken from
    index registers its own thread's."""
    # numbered in name order, not the set's (address-dependent) iteration order
    helpers = sorted((v for v in fresh_in(*exprs) if v.name not in mapping),
                     key=lambda v: name_order(v.name))
    out = dict(mapping)
    out.update({v.name: fresh_var(v.name, v.lo, v.hi) for v in helpers})
    _rename_gathered([v for v in helpers if v.name in GATHERED], out)
    return out


def gather_constraints(exprs, distinct=()) -> list[Expr]:
    """What the gathered row ids in `exprs` must satisfy: -1 out of range, and equal where
    their positions in one index tensor are equal; plus `distinct_constraints` for the
    declared facts `distinct`."""
    rows = _gathered_rows(exprs)
    out = [Or(And(0 <= position, position < length), row.eq(-1))
           for row, (_, length, position) in rows]
    for (row, (_, _, position)), (other, (_, _, other_position)) in _same_index_pairs(rows):
        out.append(Or(position.ne(other_position), row.eq(other)))
    return out + (distinct_constraints(exprs, distinct) if distinct else [])


def distinct_constraints(exprs, distinct) -> list[Expr]:
    """For declared facts `distinct` = ((index tensor name, lo, hi), ...) — the entries of the
    tensor inside [lo, hi) are pairwise distinct — two row ids of `exprs` read at different
    positions of such a tensor differ wherever they lie in [lo, hi)."""
    out = []
    for (row, (tensor, _, position)), (other, (_, _, other_position)) in \
            _same_index_pairs(_gathered_rows(exprs)):
        for name, lo, hi in distinct:
            if name == tensor:
                out.append(Or(position.eq(other_position), row.ne(other), row < lo, row >= hi))
    return out


def _gathered_rows(exprs) -> list:
    rows = sorted((v for v in fresh_in(*exprs) if v.name in GATHERED),
                  key=lambda v: name_order(v.name))
    return [(row, GATHERED[row.name]) for row in rows]


def _same_index_pairs(rows):
    """Pairs of gathered rows read from one index tensor."""
    return [(a, b) for n, a in enumerate(rows) for b in rows[:n] if a[1][0] == b[1][0]]


def connected_defs(exprs, defs) -> tuple[Expr, ...]:
    """The defs that constrain, directly or through other defs, a helper variable of `exprs`.

    Every def is total (its helpers exist for every value of the rest), so dropping the
    unconnected ones changes no verdict; it only keeps queries small."""
    need = fresh_in(*exprs)
    pending = [(d, fresh_in(d)) for d in defs if d is not TRUE]
    kept: set = set()
    grew = True
    while grew:
        grew = False
        for index, (_, helpers) in enumerate(pending):
            if index not in kept and (not helpers or helpers & need):
                kept.add(index)
                need |= helpers
                grew = True
    return tuple(d for index, (d, _) in enumerate(pending) if index in kept)


def tile_tags(thread, tags: dict[str, Tag], defs=()) -> TileTags:
    """Build a map; its helper variables are found by name. Formulas are simplified once per
    query by the SMT layer, not here: simplifying every intermediate map costs more."""
    kept = tuple(tags.items())
    defs = connected_defs([e for _, t in kept for e in (t.value, t.top)], defs)
    fresh = fresh_in(*(t.value for _, t in kept), *(t.top for _, t in kept), *defs)
    return TileTags(tuple(thread), kept, defs, frozenset(fresh))


def join_tiles(cond, then: TileTags, orelse: TileTags, thread) -> TileTags:
    """`then` where `cond` holds, else `orelse`, tag by tag, at the symbolic thread `thread`."""
    if then == orelse and then.thread == tuple(thread):
        return then
    a, b = then.at(*thread), orelse.at(*thread)
    names = list(dict.fromkeys(list(a.tags) + list(b.tags)))
    tags = {n: join_tags(cond, a.tags.get(n, TOP_TAG), b.tags.get(n, TOP_TAG)) for n in names}
    return tile_tags(thread, tags, a.defs + b.defs)


def tabulated(e: Expr, thread) -> Expr:
    """`e` rewritten, when it depends on the thread (wave, lane, slot) alone, as a decision
    tree over the bits of the thread variables, built from its values on every thread: a
    constant when they all agree. Cross-lane steps nest the previous step's formula at another
    lane, so formulas grow twice per step; their tables stay as small as the data is regular.
    Other formulas come back unchanged."""
    if not node_vars(e) <= set(thread):
        return e
    grids = np.meshgrid(*(np.arange(v.lo, v.hi) for v in thread), indexing="ij")
    table = np.broadcast_to(np.asarray(evaluate(e, dict(zip((v.name for v in thread), grids)))),
                            grids[0].shape)
    return tabulated_over(table, tuple(thread))


def tabulated_over(table: np.ndarray, variables: tuple[Var, ...]) -> Expr:
    """The formula whose value at variables = index is table[index] (each variable counting
    from 0 along its axis): a decision tree over their bits, identical sub-tables shared."""
    thread = variables
    bits = [(v, b) for v in thread for b in range(max(0, int(v.hi - 1).bit_length()))]
    memo: dict = {}

    def tree(part: np.ndarray, level: int) -> Expr:
        key = (part.tobytes(), part.shape, level)
        if key not in memo:
            first = part.flat[0]
            if (part == first).all():
                memo[key] = Const(first.item())
            else:
                # each split halves the axis, so the next bit of the variable is the lowest
                # bit of the remaining index
                var, bit = bits[level]
                axis = thread.index(var)
                index = np.arange(part.shape[axis])
                ones = np.take(part, index[index & 1 == 1], axis=axis)
                zeros = np.take(part, index[index & 1 == 0], axis=axis)
                if not ones.size or not zeros.size:
                    memo[key] = tree(ones if ones.size else zeros, level + 1)
                else:
                    memo[key] = ite(((var >> bit) & 1).eq(1), tree(ones, level + 1),
                                    tree(zeros, level + 1))
        return memo[key]
    return tree(table, 0)


def widened(thread, names) -> TileTags:
    """Every tag ⊤: what a loop-carried tile becomes when no invariant is found."""
    return TileTags(tuple(thread), tuple((n, TOP_TAG) for n in names))


def equal_tags(a: Tag, b: Tag) -> Expr:
    """The two tags are both ⊤, or both known and equal."""
    return And(a.top.eq(b.top), Or(a.top, a.value.eq(b.value)))


def canonical_renaming(exprs) -> dict[str, Var]:
    """Helper names -> names numbered by first occurrence in `exprs` (a left-to-right walk).
    Two queries that differ only in which helpers they use become the same terms, so
    simplification, lowering and verdicts computed for one serve the other."""
    # canonical names end in `__<n>` like every helper's, so no kernel variable can be
    # spelled like one; every helper is renamed, so none keeps a clashing old name either
    mapping: dict[str, Var] = {}
    seen: set = set()
    for root in exprs:
        stack = [root]
        while stack:
            e = stack.pop()
            if e in seen or not _helpers(e):
                continue
            seen.add(e)
            if isinstance(e, Var):
                if e.name not in mapping:
                    hint = e.name.rpartition("__")[0]
                    mapping[e.name] = Var(f"{hint}_c__{len(mapping)}", e.lo, e.hi)
            else:
                stack.extend(reversed(e.args))
    return mapping

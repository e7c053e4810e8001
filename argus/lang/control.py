"""Structured control flow in the DSL: `T.range` loops and `T.when` branches, whose carried
values (tiles, or lists/tuples/dicts of tiles) become loop-carried IR values or branch results.

A branch may have an else body, opened right after the `when` block by its `otherwise()`:

    with T.when(kt + 1 < nk, acc=acc) as br:
        br.acc = T.mfma(MFMA, a, b, br.acc)
    with br.otherwise():
        br.acc = br.acc * scale

Both bodies start from the values carried into the branch; the IR `if` yields, per carried
value, what each body last assigned (the value it came in with where a body leaves it alone).
"""

from __future__ import annotations

import re

import attrs

from argus.ir import ops as O
from argus.ir.expr import Var, as_expr
from argus.ir.types import LANES, SIZE_RANGE, Value
from argus.lang.errors import DSLError, user_loc
from argus.lang.trace import Tile, current_builder, tidy


def _leaves(tree, path: str = "") -> list[tuple[str, Tile]]:
    """(name suffix, tile) for every tile in a tile or a nested list/tuple/dict of tiles."""
    if isinstance(tree, Tile):
        return [(path, tree)]
    if isinstance(tree, dict):
        items = tree.items()
    elif isinstance(tree, list | tuple):
        items = enumerate(tree)
    else:
        raise DSLError(f"carried values must be tiles or lists, tuples or dicts of tiles, not "
                       f"{type(tree).__name__}", user_loc())
    leaves = []
    for key, sub in items:
        label = re.sub(r"\W+", "_", str(key)).strip("_")
        leaves.extend(_leaves(sub, f"{path}_{label}" if path else label))
    return leaves


def _rebuild(tree, tiles):
    """`tree` with its tiles replaced, in order, by those from the iterator `tiles`."""
    if isinstance(tree, Tile):
        return next(tiles)
    if isinstance(tree, dict):
        return {key: _rebuild(sub, tiles) for key, sub in tree.items()}
    rebuilt = [_rebuild(sub, tiles) for sub in tree]
    return rebuilt if isinstance(tree, list) else tuple(rebuilt)


class _Carried:
    """Loop-carried (or branch-merged) values by name, each a tile or a list/tuple/dict of
    tiles; read and assign them as attributes."""

    def __init__(self, values: dict):
        for tree in values.values():
            _leaves(tree)
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str):
        values = object.__getattribute__(self, "_values")
        if name not in values:
            raise AttributeError(f"{name!r} is not carried; carried are {sorted(values)}")
        return values[name]

    def __setattr__(self, name: str, tree):
        values = object.__getattribute__(self, "_values")
        if name not in values:
            raise DSLError(f"{name!r} is not a carried value (carried are {sorted(values)}); "
                           "declare it when opening the loop or branch", user_loc())
        old, new = _leaves(values[name]), _leaves(tree)
        if [path for path, _ in old] != [path for path, _ in new]:
            raise DSLError(f"carried {name!r} changes shape from {[p for p, _ in old]} to "
                           f"{[p for p, _ in new]}", user_loc())
        for (path, before), (_, after) in zip(old, new):
            if before.type != after.type:
                label = f"{name}[{path}]" if path else name
                raise DSLError(f"carried {label!r} changes type from {before.type} to "
                               f"{after.type}; a loop-carried value keeps its layout and dtype",
                               user_loc())
        values[name] = tree

    def _flat(self) -> list[tuple[str, Tile]]:
        values = object.__getattribute__(self, "_values")
        return [(f"{name}_{path}" if path else name, tile)
                for name, tree in values.items() for path, tile in _leaves(tree)]

    def _replace(self, tiles: list[Tile]):
        values = object.__getattribute__(self, "_values")
        stream = iter(tiles)
        for name in list(values):
            values[name] = _rebuild(values[name], stream)


class Range(_Carried):
    """`for k in T.range(start, stop, step, stages=, unroll=, hints=, name=, **carried)`: a loop
    with a symbolic induction variable (named `name` in the IR); carried values are attributes
    of the range object."""

    def __init__(self, start, stop=None, step: int = 1, *, stages: int = 1, unroll: int = 1,
                 hints=(), name: str | None = None, **carried):
        super().__init__(carried)
        if stop is None:
            start, stop = 0, start
        loc = user_loc()
        object.__setattr__(self, "_spec", (as_expr(start), as_expr(stop), step, stages, unroll,
                                           tuple(hints), loc, name))

    def __iter__(self):
        builder = current_builder()
        start, stop, step, stages, unroll, hints, loc, name = object.__getattribute__(self,
                                                                                     "_spec")
        if object.__getattribute__(self, "__dict__").get("_traced"):
            raise DSLError("this T.range was already iterated; open a new T.range per loop",
                           user_loc())
        object.__setattr__(self, "_traced", True)
        iv = Var(name or builder.fresh_var("k"), 0, SIZE_RANGE[1])
        flat = self._flat()
        inits = [tile.value for _, tile in flat]
        args = [Value(builder.fresh(label), v.type) for (label, _), v in zip(flat, inits)]
        self._replace([Tile(a) for a in args])
        builder.blocks.append([])
        yield iv
        yielded = [tile.value for _, tile in self._flat()]
        builder.emit(O.Yield(values=tuple(yielded), loc=loc))
        body = O.Block(tuple(args), tuple(builder.blocks.pop()))
        results = [Value(builder.fresh(label), v.type) for (label, _), v in zip(flat, inits)]
        builder.emit(O.For(iv=iv, start=start, stop=stop, step=step, inits=tuple(inits),
                           body=body, results=tuple(results), loc=loc, stages=stages,
                           unroll=unroll, hints=hints))
        self._replace([Tile(r) for r in results])


class when(_Carried):
    """`with T.when(cond, **carried) as br:` — a workgroup-uniform branch. The body may
    reassign carried values (`br.s = ...`); afterwards `br.s` is the branch's result.

    An else body follows directly as `with br.otherwise():`, starting again from the values
    carried in. A value a body does not reassign keeps the value it had before the branch
    on that side. Only carried values may be reassigned, in either body.
    """

    def __init__(self, cond, **carried):
        super().__init__(carried)
        object.__setattr__(self, "_cond", (as_expr(cond), user_loc()))
        object.__setattr__(self, "_state", "new")

    def __enter__(self):
        if self._state != "new":
            raise DSLError("this T.when block was already entered; open a new T.when per "
                           "branch", user_loc())
        object.__setattr__(self, "_state", "then")
        current_builder().blocks.append([])
        object.__setattr__(self, "_before", self._flat())
        return self

    def __exit__(self, kind, error, trace):
        builder = current_builder()
        if kind is not None:
            builder.blocks.pop()
            return False
        cond, loc = self._cond
        before = self._before
        then = self._closed_block(builder, loc)
        orelse = O.Block((), (O.Yield(values=tuple(tile.value for _, tile in before),
                                      loc=loc),))
        results = tuple(Value(builder.fresh(label), tile.type) for label, tile in before)
        op = builder.emit(O.If(cond=cond, then=then, orelse=orelse, results=results, loc=loc))
        object.__setattr__(self, "_if", (op, builder.blocks[-1]))
        object.__setattr__(self, "_state", "done")
        self._replace([Tile(r) for r in results])
        return False

    def _closed_block(self, builder, loc) -> O.Block:
        """Yield the carried values' current tiles and close the innermost block."""
        builder.emit(O.Yield(values=tuple(tile.value for _, tile in self._flat()), loc=loc))
        return O.Block((), tuple(builder.blocks.pop()))

    def otherwise(self) -> _Otherwise:
        """`with br.otherwise():` — the else body of this branch (directly after it)."""
        return _Otherwise(self, user_loc())


class _Otherwise:
    """The else body of a `when`: reopens the branch's `if` and replaces its else block."""

    def __init__(self, branch: when, loc):
        self.branch, self.loc = branch, loc

    def __enter__(self) -> when:
        branch, builder = self.branch, current_builder()
        state = branch._state
        if state in ("new", "then"):
            raise DSLError("otherwise() opens the else body after its `with T.when(...)` "
                           "block has closed; place it directly below that block", self.loc)
        if state == "else":
            raise DSLError("this T.when already has an else body; a branch has at most one "
                           "otherwise()", self.loc)
        op, block = branch._if
        if block is not builder.blocks[-1] or not block or block[-1] is not op:
            raise DSLError("otherwise() must follow its `with T.when(...)` block directly, in "
                           "the same block and with no operation in between", self.loc)
        object.__setattr__(branch, "_state", "else")
        block.pop()
        builder.blocks.append([])
        branch._replace([tile for _, tile in branch._before])
        return branch

    def __exit__(self, kind, error, trace):
        branch, builder = self.branch, current_builder()
        op, _ = branch._if
        if kind is not None:
            builder.blocks.pop()
            return False
        orelse = branch._closed_block(builder, self.loc)
        builder.emit(attrs.evolve(op, orelse=orelse))
        branch._replace([Tile(r) for r in op.results])
        return False


class lanes:
    """`with T.lanes(lambda wave, lane: wave.eq(0)):` — only the threads where the condition
    holds take part in the global and LDS loads and stores traced inside (the exec mask); the
    others neither read nor write, and what they "load" is unknown. Register ops still compute
    in every lane. Blocks nest (their conditions combine with and); a barrier may not be
    inside, since every wave must reach it."""

    def __init__(self, condition):
        loc = user_loc()
        builder = current_builder()
        if not callable(condition):
            raise DSLError(f"T.lanes takes a condition on the thread ids, e.g. lambda wave, "
                           f"lane: wave.eq(0), not {condition!r}", loc)
        self.cond = _thread_condition(
            "T.lanes", condition(Var("wave", 0, builder.waves), Var("lane", 0, LANES)),
            "lambda wave, lane: wave.eq(0)", loc)
        self.loc = loc

    def __enter__(self):
        current_builder().active.append(self.cond)
        return self

    def __exit__(self, kind, error, trace):
        current_builder().active.pop()
        return False


def group_barrier(waves) -> None:
    """`T.group_barrier(lambda wave: wave < 2)`: a barrier of the waves where the condition
    holds; it orders their LDS accesses to each other and nobody else's. Every wave in the group
    must reach it; it may not be inside a `T.lanes` block. gfx942 has no such instruction, so
    kernels using it are verified and interpreted but not compiled."""
    loc = user_loc()
    builder = current_builder()
    if not callable(waves):
        raise DSLError(f"T.group_barrier takes a condition on the wave, e.g. lambda wave: "
                       f"wave < 2, not {waves!r}", loc)
    if builder.active:
        raise DSLError("T.group_barrier inside a T.lanes block: a barrier's waves arrive whole; "
                       "close the T.lanes block first", loc)
    cond = _thread_condition("T.group_barrier", waves(Var("wave", 0, builder.waves)),
                             "lambda wave: wave.eq(0)", loc)
    builder.emit(O.GroupBarrier(active=cond, loc=loc))


def _thread_condition(name: str, cond, example: str, loc):
    """The condition a thread-selecting lambda returned, as a tidy boolean expression."""
    if isinstance(cond, bool):
        raise DSLError(f"{name} got the Python bool {cond}; write equations with .eq(), "
                       f"e.g. {example}", loc)
    cond = tidy(as_expr(cond))
    if not cond.is_bool:
        raise DSLError(f"{name} needs a condition, got the integer '{cond}'", loc)
    return cond

"""Tracing a Python kernel function into tile IR.

`@kernel` runs the function once per choice of compile-time parameters with symbolic sizes; the
DSL calls below append ops to the innermost open block. Every op records the author's source line
and is verified as it is built, so misuse fails at the line that caused it.
"""

from __future__ import annotations

import inspect
import operator
import os
import re
import sys
from collections.abc import Callable

import attrs
import numpy as np

from argus.ir import ops as O
from argus.ir.expr import And, Const, Expr, Not, Or, Term, Var, as_expr, free_vars, ite, max_, min_
from argus.ir.types import (
    DTYPE_BYTES,
    LDS_BUDGET,
    SIZE_RANGE,
    VGPR_BUDGET,
    GlobalType,
    IRError,
    LdsType,
    RegType,
    SourceLoc,
    ThreadLayout,
    Value,
    coord_vars,
)
from argus.lang.errors import DSLError, short_path, user_loc
from argus.lang.layouts import TileSpec, cosize, lds_layout

_BUILDER: list[_Builder] = []


def _builder() -> _Builder:
    if not _BUILDER:
        raise DSLError("DSL operations only work inside a function traced by @kernel",
                       user_loc())
    return _BUILDER[-1]


class _Builder:
    def __init__(self, name: str, waves: int, loc: SourceLoc):
        self.name, self.waves, self.loc = name, waves, loc
        self.blocks: list[list[O.Op]] = [[]]
        self.counter = 0
        self.sizes: dict[str, Var] = {}
        self.grid: tuple[Expr, ...] | None = None
        self.assumes: list[Expr] = []
        self.hints: list[str] = []
        self.lds_bytes = 0
        self.pids: dict[int, Var] = {}

    def fresh(self, hint: str = "v") -> str:
        """A new SSA value name: v12, or acc.12 for a named value."""
        self.counter += 1
        return f"{hint}{self.counter}" if hint == "v" else f"{hint}.{self.counter}"

    def fresh_var(self, hint: str) -> str:
        """A new scalar variable name (an identifier: k12)."""
        self.counter += 1
        return f"{hint}{self.counter}"

    def emit(self, op: O.Op) -> O.Op:
        try:
            op.verify()
        except IRError as error:
            message = str(error)
            prefix = f"{op.loc}: "
            raise DSLError(message.removeprefix(prefix), op.loc) from None
        self.blocks[-1].append(op)
        return op

    def reg_type(self, dtype: str, spec: TileSpec, loc: SourceLoc) -> RegType:
        check_spec(spec, loc)
        if dtype not in DTYPE_BYTES:
            raise DSLError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPE_BYTES)}", loc)
        if spec.layout.waves != self.waves:
            raise DSLError(f"the layout spans {spec.layout.waves} waves but kernel {self.name} "
                           f"runs {self.waves} per workgroup", loc)
        t = RegType(dtype, spec.shape, spec.layout)
        if t.vgprs > VGPR_BUDGET:
            raise DSLError(f"a {dtype} tile of shape {list(spec.shape)} needs {t.vgprs} VGPRs per "
                           f"lane; gfx942 has {VGPR_BUDGET}: use a smaller tile or more waves", loc)
        return t


def check_spec(spec: TileSpec, loc: SourceLoc):
    """The layout must put every thread slot inside the tile and hold every element."""
    layout = spec.layout
    if layout.rank != len(spec.shape):
        raise DSLError(f"the layout gives {layout.rank} coordinates for a rank-"
                       f"{len(spec.shape)} tile of shape {list(spec.shape)}", loc)
    table = layout.table()
    for axis, (coord, extent) in enumerate(zip(table, spec.shape)):
        if coord.min() < 0 or coord.max() >= extent:
            bad = np.argwhere((coord < 0) | (coord >= extent))[0]
            raise DSLError(f"the layout puts wave {bad[0]} lane {bad[1]} slot {bad[2]} at "
                           f"coordinate {coord[tuple(bad)]} on axis {axis}, outside the tile "
                           f"shape {list(spec.shape)}", loc)
    held = np.zeros(spec.shape, bool)
    held[tuple(table)] = True
    if not held.all():
        missing = tuple(int(i) for i in np.argwhere(~held)[0])
        raise DSLError(f"the layout does not cover the tile: element {missing} of shape "
                       f"{list(spec.shape)} is held by no thread", loc)


# ---------------------------------------------------------------------------------------------
# values


class Tile:
    """A register tile in the DSL; arithmetic builds elementwise ops."""

    def __init__(self, value: Value):
        self.value = value

    @property
    def type(self) -> RegType:
        return self.value.type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def spec(self) -> TileSpec:
        return TileSpec(self.type.shape, self.type.layout)

    def _binary(self, fn: str, other, swap: bool = False) -> Tile:
        loc = user_loc()
        if not isinstance(other, Tile):
            if not isinstance(other, (int, float)):
                raise DSLError(f"cannot combine a tile with {type(other).__name__}", loc)
            other = full(self.spec, float(other), self.dtype, _loc=loc)
        elif other.shape != self.shape:
            raise DSLError(f"shape mismatch in {fn}: {list(self.shape)} and "
                           f"{list(other.shape)}; broadcast the smaller tile first", loc)
        x, y = (other, self) if swap else (self, other)
        return _result(O.Binary, self.type, loc, fn=fn, x=x.value, y=y.value)

    def __add__(self, other): return self._binary("add", other)
    def __radd__(self, other): return self._binary("add", other, swap=True)
    def __sub__(self, other): return self._binary("sub", other)
    def __rsub__(self, other): return self._binary("sub", other, swap=True)
    def __mul__(self, other): return self._binary("mul", other)
    def __rmul__(self, other): return self._binary("mul", other, swap=True)
    def __truediv__(self, other): return self._binary("div", other)
    def __rtruediv__(self, other): return self._binary("div", other, swap=True)

    def __neg__(self):
        return _result(O.Unary, self.type, user_loc(), fn="neg", x=self.value)

    def to(self, dtype: str) -> Tile:
        """Convert the element type (round to nearest even)."""
        loc = user_loc()
        t = _builder().reg_type(dtype, self.spec, loc)
        return _result(O.Cast, t, loc, x=self.value)

    def __repr__(self) -> str:
        return f"Tile({self.value}: {self.type})"


def _result(kind, t, loc, **fields) -> Tile:
    builder = _builder()
    value = Value(builder.fresh(), t)
    builder.emit(kind(result=value, loc=loc, **fields))
    return Tile(value)


_REBUILD = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "floordiv": operator.floordiv, "mod": operator.mod, "neg": operator.neg,
    "shl": operator.lshift, "shr": operator.rshift, "and": operator.and_, "xor": operator.xor,
    "or": operator.or_, "min": min_, "max": max_, "ite": ite, "lt": operator.lt,
    "le": operator.le, "eq": lambda a, b: a.eq(b), "ne": lambda a, b: a.ne(b),
    "land": And, "lor": Or, "lnot": Not,
}


def tidy(e: Expr) -> Expr:
    """Drop the `+ 0` and `* 1` that Python loops leave in index formulas, keeping the author's
    spelling otherwise (unlike `simplify`, which rewrites `// 16` as `>> 4`)."""
    if not isinstance(e, Term):
        return e
    args = [tidy(a) for a in e.args]
    zero, one = Const(0), Const(1)
    if e.op in ("add", "sub") and args[1] is zero:
        return args[0]
    if e.op == "add" and args[0] is zero:
        return args[1]
    if e.op == "mul" and (args[0] is zero or args[1] is zero):
        return zero
    if e.op == "mul" and one in (args[0], args[1]):
        return args[0] if args[1] is one else args[1]
    return _REBUILD[e.op](*args)


def _exprs(values, what: str, loc: SourceLoc) -> tuple[Expr, ...]:
    try:
        return tuple(tidy(as_expr(v)) for v in values)
    except TypeError:
        raise DSLError(f"{what} must be integers or size expressions, got {values!r}",
                       loc) from None


class Global:
    """A global-memory tensor argument."""

    def __init__(self, value: Value):
        self.value = value

    @property
    def shape(self) -> tuple[Expr, ...]:
        return self.value.type.shape

    @property
    def dtype(self) -> str:
        return self.value.type.dtype

    def _axes(self, axes, spec: TileSpec, loc) -> tuple[int, ...]:
        rank = len(self.shape)
        if axes is None:
            if len(spec.shape) > rank:
                raise DSLError(f"a rank-{len(spec.shape)} tile does not fit {self.value.name} "
                               f"of rank {rank}", loc)
            return tuple(range(rank - len(spec.shape), rank))
        return tuple(axes)

    def load(self, origin, spec: TileSpec, *, axes=None, gather: Gather | None = None,
             guard: bool = False) -> Tile:
        """Tile element c is tensor[origin + c] (tile axis t placed on tensor axis axes[t]).

        `gather` takes one coordinate from an index tensor (rows gathered by id); `guard`
        makes out-of-range elements read 0, like a bounds-checked buffer load.
        """
        loc = user_loc()
        t = _builder().reg_type(self.dtype, spec, loc)
        return _result(O.GlobalLoad, t, loc, tensor=self.value,
                       origin=_exprs(origin, "origin", loc), axes=self._axes(axes, spec, loc),
                       gather=_gather(gather, loc), guard=guard)

    def store(self, origin, tile: Tile, *, axes=None, gather: Gather | None = None,
              guard: bool = False):
        """tensor[origin + c] = tile[c]; `gather`/`guard` as for load (guarded elements out of
        range are not written)."""
        self._store(O.GlobalStore, origin, tile, axes, gather, guard)

    def atomic_add(self, origin, tile: Tile, *, axes=None, gather: Gather | None = None,
                   guard: bool = False):
        self._store(O.GlobalAtomicAdd, origin, tile, axes, gather, guard)

    def _store(self, kind, origin, tile: Tile, axes, gather, guard):
        loc = user_loc()
        _builder().emit(kind(tensor=self.value, origin=_exprs(origin, "origin", loc),
                             axes=self._axes(axes, tile.spec, loc), value=tile.value, loc=loc,
                             gather=_gather(gather, loc), guard=guard))


@attrs.frozen
class Gather:
    """Rows by id: along tensor `axis`, use `index[start + c[tile_axis]]` (index: an i32 rank-1
    tensor argument)."""

    index: Global
    start: object
    tile_axis: int = 0
    axis: int = 0


def _gather(gather: Gather | None, loc: SourceLoc) -> O.Gather | None:
    if gather is None:
        return None
    if not isinstance(gather.index, Global):
        raise DSLError("Gather needs an index tensor argument", loc)
    return O.Gather(gather.index.value, _exprs((gather.start,), "gather start", loc)[0],
                    gather.tile_axis, gather.axis)


def load_scalar(tensor: Global, index, lo: int, hi: int) -> Var:
    """One element of an i32 tensor as a workgroup-uniform integer in [lo, hi)."""
    loc = user_loc()
    builder = _builder()
    var = Var(builder.fresh_var("s"), lo, hi)
    builder.emit(O.ScalarLoad(var=var, tensor=tensor.value, index=_exprs(index, "index", loc),
                              loc=loc))
    return var


class Lds:
    """A view of an LDS allocation: the allocation plus an address map."""

    def __init__(self, value: Value, addr):
        self.value, self.addr = value, addr

    @property
    def shape(self) -> tuple[int, ...]:
        return self.addr.shape

    def view(self, addr) -> Lds:
        """The same memory through another address map (e.g. without the swizzle)."""
        if addr.shape != self.addr.shape:
            raise DSLError(f"a view of shape {list(addr.shape)} does not match "
                           f"{list(self.addr.shape)}", user_loc())
        return Lds(self.value, addr)

    def store(self, origin, tile: Tile):
        loc = user_loc()
        _builder().emit(O.LdsStore(buffer=self.value, addr=self.addr,
                                   origin=_exprs(origin, "origin", loc), value=tile.value,
                                   loc=loc))

    def load(self, origin, spec: TileSpec) -> Tile:
        loc = user_loc()
        t = _builder().reg_type(self.value.type.dtype, spec, loc)
        return _result(O.LdsLoad, t, loc, buffer=self.value, addr=self.addr,
                       origin=_exprs(origin, "origin", loc))


# ---------------------------------------------------------------------------------------------
# the DSL surface


def grid(*extents) -> None:
    """The number of workgroups along each axis (size expressions)."""
    loc = user_loc()
    builder = _builder()
    if builder.grid is not None:
        raise DSLError("grid(...) is given twice", loc)
    if not 1 <= len(extents) <= 3:
        raise DSLError(f"a grid has 1 to 3 dimensions, got {len(extents)}", loc)
    builder.grid = _exprs(extents, "grid extents", loc)


def program_id(axis: int) -> Var:
    """This workgroup's index along grid `axis`, as a symbolic integer."""
    loc = user_loc()
    builder = _builder()
    if axis not in builder.pids:
        var = Var(f"wg{axis}", 0, SIZE_RANGE[1])
        op = O.ProgramId(var=var, axis=axis, loc=loc)
        op.verify()
        # bound at kernel level even when first asked for inside a loop or branch
        builder.blocks[0].append(op)
        builder.pids[axis] = var
    return builder.pids[axis]


def assume(condition) -> None:
    """A precondition on sizes (e.g. `M % 64 == 0` written `(M % 64).eq(0)`)."""
    loc = user_loc()
    _no_python_bool(condition, "assume", loc)
    condition = as_expr(condition)
    if not condition.is_bool:
        raise DSLError(f"assume needs a condition, got the integer '{condition}'", loc)
    _builder().assumes.append(condition)


def _no_python_bool(condition, where: str, loc: SourceLoc):
    # `==` on expressions is structural identity, so `a == b` quietly yields a Python bool
    if isinstance(condition, bool):
        raise DSLError(f"{where} got the Python bool {condition}; write equations with .eq(), "
                       "e.g. `A.k.eq(B.k)` or `(M % 64).eq(0)`", loc)


def hint(text: str) -> None:
    """A scheduling hint for the compiler, kept on the kernel."""
    _builder().hints.append(text)


def tag(tensor, fn: Callable):
    """Tag every element of a global tensor (in place) or register tile (returns a new tile):
    `fn(*coords) -> {name: expr}`."""
    loc = user_loc()
    builder = _builder()
    if isinstance(tensor, Global):
        coords = O.global_coord_vars(len(tensor.shape))
        builder.emit(O.TagDef(tensor=tensor.value, tags=_tag_items(fn, coords, loc), loc=loc))
        return tensor
    if isinstance(tensor, Tile):
        coords = coord_vars(tensor.shape)
        return _result(O.TagTile, tensor.type, loc, x=tensor.value,
                       tags=_tag_items(fn, coords, loc))
    raise DSLError(f"tag() takes a tensor argument or a register tile, not "
                   f"{type(tensor).__name__}", loc)


def _tag_items(fn, coords, loc):
    tags = fn(*coords)
    if not isinstance(tags, dict) or not tags:
        raise DSLError("the tag function must return a non-empty dict {name: expression}", loc)
    return tuple((name, tidy(as_expr(e))) for name, e in tags.items())


class _Role:
    """Stands for one operand in a tag-assertion predicate: `A.k` is its tag `k`."""

    def __init__(self, role: str):
        self._role = role

    def __getattr__(self, tag: str) -> Var:
        if tag.startswith("_") or "_" in tag:
            raise AttributeError(tag)
        return O.role_var(self._role, tag)


def tag_assert(predicate: Callable, message: str, *, on: Tile | None = None) -> None:
    """Attach a tag assertion to the op that produced `on`, or else to the most recent op that
    takes assertions (MFMA, store, elementwise, mask). `predicate(*roles)` gets one argument
    per role of that op (MFMA: A, B, C; store: V, D; binary: X, Y; mask: X)."""
    loc = user_loc()
    ops = _builder().blocks[-1]
    index = _assertion_target(ops, on, loc)
    op = ops[index]
    arity = len(inspect.signature(predicate).parameters)
    if arity != len(op.roles):
        raise DSLError(f"the predicate takes {arity} argument(s) but {op.mnemonic} has the roles "
                       f"{', '.join(op.roles)}", loc)
    condition = predicate(*(_Role(r) for r in op.roles))
    _no_python_bool(condition, "tag_assert", loc)
    condition = tidy(as_expr(condition))
    if not condition.is_bool:
        raise DSLError(f"the predicate must be a condition, got the integer '{condition}'", loc)
    _check_tag_names(condition, op, loc)
    ops[index] = attrs.evolve(op, asserts=op.asserts + (O.TagAssertion(condition, message,
                                                                         loc),))


def _check_tag_names(condition: Expr, op: O.Op, loc: SourceLoc):
    """Name a tag the operand cannot carry now rather than as a run-time violation."""
    program = [inner for block in _builder().blocks
               for inner in O.walk(O.Block((), tuple(block)))]
    names, tensors = O.tag_names(program)
    operands = O.role_operands(op)
    for var in sorted(free_vars(condition), key=lambda v: v.name):
        if not O.is_role_var(var):
            continue
        role, tag = O.split_role_var(var.name)
        value = operands[role]
        known = (tensors.get(value.name, frozenset()) if isinstance(value.type, GlobalType)
                 else names.get(value.name))
        if known is not None and tag not in known:
            carried = ", ".join(sorted(known)) or "no tags"
            raise DSLError(f"{role}.{tag}: {role} ({value}) carries {carried} here; tag the "
                           "tensor with that name or fix the predicate", loc)


def _assertion_target(ops, on, loc) -> int:
    for index, op in reversed(list(enumerate(ops))):
        if not hasattr(op, "asserts"):
            continue
        if on is None or op.results == (on.value,):
            return index
    what = f"the op producing {on.value}" if on is not None else "an op that takes assertions"
    raise DSLError(f"tag_assert finds no {what} earlier in this block", loc)


def lds(shape, dtype: str, *, swizzle=None, addr=None) -> Lds:
    """Allocate workgroup-shared memory viewed through `addr` (default: row-major, optionally
    XOR-swizzled with (bits, base, shift))."""
    loc = user_loc()
    builder = _builder()
    addr = addr if addr is not None else lds_layout(tuple(shape), swizzle)
    size = cosize(addr)
    builder.lds_bytes += size * DTYPE_BYTES[dtype]
    if builder.lds_bytes > LDS_BUDGET:
        raise DSLError(f"LDS use reaches {builder.lds_bytes} bytes; a gfx942 workgroup has "
                       f"{LDS_BUDGET} (64 KiB): shrink the tiles or the number of stages", loc)
    value = Value(builder.fresh("lds"), LdsType(dtype, size))
    builder.emit(O.LdsAlloc(result=value, loc=loc))
    return Lds(value, addr)


def full(spec: TileSpec, value: float, dtype: str = "f32", *, _loc=None) -> Tile:
    loc = _loc or user_loc()
    return _result(O.Full, _builder().reg_type(dtype, spec, loc), loc, value=float(value))


def zeros(spec: TileSpec, dtype: str = "f32") -> Tile:
    loc = user_loc()
    return _result(O.Full, _builder().reg_type(dtype, spec, loc), loc, value=0.0)


def mfma(instr: str, a: Tile, b: Tile, c: Tile) -> Tile:
    """One MFMA per wave; the result has C's layout."""
    loc = user_loc()
    return _result(O.Mfma, c.type, loc, instr=instr, a=a.value, b=b.value, c=c.value)


def _unary(fn: str, x: Tile) -> Tile:
    return _result(O.Unary, x.type, user_loc(), fn=fn, x=x.value)


def exp2(x: Tile) -> Tile:
    return _unary("exp2", x)


def log2(x: Tile) -> Tile:
    return _unary("log2", x)


def rcp(x: Tile) -> Tile:
    return _unary("rcp", x)


def maximum(x: Tile, y: Tile) -> Tile:
    return x._binary("max", y)


def minimum(x: Tile, y: Tile) -> Tile:
    return x._binary("min", y)


def mask(x: Tile, keep: Callable, fill: float) -> Tile:
    """Elements whose coordinates satisfy `keep(*coords)` stay, the others become `fill`."""
    loc = user_loc()
    condition = tidy(as_expr(keep(*coord_vars(x.shape))))
    return _result(O.Mask, x.type, loc, x=x.value, keep=condition, fill=float(fill))


def reduce(x: Tile, fn: str, axis: int, spec: TileSpec, *, drop=()) -> Tile:
    """Cross-lane `fn` ("max" or "sum") along `axis` within each wave, into layout `spec`;
    the tags named in `drop` (those that vary along the axis) are removed."""
    loc = user_loc()
    t = _builder().reg_type(x.dtype, spec, loc)
    return _result(O.Reduce, t, loc, fn=fn, x=x.value, axis=axis, drop=tuple(drop))


def broadcast(x: Tile, axis: int, spec: TileSpec) -> Tile:
    """Spread a reduced tile back along `axis` into layout `spec` (within each wave)."""
    loc = user_loc()
    t = _builder().reg_type(x.dtype, spec, loc)
    return _result(O.Broadcast, t, loc, x=x.value, axis=axis)


def slots(x: Tile, start: int, spec: TileSpec) -> Tile:
    """Registers [start, start + spec.slots) of `x`, seen as a tile of layout `spec`."""
    loc = user_loc()
    t = _builder().reg_type(x.dtype, spec, loc)
    return _result(O.SlotSlice, t, loc, x=x.value, start=start)


def barrier() -> None:
    _builder().emit(O.Barrier(loc=user_loc()))


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
        builder = _builder()
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
    """`with T.when(cond, **carried) as br:` — a uniform branch; the body may reassign carried
    values (`br.s = ...`), which keep their old value when `cond` is false."""

    def __init__(self, cond, **carried):
        super().__init__(carried)
        object.__setattr__(self, "_cond", (as_expr(cond), user_loc()))

    def __enter__(self):
        _builder().blocks.append([])
        object.__setattr__(self, "_before", self._flat())
        return self

    def __exit__(self, kind, error, trace):
        builder = _builder()
        if kind is not None:
            builder.blocks.pop()
            return False
        cond, loc = object.__getattribute__(self, "_cond")
        before = object.__getattribute__(self, "_before")
        after = self._flat()
        builder.emit(O.Yield(values=tuple(tile.value for _, tile in after), loc=loc))
        then = O.Block((), tuple(builder.blocks.pop()))
        orelse = O.Block((), (O.Yield(values=tuple(tile.value for _, tile in before),
                                      loc=loc),))
        results = tuple(Value(builder.fresh(label), tile.type) for label, tile in before)
        builder.emit(O.If(cond=cond, then=then, orelse=orelse, results=results, loc=loc))
        self._replace([Tile(r) for r in results])
        return False


# ---------------------------------------------------------------------------------------------
# kernels


@attrs.frozen
class Tensor:
    """Annotation of a tensor argument: `Tensor("bf16", "M", "K")` — names are symbolic sizes."""

    dtype: str
    shape: tuple = ()

    def __init__(self, dtype: str, *shape):
        self.__attrs_init__(dtype, tuple(shape))


@attrs.frozen
class Scalar:
    """Annotation of an integer scalar argument with its range [lo, hi)."""

    lo: int = 0
    hi: int = SIZE_RANGE[1]


class KernelDef:
    """A traceable kernel: `.trace(**params)` gives its IR, `.ir` uses the default params.

    Example::

        @T.kernel(waves=1)
        def scale(X: T.Tensor("f32", "N", 64), Y: T.Tensor("f32", "N", 64), *, factor=2.0):
            T.grid(X.shape[0] // 16)
            row = T.program_id(0) * 16
            Y.store((row, 0), X.load((row, 0), T.copy_layout((16, 64), 1, 4)) * factor)

        print(scale.trace(factor=3.0))
    """

    def __init__(self, fn: Callable, waves: int, namespace: dict | None = None):
        self.fn, self.waves = fn, waves
        # names visible where the kernel was defined, for string annotations of nested kernels
        self.namespace = dict(namespace or {})
        self.name = fn.__name__
        self.__doc__ = fn.__doc__
        signature = inspect.signature(fn)
        self.params = {n: p.default for n, p in signature.parameters.items()
                       if p.kind is p.KEYWORD_ONLY}
        self._cache: dict = {}

    @property
    def ir(self) -> O.Kernel:
        return self.trace()

    def trace(self, **params) -> O.Kernel:
        unknown = set(params) - set(self.params)
        if unknown:
            raise DSLError(f"kernel {self.name} has no parameter(s) {sorted(unknown)}; it takes "
                           f"{sorted(self.params)}", _def_loc(self.fn))
        chosen = {**self.params, **params}
        key = tuple(sorted(chosen.items()))
        if key not in self._cache:
            self._cache[key] = self._trace(chosen)
        return self._cache[key]

    def _trace(self, params: dict) -> O.Kernel:
        loc = _def_loc(self.fn)
        builder = _Builder(self.name, self.waves, loc)
        try:
            annotations = inspect.get_annotations(self.fn, eval_str=True, locals=self.namespace)
        except NameError as error:
            raise DSLError(f"cannot evaluate an argument annotation of {self.name}: {error}",
                           loc) from None
        args, handles = [], []
        for name, p in inspect.signature(self.fn).parameters.items():
            if p.kind is p.KEYWORD_ONLY:
                continue
            note = annotations.get(name)
            if isinstance(note, Tensor):
                shape = tuple(builder.sizes.setdefault(d, Var(d, *SIZE_RANGE))
                              if isinstance(d, str) else d for d in note.shape)
                value = Value(name, GlobalType(note.dtype, shape))
                args.append(value)
                handles.append(Global(value))
            elif isinstance(note, Scalar):
                var = Var(name, note.lo, note.hi)
                args.append(var)
                handles.append(var)
            else:
                raise DSLError(f"argument {name!r} needs an annotation Tensor(dtype, *sizes) or "
                               f"Scalar(lo, hi)", loc)
        _BUILDER.append(builder)
        try:
            self.fn(*handles, **params)
        finally:
            _BUILDER.pop()
        if builder.grid is None:
            raise DSLError(f"kernel {self.name} never calls grid(...)", loc)
        if len(builder.blocks) != 1:
            raise DSLError(f"kernel {self.name} leaves a loop or branch open", loc)
        kernel = O.Kernel(self.name, tuple(args), tuple(builder.sizes.values()), builder.grid,
                          self.waves, tuple(builder.assumes), O.Block((), builder.blocks[0]), loc,
                          tuple(builder.hints))
        try:
            kernel.verify()
        except IRError as error:
            message = str(error)
            where = _loc_prefix(message) or loc
            raise DSLError(message.removeprefix(f"{where}: "), where) from None
        if int(os.environ.get("ARGUS_DEBUG", "0") or 0) >= 2:
            print(kernel, file=sys.stderr)
        return kernel


def _loc_prefix(message: str) -> SourceLoc | None:
    """The `file:line:col` an IRError message starts with, if any."""
    head = message.split(": ", 1)[0]
    parts = head.rsplit(":", 2)
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        return SourceLoc(parts[0], int(parts[1]), int(parts[2]))
    return None


def _def_loc(fn) -> SourceLoc:
    """The `def` line of a kernel function (after its decorators)."""
    code = fn.__code__
    line = code.co_firstlineno
    try:
        source, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return SourceLoc(short_path(code.co_filename), line, 1)
    for offset, text in enumerate(source):
        if text.lstrip().startswith(("def ", "async def ")):
            return SourceLoc(short_path(code.co_filename), start + offset,
                             len(text) - len(text.lstrip()) + 1)
    return SourceLoc(short_path(code.co_filename), line, 1)


def kernel(fn: Callable | None = None, *, waves: int = 4):
    """Decorator: `@kernel` or `@kernel(waves=4)` makes a traceable KernelDef."""
    namespace = sys._getframe(1).f_locals
    if fn is None:
        return lambda f: KernelDef(f, waves, sys._getframe(1).f_locals)
    return KernelDef(fn, waves, namespace)


def cdiv(a, b):
    """Ceiling division of sizes (symbolic or int), e.g. the number of tiles covering M."""
    return (a + b - 1) // b if isinstance(a, Expr) or isinstance(b, Expr) else -(-a // b)


__all__ = [
    "kernel", "KernelDef", "Tensor", "Scalar", "Tile", "Global", "Lds", "grid", "program_id",
    "assume", "hint", "tag", "tag_assert", "lds", "full", "zeros", "mfma", "exp2", "log2", "rcp",
    "maximum", "minimum", "mask", "reduce", "broadcast", "slots", "barrier", "Range", "when",
    "ThreadLayout", "Gather", "load_scalar", "cdiv",
]

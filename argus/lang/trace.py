"""The DSL's values (register tiles, global tensors, LDS views) and operations.

Each call appends an op to the innermost open block of the kernel being traced (see
`argus.lang.kernel`). Every op records the author's source line and is verified as it is built,
so misuse fails at the line that caused it.
"""

from __future__ import annotations

import inspect
import math
import operator
from collections.abc import Callable

import attrs
import numpy as np

from argus.ir import ops as O
from argus.ir.expr import (
    And,
    Const,
    Expr,
    Not,
    Or,
    Term,
    Var,
    as_expr,
    bounds,
    free_vars,
    ite,
    max_,
    min_,
)
from argus.ir.transfer import cover_names
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
from argus.lang.errors import DSLError, user_loc
from argus.lang.layouts import TileSpec, cosize, lds_layout

BUILDERS: list[Builder] = []


def current_builder() -> Builder:
    if not BUILDERS:
        raise DSLError("DSL operations only work inside a function traced by @kernel",
                       user_loc())
    return BUILDERS[-1]


class Builder:
    """The kernel under construction: open blocks, sizes, grid, assumptions, LDS use."""

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
        #: conditions on `wave` and `lane` of the open `T.lanes` blocks
        self.active: list[Expr] = []
        #: LDS scratch of the cross-wave reductions and scans: [block, elements, Lds, busy]
        self.scratch: list[list] = []

    def active_condition(self) -> Expr:
        """Which threads take part in a memory op traced here (`T.lanes`)."""
        return And(*self.active) if self.active else Const(True)

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
            raise DSLError(error.message, error.loc or op.loc, error.fix) from None
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


def _check_tile(tile, verb: str, loc: SourceLoc):
    if not isinstance(tile, Tile):
        raise DSLError(f"the value {verb} must be a register tile (a load, T.full, an MFMA, "
                       f"...), not {tile!r}", loc)


def check_spec(spec: TileSpec, loc: SourceLoc):
    """The layout must put every thread slot inside the tile and hold every element."""
    if not isinstance(spec, TileSpec):
        raise DSLError(f"expected a tile spec (shape and thread layout), got {spec!r}", loc,
                       "pass one made by T.copy_layout(...), T.mfma(...).a/.b/.c, or "
                       "TileSpec(shape, layout)")
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

    #: `N * x`, `N - x`, `N < x` with a size N build tile ops (ir.expr defers to the tile)
    takes_expr_operands = True

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

    def __repr__(self) -> str:
        return f"Tile({self.value}: {self.dtype}{list(self.shape)}, a register tile)"

    def __bool__(self):
        raise DSLError("a register tile has no truth value at trace time: its elements are "
                       "known only when the kernel runs", user_loc(),
                       "branch on sizes or program ids (T.when), or mask the tile (T.mask)")

    def _binary(self, fn: str, other, swap: bool = False) -> Tile:
        loc = user_loc()
        if not isinstance(other, Tile):
            other = _as_tile(other, self, loc)
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
    # division is x * rcp(y) (v_rcp_f32, correctly rounded here: one rounding more than IEEE
    # division, within 1.5 ulp); by a number it is a multiplication by its reciprocal
    def __truediv__(self, other):
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return self._binary("mul", 1.0 / other)
        return self * rcp(_as_tile(other, self, user_loc()))

    def __rtruediv__(self, other):
        return _as_tile(other, self, user_loc()) * rcp(self)

    def __neg__(self):
        return _result(O.Unary, self.type, user_loc(), fn="neg", x=self.value)

    def __abs__(self):
        return _result(O.Unary, self.type, user_loc(), fn="abs", x=self.value)

    # comparisons give masks (1.0 where the relation holds, 0.0 where not); `==` stays Python's
    # identity, so equality is spelled like the expressions': x.eq(y), x.ne(y)
    def __lt__(self, other): return self._binary("lt", other)
    def __le__(self, other): return self._binary("le", other)
    def __gt__(self, other): return self._binary("gt", other)
    def __ge__(self, other): return self._binary("ge", other)
    def eq(self, other): return self._binary("eq", other)
    def ne(self, other): return self._binary("ne", other)
    __hash__ = object.__hash__

    def to(self, dtype: str, rounding: str = "rne") -> Tile:
        """Convert the element type, rounding to nearest even (`rounding="rtz"`: toward zero,
        i.e. truncating f32 to bf16)."""
        loc = user_loc()
        t = current_builder().reg_type(dtype, self.spec, loc)
        if rounding not in O.ROUNDINGS:
            raise DSLError(f"rounding {rounding!r} is not one of {list(O.ROUNDINGS)}", loc)
        return _result(O.Cast, t, loc, x=self.value, rounding=rounding)



def _as_tile(value, like: Tile, loc: SourceLoc) -> Tile:
    """A number or a size expression (`x * N`, `x / (B * N)`) as a tile in `like`'s layout."""
    if isinstance(value, Tile):
        return value
    if isinstance(value, Expr) and not value.is_bool:
        return iota(like.spec, None, start=value, _loc=loc)
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return full(like.spec, float(value), like.dtype, _loc=loc)
    raise DSLError(f"cannot combine a tile with {type(value).__name__} {value!r}; use a tile, "
                   "a number or a size expression", loc)


def _result(kind, t, loc, **fields) -> Tile:
    builder = current_builder()
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
             guard: bool = False, rows: Rows | None = None) -> Tile:
        """Tile element c is tensor[origin + c] (tile axis t placed on tensor axis axes[t]).

        `gather` takes one coordinate from an index tensor (rows gathered by id); `guard`
        makes out-of-range elements read 0, like a bounds-checked buffer load; `rows` takes
        one coordinate from a register tile of row ids (`T.Rows`).
        """
        loc = user_loc()
        t = current_builder().reg_type(self.dtype, spec, loc)
        return _result(O.GlobalLoad, t, loc, tensor=self.value,
                       origin=_exprs(origin, "origin", loc), axes=self._axes(axes, spec, loc),
                       gather=_gather(gather, loc), guard=guard,
                       active=current_builder().active_condition(), rows=_rows(rows, loc))

    def store(self, origin, tile: Tile, *, axes=None, gather: Gather | None = None,
              guard: bool = False, rows: Rows | None = None):
        """tensor[origin + c] = tile[c]; `gather`/`guard`/`rows` as for load (guarded elements
        out of range are not written)."""
        self._store(O.GlobalStore, origin, tile, axes, gather, guard, rows)

    def atomic_add(self, origin, tile: Tile, *, axes=None, gather: Gather | None = None,
                   guard: bool = False, rows: Rows | None = None):
        self._store(O.GlobalAtomicAdd, origin, tile, axes, gather, guard, rows)

    def _store(self, kind, origin, tile: Tile, axes, gather, guard, rows=None):
        loc = user_loc()
        _check_tile(tile, "stored", loc)
        builder = current_builder()
        builder.emit(kind(tensor=self.value, origin=_exprs(origin, "origin", loc),
                          axes=self._axes(axes, tile.spec, loc), value=tile.value, loc=loc,
                          gather=_gather(gather, loc), guard=guard,
                          active=builder.active_condition(), rows=_rows(rows, loc)))


@attrs.frozen
class Gather:
    """Rows by id: along tensor `axis`, use `index[start + c[tile_axis]] // divisor` (index:
    an i32 rank-1 tensor argument). `divisor` > 1 reads one row for that many consecutive
    ids: `T.Gather(sorted_ids, p, divisor=topk)` gathers X by token from (token, slot) ids
    token * topk + slot, while a store through `T.Gather(sorted_ids, p)` writes the
    (token, slot) row."""

    index: Global
    start: object
    tile_axis: int = 0
    axis: int = 0
    divisor: int = 1


def _gather(gather: Gather | None, loc: SourceLoc) -> O.Gather | None:
    if gather is None:
        return None
    if not isinstance(gather.index, Global):
        raise DSLError("Gather needs an index tensor argument", loc)
    divisor = gather.divisor
    if isinstance(divisor, bool) or not isinstance(divisor, int) or divisor < 1:
        raise DSLError(f"Gather divisor {divisor!r}: the ids per gathered row is a positive "
                       "int known when the kernel is traced", loc,
                       fix="pass a kernel parameter such as topk, e.g. divisor=topk")
    return O.Gather(gather.index.value, _exprs((gather.start,), "gather start", loc)[0],
                    gather.tile_axis, gather.axis, divisor)


@attrs.frozen
class Rows:
    """Row ids held in registers: along tensor `axis`, each element uses the value its own
    thread slot holds in `index` (an i32 tile laid out like the data tile, e.g. ids loaded
    into registers or staged through LDS). The values must be entries of the rank-1 i32
    tensor `source`; `index`'s tag `at` names which (tag the source with its positions:
    `T.tag(ids, lambda p: {"pos": p})`). The verifier then knows each row as that entry, so
    `T.distinct(source, lo, hi)` makes distinct positions distinct rows; where the tag is ⊤
    the row is unknown."""

    index: Tile
    source: Global
    at: str
    axis: int = 0


def _rows(rows: Rows | None, loc: SourceLoc) -> O.Rows | None:
    if rows is None:
        return None
    if not isinstance(rows, Rows) or not isinstance(rows.index, Tile) \
            or not isinstance(rows.source, Global):
        raise DSLError("rows= takes T.Rows(index tile, source tensor, position tag name)", loc)
    names, _ = O.tag_names([inner for block in current_builder().blocks
                            for inner in O.walk(O.Block((), tuple(block)))])
    known = names.get(rows.index.value.name)
    if known is not None and rows.at not in known:
        carried = ", ".join(sorted(known)) or "no tags"
        raise DSLError(f"T.Rows: {rows.index.value} carries {carried}, "
                       f"not {rows.at!r}; tag {rows.source.value.name} with its positions, e.g. "
                       f"T.tag({rows.source.value.name}, lambda p: {{'{rows.at}': p}})", loc)
    return O.Rows(rows.index.value, rows.source.value, rows.at, rows.axis)


def load_scalar(tensor: Global, index, lo, hi) -> Var:
    """One element of an i32 tensor as a workgroup-uniform integer in [lo, hi).

    `lo` and `hi` may be sizes or expressions in them (an expert id in [0, E)); the verifier
    assumes the range and the interpreter rejects a run whose tensor breaks it."""
    loc = user_loc()
    builder = current_builder()
    lo_e, hi_e = _exprs((lo, hi), "bounds", loc)
    symbolic = not (isinstance(lo_e, Const) and isinstance(hi_e, Const))
    # the variable's own range is what an i32 can hold where a bound is symbolic
    var_lo = lo_e.value if isinstance(lo_e, Const) else -(2**31)
    var_hi = hi_e.value if isinstance(hi_e, Const) else 2**31
    if var_lo >= var_hi:
        raise DSLError(f"load_scalar: the range [{lo}, {hi}) is empty; give lo < hi", loc)
    var = Var(builder.fresh_var("s"), var_lo, var_hi)
    builder.emit(O.ScalarLoad(var=var, tensor=tensor.value, index=_exprs(index, "index", loc),
                              loc=loc, bounds=(lo_e, hi_e) if symbolic else ()))
    return var


def distinct(index: Global, lo, hi) -> None:
    """Declare that the entries of the i32 index tensor `index` lying in [lo, hi) are pairwise
    distinct: `T.distinct(sorted_ids, 0, TOKENS)` says every real token appears once, padding
    ids being outside the range.

    The verifier assumes it where rows gathered through `index` meet (whether two workgroups
    store the same row); the interpreter checks it on the actual data and reports the two
    positions that repeat a value. Declare it at the top of the kernel body; `lo` and `hi` may
    be sizes, scalar arguments or expressions in them."""
    loc = user_loc()
    builder = current_builder()
    if not isinstance(index, Global):
        raise DSLError(f"T.distinct declares a fact about an index tensor argument, not "
                       f"{type(index).__name__}", loc)
    t = index.value.type
    if len(t.shape) != 1 or t.dtype != "i32":
        raise DSLError(f"T.distinct needs a rank-1 i32 index tensor; {index.value.name} is "
                       f"{t.dtype} of rank {len(t.shape)}", loc)
    for name, bound in (("lo", lo), ("hi", hi)):
        if not _is_integer(bound):
            raise DSLError(f"T.distinct: {name} must be an integer or a size expression, not "
                           f"{bound!r}", loc)
    if len(builder.blocks) != 1:
        raise DSLError("T.distinct states a fact about the input data for the whole launch; "
                       "declare it at the top of the kernel body, outside loops and branches",
                       loc)
    lo_e, hi_e = _exprs((lo, hi), "bounds", loc)
    builder.emit(O.Distinct(tensor=index.value, lo=lo_e, hi=hi_e, loc=loc))


def _is_integer(value) -> bool:
    if isinstance(value, Expr):
        return not value.is_bool
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


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
        _check_tile(tile, "stored", loc)
        builder = current_builder()
        builder.emit(O.LdsStore(buffer=self.value, addr=self.addr,
                                origin=_exprs(origin, "origin", loc), value=tile.value, loc=loc,
                                active=builder.active_condition()))

    def atomic_add(self, origin, tile: Tile):
        """buffer[addr(origin + c)] += tile[c] atomically: threads adding to one address need
        no barrier between them; read the sum after a barrier (and store zeros first)."""
        loc = user_loc()
        _check_tile(tile, "added", loc)
        builder = current_builder()
        builder.emit(O.LdsAtomicAdd(buffer=self.value, addr=self.addr,
                                    origin=_exprs(origin, "origin", loc), value=tile.value,
                                    loc=loc, active=builder.active_condition()))

    def load(self, origin, spec: TileSpec) -> Tile:
        loc = user_loc()
        t = current_builder().reg_type(self.value.type.dtype, spec, loc)
        return _result(O.LdsLoad, t, loc, buffer=self.value, addr=self.addr,
                       origin=_exprs(origin, "origin", loc),
                       active=current_builder().active_condition())


# ---------------------------------------------------------------------------------------------
# the DSL surface


def grid(*extents) -> None:
    """The number of workgroups along each axis (size expressions)."""
    loc = user_loc()
    builder = current_builder()
    if builder.grid is not None:
        raise DSLError("grid(...) is given twice", loc)
    if not 1 <= len(extents) <= 3:
        raise DSLError(f"a grid has 1 to 3 dimensions, got {len(extents)}", loc)
    builder.grid = _exprs(extents, "grid extents", loc)


def program_id(axis: int) -> Var:
    """This workgroup's index along grid `axis`, as a symbolic integer."""
    loc = user_loc()
    builder = current_builder()
    if axis not in (0, 1, 2) or isinstance(axis, bool):
        raise DSLError(f"program_id({axis!r}): the grid axis is 0, 1 or 2", loc)
    if axis not in builder.pids:
        var = Var(f"wg{axis}", 0, _pid_limit(builder.grid, axis))
        op = O.ProgramId(var=var, axis=axis, loc=loc)
        op.verify()
        # bound at kernel level even when first asked for inside a loop or branch
        builder.blocks[0].append(op)
        builder.pids[axis] = var
    return builder.pids[axis]


def _pid_limit(grid, axis: int) -> int:
    """An exclusive upper bound of the workgroup id along `axis`: the largest extent the grid
    can have there, when the grid is already declared. A tight range keeps the verifier's
    bit-vectors narrow: split-K's `wg2 * (K // 128)` with wg2 < 4 is a small product, with
    wg2 < 2^31 a 31-bit multiplier the solver struggles with."""
    if grid is None or axis >= len(grid):
        return SIZE_RANGE[1]
    return min(SIZE_RANGE[1], max(1, bounds(grid[axis])[1]))


def assume(condition) -> None:
    """A precondition on sizes (e.g. `M % 64 == 0` written `(M % 64).eq(0)`)."""
    loc = user_loc()
    _no_python_bool(condition, "assume", loc)
    condition = as_expr(condition)
    if not condition.is_bool:
        raise DSLError(f"assume needs a condition, got the integer '{condition}'", loc)
    current_builder().assumes.append(condition)


def _no_python_bool(condition, where: str, loc: SourceLoc):
    # `==` on expressions is structural identity, so `a == b` quietly yields a Python bool
    if isinstance(condition, bool):
        raise DSLError(f"{where} got the Python bool {condition}; write equations with .eq(), "
                       "e.g. `A.k.eq(B.k)` or `(M % 64).eq(0)`", loc)


def hint(text: str) -> None:
    """A scheduling hint for the compiler, kept on the kernel."""
    current_builder().hints.append(text)


def tag(tensor, fn: Callable):
    """Tag every element of a global tensor (in place) or register tile (returns a new tile):
    `fn(*coords) -> {name: expr}`."""
    loc = user_loc()
    builder = current_builder()
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
    try:
        inspect.signature(fn).bind(*coords)
    except TypeError:
        raise DSLError(f"the tag function {getattr(fn, '__name__', fn)!r} must take "
                       f"{len(coords)} coordinates (one per dimension)", loc) from None
    except ValueError:
        pass  # a builtin without a signature: let the call say
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
    if not callable(predicate):
        raise DSLError(f"tag_assert takes a predicate function of the op's roles, e.g. "
                       f"lambda A, B, C: A.k.eq(B.k), not {predicate!r}", loc)
    if not isinstance(message, str):
        raise DSLError(f"tag_assert's message must be text, got {message!r}", loc)
    ops = current_builder().blocks[-1]
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
    program = [inner for block in current_builder().blocks
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
    what = (f"the op producing {on.value}" if on is not None
            else "op that takes assertions (MFMA, store, elementwise, mask)")
    raise DSLError(f"tag_assert finds no {what} earlier in this block", loc)


def lds(shape, dtype: str, *, swizzle=None, addr=None) -> Lds:
    """Allocate workgroup-shared memory viewed through `addr` (default: row-major, optionally
    XOR-swizzled with (bits, base, shift))."""
    loc = user_loc()
    builder = current_builder()
    if addr is None and not (isinstance(shape, (tuple, list)) and shape and all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape)):
        raise DSLError(f"lds shape {shape!r}: give a tuple of whole numbers >= 1", loc)
    if dtype not in DTYPE_BYTES:
        raise DSLError(f"lds dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}", loc)
    addr = addr if addr is not None else lds_layout(tuple(shape), swizzle)
    elements = math.prod(addr.shape)
    if builder.lds_bytes + elements * DTYPE_BYTES[dtype] > LDS_BUDGET:
        # refused before cosize enumerates the layout's coordinates
        need = elements * DTYPE_BYTES[dtype]
        raise DSLError(f"LDS use reaches {builder.lds_bytes + need} bytes (lds "
                       f"{tuple(addr.shape)} of {dtype} needs {need} beside {builder.lds_bytes} "
                       f"already allocated); a gfx942 workgroup has {LDS_BUDGET} (64 KiB): "
                       "shrink the tiles or the number of stages", loc)
    size = cosize(addr)
    builder.lds_bytes += size * DTYPE_BYTES[dtype]
    if builder.lds_bytes > LDS_BUDGET:
        raise DSLError(f"LDS use reaches {builder.lds_bytes} bytes; a gfx942 workgroup has "
                       f"{LDS_BUDGET} (64 KiB): shrink the tiles or the number of stages", loc)
    value = Value(builder.fresh("lds"), LdsType(dtype, size))
    builder.emit(O.LdsAlloc(result=value, loc=loc))
    return Lds(value, addr)


def full(spec: TileSpec, value: float, dtype: str = "f32", *, _loc=None) -> Tile:
    """A register tile of layout `spec` with every element `value` (of `dtype`)."""
    loc = _loc or user_loc()
    return _result(O.Full, current_builder().reg_type(dtype, spec, loc), loc, value=float(value))


def zeros(spec: TileSpec, dtype: str = "f32") -> Tile:
    """A register tile of layout `spec` filled with 0 (an MFMA accumulator's start)."""
    loc = user_loc()
    return _result(O.Full, current_builder().reg_type(dtype, spec, loc), loc, value=0.0)


def mfma(instr: str, a: Tile, b: Tile, c: Tile, *, cbsz: int | None = None,
         abid: int | None = None, cover: str | None = None) -> Tile:
    """One MFMA per wave; the result has C's layout. `cbsz`/`abid` (multi-block instructions):
    every group of 2**cbsz blocks reads A from its block `abid`. `cover="k"` makes the result
    record which k the accumulation has covered, as tags `kfirst`, `klast`, `kstep` (C's
    recorded progression united with this instruction's k's), so an assertion at the store
    can state that it saw all of K once (`And(V.kfirst.eq(0), V.klast.eq(K - 1),
    V.kstep.eq(1))`). Before a K loop, tag the zero accumulator with the empty progression
    (`kfirst=k0, klast=k0 - 1, kstep=1`) so the loop carries the same names."""
    loc = user_loc()
    if cover is not None:
        _check_cover(cover, (a, b), "both A and B", loc)
    extra = {"cover": cover} if cover else {}
    if cbsz is None and abid is None:
        return _result(O.Mfma, c.type, loc, instr=instr, a=a.value, b=b.value, c=c.value,
                       **extra)
    return _result(O.MfmaBroadcast, c.type, loc, instr=instr, a=a.value, b=b.value,
                   c=c.value, cbsz=cbsz or 0, abid=abid or 0, **extra)


def _check_cover(cover: str, tiles, who: str, loc) -> None:
    """A `cover=` names a tag the tiles carry (when their names are known at trace time)."""
    if not (isinstance(cover, str) and cover.isidentifier() and "_" not in cover):
        raise DSLError(f"cover={cover!r} must be a tag name (an identifier without '_')", loc)
    names, _ = O.tag_names([inner for block in current_builder().blocks
                            for inner in O.walk(O.Block((), tuple(block)))])
    for tile in tiles:
        known = names.get(tile.value.name)
        if known is not None and cover not in known and cover_names(cover)[0] not in known:
            raise DSLError(f"cover={cover!r}: {tile.value} carries "
                           f"{', '.join(sorted(known)) or 'no tags'}; name a tag {who} carry "
                           "(the one the operation combines across)", loc)


def _unary(fn: str, x: Tile) -> Tile:
    _check_tile(x, f"given to T.{fn}", user_loc())
    return _result(O.Unary, x.type, user_loc(), fn=fn, x=x.value)


def exp2(x: Tile) -> Tile:
    """Elementwise 2**x of a register tile (same layout and tags; v_exp_f32 per element)."""
    return _unary("exp2", x)


def sqrt(x: Tile) -> Tile:
    """Elementwise square root of a register tile (v_sqrt_f32 per element)."""
    return _unary("sqrt", x)


def rsqrt(x: Tile) -> Tile:
    """1 / sqrt(x) in one instruction (v_rsq_f32)."""
    return _unary("rsqrt", x)


def abs(x: Tile) -> Tile:  # noqa: A001
    """Elementwise absolute value of a register tile (the sign bit cleared)."""
    return _unary("abs", x)


def floor(x: Tile) -> Tile:
    """Elementwise floor of a register tile (v_floor_f32 per element)."""
    return _unary("floor", x)


def trunc(x: Tile) -> Tile:
    """Elementwise rounding toward zero of a register tile (v_trunc_f32)."""
    return _unary("trunc", x)


def where(mask: Tile, x, y) -> Tile:
    """x where `mask` is nonzero (a comparison's 1.0), else y; x and y may be numbers or size
    expressions. Tags: as for a binary op over x and y (roles X and Y)."""
    loc = user_loc()
    _check_tile(mask, "given to T.where as the mask", loc)
    x_tile, y_tile = _as_tile(x, mask, loc), _as_tile(y, mask, loc)
    for tile in (x_tile, y_tile):
        if tile.shape != mask.shape:
            raise DSLError(f"T.where: shape {list(tile.shape)} does not match the mask's "
                           f"{list(mask.shape)}", loc)
    return _result(O.Select, x_tile.type, loc, x=x_tile.value, y=y_tile.value,
                   mask=mask.value)


def iota(spec: TileSpec, axis: int | None, *, start=0, dtype: str = "f32", _loc=None) -> Tile:
    """Index tile: element c is start + c[axis] (`axis=None`: start alone, a size as a tile);
    `start` may be a size expression, e.g. a column block's origin, so the tile holds global
    column indices."""
    loc = _loc or user_loc()
    t = current_builder().reg_type(dtype, spec, loc)
    try:
        start_e = tidy(as_expr(start))
    except TypeError:
        raise DSLError(f"T.iota: start must be an integer or a size expression, not "
                       f"{start!r}", loc) from None
    return _result(O.Iota, t, loc, axis=-1 if axis is None else axis, start=start_e)


def log2(x: Tile) -> Tile:
    """Elementwise log2(x) of a register tile (same layout and tags; v_log_f32 per element)."""
    return _unary("log2", x)


def rcp(x: Tile) -> Tile:
    """Elementwise 1/x of a register tile (same layout and tags; v_rcp_f32 per element)."""
    return _unary("rcp", x)


def maximum(x: Tile, y: Tile) -> Tile:
    """Elementwise larger of two tiles of one layout (their common tags are kept)."""
    return x._binary("max", y)


def minimum(x: Tile, y: Tile) -> Tile:
    """Elementwise smaller of two tiles of one layout (their common tags are kept)."""
    return x._binary("min", y)


def mask(x: Tile, keep: Callable, fill: float, *, trace: str | None = None) -> Tile:
    """Elements whose coordinates satisfy `keep(*coords)` stay, the others become `fill`.
    `trace="valid"` leaves the decision in the tags: the result carries `valid` = 1 where the
    element was kept and 0 where it was filled, so a later assertion can say which elements
    may reach it (`X.valid.eq(1)`)."""
    loc = user_loc()
    condition = tidy(as_expr(keep(*coord_vars(x.shape))))
    return _result(O.Mask, x.type, loc, x=x.value, keep=condition, fill=float(fill),
                   trace=trace)


def reduce(x: Tile, fn: str, axis: int, spec: TileSpec, *, drop=()) -> Tile:
    """`fn` ("max", "min", "sum" or "prod") along `axis`, into layout `spec`; the tags named
    in `drop` (those that vary along the axis) are removed. max/min ignore NaN unless every
    element is NaN (IEEE maxNum, as v_max_f32). Within a wave it is one cross-lane exchange;
    an axis whose lines span waves goes through LDS (`argus.lang.across`)."""
    loc = user_loc()
    t = current_builder().reg_type(x.dtype, spec, loc)
    _check_tile(x, "reduced", loc)
    if fn in O.REDUCE_FNS and 0 <= axis < len(x.shape):
        from argus.lang import across

        if across.spans_waves(x.spec, axis):
            return across.reduce(x, fn, axis, spec, drop)
    return _result(O.Reduce, t, loc, fn=fn, x=x.value, axis=axis, drop=tuple(drop))


def broadcast(x: Tile, axis: int, spec: TileSpec) -> Tile:
    """Spread a reduced tile back along `axis` into layout `spec`: a cross-lane exchange
    where each wave holds what its threads need, else through LDS (`argus.lang.across`)."""
    loc = user_loc()
    t = current_builder().reg_type(x.dtype, spec, loc)
    _check_tile(x, "broadcast", loc)
    if 0 <= axis < len(spec.shape) and spec.shape[:axis] + spec.shape[axis + 1:] == x.shape:
        from argus.lang import across

        if not across.held_in_wave(x.spec, axis, spec):
            return across.broadcast(x, axis, spec)
    return _result(O.Broadcast, t, loc, x=x.value, axis=axis)


def shuffle(x: Tile, lanes: str, *params: int, combine: str | None = None,
            cover: str | None = None) -> Tile:
    """Cross-lane movement within each wave: slot s of lane l reads slot s of the lane the
    gfx942 lane map `lanes` names (`argus.isa_cdna3.lanemaps`: "dpp.row_shr", 1 /
    "swizzle.bitmask", 31, 0, 1 / "bpermute.xor", 16 / ...). With `combine` ("max", "sum") the
    result is fn(own, read): one butterfly step. `cover="col"` makes the result record the
    columns it covers as tags `colfirst`, `collast`, `colstep` (the progression first,
    first + step, ..., last), so an assertion can state that a reduction saw every column
    (`And(V.colfirst.eq(0), V.collast.eq(31), V.colstep.eq(1))`)."""
    loc = user_loc()
    if cover is not None:
        _check_cover(cover, (x,), "the lanes being combined", loc)
    return _result(O.Shuffle, x.type, loc, x=x.value, lanes=lanes, params=tuple(params),
                   combine=combine or "", cover=cover or "")


def slots(x: Tile, start: int, spec: TileSpec) -> Tile:
    """Registers [start, start + spec.slots) of `x`, seen as a tile of layout `spec`."""
    loc = user_loc()
    t = current_builder().reg_type(x.dtype, spec, loc)
    return _result(O.SlotSlice, t, loc, x=x.value, start=start)


def barrier(*, wait: bool = True) -> None:
    """Workgroup barrier. By default this wave's LDS stores land first (s_waitcnt lgkmcnt(0);
    s_barrier), so what every wave stored before it is visible to every wave after it.
    `wait=False` is the bare s_barrier: stores (and copies) still in flight are not ordered;
    put a `T.wait()` or `T.wait_group(n)` before it."""
    loc = user_loc()
    if not isinstance(wait, bool):
        raise DSLError(f"barrier(wait={wait!r}): give True or False", loc)
    builder = current_builder()
    if builder.active:
        raise DSLError("T.barrier() inside a T.lanes block: s_barrier waits for every wave of "
                       "the workgroup, so threads left out would never arrive; close the "
                       "T.lanes block before the barrier", loc)
    builder.emit((O.Barrier if wait else O.BarrierNoWait)(loc=loc))


def wait() -> None:
    """s_waitcnt vmcnt(0) lgkmcnt(0): this wave's LDS stores and committed async copies have
    landed (a workgroup-scope fence). Other waves see them after the next barrier."""
    current_builder().emit(O.Wait(loc=user_loc()))


def async_copy(dst: Lds, dst_origin, src: Global, src_origin, spec: TileSpec, *,
               axes=None) -> None:
    """Copy a tile from global memory straight into LDS without registers (gfx942
    `buffer_load_dword ... lds`): dst[dst_origin + c] = src[src_origin + c], element c copied
    by the thread that holds c in `spec`'s layout. The copy joins this wave's open group
    (`commit_group` closes it) and lands only when `wait_group` retires its group."""
    loc = user_loc()
    if not isinstance(dst, Lds) or not isinstance(src, Global):
        raise DSLError("async_copy(dst, dst_origin, src, src_origin, spec): dst is a T.lds "
                       "buffer and src a tensor argument", loc)
    t = current_builder().reg_type(src.dtype, spec, loc)
    current_builder().emit(O.AsyncCopy(
        buffer=dst.value, addr=dst.addr, origin=_exprs(dst_origin, "dst_origin", loc),
        tensor=src.value, source=_exprs(src_origin, "src_origin", loc),
        axes=src._axes(axes, spec, loc), tile=t, loc=loc))


def commit_group() -> None:
    """Close this wave's open group of async copies; `wait_group(n)` counts closed groups."""
    current_builder().emit(O.CommitGroup(loc=user_loc()))


def wait_group(pending: int) -> None:
    """Wait until at most `pending` of this wave's committed copy groups (the newest) are in
    flight: every older group has landed for this wave; other waves see it after a barrier."""
    loc = user_loc()
    if not _is_integer(pending) or isinstance(pending, Expr):
        raise DSLError(f"wait_group({pending!r}): give a whole number of groups", loc)
    current_builder().emit(O.WaitGroup(pending=int(pending), loc=loc))


def cdiv(a, b):
    """Ceiling division of sizes (symbolic or int), e.g. the number of tiles covering M."""
    return (a + b - 1) // b if isinstance(a, Expr) or isinstance(b, Expr) else -(-a // b)



__all__ = [
    "Tile", "Global", "Lds", "Gather", "Rows", "grid", "program_id", "assume", "hint", "tag",
    "tag_assert", "lds", "full", "zeros", "mfma", "exp2", "log2", "rcp", "maximum", "minimum",
    "mask", "reduce", "broadcast", "shuffle", "slots", "barrier", "load_scalar", "distinct", "cdiv",
    "tidy", "wait", "async_copy", "commit_group", "wait_group",
    "ThreadLayout", "sqrt", "rsqrt", "abs", "floor", "trunc", "where", "iota",
]

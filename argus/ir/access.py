"""Where each memory op's elements go: one element -> tensor index / LDS address formula and
one in-bounds predicate per memory op (global load/store/atomic, gather, scalar load, LDS
read/write). Formulas are `ir.expr` terms in the thread variables (wave, lane, slot), the op's
origin (workgroup ids, loop variables, sizes) and, for a gather, the row read from the index
tensor; the verifier substitutes and proves them, the interpreter and the bank facts evaluate
them on numpy arrays, and the backend's address generation reads them.
"""

from __future__ import annotations

import attrs

from argus.ir.expr import And, Expr, Var, as_expr, simplify, substitute
from argus.ir.types import DTYPE_BYTES, AddressMap, ThreadLayout

#: The variable standing for the row a gather reads from its index tensor (per element): the
#: verifier binds it to a symbolic helper, the interpreter to the loaded ids.
GATHERED_ROW = Var("gathered_row", -(2**31), 2**31)


@attrs.frozen
class GlobalAccess:
    """Element (wave, lane, slot) of a global load/store touches tensor[index] where `inside`
    holds; a gather reads its row from index_tensor[gather_position] (valid where
    `gather_inside`), and `index` names that row `GATHERED_ROW` (as it does the row a `rows=`
    access takes from a register tile)."""

    index: tuple[Expr, ...]
    inside: Expr
    gather_position: Expr | None = None
    gather_inside: Expr | None = None


@attrs.frozen
class LdsAccess:
    """Element (wave, lane, slot) of an LDS read/write touches view coordinate `view`, element
    offset `address` of the allocation (times `elem_bytes` for bytes), where `inside` holds."""

    view: tuple[Expr, ...]
    address: Expr
    inside: Expr
    elem_bytes: int


def tile_vars(shape) -> tuple[Var, ...]:
    """Variables t0, t1, ... standing for a tile element's coordinates: a formula in them is
    evaluated on a layout's table of coordinates (`ThreadLayout.table`) by the interpreter."""
    return tuple(Var(f"t{axis}", 0, extent) for axis, extent in enumerate(shape))


def tile_coords(layout: ThreadLayout, thread=None) -> tuple[Expr, ...]:
    """The tile coordinates thread slot `thread` = (wave, lane, slot) holds (default: the
    layout's own thread variables)."""
    if thread is None:
        return layout.coords
    names = dict(zip(("wave", "lane", "slot"), thread))
    return tuple(substitute(c, names) for c in layout.coords)


def _element(op, thread):
    """The coordinates of the tile element an access formula is written for: those a thread
    holds, or with thread="tile" the variables `tile_vars`."""
    tile = tile_of(op)
    return tile_vars(tile.shape) if thread == "tile" else tile_coords(tile.layout, thread)


def tile_of(op):
    """The register tile a memory op moves: the stored value, the loaded result, or the
    layout an async copy is spread over (`tile`, a type: the data bypasses registers)."""
    if hasattr(op, "tile"):
        return op.tile
    return (op.value if hasattr(op, "value") else op.result).type


def global_origin(op) -> tuple:
    """Where a global access starts: an async copy's `origin` is in LDS, its `source` in the
    tensor."""
    return op.source if hasattr(op, "source") else op.origin


def in_box(index, shape) -> Expr:
    """0 <= index[a] < shape[a] on every axis."""
    return And(*(And(0 <= as_expr(i), as_expr(i) < e) for i, e in zip(index, shape)))


def global_access(op, thread=None, origin=None) -> GlobalAccess:
    """The index formula of a global.load / global.store / global.atomic_add: the tile element at
    coordinate c lands at origin + c placed on `op.axes`, the gathered axis reading its row from
    the index tensor (the id divided by the gather's divisor). `thread` names the element
    (default: the layout's thread variables; "tile": coordinate variables), `origin` overrides
    the op's (a race check's renamed copy)."""
    coords = _element(op, thread)
    index = list(global_index(op, thread, origin))
    position = gather_inside = None
    if op.gather is not None:
        gather = op.gather
        position = simplify(gather.origin + coords[gather.tile_axis])
        gather_inside = simplify(in_box((position,), gather.index.type.shape))
        # floor division, as the backend's arithmetic shift and the interpreter's numpy do
        index[gather.axis] = GATHERED_ROW // gather.divisor if gather.divisor != 1 \
            else GATHERED_ROW
    if getattr(op, "rows", None) is not None:
        index[op.rows.axis] = GATHERED_ROW
    index = tuple(simplify(as_expr(i)) for i in index)
    return GlobalAccess(index, simplify(in_box(index, op.tensor.type.shape)), position,
                        gather_inside)


def global_index(op, thread=None, origin=None) -> tuple[Expr, ...]:
    """The tensor index of each tile element of a global access, before a gather replaces its
    row: origin + c placed on `op.axes` (the formula alone, for the backend's addresses)."""
    coords = _element(op, thread)
    index = list(global_origin(op) if origin is None else origin)
    for tile_axis, tensor_axis in enumerate(op.axes):
        index[tensor_axis] = index[tensor_axis] + coords[tile_axis]
    return tuple(index)


def scalar_access(op) -> tuple[tuple[Expr, ...], Expr]:
    """(index, inside) of a scalar.load: one workgroup-uniform element."""
    return op.index, simplify(in_box(op.index, op.tensor.type.shape))


def lds_view(addr: AddressMap, origin, coords) -> tuple[Expr, ...]:
    """The view coordinates a tile element lands on: the tile fills the trailing dimensions,
    the leading ones are fixed by the origin."""
    lead = len(addr.shape) - len(coords)
    return tuple(as_expr(origin[d]) if d < lead else origin[d] + coords[d - lead]
                 for d in range(len(addr.shape)))


def lds_inside(addr: AddressMap, view, address, size: int) -> Expr:
    """The view coordinate lies in the view and its address in the allocation."""
    return And(in_box(view, addr.shape), 0 <= address, address < size)


def lds_access(op, thread=None, origin=None) -> LdsAccess:
    """The address formula of an lds.load / lds.store: view coordinate origin + c (trailing
    dimensions), element offset addr(view) in the allocation of `op.buffer`."""
    coords = _element(op, thread)
    view = lds_view(op.addr, op.origin if origin is None else origin, coords)
    address = op.addr.at(view)
    size = op.buffer.type.size
    return LdsAccess(view, address, simplify(lds_inside(op.addr, view, address, size)),
                     DTYPE_BYTES[op.buffer.type.dtype])


__all__ = ["GATHERED_ROW", "GlobalAccess", "LdsAccess", "global_access", "global_index", "in_box",
           "lds_access", "lds_inside", "lds_view", "scalar_access", "tile_coords", "tile_of",
           "tile_vars"]

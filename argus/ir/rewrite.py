"""Structural rewriting of traced IR kernels (for mutation testing and the search's program
rewrites): replace one op (found by its index in program order), replace values everywhere they
are used, and map every expression of a kernel. Ops, types and layouts are frozen attrs values,
so a rewrite rebuilds the parts it changes and shares the rest; the result is re-verified as
IR."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import attrs

from argus.ir import ops as O
from argus.ir.expr import Expr
from argus.ir.types import SourceLoc, Value

__all__ = ["sites", "replace_op", "replace_values", "map_exprs", "fold_sizes"]


def sites(kernel: O.Kernel) -> Iterator[tuple[int, O.Op, tuple[O.For, ...]]]:
    """(index, op, enclosing loops) for every op of `kernel`, nested ones included, in program
    order; the index names the op for `replace_op`."""
    counter = iter(range(1 << 30))

    def go(block: O.Block, loops):
        for op in block.ops:
            yield next(counter), op, loops
            inner = (*loops, op) if isinstance(op, O.For) else loops
            for nested in op.blocks:
                yield from go(nested, inner)

    yield from go(kernel.body, ())


def replace_op(kernel: O.Kernel, index: int, new_ops: Callable[[O.Op], list[O.Op]]) -> O.Kernel:
    """The kernel with op number `index` (as `sites` counts) replaced by `new_ops(op)` (an
    empty list drops it), re-verified."""
    counter = iter(range(1 << 30))

    def go(block: O.Block) -> O.Block:
        out = []
        for op in block.ops:
            here = next(counter)
            if op.blocks:
                op = _with_blocks(op, [go(b) for b in op.blocks])
            out.extend(new_ops(op) if here == index else [op])
        return attrs.evolve(block, ops=tuple(out))

    return attrs.evolve(kernel, body=go(kernel.body)).verify()


def _with_blocks(op: O.Op, blocks: list[O.Block]) -> O.Op:
    if isinstance(op, O.For):
        return attrs.evolve(op, body=blocks[0])
    if isinstance(op, O.If):
        return attrs.evolve(op, then=blocks[0], orelse=blocks[1])
    raise TypeError(f"{type(op).__name__} has nested blocks this rewriter does not know")


def replace_values(kernel: O.Kernel, mapping: dict[Value, Value]) -> O.Kernel:
    """The kernel with every definition and use of each key value replaced by its value."""
    return _map(kernel, lambda e: e, mapping)


def map_exprs(kernel: O.Kernel, fn: Callable[[Expr], Expr]) -> O.Kernel:
    """The kernel with `fn` applied to every expression it holds (sizes, origins, layouts,
    address maps, masks, assertions, loop bounds), re-verified."""
    return _map(kernel, fn, {})


def fold_sizes(kernel: O.Kernel, values: dict[str, int]) -> O.Kernel:
    """The kernel with the sizes named in `values` replaced by those constants in every
    expression but its list of sizes (each is still an argument), re-verified."""
    from argus.ir.expr import simplify, substitute

    return _map(kernel, lambda e: simplify(substitute(e, values)), {}, keep=("sizes",))


def _map(kernel: O.Kernel, fn, values: dict, keep: tuple[str, ...] = ()) -> O.Kernel:
    memo: dict = {}

    def go(x):
        if isinstance(x, Expr):
            return fn(x)
        if isinstance(x, (str, int, float, bool, SourceLoc)) or x is None:
            return x
        if isinstance(x, tuple):
            new = tuple(go(y) for y in x)
            return x if all(a is b for a, b in zip(new, x)) else new
        key = (type(x), id(x))
        if key not in memo:
            memo[key] = _rebuilt(x, go)
            if isinstance(x, Value) and x in values:
                memo[key] = values[x]
        return memo[key]

    kept = {name: getattr(kernel, name) for name in keep}
    mapped = go(attrs.evolve(kernel, **{name: () for name in keep}))
    return attrs.evolve(mapped, **kept).verify()


def _rebuilt(x, go):
    if not attrs.has(type(x)):
        raise TypeError(f"cannot rewrite a {type(x).__name__} inside an IR kernel")
    changes = {}
    for field in attrs.fields(type(x)):
        old = getattr(x, field.name)
        new = go(old)
        if new is not old:
            changes[field.alias or field.name] = new
    return attrs.evolve(x, **changes) if changes else x

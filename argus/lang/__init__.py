"""The Argus tile DSL: `@kernel` functions traced into tile IR (`import argus.lang as T`)."""

from argus.ir.expr import And, Not, Or, ite, max_, min_
from argus.ir.layout import Layout, Swizzle
from argus.ir.types import LANES, AddressMap, ThreadLayout, coord_vars, thread_vars
from argus.lang.control import Range, group_barrier, lanes, when
from argus.lang.errors import DSLError
from argus.lang.functions import (
    argmax,
    argmin,
    cumprod,
    cumsum,
    erf,
    exp,
    gelu,
    log,
    log1p,
    scan,
    sigmoid,
    softplus,
    tanh,
)
from argus.lang.kernel import KernelDef, Scalar, Tensor, kernel
from argus.lang.layouts import (
    TileSpec,
    copy_layout,
    lds_layout,
    mfma_layout,
    reduced,
    rows_layout,
)
from argus.lang.trace import (
    Gather,
    Global,
    Lds,
    Rows,
    Tile,
    abs,
    assume,
    async_copy,
    barrier,
    broadcast,
    cdiv,
    commit_group,
    distinct,
    exp2,
    floor,
    full,
    grid,
    hint,
    iota,
    lds,
    load_scalar,
    log2,
    mask,
    maximum,
    mfma,
    minimum,
    program_id,
    rcp,
    reduce,
    rsqrt,
    shuffle,
    slots,
    sqrt,
    tag,
    tag_assert,
    trunc,
    wait,
    wait_group,
    where,
    zeros,
)

#: `for k in T.range(start, stop, **carried)`: the DSL loop, spelled like Python's range.
range = Range  # noqa: A001

__all__ = [
    "abs", "floor", "iota", "rsqrt", "sqrt", "trunc", "where", "argmax", "argmin", "cumprod",
    "cumsum", "erf", "exp", "gelu", "log", "log1p", "scan", "sigmoid", "softplus", "tanh",
    "LANES", "AddressMap", "ThreadLayout", "coord_vars", "thread_vars", "rows_layout",
    "And", "Or", "Not", "ite", "min_", "max_", "Layout", "Swizzle",
    "DSLError", "Gather", "Rows", "load_scalar", "TileSpec", "copy_layout", "lds_layout",
    "mfma_layout",
    "reduced", "Global", "cdiv", "KernelDef", "Lds", "Scalar", "Tensor", "Tile", "assume",
    "barrier", "broadcast", "distinct", "group_barrier", "lanes", "exp2", "full", "grid", "hint",
    "kernel", "lds",
    "log2",
    "mask", "maximum", "mfma", "minimum", "program_id", "range", "rcp", "reduce", "shuffle",
    "slots", "tag",
    "tag_assert", "when", "zeros", "async_copy", "commit_group", "wait_group", "wait",
]

"""The elementwise expressions KernelBench's route builds and the kernels that trace them
(the templates and the convolution family's epilogue steps): nested tuples, folded where
constant, and `emit`, which traces one over the tiles of an environment.
"""

from __future__ import annotations

import math

import argus.lang as T
from argus.lang.trace import _unary

#: Expressions are nested tuples, hashable so that a shared subterm is traced once:
#: ("leaf", name) a tile of a full-shape tensor, ("vec", name) a vector broadcast along the
#: other axes, ("stat", i) the i-th reduction of a row program, ("acc",) a matmul accumulator,
#: ("const", value), ("un", fn, x), ("bin", fn, x, y), ("idx", axis) a matmul's row (0) or
#: column (1) index (in a row program ("idx", "r"): the position along R), ("index", name) a
#: row program's per-row class index (an int64 tensor read as its low 32-bit word),
#: ("per_row", name) and ("plane", name) its per-row and per-(O, R) tensors.
Expr = tuple

UNARY = ("neg", "abs", "exp2", "log2", "rcp", "sqrt", "erf")
#: comparisons give masks (1.0 where true, else 0.0), which ("where", mask, x, y) selects by
COMPARE = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
           "ge": lambda a, b: a >= b, "eq": lambda a, b: a.eq(b)}
#: a comparison with its operands swapped (c < x is x > c)
MIRROR = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq"}
BINARY = ("add", "sub", "mul", "max", "min", *COMPARE)
def const(value: float) -> Expr:
    return ("const", float(value))


def un(fn: str, x: Expr) -> Expr:
    if x[0] == "const":
        value = x[1]
        folded = {"neg": -value, "abs": abs(value),
                  "exp2": 2.0 ** value if value < 128 else math.inf,
                  "log2": math.log2(value) if value > 0 else math.nan,
                  "rcp": 1.0 / value if value else math.inf,
                  "sqrt": math.sqrt(value) if value >= 0 else math.nan,
                  "erf": math.erf(value)}[fn]
        return const(folded)
    return ("un", fn, x)


def bin_(fn: str, x: Expr, y: Expr) -> Expr:
    if x[0] == "const" and y[0] == "const":
        a, b = x[1], y[1]
        if fn in COMPARE:
            return const(float(a == b if fn == "eq" else COMPARE[fn](a, b)))
        return const({"add": a + b, "sub": a - b, "mul": a * b, "max": max(a, b),
                      "min": min(a, b)}[fn])
    if fn == "mul" and (x == const(1.0) or y == const(1.0)):
        return y if x == const(1.0) else x
    if fn in ("add", "sub") and y == const(0.0):
        return x
    return ("bin", fn, x, y)


def where(mask: Expr, x: Expr, y: Expr) -> Expr:
    """x where `mask` (a comparison) holds, else y."""
    if mask[0] == "const":
        return x if mask[1] else y
    return ("where", mask, x, y)


def leaves(e: Expr, kind: str) -> list:
    """The names (or stat indices) of the `kind` leaves of `e`, in first-use order."""
    found: list = []

    def walk(node):
        if node[0] == kind and node[1] not in found:
            found.append(node[1])
        elif node[0] == "un":
            walk(node[2])
        elif node[0] == "bin":
            walk(node[2])
            walk(node[3])
        elif node[0] == "where":
            for part in node[1:]:
                walk(part)

    walk(e)
    return found


def emit(e: Expr, env: dict, memo: dict):
    """Trace `e` with the tiles of `env` (keys: the leaf tuples themselves)."""
    if e in memo:
        return memo[e]
    if e[0] in ("leaf", "vec", "stat", "acc", "idx", "index", "per_row", "plane"):
        result = env[e]
    elif e[0] == "un" and e[1] == "erf":
        result = T.erf(emit(e[2], env, memo))
    elif e[0] == "un":
        result = _unary(e[1], emit(e[2], env, memo))
    elif e[0] == "where":
        mask = emit(e[1], env, memo)
        x, y = (v[1] if v[0] == "const" else emit(v, env, memo) for v in e[2:])
        result = T.where(mask, x, y)
    elif e[0] == "bin" and e[1] in COMPARE:
        x, y, fn = e[2], e[3], e[1]
        if x[0] == "const":
            x, y, fn = y, x, MIRROR[fn]
        other = y[1] if y[0] == "const" else emit(y, env, memo)
        result = COMPARE[fn](emit(x, env, memo), other)
    elif e[0] == "bin":
        x, y = e[2], e[3]
        if x[0] == "const":
            x, y = y, x
            if e[1] == "sub":       # c - y = -(y - c)
                result = -(emit(x, env, memo) - y[1])
                memo[e] = result
                return result
        tile = emit(x, env, memo)
        other = y[1] if y[0] == "const" else emit(y, env, memo)
        result = {"add": lambda: tile + other, "sub": lambda: tile - other,
                  "mul": lambda: tile * other,
                  "max": lambda: T.maximum(tile, other if y[0] != "const"
                                           else T.full(tile.spec, other)),
                  "min": lambda: T.minimum(tile, other if y[0] != "const"
                                           else T.full(tile.spec, other))}[e[1]]()
    else:
        raise ValueError(f"expression node {e[0]!r} cannot be traced here")
    memo[e] = result
    return result

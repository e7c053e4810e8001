"""Small correct kernels for the lane, wave and indirection bug classes of issue 13: a row
maximum by a butterfly of cross-lane shuffles. Each keyword hook defaults to the correct kernel;
a bug file sets one hook and states the counterexample it expects.
"""

from __future__ import annotations

from functools import cache

import argus.lang as T
from argus.ir.expr import And
from argus.ir.types import ThreadLayout, thread_vars
from argus.lang import Tensor, TileSpec

#: One butterfly step per XOR distance 16, 8, 4, 2, 1 over the 32 lanes of a row, each with a
#: different gfx942 lane map that reads lane ^ distance.
BUTTERFLY = (("swizzle.bitmask", (31, 0, 16)), ("dpp.row_ror", (8,)), ("bpermute.xor", (4,)),
             ("dpp.quad_perm", (2, 3, 0, 1)), ("dpp.quad_perm", (1, 0, 3, 2)))


def rows_by_lane() -> TileSpec:
    """Two rows of 32 columns in one wave: lane l holds row l // 32, column l % 32."""
    wave, lane, slot = thread_vars(1, 1)
    return TileSpec((2, 32), ThreadLayout(1, 1, (lane // 32, lane % 32)))


def butterfly_max(X, Y, *, steps=BUTTERFLY):
    """Every element of Y's row is the maximum of X's row, found by a butterfly whose
    shuffles record the columns each partial maximum covers."""
    N = X.shape[0]
    T.assume((N % 2).eq(0))
    T.grid(N // 2)
    r0 = T.program_id(0) * 2
    T.tag(X, lambda r, c: {"row": r, "col": c})
    T.tag(Y, lambda r, c: {"row": r, "col": c})
    m = X.load((r0, 0), rows_by_lane())
    for lanes, params in steps:
        m = T.shuffle(m, lanes, *params, combine="max", cover="col")
    Y.store((r0, 0), m)
    T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.colfirst.eq(0), V.collast.eq(31),
                                  V.colstep.eq(1)),
                 "each stored maximum covers every column of its own row")


@cache
def row_max(**hooks):
    @T.kernel(waves=1)
    def butterfly_row_max(X: Tensor("f32", "N", 32), Y: Tensor("f32", "N", 32)):
        butterfly_max(X, Y, **hooks)
    return butterfly_row_max

"""Sizes a kernel's assumptions fix to a constant (`T.assume(S.eq(1))`, a convolution's
phase counts) are folded before lowering (`argus.asm.lower.fold_assumed`): strides they scale
become constants, so offsets go into the instruction's offset field instead of SGPRs, while
the size stays an argument and the program computes the same."""

from __future__ import annotations

import numpy as np

import argus
import argus.lang as T
from argus.asm.lower import fold_assumed
from argus.ir.expr import Const
from argus.lang import Tensor


@T.kernel(waves=1)
def rows_scaled(X: Tensor("f32", "N", "S", "C"), Y: Tensor("f32", "N", "S", "C")):
    """Y = 2 X, each lane four rows 64 apart: a row of X is S * C elements, so the rows'
    offsets are multiples of S unless S is known."""
    N, S, C = X.shape
    T.assume(S.eq(1))
    T.assume(C.eq(1))
    T.grid(T.cdiv(N, 256))
    n0 = T.program_id(0) * 256
    wave, lane, slot = T.thread_vars(1, 4)
    spec = T.TileSpec((256, 1, 1), T.ThreadLayout(1, 4, (lane + 64 * slot, 0, 0)))
    x = X.load((n0, 0, 0), spec, axes=(0, 1, 2), guard=True)
    Y.store((n0, 0, 0), x * 2.0, axes=(0, 1, 2), guard=True)


def test_an_assumed_size_is_folded_and_stays_an_argument():
    ir = rows_scaled.trace()
    folded = fold_assumed(ir)
    assert [v.name for v in folded.sizes] == [v.name for v in ir.sizes]
    assert folded.tensors[0].type.shape[1] == Const(1)
    assert ir.tensors[0].type.shape[1] != Const(1)


def test_rows_of_a_folded_stride_differ_by_instruction_offsets_and_run_right():
    """Each of the four row loads was at its own SGPR offset (64 * S * C * 4 bytes apart);
    folded, they share one address and differ by offset:256, 512, 768. Proved, and right in
    the strict emulator at a ragged row count."""
    assert argus.verify(rows_scaled).ok
    compiled = argus.compile(rows_scaled)
    lines = compiled.text.splitlines()
    # the folded sizes are arguments nothing reads: not loaded (a dead load's register,
    # reused, waited for it)
    assert not [line for line in lines if "s_load_dword " in line and
                line.rstrip().endswith(("; S", "; C"))]
    loads = [line for line in lines if "buffer_load_dword" in line]
    assert len(loads) == 4
    assert all(f"offset:{256 * k}" in loads[k] for k in range(1, 4))
    x = np.random.default_rng(1).standard_normal((300, 1, 1)).astype(np.float32)
    y = np.full_like(x, np.nan)
    compiled.run(x, y, check="strict")
    np.testing.assert_array_equal(y, 2 * x)

"""Any size (issue 22 item 5): a guarded innermost axis compiles for every extent. Where a
vector access could straddle the tensor's end the backend reads and writes one element at a
time with a per-lane guard, and a coordinate that may fall below 0 (a padded window) is
guarded the same way. Each kernel runs on the strict emulator against numpy and the reference
interpreter at odd sizes."""

from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

import argus
import argus.lang as T
from argus.absint.concrete import run
from argus.lang import Tensor


@T.kernel(waves=1)
def relu_rows(X: Tensor("f32", "R", "C"), Y: Tensor("f32", "R", "C")):
    R, C = X.shape
    T.grid(T.cdiv(R, 4), T.cdiv(C, 64))
    r0, c0 = T.program_id(0) * 4, T.program_id(1) * 64
    spec = T.copy_layout((4, 64), 1, 4)
    x = X.load((r0, c0), spec, guard=True)
    Y.store((r0, c0), T.maximum(x, T.zeros(spec)), guard=True)


@T.kernel(waves=2)
def widen_bf16(X: Tensor("bf16", "B", "R", "C"), Y: Tensor("f32", "B", "R", "C")):
    """bf16 in, f32 out, guarded on the two inner axes of a 3-D tensor."""
    B, R, C = X.shape
    T.grid(B, T.cdiv(R, 8), T.cdiv(C, 32))
    b, r0, c0 = T.program_id(0), T.program_id(1) * 8, T.program_id(2) * 32
    spec = T.copy_layout((8, 32), 2, 2)
    x = X.load((b, r0, c0), spec, axes=(1, 2), guard=True)
    Y.store((b, r0, c0), x.to("f32") * 2.0, axes=(1, 2), guard=True)


@T.kernel(waves=1)
def shift_right(X: Tensor("f32", "R", "C"), Y: Tensor("f32", "R", "C")):
    """Y[r, c] = X[r, c - 3] (0 where c < 3): a padded window's negative coordinates."""
    R, C = X.shape
    T.grid(T.cdiv(R, 2), T.cdiv(C, 128))
    r0, c0 = T.program_id(0) * 2, T.program_id(1) * 128
    spec = T.copy_layout((2, 128), 1, 4)
    x = X.load((r0, c0 - 3), spec, guard=True)
    Y.store((r0, c0), x, guard=True)


def _check(kernel, inputs: dict, expected: dict):
    assert argus.verify(kernel).ok
    compiled = argus.compile(kernel)
    arrays = {name: array.copy() for name, array in inputs.items()}
    compiled.run(**arrays, check="strict")
    interpreted = run(kernel.ir, {n: a.astype(np.float32) for n, a in inputs.items()}).outputs
    for name, want in expected.items():
        np.testing.assert_array_equal(arrays[name], want)
        np.testing.assert_array_equal(interpreted[name], want)


@pytest.mark.parametrize("rows,cols", [(2, 4095), (5, 63), (3, 65), (1, 1), (7, 130)])
def test_relu_odd_widths(rows, cols):
    x = np.random.default_rng(cols).standard_normal((rows, cols)).astype(np.float32)
    _check(relu_rows, {"X": x, "Y": np.zeros_like(x)}, {"Y": np.maximum(x, 0)})


@pytest.mark.parametrize("shape", [(2, 9, 33), (1, 17, 7), (3, 8, 31)])
def test_bf16_tail_on_two_axes(shape):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(bfloat16)
    _check(widen_bf16, {"X": x, "Y": np.zeros(shape, np.float32)},
           {"Y": x.astype(np.float32) * 2})


@pytest.mark.parametrize("rows,cols", [(3, 129), (2, 5), (4, 256)])
def test_negative_coordinates_read_zero(rows, cols):
    x = np.random.default_rng(rows * cols).standard_normal((rows, cols)).astype(np.float32)
    want = np.zeros_like(x)
    want[:, 3:] = x[:, :-3]
    _check(shift_right, {"X": x, "Y": np.zeros_like(x)}, {"Y": want})


def test_narrow_accesses_only_where_needed():
    """The vector width stays where the innermost bound is proved (a multiple assumed)."""
    @T.kernel(waves=1)
    def aligned(X: Tensor("f32", "R", "C"), Y: Tensor("f32", "R", "C")):
        R, C = X.shape
        T.assume((C % 64).eq(0))
        T.grid(T.cdiv(R, 4), C // 64)
        r0, c0 = T.program_id(0) * 4, T.program_id(1) * 64
        spec = T.copy_layout((4, 64), 1, 4)
        Y.store((r0, c0), X.load((r0, c0), spec, guard=True), guard=True)

    wide = argus.compile(aligned).lowered.render()
    narrow = argus.compile(relu_rows).lowered.render()
    assert "buffer_load_dwordx4" in wide and "buffer_load_dwordx4" not in narrow
    assert narrow.count("buffer_load_dword ") == 4

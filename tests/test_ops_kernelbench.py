"""KernelBench Level 1 problems written as a new user would, with the ops of issue 22 and no
workaround (no hand-built layouts, no -max(-x) for min, no compile-time 1/(B*N), no hand-made
scan): softmax, RMSNorm, min reduction, argmax, cumsum, MSE loss, ReLU at odd widths. Each is
verified, compiled, run on the strict emulator and compared with numpy and the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import argus
import argus.lang as T
from argus.absint.concrete import run
from argus.lang import Tensor

ROWS = 4            # rows per workgroup (one per wave)


@T.kernel(waves=ROWS)
def softmax(X: Tensor("f32", "B", "D"), Y: Tensor("f32", "B", "D")):
    """Row softmax for any D up to 512: the tail beyond D is -inf before the maximum."""
    B, D = X.shape
    T.assume(D <= 512)
    T.grid(T.cdiv(B, ROWS))
    r0 = T.program_id(0) * ROWS
    spec = T.rows_layout((ROWS, 512), ROWS)
    row = T.reduced(spec, 1)
    x = T.where(T.iota(spec, 1) < D, X.load((r0, 0), spec, guard=True), -np.inf)
    e = T.exp(x - T.broadcast(T.reduce(x, "max", 1, row), 1, spec))
    Y.store((r0, 0), e / T.broadcast(T.reduce(e, "sum", 1, row), 1, spec), guard=True)


@T.kernel(waves=ROWS)
def rms_norm(X: Tensor("f32", "B", "D"), Y: Tensor("f32", "B", "D")):
    """x * rsqrt(mean(x^2) + eps) (KernelBench's RMSNorm), the mean's 1/D from the size."""
    B, D = X.shape
    T.assume(D <= 256)
    T.grid(T.cdiv(B, ROWS))
    r0 = T.program_id(0) * ROWS
    spec = T.rows_layout((ROWS, 256), ROWS)
    row = T.reduced(spec, 1)
    x = X.load((r0, 0), spec, guard=True)
    mean = T.reduce(x * x, "sum", 1, row) / D
    scale = T.broadcast(T.rsqrt(mean + 1e-5), 1, spec)
    Y.store((r0, 0), x * scale, guard=True)


def row_reduction(fn):
    @T.kernel(waves=ROWS)
    def kernel(X: Tensor("f32", "B", "D"), Y: Tensor("f32", "B")):
        B, D = X.shape
        T.assume(D <= 256)
        T.grid(T.cdiv(B, ROWS))
        r0 = T.program_id(0) * ROWS
        spec = T.rows_layout((ROWS, 256), ROWS)
        row = T.reduced(spec, 1)
        inside = T.iota(spec, 1) < D
        x = X.load((r0, 0), spec, guard=True)
        if fn == "min":
            y = T.reduce(T.where(inside, x, np.inf), "min", 1, row)
        else:
            y = T.argmax(T.where(inside, x, -np.inf), 1, row)
        Y.store((r0,), y, guard=True)
    return kernel


@T.kernel(waves=ROWS)
def cumsum(X: Tensor("f32", "B", 64), Y: Tensor("f32", "B", 64)):
    B = X.shape[0]
    T.grid(T.cdiv(B, ROWS))
    r0 = T.program_id(0) * ROWS
    spec = T.rows_layout((ROWS, 64), ROWS)
    Y.store((r0, 0), T.cumsum(X.load((r0, 0), spec, guard=True), 1), guard=True)


@T.kernel(waves=1)
def mse(P: Tensor("f32", "N", 64), Q: Tensor("f32", "N", 64), L: Tensor("f32", "N", 1)):
    """Per-block partial of mean((p - q)^2): each row's squared error over N * 64, the 1/(N*64)
    from the sizes (the host sums the N partials, as a split reduction would)."""
    N = P.shape[0]
    T.grid(T.cdiv(N, 4))
    r0 = T.program_id(0) * 4
    spec = T.rows_layout((4, 64), 1)
    d = P.load((r0, 0), spec, guard=True) - Q.load((r0, 0), spec, guard=True)
    partial = T.reduce(d * d, "sum", 1, T.reduced(spec, 1)) / (N * 64)
    L.store((r0, 0), partial, axes=(0,), guard=True)


def _road(kernel, inputs: dict, out: str):
    assert argus.verify(kernel).ok
    compiled = argus.compile(kernel)
    arrays = {k: v.copy() for k, v in inputs.items()}
    compiled.run(**arrays, check="strict")
    interpreted = run(kernel.ir, inputs).outputs[out]
    return arrays[out], interpreted


@pytest.mark.parametrize("rows,d", [(5, 511), (8, 64), (3, 1)])
def test_softmax(rows, d):
    x = np.random.default_rng(d).standard_normal((rows, d)).astype(np.float32) * 4
    y, interpreted = _road(softmax, {"X": x, "Y": np.zeros_like(x)}, "Y")
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(interpreted, y, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("rows,d", [(6, 255), (4, 256)])
def test_rms_norm(rows, d):
    x = np.random.default_rng(d).standard_normal((rows, d)).astype(np.float32)
    inputs = {"X": x, "Y": np.zeros_like(x)}
    y, interpreted = _road(rms_norm, inputs, "Y")
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(interpreted, y, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("fn", ["min", "argmax"])
@pytest.mark.parametrize("rows,d", [(7, 200), (4, 256)])
def test_min_and_argmax_rows(fn, rows, d):
    x = np.random.default_rng(d).integers(-50, 50, (rows, d)).astype(np.float32)
    y, interpreted = _road(row_reduction(fn), {"X": x, "Y": np.zeros(rows, np.float32)}, "Y")
    want = x.min(1) if fn == "min" else x.argmax(1).astype(np.float32)
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(interpreted, y)


def test_cumsum_rows():
    x = np.random.default_rng(0).standard_normal((9, 64)).astype(np.float32)
    y, interpreted = _road(cumsum, {"X": x, "Y": np.zeros_like(x)}, "Y")
    np.testing.assert_allclose(y, np.cumsum(x.astype(np.float64), 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(interpreted, y)


def test_mse_loss():
    p, q = (np.random.default_rng(s).standard_normal((13, 64)).astype(np.float32)
            for s in (1, 2))
    loss, interpreted = _road(mse, {"P": p, "Q": q, "L": np.zeros((13, 1), np.float32)}, "L")
    np.testing.assert_allclose(loss.sum(), ((p - q) ** 2).mean(), rtol=1e-5)
    np.testing.assert_allclose(interpreted, loss, rtol=1e-6)

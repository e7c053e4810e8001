"""Elementwise ops of issue 22 through the whole road: comparisons to masks, T.where, T.iota,
tiles times sizes, rsqrt/sqrt/abs/floor/trunc, casts between f32, i32, f16 and bf16, and the
functions built from them (exp, log, log1p, sigmoid, tanh, softplus, erf, gelu). Each kernel is
verified, compiled and run on the strict emulator; the interpreter must agree with the emulator
bit for bit (both compute the same f32 steps) and numpy within the functions' stated bounds,
on data with NaN, infinities, signed zeros and denormals mixed in."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import argus
import argus.lang as T
from argus.absint.concrete import NUMPY_DTYPES, run
from argus.lang import Tensor

SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1.0, -1.0, 0.5],
                    np.float32)
ERF = np.vectorize(math.erf)


def elementwise(fn, out_dtype: str = "f32", cols: int = 64, waves: int = 1):
    """Y = fn(X) over rows of `cols`, any number of rows (guarded), rows split over waves."""
    rows = 4 * waves

    @T.kernel(waves=waves)
    def kernel(X: Tensor("f32", "R", cols), Y: Tensor(out_dtype, "R", cols)):
        R = X.shape[0]
        T.grid(T.cdiv(R, rows))
        r0 = T.program_id(0) * rows
        spec = T.rows_layout((rows, cols), waves)
        x = X.load((r0, 0), spec, guard=True)
        Y.store((r0, 0), fn(x, R), guard=True)

    return kernel


def data(seed: int, rows: int, cols: int = 64, scale: float = 3.0, specials: bool = True):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    if specials:
        where = rng.random(x.shape) < 0.1
        x[where] = rng.choice(SPECIALS, int(where.sum()))
    return x


def through_the_road(kernel, x: np.ndarray, out_dtype: str = "f32"):
    """(emulated, interpreted) outputs; the kernel is proved first."""
    assert argus.verify(kernel).ok
    compiled = argus.compile(kernel)
    y = np.zeros(x.shape, NUMPY_DTYPES[out_dtype])
    compiled.run(x, y, check="strict")
    interpreted = run(kernel.ir, {"X": x, "Y": np.zeros(x.shape, np.float32)}).outputs["Y"]
    return y, interpreted


def _close(got, want, atol, rtol=0.0):
    want = np.asarray(want, np.float64)
    finite = np.isfinite(want)
    assert (np.isnan(got) == np.isnan(want)).all(), "NaN positions differ"
    assert (got[~finite & ~np.isnan(want)] == want[~finite & ~np.isnan(want)]).all()
    err = np.abs(got[finite].astype(np.float64) - want[finite])
    assert (err <= atol + rtol * np.abs(want[finite])).all(), float(err.max())


FUNCTIONS = {
    # name: (dsl, numpy reference in float64, absolute bound, relative bound, input scale)
    "rsqrt": (lambda x, R: T.rsqrt(x), lambda a: 1 / np.sqrt(a), 0, 2e-7, 3),
    "sqrt": (lambda x, R: T.sqrt(x), np.sqrt, 0, 2e-7, 3),
    "abs": (lambda x, R: abs(x), np.abs, 0, 0, 3),
    "floor": (lambda x, R: T.floor(x), np.floor, 0, 0, 3),
    "trunc": (lambda x, R: T.trunc(x), np.trunc, 0, 0, 3),
    "exp": (lambda x, R: T.exp(x), np.exp, 0, 5e-7, 3),
    "log": (lambda x, R: T.log(x), np.log, 3e-7, 3e-7, 3),
    "log1p": (lambda x, R: T.log1p(x), np.log1p, 3e-7, 5e-7, 0.5),
    "sigmoid": (lambda x, R: T.sigmoid(x), lambda a: 1 / (1 + np.exp(-a)), 3e-7, 0, 3),
    "tanh": (lambda x, R: T.tanh(x), np.tanh, 6e-7, 0, 3),
    "softplus": (lambda x, R: T.softplus(x), lambda a: np.where(a > 20, a, np.log1p(np.exp(a))),
                 3e-7, 3e-7, 10),
    "erf": (lambda x, R: T.erf(x), ERF, 5e-7, 0, 2),
    "gelu": (lambda x, R: T.gelu(x), lambda a: a * 0.5 * (1 + ERF(a / np.sqrt(2))), 5e-7, 5e-7,
             3),
    "gelu_tanh": (lambda x, R: T.gelu(x, approximate="tanh"),
                  lambda a: 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a**3))),
                  1e-6, 1e-6, 3),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_functions_match_numpy_and_the_interpreter(name):
    dsl, reference, atol, rtol, scale = FUNCTIONS[name]
    kernel = elementwise(dsl)
    x = data(len(name), 7, scale=scale, specials=False)
    y, interpreted = through_the_road(kernel, x)
    np.testing.assert_array_equal(y, interpreted)
    with np.errstate(all="ignore"):
        _close(y, reference(x.astype(np.float64)), atol, rtol)


@pytest.mark.parametrize("name", ["rsqrt", "sqrt", "abs", "floor", "exp", "sigmoid", "tanh"])
def test_special_values_agree_between_emulator_and_interpreter(name):
    kernel = elementwise(FUNCTIONS[name][0])
    x = data(1, 5)
    y, interpreted = through_the_road(kernel, x)
    np.testing.assert_array_equal(y, interpreted)


COMPARISONS = {"lt": (lambda a, b: a < b, np.less), "le": (lambda a, b: a <= b, np.less_equal),
               "gt": (lambda a, b: a > b, np.greater),
               "ge": (lambda a, b: a >= b, np.greater_equal),
               "eq": (lambda a, b: a.eq(b), np.equal), "ne": (lambda a, b: a.ne(b), np.not_equal)}


@pytest.mark.parametrize("name", sorted(COMPARISONS))
def test_comparisons_give_masks_with_numpy_nan_rules(name):
    dsl, reference = COMPARISONS[name]
    kernel = elementwise(lambda x, R: dsl(x, x * 0.0 + 0.5) + dsl(x, x))
    x = data(2, 6)
    x[0, :4] = 0.5                          # ties
    y, interpreted = through_the_road(kernel, x)
    want = reference(x, np.float32(0.5)).astype(np.float32) + reference(x, x)
    with np.errstate(all="ignore"):
        want = reference(x, x * np.float32(0.0) + np.float32(0.5)).astype(np.float32) \
            + reference(x, x)
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(interpreted, want)


def test_where_selects_with_numbers_and_tiles():
    kernel = elementwise(lambda x, R: T.where(x > 0.0, x, x * 0.25) + T.where(x.ne(x), 7.0, 0.0))
    x = data(3, 9)
    y, interpreted = through_the_road(kernel, x)
    want = np.where(x > 0, x, x * np.float32(0.25)) + np.where(np.isnan(x), 7, 0)
    np.testing.assert_array_equal(y, want.astype(np.float32))
    np.testing.assert_array_equal(interpreted, y)


def test_iota_and_tiles_times_sizes():
    """Global column indices, the row count as a tile, and the mean's 1/(R*C) from sizes."""
    kernel = elementwise(lambda x, R: T.iota(x.spec, 1, start=T.program_id(0) * 100)
                         + x * R + x / (R * 64))
    x = data(4, 11, specials=False)
    y, interpreted = through_the_road(kernel, x)
    rows = x.shape[0]
    want = ((np.arange(rows)[:, None] // 4) * 100 + np.arange(64)[None, :]).astype(np.float32) \
        + x * np.float32(rows) + x * (np.float32(1) / np.float32(rows * 64))
    np.testing.assert_allclose(y, want, rtol=1e-6)
    np.testing.assert_array_equal(interpreted, y)


@pytest.mark.parametrize("dtype", ["i32", "f16", "bf16", "fp8", "bf8"])
def test_casts_from_f32_and_back(dtype):
    there = elementwise(lambda x, R: x.to(dtype), dtype)
    x = data(5, 6, scale=1000.0, specials=False)
    y, interpreted = through_the_road(there, x, dtype)
    if dtype == "i32":
        np.testing.assert_array_equal(y, np.trunc(x).astype(np.int32))
    else:
        np.testing.assert_array_equal(y, x.astype(NUMPY_DTYPES[dtype]))
    np.testing.assert_array_equal(interpreted, y)
    back = elementwise(lambda x, R: x.to(dtype).to("f32") * 2.0)
    y, interpreted = through_the_road(back, x)
    np.testing.assert_array_equal(y, x.astype(NUMPY_DTYPES[dtype]).astype(np.float32) * 2)
    np.testing.assert_array_equal(interpreted, y)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**16), rows=st.integers(1, 13))
def test_a_fused_chain_agrees_at_odd_sizes(seed, rows):
    """A clamp-select-activation chain (NaN, infinities and denormals in the data) at any row
    count: emulator and interpreter bit for bit."""
    kernel = _CHAIN
    x = data(seed, rows)
    y, interpreted = through_the_road(kernel, x)
    np.testing.assert_array_equal(y, interpreted)


_CHAIN = elementwise(lambda x, R: T.where(abs(x) < 4.0, T.sigmoid(x) * x, T.rsqrt(abs(x) + 1.0)),
                     waves=2)


def test_sizes_on_either_side_of_a_tile():
    """`N * x`, `N - x`, `(N + 1) / x`, `N < x`: a size on the left builds the same tile ops."""
    kernel = elementwise(lambda x, R: R * x + (R + 1) / (abs(x) + 1.0) - (R - x)
                         + (R < x) + T.where(x > 0.0, R, 0.5))
    x = data(6, 5, specials=False)
    y, interpreted = through_the_road(kernel, x)
    r = np.float32(x.shape[0])
    want = (r * x + (r + 1) * (1 / (np.abs(x) + 1)) - (r - x) + (r < x)
            + np.where(x > 0, r, 0.5))
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(interpreted, y)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16), dtype=st.sampled_from(["fp8", "bf8"]),
       scale=st.sampled_from([0.003, 1.0, 300.0]))
def test_fnuz_round_trip_with_specials(seed, dtype, scale):
    """f32 -> fp8/bf8 -> f32 with NaN, infinities, denormals and out-of-range values: the strict
    emulator, the interpreter and ml_dtypes agree bit for bit (round to nearest even; NaN, ±inf
    and overflow all become the fnuz NaN, as ml_dtypes converts)."""
    kernel = _ROUND_TRIP[dtype]
    x = data(seed, 5, scale=scale)
    y, interpreted = through_the_road(kernel, x)
    with np.errstate(all="ignore"):
        want = x.astype(NUMPY_DTYPES[dtype]).astype(np.float32)
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(interpreted, y)


_ROUND_TRIP = {d: elementwise(lambda x, R, d=d: x.to(d).to("f32")) for d in ("fp8", "bf8")}


@pytest.mark.parametrize("dtype", ["fp8", "bf8"])
def test_fnuz_tensors_load_and_store(dtype):
    """An fp8/bf8 tensor read one byte per slot (the layout's slots are rows apart), widened,
    scaled and stored back as f32: emulator = interpreter = ml_dtypes."""
    kernel = _FNUZ_LOAD[dtype]
    raw = data(9, 7, scale=2.0).astype(NUMPY_DTYPES[dtype])
    y = np.zeros(raw.shape, np.float32)
    assert argus.verify(kernel).ok
    argus.compile(kernel).run(raw, y, check="strict")
    want = raw.astype(np.float32) * np.float32(2)
    np.testing.assert_array_equal(y, want)
    interpreted = run(kernel.ir, {"X": raw, "Y": np.zeros(raw.shape, np.float32)}).outputs["Y"]
    np.testing.assert_array_equal(interpreted, want)


def _fnuz_load(dtype: str):
    @T.kernel(waves=1)
    def kernel(X: Tensor(dtype, "R", 64), Y: Tensor("f32", "R", 64)):
        R = X.shape[0]
        T.grid(T.cdiv(R, 4))
        r0 = T.program_id(0) * 4
        x = X.load((r0, 0), T.rows_layout((4, 64), 1), guard=True)
        Y.store((r0, 0), x.to("f32") * 2.0, guard=True)
    return kernel


_FNUZ_LOAD = {d: _fnuz_load(d) for d in ("fp8", "bf8")}

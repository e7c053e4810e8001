"""Reductions the backend lowers beyond the MFMA fragments (issue 22 item 4): rows split over
waves by `T.rows_layout`, tiles every wave holds whole (each wave reduces its own copy), lanes
holding replicas of one element (a sum counts each element once). Each kernel is compiled and
run on the strict emulator against numpy and the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import argus
import argus.lang as T
from argus.absint.concrete import run
from argus.lang import Tensor, TileSpec

NUMPY = {"sum": np.sum, "max": np.max}


def row_reduce(fn: str, rows: int, cols: int, waves: int, vector: int = 1):
    @T.kernel(waves=waves)
    def kernel(X: Tensor("f32", "R", cols), Y: Tensor("f32", "R")):
        R = X.shape[0]
        T.assume((R % rows).eq(0))
        T.grid(R // rows)
        r0 = T.program_id(0) * rows
        spec = T.rows_layout((rows, cols), waves, vector)
        x = X.load((r0, 0), spec)
        Y.store((r0,), T.reduce(x, fn, 1, T.reduced(spec, 1)))
    return kernel


def emulate_and_interpret(kernel, x, out_shape):
    assert argus.verify(kernel).ok
    compiled = argus.compile(kernel)
    y = np.zeros(out_shape, np.float32)
    compiled.run(x, y, check="strict")
    interpreted = run(kernel.ir, {"X": x, "Y": np.zeros(out_shape, np.float32)}).outputs["Y"]
    return y, interpreted


@pytest.mark.parametrize("fn,rows,cols,waves,vector", [
    ("sum", 8, 256, 4, 4),      # 4 slots per lane, a 64-lane butterfly per row
    ("max", 8, 32, 2, 1),       # two rows per wave's 64 lanes
    ("sum", 4, 128, 4, 2),
    ("max", 16, 64, 4, 1),
])
def test_rows_over_waves_match_numpy(fn, rows, cols, waves, vector):
    kernel = row_reduce(fn, rows, cols, waves, vector)
    assert argus.verify(kernel).ok
    x = np.random.default_rng(rows + cols).standard_normal((3 * rows, cols)).astype(np.float32)
    y, interpreted = emulate_and_interpret(kernel, x, (3 * rows,))
    np.testing.assert_allclose(y, NUMPY[fn](x, axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, interpreted, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fn", ["sum", "max"])
@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_tile_every_wave_holds_whole(fn, replicas):
    """Every wave holds the whole (2, 32 // replicas) tile, each element on `replicas` lanes
    of a row's half: the reduction happens in every wave and counts each element once."""
    waves, cols = 4, 32 // replicas
    wave, lane, slot = T.thread_vars(waves, 1)
    spec = TileSpec((2, cols), T.ThreadLayout(waves, 1, (lane // 32, lane % cols)))

    @T.kernel(waves=waves)
    def kernel(X: Tensor("f32", 2, cols), Y: Tensor("f32", 2)):
        T.grid(1)
        x = X.load((0, 0), spec)
        Y.store((0,), T.reduce(x, fn, 1, T.reduced(spec, 1)))

    x = np.random.default_rng(replicas).standard_normal((2, cols)).astype(np.float32)
    y, interpreted = emulate_and_interpret(kernel, x, (2,))
    np.testing.assert_allclose(y, NUMPY[fn](x, axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, interpreted, rtol=1e-6, atol=1e-6)


def test_layout_helpers_are_exported():
    for name in ("ThreadLayout", "thread_vars", "AddressMap", "coord_vars", "rows_layout",
                 "LANES"):
        assert name in T.__all__ and hasattr(T, name)
    with pytest.raises(T.DSLError, match="whole rows"):
        T.rows_layout((6, 32), 4)


# ------------------------------------------------------------------ min, prod, argmax, scans

def row_op(make, rows: int, cols: int, waves: int, vector: int = 1, out_cols: int | None = None):
    """Y[r] (or Y[r, :]) = make(x, spec) over (rows, cols) tiles of rows split over waves."""
    out_rank = 1 if out_cols is None else 2

    @T.kernel(waves=waves)
    def kernel(X: Tensor("f32", "R", cols),
               Y: Tensor("f32", "R") if out_rank == 1 else Tensor("f32", "R", cols)):
        R = X.shape[0]
        T.assume((R % rows).eq(0))
        T.grid(R // rows)
        r0 = T.program_id(0) * rows
        spec = T.rows_layout((rows, cols), waves, vector)
        x = X.load((r0, 0), spec)
        Y.store((r0,) if out_rank == 1 else (r0, 0), make(x, spec))
    return kernel


def _special_rows(seed: int, rows: int, cols: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 5, (rows, cols)).astype(np.float32)   # many ties
    x[0, 3] = np.nan
    x[1, :] = np.nan
    x[2, 5] = np.inf
    x[3, 7] = -np.inf
    return x


def _nan_arg(x: np.ndarray, pick) -> np.ndarray:
    """torch's argmax/argmin: the first NaN if any, else the first extreme."""
    nan = np.isnan(x)
    return np.where(nan.any(1), nan.argmax(1), pick(np.where(nan, 0, x), 1)).astype(np.float32)


@pytest.mark.parametrize("fn", ["min", "prod"])
@pytest.mark.parametrize("rows,cols,waves,vector", [(8, 64, 2, 1), (4, 256, 4, 4)])
def test_min_and_prod_reductions(fn, rows, cols, waves, vector):
    kernel = row_op(lambda x, spec: T.reduce(x, fn, 1, T.reduced(spec, 1)), rows, cols, waves,
                    vector)
    rng = np.random.default_rng(cols)
    x = (1 + 0.01 * rng.standard_normal((2 * rows, cols))).astype(np.float32)
    x[0, 1] = np.nan                            # min ignores NaN (IEEE minNum), prod keeps it
    y, interpreted = emulate_and_interpret(kernel, x, (2 * rows,))
    want = np.fmin.reduce(x, axis=1) if fn == "min" else np.prod(x.astype(np.float64), axis=1)
    np.testing.assert_allclose(y, want, rtol=3e-6)
    np.testing.assert_allclose(interpreted, y, rtol=3e-6)


@pytest.mark.parametrize("fn,pick", [("argmax", np.argmax), ("argmin", np.argmin)])
@pytest.mark.parametrize("rows,cols,waves", [(4, 64, 1), (8, 32, 2), (8, 128, 4)])
def test_argmax_argmin_lowest_index_and_nan_as_torch(fn, pick, rows, cols, waves):
    dsl = getattr(T, fn)
    kernel = row_op(lambda x, spec: dsl(x, 1, T.reduced(spec, 1)), rows, cols, waves)
    x = _special_rows(cols, rows, cols)
    y, interpreted = emulate_and_interpret(kernel, x, (rows,))
    np.testing.assert_array_equal(y, _nan_arg(x, pick))
    np.testing.assert_array_equal(interpreted, y)


def _scan_reference(x, fn, reverse, exclusive):
    a = x[:, ::-1] if reverse else x
    acc = np.cumsum(a, 1, dtype=np.float64) if fn == "sum" else np.cumprod(a, 1,
                                                                            dtype=np.float64)
    if exclusive:
        acc = np.concatenate([np.full((x.shape[0], 1), 0.0 if fn == "sum" else 1.0),
                              acc[:, :-1]], 1)
    return acc[:, ::-1] if reverse else acc


@pytest.mark.parametrize("fn", ["sum", "prod"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("rows,cols,waves", [(4, 64, 1), (8, 16, 2)])
def test_scans(fn, reverse, exclusive, rows, cols, waves):
    kernel = row_op(lambda x, spec: T.scan(x, fn, 1, reverse=reverse, exclusive=exclusive),
                    rows, cols, waves, out_cols=cols)
    rng = np.random.default_rng(cols + reverse + 2 * exclusive)
    x = (rng.standard_normal((2 * rows, cols)) if fn == "sum"
         else 1 + 0.05 * rng.standard_normal((2 * rows, cols))).astype(np.float32)
    y, interpreted = emulate_and_interpret(kernel, x, (2 * rows, cols))
    np.testing.assert_allclose(y, _scan_reference(x, fn, reverse, exclusive), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(interpreted, y)


def test_column_reduction_through_a_transposed_load():
    """Reducing along tensor axis 0: load the tile transposed (axes=(1, 0)) so each wave holds
    whole columns, then reduce along the tile's rows."""
    waves = 2

    @T.kernel(waves=waves)
    def column_sum(X: Tensor("f32", 64, "C"), Y: Tensor("f32", "C")):
        C = X.shape[1]
        T.grid(T.cdiv(C, 64))
        c0 = T.program_id(0) * 64
        spec = T.rows_layout((64, 64), waves)
        x = X.load((0, c0), spec, axes=(1, 0), guard=True)
        Y.store((c0,), T.reduce(x, "sum", 1, T.reduced(spec, 1)), guard=True)

    x = np.random.default_rng(9).standard_normal((64, 100)).astype(np.float32)
    y, interpreted = emulate_and_interpret(column_sum, x, (100,))
    np.testing.assert_allclose(y, x.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(interpreted, y, rtol=1e-5, atol=1e-6)


@settings(max_examples=10, deadline=None)
@given(fn=st.sampled_from(["max", "min", "argmax", "argmin"]),
       shape=st.sampled_from([(4, 64, 1), (8, 32, 2), (8, 128, 4), (4, 16, 1)]),
       seed=st.integers(0, 2**16))
def test_extremes_agree_bit_for_bit_with_nan_and_ties(fn, shape, seed):
    rows, cols, waves = shape
    make = ((lambda x, spec: T.reduce(x, fn, 1, T.reduced(spec, 1))) if fn in ("max", "min")
            else (lambda x, spec: getattr(T, fn)(x, 1, T.reduced(spec, 1))))
    kernel = _EXTREMES.setdefault((fn, shape), row_op(make, rows, cols, waves))
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, (2 * rows, cols)).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = np.nan
    x[rng.random(x.shape) < 0.05] = np.inf
    y, interpreted = emulate_and_interpret(kernel, x, (2 * rows,))
    np.testing.assert_array_equal(y, interpreted)
    if fn in ("argmax", "argmin"):
        np.testing.assert_array_equal(y, _nan_arg(x, np.argmax if fn == "argmax" else
                                                  np.argmin))
    else:
        np.testing.assert_array_equal(y, (np.fmax if fn == "max" else np.fmin).reduce(x, 1))


_EXTREMES: dict = {}

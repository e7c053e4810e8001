"""Reductions and scans along an axis whose lines span several waves (issue 22): `T.reduce`,
`T.argmax`/`T.argmin` and `T.cumsum`/`T.cumprod` go through LDS (`argus.lang.across`) with no
layout built by hand. Each kernel is proved, run by the reference interpreter and compiled
and run on the strict emulator, all against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import argus
import argus.lang as T
from argus.absint.concrete import run
from argus.ir import ops as O
from argus.lang import Tensor, TileSpec
from argus.lang.across import held_in_wave, spans_waves

WAVES = 4


def row_kernel(make, rows: int, cols: int, vector: int, out_cols: int | None = None,
               waves: int = WAVES):
    """Y[r] (or Y[r, :]) = make(x, spec) over (rows, cols) tiles in `T.copy_layout`, whose
    rows are spread over all the waves."""
    @T.kernel(waves=waves)
    def kernel(X: Tensor("f32", "R", cols),
               Y: Tensor("f32", "R") if out_cols is None else Tensor("f32", "R", cols)):
        R = X.shape[0]
        T.assume((R % rows).eq(0))
        T.grid(R // rows)
        r0 = T.program_id(0) * rows
        spec = T.copy_layout((rows, cols), waves, vector)
        x = X.load((r0, 0), spec)
        Y.store((r0,) if out_cols is None else (r0, 0), make(x, spec))
    return kernel


def proved_interpreted_emulated(kernel, x, out_shape):
    """(emulator output, interpreter output) after checking the proof and that the cross-wave
    path (LDS and barriers) was taken."""
    report = argus.verify(kernel)
    assert report.ok, report
    ops = list(O.walk(kernel.ir.body))
    assert any(isinstance(op, O.Barrier) for op in ops)
    interpreted = run(kernel.ir, {"X": x, "Y": np.zeros(out_shape, np.float32)}).outputs["Y"]
    y = np.zeros(out_shape, np.float32)
    argus.compile(kernel).run(x, y, check="strict")
    return y, interpreted


def _special(rng, rows: int, cols: int) -> np.ndarray:
    """Small integers (many ties), a NaN, a row of NaN, infinities."""
    x = rng.integers(-4, 5, (rows, cols)).astype(np.float32)
    x[0, cols // 2 + 3] = np.nan
    x[1, :] = np.nan
    x[2, cols - 5] = np.inf
    x[3, cols // 3] = -np.inf
    return x


REDUCE = {
    "sum": lambda x: np.sum(x.astype(np.float64), axis=1),
    "max": lambda x: np.fmax.reduce(x, axis=1),
    "min": lambda x: np.fmin.reduce(x, axis=1),
    "prod": lambda x: np.prod(x.astype(np.float64), axis=1),
}


@pytest.mark.parametrize("fn,rows,cols,vector", [
    ("sum", 4, 1024, 4),       # a row is 256 lanes x 4 slots: every wave holds a quarter
    ("max", 2, 256, 1),        # a row is one slot over the 4 waves
    ("min", 8, 512, 4),        # each row in two waves, two rows per wave pair
    ("prod", 4, 256, 1),
])
def test_row_reductions_across_waves(fn, rows, cols, vector):
    kernel = row_kernel(lambda x, spec: T.reduce(x, fn, 1, T.reduced(spec, 1)), rows, cols,
                        vector)
    assert spans_waves(T.copy_layout((rows, cols), WAVES, vector), 1)
    rng = np.random.default_rng(cols + rows)
    x = (1 + 0.01 * rng.standard_normal((2 * rows, cols)) if fn == "prod"
         else rng.standard_normal((2 * rows, cols))).astype(np.float32)
    if fn in ("max", "min"):
        x[0, 7] = np.nan                      # ignored (IEEE maxNum/minNum)
        x[1, 9] = np.inf if fn == "max" else -np.inf
    if fn == "prod":
        x[rows, 11] = np.nan                  # a product keeps it
    y, interpreted = proved_interpreted_emulated(kernel, x, (2 * rows,))
    np.testing.assert_allclose(y, REDUCE[fn](x), rtol=3e-6, atol=2e-5)
    np.testing.assert_allclose(interpreted, y, rtol=3e-6, atol=2e-5)


def test_waves_holding_a_block_of_every_row_send_only_partials():
    """Where each wave holds one block of every row (1024-wide rows in `T.copy_layout`), the
    waves reduce their blocks in place and only the (rows, waves) partials go through LDS."""
    rows, cols = 4, 1024
    kernel = row_kernel(lambda x, spec: T.reduce(x, "sum", 1, T.reduced(spec, 1)), rows, cols, 4)
    sizes = [op.result.type.size for op in O.walk(kernel.ir.body)
             if isinstance(op, O.LdsAlloc)]
    assert sizes and max(sizes) == rows * WAVES
    x = np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)
    y, interpreted = proved_interpreted_emulated(kernel, x, (rows,))
    np.testing.assert_allclose(y, x.astype(np.float64).sum(1), rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(interpreted, y, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("reverse", [False, True])
def test_scans_in_place_send_only_chunk_totals(reverse):
    """Rows laid out one element per lane (`T.copy_layout(..., vector=1)`) put every 64
    elements on one wave's lanes: the chunks are scanned in place and only their totals and
    offsets go through LDS."""
    rows, cols = 2, 1024
    kernel = row_kernel(lambda x, spec: T.cumsum(x, 1, reverse=reverse), rows, cols, 1,
                        out_cols=cols)
    sizes = [op.result.type.size for op in O.walk(kernel.ir.body)
             if isinstance(op, O.LdsAlloc)]
    assert sizes and max(sizes) == rows * cols // 64
    x = np.random.default_rng(4).standard_normal((rows, cols)).astype(np.float32)
    y, interpreted = proved_interpreted_emulated(kernel, x, x.shape)
    np.testing.assert_allclose(y, _scan_reference(x, "sum", reverse, False), rtol=2e-5,
                               atol=1e-4)
    np.testing.assert_allclose(interpreted, y, rtol=1e-5, atol=1e-5)


def _nan_arg(x: np.ndarray, pick) -> np.ndarray:
    """torch's argmax/argmin: the first NaN if any, else the first extreme."""
    nan = np.isnan(x)
    return np.where(nan.any(1), nan.argmax(1), pick(np.where(nan, 0, x), 1)).astype(np.float32)


@pytest.mark.parametrize("fn,pick", [("argmax", np.argmax), ("argmin", np.argmin)])
def test_argmax_argmin_across_waves_lowest_index(fn, pick):
    rows, cols = 4, 512
    dsl = getattr(T, fn)
    kernel = row_kernel(lambda x, spec: dsl(x, 1, T.reduced(spec, 1)), rows, cols, 2)
    x = _special(np.random.default_rng(5), 2 * rows, cols)
    y, interpreted = proved_interpreted_emulated(kernel, x, (2 * rows,))
    np.testing.assert_array_equal(y, _nan_arg(x, pick))
    np.testing.assert_array_equal(interpreted, y)


def _scan_reference(x, fn, reverse, exclusive):
    a = x[:, ::-1] if reverse else x
    acc = (np.cumsum(a, 1, dtype=np.float64) if fn == "sum"
           else np.cumprod(a, 1, dtype=np.float64))
    if exclusive:
        acc = np.concatenate([np.full((x.shape[0], 1), 0.0 if fn == "sum" else 1.0),
                              acc[:, :-1]], 1)
    return acc[:, ::-1] if reverse else acc


@pytest.mark.parametrize("fn,rows,cols,vector,reverse,exclusive", [
    ("sum", 2, 128, 1, False, False),     # half a wave per row, rows across waves
    ("sum", 4, 256, 1, True, False),
    ("sum", 2, 1024, 4, False, True),     # 16 chunks of 64 over 4 waves
    ("prod", 2, 256, 1, True, True),
    ("prod", 2, 1024, 4, False, False),
])
def test_scans_across_waves(fn, rows, cols, vector, reverse, exclusive):
    kernel = row_kernel(lambda x, spec: T.scan(x, fn, 1, reverse=reverse,
                                               exclusive=exclusive),
                        rows, cols, vector, out_cols=cols)
    rng = np.random.default_rng(cols + reverse + 2 * exclusive)
    x = (rng.standard_normal((2 * rows, cols)) if fn == "sum"
         else 1 + 0.002 * rng.standard_normal((2 * rows, cols))).astype(np.float32)
    x[1, cols // 2] = np.inf                  # an infinity reaches every later prefix
    y, interpreted = proved_interpreted_emulated(kernel, x, (2 * rows, cols))
    np.testing.assert_allclose(y, _scan_reference(x, fn, reverse, exclusive), rtol=2e-5,
                               atol=1e-4)
    # the two sum the chunk totals in different orders (numpy's vs the butterfly's)
    np.testing.assert_allclose(interpreted, y, rtol=1e-5, atol=1e-5)


def _hand_kernel(make, shape, coords, out_cols):
    """A kernel over one (rows, cols) tile in a layout written with `T.ThreadLayout`."""
    rows, cols = shape
    wave, lane, slot = T.thread_vars(WAVES, rows * cols // (WAVES * 64))
    spec = TileSpec(shape, T.ThreadLayout(WAVES, rows * cols // (WAVES * 64),
                                          coords(wave, lane, slot)))

    @T.kernel(waves=WAVES)
    def kernel(X: Tensor("f32", rows, cols),
               Y: Tensor("f32", rows) if out_cols is None else Tensor("f32", rows, cols)):
        T.grid(1)
        x = X.load((0, 0), spec)
        Y.store((0,) if out_cols is None else (0, 0), make(x, spec))
    return kernel


#: extents that are not powers of two: 3 chunks of 64 per row (a row over the 4 waves and 3
#: slots; or one wave's lanes, a chunk per slot), and 3 rows (one per slot, scanned in place)
ODD = {
    "3 chunks": ((4, 192), lambda wave, lane, slot: (lane // 16,
                                                     slot * 64 + wave * 16 + lane % 16)),
    "3 chunks in a wave": ((4, 192), lambda wave, lane, slot: (wave, slot * 64 + lane)),
    "3 rows": ((3, 256), lambda wave, lane, slot: (slot, wave * 64 + lane)),
}


@pytest.mark.parametrize("layout,op", [
    (layout, op) for layout in ODD for op in ("sum", "max", "cumsum", "rcumprod")
    if not (layout == "3 chunks in a wave" and op in ("sum", "max"))])  # that one is in-wave
def test_extents_that_are_not_powers_of_two(layout, op):
    shape, coords = ODD[layout]
    rows, cols = shape
    make = {
        "sum": lambda x, spec: T.reduce(x, "sum", 1, T.reduced(spec, 1)),
        "max": lambda x, spec: T.reduce(x, "max", 1, T.reduced(spec, 1)),
        "cumsum": lambda x, spec: T.cumsum(x, 1, exclusive=True),
        "rcumprod": lambda x, spec: T.cumprod(x, 1, reverse=True),
    }[op]
    scan = op in ("cumsum", "rcumprod")
    kernel = _hand_kernel(make, shape, coords, cols if scan else None)
    rng = np.random.default_rng(rows * cols)
    x = (1 + 0.002 * rng.standard_normal(shape) if op == "rcumprod"
         else rng.standard_normal(shape)).astype(np.float32)
    y, interpreted = proved_interpreted_emulated(kernel, x, shape if scan else (rows,))
    want = {"sum": lambda: x.astype(np.float64).sum(1), "max": lambda: x.max(1),
            "cumsum": lambda: _scan_reference(x, "sum", False, True),
            "rcumprod": lambda: _scan_reference(x, "prod", True, False)}[op]()
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=1e-4)
    np.testing.assert_allclose(interpreted, y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("vector", [4, 2])          # partials in place / the tile staged
@pytest.mark.parametrize("shifted", [False, True])
def test_tags_cross_the_waves_and_a_wrong_row_is_refuted(vector, shifted):
    """The row tag survives the LDS steps (the column tag dropped), so the store's assertion
    is proved, and refuted with a confirmed witness when Y's rows are shifted by one."""
    rows, cols = 4, 512 * vector // 2

    @T.kernel(waves=WAVES)
    def kernel(X: Tensor("f32", "R", cols), Y: Tensor("f32", "R")):
        R = X.shape[0]
        T.assume((R % rows).eq(0))
        T.grid(R // rows)
        T.tag(X, lambda r, c: {"row": r, "col": c})
        T.tag(Y, lambda r: {"row": r + 1 if shifted else r})
        r0 = T.program_id(0) * rows
        spec = T.copy_layout((rows, cols), WAVES, vector)
        x = X.load((r0, 0), spec)
        Y.store((r0,), T.reduce(x, "sum", 1, T.reduced(spec, 1), drop=("col",)))
        T.tag_assert(lambda V, D: V.row.eq(D.row), "each row sum lands in its row")

    report = argus.verify(kernel)
    assert report.ok is not shifted
    if shifted:
        [refuted] = report.refuted
        assert refuted.kind == "tag-assertion" and refuted.counterexample.confirmed


def test_broadcast_back_across_waves():
    """Row means of 1024-wide rows kept one row per wave, spread back over every wave's
    part of the rows (through LDS, as no wave holds all the means)."""
    rows, cols = 4, 1024
    wave, lane, slot = T.thread_vars(WAVES, 1)
    per_wave = TileSpec((rows,), T.ThreadLayout(WAVES, 1, (wave,)))

    def centre(x, spec):
        mean = T.reduce(x, "sum", 1, per_wave) * (1.0 / cols)
        return x - T.broadcast(mean, 1, spec)

    kernel = row_kernel(centre, rows, cols, 4, out_cols=cols)
    assert not held_in_wave(per_wave, 1, T.copy_layout((rows, cols), WAVES, 4))
    x = np.random.default_rng(2).standard_normal((2 * rows, cols)).astype(np.float32) + 3
    y, interpreted = proved_interpreted_emulated(kernel, x, x.shape)
    np.testing.assert_allclose(y, x - x.mean(1, keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(interpreted, y, rtol=1e-6, atol=1e-6)


def test_a_layout_is_built_from_argus_lang_alone():
    """Everything a hand-built layout needs comes from `argus.lang`: the thread and coordinate
    variables, the layout and address-map types, the expression helpers and CuTe layouts."""
    for name in ("ThreadLayout", "TileSpec", "thread_vars", "AddressMap", "coord_vars", "LANES",
                 "And", "Or", "Not", "ite", "min_", "max_", "Layout", "Swizzle"):
        assert name in T.__all__ and hasattr(T, name)
    wave, lane, slot = T.thread_vars(WAVES, 1)
    flip = T.ite(T.And(wave < 2, lane >= 0), wave * 64 + lane, (3 - wave % 2) * 64 + lane)
    spec = TileSpec((1, 256), T.ThreadLayout(WAVES, 1, (0, T.min_(flip, 255))))
    c0, c1 = T.coord_vars((1, 256))
    assert T.AddressMap((1, 256), c1).shape == (1, 256)
    assert spans_waves(spec, 1)
    table = spec.layout.table()[1]
    assert sorted(table.ravel().tolist()) == list(range(256))


def test_scan_over_the_slots_of_one_wave():
    """A 256-long row in one wave, 4 slots per lane (refused before: the axis is not lane %
    n), now scans through LDS like any other layout."""
    kernel = row_kernel(lambda x, spec: T.cumsum(x, 1), 2, 256, 4, out_cols=256, waves=1)
    x = np.random.default_rng(9).standard_normal((4, 256)).astype(np.float32)
    y, interpreted = proved_interpreted_emulated(kernel, x, (4, 256))
    np.testing.assert_allclose(y, np.cumsum(x, 1), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(interpreted, y, rtol=1e-5, atol=1e-5)


def test_the_refused_split_row_now_compiles():
    """The row whose halves live in two waves (refused before with "the reduced axis spans
    several waves") is summed whole through LDS."""
    waves = 2
    wave, lane, slot = T.thread_vars(waves, 1)
    spec = TileSpec((1, 128), T.ThreadLayout(waves, 1, (0, wave * 64 + lane)))

    @T.kernel(waves=waves)
    def kernel(X: Tensor("f32", 1, 128), Y: Tensor("f32", 1)):
        T.grid(1)
        x = X.load((0, 0), spec)
        Y.store((0,), T.reduce(x, "sum", 1, T.reduced(spec, 1)))

    x = np.random.default_rng(3).standard_normal((1, 128)).astype(np.float32)
    y, interpreted = proved_interpreted_emulated(kernel, x, (1,))
    np.testing.assert_allclose(y, x.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(interpreted, y, rtol=1e-6)


_KERNELS: dict = {}


def _checked(key, build):
    """A kernel built and proved once per key (hypothesis draws data, not kernels)."""
    if key not in _KERNELS:
        kernel = build()
        report = argus.verify(kernel)
        assert report.ok, report
        _KERNELS[key] = kernel
    return _KERNELS[key]


@settings(max_examples=6, deadline=None)
@given(fn=st.sampled_from(["max", "min", "argmax", "argmin"]),
       layout=st.sampled_from([(4, 1024, 4), (4, 512, 2)]),  # blocks in place / staged
       seed=st.integers(0, 2**16))
def test_extremes_across_waves_bit_for_bit_with_nan_inf_denormals_and_ties(fn, layout, seed):
    rows, cols, vector = layout
    make = ((lambda x, spec: T.reduce(x, fn, 1, T.reduced(spec, 1))) if fn in ("max", "min")
            else (lambda x, spec: getattr(T, fn)(x, 1, T.reduced(spec, 1))))
    kernel = _checked((fn, layout), lambda: row_kernel(make, rows, cols, vector))
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, (rows, cols)).astype(np.float32)
    x[rng.random(x.shape) < 0.01] = np.nan
    x[rng.random(x.shape) < 0.01] = np.inf
    x[rng.random(x.shape) < 0.01] = -np.inf
    x[rng.random(x.shape) < 0.01] = np.float32(1e-40)       # denormal
    interpreted = run(kernel.ir, {"X": x, "Y": np.zeros(rows, np.float32)}).outputs["Y"]
    y = np.zeros(rows, np.float32)
    argus.compile(kernel).run(x, y, check="strict")
    np.testing.assert_array_equal(y, interpreted)
    if fn in ("argmax", "argmin"):
        np.testing.assert_array_equal(y, _nan_arg(x, np.argmax if fn == "argmax"
                                                  else np.argmin))
    else:
        np.testing.assert_array_equal(y, (np.fmax if fn == "max" else np.fmin).reduce(x, 1))


@pytest.mark.parametrize("op", ["sum", "argmax", "cumsum"])
def test_along_axis_0(op):
    """Columns of a (512, 4) tile, each spread over every wave and slot."""
    rows, cols = 512, 4
    spec = T.copy_layout((rows, cols), WAVES, 4)
    scan = op == "cumsum"

    @T.kernel(waves=WAVES)
    def kernel(X: Tensor("f32", rows, cols),
               Y: Tensor("f32", rows, cols) if scan else Tensor("f32", cols)):
        T.grid(1)
        x = X.load((0, 0), spec)
        if op == "sum":
            Y.store((0,), T.reduce(x, "sum", 0, T.reduced(spec, 0)))
        elif op == "argmax":
            Y.store((0,), T.argmax(x, 0, T.reduced(spec, 0)))
        else:
            Y.store((0, 0), T.cumsum(x, 0))

    rng = np.random.default_rng(11)
    x = (rng.integers(-3, 4, (rows, cols)) if op == "argmax"
         else rng.standard_normal((rows, cols))).astype(np.float32)
    y, interpreted = proved_interpreted_emulated(kernel, x, (rows, cols) if scan else (cols,))
    want = {"sum": lambda: x.astype(np.float64).sum(0),
            "argmax": lambda: x.argmax(0).astype(np.float32),
            "cumsum": lambda: np.cumsum(x.astype(np.float64), 0)}[op]()
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=1e-4)
    np.testing.assert_allclose(interpreted, y, rtol=1e-5, atol=1e-5)


def test_a_vector_over_every_wave_reduces_to_a_scalar():
    """A 1024-element vector, a quarter in each wave, summed to a rank-0 tile and spread
    back into a one-element tile stored by one thread."""
    wave, lane, slot = T.thread_vars(WAVES, 4)
    spec = TileSpec((1024,), T.ThreadLayout(WAVES, 4, (slot * 256 + wave * 64 + lane,)))
    one = TileSpec((1,), T.ThreadLayout(WAVES, 1, (0 * lane,)))

    @T.kernel(waves=WAVES)
    def kernel(X: Tensor("f32", 1024), Y: Tensor("f32", 1)):
        T.grid(1)
        total = T.reduce(X.load((0,), spec), "sum", 0, T.reduced(spec, 0))
        with T.lanes(lambda wave, lane: (wave * 64 + lane).eq(0)):
            Y.store((0,), T.broadcast(total, 0, one))

    x = np.random.default_rng(8).standard_normal(1024).astype(np.float32)
    y, interpreted = proved_interpreted_emulated(kernel, x, (1,))
    np.testing.assert_allclose(y, [x.astype(np.float64).sum()], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(interpreted, y, rtol=1e-6, atol=1e-5)


def test_inside_a_lanes_block_it_is_refused_at_the_line():
    """The LDS steps need barriers every wave reaches, so inside `T.lanes` the reduction says
    so at the author's line instead of failing on a barrier it did not write."""
    spec = T.copy_layout((4, 1024), WAVES, 4)

    @T.kernel(waves=WAVES)
    def kernel(X: Tensor("f32", 4, 1024), Y: Tensor("f32", 4)):
        T.grid(1)
        x = X.load((0, 0), spec)
        with T.lanes(lambda wave, lane: wave.eq(0)):
            Y.store((0,), T.reduce(x, "max", 1, T.reduced(spec, 1)))

    with pytest.raises(T.DSLError, match="inside a T.lanes block") as error:
        kernel.trace()
    assert error.value.loc.file.endswith("test_ops_across_waves.py")


@pytest.mark.parametrize("fn, cols", [("sum", 64), ("prod", 256)])
def test_masked_scans_count_masked_elements_as_the_identity(fn, cols):
    """`mask=` (a comparison): torch's cumsum(x * (x > 0)), in the wave (64) and across waves
    (256), with an infinity masked away leaving no NaN behind."""
    def make(x, spec):
        return T.scan(x, fn, 1, mask=x > 0.0)

    kernel = row_kernel(make, 4, cols, 1, out_cols=cols)
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((8, cols)) * (0.5 if fn == "prod" else 3)).astype(np.float32)
    x[0, 3] = -np.inf
    kept = np.where(x > 0, x, 0.0 if fn == "sum" else 1.0).astype(np.float64)
    want = np.cumsum(kept, axis=1) if fn == "sum" else np.cumprod(kept, axis=1)
    y, interpreted = proved_interpreted_emulated(kernel, x, x.shape) if cols > 64 else (None, None)
    if y is None:                      # in one wave: no barrier to look for
        assert argus.verify(kernel).ok
        interpreted = run(kernel.ir, {"X": x, "Y": np.zeros_like(x)}).outputs["Y"]
        y = np.zeros_like(x)
        argus.compile(kernel).run(x, y, check="strict")
    assert not np.isnan(y).any()
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=1e-4)
    np.testing.assert_allclose(interpreted, y, rtol=1e-6, atol=1e-6)


def test_a_scan_mask_of_another_shape_is_refused():
    def make(x, spec):
        return T.cumsum(x, 1, mask=T.zeros(T.copy_layout((8, 64), WAVES, 1)) > 0.0)

    with pytest.raises(argus.ArgusError, match="scan mask: give a tile of the scanned tile"):
        row_kernel(make, 4, 64, 1, out_cols=64).trace()

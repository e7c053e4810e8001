"""Reductions of every shape (issue 22, item 2): a 1-D tile to a scalar, any axis of a 2-D or
3-D tile, a full reduction axis by axis down to a scalar, and the keepdims-like broadcast
back, in the reference interpreter (against numpy), in `verify` (whose replay runs the
interpreter) and through the CLI. A scalar tile has no coordinates, and the interpreter used
to take its thread grid from the first one (IndexError)."""

from __future__ import annotations

import functools
import math
import subprocess
import sys
import textwrap

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import argus
import argus.lang as T
from argus.absint.concrete import run
from argus.ir.types import ThreadLayout, thread_vars
from argus.lang import Tensor


def tile_spec(shape: tuple[int, ...], slots: int, lane_major: bool, waves: int = 1):
    """A row-major tile of `shape` held by `waves` waves of 64 lanes x `slots` slots: element
    f (flat) at lane f // slots, slot f % slots (lane_major) or slot f // 64, lane f % 64;
    each wave holds a whole slice along axis 0."""
    wave, lane, slot = thread_vars(waves, slots)
    local = lane * slots + slot if lane_major else slot * 64 + lane
    flat = wave * (64 * slots) + local
    coords, stride = [], math.prod(shape)
    for extent in shape:
        stride //= extent
        coords.append(flat // stride % extent if stride > 1 else flat % extent)
    return T.TileSpec(shape, ThreadLayout(waves, slots, tuple(coords)))


@functools.cache
def reducing_kernel(shape, slots, lane_major, axes, fn, waves=1):
    """Reduce along each of `axes` in turn (an axis of the tile as it is then), store the
    result (a scalar into a 1-element tensor), and after one reduction also broadcast it back
    along that axis into the original layout (keepdims)."""
    spec = tile_spec(shape, slots, lane_major, waves)
    out_shape = [n for n in shape]
    for axis in axes:
        del out_shape[axis]
    out_shape = tuple(out_shape) or (1,)

    @T.kernel(waves=waves)
    def reduce_tile(X: Tensor("f32", *shape), R: Tensor("f32", *out_shape),
                    B: Tensor("f32", *shape)):
        T.grid(1)
        T.tag(X, lambda *c: {"i": c[0]})
        x = X.load((0,) * len(shape), spec)
        tile, current = x, spec
        for step, axis in enumerate(axes):
            smaller = T.reduced(current, axis)
            tile = T.reduce(tile, fn, axis, smaller, drop=("i",))
            if step == 0:
                B.store((0,) * len(shape), T.broadcast(tile, axis, spec))
            current = smaller
        R.store((0,) * len(out_shape), tile)

    return reduce_tile.ir


def numpy_reduce(data, axes, fn):
    op = np.max if fn == "max" else np.sum
    out, first = data.astype(np.float64), None
    for step, axis in enumerate(axes):
        out = op(out, axis=axis, keepdims=step == 0)
        if step == 0:
            first = np.broadcast_to(out, data.shape)
            out = np.squeeze(out, axis=axis)
    return np.atleast_1d(out), first


@st.composite
def reductions(draw):
    rank = draw(st.integers(1, 3))
    slots = draw(st.sampled_from([1, 2, 4]))
    total = 64 * slots
    if rank == 1:
        shape = (total,)
    elif rank == 2:
        cols = draw(st.sampled_from([c for c in (1, 2, 4, 8, 16, 32, 64) if total % c == 0]))
        shape = (total // cols, cols)
    else:
        c = draw(st.sampled_from([2, 4, 8]))
        b = draw(st.sampled_from([2, 4]))
        shape = (total // (b * c), b, c)
    axes, left = [], rank
    for _ in range(draw(st.integers(1, rank))):   # down to a scalar when all are drawn
        axes.append(draw(st.integers(0, left - 1)))
        left -= 1
    return shape, slots, draw(st.booleans()), tuple(axes), draw(st.sampled_from(["sum", "max"]))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(reductions(), st.integers(0, 2**16))
def test_every_reduction_shape_agrees_with_numpy_and_verifies(case, seed):
    shape, slots, lane_major, axes, fn = case
    ir = reducing_kernel(shape, slots, lane_major, axes, fn)
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    reduced, kept = numpy_reduce(data, axes, fn)
    zeros = {"R": np.zeros(reduced.shape, np.float32), "B": np.zeros(shape, np.float32)}
    result = run(ir, {"X": data, **zeros})
    assert result.ok, result.report()
    np.testing.assert_allclose(result.outputs["R"], reduced, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(result.outputs["B"], kept, rtol=1e-5, atol=1e-4)
    report = argus.verify(ir, jobs=1)
    assert report.ok, str(report)


def test_a_reduction_within_each_of_two_waves_runs():
    ir = reducing_kernel((2, 8, 16), 2, True, (2, 1), "sum", waves=2)
    data = np.random.default_rng(1).standard_normal((2, 8, 16)).astype(np.float32)
    result = run(ir, {"X": data, "R": np.zeros(2, np.float32),
                      "B": np.zeros((2, 8, 16), np.float32)})
    assert result.ok
    np.testing.assert_allclose(result.outputs["R"], data.sum(axis=(1, 2)), rtol=1e-5, atol=1e-4)


SCALAR_SOURCE = textwrap.dedent('''
    import argus.lang as T
    from argus.ir.types import ThreadLayout, thread_vars
    from argus.lang import Tensor

    _, lane, slot = thread_vars(1, 4)
    ROW = T.TileSpec((256,), ThreadLayout(1, 4, (lane * 4 + slot,)))

    @T.kernel(waves=1)
    def total(X: Tensor("f32", 256), Y: Tensor("f32", 1)):
        T.grid(1)
        T.tag(X, lambda i: {"i": i})
        T.tag(Y, lambda i: {"i": i})
        s = T.reduce(X.load((0,), ROW), "sum", 0, T.reduced(ROW, 0), drop=("i",))
        Y.store((0,), s)
        T.tag_assert(lambda V, D: D.i.eq(1), "lands in Y[1]")
''')


def test_a_refuted_scalar_store_replays_in_verify_and_the_cli(tmp_path):
    path = tmp_path / "scalar_sum.py"
    path.write_text(SCALAR_SOURCE)
    namespace: dict = {}
    exec(compile(SCALAR_SOURCE, str(path), "exec"), namespace)
    report = argus.verify(namespace["total"], jobs=1)
    (refuted,) = report.refuted
    assert refuted.counterexample.confirmed and "lands in Y[1]" in str(refuted)
    out = subprocess.run([sys.executable, "-m", "argus.cli", "verify", f"{path}:total",
                          "--jobs", "1"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr
    assert "confirmed by concrete replay" in out.stdout
    assert "Traceback" not in out.stderr + out.stdout


def test_the_lds_model_takes_a_scalar_tile():
    """The verifier's LDS helpers read the thread grid from the layout too."""
    from argus.absint.lds import _writers, covers_tile
    from argus.ir.expr import Var

    scalar = ThreadLayout(1, 2, ())
    assert covers_tile(scalar, ())
    wave, lane, slot, written = _writers(scalar, (), Var("lane", 0, 64) < 8)
    assert (wave.value, lane.value, slot.value, written.value) == (0, 0, 0, True)

"""A window of tiles loaded ahead and carried by an unrolled loop (the oldest consumed, the
newest loaded) rotates through its registers by renaming: the backend loads each tile straight
into the register the loop keeps it in once nothing live is there, and runs no remainder
iterations where the assumptions make the trip count a multiple of the unroll. Where the tile
there is still live when the next one is loaded, the load goes elsewhere (and the result is
still right)."""

import numpy as np
import pytest

import argus
import argus.lang as T
from argus.lang import Tensor


@T.kernel(waves=1)
def window_sum(X: Tensor("f32", "K", 64), Y: Tensor("f32", 1, 64), *, window: int = 2,
               early: bool = False):
    """Y = the sum of X's rows, `window` rows loaded ahead; `early` loads the next row before
    the oldest is added (the oldest is then live when its successor arrives)."""
    K = X.shape[0]
    T.assume(K >= window)
    T.assume((K % window).eq(0))
    T.grid(1)
    row = T.copy_layout((1, 64), 1, 1)
    carried = {f"x{j}": X.load((j, 0), row) for j in range(window)}
    carried["acc"] = T.zeros(row)
    loop = T.range(0, K - window, unroll=window, name="k", **carried)
    for k in loop:
        if early:
            new = X.load((k + window, 0), row)
        loop.acc = loop.acc + loop.x0
        if not early:
            new = X.load((k + window, 0), row)
        for j in range(window - 1):
            setattr(loop, f"x{j}", getattr(loop, f"x{j + 1}"))
        setattr(loop, f"x{window - 1}", new)
    acc = loop.acc
    for j in range(window):
        acc = acc + getattr(loop, f"x{j}")
    Y.store((0, 0), acc)


def loop_body(text: str) -> str:
    return text.split(".Lloop1:")[1].split("s_cbranch_scc1 .Lloop1")[0]


@pytest.mark.parametrize("window", [2, 4])
@pytest.mark.parametrize("early", [False, True], ids=["consumed-first", "loaded-first"])
def test_a_window_of_loaded_tiles_rotates_by_renaming(window, early):
    compiled = argus.compile(window_sum, window=window, early=early)
    body = loop_body(compiled.text)
    assert body.count("buffer_load_dword") == window
    # consumed first: every load lands in the register the loop keeps its tile in
    assert ("v_mov_b32_e32" in body) == early
    assert ".Lrest" not in compiled.text          # K a multiple of the window: no remainder
    x = np.random.default_rng(window).standard_normal((3 * window, 64)).astype(np.float32)
    y = np.full((1, 64), np.nan, np.float32)
    emulation = compiled.run(X=x, Y=y, check="strict")
    assert not emulation.hazards
    np.testing.assert_allclose(y[0], x.sum(0), rtol=1e-5, atol=1e-5)

"""Flash attention's `overlap` schedule (issue 23): the scores of key block j+1 are computed in
block j's iteration, their MFMAs traced between block j's softmax ops, with K staged one
block ahead of V in the same LDS slots. Proved for every size, right in the strict emulator at
ragged shapes (one key block, a masked tail, several causal query tiles), and the compiled
loop really interleaves the two."""

from __future__ import annotations

import pytest
from roads import emulated

import argus
import argus.lang as T
from argus.kernels import attention


def test_overlap_is_proved_for_every_size():
    """LDS races between K(j+2)'s store and the other waves' reads of K(j), V(j+1)'s and V(j-1)'s,
    the masks and the keys of each block: every obligation over symbolic BH and S."""
    report = argus.verify(attention.attention_fwd, head_dim=64, causal=True, overlap=True,
                          timeout_ms=120_000)
    assert report.ok and not report.unknown, str(report)
    assert "blocks before the last lie inside the keys" in str(report.obligations)


@pytest.mark.parametrize("params,sizes", [
    ({"causal": True}, {"BH": 2, "S": 200, "D": 64}),     # two query tiles, a masked tail
    ({}, {"BH": 1, "S": 32, "D": 64}),                    # one key block: the loop never runs
    ({"prefetch": 2}, {"BH": 1, "S": 130, "D": 64}),      # a staged pair carried in registers
])
def test_overlap_matches_numpy_on_the_strict_emulator(params, sizes):
    done = emulated("attention_fwd", sizes, {"head_dim": 64, "overlap": True, **params}, seed=5)
    assert done.emulated.ok, done.emulated.message
    assert not done.emulated.run.hazards


def test_the_next_blocks_scores_are_interleaved_with_this_blocks_softmax():
    """In the loop body the first score MFMA comes before the softmax's exponentials and
    another one among them: the matrix core has work during the softmax."""
    text = argus.compile(attention.attention_fwd, head_dim=64, overlap=True, verify=False).text
    body = text[text.index(".Lloop"):text.index("s_barrier", text.index(".Lloop"))]
    opcodes = [line.split()[0] for line in body.splitlines()[1:]
               if line.strip() and not line.strip().startswith(";")]
    exps = [i for i, o in enumerate(opcodes) if o.startswith("v_exp_f32")]
    mfmas = [i for i, o in enumerate(opcodes) if o.startswith("v_mfma")]
    assert len(mfmas) == 16                   # 8 score steps of block j+1, 8 of block j's PV
    assert mfmas[0] < exps[0]
    assert any(exps[0] < i < exps[-1] for i in mfmas)


def test_the_overlapped_loop_asks_the_scheduler_for_a_wider_filler_window():
    """Its `fill_window=96` hint reaches the backend's loop (the default window, 48, stays for
    every other loop), and a hint that is not a positive count is refused naming itself."""
    from argus.asm.lower import LoweringError
    from argus.asm.lower.program import Loop
    from argus.asm.lower.schedule import FILL_WINDOW

    compiled = argus.compile(attention.attention_fwd, head_dim=64, overlap=True, verify=False)
    loops = [item for item in compiled.lowered.items if isinstance(item, Loop)]
    assert [loop.fill_window for loop in loops] == [96] and FILL_WINDOW == 48
    plain = argus.compile(attention.attention_fwd, head_dim=64, verify=False)
    assert all(item.fill_window is None for item in plain.lowered.items if isinstance(item, Loop))

    @T.kernel(waves=1)
    def hinted(X: T.Tensor("f32", "N", 64), Y: T.Tensor("f32", "N", 64)):
        T.assume((X.shape[0] % 16).eq(0))
        T.grid(1)
        layout = T.copy_layout((16, 64), 1, 4)
        for k in T.range(0, X.shape[0] // 16, hints=("fill_window=0",)):
            Y.store((k * 16, 0), X.load((k * 16, 0), layout))

    with pytest.raises(LoweringError, match="fill_window=0"):
        argus.compile(hinted, verify=False)

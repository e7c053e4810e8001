"""A launch of more waves than the emulator keeps at once runs its workgroups in chunks on the
same memory: the outputs and the per-PC counts are those of one run, and a launch beyond the old
limit (KernelBench's scaled row programs reached 65536 workgroups) runs instead of being
refused."""

import numpy as np

import argus
import argus.lang as T
from argus.isa_cdna3.emu import emulator


@T.kernel(waves=1)
def add_one(X: T.Tensor("f32", "N", 64), Y: T.Tensor("f32", "N", 64)):
    T.assume((X.shape[0] % 4).eq(0))
    T.grid(X.shape[0] // 4)
    row = T.program_id(0) * 4
    layout = T.copy_layout((4, 64), 1, 4)
    Y.store((row, 0), X.load((row, 0), layout) + 1.0)


def test_a_chunked_launch_equals_one_run(monkeypatch):
    compiled = argus.compile(add_one)
    X = np.random.default_rng(0).random((4 * 37, 64), dtype=np.float32)
    whole = np.full_like(X, np.nan)
    one = compiled.run(X, whole)
    monkeypatch.setattr(emulator, "CHUNK_WAVES", 5)       # 37 workgroups in 8 chunks
    chunked = np.full_like(X, np.nan)
    joined = compiled.run(X, chunked)
    assert np.array_equal(chunked, X + 1) and np.array_equal(chunked, whole)
    assert joined.counts == one.counts and joined.workgroups == one.workgroups == 37
    assert joined.waves == one.waves and len(joined.per_wave) == 37


def test_a_launch_past_the_wave_limit_runs_in_chunks(monkeypatch):
    """More waves than MAX_EMULATED_WAVES at once used to be refused; now the chunks hold
    them (the limit is lowered here so the launch stays small)."""
    monkeypatch.setattr(emulator, "MAX_EMULATED_WAVES", 16)
    monkeypatch.setattr(emulator, "CHUNK_WAVES", 16)
    compiled = argus.compile(add_one)
    X = np.ones((4 * 40, 64), np.float32)
    Y = np.zeros_like(X)
    compiled.run(X, Y)
    assert (Y == 2).all()

"""Global atomic adds (split-K): two workgroups' adds to one element commute, so both land and
the kernel is proved; a load or plain store of an element another workgroup adds to is a race,
refuted by the verifier and seen by the interpreter in either workgroup order."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from argus.absint.concrete import run

sys.path.insert(0, str(Path(__file__).parent / "bugs"))
import programs as P  # noqa: E402


def _inputs(seed=0, M=64, N=64, K=32):
    rng = np.random.default_rng(seed)
    return {"A": rng.integers(-3, 4, (M, K)).astype(np.float32),
            "B": rng.integers(-3, 4, (N, K)).astype(np.float32),
            "C": np.zeros((M, N), np.float32)}


def test_both_split_k_contributions_land():
    data = _inputs()
    result = run(P.split_k().ir, data)
    assert not result.violations
    np.testing.assert_array_equal(result.outputs["C"], data["A"] @ data["B"].T)


def test_plain_store_loses_one_half_and_is_a_race():
    data = _inputs()
    result = run(P.split_k(accumulate="store").ir, data)
    assert {v.kind for v in result.violations} == {"global-race"}
    assert not np.array_equal(result.outputs["C"], data["A"] @ data["B"].T)


@pytest.mark.parametrize("order", [[(0, 0, 0), (0, 0, 1)], [(0, 0, 1), (0, 0, 0)]])
def test_reading_a_sum_another_workgroup_adds_to_is_a_race_in_either_order(order):
    result = run(P.split_k(read_back=True).ir, _inputs(), workgroups=order)
    races = [v for v in result.violations if v.kind == "global-race"]
    assert races and all(tuple(v.workgroup) == order[1] for v in races)
    assert any("adds to atomically" in v.message for v in races)


def test_waves_adding_into_one_lds_tile_sum_exactly():
    X = np.random.default_rng(1).integers(-8, 8, (32, 16)).astype(np.float32)
    result = run(P.wave_sum().ir, {"X": X, "Y": np.zeros_like(X)})
    assert not result.violations
    np.testing.assert_array_equal(result.outputs["Y"], 4 * X)


def _store_then_add(same_epoch: bool):
    import argus.lang as T
    from argus.ir.types import ThreadLayout, thread_vars
    from argus.lang import Tensor, TileSpec

    wave, lane, slot = thread_vars(4, 4)
    every_wave = TileSpec((16, 16), ThreadLayout(4, 4, (lane // 4, lane % 4 * 4 + slot)))

    @T.kernel(waves=4)
    def store_then_add(X: Tensor("f32", 16, 16), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        one_each = T.copy_layout((16, 16), 4, 1)
        acc = T.lds((16, 16), "f32")
        acc.store((0, 0), T.zeros(one_each))
        if not same_epoch:
            T.barrier()
        acc.atomic_add((0, 0), X.load((0, 0), every_wave))
        T.barrier()
        Y.store((0, 0), acc.load((0, 0), one_each))
    return store_then_add


@pytest.mark.parametrize("same_epoch", [False, True])
def test_an_atomic_add_races_with_another_threads_plain_store_in_its_epoch(same_epoch):
    from argus.absint.verify import verify

    kernel = _store_then_add(same_epoch)
    report = verify(kernel)
    assert report.ok is not same_epoch, str(report)
    if same_epoch:
        assert all(o.kind == "lds-race" and o.counterexample.confirmed for o in report.refuted)


def test_lds_atomic_add_fails_to_compile_naming_the_op_and_line():
    import argus
    from argus.errors import ArgusError

    with pytest.raises(ArgusError, match=r"lds\.atomic_add.*LdsAtomicAdd") as caught:
        argus.compile(P.wave_sum(zero=False))
    assert "programs.py:" in str(caught.value.loc)


def test_a_tile_relaid_through_global_memory_needs_a_barrier():
    X = np.arange(32 * 16, dtype=np.float32).reshape(32, 16)
    for sync in (True, False):
        result = run(P.relayout(sync=sync).ir,
                     {"X": X, "W": np.zeros_like(X), "Y": np.zeros_like(X)})
        np.testing.assert_array_equal(result.outputs["Y"], X)  # lockstep hides it in the data
        assert {v.kind for v in result.violations} == (set() if sync else {"global-order"})


def test_unpermute_with_repeated_tokens_adds_every_contribution():
    X = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    ids = (np.arange(64) % 32).astype(np.float32)  # every token routed to two experts
    expected = np.zeros((32, 8), np.float32)
    np.add.at(expected, np.arange(64) % 32, X)
    for atomic in (True, False):
        result = run(P.unpermute(atomic=atomic).ir,
                     {"X": X, "ids": ids, "Y": np.zeros((32, 8), np.float32)})
        assert np.array_equal(result.outputs["Y"], expected) is atomic
        assert {v.kind for v in result.violations} == (set() if atomic else {"global-order"})


# ---------------------------------------------------------------------------------------------
# MFMA modifiers and element types (not atomics, but new verifier classes of the same issue)


def test_cbsz_abid_broadcast_multiplies_the_chosen_a_block():
    rng = np.random.default_rng(3)
    A = rng.integers(-3, 4, (64, 4)).astype(np.float32)
    B = rng.integers(-3, 4, (64, 4)).astype(np.float32)
    for abid in range(4):
        result = run(P.broadcast_a(abid=abid).ir, {"A": A, "B": B,
                                                   "C": np.zeros((16, 64), np.float32)})
        np.testing.assert_array_equal(result.outputs["C"], A[16 * abid:16 * abid + 16] @ B.T)
        assert result.ok is (abid == 2)


def test_bad_broadcast_modifiers_and_lowering_fail_clearly():
    import argus
    import argus.lang as T
    from argus.errors import ArgusError
    from argus.lang import Tensor

    instr = "v_mfma_f32_32x32x8_f16"  # one block: nothing to broadcast

    @T.kernel(waves=1)
    def one_block(A: Tensor("f16", 32, 8), B: Tensor("f16", 32, 8), C: Tensor("f32", 32, 32)):
        T.grid(1)
        C.store((0, 0), T.mfma(instr, A.load((0, 0), T.mfma_layout(instr, "a")),
                               B.load((0, 0), T.mfma_layout(instr, "b")),
                               T.zeros(T.mfma_layout(instr, "c")), cbsz=1, abid=0))

    with pytest.raises(ArgusError, match="cbsz:1 broadcasts over 2\\*\\*cbsz blocks"):
        one_block.trace()
    with pytest.raises(ArgusError, match=r"mfma\.bcast.*MfmaBroadcast") as caught:
        argus.compile(P.broadcast_a())
    assert "programs.py:" in str(caught.value.loc)


@pytest.mark.parametrize("instr,dtype,acc", [("v_mfma_i32_16x16x32_i8", "i8", "i32"),
                                             ("v_mfma_f32_16x16x8_xf32", "f32", "f32")])
def test_i8_and_xf32_mfmas_are_expressible_and_proved(instr, dtype, acc):
    import argus.lang as T
    from argus.absint.verify import verify
    from argus.isa_cdna3.mfma import mfma
    from argus.lang import Tensor

    info = mfma(instr)

    @T.kernel(waves=1)
    def small(A: Tensor(dtype, info.m, info.k), B: Tensor(dtype, info.n, info.k),
              C: Tensor(acc, info.m, info.n)):
        T.grid(1)
        T.tag(A, lambda m, k: {"row": m, "k": k})
        T.tag(B, lambda n, k: {"col": n, "k": k})
        c = T.mfma(instr, A.load((0, 0), T.mfma_layout(instr, "a")),
                   B.load((0, 0), T.mfma_layout(instr, "b")),
                   T.zeros(T.mfma_layout(instr, "c"), acc))
        T.tag_assert(lambda A, B, C: A.k.eq(B.k), "A and B meet at one k")
        C.store((0, 0), c)

    assert verify(small).ok
    rng = np.random.default_rng(4)
    A = rng.integers(-100, 100, (info.m, info.k)).astype(np.float32)
    B = rng.integers(-100, 100, (info.n, info.k)).astype(np.float32)
    result = run(small.ir, {"A": A, "B": B, "C": np.zeros((info.m, info.n), np.float32)})
    np.testing.assert_array_equal(result.outputs["C"], A @ B.T)  # exact: small integers


@given(st.permutations([(m, 0, s) for m in range(2) for s in range(2)]))
def test_any_workgroup_order_lands_every_split_and_sees_the_read_race(order):
    """Workgroups run in any order: atomic adds still sum exactly, and the read-back of a
    partial sum is reported whichever split comes first."""
    data = _inputs(seed=2, M=128, N=64, K=16)
    fine = run(P.split_k().ir, data, workgroups=order)
    assert not fine.violations
    np.testing.assert_array_equal(fine.outputs["C"], data["A"] @ data["B"].T)
    racy = run(P.split_k(read_back=True).ir, data, workgroups=order, max_violations=10**6)
    seen = {v.workgroup[0] for v in racy.violations if v.kind == "global-race"}
    assert seen == {0, 1}

"""Coverage facts of accumulations (issue 22, item 7): `T.mfma(..., cover="k")` records which
k an accumulator has summed (`kfirst`, `klast`, `kstep`), through K loops (the loop invariant
is found by affine extrapolation of the carried tags), so an assertion at the store can say
"every k of [0, K) once". A loop that skips its last tile, starts late, or adds a tile twice
is refuted with a replayed witness (tests/bugs/bug_35..37); the interpreter computes the same
tags as the verifier."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import argus
import argus.lang as T
from argus.absint.concrete import run
from argus.errors import ArgusError
from argus.ir.expr import And
from argus.lang import Tensor

sys.path.insert(0, str(Path(__file__).parent / "bugs"))
import coverage_programs as P  # noqa: E402

MFMA = P.MFMA


def test_a_k_loop_that_covers_all_of_k_is_proved_and_computes_the_gemm():
    report = argus.verify(P.k_loop())
    assert report.ok and any("covered every k" in o.message for o in report.obligations)
    rng = np.random.default_rng(0)
    import ml_dtypes
    a = rng.standard_normal((64, 40)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((32, 40)).astype(ml_dtypes.bfloat16)
    c = np.full((64, 32), np.nan, np.float32)
    argus.compile(P.k_loop()).run(a, b, c, check="strict")
    assert np.allclose(c, a.astype(np.float32) @ b.astype(np.float32).T, atol=1e-3)


@pytest.mark.parametrize("kwargs, covered", [({}, (0, 39, 1)), ({"skip_last": True},
                                                                 (0, 31, 1)),
                                              ({"start": 1}, (8, 39, 1))])
def test_the_interpreter_records_the_same_coverage(kwargs, covered):
    """Without the store's assertion failing the run, the C tags the interpreter computes
    say what was summed."""
    kernel = P.k_loop(**kwargs)
    arrays = {"A": np.zeros((32, 40), np.float32), "B": np.zeros((32, 40), np.float32),
              "C": np.zeros((32, 32), np.float32)}
    result = run(kernel.ir, arrays)
    seen = {(v.tags["V"]["kfirst"], v.tags["V"]["klast"], v.tags["V"]["kstep"])
            for v in result.violations}
    if covered == (0, 39, 1):
        assert not result.violations
    else:
        assert seen == {covered}


def test_one_mfma_covers_its_own_k_and_a_straight_line_chain_joins_them():
    @T.kernel(waves=1)
    def chain(A: Tensor("bf16", 32, 24), B: Tensor("bf16", 32, 24),
              C: Tensor("f32", 32, 32)):
        T.grid(1)
        T.tag(A, lambda m, k: {"row": m, "k": k})
        T.tag(B, lambda n, k: {"col": n, "k": k})
        T.tag(C, lambda m, n: {"row": m, "col": n})
        a_spec, b_spec, c_spec = (T.mfma_layout(MFMA, x) for x in "abc")
        acc = T.tag(T.zeros(c_spec), lambda i, j: {"row": i, "col": j})
        for kt in (2, 1, 0):            # the order does not matter: the union is exact
            acc = T.mfma(MFMA, A.load((0, kt * 8), a_spec), B.load((0, kt * 8), b_spec), acc,
                         cover="k")
        C.store((0, 0), acc)
        T.tag_assert(lambda V, D: And(V.kfirst.eq(0), V.klast.eq(23), V.kstep.eq(1)),
                     "all of K")

    assert argus.verify(chain).ok


def test_k_values_that_are_no_progression_cover_nothing():
    """A whose k tag is scrambled along the contraction (k * k): the own coverage is ⊤."""
    @T.kernel(waves=1)
    def scrambled(A: Tensor("bf16", 32, 8), B: Tensor("bf16", 32, 8),
                  C: Tensor("f32", 32, 32)):
        T.grid(1)
        T.tag(A, lambda m, k: {"row": m, "k": k * k})
        T.tag(B, lambda n, k: {"col": n, "k": k * k})
        T.tag(C, lambda m, n: {"row": m, "col": n})
        a_spec, b_spec, c_spec = (T.mfma_layout(MFMA, x) for x in "abc")
        acc = T.mfma(MFMA, A.load((0, 0), a_spec), B.load((0, 0), b_spec), T.zeros(c_spec),
                     cover="k")
        C.store((0, 0), acc)
        T.tag_assert(lambda V, D: V.kfirst.eq(0), "covers from 0")

    report = argus.verify(scrambled)
    assert not report.ok and report.refuted[0].counterexample.confirmed
    assert "kfirst=⊤" in str(report)


def test_cover_must_name_a_tag_the_operands_carry():
    @T.kernel(waves=1)
    def wrong(A: Tensor("bf16", 32, 8), B: Tensor("bf16", 32, 8), C: Tensor("f32", 32, 32)):
        T.grid(1)
        T.tag(A, lambda m, k: {"row": m, "k": k})
        T.tag(B, lambda n, k: {"col": n, "k": k})
        a_spec, b_spec, c_spec = (T.mfma_layout(MFMA, x) for x in "abc")
        T.mfma(MFMA, A.load((0, 0), a_spec), B.load((0, 0), b_spec), T.zeros(c_spec),
               cover="kk")

    with pytest.raises(ArgusError, match=r"cover='kk'.*carries k, row"):
        wrong.trace()

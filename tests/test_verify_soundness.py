"""Differential soundness against the reference interpreter and metamorphic invariance.

Random causal-mask kernels (random linear mask conditions, random statistics shifts) are
verified: Proved must mean the interpreter finds no violation on every workgroup of two sizes;
Refuted must replay. Unknown is allowed, counted and printed. Renaming, re-association,
`//2^k` ↔ `>>k` and z3 ↔ cvc5 must not change a verdict."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import argus.lang as T
from argus.absint.concrete import run
from argus.absint.report import REFUTED, UNKNOWN
from argus.absint.verify import verify
from argus.ir.expr import And
from argus.lang import Tensor

sys.path.insert(0, str(Path(__file__).parent / "bugs"))

import programs  # noqa: E402

UNKNOWNS: list[str] = []


def _interpreter_violations(kernel, sizes):
    ir = kernel.trace()
    inputs = {t.name: np.zeros(tuple(int(sizes[str(e)]) if not str(e).isdigit() else int(str(e))
                                     for e in t.type.shape), np.float32) for t in ir.tensors}
    return run(ir, inputs, max_violations=10).violations


masks = st.tuples(st.integers(-2, 2), st.integers(-2, 2), st.integers(-1, 1),
                  st.sampled_from(["<=", "<"]))


def _keep(coefficients):
    a, b, c, op = coefficients

    def keep(kv0, q0, i, j):
        left, right = kv0 + i + a, q0 + j * (1 + b % 2) + c
        return left <= right if op == "<=" else left < right
    return keep


@given(masks, st.integers(0, 3))
def test_verdicts_agree_with_the_interpreter(coefficients, shift):
    kernel = programs.scores(keep=_keep(coefficients), stats_shift=shift)
    report = verify(kernel)
    if report.ok:
        for sizes in ({"S": 128, "D": 8}, {"S": 256, "D": 8}):
            assert not _interpreter_violations(kernel, sizes), (coefficients, shift)
        return
    for ob in report.obligations:
        if ob.verdict == REFUTED:
            assert ob.counterexample.confirmed
            violations = _interpreter_violations(kernel, ob.counterexample.sizes)
            assert any(v.kind == ob.kind for v in violations), (coefficients, shift, str(ob))
        elif ob.verdict == UNKNOWN:
            UNKNOWNS.append(f"{coefficients} {shift}: {ob}")
    assert report.refuted or report.unknown


def teardown_module():
    print(f"\nunknown verdicts in the differential test: {len(UNKNOWNS)}")
    for line in UNKNOWNS[:5]:
        print("  ", line)


def _verdicts(report):
    return [(o.kind, o.loc, o.verdict) for o in report.obligations]


def _variant(kv_name: str, shift_form: str, keep_form: str):
    """The scores kernel with renamed sizes, a mask written in one of several equal forms."""

    def keep(kv0, q0, i, j):
        if keep_form == "plain":
            return kv0 + i <= q0 + j
        return i + kv0 <= j + q0 + 0

    @T.kernel(waves=4)
    def block(Q: Tensor("bf16", "S", "D"), K: Tensor("bf16", kv_name, "D"),
              P: Tensor("f32", kv_name, "S")):
        S = Q.shape[0]
        T.assume(K.shape[0].eq(S))
        T.assume((S % 128).eq(0))
        T.assume(Q.shape[1].eq(8))
        T.grid(S // 128 if shift_form == "div" else S >> 7)
        q0 = T.program_id(0) * 128
        T.tag(Q, lambda q, d: {"query": q, "d": d})
        T.tag(K, lambda kv, d: {"key": kv, "d": d})
        T.tag(P, lambda kv, q: {"key": kv, "query": q})
        k_frag = T.mfma_layout(programs.MFMA, "a", (1, 4))
        q_frag = T.mfma_layout(programs.MFMA, "b", (1, 4))
        scores = T.mfma_layout(programs.MFMA, "c", (1, 4))
        s = T.mfma(programs.MFMA, K.load((q0, 0), k_frag), Q.load((q0, 0), q_frag),
                   T.zeros(scores))
        T.tag_assert(lambda A, B, C: A.d.eq(B.d), "K and Q meet at the same feature")
        s = T.mask(s, lambda i, j: keep(q0, q0, i, j), -1e30)
        T.tag_assert(lambda X: X.key <= X.query, "the causal mask keeps key <= query")
        P.store((q0, q0), s)
        T.tag_assert(lambda V, D: And(V.key.eq(D.key), V.query.eq(D.query)),
                     "each score lands on its own key and query")
    return block


def test_metamorphic_variants_keep_the_verdict():
    base = _verdicts(verify(_variant("S", "div", "plain")))
    assert all(v == "proved" for _, _, v in base)
    for args in (("KV", "div", "plain"), ("S", "shift", "plain"), ("S", "div", "reassociated")):
        assert [v for *_, v in _verdicts(verify(_variant(*args)))] == [v for *_, v in base]


def test_z3_and_cvc5_agree():
    for kernel in (programs.scores(), programs.scores(stats_shift=1),
                   programs.single_buffered(sync_before_write=False)):
        z3 = [(k, v) for k, _, v in _verdicts(verify(kernel, solver="z3"))]
        cvc5 = [(k, v) for k, _, v in _verdicts(verify(kernel, solver="cvc5"))]
        assert z3 == cvc5

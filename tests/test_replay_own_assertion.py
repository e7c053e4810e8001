"""A replay confirms an obligation only with a violation of that obligation: two tag
assertions on one op are two obligations, and the interpreter's report of the first must not
"confirm" the second (it did: both printed the first one's predicate and element)."""

from __future__ import annotations

import math

import argus.lang as T
from argus.absint.report import REFUTED
from argus.absint.verify import verify
from argus.ir.expr import And
from argus.lang import Tensor

#: (message, predicate on (row, col)) of each assertion; both disagree with the kept region
CLAIMS = (("upper triangle", lambda r, c: r <= c), ("first 20 rows", lambda r, c: r < 20))


def _on_x(claim):
    return lambda X: claim(X.row, X.col)


@T.kernel(waves=4)
def masked_copy(X: Tensor("f32", 32, 128), Y: Tensor("f32", 32, 128)):
    T.grid(1)
    T.tag(X, lambda i, j: {"row": i, "col": j})
    T.tag(Y, lambda i, j: {"row": i, "col": j})
    spec = T.mfma_layout("v_mfma_f32_32x32x8_bf16", "c", (1, 4))
    x = T.mask(X.load((0, 0), spec), lambda i, j: And(i <= j, i < 20), -math.inf)
    for message, claim in CLAIMS:
        T.tag_assert(_on_x(claim), message)
    Y.store((0, 0), x)


@T.kernel(waves=1)
def shifted_copy(X: Tensor("f32", 64, 16), Y: Tensor("f32", 64, 16)):
    T.grid(1)
    T.tag(X, lambda r, c: {"row": r, "col": c})
    T.tag(Y, lambda r, c: {"row": r, "col": c})
    x = X.load((16, 0), T.copy_layout((16, 16), 1, 4))
    Y.store((0, 0), x)
    T.tag_assert(lambda V, D: V.row.eq(D.row), "same row")
    T.tag_assert(lambda V, D: V.col.eq(D.col + 1), "next column")


def _refuted(kernel):
    report = verify(kernel)
    refuted = {o.message: o for o in report.obligations if o.verdict == REFUTED}
    assert all(o.counterexample.confirmed for o in refuted.values()), str(report)
    return report, refuted


def test_each_mask_assertion_is_confirmed_by_its_own_violation():
    report, refuted = _refuted(masked_copy)
    assert set(refuted) == {m for m, _ in CLAIMS}, str(report)
    for message, claim in CLAIMS:
        cex = refuted[message].counterexample
        row, col = cex.element["c0"], cex.element["c1"]
        kept = row <= col and row < 20
        # at a mask the claim must agree with what is kept: the replayed element breaks that
        assert claim(row, col) != kept, (message, cex)
        other = next(m for m, _ in CLAIMS if m != message)
        assert other not in cex.detail


def test_a_store_s_second_assertion_names_its_own_predicate():
    report, refuted = _refuted(shifted_copy)
    assert set(refuted) == {"same row", "next column"}, str(report)
    assert "D.col + 1" in refuted["next column"].counterexample.detail
    assert "D.col + 1" not in refuted["same row"].counterexample.detail
    assert refuted["same row"].loc != refuted["next column"].loc

"""A tag-level counterexample is confirmed only if the numbers are wrong too (issue 13): with a
numeric reference, a replay that breaks the assertion on the tags but computes the reference's
values at the asserted elements is Unknown, and a real data bug stays Refuted."""

from __future__ import annotations

import numpy as np

import argus.lang as T
from argus.absint.report import REFUTED, UNKNOWN
from argus.absint.verify import verify
from argus.ir.expr import And
from argus.lang import Tensor


def _copy(row_shift: int, claimed_shift: int):
    """Y[r] = X[r + row_shift]; the assertion claims the value of row r + claimed_shift lands
    on row r (a wrong claim when the two shifts differ)."""
    @T.kernel(waves=1)
    def copy_rows(X: Tensor("f32", "N", 16), Y: Tensor("f32", "N", 16)):
        N = X.shape[0]
        T.assume((N % 16).eq(0))
        T.grid(N // 16 - 1)
        r0 = T.program_id(0) * 16
        T.tag(X, lambda r, c: {"row": r, "col": c})
        T.tag(Y, lambda r, c: {"row": r, "col": c})
        x = X.load((r0 + row_shift, 0), T.copy_layout((16, 16), 1, 4))
        Y.store((r0, 0), x)
        T.tag_assert(lambda V, D: And(V.row.eq(D.row + claimed_shift), V.col.eq(D.col)),
                     "row r + shift lands on row r")
    return copy_rows


def _shifted_reference(shift: int):
    def reference(inputs):
        x = inputs["X"]
        y = np.zeros_like(x)
        y[:-16] = x[shift:shift + x.shape[0] - 16]
        return {"Y": y}
    return reference


def _store_obligation(report):
    return next(o for o in report.obligations if o.kind == "tag-assertion")


def test_a_tag_violation_with_the_right_numbers_is_not_confirmed():
    # the kernel copies row r to row r (right, by the reference); the claim says r + 1
    kernel = _copy(row_shift=0, claimed_shift=1)
    without = _store_obligation(verify(kernel, N=64))
    assert without.verdict == REFUTED and without.counterexample.confirmed
    checked = _store_obligation(verify(kernel, N=64, reference=_shifted_reference(0)))
    assert checked.verdict == UNKNOWN
    assert not checked.counterexample.confirmed
    assert "computes the reference's numbers at Y[" in checked.reason


def test_a_tag_violation_with_wrong_numbers_stays_confirmed():
    # the kernel copies row r + 1 to row r, the reference wants row r there
    kernel = _copy(row_shift=1, claimed_shift=0)
    checked = _store_obligation(verify(kernel, N=64, reference=_shifted_reference(0)))
    assert checked.verdict == REFUTED and checked.counterexample.confirmed


def test_a_reference_must_be_callable():
    import pytest

    from argus.absint.report import VerifyError

    with pytest.raises(VerifyError, match="reference="):
        verify(_copy(0, 0), N=64, reference={"Y": 0})

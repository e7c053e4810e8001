"""`argus.compile` proves by default (issue 22 item 8): a kernel whose assertion fails does not
compile unless `verify=False`, and the result states whether it was proved. (The suite's
conftest sets ARGUS_COMPILE_VERIFY=0; these tests unset it.)"""

from __future__ import annotations

import pytest

import argus
import argus.lang as T
from argus.absint.verify import VerifyError
from argus.errors import ArgusError
from argus.lang import Tensor


def _copy(shift: int):
    @T.kernel(waves=1)
    def copy(X: Tensor("f32", 4, 64), Y: Tensor("f32", 4, 64)):
        T.grid(1)
        T.tag(X, lambda r, c: {"row": r})
        T.tag(Y, lambda r, c: {"row": r + shift})
        spec = T.rows_layout((4, 64), 1)
        Y.store((0, 0), X.load((0, 0), spec))
        T.tag_assert(lambda V, D: V.row.eq(D.row), "each row lands on its own row")
    return copy


@pytest.fixture
def proving(monkeypatch):
    monkeypatch.delenv("ARGUS_COMPILE_VERIFY", raising=False)


def test_compile_proves_by_default_and_says_so(proving):
    compiled = argus.compile(_copy(0))
    assert compiled.verified and "verified=True" in repr(compiled)


def test_a_refuted_kernel_does_not_compile_unless_told(proving):
    with pytest.raises(VerifyError, match="not proved"):
        argus.compile(_copy(1))
    skipped = argus.compile(_copy(1), verify=False)
    assert not skipped.verified


def test_the_switch_is_checked(monkeypatch):
    monkeypatch.setenv("ARGUS_COMPILE_VERIFY", "maybe")
    with pytest.raises(ArgusError, match="ARGUS_COMPILE_VERIFY"):
        argus.compile(_copy(0))

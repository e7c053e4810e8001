"""The one size-admissibility check (`argus.ir.sizes`): every caller (verify, the interpreter,
the launcher, the library runs, timing, the search, argus.testing) decides a kernel's
assumptions at concrete sizes through it, with the same answer and the caller's error kind.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import argus
import argus.lang as T
from argus.absint.concrete import InterpError, run
from argus.absint.report import VerifyError
from argus.ir.expr import evaluate, free_vars
from argus.ir.sizes import admits, broken_assumption, checked_sizes
from argus.ir.types import IRError
from argus.lang import Tensor
from argus.testing.programs import _candidates


@functools.cache
def rows_kernel(multiple: int, least: int):
    @T.kernel(waves=1)
    def rows(X: Tensor("f32", "N", "K"), Y: Tensor("f32", "N", "K")):
        N, K = X.shape
        T.assume((N % multiple).eq(0))
        T.assume(K >= least)
        T.assume(((N + K) % 2).eq(0))
        T.grid(N // multiple)
        tile = X.load((T.program_id(0) * multiple, 0), T.copy_layout((multiple, 16), 1, 4))
        Y.store((T.program_id(0) * multiple, 0), tile)

    return rows.ir


@given(st.sampled_from([16, 32, 64]), st.integers(16, 64), st.integers(1, 256),
       st.integers(1, 256), st.booleans())
def test_admits_decides_exactly_the_assumptions_over_the_sizes_given(multiple, least, n, k,
                                                                    only_n):
    ir = rows_kernel(multiple, least)
    sizes = {"N": n} if only_n else {"N": n, "K": k}
    expected = [a for a in ir.assumes if {v.name for v in free_vars(a)} <= sizes.keys()
                and not evaluate(a, sizes)]
    assert admits(ir, sizes) == (not expected)
    assert broken_assumption(ir, sizes) == (expected[0] if expected else None)


def test_checked_sizes_validates_and_raises_the_callers_error_kind():
    ir = rows_kernel(16, 16)
    assert checked_sizes(ir, {"N": 32}, {"K": 16}) == {"K": 16, "N": 32}
    for error in (IRError, VerifyError, InterpError):
        with pytest.raises(error, match=r"N=40 violates the assumption `N % 16 == 0`") as caught:
            checked_sizes(ir, {"N": 40}, error=error)
        assert caught.value.fix and type(caught.value) is error
    with pytest.raises(IRError, match="has no size"):
        checked_sizes(ir, {"Q": 1})
    with pytest.raises(IRError, match="whole number"):
        checked_sizes(ir, {"N": 2.5})


def test_every_caller_refuses_the_same_sizes():
    ir = rows_kernel(16, 16)
    bad = {"N": 32, "K": 17}    # (N + K) % 2 fails
    arrays = {"X": np.zeros((32, 17), np.float32), "Y": np.zeros((32, 17), np.float32)}
    says = r"violates the assumption `\(N \+ K\) % 2 == 0`"
    with pytest.raises(VerifyError, match=says):
        argus.verify(ir, jobs=1, replay=False, **bad)
    with pytest.raises(InterpError, match=says):
        run(ir, arrays)
    single, fits = _candidates(ir)
    assert not fits(bad) and fits({"N": 32, "K": 16})
    assert all(n % 16 == 0 for n in single["N"]) and all(k >= 16 for k in single["K"])

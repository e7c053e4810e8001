"""No vacuous "Verified": sizes outside a kernel's declared ranges or types, sizes that break
its assumptions, assumptions no size satisfies and grids with no workgroup are errors; a
verified report says how many workgroups and threads the proof covers.
"""

import numpy as np
import pytest

import argus
import argus.lang as T
from argus.absint.report import VerifyError
from argus.lang import Tensor


def copy_rows(assume=None, grid=None):
    """A one-wave copy of 16-row tiles of an N x 64 tensor, one workgroup per tile."""

    @T.kernel(waves=1)
    def copy(X: Tensor("f32", "N", 64), Y: Tensor("f32", "N", 64)):
        N = X.shape[0]
        T.assume((N % 16).eq(0))
        if assume is not None:
            T.assume(assume(N))
        T.grid(N // 16 if grid is None else grid(N))
        row = T.program_id(0) * 16
        T.tag(X, lambda r, c: {"r": r, "c": c})
        T.tag(Y, lambda r, c: {"r": r, "c": c})
        Y.store((row, 0), X.load((row, 0), T.copy_layout((16, 64), 1, 4)))

    return copy


def test_a_pinned_size_must_be_a_whole_number_in_its_range():
    kernel = copy_rows()
    for bad, says in [(-1, r"N=-1 is outside the range \[1, "), (0, "outside the range"),
                      (2.5, "whole number"), (True, "whole number"), ("64", "whole number")]:
        with pytest.raises(VerifyError, match=says) as error:
            argus.verify(kernel, jobs=1, N=bad)
        assert error.value.fix
    assert argus.verify(kernel, jobs=1, N=np.int64(64)).ok


def test_a_pinned_size_must_satisfy_the_assumptions():
    with pytest.raises(VerifyError, match=r"N=100 violates the assumption `N % 16 == 0`"):
        argus.verify(copy_rows(), jobs=1, N=100)
    with pytest.raises(VerifyError, match="N=64 violates the assumption `N > 128`"):
        argus.verify(copy_rows(lambda N: N > 128), jobs=1, N=64)


def test_contradictory_assumptions_are_not_verified():
    kernel = copy_rows(lambda N: (N < 16))
    with pytest.raises(VerifyError, match=r"no size satisfies the assumptions of kernel copy"):
        argus.verify(kernel, jobs=1)


def test_an_empty_grid_is_not_verified():
    with pytest.raises(VerifyError, match=r"has no workgroup at any size"):
        argus.verify(copy_rows(grid=lambda N: 0 - N // 16), jobs=1)
    with pytest.raises(VerifyError, match=r"has no workgroup at N=64"):
        argus.verify(copy_rows(grid=lambda N: N // 16 - 4), jobs=1, N=64)


def test_the_report_states_what_the_proof_covers():
    pinned = argus.verify(copy_rows(), jobs=1, N=64)
    assert pinned.ok and pinned.coverage == (
        "4 workgroups (4) of 64 threads, 256 threads in all")
    assert "covering 4 workgroups" in str(pinned)
    symbolic = argus.verify(copy_rows(), jobs=1)
    assert symbolic.ok
    assert "every workgroup of the grid (N >> 4) with 64 threads" in symbolic.coverage
    assert symbolic.to_dict()["coverage"] == symbolic.coverage

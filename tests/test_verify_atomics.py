"""Global atomic adds (split-K): two workgroups' adds to one element commute, so both land and
the kernel is proved; a load or plain store of an element another workgroup adds to is a race,
refuted by the verifier and seen by the interpreter in either workgroup order."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

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

"""Differential soundness against the reference interpreter and metamorphic invariance, through
`argus.testing`'s checks.

Random causal-mask kernels (random linear mask conditions, random statistics shifts) are
verified: Proved must mean the interpreter finds no violation on every workgroup of two sizes;
Refuted must replay. Unknown is allowed, counted and printed. Renaming, re-association,
`//2^k` <-> `>>k` and z3 <-> cvc5 must not change a verdict."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from argus.absint.report import UNKNOWN
from argus.testing import assert_metamorphic, assert_sound, family_program, slow_examples

sys.path.insert(0, str(Path(__file__).parent / "bugs"))

import programs  # noqa: E402

UNKNOWNS: list[str] = []
SIZES = [{"S": 128, "D": 8}, {"S": 256, "D": 8}]

masks = st.tuples(st.integers(-2, 2), st.integers(-2, 2), st.integers(-1, 1),
                  st.sampled_from(["<=", "<"]))


def _keep(coefficients):
    a, b, c, op = coefficients

    def keep(kv0, q0, i, j):
        left, right = kv0 + i + a, q0 + j * (1 + b % 2) + c
        return left <= right if op == "<=" else left < right
    return keep


@settings(max_examples=slow_examples())   # a proof and interpreter runs an example
@given(masks, st.integers(0, 3))
def test_verdicts_agree_with_the_interpreter(coefficients, shift):
    kernel = programs.scores(keep=_keep(coefficients), stats_shift=shift)
    report = assert_sound(kernel, sizes=SIZES)
    UNKNOWNS.extend(f"{coefficients} {shift}: {o}" for o in report.obligations
                    if o.verdict == UNKNOWN)
    assert report.ok or report.refuted or report.unknown


def teardown_module():
    print(f"\nunknown verdicts in the differential test: {len(UNKNOWNS)}")
    for line in UNKNOWNS[:5]:
        print("  ", line)


def test_metamorphic_variants_keep_the_verdict():
    report = assert_metamorphic(programs.scores(), solvers=("z3", "cvc5"))
    assert report.ok, str(report)


def test_metamorphic_variants_keep_refutations():
    report = assert_metamorphic(programs.scores(stats_shift=1), solvers=("z3", "cvc5"),
                                transforms=("rename", "div-to-shift"))
    assert report.refuted, str(report)
    report = assert_metamorphic(programs.single_buffered(sync_before_write=False),
                                solvers=("z3", "cvc5"), transforms=())
    assert report.refuted, str(report)


def test_loop_kernels_keep_their_verdicts_under_renaming_and_shifts():
    # an underscore in a loop index's name once made the verifier read it as a role tag
    ring = family_program("ring_gemm", {"wave_grid": (1, 1), "slots": 2, "swizzle": (2, 1, 3)})
    assert assert_metamorphic(ring, solvers=("z3",)).ok

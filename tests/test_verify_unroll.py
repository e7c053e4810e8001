"""Bounded unrolling (`verify(kernel, unroll=N)`): every loop runs its first N iterations as
copies of the body, sizes whose loops run longer are assumed away. Checked against the
reference interpreter run at every trip count up to N (ring buffers, GEMM mutants), on the
bug corpus, on a register prefetch whose symbolic proof ends Unknown, and through the CLI.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from test_verify_loops import COLS as RING_COLS
from test_verify_loops import ROWS as RING_ROWS
from test_verify_loops import copy_kernel_setup, nested, ring

import argus.lang as T
from argus.absint.concrete import run
from argus.absint.report import PROVED, REFUTED, UNKNOWN
from argus.absint.verify import VerifyError, verify
from argus.cli import BOUNDED_PROOF_EXIT, main
from argus.ir import ops as O
from argus.ir.expr import And
from argus.kernels import library
from argus.lang import Tensor
from argus.testing import as_program, mutants, tile_programs
from argus.testing.checks import _site, interpreter_violations
from argus.testing.families import RING_BK

BUGS = Path(__file__).parent / "bugs"
ROWS, COLS = 64, 2


def _bug(name: str):
    if str(BUGS) not in sys.path:
        sys.path.insert(0, str(BUGS))
    return importlib.import_module(name)


def _has_loop(kernel) -> bool:
    ir = kernel if isinstance(kernel, O.Kernel) else kernel.trace()
    return any(isinstance(op, O.For) for op in O.walk(ir.body))


LOOP_BUGS = [p.stem for p in sorted(BUGS.glob("bug_*.py")) if _has_loop(_bug(p.stem).KERNEL)]


# the library


def test_library_gemm_is_proved_for_two_iterations_and_says_so():
    report = verify(library()["gemm"].kernel, unroll=2)
    assert report.ok, str(report)
    assert report.unroll == 2 and report.bounded and not report.proved_for_all_sizes
    assert "bounded: every loop at most 2 iterations" in report.summary()
    assert "larger sizes and workgroups are not covered" in str(report)
    data = json.loads(report.to_json())
    assert data["unroll"] == 2 and data["bounded"] and not data["proved_for_all_sizes"]
    symbolic = verify(library()["gemm"].kernel)
    assert symbolic.proved_for_all_sizes and symbolic.unroll is None
    assert "bounded" not in str(symbolic)


def test_library_attention_is_proved_at_its_smallest_bound():
    # any length is admitted, so two key blocks already leave sizes to check; pinned at S = 128
    # (four key blocks of 32) the K/V loop runs 3 times
    with pytest.raises(VerifyError, match=r"attention.py:\d+:\d+: unroll=2 leaves no size.*"
                                          r"give unroll=3"):
        verify(library()["attention_fwd"].kernel, unroll=2, S=128)
    report = verify(library()["attention_fwd"].kernel, unroll=2, causal=True)
    assert report.ok, str(report)
    assert "bounded: every loop at most 2 iterations" in report.summary()


@pytest.mark.parametrize("unroll", [0, -1, True, 1.5, "2"])
def test_unroll_must_be_a_positive_whole_number(unroll):
    with pytest.raises(VerifyError, match="whole number N >= 1"):
        verify(library()["gemm"].kernel, unroll=unroll)


def test_pinned_sizes_beyond_the_bound_are_refused():
    with pytest.raises(VerifyError, match="unroll=2 leaves no size"):
        verify(library()["gemm"].kernel, unroll=2, K=1024)


# the bug corpus


def test_the_corpus_has_loop_bugs():
    assert {"bug_07_wrong_buffer_slot", "bug_08_stale_iteration",
            "bug_09_missing_barrier_before_read",
            "bug_10_missing_barrier_before_overwrite"} <= set(LOOP_BUGS)


@pytest.mark.parametrize("name", LOOP_BUGS)
def test_loop_bug_is_refuted_in_bounded_mode(name):
    bug = _bug(name)
    report = verify(bug.KERNEL, unroll=2)
    assert report.refuted, f"{name}: nothing refuted\n{report}"
    assert all(o.counterexample.confirmed for o in report.refuted)
    # the replay ran at the witness's sizes, so its iterations stay below the bound
    assert all(i < 2 for o in report.refuted for i in o.counterexample.iteration.values())
    text = str(report)
    for pattern in bug.EXPECT:
        assert re.search(pattern, text), f"{name}: /{pattern}/ not in\n{text}"
    fixed = _bounded_fixed(bug.FIXED)
    assert fixed.ok, str(fixed)


_FIXED: dict = {}


def _bounded_fixed(kernel):
    """Corrections share a few base kernels (the factories are cached); verify each once."""
    if id(kernel) not in _FIXED:
        _FIXED[id(kernel)] = (kernel, verify(kernel, unroll=2))
    return _FIXED[id(kernel)][1]


def test_a_race_between_iterations_needs_two_of_them():
    """The overwrite without a barrier races only with the previous iteration's reads: one
    iteration is race-free (the interpreter agrees), two are not."""
    bug = _bug("bug_10_missing_barrier_before_overwrite")
    one = verify(bug.KERNEL, unroll=1)
    assert one.ok, str(one)
    ir = bug.KERNEL.trace()
    shapes = {"M": 64, "N": 64, "K": 8}
    inputs = {t.name: np.zeros(tuple(shapes[str(e)] for e in t.type.shape), np.float32)
              for t in ir.tensors}
    assert not run(ir, inputs).violations
    two = verify(bug.KERNEL, unroll=2)
    assert any(o.kind == "lds-race" for o in two.refuted), str(two)


# a loop-carried register whose tags follow the iteration


@cache
def prefetch(skip: int):
    """Tile kt+1 is loaded into a register during iteration kt and stored in the next one;
    `skip` > 0 loads tile kt+1+skip instead on odd iterations, so only the third iteration
    stores a wrong tile."""
    @T.kernel(waves=1)
    def register_prefetch(A: Tensor("bf16", "M", "K"), C: Tensor("bf16", "M", "K")):
        K, copy = copy_kernel_setup(A, C)
        nk = K // COLS
        loop = T.range(0, nk - 1, x=A.load((0, 0), copy))
        for kt in loop:
            following = A.load((0, (kt + 1 + skip * (kt % 2)) * COLS), copy, guard=True)
            C.store((0, kt * COLS), loop.x)
            T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.k.eq(D.k)),
                         "tile kt lands on tile kt")
            loop.x = following
        C.store((0, (nk - 1) * COLS), loop.x)
        T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.k.eq(D.k)), "the last tile lands last")
    return register_prefetch


def _prefetch_violations(skip: int, tiles: int) -> list:
    inputs = {"A": np.zeros((ROWS, tiles * COLS), np.float32),
              "C": np.zeros((ROWS, tiles * COLS), np.float32)}
    return run(prefetch(skip).trace(), inputs).violations


def test_carried_register_is_proved_symbolically_and_bounded():
    """The carried tile is the one loaded one iteration earlier: the symbolic proof lifts its
    candidate to the body's yield at kt - 1 (it ended Unknown while candidates had to be
    iv-independent)."""
    symbolic = verify(prefetch(0))
    assert symbolic.ok, str(symbolic)
    for unroll in (1, 2, 3):
        bounded = verify(prefetch(0), unroll=unroll)
        assert bounded.ok, str(bounded)
    # trips = tiles - 1: the interpreter agrees for every size the bound covers
    assert not any(_prefetch_violations(0, tiles) for tiles in range(1, 5))


def test_carried_register_bug_is_refuted_symbolically_and_bounded():
    site = "tile kt lands on tile kt"
    symbolic = verify(prefetch(1))
    [found] = [o for o in symbolic.obligations if o.message == site]
    # the lifted invariant (tile kt + (kt - 1) % 2 for kt >= 1) is exact: the symbolic witness
    # is the bounded one, the third iteration
    assert found.verdict == REFUTED and found.counterexample.confirmed, str(symbolic)
    assert list(found.counterexample.iteration.values()) == [2]
    # the wrong tile is stored in the third iteration only: two are still correct
    assert all(o.verdict == PROVED for o in verify(prefetch(1), unroll=2).obligations
               if o.message == site)
    copies = [o for o in verify(prefetch(1), unroll=3).obligations if o.message == site]
    assert [o.verdict for o in copies] == [PROVED, PROVED, REFUTED]
    found = copies[-1]
    assert found.counterexample.confirmed, str(found)
    cex = found.counterexample
    assert list(cex.iteration.values()) == [2] and cex.sizes["K"] == 4 * COLS
    assert cex.tags["V"]["k"] == cex.tags["D"]["k"] + COLS
    assert any(v.kind == "tag-assertion" for v in _prefetch_violations(1, 4))


# differential: bounded verdicts against the interpreter at every covered trip count


@cache
def _ring_outcome(slots: int, distance: int, unroll: int):
    report = verify(ring(slots, distance), unroll=unroll)
    program = as_program(ring(slots, distance))
    stale = {n for n in range(1, unroll + 1)
             if interpreter_violations(program, {"M": RING_ROWS, "K": n * RING_COLS})}
    return report, stale


@given(st.integers(1, 4), st.integers(0, 4), st.integers(1, 3))
def test_bounded_ring_verdict_is_exact(slots, distance, unroll):
    """On rings bounded unrolling is complete as well as sound: Proved exactly when no trip
    count up to the bound shows a stale read, Refuted (and replayed) otherwise."""
    report, stale = _ring_outcome(slots, distance, unroll)
    assert not report.count(UNKNOWN), str(report)
    assert report.ok == (not stale), (slots, distance, unroll, stale, str(report))
    for ob in report.refuted:
        assert ob.counterexample.confirmed
        assert ob.counterexample.sizes["K"] // COLS in stale


@cache
def strided(start: int, step: int, lag: int):
    """Tiles start, start+step, ... of A pass through a loop-carried register to the same
    tiles of C; `lag` != 0 prefetches the wrong tile, which the second iteration stores."""
    @T.kernel(waves=1)
    def strided_copy(A: Tensor("bf16", "M", "K"), C: Tensor("bf16", "M", "K")):
        K, copy = copy_kernel_setup(A, C)
        loop = T.range(start, K // COLS, step, x=A.load((0, start * COLS), copy, guard=True))
        for kt in loop:
            following = A.load((0, (kt + step + lag) * COLS), copy, guard=True)
            C.store((0, kt * COLS), loop.x)
            T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.k.eq(D.k)),
                         "tile kt lands on tile kt")
            loop.x = following
    return strided_copy


@cache
def _strided_outcome(start: int, step: int, lag: int, unroll: int):
    kernel = strided(start, step, lag)
    report = verify(kernel, unroll=unroll)
    covered = range(1, start + unroll * step + 1)  # trips = ceil((tiles - start) / step)
    wrong = set()
    for tiles in covered:
        inputs = {"A": np.zeros((ROWS, tiles * COLS), np.float32),
                  "C": np.zeros((ROWS, tiles * COLS), np.float32)}
        if run(kernel.trace(), inputs).violations:
            wrong.add(tiles)
    return report, wrong


@given(st.integers(0, 1), st.integers(1, 2), st.integers(0, 1), st.integers(1, 3))
def test_strided_loop_copies_start_at_start_and_step_by_step(start, step, lag, unroll):
    report, wrong = _strided_outcome(start, step, lag, unroll)
    assert report.ok == (not wrong), (start, step, lag, unroll, wrong, str(report))
    for ob in report.refuted:
        cex = ob.counterexample
        assert cex.confirmed and cex.sizes["K"] // COLS in wrong, str(ob)
        assert all((i - start) % step == 0 for i in cex.iteration.values())


def test_nested_loops_unroll_every_level():
    with pytest.raises(VerifyError, match=r"test_verify_loops.py:\d+:\d+: unroll=1 .*"
                                          r"give unroll=2"):
        verify(nested(1), unroll=1)
    assert verify(nested(1), unroll=2).ok
    wrong = verify(nested(0), unroll=2)
    refuted = [o.counterexample for o in wrong.refuted if o.kind == "tag-assertion"]
    # one refutation per copy of the outer loop, each at its own iteration
    assert sorted(v for cex in refuted for v in cex.iteration.values()) == [0, 1]
    assert all(cex.confirmed and cex.tags["V"]["k"] == cex.tags["D"]["k"] - COLS
               for cex in refuted)


#: The interpreter runs each mutant at its oracle sizes with every K loop trip count up to this.
UNROLL = 2


@settings(max_examples=min(30, settings().max_examples))
@given(mutants(tile_programs("ring_gemm")))
def test_bounded_mutant_verdicts_agree_with_the_interpreter(m):
    report = verify(m.kernel, unroll=UNROLL)
    found = {}
    for sizes in m.oracle:
        for trips in range(1, UNROLL + 1):
            for v in interpreter_violations(m, dict(sizes, K=RING_BK * trips)):
                found.setdefault(_site(v), v)
    # each copy of the loop body has its own obligations: a site is proved when all are
    verdicts: dict = {}
    for ob in report.obligations:
        verdicts.setdefault(_site(ob), set()).add(ob.verdict)
    for site, seen in verdicts.items():
        if seen == {PROVED}:
            assert site not in found, (m, site, found.get(site))
    for ob in report.refuted:
        cex = ob.counterexample
        assert cex.confirmed, (m, str(ob))
        assert cex.sizes["K"] // RING_BK <= UNROLL, (m, str(ob))
        replayed = interpreter_violations(m, cex.sizes)
        assert _site(ob) in {_site(v) for v in replayed}, (m, str(ob))
    if report.ok:
        assert not found, (m, list(found))


# the command line


def test_cli_prints_the_bound_and_exits_with_its_own_status():
    runner = CliRunner()
    bounded = runner.invoke(main, ["verify", "gemm", "--unroll", "2", "--jobs", "1"])
    assert bounded.exit_code == BOUNDED_PROOF_EXIT, bounded.output
    assert "bounded: every loop at most 2 iterations" in bounded.output
    data = json.loads(runner.invoke(main, ["verify", "gemm", "--unroll", "1",
                                           "--json"]).output)
    assert data["unroll"] == 1 and data["ok"] and not data["proved_for_all_sizes"]
    full = runner.invoke(main, ["verify", "gemm", "--size", "K=64", "--jobs", "1"])
    assert full.exit_code == 0, full.output
    buggy = runner.invoke(main, ["verify", str(BUGS / "bug_08_stale_iteration.py"),
                                 "--unroll", "2"])
    assert buggy.exit_code == 1 and "confirmed by concrete replay" in buggy.output
    refused = runner.invoke(main, ["verify", "attention_fwd", "--unroll", "2", "--size", "S=128"])
    assert refused.exit_code == 1 and "give unroll=3" in refused.output
    assert runner.invoke(main, ["verify", "gemm", "--unroll", "0"]).exit_code == 2
    assert runner.invoke(main, ["verify", "gemm", "--jobs", "0"]).exit_code == 2
    malformed = runner.invoke(main, ["verify", "gemm"], env={"ARGUS_JOBS": "many"})
    assert malformed.exit_code == 1 and "ARGUS_JOBS='many' is not a whole number" in \
        malformed.output
    assert f"{BOUNDED_PROOF_EXIT}  every obligation proved, but only" in \
        runner.invoke(main, ["verify", "--help"]).output

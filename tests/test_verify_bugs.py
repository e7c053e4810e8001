"""The bug corpus (tests/bugs, GPUVerify xfail style): every seeded defect is Refuted with a
counterexample the interpreter confirms and that matches the file's EXPECT regexes; every
corrected kernel is Proved."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

from argus.absint.report import REFUTED
from argus.absint.verify import verify

BUGS = Path(__file__).parent / "bugs"
FILES = sorted(p.stem for p in BUGS.glob("bug_*.py"))


def _load(name: str):
    if str(BUGS) not in sys.path:
        sys.path.insert(0, str(BUGS))
    return importlib.import_module(name)


_FIXED: dict = {}


def _verified(kernel):
    """Corrections share a few base kernels (the factories are cached); verify each once."""
    if id(kernel) not in _FIXED:
        _FIXED[id(kernel)] = (kernel, verify(kernel))
    return _FIXED[id(kernel)][1]


def test_corpus_has_at_least_twelve_bugs():
    assert len(FILES) >= 12


@pytest.mark.parametrize("name", FILES)
def test_bug_is_refuted_with_confirmed_counterexample(name):
    bug = _load(name)
    report = verify(bug.KERNEL)
    assert not report.ok
    refuted = report.refuted
    assert refuted, f"{name}: no obligation refuted\n{report}"
    assert all(o.counterexample.confirmed for o in refuted)
    text = str(report)
    for pattern in bug.EXPECT:
        assert re.search(pattern, text), f"{name}: /{pattern}/ not in\n{text}"
    assert all(o.verdict == REFUTED or o.proved or o.reason for o in report.obligations)
    # every obligation is decided: a race stated at a read is confirmed even when the
    # interpreter sees it at the write that came second
    assert not report.unknown, f"{name}: {[(o.loc, o.reason) for o in report.unknown]}"


@pytest.mark.parametrize("name", FILES)
def test_corrected_kernel_is_proved(name):
    bug = _load(name)
    report = _verified(bug.FIXED)
    assert report.ok, str(report)

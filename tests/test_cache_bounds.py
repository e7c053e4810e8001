"""Memory across many `verify` calls in one process (a search loop): the per-run helper memo
is emptied after each run, and the verdict caches kept across runs never grow past their
bounds (least recently used answers go first)."""

from test_verify_vacuous import copy_rows

import argus
from argus.absint import domain, queries
from argus.smt import solve


def test_the_helper_memo_is_empty_between_runs():
    kernel = copy_rows()
    for n in (64, 128):
        assert argus.verify(kernel, jobs=1, N=n).ok
        assert domain._helpers.cache_info().currsize == 0


def test_verdict_caches_stay_within_their_bounds(monkeypatch):
    monkeypatch.setattr(queries, "CACHE_SIZE", 3)
    monkeypatch.setattr(solve, "_CACHE_SIZE", 3)
    queries.clear_cache()
    solve.clear_cache()
    kernel = copy_rows()
    for n in (64, 128, 256):
        assert argus.verify(kernel, jobs=1, N=n).ok
        assert len(queries._verdicts) <= 3 and len(solve._cache) <= 3
    assert len(queries._verdicts) == 3, "the bound is reached, so it is what limits the cache"
    queries.clear_cache()
    solve.clear_cache()

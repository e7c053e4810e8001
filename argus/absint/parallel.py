"""Deciding independent obligations on several cores.

Workers are forked after the walk, so they inherit every expression, helper variable and gather
record without pickling them; only verdicts (names and integers) travel back. Where fork is not
available, or the batch is small, the same function runs in this process.
"""

from __future__ import annotations

import multiprocessing
import os
import sys

#: Fewer obligations than this are decided in-process: forking costs more than it saves.
MIN_PARALLEL = 12

_work = None


def default_jobs() -> int:
    """`ARGUS_JOBS` if set, else the cores this process may run on."""
    configured = os.environ.get("ARGUS_JOBS", "").strip()
    if configured:
        try:
            jobs = int(configured)
        except ValueError:
            raise ValueError(f"ARGUS_JOBS={configured!r} is not a whole number; set it to the "
                             "number of worker processes (1 decides in this process)") from None
        if jobs < 1:
            raise ValueError(f"ARGUS_JOBS={jobs} must be at least 1")
        return jobs
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _run(index: int):
    solve, items = _work
    return solve(items[index])


def map_items(solve, items, jobs: int) -> list:
    """`[solve(item) for item in items]`, spread over `jobs` forked workers when it pays."""
    items = list(items)
    jobs = min(jobs, len(items))
    if jobs <= 1 or len(items) < MIN_PARALLEL or not _can_fork():
        return [solve(item) for item in items]
    global _work
    _work = (solve, items)
    try:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            # one item per task: solving times differ by orders of magnitude, so a static split
            # would leave one worker idle
            return pool.map(_run, range(len(items)), chunksize=1)
    finally:
        _work = None


def _can_fork() -> bool:
    # fork is the only start method that shares the walk's state; macOS forbids it after
    # some system frameworks have started threads, and Windows has no fork at all
    return sys.platform.startswith("linux") and multiprocessing.parent_process() is None

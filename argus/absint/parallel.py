"""Deciding independent obligations on several cores.

Workers are forked from the verifier (during the walk for a batch of final obligations, after
it for the rest), so they inherit every expression, helper variable and gather record without
pickling them; only verdicts (names and integers) travel back. Where fork is not
safe (no fork on the platform, other threads running, already inside a worker) or the batch is
small, the same function runs in this process.
"""

from __future__ import annotations

import multiprocessing
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

#: Fewer obligations than this are decided in-process: forking costs more than it saves.
MIN_PARALLEL = 12

_work = None


def _run(index: int):
    solve, items = _work
    return solve(items[index])


def map_items(solve, items, jobs: int, lost=None) -> list:
    """`[solve(item) for item in items]`, spread over `jobs` forked workers when it pays.

    `lost(item, reason)` answers for an item whose worker died (killed, out of memory, a solver
    crash); without it the failure is raised."""
    items = list(items)
    jobs = min(jobs, len(items))
    if jobs <= 1 or len(items) < MIN_PARALLEL or not can_fork():
        return [solve(item) for item in items]
    global _work
    _work = (solve, items)
    try:
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            # one item per task: solving times differ by orders of magnitude, so a static split
            # would leave one worker idle
            futures = [pool.submit(_run, index) for index in range(len(items))]
            return [_result(future, item, lost) for future, item in zip(futures, items)]
    finally:
        _work = None


class Batch:
    """Items decided by one forked child while this process goes on (the verifier keeps
    walking the kernel); `results()` waits for them. The child sees everything created before
    the fork, so items need no pickling; only the answers come back through a pipe."""

    def __init__(self, solve, items, lost):
        self.items, self.lost = list(items), lost
        receive, send = multiprocessing.Pipe(duplex=False)
        self._receive = receive
        self._process = multiprocessing.get_context("fork").Process(
            target=_answer_batch, args=(send, solve, self.items), daemon=True)
        self._process.start()
        send.close()

    def running(self) -> bool:
        return self._process.is_alive() and not self._receive.poll()

    def results(self) -> list:
        try:
            kind, payload = self._receive.recv()
        except EOFError:
            self._process.join()
            code = self._process.exitcode
            return [self.lost(item, f"a worker process died (exit code {code}); "
                                    "ARGUS_JOBS=1 decides in-process")
                    for item in self.items]
        finally:
            self._receive.close()
        self._process.join()
        if kind == "error":
            raise payload
        return payload


def _answer_batch(send, solve, items):
    try:
        answer = ("answers", [solve(item) for item in items])
    except Exception as error:  # raised again in the parent, as the in-process path would
        answer = ("error", error)
    send.send(answer)
    send.close()


def _result(future, item, lost):
    try:
        return future.result()
    except BrokenProcessPool as error:
        if lost is None:
            raise
        return lost(item, f"a worker process died ({error}); ARGUS_JOBS=1 decides in-process")


def can_fork() -> bool:
    """Forking shares the walk's state; it is unsafe with other threads running (one may hold
    a lock the child then waits for forever), unavailable on Windows, and forbidden on macOS
    once system frameworks have started; a worker does not fork again."""
    return (sys.platform.startswith("linux") and threading.active_count() == 1
            and multiprocessing.parent_process() is None)

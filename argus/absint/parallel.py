"""Deciding independent obligations on several cores.

Workers are forked from the verifier (during the walk for a batch of final obligations, after
it for the rest), so they inherit every expression, helper variable and gather record without
pickling them; only item numbers go out and verdicts come back. Where fork is not safe (no fork
on the platform, other threads running, already inside a worker) or the batch is small, the
same function runs in this process. Workers die with their parent (a parent-death signal, and
end of file on their pipe), ignore Ctrl-C (the parent stops them), and a worker that dies costs
only the item it was deciding: a fresh worker takes over the rest.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections import deque
from multiprocessing.connection import wait

#: Fewer obligations than this are decided in-process: forking costs more than it saves.
MIN_PARALLEL = 12

#: prctl(2) option: the signal the kernel sends this process when its parent dies
PR_SET_PDEATHSIG = 1

#: parent-side pipe ends of live workers: a new child closes its copies, so that each worker
#: sees end of file when the parent (the only holder left) goes away
_parent_ends: set = set()


def map_items(solve, items, jobs: int, lost=None) -> list:
    """`[solve(item) for item in items]`, spread over `jobs` forked workers when it pays.

    `lost(item, reason)` answers for an item whose worker died (killed, out of memory, a solver
    crash); without it the failure is raised. One item per message: solving times differ by
    orders of magnitude, so a static split would leave workers idle."""
    items = list(items)
    jobs = min(jobs, len(items))
    if jobs <= 1 or len(items) < MIN_PARALLEL or not can_fork():
        return [solve(item) for item in items]
    results: list = [None] * len(items)
    todo, busy = deque(range(len(items))), {}
    workers = [_Worker(solve, items) for _ in range(jobs)]
    try:
        while todo or busy:
            for worker in workers:
                if worker not in busy and todo:
                    busy[worker] = todo.popleft()
                    worker.send(busy[worker])
            ready = wait([worker.conn for worker in busy])
            for worker in [w for w in busy if w.conn in ready]:
                index = busy.pop(worker)
                try:
                    kind, payload = worker.conn.recv()
                except (EOFError, OSError):
                    code = worker.stop()
                    workers.remove(worker)
                    results[index] = _lost(lost, items[index], code)
                    if todo:
                        workers.append(_Worker(solve, items))
                    continue
                if kind == "error":
                    raise payload
                results[index] = payload
    finally:
        for worker in workers:
            worker.stop()
    return results


def _lost(lost, item, code):
    reason = (f"a worker process died (exit code {code}) deciding it; ARGUS_JOBS=1 decides "
              "in-process")
    if lost is None:
        raise RuntimeError(reason)
    return lost(item, reason)


class _Worker:
    """One forked process answering item numbers from a pipe until the pipe closes."""

    def __init__(self, solve, items):
        self.conn, child_end = multiprocessing.Pipe()
        _parent_ends.add(self.conn)
        self.process = multiprocessing.get_context("fork").Process(
            target=_serve, args=(child_end, solve, items, os.getpid()), daemon=True)
        _start(self.process)
        child_end.close()

    def send(self, index: int):
        try:
            self.conn.send(index)
        except (BrokenPipeError, OSError):
            pass  # it died; the next wait() sees end of file and counts the item lost

    def stop(self):
        """Close the pipe, kill the process if it is still there, reap it; its exit code."""
        _parent_ends.discard(self.conn)
        self.conn.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        return self.process.exitcode


def _start(process):
    """Fork with SIGINT blocked, so that a Ctrl-C cannot reach the child before it ignores it
    (the parent gets it when the mask is restored)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _serve(conn, solve, items, parent: int):
    _die_with_parent(parent)
    while True:
        try:
            index = conn.recv()
        except (EOFError, OSError):
            return
        try:
            answer = ("answer", solve(items[index]))
        except Exception as error:  # raised again in the parent, as the in-process path would
            answer = ("error", error)
        conn.send(answer)


def _die_with_parent(parent: int):
    """In a fresh child: be killed when the parent dies (Linux), leave Ctrl-C to the parent
    (which stops its workers and exits), and close the pipe ends that belong to the parent."""
    for end in list(_parent_ends):
        end.close()
    _parent_ends.clear()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl: end of file on the pipe still ends the worker between items
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # discards one that arrived since the fork
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class Batch:
    """Items decided by one forked child while this process goes on (the verifier keeps
    walking the kernel); `results()` waits for them. The child sees everything created before
    the fork, so items need no pickling; only the answers come back through a pipe."""

    def __init__(self, solve, items, lost):
        self.items, self.lost = list(items), lost
        receive, send = multiprocessing.Pipe(duplex=False)
        self._receive = receive
        _parent_ends.add(receive)
        self._process = multiprocessing.get_context("fork").Process(
            target=_answer_batch, args=(send, solve, self.items, os.getpid()), daemon=True)
        _start(self._process)
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
        except BaseException:  # Ctrl-C while waiting: the child's answers are no use now
            self._process.kill()
            self._process.join()
            raise
        finally:
            _parent_ends.discard(self._receive)
            self._receive.close()
        self._process.join()
        if kind == "error":
            raise payload
        return payload


def _answer_batch(send, solve, items, parent: int):
    _die_with_parent(parent)
    try:
        answer = ("answers", [solve(item) for item in items])
    except Exception as error:  # raised again in the parent, as the in-process path would
        answer = ("error", error)
    send.send(answer)
    send.close()


def can_fork() -> bool:
    """Forking shares the walk's state; it is unsafe with other threads running (one may hold
    a lock the child then waits for forever), unavailable on Windows, and forbidden on macOS
    once system frameworks have started; a worker does not fork again."""
    return (sys.platform.startswith("linux") and threading.active_count() == 1
            and multiprocessing.parent_process() is None)

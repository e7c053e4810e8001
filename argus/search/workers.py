"""Where evaluations run: `InlineWorkers` (this process, for tests and one-off checks),
`ProcessWorkers` (the default: spawned worker processes, one candidate each at a time, killed
with their whole process group on a per-candidate timeout or when the run ends), and
`RayWorkers` (`--backend ray`, the optional `argus[ray]` extra: candidates as Ray tasks on a
local or existing cluster). All three: `submit`, `wait`, `capacity`, `close`.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
import traceback
from multiprocessing.connection import wait as wait_ready

import attrs

from argus import env
from argus.search.evaluate import ERROR, TIMEOUT, Evaluation
from argus.search.space import Candidate, SearchError

#: tries to start a local Ray instance (its node must register within a fixed 30 s)
STARTS = 3


@attrs.frozen
class Task:
    candidate: Candidate
    move: str = ""
    planner: str = ""


def _finish(task: Task, evaluation: Evaluation) -> Evaluation:
    return attrs.evolve(evaluation, move=task.move, planner=task.planner)


def _failed(task: Task, status: str, message: str, wall_s: float) -> Evaluation:
    return Evaluation(task.candidate.key, task.candidate, status, "worker", message,
                      wall_s=wall_s, move=task.move, planner=task.planner)


def run_task(evaluator, task: Task) -> Evaluation:
    """Evaluate one task; an unexpected exception becomes an `error` evaluation (it is a bug in
    a stage, recorded with its last frames, and the run goes on)."""
    started = time.perf_counter()
    try:
        return _finish(task, evaluator(task.candidate))
    except Exception as err:
        frames = traceback.format_exception(err)[-3:]
        return _failed(task, ERROR, f"{type(err).__name__}: {err}\n{''.join(frames)}",
                       time.perf_counter() - started)


class InlineWorkers:
    """Evaluates in the calling process, one at a time (no per-candidate timeout)."""

    def __init__(self, evaluator):
        self.evaluator, self.queue = evaluator, []

    @property
    def capacity(self) -> int:
        return 0 if self.queue else 1

    @property
    def busy(self) -> int:
        return len(self.queue)

    def submit(self, task: Task) -> None:
        self.queue.append(task)

    def wait(self, timeout: float | None = None) -> list[Evaluation]:
        done = [run_task(self.evaluator, task) for task in self.queue]
        self.queue.clear()
        return done

    def close(self) -> None:
        self.queue.clear()


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker if the run's process dies without closing it (kill -9), since
    its own process group keeps it from the terminal's signals."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the closed pipe still ends an idle worker


def _serve(evaluator, conn, single_verifier_job: bool) -> None:
    """Worker process body: its own process group (so the parent can kill it with everything
    it started), Ctrl-C left to the parent, then evaluate tasks until told to stop."""
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    if single_verifier_job:
        env.default_jobs(1)
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        conn.send(run_task(evaluator, task))


@attrs.define
class _Slot:
    process: multiprocessing.Process
    conn: object
    task: Task | None = None
    deadline: float = 0.0
    started: float = 0.0


class ProcessWorkers:
    """`jobs` spawned worker processes; a candidate past `timeout_s` is killed (its process
    group) and recorded as a timeout, and the slot gets a fresh process."""

    def __init__(self, evaluator, jobs: int, timeout_s: float):
        if jobs < 1:
            raise SearchError(f"--jobs {jobs}: give at least one worker process")
        self.evaluator, self.timeout_s = evaluator, timeout_s
        self.context = multiprocessing.get_context("spawn")
        self.single_verifier_job = jobs > 1 and env.configured_jobs() is None
        self.slots = [self._start() for _ in range(jobs)]

    def _start(self) -> _Slot:
        parent, child = self.context.Pipe()
        process = self.context.Process(target=_serve, daemon=True, name="argus-tune-worker",
                                       args=(self.evaluator, child, self.single_verifier_job))
        process.start()
        child.close()
        return _Slot(process, parent)

    @property
    def capacity(self) -> int:
        return sum(slot.task is None for slot in self.slots)

    @property
    def busy(self) -> int:
        return len(self.slots) - self.capacity

    @property
    def pids(self) -> list[int]:
        return [slot.process.pid for slot in self.slots]

    def submit(self, task: Task) -> None:
        slot = next(s for s in self.slots if s.task is None)
        now = time.monotonic()
        slot.task, slot.started, slot.deadline = task, now, now + self.timeout_s
        slot.conn.send(task)

    def wait(self, timeout: float | None = None) -> list[Evaluation]:
        """Results that are ready within `timeout` seconds (or at the nearest deadline)."""
        busy = [s for s in self.slots if s.task is not None]
        if not busy:
            return []
        now = time.monotonic()
        until = min(s.deadline for s in busy) - now
        limit = max(0.0, until if timeout is None else min(timeout, until))
        ready = wait_ready([s.conn for s in busy], limit)
        done = []
        for index, slot in enumerate(self.slots):
            if slot.task is None:
                continue
            if slot.conn in ready:
                try:
                    done.append(slot.conn.recv())
                    slot.task = None
                    continue
                except (EOFError, OSError):
                    message = (f"the worker process died (exit status "
                               f"{slot.process.exitcode}) while evaluating this candidate")
                    done.append(_failed(slot.task, ERROR, message,
                                        time.monotonic() - slot.started))
            elif time.monotonic() >= slot.deadline:
                done.append(_failed(slot.task, TIMEOUT, f"evaluation exceeded the per-candidate "
                                    f"limit of {self.timeout_s:g} s and was killed",
                                    time.monotonic() - slot.started))
            else:
                continue
            self._kill(slot)
            self.slots[index] = self._start()
        return done

    @staticmethod
    def _kill(slot: _Slot) -> None:
        try:
            os.killpg(slot.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            slot.process.kill()
        slot.process.join()
        slot.conn.close()

    def close(self) -> None:
        """Stop every worker now (pending candidates are dropped, not recorded)."""
        for slot in self.slots:
            self._kill(slot)
        self.slots = []


class RayWorkers:
    """Candidates as Ray tasks (`argus[ray]`): on the cluster at `address` when given (or
    RAY_ADDRESS), else on a local Ray instance started for this run and shut down after it."""

    def __init__(self, evaluator, jobs: int, timeout_s: float, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise SearchError("--backend ray needs Ray", fix="pip install 'ray[default]' (in "
                              "an Argus checkout: pip install -e '.[ray]')") from None
        self.ray, self.jobs, self.timeout_s = ray, jobs, timeout_s
        self.owned = not ray.is_initialized()
        # Ray's default 30 s for its agents to register is too short on a loaded machine (the
        # raylet then aborts waiting for the metrics agent's port file)
        os.environ.setdefault("RAY_agent_register_timeout_ms", "300000")
        address = address or os.environ.get("RAY_ADDRESS")
        if self.owned:
            # a local instance imports what this process imports (as spawned workers do)
            path = os.pathsep.join(p for p in sys.path if p)
            options = {"address": address} if address else {
                "num_cpus": jobs, "include_dashboard": False,
                "runtime_env": {"env_vars": {"PYTHONPATH": path}}}
            for attempt in range(STARTS):
                try:
                    ray.init(log_to_driver=False, **options)
                    break
                except Exception as err:  # the node did not come up in Ray's fixed 30 s
                    ray.shutdown()
                    if address:
                        raise SearchError(
                            f"--backend ray: could not connect to the Ray cluster at "
                            f"{address} ({err})", fix="check `ray status` on that machine "
                            "and the address (HOST:PORT of its head, or auto), or leave out "
                            "--ray-address to start a local instance") from None
                    if attempt == STARTS - 1 or "timed out during startup" not in str(err):
                        raise SearchError(f"--backend ray: the local Ray instance did not "
                                          f"start ({err}); retry on a less loaded machine, or "
                                          "give --ray-address") from None
        self.remote = ray.remote(max_retries=0)(run_task)
        self.evaluator_ref = ray.put(evaluator)
        self.pending: dict = {}  # object ref -> (task, started, deadline)

    @property
    def capacity(self) -> int:
        return max(0, self.jobs - len(self.pending))

    @property
    def busy(self) -> int:
        return len(self.pending)

    def submit(self, task: Task) -> None:
        now = time.monotonic()
        ref = self.remote.remote(self.evaluator_ref, task)
        self.pending[ref] = (task, now, now + self.timeout_s)

    def wait(self, timeout: float | None = None) -> list[Evaluation]:
        if not self.pending:
            return []
        until = min(d for _, _, d in self.pending.values()) - time.monotonic()
        limit = max(0.0, until if timeout is None else min(timeout, until))
        ready, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=limit)
        done = []
        for ref in ready:
            task, started, _ = self.pending.pop(ref)
            try:
                done.append(self.ray.get(ref))
            except Exception as err:  # the Ray task itself failed (worker died, cancelled)
                done.append(_failed(task, ERROR, f"Ray task failed: {err}",
                                    time.monotonic() - started))
        now = time.monotonic()
        for ref, (task, started, deadline) in list(self.pending.items()):
            if now >= deadline:
                self.ray.cancel(ref, force=True)
                del self.pending[ref]
                done.append(_failed(task, TIMEOUT, f"evaluation exceeded the per-candidate "
                                    f"limit of {self.timeout_s:g} s and was cancelled",
                                    now - started))
        return done

    def close(self) -> None:
        for ref in list(self.pending):
            self.ray.cancel(ref, force=True)
        self.pending.clear()
        if self.owned:
            self.ray.shutdown()


def make_workers(evaluator, *, jobs: int, timeout_s: float, backend: str = "local",
                 address: str | None = None):
    """Workers for a run: `jobs` 0 evaluates in this process; backend local | ray."""
    if backend == "ray":
        return RayWorkers(evaluator, max(jobs, 1), timeout_s, address)
    if backend != "local":
        raise SearchError(f"--backend {backend!r}: choose local or ray")
    if jobs == 0:
        return InlineWorkers(evaluator)
    return ProcessWorkers(evaluator, jobs, timeout_s)

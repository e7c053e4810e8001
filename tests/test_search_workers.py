"""Where evaluations run: the process pool kills a candidate past its time limit together with
everything it started; Ctrl-C on `argus tune` leaves a valid run file and no orphan process,
and resuming evaluates nothing twice; the Ray backend on one machine."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes.landscape import Sleeper

from argus.search.space import Candidate, Problem, default_candidate
from argus.search.store import read
from argus.search.workers import ProcessWorkers, RayWorkers, Task

GEMM = Problem("gemm", {"M": 256, "N": 256, "K": 256})
ROOT = Path(__file__).resolve().parents[1]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def descendants(pid: int) -> set[int]:
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().split(") ")[1].split()[1])
            except (OSError, IndexError, ValueError):  # gone meanwhile
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def test_a_candidate_past_its_time_limit_is_killed_and_the_slot_refilled():
    workers = ProcessWorkers(Sleeper(60.0), jobs=1, timeout_s=2.0)
    try:
        first = workers.pids[0]
        workers.submit(Task(Candidate("gemm", {}, source="sleep"), "default", "offline"))
        started = time.monotonic()
        done = []
        while not done:
            done = workers.wait(1.0)
        assert done[0].status == "timeout" and "limit of 2 s" in done[0].message
        assert time.monotonic() - started < 30
        assert not alive(first) and workers.pids[0] != first and workers.capacity == 1
    finally:
        workers.close()
    assert not any(alive(pid) for pid in [first, *workers.pids])


def test_ctrl_c_leaves_a_resumable_run_and_no_orphans(tmp_path):
    out = tmp_path / "tune"
    run_file = out / "run.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ARGUS_JOBS": "1"}
    command = [sys.executable, "-c", "from argus.cli import main; main()", "tune", "moe_gemm",
               "--shape", "256x128x4x128", "--budget", "3", "--jobs", "1", "--out", str(out),
               "--no-screen"]
    tune = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    seen: set[int] = set()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and tune.poll() is None:
        seen |= descendants(tune.pid)
        if run_file.exists() and '"kind": "eval"' in run_file.read_text():
            break
        time.sleep(0.2)
    assert tune.poll() is None, tune.communicate()
    seen |= descendants(tune.pid)
    assert seen, "the run should have started a worker process"
    tune.send_signal(signal.SIGINT)
    _, err = tune.communicate(timeout=60)
    assert tune.returncode == 130, err
    time.sleep(0.5)
    assert not [pid for pid in seen if alive(pid)], "orphaned worker processes"
    events = read(run_file)
    assert events[-1]["kind"] == "end" and "interrupted" in events[-1]["reason"]
    first = [e["evaluation"]["key"] for e in events if e["kind"] == "eval"]
    assert len(first) >= 1
    # resuming with the budget already spent evaluates nothing again (continuing a run is
    # covered in test_search.py)
    resumed = subprocess.run(command[:3] + ["tune", "--resume", str(run_file), "--budget",
                                            str(len(first)), "--jobs", "0"],
                             env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode in (0, 3), resumed.stderr
    keys = [e["evaluation"]["key"] for e in read(run_file) if e["kind"] == "eval"]
    assert keys == first
    assert read(run_file)[-1]["reason"].startswith("evaluation budget")
    report = subprocess.run(command[:3] + ["tune", "--report", str(run_file)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0 and f"{len(keys)} evaluations" in report.stdout


def test_ray_backend_evaluates_cancels_and_survives_a_killed_worker(tmp_path):
    """On a local Ray instance (CI installs the argus[ray] extra): a task completes, one past
    its limit is cancelled, a killed worker process costs exactly its candidate (the next one
    is evaluated), a whole run completes and Ctrl-C leaves a valid, resumable run file."""
    pytest.importorskip("ray", reason="the optional argus[ray] extra is not installed")
    from fakes.landscape import PidSleeper

    pid_file = tmp_path / "worker.pid"
    # the first task waits for Ray's worker process to start and import Argus: minutes when loaded
    workers = RayWorkers(PidSleeper(str(pid_file), 60.0), jobs=1, timeout_s=240.0)

    def finish():
        deadline, done = time.monotonic() + 300, []
        while not done and time.monotonic() < deadline:
            done = workers.wait(1.0)
        return done

    try:
        quick = Candidate("gemm", default_candidate(GEMM).params)
        workers.submit(Task(quick, "default", "offline"))
        done = finish()  # the first task also waits for Ray's worker process to start
        assert done[0].status == "ok" and done[0].key == quick.key and done[0].move == "default"
        workers.timeout_s = 3.0
        workers.submit(Task(Candidate("gemm", {}, source="sleep"), "optuna", "offline"))
        done = finish()
        assert done[0].status == "timeout" and "cancelled" in done[0].message
        assert workers.busy == 0
        workers.timeout_s = 300.0  # each task below starts a fresh Ray worker process
        pid_file.unlink(missing_ok=True)
        doomed = Candidate("gemm", {"block_m": 128}, source="sleep")
        workers.submit(Task(doomed, "optuna", "offline"))
        deadline = time.monotonic() + 300
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        done = finish()
        assert len(done) == 1 and done[0].key == doomed.key
        assert done[0].status == "error" and "Ray task failed" in done[0].message
        after = Candidate("gemm", {"block_m": 256})
        workers.submit(Task(after, "grow_m", "offline"))
        done = finish()
        assert done[0].status == "ok" and done[0].key == after.key
        _whole_runs_on(workers, tmp_path)
    finally:
        workers.close()


def _whole_runs_on(workers, tmp_path):
    """The loop on those Ray workers: a run completes its budget (every evaluation and the end
    line in the run file), and Ctrl-C in a second one leaves a valid file ending in the
    interrupted line that --resume continues (the real close, which shuts the instance)."""
    from argus.search.budget import Budget
    from argus.search.loop import run
    from argus.search.planners import SearchState
    from argus.search.planners.offline import OfflinePlanner
    from argus.search.store import Store

    class KeepOpen:  # the first run must not shut the shared instance down
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def close(self):
            pass

    def planner():
        return OfflinePlanner(GEMM, 0, legal=lambda c: "", rewrites=False)

    header = {"problem": GEMM.to_dict(), "planner": "offline", "budget": {}}
    store = Store(tmp_path / "ray-run.jsonl", header)
    progress = run(SearchState(GEMM), planner(), KeepOpen(workers), store, Budget(3))
    events = read(tmp_path / "ray-run.jsonl")
    assert [e["kind"] for e in events] == ["run", "eval", "eval", "eval", "end"]
    assert progress.stopped.startswith("evaluation budget")
    assert all(e["evaluation"]["status"] == "ok" for e in events if e["kind"] == "eval")

    def interrupt(progress):
        if progress.clock.done:
            raise KeyboardInterrupt
    interrupted = Store(tmp_path / "ray-ctrl-c.jsonl", header)
    with pytest.raises(KeyboardInterrupt):
        run(SearchState(GEMM), planner(), workers, interrupted, Budget(5), interrupt)
    events = read(tmp_path / "ray-ctrl-c.jsonl")
    assert events[-1]["kind"] == "end" and "interrupted" in events[-1]["reason"]
    assert [e["kind"] for e in events[1:-1]] == ["eval"] and not workers.pending
    resumed = Store(tmp_path / "ray-ctrl-c.jsonl", header, resume=True)
    assert [e.key for e in resumed.evaluations] == [events[1]["evaluation"]["key"]]


def test_a_ray_cluster_that_cannot_be_reached_is_named_with_the_fix(monkeypatch):
    """--ray-address that does not answer: the error names the address (not "the local Ray
    instance did not start") and says what to check."""
    import sys
    import types

    from argus.search.space import SearchError
    from argus.search.workers import RayWorkers

    fake = types.ModuleType("ray")
    fake.is_initialized = lambda: False
    fake.shutdown = lambda: None

    def init(**options):
        raise ConnectionError(f"could not reach {options.get('address')}")
    fake.init = init
    monkeypatch.setitem(sys.modules, "ray", fake)
    with pytest.raises(SearchError, match="could not connect to the Ray cluster at 10.0.0.9:6379"
                       ) as err:
        RayWorkers(object(), 1, 10.0, address="10.0.0.9:6379")
    assert "ray status" in err.value.fix

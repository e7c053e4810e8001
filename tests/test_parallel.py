"""The verifier's worker pool under faults, with real signals on real processes: a worker that
is killed costs only its own item; workers die with their parent (SIGKILL, SIGTERM) and let go
of the caller's pipes; Ctrl-C stops `argus verify` promptly with status 130. Every wait is
bounded."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from argus.absint.parallel import can_fork, map_items

ROOT = Path(__file__).resolve().parent.parent

#: a parent that decides 40 items on 2 workers; every item prints its worker's pid and sleeps
SLEEPER = textwrap.dedent("""
    import os, sys, time
    from argus.absint.parallel import map_items

    def solve(item):
        os.write(1, f"worker {os.getpid()}\\n".encode())  # one write: lines never interleave
        time.sleep(120)
        return item

    try:
        map_items(solve, range(40), 2)
    except KeyboardInterrupt:
        sys.exit(130)
""")


def gone(pid: int) -> bool:
    """The process no longer runs (reaped, or a zombie nobody has reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def start_sleeper():
    """The SLEEPER parent in its own session, and the pids of its two workers."""
    parent = subprocess.Popen([sys.executable, "-c", SLEEPER], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True, start_new_session=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    workers, seen = set(), ""
    deadline = time.monotonic() + 120
    while len(workers) < 2 and time.monotonic() < deadline:
        line = parent.stdout.readline()
        if not line:
            break
        seen += line
        workers.update(int(pid) for pid in re.findall(r"worker (\d+)", line))
    assert len(workers) == 2, f"the workers never started: {seen!r}"
    return parent, workers


def test_a_killed_worker_costs_only_its_own_item():
    assert can_fork(), f"this test needs forked workers; threads: {threading.enumerate()}"
    lost = []

    def solve(item):
        if item == 5:
            os.kill(os.getpid(), signal.SIGKILL)
        return item * 2

    answers = map_items(solve, range(30), 2, lambda item, reason: lost.append(reason) or -1)
    assert answers == [-1 if i == 5 else 2 * i for i in range(30)]
    assert len(lost) == 1 and "exit code -9" in lost[0]


def test_without_a_lost_handler_a_dead_worker_is_an_error():
    # in-process (no fork) the worker's exit would end the test session itself
    assert can_fork(), f"this test needs forked workers; threads: {threading.enumerate()}"

    def solve(item):
        if item == 3:
            os._exit(7)
        return item

    with pytest.raises(RuntimeError, match="exit code 7"):
        map_items(solve, range(20), 2)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_die_with_their_parent_and_release_its_pipes(sig):
    parent, workers = start_sleeper()
    os.kill(parent.pid, sig)
    parent.wait(timeout=30)
    assert wait_until(lambda: all(gone(pid) for pid in workers), 10), "orphaned workers"
    # nobody holds the write end of the caller's pipe any more: end of file, not a hang
    assert parent.stdout.read() == ""


def test_ctrl_c_to_the_process_group_stops_parent_and_workers():
    parent, workers = start_sleeper()
    started = time.monotonic()
    os.killpg(parent.pid, signal.SIGINT)
    assert parent.wait(timeout=30) == 130
    assert time.monotonic() - started < 10
    assert wait_until(lambda: all(gone(pid) for pid in workers), 10)


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listing:
            return [int(p) for p in listing.read().split()]
    except FileNotFoundError:
        return []


def test_ctrl_c_during_argus_verify_exits_130_promptly():
    command = [sys.executable, "-m", "argus.cli", "verify", "attention_fwd", "--param",
               "head_dim=128", "--jobs", "2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert wait_until(lambda: children(run.pid) or run.poll() is not None, 240)
    workers = children(run.pid)
    assert workers, "verify finished before it forked a worker"
    os.killpg(run.pid, signal.SIGINT)
    started = time.monotonic()
    out, err = run.communicate(timeout=60)
    assert run.returncode == 130, (out[-2000:], err)
    assert time.monotonic() - started < 15
    # one line, not a KeyboardInterrupt traceback (Python itself may print an "Exception
    # ignored" note if the interrupt lands in a weakref callback; the exit is still prompt)
    assert err.rstrip().endswith("argus: interrupted")
    assert wait_until(lambda: all(gone(pid) for pid in workers), 10)


def test_ctrl_c_inside_a_z3_check_is_an_interrupt_not_an_unknown_verdict():
    """z3 catches SIGINT while it solves and answers unknown; `argus verify` then went on and
    reported an Unknown obligation (exit 1) instead of stopping (130). The check in the
    verifier's process raises KeyboardInterrupt."""
    import threading

    import z3

    from argus.smt.verdict import checked

    x, y, z = z3.Ints("x y z")
    solver = z3.Solver()
    solver.set("timeout", 30_000)
    solver.add(x * x * x + y * y * y == z * z * z, x > 1, y > 1, z > 1)   # no answer soon
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            checked(solver)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 10


def test_an_interrupt_that_surfaces_as_another_error_still_exits_130(monkeypatch):
    # Ctrl-C inside a C call (ctypes converting a z3 call's arguments) surfaces as ArgumentError
    import ctypes

    import click
    from click.testing import CliRunner

    from argus import cli

    @click.group(cls=cli._Commands)
    def group():
        pass

    @group.command()
    def solve():
        cli._interrupts.append(signal.SIGINT)
        raise ctypes.ArgumentError("argument 1: KeyboardInterrupt: ")

    @group.command()
    def crash():
        raise ctypes.ArgumentError("a real bug")

    monkeypatch.setattr(cli, "_interrupts", [])
    interrupted = CliRunner().invoke(group, ["solve"])
    assert interrupted.exit_code == 130 and "interrupted" in interrupted.output
    monkeypatch.setattr(cli, "_interrupts", [])
    crashed = CliRunner().invoke(group, ["crash"])
    assert crashed.exit_code == 1 and isinstance(crashed.exception, ctypes.ArgumentError)

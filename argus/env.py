"""Argus's environment knobs, parsed in this one place: ARGUS_DEBUG (debug level 0-4), ARGUS_JOBS
(worker processes) and ARGUS_CACHE (download cache). A malformed value is an `EnvError` naming
the variable and the values it takes; debug output goes to stderr through `debug()`.

Each distinct setting is parsed once; lookups re-read the raw strings (a dictionary access), so
a changed environment (a test, a CLI invocation) is honoured and never half-applied.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import attrs

from argus.errors import ArgusError

#: ARGUS_DEBUG levels: what each adds to stderr.
DEBUG_LEVELS = {0: "nothing", 1: "verdicts", 2: "traced IR", 3: "assembly", 4: "emulator trace"}
JOBS_FIX = ("set ARGUS_JOBS to the number of worker processes (1 decides in this process), or "
            "unset it to use every core")


class EnvError(ArgusError, ValueError):
    """An ARGUS_* environment variable holds a value Argus cannot use."""


@attrs.frozen
class Env:
    """The parsed settings."""

    debug: int = 0
    jobs: int | None = None       # None: every core this process may run on
    cache: Path = attrs.field(factory=lambda: Path.home() / ".cache" / "argus")


def current() -> Env:
    """The settings of the present environment."""
    return _parse(os.environ.get("ARGUS_DEBUG", ""), os.environ.get("ARGUS_JOBS", ""),
                  os.environ.get("ARGUS_CACHE", ""))


@functools.lru_cache(maxsize=16)
def _parse(debug: str, jobs: str, cache: str) -> Env:
    debug, jobs, cache = debug.strip(), jobs.strip(), cache.strip()
    level = 0
    if debug:
        if not debug.isdigit() or int(debug) not in DEBUG_LEVELS:
            levels = ", ".join(f"{n} {what}" for n, what in DEBUG_LEVELS.items())
            raise EnvError(f"ARGUS_DEBUG={debug!r} is not a debug level",
                           fix=f"set ARGUS_DEBUG to one of {levels}, or unset it")
        level = int(debug)
    workers = None
    if jobs:
        try:
            workers = int(jobs)
        except ValueError:
            raise EnvError(f"ARGUS_JOBS={jobs!r} is not a whole number", fix=JOBS_FIX) from None
        if workers < 1:
            raise EnvError(f"ARGUS_JOBS={workers} must be at least 1", fix=JOBS_FIX)
    return Env(level, workers, Path(cache).expanduser()) if cache else Env(level, workers)


def debug_level() -> int:
    """ARGUS_DEBUG: 0 quiet, 1 verdicts, 2 traced IR, 3 assembly, 4 emulator trace."""
    return current().debug


def jobs() -> int:
    """ARGUS_JOBS if set, else the cores this process may run on."""
    configured = current().jobs
    if configured is not None:
        return configured
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cache_dir() -> Path:
    """ARGUS_CACHE, else ~/.cache/argus: where downloaded vendor wheels are kept."""
    return current().cache


def debug(level: int, message: str) -> None:
    """Print `message` to stderr when ARGUS_DEBUG is at least `level`."""
    if current().debug >= level:
        print(message, file=sys.stderr)

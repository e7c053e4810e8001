"""Argus's environment knobs, read in this one place (`KNOBS` lists them with what each does):
ARGUS_DEBUG, ARGUS_JOBS, ARGUS_CACHE, ARGUS_REPRO_DIR, ARGUS_SMT_TIMEOUT_MS, ARGUS_HIP_LIBRARY and
the LLM planner's
ARGUS_LLM_*. A malformed value is an `EnvError` naming the variable and the values it takes;
debug output goes to stderr through `debug()`.

Each distinct setting is parsed once; lookups re-read the raw strings (a dictionary access), so
a changed environment (a test, a CLI invocation) is honoured and never half-applied.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import sys
import tempfile
from pathlib import Path

import attrs

from argus.errors import ArgusError

#: Every environment variable Argus reads, and what it sets. Nothing outside this module reads one.
KNOBS = {
    "ARGUS_DEBUG": "debug level 0-4 on stderr: verdicts, traced IR, assembly, emulator trace",
    "ARGUS_JOBS": "worker processes deciding obligations (1: in this process; unset: every core)",
    "ARGUS_CACHE": "where downloaded vendor wheels are kept (default ~/.cache/argus)",
    "ARGUS_REPRO_DIR": "where argus.testing writes reproducer scripts (default "
                       "$TMPDIR/argus-repro)",
    "ARGUS_SMT_TIMEOUT_MS": "the solver's limit per verifier query in milliseconds (default "
                            "10000; raise it on a loaded machine, where queries run slower)",
    "ARGUS_COMPILE_VERIFY": "whether argus.compile proves a kernel first when not told "
                            "(verify=): 1 (default) or 0",
    "ARGUS_HIP_LIBRARY": "path of libamdhip64.so, tried before the system's and ROCm's",
    "ARGUS_LLM_BASE_URL": "the LLM planner's OpenAI-compatible server, e.g. "
                          "http://localhost:11434/v1",
    "ARGUS_LLM_MODEL": "the model the LLM planner asks",
    "ARGUS_LLM_API_KEY": "the LLM server's API key (else OPENAI_API_KEY; local servers need none)",
}
#: read when ARGUS_LLM_API_KEY is unset, as the openai client itself would
LLM_KEY_FALLBACK = "OPENAI_API_KEY"

#: ARGUS_DEBUG levels: what each adds to stderr.
DEBUG_LEVELS = {0: "nothing", 1: "verdicts", 2: "traced IR", 3: "assembly", 4: "emulator trace"}
JOBS_FIX = ("set ARGUS_JOBS to the number of worker processes (1 decides in this process), or "
            "unset it to use every core")


class EnvError(ArgusError, ValueError):
    """An ARGUS_* environment variable holds a value Argus cannot use."""

    kind = "environment"


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


def smt_timeout_ms(default: int) -> int:
    """ARGUS_SMT_TIMEOUT_MS: the verifier's per-query solver limit when a call gives none
    (`default`, argus.smt.DEFAULT_TIMEOUT_MS, when unset)."""
    text = (_text("ARGUS_SMT_TIMEOUT_MS") or "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise EnvError(f"ARGUS_SMT_TIMEOUT_MS={text!r} is not a positive number of "
                       "milliseconds", fix=f"set ARGUS_SMT_TIMEOUT_MS to e.g. 60000, or unset "
                       f"it for the default {default}")
    return int(text)


def compile_verifies() -> bool:
    """ARGUS_COMPILE_VERIFY: whether `argus.compile` proves a kernel before lowering it when
    not told (`verify=`); on unless set to 0 (Argus' own test suite sets 0 and proves where
    it means to)."""
    text = (_text("ARGUS_COMPILE_VERIFY") or "1").strip()
    if text not in ("0", "1"):
        raise EnvError(f"ARGUS_COMPILE_VERIFY={text!r} is not 0 or 1",
                       fix="set ARGUS_COMPILE_VERIFY=1 (prove before compiling, the default) "
                           "or 0 (compile without proving), or unset it")
    return text == "1"


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


@contextlib.contextmanager
def cache_lock(name: str):
    """Hold an exclusive lock on `name` in the cache directory: processes that fill the same
    cache entry at once (test workers, search workers, a bench) take turns instead of one
    deleting what another is unpacking."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def configured_jobs() -> int | None:
    """ARGUS_JOBS as the user set it, None when unset (`jobs()` then counts the cores)."""
    return current().jobs


def default_jobs(workers: int) -> None:
    """Set ARGUS_JOBS to `workers` for this process and the processes it starts, unless the
    user set it: a search worker's verifier then decides in-process instead of each of N
    workers starting a pool of every core."""
    os.environ.setdefault("ARGUS_JOBS", str(workers))


def repro_dir() -> Path:
    """ARGUS_REPRO_DIR, else argus-repro/ in the temporary directory."""
    folder = _text("ARGUS_REPRO_DIR")
    return Path(folder).expanduser() if folder else Path(tempfile.gettempdir()) / "argus-repro"


def hip_library() -> str | None:
    """ARGUS_HIP_LIBRARY: a HIP runtime to try first, None when unset."""
    return _text("ARGUS_HIP_LIBRARY")


def llm_server() -> tuple[str | None, str | None]:
    """(ARGUS_LLM_BASE_URL, ARGUS_LLM_MODEL), each None when unset."""
    return _text("ARGUS_LLM_BASE_URL"), _text("ARGUS_LLM_MODEL")


def llm_api_key(variable: str | None = None) -> str | None:
    """The LLM server's key: from `variable` when the user named one, else ARGUS_LLM_API_KEY,
    else OPENAI_API_KEY; None when none of them is set."""
    names = [variable] if variable else ["ARGUS_LLM_API_KEY", LLM_KEY_FALLBACK]
    return next((key for key in map(_text, names) if key), None)


def _text(name: str) -> str | None:
    """A free-text variable, stripped; None when unset or blank."""
    return os.environ.get(name, "").strip() or None


def debug(level: int, message: str) -> None:
    """Print `message` to stderr when ARGUS_DEBUG is at least `level`."""
    if current().debug >= level:
        print(message, file=sys.stderr)

"""Trace kernel source that a planner (an LLM) wrote, in a separate process with a wall-clock
limit, an address-space limit and a CPU-time limit; only the IR text comes back, parsed here.

The parent never executes the source: verification, interpretation and compilation all work on
the returned IR. Run as `python -m argus.search.sandbox` with a JSON request on stdin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import attrs

#: defaults for one trace of model-written source
TIME_LIMIT_S = 20.0
MEMORY_LIMIT_MB = 2048
STARTUP_S = 120.0  # for the child's imports, before the time limit starts


@attrs.frozen
class SandboxResult:
    """The traced IR text, or why there is none (`failure` is error | timeout | memory)."""

    ir_text: str | None
    failure: str = ""
    message: str = ""


def trace_source(source: str, params: dict, *, time_limit_s: float = TIME_LIMIT_S,
                 memory_limit_mb: int = MEMORY_LIMIT_MB) -> SandboxResult:
    """Trace the single `@kernel` function in `source` with `params` in a child process. The
    time limit starts once the child has imported Argus (a loaded machine must not turn an
    import into a timeout)."""
    import select

    request = json.dumps({"source": source, "params": params, "memory_mb": memory_limit_mb,
                          "cpu_s": max(1, int(time_limit_s) + 1)})
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen([sys.executable, "-m", "argus.search.sandbox"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        ready, _, _ = select.select([child.stdout], [], [], STARTUP_S)
        if not ready or child.stdout.readline().strip() != "ready":
            child.kill()
            _, err = child.communicate()
            tail = err.strip().splitlines()[-1:] or ["no answer"]
            return SandboxResult(None, "error", f"the tracing process did not start: {tail[0]}")
        out, err = child.communicate(request, timeout=time_limit_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return SandboxResult(None, "timeout", f"tracing the edited source took longer than "
                                              f"{time_limit_s:g} s and was killed")
    except BaseException:
        child.kill()  # Ctrl-C while tracing: no orphan
        child.wait()
        raise
    if child.returncode == 0:
        answer = json.loads(out)
        if "ir" in answer:
            return SandboxResult(answer["ir"])
        return SandboxResult(None, "error", answer["error"])
    if "MemoryError" in err:
        return SandboxResult(None, "memory", f"the edited source exceeded {memory_limit_mb} MB")
    tail = err.strip().splitlines()[-1:] or [f"exit status {child.returncode}"]
    return SandboxResult(None, "error", f"the tracing process died: {tail[0]}")


def _child() -> None:
    import resource

    from argus.ir.text import print_kernel
    from argus.lang.kernel import KernelDef

    print("ready", flush=True)
    request = json.loads(sys.stdin.read())
    limit = request["memory_mb"] * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    used = resource.getrusage(resource.RUSAGE_SELF)
    cpu = int(used.ru_utime + used.ru_stime) + request["cpu_s"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    namespace: dict = {"__name__": "argus_edit"}
    try:
        exec(compile(request["source"], "<edit>", "exec"), namespace)
        kernels = [v for v in namespace.values() if isinstance(v, KernelDef)]
        if len(kernels) != 1:
            raise ValueError(f"the source must define exactly one @T.kernel function; it "
                             f"defines {len(kernels)}")
        answer = {"ir": print_kernel(kernels[0].trace(**request["params"]))}
    except MemoryError:
        raise
    except Exception as err:  # the model's code may raise anything; report it as data
        answer = {"error": f"{type(err).__name__}: {err}"}
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    _child()

"""The one road from a kernel to its results: trace -> verify -> interpret -> compile -> emulate
-> time, taken by the `argus` facade, the CLI, the demo and the search.

`road(kernel, until=...)` runs the stages in order, one line each; `stage()` is the one place
that caches a stage's result under (stage, `ir_digest(ir)`, options), prints it between stages
when ARGUS_DEBUG asks (xdsl-opt's --print-between-passes), and turns whatever a stage refuses
into a `StageError(stage, outcome, message)` whose outcome the search maps to a verdict. Each
stage's logic lives in its own room (kernels.resolve, absint, kernels.check,
asm.lower.compiled, isa_cdna3.perf.sample); here they meet.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Sequence
from typing import Any

import attrs

from argus import env
from argus.absint.concrete import run as interpret
from argus.absint.verify import verify
from argus.asm.launch import emulate, kernel_arguments
from argus.asm.lower.compiled import CompiledKernel, compile
from argus.check import Check, frozen
from argus.errors import ArgusError
from argus.ir import ops as O
from argus.ir.sizes import checked_sizes
from argus.ir.text import ir_digest
from argus.isa_cdna3.abi import LaunchError
from argus.isa_cdna3.emu import EmulatorError
from argus.isa_cdna3.emu.trace import WaveEvents
from argus.isa_cdna3.perf import sample
from argus.isa_cdna3.perf.estimate import Timing, statics_of
from argus.isa_cdna3.perf.params import Calibrated, PerfError, profile
from argus.kernels import library
from argus.kernels.check import Case, compare
from argus.kernels.resolve import as_kernel

STAGES = ("trace", "verify", "interpret", "compile", "emulate", "time")
#: a StageError's outcome: the input cannot take this road (invalid), the proof failed (refuted,
#: unknown), the output is not numpy's (wrong), the tools failed (error), a budget ran out
#: (timeout)
OUTCOMES = ("invalid", "refuted", "unknown", "wrong", "error", "timeout")
#: the ARGUS_DEBUG level (env.DEBUG_LEVELS) at which each stage's result is printed
DUMP_LEVEL = {"trace": 2, "verify": 1, "interpret": 1, "compile": 3, "emulate": 1, "time": 1}
_CACHE: dict[tuple, Any] = {}
_CACHE_KEPT = 512


class StageError(ArgusError):
    """Stage `stage` refused its input or its result: `outcome` is one of OUTCOMES, `result`
    the stage's result when it had one (a refuted Report, a failed Check), `road` what was done
    before (set by `road`). Its ArgusError `kind` is the stage's own error's, else input (the
    kernel's fault) or environment (the tools', the budget's)."""

    def __init__(self, stage: str, outcome: str, message: str, loc: Any = None,
                 fix: str | None = None, result: Any = None, kind: str | None = None):
        super().__init__(message, loc, fix, kind=kind or (
            "environment" if outcome in ("error", "timeout") else "input"))
        self.stage, self.outcome, self.result, self.road = stage, outcome, result, None

    @property
    def original(self) -> ArgusError:
        """The stage's own error (a RegisterBudgetError, a DSLError), else this one: what the
        `argus` facade raises, so its callers catch the kinds they always caught."""
        return self.__cause__ if isinstance(self.__cause__, ArgusError) else self


@attrs.frozen
class Road:
    """Each stage's result so far (None: not run)."""

    ir: O.Kernel | None = attrs.field(default=None, repr=False)
    report: Any = None                                 # absint.verify.Report
    interp: Check | None = None
    compiled: CompiledKernel | None = None
    emulated: Check | None = None
    timing: Timing | None = None


def road(kernel, *, until: str = "time", skip: Collection[str] = (), sizes: dict | None = None,
         check: Sequence[dict] | None = None, seed: int = 0, policy: str = "interleave",
         timeout_ms: int | None = None, reference=None, gpu: str = "mi300x", strict: bool = True,
         **params) -> Road:
    """Take `kernel` (a DSL kernel, traced IR, library name or FILE.py[:NAME]) down the road to
    stage `until`, leaving out the stages in `skip`. `sizes` are the timed sizes (and the
    checked ones unless `check` gives one size assignment per trial); `reference` is the
    library kernel whose numpy reference the checks compare with (the library's own entry by
    default). A stage that refuses raises StageError, carrying the road so far; with
    `strict=False` a check that fails is recorded in the Road and the road goes on."""
    if until not in STAGES or set(skip) - set(STAGES):
        raise StageError("road", "invalid", f"until={until!r}, skip={tuple(skip)}: the stages "
                         f"are {', '.join(STAGES)}")
    on = set(STAGES[:STAGES.index(until) + 1]) - set(skip)
    done: dict = {}
    correct = _correct if strict else None
    solver = {} if timeout_ms is None else {"timeout_ms": timeout_ms}
    try:
        ir = done["ir"] = stage("trace", lambda: _trace(kernel, params))
        done["report"] = stage("verify", lambda: verify(ir, **solver), ir,
                               accept=_proved, timeout_ms=timeout_ms) if "verify" in on else None
        case = _case("interpret" if "interpret" in on else "emulate", ir, kernel, reference,
                     params, sizes, check, seed) if on & {"interpret", "emulate"} else None
        done["interp"] = stage("interpret", lambda: check_interp(ir, case), ir, accept=correct,
                               case=case.key) if "interpret" in on else None
        compiled = done["compiled"] = stage(
            "compile", lambda: compile(ir, policy=policy, params=params), ir,
            policy=policy) if on & {"compile", "emulate", "time"} else None
        done["emulated"] = stage("emulate", lambda: check_emulated(compiled, case), ir,
                                 accept=correct, policy=policy,
                                 case=case.key) if "emulate" in on else None
        done["timing"] = stage("time", lambda: time(compiled, sizes or {}, gpu=gpu), ir,
                               policy=policy, sizes=sizes, gpu=gpu) if "time" in on else None
    except StageError as err:
        err.road = Road(**done)
        raise
    return Road(**done)


def stage(name: str, run: Callable[[], Any], ir: O.Kernel | None = None, *,
          accept: Callable[[str, Any], None] | None = None, **options) -> Any:
    """Stage `name`'s result: cached under (name, ir_digest(ir), options) when there is an IR,
    printed to stderr at its ARGUS_DEBUG level (DUMP_LEVEL), checked by `accept`; an
    ArgusError (or a bad parameter's ValueError/KeyError) becomes a StageError of `name`."""
    key = None if ir is None else (name, ir_digest(ir), frozen(options))
    try:
        hash(key)
    except TypeError:            # an option that is no value (an array for a name): not cached
        key = None
    if key in _CACHE:
        result = _CACHE[key]
    else:
        try:
            result = run()
        except StageError:
            raise
        except (ArgusError, ValueError, KeyError, RuntimeError) as err:
            raise StageError(name, outcome_of(err), getattr(err, "message", str(err)),
                             getattr(err, "loc", None), getattr(err, "fix", None),
                             kind=getattr(err, "kind", None)) from err
        if key is not None:
            if len(_CACHE) >= _CACHE_KEPT:
                _CACHE.pop(next(iter(_CACHE)))
            _CACHE[key] = result
    env.debug(DUMP_LEVEL.get(name, 1), f"// -----// {name} //----- //\n{_shown(result)}")
    if accept is not None:
        accept(name, result)
    return result


def outcome_of(err: Exception) -> str:
    """The StageError outcome of a stage's error: the input's fault (an ArgusError of kind
    input or unsupported, a bad parameter) is invalid; a broken setup or an Argus bug an
    error."""
    kind = getattr(err, "kind", None)       # an ArgusError's own kind
    if kind in ("input", "unsupported"):
        return "invalid"
    return "error" if kind in ("environment", "internal") or isinstance(err, RuntimeError) \
        else "invalid"


def _shown(result: Any) -> str:
    """A stage's result as ARGUS_DEBUG prints it (a check's verdict, assembly, a report)."""
    if isinstance(result, Check):
        return result.message
    if isinstance(result, CompiledKernel):
        return result.text
    return result.report() if isinstance(result, Timing) else str(result)


def _trace(kernel, params: dict) -> O.Kernel:
    if isinstance(kernel, O.Kernel):
        return kernel
    return as_kernel(kernel, "road").trace(**params)


def _proved(name: str, report) -> None:
    if report.refuted:
        raise StageError(name, "refuted", str(report.refuted[0]).splitlines()[0], result=report)
    if report.unknown or not report.proved_for_all_sizes:
        reason = report.unknown[0].reason if report.unknown else report.bound
        raise StageError(name, "unknown", f"not proved for every size: {reason}", result=report)
    if not report.obligations:
        raise StageError(name, "unknown", "the verifier found nothing to prove", result=report)


def _correct(name: str, check: Check) -> None:
    if not check.ok:
        raise StageError(name, "wrong", check.message, result=check)


def _case(name: str, ir, kernel, reference, params, sizes, check, seed) -> Case:
    """The checks' inputs: the library entry, and sizes (given, else checked over the entry's
    defaults) with a seed per trial; refused as stage `name`'s input."""
    entry = reference or next((e for n, e in library().items()
                               if kernel in (n, e.kernel)), None)
    if entry is None:
        raise StageError(name, "invalid", f"{ir.name} has no numpy reference to check "
                         "against", fix="pass reference= a library kernel, or skip the "
                         "interpret and emulate stages")
    defaults = {**entry.sizes, **({"D": params["head_dim"]} if "head_dim" in params else {})}
    try:
        trials = tuple(check) if check else (checked_sizes(ir, dict(sizes or {}), defaults),)
    except ArgusError as err:
        raise StageError(name, "invalid", err.message, err.loc, err.fix) from err
    return Case(entry, dict(params), tuple(dict(s) for s in trials),
                tuple(seed * 1000 + t for t in range(len(trials))))


def check_interp(ir: O.Kernel, case: Case) -> Check:
    """The reference interpreter's outputs against numpy, one trial per size assignment."""
    def run(arrays: dict) -> tuple[dict, Any]:
        result = interpret(ir, arrays)
        return result.outputs, result
    return compare("interpreter", ir, case, run)


def check_emulated(compiled: CompiledKernel, case: Case) -> Check:
    """The code object in the strict emulator (no hazard, no missing wait, strict memory)
    against numpy, one trial per size assignment."""
    def run(arrays: dict) -> tuple[dict, Any]:
        arrays = {name: array.copy() for name, array in arrays.items()}
        return arrays, compiled.run(device="emulator", check="strict", **arrays)
    return compare("emulator", compiled.ir, case, run)


def time(kernel: CompiledKernel, sizes: dict, *, gpu: str = "mi300x",
         constants: Calibrated | None = None, extrapolate: bool = True) -> Timing:
    """Modelled time of a compiled kernel at `sizes`: the model samples chosen workgroups
    (isa_cdna3.perf.sample.time_kernel); this stage plugs in the emulator as its runner."""
    names = [v.name for v in kernel.ir.sizes]
    if sorted(sizes) != sorted(names):
        raise PerfError(f"{kernel.name} takes sizes {names}; missing "
                        f"{[n for n in names if n not in sizes]}, unknown "
                        f"{sorted(set(sizes) - set(names))}")
    try:  # whole numbers in their declared ranges that meet the kernel's assumptions
        sizes = checked_sizes(kernel.ir, sizes)
    except ArgusError as err:
        raise PerfError(err.message, err.loc, err.fix) from None
    if 0 in kernel.grid(**sizes):
        raise PerfError(f"{kernel.name}: the sizes {sizes} give an empty grid "
                        f"{kernel.grid(**sizes)}")
    info = kernel.code.kernel(kernel.name)
    digest = hashlib.sha256(kernel.code.data).hexdigest()

    def run_sample(shape: dict, groups: tuple[int, ...]) -> list:
        args = kernel_arguments(kernel.ir, sample.sample_inputs(kernel.ir, shape), shape)
        try:
            return emulate(kernel.code, kernel.name, grid=kernel.grid(**shape),
                           block=kernel.block, args=args, check="warn", trace=True,
                           groups=groups).events.per_wave()
        except (EmulatorError, LaunchError) as err:
            raise PerfError(f"kernel {kernel.name} did not run to completion in the emulator, "
                            f"so it cannot be timed: {err}") from err
    return sample.time_kernel(
        kernel.ir, grid=kernel.grid, sizes=sizes, info=info, threads=kernel.block,
        statics=statics_of(kernel.code.disassemble(info)), run_sample=run_sample,
        sample_key=lambda shape, groups: (digest, kernel.name, groups, frozen(shape)),
        gpu=profile(gpu), constants=constants or Calibrated.load(), extrapolate=extrapolate,
        wave=WaveEvents)

"""`argus.time`: a modelled MI300X time for any gfx942 kernel, ours or AMD's, and the targets of
`argus time` and `argus compare`.

Three roads into the performance model (`argus.isa_cdna3.perf`):
* `args=` — the whole launch runs in the emulator with the event trace on, and the model
  schedules the workgroups the busiest CU gets;
* `sizes=` for a vendor kernel (`argus emulate --list`; `argus.vendor.timing`) — a sample of
  workgroups runs at two small loop trip counts and the per-CU schedule is extrapolated linearly
  to the real trip count (the Timing says so), so the largest published shapes take seconds;
* `sizes=` for a `CompiledKernel` — the pipeline's time stage (`argus.pipeline.time`): the first
  workgroups run with the real sizes, the main loop's size sampled and extrapolated the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from argus import pipeline
from argus.asm.launch import _kernel, _load
from argus.asm.stats import kernel_stats, load_code_object, main_loop
from argus.isa_cdna3.perf.estimate import Timing
from argus.isa_cdna3.perf.explain import explain
from argus.isa_cdna3.perf.params import Calibrated, PerfError, profile
from argus.kernels import library
from argus.vendor import timing as vendor_timing
from argus.vendor.harness import vendor_kernels


def time(code_object: Any, kernel: str | None = None, *, grid: int | Sequence[int] | None = None,
         block: int | Sequence[int] | None = None, args: Mapping[str, Any] | Sequence[Any] |
         None = None, sizes: Mapping[str, int] | None = None, gpu: str = "mi300x",
         extrapolate: bool = True, constants: Calibrated | None = None) -> Timing:
    """Modelled time of one launch on `gpu` ("mi300x", or "mi308x": the 80-CU part).

    `code_object` is a code object (path, bytes or CodeObject) launched over `grid` x `block`
    with `args` (as `argus.emulate` takes them); the name of a vendor kernel with `sizes` (as
    `run_vendor` takes them; attention also takes `hk`, the K/V head count); or a
    `CompiledKernel` (`argus.compile`) with its symbolic `sizes`.
    `extrapolate=False` simulates the real trip count instead of extrapolating.
    """
    compiled = isinstance(code_object, pipeline.CompiledKernel)
    # a compiled kernel's sizes are checked against its declarations (ir.sizes.checked_sizes)
    _check_options(gpu=gpu, sizes=sizes, args=args, whole_sizes=not compiled)
    constants = constants or Calibrated.load()
    if compiled:
        if sizes is None:
            raise PerfError(f"{code_object.name}: pass sizes= (e.g. sizes={{'M': 256, ...}}) to "
                            f"time a compiled kernel")
        return pipeline.time(code_object, dict(sizes), gpu=gpu, constants=constants,
                             extrapolate=extrapolate)
    if sizes is not None:
        if not isinstance(code_object, str):
            raise PerfError("sizes= names a problem size of a vendor kernel; pass the kernel "
                            "name (argus emulate --list), or args= with grid= and block= for a "
                            "code object")
        return vendor_timing.time_vendor(code_object, dict(sizes), profile(gpu), constants,
                                         extrapolate)
    if grid is None or block is None:
        raise PerfError("argus.time needs grid= and block= (and args=) for a code object, or "
                        "sizes= for a vendor kernel")
    co = _load(code_object)
    return vendor_timing.time_launch(co, _kernel(co, kernel), grid=grid, block=block,
                                     args=args or (), gpu=profile(gpu), constants=constants)


def forget(*, disk: bool = False) -> None:
    """Drop every remembered sample, schedule and vendor code object, and with `disk` the
    stored sample traces (a cold start, for timing the model itself)."""
    vendor_timing.forget(disk=disk)


def _check_options(*, gpu: Any = "mi300x", sizes: Any = None, args: Any = None,
                   whole_sizes: bool = True, **mappings: Any) -> None:
    """Refuse a malformed option before anything uses it, naming it: `gpu` a name, `sizes`
    (and the other `mappings`) dicts, sizes whole numbers, `args` a dict or a sequence."""
    if not isinstance(gpu, str):
        raise PerfError(f"gpu={gpu!r}: name the GPU", fix="pass gpu='mi300x' or gpu='mi308x'")
    for what, value in {"sizes": sizes, **mappings}.items():
        if value is not None and not isinstance(value, Mapping):
            raise PerfError(f"{what}= takes a dict of names to values, not "
                            f"{type(value).__name__}", fix=f"pass {what}={{'M': 256, ...}}")
    for name, value in (sizes or {}).items() if whole_sizes else ():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise PerfError(f"size {name}={value!r} must be a whole number",
                            fix=f"give {name} an int")
    if args is not None and (isinstance(args, (str, bytes)) or
                             not isinstance(args, (Mapping, Sequence))):
        raise PerfError(f"args= takes the kernel arguments as a dict by name or a sequence, "
                        f"not {type(args).__name__}", fix="pass args={'K': 64, 'A': array}")


# ---------------------------------------------------------------------------------- targets
@attrs.frozen
class Target:
    """What `argus time`/`argus compare` were pointed at, timed, with its static facts."""

    name: str
    timing: Timing
    code: Any = attrs.field(repr=False)          # CodeObject
    kernel: Any = attrs.field(repr=False)        # KernelInfo


def _match_sizes(wanted: Sequence[str], shape: Mapping[str, int]) -> dict[str, int]:
    """`shape` keys matched to `wanted` size names regardless of case (m= fills M)."""
    by_lower = {w.lower(): w for w in wanted}
    return {by_lower[k.lower()]: v for k, v in shape.items() if k.lower() in by_lower}


def check_target(target: str) -> None:
    """Refuse a target that is neither a vendor kernel, a library kernel nor a file."""
    if target not in vendor_kernels() and target not in library() and \
            not Path(target).is_file():
        raise PerfError(f"{target!r} is not a vendor kernel (argus emulate --list), a library "
                        f"kernel ({', '.join(sorted(library()))}) or a code object file")


def time_target(target: str, *, shape: Mapping[str, int] | None = None,
                params: Mapping[str, Any] | None = None, grid: Sequence[int] | None = None,
                block: Sequence[int] | None = None, buffers: Mapping[str, int] | None = None,
                args: Mapping[str, Any] | None = None, kernel: str | None = None,
                gpu: str = "mi300x", strict_sizes: bool = True) -> Target:
    """Time a vendor kernel name, a library DSL kernel (compiled with `params`) or a code
    object file (.co/.hsaco/.s, launched over `grid` x `block` with zero-filled `buffers` of
    the given byte sizes and by-value `args`). `shape` keys match size names in any case; with
    `strict_sizes` a key the target does not take is an error."""
    if not isinstance(target, str):
        raise PerfError(f"the target to time is a name or a path, not {type(target).__name__}",
                        fix="pass a vendor or library kernel name, or a code object's path")
    _check_options(gpu=gpu, sizes=shape, args=args, params=params, buffers=buffers)
    shape = dict(shape or {})
    if target in vendor_kernels():
        family = vendor_timing.family(target)
        names = family.sizes if family else []
        sizes = _match_sizes(names, shape)
        _check_unused(target, shape, sizes, strict_sizes)
        timing = time(target, sizes=sizes, gpu=gpu)
        code, _ = vendor_timing.vendor_code(target)
        return Target(target, timing, code, code.kernels[0])
    if target in library():
        compiled = pipeline.road(target, until="compile", skip=("verify", "interpret"),
                                 **dict(params or {})).compiled
        sizes = _match_sizes([v.name for v in compiled.ir.sizes], shape)
        _check_unused(target, shape, sizes, strict_sizes)
        timing = time(compiled, sizes=sizes, gpu=gpu)
        return Target(target, timing, compiled.code, compiled.code.kernel(compiled.name))
    check_target(target)
    code = load_code_object(target)
    info = _kernel(code, kernel)
    pointers = [a.name for a in info.args if a.value_kind == "global_buffer"]
    missing = [name for name in pointers if name not in (buffers or {})]
    if missing:
        raise PerfError(f"kernel {info.name} takes buffer(s) {missing}: give each a size, e.g. "
                        f"--buffer {missing[0]}=1048576 (bytes, zero-filled)")
    arrays = {name: np.zeros(-(-size // 4), np.uint32) for name, size in (buffers or {}).items()}
    timing = time(code, info.name, grid=grid, block=block, args={**arrays, **(args or {})},
                  gpu=gpu)
    return Target(Path(target).name, timing, code, info)


def _check_unused(target: str, shape: Mapping[str, int], used: Mapping[str, int],
                  strict: bool) -> None:
    unused = [k for k in shape if k.lower() not in {u.lower() for u in used}]
    if strict and unused:
        raise PerfError(f"{target} has no size(s) {unused}")


def compare(a: Target, b: Target) -> dict:
    """Two timed targets side by side: resources, instruction mix, main-loop MFMA density,
    occupancy, bank conflicts, modelled time, the ratio, and where the difference comes from."""
    for target in (a, b):
        if not isinstance(target, Target):
            raise PerfError(f"compare takes two timed targets, not {type(target).__name__}",
                            fix="time each with argus.timing.time_target(name) first")
    rows: dict[str, list] = {}
    for target in (a, b):
        t, k = target.timing, target.kernel
        stats = kernel_stats(target.code, k)
        loop = main_loop(stats)
        mfma = loop.mix.get("MFMA", 0) if loop else stats.mix.get("MFMA", 0)
        body = loop.instructions if loop else stats.instructions
        values = {
            "modelled time (us)": round(t.microseconds, 3),
            "modelled TFLOP/s": round(t.tflops, 1),
            "modelled clock (GHz)": round(t.clock_ghz, 2),
            "workgroups": t.workgroups,
            "workgroups/CU (limit)": f"{t.occupancy.workgroups_per_cu} ({t.occupancy.limiter})",
            "VGPRs+AGPRs per wave": t.occupancy.vgprs_per_wave,
            "LDS bytes per workgroup": t.occupancy.lds_per_workgroup,
            "LDS conflict factor (modelled)": round(t.lds_conflict, 2),
            "instructions": stats.instructions,
            "main-loop instructions": body,
            "main-loop MFMA density": round(mfma / body, 3) if body else 0.0,
        }
        for cls, count in sorted(stats.mix.items()):
            values[f"mix: {cls}"] = count
        for unit, value in t.busy.items():
            values[f"busy {unit} (modelled)"] = f"{value:.0%}"
        for cause, value in t.stalls.items():
            values[f"stall {cause} (modelled)"] = f"{value:.0%}"
        values["bottleneck (modelled)"] = t.bottleneck
        for key, value in values.items():
            rows.setdefault(key, ["", ""])[0 if target is a else 1] = value
    ratio = b.timing.microseconds / a.timing.microseconds
    return {"names": [a.name, b.name], "rows": rows, "ratio": ratio,
            "difference": _difference(a.timing, b.timing),
            "explanation": explain(a.timing, b.timing, (a.name, b.name))}


def _difference(a: Timing, b: Timing) -> str:
    """The unit or stall whose modelled time differs most between the two, in words."""
    def spent(t: Timing) -> dict[str, float]:
        kernel_us = t.microseconds - t.launch_us
        out = {f"{u} busy": t.busy[u] * kernel_us for u in t.busy}
        out.update({f"{c} stalls": t.stalls[c] * kernel_us for c in t.stalls})
        return out
    sa, sb = spent(a), spent(b)
    key = max(sa, key=lambda k: abs(sb[k] - sa[k]))
    more = "second" if sb[key] > sa[key] else "first"
    return (f"largest modelled difference: {key} ({sa[key]:.2f} vs {sb[key]:.2f} us of kernel "
            f"time), higher in the {more} kernel")

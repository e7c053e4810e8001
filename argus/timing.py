"""`argus.time`: a modelled MI300X time for any gfx942 kernel, ours or AMD's.

Three roads into the performance model (`argus.isa_cdna3.perf`):
* `args=` — the whole launch runs in the emulator with the event trace on, and the model
  schedules the workgroups the busiest CU gets;
* `sizes=` for a vendor kernel (`argus emulate --list`) — a sample of workgroups runs at two small
  loop trip counts and the per-CU schedule is extrapolated linearly to the real trip count (the
  Timing says so), so the largest published shapes take seconds;
* `sizes=` for a `CompiledKernel` — the first workgroups run with the real sizes, the main loop's
  size (one the grid does not depend on) sampled and extrapolated the same way.
`time_target` and `compare` serve `argus time` and `argus compare`.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from argus.isa_cdna3 import isa
from argus.isa_cdna3.perf import store
from argus.isa_cdna3.perf.estimate import Timing, combine, estimate, plan, statics_of
from argus.isa_cdna3.perf.model import (
    Occupancy,
    cu_atomic_rate,
    cu_bandwidth,
    occupancy,
    schedule_cu,
)
from argus.isa_cdna3.perf.params import CU, Calibrated, PerfError, profile

BF16_BYTES = 2
HEAD_DIM = 128


@attrs.frozen
class Family:
    """How to sample and scale one family of vendor kernels (sizes as `run_vendor` takes them)."""

    loop: str                                             # the size the main loop runs over
    trips: tuple[int, int]                                # sampled trip counts
    trip: Callable[[dict], int]                           # per-workgroup trip count
    sample: Callable[[dict, int, int], dict]              # (sizes, trip, workgroups) -> sizes
    workgroups: Callable[[dict], int]
    footprint: Callable[[dict], float]                    # compulsory HBM bytes
    defaults: dict
    problem: Callable[[dict], str | None]                 # what is wrong with the sizes, if any
    # whether the sampled workgroups stand exactly for every workgroup at these sizes (else
    # the whole launch is emulated)
    sampled: Callable[[dict], bool] = lambda size: True


def _gemm_tile(name: str) -> int:
    return int(name.split("_tn_")[1].split("x")[0])


def _gemm(name: str) -> Family:
    tile = _gemm_tile(name)

    def sample(size: dict, trip: int, groups: int) -> dict:
        return {"m": tile, "n": 64 * groups, "k": trip * size["splitk"],
                "splitk": size["splitk"]}
    return Family(
        "k", (512, 1024), lambda s: s["k"] // s["splitk"], sample,
        lambda s: (s["n"] // 64) * -(-s["m"] // tile) * s["splitk"],
        lambda s: (s["m"] * s["k"] + s["n"] * s["k"]) * BF16_BYTES + s["m"] * s["n"] * 4,
        {"m": tile, "n": 128, "k": 256, "splitk": 1},
        lambda s: None if min(s.values()) >= 1 and s["n"] % 64 == 0
        and s["k"] % (64 * s["splitk"]) == 0 else
        "m, n, k, splitk must be positive, n a multiple of 64 and k of 64 * splitk (each split "
        "a whole number of the kernel's 64-wide K steps)")


def _fmha(name: str, causal: bool) -> Family:
    def footprint(s: dict) -> float:
        kv = s.get("hk", s["h"])
        return (2 * s["b"] * s["s"] * s["h"] + 2 * s["b"] * s["sk"] * kv) * HEAD_DIM * BF16_BYTES

    def problem(s: dict) -> str | None:
        return None if min(s.values()) >= 1 and s["h"] % s.get("hk", s["h"]) == 0 else \
            "b, h, s, sk (and hk) must be positive and hk must divide h"
    if not causal:
        return Family("sk", (128, 256), lambda s: s["sk"],
                      lambda s, trip, groups: {"b": 1, "h": groups, "s": 256, "sk": trip},
                      lambda s: -(-s["s"] // 256) * s["h"] * s["b"], footprint,
                      {"b": 1, "h": 1, "s": 256, "sk": 256}, problem)
    # The causal kernel gives each workgroup two 256-row query tiles, i and T-1-i, so every
    # workgroup attends the same number of keys (bottom-right mask): s + 256 + 2 (sk - s) in
    # all. One workgroup of a 512-query launch over L keys attends 2 L - 256, the same work,
    # so the sample runs s=512 at L = sk - s/2 + 256 (the instruction counts match exactly).
    return Family("sk", (512, 768), lambda s: s["sk"] - s["s"] // 2 + 256,
                  lambda s, trip, groups: {"b": 1, "h": groups, "s": 512, "sk": trip},
                  lambda s: -(-s["s"] // 512) * s["h"] * s["b"], footprint,
                  {"b": 1, "h": 1, "s": 256, "sk": 256}, problem,
                  lambda s: s["s"] % 512 == 0 and s["sk"] >= s["s"])


def _family(name: str) -> Family | None:
    from argus.asm.vendor import FMHA, GEMM

    if GEMM.match(name):
        return _gemm(name)
    if match := FMHA.match(name):
        return _fmha(name, bool(match.group(1)))
    return None


def _mall_share(hbm: float, requested: float, gpu: Any) -> float:
    """Share of the requested bytes that miss L2 when only a sample was traced: at worst every
    XCD fetches each distinct line once."""
    return min(1.0, hbm * gpu.xcds.value / requested) if requested else 0.0


def _occupancy(info: Any, threads: int) -> Occupancy:
    return occupancy(vgprs=max(info.unified_vgpr_count, info.vgpr_count),
                     lds_bytes=info.group_segment_size, threads=threads)


def _emulated(run: Callable[[], Any], kernel: str) -> Any:
    from argus.isa_cdna3.abi import LaunchError
    from argus.isa_cdna3.emu import EmulatorError

    try:
        return run()
    except (EmulatorError, LaunchError) as err:
        raise PerfError(f"kernel {kernel} did not run to completion in the emulator, so it "
                        f"cannot be timed: {err}") from err


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
    compiled = hasattr(code_object, "lowered") and hasattr(code_object, "ir")
    # a compiled kernel's sizes are checked against its declarations (ir.sizes.checked_sizes)
    _check_options(gpu=gpu, sizes=sizes, args=args, whole_sizes=not compiled)
    constants = constants or Calibrated.load()
    gpu_profile = profile(gpu)
    if compiled:
        if sizes is None:
            raise PerfError(f"{code_object.name}: pass sizes= (e.g. sizes={{'M': 256, ...}}) to "
                            f"time a compiled kernel")
        return _compiled(code_object, dict(sizes), gpu_profile, constants, extrapolate)
    if sizes is not None:
        if not isinstance(code_object, str):
            raise PerfError("sizes= names a problem size of a vendor kernel; pass the kernel "
                            "name (argus emulate --list), or args= with grid= and block= for a "
                            "code object")
        return _vendor(code_object, dict(sizes), gpu_profile, constants, extrapolate)
    if grid is None or block is None:
        raise PerfError("argus.time needs grid= and block= (and args=) for a code object, or "
                        "sizes= for a vendor kernel")
    from argus.asm.launch import _kernel, _load, emulate

    co = _load(code_object)
    info = _kernel(co, kernel)
    run = _emulated(lambda: emulate(co, info, grid=grid, block=block, args=args or (),
                                    check="warn", trace=True), info.name)
    occ = _occupancy(info, run.block[0] * run.block[1] * run.block[2])
    return estimate(run.events, run.instructions, occ, gpu=gpu_profile, constants=constants,
                    kernel=info.name, shape={"grid": "x".join(map(str, run.grid))})


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


def assembled(source: str) -> Any:
    """A code object from gfx942 assembly text (the micro-kernels calibration times)."""
    from argus.asm import assemble

    return assemble(source)


@functools.lru_cache(maxsize=16)
def _vendor_code(name: str) -> tuple[Any, list]:
    """A vendor code object and its instructions as the scheduler sees them."""
    from argus.asm.aiter import aiter_root
    from argus.asm.codeobject import CodeObject
    from argus.asm.vendor import code_object_path

    code = CodeObject.from_file(code_object_path(aiter_root(), name))
    return code, statics_of(code.disassemble(code.kernels[0]))


def _vendor_full(name: str, sizes: dict, gpu: Any, constants: Calibrated) -> Timing:
    """Vendor kernels whose workgroups do different work (causal attention, MoE routing): the
    whole launch runs in the emulator, so the cost grows with the problem."""
    from argus.asm.vendor import VendorKernelError, run_vendor

    code, _ = _vendor_code(name)
    try:
        done = _emulated(lambda: run_vendor(name, shape=sizes, code=code, trace=True), name)
    except VendorKernelError as err:
        raise PerfError(str(err)) from err
    run = done.emulation
    occ = _occupancy(code.kernels[0], run.block[0] * run.block[1] * run.block[2])
    return estimate(run.events, run.instructions, occ, gpu=gpu, constants=constants,
                    kernel=name, shape=done.shape)


_SAMPLES: dict[tuple, dict[int, list]] = {}
_SAMPLES_KEPT = 16


def _sample_groups(name: str, code: Any, shape: dict) -> tuple[tuple, dict[int, list]]:
    """Traced waves per workgroup of a sample launch; kept for the process, since a bench or a
    search asks for many problem sizes that share a sample."""
    from argus.asm.vendor import run_vendor

    key = (hashlib.sha256(code.data).hexdigest(), name, tuple(sorted(shape.items())))
    if not _recall(key):
        done = _emulated(lambda: run_vendor(name, shape=shape, code=code, trace=True), name)
        groups: dict[int, list] = {}
        for w in done.emulation.events.per_wave():
            groups.setdefault(w.workgroup, []).append(w)
        _remember(key, groups)
    return key, _SAMPLES[key]


def _recall(key: tuple) -> bool:
    """Whether the sample `key` is remembered, in this process or on disk (perf.store)."""
    from argus.isa_cdna3.emu.trace import WaveEvents

    if key not in _SAMPLES and (groups := store.load(key, WaveEvents)) is not None:
        _remember(key, groups, keep=False)
    return key in _SAMPLES


def _remember(key: tuple, groups: dict, *, keep: bool = True) -> None:
    if keep:
        store.save(key, groups)
    if len(_SAMPLES) >= _SAMPLES_KEPT:
        _SAMPLES.pop(next(iter(_SAMPLES)))
    _SAMPLES[key] = groups


_SCHEDULES: dict[tuple, Any] = {}


def forget(*, disk: bool = False) -> None:
    """Drop the remembered samples and schedules, and with `disk` the stored sample traces (a
    cold start, for timing the model itself)."""
    if disk:
        store.clear()
    _SAMPLES.clear()
    _SCHEDULES.clear()
    _vendor_code.cache_clear()


def _schedule(key: tuple, n: int, waves: list, statics: list, bw: float, atomics: float,
              constants: Calibrated) -> Any:
    """schedule_cu, remembered per sample, workgroup count, bandwidth and atomic-rate shares
    and memory constants (the calibration re-times every row for each candidate)."""
    memo = (key, n, round(bw, 9), round(atomics, 9), constants.vmem_latency,
            constants.vmem_issue)
    if memo not in _SCHEDULES:
        if len(_SCHEDULES) > 512:
            _SCHEDULES.clear()
        _SCHEDULES[memo] = schedule_cu(waves, statics, bytes_per_clk=bw,
                                       atomic_dwords_per_clk=atomics, constants=constants,
                                       params=CU)
    return _SCHEDULES[memo]


def _vendor(name: str, sizes: dict, gpu: Any, constants: Calibrated, extrapolate: bool
            ) -> Timing:
    from argus.asm.vendor import (
        VendorKernelError,
        check_whole_sizes,
        keys_default_to_queries,
        vendor_kernels,
    )

    if name not in vendor_kernels():
        raise PerfError(f"unknown vendor kernel {name!r}; known: {', '.join(vendor_kernels())}")
    family = _family(name)
    if family is None:
        return _vendor_full(name, sizes, gpu, constants)
    unknown = set(sizes) - set(family.defaults) - ({"hk"} if family.loop == "sk" else set())
    if unknown:
        raise PerfError(f"{name} takes sizes {sorted(family.defaults)}, not {sorted(unknown)}")
    try:
        check_whole_sizes(sizes, name)
    except VendorKernelError as err:
        raise PerfError(str(err), fix=f"give whole numbers, e.g. {dict(family.defaults)}") \
            from None
    size = {**family.defaults, **(keys_default_to_queries(sizes) if family.loop == "sk"
                                  else sizes)}
    if (problem := family.problem(size)) is not None:
        raise PerfError(f"{name} at {size}: {problem}")
    if not family.sampled(size):
        return _vendor_full(name, size, gpu, constants)
    code, statics = _vendor_code(name)
    info = code.kernels[0]
    threads = 512 if family.loop == "sk" else 256
    occ = _occupancy(info, threads)
    workgroups = family.workgroups(size)
    if workgroups < 1:
        raise PerfError(f"{name} at {size} launches no workgroups")
    p = plan(workgroups, occ, gpu)
    real = family.trip(size)
    t1, t2 = family.trips
    trips = (real,) if not extrapolate or real <= t2 else (t1, t2)
    counts = sorted({p.per_round} | ({p.tail} if p.tail else set()))
    line = 1 << isa.CACHE_LINE_SHIFT
    runs: dict[int, dict[int, Any]] = {}
    per_wg: dict[int, tuple[float, float]] = {}
    keys: dict[int, tuple] = {}
    for trip in trips:
        keys[trip], groups = _sample_groups(name, code, family.sample(size, trip, p.per_round))
        first = sorted(groups)[:p.per_round]
        requested = sum(sum(w.lines) for g in first for w in groups[g]) * line / len(first)
        flops = sum(statics[i].flops for g in first for w in groups[g] for i in w.index
                    ) / len(first)
        per_wg[trip] = (requested, flops)
        runs[trip] = {n: [w for g in first[:n] for w in groups[g]] for n in counts}
    if len(trips) == 2:
        weight = (real - t1) / (t2 - t1)
        requested, flops = (a + weight * (b - a) for a, b in zip(per_wg[t1], per_wg[t2]))
    else:
        requested, flops = per_wg[real]
    total_requested = requested * workgroups
    hbm = min(family.footprint(size), total_requested) if total_requested else 0.0
    bw = cu_bandwidth(gpu, active_cus=p.active_cus,
                      hbm_share=hbm / total_requested if total_requested else 0.0,
                      constants=constants, mall_share=_mall_share(hbm, total_requested, gpu))
    atomics = cu_atomic_rate(gpu, active_cus=p.active_cus, constants=constants)

    def cu_run(n: int) -> Any:
        scheduled = {trip: _schedule(keys[trip], n, runs[trip][n], statics, bw, atomics,
                                     constants)
                     for trip in trips}
        if len(trips) == 1:
            return scheduled[trips[0]]
        return scheduled[t1].scaled(scheduled[t2], (real - t1) / (t2 - t1))

    full = cu_run(p.per_round)
    rounds = [full] * p.full_rounds + ([cu_run(p.tail)] if p.tail else [])
    note = None
    if len(trips) == 2:
        note = (f"{p.per_round} workgroup(s) simulated at {family.loop}={t1} and {t2} per "
                f"workgroup, per-CU time extrapolated linearly to {family.loop}={real}")
    return combine(name, gpu, occ, p, rounds, flops=flops * workgroups,
                   bytes_requested=total_requested, bytes_hbm=hbm, constants=constants,
                   extrapolation=note, shape=size)



# ---------------------------------------------------------------------------------- ours
SAMPLE_TRIPS = (256, 512, 1024, 2048)     # loop sizes tried for the two samples, smallest first


def _compiled(kernel: Any, sizes: dict, gpu: Any, constants: Calibrated, extrapolate: bool
              ) -> Timing:
    """A compiled DSL kernel: the first workgroups of the real grid run with the real sizes,
    except that the size setting the main loop's trip count (`_trip_size`) is sampled at two
    small values and the schedule extrapolated to the real one, and sizes no loop bound names
    are shrunk as far as the first grid row allows."""
    import math

    from argus.asm.launch import emulate, kernel_arguments
    from argus.errors import ArgusError
    from argus.ir import ops as O
    from argus.ir.expr import evaluate
    from argus.ir.sizes import admits, checked_sizes
    from argus.isa_cdna3.numerics import NUMPY_DTYPES

    names = [v.name for v in kernel.ir.sizes]
    missing = [n for n in names if n not in sizes]
    unknown = set(sizes) - set(names)
    if missing or unknown:
        raise PerfError(f"{kernel.name} takes sizes {names}; missing {missing}, unknown "
                        f"{sorted(unknown)}")
    try:  # whole numbers in their declared ranges that meet the kernel's assumptions
        sizes = checked_sizes(kernel.ir, sizes)
    except ArgusError as err:
        raise PerfError(err.message, err.loc, err.fix) from None
    grid = kernel.grid(**sizes)
    workgroups = math.prod(grid)
    if workgroups < 1:
        raise PerfError(f"{kernel.name}: the sizes {sizes} give an empty grid {grid}")
    info = kernel.code.kernel(kernel.name)
    occ = _occupancy(info, kernel.block)
    p = plan(workgroups, occ, gpu)

    def admissible(trial: dict) -> bool:
        return admits(kernel.ir, trial)

    bounding = set(_loop_bound_names(kernel))
    ids = {op.var.name for op in kernel.ir.ops() if isinstance(op, O.ProgramId)}
    varying = bool(bounding & ids)       # trip counts that differ between workgroups
    first = min(p.per_round, grid[0])
    loop = _trip_size(kernel, sizes, grid, first)
    real = sizes[loop] if loop else 0
    trips: tuple[int, ...] = (real,)
    if loop and extrapolate:
        small = [t for t in SAMPLE_TRIPS if t < real and admissible({**sizes, loop: t})
                 and kernel.grid(**{**sizes, loop: t})[0] >= first]
        if len(small) >= 2:
            trips = (small[0], small[1])
    statics = statics_of(kernel.code.disassemble(info))
    # The sampled workgroups do the work of every workgroup, so the sample shrinks the sizes
    # no loop bound mentions as far as the assumptions allow while the first grid row still
    # holds the sampled workgroups; a size that sets a trip count keeps its value (or is
    # extrapolated), else the sample would time shorter loops than the launch runs.
    base = dict(sizes)
    for name in names:
        while name != loop and name not in bounding and base[name] > 1:
            trial = {**base, name: base[name] // 2}
            if not admissible(trial) or kernel.grid(**trial)[0] < first:
                break
            base = trial
    line = 1 << isa.CACHE_LINE_SHIFT
    runs, per_wg = {}, {}
    for trip in trips:
        shape = {**base, loop: trip} if loop else base
        key = (hashlib.sha256(kernel.code.data).hexdigest(), kernel.name, first,
               tuple(sorted(shape.items())))
        if not _recall(key):
            arrays = _sample_inputs(kernel.ir, shape)
            args = kernel_arguments(kernel.ir, arrays, shape)
            done = _emulated(lambda args=args: emulate(
                kernel.code, kernel.name, grid=(first, 1, 1), block=kernel.block, args=args,
                check="warn", trace=True), kernel.name)
            _remember(key, {0: done.events.per_wave()})
        waves = _SAMPLES[key][0]
        copies = -(-p.per_round // first)          # fill a CU's round with copies if needed
        resident = [attrs.evolve(w, workgroup=w.workgroup + c * first) for c in range(copies)
                    for w in waves][: p.per_round * len(waves) // first]
        per_wg[trip] = (sum(sum(w.lines) for w in waves) * line / first,
                        sum(statics[i].flops for w in waves for i in w.index) / first)
        runs[trip] = resident
    weight = (real - trips[0]) / (trips[1] - trips[0]) if len(trips) == 2 else 0.0
    if len(trips) == 2:
        requested, flops = (a + weight * (b - a) for a, b in zip(per_wg[trips[0]],
                                                                 per_wg[trips[1]]))
    else:
        requested, flops = per_wg[trips[0]]
    total_requested = requested * workgroups
    footprint = sum(math.prod(int(evaluate(e, sizes)) for e in t.type.shape)
                    * np.dtype(NUMPY_DTYPES[t.type.dtype]).itemsize for t in kernel.ir.tensors)
    hbm = min(footprint, total_requested)
    bw = cu_bandwidth(gpu, active_cus=p.active_cus,
                      hbm_share=hbm / total_requested if total_requested else 0.0,
                      constants=constants, mall_share=_mall_share(hbm, total_requested, gpu))
    atomics = cu_atomic_rate(gpu, active_cus=p.active_cus, constants=constants)

    def cu_run(n: int) -> Any:
        groups = sorted({w.workgroup for w in runs[trips[0]]})[:n]
        scheduled = [schedule_cu([w for w in runs[t] if w.workgroup in groups], statics,
                                 bytes_per_clk=bw, atomic_dwords_per_clk=atomics,
                                 constants=constants, params=CU)
                     for t in trips]
        return scheduled[0] if len(trips) == 1 else scheduled[0].scaled(scheduled[1], weight)

    rounds = [cu_run(p.per_round)] * p.full_rounds + ([cu_run(p.tail)] if p.tail else [])
    note = None
    if len(trips) == 2:
        note = (f"{first} workgroup(s) simulated at {loop}={trips[0]} and {trips[1]}, per-CU "
                f"time extrapolated linearly to {loop}={real}")
    if varying:
        note = ((note + "; ") if note else "") + (
            "loop trip counts differ between workgroups (they depend on the workgroup id): "
            f"the first {first} workgroup(s) stand for all, so the time is only as good as "
            "they are typical (a causal mask's first query tiles do the least work)")
    return combine(kernel.name, gpu, occ, p, rounds, flops=flops * workgroups,
                   bytes_requested=total_requested, bytes_hbm=hbm, constants=constants,
                   extrapolation=note, shape=sizes)


def _loop_bound_names(kernel: Any) -> list[str]:
    """The variables the kernel's loop bounds mention, outermost loop first, each once."""
    from argus.ir import ops as O
    from argus.ir.expr import free_vars

    names: list[str] = []
    for op in kernel.ir.ops():
        if isinstance(op, O.For):
            names += [v.name for v in sorted(free_vars(op.start) | free_vars(op.stop),
                                             key=lambda v: v.name) if v.name not in names]
    return names


def _trip_size(kernel: Any, sizes: dict, grid: tuple, first: int) -> str | None:
    """The size to extrapolate the main loop's trip count along: one a loop bound mentions,
    preferably one the grid does not depend on (the K of a GEMM, the H of a MoE GEMM), else
    one whose growth only adds workgroups beyond the sampled `first` of the first grid row
    (the sequence length of attention); None when no loop runs a size-dependent number of
    times."""
    candidates = [n for n in _loop_bound_names(kernel) if n in sizes]
    for name in candidates:
        if kernel.grid(**{**sizes, name: sizes[name] * 2}) == grid:
            return name
    for name in candidates:
        rows = kernel.grid(**{**sizes, name: min(SAMPLE_TRIPS)})
        if rows[1:] == grid[1:] and rows[0] >= first:
            return name
    return None


def _sample_inputs(ir: Any, shape: dict) -> dict[str, np.ndarray]:
    """Inputs for a timing sample: zeros, except index data that the kernel declares facts
    about, which gets entries meeting them (spread over their range: `T.distinct` rows are
    distinct, an expert id cycles through the experts), so gathered rows touch as many cache
    lines as a real routing does, not one row over and over."""
    from argus.ir import ops as O
    from argus.ir.expr import evaluate
    from argus.isa_cdna3.numerics import NUMPY_DTYPES

    arrays = {t.name: np.zeros(tuple(int(evaluate(e, shape)) for e in t.type.shape),
                               NUMPY_DTYPES[t.type.dtype]) for t in ir.tensors}
    for op in ir.ops():
        if isinstance(op, O.Distinct):
            lo, hi = (int(evaluate(e, shape)) for e in (op.lo, op.hi))
        elif isinstance(op, O.ScalarLoad):
            lo, hi = ((int(evaluate(e, shape)) for e in op.bounds) if op.bounds
                      else (op.var.lo, op.var.hi))
        else:
            continue
        data = arrays[op.tensor.name]
        if hi > lo:
            data.reshape(-1)[:] = lo + np.arange(data.size) % (hi - lo)
    return arrays


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
    from argus.asm.vendor import vendor_kernels
    from argus.kernels import library

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
    from argus.asm.vendor import vendor_kernels
    from argus.kernels import library

    if not isinstance(target, str):
        raise PerfError(f"the target to time is a name or a path, not {type(target).__name__}",
                        fix="pass a vendor or library kernel name, or a code object's path")
    _check_options(gpu=gpu, sizes=shape, args=args, params=params, buffers=buffers)
    shape = dict(shape or {})
    if target in vendor_kernels():
        family = _family(target)
        names = [*family.defaults, *(["hk"] if family.loop == "sk" else [])] if family else []
        sizes = _match_sizes(names, shape)
        _check_unused(target, shape, sizes, strict_sizes)
        timing = time(target, sizes=sizes, gpu=gpu)
        code, _ = _vendor_code(target)
        return Target(target, timing, code, code.kernels[0])
    if target in library():
        from argus.pipeline import compile as compile_kernel

        compiled = compile_kernel(library()[target].kernel, **dict(params or {}))
        sizes = _match_sizes([v.name for v in compiled.ir.sizes], shape)
        _check_unused(target, shape, sizes, strict_sizes)
        timing = time(compiled, sizes=sizes, gpu=gpu)
        return Target(target, timing, compiled.code, compiled.code.kernel(compiled.name))
    from argus.asm.stats import load_code_object

    check_target(target)
    code = load_code_object(target)
    from argus.asm.launch import _kernel

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
    from argus.asm.stats import kernel_stats, main_loop

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
    from argus.isa_cdna3.perf.explain import explain

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

"""`argus.time`: a modelled MI300X time for any gfx942 kernel, ours or AMD's.

Two roads into the performance model (`argus.isa_cdna3.perf`):
* `args=` — the whole launch runs in the emulator with the event trace on, and the model
  schedules the workgroups the busiest CU gets;
* `sizes=` for a vendor kernel (`argus emulate --list`) — a sample of workgroups runs at two small
  loop trip counts and the per-CU schedule is extrapolated linearly to the real trip count (the
  Timing says so), so the largest published shapes take seconds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from argus.isa_cdna3.perf.estimate import Timing, combine, estimate, plan, statics_of
from argus.isa_cdna3.perf.model import Occupancy, cu_bandwidth, occupancy, schedule_cu
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
        {"m": tile, "n": 128, "k": 256, "splitk": 1})


def _fmha(name: str) -> Family:
    def footprint(s: dict) -> float:
        kv = s.get("hk", s["h"])
        return (2 * s["b"] * s["s"] * s["h"] + 2 * s["b"] * s["sk"] * kv) * HEAD_DIM * BF16_BYTES
    return Family(
        "sk", (256, 512), lambda s: s["sk"],
        lambda s, trip, groups: {"b": 1, "h": groups, "s": 256, "sk": trip},
        lambda s: -(-s["s"] // 256) * s["h"] * s["b"], footprint,
        {"b": 1, "h": 1, "s": 256, "sk": 256})


def _family(name: str) -> Family | None:
    from argus.asm.vendor import FMHA, GEMM

    if GEMM.match(name):
        return _gemm(name)
    if (match := FMHA.match(name)) and not match.group(1):
        return _fmha(name)
    return None


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
    with `args` (as `argus.emulate` takes them), or the name of a vendor kernel with `sizes`
    (as `run_vendor` takes them; attention also takes `hk`, the K/V head count).
    `extrapolate=False` simulates the real trip count instead of extrapolating.
    """
    constants = constants or Calibrated.load()
    gpu_profile = profile(gpu)
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


@functools.lru_cache(maxsize=16)
def _vendor_code(name: str) -> tuple[Any, list]:
    """A vendor code object and its instructions as the scheduler sees them."""
    from argus.asm.aiter import aiter_root
    from argus.asm.codeobject import CodeObject
    from argus.asm.vendor import code_object_path

    code = CodeObject.from_file(code_object_path(aiter_root(), name))
    return code, statics_of(code.disassemble(code.kernels[0]))


_SAMPLES: dict[tuple, dict[int, list]] = {}
_SAMPLES_KEPT = 8


def _sample_groups(name: str, code: Any, shape: dict) -> tuple[tuple, dict[int, list]]:
    """Traced waves per workgroup of a sample launch; kept for the process, since a bench or a
    search asks for many problem sizes that share a sample."""
    from argus.asm.vendor import run_vendor

    key = (name, tuple(sorted(shape.items())))
    if key not in _SAMPLES:
        done = _emulated(lambda: run_vendor(name, shape=shape, code=code, trace=True), name)
        groups: dict[int, list] = {}
        for w in done.emulation.events.per_wave():
            groups.setdefault(w.workgroup, []).append(w)
        if len(_SAMPLES) >= _SAMPLES_KEPT:
            _SAMPLES.pop(next(iter(_SAMPLES)))
        _SAMPLES[key] = groups
    return key, _SAMPLES[key]


_SCHEDULES: dict[tuple, Any] = {}


def _schedule(key: tuple, n: int, waves: list, statics: list, bw: float,
              constants: Calibrated) -> Any:
    """schedule_cu, remembered per sample, workgroup count, bandwidth share and latency (the
    calibration re-times every row for each candidate latency)."""
    memo = (key, n, round(bw, 9), constants.vmem_latency, constants.vmem_issue)
    if memo not in _SCHEDULES:
        if len(_SCHEDULES) > 512:
            _SCHEDULES.clear()
        _SCHEDULES[memo] = schedule_cu(waves, statics, bytes_per_clk=bw, constants=constants,
                                       params=CU)
    return _SCHEDULES[memo]


def _vendor(name: str, sizes: dict, gpu: Any, constants: Calibrated, extrapolate: bool
            ) -> Timing:
    from argus.asm.vendor import vendor_kernels

    if name not in vendor_kernels():
        raise PerfError(f"unknown vendor kernel {name!r}; known: {', '.join(vendor_kernels())}")
    family = _family(name)
    if family is None:
        raise PerfError(f"{name}: sizes= is modelled for the bf16 GEMMs and non-causal "
                        f"attention (their workgroups all do the same work); for this kernel "
                        f"pass args= with grid= and block= to emulate the whole launch")
    unknown = set(sizes) - set(family.defaults) - ({"hk"} if family.loop == "sk" else set())
    if unknown:
        raise PerfError(f"{name} takes sizes {sorted(family.defaults)}, not {sorted(unknown)}")
    size = {**family.defaults, **sizes}
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
    line = 128
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
                      constants=constants)

    def cu_run(n: int) -> Any:
        scheduled = {trip: _schedule(keys[trip], n, runs[trip][n], statics, bw, constants)
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


"""Sampling and extrapolation: a launch timed from a few traced workgroups at small loop trip
counts, the busiest CU's schedule extrapolated linearly to the real trip count.

The model never launches anything itself: the caller passes `run_sample(shape) -> waves`
(the traced waves, per workgroup, of a sample launch at `shape`), so the same code serves our
compiled kernels (`time_kernel`, through the pipeline's time stage) and AMD's (`extrapolated`,
through `argus.vendor.timing`), and a measured runner could plug in behind the same callback.
Samples and schedules are remembered for the process: a bench or a search asks for many
problem sizes that share a sample.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from argus.ir import ops as O
from argus.ir.expr import evaluate, free_vars
from argus.ir.sizes import admits
from argus.isa_cdna3 import isa
from argus.isa_cdna3.numerics import ELEMENT_DTYPES
from argus.isa_cdna3.perf import store
from argus.isa_cdna3.perf.estimate import Timing, clock, combine, plan
from argus.isa_cdna3.perf.model import (
    FIXED_COST_UNITS,
    Occupancy,
    cu_atomic_rate,
    cu_bandwidth,
    occupancy,
    past_l2,
    schedule_cu,
    traffic,
)
from argus.isa_cdna3.perf.params import CU, Calibrated, GpuProfile, PerfError

#: loop sizes tried for a compiled kernel's two samples, smallest first
SAMPLE_TRIPS = (256, 512, 1024, 2048, 4096, 8192)
#: smaller sizes tried when SAMPLE_TRIPS has no pair below the real size and running the real
#: one would emulate more than SAMPLE_BUDGET instructions on a CU
LADDER = tuple(1 << i for i in range(12))
#: instructions the waves of a CU's round together may run in a timing sample before its loop
#: is sampled shorter: the emulator runs them and the scheduler replays them (together about
#: 230k instructions a CPU second), so the cost of a sample is its instructions per CU, not per
#: wave (2**14 a wave let Level 2 61's convolution take 44.5 CPU seconds; at 2**17 a CU 9.1 s,
#: Level 1 58's 28.3 -> 22.4 s at -0.42% against simulating the real trip count:
#: bench/bench_model.py --kernelbench prints both)
SAMPLE_BUDGET = 1 << 17
Groups = Mapping[int, list]          # workgroup id -> its traced waves (emu.trace.WaveEvents)

_SAMPLES: dict[tuple, Groups] = {}
_SAMPLES_KEPT = 16
_SCHEDULES: dict[tuple, Any] = {}


def wave_budget(occ: Occupancy, workgroups: int, gpu: GpuProfile) -> float:
    """Instructions a wave of a sample may run: SAMPLE_BUDGET shared by the waves of the CU's
    round (the scheduler replays them all, the sampled workgroups copied when fewer)."""
    return SAMPLE_BUDGET / (plan(workgroups, occ, gpu).per_round * occ.waves_per_workgroup)


def occupancy_of(info: Any, threads: int) -> Occupancy:
    """Occupancy of a kernel (an `abi.KernelInfo`) launched with `threads` per workgroup."""
    return occupancy(vgprs=max(info.unified_vgpr_count, info.vgpr_count),
                     lds_bytes=info.group_segment_size, threads=threads)


def sampled(key: tuple, run: Callable[[], Groups], wave: Callable[..., Any] | None = None
            ) -> Groups:
    """The traced waves of sample `key`, run once per process (the oldest of `_SAMPLES_KEPT`
    is forgotten first) and, given the `wave` record type to rebuild them with, kept on disk
    for the next process (`perf.store`; the key names the code object by its digest)."""
    if key not in _SAMPLES and wave is not None and (
            stored := store.load(key, wave)) is not None:
        _keep(key, stored)
    if key not in _SAMPLES:
        groups = run()
        if wave is not None:
            store.save(key, dict(groups))
        _keep(key, groups)
    return _SAMPLES[key]


def _keep(key: tuple, groups: Groups) -> None:
    if len(_SAMPLES) >= _SAMPLES_KEPT:
        _SAMPLES.pop(next(iter(_SAMPLES)))
    _SAMPLES[key] = groups


def schedule(key: tuple, n: int, waves: list, statics: list, bw: float, atomics: float,
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


def forget(*, disk: bool = False) -> None:
    """Drop the remembered samples and schedules, and with `disk` the stored sample traces (a
    cold start, for timing the model itself)."""
    if disk:
        store.clear()
    _SAMPLES.clear()
    _SCHEDULES.clear()


@attrs.frozen
class Sampled:
    """A launch's samples, emulated but not yet scheduled: the bytes the launch requests in all
    (extrapolated from the samples' traces), and its timing at a CU bandwidth (`timing(None)`:
    at the bandwidth its own traffic leaves a CU). The schedules, the costly half, run only
    when `timing` is called, so a caller that needs the traffic of several samples before it
    knows their bandwidth (`time_kernel`'s nested samples) schedules each once."""
    requested: float
    timing: Callable[[float | None], Timing]

    @classmethod
    def fixed(cls, timing: Timing) -> Sampled:
        """An already-timed launch (its bandwidth set by its own traffic)."""
        return cls(timing.bytes_requested, lambda _bandwidth: timing)


def extrapolated(name: str, *, bandwidth: float | None = None, **sample: Any) -> Timing:
    """`sampled_launch(name, **sample)` timed at `bandwidth` (the bytes per clock a CU fills
    at; default: its own traffic's, `cu_bandwidth`)."""
    return sampled_launch(name, **sample).timing(bandwidth)


def sampled_launch(name: str, *, trips: Sequence[int], real: int, loop: str,
                   run_sample: Callable[[int], tuple[tuple, Groups]], statics: list,
                   occ: Occupancy, workgroups: int, footprint: float, gpu: GpuProfile,
                   constants: Calibrated, shape: dict, note: str | None = None,
                   dispatch: np.ndarray | None = None,
                   position: Callable[[int], float] | None = None,
                   per_xcd: float | None = None, same_round: float | None = None,
                   rereads: tuple[float, float] = (0.0, 0.0), kinds: bool = False) -> Sampled:
    """Time a launch of `workgroups` from samples at one or two trip counts of `loop`:
    `run_sample(trip)` gives the sample's key and its traced waves per workgroup. The first
    `per_round` sampled workgroups stand for a CU's round (copied when the sample has fewer),
    the bytes and flops per workgroup and the per-CU schedule are interpolated linearly to
    `real` (linearly in `position(size)`, the loop's trip count, when given: a loop over
    cdiv(size, block) is linear in that, not in the size), and `footprint` bounds the
    compulsory HBM traffic and `per_xcd` the bytes fetched past the XCDs' L2s (`model.past_l2`
    from the operands' readers, for AMD's kernels and ours alike; default: every XCD with
    workgroups reads the whole footprint, the most it can be; see `model.traffic`),
    `same_round` the share of the cross-XCD repeats issued in the round of their first read.
    `dispatch`, when the workgroups
    loop different numbers of times, holds each one's trip count (`real` is then unused): the
    workgroups are dealt to CU slots as they free up (`critical_slot`, costs read off the two
    sampled schedules), the slot that finishes last sets the rounds and their trip count, and
    the bytes and flops are interpolated to the launch's mean trip count (the caller's `note`
    says how it sampled). The timing's bandwidth (`Sampled.timing`), when given, is the bytes
    per clock a CU fills at (`cu_bandwidth`) in place of the samples' own: another launch's,
    which these samples stand for at a shorter inner loop (`time_kernel`'s nested samples).
    With `kinds`, the sample holds
    workgroups of every kind a branch on the workgroup id makes (more than a round): the bytes
    and flops per workgroup are their mean, and a round takes the costliest of them."""
    p = plan(workgroups, occ, gpu)
    line = 1 << isa.CACHE_LINE_SHIFT
    runs: dict[int, list[list]] = {}
    keys: dict[int, tuple] = {}
    per_wg: dict[int, tuple[float, float]] = {}
    sampled: dict[int, list[list]] = {}
    simulated = 0
    for trip in trips:
        keys[trip], groups = run_sample(trip)
        first = sorted(groups) if kinds else sorted(groups)[:p.per_round]
        simulated = len(first)
        sampled[trip] = [groups[g] for g in first]
        per_wg[trip] = (sum(sum(w.lines) for g in first for w in groups[g]) * line / len(first),
                        sum(statics[i].flops for g in first for w in groups[g] for i in w.index)
                        / len(first))
        runs[trip] = _resident(groups, first, p.per_round)
    at = position or float

    def along(trip: float) -> float:
        return ((at(trip) - at(trips[0])) / (at(trips[1]) - at(trips[0])) if len(trips) == 2
                else 0.0)

    spread = along(real if dispatch is None else float(dispatch.mean()))
    requested, flops = (a + spread * (b - a) for a, b in zip(per_wg[trips[0]], per_wg[trips[-1]]))
    total_requested = requested * workgroups
    # each XCD the workgroups are dealt to fetches the footprint's lines once (`traffic`)
    moved = traffic(gpu, requested=total_requested, unique=footprint,
                    per_xcd=footprint * min(gpu.xcds.value, workgroups) if per_xcd is None
                    else per_xcd, footprint=footprint,
                    rounds=p.full_rounds + (1 if p.tail else 0), same_round=same_round,
                    rereads=rereads)
    hbm = moved.hbm
    own = cu_bandwidth(gpu, active_cus=p.active_cus, hbm_share=moved.hbm_share,
                       constants=constants, mall_share=moved.mall_share)
    atomics = cu_atomic_rate(gpu, active_cus=p.active_cus, constants=constants)

    def timing(bandwidth: float | None) -> Timing:
        """The sampled workgroups' CU rounds scheduled at `bandwidth` bytes per clock (default:
        the launch's own, `own`), extrapolated to the launch's trip count."""
        bw = bandwidth or own

        def chosen(t: int, n: int) -> list[list]:
            """A round of `n` of trip `t`'s resident workgroups: the first n, but where n
            is fewer than were sampled, the costliest n (the busiest CU's), not the lowest
            ids: a strided transposed convolution's phases are bands of workgroups, and the
            first seven of Level 1 77's eight were phases no tap reaches (its time was their
            stores, 0.51x the roofline)."""
            if n >= simulated:
                return runs[t][:n]
            return sorted(sampled[t], key=lambda g: -sum(len(w.index) for w in g))[:n]

        def cu_run(n: int, weight: float) -> Any:
            scheduled = [schedule(keys[t], n, [w for g in chosen(t, n) for w in g], statics,
                                  bw, atomics, constants) for t in trips]
            return scheduled[0] if len(trips) == 1 else \
                scheduled[0].scaled(scheduled[1], weight)

        launch, told = p, note
        if dispatch is not None:
            # slots share their CU: as many run side by side as the busiest CU holds at once
            resident = min(p.per_round, p.busiest)
            low, high = cu_run(resident, 0.0), cu_run(resident, 1.0)
            per_trip = (high.cycles - low.cycles) / (trips[-1] - trips[0]) \
                if len(trips) == 2 else 0.0
            fixed = low.cycles - per_trip * trips[0]
            count, trip = critical_slot(dispatch, int(gpu.cus.value) * resident,
                                        fixed / per_trip if per_trip > 0 else math.inf)
            launch = attrs.evolve(p, full_rounds=count, tail=0)
            rounds = [cu_run(resident, along(trip))] * count
        else:
            weight = along(real)
            rounds = [cu_run(p.per_round, weight)] * p.full_rounds + (
                [cu_run(p.tail, weight)] if p.tail else [])
        if len(trips) == 2 and dispatch is None:
            sampled_note = (f"{simulated} workgroup(s) simulated at {loop}={trips[0]} and "
                            f"{trips[1]}, per-CU time extrapolated linearly to {loop}={real}")
            told = sampled_note + (f"; {note}" if note else "")
        return combine(name, gpu, occ, launch, rounds, flops=flops * workgroups,
                       bytes_requested=total_requested, bytes_hbm=hbm, constants=constants,
                       extrapolation=told, shape=shape)

    return Sampled(total_requested, timing)


def critical_slot(trips: np.ndarray, slots: int, fixed: float) -> tuple[int, float]:
    """The workgroups (how many, their mean trip count) of the CU slot that finishes last when
    the workgroups, in launch order, each take the slot that frees first (the dispatcher hands
    a workgroup to a CU as soon as one has room), a workgroup costing `fixed` + its trip count
    (`fixed` infinite: all cost alike)."""
    if not math.isfinite(fixed):
        count = -(-trips.size // slots)
        return count, float(trips[:count].mean())
    heap = [(0.0, slot) for slot in range(min(slots, trips.size))]
    members: list[list[int]] = [[] for _ in heap]
    for trip in trips.tolist():
        end, slot = heapq.heappop(heap)
        members[slot].append(trip)
        heapq.heappush(heap, (end + fixed + trip, slot))
    _, last = max(heap)
    return len(members[last]), float(np.mean(members[last]))


def _resident(groups: Groups, first: list[int], per_round: int) -> list[list]:
    """The waves of a CU's round, one list per workgroup: the sampled ones, copied (with fresh
    workgroup ids) when the sample has fewer than `per_round`."""
    resident = []
    for slot in range(per_round):
        copy, source = divmod(slot, len(first))
        waves = groups[first[source]]
        resident.append(waves if not copy else
                        [attrs.evolve(w, workgroup=w.workgroup + copy * len(first))
                         for w in waves])
    return resident


# ------------------------------------------------------------------------ compiled kernels
def loop_bound_names(ir: O.Kernel) -> list[str]:
    """The variables the kernel's loop bounds mention, outermost loop first, each once."""
    names: list[str] = []
    for op in ir.ops():
        if isinstance(op, O.For):
            names += [v.name for v in sorted(free_vars(op.start) | free_vars(op.stop),
                                             key=lambda v: v.name) if v.name not in names]
    return names


def trip_size(ir: O.Kernel, grid: Callable[..., tuple], sizes: dict, first: int) -> str | None:
    """The size to extrapolate the main loop's trip count along: one a loop bound mentions,
    preferably one the grid does not depend on (the K of a GEMM, the H of a MoE GEMM), else
    one whose growth only adds workgroups beyond the sampled `first` of the first grid row
    (the sequence length of attention); None when no loop runs a size-dependent number of
    times."""
    candidates = [n for n in loop_bound_names(ir) if n in sizes]
    real = grid(**sizes)
    for name in candidates:
        if grid(**{**sizes, name: sizes[name] * 2}) == real:
            return name
    for name in candidates:
        rows = grid(**{**sizes, name: min(SAMPLE_TRIPS)})
        if rows[1:] == real[1:] and rows[0] >= first:
            return name
    return None


def readers_of(ir: O.Kernel, grid: Sequence[int], sizes: Mapping[str, int]
               ) -> list[tuple[float, float, float]]:
    """Each tensor's (bytes, workgroups reading each of its bytes, workgroup-id distance
    between consecutive readers) at `sizes` on `grid` (x fastest), for `model.past_l2`. The
    bytes are those the grid can reach: a read through loaded data whose workgroups take
    fewer values than there are (81 row blocks over 128 experts) reaches that share of the
    tensor at most.

    A tensor whose first read's origin is a function of the program ids, sizes and loop
    variables is counted by evaluating that origin for every workgroup (`_sharing`: the
    workgroups with one origin read the same bytes, however the ids are remapped). Else, axis
    by axis: a read depends on grid axis a directly when its coordinates follow a's program
    id (through loop bounds too), so the workgroups along a read different bytes, and a tensor
    no read of which depends on a is read alike by all grid[a] of them. A
    coordinate taken from loaded data (an expert id read with `scalar.load`, a gathered row)
    that follows a spreads the grid[a] workgroups' reads over that data's values: each value
    is read by grid[a] x (values each workgroup takes) / (distinct values) of them, the rule
    AMD's MoE families state (an expert's blocks share its weights, a token's row is gathered
    by its top-k experts' blocks). Consecutive readers sit one step of the lowest shared axis
    apart (an expert's blocks are adjacent once routing sorts them). A tensor only written
    counts one reader."""
    direct: dict[str, frozenset[int]] = {}
    loaded: dict[str, frozenset[int]] = {}        # vars holding loaded data that follows axes

    def deps(exprs) -> tuple[frozenset[int], frozenset[int]]:
        d: set[int] = set()
        ld: set[int] = set()
        for e in exprs:
            for v in free_vars(e):
                d |= direct.get(v.name, frozenset())
                ld |= loaded.get(v.name, frozenset())
        return frozenset(d), frozenset(ld)

    def extent(tensor, axis: int) -> int:
        return int(evaluate(tensor.type.shape[axis], sizes))

    reads: dict[str, dict[int, float]] = {}      # tensor -> axis -> readers along it (0: none)
    touched: dict[str, float] = {}               # tensor -> share of it any workgroup reads
    # index tables declared (`T.distinct`) to hold each value of [lo, hi) at most once
    distinct = {op.tensor.name: (int(evaluate(op.lo, sizes)), int(evaluate(op.hi, sizes)))
                for op in ir.ops() if isinstance(op, O.Distinct)
                and {v.name for v in (*free_vars(op.lo), *free_vars(op.hi))} <= sizes.keys()}

    def record(tensor, exprs, spread: tuple[frozenset[int], float, int, float | None] | None
               = None) -> None:
        d, ld = deps(exprs)
        seen = reads.setdefault(tensor.name, {})
        reached = 1.0
        for a in range(len(grid)):
            if a in d:
                seen[a] = 0.0
            elif a in ld or (spread and a in spread[0]):
                # values per workgroup over the distinct values (an expert id: one of E)
                per, values = (spread[1], spread[2]) if spread and a in spread[0] else (1, 0)
                share = grid[a] * per / values if values else 1.0
                if spread and a in spread[0] and spread[3] is not None:
                    # rows gathered through a table holding each id once: one workgroup
                    # along the axis reads each row per id that names it, the divisor's
                    # many (the padding between them is skipped, not another reader)
                    share = min(share, spread[3])
                seen[a] = min(seen.get(a, share), max(1.0, share))
                # the grid[a] workgroups take at most grid[a] x per of the values: the rest
                # of the tensor (the weights of experts no block routes to) is never read
                reached *= min(1.0, share)
            else:
                seen.setdefault(a, float(grid[a]))
        touched[tensor.name] = max(touched.get(tensor.name, 0.0), reached)

    scalar_values: dict[str, int] = {}
    evaluable: dict[str, tuple] = {}          # tensor -> the origin of its first plain read
    for op in ir.ops():
        if isinstance(op, O.ProgramId):
            direct[op.var.name] = frozenset({op.axis})
        elif isinstance(op, O.For):
            direct[op.iv.name], loaded[op.iv.name] = deps((op.start, op.stop))
        elif isinstance(op, O.ScalarLoad):
            d, ld = deps(op.index)
            loaded[op.var.name] = d | ld
            lo, hi = ((int(evaluate(e, sizes)) for e in op.bounds) if op.bounds
                      else (op.var.lo, op.var.hi))
            scalar_values[op.var.name] = max(1, hi - lo)
        elif isinstance(op, O.GlobalLoad | O.AsyncCopy):
            spread = None
            gather = getattr(op, "gather", None)
            if gather is not None:
                d, ld = deps((gather.origin,))
                rows = op.result.type.shape[gather.tile_axis] if isinstance(op, O.GlobalLoad) \
                    else op.tile.shape[gather.tile_axis]
                once = distinct.get(gather.index.name)
                divisor = getattr(gather, "divisor", 1)
                covers = once is not None and once[0] <= 0 \
                    and once[1] >= extent(op.tensor, gather.axis) * divisor
                spread = (d | ld, rows, extent(op.tensor, gather.axis),
                          float(divisor) if covers else None)
            values = [scalar_values[v.name] for e in op.origin for v in free_vars(e)
                      if v.name in scalar_values]
            if values and spread is None:
                _, ld = deps(op.origin)
                spread = (ld, 1, max(values), None)
            if spread is None and not deps(op.origin)[1]:
                evaluable.setdefault(op.tensor.name, op.origin)
            else:
                evaluable[op.tensor.name] = ()      # a read through loaded data: the axes
            record(op.tensor, op.origin, spread)
    starts = {op.iv.name: op.start for op in ir.ops() if isinstance(op, O.For)}
    ids = {op.var.name: op.axis for op in ir.ops() if isinstance(op, O.ProgramId)}
    out = []
    for t in ir.tensors:
        nbytes = float(math.prod(int(evaluate(e, sizes)) for e in t.type.shape)
                       * ELEMENT_DTYPES[t.type.dtype].itemsize) * touched.get(t.name, 1.0)
        along = reads.get(t.name)
        if not along:
            out.append((nbytes, 1.0, 0.0))
            continue
        shared = _sharing(evaluable.get(t.name, ()), grid, sizes, ids, starts)
        if shared is not None:
            out.append((nbytes, *shared))
            continue
        shared = [a for a in range(len(grid)) if along.get(a, 0.0) > 1.0]
        readers = math.prod(along[a] for a in shared)
        stride = math.prod(grid[:shared[0]]) if shared else 0
        out.append((nbytes, float(readers), float(stride)))
    return out


#: workgroups whose first reads `_sharing` evaluates (the first ones of a larger grid)
SHARING_SAMPLE = 1 << 18


def _sharing(origin: tuple, grid: Sequence[int], sizes: Mapping[str, int],
             ids: Mapping[str, int], starts: Mapping[str, Any]) -> tuple[float, float] | None:
    """(readers, stride) of a read whose `origin` is a function of the program ids, the
    sizes and loop variables (taken at their first trip): the origin evaluated for every
    workgroup (x fastest), workgroups with the same origin read the same bytes, so the
    readers are the workgroups per distinct origin and the stride the commonest id gap
    between consecutive ones. Remapped ids (a grouped-query head `bh // ratio`, a swizzled
    tile order) count as they run. None when the origin names anything else."""
    if not origin:
        return None
    count = min(math.prod(grid), SHARING_SAMPLE)
    g = np.arange(count, dtype=np.int64)
    coords = grid_coords(g, grid)
    env: dict[str, Any] = {**sizes, **{name: coords[axis] for name, axis in ids.items()}}
    try:
        for name, start in starts.items():
            env[name] = evaluate(start, env)
        columns = [np.broadcast_to(np.asarray(evaluate(e, env), np.int64), g.shape)
                   for e in origin]
    except (KeyError, TypeError, ValueError):
        return None
    _, inverse, counts = np.unique(np.stack(columns, 1), axis=0, return_inverse=True,
                                   return_counts=True)
    inverse = inverse.reshape(-1)
    order = np.lexsort((g, inverse))
    same = np.diff(inverse[order]) == 0
    gaps = np.diff(g[order])[same]
    stride = float(np.bincount(gaps).argmax()) if gaps.size else 0.0
    return count / len(counts), stride


def _moved(ir: O.Kernel, grid: Sequence[int], sizes: Mapping[str, int], occ: Occupancy,
           gpu: GpuProfile) -> dict:
    """`extrapolated`'s per_xcd, same_round and rereads for a compiled kernel (`readers_of`,
    `rereads_of`)."""
    workgroups = math.prod(grid)
    window = plan(workgroups, occ, gpu).per_round * int(gpu.cus.value)
    past, same = past_l2(readers_of(ir, grid, sizes), int(gpu.xcds.value), workgroups, window)
    return {"per_xcd": past, "same_round": same,
            "rereads": reread_traffic(rereads_of(ir, sizes), workgroups, window, gpu)}


def rereads_of(ir: O.Kernel, sizes: Mapping[str, int]) -> list[tuple[float, int]]:
    """(bytes, passes) of each tensor loaded in more than one of the kernel's outermost loops:
    a row program reads its row once per pass (the max, the sum, the output), and a
    workgroup's later pass comes back to a line only after its whole slice went by."""
    passes: dict[str, int] = {}
    tensors = {t.name: t for t in ir.tensors}

    def outermost(block) -> None:
        for op in block.ops:
            if isinstance(op, O.For):
                for name in {inner.tensor.name for inner in O.walk(op.body)
                             if isinstance(inner, O.GlobalLoad | O.AsyncCopy)}:
                    passes[name] = passes.get(name, 0) + 1
            else:
                for inner in op.blocks:
                    outermost(inner)

    outermost(ir.body)
    return [(math.prod(int(evaluate(e, sizes)) for e in tensors[n].type.shape)
             * ELEMENT_DTYPES[tensors[n].type.dtype].itemsize, k)
            for n, k in passes.items() if k > 1 and n in tensors]


def reread_traffic(rereads: Sequence[tuple[float, int]], workgroups: int, window: int,
                   gpu: GpuProfile) -> tuple[float, float]:
    """(bytes the Infinity Cache serves, bytes read from HBM) of the later passes of
    `rereads`: a pass comes back to a line after the `window` resident workgroups read their
    slices (bytes / workgroups each); within one XCD's share of that the L2 still holds it,
    within the whole of it the Infinity Cache (256 MB), else HBM."""
    mall = hbm = 0.0
    xcds = int(gpu.xcds.value)
    for nbytes, passes in rereads:
        distance = nbytes / max(1, workgroups) * min(window, workgroups)
        again = nbytes * (passes - 1)
        if distance / xcds <= gpu.l2_bytes_per_xcd.value:
            continue
        if distance <= gpu.mall_bytes.value:
            mall += again
        else:
            hbm += again
    return mall, hbm


#: the workgroups a sample of a kernel branching on the workgroup id runs along the grid's
#: first axis (`time_kernel`): a 3-D strided transposed convolution has 8 phase bands
BRANCHED_SAMPLE = 16


def time_kernel(ir: O.Kernel, *, bandwidth: float | None = None, **launch: Any) -> Timing:
    """`prepared(ir, **launch)` timed at `bandwidth` (bytes per clock a CU fills at; default:
    its own traffic's)."""
    return prepared(ir, **launch).timing(bandwidth)


def prepared(ir: O.Kernel, *, grid: Callable[..., tuple], sizes: dict, info: Any,
             threads: int, statics: list, run_sample: Callable[[dict, tuple[int, ...]], list],
             sample_key: Callable[[dict, tuple[int, ...]], tuple], gpu: GpuProfile,
             constants: Calibrated, extrapolate: bool = True,
             wave: Callable[..., Any] | None = None, nested: bool = True) -> Sampled:
    """A compiled kernel at `sizes` (checked by the caller): `run_sample(shape, groups)` runs
    the workgroups `groups` (linear ids) of the grid at `shape` and gives their traced waves.
    The size setting the main loop's trip count (`trip_size`) is sampled at two small values
    and the schedule extrapolated to the real one; sizes no loop bound names are shrunk as far
    as the assumptions and the first grid row allow (the sampled workgroups do the work of
    every workgroup; a size that sets a trip count keeps its value, else the sample would time
    shorter loops than the launch runs). A kernel whose trip counts depend on the workgroup id
    (a causal mask) is sampled by trip count instead (`_stratified`). The samples are emulated
    here; their schedules run when the result's `timing` is called (`Sampled`)."""
    real_grid = grid(**sizes)
    workgroups = math.prod(real_grid)
    occ = occupancy_of(info, threads)
    first = min(plan(workgroups, occ, gpu).per_round, real_grid[0])
    # a branch on the workgroup id (a strided transposed convolution's phases, bands of
    # workgroups along the grid's first axis) makes workgroups of kinds the first round's
    # ids need not hold: the sample takes BRANCHED_SAMPLE along that axis
    ids = {op.var.name: op.axis for op in ir.ops() if isinstance(op, O.ProgramId)}
    branched = any(isinstance(op, O.If) and {v.name for v in free_vars(op.cond)} & set(ids)
                   for op in ir.ops())
    if branched:
        first = min(real_grid[0], max(first, BRANCHED_SAMPLE))
    budget = wave_budget(occ, workgroups, gpu)
    footprint = _footprint(ir, real_grid, sizes)
    varying = [op for op in ir.ops() if isinstance(op, O.For)
               and {v.name for v in free_vars(op.start) | free_vars(op.stop)} & set(ids)]
    loop = trip_size(ir, grid, sizes, first)
    trips = workgroup_trips(varying, ids, real_grid, sizes) if varying else None
    if varying and trips is not None:
        if len(np.unique(trips)) > 1:
            return Sampled.fixed(_stratified(
                ir, grid=grid, sizes=sizes, loop=loop, loops=varying, ids=ids, trips=trips,
                occ=occ, statics=statics, run_sample=run_sample, sample_key=sample_key, gpu=gpu,
                constants=constants, footprint=footprint, extrapolate=extrapolate, wave=wave))
    real = sizes[loop] if loop else 0
    trip_counts, position = (_trips(ir, grid, sizes, loop, first) if loop and extrapolate
                             else ((real,), None))
    base = _shrunk(ir, grid, sizes, loop, first)

    def along(name: str | None, trip: int) -> tuple[tuple, Groups]:
        shape = {**base, name: trip} if name else base
        return _groups_of(shape, tuple(range(first)), run_sample, sample_key, wave)

    note = None
    if extrapolate and len(trip_counts) == 1:
        if nested:
            inner = _inner_split(ir, grid, sizes, base, lambda shape: _groups_of(
                {**base, **shape}, tuple(range(first)), run_sample, sample_key, wave)[1],
                budget)
            if inner is not None:
                name, points, n_real = inner
                again = dict(grid=grid, info=info, threads=threads, statics=statics,
                             run_sample=run_sample, sample_key=sample_key, gpu=gpu,
                             constants=constants, wave=wave, nested=False)
                low, high = (prepared(ir, sizes={**sizes, name: t}, **again)
                             for t, _ in points)
                # the samples' caches serve a shorter loop's bytes (less of X at fewer
                # channels): their CU schedules run at the bandwidth the real launch's traffic
                # leaves a CU (`cu_bandwidth`), known from the samples' traces before any
                # schedule runs
                real = _real_traffic(ir, real_grid, sizes, occ, gpu, constants, footprint,
                                     _along(low.requested, high.requested, points, n_real))
                own = [_real_traffic(ir, grid(**at), at, occ, gpu, constants,
                                     _footprint(ir, grid(**at), at), timed.requested)[0]
                       for at, timed in zip(({**sizes, name: t} for t, _ in points),
                                            (low, high), strict=True)]
                bw = real[0] if any(abs(b / real[0] - 1) > 0.01 for b in own) else None
                timing = _along_trips(low.timing(bw), high.timing(bw), points, n_real, name,
                                      sizes, gpu, constants)
                return Sampled.fixed(attrs.evolve(timing, bytes_hbm=real[1]))
        budgeted = _budgeted(ir, grid, sizes, base, along, budget)
        if budgeted is not None:
            loop, trip_counts, position, note = budgeted
            real = sizes[loop]

    def one(trip: int) -> tuple[tuple, Groups]:
        return along(loop, trip)

    if varying and trips is None:   # trip counts set by the workgroup id and by loaded values
        note = ("loop trip counts differ between workgroups (they depend on the workgroup id "
                "and on values the model cannot evaluate before the run): the first "
                f"{first} workgroup(s) stand for all, so the time is only as good as they "
                "are typical" + (f"; {note}" if note else ""))
    return sampled_launch(ir.name, trips=trip_counts, real=real, loop=loop or "",
                          run_sample=one, statics=statics, occ=occ, workgroups=workgroups,
                          footprint=footprint, gpu=gpu, constants=constants, shape=sizes,
                          note=note, position=position, kinds=branched,
                          **_moved(ir, real_grid, sizes, occ, gpu))


def trip_count(ir: O.Kernel, name: str, shape: Mapping[str, int]) -> int:
    """The trip count at `shape` of the first (outermost) loop whose bounds mention size
    `name` (other variables in the bounds, program ids and outer induction variables, read
    as 0)."""
    for op in ir.ops():
        if isinstance(op, O.For):
            used = free_vars(op.start) | free_vars(op.stop)
            if name in {v.name for v in used}:
                return int(loop_trips(op, {v.name: shape.get(v.name, 0) for v in used}))
    return 0


def whole_tiles(ir: O.Kernel, name: str, shape: Mapping[str, int]) -> bool:
    """Whether size `name` ends the loop on a whole tile: the trip count grows by the same
    positive step from the size to twice and three times it (a loop over cdiv(size, block)
    below the block, or ending on a partial tile, does not; one over size // block, less a
    pipeline's prologue, does). A sample whose last trip reads a partial tile moves fewer
    bytes per trip than the real run's trips do, so bytes extrapolated from it in the trip
    count are wrong, and with them the share of the requested bytes that must come from HBM."""
    n1, n2, n3 = (trip_count(ir, name, {**shape, name: k * shape[name]}) for k in (1, 2, 3))
    return n3 - n2 == n2 - n1 > 0


def loop_trips(op: O.For, env: Mapping[str, Any]) -> Any:
    """How many times `op` runs with its bounds evaluated in `env` (numbers, or numpy arrays
    of them: one trip count per element)."""
    span = np.asarray(evaluate(op.stop, env)) - np.asarray(evaluate(op.start, env))
    return np.maximum(0, -(-span // op.step))


def _budgeted(ir: O.Kernel, grid: Callable[..., tuple], sizes: dict, base: dict,
              along: Callable[[str | None, int], tuple[tuple, Groups]], budget: float
              ) -> tuple[str, tuple[int, int], Callable[[int], float], str] | None:
    """A loop size and two small values of it to sample instead of the real one, when the real
    run would emulate more than `budget` instructions per wave (the CU's share of
    SAMPLE_BUDGET): for each size a loop
    bound names that the grid does not depend on (outermost first), the two smallest LADDER
    values giving different trip counts (`trip_count`) are run, the instructions per wave
    extrapolated to the real size, and, over budget, the largest pair of LADDER values
    estimated within it is taken; the note says so. None when the real size fits or no loop
    can be sampled shorter."""
    real_grid = grid(**sizes)

    def cost(name: str, trip: int) -> int:
        _, groups = along(name, trip)
        return max((len(w.index) for waves in groups.values() for w in waves), default=0)

    for name in (n for n in loop_bound_names(ir) if n in sizes):
        if grid(**{**sizes, name: sizes[name] * 2}) != real_grid:
            continue
        points: list[tuple[int, int]] = []
        for t in LADDER:
            if t >= sizes[name] or not admits(ir, {**sizes, name: t}):
                continue
            n = trip_count(ir, name, {**base, name: t})
            if whole_tiles(ir, name, {**base, name: t}) and (not points or n > points[-1][1]):
                points.append((t, n))
        n_real = trip_count(ir, name, {**base, name: sizes[name]})
        if len(points) < 2 or n_real <= points[-1][1]:
            continue
        (t0, n0), (_, n1) = points[0], points[1]
        c0 = cost(name, t0)
        slope = (cost(name, points[1][0]) - c0) / (n1 - n0)
        if slope <= 0:
            continue

        def estimate(n: int, c0: int = c0, n0: int = n0, slope: float = slope) -> float:
            return c0 + slope * (n - n0)

        if estimate(n_real) <= budget:
            return None
        fits = [i for i in range(1, len(points)) if estimate(points[i][1]) <= budget]
        j = max(fits, default=1)
        at = {t: float(n) for t, n in points} | {sizes[name]: float(n_real)}
        note = (f"the real {name} would emulate about {estimate(n_real):,.0f} instructions "
                f"per wave (sampling budget {budget:,.0f}): extrapolated in the loop's "
                f"trip count ({points[j - 1][1]}, {points[j][1]} -> {n_real}), the further "
                "iterations timed as the sampled ones, their cache behaviour included")
        return name, (points[j - 1][0], points[j][0]), at.__getitem__, note
    return None


#: how far past its budget one trip of the outer sampled loop may go before an inner loop is
#: sampled shorter too: the outer pair at trips 1 and 2 runs three such trips, so past the
#: budget the nested samples (four, at small inner sizes) cost less
NESTED_OVER = 1


def _inner_split(ir: O.Kernel, grid: Callable[..., tuple], sizes: dict, base: dict,
                 probe: Callable[[dict], Groups], budget: float
                 ) -> tuple[str, tuple[tuple[int, int], tuple[int, int]], int] | None:
    """(inner size, two LADDER values of it with their trip counts, the real trip count)
    when even one trip of the outermost sampled loop emulates more than NESTED_OVER x
    `budget` instructions per wave (a 3-D convolution's depth loop around 125 taps and 64
    channels: a million): the innermost loop size the grid does not set is then sampled at
    two small values too, each timed with the outer loop extrapolated as usual, and the time
    extrapolated linearly in its trip count (`_along_trips`). The values are the largest pair
    whose samples at the outer loop's shortest trip stay within the budget (the first trips
    overlap less across waves than later ones: a convolution's slope from trips 1 and 2 was
    9.5% too steep), the two smallest when none does, and never a pair from a single trip
    while a larger pair exists. None when not needed."""
    real_grid = grid(**sizes)
    names = [n for n in loop_bound_names(ir) if n in sizes
             and grid(**{**sizes, n: sizes[n] * 2}) == real_grid]

    def ladder(name: str, at: dict) -> list[tuple[int, int]]:
        points: list[tuple[int, int]] = []
        for t in LADDER:
            if t >= sizes[name] or not admits(ir, {**at, name: t}):
                continue
            n = trip_count(ir, name, {**base, **at, name: t})
            if not points or n > points[-1][1]:
                points.append((t, n))
        return points

    # the outermost loop a sample can shorten, and the innermost other one it can shorten twice
    outer = next((n for n in names if ladder(n, sizes)), None)
    inner = next((n for n in reversed(names) if n != outer and len(ladder(n, sizes)) >= 2),
                 None)
    if outer is None or inner is None:
        return None
    shortest = ladder(outer, sizes)
    n_real = trip_count(ir, inner, {**base, inner: sizes[inner]})
    small = [p for p in ladder(inner, sizes) if p[1] < n_real]
    if len(small) < 2:
        return None
    joint = {outer: shortest[0][0], inner: small[0][0]}
    if not admits(ir, {**sizes, **joint}):
        return None
    try:
        groups = probe(joint)
    except PerfError:       # the probe itself does not run: time it the one-level way
        return None
    per_wave = max((len(w.index) for waves in groups.values() for w in waves), default=0)
    if per_wave * n_real / small[0][1] <= NESTED_OVER * budget:
        return None
    # a single trip has no steady state to extrapolate from (`_trips`): Level 2 11's
    # convolution from channel trips 1 and 2 to 32 was 11% under the full run
    least = 2 if len(small) > 2 and small[0][1] == 1 else 1
    fits = [i for i in range(least, len(small))
            if per_wave * small[i][1] / small[0][1] <= budget]
    j = max(fits, default=least)
    return inner, (small[j - 1], small[j]), n_real


def _footprint(ir: O.Kernel, grid: Sequence[int], sizes: Mapping[str, int]) -> float:
    """The bytes a launch can touch: every tensor, less what reads through loaded data (an
    expert id) cannot reach."""
    return sum(nbytes for nbytes, _, _ in readers_of(ir, grid, sizes))


def _along(low: float, high: float, points, n_real: int) -> float:
    """`low` and `high`, at `points`' trip counts, extrapolated linearly to `n_real`."""
    (_, n0), (_, n1) = points
    return max(0.0, low + (n_real - n0) / (n1 - n0) * (high - low))


def _real_traffic(ir: O.Kernel, grid: Sequence[int], sizes: dict, occ: Occupancy,
                  gpu: GpuProfile, constants: Calibrated, footprint: float,
                  requested: float) -> tuple[float, float]:
    """(bytes per clock a CU fills at, bytes read from HBM) of a launch at `sizes` that
    requests `requested` bytes in all (`extrapolated`'s traffic, for the real sizes)."""
    workgroups = math.prod(grid)
    p = plan(workgroups, occ, gpu)
    moved = traffic(gpu, requested=requested, unique=footprint,
                    footprint=footprint, rounds=p.full_rounds + (1 if p.tail else 0),
                    **_moved(ir, grid, sizes, occ, gpu))
    return (cu_bandwidth(gpu, active_cus=p.active_cus, hbm_share=moved.hbm_share,
                         constants=constants, mall_share=moved.mall_share), moved.hbm)


def _along_trips(low: Timing, high: Timing, points, n_real: int, name: str,
                 sizes: dict, gpu: GpuProfile, constants: Calibrated) -> Timing:
    """`high` extrapolated linearly from `low` in the trip count of `name` (counts
    `points`) to `n_real`: times, cycles, FLOPs, bytes and instructions; the unit and stall
    shares are the larger sample's."""
    (_, n0), (t1, n1) = points

    def mix(a: float, b: float) -> float:
        return _along(a, b, points, n_real)

    note = (f"{name} sampled at {points[0][0]} and {t1} (trip counts {n0}, {n1}) and the time "
            f"extrapolated linearly to {n_real} trips, each sample's outer loop extrapolated "
            f"in turn: {high.extrapolation or 'not'}")
    # no unit busier than the run is long (`CuRun.scaled`): each unit's busy clocks per
    # instance extrapolated alike, the cycles at least the busiest fixed-cost unit's
    busy = {u: mix(low.busy[u] * low.cycles_per_cu, high.busy[u] * high.cycles_per_cu)
            for u in high.busy}
    linear = mix(low.cycles_per_cu, high.cycles_per_cu)
    cycles = max(linear, *(busy[u] for u in FIXED_COST_UNITS))
    shares = {u: b / cycles if cycles else 0.0 for u, b in busy.items()}
    # at the clock the extrapolated load allows (`clock`), as `combine` sets it
    ghz = clock(gpu, active_cus=high.active_cus, mfma_busy=shares["MFMA"],
                constants=constants, valu_busy=shares["VALU"])
    microseconds = cycles / (ghz * 1e3) + constants.launch_us
    return attrs.evolve(high, microseconds=microseconds, cycles_per_cu=cycles, busy=shares,
                        clock_ghz=ghz,
                        flops=mix(low.flops, high.flops),
                        bytes_requested=mix(low.bytes_requested, high.bytes_requested),
                        bytes_hbm=mix(low.bytes_hbm, high.bytes_hbm),
                        instructions=round(mix(low.instructions, high.instructions)),
                        extrapolation=note, shape=dict(sizes))


def _groups_of(shape: dict, groups: tuple[int, ...],
               run_sample: Callable[[dict, tuple[int, ...]], list],
               sample_key: Callable[[dict, tuple[int, ...]], tuple],
               wave: Callable[..., Any] | None) -> tuple[tuple, Groups]:
    """The key and the traced waves, per workgroup, of workgroups `groups` run at `shape`."""
    key = sample_key(shape, groups)
    waves = sampled(key, lambda: {0: run_sample(shape, groups)}, wave)[0]
    by_group: dict[int, list] = {}
    for w in waves:
        by_group.setdefault(w.workgroup, []).append(w)
    return key, by_group


def grid_coords(g: np.ndarray, grid: Sequence[int]) -> tuple[np.ndarray, ...]:
    """The (x, y, z) workgroup coordinates of linear ids `g` (x fastest) on `grid`, a grid of
    one or two axes too."""
    gx, gy = (*grid, 1, 1)[:2]
    return g % gx, g // gx % gy, g // (gx * gy)


def workgroup_trips(loops: Sequence[O.For], ids: Mapping[str, int], grid: Sequence[int],
                    sizes: Mapping[str, int]) -> np.ndarray | None:
    """Trip counts of `loops` summed, per workgroup of `grid` (by linear id, x fastest), with
    each program id bound to its workgroup's coordinate; None when a bound names something else
    (a value loaded at run time)."""
    g = np.arange(math.prod(grid), dtype=np.int64)
    coords = grid_coords(g, grid)
    env: dict[str, Any] = {**sizes, **{name: coords[axis] for name, axis in ids.items()}}
    total = np.zeros(g.size, np.int64)
    for op in loops:
        try:
            total += loop_trips(op, env).astype(np.int64)
        except KeyError:
            return None
    return total


def strata(trips: np.ndarray, first: int) -> list[tuple[int, tuple[int, ...]]]:
    """Two trip counts of a sample launch to extrapolate between, each with up to `first`
    workgroups (linear ids) that run it: the largest, and the one nearest half of it (a wide
    base for the line); one when every workgroup loops equally."""
    values = np.unique(trips)
    high = int(values[-1])
    chosen = [high] if len(values) == 1 else [
        int(values[:-1][np.argmin(np.abs(values[:-1] - high / 2))]), high]
    return [(t, tuple(int(g) for g in np.flatnonzero(trips == t)[:first])) for t in chosen]


def _stratified(ir: O.Kernel, *, grid: Callable[..., tuple], sizes: dict, loop: str | None,
                loops: Sequence[O.For], ids: Mapping[str, int], trips: np.ndarray,
                occ: Occupancy, statics: list, run_sample: Callable, sample_key: Callable,
                gpu: GpuProfile, constants: Calibrated, footprint: float, extrapolate: bool,
                wave: Callable[..., Any] | None) -> Timing:
    """A kernel whose workgroups loop different numbers of times (the causal mask's query
    tiles): the trip count of every workgroup of the launch is evaluated from the loop bounds,
    and two sets of workgroups that each loop
    a known number of times (`strata`) are run at a small sample shape (the loop's size at a
    SAMPLE_TRIPS value, other sizes shrunk); `extrapolated` deals the launch's workgroups to CU
    slots by those trip counts and interpolates the slot that finishes last."""
    workgroups = trips.size
    per_round = plan(workgroups, occ, gpu).per_round
    shape = _sample_shape(ir, grid, sizes, loop, loops, ids, per_round) if extrapolate \
        else dict(sizes)
    picked = strata(workgroup_trips(loops, ids, grid(**shape), shape), per_round)
    if len(picked) == 1:                    # one trip count at the sample shape: the launch's
        shape = dict(sizes)
        picked = strata(trips, per_round)
    by_trip = dict(picked)

    def one(trip: int) -> tuple[tuple, Groups]:
        return _groups_of(shape, by_trip[trip], run_sample, sample_key, wave)

    counts = tuple(t for t, _ in picked)
    note = (f"trip counts vary by workgroup; stratified: {len(by_trip[counts[-1]])} "
            f"workgroup(s) simulated per trip count {' and '.join(map(str, counts))} at "
            + " ".join(f"{k}={v}" for k, v in shape.items())
            + f", workgroups dealt to CU slots as they free up and the last slot's time "
              f"interpolated linearly in the trip count (launch mean {trips.mean():.1f})")
    return extrapolated(ir.name, trips=counts, real=0, loop="trip", run_sample=one,
                        statics=statics, occ=occ, workgroups=workgroups, footprint=footprint,
                        gpu=gpu, constants=constants, shape=sizes, note=note, dispatch=trips,
                        **_moved(ir, grid(**sizes), sizes, occ, gpu))


def _sample_shape(ir: O.Kernel, grid: Callable[..., tuple], sizes: dict, loop: str | None,
                  loops: Sequence[O.For], ids: Mapping[str, int], per_round: int) -> dict:
    """The sizes a stratified sample runs at: the first size a loop bound names (`loop` first)
    that the assumptions admit at a SAMPLE_TRIPS value below it, at the second such value (the
    first when there is one), then every size no loop bound names halved while the assumptions
    hold and both strata keep `per_round` workgroups (or as many as they had). The trip counts
    are evaluated at the sample, so the grid may grow with the shrunk size."""
    base = dict(sizes)
    for name in dict.fromkeys([loop, *loop_bound_names(ir)]):
        if name not in sizes:
            continue
        small = [t for t in SAMPLE_TRIPS if t < sizes[name] and admits(ir, {**sizes, name: t})]
        if small:
            base[name] = small[min(1, len(small) - 1)]
            loop = name
            break
    bounding = set(loop_bound_names(ir)) | distinct_range_names(ir)
    scalars = {v.name: 0 for v in ir.scalars}

    def kept(shape: dict) -> tuple[int, ...]:
        trips = workgroup_trips(loops, ids, grid(**shape), shape)
        return tuple(len(g) for _, g in strata(trips, per_round)) if trips is not None else ()
    want = kept(base)
    for name in (v.name for v in ir.sizes):
        while name != loop and name not in bounding and base[name] > 1:
            trial = {**base, name: base[name] // 2}
            if not admits(ir, {**scalars, **trial}) or kept(trial) != want:
                break
            base = trial
    return base


def _trips(ir: O.Kernel, grid: Callable[..., tuple], sizes: dict, loop: str, first: int
           ) -> tuple[tuple[int, ...], Callable[[int], float] | None]:
    """The two smallest SAMPLE_TRIPS below the real size that the assumptions admit, that keep
    `first` workgroups in the first grid row, that end on a whole tile (`whole_tiles`) and
    that give the loop two different trip counts between 1 and the real one, with the trip
    count at each size (`position`: the schedule grows with the trips, and a loop over
    cdiv(size, block) has one trip for every size up to the block, so two sizes under it
    would time a loop that never grows; a single trip has no steady state to extrapolate
    from: a 64 x 49152 row sum 2048 columns a step was 18% off from 1 and 2 trips, 8.5% from
    2 and 4); the real size alone when there are not two."""
    n_real = trip_count(ir, loop, sizes)
    points: list[tuple[int, int]] = []
    for t in SAMPLE_TRIPS:
        shape = {**sizes, loop: t}
        if t >= sizes[loop] or not admits(ir, shape) or grid(**shape)[0] < first:
            continue
        n = trip_count(ir, loop, shape)
        if 1 < n < n_real and whole_tiles(ir, loop, shape) and (not points or n > points[-1][1]):
            points.append((t, n))
    if len(points) < 2:
        return (sizes[loop],), None
    (t0, n0), (t1, n1) = points[:2]
    at = {t0: float(n0), t1: float(n1), sizes[loop]: float(n_real)}
    return (t0, t1), at.__getitem__


def _shrunk(ir: O.Kernel, grid: Callable[..., tuple], sizes: dict, loop: str | None,
            first: int) -> dict:
    """`sizes` with every size no loop bound names halved while the assumptions hold and the
    first grid row still holds the `first` sampled workgroups. The assumptions are read with
    the scalar arguments the sample passes (0): an assumption tying a size to a scalar (a
    window `start + M <= R`) must keep holding, else the sample's loads would fall outside a
    shrunk tensor and read nothing (no traffic)."""
    bounding = set(loop_bound_names(ir)) | distinct_range_names(ir)
    base = dict(sizes)
    scalars = {v.name: 0 for v in ir.scalars}
    for name in (v.name for v in ir.sizes):
        while name != loop and name not in bounding and base[name] > 1:
            trial = {**base, name: base[name] // 2}
            if (not admits(ir, {**scalars, **trial}) or grid(**trial)[0] < first
                    or not whole_workgroups(grid, sizes, trial, name)):
                break
            base = trial
    return base


def distinct_range_names(ir: O.Kernel) -> set[str]:
    """The sizes a `T.distinct` range names (the real tokens of a routing table). A sample
    keeps them: the table's length follows the grid, which the sample keeps, so a shrunk range
    leaves it all padding (`sample_inputs`) and the rows gathered through it load nothing (the
    fp8 MoE GEMM's samples held 1 real token of 4096 rows, its X reads costing nothing)."""
    return {v.name for op in ir.ops() if isinstance(op, O.Distinct)
            for v in (*free_vars(op.lo), *free_vars(op.hi))}


def whole_workgroups(grid: Callable[..., tuple], sizes: dict, shape: dict, name: str) -> bool:
    """Whether every grid axis size `name` drives (at the real `sizes`, where halving it
    changes the axis) still counts whole workgroups at the shrunk `shape`: doubling the size
    there doubles the axis (an axis over cdiv(size, tile) with the size shrunk below the tile
    does not). A sampled workgroup whose tile the shrunk size cuts short moves less than the
    real ones do (a strided row's 64 columns shrunk to one read half the bytes: a modelled
    HBM rate above the peak)."""
    # halved, not doubled: twice a real size can leave the kernel's range (N >= 2**31)
    driven = [a != b for a, b in zip(grid(**sizes), grid(**{**sizes, name: sizes[name] // 2}))]
    here, twice = grid(**shape), grid(**{**shape, name: 2 * shape[name]})
    return all(b == 2 * a for a, b, d in zip(here, twice, driven) if d)


def sample_inputs(ir: O.Kernel, shape: dict) -> dict[str, np.ndarray]:
    """Inputs for a timing sample: zeros, except index data that the kernel declares facts
    about, which gets entries meeting them (spread over their range: an expert id cycles
    through the experts), so gathered rows touch as many cache lines as a real routing does,
    not one row over and over. A `T.distinct` table longer than its range holds each value of
    the range once, spread evenly, and padding (`hi`, out of the range) between them, as a
    routing pads each expert's rows to whole blocks: filling it with real rows would repeat
    them, which the declaration rules out, and charge every padding row a real row's loads.
    A table that a gather divides by d (ids token * d + slot) holds its values slot-major, so
    that neighbouring positions name different rows, as a routing does that sends each token
    to d different experts: in id order a 32-row block would hold 32 / d tokens."""
    arrays = {t.name: np.zeros(tuple(int(evaluate(e, shape)) for e in t.type.shape),
                               ELEMENT_DTYPES[t.type.dtype]) for t in ir.tensors}
    divisors = {op.gather.index.name: op.gather.divisor for op in ir.ops()
                if getattr(op, "gather", None) is not None and op.gather.divisor > 1}
    for op in ir.ops():
        if isinstance(op, O.Distinct):
            lo, hi = (int(evaluate(e, shape)) for e in (op.lo, op.hi))
        elif isinstance(op, O.ScalarLoad):
            lo, hi = ((int(evaluate(e, shape)) for e in op.bounds) if op.bounds
                      else (op.var.lo, op.var.hi))
        else:
            continue
        flat = arrays[op.tensor.name].reshape(-1)
        if hi <= lo:
            continue
        if isinstance(op, O.Distinct) and flat.size >= hi - lo:
            flat[:] = hi
            values = np.arange(lo, hi)
            d = divisors.get(op.tensor.name, 1)
            values = values[np.lexsort((values // d, values % d))]
            flat[np.arange(hi - lo) * flat.size // (hi - lo)] = values
        else:
            flat[:] = lo + np.arange(flat.size) % (hi - lo)
    return arrays


__all__ = ["LADDER", "SAMPLE_BUDGET", "SAMPLE_TRIPS", "critical_slot", "extrapolated", "forget",
           "loop_bound_names", "occupancy_of", "readers_of", "sample_inputs", "sampled",
           "schedule", "strata", "time_kernel", "trip_count", "trip_size", "wave_budget",
           "workgroup_trips"]

"""Per-CU list scheduling of an emulator event trace: the heart of the MI300X performance model.

`schedule_cu` replays the traced waves of the workgroups resident on one CU in program order on
4 SIMDs: one instruction per wave per issue slot, VALU and MFMA pipes per SIMD (MFMA occupancy
from the catalogue, dependent reads of an MFMA result wait for its write-back), the CU's LDS
(bank-model cycles from the trace), vector memory (the cache lines each wave touched, through
the CU's share of L2/HBM bandwidth, with latency; atomics through the CU's share of the L2's
read-modify-write rate), `s_waitcnt` counters, `s_barrier` and `s_nop`. It returns cycles,
unit busy time and stall time by cause.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import attrs

from argus.isa_cdna3 import isa, opcodes
from argus.isa_cdna3.mfma import MFMA
from argus.isa_cdna3.opcodes import Unit
from argus.isa_cdna3.perf.params import CU, Calibrated, CuParams, GpuProfile, PerfError

# instruction kinds
VALU, MFMA_K, SALU, SMEM, LDS, VMEM, WAIT, BARRIER, NOP, BRANCH, END, SLEEP, OTHER = range(13)
UNITS = ("MFMA", "VALU", "SALU", "LDS", "VMEM")
STALLS = ("vmcnt", "lgkmcnt", "barrier", "dependency", "issue")

_NO_VGPR_DEST = ("v_cmp_", "v_cmpx_", "v_readfirstlane", "v_readlane")


class KernelDoesNotFit(PerfError):
    """The kernel's workgroup needs more of a CU (registers, LDS, wave slots) than one has."""


@attrs.frozen
class Static:
    """What the scheduler needs to know about one static instruction."""

    kind: int
    cycles: int = 0            # unit occupancy (VALU, MFMA) or wait clocks (s_nop, s_sleep)
    flops: int = 0             # MFMA FLOPs per wave
    vmcnt: int = 99
    lgkmcnt: int = 99
    store: bool = False
    to_lds: bool = False       # a buffer/global load that writes LDS (M0-addressed DMA)
    atomic: bool = False       # a read-modify-write, performed in the L2
    lds_ideal: float = 0.0     # conflict-free LDS cycles of one wave (DS instructions)
    reads: tuple[int, ...] = ()
    srcc: tuple[int, ...] = ()
    writes: tuple[int, ...] = ()


def _vgprs(op: Any) -> tuple[int, ...]:
    """Unified register numbers of a VGPR/AGPR operand (AGPRs after the 256 arch VGPRs)."""
    file = getattr(op, "file", None)
    if file not in ("v", "a"):
        return ()
    base = op.index + (isa.ARCH_VGPRS if file == "a" else 0)
    return tuple(range(base, base + op.count))


def classify(inst: Any, params: CuParams = CU) -> Static:
    """The scheduler's view of one instruction (`isa_cdna3.instruction.Instruction`): its unit,
    counter and issue cycles from `isa_cdna3.opcodes`, MFMA cycles from the catalogue."""
    op = inst.opcode
    regs = [_vgprs(o) for o in inst.operands]
    if op == "s_waitcnt":
        return Static(WAIT, vmcnt=int(inst.mod("vmcnt", isa.VMCNT_MAX)),
                      lgkmcnt=int(inst.mod("lgkmcnt", isa.LGKMCNT_MAX)))
    if op == "s_barrier":
        return Static(BARRIER)
    if op == "s_nop":
        count = int(inst.operands[0].value) + 1 if inst.operands else 1
        return Static(NOP, cycles=int(count * params.nop_wait_state.value))
    if op == "s_sleep":
        count = int(inst.operands[0].value) if inst.operands else 0
        return Static(SLEEP, cycles=64 * count)
    if op in ("s_endpgm", "s_code_end"):
        return Static(END)
    unit = opcodes.unit(op)
    row = opcodes.row(op)
    if unit is Unit.BRANCH:
        return Static(BRANCH)
    if unit is Unit.SMEM:
        return Static(SMEM)
    if unit is Unit.SALU:
        return Static(SALU)
    if unit is Unit.MFMA:
        info = MFMA[opcodes.base_name(op)]
        srcc = regs[3] if len(regs) > 3 else ()
        reads = tuple(r for group in regs[1:3] for r in group)
        return Static(MFMA_K, cycles=info.cycles, flops=info.flops, reads=reads,
                      srcc=srcc, writes=regs[0])
    if unit is Unit.VALU:
        cycles = row.issue_cycles if row is not None else int(params.valu.value)
        start = 0 if op.startswith(_NO_VGPR_DEST) else 1
        return Static(VALU, cycles=cycles, reads=tuple(r for g in regs[start:] for r in g))
    if unit is Unit.LDS:
        return Static(LDS, lds_ideal=_lds_ideal(op, row.bytes if row is not None else 4),
                      reads=tuple(r for g in regs for r in g))
    if unit is Unit.VMEM:
        access = row.access if row is not None else ("store" if "_store" in op else "load")
        returns = inst.has("sc0") or inst.has("glc")
        store = access == "store" or (access == "atomic" and not returns)
        return Static(VMEM, store=store, to_lds=inst.has("lds") or op == "global_load_lds_dword",
                      atomic=access == "atomic", reads=tuple(r for g in regs for r in g))
    return Static(OTHER)


def _lds_ideal(op: str, lane_bytes: int) -> float:
    """Conflict-free cycles of a DS instruction: one per phase (isa.lds_phases) per address;
    ds_read2/ds_write2 move two addresses of half the row's bytes each."""
    addresses = 2 if op.startswith(("ds_read2", "ds_write2")) else 1
    size = max(1, lane_bytes // addresses)
    return float(addresses * len(isa.lds_phases(size, read=op.startswith("ds_read"))))


@attrs.frozen
class Occupancy:
    """How many workgroups share a CU, and what limits it."""

    waves_per_workgroup: int
    workgroups_per_cu: int
    waves_per_simd: int
    limiter: str
    vgprs_per_wave: int
    lds_per_workgroup: int

    def to_json(self) -> dict:
        return attrs.asdict(self)


def occupancy(*, vgprs: int, lds_bytes: int, threads: int, params: CuParams = CU) -> Occupancy:
    """Workgroups per CU from registers, LDS and wave slots (KernelDoesNotFit if zero)."""
    waves = -(-threads // isa.WAVE_SIZE)
    simds = int(params.simds.value)
    granule = int(params.vgpr_granule.value)
    alloc = max(granule, -(-vgprs // granule) * granule)
    per_lane = int(params.vgprs_per_lane.value)
    slots = int(params.waves_per_simd.value)
    if alloc > per_lane:
        raise KernelDoesNotFit(f"each wave needs {alloc} VGPRs+AGPRs, a SIMD lane has "
                               f"{per_lane}; reduce register use")
    if lds_bytes > isa.LDS_BYTES:
        raise KernelDoesNotFit(f"the workgroup needs {lds_bytes} bytes of LDS, a CU has "
                               f"{isa.LDS_BYTES}; reduce the LDS tiles")
    waves_per_simd = min(slots, per_lane // alloc)
    per_simd_need = -(-waves // simds)
    if per_simd_need > waves_per_simd:
        raise KernelDoesNotFit(f"the workgroup's {waves} waves need {per_simd_need} wave slots "
                               f"per SIMD but {alloc} VGPRs per wave leave {waves_per_simd}; "
                               f"use fewer registers or a smaller workgroup")
    limits = {"registers/wave slots": waves_per_simd // per_simd_need}
    if lds_bytes:
        limits["LDS"] = isa.LDS_BYTES // lds_bytes
    limiter = min(limits, key=limits.get)
    return Occupancy(waves, limits[limiter], waves_per_simd, limiter, alloc, lds_bytes)


@attrs.define
class CuRun:
    """Outcome of scheduling one CU's resident workgroups."""

    cycles: float
    busy: dict[str, float]          # unit -> busy clocks (summed over the unit's instances)
    stalls: dict[str, float]        # cause -> wave-clocks
    wave_clocks: float              # sum over waves of their lifetime
    flops: float
    bytes_requested: float          # bytes fetched from L2 (whole cache lines)
    instructions: int
    lds_ideal: float = 0.0          # conflict-free LDS cycles of the same accesses

    def scaled(self, other: CuRun, weight: float) -> CuRun:
        """self + weight * (other - self): linear extrapolation in a loop trip count."""
        def mix(a: float, b: float) -> float:
            return max(0.0, a + weight * (b - a))
        return CuRun(mix(self.cycles, other.cycles),
                     {k: mix(self.busy[k], other.busy[k]) for k in self.busy},
                     {k: mix(self.stalls[k], other.stalls[k]) for k in self.stalls},
                     mix(self.wave_clocks, other.wave_clocks), mix(self.flops, other.flops),
                     mix(self.bytes_requested, other.bytes_requested),
                     round(mix(self.instructions, other.instructions)),
                     mix(self.lds_ideal, other.lds_ideal))


@attrs.define(eq=False)
class _Wave:
    index: list[int]
    lines: list[int]
    lds: list[float]
    dwords: list[int]
    group: int
    simd: int
    pos: int = 0
    vmq: list = attrs.field(factory=list)
    lgkmq: list = attrs.field(factory=list)
    ready: dict = attrs.field(factory=dict)     # unified VGPR -> clock its MFMA result lands
    mfma_done: float = 0.0                      # when its last MFMA's result is written
    start: float = 0.0
    end: float | None = None


def schedule_cu(waves: Sequence[Any], statics: Sequence[Static], *, bytes_per_clk: float,
                atomic_dwords_per_clk: float, constants: Calibrated, params: CuParams = CU
                ) -> CuRun:
    """Schedule `waves` (emu.trace.WaveEvents of the workgroups resident together) on one CU.

    `bytes_per_clk` is the CU's share of the memory system for cache-line fills and
    `atomic_dwords_per_clk` its share of the L2's read-modify-write rate (`cu_atomic_rate`).
    LDS cycles come from the trace's bank model, or are the conflict-free count where it has
    none.
    """
    if not waves:
        raise PerfError("no waves to schedule: the launch has no workgroups")
    simds = int(params.simds.value)
    issue = params.issue.value
    line = 1 << isa.CACHE_LINE_SHIFT
    l1 = params.l1_bytes_per_clk.value
    lds_lat, smem_lat = params.lds_latency.value, params.smem_latency.value
    vmem_lat = constants.vmem_latency
    lds_line = line / params.lds_bytes_per_clk.value
    writeback = params.mfma_writeback_passes.value * 4
    state: list[_Wave] = []
    groups: dict[tuple[int, int], list[int]] = {}
    for w in waves:
        groups.setdefault(w.workgroup, []).append(len(state))
        state.append(_Wave(w.index, w.lines, w.lds, w.dwords, w.workgroup, 0))
    # waves of each workgroup are dealt round-robin over the SIMDs, workgroup after workgroup
    for n, w in enumerate(sorted(range(len(state)), key=lambda i: (state[i].group, i))):
        state[w].simd = n % simds
    alive = {g: len(members) for g, members in groups.items()}
    arrived: dict[int, list[tuple[float, int]]] = {g: [] for g in groups}
    valu_free = [0.0] * simds
    mfma_free = [0.0] * simds
    salu_free = [0.0] * simds
    lds_free = ta_free = mem_free = atomic_free = 0.0
    busy = dict.fromkeys(UNITS, 0.0)
    stalls = dict.fromkeys(STALLS, 0.0)
    flops = requested = lds_ideal = 0.0
    executed = 0
    heap = [(0.0, i) for i in range(len(state))]
    heapq.heapify(heap)

    def release(group: int) -> None:
        waiting = arrived[group]
        if waiting and len(waiting) == alive[group]:
            at = max(t for t, _ in waiting)
            for t, w in waiting:
                stalls["barrier"] += at - t
                heapq.heappush(heap, (at + params.barrier.value, w))
            arrived[group] = []

    while heap:
        t, w = heapq.heappop(heap)
        wave = state[w]
        if wave.pos >= len(wave.index):
            # a wave's registers and memory requests outlive its last issue
            wave.end = max([t, wave.mfma_done, *wave.vmq, *wave.lgkmq])
            alive[wave.group] -= 1
            release(wave.group)
            continue
        k = wave.pos
        i = wave.index[k]
        s = statics[i]
        kind = s.kind
        if kind == WAIT:
            at = t
            for queue, limit, cause in ((wave.vmq, s.vmcnt, "vmcnt"),
                                        (wave.lgkmq, s.lgkmcnt, "lgkmcnt")):
                queue[:] = [c for c in queue if c > t]
                if len(queue) > limit:
                    done = max(queue[:len(queue) - limit])
                    if done > at:
                        stalls[cause] += done - at
                        at = done
                    del queue[:len(queue) - limit]
            wave.pos += 1
            executed += 1
            heapq.heappush(heap, (at + issue, w))
            continue
        if kind == BARRIER:
            wave.pos += 1
            executed += 1
            arrived[wave.group].append((t, w))
            release(wave.group)
            continue
        if kind in (NOP, SLEEP):
            stalls["dependency"] += s.cycles
            wave.pos += 1
            executed += 1
            heapq.heappush(heap, (t + s.cycles, w))
            continue
        if kind == END:
            wave.pos = len(wave.index)
            executed += 1
            heapq.heappush(heap, (t + issue, w))
            continue
        # register dependency on an MFMA result still in flight
        dep = t
        if wave.ready and s.reads:
            for r in s.reads:
                landed = wave.ready.get(r)
                if landed is not None and landed > dep:
                    dep = landed
        simd = wave.simd
        unit = t
        if kind == VALU:
            unit = valu_free[simd]
        elif kind == MFMA_K:
            unit = max(mfma_free[simd], valu_free[simd])
            if s.srcc and wave.ready:
                for r in s.srcc:
                    landed = wave.ready.get(r)
                    # an accumulate chain on the same registers is forwarded inside the pipe
                    if landed is not None and landed > dep and r not in s.writes:
                        dep = landed
        elif kind == SALU or kind == BRANCH:
            unit = salu_free[simd]
        start = max(t, dep, unit)
        if start > t:
            stalls["dependency" if dep >= unit else "issue"] += start - t
            heapq.heappush(heap, (start, w))
            continue
        # issue at t
        wave.pos += 1
        executed += 1
        nxt = t + issue
        if kind == VALU:
            valu_free[simd] = t + s.cycles
            busy["VALU"] += s.cycles
        elif kind == MFMA_K:
            mfma_free[simd] = t + s.cycles
            valu_free[simd] = max(valu_free[simd], t + issue)
            busy["MFMA"] += s.cycles
            flops += s.flops
            landed = t + s.cycles + writeback
            wave.mfma_done = landed
            for r in s.writes:
                wave.ready[r] = landed
        elif kind == SALU:
            salu_free[simd] = t + params.salu.value
            busy["SALU"] += params.salu.value
        elif kind == BRANCH:
            salu_free[simd] = t + params.salu.value
            busy["SALU"] += params.salu.value
            if k + 1 < len(wave.index) and wave.index[k + 1] != i + 1:
                nxt += params.branch_taken.value
        elif kind == SMEM:
            wave.lgkmq.append(t + smem_lat)
        elif kind == LDS:
            cycles = wave.lds[k] or s.lds_ideal or 1.0
            lds_ideal += s.lds_ideal or cycles
            begin = max(t, lds_free)
            lds_free = begin + cycles
            busy["LDS"] += cycles
            wave.lgkmq.append(lds_free + lds_lat)
        elif kind == VMEM:
            nbytes = wave.lines[k] * line
            requested += nbytes
            begin = max(t, ta_free)
            address = max(constants.vmem_issue, nbytes / l1)
            ta_free = begin + address
            fill = max(begin, mem_free)
            mem_free = fill + nbytes / bytes_per_clk
            # two queues in a row (addresser, then the CU's share of bandwidth): the slower one
            # is what the vector memory path is busy with
            busy["VMEM"] += max(address, nbytes / bytes_per_clk)
            landed = mem_free + vmem_lat
            if s.atomic:
                # every word is read, modified and written by an L2 channel, whose rate the CU
                # shares with the other CUs of its XCD
                atomic_free = max(begin, atomic_free) + wave.dwords[k] / atomic_dwords_per_clk
                landed = max(landed, atomic_free + vmem_lat)
            if s.to_lds:
                # The returning data is written through the LDS. Its cycles are charged now, as
                # a reservation: holding the pipe until the data lands would stall every
                # ds_read behind a memory latency.
                cost = wave.lines[k] * lds_line
                lds_free = max(t, lds_free) + cost
                busy["LDS"] += cost
                lds_ideal += cost                   # DMA writes have no bank conflicts
                landed += cost
            wave.vmq.append(landed)
        heapq.heappush(heap, (nxt, w))

    stuck = [w for w in state if w.end is None]
    if stuck:
        raise PerfError(f"{len(stuck)} waves never finished in the schedule (a barrier their "
                        f"workgroup never reaches); the trace is incomplete")
    cycles = max(w.end for w in state)
    return CuRun(cycles, busy, stalls, sum(w.end - w.start for w in state), flops, requested,
                 executed, lds_ideal)


def unit_capacity(unit: str, params: CuParams = CU) -> int:
    """How many instances of `unit` a CU has (per-SIMD units count four)."""
    return int(params.simds.value) if unit in ("MFMA", "VALU", "SALU") else 1


def cu_atomic_rate(gpu: GpuProfile, *, active_cus: int, constants: Calibrated) -> float:
    """32-bit atomic updates per clock one CU gets when `active_cus` CUs share the L2 channels
    of their XCDs."""
    per_xcd = -(-max(1, active_cus) // int(gpu.xcds.value))
    return gpu.l2_channels_per_xcd.value * constants.atomic_dwords_per_clk / per_xcd


def cu_bandwidth(gpu: GpuProfile, *, active_cus: int, hbm_share: float,
                 constants: Calibrated, params: CuParams = CU, mall_share: float = 0.0
                 ) -> float:
    """Bytes per clock one CU can fill from L2 when `active_cus` CUs stream together,
    `mall_share` of the requested bytes miss their XCD's L2 (and cross the fabric to the
    Infinity Cache) and `hbm_share` must come from HBM: the least of the L1 fill rate and the
    CU's shares of its XCD's L2, of the Infinity Cache and of HBM."""
    active = max(1, active_cus)
    per_xcd = -(-active // int(gpu.xcds.value))
    share_l2 = gpu.l2_bytes_per_clk_per_xcd.value / per_xcd
    clock = gpu.clock_ghz.value * 1e9
    hbm = gpu.hbm_bytes_per_clk * constants.hbm_efficiency / active
    mall = gpu.mall_bytes_per_s.value / clock / active
    share_hbm = hbm / hbm_share if hbm_share > 0 else float("inf")
    share_mall = mall / mall_share if mall_share > 0 else float("inf")
    return min(params.l1_bytes_per_clk.value, share_l2, share_mall, share_hbm)

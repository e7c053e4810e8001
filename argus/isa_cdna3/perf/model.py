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

import enum
import heapq
import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from argus.isa_cdna3 import isa, opcodes
from argus.isa_cdna3.isa import Occupancy
from argus.isa_cdna3.mfma import MFMA
from argus.isa_cdna3.opcodes import ISSUE, Unit
from argus.isa_cdna3.perf.params import CU, Calibrated, CuParams, GpuProfile, PerfError

UNITS = ("MFMA", "VALU", "SALU", "LDS", "VMEM")
STALLS = ("vmcnt", "lgkmcnt", "barrier", "dependency", "issue")

_NO_VGPR_DEST = ("v_cmp_", "v_cmpx_", "v_readfirstlane", "v_readlane")


class Seq(enum.Enum):
    """What the wave's instruction sequencer does with an `opcodes.Unit.SEQUENCER` opcode."""

    WAIT = "s_waitcnt"
    BARRIER = "s_barrier"
    NOP = "s_nop"
    SLEEP = "s_sleep"
    END = "s_endpgm"
    OTHER = "other"          # s_setprio, s_ttracedata, ...: one issue slot


class KernelDoesNotFit(PerfError):
    """The kernel's workgroup needs more of a CU (registers, LDS, wave slots) than one has."""


@attrs.frozen
class Static:
    """What the scheduler needs to know about one static instruction."""

    kind: Unit | Seq
    cycles: int = 0            # unit occupancy (VALU, MFMA) or wait clocks (s_nop, s_sleep)
    flops: int = 0             # MFMA FLOPs per wave
    vmcnt: int = 99
    lgkmcnt: int = 99
    store: bool = False
    to_lds: bool = False       # a buffer/global load that writes LDS (M0-addressed DMA)
    atomic: bool = False       # a read-modify-write, performed in the L2
    lds_ideal: float = 0.0     # conflict-free LDS cycles of one wave (DS instructions)
    landing: int = 0           # MFMA: clocks from issue until dependent reads may use D
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


def _registers(inst: Any, first: int = 0, last: int | None = None) -> tuple[int, ...]:
    return tuple(r for o in inst.operands[first:last] for r in _vgprs(o))


# ---- the scheduler's view of one instruction, per sequencer opcode and per unit
def _wait(inst: Any) -> Static:
    return Static(Seq.WAIT, vmcnt=int(inst.mod("vmcnt", isa.VMCNT_MAX)),
                  lgkmcnt=int(inst.mod("lgkmcnt", isa.LGKMCNT_MAX)))


def _nop(inst: Any) -> Static:
    # one wait state is one issue slot of the wave
    return Static(Seq.NOP, cycles=isa.nop_wait_states(inst.opcode, inst.operands) * ISSUE)


def _sleep(inst: Any) -> Static:
    count = int(inst.operands[0].value) if inst.operands else 0
    return Static(Seq.SLEEP, cycles=isa.SLEEP_CLOCKS * count)


_SEQUENCER: dict[str, Callable[[Any], Static]] = {
    "s_waitcnt": _wait, "s_barrier": lambda inst: Static(Seq.BARRIER), "s_nop": _nop,
    "s_sleep": _sleep, "s_endpgm": lambda inst: Static(Seq.END),
    "s_code_end": lambda inst: Static(Seq.END),
}


def _mfma(inst: Any, row: Any) -> Static:
    info = MFMA[opcodes.base_name(inst.opcode)]
    return Static(Unit.MFMA, cycles=info.cycles, flops=info.flops,
                  landing=ISSUE * isa.mfma_to_read_wait_states(info),
                  reads=_registers(inst, 1, 3), srcc=_registers(inst, 3, 4),
                  writes=_registers(inst, 0, 1))


def _valu(inst: Any, row: Any) -> Static:
    start = 0 if inst.opcode.startswith(_NO_VGPR_DEST) else 1
    return Static(Unit.VALU, cycles=row.issue_cycles if row is not None else ISSUE,
                  reads=_registers(inst, start))


def _lds(inst: Any, row: Any) -> Static:
    return Static(Unit.LDS, lds_ideal=_lds_ideal(inst.opcode, row.bytes if row else 4),
                  reads=_registers(inst))


def _vmem(inst: Any, row: Any) -> Static:
    op = inst.opcode
    access = row.access if row is not None else ("store" if "_store" in op else "load")
    returns = inst.has("sc0") or inst.has("glc")
    store = access == "store" or (access == "atomic" and not returns)
    return Static(Unit.VMEM, store=store, to_lds=inst.has("lds") or op == "global_load_lds_dword",
                  atomic=access == "atomic", reads=_registers(inst))


_BY_UNIT: dict[Unit, Callable[[Any, Any], Static]] = {
    Unit.MFMA: _mfma, Unit.VALU: _valu, Unit.LDS: _lds, Unit.VMEM: _vmem,
    Unit.SALU: lambda inst, row: Static(Unit.SALU),
    Unit.SMEM: lambda inst, row: Static(Unit.SMEM),
    Unit.BRANCH: lambda inst, row: Static(Unit.BRANCH),
}


def classify(inst: Any) -> Static:
    """The scheduler's view of one instruction (`isa_cdna3.instruction.Instruction`): its unit,
    counter and issue cycles from `isa_cdna3.opcodes`, MFMA cycles from the catalogue."""
    sequencer = _SEQUENCER.get(inst.opcode)
    if sequencer is not None:
        return sequencer(inst)
    build = _BY_UNIT.get(opcodes.unit(inst.opcode))
    return build(inst, opcodes.row(inst.opcode)) if build else Static(Seq.OTHER)


def _lds_ideal(op: str, lane_bytes: int) -> float:
    """Conflict-free cycles of a DS instruction: one per phase (isa.lds_phases) per address;
    ds_read2/ds_write2 move two addresses of half the row's bytes each."""
    addresses = 2 if op.startswith(("ds_read2", "ds_write2")) else 1
    size = max(1, lane_bytes // addresses)
    return float(addresses * len(isa.lds_phases(size, read=op.startswith("ds_read"))))


def occupancy(*, vgprs: int, lds_bytes: int, threads: int) -> Occupancy:
    """`isa.occupancy` of a launch of `threads` per workgroup; KernelDoesNotFit if none fits."""
    occ = isa.occupancy(vgprs, lds_bytes, -(-threads // isa.WAVE_SIZE))
    if not occ.workgroups_per_cu:
        raise KernelDoesNotFit(occ.problem)
    return occ


#: the units whose busy clocks are a fixed cost per instruction, so exactly linear in a loop's
#: trip count (`CuRun.scaled`); the vector memory path's depend on the bandwidth the samples'
#: traffic leaves a CU, which a sample at other sizes need not share
FIXED_COST_UNITS = ("MFMA", "VALU", "SALU", "LDS")


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
        """self + weight * (other - self): linear extrapolation in a loop trip count. The
        cycles are at least the busiest unit's extrapolated busy clocks per instance: two
        samples whose time a fixed cost bounds (an epilogue's stores) give a slope that the
        added iterations' own work (their MFMAs) passes further out, and no run is shorter
        than its busiest unit is busy (Level 1 64, a 1-D transposed convolution of 128
        channels sampled at 1 and 2 channel steps of 64: 0.42x its MFMA roofline)."""
        def mix(a: float, b: float) -> float:
            return max(0.0, a + weight * (b - a))
        busy = {k: mix(self.busy[k], other.busy[k]) for k in self.busy}
        floor = max((b / unit_capacity(k) for k, b in busy.items() if k in FIXED_COST_UNITS),
                    default=0.0)
        return CuRun(max(mix(self.cycles, other.cycles), floor), busy,
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


class _Cu:
    """The shared state of one CU while `schedule_cu` replays its waves: per-SIMD unit free
    times, the CU's LDS and vector memory queues, busy and stall tallies, the event heap.

    One method per instruction kind (`_STEP`), as the emulator has one executor per opcode:
    each either issues the wave's next instruction at `t` or puts the wave back on the heap at
    the clock it can."""

    def __init__(self, state: list[_Wave], *, bytes_per_clk: float,
                 atomic_dwords_per_clk: float, constants: Calibrated, params: CuParams) -> None:
        self.state = state
        self.bytes_per_clk = bytes_per_clk
        self.atomic_rate = atomic_dwords_per_clk
        self.vmem_issue, self.vmem_latency = constants.vmem_issue, constants.vmem_latency
        self.l1 = params.l1_bytes_per_clk.value
        self.lds_latency, self.smem_latency = params.lds_latency.value, params.smem_latency.value
        self.branch_taken, self.barrier_release = params.branch_taken.value, params.barrier.value
        self.line = 1 << isa.CACHE_LINE_SHIFT
        self.lds_line = self.line / isa.LDS_PHASE_BYTES      # one 128-byte phase per clock
        simds = isa.SIMDS_PER_CU
        self.valu_free = [0.0] * simds
        self.mfma_free = [0.0] * simds
        self.salu_free = [0.0] * simds
        self.lds_free = self.ta_free = self.mem_free = self.atomic_free = 0.0
        self.busy = dict.fromkeys(UNITS, 0.0)
        self.stalls = dict.fromkeys(STALLS, 0.0)
        self.flops = self.requested = self.lds_ideal = 0.0
        self.executed = 0
        self.groups: dict[int, list[int]] = {}
        for n, wave in enumerate(state):
            self.groups.setdefault(wave.group, []).append(n)
        self.alive = {g: len(members) for g, members in self.groups.items()}
        self.arrived: dict[int, list[tuple[float, int]]] = {g: [] for g in self.groups}
        self.heap = [(0.0, i) for i in range(len(state))]
        heapq.heapify(self.heap)
        # the issuing wave's own next event: the loop pushes it and pops the earliest in one
        # heap operation (most of the time it is the earliest, and the heap is not touched)
        self.pending: tuple[float, int] | None = None

    # ---- bookkeeping
    def _next(self, wave: _Wave, w: int, at: float) -> None:
        wave.pos += 1
        self.executed += 1
        self.pending = (at, w)

    def finish(self, wave: _Wave, t: float) -> None:
        # a wave's registers and memory requests outlive its last issue
        wave.end = max([t, wave.mfma_done, *wave.vmq, *wave.lgkmq])
        self.alive[wave.group] -= 1
        self._release(wave.group)

    def _release(self, group: int) -> None:
        waiting = self.arrived[group]
        if waiting and len(waiting) == self.alive[group]:
            at = max(t for t, _ in waiting)
            for t, w in waiting:
                self.stalls["barrier"] += at - t
                heapq.heappush(self.heap, (at + self.barrier_release, w))
            self.arrived[group] = []

    def _blocked(self, wave: _Wave, w: int, s: Static, t: float, unit: float,
                 dep: float | None = None) -> bool:
        """Whether the wave must wait for a register its MFMA is still writing (`dep`, or the
        reads of `s`) or for its SIMD's unit (free at `unit`); if so it goes back on the heap."""
        if dep is None:
            dep = _landed(wave.ready, s.reads, t)
        start = max(t, dep, unit)
        if start > t:
            self.stalls["dependency" if dep >= unit else "issue"] += start - t
            self.pending = (start, w)
            return True
        return False

    # ---- the sequencer
    def wait(self, wave: _Wave, w: int, s: Static, k: int, t: float) -> None:
        at = t
        for queue, limit, cause in ((wave.vmq, s.vmcnt, "vmcnt"),
                                    (wave.lgkmq, s.lgkmcnt, "lgkmcnt")):
            queue[:] = [c for c in queue if c > t]
            if len(queue) > limit:
                done = max(queue[:len(queue) - limit])
                if done > at:
                    self.stalls[cause] += done - at
                    at = done
                del queue[:len(queue) - limit]
        self._next(wave, w, at + ISSUE)

    def barrier(self, wave: _Wave, w: int, s: Static, k: int, t: float) -> None:
        wave.pos += 1
        self.executed += 1
        self.arrived[wave.group].append((t, w))
        self._release(wave.group)

    def nop(self, wave: _Wave, w: int, s: Static, k: int, t: float) -> None:
        self.stalls["dependency"] += s.cycles
        self._next(wave, w, t + s.cycles)

    def end(self, wave: _Wave, w: int, s: Static, k: int, t: float) -> None:
        wave.pos = len(wave.index) - 1
        self._next(wave, w, t + ISSUE)

    def other(self, wave: _Wave, w: int, s: Static, k: int, t: float) -> None:
        if not self._blocked(wave, w, s, t, t):
            self._next(wave, w, t + ISSUE)

    # ---- the SIMD's units
    def valu(self, wave: _Wave, w: int, s: Static, k: int, t: float) -> None:
        simd = wave.simd
        if not self._blocked(wave, w, s, t, self.valu_free[simd]):
            self.valu_free[simd] = t + s.cycles
            self.busy["VALU"] += s.cycles
            self._next(wave, w, t + ISSUE)

    def mfma(self, wave: _Wave, w: int, s: Static, k: int, t: float) -> None:
        simd = wave.simd
        dep = _landed(wave.ready, s.reads, t)
        if s.srcc and wave.ready:
            # an accumulate chain on the same registers is forwarded inside the pipe
            dep = _landed(wave.ready, [r for r in s.srcc if r not in s.writes], dep)
        if self._blocked(wave, w, s, t, max(self.mfma_free[simd], self.valu_free[simd]), dep):
            return
        self.mfma_free[simd] = t + s.cycles
        self.valu_free[simd] = max(self.valu_free[simd], t + ISSUE)
        self.busy["MFMA"] += s.cycles
        self.flops += s.flops
        landed = wave.mfma_done = t + s.landing
        for r in s.writes:
            wave.ready[r] = landed
        self._next(wave, w, t + ISSUE)

    def salu(self, wave: _Wave, w: int, s: Static, k: int, t: float) -> None:
        simd = wave.simd
        if not self._blocked(wave, w, s, t, self.salu_free[simd]):
            self.salu_free[simd] = t + ISSUE
            self.busy["SALU"] += ISSUE
            self._next(wave, w, t + ISSUE)

    def branch(self, wave: _Wave, w: int, s: Static, k: int, t: float) -> None:
        simd = wave.simd
        if self._blocked(wave, w, s, t, self.salu_free[simd]):
            return
        self.salu_free[simd] = t + ISSUE
        self.busy["SALU"] += ISSUE
        taken = k + 1 < len(wave.index) and wave.index[k + 1] != wave.index[k] + 1
        self._next(wave, w, t + ISSUE + (self.branch_taken if taken else 0.0))

    def smem(self, wave: _Wave, w: int, s: Static, k: int, t: float) -> None:
        if not self._blocked(wave, w, s, t, t):
            wave.lgkmq.append(t + self.smem_latency)
            self._next(wave, w, t + ISSUE)

    # ---- the CU's LDS and vector memory
    def lds(self, wave: _Wave, w: int, s: Static, k: int, t: float) -> None:
        if self._blocked(wave, w, s, t, t):
            return
        cycles = wave.lds[k] or s.lds_ideal or 1.0
        self.lds_ideal += s.lds_ideal or cycles
        self.lds_free = max(t, self.lds_free) + cycles
        self.busy["LDS"] += cycles
        wave.lgkmq.append(self.lds_free + self.lds_latency)
        self._next(wave, w, t + ISSUE)

    def vmem(self, wave: _Wave, w: int, s: Static, k: int, t: float) -> None:
        if self._blocked(wave, w, s, t, t):
            return
        nbytes = wave.lines[k] * self.line
        self.requested += nbytes
        begin = max(t, self.ta_free)
        address = max(self.vmem_issue, nbytes / self.l1)
        self.ta_free = begin + address
        self.mem_free = max(begin, self.mem_free) + nbytes / self.bytes_per_clk
        # two queues in a row (addresser, then the CU's share of bandwidth): the slower one is
        # what the vector memory path is busy with
        self.busy["VMEM"] += max(address, nbytes / self.bytes_per_clk)
        landed = self.mem_free + self.vmem_latency
        if s.atomic:
            # every word is read, modified and written by an L2 channel, whose rate the CU
            # shares with the other CUs of its XCD
            self.atomic_free = max(begin, self.atomic_free) + wave.dwords[k] / self.atomic_rate
            landed = max(landed, self.atomic_free + self.vmem_latency)
        if s.to_lds:
            # The returning data is written through the LDS. Its cycles are charged now, as a
            # reservation: holding the pipe until the data lands would stall every ds_read
            # behind a memory latency.
            cost = wave.lines[k] * self.lds_line
            self.lds_free = max(t, self.lds_free) + cost
            self.busy["LDS"] += cost
            self.lds_ideal += cost                   # DMA writes have no bank conflicts
            landed += cost
        wave.vmq.append(landed)
        self._next(wave, w, t + ISSUE)


def _landed(ready: dict, registers: Sequence[int], at: float) -> float:
    """The later of `at` and the clock the last of `registers` written by an MFMA lands."""
    if ready:
        for r in registers:
            landed = ready.get(r)
            if landed is not None and landed > at:
                at = landed
    return at


_STEP: dict[Unit | Seq, Callable[..., None]] = {
    Seq.WAIT: _Cu.wait, Seq.BARRIER: _Cu.barrier, Seq.NOP: _Cu.nop, Seq.SLEEP: _Cu.nop,
    Seq.END: _Cu.end, Seq.OTHER: _Cu.other, Unit.SEQUENCER: _Cu.other,
    Unit.VALU: _Cu.valu, Unit.MFMA: _Cu.mfma, Unit.SALU: _Cu.salu, Unit.BRANCH: _Cu.branch,
    Unit.SMEM: _Cu.smem, Unit.LDS: _Cu.lds, Unit.VMEM: _Cu.vmem,
}


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
    state = [_Wave(w.index, w.lines, w.lds, w.dwords, w.workgroup, 0) for w in waves]
    # waves of each workgroup are dealt round-robin over the SIMDs, workgroup after workgroup
    for n, w in enumerate(sorted(range(len(state)), key=lambda i: (state[i].group, i))):
        state[w].simd = n % isa.SIMDS_PER_CU
    cu = _Cu(state, bytes_per_clk=bytes_per_clk, atomic_dwords_per_clk=atomic_dwords_per_clk,
             constants=constants, params=params)
    steps = [_STEP[s.kind] for s in statics]
    heap = cu.heap
    pop, pushpop = heapq.heappop, heapq.heappushpop
    while heap or cu.pending is not None:
        if cu.pending is None:
            t, w = pop(heap)
        else:
            t, w = pushpop(heap, cu.pending)
            cu.pending = None
        wave = state[w]
        k = wave.pos
        if k >= len(wave.index):
            cu.finish(wave, t)
            continue
        i = wave.index[k]
        steps[i](cu, wave, w, statics[i], k, t)
    stuck = [w for w in state if w.end is None]
    if stuck:
        raise PerfError(f"{len(stuck)} waves never finished in the schedule (a barrier their "
                        f"workgroup never reaches); the trace is incomplete")
    return CuRun(max(w.end for w in state), cu.busy, cu.stalls,
                 sum(w.end - w.start for w in state), cu.flops, cu.requested, cu.executed,
                 cu.lds_ideal)


def unit_capacity(unit: str) -> int:
    """How many instances of `unit` a CU has (per-SIMD units count four)."""
    return isa.SIMDS_PER_CU if unit in ("MFMA", "VALU", "SALU") else 1


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


@attrs.frozen
class Traffic:
    """Where a launch's requested bytes are served from: `beyond_l2` bytes miss their XCD's L2
    and cross the fabric, `hbm` of them are read from HBM (the rest hit the Infinity Cache)."""

    requested: float
    beyond_l2: float
    hbm: float

    @property
    def hbm_share(self) -> float:
        return self.hbm / self.requested if self.requested else 0.0

    @property
    def mall_share(self) -> float:
        return self.beyond_l2 / self.requested if self.requested else 0.0


def traffic(gpu: GpuProfile, *, requested: float, unique: float, per_xcd: float,
            footprint: float, rounds: int, same_round: float | None = None,
            rereads: tuple[float, float] = (0.0, 0.0)) -> Traffic:
    """Which cache serves a launch's repeated reads.

    The L2 is private to each XCD (4 MB per XCD, CDNA 3 white paper) and the dispatcher deals
    workgroups round-robin over the XCDs, so a line read by workgroups on k XCDs is fetched k
    times past the L2s (`per_xcd`: the distinct lines summed over XCDs, at most `requested`);
    repeats within an XCD hit its L2. `unique` lines are compulsory HBM reads. A cross-XCD
    repeat hits the Infinity Cache only if the line was filled in an earlier dispatch round and
    is still there: workgroups of the same round fetch together, and a fill still in flight does
    not serve the second XCD's miss [unverified: no public statement on miss merging in the
    MALL; an assumption]; a line survives to the next round when what a round fetches past the
    L2s (the reuse distance) fits the MALL (256 MB, or the whole `footprint` does). A share
    `same_round` of the repeats falls in the round of the first read (the caller's, from where
    the readers sit in dispatch order; else 1 / `rounds`, readers spread evenly), the rest later.
    `rereads` = (bytes the Infinity Cache serves, bytes read from HBM) of the reads a
    workgroup repeats after more than its XCD's L2 holds (`sample.rereads_of`: a row
    program's later passes over its row), the exception to repeats within an XCD hitting it.
    """
    unique = min(unique, requested)
    beyond = min(requested, max(per_xcd, unique))
    repeats = beyond - unique
    rounds = max(1, rounds)
    kept = min(footprint, beyond / rounds) <= gpu.mall_bytes.value
    same = 1.0 / rounds if same_round is None else min(1.0, max(0.0, same_round))
    later = 1.0 - same if kept else 0.0
    mall, hbm = rereads
    return Traffic(requested, min(requested, beyond + mall + hbm),
                   unique + repeats * (1.0 - later) + hbm)


def past_l2(readers: list[tuple[float, float, float]], xcds: int, workgroups: int,
            window: int) -> tuple[float, float]:
    """(bytes fetched past the XCDs' private L2s, the share of the cross-XCD repeats issued
    while the first read is under way) of a launch whose operands are `readers`: (bytes,
    workgroups reading each byte, workgroup-id distance between consecutive readers or 0 for
    readers spread evenly over the launch) each. Each operand's lines come once per XCD one of
    its readers runs on (round-robin dealing by workgroup id puts r readers on min(r, xcds)
    XCDs, or fewer when their ids are a multiple of 2 or 4 apart); its readers
    run together when they span fewer workgroup ids than the `window` resident at once. The
    same rule for AMD's kernels (readers from their families' grids) and ours (from the IR,
    `sample.readers_of`)."""
    past = repeats = together = 0.0
    for nbytes, r, stride in readers:
        r = max(1.0, r)
        # readers a whole stride apart land on the XCDs the stride reaches: ids j * stride
        # mod xcds (8 readers 8 ids apart share one XCD's L2)
        reach = xcds // math.gcd(int(stride), xcds) if stride and stride == int(stride) \
            else xcds
        k = min(reach, r)
        past += nbytes * k
        span = (stride or workgroups / r) * (r - 1)
        repeats += nbytes * (k - 1)
        together += nbytes * (k - 1) * (1.0 if span < window else window / span)
    return past, (together / repeats if repeats else 1.0)

"""From per-CU schedules to a kernel's modelled time on a GPU: `Timing` and `estimate`.

Workgroups are dealt round-robin over XCDs and CUs as the dispatcher does, so the busiest CU runs
ceil(workgroups / CUs) of them, `occupancy` at a time; the kernel takes that CU's rounds plus the
launch overhead. `estimate` takes the traced workgroups of a whole launch; `combine` takes CU
schedules that the caller already has (the sampled-and-extrapolated path of `argus.time`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from argus.isa_cdna3.perf.model import (
    CU,
    STALLS,
    UNITS,
    CuRun,
    Occupancy,
    Static,
    classify,
    cu_atomic_rate,
    cu_bandwidth,
    schedule_cu,
    traffic,
    unit_capacity,
)
from argus.isa_cdna3.perf.params import Calibrated, CuParams, GpuProfile, profile

_STALL_WORDS = {
    "vmcnt": "waiting for vector memory (s_waitcnt vmcnt): memory latency/bandwidth bound",
    "lgkmcnt": "waiting for LDS or scalar loads (s_waitcnt lgkmcnt)",
    "barrier": "waiting at s_barrier for the rest of the workgroup",
    "dependency": "explicit wait states (s_nop) and MFMA result latency",
    "issue": "waves contending for the same SIMD unit",
}


@attrs.frozen
class Timing:
    """A modelled kernel time on one GPU profile. Every figure is modelled, not measured."""

    kernel: str
    gpu: str
    microseconds: float
    cycles_per_cu: float
    clock_ghz: float                    # sustained clock the model assumed
    launch_us: float
    flops: float                        # MFMA FLOPs executed by the whole launch
    bytes_requested: float              # cache-line bytes fetched into CUs from L2
    bytes_hbm: float                    # bytes the model charges to HBM
    busy: dict[str, float]              # unit -> fraction of the busiest CU's time
    stalls: dict[str, float]            # cause -> fraction of wave time
    occupancy: Occupancy
    workgroups: int
    active_cus: int
    rounds: float                       # workgroup rounds on the busiest CU
    bottleneck: str
    lds_conflict: float = 1.0           # LDS cycles over the conflict-free count (1.0 = none)
    extrapolation: str | None = None
    shape: dict = attrs.field(factory=dict)
    calibration: str = ""
    instructions: int = 0               # instructions the busiest CU's waves issued

    @property
    def tflops(self) -> float:
        return self.flops / (self.microseconds * 1e6) if self.microseconds > 0 else 0.0

    @property
    def hbm_tb_per_s(self) -> float:
        return self.bytes_hbm / (self.microseconds * 1e6) if self.microseconds > 0 else 0.0

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "gpu": self.gpu, "modelled": True,
                "microseconds": self.microseconds, "tflops": self.tflops,
                "cycles_per_cu": self.cycles_per_cu, "clock_ghz": self.clock_ghz,
                "launch_us": self.launch_us,
                "flops": self.flops, "bytes_requested": self.bytes_requested,
                "bytes_hbm": self.bytes_hbm, "busy": self.busy, "stalls": self.stalls,
                "occupancy": self.occupancy.to_json(), "workgroups": self.workgroups,
                "rounds": self.rounds, "bottleneck": self.bottleneck,
                "lds_conflict": self.lds_conflict,
                "extrapolation": self.extrapolation, "shape": self.shape,
                "calibration": self.calibration, "instructions": self.instructions}

    def report(self) -> str:
        """A few lines for people; each figure says it is modelled."""
        shape = " ".join(f"{k}={v}" for k, v in self.shape.items())
        occ = self.occupancy
        lines = [
            f"{self.kernel} {shape} on {self.gpu}: modelled {self.microseconds:.2f} us, "
            f"modelled {self.tflops:.1f} TFLOP/s, modelled HBM {self.hbm_tb_per_s:.2f} TB/s",
            f"modelled clock {self.clock_ghz:.2f} GHz, {self.cycles_per_cu:.0f} cycles on the "
            f"busiest CU, launch overhead {self.launch_us:.1f} us",
            f"occupancy: {occ.workgroups_per_cu} workgroup(s)/CU of {occ.waves_per_workgroup} "
            f"waves (limited by {occ.limiter}); {self.workgroups} workgroups, "
            f"{self.rounds:g} round(s) on the busiest CU",
            "modelled busy: " + ", ".join(f"{k} {v:.0%}" for k, v in self.busy.items()),
            "modelled stalls (share of wave time): "
            + ", ".join(f"{k} {v:.0%}" for k, v in self.stalls.items()),
            f"bottleneck (modelled): {self.bottleneck}",
        ]
        if self.extrapolation:
            lines.append(f"extrapolated: {self.extrapolation}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.report()


@attrs.frozen
class Plan:
    """How the dispatcher spreads `workgroups` over the GPU."""

    workgroups: int
    per_round: int                 # workgroups resident together on a CU
    busiest: int                   # workgroups the busiest CU runs
    full_rounds: int
    tail: int                      # workgroups in the last, partial round (0: none)
    active_cus: int


def plan(workgroups: int, occ: Occupancy, gpu: GpuProfile) -> Plan:
    cus = int(gpu.cus.value)
    busiest = -(-workgroups // cus)
    return Plan(workgroups, occ.workgroups_per_cu, busiest, busiest // occ.workgroups_per_cu,
                busiest % occ.workgroups_per_cu, min(cus, workgroups))


def clock(gpu: GpuProfile, *, active_cus: int, mfma_busy: float, constants: Calibrated,
          valu_busy: float = 0.0) -> float:
    """Sustained clock (GHz): the peak, lowered when more of the chip keeps its matrix pipes
    (and vector ALUs, at `constants.valu_power` of an MFMA pipe's draw) busy than the power
    budget allows (load = share of CUs active x (MFMA busy + valu_power x VALU busy))."""
    load = active_cus / gpu.cus.value * (mfma_busy + constants.valu_power * valu_busy)
    scale = min(1.0, constants.power_budget / load) if load > 0 else 1.0
    return gpu.clock_ghz.value * scale


def retimed_us(timing: Timing, constants: Calibrated) -> float:
    """The modelled microseconds of `timing` under other launch/power constants (neither
    changes a CU schedule): what calibration searches over."""
    ghz = clock(profile(timing.gpu), active_cus=timing.active_cus,
                mfma_busy=timing.busy["MFMA"], constants=constants,
                valu_busy=timing.busy["VALU"])
    return timing.cycles_per_cu / (ghz * 1e3) + constants.launch_us


def _bottleneck(busy: dict[str, float], stalls: dict[str, float], launch_share: float,
                p: Plan, gpu: GpuProfile) -> str:
    unit = max(busy, key=busy.get)
    words = []
    if launch_share > 0.5:
        words.append(f"launch overhead ({launch_share:.0%} of the modelled time)")
    if busy[unit] >= 0.7:
        words.append(f"{unit} bound: the {unit} units are busy {busy[unit]:.0%} of the "
                     f"modelled time")
    else:
        cause = max(stalls, key=stalls.get)
        words.append(f"{_STALL_WORDS[cause]} ({stalls[cause]:.0%} of wave time); busiest unit "
                     f"{unit} at {busy[unit]:.0%}")
    if p.active_cus < int(gpu.cus.value):
        words.append(f"only {p.active_cus} of {int(gpu.cus.value)} CUs have work")
    elif p.tail:
        words.append(f"last round {p.tail}/{p.per_round} full (wave quantization)")
    return "; ".join(words)


def combine(kernel: str, gpu: GpuProfile, occ: Occupancy, p: Plan, rounds: Sequence[CuRun],
            *, flops: float, bytes_requested: float, bytes_hbm: float,
            constants: Calibrated, extrapolation: str | None = None,
            shape: dict | None = None) -> Timing:
    """Timing of a launch whose busiest CU runs `rounds` one after the other."""
    cycles = sum(r.cycles for r in rounds)
    busy = {u: sum(r.busy[u] for r in rounds) / (unit_capacity(u) * cycles)
            if cycles else 0.0 for u in UNITS}
    ghz = clock(gpu, active_cus=p.active_cus, mfma_busy=busy["MFMA"], constants=constants,
                valu_busy=busy["VALU"])
    kernel_us = cycles / (ghz * 1e3)
    total = kernel_us + constants.launch_us
    wave_clocks = sum(r.wave_clocks for r in rounds)
    lds, ideal = sum(r.busy["LDS"] for r in rounds), sum(r.lds_ideal for r in rounds)
    stalls = {c: sum(r.stalls[c] for r in rounds) / wave_clocks if wave_clocks else 0.0
              for c in STALLS}
    note = (f"calibrated on {len(constants.fitted_on)} published timings"
            if constants.fitted_on else "uncalibrated priors")
    return Timing(kernel, gpu.name, total, cycles, ghz, constants.launch_us, flops,
                  bytes_requested, bytes_hbm, busy, stalls, occ, p.workgroups, p.active_cus,
                  p.full_rounds + (1 if p.tail else 0),
                  _bottleneck(busy, stalls, constants.launch_us / total, p, gpu),
                  lds / ideal if ideal else 1.0, extrapolation, dict(shape or {}), note,
                  sum(r.instructions for r in rounds))


def statics_of(instructions: Sequence[Any]) -> list[Static]:
    return [classify(inst) for inst in instructions]


def estimate(trace: Any, instructions: Sequence[Any], occ: Occupancy, *, gpu: str | GpuProfile
             = "mi300x", constants: Calibrated | None = None, params: CuParams = CU,
             kernel: str = "kernel", shape: dict | None = None) -> Timing:
    """Model a launch from the event trace of all its workgroups (`emu.trace.EventTrace`)."""
    gpu = profile(gpu) if isinstance(gpu, str) else gpu
    constants = constants or Calibrated.load()
    statics = statics_of(instructions)
    waves = trace.per_wave()
    by_group: dict[int, list] = {}
    for w in waves:
        by_group.setdefault(w.workgroup, []).append(w)
    p = plan(len(by_group), occ, gpu)
    line = 1 << 7
    requested = sum(sum(w.lines) for w in waves) * line
    flops = sum(statics[i].flops for w in waves for i in w.index)
    unique, per_xcd = trace.footprint(int(gpu.xcds.value))
    moved = traffic(gpu, requested=requested, unique=unique * line, per_xcd=per_xcd * line,
                    footprint=unique * line, rounds=p.full_rounds + (1 if p.tail else 0))
    hbm = moved.hbm
    bw = cu_bandwidth(gpu, active_cus=p.active_cus, hbm_share=moved.hbm_share,
                      constants=constants, params=params, mall_share=moved.mall_share)
    atomics = cu_atomic_rate(gpu, active_cus=p.active_cus, constants=constants)
    cus = int(gpu.cus.value)
    mine = sorted(g for g in by_group if g % cus == 0)        # the busiest CU: CU 0
    rounds = []
    for start in range(0, len(mine), occ.workgroups_per_cu):
        chosen = [w for g in mine[start:start + occ.workgroups_per_cu] for w in by_group[g]]
        rounds.append(schedule_cu(chosen, statics, bytes_per_clk=bw,
                                  atomic_dwords_per_clk=atomics, constants=constants,
                                  params=params))
    return combine(kernel, gpu, occ, p, rounds, flops=flops, bytes_requested=requested,
                   bytes_hbm=hbm, constants=constants, shape=shape)

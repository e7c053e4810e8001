"""Machine parameters of the performance model, per GPU profile, each number with its source.

ISA facts (MFMA cycles, LDS banks, wave size, line size) stay in `isa_cdna3.isa`/`mfma`; this
module holds the timing side: unit rates, latencies, bandwidths, and the few constants
`vendor.calibrate` fits to published timings (read from `calibrated.json`, which records the
rows they were fitted on). A number without a primary source says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs

from argus.errors import ArgusError

CALIBRATED = Path(__file__).with_name("calibrated.json")


class PerfError(ArgusError, ValueError):
    """The performance model cannot time this launch (the message says why and what to do)."""


class ProfileError(PerfError):
    """An unknown GPU profile name."""


@attrs.frozen
class Sourced:
    """A number and where it comes from."""

    value: float
    source: str


@attrs.frozen
class GpuProfile:
    """One gfx942 part: chip-level counts and bandwidths."""

    name: str
    cus: Sourced
    xcds: Sourced
    clock_ghz: Sourced
    hbm_bytes_per_s: Sourced
    l2_bytes_per_clk_per_xcd: Sourced
    l2_channels_per_xcd: Sourced
    mall_bytes_per_s: Sourced
    mall_bytes: Sourced
    l2_bytes_per_xcd: Sourced

    @property
    def hbm_bytes_per_clk(self) -> float:
        return self.hbm_bytes_per_s.value / (self.clock_ghz.value * 1e9)


_WHITEPAPER = "AMD CDNA 3 architecture white paper (2023)"
_SPECS = "ROCm GPU hardware specifications table (gfx942 rows)"

PROFILES: dict[str, GpuProfile] = {
    "mi300x": GpuProfile(
        "mi300x",
        cus=Sourced(304, _SPECS + ": 304 CUs = 8 XCDs x 38"),
        xcds=Sourced(8, _WHITEPAPER),
        clock_ghz=Sourced(2.1, "AMD MI300X data sheet: 2100 MHz peak engine clock"),
        hbm_bytes_per_s=Sourced(5.3e12, "AMD MI300X data sheet: 5.3 TB/s HBM3"),
        l2_bytes_per_clk_per_xcd=Sourced(2048, _WHITEPAPER + ": 4 MB L2 per XCD, 16 channels "
                                         "x 128 B/clk"),
        l2_channels_per_xcd=Sourced(16, _WHITEPAPER + ": 16 channels per XCD's L2"),
        mall_bytes_per_s=Sourced(17.2e12, _WHITEPAPER + ": 256 MB Infinity Cache, 17.2 TB/s "
                                          "peak"),
        mall_bytes=Sourced(256 * 2**20, _WHITEPAPER + ": 256 MB Infinity Cache (also the ROCm "
                                        "GPU-spec table's L3 column)"),
        l2_bytes_per_xcd=Sourced(4 * 2**20, _WHITEPAPER + ": 4 MB L2 per XCD")),
    # The 80-CU gfx942 part aiter's tuned CSVs were measured on (cu_num = 80).
    "mi308x": GpuProfile(
        "mi308x",
        cus=Sourced(80, "aiter configs/*.csv cu_num column; 4 XCDs x 20 CUs [secondary: press "
                        "reports of the MI308X]"),
        xcds=Sourced(4, "[secondary: press reports of the MI308X]"),
        clock_ghz=Sourced(2.1, "[unverified: assumed equal to the MI300X]"),
        hbm_bytes_per_s=Sourced(5.3e12, "[secondary: press reports, same 8-stack HBM3 as the "
                                        "MI300X]"),
        l2_bytes_per_clk_per_xcd=Sourced(2048, _WHITEPAPER + " (same XCD as the MI300X)"),
        l2_channels_per_xcd=Sourced(16, _WHITEPAPER + " (same XCD as the MI300X)"),
        mall_bytes_per_s=Sourced(17.2e12, "[unverified: assumed equal to the MI300X's]"),
        mall_bytes=Sourced(256 * 2**20, "[unverified: assumed the MI300X's four IODs, 256 MB "
                                        "Infinity Cache]"),
        l2_bytes_per_xcd=Sourced(4 * 2**20, _WHITEPAPER + " (same XCD as the MI300X)")),
}


@attrs.frozen
class CuParams:
    """Per-CU timing numbers (clock cycles, the same on every gfx942 profile) that exist nowhere
    else: latencies and the L1 fill rate. ISA facts (SIMDs, wave slots, register file, issue
    and unit cycles, wait states, LDS phases) are read from `isa_cdna3.isa` and `opcodes`."""

    branch_taken: Sourced = Sourced(16, "[unverified: instruction-buffer refill after a taken "
                                        "branch]")
    lds_latency: Sourced = Sourced(64, "[unverified: commonly cited GCN LDS latency]")
    smem_latency: Sourced = Sourced(200, "[unverified: scalar cache hit latency]")
    l1_bytes_per_clk: Sourced = Sourced(64, _WHITEPAPER + ": 64 B/clk L2->L1 per CU")
    barrier: Sourced = Sourced(16, "[unverified: s_barrier release to first issue]")


@attrs.frozen
class Calibrated:
    """Constants fitted by `vendor.calibrate` (never per kernel); `fitted_on` names the data."""

    vmem_latency: float = 700.0        # clocks from issue to data for an L2/HBM access
    # clocks the CU's texture addresser spends per vector memory instruction (16 lanes per
    # clock would give 4; no primary source, so it is fitted)
    vmem_issue: float = 4.0
    hbm_efficiency: float = 0.81       # achievable fraction of the HBM peak
    launch_us: float = 2.0             # per-kernel fixed cost seen by a timer around a launch
    # Share of the chip that can keep its MFMA pipes busy at the peak clock: MI300X's 750 W
    # cap lowers sustained clocks under heavy matrix load across all CUs (see estimate.clock).
    power_budget: float = 1.0
    # Power a busy VALU draws relative to a busy MFMA pipe, in the same budget: no primary
    # source, so it is fitted (attention's softmax keeps the VALUs busy beside the MFMAs; a
    # GEMM, which anchors the budget, barely uses them).
    valu_power: float = 0.0
    # 32-bit read-modify-writes one L2 channel performs per clock. Atomics bypass the L1 and
    # are performed in the L2 (LLVM AMDGPUUsage, GFX942 memory model); their rate has no
    # primary source, so it is fitted (a split-K GEMM's epilogue is made of them).
    atomic_dwords_per_clk: float = 1.0
    fitted_on: tuple[str, ...] = ()
    mape: float | None = None

    @classmethod
    def load(cls, path: Path = CALIBRATED) -> Calibrated:
        """The fitted constants, or the priors above when no calibration was written."""
        if not path.exists():
            return cls()
        data = json.loads(path.read_text())
        return cls(**{k: (tuple(v) if k == "fitted_on" else v)
                      for k, v in data["constants"].items()},
                   fitted_on=tuple(data["fitted_on"]), mape=data.get("mape"))


CU = CuParams()


def profile(name: str) -> GpuProfile:
    key = name.lower().replace("-", "").replace("_", "")
    if key not in PROFILES:
        raise ProfileError(f"unknown gpu profile {name!r}; known: {', '.join(PROFILES)}")
    return PROFILES[key]

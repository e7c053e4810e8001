"""Pictures of modelled timings: a roofline with the kernels on it and their stall breakdown.

The roofline's roofs are the profile's peaks (dense bf16 MFMA rate at the rated clock, and HBM
bandwidth); a kernel sits at its modelled FLOPs per HBM byte and modelled TFLOP/s. The file is
written atomically. Every label says "modelled".
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from argus.isa_cdna3.perf.estimate import Timing
from argus.isa_cdna3.perf.model import STALLS, UNITS
from argus.isa_cdna3.perf.params import PerfError, profile

DENSE_BF16_FLOPS_PER_CU_CLK = 2048     # v_mfma_f32_32x32x8_bf16: 16384 FLOPs per 8 passes


def roofline(timings: Sequence[Timing], path: str | os.PathLike) -> Path:
    """Draw `timings` on their GPU's roofline (left) and their modelled busy units and stall
    causes (right) into `path` (.png, .svg or .pdf)."""
    if not timings:
        raise PerfError("nothing to plot: no timings given")
    try:
        import matplotlib
    except ImportError as err:          # an optional dependency of the plot only
        raise PerfError("--plot needs matplotlib: pip install matplotlib") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    gpu = profile(timings[0].gpu)
    peak = (DENSE_BF16_FLOPS_PER_CU_CLK * gpu.cus.value * gpu.clock_ghz.value * 1e9) / 1e12
    bandwidth = gpu.hbm_bytes_per_s.value / 1e12
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2),
                                      gridspec_kw={"width_ratios": [1.2, 1]})
    intensity = np.logspace(-1, 4, 200)
    left.loglog(intensity, np.minimum(peak, bandwidth * intensity), color="black", lw=1.5,
                label=f"{gpu.name} roof: {peak:.0f} TFLOP/s bf16, {bandwidth:.1f} TB/s HBM")
    for t in timings:
        x = t.flops / t.bytes_hbm if t.bytes_hbm else 1e4
        left.scatter([x], [max(t.tflops, 1e-3)], s=60, zorder=3,
                     label=f"{t.kernel}: modelled {t.tflops:.0f} TFLOP/s")
    left.set_xlabel("FLOPs per HBM byte (modelled)")
    left.set_ylabel("TFLOP/s (modelled)")
    left.set_title("Roofline (modelled, no hardware)")
    left.legend(fontsize=7, loc="lower right")
    left.grid(True, which="both", alpha=0.3)

    labels = [f"busy {u}" for u in UNITS] + [f"stall {c}" for c in STALLS]
    y = np.arange(len(labels))
    height = 0.8 / len(timings)
    for n, t in enumerate(timings):
        values = [t.busy[u] for u in UNITS] + [t.stalls[c] for c in STALLS]
        right.barh(y + n * height, values, height=height, label=t.kernel)
    right.set_yticks(y + height * (len(timings) - 1) / 2, labels, fontsize=8)
    right.invert_yaxis()
    right.set_xlim(0, 1)
    right.set_xlabel("fraction of time (units) / of wave time (stalls), modelled")
    right.set_title("Where the modelled time goes")
    right.legend(fontsize=7)
    fig.tight_layout()
    target = Path(path)
    partial = target.with_name(target.stem + ".partial" + target.suffix)
    fig.savefig(partial, dpi=110)
    plt.close(fig)
    os.replace(partial, target)
    return target

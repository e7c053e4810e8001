"""How well the MI300X performance model predicts AMD's published timings of its own kernels.

For every published gfx942 timing whose code object Argus can launch in its emulator (aiter's
flash-attention v3 forward table for MI300X, and the bf16 asm GEMM rows of the amd-aiter
wheel's tuned-GEMM CSV, measured on the 80-CU part), the modelled time is compared with the
measured one. Printed per family and overall: mean absolute percentage error on the calibration
rows and on the validation rows (held out by shape, see calibrate.py), row counts, and the
Spearman rank correlation of modelled vs measured time on the validation rows. Rows left out
are listed with the reason. All times on the Argus side are modelled, not measured.

    PYTHONPATH=. python3 bench/bench_model.py [--json out.json] [--rows]
"""

from __future__ import annotations

import argparse
import json
import time

from argus.isa_cdna3.perf.params import Calibrated
from argus.vendor import calibrate

GOAL_MAPE, GOAL_SPEARMAN = 10.0, 0.9


def _provenance(constants: Calibrated) -> str:
    if constants.fitted_on:
        return f"fitted on {len(constants.fitted_on)} calibration rows"
    return "uncalibrated priors: run python3 -m argus.vendor.calibrate"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--rows", action="store_true", help="print every row")
    options = parser.parse_args()
    constants = Calibrated.load()
    rows = calibrate.rows()
    start = time.perf_counter()
    timings = calibrate.timings(rows, constants)
    seconds = time.perf_counter() - start
    print(f"constants: vmem latency {constants.vmem_latency:g} clk, vmem issue "
          f"{constants.vmem_issue:g} clk, L2 atomics {constants.atomic_dwords_per_clk:g} "
          f"words/clk/channel, launch {constants.launch_us:g} us, power budget "
          f"{constants.power_budget:g}, HBM efficiency {constants.hbm_efficiency:g} "
          f"({_provenance(constants)})")
    print(f"split: attention validation at seqlen {sorted(calibrate.FA_VALIDATION_SEQLENS)}, "
          f"GEMM validation at M {sorted(calibrate.GEMM_VALIDATION_M)}; the rest calibrate")
    print(f"{'family':<12}{'cal rows':>9}{'cal MAPE':>10}{'val rows':>9}{'val MAPE':>10}"
          f"{'val Spearman':>14}  goals (MAPE <= {GOAL_MAPE:g}%, Spearman >= {GOAL_SPEARMAN})")
    report: dict = {"families": {}, "rows": [], "modelled": True}
    families = sorted({r.family for r in rows}) + ["overall"]
    for family in families:
        chosen = [(r, t) for r, t in zip(rows, timings) if family in ("overall", r.family)]
        figures = {}
        for split in ("calibration", "validation"):
            part = [(r, t) for r, t in chosen if r.split == split]
            figures[split] = {
                "rows": len(part),
                "mape": calibrate.mape((t.microseconds, r.measured_us) for r, t in part),
                "spearman": calibrate.spearman([t.microseconds for _, t in part],
                                               [r.measured_us for r, _ in part]),
            }
        cal, val = figures["calibration"], figures["validation"]
        met = val["mape"] <= GOAL_MAPE and val["spearman"] >= GOAL_SPEARMAN
        print(f"{family:<12}{cal['rows']:>9}{cal['mape']:>9.1f}%{val['rows']:>9}"
              f"{val['mape']:>9.1f}%{val['spearman']:>14.3f}  {'met' if met else 'NOT met'}")
        report["families"][family] = figures
    for r, t in zip(rows, timings):
        report["rows"].append({"family": r.family, "split": r.split, "kernel": r.kernel,
                               "sizes": r.sizes, "gpu": r.gpu, "measured_us": r.measured_us,
                               "modelled_us": t.microseconds, "source": r.source})
        if options.rows:
            print(f"  {r.split[:3]} {r.gpu} {r.label():<58} measured {r.measured_us:>9.2f} us"
                  f"  modelled {t.microseconds:>9.2f} us  ({t.microseconds / r.measured_us:.2f}x)")
    print(f"modelled {len(rows)} rows in {seconds:.1f} s")
    print("left out (published gfx942 asm timings Argus cannot launch):")
    for item in calibrate.excluded():
        print(f"  {item.source}: {item.kernel} ({item.rows} rows): {item.reason}")
    report["excluded"] = [{"source": e.source, "kernel": e.kernel, "rows": e.rows,
                           "reason": e.reason} for e in calibrate.excluded()]
    largest = max((r for r in rows if r.family == "attention"),
                  key=lambda r: r.sizes["b"] * r.sizes["h"] * r.sizes["s"] ** 2)
    from argus import timing

    timing.forget()
    start = time.perf_counter()
    timing.time(largest.kernel, sizes=largest.sizes, gpu=largest.gpu)
    cold = time.perf_counter() - start
    print(f"largest published attention shape ({largest.label()}) modelled in {cold:.1f} s "
          f"from cold (goal <= 10 s)")
    report["largest_shape_seconds"] = cold
    medium = {"b": 1, "h": 1, "s": 256, "sk": 2048}
    sampled = timing.time(largest.kernel, sizes=medium)
    full = timing.time(largest.kernel, sizes=medium, extrapolate=False)
    gap = sampled.cycles_per_cu / full.cycles_per_cu - 1
    print(f"extrapolation check, {largest.kernel} sk=2048: sampled {sampled.cycles_per_cu:.0f} vs "
          f"fully simulated {full.cycles_per_cu:.0f} cycles per CU ({gap:+.2%}; goal within 2%)")
    report["extrapolation_gap"] = gap
    if options.json:
        with open(options.json, "w") as handle:
            json.dump(report, handle, indent=1)


if __name__ == "__main__":
    main()

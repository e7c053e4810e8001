"""How well the MI300X performance model predicts AMD's published timings of its own kernels.

For every published gfx942 timing whose code object Argus can launch in its emulator (aiter's
flash-attention v3 forward table for MI300X, and the bf16 asm GEMM rows of the amd-aiter
wheel's tuned-GEMM CSV, measured on the 80-CU part), the modelled time is compared with the
measured one. Printed per family and overall: mean absolute percentage error on the calibration
rows and on the validation rows (held out by shape, see calibrate.py), row counts, and the
Spearman rank correlation of modelled vs measured time on the validation rows. Rows left out
are listed with the reason. All times on the Argus side are modelled, not measured.

Then the model's own speed: seconds per row, cold seconds for the largest rows, and the error
of the sampled-and-extrapolated timing against simulating the real trip count.

    PYTHONPATH=. python3 bench/bench_model.py [--json out.json] [--rows] [--causal-launch]

With `--kernelbench LEVEL_DIR [--only 7,23,...]` it times instead every kernel launch of those
KernelBench problems' generated solutions at the published sizes (the route's plan, as
`argus kernelbench` times them): seconds per launch cold (no sample remembered, no stored trace),
wall and CPU (the CPU seconds are the one-core figure on a shared machine), and for every launch
whose loop was sampled shorter, the error against simulating the real trip count (where one wave
of that stays under the emulator's 2**20 instructions). Several level folders may be given,
comma separated (`--only level1:58,13` takes 58 of level1 and 13 of every folder); the
launches over the goal are listed at the end.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from argus.isa_cdna3.perf.params import Calibrated, profile
from argus.vendor import calibrate
from argus.vendor import timing as vendor_timing
from argus.vendor.calibrate import Row

GOAL_MAPE, GOAL_SPEARMAN = 10.0, 0.9


def _provenance(constants: Calibrated) -> str:
    if constants.fitted_on:
        return f"fitted on {len(constants.fitted_on)} calibration rows"
    return "uncalibrated priors: run python3 -m argus.vendor.calibrate"


def _loop(r: Row) -> int:
    """How far a row's main loop runs: keys (attention), K per split (GEMM), dim (MoE)."""
    return r.sizes.get("sk") or r.sizes.get("k", 0) // r.sizes.get("splitk", 1) or \
        r.sizes["dim"]


def _speed(rows: list, options: argparse.Namespace) -> dict:
    """Seconds `argus.time` takes per row (samples remembered in the process and on disk, as a
    search sees them), cold from nothing for the largest rows, and the extrapolation error
    against simulating the real trip count where that is affordable."""
    from argus import timing

    out: dict = {"rows": []}
    for r in rows:
        timing.forget()
        start, cpu = time.perf_counter(), time.process_time()
        timing.time(r.kernel, sizes=r.sizes, gpu=r.gpu)
        out["rows"].append({"row": r.label(), "seconds": time.perf_counter() - start,
                            "cpu_seconds": time.process_time() - cpu})
    for what in ("seconds", "cpu_seconds"):
        seconds = sorted(x[what] for x in out["rows"])
        print(f"model speed ({what.replace('_', ' ')}, one process): {len(rows)} published rows, "
              f"each with nothing remembered in the process and the sample store warm: median "
              f"{seconds[len(seconds) // 2]:.2f} s, max {seconds[-1]:.2f} s per row (goal <= 10 s)")
    if options.rows:
        for x in out["rows"]:
            print(f"  {x['row']:<58} {x['seconds']:6.2f} s ({x['cpu_seconds']:.2f} s CPU)")
    cold = [max((r for r in rows if r.family == "attention"),
                key=lambda r: r.sizes["b"] * r.sizes["h"] * r.sizes["s"] ** 2),
            Row("attention", "fwd_hd128_bf16_causal", {"b": 1, "h": 32, "s": 8192, "sk": 8192},
                "mi300x", 0.0, "", "issue 23: 829 s before")]
    out["cold"] = []
    for r in cold:
        timing.forget(disk=True)
        start, cpu = time.perf_counter(), time.process_time()
        timing.time(r.kernel, sizes=r.sizes, gpu=r.gpu)
        took, cpu = time.perf_counter() - start, time.process_time() - cpu
        out["cold"].append({"row": r.label(), "seconds": took, "cpu_seconds": cpu})
        print(f"cold (no remembered sample, no stored trace): {r.label()} modelled in {took:.1f} s "
              f"({cpu:.1f} s CPU; goal <= 30 s for the largest)")
    out["extrapolation"] = []
    checks = [(r.kernel, r.sizes, r.gpu) for r in rows if _loop(r) <= options.full_trip]
    checks.append(("fwd_hd128_bf16_rtne", {"b": 1, "h": 1, "s": 256, "sk": 2048}, "mi300x"))
    checks.append(("fwd_hd128_bf16_causal", {"b": 1, "h": 1, "s": 2048, "sk": 2048}, "mi300x"))
    checks.append(("fmoe_stage1_bf16_pertokenFp8_g1u1_32x128_3tg_pf3",
                   {"tokens": 64, "dim": 2048, "inter": 256, "experts": 256, "topk": 8},
                   "mi308x"))
    print("extrapolation error against simulating the real trip count (goal within 2%):")
    for kernel, sizes, gpu in checks:
        sampled = timing.time(kernel, sizes=sizes, gpu=gpu)
        if not sampled.extrapolation:
            continue
        full = timing.time(kernel, sizes=sizes, gpu=gpu, extrapolate=False)
        gap = sampled.cycles_per_cu / full.cycles_per_cu - 1
        out["extrapolation"].append({"kernel": kernel, "sizes": sizes, "gap": gap})
        print(f"  {kernel} {' '.join(f'{k}={v}' for k, v in sizes.items())}: sampled "
              f"{sampled.cycles_per_cu:.0f} vs simulated {full.cycles_per_cu:.0f} cycles per CU "
              f"({gap:+.2%})")
    if options.causal_launch:
        # the causal sample stands for the workgroups of the whole launch (each pairs two query
        # tiles): check it against emulating every workgroup
        size = {"b": 1, "h": 2, "s": 2048, "sk": 2048}
        sampled = timing.time("fwd_hd128_bf16_causal", sizes=size)
        whole = vendor_timing.whole_launch("fwd_hd128_bf16_causal", size, profile("mi300x"),
                                    Calibrated.load())
        gap = sampled.cycles_per_cu / whole.cycles_per_cu - 1
        out["causal_whole_launch_gap"] = gap
        print(f"  fwd_hd128_bf16_causal b=1 h=2 s=2048, sampled vs the whole launch emulated: "
              f"{sampled.cycles_per_cu:.0f} vs {whole.cycles_per_cu:.0f} cycles per CU "
              f"({gap:+.2%})")
    return out


def _kernelbench(options: argparse.Namespace) -> dict:
    """Model speed and extrapolation error on KernelBench launches at the published sizes."""
    from argus import timing
    from argus.errors import ArgusError
    from argus.kernelbench import harness, road
    from argus.kernelbench.problem import discover, load
    from argus.pipeline import time as model

    only = tuple(x for x in (options.only or "").split(",") if x)
    out: dict = {"launches": [], "modelled": True}
    print("KernelBench launches at the published sizes; times modelled (MI300X model), seconds "
          "the model's own wall and CPU time here, cold")
    print(f"{'problem':<44}{'kernel':<24}{'wall s':>8}{'CPU s':>8}{'sampled us':>12}"
          f"{'real-trip us':>14}{'gap':>8}")
    paths = []
    for folder in options.kernelbench.split(","):
        # "7" names problem 7 of every folder given, "level1:58" problem 58 of level1 only
        mine = tuple(x.split(":", 1)[-1] for x in only
                     if ":" not in x or x.split(":", 1)[0] == Path(folder).name)
        if mine or not only:
            paths += discover(folder, mine)
    for path in paths:
        try:
            _, _, launches = harness.published_launches(load(path).full())
        except ArgusError as err:
            print(f"{path.stem[:43]:<44}no generated solution: {err}")
            continue
        for kernel, sizes, _ in launches:
            compiled = road.compiled(kernel)
            timing.forget(disk=True)
            start, cpu = time.perf_counter(), time.process_time()
            sampled = model(compiled, dict(sizes))
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            row = {"problem": f"{path.parent.name}/{path.stem}", "kernel": kernel.name,
                   "seconds": seconds, "cpu_seconds": cpu, "sampled_us": sampled.microseconds,
                   "note": sampled.extrapolation}
            full = gap = None
            if sampled.extrapolation and not options.no_full:
                try:
                    full = model(compiled, dict(sizes), extrapolate=False).microseconds
                    gap = sampled.microseconds / full - 1
                except ArgusError as err:
                    row["full_error"] = err.message
            row |= {"full_us": full, "gap": gap}
            out["launches"].append(row)
            print(f"{path.stem[:43]:<44}{kernel.name[:23]:<24}{seconds:>8.2f}{cpu:>8.2f}"
                  f"{sampled.microseconds:>12.1f}"
                  + (f"{full:>14.1f}{gap:>+8.2%}" if full else f"{'-':>14}{'-':>8}"),
                  flush=True)
    gaps = [abs(x["gap"]) for x in out["launches"] if x["gap"] is not None]
    for what in ("seconds", "cpu_seconds"):
        seconds = sorted(x[what] for x in out["launches"])
        if seconds:
            print(f"model speed ({what.replace('_', ' ')}) on {len(seconds)} KernelBench "
                  f"launches, cold: median {seconds[len(seconds) // 2]:.2f} s, max "
                  f"{seconds[-1]:.2f} s (goal <= 10 s on one core, <= 30 s for the largest)")
    over = [x for x in out["launches"] if x["cpu_seconds"] > 10]
    print(f"launches over 10 CPU seconds: {len(over)}"
          + "".join(f"\n  {x['problem']} {x['kernel']}: {x['cpu_seconds']:.1f} s"
                    for x in over))
    if gaps:
        print(f"sampled vs real trip count on {len(gaps)} launches: mean |gap| "
              f"{sum(gaps) / len(gaps):.2%}, max {max(gaps):.2%} (goal within 2%)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--rows", action="store_true", help="print every row")
    parser.add_argument("--full-trip", type=int, default=1024,
                        help="check the extrapolation on rows whose loop runs at most this many "
                             "keys / K per split (default 1024)")
    parser.add_argument("--causal-launch", action="store_true",
                        help="also emulate a whole causal launch (minutes) against its sample")
    parser.add_argument("--kernelbench", metavar="LEVEL_DIR",
                        help="time KernelBench launches instead (level folders of a checkout, "
                             "comma separated)")
    parser.add_argument("--only", help="with --kernelbench: problem numbers or stems, comma "
                                       "separated")
    parser.add_argument("--no-full", action="store_true",
                        help="with --kernelbench: skip the real-trip-count simulation")
    options = parser.parse_args()
    if options.kernelbench:
        report = _kernelbench(options)
        if options.json:
            with open(options.json, "w") as handle:
                json.dump(report, handle, indent=1)
        return
    constants = Calibrated.load()
    rows = calibrate.rows()
    start = time.perf_counter()
    timings = calibrate.timings(rows, constants)
    seconds = time.perf_counter() - start
    print(f"constants: vmem latency {constants.vmem_latency:g} clk, vmem issue "
          f"{constants.vmem_issue:g} clk, L2 atomics {constants.atomic_dwords_per_clk:g} "
          f"words/clk/channel, launch {constants.launch_us:g} us, power budget "
          f"{constants.power_budget:g} (VALU draw {constants.valu_power:g} of an MFMA pipe's), "
          f"HBM efficiency {constants.hbm_efficiency:g} "
          f"({_provenance(constants)})")
    print(f"split: attention validation at seqlen {sorted(calibrate.FA_VALIDATION_SEQLENS)}, "
          f"GEMM validation at M {sorted(calibrate.GEMM_VALIDATION_M)}; the rest calibrate")
    print(f"{'family':<17}{'cal rows':>9}{'cal MAPE':>10}{'val rows':>9}{'val MAPE':>10}"
          f"{'val Spearman':>14}{'val bias':>10}  goals (MAPE <= {GOAL_MAPE:g}%, Spearman >= "
          f"{GOAL_SPEARMAN}); validation = every row not in calibrated.json's fitted_on")
    report: dict = {"families": {}, "rows": [], "modelled": True}
    table = calibrate.family_table(rows, [t.microseconds for t in timings], constants)
    for family, figures in table.items():
        cal, val = figures["calibration"], figures["validation"]
        met = val["mape"] <= GOAL_MAPE and val["spearman"] >= GOAL_SPEARMAN
        cal_mape = f"{cal['mape']:>9.1f}%" if cal["rows"] else f"{'-':>10}"
        print(f"{family:<17}{cal['rows']:>9}{cal_mape}{val['rows']:>9}"
              f"{val['mape']:>9.1f}%{val['spearman']:>14.3f}{val['bias']:>9.2f}x  "
              f"{'met' if met else 'NOT met'}")
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
    report["model_speed"] = _speed(rows, options)
    if options.json:
        with open(options.json, "w") as handle:
            json.dump(report, handle, indent=1)


if __name__ == "__main__":
    main()

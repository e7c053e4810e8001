"""Wall time of `argus.verify` on the library GEMM and flash attention (symbolic sizes) and on
every kernel of the bug corpus, against the time the reference interpreter needs to check the
same kernels exhaustively on a small grid of concrete sizes (every workgroup, thread, slot and
iteration). The verifier's answer holds for all sizes; the interpreter's only for those it ran.
Goals: GEMM <= 1 s, flash attention <= 3 s on 2 cores. Measured on this machine's CPU (no GPU).
Bug rows come in pairs, the seeded defect and its correction; after the table: the slowest
single obligation, how many bugs verify within 1 s, and the false-alarm count (library kernels
and corrected bugs that are not Proved). Worker processes: ARGUS_JOBS (default: every core).
Run: python bench/bench_verify.py [--json PATH] [--skip-bugs] [--skip-variants]
"""

from __future__ import annotations

import gc
import importlib
import json
import resource
import sys
import time
from pathlib import Path

import click
import numpy as np

from argus import env
from argus.absint import queries
from argus.absint.concrete import run
from argus.absint.verify import verify
from argus.ir import ops as O
from argus.ir.expr import evaluate
from argus.ir.sizes import admits
from argus.kernels import library
from argus.kernels.attention import attention_fwd, attention_fwd_kv
from argus.kernels.gemm import gemm
from argus.kernels.moe import moe_gemm
from argus.smt import clear_cache

GOALS = {"gemm": 1.0, "attention_fwd": 3.0, "attention_fwd causal": 3.0}
BUGS = Path(__file__).resolve().parent.parent / "tests" / "bugs"


def interpreter_seconds(kernel, size_grid: list[dict]) -> float:
    """Run every workgroup of every size in `size_grid` through the interpreter (zeros, or for
    a grid entry with "routing", the MoE library kernel's random routing of that many tokens)."""
    started = time.perf_counter()
    for sizes in size_grid:
        if "routing" in sizes:
            inputs = library()["moe_gemm"].inputs(sizes["routing"], {}, seed=0)
            if any(t.name not in inputs for t in kernel.tensors):
                continue  # not the library MoE kernel's arguments: no interpreter column
        else:
            inputs = {t.name: np.zeros(tuple(int(evaluate(e, sizes)) for e in t.type.shape),
                                       np.float32) for t in kernel.tensors}
        run(kernel, inputs, max_violations=1_000_000)
    return time.perf_counter() - started


def admitted(kernel, size_grid: list[dict]) -> list[dict]:
    """The sizes of `size_grid` that the kernel's assumptions admit (a split-K kernel needs K
    to be a multiple of its split); a fact about a scalar the grid does not fix is not decided."""
    return [sizes for sizes in size_grid if admits(kernel, sizes)]


def cpu_seconds() -> float:
    """CPU time of this process and of its finished worker processes."""
    own, workers = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                       resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def measure(name: str, kernel, size_grid: list[dict]) -> dict:
    # cold: nothing kept from earlier kernels (verdicts, solver answers)
    queries.clear_cache()
    clear_cache()
    gc.collect()  # garbage of earlier rows is not charged to this one
    started, cpu = time.perf_counter(), cpu_seconds()
    report = verify(kernel)
    seconds, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    # warm: the same kernel again, as a search loop re-verifies a candidate's neighbours
    gc.collect()
    started = time.perf_counter()
    verify(kernel)
    warm = time.perf_counter() - started
    interp = interpreter_seconds(kernel, size_grid)
    slowest = max(report.obligations, key=lambda o: o.seconds)
    return {"name": name, "verify_s": seconds, "verify_cpu_s": cpu, "warm_s": warm,
            "slowest_s": slowest.seconds, "slowest": f"{slowest.kind} at {slowest.loc}",
            "proved_all": report.ok and not report.unknown,
            "obligations": len(report.obligations),
            "proved": report.count("proved"), "refuted": report.count("refuted"),
            "unknown": report.count("unknown"), "interpreter_s": interp,
            "interpreter_sizes": size_grid, "ratio": interp / seconds,
            "goal_s": GOALS.get(name)}


def gemm_sizes():
    return [{"M": m, "N": n, "K": k} for m in (64, 128) for n in (64, 128) for k in (32, 64, 96)]


def attention_sizes():
    return [{"BH": bh, "S": s, "D": 64} for bh in (1, 2) for s in (128, 256)]


def kv_sizes():
    return [{"BH": 1, "SQ": sq, "SK": sk, "D": 64} for sq, sk in ((1, 77), (64, 160), (130, 130))]


def moe_sizes():
    return [{"routing": {"TOKENS": t, "H": 64, "E": 4, "N": 128}} for t in (100, 200)]


@click.command()
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write results here")
@click.option("--skip-bugs", is_flag=True, help="only the library kernels")
@click.option("--skip-variants", is_flag=True,
              help="only the default configurations (no larger tiles, split-K, head_dim=128)")
def main(json_path: str | None, skip_bugs: bool, skip_variants: bool) -> None:
    rows = [measure("gemm", gemm.trace(), gemm_sizes()),
            measure("attention_fwd", attention_fwd.trace(), attention_sizes()),
            measure("attention_fwd causal", attention_fwd.trace(causal=True),
                    attention_sizes()),
            measure("attention_fwd_kv", attention_fwd_kv.trace(), kv_sizes()),
            measure("attention_fwd_kv causal", attention_fwd_kv.trace(causal=True),
                    kv_sizes()),
            measure("moe_gemm", moe_gemm.trace(), moe_sizes())]
    if not skip_variants:
        rows += [measure("gemm 128x128 tiles", gemm.trace(block_m=128, block_n=128),
                         [{"M": 128, "N": 128, "K": 64}]),
                 measure("gemm split_k=4", gemm.trace(split_k=4),
                         [{"M": 64, "N": 64, "K": k} for k in (128, 256)]),
                 measure("attention_fwd head_dim=128", attention_fwd.trace(head_dim=128),
                         [{"BH": 1, "S": 128, "D": 128}])]
    if not skip_bugs:
        sys.path.insert(0, str(BUGS))
        for path in sorted(BUGS.glob("bug_*.py")):
            bug = importlib.import_module(path.stem)
            ir = bug.KERNEL if isinstance(bug.KERNEL, O.Kernel) else bug.KERNEL.trace()
            names = {v.name for v in ir.sizes}
            # a bug file may name its own sizes (kernels of other shapes than the three below)
            grid = getattr(bug, "SIZES", None) or (moe_sizes() if "TOKENS" in names else
                    [{"S": 128, "D": 8}, {"S": 256, "D": 8}] if "S" in names else
                    admitted(ir, [{"M": 64, "N": 64, "K": k} for k in (8, 16, 24, 32, 48, 64)])[:3])
            # a kernel with sizes this grid does not fix gets no interpreter column (0 s)
            grid = [g for g in grid if "routing" in g or names <= g.keys()]
            rows.append(measure(path.stem, ir, grid))
            fixed = bug.FIXED if isinstance(bug.FIXED, O.Kernel) else bug.FIXED.trace()
            rows.append(measure(f"{path.stem} (fixed)", fixed, grid))
    print(f"{'kernel':48} {'verify s':>9} {'cpu s':>6} {'warm s':>7} {'goal':>5} {'interp s':>9} "
          f"{'ratio':>7} {'slowest':>8}  verdicts")
    for r in rows:
        goal = f"{r['goal_s']:.0f}" if r["goal_s"] else "-"
        print(f"{r['name']:48} {r['verify_s']:9.2f} {r['verify_cpu_s']:6.2f} {r['warm_s']:7.2f} "
              f"{goal:>5} "
              f"{r['interpreter_s']:9.2f} "
              f"{r['ratio']:7.2f} {r['slowest_s']:8.2f}  "
              f"{r['proved']}P/{r['refuted']}R/{r['unknown']}U")
    slowest = max(rows, key=lambda r: r["slowest_s"])
    print(f"slowest obligation: {slowest['slowest_s']:.2f} s ({slowest['slowest']}, "
          f"{slowest['name']})")
    bugs = [r for r in rows if r["name"].startswith("bug_") and "(fixed)" not in r["name"]]
    if bugs:
        over = [r["name"] for r in bugs if r["verify_s"] > 1.0]
        print(f"bugs verified within 1 s: {len(bugs) - len(over)} of {len(bugs)}"
              + (f" (over: {', '.join(over)})" if over else ""))
    correct = [r for r in rows if not r["name"].startswith("bug_") or "(fixed)" in r["name"]]
    alarms = [r["name"] for r in correct if not r["proved_all"]]
    print(f"false alarms (library kernels and corrected bugs not Proved): {len(alarms)}"
          + (f" ({', '.join(alarms)})" if alarms else ""))
    print(f"measured on this machine's CPU, {env.jobs()} worker processes (verify s: wall "
          "time from a cold cache; cpu s: this process and its workers; warm s: the same "
          "kernel again); other processes share the cores; the verifier covers all sizes, the "
          "interpreter only the listed ones (ratio = interpreter time / verifier wall time)")
    if json_path:
        Path(json_path).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

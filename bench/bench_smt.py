"""Per-query time of Argus' SMT layer on the MFMA acceptance properties, z3 versus cvc5, and the
overhead of going through argus.smt + pysmt compared with the same query written in raw z3py.

Measured on this machine's CPU (no GPU involved); normalised expressions and lowered pysmt terms
stay memoised between runs, as they do inside one verification. Run: python bench/bench_smt.py
"""

from __future__ import annotations

import json
import statistics
import time

import click
import z3

from argus.ir.expr import And, Const, Var, simplify
from argus.isa_cdna3.mfma import mfma
from argus.smt import Proved, Refuted, clear_cache, prove

LANE, ITERATION = Var("lane", 0, 64), Var("iv", 0, 1024)


def mfma_properties():
    """name -> (goal, minimize, expected verdict type) for v_mfma_f32_32x32x8_bf16."""
    info = mfma("v_mfma_f32_32x32x8_bf16")
    slot, reg = Var("slot", 0, info.k_per_lane), Var("reg", 0, info.c_values)
    _, _, k_a = info.a_coord(LANE, slot)
    k_b_kernel = ((LANE >> 5) << 2) | slot
    mutated = 4 * (LANE % 2) + slot
    _, row, column = info.c_coord(LANE, reg)
    manual_row = 8 * (reg // 4) + 4 * (LANE // 32) + reg % 4
    step = info.k * ITERATION
    return {
        "k_agree (A vs B fetch)": ((k_a + step).eq(k_b_kernel + step), (), Proved),
        "k_mutated": ((k_a + step).eq(mutated + step), (), Refuted),
        "k_mutated minimised": ((k_a + step).eq(mutated + step), (ITERATION, LANE, slot),
                                Refuted),
        "c_layout vs manual": (And(row.eq(manual_row), column.eq(LANE & 31)), (), Proved),
    }


def raw_z3_k_query(mutated: bool):
    """The k_agree / k_mutated obligation written directly in z3py, 16-bit like argus.smt."""
    lane, slot, iv = z3.BitVecs("lane slot iv", 16)
    solver = z3.Solver()
    solver.add(z3.ULE(lane, 63), z3.ULE(slot, 3), z3.ULE(iv, 1023))
    k_a = 8 * iv + 4 * z3.LShR(lane, 5) + slot
    k_b = 8 * iv + (4 * (lane & 1) + slot if mutated else (z3.LShR(lane, 5) << 2) | slot)
    solver.add(k_a != k_b)
    return solver.check()


def median_ms(fn, repeats):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def uncached_prove(goal, solver, minimize):
    clear_cache()
    return prove(goal, solver=solver, minimize=minimize)


@click.command()
@click.option("--repeats", default=30, show_default=True, help="timed runs per query")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write results here")
def main(repeats, json_path):
    results = {"measured": "CPU, this machine", "repeats": repeats, "queries": {}}
    print(f"argus.smt per-query time (median of {repeats}; verdict cache cleared each run, "
          "normalised and lowered terms stay memoised)")
    print(f"{'property':28s} {'z3 ms':>9s} {'cvc5 ms':>9s} {'z3/cvc5':>8s}  verdict")
    for name, (goal, minimize, expected) in mfma_properties().items():
        row = {}
        for solver in ("z3", "cvc5"):
            verdict = uncached_prove(goal, solver, minimize)
            if not isinstance(verdict, expected):
                raise SystemExit(f"{name} with {solver}: expected {expected.__name__}, got "
                                 f"{verdict}")
            row[solver] = median_ms(
                lambda s=solver, g=goal, m=minimize: uncached_prove(g, s, m), repeats)
        row["verdict"] = str(verdict)
        # obligations the normaliser already decides never reach a solver; say so
        row["decided_by"] = "normaliser" if simplify(goal) is Const(True) else "solver"
        results["queries"][name] = row
        print(f"{name:28s} {row['z3']:9.2f} {row['cvc5']:9.2f} {row['z3'] / row['cvc5']:8.2f}  "
              f"{verdict} ({row['decided_by']})")

    print("\noverhead of argus.smt + pysmt over raw z3py (same 16-bit query, z3)")
    properties = mfma_properties()
    for name, mutated in (("k_agree (A vs B fetch)", False), ("k_mutated", True)):
        expected = z3.sat if mutated else z3.unsat
        if raw_z3_k_query(mutated) != expected:
            raise SystemExit(f"raw z3 disagrees on {name}")
        raw = median_ms(lambda m=mutated: raw_z3_k_query(m), repeats)
        goal = properties[name][0]
        argus = median_ms(lambda g=goal: uncached_prove(g, "z3", ()), repeats)
        results["queries"][name]["raw_z3"] = raw
        results["queries"][name]["overhead_ratio"] = argus / raw
        print(f"{name:28s} argus {argus:7.2f} ms  raw z3 {raw:7.2f} ms  ratio {argus / raw:5.2f}x")
    if json_path:
        with open(json_path, "w") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()

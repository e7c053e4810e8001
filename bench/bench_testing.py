"""argus.testing mutation benchmark: mutants per second through `assert_complete`, and per
mutation operator the fraction of its mutants the verifier catches (Refuted, confirmed, of an
expected kind; goal 100%), over one variant of each kernel family.

    python bench/bench_testing.py                   # every family, at most 24 mutants each
    python bench/bench_testing.py --per-family 0    # the whole catalogue (slow: attention has 200+)
    python bench/bench_testing.py --families ring_gemm,gemm --json out.json

Times are wall-clock on this machine (no GPU is involved; verification is symbolic)."""

from __future__ import annotations

import argparse
import collections
import json
import os
import time

os.environ.setdefault("ARGUS_JOBS", "1")

from argus.testing import OPERATORS, ArgusCheckFailure, assert_complete, catalogue  # noqa: E402
from argus.testing.programs import family_program  # noqa: E402

#: The variant of each family the catalogue is built from (swizzled, causal: every operator
#: has sites somewhere).
VARIANTS = {
    "ring_gemm": {"wave_grid": (1, 1), "slots": 2, "swizzle": (2, 1, 3)},
    "gemm": {"block_m": 64, "block_n": 64, "block_k": 32, "swizzle": True, "split_k": 1,
             "instr": "v_mfma_f32_32x32x8_bf16"},
    "attention_fwd": {"head_dim": 64, "causal": True},
    "moe_gemm": {"block_m": 64, "block_n": 64, "block_k": 32},
}


def spread(items: list, count: int) -> list:
    """At most `count` mutants, taken round-robin over the operators (every operator with a
    site is represented)."""
    if count <= 0 or len(items) <= count:
        return items
    by_operator = collections.defaultdict(list)
    for m in items:
        by_operator[m.operator].append(m)
    chosen, round_ = [], 0
    while len(chosen) < count:
        added = False
        for group in by_operator.values():
            if round_ < len(group) and len(chosen) < count:
                chosen.append(group[round_])
                added = True
        if not added:
            break
        round_ += 1
    return chosen


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(VARIANTS))
    parser.add_argument("--per-family", type=int, default=24,
                        help="mutants per family, spread over the operators (0: all)")
    parser.add_argument("--json", help="write the figures to this file as well")
    args = parser.parse_args()

    caught, total = collections.Counter(), collections.Counter()
    missed: list[str] = []
    seconds, count = 0.0, 0
    for family in args.families.split(","):
        program = family_program(family, VARIANTS[family])
        chosen = spread(catalogue(program), args.per_family)
        start = time.perf_counter()
        for mutant in chosen:
            total[mutant.operator] += 1
            try:
                assert_complete(mutant)
                caught[mutant.operator] += 1
            except ArgusCheckFailure as failure:
                missed.append(str(failure).splitlines()[1].strip())
        spent = time.perf_counter() - start
        seconds, count = seconds + spent, count + len(chosen)
        print(f"{family:14s} {len(chosen):4d} mutants  {len(chosen) / spent:6.2f} mutants/s")

    print(f"\n{'operator':16s} caught/total  fraction   (goal 100%)")
    all_caught = 0
    for name in OPERATORS:
        if total[name]:
            fraction = caught[name] / total[name]
            all_caught += fraction == 1
            print(f"{name:16s} {caught[name]:5d}/{total[name]:<5d}  {fraction:8.1%}")
        else:
            print(f"{name:16s}     -/-      (no site in these families)")
    tried = sum(1 for name in OPERATORS if total[name])
    print(f"\noperators whose mutants are all caught: {all_caught}/{tried} "
          f"= {all_caught / max(tried, 1):.1%} (goal 100%)")
    print(f"throughput: {count} mutants in {seconds:.1f} s = {count / seconds:.2f} mutants/s "
          "through assert_complete (wall clock, shared verdict cache cold)")
    for line in missed:
        print("  missed:", line)
    if args.json:
        with open(args.json + ".tmp", "w") as out:
            json.dump({"mutants": count, "seconds": seconds,
                       "per_operator": {n: [caught[n], total[n]] for n in OPERATORS}}, out)
        os.replace(args.json + ".tmp", args.json)


if __name__ == "__main__":
    main()

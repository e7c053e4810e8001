"""Our kernels against AMD's hand-written assembly, both timed by the MI300X performance model.

GEMM at the shapes of the amd-aiter wheel's bf16 asm GEMM table (80-CU part, AMD's split-K),
flash attention at the shapes of aiter's MI300X forward table, fused MoE at a small shape the
emulator runs whole. Each row prints AMD's modelled time (and AMD's measured time where one is
published), ours modelled, and ours / AMD. Where Argus cannot build or launch our side yet, the
row says what is missing. Every Argus-side figure is modelled, not measured.

    PYTHONPATH=. python3 bench/bench_vs_aiter.py [--quick]
"""

from __future__ import annotations

import argparse

import numpy as np

import argus
from argus.isa_cdna3.perf import calibrate
from argus.isa_cdna3.perf.params import PerfError
from argus.kernels.moe import route

#: our GEMM configurations tried per row (the fastest modelled one is printed): 64x64 tiles
#: with the loads two K tiles ahead, at two K depths
GEMM_TILES = ({"block_m": 64, "block_n": 64, "block_k": 64, "prefetch": 2},
              {"block_m": 64, "block_n": 64, "block_k": 32, "prefetch": 2})
MOE_SHAPE = {"tokens": 32, "dim": 512, "inter": 512, "experts": 4, "topk": 2}


def _ours(name: str, sizes: dict, gpu: str, **params) -> tuple[float | None, str]:
    """Our library kernel's modelled time, or None and the reason it is missing."""
    from argus.kernels import library

    try:
        kernel = argus.compile(library()[name].kernel, **params)
    except Exception as err:          # the backend's own error says which rule is missing
        return None, f"argus.compile({name}) fails: {str(err).splitlines()[0]}"
    try:
        return argus.time(kernel, sizes=sizes, gpu=gpu).microseconds, ""
    except (PerfError, ValueError) as err:
        return None, f"ours cannot run this shape: {str(err).splitlines()[0]}"


def _gemm(r, tile: dict) -> tuple[float | None, str]:
    """Our GEMM with `tile` at row r's shape: (modelled us or None, what was run or missing)."""
    # our GEMM takes whole tiles: a ragged M is padded up (the extra rows are computed and
    # dropped, so ours does the padded work)
    padded = -(-r.sizes["m"] // tile["block_m"]) * tile["block_m"]
    sizes = {"M": padded, "N": r.sizes["n"], "K": r.sizes["k"]}
    # AMD's split-K first, then powers of two (the backend divides by those only)
    for split in dict.fromkeys((r.sizes["splitk"], 8, 4, 2, 1)):
        ours, why = _ours("gemm", sizes, r.gpu, split_k=split, **tile)
        if ours is not None:
            shown = ",".join(f"{k}={v}" for k, v in tile.items())
            return ours, f"{shown},split_k={split}" + (f", M padded to {padded}"
                                                         if padded != r.sizes["m"] else "")
    return None, why


def _line(label: str, amd_us: float, ours_us: float | None, why: str,
          measured: float | None = None) -> None:
    published = f" (AMD measured {measured:9.2f})" if measured else " " * 23
    if ours_us is None:
        print(f"  {label:<44} AMD {amd_us:9.2f} us{published}  ours: missing: {why}")
    else:
        print(f"  {label:<44} AMD {amd_us:9.2f} us{published}  ours {ours_us:9.2f} us  "
              f"ours/AMD {ours_us / amd_us:6.1%} {why}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few rows per family")
    options = parser.parse_args()
    rows = calibrate.rows()
    print("modelled MI300X-family times (no GPU here); ours / AMD < 100% means ours is faster")
    print("GEMM (bf16, C = A @ B^T, fp32 out), AMD: bf16gemm_outf32_tn_*_pf3, shapes from the "
          "amd-aiter wheel's bf16_tuned_gemm.csv (80-CU part)")
    gemm = [r for r in rows if r.family == "bf16 GEMM"]
    for r in gemm[:3] if options.quick else gemm:
        amd = argus.time(r.kernel, sizes=r.sizes, gpu=r.gpu).microseconds
        best, best_why = None, ""
        for tile in GEMM_TILES:
            ours, why = _gemm(r, tile)
            if ours is not None and (best is None or ours < best):
                best, best_why = ours, why
            elif best is None:
                best_why = why
        _line(r.label(), amd, best, best_why, r.measured_us)
        _line(r.label(), amd, ours, why, r.measured_us)
    print("flash attention forward (bf16, hd128, non-causal), AMD: fwd_hd128_bf16_rtne, shapes "
          "from aiter's MI300X table")
    attention = [r for r in rows if r.family == "attention"]
    for r in attention[:3] if options.quick else attention:
        amd = argus.time(r.kernel, sizes=r.sizes, gpu=r.gpu).microseconds
        s = r.sizes
        ours, why = _ours("attention_fwd", {"BH": s["b"] * s["h"], "S": s["s"], "D": 128},
                          r.gpu, head_dim=128)
        _line(r.label(), amd, ours, why, r.measured_us)
    print("fused MoE (bf16), AMD: fmoe_b16 (emulated whole; no published timing runs in Argus)")
    amd = argus.time("fmoe_b16", sizes=MOE_SHAPE).microseconds
    # ours: one grouped GEMM over the routed rows (tokens x topk), N = 2 x inter (gate and up
    # side by side, AMD's fused pair, without its activation), P and BLOCKS from a random
    # top-k routing padded to 64-row blocks
    rows_routed = MOE_SHAPE["tokens"] * MOE_SHAPE["topk"]
    _, ids, blocks = route(rows_routed, MOE_SHAPE["experts"], 64, np.random.default_rng(0))
    ours, why = _ours("moe_gemm", {"TOKENS": rows_routed, "H": MOE_SHAPE["dim"],
                                   "E": MOE_SHAPE["experts"], "N": 2 * MOE_SHAPE["inter"],
                                   "P": len(ids), "BLOCKS": len(blocks)}, "mi300x")
    _line("fmoe_b16 " + " ".join(f"{k}={v}" for k, v in MOE_SHAPE.items()), amd, ours, why)


if __name__ == "__main__":
    main()

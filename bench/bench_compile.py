"""The backend on the library GEMM: for each configuration, the compile time (lower + assemble,
cold, on this machine's CPU; goal <= 2 s), registers, occupancy, and the main loop's
instructions per MFMA beside AMD's hand-written bf16gemm_outf32_tn_<tile>_pf3 at the same tile
(ratio ours / AMD, goal <= 1.0). AMD's loop issues 16x16x16 MFMAs and a 32x32x8 does twice their
work, so the ratio is also given per unit of MFMA work. AMD ships 32x64, 48x64, 64x64 and 96x64
tiles; other tiles have no same-tile row. Flash attention and the MoE GEMM follow, beside AMD's
fmha_v3_fwd hd128 and fmoe_b16, with the attention rows' modelled time (argus.time) at one
problem size. Static counts from the code objects (llvm-objdump); nothing is timed on a GPU.
Run: python bench/bench_compile.py [--json PATH] [--policy P]
"""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

import click

from argus.asm import assemble
from argus.asm.codeobject import CodeObject
from argus.asm.lower import lower
from argus.asm.lower.address import clear_caches
from argus.asm.stats import instructions_per_mfma, kernel_stats, main_loop
from argus.isa_cdna3.mfma import mfma
from argus.kernels import library
from argus.kernels.gemm import MFMA
from argus.vendor.aiter import aiter_root

SMALL = "v_mfma_f32_16x16x16_bf16"
CONFIGS = [
    {"block_m": 64, "block_n": 64, "block_k": 32},
    {"block_m": 64, "block_n": 64, "block_k": 64},
    {"block_m": 64, "block_n": 64, "block_k": 64, "instr": SMALL},
    {"block_m": 128, "block_n": 64, "block_k": 64},
    {"block_m": 128, "block_n": 128, "block_k": 32},
    {"block_m": 128, "block_n": 128, "block_k": 64},
    {"block_m": 128, "block_n": 128, "block_k": 64, "instr": SMALL},
    {"block_m": 64, "block_n": 64, "block_k": 64, "split_k": 4},
]
GOAL_SECONDS = 2.0
#: The other two kernel families beside AMD's hand-written kernels for them (static main-loop
#: counts: AMD's fmha hd128 kernel runs 8 waves of 32x32x8 MFMAs, fmoe_b16 a fused
#: gate/up/down MoE with 16x16x16 MFMAs, so the MoE row compares loops of different scope).
#: Attention rows pair like rounding with like: AMD's plain fmha_v3 kernels truncate P and O to
#: bf16 (one v_perm_b32 per pair), their `_rtne` variants round to nearest even (about five
#: VALU instructions per element, as ours with the default rounding="rne").
FAMILIES = [
    ("attention_fwd", {"head_dim": 128}, "fmha_v3_fwd/MI300/fwd_hd128_bf16_rtne.co"),
    ("attention_fwd", {"head_dim": 128, "rounding": "rtz"},
     "fmha_v3_fwd/MI300/fwd_hd128_bf16.co"),
    ("attention_fwd", {"head_dim": 128, "causal": True},
     "fmha_v3_fwd/MI300/fwd_hd128_bf16_causal_rtne.co"),
    ("attention_fwd", {"head_dim": 128, "causal": True, "rounding": "rtz"},
     "fmha_v3_fwd/MI300/fwd_hd128_bf16_causal.co"),
    ("moe_gemm", {}, "fmoe_b16.co"),
]
#: The problem each family row's modelled MI300X time (argus.time, no GPU) is given for.
MODELLED_SIZES = {"attention_fwd": {"BH": 32, "S": 1024, "D": 128}}


def amd_figure(tile: str) -> float | None:
    """Instructions per MFMA in the main loop of AMD's bf16gemm_outf32_tn_<tile>_pf3."""
    path = (aiter_root() / "aiter_meta" / "hsa" / "gfx942" / "bf16gemm"
            / f"bf16gemm_outf32_tn_{tile}_pf3.co")
    if not path.is_file():
        return None
    code = CodeObject.from_file(path)
    return instructions_per_mfma(main_loop(kernel_stats(code, code.kernels[0])))


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (the assembler): robust to the other
    jobs on a shared machine, unlike wall time."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(params: dict, policy: str) -> dict:
    ir = library()["gemm"].kernel.trace(**params)
    clear_caches()                     # cold: nothing kept from the previous configuration
    start, cpu = time.perf_counter(), _cpu_seconds()
    lowered = lower(ir, policy)
    code = assemble(lowered.text)
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    ours = instructions_per_mfma(main_loop(kernel_stats(code, code.kernels[0])))
    tile = f"{params['block_m']}x{params['block_n']}"
    amd = amd_figure(tile)
    # AMD's loop issues v_mfma_f32_16x16x16_bf16; a 32x32x8 MFMA does twice its work, so the
    # per-work figure divides by the ratio of the instructions' FLOPs
    work = mfma(params.get("instr", MFMA)).flops / mfma(SMALL).flops
    return {"params": params, "policy": policy, "compile_seconds": round(seconds, 3),
            "compile_cpu_seconds": round(cpu, 3),
            "vgprs": lowered.vgprs, "agprs": lowered.agprs, "sgprs": lowered.sgprs,
            "lds_bytes": lowered.lds_bytes, "waves_per_simd": lowered.occupancy,
            "occupancy_limit": lowered.occupancy_limit, "loop_instructions_per_mfma": ours,
            "loop_instructions_per_16x16x16_work": round(ours / work, 3),
            "amd_tile": tile if amd else None, "amd_loop_instructions_per_mfma": amd,
            "ratio_vs_amd": round(ours / amd, 3) if amd and ours else None,
            "work_ratio_vs_amd": round(ours / work / amd, 3) if amd and ours else None}


def measure_family(name: str, params: dict, amd: str, policy: str) -> dict:
    """measure() for a library kernel other than the GEMM, beside one AMD code object."""
    ir = library()[name].kernel.trace(**params)
    clear_caches()
    start, cpu = time.perf_counter(), _cpu_seconds()
    lowered = lower(ir, policy)
    code = assemble(lowered.text)
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    ours = instructions_per_mfma(main_loop(kernel_stats(code, code.kernels[0])))
    path = aiter_root() / "aiter_meta" / "hsa" / "gfx942" / amd
    theirs = None
    if path.is_file():
        other = CodeObject.from_file(path)
        theirs = instructions_per_mfma(main_loop(kernel_stats(other, other.kernels[0])))
    sizes = MODELLED_SIZES.get(name)
    modelled = None
    if sizes:
        import argus

        compiled = argus.compile(ir, policy=policy, verify=False)
        modelled = round(argus.time(compiled, sizes=sizes).microseconds, 2)
    return {"kernel": name, "params": params, "policy": policy,
            "modelled_us": modelled, "modelled_sizes": sizes,
            "compile_seconds": round(seconds, 3), "compile_cpu_seconds": round(cpu, 3),
            "vgprs": lowered.vgprs, "sgprs": lowered.sgprs, "lds_bytes": lowered.lds_bytes,
            "waves_per_simd": lowered.occupancy, "occupancy_limit": lowered.occupancy_limit,
            "loop_instructions_per_mfma": ours, "amd_kernel": amd if theirs else None,
            "amd_loop_instructions_per_mfma": theirs,
            "ratio_vs_amd": round(ours / theirs, 3) if theirs and ours else None}


@click.command()
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write results here")
@click.option("--policy", type=click.Choice(["interleave", "simple"]), default="interleave",
              show_default=True)
def main(json_path: str | None, policy: str) -> None:
    import argus.smt  # noqa: F401  (imported once before timing, as a warm process would)

    rows = [measure(params, policy) for params in CONFIGS]
    header = (f"{'configuration':<44} {'wall s':>6} {'CPU s':>5} {'VGPR':>5} {'AGPR':>5} "
              f"{'SGPR':>5} {'waves/SIMD':>10} {'instr/MFMA':>10} {'AMD same tile':>13} "
              f"{'ratio':>6} {'per work':>8}")
    print(header)
    for row in rows:
        p = row["params"]
        name = " ".join(f"{k}={v}" for k, v in p.items()).replace(f"instr={SMALL}", "16x16x16")
        amd = (f"{row['amd_loop_instructions_per_mfma']:.2f}" if row["amd_tile"] else "none")
        ratio = f"{row['ratio_vs_amd']:.2f}" if row["ratio_vs_amd"] else "-"
        work = f"{row['work_ratio_vs_amd']:.2f}" if row["work_ratio_vs_amd"] else "-"
        print(f"{name:<44} {row['compile_seconds']:>6.2f} {row['compile_cpu_seconds']:>5.2f} "
              f"{row['vgprs']:>5} {row['agprs']:>5} "
              f"{row['sgprs']:>5} {row['waves_per_simd']:>10} "
              f"{row['loop_instructions_per_mfma']:>10.2f} {amd:>13} {ratio:>6} {work:>8}")
    worst = max(r["compile_cpu_seconds"] for r in rows)
    wall = max(r["compile_seconds"] for r in rows)
    ratios = [r["ratio_vs_amd"] for r in rows if r["ratio_vs_amd"]]
    print(f"slowest compile {worst:.2f} s CPU, {wall:.2f} s wall at load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (goal <= {GOAL_SECONDS} s: "
          f"{'met' if worst <= GOAL_SECONDS else 'missed'}); "
          f"main-loop instructions per MFMA vs AMD at the same tile: "
          + (f"best {min(ratios):.2f}, worst {max(ratios):.2f} (goal <= 1.0)" if ratios
             else "no same-tile configuration"))
    works = [r["work_ratio_vs_amd"] for r in rows if r["work_ratio_vs_amd"]]
    if works:
        print(f"per unit of MFMA work (a 32x32x8 counts as two 16x16x16, AMD's instruction): "
              f"best {min(works):.2f}, worst {max(works):.2f}")
    print("occupancy limits: " + "; ".join(sorted({r["occupancy_limit"] for r in rows})))
    others = [measure_family(name, params, amd, policy) for name, params, amd in FAMILIES]
    print(f"\n{'kernel':<40} {'wall s':>6} {'CPU s':>5} {'VGPR':>5} {'SGPR':>5} "
          f"{'waves/SIMD':>10} {'instr/MFMA':>10} {'AMD':>6} {'ratio':>6} {'model us':>8}  "
          "AMD kernel")
    for row in others:
        name = " ".join([row["kernel"], *(f"{k}={v}" for k, v in row["params"].items())])
        amd = row["amd_loop_instructions_per_mfma"]
        print(f"{name:<40} {row['compile_seconds']:>6.2f} {row['compile_cpu_seconds']:>5.2f} "
              f"{row['vgprs']:>5} {row['sgprs']:>5} {row['waves_per_simd']:>10} "
              f"{row['loop_instructions_per_mfma']:>10.2f} "
              f"{f'{amd:.2f}' if amd else 'none':>6} "
              f"{row['ratio_vs_amd'] or '-':>6} "
              f"{row['modelled_us'] if row['modelled_us'] is not None else '-':>8}  "
              f"{row['amd_kernel'] or 'not in the wheel'}")
    print("model us: modelled MI300X time (argus.time, no GPU) of "
          + "; ".join(f"{name} at {' '.join(f'{k}={v}' for k, v in sizes.items())}"
                      for name, sizes in MODELLED_SIZES.items()))
    rows = rows + others
    if json_path:
        Path(json_path).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

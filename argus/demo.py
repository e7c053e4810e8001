"""The main job on built-in examples: one pass down the Argus road, printing what each stage did.

Verify the library GEMM for symbolic sizes, show the counterexample of a seeded bug, run the GEMM
in the reference interpreter, compile the verified GEMM to a gfx942 code object and run it in the
emulator, assemble and inspect the built-in gfx942 example, execute it and AMD's own bf16 GEMM in
the emulator, each against numpy. Figures are emulated, not measured.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import argus.lang as T
from argus.lang import Tensor

Echo = Callable[[str], None]


@T.kernel(waves=4)
def gemm_forgotten_swizzle(A: Tensor("bf16", "M", "K"), B: Tensor("bf16", "N", "K"),
                           C: Tensor("f32", "M", "N")):
    """The library GEMM with a classic defect: A is written to LDS swizzled, read back plain."""
    from argus.kernels.gemm import gemm_program

    gemm_program(A, B, C, block_m=64, block_n=64, block_k=32, swizzle=True,
                 read_swizzled=False)


def run_example_kernel(k: int = 40, seed: int = 0, check: str = "strict"):
    """Assemble the built-in `mfma_gemm_32x32` example and emulate it on random bf16 inputs.

    Returns (code object, emulation, max |error| vs numpy's A @ B.T)."""
    import ml_dtypes

    from argus.asm import assemble, example_path
    from argus.asm.launch import emulate

    source = example_path("mfma_gemm_32x32")
    code = assemble(source.read_text(), name=str(source))
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((32, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((32, k)).astype(ml_dtypes.bfloat16)
    c = np.zeros((32, 32), np.float32)
    run = emulate(code, "mfma_gemm_32x32", grid=1, block=64, args=[a, b, c, k], check=check)
    expected = a.astype(np.float32) @ b.astype(np.float32).T
    return code, run, float(np.abs(c - expected).max())


def tour(echo: Echo = print) -> bool:
    """Run every stage, print its outcome, and say whether all of them came out as expected."""
    from argus.absint.verify import verify
    from argus.asm import find_toolchain
    from argus.asm.stats import kernel_stats
    from argus.kernels import library
    from argus.pipeline import road
    from argus.vendor.harness import run_vendor

    results = []

    def stage(title: str, ok: bool, detail: str) -> None:
        results.append(ok)
        echo(f"[{'ok' if ok else 'FAILED'}] {title}")
        echo("\n".join(f"    {line}" for line in detail.splitlines()))

    tools = find_toolchain()
    stage("toolchain", True, f"LLVM {tools.version_text} ({tools.source})")

    report = verify(library()["gemm"].kernel)
    stage("verify gemm for symbolic M, N, K", report.ok, report.summary())

    attention = verify(library()["attention_fwd"].kernel, causal=True)
    stage("verify causal flash attention for symbolic batch*heads and sequence length",
          attention.ok, attention.summary())

    moe = verify(library()["moe_gemm"].kernel)
    stage("verify MoE GEMM (gathered token rows; T.distinct declares each token once)",
          moe.ok, moe.summary())

    buggy = verify(gemm_forgotten_swizzle)
    refuted = buggy.refuted
    stage("verify a seeded bug: A read from LDS without its swizzle", bool(refuted),
          str(refuted[0]) if refuted else buggy.summary())

    # the road itself, stage by stage: the checks against numpy, the compiled code object
    interp = road("gemm", until="interpret", skip=("verify",), strict=False,
                  sizes={"M": 128, "N": 128, "K": 64}).interp
    stage("reference interpreter: gemm M=N=128 K=64 vs numpy", interp.ok,
          f"max relative error {interp.max_error:.3g} (tolerance {interp.tolerance:g}); "
          f"{len(interp.run.violations)} violations")

    done = road("gemm", until="emulate", skip=("verify", "interpret"), strict=False,
                sizes={"M": 128, "N": 192, "K": 96}, block_m=64)
    compiled, emulated = done.compiled, done.emulated
    resources = compiled.resources
    stage("compile the verified gemm to gfx942 and run its code object in the strict emulator "
          "(M=128 N=192 K=96)", emulated.ok and not emulated.run.hazards,
          f"compiled in {compiled.seconds:.2f} s: {resources['vgprs']} VGPRs, "
          f"{resources['sgprs']} SGPRs, LDS {resources['lds_bytes']} B, "
          f"{resources['waves_per_simd']} waves/SIMD; sizes are kernel arguments\n"
          f"max relative error vs numpy {emulated.max_error:.3g} (tolerance "
          f"{emulated.tolerance:g}); {emulated.run.wave_instructions} wave-instructions "
          "emulated with strict hazard and wait checks")

    code, run, error = run_example_kernel()
    summary = kernel_stats(code, code.kernel("mfma_gemm_32x32"))
    loop = summary.loops[0] if summary.loops else None
    stage("assemble + emulate built-in example mfma_gemm_32x32 (K=40, strict hazards)",
          error < 1e-3 and not run.hazards,
          f"{summary.instructions} instructions, {summary.code_bytes} bytes; "
          f"K loop of {loop.instructions if loop else 0} instructions; "
          f"max |error| vs numpy {error:.3g}; {run.wave_instructions} wave-instructions")

    vendor = run_vendor("bf16gemm_outf32_tn_32x64_pf3", shape={"m": 64, "n": 128, "k": 128})
    stage("emulate AMD's hand-written bf16gemm_outf32_tn_32x64_pf3 (amd-aiter)", vendor.ok,
          vendor.report(top=5))
    return all(results)

"""`argus demo` (each stage once, against its oracle) and the top-level `argus.verify`."""

from click.testing import CliRunner

import argus
from argus.cli import main
from argus.demo import gemm_forgotten_swizzle, run_example_kernel


def test_demo_runs_every_stage_and_each_agrees_with_its_oracle():
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 0, result.output
    assert result.output.count("[ok]") == 9 and "FAILED" not in result.output
    assert "compile the verified gemm to gfx942" in result.output
    assert "confirmed by concrete replay" in result.output
    assert "bf16gemm_outf32_tn_32x64_pf3" in result.output and ": OK" in result.output


def test_top_level_verify_accepts_library_names_and_dsl_kernels():
    assert argus.verify("gemm", M=128, N=64, K=64).ok
    report = argus.verify(gemm_forgotten_swizzle, M=64, N=64, K=64)
    assert not report.ok
    refuted = report.refuted[0].counterexample
    assert refuted.confirmed and set(refuted.tags) >= {"A", "B"}


def test_example_kernel_without_k_loop_and_with_several_k_steps_matches_numpy():
    for k in (0, 8, 64):
        _, run, error = run_example_kernel(k=k, seed=k)
        assert error < 1e-3 and not run.hazards

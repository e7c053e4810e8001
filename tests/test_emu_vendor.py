"""Beyond the GEMMs: AMD's FlashAttention-v3 forward kernels (fmha_v3_fwd/MI300) and the bf16
fused-MoE kernels load and run; attention matches numpy's softmax(QK^T/sqrt(d))V; the
`argus emulate` command reports error, time, instruction counts and hazards."""

import pytest
from click.testing import CliRunner

from argus.asm import CodeObject
from argus.cli import main
from argus.isa_cdna3 import HazardError, unsupported_opcodes
from argus.isa_cdna3.vendor import VendorKernelError, code_object_path, run_vendor

pytestmark = pytest.mark.aiter


@pytest.mark.parametrize("name, shape", [
    ("fwd_hd128_bf16", {"s": 256, "sk": 256}),
    ("fwd_hd128_bf16_rtz", {"b": 2, "h": 2, "s": 200, "sk": 300}),     # ragged: OOB K/V read 0
    ("fwd_hd128_bf16_causal_rtne", {"s": 256, "sk": 256}),
    ("fwd_hd128_bf16_causal", {"s": 768, "sk": 768}),                  # odd tile count
], ids=lambda p: p if isinstance(p, str) else "-".join(f"{k}{v}" for k, v in p.items()))
def test_flash_attention_forward_matches_numpy(aiter_root, name, shape):
    outcome = run_vendor(name, root=aiter_root, shape=shape, check="warn")
    assert outcome.ok, outcome.report()
    assert outcome.emulation.opcode_counts()["v_mfma_f32_32x32x8_bf16"] > 0
    # AMD's kernel reads some MFMA results sooner than LLVM's (conservative) wait-state table
    # allows; warn mode records exactly those and nothing else.
    assert {h.kind for h in outcome.emulation.hazards} <= {"mfma-result"}
    assert outcome.emulation.unmapped_accesses == 0


def test_flash_attention_is_flagged_by_the_strict_llvm_hazard_table(aiter_root):
    with pytest.raises(HazardError, match="v_mfma_f32_32x32x8_bf16"):
        run_vendor("fwd_hd128_bf16", root=aiter_root, check="strict")


def test_all_mi300_attention_and_bf16_moe_kernels_use_only_supported_opcodes(aiter_root):
    base = aiter_root / "aiter_meta" / "hsa" / "gfx942"
    paths = sorted((base / "fmha_v3_fwd" / "MI300").glob("*.co"))
    paths += sorted((base / "fmoe" / "silu").glob("fmoe_bf16_*.co"))[:6]
    assert len(paths) >= 20
    for path in paths:
        code = CodeObject.from_file(path)
        for kernel in code.kernels:
            assert unsupported_opcodes(code, kernel) == {}, path.name


def test_cli_emulate_reports_error_time_counts_and_hazards(aiter_root):
    result = CliRunner().invoke(main, ["emulate", "bf16gemm_outf32_tn_32x64_pf3",
                                       "--size", "m=40", "--size", "k=128", "--banks"])
    assert result.exit_code == 0, result.output
    assert "max error vs numpy" in result.output and "OK" in result.output
    assert "wave-instructions" in result.output and "v_mfma_f32_16x16x16_bf16" in result.output
    assert "hazards: none" in result.output and "conflict factor" in result.output
    listing = CliRunner().invoke(main, ["emulate", "--list"])
    assert "fwd_hd128_bf16_causal" in listing.output


def test_unknown_vendor_kernel_and_bad_sizes_are_explained(aiter_root):
    with pytest.raises(VendorKernelError, match="known: bf16gemm"):
        code_object_path(aiter_root, "bf16gemm_outf32_tn_80x64_pf3")
    with pytest.raises(VendorKernelError, match="multiples of 64"):
        run_vendor("bf16gemm_outf32_tn_32x64_pf3", root=aiter_root, shape={"n": 100})
    result = CliRunner().invoke(main, ["emulate", "fwd_hd128_bf16", "--size", "q=3"])
    assert result.exit_code != 0 and "takes sizes" in result.output

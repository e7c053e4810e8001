"""Beyond the GEMMs: AMD's FlashAttention-v3 forward kernels (fmha_v3_fwd/MI300) and the 16-bit
fused-MoE kernel fmoe_b16 match numpy (softmax(QK^T/sqrt(d))V; topk-weighted
gelu(x W1^T) W2^T over aiter's sorted tokens and pre-shuffled weights); the legacy causal kernel
is refused where it is wrong; the `argus emulate` command reports error, time, counts, hazards."""

import attrs
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import argus
from argus.asm import CodeObject
from argus.asm.launch import unsupported_opcodes
from argus.cli import main
from argus.isa_cdna3.emu import HazardError
from argus.vendor import harness as vendor
from argus.vendor.harness import (
    VendorKernelError,
    code_object_path,
    moe_sorting,
    run_vendor,
    shuffle_weight,
)

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


def test_ragged_causal_attention_with_the_kernels_aiter_launches(aiter_root):
    # seq lengths that are not multiples of 32, more than one q-tile per workgroup
    for name, shape in (("fwd_hd128_bf16_causal_rtne", {"s": 300, "sk": 300}),
                        ("fwd_hd128_bf16_causal_rtz", {"s": 272, "sk": 400})):
        outcome = run_vendor(name, root=aiter_root, shape=shape, check="warn")
        assert outcome.ok, outcome.report()


def test_legacy_causal_kernel_is_refused_where_its_v_tail_masking_is_wrong(aiter_root):
    with pytest.raises(VendorKernelError, match="codegen.py dispatches causal bf16 hd128 only"):
        run_vendor("fwd_hd128_bf16_causal", root=aiter_root, shape={"s": 300, "sk": 300})
    assert run_vendor("fwd_hd128_bf16_causal", root=aiter_root, shape={"s": 200, "sk": 200}).ok


def test_legacy_causal_kernel_defect_is_its_v_tail_zeroing_not_the_emulator(aiter_root,
                                                                           monkeypatch):
    """Without the eight v_cndmask that zero V rows >= seqlen_k mod 32 of the last-loaded KV tile,
    the legacy kernel matches numpy at a shape the runner refuses for it."""
    code = CodeObject.from_file(code_object_path(aiter_root, "fwd_hd128_bf16_causal"))
    listing = list(code.disassemble(code.kernels[0]))
    nop = next(ins for ins in listing if ins.opcode == "s_nop")
    masking = [i for i, ins in enumerate(listing) if ins.opcode == "v_cndmask_b32_e64"
               and listing[i - 3].opcode == "v_cmp_lt_u32_e64"]
    assert len(masking) == 8
    for i in masking:
        listing[i] = attrs.evolve(nop, address=listing[i].address, encoding=listing[i].encoding)
    monkeypatch.setattr(code, "disassemble", lambda *args, **kwargs: listing)
    monkeypatch.setattr(vendor, "LEGACY_CAUSAL", "(guard lifted for this experiment)")
    outcome = run_vendor("fwd_hd128_bf16_causal", code=code, shape={"s": 300, "sk": 300})
    assert outcome.ok, outcome.report()


@pytest.mark.parametrize("name, shape", [
    ("fmoe_b16", {}),
    ("fmoe_b16", {"tokens": 33, "dim": 768, "inter": 1024, "experts": 8, "topk": 3}),
    ("fmoe_f16", {"tokens": 5}),                # its f16 packing uses SDWA forms
], ids=lambda p: p if isinstance(p, str) else "-".join(f"{k}{v}" for k, v in p.items()))
def test_16bit_fused_moe_matches_numpy(aiter_root, name, shape):
    outcome = run_vendor(name, root=aiter_root, shape=shape, check="warn")
    assert outcome.ok, outcome.report()
    atomic = {"fmoe_b16": "global_atomic_pk_add_bf16", "fmoe_f16": "global_atomic_pk_add_f16"}
    assert outcome.emulation.opcode_counts()[atomic[name]] > 0
    # AMD under-waits weight loads issued hundreds of MFMAs earlier; nothing else is flagged
    assert {h.kind for h in outcome.emulation.hazards} == {"pending-load"}
    assert outcome.emulation.unmapped_accesses == 0


@pytest.mark.parametrize("name, shape", [
    ("fmoe_stage1_bf16_pertokenFp8_g1u1_32x128_3tg_pf3", {}),
    ("fmoe_stage1_bf16_pertokenFp8_doweight_g1u1_32x64_4tg_pf3", {"gelu": 1, "topk": 3}),
])
def test_fp8_stage1_fused_moe_matches_numpy(aiter_root, name, shape):
    # aiter's e4m3fnuz gate+up kernels, launched as asm_moe_2stage.cu does (the doweight one
    # scales each row by its routing weight before the activation)
    run = run_vendor(name, root=aiter_root, shape=shape)
    assert run.ok, run.report()
    assert run.emulation.opcode_counts()["v_mfma_f32_16x16x32_fp8_fp8"] > 0
    with pytest.raises(VendorKernelError, match="multiple of the kernel's tile_n 128"):
        run_vendor("fmoe_stage1_bf16_pertokenFp8_g1u1_32x128_3tg_pf3", root=aiter_root,
                   shape={"inter": 192})


@pytest.mark.parametrize("name, shape", [
    ("I8gemm_bf16_perTokenI8_BpreShuffle_128x128", {}),
    ("I8gemm_bf16_perTokenI8_BpreShuffle_192x128", {"m": 200, "n": 256, "k": 1280,
                                                     "splitk": 3}),
])
def test_int8_gemm_matches_numpy(aiter_root, name, shape):
    # aiter's a8w8 asm GEMM with B in shuffle_weight's (32, 16) layout, scales and bias; the
    # second splits K three ways (512 each, as asm_gemm_a8w8.cu rounds them) into a ragged M
    run = run_vendor(name, root=aiter_root, shape=shape)
    assert run.ok, run.report()
    assert run.emulation.grid[0] == shape.get("n", 128) // 128 * shape.get("splitk", 1)
    with pytest.raises(VendorKernelError, match="unsplit K below 384"):
        run_vendor(name, root=aiter_root, shape={"k": 256})


def test_fused_moe_under_waited_loads_are_caught_in_strict_mode(aiter_root):
    with pytest.raises(HazardError, match="pending-load hazard .* a48 .*buffer_load_dwordx4"):
        run_vendor("fmoe_b16", root=aiter_root, check="strict")


def test_fused_moe_shapes_outside_the_launcher_contract_are_explained(aiter_root):
    with pytest.raises(VendorKernelError, match="sub_GU=512"):
        run_vendor("fmoe_b16", root=aiter_root, shape={"inter": 768})
    with pytest.raises(VendorKernelError, match="multiple of 256 and at least 512"):
        run_vendor("fmoe_b16", root=aiter_root, shape={"dim": 256})
    with pytest.raises(VendorKernelError, match="topk=3 exceeds experts=2"):
        run_vendor("fmoe_b16", root=aiter_root, shape={"experts": 2, "topk": 3})


@settings(deadline=None)
@given(tokens=st.integers(1, 40), experts=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_moe_sorting_routes_every_token_slot_once_in_expert_blocks(tokens, experts, seed):
    rng = np.random.default_rng(seed)
    topk = int(rng.integers(1, experts + 1))
    ids = np.argsort(rng.random((tokens, experts)), axis=1)[:, :topk]
    weights = rng.random((tokens, topk)).astype(np.float32)
    sorted_ids, sorted_weights, expert_ids, valid = moe_sorting(ids, weights, experts)
    used, block = int(valid[0]), 32
    assert valid[1] == tokens and used % block == 0
    real = sorted_ids[:used][(sorted_ids[:used] & 0xFFFFFF) < tokens]
    token, slot = real & 0xFFFFFF, real >> 24
    assert sorted(zip(token.tolist(), slot.tolist())) == [(t, s) for t in range(tokens)
                                                          for s in range(topk)]
    assert (sorted_ids[used:] == (topk << 24) | tokens).all()
    for position, entry in enumerate(sorted_ids[:used]):
        t, k = entry & 0xFFFFFF, entry >> 24
        if t < tokens:
            assert ids[t, k] == expert_ids[position // block]
            assert sorted_weights[position] == weights[t, k]


@given(seed=st.integers(0, 2**16), n_blocks=st.integers(1, 3), k_blocks=st.integers(1, 3))
def test_shuffle_weight_puts_each_lane_fragment_in_16_contiguous_bytes(seed, n_blocks, k_blocks):
    n, k = 16 * n_blocks, 32 * k_blocks
    w = np.random.default_rng(seed).integers(0, 2**16, (2, n, k), dtype=np.uint16)
    flat = shuffle_weight(w).reshape(2, -1)
    for expert, row, col in [(e, r, c) for e in range(2) for r in range(0, n, 5)
                             for c in range(0, k, 8)]:
        lane = (col % 32) // 8 * 16 + row % 16     # lane of a 16-row x 32-column block
        start = ((row // 16) * (k // 32) + col // 32) * 512 + lane * 8
        np.testing.assert_array_equal(flat[expert, start:start + 8], w[expert, row, col:col + 8])


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


@pytest.mark.parametrize("path", [
    "all_reduce.co",                                        # s_store_dword, s_atomic_inc
    "fmoe_f16.co",                                          # v_cvt_f16_f32_sdwa
    "pa_a16w8_f16.co",                                      # v_cvt_f32_f16_sdwa
    "fmoe_int4fp8_g1u1_subGU_128_gelu.co",                  # v_cvt_off_f32_i4 (e32, sdwa)
    "mla/mla_a16w8_qh16_m16x4_n16x1_coex0_mask1_ps.co",     # v_cvt_pk_f32_fp8_sdwa
    "mla/mla_a8w8_qh16_qseqlen1_gqaratio16.co",             # s_set_gpr_idx_on/off
    "flatmm_uk_gfx9_f16f8_128x256x128_1x4x1_16x16x32.co",   # src_shared_base
])
def test_formerly_unsupported_vendor_kernels_now_compile(aiter_root, path):
    code = CodeObject.from_file(aiter_root / "aiter_meta" / "hsa" / "gfx942" / path)
    assert unsupported_opcodes(code) == {}


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


def test_attention_keys_default_to_the_queries(aiter_root):
    # `--size s=100` means self-attention at 100 positions, in the emulator and in the model
    outcome = run_vendor("fwd_hd128_bf16_rtne", root=aiter_root, shape={"s": 100})
    assert outcome.shape["sk"] == 100 and outcome.ok
    timed = argus.time("fwd_hd128_bf16", sizes={"s": 1024})
    assert timed.shape["sk"] == 1024
    assert argus.time("fwd_hd128_bf16", sizes={"s": 1024, "sk": 256}).shape["sk"] == 256

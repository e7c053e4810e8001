"""AMD's hand-written gfx942 kernels (amd-aiter) run in the emulator with random inputs and checked
against numpy: the bf16 GEMMs, the FlashAttention-v3 forward kernels and the 16-bit fused MoE.

Kernel arguments, grid and block follow aiter's launchers: csrc/py_itfs_cu/asm_gemm_a16w16.cu
(GEMM), hsa/gfx942/fmha_v3_fwd/codegen.py (attention) and csrc/py_itfs_cu/asm_fmoe.cu plus
aiter/fused_moe.py, aiter/ops/shuffle.py (MoE sorting and weight pre-shuffle).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import ml_dtypes
import numpy as np

from argus.asm.codeobject import CodeObject
from argus.asm.launch import emulate
from argus.errors import ArgusError
from argus.isa_cdna3.emu import Emulation
from argus.vendor import GEMM_NAME, GEMMS

BF16 = ml_dtypes.bfloat16
GEMM = re.compile(rf"^{GEMM_NAME.pattern}$")
FMHA = re.compile(r"^fwd_hd128_bf16(_causal)?(_rtne|_rtna|_rtz)?$")
FMOE = re.compile(r"^fmoe_(b16|f16)$")
# aiter's stage-1 fp8 fused-MoE kernels (hsa/gfx942/fmoe_2stages/*.csv): gate+up GEMM of the
# sorted tokens against pre-shuffled e4m3fnuz weights, per-token and per-channel scales, the
# activation times up written as bf16; `_doweight` scales each row by its routing weight first.
FMOE_STAGE1 = re.compile(
    r"^fmoe_stage1_bf16_pertokenFp8(_doweight)?_g1u1_(\d+)x(\d+)(?:_\dtg)?_pf[23]$")
_STAGE1_VARIANTS = {
    "": "16x128_4tg_pf2 16x128_4tg_pf3 32x128_3tg_pf2 32x128_3tg_pf3 48x128_2tg_pf2 "
        "48x128_2tg_pf3 64x128_2tg_pf2 64x128_2tg_pf3 80x128_2tg_pf2 80x128_pf3 96x128_pf2 "
        "96x128_pf3 112x128_pf2 112x128_pf3 128x128_pf2 128x128_pf3 144x128_pf2 144x128_pf3 "
        "160x128_pf2 160x128_pf3 16x256_3tg_pf2 16x256_2tg_pf3 32x256_2tg_pf2 32x256_2tg_pf3 "
        "48x256_pf2 48x256_pf3 64x256_pf2 64x256_pf3 80x256_pf2 80x256_pf3 16x512_2tg_pf2 "
        "16x512_pf3 32x512_pf2 32x512_pf3 48x512_pf2 48x512_pf3 16x64_6tg_pf2 16x64_5tg_pf3 "
        "32x64_4tg_pf2 32x64_4tg_pf3 48x64_3tg_pf2 48x64_3tg_pf3 64x64_3tg_pf2 64x64_2tg_pf3 "
        "80x64_2tg_pf2 80x64_2tg_pf3 96x64_2tg_pf2 96x64_pf3 112x64_2tg_pf2 112x64_pf3 "
        "128x64_pf2 128x64_pf3 144x64_pf2 144x64_pf3 160x64_pf2 160x64_pf3",
    "_doweight": "16x128_4tg_pf2 16x128_4tg_pf3 32x128_3tg_pf2 32x128_3tg_pf3 48x128_2tg_pf2 "
        "48x128_2tg_pf3 64x128_2tg_pf2 64x128_2tg_pf3 80x128_pf2 80x128_pf3 96x128_pf2 "
        "96x128_pf3 112x128_pf2 112x128_pf3 128x128_pf2 128x128_pf3 144x128_pf2 144x128_pf3 "
        "16x256_3tg_pf2 16x256_2tg_pf3 32x256_2tg_pf2 32x256_2tg_pf3 48x256_pf2 48x256_pf3 "
        "64x256_pf2 64x256_pf3 80x256_pf2 80x256_pf3 16x512_2tg_pf2 16x512_pf3 32x512_pf2 "
        "32x512_pf3 48x512_pf2 48x512_pf3 16x64_6tg_pf2 16x64_5tg_pf3 32x64_4tg_pf2 "
        "32x64_4tg_pf3 48x64_3tg_pf2 48x64_3tg_pf3 64x64_2tg_pf2 64x64_2tg_pf3 80x64_2tg_pf2 "
        "80x64_2tg_pf3 96x64_2tg_pf2 96x64_pf3 112x64_pf2 112x64_pf3 128x64_pf2 128x64_pf3 "
        "144x64_pf2 144x64_pf3 160x64_pf2 160x64_pf3"}
#: the stage-1 fp8 kernels of the wheel, by name (as `fmoe_2stages/*.csv` lists them)
FMOE_STAGE1_KERNELS = tuple(f"fmoe_stage1_bf16_pertokenFp8{kind}_g1u1_{v}"
                            for kind, variants in _STAGE1_VARIANTS.items()
                            for v in variants.split())
# aiter's int8 asm GEMMs (hsa/gfx942/i8gemm): C = (A @ B.T) * sa[m] * sb[n] + bias[n] in bf16,
# B pre-shuffled (shuffle_weight layout (32, 16)), K split over grid x with atomic adds
I8GEMM = re.compile(r"^I8gemm_bf16_perTokenI8_BpreShuffle_(128|192)x128$")
I8GEMMS = tuple(f"I8gemm_bf16_perTokenI8_BpreShuffle_{m}x128" for m in (128, 192))
FP8 = ml_dtypes.float8_e4m3fnuz
FP8_MAX = float(ml_dtypes.finfo(FP8).max)     # 240: per-token and per-channel scales map to it
MOE_BLOCK = 32      # aiter's BLOCK_SIZE_M: sorted tokens per workgroup row of the grid
MOE_SUB_GU = 512    # FMoeKernel's default sub_GU: intermediate columns per workgroup

# The suffix-less causal code object is not what aiter launches: hsa/gfx942/fmha_v3_fwd/codegen.py
# (FmhaFwdV3Buf) maps every gfx942 bf16 hd128 mask kernel to fwd_hd128_bf16_causal_{rtne,rtna,
# rtz}.co. Unlike those, it zeroes V rows >= seqlen_k mod 32 of the KV tile it loaded *last*
# (pc 0x61c4 and 0x6508); the second q-tile of a workgroup walks KV backwards, so that tile is
# tile 0 and valid rows are wiped. Removing those eight v_cndmask makes it match numpy in the
# emulator (tests/test_emu_vendor.py), so the defect is the kernel's, not the emulator's.
LEGACY_CAUSAL = "fwd_hd128_bf16_causal"
LEGACY_CAUSAL_RAGGED = (
    "fwd_hd128_bf16_causal: s={s} sk={sk} is outside what this code object computes correctly "
    "(with more than one q-tile and s or sk not a multiple of 32 it zeroes the V tail of the "
    "wrong KV tile) and aiter never launches it: hsa/gfx942/fmha_v3_fwd/codegen.py dispatches "
    "causal bf16 hd128 only to fwd_hd128_bf16_causal_rtne/_rtna/_rtz. Use one of those, or keep "
    "s <= 256 or s and sk multiples of 32.")


class VendorKernelError(ArgusError, ValueError):
    """An unknown vendor kernel name or a shape it cannot run."""


@attrs.frozen
class VendorRun:
    """Outcome of one vendor kernel run: error against numpy and the emulator's trace."""

    name: str
    shape: dict[str, int]
    max_error: float
    tolerance: float
    emulation: Emulation

    @property
    def ok(self) -> bool:
        return self.max_error <= self.tolerance

    def report(self, top: int = 8) -> str:
        """Human-readable summary: error, time, instruction counts, bytes and hazards."""
        run = self.emulation
        shape = " ".join(f"{k}={v}" for k, v in self.shape.items())
        lines = [
            f"{self.name} [{shape}] grid {run.grid} block {run.block} "
            f"({run.workgroups} workgroups, {run.waves} waves)",
            f"max error vs numpy {self.max_error:.3g} (tolerance {self.tolerance:.3g}): "
            f"{'OK' if self.ok else 'MISMATCH'}",
            f"emulated in {run.seconds:.3f} s: {run.wave_instructions} wave-instructions, "
            f"{run.lane_instructions_per_second:.3g} lane-instructions/s, "
            f"{run.bytes_moved} bytes moved",
            "top opcodes: " + ", ".join(f"{op} {count}" for op, count in
                                        run.opcode_counts().most_common(top)),
        ]
        if run.lds_cycles:
            from argus.isa_cdna3.emu.memory_ops import lds_ideal_cycles

            by_pc = {ins.address: ins for ins in run.instructions}
            ideal = sum(lds_ideal_cycles(by_pc[pc]) * run.counts[pc] for pc in run.lds_cycles)
            cycles = sum(run.lds_cycles.values())
            lines.append(f"LDS: {cycles} cycles under the bank model, conflict factor "
                         f"{cycles / ideal:.2f} (1.00 = conflict-free)")
        kinds: dict[str, int] = {}
        for hazard in run.hazards:
            kinds[hazard.kind] = kinds.get(hazard.kind, 0) + 1
        lines.append("hazards: " + (", ".join(f"{k} {n}" for k, n in kinds.items()) or "none"))
        if run.unmapped_accesses:
            lines.append(f"{run.unmapped_accesses} lane accesses fell outside every buffer "
                         f"(read as 0, lenient memory)")
        lines += [f"  {hazard}" for hazard in run.hazards[:3]]
        return "\n".join(lines)


def vendor_kernels() -> list[str]:
    """Names `run_vendor` accepts."""
    names = list(GEMMS)
    for causal in ("", "_causal"):
        for rounding in ("", "_rtne", "_rtna", "_rtz"):
            names.append(f"fwd_hd128_bf16{causal}{rounding}")
    return names + ["fmoe_b16", "fmoe_f16", *FMOE_STAGE1_KERNELS, *I8GEMMS]


def code_object_path(root: Path, name: str) -> Path:
    base = root / "aiter_meta" / "hsa" / "gfx942"
    if GEMM.match(name):
        return base / "bf16gemm" / f"{name}.co"
    if FMHA.match(name):
        return base / "fmha_v3_fwd" / "MI300" / f"{name}.co"
    if FMOE.match(name):
        return base / f"{name}.co"
    if FMOE_STAGE1.match(name) and name in FMOE_STAGE1_KERNELS:
        return base / "fmoe_2stages" / f"{name}.co"
    if I8GEMM.match(name):
        return base / "i8gemm" / f"{name}.co"
    raise VendorKernelError(f"unknown vendor kernel {name!r}; known: {', '.join(vendor_kernels())}")


def run_vendor(name: str, *, shape: dict[str, int] | None = None, seed: int = 0,
               check: str = "warn", code: CodeObject | None = None,
               root: Path | None = None, bank_conflicts: bool = False,
               trace: bool = False) -> VendorRun:
    """Run vendor kernel `name` on random inputs; `shape` overrides the default problem size
    (GEMM: m, n, k, splitk; attention: b, h, s, sk; MoE: tokens, dim, inter, experts, topk).
    `trace` records the emulator's event trace for the performance model."""
    if not any(family.match(name) for family in (GEMM, FMHA, FMOE, I8GEMM)) and \
            name not in FMOE_STAGE1_KERNELS:
        raise VendorKernelError(f"unknown vendor kernel {name!r}; known: "
                                f"{', '.join(vendor_kernels())}")

    def load() -> CodeObject:
        # only once the name and sizes are known good: the wheel may have to be fetched
        if code is not None:
            return code
        from argus.vendor.aiter import aiter_root

        return CodeObject.from_file(code_object_path(root or aiter_root(), name))

    rng = np.random.default_rng(seed)
    options = dict(bank_conflicts=bank_conflicts, trace=trace)
    if (match := GEMM.match(name)):
        return _gemm(name, int(match.group(1)), load, rng, shape or {}, check, options)
    if (match := FMHA.match(name)):
        return _fmha(name, bool(match.group(1)), load, rng, shape or {}, check, options)
    if (match := I8GEMM.match(name)):
        return _i8gemm(name, int(match.group(1)), load, rng, shape or {}, check, options)
    if (match := FMOE_STAGE1.match(name)):
        return _fmoe_stage1(name, bool(match.group(1)), int(match.group(2)), int(match.group(3)),
                            load, rng, shape or {}, check, options)
    match = FMOE.match(name)
    return _fmoe(name, match.group(1), load, rng, shape or {}, check, options)


def _sizes(defaults: dict[str, int], given: dict[str, int], name: str) -> dict[str, int]:
    unknown = set(given) - set(defaults)
    if unknown:
        raise VendorKernelError(f"{name} takes sizes {sorted(defaults)}, not {sorted(unknown)}")
    check_whole_sizes(given, name)
    return {**defaults, **given}


def check_whole_sizes(given: dict, name: str) -> None:
    """Each size a whole number >= 1, blamed by name before any rule of the kernel's."""
    for size, value in given.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise VendorKernelError(f"{name}: size {size}={value!r} must be a whole number >= 1")


def keys_default_to_queries(given: dict) -> dict:
    """An attention shape's given sizes with the key length `sk` defaulting to the query
    length `s` (self-attention unless told otherwise)."""
    return {"sk": given["s"], **given} if "s" in given else dict(given)


def _gemm(name: str, tile: int, load: Callable[[], CodeObject], rng: np.random.Generator,
          given: dict[str, int], check: str, options: dict) -> VendorRun:
    size = _sizes({"m": tile, "n": 128, "k": 256, "splitk": 1}, given, name)
    m, n, k, splitk = size["m"], size["n"], size["k"], size["splitk"]
    if n % 64 or k % 64:
        raise VendorKernelError(f"{name}: N and K must be multiples of 64 (aiter's launcher "
                                f"requirement), got n={n} k={k}")
    a = rng.standard_normal((m, k)).astype(BF16)
    b = rng.standard_normal((n, k)).astype(BF16)
    out = np.zeros((m, n), np.float32)
    args = dict(D=out, A=a.view(np.uint16), B=b.view(np.uint16), alpha=1.0, beta=0.0,
                strideD0=n * 4, strideC0=n * 4, strideA0=k * 2, strideB0=k * 2,
                Mdim=m, Ndim=n, Kdim=k, splitk=splitk)
    run = emulate(load(), grid=(n // 64, -(-m // tile), splitk), block=256, args=args, check=check,
                  **options)
    reference = a.astype(np.float64) @ b.astype(np.float64).T
    # bf16 products are exact in f32; only the summation order differs from numpy
    tolerance = 4 * k * float(np.finfo(np.float32).eps) * (float(np.abs(reference).max()) + 1)
    return VendorRun(name, size, float(np.abs(out - reference).max()), tolerance, run)


def _fmha(name: str, causal: bool, load: Callable[[], CodeObject], rng: np.random.Generator,
          given: dict[str, int], check: str, options: dict) -> VendorRun:
    size = _sizes({"b": 1, "h": 1, "s": 256, "sk": 256}, keys_default_to_queries(given), name)
    b, h, s, sk, d = size["b"], size["h"], size["s"], size["sk"], 128
    if causal and name == LEGACY_CAUSAL and s > 256 and (s % 32 or sk % 32):
        raise VendorKernelError(LEGACY_CAUSAL_RAGGED.format(s=s, sk=sk))
    q = rng.standard_normal((b, s, h, d)).astype(BF16)
    k = rng.standard_normal((b, sk, h, d)).astype(BF16)
    v = rng.standard_normal((b, sk, h, d)).astype(BF16)
    out = np.zeros((b, s, h, d), np.uint16)
    lse = np.zeros((b, h, s), np.float32)
    scale = 1.0 / np.sqrt(d)
    row = h * d * 2     # bytes between consecutive sequence positions (BSHD layout)
    # the launcher's tune_opt: 5, or 3 for masked kernels unless nhead % 8 == 0 and s <= 16K
    tune_opt = 3 if causal and (h % 8 != 0 or s > 16384) else 5
    args: dict[str, Any] = dict(
        R=out, Q=q.view(np.uint16), K=k.view(np.uint16), V=v.view(np.uint16), LSE=lse,
        scalar=float(scale), seq_len=s, Seqs=row, Ts=256 * row, Hs=d * 2, Bs=s * row, gqa=1,
        k_Seqs=row, k_Hs=d * 2, k_Bs=sk * row, msk_opt=tune_opt, lse=0, kv_seq_len=sk,
        qk_head_dim=d, v_head_dim=d, q_head_num=h, v_Seqs=row, v_Hs=d * 2, v_Bs=sk * row,
        r_Seqs=row, r_Hs=d * 2, r_Bs=s * row, lse_Hs=s * 4)
    tiles = -(-s // 256)
    groups = -(-tiles // 2) if causal else tiles
    # the kernel's last waves read a row past Q/K/V inside the buffer's V# range
    run = emulate(load(), grid=(groups, h, b), block=512, args=args, check=check,
                  memory="lenient", **options)
    logits = np.einsum("bshd,bthd->bhst", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:  # bottom-right aligned, as aiter's mask for sq <= sk
        masked = np.arange(sk)[None, :] > np.arange(s)[:, None] + (sk - s)
        logits = np.where(masked, -np.inf, logits)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    reference = np.einsum("bhst,bthd->bshd", probs, v.astype(np.float64))
    result = out.view(BF16).astype(np.float64)
    # bf16 output (8 significant bits) plus bf16 rounding of P before the second GEMM
    tolerance = 2.0 ** -6 * float(np.abs(reference).max()) + 1e-3
    return VendorRun(name, size, float(np.abs(result - reference).max()), tolerance, run)



def moe_sorting(topk_ids: np.ndarray, topk_weights: np.ndarray, experts: int,
                block: int = MOE_BLOCK) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """aiter's moe_sorting_fwd in numpy: (token, slot) pairs grouped by expert, each expert padded
    to a multiple of `block`. Returns sorted ids (slot << 24 | token; padding is topk << 24 |
    tokens), their routing weights (padding 0), one expert id per block, and num_valid_ids
    [padded pairs in use, tokens]."""
    tokens, topk = topk_ids.shape
    capacity = topk_ids.size + experts * block - topk
    padding = (topk << 24) | tokens
    sorted_ids = np.full(capacity, padding, np.int32)
    sorted_weights = np.zeros(capacity, np.float32)
    expert_ids = np.zeros(-(-capacity // block), np.int32)
    used = 0
    for expert in range(experts):
        token, slot = np.nonzero(topk_ids == expert)
        if not len(token):
            continue
        sorted_ids[used:used + len(token)] = (slot << 24) | token
        sorted_weights[used:used + len(token)] = topk_weights[token, slot]
        blocks = -(-len(token) // block)
        expert_ids[used // block:used // block + blocks] = expert
        used += blocks * block
    return sorted_ids, sorted_weights, expert_ids, np.array([used, tokens], np.int32)


def shuffle_weight(w: np.ndarray, rows: int = 16, k_lanes: int = 16, elements: int = 8
                   ) -> np.ndarray:
    """aiter.ops.shuffle.shuffle_weight's (16, 16) layout for weights [..., N, K]: each
    16-row x 32-column block stored as [32 / elements column groups][16 rows][elements], so one
    lane's 16-byte load is an MFMA operand fragment (`elements` 8 for 16-bit weights, 16 for
    8-bit ones)."""
    *lead, n, k = w.shape
    per_load = elements                             # 16 bytes
    if n % rows or k % (2 * k_lanes):
        raise VendorKernelError(f"shuffle_weight needs N % {rows} == 0 and K % {2 * k_lanes} == 0,"
                                f" got N={n} K={k}")
    blocked = w.reshape(-1, n // rows, rows, k // (2 * k_lanes), 2 * k_lanes // per_load, per_load)
    return np.ascontiguousarray(blocked.transpose(0, 1, 3, 4, 2, 5)).reshape(w.shape)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _fmoe(name: str, kind: str, load: Callable[[], CodeObject], rng: np.random.Generator,
          given: dict[str, int], check: str, options: dict) -> VendorRun:
    size = _sizes({"tokens": 8, "dim": 512, "inter": 512, "experts": 4, "topk": 2}, given, name)
    tokens, dim, inter, experts, topk = (size[k] for k in
                                         ("tokens", "dim", "inter", "experts", "topk"))
    if topk > experts:
        raise VendorKernelError(f"{name}: topk={topk} exceeds experts={experts}; each token "
                                "picks topk distinct experts")
    if inter % MOE_SUB_GU:
        raise VendorKernelError(f"{name}: inter must be a multiple of {MOE_SUB_GU} (asm_fmoe.cu "
                                f"launches fmoe_b16/f16 with sub_GU={MOE_SUB_GU} intermediate "
                                f"columns per workgroup), got inter={inter}")
    if dim % 256 or dim < 512:
        raise VendorKernelError(f"{name}: dim must be a multiple of 256 and at least 512 (the "
                                f"kernel's K loop is pipelined two 256-wide slices deep), "
                                f"got dim={dim}")
    dtype = BF16 if kind == "b16" else np.float16
    x = rng.standard_normal((tokens, dim)).astype(dtype)
    w1 = (rng.standard_normal((experts, inter, dim)) / np.sqrt(dim)).astype(dtype)
    w2 = (rng.standard_normal((experts, dim, inter)) / np.sqrt(inter)).astype(dtype)
    topk_ids = np.argsort(rng.random((tokens, experts)), axis=1)[:, :topk].astype(np.int32)
    topk_weights = rng.random((tokens, topk)).astype(np.float32)
    sorted_ids, sorted_weights, expert_ids, num_valid = moe_sorting(topk_ids, topk_weights,
                                                                    experts)
    out = np.zeros((tokens, dim), np.uint16)
    # Metadata names the fourth pointer "U"; asm_fmoe.cu's KernelArgs passes num_valid_ids there.
    args: dict[str, Any] = dict(
        O=out, X=x.view(np.uint16), G=shuffle_weight(w1).view(np.uint16), U=num_valid,
        D=shuffle_weight(w2).view(np.uint16), STP=sorted_ids, SW=sorted_weights, SEP=expert_ids,
        dim=dim, hdim=inter, batch=tokens, eprt=experts, Xs=dim * 2, GUs=dim * 2, Ds=inter * 2,
        Os=dim * 2, eGUs=dim * 2 * inter, eDs=inter * 2 * dim, eGUQs=0, eDQs=0,
        eSMQs=inter * 4, topk=topk)
    run = emulate(load(), grid=(inter // MOE_SUB_GU, len(expert_ids), 1), block=256, args=args,
                  check=check, **options)
    reference = np.zeros((tokens, dim))
    xf = x.astype(np.float64)
    for slot in range(topk):
        for expert in range(experts):
            rows = np.flatnonzero(topk_ids[:, slot] == expert)
            hidden = gelu_tanh(xf[rows] @ w1[expert].astype(np.float64).T)
            reference[rows] += (topk_weights[rows, slot, None]
                                * (hidden @ w2[expert].astype(np.float64).T))
    result = out.view(dtype).astype(np.float64)
    # 16-bit intermediate and 16-bit atomic accumulation of the topk partial sums
    tolerance = (2.0 ** -6 if kind == "b16" else 2.0 ** -9) * (float(np.abs(reference).max()) + 1)
    return VendorRun(name, size, float(np.abs(result - reference).max()), tolerance, run)


def moe_routing(tokens: int, experts: int, topk: int, balanced: bool,
                rng: np.random.Generator) -> np.ndarray:
    """Each token's topk distinct experts: uniformly random (as aiter's tuner draws them), or
    `balanced`, token t taking experts t*topk .. t*topk+topk-1 (mod experts), so every expert
    gets the same count (the performance model's samples)."""
    if topk > experts:
        raise VendorKernelError(f"topk={topk} exceeds experts={experts}; each token picks topk "
                                "distinct experts")
    if balanced:
        return ((np.arange(tokens)[:, None] * topk + np.arange(topk)) % experts).astype(np.int32)
    return np.argsort(rng.random((tokens, experts)), axis=1)[:, :topk].astype(np.int32)


def stage1_topk_ids(sizes: dict[str, int], seed: int = 0) -> np.ndarray:
    """The experts each token of a stage-1 launch at `sizes` is routed to by `run_vendor` with
    `seed`, drawn without running it (the same generator sequence)."""
    rng = np.random.default_rng(seed)
    rng.standard_normal((sizes["tokens"], sizes["dim"]))   # the harness draws x first
    return moe_routing(sizes["tokens"], sizes["experts"], sizes["topk"],
                       bool(sizes.get("balanced", 0)), _stage1_routing_rng(rng))


def stage1_routing(sizes: dict[str, int], tile_m: int, seed: int = 0) -> tuple[int, int]:
    """A stage-1 launch at `sizes` under `run_vendor`'s routing (same seed), counted without
    running it: the sorted-token blocks holding tokens (the sum over experts of ceil(tokens
    routed / tile_m), the grid rows that work) and the experts routed to."""
    counts = np.bincount(stage1_topk_ids(sizes, seed).ravel(), minlength=sizes["experts"])
    return int(sum(-(-int(c) // tile_m) for c in counts)), int(np.count_nonzero(counts))


def _stage1_routing_rng(rng: np.random.Generator) -> np.random.Generator:
    """The routing's own generator, seeded from the run's, so that counting blocks does not
    have to draw the (large) weights first."""
    return np.random.default_rng(int(rng.integers(1 << 31)))


def _fmoe_stage1(name: str, doweight: bool, tile_m: int, tile_n: int,
                 load: Callable[[], CodeObject], rng: np.random.Generator,
                 given: dict[str, int], check: str, options: dict) -> VendorRun:
    """aiter's asm_moe_2stage.cu launch of a stage-1 fp8 kernel: x quantised per token, w1
    ([experts, 2 inter, dim], gate rows then up rows) per output channel, both to e4m3fnuz with
    the scale amax / 240; weights in shuffle_weight's (16, 16) layout; grid (inter / tile_n,
    sorted blocks, 1), 256 work-items. `gelu` = 1 picks GELU (tanh) instead of SiLU;
    `balanced` = 1 routes round-robin (see moe_routing)."""
    flags = {k: given.get(k, 0) for k in ("gelu", "balanced")}
    if any(v not in (0, 1) for v in flags.values()):
        raise VendorKernelError(f"{name}: gelu and balanced are 0 or 1, got {flags}")
    size = _sizes({"tokens": 8, "dim": 512, "inter": 256, "experts": 4, "topk": 2},
                  {k: v for k, v in given.items() if k not in flags}, name)
    tokens, dim, inter, experts, topk = (size[k] for k in
                                         ("tokens", "dim", "inter", "experts", "topk"))
    if inter % tile_n:
        raise VendorKernelError(f"{name}: inter must be a multiple of the kernel's tile_n "
                                f"{tile_n} (asm_moe_2stage.cu checks inter_dim % tile_N), "
                                f"got inter={inter}")
    if dim % 256:
        raise VendorKernelError(f"{name}: dim must be a multiple of 256, got dim={dim}")
    x = rng.standard_normal((tokens, dim)).astype(np.float32)
    routing = _stage1_routing_rng(rng)
    topk_ids = moe_routing(tokens, experts, topk, bool(flags["balanced"]), routing)
    topk_weights = routing.random((tokens, topk)).astype(np.float32)
    w1 = (rng.standard_normal((experts, 2 * inter, dim)) / np.sqrt(dim)).astype(np.float32)
    x_scale = np.abs(x).max(1, keepdims=True) / FP8_MAX
    xq = (x / x_scale).astype(FP8)
    w_scale = np.abs(w1).max(2, keepdims=True) / FP8_MAX
    wq = (w1 / w_scale).astype(FP8)
    sorted_ids, sorted_weights, expert_ids, num_valid = moe_sorting(topk_ids, topk_weights,
                                                                    experts, block=tile_m)
    out = np.zeros((tokens, topk, inter), np.uint16)
    args: dict[str, Any] = dict(
        O=out, X=xq.view(np.uint8), G=shuffle_weight(wq.view(np.uint8), elements=16),
        Xc=num_valid,
        XQ=x_scale.astype(np.float32).ravel(), GQ=w_scale.astype(np.float32).ravel(), SMQ=None,
        STP=sorted_ids, SEP=expert_ids, dim=dim, hdim=inter, batch=tokens, eprt=experts,
        Xs=dim, GUs=dim, Os=topk * inter * 2, eGUs=dim * 2 * inter, eGUQs=2 * inter * 4,
        eSMQs=inter * 4, topk=topk, splitk=0, activation=flags["gelu"])
    code = load()
    info = code.kernels[0]
    if doweight:
        # the metadata declares SW a 4-byte value, but asm_moe_2stage.cu's KernelArgs puts the
        # 8-byte pointer to the sorted routing weights there and the kernel loads it as one
        info = _pointer_arg(info, "SW")
        args["SW"] = sorted_weights
    run = emulate(code, info, grid=(inter // tile_n, len(expert_ids), 1), block=256, args=args,
                  check=check, **options)
    xd = xq.astype(np.float64) * x_scale
    wd = wq.astype(np.float64) * w_scale
    reference = np.zeros((tokens, topk, inter))
    for slot in range(topk):
        for expert in range(experts):
            rows = np.flatnonzero(topk_ids[:, slot] == expert)
            h = xd[rows] @ wd[expert].T
            if doweight:    # the routing weight scales the token's row before the activation
                h *= topk_weights[rows, slot, None]
            gate, up = h[:, :inter], h[:, inter:]
            act = gelu_tanh(gate) if flags["gelu"] else gate / (1 + np.exp(-gate))
            reference[rows, slot] = act * up
    result = out.view(BF16).astype(np.float64)
    # bf16 output (8 significant bits); the fp8 operands are exact in the reference
    tolerance = 2.0 ** -6 * (float(np.abs(reference).max()) + 1)
    return VendorRun(name, {**size, **flags}, float(np.abs(result - reference).max()), tolerance,
                     run)


def _pointer_arg(info: Any, name: str) -> Any:
    """`info` with by-value argument `name` re-declared as an 8-byte global buffer."""
    args = tuple(attrs.evolve(a, size=8, value_kind="global_buffer", address_space="global",
                              value_type="") if a.name == name else a for a in info.args)
    return attrs.evolve(info, args=args)


def i8gemm_splits(k: int, splitk: int) -> tuple[int, int]:
    """asm_gemm_a8w8.cu's K split: each split a multiple of 128 K wide, so the requested split
    count can shrink. Returns (splits, K per split)."""
    def aligned(parts: int) -> int:
        share = -(-k // parts)                       # ceil(k / parts)
        return -(-share // 128) * 128

    splits = -(-k // aligned(splitk))
    return splits, aligned(splits)


def _i8gemm(name: str, tile: int, load: Callable[[], CodeObject], rng: np.random.Generator,
            given: dict[str, int], check: str, options: dict) -> VendorRun:
    """asm_gemm_a8w8.cu's launch: int8 A [m, k] and B [n, k] (B in shuffle_weight's (32, 16)
    layout), f32 per-row and per-column scales, f32 bias, bf16 C; grid (n / 128 x splits,
    ceil(m / tile)), 256 work-items; with splits > 1 the partial tiles are added into C."""
    size = _sizes({"m": tile, "n": 128, "k": 512, "splitk": 1}, given, name)
    m, n, k = size["m"], size["n"], size["k"]
    if n % 128 or k % 128:
        raise VendorKernelError(f"{name}: n and k must be multiples of 128 (the kernel's N tile "
                                f"and K step), got n={n} k={k}")
    splits, _ = i8gemm_splits(k, size["splitk"])
    if splits == 1 and k < 384:
        # seen in the emulator: unsplit, k = 128 and 256 disagree with numpy (split K runs of
        # 256 per split agree); aiter's tuned table never launches an unsplit K below 1024
        raise VendorKernelError(f"{name}: an unsplit K below 384 is outside what this code "
                                f"object computes correctly, got k={k}")
    a = rng.integers(-127, 128, (m, k)).astype(np.int8)
    b = rng.integers(-127, 128, (n, k)).astype(np.int8)
    scale_a = (rng.random(m) / 64 + 1 / 256).astype(np.float32)
    scale_b = (rng.random(n) / 64 + 1 / 256).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    shuffled = np.ascontiguousarray(
        b.reshape(n // 32, 32, k // 32, 2, 16).transpose(0, 2, 3, 1, 4)).reshape(n, k)
    out = np.zeros((m, n), np.uint16)
    args = dict(C=out, A=a, B=shuffled, SA=scale_a, SB=scale_b, BIAS=bias, M=m, N=n, K=k, PA=k,
                PB=k, PC=n * 2, KS=splits)
    run = emulate(load(), grid=(n // 128 * splits, -(-m // tile), 1), block=256, args=args,
                  check=check, **options)
    reference = (a.astype(np.float64) @ b.astype(np.float64).T) * scale_a[:, None] \
        * scale_b[None, :] + bias[None, :]
    result = out.view(BF16).astype(np.float64)
    # bf16 output, and bf16 partial sums when the splits add into C
    tolerance = 2.0 ** -7 * splits * (float(np.abs(reference).max()) + 1)
    return VendorRun(name, {**size, "splitk": splits}, float(np.abs(result - reference).max()),
                     tolerance, run)

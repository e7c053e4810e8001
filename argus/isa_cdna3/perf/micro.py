"""Hand-written gfx942 micro-kernels whose modelled rates are checked against published peaks.

MFMA throughput (back-to-back `v_mfma_f32_32x32x8_bf16` on four accumulators), LDS bandwidth
(`ds_read_b64` conflict-free, and with every lane of a phase in one bank) and HBM streaming
(`global_load_dwordx4` over a buffer no workgroup shares). `rate` turns a Timing into the
figure the peak is stated in: the per-CU rate at the rated clock times the CU count.
"""

from __future__ import annotations

import attrs

from argus.isa_cdna3.kernel_template import kernel_source
from argus.isa_cdna3.perf.params import GpuProfile

BLOCK = 256           # four waves: one per SIMD


@attrs.frozen
class Micro:
    name: str
    source: str            # assembly text: `argus.asm.assemble(micro.source)`


def mfma(iterations: int = 8) -> Micro:
    body = "\n".join(f"  v_mfma_f32_32x32x8_bf16 a[{16 * j}:{16 * j + 15}], v[2:3], v[4:5], "
                     f"a[{16 * j}:{16 * j + 15}]" for _ in range(4) for j in range(4))
    text = f"""
  s_mov_b32 s10, {iterations}
  v_mov_b32_e32 v2, 0
  v_mov_b32_e32 v3, 0
  v_mov_b32_e32 v4, 0
  v_mov_b32_e32 v5, 0
loop:
{body}
  s_sub_u32 s10, s10, 1
  s_cmp_lg_u32 s10, 0
  s_cbranch_scc1 loop
  s_endpgm"""
    return Micro("mfma_32x32x8_bf16", kernel_source("micro_mfma", text, vgprs=8, agprs=64,
                                                      max_block=BLOCK))


def lds(*, conflicts: bool, iterations: int = 32) -> Micro:
    """ds_read_b64 at lane * 8 bytes (16 lanes cover the 32 banks), or at lane * 256 bytes (all
    16 lanes of a phase in the same two banks: a 16-way conflict)."""
    shift = 8 if conflicts else 3
    reads = "\n".join("  ds_read_b64 v[2:3], v1" for _ in range(8))
    # eight reads in flight from the previous iteration while eight more issue
    text = f"""
  v_lshlrev_b32_e32 v1, {shift}, v0
  s_mov_b32 s10, {iterations}
loop:
{reads}
  s_waitcnt lgkmcnt(8)
  s_sub_u32 s10, s10, 1
  s_cmp_lg_u32 s10, 0
  s_cbranch_scc1 loop
  s_waitcnt lgkmcnt(0)
  s_endpgm"""
    name = "lds_read_b64_conflicts" if conflicts else "lds_read_b64"
    return Micro(name, kernel_source("micro_" + name, text, vgprs=8, lds_bytes=65536,
                                     max_block=BLOCK))


def hbm(loads: int = 192, block: int = 64) -> Micro:
    """Each lane loads 16 bytes per instruction from its own part of `src`: workgroup w
    streams bytes [w * block * 16 * loads, (w + 1) * block * 16 * loads)."""
    per_wg = block * 16 * loads
    window = 48           # loads kept in flight (the vmcnt counter holds 63)
    lines = []
    for i in range(loads):
        lines.append(f"  global_load_dwordx4 v[{4 + 4 * (i % 8)}:{7 + 4 * (i % 8)}], v1, s[4:5]")
        lines.append(f"  v_add_u32_e32 v1, {block * 16:#x}, v1")
        if i >= window:
            lines.append(f"  s_waitcnt vmcnt({window})")
    text = f"""
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  s_mul_i32 s6, s2, {per_wg:#x}
  v_lshlrev_b32_e32 v1, 4, v0
  v_add_u32_e32 v1, s6, v1
  s_waitcnt lgkmcnt(0)
{chr(10).join(lines)}
  s_waitcnt vmcnt(0)
  s_endpgm"""
    return Micro("hbm_stream_dwordx4", kernel_source("micro_hbm", text, [("src", "ptr")],
                                                     vgprs=40, max_block=block))


def rate(timing, amount: float, gpu: GpuProfile) -> float:
    """`amount` (FLOPs or bytes) of the busiest CU's workgroups per second at the rated clock,
    scaled to every CU: the figure a data-sheet peak states (launch overhead and the
    power-limited clock are not part of a peak)."""
    seconds = timing.cycles_per_cu / (gpu.clock_ghz.value * 1e9)
    return amount / seconds * gpu.cus.value

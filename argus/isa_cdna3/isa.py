"""gfx942 machine facts the emulator, lowering and performance model share.

Register files and their encodings, the hazard wait-state table (LLVM GCNHazardRecognizer, gfx940
path), `s_waitcnt` counter limits and LDS geometry. One fact, one place: nothing else in Argus
re-states these numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from argus.isa_cdna3.mfma import MfmaInfo

WAVE_SIZE = 64
SGPRS = 102                  # s0..s101 addressable by a kernel
VGPRS_UNIFIED = 512          # arch VGPRs + AGPRs per lane, AGPRs start at accum_offset
ARCH_VGPRS = 256
AGPRS = 256

#: Scalar operand encodings (SSRC) of the special registers; the emulator's SGPR file is indexed
#: by these, so `s_mov_b64 exec, ...` and `s_mov_b32 s126, ...` name the same storage.
SPECIAL_SGPRS = {
    "flat_scratch_lo": 102, "flat_scratch_hi": 103, "xnack_mask_lo": 104, "xnack_mask_hi": 105,
    "vcc_lo": 106, "vcc_hi": 107, "m0": 124, "exec_lo": 126, "exec_hi": 127,
}
SPECIAL_SGPR_PAIRS = {"flat_scratch": 102, "xnack_mask": 104, "vcc": 106, "exec": 126}
# Flat-address apertures as ROCm's Linux driver sets them on gfx9: a 64-bit read gives the
# address, a 32-bit read its high dword (the aperture's "base hi").
APERTURES = {"src_shared_base": 0x1_0000 << 32, "src_shared_limit": (0x1_0000 << 32) | 0xFFFFFFFF,
             "src_private_base": 0x2_0000 << 32,
             "src_private_limit": (0x2_0000 << 32) | 0xFFFFFFFF}
TTMP_BASE = 108
SGPR_FILE = 128
VCC = 106
M0 = 124
EXEC = 126

# --- s_waitcnt (gfx9 encoding: vmcnt[3:0] | expcnt[6:4] | lgkmcnt[11:8] | vmcnt[5:4] << 14) ---
VMCNT_MAX = 63
LGKMCNT_MAX = 15
EXPCNT_MAX = 7

# Immediate offset fields of the memory encodings (largest unsigned value each holds)
MUBUF_OFFSET_MAX = 4095      # MUBUF inst_offset: 12 bits (LLVM drops a larger one silently)
DS_OFFSET_MAX = 65535        # DS offset0/offset1 together: 16 bits


def waitcnt_counters(simm16: int) -> dict[str, int]:
    """The three counters an `s_waitcnt` immediate waits for (absent fields read as maximum)."""
    return {"vmcnt": (simm16 & 0xF) | ((simm16 >> 14) & 3) << 4,
            "expcnt": (simm16 >> 4) & 7,
            "lgkmcnt": (simm16 >> 8) & 0xF}


#: V# word 3 for a raw (stride 0) 32-bit-format buffer on gfx9 (CK's
#: CK_BUFFER_RESOURCE_3RD_DWORD; AMD's gfx942 kernels `s_mov_b32 s11, 0x20000`).
BUFFER_RSRC_WORD3 = 0x00020000
#: A VGPR buffer offset no tensor's num_records reaches (< 2^31 bytes): a lane whose element lies
#: outside its tensor gets it, so its load reads 0 and its store is dropped (CK's invalid
#: element offset, 0x80000000, works the same way).
BUFFER_OFFSET_OUT_OF_RANGE = 0x80000000
#: The largest num_records the backend gives a V#: every offset from BUFFER_OFFSET_OUT_OF_RANGE
#: up (and every negative offset, read as unsigned) then lies outside the buffer.
BUFFER_RECORDS_MAX = BUFFER_OFFSET_OUT_OF_RANGE - 1

# --- constants: integers -16..64 and these floats are inline; anything else takes a literal dword
INLINE_INT_RANGE = (-16, 64)
INLINE_FLOATS = frozenset((0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0, 0.15915494))

# --- occupancy: waves a SIMD holds (LLVM AMDGPUBaseInfo getMaxWavesPerEU: 8 on gfx90a+) ---
MAX_WAVES_PER_SIMD = 8
SIMDS_PER_CU = 4
VGPR_ALLOC_GRANULE = 8       # unified VGPRs are allocated in blocks of 8 per wave


@attrs.frozen
class Occupancy:
    """How many workgroups of a kernel share a CU, and what limits it.

    `workgroups_per_cu` is 0 when one workgroup does not fit; `problem` then says why.
    `waves_per_simd` counts whole workgroups only (a CU holds a workgroup entirely or not).
    """

    waves_per_workgroup: int
    workgroups_per_cu: int
    waves_per_simd: int
    limiter: str
    vgprs_per_wave: int
    lds_per_workgroup: int
    problem: str = ""

    def to_json(self) -> dict:
        return {k: v for k, v in attrs.asdict(self).items() if k != "problem"}


def occupancy(vgprs: int, lds_bytes: int, waves_per_workgroup: int) -> Occupancy:
    """Workgroups per CU (and waves per SIMD) from registers, LDS and wave slots; the one
    occupancy rule of Argus (the lowering reports it, the performance model schedules by it)."""
    alloc = -(-max(vgprs, 1) // VGPR_ALLOC_GRANULE) * VGPR_ALLOC_GRANULE
    waves = max(1, waves_per_workgroup)
    per_simd_need = -(-waves // SIMDS_PER_CU)
    by_registers = min(MAX_WAVES_PER_SIMD, VGPRS_UNIFIED // alloc)
    limits = {"the wave slots" if by_registers == MAX_WAVES_PER_SIMD
              else f"{alloc} VGPRs per wave": by_registers // per_simd_need}
    if lds_bytes:
        limits[f"{lds_bytes} B of LDS per workgroup"] = LDS_BYTES // lds_bytes
    limiter = min(limits, key=limits.get)
    problem = ""
    if alloc > VGPRS_UNIFIED:
        problem = (f"each wave needs {alloc} VGPRs+AGPRs, a SIMD lane has {VGPRS_UNIFIED}; "
                   f"reduce register use")
    elif lds_bytes > LDS_BYTES:
        problem = (f"the workgroup needs {lds_bytes} bytes of LDS, a CU has {LDS_BYTES}; "
                   f"reduce the LDS tiles")
    elif per_simd_need > by_registers:
        problem = (f"the workgroup's {waves} waves need {per_simd_need} wave slots per SIMD but "
                   f"{alloc} VGPRs per wave leave {by_registers}; use fewer registers or a "
                   f"smaller workgroup")
    groups = 0 if problem else limits[limiter]
    return Occupancy(waves, groups, groups * per_simd_need, limiter, alloc, lds_bytes, problem)


# --- LDS ---
#: the processors whose code objects run this ISA (CDNA3): gfx942, and the gfx940/941
#: pre-production steppings LLVM still accepts
CDNA3_TARGETS = ("gfx942", "gfx941", "gfx940")
LDS_BYTES = 65536            # per workgroup and per CU on gfx942
LDS_BANKS = 32
LDS_BANK_BYTES = 4
LDS_PHASE_BYTES = 128        # bytes serviced per phase: lanes per phase = 128 / access width

# --- memory hierarchy ---
CACHE_LINE_SHIFT = 7         # 128-byte L2 lines (AMD CDNA3 white paper, L2 section)


def lds_phases(access_bytes: int, *, read: bool) -> tuple[tuple[int, ...], ...]:
    """The lane groups one LDS access is serviced in (lanes of a group share a cycle).

    Contiguous groups of 128 / width lanes (CK documents 8 x 8 lanes for ds_write_b128). For
    ds_read_b128 no gfx942 table is published; the groups {4q..4q+3, 4q+16..4q+19} are inferred:
    they make AMD's own bf16 GEMM (aiter) conflict-free, the contiguous ones would not, and
    HipKittens measured similar non-contiguous groups on gfx950.
    """
    per_phase = max(1, min(WAVE_SIZE, LDS_PHASE_BYTES // max(access_bytes, LDS_BANK_BYTES)))
    if read and access_bytes == 16:
        return tuple(tuple(range(q, q + 4)) + tuple(range(q + 16, q + 20))
                     for q in (0, 4, 8, 12, 32, 36, 40, 44))
    return tuple(tuple(range(start, start + per_phase))
                 for start in range(0, WAVE_SIZE, per_phase))


# --- hazards, in wait states (one per issued instruction; `s_nop N` provides N + 1) ---
VALU_WRITE_VGPR_TO_MFMA_READ = 2
VALU_WRITE_EXEC_TO_MFMA = 4
#: A DPP instruction reading a VGPR a VALU wrote, or running after a VALU write of EXEC (gfx9;
#: LLVM's GCNHazardRecognizer::checkDPPHazards: DppVgprWaitStates, DppExecWaitStates).
VALU_WRITE_VGPR_TO_DPP_READ = 2
VALU_WRITE_EXEC_TO_DPP = 5
#: How far back (in wait states) a VALU write can still matter to a rule above.
VALU_WRITE_HORIZON = max(VALU_WRITE_VGPR_TO_MFMA_READ, VALU_WRITE_EXEC_TO_MFMA,
                         VALU_WRITE_VGPR_TO_DPP_READ, VALU_WRITE_EXEC_TO_DPP)
#: An SALU write of M0 read by an LDS DMA (`buffer_load_dword ... lds`) on GFX9 (LLVM's
#: GCNHazardRecognizer: hasReadM0LdsDmaHazard, SMovRelWaitStates).
SALU_WRITE_M0_TO_LDS_DMA = 1
SNOP_MAX = 15
#: `s_sleep N` sleeps about 64 x N clocks (CDNA3 ISA, SOPP s_sleep: "approximately 64*SIMM16[6:0]")
SLEEP_CLOCKS = 64


def nop_wait_states(opcode: str, operands: Sequence = ()) -> int:
    """Wait states one instruction provides: `s_nop N` gives N + 1, anything else 1 (operands
    are immediates, as `Instruction.operands` or the lowering's `MInst.operands` hold them)."""
    if opcode == "s_nop" and operands:
        return int(getattr(operands[0], "value", operands[0])) + 1
    return 1


def mfma_to_read_wait_states(producer: MfmaInfo) -> int:
    """Wait states between an MFMA and a VALU/VMEM/LDS read (or WAW) of its result, which is
    also what an MFMA reading the result as SrcA/SrcB needs (XDL: passes + 3, else passes + 2)."""
    return producer.passes + (3 if producer.is_xdl else 2)


def mfma_to_srcc_wait_states(producer: MfmaInfo, *, same_registers: bool) -> int:
    """Wait states before an MFMA may read `producer`'s result as SrcC (the accumulator).

    Reading exactly the registers just written is forwarded (0), except after a 2-pass 4x4
    XDL producer (2). Partially overlapping registers need passes + 1 (XDL) or passes (other).
    """
    if same_registers:
        return 2 if producer.is_xdl and producer.passes == 2 else 0
    return producer.passes + (1 if producer.is_xdl else 0)

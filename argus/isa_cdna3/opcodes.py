"""gfx942 opcodes as data: one row per opcode with its statistics class, issuing unit, `s_waitcnt`
counter, bytes moved, status flags written implicitly, issue cycles and the source of the facts.

Rows are written below as families and expanded to one row per opcode at import. `row(opcode)`
finds the row of an opcode as LLVM prints it (encoding suffixes `_e32`, `_e64`, `_vop3`, `_dpp`,
`_sdwa` stripped); `classify` also names the class of a gfx942 opcode without a row (what the
statistics of vendor code need) from `FAMILIES`, the same facts at the grain of a name prefix.
The rows are exactly the opcodes the emulator executes; tests/test_opcodes.py checks them against
LLVM's assembler (each row assembles for gfx942 in an encoding of its unit) and the emulator.
"""

from __future__ import annotations

import enum

import attrs

from argus.isa_cdna3.mfma import MFMA

#: `s_waitcnt` counters (the fields `vmcnt` and `lgkmcnt`; limits in isa.VMCNT_MAX/LGKMCNT_MAX).
VMCNT, LGKMCNT = "vm", "lgkm"
COUNTERS = (VMCNT, LGKMCNT)

#: Status registers an instruction writes without naming them.
SCC, VCC, EXEC, M0 = "scc", "vcc", "exec", "m0"

#: Statistics classes, in the order reports print them.
CLASSES = ("MFMA", "VALU", "SALU", "SMEM", "DS read", "DS write", "DS other",
           "buffer load", "buffer load to LDS", "buffer store", "buffer atomic",
           "global load", "global store", "global atomic", "flat/scratch",
           "s_waitcnt", "s_barrier", "s_nop", "branch", "other")


class Unit(enum.Enum):
    """The part of the compute unit that issues an instruction."""

    SALU = "salu"
    SMEM = "smem"          # scalar memory (constant cache)
    VALU = "valu"
    MFMA = "mfma"          # the SIMD's matrix core
    VMEM = "vmem"          # vector memory: buffer_*, global_*
    LDS = "lds"            # ds_*
    BRANCH = "branch"
    SEQUENCER = "seq"      # handled by the wave's instruction sequencer: waits, barriers, nops


#: Where the facts come from. CDNA3 ISA = AMD "Instinct MI300 Instruction Set Architecture"
#: reference guide (2024); numbers in parentheses are its chapters.
ISA_SALU = "CDNA3 ISA (5 Scalar ALU): SCC as each opcode's description sets it"
ISA_SMEM = "CDNA3 ISA (6 Scalar Memory): lgkmcnt, returned out of order"
ISA_VALU = ("CDNA3 ISA (7 Vector ALU); wave64 on a 16-lane SIMD = 4 cycles "
            "(shared/docs/cdna3-facts.md)")
ISA_VALU_QUARTER = "CDNA3 ISA (7); transcendental and 32-bit integer multiply run at quarter rate"
ISA_VOPC = "CDNA3 ISA (7.4 VOPC): v_cmp writes VCC (or an SGPR pair), v_cmpx also EXEC"
ISA_CARRY = "CDNA3 ISA (7): carry-out to VCC (or an SGPR pair)"
ISA_MFMA = "MFMA catalogue (mfma.py: AMD matrix instruction calculator -a cdna3), cycles per wave"
ISA_LDS = "CDNA3 ISA (11 LDS): lgkmcnt, returned in order; bytes per lane"
ISA_VMEM = "CDNA3 ISA (9 MUBUF, 10 FLAT): vmcnt for loads, stores and atomics alike on gfx9"
ISA_SOPP = "CDNA3 ISA (5.8 SOPP / program control)"
ISSUE = 4   # a wave issues at most one instruction per 4 cycles (shared/docs/cdna3-facts.md)


@attrs.frozen
class Opcode:
    """One gfx942 opcode (LLVM's spelling, without encoding suffix)."""

    name: str
    cls: str                          # one of CLASSES
    unit: Unit
    counter: str | None = None        # VMCNT, LGKMCNT or None
    access: str = ""                  # memory: "load", "store" or "atomic"
    bytes: int = 0                    # moved per lane (vector memory, LDS) or per wave (SMEM)
    flags: frozenset = frozenset()    # SCC, VCC, EXEC, M0 written implicitly
    issue_cycles: int = ISSUE         # cycles the unit is busy with one wave's instruction
    source: str = ""

    @property
    def is_vector(self) -> bool:
        """Executes per lane under EXEC (what `s_setvskip` suppresses): VALU, MFMA, VMEM, LDS."""
        return self.unit in (Unit.VALU, Unit.MFMA, Unit.VMEM, Unit.LDS)



_ROWS: list[Opcode] = []


def _add(names, cls, unit, source, **facts) -> None:
    for name in names:
        _ROWS.append(Opcode(name, cls, unit, source=source, **facts))


def _scc(names, writes_scc) -> None:
    for name in names:
        _add([name], "SALU", Unit.SALU, ISA_SALU,
             flags=frozenset({SCC}) if name in writes_scc else frozenset())


# --- SALU (SOP2, SOP1, SOPC, SOPK) ----------------------------------------------------------
_LOGIC = [f"s_{op}_{w}" for op in ("and", "or", "xor", "andn2", "orn2", "nand", "nor", "xnor")
          for w in ("b32", "b64")]
_SOP2_SCC = ["s_add_u32", "s_addc_u32", "s_sub_u32", "s_subb_u32", "s_add_i32", "s_sub_i32",
             "s_min_i32", "s_max_i32", "s_min_u32", "s_max_u32", "s_lshl_b32", "s_lshr_b32",
             "s_ashr_i32", "s_lshl_b64", "s_lshr_b64", "s_ashr_i64", "s_bfe_u32", "s_bfe_i32",
             "s_lshl1_add_u32", "s_lshl2_add_u32", "s_lshl3_add_u32", "s_lshl4_add_u32",
             "s_absdiff_i32", *_LOGIC]
_SOP2_NO_SCC = ["s_mul_i32", "s_mul_hi_u32", "s_mul_hi_i32", "s_cselect_b32", "s_cselect_b64",
                "s_bfm_b32", "s_bfm_b64"]
_SOP1_SCC = ["s_not_b32", "s_not_b64", "s_bcnt1_i32_b32", "s_bcnt1_i32_b64", "s_abs_i32"]
_SOP1_NO_SCC = ["s_mov_b32", "s_mov_b64", "s_brev_b32", "s_ff1_i32_b32", "s_ff1_i32_b64",
                "s_sext_i32_i8", "s_sext_i32_i16", "s_cmov_b32", "s_cmov_b64"]
_SOPC = ([f"s_cmp_{c}_{t}" for c in ("eq", "lg", "lt", "le", "gt", "ge") for t in ("i32", "u32")]
         + ["s_cmp_eq_u64", "s_cmp_lg_u64", "s_bitcmp0_b32", "s_bitcmp1_b32"])
_SOPK_SCC = ["s_addk_i32"] + [f"s_cmpk_{c}_{t}" for c in ("eq", "lg", "lt", "le", "gt", "ge")
                              for t in ("i32", "u32")]
_ALL_SCC = set(_SOP2_SCC + _SOP1_SCC + _SOPC + _SOPK_SCC)
_scc(_SOP2_SCC + _SOP2_NO_SCC + _SOP1_SCC + _SOP1_NO_SCC + _SOPC + _SOPK_SCC
     + ["s_movk_i32", "s_mulk_i32"], _ALL_SCC)
_add([f"s_{op}_saveexec_b64" for op in ("and", "or", "xor", "andn2", "orn2", "nand", "nor")],
     "SALU", Unit.SALU, ISA_SALU + "; saveexec: EXEC = op(S0, EXEC), SCC = EXEC != 0",
     flags=frozenset({SCC, EXEC}))
_add(["s_set_gpr_idx_on"], "SALU", Unit.SALU, ISA_SALU + "; M0 holds the index and mode",
     flags=frozenset({M0}))
_add(["s_set_gpr_idx_off", "s_setvskip", "s_setreg_imm32_b32"], "SALU", Unit.SALU, ISA_SALU)

# --- program control (SOPP) -----------------------------------------------------------------
_add(["s_branch", "s_cbranch_scc0", "s_cbranch_scc1", "s_cbranch_vccz", "s_cbranch_vccnz",
      "s_cbranch_execz", "s_cbranch_execnz"], "branch", Unit.BRANCH, ISA_SOPP)
_add(["s_waitcnt"], "s_waitcnt", Unit.SEQUENCER, ISA_SOPP)
_add(["s_barrier"], "s_barrier", Unit.SEQUENCER, ISA_SOPP)
_add(["s_nop"], "s_nop", Unit.SEQUENCER, ISA_SOPP + "; s_nop N gives N + 1 wait states")
_add(["s_endpgm", "s_sethalt", "s_setprio", "s_sleep", "s_icache_inv"], "other",
     Unit.SEQUENCER, ISA_SOPP)
_add(["s_ttracedata"], "SALU", Unit.SEQUENCER, ISA_SOPP)

# --- scalar memory --------------------------------------------------------------------------
_DWORDS = {"dword": 4, "dwordx2": 8, "dwordx3": 12, "dwordx4": 16, "dwordx8": 32, "dwordx16": 64}
for _kind in ("dword", "dwordx2", "dwordx4", "dwordx8", "dwordx16"):
    _add([f"s_load_{_kind}", f"s_buffer_load_{_kind}"], "SMEM", Unit.SMEM, ISA_SMEM,
         counter=LGKMCNT, access="load", bytes=_DWORDS[_kind])
for _kind in ("dword", "dwordx2", "dwordx4"):
    _add([f"s_store_{_kind}"], "SMEM", Unit.SMEM, ISA_SMEM, counter=LGKMCNT, access="store",
         bytes=_DWORDS[_kind])
_add([f"s_atomic_{op}" for op in ("add", "sub", "swap", "and", "or", "xor", "umin", "umax",
                                  "inc", "dec")],
     "SMEM", Unit.SMEM, ISA_SMEM, counter=LGKMCNT, access="atomic", bytes=4)
_add(["s_dcache_wb", "s_dcache_inv"], "SMEM", Unit.SMEM, ISA_SMEM)

# --- VALU -----------------------------------------------------------------------------------
_QUARTER = ["v_exp_f32", "v_log_f32", "v_rcp_f32", "v_rcp_iflag_f32", "v_rsq_f32", "v_sqrt_f32",
            "v_mul_lo_u32", "v_mul_hi_u32", "v_mul_hi_i32", "v_mad_u64_u32", "v_mad_i64_i32"]
_add(_QUARTER, "VALU", Unit.VALU, ISA_VALU_QUARTER, issue_cycles=4 * ISSUE)
_add(["v_nop", "v_mov_b32", "v_not_b32", "v_bfrev_b32", "v_add_u32", "v_sub_u32", "v_subrev_u32",
      "v_add_i32", "v_sub_i32", "v_add3_u32", "v_lshl_add_u32", "v_add_lshl_u32",
      "v_lshl_or_b32", "v_and_or_b32", "v_or3_b32", "v_xad_u32", "v_and_b32", "v_or_b32",
      "v_xor_b32", "v_lshlrev_b32", "v_lshrrev_b32", "v_ashrrev_i32", "v_mul_u32_u24",
      "v_mul_hi_u32_u24", "v_mul_i32_i24", "v_mad_u32_u24", "v_mad_i32_i24", "v_min_u32",
      "v_max_u32", "v_min_i32", "v_max_i32", "v_min3_u32", "v_max3_u32", "v_min3_i32",
      "v_max3_i32", "v_bfe_u32", "v_bfe_i32", "v_bfi_b32", "v_alignbit_b32", "v_alignbyte_b32",
      "v_perm_b32", "v_bcnt_u32_b32", "v_cvt_f32_u32", "v_cvt_f32_i32", "v_cvt_u32_f32",
      "v_cvt_i32_f32", "v_cvt_f16_f32", "v_cvt_f32_f16", "v_cvt_f32_ubyte0", "v_cvt_f32_ubyte1",
      "v_cvt_f32_ubyte2", "v_cvt_f32_ubyte3", "v_cvt_off_f32_i4", "v_pack_b32_f16",
      "v_cvt_pkrtz_f16_f32", "v_add_f32", "v_sub_f32", "v_subrev_f32", "v_mul_f32", "v_max_f32",
      "v_min_f32", "v_max3_f32", "v_min3_f32", "v_med3_f32", "v_fma_f32", "v_fmac_f32",
      "v_trunc_f32", "v_floor_f32", "v_ceil_f32", "v_rndne_f32", "v_fract_f32",
      "v_pk_add_f32", "v_pk_mul_f32", "v_pk_fma_f32", "v_mov_b64", "v_pk_mov_b32",
      "v_lshl_add_u64", "v_cndmask_b32", "v_readfirstlane_b32", "v_readlane_b32",
      "v_writelane_b32", "v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32", "v_accvgpr_read_b32",
      "v_accvgpr_write_b32", "v_accvgpr_mov_b32", "v_cvt_pk_fp8_f32", "v_cvt_pk_bf8_f32",
      "v_cvt_f32_fp8", "v_cvt_f32_bf8", "v_cvt_pk_f32_fp8", "v_cvt_pk_f32_bf8"],
     "VALU", Unit.VALU, ISA_VALU)
_add(["v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_addc_co_u32", "v_subb_co_u32",
      "v_subbrev_co_u32"], "VALU", Unit.VALU, ISA_CARRY, flags=frozenset({VCC}))
# VOPC, LLVM's gfx9 compare set: floats spell not-equal `lg`, integers `ne`; the emulator does not
# run the float always-true `tru`.
_FLOAT_CMP = ("f", "lt", "eq", "le", "gt", "lg", "ge", "o", "u", "nge", "nlg", "ngt", "nle",
              "neq", "nlt")
_INT_CMP = ("f", "lt", "eq", "le", "gt", "ne", "ge", "t")
for _x, _flags in (("cmp", frozenset({VCC})), ("cmpx", frozenset({VCC, EXEC}))):
    _add([f"v_{_x}_{c}_{t}" for t in ("f16", "f32", "f64") for c in _FLOAT_CMP]
         + [f"v_{_x}_{c}_{t}" for t in ("i32", "u32", "i64", "u64") for c in _INT_CMP],
         "VALU", Unit.VALU, ISA_VOPC, flags=_flags)

# --- MFMA -----------------------------------------------------------------------------------
for _info in MFMA.values():
    _add([_info.name], "MFMA", Unit.MFMA, ISA_MFMA, issue_cycles=_info.cycles)

# --- LDS ------------------------------------------------------------------------------------
_LDS_BYTES = {"b8": 1, "b16": 2, "b32": 4, "b64": 8, "b96": 12, "b128": 16, "u8": 1, "i8": 1,
              "u16": 2, "i16": 2}
_add([f"ds_read_{k}" for k in ("b32", "b64", "b96", "b128", "u8", "i8", "u16", "i16")],
     "DS read", Unit.LDS, ISA_LDS, counter=LGKMCNT, access="load")
_add([f"ds_write_{k}" for k in ("b8", "b16", "b32", "b64", "b96", "b128")],
     "DS write", Unit.LDS, ISA_LDS, counter=LGKMCNT, access="store")
_add([f"ds_read2{st}_{k}" for st in ("", "st64") for k in ("b32", "b64")],
     "DS read", Unit.LDS, ISA_LDS + "; two addresses", counter=LGKMCNT, access="load")
_add([f"ds_write2{st}_{k}" for st in ("", "st64") for k in ("b32", "b64")],
     "DS write", Unit.LDS, ISA_LDS + "; two addresses", counter=LGKMCNT, access="store")
_add(["ds_bpermute_b32", "ds_permute_b32"], "DS other", Unit.LDS,
     ISA_LDS + "; lane permutes through the LDS crossbar, no LDS memory", counter=LGKMCNT,
     access="load", bytes=4)
_add(["ds_swizzle_b32"], "DS other", Unit.LDS,
     ISA_LDS + "; lanes exchange by the offset's pattern (lanemaps.py), no LDS memory",
     counter=LGKMCNT, access="load", bytes=4)

# --- vector memory --------------------------------------------------------------------------
_VMEM_BYTES = {**_DWORDS, "ubyte": 1, "sbyte": 1, "ushort": 2, "sshort": 2, "byte": 1,
               "short": 2}
for _seg in ("buffer", "global"):
    for _kind in ("dword", "dwordx2", "dwordx3", "dwordx4", "ubyte", "sbyte", "ushort", "sshort"):
        _add([f"{_seg}_load_{_kind}"], f"{_seg} load", Unit.VMEM, ISA_VMEM, counter=VMCNT,
             access="load", bytes=_VMEM_BYTES[_kind])
    for _kind in ("dword", "dwordx2", "dwordx3", "dwordx4", "byte", "short"):
        _add([f"{_seg}_store_{_kind}"], f"{_seg} store", Unit.VMEM, ISA_VMEM, counter=VMCNT,
             access="store", bytes=_VMEM_BYTES[_kind])
    # `_atomic_add` is the 32-bit integer add; gfx942 has no MUBUF pk_add_bf16 (LLVM: gfx950)
    _add([f"{_seg}_atomic_add", f"{_seg}_atomic_add_f32", f"{_seg}_atomic_pk_add_f16"]
         + (["global_atomic_pk_add_bf16"] if _seg == "global" else []),
         f"{_seg} atomic", Unit.VMEM, ISA_VMEM, counter=VMCNT, access="atomic", bytes=4)
_add(["global_load_lds_dword"], "global load", Unit.VMEM,
     ISA_VMEM + "; the dword lands in LDS at M0", counter=VMCNT, access="load", bytes=4)
_add(["buffer_wbinvl1", "buffer_wbinvl1_vol", "buffer_inv", "buffer_wbl2"], "other", Unit.VMEM,
     ISA_VMEM + "; cache maintenance: moves no data, tracked by no counter (as in LLVM's "
     "SIInsertWaitcnts)")


def _bytes(row: Opcode) -> Opcode:
    """LDS sizes come from the name's width suffix (ds_read2 moves two of them)."""
    if row.unit is Unit.LDS and not row.bytes:
        width = _LDS_BYTES[row.name.rsplit("_", 1)[1]]
        return attrs.evolve(row, bytes=width * (2 if row.name.startswith(("ds_read2",
                                                                         "ds_write2")) else 1))
    return row


OPCODES: dict[str, Opcode] = {}
for _row in map(_bytes, _ROWS):
    if _row.name in OPCODES:
        raise ValueError(f"opcode table lists {_row.name} twice")
    OPCODES[_row.name] = _row

#: Class, unit and counter of opcodes without a row, by name prefix (first match wins): the
#: statistics of vendor code meet opcodes the emulator does not execute.
FAMILIES: tuple[tuple[tuple[str, ...], str, Unit, str | None], ...] = (
    (("v_mfma", "v_smfmac"), "MFMA", Unit.MFMA, None),
    (("v_",), "VALU", Unit.VALU, None),
    (("s_branch", "s_cbranch", "s_setpc", "s_swappc", "s_call"), "branch", Unit.BRANCH, None),
    (("s_load_", "s_store_", "s_buffer_", "s_atomic_", "s_scratch_"), "SMEM", Unit.SMEM,
     LGKMCNT),
    (("s_dcache_", "s_memtime", "s_memrealtime"), "SMEM", Unit.SMEM, None),
    (("s_endpgm", "s_code_end", "s_sendmsg", "s_trap", "s_sethalt", "s_icache_inv",
      "s_setprio", "s_sleep"), "other", Unit.SEQUENCER, None),
    (("s_",), "SALU", Unit.SALU, None),
    (("ds_read", "ds_load"), "DS read", Unit.LDS, LGKMCNT),
    (("ds_write", "ds_store"), "DS write", Unit.LDS, LGKMCNT),
    (("ds_",), "DS other", Unit.LDS, LGKMCNT),
    (("buffer_atomic",), "buffer atomic", Unit.VMEM, VMCNT),
    (("buffer_load",), "buffer load", Unit.VMEM, VMCNT),
    (("buffer_store",), "buffer store", Unit.VMEM, VMCNT),
    (("global_atomic",), "global atomic", Unit.VMEM, VMCNT),
    (("global_load",), "global load", Unit.VMEM, VMCNT),
    (("global_store",), "global store", Unit.VMEM, VMCNT),
    (("flat_", "scratch_"), "flat/scratch", Unit.VMEM, VMCNT),
)

_SUFFIXES = ("_e32", "_e64", "_vop3", "_dpp", "_sdwa")


def base_name(opcode: str) -> str:
    """The opcode without LLVM's encoding suffix (`v_add_f32_e32` -> `v_add_f32`)."""
    for suffix in _SUFFIXES:
        if opcode.endswith(suffix):
            return opcode[: -len(suffix)]
    return opcode


def row(opcode: str) -> Opcode | None:
    """The row of `opcode` (LLVM's spelling, with or without encoding suffix), or None."""
    found = OPCODES.get(opcode)
    return found if found is not None else OPCODES.get(base_name(opcode))


def _family(opcode: str) -> tuple[str, Unit, str | None]:
    for prefixes, cls, unit, counter in FAMILIES:
        if opcode.startswith(prefixes):
            return cls, unit, counter
    return "other", Unit.SEQUENCER, None


def classify(opcode: str, *, to_lds: bool = False) -> str:
    """The statistics class of an opcode (one of CLASSES); `to_lds` for a buffer/global load
    with the `lds` modifier (its data goes to LDS, not to registers)."""
    found = row(opcode)
    cls = found.cls if found is not None else _family(opcode)[0]
    return "buffer load to LDS" if to_lds and cls in ("buffer load", "global load") else cls


#: Classes of writes a workgroup barrier must see retired so that the other waves read them:
#: the GFX942 memory model orders neither LDS operations nor vector memory between waves
#: (tgsplit may put them on other CUs), so LLVM puts `s_waitcnt lgkmcnt/vmcnt` before the
#: `s_barrier` of a release. The backend's wait pass inserts those waits and the strict
#: emulator reports a barrier reached with one in flight.
BARRIER_RELEASES = ("DS write", "buffer store", "global store", "buffer atomic",
                    "global atomic")


def counter(opcode: str) -> str | None:
    """The `s_waitcnt` counter that tracks the opcode's completion (VMCNT, LGKMCNT) or None."""
    found = row(opcode)
    return found.counter if found is not None else _family(opcode)[2]


def unit(opcode: str) -> Unit:
    found = row(opcode)
    return found.unit if found is not None else _family(opcode)[1]

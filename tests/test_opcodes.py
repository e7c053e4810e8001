"""The opcode table (isa_cdna3/opcodes.py) against LLVM's assembler and the emulator.

Every row must assemble for gfx942 (llvm-mc-19) in an encoding of its unit, with data registers
as wide as its bytes; every row must compile to an emulator executor, and every opcode the
emulator's dispatch tables name that exists on gfx942 must have a row. SCC, as the table states
it, must be what the emulator's SALU functions write; classes must agree with the prefix
families used for opcodes without a row.
"""

from __future__ import annotations

import functools
import re
import subprocess

import numpy as np
import pytest

from argus.asm.disasm import decode_fields
from argus.asm.toolchain import ToolchainError, find_toolchain
from argus.isa_cdna3 import opcodes
from argus.isa_cdna3.emu import semantics
from argus.isa_cdna3.instruction import Instruction
from argus.isa_cdna3.mfma import MFMA
from argus.isa_cdna3.opcodes import OPCODES, SCC, VCC, Unit


def _regs(file: str, first: int, count: int) -> str:
    return f"{file}{first}" if count == 1 else f"{file}[{first}:{first + count - 1}]"


_SCALAR = ["{op} s0, s1, s2", "{op} s[0:1], s[2:3], s[4:5]", "{op} s[0:1], s[2:3], s4",
           "{op} s[0:1], s2, s3", "{op} s0, s[2:3]", "{op} s0, s1", "{op} s[0:1], s[2:3]",
           "{op} s0, 0x1", "{op} s0, s1 gpr_idx(SRC0)", "{op} s2, gpr_idx(SRC0)",
           "{op} hwreg(HW_REG_MODE, 0, 1), 0x0", "{op} lbl", "{op} 0", "{op}"]
_VECTOR = ["{op} vcc, v1, v2", "{op} vcc, v[2:3], v[4:5]", "{op} v0, vcc, v1, v2",
           "{op} v0, vcc, v1, v2, vcc", "{op} v0, v1, v2, vcc", "{op}", "{op} v0, v1",
           "{op} v0, v1, v2", "{op} v0, v1, v2, v3", "{op} v[0:1], v[2:3]",
           "{op} v[0:1], v[2:3], v[4:5]", "{op} v[0:1], v[2:3], v[4:5], v[6:7]",
           "{op} v[0:1], v2", "{op} v[0:1], s[2:3], v2, v3, v[4:5]",
           "{op} v[0:1], v[2:3], 1, v[4:5]", "{op} s0, v1", "{op} s0, v1, s2", "{op} v0, s1, 2",
           "{op} v0, a1", "{op} a0, v1", "{op} a0, a1"]
_SMEM = [f"{{op}} {dst}, {base}, 0x0" for dst in ("s0", "s[0:1]", "s[0:3]", "s[0:7]", "s[0:15]")
         for base in ("s[2:3]", "s[4:7]")] + ["{op}"]
_LDS = ["{op} v0, v1, v2", "{op} v1, v2, v3 offset1:1", "{op} v1, v[2:3], v[4:5] offset1:1"] + [
    f"{{op}} {_regs('v', 0, n)}, v8{mod}" for n in (1, 2, 3, 4) for mod in ("", " offset1:1")] + [
    f"{{op}} v8, {_regs('v', 0, n)}" for n in (1, 2, 3, 4)]
_VMEM = ([f"{{op}} {_regs('v', 0, n)}, off, s[4:7], 0" for n in (1, 2, 3, 4)]
         + [f"{{op}} {_regs('v', 0, n)}, v[8:9], off" for n in (1, 2, 3, 4)]
         + [f"{{op}} v[8:9], {_regs('v', 0, n)}, off" for n in (1, 2, 3, 4)]
         + ["{op} v[8:9], off", "{op}"])


def _templates(name: str) -> list[str]:
    if name in MFMA:
        info = MFMA[name]
        a, b, c = info.a_regs, info.b_regs, info.c_regs
        acc = _regs("a", 0, c)
        tail = [f"{_regs('v', a + b, 1)}"] if info.sparse else [acc]
        return [", ".join([f"{name} {acc}", _regs("v", 0, a), _regs("v", a, b), *tail])]
    found = opcodes.row(name)
    unit = found.unit if found is not None else opcodes.unit(name)
    pool = {Unit.SMEM: _SMEM, Unit.LDS: _LDS, Unit.VMEM: _VMEM, Unit.VALU: _VECTOR,
            Unit.MFMA: _VECTOR}.get(unit, _SCALAR)
    return [t.format(op=name) for t in pool]


def _encoding_family(word: int) -> str:
    """The GFX9 encoding format of an instruction's first dword."""
    if word >> 30 == 0b10:
        return {0x17D: "SOP1", 0x17E: "SOPC", 0x17F: "SOPP"}.get(
            word >> 23, "SOPK" if word >> 28 == 0b1011 else "SOP2")
    if word >> 31 == 0:
        return {0x3F: "VOP1", 0x3E: "VOPC"}.get(word >> 25, "VOP2")
    top = word >> 26
    if top == 0b110100:
        return "VOP3P" if word >> 23 == 0x1A7 else "VOP3"     # MFMA and v_accvgpr: VOP3P
    return {0b110000: "SMEM", 0b110110: "DS", 0b110111: "FLAT", 0b111000: "MUBUF"}.get(
        top, f"unknown 0x{word:08x}")


#: The encodings each unit's instructions may have.
FORMATS = {Unit.SALU: {"SOP1", "SOP2", "SOPC", "SOPK", "SOPP"}, Unit.SMEM: {"SMEM"},
           Unit.VALU: {"VOP1", "VOP2", "VOPC", "VOP3", "VOP3P"}, Unit.MFMA: {"VOP3P"},
           Unit.VMEM: {"MUBUF", "FLAT"}, Unit.LDS: {"DS"}, Unit.BRANCH: {"SOPP"},
           Unit.SEQUENCER: {"SOPP"}}
_LINE = re.compile(r"^\s+(\S.*?)\s*;\s*encoding: \[([^\]]*)\]")


def _emulator_names() -> set[str]:
    """Every opcode the emulator's dispatch names; the compare family as all its spellings."""
    names = semantics.implemented_opcodes()
    return names | {f"v_{x}_{c}_{t}" for x in ("cmp", "cmpx") for c in semantics.COMPARES
                    for t in semantics.COMPARE_TYPES}


@functools.cache
def _samples() -> dict[str, Instruction]:
    """For every opcode of the table or the emulator: LLVM's first accepted spelling, decoded."""
    try:
        mc = find_toolchain().mc
    except ToolchainError as err:
        pytest.skip(str(err))
    names = sorted(set(OPCODES) | _emulator_names())
    lines, owner = ["lbl:"], [None]
    for name in names:
        for line in _templates(name):
            lines.append(line)
            owner.append(name)
    done = subprocess.run([str(mc), "-arch=amdgcn", "-mcpu=gfx942", "-show-encoding"],
                          input="\n".join(lines) + "\n", capture_output=True, text=True,
                          timeout=120)
    failed = {int(n) for n in re.findall(r"^<stdin>:(\d+):\d+: error", done.stderr, re.M)}
    accepted = [i for i in range(2, len(lines) + 1) if i not in failed]
    printed = [m for m in map(_LINE.match, done.stdout.splitlines()) if m]
    assert len(printed) == len(accepted), "llvm-mc output does not line up with its input"
    samples: dict[str, Instruction] = {}
    for number, match in zip(accepted, printed):
        name = owner[number - 1]
        if name in samples:
            continue
        raw = bytes(int(b, 16) if b.startswith("0x") else 0 for b in match.group(2).split(","))
        opcode, operands, modifiers = decode_fields(match.group(1), raw)
        samples[name] = Instruction(0, raw, opcode, operands, modifiers, match.group(1))
    return samples


def test_every_row_assembles_for_gfx942_in_an_encoding_of_its_unit():
    samples = _samples()
    missing = sorted(set(OPCODES) - set(samples))
    assert not missing, f"rows LLVM does not assemble for gfx942: {missing}"
    wrong = {name: (row.unit.name, _encoding_family(int.from_bytes(samples[name].encoding[:4],
                                                                   "little")))
             for name, row in OPCODES.items()}
    wrong = {name: got for name, got in wrong.items() if got[1] not in FORMATS[OPCODES[name].unit]}
    assert not wrong, f"unit and LLVM's encoding disagree: {wrong}"


def _data_registers(inst: Instruction, row: opcodes.Opcode) -> int:
    """Width in dwords of the data operand LLVM accepted."""
    if row.unit is Unit.LDS and row.access == "store":
        data = inst.operands[1]
    elif row.cls == "global store" or (row.cls == "global atomic"):
        data = inst.operands[1]
    else:
        data = inst.operands[0]
    return data.count


def test_bytes_match_the_data_registers_llvm_accepts():
    samples = _samples()
    wrong = {}
    for name, row in OPCODES.items():
        if not row.access or row.name in ("global_load_lds_dword",):
            continue
        addresses = 2 if name.startswith(("ds_read2", "ds_write2")) else 1
        if row.unit is Unit.LDS and row.access == "load":
            want = max(1, row.bytes // 4)              # both elements land in one register range
        else:
            want = max(1, row.bytes // addresses // 4)
        got = _data_registers(samples[name], row)
        if got != want:
            wrong[name] = (row.bytes, got)
    assert not wrong, f"bytes per lane disagree with LLVM's data operand width: {wrong}"


def test_vcc_is_written_exactly_where_llvm_puts_it_in_a_destination():
    samples = _samples()
    wrong = []
    for name, row in OPCODES.items():
        if row.unit is not Unit.VALU:
            continue
        dests = [str(op) for op in samples[name].operands[:2]]
        if (VCC in row.flags) != ("vcc" in dests):
            wrong.append(name)
    assert not wrong, f"VCC flag disagrees with LLVM's operands: {wrong}"


def test_every_row_is_executed_by_the_emulator():
    samples = _samples()
    failing = {}
    for name in OPCODES:
        try:
            semantics.compile_instruction(samples[name], 256)
        except Exception as err:  # noqa: BLE001 - each failure is reported by name
            failing[name] = f"{type(err).__name__}: {err}"
    assert not failing, f"rows the emulator cannot execute: {failing}"


def test_every_gfx942_opcode_the_emulator_executes_has_a_row():
    samples = _samples()
    candidates = _emulator_names()
    rowless = sorted(name for name in candidates if name in samples and name not in OPCODES)
    assert not rowless, f"opcodes the emulator executes without a row: {rowless}"
    # Names the emulator's tables spell that gfx942 lacks: only the compare family's generic
    # decoder may produce those (it accepts every condition x type spelling).
    invented = sorted(name for name in semantics.implemented_opcodes() if name not in samples)
    assert not invented, f"the emulator implements opcodes gfx942 does not have: {invented}"


def test_scc_flags_match_what_the_emulator_writes():
    a = np.array([3, 0xFFFFFFFF], np.uint32)
    b = np.array([5, 1], np.uint32)
    wide_a, wide_b = a.astype(np.uint64), b.astype(np.uint64)
    wrong = []
    for name, (_, wide_src, fn) in semantics.SOP2.items():
        x, y = (wide_a, wide_b) if wide_src else (a, b)
        if (fn(x, y, np.zeros(2, np.uint32))[1] is not None) != (SCC in OPCODES[name].flags):
            wrong.append(name)
    for name, (wide, fn) in semantics.SOP1.items():
        if fn is None:              # s_cmov: reads SCC
            written = False
        else:
            written = fn(wide_a if wide else a, np.zeros(2, np.uint32))[1] is not None
        if written != (SCC in OPCODES[name].flags):
            wrong.append(name)
    wrong += [name for name in semantics.SOPC if SCC not in OPCODES[name].flags]
    assert not wrong, f"SCC in the table disagrees with the emulator: {wrong}"


def test_classes_agree_with_the_prefix_families():
    disagree = {name: (row.cls, opcodes._family(name)[0]) for name, row in OPCODES.items()
                if row.cls != opcodes._family(name)[0]
                and name not in ("s_waitcnt", "s_barrier", "s_nop")}
    assert not disagree, disagree
    assert opcodes.classify("buffer_load_dword", to_lds=True) == "buffer load to LDS"
    assert opcodes.counter("flat_load_dword") == opcodes.VMCNT      # no row: by family
    assert opcodes.row("v_add_f32_e64") is OPCODES["v_add_f32"]


def test_mfma_issue_cycles_and_counters_come_from_their_sources():
    for name, info in MFMA.items():
        assert OPCODES[name].issue_cycles == info.cycles
    assert {row.counter for row in OPCODES.values() if row.unit is Unit.VMEM and row.access} \
        == {opcodes.VMCNT}
    assert {row.counter for row in OPCODES.values() if row.unit in (Unit.LDS, Unit.SMEM)
            and row.access} == {opcodes.LGKMCNT}
    assert all(row.source for row in OPCODES.values())

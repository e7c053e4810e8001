"""Disassembly: round trips through LLVM, typed operands and modifiers, encoding-derived facts."""

import re
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.asm import CodeObject, DisassemblyError, assemble
from argus.asm.disasm import (
    SPECIALS,
    base_size,
    parse_asm,
    parse_objdump,
    parse_operand,
)
from argus.asm.toolchain import find_toolchain
from argus.isa_cdna3.instruction import Imm, Label, Reg, Special
from argus.isa_cdna3.isa import waitcnt_counters

ASM_DIR = Path(__file__).parent / "asm"
KERNELS = sorted(ASM_DIR.glob("*.s")) + sorted(
    (Path(__file__).parent.parent / "argus" / "examples").glob("*.s"))
HEADER = '.amdgcn_target "amdgcn-amd-amdhsa--gfx942"\n.text\n'


def objdump_listing(code: CodeObject) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "code.hsaco"
        code.to_file(path)
        done = find_toolchain().run("objdump", ["-d", "--mcpu=gfx942", str(path)])
    assert done.returncode == 0, done.stderr
    return done.stdout.decode()


@pytest.fixture(scope="module")
def code_objects():
    return {path.name: assemble(path.read_text(), name=str(path)) for path in KERNELS}


def test_hand_written_kernels_exist():
    assert {p.name for p in KERNELS} >= {"salu_branches.s", "valu.s", "memory_mfma.s"}


@pytest.mark.parametrize("path", KERNELS, ids=lambda p: p.name)
def test_round_trip_text_bytes(path, code_objects):
    """assemble -> disassemble -> reassemble the text -> identical .text bytes."""
    code = code_objects[path.name]
    instructions = code.disassemble()
    again = assemble(HEADER + "\n".join(ins.text for ins in instructions), name=f"{path.name}~")
    assert again.text == code.text
    assert b"".join(ins.encoding for ins in instructions) == code.text


@pytest.mark.parametrize("path", KERNELS, ids=lambda p: p.name)
def test_instructions_tile_text_and_encodings_match_objdump(path, code_objects):
    code = code_objects[path.name]
    instructions = code.disassemble()
    assert instructions[0].address == code.text_address
    for ins, nxt in zip(instructions, instructions[1:]):
        assert nxt.address == ins.next_address
    words = re.findall(r"// ([0-9A-F]+): ([0-9A-F ]+)", objdump_listing(code))
    assert len(words) == len(instructions)
    for (addr, hexwords), ins in zip(words, instructions):
        assert int(addr, 16) == ins.address
        raw = [int(w, 16) for w in hexwords.split()]
        assert struct.pack(f"<{len(raw)}I", *raw) == ins.encoding


def test_branch_targets_agree_with_objdump_symbolization(code_objects):
    """objdump prints `<kernel+0xNN>` after each branch; our Label targets must match."""
    checked = 0
    for name, code in code_objects.items():
        kernel_at = {k.entry: k.name for k in code.kernels}
        hints = dict(re.findall(r"// ([0-9A-F]+): [0-9A-F ]+<(\S+)>", objdump_listing(code)))
        for ins in code.disassemble():
            labels = [op for op in ins.operands if isinstance(op, Label)]
            if not labels:
                continue
            symbol, _, offset = hints[f"{ins.address:012X}"].partition("+")
            entry = next(addr for addr, kname in kernel_at.items() if kname == symbol)
            assert labels[0].target == entry + int(offset or "0", 16), (name, ins.text)
            checked += 1
    assert checked >= 9  # 7 in salu_branches.s, 2 in the example


def test_waitcnt_counters_come_from_the_encoding(code_objects):
    waits = [ins for ins in code_objects["salu_branches.s"].disassemble()
             if ins.opcode == "s_waitcnt"]
    assert [dict(w.modifiers) for w in waits] == [
        {"vmcnt": 63, "expcnt": 7, "lgkmcnt": 0},
        {"vmcnt": 3, "expcnt": 2, "lgkmcnt": 1},
        {"vmcnt": 40, "expcnt": 7, "lgkmcnt": 15},
    ]
    assert all(w.operands == () for w in waits)


@given(st.integers(0, 63), st.integers(0, 7), st.integers(0, 15))
def test_waitcnt_decoding_matches_llvm_encoding(vmcnt, expcnt, lgkmcnt):
    line = f"s_waitcnt vmcnt({vmcnt}) expcnt({expcnt}) lgkmcnt({lgkmcnt})\n"
    done = find_toolchain().run("mc", ["-triple=amdgcn-amd-amdhsa", "-mcpu=gfx942",
                                       "-show-encoding"], stdin=line.encode())
    low, high = re.search(r"encoding: \[0x([0-9a-f]+),0x([0-9a-f]+)", done.stdout.decode()
                          ).groups()
    assert waitcnt_counters(int(low, 16) | int(high, 16) << 8) == {
        "vmcnt": vmcnt, "expcnt": expcnt, "lgkmcnt": lgkmcnt}


def _by_text(code: CodeObject) -> dict[str, object]:
    return {ins.text: ins for ins in code.disassemble()}


def test_literals_are_flagged_only_where_a_literal_dword_exists(code_objects):
    ins = _by_text(code_objects["valu.s"])
    assert ins["v_mov_b32_e32 v2, 0x3fb8aa3b"].operands[1] == Imm(0x3FB8AA3B, literal=True)
    assert ins["v_mov_b32_e32 v3, 0.5"].operands[1] == Imm(0.5)
    assert ins["v_mov_b32_e32 v5, 0.15915494"].operands[1] == Imm(0.15915494)
    assert ins["v_sub_u32_e32 v10, 64, v9"].operands[1] == Imm(64)
    assert ins["v_fmamk_f32 v14, v11, 0x3e800000, v12"].operands[2].literal
    salu = _by_text(code_objects["salu_branches.s"])
    assert salu["s_mov_b32 s11, -16"].operands[1] == Imm(-16)
    assert salu["s_setreg_imm32_b32 hwreg(HW_REG_MODE, 0, 4), 3"].operands == (
        Imm(3, literal=True),)
    assert salu["s_movk_i32 s14, 0x1234"].operands[1] == Imm(0x1234)  # SOPK simm16
    for code in code_objects.values():
        for one in code.disassemble():
            literal = any(isinstance(op, Imm) and op.literal for op in one.operands)
            assert literal == (one.size == base_size(struct.unpack_from("<I", one.encoding)[0])
                               + 4), one.text


def test_operand_modifiers_and_controls_are_typed(code_objects):
    ins = _by_text(code_objects["valu.s"])
    assert ins["v_mul_f32_e64 v23, -|v12|, s4 mul:2"].operands[1] == Reg(
        "v", 12, neg=True, abs=True)
    assert ins["v_mul_f32_e64 v23, -|v12|, s4 mul:2"].mod("mul") == 2
    dpp = ins["v_mov_b32_dpp v50, v1 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf"]
    assert dict(dpp.modifiers) == {"quad_perm": (1, 0, 3, 2), "row_mask": 15, "bank_mask": 15}
    bound = ins["v_mov_b32_dpp v50, v1 row_shl:1 row_mask:0xf bank_mask:0x5 bound_ctrl:1"]
    assert bound.mod("bound_ctrl") is True and bound.mod("bank_mask") == 5
    assert bound.encoding[6] & 0x08  # DPP dword bit 19: BOUND_CTRL
    sdwa = ins["v_or_b32_sdwa v59, sext(v1), v2 dst_sel:DWORD dst_unused:UNUSED_PRESERVE "
               "src0_sel:BYTE_1 src1_sel:DWORD"]
    assert sdwa.operands[1] == Reg("v", 1, sext=True) and sdwa.mod("src0_sel") == "BYTE_1"
    pk = ins["v_pk_add_f16 v42, v1, v2 op_sel:[1,0] op_sel_hi:[0,1] neg_lo:[1,0] neg_hi:[0,1]"]
    assert pk.mod("op_sel") == (1, 0) and pk.mod("neg_hi") == (0, 1)
    gpr_idx = ins["s_set_gpr_idx_on s4, gpr_idx(SRC0,DST)"]
    assert gpr_idx.operands == (Reg("s", 4),) and gpr_idx.mod("gpr_idx") == ("SRC0", "DST")
    mem = _by_text(code_objects["memory_mfma.s"])
    lds = mem["buffer_load_dword v1, s[4:7], 0 offen offset:128 lds"]
    assert lds.operands == (Reg("v", 1), Reg("s", 4, 4), Imm(0))
    assert dict(lds.modifiers) == {"offen": True, "offset": 128, "lds": True}
    glob = mem["global_load_dwordx2 v[36:37], v[38:39], off offset:16"]
    assert glob.operands[2] == Special("off") and glob.mod("offset") == 16
    assert mem["global_load_dwordx4 v[32:35], v1, s[8:9] offset:-4096"].mod("offset") == -4096
    mfma = mem["v_mfma_f32_16x16x16_f16 a[32:35], a[0:1], a[2:3], a[32:35] cbsz:2 abid:1 blgp:3"]
    assert mfma.operands[0] == Reg("a", 32, 4) and mfma.operands[1] == Reg("a", 0, 2)
    assert (mfma.mod("cbsz"), mfma.mod("abid"), mfma.mod("blgp")) == (2, 1, 3)
    swizzle = mem["ds_swizzle_b32 v21, v1 offset:swizzle(SWAP,16)"]
    assert swizzle.mod("swizzle") == ("SWAP", 16)
    assert swizzle.mod("offset") == struct.unpack_from("<H", swizzle.encoding)[0]
    assert mem["ds_read2_b32 v[16:17], v1 offset0:1 offset1:255"].mod("offset1") == 255


def test_parse_asm_examples():
    assert parse_asm("v_add_u32_e32 v1, v2, v3") == (
        "v_add_u32_e32", (Reg("v", 1), Reg("v", 2), Reg("v", 3)), ())
    assert parse_asm("s_getreg_b32 s0, hwreg(HW_REG_MODE)")[2] == (
        ("hwreg", ("HW_REG_MODE", 0, 32)),)
    assert parse_asm("s_cbranch_scc0 label_00E6")[1] == (Label(-1, "label_00E6"),)
    assert parse_asm("v_exp_f32_e32 v1, -4.0")[1][1] == Imm(-4.0)
    assert parse_asm("v_readlane_b32 ttmp5, v1, exec_lo")[1][::2] == (
        Reg("ttmp", 5), Special("exec_lo"))


@pytest.mark.parametrize("line", [
    "v_add_u32_e32 v1, v2, bogus_register",
    "buffer_load_dword v1, v2, s[0:3], 0 offen mystery_flag",
    "v_mov_b32 v1, v[3:2]",
])
def test_unknown_operands_are_errors_not_dropped(line):
    with pytest.raises(DisassemblyError, match="bogus_register|mystery_flag|empty register"):
        parse_asm(line)


def test_objdump_lines_that_are_not_instructions_are_errors():
    text = bytes(4)
    with pytest.raises(DisassemblyError, match="not understood"):
        parse_objdump("\tthis is not an objdump instruction line\n", text, 0x100)
    with pytest.raises(DisassemblyError, match="cannot decode"):
        parse_objdump("\t<unknown>          // 000000000100: FFFFFFFF\n", text, 0x100)
    with pytest.raises(DisassemblyError, match="outside .text"):
        parse_objdump("\ts_nop 0          // 000000000200: BF800000\n", text, 0x100)


def test_undecodable_bytes_in_text_raise(code_objects):
    """Corrupt one instruction word so llvm-objdump cannot decode it: we must not skip it."""
    code = code_objects["valu.s"]
    offset = code.data.index(code.text[:4])
    corrupted = bytearray(code.data)
    for word in (0xFFFFFFFF, 0xBFC00000):  # neither is a gfx942 instruction
        corrupted[offset:offset + 4] = struct.pack("<I", word)
        with pytest.raises(DisassemblyError, match=r"at 0x[0-9a-f]+: llvm-objdump cannot decode"):
            CodeObject.from_bytes(bytes(corrupted)).disassemble()


registers = st.builds(
    lambda file, index, count: Reg(file, index, count),
    st.sampled_from(["s", "v", "a", "ttmp"]), st.integers(0, 255), st.integers(1, 16))
decorated = st.builds(lambda reg, neg, ab: Reg(reg.file, reg.index, reg.count, neg, ab),
                      registers, st.booleans(), st.booleans())
immediates = st.one_of(
    st.integers(-16, 64).map(Imm),
    st.integers(65, 2**32 - 1).map(lambda v: Imm(v, literal=False)),
    st.sampled_from([0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0, 0.15915494]).map(Imm))
specials = st.sampled_from(sorted(SPECIALS)).map(Special)


@given(st.one_of(decorated, immediates, specials))
def test_operand_text_parses_back(operand):
    assert parse_operand(str(operand)) == operand


# ---------------------------------------------------------------- random instructions vs LLVM

INLINE_FLOAT_BITS = {struct.unpack("<I", struct.pack("<f", f))[0]
                     for f in (0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0, 0.15915494)}


def _sgpr(draw, count=1):
    index = draw(st.integers(0, 100 - count)) // count * count
    return Reg("s", index, count)


@st.composite
def scalar_source(draw):
    kind = draw(st.sampled_from(["sgpr", "inline", "literal", "special", "float"]))
    if kind == "sgpr":
        return _sgpr(draw)
    if kind == "inline":
        return Imm(draw(st.integers(-16, 64)))
    if kind == "literal":
        # LLVM encodes a value that an inline constant can express inline: not a literal.
        value = draw(st.integers(65, 2**32 - 17).filter(lambda v: v not in INLINE_FLOAT_BITS))
        return Imm(value, literal=True)
    if kind == "float":
        return Imm(draw(st.sampled_from([0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0])))
    return Special(draw(st.sampled_from(["vcc_lo", "vcc_hi", "exec_lo", "exec_hi", "m0"])))


@st.composite
def vector_source(draw):
    if draw(st.booleans()):
        return Reg("v", draw(st.integers(0, 255)))
    return draw(scalar_source())


@st.composite
def random_instruction(draw):
    """(source text, expected opcode, operands, modifiers) of a random gfx942 instruction."""
    form = draw(st.sampled_from(["vop2", "vop3", "sop2", "mfma", "global", "ds", "mubuf",
                                 "waitcnt"]))
    v = lambda: Reg("v", draw(st.integers(0, 255)))  # noqa: E731
    if form == "vop2":
        ops = (v(), draw(vector_source()), v())
        return "v_add_u32_e32", ops, ()
    if form == "vop3":
        ops = [v()]
        for reg_files in ("vs", "v"):  # one SGPR at most: the constant bus
            reg = draw(st.sampled_from(reg_files))
            ops.append(Reg(reg, draw(st.integers(0, 100 if reg == "s" else 255)),
                           neg=draw(st.booleans()), abs=draw(st.booleans())))
        return "v_mul_f32_e64", tuple(ops), ()
    if form == "sop2":
        first = draw(scalar_source())
        second = _sgpr(draw) if isinstance(first, Imm) and first.literal else draw(scalar_source())
        if isinstance(second, Imm) and second.literal and isinstance(first, Imm) and first.literal:
            second = _sgpr(draw)
        return "s_add_u32", (_sgpr(draw), first, second), ()
    if form == "mfma":
        files = [draw(st.sampled_from("va")) for _ in range(3)]
        acc = draw(st.integers(0, 15)) * 16
        ops = (Reg(files[0], acc, 16), Reg(files[1], draw(st.integers(0, 127)) * 2, 2),
               Reg(files[2], draw(st.integers(0, 127)) * 2, 2), Reg(files[0], acc, 16))
        return "v_mfma_f32_32x32x8_bf16", ops, ()
    if form == "global":
        offset = draw(st.integers(-4096, 4095))
        mods = (("offset", offset),) if offset else ()
        return "global_load_dword", (v(), v(), _sgpr(draw, 2)), mods
    if form == "ds":
        offset = draw(st.integers(0, 65535))
        mods = (("offset", offset),) if offset else ()
        return "ds_read_b64", (Reg("v", draw(st.integers(0, 127)) * 2, 2), v()), mods
    if form == "mubuf":
        offset = draw(st.integers(0, 4095))
        mods = (("offen", True),) + ((("offset", offset),) if offset else ())
        soffset = draw(st.one_of(st.integers(0, 64).map(Imm), st.builds(lambda: None)))
        soffset = soffset if soffset is not None else _sgpr(draw)
        return "buffer_load_dword", (v(), v(), _sgpr(draw, 4), soffset), mods
    counts = (draw(st.integers(0, 63)), draw(st.integers(0, 7)), draw(st.integers(0, 15)))
    return "s_waitcnt", (), tuple(zip(("vmcnt", "expcnt", "lgkmcnt"), counts))


def _source_text(opcode, operands, modifiers):
    def show(op):
        if isinstance(op, Imm) and op.literal:
            return hex(op.value)
        return str(op)

    if opcode == "s_waitcnt":
        return "s_waitcnt " + " ".join(f"{name}({value})" for name, value in modifiers)
    text = f"{opcode} " + ", ".join(map(show, operands))
    for name, value in modifiers:
        text += f" {name}" if value is True else f" {name}:{value}"
    return text


# Each example assembles and disassembles a program: keep the slow profiles in budget.
@settings(deadline=None, max_examples=min(60, settings.default.max_examples))
@given(st.lists(random_instruction(), min_size=1, max_size=24))
def test_random_instructions_decode_to_what_was_written(program):
    code = assemble(HEADER + "\n".join(_source_text(*ins) for ins in program))
    decoded = code.disassemble()
    assert len(decoded) == len(program)
    for (opcode, operands, modifiers), ins in zip(program, decoded):
        assert (ins.opcode, ins.operands, ins.modifiers) == (opcode, operands, modifiers), (
            _source_text(opcode, operands, modifiers), ins.text)


def test_nested_loops_and_mix():
    from argus.asm.stats import classify, find_loops, instruction_mix, kernel_stats, main_loop

    code = assemble(HEADER + """
        s_mov_b32 s0, 4
    outer:
        s_mov_b32 s1, 8
    inner:
        v_mfma_f32_32x32x8_bf16 a[0:15], v[0:1], v[2:3], a[0:15]
        ds_read_b128 v[4:7], v8 offset:16
        buffer_load_dword v9, s[4:7], 0 offen lds
        s_sub_u32 s1, s1, 1
        s_cmp_lg_u32 s1, 0
        s_cbranch_scc1 inner
        s_waitcnt vmcnt(0)
        s_barrier
        s_sub_u32 s0, s0, 1
        s_cmp_lg_u32 s0, 0
        s_cbranch_scc1 outer
        s_endpgm
    """)
    instructions = code.disassemble()
    assert [classify(i) for i in instructions[2:5]] == ["MFMA", "DS read", "buffer load to LDS"]
    outer, inner = find_loops(instructions)
    assert (outer.depth, inner.depth) == (0, 1)
    assert outer.start == instructions[1].address and outer.end == instructions[12].address
    assert inner.instructions == 6 and outer.instructions == 12
    assert inner.mix == {"MFMA": 1, "SALU": 2, "DS read": 1, "buffer load to LDS": 1,
                         "branch": 1}
    assert sum(instruction_mix(instructions).values()) == len(instructions)
    assert code.kernels == []  # no descriptor: nothing to summarise per kernel
    with_kernel = assemble((ASM_DIR / "salu_branches.s").read_text())
    summary = kernel_stats(with_kernel, with_kernel.kernels[0])
    loop = main_loop(summary)  # .Lloop is closed by s_cbranch_scc1 and, later, execnz
    assert loop.instructions == 9 and loop.branches == ("s_cbranch_scc1", "s_cbranch_execnz")

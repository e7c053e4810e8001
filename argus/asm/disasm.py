"""Parse llvm-objdump's gfx942 disassembly into typed `Instruction` records.

llvm-objdump is the golden decoder; this module only tokenises its text. Facts that the text
leaves implicit are read from the encoding: branch targets, all three `s_waitcnt` counters, and
whether an immediate is a literal dword. Anything the parser does not understand is an error.
"""

from __future__ import annotations

import re
import struct
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus.asm.toolchain import Toolchain, ToolchainError
from argus.errors import ArgusError
from argus.isa_cdna3.instruction import Imm, Instruction, Label, Operand, Reg, Special
from argus.isa_cdna3.isa import INLINE_FLOATS, INLINE_INT_RANGE, waitcnt_counters

if TYPE_CHECKING:
    from argus.asm.codeobject import CodeObject


class DisassemblyError(ArgusError, ValueError):
    """llvm-objdump printed something this parser cannot turn into a typed record."""

    kind = "unsupported"


SPECIALS = frozenset("""
    vcc vcc_lo vcc_hi exec exec_lo exec_hi m0 scc off lds_direct src_lds_direct
    flat_scratch flat_scratch_lo flat_scratch_hi xnack_mask xnack_mask_lo xnack_mask_hi
    tba tba_lo tba_hi tma tma_lo tma_hi src_vccz src_execz src_scc
    src_shared_base src_shared_limit src_private_base src_private_limit
    src_pops_exiting_wave_id
""".split())

# Bare modifier words: present means the bit is set.
FLAGS = frozenset("""
    offen idxen lds glc slc dlc gds tfe lwe sc0 sc1 nt nv clamp addr64 unorm da d16 a16 r128
    row_mirror row_half_mirror bound_ctrl high done compr vm
""".split())

# Written like a call where an operand stands: `s_getreg_b32 s0, hwreg(HW_REG_MODE, 0, 4)`.
POSITIONAL_MODIFIERS = frozenset(("hwreg", "sendmsg", "gpr_idx"))

BRANCHES = frozenset("""
    s_branch s_cbranch_scc0 s_cbranch_scc1 s_cbranch_vccz s_cbranch_vccnz s_cbranch_execz
    s_cbranch_execnz s_cbranch_cdbgsys s_cbranch_cdbguser s_cbranch_cdbgsys_or_user
    s_cbranch_cdbgsys_and_user s_call_b64
""".split())

WAITCNT_COUNTERS = ("vmcnt", "expcnt", "lgkmcnt")

_SYMBOL_LINE = re.compile(r"(?P<addr>[0-9a-fA-F]+) <(?P<name>.*)>:$")
_TOKEN = re.compile(r"(?:[^\s,\[(]|\[[^\]]*\]|\([^)]*\))+")
_REG = re.compile(r"(?P<file>s|v|a|ttmp)(?:(?P<one>\d+)|\[(?P<lo>\d+):(?P<hi>\d+)\])$")
_INT = re.compile(r"-?(?:0x[0-9a-fA-F]+|\d+)$")
_FLOAT = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?$")
_VALUED = re.compile(r"(?P<name>[a-z_][a-z0-9_]*):(?P<value>\S+)$")
_CALL = re.compile(r"(?P<name>[a-z_]+)\((?P<args>[^)]*)\)$")
_LABEL = re.compile(r"[A-Za-z_.$][\w.$]*$")


def parse_int(text: str) -> int:
    negative = text.startswith("-")
    digits = text[1:] if negative else text
    value = int(digits, 16) if digits.startswith("0x") else int(digits)
    return -value if negative else value


def parse_operand(token: str) -> Operand:
    """One operand token (`v[2:5]`, `-|s3|`, `sext(v1)`, `0x3ff`, `0.5`, `vcc`)."""
    return _OPERAND_CACHE.get(token) or _OPERAND_CACHE.setdefault(token, _operand(token))


_OPERAND_CACHE: dict[str, Operand] = {}


def _operand(token: str) -> Operand:
    body, neg, absolute, sext = token, False, False, False
    if body.startswith("-") and not _INT.match(body) and not _FLOAT.match(body):
        neg, body = True, body[1:]
    if len(body) > 2 and body[0] == "|" and body[-1] == "|":
        absolute, body = True, body[1:-1]
    if body.startswith("sext(") and body.endswith(")"):
        sext, body = True, body[5:-1]
    if reg := _REG.match(body):
        if reg["one"] is not None:
            index, count = int(reg["one"]), 1
        else:
            index, count = int(reg["lo"]), int(reg["hi"]) - int(reg["lo"]) + 1
            if count < 1:
                raise DisassemblyError(f"empty register range {token!r}")
        return Reg(reg["file"], index, count, neg, absolute, sext)
    if body in SPECIALS:
        return Special(body, neg, absolute, sext)
    if _INT.match(body):
        return Imm(parse_int(body), False, neg, absolute, sext)
    if _FLOAT.match(body):
        return Imm(float(body), False, neg, absolute, sext)
    raise DisassemblyError(f"unknown operand {token!r}")


def parse_modifier(token: str) -> tuple[str, Any] | None:
    """`offset:16` -> ("offset", 16), `quad_perm:[1,0,3,2]` -> tuple, `glc` -> True,
    `vmcnt(3)` -> ("vmcnt", 3), `gpr_idx(SRC0,DST)` -> ("gpr_idx", ("SRC0", "DST")).
    None when the token is not a modifier."""
    if token in FLAGS:
        return token, True
    if valued := _VALUED.match(token):
        if valued["name"] == "bound_ctrl":
            # LLVM has printed both bound_ctrl:0 and bound_ctrl:1 for the same set bit.
            return "bound_ctrl", True
        return valued["name"], _modifier_value(valued["value"])
    if call := _CALL.match(token):
        name = call["name"]
        args = tuple(_modifier_value(a.strip()) for a in call["args"].split(",") if a.strip())
        if name in WAITCNT_COUNTERS and len(args) == 1:
            return name, args[0]
        if name == "hwreg" and len(args) == 1:
            return name, (args[0], 0, 32)
        return name, args
    return None


def _modifier_value(text: str) -> Any:
    if text.startswith("[") and text.endswith("]"):
        return tuple(_modifier_value(part.strip()) for part in text[1:-1].split(","))
    if _INT.match(text):
        return parse_int(text)
    return text


def parse_asm(asm: str) -> tuple[str, tuple, tuple]:
    """Split one line of assembly into (opcode, operands, modifiers); a branch's symbolic
    target becomes Label(-1, name) until the encoding resolves it."""
    opcode, _, rest = asm.strip().partition(" ")
    is_branch = opcode in BRANCHES
    operands: list[Operand] = []
    modifiers: list[tuple[str, Any]] = []
    positional = True
    for token in _TOKEN.findall(rest):
        if positional:
            if is_branch and _LABEL.match(token) and token not in SPECIALS:
                operands.append(Label(-1, token))
                continue
            try:
                operands.append(parse_operand(token))
                continue
            except DisassemblyError as err:
                why = str(err)
        else:
            why = "not a modifier"
        modifier = parse_modifier(token)
        if modifier is None:
            raise DisassemblyError(f"cannot parse {token!r} in {asm.strip()!r} ({why})")
        # hwreg(...), sendmsg(...) and gpr_idx(...) stand where an operand stands.
        positional = positional and modifier[0] in POSITIONAL_MODIFIERS
        modifiers.append(modifier)
    return opcode, tuple(operands), tuple(modifiers)


def base_size(word: int) -> int:
    """Bytes of an instruction without any literal dword, from its first dword (GFX9 formats)."""
    if word >> 31 == 0:  # VOP2
        return 8 if word & 0x1FF in (0xF9, 0xFA) else 4
    top7 = word >> 25
    if top7 in (0b0111111, 0b0111110):  # VOP1, VOPC
        return 8 if word & 0x1FF in (0xF9, 0xFA) else 4
    if word >> 30 == 0b10:  # SOP1/SOP2/SOPK/SOPC/SOPP
        return 4
    if word >> 26 == 0b110101:  # VINTRP
        return 4
    return 8  # VOP3, VOP3P, SMEM, DS, MUBUF, MTBUF, FLAT, MIMG, EXP


def _with_literal(operands: tuple, literal: int, asm: str) -> tuple:
    """Mark the immediate that occupies the literal dword (LLVM prints literals that are not
    inline constants in hex; an inline-looking literal, as in `s_setreg_imm32_b32`, is matched
    by value)."""
    wide = [i for i, op in enumerate(operands) if isinstance(op, Imm) and not _is_inline(op)]
    if not wide:
        wide = [i for i, op in enumerate(operands)
                if isinstance(op, Imm) and _literal_bits(op) == literal][-1:]
    if not wide:
        raise DisassemblyError(f"{asm!r} carries the literal dword {literal:#010x} but no "
                               "operand holds it")
    marked = list(operands)
    for i in wide:
        op = operands[i]
        if isinstance(op.value, int) and op.value & 0xFFFFFFFF != literal:
            raise DisassemblyError(
                f"literal {op.value:#x} in {asm!r} does not match the encoded dword "
                f"{literal:#010x}")
        marked[i] = Imm(op.value, True, op.neg, op.abs, op.sext)
    return tuple(marked)


def _literal_bits(imm: Imm) -> int:
    if isinstance(imm.value, float):
        return struct.unpack("<I", struct.pack("<f", imm.value))[0]
    return imm.value & 0xFFFFFFFF


def _is_inline(imm: Imm) -> bool:
    if isinstance(imm.value, float):
        return imm.value in INLINE_FLOATS
    return INLINE_INT_RANGE[0] <= imm.value <= INLINE_INT_RANGE[1]


def decode_fields(asm: str, encoding: bytes) -> tuple[str, tuple, tuple]:
    """(opcode, operands, modifiers) with the encoding's facts applied: literal flags,
    s_waitcnt counters, ds_swizzle patterns. Independent of the address (branches excepted)."""
    if asm.startswith((".", "<unknown>", ";")) or "illegal" in asm:
        # llvm-objdump prints undecodable words as `.long 0x...` (older: `<unknown>`).
        raise DisassemblyError(f"llvm-objdump cannot decode the bytes {encoding.hex()}: {asm!r}")
    opcode, operands, modifiers = parse_asm(asm)
    word = int.from_bytes(encoding[:4], "little")
    base = base_size(word)
    if len(encoding) == base + 4:
        operands = _with_literal(operands, int.from_bytes(encoding[-4:], "little"), asm)
    elif len(encoding) != base:
        raise DisassemblyError(f"{asm!r} is {len(encoding)} bytes; its format is {base} bytes "
                               "(+4 for a literal)")
    if opcode == "s_waitcnt":
        modifiers = _waitcnt_modifiers(modifiers, operands, word & 0xFFFF, asm)
        operands = ()
    elif opcode == "ds_swizzle_b32":
        modifiers = _swizzle_modifiers(modifiers, word & 0xFFFF)
    return opcode, operands, modifiers


def _resolve_branch(operands: tuple, address: int, encoding: bytes, symbols: dict[int, str],
                    asm: str) -> tuple:
    """The target comes from the encoding's simm16 (in dwords, relative to the next PC)."""
    offset = struct.unpack_from("<h", encoding)[0]
    word = offset & 0xFFFF
    target = address + 4 + 4 * offset
    *rest, last = operands or (None,)
    if last is None:
        raise DisassemblyError(f"branch without a target: {asm!r}")
    name = last.name if isinstance(last, Label) else symbols.get(target, "")
    if isinstance(last, Imm) and (not isinstance(last.value, int) or last.value & 0xFFFF != word):
        raise DisassemblyError(f"branch offset {last.value} in {asm!r} does not match the "
                               f"encoding's {word:#06x}")
    return (*rest, Label(target, name))


def _waitcnt_modifiers(modifiers: tuple, operands: tuple, simm16: int, asm: str) -> tuple:
    counters = waitcnt_counters(simm16)
    for name, value in modifiers:
        if name not in counters or counters[name] != value:
            raise DisassemblyError(f"s_waitcnt field {name}({value}) in {asm!r} disagrees with "
                                   f"the encoding {simm16:#06x} ({counters})")
    if any(not (isinstance(op, Imm) and op.value == simm16) for op in operands):
        raise DisassemblyError(f"unexpected s_waitcnt operands in {asm!r}")
    return tuple(counters.items())


def _swizzle_modifiers(modifiers: tuple, offset: int) -> tuple:
    """`offset:swizzle(SWAP,16)` keeps the macro as `swizzle` and the raw pattern as `offset`."""
    result = []
    for name, value in modifiers:
        if name == "offset" and isinstance(value, str):
            macro = parse_modifier(value)
            if macro is None or macro[0] != "swizzle":
                raise DisassemblyError(f"ds_swizzle_b32 offset {value!r} not understood")
            result.append(macro)
            value = offset
        result.append((name, value))
    return tuple(result)


# (line's text column, encoding) -> decoded fields and the instruction's text, shared by every
# listing this process parses: the 6.3 million instructions of the aiter kernels have only
# about 10^5 distinct texts. The column is keyed as printed (padded): llvm-objdump pads the
# same text the same way, so a hit costs no strip.
_DECODED: dict[tuple[str, bytes], tuple[str, tuple, tuple, str]] = {}
_DECODED_LIMIT = 1 << 20


def parse_objdump(listing: str, text: bytes, text_address: int) -> list[Instruction]:
    """Every instruction line of an `llvm-objdump -d` listing of the `.text` at `text_address`."""
    lines = listing.splitlines()
    symbols: dict[int, str] = {}
    for line in lines:
        if line and line[0] != "\t" and (sym := _SYMBOL_LINE.match(line)):
            symbols.setdefault(int(sym["addr"], 16), sym["name"])
    if len(_DECODED) > _DECODED_LIMIT:
        _DECODED.clear()
    decoded = _DECODED
    instructions: list[Instruction] = []
    append = instructions.append
    end = text_address + len(text)
    for line in lines:
        if not line or line[0] != "\t":
            continue
        # `\t<asm>   // <ADDR>: <dword> <dword>... [<symbol+offset>]`; str methods, not a
        # regex: this loop runs 6 million times over the vendor kernels.
        head, sep, tail = line.rpartition("// ")
        where, colon, words = tail.partition(": ")
        if " <" in words:
            words = words.partition(" <")[0]
        try:
            address = int(where, 16)
        except ValueError:
            address, colon = -1, ""
        if not (sep and colon and len(words) % 9 == 8):
            raise DisassemblyError(f"llvm-objdump line not understood: {line.strip()!r}")
        size = 4 * (len(words) + 1) // 9
        start = address - text_address
        if not (0 <= start and address + size <= end):
            raise DisassemblyError(f"{head.strip()!r} at 0x{address:x} lies outside .text")
        encoding = text[start:start + size]
        fields = decoded.get((head, encoding))
        if fields is None:
            asm = head.strip()
            try:
                fields = decoded[head, encoding] = (*decode_fields(asm, encoding), asm)
            except DisassemblyError as err:
                raise DisassemblyError(f"at 0x{address:x}: {err}") from None
        opcode, operands, modifiers, asm = fields
        if opcode in BRANCHES:
            operands = _resolve_branch(operands, address, encoding, symbols, asm)
        append(Instruction(address, encoding, opcode, operands, modifiers, asm))
    return instructions


def _decodable_mcpu(code: CodeObject) -> str:
    """The processor to decode `code` for: its own when it is a CDNA (gfx9) part, gfx942 when
    the ELF header names none; anything else is refused by name before llvm-objdump runs."""
    from argus.asm.codeobject import EF_AMDGPU_MACH, CodeObjectError

    if code.e_flags & EF_AMDGPU_MACH == 0:
        return "gfx942"
    if code.mcpu.startswith("gfx9"):
        return code.mcpu
    where = f" ({code.path})" if code.path else ""
    raise CodeObjectError(f"the code object{where} is built for {code.mcpu}; Argus decodes CDNA "
                          "(gfx9) code objects, gfx942 first",
                          fix="disassemble it with llvm-objdump --mcpu of its own target")


def disassemble_code_objects(codes: Sequence[CodeObject], toolchain: Toolchain
                             ) -> list[list[Instruction]]:
    """Decode many code objects with one llvm-objdump run per processor (startup dominates)."""
    results: dict[int, list[Instruction]] = {}
    by_mcpu: dict[str, list[int]] = {}
    for index, code in enumerate(codes):
        by_mcpu.setdefault(_decodable_mcpu(code), []).append(index)
    with tempfile.TemporaryDirectory(prefix="argus-disasm-") as tmp:
        for mcpu, indices in by_mcpu.items():
            paths = []
            for index in indices:
                path = codes[index].path
                if path is None:
                    path = Path(tmp) / f"code{index}.hsaco"
                    path.write_bytes(codes[index].data)
                paths.append(path)
            listings = _split_listing(_objdump(toolchain, paths, mcpu), len(paths))
            for index, listing in zip(indices, listings):
                code = codes[index]
                try:
                    results[index] = parse_objdump(listing, code.text, code.text_address)
                except DisassemblyError as err:
                    where = code.path or "code object"
                    raise DisassemblyError(f"{where}: {err}") from None
    return [results[index] for index in range(len(codes))]


def disassemble_code_object(code: CodeObject, toolchain: Toolchain) -> list[Instruction]:
    """Run llvm-objdump once over the code object and parse the listing."""
    return disassemble_code_objects([code], toolchain)[0]


_FILE_HEADER = re.compile(r"^.*:\tfile format ", re.MULTILINE)


def _split_listing(listing: str, count: int) -> list[str]:
    starts = [m.start() for m in _FILE_HEADER.finditer(listing)]
    if len(starts) != count:
        raise DisassemblyError(f"llvm-objdump listed {len(starts)} files, expected {count}")
    return [listing[a:b] for a, b in zip(starts, starts[1:] + [len(listing)])]


def _objdump(toolchain: Toolchain, paths: Sequence[Path], mcpu: str) -> str:
    done = toolchain.run("objdump", ["-d", f"--mcpu={mcpu}", *map(str, paths)])
    if done.returncode != 0:
        raise ToolchainError(f"llvm-objdump failed on {', '.join(map(str, paths))}: "
                             f"{done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode(errors="replace")

"""Structured gfx942 instructions: what the disassembler produces and the emulator executes.

One `Instruction` per machine instruction, with operands in assembler order and modifiers by
name. The records are immutable and carry their encoding, so a consumer never re-parses text.
"""

from __future__ import annotations

from typing import Any

import attrs

REGISTER_FILES = ("s", "v", "a", "ttmp")


@attrs.frozen
class Reg:
    """A register or register range: `s[0:1]` is Reg("s", 0, 2), `v7` is Reg("v", 7)."""

    file: str
    index: int
    count: int = 1
    neg: bool = False
    abs: bool = False
    sext: bool = False

    @property
    def last(self) -> int:
        return self.index + self.count - 1

    def __str__(self) -> str:
        body = f"{self.file}{self.index}" if self.count == 1 else (
            f"{self.file}[{self.index}:{self.last}]")
        return _decorate(body, self)


@attrs.frozen
class Special:
    """A named special operand: vcc, vcc_lo, exec, exec_hi, m0, scc, src_lds_direct, off, ..."""

    name: str
    neg: bool = False
    abs: bool = False
    sext: bool = False

    def __str__(self) -> str:
        return _decorate(self.name, self)


@attrs.frozen
class Imm:
    """An inline or literal constant.

    `value` is an int for integer constants and a float for inline float constants (0.5, -4.0,
    0.15915494 == 1/(2*pi)); the consumer interprets it with the operand type of the opcode.
    `literal` is True when the constant occupies an extra literal dword in the encoding.
    """

    value: int | float
    literal: bool = False
    neg: bool = False
    abs: bool = False
    sext: bool = False

    def __str__(self) -> str:
        if isinstance(self.value, float):
            body = repr(self.value)
        elif self.literal or self.value > 64 or self.value < -16:
            body = hex(self.value) if self.value >= 0 else str(self.value)
        else:
            body = str(self.value)
        return _decorate(body, self)


@attrs.frozen
class Label:
    """A branch target, resolved to a byte address in the code object."""

    target: int
    name: str = ""

    def __str__(self) -> str:
        return self.name or f"0x{self.target:x}"


Operand = Reg | Special | Imm | Label


def _decorate(body: str, op: Any) -> str:
    if op.sext:
        body = f"sext({body})"
    if op.abs:
        body = f"|{body}|"
    if op.neg:
        body = f"-{body}"
    return body


@attrs.frozen
class Instruction:
    """One decoded instruction.

    `opcode` is LLVM's mnemonic including any encoding suffix (`v_add_u32_e32`, `v_mov_b32_dpp`).
    `modifiers` maps names to values in source order: flags are True (`offen`, `lds`, `glc`,
    `sc0`, `nt`, `bound_ctrl`), valued modifiers keep their value (`offset` -> 16, `op_sel` ->
    (0, 1), `row_shr` -> 1, `quad_perm` -> (1, 0, 3, 2), `dst_sel` -> "WORD_1").
    Facts the disassembler takes from the encoding rather than the text:
    * `s_waitcnt` always has all three counters (`vmcnt`, `expcnt`, `lgkmcnt`; an absent one is
      its maximum) and no operands;
    * a branch's last operand is a Label whose `target` is the byte address it jumps to;
    * `Imm.literal` is True exactly for the immediate held in the extra literal dword;
    * `ds_swizzle_b32` has the raw `offset` pattern and the `swizzle` macro, and `hwreg` is
      always (register name, bit offset, bit size).
    """

    address: int
    encoding: bytes
    opcode: str
    operands: tuple[Operand, ...] = ()
    modifiers: tuple[tuple[str, Any], ...] = ()
    text: str = ""

    @property
    def size(self) -> int:
        return len(self.encoding)

    @property
    def next_address(self) -> int:
        return self.address + len(self.encoding)

    @property
    def branch_target(self) -> int | None:
        """Byte address a branch jumps to (resolved from the encoding), None for others."""
        for op in self.operands:
            if isinstance(op, Label):
                return op.target
        return None

    def mod(self, name: str, default: Any = None) -> Any:
        for key, value in self.modifiers:
            if key == name:
                return value
        return default

    def has(self, name: str) -> bool:
        return any(key == name for key, _ in self.modifiers)

    def __str__(self) -> str:
        return self.text or " ".join([self.opcode, ", ".join(map(str, self.operands))])

"""Assembling, linking, reading and disassembling gfx942 code objects with LLVM.

`assemble(text) -> CodeObject`; `CodeObject.from_file(path).kernels / .disassemble()`;
`find_toolchain()` locates clang, ld.lld and llvm-objdump (ROCm first, then LLVM 19).
"""

from argus.asm.codeobject import (
    AssemblyError,
    CodeObject,
    CodeObjectError,
    KernelArg,
    KernelDescriptor,
    KernelInfo,
    assemble,
    assemble_file,
)
from argus.asm.disasm import DisassemblyError
from argus.asm.instruction import Imm, Instruction, Label, Operand, Reg, Special
from argus.asm.toolchain import Toolchain, ToolchainError, find_toolchain

__all__ = [
    "AssemblyError", "CodeObject", "CodeObjectError", "DisassemblyError", "Imm", "Instruction",
    "KernelArg", "KernelDescriptor", "KernelInfo", "Label", "Operand", "Reg", "Special",
    "Toolchain", "ToolchainError", "assemble", "assemble_file", "find_toolchain",
]

"""Assembling, linking, reading and disassembling gfx942 code objects with LLVM.

`assemble(text) -> CodeObject`; `CodeObject.from_file(path).kernels / .disassemble()`;
`find_toolchain()` locates clang, ld.lld and llvm-objdump (ROCm first, then LLVM 19);
`example_path(name)` is a built-in example kernel (argus/examples/*.s).
"""

from pathlib import Path

from argus.asm.codeobject import (
    AssemblyError,
    CodeObject,
    CodeObjectError,
    KernelNotFound,
    assemble,
    assemble_file,
)
from argus.asm.disasm import DisassemblyError
from argus.asm.toolchain import Toolchain, ToolchainError, find_toolchain
from argus.errors import ArgusError

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"


def example_names() -> list[str]:
    """Names of the built-in example kernels (argus/examples/*.s)."""
    return sorted(path.stem for path in EXAMPLES_DIR.glob("*.s"))


def example_path(name: str = "mfma_gemm_32x32") -> Path:
    """Source of a built-in example kernel."""
    if not isinstance(name, str) or name not in example_names():
        raise ExampleNotFound(f"no built-in example {name!r}; choose one of "
                              f"{', '.join(example_names())}",
                              fix="pass one of the names `argus example --list` prints")
    return EXAMPLES_DIR / f"{name}.s"


class ExampleNotFound(ArgusError, KeyError):
    """No built-in example kernel of that name (a KeyError too, for lookups)."""


__all__ = [
    "AssemblyError", "CodeObject", "CodeObjectError", "DisassemblyError", "ExampleNotFound",
    "KernelNotFound", "Toolchain",
    "ToolchainError", "assemble", "assemble_file", "example_names", "example_path",
    "find_toolchain",
]

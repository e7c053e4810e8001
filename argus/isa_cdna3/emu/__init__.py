"""The gfx942 emulator: executes a kernel's instructions for every wave of a launch on numpy.

`load_program(instructions, kernel)` compiles a kernel once, `run(program, launch)` executes a
launch prepared by `argus.asm.launch` (whose `emulate(code_object, ...)` does both). `state` holds
the machine, `semantics`/`memory_ops`/`mfma_exec` the executors, `operands` operand access.
"""

from argus.isa_cdna3.emu.emulator import (
    CHECK_MODES,
    Emulation,
    Program,
    compile_program,
    load_program,
    run,
)
from argus.isa_cdna3.emu.mfma_exec import SparseIndexError
from argus.isa_cdna3.emu.state import (
    EmulatorError,
    Hazard,
    HazardError,
    MemoryFault,
    UnsupportedOpcodeError,
)

__all__ = [
    "CHECK_MODES", "Emulation", "EmulatorError", "Hazard", "HazardError", "MemoryFault",
    "Program", "SparseIndexError", "UnsupportedOpcodeError", "compile_program", "load_program",
    "run",
]

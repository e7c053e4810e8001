"""gfx942 (CDNA3, MI300X) machine facts and the emulator that runs gfx942 code objects.

`mfma` holds the MFMA catalogue and operand layouts, `isa` the register/hazard/LDS tables,
`emulate` executes a kernel of a code object on numpy.
"""

from argus.isa_cdna3.emulator import Emulation, emulate, unsupported_opcodes
from argus.isa_cdna3.mfma import MFMA, MfmaInfo, MfmaLayoutError, UnknownMfmaError, mfma
from argus.isa_cdna3.mfma_exec import SparseIndexError
from argus.isa_cdna3.state import (
    EmulatorError,
    Hazard,
    HazardError,
    LaunchError,
    MemoryFault,
    UnsupportedOpcodeError,
)

__all__ = [
    "MFMA", "Emulation", "EmulatorError", "Hazard", "HazardError", "LaunchError", "MemoryFault",
    "MfmaInfo", "MfmaLayoutError", "SparseIndexError", "UnknownMfmaError",
    "UnsupportedOpcodeError", "emulate", "mfma", "unsupported_opcodes",
]

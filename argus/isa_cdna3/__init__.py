"""gfx942 (CDNA3, MI300X) machine facts: `mfma` the MFMA catalogue and operand layouts, `isa` the
register/hazard/LDS tables, `opcodes` one row per opcode (class, unit, counter, bytes, flags,
issue cycles), `lds` the bank model, `numerics` the element formats, `instruction` the decoded
instruction record, `abi` the kernel descriptor and argument layout. Importing this package loads
facts only; the emulator is `argus.isa_cdna3.emu`, the performance model `argus.isa_cdna3.perf`.
"""

from argus.isa_cdna3.mfma import MFMA, MfmaInfo, MfmaLayoutError, UnknownMfmaError, mfma

__all__ = ["MFMA", "MfmaInfo", "MfmaLayoutError", "UnknownMfmaError", "mfma"]

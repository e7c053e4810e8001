"""gfx942 (CDNA3, MI300X) machine facts: `mfma` the MFMA catalogue and operand layouts, `isa` the
register/hazard/LDS tables, `numerics` the element formats, `instruction` the decoded instruction
record, `abi` the kernel descriptor and argument layout. Importing this package loads facts only;
the emulator is the subpackage `argus.isa_cdna3.emu`.
"""

from argus.isa_cdna3.mfma import MFMA, MfmaInfo, MfmaLayoutError, UnknownMfmaError, mfma

__all__ = ["MFMA", "MfmaInfo", "MfmaLayoutError", "UnknownMfmaError", "mfma"]

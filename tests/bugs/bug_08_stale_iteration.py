"""xfail: the MFMA consumes the slot holding the previous K tile."""

import programs as P

KERNEL = P.double_buffered(read_slot=lambda kt: (kt + 1) % 2)
FIXED = P.double_buffered()
EXPECT = [
    "lds-uninitialised: reads LDS that no thread has written\\n"
    "  workgroup \\(0, 0, 0\\)  wave 0  lane 0  slot 0  k\\d+=0",
    "A element \\(row=⊤, k=⊤\\)",
]

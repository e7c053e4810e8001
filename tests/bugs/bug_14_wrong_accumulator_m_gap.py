"""xfail: the accumulator layout spaces its groups of four rows by 4 instead of 8 (the 32x32
MFMA m-gap), so the accumulator claims rows the MFMA does not write there."""

import programs as P

KERNEL = P.double_buffered(c_spec=P.c_fragment_wrong_m_gap())
FIXED = P.double_buffered()
EXPECT = [
    "A element \\(row=4, k=0\\)  meets  B element \\(col=0, k=0\\)  meets  "
    "C element \\(row=16, col=0\\)",
    "V element \\(row=8, col=0\\)  meets  D element \\(row=4, col=0\\)",
]

"""xfail: the C tile is stored at (n0, m0) instead of (m0, n0)."""

import programs as P

KERNEL = P.double_buffered(c_origin=lambda m0, n0: (n0, m0))
FIXED = P.double_buffered()
EXPECT = [
    "workgroup \\(0, 1, 0\\)",
    "V element \\(row=0, col=64\\)  meets  D element \\(row=⊤, col=⊤\\)",
]

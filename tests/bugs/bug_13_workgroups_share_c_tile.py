"""xfail: every column workgroup stores its result over the first C tile of its row
(write/write race between unordered workgroups)."""

import programs as P

KERNEL = P.double_buffered(c_origin=lambda m0, n0: (m0, 0))
FIXED = P.double_buffered()
EXPECT = [
    "global-race: another workgroup accesses the element this op stores",
    "workgroup \\(0, 1\\) also stores it at .*programs.py",
    "confirmed by concrete replay",
]

"""xfail: split-K partial tiles written with a plain store instead of an atomic add: the two
K halves of one C tile overwrite each other, and only one contribution lands (lost update)."""

import programs as P

KERNEL = P.split_k(accumulate="store")
FIXED = P.split_k()
EXPECT = [
    "global-race: another workgroup accesses the element this op stores",
    "workgroup \\(0, 0, 1\\) also stores it at .*programs.py",
    "confirmed by concrete replay",
]

"""xfail: a 4-block MFMA broadcasts A with CBSZ=2 from block ABID=1, but the rows the kernel
means (32..47) sit in block 2's lanes: every block multiplies the wrong rows of A."""

import programs as P

KERNEL = P.broadcast_a(abid=1)
FIXED = P.broadcast_a()
EXPECT = [
    "tag assertion 'every block multiplies rows 32..47 of A by its own B block' does not hold",
    "A element \\(row=16, k=0\\)",
    "confirmed by concrete replay",
]

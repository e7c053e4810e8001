"""xfail: the A tile is read back through the plain row-major view, not the swizzled one it was
written with.
"""

import programs as P

KERNEL = P.double_buffered(read_swizzled=False)
FIXED = P.double_buffered()
EXPECT = [
    "tag assertion 'A and B meet at one k of this K tile, on C's row and column' does not hold",
    "A element \\(row=2, k=2\\)  meets  B element \\(col=0, k=0\\)",
    "wave 0  lane 2  slot 0  k\\d+=0",
]

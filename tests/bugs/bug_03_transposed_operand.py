"""xfail: B is loaded with its axes swapped (B^T), so the tile's rows walk K."""

import programs as P

KERNEL = P.double_buffered(b_axes=(1, 0))
FIXED = P.double_buffered()
EXPECT = [
    "out-of-bounds: access outside %B of shape \\[N, K\\]",
    "B element \\(col=1, k=0\\)",
]

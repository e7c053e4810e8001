"""xfail: the A tile origin is one row too far."""

import programs as P

KERNEL = P.double_buffered(a_row_offset=1)
FIXED = P.double_buffered()
EXPECT = [
    "out-of-bounds: access outside %A of shape \\[M, K\\]",
    "A element \\(row=1, k=0\\)  meets  B element \\(col=0, k=0\\)  meets  "
    "C element \\(row=0, col=0\\)",
]

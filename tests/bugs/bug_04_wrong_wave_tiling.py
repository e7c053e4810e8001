"""xfail: the B fragment is tiled over waves like A (wave // 2), so two waves compute the same
columns.
"""

import programs as P

KERNEL = P.double_buffered(b_spec=P.b_fragment_by_wave_row())
FIXED = P.double_buffered()
EXPECT = [
    "wave 1  lane 0  slot 0",
    "B element \\(col=0, k=0\\)  meets  C element \\(row=0, col=32\\)",
]

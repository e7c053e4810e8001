"""xfail: the K loop starts at tile 1 (a prologue that was meant to load tile 0 was removed),
so the accumulation covers [8, K) and misses k = 0..7."""

import coverage_programs as P

KERNEL = P.k_loop(start=1)
FIXED = P.k_loop()
EXPECT = [
    "tag assertion 'the accumulation covered every k of \\[0, K\\) once' does not hold",
    "kfirst=8",
    "confirmed by concrete replay",
]

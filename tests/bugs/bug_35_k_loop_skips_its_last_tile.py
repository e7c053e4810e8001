"""xfail: the K loop stops one tile early (`range(0, K // 8 - 1)`), so every C element misses
the products of the last 8 k (max error 4.9 on random data); each MFMA's own assertion still
holds, only the accumulation's coverage (`cover="k"`) shows the gap."""

import coverage_programs as P

KERNEL = P.k_loop(skip_last=True)
FIXED = P.k_loop()
EXPECT = [
    "tag assertion 'the accumulation covered every k of \\[0, K\\) once' does not hold",
    "klast=-1",
    "confirmed by concrete replay",
]

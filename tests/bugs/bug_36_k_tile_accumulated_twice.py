"""xfail: after the K loop an "epilogue" MFMA adds K tile 0 again (a classic off-by-one when a
loop is peeled), so every C element counts k = 0..7 twice; the union of what the
accumulation covered overlaps and its coverage tags are ⊤."""

import coverage_programs as P

KERNEL = P.k_loop(twice=0)
FIXED = P.k_loop()
EXPECT = [
    "tag assertion 'the accumulation covered every k of \\[0, K\\) once' does not hold",
    "kfirst=⊤",
    "confirmed by concrete replay",
]

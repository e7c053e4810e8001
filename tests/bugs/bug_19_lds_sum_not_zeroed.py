"""xfail: an LDS accumulator that waves add into atomically is never zeroed: the sum includes
whatever the allocation held before (an atomic add reads the old value)."""

import programs as P

KERNEL = P.wave_sum(zero=False)
FIXED = P.wave_sum()
EXPECT = [
    "lds-uninitialised: reads LDS that no thread has written",
    "confirmed by concrete replay",
]

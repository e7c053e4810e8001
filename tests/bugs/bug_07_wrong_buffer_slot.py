"""xfail: the prefetch overwrites the slot being consumed instead of the other one."""

import programs as P

KERNEL = P.double_buffered(next_slot=lambda kt: kt % 2)
FIXED = P.double_buffered()
EXPECT = [
    "lds-race: this write may race",
    "lds-uninitialised: reads LDS that no thread has written\\n"
    "  workgroup \\(0, 0, 0\\)  wave 0  lane 0  slot 0  k\\d+=1",
]

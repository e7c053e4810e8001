"""xfail: a tile is stored to a global scratch tensor and loaded back in another thread order
with no barrier between: a thread reads an element another thread of its workgroup stores
(read-after-store through global memory inside one workgroup)."""

import programs as P

KERNEL = P.relayout(sync=False)
FIXED = P.relayout()
EXPECT = [
    "global-order: another thread of this workgroup accesses this global element",
    "also accessed by wave 0 lane \\d+",
    "confirmed by concrete replay",
]

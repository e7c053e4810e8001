"""xfail: a tile is stored to a global scratch tensor and loaded back transposed by other waves
of the workgroup after a bare `s_barrier` with no `s_waitcnt vmcnt(0)` before it: every wave
has arrived, but a wave's `buffer_store`s may still be in flight, so another wave can load the
old contents (a release to the workgroup waits for the stores first, as LLVM's memory model
does before a workgroup barrier)."""

import ordering as P

KERNEL = P.global_scratch(wait=False)
FIXED = P.global_scratch()
EXPECT = [
    "global-order: another thread of this workgroup accesses this global element, and one of "
    "the two writes it with no wait and barrier between",
    "also accessed by wave \\d+ lane \\d+",
    "confirmed by concrete replay",
]

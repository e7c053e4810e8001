"""xfail: a bare `s_barrier` between staging a tile in LDS and reading it back transposed,
with no `s_waitcnt lgkmcnt(0)` before it: every wave has arrived, but a wave's `ds_write`s may
still be in flight, so another wave can read the old contents (the barrier orders arrival, not
memory; LLVM inserts the wait before a workgroup barrier for exactly this reason)."""

import ordering as P

KERNEL = P.relayout(wait=False)
FIXED = P.relayout()
EXPECT = [
    "lds-race: read-after-write race",
    "written by wave 0 lane \\d+ at .*ordering.py",
]

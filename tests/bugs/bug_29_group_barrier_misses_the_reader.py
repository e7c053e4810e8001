"""xfail: wave 0 stages a tile in LDS and a barrier of the wave group {0, 1} follows, but wave 2
reads the tile: it is not in the group, so nothing orders its read after wave 0's store."""

import lane_programs as P

KERNEL = P.handoff(reader=2)
FIXED = P.handoff()
EXPECT = [
    "lds-race: read-after-write race",
    "wave 2 .*\\n.*\\n.*written by wave 0 lane \\d+",
    "confirmed by concrete replay",
]

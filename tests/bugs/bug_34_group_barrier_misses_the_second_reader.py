"""xfail: a ping-pong loop whose consumers take turns (wave 1 reads the even tiles wave 0
stages in LDS, wave 3 the odd ones) orders each tile with a barrier of the wave group {0, 1}
in every iteration: in the second iteration the reader, wave 3, is not in the group, so
nothing orders its read after wave 0's store."""

import lane_programs as P

KERNEL = P.ping_pong_loop(group=lambda wave: wave < 2)
FIXED = P.ping_pong_loop()
EXPECT = [
    "lds-race: read-after-write race",
    "wave 3 .*\\n.*\\n.*written by wave 0 lane \\d+",
    "confirmed by concrete replay",
]

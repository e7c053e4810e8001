"""xfail: only wave 0 stages the tile in LDS (a `T.lanes` store) and every wave reads it back
with no barrier in between: the readers in other lanes and waves may run before the store."""

import lane_programs as P

KERNEL = P.staged(sync=False)
FIXED = P.staged()
EXPECT = [
    "lds-race: read-after-write race",
    "written by wave 0 lane \\d+ at .*lane_programs.py",
    "confirmed by concrete replay",
]

"""xfail: no barrier between staging a tile and reading it (read-after-write race)."""

import programs as P

KERNEL = P.single_buffered(sync_before_read=False)
FIXED = P.single_buffered()
EXPECT = [
    "lds-race: read-after-write race",
    "written by wave 0 lane 1 at .*programs.py",
]

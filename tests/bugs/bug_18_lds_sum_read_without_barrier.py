"""xfail: waves add their partial tiles into one LDS tile with atomic adds and read the sum with
no barrier after the adds: another wave's add may not have landed (read-after-write race)."""

import programs as P

KERNEL = P.wave_sum(sync_before_read=False)
FIXED = P.wave_sum()
EXPECT = [
    "lds-race: read-after-write race",
    "written by several threads at .*programs.py",
    "confirmed by concrete replay",
]

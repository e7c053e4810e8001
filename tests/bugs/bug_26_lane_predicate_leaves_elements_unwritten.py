"""xfail: the staging store is predicated on `lane < 32` while the tile is spread one element
per thread over all four waves, so the elements of lanes 32..63 are never written and the
read-back sees uninitialised LDS (the fix predicates on wave 0 with a layout in which wave 0
holds the whole tile)."""

import lane_programs as P

import argus.lang as T

KERNEL = P.staged(writers=lambda wave, lane: lane < 32, layout=T.copy_layout((16, 16), 4, 1))
FIXED = P.staged()
EXPECT = [
    "lds-uninitialised: reads LDS that no thread has written",
    "lane (3[2-9]|[4-5][0-9]|6[0-3])",
    "confirmed by concrete replay",
]

"""xfail: no barrier between reading a tile and staging the next one over it (write-after-read
race).
"""

import programs as P

KERNEL = P.single_buffered(sync_before_write=False)
FIXED = P.single_buffered()
EXPECT = [
    "lds-race: this write may race .*\\n  workgroup \\(0, 0, 0\\)  wave 0  lane 0  slot 0  k\\d+=1",
    "read by several threads",
]

"""xfail: the row ids of a scatter are staged through LDS and read back into registers in a
layout that puts the slot's low bit where the row's belongs, so two threads holding the same
column of different rows take the same id: both store to one element of Y (an address computed
from LDS contents; T.distinct cannot help, the positions themselves coincide)."""

import lane_programs as P

KERNEL = P.scatter(read_back=P.ids_by_row(slot_bit=True))
FIXED = P.scatter()
EXPECT = [
    "global-order: another thread of this workgroup accesses this global element",
    "also accessed by wave 0 lane \\d+",
    "confirmed by concrete replay",
]

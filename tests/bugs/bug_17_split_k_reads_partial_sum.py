"""xfail: a split-K epilogue loads C right after its own atomic add, expecting the finished sum;
the other K half may not have added yet (workgroups are unordered), so it reads a partial sum.
The fix leaves the epilogue to a later launch: within one, only atomic adds touch C."""

import programs as P

KERNEL = P.split_k(read_back=True)
FIXED = P.split_k()
EXPECT = [
    "global-race: another workgroup accesses the element this op loads",
    "workgroup \\(0, 0, 1\\) also atomically adds to it at .*programs.py",
    "confirmed by concrete replay",
]

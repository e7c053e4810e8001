"""xfail: MoE un-permute writes each expert output row back to its token with a plain store, but
a token routed to two experts appears twice in the index: two threads store one row and one
contribution is lost (the fix adds atomically)."""

import programs as P

KERNEL = P.unpermute(atomic=False)
FIXED = P.unpermute()
#: sizes bench/bench_verify.py runs the interpreter at (zero ids: every row goes to token 0)
SIZES = [{"P": 64, "D": 8, "TOKENS": 64}]
EXPECT = [
    "global-order: another thread of this workgroup accesses this global element",
    "also accessed by wave \\d+ lane \\d+",
    "confirmed by concrete replay",
]

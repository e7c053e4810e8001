"""xfail: only the padding mask is applied; the causal one is forgotten, so keys above the
diagonal reach the softmax unmasked (the masks' `valid` trace says so at the softmax)."""

import programs as P

KERNEL = P.scores(causal=False)
FIXED = P.scores()
EXPECT = [
    "tag assertion 'a key above the query reaches the softmax only masked' does not hold",
    "X element \\(key=1, query=0, valid=1\\)",
    "confirmed by concrete replay",
]

"""xfail: the causal mask compares (query, key) instead of (key, query)."""

import programs as P

KERNEL = P.scores(keep=lambda kv0, q0, i, j: q0 + j <= kv0 + i)
FIXED = P.scores()
EXPECT = [
    "tag assertion 'the causal mask keeps key <= query' does not hold",
    "X element \\(key=1, query=0, valid=1\\)",
]

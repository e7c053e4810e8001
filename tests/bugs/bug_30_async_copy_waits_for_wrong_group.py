"""xfail: the consumer of an async-copy pipeline waits for the wrong commit group.

Tile t+1's copy is committed before tile t is read, so one newer group may stay in flight:
`wait_group(1)` retires tile t's group. `wait_group(2)` leaves tile t's own group in flight
too, and the waves read the slot before its copy has landed (Triton's `async_wait` with the
pipeline depth off by one; on gfx942 a `s_waitcnt vmcnt` counting one group too many)."""

import ordering as P

KERNEL = P.stream(pending=2)
FIXED = P.stream()
EXPECT = [
    "async-pending: reads LDS that this thread's own async copy has not landed in",
    "lds-race: read-after-write race",
    "written by wave \\d+ lane \\d+ at .*ordering.py",
    "copied at .*ordering.py",
]

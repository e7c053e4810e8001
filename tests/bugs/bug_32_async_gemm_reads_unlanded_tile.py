"""xfail: a GEMM whose A and B tiles stream into LDS by async copies one K step ahead reads a
step's tiles with two groups still allowed in flight (`wait_group(2)`): the MFMA operands come
from slots whose copies have not landed (on gfx942 the `s_waitcnt vmcnt` counts one group too
many, and the strict emulator computes a wrong C)."""

import ordering as P

KERNEL = P.gemm(pending=2)
FIXED = P.gemm()
EXPECT = [
    "async-pending: reads LDS that this thread's own async copy has not landed in",
    "lds-race: read-after-write race",
    "tag assertion 'A and B meet at one k of this K tile",
]

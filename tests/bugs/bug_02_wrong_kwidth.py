"""xfail: the A fragment strides k by 2 across a lane's slots; the MFMA wants 4 consecutive k per
lane (kWidth 4).
"""

import programs as P

KERNEL = P.double_buffered(a_spec=P.a_fragment_wrong_kwidth())
FIXED = P.double_buffered()
EXPECT = [
    "tag assertion 'A and B meet at one k",
    "A element \\(row=0, k=2\\)  meets  B element \\(col=0, k=1\\)",
    "register slot a\\[1\\]",
]

"""K loops whose accumulation states what it covered (`T.mfma(..., cover="k")`): the shared
kernel of the coverage bugs and their corrections."""

import functools

import argus.lang as T
from argus.ir.expr import And
from argus.lang import Tensor

MFMA = "v_mfma_f32_32x32x8_bf16"


@functools.cache
def k_loop(*, skip_last: bool = False, twice: int | None = None, start: int = 0):
    """C = A @ B.T, one wave per 32x32 tile, one MFMA per 8-wide K tile, asserting at the
    store that the accumulation covered every k of [0, K) once. `skip_last` drops the last
    K tile; `twice` adds K tile `twice` a second time; `start` begins at that K tile."""

    @T.kernel(waves=1)
    def k_loop(A: Tensor("bf16", "M", "K"), B: Tensor("bf16", "N", "K"),
               C: Tensor("f32", "M", "N")):
        M, K = A.shape
        N = B.shape[0]
        for extent, block in ((M, 32), (N, 32), (K, 8)):
            T.assume((extent % block).eq(0))
        T.grid(M // 32, N // 32)
        m0, n0 = T.program_id(0) * 32, T.program_id(1) * 32
        T.tag(A, lambda m, k: {"row": m, "k": k})
        T.tag(B, lambda n, k: {"col": n, "k": k})
        T.tag(C, lambda m, n: {"row": m, "col": n})
        a_spec, b_spec, c_spec = (T.mfma_layout(MFMA, x) for x in "abc")
        acc = T.tag(T.zeros(c_spec), lambda i, j: {"row": m0 + i, "col": n0 + j,
                                                   "kfirst": start * 8,
                                                   "klast": start * 8 - 1, "kstep": 1})

        def step(kt, acc):
            a, b = A.load((m0, kt * 8), a_spec), B.load((n0, kt * 8), b_spec)
            out = T.mfma(MFMA, a, b, acc, cover="k")
            T.tag_assert(lambda A, B, C: And(A.k.eq(B.k), A.row.eq(C.row), B.col.eq(C.col)),
                         "A and B meet at one k, on C's row and column")
            return out

        loop = T.range(start, K // 8 - (1 if skip_last else 0), name="kt", acc=acc)
        for kt in loop:
            loop.acc = step(kt, loop.acc)
        acc = loop.acc
        if twice is not None:
            acc = step(twice, acc)
        C.store((m0, n0), acc)
        T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.col.eq(D.col), V.kfirst.eq(0),
                                      V.klast.eq(K - 1), V.kstep.eq(1)),
                     "the accumulation covered every k of [0, K) once")

    return k_loop

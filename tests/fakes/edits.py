"""Kernel sources a model might write, for the search tests: each is a complete module defining
one @T.kernel with the library GEMM's arguments."""

HEADER = '''
import argus.lang as T
from argus.lang import Tensor
from argus.kernels.gemm import MFMA, gemm_program

@T.kernel(waves=4)
def gemm(A: Tensor("bf16", "M", "K"), B: Tensor("bf16", "N", "K"), C: Tensor("f32", "M", "N"),
         *, block_m: int = 64, block_n: int = 64, block_k: int = 32, swizzle: bool = True,
         split_k: int = 1, instr: str = MFMA, prefetch: int = 1):
'''

#: reads A from LDS without the swizzle it was written with: the verifier refutes it
UNSWIZZLED_READ = HEADER + '''
    gemm_program(A, B, C, block_m=block_m, block_n=block_n, block_k=block_k, swizzle=swizzle,
                 split_k=split_k, instr=instr, read_swizzled=False, prefetch=prefetch)
'''

#: stores zero tiles to only the first half of C's row blocks: every store is in bounds (the
#: verifier proves what there is to prove) but half the output is never written
HALF_WRITTEN = HEADER + '''
    M, K = A.shape
    N = B.shape[0]
    T.assume((M % (2 * block_m)).eq(0))
    T.assume((N % block_n).eq(0))
    T.grid(M // (2 * block_m), N // block_n)
    tile = T.zeros(T.mfma_layout(instr, "c", (2, 2)))
    C.store((T.program_id(0) * 2 * block_m, T.program_id(1) * block_n), tile)
'''

#: never finishes tracing
SPIN = HEADER + '''
    while True:
        pass
'''

#: allocates far more than the sandbox allows while tracing
HOG = HEADER + '''
    hog = bytearray(8 * 1024 ** 3)
'''

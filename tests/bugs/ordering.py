"""Small correct kernels for the memory-ordering bug classes: a row stream staged through LDS by
asynchronous copies in two slots (commit groups, `wait_group`), and re-layouts through LDS and
through global memory whose barrier must follow a wait. Each keyword hook defaults to the
correct kernel.
"""

from __future__ import annotations

from functools import cache

import argus.lang as T
from argus.ir.expr import And
from argus.ir.types import ThreadLayout, thread_vars
from argus.lang import Tensor, TileSpec

ROWS = 16  # rows per tile of the 16-column f32 streams


def _by_column() -> TileSpec:
    """The 16x16 tile read back in transposed thread order: thread t holds (t % 16, t // 16),
    so (almost) every element is read by another wave than the one that wrote it."""
    wave, lane, _ = thread_vars(4, 1)
    thread = wave * 64 + lane
    return TileSpec((ROWS, 16), ThreadLayout(4, 1, (thread % 16, thread // 16)))


def tag_rows_cols(*tensors):
    """Tag each f32 [rows, 16] tensor with its coordinates (`row`, `col`)."""
    for t in tensors:
        T.tag(t, lambda r, c: {"row": r, "col": c})


def _store_checked(Y, origin, tile):
    Y.store(origin, tile)
    T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.col.eq(D.col)),
                 "each element reaches its own row and column")


def async_stream(X, Y, *, pending=1):
    """Y = X, 16 rows at a time, through two LDS slots filled by async copies one tile ahead:
    tile t+1's copy is committed, then `wait_group(pending)` must retire tile t's group (one
    newer group may stay in flight), and a barrier publishes it to the other waves."""
    N = X.shape[0]
    T.assume((N % ROWS).eq(0))
    T.assume(N >= 2 * ROWS)
    T.grid(1)
    tag_rows_cols(X, Y)
    copy = T.copy_layout((ROWS, 16), 4, 1)
    slots = T.lds((2, ROWS, 16), "f32")
    T.async_copy(slots, (0, 0, 0), X, (0, 0), copy)
    T.commit_group()
    tiles = N // ROWS
    for t in T.range(0, tiles - 1, stages=2):
        T.async_copy(slots, ((t + 1) % 2, 0, 0), X, ((t + 1) * ROWS, 0), copy)
        T.commit_group()
        T.wait_group(pending)
        T.barrier(wait=False)
        _store_checked(Y, (t * ROWS, 0), slots.load((t % 2, 0, 0), _by_column()))
        T.barrier(wait=False)
    T.wait_group(0)
    T.barrier(wait=False)
    last = tiles - 1
    _store_checked(Y, (last * ROWS, 0), slots.load((last % 2, 0, 0), _by_column()))


@cache
def stream(**hooks):
    @T.kernel(waves=4)
    def async_copy_stream(X: Tensor("f32", "N", 16), Y: Tensor("f32", "N", 16)):
        async_stream(X, Y, **hooks)
    return async_copy_stream


def lds_relayout(X, Y, *, wait=True):
    """A tile goes into LDS from registers and comes back in transposed thread order; the
    bare barrier orders the stores only if a wait lands them first."""
    N = X.shape[0]
    T.assume((N % ROWS).eq(0))
    T.grid(N // ROWS)
    r0 = T.program_id(0) * ROWS
    tag_rows_cols(X, Y)
    tile = T.lds((ROWS, 16), "f32")
    tile.store((0, 0), X.load((r0, 0), T.copy_layout((ROWS, 16), 4, 1)))
    if wait:
        T.wait()
    T.barrier(wait=False)
    _store_checked(Y, (r0, 0), tile.load((0, 0), _by_column()))


@cache
def relayout(**hooks):
    @T.kernel(waves=4)
    def lds_relayout_bare_barrier(X: Tensor("f32", "N", 16), Y: Tensor("f32", "N", 16)):
        lds_relayout(X, Y, **hooks)
    return lds_relayout_bare_barrier


def global_relayout(X, W, Y, *, wait=True):
    """A tile goes out to a global scratch tensor W and comes back in transposed thread order
    (a re-layout through global memory, as `programs.through_global`), ordered by a bare
    barrier: the barrier orders the stores only if a wait (`s_waitcnt vmcnt(0)`) lands them
    first."""
    N = X.shape[0]
    T.assume((N % ROWS).eq(0))
    T.grid(N // ROWS)
    r0 = T.program_id(0) * ROWS
    tag_rows_cols(X, W, Y)
    W.store((r0, 0), X.load((r0, 0), T.copy_layout((ROWS, 16), 4, 1)))
    if wait:
        T.wait()
    T.barrier(wait=False)
    _store_checked(Y, (r0, 0), W.load((r0, 0), _by_column()))


@cache
def global_scratch(**hooks):
    @T.kernel(waves=4)
    def global_relayout_bare_barrier(X: Tensor("f32", "N", 16), W: Tensor("f32", "N", 16),
                                     Y: Tensor("f32", "N", 16)):
        global_relayout(X, W, Y, **hooks)
    return global_relayout_bare_barrier


def gemm_async(A, B, C, *, pending=1):
    """C = A B^T, 64x64 per workgroup, K in steps of 8: A and B tiles stream into two LDS slots
    by async copies one step ahead (`wait_group(pending)` before each step's MFMA reads), as
    Triton's pipelined matmul on gfx942 does with `buffer_load_dword ... lds`."""
    import programs as G

    M, K = A.shape
    N = B.shape[0]
    for extent, block in ((M, G.BM), (N, G.BN), (K, G.BK)):
        T.assume((extent % block).eq(0))
    T.grid(M // G.BM, N // G.BN)
    m0, n0 = T.program_id(0) * G.BM, T.program_id(1) * G.BN
    G._tags(A, B, C)
    a_spec = T.mfma_layout(G.MFMA, "a", (2, 2))
    b_spec = T.mfma_layout(G.MFMA, "b", (2, 2))
    copy = T.copy_layout((G.BM, G.BK), 4, 2)   # one dword (two bf16) per lane, in LDS order
    a_smem = T.lds((2, G.BM, G.BK), "bf16")
    b_smem = T.lds((2, G.BN, G.BK), "bf16")

    def fetch(kt, slot):
        T.async_copy(a_smem, (slot, 0, 0), A, (m0, kt * G.BK), copy)
        T.async_copy(b_smem, (slot, 0, 0), B, (n0, kt * G.BK), copy)
        T.commit_group()
    fetch(0, 0)
    acc = T.tag(T.zeros(T.mfma_layout(G.MFMA, "c", (2, 2))),
                lambda i, j: {"row": m0 + i, "col": n0 + j})
    nk = K // G.BK
    loop = T.range(0, nk - 1, stages=2, acc=acc)
    for kt in loop:
        fetch(kt + 1, (kt + 1) % 2)
        T.wait_group(pending)
        T.barrier(wait=False)
        loop.acc = G._mma(a_smem, b_smem, kt % 2, kt, loop.acc, a_spec, b_spec)
        T.barrier(wait=False)
    T.wait_group(0)
    T.barrier(wait=False)
    last = nk - 1
    acc = G._mma(a_smem, b_smem, last % 2, last, loop.acc, a_spec, b_spec)
    C.store((m0, n0), acc)
    T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.col.eq(D.col)),
                 "each C element lands on its own row and column")


@cache
def gemm(**hooks):
    @T.kernel(waves=4)
    def gemm_async_copy(A: Tensor("bf16", "M", "K"), B: Tensor("bf16", "N", "K"),
                        C: Tensor("f32", "M", "N")):
        gemm_async(A, B, C, **hooks)
    return gemm_async_copy

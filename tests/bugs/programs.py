"""Small correct kernels the bug corpus mutates: a double-buffered GEMM, a single-buffered GEMM
and one causal attention score block. Each keyword hook defaults to the correct kernel; a bug
file sets one hook (GPUVerify-style seeded defect) and states the counterexample it expects.
"""

from __future__ import annotations

import math
from functools import cache

import argus.lang as T
from argus.ir.expr import And
from argus.ir.types import ThreadLayout, thread_vars
from argus.lang import Tensor, TileSpec

MFMA = "v_mfma_f32_32x32x8_bf16"
BM, BN, BK = 64, 64, 8
#: XOR the 2-element chunk index of a row with bits 1-2 of the row (elements of a 64x8 tile).
SWIZZLE = (2, 1, 3)


def _tags(A, B, C):
    T.tag(A, lambda m, k: {"row": m, "k": k})
    T.tag(B, lambda n, k: {"col": n, "k": k})
    T.tag(C, lambda m, n: {"row": m, "col": n})


def _mma(a_lds, b_lds, slot, kt, acc, a_spec, b_spec):
    a = a_lds.load((slot, 0, 0), a_spec)
    b = b_lds.load((slot, 0, 0), b_spec)
    acc = T.mfma(MFMA, a, b, acc)
    T.tag_assert(lambda A, B, C: And(A.k.eq(B.k), (A.k // BK).eq(kt), A.row.eq(C.row),
                                     B.col.eq(C.col)),
                 "A and B meet at one k of this K tile, on C's row and column")
    return acc


def b_fragment_by_wave_row() -> TileSpec:
    """B fragment whose waves are tiled like A's (wave // 2 instead of wave % 2)."""
    from argus.isa_cdna3.mfma import mfma

    info = mfma(MFMA)
    wave, lane, slot = thread_vars(4, info.k_per_lane)
    _, k, j = info.b_coord(lane, slot)
    return TileSpec((2 * info.n, info.k), ThreadLayout(4, info.k_per_lane,
                                                       (wave // 2 * info.n + j, k)))


def a_fragment_wrong_kwidth() -> TileSpec:
    """A fragment with the k of a lane's slots strided by 2 instead of contiguous."""
    from argus.isa_cdna3.mfma import mfma

    info = mfma(MFMA)
    wave, lane, slot = thread_vars(4, info.k_per_lane)
    _, i, _ = info.a_coord(lane, slot)
    return TileSpec((2 * info.m, info.k), ThreadLayout(4, info.k_per_lane,
                                                       (wave // 2 * info.m + i,
                                                        lane // 32 + 2 * slot)))


def c_fragment_wrong_m_gap() -> TileSpec:
    """Accumulator rows 4*(reg//4) + 16*(lane//32) + reg%4: groups of four rows spaced by 4
    instead of 8, lane halves by 16 instead of 4 (the 32x32 m-gap written wrongly)."""
    from argus.isa_cdna3.mfma import mfma

    info = mfma(MFMA)
    wave, lane, slot = thread_vars(4, info.c_values)
    rows = 4 * (slot // 4) + 16 * (lane // 32) + slot % 4
    return TileSpec((2 * info.m, 2 * info.n),
                    ThreadLayout(4, info.c_values, (wave // 2 * info.m + rows,
                                                    wave % 2 * info.n + lane % 32)))


def gemm_double_buffered(A, B, C, *, read_swizzled=True, next_slot=None, read_slot=None,
                         sync=True, a_spec=None, b_spec=None, b_axes=(0, 1), a_row_offset=0,
                         c_origin=None, c_spec=None):
    M, K = A.shape
    N = B.shape[0]
    for extent, block in ((M, BM), (N, BN), (K, BK)):
        T.assume((extent % block).eq(0))
    T.grid(M // BM, N // BN)
    m0, n0 = T.program_id(0) * BM, T.program_id(1) * BN
    _tags(A, B, C)
    a_spec = a_spec or T.mfma_layout(MFMA, "a", (2, 2))
    b_spec = b_spec or T.mfma_layout(MFMA, "b", (2, 2))
    c_spec = c_spec or T.mfma_layout(MFMA, "c", (2, 2))
    copy = T.copy_layout((BM, BK), 4, 2)
    a_smem = T.lds((2, BM, BK), "bf16", swizzle=SWIZZLE)
    b_smem = T.lds((2, BN, BK), "bf16", swizzle=SWIZZLE)
    a_read = a_smem if read_swizzled else a_smem.view(T.lds_layout((2, BM, BK)))
    next_slot = next_slot or (lambda kt: (kt + 1) % 2)
    read_slot = read_slot or (lambda kt: kt % 2)
    a_smem.store((0, 0, 0), A.load((m0 + a_row_offset, 0), copy))
    b_smem.store((0, 0, 0), B.load((n0, 0), copy, axes=b_axes))
    T.barrier()
    acc = T.tag(T.zeros(c_spec), lambda i, j: {"row": m0 + i, "col": n0 + j})
    nk = K // BK
    loop = T.range(0, nk - 1, stages=2, acc=acc)
    for kt in loop:
        a_next = A.load((m0 + a_row_offset, (kt + 1) * BK), copy)
        b_next = B.load((n0, (kt + 1) * BK), copy, axes=b_axes)
        loop.acc = _mma(a_read, b_smem, read_slot(kt), kt, loop.acc, a_spec, b_spec)
        a_smem.store((next_slot(kt), 0, 0), a_next)
        b_smem.store((next_slot(kt), 0, 0), b_next)
        if sync:
            T.barrier()
    last = nk - 1
    acc = _mma(a_read, b_smem, read_slot(last), last, loop.acc, a_spec, b_spec)
    C.store(c_origin(m0, n0) if c_origin else (m0, n0), acc)
    T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.col.eq(D.col)),
                 "each C element lands on its own row and column")


def gemm_single_buffered(A, B, C, *, sync_before_read=True, sync_before_write=True):
    M, K = A.shape
    N = B.shape[0]
    for extent, block in ((M, BM), (N, BN), (K, BK)):
        T.assume((extent % block).eq(0))
    T.grid(M // BM, N // BN)
    m0, n0 = T.program_id(0) * BM, T.program_id(1) * BN
    _tags(A, B, C)
    a_spec, b_spec = T.mfma_layout(MFMA, "a", (2, 2)), T.mfma_layout(MFMA, "b", (2, 2))
    c_spec = T.mfma_layout(MFMA, "c", (2, 2))
    copy = T.copy_layout((BM, BK), 4, 2)
    a_smem = T.lds((1, BM, BK), "bf16", swizzle=SWIZZLE)
    b_smem = T.lds((1, BN, BK), "bf16", swizzle=SWIZZLE)
    acc = T.tag(T.zeros(c_spec), lambda i, j: {"row": m0 + i, "col": n0 + j})
    loop = T.range(0, K // BK, acc=acc)
    for kt in loop:
        a_smem.store((0, 0, 0), A.load((m0, kt * BK), copy))
        b_smem.store((0, 0, 0), B.load((n0, kt * BK), copy))
        if sync_before_read:
            T.barrier()
        loop.acc = _mma(a_smem, b_smem, 0, kt, loop.acc, a_spec, b_spec)
        if sync_before_write:
            T.barrier()
    C.store((m0, n0), loop.acc)
    T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.col.eq(D.col)),
                 "each C element lands on its own row and column")


def neighbour_columns(spec: TileSpec, shift: int) -> TileSpec:
    """The score layout with each lane's query column replaced by the one `shift` lanes over
    (same wave): broadcasting statistics into it hands each score another query's maximum."""
    wave, lane, slot = thread_vars(spec.layout.waves, spec.layout.slots)
    rows = spec.layout.coords[0]
    return TileSpec(spec.shape, ThreadLayout(spec.layout.waves, spec.layout.slots,
                                             (rows, wave * 32 + (lane + shift) % 32)))


def attention_scores(Q, K, P, *, keep=None, stats_shift=0, causal=True):
    """The diagonal block of causal attention: S^T = K Q^T, the padding and causal masks (each
    leaving its trace in the tag `valid`), and scores shifted by their query's maximum (the
    first half of an online softmax)."""
    keep = keep or (lambda kv0, q0, i, j: kv0 + i <= q0 + j)
    S, D = Q.shape
    T.assume((S % 128).eq(0))
    T.assume(D.eq(8))
    T.grid(S // 128)
    q0 = T.program_id(0) * 128
    T.tag(Q, lambda q, d: {"query": q, "d": d})
    T.tag(K, lambda kv, d: {"key": kv, "d": d})
    T.tag(P, lambda kv, q: {"key": kv, "query": q})
    k_frag = T.mfma_layout(MFMA, "a", (1, 4))
    q_frag = T.mfma_layout(MFMA, "b", (1, 4))
    scores = T.mfma_layout(MFMA, "c", (1, 4))
    column = T.reduced(scores, 0)
    kv0 = q0
    s = T.mfma(MFMA, K.load((kv0, 0), k_frag), Q.load((q0, 0), q_frag), T.zeros(scores))
    T.tag_assert(lambda A, B, C: A.d.eq(B.d), "K and Q meet at the same feature")
    s = T.mask(s, lambda i, j: kv0 + i < S, -math.inf, trace="valid")
    if causal:
        s = T.mask(s, lambda i, j: keep(kv0, q0, i, j), -math.inf, trace="valid")
        T.tag_assert(lambda X: X.key <= X.query, "the causal mask keeps key <= query")
    m = T.reduce(s, "max", 0, column, drop=("key", "valid"))
    p = s - T.broadcast(m, 0, neighbour_columns(scores, stats_shift) if stats_shift else scores)
    T.tag_assert(lambda X, Y: X.query.eq(Y.query), "scores shifted by their own query's max")
    T.tag_assert(lambda X, Y: (X.key <= X.query) | X.valid.eq(0),
                 "a key above the query reaches the softmax only masked")
    P.store((kv0, q0), p)
    T.tag_assert(lambda V, D: And(V.key.eq(D.key), V.query.eq(D.query)),
                 "each score lands on its own key and query")


def gather_rows(X, ids, Y, *, store_shift=0):
    """Rows picked by an index tensor are copied out and back: the tags follow the gathered
    token ids, so the store is correct only if it uses the same positions of `ids`."""
    TOKENS, D = X.shape
    P = ids.shape[0]
    T.assume((P % 64).eq(0))
    T.assume(D.eq(8))
    T.grid(P // 64)
    b = T.program_id(0) * 64
    T.tag(X, lambda t, d: {"token": t, "d": d})
    T.tag(Y, lambda t, d: {"token": t, "d": d})
    copy = T.copy_layout((64, 8), 4, 2)
    x = X.load((0, 0), copy, gather=T.Gather(ids, b), guard=True)
    Y.store((0, 0), x, gather=T.Gather(ids, b + store_shift), guard=True)
    T.tag_assert(lambda V, D: And(V.token.eq(D.token), V.d.eq(D.d)),
                 "each gathered row goes back to its own token")


@cache
def gathered(**hooks):
    @T.kernel(waves=4)
    def gather_copy(X: Tensor("bf16", "TOKENS", "D"), ids: Tensor("i32", "P"),
                    Y: Tensor("bf16", "TOKENS", "D")):
        gather_rows(X, ids, Y, **hooks)
    return gather_copy


@cache
def double_buffered(**hooks):
    @T.kernel(waves=4)
    def gemm_db(A: Tensor("bf16", "M", "K"), B: Tensor("bf16", "N", "K"),
                C: Tensor("f32", "M", "N")):
        gemm_double_buffered(A, B, C, **hooks)
    return gemm_db


@cache
def single_buffered(**hooks):
    @T.kernel(waves=4)
    def gemm_sb(A: Tensor("bf16", "M", "K"), B: Tensor("bf16", "N", "K"),
                C: Tensor("f32", "M", "N")):
        gemm_single_buffered(A, B, C, **hooks)
    return gemm_sb


@cache
def scores(**hooks):
    @T.kernel(waves=4)
    def attention_block(Q: Tensor("bf16", "S", "D"), K: Tensor("bf16", "S", "D"),
                        P: Tensor("f32", "S", "S")):
        attention_scores(Q, K, P, **hooks)
    return attention_block


def split_k_gemm(A, B, C, *, accumulate="atomic", read_back=False):
    """C = A B^T with K split over grid axis 2: each workgroup adds its partial tile into C
    (`accumulate` "atomic", or "store" for a plain store); `read_back` loads C after the add and
    stores it again (an epilogue that wants the finished sum)."""
    M, K = A.shape
    N = B.shape[0]
    for extent, block in ((M, BM), (N, BN), (K, 2 * BK)):
        T.assume((extent % block).eq(0))
    T.grid(M // BM, N // BN, 2)
    m0, n0 = T.program_id(0) * BM, T.program_id(1) * BN
    k_first = T.program_id(2) * (K // (2 * BK))
    _tags(A, B, C)
    a_spec = T.mfma_layout(MFMA, "a", (2, 2))
    b_spec = T.mfma_layout(MFMA, "b", (2, 2))
    c_spec = T.mfma_layout(MFMA, "c", (2, 2))
    acc = T.tag(T.zeros(c_spec), lambda i, j: {"row": m0 + i, "col": n0 + j})
    loop = T.range(0, K // (2 * BK), acc=acc)
    for kt in loop:
        a = A.load((m0, (k_first + kt) * BK), a_spec)
        b = B.load((n0, (k_first + kt) * BK), b_spec)
        loop.acc = T.mfma(MFMA, a, b, loop.acc)
        T.tag_assert(lambda A, B, C: And(A.k.eq(B.k), A.row.eq(C.row), B.col.eq(C.col)),
                     "A and B meet at one k, on C's row and column")
    add = C.atomic_add if accumulate == "atomic" else C.store
    add((m0, n0), loop.acc)
    T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.col.eq(D.col)),
                 "each partial C element lands on its own row and column")
    if read_back:
        C.store((m0, n0), C.load((m0, n0), c_spec) * 2.0)


@cache
def split_k(**hooks):
    @T.kernel(waves=4)
    def gemm_split_k(A: Tensor("bf16", "M", "K"), B: Tensor("bf16", "N", "K"),
                     C: Tensor("f32", "M", "N")):
        split_k_gemm(A, B, C, **hooks)
    return gemm_split_k


def wave_sum_rows(X, Y, *, zero=True, sync_before_read=True):
    """Every wave adds its copy of an X tile into one LDS tile with atomic adds (a cross-wave
    reduction, as split-K within a workgroup does), then the sum, 4 X, is stored to Y. Correct
    only if the tile was zeroed first and a barrier separates the adds from the read."""
    N = X.shape[0]
    T.assume((N % 16).eq(0))
    T.grid(N // 16)
    r0 = T.program_id(0) * 16
    T.tag(X, lambda r, c: {"row": r, "col": c})
    wave, lane, slot = thread_vars(4, 4)
    every_wave = TileSpec((16, 16), ThreadLayout(4, 4, (lane // 4, lane % 4 * 4 + slot)))
    one_each = T.copy_layout((16, 16), 4, 1)
    acc = T.lds((16, 16), "f32")
    if zero:
        acc.store((0, 0), T.zeros(one_each))
        T.barrier()
    acc.atomic_add((0, 0), X.load((r0, 0), every_wave))
    if sync_before_read:
        T.barrier()
    Y.store((r0, 0), acc.load((0, 0), one_each))


@cache
def wave_sum(**hooks):
    @T.kernel(waves=4)
    def lds_wave_sum(X: Tensor("f32", "N", 16), Y: Tensor("f32", "N", 16)):
        wave_sum_rows(X, Y, **hooks)
    return lds_wave_sum


def through_global(X, W, Y, *, sync=True):
    """A tile goes out to a global scratch tensor W and comes back in the transposed thread
    order (a re-layout through memory): each thread reads what another thread of its
    workgroup stored, so a barrier must order the stores before the loads."""
    N = X.shape[0]
    T.assume((N % 16).eq(0))
    T.grid(N // 16)
    r0 = T.program_id(0) * 16
    for t in (X, W, Y):
        T.tag(t, lambda r, c: {"row": r, "col": c})
    wave, lane, slot = thread_vars(4, 1)
    by_column = TileSpec((16, 16), ThreadLayout(4, 1, ((wave * 64 + lane) % 16,
                                                       (wave * 64 + lane) // 16)))
    W.store((r0, 0), X.load((r0, 0), T.copy_layout((16, 16), 4, 1)))
    if sync:
        T.barrier()
    Y.store((r0, 0), W.load((r0, 0), by_column))
    T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.col.eq(D.col)),
                 "each element comes back to its own row and column")


@cache
def relayout(**hooks):
    @T.kernel(waves=4)
    def relayout_through_global(X: Tensor("f32", "N", 16), W: Tensor("f32", "N", 16),
                                Y: Tensor("f32", "N", 16)):
        through_global(X, W, Y, **hooks)
    return relayout_through_global


def unpermute_rows(X, ids, Y, *, atomic=True):
    """MoE un-permute: row p of X (expert outputs in sorted order) goes back to token ids[p].
    A token routed to several experts appears several times in `ids`, so the write-back must
    add (atomically); a plain store keeps one contribution."""
    TOKENS, D = Y.shape
    T.assume(X.shape[0].eq(64))
    T.assume(D.eq(8))
    T.grid(1)
    x = X.load((0, 0), T.copy_layout((64, 8), 4, 2))
    (Y.atomic_add if atomic else Y.store)((0, 0), x, gather=T.Gather(ids, 0), guard=True)


@cache
def unpermute(**hooks):
    @T.kernel(waves=4)
    def moe_unpermute(X: Tensor("f32", "P", "D"), ids: Tensor("i32", "P"),
                      Y: Tensor("f32", "TOKENS", "D")):
        unpermute_rows(X, ids, Y, **hooks)
    return moe_unpermute


BLOCKS_MFMA = "v_mfma_f32_16x16x4_4b_f16"


def shared_a_blocks(A, B, C, *, abid=2):
    """Four 16x16 products in one 4-block MFMA that share A: A's row block 2 (rows 32..47,
    held in block 2's lanes) times each of four B blocks. CBSZ=2 broadcasts one block's A to
    all four; ABID must name block 2, the one holding those rows."""
    from argus.isa_cdna3.mfma import mfma

    info = mfma(BLOCKS_MFMA)
    T.grid(1)
    T.tag(A, lambda m, k: {"row": m, "k": k})
    T.tag(B, lambda n, k: {"col": n, "k": k})
    wave, lane, slot = thread_vars(1, info.k_per_lane)
    blk, i, k = info.a_coord(lane, slot)
    a_spec = TileSpec((info.blocks * info.m, info.k), ThreadLayout(1, info.k_per_lane,
                                                                   (blk * info.m + i, k)))
    blk, k, j = info.b_coord(lane, slot)
    b_spec = TileSpec((info.blocks * info.n, info.k), ThreadLayout(1, info.k_per_lane,
                                                                   (blk * info.n + j, k)))
    wave, lane, value = thread_vars(1, info.c_values)
    blk, i, j = info.c_coord(lane, value)
    c_spec = TileSpec((info.m, info.blocks * info.n), ThreadLayout(1, info.c_values,
                                                                   (i, blk * info.n + j)))
    acc = T.tag(T.zeros(c_spec), lambda i, j: {"row": 2 * info.m + i, "col": j})
    acc = T.mfma(BLOCKS_MFMA, A.load((0, 0), a_spec), B.load((0, 0), b_spec), acc,
                 cbsz=2, abid=abid)
    T.tag_assert(lambda A, B, C: And(A.k.eq(B.k), A.row.eq(C.row), B.col.eq(C.col)),
                 "every block multiplies rows 32..47 of A by its own B block")
    C.store((0, 0), acc)


@cache
def broadcast_a(**hooks):
    @T.kernel(waves=1)
    def mfma_shared_a(A: Tensor("f16", 64, 4), B: Tensor("f16", 64, 4),
                      C: Tensor("f32", 16, 64)):
        shared_a_blocks(A, B, C, **hooks)
    return mfma_shared_a

"""MoE expert GEMM, bf16 (top-1 routing) or fp8 (e4m3fnuz, top-k): token rows gathered by
expert, Y[r] = X[r // topk] @ W[e(r)].T for each route r = token * topk + slot.

Routes arrive sorted by expert and padded per expert to whole row blocks (`sorted_ids`, padding
id = number of routes); `block_expert[b]` names the expert of row block b. Each workgroup loads
its expert id as a uniform scalar, gathers its token rows (id // topk: X holds each token once,
as AMD's stage-1 kernels read it) with guarded (buffer-style) loads, runs
v_mfma_f32_32x32x8_bf16 (fp8: v_mfma_f32_32x32x16_fp8_fp8) on a 2x2 wave grid and scatters
the rows back to their routes; padding rows read zeros and are not written. Tags follow the
gathered tokens, so the store asserts token and column; `T.distinct` declares each real route
once in `sorted_ids`, which proves no two workgroups store one row.
"""

from __future__ import annotations

import numpy as np

import argus.lang as T
from argus.ir.expr import And, Const
from argus.ir.types import DTYPE_BYTES
from argus.kernels.gemm import compute_k_tile, swizzle_for
from argus.lang import Tensor
from argus.lang.errors import user_loc

MFMA = "v_mfma_f32_32x32x8_bf16"
MFMA_FP8 = "v_mfma_f32_32x32x16_fp8_fp8"
WAVE_GRID = (2, 2)
#: moe_gemm_fp8_direct's waves stacked along the rows of its transposed product (Y's columns):
#: each loads its own weights
DIRECT_WAVE_GRID = (4, 1)


@T.kernel(waves=4)
def moe_gemm(X: Tensor("bf16", "TOKENS", "H"), W: Tensor("bf16", "E", "N", "H"),
             sorted_ids: Tensor("i32", "P"), block_expert: Tensor("i32", "BLOCKS"),
             Y: Tensor("f32", "TOKENS", "N"), *, block_m: int = 64, block_n: int = 64,
             block_k: int = 32, lds: bool = True, prefetch: int = 1, xcd_order: bool = False):
    """Grouped GEMM over the row blocks of `sorted_ids` (block sizes multiples of 64, 64, 8).
    With `lds` (the default) the gathered X rows and the expert's W tile are staged through
    swizzled, double-buffered LDS one K tile ahead, as the library GEMM does, so each wave's
    MFMA operands come from LDS and every global element is read once per workgroup; without,
    each wave loads its MFMA operands straight from global memory (no LDS, more global
    traffic: the two waves of a row read the same X elements). `prefetch=2` (with `lds`) runs
    the global loads two K tiles ahead, the next tile riding in registers (H must hold two K
    tiles). `xcd_order`: the column blocks on the fastest grid axis (see `moe_program`)."""
    moe_program(X, W, sorted_ids, block_expert, Y, block_m=block_m, block_n=block_n,
                block_k=block_k, lds=lds, instr=MFMA, prefetch=prefetch, xcd_order=xcd_order)


@T.kernel(waves=4)
def moe_gemm_fp8(X: Tensor("fp8", "TOKENS", "H"), W: Tensor("fp8", "E", "N", "H"),
                 sorted_ids: Tensor("i32", "P"), block_expert: Tensor("i32", "BLOCKS"),
                 Y: Tensor("f32", "ROUTES", "N"), *, block_m: int = 64, block_n: int = 64,
                 block_k: int = 64, lds: bool = True, prefetch: int = 1,
                 instr: str = MFMA_FP8, xcd_order: bool = False, topk: int = 1):
    """`moe_gemm` with fp8 (e4m3fnuz) X and W on v_mfma_f32_32x32x16_fp8_fp8, f32 accumulation
    and Y (the scales of a quantised MoE are the caller's: Y times the token's and the output
    channel's scale), each token routed to `topk` experts: ROUTES = TOKENS * topk rows of Y,
    route r = token * topk + slot, X read by token (`moe_program`). Copies move 16 fp8 per
    thread, so block_m * block_k and block_n * block_k must be multiples of 4096 (block_k a
    multiple of 64 at 64-row tiles). `instr` v_mfma_f32_16x16x32_fp8_fp8 allows 32-row blocks
    (less padding when experts get few tokens). `xcd_order` as in `moe_gemm`."""
    moe_program(X, W, sorted_ids, block_expert, Y, block_m=block_m, block_n=block_n,
                block_k=block_k, lds=lds, instr=instr, prefetch=prefetch, xcd_order=xcd_order,
                topk=topk)


@T.kernel(waves=4)
def moe_gemm_fp8_kblocked(X: Tensor("fp8", "TOKENS", "H"),
                          W: Tensor("fp8", "E", "KT", "N", 64),
                          sorted_ids: Tensor("i32", "P"), block_expert: Tensor("i32", "BLOCKS"),
                          Y: Tensor("f32", "ROUTES", "N"), *, block_m: int = 32,
                          block_n: int = 128, prefetch: int = 2,
                          instr: str = "v_mfma_f32_16x16x32_fp8_fp8", xcd_order: bool = False,
                          topk: int = 1):
    """`moe_gemm_fp8` with the weights pre-arranged in 64-column K blocks (W[e, kt, n, j] is
    the expert's W[n, 64 kt + j]; `kblock_weights` makes it), as AMD pre-shuffles its MoE
    weights: a K tile of a workgroup's rows is then one contiguous run, whole 128-byte lines,
    where row-major rows give each row's 64-byte piece its own line. `xcd_order` and
    `topk` as in `moe_gemm_fp8`."""
    moe_program(X, W, sorted_ids, block_expert, Y, block_m=block_m, block_n=block_n,
                block_k=64, lds=True, instr=instr, prefetch=prefetch, xcd_order=xcd_order,
                topk=topk)


@T.kernel(waves=4)
def moe_gemm_fp8_direct(X: Tensor("fp8", "TOKENS", "H"),
                        W: Tensor("fp8", "E", "KT", "N", 64),
                        sorted_ids: Tensor("i32", "P"), block_expert: Tensor("i32", "BLOCKS"),
                        Y: Tensor("f32", "ROUTES", "N"), *, block_m: int = 32,
                        block_n: int = 64, prefetch: int = 2,
                        instr: str = "v_mfma_f32_16x16x32_fp8_fp8", xcd_order: bool = False,
                        topk: int = 1):
    """`moe_gemm_fp8_kblocked` with the weights loaded straight into each wave's MFMA operand
    registers, as AMD's stage-1 kernels do: only the gathered X rows go through LDS (a 32x64
    tile is 2 KB a slot), so LDS no longer caps the workgroups a CU holds, and no LDS write,
    read or barrier stands between a weight's arrival and its MFMA. The 4 waves split the
    columns (a 1x4 wave grid), so no two waves load the same weights. `prefetch` K tiles of
    weights ride in registers ahead of the MFMAs. `topk` as in `moe_gemm_fp8`."""
    moe_program(X, W, sorted_ids, block_expert, Y, block_m=block_m, block_n=block_n,
                block_k=64, lds=True, instr=instr, prefetch=prefetch, xcd_order=xcd_order,
                direct=True, topk=topk)


def kblock_weights(W: np.ndarray, block: int = 64) -> np.ndarray:
    """W[e, n, k] rearranged to W[e, k // block, n, k % block] (moe_gemm_fp8_kblocked's)."""
    e, n, k = W.shape
    return np.ascontiguousarray(W.reshape(e, n, k // block, block).transpose(0, 2, 1, 3))


def moe_program(X, W, sorted_ids, block_expert, Y, *, block_m: int, block_n: int, block_k: int,
                lds: bool, instr: str, prefetch: int = 1, xcd_order: bool = False,
                direct: bool = False, topk: int = 1):
    """The MoE GEMM's body for X and W of the MFMA `instr`'s element type. Each token is
    routed to `topk` experts: Y's rows are its routes r = token * topk + slot (Y's row size is
    TOKENS * topk; with topk = 1 it may be X's TOKENS itself), and X's rows are gathered by
    token, `sorted_ids[p] // topk`, so X is read per token, not expanded per route (AMD's
    stage-1 kernels carry the token and the slot in their sorted ids alike). The grid runs row
    blocks fastest by default; `xcd_order` (XCD-aware order) runs the column blocks fastest:
    the dispatcher deals workgroups to the 8 XCDs round-robin by flat id, so an expert's row
    blocks at one column block, ids N / block_n apart, read that W tile through one XCD's L2
    when N / block_n is a multiple of 8 (each X row block is then read on every XCD)."""
    if prefetch not in (1, 2, 3, 4) or (prefetch > 1 and not lds):
        raise T.DSLError(f"prefetch={prefetch!r} with lds={lds!r}: the staged loads run 1 to 4 "
                         "K tiles ahead (more than 1 only through LDS)", user_loc(),
                         fix="use prefetch=1, or prefetch=2 to 4 with lds=True")
    if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
        raise T.DSLError(f"topk={topk!r}: the experts each token is routed to is a positive "
                         "int", user_loc(), fix="use topk=1, 2, 4 or 8")
    TOKENS, H = X.shape
    ROUTES = Y.shape[0]
    if ROUTES == TOKENS and topk != 1:
        raise T.DSLError(f"topk={topk} with Y's rows the size of X's: Y holds a row per route "
                         "(TOKENS * topk)", user_loc(),
                         fix="declare Y with its own row size, e.g. Tensor('f32', 'ROUTES', 'N')")
    if ROUTES != TOKENS:
        T.assume(ROUTES.eq(TOKENS * topk))
    blocked = len(W.shape) == 4     # W[e, kt, n, j] holds W[e, n, kt * block_k + j]
    if blocked:
        E, _, N, inner = W.shape
        inner = inner.value if isinstance(inner, Const) else inner
        if inner != block_k or not lds:
            raise T.DSLError(f"a K-blocked W ({inner} columns a block) needs block_k={inner} "
                             f"and lds=True, got block_k={block_k}, lds={lds}", user_loc(),
                             fix=f"use block_k={inner} with lds=True")
        T.assume(W.shape[1].eq(H // block_k))
    else:
        E, N, _ = W.shape
    P, BLOCKS = sorted_ids.shape[0], block_expert.shape[0]
    # every route (token, slot) appears once; padding ids (= ROUTES) repeat
    T.distinct(sorted_ids, 0, ROUTES)
    T.assume(P.eq(BLOCKS * block_m))
    T.assume((N % block_n).eq(0))
    T.assume((H % block_k).eq(0))
    if xcd_order:
        T.grid(N // block_n, BLOCKS)
        block, n0 = T.program_id(1), T.program_id(0) * block_n
    else:
        T.grid(BLOCKS, N // block_n)
        block, n0 = T.program_id(0), T.program_id(1) * block_n
    expert = T.load_scalar(block_expert, (block,), 0, E)
    T.tag(X, lambda t, h: {"token": t, "k": h})
    if blocked:
        T.tag(W, lambda e, kt, n, j: {"expert": e, "col": n, "k": kt * block_k + j})
    else:
        T.tag(W, lambda e, n, h: {"expert": e, "col": n, "k": h})
    # a route's row holds its token's product: the store proves that the gathered token row
    # lands on a route of that token
    T.tag(Y, lambda r, n: {"token": r // topk if topk > 1 else r, "col": n})

    def rows(r):
        """The routes of the block's rows from r on (where Y is stored)."""
        return T.Gather(sorted_ids, block * block_m + r)

    def tokens(r):
        """The tokens of those routes (where X is read)."""
        return T.Gather(sorted_ids, block * block_m + r, divisor=topk)

    def scatter(acc, transposed: bool):
        """Each accumulator tile (route block r, column block s) to its routes' rows of Y; a
        tile of the transposed product holds Y's columns along its rows, routes along its
        columns."""
        for (r, s), c in acc.items():
            if transposed:
                Y.store((0, n0 + s * c.shape[0]), c, axes=(1, 0), guard=True,
                        gather=T.Gather(sorted_ids, block * block_m + r * c.shape[1],
                                        tile_axis=1))
            else:
                Y.store((0, n0 + s * c.shape[1]), c, gather=rows(r * c.shape[0]), guard=True)
            T.tag_assert(lambda V, D: And(V.token.eq(D.token), V.col.eq(D.col)),
                         "each row goes back to its own token and column")

    if lds and prefetch > 1:
        T.assume(H >= prefetch * block_k)
    if direct:
        if prefetch & (prefetch - 1) == 0:
            # whole windows of K tiles: the loop unrolled by the window runs no remainder
            # iterations (a remainder cannot rotate the window by renaming: its moves wait for
            # the loads and its extra registers cost occupancy)
            T.assume((H % (prefetch * block_k)).eq(0))
        scatter(_direct(X, W, expert, tokens(0), n0, H // block_k, block_m, block_n, block_k,
                        instr, prefetch), transposed=True)
        return
    a_spec = T.mfma_layout(instr, "a", WAVE_GRID)
    b_spec = T.mfma_layout(instr, "b", WAVE_GRID)
    c_spec = T.mfma_layout(instr, "c", WAVE_GRID)
    reps_m, reps_n = block_m // a_spec.shape[0], block_n // b_spec.shape[0]
    meet = (lambda A, B, C: And(A.k.eq(B.k), B.expert.eq(expert)),
            "token and expert weights meet at one k")
    acc = {(r, s): T.zeros(c_spec) for r in range(reps_m) for s in range(reps_n)}
    if lds:
        acc = _staged(X, W, expert, tokens(0), n0, H // block_k, acc, block_m, block_n,
                      block_k, a_spec, b_spec, meet, instr, prefetch, blocked)
    else:
        loop = T.range(0, H // block_k, name="kt", acc=acc)
        for kt in loop:
            # every operand of the K tile is requested before the first MFMA, so the loads are
            # in flight together and each MFMA waits only for its own
            k0s = [kt * block_k + ks * a_spec.shape[1]
                   for ks in range(block_k // a_spec.shape[1])]
            a_tiles = [[X.load((0, k0), a_spec, gather=tokens(r * a_spec.shape[0]), guard=True)
                        for r in range(reps_m)] for k0 in k0s]
            b_tiles = [[W.load((expert, n0 + s * b_spec.shape[0], k0), b_spec, axes=(1, 2))
                        for s in range(reps_n)] for k0 in k0s]
            acc = dict(loop.acc)
            for a, b in zip(a_tiles, b_tiles):
                for (r, s), c in acc.items():
                    acc[r, s] = T.mfma(instr, a[r], b[s], c)
                    T.tag_assert(*meet)
            loop.acc = acc
        acc = loop.acc
    scatter(acc, transposed=False)


def _staged(X, W, expert, gathered, n0, k_tiles, acc, block_m, block_n, block_k, a_spec,
            b_spec, meet, instr, prefetch, blocked=False):
    """The K loop through double-buffered LDS, as the library GEMM's: tile kt+1 is loaded into
    registers before tile kt's MFMAs (the GEMM's `compute_k_tile`, asserting `meet`) and
    stored to the other slot after them, one barrier per tile; the last tile is consumed after
    the loop, so no iteration needs a branch. With `prefetch=2` to 4 the loads run further
    ahead: tiles kt+1 .. kt+prefetch-1 ride in registers (carried by the loop) while
    kt+prefetch loads."""
    size = DTYPE_BYTES[X.dtype]
    copy_a = T.copy_layout((block_m, block_k), 4, _copy_vector(block_m, block_k, size))
    copy_b = T.copy_layout((block_n, block_k), 4, _copy_vector(block_n, block_k, size))
    a_smem = T.lds((2, block_m, block_k), X.dtype, swizzle=swizzle_for(block_k, size))
    b_smem = T.lds((2, block_n, block_k), X.dtype, swizzle=swizzle_for(block_k, size))

    def fetch(kt):
        rows = X.load((0, kt * block_k), copy_a, gather=gathered, guard=True)
        return rows, (W.load((expert, kt, n0, 0), copy_b, axes=(2, 3)) if blocked else
                      W.load((expert, n0, kt * block_k), copy_b, axes=(1, 2)))

    def stage(slot, tiles):
        a_smem.store((slot, 0, 0), tiles[0])
        b_smem.store((slot, 0, 0), tiles[1])

    def compute(slot, kt, acc):
        return compute_k_tile(a_smem, b_smem, slot, kt, acc, a_spec, b_spec, block_k, instr, meet)

    stage(0, fetch(0))
    carried = {"acc": acc}
    for j in range(1, prefetch):            # tiles 1 .. prefetch-1 ride in registers
        carried[f"x{j}"], carried[f"w{j}"] = fetch(j)
    T.barrier()

    def riding(loop) -> list:
        return [(getattr(loop, f"x{j}"), getattr(loop, f"w{j}")) for j in range(1, prefetch)]

    # unrolled by the prefetch depth where that is a power of two (the backend's rule), so the
    # tiles riding in registers rotate through them by renaming, not by copies every trip
    unroll = prefetch if prefetch & (prefetch - 1) == 0 else 1
    loop = T.range(0, k_tiles - prefetch, stages=2, unroll=unroll, name="kt", **carried)
    for kt in loop:
        ahead = [*riding(loop), fetch(kt + prefetch)]
        loop.acc = compute(kt % 2, kt, dict(loop.acc))
        stage((kt + 1) % 2, ahead[0])
        for j in range(1, prefetch):
            setattr(loop, f"x{j}", ahead[j][0])
            setattr(loop, f"w{j}", ahead[j][1])
        T.barrier()
    acc = dict(loop.acc)
    # the last `prefetch` tiles: all but the final one are staged from registers first
    for i, tiles in enumerate(riding(loop)):
        kt = k_tiles - prefetch + i
        acc = compute(kt % 2, kt, acc)
        stage((kt + 1) % 2, tiles)
        T.barrier()
    last = k_tiles - 1
    return compute(last % 2, last, acc)


def _direct(X, W, expert, gathered, n0, k_tiles, block_m, block_n, block_k, instr, prefetch):
    """The K loop with W straight into registers, as the transposed product Y^T = W X^T: the
    weights are the MFMA's A operand, loaded by each wave in the MFMA's own layout from the
    K-blocked W (the 4 waves stacked along the columns, `DIRECT_WAVE_GRID`: no two load the
    same weights), the gathered X tile its B, through double-buffered LDS. Each lane's
    accumulators are then 4 consecutive columns of one route, stored by one dwordx4 (the
    untransposed tile held 4 routes of one column: 4 times the store instructions, each a
    fixed issue time on the CU's addresser at the end of the workgroup). Returns the
    accumulators, (route block r, column block s) -> a (columns, routes) tile.

    `prefetch` K tiles ride in registers: tile kt+prefetch is requested right after tile
    kt's MFMAs, into the registers they read (the window rotates by renaming, the loop
    unrolled by its length where that is a power of two), its X rows stored to LDS one tile
    ahead of their MFMAs.

    The k steps of a K tile are packed in pairs where a lane's two steps fit 16 bytes
    (`mfma_layout(pack=2)`, fp8 16x16x32): a lane then loads its 16 contiguous bytes of a W
    row with one dwordx4, whole 128-byte lines (the unpacked dwordx2 of one step read half of
    each line, the other step the other half: every line requested twice, twice the vector
    memory instructions), and reads B's two steps with one ds_read_b128, the X tile swizzled
    in 16-byte chunks to match."""
    size = DTYPE_BYTES[X.dtype]
    a_spec = T.mfma_layout(instr, "a", DIRECT_WAVE_GRID)     # W: (waves x m columns, k)
    b_spec = T.mfma_layout(instr, "b", DIRECT_WAVE_GRID)     # X: (n routes, k)
    c_spec = T.mfma_layout(instr, "c", DIRECT_WAVE_GRID)
    steps, reps_n = block_k // a_spec.shape[1], block_n // a_spec.shape[0]
    reps_m = block_m // b_spec.shape[0]
    kpl = a_spec.slots
    pack = 2 if steps % 2 == 0 and 2 * kpl * size <= 16 else 1
    copy_a = T.copy_layout((block_m, block_k), 4, _copy_vector(block_m, block_k, size))
    x_smem = T.lds((2, block_m, block_k), X.dtype,
                   swizzle=swizzle_for(block_k, size, read_bytes=kpl * size * pack))
    a_wide = T.mfma_layout(instr, "a", DIRECT_WAVE_GRID, pack=pack)
    b_wide = T.mfma_layout(instr, "b", DIRECT_WAVE_GRID, pack=pack)
    width = a_wide.shape[1]          # k of one packed group of steps
    meet = (lambda A, B, C: And(A.k.eq(B.k), A.expert.eq(expert)),
            "expert weights and token meet at one k")
    acc = {(r, s): T.zeros(c_spec) for r in range(reps_m) for s in range(reps_n)}

    def fetch(kt):
        # the weights first: they need no row id, so the first ones go out while the ids are
        # in flight (`vmcnt` counts in issue order: X behind them waits for its ids only)
        w = [W.load((expert, kt, n0 + s * a_spec.shape[0], g * width), a_wide, axes=(2, 3))
             for g in range(steps // pack) for s in range(reps_n)]
        return X.load((0, kt * block_k), copy_a, gather=gathered, guard=True), w

    def compute(slot, w, acc):
        for g in range(steps // pack):
            x = [x_smem.load((slot, r * b_spec.shape[0], g * width), b_wide)
                 for r in range(reps_m)]
            for p in range(pack):
                # step p's registers, seen in the MFMA's layout (their k tags travel along)
                x_step = [T.slots(t, p * kpl, b_spec) if pack > 1 else t for t in x]
                for (r, s), c in acc.items():
                    a = w[g * reps_n + s]
                    a_step = T.slots(a, p * kpl, a_spec) if pack > 1 else a
                    acc[r, s] = T.mfma(instr, a_step, x_step[r], c)
                    T.tag_assert(*meet)
        return acc

    # every tile of the window is requested before the first waits for its X rows
    window = [fetch(j) for j in range(prefetch)]
    x_smem.store((0, 0, 0), window[0][0])
    carried = {"acc": acc}
    for j, (x, w) in enumerate(window):
        if j:
            carried[f"x{j}"] = x
        carried.update({f"w{j}_{i}": t for i, t in enumerate(w)})
    T.barrier()
    count = steps // pack * reps_n

    def held(loop, j):
        return (getattr(loop, f"x{j}") if j else None,
                [getattr(loop, f"w{j}_{i}") for i in range(count)])

    # unrolled by the window's length where that is a power of two (the backend's rule): each
    # tile then loads into the registers of the one whose MFMAs were just issued, and the
    # window rotates by renaming, with no moves (a move of a loaded register waits for it)
    unroll = prefetch if prefetch & (prefetch - 1) == 0 else 1
    loop = T.range(0, k_tiles - prefetch, stages=2, unroll=unroll, name="kt", **carried)
    for kt in loop:
        tiles = [held(loop, j) for j in range(prefetch)]
        loop.acc = compute(kt % 2, tiles[0][1], dict(loop.acc))
        tiles.append(fetch(kt + prefetch))
        x_smem.store(((kt + 1) % 2, 0, 0), tiles[1][0])
        for j in range(prefetch):
            if j:
                setattr(loop, f"x{j}", tiles[j + 1][0])
            for i in range(count):
                setattr(loop, f"w{j}_{i}", tiles[j + 1][1][i])
        T.barrier()
    acc = dict(loop.acc)
    tiles = [held(loop, j) for j in range(prefetch)]
    for i in range(prefetch):
        kt = k_tiles - prefetch + i
        acc = compute(kt % 2, tiles[i][1], acc)
        if i + 1 < prefetch:
            x_smem.store(((kt + 1) % 2, 0, 0), tiles[i + 1][0])
            T.barrier()
    return acc


def _copy_vector(rows: int, cols: int, size: int) -> int:
    """Elements each of the 256 threads moves per load of a rows x cols tile: 16 bytes where
    the tile splits into whole 16-byte loads, else the widest power of two that does (a
    96-column fp8 tile: 6144 bytes, 8 per thread in 3 loads)."""
    vector = 16 // size
    while vector > 1 and (cols % vector or rows * cols % (256 * vector)):
        vector //= 2
    return vector


def route(tokens: int, experts: int, block_m: int, rng, topk: int = 1
          ) -> tuple[np.ndarray, ...]:
    """Random top-k routing, each token to `topk` different experts: (expert per route
    token * topk + slot, sorted_ids padded per expert, block_expert)."""
    if topk == 1:
        return pack(rng.integers(0, experts, tokens), experts, block_m)
    if not 1 <= topk <= experts:
        raise ValueError(f"topk={topk}: each token goes to topk different experts of {experts}")
    picks = np.argsort(rng.random((tokens, experts)), axis=1)[:, :topk]
    return pack(picks.ravel(), experts, block_m)


def pack(choice, experts: int, block_m: int) -> tuple[np.ndarray, ...]:
    """The kernel's tables for a given routing (`choice[r]` = expert of route r, a token under
    top-1 routing, token * topk + slot under top-k): (choice,
    sorted_ids padded per expert to whole row blocks, block_expert); an expert no token chose
    gets no row block."""
    choice, tokens = np.asarray(choice), len(choice)
    sorted_ids, block_expert = [], []
    for e in range(experts):
        mine = np.flatnonzero(choice == e)
        blocks = -(-len(mine) // block_m)
        sorted_ids.extend(mine)
        sorted_ids.extend([tokens] * (blocks * block_m - len(mine)))
        block_expert.extend([e] * blocks)
    return (choice, np.asarray(sorted_ids, np.int32), np.asarray(block_expert, np.int32))


def reference(X, W, choice, topk: int = 1) -> np.ndarray:
    """Y[r] = X[r // topk] @ W[choice[r]].T for each route r."""
    x, w = np.asarray(X, np.float64), np.asarray(W, np.float64)
    return np.einsum("rh,rnh->rn", x[np.arange(len(choice)) // topk], w[choice])

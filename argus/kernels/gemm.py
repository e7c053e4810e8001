"""bf16 GEMM, C = A @ B.T, on v_mfma_f32_32x32x8_bf16 (or 16x16x16): 4 waves in a 2x2 grid,
A and B staged through XOR-swizzled (bank-conflict-free for the block_k), double-buffered LDS,
one barrier per K tile, global loads one or two K tiles ahead (`prefetch`), tags on A, B and C
with assertions at every MFMA and at the store; optional split-K with atomic adds.

`gemm_program` is the kernel body; its keyword hooks let tests build the classic defects
(forgotten swizzle on the read side, wrong buffer slot, missing barrier, wrong k mapping).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import argus.lang as T
from argus.ir.expr import And
from argus.ir.layout import Swizzle
from argus.ir.types import DTYPE_BYTES, LANES, ThreadLayout, thread_vars
from argus.lang import Tensor, TileSpec
from argus.lang.errors import user_loc

MFMA = "v_mfma_f32_32x32x8_bf16"
#: The 32x32 MFMA for each element type the GEMM takes (A and B share it).
DEFAULT_MFMA = {"bf16": MFMA, "f16": "v_mfma_f32_32x32x8_f16",
                "fp8": "v_mfma_f32_32x32x16_fp8_fp8", "bf8": "v_mfma_f32_32x32x16_bf8_bf8"}
WAVE_GRID = (2, 2)
#: (bits, base, shift) in bf16 elements: the row index mod 8 permutes 4-element (8-byte) chunks.
#: Conflict-free only for 32-element rows read by 8-byte lanes of different parity; the GEMM
#: and the MoE GEMM use `swizzle_for(block_k)`, which is conflict-free at every block_k.
SWIZZLE = (3, 2, 3)


def swizzle_for(block_k: int, element_bytes: int = 2, read_bytes: int = 8) -> tuple[int, int, int]:
    """The LDS XOR swizzle (bits, base, shift, in elements of `element_bytes`) under which the
    MFMA operand reads (`ds_read_b64`: the 16 lanes of a phase read 16 consecutive rows at one
    8-byte chunk) hit 16 distinct bank pairs, for rows of `block_k` elements. A 128-byte bank
    line holds 128 / row_bytes rows side by side, so the chunk is XORed with the row bits above
    those: byte bits from max(7, log2 row_bytes) up, into the chunk bits from byte bit 3 (at
    most 4 bits: 16 chunks of 8 bytes fill the 32 banks). Rows that are not a power of two get
    SWIZZLE's pattern. For bf16 the copies' `ds_write_b64` stay conflict-free up to block_k 64
    (2-way at 128, where one phase writes one 256-byte row). `read_bytes=16` is the same rule
    for `ds_read_b128` reads (packed MFMA operands, `mfma_layout(pack=2)`): 16-byte chunks stay
    whole, 8 of them to a bank line."""
    if element_bytes not in (1, 2, 4):
        raise ValueError(f"element_bytes={element_bytes!r}: LDS swizzles are for 1, 2 or 4 bytes")
    if read_bytes not in (8, 16):
        raise ValueError(f"read_bytes={read_bytes!r}: LDS operand reads are 8 or 16 bytes")
    log_e = element_bytes.bit_length() - 1
    log_c = read_bytes.bit_length() - 1     # a chunk's byte bits
    base = log_c - log_e                    # a chunk, in elements
    log_k = block_k.bit_length() - 1
    row_bits = log_k + log_e                # log2 of a row's bytes
    if block_k < 1 or 1 << log_k != block_k or row_bits < log_c + 1:
        if read_bytes != 8:
            raise ValueError(f"block_k={block_k!r}: a 16-byte-chunk swizzle needs rows of a "
                             "power of two of at least 32 bytes")
        return (SWIZZLE[0], base, SWIZZLE[2])
    return (min(7 - log_c, row_bits - log_c), base, max(7, row_bits) - log_c)


def _operand_dtype(A, B, instr: str) -> str:
    """The element type A and B share, checked against the MFMA's source types."""
    from argus.isa_cdna3.mfma import mfma

    where = user_loc()
    if A.dtype != B.dtype:
        raise T.DSLError(f"A is {A.dtype} and B is {B.dtype}: the GEMM takes one element type",
                         where, fix="cast one of them, or declare both with the same dtype")
    info = mfma(instr)
    a_type, b_type = info.a_type, info.b_type
    if (a_type, b_type) != (A.dtype, A.dtype):
        raise T.DSLError(f"{instr} multiplies {a_type} by {b_type}, not {A.dtype}", where,
                         fix=f"pick a {A.dtype} MFMA, e.g. {DEFAULT_MFMA.get(A.dtype, MFMA)}")
    return A.dtype


def gemm_program(A, B, C, *, block_m: int, block_n: int, block_k: int, swizzle: bool,
                 split_k: int = 1, instr: str = MFMA, read_swizzled: bool = True,
                 next_slot: Callable | None = None, sync: bool = True,
                 a_fragment: TileSpec | None = None, direct_lds: bool = False,
                 prefetch: int = 1, wave_grid: tuple[int, int] = WAVE_GRID,
                 epilogue_grid: tuple[int, int] | None = None, xcd_order: bool = False,
                 pingpong: str | None = None, early_waves: int = 2):
    """Trace the GEMM body; the keyword hooks default to the correct kernel. `wave_grid`
    (rows, cols) tiles the 4 waves over each MFMA block (the search's `regrid` rewrite);
    `epilogue_grid` is the grid the C store's tile offsets assume (default: `wave_grid`;
    another one is the defect of a regrid that missed the epilogue, which the verifier
    refutes). With split_k > 1, grid axis 2 splits K and each workgroup adds its partial
    tile into C atomically. With direct_lds, A and B go from global memory straight into
    LDS (async copies, one dword per lane in LDS order: `buffer_load_dword ... lds`), one K
    tile ahead; such a copy writes a wave's lanes to consecutive dwords, so under `swizzle`
    each lane copies the element whose swizzled place its dword is. `prefetch` (1 or 2) is how
    many K tiles ahead of the MFMAs the global loads run: with 2, tile kt + 1 rides in
    registers while tile kt + 2 is loaded (K must then hold 2 K tiles per split).
    `xcd_order` puts N on the fastest grid axis (XCD-aware order, see `_grid`).
    `pingpong` splits the waves into two groups that stage the next K tile at opposite ends of
    their MFMAs (the search's `pingpong` rewrite): the first `early_waves` waves store their
    share of it into LDS before computing the current tile, the others after, so one group's
    LDS writes overlap the other's MFMAs. "split" keeps both groups' stores before the loop's
    barrier (the handoff to the next iteration's readers); "late" moves the second group's
    past it, the defect of a ping-pong that lost its handoff barrier (the verifier refutes
    it)."""
    if pingpong not in (None, "split", "late") or not 0 < early_waves < 4:
        raise T.DSLError(f"pingpong={pingpong!r}, early_waves={early_waves!r}: the wave groups "
                         "stage 'split' or 'late', the first group 1 to 3 of the 4 waves",
                         user_loc(), fix="use pingpong=None, 'split' or 'late'")
    if prefetch not in (1, 2):
        raise T.DSLError(f"prefetch={prefetch!r}: the loads run 1 or 2 K tiles ahead",
                         user_loc(), fix="use prefetch=1 or prefetch=2")
    if direct_lds:
        if prefetch != 1:
            raise T.DSLError("prefetch=2 with direct_lds: the async copies run one K tile ahead "
                             "(their LDS slots are the only buffer)", user_loc(),
                             fix="use prefetch=1 with direct_lds=True")
        _direct_lds_program(A, B, C, block_m=block_m, block_n=block_n, block_k=block_k,
                            split_k=split_k, instr=instr, swizzle=swizzle, xcd_order=xcd_order)
        return
    k_first, m0, n0, nk = _grid(A, B, C, block_m, block_n, block_k, split_k, xcd_order)
    a_spec = a_fragment or T.mfma_layout(instr, "a", wave_grid)
    b_spec = T.mfma_layout(instr, "b", wave_grid)
    c_spec = T.mfma_layout(instr, "c", wave_grid)
    stored = T.mfma_layout(instr, "c", epilogue_grid) if epilogue_grid else c_spec
    if block_m % a_spec.shape[0] or block_n % b_spec.shape[0]:
        raise T.DSLError(f"a {block_m}x{block_n} tile is no whole number of {instr}'s blocks "
                         f"over the {wave_grid[0]}x{wave_grid[1]} wave grid "
                         f"({a_spec.shape[0]}x{b_spec.shape[0]})", user_loc(),
                         fix="pick a wave grid whose block divides the tile")
    dtype = _operand_dtype(A, B, instr)
    vector = 16 // DTYPE_BYTES[dtype]            # one 16-byte load per thread per copy
    copy_a = T.copy_layout((block_m, block_k), 4, vector)
    copy_b = T.copy_layout((block_n, block_k), 4, vector)
    sw = swizzle_for(block_k, DTYPE_BYTES[dtype]) if swizzle else None
    a_smem = T.lds((2, block_m, block_k), dtype, swizzle=sw)
    b_smem = T.lds((2, block_n, block_k), dtype, swizzle=sw)
    a_read = a_smem if read_swizzled else a_smem.view(T.lds_layout((2, block_m, block_k)))
    next_slot = next_slot or (lambda kt: (kt + 1) % 2)

    def compute(slot, kt, acc):
        return compute_k_tile(a_read, b_smem, slot, k_first + kt, acc, a_spec, b_spec,
                              block_k, instr)

    def load(kt):
        return (A.load((m0, (k_first + kt) * block_k), copy_a),
                B.load((n0, (k_first + kt) * block_k), copy_b))

    def stage(slot, tiles):
        a_smem.store((slot, 0, 0), tiles[0])
        b_smem.store((slot, 0, 0), tiles[1])

    def stage_group(slot, tiles, early: bool):
        # each wave stores the share of the copy layout it loaded, so the two groups' shares
        # partition the slot; only one group's waves take part (the exec mask)
        with T.lanes(lambda wave, lane: wave < early_waves if early else wave >= early_waves):
            stage(slot, tiles)

    stage(0, load(0))
    acc = _zero_accumulators(m0, n0, block_m, block_n, a_spec, b_spec, c_spec)
    carried = {"acc": acc}
    if prefetch == 2:
        T.assume(nk >= 2)
        carried["a_ahead"], carried["b_ahead"] = load(1)
    T.barrier()
    # The last `prefetch` K tiles are consumed after the loop, so every iteration can load
    # tile kt + prefetch without a branch. One barrier per iteration suffices: iteration kt
    # writes the slot that iteration kt-1 read, and that read ended before kt-1's barrier.
    loop = T.range(0, nk - prefetch, stages=2, name="kt", **carried)
    for kt in loop:
        if prefetch == 2:
            staged, later = (loop.a_ahead, loop.b_ahead), load(kt + 2)
        else:
            staged = load(kt + 1)
        if pingpong:
            stage_group(next_slot(kt), staged, early=True)
        loop.acc = compute(kt % 2, kt, dict(loop.acc))
        if pingpong == "split":
            stage_group(next_slot(kt), staged, early=False)
        elif not pingpong:
            stage(next_slot(kt), staged)
        if prefetch == 2:
            loop.a_ahead, loop.b_ahead = later
        if sync:
            T.barrier()
        if pingpong == "late":
            stage_group(next_slot(kt), staged, early=False)
    acc = dict(loop.acc)
    if prefetch == 2:
        kt = nk - 2
        acc = compute(kt % 2, kt, acc)
        stage((kt + 1) % 2, (loop.a_ahead, loop.b_ahead))
        T.barrier()
    last = nk - 1
    _store(C, compute(last % 2, last, acc), m0, n0, stored, split_k)


def _grid(A, B, C, block_m, block_n, block_k, split_k, xcd_order=False):
    """Assumptions, grid and tags; (first K tile of this workgroup, m0, n0, K tiles each).
    The dispatcher deals workgroups to the XCDs round-robin by flat id (x fastest), so ids a
    multiple of 8 apart share one XCD's L2 (`perf.model.past_l2`). By default M is the fastest
    axis; `xcd_order` puts N first, so the tiles of one column block of B, ids tiles_n apart,
    run on one XCD when tiles_n is a multiple of 8 (B is then fetched past the L2s once, A once
    per XCD: the better order when B is the larger operand, M small). A flat (xcd, slot)
    remap would also align ragged grids, but splitting its tile id into (m, n) divides by the
    run-time tile count, which the backend does not lower (it divides by powers of two)."""
    M, K = A.shape
    N = B.shape[0]
    for extent, block in ((M, block_m), (N, block_n), (K, block_k * split_k)):
        T.assume((extent % block).eq(0))
    tiles_m, tiles_n = M // block_m, N // block_n
    if xcd_order:
        T.grid(tiles_n, tiles_m, split_k) if split_k > 1 else T.grid(tiles_n, tiles_m)
        split = T.program_id(2) if split_k > 1 else None
        pid_n, pid_m = T.program_id(0), T.program_id(1)
    else:
        T.grid(tiles_m, tiles_n, split_k) if split_k > 1 else T.grid(tiles_m, tiles_n)
        split = T.program_id(2) if split_k > 1 else None
        pid_m, pid_n = T.program_id(0), T.program_id(1)
    # this split's first K tile
    k_first = split * (K // (block_k * split_k)) if split is not None else 0
    T.tag(A, lambda m, k: {"row": m, "k": k})
    T.tag(B, lambda n, k: {"col": n, "k": k})
    T.tag(C, lambda m, n: {"row": m, "col": n})
    return k_first, pid_m * block_m, pid_n * block_n, K // (block_k * split_k)


def compute_k_tile(a_read, b_read, slot, k_tile, acc, a_spec, b_spec, block_k, instr,
             assertion: tuple[Callable, str] | None = None):
    """One K tile's MFMAs from LDS slot `slot`, asserting at each that A and B meet at one k
    of it (`assertion`: another (predicate, statement) pair, e.g. the MoE GEMM's)."""
    predicate, statement = assertion or (
        lambda A, B, C: And(A.k.eq(B.k), (A.k // block_k).eq(k_tile), A.row.eq(C.row),
                            B.col.eq(C.col)),
        "A and B meet at one k of this K tile, on C's row and column")
    reps_m = max(r for r, _ in acc) + 1
    reps_n = max(s for _, s in acc) + 1
    for ks in range(block_k // a_spec.shape[1]):
        k0 = ks * a_spec.shape[1]
        a = [a_read.load((slot, r * a_spec.shape[0], k0), a_spec) for r in range(reps_m)]
        b = [b_read.load((slot, s * b_spec.shape[0], k0), b_spec) for s in range(reps_n)]
        for (r, s), c in acc.items():
            acc[r, s] = T.mfma(instr, a[r], b[s], c)
            T.tag_assert(predicate, statement)
    return acc


def _zero_accumulators(m0, n0, block_m, block_n, a_spec, b_spec, c_spec):
    acc = {}
    for r in range(block_m // a_spec.shape[0]):
        for s in range(block_n // b_spec.shape[0]):
            rows, cols = m0 + r * c_spec.shape[0], n0 + s * c_spec.shape[1]
            acc[r, s] = T.tag(T.zeros(c_spec),
                              lambda i, j, rows=rows, cols=cols: {"row": rows + i,
                                                                  "col": cols + j})
    return acc


def _store(C, acc, m0, n0, c_spec, split_k):
    for (r, s), c in acc.items():
        origin = (m0 + r * c_spec.shape[0], n0 + s * c_spec.shape[1])
        if split_k > 1:
            C.atomic_add(origin, c)
        else:
            C.store(origin, c)
        T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.col.eq(D.col)),
                     "each C element lands on its own row and column")


def dma_copy_layout(shape: tuple[int, int], waves: int,
                    swizzle: tuple[int, int, int] | None) -> TileSpec:
    """The copy layout of an async (DMA) copy into LDS swizzled by `swizzle`: one dword (two
    bf16) per lane, lane l of a slot landing at the l-th dword of that slot's run in LDS order
    (`buffer_load_dword ... lds` writes lane l at M0 + 4 l). The lane holds the tile element
    whose swizzled LDS position that is: the swizzle is an involution that keeps the low
    `base` >= 1 bits, so it maps the LDS positions back to the elements and keeps each dword's
    two elements together. Without a swizzle this is `copy_layout(shape, waves, 2)`."""
    rows, cols = shape
    if swizzle is None:
        return T.copy_layout(shape, waves, 2)
    if swizzle[1] < 1:
        raise T.DSLError(f"swizzle {swizzle}: a DMA copy moves dwords, so the swizzle must keep "
                         "the low element bit (base >= 1)", user_loc())
    base = T.copy_layout(shape, waves, 2)          # validates the shape
    wave, lane, slot = thread_vars(waves, base.layout.slots)
    threads = waves * LANES
    position = ((slot // 2) * threads + wave * LANES + lane) * 2 + slot % 2
    element = Swizzle(*swizzle)(position)
    return TileSpec(shape, ThreadLayout(waves, base.layout.slots,
                                        (element // cols, element % cols)))


def _direct_lds_program(A, B, C, *, block_m, block_n, block_k, split_k, instr, swizzle=False,
                        xcd_order=False):
    """The GEMM with A and B tiles copied global -> LDS by async copies, one K tile ahead:
    copy tile kt+1 into the other slot, wait until only that group is in flight (tile kt has
    landed for this wave), barrier (and for every wave), compute tile kt, barrier (every wave
    is done reading the slot the next copy overwrites). With `swizzle` the LDS tiles are
    XOR-swizzled as in the register-staged GEMM (`swizzle_for`) and each lane copies the
    element that lands at its dword (`dma_copy_layout`), so the MFMA operand reads are
    conflict-free."""
    k_first, m0, n0, nk = _grid(A, B, C, block_m, block_n, block_k, split_k, xcd_order)
    a_spec = T.mfma_layout(instr, "a", WAVE_GRID)
    b_spec = T.mfma_layout(instr, "b", WAVE_GRID)
    c_spec = T.mfma_layout(instr, "c", WAVE_GRID)
    sw = swizzle_for(block_k) if swizzle else None
    copy_a = dma_copy_layout((block_m, block_k), 4, sw)
    copy_b = dma_copy_layout((block_n, block_k), 4, sw)
    a_smem = T.lds((2, block_m, block_k), "bf16", swizzle=sw)
    b_smem = T.lds((2, block_n, block_k), "bf16", swizzle=sw)

    def fetch(kt, slot):
        T.async_copy(a_smem, (slot, 0, 0), A, (m0, (k_first + kt) * block_k), copy_a)
        T.async_copy(b_smem, (slot, 0, 0), B, (n0, (k_first + kt) * block_k), copy_b)
        T.commit_group()

    fetch(0, 0)
    acc = _zero_accumulators(m0, n0, block_m, block_n, a_spec, b_spec, c_spec)
    loop = T.range(0, nk - 1, stages=2, name="kt", acc=acc)
    for kt in loop:
        fetch(kt + 1, (kt + 1) % 2)
        T.wait_group(1)
        T.barrier(wait=False)
        loop.acc = compute_k_tile(a_smem, b_smem, kt % 2, k_first + kt, dict(loop.acc),
                                  a_spec, b_spec, block_k, instr)
        T.barrier(wait=False)
    T.wait_group(0)
    T.barrier(wait=False)
    last = nk - 1
    acc = compute_k_tile(a_smem, b_smem, last % 2, k_first + last, dict(loop.acc), a_spec,
                         b_spec, block_k, instr)
    _store(C, acc, m0, n0, c_spec, split_k)


@T.kernel(waves=4)
def gemm(A: Tensor("bf16", "M", "K"), B: Tensor("bf16", "N", "K"), C: Tensor("f32", "M", "N"),
         *, block_m: int = 64, block_n: int = 64, block_k: int = 32, swizzle: bool = True,
         split_k: int = 1, instr: str = MFMA, direct_lds: bool = False, prefetch: int = 1,
         xcd_order: bool = False):
    """C = A @ B.T in bf16 with f32 accumulation. block_m and block_n are multiples of 64 and
    block_k of 8, with block_m * block_k and block_n * block_k multiples of 2048 (one 16-byte
    vector per thread per copy). split_k > 1 splits K over grid axis 2 and accumulates into C
    with atomic adds (C must start at zero). `instr` picks the bf16 MFMA (32x32x8 or 16x16x16;
    block sizes must then be multiples of the 2x2 wave grid's fragment). `direct_lds` copies A
    and B global -> LDS without registers (`buffer_load_dword ... lds`; with `swizzle` each lane
    copies the element whose swizzled LDS dword it writes). `prefetch=2` runs the global loads
    two K tiles ahead (the next tile in registers; K must hold two K tiles per split).
    `xcd_order` runs the tiles N fastest, so that those sharing a column block of B run on
    one XCD when N / block_n is a multiple of 8."""
    gemm_program(A, B, C, block_m=block_m, block_n=block_n, block_k=block_k, swizzle=swizzle,
                 split_k=split_k, instr=instr, direct_lds=direct_lds, prefetch=prefetch,
                 xcd_order=xcd_order)


def _typed_gemm(dtype: str, label: str):
    """The GEMM with `dtype` operands (f32 accumulation, C in f32); its MFMA (`instr`) is one
    of that type's, the 32x32 one by default."""
    default = DEFAULT_MFMA[dtype]

    def typed(A: Tensor(dtype, "M", "K"), B: Tensor(dtype, "N", "K"),
              C: Tensor("f32", "M", "N"), *, block_m: int = 64, block_n: int = 64,
              block_k: int = 64, swizzle: bool = True, split_k: int = 1, instr: str = default,
              prefetch: int = 1, xcd_order: bool = False):
        gemm_program(A, B, C, block_m=block_m, block_n=block_n, block_k=block_k,
                     swizzle=swizzle, split_k=split_k, instr=instr, prefetch=prefetch,
                     xcd_order=xcd_order)

    typed.__name__ = typed.__qualname__ = f"gemm_{dtype}"
    typed.__doc__ = (f"C = A @ B.T with {label} A and B, f32 accumulation and C, as `gemm` "
                     f"(the same 2x2 wave grid, swizzled double-buffered LDS, prefetch and "
                     f"split-K, the XCD-aware `xcd_order`); copies move 16 bytes "
                     f"({16 // DTYPE_BYTES[dtype]} elements) per thread, so block_m * block_k "
                     f"and block_n * block_k must be multiples of "
                     f"{256 * 16 // DTYPE_BYTES[dtype]}. `instr` is a {dtype} x {dtype} MFMA "
                     f"(default {default}).")
    return T.kernel(waves=4)(typed)


gemm_f16 = _typed_gemm("f16", "IEEE half (f16)")
gemm_fp8 = _typed_gemm("fp8", "gfx942 fp8 (e4m3fnuz)")
gemm_bf8 = _typed_gemm("bf8", "gfx942 bf8 (e5m2fnuz)")


#: gfx942's limits a GEMM tile must fit whatever the shape: 64 KiB of LDS per workgroup, 512
#: VGPRs + AGPRs per lane
LDS_BYTES, REGISTERS = 64 * 1024, 512


def gemm_infeasible(params: dict) -> str:
    """Why a point of the GEMM's declared space can never be built, at any shape ("" if it
    can): the limits its trace hits, stated here so the search space counts only buildable
    points (`argus.search.space.every_candidate` leaves these out)."""
    bm, bn, bk = params["block_m"], params["block_n"], params["block_k"]
    element = DTYPE_BYTES["bf16"]
    lds = 2 * (bm + bn) * bk * element               # A and B tiles, double-buffered
    if lds > LDS_BYTES:
        return (f"{bm}x{bn}x{bk}: the double-buffered A and B tiles take {lds} bytes of LDS, "
                f"past gfx942's {LDS_BYTES}")
    vector = 16 // element                           # one 16-byte copy per thread
    if min(bm, bn) * bk < 4 * LANES * vector:
        return (f"{min(bm, bn)}x{bk}: fewer elements than 256 threads x {vector} (one 16-byte "
                "copy each); the register-staged copies do not split narrower")
    if bm * bn // (4 * LANES) >= REGISTERS // 2:
        return (f"{bm}x{bn}: the f32 accumulators alone take {bm * bn // (4 * LANES)} "
                f"registers per lane; with the operands and staged copies past {REGISTERS}")
    return ""


@functools.cache
def gemm_rewritten(wave_grid: tuple[int, int] = WAVE_GRID,
                   epilogue_grid: tuple[int, int] | None = None,
                   pingpong: str | None = None, early_waves: int = 2) -> T.KernelDef:
    """`gemm` (same arguments and knobs) under the search's trace-level rewrites
    (`argus.search.rewrites.TRACE_REWRITES`): its MFMA wave grid, the grid its epilogue's
    tile offsets assume and its wave groups' ping-pong staging."""

    def gemm(A: Tensor("bf16", "M", "K"), B: Tensor("bf16", "N", "K"),
             C: Tensor("f32", "M", "N"), *, block_m: int = 64, block_n: int = 64,
             block_k: int = 32, swizzle: bool = True, split_k: int = 1, instr: str = MFMA,
             direct_lds: bool = False, prefetch: int = 1, xcd_order: bool = False):
        if direct_lds:
            raise T.DSLError("a regridded or ping-pong GEMM stages through registers "
                             "(direct_lds=False)", user_loc(),
                             fix="drop the regrid or pingpong rewrite, or direct_lds")
        gemm_program(A, B, C, block_m=block_m, block_n=block_n, block_k=block_k,
                     swizzle=swizzle, split_k=split_k, instr=instr, prefetch=prefetch,
                     wave_grid=wave_grid, epilogue_grid=epilogue_grid, xcd_order=xcd_order,
                     pingpong=pingpong, early_waves=early_waves)

    return T.kernel(waves=4)(gemm)


def reference(A, B):
    import numpy as np

    return np.asarray(A, np.float32) @ np.asarray(B, np.float32).T

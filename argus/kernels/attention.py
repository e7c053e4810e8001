"""Flash-attention forward, bf16, head dim 64 or 128, online softmax, optional causal mask,
any query and key lengths (a key/value cache longer than the queries, as in decoding).

Each of the 4 waves (8 in the grouped-query kernel) owns 32 query rows; key/value blocks of 32
are loaded cooperatively into XOR-swizzled, double-buffered LDS (one barrier per block; V
transposed, so that the PV GEMM reads whole registers of consecutive keys) and read by all
waves. The kernel
computes S^T = K Q^T so that the f32 accumulator, cast to bf16, is already the B operand of
O^T = V^T P^T (register slots 4t..4t+3 hold k-step t): no LDS round trip for P. Softmax
statistics are per query column, reduced across the two lane halves of each wave.

Lengths need not be multiples of the tiles: every global access is guarded (rows past the end
read 0 and are not written) and the last key block, the only one that may run past the keys,
masks them. The causal mask is aligned bottom-right, as for a cache: query i sees keys
j <= i + SK - SQ, so the last query sees every key (SK >= SQ is assumed, so that every query
sees key 0). With SK == SQ it is the usual lower triangle.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

import argus.lang as T
from argus.ir.expr import And, Or, min_, simplify
from argus.ir.types import AddressMap, coord_vars
from argus.isa_cdna3.mfma import mfma
from argus.lang import Tensor
from argus.lang.errors import user_loc

MFMA = "v_mfma_f32_32x32x8_bf16"
INFO = mfma(MFMA)
MK, KPL = INFO.k, INFO.k_per_lane           # k per instruction, k elements per lane
WAVES = 4
BLOCK_Q = INFO.n * WAVES                    # one MFMA column block of queries per wave
#: grouped-query attention's waves: 256 queries per workgroup, as AMD's fmha kernels, so each
#: K/V block staged in LDS serves twice the queries (half the K/V traffic per query)
GQA_WAVES = 8
BLOCK_KV = INFO.m                           # one MFMA row block of keys per step
LOG2E = 1.4426950408889634


def _check_options(head_dim: int, prefetch: int, unroll: int, waves: int) -> None:
    least = 64 * waves // WAVES
    if head_dim < least or head_dim & (head_dim - 1):
        raise T.DSLError(f"head_dim {head_dim} is not supported with {waves} waves: use a power "
                         f"of two >= {least} (the K/V copy gives each of the {64 * waves} "
                         "threads whole 16-byte vectors)", user_loc())
    if prefetch not in (1, 2, 3):
        raise T.DSLError(f"prefetch={prefetch!r}: the loads run 1, 2 or 3 key blocks ahead",
                         user_loc())
    if unroll not in (1, 2, 4):
        raise T.DSLError(f"unroll={unroll!r}: the key loop is unrolled 1, 2 or 4 times (the "
                         "backend splits trip counts by powers of two)", user_loc())


def _masked(s, edges):
    """The scores with each mask's elements set to -inf, inside a branch taken only by the
    blocks one of the masks cuts; `edges` holds (block condition, element condition, the tag
    fact the kept elements satisfy) per mask."""
    if not edges:
        return s
    with T.when(Or(*(block for block, _, _ in edges)), s=s) as diagonal:
        diagonal.s = T.mask(diagonal.s, lambda i, j: And(*(c(i, j) for _, c, _ in edges)),
                            -math.inf)
        T.tag_assert(lambda X: And(*(fact(X) for _, _, fact in edges)),
                     "the masks keep key <= query + SK - SQ (causal) and key < SK (last)")
    return diagonal.s


def _end_trip(loop, ahead: tuple, later, sync: bool) -> None:
    """The end of a key-block trip: the blocks fetched ahead move one place nearer (`later`,
    fetched this trip, takes the last place), then the barrier when the loop synchronises."""
    if ahead:
        for name, nearer in zip(ahead, ahead[1:]):
            setattr(loop, name, getattr(loop, nearer))
        setattr(loop, ahead[-1], later)
    if sync:
        T.barrier()


def _key_loop(state: dict, blocks, fetch, stage, attend, *, prefetch: int, unroll: int,
              sync: bool):
    """Blocks 0 .. blocks-2 of keys, software-pipelined: block 0 is staged in LDS before the
    loop; blocks 1 .. prefetch-1 ride in registers (`ahead{d}` holds block kb + d in iteration
    kb), and each iteration issues the loads of block kb + prefetch before block kb's GEMMs
    and softmax. The loop (its carried values) is returned for the last block."""
    stage(0, fetch(0))
    carried = dict(state)
    ahead = [f"ahead{d}" for d in range(1, prefetch)]
    for d, name in enumerate(ahead, 1):
        carried[name] = fetch(d)
    T.barrier()
    loop = T.range(0, blocks - 1, stages=2, unroll=unroll, name="kb", **carried)
    for kb in loop:
        if ahead:
            staged, later = getattr(loop, ahead[0]), fetch(kb + prefetch)
        else:
            staged = fetch(kb + 1)
        for name, value in attend({name: getattr(loop, name) for name in state}, kb,
                                  kb % 2, last=False).items():
            setattr(loop, name, value)
        stage((kb + 1) % 2, staged)
        _end_trip(loop, ahead, later if ahead else None, sync)
    return loop


def _overlapped_loop(state: dict, blocks, fetch_k, fetch_v, k_smem, v_smem, score_steps, run,
                     attend, *, prefetch: int, unroll: int, sync: bool):
    """The key loop of `overlap`: iteration kb holds block kb's scores (carried as `s`),
    computes block kb + 1's between block kb's softmax ops, and stages K of block kb + 2 and
    V of block kb + 1. K thus rides one block ahead of V in the same two LDS slots each:
    K(kb + 2) goes to K's slot kb % 2, whose K(kb) all waves read in iteration kb - 1 (the
    prologue's barrier after the scores of block 0 covers kb = 0); V(kb + 1) to V's slot
    (kb + 1) % 2, read as V(kb - 1) in iteration kb - 1. Block 0's scores are computed before
    the loop, its last block's softmax after it. The loads of a staged pair run `prefetch`
    iterations ahead (2: one more pair in registers, `ahead1`), as in `_key_loop`."""
    def fetch(j):                     # what iteration j - 1 stages: K(j + 1) and V(j)
        return fetch_k(j + 1), fetch_v(j)

    k_smem.store((0, 0, 0), fetch_k(0))
    first = fetch(0)
    k_smem.store((1, 0, 0), first[0])
    v_smem.store((0, 0, 0), first[1])
    ahead = [f"ahead{d}" for d in range(1, prefetch)]
    carried = dict(state)
    for d, name in enumerate(ahead, 1):
        carried[name] = fetch(d)
    T.barrier()
    carried["s"] = run(score_steps(0, False))
    if sync:
        T.barrier()
    # the softmax's VALU runs are long: fillers for the next scores' MFMA shadows are looked
    # for twice the default distance down the body (hd128 b=1 h=64 s=1024 grouped: 64.3 ->
    # 61.9 us modelled; 160 gives the same)
    loop = T.range(0, blocks - 1, stages=2, unroll=unroll, name="kb", hints=("fill_window=96",),
                   **carried)
    for kb in loop:
        if ahead:
            (k_next, v_next), later = getattr(loop, ahead[0]), fetch(kb + prefetch)
        else:
            k_next, v_next = fetch(kb + 1)
        out = attend({name: getattr(loop, name) for name in state}, kb, None, last=False,
                     s=loop.s, next_scores=score_steps((kb + 1) % 2, False), v_slot=kb % 2)
        for name, value in out.items():
            setattr(loop, name, value)
        k_smem.store((kb % 2, 0, 0), k_next)
        v_smem.store(((kb + 1) % 2, 0, 0), v_next)
        _end_trip(loop, ahead, later if ahead else None, sync)
    return loop


def attention_program(Q, K, V, O, *, head_dim: int, causal: bool,
                      keep: Callable | None = None, tail: Callable | None = None,
                      drop: tuple[str, ...] = ("key",), sync: bool = True, prefetch: int = 1,
                      unroll: int = 1, rounding: str = "rne", grouped: bool = False,
                      waves: int = WAVES, xcd_order: bool = False, overlap: bool = False):
    """Trace the attention body. Hooks for tests: `keep(kv0, q0, i, j)` is the causal mask's
    condition on (key, query) coordinates; `tail(kv0, i, keys)` the last block's condition on
    key rows; `drop` names the tags the softmax reductions drop; `sync=False` leaves out the
    barrier after each K/V block is staged. `prefetch` is how many key blocks ahead the loads
    run (1: block j+1 is loaded while block j is computed; 2: block j+2, one more block of K
    and V in registers; 3: block j+3, two more). `unroll` (1, 2 or 4) is the key loop's unroll
    hint: copies of the block per machine iteration, so the scheduler can overlap one block's
    softmax with the next block's MFMAs (under `interleave` the loop is unrolled at least by
    its 2 LDS stages).
    `rounding` is how P and O are narrowed to bf16: "rne" (nearest even) or "rtz" (truncated,
    as AMD's default fmha_v3 kernels do; their `_rtne` variants round like "rne").
    `waves` (4 or 8) each own 32 query rows of the workgroup's tile.
    `grouped` (grouped-query attention): Q and O are (BH, G, S, D), the G query heads of group
    bh sharing K and V head bh; the grid's fastest axis runs over G, so the workgroups of one
    group are dispatched together and read the same K/V lines.
    A causal grid dispatches its query tiles heaviest first, every head's last tile before any
    head's second-to-last: the last tiles see the most keys, and dispatched first they leave
    the light ones to fill the CUs that free up (longest job first), where in order the
    heaviest tiles of the last heads would start last and finish alone.
    `xcd_order` (XCD-aware order) puts the key/value head bh on the fastest grid axis: the
    dispatcher deals workgroups to the 8 XCDs round-robin by flat id, so the workgroups of one
    head (all its query heads and tiles), ids a multiple of BH apart, read K and V through one
    XCD's L2 when BH is a multiple of 8, where the default order spreads them over every XCD
    (a causal grid without groups already runs heads fastest).
    `overlap` computes the scores of key block kb + 1 in the iteration of block kb, their MFMAs
    interleaved with block kb's softmax (the two are independent), so the matrix core works
    while the VALUs do the softmax; K is then staged one block ahead of V (see
    `_overlapped_loop`)."""
    _check_options(head_dim, prefetch, unroll, waves)
    block_q = INFO.n * waves
    if grouped:
        BH, G, SQ, D = Q.shape
    else:
        BH, SQ, D = Q.shape
    SK = K.shape[1]
    shift = simplify(SK - SQ)                 # 0 when the keys are the queries
    keep = keep or (lambda kv0, q0, i, j: kv0 + i <= q0 + j + shift)
    tail = tail or (lambda kv0, i, keys: kv0 + i < keys)
    T.assume(D.eq(head_dim))
    if causal:
        T.assume(SK >= SQ)
    tiles = T.cdiv(SQ, block_q)
    # grid axes, fastest first: the query heads of a group (they read the same K/V lines at
    # once), then heads before query tiles under a causal mask (longest job first, see above)
    if grouped and xcd_order:
        T.grid(BH, G, tiles)
        bh, g, tile = T.program_id(0), T.program_id(1), T.program_id(2)
    elif grouped and causal:
        T.grid(G, BH, tiles)
        g, bh, tile = T.program_id(0), T.program_id(1), T.program_id(2)
    elif grouped:
        T.grid(G, tiles, BH)
        g, tile, bh = T.program_id(0), T.program_id(1), T.program_id(2)
    elif causal or xcd_order:
        T.grid(BH, tiles)
        bh, tile = T.program_id(0), T.program_id(1)
    else:
        T.grid(tiles, BH)
        tile, bh = T.program_id(0), T.program_id(1)
    if grouped:
        T.tag(Q, lambda h, gq, q, d: {"head": h, "qhead": gq, "query": q, "d": d})
        T.tag(O, lambda h, gq, q, d: {"head": h, "qhead": gq, "query": q, "dv": d})
    else:
        T.tag(Q, lambda h, q, d: {"head": h, "query": q, "d": d})
        T.tag(O, lambda h, q, d: {"head": h, "query": q, "dv": d})
    q0 = (tiles - 1 - tile if causal else tile) * block_q
    T.tag(K, lambda h, kv, d: {"head": h, "key": kv, "d": d})
    T.tag(V, lambda h, kv, d: {"head": h, "key": kv, "dv": d})
    # where a query tile lives in Q and O, and the axes its fragments span
    at, axes = ((bh, g), (2, 3)) if grouped else ((bh,), (1, 2))
    head = {"qhead": g} if grouped else {}

    grid = (1, waves)
    k_frag = T.mfma_layout(MFMA, "a", grid)        # (32 keys, 8 d), shared by all waves
    q_frag = T.mfma_layout(MFMA, "b", grid)        # (128 queries, 8 d)
    scores = T.mfma_layout(MFMA, "c", grid)        # S^T: (32 keys, 128 queries)
    column = T.reduced(scores, 0)                  # one value per query
    v_frag = k_frag.permute((1, 0))                # V^T fragment as (8 keys, 32 dv) in LDS order
    p_frag = q_frag                                # P^T fragment: (128 queries, 8 keys)
    d_steps, kv_steps, d_blocks = head_dim // MK, BLOCK_KV // MK, head_dim // INFO.m
    scale = LOG2E / math.sqrt(head_dim)

    copy = T.copy_layout((BLOCK_KV, head_dim), waves, 8)
    # rows are head_dim elements: XOR the row (mod 8) into the 4-element chunk index
    swizzle = (3, 2, int(math.log2(head_dim)) - 2)
    k_smem = T.lds((2, BLOCK_KV, head_dim), "bf16", swizzle=swizzle)
    # V is staged transposed (each feature's keys contiguous), so that a lane's 4 keys of the
    # V^T fragment are one 8-byte read; the 4-key groups are XOR-permuted by bits of the
    # feature, which spreads the 16-bit stores over 16 banks and the reads over all 32
    slot_, key, feature = coord_vars((2, BLOCK_KV, head_dim))
    groups = ((feature >> 1) ^ (feature >> 3)) & (BLOCK_KV // 4 - 1)
    v_smem = T.lds((2, BLOCK_KV, head_dim), "bf16", addr=AddressMap(
        (2, BLOCK_KV, head_dim),
        (slot_ * head_dim + feature) * BLOCK_KV + (key ^ (groups << 2))))

    def fetch(kb):
        return (K.load((bh, kb * BLOCK_KV, 0), copy, axes=(1, 2), guard=True),
                V.load((bh, kb * BLOCK_KV, 0), copy, axes=(1, 2), guard=True))

    def stage(slot, tiles):
        k_smem.store((slot, 0, 0), tiles[0])
        v_smem.store((slot, 0, 0), tiles[1])

    def score_steps(slot, inside):
        """S^T = K Q^T of the K block in LDS slot `slot`, one MFMA per step (a generator, so
        that `attend` can interleave the steps with other work); `inside`: the block lies
        inside the keys (it is not the last)."""
        s = T.zeros(scores)
        for t in range(d_steps):
            s = T.mfma(MFMA, k_smem.load((slot, 0, MK * t), k_frag), q[t], s)
            T.tag_assert(lambda A, B, C: And(A.d.eq(B.d), A.head.eq(B.head)),
                         "K and Q meet at the same head and feature")
            if inside:
                T.tag_assert(lambda A, B, C: A.key < SK,
                             "blocks before the last lie inside the keys")
            yield s

    def run(steps, n=None):
        """Trace up to `n` (all, when None) further steps of `steps`; the last tile or None."""
        out = None
        for _ in range(d_steps if n is None else n):
            tile = next(steps, None)
            if tile is None:
                break
            out = tile
        return out

    def attend(state, kb, slot, last, s=None, next_scores=None, v_slot=None):
        """One key/value block: scores (unless given as `s`), online softmax, and
        O^T += V^T P^T. Only the `last` block may hold keys past SK. `next_scores` (steps
        of the next block's scores) are traced between the softmax's ops, and their tile
        returned in state["s"]; `v_slot` is V's LDS slot when it is not `slot`."""
        kv0 = kb * BLOCK_KV
        v_slot = slot if v_slot is None else v_slot
        if s is None:
            s = run(score_steps(slot, not last))
        spread = next_scores is not None
        pending = next_scores if spread else iter(())
        ahead = None

        def tick(weight):
            """Trace `weight` sixteenths of the next block's MFMAs before the softmax op that
            follows: the backend fills each MFMA's shadow with the VALU instructions after it
            (`schedule._fill_mfma_shadows`). Two before each of the first five ops and the
            rest before the bf16 cast was the fastest modelled spread tried at hd128 (b=1
            h=64 s=1024 grouped: 67.3 us; all 16 at the end 69.4, weighted late 74.9)."""
            nonlocal ahead
            got = run(pending, max(1, round(weight * d_steps / 16)))
            ahead = got if got is not None else ahead

        masks = causal or last
        if not masks:
            tick(2)
        s = s * scale
        edges = []                    # (block condition, element condition, tag fact) per mask
        if causal:
            edges.append((kv0 + BLOCK_KV - 1 > q0 + shift, lambda i, j: keep(kv0, q0, i, j),
                          lambda X: X.key <= X.query + shift))
        if last:
            edges.append((kv0 + BLOCK_KV > SK, lambda i, j: tail(kv0, i, SK),
                          lambda X: X.key < SK))
        s = _masked(s, edges)
        # the mask's branch ends a scheduling region: its share goes after it
        tick(4 if masks else 2)
        m_new = T.maximum(state["m"], T.reduce(s, "max", 0, column, drop=drop))
        T.tag_assert(lambda X, Y: X.query.eq(Y.query), "running max of the same query")
        tick(2)
        alpha = T.exp2(state["m"] - m_new)
        p = s - T.broadcast(m_new, 0, scores)
        T.tag_assert(lambda X, Y: X.query.eq(Y.query), "scores shifted by their own query's max")
        tick(2)
        p = T.exp2(p)
        tick(2)
        state["l"] = state["l"] * alpha + T.reduce(p, "sum", 0, column, drop=drop)
        state["m"] = m_new
        rescale = T.broadcast(alpha, 0, scores)

        def pv(acc, b, t, p16):
            v = v_smem.load((v_slot, MK * t, INFO.m * b), v_frag)
            acc = T.mfma(MFMA, v, p16, acc)
            T.tag_assert(lambda A, B, C: And(A.key.eq(B.key), A.dv.eq(C.dv),
                                             B.query.eq(C.query), A.head.eq(C.head)),
                         "V and P meet at the same key, on O's feature and query")
            if overlap and not last:
                # the scores came from the previous iteration, computed where the block
                # could still be the last: its keys are checked here instead
                T.tag_assert(lambda A, B, C: A.key < SK,
                             "blocks before the last lie inside the keys")
            return acc

        if not overlap:
            p16 = p.to("bf16", rounding)
            outputs = []
            for b, acc in enumerate(state["o"]):
                acc = acc * rescale
                for t in range(kv_steps):
                    acc = pv(acc, b, t, T.slots(p16, KPL * t, p_frag))
                outputs.append(acc)
            state["o"] = outputs
            return state
        # overlapped: the rest of the next block's scores beside O's rescaling, then P cast to
        # bf16 one k-step at a time, each step's cast beside the previous step's P V MFMAs
        outputs = [acc * rescale for acc in state["o"]]
        tick(16)
        if spread:
            state["s"] = ahead
        step = T.slots(p, KPL * 0, p_frag).to("bf16", rounding)
        for t in range(kv_steps):
            outputs = [pv(acc, b, t, step) for b, acc in enumerate(outputs)]
            if t + 1 < kv_steps:
                step = T.slots(p, KPL * (t + 1), p_frag).to("bf16", rounding)
        state["o"] = outputs
        return state

    q = [Q.load((*at, q0, MK * t), q_frag, axes=axes, guard=True) for t in range(d_steps)]
    # the running statistics carry every tag the scores do (the query head too, when grouped):
    # a tag the loop's first value lacks is unknown after the loop joins its iterations
    state = {"m": T.tag(T.full(column, -math.inf), lambda j: {"query": q0 + j, **head}),
             "l": T.tag(T.zeros(column), lambda j: {"query": q0 + j, **head}),
             "o": [T.tag(T.zeros(scores), lambda i, j, b=b: {
                 "head": bh, "dv": INFO.m * b + i, "query": q0 + j, **head})
                 for b in range(d_blocks)]}
    # the keys this query block sees: all of them, or (causal) up to its last query's diagonal
    seen = min_(SK, q0 + block_q + shift) if causal else SK
    blocks = T.cdiv(seen, BLOCK_KV)
    if overlap:
        def fetch_k(kb):
            return K.load((bh, kb * BLOCK_KV, 0), copy, axes=(1, 2), guard=True)

        def fetch_v(kb):
            return V.load((bh, kb * BLOCK_KV, 0), copy, axes=(1, 2), guard=True)

        loop = _overlapped_loop(state, blocks, fetch_k, fetch_v, k_smem, v_smem, score_steps,
                                run, attend, prefetch=prefetch, unroll=unroll, sync=sync)
        state = attend({name: getattr(loop, name) for name in state}, blocks - 1, None,
                       last=True, s=loop.s, v_slot=(blocks - 1) % 2)
    else:
        loop = _key_loop(state, blocks, fetch, stage, attend, prefetch=prefetch, unroll=unroll,
                         sync=sync)
        state = attend({name: getattr(loop, name) for name in state}, blocks - 1,
                       (blocks - 1) % 2, last=True)
    inverse = T.broadcast(T.rcp(state["l"]), 0, scores)
    for b, acc in enumerate(state["o"]):
        out = (acc * inverse).to("bf16", rounding)
        O.store((*at, q0, INFO.m * b), out, axes=axes[::-1], guard=True)
        T.tag_assert(lambda V, D: And(V.query.eq(D.query), V.dv.eq(D.dv), V.head.eq(D.head),
                                      *([V.qhead.eq(D.qhead)] if grouped else [])),
                     "each output lands on its own query head, query and feature")


@T.kernel(waves=WAVES)
def attention_fwd(Q: Tensor("bf16", "BH", "S", "D"), K: Tensor("bf16", "BH", "S", "D"),
                  V: Tensor("bf16", "BH", "S", "D"), O: Tensor("bf16", "BH", "S", "D"), *,
                  head_dim: int = 64, causal: bool = False, prefetch: int = 1,
                  unroll: int = 1, rounding: str = "rne", xcd_order: bool = False,
                  overlap: bool = False):
    """O = softmax(Q K^T / sqrt(head_dim)) V per (batch*head), any sequence length S;
    `prefetch` (1, 2 or 3): how many key blocks ahead of the computed one the loads run;
    `unroll` (1, 2 or 4): copies of the key loop's body per machine iteration; `rounding`
    ("rne" or "rtz"): how P and O are narrowed to bf16; `xcd_order`: heads on the fastest
    grid axis, so a head's query tiles share one XCD's L2; `overlap`: the next block's scores
    overlap this block's softmax (see `attention_program`)."""
    attention_program(Q, K, V, O, head_dim=head_dim, causal=causal, prefetch=prefetch,
                      unroll=unroll, rounding=rounding, xcd_order=xcd_order, overlap=overlap)


@T.kernel(waves=WAVES)
def attention_fwd_kv(Q: Tensor("bf16", "BH", "SQ", "D"), K: Tensor("bf16", "BH", "SK", "D"),
                     V: Tensor("bf16", "BH", "SK", "D"), O: Tensor("bf16", "BH", "SQ", "D"), *,
                     head_dim: int = 64, causal: bool = False, prefetch: int = 1,
                     unroll: int = 1, rounding: str = "rne"):
    """attention_fwd for SQ queries against a key/value cache of SK entries (decoding); causal
    masks bottom-right (query i sees keys j <= i + SK - SQ) and needs SK >= SQ."""
    attention_program(Q, K, V, O, head_dim=head_dim, causal=causal, prefetch=prefetch,
                      unroll=unroll, rounding=rounding)


@T.kernel(waves=WAVES)
def attention_fwd_gqa(Q: Tensor("bf16", "BH", "G", "S", "D"), K: Tensor("bf16", "BH", "S", "D"),
                      V: Tensor("bf16", "BH", "S", "D"), O: Tensor("bf16", "BH", "G", "S", "D"),
                      *, head_dim: int = 64, causal: bool = False, prefetch: int = 1,
                      unroll: int = 1, rounding: str = "rne", xcd_order: bool = False,
                      overlap: bool = False):
    """Grouped-query attention_fwd: the G query heads Q[bh, g] of group bh attend K[bh] and
    V[bh] (a batch of B x H query heads over B x HK key/value heads is Q viewed as
    (B * HK, H / HK, S, D) when head h reads key/value head h // (H / HK)). `xcd_order` runs
    a group's workgroups on one XCD, `overlap` the next block's scores with this block's
    softmax (see `attention_program`)."""
    attention_program(Q, K, V, O, head_dim=head_dim, causal=causal, prefetch=prefetch,
                      unroll=unroll, rounding=rounding, grouped=True, xcd_order=xcd_order,
                      overlap=overlap)


@T.kernel(waves=GQA_WAVES)
def attention_fwd_gqa_wide(Q: Tensor("bf16", "BH", "G", "S", "D"),
                           K: Tensor("bf16", "BH", "S", "D"), V: Tensor("bf16", "BH", "S", "D"),
                           O: Tensor("bf16", "BH", "G", "S", "D"), *, head_dim: int = 128,
                           causal: bool = False, prefetch: int = 1, unroll: int = 1,
                           rounding: str = "rne", xcd_order: bool = False,
                           overlap: bool = False):
    """attention_fwd_gqa with 8 waves, 256 queries per workgroup, head_dim 128: half the K/V
    traffic per query, half the workgroups (fewer, coarser jobs for a causal grid)."""
    attention_program(Q, K, V, O, head_dim=head_dim, causal=causal, prefetch=prefetch,
                      unroll=unroll, rounding=rounding, grouped=True, waves=GQA_WAVES,
                      xcd_order=xcd_order, overlap=overlap)


def reference_gqa(Q, K, V, causal: bool = False) -> np.ndarray:
    """`reference` for attention_fwd_gqa: each of Q's G query heads against its group's K/V."""
    return np.stack([reference(Q[:, g], K, V, causal) for g in range(Q.shape[1])], axis=1)


def reference(Q, K, V, causal: bool = False) -> np.ndarray:
    """softmax(Q K^T / sqrt(d)) V in float64, per leading (batch*head) index; causal keeps
    key j for query i when j <= i + SK - SQ (bottom-right, the kernel's convention)."""
    q, k, v = (np.asarray(x, np.float64) for x in (Q, K, V))
    logits = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        logits = np.where(np.tril(np.ones((sq, sk), bool), k=sk - sq), logits, -np.inf)
    logits -= logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v

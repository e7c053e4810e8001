"""Flash-attention forward, bf16, head dim 64 or 128, online softmax, optional causal mask.

Each of the 4 waves owns 32 query rows; key/value blocks of 32 stream through. The kernel
computes S^T = K Q^T so that the f32 accumulator, cast to bf16, is already the B operand of
O^T = V^T P^T (register slots 4t..4t+3 hold k-step t) — no LDS round trip for P. Softmax
statistics are per query column, reduced across the two lane halves of each wave.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

import argus.lang as T
from argus.ir.expr import And
from argus.lang import Tensor

MFMA = "v_mfma_f32_32x32x8_bf16"
WAVES = 4
BLOCK_Q = 32 * WAVES
BLOCK_KV = 32
LOG2E = 1.4426950408889634


def attention_program(Q, K, V, O, *, head_dim: int, causal: bool,
                      keep: Callable | None = None, drop: tuple[str, ...] = ("key",)):
    """Trace the attention body. Hooks for tests: `keep(kv0, q0, i, j)` is the causal mask's
    condition on (key, query) coordinates; `drop` names the tags the softmax reductions drop."""
    keep = keep or (lambda kv0, q0, i, j: kv0 + i <= q0 + j)
    BH, S, D = Q.shape
    T.assume(D.eq(head_dim))
    T.assume((S % BLOCK_Q).eq(0))
    T.grid(S // BLOCK_Q, BH)
    q0, bh = T.program_id(0) * BLOCK_Q, T.program_id(1)
    T.tag(Q, lambda h, q, d: {"head": h, "query": q, "d": d})
    T.tag(K, lambda h, kv, d: {"head": h, "key": kv, "d": d})
    T.tag(V, lambda h, kv, d: {"head": h, "key": kv, "dv": d})
    T.tag(O, lambda h, q, d: {"head": h, "query": q, "dv": d})

    grid = (1, WAVES)
    k_frag = T.mfma_layout(MFMA, "a", grid)        # (32 keys, 8 d), shared by all waves
    q_frag = T.mfma_layout(MFMA, "b", grid)        # (128 queries, 8 d)
    scores = T.mfma_layout(MFMA, "c", grid)        # S^T: (32 keys, 128 queries)
    column = T.reduced(scores, 0)                  # one value per query
    v_frag = k_frag                                # V^T fragment: (32 dv, 8 keys)
    p_frag = q_frag                                # P^T fragment: (128 queries, 8 keys)
    d_steps, kv_steps, d_blocks = head_dim // 8, BLOCK_KV // 8, head_dim // 32
    scale = LOG2E / math.sqrt(head_dim)

    q = [Q.load((bh, q0, 8 * t), q_frag, axes=(1, 2)) for t in range(d_steps)]
    m = T.tag(T.full(column, -math.inf), lambda j: {"query": q0 + j})
    l = T.tag(T.zeros(column), lambda j: {"query": q0 + j})
    o = {f"o{b}": T.tag(T.zeros(scores), lambda i, j, b=b: {"head": bh, "dv": 32 * b + i,
                                                            "query": q0 + j})
         for b in range(d_blocks)}
    stop = (q0 + BLOCK_Q) // BLOCK_KV if causal else S // BLOCK_KV
    loop = T.range(0, stop, m=m, l=l, **o)
    for kb in loop:
        kv0 = kb * BLOCK_KV
        s = T.zeros(scores)
        for t in range(d_steps):
            s = T.mfma(MFMA, K.load((bh, kv0, 8 * t), k_frag, axes=(1, 2)), q[t], s)
            T.tag_assert(lambda A, B, C: And(A.d.eq(B.d), A.head.eq(B.head)),
                         "K and Q meet at the same head and feature")
        s = s * scale
        if causal:
            with T.when(kv0 + BLOCK_KV - 1 > q0, s=s) as diagonal:
                diagonal.s = T.mask(diagonal.s, lambda i, j: keep(kv0, q0, i, j), -math.inf)
                T.tag_assert(lambda X: X.key <= X.query, "the causal mask keeps key <= query")
            s = diagonal.s
        m_new = T.maximum(loop.m, T.reduce(s, "max", 0, column, drop=drop))
        T.tag_assert(lambda X, Y: X.query.eq(Y.query), "running max of the same query")
        alpha = T.exp2(loop.m - m_new)
        p = s - T.broadcast(m_new, 0, scores)
        T.tag_assert(lambda X, Y: X.query.eq(Y.query), "scores shifted by their own query's max")
        p = T.exp2(p)
        loop.l = loop.l * alpha + T.reduce(p, "sum", 0, column, drop=drop)
        loop.m = m_new
        p16 = p.to("bf16")
        rescale = T.broadcast(alpha, 0, scores)
        for b in range(d_blocks):
            acc = getattr(loop, f"o{b}") * rescale
            for t in range(kv_steps):
                v = V.load((bh, kv0 + 8 * t, 32 * b), v_frag, axes=(2, 1))
                acc = T.mfma(MFMA, v, T.slots(p16, 4 * t, p_frag), acc)
                T.tag_assert(lambda A, B, C: And(A.key.eq(B.key), A.dv.eq(C.dv),
                                                 B.query.eq(C.query), A.head.eq(C.head)),
                             "V and P meet at the same key, on O's feature and query")
            setattr(loop, f"o{b}", acc)
    inverse = T.broadcast(T.rcp(loop.l), 0, scores)
    for b in range(d_blocks):
        out = (getattr(loop, f"o{b}") * inverse).to("bf16")
        O.store((bh, q0, 32 * b), out, axes=(2, 1))
        T.tag_assert(lambda V, D: And(V.query.eq(D.query), V.dv.eq(D.dv), V.head.eq(D.head)),
                     "each output lands on its own query and feature")


@T.kernel(waves=WAVES)
def attention_fwd(Q: Tensor("bf16", "BH", "S", "D"), K: Tensor("bf16", "BH", "S", "D"),
                  V: Tensor("bf16", "BH", "S", "D"), O: Tensor("bf16", "BH", "S", "D"), *,
                  head_dim: int = 64, causal: bool = False):
    """O = softmax(Q K^T / sqrt(head_dim)) V per (batch*head), S a multiple of 128."""
    attention_program(Q, K, V, O, head_dim=head_dim, causal=causal)


def reference(Q, K, V, causal: bool = False) -> np.ndarray:
    """softmax(Q K^T / sqrt(d)) V in float64, per leading (batch*head) index."""
    q, k, v = (np.asarray(x, np.float64) for x in (Q, K, V))
    logits = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    if causal:
        seq = q.shape[1]
        logits = np.where(np.tril(np.ones((seq, seq), bool)), logits, -np.inf)
    logits -= logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v

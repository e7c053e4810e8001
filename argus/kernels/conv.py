"""Convolution and pooling written in the DSL (issue 22): a 2-D implicit-GEMM convolution on
v_mfma_f32_32x32x8_bf16 (NHWC, any stride, padding and dilation, a fused bias + activation
epilogue), a depthwise one (groups = C) and 2-D max/average pooling, all proved for symbolic
sizes. Not here yet: 1-D/3-D, other group counts, transposed convolution.

Strides come from the input's phase view: a stride-s input of H x W is passed as
(N, H/s, s, W/s, s, C), element (h, w) at (h // s, h % s, w // s, w % s), so every window
offset reads a contiguous run of output positions at a compile-time phase (`phase_view`
makes it; H and W padded to multiples of s with zeros). Padding and the tails are guarded
loads (outside the tensor reads 0; max pooling masks them to -inf).
"""

from __future__ import annotations

import numpy as np

import argus.lang as T
from argus.lang import Tensor

MFMA = "v_mfma_f32_32x32x8_bf16"
#: output pixels (along a row) and output channels per workgroup: 4 waves over the pixels
BLOCK_P, BLOCK_OC = 128, 32
ACTIVATIONS = ("none", "relu", "gelu", "sigmoid")


def _activate(x, activation: str):
    if activation == "relu":
        return T.maximum(x, T.zeros(x.spec))
    if activation == "gelu":
        return T.gelu(x)
    if activation == "sigmoid":
        return T.sigmoid(x)
    return x


@T.kernel(waves=4)
def conv2d(X: Tensor("bf16", "N", "H2", "S", "W2", "S", "C"),
           Wt: Tensor("bf16", "KH", "KW", "OC", "C"), bias: Tensor("f32", "OC"),
           Y: Tensor("f32", "N", "OH", "OW", "OC"), *, window: tuple[int, int] = (3, 3),
           stride: int = 1, padding: int = 0, dilation: int = 1, activation: str = "none"):
    """Y[n, oh, ow, oc] = act(bias[oc] + sum over kh, kw, c of
    X[n, oh*s + kh*d - p, ow*s + kw*d - p, c] * Wt[kh, kw, oc, c]), X in its phase view,
    Wt with the channels innermost (K-minor for the MFMA's B). C is a multiple of 8 and OC of
    32; OH and OW are the sizes the caller wants (positions reading outside X read 0). The
    window, stride, padding, dilation and activation are compile-time."""
    N, H2, S, W2, _, C = X.shape
    KH, KW, OC, _ = Wt.shape
    OH, OW = Y.shape[1], Y.shape[2]
    T.assume(S.eq(stride))
    T.assume(KH.eq(window[0]))
    T.assume(KW.eq(window[1]))
    T.assume((C % 8).eq(0))
    T.assume((OC % BLOCK_OC).eq(0))
    T.grid(OH, T.cdiv(OW, BLOCK_P), N)
    oh, ow0, n = T.program_id(0), T.program_id(1) * BLOCK_P, T.program_id(2)
    a_spec = T.mfma_layout(MFMA, "a", (4, 1))
    b_spec = T.mfma_layout(MFMA, "b", (4, 1))
    c_spec = T.mfma_layout(MFMA, "c", (4, 1))
    row = T.reduced(c_spec, 0)
    for block in T.range(0, OC // BLOCK_OC, name="ocb"):
        oc0 = block * BLOCK_OC
        loop = T.range(0, C // 8, name="c", acc=T.zeros(c_spec))
        for c in loop:
            for kh in range(window[0]):
                for kw in range(window[1]):
                    h, w = kh * dilation - padding, kw * dilation - padding
                    a = X.load((n, oh + h // stride, h % stride, ow0 + w // stride,
                                w % stride, c * 8), a_spec, axes=(3, 5), guard=True)
                    b = Wt.load((kh, kw, oc0, c * 8), b_spec, axes=(2, 3))
                    loop.acc = T.mfma(MFMA, a, b, loop.acc)
        out = loop.acc + T.broadcast(bias.load((oc0,), row), 0, c_spec)
        Y.store((n, oh, ow0, oc0), _activate(out, activation), axes=(2, 3), guard=True)


def phase_view(x: np.ndarray, stride: int) -> np.ndarray:
    """NHWC input as (N, H/s, s, W/s, s, C), H and W zero-padded up to multiples of s."""
    n, h, w, c = x.shape
    hp, wp = -(-h // stride) * stride, -(-w // stride) * stride
    padded = np.zeros((n, hp, wp, c), x.dtype)
    padded[:, :h, :w] = x
    return padded.reshape(n, hp // stride, stride, wp // stride, stride, c)


def conv2d_reference(x, weight, bias, *, stride=1, padding=0, dilation=1,
                     activation="none", out_hw=None):
    """Direct convolution in float64: x NHWC, weight (KH, KW, OC, C)."""
    x = np.asarray(x, np.float64)
    weight = np.asarray(weight, np.float64)
    n, h, w, c = x.shape
    kh_, kw_, oc, _ = weight.shape
    oh = (h + 2 * padding - dilation * (kh_ - 1) - 1) // stride + 1
    ow = (w + 2 * padding - dilation * (kw_ - 1) - 1) // stride + 1
    oh, ow = out_hw or (oh, ow)
    padded = np.zeros((n, h + 2 * padding + stride * oh, w + 2 * padding + stride * ow, c))
    padded[:, padding:padding + h, padding:padding + w] = x
    y = np.zeros((n, oh, ow, oc)) + np.asarray(bias, np.float64)
    for kh in range(kh_):
        for kw in range(kw_):
            patch = padded[:, kh * dilation:kh * dilation + stride * oh:stride,
                           kw * dilation:kw * dilation + stride * ow:stride]
            y += patch @ weight[kh, kw].T
    if activation == "relu":
        y = np.maximum(y, 0)
    elif activation == "sigmoid":
        y = 1 / (1 + np.exp(-y))
    elif activation == "gelu":
        import math

        y = y * 0.5 * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))
    return y


@T.kernel(waves=1)
def pool2d(X: Tensor("f32", "NC", "H2", "S", "W2", "S"), Y: Tensor("f32", "NC", "OH", "OW"),
           *, kind: str = "max", window: tuple[int, int] = (2, 2), stride: int = 2,
           padding: int = 0, height: int | None = None, width: int | None = None):
    """Max or average pooling of NCHW input (in its phase view, `phase_view` of the
    (NC, H, W, 1) array without the last axis) over `window`s at `stride` with
    `padding`; `height`/`width` (the unpadded H and W, compile-time when given, else the
    view's) bound where max pooling sees -inf. Average pooling counts the padding (torch's
    count_include_pad=True)."""
    NC, H2, S, W2, _ = X.shape
    OH, OW = Y.shape[1], Y.shape[2]
    T.assume(S.eq(stride))
    T.grid(T.cdiv(OH, 4), T.cdiv(OW, 64), NC)
    oh0, ow0, nc = T.program_id(0) * 4, T.program_id(1) * 64, T.program_id(2)
    spec = T.rows_layout((4, 64), 1)
    H = height if height is not None else H2 * S
    W = width if width is not None else W2 * S
    acc = None
    for kh in range(window[0]):
        for kw in range(window[1]):
            h, w = kh - padding, kw - padding
            x = X.load((nc, oh0 + h // stride, h % stride, ow0 + w // stride,
                        w % stride), spec, axes=(1, 3), guard=True)
            if kind == "max":
                rows = T.iota(spec, 0, start=oh0) * float(stride) + float(h)
                cols = T.iota(spec, 1, start=ow0) * float(stride) + float(w)
                inside = (rows >= 0.0) * (rows < H) * (cols >= 0.0) * (cols < W)
                x = T.where(inside, x, -np.inf)
                acc = x if acc is None else T.maximum(acc, x)
            else:
                acc = x if acc is None else acc + x
    if kind != "max":
        acc = acc * (1.0 / (window[0] * window[1]))
    Y.store((nc, oh0, ow0), acc, axes=(1, 2), guard=True)


@T.kernel(waves=1)
def depthwise_conv2d(X: Tensor("f32", "N", "H2", "S", "W2", "S", "C"),
                     Wt: Tensor("f32", "KH", "KW", "C"), Y: Tensor("f32", "N", "OH", "OW", "C"),
                     *, window: tuple[int, int] = (3, 3), stride: int = 1, padding: int = 0,
                     dilation: int = 1):
    """groups = C: Y[n, oh, ow, c] = sum over kh, kw of X[n, oh*s + kh*d - p,
    ow*s + kw*d - p, c] * Wt[kh, kw, c] (NHWC in the phase view, f32); 4 output pixels by
    64 channels per step, lanes along the channels, any C (guarded tail)."""
    N, H2, S, W2, _, C = X.shape
    KH, KW, _ = Wt.shape
    OH, OW = Y.shape[1], Y.shape[2]
    T.assume(S.eq(stride))
    T.assume(KH.eq(window[0]))
    T.assume(KW.eq(window[1]))
    T.grid(OH, T.cdiv(OW, 4), N)
    oh, ow0, n = T.program_id(0), T.program_id(1) * 4, T.program_id(2)
    spec = T.rows_layout((4, 64), 1)
    channels = T.reduced(spec, 0)
    for block in T.range(0, T.cdiv(C, 64), name="cb"):
        c0 = block * 64
        acc = T.zeros(spec)
        for kh in range(window[0]):
            for kw in range(window[1]):
                h, w = kh * dilation - padding, kw * dilation - padding
                x = X.load((n, oh + h // stride, h % stride, ow0 + w // stride, w % stride, c0),
                           spec, axes=(3, 5), guard=True)
                weight = Wt.load((kh, kw, c0), channels, axes=(2,), guard=True)
                acc = acc + x * T.broadcast(weight, 0, spec)
        Y.store((n, oh, ow0, c0), acc, axes=(2, 3), guard=True)

"""Convolution and pooling written in the DSL (issue 22). The family: `conv_kernel(dims,
engine, epilogue)` builds one implicit-GEMM convolution for 1-D/2-D/3-D, any stride, padding,
dilation, group shape (depthwise and pointwise included) and transposed convolution, on f32
FMAs or bf16 MFMAs, with a fused epilogue; `pool_kernel(dims)` max and average pooling 1-3-D;
all proved for symbolic sizes (docs/guide/ops.md). The earlier 2-D kernels (`conv2d`,
`depthwise_conv2d`, `pool2d`) stay as they were.

Strides come from the input's phase view: a stride-s input of H x W is passed as
(N, H/s, s, W/s, s, C), element (h, w) at (h // s, h % s, w // s, w % s), so every window
offset reads a contiguous run of output positions at a compile-time phase (`phase_view`,
`phase_view_nd` make it). In the family the view also holds the front padding, so no offset
is negative and only the far end is a guarded load.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math

import numpy as np

import argus.lang as T
from argus.errors import ArgusError
from argus.lang import Tensor

MFMA = "v_mfma_f32_32x32x8_bf16"
#: the family's full-precision MFMA (the "mfma_f32" engine): f32 in, f32 out, k = 2
F32_MFMA = "v_mfma_f32_32x32x2_f32"
#: the "mfma_f32_16" engine's: 16 positions by 16 output channels, k = 4, for groups of at
#: most 16 output channels, where F32_MFMA's 32 columns would hold half of them unused
F32_MFMA_16 = "v_mfma_f32_16x16x4_f32"
#: the f32 MFMA engines with packed channels: X and Wt hold groups of PACK input channels
#: innermost (`engine_layout`, the channels zero-padded to a multiple of PACK on the host), so
#: a lane loads PACK channels with one dwordx4 that feeds PACK MFMAs (`_packed_reduce`), where
#: the unpacked engine issues a vector memory instruction of one dword per lane per MFMA for A
#: and for B: the model charges each instruction the CU's addresser time whatever its width
PACKED = {"mfma_f32_pk": "mfma_f32", "mfma_f32_16_pk": "mfma_f32_16"}
#: the input channels a packed engine's lane loads at once (16 bytes: a dwordx4)
PACK = 4
#: each MFMA engine's instruction
ENGINE_MFMA = {"mfma": MFMA, "mfma_f32": F32_MFMA, "mfma_f32_16": F32_MFMA_16,
               "mfma_f32_pk": F32_MFMA, "mfma_f32_16_pk": F32_MFMA_16}
#: the engines on f32 MFMAs (channels first, weights' output channels last, both tails guarded)
F32_MFMA_ENGINES = ("mfma_f32", "mfma_f32_16", *PACKED)
#: 32-channel tiles a wave of the f32 MFMA engine accumulates (register blocking; 4 measured
#: no faster than 2 at 128 output channels, modelled)
CHANNEL_TILES = 2
#: the most output channels per group the "mfma_f32_16" engine takes (`conv_engine`: its
#: 16 columns) and its position tiles per wave there (2: a wave's 32 positions, as F32_MFMA's;
#: KernelBench Level 2 6's convolution, modelled: 161.9 us on 1, 108.2 on 2, and 4 passes
#: the SGPRs at a 3x3x3 window's 27 unrolled taps)
NARROW_OC, NARROW_TILES = 16, 2
#: the most position tiles a wave of the "mfma_f32_16" engine covers on a single-phase output
#: whose rows pass NARROW_TILES tiles (`conv_engine`): each channel step's weights, staged
#: once, then feed twice the MFMAs. Modelled conv launches (KernelBench Level 2, 2 -> 4
#: tiles): 48 (62 positions a row) 491 -> 445 us, 8 (62) 643 -> 636
NARROW_MAX_TILES = 4
#: the fewest taps per output phase on average (the window's taps over the phases) for which
#: `conv_engine` packs a phased output's channels (`PACKED`), undilated. Modelled, KernelBench
#: Level 2 (conv launch, unpacked -> packed): 3x3x3 stride 2 (3.4 taps a phase): 49 448 ->
#: 275 us, 38 788 -> 429, 20 500 -> 279, 3 863 -> 432, 100 7672 -> 3275; 4x4 stride 2 (4):
#: 91 2844 -> 2019, 93 2820 -> 2111; 3x3 stride 2 (2.25), once the model sampled every
#: phase band: 2 2556 -> 2448, 36 743 -> 623; dilated 2, Level 1 77: 1914 -> 3431
PACKED_MIN_TAPS = 2
#: the most 16-channel tiles a wave of the packed 16x16 engine covers (`_packed_engine`:
#: each packed A load then feeds 4 x PACK MFMAs)
PACKED_NARROW_TILES = 4
#: output pixels (along a row) and output channels per workgroup of `conv2d` (the family's MFMA
#: engines tile 32 channels too)
BLOCK_P, BLOCK_OC = 128, 32
#: the family's MFMA engines: waves per workgroup, each on its own batch image
#: (`_image_layout`)
MFMA_WAVES = 4
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


# ---------------------------------------------------------------------------------------------
# The family: one builder for 1-D/2-D/3-D, strided, padded, dilated, grouped and transposed
# convolutions (channels last, f32 FMA or bf16 MFMA) and one for 1-3-D max/average pooling.
# ---------------------------------------------------------------------------------------------

SPATIAL = ("D", "H", "W")
ENGINES = ("fma", "mfma", *F32_MFMA_ENGINES)
EPILOGUE_STEPS = ("bias", "residual", "scale", "clamp", *ACTIVATIONS[1:], "tanh")
#: the epilogue's last step may pool a strided transposed convolution's output over windows
#: the size of its stride, which are exactly its phases at one position (`_conv_channels`)
POOL_STEPS = ("pool_max", "pool_avg")
#: reductions a "rows" epilogue step takes along the output channels (`_channel_rows`), and
#: the value a channel past the output's takes in each
ROW_IDENTITY = {"sum": 0.0, "max": -3.0e38, "prod": 1.0}
#: a "vec" epilogue step's operations with a per-channel vector v: y + v, y - v, v - y, y * v
VEC_OPS = ("add", "sub", "rsub", "mul")
#: the planes of a "stats" epilogue step's partials S and of `moments_kernel`'s: each tile's
#: count, mean and sum of squared deviations from that mean (M2), per image and channel
MOMENT_PLANES = 3
#: the FMA engine's tile per position tile: 64 output positions (one per lane); it holds
#: `tiles` = (position tiles, output channels) in at most FMA_SLOTS registers per lane, FMA_OC
#: channels when a group has several output channels (a depthwise multiplier; 4 channels per
#: X load), one and FMA_SLOTS position tiles when it has one (depthwise: every load of the
#: weight is used by FMA_SLOTS x 64 positions, where 4 channel slots would load 3 weights
#: past the group's one)
FMA_P, FMA_OC, FMA_SLOTS = 64, 4, 4


def _per_dim(value, dims: int, name: str) -> tuple[int, ...]:
    values = (value,) * dims if isinstance(value, int) else tuple(value)
    if len(values) != dims or not all(isinstance(v, int) and not isinstance(v, bool)
                                      for v in values):
        raise ArgusError(f"conv/pool parameter {name}={value!r} does not fit {dims} spatial "
                         "dimension(s)", fix=f"give one whole number or {dims} of them (one "
                         "per spatial dimension)")
    return values


def _conv_params(dims, window, stride, padding, dilation):
    window, stride = _per_dim(window, dims, "window"), _per_dim(stride, dims, "stride")
    padding, dilation = _per_dim(padding, dims, "padding"), _per_dim(dilation, dims, "dilation")
    if min(window + stride + dilation) < 1 or min(padding) < 0:
        raise ArgusError(f"conv window {window}, stride {stride}, dilation {dilation}, padding "
                         f"{padding}", fix="window, stride and dilation >= 1, padding >= 0")
    return window, stride, padding, dilation


def input_pad(dims: int, window, stride, padding, dilation, transposed: bool) -> tuple:
    """Zeros in front of each spatial dimension of the input view, so that no tap reads before
    it: the padding for a forward convolution; for a transposed one, what the gather form
    reaches before input 0 (ceil(((K - 1) * d - p) / s), at least 0). Every offset the kernel
    adds is then >= 0, and only the far end is guarded."""
    window, stride, padding, dilation = _conv_params(dims, window, stride, padding, dilation)
    if not transposed:
        return padding
    return tuple(max(0, -((p - (k - 1) * d) // s))
                 for k, s, p, d in zip(window, stride, padding, dilation, strict=True))


def view_phases(dims: int, stride, transposed: bool) -> tuple[tuple, tuple]:
    """The phase counts of X's and Y's views per dimension (`tap_plan`): forward, X has the
    stride's phases along the innermost axis only and Y none; transposed, X none and Y the
    stride's along every axis."""
    stride = _per_dim(stride, dims, "stride")
    if transposed:
        return (1,) * dims, stride
    return (1,) * (dims - 1) + stride[-1:], (1,) * dims


def row_steps(dims: int, stride, transposed: bool) -> tuple:
    """How far the input moves per output row along each axis, in view rows (`tap_plan`)."""
    stride = _per_dim(stride, dims, "stride")
    return (1,) * dims if transposed else stride[:-1] + (1,)


def tap_plan(dims: int, window, stride, padding, dilation, transposed: bool) -> dict:
    """For each output phase r (a tuple, one entry per dimension; only (0, ..) unless
    transposed), per dimension the window taps that reach it as arithmetic progressions
    (k0, dk, off0, doff, phase, count): tap k0 + j * dk reads the input view at
    (q * m + off0 + j * doff, phase) for output q * R + r, j < count, R and S being the output
    and input phase counts (`view_phases`) and m the row step (`row_steps`), the view starting
    `input_pad` zeros early.

    Forward: input i = o * s + k * d - p. Along the innermost axis, whose positions a tile
    runs along, the view has S = s phases, and the taps of one input phase b
    (k * d = b mod s) step by s / gcd(s, d) and their offsets by d / gcd(s, d); an outer axis
    is a scalar coordinate, so it is read plainly (S = 1, m = s) and its taps are one
    progression. Transposed (the gather form of
    torch's conv_transpose, y[o] += x[i] w[k] where o = i * s - p + k * d):
    i = (o + p - k * d) / s, a tap reaching output phase r only where s divides r + p - k * d,
    walked from the last tap down so the offsets grow. A progression is what a runtime loop
    over the taps can walk with affine indices."""
    window, stride, padding, dilation = _conv_params(dims, window, stride, padding, dilation)
    front = input_pad(dims, window, stride, padding, dilation, transposed)
    per_dim = []
    for a, (k_, s, p, d, f) in enumerate(zip(window, stride, padding, dilation, front,
                                             strict=True)):
        dk, doff = s // math.gcd(s, d), d // math.gcd(s, d)
        if not transposed and a < dims - 1:
            per_dim.append({0: [(0, 1, f - p, d, 0, k_)]})
        elif transposed:
            by_phase = {}
            for r in range(s):
                ks = [k for k in range(k_) if (r + p - k * d) % s == 0]
                by_phase[r] = ([(ks[-1], -dk, (r + p - ks[-1] * d) // s + f, doff, 0, len(ks))]
                               if ks else [])
            per_dim.append(by_phase)
        else:
            progressions = []
            for b in range(s):
                ks = [k for k in range(k_) if (k * d - p + f) % s == b]
                if ks:
                    progressions.append((ks[0], dk, (ks[0] * d - p + f) // s, doff, b, len(ks)))
            per_dim.append({0: progressions})
    return {phase: [per_dim[a][r] for a, r in enumerate(phase)]
            for phase in itertools.product(*(sorted(p) for p in per_dim))}


def _expand(progressions) -> list[tuple[int, int, int]]:
    return [(k0 + j * dk, off0 + j * doff, ph) for k0, dk, off0, doff, ph, count in progressions
            for j in range(count)]


def conv_taps(dims: int, window, stride, padding, dilation, transposed: bool) -> dict:
    """`tap_plan` written out: for each output phase, the (k, offset, phase) tuples (one entry
    per dimension each) of every tap that reaches it."""
    plan = tap_plan(dims, window, stride, padding, dilation, transposed)
    return {phase: [tuple(zip(*combo, strict=True)) for combo in
                    itertools.product(*map(_expand, per_dim))] for phase, per_dim in plan.items()}


#: the most taps one pass of the window walk unrolls: a larger window (3x3x3, 5x5) walks its
#: outer axes in runtime loops until the taps left fit, as unrolling every tap would keep more
#: offsets live than a wave has SGPRs
UNROLLED_TAPS = 9


def _looped_axes(plan, unrolled: int = UNROLLED_TAPS) -> int:
    """How many outer axes of `plan` `_over_taps` walks in runtime loops: the fewest that
    leave at most UNROLLED_TAPS taps to unroll (a 3x3x3 window loops over its depth and
    unrolls the 9 taps of a depth step; a 5x5 loops over its rows)."""
    counts = [len(_expand(p)) for p in plan]
    looped = 0
    while looped < len(plan) and math.prod(counts[looped:]) > unrolled:
        looped += 1
    return looped


def _over_taps(plan, acc, fetch, apply, unrolled: int = UNROLLED_TAPS):
    """acc after every tap of `plan` (per dimension, its progressions): `fetch(k, offset,
    phase)` issues a tap's loads and `apply(acc, fetched)` does its arithmetic. The outer axes
    `_looped_axes` names are runtime loops over their progressions; the taps left are unrolled
    with every fetch issued before the first apply, so their loads are in flight together and
    a wave waits for memory once per pass instead of once per tap."""
    looped = _looped_axes(plan, unrolled)

    def unroll(acc, head):
        taps = [[*head, *rest] for rest in itertools.product(*map(_expand, plan[len(head):]))]
        fetched = [fetch(*zip(*tap, strict=True)) for tap in taps]
        for operands in fetched:
            acc = apply(acc, operands)
        return acc

    def walk(acc, axis, head):
        if axis >= looped:
            return unroll(acc, head)
        for k0, dk, off0, doff, ph, count in plan[axis]:
            if count == 1:
                acc = walk(acc, axis + 1, [*head, (k0, off0, ph)])
                continue
            loop = T.range(0, count, name=f"k{axis}", acc=acc)
            for j in loop:
                loop.acc = walk(loop.acc, axis + 1, [*head, (k0 + j * dk, off0 + j * doff, ph)])
            acc = loop.acc
        return acc

    return walk(acc, 0, [])


def _epilogue(steps) -> tuple:
    """The epilogue as (name, *args) tuples, checked."""
    out = []
    for step in steps:
        step = (step,) if isinstance(step, str) else tuple(step)
        name, args = step[0], step[1:]
        if name in ("rows", "channels"):
            out.append(_rows_step(step))
            continue
        if name == "expr":
            out.append(_expr_step(step))
            continue
        if name == "stats":
            if len(args) != 1 or not isinstance(args[0], bool):
                raise ArgusError(f"epilogue step {step!r}: a statistics step is ('stats', "
                                 "store), store whether Y is written too")
            out.append(("stats", args[0]))
            continue
        if name == "vec":
            if len(args) != 2 or args[0] not in VEC_OPS or not isinstance(args[1], int) or \
                    args[1] < 0:
                raise ArgusError(f"epilogue step {step!r}: a vector step is ('vec', op, i), op "
                                 f"one of {VEC_OPS}, E<i> the (G, OCG) vector")
            out.append(("vec", args[0], args[1]))
            continue
        arity = {"scale": 1, "clamp": 2}.get(name, 0)
        if name not in EPILOGUE_STEPS + POOL_STEPS or len(args) != arity:
            raise ArgusError(f"epilogue step {step!r}: use one of "
                             f"{EPILOGUE_STEPS + POOL_STEPS} (('scale', factor), "
                             "('clamp', lo, hi), the others alone)")
        out.append((name, *map(float, args)))
    stats = [i for i, s in enumerate(out) if s[0] == "stats"]
    # statistics end the epilogue, or come just before its pool (of the unpooled output,
    # which is then never stored: Y holds the pooled one)
    before_pool = len(stats) == 1 and stats[0] + 1 < len(out) and \
        out[stats[0] + 1][0] in POOL_STEPS and not out[stats[0]][1] and \
        all(s[0] != "rows" for s in out)
    if stats and not before_pool and (stats != [len(out) - 1] or
                                      any(s[0] in POOL_STEPS + ("rows",) for s in out)):
        raise ArgusError(f"epilogue {steps!r} takes statistics other than once at its end, or "
                         "of a pooled or channel-reduced output",
                         fix="name one stats step, last, after no pool or rows step, or "
                         "('stats', False) just before the pool (of the unpooled output)")
    rows = [i for i, s in enumerate(out) if s[0] in ("rows", "channels")]
    if rows and rows != [len(out) - 1]:
        raise ArgusError(f"epilogue {steps!r} reduces the channels other than once at its end",
                         fix="name one rows or channels step, last")
    if rows and out[-1][0] == "channels" and any(s[0] in POOL_STEPS + ("stats",) for s in out):
        raise ArgusError(f"epilogue {steps!r} pools or takes statistics beside a channels step",
                         fix="launch the pool or the norm after the convolution")
    pools = [i for i, s in enumerate(out) if s[0] in POOL_STEPS]
    if len(pools) > 1 or (pools and "residual" in [s[0] for s in out]):
        raise ArgusError(f"epilogue {steps!r} pools more than once, or beside a residual",
                         fix="name one pool step; a residual has the unpooled output's "
                         "shape, so add it in a launch of its own")
    if [s[0] for s in out].count("bias") > 1 or [s[0] for s in out].count("residual") > 1:
        raise ArgusError(f"epilogue {steps!r} adds bias or residual twice",
                         fix="name each at most once (scale or clamp may repeat)")
    return tuple(out)


def _rows_step(step) -> tuple:
    """("rows", stats, out, vectors) checked: `stats` ((fn, expr), ...) reduced along the
    output channels in order (fn one of ROW_IDENTITY; expr over ("leaf", "y"), the
    convolution's output after the epilogue before it, ("vec", "V<i>") per-channel vectors
    and ("stat", j) earlier stats), `out` over the stats alone: what one output position
    keeps (KernelBench's logsumexp or softmax chains over the channels, `argus.kernelbench`'s
    RowProgram expressions). ("channels", stats, out, vectors) is the same with a value per
    channel kept: `out` reads the stats, ("leaf", "y") and the vectors (a softmax over the
    channels, Level 2 6)."""
    from argus.kernels.expr import leaves

    if len(step) != 4 or not isinstance(step[3], int) or not step[1]:
        raise ArgusError(f"epilogue step {step!r}: a {step[0]} step is ('{step[0]}', stats, "
                         "out, vectors)")
    name, stats, out, vectors = step
    for k, (fn, e) in enumerate(stats):
        bad = [n for n in leaves(e, "leaf") if n != "y"]
        bad += [j for j in leaves(e, "stat") if j >= k]
        bad += [n for n in leaves(e, "vec") if n not in {f"V{i}" for i in range(vectors)}]
        if fn not in ROW_IDENTITY or bad:
            raise ArgusError(f"rows step stat {k} ({fn}, {e!r}) reads {bad} or reduces "
                             f"with {fn!r}", fix=f"reduce with one of {tuple(ROW_IDENTITY)} "
                             "over the leaf 'y', the vectors and earlier stats")
    if name == "rows" and (leaves(out, "leaf") or leaves(out, "vec")):
        raise ArgusError(f"rows step output {out!r} reads more than the stats",
                         fix="keep a value per channel with a 'channels' step")
    bad = [n for n in leaves(out, "leaf") if n != "y"]
    bad += [n for n in leaves(out, "vec") if n not in {f"V{i}" for i in range(vectors)}]
    bad += [j for j in leaves(out, "stat") if j >= len(stats)]
    if bad:
        raise ArgusError(f"{name} step output {out!r} reads {bad}",
                         fix="read the leaf 'y', the vectors V<i> and the stats")
    return (name, tuple((fn, e) for fn, e in stats), out, vectors)


def _vec_names(e) -> list:
    from argus.kernels.expr import leaves

    return leaves(e, "vec")


def _expr_step(step) -> tuple:
    """("expr", e) checked: an elementwise expression (`argus.kernelbench`'s route form) over
    the leaf "y" (the value so far) and per-channel vectors ("vec", "E<i>")."""
    from argus.kernels.expr import leaves

    if len(step) != 2 or not isinstance(step[1], tuple):
        raise ArgusError(f"epilogue step {step!r}: an expression step is ('expr', e)")
    e = step[1]
    bad = [n for n in leaves(e, "leaf") if n != "y"]
    bad += [n for n in leaves(e, "vec") if not (n[:1] == "E" and n[1:].isdigit())]
    if bad or any(leaves(e, kind) for kind in ("stat", "idx", "index", "per_row", "acc")):
        raise ArgusError(f"epilogue expression {e!r} reads {bad or 'more'}",
                         fix="read the leaf 'y' and vectors ('vec', 'E<i>') only")
    return ("expr", e)


def _vec_op(op: str, y, v):
    if op == "add":
        return y + v
    if op == "sub":
        return y - v
    return v - y if op == "rsub" else y * v


def _apply_epilogue(acc, steps, bias_row, residual, vector_row=None):
    for name, *args in steps:
        if name == "bias":
            acc = acc + bias_row()
        elif name == "vec":
            acc = _vec_op(args[0], acc, vector_row(args[1]))
        elif name == "expr":
            from argus.kernels.expr import emit, leaves

            env = {("leaf", "y"): acc}
            env.update({("vec", n): vector_row(int(n[1:])) for n in leaves(args[0], "vec")})
            acc = emit(args[0], env, {})
        elif name == "residual":
            acc = acc + residual()
        elif name == "scale":
            acc = acc * args[0]
        elif name == "clamp":
            acc = T.minimum(T.maximum(acc, T.full(acc.spec, args[0])), T.full(acc.spec, args[1]))
        elif name == "tanh":
            acc = T.tanh(acc)
        else:
            acc = _activate(acc, name)
    return acc


def _view_shape(prefix: str, phases: str, dims: int) -> tuple[str, ...]:
    """(I2_D, SI_D, I2_H, SI_H, ...) style names: a spatial axis in its phase view."""
    return tuple(n for a in SPATIAL[3 - dims:] for n in (f"{prefix}{a}", f"{phases}{a}"))


def _family(body, name: str, doc: str | None, annotations: dict, params: dict,
            waves: int) -> T.KernelDef:
    """A family kernel: `body(*tensors, **chosen)` as a kernel named `name` taking the
    `annotations`' tensors positionally and the compile-time `params` (with their defaults)
    by keyword."""
    def kernel(*tensors, **chosen):
        return body(*tensors, **chosen)

    kernel.__name__, kernel.__doc__, kernel.__annotations__ = name, doc, annotations
    P = inspect.Parameter
    kernel.__signature__ = inspect.Signature(
        [P(n, P.POSITIONAL_OR_KEYWORD, annotation=a) for n, a in annotations.items()] +
        [P(n, P.KEYWORD_ONLY, default=v) for n, v in params.items()])
    return T.KernelDef(kernel, waves=waves)


@functools.cache
def conv_kernel(dims: int, engine: str = "fma", epilogue: tuple = ()) -> T.KernelDef:
    """The convolution kernel for `dims` spatial dimensions (1, 2 or 3), `engine` ("fma": f32
    rank-1 updates, any group shape; "mfma": bf16 on v_mfma_f32_32x32x8_bf16, channels per
    group a multiple of 8 and output channels per group of 32; "mfma_f32": f32 on
    v_mfma_f32_32x32x2_f32, an implicit GEMM of 32 positions by 32 output channels per wave,
    the 4 waves of a workgroup on 4 batch images, any group shape, the channel tails guarded
    loads; "mfma_f32_16": the same on v_mfma_f32_16x16x4_f32, 16 positions by 16 output
    channels per tile and k = 4, for groups of at most 16 output channels) and fused
    `epilogue` (a tuple of
    steps applied in order: "bias", "residual", "relu", "gelu", "sigmoid", "tanh",
    ("scale", f), ("clamp", lo, hi)), last of which may be "pool_max" or "pool_avg": a
    strided transposed convolution's output pooled over windows of its stride (torch's
    MaxPool/AvgPool with kernel = stride = the convolution's stride, no padding), Y then the
    pooled output with SO = 1 and O2 the pooled extents (what the phases at one position
    combine into: the full output is never written).

    Arguments, channels last with the channels split into groups (a free reshape):
    X (N, [I2, SI] per dimension, G, CG) the input in its phase view (`conv_input_view`; SI
    per `view_phases`: the stride along the innermost axis of a forward convolution, else 1),
    Wt (K per dimension, G, OCG, CG) (the f32 engines take X and Wt in their own orders,
    `channels_first`, `weight_oc_last`; `engine_layout` moves them), then bias (G, OCG)
    and residual (Y's shape, f32) when the epilogue names them, and Y (N, [O2, SO] per
    dimension, G, OCG) the output in its phase view (SO = 1, or the stride when transposed;
    `from_phase_view` gives the plain array). Groups, channel counts and every extent are
    symbolic; depthwise is CG = 1 and pointwise a window of 1s. Compile-time parameters:
    window, stride, padding, dilation (an int or one per dimension), transposed and, for
    "mfma_f32", tiles = (position tiles, channel tiles) per wave (register blocking: each
    loaded A is used for every channel tile and each B for every position tile; a workgroup
    covers m * tiles[0] positions of MFMA_WAVES images by n * tiles[1] output channels, m x n
    the MFMA's tile);
    "mfma_f32_pk" and "mfma_f32_16_pk" (`PACKED`) are those two with X and Wt holding PACK
    input channels innermost, (N, G, CG, *view, P) and (*K, G, CG, OCG, P), CG then counting
    packs (`engine_layout` packs and pads), one 16-byte load a lane feeding PACK MFMAs;
    for "fma", tiles = (position tiles, output channels): a wave covers 64 * tiles[0]
    positions by tiles[1] channels (at most FMA_SLOTS registers); unrolled, the most taps a
    window pass unrolls (UNROLLED_TAPS; fewer keep fewer tap offsets live in SGPRs, at the
    cost of more runtime tap loops)."""
    if dims not in (1, 2, 3) or engine not in ENGINES:
        raise ArgusError(f"conv_kernel(dims={dims!r}, engine={engine!r}): dims is 1, 2 or 3 "
                         f"and engine one of {ENGINES}")
    steps = _epilogue(epilogue)
    names = [s[0] for s in steps]
    dtype = "bf16" if engine == "mfma" else "f32"
    axes = SPATIAL[3 - dims:]
    x_view = _view_shape("I2", "SI", dims)
    annotations = {
        "X": Tensor(dtype, "N", "G", "CG", *x_view) if channels_first(engine) else
        Tensor(dtype, "N", *x_view, "G", "CG"),
        "Wt": Tensor(dtype, *(f"K{a}" for a in axes), "G",
                     *(("CG", "OCG") if weight_oc_last(engine) else ("OCG", "CG")))}
    if engine in PACKED:
        # CG counts packs of PACK channels (`engine_layout`)
        annotations = {"X": Tensor(dtype, "N", "G", "CG", *x_view, "P"),
                       "Wt": Tensor(dtype, *(f"K{a}" for a in axes), "G", "CG", "OCG", "P")}
    if "bias" in names:
        annotations["bias"] = Tensor("f32", "G", "OCG")
    y_shape = ("N", *_view_shape("O2", "SO", dims), "G", "OCG")
    if output_first(engine):
        y_shape = ("N", "G", "OCG", *_view_shape("O2", "SO", dims))
    if "residual" in names:
        annotations["residual"] = Tensor("f32", *y_shape)
    for i in range(1 + max([s[2] for s in steps if s[0] == "vec"] +
                           [int(n[1:]) for s in steps if s[0] == "expr"
                            for n in _vec_names(s[1])], default=-1)):
        annotations[f"E{i}"] = Tensor("f32", "G", "OCG")
    if "stats" in names:
        # per (image, phase, outer output row, position tile, channel) a tile's partial
        # statistics, and the plain output's extents (a transposed output's phase view runs
        # past them); before a pool, Y has one phase and S the stride's (P<axis>)
        pooled = any(n in POOL_STEPS for n in names)
        annotations["S"] = Tensor("f32", "K3", "N", *(f"L{a}" for a in axes[:-1]),
                                  f"{'P' if pooled else 'SO'}{axes[-1]}", "QB", "G", "OCG")
        # its length alone is read: the plain output's innermost extent
        annotations["Edge"] = Tensor("f32", f"L{axes[-1]}")
    if "rows" in names or "channels" in names:
        if "rows" in names:
            # one value per position: Y's channel axis is RC (1)
            y_shape = tuple("RC" if n == "OCG" else n for n in y_shape)
        for i in range(steps[-1][3]):
            annotations[f"V{i}"] = Tensor("f32", "OCG")
    annotations["Y"] = Tensor("f32", *y_shape)
    params = {"window": (3,) * dims, "stride": (1,) * dims, "padding": (0,) * dims,
              "dilation": (1,) * dims, "transposed": False, "tiles": (1, 1),
              "unrolled": UNROLLED_TAPS}

    def conv(*tensors, **chosen):
        _conv_body(dims, engine, steps, dict(zip(annotations, tensors, strict=True)), **chosen)

    return _family(conv, f"conv{dims}d_{engine}" + "".join(f"_{n}" for n in names),
                   conv_kernel.__doc__, annotations, params, 1 if engine == "fma" else 4)


def channels_first(engine: str) -> bool:
    """Whether `engine` takes X as (N, G, CG, *view) (the f32 engines) rather than
    channels last; `engine_layout` moves the arrays."""
    return engine in ("fma", *F32_MFMA_ENGINES)


def output_first(engine: str) -> bool:
    """Whether `engine` writes Y (and reads a residual) as (N, G, OCG, *view) rather than
    channels last: the FMA engine, whose lanes run along the positions (a depthwise
    output's channels-last stores touched a cache line per lane). `output_layout` moves
    the arrays."""
    return engine == "fma"


def output_shape(engine: str, shape: tuple) -> tuple:
    """The shape of Y's phase view (N, *view, G, OCG) as `engine` writes it."""
    shape = tuple(shape)
    return (shape[0], *shape[-2:], *shape[1:-2]) if output_first(engine) else shape


def output_layout(engine: str, y: np.ndarray, back: bool = False) -> np.ndarray:
    """Y's phase view (N, *view, G, OCG) as `engine` writes it (`output_first`), or with
    `back` the engine's array as that view."""
    if not output_first(engine):
        return y
    return np.moveaxis(y, (1, 2), (-2, -1)) if back else \
        np.ascontiguousarray(np.moveaxis(y, (-2, -1), (1, 2)))


def weight_oc_last(engine: str) -> bool:
    """Whether `engine` takes Wt as (*K, G, CG, OCG) rather than (*K, G, OCG, CG): the f32
    engines, whose tile reads several output channels of one tap at once (one uniform offset
    per tap and the channels at constant distances, not one offset per channel); the bf16
    MFMA's B wants k innermost."""
    return engine in ("fma", *F32_MFMA_ENGINES)


def engine_layout(engine: str, x_view: np.ndarray, weight: np.ndarray) -> tuple:
    """X (`conv_input_view`, channels last) and Wt ((*K, G, OCG, CG)) as `engine` reads them;
    a packed engine's (`PACKED`) as (N, G, CG / PACK, *view, PACK) and (*K, G, CG / PACK,
    OCG, PACK), CG zero-padded up to a multiple of PACK."""
    if engine in PACKED:
        cg = x_view.shape[-1]
        extra = -cg % PACK
        x_view = np.concatenate([x_view, np.zeros((*x_view.shape[:-1], extra), x_view.dtype)],
                                -1)
        weight = np.concatenate([weight, np.zeros((*weight.shape[:-1], extra), weight.dtype)],
                                -1)
        x_view = x_view.reshape(*x_view.shape[:-1], -1, PACK)
        x_view = np.ascontiguousarray(np.moveaxis(x_view, (-3, -2), (1, 2)))
        weight = weight.reshape(*weight.shape[:-1], -1, PACK)
        return x_view, np.ascontiguousarray(np.swapaxes(weight, -2, -3))
    if channels_first(engine):
        x_view = np.ascontiguousarray(np.moveaxis(x_view, (-2, -1), (1, 2)))
    if weight_oc_last(engine):
        weight = np.ascontiguousarray(np.swapaxes(weight, -1, -2))
    return x_view, weight


def engine_shapes(engine: str, x_shape: tuple, w_shape: tuple) -> tuple:
    """The shapes `engine_layout` gives X and Wt of shapes `x_shape` (channels last) and
    `w_shape` ((*K, G, OCG, CG)), without moving any data (planning)."""
    x_shape, w_shape = tuple(x_shape), tuple(w_shape)
    if engine in PACKED:
        packs = -(-x_shape[-1] // PACK)
        return ((x_shape[0], x_shape[-2], packs, *x_shape[1:-2], PACK),
                (*w_shape[:-2], packs, w_shape[-2], PACK))
    if channels_first(engine):
        x_shape = (x_shape[0], *x_shape[-2:], *x_shape[1:-2])
    if weight_oc_last(engine):
        w_shape = (*w_shape[:-2], w_shape[-1], w_shape[-2])
    return x_shape, w_shape


def engine_unpacked(engine: str, x: np.ndarray, weight: np.ndarray) -> tuple:
    """X and Wt in `engine`'s layout (`engine_layout`) back as (N, *view, G, CG) and
    (*K, G, OCG, CG) (a packed engine's CG then the padded one)."""
    if engine in PACKED:
        x = np.moveaxis(x, (1, 2), (-3, -2))
        x = x.reshape(*x.shape[:-2], -1)
        weight = np.swapaxes(weight, -2, -3)
        return x, weight.reshape(*weight.shape[:-2], -1)
    if channels_first(engine):
        x = np.moveaxis(x, (1, 2), (-2, -1))
    if weight_oc_last(engine):
        weight = np.swapaxes(weight, -1, -2)
    return x, weight


def packs_evenly(engine: str, cg: int) -> bool:
    """Whether `engine`'s packed variant (`PACKED`) does the unpacked engine's MFMAs for `cg`
    input channels per group and no more: its channel steps of k packs of PACK pad the
    channels to the same count as the unpacked steps of k (32 or 64 channels; 3 would take
    16 on the 16x16 engine, four times its one step of 4)."""
    k = _mfma_info(engine).k
    packs = -(-cg // PACK)
    return -(-packs // k) * k * PACK == -(-cg // k) * k


def conv_engine(cg: int, ocg: int, phases: int = 1, positions: int | None = None,
                taps: int = 0, dilation: int = 1) -> tuple[str, tuple[int, int]]:
    """The f32 engine and its `tiles` for a group shape: the MFMA implicit GEMM unless its
    k = 2 or its 32 output channels would hold one used channel (depthwise and one output
    channel per group, where the per-lane FMA engine wastes less; at 8 channels per group,
    a quarter of the MFMA's columns, KernelBench 73 models at 3.4x the roofline on the MFMA
    engine and 152x on the FMA one), with CHANNEL_TILES channel tiles per wave when the
    output has one phase (`phases`: a strided transposed convolution's phases each store
    their own tiles) and the group has more output channels than one tile holds: at 32 or
    fewer a second tile only loads guarded zeros of the weight, a vector memory instruction
    per tap for nothing (KernelBench Level 2 23, 24 channels: 566 us on two tiles, 343 on
    one, modelled). A size-dependent choice is a `CHOICES` field, so the harness pins the
    scaled check to the published sizes' kernel. At most NARROW_OC output channels per group
    take the 16x16 MFMA ("mfma_f32_16", NARROW_TILES position tiles a wave): the 32x32 one
    computed and stored 32 columns for 16 used (KernelBench Level 2 6's convolution, 3 to 16
    channels 3x3x3: 182.5 us on 32x32x2, 108.2 on 16x16x4, modelled), up to
    NARROW_MAX_TILES where a single-phase output's rows (`positions`) are wider. A phased output
    wider than that, undilated, with `taps` (the window's) of at least PACKED_MIN_TAPS per
    phase, takes a packed engine (`_packed_engine`, `positions` the output view's innermost
    extent) where its input channels pack evenly (`packs_evenly`)."""
    if ocg < 2:
        return "fma", (FMA_SLOTS, 1)
    if cg < 2:
        return "fma", (1, FMA_OC)
    if ocg <= NARROW_OC:
        tiles = NARROW_TILES
        while phases == 1 and positions is not None and tiles < NARROW_MAX_TILES and \
                NARROW_OC * tiles < positions:
            tiles *= 2
        return "mfma_f32_16", (tiles, 1)
    if phases > 1 and taps >= PACKED_MIN_TAPS * phases and dilation == 1 and \
            packs_evenly("mfma_f32", cg):
        return _packed_engine(cg, ocg, positions)
    wide = phases == 1 and ocg > BLOCK_OC
    return "mfma_f32", (1, CHANNEL_TILES if wide else 1)


def _packed_engine(cg: int, ocg: int, positions: int | None) -> tuple[str, tuple[int, int]]:
    """A phased output's packed engine (`conv_engine`, more than NARROW_OC output channels a
    group): the 32x32 one, unless its 32-position tiles pad a row's `positions` (the output
    view's innermost extent) to more than the 16x16 one's 16-position tiles and the `cg`
    input channels pack evenly on the 16x16 one too (`packs_evenly`), which then covers up
    to PACKED_NARROW_TILES 16-channel tiles a wave. The unpacked engine waited on
    vector memory instructions (a dword of A and of B per MFMA); packed, the MFMAs bound,
    so the positions the tiles compute past the row count. Modelled (KernelBench Level 2):
    91, 65 positions, 2844 us unpacked, 2452 packed 32x32, 2019 packed 16x16 at 4 tiles;
    38, 32 positions, 788, 429, 508; 49, 32 positions, 448, 275, 237."""
    if positions is not None and -(-positions // 32) * 32 > -(-positions // 16) * 16 and \
            packs_evenly("mfma_f32_16_pk", cg):
        tiles = 1
        while tiles < PACKED_NARROW_TILES and NARROW_OC * tiles < ocg:
            tiles *= 2
        return "mfma_f32_16_pk", (1, tiles)
    return "mfma_f32_pk", (1, 1)


def _mfma_info(engine: str):
    """The catalogue entry of an MFMA engine's instruction (its m, n, k)."""
    from argus.isa_cdna3.mfma import mfma as catalogue

    return catalogue(ENGINE_MFMA[engine])


def _conv_body(dims, engine, steps, t, *, window, stride, padding, dilation, transposed, tiles,
               unrolled):
    X, Wt, Y = t["X"], t["Wt"], t["Y"]
    tiles = _per_dim(tiles, 2, "tiles")
    if not isinstance(unrolled, int) or unrolled < 1:
        raise ArgusError(f"conv_kernel unrolled={unrolled!r}",
                         fix="give a whole number of taps >= 1 (UNROLLED_TAPS by default)")
    t = {**t, "unrolled": unrolled}
    if min(tiles) < 1 or any(t & (t - 1) for t in tiles) or (engine == "mfma" and
                                                            tiles != (1, 1)) or \
            (engine == "fma" and tiles[0] * tiles[1] > FMA_SLOTS):
        raise ArgusError(f"conv_kernel tiles={tiles} for the {engine!r} engine",
                         fix="give powers of two (the block counts divide by shifts): register "
                             "blocking is the f32 engines' ('fma': at most "
                             f"{FMA_SLOTS} registers per lane, position tiles times channels)")
    window, stride, padding, dilation = _conv_params(dims, window, stride, padding, dilation)
    taps = tap_plan(dims, window, stride, padding, dilation, transposed)
    xs, ws, ys = X.shape, Wt.shape, Y.shape
    first = channels_first(engine)
    lead = 3 if first else 1                                   # X's axes before the spatial
    y_lead = 3 if output_first(engine) else 1                # Y's axes before the spatial
    OCG = ws[-1] if weight_oc_last(engine) else ws[-2]
    N, G, CG = (xs[0], xs[1], xs[2]) if first else (xs[0], xs[-2], xs[-1])
    if engine in PACKED:
        OCG = ws[-2]
        T.assume(xs[-1].eq(PACK))
        T.assume(ws[-1].eq(PACK))
        # what the verifier checks at every MFMA (`_packed_reduce`): A and B meet at one
        # group and one input channel, each a pack's position plus the lane's slot in it
        T.tag(X, lambda n, g, c, *rest: {"g": g, "ch": c * PACK + rest[-1]})
        T.tag(Wt, lambda *k: {"g": k[dims], "ch": k[dims + 1] * PACK + k[-1]})
    x_phases, y_phases = view_phases(dims, stride, transposed)
    stat_phases = y_phases                  # the phases the statistics are taken over
    if steps and steps[-1][0] in ("rows", "channels"):
        # every output channel in the one channel block of the one group
        T.assume(G.eq(1))
        T.assume(OCG <= (_mfma_info(engine).n * tiles[1] if engine != "fma" else tiles[1]))
        if steps[-1][0] == "rows":
            T.assume((ys[2] if output_first(engine) else ys[-1]).eq(1))
    if any(s[0] in POOL_STEPS for s in steps):
        if not transposed:
            raise ArgusError(f"conv_kernel epilogue step {steps[-1][0]} on a forward "
                             "convolution", fix="pool a transposed convolution's phases "
                             "(window = its stride) only; launch a pool_kernel otherwise")
        y_phases = (1,) * dims                     # Y holds the pooled output, one phase
    steps_per_row = row_steps(dims, stride, transposed)
    for a in range(dims):
        T.assume(ws[a].eq(window[a]))
        T.assume(xs[lead + 1 + 2 * a].eq(x_phases[a]))
        T.assume(ys[y_lead + 1 + 2 * a].eq(y_phases[a]))
    out_extent = [ys[y_lead + 2 * a] for a in range(dims)]    # O2 per dimension
    pooled = any(s[0] in POOL_STEPS for s in steps)
    stats = any(s[0] == "stats" for s in steps)
    if pooled and stats:
        # statistics of the unpooled output: every position of its phase view is computed,
        # so Y holds ceil(plain / stride) pooled positions per axis (the caller keeps the
        # floor's: a pool drops an odd extent's last row, the statistics do not, and are
        # taken inside the plain extents alone, `_channel_stats`)
        T.assume(t["S"].shape[dims + 1].eq(stat_phases[-1]))
        plain = [*t["S"].shape[2:dims + 1], t["Edge"].shape[0]]
        for e, o, p in zip(plain, out_extent, stat_phases, strict=True):
            T.assume(o * p >= e)
    x_pos, y_pos = lead + 2 * (dims - 1), y_lead + 2 * (dims - 1)  # the innermost spatial axis
    if engine == "mfma":
        T.assume((CG % 8).eq(0))
        T.assume((OCG % BLOCK_OC).eq(0))
    if engine != "fma":
        info = _mfma_info(engine)
        block_p, block_oc = info.m * tiles[0], info.n * tiles[1]
    else:
        block_p, block_oc = FMA_P * tiles[0], tiles[1]
    if stats:
        if engine == "fma":
            raise ArgusError("conv_kernel epilogue step 'stats' on the 'fma' engine",
                             fix="take statistics on the MFMA engines ('mfma_f32', 'mfma')")
        T.assume(t["S"].shape[0].eq(MOMENT_PLANES))
    if engine in F32_MFMA_ENGINES and engine not in PACKED and len(taps) == 1 and \
            math.prod(window) >= STAGED_MIN_TAPS \
            and _looped_axes(next(iter(taps.values())), STAGED_TAPS) == 0:
        # One LDS buffer for every step's weights. Not for a phased output: each phase reads
        # a few of the taps (staging all of them made Level 2 72 1.4x slower), and its
        # phases are branches, where the verifier allows no barrier; nor where a runtime
        # tap loop holds the reads: their race checks came back unknown (64 taps of 4x4x4).
        stage = weight_stage(window, tiles, ENGINE_MFMA[engine])
        if stage is not None:
            t = {**t, "stage": (stage, window)}
            slab = input_slab(next(iter(taps.values())), block_p, ENGINE_MFMA[engine])
            if slab is not None:
                t = {**t, "slab": slab}
    rows = out_extent[-2] if dims >= 2 else 1
    # A phased (strided transposed) output gives each phase its own band of workgroups along
    # the grid's first axis: a branch per phase holds that phase's loops, so the offsets its
    # loops keep live (hoisted before them) are live in that branch only, and the SGPRs a
    # wave needs do not grow with the phase count (25 phases of a stride-5 2-D output).
    # A pooled output's workgroups compute every phase of their positions in turn instead,
    # and a 3-D one's split the depths DEPTH_PARTS ways (along the grid's last axis, every
    # DEPTH_PARTS-th depth a workgroup): one workgroup per row for every phase and depth
    # left too few of them to fill the CUs (KernelBench Level 2 78, 16 images: 128).
    images = 1 if engine == "fma" else MFMA_WAVES
    bands = 1 if pooled else len(taps)
    parts = DEPTH_PARTS if pooled and dims == 3 else 1
    T.grid(rows * bands, T.cdiv(out_extent[-1], block_p), T.cdiv(N, images) * parts)
    q0 = T.program_id(1) * block_p
    n = (T.program_id(2) // parts if parts > 1 else T.program_id(2)) * images
    if stats:
        t = {**t, "moments": (stat_phases, _valid_positions(engine, t["Edge"].shape[0], q0,
                                                            stat_phases[-1], tiles[0]))}

    def output_rows(row, phase_taps):
        outer = [row] if dims >= 2 else []
        if dims == 3:
            first_depth = T.program_id(2) % parts if parts > 1 else 0
            for qd in T.range(first_depth, out_extent[0], parts, name="od"):
                at = [qd, *outer]
                _conv_channels(engine, steps, t, phase_taps, n, at, _times(at, steps_per_row),
                               q0, G, CG, OCG, block_oc, x_pos, y_pos, tiles)
        else:
            _conv_channels(engine, steps, t, phase_taps, n, outer,
                           _times(outer, steps_per_row), q0, G, CG, OCG, block_oc, x_pos,
                           y_pos, tiles)

    band = T.program_id(0)
    if bands == 1:
        output_rows(band, taps)
        return
    for i, (phase, phase_taps) in enumerate(taps.items()):
        with T.when((band >= rows * i) & (band < rows * (i + 1))):
            output_rows(band - rows * i, {phase: phase_taps})


def _times(rows, steps) -> list:
    """Output rows of the outer axes as input view rows (`steps`: `row_steps`, whose last
    entry, the innermost axis', has no row here)."""
    return [q * m for q, m in zip(rows, steps[:len(rows)], strict=True)]


def _conv_channels(engine, steps, t, taps, n, outer, x_outer, q0, G, CG, OCG, block_oc, x_pos,
                   y_pos, tiles):
    """Every group and output-channel block of one row of output positions (`outer` its
    coordinates on the outer axes of Y, `x_outer` on those of X)."""
    rows = steps[-1] if steps and steps[-1][0] in ("rows", "channels") else None
    stats = next((s for s in steps if s[0] == "stats"), None)
    steps = steps[:-1] if rows else steps
    steps = tuple(s for s in steps if s[0] != "stats")
    at = [i for i, s in enumerate(steps) if s[0] in POOL_STEPS]
    pool = steps[at[0]][0] if at else None
    # the steps before the pool run on each phase, those after it on the pooled tiles
    before, after = (steps[:at[0]], steps[at[0] + 1:]) if at else (steps, ())
    for g in T.range(0, G, name="g"):
        blocks = OCG // block_oc if engine == "mfma" else T.cdiv(OCG, block_oc)
        for block in T.range(0, blocks, name="ocb"):
            oc0 = block * block_oc
            vectors = _block_vectors(t, g, oc0)
            t_block = {**t, "vectors": vectors}
            if pool is None:
                for phase, phase_taps in taps.items():
                    outs, spec = _conv_phase(engine, steps, t_block, phase_taps, n, outer,
                                             x_outer, q0, g, oc0, CG, x_pos, y_pos, tiles,
                                             phase, store=rows is None and
                                             (stats is None or stats[1]))
                    if stats:
                        _channel_stats(t, outs, spec, n, outer, q0, g, oc0, phase)
                    if rows:
                        _channel_rows(engine, rows, t, outs, spec, n, outer, q0, g, oc0, OCG,
                                      y_pos, phase)
                continue
            # every phase of these positions in turn, each after the epilogue before the
            # pool, combined as they come (the max, or the sum scaled by the window's 1/size)
            pooled = None
            for phase, phase_taps in taps.items():
                outs, spec = _conv_phase(engine, before, t_block, phase_taps, n, outer,
                                         x_outer, q0, g, oc0, CG, x_pos, y_pos, tiles,
                                         (0,) * (len(outer) + 1))
                if stats:                # (of each phase before the pool: `_epilogue`)
                    _channel_stats(t, outs, spec, n, outer, q0, g, oc0, phase, branch=True)
                pooled = outs if pooled is None else {
                    key: (T.maximum(pooled[key], out) if pool == "pool_max" else
                          pooled[key] + out) for key, out in outs.items()}
            if pool == "pool_avg":
                pooled = {key: out * (1.0 / len(taps)) for key, out in pooled.items()}
            for (r, o), out in pooled.items():
                pooled[r, o] = _apply_epilogue(
                    out, after, functools.partial(vectors, "bias", spec, o), None,
                    lambda i, vectors=vectors, spec=spec, o=o: vectors(f"E{i}", spec, o))
            if rows:
                _channel_rows(engine, rows, t, pooled, spec, n, outer, q0, g, oc0, OCG, y_pos,
                              (0,) * (len(outer) + 1))
                continue
            _conv_store(engine, t["Y"], pooled, spec, n, outer, q0, g, oc0, y_pos,
                        (0,) * (len(outer) + 1))


def _block_vectors(t, g, oc0):
    """The per-channel vectors (bias, E<i>) of one channel block as `vectors(name, spec, o)`:
    channel tile o's entries spread over every position of `spec`, loaded and spread once,
    at their first use, and shared by every phase and position tile of the block (a pooled
    3-D output's eight phases each loaded and waited on them: KernelBench Level 2 50, 16
    loads a row, 325 -> 270 us modelled). Not loaded before the reduction: live through
    it, their offsets took the SGPR a 16x16 engine's 3-D window had left (Level 2 8's
    convolution fell to the 32x32 engine, 719 -> 1258 us)."""
    spread: dict = {}

    def vectors(name, spec, o):
        if (name, o, spec) not in spread:
            spread[name, o, spec] = _channel_row(spec, t[name].load(
                (g, oc0 + o * spec.shape[-1]), _channels_of(spec), axes=(1,), guard=True))
        return spread[name, o, spec]

    return vectors


def _channel_rows(engine, rows, t, outs, spec, n, outer, q0, g, oc0, OCG, y_pos, phase):
    """A "rows" epilogue step: per position tile, each stat reduced along the output channels
    (every channel tile of the block, the channels past OCG at the reduction's identity,
    earlier stats spread back along them), then the output expression over the stats,
    stored at channel 0 of Y (one value per position). A "channels" step keeps a value per
    channel: the output expression over each channel tile, the stats spread back along the
    channels, stored as the convolution's own output is."""
    from argus.kernels.expr import emit

    name, stats, out, vectors = rows
    axis = len(spec.shape) - 1                       # the output channels
    row_spec = T.reduced(spec, axis)
    cols = spec.shape[-1]
    by_tile = sorted({o for _, o in outs})
    vec = {o: {("vec", f"V{i}"): _channel_row(spec, t[f"V{i}"].load(
        (oc0 + o * cols,), _channels_of(spec), axes=(0,), guard=True))
        for i in range(vectors)} for o in by_tile}
    batched = len(spec.shape) == 3
    for r in sorted({r for r, _ in outs}):
        done: dict = {}
        for k, (fn, e) in enumerate(stats):
            total = None
            for o in by_tile:
                env = {("leaf", "y"): outs[r, o], **vec[o],
                       **{("stat", j): T.broadcast(s, axis, spec) for j, s in done.items()}}
                first = oc0 + o * cols
                x = T.mask(emit(e, env, {}), lambda *c, first=first: first + c[-1] < OCG,
                           ROW_IDENTITY[fn])
                total = x if total is None else (
                    total + x if fn == "sum" else total * x if fn == "prod" else
                    T.maximum(total, x))
            done[k] = T.reduce(total, fn, axis, row_spec)
        if name == "channels":
            spread = {("stat", k): T.broadcast(s, axis, spec) for k, s in done.items()}
            _conv_store(engine, t["Y"], {(r, o): emit(out, {
                ("leaf", "y"): outs[r, o], **vec[o], **spread}, {}) for o in by_tile},
                spec, n, outer, q0, g, oc0, y_pos, phase)
            continue
        y_origin, y_axes = _y_place(engine, spec, n, outer, q0, g, 0, y_pos, phase, r, 0,
                                    batched)
        compact = _one_a_lane(row_spec)
        if compact is None:
            result = emit(out, {("stat", k): s for k, s in done.items()}, {})
            t["Y"].store(y_origin, result, axes=(0,) * batched + (y_pos,), guard=True)
            continue
        # the stats one element a lane, along Y's one channel: the output expression then
        # runs on one register a lane, not on every position a lane holds replicated along
        # the channels' lanes, and one store writes them
        result = emit(out, {("stat", k): T.broadcast(s, axis, compact)
                            for k, s in done.items()}, {})
        t["Y"].store(y_origin, result, axes=y_axes, guard=True)


def _one_a_lane(row_spec):
    """A channel-reduced tile's layout `row_spec` (positions replicated along the lanes that
    held the channels, several a lane) as one register a lane with a channel axis of one
    appended: lane l keeps its slot l % slots. None where that does not cover every
    element (or a lane holds one already)."""
    from argus.ir.expr import substitute

    layout = row_spec.layout
    if layout.slots == 1:
        return None
    lane = T.thread_vars(layout.waves, 1)[1]
    coords = tuple(substitute(c, {"slot": lane % layout.slots}) for c in layout.coords)
    compact = T.TileSpec((*row_spec.shape, 1), T.ThreadLayout(layout.waves, 1,
                                                               (*coords, 0)))
    held = {tuple(c) for c in np.stack(layout.table(), -1).reshape(-1, len(coords))}
    kept = {tuple(c) for c in np.stack(compact.layout.table()[:-1], -1).reshape(-1,
                                                                              len(coords))}
    return compact if kept == held else None


def _valid_positions(engine, limit, q0, phases, position_tiles) -> dict:
    """Per (innermost phase, position tile) of a workgroup, 1.0 where a position of the
    engine's accumulator tile is inside the plain output (q * phases + phase < limit, the
    plain innermost extent) and 0 past it, as the clamped distance to the end (no compare:
    a compare per position held a lane mask in SGPRs per slot of the tile, more than the
    engine has left). Made before the phases' branches, so every branch reads tiles
    defined where they all start."""
    spec = _image_layout(ENGINE_MFMA[engine], "c")
    rows = _mfma_info(engine).m                        # positions a tile holds
    zero, one = T.zeros(spec), T.full(spec, 1.0)
    valid = {}
    for p in range(phases):
        for r in range(position_tiles):
            ahead = T.iota(spec, None, start=T.cdiv(limit - p, phases) - q0 - r * rows) \
                - T.iota(spec, 1)
            valid[p, r] = T.minimum(T.maximum(ahead, zero), one)
    return valid


def _channel_stats(t, outs, spec, n, outer, q0, g, oc0, phase, branch=False):
    """A "stats" epilogue step: per (position tile, channel tile) of `outs`, each image's and
    channel's count of valid positions, their mean, and M2, the sum of squared deviations
    from that mean (a second pass over the registers, so a large mean against a small
    spread loses nothing, unlike a sum of squares), stored as the MOMENT_PLANES planes of S
    at (image, outer plain output rows, innermost phase, position tile, channel) for
    `moments_kernel` to combine (Chan's pairwise formula). Valid: inside the plain output
    (a transposed output's phase view runs past it): an outer row past it is not stored
    (S's outer extents are the plain ones), an innermost position is weighted by 1 or 0
    (`_valid_positions`). The MFMA engines' tiles: (image, position, channel)."""
    phases, valid_at = t["moments"]
    S = t["S"]
    rows = [q * count + p for q, p, count in zip(outer, phase, phases, strict=False)]
    if not rows or not branch:
        _tile_stats(S, outs, spec, valid_at, n, rows, q0, g, oc0, phase, phases)
        return
    # with `branch`, an outer row past the plain output is not stored by a uniform branch
    # (whose condition the stores' guards then know) instead of a lane mask per guarded
    # axis, which a pooled 3-D output's eight phases held live in SGPRs past a wave's 102
    # (not yet measured on the unpooled kernels, which keep their masks)
    inside = rows[0] < S.shape[2]
    for a in range(1, len(rows)):
        inside = inside & (rows[a] < S.shape[2 + a])
    with T.when(inside):
        _tile_stats(S, outs, spec, valid_at, n, rows, q0, g, oc0, phase, phases)


def _tile_stats(S, outs, spec, valid_at, n, rows, q0, g, oc0, phase, phases):
    """`_channel_stats`' moments of each tile of `outs`, stored at outer rows `rows`."""
    axis = len(spec.shape) - 2                       # the output positions
    stat_spec = T.reduced(spec, axis)
    for (r, o), out in outs.items():
        valid = valid_at[phase[-1], r]
        count = T.reduce(valid, "sum", axis, stat_spec)
        mean = T.reduce(out * valid, "sum", axis, stat_spec) * T.rcp(
            T.maximum(count, T.full(stat_spec, 1.0)))
        dev = (out - T.broadcast(mean, axis, spec)) * valid
        m2 = T.reduce(dev * dev, "sum", axis, stat_spec)
        block = T.program_id(1) * len(valid_at) // phases[-1] + r
        for k, plane in enumerate((count, mean, m2)):
            origin = (k, n, *rows, phase[-1], block, g, oc0 + o * spec.shape[-1])
            S.store(origin, plane, axes=(1, len(origin) - 1), guard=True)


def _conv_store(engine, Y, outs, spec, n, outer, q0, g, oc0, y_pos, phase):
    """Store each (position tile, channel tile) of `outs` at output `phase`."""
    batched = len(spec.shape) == 3                  # the MFMA engines: (image, pos, channel)
    for (r, o), out in outs.items():
        y_origin, y_axes = _y_place(engine, spec, n, outer, q0, g, oc0, y_pos, phase, r, o,
                                    batched)
        Y.store(y_origin, out, axes=y_axes, guard=True)


def _y_place(engine, spec, n, outer, q0, g, oc0, y_pos, phase, r, o, batched):
    """Y's origin and tile axes for position tile r and channel tile o."""
    dq, doc = r * spec.shape[-2], o * spec.shape[-1]
    spatial = [e for q, ph in zip([*outer, q0 + dq], phase, strict=True) for e in (q, ph)]
    if output_first(engine):
        return (n, g, oc0 + doc, *spatial), (0,) * batched + (y_pos, 2)
    y_origin = (n, *spatial, g, oc0 + doc)
    return y_origin, (0,) * batched + (y_pos, len(y_origin) - 1)


def _conv_phase(engine, steps, t, taps, n, outer, x_outer, q0, g, oc0, CG, x_pos, y_pos, tiles,
                phase, store=False):
    """One output phase of one channel block: a reduction over (input channel, tap) and the
    epilogue, per (position tile, channel tile), each stored at `phase` as it is made with
    `store`; returns them and their spec (a residual is read at `phase`)."""
    X, Wt = t["X"], t["Wt"]

    first = channels_first(engine)

    packed = engine in PACKED

    def x_origin(k_off, k_phase, c, dq=0):
        spatial = [e for q, o, p in zip([*x_outer, q0 + dq], k_off, k_phase, strict=True)
                   for e in (q + o, p)]
        if packed:
            return (n, g, c, *spatial, 0)
        return (n, g, c, *spatial) if first else (n, *spatial, g, c)

    def w_origin(k, c, doc=0):
        if packed:
            return (*k, g, c, oc0 + doc, 0)
        return (*k, g, c, oc0 + doc) if weight_oc_last(engine) else (*k, g, oc0 + doc, c)

    if packed:
        accs, spec = _packed_reduce(X, Wt, taps, CG, x_origin, w_origin, x_pos,
                                    ENGINE_MFMA[engine], tiles, t["unrolled"])
    elif engine == "fma":
        acc, spec = _fma_reduce(X, Wt, taps, CG, x_origin, w_origin, x_pos, tiles,
                                t["unrolled"])
        accs = {(0, 0): acc}
    else:
        stage, window = t.get("stage", (None, None))
        accs, spec = _mfma_reduce(X, Wt, taps, CG, x_origin, w_origin, x_pos,
                                  ENGINE_MFMA[engine], tiles, stage,
                                  window, t["unrolled"], t.get("slab"))
    batched = len(spec.shape) == 3                  # the MFMA engines: (image, pos, channel)
    outs = {}
    vectors = t["vectors"]
    for (r, o), acc in accs.items():
        y_origin, y_axes = _y_place(engine, spec, n, outer, q0, g, oc0, y_pos, phase, r, o,
                                    batched)
        out = outs[r, o] = _apply_epilogue(
            acc, steps, functools.partial(vectors, "bias", spec, o),
            lambda y_origin=y_origin, y_axes=y_axes: t["residual"].load(
                y_origin, spec, axes=y_axes, guard=True),
            lambda i, o=o: vectors(f"E{i}", spec, o))
        if store:
            t["Y"].store(y_origin, out, axes=y_axes, guard=True)
    return outs, spec


def _channels_of(spec):
    """`spec` with every axis but the last (the output channels) reduced away."""
    for _ in spec.shape[:-1]:
        spec = T.reduced(spec, 0)
    return spec


def _channel_row(spec, row):
    """A per-channel row (`_channels_of(spec)`) spread over every position of `spec`."""
    for axis in range(len(spec.shape) - 2, -1, -1):
        inner = spec
        for _ in range(axis):
            inner = T.reduced(inner, 0)
        row = T.broadcast(row, 0, inner)
    return row


def _image_layout(mfma: str, operand: str) -> T.TileSpec:
    """One MFMA fragment per wave with the wave as a leading tile axis: the MFMA_WAVES waves of
    a workgroup hold the same positions and channels of MFMA_WAVES batch images, (image, m, k)
    for A and (image, m, n) for C. A row of output positions narrower than the waves' 4 x 32
    (a 32-wide row of a 3-D convolution) then keeps every wave busy, where waves placed along
    the row would leave three of four idle."""
    from argus.isa_cdna3.mfma import mfma as catalogue

    info = catalogue(mfma)
    slots = info.c_values if operand == "c" else info.k_per_lane
    wave, lane, slot = T.thread_vars(MFMA_WAVES, slots)
    if operand == "a":
        _, i, k = info.a_coord(lane, slot)
        return T.TileSpec((MFMA_WAVES, info.m, info.k),
                          T.ThreadLayout(MFMA_WAVES, slots, (wave, i, k)))
    _, i, j = info.c_coord(lane, slot)
    return T.TileSpec((MFMA_WAVES, info.m, info.n),
                      T.ThreadLayout(MFMA_WAVES, slots, (wave, i, j)))


#: the most LDS bytes the f32 MFMA engine's staged weights of one channel step may take
#: (`_staged_weights`): a 3x3x3 window's one channel tile (9 KiB, its outermost axis rounded
#: up to the waves) fits
STAGED_B_BYTES = 16 * 1024
#: the most taps one window pass unrolls when the weights are staged (`UNROLLED_TAPS`)
STAGED_TAPS = 27
#: the fewest taps whose weights are staged: the two barriers per channel step pay for
#: themselves over a window's loads, not over a pointwise one's (Level 1 87, a 1x1
#: convolution: 3587 us loading its one tap directly, 6079 staged, modelled)
STAGED_MIN_TAPS = 9
#: the workgroups a pooled 3-D convolution's depths are split among (`_conv_body`)
DEPTH_PARTS = 8


#: the most LDS bytes one chunk of the f32 MFMA engine's input slab may take (`input_slab`):
#: a 3x3x3 window's slab (nine rows of 64 positions by 2 channels for four images, 18 KiB)
#: goes through LDS in three chunks of three rows, so that beside its staged weights (9 KiB)
#: four workgroups fit a CU; the whole slab at once left room for two, whose load latency
#: the CU could not hide (KernelBench Level 2 6's convolution, modelled: 186.1 us loading
#: directly, 199.1 with the whole slab, 182.5 in chunks)
SLAB_CHUNK_BYTES = 6 * 1024
#: the fewest taps per slab row that make the slab pay: with one tap per row (a window of
#: width 1) the slab's loads are the direct ones, plus the LDS round trip
SLAB_MIN_REUSE = 2


def input_slab(plan, block_p: int, mfma: str = F32_MFMA):
    """The f32 MFMA engine's input slab for a single-phase window whose weights are staged:
    per channel step each wave loads, for every distinct (outer-axis offsets, inner phase)
    of the taps (a slab row), the run of input positions its taps along the innermost axis
    read (the tile's block_p positions plus the taps' spread, rounded up to whole runs of
    `_slab_run` lanes) with one load per 64 positions and channels, the lanes along the
    positions, and the taps then read their A from LDS at their offsets in the row. The
    direct loads gave every tap its own load of 32 positions by 2 channels, and a vector
    memory instruction holds the CU's addresser for a fixed time however few lines it
    touches: a 3x3x3 window made 27 of them per step, where the slab makes 9 rows x 2
    channels (KernelBench Level 2 6, VMEM bound:
    1022 loads per wave of a workgroup before, 770 with the slab). The rows go through LDS
    in chunks of at most SLAB_CHUNK_BYTES (`_slab_reduce`). Returns (LDS (chunk rows,
    MFMA_WAVES, width, k), {row key: (chunk, row, first offset)}), or None when a row holds
    fewer than SLAB_MIN_REUSE taps on average or one row passes SLAB_CHUNK_BYTES."""
    from argus.isa_cdna3.mfma import mfma as catalogue

    k = catalogue(mfma).k
    taps = [tuple(zip(*tap, strict=True)) for tap in itertools.product(*map(_expand, plan))]
    spread: dict = {}
    for _, off, ph in taps:
        lo, hi = spread.get((off[:-1], ph), (off[-1], off[-1]))
        spread[off[:-1], ph] = (min(lo, off[-1]), max(hi, off[-1]))
    # whole runs of a load's lanes along the row (`_slab_run`)
    run = _slab_run(k)
    width = -(-(block_p + max(hi - lo for lo, hi in spread.values())) // run) * run
    row_bytes = MFMA_WAVES * width * k * 4
    per_chunk = min(len(spread), SLAB_CHUNK_BYTES // row_bytes)
    if len(taps) < SLAB_MIN_REUSE * len(spread) or per_chunk < 1:
        return None
    # as many rows in each chunk as the fewest chunks need (9 rows of 3 per chunk: 3 and 3)
    chunks = -(-len(spread) // per_chunk)
    per_chunk = -(-len(spread) // chunks)
    rows = {key: (i // per_chunk, i % per_chunk, lo)
            for i, (key, (lo, _)) in enumerate(sorted(spread.items()))}
    return T.lds((per_chunk, MFMA_WAVES, width, k), "f32"), rows


def _slab_run(k: int) -> int:
    """The lanes of a slab row's load that run along its positions (`_slab_loads`) for a
    channel step of k: 64 / k on the 16x16 engine (k = 4), whose lanes split into one run per
    channel, so a row keeps one SGPR offset live (a 3x3x3 window's 9 rows by 4 channels, one
    offset each, passed the 102 SGPRs a wave has) and takes whole runs of 16 (48 positions
    for 34, not 64); all 64 at k = 2, where the row is 64 wide either way and a channel's
    32-position runs touched more cache lines (KernelBench Level 2 82's conv: 1314 ->
    1361 us, modelled)."""
    return 64 // k if k > 2 else 64


def _slab_loads(slab, X, x_origin, x_pos, c, k) -> list[dict]:
    """One channel step's input slab rows (`input_slab`), loaded (guarded: past the input's
    far end and its channels they are zeros, as the direct loads read them), per chunk
    {row in the chunk: tile}."""
    buffer, rows = slab
    _, _, width, _ = buffer.shape
    # runs of `run` lanes along the positions, 64 / run channels at once, a lane's slots
    # along the row then through the channels: a row's loads differ by constants (the
    # instruction's offset field) and its channels by a per-lane offset
    run = _slab_run(k)
    groups, per_row = 64 // run, width // run
    wave, lane, slot = T.thread_vars(MFMA_WAVES, per_row * k // groups)
    spec = T.TileSpec((MFMA_WAVES, width, k), T.ThreadLayout(
        MFMA_WAVES, per_row * k // groups, (wave, lane % run + run * (slot % per_row),
                                            lane // run + groups * (slot // per_row))))
    chunks: list[dict] = [{} for _ in range(1 + max(chunk for chunk, _, _ in rows.values()))]
    for (outer, ph), (chunk, row, lo) in rows.items():
        chunks[chunk][row] = X.load(x_origin((*outer, lo), ph, c * k), spec, axes=(0, x_pos, 2),
                                    guard=True)
    return chunks


def _slab_reduce(plan, slab, chunks, acc, fetch, apply):
    """`_over_taps` for a slab (`input_slab`, every tap unrolled): the taps of chunk 0 read
    the rows stored beside the step's weights, each later chunk's rows are stored between
    two barriers of their own (the first waits for the previous chunk's reads), then its taps
    run."""
    buffer, rows = slab
    taps = [tuple(zip(*tap, strict=True)) for tap in itertools.product(*map(_expand, plan))]
    for i, tiles in enumerate(chunks):
        if i:
            T.barrier()
            for row, tile in tiles.items():
                buffer.store((row, 0, 0, 0), tile)
            T.barrier()
        fetched = [fetch(*tap) for tap in taps if rows[tap[1][:-1], tap[2]][0] == i]
        for operands in fetched:
            acc = apply(acc, operands)
    return acc


def weight_stage(window, tiles, mfma: str = F32_MFMA) -> T.Lds | None:
    """The f32 MFMA engine's LDS for one channel step's weights (`_staged_weights`), or None
    when they would pass STAGED_B_BYTES: the window's outermost axis rounded up to a multiple
    of MFMA_WAVES (each wave stores its share), the others whole, then k by the channel
    tiles' columns."""
    from argus.isa_cdna3.mfma import mfma as catalogue

    info = catalogue(mfma)
    shape = (-(-window[0] // MFMA_WAVES) * MFMA_WAVES, *window[1:], info.k, info.n * tiles[1])
    if math.prod(shape) * 4 > STAGED_B_BYTES:
        return None
    return T.lds(shape, "f32")


def _staged_weights(buffer, Wt, window, w_origin, c, k, cols, tiles, info, slab=None,
                    slab_rows=None):
    """The f32 MFMA engine's weights of one input-channel step, every tap of the window, in
    LDS; a function giving tap k's B tile for channel tile o, or None when they do not fit
    STAGED_B_BYTES. The MFMA_WAVES waves of a workgroup share one B (only their images
    differ), so each wave loads a quarter of the window's outermost axis, once per channel
    step, where every wave would otherwise load every tap's B itself: a vector memory
    instruction per tap and wave, which bounds these convolutions (KernelBench Level 2's 3-D
    chains). Two barriers per step: the store waits for the previous step's reads, the reads
    for every wave's store."""
    shape = buffer.shape
    rows, inner = shape[0] // MFMA_WAVES, math.prod(window[1:])
    slots = rows * inner * tiles[1]
    wave, lane, slot = T.thread_vars(MFMA_WAVES, slots)
    o, rest = slot % tiles[1], slot // tiles[1]
    outer = []
    for extent in reversed(window[1:]):
        outer.insert(0, rest % extent)
        rest = rest // extent
    copy = T.TileSpec(shape, T.ThreadLayout(MFMA_WAVES, slots, (
        wave * rows + rest, *outer, lane // cols, lane % cols + cols * o)))
    dims = len(window)
    staged = Wt.load(w_origin((0,) * dims, c * k), copy,
                     axes=(*range(dims), dims + 1, dims + 2), guard=True)
    T.barrier()
    buffer.store((0,) * len(shape), staged)
    for row, tile in (slab_rows or {}).items():   # the input slab's first chunk alongside
        slab.store((row, 0, 0, 0), tile)
    T.barrier()
    _, lane, slot = T.thread_vars(MFMA_WAVES, info.k_per_lane)
    _, kk, j = info.b_coord(lane, slot)
    read = T.TileSpec((k, cols), T.ThreadLayout(MFMA_WAVES, info.k_per_lane, (kk, j)))

    def tap(taps, o):
        return buffer.load((*taps, 0, o * cols), read)
    return tap


def _mfma_reduce(X, Wt, plan, CG, x_origin, w_origin, x_pos, mfma, tiles, stage=None,
                 window=None, unrolled=UNROLLED_TAPS, slab=None):
    """The implicit GEMM: per input-channel step of the MFMA's k and per tap, A the input
    positions by k channels, B k channels by the block's output channels. bf16 needs whole
    steps (CG % 8 == 0, OCG % 32 == 0, assumed by the caller) and reads channels last; f32
    guards both tails and reads X and Wt channels first (`channels_first`), so a lane's
    neighbours read neighbouring positions and output channels (a few cache lines per load,
    not one per lane), and stages each step's weights in LDS where they fit
    (`_staged_weights`, given the `window`), and with them its input positions (`slab`, from
    `input_slab`), which the taps then read from LDS."""
    from argus.isa_cdna3.mfma import mfma as catalogue

    a_spec = _image_layout(mfma, "a")
    b_spec = T.mfma_layout(mfma, "b", (MFMA_WAVES, 1))       # every wave the same B
    c_spec = _image_layout(mfma, "c")
    tails = mfma != MFMA
    c_axis = 2 if tails else len(X.shape) - 1
    k = a_spec.shape[-1]

    rows, cols = c_spec.shape[1:]

    def fetch(c, staged):
        def tap(taps, off, ph):
            if slab is not None:
                _, row, lo = slab[1][off[:-1], ph]
                a = [slab[0].load((row, 0, off[-1] - lo + r * rows, 0), a_spec)
                     for r in range(tiles[0])]
            else:
                a = [X.load(x_origin(off, ph, c * k, r * rows), a_spec,
                            axes=(0, x_pos, c_axis), guard=True) for r in range(tiles[0])]
            if staged is not None:
                return a, [staged(taps, o) for o in range(tiles[1])]
            oc_axis, ci_axis = (len(taps) + 2, len(taps) + 1) if tails else \
                (len(taps) + 1, len(taps) + 2)
            b = [Wt.load(w_origin(taps, c * k, o * cols), b_spec, axes=(oc_axis, ci_axis),
                         guard=tails) for o in range(tiles[1])]
            return a, b
        return tap

    def apply(acc, operands):
        a, b = operands
        return {(r, o): T.mfma(mfma, a[r], b[o], acc[r, o]) for r, o in acc}

    acc = {(r, o): T.zeros(c_spec) for r in range(tiles[0]) for o in range(tiles[1])}
    loop = T.range(0, T.cdiv(CG, k) if tails else CG // k, name="c", acc=acc)
    for c in loop:
        staged = None
        chunks = None
        if stage is not None:
            chunks = None if slab is None else _slab_loads(slab, X, x_origin, x_pos, c, k)
            staged = _staged_weights(stage, Wt, window, w_origin, c, k, cols, tiles,
                                     catalogue(mfma), slab and slab[0], chunks and chunks[0])
        if chunks is not None:
            loop.acc = _slab_reduce(plan, slab, chunks, dict(loop.acc), fetch(c, staged), apply)
            continue
        # staged weights are read at constant LDS offsets, so a whole 3x3x3 window unrolls
        # (its taps' input offsets alone fit the SGPRs)
        loop.acc = _over_taps(plan, dict(loop.acc), fetch(c, staged), apply,
                              unrolled if staged is None else STAGED_TAPS)
    return dict(loop.acc), c_spec


def _packed_reduce(X, Wt, plan, packs, x_origin, w_origin, x_pos, mfma, tiles,
                   unrolled=UNROLLED_TAPS):
    """`_mfma_reduce` on a packed engine's X and Wt (`PACKED`: `packs` groups of PACK input
    channels, each innermost): per step of the MFMA's k packs and per tap, each lane loads
    the PACK channels of its k with one 16-byte load for A and one for B, whose registers
    then feed PACK MFMAs, MFMA s taking slot s of every lane (`T.slots`): channel
    (pack c * k + the lane's k) * PACK + s of A and B alike (`mfma_layout(pack=)`'s k order,
    with the packs apart in memory). The verifier asserts at each MFMA that A's and B's
    channel and group (their tags, `_conv_body`) agree. The pack tail (past `packs`) is a
    guarded load of zeros; the channels past CG inside a pack are the host's zeros."""
    from argus.ir.expr import And
    from argus.isa_cdna3.mfma import mfma as catalogue

    info = catalogue(mfma)
    if info.k_per_lane != 1:
        raise ArgusError(f"{mfma} holds {info.k_per_lane} k's per lane: the packed conv "
                         "engines take one", fix="use an f32 MFMA (k_per_lane 1)")
    a_spec = _image_layout(mfma, "a")
    b_spec = T.mfma_layout(mfma, "b", (MFMA_WAVES, 1))       # every wave the same B
    c_spec = _image_layout(mfma, "c")
    k = info.k
    rows, cols = c_spec.shape[1:]
    wave, lane, slot = T.thread_vars(MFMA_WAVES, PACK)
    _, i, ka = info.a_coord(lane, 0)
    a_wide = T.TileSpec((MFMA_WAVES, info.m, k, PACK),
                        T.ThreadLayout(MFMA_WAVES, PACK, (wave, i, ka, slot)))
    _, kb, j = info.b_coord(lane, 0)
    b_wide = T.TileSpec((info.n, k, PACK), T.ThreadLayout(MFMA_WAVES, PACK, (j, kb, slot)))
    x_axes = (0, x_pos, 2, len(X.shape) - 1)

    def fetch(c):
        def tap(taps, off, ph):
            d = len(taps)
            a = [X.load(x_origin(off, ph, c * k, r * rows), a_wide, axes=x_axes, guard=True)
                 for r in range(tiles[0])]
            b = [Wt.load(w_origin(taps, c * k, o * cols), b_wide, axes=(d + 2, d + 1, d + 3),
                         guard=True) for o in range(tiles[1])]
            return a, b
        return tap

    def apply(acc, operands):
        a, b = operands
        for s in range(PACK):
            for r, o in acc:
                acc[r, o] = T.mfma(mfma, T.slots(a[r], s, a_spec), T.slots(b[o], s, b_spec),
                                   acc[r, o])
                T.tag_assert(lambda A, B, C: And(A.ch.eq(B.ch), A.g.eq(B.g)),
                             "A and B meet at one group and input channel")
        return acc

    acc = {(r, o): T.zeros(c_spec) for r in range(tiles[0]) for o in range(tiles[1])}
    loop = T.range(0, T.cdiv(packs, k), name="c", acc=acc)
    for c in loop:
        loop.acc = _over_taps(plan, dict(loop.acc), fetch(c), apply, unrolled)
    return dict(loop.acc), c_spec


def _fma_reduce(X, Wt, plan, CG, x_origin, w_origin, x_pos, tiles, unrolled=UNROLLED_TAPS):
    """Rank-1 updates of a wave's FMA_P * tiles[0] positions (tiles[0] adjacent ones a lane)
    by tiles[1] output channels (slots): per input channel and tap, tiles[0] loads of X and
    tiles[1] of the weight, each lane alike. X is channels first, so the wave's positions
    are one run of memory at one offset per tap (a lane's slots 64 positions apart kept one
    offset per slot live: Level 1 82's depthwise 3x3 modelled 2244 us that way, 2036 us
    this way)."""
    p, o = tiles
    _, lane, slot = T.thread_vars(1, p * o)
    spec = T.TileSpec((FMA_P * p, o),
                      T.ThreadLayout(1, p * o, (p * lane + slot // o, slot % o)))
    _, lane, slot = T.thread_vars(1, p)
    column = T.TileSpec((FMA_P * p,), T.ThreadLayout(1, p, (p * lane + slot,)))
    _, lane, slot = T.thread_vars(1, o)
    row = T.TileSpec((o,), T.ThreadLayout(1, o, (slot,)))   # every lane alike

    def fetch(c):
        def tap(k, off, ph):
            return (X.load(x_origin(off, ph, c), column, axes=(x_pos,), guard=True),
                    Wt.load(w_origin(k, c), row, axes=(len(k) + 2,), guard=True))
        return tap

    def apply(acc, operands):
        x, w = operands
        return acc + T.broadcast(x, 1, spec) * T.broadcast(w, 0, spec)

    loop = T.range(0, CG, name="c", acc=T.zeros(spec))
    for c in loop:
        loop.acc = _over_taps(plan, loop.acc, fetch(c), apply, unrolled)
    return loop.acc, spec


def conv_output_size(size: int, window: int, stride: int, padding: int, dilation: int,
                     transposed: bool, output_padding: int = 0) -> int:
    """torch's output extent of one spatial dimension."""
    if transposed:
        return (size - 1) * stride - 2 * padding + dilation * (window - 1) + 1 + output_padding
    return (size + 2 * padding - dilation * (window - 1) - 1) // stride + 1


def phase_view_nd(x: np.ndarray, stride, groups: int = 1, front=0, fill: float = 0.0,
                  extent=None) -> np.ndarray:
    """A channels-last array (N, *spatial, C) as (N, [ceil(size/s), s] per dimension, G, C/G):
    `front` elements of `fill` before each spatial dimension, then the data, then `fill` up to
    `extent` (if given) and up to a multiple of the stride."""
    dims = x.ndim - 2
    stride, front = _per_dim(stride, dims, "stride"), _per_dim(front, dims, "front")
    extent = _per_dim(extent, dims, "extent") if extent is not None else (0,) * dims
    if x.shape[-1] % groups:
        raise ArgusError(f"{x.shape[-1]} channels do not split into {groups} groups",
                         fix="give a group count that divides the channels")
    padded_shape = [-(-max(f + n, e) // s) * s for n, s, f, e
                    in zip(x.shape[1:-1], stride, front, extent, strict=True)]
    padded = np.full((x.shape[0], *padded_shape, x.shape[-1]), fill, x.dtype)
    padded[(slice(None), *(slice(f, f + n) for f, n in zip(front, x.shape[1:-1],
                                                            strict=True)))] = x
    view = [e for n, s in zip(padded_shape, stride, strict=True) for e in (n // s, s)]
    return padded.reshape(x.shape[0], *view, groups, x.shape[-1] // groups)


def conv_input_view(x: np.ndarray, *, window, stride=1, padding=0, dilation=1,
                    transposed=False, groups=1) -> np.ndarray:
    """X for `conv_kernel`: the input (N, *spatial, C) in its phase view with `input_pad`."""
    dims = x.ndim - 2
    front = input_pad(dims, window, stride, padding, dilation, transposed)
    return phase_view_nd(x, view_phases(dims, stride, transposed)[0], groups, front)


def conv_output_view(n: int, out_spatial, stride, groups: int, oc_per_group: int,
                     transposed: bool) -> tuple[int, ...]:
    """The shape of Y for `conv_kernel`: (N, [O2, SO] per dimension, G, OCG)."""
    dims = len(out_spatial)
    phases = _per_dim(stride, dims, "stride") if transposed else (1,) * dims
    view = [e for o, r in zip(out_spatial, phases, strict=True) for e in (-(-o // r), r)]
    return (n, *view, groups, oc_per_group)


def from_phase_view(y: np.ndarray, out_spatial) -> np.ndarray:
    """Y of `conv_kernel` (N, [O2, SO]..., G, OCG) as the plain (N, *out_spatial, G*OCG)."""
    dims = len(out_spatial)
    merged = y.reshape(y.shape[0], *(y.shape[1 + 2 * a] * y.shape[2 + 2 * a]
                                     for a in range(dims)), y.shape[-2] * y.shape[-1])
    return merged[(slice(None), *(slice(0, o) for o in out_spatial))]


def conv_reference_nd(x, weight, *, stride=1, padding=0, dilation=1, transposed=False,
                      output_padding=0, epilogue=(), bias=None, residual=None, out=None,
                      vectors=()):
    """Direct N-d convolution in float64, channels last: x (N, *spatial, C), weight
    (*window, G, OCG, CG) with C = G * CG. Forward convolution gathers (y[o] += x[o*s + k*d -
    p] w[k]); transposed scatters, as torch's conv_transpose defines it (y[i*s + k*d - p] +=
    x[i] w[k], with w[k][g, oc, c] = torch's weight[g*CG + c, oc, *k]). The epilogue steps
    are applied in order, bias (G*OCG,) and residual (the output's shape) where named. `out`
    overrides the output extents (positions past the input read zeros); `vectors` are the
    "vec" steps' E<i> (G*OCG,)."""
    x, weight = np.asarray(x, np.float64), np.asarray(weight, np.float64)
    dims = x.ndim - 2
    window = weight.shape[:dims]
    groups, ocg, cg = weight.shape[dims:]
    s, p = _per_dim(stride, dims, "stride"), _per_dim(padding, dims, "padding")
    d, op = _per_dim(dilation, dims, "dilation"), _per_dim(output_padding, dims, "op")
    spatial = x.shape[1:-1]
    out = out or [conv_output_size(n, k, s_, p_, d_, transposed, o_) for n, k, s_, p_, d_, o_
                  in zip(spatial, window, s, p, d, op, strict=True)]
    xg = x.reshape(*x.shape[:-1], groups, cg)
    if transposed:
        full = [max((n - 1) * s_ + d_ * (k - 1) + 1, p_ + o) for n, k, s_, p_, d_, o
                in zip(spatial, window, s, p, d, out, strict=True)]
        y = np.zeros((x.shape[0], *full, groups, ocg))
        for k in itertools.product(*map(range, window)):
            contrib = np.einsum("...gc,goc->...go", xg, weight[k])
            place = tuple(slice(k_ * d_, k_ * d_ + s_ * n, s_)
                          for k_, d_, s_, n in zip(k, d, s, spatial, strict=True))
            y[(slice(None), *place)] += contrib
        y = y[(slice(None), *(slice(p_, p_ + o) for p_, o in zip(p, out, strict=True)))]
    else:
        padded = np.zeros((x.shape[0], *(n + 2 * p_ + s_ * o + d_ * k for n, p_, s_, o, d_, k
                                         in zip(spatial, p, s, out, d, window, strict=True)),
                           groups, cg))
        padded[(slice(None), *(slice(p_, p_ + n) for p_, n in zip(p, spatial, strict=True)))] = xg
        y = np.zeros((x.shape[0], *out, groups, ocg))
        for k in itertools.product(*map(range, window)):
            patch = padded[(slice(None), *(slice(k_ * d_, k_ * d_ + s_ * o, s_)
                                           for k_, d_, s_, o in zip(k, d, s, out, strict=True)))]
            y += np.einsum("...gc,goc->...go", patch, weight[k])
    y = y.reshape(*y.shape[:-2], groups * ocg)
    for name, *args in _epilogue(epilogue):
        if name in POOL_STEPS:                  # windows of the stride, the far rest dropped
            pooled = [o // s_ for o, s_ in zip(out, s, strict=True)]
            y = y[(slice(None), *(slice(0, p_ * s_) for p_, s_ in zip(pooled, s, strict=True)))]
            y = y.reshape(y.shape[0], *(e for p_, s_ in zip(pooled, s, strict=True)
                                        for e in (p_, s_)), y.shape[-1])
            windows = tuple(range(2, 2 + 2 * dims, 2))
            y = y.max(axis=windows) if name == "pool_max" else y.mean(axis=windows)
        elif name == "vec":
            y = _vec_op(args[0], y, np.asarray(vectors[args[1]], np.float64).reshape(-1))
        elif name == "bias":
            y = y + np.asarray(bias, np.float64).reshape(-1)
        elif name == "residual":
            y = y + np.asarray(residual, np.float64)
        elif name == "scale":
            y = y * args[0]
        elif name == "clamp":
            y = np.clip(y, args[0], args[1])
        elif name == "tanh":
            y = np.tanh(y)
        else:
            y = _activate_reference(y, name)
    return y


def _activate_reference(y, activation: str):
    if activation == "relu":
        return np.maximum(y, 0)
    if activation == "sigmoid":
        return 1 / (1 + np.exp(-y))
    if activation == "gelu":
        import math

        return y * 0.5 * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))
    return y


@functools.cache
def pool_kernel(dims: int) -> T.KernelDef:
    """Max or average pooling over `dims` spatial dimensions (1, 2 or 3), f32, channels first
    with batch and channels merged: X (NC, [I2, S] per dimension) the input's phase view made
    by `pool_input_view` (padding and the far end filled with -inf for max, 0 for the
    average), Y (NC, *output extents). Compile-time parameters: kind ("max" or "avg"), window,
    stride, padding, dilation (an int or one per dimension), cols (POOL_COLS: the output
    positions along the innermost dimension a wave's tile holds, by 256 / cols planes; a
    narrow output takes fewer, `pool_cols`). The average divides by the window's size,
    padding included (torch's count_include_pad=True)."""
    if dims not in (1, 2, 3):
        raise ArgusError(f"pool_kernel(dims={dims!r}): dims is 1, 2 or 3")
    axes = SPATIAL[3 - dims:]
    annotations = {"X": Tensor("f32", "NC", *_view_shape("I2", "S", dims)),
                   "Y": Tensor("f32", "NC", *(f"O{a}" for a in axes))}
    params = {"kind": "max", "window": (2,) * dims, "stride": (2,) * dims,
              "padding": (0,) * dims, "dilation": (1,) * dims, "cols": 64}

    def pool(X, Y, **chosen):
        _pool_body(dims, X, Y, **chosen)

    return _family(pool, f"pooling{dims}d", pool_kernel.__doc__, annotations, params, 1)


#: the widths `pool_kernel` takes for a wave's tile along the innermost output dimension
POOL_COLS = (16, 32, 64)
#: elements of a `pool_kernel` wave's tile (cols positions by 256 / cols planes)
POOL_TILE = 256


def pool_cols(extent: int) -> int:
    """`pool_kernel`'s cols for an innermost output `extent`: the narrowest of POOL_COLS that
    holds it (a 15-wide 3-D output in 64-wide tiles left 49 of every 64 lanes idle and issued
    four times the loads: KernelBench Level 2 72's second pool, 57.5 us modelled)."""
    return next((c for c in POOL_COLS if c >= extent), POOL_COLS[-1])


def _pool_body(dims, X, Y, *, kind, window, stride, padding, dilation, cols):
    if kind not in ("max", "avg"):
        raise ArgusError(f"pooling kind {kind!r}: use 'max' or 'avg'")
    if cols not in POOL_COLS:
        raise ArgusError(f"pool_kernel cols={cols!r}", fix=f"give one of {POOL_COLS}")
    window, stride, padding, dilation = _conv_params(dims, window, stride, padding, dilation)
    xs, out = X.shape, Y.shape[1:]
    x_phases = view_phases(dims, stride, False)[0]
    for a in range(dims):
        T.assume(xs[2 + 2 * a].eq(x_phases[a]))
    if dims == 2 and stride[0] == 1 and window[0] > 1:
        _pool_ring(X, Y, kind, window, stride, dilation, out)
        return
    planes = POOL_TILE // cols
    T.grid(out[-2] if dims >= 2 else 1, T.cdiv(out[-1], cols), T.cdiv(xs[0], planes))
    q0, nc0 = T.program_id(1) * cols, T.program_id(2) * planes
    outer = [T.program_id(0)] if dims >= 2 else []
    spec = T.rows_layout((planes, cols), 1)
    if dims == 3:
        for od in T.range(0, out[0], name="od"):
            _pool_row(X, Y, kind, window, stride, dilation, nc0, [od, *outer], q0, spec)
    else:
        _pool_row(X, Y, kind, window, stride, dilation, nc0, outer, q0, spec)


def _pool_row(X, Y, kind, window, stride, dilation, nc0, outer, q0, spec):
    """A tile of planes by output positions along the innermost dimension (`spec`), every
    window tap a load of the phase view (the padding is in the view, already -inf or 0)."""
    plan = tap_plan(len(window), window, stride, 0, dilation, False)[(0,) * len(window)]

    x_outer = _times(outer, row_steps(len(window), stride, False))

    def fetch(k, off, ph):
        origin = [e for q, o, p in zip([*x_outer, q0], off, ph, strict=True) for e in (q + o, p)]
        return X.load((nc0, *origin), spec, axes=(0, len(origin) - 1), guard=True)

    def apply(acc, x):
        return T.maximum(acc, x) if kind == "max" else acc + x

    acc = _over_taps(plan, T.full(spec, -np.inf) if kind == "max" else T.zeros(spec), fetch,
                     apply)
    if kind == "avg":
        acc = acc * (1.0 / float(np.prod(window)))
    Y.store((nc0, *outer, q0), acc, axes=(0, len(outer) + 1), guard=True)


#: output rows a workgroup of `_pool_ring` walks
RING_ROWS = 32


def _pool_ring(X, Y, kind, window, stride, dilation, out):
    """2-D pooling with a row stride of 1: a workgroup walks RING_ROWS output rows (4 planes
    by 64 positions), reducing each input row along its taps once and keeping the last
    (kh - 1) * d + 1 of those row results in registers, so an input row is read by one
    workgroup row step instead of by each of the kh output rows whose window holds it
    (Level 1 42, 4x4 max pooling: 16 tap loads per output become 4)."""
    plan = tap_plan(2, window, stride, 0, dilation, False)[(0, 0)]
    (_, _, top, d, _, kh), = plan[0]
    span = (kh - 1) * d + 1
    T.grid(T.cdiv(out[0], RING_ROWS), T.cdiv(out[1], 64), T.cdiv(X.shape[0], 4))
    oh0, q0, nc0 = T.program_id(0) * RING_ROWS, T.program_id(1) * 64, T.program_id(2) * 4
    spec = T.rows_layout((4, 64), 1)
    start = T.full(spec, -np.inf) if kind == "max" else T.zeros(spec)

    def apply(acc, x):
        return T.maximum(acc, x) if kind == "max" else acc + x

    def along(row):
        """Input view row `row` reduced along its taps."""
        def fetch(k, off, ph):
            return X.load((nc0, row, 0, q0 + off[0], ph[0]), spec, axes=(0, 3), guard=True)
        return _over_taps(plan[1:], start, fetch, apply)

    first = oh0 + top
    ring = {k: along(first + k) for k in range(span - 1)}
    loop = T.range(0, RING_ROWS, name="oh", acc=ring)
    for step in loop:
        rows = [*(loop.acc[k] for k in range(span - 1)), along(first + step + span - 1)]
        acc = rows[0]
        for j in range(1, kh):
            acc = apply(acc, rows[j * d])
        if kind == "avg":
            acc = acc * (1.0 / float(np.prod(window)))
        Y.store((nc0, oh0 + step, q0), acc, axes=(0, 2), guard=True)
        loop.acc = {k: rows[k + 1] for k in range(span - 1)}


#: output positions a lane of `pool_runs_kernel` holds, consecutive (one 16-byte load a row)
RUN = 4


def pool_runs_kernel() -> T.KernelDef:
    """1-D max or average pooling with stride 1, f32: X (NC, I2, RUN) the padded row read as
    runs of RUN positions (`pool_runs_view`, padding filled as in `pool_input_view`), Y (NC,
    O2, RUN) the output likewise. A lane holds RUN consecutive outputs and loads the few runs
    their windows cover, one 16-byte load each; each tap is a register of those loads (T.slots),
    not a load of its own: an input element is read by ceil((RUN + (k - 1) d) / RUN) lanes'
    loads instead of by k (Level 1 41, window 8: 8 four-byte loads per output became 3
    sixteen-byte loads per 4 outputs). Compile-time: kind, window, dilation."""
    annotations = {"X": Tensor("f32", "NC", "I2", "RUN"), "Y": Tensor("f32", "NC", "O2", "RUN")}
    params = {"kind": "max", "window": 2, "dilation": 1}

    return _family(_pool_runs_body, "pool_runs", pool_runs_kernel.__doc__, annotations,
                   params, 4)


def _pool_runs_body(X, Y, *, kind, window, dilation):
    if kind not in ("max", "avg"):
        raise ArgusError(f"pooling kind {kind!r}: use 'max' or 'avg'")
    (k,), (d,) = _per_dim(window, 1, "window"), _per_dim(dilation, 1, "dilation")
    NC, _, V = X.shape
    T.assume(V.eq(RUN))
    T.assume(Y.shape[2].eq(RUN))
    T.assume(Y.shape[0].eq(NC))
    rows = 4 * 64                       # a run per lane, 4 waves
    T.grid(T.cdiv(Y.shape[1], rows), NC)
    r0, plane = T.program_id(0) * rows, T.program_id(1)
    runs = T.copy_layout((rows, RUN), 4, RUN)
    column = T.copy_layout((rows, 1), 4, 1)
    last = RUN - 1 + (k - 1) * d
    loaded = [X.load((plane, r0 + j, 0), runs, axes=(1, 2), guard=True)
              for j in range(last // RUN + 1)]

    def at(position):                   # the lanes' input at their run's start + position
        return T.slots(loaded[position // RUN], position % RUN, column)

    for j in range(RUN):
        acc = at(j)
        for t in range(1, k):
            x = at(j + t * d)
            acc = T.maximum(acc, x) if kind == "max" else acc + x
        if kind == "avg":
            acc = acc * (1.0 / float(k))
        Y.store((plane, r0, j), acc, axes=(1, 2), guard=True)


def pool_runs_view(x: np.ndarray, *, kind, window, padding=0, dilation=1) -> np.ndarray:
    """X for `pool_runs_kernel` from x (NC, L): `pool_input_view`'s padded row (stride 1, every
    window of every output inside it), filled further to whole runs, as (NC, I2, RUN)."""
    view = pool_input_view(x, kind=kind, window=window, stride=1, padding=padding,
                           dilation=dilation)[:, :, 0]
    runs = np.full((x.shape[0], -(-view.shape[1] // RUN) * RUN),
                   -np.inf if kind == "max" else 0.0, np.float32)
    runs[:, :view.shape[1]] = view
    return runs.reshape(x.shape[0], -1, RUN)


def pool_input_view(x: np.ndarray, *, kind, window, stride=None, padding=0,
                    dilation=1) -> np.ndarray:
    """X for `pool_kernel` from x (NC, *spatial): front padding and the far end filled with
    -inf (max) or 0 (avg) so every window of every output lies inside the view."""
    dims = x.ndim - 1
    stride = window if stride is None else stride
    window, stride, padding, dilation = _conv_params(dims, window, stride, padding, dilation)
    out = [conv_output_size(n, k, s, p, d, False) for n, k, s, p, d
           in zip(x.shape[1:], window, stride, padding, dilation, strict=True)]
    extent = [(o - 1) * s + (k - 1) * d + 1 for o, k, s, d in zip(out, window, stride, dilation,
                                                                    strict=True)]
    view = phase_view_nd(x[..., None], view_phases(dims, stride, False)[0], 1, padding,
                         -np.inf if kind == "max" else 0.0, extent)
    return view[..., 0, 0]


def pool_reference_nd(x, *, kind, window, stride=None, padding=0, dilation=1):
    """Direct max/avg pooling of x (NC, *spatial) in float64, torch's floor mode; the average
    counts the padding."""
    x = np.asarray(x, np.float64)
    dims = x.ndim - 1
    stride = window if stride is None else stride
    window, stride, padding, dilation = _conv_params(dims, window, stride, padding, dilation)
    out = [conv_output_size(n, k, s, p, d, False) for n, k, s, p, d
           in zip(x.shape[1:], window, stride, padding, dilation, strict=True)]
    fill = -np.inf if kind == "max" else 0.0
    padded = np.full((x.shape[0], *(n + 2 * p + s * o for n, p, s, o
                                    in zip(x.shape[1:], padding, stride, out, strict=True))), fill)
    padded[(slice(None), *(slice(p, p + n) for p, n in zip(padding, x.shape[1:], strict=True)))] = x
    y = np.full((x.shape[0], *out), fill)
    for k in itertools.product(*map(range, window)):
        patch = padded[(slice(None), *(slice(k_ * d, k_ * d + s * o, s)
                                       for k_, d, s, o in zip(k, dilation, stride, out,
                                                              strict=True)))]
        y = np.maximum(y, patch) if kind == "max" else y + patch / np.prod(window)
    return y


def conv_view_reference(epilogue, inputs: dict, params: dict, engine: str = "fma"
                        ) -> np.ndarray:
    """What `conv_kernel(dims, engine, epilogue)` writes to Y (its phase view) for any view
    arrays `inputs` (X, Wt, bias, residual, Y, in `engine`'s layout), the front of X's view
    included: the view read plainly is the input with `input_pad` more positions in front, so
    it is the convolution of that array with padding 0 (forward) or p + f * s (transposed, its
    inputs moved f later), over every position of Y's view."""
    Y = output_layout(engine, inputs["Y"], back=True)
    X, Wt = engine_unpacked(engine, inputs["X"], inputs["Wt"])
    dims = (X.ndim - 3) // 2
    front = input_pad(dims, params["window"], params["stride"], params["padding"],
                      params["dilation"], params["transposed"])
    stride, padding = _per_dim(params["stride"], dims, "stride"), params["padding"]
    plain = X.reshape(X.shape[0], *(X.shape[1 + 2 * a] * X.shape[2 + 2 * a]
                                    for a in range(dims)), -1)
    out = [Y.shape[1 + 2 * a] * Y.shape[2 + 2 * a] for a in range(dims)]
    if params["transposed"]:
        padding = tuple(p + f * s for p, f, s in zip(_per_dim(padding, dims, "padding"), front,
                                                      stride, strict=True))
    else:
        padding = 0
    residual = inputs.get("residual")
    if residual is not None:
        residual = output_layout(engine, residual, back=True)
        residual = residual.reshape(residual.shape[0], *out, -1)
    y = conv_reference_nd(plain, Wt, stride=stride, padding=padding,
                          dilation=params["dilation"], transposed=params["transposed"],
                          epilogue=epilogue, bias=inputs.get("bias"), residual=residual, out=out)
    return output_layout(engine, y.reshape(Y.shape))


def conv_check_sizes(dims: int, params: dict, trial: int) -> dict:
    """Small sizes of `conv_kernel(dims)` consistent with `params` for correctness trial
    `trial` (the shapes change between trials)."""
    window, stride, padding, dilation = _conv_params(dims, params["window"], params["stride"],
                                                     params["padding"], params["dilation"])
    transposed = params["transposed"]
    sizes = {"N": 1 + trial % 2, "G": 1 + trial % 2, "CG": 2 + trial, "OCG": 3 + trial}
    front = input_pad(dims, window, stride, padding, dilation, transposed)
    x_phases = view_phases(dims, stride, transposed)[0]
    for a, axis in enumerate(SPATIAL[3 - dims:]):
        extent = 4 + trial + (dims == 1) * 60          # a 1-D row spans two position blocks
        o = conv_output_size(extent, window[a], stride[a], padding[a], dilation[a], transposed)
        s = stride[a]
        sizes |= {f"K{axis}": window[a], f"SI{axis}": x_phases[a],
                  f"SO{axis}": s if transposed else 1,
                  f"I2{axis}": -(-(extent + front[a]) // x_phases[a]),
                  f"O2{axis}": max(1, -(-o // (s if transposed else 1)))}
    return sizes


def pool_view_reference(inputs: dict, params: dict) -> np.ndarray:
    """What `pool_kernel` writes to Y for any view X: pooling of the view read plainly (its
    padding already in it) with padding 0, positions past it reading 0 as the guard does."""
    X, Y = inputs["X"], inputs["Y"]
    dims = X.ndim // 2
    plain = np.asarray(X, np.float64).reshape(X.shape[0], *(X.shape[1 + 2 * a] * X.shape[2 + 2 * a]
                                                             for a in range(dims)))
    window, stride, _, dilation = _conv_params(dims, params["window"], params["stride"], 0,
                                               params["dilation"])
    need = [(o - 1) * s + (k - 1) * d + 1 for o, k, s, d in zip(Y.shape[1:], window, stride,
                                                                dilation, strict=True)]
    grown = np.zeros((X.shape[0], *(max(n, m) for n, m in zip(plain.shape[1:], need,
                                                                strict=True))))
    grown[(slice(None), *(slice(0, n) for n in plain.shape[1:]))] = plain
    y = pool_reference_nd(grown, kind=params["kind"], window=window, stride=stride,
                          dilation=dilation)
    return y[(slice(None), *(slice(0, o) for o in Y.shape[1:]))]


def pool_check_sizes(dims: int, params: dict, trial: int) -> dict:
    """Small sizes of `pool_kernel(dims)` consistent with `params` for trial `trial`."""
    window, stride, _, dilation = _conv_params(dims, params["window"], params["stride"], 0,
                                               params["dilation"])
    sizes = {"NC": 3 + 2 * trial}
    for a, axis in enumerate(SPATIAL[3 - dims:]):
        extent = 6 + trial + (dims == 1) * 70
        phases = view_phases(dims, stride, False)[0][a]
        sizes |= {f"S{axis}": phases, f"I2{axis}": -(-extent // phases),
                  f"O{axis}": conv_output_size(extent, window[a], stride[a], 0, dilation[a],
                                               False)}
    return sizes


#: partial statistics a lane of `moments_kernel` combines a pass, unrolled (a stage leaves
#: cdiv(R, MOMENT_CHUNK) of them per output for the next)
MOMENT_CHUNK = 8
MOMENT_FINISH = ("", "mean", "inv")


@functools.cache
def moments_kernel(finish: str = "") -> T.KernelDef:
    """Chan's parallel combine of partial statistics: P (K3, O, R, M, Q), planes count, mean
    and M2 (the sum of squared deviations from that mean; a "stats" conv epilogue's S, or
    this kernel's own output), combined over R and Q for each (o, m) by n = na + nb,
    delta = mb - ma, mean = ma + delta * nb / n, M2 = M2a + M2b + delta^2 * na * nb / n,
    which never subtracts two large sums (robust where |mean| >> std). `finish` "": Y
    (K3, O, C, M, 1) with each chunk of `chunk` rows of R combined (C = cdiv(R, chunk));
    "mean": Y (O, M) the mean; "inv": Y (O, M) 1 / sqrt(M2 / n + eps), the biased variance's
    (a norm's scale). Compile-time: chunk, eps. Lanes run along M, 64 a workgroup."""
    if finish not in MOMENT_FINISH:
        raise ArgusError(f"moments_kernel(finish={finish!r}): use one of {MOMENT_FINISH}")
    annotations = {"P": Tensor("f32", "K3", "O", "R", "M", "Q"),
                   # its length alone is read: a stage's runs of `chunk` rows a workgroup
                   "Span": Tensor("f32", "SPAN"),
                   "Y": Tensor("f32", "K3", "O", "C", "M", "ONE") if not finish else
                   Tensor("f32", "O", "M")}
    params = {"chunk": MOMENT_CHUNK, "eps": 1e-5}

    def moments(P, Span, Y, **chosen):
        _moments_body(finish, P, Span.shape[0], Y, **chosen)

    return _family(moments, "moments" + (f"_{finish}" if finish else ""),
                   moments_kernel.__doc__, annotations, params, 1)


def _moments_body(finish, P, span, Y, *, chunk, eps):
    if not isinstance(chunk, int) or chunk < 1:
        raise ArgusError(f"moments_kernel chunk={chunk!r}", fix="give a whole number >= 1")
    K3, O, R, M, Q = P.shape
    T.assume(K3.eq(MOMENT_PLANES))
    spec = T.rows_layout((1, 64), 1)
    T.grid(T.cdiv(M, 64), 1 if finish else Y.shape[2], O)
    m0, c, o = T.program_id(0) * 64, T.program_id(1), T.program_id(2)
    if not finish:
        T.assume(Y.shape[0].eq(MOMENT_PLANES))
        T.assume(Y.shape[4].eq(1))
    zero = T.zeros(spec)

    def combine(a, b):
        n = a["n"] + b["n"]
        w = b["n"] * T.rcp(T.maximum(n, T.full(spec, 1.0)))
        delta = b["mean"] - a["mean"]
        return {"n": n, "mean": a["mean"] + delta * w,
                "m2": a["m2"] + b["m2"] + delta * delta * a["n"] * w}

    # `chunk` rows unrolled a pass, every load issued before the first combine so that they
    # are in flight together (the code keeps program order: a combine between the loads
    # waited on each row in turn, 35.7 us for 63 rows of 16, modelled), then combined as a
    # pairwise tree (a dependence chain of log2(chunk) combines, not chunk)
    # a stage's workgroup combines `span` runs, the finish every run of R
    blocks = T.range(0, T.cdiv(R, chunk) if finish else span, name="b",
                     acc={"n": zero, "mean": zero, "m2": zero})
    for b in blocks:
        inner = T.range(0, Q, name="q", acc=blocks.acc)
        for q in inner:
            first = (b if finish else c * span + b) * chunk
            rows = [dict(zip(("n", "mean", "m2"),
                             [P.load((k, o, first + j, m0, q), spec, axes=(2, 3), guard=True)
                              for k in range(MOMENT_PLANES)])) for j in range(chunk)]
            while len(rows) > 1:
                rows = [combine(rows[i], rows[i + 1]) if i + 1 < len(rows) else rows[i]
                        for i in range(0, len(rows), 2)]
            inner.acc = combine(inner.acc, rows[0])
        blocks.acc = inner.acc
    acc = blocks.acc
    if not finish:
        for k, plane in enumerate((acc["n"], acc["mean"], acc["m2"])):
            Y.store((k, o, c, m0, 0), plane, axes=(2, 3), guard=True)
        return
    if finish == "mean":
        Y.store((o, m0), acc["mean"], axes=(0, 1), guard=True)
        return
    var = acc["m2"] * T.rcp(T.maximum(acc["n"], T.full(spec, 1.0)))
    Y.store((o, m0), T.rsqrt(var + T.full(spec, float(eps))), axes=(0, 1), guard=True)


def moments_reference(p: np.ndarray, finish: str = "", chunk: int = MOMENT_CHUNK,
                      eps: float = 1e-5) -> np.ndarray:
    """`moments_kernel`'s result in float64 from the partials p (K3, O, R, M, Q)."""
    p = np.asarray(p, np.float64)
    n, mean, m2 = p[0], p[1], p[2]
    blocks = range(0, p.shape[2], chunk) if not finish else [0]
    step = chunk if not finish else p.shape[2]
    out = []
    for b in blocks:
        nb, mb, m2b = (x[:, b:b + step].transpose(0, 2, 1, 3) for x in (n, mean, m2))
        nb, mb, m2b = (x.reshape(*x.shape[:2], -1) for x in (nb, mb, m2b))
        total = nb.sum(-1)
        mu = (nb * mb).sum(-1) / np.maximum(total, 1)
        dev = (m2b + nb * (mb - mu[..., None]) ** 2).sum(-1)
        out.append((total, mu, dev))
    if finish == "mean":
        return out[0][1]
    if finish == "inv":
        return 1.0 / np.sqrt(out[0][2] / np.maximum(out[0][0], 1) + eps)
    return np.stack([np.stack([o[k] for o in out], 1) for k in range(MOMENT_PLANES)], 0)[
        ..., None].astype(np.float32)

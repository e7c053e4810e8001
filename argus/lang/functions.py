"""Functions built from the DSL's primitive ops, so each is verified, interpreted and lowered
exactly as the ops it is made of (no new proof or backend rule): natural exp/log, the
activations KernelBench needs (sigmoid, tanh, softplus, GELU, erf), arg-reductions that return
the lowest index of the extreme (as torch does, NaN counting as the extreme) and scans.

Error bounds (f32, measured against float64 numpy by tests/test_ops_functions.py on
[-20, 20] and at the edges): exp, log within 2 ulp plus the exp2/log2 rounding; sigmoid 3e-7
absolute; tanh 6e-7 absolute; erf 1.5e-7 absolute (Abramowitz & Stegun 7.1.26) plus rounding,
under 5e-7; gelu 5e-7 relative to max(1, |x|); softplus uses torch's threshold (x > 20 gives x).
"""

from __future__ import annotations

import math

from argus.lang import across
from argus.lang.errors import DSLError, user_loc
from argus.lang.layouts import TileSpec
from argus.lang.trace import (
    Tile,
    broadcast,
    exp2,
    iota,
    log2,
    rcp,
    reduce,
    where,
)

LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)


def exp(x: Tile) -> Tile:
    """e**x, as 2**(x log2 e) (one v_exp_f32 per element)."""
    return exp2(x * LOG2E)


def log(x: Tile) -> Tile:
    """Natural logarithm, as log2(x) ln 2 (one v_log_f32 per element)."""
    return log2(x) * LN2


def log1p(x: Tile) -> Tile:
    """log(1 + x), accurate near 0 (Goldberg's correction: log(u) * x / (u - 1), u = 1 + x)."""
    u = x + 1.0
    return where(u.eq(1.0), x, log(u) * x * rcp(u - 1.0))


def sigmoid(x: Tile) -> Tile:
    """1 / (1 + e**-x), elementwise."""
    return rcp(exp(-x) + 1.0)


def tanh(x: Tile) -> Tile:
    """Hyperbolic tangent, as 2 sigmoid(2x) - 1, elementwise."""
    return sigmoid(x * 2.0) * 2.0 - 1.0


def softplus(x: Tile, beta: float = 1.0, threshold: float = 20.0) -> Tile:
    """log(1 + exp(beta x)) / beta, and x where beta x > threshold (torch.nn.Softplus)."""
    scaled = x * beta
    return where(scaled > threshold, x, log1p(exp(scaled)) * (1.0 / beta))


#: Abramowitz & Stegun 7.1.26: erf(x) = 1 - (a1 t + ... + a5 t^5) exp(-x^2), t = 1/(1 + p x)
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf(x: Tile) -> Tile:
    """The error function by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7)."""
    ax = abs(x)
    t = rcp(ax * _ERF_P + 1.0)
    poly = t * _ERF_A[4]
    for a in reversed(_ERF_A[:4]):
        poly = (poly + a) * t
    y = 1.0 - poly * exp(-(ax * ax))
    return where(x < 0.0, -y, y)


def gelu(x: Tile, approximate: str = "none") -> Tile:
    """x Φ(x): with erf (torch's default) or its tanh approximation (`approximate="tanh"`)."""
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (tanh(inner) + 1.0)
    if approximate != "none":
        raise DSLError(f"gelu(approximate={approximate!r}): use 'none' or 'tanh'", user_loc())
    return x * 0.5 * (erf(x * (1.0 / math.sqrt(2.0))) + 1.0)


def _arg(x: Tile, fn: str, axis: int, spec: TileSpec) -> Tile:
    """Lowest index along `axis` of the extreme; a NaN counts as the extreme (torch)."""
    if across.spans_waves(x.spec, axis):
        return across.arg(x, fn, axis, spec)
    extent = x.shape[axis]
    index = iota(x.spec, axis)
    best = broadcast(reduce(x, fn, axis, spec), axis, x.spec)
    nan = x.ne(x)
    any_nan = broadcast(reduce(nan, "max", axis, spec), axis, x.spec)
    hit = where(any_nan, nan, x.eq(best))
    return reduce(where(hit, index, float(extent)), "min", axis, spec)


def argmax(x: Tile, axis: int, spec: TileSpec) -> Tile:
    """Index (f32; `.to("i32")` for integers) of the largest element along `axis`, the lowest
    one among ties, into layout `spec` (as `T.reduce`)."""
    return _arg(x, "max", axis, spec)


def argmin(x: Tile, axis: int, spec: TileSpec) -> Tile:
    """Index (f32) of the smallest element along `axis`, the lowest one among ties, into
    layout `spec` (as `T.reduce`)."""
    return _arg(x, "min", axis, spec)


def scan(x: Tile, fn: str, axis: int, *, reverse: bool = False, exclusive: bool = False,
         mask: Tile | None = None) -> Tile:
    """Inclusive (or exclusive) prefix `fn` ("sum", "prod") along `axis`, front to back (or
    back to front with `reverse`), in x's layout. Where the axis coordinate is lane % n (n a
    power of two <= 64) it is log2(n) lane rotations (ds_bpermute) within the wave; any other
    layout or length goes through LDS in 64-lane chunks whose totals are combined across
    waves (`argus.lang.across`). With `mask` (a tile of x's shape, e.g. a comparison) the
    elements where it is 0 count as the identity (0 for sum, 1 for prod): torch's
    `cumsum(x * mask)`, without the product's NaN for an inf masked away."""
    loc = user_loc()
    if fn not in across.COMBINE:
        raise DSLError(f"scan fn {fn!r}: use one of {sorted(across.COMBINE)}", loc)
    if not isinstance(x, Tile) or not 0 <= axis < len(x.shape):
        raise DSLError(f"scan along axis {axis!r}: give a register tile and one of its axes",
                       loc)
    if mask is not None:
        if not isinstance(mask, Tile) or mask.shape != x.shape:
            raise DSLError(f"scan mask: give a tile of the scanned tile's shape "
                           f"{list(x.shape)}", loc)
        x = where(mask, x, 0.0 if fn == "sum" else 1.0)
    n = x.shape[axis]
    if _in_lanes(x, axis, n):
        return across.in_wave_scan(x, fn, axis, n, reverse=reverse, exclusive=exclusive)
    return across.scan(x, fn, axis, reverse=reverse, exclusive=exclusive)


def cumsum(x: Tile, axis: int, *, reverse: bool = False, exclusive: bool = False,
           mask: Tile | None = None) -> Tile:
    """Prefix sums along `axis` (`T.scan` with "sum"; same layout conditions and `mask`)."""
    return scan(x, "sum", axis, reverse=reverse, exclusive=exclusive, mask=mask)


def cumprod(x: Tile, axis: int, *, reverse: bool = False, exclusive: bool = False,
            mask: Tile | None = None) -> Tile:
    """Prefix products along `axis` (`T.scan` with "prod"; same layout conditions and
    `mask`)."""
    return scan(x, "prod", axis, reverse=reverse, exclusive=exclusive, mask=mask)


def _in_lanes(x: Tile, axis: int, n: int) -> bool:
    """Whether the axis coordinate is lane % n in every slot (n a power of two <= 64)."""
    import numpy as np

    from argus.ir.types import LANES

    table = x.spec.layout.table()[axis]                 # (waves, lanes, slots)
    lanes = np.arange(LANES)[None, :, None]
    return not n & (n - 1) and n <= LANES and bool((table == lanes % n).all())

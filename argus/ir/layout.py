"""The CuTe layout algebra over nested int tuples, with admissibility checked instead of assumed.

A `Layout(shape, stride)` maps coordinates (ints or `argus.ir.expr` terms) to offsets. Every
operation follows the CuTe definitions (pycute's function names) and raises `LayoutError` naming
the offending modes where pycute would silently floor a shape that does not divide.
"""

from __future__ import annotations

import math
import operator
from itertools import accumulate

import attrs

from argus.errors import ArgusError

__all__ = [
    "Layout", "Swizzle", "ComposedLayout", "LayoutError", "make_layout", "size", "cosize", "rank",
    "depth", "flatten", "coalesce", "filter", "composition", "complement", "right_inverse",
    "left_inverse", "logical_divide", "zipped_divide", "tiled_divide", "logical_product",
    "zipped_product", "tiled_product", "blocked_product", "raked_product", "slice_and_offset",
]


class LayoutError(ArgusError, ValueError):
    """A layout operation whose admissibility condition fails; the message names the modes."""


# ---------------------------------------------------------------------------------------------
# int tuples


def is_tuple(x) -> bool:
    return isinstance(x, tuple)


def flatten(t) -> tuple:
    """The leaves of a nested tuple in order (an int is a one-leaf tuple)."""
    if isinstance(t, Layout):
        return tuple(zip(flatten(t.shape), flatten(t.stride)))
    return sum((flatten(x) for x in t), ()) if is_tuple(t) else (t,)


def product(t) -> int:
    return math.prod(flatten(t))


def prefix_product(shape, start=1):
    """Column-major strides for `shape`, keeping its nesting."""
    if not is_tuple(shape):
        return start
    strides = []
    for mode in shape:
        strides.append(prefix_product(mode, start))
        start *= product(mode)
    return tuple(strides)


def _congruent(a, b) -> bool:
    if is_tuple(a) and is_tuple(b):
        return len(a) == len(b) and all(_congruent(x, y) for x, y in zip(a, b))
    return not is_tuple(a) and not is_tuple(b)


def _unflatten(flat, profile):
    """Nest the sequence `flat` like `profile`."""
    flat = iter(flat)

    def go(p):
        return tuple(go(q) for q in p) if is_tuple(p) else next(flat)

    return go(profile)


def _div(x, n):
    return x if n == 1 else x // n


def _mod(x, n):
    return 0 if n == 1 else x % n


def _add(x, y):
    # skipping literal zeros keeps offsets built from expr coordinates readable
    if isinstance(x, int) and x == 0:
        return y
    return x if isinstance(y, int) and y == 0 else x + y


def _scale(x, d):
    return 0 if d == 0 else x if d == 1 else x * d


def crd2idx(coord, shape, stride):
    """Offset of `coord`; an int (or expr) coordinate of a tuple mode is a column-major index
    into it whose last sub-mode is unbounded, as in CuTe."""
    if is_tuple(coord):
        if not is_tuple(shape) or len(coord) != len(shape):
            raise LayoutError(f"coordinate {coord} does not match the shape {shape}")
        offset = 0
        for c, s, d in zip(coord, shape, stride):
            offset = _add(offset, crd2idx(c, s, d))
        return offset
    if not is_tuple(shape):
        return _scale(coord, stride)
    offset = 0
    for s, d in zip(shape[:-1], stride[:-1]):
        offset = _add(offset, crd2idx(_mod(coord, product(s)), s, d))
        coord = _div(coord, product(s))
    return _add(offset, crd2idx(coord, shape[-1], stride[-1]))


def idx2crd(index, shape):
    """Column-major coordinate of a flat index in `shape` (the inverse of crd2idx for compact
    strides)."""
    if not is_tuple(shape):
        return index
    coords = []
    for i, s in enumerate(shape):
        last = i == len(shape) - 1
        coords.append(idx2crd(index if last else _mod(index, product(s)), s))
        index = _div(index, product(s))
    return tuple(coords)


# ---------------------------------------------------------------------------------------------
# layouts


def _check_shape(shape):
    for s in flatten(shape):
        if not isinstance(s, int) or isinstance(s, bool) or s < 1:
            raise LayoutError(f"shape {shape} has the mode {s!r}; every mode must be an int >= 1")
    return shape


def _normalise_tuple(t):
    """Lists become tuples and numpy integers become ints; anything else is left to validation."""
    if isinstance(t, (tuple, list)):
        return tuple(_normalise_tuple(x) for x in t)
    if hasattr(t, "__index__") and not isinstance(t, bool):
        return operator.index(t)
    return t


@attrs.frozen(repr=False)
class Layout:
    """A function from the coordinates of `shape` to offsets, `sum(coord_i * stride_i)`.

    The stride defaults to column-major. Call it with a flat index `L(i)`, several mode
    coordinates `L(i, j)` or one nested coordinate `L((i, j))`.
    """

    shape: int | tuple = attrs.field(converter=_normalise_tuple)
    stride: int | tuple = attrs.field(default=None, converter=_normalise_tuple)

    def __attrs_post_init__(self):
        _check_shape(self.shape)
        if self.stride is None:
            object.__setattr__(self, "stride", prefix_product(self.shape))
        if not _congruent(self.shape, self.stride):
            raise LayoutError(f"stride {self.stride} does not have the nesting of shape "
                              f"{self.shape}; give one stride per mode")
        for d in flatten(self.stride):
            if not isinstance(d, int) or isinstance(d, bool):
                raise LayoutError(f"stride {self.stride} has {d!r}; strides are ints")

    def __call__(self, *coord):
        """The offset of a coordinate; with `None` in it (CuTe's `_`), the layout of the modes
        left free (see `slice_and_offset` for the offset of the fixed part)."""
        if len(coord) == 1:
            coord = coord[0]
        if _has_none(coord):
            return slice_and_offset(coord, self)[0]
        return crd2idx(coord, self.shape, self.stride)

    def __getitem__(self, i) -> Layout:
        if not is_tuple(self.shape):
            if i in (0, -1):
                return self
            raise IndexError(f"layout {self} has rank 1; there is no mode {i}")
        return Layout(self.shape[i], self.stride[i])

    def __len__(self) -> int:
        return rank(self)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __str__(self):
        return f"{_show(self.shape)}:{_show(self.stride)}"

    def __repr__(self):
        return f"Layout({self.shape!r}, {self.stride!r})"


def _has_none(coord) -> bool:
    return coord is None or (is_tuple(coord) and any(_has_none(c) for c in coord))


def slice_and_offset(coord, layout):
    """(layout of the modes where `coord` is None, offset of the coordinates given elsewhere).

    `L(i, j)` equals `sliced(i) + offset` for `sliced, offset = slice_and_offset((None, j), L)`;
    the given coordinates may be ints or exprs."""
    layout = _as_layout(layout)
    kept, offset = [], 0

    def walk(c, shape, stride):
        nonlocal offset
        if c is None:
            kept.append((shape, stride))
        elif is_tuple(c):
            if not is_tuple(shape) or len(c) != len(shape):
                raise LayoutError(f"slice coordinate {coord} does not match the shape "
                                  f"{layout.shape}")
            for ci, si, di in zip(c, shape, stride):
                walk(ci, si, di)
        else:
            offset = _add(offset, crd2idx(c, shape, stride))

    walk(coord, layout.shape, layout.stride)
    if not kept:
        return Layout(1, 0), offset
    if len(kept) == 1:
        return Layout(*kept[0]), offset
    return Layout(tuple(s for s, _ in kept), tuple(d for _, d in kept)), offset


def _show(t) -> str:
    return f"({','.join(_show(x) for x in t)})" if is_tuple(t) else str(t)


def _as_layout(x) -> Layout:
    if isinstance(x, Layout):
        return x
    if isinstance(x, int) or is_tuple(x):
        return Layout(x)
    raise LayoutError(f"expected a Layout, a shape int or a shape tuple, got {x!r}")


def make_layout(*layouts) -> Layout:
    """Concatenate layouts as the modes of one layout."""
    layouts = [_as_layout(x) for x in layouts]
    if len(layouts) == 1:
        return layouts[0]
    return Layout(tuple(x.shape for x in layouts), tuple(x.stride for x in layouts))


def size(x) -> int:
    """Number of coordinates of a layout (or of a shape)."""
    return product(x.shape if isinstance(x, (Layout, ComposedLayout)) else x)


def cosize(layout) -> int:
    """One past the largest offset the layout produces."""
    layout = _as_layout(layout)
    return 1 + sum((s - 1) * d for s, d in flatten(layout) if d > 0)


def rank(x) -> int:
    shape = x.shape if isinstance(x, (Layout, ComposedLayout)) else x
    return len(shape) if is_tuple(shape) else 1


def depth(x) -> int:
    shape = x.shape if isinstance(x, (Layout, ComposedLayout)) else x
    return 1 + max((depth(s) for s in shape), default=0) if is_tuple(shape) else 0


def _from_modes(modes) -> Layout:
    """A layout from (shape, stride) pairs: empty is 1:0, one mode is unwrapped."""
    if not modes:
        return Layout(1, 0)
    if len(modes) == 1:
        return Layout(*modes[0])
    return Layout(tuple(s for s, _ in modes), tuple(d for _, d in modes))


def coalesce(layout, profile=None) -> Layout:
    """The same function with as few modes as possible; by mode when `profile` is a tuple."""
    layout = _as_layout(layout)
    if is_tuple(profile):
        if len(profile) > rank(layout):
            raise LayoutError(f"coalesce profile {profile} has more modes than {layout}")
        coalesced = [coalesce(layout[i], p) for i, p in enumerate(profile)]
        return make_layout(*coalesced, *list(layout)[len(profile):])
    modes = []
    for s, d in flatten(layout):
        if s == 1:
            continue
        if modes and modes[-1][0] * modes[-1][1] == d:
            modes[-1] = (modes[-1][0] * s, modes[-1][1])
        else:
            modes.append((s, d))
    return _from_modes(modes)


def filter(layout) -> Layout:
    """Coalesced layout without stride-0 (broadcast) modes: the same image, injective if L was
    injective on its non-broadcast modes."""
    layout = _as_layout(layout)
    return coalesce(_from_modes([(s, d) for s, d in flatten(layout) if d != 0]))


# ---------------------------------------------------------------------------------------------
# composition


def composition(a, b):
    """The layout R with R(c) = a(b(c)) for every coordinate c of b, shaped like b.

    `b` is a layout, an int n (meaning n:1), or a tuple of tilers composed with a's modes one by
    one (as in CuTe; write `Layout((4, 8))` to compose with a shape as a single layout).
    Admissible when every mode of b steps through whole sub-modes of a: its stride and size
    divide a's mode sizes (or are divided by them), and b stays inside a's domain.
    """
    if isinstance(a, ComposedLayout):
        return ComposedLayout(a.swizzle, a.offset, composition(a.layout, b))
    a = _as_layout(a)
    if is_tuple(b):
        return _by_mode(composition, a, b)
    b = _as_layout(b)
    if any(d < 0 for _, d in flatten(b)):
        raise LayoutError(f"composition({a}, {b}): the tiler has a negative stride")
    if cosize(b) > size(a):
        raise LayoutError(
            f"composition({a}, {b}): the tiler reaches offset {cosize(b) - 1}, outside the "
            f"{size(a)} coordinates of {a}")
    flat_a = flatten(coalesce(a))
    _check_modes_add_up(a, flat_a, b)
    results = [_compose_mode(a, flat_a, s, d, b) for s, d in flatten(b)]
    return Layout(_unflatten([r.shape for r in results], b.shape),
                  _unflatten([r.stride for r in results], b.shape))


def _by_mode(op, a, tilers):
    if len(tilers) > rank(a):
        raise LayoutError(f"{op.__name__}({a}, {tilers}): {len(tilers)} tilers for a layout of "
                          f"rank {rank(a)}")
    modes = [a[i] if t is None else op(a[i], t) for i, t in enumerate(tilers)]
    return make_layout(*modes, *list(a)[len(tilers):])


def _check_modes_add_up(a, flat_a, b):
    """Composing mode by mode is exact only if a(x + y) = a(x) + a(y) for offsets x, y of
    different tiler modes: true when the modes nest (each extent divides the next stride), or
    when the whole tiler stays inside the first mode of a, where a is affine."""
    if cosize(b) <= flat_a[0][0] or len(flat_a) == 1:
        return
    modes = sorted((d, s) for s, d in flatten(b) if s > 1 and d > 0)
    for (d0, s0), (d1, s1) in zip(modes, modes[1:]):
        if d1 % (d0 * s0) != 0:
            raise LayoutError(
                f"composition({a}, {b}): the tiler modes {s0}:{d0} and {s1}:{d1} interleave, "
                f"so their offsets carry across the modes of {coalesce(a)} and the result is not "
                "a layout; use a tiler whose modes nest (each size*stride divides the next "
                "stride)")


def _compose_mode(a, flat_a, shape, stride, b) -> Layout:
    """a composed with the single mode shape:stride of b."""
    if stride == 0 or shape == 1:
        return Layout(shape, 0)
    modes = []
    rest_shape, rest_stride = shape, stride
    for i, (s, d) in enumerate(flat_a[:-1]):
        if rest_stride % s == 0:
            rest_stride //= s
            continue
        if s % rest_stride != 0:
            raise LayoutError(
                f"composition({a}, {b}): the tiler stride {stride} is not aligned with mode {i} "
                f"(size {s}) of the coalesced layout {coalesce(a)}; need a stride that divides "
                f"or is divided by the mode sizes")
        new_shape = min(s // rest_stride, rest_shape)
        if rest_shape % new_shape != 0:
            raise LayoutError(
                f"composition({a}, {b}): the tiler mode {shape}:{stride} takes {new_shape} "
                f"elements of mode {i} (size {s}) of the coalesced layout {coalesce(a)}, which "
                f"does not divide {rest_shape}; pick tile sizes that split the modes evenly")
        modes.append((new_shape, rest_stride * d))
        rest_shape //= new_shape
        rest_stride = 1
        if rest_shape == 1:
            break
    if rest_shape != 1:
        modes.append((rest_shape, rest_stride * flat_a[-1][1]))
    return _from_modes(modes)


# ---------------------------------------------------------------------------------------------
# complement and inverses


def _sorted_modes(layout, who):
    modes = [(d, s) for s, d in flatten(layout) if s != 1 and d != 0]
    if any(d < 0 for d, _ in modes):
        raise LayoutError(f"{who}: {layout} has a negative stride")
    return sorted(modes)


def complement(layout, cotarget=None) -> Layout:
    """The layout R, with increasing strides, whose offsets together with `layout`'s tile
    [0, cotarget) exactly once (the last mode rounds up, as in CuTe, so cosize may exceed it).

    Admissible when `layout` is injective with sorted modes nested: each mode's extent
    (size * stride) divides the next larger stride.
    """
    layout = _as_layout(layout)
    cotarget = cosize(layout) if cotarget is None else cotarget
    modes, current = [], 1
    ordered = _sorted_modes(layout, "complement")
    for i, (d, s) in enumerate(ordered):
        if d % current != 0:
            previous = ordered[i - 1]
            raise LayoutError(
                f"complement({layout}): mode {s}:{d} overlaps or interleaves mode "
                f"{previous[1]}:{previous[0]} (stride {d} is not a multiple of the extent "
                f"{current}); only injective layouts with nested modes have a complement")
        modes.append((d // current, current))
        current = s * d
    modes.append((-(-cotarget // current), current))
    return coalesce(_from_modes(modes))


def right_inverse(layout) -> Layout:
    """R with layout(R(i)) == i for every i < size(R), as large as the layout allows."""
    layout = _as_layout(layout)
    flat = flatten(layout)
    column_major = accumulate((s for s, _ in flat), lambda acc, s: acc * s, initial=1)
    modes, current = [], 1
    for d, s, index_stride in sorted((d, s, r) for (s, d), r in zip(flat, column_major)):
        if s == 1 or d < current:
            continue
        if d != current:
            break
        modes.append((s, index_stride))
        current = s * d
    return coalesce(_from_modes(modes))


def left_inverse(layout) -> Layout:
    """R with R(layout(i)) == i for every i < size(layout); the layout must be injective."""
    layout = _as_layout(layout)
    for s, d in flatten(layout):
        if d == 0 and s > 1:
            raise LayoutError(f"left_inverse({layout}): the broadcast mode {s}:0 is not "
                              "injective; filter() it first")
    return right_inverse(make_layout(layout, complement(layout)))


# ---------------------------------------------------------------------------------------------
# divide and product


def logical_divide(a, tiler) -> Layout:
    """a split into (tile, rest): mode 0 is a composed with the tiler, mode 1 iterates tiles.

    The tiler's complement within size(a) must tile a exactly (no partial tiles)."""
    a = _as_layout(a)
    if is_tuple(tiler):
        return _by_mode(logical_divide, a, tiler)
    tiler = _as_layout(tiler)
    rest = complement(tiler, size(a))
    if size(tiler) * size(rest) != size(a):
        raise LayoutError(
            f"logical_divide({a}, {tiler}): tiles of {size(tiler)} elements spanning "
            f"{cosize(tiler)} offsets do not divide the {size(a)} elements of {a} evenly")
    return composition(a, make_layout(tiler, rest))


def logical_product(a, tiler) -> Layout:
    """(a, tiler repeated over copies of a): mode 0 is a, mode 1 places copies of a where the
    tiler says, in the offsets a does not use."""
    a = _as_layout(a)
    if is_tuple(tiler):
        return _by_mode(logical_product, a, tiler)
    tiler = _as_layout(tiler)
    return make_layout(a, composition(complement(a, size(a) * cosize(tiler)), tiler))


def _zip_modes(layout, tiler):
    """((tile modes...), (rest modes...)) from a by-mode divide or product result."""
    if not is_tuple(tiler):
        return layout
    tiles = [layout[i][0] for i in range(len(tiler))]
    rests = [layout[i][1] for i in range(len(tiler))] + list(layout)[len(tiler):]
    return make_layout(_group(tiles), _group(rests))


def _group(layouts) -> Layout:
    return Layout(tuple(x.shape for x in layouts), tuple(x.stride for x in layouts))


def _check_by_mode_tiler(op, a, tiler):
    if is_tuple(tiler):
        for i, t in enumerate(tiler):
            if t is None:
                raise LayoutError(f"{op}({a}, {tiler}): mode {i} has no tiler; zipped and "
                                  "tiled forms need one tiler per mode")


def zipped_divide(a, tiler) -> Layout:
    """logical_divide with the tiles gathered in mode 0 and the tile index in mode 1."""
    _check_by_mode_tiler("zipped_divide", a, tiler)
    return _zip_modes(logical_divide(a, tiler), tiler)


def tiled_divide(a, tiler) -> Layout:
    """zipped_divide with the tile-index modes flattened one level: (tile, rest0, rest1, ...)."""
    zipped = zipped_divide(a, tiler)
    return make_layout(zipped[0], *list(zipped[1])) if rank(zipped[1]) > 1 else zipped


def zipped_product(a, tiler) -> Layout:
    _check_by_mode_tiler("zipped_product", a, tiler)
    return _zip_modes(logical_product(a, tiler), tiler)


def tiled_product(a, tiler) -> Layout:
    zipped = zipped_product(a, tiler)
    return make_layout(zipped[0], *list(zipped[1])) if rank(zipped[1]) > 1 else zipped


def _append(layout, r) -> Layout:
    modes = list(layout) if rank(layout) > 1 or is_tuple(layout.shape) else [layout]
    return _group(modes + [Layout(1, 0)] * (r - len(modes)))


def _blocked_or_raked(a, tiler, block_first) -> Layout:
    a, tiler = _as_layout(a), _as_layout(tiler)
    r = max(rank(a), rank(tiler))
    product_ = logical_product(_append(a, r), _append(tiler, r))
    block, tiles = product_[0], product_[1]
    modes = [(block[i], tiles[i]) if block_first else (tiles[i], block[i]) for i in range(r)]
    return _group([coalesce(make_layout(x, y)) for x, y in modes])


def blocked_product(a, tiler) -> Layout:
    """Copies of a laid out by the tiler, each mode (a_i, tiler_i): a stays contiguous."""
    return _blocked_or_raked(a, tiler, block_first=True)


def raked_product(a, tiler) -> Layout:
    """Copies of a interleaved by the tiler, each mode (tiler_i, a_i): a is spread out."""
    return _blocked_or_raked(a, tiler, block_first=False)


# ---------------------------------------------------------------------------------------------
# swizzles


def _shift_right(x, s):
    return x >> s if s >= 0 else x << -s


@attrs.frozen
class Swizzle:
    """CuTe's XOR swizzle: the `bits` bits above `base + shift` are XORed into those above
    `base`. An involution (and so a bijection) that keeps the low `base` bits."""

    bits: int
    base: int
    shift: int

    def __attrs_post_init__(self):
        if self.bits < 0 or self.base < 0:
            raise LayoutError(f"{self}: bits and base must be >= 0")
        if abs(self.shift) < self.bits:
            raise LayoutError(f"{self}: |shift| must be >= bits so that the XORed bit fields do "
                              "not overlap (otherwise the swizzle is not an involution)")

    @property
    def yyy_mask(self) -> int:
        return ((1 << self.bits) - 1) << (self.base + max(0, self.shift))

    @property
    def zzz_mask(self) -> int:
        return ((1 << self.bits) - 1) << (self.base - min(0, self.shift))

    @property
    def span(self) -> int:
        """Offsets [0, span) are permuted among themselves."""
        return 1 << (self.bits + self.base + abs(self.shift))

    def __call__(self, offset):
        if self.bits == 0:
            return offset
        return offset ^ _shift_right(offset & self.yyy_mask, self.shift)

    def __str__(self):
        return f"Sw<{self.bits},{self.base},{self.shift}>"


@attrs.frozen
class ComposedLayout:
    """swizzle(offset + layout(coord)): a swizzle applied after an affine layout."""

    swizzle: Swizzle
    offset: int
    layout: Layout

    @property
    def shape(self):
        return self.layout.shape

    def __call__(self, *coord):
        return self.swizzle(_add(self.offset, self.layout(*coord)))

    def __str__(self):
        return f"{self.swizzle} o {self.offset} o {self.layout}"

"""The CuTe layout algebra over nested int tuples, with admissibility checked instead of assumed.

A `Layout(shape, stride)` maps coordinates (ints or `argus.ir.expr` terms) to offsets. Every
operation gives C++ CuTe's result (pycute's names and call forms) wherever that result meets
CuTe's documented post-condition, and raises `LayoutError` naming the modes where it would not
(CuTe's unchecked "weak divisibility" cases; pycute's silent floors). `exact=True` asks for the
stricter reading a kernel author usually means: tilers inside the layout, whole tiles only.
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
from itertools import accumulate

import attrs

from argus.errors import ArgusError

__all__ = [
    "Layout", "Swizzle", "ComposedLayout", "LayoutError", "make_layout", "size", "cosize", "rank",
    "depth", "flatten", "product", "prefix_product", "inner_product", "shape_div", "crd2idx",
    "idx2crd", "coalesce", "filter", "composition", "complement", "right_inverse",
    "left_inverse", "logical_divide", "zipped_divide", "tiled_divide", "flat_divide",
    "logical_product", "zipped_product", "tiled_product", "flat_product", "blocked_product",
    "raked_product", "slice_and_offset",
]


class LayoutError(ArgusError, ValueError):
    """A layout operation whose admissibility condition fails; the message names the modes.

    >>> logical_divide(Layout(10, 1), 4, exact=True)
    Traceback (most recent call last):
    argus.ir.layout.LayoutError: logical_divide(10:1, 4:1): tiles of 4 elements ... evenly
    """


# ---------------------------------------------------------------------------------------------
# int tuples


def is_tuple(x) -> bool:
    """Whether `x` is a tuple (a mode with sub-modes) rather than a leaf.

    >>> is_tuple((4, 8)), is_tuple(4)
    (True, False)
    """
    return isinstance(x, tuple)


def flatten(t) -> tuple:
    """The leaves of a nested tuple in order (an int is a one-leaf tuple).

    >>> flatten(((2, 3), 4)), flatten(5)
    ((2, 3, 4), (5,))
    """
    if isinstance(t, Layout):
        return tuple(zip(flatten(t.shape), flatten(t.stride)))
    return sum((flatten(x) for x in t), ()) if is_tuple(t) else (t,)


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _int_tuple(t, who: str):
    """`t` as a nested tuple of ints (lists and numpy integers accepted), else LayoutError."""
    t = _normalise_tuple(t)
    if not all(_is_int(x) for x in flatten(t)):
        raise LayoutError(f"{who}: {t!r} is not an int or a nested tuple of ints")
    return t


def product(t) -> int:
    """The product of the leaves of an int tuple (the size of a shape).

    >>> product(((2, 3), 4))
    24
    """
    return _product(_int_tuple(t, "product"))


@functools.lru_cache(maxsize=1024)
def _product(t) -> int:
    # cached (and bounded): crd2idx asks for the size of the same nested modes on every call
    return math.prod(flatten(t))


def prefix_product(shape, init=1):
    """Exclusive prefix product congruent to `shape`: the column-major strides starting at
    `init` (a tuple `init` gives each mode its own start).

    >>> prefix_product((4, (2, 8))), prefix_product((4, 8), 2)
    ((1, (4, 8)), (2, 8))
    """
    shape = _int_tuple(shape, "prefix_product")
    if is_tuple(init):
        if not is_tuple(shape) or len(init) != len(shape):
            raise LayoutError(f"prefix_product({shape}, {init}): init must match the shape")
        return tuple(prefix_product(s, i) for s, i in zip(shape, init))
    if not is_tuple(shape):
        return init
    strides = []
    for mode in shape:
        strides.append(prefix_product(mode, init))
        init *= product(mode)
    return tuple(strides)


def inner_product(a, b):
    """sum(a_i * b_i) over congruent int tuples (a coordinate and a stride: an offset).

    >>> inner_product((1, (2, 3)), (8, (1, 4)))
    22
    """
    if is_tuple(a) != is_tuple(b) or (is_tuple(a) and len(a) != len(b)):
        raise LayoutError(f"inner_product({a}, {b}): the tuples are not congruent")
    if is_tuple(a):
        return sum(inner_product(x, y) for x, y in zip(a, b))
    return a * b


def shape_div(a, b):
    """`a` divided by `b` mode by mode, congruent to `a`: an int `b` is divided out of the
    modes of `a` from the first on (each step needs one of the two to divide the other).

    >>> shape_div((4, 8), 8), shape_div((6, 2), 3)
    ((1, 4), (2, 2))
    """
    a, b = _int_tuple(a, "shape_div"), _int_tuple(b, "shape_div")
    if is_tuple(a):
        if is_tuple(b):
            if len(a) != len(b):
                raise LayoutError(f"shape_div({a}, {b}): the tuples are not congruent")
            return tuple(shape_div(x, y) for x, y in zip(a, b))
        result = []
        for mode in a:
            result.append(shape_div(mode, b))
            b = shape_div(b, product(mode))
        return tuple(result)
    if is_tuple(b):
        return shape_div(a, product(b))
    if a < 0 or b < 1 or (a % b and b % a):
        raise LayoutError(f"shape_div({a}, {b}): neither divides the other")
    return -(-a // b)


def _ceil_div(target, n: int) -> int:
    """CuTe's ceil_div(target, n) for an int or shape target, as a size: the shape's modes
    absorb n from the first on, each rounding up."""
    result = 1
    for mode in flatten(target):
        result *= -(-mode // n)
        n = -(-n // mode)
    return result


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


# Negative int indices divide toward zero as in C++ CuTe, which makes every layout an odd
# function (L(-i) == -L(i)) and negative-stride compositions exact.
def _div(x, n):
    if n == 1:
        return x
    return -(-x // n) if _is_int(x) and x < 0 else x // n


def _mod(x, n):
    if n == 1:
        return 0
    return -(-x % n) if _is_int(x) and x < 0 else x % n


def _add(x, y):
    # skipping literal zeros keeps offsets built from expr coordinates readable
    if isinstance(x, int) and x == 0:
        return y
    return x if isinstance(y, int) and y == 0 else x + y


def _scale(x, d):
    return 0 if d == 0 else x if d == 1 else x * d


def crd2idx(coord, shape, stride=None):
    """Offset of `coord` (stride defaults to column-major); an int (or expr) coordinate of a
    tuple mode is a column-major index into it whose last sub-mode is unbounded, as in CuTe.

    >>> crd2idx((1, 2), (4, 8)), crd2idx(9, (4, 8)), crd2idx((1, 2), (4, 8), (8, 1))
    (9, 9, 10)
    """
    if stride is None:
        stride = prefix_product(shape)
    if coord is None:
        return 0
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
        offset = _add(offset, crd2idx(_mod(coord, _product(s)), s, d))
        coord = _div(coord, _product(s))
    return _add(offset, crd2idx(coord, shape[-1], stride[-1]))


def idx2crd(index, shape, stride=None):
    """Column-major coordinate of a flat index in `shape`, the last mode unbounded (the inverse
    of crd2idx for compact strides). With `stride`, pycute's form: (index // stride) % shape
    per mode.

    >>> idx2crd(9, (4, 8)), idx2crd(9, (4, 8), (1, 4))
    ((1, 2), (1, 2))
    """
    if stride is not None:
        if is_tuple(shape):
            if not is_tuple(stride) or len(stride) != len(shape):
                raise LayoutError(f"idx2crd: stride {stride} does not match the shape {shape}")
            if is_tuple(index):
                return tuple(idx2crd(i, s, d) for i, s, d in zip(index, shape, stride))
            return tuple(idx2crd(index, s, d) for s, d in zip(shape, stride))
        return _mod(_div(index, stride), shape)
    if is_tuple(index):
        if not is_tuple(shape) or len(index) != len(shape):
            raise LayoutError(f"index {index} does not match the shape {shape}")
        return tuple(idx2crd(i, s) for i, s in zip(index, shape))
    if not is_tuple(shape):
        return index
    coords = []
    for i, s in enumerate(shape):
        last = i == len(shape) - 1
        coords.append(idx2crd(index if last else _mod(index, _product(s)), s))
        index = _div(index, _product(s))
    return tuple(coords)


# ---------------------------------------------------------------------------------------------
# layouts


def _check_shape(shape):
    for s in flatten(shape):
        if not _is_int(s) or s < 1:
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

    >>> L = Layout((4, 8), (8, 1))
    >>> print(L)
    (4,8):(8,1)
    >>> L(1, 2), L((2, 3)), L(10), L(None, 2)
    (10, 19, 18, Layout(4, 8))
    >>> from argus.ir.expr import Var
    >>> L(Var("lane", 0, 32))
    Expr(lane % 4 * 8 + lane // 4)
    >>> Layout((4, 8), (1,))
    Traceback (most recent call last):
    argus.ir.layout.LayoutError: stride (1,) does not have the nesting of shape (4, 8); give one ...
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
            if not _is_int(d):
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

    def size(self) -> int:
        """Number of coordinates (pycute's method form of `size`)."""
        return size(self)

    def cosize(self) -> int:
        """One past the largest |offset| (pycute's method form of `cosize`)."""
        return cosize(self)

    def __str__(self):
        return f"{_show(self.shape)}:{_show(self.stride)}"

    def __repr__(self):
        return f"Layout({self.shape!r}, {self.stride!r})"


def _has_none(coord) -> bool:
    return coord is None or (is_tuple(coord) and any(_has_none(c) for c in coord))


def slice_and_offset(coord, layout):
    """(layout of the modes where `coord` is None, offset of the coordinates given elsewhere).

    `L(i, j)` equals `sliced(i) + offset` for `sliced, offset = slice_and_offset((None, j), L)`;
    the given coordinates may be ints or exprs.

    >>> slice_and_offset((None, 2), Layout((4, 8), (8, 1)))
    (Layout(4, 8), 2)
    """
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
    if _is_int(x) or isinstance(x, (tuple, list)):
        return Layout(x)
    raise LayoutError(f"expected a Layout, a shape int or a shape tuple, got {x!r}")


def make_layout(*layouts) -> Layout:
    """Concatenate layouts as the modes of one layout (one list or generator of layouts is
    accepted too, as in pycute).

    >>> make_layout(Layout(4, 1), Layout(8, 4))
    Layout((4, 8), (1, 4))
    """
    if len(layouts) == 1 and not isinstance(layouts[0], (Layout, tuple, numbers.Integral)):
        try:
            layouts = tuple(layouts[0])
        except TypeError:
            raise LayoutError(f"make_layout: expected layouts, got {layouts[0]!r}") from None
    layouts = [_as_layout(x) for x in layouts]
    if len(layouts) == 1:
        return layouts[0]
    if not layouts:
        raise LayoutError("make_layout: no layouts given")
    return Layout(tuple(x.shape for x in layouts), tuple(x.stride for x in layouts))


def size(x) -> int:
    """Number of coordinates of a layout (or of a shape).

    >>> size(Layout((4, 8), (8, 1))), size((2, (3, 4)))
    (32, 24)
    """
    if isinstance(x, (Layout, ComposedLayout)):
        return _product(x.shape)
    return product(x)


def cosize(layout) -> int:
    """One past the largest |offset| the layout produces (CuTe takes |stride|).

    >>> cosize(Layout((4, 8), (8, 1))), cosize(Layout((4, 8), (1, -4))), cosize(Layout(4, 0))
    (32, 32, 1)
    """
    layout = _as_layout(layout)
    return 1 + sum((s - 1) * abs(d) for s, d in flatten(layout))


def rank(x) -> int:
    """Number of top-level modes of a layout or shape (an int shape has rank 1).

    >>> rank(Layout((4, 8))), rank(4), rank(((2, 2), 8))
    (2, 1, 2)
    """
    shape = x.shape if isinstance(x, (Layout, ComposedLayout)) else x
    return len(shape) if is_tuple(shape) else 1


def depth(x) -> int:
    """Nesting depth of a layout's shape (an int shape has depth 0).

    >>> depth(Layout(((2, 2), 8))), depth((4, 8)), depth(4)
    (2, 1, 0)
    """
    shape = x.shape if isinstance(x, (Layout, ComposedLayout)) else x
    return 1 + max((depth(s) for s in shape), default=0) if is_tuple(shape) else 0


def _from_modes(modes) -> Layout:
    """A layout from (shape, stride) pairs: empty is 1:0, one mode is unwrapped."""
    if not modes:
        return Layout(1, 0)
    if len(modes) == 1:
        return Layout(*modes[0])
    return Layout(tuple(s for s, _ in modes), tuple(d for _, d in modes))


def _by_profile(op, layout, profile):
    if len(profile) > rank(layout):
        raise LayoutError(f"{op.__name__} profile {profile} has more modes than {layout}")
    modes = [op(layout[i], p) for i, p in enumerate(profile)]
    return make_layout(*modes, *list(layout)[len(profile):])


def coalesce(layout, profile=None) -> Layout:
    """The same function with as few modes as possible; by mode when `profile` is a tuple.

    >>> coalesce(Layout((4, 8), (1, 4))), coalesce(Layout((4, 8), (1, 4)), (1, 1))
    (Layout(32, 1), Layout((4, 8), (1, 4)))
    """
    layout = _as_layout(layout)
    if is_tuple(profile):
        return _by_profile(coalesce, layout, profile)
    modes = []
    for s, d in flatten(layout):
        if s == 1:
            continue
        if modes and modes[-1][0] * modes[-1][1] == d:
            modes[-1] = (modes[-1][0] * s, modes[-1][1])
        else:
            modes.append((s, d))
    return _from_modes(modes)


def _coalesce_x(layout) -> list:
    """Flat modes of the same function over all indices, the last mode unbounded: like
    coalesce, but a trailing size-1 mode keeps its stride (CuTe's coalesce_x)."""
    flat = flatten(layout)
    last_shape, last_stride = flat[-1]
    modes = [(max(last_shape, 2), last_stride)]
    for s, d in reversed(flat[:-1]):
        if s == 1:
            continue
        if s * d == modes[0][1]:
            modes[0] = (s * modes[0][0], d)
        else:
            modes.insert(0, (s, d))
    return modes


def filter(layout, profile=None) -> Layout:
    """Coalesced layout without stride-0 (broadcast) modes: the same image, injective if L was
    injective on its non-broadcast modes. By mode when `profile` is a tuple.

    >>> filter(Layout((4, 2, 8), (1, 0, 4)))
    Layout(32, 1)
    """
    layout = _as_layout(layout)
    if is_tuple(profile):
        return _by_profile(filter, layout, profile)
    return coalesce(_from_modes([(s, d) for s, d in flatten(layout) if d != 0]))


# ---------------------------------------------------------------------------------------------
# composition


def composition(a, b, exact=False):
    """The layout R with R(c) = a(b(c)) for every coordinate c of b, shaped like b.

    `b` is a layout, an int n (meaning n:1), None (a itself) or a tuple of tilers composed with
    a's modes one by one (None leaves a mode alone; write `Layout((4, 8))` to compose with a
    shape as a single layout). As in CuTe, a's last mode runs past its size and a negative
    stride in b walks offsets downward (a(-i) == -a(i)). Each mode of b must step through
    whole sub-modes of a (its stride and size divide a's mode sizes, or end inside one), and
    b's modes must not carry into each other's sub-modes of a. `exact=True` also demands that
    b stays inside a's coordinates [0, size(a)).

    >>> row_major = Layout((4, 8), (8, 1))
    >>> composition(row_major, Layout(8, 4)), composition(row_major, (2, 4))
    (Layout(8, 1), Layout((2, 4), (8, 1)))
    """
    if b is None:
        return a
    if isinstance(a, ComposedLayout):
        return ComposedLayout(a.swizzle, a.offset, composition(a.layout, b, exact))
    a = _as_layout(a)
    if is_tuple(b):
        return _by_mode(composition, a, b, exact=exact)
    b = _as_layout(b)
    if exact and (any(d < 0 for s, d in flatten(b) if s > 1) or cosize(b) > size(a)):
        raise LayoutError(
            f"composition({a}, {b}): the tiler reaches offsets outside the {size(a)} "
            f"coordinates of {a} (it spans [{_min_offset(b)}, {cosize(b) - 1}]); exact=True "
            "asks for a tiler inside the layout")
    flat_a = _coalesce_x(a)
    _check_modes_add_up(a, flat_a, b)
    results = [_compose_mode(a, flat_a, s, d, b) for s, d in flatten(b)]
    return Layout(_unflatten([r.shape for r in results], b.shape),
                  _unflatten([r.stride for r in results], b.shape))


def _min_offset(layout) -> int:
    return sum((s - 1) * d for s, d in flatten(layout) if d < 0)


def _by_mode(op, a, tilers, **kwargs):
    if len(tilers) > rank(a):
        raise LayoutError(f"{op.__name__}({a}, {tilers}): {len(tilers)} tilers for a layout of "
                          f"rank {rank(a)}")
    modes = [a[i] if t is None else op(a[i], t, **kwargs) for i, t in enumerate(tilers)]
    return make_layout(*modes, *list(a)[len(tilers):])


def _max_residue(shape: int, stride: int, modulus: int) -> int:
    """max over c < shape of (c * stride) % modulus (bounded by modulus - gcd when the walk is
    too long to enumerate, which only makes the carry check below more conservative)."""
    g = math.gcd(stride, modulus)
    if shape >= modulus // g:
        return modulus - g
    if shape > 4096:
        return modulus - g
    return max(c * stride % modulus for c in range(shape))


def _check_modes_add_up(a, flat_a, b):
    """Composing mode by mode (CuTe's right-distributivity) is exact only if a(x + y) = a(x) +
    a(y) for offsets x, y of different tiler modes: a is additive when the offsets never carry
    across a sub-mode boundary of the coalesced a (digit-wise addition), and a is linear
    everywhere when it has one mode."""
    modes = [(s, d) for s, d in flatten(b) if s > 1 and d != 0]
    if len(modes) < 2 or len(flat_a) == 1:
        return
    if len({d > 0 for _, d in modes}) > 1:
        if sum((s - 1) * abs(d) for s, d in modes) < flat_a[0][0]:
            return
        raise LayoutError(
            f"composition({a}, {b}): the tiler mixes positive and negative strides beyond the "
            f"first mode (size {flat_a[0][0]}) of {coalesce(a)}, where a is not linear; use "
            "strides of one sign")
    boundary = 1
    for i, (s_a, _) in enumerate(flat_a[:-1]):
        boundary *= s_a
        residues = [(_max_residue(s, abs(d), boundary), s, d) for s, d in modes]
        if sum(r for r, _, _ in residues) >= boundary:
            touching = [f"{s}:{d}" for r, s, d in residues if r]
            raise LayoutError(
                f"composition({a}, {b}): the tiler modes {', '.join(touching)} together carry "
                f"past sub-mode {i} (offset {boundary}) of {coalesce(a)}, so a(x + y) != a(x) "
                "+ a(y) and the result is not a layout; use a tiler whose modes nest (each "
                "size*stride divides the next stride) or stay inside one sub-mode")


def _compose_mode(a, flat_a, shape, stride, b) -> Layout:
    """a composed with the single mode shape:stride of b (CuTe's fold with the strong
    divisibility conditions; a negative stride composes |stride| and negates)."""
    if stride == 0 or shape == 1:
        return Layout(shape, 0)
    sign = 1 if stride > 0 else -1
    modes = []
    rest_shape, rest_stride = shape, abs(stride)
    for i, (s, d) in enumerate(flat_a[:-1]):
        if rest_stride % s == 0:
            rest_stride //= s
            continue
        fits = -(-s // rest_stride)
        if s % rest_stride != 0 and rest_shape > fits:
            raise LayoutError(
                f"composition({a}, {b}): the tiler mode {shape}:{stride} is not aligned with "
                f"mode {i} (size {s}) of the coalesced layout {coalesce(a)}: stride "
                f"{rest_stride} there neither divides nor is divided by {s}, and the mode does "
                "not end inside it; need a stride that divides or is divided by the mode sizes")
        new_shape = min(fits, rest_shape)
        if rest_shape % new_shape != 0:
            raise LayoutError(
                f"composition({a}, {b}): the tiler mode {shape}:{stride} takes {new_shape} "
                f"elements of mode {i} (size {s}) of the coalesced layout {coalesce(a)}, which "
                f"does not divide {rest_shape}; pick tile sizes that split the modes evenly")
        modes.append((new_shape, sign * rest_stride * d))
        rest_shape //= new_shape
        rest_stride = 1
        if rest_shape == 1:
            break
    if rest_shape != 1 or not modes:
        modes.append((rest_shape, sign * rest_stride * flat_a[-1][1]))
    return _from_modes(modes)


# ---------------------------------------------------------------------------------------------
# complement and inverses


def complement(layout, cotarget=None) -> Layout:
    """The layout R, with increasing strides, whose offsets are disjoint from `layout`'s and
    together with them reach at least `cotarget` (an int or a shape; default cosize(layout)).

    As in CuTe, layout's modes are taken by increasing |stride|; R fills each gap below the next
    stride with as many whole copies of the modes below as fit (so an injective layout whose
    modes do not nest still has a complement), and its last mode rounds up past the cotarget
    and makes up for those gaps, so that size(R) >= cotarget / size(filter(layout)) as CuTe
    documents. Admissible when every stride clears the extent (size * |stride|) of the smaller
    modes.

    >>> complement(Layout(4, 2), 16), complement(Layout((2, 2), (1, 8)), 32)
    (Layout((2, 2), (1, 8)), Layout((4, 2), (2, 16)))
    """
    layout = _as_layout(layout)
    if cotarget is None:
        cotarget = cosize(layout)
    cotarget = _int_tuple(cotarget, f"complement({layout}, cotarget)")
    if any(c < 1 for c in flatten(cotarget)):
        raise LayoutError(f"complement({layout}, {cotarget}): the cotarget must be >= 1")
    modes, current, covered = [], 1, 1
    for d, s in sorted((abs(d), s) for s, d in flatten(layout) if s != 1 and d != 0):
        covered *= s
        if d < current:
            raise LayoutError(
                f"complement({layout}): the mode {s}:{d} starts inside the extent {current} of "
                "the modes with smaller strides, so their offsets overlap or interleave; only "
                "layouts whose sorted strides clear the extent below them have a complement")
        modes.append((d // current, current))
        current = s * d
    # CuTe's size(R) >= cotarget / size(filter(layout)): when modes do not nest, the floors
    # above leave gaps unused, and the last mode makes up for them (else a product's copies
    # would run on past R's size and overlap)
    needed = _product(cotarget) // covered
    have = math.prod(s for s, _ in modes)
    modes.append((max(_ceil_div(cotarget, current), -(-needed // have)), current))
    return coalesce(_from_modes(modes))


def right_inverse(layout) -> Layout:
    """R with layout(R(i)) == i for every i < size(R), as large as the layout allows.

    >>> L = Layout((4, 8), (8, 1))
    >>> R = right_inverse(L)
    >>> R, all(L(R(i)) == i for i in range(size(R)))
    (Layout((8, 4), (4, 1)), True)
    """
    if layout is None:
        return None
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
    """R with layout(R(layout(i))) == layout(i) for every i < size(layout) (CuTe's quasi-inverse:
    R(layout(i)) == i when the layout is injective). The strides, sorted, must each divide the
    next; all negative strides are inverted through a(-i) == -a(i).

    >>> L = Layout((4, 8), (8, 1))
    >>> R = left_inverse(L)
    >>> R, all(R(L(i)) == i for i in range(size(L)))
    (Layout((8, 4), (4, 1)), True)
    """
    if layout is None:
        return None
    layout = _as_layout(layout)
    flat = flatten(coalesce(layout))
    signs = {d > 0 for _, d in flat if d != 0}
    if len(signs) > 1:
        raise LayoutError(f"left_inverse({layout}): strides of both signs; the layout algebra "
                          "inverts only layouts whose strides share one sign")
    if signs == {False}:
        positive = left_inverse(_from_modes([(s, -d) for s, d in flat]))
        return Layout(positive.shape, _unflatten([-d for d in flatten(positive.stride)],
                                                 positive.stride))
    preprod = list(accumulate((s for s, _ in flat), operator.mul, initial=1))
    order = sorted(range(len(flat)), key=lambda i: flat[i][1])
    shapes, strides, extent, reach = [], [0], 1, 1
    for i in order:
        s, d = flat[i]
        if d == 0:
            continue
        if d < reach:
            raise LayoutError(
                f"left_inverse({layout}): the mode {s}:{d} starts inside the extent {reach} of "
                "the modes with smaller strides, so offsets repeat or interleave and cannot be "
                "decoded; only injective layouts (with broadcast modes) have a left inverse")
        if d % extent:
            raise LayoutError(
                f"left_inverse({layout}): stride {d} is not a multiple of the stride {extent} "
                "below it, so offsets between them cannot be decoded; use strides that divide "
                "each other")
        shapes.append(d // extent)
        strides.append(preprod[i])
        extent, reach = d, s * d
    shapes.append(flat[order[-1]][0])
    return coalesce(Layout(tuple(shapes), tuple(strides)))


# ---------------------------------------------------------------------------------------------
# divide and product


def logical_divide(a, tiler, exact=False) -> Layout:
    """a split into (tile, rest): mode 0 is a composed with the tiler, mode 1 iterates tiles.

    As in CuTe the rest rounds up, so a tiler that does not divide a gives a partial last tile
    (its coordinates run past a's size); `exact=True` refuses that instead.

    >>> logical_divide(Layout(16, 1), 4), logical_divide(Layout(10, 1), 4)
    (Layout((4, 4), (1, 4)), Layout((4, 3), (1, 4)))
    >>> logical_divide(Layout((8, 8)), (2, 4))
    Layout(((2, 4), (4, 2)), ((1, 2), (8, 32)))
    """
    if tiler is None:
        return a
    a = _as_layout(a)
    if is_tuple(tiler):
        return _by_mode(logical_divide, a, tiler, exact=exact)
    tiler = _as_layout(tiler)
    rest = complement(tiler, coalesce(a).shape)
    if exact and size(tiler) * size(rest) != size(a):
        raise LayoutError(
            f"logical_divide({a}, {tiler}): tiles of {size(tiler)} elements spanning "
            f"{cosize(tiler)} offsets do not divide the {size(a)} elements of {a} evenly")
    return composition(a, make_layout(tiler, rest))


def logical_product(a, tiler) -> Layout:
    """(a, tiler repeated over copies of a): mode 0 is a, mode 1 places copies of a where the
    tiler says, in the offsets a does not use (CuTe: compose a's complement with the tiler).

    >>> logical_product(Layout(4, 1), 3)
    Layout((4, 3), (1, 4))
    >>> logical_product(Layout((2, 2), (1, 2)), Layout((2, 3)))
    Layout(((2, 2), (2, 3)), ((1, 2), (4, 8)))
    """
    if tiler is None:
        return a
    a = _as_layout(a)
    if is_tuple(tiler):
        return _by_mode(logical_product, a, tiler)
    tiler = _as_layout(tiler)
    return make_layout(a, composition(complement(a, size(a) * cosize(tiler)), tiler))


def _zip_modes(layout, a, tiler):
    """((tile modes...), (rest modes...)) from a by-mode divide or product result; a mode whose
    tiler is None contributes a 1:0 tile and its whole self to the rest (pycute's hier_unzip)."""
    if not is_tuple(tiler):
        return layout
    tiles, rests = [], []
    for i, t in enumerate(tiler):
        if t is None:
            tiles.append(Layout(1, 0))
            rests.append(_as_layout(a)[i])
        else:
            tiles.append(layout[i][0])
            rests.append(layout[i][1])
    rests += list(layout)[len(tiler):]
    return make_layout(_group(tiles), _group(rests))


def _group(layouts) -> Layout:
    return Layout(tuple(x.shape for x in layouts), tuple(x.stride for x in layouts))


def _unpack(zipped, first: bool) -> Layout:
    """Flatten mode 1 (and mode 0 when `first`) of a zipped result one level."""
    head = list(zipped[0]) if first else [zipped[0]]
    return _group(head + list(zipped[1]))


def zipped_divide(a, tiler, exact=False) -> Layout:
    """logical_divide with the tiles gathered in mode 0 and the tile index in mode 1.

    >>> zipped_divide(Layout((8, 8)), (2, 4))
    Layout(((2, 4), (4, 2)), ((1, 8), (2, 32)))
    """
    return _zip_modes(logical_divide(a, tiler, exact), a, tiler)


def tiled_divide(a, tiler, exact=False) -> Layout:
    """zipped_divide with the tile-index modes flattened one level: (tile, rest0, rest1, ...).

    >>> tiled_divide(Layout((8, 8)), (2, 4))
    Layout(((2, 4), 4, 2), ((1, 8), 2, 32))
    """
    return _unpack(zipped_divide(a, tiler, exact), first=False)


def flat_divide(a, tiler, exact=False) -> Layout:
    """zipped_divide with both modes flattened one level: (tile0, tile1, ..., rest0, ...).

    >>> flat_divide(Layout((8, 8)), (2, 4))
    Layout((2, 4, 4, 2), (1, 8, 2, 32))
    """
    return _unpack(zipped_divide(a, tiler, exact), first=True)


def zipped_product(a, tiler) -> Layout:
    """logical_product with a's modes gathered in mode 0 and the copies' in mode 1.

    >>> zipped_product(Layout((2, 2), (1, 2)), Layout((2, 3)))
    Layout(((2, 2), (2, 3)), ((1, 2), (4, 8)))
    """
    return _zip_modes(logical_product(a, tiler), a, tiler)


def tiled_product(a, tiler) -> Layout:
    """zipped_product with the copies' modes flattened one level: (a, copy0, copy1, ...).

    >>> tiled_product(Layout((2, 2), (1, 2)), Layout((2, 3)))
    Layout(((2, 2), 2, 3), ((1, 2), 4, 8))
    """
    return _unpack(zipped_product(a, tiler), first=False)


def flat_product(a, tiler) -> Layout:
    """zipped_product with both modes flattened one level: (a0, a1, ..., copy0, ...).

    >>> flat_product(Layout((2, 2), (1, 2)), Layout((2, 3)))
    Layout((2, 2, 2, 3), (1, 2, 4, 8))
    """
    return _unpack(zipped_product(a, tiler), first=True)


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
    """Copies of a laid out by the tiler, each mode (a_i, tiler_i): a stays contiguous.

    >>> blocked_product(Layout((2, 2), (1, 2)), Layout((2, 3)))
    Layout(((2, 2), (2, 3)), ((1, 4), (2, 8)))
    """
    return _blocked_or_raked(a, tiler, block_first=True)


def raked_product(a, tiler) -> Layout:
    """Copies of a interleaved by the tiler, each mode (tiler_i, a_i): a is spread out.

    >>> raked_product(Layout((2, 2), (1, 2)), Layout((2, 3)))
    Layout(((2, 2), (3, 2)), ((4, 1), (8, 2)))
    """
    return _blocked_or_raked(a, tiler, block_first=False)


# ---------------------------------------------------------------------------------------------
# swizzles


def _shift_right(x, s):
    return x >> s if s >= 0 else x << -s


@attrs.frozen
class Swizzle:
    """CuTe's XOR swizzle: the `bits` bits above `base + shift` are XORed into those above
    `base`. An involution (and so a bijection) that keeps the low `base` bits.

    >>> sw = Swizzle(3, 4, 3)
    >>> print(sw)
    Sw<3,4,3>
    >>> [sw(offset) for offset in (16, 128, 144)], sw(sw(144)), sw.span
    ([16, 144, 128], 144, 1024)
    >>> Swizzle(3, 4, 2)
    Traceback (most recent call last):
    argus.ir.layout.LayoutError: Sw<3,4,2>: |shift| must be >= bits so that the XORed bit fields ...
    """

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
    """swizzle(offset + layout(coord)): a swizzle applied after an affine layout.

    >>> lds = ComposedLayout(Swizzle(3, 4, 3), 0, Layout((8, 64), (64, 1)))
    >>> print(lds)
    Sw<3,4,3> o 0 o (8,64):(64,1)
    >>> lds(1, 0), lds(1, 16)
    (64, 80)
    """

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

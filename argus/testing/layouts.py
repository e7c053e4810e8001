"""Hypothesis strategies for the CuTe layout algebra: admissible layouts, tilers, swizzles and
swizzled (composed) layouts, and separately inadmissible inputs labelled with the reason the
algebra must give. Modes are drawn from small factors and shrink to one mode of size 1, so a
failing case reads like a line of the CuTe documentation (after ColfaxResearch tract's
generators: tilers are unions of digit runs of the layout's mixed-radix domain)."""

from __future__ import annotations

import math
from collections.abc import Callable

import attrs
from hypothesis import strategies as st

from argus.ir.layout import (
    ComposedLayout,
    Layout,
    Swizzle,
    coalesce,
    complement,
    composition,
    flatten,
    left_inverse,
    logical_divide,
    size,
)

__all__ = ["FACTORS", "image", "nestings", "layout_from_modes", "layouts", "injective_layouts",
           "tilers", "composable_pairs", "divisible_pairs", "swizzles", "composed_layouts",
           "Inadmissible", "inadmissible"]

#: Mode sizes drawn (1 first: shrinking goes towards size-1 modes).
FACTORS = (1, 2, 3, 4, 8)


def image(layout) -> list[int]:
    """Every offset of `layout`, in coordinate order."""
    return [layout(i) for i in range(size(layout))]


@st.composite
def nestings(draw, leaves):
    """Group a list of leaves into a random nested tuple (or a lone leaf)."""
    leaves = list(leaves)
    if len(leaves) == 1 and draw(st.booleans()):
        return leaves[0]
    groups, i = [], 0
    while i < len(leaves):
        n = draw(st.integers(1, len(leaves) - i))
        chunk = leaves[i:i + n]
        groups.append(chunk[0] if n == 1 else tuple(chunk))
        i += n
    return tuple(groups)


def layout_from_modes(modes, nesting) -> Layout:
    """The layout with flat (shape, stride) `modes`, nested like `nesting` (a tuple of indices)."""
    return Layout(_nest([s for s, _ in modes], nesting), _nest([d for _, d in modes], nesting))


def _nest(flat, profile):
    it = iter(flat)

    def go(p):
        return tuple(go(q) for q in p) if isinstance(p, tuple) else next(it)

    return go(profile)


@st.composite
def layouts(draw, max_modes: int = 4, strides: tuple[int, int] = (-4, 12),
            factors: tuple[int, ...] = FACTORS):
    """Any layout with mode sizes from `factors` and strides in the closed range `strides`,
    including broadcast (0) and negative ones (CuTe accepts them all)."""
    shapes = draw(st.lists(st.sampled_from(factors), min_size=1, max_size=max_modes))
    lo, hi = strides
    strides = draw(st.lists(st.integers(lo, hi), min_size=len(shapes), max_size=len(shapes)))
    return layout_from_modes(list(zip(shapes, strides)), draw(nestings(range(len(shapes)))))


@st.composite
def injective_layouts(draw, max_modes: int = 4, gaps: bool = True):
    """Injective layouts whose modes nest (so they have a complement): strides are prefix
    products of a random mode order, with random gaps between modes (none when `gaps` is
    false: the layout is then a bijection onto [0, size))."""
    shapes = draw(st.lists(st.sampled_from(FACTORS), min_size=1, max_size=max_modes))
    order = draw(st.permutations(range(len(shapes))))
    strides, current = [0] * len(shapes), 1
    for i in order:
        current *= draw(st.sampled_from([1, 1, 2, 3])) if gaps else 1
        strides[i] = current
        current *= shapes[i]
    return layout_from_modes(list(zip(shapes, strides)), draw(nestings(range(len(shapes)))))


@st.composite
def _digits_of(draw, sizes):
    """Refine each size into an ordered factorisation: the digits of a mixed-radix domain."""
    digits = []
    for s in sizes:
        while s > 1:
            d = draw(st.sampled_from([x for x in range(2, s + 1) if s % x == 0]))
            digits.append(d)
            s //= d
    return digits


@st.composite
def tilers(draw, sizes, allow_broadcast: bool = True):
    """A tiler admissible for composition with a layout whose coalesced modes have `sizes`:
    modes are disjoint runs of digits of that mixed-radix domain, in any order, each with the
    stride of its first digit (plus, when allowed, one broadcast mode of stride 0)."""
    digits = draw(_digits_of(sizes))
    runs, i = [], 0
    while i < len(digits):
        n = draw(st.integers(1, len(digits) - i))
        runs.append((math.prod(digits[i:i + n]), math.prod(digits[:i])))
        i += n
    chosen = draw(st.lists(st.sampled_from(runs), unique=True, max_size=len(runs))) if runs else []
    if allow_broadcast and draw(st.booleans()):
        chosen.insert(draw(st.integers(0, len(chosen))), (draw(st.sampled_from([2, 3])), 0))
    if not chosen:
        chosen = [(1, 0)]
    return layout_from_modes(chosen, draw(nestings(range(len(chosen)))))


def _modes_of(layout) -> list[int]:
    return [s for s, _ in flatten(coalesce(layout))]


@st.composite
def composable_pairs(draw):
    """(a, b) for which composition(a, b) is defined."""
    a = draw(st.one_of(injective_layouts(), layouts()))
    return a, draw(tilers(_modes_of(a)))


@st.composite
def divisible_pairs(draw):
    """(a, tiler) where the tiler's complement tiles size(a) exactly (logical_divide is
    defined)."""
    a = draw(st.one_of(injective_layouts(), layouts()))
    return a, draw(tilers(_modes_of(a), allow_broadcast=False))


@st.composite
def swizzles(draw, max_bits: int = 3):
    """Swizzle(bits, base, shift) with |shift| >= bits (an involution), either direction."""
    bits = draw(st.integers(0, max_bits))
    base = draw(st.integers(0, 3))
    shift = draw(st.integers(bits, bits + 2)) * draw(st.sampled_from([1, -1]))
    return Swizzle(bits, base, shift)


@st.composite
def composed_layouts(draw):
    """Swizzle o offset o layout where the layout is a bijection onto [0, n) with n a multiple
    of the swizzle's span and the offset a multiple of it: a permutation of [offset, offset+n),
    the shape of a swizzled LDS tile."""
    sw = draw(swizzles())
    tile = draw(injective_layouts(max_modes=3, gaps=False))
    repeat = sw.span // math.gcd(sw.span, size(tile))
    inner = Layout((tile.shape, repeat), (tile.stride, size(tile)))
    return ComposedLayout(sw, sw.span * draw(st.integers(0, 2)), inner)


@attrs.frozen
class Inadmissible:
    """An input the algebra must reject: `operation(*args, **options)` raises LayoutError whose
    message matches the regex `reason`."""

    operation: str
    args: tuple
    reason: str
    options: tuple[tuple[str, object], ...] = ()

    def call(self):
        return _OPERATIONS[self.operation](*self.args, **dict(self.options))

    def __str__(self) -> str:
        options = "".join(f", {k}={v!r}" for k, v in self.options)
        return (f"{self.operation}({', '.join(str(a) for a in self.args)}{options}): "
                f"expect /{self.reason}/")


_OPERATIONS: dict[str, Callable] = {
    "Layout": Layout, "Swizzle": Swizzle, "composition": composition, "complement": complement,
    "left_inverse": left_inverse, "logical_divide": logical_divide,
}


@st.composite
def _undivided_composition(draw):
    # a's first mode does not divide the tiler's size, and the tiler reaches a's second mode
    first = draw(st.sampled_from([2, 4]))
    n = first * draw(st.integers(1, 2)) + draw(st.integers(1, first - 1))
    return Inadmissible("composition", (Layout((first, 8), (1, 10)), Layout(n, 1)),
                        rf"mode 0 \(size {first}\).*does not divide {n}")


@st.composite
def _outside_composition(draw):
    n = draw(st.sampled_from(FACTORS[1:]))
    # CuTe extends a layout past its domain; the exact composition refuses to
    return Inadmissible("composition", (Layout(n, 1), Layout(n * draw(st.integers(2, 3)), 1)),
                        "outside", (("exact", True),))


@st.composite
def _overlapping_complement(draw):
    a, b = draw(st.sampled_from(FACTORS[1:])), draw(st.sampled_from(FACTORS[1:]))
    return Inadmissible("complement", (Layout((a, b), (1, 1)),), "overlap or interleave")


@st.composite
def _mixed_sign_left_inverse(draw):
    a, b = draw(st.sampled_from(FACTORS[1:])), draw(st.sampled_from(FACTORS[1:]))
    return Inadmissible("left_inverse", (Layout((a, b), (1, -a)),), "both signs")


@st.composite
def _undivided_divide(draw):
    t = draw(st.sampled_from([3, 4, 8]))
    n = t * draw(st.integers(1, 3)) + draw(st.integers(1, t - 1))
    return Inadmissible("logical_divide", (Layout(n), Layout(t)), "do not divide",
                        (("exact", True),))


@st.composite
def _overlapping_swizzle(draw):
    bits = draw(st.integers(2, 4))
    shift = draw(st.integers(1, bits - 1)) * draw(st.sampled_from([1, -1]))
    return Inadmissible("Swizzle", (bits, draw(st.integers(0, 3)), shift), "shift")


@st.composite
def _empty_mode(draw):
    shape = draw(st.lists(st.sampled_from(FACTORS), min_size=1, max_size=3))
    shape.insert(draw(st.integers(0, len(shape))), 0)
    return Inadmissible("Layout", (tuple(shape),), ">= 1")


@st.composite
def _nesting_mismatch(draw):
    shape = tuple(draw(st.lists(st.sampled_from(FACTORS), min_size=2, max_size=3)))
    return Inadmissible("Layout", (shape, draw(st.integers(1, 4))), "nesting")


def inadmissible():
    """Inputs every layout operation must reject with a LayoutError naming the reason (pycute
    floors or asserts on some of these; Argus must raise)."""
    return st.one_of(_undivided_composition(), _outside_composition(), _overlapping_complement(),
                     _mixed_sign_left_inverse(), _undivided_divide(), _overlapping_swizzle(),
                     _empty_mode(), _nesting_mismatch())

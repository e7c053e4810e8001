"""CuTe layout algebra: post-conditions checked by enumerating every coordinate.

The admissible inputs come from `argus.testing.layouts`. Separately, arbitrary pairs must either
raise LayoutError or satisfy the post-condition, and every labelled inadmissible input must raise
with its reason, so nothing is ever floored silently.
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from argus.ir.expr import Var, evaluate, simplify
from argus.ir.layout import (
    ComposedLayout,
    Layout,
    LayoutError,
    Swizzle,
    blocked_product,
    coalesce,
    complement,
    composition,
    cosize,
    depth,
    filter,
    flatten,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    raked_product,
    rank,
    right_inverse,
    size,
    slice_and_offset,
    tiled_divide,
    tiled_product,
    zipped_divide,
    zipped_product,
)
from argus.testing.layouts import (
    composable_pairs,
    composed_layouts,
    divisible_pairs,
    image,
    inadmissible,
    injective_layouts,
    layouts,
    swizzles,
    tilers,
)


def leaves_compatible(b_shape, r_shape):
    """R refines B: every leaf of B's shape became a sub-shape of R with the same size."""
    if isinstance(b_shape, tuple):
        return isinstance(r_shape, tuple) and len(b_shape) == len(r_shape) and all(
            leaves_compatible(x, y) for x, y in zip(b_shape, r_shape))
    return math.prod(flatten(r_shape)) == b_shape


# ------------------------------------------------------------------------------ composition


@given(composable_pairs())
def test_composition_is_function_composition(pair):
    a, b = pair
    r = composition(a, b)
    assert size(r) == size(b)
    assert leaves_compatible(b.shape, r.shape)
    assert image(r) == [a(b(i)) for i in range(size(b))]


@given(layouts(), layouts())
def test_composition_raises_or_is_exact(a, b):
    try:
        r = composition(a, b)
    except LayoutError:
        return
    assert size(r) == size(b)
    assert image(r) == [a(b(i)) for i in range(size(b))]


@given(st.data())
def test_by_mode_composition(data):
    rows, cols = data.draw(injective_layouts(max_modes=2)), data.draw(layouts(max_modes=2))
    a = make_layout(rows, cols)
    tiler = data.draw(tilers([s for s, _ in flatten(coalesce(rows))]))
    r = composition(a, (tiler, None))
    assert r[0] == composition(rows, tiler)
    assert image(r[0]) == [rows(tiler(i)) for i in range(size(tiler))]
    assert r[1] == cols


# ------------------------------------------------------------------------ coalesce, filter


@given(layouts())
def test_coalesce_preserves_the_function(layout):
    c = coalesce(layout)
    assert size(c) == size(layout)
    assert depth(c) <= 1
    assert image(c) == image(layout)


@given(layouts(max_modes=2), layouts(max_modes=3))
def test_coalesce_by_mode_keeps_the_modes(x, y):
    layout = make_layout(x, y)
    c = coalesce(layout, (1, 1))
    assert rank(c) == 2
    assert image(c[0]) == image(x) and image(c[1]) == image(y)
    assert image(c) == image(layout)


@given(layouts())
def test_filter_preserves_the_image_set(layout):
    f = filter(layout)
    assert set(image(f)) == set(image(layout))
    assert all(d != 0 for s, d in flatten(f) if s > 1)


# ---------------------------------------------------------------------- complement, inverse


@given(injective_layouts(max_modes=3), st.integers(1, 4))
def test_complement_is_disjoint_ordered_and_bounded(layout, extra):
    cotarget = cosize(layout) * extra
    r = complement(layout, cotarget)
    strides = [d for s, d in flatten(r) if s > 1]
    assert strides == sorted(set(strides)), "strides must increase"
    assert not (set(image(layout)) & set(image(r))) - {0}, "codomains overlap"
    both = make_layout(layout, r)
    assert len(set(image(both))) == size(both), "layout and complement together repeat an offset"
    assert cosize(both) >= cotarget


@given(layouts())
def test_complement_raises_or_satisfies_its_postconditions(layout):
    try:
        r = complement(layout, cosize(layout))
    except LayoutError:
        assert len(set(image(filter(layout)))) < size(filter(layout)) or any(
            d < 0 for _, d in flatten(layout)) or _not_nested(layout)
        return
    both = make_layout(filter(layout), r)
    assert len(set(image(both))) == size(both)


def _not_nested(layout):
    modes = sorted((d, s) for s, d in flatten(layout) if s > 1 and d != 0)
    extent = 1
    for d, s in modes:
        if d % extent:
            return True
        extent = s * d
    return False


@given(layouts())
def test_right_inverse(layout):
    r = right_inverse(layout)
    assert [layout(r(i)) for i in range(size(r))] == list(range(size(r)))


@given(injective_layouts(max_modes=3))
def test_right_inverse_of_a_compact_bijection_is_complete(layout):
    compact = coalesce(make_layout(layout, complement(layout)))
    r = right_inverse(compact)
    assert size(r) == size(compact)
    assert [compact(r(i)) for i in range(size(r))] == list(range(size(r)))


@given(injective_layouts())
def test_left_inverse(layout):
    r = left_inverse(layout)
    assert [r(layout(i)) for i in range(size(layout))] == list(range(size(layout)))


# ------------------------------------------------------------------------- divide, product




@given(divisible_pairs())
def test_logical_divide_round_trip(pair):
    a, tiler = pair
    d = logical_divide(a, tiler)
    assert size(d) == size(a)
    assert sorted(image(d)) == sorted(image(a))
    assert image(d[0]) == image(composition(a, tiler))
    assert image(zipped_divide(a, tiler)) == image(d)


@given(st.data())
def test_zipped_and_tiled_divide_by_mode(data):
    rows = data.draw(st.sampled_from([2, 4, 6, 8]))
    cols = data.draw(st.sampled_from([2, 4, 8]))
    a = data.draw(st.sampled_from([Layout((rows, cols)), Layout((rows, cols), (cols, 1))]))
    by_mode = (data.draw(tilers([rows], allow_broadcast=False)),
               data.draw(tilers([cols], allow_broadcast=False)))
    z = zipped_divide(a, by_mode)
    assert image(z[0]) == image(composition(a, by_mode))
    assert sorted(image(z)) == sorted(image(a))
    t = tiled_divide(a, by_mode)
    assert rank(t) == 3 and image(t) == image(z)


@given(injective_layouts(max_modes=2, gaps=False), injective_layouts(max_modes=2))
def test_logical_product(a, tiler):
    check_logical_product(a, tiler)


@given(injective_layouts(max_modes=2), injective_layouts(max_modes=2))
def test_logical_product_raises_or_is_exact(a, tiler):
    try:
        logical_product(a, tiler)
    except LayoutError:
        return
    check_logical_product(a, tiler)


def check_logical_product(a, tiler):
    p = logical_product(a, tiler)
    assert p[0] == a
    assert size(p) == size(a) * size(tiler)
    assert len(set(image(p))) == size(p), "copies of an injective layout must not overlap"
    assert image(zipped_product(a, tiler)) == image(p)


@given(injective_layouts(max_modes=2, gaps=False), injective_layouts(max_modes=2))
def test_blocked_and_raked_products_have_equal_images(a, tiler):
    blocked, raked = blocked_product(a, tiler), raked_product(a, tiler)
    assert size(blocked) == size(raked) == size(a) * size(tiler)
    assert set(image(blocked)) == set(image(raked))
    assert rank(blocked) == max(rank(a), rank(tiler))


def test_blocked_and_raked_products_match_cute():
    block, tiler = Layout((2, 2), (1, 2)), Layout((3, 4), (1, 3))
    assert blocked_product(block, tiler) == Layout(((2, 3), (2, 4)), ((1, 4), (2, 12)))
    assert raked_product(block, tiler) == Layout(((3, 2), (4, 2)), ((4, 1), (12, 2)))
    assert tiled_product(Layout((2, 2)), (Layout(3), Layout(2))) == Layout(
        ((2, 2), 3, 2), ((1, 2), 2, 1))


# -------------------------------------------------------------------------------- swizzles




@given(swizzles())
def test_swizzle_is_an_involutive_bijection_keeping_low_bits(sw):
    domain = range(sw.span)
    swizzled = [sw(x) for x in domain]
    assert sorted(swizzled) == list(domain)
    assert all(sw(sw(x)) == x for x in domain)
    low = (1 << sw.base) - 1
    assert all(sw(x) & low == x & low for x in domain)


@given(swizzles())
def test_swizzle_of_an_expression_matches_integers(sw):
    offset = Var("offset", 0, sw.span)
    assert list(evaluate(sw(offset), {"offset": np.arange(sw.span)})) == [
        sw(x) for x in range(sw.span)]


def test_composed_layout_applies_the_swizzle_after_the_layout():
    sw, inner = Swizzle(3, 3, 3), Layout((64, 64), (64, 1))
    composed = ComposedLayout(sw, 0, inner)
    assert [composed(i) for i in range(size(composed))] == [sw(inner(i)) for i in range(4096)]
    row, col = Var("row", 0, 64), Var("col", 0, 64)
    grid = {"row": np.arange(64)[:, None], "col": np.arange(64)[None, :]}
    expected = np.array([[sw(r * 64 + c) for c in range(64)] for r in range(64)])
    assert np.array_equal(evaluate(composed(row, col), grid), expected)
    tile = composition(composed, Layout((8, 8), (64, 1)))
    assert isinstance(tile, ComposedLayout) and [tile(i) for i in range(64)] == [
        sw(inner(Layout((8, 8), (64, 1))(i))) for i in range(64)]


# ------------------------------------------------------------------------------- slicing


@given(layouts(max_modes=2), layouts(max_modes=2), st.data())
def test_slicing_fixes_one_mode(rows, cols, data):
    layout = make_layout(rows, cols)
    j = data.draw(st.integers(0, size(cols) - 1))
    sliced, offset = slice_and_offset((None, j), layout)
    assert [sliced(i) + offset for i in range(size(rows))] == [
        layout(i, j) for i in range(size(rows))]
    assert layout(None, j) == sliced
    i = data.draw(st.integers(0, size(rows) - 1))
    column, start = slice_and_offset((i, None), layout)
    assert [column(k) + start for k in range(size(cols))] == [
        layout(i, k) for k in range(size(cols))]


def test_slicing_with_a_symbolic_coordinate():
    wave = Var("wave", 0, 4)
    per_wave, base = slice_and_offset((None, wave), Layout((64, 4), (1, 64)))
    assert per_wave == Layout(64, 1)
    assert evaluate(base, {"wave": np.arange(4)}).tolist() == [0, 64, 128, 192]
    with pytest.raises(LayoutError, match="does not match"):
        slice_and_offset((None, (1, 2)), Layout((64, 4)))


# ---------------------------------------------------------------------- symbolic coordinates


@given(layouts())
def test_layout_of_an_expression_evaluates_like_the_layout(layout):
    index = Var("i", 0, size(layout))
    offsets = evaluate(layout(index), {"i": np.arange(size(layout))})
    assert list(np.broadcast_to(offsets, (size(layout),))) == image(layout)
    assert list(np.broadcast_to(evaluate(simplify(layout(index)), {"i": np.arange(size(layout))}),
                                (size(layout),))) == image(layout)


def test_mfma_accumulator_layout_reads_like_the_isa_manual():
    # D of v_mfma_f32_32x32x8: lane l, reg r hold row 8*(r//4) + 4*(l//32) + r%4, column l%32
    thread_value = Layout(((32, 2), (4, 4)), ((32, 4), (1, 8)))
    lane, reg = Var("lane", 0, 64), Var("reg", 0, 16)
    offset = thread_value((lane, reg))
    grid = {"lane": np.arange(64)[:, None], "reg": np.arange(16)[None, :]}
    row = 8 * (grid["reg"] // 4) + 4 * (grid["lane"] // 32) + grid["reg"] % 4
    assert np.array_equal(evaluate(offset, grid), grid["lane"] % 32 * 32 + row)
    assert str(offset) == "lane % 32 * 32 + lane // 32 * 4 + (reg % 4 + reg // 4 * 8)"


# ------------------------------------------------------------------------ worked examples


def test_examples_from_the_cute_documentation():
    assert composition(Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1))) == Layout(
        ((2, 2), 3), ((24, 2), 8))
    assert complement(Layout(4, 2), 24) == Layout((2, 3), (1, 8))
    assert complement(Layout((2, 2), (1, 6)), 24) == Layout((3, 2), (2, 12))
    assert logical_divide(Layout(24), Layout(4, 2)) == Layout((4, (2, 3)), (2, (1, 8)))
    assert coalesce(Layout((2, (1, 6)), (1, (6, 2)))) == Layout(12, 1)
    assert zipped_divide(Layout((8, 8)), (2, 4)) == Layout(((2, 4), (4, 2)), ((1, 8), (2, 32)))
    assert right_inverse(Layout((4, 8), (8, 1))) == Layout((8, 4), (4, 1))
    assert str(Layout((4, (2, 3)), (2, (1, 8)))) == "(4,(2,3)):(2,(1,8))"


def test_numpy_integers_and_lists_are_accepted():
    assert Layout([np.int64(4), 8], (np.int32(8), 1)) == Layout((4, 8), (8, 1))


def test_logical_product_with_an_int_is_a_product_not_a_divide():
    # pycute's logical_product(layout, int) calls logical_divide; the product repeats the layout
    assert logical_product(Layout(4, 1), 2) == Layout((4, 2), (1, 4))
    assert logical_product(Layout(4, 1), 2) == logical_product(Layout(4, 1), Layout(2))


@given(inadmissible())
def test_inadmissible_inputs_raise_with_their_reason(case):
    with pytest.raises(LayoutError, match=case.reason):
        case.call()


@given(composed_layouts())
def test_composed_layout_permutes_its_offset_range(layout):
    offsets = image(layout)
    assert sorted(offsets) == list(range(layout.offset, layout.offset + len(offsets)))
    assert all(o == layout.swizzle(layout.offset + layout.layout(i))
               for i, o in enumerate(offsets))


def test_inadmissible_inputs_raise_naming_the_modes():
    with pytest.raises(LayoutError, match=r"mode 0 \(size 2\).*does not divide 3"):
        composition(Layout((2, 3), (1, 10)), Layout(3, 1))
    with pytest.raises(LayoutError, match="not aligned"):
        composition(Layout((4, 3), (1, 10)), Layout(3, 3))
    # CuTe returns (3,2):(24,1) here, which is not (8,8):(8,1) o 6:3
    with pytest.raises(LayoutError, match="not aligned"):
        composition(Layout((8, 8), (8, 1)), Layout(6, 3))
    with pytest.raises(LayoutError, match="outside"):
        composition(Layout(4, 1), Layout(8, 1), exact=True)
    # pycute floors this to a mode of size 2 instead of 3
    with pytest.raises(LayoutError, match="does not divide 3"):
        logical_product(Layout(2, 2), Layout(3))
    with pytest.raises(LayoutError, match="overlap or interleave"):
        complement(Layout((2, 2), (1, 1)))
    with pytest.raises(LayoutError, match="both signs"):
        left_inverse(Layout((4, 2), (1, -4)))
    with pytest.raises(LayoutError, match="do not divide"):
        logical_divide(Layout(6), Layout(4), exact=True)
    with pytest.raises(LayoutError, match="nesting"):
        Layout((4, 8), 1)
    with pytest.raises(LayoutError, match=">= 1"):
        Layout((4, 0))
    with pytest.raises(LayoutError, match="shift"):
        Swizzle(3, 3, 2)
    with pytest.raises(LayoutError, match="rank"):
        composition(Layout(4), (Layout(2), Layout(2)))

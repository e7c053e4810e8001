"""Per-node caches that speed up verification (`free_vars`, the SMT width, `defined`) give the
same answers as a fresh walk over every subterm, on random terms that share subterms."""

from hypothesis import given
from hypothesis import strategies as st

from argus.ir.expr import Const, Var, bounds, free_vars, ite, subterms
from argus.smt import encode

X, Y = Var("x", -40, 40), Var("y", 0, 9)
DIVISOR = Var("d", -3, 4)
SHIFT = Var("s", -2, 5)

leaves = st.one_of(st.sampled_from([X, Y, DIVISOR, SHIFT]), st.integers(-300, 300).map(Const))


def extend(sub):
    return st.one_of(
        st.builds(lambda a, b: a + b, sub, sub),
        st.builds(lambda a, b: a * b, sub, sub),
        st.builds(lambda a: a // DIVISOR, sub),
        st.builds(lambda a: a % DIVISOR, sub),
        st.builds(lambda a: a << SHIFT, sub),
        st.builds(lambda a, b, c: ite(a < b, c, a), sub, sub, sub),
    )


terms = st.recursive(leaves, extend, max_leaves=12)


def walked_width(exprs) -> int:
    needed = 1
    for e in exprs:
        for sub in subterms(e):
            lo, hi = bounds(sub)
            needed = max(needed, encode.signed_bits(lo), encode.signed_bits(hi))
    return max(8, -(-(needed + 1) // 8) * 8)


@given(st.lists(terms, min_size=1, max_size=3))
def test_cached_free_vars_match_a_walk(exprs):
    for e in exprs:
        walked = frozenset(s for s in subterms(e) if isinstance(s, Var))
        assert free_vars(e) == walked
        assert free_vars(e) == walked


@given(st.lists(terms, min_size=1, max_size=3))
def test_cached_width_matches_a_walk_over_every_subterm(exprs):
    assert encode.width_for(exprs) == walked_width(exprs)
    assert encode.width_for(exprs[::-1]) == walked_width(exprs)


@given(terms)
def test_cached_definedness_equals_a_fresh_computation(e):
    bigger = e.eq(0) | (e < 3)
    cached, cached_bigger = encode.defined(e), encode.defined(bigger)
    encode._DEFINED.clear()
    assert encode.defined(bigger) is cached_bigger
    assert encode.defined(e) is cached

"""The tile IR: op verification messages, kernel-wide checks, and the text form (print → parse →
print identical, also for random layouts and expressions)."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import argus.lang as T
from argus.ir import ops as O
from argus.ir.expr import Var, ite, max_, min_
from argus.ir.text import ParseError, expr_text, parse_expr, parse_kernel, print_kernel
from argus.ir.types import (
    AddressMap,
    GlobalType,
    IRError,
    LdsType,
    RegType,
    SourceLoc,
    ThreadLayout,
    Value,
    thread_vars,
)
from argus.lang import Tensor

LOC = SourceLoc("k.py", 7, 3)
WAVE, LANE, SLOT = thread_vars(1, 4)
LAYOUT = ThreadLayout(1, 4, (LANE // 4, LANE % 4 * 4 + SLOT))
TILE = RegType("f32", (16, 16), LAYOUT)
M = Var("M", 1, 2**31)
X = Value("X", GlobalType("f32", (M, 16)))


def tile(name, t=TILE):
    return Value(name, t)


def test_thread_layout_rejects_foreign_variables():
    with pytest.raises(IRError, match=r"mentions M\[1,2147483648\); a register layout may only"):
        ThreadLayout(1, 4, (LANE + M, SLOT))


def test_address_map_rejects_foreign_variables():
    with pytest.raises(IRError, match="may only use the coordinates c0"):
        AddressMap((4, 4), Var("c0", 0, 4) * 4 + LANE)


@pytest.mark.parametrize("op,message", [
    (O.Binary(tile("r"), "pow", tile("a"), tile("b"), loc=LOC), "unknown function 'pow'"),
    (O.Binary(tile("r"), "add", tile("a"), tile("b", attrs.evolve(TILE, shape=(16, 8))), loc=LOC),
     "X and Y: shapes [16, 16] and [16, 8] differ"),
    (O.Unary(tile("r", attrs.evolve(TILE, dtype="bf16")), "exp2",
             tile("a", attrs.evolve(TILE, dtype="bf16")), loc=LOC), "computes on f32 tiles"),
    (O.GlobalLoad(tile("r"), X, (0,), (0, 1), loc=LOC),
     "origin has 1 coordinates but %X has rank 2"),
    (O.GlobalLoad(tile("r"), X, (0, 0), (1, 1), loc=LOC), "axes [1, 1] must name 2 distinct axes"),
    (O.GlobalLoad(tile("r", attrs.evolve(TILE, dtype="bf16")), X, (0, 0), (0, 1), loc=LOC),
     "tile dtype bf16 differs from %X dtype f32"),
    (O.Mfma(tile("r"), "v_mfma_f32_32x32x8_bf17", tile("a"), tile("b"), tile("c"), loc=LOC),
     "is not a gfx942 MFMA"),
    (O.Mfma(tile("r"), "v_mfma_f32_32x32x8_bf16", tile("a"), tile("b"), tile("c"), loc=LOC),
     "takes A as bf16, got f32"),
    (O.Reduce(tile("r"), "max", tile("a"), 2, (), loc=LOC), "axis 2 is out of range"),
    (O.Reduce(tile("r"), "max", tile("a"), 0, (), loc=LOC), "gives [16], not [16, 16]"),
    (O.SlotSlice(tile("r"), tile("a"), 2, loc=LOC), "slots [2, 6) are not within the 4 slots"),
    (O.Mask(tile("r"), tile("a"), Var("c0", 0, 16) + 1, 0.0, loc=LOC), "must be a condition"),
    (O.GlobalStore(X, (0, 0), (0, 1), tile("a"),
                   (O.TagAssertion(O.role_var("A", "k").eq(0), "k", loc=LOC),), loc=LOC),
     "uses role(s) ['A']; at this op the roles are ['V', 'D']"),
    (O.For(Var("k", 0, 8), 0, 8, 0, (), O.Block((), (O.Yield((), loc=LOC),)), (), loc=LOC),
     "step 0 must be positive"),
    (O.For(Var("k", 0, 8), 0, 8, 1, (tile("a"),), O.Block((tile("b"),), ()), (tile("r"),), loc=LOC),
     "the loop body must end with yield"),
])
def test_op_verify_names_the_op_and_location(op, message):
    with pytest.raises(IRError) as caught:
        op.verify()
    assert str(caught.value).startswith(f"k.py:7:3: {op.mnemonic}: ")
    assert message in str(caught.value)


def kernel_of(*ops, args=(X,), sizes=(M,)):
    return O.Kernel("k", args, sizes, (1,), 1, (), O.Block((), ops), LOC)


def test_kernel_verify_catches_use_before_definition_and_unbound_scalars():
    load = O.GlobalLoad(tile("a"), X, (0, 0), (0, 1), loc=LOC)
    store = O.GlobalStore(X, (0, 0), (0, 1), tile("a"), loc=LOC)
    kernel_of(load, store).verify()
    with pytest.raises(IRError, match="%a is used where it is not defined"):
        kernel_of(store, load).verify()
    with pytest.raises(IRError, match=r"uses \['wg0'\], which are not sizes"):
        kernel_of(O.GlobalLoad(tile("a"), X, (Var("wg0", 0, 9), 0), (0, 1), loc=LOC)).verify()
    with pytest.raises(IRError, match="%a is defined twice"):
        kernel_of(load, load).verify()


def test_kernel_verify_enforces_lds_and_register_budgets():
    big = O.LdsAlloc(Value("l", LdsType("f32", 20000)), loc=LOC)
    with pytest.raises(IRError, match="allocates 80000 bytes of LDS; a gfx942 workgroup has 65536"):
        kernel_of(big).verify()
    fat = RegType("f32", (16, 16), ThreadLayout(1, 600, (Var("slot", 0, 600) % 16,
                                                         Var("slot", 0, 600) // 40)))
    with pytest.raises(IRError, match="needs 600 VGPRs per lane"):
        kernel_of(O.Full(Value("f", fat), 0.0, loc=LOC)).verify()


# ---------------------------------------------------------------------------------------------
# text form


def scalar_kernel():
    spec = T.copy_layout((16, 16), 1, 4)

    @T.kernel(waves=1)
    def scatter(X: Tensor("f32", "N", 16), Y: Tensor("f32", 16, 16), rows: T.Scalar(0, 64)):
        T.assume((X.shape[0] % 16).eq(0))
        T.grid(X.shape[0] // 16, 2)
        T.hint("prefer buffer loads")
        p = T.program_id(0)
        x = T.tag(X.load((p * 16, 0), spec), lambda i, j: {"row": p * 16 + i, "col": j})
        with T.when(rows > p, x=x) as branch:
            branch.x = T.rcp(-branch.x) / 3.0
        Y.atomic_add((0, 0), branch.x)
        T.tag_assert(lambda V, D: V.col.eq(0) | V.row.ne(rows), "edge")

    return scatter.ir


def test_scalar_arguments_atomics_and_branches_round_trip():
    kernel = scalar_kernel()
    text = print_kernel(kernel)
    assert "arg rows in [0, 64)" in text and "hint 'prefer buffer loads'" in text
    assert "global.atomic_add" in text and "} else {" in text
    again = parse_kernel(text)
    assert again == kernel and print_kernel(again) == text


def _exprs(depth):
    leaves = st.sampled_from([WAVE, LANE, SLOT]) | st.integers(-9, 40)
    if depth == 0:
        return leaves
    sub = _exprs(depth - 1)
    binary = st.tuples(sub, sub, st.sampled_from(["+", "-", "*", "//", "%", "^", "&", "|",
                                                   "<<", ">>", "min", "max", "ite"]))
    return leaves | binary.map(_combine)


def _combine(parts):
    a, b, op = parts
    a = LANE + a if isinstance(a, int) else a  # keep one operand symbolic
    divisor = abs(b) % 7 + 1 if isinstance(b, int) else 3
    builders = {
        "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "^": lambda: a ^ b,
        "&": lambda: a & b, "|": lambda: a | b, "//": lambda: a // divisor,
        "%": lambda: a % divisor, "<<": lambda: a << 2, ">>": lambda: a >> 1,
        "min": lambda: min_(a, b), "max": lambda: max_(a, b),
        "ite": lambda: ite(LANE < 32, a, b),
    }
    return builders[op]()


def _conditions(depth):
    comparisons = st.tuples(_exprs(depth), _exprs(depth), st.sampled_from(["<", "<=", "==", "!="]))
    leaves = comparisons.map(_compare)
    if depth == 0:
        return leaves
    sub = _conditions(depth - 1)
    return leaves | st.tuples(sub, sub, st.sampled_from(["&", "|", "~"])).map(_connect)


def _compare(parts):
    a, b, op = parts
    a = LANE + a if isinstance(a, int) else a
    return {"<": lambda: a < b, "<=": lambda: a <= b, "==": lambda: a.eq(b),
            "!=": lambda: a.ne(b)}[op]()


def _connect(parts):
    p, q, op = parts
    return {"&": lambda: p & q, "|": lambda: p | q, "~": lambda: ~p}[op]()


@given(_exprs(3) | _conditions(2), _exprs(2))
def test_random_expressions_print_and_parse_back(first, second):
    scope = {"wave": WAVE, "lane": LANE, "slot": SLOT}
    for e in (first, second):
        if isinstance(e, int):
            continue
        assert parse_expr(expr_text(e), scope) is e
        assert parse_expr(expr_text(ite(LANE < 8, e, e)), scope) is ite(LANE < 8, e, e)


@given(st.sampled_from([64, 128]), st.sampled_from([64, 128]), st.sampled_from([32, 64]),
       st.booleans())
def test_gemm_configurations_round_trip(block_m, block_n, block_k, swizzle):
    from argus.kernels.gemm import gemm

    kernel = gemm.trace(block_m=block_m, block_n=block_n, block_k=block_k, swizzle=swizzle)
    text = print_kernel(kernel)
    assert print_kernel(parse_kernel(text)) == text


def _library():
    from argus.kernels import library

    return library()


@pytest.mark.parametrize("name", sorted(_library()))
def test_every_library_kernel_round_trips(name):
    kernel = _library()[name].kernel.ir
    text = print_kernel(kernel)
    again = parse_kernel(text)
    assert again == kernel and print_kernel(again) == text


def test_declared_facts_and_else_bodies_round_trip():
    @T.kernel(waves=1)
    def pick(X: Tensor("f32", "N", 16), ids: Tensor("i32", "P"), Y: Tensor("f32", 16, 16),
             top: T.Scalar(0, 64)):
        T.distinct(ids, 1, X.shape[0] - top)
        T.grid(2)
        x = X.load((0, 0), T.copy_layout((16, 16), 1, 4), gather=T.Gather(ids, 0), guard=True)
        with T.when(T.program_id(0).eq(0), x=x) as branch:
            branch.x = branch.x * 2.0
        with branch.otherwise():
            branch.x = -branch.x
        Y.atomic_add((0, 0), branch.x)

    text = print_kernel(pick.ir)
    assert "distinct tensor=%ids, lo=1, hi=N - top" in text
    assert "unary fn='neg'" in text.split("} else {")[1]
    again = parse_kernel(text)
    assert again == pick.ir and print_kernel(again) == text


def test_parse_errors_name_the_line():
    text = print_kernel(scalar_kernel())
    broken = text.replace("global.atomic_add", "global.atomic_mul")
    with pytest.raises(ParseError, match=r"IR line \d+: unknown op 'global.atomic_mul'"):
        parse_kernel(broken)
    with pytest.raises(ParseError, match="unknown name 'Q'"):
        parse_expr("Q + 1", {"lane": LANE})
    with pytest.raises(ParseError, match="a '}' is missing"):
        parse_kernel(text.rstrip().rstrip("}"))
    with pytest.raises(ParseError, match="must start with 'kernel NAME @LOC'"):
        parse_kernel("module x\n")


def test_locations_with_spaces_and_at_signs_round_trip():
    from argus.kernels.attention import attention_fwd

    text = print_kernel(attention_fwd.trace(causal=True))
    moved = text.replace("argus/kernels/", "/home/me/my kernels @v2/")
    again = parse_kernel(moved)
    assert print_kernel(again) == moved
    assert all(op.loc.file == "/home/me/my kernels @v2/attention.py" for op in again.ops())


def test_strip_tags_keeps_the_computation_bit_for_bit():
    import ml_dtypes
    import numpy as np

    from argus.absint.concrete import run
    from argus.ir.passes import strip_tags
    from argus.kernels.attention import attention_fwd

    kernel = attention_fwd.trace(causal=True)
    bare = strip_tags(kernel)
    assert not any(isinstance(op, O.TagDef | O.TagTile) for op in bare.ops())
    assert not any(getattr(op, "asserts", ()) for op in bare.ops())
    assert sum(1 for _ in bare.ops()) < sum(1 for _ in kernel.ops())
    assert parse_kernel(print_kernel(bare)) == bare
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 128, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
    inputs = {"Q": q, "K": k, "V": v, "O": np.zeros_like(q)}
    tagged, untagged = run(kernel, inputs), run(bare, inputs)
    assert tagged.ok and untagged.ok
    np.testing.assert_array_equal(tagged.outputs["O"].view(np.uint16),
                                  untagged.outputs["O"].view(np.uint16))


def test_resources_of_the_default_gemm():
    from argus.ir.ops import resources
    from argus.kernels.gemm import gemm

    used = resources(gemm.ir)
    # two double-buffered 64x32 bf16 tiles; 4 k-steps in the loop body and 4 after it
    assert used["lds_bytes"] == 2 * 2 * 64 * 32 * 2
    assert used["mfma"] == 8 and used["barrier"] == 2 and used["waves"] == 4
    # the 32x32 f32 accumulator alone is 16 VGPRs; the whole peak stays far under 512
    assert 16 < used["vgprs"] < 128


def test_generic_form_rejects_malformed_fields_with_the_line_and_op():
    text = print_kernel(scalar_kernel())
    cases = {
        "axes=(0, 1), value": ("axes=(0, 'a'), value", r"field axes: .* is not a tuple\[int"),
        "axes=(0, 1), value=": ("axes=5, value=", r"field axes: '5' is not a tuple\[int"),
        "fn='rcp'": ("fn=rcp", r"unary: field fn: cannot read 'rcp'"),
        "x=%v3 :": ("x=%v3, y=%v3 :", r"unary: no field\(s\) \['y'\]"),
        "full value=0.3333333333333333": ("full value=three",
                                          r"full: field value: cannot read 'three'"),
        "origin=[0, 0]": ("origin=(0, 0)", r"field origin: expected \[\.\.\.\]"),
        "%v5 = full": ("%v5, %v9 = full", r"full: 2 result\(s\) and 1 type\(s\)"),
    }
    for before, (after, message) in cases.items():
        assert before in text, before
        with pytest.raises(ParseError, match=r"IR line \d+: " + ".*" + message):
            parse_kernel(text.replace(before, after, 1))

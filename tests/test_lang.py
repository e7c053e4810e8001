"""The tile DSL: tracing, layout helpers (properties by enumeration), and misuse errors that
name the author's file and line."""

from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from markers import expect_misuse_at, line_marked

import argus.lang as T
from argus.ir import ops as O
from argus.ir.expr import evaluate
from argus.ir.types import LANES
from argus.isa_cdna3.mfma import MFMA, mfma
from argus.lang import DSLError, Tensor

HERE = pathlib.Path(__file__)


def marked(tag: str) -> int:
    return line_marked(HERE, tag)


def expect_misuse(kernel_def, tag: str, *fragments: str):
    expect_misuse_at(HERE, kernel_def, tag, *fragments)


# ---------------------------------------------------------------------------------------------
# layout helpers


DENSE_SINGLE_BLOCK = sorted(n for n, i in MFMA.items()
                            if i.blocks == 1 and not i.sparse and i.c_type != "f64")


@pytest.mark.parametrize("instr", DENSE_SINGLE_BLOCK)
@pytest.mark.parametrize("grid", [(1, 1), (2, 2), (4, 1)])
def test_mfma_layouts_place_the_catalogue_fragment_per_wave(instr, grid):
    info = mfma(instr)
    for operand in "abc":
        spec = T.mfma_layout(instr, operand, grid)
        table = spec.layout.table()
        lanes = np.arange(LANES)[:, None]
        for wave in range(grid[0] * grid[1]):
            slots = np.arange(spec.layout.slots)[None, :]
            coord = {"a": info.a_coord, "b": info.b_coord, "c": info.c_coord}[operand](lanes,
                                                                                      slots)
            row, col = wave // grid[1], wave % grid[1]
            if operand == "a":
                expected = (row * info.m + coord[1], coord[2])
            elif operand == "b":
                expected = (col * info.n + coord[2], coord[1])
            else:
                expected = (row * info.m + coord[1], col * info.n + coord[2])
            for axis in range(2):
                got = table[axis][wave]
                np.testing.assert_array_equal(got, np.broadcast_to(expected[axis], got.shape))


@pytest.mark.parametrize("instr", ["v_mfma_f32_16x16x32_fp8_fp8", "v_mfma_f32_32x32x16_fp8_fp8",
                                   "v_mfma_f32_16x16x16_bf16"])
def test_packed_mfma_fragments_hold_each_lanes_steps_contiguously(instr):
    # pack=2: a lane's 2 * k_per_lane k's are one run (one wide load); step p's registers
    # (slots p * k_per_lane ..) hold, for A and B alike, the k's its MFMA lane pairs, and the
    # two steps cover the 2 * k columns once
    info = mfma(instr)
    kpl = info.k_per_lane
    a, b = (T.mfma_layout(instr, op, (1, 2), pack=2) for op in "ab")
    assert a.shape == (info.m, 2 * info.k) and b.shape == (2 * info.n, 2 * info.k)
    ka, kb = a.layout.table()[1], b.layout.table()[1]          # [wave, lane, slot]
    assert (np.diff(ka, axis=2) == 1).all() and (ka[..., 0] % (2 * kpl) == 0).all()
    lanes = np.arange(LANES)
    for p in range(2):
        # an MFMA pairs A's and B's registers of the same lane group (the catalogue's k of a
        # lane and slot is the same for A and B), so both must hold one k there
        step_a, step_b = ka[0, :, p * kpl:(p + 1) * kpl], kb[0, :, p * kpl:(p + 1) * kpl]
        first_a = info.a_coord(lanes, 0)[2]
        first_b = info.b_coord(lanes, 0)[1]
        same = np.asarray(first_a) == np.asarray(first_b)
        assert (step_a[same] == step_b[same]).all()
    rows = a.layout.table()[0][0]
    for row in range(info.m):
        held = np.sort(ka[0][rows == row])
        assert sorted(set(held.tolist())) == list(range(2 * info.k))
    with pytest.raises(DSLError, match="only the A and B operands"):
        T.mfma_layout(instr, "c", pack=2)


@given(st.sampled_from([(8, 32), (16, 64), (32, 32), (64, 32), (128, 64)]),
       st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4, 8]))
def test_copy_layout_is_a_bijection_with_contiguous_vectors(shape, waves, vector):
    rows, cols = shape
    if cols % vector or (rows * cols) % (waves * LANES * vector):
        with pytest.raises(DSLError, match="cannot be split"):
            T.copy_layout(shape, waves, vector)
        return
    spec = T.copy_layout(shape, waves, vector)
    r, c = spec.layout.table()
    counts = np.zeros(shape, int)
    np.add.at(counts, (r, c), 1)
    assert (counts == 1).all()
    # each run of `vector` slots is one contiguous row segment
    flat = (r * cols + c).reshape(waves, LANES, -1, vector)
    assert (np.diff(flat, axis=-1) == 1).all()


@given(st.sampled_from([(16, 32), (32, 32), (64, 64), (8, 128)]), st.integers(0, 3),
       st.integers(0, 3), st.integers(0, 4), st.integers(1, 3))
def test_swizzled_lds_layout_is_a_permutation_of_each_stage(shape, bits, base, extra, stages):
    shift = bits + extra
    full = (stages,) + shape
    inner = shape[0] * shape[1]
    if (1 << (bits + base + shift)) > inner:
        with pytest.raises(DSLError, match="permutes"):
            T.lds_layout(full, (bits, base, shift))
        return
    addr = T.lds_layout(full, (bits, base, shift))
    grids = np.meshgrid(*(np.arange(n) for n in full), indexing="ij")
    offsets = np.asarray(evaluate(addr.offset, {f"c{a}": g for a, g in enumerate(grids)}))
    assert sorted(offsets.ravel()) == list(range(stages * inner))
    # stage s occupies its own contiguous block, and the low `base` bits are untouched
    assert (offsets // inner == grids[0]).all()
    plain = grids[1] * shape[1] + grids[2]
    assert ((offsets % (1 << base)) == (plain % (1 << base))).all()


def test_reduced_layout_drops_the_slot_when_it_can():
    spec = T.mfma_layout("v_mfma_f32_32x32x8_bf16", "c", (1, 4))
    columns = T.reduced(spec, 0)
    assert columns.shape == (128,) and columns.layout.slots == 1
    rows = T.reduced(spec, 1)
    assert rows.shape == (32,) and rows.layout.slots == 16


# ---------------------------------------------------------------------------------------------
# tracing


def test_trace_records_symbolic_sizes_loops_and_author_lines():
    @T.kernel(waves=1)
    def scale(X: Tensor("f32", "N", 64), Y: Tensor("f32", "N", 64), *, factor: float = 2.0):
        N = X.shape[0]
        T.assume((N % 16).eq(0))
        T.grid(1)
        spec = T.copy_layout((16, 64), 1, 4)
        for i in T.range(N // 16, stages=2, unroll=2, hints=("interleave",)):
            Y.store((i * 16, 0), X.load((i * 16, 0), spec) * factor)  # loop-body

    ir = scale.trace(factor=3.0)
    loop = next(op for op in ir.ops() if isinstance(op, O.For))
    assert str(loop.stop) == "N // 16" and loop.stages == 2 and loop.unroll == 2
    assert loop.hints == ("interleave",)
    store = next(op for op in ir.ops() if isinstance(op, O.GlobalStore))
    assert store.loc.line == marked("loop-body") and store.loc.file == "tests/test_lang.py"
    full = next(op for op in ir.ops() if isinstance(op, O.Full))
    assert full.value == 3.0
    assert scale.trace(factor=3.0) is ir, "traces are cached per parameter choice"
    assert [v.name for v in ir.sizes] == ["N"]


def test_kernel_params_must_exist():
    with pytest.raises(DSLError, match=r"has no parameter\(s\) \['blockm'\]"):
        from argus.kernels.gemm import gemm

        gemm.trace(blockm=32)


# ---------------------------------------------------------------------------------------------
# misuse, each pointing at the offending line


def test_shape_mismatch_names_both_shapes():
    @T.kernel(waves=1)
    def bad(X: Tensor("f32", 16, 64), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        x = X.load((0, 0), T.copy_layout((16, 64), 1, 4))
        y = Y.load((0, 0), T.copy_layout((16, 16), 1, 4))
        Y.store((0, 0), x + y)  # shape-mismatch

    expect_misuse(bad, "shape-mismatch", "shape mismatch in add: [16, 64] and [16, 16]")


def test_layout_that_does_not_cover_the_tile():
    from argus.ir.types import ThreadLayout, thread_vars

    wave, lane, slot = thread_vars(1, 4)
    half = T.TileSpec((16, 32), ThreadLayout(1, 4, (lane // 4, lane % 4 * 4 + slot)))

    @T.kernel(waves=1)
    def bad(X: Tensor("f32", 16, 32)):
        T.grid(1)
        X.load((0, 0), half)  # not-covered

    expect_misuse(bad, "not-covered", "does not cover the tile: element (0, 16)")


def test_layout_outside_the_tile():
    @T.kernel(waves=1)
    def bad(X: Tensor("f32", 8, 8)):
        T.grid(1)
        X.load((0, 0), T.TileSpec((8, 8), T.copy_layout((16, 16), 1, 4).layout))  # outside

    expect_misuse(bad, "outside", "outside the tile shape [8, 8]")


def test_unknown_mfma_suggests_the_right_spelling():
    @T.kernel(waves=4)
    def bad(X: Tensor("bf16", 64, 8)):
        T.grid(1)
        T.mfma_layout("v_mfma_f32_32x32x8bf16_1k", "a", (2, 2))  # unknown-mfma

    expect_misuse(bad, "unknown-mfma", "is not a gfx942 MFMA",
                  "did you mean v_mfma_f32_32x32x8_bf16")


def test_mfma_operand_type_mismatch():
    a = T.mfma_layout("v_mfma_f32_32x32x8_bf16", "a")
    b = T.mfma_layout("v_mfma_f32_32x32x8_bf16", "b")
    c = T.mfma_layout("v_mfma_f32_32x32x8_bf16", "c")

    @T.kernel(waves=1)
    def bad(A: Tensor("f16", 32, 8), B: Tensor("bf16", 32, 8)):
        T.grid(1)
        T.mfma("v_mfma_f32_32x32x8_bf16", A.load((0, 0), a), B.load((0, 0), b),  # mfma-types
               T.zeros(c))

    expect_misuse(bad, "mfma-types", "takes A as bf16, got f16")


def test_lds_over_64_kib():
    @T.kernel(waves=4)
    def bad(X: Tensor("f32", 64, 64)):
        T.grid(1)
        T.lds((2, 64, 64), "f32")
        T.lds((4, 64, 64), "f32")  # lds-budget

    expect_misuse(bad, "lds-budget", "LDS use reaches 98304 bytes", "64 KiB")


def test_register_tile_over_the_vgpr_budget():
    @T.kernel(waves=1)
    def bad(X: Tensor("f32", 256, 256)):
        T.grid(1)
        X.load((0, 0), T.copy_layout((256, 256), 1, 4))  # vgpr-budget

    expect_misuse(bad, "vgpr-budget", "needs 1024 VGPRs per lane; gfx942 has 512")


def test_too_many_live_register_tiles():
    spec = T.copy_layout((64, 256), 1, 4)  # 256 f32 slots = 256 VGPRs per lane

    @T.kernel(waves=1)
    def bad(X: Tensor("f32", 64, 256), Y: Tensor("f32", 64, 256)):
        T.grid(1)
        first = X.load((0, 0), spec)
        second = X.load((0, 0), spec)
        Y.store((0, 0), first + second)  # pressure

    expect_misuse(bad, "pressure", "about 768 VGPRs per lane are live here")


def test_python_equality_in_an_assertion_is_caught():
    @T.kernel(waves=1)
    def bad(X: Tensor("f32", 16, 16), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        Y.store((0, 0), X.load((0, 0), T.copy_layout((16, 16), 1, 4)))
        T.tag_assert(lambda V, D: V.row == D.row, "rows")  # python-eq

    expect_misuse(bad, "python-eq", "write equations with .eq()")


def test_assertion_on_a_tag_the_operand_lacks():
    @T.kernel(waves=1)
    def bad(X: Tensor("f32", 16, 16), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        T.tag(X, lambda r, c: {"row": r, "col": c})
        T.tag(Y, lambda r, c: {"row": r, "col": c})
        Y.store((0, 0), X.load((0, 0), T.copy_layout((16, 16), 1, 4)))
        T.tag_assert(lambda V, D: V.rows.eq(D.row), "rows")  # unknown-tag

    expect_misuse(bad, "unknown-tag", "V.rows: V (%v", "carries col, row here")


def test_assertion_arity_must_match_the_roles():
    @T.kernel(waves=1)
    def bad(X: Tensor("f32", 16, 16), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        Y.store((0, 0), X.load((0, 0), T.copy_layout((16, 16), 1, 4)))
        T.tag_assert(lambda A, B, C: A.k.eq(B.k), "k")  # arity

    expect_misuse(bad, "arity", "has the roles V, D")


def test_loop_carried_value_must_keep_its_type():
    spec = T.copy_layout((16, 16), 1, 4)

    @T.kernel(waves=1)
    def bad(X: Tensor("f32", 16, 16)):
        T.grid(1)
        loop = T.range(4, acc=T.zeros(spec))
        for _ in loop:
            loop.acc = loop.acc.to("bf16")  # carried-type

    expect_misuse(bad, "carried-type", "changes type", "keeps its layout and dtype")


def test_value_escaping_its_loop_points_at_the_use():
    spec = T.copy_layout((16, 16), 1, 4)

    @T.kernel(waves=1)
    def bad(X: Tensor("f32", 16, 16), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        for _ in T.range(2):
            x = X.load((0, 0), spec)
        Y.store((0, 0), x)  # escaped

    expect_misuse(bad, "escaped", "visible only there")


def test_missing_grid_points_at_the_kernel():
    @T.kernel(waves=1)
    def bad(X: Tensor("f32", 16, 16)):  # no-grid
        X.load((0, 0), T.copy_layout((16, 16), 1, 4))

    expect_misuse(bad, "no-grid", "never calls grid(...)")


def test_dsl_call_outside_a_kernel():
    with pytest.raises(DSLError, match="only work inside a function traced by @kernel"):
        T.barrier()


def test_wave_count_must_match_the_kernel():
    @T.kernel(waves=2)
    def bad(X: Tensor("f32", 16, 64)):
        T.grid(1)
        X.load((0, 0), T.copy_layout((16, 64), 4, 4))  # waves

    expect_misuse(bad, "waves", "spans 4 waves but kernel bad runs 2")


def test_mask_fill_is_float_and_predicate_a_condition():
    @T.kernel(waves=1)
    def bad(X: Tensor("f32", 16, 16)):
        T.grid(1)
        T.mask(X.load((0, 0), T.copy_layout((16, 16), 1, 4)), lambda i, j: i + j,
               -math.inf)  # mask-cond

    with pytest.raises(DSLError) as caught:
        bad.trace()
    assert "must be a condition" in str(caught.value)
    assert caught.value.loc.line in (marked("mask-cond") - 1, marked("mask-cond"))


def test_sizes_with_underscores_are_not_mistaken_for_tag_roles():
    spec = T.copy_layout((16, 16), 1, 4)

    @T.kernel(waves=1)
    def rows(X: Tensor("f32", "seq_len", 16), Y: Tensor("f32", "seq_len", 16)):
        seq_len = X.shape[0]
        T.grid(1)
        T.tag(Y, lambda r, c: {"row": r})
        T.tag(X, lambda r, c: {"row": r})
        Y.store((0, 0), X.load((0, 0), spec))
        T.tag_assert(lambda V, D: V.row.eq(D.row) & (V.row < seq_len), "rows inside")

    from argus.absint.concrete import run
    from argus.ir.text import parse_kernel, print_kernel

    kernel = rows.ir
    assert parse_kernel(print_kernel(kernel)) == kernel
    result = run(kernel, {"X": np.ones((16, 16), np.float32), "Y": np.zeros((16, 16), np.float32)})
    assert result.ok, result.report()


def test_argus_debug_2_prints_each_traced_kernel(monkeypatch, capsys):
    monkeypatch.setenv("ARGUS_DEBUG", "2")

    @T.kernel(waves=1)
    def copy(X: Tensor("f32", 16, 16), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        Y.store((0, 0), X.load((0, 0), T.copy_layout((16, 16), 1, 4)))

    copy.trace()
    err = capsys.readouterr().err
    assert err.startswith("kernel copy @tests/test_lang.py:")
    assert "global.store tensor=%Y, origin=[0, 0]" in err


def test_tidy_drops_loop_leftovers_but_keeps_the_authors_spelling():
    from argus.ir.expr import Var
    from argus.lang.trace import tidy

    n, k = Var("N", 1, 2**31), Var("k", 0, 64)
    assert tidy(n * 1 + 0) is n
    assert tidy(0 * k + (n // 16 + 0)) is n // 16
    assert str(tidy((k + 0) * 32 + 0 * n)) == "k * 32"
    assert str(tidy(n // 16)) == "N // 16"


def test_loops_carry_lists_and_dicts_of_tiles():
    from argus.absint.concrete import run

    spec = T.copy_layout((16, 16), 1, 4)

    @T.kernel(waves=1)
    def sums(X: Tensor("f32", "P", 16, 16), Y: Tensor("f32", 2, 16, 16)):
        T.grid(1)
        loop = T.range(X.shape[0], name="p", acc={"even": T.zeros(spec), "odd": [T.zeros(spec)]})
        for p in loop:
            x = X.load((p, 0, 0), spec)
            loop.acc = {"even": loop.acc["even"] + x, "odd": [loop.acc["odd"][0] + x * x]}
        Y.store((0, 0, 0), loop.acc["even"])
        Y.store((1, 0, 0), loop.acc["odd"][0])

    ir = sums.ir
    loop = next(op for op in ir.ops() if isinstance(op, O.For))
    assert [a.name.rsplit(".", 1)[0] for a in loop.body.args] == ["acc_even", "acc_odd_0"]
    data = np.random.default_rng(0).standard_normal((3, 16, 16)).astype(np.float32)
    result = run(ir, {"X": data, "Y": np.zeros((2, 16, 16), np.float32)})
    np.testing.assert_allclose(result.outputs["Y"][0], data.sum(0), rtol=1e-5)
    np.testing.assert_allclose(result.outputs["Y"][1], (data * data).sum(0), rtol=1e-5)


def test_carried_structure_must_not_change():
    spec = T.copy_layout((16, 16), 1, 4)

    @T.kernel(waves=1)
    def bad(X: Tensor("f32", 16, 16)):
        T.grid(1)
        loop = T.range(2, acc=[T.zeros(spec), T.zeros(spec)])
        for _ in loop:
            loop.acc = [loop.acc[0]]  # structure

    expect_misuse(bad, "structure", "changes shape from ['0', '1'] to ['0']")

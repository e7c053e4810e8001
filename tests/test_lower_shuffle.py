"""T.shuffle lowering (issues 13, 15): a lane map with a DPP control of the same lane table
becomes one DPP instruction (the combine fused: v_max_f32_dpp, v_add_f32_dpp), one with a
ds_swizzle_b32 pattern a swizzle, any other ds_bpermute_b32. Every map kind of
isa_cdna3/lanemaps.py, with and without combine, runs on the strict emulator bit for bit as the
interpreter computes it; the form chosen has the lane table asked for; and every `s_nop` the
hazard pass puts before a DPP instruction is needed."""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import argus
import argus.lang as T
from argus.absint.concrete import run
from argus.asm import assemble
from argus.asm.launch import emulate
from argus.asm.lower.lanes import shuffle_form
from argus.isa_cdna3.emu import EmulatorError
from argus.isa_cdna3.lanemaps import LANE_MAPS, lane_table
from argus.lang import Tensor

sys.path.insert(0, str(Path(__file__).parent / "bugs"))
import lane_programs as P  # noqa: E402
from test_lower_waits import inserted, silent_weakenings  # noqa: E402

GFX942_MAPS = [name for name, found in LANE_MAPS.items() if found.gfx942]
# one parameter set per map, and the instruction the backend should pick for it
CASES = [("dpp.quad_perm", (3, 0, 2, 1), "v_mov_b32_dpp"),
         ("dpp.row_shr", (3,), "v_mov_b32_dpp"),
         ("dpp.row_shl", (15,), "v_mov_b32_dpp"),
         ("dpp.row_ror", (5,), "v_mov_b32_dpp"),
         ("dpp.row_mirror", (), "v_mov_b32_dpp"),
         ("dpp.row_half_mirror", (), "v_mov_b32_dpp"),
         ("dpp.row_bcast15", (), "v_mov_b32_dpp"),
         ("dpp.row_bcast31", (), "v_mov_b32_dpp"),
         ("dpp.row_newbcast", (6,), "v_mov_b32_dpp"),
         ("dpp.wave_shl", (), "v_mov_b32_dpp"),
         ("dpp.wave_shr", (), "v_mov_b32_dpp"),
         ("dpp.wave_rol", (), "v_mov_b32_dpp"),
         ("dpp.wave_ror", (), "v_mov_b32_dpp"),
         ("swizzle.bitmask", (26, 5, 17), "ds_swizzle_b32"),
         ("swizzle.quad_perm", (1, 1, 3, 0), "v_mov_b32_dpp"),       # a DPP quad_perm as well
         ("bpermute.xor", (15,), "v_mov_b32_dpp"),                   # row_mirror
         ("bpermute.xor", (12,), "ds_swizzle_b32"),
         ("bpermute.xor", (33,), "ds_bpermute_b32"),
         ("bpermute.rotate", (1,), "v_mov_b32_dpp"),                 # wave_rol
         ("bpermute.rotate", (7,), "ds_bpermute_b32"),
         ("bpermute.broadcast", (40,), "ds_bpermute_b32")]
FUSED = {"max": "v_max_f32_dpp", "sum": "v_add_f32_dpp"}


def test_cases_cover_every_gfx942_map():
    assert {name for name, _, _ in CASES} == set(GFX942_MAPS)


@cache
def shuffle_kernel(lanes: str, params: tuple[int, ...], combine: str):
    @T.kernel(waves=1)
    def shuffled(X: Tensor("f32", "N", 32), Y: Tensor("f32", "N", 32)):
        N = X.shape[0]
        T.assume((N % 2).eq(0))
        T.grid(N // 2)
        x = X.load((T.program_id(0) * 2, 0), P.rows_by_lane())
        Y.store((T.program_id(0) * 2, 0), T.shuffle(x, lanes, *params, combine=combine))
    return shuffled


#: NaN among them: v_max_f32 returns the number beside a NaN, and so must the interpreter
VALUES = st.one_of(st.integers(-2**20, 2**20).map(lambda i: i / 16), st.just(float("nan")))


@given(st.sampled_from(CASES), st.sampled_from(["", "max", "sum"]),
       st.lists(VALUES, min_size=128, max_size=128))
def test_every_map_runs_as_the_interpreter_says(case, combine, values):
    lanes, params, opcode = case
    kernel = shuffle_kernel(lanes, params, combine)
    compiled = argus.compile(kernel)
    emitted = [line.split()[0] for line in compiled.text.splitlines() if line.startswith(" ")]
    expected = FUSED[combine] if combine and opcode == "v_mov_b32_dpp" else opcode
    assert expected in emitted, f"{lanes} {params} {combine}: {expected} not emitted"
    if opcode != "ds_bpermute_b32":
        assert "ds_bpermute_b32" not in emitted
    x = np.array(values, np.float32).reshape(4, 32)
    y = np.zeros_like(x)
    compiled.run(X=x, Y=y, check="strict")
    interpreted = run(kernel.ir, {"X": x, "Y": np.zeros_like(x)}).outputs["Y"]
    nan = np.isnan(y)
    assert np.array_equal(nan, np.isnan(interpreted))
    assert np.array_equal(y[~nan].view(np.uint32), interpreted[~nan].view(np.uint32))


@given(st.sampled_from(GFX942_MAPS), st.data())
def test_the_chosen_form_has_the_lane_table_asked_for(name, data):
    params = tuple(data.draw(st.integers(lo, hi - 1)) for _, lo, hi in LANE_MAPS[name].params)
    form, form_params = shuffle_form(name, params)
    assert np.array_equal(lane_table(form, form_params), lane_table(name, params))
    if name.startswith(("dpp.", "swizzle.")):
        assert not form.startswith("bpermute.")


def test_every_nop_before_a_dpp_instruction_is_needed():
    """Weakening any `s_nop` the hazard pass inserted in the butterfly row maximum (three DPP
    steps, each reading what the step before wrote) by one wait state makes the strict emulator
    report the VALU -> DPP hazard."""
    compiled = argus.compile(P.row_max())
    lowered = compiled.lowered
    sites = [(items, i) for items, i in inserted(lowered.items) if items[i].opcode == "s_nop"]
    assert sum("_dpp" in items[i].note for items, i in sites) >= 3
    x = np.random.default_rng(3).standard_normal((2, 32)).astype(np.float32)

    def unnoticed() -> bool:
        code = assemble(lowered.render())
        try:
            emulate(code, grid=1, block=64, args=[x, np.zeros_like(x), 2], check="strict")
        except EmulatorError as error:
            assert "valu-to-dpp" in str(error)
            return False
        return True

    assert unnoticed()
    silent = silent_weakenings(sites, unnoticed)
    assert not silent, "nops that can be weakened without effect:\n" + "\n".join(silent)


@T.kernel(waves=1)
def row_softmax(X: Tensor("f32", 2, 32), Y: Tensor("f32", 2, 32)):
    """Softmax (base 2) of each row of 32, one row per lane half: the reductions exchange
    lane ^ 1, 2, 4, 8, 16."""
    T.grid(1)
    spec = P.rows_by_lane()
    row = T.reduced(spec, 1)
    x = X.load((0, 0), spec)
    e = T.exp2(x - T.broadcast(T.reduce(x, "max", 1, row), 1, spec))
    Y.store((0, 0), e * T.broadcast(T.rcp(T.reduce(e, "sum", 1, row)), 1, spec))


def test_reductions_exchange_through_dpp_and_swizzles():
    compiled = argus.compile(row_softmax)
    emitted = [line.split()[0] for line in compiled.text.splitlines() if line.startswith(" ")]
    # lane ^ 1, ^ 2 (quad_perm), ^ 7 (row_half_mirror: after ^ 1 and ^ 2 it combines the
    # quads ^ 4 would) and ^ 8 (row_ror:8) by DPP, ^ 16 by a swizzle
    assert [emitted.count(op) for op in ("v_max_f32_dpp", "v_add_f32_dpp", "ds_swizzle_b32",
                                         "ds_bpermute_b32")] == [4, 4, 2, 0]
    x = np.random.default_rng(4).standard_normal((2, 32)).astype(np.float32) * 4
    y = np.zeros_like(x)
    compiled.run(x, y, check="strict")
    e = np.exp2(x - x.max(axis=1, keepdims=True))
    assert np.allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def _mfma_c_rows() -> tuple[T.TileSpec, T.TileSpec, T.TileSpec]:
    """A 16x16 MFMA accumulator's layout (row 4 * (lane // 16) + slot, column lane % 16), its
    rows reduced (4 a lane, replicated along 16 lanes), and those rows one a lane (lane l
    keeps slot l % 4) with a column of one appended."""
    wave, lane, slot = T.thread_vars(1, 4)
    tile = T.TileSpec((16, 16), T.ThreadLayout(1, 4, (4 * (lane // 16) + slot, lane % 16)))
    _, lane, _ = T.thread_vars(1, 1)
    one = T.TileSpec((16, 1), T.ThreadLayout(1, 1, (4 * (lane // 16) + lane % 4, 0)))
    return tile, T.reduced(tile, 1), one


@T.kernel(waves=1)
def row_sums_one_a_lane(X: Tensor("f32", 16, 16), Y: Tensor("f32", 16, 1)):
    """Each row's sum over an MFMA accumulator's columns, relaid one element a lane before
    it is scaled and stored: one register a lane, one store."""
    T.grid(1)
    tile, rows, one = _mfma_c_rows()
    total = T.reduce(X.load((0, 0), tile), "sum", 1, rows)
    Y.store((0, 0), T.broadcast(total, 1, one) * 0.5, axes=(0, 1))


def test_a_reduced_tile_relays_one_element_a_lane():
    """A broadcast whose result register takes, lane by lane, a different slot of the reduced
    tile lowers to a v_cndmask_b32 tree on the lane's bits (it was refused: 'needs a value
    another lane holds'); proved, and right bit for bit in the strict emulator."""
    report = argus.verify(row_sums_one_a_lane)
    assert report.ok and report.count("proved") > 0, str(report)
    compiled = argus.compile(row_sums_one_a_lane)
    emitted = [line.split()[0] for line in compiled.text.splitlines() if line.startswith(" ")]
    assert emitted.count("v_cndmask_b32_e64") == 3       # slots 0-3 on lane bits 0 and 1
    assert emitted.count("buffer_store_dword") == 1
    x = np.random.default_rng(6).standard_normal((16, 16)).astype(np.float32)
    y = np.full((16, 1), np.nan, np.float32)
    compiled.run(x, y, check="strict")
    np.testing.assert_allclose(y[:, 0], x.sum(1) * 0.5, rtol=1e-5, atol=1e-5)

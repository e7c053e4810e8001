"""Lanes and waves (issue 13): the gfx942 lane maps against the ISA manual's definitions, a
butterfly row maximum and a DPP shift scan compiled and run on the strict emulator against numpy
and the interpreter, coverage tags that prove a complete butterfly and refute every incomplete
or overlapping one, a lane map gfx942 lacks stopping the compilation at its line, memory
ops only some lanes or waves take part in (`T.lanes`): one-wave staging and ping-pong wave
groups under an exec mask on the emulator, and what the DSL refuses; and addresses computed
from register or LDS values (`rows=`): Unknown without a distinctness fact, proved with one,
the interpreter checking each row id against the index entry its tag names, and the backend
addressing from the index registers on the emulator.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import argus
import argus.lang as T
from argus.absint.concrete import run
from argus.absint.verify import verify
from argus.asm.lower import UnsupportedError
from argus.ir.expr import Var, evaluate, max_
from argus.isa_cdna3.lanemaps import LANE_MAPS, LaneMapError, lane_map, source_lane
from argus.lang import DSLError, Tensor

sys.path.insert(0, str(Path(__file__).parent / "bugs"))
import lane_programs as P  # noqa: E402

LANES = np.arange(64)


def _table(name, *params):
    """The lane map on every lane, evaluated as the verifier's formula (and checked against
    the same map applied to numpy arrays, the interpreter's reading)."""
    source, valid = source_lane(name, params, Var("lane", 0, 64), max_)
    table = (np.broadcast_to(evaluate(source, {"lane": LANES}), (64,)),
             np.broadcast_to(evaluate(valid, {"lane": LANES}), (64,)).astype(bool))
    direct = source_lane(name, params, LANES, np.maximum)
    assert np.array_equal(table[0], np.broadcast_to(direct[0], (64,)))
    assert np.array_equal(table[1], np.broadcast_to(direct[1], (64,)))
    return table


def test_lane_maps_follow_the_isa_manual():
    source, valid = _table("dpp.row_shr", 3)
    assert list(valid[:16]) == [False] * 3 + [True] * 13 and source[19] == 16
    source, valid = _table("dpp.row_ror", 5)
    assert valid.all() and source[16] == 27 and source[21] == 16
    source, _ = _table("dpp.row_mirror")
    assert source[0] == 15 and source[17] == 30
    source, valid = _table("dpp.row_bcast15")
    assert not valid[:16].any() and valid[16:].all() and source[40] == 31
    source, _ = _table("dpp.quad_perm", 3, 2, 1, 0)
    assert list(source[4:8]) == [7, 6, 5, 4]
    # ds_swizzle bitmask mode acts within each half of the wave
    source, _ = _table("swizzle.bitmask", 0b11100, 0b00011, 0b00100)
    lane = LANES % 32
    assert (source == LANES - lane + (((lane & 0b11100) | 0b00011) ^ 0b00100)).all()
    assert (_table("bpermute.rotate", 63)[0] == (LANES + 63) % 64).all()
    for name, found in LANE_MAPS.items():
        params = tuple(lo for _, lo, _ in found.params)
        src, ok = _table(name, *params)
        assert ((src >= 0) & (src < 64))[ok].all(), name


def test_lane_map_parameters_are_checked():
    with pytest.raises(LaneMapError, match="n = 16 must be a whole number in"):
        lane_map("dpp.row_shr", (16,))
    with pytest.raises(LaneMapError, match="unknown lane map 'dpp.row_xmask'"):
        lane_map("dpp.row_xmask", (1,))


def test_butterfly_row_max_matches_numpy_on_the_strict_emulator():
    kernel = P.row_max()
    x = np.random.default_rng(1).standard_normal((6, 32)).astype(np.float32)
    y = np.zeros_like(x)
    compiled = argus.compile(kernel)
    compiled.run(X=x, Y=y, check="strict")
    assert np.array_equal(y, np.repeat(x.max(axis=1, keepdims=True), 32, axis=1))
    emitted = [line.split()[0] for line in compiled.text.splitlines() if line.strip()]
    # lane ^ 8, ^ 2, ^ 1 are DPP rows and quads (the max fused), lane ^ 16 and ^ 4 swizzles
    assert [emitted.count(op) for op in ("v_max_f32_dpp", "ds_swizzle_b32", "ds_bpermute_b32")
            ] == [3, 2, 0]


@T.kernel(waves=1)
def row_scan(X: Tensor("f32", "N", 16), Y: Tensor("f32", "N", 16)):
    """Inclusive prefix sums along rows of 16 by DPP row shifts (invalid lanes keep theirs)."""
    N = X.shape[0]
    T.assume((N % 4).eq(0))
    T.grid(N // 4)
    x = X.load((T.program_id(0) * 4, 0), T.copy_layout((4, 16), 1, 1))
    for shift in (1, 2, 4, 8):
        x = T.shuffle(x, "dpp.row_shr", shift, combine="sum")
    Y.store((T.program_id(0) * 4, 0), x)


def test_dpp_shift_scan_agrees_with_the_interpreter_and_numpy():
    x = np.random.default_rng(2).standard_normal((8, 16)).astype(np.float32)
    y = np.zeros_like(x)
    argus.compile(row_scan).run(X=x, Y=y, check="strict")
    interpreted = run(row_scan.ir, {"X": x, "Y": np.zeros_like(x)}).outputs["Y"]
    assert np.allclose(y, np.cumsum(x, axis=1), atol=1e-5)
    assert np.array_equal(y, interpreted)


@T.kernel(waves=1)
def swap_halves(X: Tensor("f32", 2, 32), Y: Tensor("f32", 2, 32)):
    T.grid(1)
    x = X.load((0, 0), P.rows_by_lane())
    Y.store((0, 0), T.shuffle(x, "permlane32_swap"))


def test_a_lane_map_gfx942_lacks_stops_at_its_line():
    with pytest.raises(UnsupportedError, match=r"test_lanes\.py:\d+.*shuffle permlane32_swap"):
        argus.compile(swap_halves)
    x = np.arange(64, dtype=np.float32).reshape(2, 32)
    out = run(swap_halves.ir, {"X": x, "Y": np.zeros_like(x)}).outputs["Y"]
    assert np.array_equal(out, x[::-1])


def test_cover_needs_a_carried_tag():
    with pytest.raises(DSLError, match="cover='key'.*carries col, row"):
        @T.kernel(waves=1)
        def wrong(X: Tensor("f32", "N", 32), Y: Tensor("f32", "N", 32)):
            T.grid(1)
            T.tag(X, lambda r, c: {"row": r, "col": c})
            T.shuffle(X.load((0, 0), P.rows_by_lane()), "bpermute.xor", 1, combine="max",
                      cover="key")
        wrong.trace()


XOR_MAPS = {16: ("swizzle.bitmask", (31, 0, 16)), 8: ("dpp.row_ror", (8,)),
            4: ("bpermute.xor", (4,)), 2: ("dpp.quad_perm", (2, 3, 0, 1)),
            1: ("dpp.quad_perm", (1, 0, 3, 2))}


@settings(max_examples=max(3, settings.default.max_examples // 20), deadline=None)
@given(steps=st.lists(st.sampled_from(sorted(XOR_MAPS)), min_size=4, max_size=6))
@example(steps=[1, 2, 4, 8, 16])
@example(steps=[16, 8, 4, 2, 1])
@example(steps=[16, 8, 8, 2, 1])
def test_coverage_is_proved_exactly_for_complete_butterflies(steps):
    """Any order of XOR distances: the row maximum covers every column iff each of the five
    distances is used exactly once; the verifier and the interpreter agree."""
    kernel = P.row_max(steps=tuple(XOR_MAPS[d] for d in steps))
    complete = sorted(steps) == sorted(XOR_MAPS)
    report = verify(kernel, N=2, jobs=1)
    assert report.ok == complete, str(report)
    x = np.zeros((2, 32), np.float32)
    assert run(kernel.ir, {"X": x, "Y": x.copy()}).ok == complete


@pytest.mark.parametrize("kernel,rows", [(P.staged(), 32), (P.ping_pong(), 128)],
                         ids=["one-wave staging", "ping-pong"])
def test_predicated_memory_ops_run_under_an_exec_mask(kernel, rows):
    x = np.random.default_rng(3).standard_normal((rows, 16)).astype(np.float32)
    y = np.zeros_like(x)
    compiled = argus.compile(kernel)
    emulation = compiled.run(X=x, Y=y, check="strict")
    assert np.array_equal(y, x) and not emulation.hazards
    assert "s_and_saveexec_b64" in compiled.text
    interpreted = run(kernel.ir, {"X": x, "Y": np.zeros_like(x)})
    assert interpreted.ok and np.array_equal(interpreted.outputs["Y"], x)


def test_the_unwritten_half_shows_in_the_interpreter():
    """Lanes 32..63 store nothing: their elements of Y stay as they were (zero) and the read
    of them is uninitialised."""
    kernel = P.staged(writers=lambda wave, lane: lane < 32, layout=T.copy_layout((16, 16), 4, 1))
    x = np.ones((16, 16), np.float32)
    result = run(kernel.ir, {"X": x, "Y": np.zeros_like(x)})
    assert {v.kind for v in result.violations} >= {"lds-uninitialised"}
    assert result.outputs["Y"][:2].all() and not result.outputs["Y"][2:4].any()


def test_a_barrier_inside_lanes_is_refused():
    with pytest.raises(DSLError, match="T.barrier\\(\\) inside a T.lanes block"):
        @T.kernel(waves=2)
        def waits_alone(X: Tensor("f32", 16, 16)):
            T.grid(1)
            with T.lanes(lambda wave, lane: wave.eq(0)):
                T.barrier()
        waits_alone.trace()
    with pytest.raises(DSLError, match="Python bool"):
        @T.kernel(waves=2)
        def python_bool(X: Tensor("f32", 16, 16)):
            T.grid(1)
            with T.lanes(lambda wave, lane: wave == 0):
                pass
        python_bool.trace()


def test_rows_from_registers_need_a_declared_fact():
    report = verify(P.scatter(declared=False))
    race = [o for o in report.obligations if o.kind == "global-race"]
    assert race and race[0].verdict == "unknown" and "T.distinct(ids" in race[0].reason
    assert verify(P.scatter()).ok


def _scatter_inputs(ids):
    x = np.arange(32 * 16, dtype=np.float32).reshape(32, 16)
    return {"X": x, "ids": np.asarray(ids, np.float32), "Y": np.zeros((40, 16), np.float32)}


def test_rows_from_registers_in_the_interpreter():
    ids = np.random.default_rng(4).permutation(40)[:32]
    inputs = _scatter_inputs(ids)
    result = run(P.scatter().ir, inputs)
    assert result.ok and np.array_equal(result.outputs["Y"][ids], inputs["X"])
    # a row id that is not the entry its tag names breaks what the verifier assumed: here
    # the ids come from another tensor than the one the rows claim
    @T.kernel(waves=1)
    def other_ids(X: Tensor("f32", "P", 16), ids: Tensor("i32", "P"),
                  fake: Tensor("i32", "P"), Y: Tensor("f32", "TOKENS", 16)):
        T.grid(1)
        T.tag(fake, lambda p: {"pos": p})
        index = fake.load((0,), P.ids_by_row())
        Y.store((0, 0), X.load((0, 0), P.whole_tile(1)), rows=T.Rows(index, ids, "pos"),
                 guard=True)
    inputs = {**_scatter_inputs(ids), "fake": np.asarray((ids + 1) % 40, np.float32)}
    broken = run(other_ids.ir, inputs)
    assert {v.kind for v in broken.violations} == {"indirect-row"}


def test_rows_need_the_position_tag():
    with pytest.raises(DSLError, match="carries no tags, not 'pos'"):
        @T.kernel(waves=1)
        def untagged(X: Tensor("f32", "P", 16), ids: Tensor("i32", "P"),
                     Y: Tensor("f32", "TOKENS", 16)):
            T.grid(1)
            index = ids.load((0,), P.ids_by_row())
            Y.store((0, 0), X.load((0, 0), P.whole_tile(1)), rows=T.Rows(index, ids, "pos"))
        untagged.trace()


def test_rows_from_registers_on_the_strict_emulator():
    """Row ids staged through LDS address the stores; ids outside Y (padding) are dropped by
    the buffer bounds, as the guarded store says."""
    ids = np.random.default_rng(5).permutation(40)[:32].astype(np.int32)
    ids[[3, 17]] = [-1, 1000]
    inputs = _scatter_inputs(ids)
    compiled = argus.compile(P.scatter())
    y = inputs["Y"].copy()
    emulation = compiled.run(X=inputs["X"], ids=ids, Y=y, check="strict")
    interpreted = run(P.scatter().ir, inputs).outputs["Y"]
    assert not emulation.hazards and np.array_equal(y, interpreted)
    kept = ids >= 0
    kept &= ids < 40
    assert np.array_equal(y[ids[kept]], inputs["X"][kept])


def test_a_group_barrier_orders_only_its_waves():
    x = np.random.default_rng(6).standard_normal((32, 16)).astype(np.float32)
    inside = run(P.handoff().ir, {"X": x, "Y": np.zeros_like(x)})
    assert inside.ok and np.array_equal(inside.outputs["Y"], x)
    outside = run(P.handoff(reader=2).ir, {"X": x, "Y": np.zeros_like(x)})
    assert "lds-race" in {v.kind for v in outside.violations}
    assert verify(P.handoff()).ok and not verify(P.handoff(reader=2)).ok


GROUPS = {"{0,1}": lambda wave: wave < 2, "{0,1,3}": lambda wave: wave.ne(2),
          "{0,3}": lambda wave: (wave % 3).eq(0), "all": lambda wave: wave < 4}
CONSUMERS = {"wave 1": lambda t: 1, "waves 1, 3": lambda t: 1 + 2 * (t % 2),
             "waves 3, 1": lambda t: 3 - 2 * (t % 2)}


@settings(deadline=None, max_examples=min(24, settings.default.max_examples))
@given(st.sampled_from(sorted(GROUPS)), st.sampled_from([1, 2]),
       st.sampled_from(sorted(CONSUMERS)), st.sampled_from([16, 32, 48, 64]))
def test_group_barriers_in_a_loop_agree_with_the_interpreter(group, slots, consumer, n):
    """A group barrier in every iteration of a ping-pong loop: proved exactly when the
    interpreter, which runs the iterations and records which waves each run of the barrier
    held, finds no race (at a pinned size: the interpreter runs one), never Unknown. One slot
    races across iterations (wave 0 refills it before the reader's next barrier)."""
    kernel = P.ping_pong_loop(group=GROUPS[group], slots=slots, consumer=CONSUMERS[consumer])
    X = np.arange(n * 16, dtype=np.float32).reshape(n, 16) + 1
    concrete = run(kernel.ir, {"X": X, "Y": np.zeros_like(X)})
    report = verify(kernel, N=n, jobs=1)
    assert report.ok == concrete.ok, f"{group} {slots} {consumer} {n}\n{report}\n" \
                                     f"{concrete.report()}"
    assert not report.unknown, str(report)
    assert not concrete.ok or np.array_equal(concrete.outputs["Y"], X)


def _nested_ping_pong(group):
    """The ping-pong loop of bug_34 with its iterations split into an outer and an inner
    loop: the group barrier's runs are counted through both."""
    from argus.ir.expr import And

    @T.kernel(waves=4)
    def nested_ping_pong(X: Tensor("f32", "N", 16), Y: Tensor("f32", "N", 16)):
        N = X.shape[0]
        T.assume((N % 32).eq(0))
        T.grid(1)
        for t in (X, Y):
            T.tag(t, lambda r, c: {"row": r, "col": c})
        smem = T.lds((2, 16, 16), "f32")
        for t in T.range(0, N // 32):
            for s in T.range(0, 2):
                k = 2 * t + s
                with T.lanes(lambda wave, lane: wave.eq(0)):
                    smem.store((s, 0, 0), X.load((k * 16, 0), P.whole_tile(4)))
                T.group_barrier(group)
                with T.lanes(lambda wave, lane, s=s: wave.eq(1 + 2 * s)):
                    Y.store((k * 16, 0), smem.load((s, 0, 0), P.whole_tile(4)))
                T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.col.eq(D.col)),
                             "the consumer stores the tile wave 0 staged")
    return nested_ping_pong


def test_group_barriers_are_counted_through_nested_loops():
    assert verify(_nested_ping_pong(GROUPS["{0,1,3}"])).ok
    report = verify(_nested_ping_pong(GROUPS["{0,1}"]))
    assert "lds-race" in {o.kind for o in report.refuted} and not report.unknown
    assert all(o.counterexample.confirmed for o in report.refuted)
    X = np.arange(64 * 16, dtype=np.float32).reshape(64, 16) + 1
    assert run(_nested_ping_pong(GROUPS["{0,1,3}"]).ir, {"X": X, "Y": np.zeros_like(X)}).ok


def test_group_barriers_the_model_does_not_cover_are_refused():
    with pytest.raises(DSLError, match="T.group_barrier inside a T.lanes block"):
        @T.kernel(waves=2)
        def in_lanes(X: Tensor("f32", 16, 16)):
            T.grid(1)
            with T.lanes(lambda wave, lane: lane < 8):
                T.group_barrier(lambda wave: wave.eq(0))
        in_lanes.trace()
    from argus.ir import ops as O
    from argus.ir.types import IRError, SourceLoc

    with pytest.raises(IRError, match="may mention the wave only"):
        O.GroupBarrier(active=Var("lane", 0, 64) < 8, loc=SourceLoc("k.py", 1, 1)).verify()

    @T.kernel(waves=2)
    def changing_group(X: Tensor("f32", "N", 16)):
        T.grid(1)
        for t in T.range(0, X.shape[0] // 16):
            T.group_barrier(lambda wave, t=t: wave.eq(t % 2))
    from argus.absint.report import VerifyError

    with pytest.raises(VerifyError, match="changes with the loop variable"):
        verify(changing_group)

    @T.kernel(waves=2)
    def beside_a_wait(X: Tensor("f32", 16, 16)):
        T.grid(1)
        T.group_barrier(lambda wave: wave.eq(0))
        T.wait()
    with pytest.raises(VerifyError, match="barrier.group in a kernel with waits"):
        verify(beside_a_wait)

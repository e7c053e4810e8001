"""Loop induction on ring buffers (verifier-notes property 10): an S-slot LDS ring with
prefetch distance d is correct iff d < S. Proved must mean that brute-force runs of the
interpreter for every trip count up to 2S+2 find no stale read; a stale read found by the
interpreter must never be Proved; a refutation names the smallest violating iteration."""

from __future__ import annotations

from functools import cache

from hypothesis import given
from hypothesis import strategies as st

import argus.lang as T
from argus.absint.verify import verify
from argus.ir.expr import And
from argus.ir.types import ThreadLayout
from argus.lang import Tensor, TileSpec
from argus.testing import as_program, assert_sound, interpreter_violations

ROWS, COLS = 64, 2


def _reversed_rows(spec: TileSpec) -> TileSpec:
    """The copy layout with rows reversed: readers are other lanes than the writers."""
    row, col = spec.layout.coords
    return TileSpec(spec.shape, ThreadLayout(spec.layout.waves, spec.layout.slots,
                                             (ROWS - 1 - row, col)))


def copy_kernel_setup(A, C):
    """The preamble of the single-workgroup copy kernels: ROWS rows, K a multiple of COLS,
    A and C tagged by (row, k); returns K and the copy layout of one tile."""
    M, K = A.shape
    T.assume(M.eq(ROWS))
    T.assume((K % COLS).eq(0))
    T.grid(1)
    T.tag(A, lambda m, k: {"row": m, "k": k})
    T.tag(C, lambda m, k: {"row": m, "k": k})
    return K, T.copy_layout((ROWS, COLS), 1, 2)


@cache
def ring(slots: int, distance: int):
    @T.kernel(waves=1)
    def ring_buffer(A: Tensor("bf16", "M", "K"), C: Tensor("bf16", "M", "K")):
        K, copy = copy_kernel_setup(A, C)
        ring = T.lds((slots, ROWS, COLS), "bf16")
        nk = K // COLS
        for p in range(distance):
            with T.when(nk > p):
                ring.store((p % slots, 0, 0), A.load((0, p * COLS), copy))
        T.barrier()
        for kt in T.range(0, nk, stages=slots):
            with T.when(kt + distance < nk):
                ring.store(((kt + distance) % slots, 0, 0),
                           A.load((0, (kt + distance) * COLS), copy))
            T.barrier()
            x = ring.load((kt % slots, 0, 0), _reversed_rows(copy))
            C.store((0, kt * COLS), x)
            T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.k.eq(D.k)),
                         "tile kt lands on tile kt")
            T.barrier()
    return ring_buffer


@cache
def _observed(slots: int, distance: int):
    """Verdict and brute-force runs of one ring (only 20 exist; hypothesis repeats them); the
    verdict is sound against those runs (argus.testing)."""
    program = as_program(ring(slots, distance))
    sizes = {n: {"M": ROWS, "K": n * COLS} for n in range(1, 2 * slots + 3)}
    report = assert_sound(program, sizes=list(sizes.values()))
    return report, {n: interpreter_violations(program, s) for n, s in sizes.items()}


@given(st.integers(1, 4), st.integers(0, 4))
def test_ring_buffer_verdicts_match_unrolling(slots, distance):
    report, runs = _observed(slots, distance)
    stale = {n: v for n, v in runs.items() if v}
    if report.ok:
        assert not stale, (slots, distance, stale)
        assert distance < slots
        return
    if distance < slots:
        # a correct ring may stay Unknown, but never Refuted
        assert not report.refuted, str(report)
        return
    assert stale, (slots, distance)
    for ob in report.refuted:
        assert ob.counterexample.confirmed
    [first_size] = [min(stale)] if stale else [None]
    assertions = [o for o in report.refuted if o.kind == "tag-assertion"]
    if assertions:
        cex = assertions[0].counterexample
        seen = [v for v in runs[cex.sizes["K"] // COLS] if v.kind == "tag-assertion"]
        assert seen and min(v.iteration[next(iter(v.iteration))] for v in seen) == \
            next(iter(cex.iteration.values()))
        assert cex.sizes["K"] // COLS == first_size or not any(
            v.kind == "tag-assertion" for v in runs[first_size])


@cache
def nested(read_half: int):
    """An inner loop stages two half tiles per outer iteration; the reader wants the second."""
    @T.kernel(waves=1)
    def halves(A: Tensor("bf16", "M", "K"), C: Tensor("bf16", "M", "K")):
        M, K = A.shape
        T.assume(M.eq(ROWS))
        T.assume((K % (2 * COLS)).eq(0))
        T.grid(1)
        T.tag(A, lambda m, k: {"row": m, "k": k})
        T.tag(C, lambda m, k: {"row": m, "k": k})
        copy = T.copy_layout((ROWS, COLS), 1, 2)
        buf = T.lds((2, ROWS, COLS), "bf16")
        for kt in T.range(0, K // (2 * COLS)):
            for half in T.range(0, 2):
                buf.store((half, 0, 0), A.load((0, (2 * kt + half) * COLS), copy))
            T.barrier()
            x = buf.load((read_half, 0, 0), _reversed_rows(copy))
            C.store((0, (2 * kt + 1) * COLS), x)
            T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.k.eq(D.k)), "second half lands")
            T.barrier()
    return halves


def test_writes_of_a_nested_loop_reach_the_outer_loop():
    assert verify(nested(1)).ok
    wrong = verify(nested(0))
    [refuted] = [o for o in wrong.refuted if o.kind == "tag-assertion"]
    cex = refuted.counterexample
    assert cex.confirmed and cex.tags["V"]["k"] == cex.tags["D"]["k"] - COLS
    assert interpreter_violations(as_program(nested(0)), {"M": ROWS, "K": 2 * COLS})


@T.kernel(waves=1)
def accumulate_rows(A: Tensor("f32", "M", "K"), C: Tensor("f32", "M", "K")):
    """Sum the K tiles of A into one carried tile: its `k` tag changes every iteration, its
    `row` tag never does."""
    K, copy = copy_kernel_setup(A, C)
    acc = T.tag(T.zeros(copy), lambda r, c: {"row": r, "k": c})
    loop = T.range(0, K // COLS, acc=acc)
    for kt in loop:
        loop.acc = loop.acc + A.load((0, kt * COLS), copy)
    C.store((0, 0), loop.acc)
    T.tag_assert(lambda V, D: V.row.eq(D.row), "each row's sum lands on its row")


def test_widening_is_per_tag_a_changing_tag_leaves_the_stable_ones_exact():
    # issue 13: an accumulation made every tag of the carried tile ⊤, so the assertion on the
    # row (which never changes) was Unknown
    report = verify(accumulate_rows)
    assert report.ok and not report.unknown, str(report)
    assert not interpreter_violations(as_program(accumulate_rows), {"M": ROWS, "K": 3 * COLS})


# multi-stage prefetch pipelines: a tile travels global -> registers (carried through two
# iterations) -> a 3-slot LDS ring -> the consumer; the carried tiles' invariants are functions
# of the iteration (tile kt + 2, tile kt + 3), the slots (kt + 2) % 3 against kt % 3


@cache
def pipeline(read_ahead: int = 0, hand_down: bool = True):
    """Tile kt + 4 is loaded while tile kt is consumed; `near` (tile kt + 2) is staged into slot
    (kt + 2) % 3 and `far` (tile kt + 3) moves up. One barrier per iteration suffices with three
    slots: the slot written is the one read an iteration ago. `read_ahead` = 2 reads the slot
    this iteration's stores are still filling (tile kt + 2, not landed for the other lanes);
    `hand_down=False` swaps the carried tiles' order."""
    @T.kernel(waves=1)
    def three_stage(A: Tensor("bf16", "M", "K"), C: Tensor("bf16", "M", "K")):
        K, copy = copy_kernel_setup(A, C)
        nk = K // COLS
        T.assume(nk >= 2)
        ring = T.lds((3, ROWS, COLS), "bf16")
        for p in range(2):
            ring.store((p, 0, 0), A.load((0, p * COLS), copy))
        T.barrier()
        loop = T.range(0, nk, stages=3, near=A.load((0, 2 * COLS), copy, guard=True),
                       far=A.load((0, 3 * COLS), copy, guard=True))
        for kt in loop:
            later = A.load((0, (kt + 4) * COLS), copy, guard=True)
            with T.when(kt + 2 < nk):
                ring.store(((kt + 2) % 3, 0, 0), loop.near)
            x = ring.load(((kt + read_ahead) % 3, 0, 0), _reversed_rows(copy))
            C.store((0, kt * COLS), x)
            T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.k.eq(D.k)),
                         "tile kt lands on tile kt")
            T.barrier()
            if hand_down:
                loop.near, loop.far = loop.far, later
            else:
                loop.near, loop.far = later, loop.far
    return three_stage


PIPELINE_SIZES = [{"M": ROWS, "K": n * COLS} for n in range(2, 9)]


def test_three_stage_pipeline_is_proved_for_every_trip_count():
    # the carried tiles ended ⊤ (iv-independent candidates only) and the slot comparison
    # (kt + 2) % 3 == kt % 3 timed out in z3
    report = assert_sound(pipeline(), sizes=PIPELINE_SIZES)
    assert report.ok and not report.unknown, str(report)
    program = as_program(pipeline())
    assert not any(interpreter_violations(program, s) for s in PIPELINE_SIZES)


def test_pipeline_reading_a_slot_not_landed_is_refuted_and_replayed():
    report = assert_sound(pipeline(read_ahead=2), sizes=PIPELINE_SIZES)
    kinds = {o.kind for o in report.refuted}
    assert {"lds-race", "tag-assertion"} <= kinds, str(report)
    assert all(o.counterexample.confirmed for o in report.refuted)
    [mixed] = [o for o in report.refuted if o.kind == "tag-assertion"]
    assert list(mixed.counterexample.iteration.values()) == [0]


def test_pipeline_handing_tiles_down_out_of_order_is_refuted_where_it_first_fails():
    report = assert_sound(pipeline(hand_down=False), sizes=PIPELINE_SIZES)
    [wrong] = report.refuted
    cex = wrong.counterexample
    assert wrong.kind == "tag-assertion" and cex.confirmed, str(report)
    # iterations 0..2 consume the prologue's tiles and the initial `near`; iteration 1 staged
    # `later` of iteration 0 (tile 4) into tile 3's slot, which the fourth reads
    assert list(cex.iteration.values()) == [3]
    assert cex.tags["V"]["k"] == cex.tags["D"]["k"] + COLS
    runs = {n: interpreter_violations(as_program(pipeline(hand_down=False)), s)
            for n, s in enumerate(PIPELINE_SIZES, 2)}
    assert not any(runs[n] for n in (2, 3)) and all(runs[n] for n in range(4, 9))


@cache
def chain(depth: int, distance: int, swap: bool):
    """`depth` tiles carried in registers, the nearest stored each iteration and a new one
    loaded `distance` tiles ahead at the far end: in order, correct iff distance == depth;
    `swap` exchanges the two nearest as they move (depth 2 is then right for distance 1)."""
    @T.kernel(waves=1)
    def register_chain(A: Tensor("bf16", "M", "K"), C: Tensor("bf16", "M", "K")):
        K, copy = copy_kernel_setup(A, C)
        names = [f"tile{d}" for d in range(depth)]
        loop = T.range(0, K // COLS, **{name: A.load((0, d * COLS), copy, guard=True)
                                        for d, name in enumerate(names)})
        for kt in loop:
            later = A.load((0, (kt + distance) * COLS), copy, guard=True)
            C.store((0, kt * COLS), getattr(loop, names[0]))
            T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.k.eq(D.k)),
                         "tile kt lands on tile kt")
            moved = [getattr(loop, name) for name in names[1:]] + [later]
            if swap and depth > 1:
                moved[0], moved[1] = moved[1], moved[0]
            for name, tile in zip(names, moved):
                setattr(loop, name, tile)
    return register_chain


@given(st.integers(1, 3), st.integers(1, 4), st.booleans())
def test_register_chains_are_proved_exactly_when_every_trip_count_runs_clean(depth, distance,
                                                                              swap):
    """Lifted loop invariants: Proved iff brute-force runs for 1..depth+4 tiles find no wrong
    tile; a wrong chain is refuted by a replayed witness at the first failing iteration."""
    program = as_program(chain(depth, distance, swap))
    sizes = [{"M": ROWS, "K": n * COLS} for n in range(1, depth + 5)]
    report = assert_sound(program, sizes=sizes)
    runs = [interpreter_violations(program, s) for s in sizes]
    assert report.ok == (not any(runs)), str(report)
    assert not report.unknown, str(report)
    if not swap:
        assert report.ok == (distance == depth)
    if not report.ok:
        first = min(next(iter(v.iteration.values())) for found in runs for v in found
                    if v.kind == "tag-assertion")
        [wrong] = [o for o in report.refuted if o.message == "tile kt lands on tile kt"]
        assert wrong.counterexample.confirmed
        assert list(wrong.counterexample.iteration.values()) == [first]

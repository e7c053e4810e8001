"""Memory ordering: async global->LDS copies with commit groups and `wait_group`, the wait
(fence) and the bare barrier — the verifier's clock (`absint.sync`), the interpreter landing
copies only at the wait, the DSL's errors and the backend's lowering."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ml_dtypes import bfloat16

import argus
import argus.lang as T
from argus.absint import sync as S
from argus.absint.concrete import run
from argus.absint.report import VerifyError
from argus.absint.verify import verify
from argus.ir import ops as O
from argus.ir.expr import evaluate
from argus.ir.types import ThreadLayout, thread_vars
from argus.lang import DSLError, Tensor

sys.path.insert(0, str(Path(__file__).parent / "bugs"))
import ordering as P  # noqa: E402

COPY = T.copy_layout((16, 16), 4, 1)


def _staged(*, sync):
    """X -> LDS by async copy -> Y read back in transposed thread order; `sync` places the
    waits and barriers between the copy and the read."""
    @T.kernel(waves=4)
    def staged(X: Tensor("f32", 16, 16), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        for t in (X, Y):
            T.tag(t, lambda r, c: {"row": r, "col": c})
        tile = T.lds((16, 16), "f32")
        T.async_copy(tile, (0, 0), X, (0, 0), COPY)
        sync()
        P._store_checked(Y, (0, 0), tile.load((0, 0), P._by_column()))
    return staged


def _own_copy_read(*, sync):
    """Each thread reads back exactly the element it copied (no other wave involved)."""
    @T.kernel(waves=4)
    def own(X: Tensor("f32", 16, 16), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        for t in (X, Y):
            T.tag(t, lambda r, c: {"row": r, "col": c})
        tile = T.lds((16, 16), "f32")
        T.async_copy(tile, (0, 0), X, (0, 0), COPY)
        T.commit_group()
        sync()
        P._store_checked(Y, (0, 0), tile.load((0, 0), COPY))
    return own


def _kinds(report) -> set:
    return {o.kind for o in report.refuted}


def _confirmed(report) -> bool:
    return bool(report.refuted) and all(o.counterexample.confirmed for o in report.refuted)


def test_a_copy_read_by_its_own_thread_needs_a_wait_and_nothing_more():
    never = verify(_own_copy_read(sync=lambda: None))
    assert "async-pending" in _kinds(never) and _confirmed(never)
    assert not never.unknown
    assert verify(_own_copy_read(sync=lambda: T.wait_group(0))).ok
    assert verify(_own_copy_read(sync=T.wait)).ok


@pytest.mark.parametrize("sync, proved", [
    # the waiting barrier waits for LDS stores only: the copy's group is still in flight
    (lambda: (T.commit_group(), T.barrier()), False),
    # landed for the issuing wave, but no barrier publishes it to the others
    (lambda: (T.commit_group(), T.wait_group(0)), False),
    # a copy that was never committed is not waited for
    (lambda: (T.wait_group(0), T.barrier(wait=False)), False),
    (lambda: (T.commit_group(), T.wait_group(0), T.barrier(wait=False)), True),
    (lambda: (T.commit_group(), T.wait(), T.barrier()), True),
])
def test_another_wave_sees_a_copy_after_its_group_is_retired_and_a_barrier(sync, proved):
    report = verify(_staged(sync=sync))
    assert report.ok == proved, str(report)
    if not proved:
        assert "lds-race" in _kinds(report) and _confirmed(report)
        assert not report.unknown


def test_the_bug_kernels_compute_the_wrong_data_in_the_interpreter():
    """Copies land only at the wait that retires their group, so the stream that waits for
    the wrong group really reads stale slots (zeros here), and the fixed one copies X."""
    X = np.arange(64 * 16, dtype=np.float32).reshape(64, 16) + 1
    for kernel, right in ((P.stream(), True), (P.stream(pending=2), False)):
        result = run(kernel.ir, {"X": X, "Y": np.zeros_like(X)})
        assert np.array_equal(result.outputs["Y"], X) == right
        assert result.ok == right
        if not right:
            assert {"async-pending", "lds-race"} <= {v.kind for v in result.violations}


def test_without_the_wait_other_waves_read_the_old_lds_contents_in_the_interpreter():
    """The interpreter delays each LDS store until its wave's next wait: behind a bare barrier
    the transposed read sees the zeros that were there, while a thread reading back its own
    store sees it at once."""
    X = np.arange(32 * 16, dtype=np.float32).reshape(32, 16) + 1
    fixed = run(P.relayout().ir, {"X": X, "Y": np.zeros_like(X)})
    assert fixed.ok and np.array_equal(fixed.outputs["Y"], X)
    buggy = run(P.relayout(wait=False).ir, {"X": X, "Y": np.zeros_like(X)})
    assert {v.kind for v in buggy.violations} >= {"lds-race"}
    wrong = buggy.outputs["Y"] != X
    # thread t wrote element t and reads element (t % 16, t // 16): only the diagonal is its own
    rows, cols = np.nonzero(~wrong[:16])
    assert (rows == cols).all() and wrong.sum() == 2 * (16 * 16 - 16)

    @T.kernel(waves=4)
    def own(X: Tensor("f32", 16, 16), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        tile = T.lds((16, 16), "f32")
        tile.store((0, 0), X.load((0, 0), COPY))
        T.barrier(wait=False)
        Y.store((0, 0), tile.load((0, 0), COPY))
    mine = run(own.ir, {"X": X[:16], "Y": np.zeros_like(X[:16])})
    assert mine.ok and np.array_equal(mine.outputs["Y"], X[:16])
    assert verify(own).ok


def test_clock_counts_groups_and_retired_groups_through_a_loop():
    """At iteration k of the stream's loop, k+1 groups are committed and k retired (at the
    previous iteration's wait_group(1)); after it every group but the newest is retired."""
    kernel = P.stream().ir
    loop = next(op for op in kernel.ops() if isinstance(op, O.For))
    entry = S.through(O.Block((), kernel.body.ops[:kernel.body.ops.index(loop)]), S.Clock())
    start = S.body_start(loop, entry, loop.iv)
    for k in range(5):
        env = {loop.iv.name: k}
        assert evaluate(start.groups, env) == k + 1
        assert evaluate(start.retired, env) == k
        assert evaluate(start.retired_published, env) == k
    after = S.after_loop(loop, entry)
    for n in (32, 48, 160):
        tiles = n // 16
        assert evaluate(after.groups, {"N": n}) == tiles
        assert evaluate(after.retired, {"N": n}) == tiles - 1


def test_only_kernels_with_the_fine_ops_use_the_clock():
    import programs

    assert S.uses_clock(P.stream().ir) and S.uses_clock(P.relayout().ir)
    assert not S.uses_clock(programs.single_buffered().ir)


def test_dsl_errors_name_the_line_and_the_fix():
    with pytest.raises(DSLError, match=r"test_ordering\.py:\d+.*pending=-1"):
        _staged(sync=lambda: T.wait_group(-1)).trace()
    with pytest.raises(DSLError, match=r"test_ordering\.py:\d+.*whole number of groups"):
        _staged(sync=lambda: T.wait_group(1.5)).trace()
    with pytest.raises(DSLError, match=r"test_ordering\.py:\d+.*barrier\(wait='no'\)"):
        _staged(sync=lambda: T.barrier(wait="no")).trace()

    @T.kernel(waves=4)
    def branchy(X: Tensor("f32", 16, 16), Y: Tensor("f32", 16, 16)):
        T.grid(2)
        tile = T.lds((16, 16), "f32")
        T.async_copy(tile, (0, 0), X, (0, 0), COPY)
        with T.when(T.program_id(0).eq(0)):
            T.commit_group()
        Y.store((0, 0), tile.load((0, 0), COPY))
    with pytest.raises(VerifyError, match=r"test_ordering\.py:\d+.*commit_group inside a branch"):
        verify(branchy)


def test_a_copy_moves_whole_dwords():
    half = T.copy_layout((16, 16), 4, 1)

    @T.kernel(waves=4)
    def narrow(X: Tensor("bf16", 16, 16)):
        T.grid(1)
        T.async_copy(T.lds((16, 16), "bf16"), (0, 0), X, (0, 0), half)
    with pytest.raises(DSLError, match=r"test_ordering\.py:\d+.*whole dwords"):
        narrow.trace()


def test_wait_and_bare_barrier_lower_and_run_in_the_strict_emulator():
    """T.wait is an explicit s_waitcnt before the bare s_barrier, and the transposed read
    gets the right data in the strict emulator (which holds LDS and memory results until
    their wait)."""
    compiled = argus.compile(P.relayout())
    lines = [line.split(";")[0].strip() for line in compiled.text.splitlines()]
    barrier = lines.index("s_barrier")
    assert "s_waitcnt vmcnt(0) lgkmcnt(0)" in lines[barrier - 3:barrier]
    X = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    Y = np.zeros_like(X)
    compiled.run(X=X, Y=Y, check="strict")
    assert np.array_equal(Y, X)


@pytest.mark.parametrize("policy", ["simple", "interleave"])
def test_async_copies_lower_to_lds_dma_and_stream_right_in_the_strict_emulator(policy):
    """Each copy is a `buffer_load_dword ... lds` with M0 at lane 0's LDS address, and the
    pipelined stream copies X to Y in the strict emulator (LDS DMA lands at its vmcnt)."""
    compiled = argus.compile(P.stream(), policy=policy)
    lines = [line.split(";")[0].strip() for line in compiled.text.splitlines()]
    dma = [n for n, line in enumerate(lines) if line.startswith("buffer_load_dword")]
    assert dma and all(lines[n].endswith("lds") for n in dma)
    assert all(lines[n - 2].startswith(("s_mov_b32 m0,", "s_add_u32 m0,"))
               and lines[n - 1] == "s_nop 0" for n in dma)
    # wait_group(1) leaves the next tile's copy in flight: the loop's wait is no vmcnt(0)
    waits = [line for line in lines if line.startswith("s_waitcnt vmcnt(")]
    assert any(line != "s_waitcnt vmcnt(0)" for line in waits)
    X = np.arange(80 * 16, dtype=np.float32).reshape(80, 16) + 1
    Y = np.zeros_like(X)
    compiled.run(X=X, Y=Y, check="strict")
    assert np.array_equal(Y, X)


@pytest.mark.parametrize("policy", ["simple", "interleave"])
def test_the_wrong_group_wait_is_a_real_bug_in_the_emitted_code(policy):
    """bug_30's wait_group(2), lowered with its exact vmcnt, lets the strict emulator read
    slots whose DMA has not landed: the refuted kernel computes wrong data on the machine."""
    compiled = argus.compile(P.stream(pending=2), policy=policy)
    X = np.arange(80 * 16, dtype=np.float32).reshape(80, 16) + 1
    Y = np.zeros_like(X)
    compiled.run(X=X, Y=Y, check="strict")
    assert not np.array_equal(Y, X)


def test_groups_are_counted_only_where_each_commit_follows_its_own_copies():
    """A commit whose group's copies sit in a nested loop cannot mark the group's newest DMA;
    every wait_group of such a kernel lowers to vmcnt(0)."""
    from argus.asm.lower.isel import groups_marked

    @T.kernel(waves=4)
    def nested(X: Tensor("f32", 64, 16), Y: Tensor("f32", 64, 16)):
        T.grid(1)
        tile = T.lds((4, 16, 16), "f32")
        for t in T.range(0, 4):
            T.async_copy(tile, (t, 0, 0), X, (t * 16, 0), COPY)
        T.commit_group()
        T.wait_group(1)
        T.barrier(wait=False)
        Y.store((0, 0), tile.load((0, 0, 0), COPY))
    assert groups_marked(P.stream().ir.body) and not groups_marked(nested.ir.body)
    lines = [line.split(";")[0].strip() for line in argus.compile(nested).text.splitlines()]
    assert [line for line in lines if line.startswith("s_waitcnt vmcnt")] == \
        ["s_waitcnt vmcnt(0)"]


def test_a_copy_whose_lanes_do_not_run_along_lds_fails_to_lower_naming_the_line():
    @T.kernel(waves=4)
    def transposed(X: Tensor("f32", 16, 16), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        tile = T.lds((16, 16), "f32")
        T.async_copy(tile, (0, 0), X, (0, 0), P._by_column())
        T.commit_group()
        T.wait_group(0)
        T.barrier(wait=False)
        Y.store((0, 0), tile.load((0, 0), COPY))
    with pytest.raises(argus.asm.lower.UnsupportedError,
                       match=r"test_ordering\.py:\d+.*async_copy: slot 0 .*consecutive"):
        argus.compile(transposed)

    wave, lane, slot = thread_vars(2, 2)
    strided = T.TileSpec((16, 16), ThreadLayout(2, 2, ((wave * 64 + lane) // 8,
                                                       (wave * 64 + lane) % 8 + 8 * slot)))

    @T.kernel(waves=2)
    def apart(X: Tensor("bf16", 16, 16), Y: Tensor("bf16", 16, 16)):
        T.grid(1)
        tile = T.lds((16, 16), "bf16")
        T.async_copy(tile, (0, 0), X, (0, 0), strided)   # a lane's two elements 8 apart
        T.commit_group()
        T.wait_group(0)
        T.barrier(wait=False)
        Y.store((0, 0), tile.load((0, 0), T.copy_layout((16, 16), 2, 2)))
    with pytest.raises(argus.asm.lower.UnsupportedError,
                       match=r"test_ordering\.py:\d+.*async_copy: register slots"):
        argus.compile(apart)


def test_a_bf16_copy_moves_a_dword_of_two_elements_per_lane():
    pairs = T.copy_layout((16, 16), 2, 2)

    @T.kernel(waves=2)
    def narrow(X: Tensor("bf16", 16, 16), Y: Tensor("bf16", 16, 16)):
        T.grid(1)
        tile = T.lds((16, 16), "bf16")
        T.async_copy(tile, (0, 0), X, (0, 0), pairs)
        T.commit_group()
        T.wait_group(0)
        T.barrier(wait=False)
        Y.store((0, 0), tile.load((0, 0), pairs))
    assert verify(narrow).ok
    X = (np.arange(256, dtype=np.float32).reshape(16, 16) / 8).astype(bfloat16)
    Y = np.zeros_like(X)
    argus.compile(narrow).run(X=X, Y=Y, check="strict")
    assert np.array_equal(Y, X)


SYNCS = {"commit_group": T.commit_group, "wait_group(0)": lambda: T.wait_group(0),
         "wait_group(1)": lambda: T.wait_group(1), "wait": T.wait, "barrier": T.barrier,
         "barrier(wait=False)": lambda: T.barrier(wait=False)}


def _sequence(copy: bool, own: bool, syncs: tuple[str, ...]):
    """A tile written to LDS (an async copy, or a store from registers), the sync ops `syncs`,
    and a read back by the thread that wrote each element (`own`) or by another wave."""
    @T.kernel(waves=4)
    def sequence(X: Tensor("f32", 16, 16), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        for t in (X, Y):
            T.tag(t, lambda r, c: {"row": r, "col": c})
        tile = T.lds((16, 16), "f32")
        if copy:
            T.async_copy(tile, (0, 0), X, (0, 0), COPY)
        else:
            tile.store((0, 0), X.load((0, 0), COPY))
        for name in syncs:
            SYNCS[name]()
        P._store_checked(Y, (0, 0), tile.load((0, 0), COPY if own else P._by_column()))
    return sequence


@settings(deadline=None)
@given(st.booleans(), st.booleans(), st.lists(st.sampled_from(sorted(SYNCS)), max_size=4))
def test_the_verifier_agrees_with_the_interpreter_on_any_sequence_of_sync_ops(copy, own,
                                                                              syncs):
    """Proved exactly when the interpreter's delayed schedule runs clean, and every refutation
    confirmed: the clock's counts match the concrete semantics on straight-line code."""
    kernel = _sequence(copy, own, tuple(syncs))
    X = np.arange(256, dtype=np.float32).reshape(16, 16) + 1
    concrete = run(kernel.ir, {"X": X, "Y": np.zeros_like(X)})
    report = verify(kernel, jobs=1)
    assert report.ok == concrete.ok, f"{syncs}\n{report}\n{concrete.report()}"
    assert not report.unknown
    assert np.array_equal(concrete.outputs["Y"], X) or not concrete.ok


def test_an_async_copy_gemm_proves_and_matches_numpy_in_the_strict_emulator():
    """The pipelined GEMM of the bug corpus (bug_32's correction) is proved for all sizes and
    its code object matches numpy; the refuted wait_group(2) variant computes a wrong C."""
    from ml_dtypes import bfloat16 as bf16

    rng = np.random.default_rng(0)
    A = rng.standard_normal((128, 64)).astype(bf16)
    B = rng.standard_normal((64, 64)).astype(bf16)
    reference = A.astype(np.float32) @ B.astype(np.float32).T
    for pending, right in ((1, True), (2, False)):
        C = np.zeros((128, 64), np.float32)
        argus.compile(P.gemm(pending=pending)).run(A=A, B=B, C=C, check="strict")
        assert np.allclose(C, reference, atol=1e-3) == right


WRITES = {"store": lambda tile, X, spec: tile.store((0, 0), X.load((0, 0), spec)),
          "copy": lambda tile, X, spec: T.async_copy(tile, (0, 0), X, (0, 0), spec)}


def _program(events: tuple, own_read: bool):
    """Writes of one tile to LDS (stores or async copies, each in the copy layout or the
    transposed one) and sync ops in any order, then a read back."""
    @T.kernel(waves=4)
    def program(X: Tensor("f32", 16, 16), Y: Tensor("f32", 16, 16)):
        T.grid(1)
        for t in (X, Y):
            T.tag(t, lambda r, c: {"row": r, "col": c})
        tile = T.lds((16, 16), "f32")
        for event in events:
            if event in SYNCS:
                SYNCS[event]()
            else:
                kind, layout = event
                WRITES[kind](tile, X, COPY if layout == "copy" else P._by_column())
        P._store_checked(Y, (0, 0), tile.load((0, 0), COPY if own_read else P._by_column()))
    return program


EVENTS = st.sampled_from(sorted(SYNCS) + [(k, layout) for k in WRITES
                                          for layout in ("copy", "transposed")])


# each example is a verification (about a third of a second): a sample, not the profile's count
@settings(deadline=None, max_examples=min(40, settings.default.max_examples))
@given(st.tuples(st.sampled_from(sorted(WRITES)), st.sampled_from(["copy", "transposed"])),
       st.lists(EVENTS, max_size=5), st.booleans())
def test_the_verifier_agrees_with_the_interpreter_on_writes_and_syncs_in_any_order(first, rest,
                                                                                   own_read):
    """Write/write ordering too: two writes of one address by different threads (or an own
    copy under a later store) race unless a wait and a barrier come between."""
    kernel = _program((first, *rest), own_read)
    X = np.arange(256, dtype=np.float32).reshape(16, 16) + 1
    concrete = run(kernel.ir, {"X": X, "Y": np.zeros_like(X)})
    report = verify(kernel, jobs=1)
    assert report.ok == concrete.ok, f"{(first, *rest)}\n{report}\n{concrete.report()}"
    assert not report.unknown, str(report)


def _global_program(events: tuple, own_read: bool):
    """Stores of one tile to a global scratch tensor W (in the copy layout or the transposed
    one), loads of it, and sync ops in any order, then W read back into Y."""
    @T.kernel(waves=4)
    def global_program(X: Tensor("f32", 16, 16), W: Tensor("f32", 16, 16),
                       Y: Tensor("f32", 16, 16)):
        T.grid(1)
        for t in (X, W, Y):
            T.tag(t, lambda r, c: {"row": r, "col": c})
        for event in events:
            if event in SYNCS:
                SYNCS[event]()
                continue
            kind, layout = event
            spec = COPY if layout == "copy" else P._by_column()
            if kind == "store":
                W.store((0, 0), X.load((0, 0), spec))
            else:
                W.load((0, 0), spec)
        P._store_checked(Y, (0, 0), W.load((0, 0), COPY if own_read else P._by_column()))
    return global_program


GLOBAL_EVENTS = st.sampled_from(sorted(SYNCS) + [(k, layout) for k in ("store", "load")
                                                 for layout in ("copy", "transposed")])


@settings(deadline=None, max_examples=min(40, settings.default.max_examples))
@given(st.sampled_from(["copy", "transposed"]), st.lists(GLOBAL_EVENTS, max_size=5),
       st.booleans())
def test_the_verifier_agrees_with_the_interpreter_on_global_stores_loads_and_syncs(first, rest,
                                                                                   own_read):
    """Global memory inside a workgroup: a store reaches another wave once a wait lands it
    and a barrier follows (with the fine-grained ops; one barrier epoch without them), a load
    is ordered before a later store by any barrier. Proved exactly when the interpreter, which
    holds each store in flight until its wave's next wait, runs clean, and then Y is X."""
    events = (("store", first), *rest)
    kernel = _global_program(events, own_read)
    X = np.arange(256, dtype=np.float32).reshape(16, 16) + 1
    concrete = run(kernel.ir, {"X": X, "W": np.zeros_like(X), "Y": np.zeros_like(X)})
    report = verify(kernel, jobs=1)
    assert report.ok == concrete.ok, f"{events}\n{report}\n{concrete.report()}"
    assert not report.unknown, str(report)
    assert not concrete.ok or np.array_equal(concrete.outputs["Y"], X)


def _global_loop(body: tuple, slots: int, own_read: bool):
    """A loop over N // 16 tiles whose body stores tile t of X to slot t % slots of a scratch
    tensor W, runs sync ops (and maybe more stores) in the order `body` gives, and reads the
    slot back into Y ("read")."""
    @T.kernel(waves=4)
    def global_loop(X: Tensor("f32", "N", 16), W: Tensor("f32", 32, 16),
                    Y: Tensor("f32", "N", 16)):
        N = X.shape[0]
        T.assume((N % 16).eq(0))
        T.grid(1)
        for t in (X, W, Y):
            T.tag(t, lambda r, c: {"row": r, "col": c})
        for t in T.range(0, N // 16):
            slot = (t % slots) * 16
            for event in body:
                if event in SYNCS:
                    SYNCS[event]()
                elif event == "store":
                    W.store((slot, 0), X.load((t * 16, 0), COPY))
                else:
                    Y.store((t * 16, 0), W.load((slot, 0), COPY if own_read else P._by_column()))
    return global_loop


@settings(deadline=None, max_examples=min(12, settings.default.max_examples))
@given(st.lists(st.sampled_from(sorted(SYNCS) + ["store"]), max_size=3),
       st.lists(st.sampled_from(sorted(SYNCS)), max_size=2), st.sampled_from([1, 2]),
       st.booleans())
def test_global_ordering_through_a_loop_agrees_with_the_interpreter(before, after, slots,
                                                                    own_read):
    """The clock's counts through a loop order global stores of earlier iterations too:
    proved for all sizes exactly when the interpreter runs clean at N = 16 .. 64 (one slot:
    the next iteration's store races with this one's read unless a barrier follows it)."""
    kernel = _global_loop(("store", *before, "read", *after), slots, own_read)
    clean = []
    for n in (16, 32, 48, 64):
        X = np.arange(n * 16, dtype=np.float32).reshape(n, 16) + 1
        concrete = run(kernel.ir, {"X": X, "W": np.zeros((32, 16), np.float32),
                                   "Y": np.zeros_like(X)})
        clean.append(concrete.ok)
        assert not concrete.ok or np.array_equal(concrete.outputs["Y"], X)
    report = verify(kernel, jobs=1)
    assert report.ok == all(clean), f"{before} {after} {slots} {own_read}\n{report}"
    assert not report.unknown, str(report)


def test_a_global_store_behind_a_bare_barrier_is_read_stale_by_other_waves():
    """The interpreter's schedule shows bug_33 in the data: every element another wave
    stored reads as the zero that was there; its own element (the diagonal) it reads at once."""
    X = np.arange(16 * 16, dtype=np.float32).reshape(16, 16) + 1
    arrays = {"X": X, "W": np.zeros_like(X), "Y": np.zeros_like(X)}
    fixed = run(P.global_scratch().ir, arrays)
    assert fixed.ok and np.array_equal(fixed.outputs["Y"], X)
    buggy = run(P.global_scratch(wait=False).ir, arrays)
    assert {v.kind for v in buggy.violations} == {"global-order"}
    rows, cols = np.nonzero(buggy.outputs["Y"] == X)
    assert (rows == cols).all() and len(rows) == 16
    # the stores land at the kernel's end all the same
    assert np.array_equal(buggy.outputs["W"], X)


def test_static_resources_count_copies_and_bare_barriers():
    counts = O.resources(P.stream().ir)
    # two copies (a global read and an LDS write each), two LDS reads, two global stores,
    # three bare barriers (a loop body counts once)
    assert counts["barrier"] == 3
    assert counts["lds_access"] == 2 + 2 and counts["global_access"] == 2 + 2

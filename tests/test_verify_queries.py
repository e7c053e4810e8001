"""The verifier's query layer: canonical helper names, the verdict cache, decisions on several
cores, and the z3 lowering with a width per subterm — each must leave every verdict as it was."""

import gc
import os

import pytest
import z3
from hypothesis import given
from hypothesis import strategies as st
from test_expr import VARS, int_exprs
from test_smt import risky_exprs

from argus import env
from argus.absint import queries as Q
from argus.absint.domain import canonical_renaming, fresh_var, substitute_all
from argus.absint.parallel import can_fork, map_items
from argus.absint.verify import collector_paused, verify
from argus.ir.expr import Var, evaluate, ite
from argus.kernels import library
from argus.smt import Proved, Refuted, native


def test_queries_differing_only_in_helper_names_become_one_query():
    lane = Var("lane", 0, 64)
    first, second = (fresh_var("hlane", 0, 64) for _ in range(2))
    other = fresh_var("hlane", 0, 64)
    a = Q.canonical(first.eq(lane ^ 1), [first < 32, other >= 0])
    b = Q.canonical(second.eq(lane ^ 1), [second < 32, other >= 0])
    assert a == b and a.goal is b.goal
    assert a.back != b.back
    assert {a.back[v.name] for v in a.goal.args[0:1]} == {first.name}


def test_canonical_renaming_is_injective_and_leaves_kernel_variables_alone():
    helper = fresh_var("lane", 0, 64)
    looks_canonical = fresh_var("lane_c", 0, 64)  # spelled like a canonical name: a helper
    kernel_lane = Var("lane", 0, 64)
    exprs = [helper.eq(looks_canonical + kernel_lane)]
    mapping = canonical_renaming(exprs)
    assert set(mapping) == {helper.name, looks_canonical.name}
    assert len({v.name for v in mapping.values()} | {kernel_lane.name}) == 3
    renamed = substitute_all(exprs, mapping)[0]
    assert {v.name for v in _vars(renamed)} == {v.name for v in mapping.values()} | {"lane"}


def test_a_refuting_witness_comes_back_in_the_obligations_own_names():
    helper = fresh_var("hslot", 0, 8)
    lane = Var("lane", 0, 64)
    verdict, _ = Q.decide([Q.canonical((helper + lane) < 70, [], ["lane", helper.name])],
                          "z3", 10_000)[0]
    assert isinstance(verdict, Refuted) and verdict.minimal
    assert verdict.witness == {"lane": 63, helper.name: 7}


def test_verdicts_are_kept_across_calls_and_equal_fresh_ones():
    kernel = library()["gemm"].kernel
    Q.clear_cache()
    fresh = verify(kernel, jobs=1)
    assert len(Q._verdicts) > 0
    again = verify(kernel, jobs=1)
    assert [(o.kind, o.loc, o.verdict) for o in again.obligations] == \
        [(o.kind, o.loc, o.verdict) for o in fresh.obligations]
    assert again.seconds < fresh.seconds


def test_worker_processes_give_the_same_report_as_one_process():
    kernel = library()["gemm"].kernel
    Q.clear_cache()
    alone = verify(kernel, jobs=1)
    Q.clear_cache()
    shared = verify(kernel, jobs=2)
    assert [(o.kind, o.message, o.loc, o.verdict) for o in shared.obligations] == \
        [(o.kind, o.message, o.loc, o.verdict) for o in alone.obligations]


def test_refutations_found_by_workers_are_replayed_and_minimised():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "bugs"))
    import bug_06_wrong_c_tile as bug

    Q.clear_cache()
    report = verify(bug.KERNEL, jobs=2)
    refuted = [o for o in report.obligations if o.verdict == "refuted"]
    assert refuted and all(o.counterexample.confirmed for o in refuted)


def test_map_items_keeps_order_and_runs_in_process_for_small_batches():
    items = list(range(40))
    assert map_items(lambda x: x * x, items, 2) == [x * x for x in items]
    assert map_items(lambda x: x + 1, items[:3], 2) == [1, 2, 3]


def test_jobs_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("ARGUS_JOBS", "3")
    assert env.jobs() == 3
    monkeypatch.setenv("ARGUS_JOBS", "many")
    with pytest.raises(ValueError, match="ARGUS_JOBS='many' is not a whole number"):
        env.jobs()
    monkeypatch.setenv("ARGUS_JOBS", "0")
    with pytest.raises(ValueError, match="at least 1"):
        env.jobs()
    with pytest.raises(ValueError, match="jobs=0"):
        verify(library()["gemm"].kernel, jobs=0)


def test_the_collector_is_paused_only_while_verifying():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


# ------------------------------------------------------------------- z3 lowering


def _folded(e, point):
    term, width = native.lower(e)
    at_point = [(native.symbol(v), z3.BitVecVal(point[v.name], native.width_of(v)))
                for v in VARS if v in _vars(e)]
    value = z3.simplify(z3.substitute(term, *at_point)) if at_point else z3.simplify(term)
    return value.as_signed_long(), width


def _vars(e):
    from argus.ir.expr import free_vars

    return free_vars(e)


@given(int_exprs, st.data())
def test_each_subterm_lowers_to_its_value_at_its_own_width(e, data):
    point = {v.name: data.draw(st.integers(v.lo, v.hi - 1), label=v.name) for v in VARS}
    value, width = _folded(e, point)
    assert value == evaluate(e, point), f"{e} at {point}"
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    assert lo <= value <= hi


@given(risky_exprs, st.data())
def test_risky_terms_lower_exactly_where_they_are_defined(e, data):
    point = {v.name: data.draw(st.integers(v.lo, v.hi - 1), label=v.name) for v in VARS}
    try:
        expected = evaluate(e, point)
    except (ZeroDivisionError, ValueError):
        return
    assert _folded(e, point)[0] == expected, f"{e} at {point}"


def test_lane_formulas_stay_narrow_next_to_wide_sizes():
    lane, size = Var("lane", 0, 64), Var("S", 1, 2**31)
    assert native.width_of(lane) == 8
    assert native.lower((lane // 32) * 4 + lane % 4)[1] <= 9
    assert native.lower(size * 128 + lane)[1] >= 40


def test_z3_paths_agree_on_a_mixed_width_query():
    lane, size = Var("lane", 0, 64), Var("S", 1, 2**31)
    from argus.smt import prove

    assert prove((size * 64 + lane) // 64 >= size - 1) == Proved()
    verdict = prove(ite(lane < 32, size, -size) * 2 < size, minimize=[lane, size])
    assert isinstance(verdict, Refuted) and verdict.witness == {"lane": 0, "S": 1}


def _die_on_seven(x):
    if x == 7:
        os._exit(3)  # a worker killed mid-task, as by the kernel's out-of-memory killer
    return x


def test_a_dead_worker_costs_its_items_not_the_run():
    import threading

    # in-process, _die_on_seven would end the test run itself
    assert can_fork(), f"threads left running by an earlier test: {threading.enumerate()}"
    items = list(range(20))
    answers = map_items(_die_on_seven, items, 2, lost=lambda item, reason: ("lost", reason))
    # only the item whose worker died is answered by `lost`; a fresh worker takes the rest
    assert all(a == i for a, i in zip(answers, items) if i != 7)
    assert answers[7][0] == "lost" and "worker process died" in answers[7][1]
    with pytest.raises(RuntimeError, match="worker process died"):
        map_items(_die_on_seven, items, 2)


def test_no_fork_while_other_threads_run():
    import threading

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not can_fork()
        assert map_items(lambda x: x + 1, range(30), 2) == list(range(1, 31))
    finally:
        stop.set()
        thread.join()
    assert can_fork()


def test_small_factors_of_products_are_split_on_and_verdicts_stay_exact():
    split, size = Var("wg2", 0, 4), Var("K", 1, 2**31)
    offset = split * (size >> 7) * 32
    query_goal = offset + 31 < (split + 1) * (size >> 7) * 32
    assumptions = [(size % 128).eq(0)]
    from argus.smt import prove
    from argus.smt.solve import _Query

    assert native._case_splits(_Query(query_goal, assumptions)) == \
        [[(split, value)] for value in range(4)]
    assert prove(query_goal, assumptions) == Proved()
    # one off: fails at the smallest K, in every split
    wrong = offset + 32 < (split + 1) * (size >> 7) * 32
    verdict = prove(wrong, assumptions, minimize=[size, split])
    assert isinstance(verdict, Refuted) and verdict.witness == {"K": 128, "wg2": 0}
    assert prove(wrong, assumptions, solver="cvc5", minimize=[size, split]) == verdict


def test_workgroup_ids_range_over_the_grid_when_it_is_declared_first():
    from argus.ir import ops as O
    from argus.kernels.gemm import gemm

    pids = {op.var.name: op.var for op in gemm.trace(split_k=4).ops()
            if isinstance(op, O.ProgramId)}
    assert pids["wg2"].hi == 4
    assert pids["wg0"].hi == (2**31 - 1) // 64


def test_obligations_decided_during_the_walk_give_the_same_report(monkeypatch):
    import argus.absint.obligations as V

    monkeypatch.setattr(V, "EARLY_BATCH", 1)  # a child per op boundary, as far as cores allow
    started = []
    real_start = Q.decide_in_background

    def counting(*args, **kwargs):
        started.append(1)
        return real_start(*args, **kwargs)

    monkeypatch.setattr(Q, "decide_in_background", counting)
    kernel = library()["attention_fwd"].kernel
    Q.clear_cache()
    alone = verify(kernel, causal=True, jobs=1)
    Q.clear_cache()
    overlapped = verify(kernel, causal=True, jobs=2)
    assert started, "no obligation was decided during the walk"
    assert [(o.kind, o.message, o.loc, o.verdict) for o in overlapped.obligations] == \
        [(o.kind, o.message, o.loc, o.verdict) for o in alone.obligations]


def test_refutations_decided_during_the_walk_are_replayed(monkeypatch):
    import sys
    from pathlib import Path

    import argus.absint.obligations as V

    monkeypatch.setattr(V, "EARLY_BATCH", 1)
    sys.path.insert(0, str(Path(__file__).parent / "bugs"))
    import bug_11_causal_mask_transposed as bug

    Q.clear_cache()
    report = verify(bug.KERNEL, jobs=2)
    refuted = [o for o in report.obligations if o.verdict == "refuted"]
    assert refuted and all(o.counterexample.confirmed for o in refuted)


def _raise_on_three(x):
    if x == 3:
        raise ValueError("three is not allowed")
    return x


def _exit_now(_x):
    os._exit(5)


def test_a_background_batch_returns_answers_errors_and_deaths():
    from argus.absint.parallel import Batch

    def lost(item, reason):
        return ("lost", reason)

    assert Batch(lambda x: x * 2, [1, 2, 3], lost).results() == [2, 4, 6]
    with pytest.raises(ValueError, match="three is not allowed"):
        Batch(_raise_on_three, [1, 3], lost).results()
    died = Batch(_exit_now, [1, 2], lost).results()
    assert [d[0] for d in died] == ["lost", "lost"] and "exit code 5" in died[0][1]


def test_a_refutation_decided_in_the_background_names_the_obligations_own_variables():
    helper = fresh_var("hslot", 0, 8)
    lane = Var("lane", 0, 64)
    Q.clear_cache()
    pending = Q.decide_in_background(
        [Q.canonical((helper + lane) < 70, [], ["lane", helper.name])], "z3", 10_000)
    [(verdict, _)] = pending.finish()
    assert isinstance(verdict, Refuted) and verdict.witness == {"lane": 63, helper.name: 7}
    # and it is kept: the same obligation under other helper names is answered from the cache
    other = fresh_var("hslot", 0, 8)
    again = Q.decide_in_background(
        [Q.canonical((other + lane) < 70, [], ["lane", other.name])], "z3", 10_000)
    assert again.batch is None
    assert again.finish()[0][0].witness == {"lane": 63, other.name: 7}

"""Program rewrites as search moves: where they apply, what they change in the IR, that the
verifier decides the ones that are not always legal, that a refutation's counterexample maps
to a repair that verifies, graded credit, and the experience store that warm-starts priors."""

import attrs
import pytest

import argus
from argus.ir import ops as O
from argus.kernels.gemm import gemm
from argus.search.evaluate import REFUTED, Evaluation
from argus.search.experience import Experience, shape_class
from argus.search.planners.offline import OfflinePlanner, graded_credit
from argus.search.repair import repairs
from argus.search.rewrites import REWRITES, RewriteError, apply_rewrites, offered
from argus.search.space import Candidate, Problem, default_candidate

GEMM = Problem("gemm", {"M": 1024, "N": 1024, "K": 1024})


def lds_bytes(kernel) -> int:
    return sum(op.result.type.nbytes for op in kernel.ops() if isinstance(op, O.LdsAlloc))


def barriers(kernel) -> int:
    return sum(isinstance(op, O.Barrier | O.BarrierNoWait) for op in kernel.ops())


def test_rewrites_find_their_sites_and_change_the_ir():
    ir = gemm.trace(block_m=64, block_n=64, block_k=32)
    names = {name for name, _ in offered(ir)}
    assert {"unroll_loop", "grow_ring", "grow_rings", "shrink_ring", "drop_barrier",
            "unswizzle_reads", "transpose_grid"} <= names
    assert "swizzle_stores" not in names  # its buffers are swizzled already
    assert not any(REWRITES[n].repair for n in names)
    grown = apply_rewrites(ir, [("grow_rings", (0,))])
    assert lds_bytes(grown) == 2 * lds_bytes(ir)
    single = apply_rewrites(ir, [("shrink_ring", (0,))])
    assert lds_bytes(single) == lds_bytes(ir) * 3 // 4
    assert barriers(apply_rewrites(ir, [("drop_barrier", (1,))])) == barriers(ir) - 1
    swapped = apply_rewrites(ir, [("transpose_grid", (0,))])
    assert swapped.grid == (ir.grid[1], ir.grid[0])
    loop = next(op for op in apply_rewrites(ir, [("unroll_loop", (0,))]).ops()
                if isinstance(op, O.For))
    assert loop.unroll == 2


def test_a_swizzle_only_the_writer_applies_is_mended_by_the_readers():
    ir = gemm.trace(block_m=64, block_n=64, block_k=32, swizzle=False)
    assert ("swizzle_stores", (0,)) in offered(ir)
    half = apply_rewrites(ir, [("swizzle_stores", (0,))])
    assert ("swizzle_reads", (0,)) in offered(half, repairs=True)
    mended = apply_rewrites(half, [("swizzle_reads", (0,))])
    buffer = next(op.result for op in mended.ops() if isinstance(op, O.LdsAlloc))
    maps = {op.addr for op in mended.ops()
            if isinstance(op, O.LdsLoad | O.LdsStore) and op.buffer == buffer}
    assert len(maps) == 1 and "^" in str(next(iter(maps)).offset)


def test_a_rewrite_that_does_not_apply_is_an_error_naming_it():
    ir = gemm.trace(block_m=64, block_n=64, block_k=32)
    with pytest.raises(RewriteError, match="no number 7"):
        apply_rewrites(ir, [("drop_barrier", (7,))])
    with pytest.raises(RewriteError, match="choose one of"):
        apply_rewrites(ir, [("fold_everything", (0,))])
    big = gemm.trace(block_m=128, block_n=128, block_k=64)
    with pytest.raises(RewriteError, match="64 KiB"):
        apply_rewrites(big, [("grow_rings", (0,))])


def test_candidates_carry_rewrites_and_keep_old_keys_without():
    plain = default_candidate(GEMM)
    assert plain.key == Candidate(plain.family, plain.params).key
    rewritten = attrs.evolve(plain, rewrites=[["drop_barrier", [1]]])
    assert rewritten.rewrites == (("drop_barrier", (1,)),)
    assert rewritten.key != plain.key and "+drop_barrier@1" in rewritten.describe()
    assert Candidate.from_dict(rewritten.to_dict()) == rewritten
    assert "rewrites" not in plain.to_dict()


def test_graded_credit_is_the_reward_not_a_bit():
    assert graded_credit(None, 1.0) == 0.0
    assert graded_credit(1.0, None) == 0.5
    assert graded_credit(0.5, 1.0) == 0.0
    assert 0 < graded_credit(1.0, 1.0) < graded_credit(1.05, 1.0) < graded_credit(1.2, 1.0)
    assert graded_credit(2.0, 1.0) == 1.0


def test_experience_warm_starts_priors_and_fresh_planners_ignore_it(tmp_path):
    path = tmp_path / "gemm.jsonl"
    memory = Experience(path, "gemm")
    here = shape_class("gemm", GEMM.sizes)
    assert here != shape_class("gemm", {"M": 8192, "N": 256, "K": 4096})
    for _ in range(4):
        memory.append({"run": "old", "shape_class": here, "move": "grow_m", "credit": 1.0,
                       "status": "ok", "counterexample": ""})
        memory.append({"run": "old", "shape_class": here, "move": "rw:drop_barrier",
                       "credit": 0.0, "status": REFUTED, "counterexample": "lds-race"})
    reread = Experience(path, "gemm")
    assert len(reread.rows) == 8 and reread.failures(here) == {"rw:drop_barrier":
                                                                {"lds-race": 4}}
    warm = OfflinePlanner(GEMM, 0, experience=reread, learn=False)
    cold = OfflinePlanner(GEMM, 0)
    assert warm.value("grow_m") > cold.value("grow_m")
    assert warm.value("rw:drop_barrier") < cold.value("rw:drop_barrier")
    # another shape class learns from it too, at a quarter of the weight
    far = Problem("gemm", {"M": 8192, "N": 256, "K": 4096})
    between = OfflinePlanner(far, 0, experience=reread).value("grow_m")
    assert OfflinePlanner(far, 0).value("grow_m") < between < warm.value("grow_m")


def test_a_new_shape_starts_at_the_points_near_the_best_at_every_past_shape(tmp_path):
    """Past runs at two shapes: tile X is the best at one and poor at the other, tile Y second
    at both. A run at a third shape class starts at Y (then X), one point per tile."""
    memory = Experience(tmp_path / "gemm.jsonl", "gemm")
    base = default_candidate(GEMM).param_dict
    x = Candidate("gemm", {**base, "block_m": 128, "block_n": 128})
    x16 = Candidate("gemm", {**x.param_dict, "block_k": 64})
    y = Candidate("gemm", {**base, "block_m": 64, "block_n": 128})
    for sizes, rewards in (({"M": 2048, "N": 2048, "K": 2048}, (2.0, 1.99, 1.9)),
                           ({"M": 8192, "N": 1024, "K": 2048}, (1.0, 1.0, 1.8))):
        for candidate, reward in zip((x, x16, y), rewards, strict=True):
            memory.append({"run": str(sizes), "shape_class": shape_class("gemm", sizes),
                           "sizes": sizes, "move": "optuna", "credit": 0.5, "status": "ok",
                           "reward": reward, "candidate": candidate.to_dict()})
    assert memory.robust(2) == [y.to_dict(), x.to_dict()]
    far = Problem("gemm", {"M": 4096, "N": 4096, "K": 4096})
    assert memory.starts(far, 3)[:2] == [y, x]  # x16 is another tile: after both
    assert x16 in memory.starts(far, 3)


def _proposal_after_a_refuted_swizzle(planner, state, base):
    """The planner's next proposal once `base` with its stores swizzled (and its reads not)
    came back refuted at the MFMA's tag assertion, and that refuted candidate."""
    bad = attrs.evolve(base, rewrites=(("swizzle_stores", (0,)),))
    obligation = {"kind": "tag-assertion", "loc": "argus/kernels/gemm.py:107:13",
                  "text": "A and B meet at one k", "counterexample": {"detail": ""}}
    refuted = Evaluation(bad.key, bad, REFUTED, "verify", "tag-assertion",
                         counterexamples=(obligation,), move="rw:swizzle_stores")
    state.evaluations.append(refuted)
    planner.observe([refuted])
    return planner.propose(state, 1)[0], bad


def test_the_verifier_refutes_a_dropped_barrier_and_the_repair_verifies():
    """The direct-to-LDS GEMM's second barrier per K tile only keeps the next copy from
    overwriting the slot being read: dropping it is refuted with the race, and the repair the
    counterexample names first (deeper rings: both operands' copies race) is proved without
    the barrier."""
    problem = Problem("gemm", {"M": 1024, "N": 1024, "K": 1024}, {"direct_lds": True})
    base = default_candidate(problem)
    ir = gemm.trace(direct_lds=True)
    dropped = apply_rewrites(ir, [("drop_barrier", (1,))])
    report = argus.verify(dropped)
    assert report.refuted and report.refuted[0].kind == "lds-race"
    assert report.refuted[0].counterexample.confirmed
    from argus.search.evaluate import _obligation

    refuted = attrs.evolve(base, rewrites=(("drop_barrier", (1,)),))
    found = repairs(dropped, refuted, [_obligation(o) for o in report.refuted[:3]])
    assert found[0].rewrite == "grow_rings" and found[0].kind == "lds-race"
    assert any(r.rewrite == "insert_barrier" for r in found)
    mended = apply_rewrites(ir, found[0].candidate.rewrites)
    assert barriers(mended) == barriers(ir) - 1
    again = argus.verify(mended)
    assert not again.refuted and not again.unknown and again.proved_for_all_sizes


def test_the_planner_queues_repairs_first_after_a_refutation():
    problem = Problem("gemm", {"M": 1024, "N": 1024, "K": 1024}, {"swizzle": False})
    base = default_candidate(problem)
    events = []
    planner = OfflinePlanner(problem, 0, legal=lambda c: "", log=events.append)
    from argus.search.planners import SearchState

    state = SearchState(problem, [Evaluation(base.key, base, "ok", "reward", reward=1.0)])
    planner.observe(state.evaluations)
    proposal, bad = _proposal_after_a_refuted_swizzle(planner, state, base)
    assert proposal.move == "repair:swizzle_reads"
    assert proposal.candidate.rewrites == (("swizzle_stores", (0,)), ("swizzle_reads", (0,)))
    assert events[-1]["kind"] == "repair-proposed"
    assert events[-1]["counterexample"]["kind"] == "tag-assertion"
    ok = Evaluation(proposal.candidate.key, proposal.candidate, "ok", "reward", reward=1.0,
                    move=proposal.move)
    state.evaluations.append(ok)
    planner.observe([ok])
    assert events[-1]["kind"] == "repair" and events[-1]["verdict"] == "ok"
    assert events[-1]["refuted"] == bad.key


def _run(problem, seed, experience=None, learn=False, budget=40):
    from fakes.landscape import Landscape

    from argus.search.budget import Budget
    from argus.search.loop import run
    from argus.search.planners import SearchState
    from argus.search.workers import InlineWorkers

    class Log:  # the trajectory is all this test reads; no run file
        def append(self, event):
            pass

        def record(self, evaluation):
            pass

    state = SearchState(problem)
    planner = OfflinePlanner(problem, seed, legal=lambda c: "", experience=experience,
                             learn=learn, rewrites=False, run=f"{problem.shape}-{seed}")
    run(state, planner, InlineWorkers(Landscape()), Log(), Budget(budget))
    rewards = [e.reward for e in state.evaluations]
    return next((n for n, r in enumerate(rewards, 1) if r == 1.0), budget + 1)


def test_experience_from_other_shapes_shortens_the_search(tmp_path):
    """Priors learned on two shapes reach the landscape's peak on a third shape (another shape
    class) in fewer evaluations on average than fresh runs with the same seeds."""
    memory = Experience(tmp_path / "gemm.jsonl", "gemm")
    for sizes in ({"M": 4096, "N": 4096, "K": 4096}, {"M": 2048, "N": 8192, "K": 1024}):
        for seed in range(3):
            _run(Problem("gemm", sizes), 50 + seed, memory, learn=True)
    assert memory.rows and {r["move"] for r in memory.rows} >= {"default"}
    target = Problem("gemm", {"M": 512, "N": 512, "K": 8192})
    assert shape_class("gemm", target.sizes) not in {r["shape_class"] for r in memory.rows}
    warm = [_run(target, seed, memory) for seed in range(4)]
    cold = [_run(target, seed) for seed in range(4)]
    assert sum(warm) < sum(cold), (warm, cold)


def test_the_live_view_and_the_report_show_a_refutation_and_its_repair():
    """What a user of `argus tune` sees of counterexample-guided repair: the live panel names
    the refuted candidate (with its rewrites) and its counterexample's kind and program point,
    and counts the repairs; `--report` shows candidate -> counterexample -> repair -> verdict."""
    from rich.console import Console

    from argus.search.budget import Budget, Clock
    from argus.search.loop import Progress
    from argus.search.planners import SearchState
    from argus.search.view import failures_table, live_panel, report

    base = default_candidate(GEMM)
    bad = attrs.evolve(base, rewrites=(("drop_barrier", (1,)),))
    fixed = attrs.evolve(bad, rewrites=(*bad.rewrites, ("grow_rings", (0,))))
    race = {"kind": "lds-race", "loc": "argus/kernels/gemm.py:136:9", "text": "lds-race ..."}
    evaluations = [
        Evaluation(bad.key, bad, REFUTED, "verify", "lds-race", counterexamples=(race,),
                   move="rw:drop_barrier"),
        Evaluation(fixed.key, fixed, "ok", "reward", time_us=9.0, reward=1.2,
                   reference={"name": "default", "time_us": 10.8}, move="repair:grow_rings")]
    console = Console(record=True, width=400)
    budget = Budget(8)
    console.print(live_panel(Progress(SearchState(GEMM, evaluations), budget,
                                      Clock(budget, done=2))))
    console.print(failures_table(evaluations))
    shown = console.export_text()
    assert f"{bad.describe()}: lds-race at argus/kernels/gemm.py:136:9" in shown
    assert "1 tried, 1 past the verifier; latest repair:grow_rings -> ok" in shown
    assert "+drop_barrier@1" in shown.split("rejected candidates")[1]
    events = [{"kind": "run", "problem": GEMM.to_dict(), "planner": "offline",
               "budget": {"evaluations": 8}},
              *({"kind": "eval", "evaluation": e.to_dict()} for e in evaluations),
              {"kind": "repair", "refuted": bad.key, "counterexample": race,
               "repair": {"rewrite": "grow_rings", "site": [0]}, "verdict": "ok"}]
    console = Console(record=True, width=400)
    console.print(report(events))
    assert (f"repair: {bad.key} refuted (lds-race at argus/kernels/gemm.py:136:9) -> "
            "grow_rings@[0] -> ok") in console.export_text()


@pytest.mark.parametrize("modelled_us, repaired", [(0.5, True), (2.0, False)])
def test_a_repair_the_model_times_no_faster_than_the_best_is_not_evaluated(modelled_us,
                                                                           repaired):
    """With a pre-screen, a repair costs a model timing before it costs a full evaluation: one
    the model times no faster than the best result cannot become the best (its reward is that
    modelled time), so it is logged as skipped instead of proposed."""
    from argus.search.planners import SearchState
    from argus.search.screen import Screened

    class Model:  # a pre-screen that has run: no ranking, one time for every look
        wall = 0.0

        def run(self):
            return []

        def time(self, candidate):
            return Screened(candidate, modelled_us)

    problem = Problem("gemm", {"M": 1024, "N": 1024, "K": 1024}, {"swizzle": False})
    base = default_candidate(problem)
    events = []
    planner = OfflinePlanner(problem, 0, legal=lambda c: "", log=events.append, screen=Model())
    state = SearchState(problem, [Evaluation(base.key, base, "ok", "reward", time_us=1.0,
                                             reward=1.0, reference={"name": "default",
                                                                    "time_us": 1.0})])
    planner.observe(state.evaluations)
    proposal, bad = _proposal_after_a_refuted_swizzle(planner, state, base)
    assert proposal.move.startswith("repair:") == repaired
    kinds = [e["kind"] for e in events]
    assert ("repair-skipped" in kinds) != repaired
    assert (state.repairs_skipped > 0) != repaired
    if not repaired:
        from rich.console import Console

        from argus.search.budget import Budget, Clock
        from argus.search.loop import Progress
        from argus.search.view import live_panel

        console = Console(record=True, width=400)
        console.print(live_panel(Progress(state, Budget(8), Clock(Budget(8), done=2))))
        assert (f"repairs      {state.repairs_skipped} not tried (the model times them no "
                "faster than the best)") in console.export_text()
        skipped = next(e for e in events if e["kind"] == "repair-skipped")
        assert skipped["modelled_us"] == 2.0 and skipped["best_us"] == 1.0
        assert skipped["refuted"] == bad.key
        assert not proposal.candidate.rewrites  # the knob moves go on, no rewrite is beaten


def test_a_regrid_is_proved_and_one_that_misses_the_epilogue_is_refuted_then_repaired():
    """The wave-grid move rewrites the GEMM's DSL program (its 4 waves tiled 4x1 instead of
    2x2 over each MFMA block): applied where the tile holds whole blocks of the new grid, it
    changes the LDS fragment reads and is proved. The same move on the main loop alone leaves
    the epilogue storing tiles where the old grid computed them: the verifier refutes it at
    the store with a confirmed counterexample, which maps to the repair `regrid_epilogue`,
    whose program is the proved one."""
    from argus.kernels import MFMA_16, MFMA_32
    from argus.search.evaluate import Evaluator, _obligation
    from argus.search.rewrites import trace_sites, with_rewrite

    problem = Problem("gemm", {"M": 1024, "N": 1024, "K": 1024})
    params = {"block_m": 64, "block_n": 64, "block_k": 32, "instr": MFMA_16}
    assert ("regrid", (4, 1)) in trace_sites("gemm", params, ())
    # the precondition: 4 x 32 rows of 32x32 blocks do not divide a 64-row tile
    assert ("regrid", (4, 1)) not in trace_sites("gemm", {**params, "instr": MFMA_32}, ())
    base = Candidate("gemm", params)
    evaluator = Evaluator(problem)
    plain = evaluator._trace(base)
    regridded = evaluator._trace(attrs.evolve(base, rewrites=(("regrid", (4, 1)),)))

    def reads(kernel):
        return sum(isinstance(op, O.LdsLoad) for op in kernel.ops())

    assert reads(regridded) == reads(plain) * 10 // 8  # 1 A + 4 B fragments, not 2 + 2
    proved = argus.verify(regridded)
    assert not proved.refuted and not proved.unknown and proved.proved_for_all_sizes

    half = attrs.evolve(base, rewrites=(("regrid_mainloop", (4, 1)),))
    ir = evaluator._trace(half)
    report = argus.verify(ir)
    assert report.refuted and report.refuted[0].counterexample.confirmed
    obligations = [_obligation(o) for o in report.refuted[:3]]
    assert obligations[0]["kind"] in ("tag-assertion", "out-of-bounds")
    found = repairs(ir, half, obligations)
    assert found[0].rewrite == "regrid_epilogue" and found[0].site == (4, 1)
    assert found[0].candidate.rewrites == with_rewrite(half.rewrites, "regrid_epilogue", (4, 1))
    assert str(evaluator._trace(found[0].candidate)) == str(regridded)
    with pytest.raises(RewriteError, match="does not apply"):  # no epilogue to mend
        from argus.search.rewrites import trace_hooks

        trace_hooks("gemm", params, (("regrid_epilogue", (4, 1)),))


def test_a_pingpong_is_proved_and_one_that_stages_past_the_barrier_is_refuted_then_repaired():
    """The ping-pong move splits the 4 waves into two groups that store the next K tile's
    share into LDS before and after their MFMAs (a program rewrite: each group's stores under
    its exec mask), proved for every size. Its variant whose late group stores past the loop's
    barrier loses the handoff to the next iteration's readers: refuted with a confirmed LDS
    race, which maps first to `pingpong_handoff` (the proved program) and also to a barrier
    after those stores."""
    from argus.search.evaluate import Evaluator, _obligation
    from argus.search.rewrites import trace_hooks, trace_sites

    problem = Problem("gemm", {"M": 1024, "N": 1024, "K": 1024})
    params = {"block_m": 64, "block_n": 64, "block_k": 32, "prefetch": 2}
    assert ("pingpong", (2,)) in trace_sites("gemm", params, ())
    # with the loads one K tile ahead, the early group's stores would wait for them
    assert ("pingpong", (2,)) not in trace_sites("gemm", {**params, "prefetch": 1}, ())
    base = Candidate("gemm", params)
    evaluator = Evaluator(problem)
    plain = evaluator._trace(base)
    split = evaluator._trace(attrs.evolve(base, rewrites=(("pingpong", (2,)),)))

    def grouped_stores(kernel):
        return sorted(str(op.active) for op in kernel.ops() if isinstance(op, O.LdsStore)
                      and str(op.active) != "True")

    assert not grouped_stores(plain)
    assert grouped_stores(split) == ["wave < 2"] * 2 + ["wave >= 2"] * 2
    assert barriers(split) == barriers(plain)
    proved = argus.verify(split)
    assert not proved.refuted and not proved.unknown and proved.proved_for_all_sizes

    late = attrs.evolve(base, rewrites=(("pingpong_late", (2,)),))
    ir = evaluator._trace(late)
    report = argus.verify(ir)
    assert report.refuted and report.refuted[0].kind == "lds-race"
    assert report.refuted[0].counterexample.confirmed
    found = repairs(ir, late, [_obligation(o) for o in report.refuted[:3]])
    assert found[0].rewrite == "pingpong_handoff" and found[0].kind == "lds-race"
    assert str(evaluator._trace(found[0].candidate)) == str(split)
    assert any(r.rewrite == "insert_barrier" for r in found)
    with pytest.raises(RewriteError, match="does not apply"):  # no late group to hand over
        trace_hooks("gemm", params, (("pingpong_handoff", (2,)),))

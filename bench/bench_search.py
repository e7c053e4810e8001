"""An honest planner benchmark: priors learned on some GEMM shapes, evaluated on others.

The space: the GEMM's tiles, block_k, split-K, prefetch depth and MFMA instruction (the LDS
swizzle and the schedule pinned; 256 knob points once the 320 the family declares infeasible
are left out: LDS past 64 KiB, copies narrower than a thread's 16 bytes, 256x256 accumulators
past the registers) in six program variants each: the wave grid as written (2x2) or regridded
4x1 or 1x4 (the trace-level `regrid` rewrite, where the tile holds whole blocks of the new
grid), each as written or with both LDS rings deepened from 2 to 4 slots (`grow_rings`, where
the deeper rings fit the LDS). A variant whose rewrite precondition fails is outside the space
(the table lists it as "precondition"). The ping-pong wave split (`pingpong`) is not among the
variants: the model times it slower than the plain program at each of the six tiles timed (see
docs/how-to/tune.md), and it would add half as many points again to a table that takes most of
an hour; a planner proposing it is told the point is outside the space, for free. Every point
is traced, compiled and timed by the MI300X performance model at four shapes (figures are
modelled, not measured), once, and cached in
ARGUS_CACHE/bench_search keyed by the space and the sources of the kernels, the backend and
the model.

Training: the offline planner runs on the TRAIN shapes (several seeds) with an empty experience
store, which it fills. Test, on the held-out TEST shapes, at least 10 seeds each: the planner
warm-started from that store (frozen: it does not learn during the test), the same planner
fresh (knowledge-base priors only), random search without replacement, and optuna's TPE alone
over the same candidates (knobs plus the variant as a categorical). The warm-started
planner against the fresh one is the experience store's transfer to a new shape. Reported:
evaluations to reach 95% of the exhaustive best's modelled throughput, median and mean, a miss
counting budget + 1, and the ratios against random search; the lines say where the planner
loses.

The bench replays candidates against the cached modelled times: verification and emulation,
which the real loop runs per candidate, are not repeated here (the library kernels and the
`grow_rings` variant are proved in the test suite). A point that does not trace at the shape
(or lies outside the bench's space) is pruned for free, as the real loop's precheck does; one
the backend or the model rejects is a spent evaluation. `--repairs` prints the repair figure
instead: seeded illegal rewrites through the planner's counterexample-guided repair, verified.
`--parity` runs the real `argus tune` (model-only pre-screen, then every counted candidate
verified, checked in the interpreter and the emulator, and timed) at the default budget of 8 per
shape and prints the modelled ratio to AMD's fastest kernel it reached.
Run: python bench/bench_search.py [--seeds 10] [--train-seeds 4] [--budget 64] [--jobs 2]
     [--swap] [--json PATH];  python bench/bench_search.py --repairs;
     python bench/bench_search.py --parity [--shapes 1024x1024x1024,4096x4096x4096]
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import random
import statistics
import time
from collections import Counter
from pathlib import Path

import click

import argus
from argus import env
from argus.search.budget import Budget
from argus.search.evaluate import INVALID, OK, Evaluation, compile_params
from argus.search.loop import run
from argus.search.planners import SearchState
from argus.search.planners.offline import OfflinePlanner
from argus.search.space import Candidate, Problem, default_candidate, every_candidate
from argus.search.store import Store
from argus.search.workers import InlineWorkers

#: the bench's share of the GEMM space: tiles, block_k, split-K and the MFMA instruction free,
#: the LDS swizzle and the schedule pinned to their defaults (with them free, the table would
#: take hours to compile on this shared 2-core machine)
GEMM_SPACE = {"swizzle": True, "policy": "interleave"}
TRAIN = (
    Problem("gemm", {"M": 1024, "N": 1024, "K": 1024}, GEMM_SPACE),
    Problem("gemm", {"M": 4096, "N": 4096, "K": 4096}, GEMM_SPACE),
)
TEST = (
    Problem("gemm", {"M": 2048, "N": 2048, "K": 2048}, GEMM_SPACE),
    Problem("gemm", {"M": 8192, "N": 1024, "K": 2048}, GEMM_SPACE),
)
TARGET = 0.95
GOAL = 64


def _why(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"


def _time_point(job: tuple[Candidate, list[Problem]]) -> list[dict]:
    """One point at each problem's shape: {"time_us", "stage", "why", "facts"}; traced and
    compiled once, timed at each shape whose size assumptions it meets. `stage` is where a
    point without a time stopped: trace (the real loop prunes it for free) | compile | time."""
    from argus.ir.ops import resources
    from argus.search.evaluate import Evaluator, kernel_params, timing_facts
    from argus.search.rewrites import RewriteError, apply_rewrites, trace_rewritten
    from argus.search.space import family

    candidate, problems = job
    name = problems[0].family
    try:  # the candidate's rewrites applied; a rewrite whose precondition fails is no point
        ir = apply_rewrites(trace_rewritten(family(name), name, kernel_params(candidate),
                                            candidate.rewrites), candidate.rewrites)
    except RewriteError as err:
        return [{"time_us": None, "stage": "precondition", "why": _why(err)}] * len(problems)
    except Exception as err:  # the point does not trace
        return [{"time_us": None, "stage": "trace", "why": _why(err)}] * len(problems)
    fitting = []
    for problem in problems:
        try:
            Evaluator(problem)._fits(ir)
            fitting.append("")
        except Exception as err:  # evaluate's _Stop: the shape breaks a size assumption
            fitting.append(str(err))
    unfit = [{"time_us": None, "stage": "trace", "why": why} for why in fitting]
    if all(fitting):
        return unfit
    try:
        compiled = argus.compile(ir, verify=False, **compile_params(candidate))
    except (ValueError, RuntimeError) as err:
        failed = {"time_us": None, "stage": "compile", "why": _why(err)}
        return [row if why else failed for row, why in zip(unfit, fitting, strict=True)]
    out = []
    for problem, row in zip(problems, unfit, strict=True):
        if row["why"]:
            out.append(row)
            continue
        try:
            timing = argus.time(compiled, sizes=problem.sizes)
        except (ValueError, RuntimeError) as err:
            out.append({"time_us": None, "stage": "time", "why": _why(err)})
            continue
        out.append({"time_us": timing.microseconds, "stage": "time", "why": "", "facts": {
            **resources(ir), **compiled.resources, **timing_facts(timing)}})
    return out


def _time_job(job: tuple[Candidate, list[Problem]]) -> tuple[Candidate, list[dict]]:
    return job[0], _time_point(job)


def _sources_digest() -> str:
    """The content of what the table depends on (kernels, backend, performance model), so a
    change to any of them times the points again."""
    root = Path(argus.__file__).parent
    digest = hashlib.sha256()
    for folder in ("kernels", "asm/lower", "isa_cdna3/perf", "isa_cdna3/emu", "vendor"):
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".py", ".json"):
                digest.update(path.read_bytes())
    for module in ("pipeline.py", "timing.py"):     # the road's time stage, argus.time
        digest.update((root / module).read_bytes())
    return digest.hexdigest()


#: the program variants every knob point comes in: the wave grid 2x2 as written, 4x1 or 1x4
#: (the trace-level `regrid` rewrite), each as written or with both LDS rings grown from 2 to 4
#: slots (the `grow_rings` rewrite of the traced IR); both proved in
#: tests/test_search_rewrites.py, not re-verified per point here
GRIDS = ((), (("regrid", (4, 1)),), (("regrid", (1, 4)),))
RINGS = ((), (("grow_rings", (0,)),))
VARIANTS = tuple((*g, *r) for g in GRIDS for r in RINGS)


def points(problem: Problem) -> list[Candidate]:
    """The bench's space: every feasible knob point of the problem (the family's declared
    infeasible ones left out) in every program variant whose trace-level rewrites' precondition
    holds there (the IR rewrites' preconditions are read from the IR: the table marks a point
    whose precondition fails as "precondition", outside the space)."""
    import attrs

    from argus.search.rewrites import RewriteError, trace_hooks

    out = []
    for c in every_candidate(problem):
        for v in VARIANTS:
            try:
                trace_hooks(problem.family, c.param_dict, v)
            except RewriteError:
                continue
            out.append(attrs.evolve(c, rewrites=v))
    return out


def _cache_path(problem: Problem) -> Path:
    points_ = sorted(c.key for c in points(problem))
    space = json.dumps([problem.to_dict(), points_, _sources_digest()], sort_keys=True)
    digest = hashlib.sha256(space.encode()).hexdigest()[:12]
    return env.cache_dir() / "bench_search" / f"{problem.family}-{problem.shape}-{digest}.json"


def exhaustive(problems: list[Problem], jobs: int, echo) -> dict[Problem, dict[str, dict]]:
    """Every point of each problem's declared space, with its modelled time at the shape or why
    there is none; problems of one family share the tracing and compilation of a point."""
    tables = {p: json.loads(_cache_path(p).read_text()) for p in problems
              if _cache_path(p).is_file()}
    todo = [p for p in problems if p not in tables]
    if not todo:
        return tables
    union: dict[str, Candidate] = {}
    for p in todo:
        union.update((c.key, c) for c in points(p))
    # points are kept as they are timed, so an interrupted table resumes where it stopped
    key = hashlib.sha256(json.dumps([_cache_path(p).name for p in todo]).encode()).hexdigest()
    partial = env.cache_dir() / "bench_search" / f"partial-{key[:12]}.jsonl"
    timed: dict[str, list] = {}
    if partial.is_file():
        for line in partial.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # torn last line
            timed[row["key"]] = row["rows"]
    left = [c for k, c in union.items() if k not in timed]
    echo(f"  timing {len(left)} of {len(union)} {todo[0].family} points at {len(todo)} "
         f"shape(s) ({jobs} processes; kept in {partial} as they are timed)")
    started = time.perf_counter()
    partial.parent.mkdir(parents=True, exist_ok=True)
    with multiprocessing.get_context("spawn").Pool(jobs) as pool, \
            open(partial, "a", encoding="utf-8") as handle:
        for done, (candidate, rows) in enumerate(pool.imap_unordered(
                _time_job, [(c, todo) for c in left]), 1):
            timed[candidate.key] = rows
            handle.write(json.dumps({"key": candidate.key, "rows": rows}) + "\n")
            handle.flush()
            if done % 25 == 0:
                echo(f"  ... {done} / {len(left)} ({time.perf_counter() - started:.0f} s)")
    echo(f"  ... {time.perf_counter() - started:.0f} s")
    for index, p in enumerate(todo):
        table = {c.key: {"candidate": c.to_dict(), **timed[c.key][index]}
                 for c in points(p)}
        path = _cache_path(p)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(table))
        tmp.replace(path)
        tables[p] = table
    return tables


class TableEvaluator:
    """Answers with the cached modelled time and the facts of its breakdown; the reward is the
    default configuration's time over the candidate's (the search only needs the ranking)."""

    def __init__(self, problem: Problem, table: dict, reference_us: float):
        self.problem, self.table, self.reference_us = problem, table, reference_us

    def __call__(self, candidate: Candidate) -> Evaluation:
        row = self.table[candidate.key]
        if row["time_us"] is None:
            return Evaluation(candidate.key, candidate, INVALID, row["stage"], row["why"])
        us = row["time_us"]
        return Evaluation(candidate.key, candidate, OK, "reward", time_us=us,
                          reference={"name": "default", "time_us": self.reference_us},
                          reward=self.reference_us / us, facts=row["facts"])


def untraceable(table: dict):
    """The real loop's free pruning (evaluate.precheck), read from the table: why a point
    cannot trace at the shape (or is outside the bench's space), or ""."""
    def why(candidate: Candidate) -> str:
        row = table.get(candidate.key)
        if row is None:
            return "outside the bench's space"
        return row["why"] if row["stage"] in PRUNED else ""
    return why


#: table stages of points that cost no evaluation: a rewrite whose precondition fails (the
#: point is outside the space), a point that does not trace at the shape (the precheck)
PRUNED = ("precondition", "trace")


def in_space(table: dict) -> dict:
    """The table's points inside the space (every rewrite's precondition holds)."""
    return {k: row for k, row in table.items() if row["stage"] != "precondition"}


def evaluations_to_target(rewards: list[float | None], target: float) -> int | None:
    for count, value in enumerate(rewards, 1):
        if value is not None and value >= target:
            return count
    return None


def planner_run(problem, table, reference_us, seed, budget, tmp, experience=None,
                learn=False) -> list[float | None]:
    state = SearchState(problem)
    name = f"{problem.family}-{problem.shape}-{seed}-{id(experience)}-{learn}.jsonl"
    store = Store(tmp / name, {"problem": problem.to_dict()})
    planner = OfflinePlanner(problem, seed, legal=untraceable(table), experience=experience,
                             learn=learn, run=name)
    run(state, planner, InlineWorkers(TableEvaluator(problem, table, reference_us)), store,
        Budget(budget))
    return [e.reward for e in state.evaluations]


def optuna_run(problem, table, reference_us, seed, budget) -> list[float | None]:
    """Optuna's TPE alone over the same candidates (knobs and the program variant as
    categoricals); a point that does not trace is told as failed without spending an
    evaluation, as the planner's pruning does."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=4, multivariate=True)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    knobs = problem.knobs()
    space = {k.name: optuna.distributions.CategoricalDistribution(k.values) for k in knobs}
    space["variant"] = optuna.distributions.CategoricalDistribution(range(len(VARIANTS)))
    fixed = problem.fixed_params()
    rewards, seen, asks = [], set(), 0
    while len(rewards) < budget and asks < 50 * budget:
        asks += 1
        trial = study.ask(space)
        params = {k: v for k, v in trial.params.items() if k != "variant"}
        candidate = Candidate(problem.family, {**params, **fixed},
                              rewrites=VARIANTS[trial.params["variant"]])
        row = table.get(candidate.key, {"stage": "precondition"})
        if candidate.key in seen or row["stage"] in PRUNED:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        seen.add(candidate.key)
        reward = reference_us / row["time_us"] if row["time_us"] else None
        study.tell(trial, reward if reward is not None else 0.0)
        rewards.append(reward)
    return rewards


def random_run(table, reference_us, seed, budget) -> list[float | None]:
    """Uniform sampling without replacement among the points that trace at the shape (the
    ones the planner may propose too); a point that fails to compile is a spent evaluation."""
    keys = sorted(k for k, row in table.items() if row["stage"] not in PRUNED)
    random.Random(seed).shuffle(keys)
    return [reference_us / table[k]["time_us"] if table[k]["time_us"] else None
            for k in keys[:budget]]


def _median(values: list[int | None], budget: int) -> float:
    """Median evaluations to the target, counting a miss as budget + 1."""
    return statistics.median(v if v is not None else budget + 1 for v in values)


def _mean(values: list[int | None], budget: int) -> float:
    return statistics.mean(v if v is not None else budget + 1 for v in values)


# ------------------------------------------------------------------ counterexample-guided repair

#: seeded illegal rewrites: (problem, rewrites) whose candidate the verifier must refute; the
#: repair loop then gets REPAIR_BUDGET verifications to reach a proved candidate
SEEDED = (
    (Problem("gemm", {"M": 1024, "N": 1024, "K": 1024}), (("drop_barrier", (1,)),)),
    (Problem("gemm", {"M": 1024, "N": 1024, "K": 1024}), (("drop_barrier", (0,)),)),
    (Problem("gemm", {"M": 1024, "N": 1024, "K": 1024}), (("shrink_ring", (0,)),)),
    (Problem("gemm", {"M": 1024, "N": 1024, "K": 1024}), (("unswizzle_reads", (1,)),)),
    (Problem("gemm", {"M": 1024, "N": 1024, "K": 1024}, {"swizzle": False}),
     (("swizzle_stores", (0,)),)),
    (Problem("gemm", {"M": 1024, "N": 1024, "K": 1024}, {"direct_lds": True}),
     (("drop_barrier", (1,)),)),
    (Problem("gemm", {"M": 1024, "N": 1024, "K": 1024}, {"direct_lds": True}),
     (("shrink_ring", (1,)),)),
    (Problem("moe_gemm", {"TOKENS": 256, "H": 128, "E": 4, "N": 128}),
     (("drop_barrier", (1,)),)),
    (Problem("moe_gemm", {"TOKENS": 256, "H": 128, "E": 4, "N": 128}),
     (("drop_guard", (0,)),)),
    (Problem("attention_fwd", {"BH": 2, "S": 256, "D": 64}), (("drop_barrier", (0,)),)),
    (Problem("gemm", {"M": 1024, "N": 1024, "K": 1024}, {"block_m": 128}),
     (("regrid_mainloop", (4, 1)),)),
    (Problem("gemm", {"M": 1024, "N": 1024, "K": 1024}, {"prefetch": 2}),
     (("pingpong_late", (2,)),)),
)
REPAIR_BUDGET = 6


class VerdictEvaluator:
    """Trace (with the rewrites) and verify only: OK when proved for every size, REFUTED with
    the counterexamples otherwise (the repair figure is about reaching a proved program; the
    full loop also checks correctness and times it)."""

    def __init__(self, problem: Problem):
        from argus.search.evaluate import Evaluator

        self.evaluator = Evaluator(problem)

    def __call__(self, candidate: Candidate) -> Evaluation:
        from argus.pipeline import StageError
        from argus.search.evaluate import STATUS_OF, _obligation, _Stop

        started = time.perf_counter()
        counterexamples: tuple = ()
        try:
            ir = self.evaluator._trace(candidate)
            road = self.evaluator._road(ir, candidate, until="verify")
            status, stage, message = OK, "verify", road.report.summary()
        except StageError as err:  # the road's verify stage: refuted, unknown, invalid
            status, stage, message = STATUS_OF[err.outcome], err.stage, str(err)
            report = err.result if err.stage == "verify" else None
            if report is not None and report.refuted:
                counterexamples = tuple(_obligation(o) for o in report.refuted[:3])
        except _Stop as stop:
            status, stage, message = stop.status, stop.stage, stop.message
            counterexamples = stop.extra.get("counterexamples", ())
        return Evaluation(candidate.key, candidate, status, stage, message,
                          counterexamples=counterexamples, wall_s=time.perf_counter() - started)


def repair_run(problem: Problem, seeded: tuple, echo) -> dict:
    """One seeded illegal rewrite through the planner's repair loop: evaluations until a
    proved candidate (the seeded one counts as the first), or the budget."""
    import attrs

    from argus.search.planners.offline import REPAIR_PREFIX

    planner = OfflinePlanner(problem, 0, legal=lambda c: "")
    evaluate = VerdictEvaluator(problem)
    state = SearchState(problem)
    base = default_candidate(problem)
    state.evaluations.append(attrs.evolve(evaluate(base), move="default"))  # not counted
    candidate = attrs.evolve(base, rewrites=seeded)
    first = attrs.evolve(evaluate(candidate), move="seeded")
    trail = [(candidate.describe(), first.status, first.counterexamples[0]["kind"]
              if first.counterexamples else "")]
    state.evaluations.append(first)
    planner.observe([first])
    used, proved = 1, None
    while first.status == "refuted" and used < REPAIR_BUDGET and proved is None:
        proposals = [p for p in planner.propose(state, 1) if p.move.startswith(REPAIR_PREFIX)]
        if not proposals:
            break
        proposal = proposals[0]
        ev = attrs.evolve(evaluate(proposal.candidate), move=proposal.move)
        used += 1
        state.evaluations.append(ev)
        planner.observe([ev])
        trail.append((proposal.move, ev.status, ev.counterexamples[0]["kind"]
                      if ev.counterexamples else ""))
        if ev.status == OK:
            proved = proposal.candidate
    row = {"problem": problem.to_dict(), "seeded": [list(s) for s in seeded],
           "refuted": first.status == "refuted", "counterexample": trail[0][2],
           "repaired": proved is not None, "evaluations": used,
           "repair": proved.describe() if proved else None, "trail": trail}
    echo(f"  {problem.family} {problem.pinned or ''} {seeded}: {first.status} "
         f"({trail[0][2] or '-'}) -> " + (f"proved after {used} evaluations: "
                                          f"{' / '.join(m for m, _, _ in trail[1:])}"
                                          if proved else f"not repaired in {used}"))
    return row


def repair_bench(echo) -> list[dict]:
    echo("counterexample-guided repair: seeded illegal rewrites, verifier verdicts (no "
         f"timing), at most {REPAIR_BUDGET} evaluations each")
    rows = [repair_run(problem, seeded, echo) for problem, seeded in SEEDED]
    refuted = [r for r in rows if r["refuted"]]
    repaired = [r for r in refuted if r["repaired"]]
    counts = [r["evaluations"] for r in repaired]
    echo(f"  refuted {len(refuted)} of {len(rows)} seeded; repaired to a proved candidate "
         f"{len(repaired)} of {len(refuted)} ({len(repaired) / max(len(refuted), 1):.0%}); "
         f"evaluations (the refuted one included): median "
         f"{statistics.median(counts) if counts else '-'}, mean "
         f"{statistics.mean(counts) if counts else 0:.2f}")
    return rows


# ------------------------------------------------------------------ tune parity (issue 23)

PARITY_SHAPES = ("1024x1024x1024", "4096x4096x4096", "256x4096x4096", "8192x1024x1024")
PARITY_BUDGET = 8


def parity_run(shape: str, jobs: int, tmp: Path, echo) -> dict:
    """The README's tune at one GEMM shape (fresh: no experience carried between shapes):
    the ratio AMD's modelled time / the best accepted candidate's modelled time."""
    from argus.search import parse_shape, tune
    from argus.search.store import read

    problem = Problem("gemm", parse_shape("gemm", shape))
    run_file = tmp / f"parity-{shape}.jsonl"
    started = time.perf_counter()
    progress = tune(problem, run_file=run_file, budget=Budget(PARITY_BUDGET, candidate_s=600),
                    jobs=jobs, fresh=True)
    wall = time.perf_counter() - started
    events = read(run_file)
    screen = next((e for e in events if e["kind"] == "screen"), {})
    evaluations = progress.state.evaluations
    best = progress.state.best
    reference = best.reference if best else None
    ratio = best.reward if best else None
    statuses = Counter(e.status for e in evaluations)
    row = {"shape": shape, "ratio": ratio, "best": best.candidate.describe() if best else None,
           "best_us": best.time_us if best else None, "reference": reference,
           "evaluations": len(evaluations), "statuses": dict(statuses),
           "first_at_best": next((i for i, e in enumerate(evaluations, 1)
                                  if best and e.key == best.key), None),
           "screened": screen.get("timed"), "screen_s": screen.get("wall_s"),
           "wall_s": round(wall, 1), "modelled": True}
    echo(f"  gemm {shape}: {ratio:.2f}x {reference['name']} ({reference['time_us']:.2f} "
         f"µs) with {best.time_us:.2f} µs ({row['best']}), found at evaluation "
         f"{row['first_at_best']} of {len(evaluations)} ({dict(statuses)}); pre-screen "
         f"timed {row['screened']} points in {row['screen_s']} s; run {wall:.0f} s"
         if best else f"  gemm {shape}: no result ({dict(statuses)})")
    return row


def parity_bench(shapes: tuple[str, ...], jobs: int, echo) -> list[dict]:
    import tempfile

    echo(f"tune parity: argus tune gemm --budget {PARITY_BUDGET} --jobs {jobs} --fresh per "
         "shape; ratio = AMD's fastest kernel / the best accepted candidate (both modelled "
         "MI300X times, not measured; every counted candidate proved and emulated)")
    with tempfile.TemporaryDirectory() as tmp:
        rows = [parity_run(shape, jobs, Path(tmp), echo) for shape in shapes]
    reached = [r["ratio"] for r in rows if r["ratio"] is not None]
    echo(f"  at or above 1.00x on {sum(r >= 1.0 for r in reached)} of {len(rows)} shapes")
    return rows


def _summary(name: str, found: list[int | None], budget: int) -> dict:
    return {"method": name, "evaluations": found, "median": _median(found, budget),
            "mean": _mean(found, budget), "misses": sum(v is None for v in found)}


@click.command()
@click.option("--seeds", default=10, show_default=True, help="Test seeds per held-out shape.")
@click.option("--train-seeds", default=4, show_default=True,
              help="Training runs per training shape (they fill the experience store).")
@click.option("--budget", default=GOAL, show_default=True)
@click.option("--jobs", default=2, show_default=True, help="Processes for the exhaustive table.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
@click.option("--repairs", is_flag=True, help="Only the repair figure (seeded illegal rewrites).")
@click.option("--parity", is_flag=True, help="Only the tune-parity figure: the real tune at "
              f"budget {PARITY_BUDGET} per GEMM shape, the ratio to AMD's kernel reached.")
@click.option("--shapes", default=",".join(PARITY_SHAPES), show_default=True,
              help="GEMM shapes of --parity.")
@click.option("--swap", is_flag=True, help="Learn on the test shapes and test on the training "
              "shapes (the same cached tables): does the transfer hold the other way round?")
def main(seeds: int, train_seeds: int, budget: int, jobs: int, json_path: str | None,
         repairs: bool, parity: bool, shapes: str, swap: bool) -> None:
    import tempfile

    from argus.search.experience import Experience

    echo = click.echo
    if parity:
        rows = parity_bench(tuple(s for s in shapes.split(",") if s), jobs, echo)
        if json_path:
            Path(json_path).write_text(json.dumps(rows, indent=1, default=str))
        return
    if repairs:
        rows = repair_bench(echo)
        if json_path:
            Path(json_path).write_text(json.dumps(rows, indent=1, default=str))
        return
    train, test = (TEST, TRAIN) if swap else (TRAIN, TEST)
    echo("bench_search: evaluations to reach 95% of the exhaustive best (modelled MI300X "
         "times, not measured); priors learned on "
         f"{', '.join(p.shape for p in train)}, tested on {', '.join(p.shape for p in test)}")
    tables = exhaustive([*train, *test], jobs, echo)
    out = {"train": [p.to_dict() for p in train], "test": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        memory = Experience(tmp / "experience.jsonl", "gemm")
        started = time.perf_counter()
        for problem in train:
            table = tables[problem]
            default = table[default_candidate(problem).key]["time_us"]
            for seed in range(train_seeds):
                planner_run(problem, table, default, 100 + seed, budget, tmp, memory, True)
        echo(f"training: {train_seeds} runs on each of {len(train)} shapes, "
             f"{len(memory.rows)} experience rows ({time.perf_counter() - started:.0f} s)")
        for problem in test:
            table = tables[problem]
            timed = {k: v for k, v in table.items() if v["time_us"] is not None}
            space = len(in_space(table))
            traced = sum(v["stage"] not in PRUNED for v in table.values())
            best_key = min(timed, key=lambda k: timed[k]["time_us"])
            best_us = timed[best_key]["time_us"]
            default = table[default_candidate(problem).key]["time_us"] or best_us
            target = TARGET * default / best_us
            near = sum(TARGET * v["time_us"] <= best_us for v in timed.values())
            best = Candidate.from_dict(timed[best_key]["candidate"]).describe()
            echo(f"{problem.family} {problem.shape}: {space} points ({len(table)} listed, "
                 f"{len(table) - space} where a rewrite's precondition fails), {traced} trace at "
                 f"the shape, {len(timed)} compile and time, {near} within 95% of the best; "
                 f"best {best_us:.2f} µs modelled ({best}); default {default:.2f} µs")
            runs = {
                "planner (learned priors)": [planner_run(problem, table, default, s, budget,
                                                         tmp, memory, False)
                                             for s in range(seeds)],
                "planner (fresh)": [planner_run(problem, table, default, s, budget, tmp)
                                    for s in range(seeds)],
                "random": [random_run(table, default, s, budget) for s in range(seeds)],
                "optuna alone": [optuna_run(problem, table, default, s, budget)
                                 for s in range(seeds)],
            }
            rows = [_summary(name, [evaluations_to_target(r, target) for r in found], budget)
                    for name, found in runs.items()]
            by = {row["method"]: row for row in rows}
            for row in rows:
                echo(f"  {row['method']:<25} median {row['median']:>5g}  mean "
                     f"{row['mean']:>6.2f}  misses {row['misses']}  {row['evaluations']}")
            for name in ("planner (learned priors)", "planner (fresh)", "optuna alone"):
                echo(f"  random / {name}: medians "
                     f"{by['random']['median'] / by[name]['median']:.2f}x, means "
                     f"{by['random']['mean'] / by[name]['mean']:.2f}x")
            learned = by["planner (learned priors)"]
            fresh = by["planner (fresh)"]
            echo(f"  experience transfer (store from {', '.join(p.shape for p in train)}, "
                 f"frozen): median {learned['median']:g} vs fresh {fresh['median']:g}, mean "
                 f"{learned['mean']:.2f} vs {fresh['mean']:.2f} evaluations: "
                 f"{fresh['mean'] / learned['mean']:.2f}x shorter on average")
            losses = [name for name in ("planner (fresh)", "random", "optuna alone")
                      if by[name]["mean"] < learned["mean"]]
            seeds_lost = sum((a or budget + 1) > (b or budget + 1) for a, b in zip(
                learned["evaluations"], by["random"]["evaluations"], strict=True))
            echo(f"  where the learned planner loses: {', '.join(losses) or 'no method'} has "
                 f"a lower mean; random search beats it on {seeds_lost} of {seeds} seeds")
            out["test"].append({"problem": problem.to_dict(), "points": space,
                                "traced": traced, "timed": len(timed), "near_best": near,
                                "best_us": best_us, "default_us": default,
                                "methods": rows, "modelled": True})
    if json_path:
        Path(json_path).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()

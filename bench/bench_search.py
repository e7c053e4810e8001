"""How fast the offline planner finds a good kernel: for GEMM and flash attention at two shapes
each, the exhaustive best of the declared search space (every point, traced, compiled and timed
by the MI300X performance model: figures are modelled, not measured), then over several seeds
the number of evaluations the offline planner needs to reach 95% of that best's throughput,
against random search over the same points with the same budget. Goal: <= 64 evaluations. The
table is computed once and cached in ARGUS_CACHE/bench_search, keyed by the space and the
sources of the kernels, the backend and the model. The GEMM rows search a share of the
family's space (GEMM_SPACE); flash attention's tiles are fixed by the kernel, so its rows search
the prefetch depth, the key loop's unroll and the schedule (12 points).

The bench replays the planner against the cached modelled times: verification and emulation,
which the real loop runs per candidate, are not repeated here (the library kernels' points are
proved in the test suite). A point that does not trace at the shape is pruned for free, as the
real loop's precheck does; one the backend or the model rejects is a spent evaluation.
Run: python bench/bench_search.py [--seeds 5] [--budget 64] [--jobs 2] [--family NAME] [--json PATH]
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import random
import statistics
import time
from pathlib import Path

import click

import argus
from argus import env
from argus.search.budget import Budget
from argus.search.evaluate import INVALID, OK, Evaluation, compile_params, kernel_params
from argus.search.loop import run
from argus.search.planners import SearchState
from argus.search.planners.offline import OfflinePlanner
from argus.search.space import Candidate, Problem, default_candidate, every_candidate
from argus.search.store import Store
from argus.search.workers import InlineWorkers

#: the bench's share of the GEMM space: tiles, block_k, split-K and the MFMA instruction free,
#: the LDS swizzle and the schedule pinned to their defaults (all 1152 points take hours to
#: time on this shared 2-core machine; these 288 take minutes)
GEMM_SPACE = {"swizzle": True, "policy": "interleave"}
PROBLEMS = (
    Problem("gemm", {"M": 1024, "N": 1024, "K": 1024}, GEMM_SPACE),
    Problem("gemm", {"M": 4096, "N": 4096, "K": 4096}, GEMM_SPACE),
    Problem("attention_fwd", {"BH": 16, "S": 2048, "D": 128}),
    Problem("attention_fwd", {"BH": 32, "S": 4096, "D": 64}),
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
    from argus.kernels import library
    from argus.search.evaluate import Evaluator, timing_facts

    candidate, problems = job
    try:
        ir = library()[candidate.family].kernel.trace(**kernel_params(candidate))
    except (ValueError, RuntimeError) as err:
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
        compiled = argus.compile(ir, **compile_params(candidate))
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


def _cache_path(problem: Problem) -> Path:
    points = sorted(c.key for c in every_candidate(problem))
    space = json.dumps([problem.to_dict(), points, _sources_digest()], sort_keys=True)
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
        union.update((c.key, c) for c in every_candidate(p))
    echo(f"  timing {len(union)} {todo[0].family} points at {len(todo)} shape(s) "
         f"({jobs} processes; cached afterwards in {env.cache_dir() / 'bench_search'})")
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        rows = pool.map(_time_point, [(c, todo) for c in union.values()], chunksize=4)
    echo(f"  ... {time.perf_counter() - started:.0f} s")
    timed = dict(zip(union, rows, strict=True))
    for index, p in enumerate(todo):
        table = {c.key: {"candidate": c.to_dict(), **timed[c.key][index]}
                 for c in every_candidate(p)}
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
    cannot trace at the shape, or ""."""
    return lambda c: table[c.key]["why"] if table[c.key]["stage"] == "trace" else ""


def evaluations_to_target(rewards: list[float | None], target: float) -> int | None:
    for count, value in enumerate(rewards, 1):
        if value is not None and value >= target:
            return count
    return None


def planner_run(problem, table, reference_us, seed, budget, tmp) -> list[float | None]:
    state = SearchState(problem)
    store = Store(tmp / f"{problem.family}-{problem.shape}-{seed}.jsonl",
                  {"problem": problem.to_dict()})
    run(state, OfflinePlanner(problem, seed, legal=untraceable(table)),
        InlineWorkers(TableEvaluator(problem, table, reference_us)), store, Budget(budget))
    return [e.reward for e in state.evaluations]


def random_run(table, reference_us, seed, budget) -> list[float | None]:
    """Uniform sampling without replacement among the points that trace at the shape (the
    ones the planner may propose too); a point that fails to compile is a spent evaluation."""
    keys = sorted(k for k, row in table.items() if row["stage"] != "trace")
    random.Random(seed).shuffle(keys)
    return [reference_us / table[k]["time_us"] if table[k]["time_us"] else None
            for k in keys[:budget]]


def _median(values: list[int | None], budget: int) -> float:
    """Median evaluations to the target, counting a miss as budget + 1."""
    return statistics.median(v if v is not None else budget + 1 for v in values)


def _mean(values: list[int | None], budget: int) -> float:
    return statistics.mean(v if v is not None else budget + 1 for v in values)


@click.command()
@click.option("--seeds", default=5, show_default=True)
@click.option("--budget", default=GOAL, show_default=True)
@click.option("--jobs", default=2, show_default=True, help="Processes for the exhaustive table.")
@click.option("--family", "families", multiple=True,
              type=click.Choice(sorted({p.family for p in PROBLEMS})),
              help="Only this family's rows (repeatable); default: all.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def main(seeds: int, budget: int, jobs: int, families: tuple[str, ...],
         json_path: str | None) -> None:
    import tempfile

    echo = click.echo
    echo("bench_search: evaluations for the offline planner to reach 95% of the exhaustive best "
         "(modelled MI300X times, not measured)")
    rows = []
    problems = [p for p in PROBLEMS if not families or p.family in families]
    with tempfile.TemporaryDirectory() as tmp:
        tables = {}
        for name in dict.fromkeys(p.family for p in problems):
            tables.update(exhaustive([p for p in problems if p.family == name], jobs, echo))
        for problem in problems:
            table = tables[problem]
            traced = {k: v for k, v in table.items() if v["stage"] != "trace"}
            timed = {k: v for k, v in table.items() if v["time_us"] is not None}
            if not timed:
                reasons = sorted({v["why"] for v in table.values()})
                echo(f"{problem.family} {problem.shape}: none of {len(table)} points compiles "
                     f"and times here ({'; '.join(reasons)[:300]}); no search figure")
                rows.append({"problem": problem.to_dict(), "points": len(table),
                             "timed": 0, "missing": reasons})
                continue
            best_key = min(timed, key=lambda k: timed[k]["time_us"])
            best_us = timed[best_key]["time_us"]
            default = table[default_candidate(problem).key]["time_us"] or best_us
            target = TARGET * default / best_us
            near = sum(TARGET * v["time_us"] <= best_us for v in timed.values())
            planner = [evaluations_to_target(planner_run(problem, table, default, s, budget,
                                                         Path(tmp)), target)
                       for s in range(seeds)]
            randoms = [evaluations_to_target(random_run(table, default, s, budget), target)
                       for s in range(seeds)]
            p_med, r_med = _median(planner, budget), _median(randoms, budget)
            best = Candidate.from_dict(timed[best_key]["candidate"]).describe()
            echo(f"{problem.family} {problem.shape}: {len(table)} declared points, "
                 f"{len(traced)} trace at the shape, {len(timed)} compile and time, {near} "
                 f"within 95% of the best; best {best_us:.2f} µs modelled ({best}); default "
                 f"{default:.2f} µs")
            echo(f"  planner evaluations to 95%: {planner} (median {p_med:g}; goal <= {GOAL})")
            echo(f"  random search:               {randoms} (median {r_med:g}; a miss counts "
                 f"{budget + 1})")
            p_mean, r_mean = _mean(planner, budget), _mean(randoms, budget)
            echo(f"  ratio random / planner: medians {r_med / p_med:.2f}x, means "
                 f"{r_mean / p_mean:.2f}x ({r_mean:.1f} / {p_mean:.1f})")
            rows.append({"problem": problem.to_dict(), "declared": len(table),
                         "traced": len(traced), "timed": len(timed), "near_best": near,
                         "best_us": best_us, "best": timed[best_key]["candidate"],
                         "default_us": default, "planner": planner, "random": randoms,
                         "planner_median": p_med, "random_median": r_med,
                         "planner_mean": p_mean, "random_mean": r_mean, "modelled": True})
    if json_path:
        Path(json_path).write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()

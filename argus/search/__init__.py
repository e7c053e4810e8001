"""The search loop over verified kernels (`argus tune`): a planner (offline bandit + optuna, or
an LLM) proposes points of a family's space, each goes through verify -> correctness -> compile
-> modelled time, and the trajectory is kept as resumable JSONL. `tune()` wires the pieces; the
modules hold them (space, kb, evaluate, reward, budget, store, planners, workers, loop, view).
"""

from __future__ import annotations

from pathlib import Path

import attrs

from argus.search.budget import Budget
from argus.search.space import Problem, SearchError, parse_shape

__all__ = ["Budget", "Problem", "SearchError", "parse_shape", "tune"]


def tune(problem: Problem, *, run_file: str | Path, budget: Budget | None = None,
         planner: str = "offline", llm: dict | None = None, jobs: int = 1,
         backend: str = "local", ray_address: str | None = None, resume: bool = False,
         seed: int = 0, on_update=None, fresh: bool = False, experience=None,
         screen: bool | None = None):
    """Tune `problem`, writing the trajectory to `run_file`; returns the loop's `Progress`
    (its `state.results` are the accepted candidates, best first). The experience store
    (`experience`: a path, default ARGUS_CACHE/experience/<family>.jsonl) warm-starts the
    planner's priors and learns from this run; `fresh` ignores it (neither read nor written).
    `screen` (default: with the offline planner): time candidates with the model alone first
    (`argus.search.screen`) and propose the fastest first; each still goes through the whole
    road before it counts."""
    from argus.search.evaluate import Evaluator
    from argus.search.loop import run
    from argus.search.planners import Planner, SearchState
    from argus.search.planners.offline import OfflinePlanner
    from argus.search.store import Store
    from argus.search.workers import make_workers

    budget = budget or Budget()
    header = {"problem": problem.to_dict(), "planner": planner, "budget": budget.to_dict(),
              "seed": seed, "backend": backend, "jobs": jobs,
              "screen": planner == "offline" if screen is None else screen}
    problem.knobs()  # bad --param values fail here, before anything is written
    from argus.search.experience import Experience

    memory = None if fresh else Experience(experience, problem.family)
    header["experience"] = None if memory is None else {"path": str(memory.path),
                                                        "rows": len(memory.rows)}
    if screen is None:
        screen = planner == "offline"
    offline = OfflinePlanner(problem, seed, experience=memory, run=str(run_file),
                             screen=_screen(problem, memory, jobs) if screen else None)
    chosen: Planner = offline
    if planner == "llm":
        from argus.search.planners.llm import LLMPlanner, client_from_options

        chosen = llm_planner = LLMPlanner(problem, client_from_options(**(llm or {})), offline)
    elif planner != "offline":
        raise SearchError(f"--planner {planner!r}: choose offline or llm")
    store = Store(run_file, header, resume=resume)
    offline.log = store.append
    if planner == "llm":
        llm_planner.log = store.append
    evaluator = Evaluator(problem, seed=seed)
    # the reference is the same for every candidate: timed here once, not in every worker
    evaluator = attrs.evolve(evaluator, reference=evaluator.baseline())
    state = SearchState(problem, list(store.evaluations))
    workers = make_workers(evaluator, jobs=jobs, timeout_s=budget.candidate_s, backend=backend,
                           address=ray_address)
    return run(state, chosen, workers, store, budget, on_update)


def _screen(problem: Problem, memory, jobs: int):
    """The pre-screen of a run: climbs from the experience store's best points (when there is
    one), then from the default, in `jobs` processes."""
    from argus.search.screen import Screen

    return Screen(problem, starts=memory.starts(problem) if memory else (), jobs=max(jobs, 1))

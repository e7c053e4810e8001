"""The tuning loop: ask the planner for candidates while budget and free workers remain, hand
them to the workers, record every evaluation in the store and feed it back to the planner.
A candidate already in the trajectory (a resumed run) is never evaluated again; Ctrl-C stops
the workers, writes an `end` line and leaves a file that `--resume` continues.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from argus.search.budget import Budget, Clock
from argus.search.evaluate import Evaluation
from argus.search.planners import SearchState
from argus.search.store import Store
from argus.search.workers import Task

#: how long the loop waits for a result before it looks at the clock again
POLL_S = 0.5


@attrs.define
class Progress:
    """What the live view shows: evaluations done, the current move, why the run stopped."""

    state: SearchState
    budget: Budget
    clock: Clock
    current: str = ""
    stopped: str = ""


def run(state: SearchState, planner, workers, store: Store, budget: Budget,
        on_update: Callable[[Progress], None] | None = None) -> Progress:
    """Search until the budget is spent or the planner has nothing left to propose."""
    clock = Clock(budget, done=len(state.evaluations))
    progress = Progress(state, budget, clock)
    notify = on_update or (lambda p: None)
    planner.observe(list(state.evaluations))
    try:
        while True:
            progress.stopped = clock.exhausted()
            if progress.stopped:
                break
            room = min(workers.capacity, budget.evaluations - clock.done - workers.busy)
            if room > 0:
                for proposal in planner.propose(state, room):
                    if state.seen(proposal.candidate):
                        continue  # cached: never evaluate a candidate twice
                    state.pending.add(proposal.candidate.key)
                    workers.submit(Task(proposal.candidate, proposal.move, planner.name))
                    progress.current = f"{proposal.move}: {proposal.candidate.describe()}"
                    notify(progress)
            if workers.busy == 0:
                progress.stopped = "the planner has no new candidate to propose"
                break
            remaining = clock.remaining_s()
            finished = workers.wait(POLL_S if remaining is None else min(POLL_S, remaining))
            _record(finished, state, planner, store, clock)
            if finished:
                notify(progress)
    except KeyboardInterrupt:
        progress.stopped = "interrupted (Ctrl-C); resume with --resume"
        workers.close()
        store.append({"kind": "end", "reason": progress.stopped, "evaluations": clock.done})
        raise
    workers.close()
    store.append({"kind": "end", "reason": progress.stopped, "evaluations": clock.done})
    notify(progress)
    return progress


def _record(finished: list[Evaluation], state: SearchState, planner, store: Store,
            clock: Clock) -> None:
    for evaluation in finished:
        state.pending.discard(evaluation.key)
        state.evaluations.append(evaluation)
        store.record(evaluation)
        clock.done += 1
    if finished:
        planner.observe(finished)

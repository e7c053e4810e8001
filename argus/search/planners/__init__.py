"""The planner interface every policy implements: `propose(state, k)` returns up to k
`Proposal`s (a candidate, the move that produced it, and why), `observe(evaluations)` feeds
back what the pipeline said. Offline (`offline.py`) and LLM (`llm.py`) planners share it and
the same `SearchState`, so a run can be replayed under either.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from argus.search.evaluate import INCOMPLETE, OK, Evaluation
from argus.search.space import Candidate, Problem

__all__ = ["Planner", "Proposal", "SearchState"]


@attrs.frozen
class Proposal:
    """A candidate a planner proposes, the move that produced it, and why."""

    candidate: Candidate
    move: str  # a knowledge-base move id, or default | optuna | random | llm-params | llm-edit
    rationale: str = ""


@attrs.define
class SearchState:
    """What every planner sees: the problem and all evaluations so far (resumed ones too)."""

    problem: Problem
    evaluations: list[Evaluation] = attrs.field(factory=list)
    pending: set[str] = attrs.field(factory=set)
    #: repairs of refuted candidates the planner did not propose because the model times them
    #: no faster than the best result (the run file has a `repair-skipped` line for each)
    repairs_skipped: int = 0

    def seen(self, candidate: Candidate) -> bool:
        key = candidate.key
        return key in self.pending or any(e.key == key for e in self.evaluations)

    @property
    def results(self) -> list[Evaluation]:
        """Accepted results (verified, correct, modelled), best first."""
        return sorted((e for e in self.evaluations if e.is_result),
                      key=lambda e: -(e.reward or 0.0))

    @property
    def best(self) -> Evaluation | None:
        results = self.results
        return results[0] if results else None

    def parent(self) -> Candidate | None:
        """Where moves start: the best result, else the latest candidate that passed every
        stage this build has, else None."""
        if self.best is not None:
            return self.best.candidate
        passed = [e for e in self.evaluations if e.status in (OK, INCOMPLETE)]
        return passed[-1].candidate if passed else None


class Planner(Protocol):
    """What every planner implements: `propose(state, k)` and `observe(evaluations)`."""

    name: str

    def propose(self, state: SearchState, k: int) -> list[Proposal]: ...

    def observe(self, evaluations: list[Evaluation]) -> None: ...

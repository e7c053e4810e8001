"""Budgets of a tuning run: evaluations, wall-clock seconds, and seconds per candidate; the
loop asks `exhausted()` before proposing and the workers enforce the per-candidate limit.
"""

from __future__ import annotations

import time

import attrs

from argus.search.space import SearchError


@attrs.frozen
class Budget:
    """How much a search may spend: `evaluations` candidates, `wall_s` seconds in all (None:
    no limit) and `candidate_s` seconds for any one candidate."""

    evaluations: int = 64
    wall_s: float | None = None
    candidate_s: float = 600.0

    def __attrs_post_init__(self):
        if self.evaluations < 1:
            raise SearchError(f"--budget {self.evaluations}: give at least one evaluation")
        if self.wall_s is not None and self.wall_s <= 0:
            raise SearchError(f"--time-limit {self.wall_s}: give a positive number of seconds")
        if self.candidate_s <= 0:
            raise SearchError(f"--timeout {self.candidate_s}: give a positive number of seconds")

    def to_dict(self) -> dict:
        return attrs.asdict(self)


@attrs.define
class Clock:
    """Counts one run's spending against a budget (evaluations done before a resume count)."""

    budget: Budget
    done: int = 0
    started: float = attrs.field(factory=time.monotonic)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining_s(self) -> float | None:
        return None if self.budget.wall_s is None else self.budget.wall_s - self.elapsed

    def exhausted(self) -> str:
        """Why the run must stop ("" while budget remains)."""
        if self.done >= self.budget.evaluations:
            return f"evaluation budget of {self.budget.evaluations} spent"
        remaining = self.remaining_s()
        if remaining is not None and remaining <= 0:
            return f"wall-clock limit of {self.budget.wall_s:g} s reached"
        return ""

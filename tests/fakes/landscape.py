"""Stand-in evaluators for testing the planners and workers without the pipeline: a reward
landscape over the GEMM knobs (the planner must climb it), a hostile variant whose best point
is refuted, and a sleeper (for timeouts). Module-level classes, so worker processes can
unpickle them."""

from __future__ import annotations

import time

import attrs

from argus.search.evaluate import OK, Evaluation
from argus.search.space import MFMA_32, Candidate

BEST = {"block_m": 256, "block_n": 128, "block_k": 32, "split_k": 2, "prefetch": 1,
        "instr": MFMA_32, "swizzle": False, "policy": "simple"}


def score(params: dict) -> float:
    """A separable landscape with one peak at BEST: each knob off its best value costs a
    factor that grows with its distance in the knob's value list."""
    from argus.search.space import family

    value = 1.0
    for knob in family("gemm").knobs:
        distance = abs(knob.values.index(params[knob.name]) - knob.values.index(BEST[knob.name]))
        value *= 0.8 ** distance
    return value


@attrs.frozen
class Landscape:
    """Rewards `score(params)` as a modelled result (reference time 1 µs)."""

    reject_best: str = ""  # a status the best point gets instead of ok (refuted, wrong, ...)

    def __call__(self, candidate: Candidate) -> Evaluation:
        reward = score(candidate.param_dict)
        if self.reject_best and reward == 1.0:
            # a stage that rejected the candidate but still attached a timing must not matter
            return Evaluation(candidate.key, candidate, self.reject_best, "verify", "rejected",
                              time_us=0.5, reward=2.0,
                              reference={"name": "default", "time_us": 1.0})
        return Evaluation(candidate.key, candidate, OK, "reward", "", time_us=1.0 / reward,
                          reference={"name": "default", "time_us": 1.0}, reward=reward)


@attrs.frozen
class Sleeper:
    """Takes `seconds` per candidate whose source is "sleep" (or per candidate, with
    `every=True`), then rewards it 1.0."""

    seconds: float
    every: bool = False

    def __call__(self, candidate: Candidate) -> Evaluation:
        if self.every or candidate.source == "sleep":
            time.sleep(self.seconds)
        return Evaluation(candidate.key, candidate, OK, "reward", time_us=1.0, reward=1.0,
                          reference={"name": "default", "time_us": 1.0})


@attrs.frozen
class PidSleeper:
    """Writes its process id to `path`, then sleeps `seconds` per candidate whose source is
    "sleep" (a test kills that process to see what a dead worker costs); others are rewarded
    1.0 at once."""

    path: str
    seconds: float

    def __call__(self, candidate: Candidate) -> Evaluation:
        import os

        if candidate.source == "sleep":
            with open(self.path, "w") as handle:
                handle.write(str(os.getpid()))
            time.sleep(self.seconds)
        return Evaluation(candidate.key, candidate, OK, "reward", time_us=1.0, reward=1.0,
                          reference={"name": "default", "time_us": 1.0})

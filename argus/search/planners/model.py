"""The offline planner's value model: Bayesian linear regression of log reward on features of a
candidate that cost nothing to compute (no trace, no compile): each numeric knob on a log scale
with its square and pairwise products, one-hot categorical knobs, and the knowledge base's grid
quantities (workgroups against the CUs, dispatch rounds, K-loop trips). Thompson sampling from
the posterior picks the next candidate, so the model explores where it is unsure. Past runs'
results at other shapes (the experience store) enter as down-weighted observations, their
features taken at the shape they ran at.
"""

from __future__ import annotations

import math

import numpy as np

from argus.search.kb import MI300X_CUS, Context, k_tiles
from argus.search.space import Candidate, Problem

#: prior standard deviation of each weight and the noise of log reward (modelled times are
#: deterministic, but the features cannot explain everything: bank conflicts, schedules)
PRIOR_SD = 1.0
NOISE_SD = 0.1
#: a past run's result (another shape, from the experience store) counts this much of one of
#: this run's own: it says where good tiles lie, this run's results then overrule it
PAST_WEIGHT = 0.5


class ValueModel:
    """log reward ~ features(candidate) . w, with w ~ N(0, PRIOR_SD^2) a priori."""

    def __init__(self, problem: Problem):
        self.problem = problem
        self.knobs = problem.knobs()
        self.xs: list[np.ndarray] = []
        self.ys: list[float] = []
        self.known: dict[str, np.ndarray] = {}
        #: past runs' results: features at their own shape, log reward centred per run
        self.past_xs: list[np.ndarray] = []
        self.past_ys: list[float] = []

    def features(self, candidate: Candidate) -> np.ndarray:
        if candidate.key not in self.known:
            self.known[candidate.key] = self._features(candidate)
        return self.known[candidate.key]

    def _features(self, candidate: Candidate) -> np.ndarray:
        params = candidate.param_dict
        numeric, flags = [], [1.0]
        for knob in self.knobs:
            value = params[knob.name]
            if all(isinstance(v, int) and not isinstance(v, bool) for v in knob.values):
                low, high = math.log2(min(knob.values)), math.log2(max(knob.values))
                # -1 .. 1 over the knob's range, so the prior treats every knob alike
                numeric.append(2 * (math.log2(value) - low) / max(high - low, 1) - 1)
            else:
                flags.extend(float(value == v) for v in knob.values[1:])
        ctx = Context(self.problem, candidate)
        grid = []
        try:
            # an empty grid (a past run's shape the family launches nothing at) still gets
            # finite features of the same length: log2 of 0 would end the whole run
            workgroups = max(ctx.workgroups, 1)
            rounds = math.ceil(workgroups / MI300X_CUS)
            grid = [math.log2(workgroups) / 10, math.log2(rounds) / 5,
                    workgroups / (rounds * MI300X_CUS)]
            if "K" in self.problem.sizes or "H" in self.problem.sizes:
                grid.append(math.log2(max(k_tiles(ctx), 1)) / 10)
        except (KeyError, ZeroDivisionError):
            pass
        squares = [x * x for x in numeric]
        pairs = [a * b for i, a in enumerate(numeric) for b in numeric[i + 1:]]
        return np.array(flags + numeric + squares + pairs + grid)

    def learn_from(self, rows) -> int:
        """Past runs' results (experience rows with their shape's `sizes`) as weighted prior
        observations: each point's features at the shape it ran at, its log reward centred on
        its run's mean (rewards of different shapes are against different references). Points
        outside this problem's knob values are left out; returns how many were taken."""
        from collections import defaultdict

        runs: dict[str, dict[str, tuple]] = defaultdict(dict)
        for row in rows:
            data, reward = row.get("candidate"), row.get("reward")
            if row.get("status") != "ok" or not reward or not row.get("sizes") \
                    or not data or data.get("source") is not None:
                continue
            candidate = Candidate.from_dict(data)
            if any(candidate.param_dict.get(k.name) not in k.values for k in self.knobs):
                continue
            runs[row.get("run", "")][candidate.key] = (row["sizes"], candidate, reward)
        for points in runs.values():
            sizes = next(iter(points.values()))[0]
            there = ValueModel(Problem(self.problem.family, sizes, self.problem.pinned))
            ys = [math.log(reward) for _, _, reward in points.values()]
            mean = sum(ys) / len(ys)
            for (_, candidate, _), y in zip(points.values(), ys, strict=True):
                self.past_xs.append(there.features(candidate))
                self.past_ys.append(y - mean)
        return len(self.past_ys)

    def observe(self, candidate: Candidate, reward: float) -> None:
        self.xs.append(self.features(candidate))
        self.ys.append(math.log(reward))

    def posterior(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and covariance of the weights given the observations so far."""
        x = np.array(self.xs)
        y = np.array(self.ys) - (np.mean(self.ys) if self.ys else 0.0)
        width = len(self.features(Candidate(self.problem.family, self._any())))
        x = x.reshape(len(self.ys), width)
        if self.past_ys:  # weighted least squares: rows scaled by the weight's square root
            scale = math.sqrt(PAST_WEIGHT)
            x = np.vstack([x, scale * np.array(self.past_xs).reshape(-1, width)])
            y = np.concatenate([y, scale * np.array(self.past_ys)])
        precision = x.T @ x / NOISE_SD**2 + np.eye(width) / PRIOR_SD**2
        covariance = np.linalg.inv(precision)
        return covariance @ x.T @ y / NOISE_SD**2, covariance

    def _any(self) -> dict:
        return {**{k.name: k.values[0] for k in self.knobs}, **self.problem.fixed_params()}

    def expected(self, candidates: list[Candidate]) -> list[Candidate]:
        """`candidates` best first under the posterior mean (no sample): the model's guess."""
        if not candidates:
            return []
        mean, _ = self.posterior()
        scores = np.array([self.features(c) for c in candidates]) @ mean
        return [candidates[i] for i in np.argsort(-scores, kind="stable")]

    def ranked(self, candidates: list[Candidate], rng: np.random.Generator) -> list[Candidate]:
        """`candidates` best first under one Thompson sample of the weights."""
        if not candidates:
            return []
        mean, covariance = self.posterior()
        weights = rng.multivariate_normal(mean, (covariance + covariance.T) / 2,
                                          method="cholesky")
        scores = np.array([self.features(c) for c in candidates]) @ weights
        return [candidates[i] for i in np.argsort(-scores, kind="stable")]

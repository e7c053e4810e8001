"""The offline planner (the default; no network): in-context RL over the trajectory. A UCB
bandit chooses among the knowledge-base moves that apply to the current parent, plus one arm
that asks optuna's TPE sampler for a whole configuration; every evaluation, whoever proposed
it, is told to the optuna study, and the bandit credits an arm when its candidate sets a new
best by more than 2%. Candidates that cannot trace at the target shape are pruned for free.
"""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import optuna

from argus.search.evaluate import Evaluation, precheck
from argus.search.kb import Context, moves_for
from argus.search.planners import Proposal, SearchState
from argus.search.planners.model import ValueModel
from argus.search.space import Candidate, Problem, apply, default_candidate, every_candidate

OPTUNA_ARM = "optuna"
MODEL_ARM = "model"
#: a new best must beat the old by this factor to earn its arm credit (modelled-time noise and
#: ties between equivalent configurations should not steer the bandit)
MARGIN = 1.02
EXPLORATION = 0.5
#: the optuna arm starts far ahead of the moves (a prior above any credit, so it leads until
#: its misses pile up): in spaces of a few hundred points a global sampler finds the good
#: region faster than one-knob moves. Chosen on bench_search's GEMM tables, 12 seeds, median
#: evaluations to 95% of the best at 1024^3 / 4096^3: optuna 1, model 1, TPE startup 8 ->
#: 9 / 9; optuna 3, model 0.5, startup 4, multivariate TPE -> 7.5 / 5.5 (random: 13 / 4)
OPTUNA_PRIOR = 3.0
MODEL_PRIOR = 0.5
ARM_PRIORS = {OPTUNA_ARM: OPTUNA_PRIOR, MODEL_ARM: MODEL_PRIOR}
MODEL_TRIES = 16  # top-ranked points checked for tracing at the shape per model proposal
PRIOR_WEIGHT = 2.0  # pseudo-observations behind each move's prior
STARTUP = 4  # random draws before TPE models the knobs (jointly: multivariate)
ATTEMPTS = 6  # TPE draws per proposal before the next arm (TPE repeats itself in small spaces)


class OfflinePlanner:
    name = "offline"

    def __init__(self, problem: Problem, seed: int = 0, legal=None):
        self.problem = problem
        #: legal(candidate) -> "" or why it cannot run at the target shape (pruned for free)
        self.legal = legal or (lambda candidate: precheck(problem, candidate))
        self.moves = {m.id: m for m in moves_for(problem)}
        self.rng = random.Random(seed)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        with warnings.catch_warnings():  # multivariate TPE is flagged experimental since 2.2
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=STARTUP,
                                                 multivariate=True)
        self.study = optuna.create_study(direction="maximize", sampler=sampler)
        self.distributions = {k.name: optuna.distributions.CategoricalDistribution(k.values)
                              for k in problem.knobs()}
        self.asked: dict[str, optuna.trial.Trial] = {}
        self.model = ValueModel(problem)
        self.numpy_rng = np.random.default_rng(seed)
        self.pulls = {arm: 0 for arm in [*self.moves, OPTUNA_ARM, MODEL_ARM]}
        self.credit = {arm: 0.0 for arm in self.pulls}
        self.best_reward: float | None = None
        self.points: list[Candidate] | None = None  # the whole space, listed when first needed

    # --- bandit -----------------------------------------------------------------------------

    def value(self, arm: str, ctx: Context | None = None) -> float:
        """Posterior mean credit of an arm: its prior (the move's, lowered where its
        precondition fails at `ctx`) as pseudo-observations plus its credits."""
        prior = (self.moves[arm].prior_at(ctx) if arm in self.moves and ctx is not None
                 else self.moves[arm].prior if arm in self.moves else ARM_PRIORS[arm])
        return ((self.credit[arm] + PRIOR_WEIGHT * prior) / (self.pulls[arm] + PRIOR_WEIGHT))

    def _ucb(self, arm: str, ctx: Context) -> float:
        total = sum(self.pulls.values()) + 1
        return self.value(arm, ctx) + EXPLORATION * math.sqrt(
            math.log(total + 1) / (self.pulls[arm] + 1))

    def stats(self) -> dict[str, dict]:
        return {arm: {"pulls": self.pulls[arm], "value": round(self.value(arm), 3)}
                for arm in self.pulls}

    # --- proposing --------------------------------------------------------------------------

    def propose(self, state: SearchState, k: int) -> list[Proposal]:
        out: list[Proposal] = []
        taken = set()

        def fresh(candidate: Candidate) -> bool:
            return (candidate.key not in taken and not state.seen(candidate)
                    and not self.legal(candidate))

        default = default_candidate(self.problem)
        if fresh(default):
            out.append(Proposal(default, "default", "the family's default configuration first"))
            taken.add(default.key)
        while len(out) < k:
            proposal = self._draw(state, fresh)
            if proposal is None:
                break
            out.append(proposal)
            taken.add(proposal.candidate.key)
        return out

    def _draw(self, state: SearchState, fresh) -> Proposal | None:
        parent = state.parent() or default_candidate(self.problem)
        facts = next((e.facts for e in reversed(state.evaluations) if e.key == parent.key), {})
        ctx = Context(self.problem, parent, facts)
        options: dict[str, Proposal] = {}
        for move in self.moves.values():
            actions = move.propose(ctx)
            if actions:
                candidate = apply(parent, actions, self.problem)
                if fresh(candidate):
                    options[move.id] = Proposal(
                        candidate, move.id, f"{move.effect}: {move.rationale}")
        for arm in sorted([*options, OPTUNA_ARM, MODEL_ARM], key=lambda a: self._ucb(a, ctx),
                          reverse=True):
            if arm in options:
                return options[arm]
            proposal = self._ask(fresh) if arm == OPTUNA_ARM else self._sample_model(state, fresh)
            if proposal is not None:
                return proposal
        return self._random(fresh)

    def _sample_model(self, state: SearchState, fresh) -> Proposal | None:
        """The best unseen point under one Thompson sample of the value model."""
        if self.points is None:
            self.points = list(every_candidate(self.problem))
        seen = state.pending | {e.key for e in state.evaluations}
        unseen = [c for c in self.points if c.key not in seen]
        for candidate in self.model.ranked(unseen, self.numpy_rng)[:MODEL_TRIES]:
            if fresh(candidate):
                return Proposal(candidate, MODEL_ARM, f"value model ({len(self.model.ys)} "
                                "results): a Thompson sample ranks it first")
        return None

    def _ask(self, fresh) -> Proposal | None:
        fixed = self.problem.fixed_params()
        for _ in range(ATTEMPTS):
            trial = self.study.ask(self.distributions)
            candidate = Candidate(self.problem.family, {**trial.params, **fixed})
            if fresh(candidate):
                self.asked[candidate.key] = trial
                return Proposal(candidate, OPTUNA_ARM, "TPE sample over the numeric knobs")
            # already measured, or cannot run here: tell TPE so it stops drawing it
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return None

    def _random(self, fresh) -> Proposal | None:
        from argus.search.space import every_candidate

        points = list(every_candidate(self.problem))
        self.rng.shuffle(points)
        unseen = next((c for c in points if fresh(c)), None)
        if unseen is None:
            return None
        return Proposal(unseen, "random", "every guided draw was spent")

    # --- learning ---------------------------------------------------------------------------

    def observe(self, evaluations: list[Evaluation]) -> None:
        for ev in evaluations:
            new_best = ev.is_result and (self.best_reward is None
                                         or ev.reward > self.best_reward * MARGIN)
            if ev.move in self.pulls:
                self.pulls[ev.move] += 1
                self.credit[ev.move] += 1.0 if new_best else 0.0
            if ev.is_result:
                self.best_reward = max(self.best_reward or 0.0, ev.reward)
                if ev.candidate.source is None:
                    self.model.observe(ev.candidate, ev.reward)
            self._tell(ev)

    def _tell(self, ev: Evaluation) -> None:
        """Every knob-only evaluation goes into the optuna study: a result with its reward, a
        candidate that failed a stage with 0 (worse than any result), an unrewarded one as a
        failed trial (no number exists for it)."""
        if ev.candidate.source is not None:
            return
        value = ev.reward if ev.is_result else None if ev.status == "incomplete" else 0.0
        params = {k: v for k, v in ev.candidate.params if k in self.distributions}
        trial = self.asked.pop(ev.key, None)
        if trial is not None:
            if value is None:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                self.study.tell(trial, value)
            return
        if set(params) != set(self.distributions):
            return
        self.study.add_trial(optuna.trial.create_trial(
            params=params, distributions=self.distributions, value=value,
            state=(optuna.trial.TrialState.FAIL if value is None
                   else optuna.trial.TrialState.COMPLETE)))

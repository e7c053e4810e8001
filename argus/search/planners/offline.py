"""The offline planner (the default; no network): in-context RL over the trajectory. A UCB
bandit chooses among the knowledge-base moves that apply to the current parent, the program
rewrites (`argus.search.rewrites`) that apply to its IR, one arm that asks optuna's TPE sampler
for a whole configuration and one that asks the value model; every evaluation, whoever proposed
it, is told to the optuna study. An arm's credit is graded by the reward its candidate earned
against the best so far (`graded_credit`), not one bit. A refuted candidate's counterexample is
mapped to repairs (`argus.search.repair`), proposed before anything else. With an experience
store, the moves' priors come from past runs of the family (same shape class first), the value
model learns from past runs' results at their shapes, its guess at this shape and past runs'
best points are proposed first (the pre-screen's first starts when there is one), and every
evaluated move is added to it. Candidates that cannot trace at the target shape are pruned for
free. With a model-only pre-screen (`argus.search.screen`), its fastest points are proposed
first, and a candidate the model times no faster than the best result (screened, or a rewrite
or repair timed before its full evaluation) is not proposed.
"""

from __future__ import annotations

import math
import random
import warnings

import attrs
import numpy as np
import optuna

from argus.search import rewrites as R
from argus.search.evaluate import REFUTED, Evaluation, precheck, traced
from argus.search.kb import Context, k_tiles, moves_for
from argus.search.planners import Proposal, SearchState
from argus.search.planners.model import ValueModel
from argus.search.space import Candidate, Problem, apply, default_candidate, every_candidate

OPTUNA_ARM = "optuna"
MODEL_ARM = "model"
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
REWRITE_PREFIX = "rw:"
REPAIR_PREFIX = "repair:"
MAX_REPAIR_DEPTH = 2  # repairs of a refuted repair, but not further
#: graded credit: 0 at or below LOW of the best so far, 1 at or above HIGH times it, linear
#: between (a candidate as good as the best earns a third)
LOW, HIGH = 0.85, 1.15
SCREEN_ARM = "screen"
#: without a pre-screen, the experience store's best points of past runs (this shape class's,
#: then each other class's) are proposed first: what transfers between shapes is mostly where
#: the good tiles are
EXPERIENCE_ARM = "experience"
#: the pre-screen's fastest distinct points proposed before the default and the bandit
SEEDS = 3


def graded_credit(reward: float | None, best: float | None) -> float:
    """An arm's credit for one evaluation: the reward against the best before it, graded in
    [0, 1]; a rejected candidate (no reward) earns 0, the first result 0.5."""
    if reward is None:
        return 0.0
    if best is None:
        return 0.5
    return min(1.0, max(0.0, (reward / best - LOW) / (HIGH - LOW)))


class OfflinePlanner:
    name = "offline"

    def __init__(self, problem: Problem, seed: int = 0, legal=None, *, experience=None,
                 learn: bool = True, rewrites: bool = True, log=None, run: str = "",
                 screen=None):
        self.problem = problem
        #: a model-only pre-screen (argus.search.screen.Screen), run before the first proposal;
        #: None: no pre-screen
        self.screen = screen
        self.screened: dict[str, float] | None = None  # candidate key -> screened µs
        self.seeds: list[Proposal] = []  # the screen's ranking, fastest first, not yet proposed
        self.seeded = 0  # seeds proposed (a resumed run's evaluated ones included)
        self.screen_ranking: list = []
        self.taught = False  # the samplers have learnt the screened times
        #: the experience store (argus.search.experience.Experience) priors come from and, with
        #: `learn`, evaluated moves go to; None: the knowledge base's priors alone
        self.experience, self.learn, self.run = experience, learn, run
        self.log = log or (lambda event: None)
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
        if experience is not None:  # where good points lay at the shapes of past runs
            self.model.learn_from([r for r in experience.rows if not run or r.get("run") != run])
        self.numpy_rng = np.random.default_rng(seed)
        self.rewrites = {REWRITE_PREFIX + r.name: r for r in R.REWRITES.values()
                         if rewrites and not r.repair}
        #: trace-level rewrites (a DSL program hook, as the wave grid) of families that take them
        self.trace_rewrites = {REWRITE_PREFIX + r.name: r for r in R.TRACE_REWRITES.values()
                               if rewrites and not r.repair and problem.family in R.PROGRAMS}
        self.pulls = {arm: 0 for arm in [*self.moves, *self.rewrites, *self.trace_rewrites,
                                         OPTUNA_ARM, MODEL_ARM]}
        self.credit = {arm: 0.0 for arm in self.pulls}
        self.best_reward: float | None = None
        self.points: list[Candidate] | None = None  # the whole space, listed when first needed
        from argus.search.experience import shape_class

        self.shape_class = shape_class(problem.family, problem.sizes)
        self.learned = experience.priors(self.shape_class, exclude_run=run or None) \
            if experience is not None else {}
        self.repairs: list[Proposal] = []  # repairs of refuted candidates, tried first
        self.repair_of: dict[str, dict] = {}  # repaired candidate key -> the repair record
        self.ir: dict[str, object] = {}  # traced (and rewritten) IR of parents, by key

    # --- bandit -----------------------------------------------------------------------------

    def prior(self, arm: str, ctx: Context | None = None) -> tuple[float, float]:
        """(prior mean credit, pseudo-observations) of an arm: the knowledge base's (lowered
        where the move's precondition fails at `ctx`), blended with past runs' experience."""
        if arm in self.moves:
            base = self.moves[arm].prior_at(ctx) if ctx is not None else self.moves[arm].prior
        elif arm in self.rewrites:
            base = self.rewrites[arm].prior
        elif arm in self.trace_rewrites:
            base = self.trace_rewrites[arm].prior
        else:
            base = ARM_PRIORS[arm]
        mean, weight = self.learned.get(arm, (0.0, 0.0))
        return ((PRIOR_WEIGHT * base + weight * mean) / (PRIOR_WEIGHT + weight),
                PRIOR_WEIGHT + weight)

    def value(self, arm: str, ctx: Context | None = None) -> float:
        """Posterior mean credit of an arm: its prior as pseudo-observations plus its graded
        credits."""
        prior, weight = self.prior(arm, ctx)
        return (self.credit[arm] + weight * prior) / (self.pulls[arm] + weight)

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
                    and not self.legal(candidate) and not self.beaten(candidate, state))

        if self.screened is None:
            self._run_screen(state)
        while self.seeds and len(out) < k and self.seeded < SEEDS:
            seed = self.seeds.pop(0)
            if fresh(seed.candidate):
                out.append(seed)
                taken.add(seed.candidate.key)
                self.seeded += 1
        default = default_candidate(self.problem)
        if fresh(default) and len(out) < k:
            out.append(Proposal(default, "default", "the family's default configuration first"))
            taken.add(default.key)
        while self.repairs and len(out) < k:
            repair = self.repairs.pop(0)
            if fresh(repair.candidate):
                out.append(repair)
                taken.add(repair.candidate.key)
                self.log({"kind": "repair-proposed", "candidate": repair.candidate.key,
                          **self.repair_of[repair.candidate.key]})
            elif self.beaten(repair.candidate, state):
                # mended, it would still be no faster than the best: not worth an evaluation
                state.repairs_skipped += 1
                self.log({"kind": "repair-skipped", "candidate": repair.candidate.key,
                          "modelled_us": self.screen.time(repair.candidate).time_us
                          if self.screen is not None else None,
                          "best_us": state.best.time_us if state.best else None,
                          **self.repair_of[repair.candidate.key]})
        while len(out) < k:
            proposal = self._draw(state, fresh)
            if proposal is None:
                break
            out.append(proposal)
            taken.add(proposal.candidate.key)
        return out

    def _run_screen(self, state: SearchState) -> None:
        """Time candidates with the model alone (no proof, no check) and keep the ranking: the
        fastest distinct modelled times become the first proposals, and the screened times
        prune candidates that cannot beat the best result."""
        self.screened = {}
        # a resumed run's seeds count against SEEDS
        self.seeded = sum(e.move in (SCREEN_ARM, EXPERIENCE_ARM) for e in state.evaluations)
        if self.screen is None:
            if self.experience is not None:
                self._experience_seeds()
            return
        guess = self._guess()
        starts = getattr(self.screen, "starts", None)
        if guess is not None and starts is not None and guess not in starts:
            starts.insert(0, guess)  # the screen's first climb starts at the model's guess
        ranking = self.screen_ranking = self.screen.run()
        kernels = set()
        for rank, entry in enumerate(ranking, 1):
            if entry.time_us is None:
                continue
            self.screened[entry.candidate.key] = entry.time_us
            kernel = (entry.candidate.params, round(entry.time_us, 6))
            if kernel in kernels:  # a rewrite the model times as the kernel it rewrote
                continue
            kernels.add(kernel)
            self.seeds.append(Proposal(entry.candidate, SCREEN_ARM, (
                f"model-only pre-screen ranks it #{rank} of {len(ranking)} "
                f"({entry.time_us:.2f} µs modelled before any proof)")))
        # the second seed is the fastest point of another tile (the numeric knobs): points that
        # differ only in an instruction or a schedule tend to share a verdict (and a solver
        # timeout), so the first two run (in parallel) on different tiles
        if self.seeds:
            tile = self._tile(self.seeds[0].candidate)
            other = next((i for i, p in enumerate(self.seeds) if self._tile(p.candidate) != tile),
                         None)
            if other is not None:
                self.seeds.insert(1, self.seeds.pop(other))
        self.log({"kind": "screen", "timed": len(ranking), "wall_s": round(self.screen.wall, 1),
                  "ranking": [e.to_dict() for e in ranking[:12]],
                  "untimed": sum(e.time_us is None for e in ranking)})

    def _experience_seeds(self) -> None:
        """Without a pre-screen: where past runs say to start (`Experience.starts`: this
        shape class's best, the points near the best at every past shape), and the value
        model's guess at this shape once it has learnt from past runs' results at theirs
        (after this shape class's own best when there is one, else first)."""
        self.seeds = [Proposal(c, EXPERIENCE_ARM, "a point near the best at past runs' shapes "
                               "(experience store)")
                      for c in self.experience.starts(self.problem, SEEDS)]
        guess = self._guess()
        if guess is None or guess.key in {p.candidate.key for p in self.seeds}:
            return
        here = any(r.get("shape_class") == self.shape_class and r.get("status") == "ok"
                   for r in self.experience.rows)
        self.seeds.insert(1 if here and self.seeds else 0, Proposal(
            guess, MODEL_ARM, f"value model learnt from {len(self.model.past_ys)} past "
            "results at other shapes: its best guess at this one"))

    def _guess(self) -> Candidate | None:
        """The value model's best point (posterior mean) that traces at the shape, once it has
        learnt from past runs' results; None before."""
        if not self.model.past_ys:
            return None
        if self.points is None:
            self.points = list(every_candidate(self.problem))
        return next((c for c in self.model.expected(self.points) if not self.legal(c)), None)

    def _tile(self, candidate: Candidate) -> tuple:
        numeric = {k.name for k in self.problem.knobs()
                   if all(isinstance(v, int) and not isinstance(v, bool) for v in k.values)}
        return tuple((k, v) for k, v in candidate.params if k in numeric)

    def beaten(self, candidate: Candidate, state: SearchState) -> bool:
        """The model times `candidate` no faster than the best result (the reward is that same
        modelled time, so it cannot be a new best): screened, or, with a pre-screen, a program
        rewrite (or repair) timed by the model before a full evaluation is spent on it."""
        best = state.best
        if best is None or best.time_us is None:
            return False
        screened = (self.screened or {}).get(candidate.key)
        if screened is None and candidate.rewrites and self.screen is not None:
            screened = self.screen.time(candidate).time_us
        return screened is not None and screened >= best.time_us

    def _draw(self, state: SearchState, fresh) -> Proposal | None:
        while self.seeds:  # screened points that may still beat the best result come first
            seed = self.seeds.pop(0)
            if fresh(seed.candidate):
                return seed
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
        options.update(self._rewrite_options(parent, fresh))
        for arm in sorted([*options, OPTUNA_ARM, MODEL_ARM], key=lambda a: self._ucb(a, ctx),
                          reverse=True):
            if arm in options:
                return options[arm]
            proposal = self._ask(fresh) if arm == OPTUNA_ARM else self._sample_model(state, fresh)
            if proposal is not None:
                return proposal
        return self._random(fresh)

    def _traced(self, candidate: Candidate):
        if candidate.key not in self.ir:
            self.ir[candidate.key] = traced(self.problem, candidate)
        return self.ir[candidate.key]

    def _rewrite_options(self, parent: Candidate, fresh) -> dict[str, Proposal]:
        """One proposal per rewrite that applies to the parent's IR (or, for a trace-level
        rewrite, to its program): its first fresh site."""
        if not self.rewrites:
            return {}
        kernel = self._traced(parent)
        if kernel is None:
            return {}
        options = {}
        if parent.source is None:
            for name, site in R.trace_sites(parent.family, parent.param_dict, parent.rewrites):
                arm = REWRITE_PREFIX + name
                candidate = attrs.evolve(parent, rewrites=R.with_rewrite(parent.rewrites, name,
                                                                         site))
                if arm in self.trace_rewrites and arm not in options and fresh(candidate):
                    rewrite = self.trace_rewrites[arm]
                    options[arm] = Proposal(candidate, arm, f"{rewrite.effect} ({rewrite.legal})")
        for arm, rewrite in self.rewrites.items():
            for site in rewrite.sites(kernel):
                candidate = attrs.evolve(parent, rewrites=(*parent.rewrites,
                                                           (rewrite.name, site)))
                if fresh(candidate):
                    options[arm] = Proposal(candidate, arm, f"{rewrite.effect} ({rewrite.legal})")
                    break
        return options

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
            credit = graded_credit(ev.reward if ev.is_result else None, self.best_reward)
            if ev.move in self.pulls:
                self.pulls[ev.move] += 1
                self.credit[ev.move] += credit
            self._remember(ev, credit)
            if ev.status == REFUTED and ev.counterexamples:
                self._queue_repairs(ev)
            if ev.is_result:
                self.best_reward = max(self.best_reward or 0.0, ev.reward)
                if ev.candidate.source is None:
                    self.model.observe(ev.candidate, ev.reward)
                self._teach_screen(ev)
            self._tell(ev)

    def _teach_screen(self, ev: Evaluation) -> None:
        """Once a result gives the reference time (reward x time), the screened times become
        the rewards they would earn, and optuna's study and the value model learn them: guidance
        for the samplers only, never a result (nothing screened counts until evaluated)."""
        if not self.screened or self.taught or not ev.time_us:
            return
        self.taught = True
        reference_us = ev.reward * ev.time_us
        for entry in self.screen_ranking:
            candidate = entry.candidate
            if entry.time_us is None or candidate.rewrites or candidate.source is not None:
                continue
            reward = reference_us / entry.time_us
            self.model.observe(candidate, reward)
            params = {k: v for k, v in candidate.params if k in self.distributions}
            if set(params) == set(self.distributions):
                self.study.add_trial(optuna.trial.create_trial(
                    params=params, distributions=self.distributions, value=reward))

    def _remember(self, ev: Evaluation, credit: float) -> None:
        """The move's row in the experience store, and the verdict of a repair."""
        from argus.search.repair import counterexample_kind

        record = self.repair_of.get(ev.key)
        if record is not None and "verdict" not in record:
            record["verdict"] = ev.status
            self.log({"kind": "repair", "candidate": ev.key, **record,
                      "reward": ev.reward if ev.is_result else None})
        if self.experience is None or not self.learn or not ev.move:
            return
        arm = ev.move.split(":")[0] + ":" + ev.move.split(":")[1] \
            if ev.move.startswith(REPAIR_PREFIX) else ev.move
        self.experience.append({
            "run": self.run, "shape_class": self.shape_class, "sizes": self.problem.sizes,
            "move": arm,
            "credit": round(credit, 4), "status": ev.status, "reward": ev.reward,
            "counterexample": counterexample_kind(ev), "features": self._features(ev),
            "candidate": ev.candidate.to_dict()})

    def _features(self, ev: Evaluation) -> dict:
        ctx = Context(self.problem, ev.candidate, ev.facts)
        out = {"rewrites": len(ev.candidate.rewrites)}
        for name, get in (("workgroups", lambda: ctx.workgroups), ("k_tiles",
                                                                   lambda: k_tiles(ctx))):
            try:
                out[name] = get()
            except (KeyError, ZeroDivisionError):
                pass
        for name in ("lds_bytes", "bottleneck", "occupancy_limited_by"):
            if name in ev.facts:
                out[name] = ev.facts[name]
        return out

    def _queue_repairs(self, ev: Evaluation) -> None:
        """Repairs of a refuted candidate from its counterexamples, tried next."""
        from argus.search.repair import repairs

        kernel = self._traced(ev.candidate)
        if kernel is None:
            return
        found = repairs(kernel, ev.candidate, list(ev.counterexamples))
        first = ev.counterexamples[0]
        for repair in found:
            self.repair_of[repair.candidate.key] = {
                "refuted": ev.key, "refuted_candidate": ev.candidate.to_dict(),
                "counterexample": {"kind": first.get("kind"), "loc": first.get("loc"),
                                   "text": first.get("text", "")[:600]},
                "repair": {k: v for k, v in repair.to_dict().items() if k != "candidate"}}
        proposals = [Proposal(r.candidate, REPAIR_PREFIX + r.rewrite, r.why) for r in found]
        depth = self.repair_of.get(ev.key, {}).get("depth", 0)
        for repair in found:
            self.repair_of[repair.candidate.key]["depth"] = depth + 1
        if depth == 0:  # a new refutation's repairs go first
            self.repairs[:0] = proposals
        elif depth < MAX_REPAIR_DEPTH:  # a refuted repair's after its siblings
            self.repairs.extend(proposals)

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

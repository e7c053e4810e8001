"""The model-only pre-screen: before the expensive part of the budget (verify, interpret, emulate)
is spent, candidates are traced, compiled and timed by the MI300X model alone, and the planner
proposes the fastest first. A greedy climb over one-step neighbours (each knob one value up or
down, each always-legal rewrite) from several starts (the default, the best points of past runs
in the experience store), within a count and a wall-clock limit. A screened time ranks; it is
never a result: every candidate counted goes down the whole road like any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import attrs

from argus.errors import ArgusError
from argus.search.space import Candidate, Problem, default_candidate

#: model timings a screen may spend (compile + time, about a second each on this machine) and
#: its wall-clock limit; the default budget's eight full evaluations take minutes each
SCREEN_POINTS = 64
SCREEN_S = 150.0
#: program rewrites the screen may add (always legal, so a screened point is not refuted later)
#: (unroll_loop and transpose_grid left out: the model times them as the kernel they rewrite)
SCREEN_REWRITES = ("grow_rings",)


@attrs.frozen
class Screened:
    """One candidate's model-only verdict: its modelled µs at the shape, or why there is none."""

    candidate: Candidate
    time_us: float | None
    why: str = ""

    def to_dict(self) -> dict:
        return {"candidate": self.candidate.to_dict(), "key": self.candidate.key,
                "time_us": self.time_us, "why": self.why}


def model_time(problem: Problem, candidate: Candidate) -> Screened:
    """The candidate traced, compiled and timed at the problem's shape by the model alone (no
    proof, no numerical check): the road's compile and time stages, cached by IR."""
    from argus import pipeline
    from argus.search.evaluate import Evaluator, compile_params, kernel_params

    evaluator = Evaluator(problem)
    try:
        ir = evaluator._trace(candidate)
        evaluator._fits(ir)
        timing = pipeline.road(ir, skip=("verify", "interpret", "emulate"),
                               sizes=evaluator._sizes(candidate), **compile_params(candidate),
                               **kernel_params(candidate)).timing
    except pipeline.StageError as err:
        return Screened(candidate, None, f"{err.stage}: {str(err).splitlines()[0][:200]}")
    except (ArgusError, ValueError) as err:  # a bad knob value the kernel itself refuses
        return Screened(candidate, None, f"{type(err).__name__}: {str(err)[:200]}")
    return Screened(candidate, timing.microseconds)


def _model_time_job(job: tuple[Problem, Candidate]) -> Screened:
    return model_time(*job)


def steps(problem: Problem, candidate: Candidate) -> list[tuple]:
    """The one-step moves from `candidate`: ("knob", name, by) for a knob with ordered values
    (one value up or down), ("set", name, value) for one without (each other value), and
    ("rewrite", name, site) for a screen rewrite at its first site."""
    out: list[tuple] = []
    params = candidate.param_dict
    for knob in problem.knobs():
        if all(isinstance(v, int) and not isinstance(v, bool) for v in knob.values):
            out += [("knob", knob.name, by) for by in (-1, 1)
                    if knob.step(params[knob.name], by) is not None]
        else:
            out += [("set", knob.name, v) for v in knob.values if v != params[knob.name]]
    kernel = _traced(problem, candidate)
    if kernel is not None:
        from argus.search.rewrites import REWRITES

        applied = {name for name, _ in candidate.rewrites}
        for name in SCREEN_REWRITES:
            rewrite = REWRITES.get(name)
            found = rewrite.sites(kernel) if rewrite is not None and name not in applied else []
            if found:
                out.append(("rewrite", name, found[0]))
    return out


def step(problem: Problem, candidate: Candidate, move: tuple) -> Candidate | None:
    """`candidate` after one move of `steps()`, or None where the move does not apply."""
    kind, name, arg = move
    params = candidate.param_dict
    if kind == "rewrite":
        if name in {n for n, _ in candidate.rewrites}:
            return None
        return attrs.evolve(candidate, rewrites=(*candidate.rewrites, (name, arg)))
    knob = next((k for k in problem.knobs() if k.name == name), None)
    if knob is None:
        return None
    value = knob.step(params[name], arg) if kind == "knob" else arg
    if value is None or value == params[name]:
        return None
    return attrs.evolve(candidate, params={**params, name: value})


def neighbours(problem: Problem, candidate: Candidate) -> list[Candidate]:
    """Every candidate one move of `steps()` away."""
    return [c for c in (step(problem, candidate, m) for m in steps(problem, candidate))
            if c is not None]


def _traced(problem: Problem, candidate: Candidate):
    from argus.search.evaluate import traced

    return traced(problem, candidate)


class Screen:
    """A model-only climb over the problem's space; `run()` ranks what it timed, fastest first.
    `timer` (candidate -> Screened) defaults to `model_time`; `legal` (candidate -> "" or why
    not) prunes for free what cannot trace at the shape."""

    def __init__(self, problem: Problem, *, points: int = SCREEN_POINTS,
                 wall_s: float | None = SCREEN_S, starts: Iterable[Candidate] = (),
                 legal: Callable[[Candidate], str] | None = None,
                 timer: Callable[[Candidate], Screened] | None = None, jobs: int = 1):
        from argus.search.evaluate import precheck

        self.problem, self.points, self.wall_s, self.jobs = problem, points, wall_s, jobs
        #: where the climbs start: the given points (past runs' bests) first, then the default
        self.starts = list(dict.fromkeys([*starts, default_candidate(problem)]))
        self.legal = legal or (lambda c: precheck(problem, c))
        self.timer = timer
        self.timed: dict[str, Screened] = {}
        self.looked: dict[str, Screened] = {}  # timed by `time()`, not part of the ranking
        self.wall = 0.0
        self._pool = None

    def _time(self, candidates: list[Candidate]) -> list[Screened]:
        """The screened times of those candidates that can trace at the shape (each timed
        once; a batch in `jobs` processes when the model times them)."""
        todo = [c for c in dict.fromkeys(candidates) if c.key not in self.timed
                and not self.legal(c)]
        todo = todo[:max(0, self.points - len(self.timed))]
        if self.timer is not None or self.jobs <= 1 or len(todo) <= 1:
            timer = self.timer or (lambda c: model_time(self.problem, c))
            found = [timer(c) for c in todo]
        else:
            from concurrent.futures.process import BrokenProcessPool

            try:
                found = list(self._executor().map(_model_time_job, [(self.problem, c)
                                                                     for c in todo]))
            except BrokenProcessPool:  # a worker died (memory): time the rest here
                self._pool.shutdown(cancel_futures=True)
                self._pool, self.jobs = None, 1
                found = [model_time(self.problem, c) for c in todo]
        self.timed.update((s.candidate.key, s) for s in found)
        return [self.timed[c.key] for c in candidates if c.key in self.timed]

    def time(self, candidate: Candidate) -> Screened:
        """One candidate's model-only time outside the climb and its limits (the planner's
        look at a rewritten or repaired candidate before it spends a full evaluation on it);
        each timed once."""
        if candidate.key in self.timed:
            return self.timed[candidate.key]
        if candidate.key not in self.looked:
            timer = self.timer or (lambda c: model_time(self.problem, c))
            self.looked[candidate.key] = timer(candidate)
        return self.looked[candidate.key]

    def _executor(self):
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(self.jobs, multiprocessing.get_context("spawn"))
        return self._pool

    def _spent(self, started: float) -> bool:
        self.wall = time.monotonic() - started
        return len(self.timed) >= self.points or (
            self.wall_s is not None and self.wall >= self.wall_s)

    def run(self) -> list[Screened]:
        """A climb from each start until no neighbour is faster or the limits are reached; the
        ranking of every point timed, fastest first (untimed ones last)."""
        started = time.monotonic()
        try:
            for start in self.starts:
                self._climb(start, started)
                if self._spent(started):
                    break
        finally:
            if self._pool is not None:
                self._pool.shutdown(cancel_futures=True)
                self._pool = None
        self.wall = time.monotonic() - started
        return self.ranking()

    def _climb(self, start: Candidate, started: float) -> None:
        """Times every neighbour of the current point and moves to the fastest; the other
        moves that were faster there are then tried one at a time from the new point (each
        kept if it is faster still), so a climb that needs several knobs turned pays for one
        full scan, not one per knob. Stops when a full scan finds nothing faster."""
        current = next(iter(self._time([start])), None)
        if current is None or current.time_us is None:
            return
        while not self._spent(started):
            moves = steps(self.problem, current.candidate)
            scanned = [(m, c) for m in moves
                       if (c := step(self.problem, current.candidate, m)) is not None]
            timed = {s.candidate.key: s for s in self._time([c for _, c in scanned])
                     if s.time_us is not None}
            faster = sorted(((timed[c.key].time_us, m) for m, c in scanned
                             if c.key in timed and timed[c.key].time_us < current.time_us),
                            key=lambda tm: tm[0])
            if not faster:
                return
            current = timed[step(self.problem, current.candidate, faster[0][1]).key]
            queue = [m for _, m in faster[1:]]
            if faster[0][1][0] == "knob":  # the same knob further the same way, first
                queue.insert(0, faster[0][1])
            while queue and not self._spent(started):
                move = queue.pop(0)
                nxt = step(self.problem, current.candidate, move)
                found = self._time([nxt]) if nxt is not None else []
                if found and found[0].time_us is not None \
                        and found[0].time_us < current.time_us:
                    current = found[0]
                    if move[0] == "knob":
                        queue.insert(0, move)

    def ranking(self) -> list[Screened]:
        return sorted(self.timed.values(), key=lambda s: (s.time_us is None,
                                                          s.time_us or 0.0))

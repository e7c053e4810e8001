"""One candidate down the road (`argus.pipeline.road`) to an `Evaluation`:
trace -> verify (Proved required; Refuted gives its counterexamples; Unknown is recorded and
not accepted) -> correctness in the reference interpreter at small shapes (outputs pre-filled
with NaN, several seeds, fresh inputs per trial) -> compile -> the same checks on the code
object in the emulator -> modelled time -> reward.

The road caches each stage by the traced IR's digest, so two candidates with the same IR are
verified and checked once; what is left here is the search's own part: tracing an edited
source in the sandbox, the mapping from a `StageError`'s kind to a status, the reward against a
reference time, and the re-check of a suspect speed-up. A candidate without a modelled time has
no reward (`incomplete`).
"""

from __future__ import annotations

import time

import attrs

from argus import env, pipeline
from argus.errors import ArgusError
from argus.ir.ops import resources
from argus.kernels.check import Case
from argus.pipeline import StageError
from argus.search.reward import reward
from argus.search.space import Candidate, Problem, check_sizes, family
from argus.smt import DEFAULT_TIMEOUT_MS

#: statuses; only OK is ever reported as a result
OK, INCOMPLETE = "ok", "incomplete"
INVALID, REFUTED, UNKNOWN, WRONG, ERROR, TIMEOUT = (
    "invalid", "refuted", "unknown", "wrong", "error", "timeout")
STATUSES = (OK, INCOMPLETE, INVALID, REFUTED, UNKNOWN, WRONG, ERROR, TIMEOUT)
#: KernelBench's excessive-speedup threshold (eval_kernel_against_ref): a modelled speed-up over
#: the reference above it is re-checked on fresh seeds before it counts, and carries a note
SUSPECT_SPEEDUP = 10.0
RECHECK_SEED = 7919  # seeds of the re-check: apart from any run's own (seed * 1000 + trial)
#: the status of each outcome of a StageError
STATUS_OF = {"invalid": INVALID, "refuted": REFUTED, "unknown": UNKNOWN, "wrong": WRONG,
             "error": ERROR, "timeout": TIMEOUT}
#: the Evaluation's name for a road stage (the interpreter's check is the "correctness" stage)
STAGE_OF = {"interpret": "correctness"}


@attrs.frozen
class Evaluation:
    """What the pipeline said about one candidate (one line of the trajectory)."""

    key: str
    candidate: Candidate
    status: str
    stage: str  # the last stage reached: trace | verify | correctness | compile | time | reward
    message: str = ""
    verdict: str = ""
    counterexamples: tuple = ()  # JSON dicts of refuted obligations, at most three
    correctness: dict | None = attrs.field(default=None, hash=False)
    time_us: float | None = None  # modelled, at the target shape
    reference: dict | None = attrs.field(default=None, hash=False)  # {"name", "time_us"}
    reward: float | None = None
    missing: str = ""  # the pipeline stage this build lacks, when status is incomplete
    facts: dict = attrs.field(factory=dict, hash=False)
    wall_s: float = 0.0
    move: str = ""
    planner: str = ""
    note: str = ""  # a caveat the result carries (a suspect speed-up that passed its re-check)

    @property
    def is_result(self) -> bool:
        """Verified for every size, correct on every trial, modelled and rewarded."""
        return self.status == OK and self.reward is not None

    def to_dict(self) -> dict:
        data = attrs.asdict(self, recurse=False)
        data["candidate"] = self.candidate.to_dict()
        data["counterexamples"] = list(self.counterexamples)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Evaluation:
        fields = {f.name for f in attrs.fields(cls)}
        data = {k: v for k, v in data.items() if k in fields}
        data["candidate"] = Candidate.from_dict(data["candidate"])
        data["counterexamples"] = tuple(data.get("counterexamples", ()))
        return cls(**data)


class _Stop(Exception):
    """Ends an evaluation with a status the road does not give: incomplete (no reference time),
    or a suspect speed-up that failed its re-check."""

    def __init__(self, status: str, stage: str, message: str, **extra):
        super().__init__(message)
        self.status, self.stage, self.message, self.extra = status, stage, message, extra


@attrs.frozen
class Evaluator:
    """Evaluates candidates of one problem; picklable, so worker processes can hold one."""

    problem: Problem
    trials: int = 3
    seed: int = 0
    #: the solver's limit per query (ARGUS_SMT_TIMEOUT_MS, else the library default)
    verify_timeout_ms: int = attrs.field(factory=lambda: env.smt_timeout_ms(DEFAULT_TIMEOUT_MS))
    sandbox_time_s: float = 20.0
    sandbox_memory_mb: int = 2048
    #: {"name", "time_us"} to reward against; None: AMD's kernel at the shape, else the default
    #: configuration (worked out when first needed)
    reference: dict | None = None

    def __call__(self, candidate: Candidate) -> Evaluation:
        started = time.perf_counter()
        done: dict = {"facts": {}}
        try:
            ir = self._trace(candidate)
            done["facts"].update(resources(ir))
            self._fits(ir)
            reached = self._road(ir, candidate)
            self._record(done, reached)
            timing = reached.timing
            reference = self.reference or self.baseline()
            done["reference"] = reference
            done["reward"] = reward(timing.microseconds, reference and reference["time_us"])
            if done["reward"] is None:
                raise _Stop(INCOMPLETE, "time", "no reference time to compare with",
                            missing="reference time (neither AMD's kernel nor the default "
                                    "configuration could be timed)")
            if done["reward"] > SUSPECT_SPEEDUP:
                done["note"] = self._recheck(ir, candidate, reached.compiled, done)
            return self._evaluation(candidate, done, OK, "reward",
                                    f"{timing.microseconds:.2f} µs modelled", started)
        except StageError as err:
            self._record(done, err.road or pipeline.Road(), err)
            stage = STAGE_OF.get(err.stage, err.stage)
            return self._evaluation(candidate, done, STATUS_OF[err.outcome], stage, str(err),
                                    started)
        except _Stop as stop:
            done.update(stop.extra)
            return self._evaluation(candidate, done, stop.status, stop.stage, stop.message,
                                    started)

    def _road(self, ir, candidate: Candidate, until: str = "time", skip: tuple = ()):
        """The road from the traced candidate: verified, checked at its family's check sizes
        (one per trial), compiled with its compile knobs, timed at the problem's shape."""
        fam = family(self.problem.family)
        params = kernel_params(candidate)
        check = [_satisfying(ir, check_sizes(fam, params, t)) for t in range(self.trials)]
        return pipeline.road(ir, until=until, skip=skip, sizes=self._sizes(candidate),
                             check=check, seed=self.seed, timeout_ms=self.verify_timeout_ms,
                             reference=fam,
                             **compile_params(candidate), **params)

    def _record(self, done: dict, road, err: StageError | None = None) -> None:
        """What the stages reached say about the candidate: verdict, facts, correctness."""
        report = road.report or (err.result if err and err.stage == "verify" else None)
        if report is not None:
            done["verdict"] = report.summary()
            done["facts"]["bank_conflict_degree"] = max(
                (b.degree for b in report.bank_facts), default=1)
            if report.refuted:
                done["counterexamples"] = tuple(_obligation(o) for o in report.refuted[:3])
        checks = {"interpreter": road.interp or (err and err.stage == "interpret" and err.result),
                  "emulator": road.emulated or (err and err.stage == "emulate" and err.result)}
        if any(checks.values()):
            done["correctness"] = _summary({k: c.to_dict() for k, c in checks.items() if c})
        if road.compiled is not None:
            done["facts"].update(road.compiled.resources)
        if road.timing is not None:
            done["facts"].update(timing_facts(road.timing))
            done["time_us"] = road.timing.microseconds

    def _evaluation(self, candidate: Candidate, done: dict, status: str, stage: str,
                    message: str, started: float) -> Evaluation:
        return Evaluation(candidate.key, candidate, status, stage, message,
                          done.get("verdict", ""), done.get("counterexamples", ()),
                          done.get("correctness"), done.get("time_us"), done.get("reference"),
                          None if status == WRONG else done.get("reward"),
                          done.get("missing", ""), done["facts"],
                          time.perf_counter() - started, note=done.get("note", ""))

    def _recheck(self, ir, candidate: Candidate, compiled, done: dict) -> str:
        """KernelBench's excessive-speedup rule: a modelled speed-up above SUSPECT_SPEEDUP is
        more often a kernel that skips work than a real win, so it is run again in the emulator
        on fresh seeds (twice the trials) before it may count; the note travels with it."""
        fam, params = family(self.problem.family), kernel_params(candidate)
        trials = 2 * self.trials
        case = Case(fam, params,
                    tuple(_satisfying(ir, check_sizes(fam, params, t)) for t in range(trials)),
                    tuple((self.seed + RECHECK_SEED) * 1000 + t for t in range(trials)))
        check = pipeline.stage("emulate", lambda: pipeline.check_emulated(compiled, case), ir,
                               policy=compile_params(candidate).get("policy", "interleave"),
                               case=case.key)
        done["correctness"] = {**done["correctness"], "recheck": check.to_dict()}
        done["correctness"]["ok"] = done["correctness"]["ok"] and check.ok
        speedup = done["reward"]
        if not check.ok:
            raise _Stop(WRONG, "recheck", f"suspect modelled speed-up {speedup:.1f}x (> "
                        f"{SUSPECT_SPEEDUP:g}x) failed its re-check: {check.message}")
        return (f"suspect modelled speed-up {speedup:.1f}x (> {SUSPECT_SPEEDUP:g}x): re-checked "
                f"on {trials} fresh seeds in the emulator; confirm on hardware")

    def _sizes(self, candidate: Candidate) -> dict:
        fam = family(self.problem.family)
        return (fam.timing_sizes(self.problem.sizes, kernel_params(candidate))
                if fam.timing_sizes else dict(self.problem.sizes))

    def baseline(self) -> dict | None:
        """AMD's fastest counterpart at the shape (modelled), else the default configuration's
        modelled time; worked out once per process (`tune` does it once, before the workers
        start, and hands it to them as `reference`)."""
        from argus.search.reward import amd_reference
        from argus.search.space import default_candidate

        key = (self.problem.family, tuple(sorted(self.problem.sizes.items())),
               tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                            for k, v in self.problem.pinned.items())))
        if key not in _REFERENCES:
            reference = amd_reference(self.problem)
            if reference is None:
                base = default_candidate(self.problem)
                try:
                    timing = self._road(self._trace(base), base, skip=(
                        "verify", "interpret", "emulate")).timing
                    reference = {"name": "default configuration",
                                 "time_us": timing.microseconds, "modelled": True}
                except StageError:
                    reference = None
            _REFERENCES[key] = reference
        return _REFERENCES[key]

    def _trace(self, candidate: Candidate):
        entry = family(self.problem.family)
        params = kernel_params(candidate)
        if candidate.source is None:
            from argus.search.rewrites import trace_rewritten

            try:
                return _rewritten(trace_rewritten(entry, self.problem.family, params,
                                                  candidate.rewrites), candidate)
            except (ArgusError, ValueError) as err:
                raise StageError("trace", pipeline.outcome_of(err),
                                 f"{candidate.describe()}: {err}") from None
        from argus.ir.text import parse_kernel
        from argus.search.sandbox import trace_source

        traced = trace_source(candidate.source, params, time_limit_s=self.sandbox_time_s,
                              memory_limit_mb=self.sandbox_memory_mb)
        if traced.ir_text is None:
            kind = "timeout" if traced.failure == "timeout" else "invalid"
            raise StageError("trace", kind, traced.message)
        ir = parse_kernel(traced.ir_text)
        expected = entry.kernel.trace(**params)
        got = [(t.name, t.type.dtype, len(t.type.shape)) for t in ir.tensors]
        want = [(t.name, t.type.dtype, len(t.type.shape)) for t in expected.tensors]
        if got != want:
            raise StageError("trace", "invalid", f"the edit changed the kernel's arguments: "
                             f"{got}; {self.problem.family} takes {want}")
        from argus.search.rewrites import is_trace_rewrite

        if any(is_trace_rewrite(name) for name, _ in candidate.rewrites):
            raise StageError("trace", "invalid", f"{candidate.describe()}: a trace-level "
                             "rewrite needs the family's own program, not an edited source")
        try:
            return _rewritten(ir, candidate)
        except ValueError as err:
            raise StageError("trace", "invalid", f"{candidate.describe()}: {err}") from None

    def _fits(self, ir) -> None:
        """The target sizes must satisfy the kernel's own assumptions (tile divisibility)."""
        from argus.ir.sizes import broken_assumption

        # an assumption over a size the problem does not pin (MoE's routed rows) is not decided
        fact = broken_assumption(ir, self.problem.sizes)
        if fact is not None:
            raise StageError("trace", "invalid", f"the shape {self.problem.shape} breaks the "
                             f"kernel's assumption {fact}")


def _summary(checks: dict) -> dict:
    """Correctness over every device run so far: ok only if all are."""
    failed = [c for c in checks.values() if not c["ok"]]
    shown = failed[0] if failed else list(checks.values())[-1]
    return {"ok": not failed, "message": shown["message"], **checks}


def compile_params(candidate: Candidate) -> dict:
    """The candidate's compile-time options (knobs of the compile stage, e.g. policy)."""
    fam = family(candidate.family)
    return {k.name: candidate.param_dict[k.name] for k in fam.knobs
            if k.stage == "compile" and k.name in candidate.param_dict}


def kernel_params(candidate: Candidate) -> dict:
    """The candidate's kernel (trace-time) parameters."""
    compile_only = {k.name for k in family(candidate.family).knobs if k.stage == "compile"}
    return {k: v for k, v in candidate.params if k not in compile_only}


def _rewritten(ir, candidate: Candidate):
    """The traced IR with the candidate's program rewrites applied (a RewriteError, a
    ValueError, when one does not apply)."""
    if not candidate.rewrites:
        return ir
    from argus.search.rewrites import apply_rewrites

    return apply_rewrites(ir, candidate.rewrites)


def _satisfying(ir, sizes: dict) -> dict:
    """`sizes`, doubled until the kernel's own assumptions hold (an edited kernel may demand
    larger multiples than the family's check sizes); at most three doublings."""
    from argus.ir.sizes import admits

    for _ in range(4):
        # assumptions over sizes the inputs imply (MoE's routed rows) are not decided here
        if admits(ir, sizes):
            return sizes
        sizes = {k: v * 2 for k, v in sizes.items() if not isinstance(v, bool)}
    return sizes


def _obligation(o) -> dict:
    """A refuted obligation as JSON-ready data, with its printed form for prompts."""
    import json

    data = json.loads(json.dumps(attrs.asdict(o), default=str))
    data["text"] = str(o)
    return data


def timing_facts(timing) -> dict:
    """The modelled-time breakdown planners learn from: the bottleneck in words, busy fraction
    per unit, stall fractions per cause, the grid's dispatch rounds and active CUs."""
    return {"bottleneck": timing.bottleneck, "busy": dict(timing.busy),
            "stalls": dict(timing.stalls), "tflops": timing.tflops,
            "rounds": timing.rounds, "active_cus": timing.active_cus}


#: reference times per problem and prechecks per candidate, worked out once per process (not
#: stage results: those the road caches)
_REFERENCES: dict[tuple, dict | None] = {}
_PRECHECKS: dict[tuple, str] = {}


def precheck(problem: Problem, candidate: Candidate) -> str:
    """Why a knob-only candidate cannot run at the problem's shape ("" if it can): the trace
    and the size assumptions, decided without verifying (planners prune with it for free)."""
    key = (problem.family, tuple(problem.sizes.items()), candidate.key)
    if key not in _PRECHECKS:
        from argus.search.space import infeasible

        evaluator = Evaluator(problem)
        why = infeasible(candidate) if candidate.source is None else ""
        if why:  # declared by the family: no trace needed
            _PRECHECKS[key] = f"{candidate.describe()}: {why}"
            return _PRECHECKS[key]
        try:
            evaluator._fits(evaluator._trace(candidate))
            _PRECHECKS[key] = ""
        except StageError as err:
            _PRECHECKS[key] = err.message
    return _PRECHECKS[key]


def traced(problem: Problem, candidate: Candidate):
    """The candidate's traced IR with its rewrites applied, or None when it does not trace
    (planners read the IR for the sites of rewrites and repairs)."""
    try:
        return Evaluator(problem)._trace(candidate)
    except StageError:
        return None


def assembly(problem: Problem, candidate: Candidate) -> str:
    """The gfx942 assembly of a candidate (the road's compile stage caches it by IR)."""
    evaluator = Evaluator(problem)
    return pipeline.road(evaluator._trace(candidate), until="compile",
                         skip=("verify", "interpret"), **compile_params(candidate)).compiled.text

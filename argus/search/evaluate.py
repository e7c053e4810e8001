"""One candidate through the pipeline, stage by stage, to an `Evaluation`:
trace -> verify (Proved required; Refuted gives its counterexamples; Unknown is recorded and
not accepted) -> correctness in the reference interpreter at small shapes (outputs pre-filled
with NaN, several seeds, fresh inputs per trial) -> compile (argus.compile) -> the same checks
on the code object in the emulator -> modelled time -> reward.

Stages the build does not have yet (compile, modelled time) end the evaluation as `incomplete`
and name the missing stage: a candidate without a modelled time has no reward. Stage results
are cached in-process by the content hash of the traced IR, so two candidates with the same IR
are verified and checked once.
"""

from __future__ import annotations

import hashlib
import time

import attrs
import numpy as np

import argus
from argus.errors import ArgusError
from argus.search.reward import reward
from argus.search.space import Candidate, Problem, family
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


def _status(error: ArgusError) -> str:
    """A stage's Argus error as a verdict: the candidate's own fault (its configuration, or one
    Argus cannot handle) rejects it; a broken setup or an Argus bug is an error of the run."""
    return INVALID if error.kind in ("input", "unsupported") else ERROR


class _Stop(Exception):
    """Ends the chain of stages with a status (OK included: the last stage raises it too, so
    every evaluation leaves through one place)."""

    def __init__(self, status: str, stage: str, message: str, **extra):
        super().__init__(message)
        self.status, self.stage, self.message, self.extra = status, stage, message, extra


@attrs.frozen
class Evaluator:
    """Evaluates candidates of one problem; picklable, so worker processes can hold one."""

    problem: Problem
    trials: int = 3
    seed: int = 0
    verify_timeout_ms: int = DEFAULT_TIMEOUT_MS
    sandbox_time_s: float = 20.0
    sandbox_memory_mb: int = 2048
    #: {"name", "time_us"} to reward against; None: AMD's kernel at the shape, else the default
    #: configuration (worked out when first needed)
    reference: dict | None = None

    def __call__(self, candidate: Candidate) -> Evaluation:
        started = time.perf_counter()
        facts: dict = {}
        done: dict = {}
        try:
            ir = self._trace(candidate)
            done["stage"] = "trace"
            facts.update(_static_facts(ir))
            self._fits(ir)
            report = _cached(("verify", _ir_hash(ir)), lambda: argus.verify(
                ir, timeout_ms=self.verify_timeout_ms))
            done["verdict"] = report.summary()
            facts["bank_conflict_degree"] = max((b.degree for b in report.bank_facts),
                                                default=1)
            self._accept(report)
            done["stage"] = "verify"
            checks = {"interpreter": _cached(
                ("interp", _ir_hash(ir), tuple(kernel_params(candidate).items()), self.seed,
                 self.trials),
                lambda: self._check(ir, candidate, _interpreter(ir)))}
            done["correctness"] = _summary(checks)
            if not checks["interpreter"]["ok"]:
                raise _Stop(WRONG, "correctness", checks["interpreter"]["message"])
            done["stage"] = "correctness"
            compiled = self._compile(ir, candidate)
            facts.update(compiled.resources)
            done["stage"] = "compile"
            checks["emulator"] = _cached(
                ("emulate", _ir_hash(ir), candidate.params, self.seed, self.trials),
                lambda: self._check(ir, candidate, _emulator(compiled)))
            done["correctness"] = _summary(checks)
            if not checks["emulator"]["ok"]:
                raise _Stop(WRONG, "emulate", checks["emulator"]["message"])
            done["stage"] = "emulate"
            timing = self._time(compiled, candidate)
            facts.update(timing_facts(timing))
            done["time_us"] = timing.microseconds
            done["stage"] = "time"
            reference = self.reference or self.baseline()
            done["reference"] = reference
            done["reward"] = reward(timing.microseconds, reference and reference["time_us"])
            if done["reward"] is None:
                raise _Stop(INCOMPLETE, "time", "no reference time to compare with",
                            missing="reference time (neither AMD's kernel nor the default "
                                    "configuration could be timed)")
            if done["reward"] > SUSPECT_SPEEDUP:
                done["note"] = self._recheck(ir, candidate, compiled, done["reward"], checks)
                done["correctness"] = _summary(checks)
            raise _Stop(OK, "reward", f"{timing.microseconds:.2f} µs modelled")
        except _Stop as stop:
            return Evaluation(candidate.key, candidate, stop.status, stop.stage, stop.message,
                              done.get("verdict", ""), stop.extra.get("counterexamples", ()),
                              done.get("correctness"), done.get("time_us"),
                              done.get("reference"),
                              None if stop.status == WRONG else done.get("reward"),
                              stop.extra.get("missing", ""), facts,
                              time.perf_counter() - started, note=done.get("note", ""))

    def _recheck(self, ir, candidate: Candidate, compiled, speedup: float, checks: dict) -> str:
        """KernelBench's excessive-speedup rule: a modelled speed-up above SUSPECT_SPEEDUP is
        more often a kernel that skips work than a real win, so it is run again in the emulator
        on fresh seeds (twice the trials) before it may count; the note travels with it."""
        fresh = attrs.evolve(self, seed=self.seed + RECHECK_SEED, trials=2 * self.trials)
        checks["recheck"] = fresh._check(ir, candidate, _emulator(compiled))
        if not checks["recheck"]["ok"]:
            raise _Stop(WRONG, "recheck", f"suspect modelled speed-up {speedup:.1f}x (> "
                        f"{SUSPECT_SPEEDUP:g}x) failed its re-check: "
                        f"{checks['recheck']['message']}")
        return (f"suspect modelled speed-up {speedup:.1f}x (> {SUSPECT_SPEEDUP:g}x): re-checked "
                f"on {fresh.trials} fresh seeds in the emulator; confirm on hardware")

    def _time(self, compiled, candidate: Candidate):
        """Modelled time at the target shape; a launch the model cannot time is invalid."""
        fam = family(self.problem.family)
        sizes = (fam.timing_sizes(self.problem.sizes, kernel_params(candidate))
                 if fam.timing_sizes else self.problem.sizes)
        try:
            return _cached(("time", _ir_hash(compiled.ir), tuple(sorted(sizes.items())),
                            tuple(sorted(compile_params(candidate).items()))),
                           lambda: argus.time(compiled, sizes=sizes))
        except ArgusError as err:
            raise _Stop(_status(err), "time", f"{type(err).__name__}: {err}") from None

    def baseline(self) -> dict | None:
        """AMD's fastest counterpart at the shape (modelled), else the default configuration's
        modelled time; worked out once per process (`tune` does it once, before the workers
        start, and hands it to them as `reference`)."""
        from argus.search.reward import amd_reference
        from argus.search.space import default_candidate

        def measure():
            base = default_candidate(self.problem)
            ir = self._trace(base)
            timing = self._time(argus.compile(ir, verify=False, **compile_params(base)), base)
            return {"name": "default configuration", "time_us": timing.microseconds,
                    "modelled": True}
        key = (self.problem.family, tuple(sorted(self.problem.sizes.items())),
               tuple(sorted(self.problem.pinned.items())))
        amd = _cached(("amd-reference", key), lambda: amd_reference(self.problem))
        if amd is not None:
            return amd
        try:
            return _cached(("default-reference", key), measure)
        except _Stop:
            return None

    def _compile(self, ir, candidate: Candidate):
        """The code object; a configuration the backend cannot lower (registers, LDS, an
        unsupported op) is invalid, a broken toolchain an error."""
        options = compile_params(candidate)
        try:
            # the verify stage proved the candidate already
            return argus.compile(ir, verify=False, **options)
        except ArgusError as err:
            raise _Stop(_status(err), "compile", f"{type(err).__name__}: {err}") from None

    def _trace(self, candidate: Candidate):
        from argus.kernels import library

        entry = library()[self.problem.family]
        params = kernel_params(candidate)
        if candidate.source is None:
            try:
                return _rewritten(entry.kernel.trace(**params), candidate)
            except ArgusError as err:
                raise _Stop(_status(err), "trace", f"{candidate.describe()}: {err}") from None
        from argus.ir.text import parse_kernel
        from argus.search.sandbox import trace_source

        traced = trace_source(candidate.source, params, time_limit_s=self.sandbox_time_s,
                              memory_limit_mb=self.sandbox_memory_mb)
        if traced.ir_text is None:
            status = TIMEOUT if traced.failure == "timeout" else INVALID
            raise _Stop(status, "trace", traced.message)
        ir = parse_kernel(traced.ir_text)
        expected = entry.kernel.trace(**params)
        got = [(t.name, t.type.dtype, len(t.type.shape)) for t in ir.tensors]
        want = [(t.name, t.type.dtype, len(t.type.shape)) for t in expected.tensors]
        if got != want:
            raise _Stop(INVALID, "trace", f"the edit changed the kernel's arguments: {got}; "
                        f"{self.problem.family} takes {want}")
        try:
            return _rewritten(ir, candidate)
        except ValueError as err:
            raise _Stop(INVALID, "trace", f"{candidate.describe()}: {err}") from None

    def _fits(self, ir) -> None:
        """The target sizes must satisfy the kernel's own assumptions (tile divisibility)."""
        from argus.ir.sizes import broken_assumption

        # an assumption over a size the problem does not pin (MoE's routed rows) is not decided
        fact = broken_assumption(ir, self.problem.sizes)
        if fact is not None:
            raise _Stop(INVALID, "trace", f"the shape {self.problem.shape} breaks the "
                        f"kernel's assumption {fact}")

    @staticmethod
    def _accept(report) -> None:
        if report.refuted:
            shown = tuple(_obligation(o) for o in report.refuted[:3])
            raise _Stop(REFUTED, "verify", str(report.refuted[0]).splitlines()[0],
                        counterexamples=shown)
        if report.unknown or not report.proved_for_all_sizes:
            reason = report.unknown[0].reason if report.unknown else report.bound
            raise _Stop(UNKNOWN, "verify", f"not proved for every size: {reason}")
        if not report.obligations:
            raise _Stop(UNKNOWN, "verify", "the verifier found nothing to prove")

    def _check(self, ir, candidate: Candidate, runner) -> dict:
        """Run the kernel (`runner`: interpreter or emulator) on fresh inputs per trial, outputs
        pre-filled with NaN (accumulated outputs with random values, added to the expectation),
        and compare with numpy."""
        from argus.ir.ops import GlobalAtomicAdd
        from argus.kernels import library

        entry = library()[self.problem.family]
        fam = family(self.problem.family)
        params = kernel_params(candidate)
        accumulated = {op.tensor.name for op in ir.ops() if isinstance(op, GlobalAtomicAdd)}
        trials = []
        for trial in range(self.trials):
            seed = self.seed * 1000 + trial
            sizes = _satisfying(ir, fam.check_sizes(params, trial))
            arrays = entry.inputs(sizes, params, seed)
            out = arrays[entry.output]
            rng = np.random.default_rng(seed + 1)
            prefill = (rng.standard_normal(out.shape).astype(out.dtype)
                       if entry.output in accumulated else np.full(out.shape, np.nan, out.dtype))
            arrays[entry.output] = prefill.copy()
            given = {t.name: arrays[t.name] for t in ir.tensors}
            expected = entry.reference(arrays, params)
            if entry.output in accumulated:
                expected = expected + prefill.astype(np.float64)
            try:
                outputs, violations = runner(given)
            except Exception as err:  # the run itself failed: a hazard, a fault, a bad launch
                return {"ok": False, "device": runner.device, "trials": trials,
                        "tolerance": entry.tolerance,
                        "message": f"{runner.device}: {type(err).__name__}: {err}"}
            got = outputs[entry.output].astype(np.float64)
            unwritten = int(np.isnan(got).sum() - np.isnan(expected).sum())
            scale = max(1.0, float(np.nanmax(np.abs(expected))))
            error = float(np.nanmax(np.abs(got - expected))) / scale if unwritten <= 0 else \
                float("inf")
            trials.append({"seed": seed, "sizes": sizes, "max_error": error,
                           "unwritten": max(unwritten, 0),
                           "violations": [str(v) for v in violations[:3]]})
        worst = max(trials, key=lambda t: t["max_error"])
        ok = all(t["max_error"] <= entry.tolerance and not t["violations"] for t in trials)
        if ok:
            message = f"{len(trials)} trials within {entry.tolerance:g}"
        elif worst["unwritten"]:
            message = (f"{worst['unwritten']} output elements left unwritten (still NaN) at "
                       f"{worst['sizes']}")
        elif worst["violations"]:
            message = f"interpreter: {worst['violations'][0]}"
        else:
            message = (f"max error {worst['max_error']:.3g} > {entry.tolerance:g} at "
                       f"{worst['sizes']} (seed {worst['seed']})")
        return {"ok": ok, "device": runner.device, "trials": trials,
                "tolerance": entry.tolerance, "message": f"{runner.device}: {message}"}


def _interpreter(ir):
    def run(arrays):
        result = argus.interpret(ir, arrays)
        return result.outputs, result.violations
    run.device = "interpreter"
    return run


def _emulator(compiled):
    def run(arrays):
        arrays = {name: array.copy() for name, array in arrays.items()}
        compiled.run(device="emulator", **arrays)  # strict hazard and memory checks
        return arrays, ()
    run.device = "emulator"
    return run


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


def _static_facts(ir) -> dict:
    from argus.ir.ops import resources

    return resources(ir)


def timing_facts(timing) -> dict:
    """The modelled-time breakdown planners learn from: the bottleneck in words, busy fraction
    per unit, stall fractions per cause, the grid's dispatch rounds and active CUs."""
    return {"bottleneck": timing.bottleneck, "busy": dict(timing.busy),
            "stalls": dict(timing.stalls), "tflops": timing.tflops,
            "rounds": timing.rounds, "active_cus": timing.active_cus}


def _ir_hash(ir) -> str:
    from argus.ir.text import print_kernel

    return hashlib.sha256(print_kernel(ir).encode()).hexdigest()


_CACHE: dict = {}


def _cached(key, compute):
    if key not in _CACHE:
        _CACHE[key] = compute()
    return _CACHE[key]


def precheck(problem: Problem, candidate: Candidate) -> str:
    """Why a knob-only candidate cannot run at the problem's shape ("" if it can): the trace
    and the size assumptions, decided without verifying (planners prune with it for free)."""
    key = ("precheck", problem.family, tuple(problem.sizes.items()), candidate.key)
    if key not in _CACHE:
        evaluator = Evaluator(problem)
        try:
            evaluator._fits(evaluator._trace(candidate))
            _CACHE[key] = ""
        except _Stop as stop:
            _CACHE[key] = stop.message
    return _CACHE[key]


def traced(problem: Problem, candidate: Candidate):
    """The candidate's traced IR with its rewrites applied, or None when it does not trace
    (planners read the IR for the sites of rewrites and repairs)."""
    try:
        return Evaluator(problem)._trace(candidate)
    except _Stop:
        return None


def assembly(problem: Problem, candidate: Candidate) -> str:
    """The gfx942 assembly of a candidate (recompiled: compilations are cached by IR)."""
    evaluator = Evaluator(problem)
    return argus.compile(evaluator._trace(candidate), verify=False,
                         **compile_params(candidate)).text

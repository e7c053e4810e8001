"""Checking one KernelBench problem: find its solution, run it against the problem's own Model
by KernelBench's correctness rules on the emulator, prove every kernel for symbolic sizes, and
model its time at the published sizes against a roofline bound.
"""

from __future__ import annotations

import math
import time as clock
import traceback

import attrs
import numpy as np

from argus.asm.lower import RegisterBudgetError
from argus.errors import ArgusError
from argus.kernelbench import road
from argus.kernelbench.problem import BUDGET, FLOOR, Problem, load
from argus.kernelbench.route import Unsupported, conv_pins, route
from argus.kernelbench.solution import (
    Context,
    Refused,
    Shaped,
    Solution,
    from_plan,
    guarded,
    static_refusal,
)
from argus.kernelbench.templates import CHOICES, Conv, peaks

#: KernelBench's correctness rules: trials, the seed they derive from, tolerances.
TRIALS = 5
SEED = 42
TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
STATUSES = ("correct", "incorrect", "unsupported", "unknown", "error")


@attrs.define
class Row:
    """One problem's result, as the JSON rows and the table show it."""

    level: str
    problem: str
    status: str = "error"
    proved: bool = False
    max_error: float | None = None
    scaled_sizes: dict = attrs.Factory(dict)
    modelled_us: float | None = None
    roofline_us: float | None = None
    reason: str = ""
    generated: bool = False
    templates: list = attrs.Factory(list)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return attrs.asdict(self)

    @property
    def ratio(self) -> float | None:
        if self.modelled_us and self.roofline_us:
            return self.modelled_us / self.roofline_us
        return None


# ------------------------------------------------------------------------------ roofline
def roofline_us(inputs, output_bytes: int, matmul_flops: float, other_flops: float) -> float:
    """max(FLOPs at the peaks, compulsory bytes at HBM bandwidth): every input read once and
    the output written once."""
    p = peaks()
    moved = sum(t.numel() * t.element_size() for t in inputs if hasattr(t, "numel")) \
        + output_bytes
    compute = matmul_flops / p["mfma_f32"] + other_flops / p["valu_f32"]
    return max(compute, moved / p["hbm"]) * 1e6


# ------------------------------------------------------------------------------ checking
def find_solution(problem: Problem, solutions: dict | None, pins: tuple = ()):
    """(solution, plan or None): a hand-written one given for the problem (by stem or
    number), else the route's (its convolutions on the engines and tiles `pins` give)."""
    for key in (problem.name, problem.id):
        if solutions and key in solutions:
            return solutions[key], None
    model = problem.model()
    plan = route(model, problem.inputs(SEED), pins=pins)
    return from_plan(plan), plan


def _numpy(t) -> np.ndarray | float:
    """A tensor input as an array; a Python number input stays a number."""
    if isinstance(t, int | float) and not isinstance(t, bool):
        return float(t)
    return t.detach().cpu().numpy().copy()


def shaped_input(t):
    """A planning-mode stand-in for an input: its shape (a Python number stays itself)."""
    if isinstance(t, int | float) and not isinstance(t, bool):
        return float(t)
    return Shaped(tuple(t.shape), np.dtype(np.uint8) if str(t.dtype) == "torch.bool"
                  else np.dtype(np.float32))


def _parameters(model, plan) -> list[np.ndarray]:
    if plan is None:
        return [_numpy(p) for _, p in model.named_parameters()]
    state = dict(model.named_parameters()) | dict(model.named_buffers())
    return [_numpy(state[path]) for _, path in plan.params]


def correctness(problem: Problem, solution: Solution, plan) -> tuple[bool, float, str]:
    """KernelBench's rule: TRIALS fresh input sets, the problem's Model on torch's CPU as the
    reference, allclose at the dtype's tolerance, every trial passing. The solution sees copies
    of the inputs and the weights (never the reference output) and runs first."""
    import torch

    model = problem.model()
    worst = 0.0
    for trial in range(TRIALS):
        inputs = problem.inputs(SEED + trial)
        arrays = [_numpy(t) for t in inputs] + _parameters(model, plan)
        ctx = Context(execute=True)
        out = guarded(lambda ctx=ctx, arrays=arrays: solution.forward(ctx, *arrays))
        with torch.no_grad():
            ref = model(*inputs)
        if not isinstance(ref, torch.Tensor):
            raise Unsupported("a model returning something other than one tensor")
        tol = TOLERANCE.get(str(ref.dtype).removeprefix("torch."), 1e-4)
        expected = _numpy(ref)
        got = np.asarray(out)
        if got.shape != expected.shape:
            return False, math.inf, (f"trial {trial}: output shape {list(got.shape)}, "
                                     f"expected {list(expected.shape)}")
        error = float(np.nanmax(np.abs(got.astype(np.float64) - expected))) \
            if got.size else 0.0
        if np.isnan(got).any():
            where = tuple(int(i) for i in np.argwhere(np.isnan(got))[0])
            return False, math.inf, (f"trial {trial}: output element {where} is NaN (never "
                                     "written, or computed as NaN)")
        worst = max(worst, error)
        if not np.allclose(got, expected, atol=tol, rtol=tol):
            bad = np.abs(got - expected) > tol + tol * np.abs(expected)
            exact = _exact(model, inputs) if ref.dtype == torch.float32 else None
            if exact is not None and exact.shape == got.shape:
                # where torch's own f32 result is further from the exact value than the
                # tolerance (a long sum cancelling to near zero), ours may be as far
                slack = np.abs(expected - exact)
                bad &= np.abs(got - exact) > tol + tol * np.abs(exact) + slack
            if not bad.any():
                continue
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            return False, error, (f"trial {trial}: element {where} is {got[where]:.6g}, "
                                  f"expected {expected[where]:.6g} (tolerance {tol:g})")
    return True, worst, ""


def _exact(model, inputs) -> np.ndarray | None:
    """The model's output in float64 (its weights and floating inputs widened), or None when
    it does not run so."""
    import copy

    import torch

    try:
        wide = copy.deepcopy(model).double()
        with torch.no_grad():
            out = wide(*[t.double() if isinstance(t, torch.Tensor) and t.is_floating_point()
                         else t for t in inputs])
    except Exception:   # noqa: BLE001 - a model that cannot run in float64 keeps the f32 rule
        return None
    return out.numpy() if isinstance(out, torch.Tensor) else None


def proof(solution: Solution) -> tuple[str, str]:
    """The weakest verdict over the solution's kernels, and what it was about."""
    rank = {"proved": 0, "unknown": 1, "refuted": 2}
    worst, detail = "proved", ""
    for kernel in solution.kernels:
        verdict, text = road.prove(kernel)
        if rank[verdict] > rank[worst]:
            worst, detail = verdict, f"{kernel.name}: {text}"
    return worst, detail


class KernelsDiffer(ArgusError):
    """The scaled sizes lead the route to other kernels than the published ones."""


#: the scalings `_check` tries, most scaled first, until one runs the published sizes' kernels
#: with every grid axis and loop more than once (`runs_once`)
SCALINGS = ({}, {"deep": False}, {"floor": 2 * FLOOR - 1, "budget": 4 * BUDGET, "deep": False})


def pinned(plan, full_plan):
    """The scaled `plan` running the published-size plan's kernels, or None: the steps must be
    the same templates; the fields that choose how a kernel runs (its tile, waves, engine:
    `CHOICES`) take the published values, the others (what a step computes) keep the
    scaled ones, and the kernels must come out the same (a depthwise step's group count is
    symbolic in its kernel, so it may differ beside a pointwise step's channel tiles). The
    route picks tiles by size (a long row gets a workgroup of its own); every kernel is
    proved for all sizes, so the scaled run checks the very kernels the published sizes
    launch."""
    if len(plan.steps) != len(full_plan.steps):
        return None
    steps = []
    for step, big in zip(plan.steps, full_plan.steps):
        small, chosen = step.template, big.template
        if type(small) is not type(chosen):
            return None
        if not attrs.has(type(small)):        # a step that is not a template: as it is
            if small != chosen:
                return None
            steps.append(step)
            continue
        differ = {f.name for f in attrs.fields(type(small))
                  if getattr(small, f.name) != getattr(chosen, f.name)}
        if isinstance(small, Conv) and small.stats and differ & {"engine", "tiles"}:
            # its partials' shape and the `Moments` views follow the engine and tiles: the
            # scaled route must be made with them (`route`'s pins), not patched here
            return None
        # the published choices; what differs beside them (a group count the kernel leaves
        # symbolic) stays the scaled problem's, and the kernels must then be the same
        steps.append(attrs.evolve(step, template=attrs.evolve(
            small, **{name: getattr(chosen, name) for name in differ & CHOICES})))
    out = attrs.evolve(plan, steps=tuple(steps))
    return out if from_plan(out).kernels == from_plan(full_plan).kernels else None


def _plan_params(model, plan) -> list[Shaped]:
    """Shape-only stand-ins for the weights a forward receives: the plan's parameters, or a
    hand-written solution's (the model's own, in order)."""
    if plan is None:
        return [Shaped(tuple(p.shape)) for _, p in model.named_parameters()]
    state = dict(model.named_parameters()) | dict(model.named_buffers())
    return [Shaped(tuple(state[path].shape)) for _, path in plan.params]


def _shape_launches(solution: Solution, inputs, params: list) -> list:
    """The launches `solution`'s forward makes on shape-only buffers (planning mode)."""
    ctx = Context(execute=False)
    shaped = [shaped_input(t) for t in inputs] + params
    guarded(lambda: solution.forward(ctx, *shaped))
    return ctx.launches


def planned(full, solution: Solution, plan, full_plan=None):
    """(launches, bytes of the largest array, the plan, the scaled solution and plan) at the
    published sizes: the forward runs in planning mode on shape-only inputs (a generated
    solution is routed again at those shapes, unless `full_plan` is that route, which must
    give the same kernels, or kernels the scaled plan can be `pinned` to: the scaled
    solution and plan returned are then the pinned ones). `full` is (model, inputs) on the
    meta device."""
    model, inputs = full
    if plan is None:
        full_plan = None
    else:
        full_plan = full_plan or route(model, inputs)
        if from_plan(full_plan).kernels != from_plan(plan).kernels:
            plan = pinned(plan, full_plan)
            if plan is None:
                raise KernelsDiffer("the route picks other kernels at the published sizes "
                                    "than at the scaled ones, so the emulated run would not "
                                    "cover them")
            solution = from_plan(plan)
    scaled = solution, plan
    if full_plan is not None:
        solution = from_plan(full_plan)
    launches = _shape_launches(solution, inputs, _plan_params(model, full_plan))
    largest = max((b for _, _, b in launches), default=0)
    return launches, largest, full_plan, *scaled


def _scaled_launches(problem: Problem, solution: Solution, plan) -> list:
    return _shape_launches(solution, problem.inputs(SEED), _plan_params(problem.model(), plan))


def runs_once(scaled: list, full: list) -> list[str]:
    """Every grid axis and loop that runs more than once at the published sizes but once at
    the scaled ones (each named once)."""
    found: list[str] = []
    for (kernel, small, _), (_, big, _) in zip(scaled, full):
        (grid_s, trips_s), (grid_b, trips_b) = (road.loop_trips(kernel, small),
                                                road.loop_trips(kernel, big))
        for what, pairs in (("grid axis", zip(grid_s, grid_b)), ("loop", zip(trips_s, trips_b))):
            for index, (s, b) in enumerate(pairs):
                text = f"{kernel.name}: {what} {index} runs once at the scaled sizes"
                if b > 1 and s <= 1 and text not in found:
                    found.append(text)
    return found


def published_launches(full: tuple) -> tuple:
    """(plan, solution, launches) of the route at the published sizes: `full` is a
    problem's (model, inputs) at them (`Problem.full`), each launch (kernel, sizes, arrays)
    as planned, nothing run (what `modelled` times)."""
    model, inputs = full
    plan = route(model, inputs)
    solution = from_plan(plan)
    return plan, solution, _shape_launches(solution, inputs, _plan_params(model, plan))


def modelled(path, level: str | None = None) -> Row:
    """The model's half of `check` alone: the route's plan at the published sizes, each launch
    timed by the MI300X model, against the roofline; no emulated run and no proof, so the row
    says `unknown` with that reason (a whole level's timing sweep, `bench_kernelbench.py
    --model-only`). Failures land in the row, as in `check`."""
    start = clock.perf_counter()
    row = Row(level or "", getattr(path, "stem", str(path)))
    try:
        problem = load(path, level)
        row.level, row.problem = problem.level, problem.name
        full = problem.full()
        plan, solution, launches = published_launches(full)
        row.modelled_us = sum(road.model_time(k, sizes) for k, sizes, _ in launches)
        row.roofline_us = roofline_us(full[1], _output_bytes(full), plan.mm_flops,
                                      plan.valu_flops)
        row.generated, row.templates = True, list(solution.templates)
        row.status, row.reason = "unknown", "model only: not run, not proved"
    except Unsupported as err:
        row.status, row.reason = "unsupported", err.message
    except RegisterBudgetError as err:
        row.status = "unsupported"
        row.reason = f"the kernel does not fit a wave's registers: {err}"
    except Exception as err:  # noqa: BLE001 - a failure is the row's answer, never escapes
        row.status, row.reason = "error", f"{type(err).__name__}: {err}"
    row.seconds = round(clock.perf_counter() - start, 2)
    return row


def check(path, level: str | None = None, solutions: dict | None = None) -> Row:
    """Every check on one problem file; any failure lands in the row, never escapes."""
    start = clock.perf_counter()
    row = Row(level or "", getattr(path, "stem", str(path)))
    try:
        problem = load(path, level)
        row.level, row.problem = problem.level, problem.name
        row.scaled_sizes = _shown(problem.scaled)
        _check(problem, row, solutions)
    except Unsupported as err:
        row.status, row.reason = "unsupported", err.message
    except Refused as err:
        row.status, row.reason = "incorrect", f"refused: {err.message}"
    except RegisterBudgetError as err:
        # a template's kernel for this configuration is beyond what a wave holds: a limit of
        # the template, named with the program point, not a fault of the harness
        row.status = "unsupported"
        row.reason = f"the kernel does not fit a wave's registers: {err}"
    except ArgusError as err:
        row.status, row.reason = "error", f"{type(err).__name__}: {err}"
    except Exception as err:  # a harness defect must not take the other rows down
        where = traceback.extract_tb(err.__traceback__)[-1]
        row.status = "error"
        row.reason = (f"{type(err).__name__}: {err} (at {where.filename.split('/')[-1]}:"
                      f"{where.lineno})")
    row.seconds = round(clock.perf_counter() - start, 2)
    return row


def _check(problem: Problem, row: Row, solutions: dict | None) -> None:
    try:
        solution, plan = find_solution(problem, solutions)
    except (Unsupported, ArgusError):
        raise
    except Exception:
        # the model fails at the scaled sizes (a relation between constants the scaling
        # broke): if its ops have no templates anyway, that is the answer, at any size
        route(*problem.full())
        raise
    if not solution.generated:
        refusal = static_refusal(solution.forward)
        if refusal:
            raise Refused(refusal)
    full = problem.full()
    once: list[str] = []
    if plan is not None:
        # the published-size plan decides whether the scaled sizes stand for it: the same
        # kernels, every grid axis and loop running more than once; else scale less, and if no
        # scaling runs everything twice, the one that misses fewest (the most scaled of those).
        # Its convolutions' engines and tiles are the scaled route's too (what a statistics
        # step's partials hold follows them)
        published = route(*full)
        pins = conv_pins(published)
        if conv_pins(plan) != pins:
            solution, plan = find_solution(problem, solutions, pins)
        best = None
        for n, scaling in enumerate(SCALINGS):
            if n:
                problem = load(problem.path, problem.level, **scaling)
                solution, plan = find_solution(problem, solutions, pins)
            try:
                launches, _, full_plan, solution, plan = planned(full, solution, plan,
                                                                 published)
            except KernelsDiffer:
                continue
            once = runs_once(_scaled_launches(problem, solution, plan), launches)
            if best is None or len(once) < len(best[-1]):
                best = (problem, solution, plan, launches, full_plan, once)
            if not once:
                break
        if best is None:
            raise KernelsDiffer("the route picks other kernels at the published sizes than at "
                                "every scaling of them tried, so no emulated run covers them")
        problem, solution, plan, launches, full_plan, once = _grown(best, full, solutions)
        row.scaled_sizes = _shown(problem.scaled)
    row.generated = solution.generated
    row.templates = list(solution.templates) or (["hand-written"] if not solution.generated
                                                  else [])
    ok, error, why = correctness(problem, solution, plan)
    row.max_error = None if math.isinf(error) else error
    if plan is None:
        # a hand-written forward runs on real inputs (and meets the torch guard) before it
        # is given shape-only ones
        launches, _, full_plan, _, _ = planned(full, solution, plan)
    verdict, detail = proof(solution)
    row.proved = verdict == "proved"
    row.modelled_us = sum(road.model_time(kernel, sizes) for kernel, sizes, _ in launches)
    row.roofline_us = roofline_us(full[1], _output_bytes(full),
                                  full_plan.mm_flops if full_plan else 0.0,
                                  full_plan.valu_flops if full_plan else 0.0)
    if not ok:
        row.status, row.reason = "incorrect", why
    elif verdict == "refuted":
        row.status, row.reason = "incorrect", f"refuted: {detail}"
    elif verdict == "unknown":
        row.status, row.reason = "unknown", detail
    else:
        row.status = "correct"
    if once:
        row.reason = "; ".join(r for r in (row.reason, *once) if r)


def _grown(best: tuple, full, solutions: dict | None) -> tuple:
    """`best` (problem, solution, plan, launches, full plan, loops running once) with scaled
    constants grown back a doubling at a time (9 -> 17 -> 33 -> 65, never past the published
    value nor 4x the budget or the scaled problem's own cost) while that leaves fewer grid axes
    and loops running once: a 32-channel tile needs more than the 9 channels the scaling
    gives, which no size rule knows, but the loop trips say."""
    problem, solution, plan, launches, full_plan, once = best
    limit = 4 * max(BUDGET, problem.cost()) if once else 0.0
    grown = True
    while once and grown:
        grown = False
        for name, index, value, published in _growable(problem):
            while value < published and not grown:
                value = min(published, 2 * value - 1)
                whole = problem.scaled[name]
                trial = problem.rescaled({**problem.scaled, name: value if index is None else
                                          (*whole[:index], value, *whole[index + 1:])})
                if trial is None:
                    continue
                trial = _within(trial, name, limit)
                if trial is None:
                    break
                try:
                    t_solution, t_plan = find_solution(trial, solutions, conv_pins(full_plan))
                    t_launches, _, t_full, t_solution, t_plan = planned(full, t_solution,
                                                                        t_plan, full_plan)
                except Exception:   # noqa: BLE001 - any failure only rules this trial out
                    # (ArgusError, Unsupported, or the model failing at constants the problem
                    # ties together, as input_shape = (num_classes,) with targets below it)
                    continue
                left = runs_once(_scaled_launches(trial, t_solution, t_plan), t_launches)
                if len(left) < len(once):
                    problem, solution, plan, launches, full_plan, once = (
                        trial, t_solution, t_plan, t_launches, t_full, left)
                    grown = True
            if grown:
                break
    return problem, solution, plan, launches, full_plan, once


def _growable(problem: Problem) -> list[tuple[str, int | None, int, int]]:
    """(name, index in a tuple or None, scaled value, published value) of every scaled whole
    number, a tuple's elements one by one (`input_shape = (4096,)`)."""
    out = []
    for name, value in problem.scaled.items():
        published = problem.published(name)
        if type(value) is int:
            out.append((name, None, value, published))
        elif isinstance(value, tuple) and isinstance(published, tuple) \
                and len(value) == len(published):
            out += [(name, k, v, p) for k, (v, p) in enumerate(zip(value, published))
                    if type(v) is int and type(p) is int]
    return out


def _within(problem: Problem, grown: str, limit: float) -> Problem | None:
    """`problem` with its other scaled constants halved, the largest first and none below 2
    (one would run an axis once), until its cost is within `limit` (a row of 2049 columns for
    a 2048-column tile fits when the batch gives way); None when it cannot get there. The
    caller keeps the trial only if fewer loops and grid axes run once."""
    while problem.cost() > limit:
        others = [(value, name) for name, value in problem.scaled.items()
                  if name != grown and type(value) is int and value > 2]
        if not others:
            return None
        value, name = max(others)
        problem = problem.rescaled({**problem.scaled, name: max(2, (value + 1) // 2)})
        if problem is None:
            return None
    return problem


def _shown(scaled: dict) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in scaled.items()}


def _output_bytes(full) -> int:
    import torch

    model, inputs = full
    with torch.no_grad():
        out = model(*inputs)
    return out.numel() * out.element_size() if isinstance(out, torch.Tensor) else 0

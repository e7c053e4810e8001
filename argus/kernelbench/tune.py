"""KernelBench problems as search targets (`argus tune kernelbench:level1/23_Softmax --problems
DIR`): the route's plan for the problem (argus.kernelbench) is the starting point, and the knobs
are its templates' own fields (waves per workgroup of a row program, tile and waves of an
elementwise chain, K depth and fragments per wave of a matmul, engine and register tiles of a
convolution) and one program rewrite (a matmul's or convolution's fused elementwise epilogue
kept fused or split off into a launch of its own). Every point is first timed by
the model alone at the published sizes (the pre-screen); the budget then goes, fastest first, to
the full check: KernelBench's correctness rule on the emulator at the scaled sizes, the proof of
every kernel for symbolic sizes, and the modelled time at the published sizes. The reward is the
route's own plan's modelled time over the candidate's. The KernelBench files stay in DIR.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import attrs

from argus.errors import ArgusError
from argus.kernelbench.problem import ProblemError
from argus.kernelbench.route import split_epilogue, splittable

PREFIX = "kernelbench:"
#: each template's searched fields and their values (the route's own value is always one)
KNOBS = {
    "RowProgram": {"waves": (1, 2, 4, 8)},
    "Elementwise": {"tile": (256, 512, 1024, 2048, 4096), "waves": (1, 2, 4, 8)},
    "Matmul": {"block_k": (8, 16, 32), "reps": (1, 2, 4), "precision": ("f32", "bf16x6")},
    # (position tiles, channel tiles) per wave are the MFMA engine's; the FMA engine has none
    "Conv": {"engine": ("fma", "mfma_f32", "mfma_f32_16"),
             "tiles": ((1, 1), (1, 2), (2, 1), (2, 2))},
}
#: the rewrite knob of a step with a fused elementwise epilogue (`route.split_epilogue`)
EPILOGUE = ("fused", "split")


def is_target(name: str | None) -> bool:
    return bool(name) and name.startswith(PREFIX)


@attrs.frozen
class Target:
    """One KernelBench problem and the route's plans for it (scaled sizes, published sizes)."""

    spec: str  # level1/23_Softmax
    path: Path
    problem: object = attrs.field(repr=False)  # argus.kernelbench.problem.Problem
    plan: object = attrs.field(repr=False)  # the route's plan at the scaled sizes
    full_plan: object = attrs.field(repr=False)  # ... and at the published sizes
    full: tuple = attrs.field(repr=False)  # (model, inputs) on the meta device

    def knobs(self) -> list[tuple[int, str, tuple]]:
        """(step number, field, values) of every searched template field of the plan."""
        out = []
        for index, step in enumerate(self.plan.steps):
            kind = type(step.template).__name__
            if kind == "RowProgram" and step.template.strided:
                continue  # one wave per workgroup by construction
            for field, values in KNOBS.get(kind, {}).items():
                if field in STATS_FIXED and _takes_stats(step.template):
                    continue
                own = _own(step.template, field)
                out.append((index, field, tuple(sorted({*values, own}))))
            if splittable(step):
                out.append((index, "epilogue", EPILOGUE))
        return out

    def default(self) -> dict:
        """The route's own plan as a point: its fields, a convolution's engine and tiles as
        the kernel it really runs (`Conv.fitted`), its epilogues fused."""
        return {f"{i}.{f}": "fused" if f == "epilogue" else _own(self.plan.steps[i].template, f)
                for i, f, _ in self.knobs()}

    def points(self) -> list[dict]:
        """Every combination of the knobs' values, but a convolution's FMA engine only with
        tiles (1, 1) (register tiles are the MFMA engine's: `conv_kernel` refuses others)."""
        knobs = self.knobs()
        out = []
        for values in itertools.product(*(vs for _, _, vs in knobs)):
            point = {f"{i}.{f}": v for (i, f, _), v in zip(knobs, values, strict=True)}
            if not any(point.get(f"{i}.engine") == "fma" and point.get(f"{i}.tiles") != (1, 1)
                       for i, _, _ in knobs):
                out.append(point)
        return out


#: a convolution taking a norm's statistics keeps the route's engine and tiles: its partials'
#: shape and the `Moments` stages reading them were planned for those (`route`'s pins)
STATS_FIXED = ("engine", "tiles")


def _takes_stats(template) -> bool:
    return type(template).__name__ == "Conv" and template.stats


def _own(template, field: str):
    """The route's value of a searched field: for a convolution's engine and tiles, those of
    the kernel it runs (the route's choice, or `conv_fitting`'s fallback when that does not
    fit a wave's registers)."""
    if type(template).__name__ == "Conv" and field in ("engine", "tiles"):
        engine, tiles = template.fitted()
        return engine if field == "engine" else tiles
    return getattr(template, field)


def load_target(spec: str, problems: str | Path | None) -> Target:
    """`kernelbench:LEVEL/NAME` (or NAME alone when `problems` is a level folder) from the
    KernelBench checkout or folder `problems`."""
    from argus.kernelbench import _torch
    from argus.kernelbench.harness import pinned
    from argus.kernelbench.problem import load
    from argus.kernelbench.route import conv_pins, route

    name = spec.removeprefix(PREFIX)
    if problems is None:
        raise ProblemError(f"tune {spec}: give the KernelBench folder with --problems DIR (the "
                          "checkout holding level1/, or a level folder)")
    root = Path(problems)
    found = [p for p in (root / f"{name}.py", root / f"{Path(name).name}.py") if p.is_file()]
    if not found:
        raise ProblemError(f"tune {spec}: no {name}.py under {root}; name a problem as "
                          "kernelbench:level1/23_Softmax (its file without .py)")
    _torch()
    path = found[0]
    level = Path(name).parent.name or None
    problem = load(path, level)
    full = problem.full()
    full_plan = route(*full)
    plan = route(problem.model(), problem.inputs(0), pins=conv_pins(full_plan))
    # the scaled sizes run the kernels the published ones launch (a tile the route picks by
    # size), so the knobs start from the same values on both
    return Target(name, path, problem, pinned(plan, full_plan) or plan, full_plan, full)


def with_knobs(plan, values: dict):
    """The plan with its templates' fields set from `values` ({"step.field": value}; a
    "step.epilogue" of "split" moves that step's fused epilogue to a launch of its own).
    Raises KnobError when a convolution's engine and tiles do not fit a wave's registers:
    the candidate is the kernel asked for, never `conv_fitting`'s fallback."""
    steps = list(plan.steps)
    splits = []
    for key, value in values.items():
        index, field = key.split(".")
        if field == "epilogue":
            if value not in EPILOGUE:
                raise KnobError(f"{key}={value!r}: not an epilogue choice",
                                fix=f"give one of {EPILOGUE}")
            if value == "split":
                splits.append(int(index))
            continue
        step = steps[int(index)]
        if isinstance(value, list):     # a tuple read back from a run file's JSON
            value = tuple(value)
        if field in STATS_FIXED and _takes_stats(step.template) and \
                value != getattr(step.template, field):
            raise KnobError(f"{key}={value!r}: a convolution taking a norm's statistics keeps "
                            "the route's engine and tiles (its partials are planned for them)",
                            fix=f"leave {key} at the route's {getattr(step.template, field)!r}")
        steps[int(index)] = attrs.evolve(step, template=attrs.evolve(step.template,
                                                                     **{field: value}))
    plan = attrs.evolve(plan, steps=tuple(steps))
    for index in sorted(splits, reverse=True):   # later steps first: indices stay valid
        plan = split_epilogue(plan, index)
    for step in plan.steps:
        template = step.template
        if type(template).__name__ == "Conv":
            fitted = template.fitted()
            if fitted != (template.engine, tuple(template.tiles)):
                raise KnobError(
                    f"conv engine {template.engine} with tiles {tuple(template.tiles)} does "
                    f"not fit a wave's registers (the template would fall back to {fitted[0]} "
                    f"with tiles {fitted[1]}) with the epilogue {template.epilogue}",
                    fix="choose fewer tiles per wave (the screen keeps the points that fit)")
    return plan


class KnobError(ArgusError):
    """A knob value whose kernel cannot be built as asked (the point is screened out)."""


def modelled_us(target: Target, values: dict) -> float:
    """The modelled MI300X time of the candidate's launches at the published sizes."""
    from argus.kernelbench import road
    from argus.kernelbench.harness import shaped_input
    from argus.kernelbench.solution import Context, Shaped, from_plan, guarded

    model, inputs = target.full
    plan = with_knobs(target.full_plan, values)
    state = dict(model.named_parameters()) | dict(model.named_buffers())
    shaped = [shaped_input(t) for t in inputs] + [
        Shaped(tuple(state[path].shape)) for _, path in plan.params]
    ctx = Context(execute=False)
    guarded(lambda: from_plan(plan).forward(ctx, *shaped))
    return sum(road.model_time(kernel, sizes) for kernel, sizes, _ in ctx.launches)


def evaluate(target: Target, values: dict) -> dict:
    """The full check of one candidate: correct on the emulator (KernelBench's rule), proved,
    then timed; a status of ok only when all three hold."""
    from argus.kernelbench.harness import correctness, proof
    from argus.kernelbench.solution import from_plan

    started = time.perf_counter()
    row = {"params": values, "status": "ok", "message": "", "time_us": None}
    try:
        plan = with_knobs(target.plan, values)
        solution = from_plan(plan)
        ok, error, why = correctness(target.problem, solution, plan)
        row["max_error"] = None if error == float("inf") else error
        if not ok:
            row.update(status="wrong", message=why)
        else:
            verdict, detail = proof(solution)
            row["verdict"] = verdict
            if verdict != "proved":
                row.update(status=verdict, message=detail)
            else:
                row["time_us"] = modelled_us(target, values)
    except (ArgusError, ValueError) as err:
        row.update(status="invalid", message=f"{type(err).__name__}: {str(err)[:300]}")
    row["wall_s"] = round(time.perf_counter() - started, 2)
    return row


def tune(target: Target, *, run_file: str | Path, budget: int, echo=print) -> list[dict]:
    """Screen every point with the model, then spend `budget` full checks fastest first (the
    route's own plan always among them, as the reference). Writes the run file (one JSON line
    per event) and returns the evaluated rows, best first."""
    run_file = Path(run_file)
    run_file.parent.mkdir(parents=True, exist_ok=True)
    if run_file.exists():
        raise ProblemError(f"{run_file} holds a run already; give another --out")
    events: list[dict] = []

    def log(event: dict) -> None:
        events.append(event)
        with open(run_file, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(event, default=str) + "\n")

    log({"kind": "run", "problem": {"family": PREFIX + target.spec, "path": str(target.path)},
         "knobs": [[i, f, list(vs)] for i, f, vs in target.knobs()], "budget": budget,
         "planner": "screen"})
    default = target.default()
    started = time.perf_counter()
    screened = []
    for values in target.points():
        try:
            screened.append((modelled_us(target, values), values))
        except (ArgusError, ValueError) as err:
            screened.append((None, values))
            log({"kind": "screened", "params": values, "time_us": None,
                 "why": f"{type(err).__name__}: {str(err)[:200]}"})
    ranked = sorted((s for s in screened if s[0] is not None), key=lambda s: s[0])
    log({"kind": "screen", "timed": len(ranked), "points": len(screened),
         "wall_s": round(time.perf_counter() - started, 1),
         "ranking": [{"params": v, "time_us": t} for t, v in ranked[:12]]})
    echo(f"pre-screen: {len(ranked)} of {len(screened)} points timed by the model "
         f"({time.perf_counter() - started:.0f} s)")
    order = [default] + [v for _, v in ranked if v != default]
    rows: list[dict] = []
    reference = None
    for values in order:
        if len(rows) >= budget:
            break
        row = evaluate(target, values)
        if values == default:
            reference = row["time_us"]
        row["move"] = "default" if values == default else "screen"
        row["reward"] = reference / row["time_us"] if reference and row["time_us"] and \
            row["status"] == "ok" else None
        rows.append(row)
        log({"kind": "eval", **row})
        shown = f"{row['time_us']:.2f} µs modelled" if row["time_us"] else row["message"][:120]
        echo(f"  {row['move']:<8} {_describe(values)}: {row['status']} {shown}")
        if reference is None and values == default:
            echo("  the route's own plan has no result; rewards are not defined")
    log({"kind": "end", "evaluations": len(rows)})
    return sorted(rows, key=lambda r: -(r["reward"] or 0.0))


def _describe(values: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in values.items()) or "(no knobs)"

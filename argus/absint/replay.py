"""Concrete replay of a solver witness on the reference interpreter: a refutation is reported
only when the interpreter, run on the witness's sizes and workgroup, really violates the same
check at the same op; the counterexample then carries the interpreter's concrete facts.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import attrs
import numpy as np

from argus.absint.kleene import holds_at_tags
from argus.absint.report import Counterexample
from argus.errors import ArgusError
from argus.ir.expr import Not, evaluate

#: Largest total number of tensor elements a replay may allocate.
MAX_REPLAY_ELEMENTS = 1 << 24
#: Interpreter runs kept: the refuted obligations of one kernel mostly share their minimised
#: witness's sizes and workgroup, so one run confirms them all.
RUNS_KEPT = 8
_RUNS: OrderedDict = OrderedDict()


#: Interpreter findings that confirm a refuted obligation of each kind. A tag the verifier
#: holds ⊤ on one side of a branch (the other side's value carries it) is simply absent on that
#: path in the interpreter, which reports the assertion reading it as tag-missing.
CONFIRMED_BY = {"tag-assertion": ("tag-assertion", "tag-missing")}


class ReplayError(ArgusError):
    """The witness could not be replayed, or the replay shows no violation."""

    kind = "unsupported"


class NumbersRight(ReplayError):
    """The replay violates the assertion at the level of tags, but computes the reference's
    numbers for the asserted elements: a tag rule or the assertion is wrong, not the kernel."""

    kind = "input"


#: Tolerance (relative and absolute) of the numeric check against a reference: bf16 inputs and
#: f32 accumulation.
REFERENCE_TOLERANCE = 2e-2


def replay_obligation(kernel, op, kind: str, cex: Counterexample, witness: dict,
                      data: dict | None = None, reference=None, loc=None,
                      assertion: int = -1) -> Counterexample:
    """Run `kernel` for the witness's workgroup on zero inputs, except the elements `data`
    fixes ({tensor: {index: value}}; the index `...` gives every other element of that tensor);
    return the confirmed counterexample. Data that breaks a `T.distinct` declaration confirms
    nothing: the kernel's author has ruled it out.

    With a `reference` (inputs -> {output tensor: expected array}), a tag assertion's violation
    is confirmed only if the numbers are wrong too: the whole launch runs on random data, and
    when the asserted elements (those the asserted store writes; every output for an assertion
    inside the kernel) match the reference, `NumbersRight` is raised instead.

    Only a violation of the obligation itself confirms it: reported at its `loc` (default: the
    op's) and, for a tag assertion, of the same `assertion` of the op (two assertions written
    on one line by a loop share their loc), so that a second assertion on an op is not
    "confirmed" by the first one failing."""
    sizes = dict(cex.sizes)
    try:
        confirmed = _replay(kernel, op, kind, cex, sizes, data, str(loc or op.loc), assertion)
        if reference is not None and kind in CONFIRMED_BY["tag-assertion"]:
            _check_numbers(kernel, op, confirmed, sizes, data, reference)
        return confirmed
    except (ArithmeticError, ValueError, KeyError) as error:
        # sizes or workgroups the kernel's own formulas cannot evaluate (a remapped workgroup
        # id dividing by zero outside the grid) replay nothing
        raise ReplayError(f"the interpreter cannot run the witness's sizes {sizes} and "
                          f"workgroup {cex.workgroup}: {error}") from None


def _inputs(kernel, sizes, data, rng=None) -> dict:
    """One array per tensor argument: the elements `data` fixes, every other one 0 (or, with
    `rng`, uniform in [-1, 1) for float tensors; index tensors keep 0)."""
    shapes = {tensor.name: tuple(int(evaluate(e, sizes)) for e in tensor.type.shape)
              for tensor in kernel.tensors}
    total = sum(math.prod(shape) for shape in shapes.values())
    if total > MAX_REPLAY_ELEMENTS:   # before allocating: a witness's sizes may be huge
        raise ReplayError(f"sizes {sizes} need {total} elements, more than the replay allows")
    inputs = {}
    for tensor in kernel.tensors:
        shape = shapes[tensor.name]
        fixed = dict((data or {}).get(tensor.name, {}))
        inputs[tensor.name] = np.full(shape, fixed.pop(..., 0), np.float32)
        if rng is not None and tensor.type.dtype != "i32":
            inputs[tensor.name] = rng.uniform(-1, 1, shape).astype(np.float32)
        for where, value in fixed.items():
            if all(0 <= i < n for i, n in zip(where, shape)):
                inputs[tensor.name][where] = value
    return inputs


def _check_numbers(kernel, op, cex: Counterexample, sizes, data, reference):
    """Raise `NumbersRight` when the launch on random data computes the reference's values at
    the asserted elements."""
    from argus.absint.concrete import InterpError, run
    from argus.ir import access as A
    from argus.ir import ops as O

    inputs = _inputs(kernel, sizes, data, np.random.default_rng(0))
    scalars = {v.name: sizes[v.name] for v in kernel.scalars}
    try:
        outputs = run(kernel, inputs, scalars, max_violations=1).outputs
    except InterpError as error:
        raise ReplayError(str(error)) from None
    expected = reference({name: array.copy() for name, array in inputs.items()})
    unknown = sorted(set(expected) - set(outputs))
    if unknown:
        raise ReplayError(f"the reference returns {unknown}, which are not tensor arguments of "
                          f"{kernel.name}; return {{output name: expected array}}")
    if isinstance(op, O.GlobalStore):
        pids = {o.axis: o.var.name for o in kernel.ops() if isinstance(o, O.ProgramId)}
        env = {**sizes, **dict(cex.iteration),
               **{name: cex.workgroup[axis] for axis, name in pids.items()}}
        index = A.global_access(op, (cex.wave, cex.lane, cex.slot)).index
        where = tuple(int(evaluate(i, env)) for i in index)
        if op.gather is not None or op.tensor.name not in expected:
            where = None
        compared = {op.tensor.name: where} if where is not None else \
            dict.fromkeys(expected)
    else:
        compared = dict.fromkeys(expected)
    worst = 0.0
    for name, where in compared.items():
        got = np.asarray(outputs[name], np.float64)
        want = np.asarray(expected[name], np.float64)
        if where is not None:
            got, want = got[where], want[where]
        if not np.allclose(got, want, rtol=REFERENCE_TOLERANCE, atol=REFERENCE_TOLERANCE):
            return
        worst = max(worst, float(np.max(np.abs(got - want), initial=0.0)))
    shown = ", ".join(name + ("" if where is None else str(list(where)))
                      for name, where in compared.items())
    raise NumbersRight(f"the replay breaks the assertion on the tags, but on random data it "
                       f"computes the reference's numbers at {shown} (largest difference "
                       f"{worst:.2g}): the tags or the assertion may be wrong, the numbers are "
                       "not")


def _replay(kernel, op, kind, cex, sizes, data, loc, assertion):
    pid = cex.workgroup[:len(kernel.grid)]
    result = _run_workgroups(kernel, sizes, data, pid, tuple(cex.others[:len(kernel.grid)]))
    broken = [v for v in result.violations if v.kind == "distinct"]
    if broken:
        raise ReplayError(f"the witness's index data breaks the declaration at {broken[0].loc} "
                          f"({broken[0].detail})")
    found = _confirming(result.violations, kernel, op, kind, sizes, loc, assertion)
    if found:
        return _located(cex, found, pid)
    seen = _seen_from_the_write(result, op, cex) if kind == "lds-race" else None
    if seen is not None:
        return seen
    others = sorted({f"{v.kind} at {v.loc}" for v in result.violations})
    raise ReplayError(f"the interpreter found no {kind} at {loc} for sizes {sizes}, "
                      f"workgroup {pid}" + (f" (it found {others})" if others else ""))


def _confirming(violations, kernel, op, kind, sizes, loc, assertion) -> list:
    """The interpreter's violations that confirm the obligation: of a kind that confirms
    `kind`, at its `loc`, of the same assertion, and never one whose assertion surely holds
    at the replayed tags."""
    kinds = CONFIRMED_BY.get(kind, (kind,))
    same = [v for v in violations
            if v.loc == loc and v.kind in kinds and v.assertion == assertion]
    return [v for v in same if not surely_holds(kernel, op, v, sizes)]


def _located(cex: Counterexample, found: list, pid: tuple) -> Counterexample:
    """The counterexample at the interpreter's facts: the violation in the witness's
    workgroup and iteration when there is one."""
    found = [v for v in found if tuple(v.workgroup[:len(pid)]) == pid] or found
    same_iteration = [v for v in found if v.iteration == cex.iteration]
    v = (same_iteration or found)[0]
    return attrs.evolve(cex, workgroup=tuple(v.workgroup), wave=v.wave, lane=v.lane,
                        slot=v.slot, iteration=dict(v.iteration),
                        element=dict(v.element) or cex.element,
                        tags=dict(v.tags) or cex.tags, detail=v.detail or cex.detail,
                        confirmed=True)


def _run_workgroups(kernel, sizes, data, pid: tuple, other: tuple):
    """The interpreter's run of workgroup `pid` (after `other`, the second workgroup of a
    cross-workgroup race, so the race shows at `pid`), kept for the next obligations."""
    from argus.absint.concrete import InterpError, run

    grid = [int(evaluate(e, sizes)) for e in kernel.grid]
    outside = [w for w in (pid, other) if w and not all(0 <= i < n for i, n in zip(w, grid))]
    if outside:
        raise ReplayError(f"workgroup {outside[0]} lies outside the grid {tuple(grid)}")
    order = ([other] if other else []) + [pid]
    key = (id(kernel), tuple(sorted(sizes.items())), tuple(order), repr(data))
    if key not in _RUNS or _RUNS[key][0] is not kernel:
        scalars = {v.name: sizes[v.name] for v in kernel.scalars}
        try:
            found = run(kernel, _inputs(kernel, sizes, data), scalars, max_violations=100_000,
                        workgroups=order)
        except InterpError as error:
            found = ReplayError(str(error))
        _RUNS[key] = (kernel, found)
        if len(_RUNS) > RUNS_KEPT:
            _RUNS.popitem(last=False)
    result = _RUNS[key][1]
    if isinstance(result, ReplayError):
        raise result
    return result


def _seen_from_the_write(result, op, cex):
    """A race the verifier states at a read shows in the interpreter at the write that came
    second, naming this read as the one it overwrote; the interpreter's facts are the
    writer's, so the counterexample keeps the solver's reader and says so (None: no such)."""
    other_side = [v for v in result.violations
                  if v.kind == "lds-race" and v.other_loc == str(op.loc)]
    if not other_side:
        return None
    v = other_side[0]
    return attrs.evolve(cex, detail=f"the interpreter saw it from the write's side: "
                                    f"{v.loc} overwrites data {v.detail}", confirmed=True)


def surely_holds(kernel, op, violation, sizes: dict) -> bool:
    """Whether a reported tag-assertion violation's own assertion surely holds at the concrete
    tags the interpreter reported (three-valued over ⊤, `absint.kleene`), for a mask: surely
    agrees with the mask there. Such a report confirms nothing."""
    from argus.ir import ops as O

    asserts = getattr(op, "asserts", ())
    if violation.kind != "tag-assertion" or not 0 <= violation.assertion < len(asserts):
        return False
    pids = {o.axis: o.var.name for o in kernel.ops() if isinstance(o, O.ProgramId)}
    env = {**sizes, **violation.iteration, **violation.element,
           **{name: violation.workgroup[axis] for axis, name in pids.items()}}
    predicate = asserts[violation.assertion].predicate
    if isinstance(op, O.Mask):
        try:
            keep = bool(evaluate(op.keep, env))
        except (KeyError, ZeroDivisionError, ValueError):
            return False
        predicate = predicate if keep else Not(predicate)
    return holds_at_tags(predicate, violation.tags, env)

"""Concrete replay of a solver witness on the reference interpreter: a refutation is reported
only when the interpreter, run on the witness's sizes and workgroup, really violates the same
check at the same op; the counterexample then carries the interpreter's concrete facts.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from argus.absint.report import Counterexample
from argus.errors import ArgusError
from argus.ir.expr import evaluate

#: Largest total number of tensor elements a replay may allocate.
MAX_REPLAY_ELEMENTS = 1 << 24


#: Interpreter findings that confirm a refuted obligation of each kind. A tag the verifier
#: holds ⊤ on one side of a branch (the other side's value carries it) is simply absent on that
#: path in the interpreter, which reports the assertion reading it as tag-missing.
CONFIRMED_BY = {"tag-assertion": ("tag-assertion", "tag-missing")}


class ReplayError(ArgusError):
    """The witness could not be replayed, or the replay shows no violation."""


def replay_obligation(kernel, op, kind: str, cex: Counterexample, witness: dict,
                      data: dict | None = None) -> Counterexample:
    """Run `kernel` for the witness's workgroup on zero inputs, except the elements `data`
    fixes ({tensor: {index: value}}; the index `...` gives every other element of that tensor);
    return the confirmed counterexample. Data that breaks a `T.distinct` declaration confirms
    nothing: the kernel's author has ruled it out."""
    sizes = dict(cex.sizes)
    try:
        return _replay(kernel, op, kind, cex, sizes, data)
    except (ArithmeticError, ValueError, KeyError) as error:
        # sizes or workgroups the kernel's own formulas cannot evaluate (a remapped workgroup
        # id dividing by zero outside the grid) replay nothing
        raise ReplayError(f"the interpreter cannot run the witness's sizes {sizes} and "
                          f"workgroup {cex.workgroup}: {error}") from None


def _replay(kernel, op, kind, cex, sizes, data):
    from argus.absint.concrete import InterpError, run

    inputs = {}
    for tensor in kernel.tensors:
        shape = tuple(int(evaluate(e, sizes)) for e in tensor.type.shape)
        fixed = dict((data or {}).get(tensor.name, {}))
        inputs[tensor.name] = np.full(shape, fixed.pop(..., 0), np.float32)
        for where, value in fixed.items():
            if all(0 <= i < n for i, n in zip(where, shape)):
                inputs[tensor.name][where] = value
    total = sum(math.prod(a.shape) for a in inputs.values())
    if total > MAX_REPLAY_ELEMENTS:
        raise ReplayError(f"sizes {sizes} need {total} elements, more than the replay allows")
    scalars = {v.name: sizes[v.name] for v in kernel.scalars}
    pid = cex.workgroup[:len(kernel.grid)]
    grid = [int(evaluate(e, sizes)) for e in kernel.grid]
    outside = [w for w in (pid, tuple(cex.others[:len(kernel.grid)]))
               if w and not all(0 <= i < n for i, n in zip(w, grid))]
    if outside:
        raise ReplayError(f"workgroup {outside[0]} lies outside the grid {tuple(grid)}")
    # the other workgroup of a cross-workgroup race runs first, so the race shows at `pid`
    order = ([tuple(cex.others[:len(kernel.grid)])] if cex.others else []) + [pid]
    try:
        result = run(kernel, inputs, scalars, max_violations=100_000, workgroups=order)
    except InterpError as error:
        raise ReplayError(str(error)) from None
    broken = [v for v in result.violations if v.kind == "distinct"]
    if broken:
        raise ReplayError(f"the witness's index data breaks the declaration at {broken[0].loc} "
                          f"({broken[0].detail})")
    confirming = CONFIRMED_BY.get(kind, (kind,))
    found = [v for v in result.violations if v.loc == str(op.loc) and v.kind in confirming]
    if not found and kind == "lds-race":
        # a race the verifier states at a read shows in the interpreter at the write that
        # came second, naming this read as the one it overwrote; the interpreter's facts are
        # the writer's, so the counterexample keeps the solver's reader and says so
        other_side = [v for v in result.violations
                      if v.kind == "lds-race" and v.other_loc == str(op.loc)]
        if other_side:
            v = other_side[0]
            return attrs.evolve(cex, detail=f"the interpreter saw it from the write's side: "
                                            f"{v.loc} overwrites data {v.detail}",
                                confirmed=True)
    if not found:
        others = sorted({f"{v.kind} at {v.loc}" for v in result.violations})
        raise ReplayError(f"the interpreter found no {kind} at {op.loc} for sizes {sizes}, "
                          f"workgroup {pid}" + (f" (it found {others})" if others else ""))
    found = [v for v in found if tuple(v.workgroup[:len(pid)]) == pid] or found
    same_iteration = [v for v in found if v.iteration == cex.iteration]
    v = (same_iteration or found)[0]
    return attrs.evolve(cex, workgroup=tuple(v.workgroup), wave=v.wave, lane=v.lane,
                        slot=v.slot, iteration=dict(v.iteration),
                        element=dict(v.element) or cex.element,
                        tags=dict(v.tags) or cex.tags, detail=v.detail or cex.detail,
                        confirmed=True)

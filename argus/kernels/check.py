"""A library kernel's outputs against its numpy reference: `Case` (the entry, its tile
parameters, sizes and a seed per trial) and `compare(device, ir, case, run)`, which the road's
interpret and emulate stages call with the interpreter and the emulator as `run`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from argus.check import Check, Trial, frozen, relative_error
from argus.ir import ops as O


@attrs.frozen
class Case:
    """What a check runs: a library kernel's random inputs and numpy reference, with its tile
    parameters, at one size assignment and seed per trial."""

    entry: Any = attrs.field(eq=False)                 # kernels.LibraryKernel
    params: dict
    sizes: tuple[dict, ...]
    seeds: tuple[int, ...]

    @property
    def key(self) -> tuple:
        return (self.entry.kernel.name, frozen(self.params), frozen(self.sizes), self.seeds)


def compare(device: str, ir: O.Kernel, case: Case, run: Callable) -> Check:
    """`run(arrays) -> (outputs, record)` on `device` against numpy, one trial per size
    assignment of `case`: fresh inputs per trial with the output pre-filled with NaN (an
    accumulated output with random values, added to the expectation), compared by
    `relative_error`. A run that raises ends the check with its failure."""
    entry, trials, last = case.entry, [], None
    accumulated = {op.tensor.name for op in ir.ops() if isinstance(op, O.GlobalAtomicAdd)}
    for sizes, seed in zip(case.sizes, case.seeds):
        arrays = entry.inputs(dict(sizes), case.params, seed)
        out = arrays[entry.output]
        prefill = (np.random.default_rng(seed + 1).standard_normal(out.shape).astype(out.dtype)
                   if entry.output in accumulated else np.full(out.shape, np.nan, out.dtype))
        arrays[entry.output] = prefill.copy()
        expected = entry.reference(arrays, case.params)
        if entry.output in accumulated:
            expected = expected + prefill.astype(np.float64)
        try:
            outputs, last = run({t.name: arrays[t.name] for t in ir.tensors})
        except Exception as err:  # the run itself failed: a hazard, a fault, a bad launch
            return Check(device, entry.tolerance, tuple(trials),
                         f"{type(err).__name__}: {err}", last)
        error, unwritten = relative_error(outputs[entry.output], expected)
        violations = tuple(str(v) for v in getattr(last, "violations", ())[:3])
        trials.append(Trial(seed, dict(sizes), error, unwritten, violations))
    return Check(device, entry.tolerance, tuple(trials), "", last)

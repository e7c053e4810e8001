"""One comparison of a kernel's output with numpy's, for every device that runs kernels: the
reference interpreter, the emulator running our code object, the emulator running AMD's.

`relative_error` is the one error measure (max |got - expected| over max(1, max |expected|),
with an output element left unwritten, still NaN where numpy has a number, an infinite error);
`Check` is the one record of a comparison (one `Trial` per seeded run, the tolerance, and what
went wrong), so the CLI, the demo, the search and the vendor harness read the same fields.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np


def relative_error(got: np.ndarray, expected: np.ndarray) -> tuple[float, int]:
    """(max |got - expected| / max(1, max |expected|), output elements left unwritten): the
    error is infinite when an element numpy computes is NaN in `got` (never written)."""
    got = np.asarray(got, np.float64)
    expected = np.asarray(expected, np.float64)
    unwritten = int(np.isnan(got).sum() - np.isnan(expected).sum())
    if unwritten > 0:
        return math.inf, unwritten
    if got.size == 0:
        return 0.0, 0
    scale = max(1.0, float(np.nanmax(np.abs(expected))) if np.isfinite(expected).any() else 1.0)
    diff = np.abs(got - expected)
    return (float(np.nanmax(diff)) / scale if not np.isnan(diff).all() else 0.0), 0


def frozen(value: Any) -> Any:
    """`value` with its dicts and lists made sorted tuples: a hashable cache key."""
    if isinstance(value, dict):
        return tuple(sorted((k, frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(frozen(v) for v in value)
    return value


@attrs.frozen
class Trial:
    """One seeded run compared with numpy."""

    seed: int
    sizes: dict
    max_error: float
    unwritten: int = 0
    violations: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"seed": self.seed, "sizes": dict(self.sizes), "max_error": self.max_error,
                "unwritten": self.unwritten, "violations": list(self.violations)}


@attrs.frozen
class Check:
    """A kernel's outputs on `device` against numpy over one or more trials. `failure` says why a
    run did not finish (a hazard, a fault, a refused launch); `run` is the last run's own record
    (the interpreter's RunResult, the emulator's Emulation) for the callers that show it."""

    device: str
    tolerance: float
    trials: tuple[Trial, ...] = ()
    failure: str = ""
    run: object = attrs.field(default=None, eq=False, repr=False)

    @property
    def ok(self) -> bool:
        return not self.failure and bool(self.trials) and all(
            t.max_error <= self.tolerance and not t.violations for t in self.trials)

    @property
    def worst(self) -> Trial | None:
        return max(self.trials, key=lambda t: t.max_error, default=None)

    @property
    def max_error(self) -> float:
        return self.worst.max_error if self.trials else math.inf

    @property
    def sizes(self) -> dict:
        return dict(self.trials[-1].sizes) if self.trials else {}

    @property
    def message(self) -> str:
        worst = self.worst
        if self.failure:
            text = self.failure
        elif worst is None:
            text = "no trial ran"
        elif self.ok:
            text = f"{len(self.trials)} trial(s) within {self.tolerance:g}"
        elif worst.unwritten:
            text = f"{worst.unwritten} output elements left unwritten (still NaN) at {worst.sizes}"
        elif any(t.violations for t in self.trials):
            text = next(t.violations[0] for t in self.trials if t.violations)
        else:
            text = (f"max error {worst.max_error:.3g} > {self.tolerance:g} at {worst.sizes} "
                    f"(seed {worst.seed})")
        return f"{self.device}: {text}"

    def to_dict(self) -> dict:
        return {"ok": self.ok, "device": self.device, "tolerance": self.tolerance,
                "trials": [t.to_dict() for t in self.trials], "message": self.message}

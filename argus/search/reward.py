"""The reward of a candidate: modelled throughput relative to a reference at the same shape,
i.e. reference time / candidate time. The reference is AMD's fastest hand-written kernel for
the family at that shape (modelled by `argus.time` on its code object from the amd-aiter
wheel) where the model can time one, else the family's default configuration. No modelled
time, no reward: never a made-up number.
"""

from __future__ import annotations

import argus
from argus.search.space import Problem
from argus.vendor import COUNTERPARTS


def reward(time_us: float | None, reference_us: float | None) -> float | None:
    """reference_us / time_us, or None when either time is missing (or not positive)."""
    if time_us is None or reference_us is None or time_us <= 0 or reference_us <= 0:
        return None
    return reference_us / time_us


def amd_reference(problem: Problem) -> dict | None:
    """{"name", "time_us", "modelled": True} of AMD's fastest counterpart at the problem's
    shape, or None when the family has none the model can time there."""
    counterpart = COUNTERPARTS.get(problem.family)
    sizes = counterpart.sizes(problem.sizes, problem.pinned) if counterpart else None
    if sizes is None:
        return None
    timed = []
    for name in counterpart.kernels:
        try:
            timed.append((argus.time(name, sizes=sizes).microseconds, name))
        except ValueError:  # this tile does not take the shape (PerfError, LaunchError)
            continue
    if not timed:
        return None
    best_us, best = min(timed)
    return {"name": f"AMD {best}", "time_us": best_us, "modelled": True}

"""The lexicographic witness search both solver paths share: bisect one variable's smallest
value with the earlier ones fixed.
"""

from __future__ import annotations

import time


class GaveUp(Exception):
    """The solver answered unknown while the search asked for a smaller witness."""


def lexicographic(order, point: dict, minimise_one) -> tuple[dict, bool]:
    """The lexicographically smallest witness over `order` (most significant first), each
    variable fixed by `minimise_one(name, point) -> (point, finished)`; and whether every
    search finished."""
    minimal = True
    for name in order:
        point, finished = minimise_one(name, point)
        minimal = minimal and finished
    return point, minimal


def smallest(name: str, lo: int, point: dict, model_below, deadline: float):
    """The smallest value of `name` in [lo, point[name]] that keeps a witness, by bisection.

    `model_below(bound)` returns a model (a dict) with `name <= bound`, None when there is
    none, or raises GaveUp. Returns (a model at that value, the value, whether the search
    finished before `deadline`)."""
    hi = point[name]
    first = True
    while lo < hi:
        if time.monotonic() > deadline:
            return point, hi, False
        # witnesses sit at the lower bound more often than not, so try it before bisecting
        mid = lo if first else (lo + hi) // 2
        first = False
        try:
            found = model_below(mid)
        except GaveUp:
            return point, hi, False
        if found is None:
            lo = mid + 1
        else:
            point, hi = found, found[name]
    return point, hi, True

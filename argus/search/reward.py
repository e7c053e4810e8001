"""The reward of a candidate: modelled throughput relative to a reference kernel at the same
shape (AMD's kernel where one exists, else the family's default configuration), i.e.
reference time / candidate time. No modelled time, no reward: never a made-up number.
"""

from __future__ import annotations


def reward(time_us: float | None, reference_us: float | None) -> float | None:
    """reference_us / time_us, or None when either time is missing (or not positive)."""
    if time_us is None or reference_us is None or time_us <= 0 or reference_us <= 0:
        return None
    return reference_us / time_us

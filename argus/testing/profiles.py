"""Hypothesis profiles shared by the project's suites and users' suites: `quick` (30 examples,
the default), `ci` (200, derandomized: a CI run is reproducible, and a failure it reports is
the same failure on the next run) and `dev` (1000, a fresh random search each run: the one that
looks for what CI has not seen); property runs scale with the profile, never with hand-set
example counts."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

__all__ = ["PROFILES", "load_profile"]

PROFILES = {"quick": 30, "ci": 200, "dev": 1000}

for _name, _examples in PROFILES.items():
    settings.register_profile(_name, max_examples=_examples, deadline=None,
                              derandomize=_name == "ci",
                              suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.filter_too_much])


def load_profile(name: str | None = None) -> str:
    """Load profile `name` (default: $HYPOTHESIS_PROFILE, else quick) and return its name."""
    name = name or os.environ.get("HYPOTHESIS_PROFILE") or "quick"
    if name not in PROFILES:
        raise ValueError(f"unknown Argus hypothesis profile {name!r}; choose one of "
                         f"{', '.join(PROFILES)}")
    settings.load_profile(name)
    return name

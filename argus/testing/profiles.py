"""Hypothesis profiles for Argus' property suites: `quick` (30 examples), `ci` (200,
derandomized: a CI run is reproducible) and `dev` (1000, a fresh random search each run).
A property whose examples each take seconds (a proof and an interpreter run per example) takes
`slow_examples()`: fewer under `ci` (the suite must stay within its time), all under `dev`.

A profile is registered only when `load_profile` asks for it, never at import: a project that
merely has Argus installed keeps its own hypothesis settings, hypothesis' built-in `ci` profile
included. Property runs scale with the profile, never with hand-set example counts.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis.errors import InvalidArgument

from argus.errors import ArgusError

__all__ = ["PROFILES", "SLOW_PROFILES", "ProfileError", "load_profile", "slow_examples"]

PROFILES: dict[str, int] = {"quick": 30, "ci": 200, "dev": 1000}
"""Argus' profiles and their example counts."""

SLOW_PROFILES: dict[str, int] = {"quick": 30, "ci": 50, "dev": 1000}
"""Examples of a slow property (seconds an example) under each of Argus' profiles."""


class ProfileError(ArgusError):
    """A hypothesis profile that is neither Argus' nor registered with hypothesis."""


def _register(name: str) -> None:
    # parented on hypothesis' own default, so the profile is the same whatever was loaded before
    settings.register_profile(name, settings.get_profile("default"),
                              max_examples=PROFILES[name], deadline=None,
                              derandomize=name == "ci",
                              suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.filter_too_much])


def load_profile(name: str | None = None) -> str:
    """Load hypothesis profile `name` and return its name.

    `name` is one of Argus' `PROFILES` (registered now) or any profile hypothesis already knows
    (`default`, or one the project registered); it defaults to $HYPOTHESIS_PROFILE, else
    `quick`. An unknown name is a `ProfileError`.
    """
    name = name or os.environ.get("HYPOTHESIS_PROFILE") or "quick"
    if name in PROFILES:
        _register(name)
    try:
        settings.load_profile(name)
    except InvalidArgument:
        raise ProfileError(f"unknown hypothesis profile {name!r}", loc="HYPOTHESIS_PROFILE",
                           fix=f"use one of Argus' profiles ({', '.join(PROFILES)}), "
                               "hypothesis' 'default', or a profile your conftest "
                               "registers") from None
    return name


def slow_examples() -> int:
    """Examples for a slow property under the loaded profile: `SLOW_PROFILES` under one of
    Argus' profiles; any other profile (hypothesis' `default`, a project's own) keeps its
    count. Read it when the test is defined: `@settings(max_examples=slow_examples())`."""
    count, name = settings().max_examples, settings.get_current_profile_name()
    # hypothesis' built-in `ci` profile shares the name, not the count
    if name in SLOW_PROFILES and count == PROFILES[name]:
        return min(count, SLOW_PROFILES[name])
    return count

"""pytest plugin (entry point `pytest11`): `--argus-profile quick|ci|dev` picks the hypothesis
profile (default: $HYPOTHESIS_PROFILE, else quick), and the `argus_verifier` fixture hands a
test the process-wide `VerdictCache`, so tests that verify the same kernel share one run."""

from __future__ import annotations

import pytest

from argus.testing.checks import VerdictCache, shared_cache
from argus.testing.profiles import PROFILES, load_profile


def pytest_addoption(parser):
    group = parser.getgroup("argus")
    group.addoption("--argus-profile", choices=sorted(PROFILES), default=None,
                    help="hypothesis profile for Argus property tests: quick (30 examples), "
                         "ci (200), dev (1000); default $HYPOTHESIS_PROFILE, else quick")


def pytest_configure(config):
    load_profile(config.getoption("argus_profile"))


def pytest_report_header(config):
    from hypothesis import settings

    return f"argus: hypothesis profile {settings.get_current_profile_name()}"


@pytest.fixture(scope="session")
def argus_verifier() -> VerdictCache:
    """`argus_verifier(kernel, solver=..., **options)` -> Report, memoised for the session."""
    return shared_cache()

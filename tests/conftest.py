"""Shared test setup: hypothesis profiles (`HYPOTHESIS_PROFILE=ci|dev`) and vendor fixtures."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "dev", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("quick", max_examples=30, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))


@pytest.fixture(scope="session")
def aiter_root():
    """Root of the unpacked amd-aiter wheel (downloaded once into the Argus cache)."""
    from argus.asm.aiter import aiter_root as fetch

    return fetch()

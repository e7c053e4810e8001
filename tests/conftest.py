"""Shared test setup: Argus' own suite opts into Argus' hypothesis profiles (`--argus-profile
quick|ci|dev`, else `HYPOTHESIS_PROFILE`, else quick; the plugin alone changes nothing), and the
vendor fixtures. The `argus_verifier` fixture comes from the argus.testing plugin."""

import pytest

from argus.testing.plugin import use_argus_profiles


def pytest_configure(config):
    use_argus_profiles(config)


@pytest.fixture(scope="session")
def aiter_root():
    """Root of the unpacked amd-aiter wheel (downloaded once into the Argus cache)."""
    from argus.vendor.aiter import aiter_root as fetch

    return fetch()

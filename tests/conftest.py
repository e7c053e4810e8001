"""Shared test setup: Argus' own suite opts into Argus' hypothesis profiles (`--argus-profile
quick|ci|dev`, else `HYPOTHESIS_PROFILE`, else quick; the plugin alone changes nothing), and the
vendor fixtures. The `argus_verifier` fixture comes from the argus.testing plugin."""

import os

import pytest

from argus.testing.plugin import use_argus_profiles

# argus.compile proves by default; the suite proves where a test means to (argus.verify,
# compile(verify=True)), so that compiling a kernel under test does not prove it again each time
os.environ.setdefault("ARGUS_COMPILE_VERIFY", "0")


def pytest_configure(config):
    use_argus_profiles(config)


@pytest.fixture(scope="session")
def aiter_root():
    """Root of the unpacked amd-aiter wheel (downloaded once into the Argus cache)."""
    from argus.vendor.aiter import aiter_root as fetch

    return fetch()

"""Shared test setup: vendor fixtures. Hypothesis profiles (`--argus-profile quick|ci|dev` or
`HYPOTHESIS_PROFILE`) and the `argus_verifier` fixture come from the argus.testing plugin."""

import pytest


@pytest.fixture(scope="session")
def aiter_root():
    """Root of the unpacked amd-aiter wheel (downloaded once into the Argus cache)."""
    from argus.vendor.aiter import aiter_root as fetch

    return fetch()

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


@pytest.fixture(autouse=True)
def _own_experience_store(tmp_path_factory, monkeypatch):
    """`tune()` in a test reads and writes an experience store of its own, not the user's in
    ARGUS_CACHE: a past run's best point or the value model's guess from it would otherwise be
    proposed first, and what a test sees would depend on what ran before it."""
    from argus.search import experience

    root = tmp_path_factory.mktemp("experience")
    named = experience.default_path
    monkeypatch.setattr(experience, "default_path", lambda family: root / named(family).name)

"""pytest plugin (entry point `pytest11`, loaded in every pytest session once Argus is
installed): `--argus-profile quick|ci|dev` and the `argus_verifier` fixture.

It leaves hypothesis' settings alone unless asked: only `--argus-profile NAME`, or a suite that
opts in from its conftest (`use_argus_profiles(config)`, as Argus' own tests do), loads an Argus
profile. Importing it is cheap: the verifier loads when the fixture is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from argus.testing.profiles import PROFILES, ProfileError, load_profile

if TYPE_CHECKING:
    from argus.testing.checks import VerdictCache

__all__ = ["argus_verifier", "use_argus_profiles"]

_LOADED = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("argus")
    group.addoption("--argus-profile", choices=sorted(PROFILES), default=None,
                    help="load Argus' hypothesis profile: quick (30 examples), ci (200, "
                         "derandomized), dev (1000); without it the plugin leaves hypothesis' "
                         "settings alone")


def use_argus_profiles(config: pytest.Config) -> str | None:
    """Opt a suite into Argus' profiles (call it from the suite's `pytest_configure`): load
    `--argus-profile`, else $HYPOTHESIS_PROFILE (an Argus profile, or any registered one such
    as `default`), else `quick`. An explicit `--hypothesis-profile` is left in charge.
    Returns the loaded profile's name (None when hypothesis' own option decides)."""
    name = config.getoption("argus_profile")
    if name is None and config.getoption("hypothesis_profile", default=None):
        return None
    try:
        config.stash[_LOADED] = load_profile(name)
    except ProfileError as error:
        raise pytest.UsageError(error.render()) from None
    return config.stash[_LOADED]


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("argus_profile"):
        use_argus_profiles(config)


def pytest_report_header(config: pytest.Config) -> str | None:
    loaded = config.stash.get(_LOADED, None)
    return None if loaded is None else f"argus: hypothesis profile {loaded}"


@pytest.fixture(scope="session")
def argus_verifier() -> VerdictCache:
    """`argus_verifier(kernel, solver=..., **options)` -> Report, memoised for the session."""
    from argus.testing.checks import shared_cache

    return shared_cache()

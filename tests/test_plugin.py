"""The pytest plugin plays well with other projects: installed, it is loaded into every pytest
session, yet it leaves a project's hypothesis settings alone unless `--argus-profile` is given
or the suite opts in (Argus' own conftest does). Each run is a separate pytest process, because
hypothesis' profile is process-wide state."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]

# a foreign project: its own profile, loaded from its conftest as hypothesis' docs show
FOREIGN_CONFTEST = """
from hypothesis import settings

settings.register_profile("mine", max_examples=7, deadline=None)
settings.load_profile("mine")
"""

PROBE = """
from hypothesis import given, settings, strategies as st

def test_settings(request):
    # the plugin is really in the session, so what follows is not vacuous
    assert request.config.pluginmanager.hasplugin("argus.testing.plugin")
    current = settings()
    print("PROFILE", settings.get_current_profile_name(), current.max_examples,
          current.derandomize)

@given(st.integers())
def test_a_property(x):
    assert isinstance(x, int)
"""


def run_pytest(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT),
               "ARGUS_JOBS": "1", **env}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                           "-p", "argus.testing.plugin", *args, "."],
                          cwd=project, capture_output=True, text=True, timeout=300, env=environ)


def profile_of(done: subprocess.CompletedProcess) -> tuple[str, int, bool]:
    assert done.returncode == 0, done.stdout + done.stderr
    assert "INTERNALERROR" not in done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if "PROFILE" in line)
    name, examples, derandomize = line[line.index("PROFILE"):].split()[1:]
    return name, int(examples), derandomize == "True"


def project(tmp_path: Path, conftest: str | None) -> Path:
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(PROBE))
    if conftest is not None:
        (tmp_path / "conftest.py").write_text(textwrap.dedent(conftest))
    return tmp_path


def test_a_foreign_project_keeps_its_own_profile(tmp_path):
    done = run_pytest(project(tmp_path, FOREIGN_CONFTEST))
    assert profile_of(done) == ("mine", 7, False)


def test_a_foreign_project_may_set_hypothesis_profile(tmp_path):
    # $HYPOTHESIS_PROFILE is Argus' own convention; elsewhere it means nothing to the plugin
    # (it used to be read by every session, and `default` was an INTERNALERROR)
    own, bare = tmp_path / "own", tmp_path / "bare"
    own.mkdir(), bare.mkdir()
    done = run_pytest(project(own, FOREIGN_CONFTEST), HYPOTHESIS_PROFILE="default")
    assert profile_of(done) == ("mine", 7, False)
    done = run_pytest(project(bare, None), HYPOTHESIS_PROFILE="default")
    assert profile_of(done) == ("default", 100, False)


def test_hypothesis_builtin_ci_profile_is_not_replaced(tmp_path):
    # hypothesis loads its own `ci` profile when $CI is set; Argus has a profile of that name,
    # which must not leak into other projects' CI runs
    done = run_pytest(project(tmp_path, None), CI="true")
    assert profile_of(done) == ("ci", 100, True)


def test_argus_profile_is_loaded_on_request(tmp_path):
    done = run_pytest(project(tmp_path, FOREIGN_CONFTEST), "--argus-profile", "dev")
    assert profile_of(done) == ("dev", 1000, False)


@pytest.mark.parametrize(("environment", "expected"), [
    ({}, ("quick", 30, False)),
    ({"HYPOTHESIS_PROFILE": "ci"}, ("ci", 200, True)),
    ({"HYPOTHESIS_PROFILE": "default"}, ("default", 100, False)),
    ({"HYPOTHESIS_PROFILE": "ci", "CI": "true"}, ("ci", 200, True)),
])
def test_a_suite_that_opts_in_gets_argus_profiles(tmp_path, environment, expected):
    # Argus' own conftest, as any suite that wants Argus' profiles would write it
    conftest = (ROOT / "tests" / "conftest.py").read_text()
    assert "use_argus_profiles(config)" in conftest
    done = run_pytest(project(tmp_path, conftest), **environment)
    assert profile_of(done) == expected


def test_an_unknown_profile_is_a_usage_error_not_an_internal_error(tmp_path):
    conftest = (ROOT / "tests" / "conftest.py").read_text()
    done = run_pytest(project(tmp_path, conftest), HYPOTHESIS_PROFILE="nightly")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "INTERNALERROR" not in done.stdout + done.stderr
    assert "unknown hypothesis profile 'nightly'" in done.stderr
    assert "fix: use one of Argus' profiles" in done.stderr


def test_this_suite_runs_under_the_profile_it_was_asked_for(pytestconfig):
    asked = (pytestconfig.getoption("argus_profile") or os.environ.get("HYPOTHESIS_PROFILE")
             or "quick")
    if pytestconfig.getoption("hypothesis_profile", default=None):
        asked = pytestconfig.getoption("hypothesis_profile")
    assert settings.get_current_profile_name() == asked


def test_a_slow_property_takes_fewer_examples_under_ci_and_all_under_dev():
    from argus.testing import PROFILES, SLOW_PROFILES, load_profile, slow_examples

    current = settings.get_current_profile_name()
    try:
        assert load_profile("ci") == "ci" and slow_examples() == SLOW_PROFILES["ci"] < 200
        load_profile("dev")
        assert slow_examples() == PROFILES["dev"] == 1000
        settings.load_profile("default")       # not Argus': its own count
        assert slow_examples() == settings().max_examples == 100
    finally:
        settings.load_profile(current)

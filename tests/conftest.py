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


#: The files whose tests take longest (CI's --durations on 2 cores: the in-repo KernelBench
#: problems ~150 s, the GEMM mutants ~100-150 s, the vendor disassembly ~100-150 s, the Ray
#: backend ~60-90 s, ...). Run first: `--dist loadfile` hands files to the workers in
#: collection order, and a long file started last leaves the other worker idle at the end.
SLOWEST_FIRST = ("test_kernelbench.py", "test_verify_mutants.py", "test_aiter_conformance.py",
                 "test_search_workers.py", "test_testing.py", "test_verify_remap.py",
                 "test_search_kernelbench.py", "test_conv_family.py", "test_search_llm.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # stable: the rest keep order


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

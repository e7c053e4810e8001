"""argus.testing itself: its checks catch a deliberately unsound transfer rule within the ci
profile and print a shrunk reproducer; mutants and programs rebuild from their printed source;
every mutation operator applies to some library family; the pytest plugin's profile option and
verifier fixture work."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings

from argus.absint.rules import rule
from argus.absint.verify import Rules
from argus.ir import ops as O
from argus.ir.expr import evaluate
from argus.ir.text import print_kernel
from argus.testing import (
    FAMILIES,
    OPERATORS,
    ArgusCheckFailure,
    as_program,
    assert_complete,
    assert_sound,
    catalogue,
    mutants,
    slow_examples,
    tile_programs,
)
from argus.testing.mutants import Mutant, defect_sites, make_mutant
from argus.testing.programs import family_program

ROOT = Path(__file__).resolve().parent.parent
LDS_OPERATORS = ("drop_barrier", "early_slot", "stale_slot", "forget_swizzle")


class ReadsThroughTheStoresView(Rules):
    """A planted unsound LDS rule: a load is interpreted through the address map (view) of the
    last store to its buffer, as if both sides always agreed on the swizzle."""

    @rule(O.LdsStore)
    def on_lds_store(self, op):
        self.__dict__.setdefault("store_views", {})[op.buffer.name] = op.addr
        super().on_lds_store(op)

    @rule(O.LdsLoad)
    def on_lds_load(self, op):
        view = self.__dict__.get("store_views", {}).get(op.buffer.name, op.addr)
        super().on_lds_load(attrs.evolve(op, addr=view))


def test_assert_sound_finds_a_planted_unsound_rule_within_the_ci_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_REPRO_DIR", str(tmp_path))

    # the planted rule is an LDS rule: the search draws the LDS mutants of the one-wave rings
    # (every slot count and swizzle)
    @settings(settings.get_profile("ci"), database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(mutants(tile_programs("ring_gemm", wave_grid=(1, 1)), LDS_OPERATORS))
    def search(mutant):
        assert_sound(mutant, rules=ReadsThroughTheStoresView)

    with pytest.raises(ArgusCheckFailure) as caught:
        search()
    text = str(caught.value)
    assert text.startswith("assert_sound: a Proved obligation fails in the reference interpreter")
    assert "forget_swizzle" in text and "rules: " in text and "ReadsThroughTheStoresView" in text
    # shrunk to one workgroup and one K tile
    assert "sizes: {'M': 32, 'N': 32, 'K': 8}" in text
    # every failing attempt while shrinking wrote its script; the message names the last one
    repro = Path(re.search(r"re-run: python3 (\S+)", text).group(1))
    assert repro.parent == tmp_path and repro.is_file()
    namespace: dict = {}
    exec(compile(repro.read_text(), str(repro), "exec"), namespace)  # defines KERNEL only
    space = FAMILIES["ring_gemm"].space
    candidates = {print_kernel(m.kernel) for slots in space["slots"]
                  for swizzle in space["swizzle"][1:]
                  for m in catalogue(family_program("ring_gemm", {
                      "wave_grid": (1, 1), "slots": slots, "swizzle": swizzle}),
                      ["forget_swizzle"])}
    assert print_kernel(namespace["KERNEL"]) in candidates


def test_the_sound_rules_pass_where_the_planted_rule_fails():
    base = family_program("ring_gemm", {"wave_grid": (1, 1), "slots": 2, "swizzle": (2, 1, 3)})
    (mutant, *_) = catalogue(base, ["forget_swizzle"])
    assert_sound(mutant, sizes=list(mutant.oracle))
    with pytest.raises(ArgusCheckFailure, match="Proved obligation fails"):
        assert_sound(mutant, sizes=list(mutant.oracle), rules=ReadsThroughTheStoresView)


@settings(max_examples=slow_examples())   # a proof and interpreter runs an example
@given(tile_programs("ring_gemm"))
def test_family_variants_are_proved_and_sound(program):
    # the oracle sizes (two workgroups per axis, three K tiles) keep the runs few under ci
    report = assert_sound(program, sizes=list(program.oracle))
    assert report.ok, str(report)


def test_assert_complete_rejects_a_kernel_without_its_defect():
    base = family_program("ring_gemm", {"wave_grid": (1, 1), "slots": 2, "swizzle": None})
    fake = Mutant(kernel=base.kernel, source=base.source, name="unmutated", sizes=base.sizes,
                  oracle=base.oracle, base=base, operator="drop_barrier", site=(0, 0))
    with pytest.raises(ArgusCheckFailure, match=r"(?s)not Refuted.*reproducer.*re-run: "):
        assert_complete(fake)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_mutants_rebuild_from_their_printed_source(family):
    program = family_program(family, {k: v[0] for k, v in FAMILIES[family].space.items()})
    sites = [(name, site) for name in OPERATORS for site in defect_sites(program, name)]
    for name, site in sites[::max(1, len(sites) // 8)]:
        mutant = make_mutant(program, name, site)
        namespace: dict = {}
        exec(compile(mutant.source, mutant.name, "exec"), namespace)
        assert print_kernel(namespace["KERNEL"]) == print_kernel(mutant.kernel), mutant.name
        assert print_kernel(mutant.kernel) != print_kernel(program.kernel), mutant.name


def test_every_operator_seeds_a_defect_in_some_library_family():
    applied = set()
    for family in ("ring_gemm", "gemm", "attention_fwd", "moe_gemm"):
        params = {k: v[0] for k, v in FAMILIES[family].space.items()}
        if family == "attention_fwd":
            params["causal"] = True
        program = family_program(family, params)
        applied |= {name for name in OPERATORS if defect_sites(program, name)}
    # no library kernel broadcasts A across MFMA blocks yet; the corpus kernel below does
    assert applied == set(OPERATORS) - {"wrong_abid"}


def test_programs_of_user_kernels_rebuild_and_size_themselves():
    from argus.kernels.gemm import gemm

    for kernel in (gemm, gemm.trace(block_k=64)):
        program = as_program(kernel)
        namespace: dict = {}
        exec(compile(program.source, "source", "exec"), namespace)
        assert print_kernel(namespace["KERNEL"]) == print_kernel(program.kernel)
        assert len(program.oracle) == 2
        for sizes in program.oracle:
            assert all(evaluate(a, sizes) for a in program.kernel.assumes), sizes


def test_the_plugin_and_the_readme_example(tmp_path):
    """The testing how-to's example (and the README's copy) passes as pasted, under the
    plugin's ci profile, and the fixture hands out the shared cache."""
    page = (ROOT / "docs" / "how-to" / "testing.md").read_text()
    example = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    readme = (ROOT / "README.md").read_text()
    if "## Testing your kernels with Argus" in readme:  # the README's copy, while it has one
        section = readme[readme.index("## Testing your kernels with Argus"):]
        assert re.search(r"```python\n(.*?)```", section, re.S).group(1) == example
    (tmp_path / "test_my_kernel.py").write_text(example)
    (tmp_path / "test_user.py").write_text(textwrap.dedent("""
        from hypothesis import settings
        from argus.testing import shared_cache

        def test_profile_and_fixture(argus_verifier):
            assert settings().max_examples == 200
            assert argus_verifier is shared_cache()
    """))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "argus.testing.plugin",
                           "-p", "no:cacheprovider", "--argus-profile", "ci", "."],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                               "ARGUS_JOBS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


def test_the_operators_for_newer_bug_classes_are_caught_on_the_corpus_kernels():
    sys.path.insert(0, str(ROOT / "tests" / "bugs"))
    import programs

    # a barrier before a global relayout, and an MFMA's A-broadcast block
    for kernel, operator, kind in ((programs.relayout(), "drop_barrier", "global-order"),
                                   (programs.broadcast_a(), "wrong_abid", "tag-assertion")):
        seeded = catalogue(kernel, [operator])
        assert seeded, operator
        for mutant in seeded:
            assert kind in {o.kind for o in assert_complete(mutant)}, mutant.name

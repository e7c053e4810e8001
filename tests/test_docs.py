"""The documentation site stays true: the tutorial's snippets run and print what the page
shows, and the generated DSL op reference covers every op the IR declares."""

from __future__ import annotations

import doctest
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("page", ["tutorial.md"])
def test_a_page_s_snippets_print_what_it_shows(page, monkeypatch):
    monkeypatch.setenv("ARGUS_JOBS", "1")
    failed, tried = doctest.testfile(str(ROOT / "docs" / page), module_relative=False,
                                     optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                                     report=True, verbose=False)
    assert tried >= 10 and failed == 0


def test_the_op_reference_covers_every_op(monkeypatch):
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    import reference

    # the measured instruction counts need the library lowered; the test covers the rest
    monkeypatch.setattr(reference, "emitted", lambda: {"mfma": {"v_mfma_f32_32x32x8_bf16": 1}})
    page = reference.ops_page()
    classes = reference.op_classes()
    assert len(classes) >= 30
    for cls in classes:
        assert f"## `{cls.mnemonic}` ({cls.__name__})" in page, cls
        assert cls.transfer.name in reference.transfer_meanings(), cls
    from argus.ir import ops as O

    assert reference.written_as()["Mfma"] == ["T.mfma"]
    assert "Tile.__add__" in reference.written_as()["Binary"]
    assert reference.verifier_rule(O.LdsLoad)[1] == ["async-pending", "lds-race",
                                                     "lds-uninitialised", "out-of-bounds"]
    assert "`v_mfma_f32_32x32x8_bf16` ×1" in page
    assert any("sparse SMFMAC" in message for message in reference.ir_checks(O.Mfma))


def test_the_readme_example_runs_and_its_mutation_is_refuted(monkeypatch, capsys):
    # the README's first kernel, as pasted (compiled with its proof: the suite's default is off)
    monkeypatch.setenv("ARGUS_JOBS", "1")
    monkeypatch.setenv("ARGUS_COMPILE_VERIFY", "1")
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## A first kernel"):]
    start = section.index("```python\n") + len("```python\n")
    code = section[start:section.index("\n```", start)]
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "Verified copy_rows" in printed and "modelled" in printed.lower()
    # "Write `row + 1` in the store and argus.verify refutes ..."
    mutated = code.replace("Y.store((row, 0)", "Y.store((row + 1, 0)")
    mutated = mutated[:mutated.index("compiled = ")] + "report = argus.verify(copy_rows)\n"
    scope: dict = {}
    exec(compile(mutated, "README.md", "exec"), scope)
    assert scope["report"].refuted


# ------------------------------------------------------------------ the pictures (bench/plots.py)
def _plots():
    sys.path.insert(0, str(ROOT / "bench"))
    import plots

    return plots


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _evaluation(status: str, reward: float | None, time_us: float | None = None) -> str:
    import json

    return json.dumps({"kind": "eval", "evaluation": {
        "status": status, "reward": reward, "time_us": time_us,
        "reference": {"name": "bf16gemm_outf32_tn_64x64_pf3", "time_us": 11.5}}})


def test_the_trajectory_picture_follows_the_best_result_so_far(tmp_path):
    plots = _plots()
    run = tmp_path / "run.jsonl"
    run.write_text("\n".join([
        '{"kind": "run", "problem": {"family": "gemm", "sizes": {"m": 64, "n": 32, "k": 16}}}',
        _evaluation("ok", 0.5, 23.0), _evaluation("refuted", None),
        _evaluation("ok", 0.8, 14.4), _evaluation("wrong", 2.0, 5.7),  # wrong: never the best
        _evaluation("ok", 0.6, 19.2), '{"kind": "end", "reason": "budget"}']) + "\n")
    data = plots.trajectory(plots.read_events(run))
    assert data["title"] == "gemm 64x32x16"
    assert [p["best"] for p in data["points"]] == [0.5, 0.5, 0.8, 0.8, 0.8]
    assert [p["status"] for p in data["points"]] == ["ok", "refuted", "ok", "wrong", "ok"]
    assert data["reference"]["name"] == "bf16gemm_outf32_tn_64x64_pf3"
    width, height = _png_size(plots.draw_trajectory(data, tmp_path / "img" / "t.png"))
    assert width > 400 and height > 300
    run.write_text(run.read_text() + "{torn\n")
    with pytest.raises(plots.PlotInputError, match="line 8 is not JSON") as err:
        plots.read_events(run)
    assert err.value.loc.endswith("run.jsonl:8")


def test_the_kernelbench_chart_counts_outcomes_and_ratios_per_level(tmp_path):
    import json
    import math

    plots = _plots()
    rows = [{"level": "level1", "problem": "19_ReLU", "status": "correct", "proved": True,
             "modelled_us": 4.0, "roofline_us": 2.0},
            {"level": "level1", "problem": "23_Softmax", "status": "correct", "proved": True,
             "modelled_us": 16.0, "roofline_us": 2.0},
            {"level": "level1", "problem": "51_Argmax", "status": "unsupported"},
            {"level": "level2", "problem": "12_Gemm", "status": "correct", "proved": False,
             "modelled_us": 3.0, "roofline_us": 1.0},
            {"level": "level2", "problem": "14_Gemm", "status": "incorrect", "proved": False,
             "modelled_us": 1.0, "roofline_us": 1.0}]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    summary = plots.kernelbench_summary(plots.read_rows([tmp_path / "rows.json"]))
    assert list(summary) == ["level1", "level2"]
    one, two = summary["level1"], summary["level2"]
    assert one["outcomes"]["correct, proved"] == 2 and one["outcomes"]["unsupported"] == 1
    assert two["outcomes"]["correct, not proved"] == 1 and two["outcomes"]["incorrect"] == 1
    assert one["ratios"] == [(2.0, "19_ReLU"), (8.0, "23_Softmax")]
    assert math.isclose(one["geomean"], 4.0) and two["ratios"] == [(3.0, "12_Gemm")]
    width, height = _png_size(plots.draw_kernelbench(summary, tmp_path / "kb.png", "fixture"))
    assert width > 600 and height > 300
    (tmp_path / "bad.json").write_text('{"level": "level1"}')
    with pytest.raises(plots.PlotInputError, match="not a list of KernelBench rows"):
        plots.read_rows([tmp_path / "bad.json"])


LOOP = """.amdgcn_target "amdgcn-amd-amdhsa--gfx942"
.text
.globl mix_fixture
.p2align 8
.type mix_fixture,@function
mix_fixture:
  s_mov_b32 s4, 8
.Lloop:
  buffer_load_dwordx4 v[0:3], v4, s[0:3], 0 offen
  ds_read_b128 v[8:11], v5
  s_waitcnt lgkmcnt(0)
  v_mfma_f32_16x16x16_bf16 a[0:3], v[8:9], v[10:11], a[0:3]
  v_mfma_f32_16x16x16_bf16 a[0:3], v[8:9], v[10:11], a[0:3]
  s_sub_u32 s4, s4, 1
  s_cmp_lg_u32 s4, 0
  s_cbranch_scc1 .Lloop
  s_endpgm

.rodata
.p2align 6
.amdhsa_kernel mix_fixture
  .amdhsa_next_free_vgpr 16
  .amdhsa_next_free_sgpr 8
  .amdhsa_accum_offset 12
.end_amdhsa_kernel
"""


def test_the_mix_picture_takes_the_main_loop_in_issue_order(tmp_path):
    from argus.asm.stats import load_code_object

    plots = _plots()
    (tmp_path / "loop.s").write_text(LOOP)
    sequence = plots.loop_classes(load_code_object(tmp_path / "loop.s"))
    assert sequence == ["buffer load", "DS read", "s_waitcnt", "MFMA", "MFMA", "SALU", "SALU",
                        "branch"]
    mix = plots.mix(sequence)
    assert mix["SALU"] == {"count": 2, "per_mfma": 1.0} and mix["DS read"]["per_mfma"] == 0.5
    assert list(mix) == ["MFMA", "SALU", "DS read", "buffer load", "s_waitcnt", "branch"]
    width, height = _png_size(plots.draw_mix({"fixture": sequence, "again": sequence[1:]},
                                             tmp_path / "mix.png"))
    assert width > 600 and height > 300

"""The `argus` command: doctor, asm, disasm (listing, --stats, --json) and its error messages."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from argus.asm import CodeObject
from argus.cli import main
from argus.isa_cdna3.opcodes import CLASSES

EXAMPLE = Path(__file__).parent.parent / "argus" / "examples" / "mfma_gemm_32x32.s"
SALU = Path(__file__).parent / "asm" / "salu_branches.s"


@pytest.fixture
def run():
    def invoke(*args):
        return CliRunner().invoke(main, [str(a) for a in args])

    return invoke


def test_entry_point_is_installed():
    script = shutil.which("argus") or str(Path(sys.executable).parent / "argus")
    done = subprocess.run([script, "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    assert all(command in done.stdout for command in ("doctor", "asm", "disasm"))


def test_doctor_ok(run):
    result = run("doctor")
    assert result.exit_code == 0, result.output
    assert "[ok] LLVM toolchain: LLVM 1" in result.output
    assert "[ok] SMT solver z3 (via pysmt): solves sat and unsat queries" in result.output


def test_doctor_fails_with_the_fix(run, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "none"))
    result = run("doctor")
    assert result.exit_code == 1
    assert "apt-get install -y clang-19 lld-19 llvm-19" in result.output


def test_asm_writes_a_code_object(run, tmp_path):
    out = tmp_path / "gemm.hsaco"
    result = run("asm", EXAMPLE, "-o", out)
    assert result.exit_code == 0, result.output
    assert "mfma_gemm_32x32" in result.output
    assert CodeObject.from_file(out).kernel("mfma_gemm_32x32").accum_offset == 28


def test_asm_error_shows_the_line_and_writes_nothing(run, tmp_path):
    bad = tmp_path / "bad.s"
    bad.write_text(EXAMPLE.read_text().replace("s_endpgm", "s_endpgm_now"))
    out = tmp_path / "bad.hsaco"
    result = run("asm", bad, "-o", out)
    assert result.exit_code == 1
    assert f"{bad}:" in result.output and "s_endpgm_now" in result.output
    assert "Traceback" not in result.output
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["bad.s"]


def test_disasm_listing(run):
    result = run("disasm", EXAMPLE)
    assert result.exit_code == 0, result.output
    assert "v_mfma_f32_32x32x8_bf16 a[0:15], v[4:5], v[6:7], a[0:15]" in result.output
    assert "s_cbranch_scc1 65525" in result.output and "-> 0x16c4" in result.output


def test_disasm_stats_json(run):
    result = run("disasm", EXAMPLE, "--stats", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    (kernel,) = report["kernels"]
    assert sum(kernel["mix"].values()) == kernel["instructions"]
    assert kernel["mix"]["MFMA"] == 1 and kernel["mix"]["global store"] == 16
    (loop,) = kernel["loops"]
    assert loop["mix"] == {"MFMA": 1, "VALU": 1, "SALU": 2, "global load": 2, "s_waitcnt": 1,
                           "branch": 1}
    assert kernel["resources"]["accum_offset"] == 28
    assert kernel["resources"]["agprs_named_in_code"] == 16


def test_disasm_stats_table(run):
    result = run("disasm", SALU, "--stats")
    assert result.exit_code == 0, result.output
    for heading in ("instruction mix", "loops", "registers and memory"):
        assert heading in result.output
    assert "s_waitcnt" in result.output and "SMEM" in result.output


def test_disasm_json_listing_of_a_code_object(run, tmp_path):
    out = tmp_path / "k.hsaco"
    assert run("asm", SALU, "-o", out).exit_code == 0
    result = run("disasm", out, "--json", "--kernel", "salu_branches")
    listing = json.loads(result.output)["kernels"][0]["instructions"]
    assert listing[0]["text"] == "s_load_dwordx2 s[2:3], s[0:1], 0x0"
    assert any("target" in ins for ins in listing)


def test_disasm_rejects_garbage_cleanly(run, tmp_path):
    junk = tmp_path / "junk.co"
    junk.write_bytes(b"\x00" * 64)
    result = run("disasm", junk)
    assert result.exit_code == 1 and "not an ELF file" in result.output
    assert "Traceback" not in result.output


def test_disasm_unknown_kernel(run):
    result = run("disasm", EXAMPLE, "--kernel", "nope")
    assert result.exit_code == 1 and "kernels: mfma_gemm_32x32" in result.output


def test_example_command_assembles_and_inspects(run, tmp_path):
    out = tmp_path / "gemm.hsaco"
    result = run("example", "-o", out)
    assert result.exit_code == 0, result.output
    assert "mfma_gemm_32x32: 72 instructions, 516 bytes" in result.output
    assert "instruction mix" in result.output and "MFMA" in result.output
    assert CodeObject.from_file(out).kernels[0].name == "mfma_gemm_32x32"
    assert run("example", "--list").output.split() == ["mfma_gemm_32x32"]
    missing = run("example", "nope")
    assert missing.exit_code == 1 and "choose one of mfma_gemm_32x32" in missing.output


def test_debug_level_3_prints_the_assembly(tmp_path, monkeypatch, capfd):
    from argus.asm import assemble

    monkeypatch.setenv("ARGUS_DEBUG", "3")
    assemble(".text\ns_endpgm\n", name="tiny.s")
    assert "assembling tiny.s for gfx942" in capfd.readouterr().err


def test_disasm_compare(run, tmp_path):
    result = run("disasm", EXAMPLE, "--compare", EXAMPLE, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["kernels"] == ["mfma_gemm_32x32", "mfma_gemm_32x32"]
    assert report["mix"]["MFMA"] == [1, 1] and report["main_loop_instructions"] == [8, 8]
    assert list(report["mix"]) == [c for c in CLASSES if c in report["mix"]]
    table = run("disasm", SALU, "--compare", EXAMPLE)
    assert table.exit_code == 0, table.output
    assert "main loop mix" in table.output and "salu_branches" in table.output
    two = run("disasm", Path(__file__).parent / "asm" / "two_kernels.s", "--compare", EXAMPLE)
    assert two.exit_code == 1 and "choose one with --kernel" in two.output


def test_disasm_of_bare_text_without_kernels(run, tmp_path):
    bare = tmp_path / "bare.s"
    bare.write_text('.amdgcn_target "amdgcn-amd-amdhsa--gfx942"\n.text\n'
                    "v_mov_b32 v0, 1.0\ns_endpgm\n")
    listing = run("disasm", bare)
    assert listing.exit_code == 0, listing.output
    assert "no kernel descriptor" in listing.output and "v_mov_b32_e32 v0, 1.0" in listing.output
    stats = run("disasm", bare, "--stats")
    assert stats.exit_code == 1 and "has no kernels" in stats.output

"""What the backend emits: the .s round-trips through LLVM and `argus disasm`; tags emit nothing
(byte-identical .text); bad input (register or LDS budget, unsupported op, a layout that cannot
be vectorised) is an error naming the DSL line; the CLI writes outputs atomically."""

import io
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner
from elftools.elf.elffile import ELFFile
from ml_dtypes import bfloat16

import argus
import argus.lang as T
from argus.asm.lower import LoweringError, RegisterBudgetError, UnsupportedError, VectorizeError
from argus.asm.lower.program import Label, LabelDef, MInst, VReg, flatten
from argus.asm.lower.regalloc import allocate
from argus.cli import main
from argus.ir import ops as O
from argus.ir.types import SourceLoc
from argus.kernels import library
from argus.lang import DSLError, Tensor

GEMM = library()["gemm"]


def _normal(text: str) -> str:
    text = re.sub(r"0x[0-9a-f]+", lambda m: str(int(m.group(0), 16)), text)
    return " ".join(text.replace(",", " ").split())


@pytest.mark.parametrize("params", [{}, {"split_k": 2, "instr": "v_mfma_f32_16x16x16_bf16"}])
def test_assembly_round_trips_through_the_disassembler(params):
    assert_round_trip(argus.compile(GEMM.kernel, **params))


def test_branches_casts_gathers_and_attention_round_trip_too():
    from test_lower_gemm import copy_band, elementwise

    for kernel in (copy_band, elementwise, library()["moe_gemm"].kernel,
                   library()["attention_fwd"].kernel):
        assert_round_trip(argus.compile(kernel))


def assert_round_trip(compiled):
    listing = compiled.code.disassemble(compiled.code.kernels[0])
    flat = flatten(compiled.lowered.items)
    labels, index = {}, 0
    for item in flat:
        if isinstance(item, LabelDef):
            labels[item.label.name] = index
        else:
            index += 1
    ours = [i for i in flat if isinstance(i, MInst)]
    assert len(ours) == len(listing)
    by_address = {ins.address: n for n, ins in enumerate(listing)}
    for mine, theirs in zip(ours, listing):
        target = next((o for o in mine.operands if isinstance(o, Label)), None)
        if target is not None:
            assert theirs.opcode == mine.opcode
            assert by_address[theirs.operands[0].target] == labels[target.name]
        else:
            assert _normal(theirs.text) == _normal(mine.text()), (mine.text(), theirs.text)


def test_disasm_command_lists_the_same_instructions(tmp_path):
    compiled = argus.compile(GEMM.kernel)
    path = tmp_path / "gemm.hsaco"
    compiled.code.to_file(path)
    result = CliRunner().invoke(main, ["disasm", str(path)])
    assert result.exit_code == 0, result.output
    opcodes = [m.opcode for m in flatten(compiled.lowered.items) if isinstance(m, MInst)]
    listed = [line.split()[0] for line in result.output.splitlines()
              if line.strip() and line.split()[0] in set(opcodes)]
    assert listed == opcodes


def _text_section(code) -> bytes:
    return ELFFile(io.BytesIO(code.data)).get_section_by_name(".text").data()


def test_tags_and_tag_assertions_emit_nothing(monkeypatch):
    tagged = argus.compile(GEMM.kernel.trace(split_k=2))
    monkeypatch.setattr(T, "tag", lambda target, fn: target)
    monkeypatch.setattr(T, "tag_assert", lambda *args, **kwargs: None)
    GEMM.kernel._cache.clear()
    plain_ir = GEMM.kernel.trace(split_k=2)
    GEMM.kernel._cache.clear()
    assert not any(isinstance(op, O.TagDef | O.TagTile) or getattr(op, "asserts", ())
                   for op in plain_ir.ops())
    assert any(getattr(op, "asserts", ()) for op in tagged.ir.ops())
    plain = argus.compile(plain_ir)
    assert _text_section(plain.code) == _text_section(tagged.code)


def test_register_budget_error_names_the_line_and_the_live_values():
    loc = SourceLoc("kernel.py", 7, 5)
    tiles = [VReg("v", 16, f"acc{i}", 4) for i in range(17)]
    program = [MInst("v_mov_b32_e32", (t[0], 0), 1, loc=loc) for t in tiles]
    program += [MInst("v_mov_b32_e32", (t[0], t[15]), 1, loc=loc) for t in tiles]
    with pytest.raises(RegisterBudgetError) as caught:
        allocate(program)
    message = caught.value.render()
    assert message.startswith("kernel.py:7:5") and "272 VGPRs are live" in message
    assert "values from kernel.py:7 (272)" in message
    assert "largest first: %acc0 (16)" in message and "fix:" in message
    assert caught.value.loc == loc and "smaller tiles" in caught.value.fix


def test_tiles_beyond_the_register_file_name_the_dsl_line():
    with pytest.raises(DSLError, match=r"gemm\.py:\d+.*VGPRs"):
        argus.compile(GEMM.kernel, block_m=256, block_n=256, block_k=16)


def test_lds_budget_error_names_the_kernel():
    with pytest.raises(DSLError, match=r"gemm\.py:\d+.*LDS"):
        argus.compile(GEMM.kernel, block_m=256, block_n=256, block_k=64)


@T.kernel(waves=4)
def grouped(X: Tensor("f32", 64, 32), Y: Tensor("f32", 64, 32)):
    T.grid(1)
    spec = T.copy_layout((64, 32), 4, 4)
    x = X.load((0, 0), spec)
    T.group_barrier(lambda wave: wave < 2)    # gfx942's s_barrier has no groups
    Y.store((0, 0), x)


def test_unsupported_op_names_its_line():
    # (x / y used to be the example; it lowers now, as x * rcp(y))
    with pytest.raises(UnsupportedError,
                       match=r"test_lower_emit\.py:\d+.*barrier\.group") as caught:
        argus.compile(grouped, verify=False)
    assert "interp" in caught.value.fix


@T.kernel(waves=4)
def scattered_copy(X: Tensor("bf16", "R", 32), Y: Tensor("bf16", "R", 32)):
    T.assume((X.shape[0] % 64).eq(0))
    T.grid(X.shape[0] // 64)
    row = T.program_id(0) * 64
    Y.store((row, 0), X.load((row, 0), T.copy_layout((64, 32), 4, 1)))


@T.kernel(waves=4)
def vector_copy(X: Tensor("bf16", "R", 32), Y: Tensor("bf16", "R", 32)):
    T.assume((X.shape[0] % 64).eq(0))
    T.grid(X.shape[0] // 64)
    row = T.program_id(0) * 64
    Y.store((row, 0), X.load((row, 0), T.copy_layout((64, 32), 4, 8)))


def test_layout_that_cannot_be_vectorised_is_refused():
    with pytest.raises(VectorizeError, match=r"test_lower_emit\.py:\d+") as caught:
        argus.compile(scattered_copy)
    assert isinstance(caught.value, LoweringError)


def test_a_small_dsl_kernel_compiles_and_copies():
    compiled = argus.compile(vector_copy)
    X = np.arange(128 * 32, dtype=np.float32).reshape(128, 32).astype(bfloat16)
    Y = np.zeros_like(X)
    compiled.run(X, Y)
    assert np.array_equal(X.view(np.uint16), Y.view(np.uint16))
    assert "buffer_load_dwordx4" in compiled.text and "buffer_store_dwordx4" in compiled.text


def test_cli_compile_writes_atomically_and_refuses_cleanly(tmp_path):
    out = tmp_path / "gemm.hsaco"
    ok = CliRunner().invoke(main, ["compile", "gemm", "--no-verify", "-o", str(out)])
    assert ok.exit_code == 0, ok.output
    assert out.read_bytes()[:4] == b"\x7fELF" and "occupancy" in ok.output
    bad = tmp_path / "bad.hsaco"
    failed = CliRunner().invoke(main, ["compile", "gemm", "--no-verify", "--param",
                                       "block_m=256", "--param", "block_n=256", "--param",
                                       "block_k=16", "-o", str(bad)])
    assert failed.exit_code == 1 and "gemm.py:" in failed.output
    assert not bad.exists() and list(tmp_path.iterdir()) == [out]
    listing = CliRunner().invoke(main, ["compile", "gemm", "--no-verify", "-S"])
    assert ".amdhsa_kernel gemm" in listing.output and "; gemm.py:" in listing.output


def test_cli_run_emulate():
    result = CliRunner().invoke(main, ["run", "gemm", "--emulate", "--size", "M=64",
                                       "--size", "N=128", "--size", "K=64"])
    assert result.exit_code == 0, result.output
    assert "strict" in result.output and "max error" in result.output


def test_disasm_compare_beside_amds_gemm(tmp_path, aiter_root):
    amd = (aiter_root / "aiter_meta" / "hsa" / "gfx942" / "bf16gemm"
           / "bf16gemm_outf32_tn_64x64_pf3.co")
    ours = tmp_path / "gemm.hsaco"
    argus.compile(GEMM.kernel, instr="v_mfma_f32_16x16x16_bf16", block_k=64).code.to_file(ours)
    result = CliRunner().invoke(main, ["disasm", str(ours), "--compare", str(amd), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    ours_per_mfma, amd_per_mfma = report["main_loop_instructions_per_mfma"]
    assert ours_per_mfma > 1 and amd_per_mfma > 1
    assert report["main_loop_mix"]["MFMA"][0] > 0 and report["main_loop_mix"]["MFMA"][1] > 0
    assert report["resources"]["lds_bytes"] == [2 * 2 * 64 * 64 * 2, 65536]
    table = CliRunner().invoke(main, ["disasm", str(ours), "--compare", str(amd)])
    assert "per MFMA" in table.output and "vgpr_count" in table.output


def test_debug_level_3_prints_the_program_between_stages(monkeypatch, capfd):
    from argus.asm.lower import lower

    monkeypatch.setenv("ARGUS_DEBUG", "3")
    lower(vector_copy.trace())
    err = capfd.readouterr().err
    for stage in ("instruction selection", "scheduling", "register allocation",
                  "s_waitcnt insertion"):
        assert f"; ---- after {stage}" in err
    assert "%" in err.split("after register allocation")[0]      # virtual before allocation


def test_cli_compiles_a_kernel_from_a_file():
    path = f"{__file__}:vector_copy"
    result = CliRunner().invoke(main, ["compile", path, "-S"])
    assert result.exit_code == 0, result.output
    assert ".amdhsa_kernel vector_copy" in result.output and "buffer_load_dwordx4" in result.output
    summary = CliRunner().invoke(main, ["compile", path])
    assert summary.exit_code == 0 and "proved" in summary.output and "(R)" in summary.output

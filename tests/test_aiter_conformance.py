"""Conformance on code nobody here wrote: every gfx942 code object in the amd-aiter wheel.

Every instruction of every kernel must parse into typed operands, every kernel must yield a
KernelInfo, and the decoded records must tile `.text` exactly. One llvm-objdump per batch of
files (its start-up dominates), batches spread over the machine's cores.
"""

import os
import time
from collections import Counter
from multiprocessing import get_context

import pytest

from argus.asm import CodeObject, assemble
from argus.isa_cdna3.instruction import Imm, Label
from argus.vendor.aiter import gfx942_code_objects

BATCH = 64  # code objects per llvm-objdump run


def summarise_batch(paths) -> list[dict]:
    codes = [CodeObject.from_file(path) for path in paths]
    CodeObject.disassemble_all(codes)
    return [summarise(code) for code in codes]


def summarise(code: CodeObject) -> dict:
    """Check one code object; return counts (instructions are not sent between processes)."""
    instructions = code.disassemble()
    problems = []
    if b"".join(ins.encoding for ins in instructions) != code.text:
        problems.append("decoded instructions do not tile .text")
    starts = {ins.address for ins in instructions}
    counts = Counter(instructions=len(instructions), kernels=len(code.kernels),
                     files=1, text_bytes=len(code.text))
    for info in code.kernels:
        body = code.disassemble(info)
        if not body or body[0].address != info.entry or info.kernarg_size < 0:
            problems.append(f"kernel {info.name}: no code at its entry 0x{info.entry:x}")
        if info.wavefront_size != 64 or not 0 < info.accum_offset <= 512:
            problems.append(f"kernel {info.name}: implausible descriptor {info.descriptor}")
        counts["kernel_args"] += len(info.args)
        user = sum(count for name, _, count in info.descriptor.sgpr_inputs
                   if not name.startswith(("workgroup", "private_segment_wave")))
        if user != info.descriptor.user_sgpr_count:
            problems.append(f"kernel {info.name}: user SGPR inputs {info.descriptor.sgpr_inputs}"
                            f" do not add up to USER_SGPR_COUNT {info.descriptor.user_sgpr_count}")
    for ins in instructions:
        for op in ins.operands:
            if isinstance(op, Label):
                counts["branches"] += 1
                if op.target not in starts:
                    problems.append(f"{ins.text} at 0x{ins.address:x}: target 0x{op.target:x} "
                                    "is not an instruction")
            elif isinstance(op, Imm) and op.literal:
                counts["literals"] += 1
        if ins.opcode == "s_waitcnt":
            counts["waitcnts"] += 1
            if [name for name, _ in ins.modifiers] != ["vmcnt", "expcnt", "lgkmcnt"]:
                problems.append(f"{ins.text}: counters {ins.modifiers}")
        counts["modifiers"] += len(ins.modifiers)
        counts["operands"] += len(ins.operands)
    return {"path": str(code.path), "counts": counts, "problems": problems,
            "opcodes": sorted({ins.opcode for ins in instructions})}


@pytest.mark.aiter
def test_every_vendor_code_object_disassembles(aiter_root, capsys):
    files = gfx942_code_objects(aiter_root)
    assert len(files) >= 1281
    started = time.perf_counter()
    with get_context("fork").Pool(min(2, os.cpu_count() or 1)) as pool:
        batches = [files[i:i + BATCH] for i in range(0, len(files), BATCH)]
        results = [r for batch in pool.map(summarise_batch, batches, chunksize=1) for r in batch]
    elapsed = time.perf_counter() - started
    total, opcodes = Counter(), set()
    problems = []
    for result in results:
        total.update(result["counts"])
        opcodes.update(result["opcodes"])
        problems += [f"{result['path']}: {p}" for p in result["problems"]]
    assert not problems, "\n".join(problems[:20])
    assert total["files"] == len(files)
    assert total["kernels"] >= len(files)
    assert total["instructions"] > 6_000_000 and len(opcodes) > 150
    assert total["branches"] > 0 and total["literals"] > 0 and total["waitcnts"] > 0
    with capsys.disabled():
        print(f"\naiter conformance: {total['files']} code objects, {total['kernels']} kernels, "
              f"{total['instructions']} instructions ({len(opcodes)} opcodes, "
              f"{total['operands']} operands, {total['modifiers']} modifiers, "
              f"{total['branches']} branch labels, {total['literals']} literals, "
              f"{total['kernel_args']} kernel arguments) in {elapsed:.1f} s")


def reassembly_source(code: CodeObject) -> str:
    """The decoded listing as assembly, with our own labels at every resolved branch target."""
    instructions = code.disassemble()
    targets = {ins.branch_target for ins in instructions} - {None}
    lines = ['.amdgcn_target "amdgcn-amd-amdhsa--gfx942"', ".text"]
    for ins in instructions:
        if ins.address in targets:
            lines.append(f"L_{ins.address:x}:")
        text = ins.text
        if ins.branch_target is not None:
            text = f"{text.rpartition(' ')[0]} L_{ins.branch_target:x}"
        lines.append(text)
    return "\n".join(lines) + "\n"


def round_trip_batch(paths) -> list[str]:
    codes = [CodeObject.from_file(path) for path in paths]
    CodeObject.disassemble_all(codes)
    return [str(code.path) for code in codes
            if assemble(reassembly_source(code), name=str(code.path)).text != code.text]


@pytest.mark.aiter
def test_vendor_kernels_reassemble_to_identical_bytes(aiter_root):
    """Decoded text + resolved branch targets -> clang -> the vendor's exact .text bytes."""
    files = gfx942_code_objects(aiter_root)
    sample = files[::24] + [f for f in files if "bf16gemm" in str(f)]
    with get_context("fork").Pool(min(2, os.cpu_count() or 1)) as pool:
        mismatches = pool.map(round_trip_batch, [sample[i::2] for i in range(2)])
    assert [path for batch in mismatches for path in batch] == []
    assert len(sample) > 50

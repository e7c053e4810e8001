"""Instruction statistics for comparing kernels by hand: mix by class, loops, resource usage.

`kernel_stats` summarises one kernel of a code object; loops are found from backward branches.
`disasm_command` is what `argus disasm` runs (rich tables for people, JSON for machines).
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import attrs

from argus.asm.codeobject import CodeObject, assemble
from argus.isa_cdna3 import opcodes
from argus.isa_cdna3.abi import KernelInfo
from argus.isa_cdna3.instruction import Instruction, Reg
from argus.isa_cdna3.opcodes import CLASSES


def classify(ins: Instruction) -> str:
    """The statistics class of one instruction (one of CLASSES), from the opcode table."""
    return opcodes.classify(ins.opcode, to_lds=ins.has("lds"))


def instruction_mix(instructions: Iterable[Instruction]) -> dict[str, int]:
    """Count per class, in CLASSES order, classes with no instruction left out."""
    counts = Counter(classify(ins) for ins in instructions)
    return {name: counts[name] for name in CLASSES if counts[name]}


@attrs.frozen
class Loop:
    """A loop found from backward branches: body spans [start, end] (end is the last branch)."""

    start: int
    end: int
    branches: tuple[str, ...]
    instructions: int
    mix: dict = attrs.field(eq=False, hash=False)
    depth: int = 0

    def to_json(self) -> dict:
        return {"start": f"0x{self.start:x}", "end": f"0x{self.end:x}", "depth": self.depth,
                "branches": list(self.branches), "instructions": self.instructions,
                "mix": self.mix}


def find_loops(instructions: Sequence[Instruction]) -> list[Loop]:
    """One loop per backward-branch target, ending at the last backward branch to it."""
    backward: dict[int, list[Instruction]] = {}
    for ins in instructions:
        target = ins.branch_target
        if target is not None and target <= ins.address:
            backward.setdefault(target, []).append(ins)
    spans = sorted(((start, max(b.address for b in branches), branches)
                    for start, branches in backward.items()), key=lambda s: (s[0], -s[1]))
    loops = []
    for start, end, branches in spans:
        body = [ins for ins in instructions if start <= ins.address <= end]
        depth = sum(1 for s, e, _ in spans if s <= start and end <= e and (s, e) != (start, end))
        loops.append(Loop(start, end, tuple(b.opcode for b in branches), len(body),
                          instruction_mix(body), depth))
    return loops


def registers_referenced(instructions: Iterable[Instruction]) -> dict[str, int]:
    """Highest register index named per file, plus one (0 when the file is never named)."""
    highest = {"s": 0, "v": 0, "a": 0}
    for ins in instructions:
        for op in ins.operands:
            if isinstance(op, Reg) and op.file in highest:
                highest[op.file] = max(highest[op.file], op.last + 1)
    return highest


@attrs.frozen
class KernelStats:
    kernel: KernelInfo
    instructions: int
    code_bytes: int
    mix: dict = attrs.field(eq=False, hash=False)
    loops: tuple[Loop, ...]
    referenced: dict = attrs.field(eq=False, hash=False)

    def resources(self) -> dict[str, int]:
        k = self.kernel
        return {"sgpr_count": k.sgpr_count, "vgpr_count": k.vgpr_count,
                "agpr_count": k.agpr_count, "accum_offset": k.accum_offset,
                "unified_vgpr_count": k.unified_vgpr_count,
                "lds_bytes": k.group_segment_size, "scratch_bytes": k.private_segment_size,
                "kernarg_bytes": k.kernarg_size, "wavefront_size": k.wavefront_size,
                "max_flat_workgroup_size": k.max_flat_workgroup_size,
                "sgprs_named_in_code": self.referenced["s"],
                "vgprs_named_in_code": self.referenced["v"],
                "agprs_named_in_code": self.referenced["a"]}

    def to_json(self) -> dict:
        return {"kernel": self.kernel.name, "instructions": self.instructions,
                "code_bytes": self.code_bytes, "resources": self.resources(), "mix": self.mix,
                "loops": [loop.to_json() for loop in self.loops]}


def kernel_stats(code: CodeObject, kernel: KernelInfo) -> KernelStats:
    instructions = code.disassemble(kernel)
    return KernelStats(kernel, len(instructions), sum(i.size for i in instructions),
                       instruction_mix(instructions), tuple(find_loops(instructions)),
                       registers_referenced(instructions))


def load_code_object(path: str | Path) -> CodeObject:
    """A code object from `.hsaco`/`.co`, or assembled from `.s` (nothing written to disk)."""
    path = Path(path)
    if path.suffix in (".s", ".S", ".asm"):
        return assemble(path.read_text(), name=str(path))
    return CodeObject.from_file(path)


def _selected(code: CodeObject, kernel: str | None) -> list[KernelInfo]:
    return [code.kernel(kernel)] if kernel else list(code.kernels)


def main_loop(summary: KernelStats) -> Loop | None:
    """The innermost loop, the longest among equally deep ones: where a kernel spends its time."""
    return max(summary.loops, key=lambda loop: (loop.depth, loop.instructions), default=None)


def compare_stats(left: KernelStats, right: KernelStats) -> dict:
    """Side by side: resources, instruction mix of the kernel and of its main loop."""
    def pairs(a: dict, b: dict, order: Sequence[str] = CLASSES) -> dict:
        return {name: [a.get(name, 0), b.get(name, 0)] for name in order
                if name in a or name in b}

    loops = [main_loop(left), main_loop(right)]
    loop_mix = [loop.mix if loop else {} for loop in loops]
    return {"kernels": [left.kernel.name, right.kernel.name],
            "instructions": [left.instructions, right.instructions],
            "resources": pairs(left.resources(), right.resources(), list(left.resources())),
            "mix": pairs(left.mix, right.mix),
            "main_loop_instructions": [loop.instructions if loop else 0 for loop in loops],
            "main_loop_instructions_per_mfma": [instructions_per_mfma(loop) for loop in loops],
            "main_loop_mix": pairs(*loop_mix)}


def instructions_per_mfma(loop: Loop | None) -> float | None:
    """Instructions the loop issues per MFMA (the MFMA included): its MFMA density inverted;
    None for a loop without MFMAs."""
    mfmas = loop.mix.get("MFMA", 0) if loop else 0
    return round(loop.instructions / mfmas, 3) if mfmas else None


def _single_kernel(code: CodeObject, kernel: str | None, path: str) -> KernelInfo:
    if kernel:
        return code.kernel(kernel)
    if len(code.kernels) != 1:
        names = ", ".join(k.name for k in code.kernels) or "none"
        raise KeyError(f"{path} holds {len(code.kernels)} kernels ({names}); choose one with "
                       "--kernel")
    return code.kernels[0]


def compare_command(path: str, other: str, *, kernel: str | None, as_json: bool,
                    echo: Callable[[str], None]) -> None:
    """`argus disasm A --compare B`: statistics of two kernels side by side."""
    summaries = []
    for each in (path, other):
        code = load_code_object(each)
        summaries.append(kernel_stats(code, _single_kernel(code, kernel if each == path else
                                                           None, each)))
    report = compare_stats(*summaries)
    if as_json:
        echo(json.dumps({"files": [str(path), str(other)], **report}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(width=110)
    left, right = report["kernels"]
    for title, rows in (("resources", report["resources"]),
                        ("instruction mix", {"all": report["instructions"], **report["mix"]}),
                        ("main loop mix", {"all": report["main_loop_instructions"],
                                           "per MFMA": report["main_loop_instructions_per_mfma"],
                                           **report["main_loop_mix"]})):
        table = Table("", left, right, "ratio", title=title)
        for name, (a, b) in rows.items():
            table.add_row(name, str(a), str(b), f"{b / a:.2f}" if a and b is not None else "-")
        console.print(table)


def disasm_command(path: str, *, kernel: str | None, stats: bool, as_json: bool,
                   echo: Callable[[str], None]) -> None:
    """`argus disasm`: a listing, or statistics with --stats; JSON with --json."""
    code = load_code_object(path)
    kernels = _selected(code, kernel)
    if not kernels:
        if stats:
            raise KeyError(f"{path} has no kernels (no .amdhsa_kernel descriptor), so there are "
                           "no resources to report; `argus disasm` without --stats lists .text")
        echo(f".text:  // 0x{code.text_address:x}, {len(code.text)} bytes, no kernel descriptor")
        for ins in code.disassemble():
            echo(f"  {ins.text:<60s} // {ins.address:08x}: {dwords(ins)}")
        return
    if stats:
        summaries = [kernel_stats(code, k) for k in kernels]
        if as_json:
            echo(json.dumps({"file": str(path), "mcpu": code.mcpu,
                             "kernels": [s.to_json() for s in summaries]}, indent=2))
        else:
            _print_stats(summaries)
        return
    if as_json:
        echo(json.dumps({"file": str(path), "mcpu": code.mcpu, "kernels": [
            {"kernel": k.name, "instructions": [
                {"address": f"0x{i.address:x}", "encoding": dwords(i), "text": i.text,
                 **({"target": f"0x{t:x}"} if (t := i.branch_target) is not None else {})}
                for i in code.disassemble(k)]} for k in kernels]}, indent=2))
        return
    for k in kernels:
        echo(f"{k.name}:  // {k.symbol}, entry 0x{k.entry:x}, {k.code_size} bytes")
        for ins in code.disassemble(k):
            target = ins.branch_target
            note = f" -> 0x{target:x}" if target is not None else ""
            echo(f"  {ins.text:<60s} // {ins.address:08x}: {dwords(ins)}{note}")


def dwords(ins: Instruction) -> str:
    """The encoding as llvm-objdump prints it: little-endian dwords in hex."""
    words = struct.unpack(f"<{len(ins.encoding) // 4}I", ins.encoding)
    return " ".join(f"{word:08X}" for word in words)


def _print_stats(summaries: Sequence[KernelStats]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=110)
    for summary in summaries:
        console.print(f"[bold]{summary.kernel.name}[/bold]: {summary.instructions} instructions, "
                      f"{summary.code_bytes} bytes")
        resources = Table("resource", "value", title="registers and memory (metadata)")
        for name, value in summary.resources().items():
            resources.add_row(name, str(value))
        console.print(resources)
        mix = Table("class", "count", "share", title="instruction mix")
        for name, count in summary.mix.items():
            mix.add_row(name, str(count), f"{100 * count / max(summary.instructions, 1):.1f}%")
        console.print(mix)
        if not summary.loops:
            console.print("no loops (no backward branches)")
            continue
        loops = Table("loop", "span", "depth", "instructions", "mix", title="loops")
        for index, loop in enumerate(summary.loops):
            body_mix = ", ".join(f"{name} {count}" for name, count in loop.mix.items())
            loops.add_row(str(index), f"0x{loop.start:x}-0x{loop.end:x}", str(loop.depth),
                          str(loop.instructions), body_mix)
        console.print(loops)

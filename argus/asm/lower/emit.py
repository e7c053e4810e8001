"""Emission: the allocated machine program as readable gfx942 assembly — instructions with a
comment tying each block to its IR op and DSL line, the `.amdhsa_kernel` descriptor and the
`.amdgpu_metadata` (argument names carry the `!str` tag: LLVM's YAML reads `N` or `y` as a
boolean even when quoted).
"""

from __future__ import annotations

from pathlib import Path

from argus.asm.lower.program import LabelDef, MInst, flatten
from argus.isa_cdna3 import abi


def _where(inst: MInst) -> str:
    if inst.loc is None:
        return ""
    return f"{Path(inst.loc.file).name}:{inst.loc.line} {inst.origin}".rstrip()


def body_text(items) -> str:
    lines, shown = [], None
    for item in flatten(items):
        if isinstance(item, LabelDef):
            lines.append(f"{item.label.name}:")
            continue
        where = _where(item)
        if where and where != shown and not item.inserted:
            lines.append(f"  ; {where}")
            shown = where
        text = item.text()
        if item.note:
            text = f"{text:<56} ; {item.note}"
        lines.append(f"  {text}")
    return "\n".join(lines)


def kernel_text(*, name: str, body: str, kernargs, kernarg_bytes: int, lds_bytes: int,
                sgprs: int, vgprs: int, grid_rank: int, block: int) -> str:
    """The complete .s: code, kernel descriptor and code-object metadata (`abi.kernel_text`)."""
    args = [(slot.name, slot.offset, 8 if slot.kind == "ptr" else 4,
             "global_buffer" if slot.kind == "ptr" else "by_value") for slot in kernargs]
    return abi.kernel_text(name=name, body=body, args=args, kernarg_bytes=kernarg_bytes,
                           lds_bytes=lds_bytes, sgprs=sgprs, vgprs=vgprs, grid_rank=grid_rank,
                           block=block)

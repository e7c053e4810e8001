"""Emission: the allocated machine program as readable gfx942 assembly — instructions with a
comment tying each block to its IR op and DSL line, the `.amdhsa_kernel` descriptor and the
`.amdgpu_metadata` (argument names carry the `!str` tag: LLVM's YAML reads `N` or `y` as a
boolean even when quoted).
"""

from __future__ import annotations

from pathlib import Path

from argus.asm.lower.program import LabelDef, MInst, flatten
from argus.isa_cdna3 import isa
from argus.isa_cdna3.abi import ACCUM_OFFSET_GRANULE


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


def granule(count: int, unit: int) -> int:
    return max(unit, -(-count // unit) * unit)


def kernel_text(*, name: str, body: str, kernargs, kernarg_bytes: int, lds_bytes: int,
                sgprs: int, vgprs: int, grid_rank: int, block: int) -> str:
    """The complete .s: code, kernel descriptor and code-object metadata."""
    # AGPRs (none) would start here; the VGPR granule is 8 on gfx90a+ and the descriptor rounds
    # up itself, so next_free_vgpr is the arch count
    accum = granule(vgprs, ACCUM_OFFSET_GRANULE)
    ids = "\n".join(f"  .amdhsa_system_sgpr_workgroup_id_{axis} 1"
                    for axis in "xyz"[:grid_rank])
    args = []
    for slot in kernargs:
        if slot.kind == "ptr":
            args.append(f'      - .name: !str {slot.name}\n        .offset: {slot.offset}\n'
                        f"        .size: 8\n        .value_kind: global_buffer\n"
                        f"        .address_space: global")
        else:
            args.append(f'      - .name: !str {slot.name}\n        .offset: {slot.offset}\n'
                        f"        .size: 4\n        .value_kind: by_value")
    args_block = ("    .args:\n" + "\n".join(args) + "\n") if args else ""
    return f"""\
.amdgcn_target "amdgcn-amd-amdhsa--gfx942"
.text
.globl {name}
.p2align 8
.type {name},@function
{name}:
{body}
.Lfunc_end_{name}:
  .size {name}, .Lfunc_end_{name}-{name}

.rodata
.p2align 6
.amdhsa_kernel {name}
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
{ids}
  .amdhsa_system_vgpr_workitem_id 0
  .amdhsa_kernarg_size {kernarg_bytes}
  .amdhsa_group_segment_fixed_size {lds_bytes}
  .amdhsa_next_free_vgpr {accum}
  .amdhsa_next_free_sgpr {sgprs}
  .amdhsa_accum_offset {accum}
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.kernels:
  - .name: {name}
    .symbol: {name}.kd
    .kernarg_segment_size: {kernarg_bytes}
    .kernarg_segment_align: 8
    .group_segment_fixed_size: {lds_bytes}
    .private_segment_fixed_size: 0
    .wavefront_size: {isa.WAVE_SIZE}
    .sgpr_count: {sgprs}
    .vgpr_count: {vgprs}
    .agpr_count: 0
    .max_flat_workgroup_size: {block}
{args_block}...
.end_amdgpu_metadata
"""

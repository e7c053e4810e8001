"""Wrap a hand-written gfx942 kernel body into a complete, assemblable HSA kernel.

Used by the emulator's instruction tests and handy for experiments: the body sees the kernarg
pointer in s[0:1], the workgroup id x in s2 and the work-item id in v0.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

_ARG_SIZES = {"ptr": 8, "u32": 4, "i32": 4, "f32": 4, "u64": 8}


@attrs.frozen
class KernelArgSpec:
    name: str
    kind: str                # ptr | u32 | i32 | f32 | u64

    @property
    def size(self) -> int:
        return _ARG_SIZES[self.kind]


def kernarg_offsets(args: Sequence[KernelArgSpec]) -> list[int]:
    """Naturally aligned offsets of `args` in the kernarg segment."""
    offsets, position = [], 0
    for arg in args:
        position = -(-position // arg.size) * arg.size
        offsets.append(position)
        position += arg.size
    return offsets


def kernel_source(name: str, body: str, args: Sequence[tuple[str, str]] = (), *,
                  vgprs: int = 32, agprs: int = 0, sgprs: int = 32, lds_bytes: int = 0,
                  max_block: int = 256) -> str:
    """Assembly text of kernel `name` running `body` (which must end in s_endpgm)."""
    specs = [KernelArgSpec(n, k) for n, k in args]
    for spec in specs:
        if spec.kind not in _ARG_SIZES:
            raise ValueError(f"argument {spec.name!r}: kind {spec.kind!r} is not one of "
                             f"{sorted(_ARG_SIZES)}")
    offsets = kernarg_offsets(specs)
    kernarg_size = max([o + s.size for o, s in zip(offsets, specs)], default=0)
    accum = -(-max(vgprs, 1) // 4) * 4
    total = accum + agprs
    meta_args = []
    for spec, offset in zip(specs, offsets):
        kind = "global_buffer" if spec.kind == "ptr" else "by_value"
        extra = ("\n        .address_space: global" if kind == "global_buffer" else "")
        meta_args.append(f"      - .name: {spec.name}\n        .offset: {offset}\n"
                         f"        .size: {spec.size}\n        .value_kind: {kind}{extra}")
    arg_text = "\n".join(meta_args) if meta_args else ""
    args_block = f"    .args:\n{arg_text}\n" if meta_args else ""
    return f"""\
.amdgcn_target "amdgcn-amd-amdhsa--gfx942"
.text
.globl {name}
.p2align 8
.type {name},@function
{name}:
{body}

.rodata
.p2align 6
.amdhsa_kernel {name}
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_system_sgpr_workgroup_id_x 1
  .amdhsa_kernarg_size {kernarg_size}
  .amdhsa_group_segment_fixed_size {lds_bytes}
  .amdhsa_next_free_vgpr {total}
  .amdhsa_next_free_sgpr {sgprs}
  .amdhsa_accum_offset {accum}
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.kernels:
  - .name: {name}
    .symbol: {name}.kd
    .kernarg_segment_size: {kernarg_size}
    .kernarg_segment_align: 8
    .group_segment_fixed_size: {lds_bytes}
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: {sgprs}
    .vgpr_count: {vgprs}
    .agpr_count: {agprs}
    .max_flat_workgroup_size: {max_block}
{args_block}...
.end_amdgpu_metadata
"""

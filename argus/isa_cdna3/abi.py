"""The HSA kernel ABI on gfx942: the 64-byte kernel descriptor and its granules, the SGPR inputs
the dispatcher preloads, the kernel-argument records of the metadata note, `LaunchError`, and
`Launch`, one dispatch with its kernarg segment packed (made by `asm.launch.prepare`).

`asm.codeobject` reads these records out of a code object, `asm.launch` packs arguments by them
and the emulator sets up a wave's initial state from them.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import attrs
import numpy as np

from argus.errors import ArgusError
from argus.isa_cdna3 import isa

KERNEL_DESCRIPTOR_SIZE = 64
#: COMPUTE_PGM_RSRC granules on gfx90a/gfx942: SGPRs are encoded in blocks of 8, the first AGPR
#: (accum_offset, COMPUTE_PGM_RSRC3) in blocks of 4; unified VGPRs in isa.VGPR_ALLOC_GRANULE.
SGPR_GRANULE = 8
ACCUM_OFFSET_GRANULE = 4

# kernel_code_properties bit i enables USER_SGPR_INPUTS[i]: (name, SGPRs), in SGPR order.
USER_SGPR_INPUTS = (("private_segment_buffer", 4), ("dispatch_ptr", 2), ("queue_ptr", 2),
                    ("kernarg_segment_ptr", 2), ("dispatch_id", 2), ("flat_scratch_init", 2),
                    ("private_segment_size", 1))


class LaunchError(ArgusError, ValueError):
    """The launch (grid, block, arguments) does not fit the kernel."""


@attrs.frozen
class KernelArg:
    """One kernel argument in the kernarg segment."""

    name: str
    offset: int
    size: int
    value_kind: str
    address_space: str = ""
    value_type: str = ""


@attrs.frozen
class KernelDescriptor:
    """The 64-byte AMDHSA kernel descriptor (`<kernel>.kd`), with the gfx90a/gfx942 granules."""

    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    entry_offset: int
    compute_pgm_rsrc3: int
    compute_pgm_rsrc1: int
    compute_pgm_rsrc2: int
    kernel_code_properties: int
    kernarg_preload: int = 0

    @classmethod
    def from_bytes(cls, raw: bytes) -> KernelDescriptor:
        if len(raw) < KERNEL_DESCRIPTOR_SIZE:
            raise ValueError(
                f"kernel descriptor is {len(raw)} bytes, expected {KERNEL_DESCRIPTOR_SIZE}")
        (group, private, kernarg, _, entry, _, rsrc3, rsrc1, rsrc2, props, preload,
         _) = struct.unpack("<IIIIq20sIIIHH4s", raw[:KERNEL_DESCRIPTOR_SIZE])
        return cls(group, private, kernarg, entry, rsrc3, rsrc1, rsrc2, props, preload)

    @property
    def unified_vgpr_count(self) -> int:
        """VGPRs + AGPRs allocated per lane."""
        return ((self.compute_pgm_rsrc1 & 0x3F) + 1) * isa.VGPR_ALLOC_GRANULE

    @property
    def sgpr_count(self) -> int:
        """SGPRs per wave including VCC/FLAT_SCRATCH/XNACK_MASK, as encoded (granule 8; the
        hardware rounds the allocation up further to 16)."""
        return (((self.compute_pgm_rsrc1 >> 6) & 0xF) + 1) * SGPR_GRANULE

    @property
    def accum_offset(self) -> int:
        """First AGPR's index in the unified VGPR file."""
        return ((self.compute_pgm_rsrc3 & 0x3F) + 1) * ACCUM_OFFSET_GRANULE

    @property
    def float_modes(self) -> dict[str, int]:
        """MODE register fields the dispatcher sets from COMPUTE_PGM_RSRC1, named like the
        `.amdhsa_*` directives (denorm mode 3 keeps denormals, 0 flushes them)."""
        rsrc1 = self.compute_pgm_rsrc1
        return {"float_round_mode_32": rsrc1 >> 12 & 3, "float_round_mode_16_64": rsrc1 >> 14 & 3,
                "float_denorm_mode_32": rsrc1 >> 16 & 3,
                "float_denorm_mode_16_64": rsrc1 >> 18 & 3,
                "dx10_clamp": rsrc1 >> 21 & 1, "ieee_mode": rsrc1 >> 23 & 1,
                "fp16_overflow": rsrc1 >> 26 & 1}

    @property
    def tg_split(self) -> bool:
        return bool(self.compute_pgm_rsrc3 >> 16 & 1)

    @property
    def user_sgpr_count(self) -> int:
        return (self.compute_pgm_rsrc2 >> 1) & 0x1F

    @property
    def workgroup_id_enabled(self) -> tuple[bool, bool, bool]:
        return tuple(bool(self.compute_pgm_rsrc2 >> bit & 1) for bit in (7, 8, 9))

    @property
    def workitem_id_dims(self) -> int:
        """Number of workitem-id dimensions packed into v0 (1..3)."""
        return ((self.compute_pgm_rsrc2 >> 11) & 3) + 1

    @property
    def wavefront_size(self) -> int:
        return 32 if self.kernel_code_properties >> 10 & 1 else 64

    @property
    def user_sgprs(self) -> tuple[str, ...]:
        """Names of the enabled user SGPR inputs, in SGPR order."""
        return tuple(name for bit, (name, _) in enumerate(USER_SGPR_INPUTS)
                     if self.kernel_code_properties >> bit & 1)

    @property
    def sgpr_inputs(self) -> tuple[tuple[str, int, int], ...]:
        """(input, first SGPR, SGPR count) of everything the dispatcher preloads into SGPRs:
        user SGPRs (kernel_code_properties), then system SGPRs (compute_pgm_rsrc2)."""
        sizes = dict(USER_SGPR_INPUTS)
        wanted = [(name, sizes[name]) for name in self.user_sgprs]
        preload = self.kernarg_preload & 0x7F
        if preload:
            wanted.append(("kernarg_preload", preload))
        system = (("workgroup_id_x", 7), ("workgroup_id_y", 8), ("workgroup_id_z", 9),
                  ("workgroup_info", 10), ("private_segment_wave_offset", 0))
        wanted += [(name, 1) for name, bit in system if self.compute_pgm_rsrc2 >> bit & 1]
        inputs, first = [], 0
        for name, count in wanted:
            inputs.append((name, first, count))
            first += count
        return tuple(inputs)


@attrs.frozen
class KernelInfo:
    """A kernel of a code object: metadata note plus kernel descriptor.

    `vgpr_count`/`sgpr_count`/`agpr_count` are what the metadata states (vendor code objects
    sometimes put the unified total in `vgpr_count`); `unified_vgpr_count` and `accum_offset`
    come from the descriptor and are what the hardware allocates.
    """

    name: str
    symbol: str
    args: tuple[KernelArg, ...]
    kernarg_size: int
    sgpr_count: int
    vgpr_count: int
    agpr_count: int
    accum_offset: int
    unified_vgpr_count: int
    group_segment_size: int
    private_segment_size: int
    wavefront_size: int
    max_flat_workgroup_size: int
    entry: int
    code_size: int  # bytes from the entry to the next kernel or the end of .text, filler included
    descriptor: KernelDescriptor
    metadata: dict = attrs.field(eq=False, hash=False, repr=False, factory=dict)

    @property
    def kernarg_layout(self) -> tuple[KernelArg, ...]:
        return self.args


Dim3 = tuple[int, int, int]


@attrs.frozen(eq=False)
class Launch:
    """One dispatch of a kernel, device-independent: geometry, the argument arrays and the
    kernarg segment with everything but the buffer addresses packed."""

    kernel: KernelInfo
    grid: Dim3                                      # workgroups per axis (HIP's gridDim)
    block: Dim3                                     # work-items per axis (HIP's blockDim)
    buffers: tuple[tuple[str, np.ndarray], ...]     # distinct argument arrays, in argument order
    pointers: tuple[tuple[int, int], ...]           # (kernarg offset, index into buffers)
    kernarg_image: bytes                            # by-value and hidden arguments packed
    # the linear ids (x fastest) of the workgroups run, when only part of the grid is: a
    # timing sample runs chosen workgroups of a launch with the launch's own ids and grid
    groups: tuple[int, ...] | None = None

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def workgroups(self) -> int:
        """Workgroups this launch runs (the whole grid unless `groups` names some)."""
        return len(self.groups) if self.groups is not None else \
            self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def waves_per_group(self) -> int:
        return -(-self.threads // isa.WAVE_SIZE)

    def kernarg(self, addresses: Sequence[int]) -> bytes:
        """The kernarg segment once buffer i lives at device address `addresses[i]`."""
        segment = bytearray(self.kernarg_image)
        for offset, index in self.pointers:
            segment[offset:offset + 8] = int(addresses[index]).to_bytes(8, "little")
        return bytes(segment)

    def dispatch_packet(self, kernarg_address: int) -> bytes:
        """The AQL kernel dispatch packet a `dispatch_ptr` user SGPR points at."""
        grid, block, info = self.grid, self.block, self.kernel
        sizes = [g * b for g, b in zip(grid, block)]
        dims = 3 if grid[2] * block[2] > 1 else (2 if grid[1] * block[1] > 1 else 1)
        return struct.pack("<HHHHHHIIIIIQQQQ", 0, dims, *block, 0, *sizes,
                           info.private_segment_size, info.group_segment_size, 0,
                           kernarg_address, 0, 0)


def kernel_text(*, name: str, body: str, args: Sequence[tuple[str, int, int, str]] = (),
                kernarg_bytes: int, lds_bytes: int, sgprs: int, vgprs: int, agprs: int = 0,
                grid_rank: int = 1, block: int) -> str:
    """The complete .s of kernel `name` running `body`: the code, its 64-byte kernel descriptor
    (`.amdhsa_kernel`) and the code-object metadata, with `args` as (name, offset, size,
    value_kind) and AGPRs after the VGPRs from the accum offset on. Argument names carry the
    `!str` tag: LLVM's YAML reads `N` or `y` as a boolean even when quoted."""
    # AGPRs start at the accum offset; the VGPR granule is 8 on gfx90a+ and the descriptor
    # rounds up itself, so next_free_vgpr is the arch count plus the AGPRs
    accum = max(ACCUM_OFFSET_GRANULE, -(-vgprs // ACCUM_OFFSET_GRANULE) * ACCUM_OFFSET_GRANULE)
    ids = "\n".join(f"  .amdhsa_system_sgpr_workgroup_id_{axis} 1"
                    for axis in "xyz"[:grid_rank])
    entries = [f"      - .name: !str {arg}\n        .offset: {offset}\n        .size: {size}\n"
               f"        .value_kind: {kind}" + ("\n        .address_space: global"
                                                 if kind == "global_buffer" else "")
               for arg, offset, size, kind in args]
    args_block = ("    .args:\n" + "\n".join(entries) + "\n") if entries else ""
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
  .amdhsa_next_free_vgpr {accum + agprs}
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
    .agpr_count: {agprs}
    .max_flat_workgroup_size: {block}
{args_block}...
.end_amdgpu_metadata
"""

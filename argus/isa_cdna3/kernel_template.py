"""Wrap a hand-written gfx942 kernel body into a complete, assemblable HSA kernel (the
descriptor and metadata text is `abi.kernel_text`'s, the one the backend emits too).

Used by the emulator's instruction tests and handy for experiments: the body sees the kernarg
pointer in s[0:1], the workgroup id x in s2 and the work-item id in v0.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from argus.isa_cdna3.abi import kernel_text

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
    args = [(spec.name, offset, spec.size, "global_buffer" if spec.kind == "ptr" else "by_value")
            for spec, offset in zip(specs, offsets)]
    return kernel_text(name=name, body=body, args=args, kernarg_bytes=kernarg_size,
                       lds_bytes=lds_bytes, sgprs=sgprs, vgprs=vgprs, agprs=agprs,
                       block=max_block)

"""The compile stage's product: `compile(ir, policy)` lowers a traced kernel and assembles it
into a `CompiledKernel`, one gfx942 code object for every size its assumptions admit, which
`run` launches on the emulator or through HIP (arguments bound by `asm.launch.bind`).
"""

from __future__ import annotations

import math
import time

import attrs
import numpy as np

from argus.asm import assemble
from argus.asm.hip import launch
from argus.asm.launch import bind, emulate
from argus.asm.lower import RegisterBudgetError, lower
from argus.ir import ops as O
from argus.ir.expr import evaluate
from argus.isa_cdna3.abi import LaunchError

DEVICES = ("emulator", "hip")


@attrs.frozen
class CompiledKernel:
    """A compiled kernel: one code object for every size its assumptions admit."""

    name: str
    params: dict
    ir: O.Kernel = attrs.field(repr=False)
    lowered: object = attrs.field(repr=False)          # argus.asm.lower.Lowered
    code: object = attrs.field(repr=False)             # argus.asm.CodeObject
    seconds: float = 0.0                               # lowering + assembling
    #: whether it was proved for every size before lowering (`compile(verify=False)` skips)
    verified: bool = False

    @property
    def text(self) -> str:
        return self.lowered.text

    @property
    def kernargs(self) -> tuple:
        """(name, kind "ptr"|"i32", offset, size) of each kernel argument."""
        return tuple((k.name, k.kind, k.offset, k.size) for k in self.lowered.kernargs)

    @property
    def block(self) -> int:
        return self.lowered.waves * 64

    def grid(self, **sizes) -> tuple[int, ...]:
        """Workgroups per axis for these sizes."""
        missing = [v.name for v in self.ir.sizes if v.name not in sizes]
        if missing:
            raise LaunchError(f"{self.name}: the grid needs the sizes {missing}")
        for var in self.ir.sizes + self.ir.scalars:
            value = sizes.get(var.name, var.lo)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or not var.lo <= value < var.hi:
                raise LaunchError(f"{self.name}: size {var.name}={value!r} is not a whole number "
                                  f"in its range [{var.lo}, {var.hi})")
        return tuple(int(evaluate(g, sizes)) for g in self.lowered.grid)

    @property
    def resources(self) -> dict:
        lo = self.lowered
        peak = lo.peak
        return {"sgprs": lo.sgprs, "vgprs": lo.vgprs, "agprs": lo.agprs, "lds_bytes": lo.lds_bytes,
                "waves_per_workgroup": lo.waves, "waves_per_simd": lo.occupancy,
                "occupancy_limited_by": lo.occupancy_limit,
                "vgpr_peak": None if peak is None else {
                    "live": peak.live, "at": str(peak.loc), "instruction": peak.instruction,
                    "held_by": [list(item) for item in peak.by_line]}}

    def run(self, *arrays, device: str = "emulator", check: str = "strict",
            memory: str = "strict", **named):
        """Launch on `device` with arrays by position or name and scalar arguments by name;
        outputs are written in place. Returns the emulator's `Emulation` (trace, timing) or the
        HIP launch record."""
        if not isinstance(device, str) or device not in DEVICES:
            raise LaunchError(f"device must be one of {DEVICES}, got {device!r}")
        bound = bind(self.ir, arrays, named)
        grid = self.grid(**bound.sizes, **bound.scalars)
        if math.prod(grid) == 0:
            raise LaunchError(f"{self.name}: the sizes {bound.sizes} give an empty grid {grid}")
        problem = self.lowered.check_spans(bound.sizes, bound.scalars)
        if problem:
            raise LaunchError(f"{self.name}: {problem}")
        if device == "hip":
            return launch(self.code, self.name, grid=grid, block=self.block,
                          args=bound.arguments)
        return emulate(self.code, self.name, grid=grid, block=self.block, args=bound.arguments,
                       check=check, memory=memory)


def compile(ir: O.Kernel, *, policy: str = "interleave", params: dict | None = None
            ) -> CompiledKernel:
    """Lower and assemble traced kernel `ir` (tile parameters `params` were fixed when it was
    traced, and are recorded; sizes are kernel arguments)."""
    start = time.perf_counter()
    try:
        lowered = lower(ir, policy)
    except RegisterBudgetError as err:
        shown = ", ".join(f"{k}={v}" for k, v in (params or {}).items()) or "default parameters"
        raise RegisterBudgetError(f"{ir.name} ({shown}; policy {policy}) does not fit: "
                                  f"{err.message}", err.loc, err.fix) from None
    code = assemble(lowered.text)
    return CompiledKernel(ir.name, dict(params or {}), ir, lowered, code,
                          time.perf_counter() - start)

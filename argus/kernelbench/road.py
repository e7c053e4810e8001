"""The one place the KernelBench harness meets the road (`argus.pipeline.road`, its time stage,
the verifier): compile a template kernel, launch it on the emulator, prove it for symbolic sizes,
model its time at given sizes. When the staged road lands, only this module changes.
"""

from __future__ import annotations

import functools

from argus.lang.kernel import KernelDef


@functools.lru_cache(maxsize=256)
def _compiled(kernel: KernelDef):
    from argus.pipeline import StageError, road

    try:
        return road(kernel, until="compile", skip=("verify", "interpret")).compiled
    except StageError as err:
        raise err.original from None


def compiled(kernel: KernelDef):
    """The gfx942 code object of `kernel` (cached per kernel object)."""
    return _compiled(kernel)


def launch(kernel: KernelDef, arrays: dict) -> None:
    """Run `kernel` on the strict emulator; `arrays` by argument name, outputs in place."""
    compiled(kernel).run(**arrays, check="strict")


def sizes_of(kernel: KernelDef, arrays: dict) -> dict[str, int]:
    """The kernel's symbolic sizes as `arrays` (anything with .shape, torch tensors included)
    bind them: `argus.ir.bind.sizes_of` over stand-ins of those shapes (no memory taken)."""
    import numpy as np

    from argus.ir.bind import sizes_of as bound_sizes

    stand_ins = {name: np.lib.stride_tricks.as_strided(np.zeros(1, np.float32),
                                                       tuple(array.shape), (0,) * len(array.shape))
                 for name, array in arrays.items()}
    return bound_sizes(compiled(kernel).ir, stand_ins)


def prove(kernel: KernelDef):
    """(verdict, detail): "proved", "refuted" or "unknown" for every size the kernel admits."""
    from argus.absint.verify import verify

    report = verify(kernel.trace())
    if report.refuted:
        return "refuted", str(report.refuted[0]).splitlines()[0]
    if report.unknown:
        return "unknown", str(report.unknown[0]).splitlines()[0]
    if not report.proved_for_all_sizes:
        return "unknown", report.summary()
    return "proved", report.summary()


def model_time(kernel: KernelDef, sizes: dict[str, int]) -> float:
    """Modelled MI300X microseconds of one launch at `sizes`."""
    from argus.pipeline import time

    return float(time(compiled(kernel), dict(sizes)).microseconds)


def loop_trips(kernel: KernelDef, sizes: dict[str, int]) -> tuple[tuple[int, ...], list[int]]:
    """The grid and every loop's trip count at `sizes` (to check that a scaled problem still
    runs every grid dimension and loop more than once). A loop whose start is the
    workgroup's (a pooled 3-D convolution's depths, split among workgroups) is counted in
    the first workgroup, which runs the most trips."""
    from argus.ir import ops as O
    from argus.ir.expr import evaluate

    c = compiled(kernel)
    first = {**sizes, **{f"wg{axis}": 0 for axis in range(3)}}
    trips = [-(-(int(evaluate(op.stop, first)) - int(evaluate(op.start, first))) // op.step)
             for op in c.ir.ops() if isinstance(op, O.For)]
    return c.grid(**sizes), trips

"""Argus: verified, search-tuned AMD CDNA3 (gfx942) GPU kernels.

`argus.verify(kernel, **sizes)` proves a DSL kernel's tag assertions and built-in checks;
`argus.compile(kernel, **params)` lowers it to a gfx942 code object (`CompiledKernel.run`
launches it). The packages below hold the layers (see DESIGN.md): ir, lang, absint, smt,
isa_cdna3, asm, kernels, vendor; `argus.pipeline.road` is the road through them
(trace -> verify -> interpret -> compile -> emulate -> time), and each call here takes it.

The road on a small kernel that copies 16-row blocks, each workgroup its own block:

>>> import numpy as np
>>> import argus
>>> import argus.lang as T
>>> from argus.ir.expr import And
>>> @T.kernel(waves=1)
... def copy_rows(X: T.Tensor("f32", "N", 64), Y: T.Tensor("f32", "N", 64)):
...     T.assume((X.shape[0] % 16).eq(0))
...     T.grid(X.shape[0] // 16)
...     row = T.program_id(0) * 16
...     T.tag(X, lambda r, c: {"row": r, "col": c})
...     T.tag(Y, lambda r, c: {"row": r, "col": c})
...     Y.store((row, 0), X.load((row, 0), T.copy_layout((16, 64), 1, 4)))
...     T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.col.eq(D.col)), "rows stay in place")
>>> print(argus.verify(copy_rows))
Verified copy_rows: all 7 obligations proved, covering every workgroup of the grid (N >> 4) ...
>>> X = np.arange(32 * 64, dtype=np.float32).reshape(32, 64)
>>> result = argus.interpret(copy_rows, {"X": X, "Y": np.zeros_like(X)})
>>> bool((result.outputs["Y"] == X).all()), result.sizes
(True, {'N': 32})
>>> compiled = argus.compile(copy_rows)
>>> Y = np.zeros_like(X)
>>> compiled.run(X, Y).workgroups        # on the emulator: there is no GPU here
2
>>> bool((Y == X).all())
True
>>> timing = argus.time(compiled, sizes={"N": 4096})     # modelled, not measured
>>> timing.workgroups, timing.microseconds > 0
(256, True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from argus.errors import ArgusError

if TYPE_CHECKING:
    import numpy as np

    from argus.absint.concrete import RunResult
    from argus.absint.report import Report
    from argus.ir.ops import Kernel
    from argus.isa_cdna3.perf.estimate import Timing
    from argus.lang.kernel import KernelDef
    from argus.pipeline import CompiledKernel

__version__ = "0.1.0"

__all__ = ["ArgusError", "compile", "interpret", "time", "verify"]


def verify(kernel: KernelDef | Kernel | str, **options: Any) -> Report:
    """Prove every obligation of `kernel` (a DSL kernel, traced IR, or library name); see
    `argus.absint.verify.verify` for the options (sizes, solver, timeout_ms, replay)."""
    from argus.absint.verify import verify as run
    from argus.kernels.resolve import as_kernel

    return run(as_kernel(kernel, "verify"), **options)


def compile(kernel: KernelDef | Kernel | str, **options: Any) -> CompiledKernel:
    """Prove a DSL kernel (traced IR, or library name), then lower it with tile parameters to
    a gfx942 code object (`CompiledKernel`), by the road's trace, verify and compile stages.
    A refuted or unknown obligation stops it (`VerifyError`); `verify=False` skips the proof
    (without `verify=`, ARGUS_COMPILE_VERIFY decides: on unless 0), and
    `CompiledKernel.verified` says which. `policy=` schedules; the other options are tile
    parameters. Compilations are cached by the traced IR's digest."""
    import attrs

    from argus import env
    from argus.absint.verify import VerifyError
    from argus.kernels.resolve import as_kernel
    from argus.pipeline import StageError, road

    prove = options.pop("verify", None)
    if prove is None:
        prove = env.compile_verifies()
    try:
        compiled = road(as_kernel(kernel, "compile"), until="compile",
                        skip=("interpret",) if prove else ("verify", "interpret"),
                        **options).compiled
    except StageError as err:
        if err.stage == "verify" and err.outcome in ("refuted", "unknown"):
            raise VerifyError(f"{err.message}: the kernel is not proved for every size, and the "
                              "backend lowers verified kernels only", err.loc,
                              fix="fix the kernel (argus verify shows the counterexample), or "
                                  "pass verify=False to compile it unproved") from None
        raise err.original from None
    assert compiled is not None
    return compiled if compiled.verified == bool(prove) else attrs.evolve(compiled,
                                                                          verified=bool(prove))


def time(code_object: Any, kernel: str | None = None, **options: Any) -> Timing:
    """Modelled MI300X time of a launch (`Timing`); see `argus.timing.time` for the options
    (grid, block, args or sizes, gpu). Every figure it gives is modelled, not measured."""
    from argus.timing import time as model

    return model(code_object, kernel, **options)


def interpret(kernel: KernelDef | Kernel | str, arrays: dict[str, np.ndarray],
              **params: Any) -> RunResult:
    """Run `kernel` (a DSL kernel, traced IR, or library name) on numpy `arrays` (one per tensor
    argument, by name) in the concrete reference interpreter; sizes come from the array shapes.
    Returns `RunResult(outputs, violations, sizes)`: the outputs are updated copies."""
    from argus.absint.concrete import run
    from argus.kernels.resolve import as_kernel

    resolved = as_kernel(kernel, "interpret")
    ir: Kernel = resolved.trace(**params) if hasattr(resolved, "trace") else resolved
    return run(ir, arrays)

"""Argus: verified, search-tuned AMD CDNA3 (gfx942) GPU kernels.

`argus.verify(kernel, **sizes)` proves a DSL kernel's tag assertions and built-in checks;
`argus.compile(kernel, **params)` lowers it to a gfx942 code object (`CompiledKernel.run`
launches it). The packages below hold the layers (see DESIGN.md): ir, lang, absint, smt,
isa_cdna3, asm, kernels, vendor; `argus.pipeline.road` is the road through them
(trace -> verify -> interpret -> compile -> emulate -> time), and each call here takes it.
"""

__version__ = "0.1.0"


def verify(kernel, **options):
    """Prove every obligation of `kernel` (a DSL kernel, traced IR, or library name); see
    `argus.absint.verify.verify` for the options (sizes, solver, timeout_ms, replay)."""
    from argus.absint.verify import verify as run
    from argus.kernels.resolve import as_kernel

    return run(as_kernel(kernel, "verify"), **options)


def compile(kernel, **options):
    """Lower a DSL kernel (traced IR, or library name) with tile parameters to a gfx942 code
    object (`CompiledKernel`), by the road's trace and compile stages: `policy=` schedules,
    `verify=True` proves it first (a refuted or unknown obligation is a StageError), the other
    options are tile parameters. Compilations are cached by the traced IR's digest."""
    from argus.kernels.resolve import as_kernel
    from argus.pipeline import StageError, road

    prove = options.pop("verify", False)
    try:
        return road(as_kernel(kernel, "compile"), until="compile",
                    skip=("interpret",) if prove else ("verify", "interpret"), **options).compiled
    except StageError as err:
        raise err.original from None


def time(code_object, kernel=None, **options):
    """Modelled MI300X time of a launch (`Timing`); see `argus.timing.time` for the options
    (grid, block, args or sizes, gpu). Every figure it gives is modelled, not measured."""
    from argus.timing import time as model

    return model(code_object, kernel, **options)


def interpret(kernel, arrays: dict, **params):
    """Run `kernel` (a DSL kernel, traced IR, or library name) on numpy `arrays` (one per tensor
    argument, by name) in the concrete reference interpreter; sizes come from the array shapes.
    Returns `RunResult(outputs, violations, sizes)`: the outputs are updated copies."""
    from argus.absint.concrete import run
    from argus.kernels.resolve import as_kernel

    kernel = as_kernel(kernel, "interpret")
    ir = kernel.trace(**params) if hasattr(kernel, "trace") else kernel
    return run(ir, arrays)

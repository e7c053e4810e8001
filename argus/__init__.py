"""Argus: verified, search-tuned AMD CDNA3 (gfx942) GPU kernels.

`argus.verify(kernel, **sizes)` proves a DSL kernel's tag assertions and built-in checks; the
packages below hold the layers (see DESIGN.md): ir, lang, absint, smt, isa_cdna3, asm, kernels.
"""

__version__ = "0.1.0"


def verify(kernel, **options):
    """Prove every obligation of `kernel` (a DSL kernel, traced IR, or library name); see
    `argus.absint.verify.verify` for the options (sizes, solver, timeout_ms, replay)."""
    from argus.absint.verify import verify as run
    from argus.pipeline import resolve_kernel

    return run(resolve_kernel(kernel) if isinstance(kernel, str) else kernel, **options)

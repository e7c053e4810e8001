"""Programs under test: a traced kernel plus the Python source that rebuilds it (what a failing
check prints as the reproducer), the problem sizes to run it at and the interpreter's inputs.
`tile_programs(family=...)` draws valid variants of a library family across its parameter
space; `as_program` wraps any `@kernel`, traced IR kernel or Program."""

from __future__ import annotations

import inspect
import itertools
import math
import sys
from collections.abc import Callable

import attrs
from hypothesis import strategies as st

from argus.ir import ops as O
from argus.ir.expr import evaluate
from argus.ir.sizes import admits
from argus.ir.text import print_kernel
from argus.lang.kernel import KernelDef
from argus.testing.families import FAMILIES

__all__ = ["Program", "tile_programs", "family_program", "as_program", "kernel_sizes",
           "oracle_sizes"]

#: Candidate extents for a size no family describes (smallest first: shrinking goes there).
EXTENTS = (1, 2, 4, 8, 16, 32, 64, 128, 96, 192, 256)


@attrs.frozen(eq=False, repr=False)
class Program:
    """A kernel under test. `source` is Python that defines KERNEL (the reproducer's body);
    `sizes` draws problem sizes for the interpreter, `oracle` lists a few fixed ones (where the
    interpreter decides whether a mutant is a real defect); `inputs(sizes)` gives the
    interpreter's arrays (None: zeros of each tensor's shape)."""

    kernel: O.Kernel
    source: str
    name: str
    sizes: st.SearchStrategy
    oracle: tuple[dict, ...]
    inputs: Callable[[dict], dict] | None = None

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__


def tile_programs(family: str = "ring_gemm", **fixed) -> st.SearchStrategy:
    """Valid variants of kernel family `family` (one of FAMILIES), each parameter drawn from its
    space unless given in `fixed`; shrinks towards the family's first (smallest) choices."""
    if family not in FAMILIES:
        raise KeyError(f"no kernel family {family!r}; choose one of {sorted(FAMILIES)}")
    spec = FAMILIES[family]
    unknown = set(fixed) - set(spec.space)
    if unknown:
        raise KeyError(f"family {family} has no parameter(s) {sorted(unknown)}; it takes "
                       f"{sorted(spec.space)}")
    choices = {k: st.just(fixed[k]) if k in fixed else st.sampled_from(v)
               for k, v in spec.space.items()}
    return st.fixed_dictionaries(choices).filter(spec.valid).map(
        lambda params: family_program(family, params))


def family_program(family: str, params: dict) -> Program:
    """Variant `params` of `family` as a Program."""
    spec = FAMILIES[family]
    params = {k: params[k] for k in spec.space if k in params}
    shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
    inputs = None if spec.inputs is None else (lambda sizes: spec.inputs(params, sizes))
    return Program(spec.trace(params), spec.source(params), f"{family}({shown})",
                   spec.sizes(params), tuple(spec.oracle(params)), inputs)


def as_program(kernel, **params) -> Program:
    """A Program for an `@kernel` (traced with `params`), a traced IR kernel or a Program."""
    if isinstance(kernel, Program):
        return kernel
    if isinstance(kernel, KernelDef):
        ir = kernel.trace(**params)
        return Program(ir, _kernel_def_source(kernel, params), ir.name, kernel_sizes(ir),
                       oracle_sizes(ir))
    if isinstance(kernel, O.Kernel):
        source = ("from argus.ir.text import parse_kernel\n\n"
                  f"KERNEL = parse_kernel('''\\\n{print_kernel(kernel)}''')\n")
        return Program(kernel, source, kernel.name, kernel_sizes(kernel), oracle_sizes(kernel))
    raise TypeError(f"expected an @kernel, a traced kernel or a Program, got "
                    f"{type(kernel).__name__}")


def _kernel_def_source(kernel: KernelDef, params: dict) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in params.items())
    module = sys.modules.get(kernel.fn.__module__)
    if (module is not None and getattr(module, kernel.name, None) is kernel
            and kernel.fn.__module__.startswith("argus.")):
        return (f"from {kernel.fn.__module__} import {kernel.name}\n\n"
                f"KERNEL = {kernel.name}.trace({args})\n")
    path = inspect.getsourcefile(kernel.fn)
    return ("from argus.kernels.resolve import resolve_kernel\n\n"
            f"KERNEL = resolve_kernel({f'{path}:{kernel.name}'!r}).trace({args})\n")


def kernel_sizes(kernel: O.Kernel) -> st.SearchStrategy:
    """Problem sizes for `kernel`: each size from EXTENTS (within its range), keeping those
    where every `T.assume` holds and the grid is not empty."""
    single, fits = _candidates(kernel)
    return st.fixed_dictionaries({k: st.sampled_from(v) for k, v in single.items()}).filter(fits)


def oracle_sizes(kernel: O.Kernel, count: int = 2, limit: int = 4096) -> tuple[dict, ...]:
    """The `count` fitting sizes (as `kernel_sizes` draws them) with the most workgroups,
    among the first `limit` combinations of the smallest extents."""
    single, fits = _candidates(kernel)
    names = list(single)
    found = []
    for values in itertools.islice(itertools.product(*(single[n][:4] for n in names)), limit):
        sizes = dict(zip(names, values))
        if fits(sizes):
            found.append(sizes)

    def rank(sizes):
        workgroups = math.prod(int(evaluate(g, sizes)) for g in kernel.grid)
        return -min(workgroups, 4), sum(sizes.values())

    return tuple(sorted(found, key=rank)[:count])


def _candidates(kernel: O.Kernel):
    """Extents per size that pass the assumptions on that size alone, and the joint test."""
    single = {v.name: [n for n in EXTENTS if v.lo <= n < v.hi] for v in kernel.sizes}
    # the assumptions on one size alone (`admits` decides those over the sizes given)
    single = {name: [n for n in extents if admits(kernel, {name: n})]
              for name, extents in single.items()}
    empty = [name for name, values in single.items() if not values]
    if empty:
        raise ValueError(f"kernel {kernel.name}: no extent in {EXTENTS} satisfies the "
                         f"assumptions on {empty}; pass sizes=... explicitly")

    def fits(sizes) -> bool:
        return admits(kernel, sizes) and all(int(evaluate(g, sizes)) > 0 for g in kernel.grid)

    return single, fits

"""Which concrete sizes a kernel admits: the one check every caller makes before running,
verifying, compiling, timing or sampling a kernel at some sizes. A size is a whole number inside
the range its variable declares, and every `T.assume` over the sizes given holds at them.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

from argus.ir.expr import Expr, Var, evaluate, free_vars
from argus.ir.types import IRError

if TYPE_CHECKING:
    from argus.ir.ops import Kernel


def holds_at(condition: Expr, sizes: dict) -> bool:
    """Whether `condition` holds at `sizes`; one that cannot be evaluated there (a division by
    zero, a name `sizes` lacks) does not."""
    try:
        return bool(evaluate(condition, sizes))
    except (KeyError, ZeroDivisionError, ValueError):
        return False


def broken_assumption(kernel: Kernel, sizes: dict) -> Expr | None:
    """The first assumption of `kernel` over names all in `sizes` that fails there (None when
    every such assumption holds). An assumption naming a size not given is not decided here:
    a caller that has every size gives them all."""
    for assumption in kernel.assumes:
        names = {v.name for v in free_vars(assumption)}
        if names <= sizes.keys() and not holds_at(assumption, sizes):
            return assumption
    return None


def admits(kernel: Kernel, sizes: dict) -> bool:
    """Whether the kernel's assumptions over the sizes given hold at them (see
    `broken_assumption`); `admits(kernel, {"K": 48})` tests the assumptions on K alone."""
    return broken_assumption(kernel, sizes) is None


def size_value(kernel: Kernel, var: Var, value, *, error: type = IRError) -> int:
    """A given size as an int inside the range the kernel declares for it, else `error` (never
    a silent int(2.5) or a size no thread can run at)."""
    try:
        if isinstance(value, bool):
            raise TypeError(value)
        value = operator.index(value)  # a numpy array has __index__ but is no whole number
    except TypeError:
        raise error(f"{var.name}={value!r}: a size of kernel {kernel.name} is a whole number",
                    fix=f"give {var.name} an int, e.g. {var.name}={max(var.lo, 64)}") from None
    if not var.lo <= value < var.hi:
        raise error(f"{var.name}={value} is outside the range [{var.lo}, {var.hi}) kernel "
                    f"{kernel.name} declares for it, so no thread could run at that size",
                    fix=f"give {var.name} a value in [{var.lo}, {var.hi})")
    return value


def check_assumptions(kernel: Kernel, sizes: dict, *, error: type = IRError,
                      context: str = ""):
    """Raise `error` naming the first assumption the sizes break (`broken_assumption`);
    `context` says what the sizes were for ("compiled for ...")."""
    broken = broken_assumption(kernel, sizes)
    if broken is not None:
        named = {v.name for v in free_vars(broken)}
        given = ", ".join(f"{k}={sizes[k]}" for k in sizes if k in named)
        raise error(f"{given} violates the assumption `{broken}` of kernel {kernel.name}"
                    + (f" ({context})" if context else ""), loc=kernel.loc,
                    fix="pick sizes that satisfy the kernel's T.assume statements")


def checked_sizes(kernel: Kernel, given: dict, defaults: dict | None = None, *,
                  error: type = IRError) -> dict:
    """Concrete sizes for a run of `kernel`: the `given` ones (sizes or scalars of the kernel)
    validated by `size_value`, merged over `defaults`, and the kernel's assumptions holding at
    them; `error` is the caller's error class."""
    names = {v.name: v for v in kernel.sizes + kernel.scalars}
    unknown = set(given) - names.keys()
    if unknown:
        raise error(f"kernel {kernel.name} has no size {sorted(unknown)}; its sizes are "
                    f"{sorted(names)}", loc=kernel.loc)
    sizes = {**(defaults or {}),
             **{k: size_value(kernel, names[k], v, error=error) for k, v in given.items()}}
    check_assumptions(kernel, {k: v for k, v in sizes.items() if k in names}, error=error)
    return sizes


__all__ = ["admits", "broken_assumption", "check_assumptions", "checked_sizes", "holds_at",
           "size_value"]

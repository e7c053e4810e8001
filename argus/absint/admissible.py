"""What a proof must cover before it counts: pinned sizes are whole numbers inside their
declared ranges that satisfy the kernel's assumptions, some size satisfies the assumptions, and
the grid has a workgroup. Otherwise every obligation would hold vacuously and the report would
say Verified about nothing. Also the report's statement of the workgroups and threads covered.
"""

from __future__ import annotations

import math
import operator

from argus.absint.domain import FALSE
from argus.absint.obligations import holds_at
from argus.absint.report import VerifyError
from argus.ir import ops as O
from argus.ir.expr import Const, Var, free_vars, simplify
from argus.ir.expr import substitute as subst
from argus.ir.types import LANES


def size_value(ir: O.Kernel, var: Var, value) -> int:
    """A pinned size as an int inside the range the kernel declares for it, else an error
    (never a silent int(2.5) or a pin no thread can run at)."""
    try:
        if isinstance(value, bool):
            raise TypeError(value)
        value = operator.index(value)  # a numpy array has __index__ but is no whole number
    except TypeError:
        raise VerifyError(f"{var.name}={value!r}: a size of kernel {ir.name} is a whole number",
                          fix=f"give {var.name} an int, e.g. {var.name}={max(var.lo, 64)}"
                          ) from None
    if not var.lo <= value < var.hi:
        raise VerifyError(f"{var.name}={value} is outside the range [{var.lo}, {var.hi}) kernel "
                          f"{ir.name} declares for it, so no thread could run at that size",
                          fix=f"give {var.name} a value in [{var.lo}, {var.hi})")
    return value


def checked_sizes(ir: O.Kernel, given: dict, defaults: dict | None = None) -> dict:
    """Concrete sizes for a run of `ir`: the `given` ones validated like verify's pins (whole
    numbers in range), merged over `defaults`, and the kernel's assumptions holding at them."""
    sizes = {v.name: v for v in ir.sizes + ir.scalars}
    unknown = set(given) - sizes.keys()
    if unknown:
        raise VerifyError(f"kernel {ir.name} has no size {sorted(unknown)}; its sizes are "
                          f"{sorted(sizes)}")
    pins = {**(defaults or {}), **{k: size_value(ir, sizes[k], v) for k, v in given.items()}}
    _check_assumptions(ir, {k: v for k, v in pins.items() if k in sizes})
    return pins


def _check_assumptions(ir: O.Kernel, pins: dict):
    pinned = ", ".join(f"{k}={v}" for k, v in pins.items())
    for assume in ir.assumes:
        if {v.name for v in free_vars(assume)} <= pins.keys() and not holds_at(assume, pins):
            raise VerifyError(
                f"{pinned} violates the assumption `{assume}` of kernel {ir.name}",
                loc=ir.loc, fix="pick sizes that satisfy the kernel's T.assume statements")


def check_admissible(verifier, ir: O.Kernel, pins: dict):
    """Refuse to verify where nothing would run: pinned sizes that break one of the kernel's
    assumptions, assumptions no size satisfies, a grid empty at every admitted size. Each
    would make every obligation hold vacuously, and the report would say Verified."""
    pinned = ", ".join(f"{k}={v}" for k, v in pins.items())
    _check_assumptions(ir, pins)
    # without a bounded run's trip bounds: check_bounded_sizes explains those
    assumes = verifier.assumes[:len(verifier.assumes) - len(verifier.trip_bounds)]
    if verifier.holds(FALSE, assumes):
        stated = "; ".join(f"`{a}`" for a in ir.assumes) or "none"
        raise VerifyError(
            f"no size satisfies the assumptions of kernel {ir.name}"
            f"{f' with {pinned}' if pins else ''} (stated: {stated}; each size within its "
            "declared range): every obligation would hold vacuously, so nothing is proved",
            loc=ir.loc, fix="remove the contradictory T.assume, or pin other sizes")
    if verifier.holds(FALSE, assumes + [g >= 1 for g in ir.grid]):
        raise VerifyError(
            f"the grid ({', '.join(map(str, ir.grid))}) of kernel {ir.name} has no workgroup at "
            f"{f'{pinned}' if pins else 'any size its assumptions admit'}: no thread runs, so "
            "nothing would be proved", loc=ir.loc,
            fix="give every grid dimension an extent >= 1 (or pin sizes where it has one)")


def coverage(ir: O.Kernel, pins: dict) -> str:
    """What the proof covers: the workgroups and threads, counted when the sizes are pinned."""
    threads = ir.waves * LANES
    extents = [simplify(subst(g, {k: Const(v) for k, v in pins.items()})) for g in ir.grid]
    if all(isinstance(g, Const) for g in extents):
        groups = math.prod(g.value for g in extents)
        shape = " x ".join(str(g.value) for g in extents)
        return (f"{groups} workgroups ({shape}) of {threads} threads, {groups * threads} "
                "threads in all")
    return (f"every workgroup of the grid ({', '.join(map(str, extents))}) with {threads} "
            "threads each, for every size the kernel's assumptions admit")

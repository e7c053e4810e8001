"""What a proof must cover before it counts: pinned sizes are whole numbers inside their
declared ranges that satisfy the kernel's assumptions (`argus.ir.sizes`, the check every
caller makes), some size satisfies the assumptions, and the grid has a workgroup. Otherwise
every obligation would hold vacuously and the report would say Verified about nothing. Also
the report's statement of the workgroups and threads covered.
"""

from __future__ import annotations

import math

from argus.absint.domain import FALSE
from argus.absint.report import VerifyError
from argus.ir import ops as O
from argus.ir.expr import Const, simplify
from argus.ir.expr import substitute as subst
from argus.ir.sizes import check_assumptions
from argus.ir.types import LANES


def check_admissible(verifier, ir: O.Kernel, pins: dict):
    """Refuse to verify where nothing would run: pinned sizes that break one of the kernel's
    assumptions, assumptions no size satisfies, a grid empty at every admitted size. Each
    would make every obligation hold vacuously, and the report would say Verified."""
    pinned = ", ".join(f"{k}={v}" for k, v in pins.items())
    check_assumptions(ir, pins, error=VerifyError)
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

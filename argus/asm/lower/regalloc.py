"""Register allocation: linear scan over the SGPR and VGPR files with aligned tuples.

A virtual register lives from its first to its last reference in layout order; one that is live
on entry to a loop (defined before, referenced inside) stays live to the loop's end, which also
covers loop-carried values. No spilling: a program that needs more than a register file holds is
a `RegisterBudgetError` naming the program point (DSL line) and the values live there.
"""

from __future__ import annotations

import attrs

from argus.asm.lower.exprgen import LoweringError
from argus.asm.lower.program import IfElse, Loop, MInst, Skip, VReg, ref
from argus.isa_cdna3 import isa

#: Registers a kernel may allocate per class: SGPRs below VCC, architectural VGPRs.
LIMITS = {"s": isa.SGPRS, "v": isa.ARCH_VGPRS}


class RegisterBudgetError(LoweringError):
    """The program needs more registers of one file than gfx942 gives a wave."""


@attrs.frozen
class Allocation:
    """Registers used per class (one past the highest index)."""

    sgprs: int
    vgprs: int


def _positions(items, out: list, loops: list) -> None:
    for item in items:
        if isinstance(item, Loop):
            first = len(out)
            _positions(item.body, out, loops)
            loops.append((first, len(out) - 1))
        elif isinstance(item, Skip):
            _positions(item.body, out, loops)
        elif isinstance(item, IfElse):
            for arm in item.arms:          # laid out one after the other: intervals cover both
                _positions(arm, out, loops)
        elif isinstance(item, MInst):
            out.append(item)


def intervals(items) -> tuple[list[MInst], dict[VReg, list[int]]]:
    """Instructions in layout order and each virtual register's [start, end] positions."""
    order: list[MInst] = []
    loops: list[tuple[int, int]] = []
    _positions(items, order, loops)
    span: dict[VReg, list[int]] = {}
    for pos, inst in enumerate(order):
        for operand in inst.operands:
            if isinstance(operand, VReg) or hasattr(operand, "reg"):
                reg = ref(operand).reg
                if reg in span:
                    span[reg][1] = pos
                else:
                    span[reg] = [0 if reg.phys is not None else pos, pos]
    changed = True
    while changed:
        changed = False
        for first, last in loops:
            for s in span.values():
                if s[0] < first <= s[1] < last:
                    s[1] = last
                    changed = True
    return order, span


def allocate(items) -> Allocation:
    """Give every VReg of the program a physical index (in place)."""
    order, span = intervals(items)
    used = {"s": 0, "v": 0}
    for cls in ("s", "v"):
        regs = sorted((r for r in span if r.cls == cls),
                      key=lambda r: (span[r][0], r.phys is None, r.serial))
        free = [True] * LIMITS[cls]
        active: list[VReg] = []
        for reg in regs:
            start = span[reg][0]
            for other in list(active):
                if span[other][1] < start:
                    active.remove(other)
                    for i in range(other.phys, other.phys + other.size):
                        free[i] = True
            if reg.phys is None:
                reg.phys = _find(free, reg.size, reg.align)
                if reg.phys is None:
                    raise _budget_error(cls, reg, start, order, span, active)
            for i in range(reg.phys, reg.phys + reg.size):
                free[i] = False
            active.append(reg)
            used[cls] = max(used[cls], reg.phys + reg.size)
    return Allocation(used["s"], used["v"])


def _find(free: list[bool], size: int, align: int) -> int | None:
    for base in range(0, len(free) - size + 1, max(align, 1)):
        if all(free[base:base + size]):
            return base
    return None


def _budget_error(cls, reg, position, order, span, active) -> RegisterBudgetError:
    inst = order[position]
    live = sorted(active + [reg], key=lambda r: (-r.size, r.serial))
    total = sum(r.size for r in live)
    names = ", ".join(f"%{r.name or r.serial} ({r.size})" for r in live[:8])
    more = f" and {len(live) - 8} more" if len(live) > 8 else ""
    file = {"s": "SGPRs", "v": "VGPRs"}[cls]
    return RegisterBudgetError(
        f"the kernel needs more than the {LIMITS[cls]} {file} a gfx942 wave has: {total} are "
        f"live at `{inst.text()}`; live there, largest first: {names}{more}", inst.loc,
        "use smaller tiles (block_m, block_n, block_k) or fewer accumulators per wave")

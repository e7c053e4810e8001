"""Register allocation: linear scan over the SGPR and VGPR files with aligned tuples.

A virtual register lives from its first to its last reference in layout order; one that is live
on entry to a loop (defined before, referenced inside) stays live to the loop's end, which also
covers loop-carried values. No spilling: a program that needs more than a register file holds is
a `RegisterBudgetError` naming the program point (DSL line), the registers live there and the DSL
lines that defined the largest of them. Every allocation also reports its VGPR peak (`Peak`):
where the most registers are live, which is what to shrink for a better occupancy.
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
class Peak:
    """The program point with the most registers of one file live: how many, the instruction
    and its DSL line, and the DSL lines whose values are live there (line, registers), most
    registers first."""

    live: int
    instruction: str
    loc: object
    by_line: tuple[tuple[str, int], ...]
    largest: tuple[tuple[str, int], ...] = ()       # (value, registers), largest first

    def describe(self, lines: int = 3) -> str:
        where = f"{self.loc}" if self.loc is not None else "entry code"
        held = ", ".join(f"{line} ({count})" for line, count in self.by_line[:lines])
        return (f"{self.live} live at {where} (`{self.instruction}`); held by values from "
                f"{held}")


@attrs.frozen
class Allocation:
    """Registers used per class (one past the highest index) and the VGPR peak."""

    sgprs: int
    vgprs: int
    peak: Peak | None = None


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
                    raise _budget_error(cls, reg, order, span)
            for i in range(reg.phys, reg.phys + reg.size):
                free[i] = False
            active.append(reg)
            used[cls] = max(used[cls], reg.phys + reg.size)
    return Allocation(used["s"], used["v"], peak(order, span, "v"))


def _find(free: list[bool], size: int, align: int) -> int | None:
    for base in range(0, len(free) - size + 1, max(align, 1)):
        if all(free[base:base + size]):
            return base
    return None


def peak(order: list[MInst], span: dict[VReg, list[int]], cls: str,
         at: int | None = None) -> Peak | None:
    """The registers of class `cls` live at position `at` (default: where the most are)."""
    regs = [r for r in span if r.cls == cls]
    if not regs or not order:
        return None
    if at is None:
        change = [0] * (len(order) + 1)
        for r in regs:
            change[span[r][0]] += r.size
            change[span[r][1] + 1] -= r.size
        running, best = 0, (-1, 0)
        for pos in range(len(order)):
            running += change[pos]
            best = max(best, (running, -pos))
        at = -best[1]
    live = [r for r in regs if span[r][0] <= at <= span[r][1]]
    lines: dict[str, int] = {}
    for r in live:
        loc = order[span[r][0]].loc
        line = f"{loc.file}:{loc.line}" if loc is not None else "entry code"
        lines[line] = lines.get(line, 0) + r.size
    by_line = tuple(sorted(lines.items(), key=lambda kv: -kv[1]))
    largest = tuple((f"%{r.name or r.serial}", r.size)
                    for r in sorted(live, key=lambda r: (-r.size, r.serial))[:4])
    inst = order[at]
    return Peak(sum(r.size for r in live), inst.text(), inst.loc, by_line, largest)


def _budget_error(cls, reg, order, span) -> RegisterBudgetError:
    at = span[reg][0]
    where = peak(order, span, cls, at)
    file = {"s": "SGPRs", "v": "VGPRs"}[cls]
    limit = {"s": f"the {LIMITS['s']} SGPRs", "v": f"the {LIMITS['v']} architectural VGPRs "
             "(the unified file's other half holds AGPRs, which this backend does not "
             "allocate)"}[cls]
    return RegisterBudgetError(
        f"the kernel needs more than {limit} a gfx942 wave has: {where.live} {file} are live at "
        f"`{where.instruction}`; they hold values from "
        + ", ".join(f"{line} ({count})" for line, count in where.by_line[:4])
        + (f" and {len(where.by_line) - 4} more lines" if len(where.by_line) > 4 else "")
        + "; largest first: " + ", ".join(f"{name} ({size})" for name, size in where.largest),
        order[at].loc,
        f"shrink what the first lines keep live ({where.by_line[0][0]} holds "
        f"{where.by_line[0][1]}): smaller tiles (fewer rows per wave, a smaller block or head "
        "dimension) or fewer accumulators per wave")

"""Scheduling inside the software pipeline the IR describes. `simple` keeps program order.
`interleave` (with the loop unrolled by its `stages` in isel, so every buffer slot is a constant)
moves each LDS read up to just after the instructions it depends on, but not above the global
loads that open the region: the reads of every MFMA step of a region are in flight together, the
MFMAs wait for them one by one (`s_waitcnt lgkmcnt(n)`, as late as possible) and the next tile's
global loads are issued first.
"""

from __future__ import annotations

from argus.asm.lower.program import IfElse, Loop, MInst, Skip

#: Instructions a region of straight-line code ends at (nothing moves across them).
BOUNDARIES = ("s_barrier", "s_cbranch", "s_branch", "s_cmp", "s_endpgm", "s_waitcnt")


def schedule(items: list, policy: str) -> None:
    """Reorder straight-line runs of `items` in place according to `policy`."""
    if policy == "simple":
        return
    out, region = [], []
    for item in items:
        if isinstance(item, MInst) and not item.opcode.startswith(BOUNDARIES):
            region.append(item)
            continue
        out.extend(_hoist_lds_reads(region))
        region = []
        if isinstance(item, Loop | Skip):
            schedule(item.body, policy)
        elif isinstance(item, IfElse):
            for arm in item.arms:
                schedule(arm, policy)
        out.append(item)
    out.extend(_hoist_lds_reads(region))
    items[:] = out


def _regs(refs) -> set:
    return {r.reg for r in refs}


def _hoist_lds_reads(region: list[MInst]) -> list[MInst]:
    out: list[MInst] = []
    # registers each instruction writes and reads, and whether it pins later reads below it
    facts = {id(inst): (_regs(inst.defs), _regs(inst.uses),
                        inst.opcode.startswith(("ds_", "buffer_load"))) for inst in region}
    for inst in region:
        if not inst.opcode.startswith("ds_read"):
            out.append(inst)
            continue
        defs, uses, _ = facts[id(inst)]
        touched = uses | defs
        at = 0
        for index in range(len(out) - 1, -1, -1):
            earlier_defs, earlier_uses, pins = facts[id(out[index])]
            if pins or earlier_defs & touched or earlier_uses & defs:
                at = index + 1
                break
        out.insert(at, inst)
    return out

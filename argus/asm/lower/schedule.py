"""Scheduling inside the software pipeline the IR describes. `simple` keeps program order.
`interleave` (with the loop unrolled by its `stages` in isel, so every buffer slot is a constant)
moves each LDS read up to just after the instructions it depends on, but not above the global
loads that open the region: the reads of every MFMA step of a region are in flight together, the
MFMAs wait for them one by one (`s_waitcnt lgkmcnt(n)`, as late as possible) and the next tile's
global loads are issued first.
"""

from __future__ import annotations

from argus.asm.lower.program import IfElse, Loop, MInst, Ref, Skip, VReg
from argus.isa_cdna3 import opcodes

#: Instructions a region of straight-line code ends at (nothing moves across them).
BOUNDARIES = ("s_barrier", "s_cbranch", "s_branch", "s_cmp", "s_endpgm", "s_waitcnt")


def schedule(items: list, policy: str, window: int | None = None) -> None:
    """Reorder straight-line runs of `items` in place according to `policy`; `window` is the
    filler window (`FILL_WINDOW` unless a loop's hint sets it for its body)."""
    if policy == "simple":
        return
    window = FILL_WINDOW if window is None else window
    out, region = [], []
    for item in items:
        if isinstance(item, MInst) and not item.opcode.startswith(BOUNDARIES):
            region.append(item)
            continue
        out.extend(_fill_mfma_shadows(_hoist_lds_reads(region), window))
        region = []
        if isinstance(item, Loop):
            schedule(item.body, policy, item.fill_window or window)
        elif isinstance(item, Skip):
            schedule(item.body, policy, window)
        elif isinstance(item, IfElse):
            for arm in item.arms:
                schedule(arm, policy, window)
        out.append(item)
    out.extend(_fill_mfma_shadows(_hoist_lds_reads(region), window))
    items[:] = out


def _regs(refs) -> set:
    return {r.reg for r in refs}


def _hoist_lds_reads(region: list[MInst]) -> list[MInst]:
    out: list[MInst] = []
    # registers each instruction writes and reads, and whether it pins later reads below it:
    # LDS and buffer accesses (their order), and EXEC writes (a read moved above one would run
    # under another lane mask: the restore after a `T.lanes` store, so lanes would skip it)
    facts = {id(inst): (_regs(inst.defs), _regs(inst.uses),
                        inst.opcode.startswith(("ds_", "buffer_load")) or _writes_exec(inst))
             for inst in region}
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


#: How far down the region a filler may come from (instructions): bounds how much longer the
#: hoisted values live, i.e. the register pressure the filling adds.
FILL_WINDOW = 48
#: VALU opcodes that read VCC without naming it (so they keep their place).
_READS_VCC = ("v_cndmask_b32_e32", "v_addc", "v_subb", "v_div_fmas")


def _units(refs) -> set:
    """The 32-bit registers `refs` name: (file, index) once allocated or fixed, else
    (virtual register, offset) (virtual registers never alias each other)."""
    out = set()
    for r in refs:
        if r.reg.phys is not None:
            out.update((r.reg.cls, r.reg.phys + r.start + i) for i in range(r.count))
        else:
            out.update((r.reg.serial, r.start + i) for i in range(r.count))
    return out


def _movable(inst: MInst) -> bool:
    """A VALU instruction whose only effects are its named registers (under an EXEC the
    region does not change): such an instruction may move to any place its operands allow."""
    row = opcodes.row(inst.opcode)
    return (row is not None and row.unit is opcodes.Unit.VALU and not row.flags
            and not inst.opcode.startswith(_READS_VCC)
            and all(isinstance(o, VReg | Ref | int | float) for o in inst.operands))


def _writes_exec(inst: MInst) -> bool:
    row = opcodes.row(inst.opcode)
    return ((row is not None and opcodes.EXEC in row.flags) or "exec" in inst.opcode
            or any(str(o) == "exec" for o in inst.operands if not isinstance(o, VReg | Ref)))


def _fill_mfma_shadows(region: list[MInst], window: int = FILL_WINDOW) -> list[MInst]:
    """List scheduling: everything but the movable VALU instructions keeps its order (MFMAs,
    memory and scalar work: the chain); after an MFMA, while the matrix core is still busy
    with it (its issue cycles / 4 - 1 issue slots), the next chain instruction being an MFMA
    waits and the earliest ready VALU instruction from up to `window` instructions further
    down runs instead, if there is one. Ready means every instruction it depends on through a
    register (read after write, write after read or write) is placed; a filler never reads
    the result of a memory instruction of the region (that would pull its wait up). Otherwise
    instructions keep program order. A region that writes EXEC is split there."""
    if not any(i.opcode.startswith("v_mfma") for i in region):
        return region
    cuts = [n for n, inst in enumerate(region) if _writes_exec(inst)]
    if cuts:
        out, start = [], 0
        for cut in cuts:
            out.extend(_fill_mfma_shadows(region[start:cut], window))
            out.append(region[cut])
            start = cut + 1
        return out + _fill_mfma_shadows(region[start:], window)
    n = len(region)
    defs = [_units(i.defs) for i in region]
    uses = [_units(i.uses) for i in region]
    preds: list[set[int]] = [set() for _ in range(n)]
    last_def: dict = {}
    readers: dict = {}
    loaded: set = set()                      # registers a memory instruction of the region wrote
    reads_loaded = [False] * n
    for k, inst in enumerate(region):
        for u in uses[k]:
            if u in last_def:
                preds[k].add(last_def[u])
            reads_loaded[k] = reads_loaded[k] or u in loaded
        for d in defs[k]:
            if d in last_def:
                preds[k].add(last_def[d])
            preds[k].update(readers.get(d, ()))
        for u in uses[k]:
            readers.setdefault(u, []).append(k)
        for d in defs[k]:
            last_def[d] = k
            readers[d] = []
        if inst.opcode.startswith(("ds_read", "buffer_load", "s_load", "global_load")):
            loaded |= defs[k]
    movable = [_movable(i) for i in region]
    chain = [k for k in range(n) if not movable[k]]
    for a, b in zip(chain, chain[1:]):
        preds[b].add(a)
    placed = [False] * n
    out: list[MInst] = []
    shadow = 0                               # issue slots the last MFMA still covers
    while len(out) < n:
        first = placed.index(False)          # always ready: its predecessors come before it
        pick = first
        if shadow > 0 and region[first].opcode.startswith("v_mfma"):
            for k in range(first + 1, min(n, first + 1 + window)):
                if (not placed[k] and movable[k] and not reads_loaded[k]
                        and all(placed[p] for p in preds[k])):
                    pick = k
                    break
        placed[pick] = True
        out.append(region[pick])
        if region[pick].opcode.startswith("v_mfma"):
            shadow = opcodes.row(region[pick].opcode).issue_cycles // opcodes.ISSUE - 1
        else:
            shadow -= 1
    return out

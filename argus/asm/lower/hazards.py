"""Hazard wait states the hardware does not interlock, from the isa_cdna3 table the emulator's
strict mode checks against: an MFMA result read by a VALU/VMEM/LDS instruction or by another
MFMA (as SrcA/B, or as a SrcC other than exactly its own accumulator), a VALU write of a VGPR
an MFMA or a DPP instruction reads, and a VALU write of EXEC (v_cmpx) before DPP. Where the
instructions in between do not give enough wait states, independent later VALU instructions of
the same straight-line run move up to fill the gap, then `s_nop` covers the rest; loops are
solved over the back edge.
"""

from __future__ import annotations

from argus.asm.lower.program import IfElse, Loop, MInst, Skip
from argus.isa_cdna3 import isa
from argus.isa_cdna3.mfma import MFMA, mfma

#: Wait states beyond which no rule of the table reaches.
HORIZON = 24


def is_mfma(inst: MInst) -> bool:
    return inst.opcode in MFMA


def _units(refs) -> frozenset:
    return frozenset(u for r in refs for u in r.units())


def _reads_writes(inst: MInst, cache: dict) -> tuple[frozenset, frozenset, frozenset]:
    """(registers read, registers written, MFMA SrcA/B registers) of an instruction."""
    if inst not in cache:
        cache[inst] = (_units(inst.uses), _units(inst.defs), _units(inst.uses[:2]))
    return cache[inst]


def required(producer: MInst, consumer: MInst, cache: dict | None = None) -> int:
    """Wait states `consumer` needs after `producer` (0 when independent)."""
    cache = {} if cache is None else cache
    dpp = consumer.opcode.endswith("_dpp")
    if dpp and producer.opcode.startswith("v_cmpx"):
        return isa.VALU_WRITE_EXEC_TO_DPP
    _, written, _ = _reads_writes(producer, cache)
    if not written:
        return 0
    reads, writes, a_b = _reads_writes(consumer, cache)
    if not (reads | writes) & written:
        return 0
    if is_mfma(producer):
        info = mfma(producer.opcode)
        if is_mfma(consumer):
            c = reads - a_b
            need = isa.mfma_to_read_wait_states(info) if a_b & written else 0
            if c & written:
                need = max(need, isa.mfma_to_srcc_wait_states(info, same_registers=c == written))
            return need
        return isa.mfma_to_read_wait_states(info)
    if producer.opcode.startswith("v_") and is_mfma(consumer) and reads & written:
        return isa.VALU_WRITE_VGPR_TO_MFMA_READ
    if producer.opcode.startswith("v_") and dpp and reads & written:
        return isa.VALU_WRITE_VGPR_TO_DPP_READ
    return 0


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for inst, age in b.items():
        out[inst] = min(age, out.get(inst, age))
    return out


#: Instructions a filler may not move across or be: memory, waits, barriers, control flow.
FIXED = ("s_waitcnt", "s_barrier", "s_cbranch", "s_branch", "s_cmp", "s_endpgm", "s_nop",
         "s_load", "buffer_", "global_", "ds_")


def _movable(inst) -> bool:
    # VALU only: a scalar instruction may write SCC between an s_cmp and its reader
    return (isinstance(inst, MInst) and inst.opcode.startswith("v_") and not is_mfma(inst)
            and all(r.reg.cls == "v" for r in inst.defs))


def _independent(candidate: MInst, passed: list, cache: dict) -> bool:
    """Whether `candidate` may move above the instructions `passed` (no register dependence
    either way)."""
    reads, writes, _ = _reads_writes(candidate, cache)
    for inst in passed:
        r, w, _ = _reads_writes(inst, cache)
        if writes & (r | w) or reads & w:
            return False
    return True


def _fillers(pending: list, index: int, gap: int, history: dict, cache: dict) -> list[MInst]:
    """Up to `gap` later instructions of this straight-line run that depend on nothing between
    them and pending[index] and need no wait states of their own: they fill the gap instead of
    `s_nop` (removed from `pending`)."""
    chosen, passed = [], [pending[index]]
    j = index + 1
    while j < len(pending) and len(chosen) < gap and isinstance(pending[j], MInst) \
            and not pending[j].opcode.startswith(FIXED[:6]):
        candidate = pending[j]
        if (_movable(candidate) and _independent(candidate, passed, cache)
                and all(required(p, candidate, cache) <= age for p, age in history.items())
                and required(candidate, pending[index], cache) == 0):
            chosen.append(candidate)
            del pending[j]
            continue
        passed.append(candidate)
        j += 1
    return chosen


def _walk(items: list, history: dict, insert: bool, cache: dict) -> dict:
    """history: producer -> wait states issued since it (ages); returns the history after."""
    out = []
    pending = list(items)
    index = 0
    while index < len(pending):
        item = pending[index]
        index += 1
        if isinstance(item, Loop):
            entry = history
            for _ in range(4):
                end = _trial_walk(item.body, entry, cache)
                merged = _merge(history, end)
                if merged == entry:
                    break
                entry = merged
            history = _merge(history, _walk(item.body, entry, insert, cache))
            out.append(item)
            continue
        if isinstance(item, Skip):
            history = _merge(history, _walk(item.body, history, insert, cache))
            out.append(item)
            continue
        if isinstance(item, IfElse):
            then, orelse = (_walk(arm, history, insert, cache) for arm in item.arms)
            history = _merge(then, orelse)
            out.append(item)
            continue
        if not isinstance(item, MInst):
            out.append(item)
            continue
        gap = max((required(p, item, cache) - age for p, age in history.items()), default=0)
        if gap > 0:
            # independent later instructions first, `s_nop` for what they do not cover
            for filler in _fillers(pending, index - 1, gap, history, cache):
                out.append(filler)
                history = _issue(filler, history)
                gap -= 1
            for nop in _nops(gap, item):
                out.append(nop)
            history = {p: age + max(gap, 0) for p, age in history.items()}
        out.append(item)
        history = _issue(item, history)
    if insert:
        items[:] = out
    return history


def _trial_walk(body: list, entry: dict, cache: dict) -> dict:
    """The history after `body` from `entry`, inserting nothing. Memoised: a loop nested d
    deep is otherwise walked 2^d times (each enclosing loop walks its body to a fixpoint, then
    once more to insert), the same from the same entry each time. A body is only ever changed
    by its own inserting walk, after its trial walks, and its length keys the memo too."""
    key = ("trial", id(body), len(body), frozenset(entry.items()))
    if key not in cache:
        cache[key] = (body, _walk(body, entry, False, cache))   # body kept: its id stays its
    return cache[key][1]


def _issue(inst: MInst, history: dict) -> dict:
    """The history after `inst` issues."""
    step = isa.nop_wait_states(inst.opcode, inst.operands)
    history = {p: age + step for p, age in history.items() if age + step < HORIZON}
    if (inst.defs and (is_mfma(inst) or inst.opcode.startswith("v_"))
            or inst.opcode.startswith("v_cmpx")):
        history[inst] = 0
    return history


def _nops(gap: int, consumer: MInst) -> list[MInst]:
    nops = []
    while gap > 0:
        n = min(gap, isa.SNOP_MAX + 1)
        nops.append(MInst("s_nop", (n - 1,), 0, "", consumer.loc,
                          f"hazard: {consumer.opcode} waits {n} states", inserted="nop"))
        gap -= n
    return nops


def insert_nops(items: list) -> None:
    """Insert the `s_nop`s the hazard table requires (in place)."""
    _walk(items, {}, True, {})

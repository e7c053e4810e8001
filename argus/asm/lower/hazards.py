"""Hazard wait states the hardware does not interlock, from the isa_cdna3 table the emulator's
strict mode checks against: an MFMA result read by a VALU/VMEM/LDS instruction or by another
MFMA (as SrcA/B, or as a SrcC other than exactly its own accumulator), and a VALU write of a VGPR
an MFMA reads. Where the instructions in between do not give enough wait states, `s_nop` fills
the gap; loops are solved over the back edge.
"""

from __future__ import annotations

from argus.asm.lower.program import Loop, MInst, Skip
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


def wait_states(inst: MInst) -> int:
    """Wait states one instruction provides: `s_nop N` gives N + 1, anything else 1."""
    if inst.opcode == "s_nop":
        return int(inst.operands[0]) + 1
    return 1


def required(producer: MInst, consumer: MInst, cache: dict | None = None) -> int:
    """Wait states `consumer` needs after `producer` (0 when independent)."""
    cache = {} if cache is None else cache
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
    return 0


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for inst, age in b.items():
        out[inst] = min(age, out.get(inst, age))
    return out


def _walk(items: list, history: dict, insert: bool, cache: dict) -> dict:
    """history: producer -> wait states issued since it (ages); returns the history after."""
    out = []
    for item in items:
        if isinstance(item, Loop):
            entry = history
            for _ in range(4):
                end = _walk(item.body, entry, False, cache)
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
        if not isinstance(item, MInst):
            out.append(item)
            continue
        gap = max((required(p, item, cache) - age for p, age in history.items()), default=0)
        if gap > 0:
            for nop in _nops(gap, item):
                out.append(nop)
            history = {p: age + gap for p, age in history.items()}
        out.append(item)
        step = wait_states(item)
        history = {p: age + step for p, age in history.items() if age + step < HORIZON}
        if item.defs and (is_mfma(item) or item.opcode.startswith("v_")):
            history[item] = 0
    if insert:
        items[:] = out
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

"""LDS bank conflicts as performance facts: for each LDS access, the worst number of distinct
4-byte words one bank must serve within a phase of lanes (gfx942: 32 banks of 4 bytes; a
phase is 128 bytes of requests, i.e. 8 lanes for 16-byte accesses, 16 for 8-byte, 32 for 4).
"""

from __future__ import annotations

import numpy as np

from argus.absint.report import BankFact
from argus.ir import ops as O
from argus.ir.expr import evaluate
from argus.ir.types import DTYPE_BYTES, LANES

BANKS = 32
BANK_BYTES = 4
PHASE_BYTES = 128


def access_bytes(offsets: np.ndarray, elem: int) -> int:
    """Bytes one lane moves per instruction: the longest run of consecutive slots with
    consecutive addresses (a power of two, at most 16 bytes)."""
    slots = offsets.shape[-1]
    run = 1
    while run * 2 <= slots and run * 2 * elem <= 16:
        width = run * 2
        groups = offsets[..., : slots - slots % width].reshape(*offsets.shape[:-1], -1, width)
        if not np.all(np.diff(groups, axis=-1) == 1) or np.any(groups[..., 0] % width):
            break
        run = width
    return max(run * elem, min(elem, 4))


def conflict_degree(byte_addr: np.ndarray, width: int) -> int:
    """byte_addr: (lanes, instructions) start addresses; worst bank load over phases."""
    per_phase = max(1, PHASE_BYTES // max(width, 4))
    worst = 1
    for instr in range(byte_addr.shape[1]):
        for first in range(0, LANES, per_phase):
            starts = byte_addr[first:first + per_phase, instr]
            words = np.unique((starts[:, None] + np.arange(0, max(width, 4), 4)[None, :]) // 4)
            counts = np.bincount(words % BANKS, minlength=BANKS)
            worst = max(worst, int(counts.max()))
    return worst


def bank_facts(kernel: O.Kernel) -> list[BankFact]:
    """One fact per LDS access op, for wave 0 and origin 0 of the leading dimensions."""
    facts = []
    for op in kernel.ops():
        if not isinstance(op, (O.LdsLoad, O.LdsStore)):
            continue
        t = op.result.type if isinstance(op, O.LdsLoad) else op.value.type
        elem = DTYPE_BYTES[t.dtype]
        lane, slot = np.meshgrid(np.arange(LANES), np.arange(t.layout.slots), indexing="ij")
        env = {"wave": 0, "lane": lane, "slot": slot}
        coords = [np.broadcast_to(np.asarray(evaluate(c, env)), lane.shape)
                  for c in t.layout.coords]
        lead = len(op.addr.shape) - len(coords)
        full = [np.zeros(lane.shape, np.int64) for _ in range(lead)] + coords
        offsets = np.broadcast_to(np.asarray(op.addr(*full)), lane.shape).astype(np.int64)
        width = access_bytes(offsets, elem)
        per_instr = width // elem if width >= elem else 1
        starts = offsets[:, ::per_instr] * elem
        facts.append(BankFact(str(op.loc), op.mnemonic, conflict_degree(starts, width), width))
    return facts

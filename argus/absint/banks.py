"""LDS bank conflicts as performance facts: for each LDS access, the worst number of distinct
4-byte words one bank must serve within a phase of lanes. Bank geometry and the lane groups of
each phase come from `argus.isa_cdna3.isa`, the same model the emulator counts cycles with.
"""

from __future__ import annotations

import numpy as np

from argus.absint.report import BankFact
from argus.ir import ops as O
from argus.ir.expr import evaluate
from argus.ir.types import DTYPE_BYTES, LANES
from argus.isa_cdna3 import isa


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


def conflict_degree(byte_addr: np.ndarray, width: int, *, read: bool = True) -> int:
    """byte_addr: (lanes, instructions) start addresses; worst bank load over phases."""
    word = isa.LDS_BANK_BYTES
    worst = 1
    for instr in range(byte_addr.shape[1]):
        for phase in isa.lds_phases(width, read=read):
            starts = byte_addr[list(phase), instr]
            words = np.unique((starts[:, None] + np.arange(0, max(width, word), word)[None, :])
                              // word)
            counts = np.bincount(words % isa.LDS_BANKS, minlength=isa.LDS_BANKS)
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
        degree = conflict_degree(starts, width, read=isinstance(op, O.LdsLoad))
        facts.append(BankFact(str(op.loc), op.mnemonic, degree, width))
    return facts

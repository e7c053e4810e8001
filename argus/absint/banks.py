"""LDS bank conflicts as performance facts: for each LDS access, the worst number of distinct
4-byte words one bank must serve within a phase of lanes. Addresses come from the op's formula
(`ir.access`), bank geometry and phases from `argus.isa_cdna3.lds`, the model the emulator
counts cycles with.
"""

from __future__ import annotations

import numpy as np

from argus.absint.report import BankFact
from argus.ir import access as A
from argus.ir import ops as O
from argus.ir.expr import Const, evaluate
from argus.ir.types import LANES
from argus.isa_cdna3.lds import worst_phase


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
    return worst_phase(np.asarray(byte_addr).T, width, read=read)


def bank_facts(kernel: O.Kernel) -> list[BankFact]:
    """One fact per LDS access op, for wave 0 and origin 0 of every view dimension."""
    facts = []
    for op in kernel.ops():
        if not isinstance(op, (O.LdsLoad, O.LdsStore)):
            continue
        layout = A.tile_of(op).layout
        found = A.lds_access(op, origin=(Const(0),) * len(op.addr.shape))
        lane, slot = np.meshgrid(np.arange(LANES), np.arange(layout.slots), indexing="ij")
        offsets = np.broadcast_to(np.asarray(
            evaluate(found.address, {"wave": 0, "lane": lane, "slot": slot})),
            lane.shape).astype(np.int64)
        width = access_bytes(offsets, found.elem_bytes)
        per_instr = width // found.elem_bytes if width >= found.elem_bytes else 1
        starts = offsets[:, ::per_instr] * found.elem_bytes
        degree = conflict_degree(starts, width, read=isinstance(op, O.LdsLoad))
        facts.append(BankFact(str(op.loc), op.mnemonic, degree, width))
    return facts

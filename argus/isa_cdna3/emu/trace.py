"""Opt-in ordered event trace of an emulator run: the performance model's input.

The emulator appends one event per instruction a group of waves executed (instruction index and
the waves); memory instructions attach, per wave, the distinct cache lines they touched and the
32-bit words their active lanes accessed, and LDS instructions their cycles under the bank
model. Per wave, events come in program (issue) order.
Nothing here runs unless `emulate(..., trace=True)` asked for it.
"""

from __future__ import annotations

import attrs
import numpy as np

from argus.isa_cdna3 import isa


@attrs.define(eq=False)
class WaveEvents:
    """One wave's events in issue order: instruction index, cache lines touched (0 for
    non-memory), LDS cycles (0.0 for non-LDS), 32-bit words its active lanes accessed (0 for
    non-memory)."""

    workgroup: int
    wave_in_group: int
    index: list[int]
    lines: list[int]
    lds: list[float]
    dwords: list[int]


@attrs.define(eq=False)
class EventTrace:
    """Events of every group the emulator ran, plus the line footprint per workgroup."""

    workgroup: np.ndarray                 # wave -> workgroup
    wave_in_group: np.ndarray             # wave -> index inside its workgroup
    index: list[int] = attrs.field(factory=list)
    members: list[np.ndarray] = attrs.field(factory=list)
    lines: dict[int, np.ndarray] = attrs.field(factory=dict)     # event -> lines per member
    dwords: dict[int, np.ndarray] = attrs.field(factory=dict)    # event -> dwords per member
    lds: dict[int, float] = attrs.field(factory=dict)            # event -> cycles per member
    touched: list[np.ndarray] = attrs.field(factory=list)        # (workgroup, line) pairs
    _pending_lines: np.ndarray | None = None
    _pending_dwords: np.ndarray | None = None
    _pending_lds: float = 0.0

    # --- hooks the emulator calls -------------------------------------------------------------
    def memory(self, waves: np.ndarray, addr: np.ndarray, active: np.ndarray) -> None:
        """A vector memory access of `waves`: byte addresses [..., n, 64] and active lanes."""
        n = len(waves)
        on = np.moveaxis(np.broadcast_to(active, addr.shape), -2, 0).reshape(n, -1)
        line = np.moveaxis(addr.astype(np.int64) >> isa.CACHE_LINE_SHIFT, -2, 0).reshape(n, -1)
        line = np.where(on, line, -1)
        ordered = np.sort(line, axis=1)
        first = np.ones_like(ordered, dtype=bool)
        first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
        first &= ordered >= 0
        counts = first.sum(axis=1)
        dwords = np.count_nonzero(on, axis=1)
        if self._pending_lines is not None:     # an instruction touching memory twice
            counts = counts + self._pending_lines
            dwords = dwords + self._pending_dwords
        self._pending_lines, self._pending_dwords = counts, dwords
        group = self.workgroup[waves][:, None].astype(np.int64) << 44
        pairs = group | np.where(first, ordered, 0)
        self.touched.append(pairs[first])

    def lds_access(self, cycles: float, waves: int) -> None:
        """LDS cycles of one access by `waves` waves under the bank model."""
        self._pending_lds += cycles / waves

    def event(self, index: int, waves: np.ndarray) -> None:
        """Instruction `index` executed by `waves` (after its hooks, if any, ran)."""
        event = len(self.index)
        self.index.append(index)
        self.members.append(waves)
        if self._pending_lines is not None:
            self.lines[event] = self._pending_lines
            self.dwords[event] = self._pending_dwords
            self._pending_lines = self._pending_dwords = None
        if self._pending_lds:
            self.lds[event] = self._pending_lds
            self._pending_lds = 0.0

    # --- what the model reads -----------------------------------------------------------------
    def per_wave(self) -> list[WaveEvents]:
        """Every wave's events in program order."""
        waves = [WaveEvents(int(self.workgroup[w]), int(self.wave_in_group[w]), [], [], [], [])
                 for w in range(len(self.workgroup))]
        for event, (index, members) in enumerate(zip(self.index, self.members)):
            lines = self.lines.get(event)
            dwords = self.dwords.get(event)
            lds = self.lds.get(event, 0.0)
            for row, wave in enumerate(members.tolist()):
                record = waves[wave]
                record.index.append(index)
                record.lines.append(int(lines[row]) if lines is not None else 0)
                record.dwords.append(int(dwords[row]) if dwords is not None else 0)
                record.lds.append(lds)
        return waves

    def footprint(self, xcds: int) -> tuple[int, int]:
        """(distinct lines over the whole launch, sum over XCDs of distinct lines each XCD's
        workgroups touched) with workgroup w dispatched to XCD w mod `xcds`."""
        if not self.touched:
            return 0, 0
        pairs = np.concatenate(self.touched)
        lines = pairs & ((1 << 44) - 1)
        xcd = (pairs >> 44) % xcds
        return _distinct(lines), _distinct((xcd << 44) | lines)


def _distinct(values: np.ndarray) -> int:
    """How many different values (a sort: numpy's hashing unique is slower on these)."""
    if not len(values):
        return 0
    ordered = np.sort(values)
    return int(1 + np.count_nonzero(ordered[1:] != ordered[:-1]))

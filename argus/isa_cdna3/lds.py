"""The LDS bank model of gfx942: how many cycles each phase of one access takes. A phase (lane
groups from `isa.lds_phases`) takes as many cycles as the most distinct dwords one of the 32
banks must serve (lanes reading the same dword share it: broadcast). The emulator sums the
phases into cycles; the verifier's bank facts report the worst phase.
"""

from __future__ import annotations

import functools

import numpy as np

from argus.isa_cdna3 import isa


def phase_loads(byte_addr: np.ndarray, access_bytes: int, *, read: bool,
                lanes: np.ndarray | None = None) -> np.ndarray:
    """Cycles of each phase of each access: `byte_addr` holds [..., 64] start addresses (one
    access per leading index, e.g. per wave or per instruction); `lanes` masks the lanes taking
    part (all by default). Returns [accesses, phases] bank loads (0 for an idle phase)."""
    addr = np.asarray(byte_addr).reshape(-1, isa.WAVE_SIZE)
    words = max(1, access_bytes // isa.LDS_BANK_BYTES)
    phases = _phases(access_bytes, read)                                    # [phases, lanes]
    dwords = (addr >> 2)[..., None] + np.arange(words)                      # [n, 64, words]
    if lanes is not None:
        dwords = np.where(np.asarray(lanes, bool).reshape(-1, isa.WAVE_SIZE)[..., None],
                          dwords, -1)
    rows = dwords[:, phases].reshape(-1, phases.shape[1] * words)           # one row per phase
    ordered = np.sort(rows, axis=1)
    first = np.ones_like(ordered, dtype=bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    first &= ordered >= 0
    bank = ordered % isa.LDS_BANKS + np.arange(len(rows))[:, None] * isa.LDS_BANKS
    per_bank = np.bincount(bank[first], minlength=len(rows) * isa.LDS_BANKS)
    loads = per_bank.reshape(len(rows), isa.LDS_BANKS).max(axis=1)
    return loads.reshape(addr.shape[0], len(phases))


@functools.lru_cache(maxsize=32)
def _phases(access_bytes: int, read: bool) -> np.ndarray:
    return np.array(isa.lds_phases(access_bytes, read=read))


def access_cycles(byte_addr: np.ndarray, access_bytes: int, *, read: bool,
                  lanes: np.ndarray | None = None) -> int:
    """LDS cycles of the accesses in `byte_addr` ([..., 64]): the sum over their phases."""
    return int(phase_loads(byte_addr, access_bytes, read=read, lanes=lanes).sum())


def worst_phase(byte_addr: np.ndarray, access_bytes: int, *, read: bool) -> int:
    """The conflict degree: the most cycles any one phase of these accesses takes (1 when
    conflict-free)."""
    return max(1, int(phase_loads(byte_addr, access_bytes, read=read).max(initial=0)))


__all__ = ["access_cycles", "phase_loads", "worst_phase"]

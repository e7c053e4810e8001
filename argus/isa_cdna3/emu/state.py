"""Mutable machine state of the emulator: register files of every wave, LDS, the flat address space,
the queue of memory results waiting for `s_waitcnt`, and the hazard bookkeeping.

Everything is a numpy array with a wave axis, so one instruction runs for a whole group of waves
(all waves at the same PC) with one numpy call per operand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from argus.errors import ArgusError
from argus.isa_cdna3 import isa
from argus.isa_cdna3.instruction import Instruction
from argus.isa_cdna3.mfma import MfmaInfo
from argus.isa_cdna3.opcodes import COUNTERS, VMCNT, Unit, unit

RUNNING, AT_BARRIER, ENDED = 0, 1, 2
EXEC_WRITE = -1          # stands for EXEC in Group.recent_valu (v_cmpx writes it)
_LANE_BITS = np.arange(32, dtype=np.uint32)


class EmulatorError(ArgusError):
    """Base class of everything the emulator raises about the program it runs."""


class UnsupportedOpcodeError(EmulatorError):
    """The kernel uses opcodes (or operand forms) the emulator does not implement."""

    kind = "unsupported"

    def __init__(self, kernel: str, missing: dict[str, list[str]]):
        self.kernel = kernel
        self.missing = missing
        lines = [f"  {name}: {len(where)}x, first at {where[0]}" for name, where in
                 sorted(missing.items())]
        super().__init__(
            f"kernel {kernel} uses {len(missing)} opcode form(s) the gfx942 emulator does not "
            f"implement (nothing was executed):\n" + "\n".join(lines))


class MemoryFault(EmulatorError):
    """An access outside every mapped buffer, or outside the workgroup's LDS allocation."""

    def __init__(self, message: str, *, row: int | None = None):
        super().__init__(message)
        self.row = row            # which wave of the executing group, when known


class HazardError(EmulatorError):
    """A read of a register whose producer has not finished (strict mode)."""

    def __init__(self, hazard: Hazard):
        self.hazard = hazard
        super().__init__(str(hazard))


@attrs.frozen
class Hazard:
    """One violated dependency: `consumer` read (or overwrote) what `producer` had not delivered."""

    kind: str                 # "pending-load" | "mfma-result" | "valu-to-mfma"
    workgroup: int
    wave: int                 # wave index inside the workgroup
    pc: int
    consumer: str
    producer_pc: int
    producer: str
    register: str
    detail: str

    def __str__(self) -> str:
        return (f"{self.kind} hazard in workgroup {self.workgroup} wave {self.wave} at "
                f"pc 0x{self.pc:x}: `{self.consumer}` uses {self.register} before "
                f"`{self.producer}` (pc 0x{self.producer_pc:x}) delivered it; {self.detail}")


class Group:
    """The waves that execute the next instruction together; `sel` indexes the wave axis."""

    __slots__ = ("waves", "sel", "n", "pc", "tick", "exec", "exec_full", "recent_valu")

    def __init__(self, waves: np.ndarray, total: int, pc: int):
        self.waves = waves
        self.n = len(waves)
        contiguous = self.n > 0 and int(waves[-1]) - int(waves[0]) + 1 == self.n
        self.sel: Any = slice(int(waves[0]), int(waves[-1]) + 1) if contiguous else waves
        self.pc = pc
        self.tick = 0            # wait states issued since the group formed
        # (tick, vgpr, instruction) of the latest VALU writes, for the VALU -> MFMA/DPP hazards
        self.recent_valu: list[tuple[int, int, Instruction]] = []
        self.exec: np.ndarray = np.ones((self.n, isa.WAVE_SIZE), bool)
        self.exec_full = True


@attrs.define
class PendingResult:
    """One memory instruction of a group, waiting for its counter to retire it."""

    counter: str                          # opcodes.VMCNT | opcodes.LGKMCNT
    waves: np.ndarray
    seq: np.ndarray                       # per-wave issue number on that counter
    done: np.ndarray
    commit: Callable[[np.ndarray], None] | None
    vgprs: tuple[int, ...] = ()
    sgprs: tuple[int, ...] = ()
    pc: int = 0
    text: str = ""
    sel: Any = None                       # the issuing group's wave selection
    uniform: int | None = None            # the common seq when all waves issued alike


@attrs.define
class MemoryRegion:
    name: str
    start: int                 # offset in the heap
    size: int


class FlatMemory:
    """The device's virtual address space: argument buffers laid out in one byte heap.

    Each buffer starts at a 256-byte aligned address with an unmapped guard gap after it, so an
    overrun faults instead of silently reading a neighbour.
    """

    BASE = 0x1_0000_0000
    GUARD = 4096

    def __init__(self, sizes: list[tuple[str, int]], *, lenient: bool = False):
        self.lenient = lenient
        self.unmapped_accesses = 0
        offset = self.GUARD         # the first GUARD bytes stay unmapped zeros: the zero page
        self.regions: list[MemoryRegion] = []
        for name, size in sizes:
            self.regions.append(MemoryRegion(name, offset, size))
            offset += -(-max(size, 1) // 256) * 256 + self.GUARD
        # np.zeros maps pages lazily: a buffer of many GiB costs only the pages written
        self.heap = np.zeros(offset + 16, np.uint8)
        self.words = self.heap[: len(self.heap) // 4 * 4].view(np.uint32)
        self.starts = np.array([r.start for r in self.regions], np.int64)
        self.ends = np.array([r.start + r.size for r in self.regions], np.int64)

    CHUNK = 1 << 20

    def fill(self, region: int, data: np.ndarray) -> None:
        """Copy `data` (bytes) into a region, skipping all-zero chunks (the heap is zero), so a
        mostly empty tensor of many GiB stays mostly unmapped."""
        view = self.view(region)
        for start in range(0, len(view), self.CHUNK):
            chunk = data[start:start + self.CHUNK]
            if chunk.any():
                view[start:start + self.CHUNK] = chunk

    def drain_into(self, region: int, data: np.ndarray) -> None:
        """Copy a region back into `data` (bytes), writing only the chunks that differ."""
        view = self.view(region)
        for start in range(0, len(view), self.CHUNK):
            chunk = view[start:start + self.CHUNK]
            if not np.array_equal(chunk, data[start:start + self.CHUNK]):
                data[start:start + self.CHUNK] = chunk

    def mapped(self, first: np.ndarray, last: np.ndarray) -> np.ndarray:
        """Whether bytes [first, last] (heap offsets) lie inside one buffer."""
        region = np.searchsorted(self.starts, first, side="right") - 1
        safe = np.maximum(region, 0)
        return (region >= 0) & (first >= self.starts[safe]) & (last < self.ends[safe])

    def address(self, region: int) -> int:
        return self.BASE + self.regions[region].start

    def view(self, region: int) -> np.ndarray:
        r = self.regions[region]
        return self.heap[r.start:r.start + r.size]

    def check(self, addr: np.ndarray, nbytes: int, active: np.ndarray) -> np.ndarray:
        """Heap offsets of `addr` ([..., n, 64] int64 addresses). An active lane touching unmapped
        bytes faults; a lenient memory instead counts it and points it at the zero page (reads
        give 0, writes are dropped), as vendor kernels over-read past a buffer within its V#."""
        offset = addr.astype(np.int64) - self.BASE
        if active.all():
            low, high = int(offset.min()), int(offset.max()) + nbytes
            for region in self.regions:   # the common case: one buffer holds every access
                if region.start <= low and high <= region.start + region.size:
                    return offset
        last = offset + (nbytes - 1)
        inside = (offset >= 0) & (last < len(self.heap))
        safe_first = np.where(inside, offset, 0)
        safe_last = np.where(inside, last, 0)
        ok = inside & self.mapped(safe_first, safe_last)
        bad = active & ~ok
        if bad.any():
            position = tuple(int(p) for p in np.argwhere(bad)[0])
            if not self.lenient:
                raise MemoryFault(
                    f"access of {nbytes} bytes at address 0x{int(addr[position]):x} is outside "
                    f"every mapped buffer (lane {position[-1]})", row=position[-2])
            self.unmapped_accesses += int(bad.sum())
            safe_first = np.where(bad, 0, safe_first)
        return np.where(active, safe_first, 0)

    def read_dwords(self, offset: np.ndarray, count: int) -> np.ndarray:
        """(..., count) uint32 from byte offsets (any alignment)."""
        if not (offset & 3).any():
            words = self.heap[: len(self.heap) // 4 * 4].view(np.uint32)
            return words[(offset >> 2)[..., None] + np.arange(count)]
        idx = offset[..., None] + np.arange(4 * count)
        return self.heap[idx].reshape(*offset.shape, count, 4).view(np.uint32)[..., 0]

    def read_words(self, offset: np.ndarray) -> np.ndarray:
        """The dword at each byte offset (same shape as `offset`)."""
        if not (offset & 3).any():
            return self.words.take(offset >> 2)
        return self.read_bytes(offset, 4).view(np.uint32)[..., 0]

    def write_words(self, offset: np.ndarray, values: np.ndarray, active: np.ndarray) -> None:
        """Store each dword of `values` at its byte offset where `active` (never the zero page)."""
        active = active & (offset >= self.GUARD)
        if not (offset & 3).any():
            if active.all():
                self.words[(offset >> 2).reshape(-1)] = values.reshape(-1)
            else:
                self.words[offset[active] >> 2] = values[active]
            return
        self.write_bytes(offset, np.ascontiguousarray(values)[..., None].view(np.uint8), active)

    def read_bytes(self, offset: np.ndarray, nbytes: int) -> np.ndarray:
        return self.heap[offset[..., None] + np.arange(nbytes)]

    def write_bytes(self, offset: np.ndarray, data: np.ndarray, active: np.ndarray) -> None:
        active = active & (offset >= self.GUARD)
        nbytes = data.shape[-1]
        idx = offset[active][:, None] + np.arange(nbytes)
        self.heap[idx.reshape(-1)] = data[active].reshape(-1)


class Machine:
    """Registers, LDS, memory and bookkeeping of every wave of a launch."""

    def __init__(self, *, waves: int, workgroups: int, waves_per_group: int, lds_bytes: int,
                 memory: FlatMemory, accum_offset: int, check: str):
        self.waves = waves
        self.check = check
        self.accum_offset = accum_offset
        self.sgpr = np.zeros((isa.SGPR_FILE, waves), np.uint32)
        self.vgpr = np.zeros((isa.VGPRS_UNIFIED, waves, isa.WAVE_SIZE), np.uint32)
        self.scc = np.zeros(waves, np.uint32)
        self.exec_lanes = np.zeros((waves, isa.WAVE_SIZE), bool)
        self.pc = np.zeros(waves, np.int64)
        self.state = np.full(waves, RUNNING, np.int8)
        self.clock = np.zeros(waves, np.int64)
        self.vskip = np.zeros(waves, bool)
        self.executed = np.zeros(waves, np.int64)
        # Wave w is wave w // workgroups of workgroup w % workgroups: waves that take the same
        # path because of their index inside the workgroup form one contiguous slice.
        self.workgroup = np.tile(np.arange(workgroups), waves_per_group)
        self.wave_in_group = np.repeat(np.arange(waves_per_group), workgroups)
        self.lds_bytes = lds_bytes
        self.lds = np.zeros((workgroups, max(lds_bytes, 4) // 4), np.uint32)
        self.memory = memory
        # s_waitcnt: per-wave issue counts and outstanding results, oldest first
        self.issued = {c: np.zeros(waves, np.int64) for c in COUNTERS}
        self.outstanding = {c: np.zeros(waves, np.int64) for c in COUNTERS}
        self.queue: dict[str, list[PendingResult]] = {c: [] for c in COUNTERS}
        self.pending_v: dict[int, np.ndarray] = {}
        self.pending_s: dict[int, np.ndarray] = {}
        self.pending_by_reg: dict[tuple[str, int], PendingResult] = {}
        self.pending_total: dict[tuple[str, int], int] = {}
        # MFMA results: issue clock of the last MFMA writing each VGPR, and which MFMA it was
        # (an index into mfma_producers), per wave: waves on different paths (trip counts) have
        # different last writers of one register; the value before it
        self.mfma_issued = np.zeros((isa.VGPRS_UNIFIED, waves), np.int64)
        self.mfma_from = np.full((isa.VGPRS_UNIFIED, waves), -1, np.int32)
        self.mfma_producers: list[tuple[Instruction, MfmaInfo, int, int]] = []
        self.mfma_producer_ids: dict[tuple[int, int], int] = {}
        self.mfma_producer: set[int] = set()       # registers some wave's MFMA wrote
        # np.zeros, not zeros_like: calloc'd pages stay untouched until an MFMA writes there
        # (zeros_like fills 128 KiB a wave: 6 s of a 37_FrobeniusNorm_ check's 12)
        self.stale = np.zeros(self.vgpr.shape, self.vgpr.dtype)
        self.hazards: list[Hazard] = []
        self.bytes_moved: dict[int, int] = {}
        self.lds_cycles: dict[int, int] | None = None     # pc -> LDS cycles, when requested
        self.trace: Any = None        # an emu.trace.EventTrace when the run is traced

    # --- exec ---------------------------------------------------------------------------------
    def refresh_exec(self, g: Group) -> None:
        lo = self.sgpr[isa.EXEC][g.sel]
        hi = self.sgpr[isa.EXEC + 1][g.sel]
        lanes = np.concatenate([(lo[:, None] >> _LANE_BITS) & 1, (hi[:, None] >> _LANE_BITS) & 1],
                               axis=1).astype(bool)
        self.exec_lanes[g.sel] = lanes
        g.exec = lanes
        g.exec_full = bool(lanes.all())

    def clocks(self, g: Group) -> np.ndarray:
        return self.clock[g.sel] + g.tick

    # --- hazards ------------------------------------------------------------------------------
    def report(self, g: Group, rows: np.ndarray, kind: str, consumer: Instruction,
               producer_pc: int, producer: str, register: str, detail: str) -> None:
        row = int(np.flatnonzero(rows)[0])
        wave = int(g.waves[row])
        hazard = Hazard(kind, int(self.workgroup[wave]), int(self.wave_in_group[wave]), g.pc,
                        consumer.text or str(consumer), producer_pc, producer, register, detail)
        if self.check == "strict":
            raise HazardError(hazard)
        if self.check == "warn":
            self.hazards.append(hazard)

    def vgpr_name(self, idx: int) -> str:
        return f"a{idx - self.accum_offset}" if idx >= self.accum_offset else f"v{idx}"

    def read_v(self, g: Group, idx: int, inst: Instruction, *, mfma_srcc: tuple[int, int]
               | None = None) -> np.ndarray:
        """VGPR/AGPR `idx` of the group, checked against pending loads and unfinished MFMAs."""
        if idx in self.pending_v or idx in self.mfma_producer:
            early = self._check(g, idx, inst, mfma_srcc)
            if early is not None:
                return np.where(early[:, None], self.stale[idx][g.sel], self.vgpr[idx][g.sel])
        return self.vgpr[idx][g.sel]

    def _check(self, g: Group, idx: int, inst: Instruction, mfma_srcc: tuple[int, int] | None
               ) -> np.ndarray | None:
        """Report reads of `idx` that come too early; returns the waves that must see the stale
        value (unchecked runs only) or None."""
        if idx in self.pending_v:
            self._check_pending(g, idx, inst, self.pending_v[idx], "v")
        if idx not in self.mfma_producer:
            return None
        which = self.mfma_from[idx][g.sel]
        # mostly every wave of the group had the same producer (an accumulation chain reading
        # its own srcC, which needs no wait): no sort, no clocks, no mask for that case
        first = int(which[0]) if len(which) else -1
        if (which == first).all():
            pids: Any = (first,) if first >= 0 else ()
        else:
            pids = np.unique(which[which >= 0])
        clocks: np.ndarray | None = None
        early = np.zeros(0, bool)
        need, culprit = 0, None
        for pid in pids:
            producer, info, start, count = self.mfma_producers[int(pid)]
            if mfma_srcc is None:
                wait = isa.mfma_to_read_wait_states(info)
            else:
                wait = isa.mfma_to_srcc_wait_states(info,
                                                    same_registers=mfma_srcc == (start, count))
                if wait == 0:
                    continue
            if clocks is None:
                clocks, early = self.clocks(g), np.zeros(g.n, bool)
            ready = self.mfma_issued[idx][g.sel] + 1 + wait
            late = (which == pid) & (clocks < ready)
            if late.any():
                early |= late
                need = max(need, int(ready[late].max() - clocks[late].min()))
                culprit = culprit or (producer, info)
        if culprit is None:
            return None
        producer, info = culprit
        self.report(g, early, "mfma-result", inst, producer.address, producer.text,
                    self.vgpr_name(idx), f"{info.name} needs more wait states ({need} missing); "
                    f"insert `s_nop` or independent instructions")
        return early if self.check == "off" else None

    def read_block(self, g: Group, first: int, count: int, inst: Instruction, *,
                   mfma_srcc: tuple[int, int] | None = None) -> np.ndarray:
        """VGPRs first..first+count-1 as one [count, n, 64] array, with the checks of read_v."""
        stale = []
        for idx in range(first, first + count):
            if idx in self.pending_v or idx in self.mfma_producer:
                early = self._check(g, idx, inst, mfma_srcc)
                if early is not None:
                    stale.append((idx, early))
        block = self.vgpr[first:first + count, g.sel]
        if stale:
            block = block.copy()
            for idx, early in stale:
                block[idx - first] = np.where(early[:, None], self.stale[idx][g.sel],
                                              block[idx - first])
        return block

    def read_s(self, g: Group, idx: int, inst: Instruction) -> np.ndarray:
        if idx in self.pending_s:
            self._check_pending(g, idx, inst, self.pending_s[idx], "s")
        return self.sgpr[idx][g.sel]

    def _check_pending(self, g: Group, idx: int, inst: Instruction, counts: np.ndarray,
                       file: str) -> None:
        waiting = counts[g.sel] > 0
        if waiting.any():
            entry = self.pending_by_reg.get((file, idx))
            name = self.vgpr_name(idx) if file == "v" else f"s{idx}"
            counter = entry.counter if entry else VMCNT
            self.report(g, waiting, "pending-load", inst, entry.pc if entry else -1,
                        entry.text if entry else "?", name,
                        f"its load is still in flight; add `s_waitcnt {counter}cnt(...)` "
                        f"that retires it before this instruction")
            if self.check == "warn":
                self._land(g.waves[waiting], file, idx)

    def _land(self, waves: np.ndarray, file: str, idx: int) -> None:
        """`warn` mode models the timing of real silicon: a load issued long ago has arrived even
        without its `s_waitcnt` (AMD's MoE kernels under-wait weight loads issued hundreds of
        MFMAs earlier). Retire, in issue order, every result of `waves` up to the youngest one
        that writes register `idx`, exactly as a `s_waitcnt` would."""
        for counter, queue in self.queue.items():
            youngest = np.full(self.waves, -1, np.int64)   # per wave: issue number to retire
            for entry in queue:
                if idx in (entry.vgprs if file == "v" else entry.sgprs):
                    rows = ~entry.done
                    np.maximum.at(youngest, entry.waves[rows], entry.seq[rows])
            through = np.full(self.waves, -1, np.int64)
            through[waves] = youngest[waves]
            if through.max() < 0:
                continue
            survivors = []
            for entry in queue:
                rows = ~entry.done & (entry.seq <= through[entry.waves])
                if rows.any():
                    self._retire(entry, rows, whole=False)
                if not entry.done.all():
                    survivors.append(entry)
            self.queue[counter] = survivors

    def write_v(self, g: Group, idx: int, value: Any, inst: Instruction, *,
                masked: bool = True) -> None:
        if idx in self.pending_v:
            self._check_pending(g, idx, inst, self.pending_v[idx], "v")
        if idx in self.mfma_producer and unit(inst.opcode) is not Unit.MFMA:
            self.read_v(g, idx, inst)
        if masked and not g.exec_full:
            value = np.where(g.exec, value, self.vgpr[idx][g.sel])
        self.vgpr[idx][g.sel] = value
        recent = g.recent_valu
        horizon = g.tick - isa.VALU_WRITE_HORIZON   # older writes cannot matter any more
        if recent and recent[0][0] < horizon:
            recent[:] = [entry for entry in recent if entry[0] >= horizon]
        recent.append((g.tick, idx, inst))

    def write_s(self, g: Group, idx: int, value: Any) -> None:
        self.sgpr[idx][g.sel] = value
        if idx in (isa.EXEC, isa.EXEC + 1):
            self.refresh_exec(g)

    # --- s_waitcnt ----------------------------------------------------------------------------
    def enqueue(self, g: Group, counter: str, commit: Callable[[np.ndarray], None] | None,
                inst: Instruction, *, vgprs: tuple[int, ...] = (),
                sgprs: tuple[int, ...] = ()) -> None:
        issued = self.issued[counter]
        seq = issued[g.sel].copy()
        uniform = int(seq[0]) if seq[0] == seq[-1] and (seq == seq[0]).all() else None
        entry = PendingResult(counter, g.waves, seq, np.zeros(g.n, bool), commit, vgprs, sgprs,
                              inst.address, inst.text or str(inst), g.sel, uniform)
        issued[g.sel] += 1
        self.outstanding[counter][g.sel] += 1
        for table, file, regs in ((self.pending_v, "v", vgprs), (self.pending_s, "s", sgprs)):
            for idx in regs:
                if idx not in table:
                    table[idx] = np.zeros(self.waves, np.int32)
                    self.pending_total[(file, idx)] = 0
                table[idx][g.sel] += 1
                self.pending_total[(file, idx)] += g.n
                self.pending_by_reg[(file, idx)] = entry
        self.queue[counter].append(entry)

    def wait(self, g: Group, counter: str, limit: int) -> None:
        """Retire, oldest first, the results of `counter` until at most `limit` are in flight."""
        outstanding = self.outstanding[counter][g.sel]
        if outstanding.max() <= limit:
            return
        issued = self.issued[counter][g.sel]
        # Fast path: every wave of the group issued the same number of results.
        uniform = int(issued[0]) - limit if (issued == issued[0]).all() else None
        threshold = None
        survivors = []
        for entry in self.queue[counter]:
            if (uniform is not None and entry.uniform is not None
                    and _same_waves(entry.sel, g.sel)):
                if entry.uniform < uniform and not entry.done.any():
                    self._retire(entry, np.ones(len(entry.waves), bool), whole=True)
            else:
                if threshold is None:
                    threshold = np.full(self.waves, -1, np.int64)
                    threshold[g.waves] = issued - limit
                rows = ~entry.done & (entry.seq < threshold[entry.waves])
                if rows.any():
                    self._retire(entry, rows, whole=False)
            if not entry.done.all():
                survivors.append(entry)
        self.queue[counter] = survivors

    def _retire(self, entry: PendingResult, rows: np.ndarray, *, whole: bool) -> None:
        if entry.commit is not None:
            entry.commit(rows)
        entry.done |= rows
        where = entry.sel if whole else entry.waves[rows]
        count = len(entry.waves) if whole else int(rows.sum())
        self.outstanding[entry.counter][where] -= 1
        for table, file, regs in ((self.pending_v, "v", entry.vgprs),
                                  (self.pending_s, "s", entry.sgprs)):
            for idx in regs:
                key = (file, idx)
                table[idx][where] -= 1
                self.pending_total[key] -= count
                if self.pending_total[key] == 0:
                    del table[idx], self.pending_total[key]
                    if self.pending_by_reg.get(key) is entry:
                        del self.pending_by_reg[key]

    def drain(self) -> None:
        """Retire everything (end of the launch): stores and atomics are already in memory."""
        for counter in COUNTERS:
            for entry in self.queue[counter]:
                rows = ~entry.done
                if rows.any():
                    self._retire(entry, rows, whole=False)
            self.queue[counter] = []


def _same_waves(a: Any, b: Any) -> bool:
    if isinstance(a, slice) and isinstance(b, slice):
        return a.start == b.start and a.stop == b.stop
    return False

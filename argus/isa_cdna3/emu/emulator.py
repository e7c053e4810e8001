"""Run a prepared launch of a gfx942 kernel on numpy: `run(program, launch, check=) -> Emulation`.

`load_program` compiles a kernel's instructions to executors once; `argus.asm.launch` prepares the
launch (arguments, grid, block) and owns `emulate(code_object, ...)`, the one-call front door.
All waves of all workgroups are resident at once; waves at the same PC execute together as one
group, groups take turns with the wave furthest behind going next (a divergent scalar branch
splits a group; `s_barrier` is a rendezvous per workgroup).
The initial state follows the HSA ABI: user SGPRs from the kernel descriptor, workgroup ids after
them, packed work-item ids in v0.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections import Counter
from typing import Any

import attrs
import numpy as np

from argus import env
from argus.isa_cdna3 import isa
from argus.isa_cdna3.abi import KernelInfo, Launch, LaunchError
from argus.isa_cdna3.emu.operands import OperandError
from argus.isa_cdna3.emu.semantics import (
    DIVERGED,
    compile_gpr_indexed,
    compile_instruction,
    is_vector,
)
from argus.isa_cdna3.emu.state import (
    AT_BARRIER,
    ENDED,
    RUNNING,
    EmulatorError,
    FlatMemory,
    Group,
    Hazard,
    Machine,
    UnsupportedOpcodeError,
)
from argus.isa_cdna3.emu.trace import EventTrace
from argus.isa_cdna3.instruction import Instruction
from argus.isa_cdna3.opcodes import Unit, unit

CHECK_MODES = ("strict", "warn", "off")
QUANTUM = 64    # wait states a group runs before waves at other PCs get their turn
#: instructions one wave may execute before the run counts as a run-away (a loop whose counter
#: never reaches its bound): AMD's largest kernels in the tests run some 10^4-10^5 per wave. A
#: spin that changes nothing (a wait on a flag no one sets) is caught much sooner, by
#: `SpinWatch`, whatever the grid.
MAX_WAVE_INSTRUCTIONS = 1 << 20
#: wave-instructions between two looks of `SpinWatch` at a group taking a backward branch
SPIN_CHECK_INTERVAL = 64
#: waves whose registers the emulator keeps at once (some 300 KiB each: 2^16 waves are 20 GB)
MAX_EMULATED_WAVES = 1 << 16
#: a launch of more waves than this runs its workgroups in chunks of at most this many waves,
#: one after the other on the same memory (2.4 GB of wave state at a time): workgroups of one
#: dispatch may not wait for each other, since the hardware does not promise they are resident
#: together either (a kernel that spins on another workgroup is caught by SpinWatch)
CHUNK_WAVES = 1 << 13


@attrs.define(eq=False)
class Emulation:
    """What a run produced: outputs are written back into the caller's arrays; this holds the
    trace (executions and bytes per PC), hazards found in `warn` mode and timing."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    workgroups: int
    waves: int
    seconds: float                # wall time of the execution loop
    cpu_seconds: float            # CPU time of this process during it (robust to a busy host)
    counts: dict[int, int]          # pc -> executions summed over waves
    bytes: dict[int, int]           # pc -> bytes moved by the memory instruction there
    hazards: list[Hazard]
    instructions: list[Instruction] = attrs.field(repr=False)
    per_wave: np.ndarray = attrs.field(repr=False, factory=lambda: np.zeros(0, np.int64))
    lds_cycles: dict[int, int] = attrs.field(factory=dict)   # pc -> LDS cycles (bank model)
    unmapped_accesses: int = 0      # lane accesses outside every buffer ("lenient" memory)
    events: EventTrace | None = attrs.field(default=None, repr=False)   # when trace=True

    def lds_conflict_factor(self, pc: int) -> float:
        """LDS cycles of the instruction at `pc` over the conflict-free minimum (1.0 = none)."""
        from argus.isa_cdna3.emu.memory_ops import lds_ideal_cycles

        by_pc = {ins.address: ins for ins in self.instructions}
        ideal = lds_ideal_cycles(by_pc[pc]) * self.counts.get(pc, 0)
        return self.lds_cycles[pc] / ideal if ideal else 1.0

    def wave_instruction_counts(self) -> np.ndarray:
        """Instructions each wave executed, indexed [workgroup, wave in workgroup]."""
        return self.per_wave.reshape(-1, self.workgroups).T

    @property
    def wave_instructions(self) -> int:
        return int(sum(self.counts.values()))

    @property
    def lane_instructions(self) -> int:
        return self.wave_instructions * isa.WAVE_SIZE

    @property
    def lane_instructions_per_second(self) -> float:
        return self.lane_instructions / self.seconds if self.seconds > 0 else float("inf")

    @property
    def bytes_moved(self) -> int:
        return int(sum(self.bytes.values()))

    def opcode_counts(self) -> Counter:
        """Executed wave-instructions per opcode."""
        by_pc = {ins.address: ins.opcode for ins in self.instructions}
        totals: Counter = Counter()
        for pc, count in self.counts.items():
            totals[by_pc[pc]] += count
        return totals


@attrs.frozen(eq=False)
class Program:
    """A kernel ready to run: its instructions and one executor per instruction. Executors hold
    no machine state, so one program serves every launch of the kernel."""

    kernel: KernelInfo
    instructions: list[Instruction]
    executors: list[Any]


def load_program(instructions: list[Instruction], info: KernelInfo) -> Program:
    """Compile a kernel's instructions, or raise UnsupportedOpcodeError listing every opcode form
    the emulator cannot run."""
    return Program(info, instructions, compile_program(instructions, info))


def compile_program(instructions: list[Instruction], info: KernelInfo) -> list[Any]:
    """Executors for every instruction, or UnsupportedOpcodeError listing all that are missing."""
    executors, missing = [], {}
    indexing: tuple[str, ...] = ()      # the operands M0 indexes, inside s_set_gpr_idx_on/off
    for inst in instructions:
        try:
            if inst.opcode in ("s_set_gpr_idx_on", "s_set_gpr_idx_off"):
                indexing = tuple(inst.mod("gpr_idx", ())) if inst.opcode.endswith("on") else ()
            if indexing and unit(inst.opcode) in (Unit.VALU, Unit.MFMA):
                executors.append(compile_gpr_indexed(inst, info.accum_offset, indexing))
                continue
            executors.append(compile_instruction(inst, info.accum_offset))
        except (OperandError, KeyError, ValueError, IndexError, TypeError) as err:
            reason = str(err).strip("'\"") if isinstance(err, OperandError) else "not implemented"
            key = inst.opcode if reason == "not implemented" else f"{inst.opcode} ({reason})"
            missing.setdefault(key, []).append(f"0x{inst.address:x}")
    if missing:
        raise UnsupportedOpcodeError(info.name, missing)
    if any(inst.opcode == "s_setvskip" for inst in instructions):
        executors = [_skippable(ex) if is_vector(inst) else ex
                     for inst, ex in zip(instructions, executors)]
    return executors


def _skippable(executor: Any) -> Any:
    """Run a vector instruction only for the waves whose VSKIP is clear."""
    def run(m: Machine, g: Group) -> Any:
        skip = m.vskip[g.sel]
        if not skip.any():
            return executor(m, g)
        if skip.all():
            return None
        exec_lanes, full = g.exec, g.exec_full
        g.exec, g.exec_full = exec_lanes & ~skip[:, None], False
        try:
            return executor(m, g)
        finally:
            g.exec, g.exec_full = exec_lanes, full
    return run


# ---------------------------------------------------------------------------------- launch
def _initial_state(m: Machine, info: KernelInfo, grid: tuple[int, int, int],
                   block: tuple[int, int, int], kernarg_addr: int, packet_addr: int,
                   groups: tuple[int, ...] | None = None) -> None:
    desc = info.descriptor
    user = []
    for name in desc.user_sgprs:
        if name == "private_segment_buffer":
            user += [0, 0, 0, 0]
        elif name == "private_segment_size":
            user += [0]
        elif name == "kernarg_segment_ptr":
            user += [kernarg_addr & 0xFFFFFFFF, kernarg_addr >> 32]
        elif name == "dispatch_ptr":
            user += [packet_addr & 0xFFFFFFFF, packet_addr >> 32]
        else:
            user += [0, 0]
    for s, value in enumerate(user[: desc.user_sgpr_count]):
        m.sgpr[s] = value
    wg = m.workgroup if groups is None else np.asarray(groups, np.int64)[m.workgroup]
    wg_id = np.stack([wg % grid[0], wg // grid[0] % grid[1], wg // (grid[0] * grid[1])])
    s = desc.user_sgpr_count
    for axis, enabled in enumerate(desc.workgroup_id_enabled):
        if enabled:
            m.sgpr[s] = wg_id[axis]
            s += 1
    threads = block[0] * block[1] * block[2]
    tid = m.wave_in_group[:, None] * isa.WAVE_SIZE + np.arange(isa.WAVE_SIZE)[None, :]
    x, y, z = tid % block[0], tid // block[0] % block[1], tid // (block[0] * block[1])
    m.vgpr[0] = (x | (y << 10) | (z << 20)).astype(np.uint32)
    lanes = tid < threads
    packed = np.packbits(lanes, axis=1, bitorder="little").view(np.uint32)
    m.sgpr[isa.EXEC] = packed[:, 0]
    m.sgpr[isa.EXEC + 1] = packed[:, 1]
    m.exec_lanes[:] = lanes
    m.pc[:] = info.entry


def _check_run_options(check: Any, memory: Any, max_wave_instructions: Any) -> None:
    if not isinstance(check, str) or check not in CHECK_MODES:
        raise LaunchError(f"check must be one of {CHECK_MODES}, got {check!r}")
    if not isinstance(memory, str) or memory not in ("strict", "lenient"):
        raise LaunchError(f"memory must be 'strict' or 'lenient', got {memory!r}")
    if (isinstance(max_wave_instructions, bool) or not isinstance(max_wave_instructions, int)
            or max_wave_instructions < 1):
        raise LaunchError(f"max_wave_instructions must be a whole number >= 1, got "
                          f"{max_wave_instructions!r}")


def _check_kernel_runs_here(info) -> None:
    """Refuse what the emulator does not model: scratch memory, wave32."""
    if info.private_segment_size:
        raise LaunchError(f"kernel {info.name} uses {info.private_segment_size} bytes of "
                          f"scratch per work-item; scratch memory is not emulated",
                          kind="unsupported")
    if info.wavefront_size != isa.WAVE_SIZE:
        raise LaunchError(f"kernel {info.name} is wave{info.wavefront_size}; gfx942 runs wave64",
                          kind="unsupported")


def run(program: Program, launch: Launch, *, check: str = "strict",
        max_wave_instructions: int = MAX_WAVE_INSTRUCTIONS, bank_conflicts: bool = False,
        memory: str = "strict", trace: bool = False) -> Emulation:
    """Run `launch` (an `abi.Launch` from `argus.asm.launch.prepare`) of `program` to the end.

    Argument arrays become device buffers and are written back in place. `check`, `memory`,
    `bank_conflicts`, `trace` and `max_wave_instructions` are described at
    `argus.asm.launch.emulate`.
    """
    _check_run_options(check, memory, max_wave_instructions)
    info, grid3, block3 = launch.kernel, launch.grid, launch.block
    _check_kernel_runs_here(info)
    per_chunk = max(1, CHUNK_WAVES // launch.waves_per_group)
    if launch.workgroups > per_chunk and not trace:
        ids = launch.groups if launch.groups is not None else range(launch.workgroups)
        parts = [run(program, attrs.evolve(launch, groups=tuple(ids[i:i + per_chunk])),
                     check=check, max_wave_instructions=max_wave_instructions,
                     bank_conflicts=bank_conflicts, memory=memory)
                 for i in range(0, len(ids), per_chunk)]
        return _joined(parts, launch.workgroups)
    instructions, executors = program.instructions, program.executors
    buffers = launch.buffers
    memory = FlatMemory([(name, value.nbytes) for name, value in buffers]
                        + [("kernarg", len(launch.kernarg_image)), ("dispatch packet", 64)],
                        lenient=memory == "lenient")
    for index, (_, value) in enumerate(buffers):
        memory.fill(index, value.reshape(-1).view(np.uint8))
    kernarg_addr = memory.address(len(buffers))
    packet_addr = memory.address(len(buffers) + 1)
    kernarg = launch.kernarg([memory.address(i) for i in range(len(buffers))])
    memory.view(len(buffers))[:] = np.frombuffer(kernarg, np.uint8)
    memory.view(len(buffers) + 1)[:] = np.frombuffer(launch.dispatch_packet(kernarg_addr),
                                                     np.uint8)

    workgroups, waves_per_group = launch.workgroups, launch.waves_per_group
    if workgroups * waves_per_group > MAX_EMULATED_WAVES:
        raise LaunchError(f"kernel {info.name}: {workgroups} workgroups of {waves_per_group} "
                          f"waves are more than the {MAX_EMULATED_WAVES} waves the emulator "
                          "holds in memory at once",
                          fix="trace a smaller grid (a traced run keeps every wave's state "
                              "at once; an untraced one runs in chunks of CHUNK_WAVES)")
    try:
        m = Machine(waves=workgroups * waves_per_group, workgroups=workgroups,
                    waves_per_group=waves_per_group, lds_bytes=info.group_segment_size,
                    memory=memory, accum_offset=info.accum_offset, check=check)
    except MemoryError:
        raise LaunchError(f"kernel {info.name}: the state of {workgroups} workgroups of "
                          f"{waves_per_group} waves does not fit in this machine's memory",
                          fix="emulate a smaller grid") from None
    _initial_state(m, info, grid3, block3, kernarg_addr, packet_addr, launch.groups)
    if bank_conflicts or trace:
        m.lds_cycles = {}
    if trace:
        m.trace = EventTrace(m.workgroup, m.wave_in_group)

    start, cpu_start = time.perf_counter(), time.process_time()
    with np.errstate(all="ignore"):  # IEEE overflow/NaN are results here, not Python errors
        counts = _run(m, instructions, executors, max_wave_instructions, info)
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start
    m.drain()
    for index, (_, value) in enumerate(buffers):
        memory.drain_into(index, value.reshape(-1).view(np.uint8))
    trace = {ins.address: int(c) for ins, c in zip(instructions, counts) if c}
    return Emulation(info.name, grid3, block3, workgroups, m.waves, seconds, cpu_seconds, trace,
                     dict(m.bytes_moved), list(m.hazards), instructions, m.executed.copy(),
                     dict(m.lds_cycles or {}), memory.unmapped_accesses, m.trace)


def _joined(parts: list[Emulation], workgroups: int) -> Emulation:
    """One Emulation of a launch run in chunks (`CHUNK_WAVES`): counts, bytes and cycles
    summed per PC, hazards and per-wave counts in chunk order."""
    def summed(field: str) -> dict[int, int]:
        total: dict[int, int] = {}
        for part in parts:
            for pc, n in getattr(part, field).items():
                total[pc] = total.get(pc, 0) + n
        return total

    first = parts[0]
    return Emulation(first.kernel, first.grid, first.block, workgroups,
                     sum(p.waves for p in parts), sum(p.seconds for p in parts),
                     sum(p.cpu_seconds for p in parts), summed("counts"), summed("bytes"),
                     [h for p in parts for h in p.hazards], first.instructions,
                     np.concatenate([p.per_wave for p in parts]), summed("lds_cycles"),
                     sum(p.unmapped_accesses for p in parts))


def _run(m: Machine, instructions: list[Instruction], executors: list[Any],
         limit: int, info: KernelInfo) -> np.ndarray:
    """Execute groups of waves until every wave has ended: each group runs from its PC for a
    turn of QUANTUM clocks (or until it diverges), then hands over to waves at other PCs."""
    name = info.name
    index_of = {ins.address: i for i, ins in enumerate(instructions)}
    watch = SpinWatch(m, info.unified_vgpr_count)
    next_pc = [ins.next_address for ins in instructions]
    ticks = [isa.nop_wait_states(ins.opcode, ins.operands) for ins in instructions]
    counts = np.zeros(len(instructions), np.int64)
    per_wave = m.executed
    debug = env.debug_level() >= 4
    group: Group | None = None
    parked: dict[bytes, list] = {}      # recent VALU writes of groups that handed over their turn
    while True:
        if group is None:
            group = _next_group(m, name)
            if group is None:
                return counts
            group.recent_valu = parked.pop(group.waves.tobytes(), [])
            turn_ends = QUANTUM
        i = index_of.get(group.pc)
        if i is None:
            raise EmulatorError(f"kernel {name}: waves {group.waves[:4].tolist()} jumped to "
                                f"0x{group.pc:x}, which is not an instruction of the kernel")
        if debug:
            print(f"[emu] pc 0x{group.pc:x} waves {group.n}: {instructions[i].text}",
                  file=sys.stderr)
        result = executors[i](m, group)
        if m.trace is not None:
            m.trace.event(i, group.waves)
        counts[i] += group.n
        per_wave[group.sel] += 1
        group.tick += ticks[i]
        if result is None:
            group.pc = next_pc[i]
        elif result == DIVERGED:
            m.clock[group.sel] += group.tick
            group = None
            continue
        else:
            _branch(group, result, watch, name, instructions, i, index_of)
        if group.tick >= turn_ends:
            turn_ends += QUANTUM
            if _hand_over(m, group, parked):
                group = None
                continue
        if per_wave[group.waves[0]] > limit:
            raise _run_away(name, group, counts, instructions, index_of, limit)


def _branch(group: Group, target: int, watch: SpinWatch, name: str,
            instructions: list[Instruction], i: int, index_of: dict) -> None:
    """A taken branch: a backward one is where a loop without effect is caught."""
    if target < group.pc and watch.spins(group, target):
        raise _spin(name, group, target, instructions[i], instructions[index_of[target]])
    group.pc = target


def _hand_over(m: Machine, group: Group, parked: dict) -> bool:
    """End the group's turn if waves at other PCs can run, keeping its PC, clock and the VALU
    writes an MFMA or DPP may still have to wait for; whether it handed over.

    Silicon runs waves at other PCs concurrently, and AMD's kernels lean on it (fmoe_b16
    overwrites LDS right after a barrier that other waves are still reading behind): running
    one group to its next barrier, or to the end, would break that."""
    if (m.state == RUNNING).sum() <= group.n:
        return False
    m.pc[group.sel] = group.pc
    m.clock[group.sel] += group.tick
    # on the waves' own clock
    horizon = group.tick - isa.VALU_WRITE_HORIZON
    parked[group.waves.tobytes()] = [(tick - group.tick, reg, inst) for tick, reg, inst
                                     in group.recent_valu if tick >= horizon]
    return True


def _run_away(name, group, counts, instructions, index_of, limit) -> EmulatorError:
    """The error for waves that outran the budget, naming where they loop: their PC and the
    most executed instruction (inside the loop they spin in)."""
    hottest = instructions[int(np.argmax(counts))]
    here = instructions[index_of[group.pc]]
    return EmulatorError(
        f"kernel {name}: waves {group.waves[:4].tolist()} executed more than {limit} "
        f"instructions each without finishing; they loop at pc 0x{here.address:x} "
        f"(`{here.text}`), most executed 0x{hottest.address:x} (`{hottest.text}`): an endless "
        "loop (a bound never reached), or pass a larger max_wave_instructions")


def _spin(name, group, head, branch, first) -> EmulatorError:
    return EmulatorError(
        f"kernel {name}: waves {group.waves[:4].tolist()} spin forever in the loop at pc "
        f"0x{head:x} (`{first.text}`), closed by 0x{branch.address:x} (`{branch.text}`): after "
        "an iteration their registers, LDS and memory are exactly as before and no other wave "
        "can run to change them (a wait on a value nobody writes)")


class SpinWatch:
    """Finds a group that loops without effect: at a backward branch its registers, every
    wave's LDS and global memory equal what they were at the same branch an iteration or more
    earlier, nothing is in flight, and no other wave ran in between or can run. Execution is
    deterministic, so the loop never ends. Registers are compared first (cheap, and a real
    loop's counters and addresses differ every iteration); memory is hashed only once they
    repeat, so a real kernel pays for a compare of its SGPRs every `SPIN_CHECK_INTERVAL`."""

    def __init__(self, m: Machine, vgprs: int):
        self.m = m
        self.vgprs = min(max(vgprs, 1), isa.VGPRS_UNIFIED)
        self.due = SPIN_CHECK_INTERVAL
        self.seen: dict[tuple[int, bytes], tuple[np.ndarray, int, bytes | None]] = {}

    def spins(self, group: Group, head: int) -> bool:
        m = self.m
        executed = int(m.executed[group.waves[0]])
        if executed < self.due:
            return False
        self.due = executed + SPIN_CHECK_INTERVAL
        if (np.count_nonzero(m.state == RUNNING) != group.n
                or any(m.outstanding[c][group.sel].any() for c in m.outstanding)):
            return False
        sel = group.sel
        light = np.concatenate([m.sgpr[:, sel].ravel(), m.scc[sel], m.vskip[sel],
                                m.vgpr[:self.vgprs, group.waves[0]].ravel()])
        others = int(m.executed.sum()) - int(m.executed[sel].sum())
        key = (head, group.waves.tobytes())
        before = self.seen.get(key)
        if before is None or before[1] != others or not np.array_equal(before[0], light):
            if len(self.seen) > 16:
                self.seen.clear()
            self.seen[key] = (light, others, None)
            return False
        digest = hashlib.blake2b(digest_size=16)
        for part in (m.vgpr[:self.vgprs, sel], m.lds, m.memory.heap):
            digest.update(np.ascontiguousarray(part).data)
        heavy = digest.digest()
        if before[2] == heavy:
            return True
        self.seen[key] = (light, others, heavy)
        return False


def _next_group(m: Machine, name: str) -> Group | None:
    _release_barriers(m)
    running = m.state == RUNNING
    if not running.any():
        if (m.state == AT_BARRIER).any():
            stuck = np.flatnonzero(m.state == AT_BARRIER)[:4]
            raise EmulatorError(f"kernel {name}: deadlock, waves {stuck.tolist()} wait at "
                                f"s_barrier but their workgroup can never arrive")
        return None
    # the waves furthest behind go next; all waves at their PC join them
    behind = int(np.argmin(np.where(running, m.clock, np.iinfo(np.int64).max)))
    pc = int(m.pc[behind])
    waves = np.flatnonzero(running & (m.pc == pc))
    group = Group(waves, m.waves, pc)
    group.exec = m.exec_lanes[group.sel]
    group.exec_full = bool(group.exec.all())
    return group


def _release_barriers(m: Machine) -> None:
    waiting = m.state == AT_BARRIER
    if not waiting.any():
        return
    groups = m.lds.shape[0]
    arrived = np.bincount(m.workgroup, weights=waiting, minlength=groups)
    alive = np.bincount(m.workgroup, weights=m.state != ENDED, minlength=groups)
    ready = (arrived > 0) & (arrived == alive)
    release = waiting & ready[m.workgroup]
    m.state[release] = RUNNING

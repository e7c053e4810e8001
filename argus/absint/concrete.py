"""The concrete reference interpreter: runs tile IR with numpy for every thread and slot.

Values and concrete tags travel together; tag assertions, LDS races (by barrier epoch), global
write/write races between workgroups, uninitialised LDS reads and out-of-bounds accesses are
reported with workgroup, wave, lane, slot, element and op location. Workgroups run one after
another, their waves in lock step op by op, vectorised over (wave, lane, slot): the oracle the
verifier is tested against. With waits, bare barriers or async copies (`absint.sync`) every LDS
write and global store stays in flight as long as its wait allows, so other waves read the old
contents: the schedule in which a missing wait shows in the data.
"""

from __future__ import annotations

import numpy as np

from argus.absint.interp.asserts import Assertions
from argus.absint.interp.compute import MOVED_WITH_DATA, RESULT_TAGS, Compute
from argus.absint.interp.lds import Lds
from argus.absint.interp.memory import Memory, repeated_entries
from argus.absint.interp.state import (
    ABSENT,
    TOP,
    Clock,
    GlobalInFlight,
    InFlight,
    InterpError,
    RegVal,
    RunResult,
    Violation,
    first,
    register_name,
    to_dtype,
    truncated_bf16,
)
from argus.absint.interp.sync import Sync
from argus.absint.rules import Walker, rule
from argus.absint.sync import uses_clock
from argus.ir import ops as O
from argus.ir.bind import sizes_of
from argus.ir.expr import Expr, evaluate
from argus.ir.types import LANES, GlobalType
from argus.isa_cdna3.numerics import NUMPY_DTYPES


class _Workgroup(Memory, Lds, Sync, Compute, Assertions, Walker):
    """Executes the kernel body for one workgroup: each op by its rule (`argus.absint.rules`),
    the rules grouped by concern in `argus.absint.interp`."""

    WHAT = "the interpreter"
    ERROR = InterpError

    def __init__(self, run: _Run, pid: tuple[int, ...]):
        self.run, self.pid = run, pid
        self.env: dict[str, int] = dict(run.sizes)
        self.values: dict[str, object] = {}
        self.loops: list[str] = []
        self.epoch = 0
        #: per group barrier passed (`T.group_barrier`), which waves were in its group
        self.group_members: list[np.ndarray] = []
        #: per written tensor, the workgroup's own accesses: (writer, write epoch, write op,
        #: whether it added atomically, reader, read epoch, write ticket: the wait count that
        #: lands the write, with the clock) per element (`global_order`)
        self.own: dict[str, tuple[np.ndarray, ...]] = {}
        self.waves = run.kernel.waves
        thread = np.arange(self.waves)[:, None, None] * LANES + np.arange(LANES)[None, :, None]
        self.thread = thread
        #: the memory-ordering clock (`absint.sync.Clock`, concrete; None: classic epochs)
        #: and the LDS writes in flight, oldest first. With the clock the waves run in the
        #: schedule that delays every write as long as its wait allows: other threads read the
        #: old contents until it lands (its own thread sees its plain stores at once)
        self.clock = Clock() if run.uses_clock else None
        self.flying: list[InFlight] = []
        self.issued = 0  # LDS writes issued so far (their `seq`)
        #: writes landed but not yet published to the other waves by a barrier
        self.unpublished: list[InFlight] = []
        #: global stores in flight (with the clock), oldest first: other waves load the old
        #: values until the storing wave's next wait lands them
        self.global_flying: list[GlobalInFlight] = []

    def report(self, op, kind: str, message: str, mask: np.ndarray, *, element=None, tags=None,
               detail: str = "", position=None, axes=("wave", "lane", "slot"),
               other_loc: str = "", loc=None, assertion: int = -1):
        """Record a violation at the first (wave, lane, slot) where `mask` holds; at `loc`
        (a tag assertion's own line) or else the op's."""
        if self.run.full:
            return
        where = position if position is not None else first(mask)
        wave, lane, slot = (tuple(where) + (0, 0, 0))[:3]
        info_element = element(where) if callable(element) else (element or {})
        info_tags = tags(where) if callable(tags) else (tags or {})
        self.run.add(Violation(
            kind=kind, message=message, loc=str(loc or op.loc), workgroup=self.pid,
            wave=int(wave),
            lane=int(lane), slot=int(slot), register=register_name(op, int(slot)),
            iteration={name: self.env[name] for name in self.loops}, element=info_element,
            tags=info_tags, detail=detail, count=int(np.count_nonzero(mask)),
            failing=np.packbits(mask), failing_shape=tuple(mask.shape), axes=axes,
            other_loc=other_loc, assertion=assertion))

    def execute(self, block: O.Block):
        for op in block.ops:
            if self.run.full:
                return None
            if isinstance(op, O.Yield):
                return [self.values[v.name] for v in op.values]
            handler = self.rule_for(op)
            if handler is None:
                raise self.no_rule(op)
            handler(self, op)
        return None

    def scalar(self, e: Expr) -> int:
        return int(evaluate(e, self.env))

    @rule(O.ProgramId)
    def on_program_id(self, op: O.ProgramId):
        self.env[op.var.name] = self.pid[op.axis]

    @rule(O.TagDef)
    def on_tag_def(self, op: O.TagDef):
        self.run.tensor_tags[op.tensor.name] = op.tags

    @rule(O.For)
    def on_for(self, op: O.For):
        carried = [self.values[v.name] for v in op.inits]
        start, stop = self.scalar(op.start), self.scalar(op.stop)
        self.loops.append(op.iv.name)
        for i in range(start, stop, op.step):
            self.env[op.iv.name] = i
            for arg, value in zip(op.body.args, carried):
                self.values[arg.name] = value
            carried = self.execute(op.body)
            if carried is None:
                break
        self.loops.pop()
        self.env.pop(op.iv.name, None)
        if carried is not None:
            for result, value in zip(op.results, carried):
                self.values[result.name] = value

    @rule(O.If)
    def on_if(self, op: O.If):
        branch = op.then if self.scalar(op.cond) else op.orelse
        produced = self.execute(branch)
        for result, value in zip(op.results, produced or ()):
            self.values[result.name] = value


class _Run:
    def __init__(self, kernel, arrays, sizes, max_violations):
        #: id of a memory op -> its access formula and coordinate table (`_Workgroup.access`)
        self.accesses: dict = {}
        self.kernel, self.arrays, self.sizes = kernel, arrays, sizes
        self.uses_clock = uses_clock(kernel)
        self.max_violations = max_violations
        self.violations: list[Violation] = []
        self.tensor_tags: dict = {}
        self.ops = list(kernel.ops())
        self._index = {id(op): n for n, op in enumerate(self.ops)}
        self.owners: dict[str, np.ndarray] = {}
        self.readers: dict[str, np.ndarray] = {}
        # only tensors some op stores to (plainly or atomically) can race with a read
        self.stored = {op.tensor.name for op in self.ops if isinstance(op, O.GlobalStore)}
        self.adders: dict[str, np.ndarray] = {}
        #: per op index (and -1, nothing written): whether it is an LDS atomic add
        self.lds_atomic = np.array([isinstance(op, O.LdsAtomicAdd) for op in self.ops]
                                   + [False])
        self.seen: list[tuple[int, ...]] = []
        self.done: set[int] = set()

    def first_time(self, op) -> bool:
        """Whether `op` runs for the first time in this launch (for once-per-run checks)."""
        index = self.op_index(op)
        if index in self.done:
            return False
        self.done.add(index)
        return True

    def workgroup_index(self, pid: tuple[int, ...]) -> int:
        if not self.seen or self.seen[-1] != pid:
            self.seen.append(pid)
        return len(self.seen) - 1

    def workgroup_of(self, index: int) -> tuple[int, ...]:
        return self.seen[index]

    @property
    def full(self) -> bool:
        return len(self.violations) >= self.max_violations

    def add(self, violation: Violation):
        self.violations.append(violation)

    def op_index(self, op) -> int:
        return self._index[id(op)]

    def op_loc(self, index: int) -> str:
        return str(self.ops[index].loc) if index >= 0 else "?"


def run(kernel: O.Kernel, inputs: dict[str, np.ndarray], scalars: dict[str, int] | None = None,
        *, max_violations: int = 20, workgroups=None) -> RunResult:
    """Execute `kernel` on `inputs` (one array per tensor argument; outputs are updated copies).

    `workgroups` restricts the run to some workgroup ids (for replaying a counterexample).
    """
    sizes = {**(scalars or {}), **sizes_of(kernel, inputs, scalars, error=InterpError)}
    arrays = {t.name: to_dtype(np.asarray(inputs[t.name], np.float32), t.type.dtype).copy()
              for t in kernel.tensors}
    state = _Run(kernel, arrays, sizes, max_violations)
    grid = [int(evaluate(g, sizes)) for g in kernel.grid]
    pids = workgroups if workgroups is not None else np.ndindex(*grid)
    for pid in pids:
        if state.full:
            break
        pid = tuple(int(p) for p in pid) + (0,) * (3 - len(grid))
        workgroup = _Workgroup(state, pid)
        workgroup.execute(kernel.body)
        workgroup.land_global()  # the kernel's end: every store lands
    outputs = {t.name: arrays[t.name].astype(NUMPY_DTYPES[t.type.dtype]) for t in kernel.tensors
               if isinstance(t.type, GlobalType)}
    return RunResult(outputs, tuple(state.violations), sizes)


def zero_inputs(kernel: O.Kernel, sizes: dict[str, int]) -> dict[str, np.ndarray]:
    """Zero arrays of the right shapes for every tensor argument (tags do not depend on data)."""
    arrays = {}
    for tensor in kernel.tensors:
        shape = tuple(int(evaluate(e, sizes)) for e in tensor.type.shape)
        arrays[tensor.name] = np.zeros(shape, NUMPY_DTYPES[tensor.type.dtype])
    return arrays


def replay(kernel: O.Kernel, sizes: dict[str, int], workgroup: tuple[int, ...],
           scalars: dict[str, int] | None = None, inputs: dict[str, np.ndarray] | None = None,
           max_violations: int = 20) -> RunResult:
    """Run one workgroup (for confirming a verifier counterexample); zero data by default."""
    inputs = inputs if inputs is not None else zero_inputs(kernel, {**sizes, **(scalars or {})})
    return run(kernel, inputs, scalars, max_violations=max_violations, workgroups=[workgroup])


__all__ = ["run", "replay", "zero_inputs", "RunResult", "Violation", "InterpError",
           "TOP", "ABSENT", "to_dtype", "truncated_bf16", "repeated_entries", "RESULT_TAGS",
           "MOVED_WITH_DATA", "Clock", "RegVal", "InFlight", "GlobalInFlight"]

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

import json
import re
from functools import lru_cache

import attrs
import numpy as np

from argus.absint.sync import uses_clock
from argus.ir import access as A
from argus.ir import ops as O
from argus.ir.bind import sizes_of
from argus.ir.expr import Const, Expr, Var, evaluate, free_vars
from argus.ir.text import expr_text
from argus.ir.transfer import cover_names, cover_union
from argus.ir.types import (
    DTYPE_BYTES,
    LANES,
    GlobalType,
    IRError,
    RegType,
    ThreadLayout,
    Value,
)
from argus.isa_cdna3 import numerics
from argus.isa_cdna3.numerics import ELEMENT_DTYPES

#: Tag value of an element whose tags are unknown (⊤): a racy LDS read, an out-of-bounds load.
TOP = np.iinfo(np.int64).min
#: An LDS element's tag name that the last write there did not carry.
ABSENT = TOP + 1
_MANY = -2  # several threads read one LDS address within one barrier epoch


class InterpError(IRError):
    """The kernel cannot be run as given (missing input, unsatisfied assumption, bad IR shape)."""


@attrs.frozen
class Violation:
    """One defect found at run time, located like a verifier counterexample."""

    #: tag-assertion, tag-missing, lds-race, lds-uninitialised, async-pending, global-race,
    #: out-of-bounds, distinct (index data that breaks a `T.distinct` declaration),
    #: indirect-row (a row id in registers that is not the index entry its tag names)
    kind: str
    message: str
    loc: str
    workgroup: tuple[int, ...]
    wave: int
    lane: int
    slot: int
    iteration: dict = attrs.field(factory=dict)
    element: dict = attrs.field(factory=dict)
    tags: dict = attrs.field(factory=dict)
    detail: str = ""
    count: int = 1
    #: the other op of a race (the writer of a read-after-write, the reader of a
    #: write-after-read), "" when unknown or not a race
    other_loc: str = ""
    #: the slot as a register of the tile: "register 2 (bf16 element 1)"
    register: str = ""
    #: every failing point of this op execution, a bit per point of `failing_shape` (packed:
    #: a replay may keep thousands of these)
    failing: np.ndarray | None = attrs.field(default=None, eq=False, repr=False)
    failing_shape: tuple[int, ...] = ()
    axes: tuple[str, ...] = ("wave", "lane", "slot")
    #: which of the op's tag assertions failed (its index in `op.asserts`); -1 for other kinds
    assertion: int = -1

    def fails_at(self, **point: int) -> bool:
        """Whether the op execution fails at this point, e.g. wave=1, lane=37, slot=2 (for an
        MFMA assertion: wave, block, i, j, k) — for confirming a verifier's witness."""
        if self.failing is None:
            return False
        missing = set(self.axes) - set(point)
        if missing:
            raise KeyError(f"give every coordinate of {self.axes}; missing {sorted(missing)}")
        index = tuple(point[a] if n > 1 else 0 for a, n in zip(self.axes, self.failing_shape))
        flat = int(np.ravel_multi_index(index, self.failing_shape))
        return bool(self.failing[flat // 8] >> (7 - flat % 8) & 1)

    def __str__(self) -> str:
        loops = "  ".join(f"{name}={value}" for name, value in self.iteration.items())
        element = ", ".join(f"{k}={v}" for k, v in self.element.items())
        lines = [f"{self.loc}: {self.message}",
                 f"  workgroup {self.workgroup}  wave {self.wave}  lane {self.lane}  "
                 f"slot {self.slot}" + (f" = {self.register}" if self.register else "")
                 + (f"  {loops}" if loops else ""),
                 f"  element ({element})"]
        for role, tags in self.tags.items():
            lines.append(f"  {role}: ({_show_tags(tags)})")
        if self.detail:
            lines.append(f"  {self.detail}")
        if self.count > 1:
            lines.append(f"  ({self.count} elements violate it at this op execution)")
        return "\n".join(lines)

    def to_json(self) -> str:
        record = attrs.asdict(self, filter=lambda field, _: field.name not in ("failing",))
        return json.dumps(record, default=str)


def _show_tags(tags: dict) -> str:
    return ", ".join(f"{k}=⊤" if v is None else f"{k}={v}" for k, v in tags.items())


@attrs.frozen
class RunResult:
    outputs: dict[str, np.ndarray]
    violations: tuple[Violation, ...]
    sizes: dict[str, int]

    @property
    def ok(self) -> bool:
        return not self.violations

    def report(self) -> str:
        if self.ok:
            return "no violations"
        return "\n".join(str(v) for v in self.violations)


@attrs.frozen
class Clock:
    """The concrete memory-ordering clock of a workgroup (`absint.sync.Clock` has the meaning
    of each count)."""

    waits: int = 0
    published: int = 0
    groups: int = 0
    retired: int = 0
    retired_published: int = 0


@attrs.frozen
class _InFlight:
    """An LDS write not landed yet (with the clock): an async copy (its group) or a plain store
    (landed by the next wait; its ticket is the wait count at issue); destination addresses
    (in bounds), the threads that write them, the data and tags, the issuing op's index."""

    copy: bool
    ticket: int
    buffer: str
    addr: np.ndarray = attrs.field(eq=False)
    thread: np.ndarray = attrs.field(eq=False)
    data: np.ndarray = attrs.field(eq=False)
    tags: dict = attrs.field(eq=False)
    op: int
    seq: int  # issue order among the workgroup's LDS writes


@attrs.frozen
class _GlobalInFlight:
    """A global store not landed yet (with the clock): the elements of `tensor` it writes (flat
    indices), the threads that write them and the data; it lands at its wave's next wait."""

    tensor: str
    flat: np.ndarray = attrs.field(eq=False)
    thread: np.ndarray = attrs.field(eq=False)
    data: np.ndarray = attrs.field(eq=False)


def _landing(write: _InFlight, keep: np.ndarray) -> _InFlight:
    """`write` restricted to the elements `keep` selects."""
    return attrs.evolve(write, addr=write.addr[keep], thread=write.thread[keep],
                        data=write.data[keep], tags={n: t[keep] for n, t in write.tags.items()})


#: `LdsState.pending_group` of an address whose newest write in flight is a plain store
_STORE = -3


@attrs.define
class RegVal:
    """A register tile's data and tags, each of shape (waves, 64, slots)."""

    data: np.ndarray
    tags: dict[str, np.ndarray]


@attrs.define
class LdsState:
    """An LDS allocation with its shadow state for the race detector."""

    data: np.ndarray
    tags: dict[str, np.ndarray]
    written: np.ndarray
    write_epoch: np.ndarray
    writer: np.ndarray
    write_op: np.ndarray
    read_epoch: np.ndarray
    reader: np.ndarray
    #: the op that read each address in its read epoch (_MANY when several did)
    read_op: np.ndarray
    #: with the memory-ordering clock (`absint.sync`): the wait count or copy group that
    #: landed the last write, whether it was a copy, and per address the newest write still
    #: in flight: its copy group (_STORE for a plain store, -1: none) and its thread
    ticket: np.ndarray
    copied: np.ndarray
    pending_group: np.ndarray
    pending_thread: np.ndarray
    #: issue order of the last landed write and of the newest one in flight (-1: none): a
    #: read sees whichever was issued last
    seq: np.ndarray
    pending_seq: np.ndarray
    #: how many group barriers (`T.group_barrier`) the workgroup had passed at the last write
    #: and at the last read of each address
    write_groups: np.ndarray | None = None
    read_groups: np.ndarray | None = None

    @classmethod
    def fresh(cls, size: int) -> LdsState:
        def ints(fill):
            return np.full(size, fill, dtype=np.int64)
        return cls(np.zeros(size, np.float32), {}, np.zeros(size, bool), ints(-1), ints(-1),
                   ints(-1), ints(-1), ints(-1), ints(-1), ints(-1), np.zeros(size, bool),
                   ints(-1), ints(-1), ints(-1), ints(-1), ints(0), ints(0))


def to_dtype(data: np.ndarray, dtype: str) -> np.ndarray:
    """Round float32 data to `dtype` (nearest even; fp8/bf8 are gfx942's fnuz formats) and hold
    it as float32 again, the interpreter's carrier for every element type."""
    data = np.asarray(data, np.float32)
    if dtype == "i32":
        return np.trunc(data).astype(np.float32)
    with np.errstate(all="ignore"):
        return data.astype(NUMPY_DTYPES[dtype]).astype(np.float32)


def truncated_bf16(data: np.ndarray) -> np.ndarray:
    """f32 -> bf16 toward zero: the high 16 bits kept (a NaN whose payload lies in the low
    bits becomes an infinity, as the hardware's v_perm_b32 packing makes it), as float32."""
    bits = np.asarray(data, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


NUMPY_DTYPES = {name: ELEMENT_DTYPES[name] for name in DTYPE_BYTES}


@lru_cache(maxsize=512)
def _layout_table(layout: ThreadLayout) -> tuple[np.ndarray, ...]:
    return layout.table()


@lru_cache(maxsize=64)
def _mfma_positions(instr: str):
    """Per operand: (lane, slot) grids and the (block, row, col) each holds, from the catalogue."""
    from argus.isa_cdna3.mfma import mfma

    info = mfma(instr)
    lane_k, slot_k = np.meshgrid(np.arange(LANES), np.arange(info.k_per_lane), indexing="ij")
    lane_c, slot_c = np.meshgrid(np.arange(LANES), np.arange(info.c_values), indexing="ij")
    a = tuple(np.asarray(c) + np.zeros_like(lane_k) for c in info.a_coord(lane_k, slot_k))
    b = tuple(np.asarray(c) + np.zeros_like(lane_k) for c in info.b_coord(lane_k, slot_k))
    c = tuple(np.asarray(x) + np.zeros_like(lane_c) for x in info.c_coord(lane_c, slot_c))
    return info, (lane_k, slot_k), a, b, (lane_c, slot_c), c


def _safe(tag: np.ndarray) -> np.ndarray:
    return np.where(tag == TOP, 0, tag)


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


class _Workgroup:
    """Executes the kernel body for one workgroup."""

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
        self.flying: list[_InFlight] = []
        self.issued = 0  # LDS writes issued so far (their `seq`)
        #: writes landed but not yet published to the other waves by a barrier
        self.unpublished: list[_InFlight] = []
        #: global stores in flight (with the clock), oldest first: other waves load the old
        #: values until the storing wave's next wait lands them
        self.global_flying: list[_GlobalInFlight] = []

    # reporting

    def report(self, op, kind: str, message: str, mask: np.ndarray, *, element=None, tags=None,
               detail: str = "", position=None, axes=("wave", "lane", "slot"),
               other_loc: str = "", loc=None, assertion: int = -1):
        """Record a violation at the first (wave, lane, slot) where `mask` holds; at `loc`
        (a tag assertion's own line) or else the op's."""
        if self.run.full:
            return
        where = position if position is not None else _first(mask)
        wave, lane, slot = (tuple(where) + (0, 0, 0))[:3]
        info_element = element(where) if callable(element) else (element or {})
        info_tags = tags(where) if callable(tags) else (tags or {})
        self.run.add(Violation(
            kind=kind, message=message, loc=str(loc or op.loc), workgroup=self.pid,
            wave=int(wave),
            lane=int(lane), slot=int(slot), register=_register(op, int(slot)),
            iteration={name: self.env[name] for name in self.loops}, element=info_element,
            tags=info_tags, detail=detail, count=int(np.count_nonzero(mask)),
            failing=np.packbits(mask), failing_shape=tuple(mask.shape), axes=axes,
            other_loc=other_loc, assertion=assertion))

    # execution

    def execute(self, block: O.Block):
        for op in block.ops:
            if self.run.full:
                return None
            if isinstance(op, O.Yield):
                return [self.values[v.name] for v in op.values]
            handler = getattr(self, "op_" + type(op).__name__, None)
            if handler is None:
                raise InterpError(f"{op.loc}: {op.mnemonic}: the interpreter has no rule for "
                                  "this op")
            handler(op)
        return None

    def scalar(self, e: Expr) -> int:
        return int(evaluate(e, self.env))

    def op_ProgramId(self, op: O.ProgramId):
        self.env[op.var.name] = self.pid[op.axis]

    def op_TagDef(self, op: O.TagDef):
        self.run.tensor_tags[op.tensor.name] = op.tags

    def op_TagTile(self, op: O.TagTile):
        x = self.values[op.x.name]
        self.values[op.result.name] = RegVal(x.data, self.result_tags(op))

    def op_Full(self, op: O.Full):
        t = op.result.type
        shape = (t.layout.waves, LANES, t.layout.slots)
        data = to_dtype(np.full(shape, op.value), t.dtype)
        self.values[op.result.name] = RegVal(data, self.result_tags(op))

    # tag transfer: the result's tags by the rule the op declares (argus.ir.transfer)

    def result_tags(self, op) -> dict[str, np.ndarray]:
        rule = RESULT_TAGS.get(op.transfer)
        if rule is None:
            raise InterpError(f"{op.loc}: {op.mnemonic}: the interpreter has no tag rule "
                              f"'{op.transfer.value}'")
        return rule(self, op)

    def fresh(self, op: O.Full) -> dict[str, np.ndarray]:
        return {}

    def retag(self, op: O.TagTile) -> dict[str, np.ndarray]:
        shape = self.values[op.x.name].data.shape
        coords = _layout_table(op.result.type.layout)
        env = {**self.env, **{f"c{a}": c for a, c in enumerate(coords)}}
        return {name: np.broadcast_to(np.asarray(evaluate(e, env), np.int64), shape).copy()
                for name, e in op.tags}

    def keep(self, op) -> dict[str, np.ndarray]:
        return dict(self.values[op.operands[0].name].tags)

    def union(self, op: O.Binary) -> dict[str, np.ndarray]:
        return merge_tags(self.values[op.x.name].tags, self.values[op.y.name].tags)

    def shift(self, op: O.SlotSlice) -> dict[str, np.ndarray]:
        part = slice(op.start, op.start + op.result.type.layout.slots)
        return {n: t[:, :, part] for n, t in self.values[op.x.name].tags.items()}

    # global memory

    def global_index(self, op, tensor):
        """Every thread slot's tensor index by the op's formula (`ir.access`), the gathered
        axis reading the index tensor's data."""
        found, env, at = self.access(op, lds=False)
        active = self.active(op, at)
        if op.gather is not None:
            env[A.GATHERED_ROW.name] = self.gathered(op, found, env, at)
        if getattr(op, "rows", None) is not None:
            env[A.GATHERED_ROW.name] = self.register_rows(op, active)
        shape = self.run.arrays[tensor.name].shape
        index = [np.broadcast_to(np.asarray(evaluate(i, env), np.int64), at)
                 for i in found.index]
        inside = np.broadcast_to(np.asarray(evaluate(found.inside, env), bool), at)
        if not (inside | ~active).all() and not op.guard:
            self.report(op, "out-of-bounds",
                        f"out-of-bounds access outside {tensor} of shape {list(shape)}",
                        active & ~inside,
                        element=lambda w: {f"{tensor.name}[{a}]": int(index[a][w])
                                           for a in range(len(shape))})
        clipped = tuple(np.clip(i, 0, extent - 1) for i, extent in zip(index, shape))
        return index, clipped, inside & active

    def register_rows(self, op, active) -> np.ndarray:
        """Row ids a `rows=` access takes from its index registers, one per thread slot; each
        must be the entry of the source tensor that the index element's position tag names,
        which is what the verifier assumed."""
        rows = op.rows
        index = self.values[rows.index.name]
        values = np.rint(index.data).astype(np.int64)
        source = self.run.arrays[rows.source.name]
        position = index.tags.get(rows.at, np.full(values.shape, TOP, np.int64))
        named = (position != TOP) & (position >= 0) & (position < source.shape[0])
        expected = np.where(named, source[np.clip(position, 0, source.shape[0] - 1)], -1)
        wrong = active & (position != TOP) & (~named | (values != expected))
        if wrong.any():
            at = _first(wrong)
            self.report(op, "indirect-row",
                        f"the row id taken from {rows.index} is not the entry of {rows.source} "
                        f"its tag '{rows.at}' names", wrong, position=at,
                        detail=f"{rows.index} holds {int(values[at])} where its tag says "
                               f"{rows.source.name}[{int(position[at])}]")
        return values

    def active(self, op, shape) -> np.ndarray:
        """Which thread slots take part in a memory op (`T.lanes`), over the (wave, lane,
        slot) grid of `shape`."""
        active = O.active_of(op)
        if isinstance(active, Const) and active.value:
            return np.ones(shape, bool)
        thread = {"wave": np.arange(shape[0])[:, None, None],
                  "lane": np.arange(shape[1])[None, :, None]}
        return np.broadcast_to(np.asarray(evaluate(active, {**self.env, **thread}), bool),
                               shape)

    def access(self, op, lds: bool | None = None):
        """The op's access formula (`ir.access`) in tile-coordinate variables, the environment
        evaluating it for every (wave, lane, slot), and that grid's shape: the formula and the
        layout's coordinate table are built once per op and run."""
        lds = isinstance(op, (O.LdsLoad, O.LdsStore)) if lds is None else lds
        cached = self.run.accesses.get((id(op), lds))
        if cached is None:
            formula = (A.lds_access if lds else A.global_access)(op, "tile")
            table = A.tile_of(op).layout.table()
            cached = formula, {f"t{a}": c for a, c in enumerate(table)}, table[0].shape
            self.run.accesses[(id(op), lds)] = cached
        formula, coords, at = cached
        return formula, {**self.env, **coords}, at

    def gathered(self, op, found, env, at) -> np.ndarray:
        """Row ids read from the gather's index tensor, one per thread slot."""
        gather = op.gather
        ids = self.run.arrays[gather.index.name]
        where = np.broadcast_to(np.asarray(evaluate(found.gather_position, env), np.int64), at)
        valid = np.broadcast_to(np.asarray(evaluate(found.gather_inside, env), bool), at)
        if not valid.all():
            self.report(op, "out-of-bounds",
                        f"out-of-bounds gather: position outside {gather.index} of length "
                        f"{ids.shape[0]}",
                        ~valid, element=lambda w: {f"{gather.index.name}[0]": int(where[w])})
        return np.where(valid, ids[np.clip(where, 0, ids.shape[0] - 1)], -1).astype(np.int64)

    def tensor_tags(self, tensor, index, inside, guard=False) -> dict[str, np.ndarray]:
        """Tags by the tensor's formulas; unknown out of range unless the access is guarded
        (a guarded access is defined there: it reads 0 or writes nothing)."""
        tags = {}
        env = {**self.env, **{f"c{a}": i for a, i in enumerate(index)}}
        for name, e in self.run.tensor_tags.get(tensor.name, ()):
            value = np.broadcast_to(np.asarray(evaluate(e, env), np.int64), inside.shape)
            tags[name] = value if guard else np.where(inside, value, TOP)
        return tags

    def op_ScalarLoad(self, op: O.ScalarLoad):
        array = self.run.arrays[op.tensor.name]
        where, inside = A.scalar_access(op)
        index = tuple(self.scalar(e) for e in where)
        if not self.scalar(inside):
            raise InterpError(f"{op.loc}: scalar.load: index {index} is outside {op.tensor} of "
                              f"shape {list(array.shape)}")
        value = int(array[index])
        if not op.var.lo <= value < op.var.hi:
            raise InterpError(f"{op.loc}: scalar.load: {op.tensor}{list(index)} = {value} is "
                              f"outside the declared range [{op.var.lo}, {op.var.hi}) of "
                              f"{op.var.name}")
        if op.bounds:
            lo, hi = (self.scalar(b) for b in op.bounds)
            if not lo <= value < hi:
                raise InterpError(f"{op.loc}: scalar.load: {op.tensor}{list(index)} = {value} "
                                  f"is outside the declared range [{op.bounds[0]}, "
                                  f"{op.bounds[1]}) = [{lo}, {hi}) of {op.var.name}")
        self.env[op.var.name] = value

    def op_Distinct(self, op: O.Distinct):
        """Check the declared fact once per run: the index data is the same for every
        workgroup."""
        if not self.run.first_time(op):
            return
        ids = self.run.arrays[op.tensor.name].astype(np.int64)
        lo, hi = self.scalar(op.lo), self.scalar(op.hi)
        repeated = repeated_entries(ids, lo, hi)
        if repeated is None:
            return
        first, second = repeated
        value = int(ids[first])
        name = op.tensor.name
        again = (ids == value) & (ids >= lo) & (ids < hi)
        self.report(op, "distinct",
                    f"the entries of {op.tensor} in [{expr_text(op.lo)}, {expr_text(op.hi)}) "
                    "are declared distinct, but a value repeats", again, position=(0, 0, 0),
                    axes=("position",),
                    element={f"{name}[{first}]": value, f"{name}[{second}]": value},
                    detail=f"{name}[{first}] = {name}[{second}] = {value}, inside [{lo}, {hi}); "
                           "fix the index data or the declared range")

    def op_GlobalLoad(self, op: O.GlobalLoad):
        index, clipped, inside = self.global_index(op, op.tensor)
        data = self.global_data(op.tensor.name, clipped, inside)
        tags = self.tensor_tags(op.tensor, index, inside, op.guard)
        active = self.active(op, inside.shape)
        tags = {n: np.where(active, t, TOP) for n, t in tags.items()}
        self.values[op.result.name] = RegVal(data, tags)
        if op.tensor.name in self.run.stored:
            self.check_global_read(op, clipped, inside)
            self.global_order(op, clipped, inside, write=False)

    def global_data(self, name: str, clipped, inside) -> np.ndarray:
        """What each thread slot loads at `clipped`: memory, or the thread's own newest store
        still in flight there (a wave's vector memory operations are in order, so it sees its
        own stores at once)."""
        array = self.run.arrays[name]
        data = np.where(inside, array[clipped], 0).astype(np.float32)
        if not self.global_flying:
            return data
        flat = np.ravel_multi_index(clipped, array.shape)
        thread = np.broadcast_to(self.thread, inside.shape)
        found = np.zeros(inside.shape, bool)
        for write in reversed(self.global_flying):
            if write.tensor != name:
                continue
            where = np.full(array.size, -1)
            where[write.flat] = np.arange(write.flat.size)
            at = where[flat]
            hit = inside & ~found & (at >= 0)
            hit[hit] &= write.thread[at[hit]] == thread[hit]
            data[hit] = write.data[at[hit]]
            found |= hit
        return data

    def land_global(self):
        """A wait: this wave's global stores reach memory, in issue order (every wave waits
        alike, so all of them land)."""
        for write in self.global_flying:
            self.run.arrays[write.tensor].reshape(-1)[write.flat] = write.data
        self.global_flying = []

    def check_global_read(self, op, clipped, inside):
        """Reading what another (unordered) workgroup stores is a race either way round."""
        me = self.run.workgroup_index(self.pid)
        owner = self.run.owners.get(op.tensor.name)
        if owner is not None:
            writer = np.where(inside, owner[clipped], -1)
            clash = (writer >= 0) & (writer != me)
            if clash.any():
                position = _first(clash)
                other = self.run.workgroup_of(int(writer[position]))
                self.report(op, "global-race",
                            f"read/write race on global memory: workgroup {self.pid} reads an "
                            f"element of {op.tensor} that workgroup {other} stores, and "
                            "workgroups are unordered", clash, position=position,
                            element={f"{op.tensor.name}[{a}]": int(c[position])
                                     for a, c in enumerate(clipped)})
        self.check_atomic_adders(op, clipped, inside, "reads")
        self.mark(self.run.readers, op.tensor.name, clipped, inside)

    def mark(self, table: dict, name: str, clipped, inside):
        """Record this workgroup in `table[name]` at the elements it touches (_MANY where
        another workgroup already did)."""
        me = self.run.workgroup_index(self.pid)
        seen = table.setdefault(name, np.full(self.run.arrays[name].shape, -1, np.int64))
        where = tuple(c[inside] for c in clipped)
        previous = seen[where]
        seen[where] = np.where((previous == -1) | (previous == me), me, _MANY)

    def check_atomic_adders(self, op, clipped, inside, verb: str):
        """An element another workgroup adds to atomically holds a partial sum whose value
        depends on the order of the workgroups: reading or storing it races with the add."""
        self.report_other_workgroup(
            op, self.run.adders.get(op.tensor.name), clipped, inside,
            lambda other: f"race with an atomic add on global memory: workgroup {self.pid} "
                          f"{verb} an element of {op.tensor} that {other} adds to atomically, "
                          "and workgroups are unordered")

    def report_other_workgroup(self, op, table, clipped, inside, message):
        """Report a global race at the first element of `op` that `table` (per element: the
        workgroup that touched it, _MANY, or -1; None: nobody did) shows another workgroup
        touched; `message(other)` words it."""
        if table is None:
            return
        me = self.run.workgroup_index(self.pid)
        found = np.where(inside, table[clipped], -1)
        clash = (found != -1) & (found != me)
        if not clash.any():
            return
        position = _first(clash)
        who = found[position]
        other = "several workgroups" if who == _MANY else \
            f"workgroup {self.run.workgroup_of(int(who))}"
        self.report(op, "global-race", message(other), clash, position=position,
                    element={f"{op.tensor.name}[{a}]": int(c[position])
                             for a, c in enumerate(clipped)})

    def op_GlobalStore(self, op: O.GlobalStore):
        value = self.values[op.value.name]
        layout = op.value.type.layout
        index, clipped, inside = self.global_index(op, op.tensor)
        destination = self.tensor_tags(op.tensor, index, inside, op.guard)
        self.check(op, {"V": value.tags, "D": destination}, layout, value.data.shape,
                   where=self.active(op, value.data.shape))
        target = self.run.arrays[op.tensor.name]
        data = to_dtype(value.data, op.tensor.type.dtype)
        where = tuple(i[inside] for i in clipped)
        self.global_order(op, clipped, inside, write=True)
        # atomic adds commute with each other; they race with stores and loads of the element
        self.check_global_owner(op, clipped, inside, record=not isinstance(op, O.GlobalAtomicAdd))
        if isinstance(op, O.GlobalAtomicAdd):
            # adds land at once: they commute, and the ordering check reports a read that
            # a wait and barrier do not order after one
            self.mark(self.run.adders, op.tensor.name, clipped, inside)
            np.add.at(target, where, data[inside])
            target[...] = to_dtype(target, op.tensor.type.dtype)
        elif self.clock is not None:
            thread = np.broadcast_to(self.thread, inside.shape)
            self.global_flying.append(_GlobalInFlight(
                op.tensor.name, np.ravel_multi_index(where, target.shape), thread[inside],
                data[inside]))
        else:
            target[where] = data[inside]

    op_GlobalAtomicAdd = op_GlobalStore

    @staticmethod
    def scatter_collisions(shape, safe, inside, thread):
        """Threads of one scatter meeting at one element (gathered rows that repeat): where,
        and per element the lowest thread storing it (so the one reported names another)."""
        flat = np.ravel_multi_index(safe, shape)
        lo = np.full(int(np.prod(shape)), np.iinfo(np.int64).max)
        hi = np.full(int(np.prod(shape)), -1)
        np.minimum.at(lo, flat[inside], thread[inside])
        np.maximum.at(hi, flat[inside], thread[inside])
        clash = inside & (lo[flat] != hi[flat]) & (thread != lo[flat])
        return clash, lo.reshape(shape)

    def global_order(self, op, clipped, inside, write: bool):
        """Inside this workgroup, an element one thread stores (or adds to) and another thread
        loads or stores in the same barrier epoch is a race (`absint.global_order`); with the
        clock, a store or add not yet landed by a wait and published by a barrier. Atomic adds
        commute, and threads of one op are not ordered against each other here."""
        name = op.tensor.name
        shape = self.run.arrays[name].shape
        if name not in self.own:
            self.own[name] = (np.full(shape, -1, np.int64), np.full(shape, -1, np.int64),
                              np.full(shape, -1, np.int64), np.zeros(shape, bool),
                              np.full(shape, -1, np.int64), np.full(shape, -1, np.int64),
                              np.full(shape, -1, np.int64))
        writer, write_epoch, write_op, added, reader, read_epoch, ticket = self.own[name]
        atomic = isinstance(op, O.GlobalAtomicAdd)
        thread = np.broadcast_to(self.thread, inside.shape)
        safe = tuple(np.where(inside, c, 0) for c in clipped)
        me = self.run.op_index(op)
        def unordered(at):
            if self.clock is None:
                return write_epoch[at] == self.epoch
            return (write_op[at] != -1) & (ticket[at] >= self.clock.published)
        clash = inside & unordered(safe) & (writer[safe] != thread) & \
            (write_op[safe] != me) & ~(added[safe] & atomic)
        who = writer
        if write and not clash.any():  # this write may overwrite what another thread reads
            clash = inside & (read_epoch[safe] == self.epoch) & (reader[safe] != -1) & \
                (reader[safe] != thread)
            who = reader
        gathered = op.gather is not None or getattr(op, "rows", None) is not None
        if write and not atomic and gathered and not clash.any():
            clash, who = self.scatter_collisions(shape, safe, inside, thread)
        if clash.any():
            position = _first(clash)
            other = int(who[tuple(c[position] for c in safe)])
            when = "in the same barrier epoch" if self.clock is None else \
                "with no wait and barrier between"
            self.report(op, "global-order",
                        f"workgroup {self.pid}: another thread of the workgroup touches this "
                        f"element of {op.tensor} {when}, and one of the two writes it", clash,
                        position=position,
                        element={f"{name}[{a}]": int(c[position]) for a, c in enumerate(clipped)},
                        detail=f"also accessed by {self.thread_name(other)}")
        where = tuple(c[inside] for c in clipped)
        if write:
            # two threads' writes not ordered with each other: a later access by either
            # races with the other's, whichever landed last
            other = unordered(where) & (writer[where] != thread[inside]) & (writer[where] != -1)
            writer[where] = np.where(other, _MANY, thread[inside])
            write_epoch[where] = self.epoch
            write_op[where], added[where] = me, atomic
            if self.clock is not None:
                ticket[where] = self.clock.waits
        else:
            previous = np.where(read_epoch[where] == self.epoch, reader[where], -1)
            reader[where] = np.where((previous == -1) | (previous == thread[inside]),
                                     thread[inside], _MANY)
            read_epoch[where] = self.epoch

    def check_global_owner(self, op, clipped, inside, record=True):
        """Workgroups are unordered, so two of them storing one element is a race (an atomic
        add, `record` False, races with another workgroup's plain store or load)."""
        if record:
            self.check_atomic_adders(op, clipped, inside, "stores")
        owner = self.run.owners.setdefault(op.tensor.name, np.full(
            self.run.arrays[op.tensor.name].shape, -1, np.int64))
        me = self.run.workgroup_index(self.pid)
        previous = np.where(inside, owner[clipped], -1)
        clash = (previous >= 0) & (previous != me)
        if clash.any():
            position = _first(clash)
            other = self.run.workgroup_of(int(previous[position]))
            self.report(op, "global-race",
                        f"write/write race on global memory: workgroups {other} and {self.pid} "
                        f"both store this element of {op.tensor}, and workgroups are unordered",
                        clash, position=position,
                        element={f"{op.tensor.name}[{a}]": int(c[position])
                                 for a, c in enumerate(clipped)})
        self.report_other_workgroup(
            op, self.run.readers.get(op.tensor.name), clipped, inside,
            lambda other: f"write/read race on global memory: workgroup {self.pid} stores an "
                          f"element of {op.tensor} that {other} reads, and workgroups are "
                          "unordered")
        if record:
            owner[tuple(c[inside] for c in clipped)] = me

    # assertions

    def check(self, op, roles: dict[str, dict[str, np.ndarray]], layout, shape,
              extra_env=None, agree_with=None, where=None):
        """Evaluate op's assertions on arrays of `shape`; roles map to tag arrays; only the
        points where `where` holds (threads taking part) must satisfy them."""
        for index, assertion in enumerate(getattr(op, "asserts", ())):
            env = dict(self.env) | (extra_env or {})
            unknown = np.zeros(shape, bool)
            missing = []
            for var in sorted(free_vars(assertion.predicate), key=lambda v: v.name):
                role, tag = O.split_role_var(var.name)
                if not O.is_role_var(var) or role not in roles:
                    continue
                values = roles[role].get(tag)
                if values is None:
                    missing.append(f"{role}.{tag}")
                    continue
                unknown |= np.broadcast_to(values == TOP, shape)
                env[var.name] = _safe(values)
            if missing:
                self.report(op, "tag-missing",
                            f"assertion '{assertion.message}' reads {', '.join(missing)}, which "
                            f"the operands do not carry (they have "
                            f"{ {r: sorted(t) for r, t in roles.items()} })",
                            np.ones(shape, bool), loc=assertion.loc, assertion=index)
                continue
            holds = np.broadcast_to(np.asarray(evaluate(assertion.predicate, env), bool), shape)
            if agree_with is not None:
                holds = holds == agree_with
            failed = unknown | ~holds
            if where is not None:
                failed = failed & where
            if failed.any():
                position = _first(failed)
                self.report_assertion(op, index, failed, roles, layout, position,
                                      agreeing=agree_with is not None)

    def report_assertion(self, op, index, failed, roles, layout, position, agreeing=False):
        assertion = op.asserts[index]
        if isinstance(op, O.Mfma):
            self.report_mfma(op, index, failed, roles, position)
            return
        coords = _layout_table(layout)
        element = {f"c{a}": int(c[position]) for a, c in enumerate(coords)}
        tags = {role: {name: _tag(values, position) for name, values in role_tags.items()}
                for role, role_tags in roles.items()}
        self.report(op, "tag-assertion", f"tag assertion '{assertion.message}' does not hold",
                    failed, element=element, tags=tags, position=position,
                    detail=f"predicate: {_readable(assertion.predicate)}"
                           + (f"; {O.MASK_AGREEMENT}" if agreeing else ""), loc=assertion.loc,
                    assertion=index)

    def report_mfma(self, op, index, failed, roles, position):
        assertion = op.asserts[index]
        w, block, i, j, k = position
        info, (lane_k, slot_k), a_pos, *_ = _mfma_positions(op.instr)
        holder = (a_pos[0] == block) & (a_pos[1] == i) & (a_pos[2] == k)
        lane, slot = (int(x[holder][0]) for x in (lane_k, slot_k))
        tags = {role: {name: _tag(values, (w, block, i, j, k)) for name, values in rt.items()}
                for role, rt in roles.items()}
        self.report(op, "tag-assertion", f"tag assertion '{assertion.message}' does not hold",
                    failed, element={"block": block, "i": i, "j": j, "k": k}, tags=tags,
                    position=(w, lane, slot), axes=("wave", "block", "i", "j", "k"),
                    detail=f"at {info.name}: A[{i},{k}] (register slot a[{slot}]) meets "
                           f"B[{k},{j}] and C[{i},{j}]; predicate: "
                           f"{_readable(assertion.predicate)}", loc=assertion.loc,
                    assertion=index)

    # MFMA

    def op_MfmaBroadcast(self, op: O.MfmaBroadcast):
        self.op_Mfma(op)

    def op_Mfma(self, op: O.Mfma):
        info, (lane_k, slot_k), a_pos, b_pos, (lane_c, slot_c), c_pos = _mfma_positions(op.instr)
        a, b, c = (self.values[v.name] for v in (op.a, op.b, op.c))
        waves = a.data.shape[0]

        def gather(value, pos, lanes, slots, shape):
            dense = np.zeros((waves,) + shape, value.dtype)
            dense[(slice(None),) + pos] = value[:, lanes, slots]
            return dense

        blocks = info.blocks
        a_shape, b_shape, c_shape = (blocks, info.m, info.k), (blocks, info.k, info.n), \
            (blocks, info.m, info.n)
        # with CBSZ/ABID every block reads A from the block a_block names
        reads = op.a_block(np.arange(blocks)) if isinstance(op, O.MfmaBroadcast) else \
            np.arange(blocks)
        a_mat = gather(a.data, a_pos, lane_k, slot_k, a_shape)[:, reads]
        b_mat = gather(b.data, b_pos, lane_k, slot_k, b_shape)
        c_mat = gather(c.data, c_pos, lane_c, slot_c, c_shape)
        d_mat = np.matmul(a_mat.astype(np.float32), b_mat.astype(np.float32)) + c_mat
        data = d_mat[:, c_pos[0], c_pos[1], c_pos[2]].astype(np.float32)

        def tag_mats(value, pos, lanes, slots, shape):
            return {n: gather(t, pos, lanes, slots, shape) for n, t in value.tags.items()}

        a_tags = {n: t[:, reads] for n, t in tag_mats(a, a_pos, lane_k, slot_k, a_shape).items()}
        b_tags = tag_mats(b, b_pos, lane_k, slot_k, b_shape)
        c_tags = tag_mats(c, c_pos, lane_c, slot_c, c_shape)
        if op.asserts:
            # broadcast every operand over (wave, block, i, j, k)
            roles = {"A": {n: t[:, :, :, None, :] for n, t in a_tags.items()},
                     "B": {n: t.transpose(0, 1, 3, 2)[:, :, None, :, :] for n, t in b_tags.items()},
                     "C": {n: t[:, :, :, :, None] for n, t in c_tags.items()}}
            self.check(op, roles, None, (waves, blocks, info.m, info.n, info.k))
        shared = set(a_tags) & set(b_tags)
        tags = {}
        for name, t in a_tags.items():
            if name not in shared:
                tags[name] = np.broadcast_to(t[:, :, :, :1], (waves,) + c_shape)
        for name, t in b_tags.items():
            if name not in shared:
                tags[name] = np.broadcast_to(t[:, :, :1, :], (waves,) + c_shape)
        out_tags = {n: t[:, c_pos[0], c_pos[1], c_pos[2]] for n, t in tags.items()}
        self.values[op.result.name] = RegVal(data, out_tags)

    # elementwise

    def op_Unary(self, op: O.Unary):
        x = self.values[op.x.name]
        with np.errstate(all="ignore"):
            data = _UNARY[op.fn](x.data.astype(np.float32))
        self.check(op, {"X": x.tags}, op.x.type.layout, x.data.shape)
        self.values[op.result.name] = RegVal(data.astype(np.float32), self.result_tags(op))

    def op_Binary(self, op: O.Binary):
        x, y = self.values[op.x.name], self.values[op.y.name]
        self.check(op, {"X": x.tags, "Y": y.tags}, op.x.type.layout, x.data.shape)
        with np.errstate(all="ignore"):
            data = _BINARY[op.fn](x.data, y.data).astype(np.float32)
        self.values[op.result.name] = RegVal(data, self.result_tags(op))

    def op_Cast(self, op: O.Cast):
        x = self.values[op.x.name]
        data = (truncated_bf16(x.data) if op.rounding == "rtz"  # f32 -> bf16 (Cast.check)
                else to_dtype(x.data, op.result.type.dtype))
        self.values[op.result.name] = RegVal(data, self.result_tags(op))

    def op_Mask(self, op: O.Mask):
        x = self.values[op.x.name]
        coords = _layout_table(op.x.type.layout)
        env = {**self.env, **{f"c{a}": c for a, c in enumerate(coords)}}
        keep = np.broadcast_to(np.asarray(evaluate(op.keep, env), bool), x.data.shape)
        self.check(op, {"X": x.tags}, op.x.type.layout, x.data.shape, agree_with=keep)
        data = np.where(keep, x.data, np.float32(op.fill)).astype(np.float32)
        self.values[op.result.name] = RegVal(data, self.result_tags(op))

    def mark_trace(self, op: O.Mask) -> dict[str, np.ndarray]:
        """KEEP, and with a trace the tag `trace`: 1 where the mask kept the element (and an
        earlier mark with that name had 1), 0 where it filled it."""
        x = self.values[op.x.name]
        tags = dict(x.tags)
        if op.trace:
            coords = _layout_table(op.x.type.layout)
            env = {**self.env, **{f"c{a}": c for a, c in enumerate(coords)}}
            keep = np.broadcast_to(np.asarray(evaluate(op.keep, env), bool), x.data.shape)
            earlier = tags.get(op.trace, np.ones(x.data.shape, np.int64))
            tags[op.trace] = np.where(keep, earlier, 0).astype(np.int64)
        return tags

    # cross-lane

    def dense(self, op, value: RegVal, t: RegType):
        """The wave-local view of a tile: (waves, *shape) arrays and which elements are held."""
        coords = _layout_table(t.layout)
        waves = value.data.shape[0]
        wave_index = np.broadcast_to(np.arange(waves)[:, None, None], value.data.shape)
        key = (wave_index,) + tuple(coords)
        present = np.zeros((waves,) + t.shape, bool)
        present[key] = True
        data = np.zeros((waves,) + t.shape, np.float32)
        data[key] = value.data
        tags = {}
        for name, tag in value.tags.items():
            dense = np.full((waves,) + t.shape, TOP, np.int64)
            dense[key] = tag
            tags[name] = dense
        return data, tags, present

    def op_Reduce(self, op: O.Reduce):
        x = self.values[op.x.name]
        data, tags, present = self.dense(op, x, op.x.type)
        axis = op.axis + 1
        if op.fn == "max":
            reduced = numerics.max_f32.reduce(np.where(present, data, -np.inf), axis=axis)
        else:
            reduced = np.sum(np.where(present, data, 0), axis=axis)
        complete = present.all(axis=axis)
        out_tags = {}
        for name, tag in tags.items():
            if name in op.drop:
                continue
            big = np.iinfo(np.int64).max
            low = np.min(np.where(present, tag, big), axis=axis)
            high = np.max(np.where(present, tag, TOP), axis=axis)
            out_tags[name] = np.where((low == high) & (low != TOP), low, TOP)
        self.values[op.result.name] = self.gather(op, reduced, out_tags, complete,
                                                  op.result.type, None)

    def op_Broadcast(self, op: O.Broadcast):
        x = self.values[op.x.name]
        data, tags, present = self.dense(op, x, op.x.type)
        self.values[op.result.name] = self.gather(op, data, tags, present, op.result.type,
                                                  op.axis)

    def gather(self, op, data, tags, present, t: RegType, drop_axis):
        """Read a wave-local dense tile out in layout `t` (without `drop_axis` of its coords)."""
        coords = list(_layout_table(t.layout))
        if drop_axis is not None:
            del coords[drop_axis]
        waves = data.shape[0]
        wave_index = np.broadcast_to(np.arange(waves)[:, None, None],
                                     (waves, LANES, t.layout.slots))
        key = (wave_index,) + tuple(np.broadcast_to(c, wave_index.shape) for c in coords)
        held = present[key]
        if not held.all():
            w, lane, slot = _first(~held)
            raise InterpError(
                f"{op.loc}: {op.mnemonic}: wave {w} lane {lane} slot {slot} needs element "
                f"{tuple(int(c[w, lane, slot]) for c in key[1:])}, which its own wave does not "
                f"hold in full; cross-lane exchange stays within a wave, so lay the tile out "
                f"so each wave holds whole rows")
        return RegVal(data[key].astype(np.float32), {n: tag[key] for n, tag in tags.items()})

    def op_Shuffle(self, op: O.Shuffle):
        """Each lane reads the lane its lane map names (`isa_cdna3.lanemaps`), its own where
        the read is invalid; combining applies fn and records the covered range (as the
        verifier's `lanemap`)."""
        from argus.isa_cdna3.lanemaps import source_lane

        x = self.values[op.x.name]
        lanes = np.arange(LANES)
        source, valid = (np.broadcast_to(e, (LANES,))
                         for e in source_lane(op.lanes, op.params, lanes, np.maximum))
        valid = valid.astype(bool)
        source = np.where(valid, source, lanes).astype(np.int64)
        keep = valid[None, :, None]
        read = x.data[:, source, :]
        tags_read = {n: t[:, source, :] for n, t in x.tags.items()}
        if not op.combine:
            self.values[op.result.name] = RegVal(read.copy(), tags_read)
            return
        combine = numerics.max_f32 if op.combine == "max" else np.add
        data = np.where(keep, combine(x.data, read), x.data).astype(np.float32)
        covered = cover_names(op.cover) if op.cover else ()
        tags = {n: np.where(keep, np.where(t == tags_read[n], t, TOP), t)
                for n, t in x.tags.items() if n != op.cover and n not in covered}
        if op.cover:
            mine = covered_range(x.tags, op.cover, x.data.shape)
            theirs = tuple(t[:, source, :] for t in mine)
            known = np.logical_and.reduce([t != TOP for t in mine + theirs])
            env = {f"t{k}": np.where(known, t, 0) for k, t in enumerate(mine + theirs)}
            *union, exact = (np.broadcast_to(np.asarray(evaluate(e, env)), x.data.shape)
                             for e in _COVER_UNION)
            for name, value, old in zip(covered, union, mine):
                tags[name] = np.where(keep, np.where(known & exact.astype(bool), value, TOP), old)
        self.values[op.result.name] = RegVal(data, tags)

    def op_SlotSlice(self, op: O.SlotSlice):
        x = self.values[op.x.name]
        part = slice(op.start, op.start + op.result.type.layout.slots)
        self.values[op.result.name] = RegVal(x.data[:, :, part], self.result_tags(op))

    # LDS

    def op_LdsAlloc(self, op: O.LdsAlloc):
        self.values[op.result.name] = LdsState.fresh(op.result.type.size)

    def lds_addresses(self, op):
        """Every thread slot's LDS address by the op's formula, whether it is in bounds, and
        the view coordinates for reports (evaluated only when one is made)."""
        found, env, shape = self.access(op, lds=True)

        def each(e, dtype):
            return np.broadcast_to(np.asarray(evaluate(e, env), dtype), shape)

        def view(where):
            return {f"d{a}": int(each(v, np.int64)[where]) for a, v in enumerate(found.view)}
        address = each(found.address, np.int64)
        inside = each(found.inside, bool)
        active = self.active(op, shape)
        if not (inside | ~active).all():
            self.report(op, "out-of-bounds",
                        f"out-of-bounds LDS access outside the view {list(op.addr.shape)} / "
                        f"allocation of {op.buffer.type.size} elements", active & ~inside,
                        element=lambda w: {**view(w), "address": int(address[w])})
        return address, inside & active, view

    def op_LdsStore(self, op: O.LdsStore):
        lds: LdsState = self.values[op.buffer.name]
        value = self.values[op.value.name]
        layout = op.value.type.layout
        address, inside, full = self.lds_addresses(op)
        self.check(op, {"V": value.tags}, layout, value.data.shape,
                   where=self.active(op, value.data.shape))
        thread = np.broadcast_to(self.thread, address.shape)
        addr, who = address[inside], thread[inside]
        element = self.lds_element(full, address)
        # write/write by another thread in this epoch, or within this very op
        lo = np.full(lds.data.size, np.iinfo(np.int64).max)
        hi = np.full(lds.data.size, -1)
        np.minimum.at(lo, addr, who)
        np.maximum.at(hi, addr, who)
        atomic = isinstance(op, O.LdsAtomicAdd)
        same_op = np.zeros(address.shape, bool)
        same_op[inside] = (lo[addr] != hi[addr]) & (not atomic)
        earlier = np.zeros(address.shape, bool)
        earlier[inside] = self.unordered_write(lds, addr, who, write="store")
        if atomic:  # atomic adds commute: only a plain store in this epoch races with this one
            earlier[inside] &= ~self.run.lds_atomic[lds.write_op[addr]]
        if (clash := same_op | earlier).any():
            position = _first(clash)
            other = self.other_thread(position, lds.writer, address, lo, hi)
            self.report(op, "lds-race",
                        "write/write race: two threads write one LDS address without a barrier "
                        "between", clash, element=element, position=position,
                        detail=f"the other writer is {other}")
        stale_read = np.zeros(address.shape, bool)
        stale_read[inside] = (lds.read_epoch[addr] == self.epoch) & (lds.reader[addr] != who) \
            & ~self.group_ordered(lds.read_groups[addr], lds.reader[addr], who)
        if stale_read.any():
            position = _first(stale_read)
            reader = lds.reader[address[position]]
            by = "several threads" if reader == _MANY else self.thread_name(reader)
            read_op = lds.read_op[address[position]]
            at = "" if read_op == _MANY else self.run.op_loc(read_op)
            self.report(op, "lds-race",
                        "write-after-read race: this write may overwrite data another thread "
                        "has not read yet (no barrier since that read)", stale_read,
                        element=element, position=position,
                        detail=f"read by {by}" + (f" at {at}" if at else ""), other_loc=at)
        if atomic:
            self.add_to_lds(op, lds, value.data[inside], value.tags, addr, lo, hi)
            return
        if self.clock is not None:
            self.hold(lds, _InFlight(False, self.clock.waits, op.buffer.name, addr, who,
                                     to_dtype(value.data[inside], op.buffer.type.dtype),
                                     {n: t[inside] for n, t in value.tags.items()},
                                     self.run.op_index(op), self.issue()))
            return
        lds.data[addr] = to_dtype(value.data[inside], op.buffer.type.dtype)
        # the write replaces the region's tags: names the value does not carry are absent
        for name in list(lds.tags) + [n for n in value.tags if n not in lds.tags]:
            if name not in lds.tags:  # unknown where nothing has been written yet
                lds.tags[name] = np.full(lds.data.size, TOP, np.int64)
            source = value.tags.get(name)
            lds.tags[name][addr] = ABSENT if source is None else source[inside]
        lds.written[addr] = True
        lds.write_epoch[addr] = self.epoch
        lds.write_groups[addr] = len(self.group_members)
        lds.writer[addr] = who
        lds.write_op[addr] = self.run.op_index(op)

    op_LdsAtomicAdd = op_LdsStore

    def issue(self) -> int:
        self.issued += 1
        return self.issued

    def newest_flying(self, lds: LdsState, addr) -> np.ndarray:
        """Per address: the newest write issued there is still in flight."""
        return (lds.pending_group[addr] != -1) & (lds.pending_seq[addr] > lds.seq[addr])

    def hold(self, lds: LdsState, write: _InFlight):
        self.flying.append(write)
        for name in write.tags:  # unknown where nothing has landed yet
            lds.tags.setdefault(name, np.full(lds.data.size, TOP, np.int64))
        lds.pending_group[write.addr] = write.ticket if write.copy else _STORE
        lds.pending_thread[write.addr] = write.thread
        lds.pending_seq[write.addr] = write.seq

    def in_flight_at(self, buffer: str, address: int) -> str:
        """Where the newest write in flight to `address` of `buffer` was issued."""
        found = [w for w in self.flying if w.buffer == buffer and (w.addr == address).any()]
        return self.run.op_loc(found[-1].op) if found else "?"

    def unordered_write(self, lds: LdsState, addr, who, write: str | None = None
                        ) -> np.ndarray:
        """Per address: a write there by another thread is not ordered before an access by
        `who` now — the last one, in the same barrier epoch; with the clock (`absint.sync`)
        a read sees the last write landed or its own newest in flight (an earlier write is
        overwritten), while a later `write` ("store" or "copy") is ordered against every
        write not yet waited for and published by a barrier, in flight or landed; an async
        copy in flight lands after a later store even of its own thread."""
        other = lds.writer[addr] != who
        if self.clock is None:
            ordered = self.group_ordered(lds.write_groups[addr], lds.writer[addr], who)
            return (lds.write_epoch[addr] == self.epoch) & other & ~ordered
        c = self.clock
        unpublished = np.where(lds.copied[addr], lds.ticket[addr] >= c.retired_published,
                               lds.ticket[addr] >= c.published)
        last = lds.written[addr] & other & unpublished
        if write is None:
            # the newest write issued there, unless the reader's own in flight (its store it
            # sees, its copy is async-pending)
            flying = self.newest_flying(lds, addr)
            return (last & ~flying) | (flying & (lds.pending_thread[addr] != who))
        name = next(n for n, v in self.values.items() if v is lds)
        clash = last
        earlier = [(w, False) for w in self.unpublished] + [(w, True) for w in self.flying]
        for landed_or_flying, flying in earlier:
            if landed_or_flying.buffer != name:
                continue
            by = np.full(lds.data.size, -1)
            by[landed_or_flying.addr] = landed_or_flying.thread
            hit = by[addr] != -1
            clash = clash | (hit & (by[addr] != who))
            if flying and landed_or_flying.copy and write == "store":
                clash = clash | hit
        return clash

    def group_ordered(self, passed, then, now) -> np.ndarray:
        """Per access: a group barrier (`T.group_barrier`) the workgroup passed after an
        earlier access by thread `then` (when `passed` had been passed) has the waves of both
        `then` and thread `now` in its group; several threads (_MANY) are not ordered."""
        ordered = np.zeros(np.broadcast(passed, then, now).shape, bool)
        known = then >= 0
        then_wave, now_wave = np.where(known, then, 0) // LANES, now // LANES
        for k, members in enumerate(self.group_members):
            ordered |= known & (passed <= k) & members[then_wave] & members[now_wave]
        return ordered

    def op_GroupBarrier(self, op: O.GroupBarrier):
        if self.clock is not None:
            raise InterpError(f"{op.loc}: barrier.group in a kernel with waits and async "
                              "copies is not modelled; use T.barrier()")
        waves = np.arange(self.waves)
        self.group_members.append(np.broadcast_to(
            np.asarray(evaluate(op.active, {**self.env, "wave": waves}), bool), waves.shape))

    def op_AsyncCopy(self, op: O.AsyncCopy):
        """Read the source now, check the destination like a store, and hold the copy in
        flight until a wait retires its group (`land`)."""
        lds: LdsState = self.values[op.buffer.name]
        index, clipped, inside_g = self.global_index(op, op.tensor)
        data = self.global_data(op.tensor.name, clipped, inside_g)
        tags = self.tensor_tags(op.tensor, index, inside_g)
        if op.tensor.name in self.run.stored:
            self.check_global_read(op, clipped, inside_g)
            self.global_order(op, clipped, inside_g, write=False)
        address, inside, full = self.lds_addresses(op)
        thread = np.broadcast_to(self.thread, address.shape)
        addr, who = address[inside], thread[inside]
        clash = np.zeros(address.shape, bool)
        clash[inside] = self.unordered_write(lds, addr, who, write="copy")
        stale = np.zeros(address.shape, bool)
        stale[inside] = (lds.read_epoch[addr] == self.epoch) & (lds.reader[addr] != who)
        for mask, what in ((clash, "write/write race: this async copy and another write to "
                                   "one LDS address are not ordered (no wait and barrier "
                                   "between)"),
                           (stale, "write-after-read race: this async copy may land before "
                                   "another thread has read the old data (no barrier since "
                                   "that read)")):
            if mask.any():
                self.report(op, "lds-race", what, mask, element=self.lds_element(full, address))
        self.hold(lds, _InFlight(True, self.clock.groups, op.buffer.name, addr, who,
                                 to_dtype(data[inside], op.buffer.type.dtype),
                                 {n: t[inside] for n, t in tags.items()}, self.run.op_index(op),
                                 self.issue()))

    def op_CommitGroup(self, op: O.CommitGroup):
        self.clock = attrs.evolve(self.clock, groups=self.clock.groups + 1)

    def op_WaitGroup(self, op: O.WaitGroup):
        # a group landed earlier stays landed (the verifier's count may undercount here)
        retired = max(self.clock.retired, self.clock.groups - op.pending)
        self.clock = attrs.evolve(self.clock, retired=retired)
        self.land(stores=False)

    def op_Wait(self, op: O.Wait):
        c = self.clock
        self.clock = attrs.evolve(c, waits=c.waits + 1, retired=max(c.retired, c.groups))
        self.land(stores=True)
        self.land_global()

    def land(self, stores: bool):
        """The writes a wait lands (plain stores with `stores`, copies of retired groups)
        reach LDS now, in issue order; the rest stay in flight."""
        flying = []
        for write in self.flying:
            if (write.ticket >= self.clock.retired) if write.copy else not stores:
                flying.append(write)
                continue
            lds: LdsState = self.values[write.buffer]
            # where a newer write already landed (a write/write race reported at it) it stays
            keep = lds.seq[write.addr] < write.seq
            addr, write = write.addr[keep], _landing(write, keep)
            lds.data[addr] = write.data
            # the write replaces the region's tags: names it does not carry are absent
            for name in list(lds.tags) + [n for n in write.tags if n not in lds.tags]:
                if name not in lds.tags:
                    lds.tags[name] = np.full(lds.data.size, TOP, np.int64)
                source = write.tags.get(name)
                lds.tags[name][addr] = ABSENT if source is None else source
            lds.written[addr], lds.write_epoch[addr] = True, self.epoch
            lds.writer[addr], lds.write_op[addr] = write.thread, write.op
            lds.ticket[addr], lds.copied[addr] = write.ticket, write.copy
            lds.seq[addr] = write.seq
            self.unpublished.append(write)
        self.flying = flying
        for lds in self.values.values():
            if isinstance(lds, LdsState):
                lds.pending_group[:] = -1
                lds.pending_thread[:] = -1
                lds.pending_seq[:] = -1
        for write in flying:
            lds = self.values[write.buffer]
            lds.pending_group[write.addr] = write.ticket if write.copy else _STORE
            lds.pending_thread[write.addr] = write.thread
            lds.pending_seq[write.addr] = write.seq

    def forwarded(self, buffer: str, safe, mask, names) -> tuple[np.ndarray, np.ndarray, dict]:
        """Data and tags of the reader's own plain stores in flight where `mask` holds (the
        newest first), and per element whether one was found."""
        size = self.values[buffer].data.size
        found = np.zeros(safe.shape, bool)
        data = np.zeros(safe.shape, np.float32)
        tags = {n: np.full(safe.shape, ABSENT, np.int64) for n in names}
        for write in reversed(self.flying):
            if write.buffer != buffer or write.copy:
                continue
            where = np.full(size, -1)
            where[write.addr] = np.arange(write.addr.size)
            index = where[safe]
            hit = mask & ~found & (index >= 0)
            data[hit] = write.data[index[hit]]
            for name in names:
                if name in write.tags:
                    tags[name][hit] = write.tags[name][index[hit]]
            found |= hit
        return found, data, tags

    def add_to_lds(self, op, lds: LdsState, data: np.ndarray, value_names, addr, lo, hi):
        """ds_add: the addresses hold the old value plus every contribution; the sum's tags are
        ⊤ (as in the verifier); `written` is left alone, since the old value is part of the
        sum. An address several threads add to in this epoch records the writer _MANY."""
        np.add.at(lds.data, addr, data)
        touched = np.unique(addr)
        lds.data[touched] = to_dtype(lds.data[touched], op.buffer.type.dtype)
        for name in value_names:
            lds.tags.setdefault(name, np.full(lds.data.size, TOP, np.int64))
        for tag in lds.tags.values():
            tag[touched] = TOP
        several = (lo[touched] != hi[touched]) | (
            (lds.write_epoch[touched] == self.epoch) & (lds.writer[touched] != lo[touched]))
        lds.writer[touched] = np.where(several, _MANY, lo[touched])
        lds.write_epoch[touched] = self.epoch
        lds.write_op[touched] = self.run.op_index(op)
        if self.clock is not None:  # adds land at once (a wave's own LDS ops are in order)
            lds.ticket[touched], lds.copied[touched] = self.clock.waits, False
            lds.seq[touched] = self.issue()

    def op_LdsLoad(self, op: O.LdsLoad):
        lds: LdsState = self.values[op.buffer.name]
        address, inside, full = self.lds_addresses(op)
        safe = np.where(inside, address, 0)
        thread = np.broadcast_to(self.thread, address.shape)
        element = self.lds_element(full, address)
        # with the clock, the reader's own async copy in flight: it reads the old data; its
        # own plain stores in flight it reads at once
        own = np.zeros(address.shape, bool)
        mine = np.zeros(address.shape, bool)
        if self.clock is not None:
            by_me = inside & self.newest_flying(lds, safe) & (lds.pending_thread[safe] == thread)
            own = by_me & (lds.pending_group[safe] >= 0)
            mine = by_me & (lds.pending_group[safe] == _STORE)
        if own.any():
            position = _first(own)
            self.report(op, "async-pending",
                        "reads LDS that this thread's own async copy has not landed in: no "
                        "wait_group has retired the copy's group", own, element=element,
                        position=position,
                        detail=f"copied at {self.in_flight_at(op.buffer.name, safe[position])}")
        never = inside & ~lds.written[safe] & ~own & ~mine
        if self.clock is not None:
            never &= ~self.newest_flying(lds, safe)
        if never.any():
            self.report(op, "lds-uninitialised",
                        "uninitialised LDS read: no thread has written this address", never,
                        element=element)
        racy = inside & self.unordered_write(lds, safe, thread) & ~own
        if racy.any():
            position = _first(racy)
            a = safe[position]
            flying = bool(self.newest_flying(lds, np.asarray([a]))[0])
            writer = self.thread_name(lds.pending_thread[a] if flying else lds.writer[a])
            where = self.in_flight_at(op.buffer.name, a) if flying else \
                self.run.op_loc(lds.write_op[a])
            what = "an async copy" if lds.pending_group[a] >= 0 else "a store"
            self.report(op, "lds-race",
                        "read-after-write race: another thread wrote this LDS address with no "
                        "barrier in between" + (f" ({what} still in flight)" if flying else ""),
                        racy, element=element, position=position,
                        detail=f"written by {writer} at {where}", other_loc=where)
        racy |= own
        unknown = ~inside | never | racy
        data = np.where(inside, lds.data[safe], 0).astype(np.float32)
        seen = {name: tag[safe] for name, tag in lds.tags.items()}
        if mine.any():
            _, mine_data, mine_tags = self.forwarded(op.buffer.name, safe, mine, list(seen))
            data = np.where(mine, mine_data, data)
            seen = {name: np.where(mine, mine_tags[name], tag) for name, tag in seen.items()}
        # a name absent from every element read (overwritten with other names) is not
        # carried; where it is absent only in part, it is unknown there
        tags = {name: np.where(unknown | (tag == ABSENT), TOP, tag)
                for name, tag in seen.items()
                if not inside.any() or (tag != ABSENT)[inside].any()}
        self.values[op.result.name] = RegVal(data, tags)
        addr, who = address[inside], thread[inside]
        lo = np.full(lds.data.size, np.iinfo(np.int64).max)
        hi = np.full(lds.data.size, -1)
        np.minimum.at(lo, addr, who)
        np.maximum.at(hi, addr, who)
        touched = np.unique(addr)
        single = lo[touched] == hi[touched]
        same_epoch = lds.read_epoch[touched] == self.epoch
        previous = same_epoch & (lds.reader[touched] != lo[touched])
        lds.reader[touched] = np.where(single & ~previous, lo[touched], _MANY)
        me = self.run.op_index(op)
        other_op = same_epoch & (lds.read_op[touched] != me)
        lds.read_op[touched] = np.where(other_op, _MANY, me)
        lds.read_epoch[touched] = self.epoch
        lds.read_groups[touched] = len(self.group_members)

    def lds_element(self, view, address):
        return lambda w: {**view(w),
                          "address": int(address[w])}

    def thread_name(self, thread: int) -> str:
        if thread == _MANY:
            return "several threads"
        return f"wave {int(thread) // LANES} lane {int(thread) % LANES}"

    def other_thread(self, position, writer, address, lo, hi) -> str:
        me = int(self.thread[position[0], position[1], 0])
        a = int(address[position])
        for candidate in (int(lo[a]), int(hi[a]), int(writer[a])):
            if candidate >= 0 and candidate != me and candidate != np.iinfo(np.int64).max:
                return self.thread_name(candidate)
        return "another thread"

    def op_Barrier(self, op: O.Barrier):
        self.epoch += 1
        if self.clock is not None:
            self.land(stores=True)
            self.land_global()
            c = self.clock
            self.publish(Clock(c.waits + 1, c.waits + 1, c.groups, c.retired, c.retired))

    def op_BarrierNoWait(self, op: O.BarrierNoWait):
        self.epoch += 1
        c = self.clock
        self.publish(Clock(c.waits, c.waits, c.groups, c.retired, c.retired))

    def publish(self, clock: Clock):
        """A barrier: landed writes below the published counts are seen by every wave."""
        self.clock = clock
        self.unpublished = [w for w in self.unpublished if w.ticket >= (
            clock.retired_published if w.copy else clock.published)]

    # control flow

    def op_For(self, op: O.For):
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

    def op_If(self, op: O.If):
        branch = op.then if self.scalar(op.cond) else op.orelse
        produced = self.execute(branch)
        for result, value in zip(op.results, produced or ()):
            self.values[result.name] = value


def repeated_entries(ids: np.ndarray, lo: int, hi: int) -> tuple[int, int] | None:
    """The earliest position whose value, inside [lo, hi), appears again, and the next
    position holding that value; None when the entries inside [lo, hi) are distinct."""
    positions = np.flatnonzero((ids >= lo) & (ids < hi))
    order = np.argsort(ids[positions], kind="stable")
    ranked = positions[order]
    same = np.flatnonzero(ids[ranked[1:]] == ids[ranked[:-1]])
    if not same.size:
        return None
    pairs = sorted((int(ranked[k]), int(ranked[k + 1])) for k in same)
    return pairs[0]


def _register(op, slot: int) -> str:
    """Where a slot of the op's register tile lives: narrow elements pack into 32-bit VGPRs."""
    tile = next((getattr(op, name) for name in ("a", "x", "value", "result")
                 if isinstance(getattr(op, name, None), Value)), None)
    if tile is None or not isinstance(tile.type, RegType):
        return ""
    dtype = tile.type.dtype
    per_register = max(1, 4 // DTYPE_BYTES[dtype])
    if per_register == 1:
        return f"register {slot} ({dtype})"
    return f"register {slot // per_register} ({dtype} element {slot % per_register})"


def _readable(predicate: Expr) -> str:
    """The predicate as the author wrote it: A.k rather than the variable name A_k."""
    return re.sub(r"\b([A-Z])_([A-Za-z0-9]+)\b", r"\1.\2", expr_text(predicate))


def _tag(values: np.ndarray, position) -> int | None:
    """One tag value at `position`, reading broadcast (size-1) axes at 0; None for ⊤."""
    v = int(values[tuple(p if n > 1 else 0 for p, n in zip(position, values.shape))])
    return None if v == TOP else v


#: Register-result rules whose tags move through the same index arithmetic as the data, so
#: the op's handler computes both together (as the memory rules do through the same memory).
MOVED_WITH_DATA = frozenset({O.Transfer.CONTRACT, O.Transfer.EXCHANGE, O.Transfer.LANEMAP})

#: The value-level reading of the other register-result transfer rules (`argus.ir.transfer`).
RESULT_TAGS = {
    O.Transfer.FRESH: _Workgroup.fresh,
    O.Transfer.RETAG: _Workgroup.retag,
    O.Transfer.KEEP: _Workgroup.keep,
    O.Transfer.MARK: _Workgroup.mark_trace,
    O.Transfer.SHIFT: _Workgroup.shift,
    O.Transfer.UNION: _Workgroup.union,
}


#: `cover_union` over the variables t0..t5 (first, last, step of the own element, then of the
#: element read), evaluated on arrays by `op_Shuffle`.
_COVER_UNION = cover_union(*(Var(f"t{k}", -(2**62), 2**62) for k in range(6)))


def covered_range(tags: dict, name: str, shape) -> tuple[np.ndarray, ...]:
    """(first, last, step) arrays of what each element covers of tag `name` (as the
    verifier's `covered_range`)."""
    recorded = cover_names(name)
    if recorded[0] in tags:
        return tuple(tags[n] for n in recorded)
    if name in tags:
        tag = tags[name]
        return tag, tag, np.where(tag == TOP, TOP, 1)
    return tuple(np.full(shape, TOP, np.int64) for _ in recorded)


def merge_tags(x: dict, y: dict) -> dict:
    """Elementwise tag rule: the union of names; a name both carry keeps equal values, else ⊤."""
    tags = dict(x)
    for name, values in y.items():
        tags[name] = np.where(x[name] == values, values, TOP) if name in x else values
    return tags


# transcendentals as the hardware computes them (within an ulp), from the ISA tables
_UNARY = {"neg": np.negative, "abs": np.abs, "exp2": numerics.exp2, "log2": numerics.log2,
          "rcp": numerics.rcp, "sqrt": numerics.sqrt}
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
           "max": numerics.max_f32, "min": numerics.min_f32}


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

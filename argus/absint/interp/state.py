"""The reference interpreter's values and records: concrete tags (⊤ as `TOP`), register and
LDS state with its race-detector shadow, writes in flight under the memory-ordering clock, the
violations a run reports, and the small helpers every rule module shares.
"""

from __future__ import annotations

import json
from functools import lru_cache

import attrs
import numpy as np

from argus.ir.types import DTYPE_BYTES, LANES, IRError, RegType, ThreadLayout, Value
from argus.isa_cdna3 import numerics
from argus.isa_cdna3.numerics import NUMPY_DTYPES

#: Tag value of an element whose tags are unknown (⊤): a racy LDS read, an out-of-bounds load.
TOP = np.iinfo(np.int64).min
#: An LDS element's tag name that the last write there did not carry.
ABSENT = TOP + 1
MANY = -2  # several threads read one LDS address within one barrier epoch


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
class InFlight:
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
class GlobalInFlight:
    """A global store not landed yet (with the clock): the elements of `tensor` it writes (flat
    indices), the threads that write them and the data; it lands at its wave's next wait."""

    tensor: str
    flat: np.ndarray = attrs.field(eq=False)
    thread: np.ndarray = attrs.field(eq=False)
    data: np.ndarray = attrs.field(eq=False)


def landing(write: InFlight, keep: np.ndarray) -> InFlight:
    """`write` restricted to the elements `keep` selects."""
    return attrs.evolve(write, addr=write.addr[keep], thread=write.thread[keep],
                        data=write.data[keep], tags={n: t[keep] for n, t in write.tags.items()})


#: `LdsState.pending_group` of an address whose newest write in flight is a plain store
STORE = -3


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
    #: the op that read each address in its read epoch (MANY when several did)
    read_op: np.ndarray
    #: with the memory-ordering clock (`absint.sync`): the wait count or copy group that
    #: landed the last write, whether it was a copy, and per address the newest write still
    #: in flight: its copy group (STORE for a plain store, -1: none) and its thread
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
        # as v_cvt_i32_f32: toward zero, saturating, NaN -> 0
        return numerics.cvt_i32_f32(data).view(np.int32).astype(np.float32)
    with np.errstate(all="ignore"):
        return data.astype(NUMPY_DTYPES[dtype]).astype(np.float32)


def truncated_bf16(data: np.ndarray) -> np.ndarray:
    """f32 -> bf16 toward zero: the high 16 bits kept (a NaN whose payload lies in the low
    bits becomes an infinity, as the hardware's v_perm_b32 packing makes it), as float32."""
    bits = np.asarray(data, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)




@lru_cache(maxsize=512)
def layout_table(layout: ThreadLayout) -> tuple[np.ndarray, ...]:
    return layout.table()





@lru_cache(maxsize=64)
def mfma_positions(instr: str):
    """Per operand: (lane, slot) grids and the (block, row, col) each holds, from the catalogue."""
    from argus.isa_cdna3.mfma import mfma

    info = mfma(instr)
    lane_k, slot_k = np.meshgrid(np.arange(LANES), np.arange(info.k_per_lane), indexing="ij")
    lane_c, slot_c = np.meshgrid(np.arange(LANES), np.arange(info.c_values), indexing="ij")
    a = tuple(np.asarray(c) + np.zeros_like(lane_k) for c in info.a_coord(lane_k, slot_k))
    b = tuple(np.asarray(c) + np.zeros_like(lane_k) for c in info.b_coord(lane_k, slot_k))
    c = tuple(np.asarray(x) + np.zeros_like(lane_c) for x in info.c_coord(lane_c, slot_c))
    return info, (lane_k, slot_k), a, b, (lane_c, slot_c), c


def untop(tag: np.ndarray) -> np.ndarray:
    return np.where(tag == TOP, 0, tag)


def first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])



def register_name(op, slot: int) -> str:
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


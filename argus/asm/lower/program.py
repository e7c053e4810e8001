"""The machine program the lowering stages pass along: gfx942 instructions over virtual
registers, labels and structured loops, each instruction tied to the IR op and DSL line it
came from (for the annotated `.s`, register-budget errors and the performance model).

Registers are `VReg`s (a class 's' or 'v', a size in 32-bit registers and an alignment) until
`regalloc` gives each a physical index; `Ref` names a sub-range of one (a pair inside a tile).
"""

from __future__ import annotations

import itertools

import attrs

from argus.ir.types import SourceLoc

_ids = itertools.count()


@attrs.define(eq=False)
class VReg:
    """A virtual register tuple. `phys` is set by the allocator (or fixed for ABI inputs)."""

    cls: str                      # 's' (SGPR) or 'v' (VGPR)
    size: int = 1
    name: str = ""
    align: int = 1
    phys: int | None = None
    serial: int = attrs.field(factory=lambda: next(_ids))

    def __hash__(self):
        return self.serial

    def __getitem__(self, index) -> Ref:
        if isinstance(index, slice):
            start, stop = index.start or 0, self.size if index.stop is None else index.stop
            return Ref(self, start, stop - start)
        return Ref(self, index, 1)

    @property
    def whole(self) -> Ref:
        return Ref(self, 0, self.size)

    def __str__(self):
        return str(self.whole)


@attrs.frozen
class Ref:
    """Registers [start, start + count) of a VReg."""

    reg: VReg
    start: int = 0
    count: int = 1

    @property
    def size(self) -> int:
        return self.count

    def __getitem__(self, index) -> Ref:
        """Registers of this range, as VReg indexing gives them (a tile held in a slice)."""
        if isinstance(index, slice):
            start, stop = index.start or 0, self.count if index.stop is None else index.stop
            return Ref(self.reg, self.start + start, stop - start)
        return Ref(self.reg, self.start + index, 1)

    def units(self) -> tuple[tuple[str, int], ...]:
        """The physical registers referenced, as (file, index) pairs (after allocation)."""
        base = self.reg.phys + self.start
        return tuple((self.reg.cls, base + i) for i in range(self.count))

    def __str__(self):
        if self.reg.phys is None:
            return f"%{self.reg.name or self.reg.serial}[{self.start}:{self.start + self.count}]"
        first = self.reg.phys + self.start
        if self.count == 1:
            return f"{self.reg.cls}{first}"
        return f"{self.reg.cls}[{first}:{first + self.count - 1}]"


@attrs.frozen
class Spread:
    """A tile none of whose registers are its own: register r is `refs[r]` of other tiles (a
    broadcast read in place by the elementwise ops that consume it)."""

    refs: tuple[Ref, ...]

    @property
    def size(self) -> int:
        return len(self.refs)

    def __getitem__(self, index: int) -> Ref:
        return self.refs[index]


@attrs.frozen
class Splat:
    """A tile of one constant that lives in no register: every register is the literal (an
    operand of the VALU instructions that consume it)."""

    value: int | float
    size: int

    def __getitem__(self, index: int) -> int | float:
        return self.value


def ref(x) -> Ref:
    return x.whole if isinstance(x, VReg) else x


@attrs.frozen
class Fixed:
    """A named operand that is not allocated: vcc, exec, scc, off, or a literal text form."""

    text: str

    def __str__(self):
        return self.text


@attrs.frozen
class Label:
    name: str

    def __str__(self):
        return self.name


@attrs.define(eq=False)
class MInst:
    """One machine instruction. `operands` are in assembler order; the first `ndefs` are
    written, the rest read. `mods` is the trailing modifier text (offen offset:16 ...)."""

    opcode: str
    operands: tuple = ()
    ndefs: int = 0
    mods: str = ""
    loc: SourceLoc | None = None
    note: str = ""
    origin: str = ""             # the IR op it lowers, e.g. "mfma"
    inserted: str = ""           # "waitcnt" / "nop" when a later stage added it
    #: an LDS DMA (`async_copy`) that is the newest of its commit group
    closes_group: bool = False
    #: the `s_waitcnt` of a `wait_group(n)`: n, the newest commit groups it leaves in flight
    #: (the wait pass sets its vmcnt from the closing DMAs still pending)
    groups_in_flight: int | None = None

    @property
    def defs(self) -> tuple[Ref, ...]:
        return tuple(ref(o) for o in self.operands[:self.ndefs] if isinstance(o, VReg | Ref))

    @property
    def uses(self) -> tuple[Ref, ...]:
        return tuple(ref(o) for o in self.operands[self.ndefs:] if isinstance(o, VReg | Ref))

    def text(self) -> str:
        ops = ", ".join(_operand_text(o) for o in self.operands)
        body = f"{self.opcode} {ops}".rstrip() if ops else self.opcode
        return f"{body} {self.mods}".rstrip()


def _operand_text(o) -> str:
    if isinstance(o, bool):
        raise TypeError("a boolean is not an operand")
    if isinstance(o, int):
        return str(o) if -16 <= o <= 64 else hex(o & 0xFFFFFFFF)
    if isinstance(o, float):
        return repr(o)
    return str(ref(o) if isinstance(o, VReg) else o)


@attrs.define(eq=False)
class LabelDef:
    label: Label


@attrs.define(eq=False)
class Loop:
    """A counted loop: `body` runs while the condition the latch tests holds; `header` is the
    label the latch branches back to, `exit` the one after it."""

    header: Label
    exit: Label
    body: list = attrs.field(factory=list)
    loc: SourceLoc | None = None
    #: how far down its body the scheduler looks for VALU fillers of MFMA shadows (None: the
    #: default `schedule.FILL_WINDOW`); set by a `fill_window=N` hint of the loop
    fill_window: int | None = None


@attrs.define(eq=False)
class Skip:
    """Straight-line code a uniform forward branch (emitted just before it) may jump over to
    `label`, which follows the body."""

    label: Label
    body: list = attrs.field(factory=list)


@attrs.define(eq=False)
class IfElse:
    """A uniform two-way branch: the test before it jumps to `else_label` when false; the then
    body ends with `s_branch end_label`."""

    else_label: Label
    end_label: Label
    then_body: list = attrs.field(factory=list)
    else_body: list = attrs.field(factory=list)

    @property
    def arms(self) -> tuple[list, list]:
        return self.then_body, self.else_body


Item = MInst | LabelDef | Loop | Skip | IfElse


def flatten(items: list[Item]) -> list[MInst | LabelDef]:
    """The program in layout order (loops dissolved into their labels and instructions)."""
    out: list = []
    for item in items:
        if isinstance(item, Loop):
            out.append(LabelDef(item.header))
            out.extend(flatten(item.body))
            out.append(LabelDef(item.exit))
        elif isinstance(item, Skip):
            out.extend(flatten(item.body))
            out.append(LabelDef(item.label))
        elif isinstance(item, IfElse):
            out.extend(flatten(item.then_body))
            out.append(LabelDef(item.else_label))
            out.extend(flatten(item.else_body))
            out.append(LabelDef(item.end_label))
        else:
            out.append(item)
    return out


def instructions(items: list[Item]):
    """Every MInst, nested ones included, in layout order."""
    for item in items:
        if isinstance(item, Loop | Skip):
            yield from instructions(item.body)
        elif isinstance(item, IfElse):
            for arm in item.arms:
                yield from instructions(arm)
        elif isinstance(item, MInst):
            yield item

"""The ops of the Argus tile IR and the kernel that holds them.

Ops are frozen values with typed operands and results; scalar integers (program ids, loop
induction variables, sizes) are `ir.expr` variables, so every index and layout is a formula.
Each op's `verify()` raises `IRError` naming the op and its source location.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import ClassVar

import attrs

from argus.ir import fields as F
from argus.ir.expr import Const, Expr, Var, as_expr, free_vars
from argus.ir.fields import (
    asserts,
    attr,
    binds,
    block,
    expr,
    exprs,
    named_exprs,
    operand,
    operands,
    record,
    result,
    results,
)
from argus.ir.transfer import Transfer, tag_names
from argus.ir.types import (
    DTYPE_BYTES,
    LANES,
    LDS_BUDGET,
    SIZE_RANGE,
    TAG_RANGE,
    VGPR_BUDGET,
    AddressMap,
    GlobalType,
    IRError,
    LdsType,
    RegType,
    SourceLoc,
    Value,
    coord_vars,
)

_ROLE_NAME = re.compile(r"^[A-Z]_[A-Za-z0-9]+$")


def role_var(role: str, tag: str) -> Var:
    """The variable standing for tag `tag` of the element playing `role` in an assertion."""
    return Var(f"{role}_{tag}", *TAG_RANGE)


def role_var_named(name: str) -> Var | None:
    """The role variable spelt `name` (like A_k), or None when `name` spells none."""
    return role_var(*split_role_var(name)) if _ROLE_NAME.match(name) else None


def split_role_var(name: str) -> tuple[str, str]:
    role, _, tag = name.partition("_")
    return role, tag


def is_role_var(var: Var) -> bool:
    """Whether `var` stands for an operand's tag (like A_k) rather than a size or loop index."""
    return bool(_ROLE_NAME.match(var.name)) and (var.lo, var.hi) == TAG_RANGE


def global_coord_vars(rank: int) -> tuple[Var, ...]:
    """Coordinates of a global tensor's element, used in its tag definition."""
    return tuple(Var(f"c{axis}", 0, SIZE_RANGE[1]) for axis in range(rank))


@attrs.frozen
class TagAssertion:
    """A compile-time predicate over the tags of the elements that meet at one op."""

    predicate: Expr = attrs.field(converter=as_expr)
    message: str
    loc: SourceLoc

    def roles(self) -> set[str]:
        return {split_role_var(v.name)[0] for v in free_vars(self.predicate) if is_role_var(v)}


def _fail(op, message: str):
    raise IRError(f"{op.mnemonic}: {message}", op.loc)


#: The order in which assertion roles are passed to a predicate (`lambda V, D: ...`).
ROLE_ORDER = ("A", "B", "C", "V", "D", "X", "Y")


@attrs.frozen
class Op:
    """Common behaviour, derived from the field declarations (`argus.ir.fields`): operands,
    results, nested blocks, scalar expressions, bound variables, assertion roles, rewriting.

    A subclass declares its fields, and in its class line its `mnemonic` (the text form's name)
    and its tag-transfer rule (`argus.ir.transfer`): `class Cast(Op, mnemonic="cast",
    transfer=Transfer.KEEP)`; it checks its own invariants in `verify`. Every op has a source
    location `loc`, given by keyword."""

    loc: SourceLoc = attrs.field(kw_only=True)
    mnemonic: ClassVar[str] = "op"
    transfer: ClassVar[Transfer]

    def __init_subclass__(cls, mnemonic: str | None = None, transfer: Transfer | None = None,
                          **kwargs):
        super().__init_subclass__(**kwargs)
        # attrs rebuilds each slotted class without these arguments; the first call set them
        if mnemonic is not None:
            cls.mnemonic = mnemonic
        if transfer is not None:
            cls.transfer = transfer

    @property
    def operands(self) -> tuple[Value, ...]:
        return F.of_kind(self, F.Kind.OPERAND)

    @property
    def results(self) -> tuple[Value, ...]:
        return F.of_kind(self, F.Kind.RESULT)

    @property
    def blocks(self) -> tuple[Block, ...]:
        return F.of_kind(self, F.Kind.BLOCK)

    @property
    def exprs(self) -> tuple[Expr, ...]:
        """The formulas over the enclosing scope's scalars (not those over tile coordinates)."""
        return F.of_kind(self, F.Kind.EXPR, lambda decl: decl.coords is None)

    @property
    def binds(self) -> tuple[Var, ...]:
        """Scalars the op binds: for the ops after it, or, for an op with blocks, inside them."""
        return F.of_kind(self, F.Kind.BINDS)

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(role for role, _ in _role_fields(type(self)))

    def replace_operands(self, mapping: dict[str, Value]) -> Op:
        """This op with every operand named in `mapping` replaced (results, blocks untouched)."""
        if not mapping:
            return self
        return F.map_operands(self, lambda v: mapping.get(v.name, v))

    def verify(self) -> None:
        """The checks every op gets (assertion roles), then the op's own (`check`)."""
        for assertion in F.of_kind(self, F.Kind.ASSERTS):
            unknown = assertion.roles() - set(self.roles)
            if unknown:
                _fail(self, f"assertion '{assertion.message}' uses role(s) {sorted(unknown)}; "
                            f"at this op the roles are {list(self.roles) or 'none'}")
        self.check()

    def check(self) -> None:
        """The op's own invariants; raise IRError through `_fail`."""


def _reg(op, value: Value, what: str) -> RegType:
    if not isinstance(value.type, RegType):
        _fail(op, f"{what} {value} must be a register tile, not {value.type}")
    return value.type


def _check_fn(op, allowed: tuple[str, ...], what: str):
    if op.fn not in allowed:
        _fail(op, f"unknown {what} {op.fn!r}; use one of {allowed}")


def _same_shape(op, x: RegType, y: RegType, what: str):
    if x.shape != y.shape:
        _fail(op, f"{what}: shapes {list(x.shape)} and {list(y.shape)} differ")
    if x.layout.slots != y.layout.slots or x.layout.waves != y.layout.waves:
        _fail(op, f"{what}: operands hold {x.layout.slots} and {y.layout.slots} slots per lane; "
                  "elementwise ops combine the same registers, so give both the same layout")


@attrs.frozen
class ProgramId(Op, mnemonic="program_id", transfer=Transfer.NONE):
    """Binds `var` to the workgroup id along `axis` of the grid."""

    var: Var = binds()
    axis: int = attr()

    def check(self):
        if self.axis not in (0, 1, 2):
            _fail(self, f"axis {self.axis} is not 0, 1 or 2")


@attrs.frozen
class TagDef(Op, mnemonic="tag", transfer=Transfer.DEFINE):
    """Tags of a global tensor's elements: each name a formula in the coordinates c0, c1, ..."""

    tensor: Value = operand()
    tags: tuple[tuple[str, Expr], ...] = named_exprs(coords="tensor")

    def check(self):
        if not isinstance(self.tensor.type, GlobalType):
            _fail(self, f"{self.tensor} is not a global tensor; tag register tiles with tag_tile")
        _check_tag_names(self, self.tags)


def _check_tag_names(op, tags):
    names = [n for n, _ in tags]
    if len(set(names)) != len(names) or not all(n.isidentifier() and "_" not in n for n in names):
        _fail(op, f"tag names {names} must be distinct identifiers without '_'")


@attrs.frozen
class TagTile(Op, mnemonic="tag_tile", transfer=Transfer.RETAG):
    """A copy of register tile `x` whose elements get new tags, formulas in its coordinates."""

    result: Value = result()
    x: Value = operand()
    tags: tuple[tuple[str, Expr], ...] = named_exprs(coords="x")

    def check(self):
        x = _reg(self, self.x, "operand")
        if self.result.type != x:
            _fail(self, "the result type must equal the operand type")
        _check_tag_names(self, self.tags)


def _check_global_access(op, tile: RegType, origin=None):
    """The tile `op` loads or stores fits its tensor, origin, axes and gather."""
    _check_active(op)
    tensor, axes = op.tensor, op.axes
    origin = op.origin if origin is None else origin
    if not isinstance(tensor.type, GlobalType):
        _fail(op, f"{tensor} is not a global tensor")
    rank = len(tensor.type.shape)
    if len(origin) != rank:
        _fail(op, f"origin has {len(origin)} coordinates but {tensor} has rank {rank}")
    if len(axes) != len(tile.shape) or len(set(axes)) != len(axes) or \
            not all(0 <= a < rank for a in axes):
        _fail(op, f"axes {list(axes)} must name {len(tile.shape)} distinct axes of {tensor} "
                  f"(rank {rank}), one per tile dimension")
    if tile.dtype != tensor.type.dtype:
        _fail(op, f"tile dtype {tile.dtype} differs from {tensor} dtype {tensor.type.dtype}; "
                  "cast the tile first")
    _check_gather(op, op.gather, tile, tensor)
    _check_rows(op, getattr(op, "rows", None), tile, tensor)


@attrs.frozen
class Gather:
    """An indirect coordinate: along tensor axis `axis` the access uses
    `index[origin + c[tile_axis]] // divisor` (a rank-1 i32 tensor of row ids) instead of
    origin + c. A divisor above 1 reads one row for `divisor` consecutive ids: a routing
    table of (token, slot) ids token * topk + slot gathers the token's row with topk."""

    index: Value = operand()
    origin: Expr = expr()
    tile_axis: int = attr()
    axis: int = attr()
    divisor: int = attr(default=1)


def _check_gather(op, gather: Gather | None, tile: RegType, tensor: Value):
    if gather is None:
        return
    t = gather.index.type
    if not isinstance(t, GlobalType) or len(t.shape) != 1 or t.dtype != "i32":
        _fail(op, f"gather index {gather.index} must be a rank-1 i32 global tensor, not {t}")
    if not 0 <= gather.tile_axis < len(tile.shape):
        _fail(op, f"gather tile axis {gather.tile_axis} is not an axis of the tile")
    if not 0 <= gather.axis < len(tensor.type.shape):
        _fail(op, f"gather axis {gather.axis} is not an axis of {tensor}")
    if isinstance(gather.divisor, bool) or not isinstance(gather.divisor, int) \
            or gather.divisor < 1:
        _fail(op, f"gather divisor {gather.divisor!r} must be a positive int (the ids per row)")


@attrs.frozen
class Rows:
    """An indirect coordinate held in registers: along tensor axis `axis` each element uses the
    value its own thread slot holds in `index` (an i32 register tile laid out like the data
    tile, loaded earlier — through LDS or not). The values are entries of the rank-1 i32
    tensor `source`, the entry at position `index`'s tag `at`: the verifier knows a row only
    as that entry (so `T.distinct(source, ...)` applies), and nothing where the tag is ⊤; the
    interpreter checks each value against it."""

    index: Value = operand()
    source: Value = operand()
    at: str = attr()
    axis: int = attr()


def _check_rows(op, rows: Rows | None, tile: RegType, tensor: Value):
    if rows is None:
        return
    index, source = rows.index.type, rows.source.type
    if not isinstance(index, RegType) or index.dtype != "i32":
        _fail(op, f"rows index {rows.index} must be an i32 register tile, not {index}")
    if (index.layout.waves, index.layout.slots) != (tile.layout.waves, tile.layout.slots):
        _fail(op, f"rows index {rows.index} holds {index.layout.slots} slots per lane over "
                  f"{index.layout.waves} waves, the data tile {tile.layout.slots} over "
                  f"{tile.layout.waves}: each slot's row comes from the same slot of the index")
    if not isinstance(source, GlobalType) or len(source.shape) != 1 or source.dtype != "i32":
        _fail(op, f"rows source {rows.source} must be a rank-1 i32 tensor argument, not {source}")
    if not 0 <= rows.axis < len(tensor.type.shape):
        _fail(op, f"rows axis {rows.axis} is not an axis of {tensor}")
    if op.gather is not None:
        _fail(op, "give either gather= or rows=, not both")


@attrs.frozen
class _GlobalAccess(Op):
    """What global loads and stores share, given by keyword: `gather` replaces one coordinate
    by a row id read from an index tensor; `guard` gives buffer-instruction semantics
    (out-of-range elements read 0 and are not written, instead of being out-of-bounds errors;
    tags still follow the tensor's formulas); `active` (a condition on `wave` and `lane`)
    names the threads that take part, the others neither read nor write (their loaded
    registers are unknown); `rows` takes one coordinate from a register tile of row ids."""

    gather: Gather | None = record(Gather, kw_only=True)
    guard: bool = attr(default=False, kw_only=True)
    active: Expr = F.active()
    rows: Rows | None = record(Rows, kw_only=True)


@attrs.frozen
class GlobalLoad(_GlobalAccess, mnemonic="global.load", transfer=Transfer.LOAD):
    """result[c] = tensor[origin + c placed on `axes`] for every element the layout holds; its
    tags are the tensor's tag formulas at that coordinate (⊤ out of range)."""

    result: Value = result()
    tensor: Value = operand()
    origin: tuple[Expr, ...] = exprs()
    axes: tuple[int, ...] = attr(converter=tuple)

    def check(self):
        _check_global_access(self, _reg(self, self.result, "result"))


@attrs.frozen
class GlobalStore(_GlobalAccess, mnemonic="global.store", transfer=Transfer.NONE):
    """tensor[origin + c on `axes`] = value[c]. Assertion roles: V (value), D (destination)."""

    tensor: Value = operand(role="D")
    origin: tuple[Expr, ...] = exprs()
    axes: tuple[int, ...] = attr(converter=tuple)
    value: Value = operand(role="V")
    asserts: tuple[TagAssertion, ...] = asserts()

    def check(self):
        _check_global_access(self, _reg(self, self.value, "value"))


@attrs.frozen
class ScalarLoad(Op, mnemonic="scalar.load", transfer=Transfer.NONE):
    """Binds `var` to one element of an i32 tensor (workgroup-uniform, e.g. an expert id);
    its declared range [lo, hi) is checked at run time, and so are `bounds` = (lo, hi) when
    the range depends on sizes (an expert id below the number of experts E)."""

    var: Var = binds()
    tensor: Value = operand()
    index: tuple[Expr, ...] = exprs()
    bounds: tuple[Expr, ...] = exprs(default=())

    def check(self):
        t = self.tensor.type
        if not isinstance(t, GlobalType) or t.dtype != "i32":
            _fail(self, f"{self.tensor} must be an i32 global tensor")
        if len(self.index) != len(t.shape):
            _fail(self, f"index has {len(self.index)} coordinates but {self.tensor} has rank "
                        f"{len(t.shape)}")
        if self.bounds and (len(self.bounds) != 2 or any(b.is_bool for b in self.bounds)):
            _fail(self, f"bounds {list(self.bounds)} must be two integer expressions (lo, hi) "
                        f"with lo <= {self.var.name} < hi")
        if any(self.var in free_vars(b) for b in self.bounds):
            _fail(self, f"the bounds of {self.var.name} may not mention {self.var.name} itself")


@attrs.frozen
class Distinct(Op, mnemonic="distinct", transfer=Transfer.NONE):
    """A declared fact about index data: the entries of `tensor` (a rank-1 i32 tensor) that lie
    in [lo, hi) are pairwise distinct, e.g. every real token once among padded row ids.

    The verifier assumes it where rows gathered through `tensor` meet (two workgroups storing
    rows); the interpreter checks it on the actual data. `lo` and `hi` may mention sizes and
    scalar arguments only: the fact holds for the whole launch."""

    tensor: Value = operand()
    lo: Expr = expr()
    hi: Expr = expr()

    def check(self):
        t = self.tensor.type
        if not isinstance(t, GlobalType) or len(t.shape) != 1 or t.dtype != "i32":
            _fail(self, f"{self.tensor} must be a rank-1 i32 index tensor, not {t}")
        for name, bound in (("lo", self.lo), ("hi", self.hi)):
            if bound.is_bool:
                _fail(self, f"{name} = '{bound}' must be an integer expression, not a condition")


@attrs.frozen
class GlobalAtomicAdd(GlobalStore, mnemonic="global.atomic_add"):
    """tensor[origin + c on `axes`] += value[c], atomically."""



@attrs.frozen
class LdsAlloc(Op, mnemonic="lds.alloc", transfer=Transfer.NONE):
    """A workgroup-shared LDS allocation."""

    result: Value = result()

    def check(self):
        if not isinstance(self.result.type, LdsType) or self.result.type.size <= 0:
            _fail(self, "the result must be an LDS buffer of positive size")


def active_of(op) -> Expr:
    """Which threads take part in a memory op: its `active` condition on `wave` and `lane`
    (`T.lanes`); every thread for ops without one."""
    return getattr(op, "active", Const(True))


def _check_active(op):
    """`active` is a condition on the thread ids `wave` and `lane`."""
    active = active_of(op)
    if not active.is_bool:
        _fail(op, f"active = '{active}' must be a condition on wave and lane")
    for var in free_vars(active):
        if var.name in ("wave", "lane") and var.lo != 0:
            _fail(op, f"active = '{active}': {var.name} starts at 0")


def _check_lds_access(op, tile: RegType):
    """The tile `op` loads or stores fits its buffer, address map and origin."""
    _check_active(op)
    buffer, addr, origin = op.buffer, op.addr, op.origin
    if not isinstance(buffer.type, LdsType):
        _fail(op, f"{buffer} is not an LDS buffer")
    if len(origin) != len(addr.shape):
        _fail(op, f"origin has {len(origin)} coordinates but the LDS view has rank "
                  f"{len(addr.shape)}")
    if len(tile.shape) > len(addr.shape):
        _fail(op, f"tile rank {len(tile.shape)} exceeds the LDS view rank {len(addr.shape)}")
    if tile.dtype != buffer.type.dtype:
        _fail(op, f"tile dtype {tile.dtype} differs from LDS dtype {buffer.type.dtype}")


@attrs.frozen
class LdsStore(Op, mnemonic="lds.store", transfer=Transfer.STORE):
    """buffer[addr(origin + c)] = value[c]; the tile fills the view's trailing dimensions. Tags
    are stored with the data, per address. Role V."""

    buffer: Value = operand()
    addr: AddressMap = attr()
    origin: tuple[Expr, ...] = exprs()
    value: Value = operand(role="V")
    asserts: tuple[TagAssertion, ...] = asserts()
    active: Expr = F.active()

    def check(self):
        _check_lds_access(self, _reg(self, self.value, "value"))


@attrs.frozen
class LdsLoad(Op, mnemonic="lds.load", transfer=Transfer.LOAD):
    """result[c] = buffer[addr(origin + c)]; the tile reads the view's trailing dimensions.

    A read sees the last write ordered before it (same thread, or an earlier barrier epoch);
    a write by another thread in the current epoch is a race and makes the tags ⊤, as does
    reading an address nobody wrote."""

    result: Value = result()
    buffer: Value = operand()
    addr: AddressMap = attr()
    origin: tuple[Expr, ...] = exprs()
    active: Expr = F.active()

    def check(self):
        _check_lds_access(self, _reg(self, self.result, "result"))


@attrs.frozen
class LdsAtomicAdd(LdsStore, mnemonic="lds.atomic_add"):
    """buffer[addr(origin + c)] += value[c], atomically (ds_add). Adds by several threads to
    one address in one barrier epoch commute, so they do not race with each other; they race
    with other threads' plain stores and loads of it in that epoch. The sum mixes the
    contributions, so its tags are unknown (⊤); the old value is part of it, so an address no
    store initialised before the add reads as uninitialised. Role V."""


@attrs.frozen
class AsyncCopy(Op, mnemonic="async_copy", transfer=Transfer.COPY):
    """buffer[addr(origin + c)] = tensor[source + c on `axes`], copied straight from global
    memory into LDS (gfx942 `buffer_load_dword ... lds`) by the thread that holds c in `tile`'s
    layout; no register holds the data. The copy joins this wave's open commit group and lands
    when a `wait_group` (or a `wait`) retires that group: until then every thread, the issuing
    one included, reads the element's old content. Tags are the tensor's formulas at c."""

    #: a copy reads no index tensor and is never guarded: the global access formulas
    #: (`ir.access`) read these like a load's
    gather: ClassVar[None] = None
    guard: ClassVar[bool] = False

    buffer: Value = operand()
    addr: AddressMap = attr()
    origin: tuple[Expr, ...] = exprs()
    tensor: Value = operand()
    source: tuple[Expr, ...] = exprs()
    axes: tuple[int, ...] = attr(converter=tuple)
    tile: RegType = attr()

    def check(self):
        if not isinstance(self.tile, RegType):
            _fail(self, f"tile {self.tile!r} must be a register tile type (the copy's layout)")
        _check_lds_access(self, self.tile)
        _check_global_access(self, self.tile, origin=self.source)
        if DTYPE_BYTES[self.tile.dtype] * self.tile.layout.slots % 4:
            _fail(self, f"each lane copies {self.tile.layout.slots} {self.tile.dtype} "
                        "element(s); buffer_load_dword ... lds moves whole dwords, so give "
                        "each lane a multiple of 4 bytes")


@attrs.frozen
class CommitGroup(Op, mnemonic="commit_group", transfer=Transfer.NONE):
    """Closes this wave's open group of async copies: `wait_group` counts closed groups."""


@attrs.frozen
class WaitGroup(Op, mnemonic="wait_group", transfer=Transfer.NONE):
    """This wave waits until at most `pending` of its committed copy groups are still in
    flight (the newest ones); the older groups have landed (`s_waitcnt vmcnt`). Other waves
    see them only after a barrier that follows this wait."""

    pending: int = attr()

    def check(self):
        if self.pending < 0:
            _fail(self, f"pending={self.pending}: give the number of newest groups that may "
                        "stay in flight, 0 or more")


@attrs.frozen
class Wait(Op, mnemonic="wait", transfer=Transfer.NONE):
    """s_waitcnt vmcnt(0) lgkmcnt(0): this wave's LDS stores and every committed copy group
    have landed. It orders nothing between waves by itself (a barrier after it does); on gfx942
    it is also what a workgroup-scope release fence lowers to, so it stands for the fence."""


@attrs.frozen
class Mfma(Op, mnemonic="mfma", transfer=Transfer.CONTRACT):
    """One MFMA instruction per wave: D = A @ B + C on the registers, by the catalogue layouts.

    Assertion roles A, B, C range over every (i, j, k) the instruction combines. The result's
    tags: A's tags and B's tags without the names they share (the contracted ones, e.g. k).

    With `cover` (a contracted tag, e.g. "k") the result also records what the accumulation
    has covered of it, the progression `<cover>first`, first + step, ..., `<cover>last` with
    step `<cover>step`: C's recorded progression (none when C carries none) united with the
    instruction's own, A's `cover` values along the contraction. They are ⊤ where A's values
    are no progression or the union is not an exact one (overlapping or with gaps), so an
    assertion at the store can say the accumulation saw every k exactly once."""

    result: Value = result()
    instr: str = attr()
    a: Value = operand(role="A")
    b: Value = operand(role="B")
    c: Value = operand(role="C")
    asserts: tuple[TagAssertion, ...] = asserts()
    cover: str = attr(default="", kw_only=True)

    def check(self):
        from argus.isa_cdna3.mfma import UnknownMfmaError, mfma

        try:
            info = mfma(self.instr)
        except UnknownMfmaError as error:
            _fail(self, str(error))
        if info.sparse:
            _fail(self, f"{info.name} is a sparse SMFMAC; the IR supports dense MFMAs only")
        a, b, c = (_reg(self, v, n) for v, n in ((self.a, "A"), (self.b, "B"), (self.c, "C")))
        result = _reg(self, self.result, "result")
        for name, tile, dtype, slots in (("A", a, info.a_type, info.k_per_lane),
                                         ("B", b, info.b_type, info.k_per_lane),
                                         ("C", c, info.c_type, info.c_values),
                                         ("result", result, info.c_type, info.c_values)):
            # xf32 instructions read f32 registers (and compute at reduced precision)
            dtype = "f32" if dtype == "xf32" else dtype
            if tile.dtype != dtype:
                _fail(self, f"{info.name} takes {name} as {dtype}, got {tile.dtype}")
            if tile.layout.slots != slots:
                _fail(self, f"{info.name} takes {slots} {name} element(s) per lane, the tile holds "
                            f"{tile.layout.slots}")
        if len({a.layout.waves, b.layout.waves, c.layout.waves}) != 1:
            _fail(self, "A, B and C must be laid out over the same number of waves")
        if self.cover and not (self.cover.isidentifier() and "_" not in self.cover):
            _fail(self, f"cover={self.cover!r} must be a tag name (an identifier without '_')")


@attrs.frozen
class MfmaBroadcast(Mfma, mnemonic="mfma.bcast"):
    """A multi-block MFMA with the A-broadcast modifiers CBSZ and ABID: the blocks form groups
    of 2**cbsz, and every block of a group reads A from block `abid` of its group (the other
    blocks' A registers are not read). B and C stay per block."""

    cbsz: int = attr(kw_only=True)
    abid: int = attr(kw_only=True)

    def check(self):
        super().check()
        from argus.isa_cdna3.mfma import mfma

        info = mfma(self.instr)
        if not 0 <= self.cbsz or 2 ** self.cbsz > info.blocks:
            _fail(self, f"cbsz:{self.cbsz} broadcasts over 2**cbsz blocks, but {info.name} has "
                        f"{info.blocks} block(s); use 0 <= cbsz <= log2({info.blocks})")
        if not 0 <= self.abid < 2 ** self.cbsz:
            _fail(self, f"abid:{self.abid} must name a block of a broadcast group of "
                        f"{2 ** self.cbsz} (0 <= abid < 2**cbsz)")

    def a_block(self, block):
        """The block whose A registers block `block` reads (ints, arrays or expressions)."""
        group = 2 ** self.cbsz
        return block // group * group + self.abid


@attrs.frozen
class Full(Op, mnemonic="full", transfer=Transfer.FRESH):
    """A register tile with every element `value`, carrying no tags."""

    result: Value = result()
    value: float = attr()

    def check(self):
        _reg(self, self.result, "result")


UNARY_FNS = ("neg", "abs", "exp2", "log2", "rcp", "sqrt", "rsqrt", "floor", "trunc")
#: Comparisons give masks: 1.0 where the relation holds, 0.0 where not (false with a NaN,
#: except `ne`), so a mask multiplies, sums and feeds `select`.
COMPARE_FNS = ("lt", "le", "gt", "ge", "eq", "ne")
BINARY_FNS = ("add", "sub", "mul", "div", "max", "min") + COMPARE_FNS


@attrs.frozen
class Unary(Op, mnemonic="unary", transfer=Transfer.KEEP):
    """f32 math per element; tags are kept. Role X."""

    result: Value = result()
    fn: str = attr()
    x: Value = operand(role="X")
    asserts: tuple[TagAssertion, ...] = asserts()

    def check(self):
        _check_fn(self, UNARY_FNS, "function")
        x, result = _reg(self, self.x, "operand"), _reg(self, self.result, "result")
        _same_shape(self, x, result, "operand and result")
        if x.dtype != "f32" or result.dtype != "f32":
            _fail(self, f"{self.fn} computes on f32 tiles; cast {x.dtype} first")


@attrs.frozen
class Binary(Op, mnemonic="binary", transfer=Transfer.UNION):
    """Elementwise on the same (thread, slot) of both operands; roles X and Y. Tags: the union
    of both operands' names; a name both carry keeps its value where they agree, else ⊤."""

    result: Value = result()
    fn: str = attr()
    x: Value = operand(role="X")
    y: Value = operand(role="Y")
    asserts: tuple[TagAssertion, ...] = asserts()

    def check(self):
        _check_fn(self, BINARY_FNS, "function")
        x, y = _reg(self, self.x, "X"), _reg(self, self.y, "Y")
        result = _reg(self, self.result, "result")
        _same_shape(self, x, y, "X and Y")
        _same_shape(self, x, result, "operands and result")
        if not x.dtype == y.dtype == result.dtype == "f32":
            _fail(self, f"{self.fn} computes on f32 tiles, got {x.dtype} and {y.dtype}")


@attrs.frozen
class Select(Op, mnemonic="select", transfer=Transfer.UNION):
    """result = x where `mask` is nonzero, else y (a mask from a comparison: 1.0 / 0.0), on the
    same (thread, slot) of all three; roles X and Y, tags as for a binary op over x and y."""

    result: Value = result()
    x: Value = operand(role="X")
    y: Value = operand(role="Y")
    mask: Value = operand()
    asserts: tuple[TagAssertion, ...] = asserts()

    def check(self):
        x, y = _reg(self, self.x, "X"), _reg(self, self.y, "Y")
        mask, result = _reg(self, self.mask, "mask"), _reg(self, self.result, "result")
        _same_shape(self, x, y, "X and Y")
        _same_shape(self, x, mask, "X and the mask")
        _same_shape(self, x, result, "operands and result")
        if not x.dtype == y.dtype == mask.dtype == result.dtype == "f32":
            _fail(self, f"select picks between f32 tiles by an f32 mask, got {x.dtype}, "
                        f"{y.dtype} and a {mask.dtype} mask")


@attrs.frozen
class Iota(Op, mnemonic="iota", transfer=Transfer.FRESH):
    """result[c] = start + c[axis] (axis -1: start alone), as the result's dtype (f32 or i32):
    index tiles, and problem sizes as tiles (`x * N`); no tags. `start` is a formula in the
    enclosing scalars (sizes, program ids, loop counters)."""

    result: Value = result()
    axis: int = attr()
    start: Expr = expr()

    def check(self):
        result = _reg(self, self.result, "result")
        if not -1 <= self.axis < len(result.shape):
            _fail(self, f"axis {self.axis} is out of range for shape {list(result.shape)} "
                        "(-1: no axis, the start alone)")
        if result.dtype not in ("f32", "i32"):
            _fail(self, f"iota gives f32 or i32 tiles, not {result.dtype}")
        if self.start.is_bool:
            _fail(self, f"the start '{self.start}' must be an integer formula")


#: How a narrowing cast rounds: to nearest even (the default), or toward zero (truncation,
#: what AMD's default flash-attention kernels do when they pack P to bf16).
ROUNDINGS = ("rne", "rtz")


@attrs.frozen
class Cast(Op, mnemonic="cast", transfer=Transfer.KEEP):
    """Convert element type (rounding as `rounding` says: nearest even, or toward zero);
    layout and tags are kept."""

    result: Value = result()
    x: Value = operand()
    rounding: str = attr(default="rne")

    def check(self):
        x, result = _reg(self, self.x, "operand"), _reg(self, self.result, "result")
        _same_shape(self, x, result, "operand and result")
        if self.rounding not in ROUNDINGS:
            _fail(self, f"rounding {self.rounding!r} is not one of {list(ROUNDINGS)}")
        if self.rounding == "rtz" and (x.dtype, result.dtype) != ("f32", "bf16"):
            _fail(self, f"rounding 'rtz' is defined for f32 -> bf16 only, not {x.dtype} -> "
                        f"{result.dtype}")


#: What an assertion at a mask means, as reports state it.
MASK_AGREEMENT = ("at a mask the predicate must hold exactly where the mask keeps the element "
                  "(and fail where it fills it)")


@attrs.frozen
class Mask(Op, mnemonic="mask", transfer=Transfer.MARK):
    """Keep elements whose coordinates satisfy `keep` (a condition in c0, c1, ... and scalars),
    set the others to `fill`. An assertion here (role X) must agree with `keep` per element.
    With `trace`, the result also carries that tag: 1 where `keep` held, 0 where filled.
    """

    result: Value = result()
    x: Value = operand(role="X")
    keep: Expr = expr(coords="x")
    fill: float = attr()
    asserts: tuple[TagAssertion, ...] = asserts()
    trace: str | None = attr(default=None)

    def check(self):
        x, result = _reg(self, self.x, "operand"), _reg(self, self.result, "result")
        _same_shape(self, x, result, "operand and result")
        if not self.keep.is_bool:
            _fail(self, f"the mask '{self.keep}' must be a condition (compare it)")
        if self.trace is not None:
            _check_tag_names(self, ((self.trace, None),))


REDUCE_FNS = ("max", "sum", "min", "prod")


@attrs.frozen
class Reduce(Op, mnemonic="reduce", transfer=Transfer.EXCHANGE):
    """Cross-lane reduction along `axis` within each wave; tags in `drop` are removed, the others
    must agree along the axis."""

    result: Value = result()
    fn: str = attr()
    x: Value = operand()
    axis: int = attr()
    drop: tuple[str, ...] = attr(converter=tuple)

    def check(self):
        _check_fn(self, REDUCE_FNS, "reduction")
        x, result = _reg(self, self.x, "operand"), _reg(self, self.result, "result")
        if not 0 <= self.axis < len(x.shape):
            _fail(self, f"axis {self.axis} is out of range for shape {list(x.shape)}")
        expected = x.shape[:self.axis] + x.shape[self.axis + 1:]
        if result.shape != expected:
            _fail(self, f"reducing {list(x.shape)} along axis {self.axis} gives "
                        f"{list(expected)}, not {list(result.shape)}")


@attrs.frozen
class Broadcast(Op, mnemonic="broadcast", transfer=Transfer.EXCHANGE):
    """result[c] = x[c without `axis`], exchanged across lanes within each wave."""

    result: Value = result()
    x: Value = operand()
    axis: int = attr()

    def check(self):
        x, result = _reg(self, self.x, "operand"), _reg(self, self.result, "result")
        if not 0 <= self.axis < len(result.shape):
            _fail(self, f"axis {self.axis} is out of range for shape {list(result.shape)}")
        if result.shape[:self.axis] + result.shape[self.axis + 1:] != x.shape:
            _fail(self, f"cannot broadcast {list(x.shape)} to {list(result.shape)} along "
                        f"axis {self.axis}")


@attrs.frozen
class Shuffle(Op, mnemonic="shuffle", transfer=Transfer.LANEMAP):
    """Cross-lane movement within each wave by a gfx942 lane map (`isa_cdna3.lanemaps`, named
    by `lanes` with integer `params`): slot s of lane l reads slot s of lane source(l). Without
    `combine` the result is the element read; with it, fn(own, read) ("max" or "sum"). A lane
    whose read is invalid (a DPP source outside its row) keeps its own element.

    Tags travel with the data; a combining shuffle keeps a name where both elements agree and
    turns the tag named `cover` (one that differs across the combined lanes, like a column)
    into what the result covers, the progression `<cover>first`, first + step, ...,
    `<cover>last` with step `<cover>step` (all ⊤ where the two ranges may overlap or their
    union is no progression), so an assertion can say a row maximum covers every column."""

    result: Value = result()
    x: Value = operand()
    lanes: str = attr()
    params: tuple[int, ...] = attr(converter=tuple)
    combine: str = attr(default="")
    cover: str = attr(default="")

    def check(self):
        from argus.isa_cdna3.lanemaps import LaneMapError, lane_map

        x, result = _reg(self, self.x, "operand"), _reg(self, self.result, "result")
        if x != result:
            _fail(self, f"the result type {result} must equal the operand type {x}: a shuffle "
                        "moves elements between lanes, the layout stays")
        try:
            lane_map(self.lanes, self.params)
        except LaneMapError as error:
            _fail(self, str(error))
        if self.combine and self.combine not in REDUCE_FNS:
            _fail(self, f"unknown combine {self.combine!r}; use one of {REDUCE_FNS} or none")
        if self.cover and not self.combine:
            _fail(self, f"cover={self.cover!r} records what a combination covers; give "
                        "combine= too")
        if self.cover and not (self.cover.isidentifier() and "_" not in self.cover):
            _fail(self, f"cover={self.cover!r} must be a tag name (an identifier without '_')")


@attrs.frozen
class SlotSlice(Op, mnemonic="slot_slice", transfer=Transfer.SHIFT):
    """Reinterpret slots [start, start + result slots) of `x` as a new tile: no data moves,
    only the claimed logical coordinates change (tags travel with the data)."""

    result: Value = result()
    x: Value = operand()
    start: int = attr()

    def check(self):
        x, result = _reg(self, self.x, "operand"), _reg(self, self.result, "result")
        if x.dtype != result.dtype:
            _fail(self, "slicing slots cannot change the dtype; cast instead")
        if not 0 <= self.start <= self.start + result.layout.slots <= x.layout.slots:
            _fail(self, f"slots [{self.start}, {self.start + result.layout.slots}) are not "
                        f"within the {x.layout.slots} slots of {self.x}")


@attrs.frozen
class Barrier(Op, mnemonic="barrier", transfer=Transfer.NONE):
    """This wave's LDS stores land (s_waitcnt lgkmcnt(0)), then all waves of the workgroup
    arrive (s_barrier): LDS accesses before it are ordered before those after it. Async copies
    are not waited for (they need a `wait_group` or a `wait` first)."""


@attrs.frozen
class BarrierNoWait(Op, mnemonic="barrier.nowait", transfer=Transfer.NONE):
    """s_barrier alone: all waves arrive, but nothing waits for memory, so a store (or copy)
    still in flight is not ordered before the reads after it."""


@attrs.frozen
class GroupBarrier(Op, mnemonic="barrier.group", transfer=Transfer.NONE):
    """A barrier of a wave group: the waves where `active` (a condition on `wave`) holds
    arrive; LDS accesses before it by one of them are ordered before those after it by another
    of them, and nothing else is ordered (global memory is ordered by `barrier` only).
    gfx942's s_barrier has no groups (it waits for every wave), so the backend does not lower
    it; the verifier and the interpreter model it (in loops too, with a group fixed per op)."""

    active: Expr = F.active()

    def check(self):
        _check_active(self)
        if "lane" in {v.name for v in free_vars(self.active)}:
            _fail(self, f"a group barrier's condition '{self.active}' may mention the wave only: "
                        "every lane of a wave arrives together")


@attrs.frozen
class Yield(Op, mnemonic="yield", transfer=Transfer.NONE):
    values: tuple[Value, ...] = operands()


@attrs.frozen
class Block:
    """A straight-line region; `args` are bound by the enclosing op (loop-carried values)."""

    args: tuple[Value, ...] = attrs.field(converter=tuple)
    ops: tuple[Op, ...] = attrs.field(converter=tuple)


@attrs.frozen
class For(Op, mnemonic="for", transfer=Transfer.CARRY):
    """for iv in range(start, stop, step) with loop-carried values; policies annotate it."""

    iv: Var = binds()
    start: Expr = expr()
    stop: Expr = expr()
    step: int = attr()
    inits: tuple[Value, ...] = operands()
    body: Block = block()
    results: tuple[Value, ...] = results()
    stages: int = attr(default=1)
    unroll: int = attr(default=1)
    hints: tuple[str, ...] = attr(default=(), converter=tuple)

    def check(self):
        if self.step <= 0:
            _fail(self, f"step {self.step} must be positive")
        if self.stages < 1 or self.unroll < 1:
            _fail(self, "stages and unroll must be at least 1")
        if [v.type for v in self.inits] != [a.type for a in self.body.args]:
            _fail(self, "the initial values and the body arguments differ in type")
        _check_yield(self, self.body, self.results, "loop body")


@attrs.frozen
class If(Op, mnemonic="if", transfer=Transfer.CARRY):
    """A workgroup-uniform branch on a scalar condition."""

    cond: Expr = expr()
    then: Block = block()
    orelse: Block = block()
    results: tuple[Value, ...] = results()

    def check(self):
        if not self.cond.is_bool:
            _fail(self, f"the condition '{self.cond}' must be a comparison")
        _check_yield(self, self.then, self.results, "then-branch")
        _check_yield(self, self.orelse, self.results, "else-branch")


def _check_yield(op, block: Block, results: tuple[Value, ...], what: str):
    last = block.ops[-1] if block.ops else None
    if not isinstance(last, Yield):
        _fail(op, f"the {what} must end with yield")
    if [v.type for v in last.values] != [r.type for r in results]:
        _fail(op, f"the {what} yields {[str(v.type) for v in last.values]} but the op results "
                  f"are {[str(r.type) for r in results]}; loop-carried values keep their type")


def op_classes() -> dict[str, type[Op]]:
    """Every op class, by mnemonic: the text form reads ops through it, and the registry test
    checks each for a text round trip, a verifier rule and an interpreter rule."""
    found, todo = {}, [Op]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        # an op class names its mnemonic; a base that only shares fields does not
        if "mnemonic" in vars(cls) and cls is not Op and F.published(cls):
            found[cls.mnemonic] = cls
    return found


def walk(block: Block) -> Iterator[Op]:
    """Every op of `block`, nested ones included, in program order."""
    for op in block.ops:
        yield op
        for inner in op.blocks:
            yield from walk(inner)


@attrs.frozen
class Kernel:
    """A traced kernel: arguments, symbolic sizes, grid, waves per workgroup, assumptions."""

    name: str
    args: tuple[Value | Var, ...] = attrs.field(converter=tuple)
    sizes: tuple[Var, ...] = attrs.field(converter=tuple)
    grid: tuple[Expr, ...] = attrs.field(converter=F.expr_tuple)
    waves: int
    assumes: tuple[Expr, ...] = attrs.field(converter=F.expr_tuple)
    body: Block
    loc: SourceLoc
    hints: tuple[str, ...] = attrs.field(default=(), converter=tuple)

    @property
    def tensors(self) -> tuple[Value, ...]:
        return tuple(a for a in self.args if isinstance(a, Value))

    @property
    def scalars(self) -> tuple[Var, ...]:
        return tuple(a for a in self.args if isinstance(a, Var))

    def ops(self) -> Iterator[Op]:
        return walk(self.body)

    def __str__(self) -> str:
        from argus.ir.text import print_kernel

        return print_kernel(self)

    @property
    def lds_bytes(self) -> int:
        return sum(op.result.type.nbytes for op in self.ops() if isinstance(op, LdsAlloc))

    def verify(self) -> Kernel:
        """Check every op and the kernel-wide invariants; returns self for chaining."""
        if not 1 <= self.waves <= 16:
            raise IRError(f"kernel {self.name}: {self.waves} waves per workgroup; gfx942 allows "
                          "1..16 (1024 threads)", self.loc)
        if not 1 <= len(self.grid) <= 3:
            raise IRError(f"kernel {self.name}: the grid needs 1 to 3 dimensions", self.loc)
        if self.lds_bytes > LDS_BUDGET:
            raise IRError(f"kernel {self.name} allocates {self.lds_bytes} bytes of LDS; a gfx942 "
                          f"workgroup has {LDS_BUDGET}", self.loc)
        _verify_block(self, self.body, _Scope.top(self))
        peak, op = register_pressure(self)
        if peak > VGPR_BUDGET:
            _fail(op, f"about {peak} VGPRs per lane are live here (register tiles defined "
                      f"earlier and still used later); gfx942 has {VGPR_BUDGET}: consume tiles "
                      "sooner or shrink them")
        return self


def role_operands(op: Op) -> dict[str, Value]:
    """Which value (or, for D, destination tensor) plays each assertion role of `op`, in
    `ROLE_ORDER`, as the operand declarations say."""
    return {role: getattr(op, name) for role, name in _role_fields(type(op))}


@functools.cache
def _role_fields(cls) -> tuple[tuple[str, str], ...]:
    roles = {decl.role: field.name for field, decl in F.declared(cls)
             if decl.kind is F.Kind.OPERAND and decl.role}
    unknown = set(roles) - set(ROLE_ORDER)
    if unknown:
        raise TypeError(f"{cls.__name__} declares role(s) {sorted(unknown)}; add them to "
                        "ROLE_ORDER, which fixes the order a predicate receives them in")
    return tuple((role, roles[role]) for role in ROLE_ORDER if role in roles)


def resources(kernel: Kernel) -> dict[str, int]:
    """Static resource figures: LDS bytes, peak live VGPRs per lane (estimate), and how many
    MFMA, barrier and memory ops the text holds (a loop body counts once)."""
    counts = {"mfma": 0, "barrier": 0, "global_access": 0, "lds_access": 0}
    for op in kernel.ops():
        if isinstance(op, Mfma):
            counts["mfma"] += 1
        elif isinstance(op, Barrier | BarrierNoWait):
            counts["barrier"] += 1
        elif isinstance(op, GlobalLoad | GlobalStore):
            counts["global_access"] += 1
        elif isinstance(op, LdsLoad | LdsStore):
            counts["lds_access"] += 1
        if isinstance(op, AsyncCopy):  # reads global memory and writes LDS
            counts["global_access"] += 1
            counts["lds_access"] += 1
    return {"lds_bytes": kernel.lds_bytes, "vgprs": register_pressure(kernel)[0],
            "waves": kernel.waves, **counts}


def register_pressure(kernel: Kernel) -> tuple[int, Op | None]:
    """Peak VGPRs per lane held by live register tiles, and the op where the peak occurs.

    A tile is live from its definition to its last use; values a loop or branch uses from
    outside stay live through all of it. An estimate: the allocator may do a little better.
    """
    return _block_pressure(kernel.body, frozenset())


def _vgprs(values) -> int:
    return sum(v.type.vgprs for v in values if isinstance(v.type, RegType))


def _outside_uses(op: Op) -> set[Value]:
    """Values the op's nested blocks use but do not define."""
    used, defined = set(), set()
    for region in op.blocks:
        defined.update(region.args)
        for inner in walk(region):
            used.update(inner.operands)
            defined.update(inner.results)
            for nested in inner.blocks:
                defined.update(nested.args)
    return used - defined


def _block_pressure(block: Block, live_out: frozenset) -> tuple[int, Op | None]:
    peak, where = 0, None
    later = set(live_out)
    for op in reversed(block.ops):
        outside = _outside_uses(op)
        live = later | set(op.operands) | outside | set(op.results)
        if _vgprs(live) > peak:
            peak, where = _vgprs(live), op
        for inner in op.blocks:
            inner_peak, inner_op = _block_pressure(inner, frozenset(later | outside))
            if inner_peak > peak:
                peak, where = inner_peak, inner_op
        later = (later - set(op.results)) | set(op.operands) | outside
    return peak, where


class _Scope:
    """SSA names and scalar variables visible at a point."""

    def __init__(self, values: dict, scalars: dict):
        self.values, self.scalars = values, scalars

    @classmethod
    def top(cls, kernel: Kernel) -> _Scope:
        scalars = {v.name: v for v in kernel.sizes + kernel.scalars}
        return cls({v.name: v for v in kernel.tensors}, scalars)

    def child(self) -> _Scope:
        return _Scope(dict(self.values), dict(self.scalars))

    def define(self, op, value: Value):
        if value.name in self.values:
            _fail(op, f"{value} is defined twice")
        self.values[value.name] = value

    def bind(self, op, var: Var):
        if var.name in self.scalars and self.scalars[var.name] != var:
            _fail(op, f"scalar {var.name} is bound twice")
        self.scalars[var.name] = var


def _check_declaration(kernel: Kernel, block: Block, op: Distinct):
    """A fact about the input data holds for the whole launch, so it is stated once, at the
    top of the kernel, in terms that every workgroup shares."""
    if block is not kernel.body:
        _fail(op, f"declare the entries of {op.tensor} distinct at the top level of the kernel "
                  "body, outside loops and branches")
    allowed = {v.name for v in kernel.sizes + kernel.scalars}
    for name, bound in (("lo", op.lo), ("hi", op.hi)):
        other = sorted(v.name for v in free_vars(bound) if v.name not in allowed)
        if other:
            _fail(op, f"{name} = '{bound}' uses {other}; the bounds of a declared fact may "
                      "mention only sizes and scalar arguments, which every workgroup shares")


def _verify_block(kernel: Kernel, block: Block, scope: _Scope):
    for arg in block.args:
        scope.values[arg.name] = arg
    for op in block.ops:
        op.verify()
        for used in op.operands:
            if scope.values.get(used.name) != used:
                _fail(op, f"{used} is used where it is not defined: values made inside a loop "
                          "or branch are visible only there (carry them out as loop-carried or "
                          "branch results), and a use must follow its definition")
        for e in op.exprs:
            unbound = {v.name for v in free_vars(e)} - set(scope.scalars)
            if unbound:
                _fail(op, f"'{e}' uses {sorted(unbound)}, which are not sizes, scalar arguments, "
                          "program ids or enclosing loop variables here")
        for value in op.results:
            if isinstance(value.type, RegType) and value.type.layout.waves != kernel.waves:
                _fail(op, f"{value} is laid out over {value.type.layout.waves} waves but the "
                          f"kernel runs {kernel.waves} per workgroup")
            if isinstance(value.type, RegType) and value.type.vgprs > VGPR_BUDGET:
                _fail(op, f"{value} needs {value.type.vgprs} VGPRs per lane; gfx942 has "
                          f"{VGPR_BUDGET} (arch + acc)")
        if isinstance(op, Distinct):
            _check_declaration(kernel, block, op)
        # an op with blocks binds its variables inside them, any other op for the ops after it
        for inner_block in op.blocks:
            inner = scope.child()
            for var in op.binds:
                inner.bind(op, var)
            _verify_block(kernel, inner_block, inner)
        if not op.blocks:
            for var in op.binds:
                scope.bind(op, var)
        for value in op.results:
            scope.define(op, value)


__all__ = [
    "Op", "ProgramId", "ScalarLoad", "Distinct", "Gather", "Rows", "TagDef", "TagTile",
    "GlobalLoad",
    "GlobalStore", "GlobalAtomicAdd", "LdsAlloc", "LdsStore", "LdsLoad", "AsyncCopy", "CommitGroup",
    "WaitGroup", "Wait", "BarrierNoWait", "Mfma", "Full", "Unary",
    "Binary", "Cast", "Mask", "Reduce", "Broadcast", "Shuffle", "SlotSlice", "Barrier",
    "GroupBarrier",
    "Yield", "Block",
    "For", "If", "Kernel", "TagAssertion", "walk", "role_var", "split_role_var", "is_role_var",
    "global_coord_vars", "UNARY_FNS", "BINARY_FNS", "REDUCE_FNS", "LANES", "DTYPE_BYTES",
    "coord_vars", "register_pressure", "resources", "tag_names", "role_operands", "op_classes",
    "active_of",
    "ROLE_ORDER", "Transfer",
]

"""Instruction selection: one rule per IR op class (a registry keyed by class, like xDSL's
interpreter `impl`s), producing machine instructions over virtual registers.

Global memory goes through buffer resources (V#) whose record count bounds each tensor, so an
out-of-range lane reads 0 instead of faulting; split-K adds through `buffer_atomic_add_f32`;
MFMAs take their operands in the catalogue layouts the IR tiles already have; loops become an
SGPR counter with `s_cmp` / `s_cbranch` (unrolled by their hint and, under `interleave`, their
pipeline stages), uniform branches `s_cbranch` over if/else blocks; gathered rows come from the
index tensor; f32 math is one VALU instruction per register. Ops that exist only for the proofs
(tags, declared facts) emit nothing. Cross-lane rules (reduce, broadcast, mask) are in `lanes`.
"""

from __future__ import annotations

import contextlib
import math
import struct
from collections.abc import Callable

import attrs
import numpy as np
from ml_dtypes import bfloat16

from argus.asm.lower.address import (
    Piece,
    Prover,
    VectorizeError,
    at_slot,
    global_pieces,
    lds_pieces,
    row_major_strides,
    split_lane,
    table,
)
from argus.asm.lower.exprgen import ExprEmitter, LoweringError, UnsupportedError
from argus.asm.lower.program import (
    Fixed,
    IfElse,
    Label,
    LabelDef,
    Loop,
    MInst,
    Ref,
    Skip,
    Splat,
    VReg,
)
from argus.ir import ops as O
from argus.ir.access import global_index, tile_of
from argus.ir.expr import (
    And,
    Const,
    Expr,
    Term,
    Var,
    as_expr,
    bounds,
    free_vars,
    linear_form,
    max_,
    simplify,
    substitute,
)
from argus.ir.types import DTYPE_BYTES, SIZE_RANGE, RegType, Value, thread_vars
from argus.isa_cdna3 import isa
from argus.isa_cdna3.mfma import mfma
from argus.smt import Proved, prove

#: Bytes one buffer / DS instruction moves, widest first, and their opcodes.
GLOBAL_WIDTHS = (16, 8, 4)
LDS_WIDTHS = (16, 8, 4, 2)
BUFFER_LOAD = {1: "buffer_load_ubyte", 2: "buffer_load_ushort", 4: "buffer_load_dword",
               8: "buffer_load_dwordx2", 16: "buffer_load_dwordx4"}
BUFFER_STORE = {1: "buffer_store_byte", 2: "buffer_store_short", 4: "buffer_store_dword",
                8: "buffer_store_dwordx2", 16: "buffer_store_dwordx4"}
DS_READ = {4: "ds_read_b32", 8: "ds_read_b64", 16: "ds_read_b128"}
DS_WRITE = {2: "ds_write_b16", 4: "ds_write_b32", 8: "ds_write_b64", 16: "ds_write_b128"}

RULES: dict[type, Callable] = {}


def rule(*classes):
    def register(fn):
        for cls in classes:
            RULES[cls] = fn
        return fn
    return register


@attrs.frozen
class KernargSlot:
    """One kernel argument: a tensor pointer or a 32-bit size/scalar, at `offset`."""

    name: str
    kind: str              # "ptr" or "i32"
    offset: int
    size: int


@attrs.frozen
class AddressSpan:
    """The byte offset one access adds to its buffer resource's base (per-lane, uniform and
    constant parts), with the loop counters and loaded scalars that bound it: a launch checks
    that it stays below 2^31 for the sizes given (`check_spans`)."""

    tensor: str
    offset: Expr
    context: tuple          # (variable, lo, hi): loop counters [start, stop), scalar ranges
    loc: object


@attrs.define
class LoopFrame:
    iv: str
    step: int
    start: Expr
    stop: Expr
    setup: list
    latch: list
    reduced: dict = attrs.field(factory=dict)


def last_uses(kernel: O.Kernel) -> tuple[dict[str, int], dict[int, int]]:
    """Position of each value's last use in a walk of the kernel (a use inside a loop by a value
    from outside counts at the loop's end), and the position of every op (by id)."""
    last: dict[str, int] = {}
    position: dict[int, int] = {}
    counter = 0

    def walk(block: O.Block) -> tuple[set[str], set[str]]:
        """Number the ops of `block`; returns (names defined in it, names it uses)."""
        nonlocal counter
        defined = {a.name for a in block.args}
        used: set[str] = set()
        for op in block.ops:
            counter += 1
            position[id(op)] = here = counter
            names = [v.name for v in op.operands]
            for name in names:
                last[name] = max(last.get(name, 0), here)
            used.update(names)
            inner_defined: set[str] = set()
            inner_used: set[str] = set()
            for blk in op.blocks:
                d, u = walk(blk)
                inner_defined |= d
                inner_used |= u
            for name in inner_used - inner_defined:
                last[name] = max(last.get(name, 0), counter)   # live to the end of the loop
            used |= inner_used - inner_defined
            defined |= inner_defined | {r.name for r in op.results}
        return defined, used

    walk(kernel.body)
    return last, position


class Selector(ExprEmitter):
    """The state of instruction selection for one kernel."""

    def __init__(self, kernel: O.Kernel, policy: str, constants: dict[str, int] | None = None):
        self.kernel = kernel
        self.policy = policy
        #: sizes the assumptions fix (`fold_assumed`): still arguments, never loaded
        self.fixed_sizes = dict(constants or {})
        self.main: list = []
        prologue: list = []
        super().__init__({}, prologue, set())
        self.regs: dict[str, VReg] = {}
        self.lds_base: dict[str, int] = {}
        self.lds_top = 0
        self.rsrc: dict[str, VReg] = {}
        self.prover = Prover(tuple(kernel.assumes))
        self.frames: list[LoopFrame] = []
        self.last, self.position = last_uses(kernel)
        self.users: dict[str, list[O.Op]] = {}      # value name -> the ops reading it
        for op in kernel.ops():
            for value in op.operands:
                self.users.setdefault(value.name, []).append(op)
        self.shared: set[int] = set()               # VRegs other tiles' views read
        self.targets: dict[str, VReg] = {}          # value -> the registers it must go to
        #: targets taken only where nothing live is in them then (`_body_copy`'s loads)
        self.if_free: set[str] = set()
        self.current: O.Op | None = None            # the op being lowered
        self.lane_bases: list[tuple] = []          # (table, VReg) for LDS per-lane bases
        self.kernargs: list[KernargSlot] = []
        self.labels = 0
        self.renamed: dict = {}                     # loop counter -> its value in this copy
        self.facts: list[Expr] = []                 # bounds of the loop counters renamed away
        #: whether every commit group ends with an LDS DMA of the commit's own block, so the
        #: wait pass can count groups (`wait_group`); the newest DMA emitted so far
        self.groups_marked = groups_marked(kernel.body)
        self.last_dma: MInst | None = None
        #: 64-bit addressing: the entry code's own memo, the buffer resources rebased per
        #: (tensor, workgroup offset), and every access's offset range for the launch check
        self.entry_memo: dict = {}
        self.rebased: dict = {}
        #: where that entry code goes: the kernel's prologue, or the head of a top-level
        #: branch for what only the branch uses (`branch_entry`)
        self.entry: list = self.prologue
        self.spans: list[AddressSpan] = []
        self.scalar_bounds: dict[str, tuple[Expr, Expr]] = {}
        #: what the rebase may be computed from (available at entry), and what makes a term
        #: worth it (workgroup ids, scalar arguments: a start row; sizes alone are a tile's
        #: row offsets, small, and stay in the instruction)
        self.moving_vars = ({v.name for v in kernel.scalars}
                            | {f"wg{axis}" for axis in range(len(kernel.grid))})
        self.entry_vars = {v.name for v in kernel.sizes} | self.moving_vars

    # ------------------------------------------------------------------ entry
    def run(self) -> list:
        self._entry()
        self.out = self.main
        _request_load_ids(self, self.kernel.body.ops)
        self.block(self.kernel.body.ops)
        self.loc = None
        self.emit("s_endpgm", ndefs=0)
        return self.prologue + self.main

    def _entry(self):
        """ABI inputs (kernarg pointer s[0:1], workgroup ids after it, work-item id in v0), the
        kernel arguments, buffer resources and the lane/wave split of the work-item id."""
        k = self.kernel
        self.loc = k.loc
        kernarg_ptr = VReg("s", 2, "kernarg", 2, phys=0)
        for axis in range(len(k.grid)):
            self.bindings[f"wg{axis}"] = VReg("s", 1, f"wg{axis}", phys=2 + axis)
        offset = 0
        pointers = {}
        for tensor in k.tensors:
            rsrc = VReg("s", 4, f"rsrc.{tensor.name}", 4)
            self.emit("s_load_dwordx2", rsrc[0:2], kernarg_ptr, offset, note=tensor.name)
            self.kernargs.append(KernargSlot(tensor.name, "ptr", offset, 8))
            pointers[tensor.name] = rsrc
            offset += 8
        for var in list(k.sizes) + list(k.scalars):
            self.kernargs.append(KernargSlot(var.name, "i32", offset, 4))
            if var.name in self.fixed_sizes:
                # folded away: a load nothing reads kept its register busy, and reusing it
                # waited for the load (an s_waitcnt per such size in the entry code)
                self.bindings[var.name] = self.fixed_sizes[var.name]
                offset += 4
                continue
            reg = VReg("s", 1, var.name)
            self.emit("s_load_dword", reg, kernarg_ptr, offset, note=var.name)
            self.bindings[var.name] = reg
            offset += 4
        self.kernarg_bytes = offset
        for tensor in k.tensors:
            rsrc = pointers[tensor.name]
            self.emit("s_and_b32", rsrc[1], rsrc[1], 0xFFFF, note="base[47:32], stride 0")
            self.emit("s_mov_b32", rsrc[2], self.records(tensor, Const(0)),
                      note="num_records: the tensor's bytes (at most 2^31 - 1)")
            self.emit("s_mov_b32", rsrc[3], isa.BUFFER_RSRC_WORD3)
            self.rsrc[tensor.name] = rsrc
        tid = VReg("v", 1, "tid", phys=0)
        wave, lane = VReg("v", 1, "wave"), VReg("v", 1, "lane")
        self.emit("v_lshrrev_b32_e32", wave, 6, tid)
        self.emit("v_and_b32_e32", lane, isa.WAVE_SIZE - 1, tid)
        self.bindings["wave"], self.bindings["lane"] = wave, lane

    def block(self, ops):
        outer = self.current
        for n, op in enumerate(ops):
            self.loc, self.origin, self.current = op.loc, op.mnemonic, op
            if n and isinstance(ops[n - 1], O.For):
                _request_scatter_ids(self, ops[n:])
            fn = RULES.get(type(op))
            if fn is None:
                raise UnsupportedError(f"{op.mnemonic}: the gfx942 backend has no lowering rule "
                                       f"for {type(op).__name__} yet", op.loc,
                                       "lower this kernel with the reference interpreter "
                                       "(argus run --interp) until the rule exists")
            active = getattr(op, "active", None)
            if active is None or (isinstance(active, Const) and active.value):
                fn(self, op)
            else:
                from argus.asm.lower.lanes import predicated

                predicated(self, op, fn)
        self.current = outer

    # ------------------------------------------------------------------ helpers
    @contextlib.contextmanager
    def conditional(self, body: list):
        """Lower into `body`, code a branch may skip: values computed there are forgotten
        after it, since later code cannot rely on them."""
        hoisted, bases, saved = dict(self.hoisted), list(self.lane_bases), self.out
        scoped = [dict(scope) for scope in self.scoped]
        self.out = body
        try:
            yield
        finally:
            self.hoisted, self.lane_bases, self.out = hoisted, bases, saved
            self.scoped[:] = scoped

    @contextlib.contextmanager
    def branch_entry(self, body: list):
        """Inside a top-level branch, the entry code the branch's accesses need (rebased
        buffer resources, their 64-bit offsets) goes to the head of `body` and is forgotten
        after it: made in the kernel's prologue, each branch's resources would stay live
        through every branch before it (a strided transposed convolution's output phases,
        one branch each, held 4 SGPRs per phase and tensor)."""
        saved = self.entry, self.entry_memo, self.rebased
        head: list = []
        self.entry, self.entry_memo, self.rebased = head, dict(self.entry_memo), dict(self.rebased)
        try:
            yield
        finally:
            body[0:0] = head
            self.entry, self.entry_memo, self.rebased = saved

    @contextlib.contextmanager
    def store_in_place(self):
        """Lower a store's address terms where it stores (`ExprEmitter.in_place`)."""
        saved, self.in_place = self.in_place, True
        try:
            yield
        finally:
            self.in_place = saved

    def loop_facts(self) -> list[Expr]:
        """What the launch grid and the enclosing loops guarantee about their counters here."""
        grid = [And(0 <= op.var, op.var < self.kernel.grid[op.axis])
                for op in self.kernel.ops() if isinstance(op, O.ProgramId)]
        return grid + [And(f.start <= Var(f.iv, 0, 2**31), Var(f.iv, 0, 2**31) < f.stop)
                       for f in self.frames] + list(self.facts)

    def nonnegative(self, e: Expr) -> bool:
        """e >= 0 under the kernel's assumptions and the enclosing loops' bounds (a tile count
        like (min(SK, q0 + 128 + SK - SQ) + 31) // 32 given SK >= SQ)."""
        return super().nonnegative(e) or isinstance(
            prove(e >= 0, self.prover.assumes + tuple(self.loop_facts()), timeout_ms=5000),
            Proved)

    def origin_of(self, op) -> tuple[Expr, ...]:
        """The op's origin in this copy of its loop body (unrolled copies rename counters)."""
        if not self.renamed:
            return op.origin
        return tuple(simplify(substitute(o, self.renamed)) for o in op.origin)

    def dies(self, value, op) -> bool:
        return self.last.get(value.name, 0) <= self.position[id(op)]

    def tile(self, value) -> VReg:
        return self.regs[value.name]

    def reusable(self, value, op) -> VReg | None:
        """The registers of `value` when `op` may write its result over them: its last use,
        a whole tile of the result's size, and no other tile's view reads them. Elementwise
        ops then update in place, so a loop's carried accumulators stay in their registers
        and the iteration ends without copies."""
        reg = self.regs.get(value.name)
        if (isinstance(reg, VReg) and reg.cls == "v" and reg.serial not in self.shared
                and self.dies(value, op) and reg.size == op.result.type.vgprs):
            return reg
        return None

    def view(self, value, reg) -> None:
        """Give `value` registers that belong to other tiles (`reg`: a Ref or Spread)."""
        if not isinstance(reg, Splat):
            for r in range(reg.size):
                self.shared.add(reg[r].reg.serial)
        self.regs[value.name] = reg

    def only_read_by(self, value, *classes) -> bool:
        users = self.users.get(value.name, [])
        return bool(users) and all(isinstance(u, classes) for u in users)

    def new_tile(self, value, align: int = 4) -> VReg:
        """Registers for a tile; tuples start on an even register (gfx90a+ requires it of
        every 64-bit or wider VGPR operand), on a multiple of 4 when asked and they fill it."""
        t = value.type
        reg = self.targets.pop(value.name, None)
        if reg is not None and value.name in self.if_free and not self.free(reg):
            reg = None
        if reg is None or reg.size != t.vgprs:
            even = 1 if t.vgprs == 1 else align if t.vgprs % align == 0 else 2
            reg = VReg("v", t.vgprs, value.name, even)
        self.regs[value.name] = reg
        return reg

    def free(self, reg: VReg) -> bool:
        """Whether no value read at or after the op being lowered is held in `reg` (its own
        registers, or a view of them)."""
        here = self.position[id(self.current)] if self.current is not None else 0
        return not any(self.last.get(name, 0) >= here and reg.serial in _serials(held)
                       for name, held in self.regs.items())

    def label(self, stem: str) -> Label:
        self.labels += 1
        return Label(f".L{stem}{self.labels}")

    def soffset(self, uniform: Expr, const: int, limit: int):
        """(SGPR or inline constant, instruction offset) for a uniform byte offset plus a
        constant: the constant goes into the offset field when it fits."""
        if not 0 <= const <= limit:
            uniform, const = simplify(uniform + const), 0
        if isinstance(uniform, Const):
            value = int(uniform.value)
            if value == 0:
                return 0, const
            return self.materialize(value, "s"), const
        return self.uniform_value(uniform), const

    def uniform_value(self, e: Expr) -> VReg:
        """An SGPR holding e; inside a loop a term linear in the counter is advanced by the latch
        instead of recomputed (strength reduction)."""
        frame = self.frames[-1] if self.frames else None
        if frame is not None and any(v.name == frame.iv for v in free_vars(e)):
            outer = {f.iv for f in self.frames[:-1]}
            if not any(v.name in outer for v in free_vars(e)):
                iv = next(v for v in free_vars(e) if v.name == frame.iv)
                delta = simplify(substitute(e, {iv.name: iv + frame.step}) - e)
                if not any(v.name == frame.iv for v in free_vars(delta)):
                    return self._reduced(frame, iv, e, delta)
        if not self.loop_vars:
            return self._near_anchor(e)
        reg = self.value(e)
        return reg if isinstance(reg, VReg) else self.materialize(reg, "s")

    def _near_anchor(self, e: Expr) -> VReg:
        """Outside loops, an offset that differs from a recent one by a simpler term (the rows of
        an accumulator tile: c * N * 4) is that one plus the difference."""
        if e in self.hoisted:
            return self.hoisted[e]
        anchors = self.hoisted.setdefault(("anchors",), [])
        for anchor, reg in reversed(anchors):
            delta = simplify(e - anchor)
            if _size(delta) < _size(e):
                step = self.value(delta)
                result = VReg("s", 1, "soff")
                self.emit("s_add_i32", result, reg, step)
                break
        else:
            result = self.value(e)
            if not isinstance(result, VReg):
                return self.materialize(result, "s")
        self.hoisted[e] = result
        anchors[:] = (anchors + [(e, result)])[-4:]
        return result

    def _reduced(self, frame: LoopFrame, iv, e: Expr, delta: Expr) -> VReg:
        if e in frame.reduced:
            return frame.reduced[e]
        reg = VReg("s", 1, f"sr{len(frame.reduced)}")
        # the set-up runs before the loop: what it reads is hoisted, never made in place
        saved, self.in_place = self.in_place, False
        try:
            first = self.value(substitute(e, {iv.name: frame.start}))
            step = self.value(delta)
        finally:
            self.in_place = saved
        self.emit("s_mov_b32", reg, first, into=frame.setup, note=f"{e} at the first iteration")
        self.emit("s_add_i32", reg, reg, step, into=frame.latch, note=f"{e}: next iteration")
        frame.reduced[e] = reg
        return reg

    def lds_vaddr(self, piece: Piece, waves: int):
        """(VGPR address, ds offset) for an LDS piece: per-lane bases are shared by all pieces
        whose per-lane tables differ by a constant that fits the offset field."""
        lane_table = table(piece.lane, waves)
        uniform, const = piece.uniform, piece.const
        if isinstance(uniform, Const):          # a constant buffer slot: into the offset
            uniform, const = Const(0), const + int(uniform.value)
        for known, reg in self.lane_bases:
            delta = lane_table - known
            if (delta == delta[0]).all() and 0 <= int(delta[0]) + const <= isa.DS_OFFSET_MAX:
                base, offset = reg, int(delta[0]) + const
                break
        else:
            lowest = int(lane_table.min())
            base = self.register(simplify(piece.lane - lowest), "lds", cls="v")
            self.lane_bases.append((lane_table - lowest, base))
            offset = lowest + const
        if not 0 <= offset <= isa.DS_OFFSET_MAX:
            raise LoweringError(f"LDS offset {offset} does not fit the 16-bit offset field",
                                self.loc)
        if isinstance(uniform, Const):
            return base, offset
        uniform = self.uniform_value(uniform)
        key = ("lds+", base.serial, uniform.serial)
        scope = self.scoped[-1] if self.scoped else self.hoisted
        if key not in scope:
            reg = VReg("v", 1, "lds.addr")
            self.emit("v_add_u32_e32", reg, uniform, base)
            scope[key] = reg
        return scope[key], offset

    # ------------------------------------------------------------------ 64-bit addresses
    def entry_value(self, e: Expr):
        """A 32-bit uniform term computed in the entry code (which dominates everything), with
        its own memo: a register the body computed later is never read before it is written."""
        saved = self.out, self.hoisted, self.scoped, self.loop_vars
        self.out, self.hoisted, self.scoped, self.loop_vars = (self.entry, self.entry_memo,
                                                               [], set())
        try:
            return self.value(e)
        finally:
            self.out, self.hoisted, self.scoped, self.loop_vars = saved

    def wide(self, e: Expr) -> tuple:
        """(low, high) words of a uniform term in 64 bits, computed in the entry code: sums,
        differences and products carry into the high word (`s_addc_u32`, `s_mul_hi_u32`); other
        terms (divisions of sizes, ...) are 32-bit, sign-extended where they may be negative."""
        e = simplify(e)
        key = ("wide", e)
        if key in self.entry_memo:
            return self.entry_memo[key]
        mask = (1 << 32) - 1
        if isinstance(e, Const):
            value = int(e.value)
            result = (value & mask, (value >> 32) & mask)
        elif isinstance(e, Term) and e.op in ("add", "sub", "mul", "neg") or (
                isinstance(e, Term) and e.op == "shl" and isinstance(e.args[1], Const)):
            if e.op == "neg":
                result = self._wide_op("sub", (0, 0), self.wide(e.args[0]))
            elif e.op == "shl":
                result = self._wide_op("mul", self.wide(e.args[0]),
                                       self.wide(Const(1 << int(e.args[1].value))))
            else:
                result = self._wide_op(e.op, self.wide(e.args[0]), self.wide(e.args[1]))
        else:
            low = self.entry_value(e)
            if isinstance(low, int):
                result = (low & mask, (low >> 32) & mask)
            elif bounds(e)[0] >= 0:
                result = (low, 0)
            else:
                high = VReg("s", 1, "sign")
                self.emit("s_ashr_i32", high, low, 31, into=self.entry)
                result = (low, high)
        self.entry_memo[key] = result
        return result

    def _wide_op(self, op: str, a: tuple, b: tuple) -> tuple:
        mask = (1 << 32) - 1
        if all(isinstance(w, int) for w in a + b):
            x, y = a[0] | a[1] << 32, b[0] | b[1] << 32
            value = {"add": x + y, "sub": x - y, "mul": x * y}[op]
            return value & mask, (value >> 32) & mask

        def emit(opcode, x, y, name):
            if isinstance(x, int) and isinstance(y, int) and opcode == "s_add_u32":
                return (x + y) & mask
            reg = VReg("s", 1, name)
            self.emit(opcode, reg, x, y, into=self.entry)
            return reg

        if op in ("add", "sub") and b == (0, 0):
            return a
        if op == "add" and a == (0, 0):
            return b
        if op in ("add", "sub"):
            first, carry = ("s_add_u32", "s_addc_u32") if op == "add" else ("s_sub_u32",
                                                                              "s_subb_u32")
            low = VReg("s", 1, "lo")
            self.emit(first, low, a[0], b[0], into=self.entry)
            high = VReg("s", 1, "hi")
            self.emit(carry, high, a[1], b[1], into=self.entry)   # reads SCC just written
            return low, high
        low = emit("s_mul_i32", a[0], b[0], "lo")
        high = emit("s_mul_hi_u32", a[0], b[0], "hi")
        for x, y in ((a[0], b[1]), (a[1], b[0])):
            if x == 0 or y == 0:
                continue
            high = emit("s_add_u32", high, emit("s_mul_i32", x, y, "cross"), "hi")
        return low, high

    def records(self, tensor, rebase: Expr):
        """num_records of a resource based `rebase` bytes into `tensor`: the bytes from there to
        the tensor's end, 0 past it, at most 2^31 - 1, so every offset at or above 2^31 (the
        guard's out-of-range offset, a negative offset) lies outside."""
        limit = isa.BUFFER_RECORDS_MAX
        total = as_expr(DTYPE_BYTES[tensor.type.dtype])
        for dim in tensor.type.shape:
            total = total * dim
        key = ("records", simplify(total), rebase)
        if key not in self.entry_memo:
            self.entry_memo[key] = self._records(tensor, total, rebase, limit)
        return self.entry_memo[key]

    def _records(self, tensor, total: Expr, rebase: Expr, limit: int):
        low, high = self._wide_op("sub", self.wide(total), self.wide(rebase))
        if isinstance(low, int) and isinstance(high, int):
            signed = (high << 32 | low) - ((1 << 64) if high >> 31 else 0)
            return max(0, min(signed, limit))
        clamped = VReg("s", 1, f"records.{tensor.name}")
        self.emit("s_min_u32", clamped, low, self.materialize(limit, "s"), into=self.entry)
        self.emit("s_cmp_eq_u32", high, 0, ndefs=0, into=self.entry)
        fits = VReg("s", 1, "records")
        self.emit("s_cselect_b32", fits, clamped, self.materialize(limit, "s"),
                  into=self.entry)
        self.emit("s_cmp_lt_i32", high, 0, ndefs=0, into=self.entry)
        records = VReg("s", 1, "records")
        self.emit("s_cselect_b32", records, 0, fits, into=self.entry)
        return records

    def resource(self, op, tensor, piece: Piece, guards=(), rows_axis: int | None = None
                 ) -> tuple[VReg, Piece]:
        """The buffer resource for a piece of an access to `tensor`, and the piece relative to
        it. The workgroup's part of the offset (terms in the workgroup ids, over sizes and
        scalars) moves into a rebased resource, base + offset in 64 bits, made once in the
        entry code, so a tensor may reach the 48-bit address space while the offsets left in
        the instruction stay 32-bit; the rest is recorded for the launch check
        (`AddressSpan`). A part that may be negative, or that would leave a negative rest
        where a lane passes its guard, stays in the instruction."""
        terms, _ = linear_form(piece.uniform)
        rebase = Const(0)
        for atom, k in terms.items():
            names = {v.name for v in free_vars(atom)}
            if names <= self.entry_vars and names & self.moving_vars:
                rebase = rebase + atom * k
        rebase = simplify(rebase)
        rest = simplify(piece.uniform - rebase)
        rel = simplify(piece.lane + rest + piece.const)
        if not isinstance(rebase, Const) and not self._rebase_sound(rebase, rel, guards, piece):
            rebase, rest, rel = Const(0), piece.uniform, simplify(piece.lane + piece.uniform
                                                                  + piece.const)
        context = self.span_context(op)
        if rows_axis is not None:
            # the row each lane reads from its index adds row * stride bytes in the VGPR
            row = Var(f"row{rows_axis}", 0, SIZE_RANGE[1])
            stride = row_major_strides(tensor.type.shape)[rows_axis]
            rel = simplify(rel + row * stride * DTYPE_BYTES[tensor.type.dtype])
            context += ((row.name, Const(0), tensor.type.shape[rows_axis]),)
        self.spans.append(AddressSpan(tensor.name, rel, context, op.loc))
        if isinstance(rebase, Const):
            return self.rsrc[tensor.name], piece
        key = (tensor.name, rebase)
        if key not in self.rebased:
            base = self.rsrc[tensor.name]
            quad = VReg("s", 4, f"rsrc.{tensor.name}.wg", 4)
            low, high = self.wide(rebase)
            self.emit("s_add_u32", quad[0], base[0], low, into=self.entry,
                      note=f"{tensor.name} + {rebase}")
            self.emit("s_addc_u32", quad[1], base[1], high, into=self.entry)
            self.emit("s_mov_b32", quad[2], self.records(tensor, rebase), into=self.entry)
            self.emit("s_mov_b32", quad[3], isa.BUFFER_RSRC_WORD3, into=self.entry)
            self.rebased[key] = quad
        return self.rebased[key], attrs.evolve(piece, uniform=rest)

    def _rebase_sound(self, rebase: Expr, rel: Expr, guards, piece: Piece) -> bool:
        facts = self.prover.assumes + tuple(self.loop_facts())
        key = ("rebase", rebase, rel, tuple(guards), piece.first, facts)
        if key not in self.entry_memo:
            tile = [And(0 <= v, v < v.hi) for v in thread_vars(self.kernel.waves, 1)]
            passes = [at_slot(g, piece.first) for g in guards]
            # the solver only where the linear form cannot tell, briefly: failing to prove
            # keeps the offset in the instruction (32-bit), never a wrong address
            ok = _surely_nonnegative(rebase) or isinstance(
                prove(rebase >= 0, facts, timeout_ms=1000), Proved)
            ok = ok and (_surely_nonnegative(rel) or isinstance(
                prove(rel >= 0, facts + tuple(tile) + tuple(passes), timeout_ms=1000), Proved))
            self.entry_memo[key] = ok
        return self.entry_memo[key]

    def span_context(self, op) -> tuple:
        """What bounds the variables of an access's offset at launch: the enclosing loops'
        (counter, start, stop) and the loaded scalars' declared ranges."""
        loops = tuple((f.iv, f.start, f.stop) for f in self.frames)
        return loops + tuple((name, lo, hi) for name, (lo, hi) in self.scalar_bounds.items())

    def lane_mask(self, cond: Expr) -> VReg:
        """An SGPR pair with bit `lane` set where the per-lane condition holds in that lane:
        comparisons of a per-lane term with a uniform one, combined with & | ~."""
        mask = VReg("s", 2, "keep", 2)
        if isinstance(cond, Term) and cond.op in LANE_COMPARE:
            lane, uniform, const = split_lane(simplify(cond.args[0] - cond.args[1]), self.loc)
            left = self.register(lane, "lhs", cls="v")
            right = self.value(simplify(-(uniform + const)))
            if isinstance(right, int) and not _inline(right):
                right = self.materialize(right, "s")
            self.emit(LANE_COMPARE[cond.op], mask, left, right)
        elif isinstance(cond, Term) and cond.op in ("land", "lor"):
            a, b = self.lane_mask(cond.args[0]), self.lane_mask(cond.args[1])
            self.emit("s_and_b64" if cond.op == "land" else "s_or_b64", mask, a, b)
        elif isinstance(cond, Term) and cond.op == "lnot":
            self.emit("s_not_b64", mask, self.lane_mask(cond.args[0]))
        else:
            raise UnsupportedError(f"the per-lane condition '{cond}' is not a comparison the "
                                   "backend lowers", self.loc, "compare integers with < <= == "
                                   "!= and combine with & | ~")
        return mask

    def buffer_vaddr(self, piece: Piece):
        """(VGPR or 'off', soffset, offset) of a buffer piece."""
        lane = piece.lane
        uniform, const = piece.uniform, piece.const
        if not _surely_nonnegative(simplify(uniform + const)):
            # soffset is unsigned: a window starting before the tensor (a padded convolution)
            # adds its uniform part per lane, where the guard turns a negative sum away
            lane, uniform, const = simplify(lane + uniform + const), Const(0), 0
            return self._vaddr(lane), 0, 0
        if isinstance(lane, Const):
            uniform, lane = simplify(uniform + lane), None
        soffset, offset = self.soffset(uniform, const, isa.MUBUF_OFFSET_MAX)
        vaddr = self._vaddr(lane) if lane is not None else None
        return vaddr, soffset, offset

    def _vaddr(self, lane: Expr):
        """A buffer access's VGPR address: an offset that is the same in every lane (the
        uniform part of a window starting before its tensor, with nothing per lane; a tile
        every lane reads alike) may already sit in an SGPR, which MUBUF's vaddr cannot take."""
        return _in_vgpr(self, self.register(lane, "gaddr", cls="v"))


# ---------------------------------------------------------------------------------- rules
@rule(O.ProgramId)
def _program_id(s: Selector, op: O.ProgramId):
    s.bindings[op.var.name] = s.bindings[f"wg{op.axis}"]


@rule(O.TagDef, O.TagTile)
def _tags(s: Selector, op):
    """Tags exist for the proofs only; lowering runs on the stripped IR, so these never occur
    there. Should one remain, the tile keeps its registers."""
    if isinstance(op, O.TagTile):
        s.regs[op.result.name] = s.tile(op.x)


@rule(O.LdsAlloc)
def _lds_alloc(s: Selector, op: O.LdsAlloc):
    s.lds_top = -(-s.lds_top // 16) * 16
    s.lds_base[op.result.name] = s.lds_top
    s.lds_top += op.result.type.nbytes


def _size(e: Expr) -> int:
    """Operations a term takes to compute (nodes of its tree)."""
    return 0 if not isinstance(e, Term) else 1 + sum(_size(a) for a in e.args)


def _guarded_axes(s: Selector, op) -> tuple[list[Expr], list[Expr], bool]:
    """A guarded access reads 0 / drops the write where an element lies outside the tensor.
    The buffer resource bounds the whole tensor, which is that rule for the upper end of the
    first axis (rows); every other bound that may be crossed (a sequence tail inside a
    [heads, seq, dim] tensor, a 4095-wide row's tail, a padded convolution's negative
    coordinates) is checked per lane: such lanes get an offset past every buffer's end.
    Returns the op's index formulas, those per-lane conditions (in the slot variable), and
    whether the accesses must be one element wide (an innermost coordinate that may cross
    its bound, where one vector could straddle it). Bounds are proved under the kernel's
    assumptions and the enclosing loops' bounds."""
    index = [simplify(i) for i in global_index(op, origin=s.origin_of(op))]
    if not op.guard:
        return index, [], False
    shape = op.tensor.type.shape
    row_axis = op.gather.axis if op.gather is not None else \
        op.rows.axis if getattr(op, "rows", None) is not None else None
    if row_axis not in (None, 0):
        raise UnsupportedError(f"guarded {op.mnemonic} with rows taken along axis {row_axis}: "
                               "the buffer resource bounds rows only", op.loc,
                               "take rows along axis 0")
    tile = tile_of(op).layout
    facts = (s.prover.assumes + tuple(s.loop_facts())
             + tuple(And(0 <= v, v < v.hi) for v in thread_vars(tile.waves, tile.slots)))

    def proved(condition) -> bool:
        # the K and V tiles of one block, and the Q tiles of one row block, ask the same
        if bounds(condition)[0] == 1:
            return True
        key = ("guard proof", condition, facts)
        if key not in s.hoisted:
            s.hoisted[key] = isinstance(prove(condition, facts, timeout_ms=5000), Proved)
        return s.hoisted[key]

    conditions, narrow = [], False
    for axis, (i, extent) in enumerate(zip(index, shape)):
        innermost = axis == len(shape) - 1
        gathered = row_axis is not None and axis == row_axis
        needed = [] if gathered else [0 <= i]
        if axis != 0:
            needed.append(i < extent)
        for condition in needed:
            if not proved(condition):
                conditions.append(condition)
                narrow = narrow or innermost
    return index, conditions, narrow


def _surely_nonnegative(e: Expr) -> bool:
    """e >= 0 seen from its linear form alone (nonnegative atoms with positive coefficients
    and a nonnegative constant), no solver: a uniform offset that is not surely so goes into
    the VGPR address, which costs one add, never correctness."""
    if bounds(e)[0] >= 0:
        return True
    terms, const = linear_form(e)
    return const >= 0 and all(k > 0 and bounds(atom)[0] >= 0 for atom, k in terms.items())


def _rows_axis(op) -> int | None:
    """The tensor axis whose coordinate each lane reads from an index (gather= or rows=)."""
    if op.gather is not None:
        return op.gather.axis
    rows = getattr(op, "rows", None)
    return rows.axis if rows is not None else None


def _guarded_vaddr(s: Selector, op, piece: Piece, vaddr, conditions: list[Expr]):
    """The piece's VGPR offset, replaced by one past every buffer's end in the lanes whose
    element lies outside the tensor (`conditions` at the piece's first slot; memoised per
    offset and condition, so K and V tiles of one shape share it)."""
    if not conditions:
        return vaddr
    condition = simplify(And(*(at_slot(c, piece.first) for c in conditions)))
    far = s.hoisted.get(("out-of-range",))
    if far is None:
        far = s.hoisted[("out-of-range",)] = s.materialize(isa.BUFFER_OFFSET_OUT_OF_RANGE, "v")
    if isinstance(condition, Const):
        return vaddr if condition.value else far
    if vaddr is None:
        vaddr = s.materialize(0, "v")
    scope = s.scoped[-1] if s.scoped else s.hoisted
    key = ("guarded", vaddr.serial, condition)
    if key not in scope:
        address = VReg("v", 1, "gaddr.in")
        s.emit("v_cndmask_b32_e64", address, far, _in_vgpr(s, vaddr), s.lane_mask(condition),
               note="lanes outside the tensor read 0 / write nothing")
        scope[key] = address
    return scope[key]


def _narrow_widths(op, tile: RegType, widths, narrow: bool):
    """One element per access where a vector could straddle a bound (`_guarded_axes`); lone
    one-byte elements are read with buffer_load_ubyte and packed by fours (`_pack_bytes`),
    written with buffer_store_byte."""
    if not narrow:
        return widths
    return (DTYPE_BYTES[tile.dtype],)


def _gather_position(s: Selector, op, piece: Piece) -> Expr:
    """The index tensor position whose id this piece's lanes gather."""
    gather, layout = op.gather, tile_of(op).layout
    position = simplify(substitute(gather.origin, s.renamed) if s.renamed else gather.origin)
    return simplify(position + at_slot(layout.coords[gather.tile_axis], piece.first))


def _gather_id(s: Selector, op, piece: Piece):
    """VGPR with each lane's row id for this piece, read from the index tensor (once per
    kernel when the position is loop-invariant, before the loop)."""
    gather = op.gather
    position = _gather_position(s, op, piece)
    key = ("gather id", gather.index.name, position)
    invariant = s.is_invariant(position)
    memo = s.hoisted if invariant or not s.scoped else s.scoped[-1]
    if key not in memo:
        lane, uniform, const = split_lane(simplify(position * 4), op.loc)
        saved = s.out
        if invariant and s.loop_vars:
            s.out = s.preheader
        try:
            rsrc, piece = s.resource(op, gather.index, Piece(0, 1, 4, lane, uniform, const))
            vaddr, soffset, offset = s.buffer_vaddr(piece)
            row = VReg("v", 1, f"row.{gather.index.name}")
            s.emit("buffer_load_dword", row, vaddr if vaddr is not None else _OFF,
                   rsrc, soffset, mods=_buffer_mods(vaddr, offset), note="gathered row id")
        finally:
            s.out = saved
        memo[key] = row
    return memo[key]


def _request_ids(s: Selector, op, pieces) -> None:
    """Every row id a gathered access needs, requested before the first is used (one piece
    at a time, each piece waited a memory latency for its own)."""
    if op.gather is not None:
        for piece in pieces:
            _gather_id(s, op, piece)


def _request_scatter_ids(s: Selector, ops) -> None:
    """The row ids of the gathered stores among `ops` (the code after a loop: a scatter of
    accumulator tiles, one store each), all requested before the first op, so that their
    latency overlaps the last tiles' MFMAs: store by store, each id waited a memory latency
    (8 a wave, one after another, in the fp8 MoE GEMM's epilogue: ~8000 cycles a workgroup,
    modelled)."""
    for op in ops:
        active = op.active if type(op) is O.GlobalStore else None
        if not (type(op) is O.GlobalStore and op.gather is not None
                and isinstance(active, Const) and active.value):
            continue
        _, _, narrow = _guarded_axes(s, op)
        widths = _narrow_widths(op, op.value.type, GLOBAL_WIDTHS + (2, 1), narrow)
        _request_ids(s, op, _global_pieces(s, op, op.value.type, widths))


def _request_load_ids(s: Selector, ops) -> None:
    """The row ids of the gathered loads among `ops` (the kernel's top level), requested before
    its first op: loads that need no id (an expert's weights) are then issued while the ids
    are in flight, not behind the wait for them (the fp8 MoE GEMM's first X rows had held its
    first weights back a memory latency)."""
    for op in ops:
        if not (type(op) is O.GlobalLoad and op.gather is not None
                and isinstance(op.active, Const) and op.active.value):
            continue
        _, _, narrow = _guarded_axes(s, op)
        tile = op.result.type
        one_byte = DTYPE_BYTES[tile.dtype] == 1
        widths = _narrow_widths(op, tile, GLOBAL_WIDTHS + ((1,) if one_byte else ()), narrow)
        _request_ids(s, op, _global_pieces(s, op, tile, widths))


def _gather_rows(s: Selector, op, piece: Piece):
    """VGPR with the element offset of each lane's gathered row for this piece: the row id
    (`_gather_id`) divided by the gather's divisor (an arithmetic shift: floor division, as
    the verifier and the interpreter divide), times the gathered axis' stride."""
    gather = op.gather
    if gather.divisor & (gather.divisor - 1):
        raise UnsupportedError(f"a gather dividing its ids by {gather.divisor}; the backend "
                               "divides by powers of two only (a shift)", op.loc,
                               "route with a power-of-two divisor (topk 1, 2, 4, 8, ...)")
    position = _gather_position(s, op, piece)
    key = ("gather", gather.index.name, position, gather.divisor)
    invariant = s.is_invariant(position)
    memo = s.hoisted if invariant or not s.scoped else s.scoped[-1]
    if key not in memo:
        row = _gather_id(s, op, piece)
        saved = s.out
        if invariant and s.loop_vars:
            s.out = s.preheader
        try:
            if gather.divisor > 1:
                divided = VReg("v", 1, f"row.{gather.index.name}.div")
                s.emit("v_ashrrev_i32_e32", divided, gather.divisor.bit_length() - 1, row,
                       note=f"id // {gather.divisor}")
                row = divided
            stride = row_major_strides(op.tensor.type.shape)[gather.axis]
            scale = s.register(simplify(stride * DTYPE_BYTES[op.tensor.type.dtype]), "stride")
            offset_reg = VReg("v", 1, "row.bytes")
            s.emit("v_mul_lo_u32", offset_reg, row, scale)
        finally:
            s.out = saved
        memo[key] = offset_reg
    return memo[key]


def _register_rows(s: Selector, op, piece: Piece):
    """VGPR with the element offset of each lane's row for this piece when the row ids are in
    registers (`rows=`): the index tile's register of the piece's first slot (all its slots
    hold that index element) times the axis' stride."""
    stride = row_major_strides(op.tensor.type.shape)[op.rows.axis]
    scale = s.register(simplify(stride * DTYPE_BYTES[op.tensor.type.dtype]), "stride")
    offset_reg = VReg("v", 1, "row.bytes")
    s.emit("v_mul_lo_u32", offset_reg, s.tile(op.rows.index)[piece.first], scale,
           note=f"row from {op.rows.index}")
    return offset_reg


def _gathered_vaddr(s: Selector, op, piece: Piece, vaddr):
    """The piece's VGPR address plus its lanes' gathered row offsets (read from the index
    tensor, or held in index registers)."""
    rows = _gather_rows(s, op, piece) if op.gather is not None else _register_rows(s, op, piece)
    if vaddr is None:
        return rows
    # one sum per pair of registers: pieces that differ only in their offset field share it,
    # and a sum of two loop-invariant registers is made once, before the loop
    key = ("gaddr", vaddr.serial, rows.serial)
    invariant = {r.serial for r in s.hoisted.values() if isinstance(r, VReg)}
    hoist = vaddr.serial in invariant and rows.serial in invariant
    memo = s.hoisted if hoist or not s.scoped else s.scoped[-1]
    if key not in memo:
        address = VReg("v", 1, "gaddr")
        s.emit("v_add_u32_e32", address, vaddr, rows,
               into=s.preheader if hoist and s.loop_vars else None)
        memo[key] = address
    return memo[key]


@rule(O.ScalarLoad)
def _scalar_load(s: Selector, op: O.ScalarLoad):
    """A workgroup-uniform i32 read with a scalar load from the tensor's base address."""
    strides = row_major_strides(op.tensor.type.shape)
    offset = simplify(sum((i * st for i, st in zip(op.index, strides)), as_expr(0)) * 4)
    offset = simplify(substitute(offset, s.renamed)) if s.renamed else offset
    value = s.value(offset)
    reg = VReg("s", 1, op.var.name)
    if isinstance(value, int) and not 0 <= value < 1 << 20:
        value = s.materialize(value, "s")
    s.emit("s_load_dword", reg, s.rsrc[op.tensor.name][0:2], value, note=op.var.name)
    s.bindings[op.var.name] = reg
    s.scalar_bounds[op.var.name] = op.bounds or (Const(op.var.lo), Const(op.var.hi))
    s.spans.append(AddressSpan(op.tensor.name, offset, s.span_context(op), op.loc))


@rule(O.Distinct)
def _distinct(s: Selector, op: O.Distinct):
    """A declared fact about the index data, for the proofs: no code."""


def _global_pieces(s: Selector, op, tile: RegType, widths):
    return global_pieces(op, origin=s.origin_of(op), widths=widths, prover=s.prover)


@rule(O.GlobalLoad)
def _global_load(s: Selector, op: O.GlobalLoad):
    _, guarded, narrow = _guarded_axes(s, op)
    tile = op.result.type
    dst = s.new_tile(op.result)
    halves: dict = {}
    single: dict = {}
    one_byte = DTYPE_BYTES[tile.dtype] == 1
    widths = _narrow_widths(op, tile, GLOBAL_WIDTHS + ((1,) if one_byte else ()), narrow)
    pieces = _global_pieces(s, op, tile, widths)
    _request_ids(s, op, pieces)
    for piece in pieces:
        first, count = piece.registers(DTYPE_BYTES[tile.dtype])
        rsrc, piece = s.resource(op, op.tensor, piece, guarded, _rows_axis(op))
        vaddr, soffset, offset = s.buffer_vaddr(piece)
        if op.gather is not None or op.rows is not None:
            vaddr = _gathered_vaddr(s, op, piece, vaddr)
        vaddr = _guarded_vaddr(s, op, piece, vaddr, guarded)
        target = dst[first:first + count]
        if piece.nbytes == 2:             # a lone 16-bit element: read, then pack in pairs
            target = halves[piece.first] = VReg("v", 1, "half")
        if piece.nbytes == 1:             # a lone byte: read, then pack by fours
            target = single[piece.first] = VReg("v", 1, "byte")
        s.emit(BUFFER_LOAD[piece.nbytes], target, vaddr if vaddr is not None else _OFF, rsrc,
               soffset, mods=_buffer_mods(vaddr, offset))
    _pack_halves(s, dst, halves)
    _pack_bytes(s, dst, single, tile.layout.slots)


@rule(O.GlobalStore, O.GlobalAtomicAdd)
def _global_store(s: Selector, op: O.GlobalStore):
    _, guarded, narrow = _guarded_axes(s, op)
    tile = op.value.type
    atomic = isinstance(op, O.GlobalAtomicAdd)
    if atomic and tile.dtype != "f32":
        raise UnsupportedError(f"atomic add of {tile.dtype} tiles is not lowered; gfx942 adds "
                               "f32 with buffer_atomic_add_f32", op.loc, "accumulate in f32")
    data = s.tile(op.value)
    widths = _narrow_widths(op, tile, (4,) if atomic else GLOBAL_WIDTHS + (2, 1), narrow)
    with s.store_in_place():
        _store_pieces(s, op, tile, data, widths, guarded, atomic)


def _store_pieces(s: Selector, op, tile, data, widths, guarded, atomic):
    pieces = _global_pieces(s, op, tile, widths)
    _request_ids(s, op, pieces)
    for piece in pieces:
        first, count = piece.registers(DTYPE_BYTES[tile.dtype])
        rsrc, piece = s.resource(op, op.tensor, piece, guarded, _rows_axis(op))
        vaddr, soffset, offset = s.buffer_vaddr(piece)
        if op.gather is not None or op.rows is not None:
            vaddr = _gathered_vaddr(s, op, piece, vaddr)
        vaddr = _guarded_vaddr(s, op, piece, vaddr, guarded)
        opcode = "buffer_atomic_add_f32" if atomic else BUFFER_STORE[piece.nbytes]
        source = data[first:first + count]
        if piece.nbytes < 4:               # one or two sub-dword elements: shift them down
            source = data[first]
            shift = 8 * (piece.first * DTYPE_BYTES[tile.dtype] % 4)
            if shift:
                source = VReg("v", 1, "high")
                s.emit("v_lshrrev_b32_e32", source, shift, data[first])
        s.emit(opcode, source, vaddr if vaddr is not None else _OFF, rsrc,
               soffset, ndefs=0, mods=_buffer_mods(vaddr, offset))


_OFF = Fixed("off")
_ZERO = Fixed("0")

#: VOP3 compares of a per-lane value with a uniform one, into a lane mask
LANE_COMPARE = {"lt": "v_cmp_lt_i32_e64", "le": "v_cmp_le_i32_e64", "eq": "v_cmp_eq_u32_e64",
                "ne": "v_cmp_ne_u32_e64"}


def _inline(value: int) -> bool:
    lo, hi = isa.INLINE_INT_RANGE
    return lo <= value <= hi


def _buffer_mods(vaddr, offset: int) -> str:
    """offen when a VGPR address is given, offset:N when nonzero."""
    mods = "offen" if vaddr is not None else ""
    return f"{mods} offset:{offset}".strip() if offset else mods


def _lds_pieces(s: Selector, op, tile: RegType):
    return _lds_pieces_of(s, op, LDS_WIDTHS)


def _lds_pieces_of(s: Selector, op, widths):
    return lds_pieces(op, origin=s.origin_of(op), base=s.lds_base[op.buffer.name],
                      widths=widths, prover=s.prover)


@rule(O.LdsStore)
def _lds_store(s: Selector, op: O.LdsStore):
    tile = op.value.type
    data = s.tile(op.value)
    for piece in _lds_pieces(s, op, tile):
        first, count = piece.registers(DTYPE_BYTES[tile.dtype])
        vaddr, offset = s.lds_vaddr(piece, tile.layout.waves)
        source = data[first:first + count]
        if piece.nbytes == 2:              # ds_write_b16 writes a register's low half
            source = data[first]
            if piece.first % 2:
                source = VReg("v", 1, "high")
                s.emit("v_lshrrev_b32_e32", source, 16, data[first])
        s.emit(DS_WRITE[piece.nbytes], vaddr, source, ndefs=0,
               mods=f"offset:{offset}" if offset else "")


@rule(O.AsyncCopy)
def _async_copy(s: Selector, op: O.AsyncCopy):
    """One `buffer_load_dword ... lds` per slot: lane l's dword lands at M0 + 4 l, so each
    slot's LDS addresses must run over a wave's lanes in consecutive dwords; M0 is lane 0's
    address (read from the per-lane address register), the global offset is kept out of the
    instruction's offset field (which the LDS address would add too)."""
    tile = op.tile
    source = op.source if not s.renamed else \
        tuple(simplify(substitute(o, s.renamed)) for o in op.source)
    waves = tile.layout.waves
    try:
        # one dword per lane and instruction: narrower elements go in runs filling a dword,
        # consecutive in the tensor and in LDS
        reads = global_pieces(op, origin=source, widths=(4,), prover=s.prover)
        writes = _lds_pieces_of(s, op, (4,))
    except VectorizeError as error:
        raise UnsupportedError(f"async_copy: {error.message}; buffer_load_dword ... lds moves "
                               "one dword per lane", op.loc, error.fix) from None
    for read, write in zip(reads, writes):
        rsrc, read = s.resource(op, op.tensor, read)
        lanes = table(write.lane, waves).reshape(waves, isa.WAVE_SIZE)
        if not (lanes - lanes[:, :1] == 4 * np.arange(isa.WAVE_SIZE)).all():
            raise UnsupportedError(
                f"async_copy: slot {write.first} of a wave's lanes does not land on consecutive "
                "LDS dwords, and buffer_load_dword ... lds writes lane l at M0 + 4 l", op.loc,
                "give the copy a layout whose lanes run along the LDS rows (T.copy_layout "
                "with vector 1 over an unswizzled view)")
        vaddr, soffset, offset = s.buffer_vaddr(read)
        if offset:
            soffset, offset = s.soffset(read.uniform, read.const, 0)
        address, lds_offset = s.lds_vaddr(write, waves)
        first = VReg("s", 1, "m0.lane0")
        s.emit("v_readfirstlane_b32", first, address)
        if lds_offset:
            s.emit("s_add_u32", _M0, first, lds_offset, ndefs=0)
        else:
            s.emit("s_mov_b32", _M0, first, ndefs=0)
        s.emit("s_nop", isa.SALU_WRITE_M0_TO_LDS_DMA - 1, ndefs=0)
        s.last_dma = s.emit("buffer_load_dword", vaddr if vaddr is not None else _OFF, rsrc,
                            soffset, ndefs=0, mods=f"{_buffer_mods(vaddr, offset)} lds".strip())


_M0 = Fixed("m0")


@rule(O.LdsLoad)
def _lds_load(s: Selector, op: O.LdsLoad):
    tile = op.result.type
    dst = s.new_tile(op.result, align=2)
    halves: dict = {}
    for piece in _lds_pieces(s, op, tile):
        vaddr, offset = s.lds_vaddr(piece, tile.layout.waves)
        mods = f"offset:{offset}" if offset else ""
        if piece.nbytes == 2:             # a lone 16-bit element: read, then pack in pairs
            half = VReg("v", 1, "half")
            s.emit("ds_read_u16", half, vaddr, mods=mods)
            halves[piece.first] = half
            continue
        first, count = piece.registers(DTYPE_BYTES[tile.dtype])
        s.emit(DS_READ[piece.nbytes], dst[first:first + count], vaddr, mods=mods)
    _pack_halves(s, dst, halves)


def _pack_halves(s: Selector, dst: VReg, halves: dict) -> None:
    """Registers of `dst` assembled from zero-extended 16-bit reads, by slot (2r low, 2r+1
    high)."""
    for r in sorted({slot // 2 for slot in halves}):
        low, high = halves.get(2 * r), halves.get(2 * r + 1)
        if low is None or high is None:
            raise UnsupportedError("a register holds one 16-bit element read alone and one "
                                   "read with its neighbours", s.loc)
        s.emit("v_lshl_or_b32", dst[r], high, 16, low)


def _pack_bytes(s: Selector, dst: VReg, single: dict, slots: int) -> None:
    """Registers of `dst` assembled from zero-extended byte reads, slot 4r + k in byte k (a
    register past the tile's last slot keeps zeros there)."""
    for r in sorted({slot // 4 for slot in single}):
        parts = [single.get(4 * r + k) for k in range(4) if 4 * r + k < slots]
        if any(part is None for part in parts):
            raise UnsupportedError("a register holds one byte element read alone and one read "
                                   "with its neighbours", s.loc)
        if len(parts) == 1:
            s.emit("v_mov_b32_e32", dst[r], parts[0])
        for k in range(1, len(parts)):
            s.emit("v_lshl_or_b32", dst[r], parts[k], 8 * k, parts[0] if k == 1 else dst[r])


@rule(O.Mfma)
def _mfma(s: Selector, op: O.Mfma):
    info = mfma(op.instr)
    c = s.tile(op.c)
    if isinstance(c, Fixed):
        dst = s.new_tile(op.result)      # a zero accumulator: SrcC is the inline constant 0
    elif op.result.name in s.targets:
        # the last step of a chain whose result a loop keeps in other registers (`_body_copy`):
        # written there, not moved there after the chain (an MFMA's D need not be its SrcC)
        dst = s.new_tile(op.result)
    elif s.reusable(op.c, op) is not None:
        dst = c                          # accumulate in place: SrcC forwarding, no hazard
        s.regs[op.result.name] = dst
    else:
        dst = s.new_tile(op.result)
    s.emit(info.name, dst, s.tile(op.a), s.tile(op.b), c)


@rule(O.Full)
def _full(s: Selector, op: O.Full):
    tile = op.result.type
    if tile.dtype == "f32":
        # an inline float constant (0.5, -4.0, ...) is written as the assembler prints it back
        bits = (float(op.value) if op.value in isa.INLINE_FLOATS
                else struct.unpack("<I", struct.pack("<f", op.value))[0])
    elif tile.dtype == "bf16":
        half = int(np.float32(op.value).astype(bfloat16).view(np.uint16))
        bits = half | half << 16
    else:
        raise UnsupportedError(f"full of {tile.dtype} tiles is not lowered; fill f32 or bf16 "
                               "tiles", op.loc)
    if bits == 0 and tile.dtype == "f32" and s.only_read_by(op.result, O.Mfma) and all(
            u.c is op.result and u.a is not op.result and u.b is not op.result
            for u in s.users[op.result.name]):
        s.regs[op.result.name] = _ZERO      # only ever an MFMA's starting accumulator
        return
    if tile.dtype == "f32" and s.only_read_by(op.result, O.Binary):
        s.view(op.result, Splat(bits, tile.vgprs))     # a literal operand of each use
        return
    dst = s.new_tile(op.result)
    for r in range(dst.size):
        s.emit("v_mov_b32_e32", dst[r], bits)


#: f32 elementwise arithmetic, one VALU instruction per register (max/min are the hardware's
#: IEEE maxNum/minNum: a NaN operand yields the other one).
F32_BINARY = {"add": "v_add_f32_e32", "sub": "v_sub_f32_e32", "mul": "v_mul_f32_e32",
              "max": "v_max_f32_e32", "min": "v_min_f32_e32"}
#: the opcodes that compute `fn` with their operands exchanged (the others commute)
F32_REVERSED = {"sub": "v_subrev_f32_e32"}
#: f32 functions: (opcode, literal operand) — sign-bit logic for neg/abs, transcendental units
#: for the rest (exp2/log2 are base 2, as in the IR).
F32_UNARY = {"neg": ("v_xor_b32_e32", 0x80000000), "abs": ("v_and_b32_e32", 0x7FFFFFFF),
             "exp2": ("v_exp_f32_e32", None), "log2": ("v_log_f32_e32", None),
             "rcp": ("v_rcp_f32_e32", None), "sqrt": ("v_sqrt_f32_e32", None),
             "rsqrt": ("v_rsq_f32_e32", None), "floor": ("v_floor_f32_e32", None),
             "trunc": ("v_trunc_f32_e32", None)}
#: comparisons into a lane mask (VOP3, so both operands may be VGPRs or inline constants);
#: `neq` is the unordered not-equal, true with a NaN as Python's !=
F32_COMPARE = {"lt": "v_cmp_lt_f32_e64", "le": "v_cmp_le_f32_e64", "gt": "v_cmp_gt_f32_e64",
               "ge": "v_cmp_ge_f32_e64", "eq": "v_cmp_eq_f32_e64", "ne": "v_cmp_neq_f32_e64"}


def _in_vgpr(s: Selector, value):
    """`value` where a VOP3 that already reads an SGPR (a lane mask) may take it: gfx9's
    constant bus carries one scalar operand, so an SGPR is first copied to a VGPR."""
    reg = value.reg if isinstance(value, Ref) else value
    if isinstance(reg, VReg) and reg.cls == "s":
        copy = VReg("v", 1, "sgpr.copy")
        s.emit("v_mov_b32_e32", copy, value)
        return copy
    return value


def _vop3_source(s: Selector, value):
    """A VOP3 source: a register, or a constant (an inline one as is, others in a VGPR: gfx9's
    VOP3 takes no literal)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if isinstance(value, int):
        return value if _inline(value) else s.materialize(value, "v")
    return value if value in isa.INLINE_FLOATS else _float_vgpr(s, value)


def _compare(s: Selector, op: O.Binary):
    """A mask tile: 1.0 where the comparison holds, 0.0 where not."""
    x, y = s.tile(op.x), s.tile(op.y)
    dst = s.new_tile(op.result)
    for r in range(dst.size):
        mask = VReg("s", 2, "cmp", 2)
        s.emit(F32_COMPARE[op.fn], mask, _vop3_source(s, x[r]), _vop3_source(s, y[r]))
        s.emit("v_cndmask_b32_e64", dst[r], 0, 1.0, mask)


@rule(O.Select)
def _select(s: Selector, op: O.Select):
    x, y, mask = s.tile(op.x), s.tile(op.y), s.tile(op.mask)
    dst = s.new_tile(op.result)
    for r in range(dst.size):
        lanes = VReg("s", 2, "pick", 2)
        s.emit("v_cmp_neq_f32_e64", lanes, _vop3_source(s, mask[r]), 0)
        s.emit("v_cndmask_b32_e64", dst[r], _in_vgpr(s, _vop3_source(s, y[r])),
               _in_vgpr(s, _vop3_source(s, x[r])), lanes)


@rule(O.Iota)
def _iota(s: Selector, op: O.Iota):
    """Each slot's start + coordinate, an integer term in (wave, lane) and the scalars,
    converted to f32 for an f32 tile."""
    layout = op.result.type.layout
    start = simplify(substitute(op.start, s.renamed)) if s.renamed else op.start
    dst = s.new_tile(op.result)
    for slot in range(layout.slots):
        value = start
        if op.axis >= 0:
            value = simplify(start + at_slot(layout.coords[op.axis], slot))
        reg = s.value(value, "iota")
        if op.result.type.dtype == "i32":
            s.emit("v_mov_b32_e32", dst[slot], reg)
        else:
            s.emit("v_cvt_f32_i32_e32", dst[slot], reg)


@rule(O.Binary)
def _binary(s: Selector, op: O.Binary):
    if op.fn in F32_COMPARE:
        _compare(s, op)
        return
    if op.fn not in F32_BINARY:
        raise UnsupportedError(f"binary {op.fn} is not lowered (IEEE division needs a "
                               "scale/fixup sequence)", op.loc, "multiply by rcp(y) instead")
    x, y = s.tile(op.x), s.tile(op.y)
    dst = s.reusable(op.x, op) or s.reusable(op.y, op)
    if dst is None:
        dst = s.new_tile(op.result)
    s.regs[op.result.name] = dst
    packed = op.fn in F32_PACKED and op.result.type.dtype == "f32"
    copies: dict = {}                         # a broadcast operand's 64-bit copy, per source
    r = 0
    while r < dst.size:
        if packed and r % 2 == 0 and r + 1 < dst.size and _pair_aligned(dst[r], dst[r + 1]):
            sources = [_packed_source(s, t, r, copies) for t in (x, y)]
            if None not in sources:
                (a, hi_a), (b, hi_b) = sources
                mods = "" if hi_a and hi_b else f"op_sel_hi:[{int(hi_a)},{int(hi_b)}]"
                if op.fn == "sub":
                    mods = f"{mods} neg_lo:[0,1] neg_hi:[0,1]".strip()
                s.emit(F32_PACKED[op.fn], dst[r:r + 2], a, b, mods=mods)
                r += 2
                continue
        a, b, opcode = x[r], y[r], F32_BINARY[op.fn]
        if isinstance(b, int | float):          # VOP2 takes a constant in src0 only
            if isinstance(a, int | float):
                a = s.materialize(a, "v") if isinstance(a, int) else _float_vgpr(s, a)
            a, b = b, a
            opcode = F32_REVERSED.get(op.fn, opcode)
        s.emit(opcode, dst[r], a, b)
        r += 1


#: f32 arithmetic two registers at a time (packed FP32: one VALU issue computes both halves of
#: a 64-bit register pair; subtraction adds the negated second operand)
F32_PACKED = {"add": "v_pk_add_f32", "sub": "v_pk_add_f32", "mul": "v_pk_mul_f32"}


def _pair_aligned(a, b) -> bool:
    """Whether registers `a`, `b` are one even-aligned 64-bit pair (gfx90a+ requires it of a
    64-bit VGPR operand)."""
    if not (isinstance(a, Ref) and isinstance(b, Ref) and a.reg is b.reg
            and b.start == a.start + 1 and a.reg.cls == "v"):
        return False
    if a.reg.phys is not None:
        return (a.reg.phys + a.start) % 2 == 0
    return a.reg.align % 2 == 0 and a.start % 2 == 0


def _packed_source(s: Selector, tile, r: int, copies: dict):
    """Registers r, r+1 of `tile` as a packed source: (operand, whether its high half feeds
    the high result). A pair is read as is; one value in both (a broadcast register or a
    constant) is copied once per op into the low half of an aligned pair, read for both
    halves (op_sel_hi 0). None when the two registers are neither."""
    a, b = tile[r], tile[r + 1]
    if _pair_aligned(a, b):
        return Ref(a.reg, a.start, 2), True
    if a != b or isinstance(a, bool) or not isinstance(a, Ref | int | float):
        return None
    if a not in copies:
        pair = VReg("v", 2, "pk", 2)
        s.emit("v_mov_b32_e32", pair[0], a)
        copies[a] = pair
    return copies[a].whole, False


def _float_vgpr(s: Selector, value: float) -> VReg:
    reg = VReg("v", 1, "const")
    s.emit("v_mov_b32_e32", reg, value)
    return reg


@rule(O.Unary)
def _unary(s: Selector, op: O.Unary):
    opcode, literal = F32_UNARY[op.fn]
    x = s.tile(op.x)
    dst = s.reusable(op.x, op) or s.new_tile(op.result)
    s.regs[op.result.name] = dst
    for r in range(dst.size):
        operands = (dst[r], literal, x[r]) if literal is not None else (dst[r], x[r])
        s.emit(opcode, *operands)


@rule(O.SlotSlice)
def _slot_slice(s: Selector, op: O.SlotSlice):
    first_bit = op.start * DTYPE_BYTES[op.x.type.dtype] * 8
    if first_bit % 32:
        raise UnsupportedError(f"slots from {op.start} do not start a register", op.loc,
                               "slice at a register boundary")
    # the slice is a range of x's registers, read in place (an MFMA operand: no copies)
    x, first = s.tile(op.x), first_bit // 32
    s.view(op.result, x[first:first + op.result.type.vgprs])


def _cast_to_fp8(s: Selector, x, out, dst: str) -> None:
    """f32 -> fnuz fp8/bf8, four to a register: v_cvt_pk_{fp8,bf8}_f32 rounds two f32 to
    nearest even into the low half of a zeroed register (out of range and NaN give the fnuz
    NaN 0x80, no clamp); a v_perm_b32 joins the low halves of two such registers."""
    select = s.materialize(0x05040100, "s")

    def pair(first: int) -> VReg:
        packed = VReg("v", 1, f"{dst}.pair")
        s.emit("v_mov_b32_e32", packed, 0)
        second = x[first + 1] if first + 1 < x.size else 0
        s.emit(f"v_cvt_pk_{dst}_f32", packed, x[first], second)
        return packed

    for r in range(out.size):
        low = pair(4 * r)
        if 4 * r + 2 < x.size:
            s.emit("v_perm_b32", out[r], pair(4 * r + 2), low, select)
        else:
            s.emit("v_mov_b32_e32", out[r], low)


#: the bf16 NaN an f32 NaN rounds to (`_cast`): quiet, positive, no payload, as c10's
#: round_to_nearest_even gives
BF16_NAN = 0x7FC0


@rule(O.Cast)
def _cast(s: Selector, op: O.Cast):
    """f32 -> bf16 rounds to nearest even (gfx942 has no v_cvt_pk_bf16_f32): add 0x7fff plus
    the lowest kept bit and keep the high half, a NaN becoming the canonical quiet NaN 0x7fc0
    (c10's round_to_nearest_even; its payload's carry could otherwise reach the sign): four
    VALU instructions a value (the NaN test written to VCC, the select's other source a VGPR:
    VCC and a literal or an SGPR would read the constant bus twice), a v_perm_b32 per pair
    and one move of the NaN per cast; toward zero (`rtz`) keeps the high halves as they
    are, one v_perm_b32 per pair; bf16 -> f32 shifts into the high half."""
    src, dst = op.x.type.dtype, op.result.type.dtype
    x, out = s.tile(op.x), s.new_tile(op.result)
    if src == dst:
        for r in range(out.size):
            s.emit("v_mov_b32_e32", out[r], x[r])
    elif (src, dst) == ("bf16", "f32"):
        for r in range(out.size):
            pair = x[r // 2]
            if r % 2:
                s.emit("v_and_b32_e32", out[r], 0xFFFF0000, pair)
            else:
                s.emit("v_lshlrev_b32_e32", out[r], 16, pair)
    elif (src, dst) == ("f32", "bf16") and op.rounding == "rtz":
        select = s.materialize(0x07060302, "s")
        for r in range(out.size):
            s.emit("v_perm_b32", out[r], x[2 * r + 1], x[2 * r], select)
    elif (src, dst) == ("f32", "bf16"):
        bias, select = s.materialize(0x7FFF, "s"), s.materialize(0x07060302, "s")
        nan = VReg("v", 1, "bf16.nan")        # for this cast only: no VGPR held kernel-wide
        s.emit("v_mov_b32_e32", nan, BF16_NAN << 16)
        rounded = []
        for r in range(x.size):
            lsb, value = VReg("v", 1, "lsb"), VReg("v", 1, "rne")
            s.emit("v_bfe_u32", lsb, x[r], 16, 1)
            s.emit("v_add3_u32", value, x[r], bias, lsb)
            s.emit("v_cmp_o_f32_e32", "vcc", x[r], x[r])
            s.emit("v_cndmask_b32_e32", value, nan, value, "vcc")
            rounded.append(value)
        for r in range(out.size):
            low, high = rounded[2 * r], rounded[2 * r + 1]
            s.emit("v_perm_b32", out[r], high, low, select)
    elif (src, dst) in CONVERT:
        for r in range(out.size):
            s.emit(CONVERT[src, dst], out[r], x[r])
    elif (src, dst) == ("f32", "f16"):
        for r in range(out.size):
            low, high = VReg("v", 1, "f16.lo"), VReg("v", 1, "f16.hi")
            s.emit("v_cvt_f16_f32_e32", low, x[2 * r])
            s.emit("v_cvt_f16_f32_e32", high, x[2 * r + 1])
            s.emit("v_pack_b32_f16", out[r], low, high)
    elif (src, dst) == ("f16", "f32"):
        for r in range(out.size):
            half = x[r // 2]
            if r % 2:
                shifted = VReg("v", 1, "f16.hi")
                s.emit("v_lshrrev_b32_e32", shifted, 16, half)
                half = shifted
            s.emit("v_cvt_f32_f16_e32", out[r], half)
    elif src == "f32" and dst in ("fp8", "bf8"):
        _cast_to_fp8(s, x, out, dst)
    elif src in ("u8", "i8") and dst == "f32":
        # byte k of a register: v_cvt_f32_ubyte<k> reads it zero-extended; a signed byte is
        # sign-extended first (v_bfe_i32), then converted as an i32
        for r in range(out.size):
            word, byte = x[r // 4], r % 4
            if src == "u8":
                s.emit(f"v_cvt_f32_ubyte{byte}_e32", out[r], word)
                continue
            wide = VReg("v", 1, "i8.sext")
            s.emit("v_bfe_i32", wide, word, 8 * byte, 8)
            s.emit("v_cvt_f32_i32_e32", out[r], wide)
    elif src in ("fp8", "bf8") and dst == "f32":
        for r in range(out.size):
            word, byte = x[r // 4], r % 4
            if byte:
                shifted = VReg("v", 1, f"{src}.byte")
                s.emit("v_lshrrev_b32_e32", shifted, 8 * byte, word)
                word = shifted
            s.emit(f"v_cvt_f32_{src}_e32", out[r], word)
    elif src != "f32" and dst != "f32" and {src, dst} <= {"i32", "bf16", "f16"}:
        # through f32: exact from bf16 and f16, one rounding to the narrower type after
        middle = Value(f"{op.result.name}.f32", RegType("f32", op.x.type.shape,
                                                        op.x.type.layout))
        _cast(s, attrs.evolve(op, result=middle))
        _cast(s, attrs.evolve(op, x=middle))
    else:
        raise UnsupportedError(f"cast {src} -> {dst} is not lowered", op.loc,
                               "cast through f32, bf16, f16, fp8, bf8 or i32 (u8 and i8 "
                               "convert to f32 only)")


#: one instruction per register: f32 <-> i32 (truncating toward zero and saturating, NaN -> 0,
#: as torch's .to(torch.int32) on the GPU)
CONVERT = {("f32", "i32"): "v_cvt_i32_f32_e32", ("i32", "f32"): "v_cvt_f32_i32_e32"}


@rule(O.Barrier, O.BarrierNoWait)
def _barrier(s: Selector, op: O.Barrier | O.BarrierNoWait):
    # the wait pass puts an lgkmcnt wait for pending LDS writes before every s_barrier, so
    # the bare barrier lowers as strongly as the waiting one (the verifier proved the weaker)
    s.emit("s_barrier", ndefs=0)


@rule(O.Wait, O.WaitGroup)
def _wait(s: Selector, op: O.Wait | O.WaitGroup):
    if isinstance(op, O.Wait):
        s.emit("s_waitcnt", ndefs=0, mods="vmcnt(0) lgkmcnt(0)")
        return
    wait = s.emit("s_waitcnt", ndefs=0, mods="vmcnt(0)")
    if s.groups_marked:
        # the wait pass leaves the newest `pending` groups' DMAs (and what came after) in
        # flight; otherwise vmcnt(0), at least as strong
        wait.groups_in_flight = op.pending


@rule(O.CommitGroup)
def _commit_group(s: Selector, op: O.CommitGroup):
    """Nothing runs: the group's newest LDS DMA is marked for the wait pass to count."""
    if s.groups_marked:
        s.last_dma.closes_group = True


def groups_marked(block: O.Block) -> bool:
    """Whether every `commit_group` follows, in its own block, an async copy with no copy in
    a nested loop or branch after it: then that copy's last DMA is the group's newest, and a
    wait through it retires the whole group (vector memory completes in order)."""
    copied = False
    for op in block.ops:
        if isinstance(op, O.AsyncCopy):
            copied = True
        elif isinstance(op, O.CommitGroup):
            if not copied:
                return False
            copied = False
        elif op.blocks:
            if any(isinstance(x, O.AsyncCopy) for inner in op.blocks for x in O.walk(inner)):
                copied = False
            if not all(groups_marked(inner) for inner in op.blocks):
                return False
    return True


def unroll_factor(s: Selector, op: O.For) -> int:
    """Copies of the body per machine iteration: the loop's `unroll` hint, and under the
    interleave policy also its pipeline depth (`stages`), so that each copy's buffer slot
    (`iv % stages`) is a constant folded into the LDS offsets."""
    u = op.unroll if s.policy == "simple" else math.lcm(op.unroll, op.stages)
    if u == 1 or (op.step != 1 and op.unroll == 1):
        return 1                      # the stages alone only ask for an optimisation
    if u & (u - 1):
        raise LoweringError(f"the loop would be unrolled {u} times (unroll={op.unroll}, "
                            f"stages={op.stages}); the backend splits trip counts by powers of "
                            "two", op.loc, "give unroll and stages powers of two")
    if op.step != 1:
        raise LoweringError(f"unrolling a loop of step {op.step} is not supported", op.loc,
                            "write the loop with step 1 and scale the counter in the body")
    return u


@rule(O.For)
def _for(s: Selector, op: O.For):
    for e in (op.start, op.stop):
        if not s.is_uniform(e):
            raise LoweringError(f"loop bound '{e}' is not workgroup-uniform", op.loc)
    u = unroll_factor(s, op)
    pre, latch, setup = s.out, [], []
    at = len(pre)
    outermost = not s.frames
    if outermost:
        s.preheader = []                 # loop-invariant terms of this loop nest
    carried = []
    for init, arg in zip(op.inits, op.body.args):
        reg = s.tile(init)
        if (not isinstance(reg, VReg) or reg.serial in s.shared or not s.dies(init, op)
                or reg in carried):                     # one register per carried value
            copy = s.new_tile(arg)
            for r in range(reg.size):
                s.emit("v_mov_b32_e32", copy[r], reg[r])
            reg = copy
        carried.append(reg)
    if u == 1:
        counter, first, step, stop = op.iv, op.start, op.step, op.stop
        copies = [{}]
    else:
        # J counts groups of u iterations: iteration start + u*J + i runs as copy i
        counter = Var(f"{op.iv.name}_group", 0, 2**31)
        trips = max_(simplify(op.stop - op.start), 0)
        first, step, stop = as_expr(0), 1, simplify(trips // u)
        copies = [{op.iv.name: simplify(op.start + counter * u + i)} for i in range(u)]
    iv = VReg("s", 1, counter.name)
    if outermost:
        # the bounds go before the terms hoisted out of the body, which may reuse them
        s.out = s.preheader
    start_value, stop_value = s.value(first), s.value(stop)
    s.out = pre
    s.emit("s_mov_b32", iv, start_value, note=f"{counter.name} = {first}")
    loop = Loop(s.label("loop"), s.label("end"), loc=op.loc, fill_window=_fill_window(op))
    s.emit("s_cmp_ge_i32", iv, stop_value, ndefs=0, note="no iterations?")
    s.emit("s_cbranch_scc1", loop.exit, ndefs=0)
    pre.append(loop)
    frame = LoopFrame(counter.name, step, first, stop, setup, latch)
    s.frames.append(frame)
    s.loop_vars.add(counter.name)
    s.bindings[counter.name] = iv
    s.push_scope()
    s.out = loop.body
    entry = carried
    for k, renamed in enumerate(copies):
        entry = _body_copy(s, op, entry, renamed, home=carried if k == len(copies) - 1 else None,
                           carried=carried, later=len(copies) - 1 - k)
    s.loc = op.loc
    loop.body.extend(latch)
    s.emit("s_add_i32", iv, iv, step)
    s.emit("s_cmp_lt_i32", iv, stop_value, ndefs=0)
    s.emit("s_cbranch_scc1", loop.header, ndefs=0)
    s.pop_scope()
    s.frames.pop()
    s.loop_vars.discard(counter.name)
    s.out = pre
    pre[at:at] = setup               # strength-reduced offsets start before the trip test
    if outermost:
        pre[at:at] = s.preheader     # hoisted terms before those
        s.preheader = s.prologue
    if u > 1 and not s.prover.divisible(simplify(op.stop - op.start), u):
        # the last (trips mod u) iterations, each behind a uniform branch (none where the
        # assumptions make the trip count a multiple of u)
        left = simplify(max_(simplify(op.stop - op.start), 0) % u)
        done = simplify(op.start + stop * u)
        for i in range(u - 1):
            skip = Skip(s.label("rest"))
            s.emit("s_cmp_le_i32", s.register(left, "rest"), i, ndefs=0,
                   note=f"{i + 1} iteration(s) left?")
            s.emit("s_cbranch_scc1", skip.label, ndefs=0)
            pre.append(skip)
            with s.conditional(skip.body):
                s.facts.append(Const(i) < left)
                _body_copy(s, op, carried, {op.iv.name: simplify(done + i)}, home=carried,
                           carried=carried)
                s.facts.pop()
            s.out = pre
    for result, reg in zip(op.results, carried):
        s.regs[result.name] = reg


def _fill_window(op: O.For) -> int | None:
    """The loop's `fill_window=N` hint (`schedule._fill_mfma_shadows`), or None."""
    for hint in op.hints:
        name, _, value = hint.partition("=")
        if name.strip() == "fill_window":
            if not value.strip().isdigit() or int(value) < 1:
                raise LoweringError(f"loop hint {hint!r}: fill_window takes a positive number "
                                    "of instructions, e.g. 'fill_window=96'", op.loc)
            return int(value)
    return None


@rule(O.If)
def _if(s: Selector, op: O.If):
    cond = simplify(substitute(op.cond, s.renamed)) if s.renamed else simplify(op.cond)
    if not s.is_uniform(cond):
        raise LoweringError(f"branch condition '{op.cond}' is not workgroup-uniform", op.loc)
    results = [_passed_through(s, op, n) or s.new_tile(r) for n, r in enumerate(op.results)]
    arms = (op.then, op.orelse)
    if isinstance(cond, Const):                  # decided at compile time: one arm, no branch
        _arm(s, arms[0] if cond.value else arms[1], results)
    else:
        branch = IfElse(s.label("else"), s.label("endif"))
        if isinstance(cond, Term) and cond.op in _COMPARE:     # branch on the compare itself
            left, right = s.value(cond.args[0]), s.value(cond.args[1])
            s.emit(_COMPARE[cond.op], left, right, ndefs=0, note=f"if {op.cond}")
        else:
            s.emit("s_cmp_lg_u32", _flag(s, cond), 0, ndefs=0, note=f"if {op.cond}")
        s.emit("s_cbranch_scc0", branch.else_label, ndefs=0)
        s.out.append(branch)
        # each arm knows its side of the condition (a branch on a band of workgroup ids
        # proves its offsets from the band's first id non-negative)
        top = not s.frames          # outside loops an arm may make its own entry code
        with s.conditional(branch.then_body):
            with s.branch_entry(branch.then_body) if top else contextlib.nullcontext():
                s.facts.append(cond)
                _arm(s, op.then, results)
                s.facts.pop()
            s.loc = op.loc
            s.emit("s_branch", branch.end_label, ndefs=0)
        with s.conditional(branch.else_body):
            with s.branch_entry(branch.else_body) if top else contextlib.nullcontext():
                s.facts.append(~cond)
                _arm(s, op.orelse, results)
                s.facts.pop()
    for result, reg in zip(op.results, results):
        s.regs[result.name] = reg


_COMPARE = {"lt": "s_cmp_lt_i32", "le": "s_cmp_le_i32", "eq": "s_cmp_eq_u32",
            "ne": "s_cmp_lg_u32"}


def _flag(s: Selector, cond: Expr) -> VReg:
    """An SGPR holding 1 where the uniform condition holds, else 0."""
    flag = VReg("s", 1, "cond")
    if isinstance(cond, Term) and cond.op in _COMPARE:
        s.emit(_COMPARE[cond.op], s.value(cond.args[0]), s.value(cond.args[1]), ndefs=0)
        s.emit("s_cselect_b32", flag, 1, 0)
    elif isinstance(cond, Term) and cond.op in ("land", "lor"):
        left, right = _flag(s, cond.args[0]), _flag(s, cond.args[1])
        s.emit("s_and_b32" if cond.op == "land" else "s_or_b32", flag, left, right)
    elif isinstance(cond, Term) and cond.op == "lnot":
        s.emit("s_xor_b32", flag, _flag(s, cond.args[0]), 1)
    else:
        raise UnsupportedError(f"the condition '{cond}' is not a comparison the backend "
                               "lowers", s.loc, "compare integers with < <= == != and combine "
                               "with & | ~")
    return flag


def _passed_through(s: Selector, op: O.If, n: int) -> VReg | None:
    """The registers of the value the else arm yields unchanged as result `n` when that value
    dies with the branch: the result then lives in them, and only the then arm (a causal mask's
    diagonal blocks) copies its own value there, where every arm used to copy (16 moves per
    unmasked key block of attention)."""
    then, orelse = op.then.ops[-1].values, op.orelse.ops[-1].values
    value = orelse[n]
    inner = [inner for block in op.blocks for inner in O.walk(block)]
    if (value.name not in s.regs or any(value.name in {r.name for r in o.results} for o in inner)
            or [v.name for v in orelse].count(value.name) != 1
            or any(v.name == value.name for v in then)):
        return None
    end = max((s.position[id(o)] for o in inner), default=s.position[id(op)])
    if s.last.get(value.name, 0) > end:            # read after the branch: keep it intact
        return None
    return s.tile(value)


def _arm(s: Selector, block: O.Block, results: list) -> None:
    *ops, yielded = block.ops
    s.block(ops)
    s.loc = yielded.loc
    for value, reg in zip(yielded.values, results):
        src = s.tile(value)
        if src is reg:                 # passed through in place (`_passed_through`)
            continue
        for r in range(reg.size):
            s.emit("v_mov_b32_e32", reg[r], src[r])


def _body_copy(s: Selector, op: O.For, entry: list, renamed: dict, home: list | None = None,
               carried: list | None = None, later: int = 0) -> list:
    """Lower one copy of the loop body with the counter renamed; the loop-carried values enter
    in the `entry` registers. An unrolled copy but the last hands its results to the next copy
    where they are (no moves: a block loaded two iterations ahead stays in flight), the last
    one leaves them in `home`, the registers the loop keeps them in; a result whose home
    register this copy does not read is computed straight into it. A loaded tile goes straight
    to the register the loop keeps it in once the `later` copies after this one have passed
    it along (`_final_positions`), where nothing live is held there when it is loaded (the
    tile it replaces was read for the last time before: a window of tiles in flight, the
    oldest consumed and the newest loaded into its registers, rotates without moves when the
    body is unrolled by the window's length). Returns where the values leave."""
    for arg, reg in zip(op.body.args, entry):
        s.regs[arg.name] = reg
    outer, s.renamed = s.renamed, {**s.renamed, **renamed}
    *body, yielded = op.body.ops
    produced = {r.name for o in body for r in o.results}
    loaded = {o.result.name for o in body if isinstance(o, O.GlobalLoad)}
    names = [v.name for v in yielded.values]
    if home is not None:
        for name, reg in zip(names, home):
            if name in produced and names.count(name) == 1 and all(reg is not e for e in entry):
                s.targets[name] = reg
    if carried is not None:
        for name, at in _final_positions(op, later if home is None else 0).items():
            if name in loaded and name not in s.targets:
                s.targets[name] = carried[at]
                s.if_free.add(name)
    s.block(body)
    for name in names:
        s.targets.pop(name, None)
        s.if_free.discard(name)
    s.loc = yielded.loc
    results = [s.tile(v) for v in yielded.values]
    if home is None and all(isinstance(r, VReg) for r in results) \
            and len({r.serial for r in results}) == len(results):
        s.renamed = outer
        return results
    targets = home if home is not None else entry
    _parallel_copy(s, results, targets)
    s.renamed = outer
    return targets


def _final_positions(op: O.For, later: int) -> dict[str, int]:
    """Where each value the loop body yields (once) sits among the carried values after
    `later` more copies of the body: its yield position, followed through each copy that
    yields that carried value on unchanged; a value a later copy consumes is left out."""
    names = [v.name for v in op.body.ops[-1].values]
    args = [a.name for a in op.body.args]
    out = {}
    for at, name in enumerate(names):
        if names.count(name) != 1:
            continue
        position: int | None = at
        for _ in range(later):
            passed = [q for q, n in enumerate(names) if n == args[position]]
            position = passed[0] if len(passed) == 1 else None
            if position is None:
                break
        if position is not None:
            out[name] = position
    return out


def _serials(held) -> set[int]:
    """The virtual registers a tile's registers belong to (its own, or those it views)."""
    if isinstance(held, VReg):
        return {held.serial}
    if isinstance(held, Ref):
        return {held.reg.serial}
    refs = getattr(held, "refs", None)
    return {r.reg.serial for r in refs} if refs is not None else set()


def _parallel_copy(s: Selector, sources: list, targets: list) -> None:
    """targets[i] = sources[i] for all i at once: a source that is also another copy's target
    (values swapped between iterations) is saved to a fresh register first."""
    moves = [(src, dst) for src, dst in zip(sources, targets) if src is not dst]
    written = {dst for _, dst in moves}
    saved = {}
    for src, _ in moves:
        if src in written and src not in saved:
            saved[src] = VReg("v", src.size, f"{src.name}.saved", src.align)
            for r in range(src.size):
                s.emit("v_mov_b32_e32", saved[src][r], src[r])
    for src, dst in moves:
        src = saved.get(src, src)
        for r in range(dst.size):
            s.emit("v_mov_b32_e32", dst[r], src[r])


__all__ = ["RULES", "Selector", "KernargSlot", "rule", "LabelDef", "MInst"]

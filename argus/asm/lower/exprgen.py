"""Integer `ir.expr` terms to gfx942 SALU/VALU sequences.

A term whose variables are all uniform (sizes, workgroup ids, loop counters) becomes SGPR code,
one that mentions `wave` or `lane` VGPR code. A term needed inside a loop that does not change
there is emitted once before the outermost loop (hoisted); the others where they are used,
memoised per loop body. Operand rules of the encodings: a VOP2 takes its SGPR or literal in src0
and a VGPR in src1; a VOP3 (v_mul_lo_u32) takes no literal on gfx9.
"""

from __future__ import annotations

from argus.asm.lower.program import MInst, VReg
from argus.errors import ArgusError
from argus.ir.expr import Const, Expr, Term, Var, bounds, free_vars, linear_form, simplify
from argus.ir.types import SourceLoc
from argus.isa_cdna3 import isa

LANE_VARS = frozenset(("wave", "lane"))


class LoweringError(ArgusError, ValueError):
    """The backend cannot lower this program; `loc` is the DSL line, `fix` what to change."""


class UnsupportedError(LoweringError):
    """An op or expression form the gfx942 backend does not lower."""

    kind = "unsupported"


def _is_inline(value: int) -> bool:
    lo, hi = isa.INLINE_INT_RANGE
    return lo <= value <= hi


class ExprEmitter:
    """Emits integer expressions; `out` is the list instructions go to at the current point,
    `prologue` the entry code (constants go there) and `preheader` the code just before the
    outermost loop being lowered (hoisted terms go there)."""

    def __init__(self, bindings: dict[str, VReg], prologue: list, loop_vars: set[str]):
        self.bindings = bindings
        self.prologue = prologue
        self.out = prologue
        self.preheader = prologue
        self.loop_vars = loop_vars          # names of loop counters (not hoistable)
        self.hoisted: dict[Expr, VReg | int] = {}
        # registers made in the entry code, which dominates every later point: unlike the
        # hoisted terms, a branch does not forget them (one per constant however many
        # branches use it)
        self.constants: dict[tuple[str, int], VReg] = {}
        self.scoped: list[dict[Expr, VReg | int]] = []
        self.loc: SourceLoc | None = None
        #: uniform terms computed in place even where loop-invariant (a global store's)
        self.in_place = False
        self.origin = ""                    # mnemonic of the IR op being lowered

    # -- scopes ---------------------------------------------------------------------------------
    def push_scope(self):
        self.scoped.append({})

    def pop_scope(self):
        self.scoped.pop()

    def emit(self, opcode: str, *operands, ndefs: int = 1, mods: str = "", note: str = "",
             into: list | None = None) -> MInst:
        inst = MInst(opcode, tuple(operands), ndefs, mods, self.loc, note, self.origin)
        (self.out if into is None else into).append(inst)
        return inst

    # -- values ---------------------------------------------------------------------------------
    def is_uniform(self, e: Expr) -> bool:
        return not any(v.name in LANE_VARS for v in free_vars(e))

    def is_invariant(self, e: Expr) -> bool:
        return not any(v.name in self.loop_vars for v in free_vars(e))

    def is_invariant_anyway(self, e: Expr) -> bool:
        """Whether `e` is already computed before the loops (a hoisted term reused)."""
        return e in self.hoisted

    def value(self, e, name: str = "") -> VReg | int:
        """An int for constants, else a register holding `e` (an SGPR when uniform)."""
        e = simplify(e)
        if isinstance(e, Const):
            return int(e.value)
        if isinstance(e, Var):
            if e.name not in self.bindings:
                raise UnsupportedError(f"'{e.name}' has no register in this kernel", self.loc)
            return self.bindings[e.name]
        if e in self.hoisted:
            return self.hoisted[e]
        for scope in self.scoped:
            if e in scope:
                return scope[e]
        # loop-invariant terms needed inside a loop are hoisted before the outermost loop (which
        # follows every top-level definition they may use); outside loops a term is computed
        # where it is first used (straight-line code dominates the rest)
        invariant = self.is_invariant(e)
        if invariant and self.loop_vars and self.in_place and not self.is_invariant_anyway(e):
            # a store's offsets and bounds are made where it stores, once per trip of the
            # loops around it, and die with it: hoisted, they would be live through the
            # reduction loops that run before it (16 rows of an MFMA tile, per phase)
            invariant = False
        memo = self.hoisted if invariant or not self.scoped else self.scoped[-1]
        saved = self.out
        if invariant and self.loop_vars:
            self.out = self.preheader
        try:
            result = self._term(e, name)
        finally:
            self.out = saved
        memo[e] = result
        return result

    def register(self, e, name: str = "", cls: str | None = None) -> VReg:
        """Like value(), but constants are moved into a register (of class `cls`)."""
        v = self.value(e, name)
        if isinstance(v, VReg):
            return v
        return self.materialize(v, cls or "s")

    def materialize(self, const: int, cls: str) -> VReg:
        """A register holding `const`, set once in the entry code and shared by every use
        (callers only read it)."""
        key = (cls, const)
        if key in self.constants:
            return self.constants[key]
        reg = VReg(cls, 1, f"c{const}")
        op = "s_mov_b32" if cls == "s" else "v_mov_b32_e32"
        self.emit(op, reg, const, into=self.prologue)
        self.constants[key] = reg
        return reg

    def nonnegative(self, e: Expr) -> bool:
        """Whether e >= 0 where it is computed, beyond what its interval bounds show (the
        selector asks the solver under the kernel's assumptions)."""
        return bounds(e)[0] >= 0

    # -- term lowering ------------------------------------------------------------------------
    def _term(self, e: Term, name: str) -> VReg:
        op = e.op
        if op in ("add", "sub") and (split := self._invariant_first(e)) is not None:
            return self._binary(*split, e, name)
        if op in ("floordiv", "shr", "mod", "and", "shl", "mul") and isinstance(e.args[1], Const):
            return self._by_constant(e, name)
        if op == "mul" and isinstance(e.args[0], Const):
            return self._by_constant(Term("mul", (e.args[1], e.args[0])), name)
        if op == "neg":
            return self._binary("sub", Const(0), e.args[0], e, name)
        if op in ("add", "sub", "mul", "xor", "or", "and", "max", "min"):
            return self._binary(op, e.args[0], e.args[1], e, name)
        raise UnsupportedError(f"the integer expression '{e}' uses '{op}', which the gfx942 "
                               "backend does not lower", self.loc,
                               "write indices with + - * and division/modulo by powers of two")

    def _invariant_first(self, e: Term) -> tuple[str, Expr, Expr] | None:
        """A uniform sum inside a loop as (op, loop-invariant terms, the rest) when a loop
        counter's term sits before two or more invariant ones: the normal form orders terms by
        variable name, and the left-nested chain would redo those additions on every trip
        instead of once before the loop. A constant stays the last addition ((e - c) + c), so
        sums that differ only in it share the rest, as they do in the chain."""
        if not self.loop_vars or not self.is_uniform(e) or self.is_invariant(e):
            return None
        terms, const = linear_form(e)
        invariant = [a for a in terms if self.is_invariant(a)]
        if len(invariant) < 2:
            return None
        chain = []  # the chain's terms but the constant, gathered right to left
        node = e
        while isinstance(node, Term) and node.op in ("add", "sub"):
            if not isinstance(node.args[1], Const):
                chain.append(node.args[1])
            node = node.args[0]
        chain.append(node)
        chain.reverse()
        first_variant = next(n for n, t in enumerate(chain) if not self.is_invariant(t))
        if not any(self.is_invariant(t) for t in chain[first_variant + 1:]):
            return None
        if const:
            return "add" if const > 0 else "sub", simplify(e - const), Const(abs(const))
        variant = {a: k for a, k in terms.items() if a not in invariant}
        op = "sub" if all(k < 0 for k in variant.values()) else "add"
        sign = -1 if op == "sub" else 1
        rest = simplify(sum((sign * k * a for a, k in variant.items()), Const(0)))
        return op, simplify(sum((terms[a] * a for a in invariant), Const(0))), rest

    def _by_constant(self, e: Term, name: str) -> VReg:
        x, n = e.args[0], int(e.args[1].value)
        op = e.op
        lo, _ = bounds(x)
        if op in ("floordiv", "mod") and (n <= 0 or n & (n - 1)):
            raise UnsupportedError(f"'{e}' divides by {n}; the backend divides by powers of two "
                                   "only (shifts and masks)", self.loc,
                                   "choose tile sizes that are powers of two")
        if op in ("floordiv", "mod", "shr") and lo < 0 and not self.nonnegative(x):
            raise UnsupportedError(f"'{e}' may divide a negative value; the backend's shifts "
                                   "assume non-negative indices", self.loc)
        if op == "floordiv":
            op, n = "shr", n.bit_length() - 1
        elif op == "mod":
            op, n = "and", n - 1
        elif op == "mul" and n > 0 and n & (n - 1) == 0:
            op, n = "shl", n.bit_length() - 1
        if op == "mul":
            return self._multiply_constant(x, n, e, name)
        return self._binary(op, x, Const(n), e, name)

    def _multiply_constant(self, x: Expr, n: int, e: Term, name: str) -> VReg:
        if self.is_uniform(e):
            return self._binary("mul", x, Const(n), e, name)
        lo, hi = bounds(x)
        if 0 <= lo and hi < 1 << 24 and 0 <= n < 1 << 24:
            xv = self.register(x, cls="v")
            dst = VReg("v", 1, name)
            self.emit("v_mul_u32_u24_e32", dst, n, self._vgpr(xv))
            return dst
        return self._binary("mul", x, self.materialize(n, "s"), e, name)

    def _vgpr(self, operand):
        """VOP2 src1 must be a VGPR: move a uniform value over (v_mov_b32)."""
        if isinstance(operand, VReg) and operand.cls == "v":
            return operand
        reg = VReg("v", 1, "bcast")
        self.emit("v_mov_b32_e32", reg, operand)
        return reg

    def _binary(self, op: str, a: Expr, b: Expr, e: Expr, name: str) -> VReg:
        x = self.value(a) if not isinstance(a, Const) else int(a.value)
        y = self.value(b) if not isinstance(b, Const) else int(b.value)
        if self.is_uniform(e):
            dst = VReg("s", 1, name)
            scalar = {"add": "s_add_i32", "sub": "s_sub_i32", "mul": "s_mul_i32",
                      "xor": "s_xor_b32", "or": "s_or_b32", "and": "s_and_b32",
                      "shl": "s_lshl_b32", "shr": "s_lshr_b32", "max": "s_max_i32",
                      "min": "s_min_i32"}[op]
            self.emit(scalar, dst, x, y)
            return dst
        dst = VReg("v", 1, name)
        if op == "mul":
            # VOP3: no literal; at most one SGPR
            xs = x if isinstance(x, VReg) else self.materialize(x, "s") if not _is_inline(x) else x
            ys = y if isinstance(y, VReg) else self.materialize(y, "s") if not _is_inline(y) else y
            if (isinstance(xs, VReg) and xs.cls == "s" and isinstance(ys, VReg)
                    and ys.cls == "s"):
                ys = self._vgpr(ys)
            self.emit("v_mul_lo_u32", dst, xs, ys)
            return dst
        if op in ("shl", "shr"):
            opcode = "v_lshlrev_b32_e32" if op == "shl" else "v_lshrrev_b32_e32"
            self.emit(opcode, dst, y, self._vgpr(x))
            return dst
        if op == "sub":
            if isinstance(y, VReg) and y.cls == "v":
                self.emit("v_sub_u32_e32", dst, x, y)
            else:
                self.emit("v_subrev_u32_e32", dst, y, self._vgpr(x))
            return dst
        opcode = {"add": "v_add_u32_e32", "xor": "v_xor_b32_e32", "or": "v_or_b32_e32",
                  "and": "v_and_b32_e32", "max": "v_max_i32_e32", "min": "v_min_i32_e32"}[op]
        if not (isinstance(y, VReg) and y.cls == "v"):
            x, y = y, x
        self.emit(opcode, dst, x, self._vgpr(y))
        return dst

"""Address generation: each memory op's address formula split into a per-lane part (VGPR), a
uniform part (SGPR) and a constant (the instruction's offset field), and its register slots
grouped into the widest vector instructions the layout and the alignment allow.

Per-lane parts depend only on (wave, lane) and sizes, so they are computed once per kernel;
uniform parts that change with a loop counter are kept in an SGPR that the loop latch advances
by a constant (strength reduction) when they are linear in the counter. Contiguity is decided
exactly by enumerating all (wave, lane) of the tile's layout; alignment of the symbolic parts is
proved with the SMT layer under the kernel's assumptions.
"""

from __future__ import annotations

import functools
import math

import attrs
import numpy as np

from argus.asm.lower.exprgen import LANE_VARS, LoweringError
from argus.ir.access import global_index, lds_view, tile_coords, tile_of
from argus.ir.expr import (
    Const,
    Expr,
    Term,
    Var,
    as_expr,
    bounds,
    evaluate,
    free_vars,
    linear_form,
    simplify,
    substitute,
)
from argus.ir.types import DTYPE_BYTES, LANES


class VectorizeError(LoweringError):
    """A tile's register slots cannot be grouped into vector memory instructions."""


@attrs.frozen
class Piece:
    """One vector memory instruction: slots [first, first + count) at byte address
    lane + uniform + const."""

    first: int
    count: int
    nbytes: int
    lane: Expr
    uniform: Expr
    const: int

    def registers(self, elem_bytes: int) -> tuple[int, int]:
        """(first register, register count) of this piece in the tile's register tuple."""
        return self.first * elem_bytes // 4, self.nbytes // 4


#: Variables that vary inside a workgroup's tile (the slot is a compile-time register index).
TILE_VARS = LANE_VARS | {"slot"}


def _threads(waves: int, slots: int = 1) -> dict[str, np.ndarray]:
    tid = np.arange(waves * LANES)[:, None]
    return {"wave": tid // LANES, "lane": tid % LANES, "slot": np.arange(slots)[None, :]}


@functools.lru_cache(maxsize=4096)
def table(e: Expr, waves: int, slots: int = 1) -> np.ndarray:
    """Value of a (wave, lane, slot) expression for every thread (rows) and slot (columns);
    a 1-D array over the threads when `slots` is 1 (read-only: it is shared)."""
    values = np.array(np.broadcast_to(np.asarray(evaluate(e, _threads(waves, slots)), np.int64),
                                      (waves * LANES, slots)))
    values.setflags(write=False)
    return values[:, 0] if slots == 1 else values


@functools.lru_cache(maxsize=65536)
def _slot_table(e: Expr, layout) -> np.ndarray:
    """table() as (threads, slots), also for a one-slot tile."""
    return table(e, layout.waves, layout.slots).reshape(layout.waves * LANES, layout.slots)


@functools.lru_cache(maxsize=65536)
def at_slot(e: Expr, slot: int) -> Expr:
    return simplify(substitute(e, {"slot": slot}))


def split_lane(e: Expr, loc) -> tuple[Expr, Expr, int]:
    """(per-lane part, uniform part, constant) with e == their sum; an atom mixing per-lane and
    uniform variables cannot be split."""
    parts = _split(e)
    if isinstance(parts, Expr):
        raise LoweringError(f"the address term '{parts}' mixes per-lane and uniform values "
                            "non-linearly; the backend cannot split it into a VGPR base "
                            "and an SGPR offset", loc,
                            "apply swizzles to in-tile coordinates only")
    return parts


@functools.lru_cache(maxsize=65536)
def _split(e: Expr):
    """split_lane's result, or the offending atom (results are cached across ops: tiles of one
    layout at different origins share their per-lane parts)."""
    terms, const = linear_form(e)
    lane, uniform = Const(0), Const(0)
    for atom, k in terms.items():
        names = {v.name for v in free_vars(atom)}
        if names & TILE_VARS and names - TILE_VARS:
            return atom
        if names & TILE_VARS:
            lane = lane + atom * k
        else:
            uniform = uniform + atom * k
    return simplify(lane), simplify(uniform), const


class Prover:
    """Divisibility facts about uniform terms under the kernel's assumptions, cached. A term is
    first read as a sum of products whose factors' known multiples (constants, sizes the
    assumptions declare multiples of) decide it; the SMT layer decides the rest."""

    def __init__(self, assumes: tuple[Expr, ...]):
        self.assumes = assumes
        self.cache: dict = {}
        self.multiples: dict[str, int] = {}
        for fact in assumes:
            # facts of the form `size % c == 0`
            if isinstance(fact, Term) and fact.op == "eq" and fact.args[1] == Const(0):
                lhs = fact.args[0]
                if isinstance(lhs, Term) and lhs.op == "mod" and isinstance(lhs.args[0], Var) \
                        and isinstance(lhs.args[1], Const):
                    name, c = lhs.args[0].name, int(lhs.args[1].value)
                    self.multiples[name] = math.lcm(self.multiples.get(name, 1), c)

    def known_multiple(self, e: Expr) -> int:
        """A number e is always a multiple of (1 when nothing is known)."""
        if isinstance(e, Const):
            return abs(int(e.value)) or 0
        if isinstance(e, Var):
            return self.multiples.get(e.name, 1)
        if isinstance(e, Term):
            if e.op == "mul":
                return self.known_multiple(e.args[0]) * self.known_multiple(e.args[1])
            if e.op == "shl" and isinstance(e.args[1], Const):
                return self.known_multiple(e.args[0]) << int(e.args[1].value)
            if e.op in ("add", "sub"):
                return math.gcd(self.known_multiple(e.args[0]), self.known_multiple(e.args[1]))
            if e.op == "neg":
                return self.known_multiple(e.args[0])
        return 1

    def divisible(self, e: Expr, n: int) -> bool:
        if n == 1:
            return True
        e = simplify(e)
        terms, const = linear_form(e)
        if const % n == 0 and all((k * self.known_multiple(atom)) % n == 0
                                  for atom, k in terms.items()):
            return True
        key = (e, n)
        if key not in self.cache:
            from argus.smt import Proved, prove

            self.cache[key] = isinstance(prove((e % n).eq(0), self.assumes, timeout_ms=2000),
                                         Proved)
        return self.cache[key]


def row_major_strides(shape: tuple[Expr, ...]) -> tuple[Expr, ...]:
    strides, running = [], as_expr(1)
    for extent in reversed(shape):
        strides.append(running)
        running = simplify(running * extent)
    return tuple(reversed(strides))


def global_pieces(op, *, origin, widths, prover: Prover) -> list[Piece]:
    """Pieces of a global access (ir.access formula) by its register tile, the op's origin
    replaced by `origin` (the same one, or an unrolled copy's). For a gather the gathered axis
    is left out of the pieces' addresses (the row read from the index tensor is added per lane
    by the caller) and each piece keeps one gather position per lane; likewise the axis whose
    row comes from index registers (`rows=`), each piece within one index element."""
    tile = tile_of(op)
    layout, nbytes = tile.layout, DTYPE_BYTES[tile.dtype]
    shape = op.tensor.type.shape
    strides = row_major_strides(shape)
    index = [simplify(i) for i in global_index(op, origin=origin)]
    same = []
    if op.gather is not None:
        index[op.gather.axis] = Const(0)
        position = op.gather.origin + layout.coords[op.gather.tile_axis]
        same.append(_slot_table(split_lane(simplify(position), op.loc)[0], layout))
    if getattr(op, "rows", None) is not None:
        # the row comes from the index registers: a piece spans slots holding one index element
        index[op.rows.axis] = Const(0)
        same.append(_slot_table(op.rows.index.type.layout.coords[0], op.rows.index.type.layout))
    parts = [split_lane(i, op.loc) for i in index]
    # the per-lane part of every tensor index for every (thread, slot): contiguity and
    # alignment are decided on these tables
    tables = [_slot_table(lane, layout) + const for lane, _, const in parts]
    inner = len(shape) - 1

    @functools.cache
    def address(s: int) -> tuple[Expr, Expr, int]:
        lane, uniform = Const(0), Const(0)
        for i, (lane_i, uniform_i, const_i) in enumerate(parts):
            lane_s, _, const_s = split_lane(at_slot(lane_i, s), op.loc)
            lane = lane + lane_s * strides[i]
            # kept as separate terms, so offsets of neighbouring rows differ by c * stride
            uniform = uniform + uniform_i * strides[i] + (const_i + const_s) * strides[i]
        lane_b, uniform_b = simplify(lane * nbytes), simplify(uniform * nbytes)
        _, const = linear_form(uniform_b)
        return lane_b, simplify(uniform_b - const), const

    def contiguous(s: int, w: int) -> bool:
        for i, t in enumerate(tables):
            step = np.arange(w) if i == inner else 0
            if not (t[:, s:s + w] == t[:, s:s + 1] + step).all():
                return False
        return all((t[:, s:s + w] == t[:, s:s + 1]).all() for t in same)

    def aligned(s: int, piece_bytes: int) -> bool:
        # dword granularity is what the buffer instructions need (gfx942 allows unaligned
        # dwordx2/x4): the element index must be a multiple of 4 / element bytes
        step = min(piece_bytes, 4) // nbytes if nbytes < 4 else 1
        if step <= 1:
            return True
        if np.any(tables[inner][:, s] % step):
            return False
        _, uniform, const = address(s)
        lane_strides = [strides[i] for i in range(inner) if np.any(tables[i] != tables[i][0])]
        return (const % (step * nbytes) == 0 and prover.divisible(uniform, step * nbytes)
                and all(prover.divisible(st, step) for st in lane_strides))

    return _group(layout.slots, nbytes, widths, contiguous, aligned, address, op.loc)


def lds_pieces(op, *, origin, base: int, widths, prover: Prover) -> list[Piece]:
    """Pieces of an LDS access (ir.access formula) in an allocation at byte `base`."""
    tile = tile_of(op)
    layout, nbytes = tile.layout, DTYPE_BYTES[tile.dtype]
    lead = len(op.addr.shape) - len(layout.coords)
    lane, uniform, const, addresses = _lds_formula(op.addr, layout, tuple(origin[lead:]), lead,
                                                   base, nbytes, op.loc)
    uniform = simplify(substitute(uniform, {f"lead{d}": origin[d] for d in range(lead)}))

    @functools.cache
    def address(s: int) -> tuple[Expr, Expr, int]:
        lane_s, _, const_s = split_lane(at_slot(lane, s), op.loc)
        return lane_s, uniform, const + const_s

    def contiguous(s: int, w: int) -> bool:
        return bool((addresses[:, s:s + w] == addresses[:, s:s + 1] + nbytes * np.arange(w))
                    .all())

    def aligned(s: int, piece_bytes: int) -> bool:
        align = min(piece_bytes, 16)
        return not np.any(addresses[:, s] % align) and prover.divisible(uniform, align)

    return _group(layout.slots, nbytes, widths, contiguous, aligned, address, op.loc)


_LDS_FORMULAS: dict = {}


def _lds_formula(addr, layout, trailing, lead: int, base: int, nbytes: int, loc):
    """The byte address of every tile element split into per-lane part, uniform part (in terms
    of placeholders lead0, lead1, ... for the leading view coordinates, which select a buffer
    slot and enter linearly) and constant, with the per-lane table; shared by every access of
    the same view, layout and in-tile origin."""
    key = (addr, layout, trailing, lead, base, nbytes)
    if key not in _LDS_FORMULAS:
        placeholders = tuple(Var(f"lead{d}", 0, addr.shape[d]) for d in range(lead))
        view = lds_view(addr, placeholders + trailing, tile_coords(layout))
        lane, uniform, const = split_lane(simplify(addr.at(view) * nbytes + base), loc)
        table_ = _slot_table(lane, layout) + const
        _LDS_FORMULAS[key] = (lane, uniform, const, table_)
    return _LDS_FORMULAS[key]


def _group(slots: int, nbytes: int, widths, contiguous, aligned, address, loc) -> list[Piece]:
    pieces, s = [], 0
    while s < slots:
        for width in widths:
            w = width // nbytes
            # whole registers; a 64/128-bit piece starts on an even register of the tile
            if w < 1 or s + w > slots or (s * nbytes) % min(width, 4) \
                    or (width > 4 and (s * nbytes // 4) % 2) or not contiguous(s, w) \
                    or not aligned(s, width):
                continue
            lane, uniform, const = address(s)
            pieces.append(Piece(s, w, width, lane, uniform, const))
            s += w
            break
        else:
            raise VectorizeError(
                f"register slots from {s} of this {nbytes}-byte-element tile cannot form an "
                f"aligned vector of {', '.join(map(str, widths))} bytes (contiguous in memory, "
                "whole registers)", loc,
                "give the tile a layout in which each lane holds runs of consecutive elements "
                "filling whole 32-bit registers")
    return pieces


def span_bound(span, sizes: dict, grid, waves: int) -> int:
    """The largest byte offset an access (`isel.AddressSpan`) adds to its resource's base at
    these sizes: interval bounds with the sizes fixed, the workgroup ids within the grid, the
    loop counters within their bounds and loaded scalars within their declared ranges."""
    env = {name: Const(int(value)) for name, value in sizes.items()}
    for axis, extent in enumerate(grid):
        count = int(evaluate(extent, sizes))
        env[f"wg{axis}"] = Var(f"wg{axis}", 0, max(count, 1))
    for name, lo, hi in span.context:
        lo_b = bounds(simplify(substitute(as_expr(lo), env)))[0]
        hi_b = bounds(simplify(substitute(as_expr(hi), env)))[1]
        env[name] = Var(name, lo_b, max(hi_b, lo_b + 1))
    offset = simplify(substitute(span.offset, env))
    return int(bounds(offset)[1])


def clear_caches() -> None:
    """Forget the per-layout formulas kept across compilations (benchmarks time cold runs)."""
    _LDS_FORMULAS.clear()
    table.cache_clear()
    at_slot.cache_clear()
    _split.cache_clear()

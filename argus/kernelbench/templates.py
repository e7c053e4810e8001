"""The DSL kernel templates KernelBench solutions are made of: an elementwise chain over flat
tensors, a row program (reductions along an axis, then elementwise over the rows: softmax,
norms, losses, plain reductions) in a contiguous and a strided form, and an f32 MFMA matmul /
batched matmul with a fused elementwise epilogue.

Each template is generated from an `Expr` (nested tuples, below) and traced with symbolic sizes,
so one kernel serves every size: tails are guarded loads and stores plus masks, never an
assumption that a size divides a tile.
"""

from __future__ import annotations

import functools
import itertools
import math

import attrs

import argus.lang as T
from argus.errors import ArgusError
from argus.ir.expr import And
from argus.kernels.expr import (  # noqa: F401 - the route's expression vocabulary
    BINARY,
    COMPARE,
    MIRROR,
    UNARY,
    Expr,
    bin_,
    const,
    emit,
    leaves,
    un,
    where,
)
from argus.kernels.gemm import swizzle_for
from argus.lang import Tensor
from argus.lang.kernel import KernelDef

#: identity of each reduction (the value masked-off elements take)
IDENTITY = {"sum": 0.0, "max": -3.0e38, "prod": 1.0}
F32_MFMA = "v_mfma_f32_32x32x2_f32"
#: the bf16 MFMA of a `Matmul` with precision "bf16x6" (same 32 x 32 C layout as F32_MFMA)
BF16_MFMA = "v_mfma_f32_32x32x8_bf16"
#: (A term, B term) products of a "bf16x6" matmul, smallest first: an f32 x is split exactly
#: into hi + mid + lo (bf16, 8 significant bits each), and of the nine cross products the six
#: above 2^-16 of hi * hi are summed (those left out are below f32's own rounding, 2^-24)
BF16X6_TERMS = ((1, 1), (0, 2), (2, 0), (0, 1), (1, 0), (0, 0))
PRECISIONS = ("f32", "bf16x6")


class _Widened:
    """A one-byte input (a torch.bool mask, read in place as u8) as the templates see it: its
    loads give f32 tiles (0.0 or 1.0)."""

    def __init__(self, handle):
        self.handle = handle
        self.shape = handle.shape

    def load(self, *args, **kwargs):
        return self.handle.load(*args, **kwargs).to("f32")


def leaf_tensor(bytes_leaves: frozenset, name: str, *shape) -> Tensor:
    """The parameter of leaf `name`: f32, or u8 where the leaf is a one-byte (bool) input."""
    return Tensor("u8" if name in bytes_leaves else "f32", *shape)


def _make(name: str, params: list[tuple[str, Tensor]], body, waves: int) -> KernelDef:
    """A KernelDef whose signature is `params` (tensor names and annotations), running `body`
    on the traced handles in that order (a u8 parameter's handle widened to f32 loads)."""
    args = ", ".join(p for p, _ in params)
    if any(t.dtype == "u8" for _, t in params):
        widened = [t.dtype == "u8" for _, t in params]
        inner = body

        def body(*handles):
            return inner(*(_Widened(h) if w else h for h, w in zip(handles, widened)))
    namespace: dict = {}
    exec(f"def {name}({args}):\n    return body({args})\n", {"body": body}, namespace)
    fn = namespace[name]
    fn.__annotations__ = dict(params)
    fn.__module__ = __name__
    return KernelDef(fn, waves)


# ------------------------------------------------------------------------- elementwise chain
@attrs.frozen
class Elementwise:
    """out = expr(leaves...) over tensors of one shape, flattened to (N, 1)."""

    expr: Expr
    tile: int = 1024
    waves: int = 4
    bytes: frozenset = frozenset()       # leaves read as one-byte (bool) inputs

    @property
    def inputs(self) -> list[str]:
        return leaves(self.expr, "leaf")

    def kernel(self) -> KernelDef:
        names = self.inputs
        tile, waves, expr = self.tile, self.waves, self.expr

        def body(*handles):
            ins, out = handles[:-1], handles[-1]
            N = out.shape[0]
            T.grid(T.cdiv(N, tile))
            spec = T.copy_layout((tile, 1), waves, 1)
            r0 = T.program_id(0) * tile
            env = {("leaf", n): h.load((r0, 0), spec, guard=True) for n, h in zip(names, ins)}
            out.store((r0, 0), emit(expr, env, {}), guard=True)

        params = [(f"X{i}", leaf_tensor(self.bytes, n, "N", 1)) for i, n in enumerate(names)]
        return _make("elementwise", params + [("Y", Tensor("f32", "N", 1))], body, waves)


# ------------------------------------------------------------------ broadcast elementwise
#: A-indices per workgroup (the grid's third axis stays within its dispatch limit of 65535
#: for A up to 262140; the indices past A are guarded off)
BATCH = 4
#: how a `Broadcast` leaf spans the output's (A, B, C) view: the axes it has (the others it
#: is broadcast along)
SPANS = ("abc", "bc", "ab", "ac", "b", "c")


def broadcast_tile(view: tuple[int, int, int]) -> dict:
    """The route's tile for a `Broadcast` over an (A, B, C) output view (modelled on MI300X,
    docs/how-to/kernelbench.md). Without an A axis and with a C of 1024 or more: 16 rows of B
    when there are that many, so a vector along C is read once per 16 rows, and 16 bytes a
    lane (Level 1 40's layer norm over 16 rows of 4M: its centred square 147 -> 86 us, its
    output 183 -> 172 us). Otherwise 4 rows of 256 at 4 bytes a lane, `BATCH` values of A a
    workgroup: with that A loop the wider tile was slower (Level 1 33's batch norm output,
    64 x 64 x 262144: 2086 -> 2654 us)."""
    a, b, c = view
    if a == 1 and b > 1 and c >= 1024:
        return {"rows": 16 if b >= 16 else 4, "vector": 4, "batch": 1}
    return {"rows": 1 if b == 1 else 4, "batch": 1 if a == 1 else BATCH}


@attrs.frozen
class Broadcast:
    """out = expr(leaves...) over an output viewed as (A, B, C), each leaf spanning some of
    those axes and broadcast along the rest (`kinds`: (leaf name, one of SPANS)): a column
    vector against a matrix (B), a row vector (C), a per-batch row (AC) ... . The tile covers
    (B, C); the grid runs over C, B and A in that order, `BATCH` values of A per workgroup
    (the second and third axes have a dispatch limit of 65535); a vector is loaded once per
    tile and spread along the axes it lacks. `rows` is the tile's extent along B (1 when B is a
    padding axis of extent 1, the place a single value broadcast everywhere takes), `vector`
    the elements along C a lane moves at once (`broadcast_tile` picks both by size)."""

    expr: Expr
    kinds: tuple[tuple[str, str], ...]
    rows: int = 4
    #: A-indices per workgroup (1 when A is a padding axis of extent 1)
    batch: int = BATCH
    waves: int = 4
    bytes: frozenset = frozenset()       # leaves read as one-byte (bool) inputs
    vector: int = 1

    @property
    def inputs(self) -> list[str]:
        return leaves(self.expr, "leaf")

    def kernel(self) -> KernelDef:
        names = self.inputs
        kinds = dict(self.kinds)
        batch = self.batch
        shapes = {"abc": ("A", "B", "C"), "bc": ("B", "C"), "ab": ("A", "B"),
                  "ac": ("A", "C"), "b": ("B",), "c": ("C",)}
        rows, waves, expr = self.rows, self.waves, self.expr
        cols = 1024 * self.vector // rows

        def body(*handles):
            ins, out = handles[:-1], handles[-1]
            A, B, C = out.shape
            T.grid(T.cdiv(C, cols), T.cdiv(B, rows), T.cdiv(A, batch))
            spec = T.copy_layout((rows, cols), waves, self.vector)
            col_spec, row_spec = T.reduced(spec, 1), T.reduced(spec, 0)
            c0, b0 = T.program_id(0) * cols, T.program_id(1) * rows
            if batch == 1:
                one(T.program_id(2), b0, c0, spec, col_spec, row_spec, ins, out)
                return
            for k in T.range(0, batch, name="a"):
                one(T.program_id(2) * batch + k, b0, c0, spec, col_spec, row_spec, ins, out)

        def one(a, b0, c0, spec, col_spec, row_spec, ins, out):
            env = {}
            for n, h in zip(names, ins):
                kind = kinds[n]
                if kind == "abc":
                    tile = h.load((a, b0, c0), spec, axes=(1, 2), guard=True)
                elif kind == "bc":
                    tile = h.load((b0, c0), spec, guard=True)
                elif kind in ("ab", "b"):
                    at = (a, b0) if kind == "ab" else (b0,)
                    tile = T.broadcast(h.load(at, col_spec, axes=(len(at) - 1,), guard=True),
                                       1, spec)
                else:
                    at = (a, c0) if kind == "ac" else (c0,)
                    tile = T.broadcast(h.load(at, row_spec, axes=(len(at) - 1,), guard=True),
                                       0, spec)
                env["leaf", n] = tile
            out.store((a, b0, c0), emit(expr, env, {}), axes=(1, 2), guard=True)

        params = [(f"X{i}", leaf_tensor(self.bytes, n, *shapes[kinds[n]]))
                  for i, n in enumerate(names)]
        return _make("broadcast", params + [("Y", Tensor("f32", "A", "B", "C"))], body, waves)


# ------------------------------------------------------------------------------------ scan
@attrs.frozen
class Scan:
    """out = prefix `fn` ("sum" or "prod") of expr(leaves...) along R of tensors viewed as
    (O, R, I): inclusive or `exclusive`, front to back or `reverse`. Contiguous (I == 1): rows
    across a wave's 64 lanes, tile by tile along R, `T.scan` within a tile plus the carry of
    the tiles before it; strided (I > 1): lanes along I, one step of R at a time."""

    expr: Expr
    fn: str
    reverse: bool = False
    exclusive: bool = False
    strided: bool = False
    waves: int = 4
    bytes: frozenset = frozenset()       # leaves read as one-byte (bool) inputs

    @property
    def inputs(self) -> list[str]:
        return leaves(self.expr, "leaf")

    def kernel(self) -> KernelDef:
        names = self.inputs
        shape = ("O", "R", "I", 1) if self.strided else ("O", "R", 1)
        params = [(f"X{i}", leaf_tensor(self.bytes, n, *shape)) for i, n in enumerate(names)]
        program = self

        def body(*handles):
            trace = program._strided if program.strided else program._contiguous
            trace(dict(zip(names, handles[:-1])), handles[-1])

        # strided: one wave per workgroup (64 columns of I), so a short I spans several
        return _make("scan_strided" if self.strided else "scan",
                     params + [("Y", Tensor("f32", *shape))], body,
                     1 if self.strided else self.waves)

    def _combine(self, a, b):
        return a + b if self.fn == "sum" else a * b

    def _contiguous(self, ins: dict, out):
        O_, R = out.shape[:2]
        rows, waves = 2 * self.waves, self.waves
        identity = IDENTITY[self.fn]
        T.grid(T.cdiv(O_, rows))
        spec = T.rows_layout((rows, 64), waves)          # a row's 64 columns: lanes
        row_spec = T.reduced(spec, 1)
        o0 = T.program_id(0) * rows
        tiles = T.cdiv(R, 64)
        loop = T.range(0, tiles, name="rt", acc=T.full(row_spec, identity))
        for rt in loop:
            r0 = ((tiles - 1) - rt) * 64 if self.reverse else rt * 64
            env = {("leaf", n): h.load((o0, r0, 0), spec, axes=(0, 1), guard=True)
                   for n, h in ins.items()}
            x = T.mask(emit(self.expr, env, {}), lambda i, j, r0=r0: r0 + j < R, identity)
            total = T.reduce(x, self.fn, 1, row_spec)
            scanned = T.scan(x, self.fn, 1, reverse=self.reverse, exclusive=self.exclusive)
            out.store((o0, r0, 0), self._combine(scanned, T.broadcast(loop.acc, 1, spec)),
                      axes=(0, 1), guard=True)
            loop.acc = self._combine(loop.acc, total)

    def _strided(self, ins: dict, out):
        O_, R, I_ = out.shape[:3]
        cols = 64
        identity = IDENTITY[self.fn]
        T.grid(O_, T.cdiv(I_, cols))
        spec = T.copy_layout((1, cols), 1, 1)
        o, i0 = T.program_id(0), T.program_id(1) * cols
        loop = T.range(0, R, name="r", acc=T.full(spec, identity))
        for step in loop:
            r = (R - 1) - step if self.reverse else step
            env = {("leaf", n): h.load((o, r, i0, 0), spec, axes=(1, 2), guard=True)
                   for n, h in ins.items()}
            x = emit(self.expr, env, {})
            total = self._combine(loop.acc, x)
            out.store((o, r, i0, 0), loop.acc if self.exclusive else total, axes=(1, 2),
                      guard=True)
            loop.acc = total


#: template fields that choose how a kernel runs (tile, waves, engine), never what it
#: computes: a scaled plan may take the published plan's values of these
#: (`harness.pinned`); the fields `argus tune kernelbench:` searches (`tune.KNOBS`) are some
CHOICES = frozenset({"waves", "rows", "cols", "vector", "online", "tile", "tiles", "engine",
                     "block_k", "reps", "split", "precision", "r_waves"})


# ------------------------------------------------------------------------------ row program
#: contiguous rows up to this long, many of them, are read 16 bytes a lane (`row_tile`)
SHORT_ROW = 256
#: a contiguous row at least this long gets a workgroup of its own (`row_tile`)
LONG_ROW = 4096


def row_tile(strided: bool, r: int, o: int = 0, i: int = 0) -> dict:
    """The route's tile for a row program over rows of length `r` (modelled on MI300X, one sum,
    `tests/test_perf_model.py` and docs/how-to/kernelbench.md): a long contiguous row is
    read by a whole workgroup, 16 bytes a lane, 2048 columns a step, with softmax's max and
    sum in one pass (`online`): a 128 x 475200 sum went from 3835 to 157 us, 4096 x 393216
    from 3337 to 1558 (two rows per wave, 4 bytes a lane, kept too few loads in flight and
    128 rows on 16 workgroups), 1024 columns a step below 2 * LONG_ROW (Level 1 95's cross
    entropy over 32768 rows of 4096: 399 -> 220 us; two steps of 2048 left a workgroup
    waiting on its loads); many short rows of whole 16-byte vectors are read 16 bytes a
    lane, a row per power-of-two group of lanes (Level 2 3's layer norm over 4194304 rows of
    64: 1074 -> 596 us, 2048 elements a workgroup; 1024 gave 630); other short ones stay two
    rows a wave (a row of 30 would leave most of a wide tile idle); a strided one reads 16
    steps of R at once (2410 -> 2003 us at 128 x 4096 x 4095, HBM-bound). A strided one over
    (O, R, I) with too few columns for one wave per 64 of them to fill the CUs and rows of
    at least LONG_ROW / 4 takes 16 columns a workgroup and 16 waves along R, 16 rows each (a
    batch norm's statistics after a matmul, R = 16384 over I = 4096 on 64 workgroups: 2732
    -> 193 us)."""
    if strided and o * -(-i // 64) < _cus() and r >= LONG_ROW // 4:
        return {"rows": 256, "cols": 16, "r_waves": 16}
    if strided:
        return {"rows": 16}
    if r >= LONG_ROW:
        return {"rows": 1, "cols": 1024 if r < 2 * LONG_ROW else 2048, "vector": 4,
                "online": True}
    if 4 <= r <= SHORT_ROW and r % 4 == 0:
        # many short rows whose length is whole 16-byte vectors: a row (its length rounded
        # up to a power of two) per group of lanes, 16 bytes a lane, two loads each in
        # flight, while the tiles still give every CU two workgroups
        cols = 1 << (r - 1).bit_length()
        rows = min(256, 2048 // cols)
        if o >= 2 * rows * _cus():
            return {"rows": rows, "cols": cols, "vector": 4}
    return {}


@attrs.frozen
class RowProgram:
    """Reductions along R of a tensor viewed as (O, R, I), then an output expression.

    `stats[i] = (fn, expr)` is reduced ("sum", "prod" or "max") along R, pass i (its
    expression may use earlier stats). `out` is the output expression: over the full (O, R, I)
    space when `full_output`, else over the stats only (an (O, I) result). Leaves are full tensors
    ("leaf"), vectors along R ("vec") and tensors of one value per row ("per_row", (O, I) like
    the result: a staged norm's mean under its variance, read where it is instead of spread
    over the whole tensor first). `strided`: I > 1, lanes run along I and the reduction
    stays in each thread; otherwise (I == 1) lanes run along R and the reduction crosses lanes.
    """

    stats: tuple[tuple[str, Expr], ...]
    out: Expr
    full_output: bool
    strided: bool
    waves: int = 4
    bytes: frozenset = frozenset()       # leaves read as one-byte (bool) inputs
    #: the tile each loop step reads, (rows, cols) of (O, R) when contiguous (rows = a
    #: workgroup's rows; None: two per wave), of (R, I) when strided (None: 4 x 64 per wave),
    #: and the elements a lane loads at once
    rows: int | None = None
    cols: int | None = None
    vector: int = 1
    #: a max followed by a sum of exp2((e - max) * c) (softmax's) in one pass: a running max
    #: and a sum rescaled as the max grows (one read of a row fewer, two exp2 per element)
    online: bool = False
    #: strided only: waves of a workgroup side by side along R, each reading its own rows of
    #: the tile, the reduction crossing waves through LDS (for few columns over long rows,
    #: where one wave per 64 columns leaves most CUs idle)
    r_waves: int = 1

    def _named(self, kind: str) -> list[str]:
        """The names of the `kind` leaves of the stats and the output, in first-use order."""
        found: list[str] = []
        for e in [s for _, s in self.stats] + [self.out]:
            found += [n for n in leaves(e, kind) if n not in found]
        return found

    @property
    def inputs(self) -> list[str]:
        return self._named("leaf")

    @property
    def vectors(self) -> list[str]:
        return self._named("vec")

    @property
    def per_row(self) -> list[str]:
        return self._named("per_row")

    @property
    def indices(self) -> list[str]:
        """Per-row int64 class indices, each an (O, 2) view of 32-bit words (little-endian:
        the low word first, exact for an index below 2**31)."""
        return self._named("index")

    def kernel(self) -> KernelDef:
        names, vecs, indices = self.inputs, self.vectors, self.indices
        if indices and self.strided:
            raise ValueError("a per-row class index in a strided row program")
        if self.strided:
            full = Tensor("f32", "O", "R", "I", 1)
            reduced = Tensor("f32", "O", "I", 1)
        else:
            full = Tensor("f32", "O", "R", 1)
            reduced = Tensor("f32", "O", 1)
        per_row = self.per_row
        params = ([(f"X{i}", leaf_tensor(self.bytes, n, *full.shape))
                   for i, n in enumerate(names)]
                  + [(f"V{i}", Tensor("f32", "R")) for i in range(len(vecs))]
                  + [(f"P{i}", Tensor("f32", *reduced.shape)) for i in range(len(per_row))]
                  + [(f"I{i}", Tensor("i32", "O", 2)) for i in range(len(indices))]
                  + [("Y", full if self.full_output else reduced)])
        program = self

        def body(*handles):
            at = itertools.accumulate((len(names), len(vecs), len(per_row)))
            n_end, v_end, p_end = at
            ins = dict(zip(names, handles[:n_end]))
            vec = dict(zip(vecs, handles[n_end:v_end]))
            rows = dict(zip(per_row, handles[v_end:p_end]))
            rest = handles[p_end:-1]
            program._trace(ins, vec, handles[-1], dict(zip(indices, rest)), rows)

        return _make("row_strided" if self.strided else "row_contiguous", params, body,
                     self._waves)

    @property
    def _waves(self) -> int:
        return self.r_waves if self.strided else self.waves

    def _trace(self, ins: dict, vec: dict, out, index: dict | None = None,
               per_row: dict | None = None):
        # strided: 64 columns of I per workgroup, so a short I still spans two workgroups,
        # and `r_waves` waves along R
        waves = self._waves
        first = next(iter(ins.values()))
        if self.strided:
            O_, R, I_ = first.shape[:3]
            tr, ti = self.rows or 4 * waves, self.cols or 64
            T.grid(O_, T.cdiv(I_, ti))
            # rows in slots: the reduction stays in each thread
            spec = T.copy_layout((tr, ti), waves, self.vector)
            axis = 0
            o, i0 = T.program_id(0), T.program_id(1) * ti

            def origin(r0):
                return (o, r0, i0, 0)
            axes, store_axes = (1, 2), (1,)
            out_origin = (o, i0, 0)
        else:
            O_, R = first.shape[:2]
            for h in (index or {}).values():
                T.assume(h.shape[0].eq(O_))
            to, tr = self.rows or 2 * waves, self.cols or 64
            T.grid(T.cdiv(O_, to))
            spec = T.copy_layout((to, tr), waves, self.vector)
            axis = 1
            o0 = T.program_id(0) * to

            def origin(r0):
                return (o0, r0, 0)
            axes, store_axes = (0, 1), (0,)
            out_origin = (o0, 0)
        row_spec = T.reduced(spec, axis)
        vec_spec = T.reduced(spec, 1 - axis)

        def keep(r0):
            return lambda *c: r0 + c[axis] < R

        positions = any("r" in leaves(e, "idx") for e in [x for _, x in self.stats] + [self.out])
        # a per-row class index: loaded once, as f32 (exact below 2**24), along the row
        classes = {("index", n): T.broadcast(h.load((o0, 0), row_spec, axes=(0,), guard=True)
                                             .to("f32"), axis, spec)
                   for n, h in (index or {}).items()}
        # a value per row, where the result goes: loaded once, spread along R
        classes.update({("per_row", n): T.broadcast(h.load(out_origin, row_spec,
                                                           axes=store_axes, guard=True),
                                                    axis, spec)
                        for n, h in (per_row or {}).items()})

        def tiles(r0, *exprs) -> dict:
            """The leaves `exprs` read at r0 (a pass loads only what it uses)."""
            used = {(kind, n) for e in exprs for kind in ("leaf", "vec", "idx")
                    for n in leaves(e, kind)}
            env = {("leaf", n): h.load(origin(r0), spec, axes=axes, guard=True)
                   for n, h in ins.items() if ("leaf", n) in used}
            env.update(classes)
            if positions and ("idx", "r") in used:
                env["idx", "r"] = T.iota(spec, axis, start=r0)
            for n, h in vec.items():
                if ("vec", n) in used:
                    env["vec", n] = T.broadcast(h.load((r0,), vec_spec, guard=True),
                                                1 - axis, spec)
            return env

        stats: dict = {}

        def at(r0, *exprs) -> dict:
            """The leaves of the tile at r0 `exprs` read, and the stats so far spread along
            the row."""
            return {**tiles(r0, *exprs), **{("stat", k): T.broadcast(s, axis, spec)
                                            for k, s in stats.items()}}

        def value(e, r0, low):
            """`e` over the tile at r0, `low` past the row's end."""
            return T.mask(emit(e, at(r0, e), {}), keep(r0), low)

        for index, (fn, e) in enumerate(self.stats):
            if index in stats:
                continue                         # done in an earlier pass
            if index not in self._read:
                continue                         # nothing reads it
            scale = self._online_scale(index)
            if scale is not None:
                stats[index], stats[index + 1] = self._online(e, scale, value, keep, spec,
                                                              row_spec, axis, tr, R, index)
                continue
            if fn == "argmax":
                stats[index] = self._argmax(e, value, spec, row_spec, axis, tr, R, index)
                continue
            if fn == "max" and not any(leaves(e, kind) for kind in ("leaf", "vec", "idx")):
                # the same value all along the row (a loss's "is this row kept"): one tile
                stats[index] = T.reduce(value(e, 0, IDENTITY[fn]), fn, axis, row_spec)
                continue
            group = self._pass_of(index)
            loop = T.range(0, T.cdiv(R, tr), name=f"r{index}_",
                           acc={k: T.full(spec, IDENTITY[self.stats[k][0]]) for k in group})
            for rt in loop:
                r0 = rt * tr
                acc = dict(loop.acc)
                env = at(r0, *(self.stats[k][1] for k in group))
                for k in group:
                    kind = self.stats[k][0]
                    x = T.mask(emit(self.stats[k][1], env, {}), keep(r0), IDENTITY[kind])
                    acc[k] = (acc[k] + x if kind == "sum" else acc[k] * x if kind == "prod"
                              else T.maximum(acc[k], x))
                loop.acc = acc
            for k in group:
                stats[k] = T.reduce(dict(loop.acc)[k], self.stats[k][0], axis, row_spec)
        if not self.full_output:
            env = {("stat", k): s for k, s in stats.items()}
            out.store(out_origin, emit(self.out, env, {}), axes=store_axes, guard=True)
            return
        loop = T.range(0, T.cdiv(R, tr), name="w")
        for rt in loop:
            r0 = rt * tr
            out.store(origin(r0), emit(self.out, at(r0, self.out), {}), axes=axes, guard=True)

    @functools.cached_property
    def _read(self) -> frozenset:
        """The stats the output reads, directly or through other stats (a row's stats the
        output skips, such as a loss's max when only its count of kept rows is stored, are
        not computed)."""
        need = set(leaves(self.out, "stat"))
        while True:
            more = {j for k in need for j in leaves(self.stats[k][1], "stat")} - need
            if not more:
                return frozenset(need)
            need |= more

    def _pass_of(self, index: int) -> list[int]:
        """The plain reductions (sum, prod, max) from `index` on that share its pass over the
        row: read, none reading another of the pass, none of an online pair or an argmax (a
        loss's max, count and picked logit; a norm's sum and sum of squares)."""
        group = [index]
        for k in range(index + 1, len(self.stats)):
            fn, e = self.stats[k]
            if k not in self._read:
                continue
            if fn not in ("sum", "prod", "max") or self._online_scale(k) is not None \
                    or (k > 0 and self._online_scale(k - 1) is not None) \
                    or any(j >= index for j in leaves(e, "stat")):
                break
            group.append(k)
        return group

    def _online_scale(self, index: int) -> float | None:
        """c when `online` and stats index, index + 1 are ("max", e) and ("sum",
        exp2((e - stat index) * c)) with c > 0 (softmax's, log-softmax's), else None."""
        if not self.online or index + 1 >= len(self.stats):
            return None
        (f0, e0), (f1, e1) = self.stats[index], self.stats[index + 1]
        if (f0, f1) != ("max", "sum") or e1[:2] != ("un", "exp2"):
            return None
        inner = e1[2]
        if (inner[:2] == ("bin", "mul") and inner[3][0] == "const" and inner[3][1] > 0
                and inner[2] == ("bin", "sub", e0, ("stat", index))):
            return inner[3][1]
        return None

    def _online(self, e, scale, value, keep, spec, row_spec, axis, tr, R, index):
        """(max of e, sum of exp2((e - max) * scale)) along R in one pass: each element of the
        tile keeps the largest value it has seen and its sum rescaled to that value; then the
        row's max, and the elements' sums rescaled to it."""
        def exp2(a, b):      # exp2((a - b) * scale), through the same emitter as the route's
            return emit(("un", "exp2", ("bin", "mul", ("bin", "sub", ("leaf", "a"),
                                                       ("leaf", "b")), const(scale))),
                        {("leaf", "a"): a, ("leaf", "b"): b}, {})

        loop = _paired(spec, R, tr, index)
        for r0, x in _tiles_of(loop, e, value, tr):
            most, total = loop.acc
            grown = T.maximum(most, x)
            loop.acc = (grown, total * exp2(most, grown) + T.mask(exp2(x, grown), keep(r0), 0.0))
        most, total = loop.acc
        top = T.reduce(most, "max", axis, row_spec)
        return top, T.reduce(total * exp2(most, T.broadcast(top, axis, spec)), "sum", axis,
                             row_spec)

    def _argmax(self, e, value, spec, row_spec, axis, tr, R, index):
        """The lowest index along R of the largest `e` (f32, exact below 2**24): each element
        of the tile keeps the best value it has seen and where (a later tile wins only when
        strictly larger, so ties keep the lower index); then the best value of the row, and
        the lowest index holding it."""
        loop = _paired(spec, R, tr, index)
        for r0, x in _tiles_of(loop, e, value, tr):
            best, where_ = loop.acc
            better = x > best
            loop.acc = (T.where(better, x, best),
                        T.where(better, T.iota(spec, axis, start=r0), where_))
        best, where_ = loop.acc
        top = T.broadcast(T.reduce(best, "max", axis, row_spec), axis, spec)
        return T.reduce(T.where(best.eq(top), where_, 3.0e38), "min", axis, row_spec)


def _paired(spec, R, tr: int, index: int):
    """A loop over a row's tiles carrying (a running max, a second value from 0)."""
    return T.range(0, T.cdiv(R, tr), name=f"r{index}_",
                   acc=(T.full(spec, IDENTITY["max"]), T.full(spec, 0.0)))


def _tiles_of(loop, e, value, tr: int):
    """(r0, `e` over the tile at r0, the max's identity past the row) for each trip of `loop`,
    the caller's body running inside the trip."""
    for rt in loop:
        r0 = rt * tr
        yield r0, value(e, r0, IDENTITY["max"])


# ---------------------------------------------------------------------------------- matmul
@attrs.frozen
class Matmul:
    """C[b] = epilogue(A[b] @ B[b]) in f32 on v_mfma_f32_32x32x2_f32, operands read straight
    from global memory (guarded: any M, N, K). `a_order`: "mk" (A is (M, K)) or "km";
    `b_order`: "kn" or "nk" (nn.Linear's weight). A batch of 1 is broadcast (`*_batched`).
    The epilogue's leaves are ("acc",), constants, ("vec", name) vectors along N and
    ("idx", 0 or 1), the row and column of C (triangular masks)."""

    epilogue: Expr = ("acc",)
    a_order: str = "mk"
    b_order: str = "kn"
    a_batched: bool = False
    b_batched: bool = False
    block_k: int = 8
    #: 32x32 fragments per wave along M and N (a workgroup's block is 64 * reps square)
    reps: int = 2
    #: A and B staged through LDS (two slots, one K tile ahead) by coalesced copies, each
    #: element read from global memory once per workgroup; else fragments straight from
    #: global memory
    staged: bool = True
    #: K split this many ways (a power of two) over grid axis 2: each workgroup writes its
    #: partial product to a workspace P (split x batch rows), and `reduce_kernel` sums the
    #: parts and applies the epilogue; chosen by `matmul_split` when the output has too few
    #: tiles to fill the machine (a 256 x 256 output over K = 524288: 4 workgroups)
    split: int = 1
    #: "f32": v_mfma_f32_32x32x2_f32. "bf16x6" (staged only): each f32 operand element is
    #: split exactly into three bf16 terms as it is staged, and six bf16 MFMAs (8x the f32
    #: MFMA's rate each) sum the cross products above f32's rounding: 0.75 of the f32 MFMA
    #: cycles, as accurate as f32 (NVIDIA's cuBLAS emulates f32 the same way with nine
    #: products, "BF16x9"). An inf or NaN operand gives NaN, where f32 may give inf.
    precision: str = "f32"

    def __attrs_post_init__(self):
        if self.precision not in PRECISIONS:
            raise ValueError(f"Matmul precision {self.precision!r} is not one of {PRECISIONS}")
        if self.precision != "f32" and not self.staged:
            raise ValueError(f"Matmul precision {self.precision!r} splits operands as they "
                             "are staged through LDS: it needs staged=True")

    @property
    def instr(self) -> str:
        return F32_MFMA if self.precision == "f32" else BF16_MFMA

    @property
    def vectors(self) -> list[str]:
        return leaves(self.epilogue, "vec")

    def kernel(self) -> KernelDef:
        """The matmul; with `split` > 1 its partial products (C is then the workspace P, the
        epilogue `reduce_kernel`'s)."""
        a_shape = ("BA", "M", "K", 1) if self.a_order == "mk" else ("BA", "K", "M", 1)
        b_shape = ("BB", "K", "N", 1) if self.b_order == "kn" else ("BB", "N", "K", 1)
        vecs = self.vectors if self.split == 1 else []
        params = ([("A", Tensor("f32", *a_shape)), ("B", Tensor("f32", *b_shape))]
                  + [(f"V{i}", Tensor("f32", "N")) for i in range(len(vecs))]
                  + [("C", Tensor("f32", "BC", "M", "N", 1))])
        program = self

        def body(A, B, *rest):
            program._trace(A, B, dict(zip(vecs, rest[:-1])), rest[-1])

        return _make("matmul" if self.split == 1 else "matmul_split", params, body, 4)

    def reduce_kernel(self) -> KernelDef:
        """C[b] = epilogue(sum over the `split` parts P[b * split + part]) for a split matmul,
        in the matmul's own C layout and workgroup tiles (so the epilogue's row and column
        indices and vectors are traced as in the unsplit kernel)."""
        vecs = self.vectors
        params = ([("P", Tensor("f32", "BP", "M", "N", 1))]
                  + [(f"V{i}", Tensor("f32", "N")) for i in range(len(vecs))]
                  + [("C", Tensor("f32", "BC", "M", "N", 1))])
        program = self

        def body(P, *rest):
            program._sum_parts(P, dict(zip(vecs, rest[:-1])), rest[-1])

        return _make("matmul_parts", params, body, 4)

    def _sum_parts(self, P, vec: dict, C):
        BC, M, N = C.shape[:3]
        split = self.split
        T.assume(P.shape[0].eq(BC * split))
        # PART_TILE rows of 256 columns a workgroup, 16 bytes a lane, `unroll` parts' loads
        # in flight per trip (the parts kernel is a stream: 4 workgroups of 128 x 128 left a
        # 256 x 256 output's 128 parts at 370 us, modelled)
        rows, cols = PART_TILE
        spec = T.copy_layout((rows, cols), 4, 4)
        T.grid(T.cdiv(M, rows), T.cdiv(N, cols), BC)
        m0, n0, b = T.program_id(0) * rows, T.program_id(1) * cols, T.program_id(2)
        unroll = min(split, 8)
        loop = T.range(0, split // unroll, name="part", acc=T.zeros(spec))
        for trip in loop:
            loads = [P.load((b * split + trip * unroll + u, m0, n0, 0), spec, axes=(1, 2),
                            guard=True) for u in range(unroll)]
            total = loop.acc
            for part in loads:
                total = total + part
            loop.acc = total
        self._store_tile(C, vec, loop.acc, m0, n0, b, spec, self.epilogue)

    def _trace(self, A, B, vec: dict, C):
        rows, M, N = C.shape[:3]            # rows: the batch, times the parts when split
        split = self.split
        K = A.shape[2] if self.a_order == "mk" else A.shape[1]
        block = self.reps * 64
        T.grid(T.cdiv(M, block), T.cdiv(N, block), rows)
        if split > 1:
            T.assume((rows % split).eq(0))
        BC = rows // split if split > 1 else rows
        T.assume(A.shape[0].eq(BC) if self.a_batched else A.shape[0].eq(1))
        T.assume(B.shape[0].eq(BC) if self.b_batched else B.shape[0].eq(1))
        a_spec = T.mfma_layout(self.instr, "a", (2, 2))
        b_spec = T.mfma_layout(self.instr, "b", (2, 2))
        c_spec = T.mfma_layout(self.instr, "c", (2, 2))
        reps, block = self.reps, self.reps * c_spec.shape[0]
        m0, n0, row = T.program_id(0) * block, T.program_id(1) * block, T.program_id(2)
        b = row // split if split > 1 else row
        # this workgroup's part of K: K tiles part, part + split, ... (`tiles_k` of them; tiles
        # past K read zeros). Interleaved, a tile's K index is affine in the trip and the part
        # with constant factors (contiguous parts multiply the part by the symbolic part
        # length, which left the LDS race queries to time out)
        bk = self.block_k
        tiles_k = T.cdiv(K, bk * split)
        part = row % split if split > 1 else 0
        ba = b if self.a_batched else 0
        bb = b if self.b_batched else 0
        step = a_spec.shape[1]
        T.tag(A, (lambda bt, m, k, z: {"row": m, "k": k}) if self.a_order == "mk"
              else (lambda bt, k, m, z: {"row": m, "k": k}))
        T.tag(B, (lambda bt, k, n, z: {"col": n, "k": k}) if self.b_order == "kn"
              else (lambda bt, n, k, z: {"col": n, "k": k}))
        T.tag(C, lambda bt, m, n, z: {"row": m, "col": n})

        def load_a(r, k0):
            m = m0 + r * a_spec.shape[0]
            if self.a_order == "mk":
                return A.load((ba, m, k0, 0), a_spec, axes=(1, 2), guard=True)
            return A.load((ba, k0, m, 0), a_spec, axes=(2, 1), guard=True)

        def load_b(s, k0):
            n = n0 + s * b_spec.shape[0]
            if self.b_order == "kn":
                return B.load((bb, k0, n, 0), b_spec, axes=(2, 1), guard=True)
            return B.load((bb, n, k0, 0), b_spec, axes=(1, 2), guard=True)

        tiles = [(r, s) for r in range(reps) for s in range(reps)]
        acc = {(r, s): T.tag(T.zeros(c_spec), lambda i, j, r=r, s=s: {
            "row": m0 + r * c_spec.shape[0] + i, "col": n0 + s * c_spec.shape[1] + j})
            for r, s in tiles}
        if self.staged:
            acc = self._staged_k_loop(A, B, tiles_k, part, m0, n0, ba, bb, block, a_spec,
                                      b_spec, acc)
            self._epilogue(C, vec, acc, m0, n0, row, c_spec, self._own_epilogue)
            return
        loop = T.range(0, tiles_k, name="kt", acc=acc)
        for kt in loop:
            acc = dict(loop.acc)
            for ks in range(self.block_k // step):
                k0 = (kt * split + part) * self.block_k + ks * step
                a = [load_a(r, k0) for r in range(reps)]
                b_ = [load_b(s, k0) for s in range(reps)]
                for r, s in tiles:
                    acc[r, s] = T.mfma(F32_MFMA, a[r], b_[s], acc[r, s])
                    T.tag_assert(lambda A_, B_, C_: And(A_.k.eq(B_.k), A_.row.eq(C_.row),
                                                        B_.col.eq(C_.col)),
                                 "A and B meet at one k, on C's row and column")
            loop.acc = acc
        self._epilogue(C, vec, loop.acc, m0, n0, row, c_spec, self._own_epilogue)

    def _staged_k_loop(self, A, B, tiles_k, part, m0, n0, ba, bb, block, a_spec, b_spec,
                       acc):
        """The K loop through LDS: each K tile of A (block x block_k) and B is copied by all
        four waves with consecutive lanes on consecutive addresses (along K for an operand
        stored K-contiguous, along M or N otherwise), stored as (row, k) XOR-swizzled (the
        fragment reads, 32 rows at one k, hit distinct banks), and read back as MFMA
        fragments. Two slots: iteration kt computes from slot kt % 2 while it stores tile
        kt + 1 (a guarded load: zeros past K) into the other, then one barrier."""
        bk, reps = self.block_k, self.reps
        step = a_spec.shape[1]
        if bk % step:
            raise ValueError(f"block_k {bk} is no whole number of {self.instr}'s K ({step})")
        split3 = self.precision == "bf16x6"
        # rows of bk elements; the row's bits above the 32 banks' width select an XOR of its
        # element index, so a fragment read (32 consecutive rows at one k) hits 32 banks.
        # bf16x6 keeps three bf16 planes (hi, mid, lo) of each operand instead of the f32 one
        if split3:
            sw = swizzle_for(bk, 2)
            a_smem = [T.lds((2, block, bk), "bf16", swizzle=sw) for _ in range(3)]
            b_smem = [T.lds((2, block, bk), "bf16", swizzle=sw) for _ in range(3)]
        else:
            sw = _swizzle_bits(bk)
            a_smem = [T.lds((2, block, bk), "f32", swizzle=sw)]
            b_smem = [T.lds((2, block, bk), "f32", swizzle=sw)]
        along_k = T.copy_layout((block, bk), 4, 1)
        across = _rows_first((block, bk), 4)

        def load_a(kt):
            k0 = (kt * self.split + part) * bk
            if self.a_order == "mk":
                return A.load((ba, m0, k0, 0), along_k, axes=(1, 2), guard=True)
            return A.load((ba, k0, m0, 0), across, axes=(2, 1), guard=True)

        def load_b(kt):
            k0 = (kt * self.split + part) * bk
            if self.b_order == "nk":
                return B.load((bb, n0, k0, 0), along_k, axes=(1, 2), guard=True)
            return B.load((bb, k0, n0, 0), across, axes=(2, 1), guard=True)

        def stage(planes, slot, tile):
            for plane, term in zip(planes, _bf16_terms(tile) if split3 else [tile]):
                plane.store((slot, 0, 0), term)

        stage(a_smem, 0, load_a(0))
        stage(b_smem, 0, load_b(0))
        T.barrier()
        products = BF16X6_TERMS if split3 else ((0, 0),)
        loop = T.range(0, tiles_k, name="kt", acc=acc)
        for kt in loop:
            a_next, b_next = load_a(kt + 1), load_b(kt + 1)
            acc = dict(loop.acc)
            slot = kt % 2
            for ks in range(bk // step):
                k0 = ks * step
                a = [[p.load((slot, r * a_spec.shape[0], k0), a_spec) for p in a_smem]
                     for r in range(reps)]
                b_ = [[p.load((slot, s * b_spec.shape[0], k0), b_spec) for p in b_smem]
                      for s in range(reps)]
                for r in range(reps):
                    for s in range(reps):
                        for i, j in products:
                            acc[r, s] = T.mfma(self.instr, a[r][i], b_[s][j], acc[r, s])
                            T.tag_assert(lambda A_, B_, C_: And(A_.k.eq(B_.k),
                                                                A_.row.eq(C_.row),
                                                                B_.col.eq(C_.col)),
                                         "A and B meet at one k, on C's row and column")
            stage(a_smem, (kt + 1) % 2, a_next)
            stage(b_smem, (kt + 1) % 2, b_next)
            T.barrier()
            loop.acc = acc
        return dict(loop.acc)

    @property
    def _own_epilogue(self) -> Expr:
        """What the matmul kernel applies itself: all of it, or nothing when split (the parts'
        sum takes it)."""
        return self.epilogue if self.split == 1 else ("acc",)

    def _epilogue(self, C, vec, acc, m0, n0, b, c_spec, expr: Expr):
        for r, s in [(r, s) for r in range(self.reps) for s in range(self.reps)]:
            self._store_tile(C, vec, acc[r, s], m0 + r * c_spec.shape[0],
                             n0 + s * c_spec.shape[1], b, c_spec, expr)

    @staticmethod
    def _store_tile(C, vec, tile, m, n, b, spec, expr: Expr):
        """C's tile at (m, n) of batch b: `expr` of the accumulator `tile`, its row and column
        indices and the vectors along N."""
        vec_spec = T.reduced(spec, 0)
        env = {("acc",): tile, ("idx", 0): T.iota(spec, 0, start=m),
               ("idx", 1): T.iota(spec, 1, start=n)}
        for name, h in vec.items():
            env["vec", name] = T.broadcast(h.load((n,), vec_spec, guard=True), 0, spec)
        C.store((b, m, n, 0), emit(expr, env, {}), axes=(1, 2), guard=True)


#: the most ways `matmul_split` splits K
MAX_SPLIT = 256
#: (rows, columns) of C a workgroup of a split matmul's parts kernel sums
PART_TILE = (4, 256)


def matmul_split(batch: int, m: int, n: int, k: int, reps: int = 2,
                 block_k: int = 8) -> int:
    """The route's K split for a matmul of `batch` x (m x k) @ (k x n): the fewest ways (a
    power of two) that give the machine's CUs a workgroup each, as long as every part keeps
    at least 32 K tiles of `block_k` and the parts' round trip through the workspace
    (written and read once, 8 x split x m x n bytes) stays within a quarter of the
    operands' bytes. Level 1 6
    (256 x 256 over K = 524288) ran 4 workgroups on 304 CUs: 51873 us modelled, 123x its
    roofline."""
    cus = _cus()
    block = reps * 64
    tiles = batch * -(-m // block) * -(-n // block)
    split = 1
    while (tiles * split < cus and split < MAX_SPLIT and k // (2 * split) >= 32 * block_k
           and 8 * 2 * split * batch * m * n <= (m + n) * k * batch):
        split *= 2
    return split


def _cus() -> int:
    from argus.isa_cdna3.perf.params import profile

    return int(profile("mi300x").cus.value)


def peaks() -> dict[str, float]:
    """MI300X peaks from the machine tables: f32 MFMA and VALU FLOP/s, HBM bytes/s (the
    roofline's machine, and the route's when it weighs MFMA work against bytes)."""
    from argus.isa_cdna3 import isa, opcodes
    from argus.isa_cdna3.mfma import mfma
    from argus.isa_cdna3.perf.params import profile

    gpu = profile("mi300x")
    hz = gpu.clock_ghz.value * 1e9
    simds = gpu.cus.value * isa.SIMDS_PER_CU
    info = mfma(F32_MFMA)
    fma = opcodes.row("v_fma_f32")
    return {"mfma_f32": simds * info.flops / info.cycles * hz,
            "valu_f32": simds * isa.WAVE_SIZE * 2 / fma.issue_cycles * hz,
            "hbm": gpu.hbm_bytes_per_s.value}


def matmul_precision(batch: int, m: int, n: int, k: int, reps: int = 2, split: int = 1) -> str:
    """The route's precision for a matmul: "bf16x6" when its f32 MFMA work outlasts its
    compulsory bytes at HBM bandwidth and its workgroups fill the CUs, so that the launch is
    MFMA-bound under the power cap and 0.75 of the MFMA cycles is 0.75 of the time (modelled:
    1024 x 8192 x 8192, 1891.8 -> 1491.6 us); else "f32", whose operands need no split
    (16384 x 16384 x 32, memory-bound: 296.0 us, 341.4 with bf16x6; 32 workgroups of
    128 x 4096 x 4096: 413.5 us, 446.8)."""
    rates = peaks()
    mfma_s = 2.0 * batch * m * n * k / rates["mfma_f32"]
    hbm_s = 4.0 * batch * (m * k + k * n + m * n) / rates["hbm"]
    block = reps * 64
    tiles = batch * -(-m // block) * -(-n // block) * split
    return "bf16x6" if mfma_s > hbm_s and tiles >= _cus() else "f32"


def _bf16_terms(x) -> list:
    """[hi, mid, lo]: bf16 tiles with hi + mid + lo == x exactly for an f32 tile x (barring
    underflow): each term truncates what the ones before left, and truncation keeps a
    remainder's low bits, so 3 x 8 significant bits hold all 24 of x's."""
    hi = x.to("bf16", rounding="rtz")
    rest = x - hi.to("f32")
    mid = rest.to("bf16", rounding="rtz")
    lo = (rest - mid.to("f32")).to("bf16", rounding="rtz")
    return [hi, mid, lo]


def _swizzle_bits(row: int) -> tuple[int, int, int]:
    """(bits, base, shift) of the XOR swizzle for f32 rows of `row` (a power of two below
    32) elements: the 32 // row rows sharing a bank line differ in their low row bits; the row
    bits above those (log2(row) of them) are XORed into the element index."""
    log_row = row.bit_length() - 1
    return (log_row, 0, 5)


def _rows_first(shape: tuple[int, int], waves: int) -> T.TileSpec:
    """A (rows, cols) tile spread over `waves` waves with consecutive threads on consecutive
    rows (the copy of an operand whose rows are its contiguous axis)."""
    rows, cols = shape
    threads = waves * T.LANES
    slots = rows * cols // threads
    wave, lane, slot = T.thread_vars(waves, slots)
    element = slot * threads + wave * T.LANES + lane
    return T.TileSpec(shape, T.ThreadLayout(waves, slots, (element % rows, element // rows)))


# ------------------------------------------------------------------ convolution and pooling
def _bound(base: KernelDef, name: str, params: dict) -> KernelDef:
    """`base` (a family kernel with compile-time parameters) with `params` as its defaults,
    so `.trace()`, the proof and the compiled code are of that one variant."""
    import inspect

    fn = base.fn

    def bound(*tensors, **chosen):
        return fn(*tensors, **chosen)

    bound.__name__ = name
    bound.__doc__ = fn.__doc__
    bound.__annotations__ = dict(fn.__annotations__)
    signature = inspect.signature(fn)
    bound.__signature__ = signature.replace(parameters=[
        p.replace(default=params[p.name]) if p.name in params else p
        for p in signature.parameters.values()])
    return KernelDef(bound, base.waves)


def _view_shape_of(lead, spatial, phases, front, extent, tail) -> tuple[int, ...]:
    """The shape `argus.kernels.conv.phase_view_nd` gives, without making the array."""
    view = []
    for n, s, f, e in zip(spatial, phases, front, extent, strict=True):
        padded = -(-max(f + n, e) // s) * s
        view += [padded // s, s]
    return (*lead, *view, *tail)


@functools.cache
def _conv_variant(dims: int, engine: str, epilogue: tuple, params: tuple) -> KernelDef:
    """One kernel object per variant: templates that differ only in what the kernel leaves
    symbolic (the group count) share it, so the scaled and the published route compare
    equal."""
    from argus.kernels.conv import conv_kernel

    base = conv_kernel(dims, engine, epilogue)
    return _bound(base, base.name, dict(params))



def conv_fitting(dims: int, engine: str, tiles: tuple, epilogue: tuple, **geometry) -> tuple:
    """(engine, tiles) of `conv_fitted`: the kernel's engine and register tiles."""
    return conv_fitted(dims, engine, tuple(tiles), epilogue, **geometry)[:2]


#: the unrolled taps per window pass (`conv_kernel`'s `unrolled`) `conv_fitted` steps down to
#: before it leaves the f32 MFMA engine: fewer taps keep fewer offsets in SGPRs
FITTING_UNROLLED = (3, 1)


@functools.cache
def conv_fitted(dims: int, engine: str, tiles: tuple, epilogue: tuple, **geometry) -> tuple:
    """(engine, tiles, unrolled) of the first of `engine` with `tiles`, then with its tile
    counts halved one at a time (the position tiles first) down to (1, 1), then (1, 1) with
    fewer unrolled taps per window pass (FITTING_UNROLLED), the 16x16 f32 engine then the
    32x32 one at (1, 1), and last "fma" (64 positions by
    FMA_OC channels, then fewer) whose `conv_kernel` fits a wave's registers, found by
    compiling it (unproved; the caller's compilation proves the one chosen). A window pass
    holds every unrolled tap's offsets in SGPRs: a 5x5x5 transposed convolution of stride 2
    (KernelBench Level 2 78) needs 103 of the 102 at UNROLLED_TAPS on the MFMA engine, and
    fell to the FMA engine at one channel, 322213 us modelled, where 3 unrolled taps keep it
    on the MFMA engine. The f32 MFMA engine's stores keep each tile row's
    offset and bound live in SGPRs: a second channel tile with a bias, a residual, or a
    phased transposed output can pass the 102 a wave has; so can the FMA engine's four
    position tiles over a 7-tap row (each tap's tiles at their own offsets). Sizes play no
    part, so every size gets the same kernel."""
    from argus import compile as compile_kernel
    from argus.asm.lower import RegisterBudgetError
    from argus.kernels.conv import FMA_OC, PACKED, UNROLLED_TAPS, conv_kernel

    def halved(t: tuple) -> list[tuple]:
        out = [tuple(t)]
        while out[-1] != (1, 1):
            a, b = out[-1]
            out.append((a // 2, b) if a > 1 else (a, b // 2))
        return out

    # statistics are taken on the MFMA engines only (`conv_kernel`): a depthwise
    # convolution's FMA engine with a "stats" step is not tried at all
    stats = any(_step_name(step) == "stats" for step in epilogue)
    tried = [] if stats and engine == "fma" else \
        [(engine, t, UNROLLED_TAPS) for t in halved(tiles)]
    if engine != "fma":
        tried += [(engine, (1, 1), u) for u in FITTING_UNROLLED]
    if engine == "mfma_f32_16":
        # the 16x16 engine's tiles keep more offsets in SGPRs than the 32x32 one's: a 3x3x3
        # window with a bias, two vectors and two activations needs 104 of the 102 on it
        # at any tiles and taps, and fits on the 32x32 engine (KernelBench Level 2 48: 6.44x
        # on it, 46.9x on the FMA engine it fell to)
        tried += [("mfma_f32", (1, 1), u) for u in (UNROLLED_TAPS, *FITTING_UNROLLED)]
    if engine in PACKED:
        # a packed engine's wide loads hold more registers: then the packed 32x32 one, then
        # the unpacked 32x32 one
        tried += [(e, (1, 1), u) for e in ("mfma_f32_pk", "mfma_f32")
                  for u in (UNROLLED_TAPS, *FITTING_UNROLLED) if (e, (1, 1), u) not in tried]
    tried += [("fma", t, UNROLLED_TAPS) for t in halved((1, FMA_OC))
              if ("fma", t, UNROLLED_TAPS) not in tried and not stats]
    for choice, t, unrolled in tried:
        try:
            compile_kernel(conv_kernel(dims, choice, epilogue), verify=False, tiles=t,
                           unrolled=unrolled, **geometry)
        except RegisterBudgetError:
            continue
        return choice, t, unrolled
    # none fits: the smallest tile, whose compilation names what does not fit
    if stats:
        return engine, (1, 1), FITTING_UNROLLED[-1]
    return "fma", (1, 1), UNROLLED_TAPS


def conv_fits(template) -> bool:
    """Does `template`'s fitted kernel (`conv_fitted`) fit a wave's registers? (With a
    "stats" step, which the FMA engine does not take, it may not.)"""
    from argus import compile as compile_kernel
    from argus.asm.lower import RegisterBudgetError
    from argus.kernels.conv import conv_kernel

    engine, tiles, unrolled = conv_fitted(template.dims, template.engine,
                                          tuple(template.tiles), template.epilogue,
                                          **template.geometry)
    try:
        compile_kernel(conv_kernel(template.dims, engine, template.epilogue), verify=False,
                       tiles=tiles, unrolled=unrolled, **template.geometry)
    except RegisterBudgetError:
        return False
    return True


def _step_name(step) -> str:
    return step if isinstance(step, str) else step[0]


@attrs.frozen
class Conv:
    """torch's ConvNd / ConvTransposeNd (NC* layout, its weight and bias) on the f32
    `conv_kernel(dims, engine, epilogue)` (`engine` "mfma_f32", the implicit GEMM on f32
    MFMAs, its 16x16 or packed-channel variants, or "fma" for depthwise-like group shapes:
    `conv.conv_engine` picks it from the channels per group, the phases and the positions
    a row): the forward moves the input to its channels-last
    phase view and the weight to (*K, G, OCG, CG) on the host (then to the engine's layout,
    `engine_layout`), launches, and reads the
    output's phase view back into torch's layout. Every size is symbolic in the kernel; the
    window, stride, padding, dilation and transposition are its compile-time variant."""

    dims: int
    window: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    transposed: bool
    output_padding: tuple[int, ...]
    groups: int
    epilogue: tuple = ()
    engine: str = "fma"
    tiles: tuple[int, int] = (1, 1)

    @property
    def geometry(self) -> dict:
        """The convolution's shape parameters (what `conv_input_view` takes)."""
        return {"window": self.window, "stride": self.stride, "padding": self.padding,
                "dilation": self.dilation, "transposed": self.transposed}

    @property
    def params(self) -> dict:
        return {**self.geometry, "tiles": self.tiles}

    def kernel(self) -> KernelDef:
        engine, tiles, unrolled = conv_fitted(self.dims, self.engine, tuple(self.tiles),
                                              self.epilogue, **self.geometry)
        return _conv_variant(self.dims, engine, self.epilogue, tuple(
            {**self.params, "tiles": tiles, "unrolled": unrolled}.items()))

    def fitted(self) -> tuple[str, tuple[int, int]]:
        """The engine and tiles the kernel runs with: `conv_fitting`'s first that fits a
        wave's registers, from the chosen ones down to the FMA engine."""
        return conv_fitting(self.dims, self.engine, self.tiles, self.epilogue, **self.geometry)

    @property
    def pooled(self) -> bool:
        """Does the epilogue end in a pool over the stride's phases (`conv_kernel`)?"""
        from argus.kernels.conv import POOL_STEPS

        return any(_step_name(step) in POOL_STEPS for step in self.epilogue)

    @property
    def rows(self) -> bool:
        """Does the epilogue end in a reduction along the channels (`conv_kernel`'s rows)?"""
        return bool(self.epilogue) and _step_name(self.epilogue[-1]) == "rows"

    @property
    def stats(self) -> bool:
        """Does the epilogue take partial statistics of its output (`conv_kernel`: at its
        end, or of the unpooled output just before its pool)?"""
        return any(_step_name(step) == "stats" for step in self.epilogue)

    def stats_shape(self, n: int, spatial) -> tuple[int, ...]:
        """The shape of a "stats" step's partials S as the kernel writes them: (planes, N,
        the plain output's outer extents, the innermost phases, the position tiles, G,
        OCG); the route views it as (planes, N, slots, channels)."""
        from argus.kernels.conv import MOMENT_PLANES, _mfma_info

        engine, tiles = self.fitted()
        out = self.out_spatial(spatial, unpooled=True)
        phases = self.stride[-1] if self.transposed else 1
        view = -(-out[-1] // phases)
        # a workgroup's position tiles, each one MFMA's rows (16 on the 16x16 engine)
        block = _mfma_info(engine).m * tiles[0]
        blocks = -(-view // block) * tiles[0]
        return (MOMENT_PLANES, n, *out[:-1], phases, blocks)

    def out_spatial(self, spatial, unpooled: bool = False) -> list[int]:
        """The output's spatial extents: the convolution's, or pooled by its stride (unless
        `unpooled`)."""
        from argus.kernels.conv import conv_output_size

        out = [conv_output_size(n, k, s, p, d, self.transposed, o) for n, k, s, p, d, o in
               zip(spatial, self.window, self.stride, self.padding, self.dilation,
                   self.output_padding, strict=True)]
        return [o // s for o, s in zip(out, self.stride, strict=True)] \
            if self.pooled and not unpooled else out

    def run(self, ctx, kernel: KernelDef, x, weight, bias=None, residual=None, S=None,
            **vectors):
        """Launch on torch-layout `x` (N, C, *spatial), `weight`, `bias` (OC,) and
        `residual` (the output's torch shape); returns the output in torch's layout. Arrays
        are numpy (executing) or shape-only stand-ins (planning, with `ctx.execute` False)."""
        from argus.kernels.conv import (
            conv_input_view,
            conv_output_view,
            engine_layout,
            engine_shapes,
            from_phase_view,
            input_pad,
            output_layout,
            output_shape,
            view_phases,
        )

        dims, g = self.dims, self.groups
        engine = self.fitted()[0]
        n, c, spatial = x.shape[0], x.shape[1], tuple(x.shape[2:])
        cg = c // g
        ocg = weight.shape[1] if self.transposed else weight.shape[0] // g
        out = self.out_spatial(spatial)
        # a pooled output is stored plainly (one phase per axis); a reduced one keeps one
        # value per position
        # (statistics before the pool: every phase-view position's, so Y holds ceil(plain /
        # stride) pooled positions, the floor's kept: `conv_kernel`)
        stored = [-(-o // s) for o, s in zip(self.out_spatial(spatial, unpooled=True),
                                             self.stride, strict=True)] \
            if self.pooled and self.stats else out
        y_shape = conv_output_view(n, stored, 1 if self.pooled else self.stride, g,
                                   1 if self.rows else ocg,
                                   self.transposed and not self.pooled)
        y = ctx.alloc(output_shape(engine, y_shape))
        if not ctx.execute:
            front = input_pad(dims, *self.geometry.values())
            x_shape, w_shape = engine_shapes(engine, _view_shape_of(
                (n,), spatial, view_phases(dims, self.stride, self.transposed)[0], front,
                (0,) * dims, (g, cg)), (*self.window, g, ocg, cg))
            arrays = {"X": ctx.alloc(x_shape), "Wt": ctx.alloc(w_shape)}
            if bias is not None:
                arrays["bias"] = ctx.alloc((g, ocg))
            if residual is not None:
                arrays["residual"] = ctx.alloc(output_shape(engine, y_shape))
            arrays.update({k: ctx.alloc((g, ocg) if k.startswith("E") else (ocg,))
                           for k in vectors})
            arrays.update(self._stats_arrays(ctx, S, n, spatial, g, ocg, out))
            ctx.launch(kernel, **arrays, Y=y)
            return ctx.alloc((n, 1 if self.rows else g * ocg, *out))
        import numpy as np

        X = conv_input_view(np.ascontiguousarray(np.moveaxis(x, 1, -1)), groups=g,
                            **self.geometry)
        k_axes = tuple(range(dims, dims + 3))
        w = weight.reshape(g, -1, *weight.shape[1:]) if self.transposed else \
            weight.reshape(g, ocg, *weight.shape[1:])
        # torch's (G*OCG, CG, *K), or (G*CG, OCG, *K) transposed, to (*K, G, OCG, CG)
        w = np.moveaxis(w, (0, 1, 2), (dims, dims + 2, dims + 1) if self.transposed
                        else k_axes)
        X, w = engine_layout(engine, X, np.ascontiguousarray(w, np.float32))
        arrays = {"X": X, "Wt": w}
        if bias is not None:
            arrays["bias"] = np.ascontiguousarray(bias, np.float32).reshape(g, ocg)
        if residual is not None:
            r = np.zeros(y_shape, np.float32)
            plain = r.reshape(n, *(y_shape[1 + 2 * a] * y_shape[2 + 2 * a]
                                   for a in range(dims)), g * ocg)
            plain[(slice(None), *(slice(0, o) for o in out))] = np.moveaxis(residual, 1, -1)
            arrays["residual"] = output_layout(engine, r)
        # a "vec" step's E<i> per (group, channel), a single value spread over them (a
        # layout move); a rows step's V<i> per channel
        arrays.update({k: np.array(np.broadcast_to(
            np.asarray(v, np.float32).reshape(-1), (g * ocg,)).reshape(g, ocg)
            if k.startswith("E") else np.array(v, np.float32).reshape(-1))
            for k, v in vectors.items()})
        arrays.update(self._stats_arrays(ctx, S, n, spatial, g, ocg, out))
        ctx.launch(kernel, **arrays, Y=y)
        y = output_layout(engine, y, back=True)
        return np.ascontiguousarray(np.moveaxis(from_phase_view(y, out), -1, 1))

    def _stats_arrays(self, ctx, S, n, spatial, g, ocg, out) -> dict:
        """A "stats" step's S (the route's buffer, written in place, viewed as the kernel's
        partials) and Edge (its length the plain output's innermost extent)."""
        if not self.stats:
            return {}
        if S is None:
            raise ArgusError("a convolution with a 'stats' epilogue step launched without "
                             "its partials buffer S", fix="give the route's S buffer")
        shape = (*self.stats_shape(n, spatial), g, ocg)
        return {"S": S.reshape(shape),
                "Edge": ctx.alloc((self.out_spatial(spatial, unpooled=True)[-1],))}


@attrs.frozen
class Pool:
    """torch's MaxPoolNd / AvgPoolNd (floor mode; the average counts the padding) on
    `pool_kernel(dims)`: batch and channels merged, the input's phase view (its padding
    filled with -inf or 0) made on the host."""

    dims: int
    kind: str
    window: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]

    @property
    def params(self) -> dict:
        return {"kind": self.kind, "window": self.window, "stride": self.stride,
                "padding": self.padding, "dilation": self.dilation}

    @property
    def runs(self) -> bool:
        """1-D with stride 1: `pool_runs_kernel`, a lane's taps from its own few loads."""
        return self.dims == 1 and self.stride == (1,)

    def kernel(self) -> KernelDef:
        from argus.kernels.conv import pool_kernel, pool_runs_kernel

        if self.runs:
            base = pool_runs_kernel()
            return _bound(base, f"{self.kind}_{base.name}", {
                "kind": self.kind, "window": self.window[0], "dilation": self.dilation[0]})
        base = pool_kernel(self.dims)
        return _bound(base, f"{self.kind}_{base.name}", self.params)


    def out_spatial(self, spatial) -> list[int]:
        from argus.kernels.conv import conv_output_size

        return [conv_output_size(n, k, s, p, d, False) for n, k, s, p, d in
                zip(spatial, self.window, self.stride, self.padding, self.dilation,
                    strict=True)]

    def run(self, ctx, kernel: KernelDef, x):
        from argus.kernels.conv import RUN, pool_input_view, pool_runs_view, view_phases

        lead, spatial = tuple(x.shape[:-self.dims]), tuple(x.shape[-self.dims:])
        planes = math.prod(lead)
        out = self.out_spatial(spatial)
        y = ctx.alloc((planes, -(-out[0] // RUN), RUN) if self.runs else (planes, *out))
        if ctx.execute:
            plain = x.reshape(planes, *spatial)
            X = pool_runs_view(plain, kind=self.kind, window=self.window[0],
                               padding=self.padding[0], dilation=self.dilation[0]) \
                if self.runs else pool_input_view(plain, **self.params)
        else:
            extent = [(o - 1) * s + (k - 1) * d + 1 for o, k, s, d in
                      zip(out, self.window, self.stride, self.dilation, strict=True)]
            shape = _view_shape_of((planes,), spatial,
                                   view_phases(self.dims, self.stride, False)[0],
                                   self.padding, extent, ())
            X = ctx.alloc((planes, -(-shape[1] // RUN), RUN) if self.runs else shape)
        ctx.launch(kernel, X=X, Y=y)
        if self.runs:       # the output's runs back to its row (a host copy, as the views)
            y = y.reshape(planes, -1)[:, :out[0]] if ctx.execute else ctx.alloc((planes, *out))
        return y.reshape(*lead, *out)


@attrs.frozen
class Moments:
    """Chan's combine of partial statistics (`argus.kernels.conv.moments_kernel`): P viewed as
    (planes, O, R, M, Q) combined over R and Q per (o, m); `finish` "" leaves partials per
    chunk of R (planes, O, C, M, 1), "mean" the mean (O, M), "inv" 1 / sqrt(var + eps)."""

    finish: str = ""
    eps: float = 1e-5
    chunk: int = 8
    #: a stage's runs of `chunk` rows per workgroup (a size the kernel reads off the length
    #: of its Span array, so the kernel is the same for every span)
    span: int = 1

    def kernel(self) -> KernelDef:
        return _moments_variant(self.finish, self.chunk, float(self.eps))


@functools.cache
def _moments_variant(finish: str, chunk: int, eps: float) -> KernelDef:
    from argus.kernels.conv import moments_kernel

    base = moments_kernel(finish)
    return _bound(base, base.name, {"chunk": chunk, "eps": eps})

"""From a KernelBench `Model` to a plan of template launches: the model is traced with
`torch.fx` at the scaled shapes, each node is interpreted as an expression over buffers
(elementwise chains fuse; a reduction opens a row program whose later elementwise ops run in
its final pass; a matmul keeps the elementwise ops that follow it as its epilogue), and a
value is materialised as a kernel launch where a template boundary needs a buffer.

An op without a template raises `Unsupported` naming it; nothing falls back to torch.
"""

from __future__ import annotations

import contextlib
import itertools
import math

import attrs

from argus.errors import ArgusError
from argus.kernelbench.templates import (
    BATCH,
    SPANS,
    Broadcast,
    Conv,
    Elementwise,
    Expr,
    Matmul,
    Pool,
    RowProgram,
    Scan,
    bin_,
    broadcast_tile,
    const,
    leaves,
    matmul_precision,
    matmul_split,
    peaks,
    row_tile,
    un,
    where,
)

LOG2E = 1.4426950408889634
#: the most partial results a whole-tensor reduction's first stage leaves its second
PARTIALS = 1 << 16
#: kernel sizes are 32-bit (a size symbol ranges over [1, 2**31)); addresses are 64-bit
SIZE_LIMIT = 1 << 31
#: the dispatch limit on a grid's second and third axes
GRID_LIMIT = 65535
LN2 = 0.6931471805599453


class Unsupported(ArgusError):
    """The model uses an op (or a pattern) no template covers; the message names it."""


@attrs.frozen
class Step:
    """One launch: `template` over the buffers `inputs` (by template leaf name) writing
    `output`. `views` give, per buffer, the shape the kernel sees (a reshape of the buffer)."""

    template: object
    inputs: tuple[tuple[str, str], ...]          # (template leaf name, buffer)
    vectors: tuple[tuple[str, str], ...]         # (template vec name, buffer or fill spec)
    output: str
    views: tuple[tuple[str, tuple[int, ...]], ...]


@attrs.frozen
class Plan:
    """Steps in order; `inputs` and `params` name the buffers the forward receives (the
    model's inputs, then its parameters), `shapes` every buffer's shape at the traced sizes,
    `dims` how each shape is read off the inputs at other sizes, `output` the result."""

    steps: tuple[Step, ...]
    inputs: tuple[str, ...]
    params: tuple[tuple[str, str], ...]          # (buffer, model attribute path)
    shapes: dict
    output: str
    out_shape: tuple[int, ...]
    fills: dict                                  # vec buffer -> the value it holds
    mm_flops: float                              # matmul FLOPs (MFMA)
    valu_flops: float                            # reduction FLOPs (VALU)
    scalars: tuple[str, ...] = ()                # inputs that are Python numbers
    words: tuple[str, ...] = ()                  # int64 index inputs (read as 32-bit words)


@attrs.frozen
class Row:
    """A row-program context: reductions along `axes` of the shape `shape`."""

    shape: tuple[int, ...]
    axes: tuple[int, ...]
    stats: tuple = ()


@attrs.frozen
class Val:
    """A traced tensor: an expression in its space. `space` is "full" (elementwise over
    `shape`), "stat" (reduced along the row's axes) or "mm" (a pending matmul's epilogue)."""

    shape: tuple[int, ...]
    expr: Expr
    space: str = "full"
    row: Row | None = None
    mm: tuple | None = None                       # (Matmul, a buffer, b buffer, out shape)


def _conv_flops(conv: Conv, in_shape, out_shape) -> float:
    """The MFMA FLOPs of `conv` from its input (N, C, ...) to its output (N, OC, ...): a
    transposed one's taps land on the input's positions, a plain one's on the output's."""
    n, c, oc, taps = in_shape[0], in_shape[1], out_shape[1], math.prod(conv.window)
    if conv.transposed:
        return 2.0 * n * c * _numel(in_shape[2:]) * (oc // conv.groups) * taps
    return 2.0 * n * oc * _numel(out_shape[2:]) * (c // conv.groups) * taps


def stats_pay(plain: Conv, stats: Conv, in_shape, out_shape) -> bool:
    """Is `stats` (`plain` with a "stats" epilogue step) modelled cheaper than `plain` and a
    separate statistics pass over its output (of `out_shape`, from an input of `in_shape`)?
    The step keeps the tile's count, mean and M2 live past its stores, so the fitted
    register tiles (`conv_fitted`) may shrink: each output then costs its share of the MFMA
    work again for each tile the plain kernel held (its inputs read and its MFMAs issued per
    smaller tile: Level 2 61's transposed 3-D convolution to 128 channels, (1, 2) -> (1, 1)
    tiles, 7158 -> 10705 us, modelled), against the pass's two reads of the output (the
    mean, then the centred variance) at HBM bandwidth. With the tiles kept, the step costs
    its small partials alone, always the cheaper."""
    kept, taken = plain.fitted()[1], stats.fitted()[1]
    shrink = math.prod(kept) / math.prod(taken)
    if shrink <= 1:
        return True
    rates = peaks()
    lost = _conv_flops(plain, in_shape, out_shape) / rates["mfma_f32"] * (shrink - 1)
    return lost < 2 * 4 * _numel(out_shape) / rates["hbm"]


def _numel(shape) -> int:
    return math.prod(shape)


def _chain(v) -> bool:
    """Is `v` an elementwise chain still to be emitted (no reduction, matmul or transposed
    leaf pending)?"""
    return isinstance(v, Val) and v.row is None and v.mm is None and v.expr[0] != "tleaf"


class Router:
    def __init__(self, model, example_inputs):
        import torch

        self.torch = torch
        self.model = model
        self.buffers: dict[str, tuple[int, ...]] = {}
        self.steps: list[Step] = []
        self.fills: dict = {}
        self.mm_flops = 0.0
        self.valu_flops = 0.0
        self.counter = 0
        self.example_inputs = example_inputs
        self.matmuls: dict = {}
        self.reduced: dict = {}
        self.chains: dict = {}
        self.words: list[str] = []
        self.bytes: list[str] = []
        #: whether a norm's statistics may fuse the elementwise chain before it into the
        #: convolution's epilogue (`_Core._conv_moments`), and the convolution outputs no
        #: longer written because they did
        self.chain_stats = True
        self.unwritten: set[str] = set()
        #: (engine, tiles, stats) per convolution in the order they are traced, taken
        #: instead of `conv_engine`'s (`route`'s pins), and how many convolutions were traced
        self.pins: tuple = ()
        self.convs = 0
        #: the convolutions (trace order) whose norms take their statistics by a separate
        #: pass, not in their epilogue (`stats_pay`, or the pins)
        self.plain_stats: frozenset[int] = frozenset()

    # ------------------------------------------------------------------ buffers and steps
    def fresh(self, shape) -> str:
        self.counter += 1
        name = f"t{self.counter}"
        self.buffers[name] = tuple(shape)
        return name

    def leaf(self, name: str) -> Val:
        return Val(self.buffers[name], ("leaf", name))

    def buffer(self, v) -> str:
        """`v` materialised: the buffer holding it (a launch if it is still an expression)."""
        if isinstance(v, float):
            raise Unsupported("a constant where a tensor is needed")
        if v.mm is not None:
            # one launch per matmul, however many ops read its result
            if v not in self.matmuls:
                self.matmuls[v] = self._emit_matmul(v)
            return self.matmuls[v]
        if v.expr[0] == "leaf" and v.space == "full" and self.buffers[v.expr[1]] == v.shape:
            return v.expr[1]
        if v.row is None:
            # one launch per chain, however many ops read it (a norm reads its input for the
            # statistics and again for the output)
            if v not in self.chains:
                self.chains[v] = self._emit_elementwise(v)
            return self.chains[v]
        if v.space == "stat":           # a reduction's result: one launch however often read
            if v not in self.reduced:
                self.reduced[v] = self._emit_row(v)
            return self.reduced[v]
        return self._emit_row(v)

    def _emit_elementwise(self, v: Val) -> str:
        names = leaves(v.expr, "leaf")
        if leaves(v.expr, "vec"):
            raise Unsupported("an elementwise op broadcasting a vector outside a row program")
        if any(self.buffers[n] != v.shape for n in names) and not all(
                _numel(self.buffers[n]) == _numel(v.shape) for n in names):
            return self._emit_broadcast(v, names)
        out = self.fresh(v.shape)
        n = _numel(v.shape)
        self.steps.append(Step(Elementwise(v.expr), tuple((x, x) for x in names), (), out,
                               tuple((b, (n, 1)) for b in [*names, out])))
        return out

    def _emit_broadcast(self, v: Val, names) -> str:
        """An elementwise chain whose leaves are broadcast (numpy's rules) to its shape: the
        `Broadcast` template over the output viewed as (A, B, C)."""
        try:
            view, kinds = broadcast_view(v.shape, [self.buffers[n] for n in names])
        except Unsupported:
            part = self._fitting_part(v.expr, v.shape)
            if part is None:
                raise
            # no one view fits every operand (a full tensor, a per-channel bias and a single
            # value): a part that fits becomes a buffer first, then the rest
            name = self._emit_elementwise(Val(_broadcast_shapes(*(
                self.buffers[n] for n in leaves(part, "leaf"))), part))
            return self._emit_elementwise(Val(v.shape, _replace(v.expr, part,
                                                                ("leaf", name))))
        out = self.fresh(v.shape)
        sizes = dict(zip("abc", view))
        views = [(n, tuple(sizes[x] for x in kind)) for n, kind in zip(names, kinds)]
        template = Broadcast(v.expr, tuple(zip(names, kinds)), **broadcast_tile(view))
        self.steps.append(Step(template, tuple((x, x) for x in names), (), out,
                               tuple(views) + ((out, view),)))
        return out

    def _fitting_part(self, e: Expr, shape) -> Expr | None:
        """The largest proper subexpression of `e` reading two or more leaves, fewer than
        `e` does, whose leaves have an (A, B, C) view (None when there is none)."""
        total = len(leaves(e, "leaf"))
        best, best_count = None, 1
        stack = [e]
        while stack:
            node = stack.pop()
            if node[0] not in ("un", "bin", "where"):
                continue
            stack.extend(x for x in node[1:] if isinstance(x, tuple))
            names = leaves(node, "leaf")
            if node is e or not best_count < len(names) < total or leaves(node, "vec"):
                continue
            shapes = [self.buffers[n] for n in names]
            try:
                broadcast_view(_broadcast_shapes(*shapes), shapes)
            except Unsupported:
                continue
            best, best_count = node, len(names)
        return best

    def _row_views(self, row: Row):
        shape, axes = row.shape, row.axes
        o = _numel(shape[:axes[0]])
        r = _numel(shape[axes[0]:axes[-1] + 1])
        i = _numel(shape[axes[-1] + 1:])
        return o, r, i

    def _emit_row(self, v: Val) -> str:
        row = v.row
        o, r, i = self._row_views(row)
        used = _stat_closure(v.expr, row.stats)
        # the stats up to the last one used (an earlier one the output skips keeps its
        # place, so the indices stay those of the row; the template does not compute it)
        stats = row.stats[:max(used, default=-1) + 1]
        if len(row.axes) == len(row.shape) and len(row.shape) > 1 and v.space == "stat":
            return self._emit_global(v, stats)
        if len(row.axes) == len(row.shape) and len(row.shape) > 1:
            return self._emit_global_full(v, stats)
        if max(o, r, i) >= SIZE_LIMIT:
            raise Unsupported(f"a row program over {list(row.shape)} (O, R, I = {o}, {r}, {i}): "
                              "a size above the templates' 32-bit size range (a whole-tensor "
                              "reduction feeding a full-size output needs a split reduction)")
        strided = i > 1
        full = v.space == "full"
        # a program reading no row (a loss's count of kept rows) keeps the short-row tile
        reads = any(leaves(stats[k][1], "leaf") for k in used) or leaves(v.expr, "leaf")
        program = RowProgram(tuple(stats), v.expr, full, strided,
                             **row_tile(strided, r if reads else 1, o, i))
        out = self.fresh(v.shape)
        big = (o, r, i, 1) if strided else (o, r, 1)
        small = (o, i, 1) if strided else (o, 1)
        names = program.inputs
        for n in names:
            if _numel(self.buffers[n]) != o * r * i:
                raise Unsupported(f"a row program over {row.shape} reading a tensor of shape "
                                  f"{self.buffers[n]}")
        views = ([(n, big) for n in names] + [(n, small) for n in program.per_row]
                 + [(out, big if full else small)])
        self.steps.append(Step(program, tuple((n, n) for n in names + program.per_row),
                               tuple((n, n) for n in program.vectors), out, tuple(views)))
        return out

    def _emit_global(self, v: Val, stats) -> str:
        """A reduction over every axis: per-row partials over the last axis, then one row
        over the partials (two launches, so any size keeps the whole machine busy)."""
        if len(stats) != 1:
            raise Unsupported("a whole-tensor reduction depending on another reduction")
        fn, e = stats[0]
        shape = v.row.shape
        # the first stage's rows: the last axis, or (with no vector along it) as many
        # trailing axes as leave at most PARTIALS rows, so the second stage, one workgroup,
        # reads few partials (Level 1 37's Frobenius norm left 3.7M rows of 512: 1185 us
        # in its second stage)
        k = 1
        while not leaves(e, "vec") and k < len(shape) - 1 and _numel(shape[:-k]) > PARTIALS:
            k += 1
        inner = Row(shape, tuple(range(len(shape) - k, len(shape))), ((fn, e),))
        partial = self._emit_row(Val(shape[:-k] + (1,) * k, ("stat", 0), "stat", inner))
        self.buffers[partial] = (_numel(shape[:-k]),)
        second = Row((_numel(shape[:-k]),), (0,), ((fn, ("leaf", partial)),))
        return self._emit_row(Val(v.shape, v.expr, "stat", second))

    def _emit_global_full(self, v: Val, stats) -> str:
        """A whole-tensor reduction feeding a full-size output (x / ||x||): each reduction a
        whole-tensor one (two launches) into a one-element buffer, then the output as a
        chain broadcasting those values (`Broadcast`), so no size exceeds the 32-bit range
        however large the tensor."""
        shape = v.row.shape
        scalars: dict[int, Expr] = {}
        for k, (fn, e) in enumerate(stats):
            term = _substitute(e, scalars)
            if leaves(e, "stat"):            # a term spreading earlier results: a buffer
                term = ("leaf", self.buffer(Val(shape, term)))
            row = Row(shape, v.row.axes, ((fn, term),))
            name = self._emit_global(Val((1,) * len(shape), ("stat", 0), "stat", row),
                                     ((fn, term),))
            self.buffers[name] = (1,) * len(shape)
            scalars[k] = ("leaf", name)
        return self.buffer(Val(v.shape, _substitute(v.expr, scalars)))

    def _emit_matmul(self, v: Val) -> str:
        mm, a, b, shape, views = v.mm
        a_view = dict(views)[a]
        k = a_view[2] if mm.a_order == "mk" else a_view[1]
        split = matmul_split(shape[0], shape[1], shape[2], k, mm.reps, mm.block_k)
        mm = attrs.evolve(mm, epilogue=v.expr, split=split,
                          precision=matmul_precision(shape[0], shape[1], shape[2], k, mm.reps,
                                                     split))
        out = self.fresh(v.shape)
        self.steps.append(Step(mm, (("A", a), ("B", b)), tuple((n, n) for n in mm.vectors),
                               out, tuple(views) + ((out, shape),)))
        return out

    # ------------------------------------------------------------------------- the route
    def vec_fill(self, value: float, length: int) -> str:
        """A vector of `length` copies of `value` (1/count of a mean): the count is a size, so
        the kernel reads it as data instead of having it baked in."""
        for name, fill in self.fills.items():
            if fill == value and self.buffers[name] == (length,):
                return name
        name = self.fresh((length,))
        self.fills[name] = value
        return name


def broadcast_view(shape, leaf_shapes) -> tuple[tuple[int, int, int], list[str]]:
    """The output `shape` as (A, B, C) and how each leaf spans it (one of `SPANS`): the axes
    of extent > 1 grouped into runs that the same leaves span, the runs placed in order on
    A, B, C (an axis left over has extent 1). Unsupported when no placement gives every leaf
    a span the template has."""
    rank = len(shape)
    padded = []
    for ls in leaf_shapes:
        if len(ls) > rank:
            raise Unsupported(f"broadcasting {list(ls)} to {list(shape)}")
        p = (1,) * (rank - len(ls)) + tuple(ls)
        for x, y in zip(p, shape):
            if x not in (1, y):
                raise Unsupported(f"broadcasting {list(ls)} to {list(shape)}")
        padded.append(p)
    runs: list[tuple[list[int], tuple[bool, ...]]] = []   # (extents, which leaves span it)
    for a, extent in enumerate(shape):
        if extent == 1:
            continue
        spans = tuple(p[a] == extent for p in padded)
        if runs and runs[-1][1] == spans:
            runs[-1][0].append(extent)
        else:
            runs.append(([extent], spans))
    if len(runs) > 3:
        raise Unsupported(f"broadcasting {[list(x) for x in leaf_shapes]} to {list(shape)}: "
                          f"{len(runs)} runs of axes (the template has three)")
    # the choice depends on which leaves span which axes, never on the extents (so one kernel
    # serves every size): runs with their first axis split off first (a small A, a long C)
    candidates = [runs]
    while len(candidates[-1]) < 3 and any(len(e) > 1 for e, _ in candidates[-1]):
        last = candidates[-1]
        k = next(i for i, (e, _) in enumerate(last) if len(e) > 1)
        candidates.append(last[:k] + [([last[k][0][0]], last[k][1]),
                                      (last[k][0][1:], last[k][1])] + last[k + 1:])
    for groups in reversed(candidates):
        for slots in reversed(list(itertools.combinations(range(3), len(groups)))):
            view, spanned = [1, 1, 1], [set() for _ in padded]
            for (extents, spans), slot in zip(groups, slots):
                view[slot] = _numel(extents)
                for k, hit in enumerate(spans):
                    if hit:
                        spanned[k].add("abc"[slot])
            kinds = [_span_kind(spanned[k], view) for k in range(len(padded))]
            if None in kinds:
                continue
            a, b, c = view
            if c >= SIZE_LIMIT or -(-a // BATCH) > GRID_LIMIT or -(-b // 4) > GRID_LIMIT:
                raise Unsupported(f"broadcasting to {list(shape)} viewed as {view}: beyond the "
                                  "grid's limits (65535 along its second and third axes)")
            return tuple(view), kinds
    raise Unsupported(f"broadcasting {[list(x) for x in leaf_shapes]} to {list(shape)} "
                      "(no (A, B, C) view fits every operand)")


def _span_kind(spanned: set, view) -> str | None:
    """The template span covering `spanned`, extended by axes of extent 1 (a leaf may span
    those or not); None if there is none."""
    ones = {x for x, e in zip("abc", view) if e == 1}
    for kind in SPANS:
        if spanned <= set(kind) <= spanned | ones:
            return kind
    return None


def _substitute(e: Expr, scalars: dict) -> Expr:
    """`e` with ("stat", k) replaced by `scalars[k]`."""
    if e[0] == "stat":
        return scalars[e[1]]
    if e[0] == "un":
        return ("un", e[1], _substitute(e[2], scalars))
    if e[0] == "bin":
        return ("bin", e[1], _substitute(e[2], scalars), _substitute(e[3], scalars))
    if e[0] == "where":
        return ("where", *(_substitute(x, scalars) for x in e[1:]))
    return e


def _replace(e: Expr, part: Expr, by: Expr) -> Expr:
    """`e` with every occurrence of the subexpression `part` replaced by `by`."""
    if e == part:
        return by
    if e[0] in ("un", "bin", "where"):
        return (e[0], *((_replace(x, part, by) if isinstance(x, tuple) else x)
                        for x in e[1:]))
    return e


def _rename(e: Expr, names: dict) -> Expr:
    """`e` with the leaves named in `names` renamed."""
    if e[0] == "leaf":
        return ("leaf", names.get(e[1], e[1]))
    if e[0] == "un":
        return ("un", e[1], _rename(e[2], names))
    if e[0] in ("bin", "where"):
        return (e[0], *((_rename(x, names) if isinstance(x, tuple) else x) for x in e[1:]))
    return e


def _broadcast_shapes(a, b=(), *more) -> tuple[int, ...]:
    if more:
        return _broadcast_shapes(_broadcast_shapes(a, b), *more)
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise Unsupported(f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


def _stat_closure(e: Expr, stats) -> list[int]:
    need = set(leaves(e, "stat"))
    changed = True
    while changed:
        changed = False
        for k in list(need):
            for j in leaves(stats[k][1], "stat"):
                if j not in need:
                    need.add(j)
                    changed = True
    return sorted(need)


# ---------------------------------------------------------------------- the interpreter
class _Core:
    """Combining values on a `Router`: elementwise ops, broadcasts, reductions."""

    def __init__(self, router: Router, model):
        self.r = router
        self.model = model

    # -- combining values
    def combine(self, fn: str, x, y) -> Val:
        if isinstance(x, float) and isinstance(y, float):
            raise Unsupported("arithmetic between two Python numbers in the graph")
        if isinstance(x, float) or isinstance(y, float):
            v = y if isinstance(x, float) else x
            c = const(x if isinstance(x, float) else y)
            e = bin_(fn, c, v.expr) if isinstance(x, float) else bin_(fn, v.expr, c)
            return attrs.evolve(v, expr=e)
        if (x.mm is not None and y.row is not None) or (y.mm is not None and x.row is not None):
            # a matmul's result against a reduction of it (x - max(x)): the result as a
            # buffer, which the reduction reads too
            x = self.r.leaf(self.r.buffer(x)) if x.mm is not None else x
            y = self.r.leaf(self.r.buffer(y)) if y.mm is not None else y
            return self.combine(fn, x, y)
        if x.mm is not None or y.mm is not None:
            return self._epilogue(fn, x, y)
        row = _merge_rows(x.row, y.row)
        if row is False:        # two unrelated row programs: a stat side becomes a buffer
            for side in ("x", "y"):
                v = x if side == "x" else y
                if v.space == "stat":
                    v = self.r.leaf(self.r.buffer(v))
                    x, y = (v, y) if side == "x" else (x, v)
                    row = _merge_rows(x.row, y.row)
                    if row is not False:
                        break
            if row is False:
                raise Unsupported("an elementwise op joining two unrelated reductions")
        if row is not None and _numel(_broadcast_shapes(x.shape, y.shape)) \
                > _numel(row.shape):
            # a result larger than the tensor reduced (a residual add after a pooling, a
            # (1, C, 1, 1) bias on an (N, 1) minimum): the reduction as a buffer, then a
            # broadcast
            x = self.r.leaf(self.r.buffer(x)) if x.row is not None else x
            y = self.r.leaf(self.r.buffer(y)) if y.row is not None else y
            row = None
        if row is not None:
            x, y = self.flat(x), self.flat(y)
            if not (self._fits(x, y, row) and self._fits(y, x, row)):
                # an operand the row program cannot read (a (1, C, 1, 1) bias on a reduction
                # over other axes, a single value): the reduction as a buffer, then a
                # broadcast
                x = self.r.leaf(self.r.buffer(x)) if x.row is not None else x
                y = self.r.leaf(self.r.buffer(y)) if y.row is not None else y
                row = None
        if row is None:         # numpy's broadcasting: the leaves are spread when emitted
            shape = _broadcast_shapes(x.shape, y.shape)
            return Val(shape, bin_(fn, x.expr, y.expr), "full", None)
        x, y = self._align(x, y, row), self._align(y, x, row)
        shape = x.shape if _numel(x.shape) >= _numel(y.shape) else y.shape
        space = "full" if "full" in (x.space, y.space) else "stat"
        return Val(shape, bin_(fn, x.expr, y.expr), space, row)

    def flat(self, v):
        """`v` with every leaf of its own shape: an elementwise chain broadcasting smaller
        tensors becomes a buffer first (row programs and reshapes read leaves element by
        element)."""
        if _chain(v) and any(_numel(self.r.buffers[n]) != _numel(v.shape)
                        for n in leaves(v.expr, "leaf")):
            return self.r.leaf(self.r.buffer(v))
        return v

    def _fits(self, v: Val, other: Val, row: Row) -> bool:
        """Can a row program over `row` read `v` next to `other`: one of its stats, a tensor
        of the row's size, or a vector along its reduced axes (a norm's weight) against a
        full-size `other`?"""
        if v.space == "stat" or _numel(v.shape) == _numel(row.shape):
            return True
        return other.space == "full" and _numel(other.shape) == _numel(row.shape) and \
            _numel(v.shape) == self.r._row_views(row)[1] and \
            _broadcasts_along(v.shape, row.shape, row.axes)

    def _align(self, v: Val, other: Val, row: Row | None) -> Val:
        """`v` as an operand next to `other`: a full tensor stays, a smaller tensor is a
        vector along the row's reduced axes (a norm's weight) or a stat of the row."""
        if v.space == "stat" or v.shape == other.shape or _numel(v.shape) >= _numel(other.shape):
            return v
        if row is None:         # spread when the chain is emitted (`Broadcast`)
            return v
        o, r, i = self.r._row_views(row)
        full = row.shape
        if _numel(v.shape) == r and _broadcasts_along(v.shape, full, row.axes):
            name = self.r.buffer(v)
            self.r.buffers[name] = (r,)
            return Val(full, ("vec", name), "full", row)
        raise Unsupported(f"broadcasting a {list(v.shape)} tensor against {list(full)}")

    def _epilogue(self, fn: str, x, y) -> Val:
        if x.mm is not None and x.mm == y.mm:
            # two epilogues of one matmul (swish: sigmoid(x @ w) * (x @ w)): one launch whose
            # epilogue joins both, instead of a matmul per side
            return attrs.evolve(x, expr=bin_(fn, x.expr, y.expr))
        mm_val, other = (x, y) if x.mm is not None else (y, x)
        n = mm_val.shape[-1]
        if other.mm is None and other.space == "full" and other.row is None \
                and _numel(other.shape) == n and other.shape[-1] == n:
            name = self.r.buffer(other)
            self.r.buffers[name] = (n,)
            e = ("vec", name)
            expr = bin_(fn, mm_val.expr, e) if mm_val is x else bin_(fn, e, mm_val.expr)
            return attrs.evolve(mm_val, expr=expr)
        a = self.r.leaf(self.r.buffer(x))
        b = self.r.leaf(self.r.buffer(y))
        return self.combine(fn, a, b)

    def unary(self, v, f) -> Val:
        if isinstance(v, float):
            raise Unsupported("a function of a Python number in the graph")
        return attrs.evolve(v, expr=f(v.expr))

    # -- reductions
    def _reduce_runs(self, v: Val, fn: str, dims, keepdim: bool, mean: bool, per_row: bool):
        """A reduction over non-adjacent axes (batch norm's 0, 2, 3): the last run of
        adjacent axes first, into a buffer keeping them as extent 1, then the others. Sums,
        products, maxima, minima and means (equal counts per stage) split so; argmax and
        per-row means do not."""
        if fn not in ("sum", "prod", "max", "min") or per_row:
            raise Unsupported(f"a {fn} over the non-adjacent axes {list(dims)}")
        runs = _runs(dims)
        inner = self.r.leaf(self.r.buffer(self.reduce(v, fn, runs[-1], True, mean)))
        rest = tuple(d for run in runs[:-1] for d in run)
        out = self.reduce(inner, fn, rest, True, mean)
        if not keepdim:
            out = attrs.evolve(out, shape=tuple(x for a, x in enumerate(v.shape)
                                                if a not in dims))
        return out

    def _reduce_staged(self, v: Val, fn: str, dims, keepdim: bool, mean: bool):
        """A reduction over several trailing axes (a layer norm over (C, H, W), an instance
        norm over (H, W)) one axis at a time, the first ones strided (lanes along the axes
        after it) into a buffer keeping it as extent 1: each stage has a workgroup per
        (row, 64 columns) instead of one per 8 rows, so a few long rows still fill the
        machine. Sums, products, maxima, minima and means (equal counts per stage) split so.
        The roofline counts the reduction's FLOPs once."""
        flops = self.r.valu_flops + _numel(v.shape)
        out = v
        for d in dims[:-1]:
            out = self.r.leaf(self.r.buffer(self.reduce(out, fn, (d,), True, mean)))
        out = self.reduce(out, fn, (dims[-1],), True, mean)
        self.r.valu_flops = flops
        if not keepdim:
            out = attrs.evolve(out, shape=tuple(x for a, x in enumerate(v.shape)
                                                if a not in dims))
        return out

    def _per_row_split(self, v: Val, dims) -> list[str] | None:
        """The leaves of `v` (an elementwise chain about to be reduced along `dims`, not all
        its axes) that hold one value per row, 1 along every reduced axis (a staged norm's
        mean under its variance: x - mean), when every other leaf is full-size; else None."""
        if not _chain(v) or v.space != "full" or len(dims) == len(v.shape):
            return None
        small, large = [], []
        for n in leaves(v.expr, "leaf"):
            b = self.r.buffers[n]
            if _numel(b) == _numel(v.shape):
                large.append(n)
            elif len(b) == len(v.shape) and all(
                    x == 1 if a in dims else x in (1, v.shape[a]) for a, x in enumerate(b)):
                small.append(n)
            else:
                return None
        return small if small and large else None

    def _last_axis_vectors(self, v: Val) -> Val:
        """`v` (an elementwise chain about to be reduced whole) with its leaves that vary only
        along the last axis (a hinge loss's targets against its predictions) read as vectors
        along the rows of the reduction's first stage (`_emit_global`), instead of the chain
        being written out at full size first."""
        if not _chain(v) or v.space != "full":
            return v
        n = v.shape[-1]
        small = []
        for name in leaves(v.expr, "leaf"):
            b = self.r.buffers[name]
            if _numel(b) == _numel(v.shape):
                continue
            if _numel(b) != n or (len(b) > 1 and b[-1] != n) or len(b) > len(v.shape):
                return v
            small.append(name)
        if not small or len(small) == len(leaves(v.expr, "leaf")):
            return v
        e = v.expr
        for name in small:
            vector = name if self.r.buffers[name] == (n,) else self._alias(name, (n,))
            e = _replace(e, ("leaf", name), ("vec", vector))
        return attrs.evolve(v, expr=e)

    def _per_row_leaves(self, v: Val, dims) -> Val:
        """`v` with its per-row leaves (`_per_row_split`) read as the row program's "per_row"
        tensors, spread to the result's shape first if they are smaller still (a (N, 1, 1, 1)
        mean for rows of (N, 1, H, W)), so the chain is not written out at full size for the
        reduction to read back."""
        small = self._per_row_split(v, dims)
        if small is None:
            return v
        kept = tuple(1 if a in dims else s for a, s in enumerate(v.shape))
        e = v.expr
        for n in small:
            spread = n if self.r.buffers[n] == kept else \
                self.r.buffer(Val(kept, ("leaf", n)))
            e = _replace(e, ("leaf", n), ("per_row", spread))
        return attrs.evolve(v, expr=e)

    def reduce(self, v: Val, fn: str, dims, keepdim: bool, mean: bool = False,
               per_row: bool = False, staged: bool = False) -> Val:
        """`fn` of `v` along `dims`; `mean` divides by the count of reduced elements,
        `per_row` (a whole-tensor sum) by the first axis's extent (KL's batchmean). A count
        is a size, so it reaches the kernel as data (a vector of 1/count), never baked in.
        `staged`: several trailing axes are reduced one at a time (`_reduce_staged`)."""
        if v.mm is not None:
            v = self.r.leaf(self.r.buffer(v))
        if v.expr[0] == "tleaf":
            raise Unsupported(f"a {fn} of a transposed tensor (needs a transpose template)")
        rank = len(v.shape)
        if dims is None:
            dims = tuple(range(rank))
        dims = tuple(sorted(d % rank for d in ((dims,) if isinstance(dims, int) else dims)))
        if len(dims) == rank > 1:
            v = self._last_axis_vectors(v)
        if self._per_row_split(v, dims) is None:
            v = self.flat(v)
        if dims != tuple(range(dims[0], dims[-1] + 1)):
            return self._reduce_runs(v, fn, dims, keepdim, mean, per_row)
        if staged and fn in ("sum", "prod", "max", "min") and not per_row and len(dims) > 1 \
                and 0 < dims[0] and dims[-1] == rank - 1:
            return self._reduce_staged(v, fn, dims, keepdim, mean)
        v = self._per_row_leaves(v, dims)
        if v.space == "stat":
            v = self.r.leaf(self.r.buffer(v))
        row = v.row
        if row is not None and (row.shape != v.shape or row.axes != dims):
            v = self.r.leaf(self.r.buffer(v))
            row = None
        if row is None:
            row = Row(v.shape, dims)
        e = v.expr
        if mean or per_row:
            total = v.shape[0] if per_row else _numel(tuple(v.shape[d] for d in dims))
            whole = len(dims) == rank and rank > 1
            count = self.r.vec_fill(1.0 / total,
                                    v.shape[-1] if whole else _numel(tuple(v.shape[d]
                                                                           for d in dims)))
            e = bin_("mul", e, ("vec", count))
        if fn in ("argmax", "argmin") and (len(dims) != 1 or mean or per_row):
            raise Unsupported(f"{fn} over {'every axis' if len(dims) == rank else 'several axes'}"
                              " (the index of a flattened tensor)")
        if fn == "min":
            stat_expr, post = un("neg", e), True
            fn = "max"
        elif fn == "argmin":            # the lowest index of the largest -x
            stat_expr, post = un("neg", e), False
            fn = "argmax"
        else:
            stat_expr, post = e, False
        row = Row(row.shape, row.axes, row.stats + ((fn, stat_expr),))
        index = len(row.stats) - 1
        shape = tuple(1 if a in dims else s for a, s in enumerate(v.shape)) if keepdim \
            else tuple(s for a, s in enumerate(v.shape) if a not in dims)
        stat = ("stat", index)
        self.r.valu_flops += _numel(v.shape)
        return Val(shape, un("neg", stat) if post else stat, "stat", row)


def _runs(dims) -> list[tuple[int, ...]]:
    """Sorted axes split into runs of adjacent ones."""
    runs: list[list[int]] = []
    for d in dims:
        if runs and runs[-1][-1] == d - 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return [tuple(r) for r in runs]


def _merge_rows(a: Row | None, b: Row | None):
    """The row program both operands belong to (the one with more stats when one extends
    the other), None when neither has one, False when they are unrelated."""
    if a is None or b is None:
        return a or b
    if (a.shape, a.axes) != (b.shape, b.axes):
        return False
    short, long = (a, b) if len(a.stats) <= len(b.stats) else (b, a)
    return long if long.stats[:len(short.stats)] == short.stats else False


def _per_channel_of(small, full) -> bool:
    """Is `small` (right-aligned to `full`, (N, C, spatial)) a vector along the channels
    (C, 1, ...) or a single value: what a convolution's "vec" epilogue step reads?"""
    if len(small) > len(full) or len(full) < 3:
        return False
    pad = (1,) * (len(full) - len(small)) + tuple(small)
    return all(p == 1 or (a == 1 and p == f) for a, (p, f) in enumerate(zip(pad, full)))


def _broadcasts_along(small, full, axes) -> bool:
    """`small` (right-aligned to `full`) has extent 1 outside `axes` and the full extent on
    them."""
    if len(small) > len(full):
        return False
    pad = (1,) * (len(full) - len(small)) + tuple(small)
    return all((p == s) if a in axes else p == 1 for a, (p, s) in enumerate(zip(pad, full)))


# ----------------------------------------------------------------------- op semantics
def exp(e):
    return un("exp2", bin_("mul", e, const(LOG2E)))


def log(e):
    return bin_("mul", un("log2", e), const(LN2))


def sigmoid(e):
    return un("rcp", bin_("add", const(1.0), exp(un("neg", e))))


def tanh(e):
    return bin_("sub", const(1.0), bin_("mul", const(2.0),
                                        un("rcp", bin_("add", exp(bin_("mul", e, const(2.0))),
                                                       const(1.0)))))


def relu(e):
    return bin_("max", e, const(0.0))


def gelu(e):
    """x Φ(x) with the exact erf (torch's default GELU)."""
    return bin_("mul", bin_("mul", e, const(0.5)),
                bin_("add", un("erf", bin_("mul", e, const(1 / math.sqrt(2.0)))), const(1.0)))


def elu(e, alpha=1.0):
    neg = bin_("sub", exp(bin_("min", e, const(0.0))), const(1.0))
    return bin_("add", relu(e), bin_("mul", neg, const(alpha)))


def softplus(e, beta=1.0, threshold=20.0):
    if beta != 1.0:
        raise Unsupported(f"softplus with beta={beta}")
    return bin_("add", relu(e), log(bin_("add", const(1.0), exp(un("neg", un("abs", e))))))


def gelu_tanh(e):
    inner = bin_("mul", const(math.sqrt(2.0 / math.pi)),
                 bin_("add", e, bin_("mul", const(0.044715), bin_("mul", e, bin_("mul", e, e)))))
    return bin_("mul", bin_("mul", const(0.5), e), bin_("add", const(1.0), tanh(inner)))


def clamp(e, lo, hi):
    if lo is not None:
        e = bin_("max", e, const(lo))
    if hi is not None:
        e = bin_("min", e, const(hi))
    return e


def power(e, p):
    if p == 2:
        return bin_("mul", e, e)
    if p == 3:
        return bin_("mul", e, bin_("mul", e, e))
    if p == 1:
        return e
    if p == 0.5:
        return un("sqrt", e)
    if p == -1:
        return un("rcp", e)
    raise Unsupported(f"pow with exponent {p} (needs a general pow op)")


UNARY_OPS = {
    "relu": relu, "sigmoid": sigmoid, "tanh": tanh, "exp": exp, "log": log,
    "relu6": lambda e: clamp(e, 0.0, 6.0),
    "erf": lambda e: un("erf", e),
    "sqrt": lambda e: un("sqrt", e), "rsqrt": lambda e: un("rcp", un("sqrt", e)),
    "abs": lambda e: un("abs", e), "neg": lambda e: un("neg", e),
    "reciprocal": lambda e: un("rcp", e),
    "softsign": lambda e: bin_("mul", e, un("rcp", bin_("add", const(1.0), un("abs", e)))),
    "silu": lambda e: bin_("mul", e, sigmoid(e)),
    "hardsigmoid": lambda e: clamp(bin_("add", bin_("mul", e, const(1 / 6)), const(0.5)),
                                   0.0, 1.0),
    "hardswish": lambda e: bin_("mul", e, clamp(bin_("add", bin_("mul", e, const(1 / 6)),
                                                     const(0.5)), 0.0, 1.0)),
    "selu": lambda e: bin_("mul", const(1.0507009873554804934193349852946),
                           elu(e, 1.6732632423543772848170429916717)),
    "mish": lambda e: bin_("mul", e, tanh(softplus(e))),
}

#: ops the DSL has (argus.lang, argus/kernels/conv.py) that no KernelBench template routes yet
NO_TEMPLATE: dict[str, str] = {}
#: ops that exist in KernelBench but need a DSL op Argus does not have yet
MISSING = {
    "sort": "sort",
    "diag": "gather (diagonal)", "logsumexp": None,
    "instance_norm": None, "layer_norm": None, "norm": None,
}


def _refuse_missing(name: str) -> None:
    if name in NO_TEMPLATE:
        raise Unsupported(f"{name}: no template routes it yet: {NO_TEMPLATE[name]}")
    if MISSING.get(name):
        raise Unsupported(f"{name} needs a DSL op Argus lacks: {MISSING[name]}")


MODULES = {"ReLU": "relu", "ReLU6": "relu6", "Sigmoid": "sigmoid", "Tanh": "tanh", "SiLU": "silu",
           "GELU": "gelu", "Softmax": "softmax", "LogSoftmax": "log_softmax",
           "LayerNorm": "layer_norm", "Linear": "linear", "LeakyReLU": "leaky_relu",
           "ELU": "elu", "SELU": "selu", "Hardtanh": "hardtanh", "Hardsigmoid": "hardsigmoid",
           "Hardswish": "hardswish", "Softplus": "softplus", "Softsign": "softsign",
           "Mish": "mish", "Identity": "identity", "Dropout": "dropout",
           "BatchNorm1d": "batch_norm", "BatchNorm2d": "batch_norm", "BatchNorm3d": "batch_norm",
           "GroupNorm": "group_norm", "InstanceNorm1d": "instance_norm",
           "InstanceNorm2d": "instance_norm", "InstanceNorm3d": "instance_norm",
           "Conv1d": "conv1d", "Conv2d": "conv2d", "Conv3d": "conv3d",
           "ConvTranspose1d": "conv_transpose1d", "ConvTranspose2d": "conv_transpose2d",
           "ConvTranspose3d": "conv_transpose3d", "MaxPool1d": "max_pool1d",
           "MaxPool2d": "max_pool2d", "MaxPool3d": "max_pool3d", "AvgPool1d": "avg_pool1d",
           "AvgPool2d": "avg_pool2d", "AvgPool3d": "avg_pool3d", "Flatten": "flatten",
           "AdaptiveAvgPool1d": "adaptive_avg_pool1d",
           "AdaptiveAvgPool2d": "adaptive_avg_pool2d",
           "AdaptiveAvgPool3d": "adaptive_avg_pool3d",
           "TripletMarginLoss": "triplet_margin_loss"}
ALIASES = {"div": "truediv", "divide": "truediv", "multiply": "mul", "subtract": "sub",
           "amax": "max_reduce", "amin": "min_reduce", "swish": "silu",
           "relu_": "relu", "clip": "clamp", "mm": "matmul", "bmm": "matmul",
           "matmul": "matmul", "huber_loss": "smooth_l1_loss", "hardtanh_": "hardtanh",
           "clamp_min": "clamp_min", "iadd": "add", "imul": "mul", "isub": "sub",
           "itruediv": "truediv", "greater": "gt", "less": "lt", "greater_equal": "ge",
           "less_equal": "le", "float": "identity"}
#: ops whose result is a mask (a bool tensor in torch, 1.0/0.0 in the templates)
MASKS = ("gt", "ge", "lt", "le")
#: ops reading an int64 input (class indices)
INDEXED = ("cross_entropy", "nll_loss")
#: ops whose result is an index (int64 in torch; f32 whole numbers, exact below 2**24, here)
INDICES = ("argmax", "argmin")


@contextlib.contextmanager
def _no_progress_monitor():
    """torch.fx's interpreter opens a (disabled) tqdm bar, and tqdm starts a monitor thread that
    outlives it; with a second thread running, the verifier can no longer fork its workers
    (`absint.parallel.can_fork`) for the rest of the process. Keep tqdm from starting it."""
    try:
        from tqdm.std import tqdm
    except ImportError:
        yield
        return
    saved, tqdm.monitor_interval = tqdm.monitor_interval, 0
    try:
        yield
    finally:
        tqdm.monitor_interval = saved


def route(model, example_inputs, chain_stats: bool = True, pins: tuple = (),
          plain_stats: frozenset = frozenset()) -> Plan:
    """Trace `model` at the shapes of `example_inputs` (real or meta tensors) and plan its
    launches. `chain_stats`: a norm after a convolution and an elementwise chain may fuse
    the chain into the convolution's epilogue to take its statistics there; a plan where
    a later op then reads the convolution's own output is traced again without. `pins`:
    each convolution's (engine, tiles, stats) in trace order (`conv_pins` of a plan of the
    same model at other sizes), so that what follows from them (a statistics step's
    partials, the `Moments` stages reading them) is planned for those. `plain_stats`: the
    convolutions (trace order) whose norms take their statistics by a separate pass; without
    pins, a plan whose statistics step does not pay (`stats_pay`, judged on the
    convolution's final epilogue) is traced again with it there."""
    import torch
    from torch.fx import symbolic_trace
    from torch.fx.passes.shape_prop import ShapeProp

    try:
        graph = symbolic_trace(model)
    except Exception as err:  # fx cannot trace data-dependent Python control flow
        raise Unsupported(f"torch.fx cannot trace the model: {type(err).__name__}: "
                          f"{str(err).splitlines()[0] if str(err) else ''}") from None
    for node in graph.graph.nodes:
        # a module no template covers is named before torch runs the graph (an LSTM's
        # shape propagation fails on its own)
        kind = type(graph.get_submodule(node.target)).__name__ \
            if node.op == "call_module" else None
        if kind is not None and kind not in MODULES:
            raise Unsupported(f"the module nn.{kind}")
    with torch.no_grad(), _no_progress_monitor():
        try:
            ShapeProp(graph).propagate(*example_inputs)
        except Exception as err:  # torch's own failure to run an op on these tensors
            cause = err.__cause__ or err
            raise Unsupported(f"torch cannot run the traced model on shape-only tensors: "
                              f"{type(cause).__name__}: "
                              f"{str(cause).splitlines()[0] if str(cause) else ''}") from None
    router = Router(model, example_inputs)
    router.chain_stats = chain_stats
    router.pins = tuple(pins)
    router.plain_stats = frozenset(plain_stats) | {
        i for i, pin in enumerate(pins) if len(pin) > 2 and not pin[2]}
    interp = Interpreter(router, model)
    env: dict = {}
    inputs: list[str] = []
    params: list[tuple[str, str]] = []
    scalars: list[str] = []
    output = None
    for node in graph.graph.nodes:
        if node.op == "placeholder":
            name = f"in{len(inputs)}"
            if "tensor_meta" not in node.meta:
                example = example_inputs[len(inputs)]
                if isinstance(example, bool) or not isinstance(example, int | float):
                    raise Unsupported(f"a model input of type {type(example).__name__}")
                # a number: the forward passes it as a one-element buffer (kernel scalars
                # are integers in the DSL), broadcast where it is used
                router.buffers[name] = ()
                scalars.append(name)
                inputs.append(name)
                env[node] = Val((), ("leaf", name))
                continue
            router.buffers[name] = tuple(node.meta["tensor_meta"].shape)
            if node.meta["tensor_meta"].dtype == torch.int64:
                # a class index: only an op that picks by index reads it (`Val.space`
                # "index" keeps any other op from treating it as data)
                router.words.append(name)
                inputs.append(name)
                env[node] = Val(router.buffers[name], ("index", name), "index")
                continue
            if node.meta["tensor_meta"].dtype == torch.bool:
                # a mask input: one byte per element, read in place as u8 and widened to
                # 1.0 / 0.0 by the templates that take it (`bytes` leaves)
                router.bytes.append(name)
            else:
                _check_dtype(node, name)
            inputs.append(name)
            env[node] = router.leaf(name)
            continue
        if node.op == "get_attr":
            env[node] = _constant(graph, model, node.target) if node.target not in \
                dict(model.named_parameters()) | dict(model.named_buffers()) \
                else router.leaf(interp.param(node.target, params))
            continue
        if node.op == "output":
            result = _resolve(node.args[0], env)
            if not isinstance(result, Val):
                raise Unsupported("a model returning several tensors or a non-tensor")
            output = router.buffer(result)
            continue
        module = graph.get_submodule(node.target) if node.op == "call_module" else None
        if module is not None:            # known: every module was checked before tracing
            name = MODULES[type(module).__name__]
        else:
            name = node.target if isinstance(node.target, str) else node.target.__name__
            name = name.rstrip("_") if name.endswith("_") and not name.startswith("_") else name
            name = ALIASES.get(name, name)
        _refuse_missing(name)
        if "tensor_meta" in node.meta and hasattr(node.meta["tensor_meta"], "dtype"):
            _check_dtype(node, name)
        args = tuple(_resolve(a, env) for a in node.args)
        kwargs = {k: _resolve(v, env) for k, v in node.kwargs.items()}
        env[node] = interp.call(name, args, kwargs, module=module, node=node,
                                path=node.target if module is not None else None,
                                params=params)
        if isinstance(env[node], Val) and "tensor_meta" in node.meta:
            shape = tuple(node.meta["tensor_meta"].shape)
            if _numel(shape) != _numel(env[node].shape):
                raise Unsupported(f"{node.target}: traced shape {list(shape)} differs from the "
                                  f"route's {list(env[node].shape)}")
            env[node] = attrs.evolve(env[node], shape=shape) if env[node].row is None \
                and env[node].mm is None else env[node]
    if router.unwritten & ({b for s in router.steps for _, b in s.inputs} | {output}):
        # a chain fused for a norm's statistics, but the convolution's output is read too
        return route(model, example_inputs, chain_stats=False, pins=pins,
                     plain_stats=plain_stats)
    out_shape = tuple(router.buffers[output])
    router.steps = _fold_affine_pools(router.steps, output, router.buffers)
    router.steps = _fold_affine_means(router.steps, output, router)
    router.steps = _fold_centred_planes(router.steps, output, router)
    router.steps = _unstored_stats(router.steps, output)
    router.steps = _fuse_conv_epilogues(router.steps, output, router.buffers)
    router.steps = _fuse_conv_pools(router.steps, output)
    router.steps = _fuse_conv_epilogues(router.steps, output, router.buffers)
    router.steps = _fuse_conv_rows(router.steps, output, router.buffers, router.pins)
    router.steps = _inline_producers(router.steps, output)
    router.steps = _fold_row_tails(router.steps, output, router)
    if not pins:
        convs = [s for s in router.steps if isinstance(s.template, Conv)]
        for i, step in enumerate(convs):
            if step.template.stats and i not in router.plain_stats and \
                    not _stats_step_pays(step, router.buffers):
                return route(model, example_inputs, chain_stats, pins,
                             router.plain_stats | {i})
    masks = set(router.bytes)
    router.steps = [_read_bytes(step, masks) for step in router.steps]
    if not router.steps:
        raise Unsupported("the model computes nothing (its output is an input)")
    return Plan(tuple(router.steps), tuple(inputs), tuple(params), dict(router.buffers),
                output, out_shape, dict(router.fills), router.mm_flops,
                router.valu_flops, tuple(scalars), tuple(router.words))


def conv_pins(plan: Plan) -> tuple:
    """Each convolution's (engine, tiles, whether it takes statistics in its epilogue,
    whether its epilogue reduces or maps its channels: a "rows" or "channels" step) in
    `plan`, in trace order (`route`'s pins)."""
    from argus.kernelbench.templates import _step_name

    return tuple((s.template.engine, tuple(s.template.tiles), s.template.stats,
                  bool(s.template.epilogue) and
                  _step_name(s.template.epilogue[-1]) in ("rows", "channels"))
                 for s in plan.steps if isinstance(s.template, Conv))


def _stats_step_pays(step: Step, buffers: dict) -> bool:
    """`stats_pay` for a planned convolution step with a "stats" epilogue step: its final
    epilogue (a statistics step before a pool, or one that leaves the output unstored,
    fits other tiles than the one the norm first asked for) against the same without it."""
    conv = step.template
    plain = attrs.evolve(conv, epilogue=tuple(
        s for s in conv.epilogue if (s if isinstance(s, str) else s[0]) != "stats"))
    x_in = buffers[dict(step.inputs)["x"]]
    out = (x_in[0], buffers[step.output][1], *conv.out_spatial(x_in[2:], unpooled=True))
    return stats_pay(plain, conv, x_in, out)


def _read_bytes(step: Step, masks: set) -> Step:
    """`step` with its template told which of its leaves are one-byte (bool) inputs (`masks`,
    which a reshape of one joins)."""
    if step.template == "view":
        if step.inputs[0][1] in masks:
            masks.add(step.output)
        return step
    read = frozenset(leaf for leaf, buffer in step.inputs if buffer in masks)
    if not read:
        return step
    if "bytes" not in attrs.fields_dict(type(step.template)):
        raise Unsupported(f"a bool input feeding a {type(step.template).__name__.lower()} "
                          "(elementwise, broadcast, scan and row templates read one-byte "
                          "elements)")
    return attrs.evolve(step, template=attrs.evolve(step.template, bytes=read))


#: the value a one-sided clamp leaves open (f32's range)
OPEN = 3.0e38
_HOLE = ("leaf", "\0hole")


def _unify(pattern, e, bound: dict) -> bool:
    """Does `e` have `pattern`'s form, `_HOLE` standing for one subexpression (the same
    everywhere it occurs)?"""
    if pattern == _HOLE:
        return bound.setdefault("hole", e) == e
    if isinstance(pattern, tuple) and isinstance(e, tuple):
        return len(pattern) == len(e) and all(_unify(p, x, bound)
                                              for p, x in zip(pattern, e))
    return pattern == e


def epilogue_steps(e: Expr, leaf: Expr, vectors: dict | None = None) -> list | None:
    """`e` as `conv_kernel` epilogue steps applied to `leaf` (innermost first), or None when
    it is not such a chain: relu, sigmoid, tanh and exact gelu as the route writes them, a
    product with a constant (scale), a max or min with one (a clamp), and a sum, difference
    or product with a leaf `vectors` maps to its index (a per-channel vector: ("vec", op,
    index))."""
    if e == leaf:
        return []
    vectors = vectors or {}
    if e[0] == "bin" and e[1] in ("add", "sub", "mul"):
        for x, y, swapped in ((e[2], e[3], False), (e[3], e[2], True)):
            if y[0] == "leaf" and y[1] in vectors:
                rest = epilogue_steps(x, leaf, vectors)
                if rest is not None:
                    op = "rsub" if swapped and e[1] == "sub" else e[1]
                    return [*rest, ("vec", op, vectors[y[1]])]
    for name, f in (("relu", relu), ("sigmoid", sigmoid), ("tanh", tanh), ("gelu", gelu)):
        bound: dict = {}
        if _unify(f(_HOLE), e, bound):
            rest = epilogue_steps(bound["hole"], leaf, vectors)
            if rest is not None:
                return [*rest, name]
    if e[0] == "bin" and e[1] in ("mul", "max", "min"):
        x, y = e[2], e[3]
        if x[0] == "const":
            x, y = y, x
        if y[0] == "const":
            step = {"mul": ("scale", y[1]), "max": ("clamp", y[1], OPEN),
                    "min": ("clamp", -OPEN, y[1])}[e[1]]
            rest = epilogue_steps(x, leaf, vectors)
            if rest is not None:
                return [*rest, step]
    return None


def _sole_conv(steps: list, i: int, source: str, output: str,
               stats: bool = False) -> int | None:
    """The index of the convolution step before `i` that writes `source`, when `source` is
    read by one step only and is not the problem's output (so a fused epilogue may take the
    reader over and the buffer need never be written); else None. A convolution taking
    statistics only with `stats` (a pool, whose epilogue step may follow them)."""
    producers = [j for j, s in enumerate(steps[:i]) if s is not None and s.output == source
                 and isinstance(s.template, Conv)]
    readers = [s for s in steps if s is not None and any(b == source for _, b in s.inputs)]
    if not producers or len(readers) != 1 or source == output or \
            (steps[producers[0]].template.stats and not stats):
        # (statistics are of what the convolution stores, and last in its epilogue)
        return None
    return producers[0]


def _fuse_conv_epilogues(steps: list, output: str, shapes: dict) -> list:
    """An elementwise chain reading only a convolution's result (read nowhere else) rides on
    the convolution's store as its epilogue when `epilogue_steps` can write it; so does a
    broadcast one whose other leaves are per-channel vectors or single values
    (`_conv_vectors`: KernelBench Level 2 50's learnt scales and bias)."""
    steps = list(steps)
    fused = True
    while fused:
        fused = False
        for i, step in enumerate(steps):
            vectors = _conv_vectors(step, steps[:i], shapes)
            if vectors is None:
                continue
            source = vectors.pop("")
            j = _sole_conv(steps, i, source, output)
            if j is None or shapes[step.output] != shapes[source]:
                continue
            conv = steps[j].template
            if conv.rows:                # one value per position: nothing rides after it
                continue
            first = sum(1 for name, _ in steps[j].inputs if name.startswith("E"))
            index = {leaf: first + k for k, leaf in enumerate(vectors)}
            leaf = _leaf_of(step, source)
            chain = epilogue_steps(step.template.expr, ("leaf", leaf), index)
            if not chain:
                # any other elementwise chain: an expression step over the tile
                if leaves(step.template.expr, "idx") or leaves(step.template.expr, "vec"):
                    continue
                chain = [("expr", _renamed(step.template.expr, {
                    ("leaf", leaf): ("leaf", "y"),
                    **{("leaf", v): ("vec", f"E{k}") for v, k in index.items()}}))]
            fused_step = attrs.evolve(steps[j], template=attrs.evolve(
                conv, epilogue=(*conv.epilogue, *map(_step_tuple, chain))),
                inputs=(*steps[j].inputs, *((f"E{index[leaf]}", buffer)
                                            for leaf, buffer in vectors.items())),
                output=step.output)
            # with vectors, where the chain was (they may be made between), else in place
            at, gone = (i, j) if vectors else (j, i)
            steps[at] = fused_step
            del steps[gone]
            fused = True
            break
    return steps


def _leaf_of(step: Step, buffer: str) -> str:
    """The template leaf name `step` reads `buffer` as."""
    return next(leaf for leaf, b in step.inputs if b == buffer)


def _conv_vectors(step: Step, before: list, shapes: dict) -> dict | None:
    """For an elementwise step, {"": the buffer it reads}; for a broadcast step over a
    convolution's result viewed as (N, C, spatial) or (A, 1, C) (one full-size leaf), {"":
    that buffer, leaf: buffer} for each other leaf, a vector along C of the channels or a
    single value; None for anything else."""
    if step.template == "view":
        return None
    if isinstance(step.template, Elementwise):
        return {"": step.inputs[0][1]} if len(step.inputs) == 1 else None
    if not isinstance(step.template, Broadcast):
        return None
    kinds, views = dict(step.template.kinds), dict(step.views)
    full = [leaf for leaf, kind in kinds.items() if kind == "abc"]
    if len(full) != 1 or any(kind != "b" for kind in kinds.values() if kind != "abc"):
        return None
    buffers = dict(step.inputs)
    source = buffers[full[0]]
    convs = [s for s in before if s is not None and s.output == source
             and isinstance(s.template, Conv)]
    if not convs or source not in views:
        return None
    a, b, c = views[source]
    n, oc, *spatial = shapes[source]
    if (a, b, c) != (n, oc, math.prod(spatial)) and b != 1:
        return None
    out = {"": source}
    for leaf, kind in kinds.items():
        if kind == "b":
            if views.get(buffers[leaf]) != (b,) or buffers[leaf] == source:
                return None
            out[leaf] = buffers[leaf]
    return out


def _fuse_conv_pools(steps: list, output: str) -> list:
    """A pool whose window and stride are a strided transposed convolution's stride, without
    padding or dilation, reading only that convolution's result (read nowhere else) combines
    the output phases at each position: the convolution's epilogue ends in it
    (`conv_kernel`'s "pool_max"/"pool_avg"), so the full output is never written nor read
    back (KernelBench Level 2 78, 89, 96: a 2x2x2 pool after a stride-2 ConvTranspose3d).
    A convolution taking a norm's statistics of that output takes them of each phase before
    the pool (("stats", False), the plain extents' last odd row included): the norm's affine
    map moved past the pool (`_fold_affine_pools`), nothing of the output's size is stored
    (Level 2 72: a batch norm between the convolution and its pools)."""
    from argus.kernelbench.templates import _step_name, conv_fits

    steps = list(steps)
    for i, step in enumerate(steps):
        if not isinstance(step.template, Pool):
            continue
        pool, source = step.template, step.inputs[0][1]
        j = _sole_conv(steps, i, source, output, stats=True)
        if j is None:
            continue
        conv = steps[j].template
        if not conv.transposed or conv.pooled or conv.rows or pool.dims != conv.dims or \
                "residual" in conv.epilogue or max(conv.stride) < 2 or \
                pool.window != conv.stride or pool.stride != conv.stride or \
                max(pool.padding) > 0 or max(pool.dilation) > 1:
            continue
        epilogue = tuple(s for s in conv.epilogue if _step_name(s) != "stats")
        if conv.stats:
            epilogue = (*epilogue, ("stats", False))
        fused = attrs.evolve(conv, epilogue=(*epilogue, f"pool_{pool.kind}"))
        if conv.stats and (fused.fitted()[0] == "fma" or not conv_fits(fused)):
            continue
        steps[j] = attrs.evolve(steps[j], template=fused, output=step.output)
        steps[i] = None
    return [s for s in steps if s is not None]


def _affine_in(e: Expr, leaf: Expr) -> bool:
    """Is `e` an affine function of `leaf` (alpha * leaf + beta, alpha and beta free of it)?"""
    if leaf not in _subexprs(e):
        return True
    if e == leaf:
        return True
    if e[0] == "bin" and e[1] in ("add", "sub"):
        return _affine_in(e[2], leaf) and _affine_in(e[3], leaf)
    if e[0] == "bin" and e[1] == "mul":
        free = [x for x in e[2:4] if leaf not in _subexprs(x)]
        return bool(free) and all(_affine_in(x, leaf) for x in e[2:4])
    return False


def _subexprs(e: Expr) -> list:
    out, stack = [], [e]
    while stack:
        node = stack.pop()
        out.append(node)
        if node[0] in ("un", "bin", "where"):
            stack.extend(x for x in node[1:] if isinstance(x, tuple))
    return out


def _fold_affine_pools(steps: list, output: str, shapes: dict) -> list:
    """A broadcast that is an affine map of one full tensor per (A, B) plane (y = alpha * x +
    beta, alpha and beta constant along C, the planes' spatial positions: a batch, group or
    instance norm's (x - mean) * inv * w + b) read only by an average pool without padding
    (every window full) over those planes commutes with it: pool(alpha * x + beta) =
    alpha * pool(x) + beta. The pool then reads x and the map runs on the pooled tensor, so
    the full-size normalised tensor is never written nor read (KernelBench Level 2 72: a
    batch norm's output of 1 GB before two average pools). Repeated, the map moves past
    every such pool."""
    steps = list(steps)
    moved = True
    while moved:
        moved = False
        for i, step in enumerate(steps):
            if not isinstance(step.template, Broadcast) or step.output == output:
                continue
            kinds, views, buffers = dict(step.template.kinds), dict(step.views), \
                dict(step.inputs)
            full = [leaf for leaf, kind in kinds.items() if kind == "abc"]
            if len(full) != 1 or any("c" in kind for leaf, kind in kinds.items()
                                     if leaf != full[0]):
                continue
            readers = [j for j, s in enumerate(steps) if s.template != "view" and
                       any(b == step.output for _, b in s.inputs)]
            views_of = [j for j, s in enumerate(steps) if s.template == "view" and
                        s.inputs[0][1] == step.output]
            if len(readers) != 1 or views_of:
                continue
            j = readers[0]
            pool = steps[j].template
            source = buffers[full[0]]
            a, b, c = views[step.output]
            shape = shapes[step.output]
            if not isinstance(pool, Pool) or pool.kind != "avg" or max(pool.padding) > 0 or \
                    len(shape) != pool.dims + 2 or c != _numel(shape[2:]) or \
                    not _affine_in(step.template.expr, ("leaf", full[0])) or \
                    shapes[source] != shape:
                continue
            pooled = shapes[steps[j].output]
            inner = f"{steps[j].output}_x"
            shapes[inner] = pooled
            view = (a, b, _numel(pooled[2:]))
            first = attrs.evolve(steps[j], inputs=((steps[j].inputs[0][0], source),),
                                 output=inner)
            template = attrs.evolve(step.template, **broadcast_tile(view))
            second = attrs.evolve(step, template=template,
                                  inputs=tuple((leaf, inner if leaf == full[0] else buf)
                                               for leaf, buf in step.inputs),
                                  views=tuple((n, view if n in (source, step.output) else v)
                                              for n, v in step.views if n != source) +
                                  ((inner, view),),
                                  output=steps[j].output)
            second = attrs.evolve(second, views=tuple(
                (n, v) for n, v in second.views if n != step.output) +
                ((steps[j].output, view),))
            steps[j:j + 1] = [first, second]
            del steps[i]
            moved = True
            break
    return steps


#: the rows each `Moments` stage leaves per output, about: a stage's workgroup walks
#: cdiv(rows, MOMENT_CHUNK * left) runs of MOMENT_CHUNK rows, each run a memory latency
#: (about 0.45 us, modelled, when few workgroups hide it), so a stage that combines
#: 64 rows a workgroup is bandwidth-bound on the big first read and a few us on the
#: small ones; the last leaves a row or so, which the finish walks in one run
STAGE_ROWS = (4096, 64, 1)


def _moment_stages(router: Router, partials: str, view: tuple) -> tuple[str, tuple]:
    """`Moments` stages appended to `router`'s steps, each combining spans of MOMENT_CHUNK
    rows of the partials `partials` (viewed as (planes, O, R, M, Q)) a workgroup so that
    about STAGE_ROWS are left (the span a size the kernel reads, so every size launches the
    same steps and kernels). Returns the last partials and their view."""
    from argus.kernelbench.templates import Moments
    from argus.kernels.conv import MOMENT_CHUNK

    planes, o, r, m, q = view
    # the stages read `fold` consecutive rows as one row of fold * m outputs (a row of
    # (m, q) partials is contiguous, and so is a stage's row of fold * m), so a few
    # channels still fill a wave's 64 lanes (a batch norm's 16 channels: 16 lanes of 64,
    # 0.7 TB/s, modelled); the finish reads the last rows back as fold rows of m
    fold = max(k for k in range(1, max(1, 64 // m) + 1) if r % k == 0)
    view = (planes, o, r // fold, m * fold, q)
    for left in STAGE_ROWS:
        span = max(1, -(-view[2] // (MOMENT_CHUNK * left)))
        chunks = -(-view[2] // (MOMENT_CHUNK * span))
        out = router.fresh((planes, o, chunks, view[3], 1))
        router.steps.append(Step(Moments("", 1e-5, MOMENT_CHUNK, span), (("P", partials),),
                                 (), out, ((partials, view),
                                           (out, (planes, o, chunks, view[3], 1)))))
        partials, view = out, (planes, o, chunks, view[3], 1)
    return partials, (planes, o, view[2] * fold, m, 1)


def _affine_plane_map(steps: list, i: int, output: str, router: Router):
    """(the leaf of x, x, x's convolution step, the one reader's index) when step `i` is a
    broadcast mapping the output x of a convolution with a "stats" step affinely per (A, B)
    plane (y = alpha * x + beta; its other leaves free of C), all of x's positions a plane,
    and y is read by one step and is not the plan's output; else None."""
    step = steps[i]
    if not isinstance(step.template, Broadcast) or step.output == output:
        return None
    kinds, views, buffers = dict(step.template.kinds), dict(step.views), dict(step.inputs)
    full = [leaf for leaf, kind in kinds.items() if kind == "abc"]
    if len(full) != 1 or any("c" in kind for leaf, kind in kinds.items() if leaf != full[0]):
        return None
    source, shape = buffers[full[0]], router.buffers[step.output]
    a, b, c = views[step.output]
    readers = [j for j, s in enumerate(steps) if any(x == step.output for _, x in s.inputs)]
    convs = [s for s in steps[:i] if s.output == source and isinstance(s.template, Conv)
             and s.template.stats]
    if len(readers) != 1 or not convs or len(shape) < 3 or c != _numel(shape[2:]) or \
            a * b != shape[0] * shape[1] or router.buffers[source] != shape or \
            not _affine_in(step.template.expr, ("leaf", full[0])):
        return None
    return full[0], source, convs[0], readers[0]


def _conv_plane_means(router: Router, conv: Step, n: int, planes: int) -> tuple[list, str]:
    """(the steps, the (n, planes) buffer) of the mean of each (sample, channel) plane of
    the output of `conv` (a convolution step with a "stats" step), combined from its
    partial statistics by `Moments` stages and a "mean" finish."""
    from argus.kernelbench.templates import Moments
    from argus.kernels.conv import MOMENT_CHUNK

    partials = dict(conv.inputs)["S"]
    _, _, slots, _ = router.buffers[partials]
    at = len(router.steps)
    partials, view = _moment_stages(router, partials, (3, n, slots, planes, 1))
    head: list = router.steps[at:]
    del router.steps[at:]
    means = router.fresh((n, planes))
    head.append(Step(Moments("mean", 1e-5, MOMENT_CHUNK), (("P", partials),), (), means,
                     ((partials, view), (means, (n, planes)))))
    return head, means


def _plane_reader(steps: list, i: int, output: str, router: Router):
    """`_affine_plane_map`'s (leaf of x, x, x's convolution step, the reader's index) when its
    one reader takes a plane sum (`_plane_sum`), with the reader's template, the fill vector,
    the map's (A, B, C) view and the reader's (rows, length); else None."""
    found = _affine_plane_map(steps, i, output, router)
    if found is None:
        return None
    j, y = found[3], steps[i].output
    program = steps[j].template
    fill = _plane_sum(program, y, router)
    if fill is None:
        return None
    rows, length, _ = dict(steps[j].views).get(y, (0, 0, 0))
    return (*found, program, fill, dict(steps[i].views)[y], (rows, length))


def _plane_sum(program, leaf: str, router: Router) -> str | None:
    """The fill vector f when `program` is a contiguous row program over `leaf` alone (no
    per-row vectors, no indices) taking one stat, sum(leaf * f); else None."""
    if not isinstance(program, RowProgram) or program.strided or program.per_row or \
            program.indices or len(program.stats) != 1 or program.inputs != [leaf]:
        return None
    fn, e = program.stats[0]
    if fn != "sum" or e[0] != "bin" or e[1] != "mul" or e[2] != ("leaf", leaf) or \
            e[3][0] != "vec" or e[3][1] not in router.fills:
        return None
    return e[3][1]


def _fold_centred_planes(steps: list, output: str, router: Router) -> list:
    """A broadcast y = f(x), f affine per (A, B) plane of a convolution's output x (as in
    `_fold_affine_means`), read only by a row program taking each plane's mean from it
    (y - sum(y * 1/S), a row a whole plane: KernelBench Level 2 15, a batch norm, then the
    mean over the positions subtracted) is one broadcast of x: y - mean(y) = f(x) -
    f(mean(x)), and mean(x) per (sample, channel) comes from the convolution's partial
    statistics, so y is never written nor read back."""
    steps = list(steps)
    for i, step in enumerate(steps):
        found = _plane_reader(steps, i, output, router)
        if found is None:
            continue
        full, source, conv, j, program, fill, (a, b, c), (rows, length) = found
        shape = router.buffers[step.output]
        if not program.full_output or length != c or rows != a * b or \
                program.out != bin_("sub", ("leaf", step.output), ("stat", 0)) or \
                abs(router.fills[fill] * c - 1.0) > 1e-6:
            continue
        head, means = _conv_plane_means(router, conv, shape[0], shape[1])
        expr = step.template.expr
        centred = bin_("sub", expr, _renamed(expr, {("leaf", full): ("leaf", means)}))
        template = attrs.evolve(step.template, expr=centred,
                                kinds=(*step.template.kinds, (means, "ab")))
        head.append(attrs.evolve(
            step, template=template, inputs=(*step.inputs, (means, means)),
            views=tuple((x, v) for x, v in step.views if x != step.output) +
            ((means, (a, b)), (steps[j].output, (a, b, c))), output=steps[j].output))
        steps[j:j + 1] = head
        del steps[i]
        return _fold_centred_planes(steps, output, router)
    return steps


def _fold_affine_means(steps: list, output: str, router: Router) -> list:
    """A broadcast that is an affine map per (A, B) plane of a convolution's output x (as in
    `_fold_affine_pools`: y = alpha * x + beta, constant along the plane's positions) read
    only by a row program summing whole planes a row (a mean over every axis but the batch,
    sum(y * 1/(planes * S)), or over the positions alone) folds into the plane means: the
    sum over a plane of alpha * x + beta is S * (alpha * mean(x) + beta), and mean(x) per
    (sample, channel) comes from the convolution's partial statistics, so the map runs on
    (N, C) values and the row program sums a row's planes with 1/planes: nothing of x's
    size is read back (KernelBench Level 2 23: a group norm then the mean)."""
    steps = list(steps)
    for i, step in enumerate(steps):
        found = _plane_reader(steps, i, output, router)
        if found is None:
            continue
        full, source, conv, j, program, fill, (a, b, c), (rows, length) = found
        shape = router.buffers[step.output]
        if program.full_output or length % c or \
                rows * (length // c) != shape[0] * shape[1]:
            continue
        per_row = length // c               # whole planes a row sums
        n, planes = shape[0], shape[1]
        head, means = _conv_plane_means(router, conv, n, planes)
        # the map on the means, over the (A, B) planes; a row of one plane that the row
        # program scales by 1 (a mean over the positions alone: Level 2 27) is the result
        alone = per_row == 1 and program.out == ("stat", 0) and \
            abs(router.fills[fill] * c - 1.0) <= 1e-6
        mapped = steps[j].output if alone else router.fresh((n, planes))
        plane_view = (a, b, 1)
        template = attrs.evolve(step.template, **broadcast_tile(plane_view))
        head.append(attrs.evolve(
            step, template=template,
            inputs=tuple((leaf, means if leaf == full else x) for leaf, x in step.inputs),
            views=tuple((x, v) for x, v in step.views if x not in (source, step.output)) +
            ((means, plane_view), (mapped, plane_view)), output=mapped))
        if alone:
            steps[j:j + 1] = head
            del steps[i]
            return _fold_affine_means(steps, output, router)
        # the row program over the planes: each stands for S equal values
        fill = router.vec_fill(router.fills[fill] * c, per_row)
        stat = ("sum", bin_("mul", ("leaf", mapped), ("vec", fill)))
        summed = attrs.evolve(program, stats=(stat,), **row_tile(False, per_row, rows, 1))
        head.append(attrs.evolve(
            steps[j], template=summed, inputs=((mapped, mapped),), vectors=((fill, fill),),
            views=((mapped, (rows, per_row, 1)), (steps[j].output, (rows, 1)))))
        steps[j:j + 1] = head
        del steps[i]
        return _fold_affine_means(steps, output, router)
    return steps


def _unstored_stats(steps: list, output: str) -> list:
    """A convolution taking statistics whose output nothing reads (its norm folded into the
    statistics) does not store it."""
    from argus.kernelbench.templates import _step_name

    read = {b for s in steps for _, b in s.inputs}
    return [attrs.evolve(s, template=attrs.evolve(s.template, epilogue=tuple(
        ("stats", False) if _step_name(e) == "stats" else e for e in s.template.epilogue)))
        if isinstance(s.template, Conv) and s.template.stats and s.output not in read
        and s.output != output else s for s in steps]


def _renamed(e: Expr, names: dict) -> Expr:
    """`e` with the leaves (any kind) whose (kind, name) `names` maps replaced."""
    if e[0] in ("un", "bin", "where"):
        return (e[0], *((_renamed(x, names) if isinstance(x, tuple) else x) for x in e[1:]))
    return names.get(e[:2], e)


def _fuse_conv_rows(steps: list, output: str, shapes: dict, pins: tuple = ()) -> list:
    """A row program reducing a convolution's result along its channels (KernelBench's
    logsumexp, softmax, max or mean over dim 1), to one value per position, where one
    channel block of the f32 MFMA engine holds every channel (one group, BLOCK_OC output
    channels or fewer), ends the convolution's epilogue as a "rows" step: the channels are
    reduced in registers and the full output never written nor read back (Level 2 58). A row
    program keeping a value per channel (a softmax over dim 1) ends it as a "channels" step:
    the convolution writes the program's output, and its own is never written nor read back
    (Level 2 6). A convolution whose pin (`conv_pins`, of the published sizes' plan) says
    its epilogue does not end so keeps the row program apart: a scaled problem's fewer
    channels fit one block where the published ones do not (Level 2 36, 128 channels
    published, 9 scaled), and the emulated run must check the published kernels."""
    from argus.kernels.conv import BLOCK_OC, F32_MFMA_ENGINES, ROW_IDENTITY

    steps = list(steps)
    for i, step in enumerate(steps):
        program = step.template
        if not isinstance(program, RowProgram) or not program.strided or \
                program.per_row or program.indices or \
                program.bytes or len(program.inputs) != 1 or \
                any(fn not in ROW_IDENTITY for fn, _ in program.stats):
            continue
        source = dict(step.inputs)[program.inputs[0]]
        j = _sole_conv(steps, i, source, output)
        if j is None:
            continue
        conv = steps[j].template
        at = sum(1 for s in steps[:j] if s is not None and isinstance(s.template, Conv))
        if at < len(pins) and len(pins[at]) > 3 and not pins[at][3]:
            continue
        n, oc, *spatial = shapes[source]
        vectors = dict(step.vectors)
        if conv.groups != 1 or oc > BLOCK_OC or conv.fitted()[0] not in F32_MFMA_ENGINES or \
                (program.full_output and conv.pooled) or \
                dict(step.views).get(source) != (n, oc, math.prod(spatial), 1) or \
                (program.full_output and
                 dict(step.views).get(step.output) != (n, oc, math.prod(spatial), 1)) or \
                any(_numel(shapes.get(vectors[v], ())) != oc or vectors[v] not in shapes
                    for v in program.vectors):
            continue
        names = {("leaf", program.inputs[0]): ("leaf", "y"),
                 **{("vec", v): ("vec", f"V{k}") for k, v in enumerate(program.vectors)}}
        rows = ("channels" if program.full_output else "rows",
                tuple((fn, _renamed(e, names)) for fn, e in program.stats),
                _renamed(program.out, names), len(program.vectors))
        # the fused launch goes where the row program was: its vectors may be made between
        producer = steps[j]
        steps[i] = attrs.evolve(
            producer, template=attrs.evolve(conv, epilogue=(*conv.epilogue, rows)),
            inputs=(*producer.inputs, *((f"V{k}", vectors[v])
                                        for k, v in enumerate(program.vectors))),
            output=step.output)
        steps[j] = None
    return [s for s in steps if s is not None]


#: how a strided row program over (O, R, I) reads a leaf of a broadcast over (A, B, C) = (O,
#: R, I) (`Broadcast.kinds`): a full tensor, a vector along R, a tensor per (O, R) or per
#: (O, I); a leaf spanning other axes keeps the broadcast apart
_ROW_KINDS = {"abc": "leaf", "b": "vec", "ab": "plane", "ac": "per_row"}


def _inline_producers(steps: list, output: str) -> list:
    """A broadcast read only by a strided row program over the same (O, R, I) view (a
    normalisation then a reduction over the channels: KernelBench Level 2 79's instance norm,
    clamp and scale under a channel max, 92's group norm, activations and residual under a
    logsumexp) is read inline: its expression replaces its output in the row program's stats
    and output, each of its leaves read as `_ROW_KINDS` says, so the broadcast's output is
    never written nor read back. Only a broadcast of one full tensor, read in one pass: the
    row program then reads as much as before, plus its vectors and planes, each a load per
    row of a tile (a logsumexp's two passes over 92's normalised tensor, each loading two
    planes and two vectors, took 620 us against 263 + 161 apart, modelled)."""
    steps = list(steps)
    for i, step in enumerate(steps):
        if step is None or not isinstance(producer := step.template, Broadcast) or \
                step.output == output or producer.bytes:
            continue
        kinds = dict(producer.kinds)
        readers = [j for j, s in enumerate(steps)
                   if s is not None and any(b == step.output for _, b in s.inputs)]
        if len(readers) != 1 or list(kinds.values()).count("abc") != 1 or \
                any(kind not in _ROW_KINDS for kind in kinds.values()) or \
                any(leaf != buffer for leaf, buffer in step.inputs):
            continue
        j = readers[0]
        program = steps[j].template
        y = step.output
        if not isinstance(program, RowProgram) or not program.strided or program.bytes or \
                program.indices or program.passes(y) != 1 or \
                dict(steps[j].views).get(y) != (*dict(step.views)[y], 1):
            continue
        o, r, i_ = dict(step.views)[y]
        views = dict(step.views)
        names = {("leaf", n): (_ROW_KINDS[kind], n) for n, kind in kinds.items()}
        inline = _renamed(producer.expr, names)
        by = {("leaf", y): inline}
        stats = tuple((fn, _renamed(e, by)) for fn, e in program.stats)
        fused = attrs.evolve(program, stats=stats, out=_renamed(program.out, by))
        shape = {"leaf": (o, r, i_, 1), "plane": (o, r), "per_row": (o, i_, 1)}
        reader = steps[j]
        kept = [(n, v) for n, v in reader.views if n != y]
        seen = dict(kept)
        added = [(n, shape[_ROW_KINDS[kinds[n]]]) for n in kinds
                 if kinds[n] != "b" and n not in seen]
        if any(views[n] != (r,) for n in kinds if kinds[n] == "b") or \
                any(seen[n] != shape[_ROW_KINDS[kinds[n]]] for n in kinds
                    if kinds[n] != "b" and n in seen):
            continue            # (a buffer the row program reads in another view)
        inputs = tuple((n, n) for n in fused.inputs + fused.per_row + fused.planes)
        vectors = dict(reader.vectors) | {n: n for n in kinds if kinds[n] == "b"}
        steps[j] = attrs.evolve(reader, template=fused, inputs=inputs,
                                vectors=tuple((n, vectors[n]) for n in fused.vectors),
                                views=(*kept, *added))
        steps[i] = None
    return [s for s in steps if s is not None]


def _aliases(steps: list, buffer: str) -> set:
    """`buffer` and every reshape ("view" step) of it, transitively."""
    found, grown = {buffer}, True
    while grown:
        more = {s.output for s in steps if s is not None and s.template == "view"
                and s.inputs[0][1] in found}
        grown = bool(more - found)
        found |= more
    return found


def _fold_row_tails(steps: list, output: str, router: Router) -> list:
    """An elementwise chain or broadcast reading a row program's full output (directly or
    through reshapes: KernelBench Level 2 38's softmax over the positions, viewed back,
    times a per-channel scale) as its one full tensor, read nowhere else, joins the row
    program's output expression: its other full tensors are leaves there, a vector along R
    a vector, a tensor per row (or per (O, R) or (O, I) of a strided program) a per-row (or
    plane, or per-row) leaf, a vector of the broadcast's B spread to one value a row first
    (a small launch). The row program writes the chain's output, so its own is never
    written nor read back."""
    steps = list(steps)
    for i, step in enumerate(steps):
        tail = step.template
        if not isinstance(tail, Broadcast | Elementwise) or tail.bytes:
            continue
        kinds = dict(tail.kinds) if isinstance(tail, Broadcast) else \
            {n: "abc" for n in tail.inputs}
        if any(leaf != buffer for leaf, buffer in step.inputs):
            continue
        origins = {}
        for n in kinds:
            source = n
            while (made := [s for s in steps if s.output == source]) and \
                    made[0].template == "view":
                source = made[0].inputs[0][1]
            origins[n] = (source, made[0] if made else None)
        rows = [n for n, kind in kinds.items() if kind == "abc" and
                isinstance(getattr(origins[n][1], "template", None), RowProgram) and
                origins[n][1].template.full_output]
        if len(rows) != 1:
            continue
        z, (y, producer) = rows[0], origins[rows[0]]
        program = producer.template
        aliases = _aliases(steps, y)
        readers = [s for s in steps if s.template != "view" and
                   any(b in aliases for _, b in s.inputs)]
        if readers != [step] or output in aliases or program.bytes or program.indices:
            continue
        big = dict(producer.views)[y]
        o, r = big[0], big[1]
        i_ = big[2] if program.strided else 1
        views = dict(step.views)
        a, b, c = views[z] if isinstance(tail, Broadcast) else (o, r, i_)
        if any(_numel(router.buffers[n]) != o * r * i_ for n, k in kinds.items()
               if k == "abc"):
            continue
        if program.strided:
            if (a, b, c) != (o, r, i_) or any(k not in _ROW_KINDS for k in kinds.values()):
                continue
            read = {n: _ROW_KINDS[k] for n, k in kinds.items()}
            shape = {"leaf": big, "plane": (o, r), "per_row": (o, i_, 1)}
        else:
            if a * b != o or c != r or any(k not in ("abc", "ab", "b", "c")
                                           for k in kinds.values()):
                continue
            read = {n: {"abc": "leaf", "ab": "per_row", "b": "per_row", "c": "vec"}[k]
                    for n, k in kinds.items()}
            shape = {"leaf": big, "per_row": (o, 1)}
        if any(views[n] != (r,) for n, k in kinds.items() if read[n] == "vec"):
            continue
        head, names = [], {}
        for n, k in kinds.items():
            if n == z:
                continue
            if k == "b" and not program.strided and a > 1:
                # a vector of the channels spread to one value a row (a sample's channel)
                spread = router.fresh((a, b))
                head.append(Step(Broadcast(("leaf", n), ((n, "b"),),
                                           **broadcast_tile((a, b, 1))),
                                 ((n, n),), (), spread, ((n, (b,)), (spread, (a, b, 1)))))
                names[("leaf", n)] = ("per_row", spread)
            else:
                names[("leaf", n)] = (read[n], n)
        added = {nm: shape[kind] for kind, nm in names.values() if kind != "vec"}
        if any(dict(producer.views).get(nm, v) != v for nm, v in added.items()):
            continue            # (a buffer the row program reads in another view)
        vectors = dict(producer.vectors) | {nm: nm for kind, nm in names.values()
                                            if kind == "vec"}
        names[("leaf", z)] = program.out
        fused = attrs.evolve(program, out=_renamed(tail.expr, names))
        views_out = [(n, v) for n, v in producer.views if n != y and n not in added] + \
            list(added.items()) + [(step.output, big)]
        steps[i] = attrs.evolve(
            producer, template=fused,
            inputs=tuple((n, n) for n in fused.inputs + fused.per_row + fused.planes),
            vectors=tuple((n, vectors[n]) for n in fused.vectors),
            views=tuple(views_out), output=step.output)
        steps[i:i] = head
        dead = aliases
        return _fold_row_tails([s for s in steps if s is not producer and
                                not (s.template == "view" and s.output in dead)],
                               output, router)
    return steps


def _step_tuple(step):
    return step if isinstance(step, str) else tuple(step)


def _constant(graph, model, target: str) -> float:
    """A tensor the forward builds from Python numbers (`torch.tensor(0.5)`), which tracing
    stores on the graph module: a single value is a constant of the expression."""
    import torch

    tensor = getattr(graph, target, None)
    if not isinstance(tensor, torch.Tensor):
        raise Unsupported(f"the model attribute {target}, read in the forward, is neither a "
                          "parameter, a buffer nor a tensor constant (register it as a buffer)")
    if tensor.numel() == 1 and tensor.is_floating_point():
        return float(tensor.item())
    raise Unsupported(f"the tensor constant {target} {list(tensor.shape)}, not a parameter "
                      "or a buffer (only a single value is a constant; register a tensor as "
                      "a buffer)")


def _check_dtype(node, name: str):
    import torch

    dtype = node.meta["tensor_meta"].dtype
    if dtype != torch.float32 and not (dtype == torch.bool and name in MASKS) \
            and not (dtype == torch.int64 and name in INDICES):
        if dtype == torch.bool:
            raise Unsupported(f"a torch.bool result of {name} (bool tensors come from the "
                              "model's inputs or from comparisons only)")
        raise Unsupported(f"{dtype} tensors (the templates are f32)")


def _resolve(a, env):
    from torch.fx import Node

    if isinstance(a, Node):
        return env[a]
    if isinstance(a, (list, tuple)):
        return type(a)(_resolve(x, env) for x in a)
    if isinstance(a, bool):
        return a
    if isinstance(a, int | float):
        return float(a) if isinstance(a, float) else a
    return a


@attrs.frozen
class Flipped:
    """`value` flipped along `dims`, pending: a scan reads it as a reverse scan (and flipping
    the result back gives that scan); anything else refuses it."""

    value: Val
    dims: tuple[int, ...]


@attrs.frozen
class Pending:
    """A piece of the exclusive-scan pattern, pending: `value` narrowed to all but its last
    element along `dim` ("head"), its scan ("scanned", `extra` the exclusive scan of the
    whole), its first slice ("first") or zeros of that slice ("zeros")."""

    kind: str
    value: Val
    dim: int
    extra: Val | None = attrs.field(default=None, eq=False)


def _number(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _num(x):
    if isinstance(x, bool) or not isinstance(x, int | float):
        return x
    return float(x)


class _Handlers:
    """Op handlers, mixed into Interpreter: call(name, args, kwargs) dispatches on name."""

    def param(self, path: str, params: list) -> str:
        name = f"p:{path}"
        if name not in self.r.buffers:
            tensor = self.model.get_parameter(path) if path in dict(
                self.model.named_parameters()) else self.model.get_buffer(path)
            if tensor.dtype != self.r.torch.float32:
                raise Unsupported(f"parameter {path} of dtype {tensor.dtype}")
            self.r.buffers[name] = tuple(tensor.shape)
            params.append((name, path))
        return name

    def call(self, name: str, args, kwargs, module=None, node=None, path=None, params=None):
        _refuse_missing(name)
        if name not in ("cumsum", "cumprod", "flip") and any(
                isinstance(a, Flipped) for a in (*args, *kwargs.values())):
            raise Unsupported(f"flip feeding {name} (only a scan reads a flipped tensor, as "
                              "its reverse)")
        flat_args = [p for a in (*args, *kwargs.values())
                     for p in (a if isinstance(a, list | tuple) else (a,))]
        if name not in INDEXED and any(isinstance(a, Val) and a.space == "index"
                                       for a in flat_args):
            raise Unsupported(f"an int64 tensor feeding {name} (only {', '.join(INDEXED)} "
                              "read one, as class indices)")
        if name not in ("cumsum", "cumprod", "zeros_like", "unsqueeze", "cat") and any(
                isinstance(a, Pending) for a in flat_args):
            raise Unsupported(f"a narrowed or selected tensor feeding {name} (only the "
                              "exclusive-scan pattern reads one)")
        if name == "gelu":
            approximate = kwargs.get("approximate", getattr(module, "approximate", "none"))
            return self.unary(args[0], gelu_tanh if approximate == "tanh" else gelu)
        if name in UNARY_OPS:
            return self.unary(args[0], UNARY_OPS[name])
        handler = getattr(self, f"op_{name}", None)
        if handler is None:
            raise Unsupported(f"the op {name} has no template")
        if module is not None or name in ("layer_norm", "linear", "instance_norm"):
            return handler(*args, module=module, path=path, params=params, **kwargs)
        return handler(*args, **kwargs)

    # arithmetic
    def op_add(self, x, y, alpha=1):
        if _number(x) and _number(y):           # sizes: x.size(d) + 1
            return x + alpha * y
        if alpha != 1:
            y = self.combine("mul", y, float(alpha))
        return self.combine("add", _num(x), _num(y))

    def op_sub(self, x, y, alpha=1):
        if _number(x) and _number(y):
            return x - alpha * y
        if alpha != 1:
            y = self.combine("mul", y, float(alpha))
        return self.combine("sub", _num(x), _num(y))

    def op_rsub(self, x, y, alpha=1):
        return self.op_sub(y, x, alpha)

    def op_mul(self, x, y):
        return self.combine("mul", _num(x), _num(y))

    def op_truediv(self, x, y, rounding_mode=None):
        if rounding_mode is not None:
            raise Unsupported(f"division with rounding_mode={rounding_mode}")
        x, y = _num(x), _num(y)
        if isinstance(y, float):
            return self.combine("mul", x, 1.0 / y)
        recip = self.unary(y, lambda e: un("rcp", e))
        if isinstance(x, float):
            return self.combine("mul", recip, x)
        return self.combine("mul", x, recip)

    def op_pow(self, x, p):
        if not isinstance(p, int | float):
            raise Unsupported("pow with a tensor exponent")
        return self.unary(x, lambda e: power(e, p))

    def op_square(self, x):
        return self.unary(x, lambda e: power(e, 2))

    def op_maximum(self, x, y):
        return self.combine("max", x, y)

    def op_minimum(self, x, y):
        return self.combine("min", x, y)

    def _compare(self, fn, x, y):
        return self.combine(fn, _num(x), _num(y))

    def op_gt(self, x, y):
        return self._compare("gt", x, y)

    def op_ge(self, x, y):
        return self._compare("ge", x, y)

    def op_lt(self, x, y):
        return self._compare("lt", x, y)

    def op_le(self, x, y):
        return self._compare("le", x, y)

    def op_where(self, cond, x=None, y=None):
        """A select over masks: the condition, and both branches, are aligned like the
        operands of an elementwise op (tensors of the output's shape, stats of one row
        program, or Python numbers)."""
        if x is None or y is None:
            raise Unsupported("torch.where(cond) (the indices of true elements)")
        parts = [_num(v) for v in (cond, x, y)]
        vals = [v for v in parts if isinstance(v, Val)]
        if not vals or isinstance(parts[0], float):
            raise Unsupported("torch.where with a Python condition")
        mms = {v.mm for v in vals}
        if len(mms) == 1 and None not in mms:
            # every tensor operand is one pending matmul's epilogue: the select joins it
            exprs = [const(v) if isinstance(v, float) else v.expr for v in parts]
            return attrs.evolve(vals[0], expr=where(*exprs))
        vals = [self.r.leaf(self.r.buffer(v)) if v.mm is not None else v for v in vals]
        parts = [vals.pop(0) if isinstance(v, Val) else v for v in parts]
        row = None
        for v in parts:
            if isinstance(v, Val):
                row = _merge_rows(row, v.row)
                if row is False:
                    raise Unsupported("a select joining two unrelated reductions")
        big = max((v for v in parts if isinstance(v, Val)), key=lambda v: _numel(v.shape))
        exprs = [const(v) if isinstance(v, float) else self._align(v, big, row).expr
                 for v in parts]
        space = "full" if any(isinstance(v, Val) and self._align(v, big, row).space == "full"
                              for v in parts) else "stat"
        shape = big.shape
        if row is None:
            for v in parts:
                if isinstance(v, Val):
                    shape = _broadcast_shapes(shape, v.shape)
        return Val(shape, where(*exprs), space, row)

    def op_zeros_like(self, x, **_):
        if isinstance(x, Pending) and x.kind == "first":
            return Pending("zeros", x.value, x.dim)
        return self.unary(x, lambda e: const(0.0))

    def op_ones_like(self, x, **_):
        return self.unary(x, lambda e: const(1.0))

    def op_prod(self, x, dim=None, keepdim=False, **kw):
        return self._reduce("prod", x, dim, keepdim, **kw)

    def op_leaky_relu(self, x, negative_slope=0.01, inplace=False, module=None, **_):
        slope = module.negative_slope if module is not None else negative_slope
        return self.unary(x, lambda e: bin_("add", relu(e),
                                            bin_("mul", bin_("min", e, const(0.0)),
                                                 const(slope))))

    def op_elu(self, x, alpha=1.0, inplace=False, module=None, **_):
        alpha = module.alpha if module is not None else alpha
        return self.unary(x, lambda e: elu(e, alpha))

    def op_hardtanh(self, x, min_val=-1.0, max_val=1.0, inplace=False, module=None, **_):
        if module is not None:
            min_val, max_val = module.min_val, module.max_val
        return self.unary(x, lambda e: clamp(e, min_val, max_val))

    def op_clamp(self, x, min=None, max=None):  # noqa: A002 (torch's names)
        return self.unary(x, lambda e: clamp(e, _num(min), _num(max)))

    def op_clamp_min(self, x, min):  # noqa: A002
        return self.unary(x, lambda e: clamp(e, _num(min), None))

    def op_softplus(self, x, beta=1.0, threshold=20.0, module=None, **_):
        if module is not None:
            beta, threshold = module.beta, module.threshold
        return self.unary(x, lambda e: softplus(e, beta, threshold))

    def op_identity(self, x, **_):
        return x

    def op_dropout(self, x, p=0.5, training=True, inplace=False, module=None, **_):
        """The identity when it drops nothing (p = 0, or eval mode); KernelBench runs its
        models as constructed, in training mode, where the reference draws its mask from
        torch's generator, which no kernel here reproduces."""
        if module is not None:
            p, training = module.p, module.training
        if p == 0 or not training:
            return x
        raise Unsupported(f"dropout with p={p} in training mode (KernelBench's reference runs "
                          "the Model as constructed, so its mask is drawn from torch's random "
                          "generator; a kernel would need torch's Philox stream to match it)")

    def _adaptive_avg(self, dims, x, output_size=None, module=None, **_):
        """Global average pooling (an output of 1 per spatial axis) is a mean over those
        axes; an output dividing the input evenly is an average pooling of stride and window
        input / output."""
        if module is not None:
            output_size = module.output_size
        size = _tuple(output_size, dims, "output_size") if not (
            isinstance(output_size, list | tuple) and None in output_size) else None
        spatial = x.shape[-dims:]
        if size is None:
            raise Unsupported(f"adaptive_avg_pool{dims}d with an output size of None")
        if all(s == 1 for s in size):
            return self.reduce(x, "sum", tuple(range(len(x.shape) - dims, len(x.shape))),
                               True, mean=True)
        if all(n % s == 0 for n, s in zip(spatial, size)):
            window = tuple(n // s for n, s in zip(spatial, size))
            return self._pool(dims, "avg", x, window, window)
        raise Unsupported(f"adaptive_avg_pool{dims}d from {list(spatial)} to {list(size)} "
                          "(uneven windows)")

    def op_adaptive_avg_pool1d(self, x, *args, **kw):
        return self._adaptive_avg(1, x, *args, **kw)

    def op_adaptive_avg_pool2d(self, x, *args, **kw):
        return self._adaptive_avg(2, x, *args, **kw)

    def op_adaptive_avg_pool3d(self, x, *args, **kw):
        return self._adaptive_avg(3, x, *args, **kw)

    # reductions
    def _reduce(self, fn, x, dim=None, keepdim=False, mean=False, **kwargs):
        if kwargs.get("dtype") is not None:
            raise Unsupported("a reduction with a dtype= conversion")
        return self.reduce(x, fn, dim, keepdim, mean)

    def op_sum(self, x, dim=None, keepdim=False, **kw):
        return self._reduce("sum", x, dim, keepdim, **kw)

    def op_mean(self, x, dim=None, keepdim=False, **kw):
        return self._reduce("sum", x, dim, keepdim, mean=True, **kw)

    def op_max_reduce(self, x, dim=None, keepdim=False):
        return self._reduce("max", x, dim, keepdim)

    def op_min_reduce(self, x, dim=None, keepdim=False):
        return self._reduce("min", x, dim, keepdim)

    def op_max(self, x, dim=None, keepdim=False):
        if isinstance(dim, Val | float):
            return self.combine("max", x, dim)
        value = self._reduce("max", x, dim, keepdim)
        return value if dim is None else ("values", value)

    def op_min(self, x, dim=None, keepdim=False):
        if isinstance(dim, Val | float):
            return self.combine("min", x, dim)
        value = self._reduce("min", x, dim, keepdim)
        return value if dim is None else ("values", value)

    # triangular masks (on a matmul's result, whose epilogue knows each element's row and
    # column)
    def op_triu(self, x, diagonal=0):
        return self._triangle(x, diagonal, "ge")

    def op_tril(self, x, diagonal=0):
        return self._triangle(x, diagonal, "le")

    def _triangle(self, x, diagonal, keep):
        if not isinstance(x, Val) or x.mm is None:
            raise Unsupported("a triangular mask of a tensor other than a matmul's result")
        mm = x.mm[0]
        if len(x.shape) != 2 and not (len(x.shape) == 3 and mm.a_batched):
            raise Unsupported("a triangular mask of a matmul with flattened batch axes")
        offset = bin_("sub", ("idx", 1), ("idx", 0))        # column - row
        mask = bin_(keep, offset, const(float(diagonal)))
        return attrs.evolve(x, expr=where(mask, x.expr, const(0.0)))

    # scans
    def op_cumsum(self, x, dim, dtype=None, **_):
        return self._scan("sum", x, dim, dtype)

    def op_cumprod(self, x, dim, dtype=None, **_):
        return self._scan("prod", x, dim, dtype)

    def _scan(self, fn, x, dim, dtype, exclusive=False):
        if dtype is not None:
            raise Unsupported("a scan with a dtype= conversion")
        if isinstance(x, Pending) and x.kind == "head" and x.dim == dim % len(x.value.shape):
            # the scan of all but the last element, shifted one on by the cat: the exclusive
            # scan of the whole
            whole = self._scan(fn, x.value, dim, dtype, exclusive=True)
            return Pending("scanned", x.value, x.dim, whole)
        reverse = isinstance(x, Flipped)
        if reverse:
            if x.dims != (dim % len(x.value.shape),):
                raise Unsupported("a scan of a tensor flipped along another axis")
            x = x.value
        if x.mm is not None:
            x = self.r.leaf(self.r.buffer(x))
        x = self.flat(x)
        if x.row is not None:
            x = self.r.leaf(self.r.buffer(x))
        names = leaves(x.expr, "leaf")
        if leaves(x.expr, "vec") or any(_numel(self.r.buffers[n]) != _numel(x.shape)
                                        for n in names):
            raise Unsupported("a scan of a broadcast operand")
        rank = len(x.shape)
        d = dim % rank
        o, r, i = _numel(x.shape[:d]), x.shape[d], _numel(x.shape[d + 1:])
        if max(o, r, i) >= SIZE_LIMIT:
            raise Unsupported(f"a scan over {list(x.shape)}: a size above the 32-bit range")
        strided = i > 1
        template = Scan(x.expr, fn, reverse, exclusive, strided)
        out = self.r.fresh(x.shape)
        view = (o, r, i, 1) if strided else (o, r, 1)
        self.r.steps.append(Step(template, tuple((n, n) for n in names), (), out,
                                 tuple((n, view) for n in [*names, out])))
        self.r.valu_flops += _numel(x.shape)
        result = self.r.leaf(out)
        # the scan of a flipped tensor, flipped back, is the reverse scan itself
        return Flipped(result, (d,)) if reverse else result

    def op_flip(self, x, *dims):
        dims = dims[0] if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else dims
        if isinstance(x, Flipped):
            if tuple(sorted(d % len(x.value.shape) for d in dims)) != x.dims:
                raise Unsupported("flips along different axes")
            return x.value
        return Flipped(x, tuple(sorted(d % len(x.shape) for d in dims)))

    def op_argmax(self, x, dim=None, keepdim=False):
        if dim is None:
            raise Unsupported("argmax without dim= (the index into the flattened tensor)")
        return self.reduce(x, "argmax", dim, keepdim)

    def op_argmin(self, x, dim=None, keepdim=False):
        if dim is None:
            raise Unsupported("argmin without dim= (the index into the flattened tensor)")
        return self.reduce(x, "argmin", dim, keepdim)

    def op_getitem(self, x, index):
        if isinstance(x, tuple) and x and x[0] == "values":
            if index == 0:
                return x[1]
            raise Unsupported("the indices of max/min (argmax reduction)")
        if isinstance(x, tuple) and all(isinstance(d, int) for d in x):
            return x[index]                     # a size: b, c, h, w = x.shape
        raise Unsupported("indexing a tensor (needs a gather or slice template)")

    def op_norm(self, x, p="fro", dim=None, keepdim=False, out=None, dtype=None):
        if p in ("fro", 2, 2.0):
            return self.unary(self.reduce(self.unary(x, lambda e: power(e, 2)), "sum", dim,
                                          keepdim), lambda e: un("sqrt", e))
        if p in (1, 1.0):
            return self.reduce(self.unary(x, lambda e: un("abs", e)), "sum", dim, keepdim)
        raise Unsupported(f"a p={p} norm")

    def op_softmax(self, x, dim=None, _stacklevel=3, dtype=None, module=None, **_):
        return self._softmax(x, module.dim if module is not None else dim, log=False)

    def op_log_softmax(self, x, dim=None, _stacklevel=3, dtype=None, module=None, **_):
        return self._softmax(x, module.dim if module is not None else dim, log=True)

    def _softmax(self, x, dim, log: bool):
        if dim is None:
            raise Unsupported("softmax without dim=")
        m = self.reduce(x, "max", dim, True)
        shifted = self.combine("sub", x, m)
        e = self.unary(shifted, exp)
        s = self.reduce(e, "sum", dim, True)
        if log:
            return self.combine("sub", shifted, self.unary(s, log_))
        return self.combine("mul", e, self.unary(s, lambda t: un("rcp", t)))

    def op_logsumexp(self, x, dim, keepdim=False):
        m = self.reduce(x, "max", dim, True)
        s = self.reduce(self.unary(self.combine("sub", x, m), exp), "sum", dim, True)
        out = self.combine("add", self.unary(s, log_), m)
        if not keepdim:
            out = attrs.evolve(out, shape=tuple(d for a, d in enumerate(out.shape)
                                                if a != dim % len(out.shape)))
        return out

    def op_layer_norm(self, x, normalized_shape=None, weight=None, bias=None, eps=1e-5,
                      module=None, path=None, params=None):
        if module is not None:
            normalized_shape, eps = module.normalized_shape, module.eps
            weight = (self.r.leaf(self.param(f"{path}.weight", params))
                      if module.weight is not None else None)
            bias = (self.r.leaf(self.param(f"{path}.bias", params))
                    if module.bias is not None else None)
        rank = len(x.shape)
        dims = tuple(range(rank - len(normalized_shape), rank))
        # a normalised shape of several axes is the few long rows of a layer norm over
        # (C, H, W): reduced in stages, so they spread over the machine
        mean = self.reduce(x, "sum", dims, True, mean=True, staged=True)
        centred = self.combine("sub", x, mean)
        var = self.reduce(self.unary(centred, lambda e: power(e, 2)), "sum", dims, True,
                          mean=True, staged=True)
        inv = self.unary(self.combine("add", var, float(eps)),
                         lambda e: un("rcp", un("sqrt", e)))
        out = self.combine("mul", centred, inv)
        if weight is not None:
            out = self.combine("mul", out, weight)
        if bias is not None:
            out = self.combine("add", out, bias)
        return out

    def _normalised(self, x, dims, eps, staged: bool = False):
        """(x - mean) / sqrt(var + eps) over `dims` (biased variance): one row program (or
        reductions in stages, `staged`)."""
        mean, inv = self._moments(x, dims, eps, staged)
        return self.combine("mul", self.combine("sub", x, mean), inv)

    def _moments(self, x, dims, eps, staged: bool = False):
        """(mean, 1 / sqrt(var + eps)) of `x` over `dims` (biased variance), keeping dims."""
        mean = self.reduce(x, "sum", dims, True, mean=True, staged=staged)
        centred = self.combine("sub", x, mean)
        var = self.reduce(self.unary(centred, lambda e: power(e, 2)), "sum", dims, True,
                          mean=True, staged=staged)
        return mean, self.unary(self.combine("add", var, float(eps)),
                                lambda e: un("rcp", un("sqrt", e)))

    def _conv_moments(self, x, per_sample: bool, groups: int, eps: float):
        """(mean, 1 / sqrt(var + eps), x) of `x` (N, C, spatial) per channel (a batch norm,
        `per_sample` False), or per sample and group of C / `groups` channels (group norm;
        instance norm at `groups` = C), of shapes (1, C) and (N, groups), taken in the
        epilogue of the convolution that writes `x`: it stores each tile's count, mean and
        M2 as it stores x ("stats"), and `Moments` launches combine them (Chan's formula,
        robust where |mean| >> std), so x is never read back for its statistics; x is
        returned as the buffer the convolution writes (an elementwise chain of its output
        joins its epilogue, `_chain_into_conv`). None when
        x is not a convolution's output the epilogue can take them of (a pooled or reduced
        one, the FMA engine's, or an epilogue past a wave's registers)."""
        from argus.kernelbench.templates import Moments, conv_fits
        from argus.kernels.conv import MOMENT_CHUNK

        if not isinstance(x, Val) or x.space != "full" or x.row is not None or \
                x.mm is not None or len(x.shape) < 3:
            return None
        if x.expr[0] != "leaf":
            x = self._chain_into_conv(x)
            if x is None:
                return None
        source = x.expr[1]
        at = [j for j, s in enumerate(self.r.steps) if s.output == source]
        if not at or not isinstance(self.r.steps[at[0]].template, Conv) or \
                self.r.buffers[source] != x.shape:
            return None
        step = self.r.steps[at[0]]
        conv = step.template
        if conv.pooled or conv.rows or conv.stats or (not per_sample and conv.groups < 1):
            return None
        stats = attrs.evolve(conv, epilogue=(*conv.epilogue, ("stats", True)))
        if stats.fitted()[0] == "fma" or not conv_fits(stats) or self._plain_stats(at[0]):
            return None
        x_in = self.r.buffers[dict(step.inputs)["x"]]
        n, c = x.shape[0], x.shape[1]
        slots = _numel(stats.stats_shape(n, x_in[2:])[2:])
        partials = self.r.fresh((3, n, slots, c))
        self.r.steps[at[0]] = attrs.evolve(step, template=stats,
                                           inputs=(*step.inputs, ("S", partials)))
        # (planes, O, R, M, Q): over the images and slots per channel, or over the slots
        # and a group's channels per image
        o, r, m, q = (1, n * slots, c, 1) if not per_sample else \
            (n, slots, groups, c // groups)
        partials, view = _moment_stages(self.r, partials, (3, o, r, m, q))
        results = []
        for finish in ("mean", "inv"):
            out = self.r.fresh((o, m))
            # (eps is the inverse's alone: every mean is one kernel)
            self.r.steps.append(Step(Moments(finish, float(eps) if finish == "inv" else 1e-5,
                                             MOMENT_CHUNK),
                                     (("P", partials),), (), out,
                                     ((partials, view), (out, (o, m)))))
            results.append(self.r.leaf(out))
        # the roofline counts the norm's two reductions (mean and variance), as elsewhere
        self.r.valu_flops += 2 * _numel(x.shape)
        return results[0], results[1], x

    def _plain_stats(self, at: int) -> bool:
        """Does the convolution of step `at` leave its norm's statistics to a separate pass
        (`Router.plain_stats`, by its place among the convolutions traced)?"""
        return sum(isinstance(s.template, Conv) for s in self.r.steps[:at]) in \
            self.r.plain_stats

    def _chain_into_conv(self, x):
        """`x`, an elementwise chain of one convolution's output (a scale, an activation),
        its other leaves per-channel vectors or single values (a learnt bias and scale:
        KernelBench Level 2 21, 79), as the convolution's own output: the chain joins its
        epilogue (the vectors as its "E" inputs), so the statistics a "stats" step takes
        are of x. None when x is another expression, the output is read already, or the
        route runs without (`Router.chain_stats`)."""
        from argus.kernelbench.templates import conv_fits

        if not self.r.chain_stats or not _chain(x) or leaves(x.expr, "vec") or \
                leaves(x.expr, "idx"):
            return None
        full = [n for n in leaves(x.expr, "leaf") if self.r.buffers[n] == x.shape]
        vectors = [n for n in leaves(x.expr, "leaf") if n not in full]
        if len(full) != 1 or not all(_per_channel_of(self.r.buffers[n], x.shape)
                                     for n in vectors):
            return None
        source = full[0]
        at = [j for j, s in enumerate(self.r.steps) if s.output == source]
        if not at or not isinstance(self.r.steps[at[0]].template, Conv) or \
                any(b == source for s in self.r.steps for _, b in s.inputs):
            return None
        step = self.r.steps[at[0]]
        conv = step.template
        if conv.pooled or conv.rows or conv.stats:
            return None
        first = sum(1 for name, _ in step.inputs if name.startswith("E"))
        index = {n: first + k for k, n in enumerate(vectors)}
        chain = epilogue_steps(x.expr, ("leaf", source), index) or [
            ("expr", _renamed(x.expr, {("leaf", source): ("leaf", "y"),
                                       **{("leaf", n): ("vec", f"E{k}")
                                          for n, k in index.items()}}))]
        fused = attrs.evolve(conv, epilogue=(*conv.epilogue, *map(_step_tuple, chain)))
        probe = attrs.evolve(fused, epilogue=(*fused.epilogue, ("stats", True)))
        if probe.fitted()[0] == "fma" or not conv_fits(probe) or self._plain_stats(at[0]):
            return None
        out = self.r.fresh(x.shape)
        self.r.steps[at[0]] = attrs.evolve(
            step, template=fused, output=out,
            inputs=(*step.inputs, *((f"E{k}", n) for n, k in index.items())))
        self.r.unwritten.add(source)
        return self.r.leaf(out)

    def _per_channel(self, out, shape, weight, bias):
        """`out` (of `shape`, channels on axis 1) times `weight`, plus `bias`: broadcasts of
        the (C,) vectors, viewed as (C, 1, ...)."""
        view = (shape[1],) + (1,) * (len(shape) - 2)
        for fn, v in (("mul", weight), ("add", bias)):
            if v is not None:
                out = self.combine(fn, out, self._reshaped(v, view))
        return out

    def _affine_params(self, module, path, params):
        if module is None or not getattr(module, "affine", False):
            return None, None
        return (self.r.leaf(self.param(f"{path}.weight", params)),
                self.r.leaf(self.param(f"{path}.bias", params)))

    def op_group_norm(self, x, num_groups=None, weight=None, bias=None, eps=1e-5,
                      module=None, path=None, params=None, **_):
        """Statistics per (sample, group): x viewed as (N, G, C/G * rest), one row program;
        then the per-channel affine as a broadcast."""
        if module is not None:
            num_groups, eps = module.num_groups, module.eps
            weight, bias = self._affine_params(module, path, params)
        shape = x.shape
        if len(shape) < 2 or shape[1] % num_groups:
            raise Unsupported(f"group norm of {list(shape)} in {num_groups} groups")
        moments = self._conv_moments(x, True, num_groups, eps) if len(shape) > 2 else None
        if len(shape) > 2:
            n, c, per = shape[0], shape[1], shape[1] // num_groups
            if moments is not None:
                # the statistics per (sample, group) from the convolution's epilogue
                mean, inv = (self._reshaped(v, (n, num_groups, 1, 1)) for v in moments[:2])
                x = moments[2]
            else:
                # (N, G, C/G * spatial but the last, the last spatial axis): the few long
                # rows of a group norm over feature maps, reduced in stages
                # (`_reduce_staged`: the first strided, lanes along the last axis) so they
                # spread over the machine
                grouped = self._reshaped(x, (n, num_groups,
                                             _numel(shape[1:-1]) // num_groups, shape[-1]))
                mean, inv = self._moments(grouped, (2, 3), eps, staged=True)

            def per_channel(stat):
                # a group's value repeated for each of its channels: (N, C, 1, ...), so the
                # output is one broadcast over x's own view with the affine weight and bias
                # (x - mean in the grouped view would be written out whole, then reshaped)
                spread = self.r.buffer(Val((n, num_groups, per, 1),
                                           ("leaf", self.r.buffer(stat))))
                return self.r.leaf(self._alias(spread, (n, c) + (1,) * (len(shape) - 2)))

            out = self.combine("mul", self.combine("sub", x, per_channel(mean)),
                               per_channel(inv))
        else:
            grouped = self._reshaped(x, (shape[0], num_groups, shape[1] // num_groups))
            out = self._reshaped(self._normalised(grouped, (2,), eps), shape)
        return self._per_channel(out, shape, weight, bias)

    def op_batch_norm(self, x, *args, module=None, path=None, params=None, **kw):
        """Training mode (KernelBench's models are not put in eval mode): statistics over
        every axis but the channels (for an (N, C) input one strided row program; for
        (N, C, ...) axes 0, 2, ... are not adjacent, so reductions in stages); eval mode
        with running statistics: those. Then the affine, broadcast."""
        if module is None:
            raise Unsupported("F.batch_norm (use nn.BatchNorm*d)")
        shape, eps = x.shape, module.eps
        weight, bias = self._affine_params(module, path, params)
        if module.training or not module.track_running_stats:
            dims = (0,) + tuple(range(2, len(shape)))
            moments = self._conv_moments(x, False, shape[1], eps)
            if moments is not None:
                # the statistics from the convolution's epilogue, (1, C) as (C, 1, ...)
                view = (shape[1],) + (1,) * (len(shape) - 2)
                mean, inv = (self._reshaped(v, view) for v in moments[:2])
                out = self.combine("mul", self.combine("sub", moments[2], mean), inv)
                return self._per_channel(out, shape, weight, bias)
            out = self._normalised(x, dims, eps)
            if out.row is not None:
                out = self.r.leaf(self.r.buffer(out))
        else:
            mean = self._reshaped(self.r.leaf(self.param(f"{path}.running_mean", params)),
                                  (shape[1],) + (1,) * (len(shape) - 2))
            var = self._reshaped(self.r.leaf(self.param(f"{path}.running_var", params)),
                                 (shape[1],) + (1,) * (len(shape) - 2))
            inv = self.unary(self.combine("add", var, float(eps)),
                             lambda e: un("rcp", un("sqrt", e)))
            out = self.combine("mul", self.combine("sub", x, mean), inv)
        return self._per_channel(out, shape, weight, bias)

    def op_instance_norm(self, x, *args, module=None, path=None, params=None, **kw):
        if module is not None and (module.affine or module.track_running_stats):
            raise Unsupported("instance norm with affine weights or running statistics")
        dims = tuple(range(2, len(x.shape)))
        eps = module.eps if module is not None else kw.get("eps", 1e-5)
        moments = self._conv_moments(x, True, x.shape[1], eps)
        if moments is not None:
            view = x.shape[:2] + (1,) * (len(x.shape) - 2)
            mean, inv = (self._reshaped(v, view) for v in moments[:2])
            return self.combine("mul", self.combine("sub", moments[2], mean), inv)
        mean = self.reduce(x, "sum", dims, True, mean=True)
        centred = self.combine("sub", x, mean)
        var = self.reduce(self.unary(centred, lambda e: power(e, 2)), "sum", dims, True,
                          mean=True)
        inv = self.unary(self.combine("add", var, float(eps)),
                         lambda e: un("rcp", un("sqrt", e)))
        return self.combine("mul", centred, inv)

    # losses
    def op_mse_loss(self, a, b, reduction="mean", **_):
        return self._loss(self.unary(self.combine("sub", a, b), lambda e: power(e, 2)),
                          reduction)

    def op_smooth_l1_loss(self, a, b, reduction="mean", beta=1.0, delta=None, **_):
        beta = delta if delta is not None else beta

        def huber(e):
            mag = un("abs", e)
            near = bin_("min", mag, const(beta))
            return bin_("add", bin_("mul", bin_("mul", near, near), const(0.5 / beta)),
                        bin_("sub", mag, near))
        return self._loss(self.unary(self.combine("sub", a, b), huber), reduction)

    def op_kl_div(self, log_input, target, reduction="mean", log_target=False, **_):
        if log_target:
            raise Unsupported("kl_div with log_target=True")
        terms = self.combine("mul", target,
                             self.combine("sub", self.unary(target, log_), log_input))
        if reduction == "batchmean":
            return self.reduce(terms, "sum", None, False, per_row=True)
        return self._loss(terms, reduction)

    def _loss(self, terms, reduction):
        if reduction == "mean":
            return self.reduce(terms, "sum", None, False, mean=True)
        if reduction == "sum":
            return self.reduce(terms, "sum", None, False)
        raise Unsupported(f"a loss with reduction={reduction!r}")

    def op_pairwise_distance(self, a, b, p=2.0, eps=1e-6, keepdim=False):
        """||a - b + eps||_p along the last axis (torch's definition, eps inside)."""
        diff = self.combine("add", self.combine("sub", a, b), float(eps))
        if p in (2, 2.0):
            return self.unary(self.reduce(self.unary(diff, lambda e: power(e, 2)), "sum", -1,
                                          keepdim), lambda e: un("sqrt", e))
        if p in (1, 1.0):
            return self.reduce(self.unary(diff, lambda e: un("abs", e)), "sum", -1, keepdim)
        raise Unsupported(f"a pairwise distance with p={p}")

    def op_triplet_margin_loss(self, anchor, positive, negative, margin=1.0, p=2.0,
                               eps=1e-6, swap=False, reduction="mean", module=None, **_):
        """mean(max(d(a, p) - d(a, n) + margin, 0)), d the pairwise distance."""
        if module is not None:
            margin, p, eps = module.margin, module.p, module.eps
            swap, reduction = module.swap, module.reduction
        if swap:
            raise Unsupported("triplet_margin_loss with swap=True")
        if len(anchor.shape) != 2:
            raise Unsupported(f"triplet_margin_loss of {list(anchor.shape)} inputs (N, D only)")
        near = self.op_pairwise_distance(anchor, positive, p, eps)
        far = self.op_pairwise_distance(anchor, negative, p, eps)
        terms = self.unary(self.combine("add", self.combine("sub", near, far), float(margin)),
                           relu)
        if reduction == "none":
            return terms
        return self._loss(terms, reduction)

    def op_cross_entropy(self, x, target, weight=None, size_average=None, ignore_index=-100,
                         reduce=None, reduction="mean", label_smoothing=0.0):
        """mean over the rows of logsumexp(x) - x[target], one row program over the classes:
        the max, the sum of exponentials, and the picked logit as a sum of x where the
        position along the row equals the row's class index (no gather). A row whose target
        is `ignore_index` (any negative index) adds nothing and is not counted."""
        if weight is not None or label_smoothing or size_average is not None or \
                reduce is not None:
            raise Unsupported("cross_entropy with class weights, label smoothing or the legacy "
                              "size_average/reduce arguments")
        if not isinstance(target, Val) or target.space != "index" or len(x.shape) != 2 \
                or target.shape != x.shape[:1]:
            raise Unsupported("cross_entropy other than of (N, C) logits and (N,) class "
                              "indices (probabilities or spatial axes)")
        if x.shape[1] >= 1 << 24:
            raise Unsupported(f"cross_entropy over {x.shape[1]} classes (indices are compared "
                              "as f32, exact below 2**24)")
        if ignore_index >= 0:
            raise Unsupported(f"cross_entropy with ignore_index={ignore_index} (a class)")
        return self._picked_loss(x, target, reduction, log_softmax=True)

    def op_nll_loss(self, x, target, weight=None, size_average=None, ignore_index=-100,
                    reduce=None, reduction="mean"):
        if weight is not None or size_average is not None or reduce is not None:
            raise Unsupported("nll_loss with class weights or the legacy arguments")
        if not isinstance(target, Val) or target.space != "index" or len(x.shape) != 2 \
                or target.shape != x.shape[:1] or ignore_index >= 0:
            raise Unsupported("nll_loss other than of (N, C) log-probabilities and (N,) "
                              "class indices")
        return self._picked_loss(x, target, reduction, log_softmax=False)

    def _picked_loss(self, x, target, reduction, log_softmax: bool):
        """One row program over (N, C) with the stats [max, count, sum of exponentials,
        picked]: `count` is 1 for a row whose target is a class (>= 0), 0 for an ignored one
        (constant along the row), `picked` the sum of x where the position along the row is
        the target. The per-row terms (0 for an ignored row) and, for a mean, the counts are
        two launches of it; then whole-tensor sums."""
        index = ("index", target.expr[1])
        valid = bin_("ge", index, const(0.0))
        if x.mm is not None:
            x = self.r.leaf(self.r.buffer(x))
        x = self.flat(x)
        if x.row is not None:
            x = self.r.leaf(self.r.buffer(x))
        n = x.shape[0]
        m = self.reduce(x, "max", 1, True)
        row = Row(m.row.shape, m.row.axes,
                  m.row.stats + (("max", where(valid, const(1.0), const(0.0))),))
        count = Val((n,), ("stat", 1), "stat", row)
        full = Val(x.shape, x.expr, "full", row)
        shifted = self.combine("sub", full, attrs.evolve(m, row=row))
        s = self.reduce(self.unary(shifted, exp), "sum", 1, False)
        picked = self.reduce(Val(x.shape, where(bin_("eq", ("idx", "r"), index), x.expr,
                                                const(0.0)), "full", s.row), "sum", 1, False)
        if log_softmax:
            lse = self.combine("add", self.unary(s, log_), attrs.evolve(
                m, shape=(n,), row=picked.row))
            per_row = self.combine("sub", lse, picked)
        else:
            per_row = self.unary(picked, lambda e: un("neg", e))
        counted = bin_("gt", attrs.evolve(count, row=per_row.row).expr, const(0.5))
        terms = Val((n,), where(counted, per_row.expr, const(0.0)), "stat", per_row.row)
        if reduction == "none":
            return terms
        total = self.reduce(self.r.leaf(self.r.buffer(terms)), "sum", None, False)
        if reduction == "sum":
            return total
        if reduction != "mean":
            raise Unsupported(f"a loss with reduction={reduction!r}")
        rows = self.reduce(self.r.leaf(self.r.buffer(count)), "sum", None, False)
        return self.combine("mul", total, self.unary(rows, lambda e: un("rcp", e)))

    def op_cosine_similarity(self, a, b, dim=1, eps=1e-8):
        dot = self.reduce(self.combine("mul", a, b), "sum", dim, False)
        na = self.reduce(self.unary(a, lambda e: power(e, 2)), "sum", dim, False)
        nb = self.reduce(self.unary(b, lambda e: power(e, 2)), "sum", dim, False)
        denom = self.unary(self.combine("max", self.combine("mul", na, nb), eps * eps),
                           lambda e: un("rcp", un("sqrt", e)))
        return self.combine("mul", dot, denom)

    # shapes
    def _reshaped(self, x, shape):
        x = self.flat(x)
        if isinstance(x, Val) and x.row is None and x.mm is None and x.expr[0] != "tleaf":
            # each leaf (of x's own size) becomes a view of the new shape, so a later
            # broadcast reads it along the right axes
            renamed = {n: self._alias(n, shape) for n in leaves(x.expr, "leaf")
                       if self.r.buffers[n] != tuple(shape)}
            return Val(tuple(shape), _rename(x.expr, renamed))
        return self.r.leaf(self._alias(self.r.buffer(x), shape))

    def _alias(self, name: str, shape) -> str:
        alias = self.r.fresh(shape)
        self.r.steps.append(Step("view", (("x", name),), (), alias, ()))
        return alias

    def op_view(self, x, *shape):
        return self._reshaped(x, _shape_of(x, shape))

    op_reshape = op_view

    def op_flatten(self, x, start_dim=0, end_dim=-1, module=None, **_):
        if module is not None:
            start_dim, end_dim = module.start_dim, module.end_dim
        rank = len(x.shape)
        s, e = start_dim % rank, end_dim % rank
        shape = x.shape[:s] + (_numel(x.shape[s:e + 1]),) + x.shape[e + 1:]
        return self._reshaped(x, shape)

    def op_clone(self, x, memory_format=None):
        return x

    def op_detach(self, x):
        return x

    def op_contiguous(self, x):
        return x

    # an exclusive scan written as cat((zeros of one slice, cumsum(x.narrow(d, 0, n - 1))))
    def op_narrow(self, x, dim, start, length):
        d = dim % len(x.shape)
        if start == 0 and length == x.shape[d] - 1:
            return Pending("head", x, d)
        raise Unsupported("narrow other than to all but the last element (needs a slice)")

    def op_select(self, x, dim, index):
        if index == 0:
            return Pending("first", x, dim % len(x.shape))
        raise Unsupported("select of an element other than the first (needs a slice)")

    def op_cat(self, parts, dim=0):
        if len(parts) == 2 and isinstance(parts[0], Pending) and parts[0].kind == "zeros" \
                and isinstance(parts[1], Pending) and parts[1].kind == "scanned" \
                and parts[0].dim == parts[1].dim == dim % (len(parts[1].value.shape)) \
                and parts[0].value is parts[1].value:
            return parts[1].extra
        raise Unsupported("torch.cat (needs a copy template)")

    def op_unsqueeze(self, x, dim):
        if isinstance(x, Pending) and x.kind == "first":
            return x
        shape = list(x.shape)
        shape.insert(dim % (len(shape) + 1), 1)
        return self._reshaped(x, tuple(shape))

    def op_squeeze(self, x, dim=None):
        shape = [d for a, d in enumerate(x.shape) if not (d == 1 and (dim is None or a == dim
                                                                       % len(x.shape)))]
        return self._reshaped(x, tuple(shape))

    def op_transpose(self, x, d0, d1):
        rank = len(x.shape)
        dims = list(range(rank))
        dims[d0 % rank], dims[d1 % rank] = dims[d1 % rank], dims[d0 % rank]
        moved = self._moved_ones(x, dims)
        if moved is not None:
            return moved
        if {d0 % rank, d1 % rank} != {rank - 2, rank - 1}:
            raise Unsupported("a transpose other than of the last two axes")
        if x.expr[0] == "tleaf":
            return self.r.leaf(x.expr[1])
        name = self.r.buffer(x)
        shape = x.shape[:-2] + (x.shape[-1], x.shape[-2])
        return Val(shape, ("tleaf", name))

    def op_t(self, x):
        return self.op_transpose(x, 0, 1)

    def _moved_ones(self, x, dims):
        """`x` permuted by `dims` as a reshape when the axes of extent > 1 keep their order
        (only axes of extent 1 move), else None."""
        if not isinstance(x, Val) or x.expr[0] == "tleaf":
            return None
        order = [d for d in dims if x.shape[d] != 1]
        if order != sorted(order):
            return None
        return self._reshaped(x, tuple(x.shape[d] for d in dims))

    def op_permute(self, x, *dims):
        dims = dims[0] if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else dims
        rank = len(dims)
        moved = self._moved_ones(x, [d % rank for d in dims])
        if moved is not None:
            return moved
        if tuple(dims) == tuple(range(rank - 2)) + (rank - 1, rank - 2):
            return self.op_transpose(x, -1, -2)
        raise Unsupported(f"permute {list(dims)} (needs a transpose template)")

    def op_getattr(self, x, attr):
        if attr == "T" and isinstance(x, Val):
            return self.op_transpose(x, -1, -2)
        if attr == "shape":
            return x.shape
        if attr in ("device", "dtype"):     # for torch.tensor(c, device=x.device)
            return ("attr", attr)
        if attr == "values" and isinstance(x, tuple) and x and x[0] == "values":
            return x[1]
        raise Unsupported(f"the tensor attribute .{attr}")

    def op_tensor(self, data, dtype=None, device=None, requires_grad=False, **_):
        """`torch.tensor(c, device=x.device)`: a single value is a constant."""
        if _number(data):
            return float(data)
        raise Unsupported("torch.tensor of data other than one number")

    def op_size(self, x, dim=None):
        return x.shape if dim is None else x.shape[dim]

    # matmul
    def _operand(self, v):
        """(buffer, transposed) of a matmul operand."""
        if isinstance(v, Val) and v.expr[0] == "tleaf":
            return v.expr[1], True
        return self.r.buffer(v), False

    def op_matmul(self, a, b):
        (an, at), (bn, bt) = self._operand(a), self._operand(b)
        if len(a.shape) < 2 or len(b.shape) < 2:
            raise Unsupported("a matrix-vector product with a 1-D operand")
        if len(b.shape) > 3 or (len(b.shape) == 3 and len(a.shape) != 3):
            raise Unsupported(f"a matmul of {list(a.shape)} by {list(b.shape)}")
        *lead, m, k = a.shape
        n = b.shape[-1]
        if n == 1 and len(b.shape) == 2 and not at and isinstance(a, Val) and a.mm is None:
            return self._matvec(a, b, an, bn)
        if len(b.shape) == 3:
            batch, a_batched, b_batched = b.shape[0], True, True
            if a.shape[0] != b.shape[0]:
                raise Unsupported("a batched matmul with broadcast batches")
        else:
            batch, a_batched, b_batched = 1, False, False
            if at and lead:
                raise Unsupported("a transposed operand with batch axes")
            m = _numel(lead) * m
        a_view = (batch if a_batched else 1,) + ((k, m) if at else (m, k)) + (1,)
        b_view = (batch if b_batched else 1,) + ((n, k) if bt else (k, n)) + (1,)
        mm = Matmul(a_order="km" if at else "mk", b_order="nk" if bt else "kn",
                    a_batched=a_batched, b_batched=b_batched)
        self.r.mm_flops += 2.0 * batch * m * n * k
        shape = tuple(lead) + (a.shape[-2], n) if len(b.shape) == 2 else (batch, a.shape[-2], n)
        return Val(shape, ("acc",), "mm", None,
                   (mm, an, bn, (batch, m, n, 1), ((an, a_view), (bn, b_view))))

    def op_einsum(self, equation, *operands):
        """A two-operand einsum that is a (batched) matrix product: indices shared by every
        term lead (the batch), then the first operand's free indices, the contracted ones,
        the second's free ones, in that order in each term (B may hold its free indices
        first: a transposed operand)."""
        if len(operands) == 1 and isinstance(operands[0], list | tuple):
            operands = tuple(operands[0])
        spec = equation.replace(" ", "")
        if "..." in spec or "->" not in spec or len(operands) != 2:
            raise Unsupported(f"einsum {equation!r} (two operands and an explicit output "
                              "only)")
        (ta, tb), out = spec.split("->")[0].split(","), spec.split("->")[1]
        a, b = operands
        if len(ta) != len(a.shape) or len(tb) != len(b.shape) or \
                len(set(ta)) != len(ta) or len(set(tb)) != len(tb):
            raise Unsupported(f"einsum {equation!r} (repeated indices: a diagonal)")
        batch = "".join(c for c in out if c in ta and c in tb)
        contracted = "".join(c for c in ta if c in tb and c not in out)
        free_a = "".join(c for c in ta if c not in tb)
        free_b = "".join(c for c in tb if c not in ta)
        size = dict(zip(ta, a.shape)) | dict(zip(tb, b.shape))
        if not contracted or ta != batch + free_a + contracted or out != batch + free_a + \
                free_b or tb not in (batch + contracted + free_b, batch + free_b + contracted):
            raise Unsupported(f"einsum {equation!r}: not a matrix product of its operands in "
                              "their order (needs a transpose template)")

        def extent(letters):
            return _numel([size[c] for c in letters])
        lead = (extent(batch),) if batch else ()
        a2 = self._reshaped(a, lead + (extent(free_a), extent(contracted)))
        if tb == batch + contracted + free_b:
            b2 = self._reshaped(b, lead + (extent(contracted), extent(free_b)))
        else:
            b2 = self.op_transpose(self._reshaped(b, lead + (extent(free_b),
                                                             extent(contracted))), -1, -2)
        product = self.op_matmul(a2, b2)
        return self._reshaped_mm(product, tuple(size[c] for c in out))

    def _reshaped_mm(self, v, shape):
        """A matmul's result viewed as `shape` (the epilogue stays pending when only the
        shape changes, since the result is a buffer of the same elements)."""
        if v.mm is not None:
            return self._reshaped(self.r.leaf(self.r.buffer(v)), shape)
        return self._reshaped(v, shape)

    def op_scaled_dot_product_attention(self, q, k, v, attn_mask=None, dropout_p=0.0,
                                        is_causal=False, scale=None, enable_gqa=False):
        """softmax(Q K^T * scale) V over (..., S, D) with the leading axes as one batch: a
        batched matmul with the scale in its epilogue, a row softmax, a batched matmul."""
        if attn_mask is not None or dropout_p or is_causal or enable_gqa:
            raise Unsupported("scaled_dot_product_attention with a mask, dropout, causal or "
                              "grouped-query heads")
        *lead, s, d = q.shape
        if len(k.shape) != len(q.shape) or tuple(k.shape[:-2]) != tuple(lead) or \
                k.shape[-1] != d or tuple(v.shape[:-1]) != tuple(k.shape[:-1]):
            raise Unsupported("scaled_dot_product_attention with broadcast operands")
        batch = _numel(lead)
        scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
        q3 = self._reshaped(q, (batch, s, d))
        k3 = self._reshaped(k, (batch, k.shape[-2], d))
        v3 = self._reshaped(v, (batch, v.shape[-2], v.shape[-1]))
        # the scale comes from a size, so it reaches the kernel as data (a vector along N)
        keys = k.shape[-2]
        scales = self.r.leaf(self.r.vec_fill(scale, keys))
        scores = self.combine("mul", self.op_matmul(q3, self.op_transpose(k3, -1, -2)), scales)
        weights = self._softmax(scores, -1, log=False)
        out = self.op_matmul(weights, v3)
        return self._reshaped_mm(out, (*lead, s, v.shape[-1]))

    def _matvec(self, a: Val, b: Val, an: str, bn: str) -> Val:
        """A @ b with b a (K, 1) column: one row program per row of A, the sum of A times b
        as a vector along the row (a 32x32 MFMA block would spend 31/32 of its work, or
        127/128 of a 128-wide block, on the missing columns)."""
        k = a.shape[-1]
        rows = self._reshaped(self.r.leaf(an), (_numel(a.shape[:-1]), k))
        row = Row(rows.shape, (1,))
        column = self.r.leaf(self._alias(bn, (k,)))
        flops = self.r.valu_flops
        product = self.combine("mul", Val(rows.shape, rows.expr, "full", row), column)
        out = self.reduce(product, "sum", 1, True)
        self.r.valu_flops = flops           # counted once, as the matmul's FLOPs
        self.r.mm_flops += 2.0 * _numel(a.shape)
        return attrs.evolve(out, shape=tuple(a.shape[:-1]) + (1,))

    def op_linear(self, x, weight=None, bias=None, module=None, path=None, params=None):
        if module is not None:
            weight = self.r.leaf(self.param(f"{path}.weight", params))
            bias = (self.r.leaf(self.param(f"{path}.bias", params))
                    if module.bias is not None else None)
        out = self.op_matmul(x, self.op_transpose(weight, 0, 1))
        return self.combine("add", out, bias) if bias is not None else out


def log_(e):
    return log(e)


def _tuple(value, dims: int, what: str) -> tuple[int, ...]:
    values = (value,) * dims if isinstance(value, int) else tuple(value)
    if len(values) != dims or not all(isinstance(v, int) for v in values):
        raise Unsupported(f"a {what} of {value!r} for {dims} spatial dimension(s)")
    return tuple(int(v) for v in values)


class _ConvHandlers:
    """Convolutions and pooling (mixed into Interpreter): each a `Conv` or `Pool` launch whose
    host side moves torch's layout to the kernel's phase views (`templates.Conv.run`)."""

    def _conv(self, dims, transposed, x, weight=None, bias=None, stride=1, padding=0,
              output_padding=0, groups=1, dilation=1, module=None, path=None, params=None):
        kind = f"conv{'_transpose' if transposed else ''}{dims}d"
        if module is not None:
            if module.padding_mode != "zeros":
                raise Unsupported(f"{kind}: a convolution with padding_mode "
                                  f"{module.padding_mode!r} (only zeros)")
            stride, padding, dilation = module.stride, module.padding, module.dilation
            groups = module.groups
            output_padding = module.output_padding if transposed else 0
            weight = self.r.leaf(self.param(f"{path}.weight", params))
            bias = (self.r.leaf(self.param(f"{path}.bias", params))
                    if module.bias is not None else None)
        if not isinstance(x, Val) or len(x.shape) != dims + 2:
            raise Unsupported(f"{kind} of a {getattr(x, 'shape', x)!r} input (batched "
                              f"N, C and {dims} spatial axes only)")
        if not isinstance(weight, Val) or weight.expr[0] != "leaf":
            raise Unsupported(f"{kind} with a computed weight")
        window = tuple(int(k) for k in self.r.buffers[weight.expr[1]][2:])
        dilation = _tuple(dilation, dims, "dilation")
        if isinstance(padding, str):
            if padding == "valid":
                padding = 0
            elif padding == "same" and not transposed and all(
                    d * (k - 1) % 2 == 0 for k, d in zip(window, dilation)):
                padding = tuple(d * (k - 1) // 2 for k, d in zip(window, dilation))
            else:
                raise Unsupported(f"{kind} with padding={padding!r} and an asymmetric window")
        stride, padding = _tuple(stride, dims, "stride"), _tuple(padding, dims, "padding")
        output_padding = _tuple(output_padding, dims, "output_padding")
        epilogue = ("bias",) if bias is not None else ()
        template = Conv(dims, window, stride, padding, dilation, bool(transposed),
                        output_padding, int(groups), epilogue)
        n, c, spatial = x.shape[0], x.shape[1], x.shape[2:]
        wshape = self.r.buffers[weight.expr[1]]
        oc = wshape[1] * groups if transposed else wshape[0]
        from argus.kernels.conv import conv_engine

        out = template.out_spatial(spatial)
        engine, tiles = conv_engine(c // groups, oc // groups,
                                    math.prod(stride) if transposed else 1,
                                    -(-out[-1] // stride[-1]) if transposed else out[-1],
                                    math.prod(window), max(dilation))
        if self.r.convs < len(self.r.pins):
            engine, tiles = self.r.pins[self.r.convs][:2]
        self.r.convs += 1
        template = attrs.evolve(template, engine=engine, tiles=tuple(tiles))
        out = template.out_spatial(spatial)
        if min(out) < 1:
            raise Unsupported(f"{kind} with an empty output {out}")
        shape = (n, oc, *out)
        self.r.mm_flops += _conv_flops(template, x.shape, shape)
        inputs = [("x", self.r.buffer(x)), ("weight", weight.expr[1])]
        if bias is not None:
            if not isinstance(bias, Val) or bias.expr[0] != "leaf":
                raise Unsupported(f"{kind} with a computed bias")
            inputs.append(("bias", bias.expr[1]))
        name = self.r.fresh(shape)
        self.r.steps.append(Step(template, tuple(inputs), (), name, ()))
        return self.r.leaf(name)

    def op_conv1d(self, x, *args, **kw):
        return self._conv(1, False, x, *args, **kw)

    def op_conv2d(self, x, *args, **kw):
        return self._conv(2, False, x, *args, **kw)

    def op_conv3d(self, x, *args, **kw):
        return self._conv(3, False, x, *args, **kw)

    def _conv_t(self, dims, x, weight=None, bias=None, stride=1, padding=0, output_padding=0,
                groups=1, dilation=1, **kw):
        return self._conv(dims, True, x, weight, bias, stride, padding, output_padding,
                          groups, dilation, **kw)

    def op_conv_transpose1d(self, x, *args, **kw):
        return self._conv_t(1, x, *args, **kw)

    def op_conv_transpose2d(self, x, *args, **kw):
        return self._conv_t(2, x, *args, **kw)

    def op_conv_transpose3d(self, x, *args, **kw):
        return self._conv_t(3, x, *args, **kw)

    def _pool(self, dims, kind, x, kernel_size=None, stride=None, padding=0, dilation=1,
              ceil_mode=False, count_include_pad=True, divisor_override=None,
              return_indices=False, module=None, path=None, params=None):
        what = f"{kind}_pool{dims}d"
        if module is not None:
            kernel_size, stride, padding = module.kernel_size, module.stride, module.padding
            ceil_mode = module.ceil_mode
            if kind == "max":
                dilation, return_indices = module.dilation, module.return_indices
            else:
                count_include_pad = module.count_include_pad
                divisor_override = getattr(module, "divisor_override", None)
        if ceil_mode or return_indices:
            raise Unsupported(f"{what} with ceil_mode or return_indices")
        if kind == "avg" and (not count_include_pad or divisor_override is not None):
            raise Unsupported(f"{what} with count_include_pad=False or a divisor_override")
        if not isinstance(x, Val) or len(x.shape) not in (dims + 1, dims + 2):
            raise Unsupported(f"{what} of a {getattr(x, 'shape', x)!r} input")
        window = _tuple(kernel_size, dims, "kernel_size")
        stride = window if stride is None or stride == [] or stride == () else \
            _tuple(stride, dims, "stride")
        template = Pool(dims, kind, window, stride, _tuple(padding, dims, "padding"),
                        _tuple(dilation, dims, "dilation")).fitted(x.shape[-dims:])
        out = template.out_spatial(x.shape[-dims:])
        if min(out) < 1:
            raise Unsupported(f"{what} with an empty output {out}")
        shape = (*x.shape[:-dims], *out)
        self.r.valu_flops += float(_numel(shape) * math.prod(window))
        name = self.r.fresh(shape)
        self.r.steps.append(Step(template, (("x", self.r.buffer(x)),), (), name, ()))
        return self.r.leaf(name)

    def op_max_pool1d(self, x, kernel_size=None, stride=None, padding=0, dilation=1,
                      ceil_mode=False, return_indices=False, **kw):
        return self._pool(1, "max", x, kernel_size, stride, padding, dilation, ceil_mode,
                          return_indices=return_indices, **kw)

    def op_max_pool2d(self, x, kernel_size=None, stride=None, padding=0, dilation=1,
                      ceil_mode=False, return_indices=False, **kw):
        return self._pool(2, "max", x, kernel_size, stride, padding, dilation, ceil_mode,
                          return_indices=return_indices, **kw)

    def op_max_pool3d(self, x, kernel_size=None, stride=None, padding=0, dilation=1,
                      ceil_mode=False, return_indices=False, **kw):
        return self._pool(3, "max", x, kernel_size, stride, padding, dilation, ceil_mode,
                          return_indices=return_indices, **kw)

    def op_avg_pool1d(self, x, kernel_size=None, stride=None, padding=0, ceil_mode=False,
                      count_include_pad=True, **kw):
        return self._pool(1, "avg", x, kernel_size, stride, padding, 1, ceil_mode,
                          count_include_pad, **kw)

    def op_avg_pool2d(self, x, kernel_size=None, stride=None, padding=0, ceil_mode=False,
                      count_include_pad=True, divisor_override=None, **kw):
        return self._pool(2, "avg", x, kernel_size, stride, padding, 1, ceil_mode,
                          count_include_pad, divisor_override, **kw)

    def op_avg_pool3d(self, x, kernel_size=None, stride=None, padding=0, ceil_mode=False,
                      count_include_pad=True, divisor_override=None, **kw):
        return self._pool(3, "avg", x, kernel_size, stride, padding, 1, ceil_mode,
                          count_include_pad, divisor_override, **kw)


def _shape_of(x, shape) -> tuple[int, ...]:
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (list, tuple)) else shape
    shape = [int(s) for s in shape]
    if -1 in shape:
        known = _numel([s for s in shape if s != -1])
        shape[shape.index(-1)] = _numel(x.shape) // known
    return tuple(shape)


class Interpreter(_ConvHandlers, _Handlers, _Core):
    """Walks the fx graph, one handler per op, building `Val`s on a `Router`."""


# --------------------------------------------------------------- epilogue split (rewrite)
#: the epilogue steps a convolution keeps when its fused chain is split off: its own bias
#: and residual (torch's convolution computes them, not the elementwise ops after it)
CONV_OWN = ("bias", "residual")


def _contains(e: Expr, part: Expr) -> bool:
    return e == part or (e[0] in ("un", "bin", "where") and any(
        isinstance(x, tuple) and _contains(x, part) for x in e[1:]))


def _vec_to_leaf(e: Expr) -> Expr:
    """A matmul epilogue's vectors along N as leaves (a broadcast launch reads them)."""
    if e[0] == "vec":
        return ("leaf", e[1])
    if e[0] in ("un", "bin", "where"):
        return (e[0], *((_vec_to_leaf(x) if isinstance(x, tuple) else x) for x in e[1:]))
    return e


def _conv_step_expr(step, x: Expr) -> Expr:
    """One `conv_kernel` epilogue step applied to `x`, in the route's expression form (what
    `epilogue_steps` reads back)."""
    name, *args = (step,) if isinstance(step, str) else step
    if name == "scale":
        return bin_("mul", x, const(args[0]))
    if name == "clamp":
        return clamp(x, None if args[0] <= -OPEN else args[0],
                     None if args[1] >= OPEN else args[1])
    if name == "expr":
        return _renamed(args[0], {("leaf", "y"): x})
    known = {"relu": relu, "sigmoid": sigmoid, "tanh": tanh, "gelu": gelu}
    if name not in known:
        raise Unsupported(f"splitting the convolution epilogue step {step!r} off (the split "
                          f"writes {sorted(known)}, scale and clamp)")
    return known[name](x)


def _split_parts(template) -> tuple | None:
    """(what the step keeps, the moved part as an expression over ("leaf", "\\0pre")), or
    None when the step has no fused elementwise part a separate launch can compute."""
    pre = ("leaf", "\0pre")
    if isinstance(template, Conv):
        if template.pooled or template.rows:   # pooled or reduced after it: kept whole
            return None
        kept = 0
        names = [s if isinstance(s, str) else s[0] for s in template.epilogue]
        while kept < len(names) and names[kept] in CONV_OWN:
            kept += 1
        moved = template.epilogue[kept:]
        # a vector step needs a broadcast launch of its own: kept whole
        if not moved or any(n in (*CONV_OWN, "vec") for n in names[kept:]) or any(
                leaves(s[1], "vec") for s in moved if not isinstance(s, str) and
                s[0] == "expr"):
            return None
        expr = pre
        for step in moved:
            expr = _conv_step_expr(step, expr)
        return template.epilogue[:kept], expr
    if isinstance(template, Matmul):
        e = template.epilogue
        core: Expr = ("acc",)
        for v in leaves(e, "vec"):       # a bias along N stays with the matmul (nn.Linear's)
            for cand in (("bin", "add", ("acc",), ("vec", v)),
                         ("bin", "add", ("vec", v), ("acc",))):
                if _contains(e, cand) and not _contains(_replace(e, cand, pre), ("acc",)):
                    core = cand
        rest = _replace(e, core, pre)
        if rest == pre or leaves(rest, "idx"):   # nothing after it, or a row/column mask
            return None
        return core, _vec_to_leaf(rest)
    return None


def splittable(step: Step) -> bool:
    """Does `split_epilogue` apply to this step (a matmul or convolution with a fused
    elementwise part beyond its own bias)?"""
    return step.template != "view" and _split_parts(step.template) is not None


def split_epilogue(plan: Plan, index: int) -> Plan:
    """`plan` with step `index`'s fused elementwise epilogue (a matmul's beyond its bias along
    N, a convolution's beyond its bias and residual) moved to a launch of its own right after
    it (`Elementwise`, or `Broadcast` when it reads vectors along N), through a new buffer:
    the route's fusion undone, so a search can compare the two."""
    step = plan.steps[index]
    parts = None if step.template == "view" else _split_parts(step.template)
    if parts is None:
        raise Unsupported(f"step {index} ({type(step.template).__name__}) has no fused "
                          "elementwise epilogue to split off")
    kept, rest = parts
    shapes = dict(plan.shapes)
    pre = f"{step.output}.pre"
    while pre in shapes:
        pre += "'"
    shapes[pre] = shapes[step.output]
    rest = _rename(rest, {"\0pre": pre})
    views = dict(step.views)
    if isinstance(step.template, Conv):
        first = attrs.evolve(step, template=attrs.evolve(step.template, epilogue=kept),
                             output=pre)
    else:
        mm = attrs.evolve(step.template, epilogue=kept)
        if step.output in views:
            views[pre] = views.pop(step.output)
        first = attrs.evolve(step, template=mm, vectors=tuple((n, n) for n in mm.vectors),
                             output=pre, views=tuple(views.items()))
    names = leaves(rest, "leaf")
    n = _numel(shapes[step.output])
    if names == [pre]:
        second = Step(Elementwise(rest), ((pre, pre),), (), step.output,
                      ((pre, (n, 1)), (step.output, (n, 1))))
    else:                                # a matmul's vectors along N: C of its (BC, M, N)
        view = tuple(views[pre][:3])
        if -(-view[0] // BATCH) > GRID_LIMIT or -(-view[1] // 4) > GRID_LIMIT:
            raise Unsupported(f"splitting step {index}'s epilogue: a broadcast over {view} "
                              "is beyond the grid's limits (65535 along its second and third "
                              "axes)")
        kinds = tuple((x, "abc" if x == pre else "c") for x in names)
        template = Broadcast(rest, kinds, **broadcast_tile(view))
        second = Step(template, tuple((x, x) for x in names), (), step.output,
                      tuple((x, view if x == pre else (view[2],)) for x in names)
                      + ((step.output, view),))
    steps = (*plan.steps[:index], first, second, *plan.steps[index + 1:])
    return attrs.evolve(plan, steps=steps, shapes=shapes)

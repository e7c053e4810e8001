"""Reductions, broadcasts and scans whose axis a wave does not hold whole, composed of ops
the verifier, interpreter and backend already know. Where the layout allows, each wave first
combines what it holds in place (a relabelled view, `T.slots`): its block of every line for a
reduction, its 64-lane chunks for a scan; otherwise the tile is staged through LDS into such
chunks. The partial results (line blocks, chunk totals, chunk offsets) cross through small
LDS buffers to threads that hold a whole line in their slots, and come back to the layout the
author asked for. Every LDS step has one writer per address and a barrier before its
readers, so the traffic is proved like any other (barriers, bounds, tags).
"""

from __future__ import annotations

import math

import numpy as np

from argus.ir.expr import And, Const, Expr, as_expr, min_, simplify
from argus.ir.types import LANES, AddressMap, ThreadLayout, coord_vars, thread_vars
from argus.lang.control import lanes
from argus.lang.errors import DSLError, user_loc
from argus.lang.layouts import TileSpec, reduced
from argus.lang.trace import (
    Lds,
    Tile,
    barrier,
    current_builder,
    iota,
    lds,
    mask,
    shuffle,
    tidy,
    where,
)

#: the element that leaves a combination unchanged, and the elementwise combination
IDENTITY = {"sum": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf}
COMBINE = {"sum": lambda a, b: a + b, "prod": lambda a, b: a * b}


def spans_waves(spec: TileSpec, axis: int) -> bool:
    """Whether some wave holds part, but not all, of a line along `axis` (the in-wave
    exchange would combine only that part)."""
    table = [np.asarray(c, np.int64) for c in spec.layout.table()]
    key = np.zeros(table[0].shape, np.int64)
    for k, c in enumerate(table):
        if k != axis:
            key = key * spec.shape[k] + c
    extent = spec.shape[axis]
    for w in range(spec.layout.waves):
        pairs = np.unique(np.stack([key[w].ravel(), table[axis][w].ravel()]), axis=1)
        _, counts = np.unique(pairs[0], return_counts=True)
        if (counts != extent).any():
            return True
    return False


def in_wave_scan(x: Tile, fn: str, axis: int, n: int, *, reverse: bool, exclusive: bool
                 ) -> Tile:
    """Prefix `fn` along `axis` whose coordinate is lane % n (n a power of two <= 64): log2(n)
    lane rotations (ds_bpermute), each combined where the source lies in the same run."""
    combine, identity = COMBINE[fn], IDENTITY[fn]
    position = iota(x.spec, axis)
    if reverse:
        position = (n - 1) - position
    step, acc = 1, x
    while step < n:
        moved = shuffle(acc, "bpermute.rotate", (LANES - step) % LANES if not reverse else step)
        acc = where(position >= float(step), combine(acc, moved), acc)
        step *= 2
    if exclusive:
        moved = shuffle(acc, "bpermute.rotate", LANES - 1 if not reverse else 1)
        acc = where(position >= 1.0, moved, identity)
    return acc


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


class _Lines:
    """The geometry of one cross-wave operation on a tile of shape `shape` along `axis`: its
    lines (the other coordinates), each of C chunks of m elements (m = gcd(extent, 64)).
    Every other extent and C are padded to powers of two, so the backend divides by shifts
    only: padded lines read a copy of the last real one (never stored back), padded chunks
    read as the combination's identity."""

    def __init__(self, shape: tuple[int, ...], axis: int, waves: int, loc):
        self.shape, self.axis, self.waves, self.loc = tuple(shape), axis, waves, loc
        self.extent = shape[axis]
        self.others = [k for k in range(len(shape)) if k != axis]
        self.padded = [_pow2(shape[k]) for k in self.others]
        self.lines = math.prod(self.padded)                   # the padded line count
        self.chunk = math.gcd(self.extent, LANES)            # m: a power of two <= 64
        self.real_chunks = self.extent // self.chunk
        self.chunks = _pow2(self.real_chunks)                 # C, padded
        self.threads = waves * LANES

    # -- LDS views

    def _line_of(self, coords) -> Expr:
        """The padded line index of a tile coordinate (the axis left out)."""
        line: Expr = Const(0)
        for k, extent in zip(self.others, self.padded):
            line = line * extent + coords[k]
        return line

    def tile_view(self, buffer: Lds) -> Lds:
        """The tile row-major (x as it was staged)."""
        coords = coord_vars(self.shape)
        offset: Expr = Const(0)
        for c, extent in zip(coords, self.shape):
            offset = offset * extent + c
        return Lds(buffer.value, AddressMap(self.shape, tidy(offset)))

    def clamped(self, line: Expr) -> list[Expr]:
        """The tile coordinates (the axis left 0) of padded line `line`, each clamped into the
        tile: a padded line reads a copy of a real one."""
        coords: list[Expr] = [Const(0)] * len(self.shape)
        rest = line
        for k, extent in reversed(list(zip(self.others, self.padded))):
            part = rest % extent if k != self.others[0] else rest
            coords[k] = min_(part, self.shape[k] - 1) if extent != self.shape[k] else part
            rest = rest // extent
        return coords

    def chunk_view(self, buffer: Lds) -> Lds:
        """The row-major tile read as (lines, C, m), line and element clamped into the tile."""
        c0, c1, c2 = coord_vars((self.lines, self.chunks, self.chunk))
        coords = self.clamped(c0)
        along = c1 * self.chunk + c2
        coords[self.axis] = (min_(along, self.extent - 1) if self.chunks != self.real_chunks
                             else along)
        offset: Expr = Const(0)
        for c, extent in zip(coords, self.shape):
            offset = offset * extent + c
        shape = (self.lines, self.chunks, self.chunk)
        return Lds(buffer.value, AddressMap(shape, tidy(offset)))

    def wave_views(self, buffer: Lds) -> tuple[Lds, Lds]:
        """The per-wave partials: written as (other coordinates..., wave), read as (lines,
        wave) with padded lines clamped."""
        shape = self.shape[:self.axis] + self.shape[self.axis + 1:] + (self.waves,)
        coords = coord_vars(shape)
        full = list(coords[:self.axis]) + [Const(0)] + list(coords[self.axis:-1])
        write = AddressMap(shape, tidy(self._line_of(full) * self.waves + coords[-1]))
        c0, c1 = coord_vars((self.lines, self.waves))
        read = AddressMap((self.lines, self.waves),
                          tidy(self._line_of(self.clamped(c0)) * self.waves + c1))
        return Lds(buffer.value, write), Lds(buffer.value, read)

    def result_view(self, buffer: Lds) -> Lds:
        """(lines, C, m) line-major: where a scan puts its result back."""
        shape = (self.lines, self.chunks, self.chunk)
        c0, c1, c2 = coord_vars(shape)
        return Lds(buffer.value, AddressMap(shape, tidy((c0 * self.chunks + c1) * self.chunk
                                                        + c2)))

    def result_tile_view(self, buffer: Lds) -> Lds:
        """The scan's result read back at the tile's coordinates."""
        coords = coord_vars(self.shape)
        offset = self._line_of(coords) * (self.chunks * self.chunk) + coords[self.axis]
        return Lds(buffer.value, AddressMap(self.shape, tidy(offset)))

    def line_view(self, buffer: Lds, shape: tuple[int, ...], dims: int) -> Lds:
        """A buffer of one value per (line[, chunk]) read through `shape`, whose first `dims`
        coordinates name the entry (the others are ignored: a broadcast)."""
        coords = coord_vars(shape)
        offset: Expr = Const(0)
        for k in range(dims):
            offset = offset * shape[k] + coords[k]
        return Lds(buffer.value, AddressMap(shape, tidy(offset)))

    def broadcast_view(self, buffer: Lds) -> Lds:
        """The line results read at every element of the tile (the line of its coordinates)."""
        return Lds(buffer.value, AddressMap(self.shape, tidy(self._line_of(
            coord_vars(self.shape)))))

    def out_view(self, buffer: Lds) -> Lds:
        """The line results read as the reduced tile (the axis dropped)."""
        shape = self.shape[:self.axis] + self.shape[self.axis + 1:]
        coords = coord_vars(shape)
        full = list(coords[:self.axis]) + [Const(0)] + list(coords[self.axis:])
        return Lds(buffer.value, AddressMap(shape, tidy(self._line_of(full))))

    # -- register layouts

    def chunk_spec(self) -> tuple[TileSpec, Expr]:
        """(L, C, m) with each chunk on m lanes of one wave (lane % m its element), and the
        condition selecting one holder of every element (the wrapped copies stay silent)."""
        elements = self.lines * self.chunks * self.chunk
        wave, lane, slot = thread_vars(self.waves, max(1, elements // self.threads))
        thread = wave * LANES + lane
        if elements <= self.threads:
            e = thread if elements == self.threads else thread % elements
            slots, writer = 1, (thread < elements if elements < self.threads else Const(True))
        elif elements % self.threads == 0:
            slots, writer = elements // self.threads, Const(True)
            e = slot * self.threads + thread
        else:
            raise self._no_fit(f"{elements} elements do not split evenly over "
                               f"{self.threads} threads")
        wave, lane, slot = thread_vars(self.waves, slots)
        group = e // self.chunk
        layout = ThreadLayout(self.waves, slots, (group // self.chunks, group % self.chunks,
                                                  e % self.chunk))
        return TileSpec((self.lines, self.chunks, self.chunk), layout), as_expr(writer)

    def slot_spec(self, items: int, shape: tuple[int, ...], inner: int) -> tuple[TileSpec, Expr]:
        """`items` entries (the leading coordinates of `shape`, row-major) over the threads,
        each thread holding an entry's `inner` values (the last coordinate) in its slots, and
        the condition selecting one holder of every entry."""
        if items > self.threads and items % self.threads:
            raise self._no_fit(f"{items} lines do not split evenly over {self.threads} threads")
        per = max(1, items // self.threads)
        wave, lane, slot = thread_vars(self.waves, inner * per)
        thread = wave * LANES + lane
        if items > self.threads:
            item, writer = (slot // inner) * self.threads + thread, Const(True)
        elif items == self.threads:
            item, writer = thread, Const(True)
        else:
            item, writer = thread % items, thread < items
        coords: list[Expr] = [slot % inner if inner > 1 else Const(0)]
        rest = item
        for k in reversed(range(len(shape) - 1)):
            coords.insert(0, rest % shape[k] if k else rest)
            rest = rest // shape[k]
        return (TileSpec(shape, ThreadLayout(self.waves, inner * per, tuple(coords))),
                as_expr(writer))

    def _no_fit(self, why: str) -> DSLError:
        return DSLError(f"a {'x'.join(map(str, self.shape))} tile reduced or scanned along "
                        f"axis {self.axis} across waves: {why}", self.loc,
                        "pick sizes whose element count is a multiple of "
                        f"{self.threads} (64 lanes x {self.waves} waves) or at most that")


def _buffer(elements: int) -> Lds:
    """A scratch LDS buffer of `elements` f32: one no other cross-wave op of this kernel
    is using now, reused where one of this size is visible in the open block (every op starts
    with a barrier, so the last op's readers are done before the memory is written again)."""
    builder = current_builder()
    for entry in builder.scratch:
        block, size, buffer, busy = entry
        if size == elements and not busy and any(block is b for b in builder.blocks):
            entry[3] = True
            return buffer
    buffer = lds((elements,), "f32", addr=AddressMap((elements,), coord_vars((elements,))[0]))
    builder.scratch.append([builder.blocks[-1], elements, buffer, True])
    return buffer


def _outside_lanes(what: str, loc) -> None:
    """The LDS steps put barriers between waves, which every wave must reach."""
    if current_builder().active:
        raise DSLError(f"{what} across waves inside a T.lanes block: it goes through LDS with "
                       "workgroup barriers, which every wave must reach", loc,
                       "reduce or scan before the T.lanes block and use the result inside it")


def _both(a: Expr, b: Expr) -> Expr:
    return b if isinstance(a, Const) and a.value else And(a, b)


def _release() -> None:
    for entry in current_builder().scratch:
        entry[3] = False


def _writers(spec: TileSpec, loc) -> Expr:
    """A condition on (wave, lane) under which every element of `spec` is stored once: all
    threads, the first n threads, or the first n lanes (or every n-th) of each wave."""
    table = np.stack([np.asarray(c, np.int64) for c in spec.layout.table()], -1)
    flat = np.ravel_multi_index(tuple(np.moveaxis(table, -1, 0)), spec.shape)
    size = math.prod(spec.shape)
    waves = spec.layout.waves
    wave, lane, _ = thread_vars(waves, 1)
    thread = wave * LANES + lane
    threads = waves * LANES
    ids = np.arange(threads)
    candidates = [(Const(True), ids >= 0)]
    candidates += [(thread < n, ids < n) for n in range(1, threads)]
    candidates += [(lane < n, ids % LANES < n) for n in range(1, LANES)]
    candidates += [((lane % n).eq(0), ids % n == 0) for n in (2, 4, 8, 16, 32)]
    by_thread = flat.reshape(threads, -1)
    for condition, chosen in candidates:
        written = by_thread[chosen].ravel()
        if len(written) == size and len(np.unique(written)) == size:
            return as_expr(condition)
    raise DSLError(f"the tile's layout holds some element in several threads in a way the "
                   f"cross-wave {'x'.join(map(str, spec.shape))} staging cannot pick one "
                   "writer for", loc, "lay the tile out with each element in one thread "
                   "(T.copy_layout)")


def _store(view: Lds, tile: Tile, writer: Expr) -> None:
    """Store `tile` through `view`, only the threads where `writer` holds (written in the
    wave and lane variables of `thread_vars`)."""
    if isinstance(writer, Const) and writer.value:
        view.store(tuple(0 for _ in view.shape), tile)
        return
    with lanes(lambda wave, lane: writer):
        view.store(tuple(0 for _ in view.shape), tile)


def _load(view: Lds, spec: TileSpec) -> Tile:
    return view.load(tuple(0 for _ in view.shape), spec)


def _stage(x: Tile, fn: str, axis: int, loc) -> tuple[_Lines, Lds, Tile]:
    """x into LDS (after a barrier, so earlier readers of reused memory are done), read back
    as (lines, C, m) chunks, the padded chunks holding the identity of `fn`."""
    if x.dtype != "f32":
        raise DSLError(f"a {x.dtype} tile reduced or scanned across waves: the cross-wave "
                       "path stages f32 tiles", loc, "cast the tile to f32 first (x.to('f32'))")
    geo = _Lines(x.shape, axis, current_builder().waves, loc)
    buffer = _buffer(math.prod(x.shape))
    barrier()
    _store(geo.tile_view(buffer), x, _writers(x.spec, loc))
    barrier()
    chunk_spec, _ = geo.chunk_spec()
    chunks = _load(geo.chunk_view(buffer), chunk_spec)
    if geo.chunks != geo.real_chunks:
        real = geo.real_chunks
        chunks = mask(chunks, lambda line, c, j: c < real, IDENTITY[fn])
    return geo, buffer, chunks


def _wave_partials(x: Tile, fn: str, axis: int, drop) -> tuple[Tile, Expr] | None:
    """fn over the part of each line every wave holds, as an (other coordinates..., wave)
    tile, with the condition picking one writer of each entry, where x's layout allows it
    without moving data: the other coordinates do not depend on the wave, and wave w holds
    elements [0, J) of every line shifted by a multiple of J (`T.copy_layout` of 1024-wide
    rows). The tile is relabelled (`T.slots`) as (other coordinates..., wave, J) and reduced
    in each wave."""
    from argus.ir.expr import substitute
    from argus.lang.trace import reduce as in_wave_reduce
    from argus.lang.trace import slots

    layout, waves, extent = x.spec.layout, x.spec.layout.waves, x.shape[axis]
    if extent % waves:
        return None
    block = extent // waves
    table = [np.asarray(c, np.int64) for c in layout.table()]
    if any((t != t[:1]).any() for k, t in enumerate(table) if k != axis):
        return None
    along = table[axis]
    shift = along - along[:1]
    if along[0].min() or along[0].max() >= block or (shift != shift[:, :1, :1]).any():
        return None
    if sorted(shift[:, 0, 0] // block) != list(range(waves)) or (shift[:, 0, 0] % block).any():
        return None
    wave = thread_vars(waves, layout.slots)[0]
    own = [tidy(substitute(c, {"wave": Const(0)})) for c in layout.coords]
    coords = tuple(own[:axis] + own[axis + 1:]) + (wave, own[axis])
    shape = x.shape[:axis] + x.shape[axis + 1:] + (waves, block)
    view = TileSpec(shape, ThreadLayout(waves, layout.slots, coords))
    if spans_waves(view, len(shape) - 1):
        return None
    result = _compact(reduced(view, len(shape) - 1))
    try:
        writer = _writers(result, user_loc())
    except DSLError:
        return None
    relabelled = slots(x, 0, view)
    return in_wave_reduce(relabelled, fn, len(shape) - 1, result, drop=drop), writer


def _compact(spec: TileSpec) -> TileSpec:
    """`spec` with each run of g consecutive slots holding one element kept once (slot ->
    slot * g), for the largest such g: a reduction's result needs one register per entry."""
    from argus.ir.expr import Var, substitute

    layout = spec.layout

    def keys(candidate: ThreadLayout) -> np.ndarray:
        return np.ravel_multi_index(tuple(np.asarray(c, np.int64) for c in candidate.table()),
                                    spec.shape)

    held = keys(layout)
    for g in range(layout.slots, 1, -1):
        if layout.slots % g:
            continue
        slot = Var("slot", 0, layout.slots // g)
        candidate = ThreadLayout(layout.waves, layout.slots // g,
                                 tuple(substitute(c, {"slot": slot * g}) for c in layout.coords))
        kept = keys(candidate)
        if (kept == held[:, :, ::g]).all() and (held.reshape(*held.shape[:2], -1, g)
                                               == kept[..., None]).all():
            return TileSpec(spec.shape, candidate)
    return spec


def _lines_result(x: Tile, fn: str, axis: int, drop, loc) -> tuple[_Lines, Tile, Expr]:
    """fn over each line of x: (geometry, an (L,) tile in the slot layout, its writers)."""
    from argus.lang.trace import reduce as in_wave_reduce

    geo = _Lines(x.shape, axis, current_builder().waves, loc)
    in_place = _wave_partials(x, fn, axis, drop) if x.dtype == "f32" else None
    if in_place is not None:
        partial, writer = in_place
        barrier()
        partials = _buffer(geo.lines * geo.waves)
        write, read = geo.wave_views(partials)
        _store(write, partial, writer)
        inner = geo.waves
    else:
        geo, _, chunks = _stage(x, fn, axis, loc)
        partial = in_wave_reduce(chunks, fn, 2, reduced(chunks.spec, 2), drop=drop)
        _, chunk_writer = geo.chunk_spec()
        wave, lane, _ = thread_vars(geo.waves, 1)
        writer = (_both(chunk_writer, (lane % geo.chunk).eq(0)) if geo.chunk > 1
                  else chunk_writer)
        partials = _buffer(geo.lines * geo.chunks)
        read = geo.line_view(partials, (geo.lines, geo.chunks), 2)
        _store(read, partial, writer)
        inner = geo.chunks
    barrier()
    spec, _ = geo.slot_spec(geo.lines, (geo.lines, inner), inner)
    whole = _load(read, spec)
    line_spec, line_writer = geo.slot_spec(geo.lines, (geo.lines, 1), 1)
    line_spec = TileSpec((geo.lines,), ThreadLayout(geo.waves, line_spec.layout.slots,
                                                    line_spec.layout.coords[:1]))
    return geo, in_wave_reduce(whole, fn, 1, line_spec, drop=drop), line_writer


def _line_buffer(geo: _Lines, result: Tile, writer: Expr) -> Lds:
    buffer = _buffer(geo.lines)
    _store(geo.line_view(buffer, (geo.lines,), 1), result, writer)
    barrier()
    return buffer


def reduce(x: Tile, fn: str, axis: int, spec: TileSpec, drop=()) -> Tile:
    """`fn` along `axis` of a tile whose lines span waves, into layout `spec`."""
    loc = user_loc()
    _outside_lanes(f"T.reduce(..., {fn!r}, ...)", loc)
    geo, result, writer = _lines_result(x, fn, axis, drop, loc)
    buffer = _line_buffer(geo, result, writer)
    out = _load(geo.out_view(buffer), spec)
    _release()
    return out


def broadcast_lines(x: Tile, fn: str, axis: int, drop=()) -> Tile:
    """`fn` of each line, read back at every element of the line in x's own layout."""
    loc = user_loc()
    geo, result, writer = _lines_result(x, fn, axis, drop, loc)
    buffer = _line_buffer(geo, result, writer)
    out = _load(geo.broadcast_view(buffer), x.spec)
    _release()
    return out


def held_in_wave(reduced_spec: TileSpec, axis: int, spec: TileSpec) -> bool:
    """Whether every wave holds the entries of `reduced_spec` that its threads need in
    `spec` (the coordinates without `axis`): an in-wave broadcast suffices."""
    def keys(layout: ThreadLayout, shape, drop) -> np.ndarray:
        coords = [np.asarray(c, np.int64) for k, c in enumerate(layout.table()) if k != drop]
        key = np.zeros((layout.waves, LANES, layout.slots), np.int64)
        for c, extent in zip(coords, shape):
            key = key * extent + c
        return key

    held = keys(reduced_spec.layout, reduced_spec.shape, None)
    wanted = keys(spec.layout, reduced_spec.shape, axis)
    return all(np.isin(wanted[w], held[w]).all() for w in range(spec.layout.waves))


def broadcast(x: Tile, axis: int, spec: TileSpec) -> Tile:
    """x spread along `axis` into `spec` through LDS: stored once per entry, read by every
    thread of `spec` at its coordinates without the axis."""
    loc = user_loc()
    _outside_lanes("T.broadcast", loc)
    if x.dtype != "f32":
        raise DSLError(f"a {x.dtype} tile broadcast across waves: the cross-wave path "
                       "stages f32 tiles", loc, "cast the tile to f32 first (x.to('f32'))")
    size = max(1, math.prod(x.shape))
    buffer = _buffer(size)
    barrier()
    coords = coord_vars(x.shape)
    offset: Expr = Const(0)
    for c, extent in zip(coords, x.shape):
        offset = offset * extent + c
    _store(Lds(buffer.value, AddressMap(x.shape, tidy(offset))), x, _writers(x.spec, loc))
    barrier()
    full = coord_vars(spec.shape)
    offset = Const(0)
    for k, (c, extent) in enumerate(zip(full, spec.shape)):
        if k != axis:
            offset = offset * extent + c
    out = _load(Lds(buffer.value, AddressMap(spec.shape, tidy(offset))), spec)
    _release()
    return out


def arg(x: Tile, fn: str, axis: int, spec: TileSpec) -> Tile:
    """Lowest index along `axis` of the extreme, a NaN counting as the extreme (torch)."""
    _outside_lanes(f"T.arg{fn}", user_loc())
    extent = x.shape[axis]
    index = iota(x.spec, axis)
    best = broadcast_lines(x, fn, axis)
    nan = x.ne(x)
    any_nan = broadcast_lines(nan, "max", axis)
    hit = where(any_nan, nan, x.eq(best))
    return reduce(where(hit, index, float(extent)), "min", axis, spec)


def scan(x: Tile, fn: str, axis: int, *, reverse: bool, exclusive: bool) -> Tile:
    """Prefix `fn` along `axis` of any layout: each m-element chunk scanned in its wave, the
    chunk totals combined in front of (or, reversed, behind) each chunk through LDS and added
    back. In place where x's chunks already lie on aligned runs of m lanes of one wave
    (`T.copy_layout(..., vector=1)`); otherwise x is staged into such chunks and back."""
    loc = user_loc()
    _outside_lanes("a scan", loc)
    if x.dtype != "f32":
        raise DSLError(f"a {x.dtype} tile scanned across waves: the cross-wave path stages "
                       "f32 tiles", loc, "cast the tile to f32 first (x.to('f32'))")
    plan = _in_place_plan(x.spec, axis)
    if plan is not None and plan.shape[-2] > 1:
        try:
            writer = _writers(_compact(reduced(plan, len(plan.shape) - 1)), loc)
        except DSLError:
            plan = None
    if plan is not None:
        out = _scan_in_place(x, fn, axis, plan, reverse, exclusive, loc,
                             totals_writer=writer if plan.shape[-2] > 1 else None)
        _release()
        return out
    geo, buffer, chunks = _stage(x, fn, axis, loc)
    chunk_spec, chunk_writer = geo.chunk_spec()
    lines, chunk, count = geo.lines, geo.chunk, geo.chunks
    line, c, j = chunk_spec.layout.coords
    flat = TileSpec((lines, count * chunk),
                    ThreadLayout(geo.waves, chunk_spec.layout.slots, (line, c * chunk + j)))
    plan = _in_place_plan(flat, 1)
    wave, lane, _ = thread_vars(geo.waves, 1)
    writer = _both(chunk_writer, (lane % chunk).eq(0)) if chunk > 1 else chunk_writer
    scanned = _scan_in_place(_relabel(chunks, flat), fn, 1, plan, reverse, exclusive, loc,
                             totals_writer=writer)
    size = lines * count * chunk
    if size != math.prod(x.shape):
        buffer = _buffer(size)
    _store(geo.result_view(buffer), _relabel(scanned, chunk_spec), chunk_writer)
    barrier()
    out = _load(geo.result_tile_view(buffer), x.spec)
    _release()
    return out


def _relabel(x: Tile, spec: TileSpec) -> Tile:
    """x's registers seen as a tile of layout `spec` (no data moves)."""
    from argus.lang.trace import slots

    return slots(x, 0, spec)


def _in_place_plan(spec: TileSpec, axis: int) -> TileSpec | None:
    """The layout viewing x as (other coordinates..., C, m) when each m-element chunk of a
    line lies on an aligned run of m lanes of one wave in one slot (lane % m its element)."""
    extent = spec.shape[axis]
    chunk = math.gcd(extent, LANES)
    if extent // chunk != _pow2(extent // chunk):
        return None        # padded chunks: staged, where the padding is part of the tile
    table = [np.asarray(c, np.int64) for c in spec.layout.table()]
    along = table[axis]
    lane = np.arange(LANES)[None, :, None]
    if not (along % chunk == lane % chunk).all():
        return None
    key = along // chunk
    for k, c in enumerate(table):
        if k != axis:
            key = key * spec.shape[k] + c
    waves, slots = spec.layout.waves, spec.layout.slots
    runs = key.reshape(waves, LANES // chunk, chunk, slots)
    if (runs != runs[:, :, :1, :]).any():
        return None
    coords = spec.layout.coords
    along_e = coords[axis]
    # simplified, so the verifier sees `slot` where the chunk index is the slot
    view = tuple(coords[:axis] + coords[axis + 1:]) + (simplify(along_e // chunk),
                                                       simplify(along_e % chunk))
    shape = spec.shape[:axis] + spec.shape[axis + 1:] + (extent // chunk, chunk)
    return TileSpec(shape, ThreadLayout(waves, slots, view))


def _scan_in_place(x: Tile, fn: str, axis: int, view: TileSpec, reverse: bool,
                   exclusive: bool, loc, totals_writer: Expr | None = None) -> Tile:
    """The scan of x along `axis` in x's own registers (see `_in_place_plan`); the chunk
    totals are stored where `totals_writer` holds."""
    from argus.lang.trace import reduce as in_wave_reduce

    geo = _Lines(x.shape, axis, current_builder().waves, loc)
    last = len(view.shape) - 1
    chunks = _relabel(x, view)
    scanned = in_wave_scan(chunks, fn, last, geo.chunk, reverse=reverse, exclusive=exclusive)
    count, lines = geo.chunks, geo.lines          # a power of two here (`_in_place_plan`)
    if count > 1:
        totals_spec = _compact(reduced(view, last))
        total = in_wave_reduce(chunks, fn, last, totals_spec)
        barrier()
        totals = _buffer(lines * count)
        _store(_per_chunk_view(geo, totals, totals_spec.shape), total, totals_writer)
        barrier()
        # offset of chunk c: fn of the totals of the chunks before it (after it, reversed)
        shape = (lines, count, count)
        pairs_spec, pairs_writer = geo.slot_spec(lines * count, shape, count)
        c0, _, c2 = coord_vars(shape)
        every = _load(Lds(totals.value, AddressMap(
            shape, tidy(geo._line_of(geo.clamped(c0)) * count + c2))), pairs_spec)
        before = mask(every, (lambda line, c, e: e > c) if reverse else
                      (lambda line, c, e: e < c), IDENTITY[fn])
        pair_result = TileSpec(shape[:2], ThreadLayout(
            geo.waves, pairs_spec.layout.slots, pairs_spec.layout.coords[:2]))
        offsets = in_wave_reduce(before, fn, 2, _one_slot(pair_result, count))
        offset_buffer = _buffer(lines * count)
        c0, c1 = coord_vars(shape[:2])
        _store(Lds(offset_buffer.value, AddressMap(shape[:2], tidy(c0 * count + c1))), offsets,
               pairs_writer)
        barrier()
        offset = _load(_per_chunk_view(geo, offset_buffer, view.shape), view)
        scanned = COMBINE[fn](scanned, offset)
    return _relabel(scanned, x.spec)


def _per_chunk_view(geo: _Lines, buffer: Lds, shape: tuple[int, ...]) -> Lds:
    """One entry per (line, chunk) read through (other coordinates..., C[, m])."""
    coords = coord_vars(shape)
    rank = len(geo.shape) - 1
    others = list(coords[:rank])
    full = others[:geo.axis] + [Const(0)] + others[geo.axis:]
    offset = geo._line_of(full) * geo.chunks + coords[rank]
    return Lds(buffer.value, AddressMap(shape, tidy(offset)))


def _one_slot(spec: TileSpec, inner: int) -> TileSpec:
    """The layout keeping one slot of every `inner` (the reduced slots repeat the entry)."""
    from argus.ir.expr import Var, substitute

    layout = spec.layout
    slots = layout.slots // inner
    slot = Var("slot", 0, max(slots, 1))
    coords = tuple(substitute(c, {"slot": slot * inner}) for c in layout.coords)
    return TileSpec(spec.shape, ThreadLayout(layout.waves, slots, coords))

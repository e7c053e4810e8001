"""The LDS memory model: write records, ring-buffer layers for loops, and read resolution.

A read at a symbolic thread resolves, write by write from the newest, whether that write covers
its address; the writer is named through the inverse of the address map and the writer's
layout, as fresh variables fixed by total constraints, so queries stay quantifier-free. A write
by another thread in the reader's barrier epoch makes the read ⊤ (and is a race).
"""

from __future__ import annotations

from functools import lru_cache

import attrs
import numpy as np

from argus.absint.domain import FALSE, TRUE, TileTags, fresh_in, fresh_var, tabulated_over
from argus.ir.access import lds_access, lds_inside, tile_coords
from argus.ir.expr import (
    And,
    Const,
    Expr,
    Not,
    Or,
    Var,
    evaluate,
    free_vars,
    ite,
    simplify,
    substitute,
)
from argus.ir.types import LANES, AddressMap, ThreadLayout


@attrs.frozen
class WriteRec:
    """One lds.store as the verifier remembers it."""

    op: object = attrs.field(eq=False)
    addr: AddressMap
    origin: tuple[Expr, ...]
    tile: TileTags
    layout: ThreadLayout
    shape: tuple[int, ...]
    size: int
    guard: Expr
    epoch: Expr
    atomic: bool = False  # an lds.atomic_add: the address holds the old value plus the adds
    #: with the memory-ordering clock on (`absint.sync`): the wait count (a store) or the copy
    #: group (an async copy) that lands it; None: the classic one-epoch model
    ticket: Expr | None = None
    copy: bool = False  # an async copy: lands for its own wave too only when retired
    #: which threads wrote: a condition on `wave` and `lane` (`T.lanes`)
    active: Expr = TRUE
    #: per group barrier of the kernel, its condition on `wave` and how many times it has run
    #: (`T.group_barrier`, `group_ordered`)
    groups: tuple = ()

    def substitute(self, mapping: dict) -> WriteRec:
        def put(e):
            return simplify(substitute(e, mapping))
        return attrs.evolve(self, origin=tuple(put(o) for o in self.origin),
                            tile=self.tile.substitute(mapping), guard=put(self.guard),
                            epoch=put(self.epoch), active=put(self.active),
                            ticket=None if self.ticket is None else put(self.ticket),
                            groups=runs_substituted(self.groups, mapping))


@attrs.frozen
class Empty:
    """Nothing written yet: reads are uninitialised."""


@attrs.frozen
class Opaque:
    """Contents the verifier gave up on (⊤)."""


@attrs.frozen
class Writes:
    """`records` (oldest first) on top of the state `below`."""

    records: tuple[WriteRec, ...]
    below: object


@attrs.frozen
class Layers:
    """The state at loop iteration `at`: the writes of iterations at-1..at-depth (the body's
    `records` with the induction variable shifted), older iterations ⊤, and `below` (the state
    before the loop) when fewer iterations have run. `records=None` means the body is unknown."""

    iv: Var
    start: Expr
    step: int
    records: tuple[WriteRec, ...] | None
    depth: int
    at: Expr
    below: object


def push(state, record: WriteRec):
    if isinstance(state, Writes):
        return Writes(state.records + (record,), state.below)
    return Writes((record,), state)


@attrs.frozen
class ReadSite:
    """A read by a symbolic thread: view coordinates, address, thread id, epoch."""

    addr: AddressMap
    view: tuple[Expr, ...]
    address: Expr
    thread_id: Expr
    epoch: Expr
    clock: object = None  # the reader's `sync.Clock`, when the kernel uses it
    groups: tuple = ()  # the group barriers' run counts at the read (as WriteRec's)


@attrs.define
class Resolution:
    """Per tag name the value and ⊤-condition a read sees, and how it was found. `absent`
    holds per name where the write the read sees does not carry that name: an overwrite
    replaces the region's tags, so a name absent everywhere the op reads is not carried at
    all (an address nothing wrote keeps every name, ⊤)."""

    values: dict
    tops: dict
    uninitialised: Expr
    opaque: Expr
    race: Expr
    defs: list
    fresh: set
    absent: dict
    #: the newest write there is the reader's own async copy, not landed yet
    pending: Expr = FALSE

    @classmethod
    def bottom(cls, names, *, opaque: bool) -> Resolution:
        return cls({n: Const(0) for n in names}, {n: TRUE for n in names},
                   FALSE if opaque else TRUE, TRUE if opaque else FALSE, FALSE, [], set(),
                   {n: FALSE for n in names})

    def choose(self, cond: Expr, other: Resolution) -> Resolution:
        """`self` where `cond` holds, else `other`."""
        return Resolution(
            {n: ite(cond, self.values[n], other.values[n]) for n in self.values},
            {n: ite(cond, self.tops[n], other.tops[n]) for n in self.tops},
            ite(cond, self.uninitialised, other.uninitialised),
            ite(cond, self.opaque, other.opaque), ite(cond, self.race, other.race),
            self.defs + other.defs, self.fresh | other.fresh,
            {n: ite(cond, self.absent[n], other.absent[n]) for n in self.absent},
            FALSE if self.pending is FALSE and other.pending is FALSE else
            ite(cond, self.pending, other.pending))


@lru_cache(maxsize=256)
def is_bijection(addr: AddressMap) -> bool:
    """The address map sends its view one-to-one onto [0, number of view elements)."""
    grids = np.meshgrid(*(np.arange(n) for n in addr.shape), indexing="ij")
    offsets = np.broadcast_to(np.asarray(addr(*grids)), grids[0].shape).ravel()
    return bool(np.array_equal(np.sort(offsets), np.arange(offsets.size)))


@lru_cache(maxsize=256)
def covers_tile(layout: ThreadLayout, shape: tuple[int, ...]) -> bool:
    """Every element of the tile is held by some thread of the layout."""
    coords = layout.table()
    inside = np.ones((layout.waves, LANES, layout.slots), bool)
    for c, extent in zip(coords, shape):
        inside &= (c >= 0) & (c < extent)
    flat = np.ravel_multi_index(tuple(c[inside] for c in coords), shape)
    return bool(np.unique(flat).size == int(np.prod(shape)))


def _layer(record: WriteRec, site: ReadSite, names) -> _Guarded | None:
    """What the read sees if `record` is the newest write covering its address (None: the
    verifier cannot name the writer, so the record makes the read ⊤)."""
    seen = _view_of(record, site)
    if seen is None or not covers_tile(record.layout, record.shape):
        return None
    view, in_image, defs, fresh = seen
    cover, wanted = _covered(record, site, view, in_image)
    writer, cover = _writer(record, cover, wanted, defs, fresh)
    instance = record.tile.at(*writer)
    defs += instance.defs
    fresh |= fresh_in(*defs, *(t.value for t in instance.tags.values()),
                      *(t.top for t in instance.tags.values()))
    race, pending, unseen = _ordering(record, site, writer, fresh)
    values, tops, absent = _seen_tags(instance, names, unseen)
    return _Guarded(cover, Resolution(values, tops, FALSE, FALSE, race, defs, fresh, absent,
                                      pending))


def _view_of(record: WriteRec, site: ReadSite):
    """The read's address in the writer's view: (view coordinates, whether the address lies
    in the writer's image, their definitions, fresh variables); None when the writer's map is
    not a bijection, so no view names the address."""
    if record.addr == site.addr:
        return site.view, TRUE, [], set()
    if not is_bijection(record.addr):
        return None
    view = tuple(fresh_var("view", 0, n) for n in record.addr.shape)
    in_image = And(0 <= site.address, site.address < len_of(record.addr))
    return view, in_image, [Or(Not(in_image), record.addr.at(view).eq(site.address))], set(view)


def _covered(record: WriteRec, site: ReadSite, view, in_image) -> tuple[Expr, list]:
    """Where the write covers the read's address (its guard, in bounds, inside the written
    box), and the element of the written tile there."""
    lead = len(record.addr.shape) - len(record.shape)
    box = [view[d].eq(record.origin[d]) for d in range(lead)]
    box += [And(record.origin[d] <= view[d], view[d] < record.origin[d] + record.shape[d - lead])
            for d in range(lead, len(view))]
    cover = And(record.guard, in_image, lds_inside(record.addr, view, site.address,
                                                    record.size), *box)
    return cover, [view[d] - record.origin[d] for d in range(lead, len(view))]


def _writer(record: WriteRec, cover: Expr, wanted: list, defs: list, fresh: set):
    """The thread (wave, lane, slot) that wrote element `wanted`, and `cover` narrowed to
    where one did; definitions and fresh variables go to `defs` and `fresh`."""
    chosen = _writers(record.layout, record.shape, record.active)
    if chosen is not None:
        # only some threads wrote, on their thread ids alone: the writer of each element is
        # a table of the element (a thread that took part, where one holding it did)
        mapping = {f"c{a}": w for a, w in enumerate(wanted)}
        writer = tuple(substitute(e, mapping) for e in chosen[:3])
        return writer, And(cover, substitute(chosen[3], mapping))
    writer = (fresh_var("wwave", 0, record.layout.waves), fresh_var("wlane", 0, LANES),
              fresh_var("wslot", 0, record.layout.slots))
    fresh |= set(writer)
    held = tile_coords(record.layout, writer)
    defs.append(Or(Not(cover), And(*(h.eq(w) for h, w in zip(held, wanted)))))
    if record.active is TRUE:
        return writer, cover
    # the element is written if a thread holding it takes part: the writer named is one that
    # does, where one does (holders in other waves at the writer's lane and slot, for layouts
    # that repeat a tile in every wave)
    holders = [And(at_thread(record.active, w, writer[1]),
                   *(h.eq(x) for h, x in zip(tile_coords(record.layout,
                                                         (w, writer[1], writer[2])), wanted)))
               for w in range(record.layout.waves)]
    took_part = at_thread(record.active, writer[0], writer[1])
    defs.append(Or(Not(And(cover, Or(*holders))), took_part))
    return writer, And(cover, took_part)


def _ordering(record: WriteRec, site: ReadSite, writer, fresh: set):
    """Whether the write races with the read (another thread's, not ordered before it),
    whether it is the reader's own copy in flight, and whether the read does not see it."""
    other = And((writer[0] * LANES + writer[1]).ne(site.thread_id),
                Not(group_ordered(record.groups, site.groups, writer[0],
                                  site.thread_id // LANES)))
    race, pending = unordered(record, site.epoch, site.clock, other)
    if record.atomic:
        race = _other_adder(record, site)
        fresh |= fresh_in(race)
    # either way the write is not seen: for a copy in flight often a constant
    unseen = race if pending is FALSE or record.atomic else unseen_copy(record, site.clock,
                                                                         other)
    return race, pending, unseen


def _seen_tags(instance, names, unseen: Expr) -> tuple[dict, dict, dict]:
    """Per tag name the value the read sees, where it is ⊤ (a name the write lacks, or a
    write not seen), and where it is absent (the write did not carry it)."""
    values, tops = {}, {}
    for n in names:
        tag = instance.tags.get(n)
        values[n] = tag.value if tag is not None else Const(0)
        tops[n] = TRUE if tag is None or unseen == TRUE else \
            tag.top if unseen == FALSE else Or(tag.top, unseen)
    absent = {n: FALSE if n in instance.tags else TRUE for n in names}
    return values, tops, absent


def unordered(record, epoch: Expr, clock, other: Expr) -> tuple[Expr, Expr]:
    """Whether a write (`record`: a WriteRec or an Access) is not ordered before an access at
    `epoch`/`clock` by another thread (`other` holds) — a race — and whether it is the
    accessor's own async copy still in flight. Classic model: another thread's write in the
    same barrier epoch. With the clock (`absint.sync`): a store not yet waited for and
    published by a barrier, a copy whose group was not retired before a barrier (another
    thread) or at all (its own thread)."""
    if record.ticket is None or clock is None:
        return And(record.epoch.eq(epoch), other), FALSE
    # the counts are linear in the loop variables: most comparisons fold to a constant here
    if not record.copy:
        return simplify(And(other, simplify(record.ticket >= clock.published))), FALSE
    return (simplify(And(other, simplify(record.ticket >= clock.retired_published))),
            simplify(And(Not(other), simplify(record.ticket >= clock.retired))))


def unseen_copy(record, clock, other: Expr) -> Expr:
    """Whether an async copy has not landed for the reader (`other`: another thread), race
    and pending together: one condition when both readers agree."""
    theirs = simplify(record.ticket >= clock.retired_published)
    mine = simplify(record.ticket >= clock.retired)
    return theirs if theirs == mine else simplify(ite(other, theirs, mine))


@lru_cache(maxsize=256)
def _writers(layout: ThreadLayout, shape: tuple[int, ...], active: Expr):
    """For a store only some threads take part in, by a condition on `wave` and `lane` alone:
    (wave, lane, slot, written) as formulas in the element coordinates c0, c1, ... — the
    thread that wrote each element (the first one holding it that took part) and whether
    one did. None when `active` is every thread or mentions other variables."""
    if active is TRUE or not {v.name for v in free_vars(active)} <= {"wave", "lane"}:
        return None
    table = layout.table()
    waves, lanes, slots = np.meshgrid(np.arange(layout.waves), np.arange(LANES),
                                      np.arange(layout.slots), indexing="ij")
    took = np.broadcast_to(np.asarray(evaluate(active, {"wave": waves, "lane": lanes}), bool),
                           waves.shape)
    # a scalar tile (a full reduction) has its one element at 0
    flat = (np.ravel_multi_index(tuple(table), shape) if shape else
            np.zeros(waves.shape, np.int64)).ravel()
    # every holder in order, those that took part first: the first per element is chosen
    order = np.lexsort((np.arange(flat.size), ~took.ravel(), flat))
    first = order[np.r_[True, flat[order][1:] != flat[order][:-1]]]
    element = flat[first]
    columns = [a.ravel()[first] for a in (waves, lanes, slots, took)]
    per_element = [np.zeros(int(np.prod(shape)), np.int64) for _ in columns]
    for column, values in zip(per_element, columns):
        column[element] = values
    coords = tuple(Var(f"c{a}", 0, n) for a, n in enumerate(shape))
    return tuple(tabulated_over(column.reshape(shape) if k < 3 else
                                column.reshape(shape).astype(bool), coords)
                 for k, column in enumerate(per_element))


@attrs.frozen
class _Guarded:
    cover: Expr
    layer: Resolution


def len_of(addr: AddressMap) -> int:
    return int(np.prod(addr.shape))


def record_names(state) -> set:
    """Tag names of every write reachable in `state`."""
    if isinstance(state, Writes):
        return set().union(*(r.tile.names for r in state.records)) | record_names(state.below)
    if isinstance(state, Layers):
        body = set().union(*(r.tile.names for r in state.records or ()))
        return body | record_names(state.below)
    return set()


def resolve(state, site: ReadSite, names) -> Resolution:
    """The tags a read at `site` sees in `state`."""
    if isinstance(state, Empty):
        return Resolution.bottom(names, opaque=False)
    if isinstance(state, Opaque):
        return Resolution.bottom(names, opaque=True)
    if isinstance(state, Writes):
        result = resolve(state.below, site, names)
        for record in state.records:
            result = _stack(record, TRUE, site, names, result)
        return result
    at, step, start = state.at, state.step, state.start
    if state.records is None:
        return Resolution.bottom(names, opaque=True).choose(
            simplify(at - step >= start), resolve(state.below, site, names))
    older = simplify(at - (state.depth + 1) * step >= start)
    result = Resolution.bottom(names, opaque=True).choose(older,
                                                          resolve(state.below, site, names))
    for j in range(state.depth, 0, -1):
        iteration = simplify(at - j * step)
        ran = simplify(iteration >= start)
        for record in state.records:
            shifted = record.substitute({state.iv.name: iteration})
            result = _stack(shifted, ran, site, names, result)
    return result


def _stack(record, ran, site, names, below: Resolution) -> Resolution:
    guarded = _layer(record, site, names)
    if guarded is None:
        return Resolution.bottom(names, opaque=True).choose(ran, below)
    cond = simplify(And(ran, guarded.cover))
    if cond is FALSE:
        return below
    layer = _added(guarded.layer, below) if record.atomic else guarded.layer
    return layer.choose(cond, below)


def _other_adder(record: WriteRec, site: ReadSite):
    """Whether some thread other than the reader added to the read's address in its epoch:
    adds by several threads (wave-replicated layouts) meet at one address, so no single writer
    is named; a free symbolic adder is."""
    adder = (fresh_var("awave", 0, record.layout.waves), fresh_var("alane", 0, LANES),
             fresh_var("aslot", 0, record.layout.slots))
    found = lds_access(record.op, adder, record.origin)
    bounds = [And(v >= v.lo, v < v.hi) for v in adder]
    return And(*bounds, record.guard, at_thread(record.active, adder[0], adder[1]),
               Not(group_ordered(record.groups, site.groups, adder[0], site.thread_id // LANES)),
               record.epoch.eq(site.epoch), found.inside,
               found.address.eq(site.address),
               (adder[0] * LANES + adder[1]).ne(site.thread_id))


def _added(add: Resolution, below: Resolution) -> Resolution:
    """What a read sees at an address an atomic add covers: a sum of contributions (tags ⊤),
    initialised only where the old value was, racing with the adder or the old value's writer."""
    names = add.values
    return Resolution({n: Const(0) for n in names}, {n: TRUE for n in names},
                      below.uninitialised, below.opaque, Or(add.race, below.race),
                      add.defs + below.defs, add.fresh | below.fresh, {n: FALSE for n in names},
                      below.pending)


@attrs.frozen
class Access:
    """An LDS access for the race checks: where, by whom, in which epoch and loops."""

    op: object = attrs.field(eq=False)
    write: bool
    buffer: str
    addr: AddressMap
    origin: tuple[Expr, ...]
    layout: ThreadLayout
    size: int
    guard: Expr
    epoch: Expr
    loops: tuple = ()
    order: int = 0
    atomic: bool = False  # lds.atomic_add: adds by two threads commute, no race between them
    ticket: Expr | None = None  # as WriteRec's (a write with the clock on)
    copy: bool = False  # an async copy
    clock: object = None  # the `sync.Clock` where the access is made (the clock on)
    #: which threads take part: a condition on `wave` and `lane` (`T.lanes`)
    active: Expr = TRUE
    groups: tuple = ()  # the group barriers' run counts at the access (as WriteRec's)

    def footprint(self, mapping: dict):
        """(thread vars, thread id, address, inside) of a fresh symbolic thread; `inside`
        holds only where the thread takes part."""
        thread = (fresh_var("wave", 0, self.layout.waves), fresh_var("lane", 0, LANES),
                  fresh_var("slot", 0, self.layout.slots))
        origin = tuple(substitute(o, mapping) for o in self.origin)
        found = lds_access(self.op, thread, origin)
        active = at_thread(substitute(self.active, mapping), thread[0], thread[1])
        return thread, thread[0] * LANES + thread[1], found.address, And(active, found.inside)


def group_ordered(earlier: tuple, later: tuple, earlier_wave, later_wave) -> Expr:
    """Whether a group barrier that ran between two accesses has both waves in its group,
    ordering the first before the second. `earlier`, `later`: per group barrier of the kernel,
    (its condition on `wave`, how many times it had run at the access) — formulas in the loop
    variables like the barrier epoch, so a barrier that ran more often by the later access ran
    between them, in the same iteration or any between."""
    return Or(*(And(simplify(now > then), at_thread(g, earlier_wave, 0),
                    at_thread(g, later_wave, 0))
                for (g, then), (_, now) in zip(earlier, later)))


def runs_substituted(groups: tuple, mapping: dict) -> tuple:
    """Group barrier run counts (`group_ordered`) with `mapping` applied."""
    return tuple((g, simplify(substitute(n, mapping))) for g, n in groups)


def at_thread(active: Expr, wave, lane) -> Expr:
    """A condition on the thread ids `wave` and `lane` at the given thread."""
    if active is TRUE:
        return active
    return substitute(active, {"wave": wave, "lane": lane})

"""Moves that rewrite the traced program, not only its knob values: each `Rewrite` finds its
sites in a kernel's IR (its precondition), transforms the IR there and states the effect it is
expected to have. Some are always legal (unroll, a deeper ring, a transposed grid); others are
legal only sometimes (drop a barrier, a single-buffered ring, swizzle only the stores, drop a
guard): the verifier decides, and a refutation comes back as a counterexample that
`argus.search.repair` maps to the rewrites that may mend it (insert the barrier, grow the ring,
apply the writer's swizzle to the reader, guard the access).

A candidate carries its rewrites as (name, site) pairs, applied in order to the traced IR. A
site counts ops of one kind in program order (the 2nd barrier, the 1st LDS allocation, the 1st
loop), so it survives knob changes that resize tiles, and a candidate stays plain data that a
run file, a worker or an LLM prompt can carry.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from argus.errors import ArgusError
from argus.ir import ops as O
from argus.ir.expr import Const, Term, free_vars, rebuild, simplify, substitute
from argus.ir.rewrite import replace_op, replace_values, sites
from argus.ir.types import AddressMap, IRError, LdsType, Value, coord_vars

#: the ring depths a rewrite may give an LDS buffer (1: single-buffered); powers of two, since
#: the backend computes a slot index `kt % depth` with a mask
RING_DEPTHS = (1, 2, 4)
#: the unroll factors the backend splits trip counts by
UNROLLS = (1, 2, 4)
#: the XOR swizzle (bits, base, shift) a store-side swizzle applies: the library GEMM's
SWIZZLE = (3, 2, 3)
LDS_BUDGET = 64 * 1024


class RewriteError(ArgusError, ValueError):
    """A rewrite asked of a site where it does not apply (stale site, wrong op, a ring past the
    LDS): the candidate's fault (kind "input"), so the search rejects it instead of stopping."""


@attrs.frozen
class Rewrite:
    """One program transformation: where it applies, what it does, what it should buy, and
    whether it is always legal or the verifier must decide."""

    name: str
    bottleneck: str  # memory | compute | latency | lds | occupancy
    when: str  # the precondition in words
    effect: str  # what it changes and why it may pay
    legal: str  # "always" | "verifier decides"
    sites: Callable[[O.Kernel], list[tuple]] = attrs.field(eq=False, repr=False)
    apply: Callable[[O.Kernel, tuple], O.Kernel] = attrs.field(eq=False, repr=False)
    prior: float = 0.4
    repair: bool = False  # offered as a repair (after a refutation), not as a free move

    def to_prompt(self) -> dict:
        return {"rewrite": self.name, "when": self.when, "effect": self.effect,
                "legal": self.legal}


# ------------------------------------------------------------------------------ helpers

def _ops(kernel, kind, where=lambda op, loops: True):
    return [(i, op, loops) for i, op, loops in sites(kernel)
            if isinstance(op, kind) and where(op, loops)]


def _nth(kernel, kind, n: int) -> tuple[int, O.Op]:
    """(op number, op) of the `n`-th op of `kind` in program order."""
    found = _ops(kernel, kind)
    if not 0 <= n < len(found):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise RewriteError(f"the kernel has {len(found)} {names} ops, no number {n}")
    return found[n][0], found[n][1]


def _numbered(found: list) -> list[tuple]:
    return [(n,) for n in range(len(found))]


LDS_ACCESSES = (O.LdsLoad, O.LdsStore, O.AsyncCopy)


def _accesses(kernel, buffer: Value):
    return [(i, op, loops) for i, op, loops in _ops(kernel, LDS_ACCESSES)
            if op.buffer == buffer]


def _ring(kernel, alloc: O.LdsAlloc) -> int | None:
    """The ring depth of an LDS buffer: the common leading extent of its 3-D views, when every
    access views it so and at least one slot index follows a pipelined loop's variable."""
    accesses = _accesses(kernel, alloc.result)
    shapes = {op.addr.shape[0] for _, op, _ in accesses if len(op.addr.shape) == 3}
    if len(shapes) != 1 or any(len(op.addr.shape) != 3 for _, op, _ in accesses):
        return None
    cycling = any(loops and loops[-1].iv in free_vars(op.origin[0]) for _, op, loops in accesses)
    if not cycling and shapes != {1}:
        return None
    depth = shapes.pop()
    inner = accesses[0][1].addr
    # the slot stride must be one slot's elements, so the ring can be resized by its extent
    if alloc.result.type.size != depth * _slot_elements(inner):
        return None
    return depth


def _slot_elements(addr: AddressMap) -> int:
    return addr.shape[1] * addr.shape[2]


def _reslot(expr, depth: int):
    """A slot index (x % d, or a constant) for a ring of `depth` slots."""
    if isinstance(expr, Term) and expr.op == "mod":
        return simplify(rebuild("mod", (expr.args[0], Const(depth)))) if depth > 1 else Const(0)
    return expr


def _resize_ring(kernel, n: int, step: int) -> O.Kernel:
    _, alloc = _nth(kernel, O.LdsAlloc, n)
    old = _ring(kernel, alloc)
    if old is None:
        raise RewriteError(f"LDS allocation {n} is not a ring of slots")
    depth = _step(old, step)
    if depth is None:
        raise RewriteError(f"a ring of {old} slots has no step {step:+d} in {RING_DEPTHS}")
    first = _accesses(kernel, alloc.result)[0][1].addr
    buffer = Value(alloc.result.name, LdsType(alloc.result.type.dtype,
                                              depth * _slot_elements(first)))
    total = sum(op.result.type.nbytes for _, op, _ in _ops(kernel, O.LdsAlloc)) \
        - alloc.result.type.nbytes + buffer.type.nbytes
    if total > LDS_BUDGET:
        raise RewriteError(f"a ring of {depth} slots takes the workgroup's LDS to {total} "
                           f"bytes, past gfx942's {LDS_BUDGET} (64 KiB)")
    kernel = replace_values(kernel, {alloc.result: buffer})
    for index, op, _ in _accesses(kernel, buffer):
        shape = (depth, *op.addr.shape[1:])
        # the coordinates carry their ranges: the slot coordinate is rebuilt for `depth`
        addr = AddressMap(shape, substitute(op.addr.offset, {
            f"c{axis}": var for axis, var in enumerate(coord_vars(shape))}))
        origin = (_reslot(op.origin[0], depth), *op.origin[1:])
        kernel = replace_op(kernel, index, lambda o, addr=addr, origin=origin: [
            attrs.evolve(o, addr=addr, origin=origin)])
    return kernel


def _allocs(kernel, where) -> list[tuple]:
    """(n,) for each LDS allocation n (in program order) where `where(kernel, alloc)`."""
    return [(n,) for n, (_, alloc, _) in enumerate(_ops(kernel, O.LdsAlloc))
            if where(kernel, alloc)]


def _rings(step: int, budget: bool = True):
    """The rings that can take `step` (within the LDS with `budget`)."""
    def where(kernel, alloc):
        depth = _ring(kernel, alloc)
        # a single slot has lost its slot index (every access at slot 0): it cannot grow back
        return (depth is not None and depth > 1 and _step(depth, step) in RING_DEPTHS
                and (not budget or _lds_after(kernel, {alloc.result.name: (
                    depth, _step(depth, step))}) <= LDS_BUDGET))
    return lambda kernel: _allocs(kernel, where)


def _lds_after(kernel, resized: dict[str, tuple[int, int]]) -> int:
    """The workgroup's LDS bytes with the named rings resized (old depth, new depth)."""
    total = 0
    for _, alloc, _ in _ops(kernel, O.LdsAlloc):
        old, new = resized.get(alloc.result.name, (1, 1))
        total += alloc.result.type.nbytes // old * new
    return total


def _step(depth: int, step: int) -> int | None:
    """The ring depth one step up or down RING_DEPTHS from `depth`."""
    index = RING_DEPTHS.index(depth) + step if depth in RING_DEPTHS else -1
    return RING_DEPTHS[index] if 0 <= index < len(RING_DEPTHS) else None


def _resize_by(step: int):
    return lambda kernel, site: _resize_ring(kernel, site[0], step)


def _all_rings(kernel):
    """(0,) when two or more rings can deepen and all of them deepened fit the LDS."""
    allocs = [alloc for _, alloc, _ in _ops(kernel, O.LdsAlloc)]
    grown = {allocs[n].result.name: (_ring(kernel, allocs[n]), 2 * _ring(kernel, allocs[n]))
             for (n,) in _rings(1, budget=False)(kernel)}
    return [(0,)] if len(grown) > 1 and _lds_after(kernel, grown) <= LDS_BUDGET else []


def _grow_all(kernel, site):
    """Every ring of the kernel one step deeper (the operands of one loop move together)."""
    found = _rings(1, budget=False)(kernel)
    if not found:
        raise RewriteError("the kernel has no LDS ring to deepen")
    if not _all_rings(kernel):
        raise RewriteError(f"every ring deepened takes the workgroup's LDS past gfx942's "
                           f"{LDS_BUDGET} bytes (64 KiB)")
    for (n,) in found:
        kernel = _resize_ring(kernel, n, 1)
    return kernel


# ----------------------------------------------------------------------------- barriers

BARRIERS = (O.Barrier, O.BarrierNoWait)
LDS_WRITES = (O.LdsStore, O.AsyncCopy)


def _barrier_sites(kernel):
    return _numbered(_ops(kernel, BARRIERS))


def _drop_barrier(kernel, site):
    index, _ = _nth(kernel, BARRIERS, site[0])
    return replace_op(kernel, index, lambda op: [])


def _insert_sites(kernel):
    """(n, 0): before the n-th LDS write; (n, 1): after it; where no barrier is there yet."""
    ordered = [op for _, op, _ in sites(kernel)]
    out, n = [], 0
    for position, op in enumerate(ordered):
        if isinstance(op, LDS_WRITES):
            before = ordered[position - 1] if position else None
            after = ordered[position + 1] if position + 1 < len(ordered) else None
            if not isinstance(before, BARRIERS):
                out.append((n, 0))
            if not isinstance(after, BARRIERS + LDS_WRITES):
                out.append((n, 1))
            n += 1
    return out


def _insert_barrier(kernel, site):
    index, _ = _nth(kernel, LDS_WRITES, site[0])
    after = len(site) > 1 and site[1]
    return replace_op(kernel, index, lambda o: [o, O.Barrier(loc=o.loc)] if after
                      else [O.Barrier(loc=o.loc), o])


# ----------------------------------------------------------------------------- swizzles

def _swizzled(addr: AddressMap) -> bool:
    return "^" in str(addr.offset)


def _layout(addr: AddressMap, swizzle) -> AddressMap:
    from argus.lang.layouts import lds_layout

    return lds_layout(addr.shape, swizzle)


def _plain(kernel, alloc) -> bool:
    """Written by register stores, every access unswizzled, tiles the swizzle fits."""
    accesses = _accesses(kernel, alloc.result)
    if not accesses or any(isinstance(op, O.AsyncCopy) or _swizzled(op.addr)
                           for _, op, _ in accesses):
        return False
    shape = accesses[0][1].addr.shape
    return (any(isinstance(op, O.LdsStore) for _, op, _ in accesses) and len(shape) >= 2
            and shape[-1] >= 32 and shape[-2] >= 8)


def _swizzle_stores(kernel, site):
    _, alloc = _nth(kernel, O.LdsAlloc, site[0])
    for index, op, _ in _accesses(kernel, alloc.result):
        if isinstance(op, O.LdsStore):
            addr = _layout(op.addr, SWIZZLE)
            kernel = replace_op(kernel, index, lambda o, addr=addr: [attrs.evolve(o, addr=addr)])
    return kernel


def _mismatched(kernel, alloc) -> bool:
    """Loads view the buffer through another map than its (one) store map."""
    accesses = _accesses(kernel, alloc.result)
    stored = {op.addr for _, op, _ in accesses if isinstance(op, O.LdsStore)}
    loaded = {op.addr for _, op, _ in accesses if isinstance(op, O.LdsLoad)}
    return len(stored) == 1 and bool(loaded) and loaded != stored


def _swizzle_reads(kernel, site):
    """Every load of the buffer views it as its stores do (the writer's swizzle)."""
    _, alloc = _nth(kernel, O.LdsAlloc, site[0])
    if not _mismatched(kernel, alloc):
        raise RewriteError(f"LDS allocation {site[0]} is read as it is written already")
    accesses = _accesses(kernel, alloc.result)
    (addr,) = {op.addr for _, op, _ in accesses if isinstance(op, O.LdsStore)}
    for index, op, _ in accesses:
        if isinstance(op, O.LdsLoad) and op.addr != addr:
            kernel = replace_op(kernel, index, lambda o: [attrs.evolve(o, addr=addr)])
    return kernel


def _read_swizzled(kernel, alloc) -> bool:
    return any(isinstance(op, O.LdsLoad) and _swizzled(op.addr)
               for _, op, _ in _accesses(kernel, alloc.result))


def _unswizzle_reads(kernel, site):
    _, alloc = _nth(kernel, O.LdsAlloc, site[0])
    for index, op, _ in _accesses(kernel, alloc.result):
        if isinstance(op, O.LdsLoad) and _swizzled(op.addr):
            kernel = replace_op(kernel, index, lambda o: [
                attrs.evolve(o, addr=_layout(o.addr, None))])
    return kernel


# ------------------------------------------------------------------------------- guards

GUARDED = (O.GlobalLoad, O.GlobalStore)


def _guarded(kernel):
    return [(n,) for n, (_, op, _) in enumerate(_ops(kernel, GUARDED)) if op.guard]


def _unguard(kernel, site):
    index, _ = _nth(kernel, GUARDED, site[0])
    return replace_op(kernel, index, lambda o: [attrs.evolve(o, guard=False)])


def _unguarded(kernel):
    return [(n,) for n, (_, op, _) in enumerate(_ops(kernel, GUARDED)) if not op.guard]


def _guard(kernel, site):
    index, _ = _nth(kernel, GUARDED, site[0])
    return replace_op(kernel, index, lambda o: [attrs.evolve(o, guard=True)])


# -------------------------------------------------------------------------- loops, grid

def _loops(kernel):
    return [(n,) for n, (_, op, _) in enumerate(_ops(kernel, O.For))
            if op.unroll * 2 in UNROLLS]


def _unroll(kernel, site):
    index, op = _nth(kernel, O.For, site[0])
    if op.unroll * 2 not in UNROLLS:
        raise RewriteError(f"loop {site[0]} is unrolled {op.unroll} times already")
    return replace_op(kernel, index, lambda o: [attrs.evolve(o, unroll=o.unroll * 2)])


def _grids(kernel):
    axes = {op.axis for _, op, _ in _ops(kernel, O.ProgramId)}
    return [(0,)] if len(kernel.grid) >= 2 and {0, 1} <= axes else []


def _transpose_grid(kernel, site):
    """Launch grid axes 0 and 1 swapped: workgroup (x, y) does what (y, x) did, so the
    dispatcher walks the output tiles in the other order (L2 reuse of the other operand)."""
    if not _grids(kernel):
        raise RewriteError("the grid has no two axes to swap")
    swap = {0: 1, 1: 0}
    for index, _, _ in _ops(kernel, O.ProgramId):
        kernel = replace_op(kernel, index, lambda o: [
            attrs.evolve(o, axis=swap.get(o.axis, o.axis))])
    grid = (kernel.grid[1], kernel.grid[0], *kernel.grid[2:])
    return attrs.evolve(kernel, grid=grid).verify()


REWRITES: dict[str, Rewrite] = {r.name: r for r in (
    Rewrite("unroll_loop", "latency", "a loop unrolled fewer than 4 times",
            "unroll the loop twice as far, so the scheduler can overlap one copy's LDS reads "
            "and global loads with the other copy's MFMAs", "always", _loops, _unroll, 0.4),
    Rewrite("grow_ring", "latency", "an LDS ring of fewer than 4 slots",
            "twice the LDS slots per operand: the slot a copy overwrites was read at least two "
            "iterations ago, so a barrier that only guarded that read can go; "
            "costs LDS, which may cut workgroups per CU", "always", _rings(1),
            _resize_by(1), 0.3),
    Rewrite("grow_rings", "latency", "two or more LDS rings of fewer than 4 slots",
            "every LDS ring twice as deep at once (the operands of one loop together)",
            "always", _all_rings, _grow_all, 0.3),
    Rewrite("shrink_ring", "occupancy", "an LDS ring of 2 or more slots",
            "half the LDS slots per operand: less LDS per workgroup (more workgroups per CU); "
            "a single slot needs a barrier before it is overwritten",
            "verifier decides", _rings(-1), _resize_by(-1), 0.3),
    Rewrite("drop_barrier", "latency", "a workgroup barrier",
            "one s_barrier (and its wait for this wave's LDS stores) fewer per execution; "
            "legal only where another barrier or the ring depth already orders the accesses",
            "verifier decides", _barrier_sites, _drop_barrier, 0.3),
    Rewrite("swizzle_stores", "lds", "an unswizzled LDS buffer written from registers",
            "XOR-swizzle the stores into the buffer to spread their banks; the readers must "
            "apply the same swizzle", "verifier decides", lambda k: _allocs(k, _plain),
            _swizzle_stores, 0.3),
    Rewrite("unswizzle_reads", "compute", "an LDS buffer read through a swizzled map",
            "drop the XOR from the reads' address arithmetic (fewer VALU ops); wrong unless "
            "the writer does not swizzle either", "verifier decides",
            lambda k: _allocs(k, _read_swizzled), _unswizzle_reads, 0.1),
    Rewrite("drop_guard", "compute", "a guarded global access",
            "drop the exec-mask compare of a guarded access; legal only where no row of the "
            "tile can run past the tensor", "verifier decides", _guarded, _unguard, 0.2),
    Rewrite("transpose_grid", "memory", "a grid of at least two axes",
            "swap the grid's first two axes: the dispatcher walks the output tiles column "
            "by column, which changes which operand stays in L2", "always", _grids,
            _transpose_grid, 0.3),
    Rewrite("insert_barrier", "latency", "an LDS access not right after a barrier",
            "a barrier before the access orders every other thread's earlier accesses of "
            "LDS before it (mends a race)", "always", _insert_sites, _insert_barrier, 0.0,
            repair=True),
    Rewrite("swizzle_reads", "lds", "an LDS buffer read through another map than its stores",
            "the loads view the buffer through the stores' (swizzled) map",
            "always", lambda k: _allocs(k, _mismatched), _swizzle_reads, 0.0, repair=True),
    Rewrite("guard_access", "compute", "an unguarded global access",
            "predicate the access on its rows and columns lying inside the tensor (the tail)",
            "always", _unguarded, _guard, 0.0, repair=True),
)}


# ------------------------------------------------------------------ trace-level rewrites

@attrs.frozen
class TraceRewrite:
    """A rewrite of the kernel's DSL program, applied when it is traced: the family's program
    declares the hook it sets (`PROGRAMS`), so the traced IR is the rewritten program's. Its
    precondition reads the candidate's knobs and earlier trace rewrites; it is applied before
    the IR rewrites, whose sites it keeps (it moves no barrier, ring or loop; the ping-pong
    splits the loop's LDS stores in two, which shifts the sites of an `insert_barrier` counted
    past them: the verifier still decides what that candidate's program does)."""

    name: str
    bottleneck: str
    when: str
    effect: str
    legal: str
    #: sites(params, hooks) -> the sites where it applies, given the knob values and the hooks
    #: the candidate's earlier trace rewrites set
    sites: Callable[[dict, dict], list[tuple]] = attrs.field(eq=False, repr=False)
    #: hooks(hooks, site) -> the program hooks after it
    apply: Callable[[dict, tuple], dict] = attrs.field(eq=False, repr=False)
    prior: float = 0.3
    repair: bool = False

    def to_prompt(self) -> dict:
        return {"rewrite": self.name, "when": self.when, "effect": self.effect,
                "legal": self.legal}


#: the families whose DSL program takes trace-level rewrites: hooks -> the kernel traced with
#: them (the same arguments and knobs as the family's kernel)
PROGRAMS: dict[str, str] = {"gemm": "argus.kernels.gemm:gemm_rewritten"}
#: the wave grids (rows, cols) of a 4-wave workgroup a regrid may choose
GRIDS = ((2, 2), (4, 1), (1, 4))
GRID = (2, 2)  # the library GEMM's own


def _program(family: str):
    import importlib

    module, _, attr = PROGRAMS[family].partition(":")
    return getattr(importlib.import_module(module), attr)


def _grid_hooks(hooks: dict) -> tuple[tuple, tuple]:
    """(the MFMA wave grid, the grid the epilogue's tile offsets assume)."""
    grid = tuple(hooks.get("wave_grid", GRID))
    return grid, tuple(hooks.get("epilogue_grid") or grid)


def _fits_grid(params: dict, grid: tuple) -> bool:
    """The tile is a whole number of the MFMA's blocks over the wave grid."""
    from argus.isa_cdna3.mfma import mfma

    if "instr" not in params or params.get("direct_lds"):
        return False
    info = mfma(params["instr"])
    return (params["block_m"] % (grid[0] * info.m) == 0
            and params["block_n"] % (grid[1] * info.n) == 0)


def _regrid_sites(params: dict, hooks: dict) -> list[tuple]:
    grid, epilogue = _grid_hooks(hooks)
    if grid != epilogue:
        return []
    return [g for g in GRIDS if g != grid and _fits_grid(params, g)]


def _regrid(hooks: dict, site: tuple) -> dict:
    return {**hooks, "wave_grid": tuple(site), "epilogue_grid": tuple(site)}


def _regrid_mainloop(hooks: dict, site: tuple) -> dict:
    _, epilogue = _grid_hooks(hooks)
    return {**hooks, "wave_grid": tuple(site), "epilogue_grid": epilogue}


def _epilogue_sites(params: dict, hooks: dict) -> list[tuple]:
    grid, epilogue = _grid_hooks(hooks)
    return [grid] if grid != epilogue else []


def _regrid_epilogue(hooks: dict, site: tuple) -> dict:
    return {**hooks, "epilogue_grid": tuple(site)}


def _pingpong_sites(params: dict, hooks: dict) -> list[tuple]:
    """(2,): the first 2 of the 4 waves stage early, where the GEMM stages through registers
    two K tiles ahead (with one, the early group's stores would wait for the load issued just
    before them) and no ping-pong is there yet."""
    if hooks.get("pingpong") or params.get("direct_lds") or params.get("prefetch", 1) != 2:
        return []
    return [(2,)]


def _pingpong(mode: str):
    return lambda hooks, site: {**hooks, "pingpong": mode, "early_waves": site[0]}


def _handoff_sites(params: dict, hooks: dict) -> list[tuple]:
    return [(hooks.get("early_waves", 2),)] if hooks.get("pingpong") == "late" else []


TRACE_REWRITES: dict[str, TraceRewrite] = {r.name: r for r in (
    TraceRewrite("regrid", "lds", "a 4-wave MFMA kernel whose tile is a whole number of the "
                 "MFMA's blocks over another wave grid (2x2, 4x1, 1x4)",
                 "tile the 4 waves 4x1 or 1x4 instead of 2x2 over each MFMA block, main loop and "
                 "epilogue together: a wave then reads fewer A and more B fragments from LDS "
                 "per MFMA (or the reverse), which pays on tiles longer in one dimension",
                 "always", _regrid_sites, _regrid, 0.3),
    TraceRewrite("regrid_mainloop", "lds", "as regrid",
                 "change the main loop's wave grid only, leaving the epilogue's tile offsets as "
                 "they were (fewer edits); wrong unless the two grids' offsets agree",
                 "verifier decides", _regrid_sites, _regrid_mainloop, 0.1),
    TraceRewrite("regrid_epilogue", "lds", "an epilogue whose tile offsets assume another wave "
                 "grid than the main loop's",
                 "the epilogue stores each accumulator tile where the main loop's wave grid "
                 "computed it", "always", _epilogue_sites, _regrid_epilogue, 0.0, repair=True),
    TraceRewrite("pingpong", "latency", "a GEMM staged through registers two K tiles ahead "
                 "(prefetch 2)",
                 "split the 4 waves into two groups of 2 that store the next K tile's share "
                 "into LDS at opposite ends of their MFMAs (one group before, the other after), "
                 "so one group's LDS writes overlap the other's MFMAs; both before the loop's "
                 "barrier", "always", _pingpong_sites, _pingpong("split"), 0.3),
    TraceRewrite("pingpong_late", "latency", "as pingpong",
                 "the ping-pong with the late group's stores moved past the loop's barrier, "
                 "into the next iteration's MFMAs (one barrier wait less on the critical "
                 "path); wrong unless another barrier hands those stores to the readers",
                 "verifier decides", _pingpong_sites, _pingpong("late"), 0.1),
    TraceRewrite("pingpong_handoff", "latency", "a ping-pong whose late group stores past the "
                 "loop's barrier",
                 "the late group's stores back before the barrier, which hands them to the next "
                 "iteration's readers", "always", _handoff_sites, _pingpong("split"), 0.0,
                 repair=True),
)}


def is_trace_rewrite(name: str) -> bool:
    return name in TRACE_REWRITES


def trace_hooks(family: str, params: dict, steps) -> dict:
    """The program hooks the candidate's trace-level rewrites set, in order, each checked
    against its precondition (a RewriteError when one does not apply)."""
    hooks: dict = {}
    for name, site in steps:
        if name not in TRACE_REWRITES:
            continue
        if family not in PROGRAMS:
            raise RewriteError(f"{name} rewrites the DSL program, and {family}'s declares no "
                               f"hooks for it (those that do: {sorted(PROGRAMS)})")
        step = TRACE_REWRITES[name]
        if tuple(site) not in step.sites(params, hooks):
            raise RewriteError(f"{name}@{tuple(site)} does not apply here (precondition: "
                               f"{step.when}; sites {step.sites(params, hooks)})")
        hooks = step.apply(hooks, tuple(site))
    return hooks


def trace_rewritten(entry, family: str, params: dict, steps) -> O.Kernel:
    """The family's kernel traced under the candidate's trace-level rewrites (its own kernel
    when there are none)."""
    hooks = trace_hooks(family, params, steps)
    kernel = _program(family)(**hooks) if hooks else entry.kernel
    return kernel.trace(**params)


def trace_sites(family: str, params: dict, steps) -> list[tuple[str, tuple]]:
    """Every (name, site) of a free trace-level rewrite a planner may add to the candidate."""
    if family not in PROGRAMS:
        return []
    try:
        hooks = trace_hooks(family, params, steps)
    except RewriteError:
        return []
    return [(r.name, site) for r in TRACE_REWRITES.values() if not r.repair
            for site in r.sites(params, hooks)]


def with_rewrite(steps, name: str, site) -> tuple:
    """`steps` with (name, site) added: a trace-level rewrite after the trace-level ones
    (before the IR rewrites, whose sites it keeps), an IR rewrite at the end."""
    steps = tuple(steps)
    if not is_trace_rewrite(name):
        return (*steps, (name, tuple(site)))
    cut = next((i for i, (n, _) in enumerate(steps) if not is_trace_rewrite(n)), len(steps))
    return (*steps[:cut], (name, tuple(site)), *steps[cut:])


def rewrite(name: str) -> Rewrite:
    if name not in REWRITES:
        raise RewriteError(f"no rewrite {name!r}; choose one of {sorted(REWRITES)}")
    return REWRITES[name]


def apply_rewrites(kernel: O.Kernel, steps) -> O.Kernel:
    """`kernel` with each (name, site) IR rewrite applied in order (trace-level ones were
    applied when it was traced); a step that does not apply is a `RewriteError` naming it."""
    for name, site in steps:
        if is_trace_rewrite(name):
            continue
        try:
            kernel = rewrite(name).apply(kernel, tuple(site))
        except IRError as err:
            raise RewriteError(f"{name}@{tuple(site)} breaks an IR rule: {err}") from None
    return kernel


def offered(kernel: O.Kernel, *, repairs: bool = False) -> list[tuple[str, tuple]]:
    """Every (name, site) a planner may add to `kernel`: the free moves, and with `repairs`
    the repair rewrites too."""
    return [(r.name, site) for r in REWRITES.values() if repairs or not r.repair
            for site in r.sites(kernel)]

"""Mutation operators over traced IR kernels, each seeding one known defect class, and the
mutants they make: a Program labelled with its operator, site, defect class and the obligation
kinds of which at least one must come back Refuted. `mutate(kernel, operator, site)` is the
one entry point (the reproducer of a mutant calls it); `mutants(...)` draws mutants for
hypothesis and `catalogue(...)` lists every mutant of a kernel."""

from __future__ import annotations

from collections.abc import Callable

import attrs
from hypothesis import strategies as st

from argus.ir import ops as O
from argus.ir.expr import Expr, Term, Var, free_vars, rebuild, substitute
from argus.ir.rewrite import replace_op, replace_values, sites
from argus.ir.types import LANES, IRError, RegType, ThreadLayout, Value
from argus.testing.programs import Program, as_program

__all__ = ["Operator", "OPERATORS", "Mutant", "mutate", "mutant_sites", "defect_sites",
           "make_mutant", "mutants", "catalogue"]

#: what a missing or misplaced barrier shows up as: LDS races, reads of unwritten LDS, stale
#: tags, and unordered global accesses inside one workgroup
LDS = frozenset({"lds-race", "lds-uninitialised", "tag-assertion"})
BARRIER = LDS | {"global-order"}


@attrs.frozen
class Operator:
    """A mutation operator: `candidates(kernel)` proposes sites, `apply(kernel, site)` seeds
    the defect there; a mutant of it must have an obligation of a kind in `expects` Refuted.
    With `may_be_equivalent` some sites leave a correct kernel (a barrier another barrier
    already covers): only those where the reference interpreter sees a violation are kept.
    With `may_break_ir` some candidates break an IR rule (shapes): only well-formed ones are
    kept."""

    name: str
    defect: str
    expects: frozenset[str]
    candidates: Callable[[O.Kernel], list] = attrs.field(repr=False)
    apply: Callable[[O.Kernel, tuple], O.Kernel] = attrs.field(repr=False)
    may_be_equivalent: bool = False
    may_break_ir: bool = False


def _ops_of(kernel, kind, where=lambda op, loops: True) -> list[tuple[int, O.Op]]:
    return [(i, op) for i, op, loops in sites(kernel) if type(op) in kind and where(op, loops)]


def _evolve_at(kernel, index, **changes: Callable) -> O.Kernel:
    """The kernel with op `index` rebuilt with each field set to changes[field](op)."""
    return replace_op(kernel, index, lambda op: [
        attrs.evolve(op, **{name: change(op) for name, change in changes.items()})])


def _op_at(kernel, index) -> O.Op:
    return next(op for i, op, _ in sites(kernel) if i == index)


def _loop_of(kernel, index) -> O.For | None:
    loops = next(loops for i, _, loops in sites(kernel) if i == index)
    return loops[-1] if loops else None


# ------------------------------------------------------------------------ barriers and slots

def _barriers(kernel):
    return [(i, 0) for i, _ in _ops_of(kernel, (O.Barrier,))]


def _drop(kernel, site):
    return replace_op(kernel, site[0], lambda op: [])


def _ring_accesses(kind):
    """LDS accesses inside a pipelined loop whose slot index follows the loop variable."""
    def candidates(kernel):
        return [(i, 0) for i, op in _ops_of(
            kernel, kind, lambda op, loops: bool(loops) and loops[-1].stages > 1
            and loops[-1].iv in free_vars(op.origin[0]))]
    return candidates


def _slot_shift(delta):
    def apply(kernel, site):
        iv = _loop_of(kernel, site[0]).iv
        return _evolve_at(kernel, site[0], origin=lambda op: (
            substitute(op.origin[0], {iv: iv + delta}), *op.origin[1:]))
    return apply


# ------------------------------------------------------------------------------- swizzles

def _swizzled(kernel):
    return [(i, 0) for i, op in _ops_of(kernel, (O.LdsLoad, O.LdsStore))
            if "^" in str(op.addr.offset)]


def _unswizzle(kernel, site):
    from argus.lang.layouts import lds_layout

    return _evolve_at(kernel, site[0], addr=lambda op: lds_layout(op.addr.shape))


# -------------------------------------------------------------------------------- origins

def _global_axes(kernel):
    return [(i, axis) for i, op in _ops_of(kernel, (O.GlobalLoad, O.GlobalStore,
                                                     O.GlobalAtomicAdd))
            for axis in range(len(op.origin))
            if op.gather is None or op.gather.axis != axis]


def _shift_origin(kernel, site):
    index, axis = site
    return _evolve_at(kernel, index, origin=lambda op: tuple(
        o + 1 if a == axis else o for a, o in enumerate(op.origin)))


def _transposable(kernel):
    return [(i, 0) for i, op in _ops_of(kernel, (O.GlobalLoad,))
            if len(op.axes) == 2 and op.gather is None]


def _transpose(kernel, site):
    return _evolve_at(kernel, site[0], axes=lambda op: tuple(reversed(op.axes)))


def _guarded(kernel):
    return [(i, 0) for i, op in _ops_of(kernel, (O.GlobalLoad, O.GlobalStore)) if op.guard]


def _unguard(kernel, site):
    return _evolve_at(kernel, site[0], guard=lambda op: False)


def _program_ids(kernel) -> list[Var]:
    return [op.var for _, op in _ops_of(kernel, (O.ProgramId,))]


def _stores_by_workgroup(kernel):
    pids = set(_program_ids(kernel))
    return [(i, axis) for i, op in _ops_of(kernel, (O.GlobalStore,))
            for axis, o in enumerate(op.origin) if free_vars(o) & pids]


def _share_tile(kernel, site):
    index, axis = site
    pids = _program_ids(kernel)
    return _evolve_at(kernel, index, origin=lambda op: tuple(
        substitute(o, {p: p // 2 for p in pids}) if a == axis else o
        for a, o in enumerate(op.origin)))


# ---------------------------------------------------------------------- operand layouts

def _operand_loads(kernel, need_groups=False):
    """(mfma index, operand) whose register tile comes straight from a load."""
    from argus.isa_cdna3.mfma import mfma

    producers = {op.result: op for _, op in _ops_of(kernel, (O.LdsLoad, O.GlobalLoad))}
    found = []
    for i, op in _ops_of(kernel, (O.Mfma,)):
        info = mfma(op.instr)
        groups = info.k // info.k_per_lane
        for n, value in enumerate((op.a, op.b)):
            layout = value.type.layout
            if value not in producers or layout.slots != info.k_per_lane:
                continue
            if need_groups and not (info.blocks == 1 and groups > 1 and info.k_per_lane > 1
                                    and LANES % groups == 0):
                continue
            found.append((i, n))
    return found


def _relayout(kernel, site, moved: Callable) -> O.Kernel:
    """The kernel whose MFMA operand `site` is loaded with its (lane, slot) renamed by
    `moved(info, lane, slot) -> {name: expr}` (one wrong fact about the fragment)."""
    from argus.isa_cdna3.mfma import mfma

    op = _op_at(kernel, site[0])
    return _renamed_threads(kernel, (op.a, op.b)[site[1]],
                            lambda lane, slot: moved(mfma(op.instr), lane, slot))


def _renamed_threads(kernel, value: Value, moved: Callable) -> O.Kernel:
    """The kernel whose register tile `value` has its layout's (lane, slot) renamed by
    `moved(lane, slot) -> {name: expr}`, everywhere the value is defined and used."""
    layout = value.type.layout
    lane, slot = Var("lane", 0, LANES), Var("slot", 0, layout.slots)
    mapping = moved(lane, slot)
    coords = tuple(substitute(c, mapping) for c in layout.coords)
    new = Value(value.name, RegType(value.type.dtype, value.type.shape,
                                    ThreadLayout(layout.waves, layout.slots, coords)))
    return replace_values(kernel, {value: new})


def _half_kwidth(info, lane, slot):
    # kWidth w = k_per_lane / 2: lane group h holds k = w*h + slot % w + (slot // w) * w * groups
    groups, width = info.k // info.k_per_lane, info.k_per_lane // 2
    per_group = LANES // groups
    k = width * (lane // per_group) + slot % width + slot // width * width * groups
    return {"lane": lane % per_group + k // info.k_per_lane * per_group,
            "slot": k % info.k_per_lane}


def _rotate_lanes(info, lane, slot):
    return {"lane": (lane + 1) % LANES}


def _broadcasting_mfmas(kernel):
    return [(i, 0) for i, op in _ops_of(kernel, (O.MfmaBroadcast,)) if op.cbsz > 0]


def _next_abid(kernel, site):
    return _evolve_at(kernel, site[0], abid=lambda op: (op.abid + 1) % 2 ** op.cbsz)


def _exchanges(kernel):
    """Cross-lane exchanges (reductions, broadcasts) whose result layout depends on the lane."""
    return [(i, 0) for i, op in _ops_of(kernel, (O.Reduce, O.Broadcast))
            if any(v.name == "lane" for c in op.result.type.layout.coords for v in free_vars(c))]


def _shift_exchange(kernel, site):
    op = _op_at(kernel, site[0])
    return _renamed_threads(kernel, op.result, lambda lane, slot: {"lane": (lane + 1) % LANES})


# ----------------------------------------------------------------------------------- masks

def _checked_masks(kernel):
    return [(i, 0) for i, op in _ops_of(kernel, (O.Mask,))
            if op.asserts and len(op.x.type.shape) == 2]


def _loosened(e: Expr) -> Expr:
    if not isinstance(e, Term):
        return e
    if e.op == "le":
        return rebuild("le", (e.args[0], e.args[1] + 1))
    if e.op == "lt":
        return rebuild("le", e.args)
    if e.op in ("land", "lor"):
        return rebuild(e.op, tuple(_loosened(a) for a in e.args))
    return e


def _loosen_mask(kernel, site):
    return _evolve_at(kernel, site[0], keep=lambda op: _loosened(op.keep))


def _transpose_mask(kernel, site):
    def keep(op):
        rows, cols = op.x.type.shape
        return substitute(op.keep, {"c0": Var("c1", 0, cols), "c1": Var("c0", 0, rows)})
    return _evolve_at(kernel, site[0], keep=keep)


OPERATORS: dict[str, Operator] = {op.name: op for op in (
    Operator("drop_barrier", "missing barrier between accesses of different threads (LDS, or "
             "global memory within a workgroup)", BARRIER,
             _barriers, _drop, may_be_equivalent=True),
    Operator("early_slot", "double-buffer slot reused one iteration early (the prefetch "
             "overwrites a slot still to be read)", LDS, _ring_accesses((O.LdsStore,)),
             _slot_shift(-1)),
    Operator("stale_slot", "LDS ring read at the slot of another iteration", LDS,
             _ring_accesses((O.LdsLoad,)), _slot_shift(1)),
    Operator("forget_swizzle", "swizzle forgotten on one side of an LDS round trip",
             frozenset({"tag-assertion", "lds-uninitialised"}), _swizzled, _unswizzle),
    Operator("shift_origin", "tile origin off by one",
             frozenset({"out-of-bounds", "tag-assertion", "global-race"}), _global_axes,
             _shift_origin),
    Operator("transpose_load", "operand loaded with its axes swapped (transposed layout)",
             frozenset({"out-of-bounds", "tag-assertion"}), _transposable, _transpose,
             may_break_ir=True),
    Operator("wrong_kwidth", "MFMA operand with half the k elements per lane it needs "
             "(wrong kWidth)", frozenset({"tag-assertion"}),
             lambda k: _operand_loads(k, need_groups=True),
             lambda k, s: _relayout(k, s, _half_kwidth)),
    Operator("rotate_lanes", "MFMA operand fragment one lane off",
             frozenset({"tag-assertion"}), _operand_loads,
             lambda k, s: _relayout(k, s, _rotate_lanes)),
    Operator("shift_exchange", "cross-lane reduction or broadcast one lane off (a row's "
             "statistics land on its neighbour)", frozenset({"tag-assertion", "tag-missing"}),
             _exchanges, _shift_exchange),
    Operator("wrong_abid", "MFMA A broadcast (CBSZ) from the wrong block (ABID)",
             frozenset({"tag-assertion"}), _broadcasting_mfmas, _next_abid),
    Operator("loosen_mask", "causal mask off by one (keeps one key past the query)",
             frozenset({"tag-assertion"}), _checked_masks, _loosen_mask),
    Operator("transpose_mask", "causal mask with key and query swapped",
             frozenset({"tag-assertion"}), _checked_masks, _transpose_mask),
    Operator("drop_guard", "predicated (guarded) global access made unconditional",
             frozenset({"out-of-bounds"}), _guarded, _unguard, may_be_equivalent=True),
    Operator("share_tile", "two workgroups store one output tile",
             frozenset({"global-race", "tag-assertion"}), _stores_by_workgroup, _share_tile),
)}


def _operator(name: str) -> Operator:
    if name not in OPERATORS:
        raise KeyError(f"no mutation operator {name!r}; choose one of {sorted(OPERATORS)}")
    return OPERATORS[name]


def mutate(kernel: O.Kernel, operator: str, site: tuple) -> O.Kernel:
    """`kernel` with the defect of `operator` seeded at `site` (see `mutant_sites`)."""
    return _operator(operator).apply(kernel, tuple(site))


_SITES: dict = {}


def mutant_sites(kernel: O.Kernel, operator: str) -> list[tuple]:
    """The sites where `operator` makes a well-formed mutant of `kernel`."""
    key = (id(kernel), operator)
    if key not in _SITES or _SITES[key][0] is not kernel:
        _SITES[key] = (kernel, _well_formed(kernel, _operator(operator)))
    return list(_SITES[key][1])


def _well_formed(kernel: O.Kernel, op: Operator) -> list[tuple]:
    if not op.may_break_ir:
        return list(op.candidates(kernel))
    found = []
    for site in op.candidates(kernel):
        try:
            op.apply(kernel, site)
        except IRError:  # the rewrite breaks an IR rule (shapes, layouts): not a mutant
            continue
        found.append(site)
    return found


@attrs.frozen(eq=False, kw_only=True, repr=False)
class Mutant(Program):
    """A Program with one seeded defect: `operator` at `site` of `base`."""

    base: Program
    operator: str
    site: tuple

    @property
    def defect(self) -> str:
        return OPERATORS[self.operator].defect

    @property
    def expects(self) -> frozenset[str]:
        return OPERATORS[self.operator].expects


def make_mutant(base: Program, operator: str, site: tuple) -> Mutant:
    """`base` with `operator` applied at `site`, as a `Mutant` whose source rebuilds it."""
    kernel = mutate(base.kernel, operator, site)
    source = (base.source + "\nfrom argus.testing import mutate\n\n"
              f"KERNEL = mutate(KERNEL, {operator!r}, {tuple(site)!r})\n")
    return Mutant(kernel=kernel, source=source, name=f"{base.name} / {operator}{tuple(site)}",
                  sizes=base.sizes, oracle=base.oracle, inputs=base.inputs, base=base,
                  operator=operator, site=tuple(site))


_DEFECTS: dict = {}


def defect_sites(base: Program, operator: str) -> list[tuple]:
    """`mutant_sites`, less those the reference interpreter shows to leave a correct kernel at
    the program's oracle sizes (for operators that `may_be_equivalent`)."""
    found = mutant_sites(base.kernel, operator)
    if not OPERATORS[operator].may_be_equivalent:
        return found
    key = (id(base.kernel), operator)
    if key not in _DEFECTS or _DEFECTS[key][0] is not base.kernel:
        _DEFECTS[key] = (base.kernel, [s for s in found if _seen(make_mutant(base, operator, s))])
    return list(_DEFECTS[key][1])


def _seen(mutant: Mutant) -> bool:
    from argus.testing.checks import interpreter_violations

    return any(v.kind in mutant.expects for sizes in mutant.oracle
               for v in interpreter_violations(mutant, sizes))


def catalogue(kernel, operators=None) -> list[Mutant]:
    """Every mutant of `kernel` (an @kernel, traced kernel or Program) by `operators` (names;
    default all)."""
    base = as_program(kernel)
    return [make_mutant(base, name, site) for name in (operators or OPERATORS)
            for site in defect_sites(base, name)]


def mutants(kernel, operators=None) -> st.SearchStrategy:
    """Mutants of `kernel` (an @kernel, traced kernel, Program or a strategy of Programs such
    as `tile_programs(...)`), one operator at one site; `operators` limits the catalogue."""
    programs = kernel if isinstance(kernel, st.SearchStrategy) else st.just(as_program(kernel))
    return _mutants(programs, tuple(operators or OPERATORS))


@st.composite
def _mutants(draw, programs, operators) -> Mutant:
    base = draw(programs)
    names = [n for n in operators if defect_sites(base, n)]
    if not names:
        raise ValueError(f"no mutation operator applies to {base.name} "
                         f"(tried {sorted(operators)})")
    name = draw(st.sampled_from(names))
    return make_mutant(base, name, draw(st.sampled_from(defect_sites(base, name))))

"""The knowledge base of optimisation moves the planners read and cite: each `Move` says when it
applies (a precondition in words and as a predicate over a `Context`), what it changes (the
knob actions it produces) and why it tends to help, with a prior belief in its gain.

Moves name knobs, not families, so a family gets every move whose knobs it has. Tricks that
change what is measured (batching launches into graphs, side streams) are deliberately absent.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from argus.search.space import MFMA_16, MFMA_32, Action, Candidate, Problem, family

#: MI300X compute units (AMD CDNA3 white paper). The grid-filling preconditions use it until
#: the performance model's GPU profile exposes it (issue 12).
MI300X_CUS = 304


@attrs.frozen
class Context:
    """What a precondition may look at: the problem, the candidate the move starts from, and
    the facts its evaluation produced (resources, bank conflicts, modelled-time breakdown)."""

    problem: Problem
    candidate: Candidate
    facts: dict = attrs.field(factory=dict, hash=False)

    @property
    def params(self) -> dict:
        return self.candidate.param_dict

    def has(self, *knobs: str) -> bool:
        names = {k.name for k in family(self.problem.family).knobs}
        return all(k in names for k in knobs)

    def step(self, knob: str, by: int):
        if not self.has(knob):
            return None
        return family(self.problem.family).knob(knob).step(self.params[knob], by)

    @property
    def workgroups(self) -> int:
        """Workgroups the grid launches at the target sizes (tiles of the output, times split)."""
        p, s = self.params, self.problem.sizes
        if self.problem.family == "gemm":
            return (s["M"] // p["block_m"]) * (s["N"] // p["block_n"]) * p["split_k"]
        if self.problem.family == "moe_gemm":
            return -(-s["TOKENS"] // p["block_m"]) * (s["N"] // p["block_n"])
        return s["BH"] * (s["S"] // 128)


@attrs.frozen
class Move:
    id: str
    knob: str  # the knob it turns; a family without it never sees the move
    bottleneck: str  # memory | compute | latency | lds | occupancy
    when: str
    effect: str
    rationale: str
    applies: Callable[[Context], bool] = attrs.field(eq=False, repr=False)
    actions: Callable[[Context], tuple[Action, ...] | None] = attrs.field(eq=False, repr=False)
    prior: float = 0.5  # prior mean of "this move makes a new best" (a pseudo-observation)

    def propose(self, ctx: Context) -> tuple[Action, ...] | None:
        """The actions of this move from `ctx`, or None when it does not apply there."""
        try:
            if not self.applies(ctx):
                return None
            return self.actions(ctx)
        except KeyError:  # a knob or size this family does not have
            return None

    def to_prompt(self) -> dict:
        return {"id": self.id, "bottleneck": self.bottleneck, "when": self.when,
                "effect": self.effect, "why": self.rationale}


def _set(knob: str, by: int):
    def actions(ctx: Context):
        value = ctx.step(knob, by)
        return None if value is None else (Action(knob, value),)
    return actions


def _divides(ctx: Context, knob: str, by: int, size: str, times: str | None = None) -> bool:
    value = ctx.step(knob, by)
    if value is None:
        return False
    extent = value * (ctx.params[times] if times else 1)
    return ctx.problem.sizes[size] % extent == 0


def _lds_frees_waves(ctx: Context) -> bool:
    return ctx.facts.get("lds_bytes", 0) > 32 * 1024


def _conflicted(ctx: Context) -> bool:
    return ctx.facts.get("bank_conflict_degree", 1) > 1


MOVES: tuple[Move, ...] = (
    Move("grow_m", "block_m", "memory", "M divides by twice block_m",
         "block_m one step up",
         "each B tile brought into LDS then feeds twice as many MFMAs, halving B traffic per "
         "FLOP; pays while the grid still fills the CUs",
         lambda c: _divides(c, "block_m", 1, "M"), _set("block_m", 1), 0.6),
    Move("grow_n", "block_n", "memory", "N divides by twice block_n",
         "block_n one step up",
         "each A tile feeds twice as many MFMAs, halving A traffic per FLOP",
         lambda c: _divides(c, "block_n", 1, "N"), _set("block_n", 1), 0.6),
    Move("shrink_m", "block_m", "occupancy",
         f"the grid has fewer workgroups than the {MI300X_CUS} CUs",
         "block_m one step down",
         "more, smaller workgroups fill idle CUs and shorten the last dispatch round",
         lambda c: c.workgroups < MI300X_CUS and c.step("block_m", -1) is not None,
         _set("block_m", -1), 0.4),
    Move("shrink_n", "block_n", "occupancy",
         f"the grid has fewer workgroups than the {MI300X_CUS} CUs",
         "block_n one step down",
         "more, smaller workgroups fill idle CUs and shorten the last dispatch round",
         lambda c: c.workgroups < MI300X_CUS and c.step("block_n", -1) is not None,
         _set("block_n", -1), 0.4),
    Move("deepen_k", "block_k", "latency", "K divides by twice block_k times split_k",
         "block_k one step up",
         "fewer barriers and loop trips per MFMA, and more bytes in flight per wait on vmcnt, "
         "which hides global-memory latency behind the double buffer",
         lambda c: (_divides(c, "block_k", 1, "K", "split_k") if c.has("split_k")
                    else _divides(c, "block_k", 1, "H")), _set("block_k", 1), 0.5),
    Move("shallow_k", "block_k", "lds",
         "the tile's LDS exceeds 32 KiB, so at most one workgroup per CU",
         "block_k one step down",
         "halving the staged K slice halves LDS per workgroup, letting a second workgroup share "
         "the CU and hide the other's barrier and memory waits",
         lambda c: _lds_frees_waves(c) and c.step("block_k", -1) is not None,
         _set("block_k", -1), 0.4),
    Move("split_k", "split_k", "occupancy",
         f"fewer output tiles than the {MI300X_CUS} CUs and K at least 8 K tiles long",
         "split_k one step up (partial tiles added atomically)",
         "a short, wide problem leaves CUs idle; splitting K multiplies the workgroups, at the "
         "price of atomic adds and a zeroed output",
         lambda c: (c.workgroups < MI300X_CUS and c.step("split_k", 1) is not None
                    and c.problem.sizes["K"] % (c.params["block_k"] * c.step("split_k", 1)) == 0
                    and c.problem.sizes["K"] // (c.params["block_k"] * c.params["split_k"]) >= 8),
         _set("split_k", 1), 0.5),
    Move("unsplit_k", "split_k", "memory", "split_k is above 1",
         "split_k one step down",
         "each split re-reads and atomically re-writes the whole C tile; fewer splits save that "
         "traffic once the grid fills the machine",
         lambda c: c.step("split_k", -1) is not None, _set("split_k", -1), 0.4),
    Move("mfma_16x16", "instr", "compute", "32x32x8 MFMA in use and a 64-wide tile side",
         "instr = v_mfma_f32_16x16x16_bf16",
         "16x16x16 MFMA for small M: finer fragments, four times the independent accumulators "
         "per wave, and k=16 per instruction halves the MFMA count per K step",
         lambda c: (c.has("instr") and c.params["instr"] == MFMA_32
                    and min(c.params["block_m"], c.params["block_n"]) == 64),
         lambda c: (Action("instr", MFMA_16),), 0.4),
    Move("mfma_32x32", "instr", "compute", "16x16x16 MFMA in use",
         "instr = v_mfma_f32_32x32x8_bf16",
         "the 32x32 MFMA reads each A and B register for twice the outputs, so large tiles need "
         "fewer LDS reads per FLOP",
         lambda c: c.has("instr") and c.params["instr"] == MFMA_16,
         lambda c: (Action("instr", MFMA_32),), 0.4),
    Move("swizzle_lds", "swizzle", "lds", "LDS tiles are not swizzled", "swizzle = True",
         "XOR-swizzling the chunk index by the row spreads an MFMA operand read over all 32 "
         "banks instead of serialising it",
         lambda c: c.has("swizzle") and (not c.params["swizzle"]),
         lambda c: (Action("swizzle", True),), 0.6),
    Move("plain_lds", "swizzle", "compute",
         "LDS tiles are swizzled and no bank conflict is reported",
         "swizzle = False",
         "without conflicts the swizzle's XOR per address is pure VALU overhead",
         lambda c: c.has("swizzle") and c.params["swizzle"] and not _conflicted(c),
         lambda c: (Action("swizzle", False),), 0.2),
)


def moves_for(problem: Problem) -> tuple[Move, ...]:
    """The moves whose knob the problem's family has."""
    names = {k.name for k in family(problem.family).knobs}
    return tuple(m for m in MOVES if m.knob in names)


def move(move_id: str) -> Move:
    for m in MOVES:
        if m.id == move_id:
            return m
    raise KeyError(f"no move {move_id!r}; the knowledge base has {[m.id for m in MOVES]}")

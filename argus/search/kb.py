"""The knowledge base of optimisation moves the planners read and cite: each `Move` says when it
applies (a precondition in words and as a predicate over a `Context`), what it changes (the
knob actions it produces) and why it tends to help, with a prior belief in its gain.

Moves name knobs, not families, so a family gets every move whose knobs it has. Tricks that
change what is measured (batching launches into graphs, side streams) are deliberately absent.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from argus.isa_cdna3.perf.params import profile
from argus.search.space import MFMA_16, MFMA_32, Action, Candidate, Problem

#: MI300X compute units, from the performance model's GPU profile (the grid-filling preconditions)
MI300X_CUS = profile("mi300x").cus.value


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
        names = {k.name for k in self.problem.knobs()}
        return all(k in names for k in knobs)

    def step(self, knob: str, by: int):
        if not self.has(knob):
            return None
        return self.problem.knob(knob).step(self.params[knob], by)

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
    """One optimisation move: the knob it turns, where it is possible (`possible`), when it
    tends to pay (`favoured`, stated in words by `when`), what it changes and why."""

    id: str
    knob: str  # the knob it turns; a family without it never sees the move
    bottleneck: str  # memory | compute | latency | lds | occupancy
    when: str
    effect: str
    rationale: str
    possible: Callable[[Context], bool] = attrs.field(eq=False, repr=False)
    actions: Callable[[Context], tuple[Action, ...] | None] = attrs.field(eq=False, repr=False)
    favoured: Callable[[Context], bool] = attrs.field(eq=False, repr=False)
    prior: float = 0.5  # prior mean of "this move makes a new best" where it is favoured

    def propose(self, ctx: Context) -> tuple[Action, ...] | None:
        """The actions of this move from `ctx`, or None when it is not possible there."""
        try:
            if not self.possible(ctx):
                return None
            return self.actions(ctx)
        except KeyError:  # a knob or size this family does not have
            return None

    def prior_at(self, ctx: Context) -> float:
        """The prior where the precondition holds, a quarter of it where it does not (a
        heuristic can be wrong for a shape; the bandit's data then overrules it)."""
        try:
            return self.prior if self.favoured(ctx) else self.prior / 4
        except KeyError:
            return self.prior / 4

    def to_prompt(self) -> dict:
        return {"id": self.id, "bottleneck": self.bottleneck, "when": self.when,
                "effect": self.effect, "why": self.rationale}


def _set(knob: str, by: int):
    def actions(ctx: Context):
        value = ctx.step(knob, by)
        return None if value is None else (Action(knob, value),)
    return actions


def _can(knob: str, by: int):
    return lambda ctx: ctx.step(knob, by) is not None


def k_tiles(ctx: Context) -> int:
    """Iterations of the K loop per workgroup at the target shape."""
    k = ctx.problem.sizes.get("K", ctx.problem.sizes.get("H", 0))
    return k // (ctx.params["block_k"] * ctx.params.get("split_k", 1))


def key_blocks(ctx: Context) -> int:
    """Key blocks an attention workgroup loops over at the target shape (32 keys per block)."""
    return ctx.problem.sizes["S"] // 32


def _vgpr_limited(ctx: Context) -> bool:
    return "VGPR" in str(ctx.facts.get("occupancy_limited_by", "")).upper()


def _lds_limited(ctx: Context) -> bool:
    return "LDS" in str(ctx.facts.get("occupancy_limited_by", "")).upper()


def _unroll_changes_code(ctx: Context) -> bool:
    """Under `interleave` the loop is already unrolled by its 2 LDS stages, so only a factor
    past 2 changes the code; under `simple` every step does."""
    return ctx.params["policy"] == "simple" or ctx.params["unroll"] >= 2


def _conflicted(ctx: Context) -> bool:
    return ctx.facts.get("bank_conflict_degree", 1) > 1


MOVES: tuple[Move, ...] = (
    Move("grow_m", "block_m", "memory",
         f"the grid still has at least {MI300X_CUS} workgroups after the tile grows",
         "block_m one step up",
         "each B tile brought into LDS then feeds twice as many MFMAs, halving B traffic per "
         "FLOP",
         _can("block_m", 1), _set("block_m", 1),
         lambda c: c.workgroups // 2 >= MI300X_CUS, 0.6),
    Move("grow_n", "block_n", "memory",
         f"the grid still has at least {MI300X_CUS} workgroups after the tile grows",
         "block_n one step up",
         "each A tile feeds twice as many MFMAs, halving A traffic per FLOP",
         _can("block_n", 1), _set("block_n", 1),
         lambda c: c.workgroups // 2 >= MI300X_CUS, 0.6),
    Move("shrink_m", "block_m", "occupancy",
         f"the grid has fewer workgroups than the {MI300X_CUS} CUs",
         "block_m one step down",
         "more, smaller workgroups fill idle CUs and shorten the last dispatch round",
         _can("block_m", -1), _set("block_m", -1), lambda c: c.workgroups < MI300X_CUS, 0.4),
    Move("shrink_n", "block_n", "occupancy",
         f"the grid has fewer workgroups than the {MI300X_CUS} CUs",
         "block_n one step down",
         "more, smaller workgroups fill idle CUs and shorten the last dispatch round",
         _can("block_n", -1), _set("block_n", -1), lambda c: c.workgroups < MI300X_CUS, 0.4),
    Move("deepen_k", "block_k", "latency", "the K loop runs at least 8 iterations",
         "block_k one step up",
         "fewer barriers and loop trips per MFMA, and more bytes in flight per wait on vmcnt, "
         "which hides global-memory latency behind the double buffer",
         _can("block_k", 1), _set("block_k", 1), lambda c: k_tiles(c) >= 8, 0.5),
    Move("shallow_k", "block_k", "lds",
         "the tile's LDS exceeds 32 KiB, so at most one workgroup fits a CU",
         "block_k one step down",
         "halving the staged K slice halves LDS per workgroup, letting a second workgroup share "
         "the CU and hide the other's barrier and memory waits",
         _can("block_k", -1), _set("block_k", -1),
         lambda c: c.facts.get("lds_bytes", 0) > 32 * 1024, 0.4),
    Move("prefetch_ahead", "prefetch", "latency",
         "the K loop runs at least 4 tiles per split",
         "prefetch one step up (the loads run two K tiles ahead)",
         "with the loads one tile ahead every iteration waits on vmcnt for the tile it just "
         "asked for, so each K tile pays the whole global-memory latency; two tiles ahead "
         "(the next one carried in registers) the wait covers a whole iteration of MFMAs",
         _can("prefetch", 1), _set("prefetch", 1), lambda c: k_tiles(c) >= 4, 0.6),
    Move("split_k", "split_k", "occupancy",
         f"fewer output tiles than the {MI300X_CUS} CUs and K at least 8 K tiles long",
         "split_k one step up (partial tiles added atomically)",
         "a short, wide problem leaves CUs idle; splitting K multiplies the workgroups, at the "
         "price of atomic adds and a zeroed output",
         _can("split_k", 1), _set("split_k", 1),
         lambda c: c.workgroups < MI300X_CUS and k_tiles(c) >= 8, 0.5),
    Move("unsplit_k", "split_k", "memory",
         f"the grid fills the {MI300X_CUS} CUs without the split",
         "split_k one step down",
         "each split re-reads and atomically re-writes the whole C tile; fewer splits save that "
         "traffic once the grid fills the machine",
         _can("split_k", -1), _set("split_k", -1),
         lambda c: c.workgroups // c.params["split_k"] >= MI300X_CUS, 0.4),
    Move("mfma_16x16", "instr", "compute", "a 64-wide tile side",
         "instr = v_mfma_f32_16x16x16_bf16",
         "16x16x16 MFMA for small M: finer fragments, four times the independent accumulators "
         "per wave, and k=16 per instruction halves the MFMA count per K step",
         lambda c: c.params["instr"] == MFMA_32, lambda c: (Action("instr", MFMA_16),),
         lambda c: min(c.params["block_m"], c.params["block_n"]) == 64, 0.4),
    Move("mfma_32x32", "instr", "compute", "both tile sides at least 128",
         "instr = v_mfma_f32_32x32x8_bf16",
         "the 32x32 MFMA reads each A and B register for twice the outputs, so large tiles need "
         "fewer LDS reads per FLOP",
         lambda c: c.params["instr"] == MFMA_16, lambda c: (Action("instr", MFMA_32),),
         lambda c: min(c.params["block_m"], c.params["block_n"]) >= 128, 0.4),
    Move("swizzle_lds", "swizzle", "lds", "always, where LDS tiles are not swizzled",
         "swizzle = True",
         "XOR-swizzling the chunk index by the row spreads an MFMA operand read over all 32 "
         "banks instead of serialising it",
         lambda c: not c.params["swizzle"], lambda c: (Action("swizzle", True),),
         lambda c: True, 0.6),
    Move("schedule_interleave", "policy", "latency", "always, where the simple schedule is in use",
         "policy = interleave",
         "interleaving LDS reads and the next tile's global loads with the MFMAs hides their "
         "latency behind matrix work",
         lambda c: c.params["policy"] != "interleave",
         lambda c: (Action("policy", "interleave"),), lambda c: True, 0.5),
    Move("schedule_simple", "policy", "occupancy", "registers limit the waves per SIMD",
         "policy = simple",
         "issuing in program order keeps fewer operand fragments live at once, which can buy a "
         "wave of occupancy when VGPRs are the limit",
         lambda c: c.params["policy"] != "simple", lambda c: (Action("policy", "simple"),),
         _vgpr_limited, 0.3),
    Move("unroll_kv", "unroll", "latency",
         "the key loop runs at least 8 blocks and the step changes the code (simple schedule, "
         "or past interleave's 2 copies)",
         "unroll one step up",
         "unrolling lets the scheduler overlap the softmax of block j (VALU, exp2, reductions) "
         "with block j+1's MFMAs, and saves a loop branch and counter update per block",
         _can("unroll", 1), _set("unroll", 1),
         lambda c: key_blocks(c) >= 8 and _unroll_changes_code(c), 0.4),
    Move("roll_kv", "unroll", "occupancy", "registers limit the waves per SIMD",
         "unroll one step down",
         "each unrolled copy keeps its own block's loads and scores live; fewer copies can buy "
         "a wave of occupancy when VGPRs are the limit",
         _can("unroll", -1), _set("unroll", -1), _vgpr_limited, 0.3),
    Move("stage_through_lds", "lds", "memory", "operands load straight from global memory",
         "lds = True",
         "staging the gathered rows and the weight tile through LDS reads each global element "
         "once per workgroup instead of once per wave that needs it, and the next tile's loads "
         "overlap this tile's MFMAs",
         lambda c: not c.params["lds"], lambda c: (Action("lds", True),), lambda c: True, 0.6),
    Move("direct_operands", "lds", "lds", "LDS limits the workgroups per CU",
         "lds = False",
         "loading MFMA operands straight into registers frees the LDS (and its barriers), "
         "which can buy occupancy when LDS is the limit; global traffic grows",
         lambda c: c.params["lds"], lambda c: (Action("lds", False),),
         _lds_limited, 0.2),
    Move("plain_lds", "swizzle", "compute", "no bank conflict is reported",
         "swizzle = False",
         "without conflicts the swizzle's XOR per address is pure VALU overhead",
         lambda c: c.params["swizzle"], lambda c: (Action("swizzle", False),),
         lambda c: not _conflicted(c), 0.2),
)


def moves_for(problem: Problem) -> tuple[Move, ...]:
    """The moves whose knob the problem's family has."""
    names = {k.name for k in problem.knobs()}
    return tuple(m for m in MOVES if m.knob in names)


def move(move_id: str) -> Move:
    for m in MOVES:
        if m.id == move_id:
            return m
    raise KeyError(f"no move {move_id!r}; the knowledge base has {[m.id for m in MOVES]}")

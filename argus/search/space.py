"""The search space as data: a kernel family's tunable knobs (frozen `Knob` records with their
legal values), a `Problem` (family + target sizes), a `Candidate` (a point of the space, or an
edited DSL source) and an `Action` (one move in the space) with `apply()`; `parse_shape` reads
the command line's `4096x4096x4096`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

import attrs

from argus.errors import ArgusError

MFMA_32 = "v_mfma_f32_32x32x8_bf16"
MFMA_16 = "v_mfma_f32_16x16x16_bf16"


class SearchError(ArgusError, ValueError):
    """Bad input to the search (a family, shape, knob value, option or run file it cannot use);
    the message names the place and the fix."""


@attrs.frozen
class Knob:
    """One tunable parameter of a family and the values the search may give it (in order, so
    "one step up" is the next value)."""

    name: str
    values: tuple
    doc: str = ""
    stage: str = "kernel"  # kernel: a trace parameter; compile: an option of argus.compile

    def step(self, value, by: int):
        """The value `by` positions away from `value`, or None past either end (or when
        `value` is not one of this knob's)."""
        if value not in self.values:
            return None
        index = self.values.index(value) + by
        return self.values[index] if 0 <= index < len(self.values) else None


#: the backend's scheduling policies (argus.compile(policy=...)); its default first
POLICY = Knob("policy", ("interleave", "simple"), "instruction scheduling of the backend",
              "compile")


@attrs.frozen
class Family:
    """A library kernel family: its knobs, the names of its shape dimensions (in the order the
    command line writes them) and how a shape fixes kernel parameters (attention's head_dim)."""

    name: str
    dims: tuple[str, ...]
    knobs: tuple[Knob, ...]
    #: parameters the problem fixes, from its sizes (not searched)
    fixed: Any = attrs.field(default=None, eq=False)
    #: check_sizes(params, trial) -> small sizes for correctness trial `trial` (shapes vary
    #: between trials, and each loop runs at least twice)
    check_sizes: Any = attrs.field(default=None, eq=False)
    #: timing_sizes(sizes, params) -> every size the kernel takes at the target shape, where the
    #: problem's own sizes imply more (MoE's padded rows under uniform routing)
    timing_sizes: Any = attrs.field(default=None, eq=False)

    def knob(self, name: str) -> Knob:
        for knob in self.knobs:
            if knob.name == name:
                return knob
        raise SearchError(f"family {self.name} has no knob {name!r}; it has "
                         f"{[k.name for k in self.knobs]}")


FAMILIES = {
    "gemm": Family("gemm", ("M", "N", "K"), (
        Knob("block_m", (64, 128, 256), "rows of C per workgroup"),
        Knob("block_n", (64, 128, 256), "columns of C per workgroup"),
        Knob("block_k", (16, 32, 64, 128), "K elements staged in LDS per iteration"),
        Knob("split_k", (1, 2, 4, 8), "K split over grid axis 2, partial tiles added atomically"),
        Knob("instr", (MFMA_32, MFMA_16), "MFMA instruction"),
        Knob("swizzle", (True, False), "XOR-swizzled LDS tiles"),
        POLICY,
    ), check_sizes=lambda p, t: {"M": p["block_m"] * (1 + t % 2), "N": p["block_n"] * (2 - t % 2),
                                 "K": p["block_k"] * p["split_k"] * (2 + t % 2)}),
    # the tiles are fixed by the kernel (32-key blocks, 128 queries per workgroup). Its
    # prefetch (2 or 3: key blocks carried in registers) is proved since loop invariants lift
    # carried tiles to the previous iteration's loads, but is not a knob yet: the search
    # figures in the README were measured on the space without it
    "attention_fwd": Family("attention_fwd", ("BH", "S", "D"), (
        Knob("unroll", (1, 2, 4), "copies of the key loop's body per machine iteration "
             "(interleave unrolls by the 2 LDS stages at least)"),
        POLICY,
    ),
                            fixed=lambda sizes: {"head_dim": sizes["D"]},
                            check_sizes=lambda p, t: {"BH": 1 + t % 2, "S": 128 * (1 + t % 2),
                                                      "D": p["head_dim"]}),
    "moe_gemm": Family("moe_gemm", ("TOKENS", "H", "E", "N"), (
        Knob("block_m", (64, 128), "token rows per workgroup"),
        Knob("block_n", (64, 128, 256), "output columns per workgroup"),
        Knob("block_k", (16, 32, 64, 128), "hidden elements per iteration"),
        Knob("lds", (True, False), "stage X rows and W tiles through double-buffered LDS "
             "(each element read once per workgroup) or load MFMA operands straight from "
             "global memory"),
        POLICY,
    ), check_sizes=lambda p, t: {"TOKENS": 61 + 53 * t, "H": p["block_k"] * 2, "E": 3 + t % 2,
                                 "N": p["block_n"] * (1 + t % 2)},
        timing_sizes=lambda s, p: _moe_sizes(s, p["block_m"])),
}


def _moe_sizes(sizes: dict, block_m: int) -> dict:
    """MoE sizes under uniform top-1 routing: each expert's tokens padded to whole row blocks."""
    per_expert = -(-sizes["TOKENS"] // sizes["E"])
    blocks = sizes["E"] * -(-per_expert // block_m)
    return {**sizes, "BLOCKS": blocks, "P": blocks * block_m}


def family(name: str) -> Family:
    if name not in FAMILIES:
        raise SearchError(f"no tunable family {name!r}; choose one of {sorted(FAMILIES)}")
    return FAMILIES[name]


@attrs.frozen
class Problem:
    """What to tune: a family at target sizes, with the parameters the user pins (causal=True)."""

    family: str
    sizes: dict = attrs.field(converter=dict, hash=False)
    pinned: dict = attrs.field(factory=dict, converter=dict, hash=False)

    @property
    def shape(self) -> str:
        return "x".join(str(self.sizes[d]) for d in family(self.family).dims)

    def fixed_params(self) -> dict:
        """Parameters not searched: those the shape implies and those pinned to one value."""
        fam = family(self.family)
        pinned = {k: v for k, v in self.pinned.items() if not isinstance(v, list | tuple)}
        return {**(fam.fixed(self.sizes) if fam.fixed else {}), **pinned}

    def knobs(self) -> tuple[Knob, ...]:
        """The knobs searched: the family's, less those pinned to one value, with the values of
        those pinned to a list restricted to it (`--param block_k=32,64`)."""
        out = []
        for knob in family(self.family).knobs:
            chosen = self.pinned.get(knob.name)
            if chosen is None:
                out.append(knob)
            elif isinstance(chosen, list | tuple):
                bad = [v for v in chosen if v not in knob.values]
                if bad or not chosen:
                    raise SearchError(f"--param {knob.name}: {bad or 'no value'} outside "
                                      f"{self.family}'s values {list(knob.values)}")
                out.append(attrs.evolve(knob, values=tuple(v for v in knob.values
                                                           if v in chosen)))
            elif chosen not in knob.values:
                raise SearchError(f"--param {knob.name}={chosen!r} is outside {self.family}'s "
                                  f"values {list(knob.values)}")
        return tuple(out)

    def knob(self, name: str) -> Knob:
        for knob in self.knobs():
            if knob.name == name:
                return knob
        raise SearchError(f"{name} is not searched in this problem")

    def to_dict(self) -> dict:
        return {"family": self.family, "sizes": self.sizes, "pinned": self.pinned}


def parse_shape(family_name: str, text: str) -> dict[str, int]:
    """`4096x4096x4096` -> {"M": 4096, "N": 4096, "K": 4096} in the family's dimension order."""
    dims = family(family_name).dims
    parts = text.lower().split("x")
    if len(parts) != len(dims) or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise SearchError(f"--shape {text!r}: {family_name} takes {'x'.join(dims)} as positive "
                         f"integers, e.g. {'x'.join(['256'] * len(dims))}")
    return dict(zip(dims, (int(p) for p in parts), strict=True))


@attrs.frozen
class Candidate:
    """A point of the space: knob values (sorted name/value pairs), optionally over an edited
    kernel source (an LLM's DSL edit); `key` is its content hash."""

    family: str
    params: tuple[tuple[str, Any], ...] = attrs.field(converter=lambda p: tuple(sorted(
        dict(p).items())))
    source: str | None = None
    #: program rewrites applied to the traced IR, in order: (name, site) pairs of
    #: `argus.search.rewrites` (a site is a tuple of op numbers)
    rewrites: tuple[tuple[str, tuple[int, ...]], ...] = attrs.field(
        default=(), converter=lambda steps: tuple((str(n), tuple(int(i) for i in site))
                                                  for n, site in steps))

    @property
    def param_dict(self) -> dict:
        return dict(self.params)

    @property
    def key(self) -> str:
        return _content_hash(self.family, self.params, self.source, self.rewrites)

    def describe(self) -> str:
        shown = " ".join(f"{k}={_short(v)}" for k, v in self.params)
        shown += "".join(f" +{name}@{','.join(map(str, site))}" for name, site in self.rewrites)
        return shown + (" +edit" if self.source else "")

    def to_dict(self) -> dict:
        data = {"family": self.family, "params": dict(self.params), "source": self.source}
        if self.rewrites:
            data["rewrites"] = [[name, list(site)] for name, site in self.rewrites]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Candidate:
        return cls(data["family"], data["params"], data.get("source"), data.get("rewrites", ()))


@functools.lru_cache(maxsize=65536)
def _content_hash(family_name: str, params: tuple, source: str | None,
                  rewrites: tuple = ()) -> str:
    """A candidate's key (planners ask for it over the whole space at every proposal); a
    candidate without rewrites keeps the key it had before rewrites existed."""
    data = {"family": family_name, "params": params, "source": source}
    if rewrites:
        data["rewrites"] = rewrites
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _short(value) -> str:
    return value.removeprefix("v_mfma_f32_").removesuffix("_bf16") if isinstance(value, str) \
        else str(value)


def default_candidate(problem: Problem) -> Candidate:
    """The family's default configuration (the kernel's own keyword defaults)."""
    from argus.kernels import library

    defaults = library()[problem.family].kernel.params
    chosen = {}
    for knob in problem.knobs():
        default = defaults[knob.name] if knob.stage == "kernel" else knob.values[0]
        chosen[knob.name] = default if default in knob.values else knob.values[0]
    return Candidate(problem.family, {**chosen, **problem.fixed_params()})


@attrs.frozen
class Action:
    """One move in the space: set `knob` to `value`."""

    knob: str
    value: Any

    def __str__(self) -> str:
        return f"{self.knob}={_short(self.value)}"


def apply(candidate: Candidate, actions, problem: Problem | None = None) -> Candidate:
    """The candidate with each action's knob set (values checked against the problem's knobs,
    or the family's)."""
    knobs = {k.name: k for k in (problem.knobs() if problem else family(candidate.family).knobs)}
    params = candidate.param_dict
    for action in actions:
        knob = knobs.get(action.knob)
        if knob is None:
            raise SearchError(f"{action.knob} is not a searched knob of {candidate.family}; "
                              f"searched: {sorted(knobs)}")
        if action.value not in knob.values:
            raise SearchError(f"{action.knob}={action.value!r} is outside {candidate.family}'s "
                              f"space {list(knob.values)}")
        params[action.knob] = action.value
    return attrs.evolve(candidate, params=params)


def every_candidate(problem: Problem):
    """All points of the declared space (for exhaustive benches), fixed parameters included."""
    import itertools

    knobs = problem.knobs()
    fixed = problem.fixed_params()
    for values in itertools.product(*(k.values for k in knobs)):
        yield Candidate(problem.family, {**dict(zip((k.name for k in knobs), values,
                                                    strict=True)), **fixed})

"""The search space as data: a kernel family's tunable knobs (the `Knob` records the library
kernel declares, with their legal values), a `Problem` (family + target sizes), a `Candidate`
(a point of the space, or an edited DSL source) and an `Action` (one move in the space) with
`apply()`; `parse_shape` reads the command line's `4096x4096x4096`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

import attrs

from argus.errors import ArgusError
from argus.kernels import MFMA_16, MFMA_32, POLICY, Knob, LibraryKernel, library

__all__ = ["MFMA_16", "MFMA_32", "POLICY", "Knob", "SearchError", "Problem", "Candidate",
           "Action", "apply", "family", "families", "user_family", "check_sizes", "parse_shape",
           "default_candidate", "every_candidate", "infeasible"]


class SearchError(ArgusError, ValueError):
    """Bad input to the search (a family, shape, knob value, option or run file it cannot use);
    the message names the place and the fix."""


def families() -> dict[str, LibraryKernel]:
    """The tunable families: the library kernels that declare knobs (`argus.kernels`, where
    each family's knobs, check sizes and fixed parameters are written once)."""
    return {name: entry for name, entry in library().items() if entry.knobs}


def family(name: str) -> LibraryKernel:
    """The tunable family `name`: a library kernel with knobs, or a user's own, written
    `path/to/file.py:NAME` where NAME is a `LibraryKernel` (its kernel, output, default sizes,
    numpy reference, tolerance and `Knob`s) the file defines."""
    found = families()
    if name in found:
        return found[name]
    path, colon, attr = name.rpartition(":")
    if colon and path.endswith(".py"):
        return user_family(path, attr)
    raise SearchError(f"no tunable family {name!r}; choose one of {sorted(found)}, or give "
                      "your own as FILE.py:NAME (a LibraryKernel with knobs in that file)")


def user_family(path: str, attr: str) -> LibraryKernel:
    """The `LibraryKernel` named `attr` in the user's file `path` (loaded once per file
    version: worker processes load it again by name, so the path is made absolute)."""
    import os

    where = os.path.abspath(path)
    try:
        stamp = os.stat(where).st_mtime_ns
    except OSError:
        raise SearchError(f"{path}: no such file", fix="give FILE.py:NAME of an existing "
                          "Python file") from None
    return _user_family(where, attr, stamp)


@functools.lru_cache(maxsize=16)
def _user_family(path: str, attr: str, stamp: int) -> LibraryKernel:
    from argus.kernels.resolve import import_file

    module = import_file(path)        # an error in the file is named at its line
    entry = getattr(module, attr, None)
    fix = (f"define {attr} = argus.kernels.LibraryKernel(kernel, output, sizes, reference, "
           "tolerance, knobs=(argus.kernels.Knob(name, values), ...)) in the file")
    if entry is None:
        raise SearchError(f"{path} defines no {attr!r}", fix=fix)
    if not isinstance(entry, LibraryKernel):
        raise SearchError(f"{path}:{attr} is a {type(entry).__name__}, not a LibraryKernel: "
                          "the search needs the kernel's knobs, sizes and reference", fix=fix)
    if not entry.knobs:
        raise SearchError(f"{path}:{attr} declares no knobs, so there is nothing to tune",
                          fix="give knobs=(Knob(\"block\", (32, 64, 128)), ...) naming "
                          "keyword parameters of the kernel")
    params = entry.kernel.params
    for knob in entry.knobs:
        if knob.stage == "kernel" and knob.name not in params:
            raise SearchError(f"{path}:{attr}: knob {knob.name!r} is no keyword parameter of "
                              f"{entry.kernel.name} (it takes {sorted(params)})",
                              fix="name a parameter of the kernel, or mark a compile option "
                              "with stage=\"compile\"")
    return entry


def check_sizes(entry: LibraryKernel, params: dict, trial: int) -> dict:
    """Sizes for correctness trial `trial`: the family's own choice, else its default sizes."""
    return entry.check_sizes(params, trial) if entry.check_sizes else dict(entry.sizes)


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
    defaults = family(problem.family).kernel.params
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


def infeasible(candidate: Candidate) -> str:
    """Why the candidate's knob point can never be built, at any shape ("" if it can), as its
    family declares (`LibraryKernel.infeasible`: LDS, registers, copy widths)."""
    rule = family(candidate.family).infeasible
    return rule(candidate.param_dict) if rule is not None else ""


def every_candidate(problem: Problem):
    """All points of the declared space (for exhaustive benches), fixed parameters included;
    the points the family declares infeasible (`infeasible`) are not part of it."""
    import itertools

    knobs = problem.knobs()
    fixed = problem.fixed_params()
    for values in itertools.product(*(k.values for k in knobs)):
        candidate = Candidate(problem.family, {**dict(zip((k.name for k in knobs), values,
                                                          strict=True)), **fixed})
        if not infeasible(candidate):
            yield candidate

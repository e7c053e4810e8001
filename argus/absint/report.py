"""What the verifier hands back: one verdict per proof obligation, confirmed counterexamples,
and performance facts (LDS bank conflicts), pretty-printed as in DESIGN.md and as JSON.
"""

from __future__ import annotations

import json

import attrs

from argus.errors import ArgusError

PROVED, REFUTED, UNKNOWN = "proved", "refuted", "unknown"


class VerifyError(ArgusError, ValueError):
    """The kernel uses a construct the verifier does not model; the message says which."""


@attrs.frozen
class Counterexample:
    """A concrete point where an obligation fails, replayed on the reference interpreter."""

    workgroup: tuple[int, ...]
    wave: int
    lane: int
    slot: int
    iteration: dict = attrs.field(factory=dict, hash=False)
    element: dict = attrs.field(factory=dict, hash=False)
    tags: dict = attrs.field(factory=dict, hash=False)
    sizes: dict = attrs.field(factory=dict, hash=False)
    detail: str = ""
    confirmed: bool = True
    others: tuple = ()  # another workgroup taking part (cross-workgroup races)

    def lines(self) -> list[str]:
        loops = "".join(f"  {name}={value}" for name, value in self.iteration.items())
        where = (f"  workgroup {self.workgroup}  wave {self.wave}  lane {self.lane}  "
                 f"slot {self.slot}{loops}")
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        element = ", ".join(f"{k}={v}" for k, v in self.element.items())
        out = [where, f"  element ({element})" + (f"  sizes {sizes}" if sizes else "")]
        roles = list(self.tags.items())
        if roles:
            shown = [f"{role} element ({_show_tags(tags)})" for role, tags in roles]
            out.append("  " + "  meets  ".join(shown))
        if self.detail:
            out.append(f"  {self.detail}")
        out.append("  confirmed by concrete replay" if self.confirmed else
                   "  not confirmed by concrete replay")
        return out


def _show_tags(tags: dict) -> str:
    return ", ".join(f"{k}=⊤" if v is None else f"{k}={v}" for k, v in tags.items())


@attrs.frozen
class Obligation:
    """One thing the verifier must prove at one op, and what it found."""

    #: tag-assertion, tag-missing, out-of-bounds, lds-race, lds-uninitialised, async-pending
    #: (a thread reads LDS its own async copy has not landed in), global-race, global-order,
    #: budget
    kind: str
    message: str
    loc: str
    verdict: str
    counterexample: Counterexample | None = None
    reason: str = ""
    seconds: float = 0.0

    @property
    def proved(self) -> bool:
        return self.verdict == PROVED

    def __str__(self) -> str:
        head = f"{self.loc}: {self.kind}: {self.message}"
        if self.verdict == PROVED:
            return f"{head}: proved"
        if self.verdict == UNKNOWN:
            return f"{head}: unknown ({self.reason})"
        lines = [f"{self.loc}: {_headline(self)}"]
        if self.counterexample is not None:
            lines += self.counterexample.lines()
        return "\n".join(lines)


def _headline(ob: Obligation) -> str:
    if ob.kind == "tag-assertion":
        return f"tag assertion '{ob.message}' does not hold"
    return f"{ob.kind}: {ob.message}"


@attrs.frozen
class BankFact:
    """Bank-conflict degree of one LDS access (1 = conflict-free), a performance fact."""

    loc: str
    access: str
    degree: int
    bytes_per_lane: int

    def __str__(self) -> str:
        return (f"{self.loc}: {self.access} of {self.bytes_per_lane} B per lane: "
                f"{self.degree}-way bank conflict" if self.degree > 1 else
                f"{self.loc}: {self.access} of {self.bytes_per_lane} B per lane: conflict-free")


@attrs.frozen
class Report:
    """Every obligation of one kernel, with its verdict."""

    kernel: str
    sizes: dict = attrs.field(hash=False)
    obligations: tuple[Obligation, ...]
    bank_facts: tuple[BankFact, ...] = ()
    seconds: float = 0.0
    #: None: proved for every size; N: a bounded run, decided only for the sizes (and
    #: workgroups) where every loop runs at most N iterations
    unroll: int | None = None
    #: the workgroups and threads the proof covers (counted when the sizes are pinned)
    coverage: str = ""

    @property
    def ok(self) -> bool:
        """Every obligation proved (in a bounded run: for the bounded sizes only)."""
        return all(o.proved for o in self.obligations)

    @property
    def bounded(self) -> bool:
        return self.unroll is not None

    @property
    def proved_for_all_sizes(self) -> bool:
        """Every obligation proved, and not merely for bounded loops."""
        return self.ok and not self.bounded

    @property
    def bound(self) -> str:
        """What a bounded run's verdicts cover ("" for a symbolic run)."""
        if not self.bounded:
            return ""
        return f"bounded: every loop at most {_iterations(self.unroll)}"

    def count(self, verdict: str) -> int:
        return sum(o.verdict == verdict for o in self.obligations)

    @property
    def refuted(self) -> tuple[Obligation, ...]:
        return tuple(o for o in self.obligations if o.verdict == REFUTED)

    @property
    def unknown(self) -> tuple[Obligation, ...]:
        return tuple(o for o in self.obligations if o.verdict == UNKNOWN)

    def summary(self) -> str:
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items()) or "symbolic sizes"
        bound = f"; {self.bound}" if self.bounded else ""
        return (f"{self.kernel} [{sizes}{bound}]: {self.count(PROVED)} proved, "
                f"{self.count(REFUTED)} refuted, {self.count(UNKNOWN)} unknown "
                f"({len(self.obligations)} obligations, {self.seconds:.2f} s)")

    def __str__(self) -> str:
        parts = [str(o) for o in self.obligations if not o.proved]
        if self.ok and self.bounded:
            parts.append(f"Verified {self.kernel} for bounded loops: all "
                         f"{len(self.obligations)} obligations proved for every size and "
                         f"workgroup where each loop runs at most {_iterations(self.unroll)}; "
                         "larger sizes and workgroups are not covered")
        elif self.ok:
            parts.append(f"Verified {self.kernel}: all {len(self.obligations)} obligations "
                         f"proved{f', covering {self.coverage}' if self.coverage else ''}")
        parts.append(self.summary())
        return "\n".join(parts)

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "sizes": self.sizes, "ok": self.ok,
                "coverage": self.coverage,
                "unroll": self.unroll, "bounded": self.bounded,
                "proved_for_all_sizes": self.proved_for_all_sizes,
                "seconds": self.seconds,
                "obligations": [attrs.asdict(o) for o in self.obligations],
                "bank_conflicts": [attrs.asdict(f) for f in self.bank_facts]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), default=str, indent=1)


def _iterations(count: int) -> str:
    return f"{count} iteration" if count == 1 else f"{count} iterations"

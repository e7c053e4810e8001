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
    #: the op it is about: its position in the kernel's walk (`Kernel.ops()`), -1 for the
    #: kernel as a whole (budgets)
    op: int = -1

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
    #: the traced kernel verified (for `annotated_ir`)
    ir: object = attrs.field(default=None, eq=False, repr=False)

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

    def annotated_ir(self, ir=None) -> str:
        """The kernel's IR text (`argus.ir.text`) with each refuted or unknown obligation
        printed under the op it is about, in xDSL's diagnostic style: the op's line underlined,
        the verdict and its evidence on `|` lines. Obligations about the whole kernel (budgets)
        stand under its header; a summary line ends it. `ir` defaults to the kernel verified."""
        from argus.ir.text import print_kernel

        ir = self.ir if ir is None else ir
        if ir is None:
            raise VerifyError("this report holds no IR to annotate; pass the kernel it was "
                              "verified on: report.annotated_ir(kernel.ir)")
        ops = list(ir.ops())
        if ir.name != self.kernel or any(o.op >= len(ops) for o in self.obligations):
            raise VerifyError(f"the report is about kernel {self.kernel}, not {ir.name}; "
                              "annotate the kernel it was verified on")
        failing: dict[int, list[Obligation]] = {}
        for ob in self.obligations:
            if not ob.proved:
                failing.setdefault(ob.op, []).append(ob)
        by_op = {id(op): failing.get(n, []) for n, op in enumerate(ops)}
        text = print_kernel(ir, notes=lambda op, line: _diagnostic(by_op.get(id(op), ()), line))
        lines = text.rstrip("\n").split("\n")
        lines[1:1] = _diagnostic(failing.get(-1, ()), lines[0])
        return "\n".join(lines + [f"// {self.summary()}"]) + "\n"

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


def _diagnostic(obligations, line: str | None) -> list[str]:
    """An xDSL-style note for obligations at one op: a caret rule (as wide as the op's line
    when known), then each verdict and its evidence on `|` lines, then a closing rule."""
    if not obligations:
        return []
    width = max(8, min(len(line), 100))
    out = ["^" * width]
    for ob in obligations:
        verdict = "refuted" if ob.verdict == REFUTED else "unknown"
        body = str(ob).split("\n")
        if ob.verdict == UNKNOWN:
            body = [f"{ob.loc}: {ob.kind}: {ob.message}", f"  not proved: {ob.reason}"]
            if ob.counterexample is not None:
                body += ob.counterexample.lines()
        out.append(f"| {verdict}: {body[0]}")
        out += [f"| {b}" for b in body[1:]]
    out.append("-" * width)
    return out


def _iterations(count: int) -> str:
    return f"{count} iteration" if count == 1 else f"{count} iterations"

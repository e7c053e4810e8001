"""The three answers a proof obligation can get: Proved, Refuted with a witness, or Unknown.

Unknown is never a bug report: it says the solver gave up (timeout, resource limit) and why.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Proved:
    """The goal holds at every point allowed by the variable bounds and the assumptions.

    `vacuous` is set when no such point exists (contradictory assumptions): the proof is then
    true but says nothing, which usually means an assumption is wrong.
    """

    vacuous: bool = False

    def __str__(self):
        return "proved vacuously (the assumptions never hold)" if self.vacuous else "proved"


@attrs.frozen
class Refuted:
    """The goal fails (or is undefined: division by zero, negative shift) at `witness`.

    `minimal` says whether the witness is the lexicographically smallest one over the requested
    `minimize` variables (False when minimisation ran out of time or was not asked for).
    """

    witness: dict[str, int] = attrs.field(converter=dict, hash=False)
    minimal: bool = False

    def __str__(self):
        point = ", ".join(f"{name}={value}" for name, value in self.witness.items())
        return f"refuted at {point or 'every point'}"


@attrs.frozen
class Unknown:
    """The solver could not decide the goal; `reason` says why (timeout, unknown result)."""

    reason: str

    def __str__(self):
        return f"unknown ({self.reason})"


Verdict = Proved | Refuted | Unknown


#: z3's reason when SIGINT arrived during a check (z3 handles Ctrl-C itself while it solves).
INTERRUPTED = "interrupted from keyboard"


def checked(solver, *assumptions):
    """`solver.check(*assumptions)` for a z3 solver, with an interrupt raised as such: while z3
    solves it catches SIGINT and answers unknown, so Ctrl-C during `argus verify` became an
    Unknown obligation and the run went on (exit 1, not 130)."""
    answer = solver.check(*assumptions)
    if str(answer) == "unknown" and solver.reason_unknown() == INTERRUPTED:
        raise KeyboardInterrupt
    return answer

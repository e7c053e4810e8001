"""Argus' SMT layer: decide statements about `argus.ir.expr` terms with z3 (lowered natively,
each subterm as wide as its bounds) or cvc5 (through pysmt, one width per query).

`prove(goal, assume)` returns Proved, Refuted(witness) or Unknown(reason); `to_smtlib` dumps the
same obligation for bug reports.
"""

from argus.smt.solve import (
    DEFAULT_TIMEOUT_MS,
    SOLVERS,
    SmtError,
    cache_info,
    check_options,
    clear_cache,
    prove,
    to_smtlib,
)
from argus.smt.verdict import Proved, Refuted, Unknown, Verdict

__all__ = ["prove", "to_smtlib", "Proved", "Refuted", "Unknown", "Verdict", "SOLVERS",
           "cache_info", "clear_cache", "DEFAULT_TIMEOUT_MS", "SmtError", "check_options"]

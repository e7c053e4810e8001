"""KernelBench on Argus: `run(PROBLEMS_DIR)` checks every problem of a KernelBench level folder
(the user's checkout; no KernelBench file lives in this repository) and returns one `Row` per
problem: the solution the templates generate from the traced `Model` (or one given by hand),
its correctness by KernelBench's rules on the emulator at scaled sizes, its proof for symbolic
sizes, and its modelled MI300X time at the published sizes against a roofline bound.

torch is needed here only (`pip install 'argus[kernelbench]'`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

from argus.kernelbench.harness import STATUSES, Row, check
from argus.kernelbench.problem import ProblemError, discover
from argus.kernelbench.solution import Context, Solution

__all__ = ["run", "summary", "Row", "Solution", "Context", "STATUSES", "ProblemError", "table"]


def _torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ProblemError("the KernelBench harness needs torch",
                           fix="pip install 'argus[kernelbench]' (torch==2.13.0, CPU)") from None


def run(problems_dir: str | Path, *, only: Sequence[str] = (), jobs: int = 1,
        solutions: dict[str, Solution] | None = None,
        on_row: Callable[[Row], None] | None = None) -> list[Row]:
    """Check every problem of `problems_dir` (a KernelBench level folder), `only` those whose
    number or file stem is listed; `jobs` worker processes; `solutions` hand-written
    solutions by problem stem or number (taking the place of the generated ones); `on_row` is
    called with each row as it completes. Rows come back in problem order."""
    _torch()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ProblemError(f"jobs={jobs!r}: give a whole number of worker processes >= 1")
    files = discover(problems_dir, tuple(str(o) for o in only))
    rows: dict[Path, Row] = {}
    if jobs == 1 or len(files) == 1:
        for path in files:
            rows[path] = check(path, solutions=solutions)
            if on_row:
                on_row(rows[path])
    else:
        import concurrent.futures as futures
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        with futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
            pending = {pool.submit(check, path, None, solutions): path for path in files}
            for done in futures.as_completed(pending):
                rows[pending[done]] = done.result()
                if on_row:
                    on_row(rows[pending[done]])
    return [rows[path] for path in files]


def summary(rows: Sequence[Row]) -> str:
    """`kernelbench level1: C/T correct, P proved, geomean modelled/roofline X.XX` (one line per
    level; the geomean is over the rows that are correct and have both times)."""
    lines = []
    for level in dict.fromkeys(r.level for r in rows):
        mine = [r for r in rows if r.level == level]
        correct = sum(r.status == "correct" for r in mine)
        proved = sum(r.proved for r in mine)
        ratios = [r.ratio for r in mine if r.status == "correct" and r.ratio]
        geomean = (math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios
                   else float("nan"))
        lines.append(f"kernelbench {level}: {correct}/{len(mine)} correct, {proved} proved, "
                     f"geomean modelled/roofline {geomean:.2f}")
    return "\n".join(lines)


def table(rows: Sequence[Row]):
    """The rows as a rich Table (modelled and roofline times are MI300X model figures)."""
    from rich.table import Table

    t = Table(title="KernelBench on Argus (times modelled for MI300X, runs emulated)")
    for column in ("problem", "status", "proved", "max err", "modelled µs", "roofline µs",
                   "ratio", "solution", "reason"):
        t.add_column(column, overflow="fold")
    colours = {"correct": "green", "incorrect": "red", "unsupported": "yellow",
               "unknown": "magenta", "error": "red"}
    for r in rows:
        t.add_row(r.problem, f"[{colours[r.status]}]{r.status}[/]", "yes" if r.proved else "no",
                  "" if r.max_error is None else f"{r.max_error:.1e}",
                  "" if r.modelled_us is None else f"{r.modelled_us:.1f}",
                  "" if r.roofline_us is None else f"{r.roofline_us:.1f}",
                  "" if r.ratio is None else f"{r.ratio:.2f}",
                  ("generated: " if r.generated else "hand-written: ") + "+".join(r.templates)
                  if r.templates else "", r.reason[:160])
    return t

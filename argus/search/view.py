"""What a user sees of a tuning run: the rich live panel (evaluations / budget, best modelled
time, verdict counts, the current move), the final table of the best candidates, the summary
of a past run file (`--report`), and the winner written to the output directory.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path

from rich.console import Group
from rich.panel import Panel
from rich.table import Table

from argus.search.evaluate import STATUSES, Evaluation
from argus.search.space import Candidate

STATUS_STYLE = {"ok": "green", "incomplete": "yellow", "invalid": "dim", "refuted": "red",
                "unknown": "magenta", "wrong": "red", "error": "red", "timeout": "magenta"}


_SHORT = {"block_m": "m", "block_n": "n", "block_k": "k", "split_k": "split", "head_dim": "d"}


def compact(evaluation: Evaluation) -> str:
    """A configuration in few characters: m128 n64 k32 split2 32x32x8 swizzle interleave, then
    its program rewrites (+grow_rings@0)."""
    parts = []
    for name, value in evaluation.candidate.params:
        if isinstance(value, bool):
            parts.append(name if value else f"no-{name}")
        elif name in _SHORT:
            parts.append(f"{_SHORT[name]}{value}")
        elif isinstance(value, str):
            parts.append(value.removeprefix("v_mfma_f32_").removesuffix("_bf16"))
        else:
            parts.append(f"{name}={value}")
    # the program rewrites too: points that differ only in them must not look alike
    parts += [f"+{name}@{','.join(map(str, site))}" for name, site in evaluation.candidate.rewrites]
    return " ".join(parts) + (" +edit" if evaluation.candidate.source else "")


def counts(evaluations: list[Evaluation]) -> str:
    tally = Counter(e.status for e in evaluations)
    return "  ".join(f"[{STATUS_STYLE[s]}]{s} {tally[s]}[/]" for s in STATUSES if tally[s])


def best_line(evaluations: list[Evaluation]) -> str:
    results = [e for e in evaluations if e.is_result]
    if results:
        best = max(results, key=lambda e: e.reward)
        return (f"{best.time_us:.2f} µs modelled, {best.reward:.3f}x "
                f"{best.reference['name']}  ({best.candidate.describe()})"
                + (f"  [{best.note}]" if best.note else ""))
    missing = next((e.missing for e in evaluations if e.missing), "")
    if missing:
        return f"none: no candidate has a reward; missing pipeline stage: {missing}"
    if evaluations:
        stages = Counter((e.stage, e.message.splitlines()[0][:160]) for e in evaluations)
        (stage, why), count = stages.most_common(1)[0]
        return (f"none: no candidate passed every stage; {count} of {len(evaluations)} stopped "
                f"at {stage}: {why}")
    return "none yet"


def live_panel(progress) -> Panel:
    state, clock = progress.state, progress.clock
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("problem", f"{state.problem.family} {state.problem.shape}")
    grid.add_row("evaluations", f"{clock.done} / {progress.budget.evaluations}   "
                 f"({len(state.pending)} running, {clock.elapsed:.0f} s)")
    grid.add_row("best", best_line(state.evaluations))
    grid.add_row("verdicts", counts(state.evaluations) or "-")
    grid.add_row("move", progress.current or "-")
    refuted = [e for e in state.evaluations if e.status == "refuted" and e.counterexamples]
    if refuted:
        last = refuted[-1]
        ob = last.counterexamples[0]
        grid.add_row("refuted", f"{last.candidate.describe()}: {ob.get('kind')} at "
                     f"{ob.get('loc')}")
    repaired = [e for e in state.evaluations if e.move.startswith("repair:")]
    skipped = (f"; {state.repairs_skipped} not tried (the model times them no faster than the "
               "best)") if state.repairs_skipped else ""
    if repaired:
        proved = sum(e.status not in ("refuted", "unknown") for e in repaired)
        grid.add_row("repairs", f"{len(repaired)} tried, {proved} past the verifier; latest "
                     f"{repaired[-1].move} -> {repaired[-1].status}{skipped}")
    elif skipped:
        grid.add_row("repairs", skipped[2:])
    if progress.stopped:
        grid.add_row("stopped", progress.stopped)
    return Panel(grid, title="argus tune", border_style="cyan")


def final_table(evaluations: list[Evaluation], top: int = 8) -> Table | Group:
    results = sorted((e for e in evaluations if e.is_result), key=lambda e: -e.reward)
    if results:
        table = Table(title="best candidates (verified, correct, modelled time)")
        for column in ("#", "configuration", "modelled µs", "reference", "ref µs", "speed-up",
                       "move"):
            table.add_column(column, overflow="fold")
        notes = []
        for rank, e in enumerate(results[:top], 1):
            table.add_row(f"{rank}*" if e.note else str(rank), compact(e), f"{e.time_us:.2f}",
                          e.reference["name"], f"{e.reference['time_us']:.2f}",
                          f"{e.reward:.3f}x", e.move)
            if e.note:
                notes.append(f"{rank}* {e.note}")
        table.caption = "\n".join(notes) or None
        return table
    table = Table(title="no result: candidates that passed every stage this build has")
    for column in ("configuration", "status", "verdict", "correctness", "move"):
        table.add_column(column)
    passed = [e for e in evaluations if e.status == "incomplete"]
    for e in passed[-top:]:
        table.add_row(compact(e), e.status, e.verdict.split(":")[-1].split(",")[0],
                      (e.correctness or {}).get("message", ""), e.move)
    return Group(table, best_line(evaluations))


def failures_table(evaluations: list[Evaluation], top: int = 5) -> Table | None:
    bad = [e for e in evaluations if e.status in ("refuted", "wrong", "unknown", "error",
                                                   "timeout")]
    if not bad:
        return None
    table = Table(title="rejected candidates (never reported as results)")
    for column in ("configuration", "status", "stage", "why"):
        table.add_column(column)
    for e in bad[-top:]:
        table.add_row(compact(e), e.status, e.stage, e.message.splitlines()[0][:90])
    return table


def report(events: list[dict]) -> Group:
    """A past run from its events: header, verdict counts, best table, LLM exchanges, end."""
    header = events[0]
    evaluations = [Evaluation.from_dict(e["evaluation"]) for e in events if e["kind"] == "eval"]
    from argus.search.space import Problem

    problem = header["problem"]
    shape = Problem(problem["family"], problem["sizes"]).shape
    lines = [f"run of {problem['family']} {shape} {problem.get('pinned') or ''}".rstrip(),
             f"planner {header['planner']}, budget {header['budget']['evaluations']} "
             f"evaluations, backend {header.get('backend', 'local')}",
             f"{len(evaluations)} evaluations: {counts(evaluations) or 'none'}"]
    exchanges = Counter(e["status"] for e in events if e["kind"] == "llm")
    if exchanges:
        lines.append("LLM exchanges: " + ", ".join(f"{k} {v}" for k, v in exchanges.items()))
    for event in (e for e in events if e["kind"] == "screen"):
        top = event.get("ranking") or [{}]
        fastest = Candidate.from_dict(top[0]["candidate"]).describe() if top[0] else "-"
        lines.append(f"pre-screen (model only, not proved): {event['timed']} points timed in "
                     f"{event['wall_s']} s; fastest {top[0].get('time_us') or 0:.2f} µs "
                     f"({fastest})")
    repaired = [e for e in events if e["kind"] == "repair"]
    for event in repaired[-5:]:
        cex, fix = event.get("counterexample", {}), event.get("repair", {})
        lines.append(f"repair: {event.get('refuted')} refuted ({cex.get('kind')} at "
                     f"{cex.get('loc')}) -> {fix.get('rewrite')}@{fix.get('site')} -> "
                     f"{event.get('verdict')}")
    skipped = [e for e in events if e["kind"] == "repair-skipped"]
    if skipped:
        lines.append(f"repairs not evaluated: {len(skipped)} (the model times them no faster "
                     "than the best result)")
    ends = [e for e in events if e["kind"] == "end"]
    lines.append(f"stopped: {ends[-1]['reason']}" if ends else
                 "no end line: the run was killed; continue it with --resume")
    parts = [*lines, final_table(evaluations)]
    failed = failures_table(evaluations)
    if failed is not None:
        parts.append(failed)
    return Group(*parts)


def write_winner(out: Path, problem, evaluations: list[Evaluation]) -> list[Path]:
    """The best result's evaluation and parameters (winner.json) and its assembly (winner.s)
    in `out`, written atomically; nothing when there is no result."""
    from argus.search.evaluate import assembly

    results = [e for e in evaluations if e.is_result]
    if not results:
        return []
    best = max(results, key=lambda e: e.reward)
    written = [_atomic(out / "winner.json", json.dumps(best.to_dict(), indent=1, default=str))]
    written.append(_atomic(out / "winner.s", assembly(problem, best.candidate)))
    return written


def _atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
    return path

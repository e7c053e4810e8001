"""The trajectory store: a JSONL file, one line per event — a `run` header (problem, planner,
budget), one `eval` line per evaluation, `llm` lines for each exchange with a model (answers,
malformed replies, timeouts, refusals) and an `end` line saying why the run stopped.

Each line is written whole and flushed, so an interrupted run leaves a valid file; `resume`
drops a torn last line (a crash mid-write) and hands back what was evaluated, so nothing cached
is evaluated again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from argus.search.evaluate import Evaluation
from argus.search.space import SearchError


class Store:
    """Appends events to one JSONL file (opened for a new run or to resume one)."""

    def __init__(self, path: str | os.PathLike, header: dict, *, resume: bool = False):
        self.path = Path(path)
        self.evaluations: list[Evaluation] = []
        self.events: list[dict] = []
        if resume:
            if not self.path.is_file():
                raise SearchError(f"--resume {self.path}: no such run file; start a new run "
                                  "without --resume")
            self.events = read(self.path, repair=True)
            old = next((e for e in self.events if e.get("kind") == "run"), None)
            if old is None or old.get("problem") != header["problem"]:
                raise SearchError(f"--resume {self.path}: that run tuned "
                                  f"{old and old.get('problem')}, not {header['problem']}; "
                                  "give the same family, shape and parameters")
            self.evaluations = [Evaluation.from_dict(e["evaluation"]) for e in self.events
                                if e.get("kind") == "eval"]
            self.append({"kind": "resume", **header})
        else:
            if self.path.is_file() and self.path.stat().st_size:
                raise SearchError(f"{self.path} already holds a run; continue it with --resume "
                                  f"{self.path}, or choose another --out directory")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("")
            self.append({"kind": "run", **header})

    def append(self, event: dict) -> None:
        line = json.dumps(event, default=str, sort_keys=True) + "\n"
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        self.events.append(event)

    def record(self, evaluation: Evaluation) -> None:
        self.evaluations.append(evaluation)
        self.append({"kind": "eval", "evaluation": evaluation.to_dict()})


def read(path: str | os.PathLike, *, repair: bool = False) -> list[dict]:
    """The events of a run file. A torn final line (interrupted write) is dropped, and with
    `repair` cut from the file; a bad line elsewhere is an error naming it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SearchError(f"cannot read run file {path}: {err.strerror}") from None
    events, offset = [], 0
    lines = text.splitlines(keepends=True)
    for number, line in enumerate(lines, 1):
        try:
            event = json.loads(line)
            if not isinstance(event, dict) or "kind" not in event:
                raise ValueError("not an event object")
        except ValueError:
            if number == len(lines):  # torn last line
                if repair:
                    with open(path, "r+", encoding="utf-8") as handle:
                        handle.truncate(offset)
                break
            raise SearchError(f"{path}:{number}: not a run-file line (JSON object with a "
                              "'kind'); was this file written by argus tune?") from None
        events.append(event)
        offset += len(line.encode("utf-8"))
    if not events or events[0].get("kind") != "run":
        raise SearchError(f"{path}: no run header on its first line; not an argus tune run file")
    return events

"""The experience store: what moves earned in past runs, per family and shape class, kept
across runs under the Argus cache directory (`ARGUS_CACHE/experience/<family>.jsonl`). Each row
is one evaluated move: the shape class and state features where it was made, the move, its
graded credit (`credit`), the status, the kind of counterexample when it was refuted, and the
candidate (`starts()` hands the best ones to the next run: its pre-screen's starting points, or
without a pre-screen its first proposals).

`priors()` summarises the rows into per-move (mean credit, weight), same shape class counted
fully and other classes of the family at a quarter, which the offline planner uses in place of
the knowledge base's hand-set priors; `argus tune --fresh` neither reads nor writes it.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from pathlib import Path

from argus import env

#: rows of another shape class count this much (a move's value transfers only in part)
OTHER_CLASS = 0.25
#: `robust` keeps the points scoring at least this fraction of the top score
ROBUST_FLOOR = 0.5
#: the pseudo-observations a move's experience may contribute at most (the run's own data
#: then overrules it within a few pulls)
MAX_WEIGHT = 6.0


def shape_class(family: str, sizes: dict) -> str:
    """A coarse class of a problem's shape: total work (log2 of the product of the sizes, in
    steps of 3) and, for 2-D outputs, whether it is square, tall or wide."""
    volume = math.prod(max(1, int(v)) for v in sizes.values() if not isinstance(v, bool))
    work = f"w{int(math.log2(volume)) // 3}"
    rows, cols = sizes.get("M", sizes.get("TOKENS")), sizes.get("N")
    if rows and cols:
        ratio = rows / cols
        work += "-square" if 0.5 <= ratio <= 2 else "-tall" if ratio > 2 else "-wide"
    return f"{family}:{work}"


def default_path(family: str) -> Path:
    """ARGUS_CACHE/experience/<family>.jsonl; a user's `path/to/mine.py:NAME` keeps its rows
    under `mine-NAME-<hash of the absolute path>` (one file per kernel, no path separators)."""
    path, colon, attr = family.rpartition(":")
    if colon and path.endswith(".py"):
        import hashlib
        import os

        digest = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:12]
        family = f"{Path(path).stem}-{attr}-{digest}"
    return env.cache_dir() / "experience" / f"{family}.jsonl"


class Experience:
    """One family's experience file: read once, appended to as the run goes."""

    def __init__(self, path: str | os.PathLike | None, family: str):
        self.family = family
        self.path = Path(path) if path is not None else default_path(family)
        self.rows: list[dict] = []
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a torn line of an interrupted run
                if isinstance(row, dict) and row.get("family") == family and "move" in row:
                    self.rows.append(row)

    def append(self, row: dict) -> None:
        row = {"family": self.family, **row}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row, sort_keys=True, default=str) + "\n")
        self.rows.append(row)

    def priors(self, shape: str, exclude_run: str | None = None) -> dict[str, tuple[float,
                                                                                     float]]:
        """{move: (mean credit, weight)} from past runs (not `exclude_run`): rows of `shape`
        weigh 1, other shape classes OTHER_CLASS; the weight is capped at MAX_WEIGHT."""
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for row in self.rows:
            if exclude_run is not None and row.get("run") == exclude_run:
                continue
            weight = 1.0 if row.get("shape_class") == shape else OTHER_CLASS
            entry = sums[row["move"]]
            entry[0] += weight * float(row.get("credit", 0.0))
            entry[1] += weight
        return {move: (total / weight, min(weight, MAX_WEIGHT))
                for move, (total, weight) in sums.items() if weight > 0}

    def best(self, shape: str, count: int = 3) -> list[dict]:
        """The candidates (as `Candidate.to_dict()` data) of the best accepted results of past
        runs: this shape class's best first, then the best of each other class; the pre-screen
        starts its climbs there."""
        ranked: dict[str, tuple[float, dict]] = {}
        for row in self.rows:
            if row.get("status") != "ok" or not row.get("reward") or "candidate" not in row:
                continue
            known = ranked.get(row["shape_class"])
            if known is None or row["reward"] > known[0]:
                ranked[row["shape_class"]] = (float(row["reward"]), row["candidate"])
        same = [ranked.pop(shape)[1]] if shape in ranked else []
        others = [c for _, c in sorted(ranked.values(), key=lambda rc: -rc[0])]
        out: list[dict] = []
        for candidate in [*same, *others]:
            if candidate not in out:
                out.append(candidate)
        return out[:count]

    def robust(self, count: int = 3, numeric: tuple[str, ...] = ()) -> list[dict]:
        """The candidates (as data) that came closest to the best at every shape past runs
        tuned: at each shape, a point's reward over the best reward reached there; its score
        is the mean over the shapes, a shape where it was never evaluated counting 0. The single
        best of one shape is often mediocre at another; a point near the best at all of them
        is the better bet at a new one. With `numeric` (knob names), one point per tile: the
        first few starts then lie in different regions."""
        shapes: dict[str, dict[str, tuple[float, dict]]] = defaultdict(dict)
        for row in self.rows:
            if row.get("status") != "ok" or not row.get("reward") or "candidate" not in row \
                    or row["candidate"].get("source") is not None:
                continue
            where = json.dumps(row.get("sizes") or row.get("shape_class"), sort_keys=True)
            key = json.dumps(row["candidate"], sort_keys=True)
            known = shapes[where].get(key)
            if known is None or row["reward"] > known[0]:
                shapes[where][key] = (float(row["reward"]), row["candidate"])
        if not shapes:
            return []
        scores: dict[str, float] = defaultdict(float)
        data: dict[str, dict] = {}
        for points in shapes.values():
            top = max(reward for reward, _ in points.values())
            for key, (reward, candidate) in points.items():
                scores[key] += reward / top / len(shapes)
                data[key] = candidate
        out: list[dict] = []
        tiles = set()
        top = max(scores.values())
        for key in sorted(scores, key=lambda k: (-scores[k], k)):
            if scores[key] < ROBUST_FLOOR * top:
                break  # far from the best everywhere: another class's best is a better start
            params = data[key].get("params", {})
            tile = tuple(params.get(name) for name in numeric)
            if numeric and tile in tiles:
                continue
            tiles.add(tile)
            out.append(data[key])
            if len(out) == count:
                break
        return out

    def starts(self, problem, count: int = 3) -> list:
        """Where a new run of `problem` should start, as Candidates of its space (those whose
        every searched knob takes one of its values here; pinned parameters are this run's):
        its shape class's best of past runs when there is one, then the points nearest the
        best at every past shape (`robust`, one per tile), then other classes' bests."""
        from argus.search.space import Candidate

        numeric = tuple(k.name for k in problem.knobs()
                        if all(isinstance(v, int) and not isinstance(v, bool) for v in k.values))
        here = shape_class(problem.family, problem.sizes)
        best = self.best(here, count)
        same = best[:1] if any(r.get("shape_class") == here and r.get("status") == "ok"
                               for r in self.rows) else []
        out = []
        for data in [*same, *self.robust(count, numeric), *best]:
            params = data.get("params", {})
            if data.get("source") is None and all(params.get(k.name) in k.values
                                                  for k in problem.knobs()):
                candidate = Candidate(problem.family, {
                    **{k.name: params[k.name] for k in problem.knobs()},
                    **problem.fixed_params()}, rewrites=data.get("rewrites", ()))
                if candidate not in out:
                    out.append(candidate)
        return out[:count]

    def failures(self, shape: str) -> dict[str, dict[str, int]]:
        """{move: {counterexample kind: count}} of refuted moves in this shape class."""
        out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for row in self.rows:
            if row.get("shape_class") == shape and row.get("counterexample"):
                out[row["move"]][row["counterexample"]] += 1
        return {move: dict(kinds) for move, kinds in out.items()}

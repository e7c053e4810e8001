"""`--plot FILE.png`: reward per evaluation coloured by verdict, and the best so far (matplotlib,
headless). Candidates without a reward sit on a strip below the axis, so a run whose pipeline
lacks the modelled-time stage still shows what happened, without inventing a number.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from argus.search.evaluate import STATUSES, Evaluation

COLOURS = {"ok": "tab:green", "incomplete": "tab:olive", "invalid": "tab:gray",
           "refuted": "tab:red", "unknown": "tab:purple", "wrong": "tab:orange",
           "error": "black", "timeout": "tab:pink"}


def plot(evaluations: list[Evaluation], path: str | os.PathLike, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    rewarded = [(i, e.reward) for i, e in enumerate(evaluations, 1) if e.reward is not None]
    floor = min((r for _, r in rewarded), default=1.0) * 0.9
    for status in STATUSES:
        xs = [i for i, e in enumerate(evaluations, 1) if e.status == status]
        if not xs:
            continue
        ys = [e.reward if e.reward is not None else floor
              for e in evaluations if e.status == status]
        ax.scatter(xs, ys, s=28, color=COLOURS[status], label=f"{status} ({len(xs)})",
                   marker="o" if status == "ok" else "x", zorder=3)
    if rewarded:
        best, steps = 0.0, []
        for e in evaluations:
            if e.is_result:
                best = max(best, e.reward)
            steps.append(best if best else None)
        ax.step(range(1, len(steps) + 1), [s if s else float("nan") for s in steps],
                where="post", color="tab:blue", label="best so far")
        ax.set_ylabel("reward (reference time / modelled time)")
    else:
        ax.set_yticks([])
        ax.set_ylabel("no reward (missing pipeline stage)")
    ax.set_xlabel("evaluation")
    ax.set_title(title or "argus tune")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    return save_figure(fig, path, dpi=110)


def save_figure(fig, path: str | os.PathLike, dpi: int = 100) -> Path:
    """Write a matplotlib figure atomically (a reader never sees half a picture), readable as
    any file this process writes (mkstemp's file is private; a picture is not), and close
    it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=dpi)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path

"""KernelBench Levels 1 and 2 through the Argus harness: for each level folder of a KernelBench
checkout (never copied here), the table of rows and the summary line
`kernelbench levelN: C/T correct, P proved, geomean modelled/roofline X.XX`.
Correctness is emulated at scaled sizes; times are modelled for MI300X (argus.time), not
measured; the roofline uses the machine numbers of argus/isa_cdna3/perf/params.py.
Run: python bench/bench_kernelbench.py PROBLEMS_DIR [--levels 1,2] [--jobs N] [--json OUT]
(PROBLEMS_DIR: the checkout's KernelBench/ folder holding level1/, level2/, or one level
folder). `--model-only` times the route's plans at the published sizes and nothing else (no
emulated run, no proof): a whole level in the time the model takes, with the line
`kernelbench levelN (model only): T timed, geomean modelled/roofline X.XX`; `--only 1,6`
runs those problem numbers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
from rich.console import Console

from argus.kernelbench import run, summary, table
from argus.kernelbench.harness import modelled


def _number(path: Path) -> str:
    return path.stem.split("_", 1)[0]


def _model_only(folder: Path, only: set[str] | None, console: Console) -> list:
    rows = []
    for path in sorted(folder.glob("*.py"), key=lambda p: (len(_number(p)), _number(p))):
        if only is not None and _number(path) not in only:
            continue
        row = modelled(path, folder.name)
        shown = f"{row.ratio:.2f}x" if row.ratio else f"{row.status}: {row.reason[:80]}"
        if row.ratio and row.ratio < 1:
            # nothing runs faster than its roofline: the model has a fault here
            shown += " (below the roofline: a model fault)"
        console.print(f"  {row.problem}: {shown} ({row.seconds:.0f} s)")
        rows.append(row)
    ratios = [r.ratio for r in rows if r.ratio]
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
    below = [r.problem for r in rows if r.ratio and r.ratio < 1]
    click.echo(f"kernelbench {folder.name} (model only): {len(ratios)} timed, geomean "
               f"modelled/roofline {geomean:.2f}" + (f"; below the roofline (model faults): "
                                                    f"{', '.join(below)}" if below else ""))
    return rows


@click.command()
@click.argument("problems_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--levels", default="1,2", show_default=True, help="Levels to run.")
@click.option("--jobs", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--json", "json_out", default=None, type=click.Path(dir_okay=False))
@click.option("--model-only", is_flag=True,
              help="Only time the published sizes (no emulated run, no proof).")
@click.option("--only", default=None, help="Problem numbers, comma-separated.")
def main(problems_dir: str, levels: str, jobs: int, json_out: str | None, model_only: bool,
         only: str | None) -> None:
    root = Path(problems_dir)
    folders = ([root] if root.name.startswith("level")
               else [root / f"level{n.strip()}" for n in levels.split(",")])
    chosen = {n.strip() for n in only.split(",")} if only else None
    console = Console()
    rows = []
    for folder in folders:
        if not folder.is_dir():
            raise click.BadParameter(f"{folder} is not a folder", param_hint="PROBLEMS_DIR")
        if model_only:
            rows += _model_only(folder, chosen, console)
            continue
        level_rows = run(folder, jobs=jobs, only=sorted(chosen) if chosen else (),
                         on_row=lambda r: console.print(f"  {r.problem}: {r.status}"))
        console.print(table(level_rows))
        rows += level_rows
    if json_out:
        Path(json_out).write_text(json.dumps([r.to_json() for r in rows], indent=1))
    if not model_only:
        click.echo(summary(rows))


if __name__ == "__main__":
    main()

"""KernelBench Levels 1 and 2 through the Argus harness: for each level folder of a KernelBench
checkout (never copied here), the table of rows and the summary line
`kernelbench levelN: C/T correct, P proved, geomean modelled/roofline X.XX`.
Correctness is emulated at scaled sizes; times are modelled for MI300X (argus.time), not
measured; the roofline uses the machine numbers of argus/isa_cdna3/perf/params.py.
Run: python bench/bench_kernelbench.py PROBLEMS_DIR [--levels 1,2] [--jobs N] [--json OUT]
(PROBLEMS_DIR: the checkout's KernelBench/ folder holding level1/, level2/, or one level
folder).
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console

from argus.kernelbench import run, summary, table


@click.command()
@click.argument("problems_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--levels", default="1,2", show_default=True, help="Levels to run.")
@click.option("--jobs", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--json", "json_out", default=None, type=click.Path(dir_okay=False))
def main(problems_dir: str, levels: str, jobs: int, json_out: str | None) -> None:
    root = Path(problems_dir)
    folders = ([root] if root.name.startswith("level")
               else [root / f"level{n.strip()}" for n in levels.split(",")])
    console = Console()
    rows = []
    for folder in folders:
        if not folder.is_dir():
            raise click.BadParameter(f"{folder} is not a folder", param_hint="PROBLEMS_DIR")
        level_rows = run(folder, jobs=jobs,
                         on_row=lambda r: console.print(f"  {r.problem}: {r.status}"))
        console.print(table(level_rows))
        rows += level_rows
    if json_out:
        Path(json_out).write_text(json.dumps([r.to_json() for r in rows], indent=1))
    click.echo(summary(rows))


if __name__ == "__main__":
    main()

"""The documentation's pictures, drawn (matplotlib, headless) from what the benchmarks write:
an `argus tune` run file as a search trajectory, KernelBench rows (`bench_kernelbench.py --json`)
as a chart per level, and the GEMM's main loop beside AMD's bf16gemm kernel as an instruction
mix in issue order (static counts from the code objects, as bench_compile.py takes them).
Every time is modelled and every run emulated; nothing here ran on a GPU.
Run: python bench/plots.py trajectory RUN.jsonl -o docs/img/tune-trajectory.png
     python bench/plots.py kernelbench ROWS.json [ROWS.json ...] -o docs/img/kernelbench.png
     python bench/plots.py mix [--param block_k=64 ...] -o docs/img/gemm-vs-aiter-mix.png
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path

import click

from argus.errors import ArgusError

#: What a KernelBench row is, in the order the chart stacks them (correct and proved first).
OUTCOMES = ("correct, proved", "correct, not proved", "incorrect", "unknown", "unsupported",
            "error")
OUTCOME_COLOURS = dict(zip(OUTCOMES, ("tab:green", "yellowgreen", "tab:red", "tab:purple",
                                      "lightgray", "black")))
#: Instruction classes the mix picture colours; the rest of CLASSES are drawn as "other".
MIX_CLASSES = {"MFMA": "tab:red", "VALU": "tab:blue", "SALU": "tab:cyan", "SMEM": "tab:olive",
               "DS read": "tab:green", "DS write": "lime", "buffer load": "tab:orange",
               "buffer load to LDS": "gold", "global load": "tab:brown",
               "s_waitcnt": "tab:gray", "s_barrier": "black", "branch": "tab:pink",
               "other": "lavender"}
#: The configuration the mix picture shows by default: AMD's tile (64x64) and MFMA (16x16x16).
OURS = {"block_m": 64, "block_n": 64, "block_k": 64, "instr": "v_mfma_f32_16x16x16_bf16"}
AMD_GEMM = "bf16gemm/bf16gemm_outf32_tn_{tile}_pf3.co"


class PlotInputError(ArgusError):
    """A benchmark's output file the pictures cannot be drawn from."""


# ------------------------------------------------------------------------- search trajectory
def read_events(path: str | os.PathLike) -> list[dict]:
    """The events of an `argus tune` run file (one JSON object per line)."""
    path = Path(path)
    events = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise PlotInputError(f"line {number} is not JSON ({err.msg})", loc=f"{path}:{number}",
                                 fix="give the run.jsonl that `argus tune` wrote") from None
    if not events or events[0].get("kind") != "run":
        raise PlotInputError("the file does not start with a `run` header", loc=str(path),
                             fix="give the run.jsonl that `argus tune` wrote")
    return events


def trajectory(events: list[dict]) -> dict:
    """Per evaluation in order: its status, reward (reference time / modelled time) and the best
    reward among results so far; the problem's title and the reference kernel rewarded against."""
    problem = events[0]["problem"]
    points, best, reference = [], None, None
    for event in events:
        if event.get("kind") != "eval":
            continue
        e = event["evaluation"]
        reward = e.get("reward")
        if e.get("status") == "ok" and reward is not None:
            best = reward if best is None else max(best, reward)
        reference = reference or e.get("reference")
        points.append({"index": len(points) + 1, "status": e.get("status"), "reward": reward,
                       "time_us": e.get("time_us"), "best": best})
    title = f"{problem['family']} {'x'.join(str(v) for v in problem['sizes'].values())}"
    return {"title": title, "points": points, "reference": reference}


def draw_trajectory(data: dict, path: str | os.PathLike) -> Path:
    plt = _pyplot()
    from argus.search.plot import COLOURS

    fig, ax = plt.subplots(figsize=(8, 4.2))
    points = data["points"]
    rewards = [p["reward"] for p in points if p["reward"] is not None]
    floor = min(rewards, default=1.0) * 0.85
    for status in dict.fromkeys(p["status"] for p in points):
        mine = [p for p in points if p["status"] == status]
        ax.scatter([p["index"] for p in mine],
                   [p["reward"] if p["reward"] is not None else floor for p in mine],
                   color=COLOURS.get(status, "black"), marker="o" if status == "ok" else "x",
                   s=30, zorder=3, label=f"{status} ({len(mine)})")
    ax.step([p["index"] for p in points],
            [p["best"] if p["best"] is not None else math.nan for p in points],
            where="post", color="tab:blue", label="best so far")
    reference = data["reference"]
    if reference:
        ax.axhline(1.0, color="tab:red", ls="--", lw=1,
                   label=f"{reference['name']} ({reference['time_us']:.2f} µs)")
    ax.set_xlabel("candidate (evaluation order)")
    ax.set_ylabel("reference time / modelled time")
    ax.set_title(f"argus tune {data['title']} (modelled MI300X times; unrewarded on the floor)",
                 fontsize=10)
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    return _save(fig, path)


# ------------------------------------------------------------------------- KernelBench chart
def read_rows(paths: list[str | os.PathLike]) -> list[dict]:
    """The rows of one or more `bench_kernelbench.py --json` / `argus kernelbench --json` files."""
    rows = []
    for path in paths:
        try:
            loaded = json.loads(Path(path).read_text())
        except json.JSONDecodeError as err:
            raise PlotInputError(f"not JSON ({err.msg} at line {err.lineno})", loc=str(path),
                                 fix="give the file `--json` wrote") from None
        if not isinstance(loaded, list) or not all(
                isinstance(r, dict) and {"level", "problem", "status"} <= set(r) for r in loaded):
            raise PlotInputError("not a list of KernelBench rows (level, problem, status, ...)",
                                 loc=str(path), fix="give the file `--json` wrote")
        rows += loaded
    return rows


def outcome(row: dict) -> str:
    if row["status"] == "correct":
        return "correct, proved" if row.get("proved") else "correct, not proved"
    return row["status"] if row["status"] in OUTCOMES else "error"


def kernelbench_summary(rows: list[dict]) -> dict:
    """Per level: the count of each outcome, and the modelled/roofline ratio of every correct
    row (sorted) with their geometric mean."""
    levels: dict = {}
    for row in rows:
        level = levels.setdefault(row["level"], {"outcomes": Counter(), "ratios": []})
        level["outcomes"][outcome(row)] += 1
        if row["status"] == "correct" and row.get("modelled_us") and row.get("roofline_us"):
            level["ratios"].append((row["modelled_us"] / row["roofline_us"], row["problem"]))
    for level in levels.values():
        level["outcomes"] = {name: level["outcomes"][name] for name in OUTCOMES}
        level["ratios"].sort()
        ratios = [r for r, _ in level["ratios"]]
        level["geomean"] = (math.exp(sum(map(math.log, ratios)) / len(ratios))
                            if ratios else None)
    return dict(sorted(levels.items()))


def draw_kernelbench(summary: dict, path: str | os.PathLike, title: str = "") -> Path:
    plt = _pyplot()
    fig, (counts, ratios) = plt.subplots(1, 2, figsize=(11, 4.2),
                                         gridspec_kw={"width_ratios": [1, 1.3]})
    names = list(summary)
    for i, name in enumerate(names):
        left = 0
        for kind, n in summary[name]["outcomes"].items():
            if n:
                counts.barh(i, n, left=left, color=OUTCOME_COLOURS[kind],
                            label=kind if i == 0 or kind not in
                            counts.get_legend_handles_labels()[1] else None)
                counts.text(left + n / 2, i, str(n), ha="center", va="center", fontsize=8,
                            color="white" if kind in ("error", "incorrect") else "black")
                left += n
    counts.set_yticks(range(len(names)), names)
    counts.invert_yaxis()
    counts.set_xlabel("problems")
    counts.set_title("outcome per problem (emulated)", fontsize=10)
    counts.legend(fontsize=7, loc="lower right")
    for name, colour in zip(names, ("tab:blue", "tab:orange", "tab:green", "tab:purple")):
        level = summary[name]
        ys = [r for r, _ in level["ratios"]]
        if not ys:
            continue
        ratios.plot(range(1, len(ys) + 1), ys, "o-", ms=4, color=colour,
                    label=f"{name}: {len(ys)} correct, geomean {level['geomean']:.2f}")
        ratios.axhline(level["geomean"], color=colour, ls=":", lw=1)
        worst, problem = level["ratios"][-1]
        ratios.annotate(problem, (len(ys), worst), fontsize=7, ha="right", va="bottom",
                        xytext=(-4, 2), textcoords="offset points")
    ratios.axhline(1.0, color="black", lw=0.8)
    ratios.set_yscale("log")
    ratios.set_xlabel("correct problems, best first")
    ratios.set_ylabel("modelled time / roofline")
    ratios.set_title("modelled MI300X time over the roofline (1 = at the roofline)",
                     fontsize=10)
    ratios.legend(fontsize=8)
    ratios.grid(alpha=0.3, which="both")
    if title:
        fig.suptitle(title, fontsize=11)
    return _save(fig, path)


# ------------------------------------------------------------------------- main-loop mix
def loop_classes(code, kernel=None) -> list[str]:
    """The statistics class of each instruction of a kernel's main loop (its innermost, longest
    loop, as `argus disasm --compare` takes it), in issue order."""
    from argus.asm.stats import classify, kernel_stats, main_loop

    info = kernel or code.kernels[0]
    loop = main_loop(kernel_stats(code, info))
    if loop is None:
        raise PlotInputError(f"kernel {info.name} has no loop (no backward branch)",
                             loc=info.name, fix="compare kernels with a main loop")
    return [classify(ins) for ins in code.disassemble(info)
            if loop.start <= ins.address <= loop.end]


def mix(sequence: list[str]) -> dict:
    """Per class of MIX_CLASSES (others as "other"): count, and count per MFMA."""
    folded = Counter(c if c in MIX_CLASSES else "other" for c in sequence)
    mfmas = folded.get("MFMA", 0)
    return {name: {"count": folded[name], "per_mfma": folded[name] / mfmas if mfmas else None}
            for name in MIX_CLASSES if folded[name]}


def draw_mix(loops: dict[str, list[str]], path: str | os.PathLike, title: str = "") -> Path:
    """`loops`: label -> main-loop class sequence. Top: each loop as a strip in issue order,
    stretched to the same width per MFMA; bottom: instructions per MFMA by class."""
    plt = _pyplot()
    fig, (strips, bars) = plt.subplots(2, 1, figsize=(11, 5.2),
                                       gridspec_kw={"height_ratios": [1, 1.4]})
    labels = list(loops)
    for row, label in enumerate(labels):
        sequence = loops[label]
        mfmas = max(sequence.count("MFMA"), 1)
        width = 1 / len(sequence)
        for i, cls in enumerate(sequence):
            strips.barh(row, width, left=i * width, height=0.8, linewidth=0,
                        color=MIX_CLASSES.get(cls, MIX_CLASSES["other"]))
        strips.text(1.005, row, f"{len(sequence)} instr., {mfmas} MFMA", va="center",
                    fontsize=8)
    strips.set_yticks(range(len(labels)), labels)
    strips.invert_yaxis()
    strips.set_xlim(0, 1)
    strips.set_xlabel("position in one main-loop iteration (issue order, static)")
    mixes = {label: mix(loops[label]) for label in labels}
    classes = [c for c in MIX_CLASSES if any(c in m for m in mixes.values())]
    step = 0.8 / len(labels)
    for k, label in enumerate(labels):
        values = [(mixes[label].get(c) or {}).get("per_mfma") or 0 for c in classes]
        bars.bar([i + (k - (len(labels) - 1) / 2) * step for i in range(len(classes))],
                 values, width=step, label=label, color=f"C{k}", alpha=0.85)
    bars.set_xticks(range(len(classes)), classes, rotation=25, ha="right", fontsize=8)
    bars.set_ylabel("instructions per MFMA")
    bars.legend(fontsize=8)
    bars.grid(alpha=0.3, axis="y")
    handles = [plt.Rectangle((0, 0), 1, 1, color=MIX_CLASSES[c]) for c in classes]
    strips.legend(handles, classes, fontsize=7, ncol=min(len(classes), 9), loc="lower center",
                  bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.suptitle(title or "main loop, ours vs AMD", fontsize=11, y=0.995)
    return _save(fig, path)


def gemm_loops(params: dict, policy: str = "interleave") -> tuple[dict[str, list[str]], str]:
    """The library GEMM at `params`, lowered and assembled, beside AMD's same-tile kernel."""
    from argus.asm import assemble
    from argus.asm.codeobject import CodeObject
    from argus.asm.lower import lower
    from argus.kernels import library
    from argus.vendor.aiter import aiter_root

    code = assemble(lower(library()["gemm"].kernel.trace(**params), policy).text)
    tile = f"{params['block_m']}x{params['block_n']}"
    amd_path = aiter_root() / "aiter_meta" / "hsa" / "gfx942" / AMD_GEMM.format(tile=tile)
    if not amd_path.is_file():
        raise PlotInputError(f"AMD ships no {amd_path.name}", loc=str(amd_path),
                             fix="choose block_m x block_n among 32x64, 48x64, 64x64, 96x64")
    theirs = CodeObject.from_file(amd_path)
    ours = " ".join(f"{k}={v}" for k, v in params.items() if k != "instr")
    instr = params.get("instr", "").replace("v_mfma_f32_", "").replace("_bf16", "")
    return {f"Argus {tile}{f' {instr}' if instr else ''}": loop_classes(code),
            f"AMD {tile}_pf3": loop_classes(theirs)}, f"{amd_path.stem} (ours: {ours})"


# ------------------------------------------------------------------------- common
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | os.PathLike) -> Path:
    """Write the figure atomically and readable (`argus.search.plot.save_figure`)."""
    from argus.search.plot import save_figure

    return save_figure(fig, path, dpi=100)


@click.group()
def main() -> None:
    """Draw the documentation's pictures from benchmark outputs."""


@main.command("trajectory")
@click.argument("run_file", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--out", default="docs/img/tune-trajectory.png", show_default=True)
def trajectory_command(run_file: str, out: str) -> None:
    """Reward per candidate and the best so far, from an `argus tune` run file."""
    data = trajectory(read_events(run_file))
    best = max((p["best"] for p in data["points"] if p["best"] is not None), default=None)
    click.echo(f"{data['title']}: {len(data['points'])} evaluations, best "
               + (f"{best:.2f}x the reference" if best is not None else "none")
               + f"; wrote {draw_trajectory(data, out)}")


@main.command("kernelbench")
@click.argument("rows", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--out", default="docs/img/kernelbench.png", show_default=True)
@click.option("--title", default="", help="A line above the chart (what the rows are).")
def kernelbench_command(rows: tuple[str, ...], out: str, title: str) -> None:
    """Outcomes per level and modelled/roofline ratios, from KernelBench rows (--json)."""
    summary = kernelbench_summary(read_rows(list(rows)))
    for name, level in summary.items():
        o = level["outcomes"]
        geomean = f"{level['geomean']:.2f}" if level["geomean"] else "-"
        click.echo(f"{name}: {o['correct, proved'] + o['correct, not proved']}/"
                   f"{sum(o.values())} correct, {o['correct, proved']} correct and proved, "
                   f"geomean modelled/roofline {geomean}")
    click.echo(f"wrote {draw_kernelbench(summary, out, title)}")


@main.command("mix")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE",
              help="GEMM parameters over the default 64x64x64 16x16x16 (AMD's tile and MFMA).")
@click.option("--policy", type=click.Choice(["interleave", "simple"]), default="interleave",
              show_default=True)
@click.option("-o", "--out", default="docs/img/gemm-vs-aiter-mix.png", show_default=True)
def mix_command(params: tuple[str, ...], policy: str, out: str) -> None:
    """Our GEMM's main loop beside AMD's same-tile bf16gemm kernel, in issue order."""
    chosen = dict(OURS)
    for text in params:
        name, sep, value = text.partition("=")
        if not sep:
            raise click.BadParameter(f"{text!r}: write NAME=VALUE", param_hint="--param")
        chosen[name] = int(value) if value.isdigit() else value
    loops, amd = gemm_loops(chosen, policy)
    for label, sequence in loops.items():
        per = {c: round(v["per_mfma"], 2) for c, v in mix(sequence).items()}
        click.echo(f"{label}: {len(sequence)} instructions, {per}")
    click.echo(f"wrote {draw_mix(loops, out, f'main loop, static: Argus GEMM vs AMD {amd}')}")


if __name__ == "__main__":
    main()

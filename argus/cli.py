"""The `argus` command line: toolchain checks, assembling and inspecting gfx942 code objects.

Each subcommand only parses arguments and prints; the work is done in the library.
Engineers add their subcommands as small functions at the end of this file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

import click

from argus.errors import ArgusError

#: exit status after Ctrl-C, as a shell reports a process ended by SIGINT (128 + 2)
INTERRUPTED_EXIT = 130


class _Commands(click.Group):
    """The command group; an ArgusError from any command is the user's to fix: it prints as
    message, place and fix, without a traceback, and the exit status is 1. Ctrl-C stops the
    command (worker processes stop with it) and exits 130."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ArgusError as err:
            raise click.ClickException(err.render()) from err
        except KeyboardInterrupt:
            click.echo("argus: interrupted", err=True)
            raise click.exceptions.Exit(INTERRUPTED_EXIT) from None
        except MemoryError as err:
            raise click.ClickException(
                "out of memory: the command needed more than this process may use\n"
                "  fix: pin smaller sizes, raise the memory limit, or check the kernel's "
                "Python for a runaway allocation") from err
        except Exception:
            # the KeyboardInterrupt may arrive inside a C call and come out as another error
            # (ctypes wraps it in ArgumentError while converting a solver call's arguments)
            if _interrupts:
                click.echo("argus: interrupted", err=True)
                raise click.exceptions.Exit(INTERRUPTED_EXIT) from None
            raise


@contextlib.contextmanager
def _user_errors():
    """A name the user gave that is not there (a kernel of a code object, an example): the
    KeyError's message, not a traceback."""
    try:
        yield
    except KeyError as err:
        raise click.ClickException(str(err.args[0] if err.args else err)) from err


@click.group(cls=_Commands)
@click.version_option(package_name="argus")
def main() -> None:
    """Argus: verified, search-tuned AMD CDNA3 (gfx942) GPU kernels."""
    signal.signal(signal.SIGINT, _interrupted)


#: the Ctrl-C signals this process has had (see `_interrupted`)
_interrupts: list[int] = []

#: seconds a command has, after Ctrl-C, to unwind before the process ends regardless
UNWIND_SECONDS = 3


def _interrupted(signum, frame):
    """Ctrl-C: raise KeyboardInterrupt as usual, and end the process shortly after if it is
    still running. Python drops a KeyboardInterrupt raised inside a weakref callback or a
    __del__ ("Exception ignored in ..."), and the command would then run on to its end."""

    def end(signum, frame):
        print("argus: interrupted", file=sys.stderr, flush=True)
        os._exit(INTERRUPTED_EXIT)

    _interrupts.append(signum)
    signal.signal(signal.SIGALRM, end)
    signal.alarm(UNWIND_SECONDS)
    raise KeyboardInterrupt


@main.command()
def doctor() -> None:
    """Check the gfx942 toolchain, Python packages and SMT back-ends."""
    from argus.asm.toolchain import doctor as run_checks

    ok = run_checks(click.echo)
    if not ok:
        click.echo("argus doctor: required pieces are missing (see the fixes above)", err=True)
    sys.exit(0 if ok else 1)


@main.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True,
              help="Code object (.hsaco) to write; written atomically.")
@click.option("--mcpu", default="gfx942", show_default=True, help="Target processor.")
def asm(source: str, output: str, mcpu: str) -> None:
    """Assemble a gfx942 assembly FILE.s into a code object."""
    from argus.asm import assemble_file

    with _user_errors():
        code = assemble_file(source, output, mcpu=mcpu)
    names = ", ".join(k.name for k in code.kernels) or "no kernels"
    click.echo(f"wrote {output} ({len(code.data)} bytes; {names})")


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--kernel", default=None, help="Only this kernel (symbol name).")
@click.option("--stats", is_flag=True, help="Instruction mix, loops and resource usage.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--compare", "other", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Statistics of PATH and this second kernel side by side.")
def disasm(path: str, kernel: str | None, stats: bool, as_json: bool, other: str | None
           ) -> None:
    """Disassemble a .s, .hsaco or .co file."""
    from argus.asm.stats import compare_command, disasm_command

    with _user_errors():
        if other:
            compare_command(path, other, kernel=kernel, as_json=as_json, echo=click.echo)
        else:
            disasm_command(path, kernel=kernel, stats=stats, as_json=as_json, echo=click.echo)


def _sizes(items: tuple[str, ...]) -> dict:
    """--size NAME=N pairs with whole-number values."""
    sizes = _assignments(items, "--size")
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise click.BadParameter(f"{name}={value}: a size is a whole number, e.g. "
                                     f"{name}=256", param_hint="--size")
    return sizes


def _assignments(items: tuple[str, ...], what: str) -> dict:
    """NAME=VALUE pairs; values read as int, true/false, else kept as text."""
    values = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint=what)
        lowered = text.lower()
        values[name] = (lowered == "true" if lowered in ("true", "false")
                        else int(text) if text.lstrip("-").isdigit() else text)
    return values


@main.command()
@click.argument("kernel")
@click.option("--interp", is_flag=True, help="Run in the concrete reference interpreter.")
@click.option("--emulate", is_flag=True,
              help="Compile to gfx942 and run the code object in the strict emulator.")
@click.option("--size", "sizes", multiple=True, help="Symbolic size, e.g. --size M=256.")
@click.option("--param", "params", multiple=True, help="Kernel parameter, e.g. causal=true.")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--ir", "show_ir", is_flag=True, help="Print the kernel's IR first.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--reference", default=None, metavar="FILE:FUNC",
              help="For a kernel from a file: a numpy function of the inputs (by tensor name) "
                   "returning the last tensor's expected value (or a dict by name).")
@click.option("--tolerance", type=float, default=None,
              help="Bound on the error relative to max |expected| [default: by dtype].")
def run(kernel: str, interp: bool, emulate: bool, sizes: tuple[str, ...],
        params: tuple[str, ...], seed: int, show_ir: bool, as_json: bool,
        reference: str | None, tolerance: float | None) -> None:
    """Run KERNEL on random data: a library kernel against numpy, or FILE.py:KERNEL (a user's
    @kernel) in the interpreter (--interp) or compiled and emulated (--emulate) against the
    interpreter and an optional --reference."""
    from argus.ir.ops import resources
    from argus.kernels import library
    from argus.pipeline import road

    if interp == emulate:
        raise click.UsageError("choose --interp (reference interpreter) or --emulate "
                               "(compiled code object in the emulator)")
    if kernel not in library():
        if ".py" not in kernel:
            raise click.BadParameter(f"choose one of {', '.join(sorted(library()))}, or give "
                                     "FILE.py:KERNEL", param_hint="KERNEL")
        _run_user(kernel, "emulate" if emulate else "interp", sizes, params, seed, reference,
                  tolerance, show_ir, as_json)
        return
    params_given = _assignments(params, "--param")
    until = "emulate" if emulate else "interpret"
    done = road(kernel, until=until, skip=("verify", "interpret") if emulate else ("verify",),
                strict=False, sizes=_assignments(sizes, "--size"), seed=seed, **params_given)
    check = done.emulated if emulate else done.interp
    if show_ir:
        click.echo(done.ir)
    if emulate:
        _report_emulated(kernel, params_given, done.compiled, check, as_json)
    if as_json:
        import json

        click.echo(json.dumps({
            "kernel": kernel, "sizes": check.run.sizes, "params": params_given,
            "ok": check.ok, "max_error": check.max_error, "tolerance": check.tolerance,
            "resources": resources(done.ir),
            "violations": [json.loads(v.to_json()) for v in check.run.violations]}))
        sys.exit(0 if check.ok else 1)
    shown = " ".join(f"{k}={v}" for k, v in check.sizes.items())
    click.echo(f"{kernel} [{shown}] {params_given or ''}".rstrip())
    used = resources(done.ir)
    click.echo(f"resources: {used['waves']} waves, LDS {used['lds_bytes']} B, about "
               f"{used['vgprs']} VGPRs/lane live at peak, {used['mfma']} MFMA ops in the text")
    click.echo(check.run.report() if check.run is not None else check.message)
    click.echo(f"max error vs numpy {check.max_error:.3g} (relative to max |reference|; "
               f"tolerance {check.tolerance:g})")
    sys.exit(0 if check.ok else 1)


@main.command("emulate")
@click.argument("name", required=False)
@click.option("--size", "sizes", multiple=True,
              help="Problem size: m=, n=, k=, splitk= (GEMM) or b=, h=, s=, sk= (attention).")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--check", type=click.Choice(["strict", "warn", "off"]), default="warn",
              show_default=True, help="Hazard checking: raise, record, or ignore.")
@click.option("--banks", is_flag=True, help="Also count LDS bank-conflict cycles.")
@click.option("--list", "list_kernels", is_flag=True, help="List the runnable vendor kernels.")
def emulate_command(name: str | None, sizes: tuple[str, ...], seed: int, check: str,
                    banks: bool, list_kernels: bool) -> None:
    """Run AMD vendor kernel NAME (amd-aiter, gfx942) in the emulator against numpy."""
    from argus.vendor.harness import run_vendor, vendor_kernels

    if list_kernels or name is None:
        click.echo("\n".join(vendor_kernels()))
        return
    shape = _sizes(sizes)
    outcome = run_vendor(name, shape=shape, seed=seed, check=check, bank_conflicts=banks)
    click.echo(outcome.report())
    sys.exit(0 if outcome.ok else 1)


@main.command("example")
@click.argument("name", required=False, default="mfma_gemm_32x32")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Code object to write (default: NAME.hsaco in the current directory).")
@click.option("--list", "list_examples", is_flag=True, help="List the built-in examples.")
def example_command(name: str, output: str | None, list_examples: bool) -> None:
    """Assemble built-in example kernel NAME and show what is inside it."""
    from argus.asm import assemble_file, example_names, example_path
    from argus.asm.stats import disasm_command

    if list_examples:
        click.echo("\n".join(example_names()))
        return
    with _user_errors():
        source = example_path(name)
        output = output or f"{name}.hsaco"
        assemble_file(source, output)
        click.echo(f"assembled {source} -> {output}")
        disasm_command(output, kernel=None, stats=True, as_json=False, echo=click.echo)


#: `argus verify` exit status when every obligation is proved, but only for bounded loops.
BOUNDED_PROOF_EXIT = 4


@main.command("verify")
@click.argument("target", metavar="KERNEL_OR_FILE")
@click.option("--size", "sizes", multiple=True, help="Pin a size, e.g. --size M=256.")
@click.option("--param", "params", multiple=True, help="Kernel parameter, e.g. causal=true.")
@click.option("--solver", type=click.Choice(["z3", "cvc5"]), default="z3", show_default=True)
@click.option("--unroll", type=click.IntRange(min=1), default=None, metavar="N",
              help="Bounded check: run the first N iterations of every loop as copies of its "
                   "body and decide every obligation only for sizes (and workgroups) where each "
                   "loop runs at most N iterations. Finds bugs the symbolic proof leaves "
                   f"Unknown; a full pass exits {BOUNDED_PROOF_EXIT}, not 0.")
@click.option("--jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Worker processes deciding the obligations [default: ARGUS_JOBS, else "
                   "every core].")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--banks", is_flag=True, help="Also print LDS bank-conflict facts.")
def verify_command(target: str, sizes: tuple[str, ...], params: tuple[str, ...], solver: str,
                   unroll: int | None, jobs: int | None, as_json: bool, banks: bool) -> None:
    """Prove KERNEL_OR_FILE's tag assertions and built-in checks.

    \b
    Exit status:
      0  every obligation proved for every size
      1  some obligation refuted (a confirmed bug) or unknown, or bad input
      2  wrong command-line options
      4  every obligation proved, but only for loops of at most N
         iterations (--unroll N): a bounded check, not a proof
    """
    from argus import env
    from argus.absint.verify import verify
    from argus.kernels.resolve import resolve_kernel

    jobs = env.jobs() if jobs is None else jobs
    report = verify(resolve_kernel(target), solver=solver, unroll=unroll, jobs=jobs,
                    **_assignments(params, "--param"), **_assignments(sizes, "--size"))
    if as_json:
        click.echo(report.to_json())
    else:
        click.echo(str(report))
        if banks:
            for fact in report.bank_facts:
                click.echo(str(fact))
    sys.exit(0 if report.proved_for_all_sizes else BOUNDED_PROOF_EXIT if report.ok else 1)


@main.command("prove")
@click.argument("goal")
@click.option("--var", "variables", multiple=True, metavar="NAME=LO:HI",
              help="A variable and its range, upper bound exclusive, e.g. --var lane=0:64.")
@click.option("--assume", "assumptions", multiple=True, help="An assumption, in GOAL's syntax.")
@click.option("--solver", type=click.Choice(["z3", "cvc5"]), default="z3", show_default=True)
@click.option("--timeout-ms", type=click.IntRange(min=1), default=None,
              help="Solver time limit [default: the library's, argus.smt.DEFAULT_TIMEOUT_MS].")
@click.option("--minimize", default="", metavar="A,B,...",
              help="Variables whose counterexample values to minimise, most significant first.")
@click.option("--smtlib", is_flag=True, help="Print the SMT-LIB 2 query instead of solving.")
def prove_command(goal: str, variables: tuple[str, ...], assumptions: tuple[str, ...],
                  solver: str, timeout_ms: int | None, minimize: str, smtlib: bool) -> None:
    """Decide GOAL (Python syntax over the --var variables) for every value in range.

    Example: argus prove "4*(lane//32) + slot == ((lane >> 5) << 2) | slot" --var lane=0:64
    --var slot=0:4. Exit status 0 proved, 1 refuted, 3 unknown.
    """
    from argus.ir.expr import Var, parse
    from argus.smt import DEFAULT_TIMEOUT_MS, Proved, Refuted, prove, to_smtlib

    try:
        declared = [_variable(spec, Var) for spec in variables]
        names = [v.name for v in declared]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise click.BadParameter(f"{', '.join(twice)} declared more than once; give each "
                                     "variable one range", param_hint="--var")
        goal_expr = parse(goal, declared)
        assumed = [parse(a, declared) for a in assumptions]
        order = [n.strip() for n in minimize.split(",") if n.strip()]
        if smtlib:
            click.echo(to_smtlib(goal_expr, assumed), nl=False)
            return
        verdict = prove(goal_expr, assumed, solver=solver,
                        timeout_ms=timeout_ms or DEFAULT_TIMEOUT_MS, minimize=order)
    except ArgusError:
        raise
    except (TypeError, ValueError, ArithmeticError) as err:
        # a malformed --var, bounds Var rejects, a division by the constant 0 in the goal
        raise click.ClickException(str(err)) from err
    click.echo(str(verdict))
    sys.exit(0 if isinstance(verdict, Proved) else 1 if isinstance(verdict, Refuted) else 3)


def _variable(spec: str, var_type):
    """A Var from NAME=LO:HI."""
    name, _, interval = spec.partition("=")
    lo, _, hi = interval.partition(":")
    try:
        return var_type(name.strip(), int(lo), int(hi))
    except ValueError as err:
        raise ValueError(f"--var {spec}: {err}; write NAME=LO:HI with integer bounds, "
                         "e.g. --var lane=0:64") from None


@main.command("demo")
def demo_command() -> None:
    """The main job on built-in examples: verify, interpret, assemble, emulate — each vs numpy."""
    from argus.demo import tour

    with _user_errors():
        ok = tour(click.echo)
    sys.exit(0 if ok else 1)


def _run_user(target: str, mode: str, sizes, params, seed: int, reference: str | None,
              tolerance: float | None, show_ir: bool, as_json: bool) -> None:
    from argus.kernels.resolve import resolve_kernel
    from argus.user import resolve_function, run_user

    kernel = resolve_kernel(target)
    params = _assignments(params, "--param")
    if show_ir:
        click.echo(kernel if not hasattr(kernel, "trace") else kernel.trace(**params))
    outcome = run_user(kernel, _sizes(sizes), mode=mode, params=params, seed=seed,
                       reference=resolve_function(reference) if reference else None,
                       tolerance=tolerance)
    if as_json:
        import json

        click.echo(json.dumps({
            "kernel": outcome.kernel, "mode": mode, "sizes": outcome.sizes, "ok": outcome.ok,
            "errors": outcome.errors, "tolerances": outcome.tolerances,
            "violations": [json.loads(v.to_json()) for v in outcome.violations]}))
        sys.exit(0 if outcome.ok else 1)
    shown = " ".join(f"{k}={v}" for k, v in outcome.sizes.items())
    where = ("compiled, emulated (strict) and compared with the interpreter"
             if mode == "emulate" else "reference interpreter")
    click.echo(f"{outcome.kernel} [{shown}] {where}, random inputs (seed {seed})")
    if outcome.compiled is not None:
        click.echo(_resource_line(outcome.compiled))
    for violation in outcome.violations:
        click.echo(str(violation))
    for name, per in outcome.errors.items():
        parts = ", ".join(f"vs {against} {error:.3g}" for against, error in per.items())
        verdict = "ok" if all(e <= outcome.tolerances[name] for e in per.values()) else "FAIL"
        click.echo(f"{name}: max error {parts} (relative to max |expected|; tolerance "
                   f"{outcome.tolerances[name]:g}) {verdict}")
    sys.exit(0 if outcome.ok else 1)


def _report_emulated(kernel: str, params: dict, compiled, check, as_json: bool) -> None:
    em = check.run
    if as_json:
        import json

        click.echo(json.dumps({
            "kernel": kernel, "sizes": check.sizes, "params": params,
            "ok": check.ok, "max_error": check.max_error, "tolerance": check.tolerance,
            "resources": compiled.resources,
            "wave_instructions": em.wave_instructions if em is not None else 0}))
        sys.exit(0 if check.ok else 1)
    shown = " ".join(f"{k}={v}" for k, v in check.sizes.items())
    click.echo(f"{kernel} [{shown}] {params or ''}".rstrip())
    click.echo(_resource_line(compiled))
    if em is None:
        click.echo(check.message)
    else:
        click.echo(f"emulated (strict: no hazard, no missing wait): {em.workgroups} workgroups, "
                   f"{em.wave_instructions} wave instructions in {em.seconds:.2f} s")
    click.echo(f"max error vs numpy {check.max_error:.3g} (relative to max |reference|; "
               f"tolerance {check.tolerance:g})")
    sys.exit(0 if check.ok else 1)


def _resource_line(compiled) -> str:
    r = compiled.resources
    return (f"resources: {r['vgprs']} VGPRs, {r['agprs']} AGPRs, {r['sgprs']} SGPRs, "
            f"LDS {r['lds_bytes']} B, {r['waves_per_workgroup']} waves/workgroup; occupancy "
            f"{r['waves_per_simd']} waves/SIMD (limited by {r['occupancy_limited_by']})"
            + (f"\nVGPR peak: {compiled.lowered.peak.describe()}" if r["vgpr_peak"] else ""))


@main.command("compile")
@click.argument("target", metavar="KERNEL_OR_FILE")
@click.option("--param", "params", multiple=True, help="Tile parameter, e.g. block_m=128.")
@click.option("--policy", type=click.Choice(["interleave", "simple"]), default="interleave",
              show_default=True, help="Scheduling policy.")
@click.option("--verify/--no-verify", default=True, show_default=True,
              help="Prove the kernel before lowering it.")
@click.option("-S", "assembly", is_flag=True, help="Print (or with -o write) the .s text.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the code object (or the .s with -S); written atomically.")
def compile_command(target: str, params: tuple[str, ...], policy: str, verify: bool,
                    assembly: bool, output: str | None) -> None:
    """Compile KERNEL_OR_FILE to a gfx942 code object (sizes stay kernel arguments)."""
    from pathlib import Path

    from argus.asm.codeobject import write_atomic
    from argus.kernels.resolve import resolve_kernel
    from argus.pipeline import road

    compiled = road(resolve_kernel(target), until="compile", policy=policy,
                    skip=("interpret",) if verify else ("verify", "interpret"),
                    **_assignments(params, "--param")).compiled
    if assembly and output is None:
        click.echo(compiled.text, nl=False)
        return
    if output is not None:
        data = compiled.text.encode() if assembly else compiled.code.data
        write_atomic(Path(output), data)
    sizes = ", ".join(v.name for v in compiled.ir.sizes)
    click.echo(f"{compiled.name} {compiled.params or ''}: {'proved, ' if verify else ''}"
               f"compiled in {compiled.seconds:.2f} s; sizes ({sizes}) are kernel arguments"
               .replace("  ", " "))
    click.echo(_resource_line(compiled))
    if output is not None:
        click.echo(f"wrote {output}")


def _int_assignments(items: tuple[str, ...], what: str, example: str) -> dict[str, int]:
    """NAME=N pairs whose values must be whole numbers."""
    values = _assignments(items, what)
    bad = [f"{k}={v!r}" for k, v in values.items() if not isinstance(v, int) or
           isinstance(v, bool)]
    if bad:
        raise click.BadParameter(f"{', '.join(bad)}: give whole numbers, e.g. {what} {example}",
                                 param_hint=what)
    return values


def _ints(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not N or N,N[,N]", param_hint=what) from None


def _timed(target: str, shapes, params, kernel, grid, block, buffers, args, gpu, *,
           strict: bool = True):
    from argus.timing import time_target

    shape = _int_assignments(shapes, "--shape", "k=4096")
    return time_target(target, shape=shape, params=_assignments(params, "--param"),
                       grid=_ints(grid, "--grid"), block=_ints(block, "--block"),
                       buffers=_int_assignments(buffers, "--buffer", "A=1048576"),
                       args=_assignments(args, "--arg"), kernel=kernel, gpu=gpu,
                       strict_sizes=strict)


_shape_option = click.option("--shape", "shapes", multiple=True,
                             help="Problem size NAME=N (any case), e.g. --shape k=4096.")
_param_option = click.option("--param", "params", multiple=True,
                             help="Tile parameter of a library kernel, e.g. block_m=128.")
_gpu_option = click.option("--gpu", type=click.Choice(["mi300x", "mi308x"]), default="mi300x",
                           show_default=True, help="GPU profile (mi308x: the 80-CU part).")


@main.command("time")
@click.argument("target")
@_shape_option
@_param_option
@click.option("--kernel", default=None, help="Kernel symbol in a code object file.")
@click.option("--grid", default=None, help="Workgroups of a code object launch, e.g. 304,1,1.")
@click.option("--block", default=None, help="Work-items per workgroup, e.g. 256.")
@click.option("--buffer", "buffers", multiple=True,
              help="Zero-filled buffer argument NAME=BYTES of a code object.")
@click.option("--arg", "args", multiple=True, help="By-value argument NAME=VALUE.")
@_gpu_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Also draw a roofline and stall breakdown into this .png.")
def time_command(target: str, shapes, params, kernel, grid, block, buffers, args, gpu: str,
                 as_json: bool, plot: str | None) -> None:
    """Modelled MI300X time of TARGET (no GPU here: every figure is modelled).

    TARGET is a vendor kernel (argus emulate --list) with --shape, a library kernel (gemm,
    attention, ...) with --shape and --param, or a code object file with --grid, --block and
    --buffer."""
    import json

    result = _timed(target, shapes, params, kernel, grid, block, buffers, args, gpu)
    timing = result.timing
    if plot:
        from argus.isa_cdna3.perf.plot import roofline

        with _user_errors():
            roofline([timing], plot)
    if as_json:
        click.echo(json.dumps(timing.to_json(), indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{result.name} on {timing.gpu} (modelled, not measured)")
    table.add_column("figure")
    table.add_column("modelled value")
    occ = timing.occupancy
    rows = [
        ("time", f"{timing.microseconds:.2f} us (launch {timing.launch_us:.2f} us)"),
        ("throughput", f"{timing.tflops:.1f} TFLOP/s"),
        ("bytes", f"{timing.bytes_hbm / 1e6:.2f} MB HBM, {timing.bytes_requested / 1e6:.2f} MB "
                  f"L2->CU"),
        ("clock", f"{timing.clock_ghz:.2f} GHz"),
        ("occupancy", f"{occ.workgroups_per_cu} workgroup(s)/CU x {occ.waves_per_workgroup} "
                      f"waves, limited by {occ.limiter}"),
        ("grid", f"{timing.workgroups} workgroups, {timing.rounds:g} round(s) on the busiest CU"),
        ("LDS conflict factor", f"{timing.lds_conflict:.2f}"),
        *((f"busy {unit}", f"{value:.0%}") for unit, value in timing.busy.items()),
        *((f"stall {cause}", f"{value:.0%} of wave time") for cause, value in
          timing.stalls.items()),
        ("bottleneck", timing.bottleneck),
    ]
    if timing.extrapolation:
        rows.append(("extrapolation", timing.extrapolation))
    rows.append(("calibration", timing.calibration))
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)
    if plot:
        click.echo(f"wrote {plot}")


@main.command("compare")
@click.argument("first")
@click.argument("second")
@_shape_option
@_param_option
@_gpu_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Also draw both on a roofline with their stall breakdowns.")
def compare_command_(first: str, second: str, shapes, params, gpu: str, as_json: bool,
                     plot: str | None) -> None:
    """Two kernels side by side at the same --shape (modelled): ours vs AMD's, or two of ours.

    Each --shape applies to the kernel that has a size of that name (any case)."""
    import json

    from argus.timing import check_target, compare

    for target in (first, second):  # both named before either is timed
        check_target(target)
    a = _timed(first, shapes, params, None, None, None, (), (), gpu, strict=False)
    b = _timed(second, shapes, params, None, None, None, (), (), gpu, strict=False)
    result = compare(a, b)
    if plot:
        from argus.isa_cdna3.perf.plot import roofline

        with _user_errors():
            roofline([a.timing, b.timing], plot)
    if as_json:
        click.echo(json.dumps(result, indent=1, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{a.name} vs {b.name} on {gpu} (modelled, not measured)")
    table.add_column("")
    table.add_column(a.name)
    table.add_column(b.name)
    for key, (left, right) in result["rows"].items():
        table.add_row(key, str(left), str(right))
    Console().print(table)
    click.echo(f"modelled time {b.name} / {a.name} = {result['ratio']:.3f}")
    click.echo(result["difference"])
    click.echo("\n".join(result["explanation"]))


@main.command("tune")
@click.argument("family", required=False)
@click.option("--shape", default=None, help="Target sizes, e.g. 4096x4096x4096 (gemm MxNxK, "
              "attention_fwd BHxSxD, moe_gemm TOKENSxHxExN).")
@click.option("--param", "params", multiple=True,
              help="Pin a parameter (causal=true, swizzle=true) or restrict the values searched "
                   "(block_k=32,64).")
@click.option("--budget", default=64, show_default=True, help="Evaluations at most.")
@click.option("--time-limit", type=float, default=None, help="Wall-clock seconds at most.")
@click.option("--timeout", type=float, default=600.0, show_default=True,
              help="Seconds per candidate before its worker is killed.")
@click.option("--planner", type=click.Choice(["offline", "llm"]), default="offline",
              show_default=True, help="offline: bandit over knowledge-base moves + optuna; llm: "
              "an OpenAI-compatible chat model (falls back to offline on a bad answer).")
@click.option("--llm-base-url", default=None, help="[default: ARGUS_LLM_BASE_URL]")
@click.option("--llm-model", default=None, help="[default: ARGUS_LLM_MODEL]")
@click.option("--llm-api-key-env", default=None, metavar="VAR",
              help="Environment variable holding the API key [default: ARGUS_LLM_API_KEY, "
                   "then OPENAI_API_KEY].")
@click.option("--llm-timeout", type=float, default=None, help="Seconds per LLM request.")
@click.option("--jobs", type=click.IntRange(min=0), default=1, show_default=True,
              help="Worker processes (0: evaluate in this process, no per-candidate timeout).")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local",
              show_default=True, help="local process pool, or Ray tasks (pip install "
              "'ray[default]', or -e '.[ray]' in a checkout).")
@click.option("--ray-address", default=None, help="An existing Ray cluster [default: start a "
              "local one, or RAY_ADDRESS].")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Output directory: run.jsonl, winner.json, winner.s "
                   "[default: argus-tune/FAMILY-SHAPE, or -2, -3, ... when that holds a run].")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False), default=None,
              help="Draw reward per evaluation and the best so far into FILE.png.")
@click.option("--resume", type=click.Path(exists=True, dir_okay=False), default=None,
              metavar="RUN.jsonl", help="Continue a run; cached candidates are not re-evaluated.")
@click.option("--report", "report_file", type=click.Path(exists=True, dir_okay=False),
              default=None, metavar="RUN.jsonl", help="Summarise a past run and exit.")
@click.option("--seed", default=0, show_default=True, help="Planner and input seed.")
@click.option("--fresh", is_flag=True, help="Ignore the experience of past runs (priors from "
              "the knowledge base alone) and do not add this run to it.")
@click.option("--problems", "problems_dir", type=click.Path(exists=True, file_okay=False),
              default=None, help="The KernelBench folder a kernelbench:LEVEL/NAME target is "
              "read from (the checkout holding level1/, or a level folder).")
@click.option("--screen/--no-screen", default=None, help="Time candidates with the model alone "
              "(no proof) before the budget is spent and propose the fastest first [default: "
              "with the offline planner].")
def tune_command(family, shape, params, budget, time_limit, timeout, planner, llm_base_url,
                 llm_model, llm_api_key_env, llm_timeout, jobs, backend, ray_address, out,
                 plot_file, resume, report_file, seed, fresh, problems_dir, screen) -> None:
    """Search FAMILY's space for the fastest kernel Argus can verify; FAMILY may be a
    KernelBench problem, kernelbench:level1/23_Softmax with --problems DIR.

    FAMILY is a library kernel with knobs (gemm, gemm_f16, gemm_fp8, gemm_bf8, attention_fwd,
    moe_gemm) or your own, FILE.py:NAME, where NAME is an argus.kernels.LibraryKernel (kernel,
    output tensor, default sizes, numpy reference, tolerance, knobs) defined in that file.

    \b
    Exit status:
      0  a verified, correct, modelled winner was found
      1  bad input
      3  the run ended without any result (the summary says which stage is missing)
    """
    from pathlib import Path

    from rich.console import Console

    from argus.search import Budget, Problem, SearchError, parse_shape, tune
    from argus.search.store import read
    from argus.search.view import final_table, live_panel, report, write_winner

    console = Console()
    run_file = None
    from argus.kernelbench.tune import is_target

    if is_target(family):
        _tune_kernelbench(family, problems_dir, budget, out, console)
        return
    try:
        if report_file:
            events = read(report_file)
            console.print(report(events))
            if plot_file:
                _plot_events(events, plot_file, console)
            return
        if resume and not (family and shape):
            header = read(resume)[0]
            family = family or header["problem"]["family"]
            problem = Problem(family, header["problem"]["sizes"], header["problem"]["pinned"])
        else:
            if not family or not shape:
                raise click.UsageError("give FAMILY and --shape (or --report RUN.jsonl, or "
                                       "--resume RUN.jsonl)")
            problem = Problem(family, parse_shape(family, shape), _choices(params))
        run_file = Path(resume) if resume else Path(
            out or _free_directory(f"argus-tune/{_label(problem.family)}-{problem.shape}")
        ) / "run.jsonl"
        out_dir = Path(out) if out else run_file.parent
        llm = {"base_url": llm_base_url, "model": llm_model, "api_key_env": llm_api_key_env,
               "timeout_s": llm_timeout}
        from rich.live import Live

        with Live(console=console, refresh_per_second=4, transient=False) as live:
            progress = tune(problem, run_file=run_file,
                            budget=Budget(budget, time_limit, timeout), planner=planner,
                            llm=llm, jobs=jobs, backend=backend, ray_address=ray_address,
                            resume=bool(resume), seed=seed, fresh=fresh, screen=screen,
                            on_update=lambda p: live.update(live_panel(p)))
    except SearchError as err:
        raise click.ClickException(str(err)) from err
    except KeyboardInterrupt:
        if run_file is not None:
            console.print(f"interrupted: the run file {run_file} is complete up to the last "
                          f"evaluation; continue with  argus tune --resume {run_file}")
        sys.exit(130)
    evaluations = progress.state.evaluations
    console.print()
    if not evaluations:
        from argus.search.evaluate import precheck
        from argus.search.space import default_candidate

        why = precheck(problem, default_candidate(problem))
        console.print(f"no candidate was evaluated: {progress.stopped}"
                      + (f"; the default configuration cannot run here: {why}" if why else ""))
    console.print(final_table(evaluations))
    for path in write_winner(out_dir, problem, evaluations):
        console.print(f"wrote {path}")
    console.print(f"trajectory: {run_file}  (argus tune --report {run_file})")
    if plot_file:
        _plot_events(read(run_file), plot_file, console)
    sys.exit(0 if progress.state.results else 3)


def _label(family: str) -> str:
    """A family's name as a directory name: `path/to/mine.py:TUNABLE` -> `mine-TUNABLE`."""
    from pathlib import Path

    path, colon, attr = family.rpartition(":")
    return f"{Path(path).stem}-{attr}" if colon and path.endswith(".py") else family


def _tune_kernelbench(spec: str, problems_dir, budget: int, out, console) -> None:
    """`argus tune kernelbench:LEVEL/NAME --problems DIR`: the route's templates' knobs,
    screened by the model, then checked in full fastest first (argus.kernelbench.tune)."""
    from pathlib import Path

    from argus.errors import ArgusError
    from argus.kernelbench.tune import load_target, tune
    from argus.search import SearchError

    try:
        target = load_target(spec, problems_dir)
        stem = f"argus-tune/kernelbench-{target.spec.replace('/', '-')}"
        run_file = Path(out or _free_directory(stem)) / "run.jsonl"
        rows = tune(target, run_file=run_file, budget=budget, echo=console.print)
    except (SearchError, ArgusError) as err:
        raise click.ClickException(str(err)) from err
    best = next((r for r in rows if r["reward"] is not None), None)
    if best is None:
        console.print("no candidate passed every check (correct, proved, timed)")
    else:
        console.print(f"best: {' '.join(f'{k}={v}' for k, v in best['params'].items())}: "
                      f"{best['time_us']:.2f} µs modelled, {best['reward']:.3f}x the route's own "
                      "plan (correct on the emulator, proved)")
    console.print(f"trajectory: {run_file}")
    sys.exit(0 if best else 3)


def _free_directory(stem: str) -> str:
    """`stem`, or `stem-2`, `stem-3`, ... : the first that holds no run yet (a default output
    directory never makes a repeated command fail; an explicit --out that holds a run does)."""
    from pathlib import Path

    candidate, number = stem, 1
    while (Path(candidate) / "run.jsonl").is_file():
        number += 1
        candidate = f"{stem}-{number}"
    return candidate


def _choices(items: tuple[str, ...]) -> dict:
    """--param NAME=VALUE pins a parameter; NAME=V1,V2 restricts the values searched."""
    pinned = {}
    for item in items:
        name, sep, text = item.partition("=")
        parts = [_assignments((f"{name}={part}",), "--param")[name]
                 for part in text.split(",")] if sep else []
        if not sep or not name or not all(str(p) for p in parts):
            raise click.BadParameter(f"{item!r} is not NAME=VALUE or NAME=V1,V2",
                                     param_hint="--param")
        pinned[name] = parts if len(parts) > 1 else parts[0]
    return pinned


def _plot_events(events: list[dict], plot_file: str, console) -> None:
    from argus.search.evaluate import Evaluation
    from argus.search.plot import plot

    evaluations = [Evaluation.from_dict(e["evaluation"]) for e in events if e["kind"] == "eval"]
    problem = events[0]["problem"]
    shape = "x".join(str(v) for v in problem["sizes"].values())
    title = f"{problem['family']} {shape}"
    console.print(f"wrote {plot(evaluations, plot_file, title)}")


# ------------------------------------------------------------------ kernelbench (issue 25)
@main.command("kernelbench")
@click.argument("problems_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--only", default=None, help="Problems to check, by number or file stem: 19,23.")
@click.option("--jobs", default=1, show_default=True, type=click.IntRange(min=1),
              help="Worker processes (one problem each).")
@click.option("--json", "json_out", default=None, type=click.Path(dir_okay=False),
              help="Write the rows as JSON to this file.")
def kernelbench_command(problems_dir: str, only: str | None, jobs: int,
                        json_out: str | None) -> None:
    """Check a KernelBench level folder: generated (or hand-written) solutions, correct on the
    emulator by KernelBench's rules, proved for symbolic sizes, timed by the MI300X model."""
    import json
    import tempfile
    from pathlib import Path

    from rich.console import Console
    from rich.live import Live

    from argus.kernelbench import run, summary, table

    console = Console()
    done: list = []
    wanted = tuple(x.strip() for x in only.split(",") if x.strip()) if only else ()
    with Live(table(done), console=console, refresh_per_second=2,
              transient=not console.is_terminal) as live:
        def show(row):
            done.append(row)
            live.update(table(done))
        rows = run(problems_dir, only=wanted, jobs=jobs, on_row=show)
    if not console.is_terminal:
        console.print(table(rows))
    if json_out:
        target = Path(json_out)
        with tempfile.NamedTemporaryFile("w", dir=target.parent or ".", delete=False,
                                         suffix=".tmp") as f:
            json.dump([r.to_json() for r in rows], f, indent=1)
        Path(f.name).replace(target)
    click.echo(summary(rows))


if __name__ == "__main__":
    main()

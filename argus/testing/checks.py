"""The checks that judge the verifier's verdicts, each failing with a minimal reproducer.

* `assert_sound`: every Proved obligation holds in the reference interpreter at the sampled
  sizes, every interpreter violation has an obligation that is not Proved, and every Refuted
  obligation's counterexample is confirmed and reproduces in the interpreter.
* `assert_complete`: a mutant's seeded defect is Refuted with a confirmed counterexample.
* `assert_metamorphic`: verdicts do not change under renaming, re-association, `//2^k` <->
  `>>k` and solver choice.
Reports come from a `VerdictCache` shared by the whole process (the pytest fixture hands out
the same one), so a suite verifies each distinct kernel once."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.errors import InvalidArgument

from argus import env
from argus.absint.concrete import run
from argus.absint.report import PROVED, REFUTED, Report
from argus.absint.verify import verify
from argus.ir import ops as O
from argus.ir.expr import Term, Var, as_expr, evaluate, rebuild, simplify, substitute
from argus.ir.rewrite import map_exprs, sites
from argus.ir.text import print_kernel
from argus.testing.programs import Program, as_program

__all__ = ["ArgusCheckFailure", "VerdictCache", "shared_cache", "assert_sound", "assert_complete",
           "assert_metamorphic", "METAMORPHIC", "interpreter_violations"]


class ArgusCheckFailure(AssertionError):
    """A verdict that a check found wrong; the message ends with the reproducer."""


class VerdictCache:
    """`verify` memoised by the kernel's IR text and the options (the solver's own query
    cache is process-wide as well, so close variants share most of their work)."""

    def __init__(self):
        self._reports: dict = {}
        self.hits = self.misses = 0

    def verify(self, kernel, *, solver: str = "z3", rules: type | None = None,
               **options) -> Report:
        ir = as_program(kernel).kernel
        key = (print_kernel(ir), solver, rules, tuple(sorted(options.items())))
        if key in self._reports:
            self.hits += 1
        else:
            self.misses += 1
            self._reports[key] = verify(ir, solver=solver, rules=rules, jobs=1, **options)
        return self._reports[key]

    __call__ = verify


_SHARED = VerdictCache()


def shared_cache() -> VerdictCache:
    """The process-wide cache the checks use by default."""
    return _SHARED


# ------------------------------------------------------------------------ interpreter side

#: Interpreter runs kept (by kernel text and sizes): a suite revisits the same cases while
#: hypothesis shrinks.
RUNS_KEPT = 1024
_RUNS: OrderedDict = OrderedDict()


def interpreter_violations(program: Program, sizes: dict) -> list:
    """Violations the reference interpreter finds running `program` at `sizes` (memoised)."""
    key = (print_kernel(program.kernel), tuple(sorted(sizes.items())))
    if key not in _RUNS:
        ir = program.kernel
        if program.inputs is not None:
            inputs = program.inputs(sizes)
        else:
            inputs = {t.name: np.zeros(tuple(int(evaluate(e, sizes)) for e in t.type.shape),
                                       np.float32) for t in ir.tensors}
        _RUNS[key] = run(ir, inputs, max_violations=10_000).violations
        if len(_RUNS) > RUNS_KEPT:
            _RUNS.popitem(last=False)
    _RUNS.move_to_end(key)
    return _RUNS[key]


def _site(finding) -> tuple:
    """Where a finding is: the assertion for tag checks (the interpreter names the op that
    triggers it, the verifier the assertion), the op otherwise."""
    if finding.kind == "tag-assertion":
        quoted = re.fullmatch(r"tag assertion '(.*)' does not hold", finding.message)
        return finding.kind, quoted.group(1) if quoted else finding.message
    if finding.kind == "tag-missing":
        return (finding.kind,)
    return finding.kind, finding.loc


# --------------------------------------------------------------------------------- checks

def assert_sound(kernel, sizes=None, *, verifier: VerdictCache | None = None,
                 rules: type | None = None, solver: str = "z3", examples: int = 1,
                 **params) -> Report:
    """Check `kernel`'s verdicts against the reference interpreter at `sizes`: a dict or a
    list of dicts (each checked), or a strategy (default: the program's own sizes) to draw from.

    Inside a hypothesis test a strategy is drawn from the running test (`examples` draws,
    shrunk with it); outside, a search of its own runs with the current profile."""
    program = as_program(kernel, **params)
    cache = verifier or _SHARED
    report = cache.verify(program.kernel, solver=solver, rules=rules)
    _check_refuted(program, report, rules)
    if isinstance(sizes, dict):
        sizes = [sizes]
    if isinstance(sizes, (list, tuple)):
        for each in sizes:
            _check_sizes(program, report, each, rules)
        return report
    strategy = program.sizes if sizes is None else sizes
    try:
        context = current_build_context()
    except InvalidArgument:  # not inside a hypothesis test
        context = None
    if context is not None:
        for _ in range(examples):
            _check_sizes(program, report, context.data.draw(strategy), rules)
        return report

    @settings(max_examples=min(settings().max_examples, 20), database=None, deadline=None)
    @given(st.data())
    def search(data):
        _check_sizes(program, report, data.draw(strategy), rules)

    search()
    return report


def _check_sizes(program: Program, report: Report, sizes: dict, rules):
    found: dict = {}
    for v in interpreter_violations(program, sizes):
        found.setdefault(_site(v), v)
    for ob in report.obligations:
        if ob.verdict == PROVED and _site(ob) in found:
            _fail("assert_sound: a Proved obligation fails in the reference interpreter",
                  program, rules, sizes, [("obligation", str(ob)),
                                          ("interpreter", str(found[_site(ob)]))])
    for v in found.values():
        # the interpreter and the verifier may name different ops for one race: match by kind
        if not any(o.kind == v.kind and o.verdict != PROVED for o in report.obligations):
            _fail("assert_sound: the interpreter finds a violation no obligation states",
                  program, rules, sizes, [("verifier", report.summary()),
                                          ("interpreter", str(v))])


def _check_refuted(program: Program, report: Report, rules):
    for ob in report.obligations:
        if ob.verdict != REFUTED:
            continue
        if not ob.counterexample.confirmed:
            _fail("assert_sound: a Refuted obligation's counterexample is not confirmed",
                  program, rules, ob.counterexample.sizes, [("obligation", str(ob))])
        seen = {_site(v) for v in interpreter_violations(program, ob.counterexample.sizes)}
        if _site(ob) not in seen:
            _fail("assert_sound: a Refuted obligation does not reproduce in the interpreter",
                  program, rules, ob.counterexample.sizes, [("obligation", str(ob))])


def assert_complete(mutant, *, verifier: VerdictCache | None = None, rules: type | None = None,
                    solver: str = "z3") -> list:
    """The mutant's seeded defect is Refuted: some obligation of a kind it `expects` comes
    back Refuted with a confirmed counterexample. Returns those obligations."""
    cache = verifier or _SHARED
    report = cache.verify(mutant.kernel, solver=solver, rules=rules)
    caught = [o for o in report.refuted
              if o.kind in mutant.expects and o.counterexample.confirmed]
    if not caught:
        _fail(f"assert_complete: the seeded defect ({mutant.defect}) is not Refuted; expected "
              f"one of {sorted(mutant.expects)}", mutant, rules, None,
              [("verifier", str(report))])
    return caught


# ---------------------------------------------------------------------------- metamorphic

def _renamed(kernel: O.Kernel) -> O.Kernel:
    names = [v for v in kernel.sizes + kernel.scalars]
    names += [op.var for _, op, _ in sites(kernel) if isinstance(op, O.ProgramId)]
    names += [op.iv for _, op, _ in sites(kernel) if isinstance(op, O.For)]
    mapping = {v.name: Var(f"{v.name}_renamed", v.lo, v.hi) for v in names}
    return map_exprs(kernel, lambda e: substitute(e, mapping))


def _node_map(fn):
    """Apply `fn(op, args)` bottom-up to every term of every expression of a kernel."""
    def each(expr):
        memo: dict = {}

        def go(e):
            if not isinstance(e, Term):
                return e
            if e not in memo:
                memo[e] = fn(e.op, tuple(go(a) for a in e.args))
            return memo[e]
        return go(expr)
    return lambda kernel: map_exprs(kernel, each)


def _commuted(op, args):
    return rebuild(op, args[::-1] if op in ("add", "mul") else args)


def _power(e) -> int | None:
    value = getattr(e, "value", None)
    if isinstance(value, int) and value > 0 and value & (value - 1) == 0:
        return value.bit_length() - 1
    return None


def _to_shifts(op, args):
    if op == "floordiv" and _power(args[1]) is not None:
        return rebuild("shr", (args[0], as_expr(_power(args[1]))))
    if op == "mod" and _power(args[1]) is not None:
        return rebuild("and", (args[0], as_expr(args[1].value - 1)))
    return rebuild(op, args)


def _to_divisions(op, args):
    if op == "shr" and isinstance(getattr(args[1], "value", None), int):
        return rebuild("floordiv", (args[0], as_expr(1 << args[1].value)))
    return rebuild(op, args)


#: name -> kernel transformation that must not change any verdict
METAMORPHIC = {
    "rename": _renamed,
    "reassociate": _node_map(_commuted),
    "div-to-shift": _node_map(_to_shifts),
    "shift-to-div": _node_map(_to_divisions),
    "simplify": lambda kernel: map_exprs(kernel, simplify),
}


def assert_metamorphic(kernel, *, transforms=tuple(METAMORPHIC), solvers=("z3", "cvc5"),
                       verifier: VerdictCache | None = None, **params) -> Report:
    """Verdicts (kind and verdict of each obligation, in order) are the same for `kernel`,
    for each of its `transforms` (METAMORPHIC names) and under each of `solvers`."""
    program = as_program(kernel, **params)
    cache = verifier or _SHARED
    base = cache.verify(program.kernel, solver=solvers[0])
    want = _verdicts(base)
    variants = [(name, METAMORPHIC[name](program.kernel), solvers[0]) for name in transforms]
    variants += [(f"solver={s}", program.kernel, s) for s in solvers[1:]]
    for name, variant, solver in variants:
        got = _verdicts(cache.verify(variant, solver=solver))
        if got != want:
            changed = [(w, g) for w, g in zip(want, got) if w != g] or [(want, got)]
            _fail(f"assert_metamorphic: '{name}' changes verdicts", as_program(variant), None,
                  None, [("first change", f"{changed[0][0]} -> {changed[0][1]}"),
                         ("original", program.name)])
    return base


def _verdicts(report: Report) -> list:
    return [(o.kind, o.verdict) for o in report.obligations]


# ----------------------------------------------------------------------------- reproducer

def _fail(headline: str, program: Program, rules, sizes: dict | None, details: list):
    lines = [headline, f"  program: {program.name}"]
    if sizes is not None:
        lines.append(f"  sizes: {sizes}")
    if rules is not None:
        lines.append(f"  rules: {rules.__module__}.{rules.__qualname__}")
    for label, text in details:
        body = str(text).splitlines() or [""]
        lines.append(f"  {label}: {body[0]}")
        lines.extend(f"    {line}" for line in body[1:])
    path = _write_reproducer(program, sizes, headline)
    lines += ["reproducer (DSL source of the shrunk case):"]
    lines += [f"    {line}" for line in program.source.splitlines()]
    size_args = " ".join(f"--size {k}={v}" for k, v in (sizes or {}).items())
    lines += [f"re-run: python3 {path}", f"        python3 -m argus.cli verify {path} {size_args}"
              .rstrip()]
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    if test:
        lines.append(f"        python3 -m pytest -q '{test}'  (hypothesis replays the case)")
    raise ArgusCheckFailure("\n".join(lines))


def _write_reproducer(program: Program, sizes: dict | None, headline: str) -> Path:
    """Write the reproducer script atomically under $ARGUS_REPRO_DIR (default: the temporary
    directory's argus-repro/) and return its path."""
    check = headline.split(":", 1)[0]
    body = [f'"""Argus reproducer: {headline}"""', "", program.source.rstrip(), "",
            'if __name__ == "__main__":']
    if check == "assert_sound":
        body += ["    from argus.testing import assert_sound", "",
                 f"    assert_sound(KERNEL, sizes={sizes!r})"]
    elif check == "assert_complete":
        body += ["    from argus.absint.verify import verify", "",
                 f"    # seeded defect: {getattr(program, 'defect', '')}; it must be Refuted",
                 "    print(verify(KERNEL))"]
    else:
        body += ["    from argus.testing import assert_metamorphic", "",
                 "    assert_metamorphic(KERNEL)"]
    text = "\n".join(body) + "\n"
    folder = env.repro_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"repro_{hashlib.sha1(text.encode()).hexdigest()[:12]}.py"
    with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)
    return path

"""Finding and running the LLVM tools that assemble, link and decode gfx942 code objects.

Discovery order: `$ROCM_PATH/llvm/bin` (or `/opt/rocm/llvm/bin`), then `clang-19` & co. on PATH,
then unversioned tools when they are LLVM >= 17. `check_environment` backs `argus doctor`.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs

from argus.errors import ArgusError

MIN_LLVM_MAJOR = 17
PREFERRED_LLVM_MAJOR = 19
TOOLS = ("clang", "ld.lld", "llvm-objdump", "llvm-mc", "llvm-readelf")
INSTALL_HINT = (
    "install LLVM 19 with `apt-get install -y clang-19 lld-19 llvm-19` (Debian/Ubuntu), "
    "or install ROCm and set ROCM_PATH (default /opt/rocm)")


class ToolchainError(ArgusError, RuntimeError):
    """No usable LLVM toolchain for gfx942, or one of its tools failed to run."""

    kind = "environment"


@attrs.frozen
class Toolchain:
    """Paths of the LLVM tools Argus drives, their LLVM version and where they were found."""

    clang: Path
    lld: Path
    objdump: Path
    mc: Path
    readelf: Path
    version: tuple[int, int, int]
    source: str

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))

    def run(self, tool: str, args: Sequence[str], *, stdin: bytes | None = None
            ) -> subprocess.CompletedProcess:
        """Run one tool (`clang`, `lld`, `objdump`, `mc`, `readelf`) and capture its output."""
        exe = getattr(self, tool)
        try:
            return subprocess.run([str(exe), *args], input=stdin, capture_output=True)
        except OSError as err:
            raise ToolchainError(f"could not run {exe}: {err}; {INSTALL_HINT}") from err


def _llvm_version(clang: Path) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run([str(clang), "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"clang version (\d+)\.(\d+)\.(\d+)", out)
    if found is None:
        return None
    major, minor, patch = map(int, found.groups())
    return major, minor, patch


def _locate(names: Sequence[str], search_path: str) -> list[Path] | None:
    paths = [shutil.which(name, path=search_path) for name in names]
    return [Path(p) for p in paths if p is not None] if None not in paths else None


def _candidates(env: Mapping[str, str]) -> list[tuple[str, list[str], str]]:
    """(description, tool names, search path) in discovery order."""
    rocm = env.get("ROCM_PATH") or "/opt/rocm"
    path = env.get("PATH", "")
    suffixed = [f"{tool}-{PREFERRED_LLVM_MAJOR}" for tool in TOOLS]
    return [
        (f"ROCm ({rocm}/llvm/bin)", list(TOOLS), str(Path(rocm) / "llvm" / "bin")),
        (f"LLVM {PREFERRED_LLVM_MAJOR} on PATH", suffixed, path),
        ("unversioned LLVM on PATH", list(TOOLS), path),
    ]


def find_toolchain(env: Mapping[str, str] | None = None) -> Toolchain:
    """The first complete LLVM >= 17 toolchain in discovery order; `env` defaults to os.environ.

    Raises ToolchainError listing what was tried and how to install one.
    """
    if env is None:
        return _cached_toolchain(os.environ.get("PATH", ""), os.environ.get("ROCM_PATH"))
    tried = []
    for source, names, search_path in _candidates(env):
        paths = _locate(names, search_path)
        if paths is None:
            missing = [n for n in names if shutil.which(n, path=search_path) is None]
            tried.append(f"{source}: missing {', '.join(missing)}")
            continue
        version = _llvm_version(paths[0])
        if version is None or version[0] < MIN_LLVM_MAJOR:
            shown = ".".join(map(str, version)) if version else "unknown"
            tried.append(f"{source}: LLVM {shown} is older than {MIN_LLVM_MAJOR}")
            continue
        clang, lld, objdump, mc, readelf = paths
        return Toolchain(clang, lld, objdump, mc, readelf, version=version, source=source)
    raise ToolchainError(
        "no LLVM toolchain for gfx942 found (tried: " + "; ".join(tried) + "); " + INSTALL_HINT)


@functools.cache
def _cached_toolchain(path: str, rocm_path: str | None) -> Toolchain:
    env = {"PATH": path} if rocm_path is None else {"PATH": path, "ROCM_PATH": rocm_path}
    return find_toolchain(env)


@attrs.frozen
class Check:
    """One line of `argus doctor`: what was checked, whether it is fine, and the fix if not."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def _check_toolchain() -> Check:
    try:
        tools = find_toolchain()
    except ToolchainError as err:
        return Check("LLVM toolchain", False, str(err), INSTALL_HINT)
    probe = tools.run("mc", ["-triple=amdgcn-amd-amdhsa", "-mcpu=gfx942", "-show-encoding"],
                      stdin=b"v_mfma_f32_32x32x8_bf16 a[0:15], v[0:1], v[2:3], a[0:15]\n")
    if probe.returncode != 0:
        return Check("LLVM toolchain", False,
                     f"{tools.mc} cannot assemble gfx942 MFMA: {probe.stderr.decode()[:300]}",
                     INSTALL_HINT)
    return Check("LLVM toolchain", True, f"LLVM {tools.version_text} from {tools.source} "
                 f"({tools.clang.parent})")


def _check_package(module: str, pip_name: str, required: bool = True) -> Check:
    try:
        importlib.import_module(module)
        version = importlib.metadata.version(pip_name)
    except (ImportError, importlib.metadata.PackageNotFoundError) as err:
        return Check(f"python package {pip_name}", False, str(err),
                     f"pip install {pip_name}", required)
    return Check(f"python package {pip_name}", True, version, required=required)


def _check_solver(name: str, required: bool) -> Check:
    """A solver counts as available only if it really proves and refutes a trivial query."""
    label = f"SMT solver {name} (via pysmt)"
    fix = "pip install z3-solver" if name == "z3" else "pip install cvc5"
    try:
        from pysmt.shortcuts import GT, LT, And, Int, Solver, Symbol
        from pysmt.typing import INT

        x = Symbol("argus_doctor_x", INT)
        with Solver(name=name) as solver:
            solver.add_assertion(And(GT(x, Int(2)), LT(x, Int(4))))
            sat = solver.solve()
            model = solver.get_value(x).constant_value() if sat else None
            solver.add_assertion(GT(x, Int(3)))
            unsat = not solver.solve()
    except Exception as err:  # any failure inside a back-end means it is unusable here
        return Check(label, False, f"{type(err).__name__}: {err}", fix, required)
    if not (sat and model == 3 and unsat):
        return Check(label, False, f"wrong answer on a trivial query (model {model})", fix,
                     required)
    return Check(label, True, "solves sat and unsat queries", required=required)


def check_environment() -> list[Check]:
    """Everything `argus doctor` reports, in display order."""
    checks = [_check_toolchain()]
    for module, pip_name in (("z3", "z3-solver"), ("pysmt", "pysmt"), ("attrs", "attrs"),
                             ("numpy", "numpy"), ("click", "click"), ("ml_dtypes", "ml_dtypes"),
                             ("elftools", "pyelftools"), ("rich", "rich")):
        checks.append(_check_package(module, pip_name))
    checks.append(_check_solver("z3", required=True))
    checks.append(_check_solver("cvc5", required=False))
    return checks


def doctor(echo: Callable[[str], None]) -> bool:
    """Print every check; True when everything required is present."""
    checks = check_environment()
    for check in checks:
        mark = "ok" if check.ok else ("MISSING" if check.required else "optional, missing")
        echo(f"[{mark}] {check.name}: {check.detail}")
        if not check.ok:
            echo(f"    fix: {check.fix}")
    return all(check.ok for check in checks if check.required)

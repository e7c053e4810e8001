"""The import contract of shared/docs/house-plan.md ("Dependency rules"), checked on the source.

Every module under argus/ belongs to the component named by the longest entry of LAYERS that is
a prefix of it (so a new module, or a package that does not exist yet such as argus.asm.lower
or argus.search, is covered the day it appears). A module may import its own component and any
component of a lower layer; components of one layer are independent. Imports anywhere in a
file count (function-level ones and `if TYPE_CHECKING:` ones too: an annotation naming a
higher layer's type is a dependency all the same). FORBIDDEN adds the plan's extra rules.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import argus

ROOT = Path(argus.__file__).parent

#: Top layer first; each layer lists independent components.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("argus.cli",),
    # the road's users: the search, the demo, argus.testing, KernelBench and `argus time`
    ("argus.search", "argus.demo", "argus.testing", "argus.kernelbench", "argus.timing"),
    # the road, and a user's kernel run against the interpreter (argus run FILE.py:KERNEL)
    ("argus.pipeline", "argus.user"),
    # AMD's kernels (harness, catalogue, timing families, calibration) beside our own
    ("argus.absint", "argus.asm.lower", "argus.kernels", "argus.vendor"),
    ("argus.lang", "argus.smt", "argus.asm"),
    ("argus.isa_cdna3.emu", "argus.isa_cdna3.perf"),
    ("argus.ir",),
    ("argus.isa_cdna3",),
    ("argus.env", "argus.check"),
    ("argus.errors",),
)

#: (importer prefix, imported prefix): never, whatever the layers say.
FORBIDDEN = (
    ("argus.search", "argus.asm"),
    ("argus.search", "argus.isa_cdna3.emu"),
    ("argus.search", "argus.absint"),
    ("argus.asm.lower", "argus.absint"),
    ("argus.isa_cdna3", "argus.asm"),
    ("argus.isa_cdna3", "argus.lang"),
)

LAYER_OF = {component: depth for depth, layer in enumerate(LAYERS) for component in layer}


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def component(module: str) -> str | None:
    """The LAYERS entry a module belongs to (None: the `argus` facade package itself)."""
    matches = [c for c in LAYER_OF if _within(module, c)]
    return max(matches, key=len) if matches else None


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, text: str | None = None) -> list[tuple[int, str]]:
    """(line, imported argus module) of every import that runs, relative ones resolved."""
    return _imports(_module_name(path), path.name == "__init__.py",
                    path.read_text() if text is None else text)


@functools.cache
def _imports(module: str, is_package: bool, text: str) -> list[tuple[int, str]]:
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(text)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from argus.x import y` may name a submodule y: count it when it is one
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((node.lineno, sub if _is_module(sub) else base))
    return [(line, name) for line, name in found if _within(name, "argus")]


@functools.cache
def _is_module(name: str) -> bool:
    relative = ROOT.parent / Path(*name.split("."))
    return relative.with_suffix(".py").is_file() or relative.is_dir()


def violations(edited: dict[Path, str] | None = None) -> list[str]:
    """Every import that breaks the contract; `edited` replaces some files' text."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        importer = _module_name(path)
        source = component(importer)
        for line, imported in imports(path, (edited or {}).get(path)):
            target = component(imported)
            where = f"{path.relative_to(ROOT.parent)}:{line} imports {imported}"
            for low, high in FORBIDDEN:
                if _within(importer, low) and _within(imported, high):
                    found.append(f"{where}: {low} must not import {high}")
            if source is None or target is None or source == target:
                continue
            if LAYER_OF[target] < LAYER_OF[source]:
                found.append(f"{where}: {source} (layer {LAYER_OF[source] + 1}) must not import "
                             f"the higher {target} (layer {LAYER_OF[target] + 1})")
            elif LAYER_OF[target] == LAYER_OF[source]:
                found.append(f"{where}: {source} and {target} are independent (same layer)")
    return found


def test_every_module_is_in_a_layer():
    homeless = [_module_name(p) for p in ROOT.rglob("*.py")
                if component(_module_name(p)) is None and _module_name(p) != "argus"]
    assert not homeless, f"modules outside every layer of LAYERS: {homeless}"


def test_imports_follow_the_layers():
    found = violations()
    assert not found, "import contract broken:\n" + "\n".join(found)


@pytest.mark.parametrize("importer, imported, line", [
    ("argus/isa_cdna3/isa.py", "argus.asm.codeobject", "from argus.asm.codeobject import X"),
    ("argus/ir/types.py", "argus.isa_cdna3.emu", "from argus.isa_cdna3.emu import run"),
    ("argus/absint/verify.py", "argus.kernels", "    from argus.kernels import library"),
])
def test_the_contract_catches_an_upward_import(importer, imported, line):
    """A planted import of each kind is reported (the check can fail)."""
    path = ROOT.parent / importer
    planted = path.read_text() + f"\n\ndef _planted():\n    {line.strip()}\n"
    assert any(imported in v and importer in v for v in violations({path: planted}))


def test_the_ir_loads_no_emulator_and_no_elftools():
    import subprocess
    import sys

    probe = ("import sys, argus.ir, argus.ir.types, argus.ir.ops, argus.ir.text; "
             "print(sorted(m for m in sys.modules if m.startswith(('argus.isa_cdna3.emu', "
             "'argus.asm', 'elftools', 'argus.absint', 'argus.lang'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=ROOT.parent)
    assert out.stdout.strip() == "[]", out.stdout

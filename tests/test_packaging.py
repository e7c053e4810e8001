"""Argus as a package other projects install: every package declares its public names in
`__all__` and documents them, the wheel carries `py.typed`, the performance model's modules and
its data, and the type checker's configuration covers the public API."""

from __future__ import annotations

import configparser
import importlib
import inspect
import pkgutil
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import argus

ROOT = Path(__file__).resolve().parents[1]


def packages() -> list[str]:
    return ["argus"] + sorted(info.name for info in pkgutil.walk_packages(argus.__path__, "argus.")
                              if info.ispkg)


def own_doc(obj) -> str | None:
    # a class's own docstring, not one inherited from a base class
    return vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__


@pytest.mark.parametrize("name", packages())
def test_every_package_declares_and_documents_its_public_names(name):
    package = importlib.import_module(name)
    assert package.__doc__, f"{name} has no docstring"
    assert isinstance(package.__all__, list | tuple), f"{name} has no __all__"
    assert len(set(package.__all__)) == len(package.__all__), f"{name}.__all__ repeats a name"
    for public in package.__all__:
        value = (getattr(package, public) if hasattr(package, public)
                 else importlib.import_module(f"{name}.{public}"))  # a module-only package
        if inspect.isclass(value) or inspect.isfunction(value) or inspect.ismodule(value):
            assert own_doc(value), f"{name}.{public} is undocumented"
    star: dict = {}
    exec(f"from {name} import *", star)
    assert set(package.__all__) <= set(star)


def test_the_facade_exports_the_road():
    assert set(argus.__all__) == {"ArgusError", "compile", "interpret", "time", "verify"}
    for public in argus.__all__:
        assert inspect.signature(getattr(argus, public)).return_annotation is not \
            inspect.Signature.empty or inspect.isclass(getattr(argus, public))


def test_the_wheel_carries_types_modules_and_data(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "argus", source / "argus",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                           "--no-build-isolation", str(source), "-w", str(tmp_path / "dist")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "dist").glob("argus-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    modules = {str(path.relative_to(ROOT)) for path in (ROOT / "argus").rglob("*.py")}
    assert modules <= shipped, sorted(modules - shipped)
    assert {"argus/py.typed", "argus/isa_cdna3/perf/calibrated.json",
            "argus/examples/mfma_gemm_32x32.s"} <= shipped
    assert not [name for name in shipped if "__pycache__" in name]
    entry_points = next(n for n in shipped if n.endswith(".dist-info/entry_points.txt"))
    assert "argus.testing.plugin = argus.testing.plugin" in \
        zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_type_checker_covers_every_package_facade():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    checked = {line.strip().rstrip(",") for line in config["mypy"]["files"].splitlines()
               if line.strip()}
    facades = {f"{name.replace('.', '/')}/__init__.py" if name != "argus" else "argus/__init__.py"
               for name in packages()}
    assert facades <= checked, sorted(facades - checked)
    assert all((ROOT / path).is_file() for path in checked)
    assert "mypy" in (ROOT / ".ci" / "run").read_text()

"""The road from a kernel to its results, for the layers above (CLI, the `argus` facade, search):
find a kernel by name or file (`resolve_kernel`), run a library kernel in the reference
interpreter against numpy (`run_interp`). Stages that need both the DSL kernels and the analyses
meet here, so `absint` and `kernels` stay independent of each other.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import attrs
import numpy as np

from argus.absint.concrete import run
from argus.absint.verify import VerifyError
from argus.ir import ops as O
from argus.kernels import library


def resolve_kernel(target: str):
    """A library kernel name (`gemm`), or `path/to/file.py[:name]` naming an `@kernel`
    function or a module-level KERNEL in that file."""
    kernels = library()
    if target in kernels:
        return kernels[target].kernel
    path, _, name = target.partition(":")
    if not path.endswith(".py") or not Path(path).is_file():
        raise VerifyError(f"{target!r} is neither a library kernel ({', '.join(sorted(kernels))}) "
                          "nor an existing .py file")
    folder = str(Path(path).resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = {k: v for k, v in vars(module).items()
             if isinstance(v, O.Kernel) or hasattr(v, "trace")}
    if name:
        if name not in found:
            raise VerifyError(f"{path} has no kernel {name!r}; it has {sorted(found)}")
        return found[name]
    if "KERNEL" in found:
        return found["KERNEL"]
    if len(found) != 1:
        raise VerifyError(f"{path} defines kernels {sorted(found)}; pick one with {path}:NAME")
    return next(iter(found.values()))


@attrs.frozen
class InterpRun:
    """One library kernel run in the reference interpreter, compared with numpy."""

    name: str
    sizes: dict[str, int]
    params: dict
    result: object
    max_error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.result.ok and self.max_error <= self.tolerance


def run_interp(name: str, sizes: dict[str, int] | None = None, params: dict | None = None,
               seed: int = 0, max_violations: int = 20) -> InterpRun:
    """Run library kernel `name` on random data in the reference interpreter."""
    kernels = library()
    if name not in kernels:
        raise KeyError(f"no library kernel {name!r}; choose one of {sorted(kernels)}")
    entry = kernels[name]
    params = dict(params or {})
    sizes = {**entry.sizes, **(sizes or {})}
    if name == "attention_fwd":
        sizes["D"] = params.setdefault("head_dim", sizes.get("D", 64))
    inputs = entry.inputs(sizes, params, seed)
    result = run(entry.kernel.trace(**params), inputs, max_violations=max_violations)
    expected = entry.reference(inputs, params)
    error = float(np.abs(result.outputs[entry.output].astype(np.float64) - expected).max())
    scale = max(1.0, float(np.abs(expected).max()))
    return InterpRun(name, sizes, params, result, error / scale, entry.tolerance)

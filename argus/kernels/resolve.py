"""Finding a kernel by name or file for the CLI and the `argus` facade: `resolve_kernel("gemm")`
is a library kernel, `resolve_kernel("path/to/file.py[:name]")` an `@kernel` function (or a
module-level KERNEL) of that file; `as_kernel` refuses anything that is not a kernel.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

from argus.errors import ArgusError
from argus.ir import ops as O
from argus.kernels import library
from argus.lang.kernel import KernelDef


class KernelLookupError(ArgusError, ValueError):
    """No kernel goes by that name, or the file does not define one."""


def as_kernel(kernel, call: str):
    """`kernel` as a DSL kernel or traced IR: a library name or file is resolved, anything
    else is refused naming the argument."""
    if isinstance(kernel, str):
        kernel = resolve_kernel(kernel)
    if isinstance(kernel, O.Kernel) or (callable(getattr(kernel, "trace", None))
                                        and isinstance(getattr(kernel, "params", None), dict)):
        return kernel  # an @kernel function (numpy arrays have a .trace too)
    raise KernelLookupError(f"argus.{call} takes an @kernel function, a traced kernel or a "
                            f"library kernel name, not {kernel!r}")


def resolve_kernel(target: str):
    """A library kernel name (`gemm`), or `path/to/file.py[:name]` naming an `@kernel`
    function or a module-level KERNEL in that file."""
    kernels = library()
    if target in kernels:
        return kernels[target].kernel
    path, _, name = target.partition(":")
    if not path.endswith(".py") or not Path(path).is_file():
        raise KernelLookupError(f"{target!r} is neither a library kernel "
                                f"({', '.join(sorted(kernels))}) nor an existing .py file")
    return _pick(_kernels_of(import_file(path), name), path, name)


def import_file(path: str) -> ModuleType:
    """The module of file `path`, imported with its folder on sys.path; a failure names the
    file's line."""
    folder = str(Path(path).resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as err:
        raise KernelLookupError(f"{err.msg}", loc=f"{err.filename}:{err.lineno}:{err.offset or 1}",
                                fix=f"fix the syntax of {path}") from None
    except Exception as err:  # the user's module failed while importing: say where
        line = next((frame.lineno for frame in reversed(traceback.extract_tb(err.__traceback__))
                     if Path(frame.filename).resolve() == Path(path).resolve()), None)
        raise KernelLookupError(f"importing {path} raised {type(err).__name__}: {err}",
                                loc=f"{path}:{line}" if line else path,
                                fix="make the file importable on its own (python3 FILE runs it)"
                                ) from None
    return module


def _kernels_of(module: ModuleType, name: str) -> dict:
    """The module's kernels by name; unless one is named, kernels it imported (`from mylib
    import helper`) count only when it defines none of its own and sets no KERNEL."""
    found = {k: v for k, v in vars(module).items() if isinstance(v, O.Kernel | KernelDef)}
    own = {k: v for k, v in found.items()
           if not isinstance(v, KernelDef) or v.fn.__module__ == module.__name__}
    return found if name or "KERNEL" in found else (own or found)


def _pick(found: dict, path: str, name: str):
    if name:
        if name not in found:
            raise KernelLookupError(f"{path} has no kernel {name!r}; it has {sorted(found)}")
        return found[name]
    if "KERNEL" in found:
        return found["KERNEL"]
    if not found:
        raise KernelLookupError(f"{path} defines no kernel", loc=path,
                                fix="decorate a function with @T.kernel (import argus.lang as "
                                    "T), or set KERNEL = a traced kernel")
    distinct = {id(v): v for v in found.values()}  # one kernel under two names is one kernel
    if len(distinct) != 1:
        raise KernelLookupError(f"{path} defines kernels {sorted(found)}; pick one with "
                                f"{path}:NAME")
    return next(iter(distinct.values()))

"""A user's kernel (`argus run FILE.py:KERNEL`) run on random inputs: in the reference
interpreter, and compiled in the strict emulator, every tensor compared between the two and
with a numpy reference when one is given (`run_user`, `UserRun`, `resolve_function`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path

import attrs
import numpy as np

from argus import env
from argus.absint.concrete import run
from argus.absint.verify import VerifyError, verify
from argus.asm.lower.compiled import compile
from argus.ir import ops as O
from argus.ir.expr import evaluate
from argus.ir.sizes import checked_sizes
from argus.isa_cdna3.abi import LaunchError
from argus.kernels.resolve import resolve_kernel

#: Default agreement bound per element type (relative to the output's largest magnitude):
#: reduction orders differ between the interpreter and the machine code.
RUN_TOLERANCE = {"f32": 1e-5, "i32": 0.0, "bf16": 1e-2, "f16": 1e-3, "fp8": 1e-1, "bf8": 1e-1,
                 "i8": 0.0}


@attrs.frozen
class UserRun:
    """A user's kernel run on random inputs: the mode, sizes, per-tensor errors (emulated vs
    interpreted, and vs the reference where one is given), and the interpreter's findings."""

    kernel: str
    mode: str                          # "emulate" or "interp"
    sizes: dict
    errors: dict                       # tensor -> {"interpreter": e, "reference": e}
    tolerances: dict                   # tensor -> bound
    violations: tuple
    compiled: object = None

    @property
    def ok(self) -> bool:
        return not self.violations and all(
            error <= self.tolerances[name]
            for name, per in self.errors.items() for error in per.values())


def _scaled_error(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        raise LaunchError(f"the reference gives shape {want.shape}, the kernel {got.shape}")
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    if same.all():
        return 0.0
    scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isfinite(want), want, 0)))))
    diff = np.where(same, 0.0, np.abs(got - want))
    return float(np.nan_to_num(diff, nan=np.inf).max()) / scale


def random_inputs(ir: O.Kernel, sizes: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal data for float tensors (rounded to their type), integers in [0, 8) for
    integer ones, in the shapes the sizes give."""
    from argus.isa_cdna3.numerics import NUMPY_DTYPES

    rng = np.random.default_rng(seed)
    arrays = {}
    for tensor in ir.tensors:
        shape = tuple(int(evaluate(e, sizes)) for e in tensor.type.shape)
        dtype = np.dtype(NUMPY_DTYPES[tensor.type.dtype])
        if tensor.type.dtype in ("i32", "i8"):
            arrays[tensor.name] = rng.integers(0, 8, shape).astype(dtype)
        else:
            arrays[tensor.name] = rng.standard_normal(shape).astype(np.float32).astype(dtype)
    return arrays


def run_user(kernel, sizes: Mapping[str, int], *, mode: str = "emulate", params=None,
             seed: int = 0, reference=None, tolerance: float | None = None) -> UserRun:
    """Run a user's kernel (`path/file.py:name`, a DSL kernel or traced IR) on random inputs
    at `sizes` (scalar arguments included): always in the reference interpreter, and with
    `mode="emulate"` also compiled and run in the strict emulator, every tensor compared
    between the two. `reference(**inputs)` (a numpy function returning one array, for the
    last tensor argument, or a dict of arrays by tensor name) is compared with both."""
    from argus.isa_cdna3.numerics import NUMPY_DTYPES

    if mode not in ("emulate", "interp"):
        raise LaunchError(f"mode must be 'emulate' or 'interp', not {mode!r}")
    traced = resolve_kernel(kernel) if isinstance(kernel, str) else kernel
    ir = traced if isinstance(traced, O.Kernel) else traced.trace(**(params or {}))
    pins, scalars, shape_sizes = _pins(ir, sizes)
    inputs = random_inputs(ir, {**shape_sizes, **scalars}, seed)
    interpreted = run(ir, {n: a.astype(np.float32) for n, a in inputs.items()}, scalars)
    outputs = {"interpreter": {n: np.asarray(a, NUMPY_DTYPES[t.type.dtype])
                               for n, a in interpreted.outputs.items()
                               for t in ir.tensors if t.name == n}}
    compiled = None
    if mode == "emulate":
        prove = env.compile_verifies()      # as argus.compile: proved before it is lowered
        if prove:
            report = verify(ir)
            if not report.proved_for_all_sizes:
                raise VerifyError(f"{ir.name} is not proved for every size; the backend lowers "
                                  f"verified kernels only:\n{report}",
                                  fix="fix the kernel (argus verify shows the counterexample), "
                                      "or set ARGUS_COMPILE_VERIFY=0 to run it unproved")
        compiled = attrs.evolve(compile(ir), verified=prove)
        arrays = {n: a.copy() for n, a in inputs.items()}
        compiled.run(**arrays, **scalars, check="strict")
        outputs["emulator"] = arrays
    expected = None
    if reference is not None:
        got = reference(**{n: a.copy() for n, a in inputs.items()})
        expected = got if isinstance(got, dict) else {ir.tensors[-1].name: got}
    errors, tolerances = _errors(ir, mode, outputs, expected, tolerance)
    return UserRun(ir.name, mode, pins, errors, tolerances, tuple(interpreted.violations),
                   compiled)


def _pins(ir: O.Kernel, sizes: Mapping[str, int]) -> tuple[dict, dict, dict]:
    """Every size and scalar argument, checked (`ir.sizes.checked_sizes`), and the two apart."""
    missing = [v.name for v in ir.sizes + ir.scalars if v.name not in sizes]
    if missing:
        raise LaunchError(f"{ir.name}: give every size and scalar argument: missing "
                          f"{', '.join(f'--size {m}=...' for m in missing)}")
    pins = checked_sizes(ir, dict(sizes))
    scalar_names = {v.name for v in ir.scalars}
    return (pins, {k: v for k, v in pins.items() if k in scalar_names},
            {k: v for k, v in pins.items() if k not in scalar_names})


def _errors(ir: O.Kernel, mode: str, outputs: dict, expected: dict | None,
            tolerance: float | None) -> tuple[dict, dict]:
    """Per tensor: the emulator's error against the interpreter, the final result's against
    the reference; and the tolerance each is held to."""
    errors, tolerances = {}, {}
    for tensor in ir.tensors:
        name = tensor.name
        per = {}
        if mode == "emulate":
            per["interpreter"] = _scaled_error(outputs["emulator"][name],
                                               outputs["interpreter"][name])
        if expected is not None and name in expected:
            final = outputs["emulator" if mode == "emulate" else "interpreter"][name]
            per["reference"] = _scaled_error(final, expected[name])
        if per:
            errors[name] = per
            tolerances[name] = (tolerance if tolerance is not None
                                else RUN_TOLERANCE.get(tensor.type.dtype, 1e-5))
    return errors, tolerances


def resolve_function(target: str):
    """A function `path/to/file.py:name` (a numpy reference for `argus run --reference`)."""
    path, _, name = target.partition(":")
    if not path.endswith(".py") or not Path(path).is_file() or not name:
        raise VerifyError(f"--reference {target!r}: give FILE.py:FUNCTION of an existing file")
    spec = importlib.util.spec_from_file_location(f"{Path(path).stem}_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise VerifyError(f"{path} has no function {name!r}")
    return fn

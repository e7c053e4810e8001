"""The road from a kernel to its results, for the layers above (CLI, the `argus` facade, search):
find a kernel by name or file (`resolve_kernel`), run a library kernel in the reference
interpreter against numpy (`run_interp`), and compile a kernel to a gfx942 code object
(`compile` -> `CompiledKernel`, whose `run` launches it on the emulator or through HIP).
Stages that need both the DSL kernels and the analyses meet here, so `absint` and `kernels`
stay independent of each other. Compilations are cached by the content of the traced IR.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import sys
import traceback
from pathlib import Path

import attrs
import numpy as np

from argus.absint.concrete import run
from argus.absint.verify import VerifyError
from argus.ir import ops as O
from argus.ir.bind import sizes_of
from argus.ir.expr import evaluate
from argus.ir.sizes import checked_sizes
from argus.isa_cdna3.abi import LaunchError
from argus.kernels import library
from argus.lang.kernel import KernelDef


def _kernel(kernel, call: str):
    """`kernel` as a DSL kernel or traced IR: a library name or file is resolved, anything
    else is refused naming the argument."""
    if isinstance(kernel, str):
        kernel = resolve_kernel(kernel)
    if isinstance(kernel, O.Kernel) or (callable(getattr(kernel, "trace", None))
                                        and isinstance(getattr(kernel, "params", None), dict)):
        return kernel  # an @kernel function (numpy arrays have a .trace too)
    raise VerifyError(f"argus.{call} takes an @kernel function, a traced kernel or a library "
                      f"kernel name, not {kernel!r}")


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
    try:
        spec.loader.exec_module(module)
    except SyntaxError as err:
        raise VerifyError(f"{err.msg}", loc=f"{err.filename}:{err.lineno}:{err.offset or 1}",
                          fix=f"fix the syntax of {path}") from None
    except Exception as err:  # the user's module failed while importing: say where
        line = next((frame.lineno for frame in reversed(traceback.extract_tb(err.__traceback__))
                     if Path(frame.filename).resolve() == Path(path).resolve()), None)
        raise VerifyError(f"importing {path} raised {type(err).__name__}: {err}",
                          loc=f"{path}:{line}" if line else path,
                          fix="make the file importable on its own (python3 FILE runs it)"
                          ) from None
    found = {k: v for k, v in vars(module).items() if isinstance(v, O.Kernel | KernelDef)}
    if not name and "KERNEL" not in found:
        # kernels the file imported (`from mylib import helper`) are candidates only when the
        # file defines none of its own
        own = {k: v for k, v in found.items()
               if not isinstance(v, KernelDef) or v.fn.__module__ == module.__name__}
        found = own or found
    if name:
        if name not in found:
            raise VerifyError(f"{path} has no kernel {name!r}; it has {sorted(found)}")
        return found[name]
    if "KERNEL" in found:
        return found["KERNEL"]
    if not found:
        raise VerifyError(f"{path} defines no kernel", loc=path,
                          fix="decorate a function with @T.kernel (import argus.lang as T), or "
                              "set KERNEL = a traced kernel")
    distinct = {id(v): v for v in found.values()}  # one kernel under two names is one kernel
    if len(distinct) != 1:
        raise VerifyError(f"{path} defines kernels {sorted(found)}; pick one with {path}:NAME")
    return next(iter(distinct.values()))


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


def _library_case(name: str, sizes: dict | None, params: dict | None):
    """Library kernel `name`'s entry, its parameters, and `sizes` checked against its traced
    kernel (declared ranges and assumptions) with the entry's defaults filled in."""
    kernels = library()
    if name not in kernels:
        raise KeyError(f"no library kernel {name!r}; choose one of {sorted(kernels)}")
    entry = kernels[name]
    params = dict(params or {})
    return entry, params, checked_sizes(entry.kernel.trace(**params), sizes or {}, entry.sizes)


def run_interp(name: str, sizes: dict[str, int] | None = None, params: dict | None = None,
               seed: int = 0, max_violations: int = 20) -> InterpRun:
    """Run library kernel `name` on random data in the reference interpreter."""
    entry, params, sizes = _library_case(name, sizes, params)
    if name in ("attention_fwd", "attention_fwd_kv"):
        sizes["D"] = params.setdefault("head_dim", sizes.get("D", 64))
    inputs = entry.inputs(sizes, params, seed)
    result = run(entry.kernel.trace(**params), inputs, max_violations=max_violations)
    expected = entry.reference(inputs, params)
    error = float(np.abs(result.outputs[entry.output].astype(np.float64) - expected).max())
    scale = max(1.0, float(np.abs(expected).max()))
    return InterpRun(name, sizes, params, result, error / scale, entry.tolerance)


DEVICES = ("emulator", "hip")


@attrs.frozen
class CompiledKernel:
    """A compiled kernel: one code object for every size its assumptions admit."""

    name: str
    params: dict
    ir: O.Kernel = attrs.field(repr=False)
    lowered: object = attrs.field(repr=False)          # argus.asm.lower.Lowered
    code: object = attrs.field(repr=False)             # argus.asm.CodeObject
    seconds: float = 0.0                               # lowering + assembling
    #: whether it was proved for every size before lowering (`compile(verify=False)` skips)
    verified: bool = False

    @property
    def text(self) -> str:
        return self.lowered.text

    @property
    def kernargs(self) -> tuple:
        """(name, kind "ptr"|"i32", offset, size) of each kernel argument."""
        return tuple((k.name, k.kind, k.offset, k.size) for k in self.lowered.kernargs)

    @property
    def block(self) -> int:
        return self.lowered.waves * 64

    def grid(self, **sizes) -> tuple[int, ...]:
        """Workgroups per axis for these sizes."""
        missing = [v.name for v in self.ir.sizes if v.name not in sizes]
        if missing:
            raise LaunchError(f"{self.name}: the grid needs the sizes {missing}")
        for var in self.ir.sizes + self.ir.scalars:
            value = sizes.get(var.name, var.lo)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or not var.lo <= value < var.hi:
                raise LaunchError(f"{self.name}: size {var.name}={value!r} is not a whole number "
                                  f"in its range [{var.lo}, {var.hi})")
        return tuple(int(evaluate(g, sizes)) for g in self.lowered.grid)

    @property
    def resources(self) -> dict:
        lo = self.lowered
        peak = lo.peak
        return {"sgprs": lo.sgprs, "vgprs": lo.vgprs, "agprs": lo.agprs, "lds_bytes": lo.lds_bytes,
                "waves_per_workgroup": lo.waves, "waves_per_simd": lo.occupancy,
                "occupancy_limited_by": lo.occupancy_limit,
                "vgpr_peak": None if peak is None else {
                    "live": peak.live, "at": str(peak.loc), "instruction": peak.instruction,
                    "held_by": [list(item) for item in peak.by_line]}}

    def run(self, *arrays, device: str = "emulator", check: str = "strict",
            memory: str = "strict", **named):
        """Launch on `device` with arrays by position or name and scalar arguments by name;
        outputs are written in place. Returns the emulator's `Emulation` (trace, timing) or the
        HIP launch record."""
        if not isinstance(device, str) or device not in DEVICES:
            raise LaunchError(f"device must be one of {DEVICES}, got {device!r}")
        from argus.asm.launch import bind

        bound = bind(self.ir, arrays, named)
        grid = self.grid(**bound.sizes, **bound.scalars)
        if math.prod(grid) == 0:
            raise LaunchError(f"{self.name}: the sizes {bound.sizes} give an empty grid {grid}")
        problem = self.lowered.check_spans(bound.sizes, bound.scalars)
        if problem:
            raise LaunchError(f"{self.name}: {problem}")
        args = bound.arguments
        if device == "hip":
            from argus.asm.hip import launch

            return launch(self.code, self.name, grid=grid, block=self.block, args=args)
        from argus.asm.launch import emulate

        return emulate(self.code, self.name, grid=grid, block=self.block, args=args, check=check,
                       memory=memory)


_CACHE: dict[str, CompiledKernel] = {}


def compile(kernel, *, policy: str = "interleave", verify: bool | None = None, **params
            ) -> CompiledKernel:
    """Compile a DSL kernel (or an already traced IR kernel) with tile parameters `params`.

    The kernel is proved first (a refuted or unknown obligation stops the compilation with
    argus.absint.verify.VerifyError); `verify=False` skips the proof, and the result says so
    (`CompiledKernel.verified`). Without `verify=`, ARGUS_COMPILE_VERIFY decides (on unless 0).
    Tile parameters are compile-time; sizes are kernel arguments.
    """
    import time

    from argus import env
    from argus.asm import assemble
    from argus.asm.lower import RegisterBudgetError, lower

    if verify is None:
        verify = env.compile_verifies()
    ir = kernel if isinstance(kernel, O.Kernel) else _kernel(kernel, "compile").trace(**params)
    key = hashlib.sha256(f"{policy}\n{ir}".encode()).hexdigest()
    if key in _CACHE and (_CACHE[key].verified or not verify):
        return _CACHE[key]
    if verify:
        _prove(ir)
    if key in _CACHE:
        _CACHE[key] = attrs.evolve(_CACHE[key], verified=True)
        return _CACHE[key]
    start = time.perf_counter()
    try:
        lowered = lower(ir, policy)
    except RegisterBudgetError as err:
        shown = ", ".join(f"{k}={v}" for k, v in params.items()) or "default parameters"
        raise RegisterBudgetError(f"{ir.name} ({shown}; policy {policy}) does not fit: "
                                  f"{err.message}", err.loc, err.fix) from None
    code = assemble(lowered.text)
    compiled = CompiledKernel(ir.name, dict(params), ir, lowered, code,
                              time.perf_counter() - start, verified=bool(verify))
    _CACHE[key] = compiled
    return compiled


def _prove(ir: O.Kernel) -> None:
    from argus.absint.verify import verify

    report = verify(ir)
    if not report.proved_for_all_sizes:
        raise VerifyError(f"{ir.name} is not proved for every size; the backend lowers "
                          f"verified kernels only:\n{report}")


@attrs.frozen
class EmulatedRun:
    """One library kernel compiled, run in the strict emulator and compared with numpy."""

    name: str
    sizes: dict[str, int]
    params: dict
    compiled: CompiledKernel
    emulation: object
    max_error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.max_error <= self.tolerance


def run_emulated(name: str, sizes: dict[str, int] | None = None, params: dict | None = None,
                 seed: int = 0, policy: str = "interleave") -> EmulatedRun:
    """Compile library kernel `name`, run it on random data in the strict emulator (no hazard,
    no missing wait, strict memory) and compare with numpy."""
    entry, params, sizes = _library_case(name, sizes, params)
    compiled = compile(entry.kernel, policy=policy, **params)
    inputs = entry.inputs(sizes, params, seed)
    named = {t.name: inputs[t.name] for t in compiled.ir.tensors}
    emulation = compiled.run(**named, check="strict")
    expected = entry.reference(inputs, params)
    error = float(np.abs(named[entry.output].astype(np.float64) - expected).max())
    scale = max(1.0, float(np.abs(expected).max()))
    return EmulatedRun(name, sizes_of(compiled.ir, named), params, compiled, emulation,
                       error / scale, entry.tolerance)


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


def run_user(kernel, sizes: dict[str, int], *, mode: str = "emulate", params=None,
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
    scalar_names = {v.name for v in ir.scalars}
    missing = [v.name for v in ir.sizes + ir.scalars if v.name not in sizes]
    if missing:
        raise LaunchError(f"{ir.name}: give every size and scalar argument: missing "
                          f"{', '.join(f'--size {m}=...' for m in missing)}")
    pins = checked_sizes(ir, dict(sizes))
    scalars = {k: v for k, v in pins.items() if k in scalar_names}
    shape_sizes = {k: v for k, v in pins.items() if k not in scalar_names}
    inputs = random_inputs(ir, {**shape_sizes, **scalars}, seed)
    interpreted = run(ir, {n: a.astype(np.float32) for n, a in inputs.items()}, scalars)
    outputs = {"interpreter": {n: np.asarray(a, NUMPY_DTYPES[t.type.dtype])
                               for n, a in interpreted.outputs.items()
                               for t in ir.tensors if t.name == n}}
    compiled = None
    if mode == "emulate":
        compiled = compile(ir)
        arrays = {n: a.copy() for n, a in inputs.items()}
        compiled.run(**arrays, **scalars, check="strict")
        outputs["emulator"] = arrays
    expected = None
    if reference is not None:
        got = reference(**{n: a.copy() for n, a in inputs.items()})
        expected = got if isinstance(got, dict) else {ir.tensors[-1].name: got}
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
    return UserRun(ir.name, mode, pins, errors, tolerances, tuple(interpreted.violations),
                   compiled)


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

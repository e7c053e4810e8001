"""The kernel library, written in the Argus tile DSL, with what it takes to run each one:
default sizes, random inputs, the numpy reference and its bf16 tolerance."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import ml_dtypes
import numpy as np

from argus.lang.trace import KernelDef


@attrs.frozen
class LibraryKernel:
    """A library kernel plus the data needed to check it against numpy."""

    kernel: KernelDef
    output: str
    sizes: dict[str, int]
    reference: Callable[[dict, dict], np.ndarray]
    tolerance: float

    def inputs(self, sizes: dict[str, int], params: dict, seed: int = 0) -> dict[str, np.ndarray]:
        """Random bf16 inputs (standard normal) and a zeroed output for these sizes."""
        ir = self.kernel.trace(**params)
        rng = np.random.default_rng(seed)
        arrays = {}
        for tensor in ir.tensors:
            shape = tuple(_extent(e, sizes, tensor.name) for e in tensor.type.shape)
            dtype = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}.get(tensor.type.dtype,
                                                                        np.float32)
            data = (np.zeros(shape) if tensor.name == self.output
                    else rng.standard_normal(shape))
            arrays[tensor.name] = data.astype(dtype)
        return arrays


def _extent(e, sizes, tensor):
    from argus.ir.expr import evaluate

    try:
        return int(evaluate(e, sizes))
    except KeyError:
        raise ValueError(f"size of {tensor} needs {e}; give it with --size NAME=VALUE "
                         f"(known: {sorted(sizes)})") from None


def _gemm_reference(inputs, params):
    from argus.kernels.gemm import reference

    return reference(inputs["A"], inputs["B"])


def _attention_reference(inputs, params):
    from argus.kernels.attention import reference

    return reference(inputs["Q"], inputs["K"], inputs["V"], params.get("causal", False))


def library() -> dict[str, LibraryKernel]:
    from argus.kernels.attention import attention_fwd
    from argus.kernels.gemm import gemm

    return {
        "gemm": LibraryKernel(gemm, "C", {"M": 128, "N": 128, "K": 64}, _gemm_reference, 1e-3),
        "attention_fwd": LibraryKernel(attention_fwd, "O", {"BH": 1, "S": 128, "D": 64},
                                       _attention_reference, 2e-2),
    }


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
    from argus.absint.concrete import run

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

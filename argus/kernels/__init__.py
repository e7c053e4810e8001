"""The kernel library, written in the Argus tile DSL, with what it takes to run each one:
default sizes, random inputs, the numpy reference and its bf16 tolerance."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import numpy as np

from argus.errors import ArgusError
from argus.ir.expr import evaluate
from argus.ir.types import GlobalType
from argus.isa_cdna3.numerics import ELEMENT_DTYPES
from argus.lang.kernel import KernelDef

__all__ = ["LibraryKernel", "library"]


@attrs.frozen
class LibraryKernel:
    """A library kernel plus the data needed to check it against numpy."""

    kernel: KernelDef
    output: str
    sizes: dict[str, int]
    reference: Callable[[dict, dict], np.ndarray]
    tolerance: float
    #: special(sizes, params, rng) -> arrays that are not random normals (index tensors), plus
    #: "sizes" they imply and any extra data the reference needs
    special: Callable[[dict, dict, np.random.Generator], dict] | None = None

    def inputs(self, sizes: dict[str, int], params: dict, seed: int = 0) -> dict[str, np.ndarray]:
        """Random inputs (standard normal; index tensors from `special`) and a zeroed output."""
        ir = self.kernel.trace(**params)
        rng = np.random.default_rng(seed)
        if self.special is not None:
            fixed = self.special(sizes, params, rng)
            sizes = {**sizes, **fixed.pop("sizes", {})}
        else:
            fixed = {}
        arrays = {}
        for tensor in ir.tensors:
            if tensor.name in fixed:
                arrays[tensor.name] = fixed[tensor.name]
                continue
            assert isinstance(tensor.type, GlobalType)  # a kernel's tensor arguments are global
            shape = tuple(_extent(e, sizes, tensor.name) for e in tensor.type.shape)
            dtype = ELEMENT_DTYPES[tensor.type.dtype]
            data = (np.zeros(shape) if tensor.name == self.output
                    else rng.standard_normal(shape))
            arrays[tensor.name] = data.astype(dtype)
        # extra entries (e.g. the routing a reference needs) ride along; run() ignores them
        return {**fixed, **arrays}


def _extent(e, sizes, tensor):
    try:
        return int(evaluate(e, sizes))
    except KeyError:
        raise ArgusError(f"size of {tensor} needs {e}", fix=f"give it with --size NAME=VALUE "
                         f"(known: {sorted(sizes)})") from None


def _gemm_reference(inputs, params):
    from argus.kernels.gemm import reference

    return reference(inputs["A"], inputs["B"])


def _attention_reference(inputs, params):
    from argus.kernels.attention import reference

    return reference(inputs["Q"], inputs["K"], inputs["V"], params.get("causal", False))


def _moe_routing(sizes, params, rng):
    from argus.kernels.moe import route

    block_m = params.get("block_m", 64)
    choice, sorted_ids, block_expert = route(sizes["TOKENS"], sizes["E"], block_m, rng)
    return {"sorted_ids": sorted_ids, "block_expert": block_expert, "choice": choice,
            "sizes": {"P": len(sorted_ids), "BLOCKS": len(block_expert)}}


def _moe_reference(inputs, params):
    from argus.kernels.moe import reference

    return reference(inputs["X"], inputs["W"], inputs["choice"])


def library() -> dict[str, LibraryKernel]:
    """The library by name: gemm, attention_fwd, attention_fwd_kv, moe_gemm."""
    from argus.kernels.attention import attention_fwd, attention_fwd_kv
    from argus.kernels.gemm import gemm
    from argus.kernels.moe import moe_gemm

    return {
        "gemm": LibraryKernel(gemm, "C", {"M": 128, "N": 128, "K": 64}, _gemm_reference, 1e-3),
        "attention_fwd": LibraryKernel(attention_fwd, "O", {"BH": 1, "S": 128, "D": 64},
                                       _attention_reference, 2e-2),
        "attention_fwd_kv": LibraryKernel(attention_fwd_kv, "O",
                                          {"BH": 1, "SQ": 64, "SK": 160, "D": 64},
                                          _attention_reference, 2e-2),
        "moe_gemm": LibraryKernel(moe_gemm, "Y", {"TOKENS": 200, "H": 64, "E": 4, "N": 128},
                                  _moe_reference, 1e-3, _moe_routing),
    }

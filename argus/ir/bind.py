"""Binding a kernel's symbolic sizes to concrete arrays: `sizes_of(kernel, arrays, scalars)`
reads each size off the arrays' shapes, checks the shapes against each other and the kernel's
assumptions, and is the one check the interpreter and the launcher both make before a run.
"""

from __future__ import annotations

from collections.abc import Mapping

from argus.errors import ArgusError
from argus.ir import ops as O
from argus.ir.expr import Var, evaluate
from argus.ir.sizes import check_assumptions
from argus.ir.types import IRError
from argus.isa_cdna3.numerics import ELEMENT_DTYPES


def sizes_of(kernel: O.Kernel, arrays: Mapping, scalars: Mapping[str, int] | None = None, *,
             error: type[ArgusError] = IRError) -> dict[str, int]:
    """The symbolic sizes read off `arrays` (one per tensor argument, by name), checked: each
    array has its tensor's rank, every shape agrees with the sizes the first shapes gave, every
    scalar argument has a value in `scalars`, and the kernel's assumptions hold. Refusals raise
    `error` (the caller's kind: the interpreter's InterpError, the launcher's LaunchError)."""
    if not isinstance(arrays, Mapping):
        raise error(f"{kernel.name}: the arrays come as a dict by tensor name, not "
                    f"{type(arrays).__name__}",
                    fix=f"pass {{{', '.join(repr(t.name) + ': array' for t in kernel.tensors)}}}")
    scalars = dict(scalars or {})
    sizes: dict[str, int] = {}
    for tensor in kernel.tensors:
        array = _array(kernel, tensor, arrays, error)
        for extent, actual in zip(tensor.type.shape, array.shape):
            if isinstance(extent, Var) and extent.name not in sizes:
                sizes[extent.name] = int(actual)
    for tensor in kernel.tensors:
        _check_shape(kernel, tensor, tuple(arrays[tensor.name].shape), scalars, sizes, error)
    for var in kernel.scalars:
        if var.name not in scalars:
            raise error(f"{kernel.name}: scalar argument {var.name} needs a value")
    check_assumptions(kernel, {**scalars, **sizes}, error=error)
    return sizes


def _array(kernel: O.Kernel, tensor, arrays: Mapping, error: type[ArgusError]):
    """Tensor argument `tensor`'s array: present, a numeric array of the tensor's rank."""
    if tensor.name not in arrays:
        raise error(f"{kernel.name}: no array for argument {tensor.name} ({tensor.type}); "
                    "pass one per tensor argument")
    array, shape = arrays[tensor.name], tensor.type.shape
    if not hasattr(array, "shape") or not hasattr(array, "ndim"):
        raise error(f"{kernel.name}: argument {tensor.name} is a {type(array).__name__}; "
                    f"pass a numpy array ({tensor.type})")
    dtype = getattr(array, "dtype", None)
    # ml_dtypes' bf16 and fp8 have numpy kind 'V'
    if dtype is None or (dtype.kind not in "biuf" and dtype not in ELEMENT_DTYPES.values()):
        raise error(f"{kernel.name}: argument {tensor.name} holds {dtype or 'no dtype'}; pass a "
                    f"numeric numpy array ({tensor.type})")
    if array.ndim != len(shape):
        raise error(f"{kernel.name}: {tensor.name} must have {len(shape)} dimensions "
                    f"({', '.join(map(str, shape))}), got shape {array.shape}")
    return array


def _check_shape(kernel: O.Kernel, tensor, shape: tuple, scalars: dict, sizes: dict,
                 error: type[ArgusError]) -> None:
    """`shape` is what the sizes read so far make tensor `tensor`'s."""
    want = tuple(int(evaluate(e, {**scalars, **sizes})) for e in tensor.type.shape)
    for extent, actual, wanted in zip(tensor.type.shape, shape, want):
        if actual != wanted:
            raise error(f"{kernel.name}: {tensor.name} has extent {actual} where {extent} = "
                        f"{wanted}: its shape is {shape}, the sizes {sizes} make it {want}")

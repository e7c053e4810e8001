"""A KernelBench solution: DSL kernels plus a forward that allocates buffers and launches the
kernels, with numpy arrays in and out and no torch anywhere.

The forward receives a `Context`: `alloc(shape)` (a new f32 buffer, pre-filled with NaN so an
element a kernel forgets to write shows) and `launch(kernel, **arrays)`. The same forward runs
in two modes: executing on the emulator at the scaled sizes, and planning at the published
sizes, where buffers are `Shaped` stand-ins and launches are only recorded (for the model).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable

import attrs
import numpy as np

from argus.errors import ArgusError
from argus.kernelbench import road
from argus.kernelbench.route import Plan
from argus.lang.kernel import KernelDef


class Refused(ArgusError):
    """A solution breaking KernelBench's rules (its forward calls torch)."""


@attrs.frozen
class Solution:
    """`forward(ctx, *inputs, **params)` returns the output array; `kernels` are every kernel it
    may launch (each is proved); `generated` says whether templates produced it."""

    forward: Callable
    kernels: tuple[KernelDef, ...]
    generated: bool
    templates: tuple[str, ...] = ()


@attrs.frozen
class Shaped:
    """A buffer in planning mode: a shape and nothing else."""

    shape: tuple[int, ...]
    dtype: np.dtype = np.dtype(np.float32)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __getitem__(self, key) -> Shaped:
        # numpy's own indexing rules, on a zero-byte broadcast view of this shape
        return Shaped(np.broadcast_to(np.empty((), bool), self.shape)[key].shape, self.dtype)

    def reshape(self, *shape) -> Shaped:
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        shape = list(shape)
        if -1 in shape:
            shape[shape.index(-1)] = self.size // math.prod(s for s in shape if s != -1)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape {self.shape} to {tuple(shape)}")
        return Shaped(tuple(shape), self.dtype)


class Context:
    """What a forward may use: buffers and launches (executing, or recording the launches)."""

    def __init__(self, execute: bool):
        self.execute = execute
        #: (kernel, sizes, bytes of its largest array) per launch
        self.launches: list[tuple[KernelDef, dict[str, int], int]] = []

    def alloc(self, shape) -> np.ndarray | Shaped:
        shape = tuple(int(s) for s in shape)
        return np.full(shape, np.nan, np.float32) if self.execute else Shaped(shape)

    def fill(self, shape, value: float) -> np.ndarray | Shaped:
        """A buffer of one value (a 1/count the sizes give, for a mean)."""
        shape = tuple(int(s) for s in shape)
        return np.full(shape, value, np.float32) if self.execute else Shaped(shape)

    def words(self, array) -> np.ndarray | Shaped:
        """An int64 array viewed as (..., 2) int32 words (the low word first on this
        little-endian host and on the GPU), sharing its memory."""
        if self.execute:
            return np.ascontiguousarray(array).view(np.int32).reshape(*array.shape, 2)
        return Shaped((*array.shape, 2), np.dtype(np.int32))

    def launch(self, kernel: KernelDef, **arrays) -> None:
        largest = max((a.nbytes for a in arrays.values()), default=0)
        self.launches.append((kernel, road.sizes_of(kernel, arrays), largest))
        if self.execute:
            road.launch(kernel, arrays)


# --------------------------------------------------------------------------- the guard
def static_refusal(forward: Callable) -> str | None:
    """Why a hand-written forward is refused from its source (it names torch), or None."""
    try:
        source = inspect.getsource(forward)
    except (OSError, TypeError):
        return None
    for word in ("torch", "nn.functional", "F."):
        if word in source:
            return f"the forward's source uses {word!r}: a solution computes with kernels only"
    return None


def guarded(run: Callable):
    """Run `run()` with every torch function and aten op refused."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class NoTorchFunctions(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            raise Refused(f"the forward called torch ({getattr(func, '__name__', func)}): a "
                          "solution computes with kernels only")

    class NoTorchOps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            raise Refused(f"the forward ran the torch op {func}: a solution computes with "
                          "kernels only")

    with torch.no_grad(), NoTorchFunctions(), NoTorchOps():
        return run()


# --------------------------------------------------------------- generated from a plan
@functools.lru_cache(maxsize=512)
def kernel_of(template) -> KernelDef:
    """The traceable kernel of a template (one object per equal template, so its compilation
    and proof are shared)."""
    return template.kernel()


@functools.lru_cache(maxsize=512)
def parts_kernel_of(template) -> KernelDef:
    """A split matmul's second kernel: the sum of its parts, with the epilogue."""
    return template.reduce_kernel()


def kernels_of(template) -> tuple[KernelDef, ...]:
    """Every kernel a template launches (a split matmul launches two)."""
    if getattr(template, "split", 1) > 1:
        return kernel_of(template), parts_kernel_of(template)
    return (kernel_of(template),)


def _launch(ctx: Context, template, step, buffers) -> None:
    args = _arguments(template, step, buffers)
    if type(template).__name__ == "Moments":       # the span is the length of an array
        args["Span"] = ctx.alloc((template.span,))
    kernel, *parts = kernels_of(template)
    if not parts:
        ctx.launch(kernel, **args)
        return
    # the parts go to a workspace of split x batch rows, summed into C by the second kernel
    out = args.pop("C")
    vectors = {k: args.pop(k) for k in [k for k in args if k.startswith("V")]}
    workspace = ctx.alloc((template.split * out.shape[0], *out.shape[1:]))
    ctx.launch(kernel, **args, C=workspace)
    ctx.launch(parts[0], P=workspace, **vectors, C=out)


def _arguments(template, step, buffers) -> dict:
    views = dict(step.views)

    def view(name):
        array = buffers[name]
        return array.reshape(views[name]) if name in views else array

    names = [b for _, b in step.inputs]
    vecs = [b for _, b in step.vectors]
    kind = type(template).__name__
    if kind == "Matmul":
        args = {"A": view(names[0]), "B": view(names[1]), "C": view(step.output)}
    elif kind == "Moments":
        return {"P": view(names[0]), "Y": view(step.output)}
    else:
        # the template's full-size leaves first; a row program's per-row tensors follow them
        args = {f"X{i}": view(n) for i, n in enumerate(names[:len(template.inputs)])}
        args["Y"] = view(step.output)
    args.update({f"V{i}": buffers[n].reshape(-1) for i, n in enumerate(vecs)})
    args.update({f"P{i}": view(n) for i, n in enumerate(getattr(template, "per_row", ()))})
    args.update({f"Q{i}": view(n) for i, n in enumerate(getattr(template, "planes", ()))})
    args.update({f"I{i}": buffers[n] for i, n in enumerate(getattr(template, "indices", ()))})
    return args


def from_plan(plan: Plan) -> Solution:
    """The solution a route planned: its forward walks the plan's steps."""
    templates = tuple(s.template for s in plan.steps if s.template != "view")

    def forward(ctx: Context, *arrays):
        buffers = dict(zip(plan.inputs, arrays[:len(plan.inputs)]))
        for name in plan.scalars:       # a Python number input: a one-element buffer
            buffers[name] = ctx.fill((1,), buffers[name])
        for name in plan.words:         # an int64 index input: its 32-bit words, no copy
            buffers[name] = ctx.words(buffers[name])
        buffers.update(zip([b for b, _ in plan.params], arrays[len(plan.inputs):]))
        for name, value in plan.fills.items():
            buffers[name] = ctx.fill(plan.shapes[name], value)
        for step in plan.steps:
            if step.template == "view":
                buffers[step.output] = buffers[step.inputs[0][1]].reshape(
                    plan.shapes[step.output])
                continue
            if type(step.template).__name__ in ("Conv", "Pool"):
                # a buffer the launch writes besides its output (a convolution's partial
                # statistics, `templates.Conv.stats`) is made here
                for _, b in step.inputs:
                    if b not in buffers:
                        buffers[b] = ctx.alloc(plan.shapes[b])
                # the host moves torch's layout to the kernel's phase views and back
                buffers[step.output] = step.template.run(
                    ctx, kernel_of(step.template), **{k: buffers[b] for k, b in step.inputs})
                continue
            buffers[step.output] = ctx.alloc(plan.shapes[step.output])
            _launch(ctx, step.template, step, buffers)
        return buffers[plan.output].reshape(plan.out_shape)

    kinds = tuple(dict.fromkeys(_describe(t) for t in templates))
    kernels = tuple(dict.fromkeys(k for t in templates for k in kernels_of(t)))
    return Solution(forward, kernels, True, kinds)


def _describe(template) -> str:
    kind = type(template).__name__
    if kind == "RowProgram":
        return "row(strided)" if template.strided else "row"
    return {"Elementwise": "elementwise", "Matmul": "matmul", "Broadcast": "broadcast",
            "Scan": "scan", "Conv": "conv", "Pool": "pool", "Moments": "moments"}[kind]

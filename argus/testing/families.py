"""Kernel families `tile_programs` draws from: each is a traceable kernel, the space of its
compile-time parameters (first value = the smallest, where shrinking goes), the problem sizes
that fit a chosen variant, and the inputs the reference interpreter runs on. A library kernel's
space is its own declaration (`argus.kernels`: the knobs the search tunes and the variants it
does not), restricted to values small enough to verify quickly.

`ring_gemm` is the smallest one, made for property tests: a K-looped GEMM staged through an
S-slot LDS ring with a barrier before and after the read (about 0.5 s per verification)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import attrs
import numpy as np
from hypothesis import strategies as st

import argus.lang as T
from argus.ir.expr import And
from argus.isa_cdna3.mfma import mfma
from argus.kernels import MFMA_32, Knob, library
from argus.lang import Tensor
from argus.lang.kernel import KernelDef

__all__ = ["Variants", "FAMILIES", "ring_gemm", "RING_MFMA", "RING_BK"]

RING_MFMA = MFMA_32
RING_BK = 8


@cache
def ring_gemm(wave_grid: tuple[int, int] = (1, 1)) -> KernelDef:
    """C = A @ B.T, one 32x32 MFMA fragment per wave on a `wave_grid` of waves. Tile kt is
    stored to LDS slot kt % slots (A through `swizzle`), read back between two barriers and
    multiplied; `.trace(slots=..., swizzle=...)` picks the ring."""
    rows, cols = wave_grid
    bm, bn = 32 * rows, 32 * cols

    @T.kernel(waves=rows * cols)
    def ring_gemm(A: Tensor("bf16", "M", "K"), B: Tensor("bf16", "N", "K"),
                  C: Tensor("f32", "M", "N"), *, slots: int = 2, swizzle: tuple | None = None):
        _ring_body(A, B, C, wave_grid, bm, bn, slots, swizzle)

    return ring_gemm


def _meet(tile):
    return lambda A, B, C: And(A.k.eq(B.k), (A.k // RING_BK).eq(tile), A.row.eq(C.row),
                               B.col.eq(C.col))


def _ring_body(A, B, C, wave_grid, bm, bn, slots, swizzle):
    M, K = A.shape
    N = B.shape[0]
    for extent, block in ((M, bm), (N, bn), (K, RING_BK)):
        T.assume((extent % block).eq(0))
    T.grid(M // bm, N // bn)
    m0, n0 = T.program_id(0) * bm, T.program_id(1) * bn
    T.tag(A, lambda r, k: {"row": r, "k": k})
    T.tag(B, lambda c, k: {"col": c, "k": k})
    T.tag(C, lambda r, c: {"row": r, "col": c})
    a_spec = T.mfma_layout(RING_MFMA, "a", wave_grid)
    b_spec = T.mfma_layout(RING_MFMA, "b", wave_grid)
    c_spec = T.mfma_layout(RING_MFMA, "c", wave_grid)
    a_smem = T.lds((slots, bm, RING_BK), "bf16", swizzle=swizzle)
    b_smem = T.lds((slots, bn, RING_BK), "bf16")
    waves = wave_grid[0] * wave_grid[1]
    a_copy = T.copy_layout((bm, RING_BK), waves, 2 if bm * RING_BK >= 128 * waves else 1)
    b_copy = T.copy_layout((bn, RING_BK), waves, 2 if bn * RING_BK >= 128 * waves else 1)
    acc = T.tag(T.zeros(c_spec), lambda i, j: {"row": m0 + i, "col": n0 + j})
    loop = T.range(0, K // RING_BK, stages=slots, name="kt", acc=acc)
    for kt in loop:
        a_smem.store((kt % slots, 0, 0), A.load((m0, kt * RING_BK), a_copy))
        b_smem.store((kt % slots, 0, 0), B.load((n0, kt * RING_BK), b_copy))
        T.barrier()
        a = a_smem.load((kt % slots, 0, 0), a_spec)
        b = b_smem.load((kt % slots, 0, 0), b_spec)
        loop.acc = T.mfma(RING_MFMA, a, b, loop.acc)
        T.tag_assert(_meet(kt), "A and B meet at one k of this K tile, on C's row and column")
        T.barrier()
    C.store((m0, n0), loop.acc)
    T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.col.eq(D.col)),
                 "each C element lands on its own row and column")


@attrs.frozen
class Variants:
    """The variants of a kernel family: `module.name` is an `@kernel` (or, with `outer`
    parameters, a factory taking those and returning one); every choice of the `knobs` that
    `valid` accepts is a variant. `sizes(params)` draws problem sizes for one variant and
    `oracle(params)` lists a few where every loop runs at least twice and every grid axis has
    two workgroups (the reference interpreter decides there whether a mutant really is a
    defect); `inputs(params, sizes)` gives the interpreter's arrays (None: zeros)."""

    module: str
    name: str
    knobs: tuple[Knob, ...]
    sizes: Callable[[dict], st.SearchStrategy]
    oracle: Callable[[dict], list[dict]]
    valid: Callable[[dict], bool] = lambda params: True
    inputs: Callable[[dict, dict], dict] | None = None
    outer: tuple[str, ...] = ()

    @property
    def space(self) -> dict[str, tuple]:
        """Each knob's values, the first the smallest (where shrinking goes)."""
        return {knob.name: knob.values for knob in self.knobs}

    def trace(self, params: dict):
        import importlib

        kernel = getattr(importlib.import_module(self.module), self.name)
        if self.outer:
            kernel = kernel(**{k: params[k] for k in self.outer})
        return kernel.trace(**{k: v for k, v in params.items() if k not in self.outer})

    def source(self, params: dict) -> str:
        """Python that rebuilds this variant as KERNEL."""
        outer = ", ".join(f"{k}={params[k]!r}" for k in self.outer)
        inner = ", ".join(f"{k}={v!r}" for k, v in params.items() if k not in self.outer)
        call = f"{self.name}({outer})" if self.outer else self.name
        return f"from {self.module} import {self.name}\n\nKERNEL = {call}.trace({inner})\n"


def _multiples(**blocks) -> st.SearchStrategy:
    """Sizes NAME = block * t for t in 1..2 (1 first: shrinking keeps one workgroup)."""
    return st.fixed_dictionaries({name: st.sampled_from([block, 2 * block])
                                  for name, block in blocks.items()})


def _ring_sizes(params):
    rows, cols = params["wave_grid"]
    return st.fixed_dictionaries({"M": st.sampled_from([32 * rows, 64 * rows]),
                                  "N": st.sampled_from([32 * cols, 64 * cols]),
                                  "K": st.sampled_from([RING_BK * t for t in (1, 2, 3, 4)])})


def _ring_oracle(params):
    rows, cols = params["wave_grid"]
    return [{"M": 64 * rows, "N": 64 * cols, "K": 3 * RING_BK}]


def _gemm_sizes(params):
    return _multiples(M=params["block_m"], N=params["block_n"],
                      K=params["block_k"] * params["split_k"])


def _gemm_oracle(params):
    return [{"M": 2 * params["block_m"], "N": 2 * params["block_n"],
             "K": 3 * params["block_k"] * params["split_k"]}]


def _gemm_valid(params) -> bool:
    # one 16-byte vector per thread per copy; the 2x2 wave grid's fragment must tile the block
    fragment = 2 * mfma(params["instr"]).m
    return all(b * params["block_k"] % 2048 == 0 and b % fragment == 0
               for b in (params["block_m"], params["block_n"]))


def _attention_sizes(params):
    return st.fixed_dictionaries({"BH": st.sampled_from([1, 2]), "S": st.sampled_from([128, 256]),
                                  "D": st.just(params["head_dim"])})


def _attention_oracle(params):
    return [{"BH": 2, "S": 256, "D": params["head_dim"]}]


def _moe_oracle(params):
    return [{"TOKENS": 100, "H": 3 * params["block_k"], "E": 2, "N": 2 * params["block_n"]}]


def _moe_sizes(params):
    return st.fixed_dictionaries({"TOKENS": st.sampled_from([64, 100, 200]),
                                  "H": st.just(params["block_k"] * 2),
                                  "E": st.sampled_from([2, 4]), "N": st.just(params["block_n"])})


def _moe_inputs(params, sizes):
    from argus.kernels import library

    arrays = library()["moe_gemm"].inputs(sizes, params)
    return {k: v for k, v in arrays.items() if isinstance(v, np.ndarray)}


def _library(name: str, sizes, oracle, valid=lambda params: True, inputs=None,
             **small: tuple) -> Variants:
    """The library kernel `name`'s trace-time knobs and variants as declared, those named in
    `small` restricted to those values."""
    entry = library()[name]
    knobs = tuple(knob.restricted(small.pop(knob.name)) if knob.name in small else knob
                  for knob in entry.knobs + entry.variants if knob.stage == "kernel")
    if small:
        raise ValueError(f"{name} declares no knob(s) {sorted(small)}")
    return Variants(entry.kernel.fn.__module__, name, knobs, sizes, oracle, valid, inputs)


FAMILIES: dict[str, Variants] = {
    "ring_gemm": Variants("argus.testing.families", "ring_gemm", (
        Knob("wave_grid", ((1, 1), (2, 1), (1, 2)), "waves per workgroup (rows, columns)"),
        Knob("slots", (2, 1, 4), "LDS ring slots"),
        Knob("swizzle", (None, (2, 1, 3), (1, 1, 3), (1, 2, 3)), "A's LDS swizzle"),
    ), _ring_sizes, _ring_oracle, outer=("wave_grid",)),
    "gemm": _library("gemm", _gemm_sizes, _gemm_oracle, _gemm_valid, block_m=(64, 128),
                     block_n=(64, 128), block_k=(32, 64), split_k=(1, 2)),
    # one unroll: the loop's copies cost verification time and add no new defect class
    "attention_fwd": _library("attention_fwd", _attention_sizes, _attention_oracle,
                              unroll=(1,)),
    "moe_gemm": _library("moe_gemm", _moe_sizes, _moe_oracle, inputs=_moe_inputs,
                         block_m=(64,), block_k=(32,), block_n=(64, 128)),
}

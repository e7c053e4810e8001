"""The kernel library, written in the Argus tile DSL, with what it takes to run each one:
default sizes, random inputs, the numpy reference and its bf16 tolerance, and the kernel's
knobs (`Knob`: legal values, doc, stage), declared here once for the search (which tunes
them) and for `argus.testing` (which draws variants from them)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import attrs
import numpy as np

from argus.asm.policy import DEFAULT_POLICY, POLICIES
from argus.errors import ArgusError
from argus.ir.expr import evaluate
from argus.ir.types import GlobalType
from argus.isa_cdna3.mfma import MFMA
from argus.isa_cdna3.numerics import ELEMENT_DTYPES
from argus.lang.kernel import KernelDef

#: the GEMMs' MFMA choices: gfx942's dense single-block bf16 -> f32 instructions, the 32x32
#: tile first
BF16_MFMAS = tuple(info.name for info in sorted(MFMA.values(), key=lambda info: -info.m)
                   if (info.a_type, info.c_type, info.blocks, info.sparse) ==
                   ("bf16", "f32", 1, False))
MFMA_32, MFMA_16 = BF16_MFMAS


def dense_mfmas(dtype: str) -> tuple[str, ...]:
    """gfx942's dense single-block `dtype` x `dtype` -> f32 MFMAs, the 32x32 tile first."""
    return tuple(info.name for info in sorted(MFMA.values(), key=lambda info: -info.m)
                 if (info.a_type, info.b_type, info.c_type, info.blocks, info.sparse) ==
                 (dtype, dtype, "f32", 1, False))


@attrs.frozen
class Knob:
    """One parameter of a kernel and its legal values (in order, so "one step up" is the next
    value); `stage` says who takes it: `kernel`, a trace parameter, or `compile`, an option of
    argus.compile."""

    name: str
    values: tuple
    doc: str = ""
    stage: str = attrs.field(default="kernel", validator=attrs.validators.in_(("kernel",
                                                                                "compile")))

    def step(self, value, by: int):
        """The value `by` positions away from `value`, or None past either end (or when
        `value` is not one of this knob's)."""
        if value not in self.values:
            return None
        index = self.values.index(value) + by
        return self.values[index] if 0 <= index < len(self.values) else None

    def restricted(self, values) -> Knob:
        """This knob with only `values` (each one of its own, kept in its order)."""
        outside = [v for v in values if v not in self.values]
        if outside or not values:
            raise ArgusError(f"knob {self.name}: {outside or 'no value'} outside its values "
                             f"{list(self.values)}")
        return attrs.evolve(self, values=tuple(v for v in self.values if v in values))


#: the backend's scheduling policies (argus.compile(policy=...)); its default first
POLICY = Knob("policy", (DEFAULT_POLICY, *(p for p in POLICIES if p != DEFAULT_POLICY)),
              "instruction scheduling of the backend", "compile")


@attrs.frozen
class LibraryKernel:
    """A library kernel, the data needed to check it against numpy, and its knobs.

    `sizes` are default sizes, in the order the command line writes a shape (`dims`). `knobs`
    are what the search tunes (values that change speed, never the result); `variants` are the
    other parameters `argus.testing` varies (they change what is computed, as `causal`, or are
    fixed by the shape, as `head_dim`)."""

    kernel: KernelDef
    output: str
    sizes: dict[str, int]
    reference: Callable[[dict, dict], np.ndarray]
    tolerance: float
    #: special(sizes, params, rng) -> arrays that are not random normals (index tensors), plus
    #: "sizes" they imply and any extra data the reference needs
    special: Callable[[dict, dict, np.random.Generator], dict] | None = None
    knobs: tuple[Knob, ...] = ()
    variants: tuple[Knob, ...] = ()
    #: fixed(sizes) -> the parameters a problem's sizes fix (attention's head_dim)
    fixed: Callable[[dict], dict] | None = attrs.field(default=None, eq=False)
    #: check_sizes(params, trial) -> small sizes for correctness trial `trial` (shapes vary
    #: between trials, and each loop runs at least twice)
    check_sizes: Callable[[dict, int], dict] | None = attrs.field(default=None, eq=False)
    #: timing_sizes(sizes, params) -> every size the kernel takes at the target shape, where the
    #: problem's own sizes imply more (MoE's padded rows under uniform routing)
    timing_sizes: Callable[[dict, dict], dict] | None = attrs.field(default=None, eq=False)
    #: infeasible(params) -> why a knob point can never be built, at any shape ("" if it can):
    #: the hardware limits its trace would hit; the search's space leaves such points out
    infeasible: Callable[[dict], str] | None = attrs.field(default=None, eq=False)

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def dims(self) -> tuple[str, ...]:
        """The shape's dimensions in command-line order (`4096x4096x4096` is M x N x K)."""
        return tuple(self.sizes)

    def knob(self, name: str) -> Knob:
        """The knob (or variant) `name`; an ArgusError naming those there are."""
        for knob in self.knobs + self.variants:
            if knob.name == name:
                return knob
        raise ArgusError(f"kernel {self.name} has no knob {name!r}; it has "
                         f"{[k.name for k in self.knobs + self.variants]}")

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


def _attention_gqa_reference(inputs, params):
    from argus.kernels.attention import reference_gqa

    return reference_gqa(inputs["Q"], inputs["K"], inputs["V"], params.get("causal", False))


def _moe_routing(sizes, params, rng):
    from argus.kernels.moe import route

    block_m = params.get("block_m", 64)
    choice, sorted_ids, block_expert = route(sizes["TOKENS"], sizes["E"], block_m, rng)
    return {"sorted_ids": sorted_ids, "block_expert": block_expert, "choice": choice,
            "sizes": {"P": len(sorted_ids), "BLOCKS": len(block_expert)}}


def _moe_topk_routing(sizes, params, rng):
    # the fp8 kernels route each token to topk experts: a row of Y per route
    from argus.kernels.moe import route

    topk = params.get("topk", 1)
    choice, sorted_ids, block_expert = route(sizes["TOKENS"], sizes["E"],
                                             params.get("block_m", 64), rng, topk)
    return {"sorted_ids": sorted_ids, "block_expert": block_expert, "choice": choice,
            "sizes": {"P": len(sorted_ids), "BLOCKS": len(block_expert),
                      "ROUTES": sizes["TOKENS"] * topk}}


def _moe_reference(inputs, params):
    from argus.kernels.moe import reference

    return reference(inputs["X"], inputs["W"], inputs["choice"], params.get("topk", 1))


def _moe_kblocked_routing(sizes, params, rng):
    # the K-blocked kernel's rows come in blocks of 32 unless told otherwise
    return _moe_topk_routing(sizes, {"block_m": 32, **params}, rng)


def _moe_kblocked_reference(inputs, params):
    from argus.kernels.moe import reference

    w = np.asarray(inputs["W"])                      # [e, kt, n, j] -> [e, n, kt * 64 + j]
    e, kt, n, j = w.shape
    return reference(inputs["X"], w.transpose(0, 2, 1, 3).reshape(e, n, kt * j),
                     inputs["choice"], params.get("topk", 1))


GEMM_KNOBS = (
    Knob("block_m", (64, 128, 256), "rows of C per workgroup"),
    Knob("block_n", (64, 128, 256), "columns of C per workgroup"),
    Knob("block_k", (16, 32, 64, 128), "K elements staged in LDS per iteration"),
    Knob("split_k", (1, 2, 4, 8), "K split over grid axis 2, partial tiles added atomically"),
    Knob("prefetch", (1, 2), "K tiles the global loads run ahead of the MFMAs (2: the next "
         "tile rides in registers; K must hold two tiles per split)"),
    Knob("instr", BF16_MFMAS, "MFMA instruction"),
    Knob("swizzle", (True, False), "XOR-swizzled LDS tiles"),
    POLICY,
)
# the tiles are fixed by the kernel (32-key blocks, 128 queries per workgroup). Its prefetch (2
# or 3: key blocks carried in registers) is proved since loop invariants lift carried tiles to
# the previous iteration's loads, but is not a knob yet: the search figures in the README were
# measured on the space without it
ATTENTION_KNOBS = (
    Knob("unroll", (1, 2, 4), "copies of the key loop's body per machine iteration "
         "(interleave unrolls by the 2 LDS stages at least)"),
    POLICY,
)
ATTENTION_VARIANTS = (
    Knob("head_dim", (64, 128), "the head dimension D, fixed by the shape"),
    Knob("causal", (False, True), "mask keys after the query (what is computed, not a tuning)"),
)
MOE_KNOBS = (
    Knob("block_m", (64, 128), "token rows per workgroup"),
    Knob("block_n", (64, 128, 256), "output columns per workgroup"),
    Knob("block_k", (16, 32, 64, 128), "hidden elements per iteration"),
    Knob("lds", (True, False), "stage X rows and W tiles through double-buffered LDS (each "
         "element read once per workgroup) or load MFMA operands straight from global memory"),
    POLICY,
)


def _typed_gemm_knobs(dtype: str) -> tuple[Knob, ...]:
    """GEMM_KNOBS with `dtype`'s MFMAs; block_k from 32 (an 8-bit MFMA takes 16 or 32 k)."""
    knobs = {knob.name: knob for knob in GEMM_KNOBS}
    knobs["instr"] = Knob("instr", dense_mfmas(dtype), "MFMA instruction")
    knobs["block_k"] = knobs["block_k"].restricted((32, 64, 128))
    return tuple(knobs.values())


#: the convolution and pooling families' library entries (2-D; any dims through
#: argus.kernels.conv.conv_kernel / pool_kernel): what they compute, not tunings
CONV_VARIANTS = (
    Knob("stride", ((1, 1), (2, 2), (1, 2)), "stride per spatial dimension"),
    Knob("transposed", (False, True), "transposed convolution (the gather form)"),
)
POOL_VARIANTS = (
    Knob("kind", ("max", "avg"), "max or average pooling (the average counts the padding)"),
    Knob("stride", ((2, 2), (1, 1)), "stride per spatial dimension"),
)


def _conv_reference(inputs, params):
    from argus.kernels.conv import conv_kernel, conv_view_reference

    return conv_view_reference((), inputs, {**conv_kernel(2).params, **params})


def _conv_check_sizes(p: dict, trial: int) -> dict:
    from argus.kernels.conv import conv_check_sizes, conv_kernel

    return conv_check_sizes(2, {**conv_kernel(2).params, **p}, trial)


def _pool_reference(inputs, params):
    from argus.kernels.conv import pool_kernel, pool_view_reference

    return pool_view_reference(inputs, {**pool_kernel(2).params, **params})


def _pool_check_sizes(p: dict, trial: int) -> dict:
    from argus.kernels.conv import pool_check_sizes, pool_kernel

    return pool_check_sizes(2, {**pool_kernel(2).params, **p}, trial)


def _gemm_check_sizes(p: dict, trial: int) -> dict:
    return {"M": p["block_m"] * (1 + trial % 2), "N": p["block_n"] * (2 - trial % 2),
            "K": p["block_k"] * p["split_k"] * (2 + trial % 2)}


def _attention_check_sizes(p: dict, trial: int) -> dict:
    return {"BH": 1 + trial % 2, "S": 128 * (1 + trial % 2), "D": p["head_dim"]}


def _moe_check_sizes(p: dict, trial: int) -> dict:
    return {"TOKENS": 61 + 53 * trial, "H": p["block_k"] * 2, "E": 3 + trial % 2,
            "N": p["block_n"] * (1 + trial % 2)}


def _moe_timing_sizes(sizes: dict, params: dict) -> dict:
    """MoE sizes under uniform top-1 routing: each expert's tokens padded to whole row blocks."""
    per_expert = -(-sizes["TOKENS"] // sizes["E"])
    blocks = sizes["E"] * -(-per_expert // params["block_m"])
    return {**sizes, "BLOCKS": blocks, "P": blocks * params["block_m"]}


def _moe_topk_timing_sizes(sizes: dict, params: dict) -> dict:
    """The fp8 MoE's sizes under uniform top-k routing: each expert's routes padded to whole
    row blocks, a row of Y per route."""
    routes = sizes["TOKENS"] * params.get("topk", 1)
    return {**_moe_timing_sizes({**sizes, "TOKENS": routes}, params), "TOKENS": sizes["TOKENS"],
            "ROUTES": routes}


@functools.cache
def library() -> dict[str, LibraryKernel]:
    """Every library kernel by name (built once: the entries are immutable)."""
    from argus.kernels.attention import (
        attention_fwd,
        attention_fwd_gqa,
        attention_fwd_gqa_wide,
        attention_fwd_kv,
    )
    from argus.kernels.conv import conv_kernel, pool_kernel
    from argus.kernels.gemm import gemm, gemm_bf8, gemm_f16, gemm_fp8, gemm_infeasible
    from argus.kernels.moe import (
        moe_gemm,
        moe_gemm_fp8,
        moe_gemm_fp8_direct,
        moe_gemm_fp8_kblocked,
    )

    typed = {kernel.name: LibraryKernel(kernel, "C", {"M": 128, "N": 128, "K": 128},
                                        _gemm_reference, 1e-3, knobs=_typed_gemm_knobs(dtype),
                                        check_sizes=_gemm_check_sizes)
             for kernel, dtype in ((gemm_f16, "f16"), (gemm_fp8, "fp8"), (gemm_bf8, "bf8"))}
    return {
        "gemm": LibraryKernel(gemm, "C", {"M": 128, "N": 128, "K": 64}, _gemm_reference, 1e-3,
                              knobs=GEMM_KNOBS, check_sizes=_gemm_check_sizes,
                              infeasible=gemm_infeasible),
        **typed,
        "attention_fwd": LibraryKernel(attention_fwd, "O", {"BH": 1, "S": 128, "D": 64},
                                       _attention_reference, 2e-2, knobs=ATTENTION_KNOBS,
                                       variants=ATTENTION_VARIANTS,
                                       fixed=lambda sizes: {"head_dim": sizes["D"]},
                                       check_sizes=_attention_check_sizes),
        "attention_fwd_kv": LibraryKernel(attention_fwd_kv, "O",
                                          {"BH": 1, "SQ": 64, "SK": 160, "D": 64},
                                          _attention_reference, 2e-2),
        "attention_fwd_gqa": LibraryKernel(attention_fwd_gqa, "O",
                                           {"BH": 1, "G": 2, "S": 128, "D": 64},
                                           _attention_gqa_reference, 2e-2),
        "attention_fwd_gqa_wide": LibraryKernel(attention_fwd_gqa_wide, "O",
                                                {"BH": 1, "G": 2, "S": 256, "D": 128},
                                                _attention_gqa_reference, 2e-2),
        "moe_gemm": LibraryKernel(moe_gemm, "Y", {"TOKENS": 200, "H": 64, "E": 4, "N": 128},
                                  _moe_reference, 1e-3, _moe_routing, knobs=MOE_KNOBS,
                                  check_sizes=_moe_check_sizes, timing_sizes=_moe_timing_sizes),
        # not a tuning family yet (no knobs): bench/bench_vs_aiter.py tries its tiles
        "moe_gemm_fp8": LibraryKernel(moe_gemm_fp8, "Y", {"TOKENS": 200, "H": 128, "E": 4,
                                                          "N": 128},
                                      _moe_reference, 1e-3, _moe_topk_routing,
                                      timing_sizes=_moe_topk_timing_sizes),
        "moe_gemm_fp8_kblocked": LibraryKernel(
            moe_gemm_fp8_kblocked, "Y", {"TOKENS": 200, "H": 128, "KT": 2, "E": 4, "N": 128},
            _moe_kblocked_reference, 1e-3, _moe_kblocked_routing,
            timing_sizes=_moe_topk_timing_sizes),
        "moe_gemm_fp8_direct": LibraryKernel(
            moe_gemm_fp8_direct, "Y", {"TOKENS": 200, "H": 128, "KT": 2, "E": 4, "N": 128},
            _moe_kblocked_reference, 1e-3, _moe_kblocked_routing,
            timing_sizes=_moe_topk_timing_sizes),
        "conv2d_fma": LibraryKernel(conv_kernel(2), "Y",
                                    {"N": 1, "I2H": 6, "SIH": 1, "I2W": 7, "SIW": 1, "G": 2,
                                     "CG": 3, "KH": 3, "KW": 3, "OCG": 5, "O2H": 4, "SOH": 1,
                                     "O2W": 5, "SOW": 1}, _conv_reference, 1e-5,
                                    variants=CONV_VARIANTS, check_sizes=_conv_check_sizes),
        "pooling2d": LibraryKernel(pool_kernel(2), "Y",
                                   {"NC": 3, "I2H": 8, "SH": 1, "I2W": 5, "SW": 2, "OH": 4,
                                    "OW": 5}, _pool_reference, 1e-6, variants=POOL_VARIANTS,
                                   check_sizes=_pool_check_sizes),
    }

__all__ = ["Knob", "LibraryKernel", "library", "POLICY", "BF16_MFMAS", "dense_mfmas",
           "GEMM_KNOBS", "ATTENTION_KNOBS", "ATTENTION_VARIANTS", "MOE_KNOBS", "CONV_VARIANTS",
           "POOL_VARIANTS"]

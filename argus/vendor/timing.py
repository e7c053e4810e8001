"""Modelled MI300X time of AMD's kernels by name and problem size: how each family (the bf16
GEMMs, non-causal attention) is sampled and scaled, and the whole-launch road for the kernels
whose workgroups do different work (causal attention, MoE routing). The sampling itself is the
model's (`isa_cdna3.perf.sample`); this module plugs in `run_vendor` as the sample runner.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from argus.asm.codeobject import CodeObject
from argus.asm.launch import emulate
from argus.isa_cdna3.abi import LaunchError
from argus.isa_cdna3.emu import EmulatorError
from argus.isa_cdna3.emu.trace import WaveEvents
from argus.isa_cdna3.perf import sample
from argus.isa_cdna3.perf.estimate import Timing, estimate, plan, statics_of
from argus.isa_cdna3.perf.model import past_l2
from argus.isa_cdna3.perf.params import Calibrated, GpuProfile, PerfError
from argus.vendor import aiter
from argus.vendor.harness import (
    FMHA,
    FMOE_STAGE1,
    GEMM,
    I8GEMM,
    VendorKernelError,
    check_whole_sizes,
    code_object_path,
    i8gemm_splits,
    keys_default_to_queries,
    run_vendor,
    stage1_routing,
    stage1_topk_ids,
    vendor_kernels,
)

BF16_BYTES = 2
HEAD_DIM = 128


@attrs.frozen
class Family:
    """How to sample and scale one family of vendor kernels (sizes as `run_vendor` takes them)."""

    loop: str                                             # the size the main loop runs over
    trips: tuple[int, int]                                # sampled trip counts
    trip: Callable[[dict], int]                           # per-workgroup trip count
    sample: Callable[[dict, int, int], dict]              # (sizes, trip, workgroups) -> sizes
    workgroups: Callable[[dict], int]
    footprint: Callable[[dict], float]                    # compulsory HBM bytes
    defaults: dict
    problem: Callable[[dict], str | None]                 # what is wrong with the sizes, if any
    threads: int = 256                                    # work-items per workgroup
    # whether the sampled workgroups stand exactly for every workgroup at these sizes (else
    # the whole launch is emulated)
    sampled: Callable[[dict], bool] = lambda size: True
    extra: tuple[str, ...] = ()                           # optional sizes without a default
    # (bytes, workgroups reading them, workgroup-id distance between consecutive readers or 0
    # for readers spread evenly over the launch) of each operand: how many XCDs fetch its lines
    # past their L2s and whether together (`past_l2`)
    readers: Callable[[dict], list[tuple[float, float, float]]] | None = None

    @property
    def sizes(self) -> list[str]:
        """The size names the family takes (attention also takes hk, the K/V head count)."""
        return [*self.defaults, *(["hk"] if self.loop == "sk" else []), *self.extra]


def _gemm(name: str) -> Family:
    tile = int(GEMM.match(name).group(1))

    def sample_sizes(size: dict, trip: int, groups: int) -> dict:
        return {"m": tile, "n": 64 * groups, "k": trip * size["splitk"],
                "splitk": size["splitk"]}
    return Family(
        "k", (512, 1024), lambda s: s["k"] // s["splitk"], sample_sizes,
        lambda s: (s["n"] // 64) * -(-s["m"] // tile) * s["splitk"],
        lambda s: (s["m"] * s["k"] + s["n"] * s["k"]) * BF16_BYTES + s["m"] * s["n"] * 4,
        {"m": tile, "n": 128, "k": 256, "splitk": 1},
        lambda s: None if min(s.values()) >= 1 and s["n"] % 64 == 0
        and s["k"] % (64 * s["splitk"]) == 0 else
        "m, n, k, splitk must be positive, n a multiple of 64 and k of 64 * splitk (each split "
        "a whole number of the kernel's 64-wide K steps)",
        readers=lambda s: [(s["m"] * s["k"] * BF16_BYTES, s["n"] // 64, 0),
                           (s["n"] * s["k"] * BF16_BYTES, -(-s["m"] // tile), 0),
                           (s["m"] * s["n"] * 4, 1, 0)])


def _fmha(name: str, causal: bool) -> Family:
    def footprint(s: dict) -> float:
        kv = s.get("hk", s["h"])
        return (2 * s["b"] * s["s"] * s["h"] + 2 * s["b"] * s["sk"] * kv) * HEAD_DIM * BF16_BYTES

    def problem(s: dict) -> str | None:
        return None if min(s.values()) >= 1 and s["h"] % s.get("hk", s["h"]) == 0 else \
            "b, h, s, sk (and hk) must be positive and hk must divide h"

    def readers(s: dict) -> list[tuple[float, float, float]]:
        kv = s.get("hk", s["h"])
        rows = 512 if causal else 256            # query rows per workgroup
        return [(2 * s["b"] * s["s"] * s["h"] * HEAD_DIM * BF16_BYTES, 1, 0),       # Q, O
                (2 * s["b"] * s["sk"] * kv * HEAD_DIM * BF16_BYTES,                 # K, V
                 -(-s["s"] // rows) * (s["h"] // kv), 0)]
    if not causal:
        return Family("sk", (128, 256), lambda s: s["sk"],
                      lambda s, trip, groups: {"b": 1, "h": groups, "s": 256, "sk": trip},
                      lambda s: -(-s["s"] // 256) * s["h"] * s["b"], footprint,
                      {"b": 1, "h": 1, "s": 256, "sk": 256}, problem, threads=512,
                      readers=readers)
    # The causal kernel gives each workgroup two 256-row query tiles, i and T-1-i, so every
    # workgroup attends the same number of keys (bottom-right mask): s + 256 + 2 (sk - s) in
    # all. One workgroup of a 512-query launch over L keys attends 2 L - 256, the same work,
    # so the sample runs s=512 at L = sk - s/2 + 256 (the instruction counts match exactly).
    return Family("sk", (512, 768), lambda s: s["sk"] - s["s"] // 2 + 256,
                  lambda s, trip, groups: {"b": 1, "h": groups, "s": 512, "sk": trip},
                  lambda s: -(-s["s"] // 512) * s["h"] * s["b"], footprint,
                  {"b": 1, "h": 1, "s": 256, "sk": 256}, problem, threads=512,
                  sampled=lambda s: s["s"] % 512 == 0 and s["sk"] >= s["s"], readers=readers)


def _fmoe_stage1(name: str) -> Family:
    """aiter's stage-1 fp8 MoE kernels: a workgroup multiplies one block of tile_m sorted
    tokens by tile_n gate and tile_n up columns of its expert over the whole of dim, so every
    block costs the same whatever its expert: the sample is a launch of one full block per
    expert (round-robin routing), the real launch has inter / tile_n times the blocks the
    routing fills (uniformly random routing, as aiter's tuner draws it; counted, not
    emulated), and the compulsory traffic reads each routed expert's weights once."""
    match = FMOE_STAGE1.match(name)
    tile_m, tile_n = int(match.group(2)), int(match.group(3))

    def sample_sizes(size: dict, trip: int, groups: int) -> dict:
        return {"tokens": tile_m * groups, "dim": trip, "inter": tile_n, "experts": groups,
                "topk": 1, "balanced": 1, **({"gelu": 1} if size.get("gelu") else {})}

    def footprint(s: dict) -> float:
        routed = stage1_routing(s, tile_m)[1]
        return (routed * 2 * s["inter"] * s["dim"] + s["tokens"] * s["dim"]     # fp8 weights, x
                + s["tokens"] * s["topk"] * s["inter"] * BF16_BYTES)            # bf16 out

    def readers(s: dict) -> list[tuple[float, float, float]]:
        # an expert's weight columns are read by its blocks, which are adjacent grid rows (the
        # grid is N tiles x sorted blocks, so readers sit inter / tile_n workgroups apart); a
        # token's row by the blocks of its topk experts in every N tile, spread over the launch
        counts = np.bincount(stage1_topk_ids(s).ravel(), minlength=s["experts"])
        weights = [(2 * s["inter"] * s["dim"], -(-int(c) // tile_m), s["inter"] // tile_n)
                   for c in counts if c]
        return [*weights, (s["tokens"] * s["dim"], s["topk"] * s["inter"] // tile_n, 0),
                (s["tokens"] * s["topk"] * s["inter"] * BF16_BYTES, 1, 0)]

    def problem(s: dict) -> str | None:
        return None if (min(s.values()) >= 1 and s["inter"] % tile_n == 0
                        and s["dim"] % 256 == 0 and s["topk"] <= s["experts"]
                        and s.get("gelu", 0) <= 1) else \
            f"tokens, dim, inter, experts, topk must be positive, inter a multiple of {tile_n}, " \
            f"dim of 256, topk at most experts (gelu 1 picks GELU)"
    return Family("dim", (512, 1024), lambda s: s["dim"], sample_sizes,
                  lambda s: s["inter"] // tile_n * stage1_routing(s, tile_m)[0], footprint,
                  {"tokens": 8, "dim": 512, "inter": 256, "experts": 4, "topk": 2}, problem,
                  extra=("gelu",), readers=readers)


def _i8gemm(name: str) -> Family:
    """aiter's int8 GEMMs: every workgroup runs the K loop of its split (asm_gemm_a8w8.cu
    rounds each split up to a multiple of 128), so a sample of one row of tiles at two split
    widths stands for all."""
    tile = int(I8GEMM.match(name).group(1))

    def sample_sizes(size: dict, trip: int, groups: int) -> dict:
        splits = i8gemm_splits(size["k"], size["splitk"])[0]
        return {"m": tile, "n": 128 * max(1, groups // splits), "k": trip * splits,
                "splitk": splits}
    return Family(
        "k", (512, 1024), lambda s: i8gemm_splits(s["k"], s["splitk"])[1], sample_sizes,
        lambda s: s["n"] // 128 * -(-s["m"] // tile) * i8gemm_splits(s["k"], s["splitk"])[0],
        lambda s: s["m"] * s["k"] + s["n"] * s["k"] + s["m"] * s["n"] * BF16_BYTES,
        {"m": tile, "n": 128, "k": 512, "splitk": 1},
        lambda s: None if min(s.values()) >= 1 and s["n"] % 128 == 0 and s["k"] % 128 == 0
        else "m, n, k, splitk must be positive, n and k multiples of 128",
        readers=lambda s: [(s["m"] * s["k"], s["n"] // 128, 0),
                           (s["n"] * s["k"], -(-s["m"] // tile), 0),
                           (s["m"] * s["n"] * BF16_BYTES, 1, 0)])


def family(name: str) -> Family | None:
    """How vendor kernel `name` is sampled, or None when its whole launch is emulated."""
    if GEMM.match(name):
        return _gemm(name)
    if I8GEMM.match(name):
        return _i8gemm(name)
    if FMOE_STAGE1.match(name):
        return _fmoe_stage1(name)
    if match := FMHA.match(name):
        return _fmha(name, bool(match.group(1)))
    return None


@functools.lru_cache(maxsize=16)
def vendor_code(name: str) -> tuple[CodeObject, list]:
    """A vendor code object and its instructions as the scheduler sees them."""
    code = CodeObject.from_file(code_object_path(aiter.aiter_root(), name))
    return code, statics_of(code.disassemble(code.kernels[0]))


def forget(*, disk: bool = False) -> None:
    """Drop the remembered samples, schedules and code objects, and with `disk` the stored
    sample traces (a cold start)."""
    sample.forget(disk=disk)
    vendor_code.cache_clear()


def _traced(name: str, shape: dict, code: CodeObject) -> Any:
    """`run_vendor` with the event trace on; a run that does not finish cannot be timed."""
    try:
        return run_vendor(name, shape=shape, code=code, trace=True)
    except VendorKernelError as err:
        raise PerfError(str(err)) from err
    except (EmulatorError, LaunchError) as err:
        raise PerfError(f"kernel {name} did not run to completion in the emulator, so it "
                        f"cannot be timed: {err}") from err


def time_vendor(name: str, sizes: dict, gpu: GpuProfile, constants: Calibrated,
                extrapolate: bool = True) -> Timing:
    """Modelled time of vendor kernel `name` at `sizes` (as `run_vendor` takes them)."""
    if name not in vendor_kernels():
        raise PerfError(f"unknown vendor kernel {name!r}; known: {', '.join(vendor_kernels())}")
    fam = family(name)
    if fam is None:
        return whole_launch(name, sizes, gpu, constants)
    unknown = set(sizes) - set(fam.sizes)
    if unknown:
        raise PerfError(f"{name} takes sizes {sorted(fam.defaults)}, not {sorted(unknown)}")
    try:
        check_whole_sizes(sizes, name)
    except VendorKernelError as err:
        raise PerfError(str(err), fix=f"give whole numbers, e.g. {dict(fam.defaults)}") from None
    size = {**fam.defaults, **(keys_default_to_queries(sizes) if fam.loop == "sk" else sizes)}
    if (problem := fam.problem(size)) is not None:
        raise PerfError(f"{name} at {size}: {problem}")
    if not fam.sampled(size):
        return whole_launch(name, size, gpu, constants)
    code, statics = vendor_code(name)
    occ = sample.occupancy_of(code.kernels[0], fam.threads)
    workgroups = fam.workgroups(size)
    if workgroups < 1:
        raise PerfError(f"{name} at {size} launches no workgroups")
    per_round = plan(workgroups, occ, gpu).per_round
    real = fam.trip(size)
    trips = (real,) if not extrapolate or real <= fam.trips[1] else fam.trips

    def run_sample(trip: int) -> tuple[tuple, dict[int, list]]:
        shape = fam.sample(size, trip, per_round)
        key = (hashlib.sha256(code.data).hexdigest(), name, tuple(sorted(shape.items())))

        def run() -> dict[int, list]:
            groups: dict[int, list] = {}
            for w in _traced(name, shape, code).emulation.events.per_wave():
                groups.setdefault(w.workgroup, []).append(w)
            return groups
        return key, sample.sampled(key, run, WaveEvents)

    moved = past_l2(fam.readers(size), int(gpu.xcds.value), workgroups,
                    per_round * int(gpu.cus.value)) if fam.readers else None
    return sample.extrapolated(name, trips=trips, real=real, loop=fam.loop,
                               run_sample=run_sample, statics=statics, occ=occ,
                               workgroups=workgroups, footprint=fam.footprint(size), gpu=gpu,
                               per_xcd=moved[0] if moved else None,
                               same_round=moved[1] if moved else None,
                               constants=constants, shape=size)


def time_launch(code: CodeObject, info: Any, *, grid: Any, block: Any, args: Any,
                gpu: GpuProfile, constants: Calibrated) -> Timing:
    """Modelled time of one whole launch of a code object's kernel, ours or AMD's: it runs in
    the emulator with the event trace on and the model schedules the busiest CU's share."""
    try:
        run = emulate(code, info, grid=grid, block=block, args=args, check="warn", trace=True)
    except (EmulatorError, LaunchError) as err:
        raise PerfError(f"kernel {info.name} did not run to completion in the emulator, so it "
                        f"cannot be timed: {err}") from err
    occ = sample.occupancy_of(info, run.block[0] * run.block[1] * run.block[2])
    return estimate(run.events, run.instructions, occ, gpu=gpu, constants=constants,
                    kernel=info.name, shape={"grid": "x".join(map(str, run.grid))})


def whole_launch(name: str, sizes: dict, gpu: GpuProfile, constants: Calibrated) -> Timing:
    """Vendor kernels whose workgroups do different work (causal attention, MoE routing): the
    whole launch runs in the emulator, so the cost grows with the problem."""
    code, _ = vendor_code(name)
    done = _traced(name, sizes, code)
    run = done.emulation
    occ = sample.occupancy_of(code.kernels[0], run.block[0] * run.block[1] * run.block[2])
    return estimate(run.events, run.instructions, occ, gpu=gpu, constants=constants,
                    kernel=name, shape=done.shape)

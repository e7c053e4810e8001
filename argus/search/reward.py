"""The reward of a candidate: modelled throughput relative to a reference at the same shape,
i.e. reference time / candidate time. The reference is AMD's fastest hand-written kernel for
the family at that shape (modelled by `argus.time` on its code object from the amd-aiter
wheel) where the model can time one, else the family's default configuration. No modelled
time, no reward: never a made-up number.
"""

from __future__ import annotations

import attrs

import argus
from argus.search.space import Problem


@attrs.frozen
class Counterpart:
    """AMD kernels doing a family's work, and their sizes for a problem (None: not this one)."""

    kernels: tuple[str, ...]
    sizes: object = attrs.field(eq=False)  # (sizes, pinned params) -> vendor sizes | None


#: our families' counterparts among the amd-aiter gfx942 code objects
COUNTERPARTS = {
    # C = A @ B.T, bf16 in, f32 out: the same contract as aiter's bf16gemm_outf32_tn
    "gemm": Counterpart(tuple(f"bf16gemm_outf32_tn_{m}x64_pf3" for m in (32, 48, 64, 96)),
                        lambda s, p: {"m": s["M"], "n": s["N"], "k": s["K"], "splitk": 1}),
    # aiter's forward attention is head_dim 128; the model times its non-causal form only
    "attention_fwd": Counterpart(("fwd_hd128_bf16",), lambda s, p: None if (
        s["D"] != 128 or p.get("causal")) else {"b": 1, "h": s["BH"], "s": s["S"],
                                                "sk": s["S"]}),
}


def reward(time_us: float | None, reference_us: float | None) -> float | None:
    """reference_us / time_us, or None when either time is missing (or not positive)."""
    if time_us is None or reference_us is None or time_us <= 0 or reference_us <= 0:
        return None
    return reference_us / time_us


def amd_reference(problem: Problem) -> dict | None:
    """{"name", "time_us", "modelled": True} of AMD's fastest counterpart at the problem's
    shape, or None when the family has none the model can time there."""
    counterpart = COUNTERPARTS.get(problem.family)
    sizes = counterpart.sizes(problem.sizes, problem.pinned) if counterpart else None
    if sizes is None:
        return None
    timed = []
    for name in counterpart.kernels:
        try:
            timed.append((argus.time(name, sizes=sizes).microseconds, name))
        except ValueError:  # this tile does not take the shape (PerfError, LaunchError)
            continue
    if not timed:
        return None
    best_us, best = min(timed)
    return {"name": f"AMD {best}", "time_us": best_us, "modelled": True}

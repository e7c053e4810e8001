"""AMD's kernels in one room: the amd-aiter gfx942 code objects (`aiter`: fetched and cached),
the harness that runs them in the emulator against numpy (`harness`), how the performance
model samples and scales each family (`timing`), the calibration that fits the model to AMD's
published figures (`calibrate`), and which of them does the work of which Argus family
(`COUNTERPARTS`, the search's reward reference).
"""

from __future__ import annotations

import re

import attrs

#: the M tiles of aiter's bf16 GEMMs (bf16gemm_outf32_tn_{tile}x64_pf3)
TILES = (32, 48, 64, 96)
GEMMS = tuple(f"bf16gemm_outf32_tn_{tile}x64_pf3" for tile in TILES)
#: a bf16 GEMM's name anywhere in a string (the tuned-GEMM CSV's kernelName); group 1 the tile
GEMM_NAME = re.compile(rf"bf16gemm_outf32_tn_({'|'.join(map(str, TILES))})x64_pf3")


@attrs.frozen
class Counterpart:
    """AMD kernels doing a family's work, and their sizes for a problem (None: not this one)."""

    kernels: tuple[str, ...]
    sizes: object = attrs.field(eq=False)  # (sizes, pinned params) -> vendor sizes | None


#: Argus families' counterparts among the amd-aiter gfx942 code objects
COUNTERPARTS = {
    # C = A @ B.T, bf16 in, f32 out: the same contract as aiter's bf16gemm_outf32_tn
    "gemm": Counterpart(GEMMS, lambda s, p: {"m": s["M"], "n": s["N"], "k": s["K"], "splitk": 1}),
    # aiter's forward attention is head_dim 128; the model times its non-causal form only
    "attention_fwd": Counterpart(("fwd_hd128_bf16",), lambda s, p: None if (
        s["D"] != 128 or p.get("causal")) else {"b": 1, "h": s["BH"], "s": s["S"],
                                                "sk": s["S"]}),
}

__all__ = ["TILES", "GEMMS", "GEMM_NAME", "Counterpart", "COUNTERPARTS", "aiter", "calibrate",
           "harness", "timing"]

"""The MoE expert GEMM compiled once and run in the strict emulator (strict memory) on chosen
routings: experts no token chose (no row block), one token, every token on one expert, rows that
fill their blocks exactly, against numpy."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ml_dtypes import bfloat16

import argus
from argus.kernels import library
from argus.kernels.moe import pack, reference

MOE = library()["moe_gemm"]


def run_routing(choice, experts: int, H: int = 64, N: int = 64, block_m: int = 64, seed=0):
    """(max error relative to the output's scale, emulation) for one routing."""
    compiled = argus.compile(MOE.kernel, block_m=block_m)
    choice, sorted_ids, block_expert = pack(choice, experts, block_m)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((len(choice), H)).astype(bfloat16)
    W = rng.standard_normal((experts, N, H)).astype(bfloat16)
    Y = np.full((len(choice), N), np.nan, np.float32)          # every row must be written
    emulation = compiled.run(X=X, W=W, sorted_ids=sorted_ids, block_expert=block_expert, Y=Y,
                             check="strict")
    want = reference(X, W, choice)
    return float(np.abs(Y - want).max() / max(1.0, np.abs(want).max())), emulation


@pytest.mark.parametrize("choice,experts", [
    ([0, 2] * 50, 4),                  # experts 1 and 3 get no tokens
    ([3], 4),                          # one token: one padded row block
    ([1] * 128, 3),                    # every token on one expert, blocks filled exactly
    (list(range(5)) * 13 + [4], 6),    # expert 5 empty, the last expert one row more
], ids=["empty-experts", "one-token", "one-expert", "tail-expert"])
def test_moe_routings_match_numpy(choice, experts):
    error, emulation = run_routing(choice, experts)
    assert error < MOE.tolerance, error
    assert not emulation.hazards
    blocks = len(pack(choice, experts, 64)[2])
    assert emulation.workgroups == blocks                   # one per row block and N tile


@settings(max_examples=max(2, settings.default.max_examples // 15), deadline=None)
@given(tokens=st.integers(1, 150), experts=st.integers(1, 5), seed=st.integers(0, 99))
def test_moe_random_routings(tokens, experts, seed):
    choice = np.random.default_rng(seed).integers(0, experts, tokens)
    error, _ = run_routing(choice, experts, seed=seed)
    assert error < MOE.tolerance, error


def test_the_k_loop_requests_its_operands_before_its_mfmas_and_adds_no_addresses():
    # the gathered rows' address sums are loop-invariant: made once before the loop, shared by
    # the pieces that differ only in their offset field
    text = argus.compile(MOE.kernel).text
    body = text.split(".Lloop1:")[1].split("s_cbranch_scc1 .Lloop1")[0]
    lines = [line.split()[0] for line in body.splitlines() if line.strip()
             and not line.strip().startswith(";")]
    assert "v_add_u32_e32" not in lines
    first_mfma = lines.index(next(op for op in lines if op.startswith("v_mfma")))
    loads = [i for i, op in enumerate(lines) if op.startswith("buffer_load")]
    assert loads and max(loads) < first_mfma

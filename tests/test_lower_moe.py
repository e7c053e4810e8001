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


def loop_body(lds: bool) -> list[str]:
    text = argus.compile(MOE.kernel, lds=lds).text
    body = text.split(".Lloop1:")[1].split("s_cbranch_scc1 .Lloop1")[0]
    return [line.split()[0] for line in body.splitlines() if line.strip()
            and not line.strip().startswith(";")]


def test_without_lds_the_k_loop_requests_its_operands_first_and_adds_no_addresses():
    # the gathered rows' address sums are loop-invariant: made once before the loop, shared by
    # the pieces that differ only in their offset field
    lines = loop_body(lds=False)
    assert "v_add_u32_e32" not in lines and not any(op.startswith("ds_") for op in lines)
    first_mfma = lines.index(next(op for op in lines if op.startswith("v_mfma")))
    loads = [i for i, op in enumerate(lines) if op.startswith("buffer_load")]
    assert loads and max(loads) < first_mfma


def test_with_lds_the_next_tile_is_in_flight_while_the_mfmas_read_lds():
    lines = loop_body(lds=True)
    mfmas = [i for i, op in enumerate(lines) if op.startswith("v_mfma")]
    loads = [i for i, op in enumerate(lines) if op.startswith("buffer_load")]
    writes = [i for i, op in enumerate(lines) if op.startswith("ds_write")]
    assert loads and writes and mfmas
    # each unrolled copy: the next tile's global loads, then MFMAs fed by ds_read, then the
    # tile goes to the other LDS slot
    assert min(loads) < min(mfmas) and max(writes) > max(mfmas)
    assert sum(op.startswith("ds_read") for op in lines) == 2 * len(mfmas)
    assert lines.count("s_barrier") == 2      # one per K tile (unrolled by the two stages)


@pytest.mark.parametrize("lds", [False, True])
def test_both_roads_match_numpy(lds):
    # the staged kernel reads every X and W element once per workgroup instead of once per
    # wave that needs it (modelled: the MI300X model, no GPU here)
    compiled = argus.compile(MOE.kernel, lds=lds)
    choice, sorted_ids, block_expert = pack([0, 1, 1, 2] * 40, 3, 64)
    rng = np.random.default_rng(1)
    X = rng.standard_normal((len(choice), 128)).astype(bfloat16)
    W = rng.standard_normal((3, 64, 128)).astype(bfloat16)
    Y = np.full((len(choice), 64), np.nan, np.float32)
    compiled.run(X=X, W=W, sorted_ids=sorted_ids, block_expert=block_expert, Y=Y,
                 check="strict")
    want = reference(X, W, choice)
    assert np.abs(Y - want).max() / np.abs(want).max() < MOE.tolerance


def test_lds_staging_is_modelled_faster_at_a_large_shape():
    from argus.kernels.moe import route

    _, ids, blocks = route(4096, 8, 64, np.random.default_rng(0))
    sizes = {"TOKENS": 4096, "H": 4096, "E": 8, "N": 4096, "P": len(ids),
             "BLOCKS": len(blocks)}
    staged, direct = (argus.time(argus.compile(MOE.kernel, lds=lds), sizes=sizes).microseconds
                      for lds in (True, False))
    # 1.6x since the model reads cross-XCD repeats of a round from HBM (perf.model.traffic);
    # 2x before
    assert staged * 1.5 < direct


def test_fp8_moe_gemm_is_proved_and_matches_numpy_in_the_strict_emulator():
    # e4m3fnuz X and W on v_mfma_f32_16x16x32_fp8_fp8, 32-row blocks, loads two K tiles ahead
    # (bench_vs_aiter's configuration): proved for every size, then emulated (strict) on a
    # routing with an empty expert and ragged blocks
    from ml_dtypes import float8_e4m3fnuz

    fp8 = library()["moe_gemm_fp8"]
    params = dict(block_m=32, block_n=128, block_k=64, prefetch=2,
                  instr="v_mfma_f32_16x16x32_fp8_fp8")
    report = argus.verify(fp8.kernel, timeout_ms=120_000, **params)   # LDS races: slow z3
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    compiled = argus.compile(fp8.kernel, verify=False, **params)
    assert "v_mfma_f32_16x16x32_fp8_fp8" in compiled.text
    choice, sorted_ids, block_expert = pack([0, 2] * 20 + [2] * 13, 3, 32)
    rng = np.random.default_rng(1)
    X = (4 * rng.standard_normal((len(choice), 192))).astype(float8_e4m3fnuz)
    W = (4 * rng.standard_normal((3, 128, 192))).astype(float8_e4m3fnuz)
    Y = np.full((len(choice), 128), np.nan, np.float32)
    compiled.run(X=X, W=W, sorted_ids=sorted_ids, block_expert=block_expert, Y=Y,
                 check="strict")
    want = reference(X, W, choice)         # fp8 products are exact; f32 sums in another order
    assert np.abs(Y - want).max() <= 1e-5 * np.abs(want).max()


def test_k_blocked_fp8_moe_gemm_is_proved_and_matches_numpy():
    # the weights in 64-column K blocks (whole cache lines per K tile): the tags follow the
    # blocked layout, so the proof covers the rearrangement too
    from ml_dtypes import float8_e4m3fnuz

    from argus.kernels.moe import kblock_weights

    blocked = library()["moe_gemm_fp8_kblocked"]
    report = argus.verify(blocked.kernel, timeout_ms=120_000)   # LDS races: slow z3 queries
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    compiled = argus.compile(blocked.kernel, verify=False)
    choice, sorted_ids, block_expert = pack([1] * 33 + [0, 1] * 9, 3, 32)
    rng = np.random.default_rng(2)
    X = (4 * rng.standard_normal((len(choice), 192))).astype(float8_e4m3fnuz)
    W = (4 * rng.standard_normal((3, 128, 192))).astype(float8_e4m3fnuz)
    Y = np.full((len(choice), 128), np.nan, np.float32)
    compiled.run(X=X, W=kblock_weights(W), sorted_ids=sorted_ids, block_expert=block_expert,
                 Y=Y, check="strict")
    want = reference(X, W, choice)
    assert np.abs(Y - want).max() <= 1e-5 * np.abs(want).max()
    assert np.abs(blocked.reference({"X": X, "W": kblock_weights(W), "choice": choice}, {})
                  - want).max() == 0


def test_k_blocked_fp8_moe_gemm_four_tiles_ahead_is_proved_and_matches_numpy():
    # prefetch=4 (bench_vs_aiter's 32x64 tile): three K tiles ride in registers, the loop
    # unrolled 4 times so they rotate by renaming; 7 K tiles leave a partial unrolled trip,
    # and 45 tokens over 3 experts a ragged last block
    from ml_dtypes import float8_e4m3fnuz

    from argus.kernels.moe import kblock_weights

    blocked = library()["moe_gemm_fp8_kblocked"]
    params = dict(block_m=32, block_n=64, prefetch=4)
    report = argus.verify(blocked.kernel, timeout_ms=120_000, **params)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    compiled = argus.compile(blocked.kernel, verify=False, **params)
    choice, sorted_ids, block_expert = pack([2, 0, 2] * 15, 3, 32)
    rng = np.random.default_rng(3)
    X = (4 * rng.standard_normal((len(choice), 7 * 64))).astype(float8_e4m3fnuz)
    W = (4 * rng.standard_normal((3, 64, 7 * 64))).astype(float8_e4m3fnuz)
    Y = np.full((len(choice), 64), np.nan, np.float32)
    compiled.run(X=X, W=kblock_weights(W), sorted_ids=sorted_ids, block_expert=block_expert,
                 Y=Y, check="strict")
    want = reference(X, W, choice)
    assert np.abs(Y - want).max() <= 1e-5 * np.abs(want).max()


def test_a_96_column_fp8_tile_copies_in_narrower_vectors():
    # 96 x 64 fp8 is 6144 bytes, not whole 16-byte loads over 256 threads: 8 bytes each, in 3
    # (N = 768, an inter of 384, splits into 8 such column blocks); proved and emulated
    from ml_dtypes import float8_e4m3fnuz

    from argus.kernels.moe import _copy_vector, kblock_weights

    assert _copy_vector(96, 64, 1) == 8 and _copy_vector(128, 64, 1) == 16
    assert _copy_vector(3, 5, 1) == 1
    blocked = library()["moe_gemm_fp8_kblocked"]
    params = dict(block_m=32, block_n=96)
    report = argus.verify(blocked.kernel, timeout_ms=120_000, **params)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    compiled = argus.compile(blocked.kernel, verify=False, **params)
    choice, sorted_ids, block_expert = pack([1, 0] * 9 + [1], 2, 32)
    rng = np.random.default_rng(4)
    X = (4 * rng.standard_normal((len(choice), 3 * 64))).astype(float8_e4m3fnuz)
    W = (4 * rng.standard_normal((2, 192, 3 * 64))).astype(float8_e4m3fnuz)
    Y = np.full((len(choice), 192), np.nan, np.float32)
    compiled.run(X=X, W=kblock_weights(W), sorted_ids=sorted_ids, block_expert=block_expert,
                 Y=Y, check="strict")
    want = reference(X, W, choice)
    assert np.abs(Y - want).max() <= 1e-5 * np.abs(want).max()


def test_fp8_moe_gemm_with_weights_straight_to_registers_is_proved_and_matches_numpy():
    # moe_gemm_fp8_direct (bench_vs_aiter's 32x128 tile): only X goes through LDS, each wave
    # loads its own columns' weights in the MFMA's layout; 6 K tiles (whole windows of 2),
    # 37 tokens over 3 experts
    from ml_dtypes import float8_e4m3fnuz

    from argus.kernels.moe import kblock_weights

    direct = library()["moe_gemm_fp8_direct"]
    params = dict(block_m=32, block_n=128, prefetch=2)
    report = argus.verify(direct.kernel, timeout_ms=120_000, **params)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    compiled = argus.compile(direct.kernel, verify=False, **params)
    assert compiled.ir.lds_bytes == 2 * 32 * 64                    # X's two slots, no W
    # the two k steps of a K tile packed per lane: each W load is a lane's 16 contiguous bytes
    # (whole 128-byte lines, one dwordx4 per 4 MFMAs here: 2 steps x 2 row repetitions), each
    # A read a ds_read_b128 feeding both steps
    body = compiled.text.split(".Lloop1:")[1].split("s_cbranch_scc1 .Lloop1")[0]
    ops = [line.split()[0] for line in body.splitlines()
           if line.strip() and not line.strip().startswith(";")]
    mfmas = sum(op.startswith("v_mfma") for op in ops)
    assert ops.count("buffer_load_dwordx4") * 4 == mfmas
    assert ops.count("ds_read_b128") * 4 == mfmas and "ds_read_b64" not in ops
    choice, sorted_ids, block_expert = pack([0, 2, 2] * 12 + [0], 3, 32)
    rng = np.random.default_rng(5)
    X = (4 * rng.standard_normal((len(choice), 6 * 64))).astype(float8_e4m3fnuz)
    W = (4 * rng.standard_normal((3, 256, 6 * 64))).astype(float8_e4m3fnuz)
    Y = np.full((len(choice), 256), np.nan, np.float32)
    compiled.run(X=X, W=kblock_weights(W), sorted_ids=sorted_ids, block_expert=block_expert,
                 Y=Y, check="strict")
    want = reference(X, W, choice)
    assert np.abs(Y - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("name,params,topk", [
    ("moe_gemm_fp8_direct", dict(block_m=32, block_n=128, prefetch=2), 8),
    ("moe_gemm_fp8_kblocked", dict(block_m=64, block_n=64, prefetch=2), 2),
    ("moe_gemm_fp8", dict(block_m=32, block_n=64, block_k=64, prefetch=2,
                          instr="v_mfma_f32_16x16x32_fp8_fp8"), 4),
], ids=["direct-top8", "kblocked-top2", "row-major-top4"])
def test_top_k_fp8_moe_reads_x_per_token_is_proved_and_matches_numpy(name, params, topk):
    # X holds each token once and is gathered by sorted id // topk (AMD's stage-1 layout), Y a
    # row per route token * topk + slot: proved for every size (the MFMA's A rows are the
    # tokens of the sorted ids, each stored to a route of its token), then emulated (strict,
    # NaN-prefilled Y: every route written) on a routing sending each token to topk experts
    from ml_dtypes import float8_e4m3fnuz

    from argus.kernels.moe import kblock_weights, route

    entry = library()[name]
    report = argus.verify(entry.kernel, timeout_ms=120_000, topk=topk, **params)
    assert report.ok and report.proved_for_all_sizes and report.count("proved") > 0, str(report)
    compiled = argus.compile(entry.kernel, verify=False, topk=topk, **params)
    assert "v_ashrrev_i32_e32" in compiled.text                 # id // topk, a shift
    tokens, experts, H, N = 13, topk + 1, 4 * 64, 128
    choice, sorted_ids, block_expert = route(tokens, experts, params["block_m"],
                                             np.random.default_rng(topk), topk)
    assert len(choice) == tokens * topk
    rng = np.random.default_rng(6)
    X = (4 * rng.standard_normal((tokens, H))).astype(float8_e4m3fnuz)
    W = (4 * rng.standard_normal((experts, N, H))).astype(float8_e4m3fnuz)
    Y = np.full((tokens * topk, N), np.nan, np.float32)
    weights = W if name == "moe_gemm_fp8" else kblock_weights(W)
    emulation = compiled.run(X=X, W=weights, sorted_ids=sorted_ids,
                             block_expert=block_expert, Y=Y, check="strict")
    assert not emulation.hazards
    want = reference(X, W, choice, topk)
    assert np.abs(Y - want).max() <= 1e-5 * np.abs(want).max()
    # the reference interpreter agrees (the library entry's own reference, too)
    inputs = {"X": X, "W": weights, "sorted_ids": sorted_ids, "block_expert": block_expert,
              "Y": np.full_like(Y, np.nan)}
    interpreted = argus.interpret(entry.kernel, inputs, topk=topk, **params)
    assert np.abs(interpreted.outputs["Y"] - want).max() <= 1e-5 * np.abs(want).max()
    assert np.abs(entry.reference({**inputs, "choice": choice}, {"topk": topk}) - want).max() \
        <= 1e-5 * np.abs(want).max()


def test_the_scatters_row_ids_are_requested_together_before_the_last_tiles():
    # after the K loop: every row id the Y stores need is requested in one run, before the
    # last tiles' MFMAs, so their latencies overlap each other and the MFMAs (one id at a
    # time, each store had waited a memory latency for its own: 8 a wave)
    compiled = argus.compile(library()["moe_gemm_fp8_direct"].kernel, verify=False, topk=8,
                             block_m=32, block_n=128, prefetch=2)
    tail = compiled.text.split("s_cbranch_scc1 .Lloop1")[1]
    lines = [line for line in tail.splitlines()
             if line.strip() and not line.strip().startswith((";", "."))]
    ids = [n for n, line in enumerate(lines) if "gathered row id" in line]
    stores = [n for n, line in enumerate(lines) if line.split()[0].startswith("buffer_store")]
    mfmas = [n for n, line in enumerate(lines) if line.split()[0].startswith("v_mfma")]
    # one id a lane per 16-route block of the transposed tile: 2 a wave
    assert len(ids) == 2 and stores and max(ids) < min(stores)
    assert ids == list(range(ids[0], ids[0] + len(ids)))        # back to back, no wait between
    assert max(mfmas) > max(ids)


def test_the_direct_kernels_window_rotates_without_moves_and_stores_whole_rows():
    # moe_gemm_fp8_direct computes the transposed product (W as the MFMA's A): each lane's
    # accumulators are 4 consecutive columns of one route, one dwordx4 store each (4 a wave,
    # where the untransposed tile stored 16 dwords a wave, each a fixed issue time on the
    # CU's addresser at the workgroup's end). Its K loop, unrolled by the window of 4 tiles,
    # loads each tile into the registers of the one whose MFMAs were just issued: no moves
    # (each move of a loaded register had waited for its load, draining the window every
    # other trip), and H a multiple of the window leaves no remainder iterations.
    compiled = argus.compile(library()["moe_gemm_fp8_direct"].kernel, verify=False, topk=8,
                             block_m=32, block_n=128, prefetch=4)
    text = compiled.text
    body = text.split(".Lloop1:")[1].split("s_cbranch_scc1 .Lloop1")[0]
    ops = [line.split()[0] for line in body.splitlines()
           if line.strip() and not line.strip().startswith(";")]
    assert ops.count("buffer_load_dwordx4") == 4 * 2 and "v_mov_b32_e32" not in ops
    after = text.split("s_cbranch_scc1 .Lloop1")[1]
    assert "v_mov_b32_e32" not in after and ".Lrest" not in after
    stores = [line.split()[0] for line in after.splitlines()
              if line.strip().startswith("buffer_store")]
    assert stores == ["buffer_store_dwordx4"] * 4
    assert compiled.lowered.vgprs <= 80                 # 6 workgroups a CU
    # the row ids X is gathered by go out first, and the first weights before the wait for
    # them (the first X rows had held the first weights back a memory latency)
    loads = [line for line in text.split(".Lloop1:")[0].splitlines()
             if line.strip().startswith("buffer_load")]
    assert "gathered row id" in loads[0] and loads[1].split()[0] == "buffer_load_dwordx4"
    # 12 K tiles: two trips of the unrolled loop, then the window's last 4 tiles
    from ml_dtypes import float8_e4m3fnuz

    from argus.kernels.moe import kblock_weights, route

    tokens, experts, H, N = 11, 9, 12 * 64, 128
    choice, sorted_ids, block_expert = route(tokens, experts, 32, np.random.default_rng(7), 8)
    rng = np.random.default_rng(8)
    X = (4 * rng.standard_normal((tokens, H))).astype(float8_e4m3fnuz)
    W = (4 * rng.standard_normal((experts, N, H))).astype(float8_e4m3fnuz)
    Y = np.full((tokens * 8, N), np.nan, np.float32)
    emulation = compiled.run(X=X, W=kblock_weights(W), sorted_ids=sorted_ids,
                             block_expert=block_expert, Y=Y, check="strict")
    assert not emulation.hazards
    want = reference(X, W, choice, 8)
    assert np.abs(Y - want).max() <= 1e-5 * np.abs(want).max()


def test_the_direct_kernel_refuses_a_dim_of_part_windows():
    # H must hold whole windows of prefetch K tiles (64 columns each): 3 tiles at prefetch 2
    # is refused, naming the assumption
    from argus.isa_cdna3.perf.params import PerfError

    compiled = argus.compile(library()["moe_gemm_fp8_direct"].kernel, verify=False, topk=1,
                             block_m=32, block_n=128, prefetch=2)
    with pytest.raises(PerfError, match=r"H=192 violates the assumption `H % 128 == 0`"):
        argus.time(compiled, sizes={"TOKENS": 32, "ROUTES": 32, "H": 192, "E": 2, "N": 128,
                                    "P": 64, "BLOCKS": 2, "KT": 3})

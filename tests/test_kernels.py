"""Library kernels in the reference interpreter: numpy agreement, seeded defects reported with
thread, element and op location, IR text round trip, and the `argus run` command."""

from __future__ import annotations

import pathlib

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from roads import interpreted

import argus.lang as T
from argus.absint.concrete import run
from argus.cli import main
from argus.errors import ArgusError
from argus.ir.text import parse_kernel, print_kernel
from argus.ir.types import ThreadLayout, thread_vars
from argus.kernels import attention, gemm, library
from argus.lang import Tensor, TileSpec

GEMM_SOURCE = pathlib.Path(gemm.__file__)
ATTENTION_SOURCE = pathlib.Path(attention.__file__)
#: the attention kernel's mask assertion, found by its text
MASK_ASSERTION = "T.tag_assert(lambda X: And(*(fact(X) for _, _, fact in edges))"


def line_of(path: pathlib.Path, needle: str) -> int:
    """The 1-based line of the unique occurrence of `needle` in a kernel source."""
    lines = [n for n, text in enumerate(path.read_text().splitlines(), 1) if needle in text]
    assert len(lines) == 1, f"{needle!r} occurs on lines {lines}"
    return lines[0]


def bf16(rng, *shape):
    return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)


def run_gemm(kernel, M, N, K, seed=0, **options):
    rng = np.random.default_rng(seed)
    a, b = bf16(rng, M, K), bf16(rng, N, K)
    result = run(kernel, {"A": a, "B": b, "C": np.zeros((M, N), np.float32)}, **options)
    return result, gemm.reference(a, b)


@pytest.mark.parametrize("M,N,K,params", [
    (64, 64, 32, {}),
    (128, 64, 96, {}),
    (64, 192, 64, {"swizzle": False}),
    (128, 128, 128, {"block_m": 128, "block_n": 128, "block_k": 64}),
    (64, 128, 192, {"split_k": 3}),
    (64, 96, 128, {"instr": "v_mfma_f32_16x16x16_bf16", "block_n": 32, "block_k": 64}),
])
def test_gemm_matches_numpy(M, N, K, params):
    result, expected = run_gemm(gemm.gemm.trace(**params), M, N, K)
    assert result.ok, result.report()
    np.testing.assert_allclose(result.outputs["C"], expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("head_dim,causal,BH,S", [
    (64, False, 2, 128), (64, True, 1, 256), (128, False, 1, 128), (128, True, 1, 256),
])
def test_attention_matches_numpy(head_dim, causal, BH, S):
    rng = np.random.default_rng(1)
    q, k, v = (bf16(rng, BH, S, head_dim) for _ in range(3))
    out = np.zeros((BH, S, head_dim), ml_dtypes.bfloat16)
    kernel = attention.attention_fwd.trace(head_dim=head_dim, causal=causal)
    result = run(kernel, {"Q": q, "K": k, "V": v, "O": out})
    assert result.ok, result.report()
    got = result.outputs["O"].astype(np.float64)
    expected = attention.reference(q, k, v, causal)
    # P is rounded to bf16 before P @ V and O to bf16 at the store
    np.testing.assert_allclose(got, expected, atol=2e-2, rtol=2e-2)
    if causal:
        unmasked = attention.reference(q, k, v, False)
        assert np.abs(got - unmasked).max() > 0.1, "the causal mask changed nothing"


# ---------------------------------------------------------------------------------------------
# seeded defects


def gemm_variant(**hooks):
    @T.kernel(waves=4)
    def gemm_bug(A: Tensor("bf16", "M", "K"), B: Tensor("bf16", "N", "K"),
                 C: Tensor("f32", "M", "N")):
        gemm.gemm_program(A, B, C, block_m=64, block_n=64, block_k=32, swizzle=True, **hooks)
    return gemm_bug.ir


def first(result, kind):
    found = [v for v in result.violations if v.kind == kind]
    assert found, f"no {kind} among:\n{result.report()}"
    return found[0]


#: a tag assertion's violation is reported at the assertion's own line (the verifier's
#: obligation is there too), the one after the MFMA it checks
MFMA_ASSERT_LINE = "T.tag_assert(predicate, statement)"
A_READ_LINE = "a = [a_read.load("
#: the main loop stages the next K tile through `stage`, as the prologue does
A_STORE_LINE = "a_smem.store((slot, 0, 0), tiles[0])"


def test_forgotten_swizzle_on_read_is_reported_at_the_mfma_assertion():
    result, expected = run_gemm(gemm_variant(read_swizzled=False), 64, 64, 64)
    bug = first(result, "tag-assertion")
    assert bug.loc.startswith(f"argus/kernels/gemm.py:{line_of(GEMM_SOURCE, MFMA_ASSERT_LINE)}:")
    assert bug.workgroup == (0, 0, 0) and 0 <= bug.wave < 4 and 0 <= bug.lane < 64
    assert set(bug.element) == {"block", "i", "j", "k"}
    assert bug.tags["A"]["k"] != bug.tags["B"]["k"]
    assert not np.allclose(result.outputs["C"], expected, atol=1e-2)


def test_wrong_double_buffer_slot_is_a_race_and_a_stale_read():
    result, _ = run_gemm(gemm_variant(next_slot=lambda kt: kt % 2), 64, 64, 96)
    race = first(result, "lds-race")
    assert race.loc.startswith(f"argus/kernels/gemm.py:{line_of(GEMM_SOURCE, A_STORE_LINE)}:")
    assert "write-after-read" in race.message and race.iteration
    stale = first(result, "lds-uninitialised")
    assert stale.loc.startswith(f"argus/kernels/gemm.py:{line_of(GEMM_SOURCE, A_READ_LINE)}:")
    assert stale.element["d0"] == 1


def test_missing_barrier_is_a_read_after_write_race():
    result, _ = run_gemm(gemm_variant(sync=False), 64, 64, 96)
    race = first(result, "lds-race")
    assert race.loc.startswith(f"argus/kernels/gemm.py:{line_of(GEMM_SOURCE, A_READ_LINE)}:")
    assert "read-after-write" in race.message
    store_line = line_of(GEMM_SOURCE, A_STORE_LINE)
    assert f"at argus/kernels/gemm.py:{store_line}:" in race.detail
    assert race.iteration == {next(iter(race.iteration)): 1}
    assert {"d0", "d1", "d2", "address"} <= set(race.element)
    # the racy read's tags are unknown, so the MFMA assertion downstream fails too
    assert first(result, "tag-assertion").tags["A"]["k"] is None


def test_split_k_with_a_plain_store_is_a_global_race():
    import attrs

    from argus.ir import ops as O

    kernel = gemm.gemm.trace(split_k=2)
    plain = attrs.evolve(kernel, body=mutate(
        kernel.body, lambda op: isinstance(op, O.GlobalAtomicAdd),
        lambda op: O.GlobalStore(**{f.name: getattr(op, f.name)
                                    for f in attrs.fields(O.GlobalStore)}))).verify()
    result, expected = run_gemm(plain, 64, 64, 128)
    race = first(result, "global-race")
    assert race.workgroup == (0, 0, 1) and "workgroups (0, 0, 0) and (0, 0, 1)" in race.message
    assert not np.allclose(result.outputs["C"], expected, atol=1e-2)


def test_wrong_mfma_k_mapping_is_reported_with_the_register_slot():
    wave, lane, slot = thread_vars(4, 4)
    # k interleaved across the lane halves instead of 4 consecutive k per lane (a kWidth bug)
    swapped = TileSpec((64, 8), ThreadLayout(4, 4, (wave // 2 * 32 + lane % 32,
                                                    lane // 32 + 2 * slot)))
    result, expected = run_gemm(gemm_variant(a_fragment=swapped), 64, 64, 32)
    bug = first(result, "tag-assertion")
    assert bug.loc.startswith(f"argus/kernels/gemm.py:{line_of(GEMM_SOURCE, MFMA_ASSERT_LINE)}:")
    assert bug.tags["A"]["k"] != bug.tags["B"]["k"]
    assert f"a[{bug.slot}]" in bug.detail
    assert bug.register == f"register {bug.slot // 2} (bf16 element {bug.slot % 2})"
    assert f"slot {bug.slot} = register" in str(bug)
    assert not np.allclose(result.outputs["C"], expected, atol=1e-2)


def attention_variant(**hooks):
    @T.kernel(waves=4)
    def attention_bug(Q: Tensor("bf16", "BH", "S", "D"), K: Tensor("bf16", "BH", "S", "D"),
                      V: Tensor("bf16", "BH", "S", "D"), O: Tensor("bf16", "BH", "S", "D")):
        attention.attention_program(Q, K, V, O, head_dim=64, causal=True, **hooks)
    return attention_bug.ir


def run_attention(kernel, S=128):
    rng = np.random.default_rng(2)
    q, k, v = (bf16(rng, 1, S, 64) for _ in range(3))
    return run(kernel, {"Q": q, "K": k, "V": v, "O": np.zeros_like(q)})


def test_causal_mask_on_the_wrong_coordinates_is_reported_at_the_mask_assertion():
    result = run_attention(attention_variant(keep=lambda kv0, q0, i, j: kv0 + i < q0 + j))
    bug = first(result, "tag-assertion")
    assert bug.loc.startswith(
        "argus/kernels/attention.py:" + str(line_of(
            ATTENTION_SOURCE, MASK_ASSERTION)) + ":")
    assert bug.tags["X"]["key"] == bug.tags["X"]["query"]


def test_a_tail_mask_that_keeps_one_key_too_many_is_refuted_for_symbolic_lengths():
    """Keys past S read 0 (guarded loads) and the last block masks them; a mask that lets
    key S through is refuted at the mask, on a length that is not a multiple of the block."""
    from argus import verify

    report = verify(attention_variant(tail=lambda kv0, i, keys: kv0 + i <= keys))
    [refuted] = report.refuted
    cex = refuted.counterexample
    assert refuted.loc.startswith("argus/kernels/attention.py:" + str(line_of(
        ATTENTION_SOURCE, MASK_ASSERTION)) + ":")
    assert "key < SK" in refuted.message
    assert cex.confirmed and cex.tags["X"]["key"] == cex.sizes["S"]
    assert cex.sizes["S"] % attention.BLOCK_KV


def test_attention_without_the_staging_barrier_races_on_k():
    result = run_attention(attention_variant(sync=False), S=256)
    race = first(result, "lds-race")
    assert race.loc.startswith(
        f"argus/kernels/attention.py:{line_of(ATTENTION_SOURCE, 'k_smem.load((slot, 0, MK * t)')}:")
    assert "read-after-write" in race.message
    assert f"attention.py:{line_of(ATTENTION_SOURCE, 'k_smem.store((slot, 0, 0)')}:" in race.detail


def test_softmax_reduction_that_keeps_the_key_tag_poisons_p_at_the_pv_mfma():
    # the row max mixes 32 keys, so a kept `key` tag becomes unknown and flows into P
    result = run_attention(attention_variant(drop=()))
    bug = first(result, "tag-assertion")
    assert bug.loc.startswith(
        "argus/kernels/attention.py:" + str(line_of(
            ATTENTION_SOURCE, "T.tag_assert(lambda A, B, C: And(A.key.eq(B.key)")) + ":")
    assert bug.tags["B"]["key"] is None and bug.tags["A"]["key"] is not None


# ---------------------------------------------------------------------------------------------
# IR text and the command line


@pytest.mark.parametrize("kernel", [
    gemm.gemm.trace(), gemm.gemm.trace(block_m=128, block_n=128, block_k=64, swizzle=False),
    attention.attention_fwd.trace(), attention.attention_fwd.trace(head_dim=128, causal=True),
    gemm.gemm.trace(split_k=4), library()["moe_gemm"].kernel.trace(),
], ids=["gemm", "gemm-128", "attention", "attention-128-causal", "gemm-split-k", "moe"])
def test_kernel_ir_text_round_trips(kernel):
    text = print_kernel(kernel)
    again = parse_kernel(text)
    assert again == kernel
    assert print_kernel(again) == text


def test_every_library_kernel_runs_clean_from_the_library():
    for name in library():
        check = interpreted(name).interp
        assert check.ok, (name, check.message, check.run and check.run.report())


def test_argus_run_interp_reports_and_exits_zero():
    out = CliRunner().invoke(main, ["run", "attention_fwd", "--interp", "--param", "causal=true",
                                    "--size", "S=256"])
    assert out.exit_code == 0, out.output
    assert "no violations" in out.output and "S=256" in out.output


def test_argus_run_json_is_machine_readable():
    import json

    out = CliRunner().invoke(main, ["run", "moe_gemm", "--interp", "--json", "--size", "E=2"])
    assert out.exit_code == 0, out.output
    record = json.loads(out.output)
    assert record["ok"] and record["violations"] == [] and record["sizes"]["E"] == 2


def test_argus_run_rejects_sizes_that_break_an_assumption():
    out = CliRunner().invoke(main, ["run", "gemm", "--interp", "--size", "M=100"])
    assert out.exit_code != 0
    assert "violates the assumption `M % 64 == 0`" in out.output


# ---------------------------------------------------------------------------------------------
# MoE: gathered rows


def test_moe_gemm_matches_numpy_with_padded_expert_blocks():
    for sizes in ({"TOKENS": 130, "E": 3, "H": 64, "N": 64}, {"TOKENS": 64, "E": 1}):
        check = interpreted("moe_gemm", sizes, seed=3).interp
        assert check.run.ok, check.run.report()
        assert check.max_error < 1e-5
        bound = check.run.sizes
        assert bound["P"] % 64 == 0 and bound["P"] >= bound["TOKENS"]


def mutate(block, match, change):
    """The block with every op satisfying `match` replaced by `change(op)`, nested ones too."""
    import attrs

    from argus.ir import ops as O

    ops = []
    for op in block.ops:
        if isinstance(op, O.For):
            op = attrs.evolve(op, body=mutate(op.body, match, change))
        elif isinstance(op, O.If):
            op = attrs.evolve(op, then=mutate(op.then, match, change),
                              orelse=mutate(op.orelse, match, change))
        ops.append(change(op) if match(op) else op)
    return attrs.evolve(block, ops=tuple(ops))


def test_moe_store_that_forgets_the_gather_writes_to_the_wrong_tokens():
    import attrs

    from argus.ir import ops as O
    from argus.kernels import moe

    kernel = moe.moe_gemm.ir
    broken = attrs.evolve(kernel, body=mutate(
        kernel.body, lambda op: isinstance(op, O.GlobalStore),
        lambda op: attrs.evolve(op, gather=None))).verify()
    entry = library()["moe_gemm"]
    inputs = entry.inputs({"TOKENS": 100, "E": 2, "H": 32, "N": 64}, {}, seed=4)
    result = run(broken, inputs)
    bug = first(result, "tag-assertion")
    # reported at the store's assertion, the line after the store
    assert_line = line_of(pathlib.Path(moe.__file__), "T.tag_assert(lambda V, D: And(V.token.eq(")
    assert bug.loc.startswith(f"argus/kernels/moe.py:{assert_line}:")
    assert bug.tags["V"]["token"] != bug.tags["D"]["token"]
    assert bug.tags["V"]["col"] == bug.tags["D"]["col"]


# ---------------------------------------------------------------------------------------------
# properties: any admissible configuration is right, and no mutation goes unnoticed


def at_most(examples: int):
    """Fewer examples than the profile asks for, for tests that run whole kernels."""
    return settings(max_examples=min(examples, settings.default.max_examples))


@at_most(12)
@given(st.sampled_from([64, 128]), st.sampled_from([64, 128]), st.sampled_from([16, 32, 64]),
       st.booleans(), st.integers(1, 3), st.integers(1, 2), st.integers(1, 3),
       st.sampled_from([1, 2]))
def test_gemm_is_right_for_any_admissible_configuration(block_m, block_n, block_k, swizzle,
                                                        m_blocks, n_blocks, k_blocks, prefetch):
    if block_m * block_k % 2048 or block_n * block_k % 2048:
        block_k = 32        # the copy gives each of 256 threads whole 8-element vectors
    kernel = gemm.gemm.trace(block_m=block_m, block_n=block_n, block_k=block_k, swizzle=swizzle,
                             prefetch=prefetch)
    # prefetch=2 takes at least two K tiles
    result, expected = run_gemm(kernel, block_m * m_blocks, block_n * n_blocks,
                                block_k * (k_blocks + prefetch - 1))
    assert result.ok, result.report()
    np.testing.assert_allclose(result.outputs["C"], expected, rtol=1e-5, atol=1e-4)


def mutate_nth(block, kind, n, change, counter=None):
    """The block with the n-th op of type `kind` (program order, nested too) replaced."""
    import attrs

    from argus.ir import ops as O

    counter = counter if counter is not None else [0]
    ops = []
    for op in block.ops:
        if isinstance(op, kind):
            if counter[0] == n:
                op = change(op)
            counter[0] += 1
        if isinstance(op, O.For):
            op = attrs.evolve(op, body=mutate_nth(op.body, kind, n, change, counter))
        ops.append(op)
    return attrs.evolve(block, ops=tuple(op for op in ops if op is not None))


def _shift_origin(axis, delta):
    import attrs

    def change(op):
        origin = list(op.origin)
        origin[axis % len(origin)] = origin[axis % len(origin)] + delta
        return attrs.evolve(op, origin=tuple(origin))
    return change


MUTATIONS = {
    "lds-load-origin": ("LdsLoad", _shift_origin),
    "lds-store-origin": ("LdsStore", _shift_origin),
    "global-load-origin": ("GlobalLoad", _shift_origin),
    "global-store-origin": ("GlobalStore", _shift_origin),
    "drop-barrier": ("Barrier", lambda axis, delta: lambda op: None),
}


@at_most(40)
@given(st.sampled_from(sorted(MUTATIONS)), st.integers(0, 30), st.integers(0, 2),
       st.sampled_from([-8, -1, 1, 2, 4, 8, 32]))
def test_a_mutated_gemm_is_either_still_right_or_reported(mutation, nth, axis, delta):
    import attrs

    from argus.ir import ops as O

    kind_name, make = MUTATIONS[mutation]
    kind = getattr(O, kind_name)
    base = gemm.gemm.trace()
    count = sum(isinstance(op, kind) for op in base.ops())
    mutant = attrs.evolve(base, body=mutate_nth(base.body, kind, nth % count, make(axis, delta)))
    result, expected = run_gemm(mutant.verify(), 128, 64, 96, max_violations=1)
    if result.ok:
        # the oracle may only stay silent when the answer is still right
        np.testing.assert_allclose(result.outputs["C"], expected, rtol=1e-5, atol=1e-4)


def test_attention_rejects_unsupported_head_dims():
    from argus.lang import DSLError

    with pytest.raises(DSLError, match="head_dim 96 is not supported"):
        attention.attention_fwd.trace(head_dim=96)
    with pytest.raises(DSLError, match="prefetch=4: the loads run 1, 2 or 3 key blocks ahead"):
        attention.attention_fwd.trace(prefetch=4)


def test_argus_run_prints_the_ir_on_request_and_needs_a_mode():
    out = CliRunner().invoke(main, ["run", "gemm", "--interp", "--ir", "--param", "split_k=2",
                                    "--size", "K=128"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("kernel gemm @") and "global.atomic_add tensor=%C" in out.output
    missing = CliRunner().invoke(main, ["run", "gemm"])
    assert missing.exit_code == 2 and "choose --interp" in missing.output \
        and "--emulate" in missing.output


@at_most(4)
@given(st.sampled_from([64, 128]), st.booleans(), st.integers(1, 3), st.integers(1, 2),
       st.integers(0, 2**31))
def test_attention_is_right_for_any_admissible_shape(head_dim, causal, q_blocks, heads, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (bf16(rng, heads, 128 * q_blocks, head_dim) for _ in range(3))
    result = run(attention.attention_fwd.trace(head_dim=head_dim, causal=causal),
                 {"Q": q, "K": k, "V": v, "O": np.zeros_like(q)})
    assert result.ok, result.report()
    np.testing.assert_allclose(result.outputs["O"].astype(np.float64),
                               attention.reference(q, k, v, causal), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("params", [{}, {"split_k": 2, "instr": "v_mfma_f32_16x16x16_bf16"}])
def test_gemm_loading_two_k_tiles_ahead_is_proved_and_right(params):
    """prefetch=2 carries K tile kt+1 in registers while tile kt+2 is loaded, and consumes the
    last two tiles after the loop: proved for symbolic sizes, right from 2 K tiles (the loop
    does not run) up, odd and even trip counts, and a single K tile breaks its assumption."""
    import argus

    report = argus.verify(gemm.gemm, prefetch=2, **params)
    assert report.ok and not report.unknown, str(report)
    kernel = gemm.gemm.trace(prefetch=2, **params)
    split = params.get("split_k", 1)
    for k_tiles in (2, 3, 4, 5):
        result, expected = run_gemm(kernel, 64, 64, 32 * split * k_tiles)
        assert result.ok, (k_tiles, result.report())
        np.testing.assert_allclose(result.outputs["C"], expected, rtol=1e-5, atol=1e-4)
    with pytest.raises(ArgusError, match="assumption"):
        run_gemm(kernel, 64, 64, 32 * split)


@pytest.mark.parametrize("prefetch,causal", [(2, False), (2, True), (3, False)])
def test_attention_blocks_ahead_in_registers_are_proved_and_right(prefetch, causal):
    """prefetch=2 carries block j+2's K and V in registers through block j (prefetch=3: blocks
    j+2 and j+3, handed down one place per block). prefetch=2's proof ended with 25 Unknown
    obligations whose witnesses did not replay (the carried tiles' `key` tag was widened: no
    iteration-independent invariant describes them); both are proved now, and the interpreter
    finds no violation and the numbers right at lengths up to 5 key blocks (also a single
    block, where the loop does not run and the blocks ahead are loaded past the end)."""
    import argus

    report = argus.verify(attention.attention_fwd, prefetch=prefetch, causal=causal)
    assert report.ok and not report.unknown, str(report)
    kernel = attention.attention_fwd.trace(head_dim=64, causal=causal, prefetch=prefetch)
    rng = np.random.default_rng(2)
    for S in (1, 31, 32, 33, 64, 65, 96, 97, 128, 160):
        q, k, v = (bf16(rng, 1, S, 64) for _ in range(3))
        result = run(kernel, {"Q": q, "K": k, "V": v, "O": np.zeros_like(q)})
        assert result.ok, (S, result.report())
        np.testing.assert_allclose(result.outputs["O"].astype(np.float64),
                                   attention.reference(q, k, v, causal), atol=2e-2, rtol=2e-2)

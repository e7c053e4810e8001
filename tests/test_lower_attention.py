"""The backend's tile-math rules end to end: flash attention compiled and run in the strict
emulator against numpy (head dims, causal mask, several sizes per code object), f32 -> bf16
rounding against ml_dtypes, reductions whose lane exchanges come from the layout, and every IR
op class either lowering or failing at compile time with the op and its DSL line."""

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from ml_dtypes import bfloat16
from roads import emulated

import argus
import argus.lang as T
from argus.asm.launch import bind
from argus.asm.lower import (
    UnsupportedError,
    lanes,  # noqa: F401 (registers its rules, as lower() does)
)
from argus.asm.lower.isel import RULES
from argus.ir import ops as O
from argus.kernels import library
from argus.lang import Tensor

ATTENTION = library()["attention_fwd"]

#: (kernel, tile parameters, scheduling policy, sizes run with the same code object); the causal
#: grids have workgroups with different trip counts, whose waves the emulator runs apart: an MFMA
#: result hazard is judged by each wave's own last writer (regression: BH=2, S=384). Lengths
#: that are not tile multiples run a masked tail; attention_fwd_kv has its own key length.
CONFIGS = [
    ("attention_fwd", {"head_dim": 64}, "interleave",
     [{"BH": 1, "S": 128, "D": 64}, {"BH": 2, "S": 200, "D": 64}]),
    ("attention_fwd", {"head_dim": 64, "causal": True}, "interleave",
     [{"BH": 1, "S": 128, "D": 64}, {"BH": 2, "S": 384, "D": 64}]),
    ("attention_fwd", {"head_dim": 64, "causal": True}, "simple",
     [{"BH": 2, "S": 384, "D": 64}, {"BH": 1, "S": 45, "D": 64}]),
    ("attention_fwd", {"head_dim": 128, "causal": True}, "interleave",
     [{"BH": 3, "S": 256, "D": 128}]),
    ("attention_fwd_kv", {"head_dim": 128, "causal": True}, "interleave",
     [{"BH": 2, "SQ": 150, "SK": 300, "D": 128}]),
    ("attention_fwd_kv", {"head_dim": 64}, "interleave",
     [{"BH": 1, "SQ": 130, "SK": 33, "D": 64}, {"BH": 2, "SQ": 1, "SK": 77, "D": 64}]),
    ("attention_fwd", {"head_dim": 64, "causal": True, "prefetch": 2}, "interleave",
     [{"BH": 2, "S": 200, "D": 64}, {"BH": 1, "S": 32, "D": 64}]),
    ("attention_fwd", {"head_dim": 128, "prefetch": 3}, "interleave",
     [{"BH": 1, "S": 250, "D": 128}, {"BH": 1, "S": 64, "D": 128}]),
    ("attention_fwd", {"head_dim": 128, "rounding": "rtz"}, "interleave",
     [{"BH": 1, "S": 160, "D": 128}]),
    # grouped-query: 3 query heads share each K/V head (causal, a masked tail); 8 waves
    ("attention_fwd_gqa", {"head_dim": 64, "causal": True}, "interleave",
     [{"BH": 2, "G": 3, "S": 200, "D": 64}]),
    ("attention_fwd_gqa_wide", {"head_dim": 128, "causal": True}, "interleave",
     [{"BH": 1, "G": 3, "S": 300, "D": 128}]),
]


@pytest.mark.parametrize("name,params,policy,sizes", CONFIGS,
                         ids=[name + "," + ",".join(f"{k}={v}" for k, v in p.items())
                              + f",{policy}" for name, p, policy, _ in CONFIGS])
def test_attention_matches_numpy_on_the_strict_emulator(name, params, policy, sizes):
    # a kernel that truncates P and O (rounding="rtz") stays within the same tolerance of
    # numpy's float64 reference as one that rounds to nearest even
    for size in sizes:
        done = emulated(name, size, params, seed=3, policy=policy)
        assert done.emulated.ok, (params, size, done.emulated.message)
        assert not done.emulated.run.hazards
        queries = size.get("S", size.get("SQ"))
        block_q = 256 if name == "attention_fwd_gqa_wide" else 128
        assert done.emulated.run.workgroups == size["BH"] * size.get("G", 1) * -(-queries
                                                                             // block_q)
    text = done.compiled.text
    assert "v_exp_f32" in text and "ds_bpermute_b32" in text and "v_perm_b32" in text
    # the last key block's tail mask, and guarded rows: an out-of-range buffer offset per lane
    assert "v_cndmask_b32" in text and "s_cbranch_scc0" in text
    assert "0x80000000" in text


@settings(max_examples=max(2, settings.default.max_examples // 50), deadline=None)
@given(bh=st.integers(1, 2), queries=st.integers(1, 260), extra=st.integers(0, 100),
       own_keys=st.booleans(), causal=st.booleans(), seed=st.integers(0, 9))
def test_attention_sizes(bh, queries, extra, own_keys, causal, seed):
    """Any query length, tile multiple or not; with its own key length (a cache at least as
    long as the queries when causal, any length otherwise) through attention_fwd_kv."""
    if own_keys:
        keys = queries + extra if causal else max(1, extra * 3)
        sizes, name = {"BH": bh, "SQ": queries, "SK": keys, "D": 64}, "attention_fwd_kv"
    else:
        sizes, name = {"BH": bh, "S": queries, "D": 64}, "attention_fwd"
    check = emulated(name, sizes, {"causal": causal}, seed=seed).emulated
    assert check.ok, (sizes, check.message)


def test_causal_masks_bottom_right_against_a_longer_cache():
    """The last query sees every key, the first sees SK - SQ + 1 (numpy reference and kernel
    agree on the convention; a top-left mask would give the first query one key)."""
    from argus.kernels.attention import reference

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, n, 8)) for n in (2, 5, 5))
    out = reference(q, k, v, causal=True)
    for query, seen in ((0, 4), (1, 5)):
        logits = q[0, query] @ k[0, :seen].T / np.sqrt(8)
        weights = np.exp(logits - logits.max())
        assert np.allclose(out[0, query], weights @ v[0, :seen] / weights.sum())


@pytest.mark.parametrize("policy", ["interleave", "simple"])
def test_the_next_key_blocks_loads_are_issued_before_this_blocks_gemms(policy):
    """The software pipeline: in every copy of the loop body (the interleave policy unrolls it
    by its two stages) the global loads of key block j+1 come before block j's first MFMA, and
    their LDS stores after its last one (then the barrier), so both GEMMs and the softmax of
    block j run while block j+1 is in flight."""
    from argus.asm.lower.program import IfElse, Loop, MInst, Skip

    compiled = argus.compile(ATTENTION.kernel, head_dim=64, policy=policy)
    loop = next(item for item in compiled.lowered.items if isinstance(item, Loop))
    opcodes: list[str] = []

    def walk(items):
        for item in items:
            if isinstance(item, MInst):
                opcodes.append(item.opcode)
            for body in ([item.body] if isinstance(item, Loop | Skip) else
                         item.arms if isinstance(item, IfElse) else []):
                walk(body)

    walk(loop.body)
    cuts = [i for i, opcode in enumerate(opcodes) if opcode == "s_barrier"]
    assert len(cuts) == (2 if policy == "interleave" else 1)
    for start, end in zip([0] + cuts[:-1], cuts):
        body = opcodes[start:end]
        at = {kind: [i for i, o in enumerate(body) if o.startswith(kind)]
              for kind in ("buffer_load", "v_mfma", "ds_write")}
        assert at["buffer_load"] and at["v_mfma"] and at["ds_write"]
        assert max(at["buffer_load"]) < min(at["v_mfma"])
        assert max(at["v_mfma"]) < min(at["ds_write"])


def test_two_blocks_ahead_the_loads_stay_in_flight_across_the_iteration():
    """prefetch=2 carries block j+2 in registers through block j; unrolled by its two stages,
    each copy of the body hands those registers to the next without moves, so no wait in the
    loop drains the vector memory queue (vmcnt(0)): the later block's four loads stay in
    flight while this one is staged."""
    compiled = argus.compile(ATTENTION.kernel, head_dim=128, prefetch=2)
    text = compiled.text
    body = text[text.index(".Lloop"):text.index("s_cbranch_scc1 .Lloop")]
    assert "vmcnt(0)" not in body and "vmcnt(4)" in body
    opcodes = [line.split()[0] for line in body.splitlines()[1:]
               if line.strip() and not line.strip().startswith(";")]
    assert opcodes.count("buffer_load_dwordx4") == 8
    assert sum(o.startswith("v_mfma") for o in opcodes) == 64


def test_compile_reports_the_vgpr_peak_and_where_it_is():
    """head_dim 128 with a 128-row query tile: the peak is the most VGPRs live at any one
    instruction (counted here directly from the live ranges), at a line of the kernel, held by
    values the report attributes to their DSL lines."""
    from argus.asm.lower import assumed_constants, fold_assumed, schedule
    from argus.asm.lower.isel import Selector
    from argus.asm.lower.regalloc import intervals
    from argus.cli import main
    from argus.ir.passes import strip_tags

    compiled = argus.compile(ATTENTION.kernel, head_dim=128)
    lowered, peak = compiled.lowered, compiled.lowered.peak
    stripped = strip_tags(compiled.ir)                                 # as `lower` selects
    items = Selector(fold_assumed(stripped), "interleave", assumed_constants(stripped)).run()
    schedule.schedule(items, "interleave")
    order, span = intervals(items)
    vgprs = [(r.size, a, b) for r, (a, b) in span.items() if r.cls == "v"]
    size, first, last = (np.array(column) for column in zip(*vgprs))
    live = [int(size[(first <= pos) & (pos <= last)].sum()) for pos in range(len(order))]
    assert peak.live == max(live) <= lowered.vgprs <= 256
    assert peak.loc.file.endswith("attention.py") and sum(n for _, n in peak.by_line) == peak.live
    assert compiled.resources["vgpr_peak"]["live"] == peak.live
    assert lowered.occupancy == 2 and "VGPRs per wave" in lowered.occupancy_limit
    out = CliRunner().invoke(main, ["compile", "attention_fwd", "--param", "head_dim=128",
                                    "--no-verify"])
    assert out.exit_code == 0 and f"VGPR peak: {peak.live} live at" in out.output, out.output


def test_a_configuration_over_the_register_file_names_itself_the_peak_and_a_fix():
    from argus.asm.lower import RegisterBudgetError

    with pytest.raises(RegisterBudgetError) as caught:
        argus.compile(ATTENTION.kernel, head_dim=256)
    err = caught.value
    assert err.message.startswith("attention_fwd (head_dim=256; policy interleave) does not fit")
    assert "256 architectural VGPRs" in err.message
    live = int(err.message.split(": ")[2].split(" VGPRs are live")[0])
    assert live > 256
    assert str(err.loc).startswith("argus/kernels/attention.py:")
    # the largest holder is named with its line and count, and the fix says what to shrink
    assert "argus/kernels/attention.py:" in err.message and "smaller tiles" in err.fix


@T.kernel(waves=4)
def to_bf16(X: Tensor("f32", 64, 32), Y: Tensor("bf16", 64, 32)):
    """Y = X rounded to bf16."""
    T.grid(1)
    Y.store((0, 0), X.load((0, 0), T.copy_layout((64, 32), 4, 8)).to("bf16"))


def test_f32_to_bf16_rounds_to_nearest_even_like_ml_dtypes():
    """Bit-exact against ml_dtypes on ties (even and odd kept lsb), overflow to infinity,
    denormals, signed zeros and random values; every NaN, signalling or quiet, of either
    sign and with a payload whose rounding carry would reach the sign bit, becomes the
    canonical quiet NaN 0x7fc0 (c10's round_to_nearest_even)."""
    special = np.array([
        0x3F808000, 0x3F818000,                 # halfway: even lsb stays, odd lsb rounds up
        0x3F808001, 0x3F807FFF, 0xBF808000, 0xBF818000,
        0x7F7FFFFF, 0xFF7FFFFF,                 # largest finite: rounds to infinity
        0x7F800000, 0xFF800000, 0x00000000, 0x80000000,
        0x00000001, 0x00008000, 0x00018000,     # denormals, ties among them
        0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFA00001, 0x7FFFFFFF,   # NaNs, signalling too
    ], np.uint32)
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 64 * 32, dtype=np.uint64).astype(np.uint32)
    bits[:special.size] = special
    bits[special.size:special.size + 200] = (bits[special.size:special.size + 200]
                                             & 0xFFFF0000) | 0x8000        # more ties
    X = bits.view(np.float32).reshape(64, 32)
    Y = np.zeros((64, 32), bfloat16)
    argus.compile(to_bf16).run(X, Y, check="strict")
    with np.errstate(invalid="ignore"):
        want = X.astype(bfloat16).view(np.uint16)
    got = Y.view(np.uint16)
    nan = np.isnan(X)
    assert np.array_equal(got[~nan], want[~nan]), np.flatnonzero((got != want) & ~nan)
    assert nan.sum() >= 5 and (got[nan] == 0x7FC0).all(), [hex(v) for v in got[nan]]


@T.kernel(waves=4)
def column_softmax(X: Tensor("f32", "R", "C"), Y: Tensor("f32", "R", "C"), *,
                   instr: str = "v_mfma_f32_32x32x8_bf16"):
    """Softmax (base 2) of each column of one MFMA accumulator tile: max and sum reduced
    across the lanes and slots that hold a column."""
    spec = T.mfma_layout(instr, "c", (1, 4))
    R, C = X.shape
    T.assume(R.eq(spec.shape[0]))
    T.assume(C.eq(spec.shape[1]))
    T.grid(1)
    column = T.reduced(spec, 0)
    x = X.load((0, 0), spec)
    e = T.exp2(x - T.broadcast(T.reduce(x, "max", 0, column), 0, spec))
    Y.store((0, 0), e * T.broadcast(T.rcp(T.reduce(e, "sum", 0, column)), 0, spec))


@pytest.mark.parametrize("instr,shape,swizzles,bpermutes", [
    ("v_mfma_f32_32x32x8_bf16", (32, 128), 0, 1),      # rows split over lane halves: lane ^ 32
    # over lane quarters: lane ^ 16 (a swizzle within each half), lane ^ 32
    ("v_mfma_f32_16x16x16_bf16", (16, 64), 1, 1),
])
def test_reductions_exchange_the_lanes_the_layout_names(instr, shape, swizzles, bpermutes):
    compiled = argus.compile(column_softmax, instr=instr)
    assert compiled.text.count("ds_swizzle_b32") == 2 * swizzles      # max and sum
    assert compiled.text.count("ds_bpermute_b32") == 2 * bpermutes
    X = np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 4
    Y = np.zeros_like(X)
    compiled.run(X, Y, check="strict")
    e = np.exp2(X - X.max(axis=0))
    assert np.allclose(Y, e / e.sum(axis=0), rtol=1e-5, atol=1e-6)


@T.kernel(waves=4)
def lds_sum(X: Tensor("f32", 64, 16), Y: Tensor("f32", 64, 16)):
    """Y = X added into a zeroed LDS block."""
    T.grid(1)
    spec = T.copy_layout((64, 16), 4, 4)
    acc = T.lds((64, 16), "f32")
    acc.store((0, 0), T.zeros(spec))
    T.barrier()
    acc.atomic_add((0, 0), X.load((0, 0), spec))
    T.barrier()
    Y.store((0, 0), acc.load((0, 0), spec))


#: op classes the backend does not lower yet, with a kernel using one: compiling it must stop
#: at the op's DSL line, naming the op (issue 15: ds_add_f32 needs emulator semantics first)
NOT_LOWERED = {
    O.LdsAtomicAdd: (lambda: lds_sum, r"test_lower_attention\.py:\d+.*lds\.atomic_add"),
    O.MfmaBroadcast: (lambda: _bug_programs().broadcast_a(), r"programs\.py:\d+.*mfma\.bcast"),
    # gfx942's s_barrier waits for every wave: a barrier of a wave group has no instruction
    O.GroupBarrier: (lambda: _bug_programs("lane_programs").handoff(),
                     r"lane_programs\.py:\d+.*barrier\.group"),
}


def _bug_programs(module: str = "programs"):
    folder = str(Path(__file__).parent / "bugs")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(module)


def test_every_ir_op_lowers_or_fails_naming_the_op_and_line(monkeypatch):
    """Every op class has a rule (yield belongs to its loop or branch) or is listed as not
    lowered; such an op, or an op whose rule is missing, stops the compilation at its line
    (forms a rule does not lower, like binary div, are tested with their rules)."""
    for mnemonic, cls in O.op_classes().items():
        if cls is O.Yield:
            assert O.For in RULES and O.If in RULES
        elif cls in NOT_LOWERED:
            assert cls not in RULES, f"{mnemonic} lowers now: drop it from NOT_LOWERED"
            kernel, message = NOT_LOWERED[cls]
            with pytest.raises(UnsupportedError, match=message):
                argus.compile(kernel())
        else:
            assert cls in RULES, f"IR op {mnemonic} ({cls.__name__}) has no lowering rule"
    monkeypatch.delitem(RULES, O.Reduce)
    monkeypatch.setattr(argus.pipeline, "_CACHE", {})      # compile again, without the rule
    with pytest.raises(UnsupportedError,
                       match=r"attention\.py:\d+.*reduce: .*no lowering rule for Reduce"):
        argus.compile(ATTENTION.kernel, head_dim=64, causal=True)


def test_inserted_waits_and_nops_of_attention_are_necessary():
    """Weakening an inserted `s_waitcnt` by one or an `s_nop` by one wait state makes the strict
    emulator complain or the output go wrong. Every site under the dev profile; an evenly spread
    sample of them (half under ci, a tenth under quick) otherwise, to keep the suite fast."""
    from test_lower_waits import emulation_passes, inserted, silent_weakenings


    compiled = argus.compile(ATTENTION.kernel)
    lowered = compiled.lowered
    inputs = ATTENTION.inputs({"BH": 1, "S": 128, "D": 64}, {}, seed=1)
    arrays = {t.name: inputs[t.name] for t in compiled.ir.tensors}
    reference = ATTENTION.reference(inputs, {})
    binding = bind(compiled.ir, (), arrays)
    bound, sizes = binding.arrays, binding.sizes
    sites = inserted(lowered.items)
    assert sum(items[i].opcode == "s_waitcnt" for items, i in sites) >= 10
    share = max(1, round(300 / max(settings.default.max_examples, 1)))   # quick 10, ci 2, dev 1
    silent = silent_weakenings(sites[::min(share, 10)], lambda: emulation_passes(
        compiled, bound, sizes, "O", reference, ATTENTION.tolerance))
    assert not silent, "waits that can be weakened without effect:\n" + "\n".join(silent)

"""The verifier on the library kernels (symbolic and pinned sizes), its report formats, the
LDS bank-conflict facts, and the `argus verify` command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import argus.lang as T
from argus.absint.banks import conflict_degree
from argus.absint.concrete import InterpError, run
from argus.absint.report import PROVED, REFUTED
from argus.absint.verify import VerifyError, verify
from argus.cli import main
from argus.ir.text import print_kernel
from argus.kernels import library
from argus.kernels.attention import attention_fwd
from argus.kernels.gemm import gemm
from argus.kernels.resolve import KernelLookupError, resolve_kernel
from argus.lang import Tensor

BUGS = Path(__file__).parent / "bugs"
sys.path.insert(0, str(BUGS))

import programs  # noqa: E402


@pytest.fixture(scope="module")
def gemm_report():
    return verify(gemm)


def test_library_gemm_is_proved_for_symbolic_sizes(gemm_report):
    assert gemm_report.ok, str(gemm_report)
    kinds = {o.kind for o in gemm_report.obligations}
    assert {"tag-assertion", "out-of-bounds", "lds-race", "lds-uninitialised", "budget"} <= kinds
    assert gemm_report.sizes == {}


def test_library_attention_is_proved_for_symbolic_sizes():
    report = verify(attention_fwd)
    assert report.ok, str(report)
    assert sum(o.kind == "tag-assertion" for o in report.obligations) >= 10


def test_pinned_sizes_are_assumptions():
    report = verify(gemm, M=128, N=64, K=64)
    assert report.ok and report.sizes == {"M": 128, "N": 64, "K": 64}


def test_unknown_size_is_rejected_with_the_known_ones():
    with pytest.raises(VerifyError, match="sizes are"):
        verify(gemm, Q=3)


def test_refutation_is_confirmed_and_minimal():
    report = verify(programs.scores(keep=lambda kv0, q0, i, j: kv0 + i < q0 + j))
    [refuted] = report.refuted
    cex = refuted.counterexample
    assert cex.confirmed and refuted.verdict == REFUTED
    # the diagonal element (key = query) is wrongly masked; the first one is lane 0, slot 0
    assert (cex.workgroup, cex.wave, cex.lane, cex.slot) == ((0, 0, 0), 0, 0, 0)
    assert cex.tags["X"] == {"key": 0, "query": 0, "valid": 1}
    assert cex.sizes["S"] == 128


def test_report_json_round_trips(gemm_report):
    data = json.loads(gemm_report.to_json())
    assert data["ok"] is True and data["kernel"] == "gemm"
    assert len(data["obligations"]) == len(gemm_report.obligations)
    assert all(o["verdict"] == PROVED for o in data["obligations"])


def test_counterexample_text_names_thread_element_and_tags():
    report = verify(programs.double_buffered(read_swizzled=False))
    text = str(report)
    assert "does not hold" in text and "confirmed by concrete replay" in text
    first = report.refuted[0].counterexample
    assert set(first.element) == {"block", "i", "j", "k"}
    assert first.iteration, "the refutation inside the loop names its iteration"


@settings(max_examples=min(20, settings.default.max_examples), deadline=None)
@given(seed=st.integers(0, 2**31), size=st.sampled_from([2, 4, 8, 16]),
       spread=st.sampled_from([4, 64, 4096]), read=st.booleans())
def test_bank_facts_and_emulator_cycles_read_one_bank_model(seed, size, spread, read):
    """The verifier's conflict degree is the worst phase, the emulator's cycles the sum of the
    phases, of the same per-phase bank loads (`argus.isa_cdna3.lds`)."""
    from argus.isa_cdna3.emu.memory_ops import lds_cycles
    from argus.isa_cdna3.lds import phase_loads

    addr = np.random.default_rng(seed).integers(0, spread, 64) * size
    loads = phase_loads(addr[None], size, read=read)[0]
    assert conflict_degree(addr[:, None], size, read=read) == max(1, int(loads.max()))
    assert lds_cycles(addr[None], np.ones((1, 64), bool), size, read=read) == int(loads.sum())


def test_bank_conflict_degree_matches_counting():
    lanes = np.arange(64)[:, None]
    assert conflict_degree(lanes * 4, 4) == 1            # consecutive dwords
    assert conflict_degree(lanes * 128, 4) == 32         # one bank, 32 lanes per phase
    assert conflict_degree(lanes * 16, 16, read=False) == 1  # ds_write_b128: 8 x 8 lanes
    assert conflict_degree(lanes * 8, 4) == 2            # every other dword
    # ds_read_b128 is serviced in the inferred groups {4q..4q+3, 4q+16..4q+19} (isa.lds_phases):
    # lanes 4q and 4q+16 of a linear read are 256 bytes apart, the same banks.
    assert conflict_degree(lanes * 16, 16, read=True) == 2
    swizzled = (lanes ^ ((lanes >> 4) & 1) * 4) * 16    # move lanes 16..19 to other banks
    assert conflict_degree(swizzled, 16, read=True) == 1


def test_bank_facts_cover_every_lds_access(gemm_report):
    from argus.ir import ops as O

    lds_ops = [op for op in gemm.trace().ops() if isinstance(op, (O.LdsLoad, O.LdsStore))]
    assert len(gemm_report.bank_facts) == len(lds_ops)
    assert all(f.degree >= 1 for f in gemm_report.bank_facts)


def test_resolve_kernel_from_library_and_file():
    assert resolve_kernel("gemm") is gemm
    kernel = resolve_kernel(str(BUGS / "bug_11_causal_mask_transposed.py"))
    assert kernel.name == "attention_block"
    with pytest.raises(KernelLookupError, match="neither a library kernel"):
        resolve_kernel("no_such_kernel")


def test_cli_exit_codes_and_json():
    runner = CliRunner()
    factory = runner.invoke(main, ["verify", str(BUGS / "programs.py:scores")])
    assert factory.exit_code == 1 and "has no kernel 'scores'" in factory.output
    fixed = runner.invoke(main, ["verify", "gemm", "--size", "K=64"])
    assert fixed.exit_code == 0, fixed.output
    assert "Verified gemm" in fixed.output
    bad = runner.invoke(main, ["verify", str(BUGS / "bug_11_causal_mask_transposed.py"),
                               "--json"])
    assert bad.exit_code == 1
    data = json.loads(bad.output)
    assert data["ok"] is False
    assert any(o["verdict"] == REFUTED for o in data["obligations"])


def test_gathered_rows_follow_the_index_tensor():
    """Equal positions of the index tensor give equal row ids (and only those)."""
    right = verify(programs.gathered())
    assert all(o.proved for o in right.obligations
               if o.kind not in ("global-race", "global-order"))
    [race] = [o for o in right.obligations if o.kind == "global-race"]
    assert race.verdict == "unknown" and "gather index" in race.reason
    # no T.distinct: index data with a repeated row is admissible, and two threads of the
    # scatter then store one row (confirmed on that data)
    [scatter] = [o for o in right.obligations if o.kind == "global-order"]
    assert scatter.verdict == REFUTED and scatter.counterexample.confirmed
    wrong = verify(programs.gathered(store_shift=1))
    [assertion] = [o for o in wrong.refuted if o.kind == "tag-assertion"]
    cex = assertion.counterexample
    assert cex.confirmed and cex.tags["V"]["token"] != cex.tags["D"]["token"]


def _expert_pick(extra: int):
    """Each workgroup copies the matrix of the expert its id names; ids are declared in
    [0, E + extra)."""
    spec = T.copy_layout((16, 16), 1, 4)

    @T.kernel(waves=1)
    def pick(W: Tensor("f32", "E", 16, 16), ids: Tensor("i32", "G"),
             Y: Tensor("f32", "G", 16, 16)):
        T.grid(ids.shape[0])
        g = T.program_id(0)
        expert = T.load_scalar(ids, (g,), 0, W.shape[0] + extra)
        Y.store((g, 0, 0), W.load((expert, 0, 0), spec, axes=(1, 2)), axes=(1, 2))
    return pick


def test_a_scalar_bounded_by_a_size_proves_the_access_it_indexes():
    report = verify(_expert_pick(0))
    assert report.ok, str(report)
    assert "bounds=[0, E]" in print_kernel(_expert_pick(0).ir)


def test_a_scalar_bound_one_past_the_size_is_refuted_and_replayed():
    report = verify(_expert_pick(1))
    refuted = report.refuted
    assert [o.kind for o in refuted] == ["out-of-bounds"], str(report)
    cex = refuted[0].counterexample
    assert cex.confirmed and cex.element["W[0]"] == cex.sizes["E"]


def test_the_interpreter_rejects_a_scalar_outside_its_symbolic_bound():
    inputs = {"W": np.zeros((2, 16, 16), np.float32), "ids": np.array([1, 2], np.int32),
              "Y": np.zeros((2, 16, 16), np.float32)}
    with pytest.raises(InterpError, match=r"\[0, E\) = \[0, 2\)"):
        run(_expert_pick(0).ir, inputs)
    inputs["ids"][1] = 0
    assert run(_expert_pick(0).ir, inputs).ok


def test_moe_gemm_is_proved_once_its_index_rows_are_declared_distinct():
    report = verify(library()["moe_gemm"].kernel)
    assert report.ok, str(report)
    assert "global-race" in {o.kind for o in report.obligations}


@pytest.mark.parametrize("causal", [False, True])
def test_attention_against_a_longer_cache_is_proved_for_all_lengths(causal):
    # SQ queries, SK keys, causal aligned bottom-right: two of the causal mask's obligations
    # timed out on z3's bit-vectors (10 s each) and are decided over the integers at once
    report = verify(library()["attention_fwd_kv"].kernel.trace(causal=causal))
    assert report.ok, str(report)
    assert len(report.obligations) >= 157


def test_the_lds_staged_moe_gemm_with_shared_row_blocks_is_refuted():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "bugs"))
    from bug_15_moe_workgroups_share_rows import moe_sharing_row_blocks

    report = verify(moe_sharing_row_blocks(library()["moe_gemm"].kernel.ir))
    refuted = [o for o in report.obligations if o.verdict == REFUTED]
    assert {o.kind for o in refuted} == {"global-race"}
    assert "confirmed by concrete replay" in str(report)

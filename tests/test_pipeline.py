"""The one road (argus.pipeline): `stage()` caches by IR digest, prints between stages under
ARGUS_DEBUG, and turns a stage's refusal into a StageError whose kind the search maps to a
status; `road(until=)` stops where it is told and carries what it did into the error."""

import pytest

import argus.lang as T
from argus import pipeline
from argus.check import Check, Trial
from argus.errors import ArgusError
from argus.ir.text import ir_digest, parse_kernel, print_kernel
from argus.kernels import library
from argus.lang import Tensor
from argus.pipeline import STAGES, StageError, road, stage
from argus.search.evaluate import STATUS_OF

GEMM = library()["gemm"]
SMALL = {"M": 64, "N": 64, "K": 64}


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch):
    monkeypatch.setattr(pipeline, "_CACHE", {})


def test_a_stage_runs_once_per_ir_digest_and_options():
    ir = GEMM.kernel.trace()
    again = parse_kernel(print_kernel(ir))          # another object, the same kernel
    assert again is not ir and ir_digest(again) == ir_digest(ir)
    calls = []

    def run():
        calls.append(1)
        return len(calls)
    assert stage("verify", run, ir, timeout_ms=5) == 1
    assert stage("verify", run, again, timeout_ms=5) == 1          # a hit: same digest
    assert stage("verify", run, ir, timeout_ms=6) == 2             # other options: a miss
    assert stage("compile", run, ir, timeout_ms=5) == 3            # other stage: a miss
    assert stage("verify", run, GEMM.kernel.trace(block_m=128), timeout_ms=5) == 4
    assert stage("trace", run) == 5 and stage("trace", run) == 6   # no IR: never cached


def test_the_road_compiles_a_kernel_once_for_every_caller():
    first = road("gemm", until="compile", skip=("verify", "interpret"))
    second = road(GEMM.kernel.trace(), until="compile", skip=("verify", "interpret"))
    assert first.compiled is second.compiled
    assert road("gemm", until="compile", skip=("verify", "interpret"),
                policy="simple").compiled is not first.compiled


def test_argus_debug_prints_each_stage_result_between_stages(monkeypatch, capsys):
    monkeypatch.setenv("ARGUS_DEBUG", "3")
    road("gemm", until="compile", skip=("verify",), sizes=SMALL)
    err = capsys.readouterr().err
    for name in ("trace", "interpret", "compile"):
        assert f"// -----// {name} //----- //" in err
    assert "kernel gemm" in err                          # the traced IR
    assert "interpreter: 1 trial(s) within" in err       # the check
    assert "v_mfma" in err                               # the assembly
    monkeypatch.setenv("ARGUS_DEBUG", "1")               # verdicts only: no IR, no assembly
    road("gemm", until="compile", skip=("verify",), sizes=SMALL)
    err = capsys.readouterr().err
    assert "// -----// interpret" in err and "// -----// trace" not in err
    assert "// -----// compile" not in err


def test_until_stops_the_road_and_skip_leaves_stages_out():
    traced = road("gemm", until="trace")
    assert traced.ir is not None and traced.report is None and traced.compiled is None
    checked = road("gemm", until="interpret", skip=("verify",), sizes=SMALL)
    assert checked.interp.ok and checked.report is None and checked.compiled is None
    assert checked.interp.sizes == SMALL
    emulated = road("gemm", until="emulate", skip=("verify", "interpret"), sizes=SMALL)
    assert emulated.interp is None and emulated.emulated.ok and emulated.timing is None
    with pytest.raises(StageError, match="the stages are trace, verify") as caught:
        road("gemm", until="run")
    assert caught.value.outcome == "invalid"


@T.kernel(waves=4)
def _swizzle_forgotten(A: Tensor("bf16", "M", "K"), B: Tensor("bf16", "N", "K"),
                       C: Tensor("f32", "M", "N")):
    from argus.kernels.gemm import gemm_program

    gemm_program(A, B, C, block_m=64, block_n=64, block_k=32, swizzle=True,
                 read_swizzled=False)


def test_a_refuted_proof_is_a_stage_error_with_the_report_and_the_road_so_far():
    with pytest.raises(StageError) as caught:
        road(_swizzle_forgotten, until="time")
    err = caught.value
    assert (err.stage, err.outcome) == ("verify", "refuted") and isinstance(err, ArgusError)
    assert err.result.refuted and err.road.ir is not None and err.road.compiled is None
    assert STATUS_OF[err.outcome] == "refuted"


def test_a_wrong_output_is_a_stage_error_unless_strict_is_off(monkeypatch):
    original = pipeline.check_interp

    def off_by_one(ir, case):
        check = original(ir, case)
        wrong = [Trial(t.seed, t.sizes, 1.0) for t in check.trials]
        return Check(check.device, check.tolerance, tuple(wrong))
    monkeypatch.setattr(pipeline, "check_interp", off_by_one)
    with pytest.raises(StageError) as caught:
        road("gemm", until="compile", skip=("verify",), sizes=SMALL)
    assert (caught.value.stage, caught.value.outcome) == ("interpret", "wrong")
    assert "max error 1 >" in str(caught.value) and caught.value.road.compiled is None
    assert STATUS_OF["wrong"] == "wrong"
    recorded = road("gemm", until="interpret", skip=("verify",), sizes=SMALL, strict=False)
    assert not recorded.interp.ok


def _toolchain_broke():
    raise RuntimeError("ld.lld-19 crashed")


@pytest.mark.parametrize("call, stage_name, kind", [
    (lambda: road("gemm", until="trace", block_m=100), "trace", "invalid"),
    (lambda: road("gemm", until="interpret", skip=("verify",), sizes={"M": 63}),
     "interpret", "invalid"),
    (lambda: road("gemm", until="time", skip=("verify", "interpret", "emulate"),
                  sizes={"M": 64}), "time", "invalid"),
    (lambda: stage("compile", _toolchain_broke), "compile", "error"),
], ids=["bad-parameter", "bad-size", "missing-size", "toolchain"])
def test_every_refusal_is_a_stage_error_naming_its_stage(call, stage_name, kind):
    with pytest.raises(StageError) as caught:
        call()
    assert (caught.value.stage, caught.value.outcome) == (stage_name, kind)
    assert kind in STATUS_OF


def test_the_outcomes_are_the_search_statuses():
    assert set(STATUS_OF) == set(pipeline.OUTCOMES)
    assert STAGES == ("trace", "verify", "interpret", "compile", "emulate", "time")

"""The MI300X performance model: micro-kernels reach the published peaks, the event trace agrees
with the emulator, sampled-and-extrapolated timings agree with full simulation, more conflicts /
fewer resident waves / extra waits never make a schedule faster, and launches the model cannot
time are clear errors."""

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import argus
from argus.asm import assemble
from argus.asm.launch import emulate
from argus.isa_cdna3.emu.trace import WaveEvents
from argus.isa_cdna3.kernel_template import kernel_source
from argus.isa_cdna3.opcodes import Unit
from argus.isa_cdna3.perf import micro
from argus.isa_cdna3.perf.model import (
    CuRun,
    KernelDoesNotFit,
    Seq,
    Static,
    occupancy,
    schedule_cu,
)
from argus.isa_cdna3.perf.params import Calibrated, PerfError, profile

MI300X = profile("mi300x")
GEMM = "bf16gemm_outf32_tn_32x64_pf3"


def within(value: float, target: float, tolerance: float = 0.05) -> bool:
    return abs(value / target - 1) <= tolerance


# ------------------------------------------------------------------------- micro-benchmarks
def test_mfma_micro_reaches_the_dense_bf16_peak():
    timing = argus.time(assemble(micro.mfma().source), grid=1, block=micro.BLOCK)
    assert within(micro.rate(timing, timing.flops, MI300X), 1307.4e12)
    assert timing.busy["MFMA"] > 0.95
    assert "MFMA bound" in timing.bottleneck


def test_lds_micro_reaches_128_bytes_per_clock_and_conflicts_divide_it():
    iterations, reads, wave_bytes = 32, 8, 64 * 8
    moved = micro.BLOCK // 64 * iterations * reads * wave_bytes
    rates = {}
    for conflicts in (False, True):
        code = assemble(micro.lds(conflicts=conflicts, iterations=iterations).source)
        timing = argus.time(code, grid=1, block=micro.BLOCK)
        assert timing.occupancy.workgroups_per_cu == 1          # 64 KiB of LDS: one per CU
        rates[conflicts] = micro.rate(timing, moved, MI300X)
    peak = 128 * MI300X.cus.value * MI300X.clock_ghz.value * 1e9
    assert within(rates[False], peak)
    # every 16-lane phase hits one bank pair: 16 cycles instead of one per phase
    assert within(rates[True], peak / 16, 0.1)


def test_hbm_stream_reaches_the_published_stream_bandwidth():
    # the HBM efficiency is fitted to a published STREAM figure (calibrate.STREAM), not set by
    # hand: the calibrated model's streaming micro-kernel must reproduce that figure
    from argus.vendor import calibrate

    loads, block, groups = 192, 64, int(MI300X.cus.value)
    src = np.zeros(groups * block * 16 * loads // 4, np.uint32)
    timing = argus.time(assemble(micro.hbm(loads, block).source), grid=groups, block=block,
                        args=[src])
    assert timing.bytes_hbm == src.nbytes
    assert within(micro.rate(timing, src.nbytes / groups, MI300X), calibrate.STREAM.value, 0.02)


def test_dense_gemm_load_runs_at_the_published_1_2_ghz():
    # AMD's ROCm blog: 708 TFLOP/s max-achievable bf16 GEMM at about 1.2 GHz under load; the
    # power budget comes from that figure, so a GEMM keeping every MFMA pipe that busy is
    # modelled at 1.2 GHz and 708 TFLOP/s
    from argus.isa_cdna3.perf.estimate import clock
    from argus.vendor import calibrate

    constants = Calibrated.load()
    assert constants.power_budget == calibrate.power_budget_from_gemm()
    busy = calibrate.GEMM_PEAK.value / (calibrate.BF16_DENSE_PEAK * 1.2 / 2.1)
    ghz = clock(MI300X, active_cus=304, mfma_busy=busy, constants=constants)
    assert ghz == pytest.approx(1.2, rel=0.01)
    assert calibrate.BF16_DENSE_PEAK * ghz / 2.1 * busy == pytest.approx(708e12, rel=0.01)


# ------------------------------------------------------------------------- trace and model
def test_trace_is_off_by_default_and_matches_the_emulators_counts():
    code = assemble(micro.lds(conflicts=False, iterations=2).source)
    assert emulate(code, grid=2, block=128).events is None
    run = emulate(code, grid=2, block=128, trace=True)
    waves = run.events.per_wave()
    counts = run.wave_instruction_counts()
    for wave in waves:
        assert len(wave.index) == counts[wave.workgroup, wave.wave_in_group]
        lds = [c for i, c in zip(wave.index, wave.lds) if run.instructions[i].opcode
               .startswith("ds_read")]
        assert lds == [4.0] * len(lds)                           # b64: 4 conflict-free phases


def test_trace_counts_the_words_each_memory_instruction_moves():
    block, loads = 64, 4
    src = np.zeros(2 * block * 16 * loads // 4, np.uint32)
    run = emulate(assemble(micro.hbm(loads, block).source), grid=2, block=block, args=[src],
                  trace=True)
    for wave in run.events.per_wave():
        moved = [d for i, d in zip(wave.index, wave.dwords)
                 if run.instructions[i].opcode == "global_load_dwordx4"]
        assert moved == [4 * 64] * loads                         # four words on each lane
        others = [d for i, d in zip(wave.index, wave.dwords)
                  if not run.instructions[i].opcode.startswith("global_")]
        assert not any(others)


def test_split_k_epilogue_waits_for_the_l2_to_perform_its_atomics():
    import attrs

    # 80 workgroups of a 32x64 tile on the 80-CU part: 20 CUs share an XCD's 16 L2 channels
    sizes = {"m": 32, "n": 64 * 40, "k": 1024, "splitk": 2}
    base = Calibrated.load()
    fast, slow = (argus.time(GEMM, sizes=sizes, gpu="mi308x",
                             constants=attrs.evolve(base, atomic_dwords_per_clk=rate))
                  for rate in (16.0, 0.5))
    assert fast.workgroups == fast.active_cus == 80
    words = 32 * 64                                   # each workgroup adds its tile once
    queued = words / (16 * 0.5 / 20)                  # at the CU's share of the slow rate
    assert slow.cycles_per_cu - fast.cycles_per_cu >= 0.8 * queued
    assert slow.cycles_per_cu - fast.cycles_per_cu <= 1.1 * queued


def test_vendor_gemm_timing_counts_the_problems_flops_and_says_modelled():
    timing = argus.time(GEMM, sizes={"m": 32, "n": 64, "k": 512})
    assert timing.flops == 2 * 32 * 64 * 512
    assert timing.microseconds > timing.launch_us > 0
    text = timing.report()
    assert text.count("modelled") >= 5 and "us" in text
    assert timing.to_json()["modelled"] is True


def test_extrapolated_timing_agrees_with_full_simulation():
    sizes = {"m": 64, "n": 256, "k": 4096, "splitk": 1}
    sampled = argus.time(GEMM, sizes=sizes)
    full = argus.time(GEMM, sizes=sizes, extrapolate=False)
    assert sampled.extrapolation and not full.extrapolation
    assert within(sampled.cycles_per_cu, full.cycles_per_cu, 0.02)
    assert within(sampled.microseconds, full.microseconds, 0.02)


def test_causal_attention_sample_stands_for_the_whole_launch():
    # each causal workgroup pairs query tiles i and T-1-i: one workgroup of a 512-query launch
    # over sk - s/2 + 256 keys does the same work, so the sample issues exactly the
    # instructions of the whole launch's busiest CU and its schedule agrees with it
    from argus.vendor import timing as vendor_timing

    sizes = {"b": 1, "h": 1, "s": 1024, "sk": 1024}
    sampled = argus.time("fwd_hd128_bf16_causal", sizes=sizes)
    whole = vendor_timing.whole_launch("fwd_hd128_bf16_causal", sizes, MI300X, Calibrated.load())
    assert sampled.instructions == whole.instructions
    assert sampled.flops == whole.flops
    assert within(sampled.cycles_per_cu, whole.cycles_per_cu, 0.02)
    # a shape whose workgroups are not all alike is emulated whole
    ragged = argus.time("fwd_hd128_bf16_causal", sizes={"s": 256, "sk": 256})
    assert ragged.extrapolation is None and ragged.workgroups == 1


def test_compiled_kernel_timing_extrapolates_its_k_loop():
    from argus.kernels.gemm import gemm

    kernel = argus.compile(gemm, block_m=64, block_n=64, block_k=32)
    sizes = {"M": 128, "N": 128, "K": 1024}
    sampled = argus.time(kernel, sizes=sizes)
    full = argus.time(kernel, sizes=sizes, extrapolate=False)
    assert "K=256 and 512" in sampled.extrapolation
    assert within(sampled.cycles_per_cu, full.cycles_per_cu, 0.02)
    assert sampled.flops == full.flops == 2 * 128 * 128 * 1024


def test_a_loop_stepping_past_the_smallest_samples_is_extrapolated_in_its_trip_count():
    # a row read 2048 columns a step: samples at 256 and 512 both run one trip (a time that
    # never grew with R), and a sample ending on a partial tile moves fewer bytes per trip
    # than the real run (a modelled HBM rate above the peak); now whole tiles, 2 and 4 trips
    from argus.kernelbench.solution import kernel_of
    from argus.kernelbench.templates import RowProgram

    x = ("leaf", "x")
    row = RowProgram((("sum", x),), ("stat", 0), False, False, rows=1, cols=2048, vector=4)
    kernel = argus.compile(kernel_of(row))
    sampled = argus.time(kernel, sizes={"O": 64, "R": 2048 * 24})
    full = argus.time(kernel, sizes={"O": 64, "R": 2048 * 24}, extrapolate=False)
    assert "R=4096 and 8192" in sampled.extrapolation
    assert within(sampled.cycles_per_cu, full.cycles_per_cu, 0.10)
    big = argus.time(kernel, sizes={"O": 4096, "R": 393216})
    assert big.bytes_hbm / (big.microseconds * 1e-6) <= MI300X.hbm_bytes_per_s.value
    assert big.bytes_hbm >= 4096 * 393216 * 4      # every input byte read once, at least


def test_a_second_pass_over_rows_longer_than_the_l2_holds_reads_hbm_again():
    # a row program whose second stat reads its first (a max of x - sum) reads each row
    # twice: a 6.4 GB launch's second pass comes
    # back to a line after every resident workgroup streamed its 1.5 MB row (far past 4 MB
    # of L2 per XCD and the 256 MB Infinity Cache): HBM again, where it had been charged once;
    # a 2 MB launch's second pass still finds its rows in the L2
    from argus.kernelbench.solution import kernel_of
    from argus.kernelbench.templates import RowProgram

    x = ("leaf", "x")
    row = RowProgram((("sum", x), ("max", ("bin", "sub", x, ("stat", 0)))), ("stat", 1), False,
                     False, rows=1, cols=2048, vector=4)
    kernel = argus.compile(kernel_of(row))
    big = argus.time(kernel, sizes={"O": 4096, "R": 393216})
    assert big.bytes_hbm >= 2 * 4096 * 393216 * 4
    small = argus.time(kernel, sizes={"O": 64, "R": 8192})
    assert small.bytes_hbm < 1.5 * 64 * 8192 * 4


def test_sizes_shrunk_for_a_sample_keep_its_workgroups_whole():
    # a strided row sum, 64 columns of I per workgroup: the sample once shrank I to 1, so
    # each sampled workgroup read one column in 64 and the launch was charged half its bytes
    # (a modelled HBM rate above the peak); I now stops at a whole tile
    from argus.kernelbench.solution import kernel_of
    from argus.kernelbench.templates import RowProgram

    x = ("leaf", "x")
    kernel = argus.compile(kernel_of(RowProgram((("sum", x),), ("stat", 0), False, True)))
    timing = argus.time(kernel, sizes={"O": 128, "R": 1024, "I": 4095})
    assert timing.bytes_hbm >= 128 * 1024 * 4095 * 4
    assert timing.bytes_hbm / (timing.microseconds * 1e-6) <= MI300X.hbm_bytes_per_s.value


def test_a_moe_timing_extrapolates_its_hidden_size_and_counts_every_flop():
    # the loop runs over H; TOKENS is not in the grid either but sets no trip count (taking it
    # for the loop once gave a time 20x below the MFMA peak)
    from argus.kernels.moe import moe_gemm, route

    kernel = argus.compile(moe_gemm)
    _, ids, experts = route(1024, 8, 64, np.random.default_rng(0))
    sizes = {"TOKENS": 1024, "H": 2048, "E": 8, "N": 1024, "P": len(ids),
             "BLOCKS": len(experts)}
    timing = argus.time(kernel, sizes=sizes)
    assert "at H=" in timing.extrapolation
    assert timing.flops == 2 * len(ids) * 1024 * 2048
    assert timing.microseconds * 1e-6 >= timing.flops / 1307.4e12   # MI300X dense bf16 peak
    full = argus.time(kernel, sizes={**sizes, "H": 1024}, extrapolate=False)
    assert full.flops == 2 * len(ids) * 1024 * 1024


def test_more_workgroups_than_cus_take_rounds():
    one = argus.time(GEMM, sizes={"m": 32, "n": 64 * 304, "k": 512})
    two = argus.time(GEMM, sizes={"m": 32, "n": 64 * 305, "k": 512})
    assert (one.rounds, two.rounds) == (1, 2)
    assert two.microseconds > one.microseconds


def test_power_budget_lowers_the_clock_only_under_chip_wide_matrix_load():
    from argus.isa_cdna3.perf.estimate import clock

    budget = Calibrated(power_budget=0.5)
    peak = MI300X.clock_ghz.value
    assert clock(MI300X, active_cus=304, mfma_busy=0.4, constants=budget) == peak
    assert clock(MI300X, active_cus=100, mfma_busy=1.0, constants=budget) == peak
    assert clock(MI300X, active_cus=304, mfma_busy=1.0, constants=budget) == pytest.approx(
        peak * 0.5)
    loads = [clock(MI300X, active_cus=304, mfma_busy=b / 10, constants=budget)
             for b in range(11)]
    assert loads == sorted(loads, reverse=True)
    # busy vector ALUs draw from the same budget at valu_power of an MFMA pipe
    valu = Calibrated(power_budget=0.5, valu_power=0.25)
    assert clock(MI300X, active_cus=304, mfma_busy=0.4, constants=valu) == peak
    assert clock(MI300X, active_cus=304, mfma_busy=0.4, valu_busy=0.8, constants=valu) == \
        pytest.approx(peak * 0.5 / 0.6)


# ------------------------------------------------------------------------- errors
def test_workgroup_that_does_not_fit_a_cu_is_a_clear_error():
    with pytest.raises(KernelDoesNotFit, match="LDS"):
        occupancy(vgprs=64, lds_bytes=65536 + 4, threads=256)
    with pytest.raises(KernelDoesNotFit, match="VGPR"):
        occupancy(vgprs=520, lds_bytes=0, threads=64)
    with pytest.raises(KernelDoesNotFit, match="wave slots"):
        occupancy(vgprs=512, lds_bytes=0, threads=1024)
    assert occupancy(vgprs=128, lds_bytes=0, threads=256).workgroups_per_cu == 4


def test_faulting_kernel_is_a_clear_error():
    body = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_mov_b32_e32 v1, 0x100000
  s_waitcnt lgkmcnt(0)
  global_load_dword v2, v1, s[4:5]
  s_waitcnt vmcnt(0)
  s_endpgm"""
    code = assemble(kernel_source("faults", body, [("src", "ptr")]))
    with pytest.raises(PerfError, match="did not run to completion.*outside every mapped"):
        argus.time(code, grid=1, block=64, args=[np.zeros(16, np.uint32)])


def test_unknown_profile_and_misused_sizes_are_clear_errors():
    with pytest.raises(PerfError, match="unknown gpu profile"):
        argus.time(GEMM, sizes={"m": 32}, gpu="h100")
    with pytest.raises(PerfError, match="takes sizes"):
        argus.time(GEMM, sizes={"tokens": 32})
    with pytest.raises(PerfError, match="multiple of 64"):
        argus.time(GEMM, sizes={"n": 100})
    with pytest.raises(PerfError, match="hk must divide h"):
        argus.time("fwd_hd128_bf16", sizes={"h": 6, "hk": 4})
    with pytest.raises(PerfError, match="grid= and block="):
        argus.time(assemble(micro.mfma().source))
    with pytest.raises(PerfError, match="size m=.64. must be a whole number"):
        argus.time(GEMM, sizes={"m": "64"})


@pytest.mark.parametrize(("sizes", "says"), [
    ({"M": "64", "N": 64, "K": 64}, "M='64': a size of kernel gemm is a whole number"),
    ({"M": 64.0, "N": 64, "K": 64}, "M=64.0: a size of kernel gemm is a whole number"),
    ({"M": -64, "N": 64, "K": 64}, "M=-64 is outside the range"),
    ({"M": 2**40, "N": 64, "K": 64}, "is outside the range"),
    ({"M": 100, "N": 64, "K": 64}, "violates the assumption `M % 64 == 0`"),
])
def test_a_compiled_kernel_is_timed_only_at_sizes_it_admits(sizes, says):
    # the same checks as verify's and run's pins: a partial tile or a size past the declared
    # range would be timed as though it ran right
    from argus.kernels.gemm import gemm

    with pytest.raises(PerfError, match=re.escape(says)):
        argus.time(argus.compile(gemm), sizes=sizes)


# ------------------------------------------------------------------------- monotonicity
KINDS = {"valu": Static(Unit.VALU, cycles=4),
         "mfma": Static(Unit.MFMA, cycles=32, flops=1, landing=44),
         "salu": Static(Unit.SALU), "lds": Static(Unit.LDS), "load": Static(Unit.VMEM),
         "atomic": Static(Unit.VMEM, store=True, atomic=True),
         "wait": Static(Seq.WAIT, vmcnt=0, lgkmcnt=0), "barrier": Static(Seq.BARRIER),
         "nop": Static(Seq.NOP, cycles=8)}
NAMES = sorted(KINDS)
STATICS = [KINDS[n] for n in NAMES]
programs = st.lists(st.tuples(st.sampled_from(NAMES), st.integers(1, 16)), min_size=1,
                    max_size=24)


def _waves(program, waves: int, *, groups: int = 1, lds_scale: int = 1) -> list:
    out = []
    for group in range(groups):
        for wave in range(waves):
            index = [NAMES.index(name) for name, _ in program]
            lines = [size if name in ("load", "atomic") else 0 for name, size in program]
            lds = [float(size * lds_scale) if name == "lds" else 0.0 for name, size in program]
            dwords = [32 * size if name in ("load", "atomic") else 0 for name, size in program]
            out.append(WaveEvents(group, wave, index, lines, lds, dwords))
    return out


def _cycles(waves, atomic_dwords_per_clk: float = 16.0) -> float:
    return schedule_cu(waves, STATICS, bytes_per_clk=16.0,
                       atomic_dwords_per_clk=atomic_dwords_per_clk, constants=Calibrated()).cycles


@given(programs, st.integers(1, 8), st.integers(2, 8))
def test_more_bank_conflicts_never_make_a_schedule_faster(program, waves, factor):
    assert _cycles(_waves(program, waves, lds_scale=factor)) >= _cycles(_waves(program, waves))


@given(programs, st.integers(1, 4), st.integers(0, 24), st.sampled_from(["wait", "nop"]))
def test_an_extra_wait_never_makes_a_schedule_faster(program, waves, where, extra):
    longer = list(program)
    longer.insert(min(where, len(program)), (extra, 1))
    assert _cycles(_waves(longer, waves)) >= _cycles(_waves(program, waves))


@given(programs, st.integers(1, 8), st.floats(0.25, 16.0), st.floats(1.1, 8.0))
def test_a_slower_l2_atomic_rate_never_makes_a_schedule_faster(program, waves, rate, factor):
    assert _cycles(_waves(program, waves), rate / factor) >= _cycles(_waves(program, waves), rate)


@given(programs, st.integers(1, 4))
def test_fewer_resident_workgroups_never_make_the_work_faster(program, waves):
    together = _cycles(_waves(program, waves, groups=2))
    apart = 2 * _cycles(_waves(program, waves, groups=1))
    assert apart >= together


# ------------------------------------------------------------------------- command line
def test_cli_time_json_and_plot(tmp_path):
    import json

    from click.testing import CliRunner

    from argus.cli import main

    plot = tmp_path / "roofline.png"
    result = CliRunner().invoke(main, ["time", GEMM, "--shape", "m=32", "--shape", "n=64",
                                       "--shape", "k=512", "--json", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["modelled"] is True and data["flops"] == 2 * 32 * 64 * 512
    assert plot.read_bytes()[:4] == b"\x89PNG"
    table = CliRunner().invoke(main, ["time", GEMM, "--shape", "k=512"])
    assert table.exit_code == 0 and "modelled" in table.output and "bottleneck" in table.output


def test_cli_times_a_code_object_file(tmp_path):
    import json

    from click.testing import CliRunner

    from argus.cli import main

    source = tmp_path / "mfma.s"
    source.write_text(micro.mfma().source)
    result = CliRunner().invoke(main, ["time", str(source), "--grid", "1", "--block", "256",
                                       "--json"])
    assert result.exit_code == 0, result.output
    assert "MFMA bound" in json.loads(result.output)["bottleneck"]
    stream = tmp_path / "hbm.s"
    stream.write_text(micro.hbm(4, 64).source)
    missing = CliRunner().invoke(main, ["time", str(stream), "--grid", "2", "--block", "64"])
    assert missing.exit_code == 1 and "--buffer src=" in missing.output
    ok = CliRunner().invoke(main, ["time", str(stream), "--grid", "2", "--block", "64",
                                   "--buffer", f"src={2 * 64 * 16 * 4}", "--json"])
    assert ok.exit_code == 0 and '"bytes_hbm": 8192' in ok.output


def test_cli_times_a_library_kernel_with_its_sizes_and_params():
    import json

    from click.testing import CliRunner

    from argus.cli import main

    result = CliRunner().invoke(main, ["time", "gemm", "--shape", "m=128", "--shape", "n=128",
                                       "--shape", "k=256", "--param", "block_k=32", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["flops"] == 2 * 128 * 128 * 256 and data["shape"] == {"M": 128, "N": 128,
                                                                     "K": 256}


def test_cli_compare_and_errors():
    from click.testing import CliRunner

    from argus.cli import main

    other = "bf16gemm_outf32_tn_64x64_pf3"
    result = CliRunner().invoke(main, ["compare", GEMM, other, "--shape", "m=64",
                                       "--shape", "n=64", "--shape", "k=512"])
    assert result.exit_code == 0, result.output
    assert f"modelled time {other} / {GEMM} = " in result.output
    assert "main-loop MFMA density" in result.output and "largest modelled difference" in \
        result.output
    assert "is modelled" in result.output and "issue slots:" in result.output
    bad = CliRunner().invoke(main, ["time", "no_such_kernel"])
    assert bad.exit_code == 1 and "is not a vendor kernel" in bad.output
    wrong = CliRunner().invoke(main, ["time", GEMM, "--shape", "tokens=4"])
    assert wrong.exit_code == 1 and "has no size" in wrong.output


def test_calibration_rows_come_from_published_data_and_held_out_by_shape():
    from argus.vendor import calibrate

    rows = calibrate.rows()
    families = {f: [r for r in rows if r.family == f] for f in ("attention", "bf16 GEMM")}
    assert len(families["attention"]) == 47 and len(families["bf16 GEMM"]) == 8
    for family in families.values():
        splits = {r.split for r in family}
        assert splits == {"calibration", "validation"}
    assert all(r.gpu == "mi308x" for r in families["bf16 GEMM"])       # cu_num 80
    moe = [r for r in rows if r.family == "fp8 MoE stage 1"]
    # the wheel's fp8 stage-1 rows on the 80-CU part (us1), none fitted on
    assert len(moe) == 105 and {r.split for r in moe} == {"validation"}
    assert {r.gpu for r in moe} == {"mi308x"} and sum("gelu" in r.sizes for r in moe) > 0
    int8 = [r for r in rows if r.family == "int8 GEMM (a8w8)"]
    assert len(int8) == 35 and {r.split for r in int8} == {"validation"}
    assert {r.kernel for r in int8} == {"I8gemm_bf16_perTokenI8_BpreShuffle_128x128",
                                        "I8gemm_bf16_perTokenI8_BpreShuffle_192x128"}
    assert {r.sizes["s"] for r in rows if r.family == "attention" and r.split == "validation"
            } == set(calibrate.FA_VALIDATION_SEQLENS)
    left_out = calibrate.excluded()
    assert left_out and all(e.reason and e.rows > 0 for e in left_out)
    assert calibrate.spearman([1, 2, 3], [10, 30, 20]) == pytest.approx(0.5)
    assert calibrate.mape([(110.0, 100.0), (90.0, 100.0)]) == pytest.approx(10.0)


def test_held_out_table_is_computed_from_rows_the_constants_were_not_fitted_on():
    # the validation figures take their rows from calibrated.json's fitted_on, not from a
    # row's own split label: a row the constants were fitted on never counts as held out
    import attrs

    from argus.isa_cdna3.perf.params import Calibrated
    from argus.vendor import calibrate

    rows = calibrate.rows()
    constants = Calibrated.load()
    fitted = set(constants.fitted_on)
    assert fitted and all(calibrate.fitted_key(r) in fitted for r in rows
                          if r.split == "calibration")
    modelled = [r.measured_us * (1.5 if r.split == "validation" else 1.0) for r in rows]
    table = calibrate.family_table(rows, modelled, constants)
    held = calibrate.held_out(rows, constants)
    assert table["overall"]["validation"]["rows"] == len(held) == sum(
        r.split == "validation" for r in rows)
    assert table["overall"]["validation"]["mape"] == pytest.approx(50.0)
    assert table["overall"]["calibration"]["mape"] == pytest.approx(0.0)
    # fit on one validation row too: it leaves the held-out figures for the calibration ones
    leaked = next(r for r in rows if r.family == "fp8 MoE stage 1")
    wider = attrs.evolve(constants, fitted_on=(*constants.fitted_on, calibrate.fitted_key(leaked)))
    table = calibrate.family_table(rows, modelled, wider)
    moe = table["fp8 MoE stage 1"]
    assert (moe["validation"]["rows"], moe["calibration"]["rows"]) == (104, 1)
    assert moe["calibration"]["mape"] == pytest.approx(50.0)
    assert leaked not in calibrate.held_out(rows, wider)


def test_attention_timing_keeps_the_key_loop_its_length_and_counts_every_flop():
    # S sets both the grid and the key loop: the sample extrapolates along S instead of
    # shrinking it (which once timed 256-key loops for a 4096-key launch, 16x below its work)
    from argus.kernels.attention import attention_fwd

    kernel = argus.compile(attention_fwd, head_dim=128)
    sizes = {"BH": 8, "S": 2048, "D": 128}
    timing = argus.time(kernel, sizes=sizes)
    assert "extrapolated linearly to S=2048" in timing.extrapolation
    assert timing.flops == 4 * 8 * 2048 * 2048 * 128
    assert timing.microseconds * 1e-6 >= timing.flops / 1307.4e12



def test_causal_attention_is_timed_by_its_heaviest_slot_not_its_first_workgroups():
    # a causal query tile i loops 4 (i + 1) - 1 times: the sampler once timed the first (the
    # lightest) tiles; it now samples two trip counts and deals the launch to CU slots. 32
    # workgroups get a CU each, so the launch lasts as long as the heaviest tile (31 trips),
    # which the unsampled road (extrapolate=False) simulates directly
    from argus.isa_cdna3.perf.explain import UNTYPICAL
    from argus.kernels.attention import attention_fwd

    kernel = argus.compile(attention_fwd, head_dim=128, causal=True)
    sizes = {"BH": 4, "S": 1024, "D": 128}
    sampled = argus.time(kernel, sizes=sizes)
    direct = argus.time(kernel, sizes=sizes, extrapolate=False)
    assert "stratified" in sampled.extrapolation and UNTYPICAL not in sampled.extrapolation
    assert "trip count 7 and 15 at BH=" in sampled.extrapolation
    assert "trip count 15 and 31 at BH=4 S=1024" in direct.extrapolation
    assert sampled.microseconds == pytest.approx(direct.microseconds, rel=0.02)
    # every 32-key block of every tile: 2 GEMMs of 32 x 128 x 128, 4 (i + 1) blocks for tile i
    assert sampled.flops == pytest.approx(4 * sum(4 * (i + 1) for i in range(8)) * 4 * 32 * 128
                                          * 128)
    lightest = argus.time(argus.compile(attention_fwd, head_dim=128), sizes={
        "BH": 4, "S": 128, "D": 128})           # one tile over 128 keys: the first tile's work
    assert sampled.microseconds > 3 * lightest.microseconds


def test_critical_slot_deals_workgroups_to_the_slot_that_frees_first():
    from argus.isa_cdna3.perf.sample import critical_slot

    # alike workgroups: ceil(10 / 4) on the last slot
    assert critical_slot(np.full(10, 5), 4, 2.0) == (3, 5.0)
    assert critical_slot(np.full(10, 5), 4, math.inf) == (3, 5.0)
    # one heavy workgroup keeps its slot while the others take the light ones
    count, trip = critical_slot(np.array([100, 1, 1, 1, 1, 1, 1]), 2, 0.0)
    assert (count, trip) == (1, 100.0)
    # light ones first, heavy last: the heavy lands on a slot that already ran light work
    count, trip = critical_slot(np.array([1, 1, 1, 10, 10]), 2, 1.0)
    assert count == 3 and trip == pytest.approx(4.0)


def test_compare_explains_why_our_large_gemm_is_modelled_faster_than_amds_skinny_kernel():
    # AMD's asm bf16 GEMMs are tuned for small M with split-K (aiter's table); at 4096^3 the
    # 96x64 one holds a CU alone (512 VGPRs, 64 KiB LDS) and streams its narrow tiles
    # memory-bound, so ours (128x128 tiles, two per CU) is modelled faster: the explanation
    # must say so in rounds, limiter, unit time and bytes, not just the ratio
    from argus.isa_cdna3.perf.explain import explain
    from argus.kernels.gemm import gemm

    ours = argus.time(argus.compile(gemm, block_m=128, block_n=128, block_k=32),
                      sizes={"M": 4096, "N": 4096, "K": 4096})
    amd = argus.time("bf16gemm_outf32_tn_96x64_pf3", sizes={"m": 4096, "n": 4096, "k": 4096})
    # AMD's 96-row tiles cover 4128 rows (43 tiles): under 1% more MFMA work
    assert ours.flops == 2 * 4096 ** 3 == amd.flops * 4096 / 4128
    assert ours.microseconds < amd.microseconds
    lines = explain(ours, amd, ("ours", "AMD"))
    assert lines[0].startswith("ours is modelled")
    assert "round(s) of 2 vs 1 resident workgroup(s)" in lines[1]
    assert "512 VGPRs per wave" in lines[1]
    assert lines[4].startswith("  largest savings: VMEM busy")
    assert amd.busy["VMEM"] > 0.9 > ours.busy["VMEM"]
    assert not any("different work" in line or "caution" in line for line in lines)


def test_compare_explains_why_our_causal_attention_is_modelled_faster_than_amds():
    # Ours is modelled faster than AMD's causal kernel at a small problem: AMD pairs two
    # 256-query tiles per workgroup, so 8 heads of 2048 queries fill 32 of 304 CUs, ours 128.
    # The explanation must say why; the sample is representative (no caution), the work alike.
    from argus.isa_cdna3.perf.explain import explain
    from argus.kernels.attention import attention_fwd

    ours = argus.time(argus.compile(attention_fwd, head_dim=128, causal=True),
                      sizes={"BH": 8, "S": 2048, "D": 128})
    amd = argus.time("fwd_hd128_bf16_causal", sizes={"b": 1, "h": 8, "s": 2048})
    assert amd.flops >= 4 * 8 * 2048 * 2048 * 128 / 2          # half the score matrix, at least
    assert ours.microseconds < amd.microseconds and ours.workgroups == 4 * amd.workgroups
    lines = explain(ours, amd, ("ours", "AMD"))
    assert lines[0].startswith("ours is modelled") and "x faster than AMD" in lines[0]
    text = "\n".join(lines)
    for figure in ("busiest-CU cycles", "modelled clock", "issue slots", "largest savings",
                   "bytes fetched per FLOP", "LDS bank-conflict factor"):
        assert figure in text
    assert "32 workgroups" in lines[1] and "issue slots" in lines[3]
    # the diagonal's blocks: ours masks 32-key blocks, AMD 256-row tiles (a little more work)
    assert amd.flops / 1.07 < ours.flops < amd.flops
    assert "caution" not in text


def test_stored_sample_traces_round_trip_and_a_torn_file_is_resampled(tmp_path, monkeypatch):
    from argus.isa_cdna3.perf import store

    monkeypatch.setenv("ARGUS_CACHE", str(tmp_path))
    # the compiled-kernel road keeps every wave under 0, the vendor road one list per workgroup
    waves = [WaveEvents(g, w, [0, 1, 2 + g], [0, 3, 0], [0.0, 0.0, 4.5], [0, 96, 0])
             for g in range(2) for w in range(2)]
    for groups in ({0: waves}, {0: waves[:2], 1: waves[2:]}):
        key = ("digest", "kernel", tuple(sorted(groups)))
        assert store.load(key, WaveEvents) is None
        store.save(key, groups)
        back = store.load(key, WaveEvents)
        assert sorted(back) == sorted(groups)
        for slot, members in groups.items():
            assert [(w.workgroup, w.wave_in_group, w.index, w.lines, w.lds, w.dwords)
                    for w in back[slot]] == [(w.workgroup, w.wave_in_group, w.index, w.lines,
                                              w.lds, w.dwords) for w in members]
    store._path(key).write_bytes(b"torn")
    assert store.load(key, WaveEvents) is None
    store.clear()
    assert not (tmp_path / "perf-traces").exists()


def test_a_loop_over_the_sampling_budget_is_sampled_shorter(monkeypatch):
    """No SAMPLE_TRIPS pair lies below the channel counts, so the sample would run the real
    loops; over the (lowered) instruction budget it runs two small values of one instead and
    extrapolates in that loop's trip count (cdiv(CG, 2), not CG), agreeing with the full run
    and saying so."""
    from argus.isa_cdna3.perf import sample
    from argus.kernels.conv import conv_kernel

    kernel = argus.compile(conv_kernel(2, "mfma_f32"), tiles=(1, 1))
    sizes = {"N": 1, "I2H": 4, "SIH": 1, "I2W": 130, "SIW": 1, "G": 1, "CG": 16, "KH": 3,
             "KW": 3, "OCG": 64, "O2H": 2, "SOH": 1, "O2W": 128, "SOW": 1}
    full = argus.time(kernel, sizes=sizes, extrapolate=False)
    monkeypatch.setattr(sample, "SAMPLE_BUDGET", 1 << 20)
    assert argus.time(kernel, sizes=sizes).extrapolation is None      # within the budget
    # a budget that samples trip counts 2 and 4 (2% off): from 1 and 2 the slope is 9.5% too
    # steep for this convolution, which issues a window pass's loads together and waits once
    # per trip, so its first trips overlap less across waves than its later ones. The budget
    # is the CU's: 2000 instructions for each of its waves, and no nested sample
    occ = sample.occupancy_of(kernel.code.kernel(kernel.name), kernel.block)
    share = sample.wave_budget(occ, math.prod(kernel.grid(**sizes)), MI300X) / (1 << 20)
    monkeypatch.setattr(sample, "SAMPLE_BUDGET", round(2000 / share))
    monkeypatch.setattr(sample, "NESTED_OVER", 1 << 20)
    short = argus.time(kernel, sizes={**sizes, "OCG": 63})   # not the remembered schedule
    sampled = argus.time(kernel, sizes=sizes)
    assert "sampling budget 2,000" in sampled.extrapolation
    # a channel loop, read in its trip count: cdiv(CG, 2) -> 8 or cdiv(OCG, 32) -> 2
    assert re.search(r"simulated at CG=\d+ and \d+.*trip count \(\d+, \d+ -> 8\)|"
                     r"simulated at OCG=\d+ and \d+.*trip count \(\d+, \d+ -> 2\)",
                     sampled.extrapolation), sampled.extrapolation
    assert within(sampled.cycles_per_cu, full.cycles_per_cu, 0.05)
    # one channel fewer, sampled, against the full run: no slower, within the sampling's 5%
    assert short.cycles_per_cu <= full.cycles_per_cu * 1.05



def test_an_outer_loop_too_long_to_sample_once_samples_an_inner_loop_shorter_too(monkeypatch):
    """When one trip of the outer sampled loop is already far over the budget (a 3-D
    convolution's depth loop around 125 taps and 64 channels passed the emulator's limit),
    the innermost loop size is sampled at two small values as well, each timed with the outer
    loop extrapolated, and the time extrapolated in the inner trip count: close to the full
    run, and saying so."""
    from argus.isa_cdna3.perf import sample
    from argus.kernels.conv import conv_kernel

    kernel = argus.compile(conv_kernel(2, "mfma_f32"), tiles=(1, 1))
    # 32 channels: at 16 the kernel (its strides folded to constants) fits the budget whole
    sizes = {"N": 1, "I2H": 4, "SIH": 1, "I2W": 130, "SIW": 1, "G": 1, "CG": 32, "KH": 3,
             "KW": 3, "OCG": 64, "O2H": 2, "SOH": 1, "O2W": 128, "SOW": 1}
    full = argus.time(kernel, sizes=sizes, extrapolate=False)
    # at the default budget the CU's round of waves is over it already: the inner loop is
    # sampled at the largest pair of trip counts within the budget (4 and 8), not at 1 and 2,
    # and the time is the full run's
    default = argus.time(kernel, sizes=sizes)
    assert default.extrapolation.startswith("CG sampled at 8 and 16 (trip counts 4, 8)"), \
        default.extrapolation
    assert within(default.cycles_per_cu, full.cycles_per_cu, 0.02)
    monkeypatch.setattr(sample, "SAMPLE_BUDGET", 100)
    monkeypatch.setattr(sample, "NESTED_OVER", 1)
    nested = argus.time(kernel, sizes=sizes)
    # however small the budget, not from a single trip (no steady state): trips 2 and 4
    assert re.match(r"CG sampled at \d+ and \d+ \(trip counts 2, 4\) and the time "
                    r"extrapolated linearly to 16 trips", nested.extrapolation), \
        nested.extrapolation
    assert within(nested.cycles_per_cu, full.cycles_per_cu, 0.02)
    assert within(nested.flops, full.flops, 0.01)

def test_a_nested_sample_runs_at_the_real_launch_s_bandwidth_and_no_faster_than_its_units(
        monkeypatch):
    """A 1-D transposed convolution of 128 channels by 128 (KernelBench Level 1 64's, fewer
    images and positions), its channel loop sampled at 2 and 4 steps of 64. Two errors made
    it 0.38x the full run (Level 1 64 modelled at 0.42x its MFMA roofline): the samples'
    schedules ran at the bandwidth of their own traffic (4 and 8 channels of X, where the real
    launch reads 128), half the real vector memory time; and at so few steps the epilogue's
    stores bound the CU, so the slope was far below what the added steps' MFMAs cost. The
    samples now run at the real launch's bandwidth, and no extrapolated run is shorter than
    its busiest unit is busy: the full run's time, at the default budget and with the outer
    loop sampled shorter as well."""
    from argus.isa_cdna3.perf import sample
    from argus.kernels.conv import conv_kernel

    kernel = argus.compile(conv_kernel(1, "mfma_f32"), tiles=(1, 2), window=(3,),
                           transposed=True)
    sizes = {"N": 296, "G": 1, "CG": 128, "I2W": 1026, "SIW": 1, "KW": 3, "OCG": 128,
             "O2W": 1026, "SOW": 1}
    full = argus.time(kernel, sizes=sizes, extrapolate=False)
    default = argus.time(kernel, sizes=sizes)
    assert default.extrapolation.startswith("CG sampled at 4 and 8 (trip counts 2, 4)")
    assert within(default.cycles_per_cu, full.cycles_per_cu, 0.02)
    assert within(default.microseconds, full.microseconds, 0.02)
    monkeypatch.setattr(sample, "SAMPLE_BUDGET", 100)
    monkeypatch.setattr(sample, "NESTED_OVER", 1)
    # each of the 2 x 2 samples is scheduled once, at the real launch's bandwidth (its traffic
    # is known from the traces first): not first at its own, then again
    scheduled = []
    monkeypatch.setattr(sample, "schedule_cu",
                        lambda *a, **k: scheduled.append(k["bytes_per_clk"]) or
                        schedule_cu(*a, **k))
    sample.forget()
    nested = argus.time(kernel, sizes=sizes)
    assert len(scheduled) == 4 and len(set(scheduled)) == 1, scheduled
    assert "per-CU time extrapolated linearly" in nested.extrapolation
    assert within(nested.cycles_per_cu, full.cycles_per_cu, 0.02)
    # the bound alone: an extrapolation from two store-bound samples stops at the MFMAs'
    low, high = (CuRun(c, {"MFMA": m, "VMEM": v}, {}, 0.0, 0.0, 0.0, 0)
                 for c, m, v in ((1000.0, 400.0, 900.0), (1100.0, 2000.0, 950.0)))
    assert low.scaled(high, 10.0).cycles == 16400.0 / 4          # not 2000, the stores' line


@pytest.mark.parametrize("engine", ["mfma_f32", "mfma_f32_pk"])
def test_a_sample_holds_every_phase_band_and_a_round_the_costliest(engine):
    """A strided transposed 3-D convolution gives each output phase a band of workgroups
    along the grid's first axis; with stride 2, padding 1 and dilation 2 only phase (1, 1, 1)
    is reached by any tap, so 7 bands of 8 only store. The sample ran the first round's ids
    (8 on the 32x32 engine, 4 on the packed one, whose registers allow 4 workgroups a CU) and a
    round of one workgroup a CU took the lowest id: phases of stores (11 us; KernelBench Level 1
    77 at 0.51x its roofline). Now a kernel branching on the workgroup id is sampled along
    BRANCHED_SAMPLE ids of that axis and a round takes the costliest: the computing phase,
    whose MFMAs alone keep a SIMD busy for 9 depths x 27 taps x 16 channel steps x 2 channel
    blocks of 64 clocks."""
    from argus.kernels.conv import conv_kernel

    kernel = argus.compile(conv_kernel(3, engine), window=(3, 3, 3), stride=(2, 2, 2),
                           padding=(1, 1, 1), dilation=(2, 2, 2), transposed=True,
                           tiles=(1, 1))
    channels = {"CG": 32} if engine == "mfma_f32" else {"CG": 8, "P": 4}
    sizes = {"N": 16, "G": 1, **channels, "KD": 3, "KH": 3, "KW": 3, "OCG": 64,
             **{f"I2{a}": 10 for a in "DHW"}, **{f"SI{a}": 1 for a in "DHW"},
             **{f"O2{a}": 9 for a in "DHW"}, **{f"SO{a}": 2 for a in "DHW"}}
    assert math.prod(kernel.grid(**sizes)) < MI300X.cus.value        # one workgroup a CU
    timing = argus.time(kernel, sizes=sizes)
    mfma_clocks = 9 * 27 * 16 * 2 * 64
    assert timing.microseconds >= mfma_clocks / (MI300X.clock_ghz.value * 1e3)


# ------------------------------------------------------------- where repeated reads are served
def test_a_repeat_from_another_xcd_hits_the_infinity_cache_only_after_its_round_and_if_it_fits():
    from argus.isa_cdna3.perf.model import traffic

    mb = 2**20
    # 100 MB read twice: once on each of two XCDs (the L2s are private), one dispatch round:
    # the two fetches are concurrent, so both come from HBM
    once = traffic(MI300X, requested=200 * mb, unique=100 * mb, per_xcd=200 * mb,
                   footprint=100 * mb, rounds=1)
    assert once.hbm == 200 * mb and once.beyond_l2 == 200 * mb
    # the same over four rounds: three quarters of the repeats come after the fill and hit the
    # 256 MB Infinity Cache
    later = traffic(MI300X, requested=200 * mb, unique=100 * mb, per_xcd=200 * mb,
                    footprint=100 * mb, rounds=4)
    assert later.hbm == 125 * mb and later.beyond_l2 == 200 * mb
    # a round fetching more past the L2s than the Infinity Cache holds keeps nothing for the
    # next round; the same bytes over enough rounds to fit are kept
    big = 4 * MI300X.mall_bytes.value
    spilled = traffic(MI300X, requested=2 * big, unique=big, per_xcd=2 * big, footprint=big,
                      rounds=4)
    assert spilled.hbm == 2 * big
    kept = traffic(MI300X, requested=2 * big, unique=big, per_xcd=2 * big, footprint=big,
                   rounds=16)
    assert kept.hbm == big + big / 16
    # repeats within one XCD hit its L2: nothing past the L2 beyond the compulsory reads
    local = traffic(MI300X, requested=200 * mb, unique=100 * mb, per_xcd=100 * mb,
                    footprint=100 * mb, rounds=1)
    assert local.hbm == 100 * mb and local.mall_share == 0.5


def test_more_blocks_per_expert_fetch_more_expert_weights_past_the_l2s():
    from argus.isa_cdna3.perf.model import past_l2
    from argus.vendor.harness import stage1_routing
    from argus.vendor.timing import family

    name = "fmoe_stage1_bf16_pertokenFp8_g1u1_32x256_2tg_pf3"
    fam = family(name)
    xcds = int(profile("mi308x").xcds.value)
    base = {"dim": 7168, "inter": 256, "experts": 256, "topk": 8}
    weights = 2 * base["inter"] * base["dim"]
    fetched = {}
    for tokens in (64, 1024):
        size = {**base, "tokens": tokens}
        blocks, routed = stage1_routing(size, 32)
        reads, together = past_l2(fam.readers(size), xcds, fam.workgroups(size), 160)
        # an expert's blocks are adjacent grid rows: their repeats are issued together
        assert tokens < 1024 or together > 0.9
        # each routed expert's weights at least once, once more per further block (on
        # another XCD), never more than once per XCD
        assert routed * weights <= reads - size["tokens"] * size["dim"] * xcds
        assert reads <= blocks * weights + size["tokens"] * size["dim"] * xcds \
            + size["tokens"] * 8 * 256 * 2
        fetched[tokens] = (reads, blocks > routed)
    # 64 tokens x 8 over 256 experts: about one block each; 1024: many experts have two
    assert fetched[1024][1] and fetched[1024][0] > 1.4 * fetched[64][0]


def test_a_compiled_kernels_readers_come_from_the_program_ids_its_reads_depend_on():
    """Our kernels are charged cross-XCD repeats by the rule AMD's are (`past_l2`), with the
    readers read off the IR: a GEMM's A tile depends on the row of tiles, not the column, so
    every workgroup of a row (grid axis 1) reads it; B the other way round; C is only
    written. A 1-wide axis adds no readers."""
    from argus.isa_cdna3.perf.model import past_l2
    from argus.isa_cdna3.perf.sample import readers_of
    from argus.kernels.gemm import gemm

    kernel = argus.compile(gemm, verify=False)
    sizes = {"M": 1024, "N": 2048, "K": 512}
    grid = kernel.grid(**sizes)
    a, b, c = readers_of(kernel.ir, grid, sizes)
    assert grid[0] > 1 and grid[1] > 1
    assert a == (1024 * 512 * 2, grid[1], grid[0])      # readers one grid row apart
    assert b == (2048 * 512 * 2, grid[0], 1)             # readers adjacent
    assert c == (1024 * 2048 * 4, 1, 0)
    past, together = past_l2([a, b, c], 8, math.prod(grid), 1216)
    # round-robin dealing by workgroup id (MI300X deals flat ids to its 8 XCDs in turn): B's
    # readers are adjacent ids, so on all 8 XCDs; A's are grid[0] = 16 ids apart, so on one
    assert grid[0] == 16
    assert past == a[0] * 1 + b[0] * 8 + c[0]
    # the same operands on a grid 4 tiles wide: A's readers alternate between 2 XCDs
    assert past_l2([(a[0], a[1], 4), b, c], 8, math.prod(grid), 1216)[0] == \
        a[0] * 2 + b[0] * 8 + c[0]
    # one row of tiles (M = 128): nobody shares B
    assert readers_of(kernel.ir, (1, grid[1]), {**sizes, "M": 128})[1][1] == 1


def test_the_xcd_order_puts_a_column_block_of_b_on_one_xcd_and_fetches_less_past_l2():
    """`xcd_order` runs the GEMM's tiles N fastest: the readers of one column block of B are
    then tiles_n ids apart (one XCD when tiles_n is a multiple of 8) where M fastest put them
    on adjacent ids (every XCD). At a small M (B the larger operand) the modelled bytes past
    the L2s drop; at tiles_n not a multiple of 8 the order aligns nothing and B spreads
    again."""
    from argus.isa_cdna3.perf.model import past_l2
    from argus.isa_cdna3.perf.sample import readers_of
    from argus.kernels.gemm import gemm

    sizes = {"M": 384, "N": 4096, "K": 4096}
    fetched = {}
    for order in (False, True):
        kernel = argus.compile(gemm, verify=False, xcd_order=order)
        grid = kernel.grid(**sizes)
        a, b, c = readers_of(kernel.ir, grid, sizes)
        assert (a[1], b[1]) == (4096 // 64, 384 // 64)       # the same sharing, either order
        fetched[order] = past_l2([a, b, c], 8, math.prod(grid), 1216)[0]
        if order:
            assert grid == (64, 6) and b[2] == 64 and a[2] == 1
    # M fastest: B on 6 XCDs (its 6 readers adjacent), A on 4 (6 ids apart); N fastest: B
    # on one, A on all 8
    assert fetched[False] == 384 * 4096 * 2 * 4 + 4096 * 4096 * 2 * 6 + 384 * 4096 * 4
    assert fetched[True] == 384 * 4096 * 2 * 8 + 4096 * 4096 * 2 * 1 + 384 * 4096 * 4
    ragged = {**sizes, "N": 4096 - 64 * 3}                    # 61 column blocks
    kernel = argus.compile(gemm, verify=False, xcd_order=True)
    grid = kernel.grid(**ragged)
    b = readers_of(kernel.ir, grid, ragged)[1]
    assert b[2] == 61 and past_l2([b], 8, math.prod(grid), 1216)[0] == b[0] * 6


def test_an_moe_kernels_weights_are_shared_by_the_blocks_of_an_expert():
    """Reads through loaded data: an expert id (`scalar.load` by block) and gathered token
    rows. Each expert's weights are read by BLOCKS / E blocks (the count AMD's MoE families
    state, read off our IR); each routed row by one block in every N tile, since the table
    declares it once (`T.distinct`: the padding between rows is no second reader)."""
    from argus.isa_cdna3.perf.sample import readers_of
    from argus.kernels.moe import moe_gemm_fp8_kblocked

    kernel = argus.compile(moe_gemm_fp8_kblocked, verify=False)
    sizes = {"TOKENS": 1024, "ROUTES": 1024, "H": 7168, "E": 256, "KT": 112, "N": 512,
             "P": 8192, "BLOCKS": 512}
    grid = kernel.grid(**sizes)
    found = dict(zip([t.name for t in kernel.ir.tensors], readers_of(kernel.ir, grid, sizes)))
    assert found["X"][1] == grid[1]
    assert found["W"][1] == pytest.approx(sizes["BLOCKS"] / sizes["E"])
    assert found["W"][2] == 1                               # an expert's blocks are adjacent
    # half the blocks: an expert's weights have no second reader left
    half = {**sizes, "BLOCKS": 128}
    fewer = dict(zip([t.name for t in kernel.ir.tensors],
                     readers_of(kernel.ir, kernel.grid(**half), half)))
    assert fewer["W"][1] == 1
    # ... and 128 blocks reach at most 128 of the 256 experts: half the weights are never read
    # (the footprint AMD's MoE families count is the routed experts' too)
    assert fewer["W"][0] == found["W"][0] / 2 == 256 * 112 * 512 * 64 / 2


def test_a_grouped_query_kernels_kv_is_shared_by_the_heads_of_its_group():
    """Readers are counted from the origins the workgroups really read (evaluated over the
    grid), so K/V heads shared by a group of query heads count every reader."""
    from argus.isa_cdna3.perf.sample import readers_of
    from argus.kernels.attention import BLOCK_Q, attention_fwd_gqa

    kernel = argus.compile(attention_fwd_gqa, verify=False)
    sizes = {"BH": 8, "G": 8, "S": 1024, "D": 128}
    q, k, v, o = readers_of(kernel.ir, kernel.grid(**sizes), sizes)
    assert q[1] == 1 and o[1] == 1
    assert k[1] == v[1] == sizes["G"] * sizes["S"] // BLOCK_Q


def test_readers_of_a_one_axis_grid():
    """A kernel with a one-axis grid (rows of a copy): every workgroup reads its own rows."""
    import argus.lang as T
    from argus.isa_cdna3.perf.sample import readers_of

    @T.kernel(waves=1)
    def copy_rows(X: T.Tensor("f32", "N", 64), Y: T.Tensor("f32", "N", 64)):
        T.assume((X.shape[0] % 4).eq(0))
        T.grid(X.shape[0] // 4)
        Y.store((T.program_id(0) * 4, 0),
                X.load((T.program_id(0) * 4, 0), T.copy_layout((4, 64), 1, 4)))

    kernel = argus.compile(copy_rows, verify=False)
    sizes = {"N": 64}
    assert len(kernel.grid(**sizes)) == 1
    x, y = readers_of(kernel.ir, kernel.grid(**sizes), sizes)
    assert x == (64 * 64 * 4, 1.0, 0.0) and y == (64 * 64 * 4, 1.0, 0.0)
    assert argus.time(kernel, sizes=sizes).microseconds > 0


def test_a_timing_samples_distinct_rows_once_with_padding_between():
    """A `T.distinct` table longer than its range (an MoE's sorted token ids, padded per
    expert to whole blocks) is sampled with each real row once and padding (the range's end,
    which the kernel's guard skips) between, spread evenly: real rows repeated would break the
    declaration and charge each padding row a real row's loads."""
    from argus.isa_cdna3.perf.sample import sample_inputs
    from argus.kernels.moe import moe_gemm_fp8_kblocked

    ir = moe_gemm_fp8_kblocked.trace()
    sizes = {"TOKENS": 45, "ROUTES": 45, "H": 256, "E": 7, "KT": 4, "N": 128, "P": 32 * 11,
             "BLOCKS": 11}
    ids = sample_inputs(ir, sizes)["sorted_ids"]
    real = ids[ids < sizes["ROUTES"]]
    assert sorted(real.tolist()) == list(range(sizes["ROUTES"]))
    assert (ids[ids >= sizes["ROUTES"]] == sizes["ROUTES"]).all()
    per_block = (ids < sizes["ROUTES"]).reshape(11, 32).sum(1)
    assert per_block.max() - per_block.min() <= 1           # 45 rows over 11 blocks: 4 or 5
    # no padding needed: the table is the range, in order
    short = {**sizes, "P": 32, "BLOCKS": 1}
    assert sample_inputs(ir, short)["sorted_ids"].tolist() == list(range(32))


def test_a_timing_sample_keeps_the_real_rows_of_a_distinct_table():
    """The sizes a `T.distinct` range names are not shrunk in a timing sample: the table's
    length follows the grid, which the sample keeps, so a shrunk range left it all padding
    (1 real token of 2048 rows) and the gathered X rows cost nothing. Every real row is read
    once per column block, so the requested bytes hold W's tiles and X's rows."""
    from argus.isa_cdna3.perf.sample import distinct_range_names
    from argus.kernels.moe import moe_gemm_fp8_direct, pack

    kernel = argus.compile(moe_gemm_fp8_direct, verify=False, block_m=32, block_n=128)
    assert distinct_range_names(kernel.ir) == {"ROUTES"}
    tokens, H, E, N = 1024, 1024, 8, 128
    _, ids, blocks = pack(np.arange(tokens) % E, E, 32)
    timing = argus.time(kernel, sizes={"TOKENS": tokens, "ROUTES": tokens, "H": H, "E": E, "N": N,
                                       "P": len(ids), "BLOCKS": len(blocks), "KT": H // 64})
    weights, rows = len(blocks) * N * H, tokens * H
    assert timing.bytes_requested >= weights + rows


def test_rows_gathered_through_a_distinct_table_have_one_reader_along_its_blocks():
    """Each real row appears once in a `T.distinct` table, so one workgroup along the table's
    blocks reads it (the padding between rows is skipped, not a second reader): the MoE
    GEMM's X rows are read by the N / block_n column blocks of their row block only, BLOCKS
    ids apart in the default order (one XCD when that is a multiple of 4 or 8), where the
    rows-over-values rule alone (P / TOKENS = 2 readers, 1 id apart) put them on every XCD."""
    from argus.isa_cdna3.perf.model import past_l2
    from argus.isa_cdna3.perf.sample import readers_of
    from argus.kernels.moe import moe_gemm_fp8_direct

    kernel = argus.compile(moe_gemm_fp8_direct, verify=False, block_m=32, block_n=128)
    sizes = {"TOKENS": 2048, "ROUTES": 2048, "H": 4096, "E": 128, "N": 768, "P": 4096,
             "BLOCKS": 128, "KT": 64}
    grid = kernel.grid(**sizes)
    x = readers_of(kernel.ir, grid, sizes)[0]
    assert x == (2048 * 4096, 6.0, 128.0)
    past, _ = past_l2([x], 4, math.prod(grid), 560)
    assert past == 2048 * 4096                  # once past the L2s: one XCD reads it

"""The HIP launcher: kernel arguments packed by the same `Launch` the emulator runs, a clear
error without a runtime, and the GEMM on a real GPU (skipped, with the reason, without one)."""

import struct

import numpy as np
import pytest

import argus
from argus.asm import hip
from argus.asm.launch import bind, prepare
from argus.kernels import library

GEMM = library()["gemm"]


def test_kernel_arguments_pack_by_the_compiled_layout():
    compiled = argus.compile(GEMM.kernel)
    inputs = GEMM.inputs({"M": 128, "N": 64, "K": 96}, {})
    binding = bind(compiled.ir, (inputs["A"], inputs["B"], inputs["C"]), {})
    plan = prepare(compiled.code.kernel("gemm"), grid=compiled.grid(**binding.sizes),
                   block=compiled.block, args=binding.arguments)
    segment = plan.kernarg([0x1000, 0x2000, 0x3000])
    layout = {name: (kind, offset) for name, kind, offset, _ in compiled.kernargs}
    for name, address in (("A", 0x1000), ("B", 0x2000), ("C", 0x3000)):
        kind, offset = layout[name]
        assert kind == "ptr" and struct.unpack_from("<Q", segment, offset)[0] == address
    for name, value in binding.sizes.items():
        kind, offset = layout[name]
        assert kind == "i32" and struct.unpack_from("<i", segment, offset)[0] == value
    assert plan.grid == (2, 1, 1) and plan.block == (256, 1, 1)


def test_without_a_runtime_the_error_says_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("ARGUS_HIP_LIBRARY", str(tmp_path / "libamdhip64.so"))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))
    monkeypatch.setattr(hip.ctypes.util, "find_library", lambda name: None)
    with pytest.raises(hip.HipUnavailable, match="install ROCm"):
        hip.runtime()
    compiled = argus.compile(GEMM.kernel)
    inputs = GEMM.inputs({"M": 64, "N": 64, "K": 32}, {})
    with pytest.raises(hip.HipUnavailable):
        compiled.run(inputs["A"], inputs["B"], inputs["C"], device="hip")


def test_gemm_on_the_gpu():
    ok, reason = hip.available()
    if not ok:
        pytest.skip(f"no GPU: {reason}")
    compiled = argus.compile(GEMM.kernel, block_m=128, block_n=128)
    inputs = GEMM.inputs({"M": 256, "N": 384, "K": 512}, {})
    record = compiled.run(inputs["A"], inputs["B"], inputs["C"], device="hip")
    assert record.seconds > 0
    reference = GEMM.reference(inputs, {})
    assert np.abs(inputs["C"] - reference).max() <= 1e-3 * np.abs(reference).max()

"""The real-GPU path: load a code object and launch a kernel through HIP's module API
(`hipModuleLoadData`, `hipModuleGetFunction`, `hipModuleLaunchKernel`) over ctypes.

The kernel arguments are packed by `argus.asm.launch.prepare`, the same `Launch` the emulator
runs, with the device addresses of the buffers filled in. Without a HIP runtime or a device,
`HipUnavailable` says which is missing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from argus import env
from argus.asm.codeobject import CodeObject
from argus.asm.launch import prepare
from argus.isa_cdna3.abi import LaunchError

# hipModuleLaunchKernel `extra` keys (hip_runtime_api.h)
_PARAM_BUFFER_POINTER = 1
_PARAM_BUFFER_SIZE = 2
_PARAM_END = 3
_MEMCPY_HOST_TO_DEVICE, _MEMCPY_DEVICE_TO_HOST = 1, 2


class HipUnavailable(LaunchError):
    """No HIP runtime library, or no GPU it can see."""

    kind = "environment"


class HipError(LaunchError):
    """A HIP call failed; the message names the call and HIP's error string."""

    kind = "environment"


@attrs.frozen
class HipRun:
    """One kernel launch on a GPU: geometry and the wall time of launch + synchronise."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    seconds: float
    device: str


def _library_candidates() -> list[str]:
    found = ctypes.util.find_library("amdhip64")
    rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
    return [p for p in (env.hip_library(), found,
                        str(Path(rocm) / "lib" / "libamdhip64.so")) if p]


def runtime() -> ctypes.CDLL:
    """The HIP runtime with at least one device, or HipUnavailable saying what is missing."""
    errors = []
    for candidate in _library_candidates():
        try:
            hip = ctypes.CDLL(candidate)
            break
        except OSError as err:
            errors.append(f"{candidate}: {err}")
    else:
        raise HipUnavailable("no HIP runtime (libamdhip64.so) found"
                             + (f" ({'; '.join(errors)})" if errors else "")
                             + "; install ROCm or set ARGUS_HIP_LIBRARY, or run on the emulator")
    count = ctypes.c_int(0)
    if hip.hipGetDeviceCount(ctypes.byref(count)) != 0 or count.value == 0:
        raise HipUnavailable("the HIP runtime sees no GPU; run on the emulator")
    hip.hipGetErrorString.restype = ctypes.c_char_p
    return hip


def available() -> tuple[bool, str]:
    """(True, "") when a GPU can be used, else (False, the reason)."""
    try:
        runtime()
    except HipUnavailable as err:
        return False, str(err)
    return True, ""


def _check(hip, status: int, call: str) -> None:
    if status != 0:
        raise HipError(f"{call} failed: {hip.hipGetErrorString(status).decode()} ({status})")


def launch(code: CodeObject, kernel: str, *, grid: int | Sequence[int],
           block: int | Sequence[int], args: Mapping[str, Any] | Sequence[Any]) -> HipRun:
    """Run `kernel` of `code` on device 0; arrays in `args` are copied in and back in place."""
    hip = runtime()
    info = code.kernel(kernel)
    plan = prepare(info, grid=grid, block=block, args=args)
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    image = ctypes.create_string_buffer(code.data, len(code.data))
    _check(hip, hip.hipModuleLoadData(ctypes.byref(module), image), "hipModuleLoadData")
    pointers: list[ctypes.c_void_p] = []
    try:
        _check(hip, hip.hipModuleGetFunction(ctypes.byref(function), module,
                                             info.name.encode()), "hipModuleGetFunction")
        for _, array in plan.buffers:
            pointer = ctypes.c_void_p()
            _check(hip, hip.hipMalloc(ctypes.byref(pointer), ctypes.c_size_t(max(array.nbytes, 1))),
                   "hipMalloc")
            pointers.append(pointer)
            _check(hip, hip.hipMemcpy(pointer, array.ctypes.data_as(ctypes.c_void_p),
                                      ctypes.c_size_t(array.nbytes), _MEMCPY_HOST_TO_DEVICE),
                   "hipMemcpy (to the device)")
        segment = plan.kernarg([p.value for p in pointers])
        kernarg = ctypes.create_string_buffer(segment, len(segment))
        size = ctypes.c_size_t(len(segment))
        extra = (ctypes.c_void_p * 5)(_PARAM_BUFFER_POINTER, ctypes.addressof(kernarg),
                                      _PARAM_BUFFER_SIZE, ctypes.addressof(size), _PARAM_END)
        start = time.perf_counter()
        _check(hip, hip.hipModuleLaunchKernel(function, *plan.grid, *plan.block, 0, None, None,
                                              extra), "hipModuleLaunchKernel")
        _check(hip, hip.hipDeviceSynchronize(), "hipDeviceSynchronize")
        seconds = time.perf_counter() - start
        for pointer, (_, array) in zip(pointers, plan.buffers):
            _check(hip, hip.hipMemcpy(array.ctypes.data_as(ctypes.c_void_p), pointer,
                                      ctypes.c_size_t(array.nbytes), _MEMCPY_DEVICE_TO_HOST),
                   "hipMemcpy (to the host)")
    finally:
        for pointer in pointers:
            hip.hipFree(pointer)
        hip.hipModuleUnload(module)
    return HipRun(info.name, plan.grid, plan.block, seconds, "hip:0")


__all__ = ["HipError", "HipRun", "HipUnavailable", "available", "launch", "runtime"]

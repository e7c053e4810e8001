"""Number formats of gfx942 as numpy arrays: bit views, bf16/f16/fp8 conversions, transcendentals.

Registers hold raw uint32 bits; these helpers reinterpret them. gfx942's fp8/bf8 are the "fnuz"
formats (ml_dtypes float8_e4m3fnuz / float8_e5m2fnuz). Approximate hardware ops and their bounds:
v_exp_f32 = 2^x, v_log_f32 = log2(x), v_rcp_f32 = 1/x, v_rsq_f32 = 1/sqrt(x), v_sqrt_f32: computed
in float64 and rounded once to f32, so within 0.5 ulp of the exact value; the hardware guarantees
1 ulp, so results agree with silicon to 1 ulp.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
FP8 = np.dtype(ml_dtypes.float8_e4m3fnuz)
BF8 = np.dtype(ml_dtypes.float8_e5m2fnuz)

#: Operand element types of the MFMA catalogue -> numpy dtype of their storage.
ELEMENT_DTYPES = {"f16": np.dtype(np.float16), "bf16": BF16, "fp8": FP8, "bf8": BF8,
                  "i8": np.dtype(np.int8), "u8": np.dtype(np.uint8), "f32": np.dtype(np.float32),
                  "xf32": np.dtype(np.float32), "f64": np.dtype(np.float64),
                  "i32": np.dtype(np.int32)}

#: The IR's tensor element types (`argus.ir.types.DTYPE_BYTES`, same names and widths) -> the
#: numpy dtype holding their elements in host arrays (inputs, outputs, the interpreter's memory).
NUMPY_DTYPES = {name: ELEMENT_DTYPES[name] for name in ("bf16", "f16", "f32", "i32", "fp8",
                                                         "bf8", "i8", "u8")}


def as_f32(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def f32_bits(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def as_i32(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.int32)


def unpack(regs: np.ndarray, element: str) -> np.ndarray:
    """(..., n_regs) uint32 registers -> (..., n_elements) values of `element`, low part first."""
    dtype = ELEMENT_DTYPES[element]
    raw = np.ascontiguousarray(regs, dtype=np.uint32)
    return raw.view(dtype)


def pack(values: np.ndarray, element: str) -> np.ndarray:
    """Inverse of `unpack`: (..., n_elements) -> (..., n_regs) uint32."""
    dtype = ELEMENT_DTYPES[element]
    return np.ascontiguousarray(np.asarray(values).astype(dtype)).view(np.uint32)


def to_f32_exact(values: np.ndarray) -> np.ndarray:
    """Widen any MFMA element type to the type its products are accumulated in."""
    if values.dtype in (np.dtype(np.int8), np.dtype(np.int32)):
        return values.astype(np.int64)
    if values.dtype == np.float64:
        return values
    return values.astype(np.float32)


#: v_max_f32 / v_min_f32: IEEE maxNum/minNum, the number when one operand is NaN (LLVM's
#: AMDGPU backend selects them for fmaxnum/fminnum; a signalling NaN's quieting is not modelled).
#: The emulator executes them so and the interpreter's max/min and max reductions agree with it,
#: where numpy's `maximum` would propagate the NaN.
max_f32 = np.fmax
min_f32 = np.fmin


def _rounded(fn, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return fn(x.astype(np.float64)).astype(np.float32)


def exp2(x: np.ndarray) -> np.ndarray:
    return _rounded(np.exp2, x)


def log2(x: np.ndarray) -> np.ndarray:
    return _rounded(np.log2, x)


def rcp(x: np.ndarray) -> np.ndarray:
    return _rounded(lambda v: 1.0 / v, x)


def rsq(x: np.ndarray) -> np.ndarray:
    return _rounded(lambda v: 1.0 / np.sqrt(v), x)


def sqrt(x: np.ndarray) -> np.ndarray:
    return _rounded(np.sqrt, x)


def cvt_f32_u32(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).astype(np.float32)


def cvt_u32_f32(x: np.ndarray) -> np.ndarray:
    """f32 -> u32 truncating toward zero, clamped to [0, 2^32-1], NaN -> 0 (ISA saturation)."""
    with np.errstate(all="ignore"):
        wide = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0)
    return np.clip(wide, 0, 4294967295).astype(np.uint32)


def cvt_i32_f32(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        wide = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0)
    return np.clip(wide, -2147483648, 2147483647).astype(np.int32).view(np.uint32)

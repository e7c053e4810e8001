"""f32 -> bf16 casts, both roundings: the code object in the strict emulator, the reference
interpreter and numpy agree bit for bit, NaNs, infinities, signed zeros and ties included."""

import numpy as np
import pytest
from ml_dtypes import bfloat16

import argus
import argus.lang as T
from argus.absint.concrete import truncated_bf16
from argus.lang import Tensor
from argus.lang.errors import DSLError


@T.kernel(waves=1)
def narrow(X: Tensor("f32", "N", 64), Y: Tensor("bf16", "N", 64), *, rounding: str = "rne"):
    T.grid(X.shape[0] // 16)
    row = T.program_id(0) * 16
    spec = T.copy_layout((16, 64), 1, 4)
    Y.store((row, 0), X.load((row, 0), spec).to("bf16", rounding))


def awkward_inputs() -> np.ndarray:
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((32, 64)) * 10.0 ** rng.integers(-30, 30, (32, 64)))
    x = x.astype(np.float32)
    special = np.array([0x7FC00000, 0x7F800001, 0xFF800000, 0x80000000, 0x3F808000,
                        0x3F818000, 0x3F80FFFF, 0x7F7FFFFF, 0x00000001, 0xBF808001],
                       np.uint32).view(np.float32)
    x[0, :len(special)] = special
    return x


@pytest.mark.parametrize("rounding", ["rne", "rtz"])
def test_the_emulated_cast_matches_the_interpreter_bit_for_bit(rounding):
    x = awkward_inputs()
    y = np.zeros(x.shape, bfloat16)
    argus.compile(narrow, rounding=rounding).run(X=x, Y=y, check="strict")
    ran = argus.interpret(narrow.trace(rounding=rounding),
                          {"X": x, "Y": np.zeros(x.shape, np.float32)})
    with np.errstate(invalid="ignore"):  # numpy warns while rounding the NaNs
        want = (truncated_bf16(x) if rounding == "rtz"
                else x.astype(bfloat16).astype(np.float32))
    got, interpreted = y.astype(np.float32), np.asarray(ran.outputs["Y"]).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan) and np.array_equal(np.isnan(interpreted), nan)
    assert np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
    assert np.array_equal(interpreted.view(np.uint32)[~nan], want.view(np.uint32)[~nan])


def test_truncation_is_one_perm_per_pair_and_never_rounds_up():
    text = argus.compile(narrow, rounding="rtz").text
    assert "v_bfe_u32" not in text and "v_add3_u32" not in text and "v_perm_b32" in text
    x = np.array([0x3F80FFFF], np.uint32).view(np.float32)      # just below 1 + 2^-7
    assert truncated_bf16(x).view(np.uint32)[0] == 0x3F800000


@T.kernel(waves=1)
def to_fp8(X: Tensor("f32", "N", 64), Y: Tensor("fp8", "N", 64)):
    T.grid(X.shape[0] // 16)
    row = T.program_id(0) * 16
    spec = T.copy_layout((16, 64), 1, 4)
    Y.store((row, 0), X.load((row, 0), spec).to("fp8", "rtz"))


def test_an_unknown_or_undefined_rounding_is_refused_at_its_line():
    with pytest.raises(DSLError, match="rounding 'rtn' is not one of"):
        narrow.trace(rounding="rtn")
    with pytest.raises(DSLError, match="'rtz' is defined for f32 -> bf16 only, not f32 -> fp8"):
        to_fp8.trace()


@T.kernel(waves=1)
def byte_mask(X: Tensor("f32", "N", "M"), K: Tensor("u8", "N", "M"), Y: Tensor("f32", "N", "M"),
):
    """A one-byte tensor read with a guard at any size (one byte at a time at a tail), cast to
    f32 and applied: torch's `x * mask` for a bool mask."""
    N, M = X.shape
    T.grid(T.cdiv(N, 4), T.cdiv(M, 64))
    r0, c0 = T.program_id(0) * 4, T.program_id(1) * 64
    spec = T.copy_layout((4, 64), 1, 4)
    x = X.load((r0, c0), spec, guard=True)
    Y.store((r0, c0), x * K.load((r0, c0), spec, guard=True).to("f32"), guard=True)


@T.kernel(waves=1)
def signed_bytes(K: Tensor("i8", "N", "M"), Y: Tensor("f32", "N", "M")):
    N, M = K.shape
    T.grid(T.cdiv(N, 4), T.cdiv(M, 64))
    r0, c0 = T.program_id(0) * 4, T.program_id(1) * 64
    spec = T.copy_layout((4, 64), 1, 4)
    Y.store((r0, c0), K.load((r0, c0), spec, guard=True).to("f32"), guard=True)


@pytest.mark.parametrize("shape", [(4, 64), (5, 67), (9, 3), (1, 1)])
def test_one_byte_elements_are_read_one_at_a_time_at_a_tail(shape):
    """A vector of four bytes straddling M's bound would read bytes past the tensor (or zeros
    for the whole dword): at a tail each byte is read alone (buffer_load_ubyte) and packed."""
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    mask = rng.random(shape) > 0.5                 # a bool array: read in place as u8
    y = np.full(shape, np.nan, np.float32)
    compiled = argus.compile(byte_mask)
    compiled.run(X=x, K=mask, Y=y, check="strict")
    assert np.array_equal(y, x * mask)
    assert "buffer_load_ubyte" in compiled.text and "v_cvt_f32_ubyte1" in compiled.text
    k = rng.integers(-128, 128, shape).astype(np.int8)
    z = np.full(shape, np.nan, np.float32)
    argus.compile(signed_bytes).run(K=k, Y=z, check="strict")
    assert np.array_equal(z, k.astype(np.float32))            # sign-extended, not 0..255
    ran = argus.interpret(signed_bytes.trace(), {"K": k, "Y": np.zeros(shape, np.float32)})
    assert np.array_equal(np.asarray(ran.outputs["Y"], np.float32), k.astype(np.float32))


def test_a_byte_tensor_casts_to_f32_only():
    @T.kernel(waves=1)
    def widen(K: Tensor("u8", "N", 64), Y: Tensor("bf16", "N", 64)):
        T.grid(K.shape[0] // 4)
        spec = T.copy_layout((4, 64), 1, 4)
        Y.store((T.program_id(0) * 4, 0), K.load((T.program_id(0) * 4, 0), spec).to("bf16"))

    with pytest.raises(argus.ArgusError, match="cast u8 -> bf16 is not lowered") as err:
        argus.compile(widen, verify=False)
    assert "u8 and i8 convert to f32 only" in err.value.fix

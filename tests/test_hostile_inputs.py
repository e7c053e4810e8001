"""Every public entry point, given hostile arguments (wrong types, None, negative and huge
numbers, empty arrays, wrong dtypes and shapes, non-contiguous views), returns a result or
raises an ArgusError naming the argument: never a TypeError, OverflowError, KeyError,
MemoryError or numpy's own complaint from deep inside."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import argus
import argus.lang as T
from argus.asm import CodeObject, CodeObjectError, KernelNotFound, assemble, example_path
from argus.asm.launch import emulate
from argus.errors import ArgusError
from argus.isa_cdna3.abi import LaunchError
from argus.timing import compare, time_target


@T.kernel(waves=1)
def copy_rows(X: T.Tensor("f32", "N", 64), Y: T.Tensor("f32", "N", 64)):
    T.assume((X.shape[0] % 16).eq(0))
    T.grid(X.shape[0] // 16)
    row = T.program_id(0) * 16
    Y.store((row, 0), X.load((row, 0), T.copy_layout((16, 64), 1, 4)))


@functools.cache
def compiled():
    return argus.compile(copy_rows)


@functools.cache
def example():
    """The built-in 32x32 MFMA GEMM: buffers A, B, C and a by-value i32 K."""
    return assemble(example_path().read_text())


def rows(n: int = 32) -> np.ndarray:
    return np.arange(n * 64, dtype=np.float32).reshape(n, 64)


def nasty_arrays() -> st.SearchStrategy:
    dtypes = st.sampled_from([np.float32, np.float64, np.float16, np.int32, np.uint8, np.bool_,
                              np.complex64])
    plain = hnp.arrays(dtypes, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0,
                                                 max_side=72))
    # a non-contiguous view, the form a slice of a user's array takes
    strided = plain.filter(lambda a: a.ndim >= 1).map(lambda a: a[..., ::2])
    return st.one_of(plain, strided, st.just(rows()[:, ::2]), st.just(rows(64)[::2]),
                     st.just(rows(0)), st.just(np.array(["a", "b"])),
                     st.just(np.array([object()])))


HOSTILE = st.one_of(
    st.sampled_from([None, True, 0, -1, 1, 2**31, 2**32, 2**63, -2**70, 10**30, 1.5,
                     float("nan"), float("inf"), -0.0, 1e300, "", "x", "gemm", "../etc/passwd",
                     b"", b"\x7fELF", (), [], {}, (1, 2, 3, 4), (0,), [[1]], object(),
                     np.int64(-1), np.float64(1e300), np.uint64(2**64 - 1)]),
    st.integers(min_value=-2**80, max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.binary(max_size=16),
    st.lists(st.integers(-4, 4), max_size=4),
    st.dictionaries(st.sampled_from(["N", "M", "K", "A", "x"]), st.integers(-2**40, 2**40),
                    max_size=3),
    nasty_arrays(),
)


def outcome(call, value) -> str:
    """'result' or the ArgusError's class name; anything else fails the test."""
    try:
        call(value)
    except ArgusError as error:
        assert str(error), "an ArgusError without a message"
        return type(error).__name__
    return "result"


FACADE = {
    "verify(kernel)": lambda v: argus.verify(v, jobs=1),
    "verify(N=)": lambda v: argus.verify(copy_rows, N=v, jobs=1),
    "verify(solver=)": lambda v: argus.verify(copy_rows, solver=v, jobs=1, N=32),
    "verify(jobs=)": lambda v: argus.verify(copy_rows, jobs=v, N=32, replay=False),
    "verify(timeout_ms=)": lambda v: argus.verify(copy_rows, timeout_ms=v, jobs=1, N=32),
    "verify(unroll=)": lambda v: argus.verify(copy_rows, unroll=v, jobs=1, N=32),
    "verify(**sizes)": lambda v: argus.verify(copy_rows, jobs=1,
                                              **(v if isinstance(v, dict) else {"M": v})),
    "compile(kernel)": lambda v: argus.compile(v),
    "compile(policy=)": lambda v: argus.compile(copy_rows, policy=v),
    "compile(block_k=)": lambda v: argus.compile("gemm", block_k=v),
    "interpret(kernel)": lambda v: argus.interpret(v, {"X": rows(), "Y": rows()}),
    "interpret(X)": lambda v: argus.interpret(copy_rows, {"X": v, "Y": rows()}),
    "interpret(arrays)": lambda v: argus.interpret(copy_rows, v),
}

COMPILED = {
    "run(X)": lambda v: compiled().run(v, rows()),
    "run(Y)": lambda v: compiled().run(rows(), v),
    "run(device=)": lambda v: compiled().run(rows(), rows(), device=v),
    "run(check=)": lambda v: compiled().run(rows(), rows(), check=v),
    "run(memory=)": lambda v: compiled().run(rows(), rows(), memory=v),
    "grid(N=)": lambda v: compiled().grid(N=v),
    "time(compiled, sizes=)": lambda v: argus.time(compiled(), sizes=v),
    "time(compiled, N)": lambda v: argus.time(compiled(), sizes={"N": v}),
    "time(gpu=)": lambda v: argus.time(compiled(), sizes={"N": 64}, gpu=v),
}

CODE_OBJECTS = {
    "CodeObject.from_bytes": lambda v: CodeObject.from_bytes(v),
    "CodeObject.from_file": lambda v: CodeObject.from_file(v),
    "CodeObject.kernel": lambda v: example().kernel(v),
    "assemble": lambda v: assemble(v),
    "example_path": lambda v: example_path(v),
    "emulate(code_object)": lambda v: emulate(v, grid=1, block=64),
    "emulate(kernel)": lambda v: emulate(example(), v, grid=1, block=64),
    "emulate(grid=)": lambda v: emulate(example(), grid=v, block=64),
    "emulate(block=)": lambda v: emulate(example(), grid=1, block=v),
    "emulate(args=)": lambda v: emulate(example(), grid=1, block=64, args=v),
    "emulate(K)": lambda v: emulate(example(), grid=1, block=64, args={"K": v}),
    "emulate(A)": lambda v: emulate(example(), grid=1, block=64, args={"A": v}),
    "emulate(check=)": lambda v: emulate(example(), grid=1, block=64, check=v),
    "time(code_object)": lambda v: argus.time(v, grid=1, block=64),
    "time(grid=)": lambda v: argus.time(example(), grid=v, block=64),
    "time(args=)": lambda v: argus.time(example(), grid=1, block=64, args=v),
    "time_target(target)": lambda v: time_target(v),
    "time_target(shape=)": lambda v: time_target("gemm", shape=v),
    "compare": lambda v: compare(v, v),
}


@given(entry=st.sampled_from(sorted(FACADE)), value=HOSTILE)
def test_the_facade_gives_a_result_or_an_argus_error(entry, value):
    outcome(FACADE[entry], value)


@given(entry=st.sampled_from(sorted(COMPILED)), value=HOSTILE)
def test_a_compiled_kernel_gives_a_result_or_an_argus_error(entry, value):
    outcome(COMPILED[entry], value)


@given(entry=st.sampled_from(sorted(CODE_OBJECTS)), value=HOSTILE)
def test_code_objects_and_launches_give_a_result_or_an_argus_error(entry, value):
    outcome(CODE_OBJECTS[entry], value)


# the two examples, and their neighbours, name the argument and the fix

@pytest.mark.parametrize("data", ["kernel.hsaco", None, 12, 10**12, [0x7F, 0x45]])
def test_from_bytes_refuses_what_is_not_bytes(data):
    with pytest.raises(CodeObjectError, match=f"made from bytes, not {type(data).__name__}"):
        CodeObject.from_bytes(data)


def test_from_bytes_given_a_path_says_how_to_read_a_file():
    with pytest.raises(CodeObjectError) as error:
        CodeObject.from_bytes(str(example_path()))
    assert "CodeObject.from_file(path)" in error.value.fix


@pytest.mark.parametrize(("value", "says"), [
    (2**32, "4294967296 does not fit its 4-byte integer slot [0, 4294967296)"),
    (-2**31 - 1, "-2147483649 does not fit its 4-byte integer slot [-2147483648, 2147483648)"),
    (2**100, "does not fit"),
    (np.uint64(2**64 - 1), "does not fit"),
    (1e39, "1e+39 overflows its 4-byte float slot"),
    ("64", "by-value arguments take int, float or a numpy scalar, got str"),
    (np.float64(1e300), "overflows its 4-byte float slot"),
])
def test_an_over_wide_by_value_argument_is_a_launch_error_naming_it(value, says):
    with pytest.raises(LaunchError, match="argument 'K'") as error:
        emulate(example(), grid=1, block=64, args={"K": value})
    assert says in str(error.value)
    assert error.value.fix


@pytest.mark.parametrize("value", [2**32 - 1, -2**31, np.int8(-1), np.uint16(7), True, 0.5])
def test_a_by_value_argument_that_fits_is_packed_with_its_sign(value):
    from argus.asm.launch import _by_value_bytes

    raw = _by_value_bytes(value, 4, "K")
    if isinstance(value, float):
        assert np.frombuffer(raw, "<f4")[0] == value
    else:
        signed = int(value) < 0
        assert int.from_bytes(raw, "little", signed=signed) == int(value)


@pytest.mark.parametrize(("value_type", "value", "fits"), [
    ("i32", 2**31, False), ("i32", -2**31, True), ("u32", -1, False), ("u32", 2**32 - 1, True),
    ("i64", 2**63, False), ("i64", -2**63, True), ("u64", 2**64 - 1, True),
])
def test_a_declared_value_type_sets_the_range(value_type, value, fits):
    from argus.asm.launch import _by_value_bytes

    size = int(value_type[1:]) // 8
    if fits:
        assert len(_by_value_bytes(value, size, "n", value_type)) == size
    else:
        with pytest.raises(LaunchError, match=f"does not fit its {value_type} slot"):
            _by_value_bytes(value, size, "n", value_type)


def test_a_missing_kernel_is_an_argus_error_and_still_a_key_error():
    with pytest.raises(KernelNotFound) as error:
        example().kernel("gemm_bf16")
    assert isinstance(error.value, KeyError) and "mfma_gemm_32x32" in str(error.value)


def test_a_tile_parameter_too_large_for_lds_is_refused_before_allocating():
    # block_k=2**40 used to enumerate an 8 TiB coordinate grid (MemoryError)
    with pytest.raises(ArgusError, match="64 KiB"):
        argus.compile("gemm", block_k=2**40)

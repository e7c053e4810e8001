"""Arguments are validated where they enter the API: a bad one is an ArgusError naming it and
the fix (DSLError, VerifyError, ExprError), never an incidental AttributeError, KeyError,
TypeError or ZeroDivisionError from deep inside."""

import pytest

import argus
import argus.lang as T
from argus.errors import ArgusError
from argus.ir.expr import Var
from argus.lang import Tensor
from argus.smt import prove


def kernel_with(body, dtype="f32"):
    @T.kernel(waves=1)
    def probe(X: Tensor(dtype, "N", 64), Y: Tensor("f32", "N", 64)):
        T.grid(1)
        body(X, Y)

    return probe


@pytest.mark.parametrize(("call", "says"), [
    (lambda: argus.verify(42), "verify takes an @kernel function"),
    (lambda: argus.verify(kernel_with(lambda X, Y: None, dtype="f33"), jobs=1),
     "argument 'X' has dtype 'f33'"),
    (lambda: argus.verify(kernel_with(lambda X, Y: T.copy_layout((16, 64), 0, 8)), jobs=1),
     "waves and vector as whole numbers >= 1"),
    (lambda: argus.verify(kernel_with(lambda X, Y: T.lds((-64, 32), "f32")), jobs=1),
     "lds shape (-64, 32)"),
    (lambda: argus.verify(kernel_with(lambda X, Y: T.lds((64, 32), "f33")), jobs=1),
     "lds dtype 'f33'"),
    (lambda: argus.verify(kernel_with(lambda X, Y: T.program_id(-1)), jobs=1),
     "program_id(-1): the grid axis is 0, 1 or 2"),
    (lambda: argus.verify(kernel_with(lambda X, Y: T.tag(X, lambda r: {"r": r})), jobs=1),
     "must take 2 coordinates"),
    (lambda: argus.verify(kernel_with(lambda X, Y: None), jobs=1, N=2**100), "outside the range"),
    (lambda: argus.verify(kernel_with(lambda X, Y: T.tag_assert("X.r == 1", "rows")), jobs=1),
     "tag_assert takes a predicate function"),
    (lambda: Var("x"), "needs its range"),
    (lambda: Var("x", 0, 2.5), "the bounds must be ints"),
    (lambda: Var("x", 3, 1), "empty range"),
    (lambda: Var("x-1", 0, 4), "Python identifier"),
    (lambda: argus.compile(42), "argus.compile takes an @kernel function"),
    (lambda: argus.interpret(3.5, {}), "argus.interpret takes an @kernel function"),
    (lambda: argus.interpret(kernel_with(lambda X, Y: None), {"X": [[1.0] * 64], "Y": None}),
     "argument X is a list; pass a numpy array"),
    (lambda: argus.verify("gemm", M=64, N=64, K=64, timeout_ms=-1), "timeout_ms=-1"),
    (lambda: argus.verify("gemm", M=64, N=64, K=64, timeout_ms="10s"), "timeout_ms='10s'"),
    (lambda: argus.verify("gemm", M=64, N=64, K=64, solver="yices"), "unknown solver 'yices'"),
    (lambda: prove(Var("x", 0, 4) < 4, timeout_ms=0), "timeout_ms=0"),
    (lambda: prove(Var("x", 0, 4) + 1), "is an integer"),
], ids=range(21))
def test_bad_arguments_are_argus_errors(call, says):
    with pytest.raises(ArgusError) as error:
        call()
    assert says in str(error.value)


def test_var_errors_are_still_value_errors():
    # callers that caught ValueError before keep working
    with pytest.raises(ValueError):
        Var("x", 3, 1)


def test_a_replay_at_huge_sizes_is_refused_before_allocating():
    # a witness whose minimisation ran out of time may keep sizes of 2^31: the replay is
    # refused (the obligation Unknown), never a MemoryError out of verify
    from argus.absint.replay import ReplayError, _inputs

    ir = kernel_with(lambda X, Y: None).trace()
    with pytest.raises(ReplayError, match="more than the replay allows"):
        _inputs(ir, {"N": 2**31 - 64}, None)

"""The evaluation pipeline on candidates a model might write: output it never writes is caught
by the NaN-prefilled outputs, and edited source that spins or hogs memory is stopped by the
sandbox's limits; none of them is ever a result."""

import attrs
import pytest
from fakes import edits

from argus.search.evaluate import INVALID, TIMEOUT, WRONG, Evaluator, precheck
from argus.search.space import Action, Problem, apply, default_candidate

GEMM = Problem("gemm", {"M": 256, "N": 256, "K": 256})


def test_output_left_unwritten_is_wrong_even_where_the_verifier_has_nothing_to_refute():
    candidate = attrs.evolve(default_candidate(GEMM), source=edits.HALF_WRITTEN)
    evaluation = Evaluator(GEMM, trials=2)(candidate)
    assert evaluation.status == WRONG, evaluation.message
    assert "unwritten" in evaluation.message and "still NaN" in evaluation.message
    assert evaluation.verdict.split(":")[1].strip().startswith(tuple("123456789"))
    assert not evaluation.is_result


@pytest.mark.parametrize("source, status, words", [
    (edits.SPIN, TIMEOUT, "longer than 2 s"),
    (edits.HOG, INVALID, "exceeded 512 MB"),
    ("def broken(:\n", INVALID, "SyntaxError"),
], ids=["spin", "hog", "syntax"])
def test_edited_source_runs_only_inside_the_sandbox_limits(source, status, words):
    candidate = attrs.evolve(default_candidate(GEMM), source=source)
    evaluation = Evaluator(GEMM, sandbox_time_s=2, sandbox_memory_mb=512)(candidate)
    assert (evaluation.status, evaluation.stage) == (status, "trace")
    assert words in evaluation.message


def test_shapes_the_tiles_do_not_divide_are_pruned_before_verifying():
    problem = Problem("gemm", {"M": 192, "N": 256, "K": 256})
    base = default_candidate(problem)
    assert precheck(problem, base) == ""
    wide = apply(base, [Action("block_m", 128)])
    assert "breaks the kernel's assumption" in precheck(problem, wide)

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


def _pretend_reference(us: float) -> dict:
    return {"name": "a reference the candidate beats by far", "time_us": us, "modelled": True}


def test_a_suspect_speedup_is_rechecked_on_fresh_seeds_and_carries_a_note():
    from argus.search.evaluate import OK, SUSPECT_SPEEDUP
    from argus.search.view import final_table

    evaluator = Evaluator(GEMM, trials=1, reference=_pretend_reference(1e6))
    evaluation = evaluator(default_candidate(GEMM))
    assert evaluation.status == OK and evaluation.reward > SUSPECT_SPEEDUP
    assert "re-checked on 2 fresh seeds" in evaluation.note
    rechecked = evaluation.correctness["recheck"]
    assert rechecked["ok"] and len(rechecked["trials"]) == 2
    first = {t["seed"] for t in evaluation.correctness["emulator"]["trials"]}
    assert first.isdisjoint(t["seed"] for t in rechecked["trials"])
    assert "1*" in final_table([evaluation]).columns[0]._cells
    # a plausible speed-up is not re-checked
    plain = attrs.evolve(evaluator, reference=_pretend_reference(1.0))(default_candidate(GEMM))
    assert plain.status == OK and not plain.note and "recheck" not in plain.correctness


def test_a_suspect_speedup_that_fails_its_recheck_is_no_result(monkeypatch):
    from argus import pipeline
    from argus.check import Trial
    from argus.search.evaluate import RECHECK_SEED

    original = pipeline.check_emulated

    def fails_on_fresh_seeds(compiled, case):
        result = original(compiled, case)
        if case.seeds[0] >= RECHECK_SEED * 1000:  # a kernel that only works on some inputs
            wrong = Trial(case.seeds[0], case.sizes[0], 2.0)
            return attrs.evolve(result, trials=(wrong,))
        return result

    monkeypatch.setattr(pipeline, "check_emulated", fails_on_fresh_seeds)
    monkeypatch.setattr(pipeline, "_CACHE", {})      # check again, not the earlier test's result
    evaluation = Evaluator(GEMM, trials=1, reference=_pretend_reference(1e6))(
        default_candidate(GEMM))
    assert (evaluation.status, evaluation.stage) == (WRONG, "recheck")
    assert "failed its re-check: emulator: max error 2" in evaluation.message
    assert not evaluation.is_result and evaluation.reward is None

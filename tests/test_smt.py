"""The SMT layer against brute force: verdicts and minimal witnesses equal exhaustive enumeration,
z3 and cvc5 agree, the bit-vector encoding agrees with `evaluate`, and the MFMA acceptance
properties are proved / refuted with the smallest counterexample.
"""

import numpy as np
import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st
from test_expr import GRID, VARS, int_exprs

from argus.ir.expr import And, Const, Or, Var, evaluate, ite, substitute
from argus.isa_cdna3.mfma import mfma
from argus.smt import Proved, Refuted, Unknown, cache_info, clear_cache, prove, to_smtlib
from argus.smt.encode import defined, environment, lower, width_for

try:
    import cvc5
except ImportError:  # an optional extra: the cvc5 cross-checks skip, the z3 ones still run
    cvc5 = None
NEEDS_CVC5 = pytest.mark.skipif(
    cvc5 is None, reason="cvc5 is not installed (pip install -e '.[cvc5]' to cross-check z3)")
SOLVERS = ["z3", "cvc5"] if cvc5 is not None else ["z3"]
SOLVER_PARAMS = ["z3", pytest.param("cvc5", marks=NEEDS_CVC5)]

SLOW = settings(max_examples=min(settings().max_examples, 60))

LANE = Var("lane", 0, 64)
ITERATION = Var("iv", 0, 1024)


def lexmin_violation(condition):
    """The lexicographically smallest grid point (in VARS order) where `condition` is false."""
    holds = np.broadcast_to(evaluate(condition, GRID), [v.hi - v.lo for v in VARS])
    bad = np.argwhere(~holds)
    if len(bad) == 0:
        return None
    return {v.name: int(i) + v.lo for v, i in zip(VARS, bad[0])}


conditions = st.builds(
    lambda op, a, b: {"<": a < b, "<=": a <= b, "eq": a.eq(b), "ne": a.ne(b)}[op],
    st.sampled_from(["<", "<=", "eq", "ne"]), int_exprs, int_exprs)


# ------------------------------------------------------------------- brute-force oracle


@SLOW
@given(conditions, st.sampled_from(SOLVERS))
def test_verdict_and_minimal_witness_match_enumeration(condition, solver):
    expected = lexmin_violation(condition)
    verdict = prove(condition, solver=solver, minimize=VARS)
    if expected is None:
        assert verdict == Proved()
    else:
        assert isinstance(verdict, Refuted), verdict
        assert verdict.minimal
        witness = {v.name: verdict.witness[v.name] for v in VARS if v.name in verdict.witness}
        assert witness == {k: expected[k] for k in witness}, condition


@SLOW
@given(conditions, st.integers(1, 5), st.booleans(), st.booleans())
def test_a_size_in_whole_tiles_keeps_verdict_and_minimal_witness(condition, bits, conjoined,
                                                                  nonzero):
    """`y & (2^bits - 1) == 0` lets the z3 path write y as high bits and zeros (up to every
    bit of y, when only 0 is left): verdicts and witnesses are still those of enumerating the
    points the assumption admits (`nonzero`: only where y is not 0)."""
    Y = VARS[1]
    if nonzero:
        condition = Or(condition, Y.eq(0))
    aligned = (Y & ((1 << bits) - 1)).eq(0)
    assume = And(aligned, VARS[0] < 7) if conjoined else aligned
    shape = [v.hi - v.lo for v in VARS]
    bad = np.argwhere(np.broadcast_to(evaluate(assume, GRID), shape)
                      & ~np.broadcast_to(evaluate(condition, GRID), shape))
    verdict = prove(condition, [assume], minimize=VARS)
    if len(bad) == 0:
        assert verdict == Proved()
        return
    assert isinstance(verdict, Refuted) and verdict.minimal, verdict
    expected = {v.name: int(i) + v.lo for v, i in zip(VARS, bad[0])}
    assert {v.name: verdict.witness[v.name] for v in VARS} == expected, condition


@SLOW
@given(int_exprs, st.sampled_from([0, -1]), st.sampled_from(SOLVERS))
def test_exact_maximum_is_proved_and_one_less_refuted(e, slack, solver):
    """The true maximum over the domain is usually tighter than interval bounds, so these
    obligations need the solver, and half of them hold."""
    largest = int(np.max(evaluate(e, GRID)))
    condition = e <= largest + slack
    verdict = prove(condition, solver=solver, minimize=VARS)
    expected = lexmin_violation(condition)
    if expected is None:
        assert verdict == Proved()
    else:
        assert verdict.witness == {k: expected[k] for k in verdict.witness}


@NEEDS_CVC5
@SLOW
@given(conditions)
def test_z3_and_cvc5_agree(condition):
    by_z3 = prove(condition, solver="z3", minimize=VARS)
    by_cvc5 = prove(condition, solver="cvc5", minimize=VARS)
    assert by_z3 == by_cvc5


@given(int_exprs, st.data())
def test_encoding_agrees_with_evaluate(e, data):
    point = {v.name: data.draw(st.integers(v.lo, v.hi - 1), label=v.name) for v in VARS}
    value = evaluate(e, point)
    at_point = [v.eq(point[v.name]) for v in VARS]
    assert prove(e.eq(value), at_point) == Proved(), f"{e} at {point} should be {value}"


@given(int_exprs, st.data())
def test_lowered_term_folds_to_the_evaluated_value(e, data):
    """pysmt's own constant folder evaluates the raw (unsimplified) lowering at a point."""
    point = {v.name: data.draw(st.integers(v.lo, v.hi - 1), label=v.name) for v in VARS}
    width = width_for([e])
    env = environment(width)
    at_point = {lower(v, width): env.formula_manager.SBV(point[v.name], width) for v in VARS}
    folded = env.simplifier.simplify(env.substituter.substitute(lower(e, width), at_point))
    assert folded.bv_signed_value() == evaluate(e, point), f"{e} at {point}"


def risky(sub):
    """Terms whose divisors may be zero and whose shift counts may be negative."""
    return st.one_of(
        st.builds(lambda a, b: a + b, sub, sub), st.builds(lambda a, b: a * b, sub, sub),
        st.builds(lambda a, b: a // b, sub, sub), st.builds(lambda a, b: a % b, sub, sub),
        st.builds(lambda a, b: a >> (b % 6 - 1), sub, sub),
        st.builds(lambda a, b, c: ite(a < b, b, c), sub, sub, sub))


risky_exprs = st.recursive(st.sampled_from(VARS), risky, max_leaves=6)


@given(risky_exprs, st.lists(st.tuples(*(st.integers(v.lo, v.hi - 1) for v in VARS)),
                             min_size=1, max_size=10))
def test_defined_is_exactly_where_evaluation_succeeds(e, points):
    condition = defined(e)
    for values in points:
        point = dict(zip((v.name for v in VARS), values))
        try:
            evaluate(e, point)
            succeeds = True
        except (ZeroDivisionError, ValueError):
            succeeds = False
        assert evaluate(condition, point) == succeeds, f"{e} at {point}"


@SLOW
@given(st.recursive(st.sampled_from(VARS[:3:2]), risky, max_leaves=5),
       st.recursive(st.sampled_from(VARS[:3:2]), risky, max_leaves=5),
       st.sampled_from(SOLVERS))
def test_undefined_points_are_found_like_enumeration_finds_them(a, b, solver):
    x, z = VARS[0], VARS[2]
    condition = a <= b
    expected = None
    for point in ({"x": i, "z": j} for i in range(x.lo, x.hi) for j in range(z.lo, z.hi)):
        try:
            holds = evaluate(condition, point)
        except (ZeroDivisionError, ValueError):
            holds = False
        if not holds:
            expected = point
            break
    verdict = prove(condition, solver=solver, minimize=(x, z))
    assert verdict == (Proved() if expected is None else Refuted(expected, minimal=True))


# --------------------------------------------------------------------- MFMA acceptance


@pytest.mark.parametrize("solver", SOLVER_PARAMS)
def test_mfma_32x32x8_a_and_b_k_coordinates_agree(solver):
    info = mfma("v_mfma_f32_32x32x8_bf16")
    slot = Var("slot", 0, info.k_per_lane)
    _, _, k_a = info.a_coord(LANE, slot)
    _, k_b, _ = info.b_coord(LANE, slot)
    # the B fetch as a kernel computes it: lane group shifted into bit 2, slot OR-ed in
    k_b_kernel = ((LANE >> 5) << 2) | slot
    goal = (k_a + info.k * ITERATION).eq(k_b_kernel + info.k * ITERATION)
    assert prove(goal, solver=solver) == Proved()
    assert prove((k_a + info.k * ITERATION).eq(k_b + info.k * ITERATION), solver=solver) == Proved()


@pytest.mark.parametrize("solver", SOLVER_PARAMS)
def test_mutated_mfma_k_is_refuted_with_the_smallest_witness(solver):
    info = mfma("v_mfma_f32_32x32x8_bf16")
    slot = Var("slot", 0, info.k_per_lane)
    _, _, k_a = info.a_coord(LANE, slot)
    mutated = 4 * (LANE % 2) + slot
    goal = (k_a + 8 * ITERATION).eq(mutated + 8 * ITERATION)
    verdict = prove(goal, solver=solver, minimize=(ITERATION, LANE, slot))
    lanes, slots = np.meshgrid(np.arange(64), np.arange(4), indexing="ij")
    k_a_values = evaluate(k_a, {"lane": lanes, "slot": slots})
    bad = np.argwhere(k_a_values != 4 * (lanes % 2) + slots)
    assert verdict == Refuted({"iv": 0, "lane": int(bad[0][0]), "slot": int(bad[0][1])},
                              minimal=True)
    assert verdict.witness == {"iv": 0, "lane": 1, "slot": 0}


@NEEDS_CVC5
def test_mfma_accumulator_rows_from_the_catalogue_match_the_manual_formula():
    info = mfma("v_mfma_f32_32x32x8_bf16")
    reg = Var("reg", 0, info.c_values)
    _, row, column = info.c_coord(LANE, reg)
    manual_row = 8 * (reg // 4) + 4 * (LANE // 32) + reg % 4
    assert prove(And(row.eq(manual_row), column.eq(LANE & 31)), solver="cvc5") == Proved()


# ------------------------------------------------------------------------ behaviour


def test_undefined_points_refute_unless_assumed_away():
    x, d = Var("x", -100, 100), Var("d", -5, 6)
    identity = (x // d * d + x % d).eq(x)
    verdict = prove(identity, minimize=(d, x))
    assert verdict == Refuted({"d": 0, "x": -100}, minimal=True)
    assert prove(identity, [d.ne(0)]) == Proved()
    guarded = ite(d.eq(0), Const(0), x // d)
    assert prove((guarded <= 100) & (guarded >= -100)) == Proved()


@NEEDS_CVC5
def test_wide_values_get_a_wide_encoding():
    x, y = Var("x", -100, 100), Var("y", 0, 2**70)
    shifted = (x * 2**70) ^ y
    assert prove((shifted >> 70).eq(x), solver="z3") == Proved()
    assert prove((shifted >> 70).eq(x), solver="cvc5") == Proved()
    verdict = prove((shifted >> 69).eq(2 * x), minimize=(x, y))
    assert verdict == Refuted({"x": -100, "y": 2**69}, minimal=True)


@pytest.mark.parametrize("solver", SOLVER_PARAMS)
def test_timeouts_become_unknown(solver):
    # factoring a product of two ~60-bit primes is far beyond 50 ms of bit-blasting (the xor
    # keeps the query on the bit-vector path: z3's integer arithmetic factors it at once)
    p, q = Var("p", 2, 2**61), Var("q", 2, 2**61)
    semiprime = (2**61 - 1) * (2**59 - 55)
    verdict = prove(((p * q) ^ 1).ne(semiprime ^ 1), [p <= q], solver=solver, timeout_ms=50)
    assert isinstance(verdict, Unknown), verdict
    assert "50 ms" in verdict.reason


@NEEDS_CVC5
def test_cache_returns_the_verdict_for_equal_canonical_forms():
    clear_cache()
    a, b = Var("a", 0, 50), Var("b", 0, 50)
    first = prove((a + b + 1) * 2 > (a | b))
    assert cache_info()["misses"] == 1
    assert prove(2 * (1 + b + a) > (a | b)) == first
    assert cache_info()["hits"] == 1
    prove((a + b + 1) * 2 > (a | b), solver="cvc5")
    assert cache_info()["misses"] == 2


@NEEDS_CVC5
def test_assumptions_restrict_the_domain():
    wave, lane = Var("wave", 0, 8), Var("lane", 0, 64)
    thread = wave * 64 + lane
    assert prove(thread < 256, [wave < 4]) == Proved()
    assert prove(thread < 256, minimize=(wave, lane)) == Refuted({"lane": 0, "wave": 4},
                                                                 minimal=True)
    assert prove(thread < 0, [wave < 0]) == Proved(vacuous=True)
    assert prove(thread < 0, [wave > lane + 70]) == Proved(vacuous=True)
    assert prove(thread < 512, [wave < 4]) == Proved(vacuous=False)
    contradiction = [wave.eq(lane), wave > 5, lane < 3]
    assert prove(thread.eq(3), contradiction, solver="cvc5") == Proved(vacuous=True)
    assert prove(thread > 64, [wave.eq(lane), wave > 2]) == Proved(vacuous=False)
    assert prove(thread < 128, wave < 2, minimize=lane) == Proved()


@NEEDS_CVC5
@pytest.mark.parametrize("goal_holds", [True, False])
def test_smtlib_dump_gives_the_same_answer_in_z3(goal_holds):
    lane, slot = Var("lane", 0, 64), Var("slot", 0, 4)
    k_a = 4 * (lane // 32) + slot
    k_b = ((lane >> 5) << 2) | slot if goal_holds else 4 * (lane % 2) + slot
    script = to_smtlib(k_a.eq(k_b), [slot < 4])
    assert script.startswith("; argus obligation:") and "(set-logic QF_BV)" in script
    solver = z3.Solver()
    solver.add(z3.parse_smt2_string(script))
    assert solver.check() == (z3.unsat if goal_holds else z3.sat)
    assert run_script_in_cvc5(script) == ["unsat" if goal_holds else "sat"]
    assert isinstance(prove(k_a.eq(k_b)), Proved if goal_holds else Refuted)


def run_script_in_cvc5(script):
    """The outputs of an SMT-LIB script run through cvc5's own parser."""
    terms = cvc5.TermManager()
    solver = cvc5.Solver(terms)
    symbols = cvc5.SymbolManager(terms)
    parser = cvc5.InputParser(solver, symbols)
    parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, script, "argus")
    outputs = []
    while not (command := parser.nextCommand()).isNull():
        if output := command.invoke(solver, symbols).strip():
            outputs.append(output)
    return outputs


@SLOW
@given(conditions, st.sampled_from(SOLVERS))
def test_renaming_variables_renames_the_witness(condition, solver):
    renamed_vars = {v.name: Var(v.name + "_copy", v.lo, v.hi) for v in VARS}
    renamed = substitute(condition, renamed_vars)
    original = prove(condition, solver=solver, minimize=VARS)
    copy = prove(renamed, solver=solver, minimize=list(renamed_vars.values()))
    if isinstance(original, Proved):
        assert copy == Proved()
    else:
        assert copy.witness == {k + "_copy": v for k, v in original.witness.items()}


@given(int_exprs, st.integers(0, 3), st.sampled_from(SOLVERS))
def test_division_by_a_power_of_two_proves_equal_to_a_shift(e, k, solver):
    assert prove((e // 2**k).eq(e >> k), solver=solver) == Proved()
    assert prove((e % 2**k).eq(e & (2**k - 1)), solver=solver) == Proved()


def test_bad_queries_raise_actionable_errors():
    lane = Var("lane", 0, 64)
    with pytest.raises(TypeError, match="is an integer"):
        prove(lane + 1)
    with pytest.raises(ValueError, match="different ranges"):
        prove((lane + Var("lane", 0, 32)) < 200)
    with pytest.raises(ValueError, match="unknown solver"):
        prove(lane < 64, solver="yices")
    with pytest.raises(ValueError, match="minimize names"):
        prove(lane < 3, minimize=("wave",))


def test_debug_level_one_prints_verdicts(monkeypatch, capsys):
    monkeypatch.setenv("ARGUS_DEBUG", "1")
    clear_cache()
    prove(LANE < 64)
    assert "lane < 64: proved" in capsys.readouterr().err


def test_verdicts_read_well():
    assert str(Proved()) == "proved"
    assert "vacuously" in str(Proved(vacuous=True))
    assert str(Refuted({"lane": 1, "slot": 0})) == "refuted at lane=1, slot=0"
    assert str(Unknown("timeout")) == "unknown (timeout)"


# ------------------------------------------------------------------------------ command line


def test_prove_command_reports_verdicts_and_exit_status():
    from click.testing import CliRunner

    from argus.cli import main

    runner = CliRunner()
    lanes = ["--var", "lane=0:64", "--var", "slot=0:4"]
    agree = runner.invoke(main, ["prove", "4*(lane//32) + slot == ((lane >> 5) << 2) | slot",
                                 *lanes])
    assert (agree.exit_code, agree.output) == (0, "proved\n")
    mutated = runner.invoke(main, ["prove", "4*(lane//32) + slot == 4*(lane%2) + slot", *lanes,
                                   "--minimize", "lane,slot", "--solver", "cvc5"])
    assert (mutated.exit_code, mutated.output) == (1, "refuted at lane=1, slot=0\n")
    assumed = runner.invoke(main, ["prove", "lane < 32", *lanes, "--assume", "lane < slot * 8"])
    assert assumed.exit_code == 0
    script = runner.invoke(main, ["prove", "lane < 32", *lanes, "--smtlib"])
    assert script.exit_code == 0 and "(check-sat)" in script.output
    unknown_name = runner.invoke(main, ["prove", "wave < 3", *lanes])
    assert unknown_name.exit_code == 1 and "unknown name 'wave'" in unknown_name.output
    bad_range = runner.invoke(main, ["prove", "lane < 3", "--var", "lane=0:x"])
    assert bad_range.exit_code == 1 and "NAME=LO:HI" in bad_range.output


def test_without_cvc5_the_module_collects_and_says_why_it_skips(tmp_path):
    # `pip install -e '.[test]'` has no cvc5: collection must not fail on the import
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve()
    script = ("import sys; sys.modules['cvc5'] = None; import pytest; raise SystemExit("
              f"pytest.main(['-q', '-rs', '-p', 'no:cacheprovider', {str(here)!r}, '-k', "
              "'z3_and_cvc5_agree']))")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=here.parent.parent, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 skipped" in run.stdout and "cvc5 is not installed" in run.stdout

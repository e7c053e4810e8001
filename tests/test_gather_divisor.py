"""`T.Gather(..., divisor=d)`: rows gathered by id // d, as a top-k routing table of (token, slot)
ids token * d + slot reads its token's row. Traced and printed, proved by the verifier (a wrong
divisor refuted with a replayed counterexample), run by the reference interpreter and by the
strict emulator against numpy, lowered to an arithmetic shift, and counted by the model's byte
accounting (readers per row, the timing sample's ids)."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

import argus
import argus.lang as T
from argus.absint.report import PROVED, REFUTED
from argus.absint.verify import verify
from argus.ir import ops as O
from argus.ir.expr import And
from argus.ir.text import parse_kernel, print_kernel
from argus.kernels.moe import pack
from argus.lang import DSLError, Tensor

#: rows per workgroup
BLOCK = 16


@cache
def gather_by_token(topk: int, divisor: int | None = None, distinct: bool = True):
    """Each workgroup copies the token rows of BLOCK routes to the routes' rows of Y: X read
    through `ids` // `divisor` (topk unless told), Y written through `ids`."""
    divisor = topk if divisor is None else divisor

    @T.kernel(waves=1)
    def route_copy(X: Tensor("f32", "TOKENS", 16), ids: Tensor("i32", "P"),
                   Y: Tensor("f32", "ROUTES", 16)):
        TOKENS, P, ROUTES = X.shape[0], ids.shape[0], Y.shape[0]
        T.assume(ROUTES.eq(TOKENS * topk))
        T.assume((P % BLOCK).eq(0))
        if distinct:
            T.distinct(ids, 0, ROUTES)
        T.grid(P // BLOCK)
        p0 = T.program_id(0) * BLOCK
        T.tag(X, lambda t, c: {"token": t, "col": c})
        T.tag(Y, lambda r, c: {"token": r // topk, "col": c})
        x = X.load((0, 0), T.copy_layout((BLOCK, 16), 1, 4),
                   gather=T.Gather(ids, p0, divisor=divisor), guard=True)
        Y.store((0, 0), x, gather=T.Gather(ids, p0), guard=True)
        T.tag_assert(lambda V, D: And(V.token.eq(D.token), V.col.eq(D.col)),
                     "each route's row holds its own token's row")
    return route_copy


def routing(tokens: int, topk: int, experts: int, seed: int):
    """(choice per route, sorted ids padded per expert to BLOCK rows) of a random top-k
    routing: each token to topk different experts."""
    rng = np.random.default_rng(seed)
    picks = np.argsort(rng.random((tokens, experts)), axis=1)[:, :topk].ravel()
    choice, ids, _ = pack(picks, experts, BLOCK)
    return choice, ids


def expected(X, ids, routes: int) -> np.ndarray:
    """numpy: Y[r] = X[r // topk] at every real route, NaN elsewhere (never written)."""
    Y = np.full((routes, X.shape[1]), np.nan, np.float32)
    real = ids[ids < routes]
    Y[real] = X[real // (routes // X.shape[0])]
    return Y


def test_the_divisor_traces_prints_and_parses_back():
    ir = gather_by_token(8).ir
    [load] = [op for op in ir.ops() if isinstance(op, O.GlobalLoad)]
    [store] = [op for op in ir.ops() if isinstance(op, O.GlobalStore)]
    assert load.gather.divisor == 8 and store.gather.divisor == 1
    text = print_kernel(ir)
    assert text.count("divisor=8") == 1         # the default 1 is not printed
    assert print_kernel(parse_kernel(text)) == text


@pytest.mark.parametrize("divisor", [0, -2, 2.0, True])
def test_a_divisor_that_is_not_a_positive_int_is_refused_at_the_authors_line(divisor):
    with pytest.raises(DSLError, match="divisor") as caught:
        gather_by_token.__wrapped__(2, divisor).trace()   # uncached: True == 1
    assert caught.value.loc.file.endswith("test_gather_divisor.py")
    assert "divisor=topk" in caught.value.fix


@pytest.mark.parametrize("topk", [1, 2, 8])
def test_gathering_by_token_is_proved(topk):
    report = verify(gather_by_token(topk))
    assert report.ok and all(o.verdict == PROVED for o in report.obligations), str(report)
    kinds = {o.kind for o in report.obligations}
    # the tag assertion and the stores' race check both cover something
    assert {"tag-assertion", "global-race"} <= kinds, kinds


@pytest.mark.parametrize("topk,divisor", [(8, 4), (2, 1), (2, 4)])
def test_a_wrong_divisor_is_refuted_with_a_replayed_counterexample(topk, divisor):
    report = verify(gather_by_token(topk, divisor))
    refuted = [o for o in report.refuted if o.kind == "tag-assertion"]
    assert refuted, str(report)
    cex = refuted[0].counterexample
    assert cex.confirmed
    # the row read is the token of id // divisor, the row written a route of id // topk
    assert cex.tags["V"]["token"] != cex.tags["D"]["token"]


def test_without_the_divisor_a_token_row_per_route_is_refuted():
    # the old reading (X expanded: a row per route) against X holding each token once
    report = verify(gather_by_token(4, 1))
    assert any(o.kind == "tag-assertion" and o.verdict == REFUTED for o in report.obligations)


@pytest.mark.parametrize("topk,tokens,seed", [(2, 21, 0), (8, 9, 1), (4, 1, 2)])
def test_the_interpreter_and_the_strict_emulator_agree_with_numpy(topk, tokens, seed):
    _, ids = routing(tokens, topk, experts=topk + 1, seed=seed)
    X = np.random.default_rng(seed).standard_normal((tokens, 16)).astype(np.float32)
    routes = tokens * topk
    want = expected(X, ids, routes)
    kernel = gather_by_token(topk)
    interpreted = argus.interpret(kernel, {"X": X, "ids": ids,
                                           "Y": np.full((routes, 16), np.nan, np.float32)})
    np.testing.assert_array_equal(interpreted.outputs["Y"], want)
    compiled = argus.compile(kernel)
    assert "v_ashrrev_i32_e32" in compiled.text or topk == 1
    Y = np.full((routes, 16), np.nan, np.float32)
    emulation = compiled.run(X=X, ids=ids, Y=Y, check="strict")
    np.testing.assert_array_equal(Y, want)
    assert not emulation.hazards


def test_a_divisor_the_backend_cannot_shift_by_is_refused_at_compile_time():
    from argus.asm.lower.exprgen import UnsupportedError

    with pytest.raises(UnsupportedError, match="powers of two"):
        argus.compile(gather_by_token(3), verify=False)


def test_the_model_counts_a_token_row_read_by_each_of_its_routes():
    # X's readers per row: the routes naming it (topk), not one as with a row per route
    from argus.isa_cdna3.perf.sample import readers_of

    ir = gather_by_token(8).ir
    sizes = {"TOKENS": 64, "ROUTES": 512, "P": 512}
    readers = dict(zip((t.name for t in ir.tensors), readers_of(ir, (32,), sizes)))
    assert readers["X"][0] == 64 * 16 * 4 and readers["X"][1] == 8.0
    assert readers["Y"][0] == 512 * 16 * 4


def test_the_timing_sample_names_different_tokens_in_neighbouring_rows():
    # slot-major ids: a block of BLOCK routes holds BLOCK different tokens, as a routing that
    # sends each token to topk different experts does (in id order it would hold BLOCK / topk)
    from argus.isa_cdna3.perf.sample import sample_inputs

    ir = gather_by_token(8).ir
    ids = sample_inputs(ir, {"TOKENS": 64, "ROUTES": 512, "P": 640})["ids"]
    real = ids[ids < 512]
    assert sorted(real.tolist()) == list(range(512))
    first = ids[:BLOCK]
    assert len(set((first[first < 512] // 8).tolist())) == len(first[first < 512])

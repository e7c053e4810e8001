"""Builds are reproducible: what `simplify` returns, the assembly a kernel compiles to and the
queries the verifier asks do not depend on what the process built before (which variables and
terms exist already, and in which order they were made): those cases run in fresh interpreters,
one of them first filled with junk built in another order, and compare the printed text. And the
backend's loop code does not hinge on where a sum's canonical order puts the loop counter's
term."""

import json
import os
import pathlib
import random
import subprocess
import sys

import pytest

import argus
from argus.asm.lower.exprgen import ExprEmitter
from argus.asm.lower.program import VReg
from argus.ir.expr import Var

ROOT = pathlib.Path(argus.__file__).resolve().parent.parent

VARIABLES = [("lane", 0, 64), ("wave", 0, 4), ("slot", 0, 8), ("kb", 0, 2**31), ("wg0", 0, 4096),
             ("M", 1, 2**31), ("x__9", -8, 8), ("x__10", 0, 16)]

#: Child: parse the expressions; under a junk seed, first make the variables, the expressions'
#: subterms and their normal forms in a shuffled order; then print every normal form.
SIMPLIFY_CHILD = """
import json, random, sys
from argus.ir.expr import Var, parse, simplify, subterms
variables, texts, seed = json.loads(sys.stdin.read())
if seed is not None:
    rng = random.Random(seed)
    order = list(variables)
    rng.shuffle(order)
    junk = [Var(name, lo, hi) for name, lo, hi in order]
    names = {v.name: v for v in junk}
    for text in rng.sample(texts, len(texts)):
        nodes = subterms(parse(text, names))
        rng.shuffle(nodes)
        junk += [simplify(node) for node in nodes]
        junk += [simplify(sum(rng.sample(nodes, len(nodes)), 0)) for _ in range(2)
                 if not any(node.is_bool for node in nodes)]
names = {name: Var(name, lo, hi) for name, lo, hi in variables}
print(json.dumps([str(simplify(parse(text, names))) for text in texts]))
"""


def _child(script: str, payload) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    env["ARGUS_JOBS"] = "1"  # queries are made in the walking process either way
    done = subprocess.run([sys.executable, "-c", script], input=json.dumps(payload),
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _random_index(rng: random.Random) -> str:
    """A random address-like integer expression: a sum of scaled variables, divisions,
    remainders and shifts of sums, as layouts and index maps write them."""
    def atom():
        name = rng.choice(VARIABLES)[0]
        kind = rng.randrange(5)
        if kind == 0:
            return name
        if kind == 1:
            return f"{name} // {rng.choice((2, 4, 32))}"
        if kind == 2:
            return f"{name} % {rng.choice((2, 8, 32))}"
        if kind == 3:
            other = rng.choice(VARIABLES)[0]
            return f"({name} * {rng.choice((4, 8))} + {other} >> {rng.choice((1, 3, 5))})"
        return f"({name} + {rng.choice(VARIABLES)[0]}) % {rng.choice((4, 16))}"
    terms = [f"{atom()} * {rng.choice((1, 2, 16, 64, -3))}" for _ in range(rng.randrange(2, 7))]
    return " + ".join(terms) + f" + {rng.randrange(-40, 40)}"


def test_simplify_gives_the_same_text_whatever_the_process_built_before():
    rng = random.Random(942)
    texts = [_random_index(rng) for _ in range(60)]
    texts += [f"{a} < {b}" for a, b in zip(texts[:10], texts[10:20])]
    texts += ["x__10 + x__9 + lane", "lane // 32 * 4 + wave * 64 + lane % 32 + slot",
              "(wave * 64 + lane) // 8 * 16 + (wave * 64 + lane) % 8 + kb * M"]
    fresh = _child(SIMPLIFY_CHILD, [VARIABLES, texts, None])
    for seed in (1, 2):
        assert _child(SIMPLIFY_CHILD, [VARIABLES, texts, seed]) == fresh


#: Child: compile the library GEMM and attention (given order), print the assembly texts;
#: before that, make the variables listed (in that order) and compile the warm-up kernels.
COMPILE_CHILD = """
import json, sys
import argus
from argus.ir import expr
from argus.kernels import library
variables, warm_up, targets = json.loads(sys.stdin.read())
junk = [expr.Var(name, lo, hi) for name, lo, hi in variables]
kernels = library()
for name, params in warm_up:
    argus.compile(kernels[name].kernel, **params)
texts = {name: argus.compile(kernels[name].kernel, **params).text for name, params in targets}
made = [(v.name, v.lo, v.hi) for v in list(expr._INTERNED.values()) if isinstance(v, expr.Var)]
print(json.dumps({"texts": texts, "variables": made}))
"""

TARGETS = [("gemm", {}), ("attention_fwd", {"head_dim": 64})]


def test_the_library_kernels_compile_to_the_same_assembly_after_other_builds():
    """The second process first makes the variables the first one used, in reverse order, and
    compiles the other kernels (with other parameters) before the targets, in reverse order:
    with terms ordered by creation, attention's address arithmetic came out differently."""
    fresh = json.loads(_child(COMPILE_CHILD, [[], [], TARGETS]))
    warm_up = [("moe_gemm", {}), ("gemm", {"block_m": 128, "block_n": 128, "block_k": 32})]
    junk = json.loads(_child(COMPILE_CHILD, [fresh["variables"][::-1], warm_up, TARGETS[::-1]]))
    differing = [name for name, _ in TARGETS if junk["texts"][name] != fresh["texts"][name]]
    assert differing == []


#: Child: verify the library GEMM after verifying the kernels listed, print every query the
#: verifier decides (canonical goal and assumptions).
VERIFY_CHILD = """
import json, sys
import argus
from argus.absint import queries
from argus.kernels import library
warm_up = json.loads(sys.stdin.read())
made = []
canonical = queries.canonical
def recorded(goal, assume, order=(), small=()):
    query = canonical(goal, assume, order, small)
    made.append([str(query.goal), [str(a) for a in query.assume], list(query.order)])
    return query
queries.canonical = recorded
kernels = library()
for name in warm_up:
    argus.verify(kernels[name].kernel)
made.clear()
argus.verify(kernels["gemm"].kernel)
print(json.dumps(made))
"""


def test_the_verifier_asks_the_same_queries_after_other_kernels():
    """Helpers are renamed canonically, but the terms they appear in were ordered by creation,
    and an assertion's operand tags by the address order of a set of variables."""
    fresh = json.loads(_child(VERIFY_CHILD, []))
    assert len(fresh) > 50
    assert json.loads(_child(VERIFY_CHILD, ["moe_gemm"])) == fresh


@pytest.mark.parametrize("names", [("kb", "m0", "n0"), ("m0", "kb", "n0"), ("n0", "kb", "m0")])
def test_a_loop_adds_a_sums_invariant_terms_once_whatever_their_order(names):
    """Sums list their terms by variable name, so the loop counter's term may come first,
    between or last; each trip still computes only the counter's term and one addition."""
    counter, row, col = (Var(name, 0, 1 << 20) for name in names)
    pre: list = []
    emitter = ExprEmitter({v.name: VReg("s", 1, v.name) for v in (counter, row, col)}, pre,
                          loop_vars={counter.name})
    emitter.push_scope()
    emitter.out = body = []
    emitter.preheader = []
    emitter.value(row * 256 + counter * 64 + col * 4096)
    assert [i.opcode for i in body] == ["s_lshl_b32", "s_add_i32"], [i.text() for i in body]
    assert [i.opcode for i in emitter.preheader].count("s_add_i32") == 1

"""Each kernel family and its knobs are declared once, in argus.kernels: the search tunes those
knobs, argus.testing draws its variants from the same records, the policy knob lists the
backend's policies and the MFMA knob the catalogue's instructions."""

from __future__ import annotations

import inspect

import pytest

from argus.asm.lower import POLICIES, lower
from argus.errors import ArgusError
from argus.isa_cdna3.mfma import MFMA
from argus.kernels import BF16_MFMAS, POLICY, Knob, library
from argus.search.space import families, family
from argus.testing.families import FAMILIES


def test_the_search_families_are_the_library_entries_with_knobs():
    assert set(families()) == {"gemm", "gemm_f16", "gemm_fp8", "gemm_bf8", "attention_fwd",
                               "moe_gemm"}
    for name, entry in families().items():
        assert family(name) is library()[name] is entry
        assert entry.dims == tuple(entry.sizes) and entry.check_sizes is not None


@pytest.mark.parametrize("name", ["gemm", "gemm_fp8", "attention_fwd", "moe_gemm"])
def test_every_kernel_knob_is_a_parameter_whose_default_is_legal(name):
    entry = library()[name]
    defaults = entry.kernel.params
    for knob in entry.knobs + entry.variants:
        if knob.stage == "compile":
            continue
        assert knob.name in defaults, f"{name} has no parameter {knob.name}"
        assert defaults[knob.name] in knob.values, (name, knob.name, defaults[knob.name])


def test_testing_draws_from_the_declared_knobs():
    for name, variants in FAMILIES.items():
        if name not in library():
            continue
        entry = library()[name]
        for knob in variants.knobs:
            declared = entry.knob(knob.name)
            assert (knob.doc, knob.stage) == (declared.doc, declared.stage)
            assert set(knob.values) <= set(declared.values) and knob.values
            order = [v for v in declared.values if v in knob.values]
            assert list(knob.values) == order, "restriction keeps the declared order"
        assert "policy" not in variants.space  # testing traces; the compile stage is not its


def test_policy_values_are_the_backends_with_its_default_first():
    assert set(POLICY.values) == set(POLICIES) and POLICY.stage == "compile"
    assert POLICY.values[0] == inspect.signature(lower).parameters["policy"].default
    for entry in families().values():
        assert entry.knob("policy") is POLICY


def test_mfma_choices_come_from_the_catalogue():
    assert BF16_MFMAS == ("v_mfma_f32_32x32x8_bf16", "v_mfma_f32_16x16x16_bf16")
    assert all(name in MFMA and MFMA[name].blocks == 1 for name in BF16_MFMAS)
    assert library()["gemm"].knob("instr").values == BF16_MFMAS


def test_knob_steps_and_restrictions():
    knob = Knob("block_k", (16, 32, 64))
    assert (knob.step(32, 1), knob.step(64, 1), knob.step(48, 1)) == (64, None, None)
    assert knob.restricted((64, 16)).values == (16, 64)
    with pytest.raises(ArgusError, match=r"\[48\] outside its values"):
        knob.restricted((48,))
    with pytest.raises(ArgusError, match="has no knob 'tile'"):
        library()["gemm"].knob("tile")
    with pytest.raises(ValueError):
        Knob("x", (1,), stage="link")

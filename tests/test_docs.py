"""The documentation site stays true: the tutorial's snippets run and print what the page
shows, and the generated DSL op reference covers every op the IR declares."""

from __future__ import annotations

import doctest
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("page", ["tutorial.md"])
def test_a_page_s_snippets_print_what_it_shows(page, monkeypatch):
    monkeypatch.setenv("ARGUS_JOBS", "1")
    failed, tried = doctest.testfile(str(ROOT / "docs" / page), module_relative=False,
                                     optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                                     report=True, verbose=False)
    assert tried >= 10 and failed == 0


def test_the_op_reference_covers_every_op(monkeypatch):
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    import reference

    # the measured instruction counts need the library lowered; the test covers the rest
    monkeypatch.setattr(reference, "emitted", lambda: {"mfma": {"v_mfma_f32_32x32x8_bf16": 1}})
    page = reference.ops_page()
    classes = reference.op_classes()
    assert len(classes) >= 30
    for cls in classes:
        assert f"## `{cls.mnemonic}` ({cls.__name__})" in page, cls
        assert cls.transfer.name in reference.transfer_meanings(), cls
    from argus.ir import ops as O

    assert reference.written_as()["Mfma"] == ["T.mfma"]
    assert "Tile.__add__" in reference.written_as()["Binary"]
    assert reference.verifier_rule(O.LdsLoad)[1] == ["async-pending", "lds-race",
                                                     "lds-uninitialised", "out-of-bounds"]
    assert "`v_mfma_f32_32x32x8_bf16` ×1" in page
    assert any("sparse SMFMAC" in message for message in reference.ir_checks(O.Mfma))

"""`Report.annotated_ir()`: the kernel's IR text with each refuted or unknown obligation under
the op it is about (xDSL's diagnostic style: the op's line underlined, the verdict and its
evidence on `|` lines, a closing rule); proved obligations stay out of it."""

from __future__ import annotations

import attrs
import pytest

import argus
import argus.lang as T
from argus.absint.report import REFUTED, Obligation, VerifyError
from argus.ir.text import parse_kernel, print_kernel
from argus.lang import Tensor


def _copy(assertion=None):
    @T.kernel(waves=1)
    def copy(X: Tensor("f32", 64, 4), Y: Tensor("f32", 64, 4)):
        T.grid(1)
        T.tag(X, lambda r, c: {"w": r})
        T.tag(Y, lambda r, c: {"w": r})
        x = X.load((0, 0), T.copy_layout((64, 4), 1, 4))
        Y.store((0, 0), x)
        T.tag_assert(assertion or (lambda V, D: V.w.eq(D.w)), "rows land in place")

    return copy.ir


def _under(text: str, op_prefix: str) -> list[str]:
    """The diagnostic lines right under the op whose text starts with `op_prefix` (and its
    assertions)."""
    lines = text.split("\n")
    at = next(n for n, line in enumerate(lines) if line.strip().startswith(op_prefix))
    at += 1
    while lines[at].strip().startswith("assert "):
        at += 1
    out = []
    while lines[at].strip()[:1] in ("^", "|", "-"):
        out.append(lines[at].strip())
        at += 1
    return out


def test_a_refuted_assertion_stands_under_its_store():
    report = argus.verify(_copy(lambda V, D: V.w.eq(D.w + 1)), jobs=1)
    text = report.annotated_ir()
    note = _under(text, "global.store")
    assert note[0].startswith("^^^^") and note[-1].startswith("----")
    assert note[1].startswith("| refuted: ") and "'rows land in place' does not hold" in note[1]
    assert any("confirmed by concrete replay" in line for line in note)
    assert not _under(text, "%v1 = global.load")     # its obligations are proved
    assert text.rstrip().endswith(report.summary())
    # under the notes, the IR is the printer's, line for line
    plain = [line for line in text.split("\n")
             if line.strip()[:1] not in ("^", "|", "-") and not line.startswith("//")]
    plain = "\n".join(plain).rstrip("\n") + "\n"
    assert plain == print_kernel(report.ir)
    assert parse_kernel(plain) == report.ir


def test_an_unknown_obligation_says_why_and_a_verified_kernel_has_no_notes():
    report = argus.verify(_copy(lambda V, D: V.w.eq(D.w + 1)), jobs=1, replay=False)
    note = _under(report.annotated_ir(), "global.store")
    assert note[1].startswith("| unknown: ") and "tag-assertion: rows land in place" in note[1]
    assert "not proved: refuted by the solver; replay was switched off" in note[2]
    clean = argus.verify(_copy(), jobs=1)
    assert clean.ok
    text = clean.annotated_ir()
    assert not any(line.strip()[:1] in ("^", "|") for line in text.split("\n"))
    assert text == print_kernel(clean.ir) + f"// {clean.summary()}\n"


def test_kernel_wide_obligations_stand_under_the_header_and_a_foreign_ir_is_refused():
    report = argus.verify(_copy(), jobs=1)
    budget = Obligation("budget", "LDS use 70000 of 65536 bytes per workgroup", "k.py:1",
                        REFUTED)
    with_budget = attrs.evolve(report, obligations=report.obligations + (budget,))
    lines = with_budget.annotated_ir().split("\n")
    assert lines[0].startswith("kernel copy @") and lines[1].startswith("^^^")
    assert lines[2] == "| refuted: k.py:1: budget: LDS use 70000 of 65536 bytes per workgroup"
    with pytest.raises(VerifyError, match="holds no IR"):
        attrs.evolve(report, ir=None).annotated_ir()

    @T.kernel(waves=1)
    def other(X: Tensor("f32", 64)):
        T.grid(1)

    with pytest.raises(VerifyError, match="is about kernel copy, not other"):
        report.annotated_ir(other.ir)

"""`argus run FILE:KERNEL` (issue 22): a user's kernel from a file, random inputs at the given
sizes, interpreted or compiled and emulated, compared with the interpreter and an optional
numpy reference; a wrong kernel fails with its error."""

from __future__ import annotations

import json
import textwrap

import pytest
from click.testing import CliRunner

from argus.cli import main

SOURCE = textwrap.dedent('''
    import numpy as np
    import argus.lang as T
    from argus.lang import Tensor


    @T.kernel(waves=1)
    def softplus_rows(X: Tensor("f32", "R", 64), Y: Tensor("f32", "R", 64)):
        R = X.shape[0]
        T.grid(T.cdiv(R, 4))
        r0 = T.program_id(0) * 4
        spec = T.rows_layout((4, 64), 1)
        x = X.load((r0, 0), spec, guard=True)
        Y.store((r0, 0), T.maximum(x, T.zeros(spec)) * R, guard=True)


    def reference(X, Y):
        return np.maximum(X, 0) * X.shape[0]


    def wrong(X, Y):
        return np.maximum(X, 0)
''')


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(SOURCE)
    return path


def _run(*args):
    return CliRunner().invoke(main, ["run", *map(str, args)])


def test_emulate_a_user_kernel_against_interpreter_and_reference(user_file):
    result = _run(f"{user_file}:softplus_rows", "--emulate", "--size", "R=7",
                  "--reference", f"{user_file}:reference", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] and report["sizes"] == {"R": 7}
    assert report["errors"]["Y"] == {"interpreter": 0.0, "reference": 0.0}


def test_interp_mode_and_a_wrong_reference_fails(user_file):
    result = _run(f"{user_file}:softplus_rows", "--interp", "--size", "R=5",
                  "--reference", f"{user_file}:wrong")
    assert result.exit_code == 1
    assert "Y: max error vs reference" in result.output and "FAIL" in result.output


def test_missing_size_is_named(user_file):
    result = _run(f"{user_file}:softplus_rows", "--emulate")
    assert result.exit_code != 0
    assert "--size R=" in result.output

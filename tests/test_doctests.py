"""The examples in the docstrings of the expression language, the layout algebra and the
`argus` façade are run as tests (z3py style: each public function shows itself at work), so a
docstring that stops matching the code fails the suite."""

from __future__ import annotations

import doctest
import importlib

import pytest

#: modules whose docstring examples are part of the suite, and the fewest examples each must
#: have (a module that lost its examples fails rather than passing with nothing to run)
DOCTESTED = {"argus.ir.expr": 40, "argus.ir.layout": 40, "argus": 10}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.mark.parametrize("name", sorted(DOCTESTED))
def test_docstring_examples_run_as_written(name):
    module = importlib.import_module(name)
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=FLAGS)
    report = []
    for test in finder.find(module, name):
        runner.run(test, out=report.append)
    failed, attempted = runner.summarize(verbose=False)
    assert failed == 0, "".join(report)
    assert attempted >= DOCTESTED[name], f"{name} has only {attempted} docstring examples"


@pytest.mark.parametrize("name", ["argus.ir.expr", "argus.ir.layout"])
def test_every_public_function_shows_an_example(name):
    module = importlib.import_module(name)
    lacking = [attr for attr in module.__all__
               if callable(getattr(module, attr)) and ">>>" not in (getattr(module, attr).__doc__
                                                                    or "")]
    assert not lacking, f"{name}: public names without a docstring example: {lacking}"

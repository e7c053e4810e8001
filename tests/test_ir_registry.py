"""The op registry: every `Op` subclass declares each field's kind and a tag-transfer rule,
prints and parses back through the text form, and has a rule in the verifier and in the
interpreter. A new op that misses one of these fails here, not in a user's run."""

from __future__ import annotations

import attrs
import pytest

import argus.lang as T
from argus.absint import concrete, verify
from argus.ir import fields as F
from argus.ir import ops as O
from argus.ir.text import parse_kernel, print_kernel
from argus.ir.transfer import RESULT_NAMES
from argus.lang import Tensor

OP_CLASSES = O.op_classes()


def _branchy():
    """Atomics (global and LDS), a branch with an else body, a gather with a guard, a mask and
    a bounded scalar load: ops the library kernels at their defaults do not use."""
    @T.kernel(waves=1)
    def branchy(X: Tensor("f32", "N", 16), ids: Tensor("i32", "P"), Y: Tensor("f32", 16, 16),
                top: T.Scalar(0, 64)):
        T.distinct(ids, 1, X.shape[0] - top)
        T.grid(2)
        row = T.load_scalar(ids, (0,), 0, top + 1)
        x = X.load((0, row * 0), T.copy_layout((16, 16), 1, 4), gather=T.Gather(ids, 0),
                   guard=True)
        x = T.mask(x, lambda i, j: i < j, 0.0)
        with T.when(T.program_id(0).eq(0), x=x) as branch:
            branch.x = branch.x * 2.0
        with branch.otherwise():
            branch.x = -branch.x
        Y.atomic_add((0, 0), branch.x)
        T.lds((16, 16), "f32").atomic_add((0, 0), branch.x)

    return branchy.ir


def _broadcast():
    """An MFMA with the CBSZ/ABID modifiers (the bug corpus's shared-A kernel)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "bugs"))
    import programs

    return programs.broadcast_a().ir


def _lanes():
    """Cross-lane shuffles, memory ops only some threads take part in and rows taken from
    registers (the bug corpus's butterfly row maximum, one-wave staging, ping-pong wave groups,
    staged scatter and a group barrier)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "bugs"))
    import lane_programs

    return [lane_programs.row_max().ir, lane_programs.staged().ir,
            lane_programs.ping_pong().ir, lane_programs.scatter().ir,
            lane_programs.handoff().ir]


def _ordering():
    """Async copies with commit groups and wait_group, a wait and a bare barrier (the bug
    corpus's memory-ordering kernels)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "bugs"))
    import ordering

    return [ordering.stream().ir, ordering.relayout().ir]


def _elementwise_ops():
    """Comparisons, select, index tiles and sizes as tiles (issue 22's ops)."""
    @T.kernel(waves=1)
    def elementwise(X: Tensor("f32", "R", 64), Y: Tensor("f32", "R", 64)):
        T.grid(T.cdiv(X.shape[0], 4))
        r0 = T.program_id(0) * 4
        spec = T.rows_layout((4, 64), 1)
        x = X.load((r0, 0), spec, guard=True)
        y = T.where(x > 0.0, T.rsqrt(x), T.iota(spec, 1, start=r0)) * X.shape[0]
        Y.store((r0, 0), y, guard=True)

    return elementwise.ir


def _kernels():
    from argus.kernels import library
    from argus.kernels.attention import attention_fwd

    kernels = [entry.kernel.ir for entry in library().values()]
    return kernels + [attention_fwd.trace(causal=True), _branchy(), _broadcast(), *_lanes(),
                      *_ordering(), _elementwise_ops()]


@pytest.fixture(scope="module")
def kernels():
    return _kernels()


def test_every_op_class_is_registered_once_under_its_mnemonic():
    classes = set()
    todo = [O.Op]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__ == O.__name__ and attrs.has(cls) and not cls.__name__.startswith("_") \
                and cls is not O.Op:
            classes.add(cls.__name__)
    assert {cls.__name__ for cls in OP_CLASSES.values()} == classes
    assert all(mnemonic == cls.mnemonic for mnemonic, cls in OP_CLASSES.items())


@pytest.mark.parametrize("mnemonic", sorted(OP_CLASSES))
def test_each_op_declares_its_fields_and_its_transfer_rule(mnemonic):
    cls = OP_CLASSES[mnemonic]
    declared = F.declared(cls)  # raises for a field without a kind
    assert {f.name for f, _ in declared} | {"loc"} == {f.name for f in attrs.fields(cls)}
    assert isinstance(getattr(cls, "transfer", None), O.Transfer), \
        f"{cls.__name__} names no tag-transfer rule: class {cls.__name__}(Op, mnemonic=..., " \
        "transfer=Transfer....)"
    roles = [d.role for _, d in declared if d.role]
    assert set(roles) <= set(O.ROLE_ORDER) and len(set(roles)) == len(roles)
    # an op whose result gets tags has exactly one result to put them on
    if cls.transfer not in (O.Transfer.NONE, O.Transfer.DEFINE, O.Transfer.STORE,
                            O.Transfer.COPY, O.Transfer.CARRY):
        assert [d.shape for _, d in declared if d.kind is F.Kind.RESULT] == [F.Shape.ONE]


def _needs_handler(cls) -> bool:
    """Whether the verifier needs a rule of its own: the op acts on memory or control flow, or
    carries assertions to check."""
    asserts = any(d.kind is F.Kind.ASSERTS for _, d in F.declared(cls))
    return cls.transfer not in RESULT_NAMES or asserts


# yield ends a block: both walkers read it in their `execute`, not through a rule
@pytest.mark.parametrize("mnemonic", sorted(set(OP_CLASSES) - {O.Yield.mnemonic}))
def test_each_op_has_a_verifier_and_an_interpreter_rule(mnemonic):
    cls = OP_CLASSES[mnemonic]
    verifier, interpreter = verify._Verifier, concrete._Workgroup
    if _needs_handler(cls):
        assert cls in verifier.RULES, f"the verifier has no @rule(O.{cls.__name__})"
    if cls.transfer in RESULT_NAMES:
        assert cls.transfer in verify.RESULT_TAGS, f"the verifier cannot apply {cls.transfer}"
        assert cls.transfer in concrete.RESULT_TAGS or cls.transfer in concrete.MOVED_WITH_DATA
    assert cls in interpreter.RULES, f"the interpreter has no @rule(O.{cls.__name__})"


def test_every_rule_is_registered_under_an_op_class():
    for walker in (verify._Verifier, concrete._Workgroup):
        assert walker.RULES and all(issubclass(c, O.Op) for c in walker.RULES)
        assert all(callable(fn) for fn in walker.RULES.values())


@attrs.frozen
class _Unruled(O.Barrier):
    """An op class no walker has a rule for (the registry is keyed by exact class)."""


def _unruled_kernel() -> O.Kernel:
    @T.kernel(waves=1)
    def plain(X: Tensor("f32", 64)):
        T.grid(1)
        T.barrier()

    ir = plain.ir
    swapped = tuple(_Unruled(loc=op.loc) if isinstance(op, O.Barrier) else op
                    for op in ir.body.ops)
    return attrs.evolve(ir, body=attrs.evolve(ir.body, ops=swapped))


def test_an_op_without_a_rule_is_a_clear_error_in_both_walkers():
    import numpy as np

    from argus.errors import ArgusError

    kernel = _unruled_kernel()
    with pytest.raises(ArgusError, match=r"barrier \(_Unruled\): the verifier has no rule") as v:
        verify.verify(kernel, replay=False, jobs=1)
    assert "@rule(O._Unruled)" in v.value.fix
    with pytest.raises(ArgusError, match=r"barrier \(_Unruled\): the interpreter has no rule"):
        concrete.run(kernel, {"X": np.zeros(64, np.float32)})


def test_a_subclass_replaces_a_rule_by_overriding_its_method():
    calls = []

    class Counting(verify.Rules):
        def on_barrier(self, op):
            calls.append(op)
            super().on_barrier(op)

    assert Counting.RULES[O.Barrier] is Counting.on_barrier
    assert Counting.RULES[O.BarrierNoWait] is Counting.on_barrier
    assert verify._Verifier.RULES[O.Barrier] is verify._Verifier.on_barrier


def test_the_rule_tables_name_the_same_register_result_rules():
    assert set(verify.RESULT_TAGS) == set(RESULT_NAMES)
    assert set(concrete.RESULT_TAGS) | concrete.MOVED_WITH_DATA == set(RESULT_NAMES)
    assert not set(concrete.RESULT_TAGS) & concrete.MOVED_WITH_DATA


def test_every_op_class_round_trips_through_text(kernels):
    seen = set()
    for kernel in kernels:
        text = print_kernel(kernel)
        again = parse_kernel(text)
        assert again == kernel and print_kernel(again) == text
        seen |= {type(op) for op in kernel.ops()}
    missing = sorted(cls.__name__ for cls in OP_CLASSES.values() if cls not in seen)
    assert not missing, f"no kernel here uses {missing}: add one so its text form is tested"


def test_derived_accessors_agree_with_the_declarations(kernels):
    for kernel in kernels:
        for op in kernel.ops():
            renamed = {v.name: attrs.evolve(v, name=v.name + "_r") for v in op.operands}
            again = op.replace_operands(renamed)
            assert [v.name for v in again.operands] == [v.name + "_r" for v in op.operands]
            assert again.results == op.results and again.blocks == op.blocks
            assert set(op.roles) == set(O.role_operands(op))

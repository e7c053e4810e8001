"""The rule registry the verifier and the reference interpreter dispatch through, keyed by op
class as the backend's (`asm/lower/isel.py:rule`) and xDSL's `register_impls` are.

A walker is a class deriving from `Walker`; its methods (or its mixins') marked `@rule(O.X)`
are its rules for ops of exactly class `X`:

    class _Workgroup(Memory, Compute, Walker):
        @rule(O.Barrier)
        def on_barrier(self, op): ...

Each walker class gets its own table `RULES` (op class -> function), built from its whole MRO
when the class is made. A subclass replaces a rule either by marking a method of its own for
the op class or by overriding the marked method under the same name (`argus.testing` plants
deliberately wrong rules that way). `Walker.no_rule(op)` is the error for an op a walker
has no rule for: the walker's own `ERROR` class (an `ArgusError`) naming the op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from argus.ir.types import IRError

#: attribute a marked function carries: the op classes it is the rule for
_MARK = "__argus_rule_for__"


def rule(*classes: type) -> Callable:
    """Mark a method as the rule for ops of `classes` (exact classes, as in the backend)."""
    if not classes:
        raise TypeError("@rule needs at least one op class")

    def mark(fn):
        setattr(fn, _MARK, getattr(fn, _MARK, ()) + classes)
        return fn
    return mark


class Walker:
    """Base of a rule-dispatched IR walker (`RULES` is built per subclass)."""

    #: op class -> the function applying this walker's rule to it
    RULES: ClassVar[dict[type, Callable]] = {}
    #: what the walker is called in errors ("the verifier", "the interpreter")
    WHAT: ClassVar[str] = "this walker"
    #: the ArgusError subclass the walker raises
    ERROR: ClassVar[type] = IRError

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        names: dict[type, str] = {}
        for base in reversed(cls.__mro__):
            for name, fn in vars(base).items():
                for op_class in getattr(fn, _MARK, ()):
                    names[op_class] = name
        # by name, so that an unmarked override in a subclass still takes the rule's place
        cls.RULES = {op_class: getattr(cls, name) for op_class, name in names.items()}

    def rule_for(self, op) -> Callable | None:
        """This walker's rule for `op` (a function of (self, op)), None when it has none."""
        return self.RULES.get(type(op))

    def no_rule(self, op, what: str = "rule"):
        """The error for an op this walker cannot handle (raise it)."""
        name = type(op).__name__
        return self.ERROR(f"{op.mnemonic} ({name}): {self.WHAT} has no {what} for this op",
                          op.loc, fix=f"register one with @rule(O.{name}) in argus/absint")


__all__ = ["rule", "Walker"]

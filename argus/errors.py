"""The one base of every error Argus reports about its input: `ArgusError(message, loc, fix)`.

`message` says what is wrong, `loc` where (a source location, a file, an instruction address:
anything that prints), `fix` what to do about it. Each package keeps its own subclasses (IRError,
DSLError, EmulatorError, ...) for callers that catch one kind; the CLI catches this base once.
"""

from __future__ import annotations

from typing import Any


class ArgusError(Exception):
    """An input Argus cannot accept, with where it is and, when known, how to fix it.

    `str(err)` is `loc: message` (just the message without a place); `render()` adds the fix.
    """

    def __init__(self, message: str, loc: Any = None, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.fix = fix

    @property
    def place(self) -> str:
        """The location as printed in front of the message ('' when there is none)."""
        return "" if self.loc is None else str(self.loc)

    def __str__(self) -> str:
        return f"{self.place}: {self.message}" if self.place else self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt without calling __init__, so subclasses with other signatures (HazardError,
        # UnsupportedOpcodeError) and loc/fix survive pickling to and from worker processes.
        return _rebuild, (type(self), self.args, self.__dict__)

    def render(self) -> str:
        """Message with its place, and the fix on a line of its own: what the CLI prints."""
        return str(self) + (f"\n  fix: {self.fix}" if self.fix else "")


def _rebuild(cls: type[ArgusError], args: tuple, state: dict) -> ArgusError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error

"""The one base of every error Argus reports: `ArgusError(message, loc, fix, kind=...)`.

`message` says what is wrong, `loc` where (a source location, a file, an instruction address:
anything that prints), `fix` what to do about it, and `kind` whose it is to fix (`KINDS`): the
search maps a kind to a verdict and the CLI prints every kind the same way. Each package keeps
its own subclasses (IRError, DSLError, EmulatorError, ...), each declaring its usual kind.
"""

from __future__ import annotations

from typing import Any

#: What an error's `kind` says about it:
KINDS = {
    "input": "the kernel, its sizes or parameters, or the arguments given are wrong: change them",
    "unsupported": "well-formed, but beyond what Argus (or the model) handles: use another "
                   "configuration",
    "environment": "the machine lacks something (a toolchain, a GPU runtime, a server, a "
                   "download) or a setting is malformed: fix the setup",
    "internal": "Argus contradicted itself (a bug in Argus, not in the input): report it",
}


class ArgusError(Exception):
    """An error Argus reports, with where it is, whose it is to fix and, when known, how.

    `str(err)` is `loc: message` (just the message without a place); `render()` adds the fix.
    `kind` (one of `KINDS`) is the class's unless a raise site gives its own.
    """

    kind = "input"

    def __init__(self, message: str, loc: Any = None, fix: str | None = None,
                 kind: str | None = None):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.fix = fix
        if kind is not None:
            if kind not in KINDS:
                raise ValueError(f"ArgusError kind {kind!r} is not one of {sorted(KINDS)}")
            self.kind = kind

    def __init_subclass__(cls, **options: Any) -> None:
        super().__init_subclass__(**options)
        if cls.kind not in KINDS:
            raise TypeError(f"{cls.__name__}.kind = {cls.kind!r} is not one of {sorted(KINDS)}")

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
        """Message with its place, and the fix on a line of its own: what the CLI prints (an
        internal error also says it is Argus's to fix)."""
        internal = ("\n  this is a bug in Argus, not in the input: please report it"
                    if self.kind == "internal" else "")
        return str(self) + (f"\n  fix: {self.fix}" if self.fix else "") + internal


def _rebuild(cls: type[ArgusError], args: tuple, state: dict) -> ArgusError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error

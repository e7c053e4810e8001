"""DSL errors that point at the kernel author's own source line."""

from __future__ import annotations

import os
import sys
from types import FrameType

from argus.errors import ArgusError
from argus.ir.types import SourceLoc

_PACKAGE = os.path.dirname(os.path.dirname(__file__))
_ROOT = os.path.dirname(_PACKAGE)
_INTERNAL = tuple(os.path.join(os.path.dirname(os.path.dirname(__file__)), part) + os.sep
                  for part in ("lang", "ir"))


class DSLError(ArgusError, ValueError):
    """Misuse of the tile DSL; `loc` is the author's file:line, printed in front of the message."""

    def __init__(self, message: str, loc: SourceLoc, fix: str | None = None):
        super().__init__(message, loc, fix)
        self.detail = message

    @property
    def place(self) -> str:
        return f"{self.loc.file}:{self.loc.line}"


def user_loc() -> SourceLoc:
    """The innermost stack frame outside argus/lang and argus/ir: the author's line."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame = frame.f_back
    if frame is None:
        return SourceLoc("<unknown>", 0, 0)
    column = 0
    positions = getattr(frame.f_code, "co_positions", None)
    if positions is not None:
        index = frame.f_lasti // 2
        for n, position in enumerate(positions()):
            if n == index:
                column = (position[2] or 0) + 1
                break
    return SourceLoc(short_path(frame.f_code.co_filename), frame.f_lineno, column)


def short_path(path: str) -> str:
    """Paths inside the Argus checkout print relative to it (argus/kernels/gemm.py)."""
    relative = os.path.relpath(path, _ROOT)
    return path if relative.startswith("..") else relative

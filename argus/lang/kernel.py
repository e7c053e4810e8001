"""`@kernel`: tracing a Python function with symbolic sizes into a verified IR kernel, once per
choice of compile-time parameters.
"""

from __future__ import annotations

import inspect
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import attrs

from argus import env
from argus.errors import ArgusError
from argus.ir import ops as O
from argus.ir.expr import Var
from argus.ir.types import DTYPE_BYTES, SIZE_RANGE, GlobalType, IRError, SourceLoc, Value
from argus.lang.errors import DSLError, short_path
from argus.lang.trace import BUILDERS, Builder, Global


@attrs.frozen
class Tensor:
    """Annotation of a tensor argument: `Tensor("bf16", "M", "K")` — names are symbolic sizes."""

    dtype: str
    shape: tuple = ()

    def __init__(self, dtype: str, *shape):
        self.__attrs_init__(dtype, tuple(shape))


@attrs.frozen
class Scalar:
    """Annotation of an integer scalar argument with its range [lo, hi)."""

    lo: int = 0
    hi: int = SIZE_RANGE[1]


class KernelDef:
    """A traceable kernel: `.trace(**params)` gives its IR, `.ir` uses the default params.

    Example::

        @T.kernel(waves=1)
        def scale(X: T.Tensor("f32", "N", 64), Y: T.Tensor("f32", "N", 64), *, factor=2.0):
            T.grid(X.shape[0] // 16)
            row = T.program_id(0) * 16
            Y.store((row, 0), X.load((row, 0), T.copy_layout((16, 64), 1, 4)) * factor)

        print(scale.trace(factor=3.0))
    """

    def __init__(self, fn: Callable, waves: int, namespace: dict | None = None):
        self.fn, self.waves = fn, waves
        # names visible where the kernel was defined, for string annotations of nested kernels
        self.namespace = dict(namespace or {})
        self.name = fn.__name__
        self.__doc__ = fn.__doc__
        signature = inspect.signature(fn)
        self.params = {n: p.default for n, p in signature.parameters.items()
                       if p.kind is p.KEYWORD_ONLY}
        self._cache: dict = {}

    @property
    def ir(self) -> O.Kernel:
        return self.trace()

    def trace(self, **params) -> O.Kernel:
        unknown = set(params) - set(self.params)
        if unknown:
            raise DSLError(f"kernel {self.name} has no parameter(s) {sorted(unknown)}; it takes "
                           f"{sorted(self.params)}", _def_loc(self.fn))
        for name, value in params.items():
            _check_param_type(self.name, name, self.params[name], value, _def_loc(self.fn))
        chosen = {**self.params, **params}
        key = tuple(sorted(chosen.items()))
        if key not in self._cache:
            self._cache[key] = self._trace(chosen)
        return self._cache[key]

    def _trace(self, params: dict) -> O.Kernel:
        loc = _def_loc(self.fn)
        builder = Builder(self.name, self.waves, loc)
        try:
            annotations = inspect.get_annotations(self.fn, eval_str=True, locals=self.namespace)
        except NameError as error:
            raise DSLError(f"cannot evaluate an argument annotation of {self.name}: {error}",
                           loc) from None
        args, handles = [], []
        for name, p in inspect.signature(self.fn).parameters.items():
            if p.kind is p.KEYWORD_ONLY:
                continue
            note = annotations.get(name)
            if isinstance(note, Tensor):
                if note.dtype not in DTYPE_BYTES:
                    raise DSLError(f"argument {name!r} has dtype {note.dtype!r}; use one of "
                                   f"{sorted(DTYPE_BYTES)}", loc)
                bad = [d for d in note.shape if not (isinstance(d, str) and d.isidentifier())
                       and not (isinstance(d, int) and not isinstance(d, bool) and d >= 1)]
                if bad or not note.shape:
                    raise DSLError(f"argument {name!r} has shape {note.shape!r}; each dimension "
                                   "is a size name (\"M\") or a whole number >= 1", loc)
                shape = tuple(builder.sizes.setdefault(d, Var(d, *SIZE_RANGE))
                              if isinstance(d, str) else d for d in note.shape)
                value = Value(name, GlobalType(note.dtype, shape))
                args.append(value)
                handles.append(Global(value))
            elif isinstance(note, Scalar):
                var = Var(name, note.lo, note.hi)
                args.append(var)
                handles.append(var)
            else:
                raise DSLError(f"argument {name!r} needs an annotation Tensor(dtype, *sizes) or "
                               f"Scalar(lo, hi)", loc)
        BUILDERS.append(builder)
        try:
            self.fn(*handles, **params)
        except (ArgusError, MemoryError):
            # out of memory is the process's condition, not a defect of the kernel at a line:
            # it goes to whoever set the limit (the search's sandbox names its limit)
            raise
        except Exception as error:  # the kernel's Python failed while tracing: say where
            raise DSLError(f"tracing kernel {self.name} raised {type(error).__name__}: {error}",
                           _raising_line(error) or loc,
                           "fix the kernel's Python at that line (it runs once, at trace "
                           "time)") from error
        finally:
            BUILDERS.pop()
        if builder.grid is None:
            raise DSLError(f"kernel {self.name} never calls grid(...)", loc)
        if len(builder.blocks) != 1:
            raise DSLError(f"kernel {self.name} leaves a loop or branch open", loc)
        kernel = O.Kernel(self.name, tuple(args), tuple(builder.sizes.values()), builder.grid,
                          self.waves, tuple(builder.assumes), O.Block((), builder.blocks[0]), loc,
                          tuple(builder.hints))
        try:
            kernel.verify()
        except IRError as error:
            raise DSLError(error.message, error.loc or loc, error.fix) from None
        if env.debug_level() >= 2:
            print(kernel, file=sys.stderr)
        return kernel


_PACKAGE = Path(__file__).resolve().parent.parent


def _raising_line(error: Exception) -> SourceLoc | None:
    """The innermost line of the traceback that is the kernel author's: outside the argus
    package, or in its kernel library (None when every frame is Argus' own)."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        path = Path(frame.filename).resolve()
        if not path.is_relative_to(_PACKAGE) or path.is_relative_to(_PACKAGE / "kernels"):
            return SourceLoc(short_path(frame.filename), frame.lineno or 1,
                             (frame.colno or 0) + 1)
    return None


def _def_loc(fn) -> SourceLoc:
    """The `def` line of a kernel function (after its decorators)."""
    code = fn.__code__
    line = code.co_firstlineno
    try:
        source, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return SourceLoc(short_path(code.co_filename), line, 1)
    for offset, text in enumerate(source):
        if text.lstrip().startswith(("def ", "async def ")):
            return SourceLoc(short_path(code.co_filename), start + offset,
                             len(text) - len(text.lstrip()) + 1)
    return SourceLoc(short_path(code.co_filename), line, 1)


def kernel(fn: Callable | None = None, *, waves: int = 4):
    """Decorator: `@kernel` or `@kernel(waves=4)` makes a traceable KernelDef."""
    namespace = sys._getframe(1).f_locals
    if fn is None:
        return lambda f: KernelDef(f, waves, sys._getframe(1).f_locals)
    return KernelDef(fn, waves, namespace)


def _check_param_type(kernel: str, name: str, default, value, loc):
    """A parameter takes a value of its default's kind (an int for an int, a bool for a bool,
    a number for a float), so `block_m="abc"` is refused here, not deep inside the trace."""
    kinds = ((bool, (bool,), "true or false"), (int, (int,), "a whole number"),
             (float, (int, float), "a number"))
    for kind, accepted, words in kinds:
        if isinstance(default, kind):
            if isinstance(value, bool) != (kind is bool) or not isinstance(value, accepted):
                raise DSLError(f"parameter {name}={value!r} of kernel {kernel}: it takes "
                               f"{words} (default {default!r})", loc)
            return

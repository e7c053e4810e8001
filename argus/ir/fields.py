"""How an IR op declares its fields: each attrs field says once what kind of thing it holds.

The kinds are operand, result, expression, bound variable, block, nested record, assertions
and attribute. Generic code reads these declarations instead of field names: `Op.operands`,
`Op.exprs`, `Op.replace_operands`, the generic text form in `ir.text` and the registry test.
"""

from __future__ import annotations

import enum
import functools
import sys

import attrs

from argus.ir.expr import as_expr


class Kind(enum.Enum):
    OPERAND = "operand"    # a Value (or tuple of Values) the op reads
    RESULT = "result"      # a Value (or tuple) the op defines
    EXPR = "expr"          # scalar formula(s); `coords` names the tile whose c0, c1, ... they use
    BINDS = "binds"        # a scalar Var the op binds (for the ops after it, or in its blocks)
    BLOCK = "block"        # a nested region
    RECORD = "record"      # a small attrs record whose own fields are declared (e.g. Gather)
    ASSERTS = "asserts"    # the tag assertions attached to the op
    ATTR = "attr"          # anything else: ints, strings, flags, address maps


class Shape(enum.Enum):
    ONE = "one"            # a single item
    MANY = "many"          # a tuple of items
    NAMED = "named"        # a tuple of (name, item) pairs, e.g. tag formulas


#: The metadata key under which a field's declaration is stored.
KEY = "argus.ir"


@attrs.frozen
class Decl:
    kind: Kind
    shape: Shape = Shape.ONE
    role: str | None = None     # the assertion role an operand plays (A, B, C, V, D, X, Y)
    coords: str | None = None   # for EXPR: the operand field whose coordinates are in scope
    record: type | None = None  # for RECORD: the record class


def _declare(decl: Decl, **kwargs):
    return attrs.field(metadata={KEY: decl}, **kwargs)


def expr_tuple(values) -> tuple:
    return tuple(as_expr(v) for v in values)


def _named_exprs(items) -> tuple:
    return tuple((name, as_expr(e)) for name, e in items)


def operand(role: str | None = None):
    """A value the op reads; `role` names it in tag assertions."""
    return _declare(Decl(Kind.OPERAND, role=role))


def operands():
    """A tuple of values the op reads (yielded values, loop inits)."""
    return _declare(Decl(Kind.OPERAND, Shape.MANY), converter=tuple)


def result():
    return _declare(Decl(Kind.RESULT))


def results():
    return _declare(Decl(Kind.RESULT, Shape.MANY), converter=tuple)


def expr(coords: str | None = None):
    """One formula in the enclosing scalars (and, with `coords`, that tile's c0, c1, ...)."""
    return _declare(Decl(Kind.EXPR, coords=coords), converter=as_expr)


def exprs(**kwargs):
    """A tuple of formulas in the enclosing scalars (an origin, an index, bounds)."""
    return _declare(Decl(Kind.EXPR, Shape.MANY), converter=expr_tuple, **kwargs)


def named_exprs(coords: str):
    """(name, formula) pairs over the coordinates of operand field `coords` (tag formulas)."""
    return _declare(Decl(Kind.EXPR, Shape.NAMED, coords=coords), converter=_named_exprs)


#: `Decl.coords` of a formula over the thread ids: the variables `wave` and `lane` (beside the
#: enclosing scalars) are in scope; the verifier and the interpreter bind them per thread.
THREAD = "@thread"


def active():
    """Which threads take part in the op: a condition on `wave` and `lane` (and the enclosing
    scalars), true by default; keyword-only."""
    return _declare(Decl(Kind.EXPR, coords=THREAD), converter=as_expr, default=as_expr(True),
                    kw_only=True)


def binds():
    return _declare(Decl(Kind.BINDS))


def block():
    return _declare(Decl(Kind.BLOCK))


def record(cls: type, **kwargs):
    """An optional nested record (None when absent) whose fields are declared like an op's."""
    return _declare(Decl(Kind.RECORD, record=cls), default=None, **kwargs)


def asserts():
    return _declare(Decl(Kind.ASSERTS, Shape.MANY), default=())


def attr(**kwargs):
    return _declare(Decl(Kind.ATTR), **kwargs)


#: Fields every op has and that no declaration describes: the source location.
LOC = "loc"


@functools.cache
def declared(cls) -> tuple[tuple[attrs.Attribute, Decl], ...]:
    """(field, declaration) of every field of an op or record class except `loc`, keyword-only
    fields (those a base class shares) last."""
    out = []
    for field in sorted(attrs.fields(cls), key=lambda f: f.kw_only):
        if field.name == LOC:
            continue
        decl = field.metadata.get(KEY)
        if decl is None:
            raise TypeError(f"{cls.__name__}.{field.name} declares no kind; use one of the "
                            "helpers in argus.ir.fields (operand(), result(), expr(), attr(), ...)")
        out.append((field, decl))
    return tuple(out)


def field_of(cls, kind: Kind) -> str | None:
    """The name of the (first) field of `kind` that `cls` declares, or None."""
    return next((field.name for field, decl in declared(cls) if decl.kind is kind), None)


def items(value, decl: Decl) -> tuple:
    """The items a field holds, as a flat tuple (names of NAMED pairs dropped)."""
    if value is None:
        return ()
    if decl.shape is Shape.ONE:
        return (value,)
    if decl.shape is Shape.NAMED:
        return tuple(item for _, item in value)
    return tuple(value)


def of_kind(obj, kind: Kind, where=lambda decl: True) -> tuple:
    """Every item of the given kind in `obj`'s fields (and its records'), in declaration order."""
    out: list = []
    for field, decl in declared(type(obj)):
        value = getattr(obj, field.name)
        if decl.kind is kind and where(decl):
            out.extend(items(value, decl))
        elif decl.kind is Kind.RECORD and value is not None:
            out.extend(of_kind(value, kind, where))
    return tuple(out)


def map_operands(obj, fn):
    """`obj` with every operand replaced by fn(operand), records included; `obj` itself when
    nothing changes."""
    changes = {}
    for field, decl in declared(type(obj)):
        value = getattr(obj, field.name)
        if decl.kind is Kind.OPERAND:
            new = fn(value) if decl.shape is Shape.ONE else tuple(fn(v) for v in value)
        elif decl.kind is Kind.RECORD and value is not None:
            new = map_operands(value, fn)
        else:
            continue
        if new != value:
            changes[field.name] = new
    return attrs.evolve(obj, **changes) if changes else obj


def published(cls) -> bool:
    """Whether `cls` is the class its module exports (attrs' slotted rebuild leaves the
    pre-decoration class behind among the subclasses until it is collected)."""
    module = sys.modules.get(cls.__module__)
    return getattr(module, cls.__qualname__, None) is cls

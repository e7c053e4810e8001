"""Symbolic integer expressions over bounded variables: the language Argus proofs are written in.

Expressions are immutable and hash-consed (structurally equal terms are the same object), evaluate
on Python ints and numpy arrays alike, have sound interval `bounds`, and a bounds-justified
normaliser `simplify`. Division and modulo follow Python's floor semantics everywhere.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import operator
import re
import weakref

import attrs
import numpy as np

from argus.errors import ArgusError

__all__ = [
    "Expr", "Var", "Const", "Term", "ite", "min_", "max_", "And", "Or", "Not",
    "evaluate", "bounds", "simplify", "free_vars", "substitute", "as_expr", "subterms", "parse",
    "missing_subterms", "rebuild", "clear_memos", "name_order",
    "ExprSyntaxError",
]

_INTERNED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

#: Per-node memo slots, filled on demand: `free_vars`, `bounds`, `simplify` (the node itself when
#: it is already normal), the magnitude of `evaluate`'s dtype choice and the structural sort key
#: of `_reading_order`. They live and die with the node, and an attribute read is several times
#: cheaper than a weak-keyed dictionary lookup on the verifier's hot paths.
_MEMO_SLOTS = ("_free", "_bounds", "_simple", "_magnitude", "_order")


def _init_memos(node):
    setter = object.__setattr__
    for slot in _MEMO_SLOTS:
        setter(node, slot, None)


def clear_memos() -> None:
    """Forget every per-node memo (not the interning): for tests that compare a memoised answer
    with a fresh one.

    >>> lane = Var("lane", 0, 64)
    >>> before = bounds(lane % 8)
    >>> clear_memos()
    >>> bounds(lane % 8) == before
    True
    """
    global _MEMOISED
    if _MEMOISED is None:
        nodes = [node for ref in list(_INTERNED.data.values()) if (node := ref()) is not None]
    else:
        nodes = [node for ref in _MEMOISED if (node := ref()) is not None]
    for slot in _MEMO_SLOTS:
        forget = getattr(Expr, slot).__set__
        for node in nodes:
            forget(node, None)
    _MEMOISED = []


#: Weak references to the nodes given a memo since `clear_memos` last ran, or None when no
#: such list is kept (before the first call, or after more than `_MEMOISED_LIMIT` memos): the
#: next call then scans every live node. A test process holds several hundred thousand live
#: nodes (cached kernels), and a property that clears per example would pay that scan each time.
_MEMOISED: list | None = None
_MEMOISED_LIMIT = 1 << 20


def _memoised(node) -> None:
    global _MEMOISED
    if _MEMOISED is not None:
        if len(_MEMOISED) < _MEMOISED_LIMIT:
            _MEMOISED.append(weakref.ref(node))
        else:
            _MEMOISED = None


class _Interned(type):
    """Metaclass that returns the existing node when a structurally equal one is alive."""

    def __call__(cls, *args):
        key = (cls, cls._intern_key(*args))
        node = _INTERNED.get(key)
        if node is None:
            node = super().__call__(*args)
            _INTERNED[key] = node
            _init_memos(node)
        return node


# name -> (arity, printed symbol, precedence, yields a boolean); precedences follow Python's.
_OPS = {
    "add": (2, "+", 60, False), "sub": (2, "-", 60, False), "mul": (2, "*", 70, False),
    "floordiv": (2, "//", 70, False), "mod": (2, "%", 70, False), "neg": (1, "-", 80, False),
    "shl": (2, "<<", 50, False), "shr": (2, ">>", 50, False), "and": (2, "&", 40, False),
    "xor": (2, "^", 30, False), "or": (2, "|", 20, False),
    "min": (2, "min", 100, False), "max": (2, "max", 100, False), "ite": (3, "ite", 100, False),
    "lt": (2, "<", 10, True), "le": (2, "<=", 10, True), "eq": (2, "==", 10, True),
    "ne": (2, "!=", 10, True), "land": (2, "&", 40, True), "lor": (2, "|", 20, True),
    "lnot": (1, "~", 80, True),
}


class Expr:
    """Base of all expression nodes; Python operators build new terms.

    `==` is structural identity (nodes are hash-consed), so use `e.eq(f)` / `e.ne(f)` to build an
    equation. A symbolic condition has no Python truth value: `if lane < 8:` raises.

    >>> lane, reg = Var("lane", 0, 64), Var("reg", 0, 4)
    >>> lane // 32 * 4 + reg
    Expr(lane // 32 * 4 + reg)
    >>> lane.eq(3), lane + 1 == lane + 1
    (Expr(lane == 3), True)
    >>> if lane < 8: pass
    Traceback (most recent call last):
    TypeError: the symbolic condition 'lane < 8' has no Python truth value; build the choice ...
    """

    __slots__ = _MEMO_SLOTS
    __array_ufunc__ = None  # numpy scalars defer to our reflected operators

    @property
    def is_bool(self) -> bool:
        raise NotImplementedError

    def __bool__(self):
        raise TypeError(
            f"the symbolic condition '{self}' has no Python truth value; build the choice with "
            "ite(cond, a, b), or evaluate(cond, env) for a concrete answer")

    # arithmetic; an operand that builds its own values from expressions (a DSL register tile:
    # `N * x` is the tile x times the size N) takes over through its reflected operator
    def __add__(self, other): return NotImplemented if _defers(other) else _term("add", self, other)
    def __radd__(self, other): return _term("add", other, self)
    def __sub__(self, other): return NotImplemented if _defers(other) else _term("sub", self, other)
    def __rsub__(self, other): return _term("sub", other, self)
    def __mul__(self, other): return NotImplemented if _defers(other) else _term("mul", self, other)
    def __rmul__(self, other): return _term("mul", other, self)
    def __floordiv__(self, other): return _term("floordiv", self, other)
    def __rfloordiv__(self, other): return _term("floordiv", other, self)
    def __mod__(self, other): return _term("mod", self, other)
    def __rmod__(self, other): return _term("mod", other, self)
    def __lshift__(self, other): return _term("shl", self, other)
    def __rlshift__(self, other): return _term("shl", other, self)
    def __rshift__(self, other): return _term("shr", self, other)
    def __rrshift__(self, other): return _term("shr", other, self)
    def __xor__(self, other): return _term("xor", self, other)
    def __rxor__(self, other): return _term("xor", other, self)
    def __neg__(self): return _term("neg", self)
    def __pos__(self): return self

    # `&`, `|`, `~` are bitwise on integers and logical on conditions, as for numpy bool arrays
    def __and__(self, other): return _bitwise_or_logic("and", "land", self, other)
    def __rand__(self, other): return _bitwise_or_logic("and", "land", other, self)
    def __or__(self, other): return _bitwise_or_logic("or", "lor", self, other)
    def __ror__(self, other): return _bitwise_or_logic("or", "lor", other, self)

    def __invert__(self):
        return _term("lnot", self) if self.is_bool else -self - 1

    # comparisons build conditions; `==` stays identity so expressions can be dict keys
    def __lt__(self, other): return NotImplemented if _defers(other) else _term("lt", self, other)
    def __le__(self, other): return NotImplemented if _defers(other) else _term("le", self, other)
    def __gt__(self, other): return NotImplemented if _defers(other) else _term("lt", other, self)
    def __ge__(self, other): return NotImplemented if _defers(other) else _term("le", other, self)
    def eq(self, other) -> Expr: return _term("eq", self, other)
    def ne(self, other) -> Expr: return _term("ne", self, other)

    __eq__ = object.__eq__
    __hash__ = object.__hash__


def _check_name(_node, _attribute, name):
    if not (isinstance(name, str) and name.isidentifier()):
        raise ExprError(f"Var name must be a Python identifier, got {name!r}")


@attrs.frozen(eq=False, repr=False, weakref_slot=True)
class Var(Expr, metaclass=_Interned):
    """An integer variable ranging over the half-open interval [lo, hi).

    >>> Var("lane", 0, 64) is Var("lane", 0, 64)
    True
    >>> Var("lane", 4, 4)
    Traceback (most recent call last):
    argus.ir.expr.ExprError: Var 'lane' has the empty range [4, 4); give lo < hi ...
    """

    name: str = attrs.field(validator=_check_name)
    lo: int = attrs.field(converter=operator.index)
    hi: int = attrs.field(converter=operator.index)

    def __attrs_post_init__(self):
        if self.lo >= self.hi:
            raise ExprError(
                f"Var {self.name!r} has the empty range [{self.lo}, {self.hi}); give lo < hi "
                "(the upper bound is exclusive)")

    @staticmethod
    def _intern_key(name, lo=None, hi=None):
        if lo is None or hi is None:
            raise ExprError(f"Var({name!r}) needs its range: Var(name, lo, hi) ranges over "
                            "[lo, hi), e.g. Var('lane', 0, 64)")
        try:
            return (name, operator.index(lo), operator.index(hi))
        except TypeError:
            raise ExprError(f"Var({name!r}, {lo!r}, {hi!r}): the bounds must be ints") from None

    @property
    def is_bool(self) -> bool:
        return False

    def __reduce__(self):
        return (Var, (self.name, self.lo, self.hi))

    def __repr__(self):
        return f"Var({self.name!r}, {self.lo}, {self.hi})"

    def __str__(self):
        return self.name


def _const_value(value):
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return operator.index(value)


@attrs.frozen(eq=False, repr=False, weakref_slot=True)
class Const(Expr, metaclass=_Interned):
    """An integer (or, for conditions, boolean) constant; operators on constants fold.

    >>> Const(2) + 3, Const(True).is_bool
    (Const(5), True)
    """

    value: int | bool = attrs.field(converter=_const_value)

    @staticmethod
    def _intern_key(value):
        value = _const_value(value)
        return (type(value), value)

    @property
    def is_bool(self) -> bool:
        return isinstance(self.value, bool)

    def __reduce__(self):
        return (Const, (self.value,))

    def __repr__(self):
        return f"Const({self.value!r})"

    def __str__(self):
        return str(self.value)


@attrs.frozen(eq=False, repr=False, weakref_slot=True)
class Term(Expr, metaclass=_Interned):
    """An operator applied to sub-expressions; `op` is a key of the operator table `_OPS`.

    >>> term = Var("lane", 0, 64) % 8
    >>> term.op, term.args
    ('mod', (Var('lane', 0, 64), Const(8)))
    """

    op: str = attrs.field()
    args: tuple = attrs.field(converter=lambda args: tuple(map(as_expr, args)))

    @op.validator
    def _known_operator(self, _attribute, op):
        if op not in _OPS:
            raise ExprError(f"unknown operator {op!r}; expected one of {sorted(_OPS)}")
        if len(self.args) != _OPS[op][0]:
            raise ExprError(f"operator {op!r} takes {_OPS[op][0]} operands, got {self.args}")

    @staticmethod
    def _intern_key(op, args):
        return (op, tuple(map(as_expr, args)))

    @property
    def is_bool(self) -> bool:
        return _OPS[self.op][3] or (self.op == "ite" and self.args[1].is_bool)

    def __reduce__(self):
        return (Term, (self.op, self.args))

    def __repr__(self):
        return f"Expr({self})"

    def __str__(self):
        return _show(self)


def as_expr(value) -> Expr:
    """Lift an int, bool or numpy integer to a `Const`; pass expressions through.

    >>> as_expr(5), as_expr(np.int32(7)), as_expr(False)
    (Const(5), Const(7), Const(False))
    >>> as_expr(0.5)
    Traceback (most recent call last):
    TypeError: cannot use 0.5 of type float in an expression; ...
    """
    if isinstance(value, Expr):
        return value
    try:
        return Const(value)
    except TypeError:
        raise TypeError(
            f"cannot use {value!r} of type {type(value).__name__} in an expression; "
            "expressions combine Expr, int and bool values") from None


_BOOL_OPERANDS = {"land", "lor", "lnot"}
_EITHER_SORT_OPERANDS = {"eq", "ne"}


def _defers(other) -> bool:
    """Whether `other` declares `takes_expr_operands`: the operator then returns NotImplemented
    and Python asks the operand's reflected one."""
    return getattr(type(other), "takes_expr_operands", False)


def _term(op, *operands) -> Expr:
    args = tuple(as_expr(a) for a in operands)
    _check_sorts(op, args)
    if op in ("floordiv", "mod") and isinstance(args[1], Const) and args[1].value == 0:
        raise ZeroDivisionError(f"{_show(Term(op, args))}: division by the constant 0")
    if all(isinstance(a, Const) for a in args):
        return Const(_apply(op, [a.value for a in args]))
    if op not in _OPS or len(args) != _OPS[op][0]:
        return Term(op, args)  # the constructor raises the precise error
    return _interned_term(op, args)


def _interned_term(op, args: tuple) -> Term:
    """The interned node op(args), found by its key directly or built without running the
    constructor's conversions and checks again (operands are expressions, sorts checked)."""
    key = (Term, (op, args))
    node = _INTERNED.get(key)
    if node is None:
        node = object.__new__(Term)
        object.__setattr__(node, "op", op)
        object.__setattr__(node, "args", args)
        _INTERNED[key] = node
        _init_memos(node)
    return node


def rebuild(op, args: tuple) -> Expr:
    """`op` applied to `args` where an equal-sorted term already had these operands replaced
    (a substitution): sorts need no new check, and a node with a constant operand goes through
    the folding constructor.

    >>> rebuild("add", (Const(2), Const(3))), rebuild("mul", (Var("k", 0, 8), Var("n", 1, 4)))
    (Const(5), Expr(k * n))
    """
    for a in args:
        if a.__class__ is Const:
            return _term(op, *args)
    return _interned_term(op, args)


def _check_sorts(op, args):
    if op == "ite":
        if not args[0].is_bool:
            raise TypeError(f"ite: the condition '{args[0]}' is an integer; compare it first")
        if args[1].is_bool != args[2].is_bool:
            raise TypeError(f"ite: branches '{args[1]}' and '{args[2]}' mix a condition and an "
                            "integer")
        return
    if op in _EITHER_SORT_OPERANDS:
        if args[0].is_bool != args[1].is_bool:
            raise TypeError(f"cannot compare the condition and the integer in "
                            f"'{args[0]}' vs '{args[1]}'")
        return
    want_bool = op in _BOOL_OPERANDS
    for a in args:
        if a.is_bool != want_bool:
            kind = "condition" if a.is_bool else "integer"
            raise TypeError(
                f"operator '{_OPS[op][1]}' needs {'conditions' if want_bool else 'integers'}, "
                f"but '{a}' is a {kind}")


def _bitwise_or_logic(int_op, bool_op, a, b) -> Expr:
    a, b = as_expr(a), as_expr(b)
    return _term(bool_op if a.is_bool and b.is_bool else int_op, a, b)


def ite(cond, a, b) -> Expr:
    """`a` where `cond` holds, else `b`.

    >>> lane = Var("lane", 0, 64)
    >>> mirrored = ite(lane < 32, lane, 63 - lane)
    >>> mirrored, bounds(mirrored), evaluate(mirrored, {"lane": 40})
    (Expr(ite(lane < 32, lane, 63 - lane)), (0, 63), 23)
    """
    return _term("ite", cond, a, b)


def min_(a, b) -> Expr:
    """The smaller of `a` and `b` (a trailing underscore: `min` is Python's).

    >>> bounds(min_(Var("lane", 0, 64), 16))
    (0, 16)
    """
    return _term("min", a, b)


def max_(a, b) -> Expr:
    """The larger of `a` and `b`.

    >>> max_(Var("k", 0, 8) - 4, 0), bounds(max_(Var("k", 0, 8) - 4, 0))
    (Expr(max(k - 4, 0)), (0, 3))
    """
    return _term("max", a, b)


def And(*conds) -> Expr:
    """Conjunction of conditions; `And()` is true.

    >>> lane, reg = Var("lane", 0, 64), Var("reg", 0, 4)
    >>> And(lane < 8, reg.eq(0)), And()
    (Expr((lane < 8) & (reg == 0)), Const(True))
    """
    result = Const(True)
    for i, c in enumerate(conds):
        result = as_expr(c) if i == 0 else _term("land", result, c)
    return result


def Or(*conds) -> Expr:
    """Disjunction of conditions; `Or()` is false.

    >>> lane = Var("lane", 0, 64)
    >>> evaluate(Or(lane < 8, lane.eq(63)), {"lane": 63}), Or()
    (True, Const(False))
    """
    result = Const(False)
    for i, c in enumerate(conds):
        result = as_expr(c) if i == 0 else _term("lor", result, c)
    return result


def Not(cond) -> Expr:
    """The negation of a condition (`~cond` builds the same term).

    >>> lane = Var("lane", 0, 64)
    >>> Not(lane < 8), Not(lane < 8) is ~(lane < 8)
    (Expr(~(lane < 8)), True)
    """
    return _term("lnot", cond)


# ---------------------------------------------------------------------------------------------
# evaluation


def _is_array(*values) -> bool:
    return any(isinstance(v, np.ndarray) for v in values)


def _floordiv(a, b):
    if _is_array(a, b):
        if np.any(np.asarray(b) == 0):
            raise ZeroDivisionError("integer division by zero in evaluate")
        return np.floor_divide(a, b)
    return a // b


def _mod(a, b):
    if _is_array(a, b):
        if np.any(np.asarray(b) == 0):
            raise ZeroDivisionError("integer modulo by zero in evaluate")
        return np.mod(a, b)
    return a % b


def _shift(fn):
    def shift(a, b):
        if np.any(np.asarray(b) < 0):
            raise ValueError("negative shift count in evaluate")
        return fn(a, b)
    return shift


def _elementwise(scalar_fn, array_fn):
    return lambda *xs: array_fn(*xs) if _is_array(*xs) else scalar_fn(*xs)


_EVAL = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": _floordiv,
    "mod": _mod, "neg": operator.neg, "shl": _shift(operator.lshift),
    "shr": _shift(operator.rshift), "and": operator.and_, "xor": operator.xor,
    "or": operator.or_, "min": _elementwise(min, np.minimum), "max": _elementwise(max, np.maximum),
    "lt": operator.lt, "le": operator.le, "eq": operator.eq, "ne": operator.ne,
    "land": _elementwise(lambda a, b: bool(a and b), np.logical_and),
    "lor": _elementwise(lambda a, b: bool(a or b), np.logical_or),
    "lnot": _elementwise(lambda a: not a, np.logical_not),
    "ite": lambda c, a, b: np.where(c, a, b) if _is_array(c, a, b) else (a if c else b),
}


def _apply(op, values):
    return _EVAL[op](*values)


def _env_by_name(env) -> dict:
    return {(k.name if isinstance(k, Var) else k): v for k, v in env.items()}


_INT64_SAFE = 2**62


def evaluate(expr, env):
    """Value of `expr` with variables taken from `env` (name or Var -> int or numpy int array).

    Arrays broadcast against each other, so one call evaluates a formula for every lane at once.
    Values outside a variable's declared range are allowed (replay of arbitrary points). Arrays
    switch to exact Python-int arithmetic when the expression's bounds could overflow int64.

    >>> lane, reg = Var("lane", 0, 64), Var("reg", 0, 4)
    >>> evaluate(lane // 32 * 4 + reg, {"lane": 37, "reg": 2})
    6
    >>> evaluate(lane // 32 * 4 + reg, {lane: np.arange(0, 64, 16), reg: 1})
    array([1, 1, 5, 5])
    >>> evaluate(lane + reg, {"lane": 1})
    Traceback (most recent call last):
    KeyError: "evaluate: no value for variable 'reg' in lane + reg; the environment has ['lane']"
    """
    expr = as_expr(expr)
    values = {name: np.asarray(v) if isinstance(v, (list, tuple)) else v
              for name, v in _env_by_name(env).items()}
    if any(isinstance(v, np.ndarray) for v in values.values()):
        lo, hi = _magnitude(expr)
        if lo < -_INT64_SAFE or hi > _INT64_SAFE:
            values = {k: (np.asarray(v).astype(object) if isinstance(v, np.ndarray) else v)
                      for k, v in values.items()}
    memo: dict = {}
    for e in _evaluation_order(expr):
        if isinstance(e, Const):
            memo[e] = e.value
        elif isinstance(e, Var):
            memo[e] = values.get(e.name, _missing)
            if memo[e] is _missing:
                memo[e] = _Failure(KeyError(
                    f"evaluate: no value for variable '{e.name}' in {_show(expr)}; "
                    f"the environment has {sorted(values)}"))
        else:
            memo[e] = _evaluate_node(e.op, [memo[a] for a in e.args])
    result = memo[expr]
    if isinstance(result, _Failure):
        raise result.error
    return result


_missing = object()


@functools.lru_cache(maxsize=4096)
def _evaluation_order(expr) -> tuple:
    """`_postorder`, kept for the formulas the interpreter evaluates again and again (access
    formulas once per op and workgroup): nodes are interned and immutable."""
    return tuple(_postorder(expr))


class _Failure:
    """An error met while evaluating a subterm, held until a scalar ite decides whether the
    subterm is needed (ite evaluates lazily, as Python's conditional expression does)."""

    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error


def _evaluate_node(op, args):
    if op == "ite" and not isinstance(args[0], _Failure) and not _is_array(args[0]):
        return args[1] if args[0] else args[2]
    if op in ("land", "lor"):
        # one false conjunct (true disjunct) decides, as `and`/`or` would: a premise that
        # fails makes an undefined consequence irrelevant
        decisive = op == "lor"
        if any(not isinstance(a, _Failure) and not _is_array(a) and bool(a) is decisive
               for a in args):
            return decisive
    for a in args:
        if isinstance(a, _Failure):
            return a
    try:
        return _apply(op, args)
    except (ZeroDivisionError, ValueError) as error:
        return _Failure(error)


def _magnitude(expr) -> tuple[int, int]:
    """Smallest and largest bound over every subterm, to choose an overflow-free array dtype."""
    hit = expr._magnitude
    if hit is None:
        intervals = [bounds(e) for e in _postorder(expr)]
        hit = (min(0, *(i[0] for i in intervals)), max(0, *(i[1] for i in intervals)))
        object.__setattr__(expr, "_magnitude", hit)
        if _MEMOISED is not None:
            _memoised(expr)
    return hit


def subterms(expr) -> list:
    """Every distinct subterm of `expr` once, children before parents (iterative, so deep terms
    are fine).

    >>> subterms(Var("lane", 0, 64) + 1)
    [Const(1), Var('lane', 0, 64), Expr(lane + 1)]
    """
    return _postorder(as_expr(expr))


def missing_subterms(root, cache) -> list:
    """Subterms of `root` that `cache` (keyed by node) lacks, each once, children before
    parents: the ones a memoised bottom-up computation still has to visit.

    >>> lane = Var("lane", 0, 64)
    >>> missing_subterms(lane * 2 + 1, {lane: "done", lane * 2: "done"})
    [Const(1), Expr(lane * 2 + 1)]
    """
    seen, order, stack = set(), [], [(root, False)]
    while stack:
        e, expanded = stack.pop()
        if expanded:
            order.append(e)
        elif e not in seen and e not in cache:
            seen.add(e)
            stack.append((e, True))
            if isinstance(e, Term):
                stack.extend((a, False) for a in e.args)
    return order


def _postorder(expr, operands=lambda e: e.args if isinstance(e, Term) else ()):
    """Nodes reachable from expr through `operands`, each once, children before parents."""
    seen, order, stack = set(), [], [(expr, False)]
    while stack:
        e, expanded = stack.pop()
        if expanded:
            order.append(e)
        elif e not in seen:
            seen.add(e)
            stack.append((e, True))
            stack.extend((a, False) for a in operands(e))
    return order


# ---------------------------------------------------------------------------------------------
# interval analysis

def bounds(expr) -> tuple[int, int]:
    """Inclusive (lo, hi) containing every value `expr` takes with its variables in range.

    Conditions have bounds within (0, 1). Divisors and shift counts only count the values at which
    the operation is defined (non-zero, non-negative); a divisor that is always zero raises.

    >>> lane, reg = Var("lane", 0, 64), Var("reg", 0, 4)
    >>> bounds(lane // 32 * 4 + reg), bounds(lane % 8 * 2), bounds(lane < 64)
    ((0, 7), (0, 14), (1, 1))
    """
    expr = as_expr(expr)
    hit = expr._bounds
    if hit is not None:
        return hit
    for e in _postorder(expr, _operands_missing("_bounds")):
        object.__setattr__(e, "_bounds", _node_bounds(e))
        if _MEMOISED is not None:
            _memoised(e)
    return expr._bounds


def _operands_missing(slot):
    """Traversal step that stops at nodes whose memo `slot` is already filled."""
    def operands(e):
        if not isinstance(e, Term):
            return ()
        return [a for a in e.args if getattr(a, slot) is None]
    return operands


def _node_bounds(e) -> tuple[int, int]:
    if isinstance(e, Const):
        return (int(e.value), int(e.value))
    if isinstance(e, Var):
        return (e.lo, e.hi - 1)
    args = [a._bounds for a in e.args]
    return _INTERVAL[e.op](e, *args)


def _corners(fn, a, b):
    values = [fn(x, y) for x in a for y in b]
    return (min(values), max(values))


def _nonzero_parts(e, d):
    """The negative and positive sub-ranges of divisor range d (zero is excluded)."""
    parts = []
    if d[0] <= -1:
        parts.append((d[0], min(d[1], -1)))
    if d[1] >= 1:
        parts.append((max(d[0], 1), d[1]))
    if not parts:
        raise ZeroDivisionError(f"'{_show(e)}' always divides by zero")
    return parts


def _union(intervals):
    return (min(i[0] for i in intervals), max(i[1] for i in intervals))


def _floordiv_bounds(e, x, d):
    # for a divisor of fixed sign x/d is monotone in each argument, so corners bound it
    return _union([_corners(operator.floordiv, x, part) for part in _nonzero_parts(e, d)])


def _mod_bounds(e, x, d):
    out = []
    for lo, hi in _nonzero_parts(e, d):
        if lo == hi and x[0] // lo == x[1] // lo:
            q = x[0] // lo
            out.append((x[0] - q * lo, x[1] - q * lo))
        elif lo > 0:
            if x[0] >= 0 and x[1] < lo:
                out.append(x)
            else:
                out.append((0, min(hi - 1, x[1]) if x[0] >= 0 else hi - 1))
        elif x[1] <= 0 and x[0] > hi:
            out.append(x)
        else:
            out.append((lo + 1 if x[1] > 0 else max(lo + 1, x[0]), 0))
    return _union(out)


_LARGEST_LEFT_SHIFT = 4096


def _shift_bounds(fn):
    def shift_bounds(e, x, s):
        if s[1] < 0:
            raise ExprError(f"'{_show(e)}' always shifts by a negative count")
        counts = (max(s[0], 0), s[1])
        if fn is operator.rshift:
            # shifting right past the sign bit changes nothing more, so huge counts are cheap
            saturated = _two_complement_width(x) + 1
            counts = (min(counts[0], saturated), min(counts[1], saturated))
        elif counts[1] > _LARGEST_LEFT_SHIFT and x != (0, 0):
            raise ExprError(f"'{_show(e)}' may shift left by up to {counts[1]} bits; bound the "
                            f"shift count below {_LARGEST_LEFT_SHIFT} (e.g. with % or min_)")
        return _corners(fn, x, counts)
    return shift_bounds


def _two_complement_width(*intervals) -> int:
    return max((v if v >= 0 else ~v).bit_length() for i in intervals for v in i)


def _bitwise_bounds(op):
    def bitwise_bounds(e, a, b):
        if a[0] >= 0 and b[0] >= 0:
            top = (1 << max(a[1], b[1]).bit_length()) - 1
            if op == "and":
                return (0, min(a[1], b[1]))
            if op == "or":
                return (max(a[0], b[0]), top)
            return (0, top)
        if op == "and" and (a[0] >= 0 or b[0] >= 0):
            return (0, a[1] if a[0] >= 0 else b[1])
        n = _two_complement_width(a, b)
        if op == "or" and (a[1] < 0 or b[1] < 0):
            return (-(1 << n), -1)
        return (-(1 << n), (1 << n) - 1)
    return bitwise_bounds


def _compare_bounds(decide):
    def compare_bounds(e, a, b):
        verdict = decide(a, b)
        return (0, 1) if verdict is None else (int(verdict), int(verdict))
    return compare_bounds


def _decide_lt(a, b):
    return True if a[1] < b[0] else False if a[0] >= b[1] else None


def _decide_le(a, b):
    return True if a[1] <= b[0] else False if a[0] > b[1] else None


def _decide_eq(a, b):
    if a[0] == a[1] == b[0] == b[1]:
        return True
    return False if a[1] < b[0] or b[1] < a[0] else None


def _negate(verdict):
    return None if verdict is None else not verdict


def _ite_bounds(e, c, a, b):
    if c == (1, 1):
        return a
    if c == (0, 0):
        return b
    return _union([a, b])


_INTERVAL = {
    "add": lambda e, a, b: (a[0] + b[0], a[1] + b[1]),
    "sub": lambda e, a, b: (a[0] - b[1], a[1] - b[0]),
    "mul": lambda e, a, b: _corners(operator.mul, a, b),
    "neg": lambda e, a: (-a[1], -a[0]),
    "floordiv": _floordiv_bounds,
    "mod": _mod_bounds,
    "shl": _shift_bounds(operator.lshift),
    "shr": _shift_bounds(operator.rshift),
    "and": _bitwise_bounds("and"), "or": _bitwise_bounds("or"), "xor": _bitwise_bounds("xor"),
    "min": lambda e, a, b: (min(a[0], b[0]), min(a[1], b[1])),
    "max": lambda e, a, b: (max(a[0], b[0]), max(a[1], b[1])),
    "ite": _ite_bounds,
    "lt": _compare_bounds(_decide_lt),
    "le": _compare_bounds(_decide_le),
    "eq": _compare_bounds(_decide_eq),
    "ne": _compare_bounds(lambda a, b: _negate(_decide_eq(a, b))),
    "land": lambda e, a, b: (a[0] & b[0], a[1] & b[1]),
    "lor": lambda e, a, b: (a[0] | b[0], a[1] | b[1]),
    "lnot": lambda e, a: (1 - a[1], 1 - a[0]),
}


# ---------------------------------------------------------------------------------------------
# traversal


def free_vars(expr) -> frozenset:
    """The variables `expr` mentions (cached per node: nodes are interned and immutable, so a
    subterm shared by many formulas is walked once per process).

    >>> sorted(v.name for v in free_vars(Var("lane", 0, 64) // 32 * 4 + Var("reg", 0, 4)))
    ['lane', 'reg']
    """
    expr = as_expr(expr)
    hit = expr._free
    if hit is not None:
        return hit
    for e in _postorder(expr, _operands_missing("_free")):
        if isinstance(e, Var):
            found = frozenset((e,))
        elif isinstance(e, Term):
            found = frozenset().union(*(a._free for a in e.args))
        else:
            found = _NO_VARS
        object.__setattr__(e, "_free", found)
        if _MEMOISED is not None:
            _memoised(e)
    return expr._free


_NO_VARS: frozenset = frozenset()


def substitute(expr, mapping) -> Expr:
    """Replace variables (keyed by name or Var) by expressions or ints, rebuilding bottom-up.

    >>> lane, reg, wave = Var("lane", 0, 64), Var("reg", 0, 4), Var("wave", 0, 4)
    >>> substitute(lane // 32 * 4 + reg, {lane: wave * 64 + lane, "reg": 1})
    Expr((wave * 64 + lane) // 32 * 4 + 1)
    """
    by_name = {k: as_expr(v) for k, v in _env_by_name(mapping).items()}
    return _rebuild(as_expr(expr), lambda v: by_name.get(v.name, v))


def _rebuild(expr, on_var, on_term=None):
    memo: dict = {}
    for e in _postorder(expr):
        if isinstance(e, Var):
            memo[e] = on_var(e)
        elif isinstance(e, Const):
            memo[e] = e
        else:
            args = [memo[a] for a in e.args]
            memo[e] = on_term(e, args) if on_term else _term(e.op, *args)
    return memo[expr]


# ---------------------------------------------------------------------------------------------
# printing


def _show(expr) -> str:
    shown: dict = {}
    for e in _postorder(expr):
        shown[e] = _show_node(e, shown)
    return shown[expr][0]


def _show_node(e, shown) -> tuple[str, int]:
    """(text, precedence) of one node, parenthesising its operands as Python would need."""
    if not isinstance(e, Term):
        negative_const = isinstance(e, Const) and not e.is_bool and e.value < 0
        return str(e), 59 if negative_const else 100  # below '+' so that 'x - (-3)' reads well
    _, symbol, prec, _ = _OPS[e.op]

    def operand(arg, context, right=False):
        text, inner = shown[arg]
        needs = inner < context or (right and inner == context) or (inner == 10 and context)
        return f"({text})" if needs else text

    if prec == 100:
        return f"{symbol}({', '.join(shown[a][0] for a in e.args)})", prec
    if len(e.args) == 1:
        return f"{symbol}{operand(e.args[0], prec)}", prec
    left, right = e.args
    if e.op in ("lt", "le") and isinstance(left, Const) and not isinstance(right, Const):
        # the normaliser puts constants on the right of an equation; read `3 <= x` as `x >= 3`
        mirrored = {"lt": ">", "le": ">="}[e.op]
        return f"{operand(right, prec + 1)} {mirrored} {operand(left, prec + 1)}", prec
    # comparisons do not chain in our reading, so both sides of one are parenthesised alike
    left_context = prec + 1 if prec == 10 else prec
    return f"{operand(left, left_context)} {symbol} {operand(right, prec, right=True)}", prec


# ---------------------------------------------------------------------------------------------
# parsing


class ExprError(ArgusError, ValueError):
    """An expression node built from values it cannot hold (a Var without bounds, an empty
    range, a name that is not an identifier, an unknown operator), or a shift whose count's
    bounds make it undefined."""


class ExprSyntaxError(ArgusError, ValueError):
    """Text that `parse` cannot read as an expression; the message points at the column.

    >>> parse("lane +", [Var("lane", 0, 64)])
    Traceback (most recent call last):
    argus.ir.expr.ExprSyntaxError: cannot parse 'lane +': invalid syntax at column ...
    """


_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.LShift: operator.lshift,
    ast.RShift: operator.rshift, ast.BitXor: operator.xor, ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
}
_COMPARE = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: lambda a, b: as_expr(a).eq(b), ast.NotEq: lambda a, b: as_expr(a).ne(b),
}


def parse(text: str, variables, unknown=None) -> Expr:
    """Read an expression as `str()` prints it (Python syntax: `==` builds an equation, `and`,
    `or`, `not`, `x if c else y`, ite/min/max/And/Or/Not calls), with `variables` (Vars, or a
    name -> Var mapping) as the names; `unknown(name)` may supply a Var for any other name (or
    None). No Python code is executed. The one expression reader: the IR text reads through it.

    >>> lane, reg = Var("lane", 0, 64), Var("reg", 0, 4)
    >>> parse("lane // 32 * 4 + reg", [lane, reg]) is lane // 32 * 4 + reg
    True
    >>> parse("0 <= lane < 8 if reg == 0 else False", [lane, reg])
    Expr(ite(reg == 0, (lane >= 0) & (lane < 8), False))
    >>> parse("lane + foo", [lane])
    Traceback (most recent call last):
    argus.ir.expr.ExprSyntaxError: 'lane + foo', column 8: unknown name 'foo'; ...
    """
    names = dict(variables) if isinstance(variables, dict) else {v.name: v for v in variables}
    functions = {"ite": ite, "min": min_, "max": max_, "And": And, "Or": Or, "Not": Not}
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as error:
        raise ExprSyntaxError(f"cannot parse {text!r}: {error.msg} at column {error.offset}"
                              ) from None

    def fail(node, what):
        raise ExprSyntaxError(f"{text!r}, column {node.col_offset + 1}: {what}")

    def read(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, bool)):
            return as_expr(node.value)
        if isinstance(node, ast.Name):
            if node.id in names:
                return names[node.id]
            if unknown is not None and (var := unknown(node.id)) is not None:
                return var
            fail(node, f"unknown name '{node.id}'; the variables are {sorted(names)}")
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return as_expr(_BINARY[type(node.op)](read(node.left), read(node.right)))
        if isinstance(node, ast.UnaryOp):
            operand = read(node.operand)
            if isinstance(node.op, ast.Not):
                return Not(operand)
            return {ast.USub: operator.neg, ast.UAdd: operator.pos,
                    ast.Invert: operator.invert}[type(node.op)](operand)
        if isinstance(node, ast.Compare):
            sides = [read(node.left)] + [read(c) for c in node.comparators]
            return And(*(_COMPARE[type(op)](a, b)
                         for op, a, b in zip(node.ops, sides, sides[1:])))
        if isinstance(node, ast.BoolOp):
            return (And if isinstance(node.op, ast.And) else Or)(*map(read, node.values))
        if isinstance(node, ast.IfExp):
            return ite(read(node.test), read(node.body), read(node.orelse))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            if node.func.id in functions:
                return as_expr(functions[node.func.id](*map(read, node.args)))
            fail(node, f"unknown function '{node.func.id}'; use one of {sorted(functions)}")
        fail(node, f"'{ast.unparse(node)}' is not part of the expression language")

    return read(tree.body)


# ---------------------------------------------------------------------------------------------
# normaliser


def simplify(expr) -> Expr:
    """An equivalent, usually smaller expression in a canonical shape.

    Rules: constant folding; identities (x+0, x*1, x^0, …); sums collected into linear form with
    like terms merged; `(a*n + b) // n -> a + b // n` and `(a*n + b) % n -> b % n`; `x % n -> x` and
    `x // n -> q` when bounds confine x to one period; `x % n + n*(x // n) -> x`; nested div/mod
    merged; power-of-two div/mod by constants become shifts/masks; comparisons, min/max and ite
    decided by bounds where possible. Results are memoised, so re-simplifying a term that shares
    subterms with earlier ones only visits the new part.

    >>> lane, reg = Var("lane", 0, 64), Var("reg", 0, 4)
    >>> simplify(lane % 32 + 32 * (lane // 32)), simplify((lane * 4 + reg) // 4)
    (Var('lane', 0, 64), Var('lane', 0, 64))
    >>> simplify((lane * 4 + reg) % 4), simplify(lane // 64), simplify(lane < 64)
    (Var('reg', 0, 4), Const(0), Const(True))
    """
    expr = as_expr(expr)
    if not isinstance(expr, Term):
        return expr
    if (hit := expr._simple) is not None:
        return expr if hit is _IS_NORMAL else hit
    order = _postorder(expr, _operands_missing("_simple"))
    inside = _inside_sums(order, expr)
    memo: dict = {}
    for e in order:
        if not isinstance(e, Term):
            memo[e] = e
            continue
        args = [memo[a] if a in memo else _simplified(a) for a in e.args]
        if e in inside:
            # a sum nested in a larger sum is normalised once, as part of the outermost one
            memo[e] = _term(e.op, *args)
            continue
        memo[e] = result = _simplify_node(e.op, args)
        if result is not e:
            object.__setattr__(e, "_simple", result)
        object.__setattr__(result, "_simple", _IS_NORMAL)
        if _MEMOISED is not None:
            _memoised(e), _memoised(result)
    return memo[expr]


#: Marks a node that is its own simplification (a self-reference would make every normal node
#: part of a reference cycle, freed only by the cyclic collector).
_IS_NORMAL = True


def _simplified(e) -> Expr:
    """The memoised simplification of an already visited node (itself when none is known)."""
    hit = e._simple
    return e if hit is None or hit is _IS_NORMAL else hit


def _inside_sums(order, root) -> set:
    """Linear subterms (of the nodes in `order`) whose every use is as an operand of another
    linear term."""
    linear_uses: set = set()
    other_uses = {root}
    for e in order:
        if not isinstance(e, Term):
            continue
        linear_operands = {operand for operand, _ in _linear_step(e) or ()}
        for a in e.args:
            (linear_uses if a in linear_operands else other_uses).add(a)
    return {e for e in linear_uses - other_uses if _linear_step(e) is not None}


def _simplify_node(op, args) -> Expr:
    rule = _RULES.get(op)
    result = rule(*args) if rule else None
    return _term(op, *args) if result is None else result


def _pow2_exponent(n) -> int | None:
    return n.bit_length() - 1 if n > 0 and n & (n - 1) == 0 else None


def _const(e):
    return e.value if isinstance(e, Const) and not e.is_bool else None


def _as_div(e):
    """(x, n) when e computes x // n for a positive constant n (also as a right shift)."""
    if isinstance(e, Term) and (n := _const(e.args[1] if len(e.args) == 2 else None)) is not None:
        if e.op == "floordiv" and n > 0:
            return e.args[0], n
        if e.op == "shr" and n >= 0:
            return e.args[0], 1 << n
    return None


def _as_mod(e):
    """(x, n) when e computes x % n for a positive constant n (also as a low-bit mask)."""
    if isinstance(e, Term) and (n := _const(e.args[1] if len(e.args) == 2 else None)) is not None:
        if e.op == "mod" and n > 0:
            return e.args[0], n
        if e.op == "and" and n >= 0 and _pow2_exponent(n + 1) is not None:
            return e.args[0], n + 1
    return None


def _linear_step(e):
    """[(operand, factor)] when e is linear in its operands (+ - neg, constant factors)."""
    if not isinstance(e, Term):
        return None
    if e.op == "add":
        return [(e.args[0], 1), (e.args[1], 1)]
    if e.op == "sub":
        return [(e.args[0], 1), (e.args[1], -1)]
    if e.op == "neg":
        return [(e.args[0], -1)]
    if e.op == "mul":
        if (factor := _const(e.args[1])) is not None:
            return [(e.args[0], factor)]
        if (factor := _const(e.args[0])) is not None:
            return [(e.args[1], factor)]
    if e.op == "shl" and (k := _const(e.args[1])) is not None and k >= 0:
        return [(e.args[0], 1 << k)]
    return None


def _linear(e) -> tuple[dict, int]:
    """e as {atom: coefficient} plus a constant, looking through + - neg and constant factors.

    Coefficients flow from the root down the sum's DAG in topological order, so shared and very
    long sums cost time linear in their size."""
    if (c := _const(e)) is not None:
        return {}, c
    def linear_operands(node):
        return [operand for operand, _ in _linear_step(node) or ()]

    region = [n for n in _postorder(e, linear_operands) if _linear_step(n) is not None]
    coefficient = {e: 1}
    terms: dict = {}
    const = 0
    for node in reversed(region):
        k = coefficient.pop(node, 0)
        for operand, factor in _linear_step(node):
            if (c := _const(operand)) is not None:
                const += k * factor * c
            else:
                coefficient[operand] = coefficient.get(operand, 0) + k * factor
    for atom, k in coefficient.items():
        terms[atom] = terms.get(atom, 0) + k
    return terms, const


def linear_form(expr) -> tuple[dict, int]:
    """`expr` as ({atom: coefficient}, constant): a sum of atoms (non-linear subterms, variables)
    times integers, e.g. `2*(x >> 3) + 4*y - 8` -> ({x >> 3: 2, y: 4}, -8). Backends split an
    address this way into per-lane, uniform and constant parts.

    >>> x, y = Var("x", 0, 64), Var("y", 0, 4)
    >>> linear_form(2 * (x >> 3) + 4 * y - 8)
    ({Expr(x >> 3): 2, Var('y', 0, 4): 4}, -8)
    """
    terms, const = _linear(simplify(expr))
    return {a: k for a, k in terms.items() if k}, const


def _merge_div_mod(terms: dict) -> dict:
    """Replace c*(x % n) + c*n*(x // n) by c*x, the division identity."""
    divisions = {d: atom for atom in terms if (d := _as_div(atom)) is not None}
    if not divisions:
        return terms
    terms = dict(terms)
    for atom in list(terms):
        if atom not in terms or (m := _as_mod(atom)) is None:
            continue
        quotient = divisions.get(m)
        if quotient is None or quotient not in terms or terms[quotient] != terms[atom] * m[1]:
            continue
        coeff = terms.pop(atom)
        del terms[quotient]
        sub_terms, c = _linear(m[0])
        for a, k in sub_terms.items():
            terms[a] = terms.get(a, 0) + coeff * k
        terms[Const(1)] = terms.get(Const(1), 0) + coeff * c
    return terms


def _from_linear(terms: dict, const: int) -> Expr:
    const += terms.pop(Const(1), 0)
    # positive terms first so that sums read without a leading '-', then in reading order
    atoms = sorted(((a, k) for a, k in terms.items() if k != 0),
                   key=lambda ak: (ak[1] < 0, _reading_order(ak[0])))
    result = None
    for atom, k in atoms:
        scaled = atom if abs(k) == 1 else Term("mul", (atom, Const(abs(k))))
        if result is None:
            result = scaled if k > 0 else Term("neg", (scaled,))
        else:
            result = Term("add" if k > 0 else "sub", (result, scaled))
    if result is None:
        return Const(const)
    if const:
        result = Term("add" if const > 0 else "sub", (result, Const(abs(const))))
    return result


def _reading_order(atom) -> tuple:
    """Sort key for a sum's terms, a function of the term's structure alone (never of when or in
    which order nodes were built, so a kernel normalises, and compiles, alike in every process):
    the term's least variable by `name_order`, so that the terms of one variable sit together;
    then its height, so that `lane` precedes `lane // 32`; then its operator; then a digest of
    its whole structure, which makes the order total and therefore `simplify` canonical."""
    if atom._order is None:
        for e in _postorder(atom, _operands_missing("_order")):
            object.__setattr__(e, "_order", _structural_key(e))
            if _MEMOISED is not None:
                _memoised(e)
    return atom._order


def name_order(name: str) -> tuple:
    """Sort key of a variable name with its digit runs read as numbers (`c9` before `c10`), so
    helpers numbered from a process-wide counter (`x__9`, `x__10`) keep their creation order
    whatever the counter started at.

    >>> sorted(["c10", "c9", "c1"], key=name_order)
    ['c1', 'c9', 'c10']
    """
    parts = re.split(r"(\d+)", name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


def _structural_key(e) -> tuple:
    if isinstance(e, Var):
        lead = (0, name_order(e.name), e.name, e.lo, e.hi)
        return (lead, 0, "", hashlib.blake2b(repr(lead).encode(), digest_size=16).digest())
    if isinstance(e, Const):
        text = repr(e.value).encode()
        return ((1,), 0, "", hashlib.blake2b(text, digest_size=16).digest())
    keys = [a._order for a in e.args]
    digest = hashlib.blake2b(e.op.encode(), digest_size=16)
    for key in keys:
        digest.update(key[3])
    return (min(key[0] for key in keys), 1 + max(key[1] for key in keys), e.op, digest.digest())


def _normal_sum(e) -> Expr:
    terms, const = _linear(e)
    return _from_linear(_merge_div_mod(terms), const)


def _split_multiples(x, n) -> tuple[dict, int, Expr]:
    """x = n*q + rest with q collected from the terms whose coefficients n divides."""
    terms, const = _linear(x)
    quotient, rest = {}, {}
    for atom, k in terms.items():
        if k % n == 0:
            quotient[atom] = k // n
        else:
            rest[atom] = k
    quotient_const, rest_const = divmod(const, n)
    return quotient, quotient_const, _from_linear(rest, rest_const)


def _simplify_floordiv(x, d):
    n = _const(d)
    if n is None or n <= 0:
        return None
    if n == 1:
        return x
    quotient, q_const, rest = _split_multiples(x, n)
    lo, hi = bounds(rest)
    if lo // n == hi // n:
        return _from_linear(quotient, q_const + lo // n)
    if (inner := _as_div(rest)) is not None:
        rest_div = _simplify_floordiv(inner[0], Const(inner[1] * n))
    else:
        k = _pow2_exponent(n)
        rest_div = _term("shr", rest, k) if k is not None else _term("floordiv", rest, n)
    if not quotient and not q_const:
        return rest_div
    quotient[rest_div] = quotient.get(rest_div, 0) + 1
    return _normal_sum(_from_linear(quotient, q_const))


def _simplify_mod(x, d):
    n = _const(d)
    if n is None or n <= 0:
        return None
    if n == 1:
        return Const(0)
    _, _, rest = _split_multiples(x, n)
    lo, hi = bounds(rest)
    if lo // n == hi // n:
        return _normal_sum(rest - lo // n * n)
    if (inner := _as_mod(rest)) is not None and inner[1] % n == 0:
        return _simplify_mod(inner[0], Const(n))
    k = _pow2_exponent(n)
    return _term("and", rest, n - 1) if k is not None else _term("mod", rest, n)


def _simplify_sum(a, b, op):
    return _normal_sum(_term(op, a, b))


def _simplify_mul(a, b):
    if _const(a) is not None or _const(b) is not None:
        return _normal_sum(_term("mul", a, b))
    return None


def _simplify_shl(x, s):
    if (k := _const(s)) is not None and k >= 0:
        return _normal_sum(_term("mul", x, 1 << k))
    return None


def _simplify_shr(x, s):
    if (k := _const(s)) is not None and k >= 0:
        return _simplify_floordiv(x, Const(1 << k))
    return None


def _simplify_and(a, b):
    if _const(a) is not None and _const(b) is None:
        a, b = b, a
    if a is b:
        return a
    mask = _const(b)
    if mask == 0:
        return Const(0)
    if mask is not None and _pow2_exponent(mask + 1) is not None:
        return _simplify_mod(a, Const(mask + 1))
    return None


def _simplify_or_xor(op):
    def rule(a, b):
        if _const(a) == 0:
            return b
        if _const(b) == 0:
            return a
        if a is b:
            return a if op == "or" else Const(0)
        return None
    return rule


def _simplify_compare(op):
    decide = {"lt": _decide_lt, "le": _decide_le, "eq": _decide_eq,
              "ne": lambda x, y: _negate(_decide_eq(x, y))}[op]

    def rule(a, b):
        if a.is_bool:
            if a is b:
                return Const(op == "eq")
            return None
        if op in ("eq", "ne") and (verdict := _decide_same_residue(a, b)) is not None:
            return Const(verdict == (op == "eq"))
        difference = _normal_sum(a - b)
        verdict = decide(bounds(difference), (0, 0))
        if verdict is not None:
            return Const(verdict)
        # compare the difference against its constant so that x + 1 < y + 3 reads x - y < 2
        terms, const = _linear(difference)
        if all(k < 0 for k in terms.values()) and op in ("lt", "le"):
            return _term(op, const, _from_linear({a: -k for a, k in terms.items()}, 0))
        return _term(op, _from_linear(terms, 0), -const)
    return rule


def _simplify_minmax(op):
    def rule(a, b):
        if a is b:
            return a
        (alo, ahi), (blo, bhi) = bounds(a), bounds(b)
        if ahi <= blo:
            return a if op == "min" else b
        if bhi <= alo:
            return b if op == "min" else a
        return None
    return rule


def _simplify_ite(c, a, b):
    if a is b:
        return a
    lo, hi = bounds(c)
    if lo == hi:
        return a if lo else b
    return None


def _simplify_logic(op):
    def rule(a, b):
        unit, absorbing = (True, False) if op == "land" else (False, True)
        for x, y in ((a, b), (b, a)):
            if isinstance(x, Const) and x.value == unit:
                return y
            if isinstance(x, Const) and x.value == absorbing:
                return Const(absorbing)
        return a if a is b else None
    return rule


def _decide_same_residue(a, b) -> bool | None:
    """Whether x % n == y % n, when x - y is a constant plus multiples of n: ring-buffer slots
    of iterations a fixed distance apart, `(i + 2) % 3` against `i % 3`, are decided here. A
    solver would bit-blast the division by a non-power of two (z3 timed out on a 3-slot ring)."""
    ma, mb = _as_mod(a), _as_mod(b)
    if ma is None or mb is None or ma[1] != mb[1]:
        return None
    _, _, rest = _split_multiples(_term("sub", ma[0], mb[0]), ma[1])
    if (c := _const(rest)) is None:
        return None
    return c == 0


_FLIPPED = {"lt": ("le", True), "le": ("lt", True), "eq": ("ne", False), "ne": ("eq", False)}


def _simplify_not(a):
    if isinstance(a, Term) and a.op == "lnot":
        return a.args[0]
    if isinstance(a, Term) and a.op in _FLIPPED:
        op, swap = _FLIPPED[a.op]
        x, y = a.args
        return _simplify_node(op, [y, x] if swap else [x, y])
    return None


_RULES = {
    "add": lambda a, b: _simplify_sum(a, b, "add"),
    "sub": lambda a, b: _simplify_sum(a, b, "sub"),
    "neg": lambda a: _normal_sum(_term("neg", a)),
    "mul": _simplify_mul,
    "floordiv": _simplify_floordiv,
    "mod": _simplify_mod,
    "shl": _simplify_shl,
    "shr": _simplify_shr,
    "and": _simplify_and,
    "or": _simplify_or_xor("or"),
    "xor": _simplify_or_xor("xor"),
    "lt": _simplify_compare("lt"), "le": _simplify_compare("le"),
    "eq": _simplify_compare("eq"), "ne": _simplify_compare("ne"),
    "min": _simplify_minmax("min"), "max": _simplify_minmax("max"),
    "ite": _simplify_ite,
    "land": _simplify_logic("land"), "lor": _simplify_logic("lor"),
    "lnot": _simplify_not,
}

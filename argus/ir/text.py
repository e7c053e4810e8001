"""The textual form of the tile IR: `print_kernel` writes it, `parse_kernel` reads it back.

One op per line, nested blocks in braces, tag assertions on `assert` lines after their op.
Expressions are printed by `ir.expr` and read back through Python's own expression grammar.
"""

from __future__ import annotations

import ast
import hashlib
import re

import attrs

from argus.ir import fields as F
from argus.ir import ops as O
from argus.ir.expr import Expr, ExprSyntaxError, Var, as_expr, parse
from argus.ir.types import (
    LANES,
    AddressMap,
    GlobalType,
    IRError,
    LdsType,
    RegType,
    SourceLoc,
    ThreadLayout,
    Value,
    coord_vars,
)

INDENT = "  "


# ---------------------------------------------------------------------------------------------
# printing

def expr_text(e) -> str:
    """An expression as the IR text spells it: `str()`, the one printer, which `parse_expr`
    (the one reader, `ir.expr.parse`) reads back."""
    return str(as_expr(e))


def print_kernel(kernel: O.Kernel, notes=None) -> str:
    """The kernel's text; `notes(op, line)`, when given, returns lines printed under each op
    (`line` is the op's own text; the notes follow its assertions, or a loop's or branch's
    header). Notes are not IR and do not parse back: they are for diagnostics."""
    lines = [f"kernel {kernel.name} @{kernel.loc}"]
    lines += [f"{INDENT}size {_decl(v)}" for v in kernel.sizes]
    for arg in kernel.args:
        text = f"{arg}: {type_str(arg.type)}" if isinstance(arg, Value) else _decl(arg)
        lines.append(f"{INDENT}arg {text}")
    lines.append(f"{INDENT}grid ({_exprs(kernel.grid)})")
    lines.append(f"{INDENT}waves {kernel.waves}")
    lines += [f"{INDENT}assume {expr_text(a)}" for a in kernel.assumes]
    lines += [f"{INDENT}hint {h!r}" for h in kernel.hints]
    lines.append("{")
    _print_block(kernel.body, 1, lines, notes)
    lines.append("}")
    return "\n".join(lines) + "\n"


def ir_digest(kernel: O.Kernel) -> str:
    """The content hash of a kernel: SHA-256 of its printed text. Two kernels with one digest
    are one kernel to every stage, so the road caches each stage's result under it."""
    return hashlib.sha256(print_kernel(kernel).encode()).hexdigest()


def _decl(var: Var) -> str:
    return f"{var.name} in [{var.lo}, {var.hi})"


def type_str(t) -> str:
    if isinstance(t, GlobalType):
        return f"global<{t.dtype}>[{_exprs(t.shape)}]"
    if isinstance(t, LdsType):
        return f"lds<{t.dtype}>[{t.size}]"
    layout = t.layout
    return (f"reg<{t.dtype}>[{', '.join(map(str, t.shape))}] "
            f"{{wave {layout.waves}, slot {layout.slots} -> {_exprs(layout.coords)}}}")


def _exprs(items) -> str:
    return ", ".join(expr_text(e) for e in items)


def _addr(addr: AddressMap) -> str:
    return f"{{{', '.join(map(str, addr.shape))} -> {expr_text(addr.offset)}}}"


def _values(values) -> str:
    return ", ".join(map(str, values))


def _tags(tags) -> str:
    return "{" + ", ".join(f"{n} = {expr_text(e)}" for n, e in tags) + "}"


def _op_text(op) -> str:
    """The generic form of an op without results, type and location: the mnemonic, then each
    declared field not at its default as `name=value`, in declaration order."""
    parts = [f"{field.name}={_field_text(getattr(op, field.name), field, decl)}"
             for field, decl in _shown_fields(op)]
    return f"{op.mnemonic} {', '.join(parts)}".rstrip()


def _shown_fields(obj):
    for field, decl in F.declared(type(obj)):
        if decl.kind in (F.Kind.RESULT, F.Kind.ASSERTS):
            continue
        if field.default is not attrs.NOTHING and getattr(obj, field.name) == field.default:
            continue
        yield field, decl


def _field_text(value, field, decl: F.Decl) -> str:
    match decl.kind, decl.shape:
        case F.Kind.OPERAND, F.Shape.ONE:
            return str(value)
        case F.Kind.OPERAND, F.Shape.MANY:
            return f"({_values(value)})"
        case F.Kind.EXPR, F.Shape.ONE:
            return expr_text(value)
        case F.Kind.EXPR, F.Shape.MANY:
            return f"[{_exprs(value)}]"
        case F.Kind.EXPR, F.Shape.NAMED:
            return _tags(value)
        case F.Kind.BINDS, _:
            return _decl(value)
        case F.Kind.RECORD, _:
            inner = ", ".join(f"{f.name}={_field_text(getattr(value, f.name), f, d)}"
                              for f, d in _shown_fields(value))
            return f"{{{inner}}}"
        case F.Kind.ATTR, _:
            return _ATTR_FORMS.get(field.type, (repr, None))[0](value)
    raise IRError(f"a {decl.kind.value} field ({field.name}) has no generic text form; give "
                  "the op a custom form in argus/ir/text.py, as `for` and `if` have")


def _print_block(block: O.Block, depth: int, lines: list[str], notes=None):
    pad = INDENT * depth
    for op in block.ops:
        first = len(lines)
        results = f"{_values(op.results)} = " if op.results else ""
        if isinstance(op, O.For):
            carried = ", ".join(f"{a} = {i}" for a, i in zip(op.body.args, op.inits))
            hints = ", ".join(repr(h) for h in op.hints)
            lines.append(f"{pad}{results}for {_decl(op.iv)} from {expr_text(op.start)} to "
                         f"{expr_text(op.stop)} step "
                         f"{op.step} iter({carried}) stages {op.stages} unroll {op.unroll} "
                         f"hints ({hints}) @{op.loc} {{")
            _print_block(op.body, depth + 1, lines, notes)
            lines.append(f"{pad}}}")
        elif isinstance(op, O.If):
            lines.append(f"{pad}{results}if {expr_text(op.cond)} @{op.loc} {{")
            _print_block(op.then, depth + 1, lines, notes)
            lines.append(f"{pad}}} else {{")
            _print_block(op.orelse, depth + 1, lines, notes)
            lines.append(f"{pad}}}")
        else:
            typed = f" : {', '.join(type_str(r.type) for r in op.results)}" if op.results else ""
            lines.append(f"{pad}{results}{_op_text(op)}{typed} @{op.loc}")
        for assertion in F.of_kind(op, F.Kind.ASSERTS):
            lines.append(f"{pad}{INDENT}assert {assertion.message!r} "
                         f"({expr_text(assertion.predicate)}) "
                         f"@{assertion.loc}")
        if notes is not None:
            # under the op's own line(s): for a loop or branch, under its header
            at = first + 1 if op.blocks else len(lines)
            lines[at:at] = [pad + line for line in notes(op, lines[first].strip())]


# ---------------------------------------------------------------------------------------------
# parsing


class ParseError(IRError):
    """The IR text does not follow the grammar; names the line."""


def parse_expr(text: str, scope: dict[str, Var]) -> Expr:
    """Read an expression printed by `expr_text`, resolving names in `scope` and role
    variables (A_k, V_row) of tag assertions."""
    try:
        return parse(text, scope, unknown=O.role_var_named)
    except ExprSyntaxError as error:
        raise ParseError(str(error)) from None


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split at `sep` outside (), [], {} and quotes."""
    parts, depth, current, quote = [], 0, [], None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _matching(text: str, start: int) -> int:
    """Index of the bracket closing the one at `start`."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    opener, depth = text[start], 0
    for i in range(start, len(text)):
        if text[i] == opener:
            depth += 1
        elif text[i] == pairs[opener]:
            depth -= 1
            if depth == 0:
                return i
    raise ParseError(f"unbalanced {opener!r} in {text!r}")


class _Cursor:
    """Reads one line left to right."""

    def __init__(self, text: str, lineno: int):
        self.text, self.pos, self.lineno = text, 0, lineno

    def error(self, what: str) -> ParseError:
        return ParseError(f"IR line {self.lineno}: expected {what} at "
                          f"{self.text[self.pos:self.pos + 30]!r} in {self.text.strip()!r}")

    def skip(self):
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1

    def peek(self, literal: str) -> bool:
        self.skip()
        return self.text.startswith(literal, self.pos)

    def expect(self, literal: str):
        if not self.peek(literal):
            raise self.error(repr(literal))
        self.pos += len(literal)

    def word(self) -> str:
        self.skip()
        match = re.compile(r"[A-Za-z0-9_.%\-+]+").match(self.text, self.pos)
        if not match:
            raise self.error("a word")
        self.pos = match.end()
        return match.group()

    def group(self, opener: str) -> str:
        """The text inside the bracket group starting here."""
        self.skip()
        if not self.text.startswith(opener, self.pos):
            raise self.error(repr(opener))
        end = _matching(self.text, self.pos)
        inner = self.text[self.pos + 1:end]
        self.pos = end + 1
        return inner

    def quoted(self) -> str:
        self.skip()
        match = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"").match(self.text, self.pos)
        if not match:
            raise self.error("a quoted string")
        self.pos = match.end()
        return ast.literal_eval(match.group())

    def until(self, literal: str) -> str:
        self.skip()
        end = self.text.find(literal, self.pos)
        if end < 0:
            raise self.error(repr(literal))
        piece = self.text[self.pos:end]
        self.pos = end
        return piece.strip()

    def loc(self) -> SourceLoc:
        """A location ends its line (before a block's opening brace); paths may hold spaces."""
        self.expect("@")
        match = re.compile(r"(.+?:\d+:\d+)(?= \{$|$)").match(self.text, self.pos)
        if not match:
            raise self.error("a location FILE:LINE:COL")
        self.pos = match.end()
        return _parse_loc(match.group(1))


def _split_loc(line: str) -> tuple[str, str]:
    """(text, location) of a line ending in ` @FILE:LINE:COL` (the file may hold ' @')."""
    start = line.find(" @")
    while start >= 0:
        if re.fullmatch(r".+:\d+:\d+", line[start + 2:]):
            return line[:start], line[start + 2:]
        start = line.find(" @", start + 1)
    raise ParseError(f"expected a location ' @FILE:LINE:COL' at the end of {line!r}")


def _parse_loc(text: str) -> SourceLoc:
    file, line, col = text.rsplit(":", 2)
    return SourceLoc(file, int(line), int(col))


def _parse_decl(text: str) -> Var:
    match = re.fullmatch(r"\s*([A-Za-z_]\w*) in \[(-?\d+), (-?\d+)\)\s*", text)
    if not match:
        raise ParseError(f"expected 'name in [lo, hi)', got {text!r}")
    return Var(match.group(1), int(match.group(2)), int(match.group(3)))


class _Parser:
    def __init__(self, text: str):
        self.lines = [(n + 1, line) for n, line in enumerate(text.splitlines()) if line.strip()]
        self.index = 0
        self.values: dict[str, Value] = {}
        self.closing = ""  # the brace line that ended the last block ("}" or "} else {")

    def next_line(self) -> tuple[int, str]:
        if self.index >= len(self.lines):
            raise ParseError("unexpected end of IR text (a '}' is missing)")
        item = self.lines[self.index]
        self.index += 1
        return item

    def peek_line(self) -> str:
        return self.lines[self.index][1].strip() if self.index < len(self.lines) else ""

    # types and small pieces

    def type(self, text: str, scope: dict) -> GlobalType | RegType | LdsType:
        text = text.strip()
        match = re.match(r"(global|reg|lds)<(\w+)>\[([^\]]*)\]\s*(.*)$", text)
        if not match:
            raise ParseError(f"cannot read type {text!r}")
        kind, dtype, dims, rest = match.groups()
        if kind == "global":
            return GlobalType(dtype, tuple(parse_expr(d, scope) for d in split_top(dims)))
        if kind == "lds":
            return LdsType(dtype, int(dims))
        shape = tuple(int(d) for d in split_top(dims))
        return RegType(dtype, shape, self.layout(rest))

    def layout(self, text: str) -> ThreadLayout:
        match = re.fullmatch(r"\{wave (\d+), slot (\d+) -> (.*)\}", text.strip())
        if not match:
            raise ParseError(f"cannot read thread layout {text!r}")
        waves, slots = int(match.group(1)), int(match.group(2))
        scope = {"wave": Var("wave", 0, waves), "lane": Var("lane", 0, LANES),
                 "slot": Var("slot", 0, slots)}
        coords = tuple(parse_expr(c, scope) for c in split_top(match.group(3)))
        return ThreadLayout(waves, slots, coords)

    def value(self, name: str) -> Value:
        name = name.strip()
        if not name.startswith("%") or name[1:] not in self.values:
            raise ParseError(f"unknown value {name!r}")
        return self.values[name[1:]]

    def define(self, names: list[str], types: list) -> tuple[Value, ...]:
        values = []
        for name, t in zip(names, types):
            value = Value(name.strip().lstrip("%"), t)
            self.values[value.name] = value
            values.append(value)
        return tuple(values)

    def tags(self, inner: str, scope: dict) -> tuple[tuple[str, Expr], ...]:
        pairs = []
        for item in split_top(inner):
            name, _, expr = item.partition(" = ")
            pairs.append((name.strip(), parse_expr(expr, scope)))
        return tuple(pairs)

    # kernel

    def kernel(self) -> O.Kernel:
        _, head = self.next_line()
        match = re.fullmatch(r"kernel (\w+) @(.+:\d+:\d+)", head.strip())
        if not match:
            raise ParseError(f"IR must start with 'kernel NAME @LOC', got {head!r}")
        name, loc = match.group(1), _parse_loc(match.group(2))
        sizes, args, grid, waves, assumes, hints = [], [], (), 1, [], []
        scope: dict[str, Var] = {}
        while (line := self.next_line()[1].strip()) != "{":
            keyword, _, rest = line.partition(" ")
            if keyword == "size":
                var = _parse_decl(rest)
                sizes.append(var)
                scope[var.name] = var
            elif keyword == "arg" and rest.startswith("%"):
                arg_name, _, arg_type = rest.partition(": ")
                args.extend(self.define([arg_name], [self.type(arg_type, scope)]))
            elif keyword == "arg":
                var = _parse_decl(rest)
                args.append(var)
                scope[var.name] = var
            elif keyword == "grid":
                grid = tuple(parse_expr(e, scope) for e in split_top(rest.strip()[1:-1]))
            elif keyword == "waves":
                waves = int(rest)
                self.waves = waves
            elif keyword == "assume":
                assumes.append(parse_expr(rest, scope))
            elif keyword == "hint":
                hints.append(ast.literal_eval(rest))
            else:
                raise ParseError(f"unknown kernel header line {line!r}")
        body = self.block((), scope)
        return O.Kernel(name, tuple(args), tuple(sizes), grid, waves, tuple(assumes), body, loc,
                        tuple(hints))

    def block(self, args: tuple[Value, ...], scope: dict) -> O.Block:
        """Ops up to the closing brace (consumed, and left for `} else {` to inspect)."""
        scope = dict(scope)
        ops: list[O.Op] = []
        while True:
            lineno, line = self.next_line()
            text = line.strip()
            if text.startswith("}"):
                self.closing = text
                return O.Block(args, tuple(ops))
            if text.startswith("assert "):
                field = F.field_of(type(ops[-1]), F.Kind.ASSERTS) if ops else None
                if field is None:
                    raise ParseError(f"IR line {lineno}: assert follows no op that takes one")
                held = getattr(ops[-1], field)
                ops[-1] = attrs.evolve(ops[-1], **{
                    field: held + (self.assertion(text, lineno, scope),)})
                continue
            ops.append(self.op(text, lineno, scope))

    def assertion(self, text: str, lineno: int, scope: dict) -> O.TagAssertion:
        cursor = _Cursor(text, lineno)
        cursor.expect("assert")
        message = cursor.quoted()
        predicate = parse_expr(cursor.group("("), scope)
        return O.TagAssertion(predicate, message, cursor.loc())

    def op(self, text: str, lineno: int, scope: dict) -> O.Op:
        results: list[str] = []
        head = text
        eq = re.match(r"((?:%[\w.]+(?:, )?)+) = ", text)
        if eq:
            results = split_top(eq.group(1))
            head = text[eq.end():]
        cursor = _Cursor(head, lineno)
        mnemonic = cursor.word()
        if mnemonic == "for":
            return self.for_op(cursor, results, scope)
        if mnemonic == "if":
            return self.if_op(cursor, results, scope)
        cls = O.op_classes().get(mnemonic)
        if cls is None:
            raise ParseError(f"IR line {lineno}: unknown op {mnemonic!r}")
        body, loc_text = _split_loc(head)
        types = []
        if results:
            body, _, typed = body.rpartition(" : ")
            types = [self.type(t, scope) for t in split_top(typed)]
        where = f"IR line {lineno}: {mnemonic}"
        values = self.fields(cls, body[len(mnemonic):], scope, where)
        slots = [d.shape for _, d in F.declared(cls) if d.kind is F.Kind.RESULT]
        if len(types) != len(results) or (F.Shape.MANY not in slots and len(slots) != len(results)):
            raise ParseError(f"{where}: {len(results)} result(s) and {len(types)} type(s); the "
                             f"op defines {len(slots)}")
        defined = iter(self.define(results, types))
        for field, decl in F.declared(cls):
            if decl.kind is F.Kind.RESULT:
                count = 1 if decl.shape is F.Shape.ONE else len(types)
                got = tuple(next(defined) for _ in range(count))
                values[field.name] = got[0] if decl.shape is F.Shape.ONE else got
        op = _construct(cls, values, _parse_loc(loc_text.strip()), where)
        if not op.blocks:
            scope.update({var.name: var for var in op.binds})
        return op

    def fields(self, cls, text: str, scope: dict, where: str) -> dict:
        """The declared fields written `name=value, ...` in `text`, read by their kinds:
        operands and records first, so that formulas over a tile's coordinates can see it."""
        written = {}
        for item in split_top(text):
            name, sep, value = item.partition("=")
            if not sep:
                raise ParseError(f"{where}: expected 'field=value', got {item!r}")
            written[name.strip()] = value.strip()
        decls = {field.name: (field, decl) for field, decl in F.declared(cls)
                 if decl.kind not in (F.Kind.RESULT, F.Kind.ASSERTS)}
        unknown = sorted(set(written) - set(decls))
        if unknown:
            raise ParseError(f"{where}: no field(s) {unknown}; the fields are {sorted(decls)}")
        first = (F.Kind.OPERAND, F.Kind.RECORD)
        order = sorted(written, key=lambda n: decls[n][1].kind not in first)
        values: dict = {}
        for name in order:
            field, decl = decls[name]
            values[name] = self.field(written[name], field, decl, values, scope, where)
        return values

    def field(self, text: str, field, decl: F.Decl, values: dict, scope: dict, where: str):
        where = f"{where}: field {field.name}"
        match decl.kind, decl.shape:
            case F.Kind.OPERAND, F.Shape.ONE:
                return self.value(text)
            case F.Kind.OPERAND, F.Shape.MANY:
                return tuple(self.value(v) for v in split_top(_inside(text, "(", where)))
            case F.Kind.EXPR, shape:
                if decl.coords == F.THREAD:
                    scope = {**scope, "wave": Var("wave", 0, getattr(self, "waves", 1)),
                             "lane": Var("lane", 0, LANES)}
                elif decl.coords is not None:
                    scope = {**scope, **{v.name: v for v in _coords(values[decl.coords])}}
                if shape is F.Shape.ONE:
                    return parse_expr(text, scope)
                if shape is F.Shape.MANY:
                    return tuple(parse_expr(e, scope) for e in split_top(_inside(text, "[", where)))
                return self.tags(_inside(text, "{", where), scope)
            case F.Kind.BINDS, _:
                return _parse_decl(text)
            case F.Kind.RECORD, _:
                inner = self.fields(decl.record, _inside(text, "{", where), scope, where)
                return _construct(decl.record, inner, None, where)
            case F.Kind.ATTR, _:
                read = _ATTR_FORMS.get(field.type, (None, ast.literal_eval))[1]
                try:
                    value = read(text)
                except (ValueError, SyntaxError) as error:
                    raise ParseError(f"{where}: cannot read {text!r} ({error})") from None
                if not _attr_type_ok(value, field.type):
                    raise ParseError(f"{where}: {text!r} is not a {field.type}")
                return value
        raise ParseError(f"{where}: a {decl.kind.value} field has no generic text form")

    def for_op(self, cursor: _Cursor, results: list[str], scope: dict) -> O.For:
        iv = _parse_decl(cursor.until(" from "))
        cursor.expect("from")
        start = parse_expr(cursor.until(" to "), scope)
        cursor.expect("to")
        stop = parse_expr(cursor.until(" step "), scope)
        cursor.expect("step")
        step = int(cursor.word())
        cursor.expect("iter")
        pairs = [split_top(p, "=") for p in split_top(cursor.group("("))]
        inits = tuple(self.value(init) for _, init in pairs)
        cursor.expect("stages")
        stages = int(cursor.word())
        cursor.expect("unroll")
        unroll = int(cursor.word())
        cursor.expect("hints")
        hints = tuple(ast.literal_eval(h) for h in split_top(cursor.group("(")))
        loc = cursor.loc()
        body_args = self.define([a for a, _ in pairs], [v.type for v in inits])
        body = self.block(body_args, {**scope, iv.name: iv})
        result_values = self.define(results, [v.type for v in inits])
        return O.For(iv, start, stop, step, inits, body, result_values, stages, unroll, hints,
                     loc=loc)

    def if_op(self, cursor: _Cursor, results: list[str], scope: dict) -> O.If:
        cond = parse_expr(cursor.until(" @"), scope)
        loc = cursor.loc()
        then = self.block((), scope)
        if self.closing != "} else {":
            raise ParseError(f"'if' at {loc} needs '}} else {{', got {self.closing!r}")
        orelse = self.block((), scope)
        last = then.ops[-1] if then.ops else None
        types = [v.type for v in last.values] if isinstance(last, O.Yield) else []
        return O.If(cond, then, orelse, self.define(results, types), loc=loc)


def _inside(text: str, opener: str, where: str) -> str:
    """The text inside a bracket group that makes up all of `text`."""
    text = text.strip()
    if not text.startswith(opener) or _matching(text, 0) != len(text) - 1:
        raise ParseError(f"{where}: expected {opener}...{_CLOSER[opener]}, got {text!r}")
    return text[1:-1]


_CLOSER = {"(": ")", "[": "]", "{": "}"}


def _coords(value: Value) -> tuple[Var, ...]:
    """The coordinate variables c0, c1, ... of a register tile or a global tensor."""
    if isinstance(value.type, GlobalType):
        return O.global_coord_vars(len(value.type.shape))
    return coord_vars(value.type.shape)


def _construct(cls, values: dict, loc, where: str):
    missing = [f.name for f in attrs.fields(cls) if f.default is attrs.NOTHING
               and f.name not in values and f.name != F.LOC]
    if missing:
        raise ParseError(f"{where}: missing field(s) {missing}")
    try:
        return cls(**values) if loc is None else cls(**values, loc=loc)
    except (TypeError, ValueError) as error:
        raise ParseError(f"{where}: {error}") from None


#: Python literal attribute types by annotation, checked after reading (others are read by
#: `_ATTR_FORMS` or checked by the op's own `check`).
_LITERAL_TYPES = {"int": int, "str": str, "bool": bool, "tuple[int, ...]": (tuple, int),
                  "tuple[str, ...]": (tuple, str)}


def _attr_type_ok(value, annotation: str) -> bool:
    expected = _LITERAL_TYPES.get(annotation)
    if expected is None:
        return True
    if isinstance(expected, tuple):
        container, item = expected
        return isinstance(value, container) and all(isinstance(v, item) for v in value)
    return isinstance(value, expected)


def _parse_addr(text: str) -> AddressMap:
    dims, _, offset = _inside(text, "{", "address map").partition("->")
    shape = tuple(int(d) for d in split_top(dims))
    return AddressMap(shape, parse_expr(offset, {v.name: v for v in coord_vars(shape)}))


def _parse_reg_type(text: str) -> RegType:
    found = _Parser("").type(text, {})
    if not isinstance(found, RegType):
        raise ValueError(f"{text!r} is not a register tile type")
    return found


#: How attribute fields of a type other than Python literals are written and read, keyed by
#: the field's annotation.
_ATTR_FORMS = {"AddressMap": (_addr, _parse_addr), "float": (repr, float),
               "RegType": (type_str, _parse_reg_type)}


def parse_kernel(text: str) -> O.Kernel:
    """Read IR text written by `print_kernel`; the result is verified."""
    parser = _Parser(text)
    kernel = parser.kernel()
    if parser.index != len(parser.lines):
        extra = parser.lines[parser.index]
        raise ParseError(f"IR line {extra[0]}: text after the kernel's closing brace")
    return kernel.verify()

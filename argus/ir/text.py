"""The textual form of the tile IR: `print_kernel` writes it, `parse_kernel` reads it back.

One op per line, nested blocks in braces, tag assertions on `assert` lines after their op.
Expressions are printed by `ir.expr` and read back through Python's own expression grammar.
"""

from __future__ import annotations

import ast
import re

import attrs

from argus.ir import ops as O
from argus.ir.expr import And, Expr, Not, Or, Term, Var, as_expr, ite, max_, min_
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

# Python precedence of each expression operator, so that the text parses back with `ast`
_PREC = {"lt": 10, "le": 10, "eq": 10, "ne": 10, "or": 20, "lor": 20, "xor": 30, "and": 40,
         "land": 40, "shl": 50, "shr": 50, "add": 60, "sub": 60, "mul": 70, "floordiv": 70,
         "mod": 70, "neg": 90, "lnot": 90}
_SYMBOL = {"lt": "<", "le": "<=", "eq": "==", "ne": "!=", "or": "|", "lor": "|", "xor": "^",
           "and": "&", "land": "&", "shl": "<<", "shr": ">>", "add": "+", "sub": "-", "mul": "*",
           "floordiv": "//", "mod": "%", "neg": "-", "lnot": "~"}
_CALL = {"min": "min", "max": "max", "ite": "ite"}


def expr_text(e) -> str:
    """An expression in Python syntax (the IR's own spelling, independent of `str(expr)`)."""
    return _expr_text(as_expr(e), 0, False)


def _expr_text(e, parent: int, right: bool) -> str:
    if not isinstance(e, Term):
        return str(e.name if isinstance(e, Var) else e.value)
    if e.op in _CALL:
        return f"{_CALL[e.op]}({', '.join(_expr_text(a, 0, False) for a in e.args)})"
    prec = _PREC[e.op]
    if len(e.args) == 1:
        text = f"{_SYMBOL[e.op]}{_expr_text(e.args[0], prec, True)}"
    else:
        # comparisons do not chain in Python the way terms nest, so they always group
        left = _expr_text(e.args[0], prec + (1 if prec == 10 else 0), False)
        text = f"{left} {_SYMBOL[e.op]} {_expr_text(e.args[1], prec, True)}"
    grouped = prec < parent or (right and prec == parent) or (prec == 10 and parent)
    return f"({text})" if grouped else text


def print_kernel(kernel: O.Kernel) -> str:
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
    _print_block(kernel.body, 1, lines)
    lines.append("}")
    return "\n".join(lines) + "\n"


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


def _origin(origin) -> str:
    return f"[{_exprs(origin)}]"


def _op_text(op) -> str:
    """The op's line without results, type and location."""
    match op:
        case O.ProgramId():
            return f"program_id {_decl(op.var)} axis {op.axis}"
        case O.TagDef():
            return f"tag {op.tensor} {_tags(op.tags)}"
        case O.TagTile():
            return f"tag_tile {op.x} {_tags(op.tags)}"
        case O.ScalarLoad():
            bounds = f" bounds ({_exprs(op.bounds)})" if op.bounds else ""
            return f"scalar.load {_decl(op.var)} from {op.tensor}{_origin(op.index)}{bounds}"
        case O.Distinct():
            return f"distinct {op.tensor} on [{expr_text(op.lo)}, {expr_text(op.hi)})"
        case O.GlobalLoad():
            return (f"global.load {op.tensor}{_origin(op.origin)} axes {_tuple(op.axes)}"
                    f"{_indirect(op)}")
        case O.GlobalStore():
            return (f"{op.mnemonic} {op.tensor}{_origin(op.origin)} axes {_tuple(op.axes)}, "
                    f"{op.value}{_indirect(op)}")
        case O.LdsAlloc():
            return "lds.alloc"
        case O.LdsStore():
            return f"lds.store {op.buffer} {_addr(op.addr)} {_origin(op.origin)}, {op.value}"
        case O.LdsLoad():
            return f"lds.load {op.buffer} {_addr(op.addr)} {_origin(op.origin)}"
        case O.Mfma():
            return f"mfma {op.instr} {_values((op.a, op.b, op.c))}"
        case O.Full():
            return f"full {op.value!r}"
        case O.Unary():
            return f"unary {op.fn} {op.x}"
        case O.Binary():
            return f"binary {op.fn} {op.x}, {op.y}"
        case O.Cast():
            return f"cast {op.x}"
        case O.Mask():
            return f"mask {op.x} keep ({expr_text(op.keep)}) fill {op.fill!r}"
        case O.Reduce():
            return f"reduce {op.fn} {op.x} axis {op.axis} drop ({', '.join(op.drop)})"
        case O.Broadcast():
            return f"broadcast {op.x} axis {op.axis}"
        case O.SlotSlice():
            return f"slot_slice {op.x} start {op.start}"
        case O.Barrier():
            return "barrier"
        case O.Yield():
            return f"yield {_values(op.values)}".rstrip()
    raise IRError(f"cannot print {type(op).__name__}")


def _indirect(op) -> str:
    text = ""
    if op.gather is not None:
        g = op.gather
        text += (f" gather({g.index}[{expr_text(g.origin)}] tile_axis {g.tile_axis} "
                 f"axis {g.axis})")
    return text + (" guard" if op.guard else "")


def _tuple(items) -> str:
    return "(" + ", ".join(map(str, items)) + ")"


def _print_block(block: O.Block, depth: int, lines: list[str]):
    pad = INDENT * depth
    for op in block.ops:
        results = f"{_values(op.results)} = " if op.results else ""
        if isinstance(op, O.For):
            carried = ", ".join(f"{a} = {i}" for a, i in zip(op.body.args, op.inits))
            hints = ", ".join(repr(h) for h in op.hints)
            lines.append(f"{pad}{results}for {_decl(op.iv)} from {expr_text(op.start)} to "
                         f"{expr_text(op.stop)} step "
                         f"{op.step} iter({carried}) stages {op.stages} unroll {op.unroll} "
                         f"hints ({hints}) @{op.loc} {{")
            _print_block(op.body, depth + 1, lines)
            lines.append(f"{pad}}}")
        elif isinstance(op, O.If):
            lines.append(f"{pad}{results}if {expr_text(op.cond)} @{op.loc} {{")
            _print_block(op.then, depth + 1, lines)
            lines.append(f"{pad}}} else {{")
            _print_block(op.orelse, depth + 1, lines)
            lines.append(f"{pad}}}")
        else:
            typed = f" : {type_str(op.result.type)}" if getattr(op, "result", None) else ""
            lines.append(f"{pad}{results}{_op_text(op)}{typed} @{op.loc}")
        for assertion in getattr(op, "asserts", ()):
            lines.append(f"{pad}{INDENT}assert {assertion.message!r} "
                         f"({expr_text(assertion.predicate)}) "
                         f"@{assertion.loc}")


# ---------------------------------------------------------------------------------------------
# parsing


class ParseError(IRError):
    """The IR text does not follow the grammar; names the line."""


_CALLS = {"ite": ite, "min": min_, "max": max_, "And": And, "Or": Or, "Not": Not}
_BINOPS = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.BitXor: lambda a, b: a ^ b, ast.BitAnd: lambda a, b: a & b,
    ast.BitOr: lambda a, b: a | b, ast.LShift: lambda a, b: a << b,
    ast.RShift: lambda a, b: a >> b,
}
_COMPARE = {
    ast.Lt: lambda a, b: as_expr(a) < b, ast.LtE: lambda a, b: as_expr(a) <= b,
    ast.Gt: lambda a, b: as_expr(a) > b, ast.GtE: lambda a, b: as_expr(a) >= b,
    ast.Eq: lambda a, b: as_expr(a).eq(b), ast.NotEq: lambda a, b: as_expr(a).ne(b),
}
_ROLE_VAR = re.compile(r"^[A-Z]_[A-Za-z0-9]+$")


def parse_expr(text: str, scope: dict[str, Var]) -> Expr:
    """Read an expression printed by `ir.expr`, resolving names in `scope`."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as error:
        raise ParseError(f"cannot read expression {text!r}: {error.msg}") from None
    return as_expr(_build(tree, scope, text))


def _build(node, scope, text):
    match node:
        case ast.Constant(value=bool() | int() as value):
            return value
        case ast.Name(id=name):
            if name in scope:
                return scope[name]
            if _ROLE_VAR.match(name):
                role, tag = O.split_role_var(name)
                return O.role_var(role, tag)
            raise ParseError(f"unknown name {name!r} in {text!r}; known: {sorted(scope)}")
        case ast.BinOp(op=op, left=left, right=right) if type(op) in _BINOPS:
            return _BINOPS[type(op)](as_expr(_build(left, scope, text)),
                                     _build(right, scope, text))
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            inner = _build(operand, scope, text)
            return -inner
        case ast.UnaryOp(op=ast.Invert(), operand=operand):
            return ~as_expr(_build(operand, scope, text))
        case ast.Compare(left=left, ops=[op], comparators=[right]):
            return _COMPARE[type(op)](_build(left, scope, text), _build(right, scope, text))
        case ast.Call(func=ast.Name(id=fn), args=args) if fn in _CALLS:
            return _CALLS[fn](*(_build(a, scope, text) for a in args))
    raise ParseError(f"unsupported syntax {ast.dump(node)} in expression {text!r}")


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

    def addr(self, inner: str) -> AddressMap:
        dims, _, offset = inner.partition("->")
        shape = tuple(int(d) for d in split_top(dims))
        scope = {v.name: v for v in coord_vars(shape)}
        return AddressMap(shape, parse_expr(offset, scope))

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
                if not ops or not hasattr(ops[-1], "asserts"):
                    raise ParseError(f"IR line {lineno}: assert follows no op that takes one")
                ops[-1] = _with_assertion(ops[-1], self.assertion(text, lineno, scope))
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
        if " : " in head and results:
            body, _, typed = head.rpartition(" : ")
            type_text, loc_text = _split_loc(typed)
            result_type = self.type(type_text, scope)
            cursor = _Cursor(body, lineno)
            cursor.word()
        else:
            body, loc_text = _split_loc(head)
            cursor = _Cursor(body, lineno)
            cursor.word()
            result_type = None
        loc = _parse_loc(loc_text.strip())
        make = _OP_READERS.get(mnemonic)
        if make is None:
            raise ParseError(f"IR line {lineno}: unknown op {mnemonic!r}")
        result = self.define(results, [result_type])[0] if results else None
        return make(self, cursor, result, scope, loc)

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
        return O.For(iv, start, stop, step, inits, body, result_values, loc, stages, unroll, hints)

    def if_op(self, cursor: _Cursor, results: list[str], scope: dict) -> O.If:
        cond = parse_expr(cursor.until(" @"), scope)
        loc = cursor.loc()
        then = self.block((), scope)
        if self.closing != "} else {":
            raise ParseError(f"'if' at {loc} needs '}} else {{', got {self.closing!r}")
        orelse = self.block((), scope)
        last = then.ops[-1] if then.ops else None
        types = [v.type for v in last.values] if isinstance(last, O.Yield) else []
        return O.If(cond, then, orelse, self.define(results, types), loc)


def _with_assertion(op, assertion):
    return attrs.evolve(op, asserts=op.asserts + (assertion,))


def _operand_list(parser, text):
    return [parser.value(v) for v in split_top(text)]


def _read_program_id(p, c, result, scope, loc):
    var = _parse_decl(c.until(" axis "))
    c.expect("axis")
    scope[var.name] = var
    return O.ProgramId(var, int(c.word()), loc)


def _read_tag(p, c, result, scope, loc):
    tensor = p.value(c.word())
    rank = len(tensor.type.shape)
    inner = {**scope, **{v.name: v for v in O.global_coord_vars(rank)}}
    return O.TagDef(tensor, p.tags(c.group("{"), inner), loc)


def _read_tag_tile(p, c, result, scope, loc):
    x = p.value(c.word())
    inner = {**scope, **{v.name: v for v in coord_vars(x.type.shape)}}
    return O.TagTile(result, x, p.tags(c.group("{"), inner), loc)


def _global_access(p, c, scope):
    c.skip()
    name_end = c.text.index("[", c.pos)
    tensor = p.value(c.text[c.pos:name_end])
    c.pos = name_end
    origin = tuple(parse_expr(e, scope) for e in split_top(c.group("[")))
    c.expect("axes")
    axes = tuple(int(a) for a in split_top(c.group("(")))
    return tensor, origin, axes


def _read_indirect(p, c, scope) -> dict:
    fields = {}
    if c.peek("gather"):
        c.expect("gather")
        inner = c.group("(")
        match = re.fullmatch(r"(%\w+)\[(.*)\] tile_axis (\d+) axis (\d+)", inner.strip())
        if not match:
            raise ParseError(f"cannot read gather({inner})")
        fields["gather"] = O.Gather(p.value(match.group(1)), parse_expr(match.group(2), scope),
                                    int(match.group(3)), int(match.group(4)))
    if c.peek("guard"):
        c.expect("guard")
        fields["guard"] = True
    return fields


def _read_global_load(p, c, result, scope, loc):
    tensor, origin, axes = _global_access(p, c, scope)
    return O.GlobalLoad(result, tensor, origin, axes, loc, **_read_indirect(p, c, scope))


def _read_global_store(kind):
    def read(p, c, result, scope, loc):
        tensor, origin, axes = _global_access(p, c, scope)
        c.expect(",")
        value = p.value(c.word())
        return kind(tensor, origin, axes, value, loc, **_read_indirect(p, c, scope))
    return read


def _read_scalar_load(p, c, result, scope, loc):
    var = _parse_decl(c.until(" from "))
    c.expect("from")
    c.skip()
    name_end = c.text.index("[", c.pos)
    tensor = p.value(c.text[c.pos:name_end])
    c.pos = name_end
    index = tuple(parse_expr(e, scope) for e in split_top(c.group("[")))
    bounds = ()
    if c.peek("bounds"):
        c.expect("bounds")
        bounds = tuple(parse_expr(e, scope) for e in split_top(c.group("(")))
    scope[var.name] = var
    return O.ScalarLoad(var, tensor, index, loc, bounds)


def _read_distinct(p, c, result, scope, loc):
    tensor = p.value(c.word())
    c.expect("on")
    bounds = c.text[c.pos:].strip()
    if not (bounds.startswith("[") and bounds.endswith(")")):
        raise c.error("a range '[lo, hi)'")
    lo, hi = (parse_expr(e, scope) for e in _pair(split_top(bounds[1:-1]), bounds))
    return O.Distinct(tensor, lo, hi, loc)


def _pair(items: list[str], text: str) -> list[str]:
    if len(items) != 2:
        raise ParseError(f"expected two bounds 'lo, hi' in {text!r}")
    return items


def _lds_access(p, c, scope):
    buffer = p.value(c.word())
    addr = p.addr(c.group("{"))
    origin = tuple(parse_expr(e, scope) for e in split_top(c.group("[")))
    return buffer, addr, origin


def _read_lds_store(p, c, result, scope, loc):
    buffer, addr, origin = _lds_access(p, c, scope)
    c.expect(",")
    return O.LdsStore(buffer, addr, origin, p.value(c.word()), loc)


def _read_lds_load(p, c, result, scope, loc):
    buffer, addr, origin = _lds_access(p, c, scope)
    return O.LdsLoad(result, buffer, addr, origin, loc)


def _read_mfma(p, c, result, scope, loc):
    instr = c.word()
    a, b, acc = _operand_list(p, c.text[c.pos:])
    return O.Mfma(result, instr, a, b, acc, loc)


def _read_mask(p, c, result, scope, loc):
    x = p.value(c.word())
    c.expect("keep")
    inner = {**scope, **{v.name: v for v in coord_vars(x.type.shape)}}
    keep = parse_expr(c.group("("), inner)
    c.expect("fill")
    return O.Mask(result, x, keep, float(c.word()), loc)


def _read_reduce(p, c, result, scope, loc):
    fn, x = c.word(), p.value(c.word())
    c.expect("axis")
    axis = int(c.word())
    c.expect("drop")
    return O.Reduce(result, fn, x, axis, tuple(split_top(c.group("("))), loc)


def _read_yield(p, c, result, scope, loc):
    return O.Yield(tuple(_operand_list(p, c.text[c.pos:])), loc)


def _read_int_after(keyword, make):
    def read(p, c, result, scope, loc):
        x = p.value(c.word())
        c.expect(keyword)
        return make(result, x, int(c.word()), loc)
    return read


_OP_READERS = {
    "program_id": _read_program_id,
    "scalar.load": _read_scalar_load,
    "distinct": _read_distinct,
    "tag": _read_tag,
    "tag_tile": _read_tag_tile,
    "global.load": _read_global_load,
    "global.store": _read_global_store(O.GlobalStore),
    "global.atomic_add": _read_global_store(O.GlobalAtomicAdd),
    "lds.alloc": lambda p, c, result, scope, loc: O.LdsAlloc(result, loc),
    "lds.store": _read_lds_store,
    "lds.load": _read_lds_load,
    "mfma": _read_mfma,
    "full": lambda p, c, result, scope, loc: O.Full(result, float(c.word()), loc),
    "unary": lambda p, c, result, scope, loc: O.Unary(result, c.word(), p.value(c.word()), loc),
    "binary": lambda p, c, result, scope, loc: O.Binary(
        result, c.word(), *_operand_list(p, c.text[c.pos:]), loc),
    "cast": lambda p, c, result, scope, loc: O.Cast(result, p.value(c.word()), loc),
    "mask": _read_mask,
    "reduce": _read_reduce,
    "broadcast": _read_int_after("axis", O.Broadcast),
    "slot_slice": _read_int_after("start", O.SlotSlice),
    "barrier": lambda p, c, result, scope, loc: O.Barrier(loc),
    "yield": _read_yield,
}


def parse_kernel(text: str) -> O.Kernel:
    """Read IR text written by `print_kernel`; the result is verified."""
    parser = _Parser(text)
    kernel = parser.kernel()
    if parser.index != len(parser.lines):
        extra = parser.lines[parser.index]
        raise ParseError(f"IR line {extra[0]}: text after the kernel's closing brace")
    return kernel.verify()

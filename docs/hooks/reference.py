"""MkDocs hook: the DSL op reference, generated from the declarations themselves.

Each tile-IR op class in `argus.ir.ops` gives its mnemonic, docstring, fields (with their
declared kind and assertion role, `argus.ir.fields`) and tag-transfer rule (`argus.ir.transfer`);
the IR checks are the messages of its `check()`; the verifier's obligations are read from its
rule in the verifier's registry (`argus.absint.rules`) and the methods that rule calls; what the
backend emits is measured by lowering the library kernels and grouping the machine instructions
by the IR op they came from (`MInst.origin`). Nothing here is written by hand, so the page
cannot fall behind the code.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections import defaultdict
from functools import cache

import attrs

PAGE = "reference/dsl-ops.md"


def on_files(files, config):
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=ops_page()))
    return files


# ---------------------------------------------------------------- reading the declarations

def op_classes() -> list[type]:
    """Every concrete op class, in declaration order."""
    from argus.ir import ops as O

    found = [value for value in vars(O).values()
             if isinstance(value, type) and issubclass(value, O.Op) and value is not O.Op
             and not value.__name__.startswith("_")]
    return sorted(found, key=lambda cls: inspect.getsourcelines(cls)[1])


def transfer_meanings() -> dict[str, str]:
    """The comment beside each `Transfer` member in argus/ir/transfer.py (continued lines too)."""
    from argus.ir import transfer

    meanings: dict[str, str] = {}
    current = None
    for line in inspect.getsource(transfer.Transfer).splitlines():
        member = re.match(r"\s+([A-Z]+) = \"[a-z]+\"\s+# (.*)", line)
        more = re.match(r"\s+#\s+(.*)", line)
        if member:
            current = member.group(1)
            meanings[current] = member.group(2).strip()
        elif more and current:
            meanings[current] += " " + more.group(1).strip()
        else:
            current = None
    return meanings


def fields_of(cls) -> list[tuple[str, str, str]]:
    """(name, declared kind, role) of each field but the source location."""
    from argus.ir import fields as F

    rows = []
    for field in attrs.fields(cls):
        if field.name == "loc":
            continue
        decl = field.metadata.get(F.KEY)
        kind = "attribute" if decl is None else decl.kind.value
        if decl is not None and decl.shape is not F.Shape.ONE:
            kind += f" ({decl.shape.value})"
        rows.append((field.name, kind, decl.role if decl is not None and decl.role else ""))
    return rows


def _text(node: ast.expr) -> str:
    """A message argument as the reader sees it: f-string holes as {…}."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else
                       "⟨" + ast.unparse(part.value) + "⟩" for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left) + _text(node.right)
    return "⟨" + ast.unparse(node) + "⟩"


def ir_checks(cls) -> list[str]:
    """The messages of the `_fail(...)` calls in the class's own `check()`."""
    check = vars(cls).get("check")
    if check is None:
        return []
    tree = ast.parse(textwrap.dedent(inspect.getsource(check)))
    calls = [call for call in ast.walk(tree) if isinstance(call, ast.Call)
             and getattr(call.func, "id", None) == "_fail" and len(call.args) >= 2]
    return [_text(call.args[1]) for call in sorted(calls, key=lambda call: call.lineno)]


_OP_USE = re.compile(r"\bO\.([A-Z][A-Za-z]+)\b")
_HELPER = re.compile(r"\b(_[a-z][a-z0-9_]*)\(")


#: the Tile operators that build ops (x + y is a binary op)
_OPERATORS = {"__add__", "__sub__", "__mul__", "__truediv__", "__neg__", "__matmul__"}


@cache
def written_as() -> dict[str, list[str]]:
    """Op class name -> the `T.` functions (and Tile methods) of argus.lang that build it,
    found in their source and in the module's private helpers they call."""
    import argus.lang as T

    classes = {cls.__name__ for cls in op_classes()}

    def ops_built(fn, seen=()) -> set[str]:
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            return set()
        found = set(_OP_USE.findall(source))
        module = inspect.getmodule(fn)
        for helper in set(_HELPER.findall(source)) - set(seen):
            # a module helper, or a private method of the DSL's value classes (Tile._binary)
            for owner in (module, T.Tile, T.Global, T.Lds):
                target = getattr(owner, helper, None)
                if inspect.isfunction(target):
                    found |= ops_built(target, (*seen, helper))
        return found & classes

    spelled: dict[str, list[str]] = defaultdict(list)
    for name in sorted(T.__all__):
        value = getattr(T, name)
        # a function, or a class used as one (T.range, T.when): every method of it counts
        parts = [value] if inspect.isfunction(value) else [
            fn for fn in vars(value).values() if inspect.isfunction(fn)
        ] if inspect.isclass(value) and value.__module__ == "argus.lang.control" else []
        for op in sorted(set().union(*(ops_built(fn) for fn in parts))):
            spelled[op].append(f"T.{name}")
    for cls_name in ("Tile", "Global", "Lds"):
        cls = getattr(T, cls_name)
        for method, fn in vars(cls).items():
            if inspect.isfunction(fn) and (not method.startswith("_") or method in _OPERATORS):
                for op in ops_built(fn):
                    spelled[op].append(f"{cls_name}.{method}")
    return spelled


_OBLIGATION = re.compile(r"\.obligation\(\s*[^,]+,\s*\"([a-z-]+)\"")
_CALL = re.compile(r"self\.([a-z_][a-z0-9_]*)\(")


#: an access recorded for the pairwise checks made at the end of an epoch or of the kernel
#: (absint/races.py, absint/global_order.py), which record their obligations at the later
#: access of the pair
_DEFERRED = {"self.global_accesses.append(": ("global-race", "global-order"),
             "self.accesses.append(": ("lds-race",)}


@cache
def _method_kinds(walker: type, name: str, seen: frozenset = frozenset()) -> frozenset:
    """Obligation kinds a walker method records, itself or through the methods it calls."""
    fn = getattr(walker, name, None)
    if fn is None or not callable(fn) or name in seen:
        return frozenset()
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return frozenset()
    kinds = set(_OBLIGATION.findall(source))
    kinds.update(*(deferred for record, deferred in _DEFERRED.items() if record in source))
    for called in set(_CALL.findall(source)):
        kinds |= _method_kinds(walker, called, seen | {name})
    return frozenset(kinds)


def verifier_rule(cls) -> tuple[str, list[str]] | None:
    """(what handles the op, the obligation kinds it records): the op's rule in the
    verifier's registry and the value-level reading of its transfer rule (`RESULT_TAGS`)."""
    from argus.absint.verify import RESULT_TAGS, _Verifier

    parts = [fn for fn in (_Verifier.RULES.get(cls), RESULT_TAGS.get(cls.transfer)) if fn]
    if not parts:
        return None
    kinds = set().union(*(_method_kinds(_Verifier, fn.__name__) for fn in parts))
    return " + ".join(f"`{fn.__name__}`" for fn in parts), sorted(kinds)


def backend_rule(cls) -> str | None:
    from argus.asm.lower import lanes  # noqa: F401  (registers the cross-lane rules)
    from argus.asm.lower.isel import RULES

    fn = RULES.get(cls)
    return None if fn is None else f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"


@cache
def emitted() -> dict[str, dict[str, int]]:
    """IR op mnemonic -> {gfx942 opcode: count} over the library kernels as lowered."""
    from argus.asm.lower import lower
    from argus.asm.lower.program import MInst
    from argus.kernels import library

    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for entry in library().values():
        for item in lower(entry.kernel.trace(), "interleave").items:
            if isinstance(item, MInst) and item.origin and not item.inserted:
                counts[item.origin][item.opcode] += 1
    return counts


# ---------------------------------------------------------------- the page

def ops_page() -> str:
    meanings = transfer_meanings()
    lines = [
        "# DSL op reference",
        "",
        "Generated from the op declarations when the site is built (`docs/hooks/reference.py`):",
        "each op of the tile IR (`argus.ir.ops`) that the DSL (`argus.lang`, imported as `T`)",
        "traces into, with its fields, its tag-transfer rule, the invariants the IR checks, the",
        "proof obligations the verifier records for it, and the gfx942 instructions the backend",
        "emitted for it in the library kernels (GEMM, both attention kernels, MoE GEMM, lowered",
        "with the `interleave` policy; counts are per kernel source, not per launch). Waits and",
        "`s_nop`s the later passes insert are not counted. The race and ordering obligations",
        "(`lds-race`, `global-race`, `global-order`) are checked between pairs of accesses at",
        "the end of a barrier epoch or of the kernel and listed under the access ops that take",
        "part; the [verifier semantics](../concepts/verifier.md) page says what each kind means.",
        "",
        "| op | class | tag transfer |",
        "|---|---|---|",
    ]
    classes = op_classes()
    for cls in classes:
        lines.append(f"| [`{cls.mnemonic}`](#{_anchor(cls)}) | `{cls.__name__}` | "
                     f"{cls.transfer.value} |")
    lines += ["", "## Tag-transfer rules", "", "| rule | the result's tags |", "|---|---|"]
    for name, meaning in meanings.items():
        lines.append(f"| {name.lower()} | {meaning} |")
    for cls in classes:
        lines += _op_section(cls, meanings)
    return "\n".join(lines) + "\n"


def _anchor(cls) -> str:
    return f"op-{cls.__name__.lower()}"


def _op_section(cls, meanings) -> list[str]:
    doc = inspect.cleandoc(vars(cls).get("__doc__") or "") or "(no docstring)"
    out = ["", f"## `{cls.mnemonic}` ({cls.__name__}) {{ #{_anchor(cls)} }}", "", doc, ""]
    spellings = written_as().get(cls.__name__, [])
    out += [("**Written as:** " + ", ".join(f"`{s}`" for s in spellings)) if spellings else
            "**Written as:** no DSL call builds it directly (passes and the tracer make it).", ""]
    rows = fields_of(cls)
    if rows:
        out += ["| field | kind | assertion role |", "|---|---|---|"]
        out += [f"| `{name}` | {kind} | {role} |" for name, kind, role in rows]
        out.append("")
    transfer = cls.transfer.name
    out.append(f"**Tag transfer:** {transfer.lower()}: {meanings.get(transfer, '')}")
    out.append("")
    checks = ir_checks(cls)
    if checks:
        out.append("**IR checks** (`check()`, an `IRError` at the op's source line):")
        out.append("")
        out += [f"- {_escape(message)}" for message in checks]
        out.append("")
    if cls.__name__ == "Yield":
        out += ["**Verifier and backend:** handled by the enclosing `for` or `if`, whose "
                "results it gives.", ""]
        return out
    rule = verifier_rule(cls)
    if rule is None:
        out.append("**Verifier:** no rule: `verify` refuses a kernel using it (a "
                   "`VerifyError` naming the op).")
    else:
        name, kinds = rule
        shown = ", ".join(f"`{k}`" for k in kinds) or "none (it updates the abstract state)"
        out.append(f"**Verifier** ({name}): obligations {shown}.")
    out.append("")
    backend = backend_rule(cls)
    opcodes = emitted().get(cls.mnemonic, {})
    if backend is None:
        out.append("**Backend:** no lowering rule: the gfx942 backend refuses the op "
                   "(`UnsupportedError`); the reference interpreter runs it.")
    elif opcodes:
        shown = ", ".join(f"`{name}` ×{count}" for name, count in
                          sorted(opcodes.items(), key=lambda item: (-item[1], item[0])))
        out.append(f"**Backend** (`{backend}`), in the library kernels: {shown}.")
    else:
        out.append(f"**Backend** (`{backend}`): no library kernel uses the op, so no "
                   "instruction count is shown.")
    return out


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace("*", "\\*").replace("_", "\\_")

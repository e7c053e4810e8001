"""IR-to-IR passes. `strip_tags` removes everything that exists only for the proofs (tag
definitions, retagged tiles, assertions), so lowering sees the same program either way.
"""

from __future__ import annotations

import attrs

from argus.ir import ops as O
from argus.ir.types import Value


def strip_tags(kernel: O.Kernel) -> O.Kernel:
    """The kernel without TagDef/TagTile ops and tag assertions; data flow is unchanged."""
    renamed: dict[str, Value] = {}
    return attrs.evolve(kernel, body=_strip_block(kernel.body, renamed)).verify()


def _strip_block(block: O.Block, renamed: dict[str, Value]) -> O.Block:
    ops = []
    for op in block.ops:
        op = replace_values(op, renamed)
        if isinstance(op, O.TagDef):
            continue
        if isinstance(op, O.TagTile):
            renamed[op.result.name] = op.x
            continue
        if isinstance(op, O.For):
            op = attrs.evolve(op, body=_strip_block(op.body, renamed))
        elif isinstance(op, O.If):
            op = attrs.evolve(op, then=_strip_block(op.then, renamed),
                              orelse=_strip_block(op.orelse, renamed))
        if getattr(op, "asserts", ()):
            op = attrs.evolve(op, asserts=())
        ops.append(op)
    return attrs.evolve(block, ops=tuple(ops))


def replace_values(op: O.Op, mapping: dict[str, Value]) -> O.Op:
    """`op` with every operand named in `mapping` replaced (results and blocks untouched)."""
    if not mapping:
        return op
    changes = {}
    for field in attrs.fields(type(op)):
        if field.name in ("result", "results", "body", "then", "orelse"):
            continue
        value = getattr(op, field.name)
        if isinstance(value, Value) and value.name in mapping:
            changes[field.name] = mapping[value.name]
        elif isinstance(value, tuple) and value and all(isinstance(v, Value) for v in value):
            changes[field.name] = tuple(mapping.get(v.name, v) for v in value)
    return attrs.evolve(op, **changes) if changes else op

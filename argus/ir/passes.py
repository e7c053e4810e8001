"""IR-to-IR passes. `strip_tags` removes everything that exists only for the proofs (tag
definitions, retagged tiles, assertions), so lowering sees the same program either way.
"""

from __future__ import annotations

import attrs

from argus.ir import fields as F
from argus.ir import ops as O
from argus.ir.types import Value


def strip_tags(kernel: O.Kernel) -> O.Kernel:
    """The kernel without TagDef/TagTile ops and tag assertions; data flow is unchanged."""
    renamed: dict[str, Value] = {}
    return attrs.evolve(kernel, body=_strip_block(kernel.body, renamed)).verify()


def _strip_block(block: O.Block, renamed: dict[str, Value]) -> O.Block:
    ops = []
    for op in block.ops:
        op = op.replace_operands(renamed)
        if isinstance(op, O.TagDef):
            continue
        if isinstance(op, O.TagTile):
            renamed[op.result.name] = op.x
            continue
        changes = {}
        for field, decl in F.declared(type(op)):
            if decl.kind is F.Kind.BLOCK:
                changes[field.name] = _strip_block(getattr(op, field.name), renamed)
            elif decl.kind is F.Kind.ASSERTS:
                changes[field.name] = ()
        ops.append(attrs.evolve(op, **changes) if changes else op)
    return attrs.evolve(block, ops=tuple(ops))

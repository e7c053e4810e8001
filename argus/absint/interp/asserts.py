"""Tag assertions in the interpreter: every assertion of an op evaluated on the concrete tags
of its roles at every thread slot (or MFMA product), a failure reported where it happens.
"""

from __future__ import annotations

import re

import numpy as np

from argus.absint.interp.state import TOP, first, layout_table, mfma_positions, untop
from argus.absint.kleene import array_verdict
from argus.ir import ops as O
from argus.ir.expr import Expr, free_vars
from argus.ir.text import expr_text


class Assertions:
    """The assertion checks of `_Workgroup` (a mixin: `self` is the workgroup)."""

    def check(self, op, roles: dict[str, dict[str, np.ndarray]], layout, shape,
              extra_env=None, agree_with=None, where=None):
        """Evaluate op's assertions on arrays of `shape`; roles map to tag arrays; only the
        points where `where` holds (threads taking part) must satisfy them."""
        for index, assertion in enumerate(getattr(op, "asserts", ())):
            env = dict(self.env) | (extra_env or {})
            tops = {}
            missing = []
            for var in sorted(free_vars(assertion.predicate), key=lambda v: v.name):
                role, tag = O.split_role_var(var.name)
                if not O.is_role_var(var) or role not in roles:
                    continue
                values = roles[role].get(tag)
                if values is None:
                    missing.append(f"{role}.{tag}")
                    continue
                tops[var.name] = values == TOP
                env[var.name] = untop(values)
            if missing:
                self.report(op, "tag-missing",
                            f"assertion '{assertion.message}' reads {', '.join(missing)}, which "
                            f"the operands do not carry (they have "
                            f"{ {r: sorted(t) for r, t in roles.items()} })",
                            np.ones(shape, bool), loc=assertion.loc, assertion=index)
                continue
            # three-valued over ⊤ tags, as the verifier reads it (`absint.kleene`)
            failed = ~array_verdict(assertion.predicate, env, tops, shape, agree_with)
            if where is not None:
                failed = failed & where
            if failed.any():
                position = first(failed)
                self.report_assertion(op, index, failed, roles, layout, position,
                                      agreeing=agree_with is not None)

    def report_assertion(self, op, index, failed, roles, layout, position, agreeing=False):
        assertion = op.asserts[index]
        if isinstance(op, O.Mfma):
            self.report_mfma(op, index, failed, roles, position)
            return
        coords = layout_table(layout)
        element = {f"c{a}": int(c[position]) for a, c in enumerate(coords)}
        tags = {role: {name: _tag(values, position) for name, values in role_tags.items()}
                for role, role_tags in roles.items()}
        self.report(op, "tag-assertion", f"tag assertion '{assertion.message}' does not hold",
                    failed, element=element, tags=tags, position=position,
                    detail=f"predicate: {_readable(assertion.predicate)}"
                           + (f"; {O.MASK_AGREEMENT}" if agreeing else ""), loc=assertion.loc,
                    assertion=index)

    def report_mfma(self, op, index, failed, roles, position):
        assertion = op.asserts[index]
        w, block, i, j, k = position
        info, (lane_k, slot_k), a_pos, *_ = mfma_positions(op.instr)
        holder = (a_pos[0] == block) & (a_pos[1] == i) & (a_pos[2] == k)
        lane, slot = (int(x[holder][0]) for x in (lane_k, slot_k))
        tags = {role: {name: _tag(values, (w, block, i, j, k)) for name, values in rt.items()}
                for role, rt in roles.items()}
        self.report(op, "tag-assertion", f"tag assertion '{assertion.message}' does not hold",
                    failed, element={"block": block, "i": i, "j": j, "k": k}, tags=tags,
                    position=(w, lane, slot), axes=("wave", "block", "i", "j", "k"),
                    detail=f"at {info.name}: A[{i},{k}] (register slot a[{slot}]) meets "
                           f"B[{k},{j}] and C[{i},{j}]; predicate: "
                           f"{_readable(assertion.predicate)}", loc=assertion.loc,
                    assertion=index)


def _readable(predicate: Expr) -> str:
    """The predicate as the author wrote it: A.k rather than the variable name A_k."""
    return re.sub(r"\b([A-Z])_([A-Za-z0-9]+)\b", r"\1.\2", expr_text(predicate))


def _tag(values: np.ndarray, position) -> int | None:
    """One tag value at `position`, reading broadcast (size-1) axes at 0; None for ⊤."""
    v = int(values[tuple(p if n > 1 else 0 for p, n in zip(position, values.shape))])
    return None if v == TOP else v



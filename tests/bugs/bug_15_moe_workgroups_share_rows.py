"""xfail: MoE GEMM whose workgroups 2b and 2b + 1 both gather row block b of `sorted_ids`, so
each pair stores the same token rows (write/write race), although `T.distinct` declares every
token once in the index data. The defect is in the row-block mapping, which the LDS-staged and
the register-direct kernels share; the corpus uses the register-direct one (`lds=False`, fewer
obligations), `tests/test_verify.py` the staged default."""

import attrs

from argus.ir import ops as O
from argus.ir.expr import substitute
from argus.kernels.moe import moe_gemm


def _halve_block_index(block: O.Block, pid) -> O.Block:
    ops = []
    for op in block.ops:
        if isinstance(op, O.For):
            op = attrs.evolve(op, body=_halve_block_index(op.body, pid))
        if getattr(op, "gather", None) is not None:
            origin = substitute(op.gather.origin, {pid.name: pid // 2})
            op = attrs.evolve(op, gather=attrs.evolve(op.gather, origin=origin))
        ops.append(op)
    return attrs.evolve(block, ops=tuple(ops))


def moe_sharing_row_blocks(kernel: O.Kernel | None = None) -> O.Kernel:
    kernel = kernel or moe_gemm.trace(lds=False)
    pid = next(op.var for op in kernel.ops() if isinstance(op, O.ProgramId) and op.axis == 0)
    return attrs.evolve(kernel, body=_halve_block_index(kernel.body, pid)).verify()


KERNEL = moe_sharing_row_blocks()
FIXED = moe_gemm.trace(lds=False)
EXPECT = [
    "global-race: another workgroup accesses the element this op stores",
    "workgroup \\(0, 0, 0\\).*\\n.*\\n"
    "  workgroup \\(1, 0\\) also stores it at argus/kernels/moe.py",
    "confirmed by concrete replay",
]

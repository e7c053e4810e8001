"""Lowering a verified tile-IR kernel to gfx942 assembly: `lower(kernel, policy) -> Lowered`.

The stages run in the order the data flows, one module each: instruction selection with address
generation (isel, with the cross-lane rules in lanes; address, exprgen), scheduling (schedule),
register allocation (regalloc), `s_waitcnt` insertion (waitcnt), hazard wait states (hazards)
and emission (emit). Tile
parameters are fixed by the traced IR; sizes stay symbolic and are kernel arguments, so one
code object serves every size the kernel's assumptions admit.
"""

from __future__ import annotations

from typing import Any

import attrs

from argus.asm.lower.address import VectorizeError
from argus.asm.lower.exprgen import LoweringError, UnsupportedError
from argus.asm.lower.regalloc import RegisterBudgetError
from argus.asm.policy import POLICIES
from argus.ir import ops as O
from argus.ir.expr import Expr
from argus.ir.passes import strip_tags
from argus.isa_cdna3 import isa


@attrs.frozen
class Lowered:
    """The assembly of one kernel and what a launcher needs to know about it."""

    name: str
    text: str
    kernargs: tuple                    # isel.KernargSlot, in kernarg order
    kernarg_bytes: int
    lds_bytes: int
    sgprs: int
    vgprs: int
    agprs: int
    waves: int                         # per workgroup
    grid: tuple[Expr, ...]             # workgroups per axis, in the sizes
    sizes: tuple                       # the symbolic sizes, read from the kernel arguments
    occupancy: int                     # waves per SIMD
    occupancy_limit: str               # what limits it
    peak: object                       # regalloc.Peak: where the most VGPRs are live
    policy: str
    items: list = attrs.field(eq=False, repr=False)
    frame: dict = attrs.field(eq=False, repr=False, factory=dict)   # emit.kernel_text arguments
    #: every access's offset from its buffer resource (isel.AddressSpan), for check_spans
    spans: tuple = attrs.field(eq=False, repr=False, default=())

    def check_spans(self, sizes: dict, scalars: dict | None = None) -> str | None:
        """Why these sizes cannot launch, or None: every buffer offset the code adds to a
        resource's base (rebased per workgroup in 64 bits) must stay below 2^31 bytes; a
        tensor may be as large as the address space."""
        from argus.asm.lower.address import span_bound

        for span in self.spans:
            high = span_bound(span, {**sizes, **(scalars or {})}, self.grid, self.waves)
            if high + 16 > isa.BUFFER_RECORDS_MAX:
                return (f"{span.loc}: an access to {span.tensor} reaches {high} bytes past its "
                        "buffer base, and buffer offsets are 32-bit (below 2^31): a workgroup's "
                        "own span of one tensor must stay below 2 GiB (the tensor itself may be "
                        "larger; the workgroup's part of the offset is added to the base in 64 "
                        "bits)")
        return None

    def render(self, items: list | None = None) -> str:
        """The .s text of `items` (default: this program) in this kernel's frame; tests use it to
        assemble variants of the program, e.g. with one inserted wait removed."""
        from argus.asm.lower import emit

        return emit.kernel_text(body=emit.body_text(self.items if items is None else items),
                                **self.frame)


def lower(kernel: O.Kernel, policy: str = "interleave") -> Lowered:
    """Assembly for a traced (and verified) kernel."""
    from argus.asm.lower import emit, hazards, lanes, regalloc, schedule, waitcnt  # noqa: F401
    from argus.asm.lower.isel import Selector

    if not isinstance(policy, str) or policy not in POLICIES:
        raise LoweringError(f"unknown scheduling policy {policy!r}; choose one of {POLICIES}")
    stripped = strip_tags(kernel)                       # tags emit nothing
    fixed = assumed_constants(stripped)
    stripped = fold_assumed(stripped)
    selector = Selector(stripped, policy, fixed)
    items = selector.run()                              # isel + address generation
    _dump("instruction selection", items)
    schedule.schedule(items, policy)                    # MFMA / LDS / VMEM interleave
    _dump(f"scheduling ({policy})", items)
    allocation = regalloc.allocate(items)               # virtual -> physical registers
    _dump("register allocation", items)
    waitcnt.insert_waits(items)                         # s_waitcnt for memory results
    _dump("s_waitcnt insertion", items)
    hazards.insert_nops(items)                          # wait states the hardware needs
    vgprs = max(allocation.vgprs, 1)
    sgprs = max(allocation.sgprs, 1)
    lds = selector.lds_top
    occupancy = isa.occupancy(vgprs, lds, stripped.waves)
    waves_per_simd, limit = occupancy.waves_per_simd, occupancy.limiter
    frame: dict[str, Any] = dict(
        name=stripped.name, kernargs=tuple(selector.kernargs),
        kernarg_bytes=selector.kernarg_bytes, lds_bytes=lds, sgprs=sgprs, vgprs=vgprs,
        grid_rank=len(stripped.grid), block=stripped.waves * isa.WAVE_SIZE)
    text = emit.kernel_text(body=emit.body_text(items), **frame)
    return Lowered(stripped.name, text, tuple(selector.kernargs), selector.kernarg_bytes, lds,
                   sgprs, vgprs, 0, stripped.waves, tuple(stripped.grid), tuple(stripped.sizes),
                   waves_per_simd, limit, allocation.peak, policy, items, frame,
                   tuple(selector.spans))


def fold_assumed(kernel: O.Kernel) -> O.Kernel:
    """The kernel with each size its assumptions fix to a constant (`T.assume(S.eq(1))`: a
    convolution's phase counts and window extents) replaced by that constant in every
    expression but the size list (the argument is still passed). Under the assumptions the
    program is the same; strides over such a size become constants, so an offset they scale
    goes into the instruction's offset field instead of an SGPR (a 3x3x3 window's taps, its
    input rows' channel steps)."""
    from argus.ir.rewrite import fold_sizes

    fixed = assumed_constants(kernel)
    return fold_sizes(kernel, fixed) if fixed else kernel


def assumed_constants(kernel: O.Kernel) -> dict[str, int]:
    """{size: value} for each size an assumption `S.eq(c)` fixes (`fold_assumed`)."""
    from argus.ir.expr import Const, Term, Var

    fixed: dict[str, int] = {}
    sizes = {v.name for v in kernel.sizes}
    for fact in kernel.assumes:
        if isinstance(fact, Term) and fact.op == "eq":
            a, b = fact.args
            if isinstance(b, Var) and isinstance(a, Const):
                a, b = b, a
            if isinstance(a, Var) and a.name in sizes and isinstance(b, Const):
                fixed[a.name] = int(b.value)
    return fixed


def _dump(stage: str, items: list) -> None:
    """ARGUS_DEBUG=3 prints the machine program after each stage (virtual registers as
    %name[first:end] until allocation), as xdsl-opt --print-between-passes does."""
    from argus.env import debug_level

    if debug_level() >= 3:
        from argus.asm.lower.emit import body_text
        from argus.env import debug

        debug(3, f"; ---- after {stage}\n{body_text(items)}")


__all__ = ["Lowered", "LoweringError", "POLICIES", "RegisterBudgetError", "UnsupportedError",
           "VectorizeError", "lower"]

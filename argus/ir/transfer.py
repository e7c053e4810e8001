"""Tag-transfer rules: how the tags of an op's result follow from what the op reads.

Each op names its rule once (`Op.transfer`). `tag_names` here is the reading at the level of
tag *names* (which names a value carries, for the DSL's early checks); the verifier
(`absint.verify`) and the interpreter (`absint.concrete`) hold the value-level readings and
dispatch on the same rule kind.
"""

from __future__ import annotations

import enum


class Transfer(enum.Enum):
    NONE = "none"          # defines no tagged value (scalars, global stores, barriers, allocs)
    FRESH = "fresh"        # a result without tags (full)
    DEFINE = "define"      # gives a global tensor's elements tag formulas (tag)
    RETAG = "retag"        # the result's tags are formulas over its coordinates (tag_tile)
    LOAD = "load"          # the data read brings the tags of where it was read (global/lds load)
    STORE = "store"        # the stored data leaves its tags in the buffer (lds.store)
    COPY = "copy"          # the tensor's tags travel into the buffer, not via a register
    #                        (async_copy)
    KEEP = "keep"          # every element keeps its tags (unary, cast)
    MARK = "mark"          # KEEP, plus a tag `trace` recording where a condition held (mask)
    SHIFT = "shift"        # slots are renumbered within the thread; tags travel (slot_slice)
    EXCHANGE = "exchange"  # elements move between lanes of a wave; names in `drop` are dropped,
    #                        the others must agree along the exchanged axis (broadcast, reduce)
    LANEMAP = "lanemap"    # each lane reads another lane's element of the wave (shuffle); tags
    #                        travel with it; combining keeps the names both agree on and turns
    #                        the `cover` name into the range it covers (cover_names)
    UNION = "union"        # both operands' names; a shared name is kept where they agree (binary)
    CONTRACT = "contract"  # A's and B's names without those they share, the contracted ones (mfma)
    CARRY = "carry"        # results of loops and branches: they depend on the iteration taken


def _operand_names(op, of) -> frozenset | None:
    return of(op.operands[0])


def _union(op, of):
    x, y = of(op.operands[0]), of(op.operands[1])
    return None if x is None or y is None else x | y


def _contract(op, of):
    a, b = of(op.operands[0]), of(op.operands[1])
    if a is None or b is None:
        return None
    names = (a | b) - (a & b)
    return names | set(cover_names(op.cover)) if getattr(op, "cover", "") else names


def _exchange(op, of):
    x = of(op.operands[0])
    return None if x is None else x - set(getattr(op, "drop", ()))


def _mark(op, of):
    x = of(op.operands[0])
    trace = getattr(op, "trace", None)
    return None if x is None else x | ({trace} if trace else set())


def cover_names(name: str) -> tuple[str, str, str]:
    """The tags a combining shuffle gives for covered tag `name`: the values covered are the
    progression first, first + step, ..., last (`colfirst`, `collast`, `colstep` for `col`)."""
    return f"{name}first", f"{name}last", f"{name}step"


def cover_union(first_a, last_a, step_a, first_b, last_b, step_b):
    """(first, last, step, exact) of the union of two covered progressions: exact where they
    are disjoint and the union is again a progression — one continues the other (a shift
    tree), or they interleave at half the step (an XOR butterfly, either order of steps); a
    single value fits any step. The formulas are `ir.expr` terms (linear, so cheap to prove),
    which the verifier proves over and the interpreter evaluates on arrays."""
    from argus.ir.expr import And, Or, as_expr, ite, max_, min_

    fa, la, sa, fb, lb, sb = (as_expr(v) for v in (first_a, last_a, step_a, first_b, last_b,
                                                   step_b))
    single_a, single_b = fa.eq(la), fb.eq(lb)
    step = ite(And(single_a, single_b), max_(fb - fa, fa - fb), ite(single_a, sb, sa))
    same_step = Or(single_a, single_b, sa.eq(sb))
    first, after = min_(fa, fb), max_(fa, fb)
    continues = after.eq(ite(fa <= fb, la, lb) + step)
    interleaves = And((la - fa).eq(lb - fb), (step % 2).eq(0), ((after - first) * 2).eq(step))
    exact = And(same_step, step > 0, Or(continues, interleaves))
    return first, max_(la, lb), ite(continues, step, step // 2), exact


def _lanemap(op, of):
    x = of(op.operands[0])
    if x is None or not getattr(op, "cover", ""):
        return x
    return (x - {op.cover}) | set(cover_names(op.cover))


def _formula_names(op, of):
    return frozenset(name for name, _ in op.tags)


#: The names of a register result, per rule, from `of(value)` (the names a value carries, None
#: when they depend on the iteration): the rules that compute a result's tags from register
#: operands alone. LOAD, STORE, COPY, DEFINE and CARRY involve memory or control flow and are
#: read in `tag_names` itself (and by the ops' own handlers in the verifier and the interpreter).
RESULT_NAMES = {
    Transfer.FRESH: lambda op, of: frozenset(),
    Transfer.RETAG: _formula_names,
    Transfer.KEEP: _operand_names,
    Transfer.MARK: _mark,
    Transfer.SHIFT: _operand_names,
    Transfer.EXCHANGE: _exchange,
    Transfer.LANEMAP: _lanemap,
    Transfer.UNION: _union,
    Transfer.CONTRACT: _contract,
}


def tag_names(ops) -> tuple[dict[str, frozenset | None], dict[str, frozenset]]:
    """The tag names each register value carries, by the ops' transfer rules, and those of each
    tagged tensor; None where it depends on the loop iteration (loop-carried values)."""
    names: dict[str, frozenset | None] = {}
    tensors: dict[str, frozenset] = {}
    buffers: dict[str, frozenset | None] = {}

    def of(value):
        return names.get(value.name)

    for op in ops:
        rule = op.transfer
        if rule in RESULT_NAMES:
            names[op.results[0].name] = RESULT_NAMES[rule](op, of)
        elif rule is Transfer.DEFINE:
            tensors[op.operands[0].name] = _formula_names(op, of)
        elif rule is Transfer.LOAD:
            source = op.operands[0].name
            names[op.results[0].name] = tensors.get(source, buffers.get(source, frozenset()))
        elif rule is Transfer.STORE:
            buffer, value = op.operands[:2]
            held, new = buffers.get(buffer.name, frozenset()), of(value)
            buffers[buffer.name] = None if held is None or new is None else held | new
        elif rule is Transfer.COPY:
            buffer, source = op.operands[:2]
            held = buffers.get(buffer.name, frozenset())
            buffers[buffer.name] = None if held is None else \
                held | tensors.get(source.name, frozenset())
        elif rule is Transfer.CARRY:
            for value in op.results + tuple(a for blk in op.blocks for a in blk.args):
                names[value.name] = None
    return names, tensors

"""Small correct kernels for the lane, wave and indirection bug classes of issue 13: a row
maximum by a butterfly of cross-lane shuffles. Each keyword hook defaults to the correct kernel;
a bug file sets one hook and states the counterexample it expects.
"""

from __future__ import annotations

from functools import cache

from ordering import tag_rows_cols

import argus.lang as T
from argus.ir.expr import And
from argus.ir.types import ThreadLayout, thread_vars
from argus.lang import Tensor, TileSpec

#: One butterfly step per XOR distance 16, 8, 4, 2, 1 over the 32 lanes of a row, each with a
#: different gfx942 lane map that reads lane ^ distance.
BUTTERFLY = (("swizzle.bitmask", (31, 0, 16)), ("dpp.row_ror", (8,)), ("bpermute.xor", (4,)),
             ("dpp.quad_perm", (2, 3, 0, 1)), ("dpp.quad_perm", (1, 0, 3, 2)))


def rows_by_lane() -> TileSpec:
    """Two rows of 32 columns in one wave: lane l holds row l // 32, column l % 32."""
    wave, lane, slot = thread_vars(1, 1)
    return TileSpec((2, 32), ThreadLayout(1, 1, (lane // 32, lane % 32)))


def butterfly_max(X, Y, *, steps=BUTTERFLY):
    """Every element of Y's row is the maximum of X's row, found by a butterfly whose
    shuffles record the columns each partial maximum covers."""
    N = X.shape[0]
    T.assume((N % 2).eq(0))
    T.grid(N // 2)
    r0 = T.program_id(0) * 2
    tag_rows_cols(X, Y)
    m = X.load((r0, 0), rows_by_lane())
    for lanes, params in steps:
        m = T.shuffle(m, lanes, *params, combine="max", cover="col")
    Y.store((r0, 0), m)
    T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.colfirst.eq(0), V.collast.eq(31),
                                  V.colstep.eq(1)),
                 "each stored maximum covers every column of its own row")


@cache
def row_max(**hooks):
    @T.kernel(waves=1)
    def butterfly_row_max(X: Tensor("f32", "N", 32), Y: Tensor("f32", "N", 32)):
        butterfly_max(X, Y, **hooks)
    return butterfly_row_max


def whole_tile(waves: int) -> TileSpec:
    """A 16x16 tile held whole by every wave (lane l, slot s: row l // 4, column 4 (l % 4) + s),
    so one wave alone can store all of it."""
    wave, lane, slot = thread_vars(waves, 4)
    return TileSpec((16, 16), ThreadLayout(waves, 4, (lane // 4, lane % 4 * 4 + slot)))


def one_wave_stages(X, Y, *, sync=True, writers=None, layout=None):
    """Wave 0 alone stages a tile in LDS (the others skip the store, by `T.lanes`) and every
    wave reads its part back after a barrier. `writers` (a condition on wave and lane) and
    `layout` (how the writers hold the tile) are the hooks."""
    N = X.shape[0]
    T.assume((N % 16).eq(0))
    T.grid(N // 16)
    r0 = T.program_id(0) * 16
    tag_rows_cols(X, Y)
    smem = T.lds((16, 16), "f32")
    with T.lanes(writers or (lambda wave, lane: wave.eq(0))):
        smem.store((0, 0), X.load((r0, 0), layout or whole_tile(4)))
    if sync:
        T.barrier()
    Y.store((r0, 0), smem.load((0, 0), T.copy_layout((16, 16), 4, 1)))
    T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.col.eq(D.col)),
                 "each element comes back to its own row and column")


@cache
def staged(**hooks):
    @T.kernel(waves=4)
    def one_wave_staging(X: Tensor("f32", "N", 16), Y: Tensor("f32", "N", 16)):
        one_wave_stages(X, Y, **hooks)
    return one_wave_staging


def ping_pong_tiles(X, Y, *, slots=2, phases=2):
    """Two wave groups (wave 0, wave 1) alternate roles on an LDS buffer: in each phase each
    group produces a tile into its half of the current slot and, after a barrier, consumes the
    tile the other group produced there. With two slots a group's next tile goes to the other
    slot while its partner still reads this one; with one slot it overwrites that tile before
    the partner has read it."""
    N = X.shape[0]
    T.assume((N % (32 * phases)).eq(0))
    T.grid(N // (32 * phases))
    r0 = T.program_id(0) * (32 * phases)
    tag_rows_cols(X, Y)
    smem = T.lds((slots, 2, 16, 16), "f32")
    for p in range(phases):
        for group in (0, 1):
            with T.lanes(lambda wave, lane, group=group: wave.eq(group)):
                tile = X.load((r0 + 16 * (2 * p + group), 0), whole_tile(2))
                smem.store((p % slots, group, 0, 0), tile)
        T.barrier()
        for group in (0, 1):
            other = 1 - group
            with T.lanes(lambda wave, lane, group=group: wave.eq(group)):
                Y.store((r0 + 16 * (2 * p + other), 0),
                        smem.load((p % slots, other, 0, 0), whole_tile(2)))
    T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.col.eq(D.col)),
                 "a group stores the tile its partner staged")


@cache
def ping_pong(**hooks):
    @T.kernel(waves=2)
    def ping_pong_groups(X: Tensor("f32", "N", 16), Y: Tensor("f32", "N", 16)):
        ping_pong_tiles(X, Y, **hooks)
    return ping_pong_groups


def ids_by_row(slot_bit: bool = False) -> TileSpec:
    """Row ids in the data tile's layout (`whole_tile(1)`): lane l, slot s holds the id of row
    l // 4 — or, with `slot_bit`, of row l // 4 with its low bit replaced by the slot's (a
    read-back that mixes up which bit says the row)."""
    wave, lane, slot = thread_vars(1, 4)
    row = lane // 8 * 2 + slot % 2 if slot_bit else lane // 4
    return TileSpec((16,), ThreadLayout(1, 4, (row,)))


def staged_scatter(X, ids, Y, *, read_back=None, declared=True):
    """MoE-style un-permute whose row ids travel through LDS: the first 16 lanes load the ids
    of 16 rows into registers and stage them in LDS, every thread reads back the ids of its
    rows, and row p of X is stored to row ids[p] of Y, the row taken from those registers
    (`rows=`; ids outside Y are dropped, `guard`). Correct when the read-back puts each row's
    own id beside it and the ids never repeat (declared with `T.distinct`)."""
    P = X.shape[0]
    T.assume((P % 16).eq(0))
    if declared:
        T.distinct(ids, 0, Y.shape[0])
    T.grid(P // 16)
    p0 = T.program_id(0) * 16
    T.tag(ids, lambda p: {"pos": p})
    staging = T.lds((1, 16), "i32")
    wave, lane, slot = thread_vars(1, 1)
    with T.lanes(lambda wave, lane: lane < 16):
        staging.store((0, 0), ids.load((p0,), TileSpec((16,), ThreadLayout(1, 1, (lane % 16,)))))
    T.barrier()
    index = staging.load((0, 0), read_back or ids_by_row())
    x = X.load((p0, 0), whole_tile(1))
    Y.store((0, 0), x, rows=T.Rows(index, ids, "pos"), guard=True)


@cache
def scatter(**hooks):
    @T.kernel(waves=1)
    def staged_unpermute(X: Tensor("f32", "P", 16), ids: Tensor("i32", "P"),
                         Y: Tensor("f32", "TOKENS", 16)):
        staged_scatter(X, ids, Y, **hooks)
    return staged_unpermute


def group_handoff(X, Y, *, reader=1):
    """Wave 0 stages a tile in LDS, a barrier of the group {0, 1} orders it, and wave `reader`
    stores it out. Only a wave in the group is ordered after the store; wave 2 is not."""
    N = X.shape[0]
    T.assume((N % 16).eq(0))
    T.grid(N // 16)
    r0 = T.program_id(0) * 16
    tag_rows_cols(X, Y)
    smem = T.lds((16, 16), "f32")
    with T.lanes(lambda wave, lane: wave.eq(0)):
        smem.store((0, 0), X.load((r0, 0), whole_tile(4)))
    T.group_barrier(lambda wave: wave < 2)
    with T.lanes(lambda wave, lane: wave.eq(reader)):
        Y.store((r0, 0), smem.load((0, 0), whole_tile(4)))
    T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.col.eq(D.col)),
                 "the reader stores the tile wave 0 staged")


@cache
def handoff(**hooks):
    @T.kernel(waves=4)
    def group_barrier_handoff(X: Tensor("f32", "N", 16), Y: Tensor("f32", "N", 16)):
        group_handoff(X, Y, **hooks)
    return group_barrier_handoff


def alternating_consumers(X, Y, *, group=lambda wave: wave.ne(2), slots=2,
                          consumer=lambda t: 1 + 2 * (t % 2)):
    """A ping-pong K loop: wave 0 stages tile t in LDS slot t % 2, a barrier of a wave group
    orders it, and the consumers take turns: wave 1 stores the even tiles, wave 3 the odd ones
    (wave 2 stays out). The group barrier runs every iteration and must hold wave 0 and both
    consumers; two slots let wave 0 fill the next tile while this one is read. `slots` and
    `consumer` (the reading wave of tile t) are hooks too."""
    N = X.shape[0]
    T.assume((N % 16).eq(0))
    T.grid(1)
    tag_rows_cols(X, Y)
    smem = T.lds((slots, 16, 16), "f32")
    for t in T.range(0, N // 16):
        with T.lanes(lambda wave, lane: wave.eq(0)):
            smem.store((t % slots, 0, 0), X.load((t * 16, 0), whole_tile(4)))
        T.group_barrier(group)
        with T.lanes(lambda wave, lane, t=t: wave.eq(consumer(t))):
            Y.store((t * 16, 0), smem.load((t % slots, 0, 0), whole_tile(4)))
        T.tag_assert(lambda V, D: And(V.row.eq(D.row), V.col.eq(D.col)),
                     "the consumer stores the tile wave 0 staged")


@cache
def ping_pong_loop(**hooks):
    @T.kernel(waves=4)
    def group_barrier_ping_pong(X: Tensor("f32", "N", 16), Y: Tensor("f32", "N", 16)):
        alternating_consumers(X, Y, **hooks)
    return group_barrier_ping_pong

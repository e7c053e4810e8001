"""Packed f32 arithmetic and the MFMA-shadow scheduler (issue 23, parity).

f32 add/sub/mul on whole register pairs lower to one `v_pk_{add,mul}_f32` per pair (the second
operand negated for sub); a broadcast register or a constant is copied once per op into an
aligned pair read for both halves. The strict emulator must agree with the interpreter bit for
bit on data with NaN, infinities, signed zeros and denormals. The `interleave` scheduler puts
independent VALU work into each MFMA's shadow, never above what it depends on, never reading a
load of its region, never across an EXEC write."""

from __future__ import annotations

import numpy as np

import argus
import argus.lang as T
from argus.absint.concrete import run
from argus.asm.lower.program import MInst, VReg
from argus.asm.lower.schedule import _fill_mfma_shadows
from argus.kernels import library
from argus.lang import Tensor

SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 3e38, -3e38, 0.5],
                    np.float32)


def _opcodes(text: str) -> list[str]:
    return [line.split()[0] for line in text.splitlines()
            if line.startswith("  ") and line.strip()
            and not line.strip().startswith((";", "."))]


@T.kernel(waves=1)
def arith(X: Tensor("f32", "R", 64), Y: Tensor("f32", "R", 64)):
    R = X.shape[0]
    T.grid(T.cdiv(R, 4))
    r0 = T.program_id(0) * 4
    spec = T.rows_layout((4, 64), 1)
    x = X.load((r0, 0), spec, guard=True)
    row_max = T.broadcast(T.reduce(x, "max", 1, T.reduced(spec, 1)), 1, spec)
    y = (x * x - x * 0.3) + (x - row_max) * 1.7
    Y.store((r0, 0), y - 2.5, guard=True)


def test_f32_arithmetic_is_packed_and_agrees_bit_for_bit():
    compiled = argus.compile(arith)
    ops = _opcodes(compiled.text)
    assert ops.count("v_pk_mul_f32") >= 4 and ops.count("v_pk_add_f32") >= 4
    assert "v_mul_f32_e32" not in ops and "v_sub_f32_e32" not in ops
    assert "neg_lo:[0,1] neg_hi:[0,1]" in compiled.text          # sub: the negated second
    assert "op_sel_hi:[1,0]" in compiled.text                    # a broadcast or a constant
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((10, 64)) * 4).astype(np.float32)
    where = rng.random(x.shape) < 0.15
    x[where] = rng.choice(SPECIALS, int(where.sum()))
    y = np.zeros_like(x)
    compiled.run(x, y, check="strict")
    interpreted = run(arith.ir, {"X": x, "Y": np.zeros_like(x)}).outputs["Y"]
    np.testing.assert_array_equal(y.view(np.uint32), interpreted.view(np.uint32))


def test_attention_softmax_rescale_is_packed():
    """The online softmax's O rescale (4 accumulators of 16 registers by one broadcast
    register per block) is 32 packed multiplies per key block, not 64."""
    compiled = argus.compile(library()["attention_fwd"].kernel, verify=False, head_dim=128)
    text = compiled.text
    body = _opcodes(text[text.index(".Lloop"):text.index("s_cbranch_scc1 .Lloop")])
    mfmas = sum(o.startswith("v_mfma") for o in body)
    blocks = mfmas // 32
    assert body.count("v_pk_mul_f32") >= 40 * blocks
    assert body.count("v_mul_f32_e32") <= 2 * blocks


def _mfma(acc: VReg, a: VReg, b: VReg) -> MInst:
    return MInst("v_mfma_f32_32x32x8_bf16", (acc, a, b, acc), 1, origin="mfma")


def test_the_scheduler_fills_mfma_shadows_with_independent_valu():
    a, b = VReg("v", 2, "a", 2), VReg("v", 2, "b", 2)
    acc1, acc2 = VReg("v", 16, "acc1", 4), VReg("v", 16, "acc2", 4)
    x, y, z, w, loaded = (VReg("v", 1, n) for n in ("x", "y", "z", "w", "loaded"))
    first, second = _mfma(acc1, a, b), _mfma(acc2, a, b)
    free = MInst("v_mul_f32_e32", (x, 2.0, y), 1)                 # independent of both
    reads_acc = MInst("v_add_f32_e32", (z, acc1[0], y), 1)        # needs the first MFMA
    load = MInst("ds_read_b32", (loaded, y), 1)
    uses_load = MInst("v_add_f32_e32", (w, loaded, 1.0), 1)       # reads a load of the region
    region = [load, first, second, uses_load, free, reads_acc]
    out = _fill_mfma_shadows(region)
    assert sorted(map(id, out)) == sorted(map(id, region))
    assert out.index(free) == out.index(first) + 1 < out.index(second)
    assert out.index(uses_load) > out.index(second)               # not pulled over the MFMA
    assert out.index(reads_acc) > out.index(first)


def test_the_scheduler_keeps_order_around_dependences_and_exec():
    a, b = VReg("v", 2, "a", 2), VReg("v", 2, "b", 2)
    acc1, acc2 = VReg("v", 16, "acc1", 4), VReg("v", 16, "acc2", 4)
    x = VReg("v", 1, "x")
    saved = VReg("s", 2, "saved", 2)
    first, second = _mfma(acc1, a, b), _mfma(acc2, a, b)
    writes_operand = MInst("v_mov_b32_e32", (a[0], 0), 1)         # WAR on the second's source
    narrow = MInst("s_and_saveexec_b64", (saved, saved), 1)
    after_exec = MInst("v_mov_b32_e32", (x, 1.0), 1)              # may not cross the EXEC write
    region = [first, second, writes_operand, narrow, after_exec]
    out = _fill_mfma_shadows(region)
    assert out == region


def test_an_lds_read_is_not_hoisted_across_an_exec_write():
    """An LDS read rises to just below the last LDS access it must follow, but never above an
    EXEC write: above the restore after a `T.lanes` store it would run under that store's lane
    mask, and the other waves would skip it (the ping-pong GEMM computed from stale fragments
    in the emulator while the interpreter agreed with numpy)."""
    from argus.asm.lower.schedule import _hoist_lds_reads

    addr, data, got, other = (VReg("v", 1, n) for n in ("addr", "data", "got", "other"))
    saved, keep = VReg("s", 2, "saved", 2), VReg("s", 2, "keep", 2)
    narrow = MInst("s_and_saveexec_b64", (saved, keep), 1)
    store = MInst("ds_write_b32", (addr, data), 0)
    restore = MInst("s_mov_b64", ("exec", saved), 0)
    free = MInst("v_mov_b32_e32", (other, 1.0), 1)
    read = MInst("ds_read_b32", (got, addr), 1)
    assert _hoist_lds_reads([narrow, store, restore, free, read]) == [
        narrow, store, restore, read, free]
    # with no EXEC write between them the read still rises to just below the store
    assert _hoist_lds_reads([store, free, read]) == [store, read, free]

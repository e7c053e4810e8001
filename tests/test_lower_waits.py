"""Every `s_waitcnt` and `s_nop` the backend inserts into the GEMM is necessary: weakening a
wait's count by one (or removing a nop's last wait state) makes the strict emulator report a
hazard or missing wait, or the result go wrong."""

import numpy as np
import pytest
from ml_dtypes import bfloat16

import argus
import argus.lang as T
from argus.asm import assemble
from argus.asm.launch import bind, emulate, kernel_arguments
from argus.asm.lower.hazards import insert_nops
from argus.asm.lower.program import Loop, MInst, Skip, VReg
from argus.isa_cdna3 import isa
from argus.isa_cdna3.abi import LaunchError
from argus.isa_cdna3.emu import EmulatorError
from argus.isa_cdna3.mfma import mfma
from argus.kernels import library
from argus.lang import Tensor

GEMM = library()["gemm"]


def inserted(items, found=None):
    """(list, index) of every instruction a late stage inserted, nested loops included."""
    found = [] if found is None else found
    for index, item in enumerate(items):
        if isinstance(item, Loop | Skip):
            inserted(item.body, found)
        elif isinstance(item, MInst) and item.inserted:
            found.append((items, index))
    return found


def weakened(inst: MInst) -> list[MInst]:
    """Each single-step weakening of an inserted instruction."""
    if inst.opcode == "s_nop":
        n = int(inst.operands[0])
        return [MInst("s_nop", (n - 1,), 0)] if n else [MInst("s_nop", (0,), 0, "", None,
                                                                  "", "", "drop")]
    variants = []
    fields = dict(f.rstrip(")").split("(") for f in inst.mods.split())
    for name, count in fields.items():
        other = {k: v for k, v in fields.items() if k != name}
        other[name] = str(int(count) + 1)
        mods = " ".join(f"{k}({v})" for k, v in other.items())
        variants.append(MInst("s_waitcnt", (), 0, mods))
    return variants


def silent_weakenings(sites, unnoticed) -> list[str]:
    """Weaken each inserted instruction at `sites` in turn (each variant of `weakened`), ask
    `unnoticed()` whether the program so changed still passes, restore it; the weakenings that
    passed, as text."""
    silent = []
    for items, index in sites:
        original = items[index]
        for variant in weakened(original):
            if variant.inserted == "drop":
                del items[index]
            else:
                items[index] = variant
            try:
                passed = unnoticed()
            finally:
                if variant.inserted == "drop":
                    items.insert(index, original)
                else:
                    items[index] = original
            if passed:
                silent.append(f"{original.text()} -> {variant.text()} ({original.note})")
    return silent


def emulation_passes(compiled, bound, sizes, output, reference, tolerance) -> bool:
    """The compiled kernel's current program runs in the strict emulator and `output` is within
    `tolerance` of `reference` (a reported hazard or missing wait is a failure)."""
    args = kernel_arguments(compiled.ir, {**bound, output: np.zeros_like(bound[output])}, sizes)
    try:
        emulate(assemble(compiled.lowered.render()), grid=compiled.grid(**sizes), block=256,
                args=args, check="strict")
    except (EmulatorError, LaunchError):
        return False
    return np.abs(args[output].astype(np.float64) - reference).max() <= tolerance


def outcome(lowered, items, inputs, reference, grid):
    code = assemble(lowered.render(items))
    C = np.zeros_like(inputs["C"])
    try:
        emulate(code, grid=grid, block=256, check="strict",
                args={"A": inputs["A"], "B": inputs["B"], "C": C, "M": inputs["M"],
                      "N": inputs["N"], "K": inputs["K"]})
    except (EmulatorError, LaunchError) as err:
        return f"reported: {type(err).__name__}"
    error = np.abs(C - reference).max()
    return "wrong result" if error > 1e-3 * np.abs(reference).max() else "silent"


@pytest.mark.parametrize("policy,params", [("simple", {}),
                                           ("interleave", {"instr": "v_mfma_f32_16x16x16_bf16"})],
                         ids=["simple-32x32x8", "interleave-16x16x16"])
def test_every_inserted_wait_is_necessary(policy, params):
    compiled = argus.compile(GEMM.kernel, policy=policy, **params)
    lowered = compiled.lowered
    # K = 4 tiles: the loop body runs 3 times (interleave: one unrolled pair and the remainder
    # copy), so every inserted instruction executes and the back edge is taken
    M, N, K = 64, 128, 128
    inputs = GEMM.inputs({"M": M, "N": N, "K": K}, params)
    inputs.update(M=np.int32(M), N=np.int32(N), K=np.int32(K))
    reference = GEMM.reference(inputs, params)
    grid = compiled.grid(M=M, N=N, K=K)
    sites = inserted(lowered.items)
    assert sum(items[i].opcode == "s_waitcnt" for items, i in sites) >= 4
    silent = silent_weakenings(
        sites, lambda: outcome(lowered, lowered.items, inputs, reference, grid) == "silent")
    assert not silent, "waits that can be weakened without effect:\n" + "\n".join(silent)


@T.kernel(waves=1)
def one_mfma(A: Tensor("bf16", 32, 16), B: Tensor("bf16", 32, 16), C: Tensor("f32", 32, 32), *,
             instr: str = "v_mfma_f32_32x32x8_bf16"):
    """One wave, one MFMA, its result stored at once: the store must wait the MFMA's passes."""
    T.grid(1)
    a = A.load((0, 0), T.mfma_layout(instr, "a", (1, 1)))
    b = B.load((0, 0), T.mfma_layout(instr, "b", (1, 1)))
    C.store((0, 0), T.mfma(instr, a, b, T.zeros(T.mfma_layout(instr, "c", (1, 1)))))


@pytest.mark.parametrize("instr", ["v_mfma_f32_32x32x8_bf16", "v_mfma_f32_16x16x16_bf16"])
def test_mfma_result_hazard_nops_are_necessary(instr):
    compiled = argus.compile(one_mfma, instr=instr)
    info = mfma(instr)
    rng = np.random.default_rng(1)
    A = rng.standard_normal((32, 16)).astype(bfloat16)
    B = rng.standard_normal((32, 16)).astype(bfloat16)
    C = np.zeros((32, 32), np.float32)
    compiled.run(A, B, C)
    m, k = info.m, info.k
    reference = np.zeros((32, 32), np.float32)
    reference[:m, :m] = A[:m, :k].astype(np.float32) @ B[:m, :k].astype(np.float32).T
    assert np.abs(C - reference).max() < 1e-3
    lowered = compiled.lowered
    sites = inserted(lowered.items)
    nops = [items[i] for items, i in sites if items[i].opcode == "s_nop"]
    # the first store reads the MFMA result: the table's wait states, no more
    assert sum(int(n.operands[0]) + 1 for n in nops) + 0 <= isa.mfma_to_read_wait_states(info)
    assert nops

    def unnoticed():
        try:
            emulate(assemble(lowered.render()), grid=1, block=64,
                    args=[A, B, np.zeros_like(C)], check="strict")
        except (EmulatorError, LaunchError):
            return False
        return True
    assert not silent_weakenings(sites, unnoticed)


def test_independent_instructions_fill_a_hazard_before_any_nop():
    acc, a, b = VReg("v", 16, phys=0), VReg("v", 2, phys=16), VReg("v", 2, phys=18)
    out, free = VReg("v", 1, phys=30), [VReg("v", 1, phys=40 + i) for i in range(4)]
    mfma_inst = MInst("v_mfma_f32_32x32x8_bf16", (acc, a, b, acc), 1)
    read = MInst("v_mov_b32_e32", (out, acc[3]), 1)
    independent = [MInst("v_add_u32_e32", (free[i], 1, free[3]), 1) for i in range(3)]
    dependent = MInst("v_add_u32_e32", (free[3], 1, out), 1)
    program = [mfma_inst, read, *independent, dependent]
    insert_nops(program)
    need = isa.mfma_to_read_wait_states(mfma("v_mfma_f32_32x32x8_bf16"))
    assert program[:4] == [mfma_inst, *independent]
    assert program[4].opcode == "s_nop" and int(program[4].operands[0]) + 1 == need - 3
    assert program[5:] == [read, dependent]


def test_every_wait_of_the_moe_gemm_is_necessary():
    """The gather path too: row ids, scalar expert id, guarded loads and stores."""
    entry = library()["moe_gemm"]
    compiled = argus.compile(entry.kernel)
    lowered = compiled.lowered
    # H = 4 K tiles: the staged loop runs 3 times (interleave: one unrolled pair and the
    # remainder copy) and the last tile after it, so every inserted wait executes
    inputs = entry.inputs({"TOKENS": 100, "H": 128, "E": 2, "N": 64}, {}, seed=1)
    arrays = {t.name: inputs[t.name] for t in compiled.ir.tensors}
    reference = entry.reference(inputs, {})
    binding = bind(compiled.ir, (), arrays)
    bound, sizes = binding.arrays, binding.sizes
    sites = inserted(lowered.items)
    assert sum(items[i].opcode == "s_waitcnt" for items, i in sites) >= 3
    tolerance = 1e-3 * np.abs(reference).max()
    silent = silent_weakenings(sites, lambda: emulation_passes(compiled, bound, sizes, "Y",
                                                               reference, tolerance))
    assert not silent, "waits that can be weakened without effect:\n" + "\n".join(silent)


def _global_relayouts():
    """Re-layouts through a global scratch tensor: a store, the barrier (`T.barrier()`, or
    `T.wait()` then a bare barrier), a load of other waves' elements."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "bugs"))
    import ordering
    import programs
    return {"barrier": programs.relayout(), "wait+bare": ordering.global_scratch()}


@pytest.mark.parametrize("name", ["barrier", "wait+bare"])
def test_a_global_store_is_waited_for_before_the_barrier_that_publishes_it(name):
    """Between the scratch store and `s_barrier` stands an `s_waitcnt vmcnt(0)` (inserted for
    `T.barrier()`, the program's own for `T.wait()`); the strict emulator, which reports a
    global store in flight at a barrier, runs the code clean and the re-layout is right, and
    weakening that wait to vmcnt(1) is reported."""
    compiled = argus.compile(_global_relayouts()[name])
    items = compiled.lowered.items
    flat = [(n, item) for n, item in enumerate(items) if isinstance(item, MInst)]
    store = next(k for k, (_, item) in enumerate(flat) if item.opcode.startswith("buffer_store"))
    barrier = next(k for k, (_, item) in enumerate(flat) if item.opcode == "s_barrier")
    waits = [(n, item) for n, item in flat[store + 1:barrier] if item.opcode == "s_waitcnt"]
    assert [item.mods.split()[0] for _, item in waits] == ["vmcnt(0)"]
    assert bool(waits[0][1].inserted) == (name == "barrier")
    X = np.arange(32 * 16, dtype=np.float32).reshape(32, 16)

    def strict_run():
        args = {"X": X, "W": np.zeros_like(X), "Y": np.zeros_like(X), "N": np.int32(32)}
        emulate(assemble(compiled.lowered.render()), grid=compiled.grid(N=32), block=256,
                args=args, check="strict")
        return args["Y"]
    assert np.array_equal(strict_run(), X)
    index, wait = waits[0]
    items[index] = MInst("s_waitcnt", (), 0, wait.mods.replace("vmcnt(0)", "vmcnt(1)"))
    try:
        with pytest.raises(EmulatorError, match="global store is still in flight at s_barrier"):
            strict_run()
    finally:
        items[index] = wait


@pytest.mark.parametrize("name,params", [("gemm", {}), ("attention_fwd", {"head_dim": 128})])
def test_mfmas_share_their_lds_waits_in_pairs(name, params):
    # AMD's loops wait per group of MFMAs; one wait per MFMA doubled the main loop's waits
    text = argus.compile(library()[name].kernel, **params).text
    ops = [line.split()[0] for line in text.splitlines()
           if line.strip() and not line.strip().startswith((";", "."))]
    runs = [i for i in range(len(ops) - 3)
            if ops[i] == "s_waitcnt" and ops[i + 1].startswith("v_mfma")
            and ops[i + 2] == "s_waitcnt" and ops[i + 3].startswith("v_mfma")]
    assert not runs, f"{len(runs)} MFMAs each waited for alone"
    assert sum(op.startswith("v_mfma") for op in ops) > 2 * ops.count("s_waitcnt") // 3

"""Launching a kernel: a compiled kernel's arrays, sizes and scalars bound to its IR signature
(`bind`, `sizes_of`); argument binding and kernarg packing by the code object metadata's layout,
the dispatch geometry (grid of workgroups, block of work-items, the AQL dispatch packet), and
`emulate(code_object, kernel, grid=, block=, args=)`, which prepares a launch and runs it in the
emulator. Every device packs through the same `Launch`; only the buffer addresses differ.
"""

from __future__ import annotations

import os
import struct
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from argus.asm.codeobject import CodeObject
from argus.ir import ops as O
from argus.ir.bind import sizes_of
from argus.isa_cdna3 import isa
from argus.isa_cdna3.abi import Dim3, KernelArg, KernelInfo, Launch, LaunchError
from argus.isa_cdna3.emu import Emulation, Program, UnsupportedOpcodeError, load_program, run
from argus.isa_cdna3.numerics import ELEMENT_DTYPES


@attrs.frozen
class Bound:
    """A compiled kernel's launch arguments bound to its IR signature: the arrays by tensor
    name, the sizes read off their shapes, the scalar arguments, and all of them by kernel
    argument name (sizes and scalars as int32), as `prepare` takes them."""

    arrays: dict[str, np.ndarray]
    sizes: dict[str, int]
    scalars: dict[str, int]
    arguments: dict[str, Any]


def bind(ir: O.Kernel, arrays: Sequence[np.ndarray] = (), named: Mapping[str, Any] | None = None
         ) -> Bound:
    """Bind arrays by position (in tensor order) or by name and scalar arguments by name to the
    kernel `ir`: dtypes, ranks, shapes, scalar ranges and the kernel's assumptions checked."""
    named = dict(named or {})
    scalars = bind_scalars(ir, named)
    bound = bind_arrays(ir, arrays, named)
    sizes = sizes_of(ir, bound, scalars, error=LaunchError)
    return Bound(bound, sizes, scalars, kernel_arguments(ir, bound, sizes, scalars))


def bind_arrays(ir: O.Kernel, arrays: Sequence[np.ndarray], named: Mapping[str, Any]
                ) -> dict[str, np.ndarray]:
    """The tensor arguments by name, given by position or name, each a numpy array of its
    tensor's dtype."""
    names = [t.name for t in ir.tensors]
    if len(arrays) > len(names):
        raise LaunchError(f"{ir.name} takes {len(names)} arrays ({', '.join(names)}), "
                          f"got {len(arrays)}")
    bound = dict(zip(names, arrays))
    for name, value in named.items():
        if name not in names:
            raise LaunchError(f"{ir.name} has no array argument {name!r}; it has {names}")
        if name in bound:
            raise LaunchError(f"{ir.name}: {name} given by position and by name")
        bound[name] = value
    missing = [n for n in names if n not in bound]
    if missing:
        raise LaunchError(f"{ir.name}: missing array(s) {missing}")
    for tensor in ir.tensors:
        array = bound[tensor.name]
        want = ELEMENT_DTYPES[tensor.type.dtype]
        if isinstance(array, np.ndarray) and array.dtype == np.bool_ and want == np.uint8:
            # a bool array is one byte per element, 0 or 1: a u8 tensor reads it in place
            array = bound[tensor.name] = array.view(np.uint8)
        if not isinstance(array, np.ndarray) or array.dtype != want:
            raise LaunchError(f"{ir.name}: {tensor.name} must be a numpy array of {want}, "
                              f"got {getattr(array, 'dtype', type(array).__name__)}")
    return bound


def bind_scalars(ir: O.Kernel, named: dict[str, Any]) -> dict[str, int]:
    """The kernel's scalar arguments taken out of `named`, each within its declared range."""
    scalars = {}
    for var in ir.scalars:
        if var.name not in named:
            raise LaunchError(f"{ir.name}: pass the scalar argument {var.name}= (an integer "
                              f"in [{var.lo}, {var.hi}))")
        value = named.pop(var.name)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                or not var.lo <= int(value) < var.hi:
            raise LaunchError(f"{ir.name}: scalar {var.name}={value!r} is not an integer "
                              f"in its declared range [{var.lo}, {var.hi})")
        scalars[var.name] = int(value)
    return scalars


def kernel_arguments(ir: O.Kernel, arrays: Mapping[str, np.ndarray], sizes: Mapping[str, int],
                     scalars: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Kernel arguments by name: the arrays, the sizes the kernel reads, its scalars."""
    values: dict[str, Any] = dict(arrays)
    for var in ir.sizes:
        values[var.name] = np.int32(sizes[var.name])
    for name, value in (scalars or {}).items():
        values[name] = np.int32(value)
    return values


def prepare(info: KernelInfo, *, grid: int | Sequence[int], block: int | Sequence[int],
            args: Mapping[str, Any] | Sequence[Any] = (),
            groups: Sequence[int] | None = None) -> Launch:
    """Check `grid`/`block` against the kernel and bind `args` (positionally or by name; unnamed
    by-value arguments are 0): numpy arrays go to global_buffer arguments, Python or numpy
    scalars are packed by value, None is a null pointer. `groups` (distinct linear workgroup
    ids, x fastest) runs only those workgroups of the grid."""
    grid3, block3 = _xyz(grid, "grid"), _xyz(block, "block")
    if any(g > limit for g, limit in zip(grid3, MAX_GRID)):
        raise LaunchError(f"grid {grid3} exceeds the dispatch limits {MAX_GRID}")
    chosen = None
    if groups is not None:
        chosen = tuple(int(g) for g in groups)
        total = grid3[0] * grid3[1] * grid3[2]
        if not chosen or len(set(chosen)) != len(chosen) or not all(
                0 <= g < total for g in chosen):
            raise LaunchError(f"groups={list(groups)[:8]}... must be distinct workgroup ids in "
                              f"0..{total - 1} (the grid {grid3} has {total})",
                              fix="pass linear ids x + gx * (y + gy * z) of the grid's "
                                  "workgroups, each once")
    threads = block3[0] * block3[1] * block3[2]
    if threads > info.max_flat_workgroup_size:
        raise LaunchError(f"block of {threads} work-items exceeds the kernel's "
                          f"max_flat_workgroup_size {info.max_flat_workgroup_size}")
    reqd = info.metadata.get(".reqd_workgroup_size")
    if reqd and tuple(reqd) != block3:
        raise LaunchError(f"kernel {info.name} requires block {tuple(reqd)}, got {block3}")
    segment = bytearray(max(info.kernarg_size, 8))
    buffers: list[tuple[str, np.ndarray]] = []
    index_of: dict[int, int] = {}          # id(array) -> buffer: an array passed twice aliases
    pointers = []
    for arg, value in _bind_args(info, args):
        if isinstance(value, np.ndarray):
            if arg.value_kind != "global_buffer":
                raise LaunchError(f"argument {arg.name!r} is {arg.value_kind}; only "
                                  f"global_buffer arguments take arrays")
            if value.dtype.hasobject:
                raise LaunchError(f"argument {arg.name!r} is an array of Python objects; a "
                                  "buffer holds numbers", fix="pass a numeric numpy array")
            if not value.flags.c_contiguous:
                raise LaunchError(f"argument {arg.name!r} must be C-contiguous "
                                  f"(use np.ascontiguousarray)")
            if not value.flags.writeable:
                # results are written back into the arrays: refuse now, not after the run
                raise LaunchError(f"argument {arg.name!r} is a read-only array; the kernel's "
                                  "buffers are copied back into the arrays after the run",
                                  fix="pass a writeable array (np.array(x) copies one)")
            if id(value) not in index_of:
                index_of[id(value)] = len(buffers)
                buffers.append((arg.name, value))
            pointers.append((arg.offset, index_of[id(value)]))
            continue
        if value is None:
            raw = bytes(arg.size)
        elif arg.value_kind == "global_buffer":
            raise LaunchError(f"argument {arg.name!r} is a buffer; pass a numpy array or None")
        else:
            raw = _by_value_bytes(value, arg.size, arg.name, arg.value_type)
        segment[arg.offset:arg.offset + arg.size] = raw[: arg.size]
    for arg in info.args:
        if arg.value_kind.startswith("hidden_"):
            segment[arg.offset:arg.offset + arg.size] = _hidden_value(
                arg.value_kind, grid3, block3).to_bytes(arg.size, "little")
    return Launch(info, grid3, block3, tuple(buffers), tuple(pointers), bytes(segment), chosen)


def emulate(code_object: CodeObject | str | os.PathLike | bytes,
            kernel: str | KernelInfo | None = None, *, grid: int | Sequence[int],
            block: int | Sequence[int], args: Mapping[str, Any] | Sequence[Any] = (),
            check: str = "strict", max_wave_instructions: int | None = None,
            bank_conflicts: bool = False, memory: str = "strict", trace: bool = False,
            groups: Sequence[int] | None = None) -> Emulation:
    """Run `kernel` over `grid` workgroups of `block` work-items (HIP's gridDim/blockDim) in the
    emulator.

    `args` are the kernel's explicit arguments, positionally or by name (unnamed by-value
    arguments are 0): numpy arrays become device buffers and are written back in place, Python
    or numpy scalars are packed by value.

    `check` says what happens when a register is read before its producer delivered it:
    "strict" raises HazardError at the first such read; "warn" records each in
    `Emulation.hazards` and continues with silicon's likely timing: the load has landed (it and
    every older result of its counter retire, as an `s_waitcnt` would) and the MFMA result is
    there; "off" records nothing and is adversarial: a load not retired by `s_waitcnt`, or an
    MFMA result read sooner than the wait-state table (LLVM's, which is conservative: AMD's own
    attention kernels under-wait it and are correct on silicon), reads the register's old value.
    AMD's fmoe_b16 under-waits weight loads issued hundreds of MFMAs earlier, so run vendor
    kernels in "warn" mode.

    Waves at different PCs interleave in turns of `QUANTUM` wait states, the wave furthest
    behind going next, so code that relies on waves leaving a barrier together behaves as on
    silicon.

    `memory`: "strict" faults on any access outside the argument buffers; "lenient" reads 0 and
    drops writes there and counts them (`Emulation.unmapped_accesses`): AMD's attention kernels
    over-read up to a row past a buffer inside its V# range, harmless on a real heap.

    `bank_conflicts` adds LDS cycles per instruction under the 32-bank phase model
    (`Emulation.lds_cycles`, `lds_conflict_factor`); it costs a sort per LDS access.

    `trace` records the ordered per-wave event trace the performance model schedules
    (`Emulation.events`); it implies `bank_conflicts` and costs a sort per memory access.

    `groups` (distinct linear workgroup ids, x fastest) runs only those workgroups of `grid`,
    each with its own id (the performance model's samples of workgroups whose work differs);
    the trace numbers them 0, 1, ... in the order given.

    `max_wave_instructions` bounds the instructions any one wave executes (default
    `emu.emulator.MAX_WAVE_INSTRUCTIONS`, about a million): a wave past it is a run-away, an
    EmulatorError naming the PC it loops at. A spin that changes nothing (`emu.emulator.SpinWatch`)
    is stopped long before, whatever the budget.
    """
    co = _load(code_object)
    if co.mcpu not in isa.CDNA3_TARGETS:
        raise LaunchError(f"the code object is built for {co.mcpu}; the emulator runs CDNA3 "
                          f"({', '.join(isa.CDNA3_TARGETS)}) code only, and {co.mcpu} decodes "
                          "and times differently", fix="assemble it with --mcpu gfx942",
                          kind="unsupported")
    info = _kernel(co, kernel)
    launch = prepare(info, grid=grid, block=block, args=args, groups=groups)
    options = {} if max_wave_instructions is None else {
        "max_wave_instructions": max_wave_instructions}
    return run(program(co, info), launch, check=check, bank_conflicts=bank_conflicts,
               memory=memory, trace=trace, **options)


_PROGRAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def program(co: CodeObject, info: KernelInfo) -> Program:
    """The emulator's compiled form of a kernel, made once per code object and kernel."""
    per_object = _PROGRAMS.setdefault(co, {})
    if info.symbol not in per_object:
        per_object[info.symbol] = load_program(co.disassemble(info), info)
    return per_object[info.symbol]


def unsupported_opcodes(code_object: CodeObject | str | os.PathLike | bytes,
                        kernel: str | KernelInfo | None = None) -> dict[str, list[str]]:
    """Opcode forms of the kernel the emulator cannot run (empty when it runs all of them)."""
    co = _load(code_object)
    info = _kernel(co, kernel)
    try:
        program(co, info)
    except UnsupportedOpcodeError as err:
        return err.missing
    return {}


#: workgroups per grid axis a dispatch may have (HIP: gridDim.x < 2^31, y and z < 2^16)
MAX_GRID = (2**31 - 1, 2**16 - 1, 2**16 - 1)


def _xyz(value: int | Sequence[int], what: str) -> Dim3:
    """1 to 3 positive whole numbers (a string such as "12" is not a sequence of sizes)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (int, np.integer, Sequence,
                                                                 np.ndarray)) \
            or (isinstance(value, np.ndarray) and value.ndim != 1):
        raise LaunchError(f"{what} must be an int or 1 to 3 ints, got {value!r}",
                          fix=f"pass {what}=(x, y, z) or {what}=x")
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if (not 1 <= len(dims) <= 3
            or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1
                   for d in dims)):
        raise LaunchError(f"{what} must be 1 to 3 positive ints, got {value!r}",
                          fix=f"pass {what}=(x, y, z) or {what}=x with whole numbers >= 1")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


def _load(code_object: CodeObject | str | os.PathLike | bytes) -> CodeObject:
    if isinstance(code_object, CodeObject):
        return code_object
    if isinstance(code_object, (bytes, bytearray)):
        return CodeObject.from_bytes(bytes(code_object))
    return CodeObject.from_file(code_object)


def _kernel(co: CodeObject, kernel: str | KernelInfo | None) -> KernelInfo:
    if isinstance(kernel, KernelInfo):
        return kernel
    if kernel is None:
        if len(co.kernels) != 1:
            names = ", ".join(k.name for k in co.kernels)
            raise LaunchError(f"the code object has {len(co.kernels)} kernels ({names}); "
                              f"pass kernel=NAME")
        return co.kernels[0]
    return co.kernel(kernel)


def _bind_args(info: KernelInfo, args: Mapping[str, Any] | Sequence[Any]
               ) -> list[tuple[KernelArg, Any]]:
    """(KernelArg, value) for every explicit argument; unnamed by-value ones default to 0."""
    explicit = [a for a in info.args if not a.value_kind.startswith("hidden_")]
    if args is None:
        args = ()
    if isinstance(args, (str, bytes)) or not isinstance(args, (Mapping, Sequence)):
        raise LaunchError(f"kernel {info.name}: args= takes the arguments as a dict by name or "
                          f"a sequence in order, not {type(args).__name__}",
                          fix="pass args={" + ", ".join(f"{a.name!r}: ..." for a in explicit) + "}")
    if isinstance(args, Mapping):
        names = {a.name for a in explicit}
        unknown = set(args) - names
        if unknown:
            raise LaunchError(f"kernel {info.name} has no argument(s) {sorted(unknown)}; its "
                              f"arguments are {[a.name for a in explicit]}")
        bound = []
        for arg in explicit:
            if arg.name in args:
                bound.append((arg, args[arg.name]))
            elif arg.value_kind == "by_value":
                bound.append((arg, 0))
            else:
                bound.append((arg, None))
        return bound
    if len(args) != len(explicit):
        raise LaunchError(f"kernel {info.name} takes {len(explicit)} arguments "
                          f"({', '.join(a.name for a in explicit)}), got {len(args)}; pass a "
                          f"dict to name only some of them")
    return list(zip(explicit, args))


#: struct formats of the floats a by-value slot of that many bytes holds
_FLOAT_FORMATS = {2: "<e", 4: "<f", 8: "<d"}


def _by_value_bytes(value: Any, size: int, name: str, value_type: str = "") -> bytes:
    """`value` packed into a `size`-byte by-value slot, or a LaunchError naming the argument:
    an integer must fit the slot (its declared signedness when the metadata gives
    `.value_type`, else signed or unsigned), a float must be representable in it."""
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        number = int(value)
        signed = value_type.startswith("i") or (not value_type.startswith("u") and number < 0)
        bits = 8 * size
        low, high = (-(1 << (bits - 1)), 1 << (bits - 1)) if signed else (0, 1 << bits)
        if not low <= number < high:
            kind = value_type or f"{size}-byte integer"
            raise LaunchError(f"argument {name!r}: {number} does not fit its {kind} slot "
                              f"[{low}, {high})", fix=f"pass a value in [{low}, {high})")
        return number.to_bytes(size, "little", signed=signed)
    if isinstance(value, np.floating) and value.itemsize == size:
        return value.tobytes()
    if isinstance(value, (float, np.floating)) and size in _FLOAT_FORMATS:
        try:
            return struct.pack(_FLOAT_FORMATS[size], float(value))
        except OverflowError:
            raise LaunchError(f"argument {name!r}: {value!r} overflows its {size}-byte float "
                              "slot", fix="pass a value the slot's float format holds") from None
    if isinstance(value, (float, np.floating)):
        raise LaunchError(f"argument {name!r} is a {size}-byte slot, which holds no float",
                          fix="pass an int")
    raise LaunchError(f"argument {name!r}: by-value arguments take int, float or a numpy "
                      f"scalar, got {type(value).__name__}",
                      fix="pass an int or float (numpy arrays go to buffer arguments)")


def _hidden_value(kind: str, grid: Dim3, block: Dim3) -> int:
    axis = {"x": 0, "y": 1, "z": 2}.get(kind[-1], 0)
    if kind.startswith("hidden_block_count_"):
        return grid[axis]
    if kind.startswith("hidden_group_size_"):
        return block[axis]
    if kind == "hidden_grid_dims":
        return sum(1 for g, b in zip(grid, block) if g * b > 1) or 1
    return 0

"""The gfx942 MFMA catalogue: shapes, types, timing, register counts and operand layouts.

Every layout is one formula in lane and slot/register built from + - * // % only, so it evaluates on
Python ints, numpy int arrays and `argus.ir.expr` terms alike. Source: AMD's
amd_matrix_instruction_calculator (`-a cdna3 -d`, and `-k` for the SMFMAC compression indices),
cross-checked against cdna3-facts.md §1.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

import attrs

from argus.errors import ArgusError

#: Bits per element of each operand type; "xf32" is f32 data computed at reduced precision.
TYPE_BITS = {"f16": 16, "bf16": 16, "fp8": 8, "bf8": 8, "i8": 8, "xf32": 32, "f32": 32,
             "f64": 64, "i32": 32}


class UnknownMfmaError(ArgusError, KeyError, ValueError):
    """An MFMA name that is not in the gfx942 catalogue."""


class MfmaLayoutError(ArgusError, ValueError):
    """A layout query this MFMA cannot answer: the dense A layout of a 4:2-sparse SMFMAC, a sparse
    query on a dense MFMA, or a compression-index set the modifiers do not select."""


@attrs.frozen
class MfmaInfo:
    """One gfx942 matrix instruction: D[b] = A[b] @ B[b] + C[b] for each of `blocks` blocks.

    Register counts are 32-bit registers per lane. `k_per_lane` is the number of A elements one
    lane holds, `b_per_lane` of B elements (equal for dense MFMAs, twice as many for SMFMAC);
    `c_values` the number of C/D elements one lane holds (c_regs, or c_regs // 2 for f64).
    Coordinates: a_coord(lane, slot) -> (block, i, k), b_coord(lane, slot) -> (block, k, j),
    c_coord(lane, value) -> (block, i, j).

    A sparse SMFMAC (`sparse`) computes D += A @ B with A 4:2 structured-sparse along K: of every
    four consecutive k of a row two are stored. The stored M x K/2 matrix is laid out by
    compressed_a_coord(lane, slot) -> (block, i, c); the index VGPR (same lane) holds one 2-bit
    index per stored value at bit index_bit(slot, cbsz, abid), and sparse_a_coord(lane, slot,
    index) names the logical (block, i, k) that value stands for.
    """

    name: str
    m: int
    n: int
    k: int
    blocks: int
    a_type: str
    b_type: str
    c_type: str
    cycles: int
    a_regs: int
    b_regs: int
    c_regs: int
    opcode: int
    sparse: bool = False

    @property
    def passes(self) -> int:
        return self.cycles // 4

    @property
    def is_xdl(self) -> bool:
        # LLVM's GFX940 XDL set: every MFMA except the legacy f32 and the f64 (DGEMM) ones.
        return self.a_type not in ("f32", "f64")

    @property
    def is_dgemm(self) -> bool:
        return self.c_type == "f64"

    @property
    def k_per_lane(self) -> int:
        return self.a_regs * 32 // TYPE_BITS[self.a_type]

    @property
    def b_per_lane(self) -> int:
        return self.b_regs * 32 // TYPE_BITS[self.b_type]

    @property
    def index_sets(self) -> int:
        """How many independent sets of compression indices fit in one index VGPR (SMFMAC)."""
        _require_sparse(self, "index_sets")
        return 32 // (2 * self.k_per_lane)

    @property
    def c_values(self) -> int:
        return self.c_regs * 32 // TYPE_BITS[self.c_type]

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * self.blocks

    def a_coord(self, lane: Any, slot: Any) -> tuple[Any, Any, Any]:
        if self.sparse:
            raise MfmaLayoutError(
                f"{self.name}: the A operand is 4:2-sparse, so which k a register holds depends on "
                f"the compression index; use compressed_a_coord(lane, slot) for the stored "
                f"matrix and sparse_a_coord(lane, slot, index) for the logical k")
        block, i, k = _operand_coord(self, lane, slot, self.m, self.k_per_lane)
        return block, i, k

    def b_coord(self, lane: Any, slot: Any) -> tuple[Any, Any, Any]:
        block, j, k = _operand_coord(self, lane, slot, self.n, self.b_per_lane)
        return block, k, j

    def compressed_a_coord(self, lane: Any, slot: Any) -> tuple[Any, Any, Any]:
        """(block, i, c) of the stored M x K/2 A matrix that A register slot `slot` holds: the
        dense rule over the compressed columns (calculator: `A i = lane % M`, each register
        covering two groups of four k for 8-bit types and one for 16-bit types)."""
        _require_sparse(self, "compressed_a_coord")
        block, i, c = _operand_coord(self, lane, slot, self.m, self.k_per_lane)
        return block, i, c

    def sparse_a_coord(self, lane: Any, slot: Any, index: Any) -> tuple[Any, Any, Any]:
        """(block, i, k) of the logical A element that A slot `slot` of `lane` holds when its
        2-bit compression index is `index` (0..3): stored values come in pairs, pair p standing
        for k = 4p .. 4p+3 of the lane's K window, the index picking one of the four."""
        block, i, c = self.compressed_a_coord(lane, slot)
        return block, i, c // 2 * 4 + index

    def index_set(self, cbsz: int = 0, abid: int = 0) -> int:
        """Which set of compression indices the index VGPR supplies. SMFMAC reuses CBSZ/ABID: with
        CBSZ == 0, ABID picks one of `index_sets` sets; any other CBSZ selects set 0 and ABID is
        ignored (calculator README, "Printing Compression Index Information")."""
        _require_sparse(self, "index_set")
        if cbsz:
            return 0
        if not 0 <= abid < self.index_sets:
            raise MfmaLayoutError(
                f"{self.name}: abid:{abid} with cbsz:0 selects no compression-index set; "
                f"{self.a_type} operands have sets 0..{self.index_sets - 1} (the behaviour of "
                f"larger ABID values is not modelled)")
        return abid

    def index_bit(self, slot: Any, cbsz: int = 0, abid: int = 0) -> Any:
        """Lowest bit, in the same lane's index VGPR, of the 2-bit compression index of A slot
        `slot`: slots in register order take consecutive 2-bit fields of the selected set (the
        first value of a stored pair the lower field, per the calculator README)."""
        set_width = 2 * self.k_per_lane
        return self.index_set(cbsz, abid) * set_width + slot * 2

    def c_coord(self, lane: Any, value: Any) -> tuple[Any, Any, Any]:
        return _C_LAYOUTS[(self.m, self.c_type == "f64")](self, lane, value)

    def __str__(self) -> str:
        return self.name


def _require_sparse(info: MfmaInfo, what: str) -> None:
    if not info.sparse:
        raise MfmaLayoutError(f"{info.name} is a dense MFMA; {what} describes the compressed A "
                              f"operand of v_smfmac_* only (use a_coord)")


def _operand_coord(info: MfmaInfo, lane: Any, slot: Any, rows: int, per_lane: int
                   ) -> tuple[Any, Any, Any]:
    """A and B share one rule: lane = row + rows*block + rows*blocks*kgroup.

    Within a lane, `slot` walks K (low half/byte of the first register first). The lane group
    above all blocks selects which per_lane-wide slice of K the lane holds.
    """
    row = lane % rows
    block = lane // rows % info.blocks
    kgroup = lane // (rows * info.blocks)
    return block, row, kgroup * per_lane + slot


def _c_coord_32(info: MfmaInfo, lane: Any, reg: Any) -> tuple[Any, Any, Any]:
    # 16 registers per block; each group of 4 registers covers 8 rows split over two lane halves.
    in_block = reg % 16
    i = in_block // 4 * 8 + lane // 32 * 4 + in_block % 4
    return reg // 16, i, lane % 32


def _c_coord_16(info: MfmaInfo, lane: Any, reg: Any) -> tuple[Any, Any, Any]:
    return reg // 4, lane // 16 * 4 + reg % 4, lane % 16


def _c_coord_4(info: MfmaInfo, lane: Any, reg: Any) -> tuple[Any, Any, Any]:
    # 4x4 blocks live side by side across lanes, one row per register.
    return lane // 4, reg % 4, lane % 4


def _c_coord_16_f64(info: MfmaInfo, lane: Any, value: Any) -> tuple[Any, Any, Any]:
    return value * 0, value * 4 + lane // 16, lane % 16


def _c_coord_4_f64(info: MfmaInfo, lane: Any, value: Any) -> tuple[Any, Any, Any]:
    return lane // 4 % 4, lane // 16 + value * 0, lane % 4


_C_LAYOUTS: dict[tuple[int, bool], Callable[[MfmaInfo, Any, Any], tuple[Any, Any, Any]]] = {
    (32, False): _c_coord_32,
    (16, False): _c_coord_16,
    (4, False): _c_coord_4,
    (16, True): _c_coord_16_f64,
    (4, True): _c_coord_4_f64,
}


# name, M, N, K, blocks, cycles, A regs, B regs, C regs (AMD calculator `-a cdna3 -d`), VOP3P
# opcode as llvm-mc encodes it (the calculator prints 0x54 for both i8 x16/x32 shapes)
_TABLE = """
v_mfma_f32_16x16x8_xf32      16 16  8  1 16 2 2  4 0x3e
v_mfma_f32_32x32x4_xf32      32 32  4  1 32 2 2 16 0x3f
v_mfma_f32_32x32x1_2b_f32    32 32  1  2 64 1 1 32 0x40
v_mfma_f32_16x16x1_4b_f32    16 16  1  4 32 1 1 16 0x41
v_mfma_f32_4x4x1_16b_f32      4  4  1 16  8 1 1  4 0x42
v_mfma_f32_32x32x2_f32       32 32  2  1 64 1 1 16 0x44
v_mfma_f32_16x16x4_f32       16 16  4  1 32 1 1  4 0x45
v_mfma_f32_32x32x4_2b_f16    32 32  4  2 64 2 2 32 0x48
v_mfma_f32_16x16x4_4b_f16    16 16  4  4 32 2 2 16 0x49
v_mfma_f32_4x4x4_16b_f16      4  4  4 16  8 2 2  4 0x4a
v_mfma_f32_32x32x8_f16       32 32  8  1 32 2 2 16 0x4c
v_mfma_f32_16x16x16_f16      16 16 16  1 16 2 2  4 0x4d
v_mfma_i32_32x32x4_2b_i8     32 32  4  2 64 1 1 32 0x50
v_mfma_i32_16x16x4_4b_i8     16 16  4  4 32 1 1 16 0x51
v_mfma_i32_4x4x4_16b_i8       4  4  4 16  8 1 1  4 0x52
v_mfma_i32_32x32x16_i8       32 32 16  1 32 2 2 16 0x56
v_mfma_i32_16x16x32_i8       16 16 32  1 16 2 2  4 0x57
v_mfma_f32_32x32x4_2b_bf16   32 32  4  2 64 2 2 32 0x5d
v_mfma_f32_16x16x4_4b_bf16   16 16  4  4 32 2 2 16 0x5e
v_mfma_f32_4x4x4_16b_bf16     4  4  4 16  8 2 2  4 0x5f
v_mfma_f32_32x32x8_bf16      32 32  8  1 32 2 2 16 0x60
v_mfma_f32_16x16x16_bf16     16 16 16  1 16 2 2  4 0x61
v_smfmac_f32_16x16x32_f16    16 16 32  1 16 2 4  4 0x62
v_smfmac_f32_32x32x16_f16    32 32 16  1 32 2 4 16 0x64
v_smfmac_f32_16x16x32_bf16   16 16 32  1 16 2 4  4 0x66
v_smfmac_f32_32x32x16_bf16   32 32 16  1 32 2 4 16 0x68
v_smfmac_i32_16x16x64_i8     16 16 64  1 16 2 4  4 0x6a
v_smfmac_i32_32x32x32_i8     32 32 32  1 32 2 4 16 0x6c
v_mfma_f64_16x16x4_f64       16 16  4  1 32 2 2  8 0x6e
v_mfma_f64_4x4x4_4b_f64       4  4  4  4 16 2 2  2 0x6f
v_mfma_f32_16x16x32_bf8_bf8  16 16 32  1 16 2 2  4 0x70
v_mfma_f32_16x16x32_bf8_fp8  16 16 32  1 16 2 2  4 0x71
v_mfma_f32_16x16x32_fp8_bf8  16 16 32  1 16 2 2  4 0x72
v_mfma_f32_16x16x32_fp8_fp8  16 16 32  1 16 2 2  4 0x73
v_mfma_f32_32x32x16_bf8_bf8  32 32 16  1 32 2 2 16 0x74
v_mfma_f32_32x32x16_bf8_fp8  32 32 16  1 32 2 2 16 0x75
v_mfma_f32_32x32x16_fp8_bf8  32 32 16  1 32 2 2 16 0x76
v_mfma_f32_32x32x16_fp8_fp8  32 32 16  1 32 2 2 16 0x77
v_smfmac_f32_16x16x64_bf8_bf8  16 16 64 1 16 2 4  4 0x78
v_smfmac_f32_16x16x64_bf8_fp8  16 16 64 1 16 2 4  4 0x79
v_smfmac_f32_16x16x64_fp8_bf8  16 16 64 1 16 2 4  4 0x7a
v_smfmac_f32_16x16x64_fp8_fp8  16 16 64 1 16 2 4  4 0x7b
v_smfmac_f32_32x32x32_bf8_bf8  32 32 32 1 32 2 4 16 0x7c
v_smfmac_f32_32x32x32_bf8_fp8  32 32 32 1 32 2 4 16 0x7d
v_smfmac_f32_32x32x32_fp8_bf8  32 32 32 1 32 2 4 16 0x7e
v_smfmac_f32_32x32x32_fp8_fp8  32 32 32 1 32 2 4 16 0x7f
"""


def _operand_types(name: str) -> tuple[str, str, str]:
    """("bf16", "bf16", "f32") from the mnemonic: c type first, then one or two source types."""
    parts = name.split("_")
    c_type = parts[2]
    sources = [p for p in parts[4:] if p in TYPE_BITS]
    a_type = sources[0]
    b_type = sources[1] if len(sources) > 1 else a_type
    return a_type, b_type, c_type


def _parse_table(text: str) -> dict[str, MfmaInfo]:
    table = {}
    for line in text.strip().splitlines():
        name, *fields = line.split()
        m, n, k, blocks, cycles, a_regs, b_regs, c_regs = map(int, fields[:8])
        a_type, b_type, c_type = _operand_types(name)
        table[name] = MfmaInfo(
            name=name, m=m, n=n, k=k, blocks=blocks, a_type=a_type, b_type=b_type,
            c_type=c_type, cycles=cycles, a_regs=a_regs, b_regs=b_regs, c_regs=c_regs,
            opcode=int(fields[8], 16), sparse=name.startswith("v_smfmac"))
    return table


MFMA: dict[str, MfmaInfo] = _parse_table(_TABLE)


def mfma(name: str) -> MfmaInfo:
    """The catalogue entry for `name` (LLVM gfx940+ spelling, with or without an `_e64` suffix)."""
    key = name.strip().lower().removesuffix("_e64")
    if key in MFMA:
        return MFMA[key]
    close = difflib.get_close_matches(key, MFMA, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UnknownMfmaError(
        f"{name!r} is not a gfx942 MFMA{hint} (gfx940+ spells bf16 without `_1k` and blocks as "
        f"`_Nb_`, e.g. v_mfma_f32_4x4x4_16b_bf16)")

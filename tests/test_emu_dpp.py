"""DPP (`*_dpp` VOP1/VOP2) and `ds_swizzle_b32` in the emulator: every DPP map and swizzle mode
of isa_cdna3/lanemaps.py, spelled as LLVM assembles it, against a per-lane numpy reference with
row_mask/bank_mask/bound_ctrl as the ISA states them; and the VALU -> DPP wait states the strict
emulator requires."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from argus.asm import assemble
from argus.asm.launch import emulate
from argus.isa_cdna3.emu import HazardError
from argus.isa_cdna3.kernel_template import kernel_source
from argus.isa_cdna3.lanemaps import (
    LANE_MAPS,
    dpp_control,
    dpp_lane_map,
    lane_table,
    swizzle_lane_map,
    swizzle_offset,
)

OLD = 0x5A5AA5A5          # what every destination holds before its instruction
LANES = np.arange(64)


def _params(name: str) -> list[tuple[int, ...]]:
    """A spread of each map's parameters: the ends of every range and one inside."""
    ranges = LANE_MAPS[name].params
    if not ranges:
        return [()]
    if name.endswith("quad_perm"):
        return [(1, 0, 3, 2), (3, 3, 1, 0), (0, 0, 0, 0), (2, 3, 0, 1)]
    (_, lo, hi), = ranges
    return [(lo,), ((lo + hi) // 2,), (hi - 1,)]


DPP_MAPS = [(name, p) for name in LANE_MAPS if name.startswith("dpp.") for p in _params(name)]
# (opcode, masks) variations, each run for every map
FORMS = [("v_mov_b32_dpp", "row_mask:0xf bank_mask:0xf"),
         ("v_add_f32_dpp", "row_mask:0xf bank_mask:0xf bound_ctrl:1"),
         ("v_max_f32_dpp", "row_mask:0xa bank_mask:0x5"),
         ("v_mov_b32_dpp", "row_mask:0x7 bank_mask:0xe bound_ctrl:0")]
DPP_CASES = [(op, name, p, masks) for name, p in DPP_MAPS for op, masks in FORMS]
# ds_swizzle_b32 offsets, as LLVM's macros and raw, with the map the ISA gives them
SWIZZLES = [("swizzle(QUAD_PERM,1,0,3,2)", ("swizzle.quad_perm", (1, 0, 3, 2))),
            ("swizzle(BITMASK_PERM,\"01pip\")", ("swizzle.bitmask", (7, 8, 2))),
            ("swizzle(SWAP,16)", ("swizzle.bitmask", (31, 0, 16))),
            ("swizzle(REVERSE,8)", ("swizzle.bitmask", (31, 0, 7))),
            ("swizzle(BROADCAST,8,3)", ("swizzle.bitmask", (24, 3, 0))),
            ("0x801f", ("swizzle.quad_perm", (3, 3, 1, 0))),
            ("0x7c00", ("swizzle.bitmask", (0, 0, 31))),
            ("0x2b7a", ("swizzle.bitmask", (26, 27, 10)))]


def _body() -> str:
    """a = v2, b = v3 per lane; each case writes v10 and stores it to dst[case, lane]."""
    lines = ["  s_load_dwordx4 s[4:7], s[0:1], 0x0",
             "  v_lshlrev_b32_e32 v1, 3, v0",
             "  v_lshlrev_b32_e32 v4, 2, v0",
             "  s_waitcnt lgkmcnt(0)",
             "  global_load_dwordx2 v[2:3], v1, s[4:5]",
             "  s_waitcnt vmcnt(0)"]
    cases = [f"{op} v10, v2{', v3' if op != 'v_mov_b32_dpp' else ''} {dpp_control(name, p)} "
             f"{masks}" for op, name, p, masks in DPP_CASES]
    cases += [f"ds_swizzle_b32 v10, v2 offset:{offset}\n  s_waitcnt lgkmcnt(0)"
              for offset, _ in SWIZZLES]
    for text in cases:
        lines += [f"  v_mov_b32_e32 v10, {OLD:#x}", f"  {text}",
                  "  global_store_dword v4, v10, s[6:7]",
                  "  s_add_u32 s6, s6, 256", "  s_addc_u32 s7, s7, 0"]
    return "\n".join(lines + ["  s_waitcnt vmcnt(0)", "  s_endpgm"])


@pytest.fixture(scope="module")
def kernel():
    return assemble(kernel_source("dpp", _body(), [("src", "ptr"), ("dst", "ptr")]))


def _dpp_reference(op: str, source: np.ndarray, masks: str, a: np.ndarray, b: np.ndarray):
    """The ISA's DPP: src0 from the source lane (0 there with bound_ctrl when it is invalid);
    a lane is written where its row and bank are enabled and its read is valid or bounded."""
    fields = dict(m.split(":") for m in masks.split())
    row_mask, bank_mask = int(fields["row_mask"], 16), int(fields["bank_mask"], 16)
    bounded = "bound_ctrl" in fields      # bound_ctrl:0 and :1 both set BOUND_CTRL on gfx9
    valid = source >= 0
    src0 = np.where(valid, a[np.where(valid, source, 0)], np.uint32(0))
    f0, f1 = src0.view(np.float32), b.view(np.float32)
    value = {"v_mov_b32_dpp": src0, "v_add_f32_dpp": (f0 + f1).view(np.uint32),
             "v_max_f32_dpp": np.fmax(f0, f1).view(np.uint32)}[op]
    enabled = ((row_mask >> (LANES // 16)) & 1).astype(bool) & \
        ((bank_mask >> (LANES // 4 % 4)) & 1).astype(bool)
    return np.where(enabled & (valid | bounded), value, np.uint32(OLD))


# sums of these stay normal (the ISA flushes subnormal f32 results; that is tested elsewhere)
FINITE = st.integers(-2**24, 2**24).map(lambda i: i / 64) | st.sampled_from([0.0, -0.0, 1e30])


@given(st.lists(FINITE, min_size=128, max_size=128))
def test_dpp_and_swizzle_match_the_lane_maps(kernel, values):
    words = np.array(values, np.float32).view(np.uint32).reshape(64, 2)
    out = np.zeros((len(DPP_CASES) + len(SWIZZLES), 64), np.uint32)
    emulate(kernel, grid=1, block=64, args=[words, out])
    a, b = words[:, 0].copy(), words[:, 1].copy()
    for (op, name, params, masks), got in zip(DPP_CASES, out):
        expected = _dpp_reference(op, lane_table(name, params), masks, a, b)
        np.testing.assert_array_equal(got, expected, err_msg=f"{op} {name} {params} {masks}")
    for (offset, (name, params)), got in zip(SWIZZLES, out[len(DPP_CASES):]):
        np.testing.assert_array_equal(got, a[lane_table(name, params)], err_msg=offset)


def test_lane_maps_read_the_lanes_the_isa_names():
    """Spot checks of the table against the ISA's words (lane l reads the listed lane)."""
    assert lane_table("dpp.row_shr", (1,))[[0, 1, 16, 17]].tolist() == [-1, 0, -1, 16]
    assert lane_table("dpp.row_shl", (15,))[[0, 1, 48]].tolist() == [15, -1, 63]
    assert lane_table("dpp.row_ror", (1,))[[16, 17, 31]].tolist() == [31, 16, 30]
    assert lane_table("dpp.row_mirror", ())[[0, 15, 20]].tolist() == [15, 0, 27]
    assert lane_table("dpp.row_half_mirror", ())[[0, 7, 8, 63]].tolist() == [7, 0, 15, 56]
    assert lane_table("dpp.row_bcast15", ())[[15, 16, 33, 63]].tolist() == [-1, 15, 31, 47]
    assert lane_table("dpp.row_bcast31", ())[[31, 32, 63]].tolist() == [-1, 31, 31]
    assert lane_table("dpp.wave_shr", ())[[0, 1, 63]].tolist() == [-1, 0, 62]
    assert lane_table("dpp.wave_rol", ())[[0, 63]].tolist() == [1, 0]
    assert lane_table("swizzle.bitmask", (31, 0, 16))[[0, 16, 32, 63]].tolist() == [16, 0, 48, 47]


@pytest.mark.parametrize("name, params", DPP_MAPS)
def test_dpp_controls_round_trip(name, params):
    control = dpp_control(name, params)
    key, _, value = control.partition(":")
    parsed = (tuple(int(v) for v in value.strip("[]").split(",")) if key == "quad_perm"
              else int(value) if value else True)
    assert dpp_lane_map(key, parsed) == (name, params)


@pytest.mark.parametrize("offset", [0, 0x1F, 0x41F, 0x7FFF, 0x8000, 0x80E4, 0xFFFF])
def test_swizzle_offsets_round_trip(offset):
    name, params = swizzle_lane_map(offset)
    # quad-perm mode ignores offset bits 14:8
    assert swizzle_offset(name, params) == (offset & 0x80FF if offset & 0x8000 else offset)


HAZARD = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_lshlrev_b32_e32 v1, 2, v0
  v_mov_b32_e32 v2, v0
  {gap}
  v_mov_b32_dpp v3, v2 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v3, s[4:5]
  s_waitcnt vmcnt(0)
  s_endpgm
"""
EXEC_HAZARD = """
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_lshlrev_b32_e32 v1, 2, v0
  v_mov_b32_e32 v2, v0
  s_nop 4
  v_cmpx_le_u32_e32 vcc, 0, v0
  {gap}
  v_mov_b32_dpp v3, v2 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf bound_ctrl:1
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v3, s[4:5]
  s_waitcnt vmcnt(0)
  s_endpgm
"""


@pytest.mark.parametrize("source, enough, short", [(HAZARD, "s_nop 1", "s_nop 0"),
                                                  (EXEC_HAZARD, "s_nop 4", "s_nop 3")])
def test_dpp_needs_wait_states_after_a_valu_write(source, enough, short):
    out = np.zeros(64, np.uint32)
    good = assemble(kernel_source("good", source.format(gap=enough), [("dst", "ptr")]))
    emulate(good, grid=1, block=64, args=[out])
    expected = lane_table("dpp.row_shr", (1,)) if source is HAZARD else \
        lane_table("dpp.quad_perm", (1, 0, 3, 2))
    np.testing.assert_array_equal(out, np.where(expected >= 0, expected, 0))
    bad = assemble(kernel_source("bad", source.format(gap=short), [("dst", "ptr")]))
    with pytest.raises(HazardError, match="valu-to-dpp"):
        emulate(bad, grid=1, block=64, args=[out])

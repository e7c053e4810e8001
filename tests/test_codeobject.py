"""Code objects: KernelInfo checked against llvm-readelf and llvm-objdump, errors, atomic writes."""

import json
import re
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.asm import AssemblyError, CodeObject, CodeObjectError, assemble
from argus.asm.codeobject import unpack_msgpack
from argus.asm.toolchain import find_toolchain

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "argus" / "examples" / "mfma_gemm_32x32.s"
OWN_KERNELS = [EXAMPLE, *sorted((Path(__file__).parent / "asm").glob("*.s"))]


@pytest.fixture(scope="module")
def example():
    return assemble(EXAMPLE.read_text(), name=str(EXAMPLE))


# ---------------------------------------------------------------- oracles from LLVM's tools

def parse_yaml_subset(text: str):
    """The block-style YAML llvm-readelf prints for AMDGPU metadata (maps, lists, scalars)."""
    lines = [(len(raw) - len(raw.lstrip(" ")), raw.strip()) for raw in text.splitlines()
             if raw.strip() and raw.strip() not in ("---", "...")]

    def scalar(value: str):
        if re.fullmatch(r"-?\d+", value):
            return int(value)
        quoted = len(value) > 1 and value[0] == value[-1] and value[0] in "'\""
        return value[1:-1] if quoted else value

    def block(pos: int, indent: int):
        if lines[pos][1].startswith("- "):
            items = []
            while pos < len(lines) and lines[pos][0] == indent and lines[pos][1].startswith("- "):
                body = lines[pos][1][2:]
                if ":" in body:
                    lines[pos] = (indent + 2, body)
                    item, pos = block(pos, indent + 2)
                else:
                    item, pos = scalar(body), pos + 1
                items.append(item)
            return items, pos
        mapping = {}
        while pos < len(lines) and lines[pos][0] == indent and not lines[pos][1].startswith("- "):
            key, _, value = lines[pos][1].partition(":")
            value = value.strip()
            pos += 1
            if value:
                mapping[key] = scalar(value)
            else:
                mapping[key], pos = block(pos, lines[pos][0])
        return mapping, pos

    return block(0, lines[0][0])[0]


def readelf_metadata(path: Path) -> dict:
    done = find_toolchain().run("readelf", ["--notes", "--elf-output-style=JSON", str(path)])
    assert done.returncode == 0, done.stderr
    notes = json.loads(done.stdout)[0]["NoteSections"]
    for section in notes:
        for note in section["NoteSection"]["Notes"]:
            if "AMDGPU Metadata" in note:
                return parse_yaml_subset(note["AMDGPU Metadata"])
    raise AssertionError(f"llvm-readelf shows no AMDGPU metadata in {path}")


def objdump_descriptor(path: Path, symbol: str) -> dict[str, int]:
    done = find_toolchain().run("objdump", ["-D", "--mcpu=gfx942",
                                            f"--disassemble-symbols={symbol}", str(path)])
    assert done.returncode == 0, done.stderr
    return {k: int(v) for k, v in re.findall(r"\.amdhsa_(\w+) (\d+)", done.stdout.decode())}


def check_against_llvm(code: CodeObject, path: Path) -> int:
    meta = readelf_metadata(path) if code.metadata else {"amdhsa.kernels": []}
    by_name = {k.name: k for k in code.kernels}
    for kmeta in meta["amdhsa.kernels"]:
        info = by_name[kmeta[".name"]]
        assert info.symbol == kmeta[".symbol"]
        assert info.kernarg_size == kmeta[".kernarg_segment_size"]
        assert info.sgpr_count == kmeta[".sgpr_count"]
        assert info.vgpr_count == kmeta[".vgpr_count"]
        assert info.agpr_count == kmeta.get(".agpr_count", info.agpr_count)
        assert info.group_segment_size == kmeta[".group_segment_fixed_size"]
        assert info.private_segment_size == kmeta[".private_segment_fixed_size"]
        assert info.wavefront_size == kmeta[".wavefront_size"]
        assert info.max_flat_workgroup_size == kmeta[".max_flat_workgroup_size"]
        assert [(a.name, a.offset, a.size, a.value_kind, a.address_space) for a in info.args] == [
            (str(a.get(".name", "")), a[".offset"], a[".size"], a[".value_kind"],
             a.get(".address_space", "")) for a in kmeta.get(".args", [])]
    for info in code.kernels:
        kd = objdump_descriptor(path, info.symbol)
        assert info.accum_offset == kd["accum_offset"]
        assert info.unified_vgpr_count == kd["next_free_vgpr"]
        assert info.descriptor.sgpr_count == kd["next_free_sgpr"]
        assert info.descriptor.group_segment_fixed_size == kd["group_segment_fixed_size"]
        assert info.descriptor.private_segment_fixed_size == kd["private_segment_fixed_size"]
        assert info.descriptor.kernarg_size == kd["kernarg_size"]
        assert info.descriptor.workgroup_id_enabled == tuple(
            bool(kd[f"system_sgpr_workgroup_id_{axis}"]) for axis in "xyz")
        assert info.descriptor.workitem_id_dims == kd["system_vgpr_workitem_id"] + 1
        modes = info.descriptor.float_modes
        assert modes == {name: kd[name] for name in modes}
        assert info.descriptor.tg_split == bool(kd["tg_split"])
        assert ("kernarg_segment_ptr" in info.descriptor.user_sgprs) == bool(
            kd["user_sgpr_kernarg_segment_ptr"])
        assert ("dispatch_ptr" in info.descriptor.user_sgprs) == bool(kd["user_sgpr_dispatch_ptr"])
        assert ("private_segment_wave_offset" in dict(
            (name, first) for name, first, _ in info.descriptor.sgpr_inputs)) == bool(
            kd["enable_private_segment"])
        user = [count for name, _, count in info.descriptor.sgpr_inputs
                if not name.startswith(("workgroup", "private_segment_wave"))]
        assert sum(user) == info.descriptor.user_sgpr_count
    return len(code.kernels)


@pytest.mark.parametrize("source", OWN_KERNELS, ids=lambda p: p.name)
def test_kernel_info_matches_llvm_tools_on_own_kernels(source, tmp_path):
    code = assemble(source.read_text(), name=str(source))
    path = code.to_file(tmp_path / "k.hsaco")
    assert check_against_llvm(code, path) == source.read_text().count(".amdhsa_kernel ")


@pytest.mark.aiter
def test_kernel_info_matches_llvm_tools_on_vendor_kernels(aiter_root):
    from argus.vendor.aiter import gfx942_code_objects

    files = gfx942_code_objects(aiter_root)
    sample = files[::len(files) // 24] + [f for f in files if "bf16gemm" in str(f)]
    kernels = sum(check_against_llvm(CodeObject.from_file(f), f) for f in sample)
    assert kernels >= len(sample)


def test_example_kernel_info(example):
    (info,) = example.kernels
    assert example.mcpu == "gfx942"
    assert (info.name, info.symbol) == ("mfma_gemm_32x32", "mfma_gemm_32x32.kd")
    assert [(a.name, a.offset, a.size) for a in info.args] == [
        ("A", 0, 8), ("B", 8, 8), ("C", 16, 8), ("K", 24, 4)]
    assert (info.vgpr_count, info.agpr_count, info.accum_offset) == (26, 16, 28)
    assert info.unified_vgpr_count == 48  # next_free_vgpr 44 rounded up to the granule of 8
    assert info.kernarg_size == info.descriptor.kernarg_size == 28
    assert info.descriptor.user_sgprs == ("kernarg_segment_ptr",)
    instructions = example.disassemble(info)
    assert instructions[0].address == info.entry
    assert instructions[-1].opcode == "s_endpgm"
    assert sum(i.size for i in instructions) == info.code_size


def test_example_store_offsets_follow_the_mfma_output_layout(example):
    """Register r of lane 0 holds D[i][0] with i = 8 * (r // 4) + r % 4 (32x32x8 layout)."""
    stores = [i for i in example.disassemble() if i.opcode == "global_store_dword"]
    assert [s.operands[1].index - 10 for s in stores] == list(range(16))
    assert [s.mod("offset", 0) for s in stores] == [
        128 * (8 * (r // 4) + r % 4) for r in range(16)]


def test_kernel_lookup_names_the_known_kernels(example):
    assert example.kernel("mfma_gemm_32x32.kd").name == "mfma_gemm_32x32"
    with pytest.raises(KeyError, match="kernels: mfma_gemm_32x32"):
        example.kernel("gemm")


# ---------------------------------------------------------------- errors

def test_not_an_elf():
    with pytest.raises(CodeObjectError, match="not an ELF file"):
        CodeObject.from_bytes(b"MZ\x90\x00 this is not a code object")


def test_missing_file(tmp_path):
    with pytest.raises(CodeObjectError, match="cannot read code object"):
        CodeObject.from_file(tmp_path / "absent.hsaco")


def test_wrong_machine():
    host = Path("/bin/true").read_bytes()
    with pytest.raises(CodeObjectError, match="not EM_AMDGPU"):
        CodeObject.from_bytes(host)


@settings(deadline=None)
@given(st.data())
def test_every_truncation_is_a_code_object_error(data):
    blob = _example_bytes()
    cut = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(CodeObjectError, match="truncated|not an ELF|corrupt|outside"):
        CodeObject.from_bytes(blob[:cut])


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**20), st.integers(0, 255)), min_size=1, max_size=4),
       st.booleans())
def test_corrupt_bytes_give_a_code_object_or_a_clear_error(flips, in_header):
    """Never a stray IndexError/TypeError from deep inside the ELF reader: a code object or an
    Argus error with a message (a flipped e_flags byte names another target, say)."""
    from argus.errors import ArgusError

    blob = bytearray(_example_bytes())
    for position, value in flips:
        blob[position % (64 if in_header else len(blob))] = value
    try:
        code = CodeObject.from_bytes(bytes(blob))
    except CodeObjectError as err:
        assert str(err)
        return
    try:
        code.disassemble()
    except ArgusError as err:
        assert str(err)


_CACHE: dict[str, bytes] = {}


def _example_bytes() -> bytes:
    if "example" not in _CACHE:
        _CACHE["example"] = assemble(EXAMPLE.read_text()).data
    return _CACHE["example"]


def test_assembly_error_names_our_line():
    source = EXAMPLE.read_text().replace("  s_mov_b32 s11, 0 ",
                                         "  s_mov_b32 s11, v99999 ")
    assert source != EXAMPLE.read_text()
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "v99999" in text)
    with pytest.raises(AssemblyError) as caught:
        assemble(source, name="gemm.s")
    err = caught.value
    assert err.line == line and "v99999" in err.source_line
    assert str(err).startswith(f"gemm.s:{line}:")
    assert "s_mov_b32 s11, v99999" in str(err) and "^" in str(err)


def test_assembly_error_counts_further_errors():
    with pytest.raises(AssemblyError, match=r"(?s)kernel.s:2:.*invalid instruction.*"
                                            r"and 1 more errors"):
        assemble(".text\nv_frobnicate v1\ns_nop 0\nv_frobnicate v2\n", name="kernel.s")


def test_link_errors_are_assembly_errors():
    with pytest.raises(AssemblyError, match="ld.lld failed"):
        assemble(".text\ns_getpc_b64 s[0:1]\ns_add_u32 s0, s0, undefined_symbol@rel32@lo+4\n")


# ---------------------------------------------------------------- atomic writes

def test_to_file_is_atomic_and_leaves_no_temporaries(example, tmp_path):
    target = tmp_path / "deep" / "dir" / "out.hsaco"
    example.to_file(target)
    target.write_bytes(b"old contents")
    example.to_file(target)
    assert target.read_bytes() == example.data
    assert [p.name for p in target.parent.iterdir()] == ["out.hsaco"]
    assert CodeObject.from_file(target).kernels == example.kernels


def test_failed_write_keeps_the_old_file(example, tmp_path, monkeypatch):
    import os

    target = tmp_path / "out.hsaco"
    target.write_bytes(b"previous")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        example.to_file(target)
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out.hsaco"]


# ---------------------------------------------------------------- msgpack

def pack(value) -> bytes:
    """Reference msgpack encoder (smallest encoding per the msgpack spec)."""
    if value is None:
        return b"\xc0"
    if value is True or value is False:
        return b"\xc3" if value else b"\xc2"
    if isinstance(value, int):
        if 0 <= value < 128:
            return bytes([value])
        if -32 <= value < 0:
            return struct.pack("b", value)
        for tag, fmt, lo, hi in ((0xCC, ">B", 0, 2**8), (0xCD, ">H", 0, 2**16),
                                 (0xCE, ">I", 0, 2**32), (0xCF, ">Q", 0, 2**64),
                                 (0xD0, ">b", -2**7, 2**7), (0xD1, ">h", -2**15, 2**15),
                                 (0xD2, ">i", -2**31, 2**31), (0xD3, ">q", -2**63, 2**63)):
            if lo <= value < hi:
                return bytes([tag]) + struct.pack(fmt, value)
    if isinstance(value, float):
        return b"\xcb" + struct.pack(">d", value)
    if isinstance(value, str):
        raw = value.encode()
        head = (bytes([0xA0 | len(raw)]) if len(raw) < 32 else
                b"\xd9" + struct.pack(">B", len(raw)) if len(raw) < 256 else
                b"\xda" + struct.pack(">H", len(raw)))
        return head + raw
    if isinstance(value, bytes):
        return b"\xc4" + struct.pack(">B", len(value)) + value
    if isinstance(value, list):
        head = bytes([0x90 | len(value)]) if len(value) < 16 else (
            b"\xdc" + struct.pack(">H", len(value)))
        return head + b"".join(pack(v) for v in value)
    head = bytes([0x80 | len(value)]) if len(value) < 16 else (
        b"\xde" + struct.pack(">H", len(value)))
    return head + b"".join(pack(k) + pack(v) for k, v in value.items())


scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                    st.floats(allow_nan=False), st.text(max_size=300),
                    st.binary(max_size=40))
trees = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=20), st.dictionaries(st.text(max_size=12), inner, max_size=20)),
    max_leaves=40)


@given(trees)
def test_msgpack_decodes_reference_encoding(value):
    assert unpack_msgpack(pack(value)) == value


@given(trees.filter(lambda v: len(pack(v)) > 1), st.data())
def test_truncated_msgpack_is_an_error(value, data):
    blob = pack(value)
    cut = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(CodeObjectError, match="truncated|trailing"):
        unpack_msgpack(blob[:cut])


def test_metadata_note_decodes_like_readelf(example):
    with tempfile.TemporaryDirectory() as tmp:
        path = example.to_file(Path(tmp) / "k.hsaco")
        assert readelf_metadata(path)["amdhsa.kernels"][0][".agpr_count"] == (
            example.metadata["amdhsa.kernels"][0][".agpr_count"])


def test_two_kernels_keep_their_own_code_and_descriptors():
    source = Path(__file__).parent / "asm" / "two_kernels.s"
    code = assemble(source.read_text())
    first, second = code.kernels
    assert (first.name, second.name) == ("first", "second")  # no metadata: from `.kd` symbols
    assert first.entry + first.code_size == second.entry
    body = code.disassemble(first)
    assert [i.opcode for i in body] == ["s_load_dword", "s_waitcnt", "v_mov_b32_e32", "s_endpgm"]
    filler = [i for i in code.disassemble() if first.entry <= i.address < second.entry][4:]
    assert filler and all(i.text == "s_nop 0" for i in filler)  # .p2align 8 padding
    assert code.disassemble(second)[0].address == second.entry
    assert code.disassemble(second)[-1].opcode == "s_endpgm"
    assert len(code.disassemble()) == len(body) + len(filler) + len(code.disassemble(second))
    desc = second.descriptor
    assert desc.workgroup_id_enabled == (True, True, True) and desc.workitem_id_dims == 3
    assert desc.user_sgprs == ("dispatch_ptr", "kernarg_segment_ptr")
    assert desc.sgpr_inputs == (
        ("dispatch_ptr", 0, 2), ("kernarg_segment_ptr", 2, 2), ("workgroup_id_x", 4, 1),
        ("workgroup_id_y", 5, 1), ("workgroup_id_z", 6, 1),
        ("private_segment_wave_offset", 7, 1))
    assert (second.group_segment_size, second.private_segment_size) == (1024, 64)
    assert first.descriptor.workgroup_id_enabled == (True, False, False)


@pytest.mark.parametrize("k", [0, 8, 40])
def test_example_kernel_computes_a_times_b_transposed(example, k):
    """The built-in example, run in Argus' emulator with strict hazard checks, against numpy."""
    import ml_dtypes
    import numpy as np

    from argus.asm.launch import emulate

    rng = np.random.default_rng(k)
    a = rng.standard_normal((32, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((32, k)).astype(ml_dtypes.bfloat16)
    c = np.full((32, 32), np.nan, np.float32)
    emulate(example, None, grid=1, block=64, args={"A": a, "B": b, "C": c, "K": k},
            check="strict")
    expected = a.astype(np.float32) @ b.astype(np.float32).T
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)

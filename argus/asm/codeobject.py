"""HSA code objects (AMDGPU ELF): assembling them with LLVM and reading their kernels back.

`assemble` turns gfx942 assembly text into a `CodeObject`; a `CodeObject` exposes its kernels as
`KernelInfo` records (from the msgpack metadata note and the 64-byte kernel descriptor) and
decodes its `.text` into `Instruction` records with llvm-objdump as the golden decoder.
"""

from __future__ import annotations

import io
import os
import re
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection, SymbolTableSection

from argus import env
from argus.asm.toolchain import Toolchain, find_toolchain
from argus.errors import ArgusError
from argus.isa_cdna3.abi import KERNEL_DESCRIPTOR_SIZE, KernelArg, KernelDescriptor, KernelInfo
from argus.isa_cdna3.instruction import Instruction

NT_AMDGPU_METADATA = 32
# e_flags & EF_AMDGPU_MACH -> processor name, for the processors Argus meets in practice.
MACHINES = {0x2F: "gfx90a", 0x30: "gfx908", 0x3F: "gfx90a", 0x40: "gfx940", 0x4B: "gfx941",
            0x4C: "gfx942", 0x4F: "gfx950", 0x36: "gfx1030", 0x41: "gfx1100"}
EF_AMDGPU_MACH = 0xFF


class CodeObjectError(ArgusError, ValueError):
    """The bytes are not a readable AMDGPU code object (truncated, not ELF, wrong machine...)."""


class KernelNotFound(CodeObjectError, KeyError):
    """The code object has no kernel of that name (a KeyError too, for lookups)."""


class OutputError(ArgusError, OSError):
    """An output file could not be written (no such directory, no permission, a full disk)."""

    kind = "environment"


class AssemblyError(ArgusError, ValueError):
    """LLVM rejected assembly text; carries the offending line of the caller's source."""

    def __init__(self, message: str, *, line: int | None = None, source_line: str = "",
                 diagnostics: str = ""):
        super().__init__(message)
        self.line = line
        self.source_line = source_line
        self.diagnostics = diagnostics


# ---------------------------------------------------------------- msgpack (metadata note)

def unpack_msgpack(data: bytes) -> Any:
    """Decode one msgpack value (the AMDGPU metadata note); raises CodeObjectError if malformed."""
    value, end = _msgpack_value(data, 0)
    if end != len(data):
        raise CodeObjectError(f"msgpack metadata has {len(data) - end} trailing bytes")
    return value


def _msgpack_value(data: bytes, pos: int) -> tuple[Any, int]:
    try:
        tag = data[pos]
    except IndexError:
        raise CodeObjectError("msgpack metadata is truncated") from None
    pos += 1
    if tag <= 0x7F:
        return tag, pos
    if tag >= 0xE0:
        return tag - 0x100, pos
    if 0x80 <= tag <= 0x8F:
        return _msgpack_map(data, pos, tag & 0x0F)
    if 0x90 <= tag <= 0x9F:
        return _msgpack_array(data, pos, tag & 0x0F)
    if 0xA0 <= tag <= 0xBF:
        return _msgpack_str(data, pos, tag & 0x1F)
    simple = {0xC0: None, 0xC2: False, 0xC3: True}
    if tag in simple:
        return simple[tag], pos
    sized = {0xCC: "B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: "b", 0xD1: ">h", 0xD2: ">i",
             0xD3: ">q", 0xCA: ">f", 0xCB: ">d"}
    if tag in sized:
        fmt = sized[tag]
        size = struct.calcsize(fmt)
        _need(data, pos, size)
        return struct.unpack_from(fmt, data, pos)[0], pos + size
    lengths = {0xD9: (">B", "str"), 0xDA: (">H", "str"), 0xDB: (">I", "str"),
               0xC4: (">B", "bin"), 0xC5: (">H", "bin"), 0xC6: (">I", "bin"),
               0xDC: (">H", "array"), 0xDD: (">I", "array"),
               0xDE: (">H", "map"), 0xDF: (">I", "map")}
    if tag not in lengths:
        raise CodeObjectError(f"unsupported msgpack type byte 0x{tag:02x} in metadata")
    fmt, kind = lengths[tag]
    size = struct.calcsize(fmt)
    _need(data, pos, size)
    count = struct.unpack_from(fmt, data, pos)[0]
    pos += size
    if kind == "str":
        return _msgpack_str(data, pos, count)
    if kind == "bin":
        _need(data, pos, count)
        return bytes(data[pos:pos + count]), pos + count
    if kind == "array":
        return _msgpack_array(data, pos, count)
    return _msgpack_map(data, pos, count)


def _need(data: bytes, pos: int, size: int) -> None:
    if pos + size > len(data):
        raise CodeObjectError("msgpack metadata is truncated")


def _msgpack_str(data: bytes, pos: int, length: int) -> tuple[str, int]:
    _need(data, pos, length)
    return data[pos:pos + length].decode("utf-8", "replace"), pos + length


def _msgpack_array(data: bytes, pos: int, count: int) -> tuple[list, int]:
    items = []
    for _ in range(count):
        item, pos = _msgpack_value(data, pos)
        items.append(item)
    return items, pos


def _msgpack_map(data: bytes, pos: int, count: int) -> tuple[dict, int]:
    items = {}
    for _ in range(count):
        key, pos = _msgpack_value(data, pos)
        if isinstance(key, list | dict):
            raise CodeObjectError("msgpack metadata has a map key that is not a scalar")
        items[key], pos = _msgpack_value(data, pos)
    return items, pos


# ---------------------------------------------------------------- kernel records

def _kernel_args(meta: dict) -> tuple[KernelArg, ...]:
    args = []
    for index, arg in enumerate(meta.get(".args", ())):
        missing = [key for key in (".offset", ".size") if key not in arg]
        if missing:
            raise CodeObjectError(f"kernel {meta.get('.name')!r}: argument {index} "
                                  f"({arg.get('.name', 'unnamed')}) lacks {', '.join(missing)} "
                                  "in the metadata")
        args.append(KernelArg(name=str(arg.get(".name", "")), offset=int(arg[".offset"]),
                              size=int(arg[".size"]), value_kind=str(arg.get(".value_kind", "")),
                              address_space=str(arg.get(".address_space", "")),
                              value_type=str(arg.get(".value_type", ""))))
    return tuple(args)


# ---------------------------------------------------------------- the code object

@attrs.frozen
class Symbol:
    name: str
    value: int
    size: int
    kind: str  # STT_FUNC, STT_OBJECT, STT_NOTYPE, ...


class CodeObject:
    """An AMDGPU ELF code object held in memory; kernels and disassembly are read lazily."""

    def __init__(self, data: bytes | bytearray | memoryview, *, path: Path | None = None):
        if not isinstance(data, (bytes, bytearray, memoryview)):
            # bytes(str) is a TypeError and bytes(int) a zeroed buffer of that many bytes
            hint = ("CodeObject.from_file(path) reads a file, and a code object's bytes are "
                    "Path(path).read_bytes()" if isinstance(data, (str, os.PathLike)) else
                    "pass the bytes of a .hsaco/.co file")
            raise CodeObjectError(f"a code object is made from bytes, not "
                                  f"{type(data).__name__} {_shown(data)}", fix=hint)
        self.data = bytes(data)
        self.path = path
        self._disassembly: list[Instruction] | None = None
        where = f" ({path})" if path else ""
        if self.data[:4] != b"\x7fELF":
            raise CodeObjectError(f"not an ELF file{where}: starts with {self.data[:4]!r}; "
                                  "expected a .hsaco/.co produced by clang + ld.lld")
        try:
            elf = ELFFile(io.BytesIO(self.data))
            machine = elf["e_machine"]
            self.e_flags = elf["e_flags"]
            self.sections = {s.name: s for s in elf.iter_sections()}
            self.symbols = _read_symbols(elf)
            self.metadata = _read_metadata(elf)
            text = self.sections.get(".text")
            self.text = text.data() if text is not None else b""
            self.text_address = text["sh_addr"] if text is not None else 0
            self.segments = [(s["p_vaddr"], s.data()) for s in elf.iter_segments()
                             if s["p_type"] == "PT_LOAD"]
        # pyelftools reports corrupt input with whatever exception its parsing hits first.
        except (ELFError, struct.error, OSError, ValueError, OverflowError, AttributeError,
                TypeError, KeyError, IndexError) as err:
            if isinstance(err, CodeObjectError):
                raise
            raise CodeObjectError(f"truncated or corrupt ELF{where}: {err}") from err
        if machine != "EM_AMDGPU":
            raise CodeObjectError(f"ELF machine is {machine}{where}, not EM_AMDGPU")
        if text is not None and len(self.text) != text["sh_size"]:
            raise CodeObjectError(f"truncated ELF{where}: .text is cut short")
        try:
            self.kernels = self._read_kernels()
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            if isinstance(err, CodeObjectError):
                raise
            raise CodeObjectError(f"malformed kernel metadata{where}: {type(err).__name__} "
                                  f"{err}") from err

    def __repr__(self) -> str:
        names = ", ".join(k.name for k in self.kernels)
        where = f", path={str(self.path)!r}" if self.path else ""
        return f"CodeObject({self.mcpu}, kernels=[{names}], {len(self.data)} bytes{where})"

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> CodeObject:
        """The code object whose ELF bytes are `data` (CodeObjectError if they are not one)."""
        return cls(data)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> CodeObject:
        """Read the code object at `path` (CodeObjectError if unreadable or not one)."""
        if not isinstance(path, (str, os.PathLike)):
            raise CodeObjectError(f"the path of a code object is a str or Path, not "
                                  f"{type(path).__name__} {_shown(path)}",
                                  fix="pass the file's path, or its bytes to "
                                      "CodeObject.from_bytes")
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as err:
            raise CodeObjectError(f"cannot read code object {path}: {err.strerror}") from err
        except ValueError as err:  # a NUL in the path
            raise CodeObjectError(f"cannot read code object {str(path)!r}: {err}") from err
        return cls(data, path=path)

    def to_file(self, path: str | os.PathLike) -> Path:
        """Write atomically: readers see the old file or the complete new one, never a part."""
        return write_atomic(Path(path), self.data)

    @property
    def mcpu(self) -> str:
        mach = self.e_flags & EF_AMDGPU_MACH
        return MACHINES.get(mach, f"unknown (EF_AMDGPU_MACH 0x{mach:x})")

    def kernel(self, name: str) -> KernelInfo:
        """The kernel named `name` (its name or its symbol)."""
        for info in self.kernels:
            if isinstance(name, str) and name in (info.name, info.symbol):
                return info
        known = ", ".join(k.name for k in self.kernels) or "none"
        raise KernelNotFound(f"no kernel {name!r} in this code object (kernels: {known})",
                             fix="pass one of the kernels' names")

    def read(self, address: int, size: int) -> bytes:
        """Bytes of the loaded image at a virtual address."""
        for base, blob in self.segments:
            if base <= address and address + size <= base + len(blob):
                return blob[address - base:address - base + size]
        raise CodeObjectError(f"address 0x{address:x}+{size} is outside the loaded segments")

    def disassemble(self, kernel: str | KernelInfo | None = None,
                    toolchain: Toolchain | None = None) -> list[Instruction]:
        """Instructions of one kernel, or of the whole `.text` when `kernel` is None."""
        if self._disassembly is None:
            from argus.asm.disasm import disassemble_code_object

            self._disassembly = disassemble_code_object(self, toolchain or find_toolchain())
        if kernel is None:
            return list(self._disassembly)
        info = kernel if isinstance(kernel, KernelInfo) else self.kernel(kernel)
        end = info.entry + info.code_size
        return _without_padding([ins for ins in self._disassembly
                                 if info.entry <= ins.address < end])

    @staticmethod
    def disassemble_all(codes: list[CodeObject], toolchain: Toolchain | None = None) -> None:
        """Decode many code objects with a single llvm-objdump run (its startup dominates for
        small files); afterwards each one's `disassemble()` answers from memory."""
        from argus.asm.disasm import disassemble_code_objects

        todo = [code for code in codes if code._disassembly is None]
        for code, listing in zip(todo, disassemble_code_objects(todo, toolchain or
                                                                find_toolchain())):
            code._disassembly = listing

    def _read_kernels(self) -> list[KernelInfo]:
        by_name = {sym.name: sym for sym in self.symbols}
        metas = self.metadata.get("amdhsa.kernels", []) if self.metadata else []
        if not metas:
            metas = [{".name": s.name[:-3], ".symbol": s.name} for s in self.symbols
                     if s.name.endswith(".kd") and s.kind == "STT_OBJECT"]
        entries = []
        for meta in metas:
            symbol = str(meta.get(".symbol", f"{meta.get('.name')}.kd"))
            if symbol not in by_name:
                raise CodeObjectError(f"kernel {meta.get('.name')!r}: descriptor symbol "
                                      f"{symbol!r} is missing from the symbol table")
            kd_addr = by_name[symbol].value
            desc = KernelDescriptor.from_bytes(self.read(kd_addr, KERNEL_DESCRIPTOR_SIZE))
            entries.append((meta, symbol, desc, kd_addr + desc.entry_offset))
        text_end = self.text_address + len(self.text)
        starts = sorted({e for *_, e in entries} | {s.value for s in self.symbols
                                                    if s.kind == "STT_FUNC"} | {text_end})
        kernels = []
        for meta, symbol, desc, entry in entries:
            end = next(s for s in starts if s > entry) if entry < text_end else entry
            total = desc.unified_vgpr_count
            agprs = meta.get(".agpr_count", max(0, total - desc.accum_offset)
                             if total > desc.accum_offset else 0)
            kernels.append(KernelInfo(
                name=str(meta.get(".name", symbol[:-3])), symbol=symbol, args=_kernel_args(meta),
                kernarg_size=int(meta.get(".kernarg_segment_size", desc.kernarg_size)),
                sgpr_count=int(meta.get(".sgpr_count", desc.sgpr_count)),
                vgpr_count=int(meta.get(".vgpr_count", desc.accum_offset)),
                agpr_count=int(agprs), accum_offset=desc.accum_offset,
                unified_vgpr_count=total,
                group_segment_size=int(meta.get(".group_segment_fixed_size",
                                                desc.group_segment_fixed_size)),
                private_segment_size=int(meta.get(".private_segment_fixed_size",
                                                  desc.private_segment_fixed_size)),
                wavefront_size=int(meta.get(".wavefront_size", desc.wavefront_size)),
                max_flat_workgroup_size=int(meta.get(".max_flat_workgroup_size", 1024)),
                entry=entry, code_size=end - entry, descriptor=desc, metadata=meta))
        return kernels


def _without_padding(instructions: list[Instruction]) -> list[Instruction]:
    """Drop the `s_nop 0`/`s_code_end` alignment filler after a kernel's last jump or end."""
    last = len(instructions)
    while last and _is_filler(instructions[last - 1]):
        last -= 1
    if last == len(instructions) or not last:
        return instructions
    final = instructions[last - 1].opcode
    if final not in ("s_endpgm", "s_branch", "s_setpc_b64"):
        return instructions  # control could fall into the "filler": it is code
    targets = {ins.branch_target for ins in instructions}
    if any(ins.address in targets for ins in instructions[last:]):
        return instructions
    return instructions[:last]


def _is_filler(ins: Instruction) -> bool:
    return ins.opcode == "s_code_end" or (
        ins.opcode == "s_nop" and all(getattr(op, "value", None) == 0 for op in ins.operands))


def _read_symbols(elf: ELFFile) -> list[Symbol]:
    seen = {}
    for name in (".symtab", ".dynsym"):
        table = elf.get_section_by_name(name)
        if not isinstance(table, SymbolTableSection):
            continue
        for sym in table.iter_symbols():
            if sym.name and sym.name not in seen:
                seen[sym.name] = Symbol(sym.name, sym["st_value"], sym["st_size"],
                                        sym["st_info"]["type"])
    return list(seen.values())


def _read_metadata(elf: ELFFile) -> dict:
    for section in elf.iter_sections():
        if not isinstance(section, NoteSection):
            continue
        for note in section.iter_notes():
            # pyelftools declares n_type a str, but a vendor note's type comes back as its int
            note_type: object = note["n_type"]
            if note["n_name"] == "AMDGPU" and note_type == NT_AMDGPU_METADATA:
                desc = note["n_desc"]
                return unpack_msgpack(desc if isinstance(desc, bytes) else desc.encode("latin-1"))
    return {}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def write_atomic(path: Path, data: bytes) -> Path:
    """Write via a temporary file in the same directory and rename over the target, with the
    mode the umask gives a new file (like a compiler's output; mkstemp alone makes it 0600)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise OutputError(f"cannot write {path}: {err.strerror or err}",
                          fix="choose an output path in a writable directory") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise OutputError(f"cannot write {path}: {err.strerror or err}",
                              fix="choose a writable output path with free space") from None
        raise
    return path


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(mask)
    return mask


# ---------------------------------------------------------------- assembling

_DIAGNOSTIC = re.compile(r"^(?P<file>[^\n:]*):(?P<line>\d+):(?P<col>\d+): (?P<kind>error|warning): "
                         r"(?P<msg>.*)$", re.MULTILINE)


def assemble(source: str, *, mcpu: str = "gfx942", toolchain: Toolchain | None = None,
             name: str = "<source>") -> CodeObject:
    """Assemble and link gfx942 assembly text into a code object.

    Raises AssemblyError naming the first offending line of `source` and LLVM's message.
    """
    for what, text in (("source", source), ("mcpu", mcpu), ("name", name)):
        if not isinstance(text, str):
            raise AssemblyError(f"assemble: {what} is the assembly's text (a str), not "
                                f"{type(text).__name__} {_shown(text)}; a file is read with "
                                "assemble_file(path, output) or Path(path).read_text()")
    tools = toolchain or find_toolchain()
    if env.debug_level() >= 3:
        print(f"--- ARGUS_DEBUG=3: assembling {name} for {mcpu}\n{source}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="argus-asm-") as tmp:
        src, obj, out = (Path(tmp) / n for n in ("kernel.s", "kernel.o", "kernel.hsaco"))
        src.write_text(source if source.endswith("\n") else source + "\n")
        done = tools.run("clang", ["-x", "assembler", "-target", "amdgcn-amd-amdhsa",
                                   f"-mcpu={mcpu}", "-c", "-o", str(obj), str(src)])
        if done.returncode != 0:
            raise _assembly_error(done.stderr.decode(errors="replace"), source, name, src.name)
        # Like clang's AMDGPU driver: the loader cannot resolve symbols, so none may be left.
        done = tools.run("lld", ["-shared", "--no-undefined", "-o", str(out), str(obj)])
        if done.returncode != 0:
            raise AssemblyError(f"{name}: ld.lld failed: "
                                f"{done.stderr.decode(errors='replace').strip()}",
                                diagnostics=done.stderr.decode(errors="replace"))
        return CodeObject(out.read_bytes())


def assemble_file(source: str | os.PathLike, output: str | os.PathLike, *,
                  mcpu: str = "gfx942") -> CodeObject:
    """Assemble FILE.s and write the code object atomically to `output`."""
    source = Path(source)
    try:
        text = source.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        line = source.read_bytes()[:err.start].count(b"\n") + 1
        raise AssemblyError(f"{source}:{line}: byte 0x{err.object[err.start]:02x} is not UTF-8 "
                            "text; assembly source must be UTF-8 (or ASCII)", line=line) from None
    except OSError as err:
        raise AssemblyError(f"cannot read {source}: {err.strerror or err}") from None
    code = assemble(text, mcpu=mcpu, name=str(source))
    code.to_file(output)
    return code


def _assembly_error(stderr: str, source: str, name: str, temp_name: str) -> AssemblyError:
    lines = source.splitlines()
    errors = [m for m in _DIAGNOSTIC.finditer(stderr) if m["kind"] == "error"]
    if not errors:
        return AssemblyError(f"{name}: clang failed: {stderr.strip()}", diagnostics=stderr)
    first = errors[0]
    line = int(first["line"])
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    caret = " " * (int(first["col"]) - 1) + "^"
    more = f"\n(and {len(errors) - 1} more errors)" if len(errors) > 1 else ""
    message = (f"{name}:{line}:{first['col']}: {first['msg']}\n    {text}\n    {caret}{more}")
    return AssemblyError(message, line=line, source_line=text,
                         diagnostics=stderr.replace(temp_name, name))

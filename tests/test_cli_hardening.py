"""Hostile but realistic CLI input: each case ends in one or two lines saying what, where and
the fix, a non-zero exit, and no traceback; files are written with the umask's mode."""

import os
import stat

import pytest
from click.testing import CliRunner

from argus.cli import main


def run(*args):
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output, result.exception


def assert_refused(args, says):
    code, output, exception = run(*args)
    assert code != 0, output
    assert exception is None or isinstance(exception, SystemExit), exception
    assert "Traceback" not in output and says in output, output


def test_assembly_source_that_is_not_utf8(tmp_path):
    source = tmp_path / "bad.s"
    source.write_bytes(b"s_nop 0\n\xff\xfe s_endpgm\n")
    assert_refused(["asm", str(source), "-o", str(tmp_path / "x.hsaco")],
                   f"{source}:2: byte 0xff is not UTF-8")
    assert not (tmp_path / "x.hsaco").exists()


def test_an_unwritable_output_path(tmp_path):
    source = tmp_path / "ok.s"
    source.write_text("s_endpgm\n")
    assert_refused(["asm", str(source), "-o", "/proc/argus-test.hsaco"],
                   "cannot write /proc/argus-test.hsaco")


def test_asm_output_follows_the_umask(tmp_path):
    source = tmp_path / "ok.s"
    source.write_text("s_endpgm\n")
    previous = os.umask(0o027)
    try:
        code, output, _ = run("asm", str(source), "-o", str(tmp_path / "x.hsaco"))
    finally:
        os.umask(previous)
    assert code == 0, output
    assert stat.S_IMODE((tmp_path / "x.hsaco").stat().st_mode) == 0o640


@pytest.mark.parametrize(("args", "says"), [
    (["verify", "gemm", "--size", "M=abc"], "M='abc': a size of kernel gemm is a whole number"),
    (["verify", "gemm", "--size", "M=-1"], "M=-1 is outside the range"),
    (["verify", "gemm", "--size", "M=100"], "M=100 violates the assumption `M % 64 == 0`"),
    (["verify", "gemm", "--param", "block_m=abc"],
     "parameter block_m='abc' of kernel gemm: it takes a whole number"),
    (["prove", "x // 0 == 0", "--var", "x=0:4"], "division by the constant 0"),
    (["prove", "x < 8", "--var", "x=0:4", "--var", "x=0:8"], "x declared more than once"),
    (["emulate", "bf16gemm_outf32_tn_32x64_pf3", "--size", "m=abc"],
     "m=abc: a size is a whole number"),
    (["run", "gemm", "--interp", "--size", "M=abc"], "M='abc': a size of kernel gemm"),
    (["run", "gemm", "--interp", "--size", "M=-64"], "M=-64 is outside the range"),
    (["run", "gemm", "--interp", "--size", "M=100"], "violates the assumption `M % 64 == 0`"),
    (["run", "gemm", "--emulate", "--size", "Q=64"], "kernel gemm has no size ['Q']"),
], ids=range(11))
def test_bad_sizes_parameters_and_formulas(args, says):
    assert_refused(args, says)


@pytest.mark.parametrize(("args", "says"), [
    (["time", "gemm", "--shape", "M=abc"], "M='abc': give whole numbers, e.g. --shape k=4096"),
    (["time", "gemm", "--shape", "M=100", "--shape", "N=64", "--shape", "K=64"],
     "violates the assumption `M % 64 == 0`"),
    (["compare", "gemm", "no_such_kernel"], "'no_such_kernel' is not a vendor kernel"),
])
def test_time_and_compare_refuse_bad_targets_and_sizes(args, says):
    assert_refused(args, says)


def test_a_user_file_with_a_syntax_error_or_a_failing_import(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import argus.lang as T\n\ndef f(:\n    pass\n")
    assert_refused(["verify", str(broken)], f"{broken}:3:")
    missing = tmp_path / "missing.py"
    missing.write_text("x = 1\nimport no_such_module_here\n")
    assert_refused(["verify", str(missing)],
                   f"{missing}:2: importing {missing} raised ModuleNotFoundError")


def test_a_bad_vendor_size_is_blamed_for_itself():
    assert_refused(["emulate", "bf16gemm_outf32_tn_32x64_pf3", "--size", "m=0"],
                   "size m=0 must be a whole number >= 1")


def test_a_bad_vendor_name_or_size_is_refused_before_fetching_the_wheel(monkeypatch):
    from argus.vendor import aiter

    def fetch():
        raise AssertionError("the wheel was fetched for a launch refused anyway")
    monkeypatch.setattr(aiter, "aiter_root", fetch)
    assert_refused(["emulate", "gemm", "--size", "m=0"], "unknown vendor kernel 'gemm'")
    for size, says in (("m=0", "size m=0 must be"), ("q=3", "takes sizes")):
        assert_refused(["emulate", "bf16gemm_outf32_tn_32x64_pf3", "--size", size], says)
    assert_refused(["emulate", "fmoe_b16", "--size", "tokens=-1"], "size tokens=-1 must be")


def test_offline_with_an_empty_cache_or_a_corrupt_wheel(tmp_path, monkeypatch):
    from argus.vendor import aiter

    monkeypatch.setenv("ARGUS_CACHE", str(tmp_path))
    # pip cannot reach an index: a one-line error with the fix, not a traceback
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "1")
    assert_refused(["emulate", "bf16gemm_outf32_tn_32x64_pf3"], "could not download amd-aiter")
    wheels = tmp_path / "wheels"
    (wheels / f"amd_aiter-{aiter.AITER_VERSION}-py3-none-any.whl").write_bytes(b"not a zip")
    assert_refused(["emulate", "bf16gemm_outf32_tn_32x64_pf3"], "cannot unpack")


def test_a_code_object_for_an_rdna_gpu_is_named_before_decoding(tmp_path):
    from argus.asm import CodeObject, assemble
    from argus.isa_cdna3.kernel_template import kernel_source

    # a gfx942 object relabelled gfx1100 in the ELF header's e_flags (offset 48, EF_AMDGPU_MACH
    # in the low byte): the target is named before llvm-objdump is asked to decode anything
    data = bytearray(assemble(kernel_source("rdna", "  s_endpgm\n", [])).data)
    flags = int.from_bytes(data[48:52], "little") & ~0xFF | 0x41
    data[48:52] = flags.to_bytes(4, "little")
    assert CodeObject(bytes(data)).mcpu == "gfx1100"
    path = tmp_path / "rdna.hsaco"
    path.write_bytes(bytes(data))
    assert_refused(["disasm", str(path)], "built for gfx1100")


KERNEL_FILE = '''
import argus.lang as T
from argus.lang import Tensor


@T.kernel(waves=4)
def copy_rows(X: Tensor("f32", "N", 16), Y: Tensor("f32", "N", 16)):
    N = X.shape[0]
    T.assume((N % 16).eq(0))
    T.grid(N // 16)
    row = T.program_id(0) * 16
{body}
'''
COPY = "    Y.store((row, 0), X.load((row, 0), T.copy_layout((16, 16), 4, 1)))"


def write_kernel(tmp_path, body=COPY, name="k.py", head=""):
    path = tmp_path / name
    path.write_text(head + KERNEL_FILE.format(body=body))
    return path


def test_a_file_with_one_kernel_needs_no_name(tmp_path):
    # `import argus.lang as T` puts the DSL module (which has a `trace` submodule) in the file's
    # namespace: it is not a kernel
    code, output, _ = run("verify", str(write_kernel(tmp_path)))
    assert code == 0 and "Verified copy_rows" in output, output


def test_a_kernel_the_file_imports_is_not_a_candidate_beside_its_own(tmp_path):
    write_kernel(tmp_path, name="helpers.py")
    path = write_kernel(tmp_path, head="from helpers import copy_rows as borrowed\n",
                        body=COPY + "\n\n\nmine = copy_rows")
    code, output, _ = run("verify", str(path))
    assert code == 0 and "Verified copy_rows" in output, output
    only_imported = tmp_path / "imports.py"
    only_imported.write_text("from helpers import copy_rows\n")
    code, output, _ = run("verify", str(only_imported))
    assert code == 0 and "Verified copy_rows" in output, output


def test_a_file_without_a_kernel(tmp_path):
    path = tmp_path / "empty.py"
    path.write_text("import argus.lang as T\nX = 3\n")
    assert_refused(["verify", str(path)], f"{path} defines no kernel")


@pytest.mark.parametrize(("body", "line", "says"), [
    ("    x = 1 / 0", 12, "tracing kernel copy_rows raised ZeroDivisionError: division by zero"),
    ("    Y.store((row, 0), X.load((row, 0), 'rows'))", 12,
     "expected a tile spec (shape and thread layout), got 'rows'"),
    ("    Y.store((row, 0), 3.0)", 12, "the value stored must be a register tile"),
    ("    import no_such_module_here", 12, "raised ModuleNotFoundError"),
    ("    Y.store((row, 0), T.exp2(3))", 12,
     "the value given to T.exp2 must be a register tile"),
    ("    x = X.load((row, 0), T.copy_layout((16, 16), 4, 1))\n    for i in T.range(0, x):\n"
     "        pass", 13, "cannot use Tile(%v1: f32[16, 16], a register tile)"),
    ("    x = X.load((row, 0), T.copy_layout((16, 16), 4, 1))\n    if x:\n        pass", 13,
     "a register tile has no truth value at trace time"),
])
def test_python_errors_inside_a_kernel_name_the_users_line(tmp_path, body, line, says):
    path = write_kernel(tmp_path, body=body)
    assert_refused(["verify", str(path)], says)
    assert_refused(["compile", str(path)], f"{path}:{line}")


def test_running_out_of_memory_is_an_error_not_a_traceback(tmp_path):
    path = write_kernel(tmp_path, body="    junk = bytearray(1 << 46)")
    assert_refused(["verify", str(path)], "out of memory")

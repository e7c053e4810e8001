"""Toolchain discovery order, version gate and the messages that tell the user what to install."""

import os
import subprocess
from pathlib import Path

import pytest

from argus.asm.toolchain import (
    MIN_LLVM_MAJOR,
    TOOLS,
    ToolchainError,
    check_environment,
    doctor,
    find_toolchain,
)


@pytest.fixture(scope="module")
def system():
    return find_toolchain()


def link_tools(directory: Path, system, suffix: str = "") -> Path:
    """Symlinks named like LLVM's tools, pointing at the real (LLVM >= 17) ones."""
    directory.mkdir(parents=True, exist_ok=True)
    real = dict(zip(TOOLS, (system.clang, system.lld, system.objdump, system.mc, system.readelf)))
    for name, target in real.items():
        (directory / f"{name}{suffix}").symlink_to(target)
    return directory


def fake_old_llvm(directory: Path, major: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in TOOLS:
        script = directory / name
        script.write_text(f"#!/bin/sh\necho 'Debian clang version {major}.0.6'\n")
        script.chmod(0o755)
    return directory


def test_system_toolchain_is_complete_and_recent(system):
    assert system.version[0] >= MIN_LLVM_MAJOR
    for path in (system.clang, system.lld, system.objdump, system.mc, system.readelf):
        assert path.is_file() and os.access(path, os.X_OK)
    banner = subprocess.run([system.clang, "--version"], capture_output=True, text=True).stdout
    assert f"clang version {system.version_text}" in banner


def test_missing_toolchain_says_how_to_install(tmp_path):
    env = {"PATH": str(tmp_path / "empty"), "ROCM_PATH": str(tmp_path / "no-rocm")}
    with pytest.raises(ToolchainError) as caught:
        find_toolchain(env)
    message = str(caught.value)
    assert "apt-get install -y clang-19 lld-19 llvm-19" in message
    assert "ROCm" in message and "ROCM_PATH" in message
    assert "missing clang, ld.lld, llvm-objdump, llvm-mc, llvm-readelf" in message


def test_rocm_comes_first(tmp_path, system):
    rocm = tmp_path / "rocm"
    link_tools(rocm / "llvm" / "bin", system)
    other = link_tools(tmp_path / "bin", system, suffix="-19")
    found = find_toolchain({"PATH": str(other), "ROCM_PATH": str(rocm)})
    assert found.source.startswith("ROCm") and found.clang.parent == rocm / "llvm" / "bin"


def test_versioned_tools_on_path_before_unversioned(tmp_path, system):
    both = link_tools(tmp_path / "bin", system, suffix="-19")
    link_tools(both, system)
    found = find_toolchain({"PATH": str(both), "ROCM_PATH": str(tmp_path / "none")})
    assert found.clang.name == "clang-19" and found.source == "LLVM 19 on PATH"


def test_unversioned_tools_are_accepted_when_recent(tmp_path, system):
    plain = link_tools(tmp_path / "bin", system)
    found = find_toolchain({"PATH": str(plain), "ROCM_PATH": str(tmp_path / "none")})
    assert found.clang == plain / "clang" and found.version == system.version
    assert found.source == "unversioned LLVM on PATH"


def test_old_unversioned_tools_are_refused(tmp_path):
    old = fake_old_llvm(tmp_path / "bin", 14)
    with pytest.raises(ToolchainError, match="LLVM 14.0.6 is older than 17.*apt-get install"):
        find_toolchain({"PATH": str(old), "ROCM_PATH": str(tmp_path / "none")})


def test_a_partial_rocm_falls_through_to_path(tmp_path, system):
    rocm_bin = tmp_path / "rocm" / "llvm" / "bin"
    link_tools(rocm_bin, system)
    (rocm_bin / "ld.lld").unlink()
    path = link_tools(tmp_path / "bin", system, suffix="-19")
    found = find_toolchain({"PATH": str(path), "ROCM_PATH": str(tmp_path / "rocm")})
    assert found.source == "LLVM 19 on PATH"


def test_default_discovery_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "none"))
    with pytest.raises(ToolchainError, match="apt-get install"):
        find_toolchain()


def test_environment_checks_pass_here():
    checks = check_environment()
    assert {c.name for c in checks} >= {"LLVM toolchain", "SMT solver z3 (via pysmt)"}
    failed = [c for c in checks if c.required and not c.ok]
    assert not failed, failed


def test_doctor_reports_missing_toolchain_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "none"))
    lines: list[str] = []
    assert doctor(lines.append) is False
    text = "\n".join(lines)
    assert "[MISSING] LLVM toolchain" in text
    assert "fix: install LLVM 19 with `apt-get install -y clang-19 lld-19 llvm-19`" in text
    assert "[ok] SMT solver z3 (via pysmt)" in text

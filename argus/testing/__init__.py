"""`argus.testing`: property-based testing of kernels and of the verifier itself.

Hypothesis strategies (layouts, swizzles, kernel-family variants, mutants seeded with known
defect classes), the checks that judge verdicts against the reference interpreter
(`assert_sound`, `assert_complete`, `assert_metamorphic`) and a pytest plugin
(`--argus-profile`, the `argus_verifier` fixture). Needs `hypothesis` (the `test` extra).
"""

try:
    import hypothesis  # noqa: F401
except ImportError as missing:  # pragma: no cover - depends on the installation
    raise ImportError("argus.testing needs hypothesis: python3 -m pip install 'argus[test]' "
                      "(or hypothesis>=6.100)") from missing

from argus.testing import checks, families, layouts, mutants, profiles, programs  # noqa: E402

__all__ = sorted({*checks.__all__, *families.__all__, *layouts.__all__, *mutants.__all__,
                  *profiles.__all__, *programs.__all__})

# the public names of each module, in one namespace (`layouts` becomes the strategy)
from argus.testing.checks import *  # noqa: E402, F403
from argus.testing.families import *  # noqa: E402, F403
from argus.testing.layouts import *  # noqa: E402, F403
from argus.testing.mutants import *  # noqa: E402, F403
from argus.testing.profiles import *  # noqa: E402, F403
from argus.testing.programs import *  # noqa: E402, F403

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

from argus.testing.checks import (  # noqa: E402
    METAMORPHIC,
    ArgusCheckFailure,
    VerdictCache,
    assert_complete,
    assert_metamorphic,
    assert_sound,
    interpreter_violations,
    shared_cache,
)
from argus.testing.families import FAMILIES, ring_gemm
from argus.testing.layouts import (
    Inadmissible,
    composable_pairs,
    composed_layouts,
    divisible_pairs,
    image,
    inadmissible,
    injective_layouts,
    layouts,
    swizzles,
    tilers,
)
from argus.testing.mutants import (
    OPERATORS,
    Mutant,
    Operator,
    catalogue,
    mutant_sites,
    mutants,
    mutate,
)
from argus.testing.profiles import PROFILES, load_profile
from argus.testing.programs import Program, as_program, family_program, kernel_sizes, tile_programs

__all__ = [
    "METAMORPHIC", "ArgusCheckFailure", "VerdictCache", "assert_complete", "assert_metamorphic",
    "assert_sound", "interpreter_violations", "shared_cache", "FAMILIES", "ring_gemm",
    "Inadmissible", "composable_pairs", "composed_layouts", "divisible_pairs", "image",
    "inadmissible", "injective_layouts", "layouts", "swizzles", "tilers", "OPERATORS", "Mutant",
    "Operator", "catalogue", "mutant_sites", "mutants", "mutate", "PROFILES", "load_profile",
    "Program", "as_program", "family_program", "kernel_sizes", "tile_programs",
]

"""The backend's instruction-scheduling policies, named below the lowering (`asm.lower` reads
them from here) so that the kernel library can declare the compile knob without importing the
backend: `simple` keeps program order, `interleave` (the default) interleaves MFMA, LDS and
global-memory work."""

POLICIES = ("simple", "interleave")
DEFAULT_POLICY = "interleave"

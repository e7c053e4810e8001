"""Argus: verified, search-tuned AMD CDNA3 (gfx942) GPU kernels."""

__version__ = "0.1.0"

"""The reference interpreter's rules by concern (`argus.absint.concrete` runs them): values and
records (`state`), global memory (`memory`), LDS and its epochs (`lds`), synchronisation
(`sync`), register-tile compute (`compute`) and tag assertions (`asserts`).
"""

__all__ = ["asserts", "compute", "lds", "memory", "state", "sync"]

"""Abstract interpretation of tile IR and the concrete reference interpreter (its oracle).

`verify` proves a kernel's obligations (`verify.verify` -> `report.Report`), `concrete` runs
it on numpy arrays (`concrete.run`), `replay` confirms a refutation's witness concretely; the
other modules are the verifier's domain, memory model, loops and queries. The package imports
nothing until a module is asked for.
"""

__all__ = ["admissible", "concrete", "domain", "obligations", "replay", "report", "verify"]

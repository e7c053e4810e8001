"""Argus IR: symbolic integer expressions, the CuTe layout algebra, and the SSA tile IR.

`argus.ir.ops` holds the ops and `Kernel`, `argus.ir.types` the value types and layouts,
`argus.ir.text` the printer and parser, `argus.ir.passes` the IR-to-IR passes.
`import argus.ir` loads none of them; `from argus.ir import *` loads the public modules.
"""

__all__ = ["bind", "expr", "layout", "ops", "passes", "rewrite", "sizes", "text", "types"]

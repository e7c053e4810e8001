"""The IR rewriting helpers mutation testing uses; they live in `argus.ir.rewrite`, where the
search's program rewrites (`argus.search.rewrites`) reach them too."""

from argus.ir.rewrite import map_exprs, replace_op, replace_values, sites

__all__ = ["sites", "replace_op", "replace_values", "map_exprs"]

"""Argus IR: symbolic integer expressions, the CuTe layout algebra, and the SSA tile IR."""

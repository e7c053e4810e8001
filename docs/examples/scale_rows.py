"""A kernel of your own, made tunable: Y = 2 * relu(X) over rows of 256 f32, `rows` rows per
workgroup (the knob the search tunes), proved for every R the assumption admits.

    argus verify docs/examples/scale_rows.py:scale_rows
    argus tune docs/examples/scale_rows.py:TUNABLE --shape 65536 --budget 4 --jobs 2
"""

import numpy as np

import argus.lang as T
from argus.kernels import Knob, LibraryKernel


@T.kernel(waves=1)
def scale_rows(X: T.Tensor("f32", "R", 256), Y: T.Tensor("f32", "R", 256), *, rows: int = 4):
    R = X.shape[0]
    T.assume((R % rows).eq(0))                  # one code object for every such R
    T.grid(R // rows)
    r0 = T.program_id(0) * rows
    spec = T.copy_layout((rows, 256), 1, 4)     # 4 f32 (16 bytes) per lane per access
    x = X.load((r0, 0), spec)
    Y.store((r0, 0), T.maximum(x, T.zeros(spec)) * 2.0)


def reference(inputs: dict, params: dict) -> np.ndarray:
    """What Y must hold, from the inputs by tensor name (and the knob values)."""
    return 2 * np.maximum(inputs["X"], 0)


#: what `argus tune` needs: the kernel, its output, default (check) sizes, the reference, the
#: tolerance relative to the output's magnitude, and the knobs with their legal values
TUNABLE = LibraryKernel(scale_rows, "Y", {"R": 64}, reference, 1e-6,
                        knobs=(Knob("rows", (1, 4, 8, 16), "rows per workgroup"),))

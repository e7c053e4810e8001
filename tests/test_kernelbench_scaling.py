"""How a KernelBench problem's size constants are scaled for the emulator: the work (output
elements, matrix FLOPs), not only the inputs, is brought within the budget, small constants are
scaled last and only while the model still builds."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")

from argus.kernelbench.problem import BUDGET, FLOOR, SMALL, _work, load  # noqa: E402

CONV3D = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, groups):
        super().__init__()
        self.conv = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=2,
                                       padding=1, output_padding=1)
        self.norm = nn.GroupNorm(groups, out_channels) if groups else nn.Identity()

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x)))

batch_size = 16
in_channels = 16
out_channels = 64
D, H, W = 16, 32, 32
kernel_size = 3
groups = GROUPS

def get_inputs():
    return [torch.rand(batch_size, in_channels, D, H, W)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, groups]
"""


def _problem(tmp_path, groups: int):
    path = tmp_path / "level2" / "1_ConvTranspose3d_GroupNorm_ReLU.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(CONV3D.replace("GROUPS", str(groups)))
    return path, load(path)


def test_a_3d_transposed_convolution_is_scaled_by_its_work_not_its_input(tmp_path):
    """The input of 16 x 16 x 16^3 elements is small beside the output (64 channels, each
    volume 8x larger) and the FLOPs: the work decides, and the constants of 16 (batch, input
    channels, depth) are scaled too once nothing else is left."""
    path, problem = _problem(tmp_path, 0)
    scaled = problem.scaled
    assert scaled == {name: SMALL for name in ("batch_size", "in_channels", "out_channels",
                                               "D", "H", "W")}
    x = problem.inputs(0)[0]
    assert x.numel() == SMALL ** 5          # over BUDGET still, but nothing is left to scale
    model = problem.model()
    assert tuple(model(x).shape) == (SMALL, SMALL, 2 * SMALL, 2 * SMALL, 2 * SMALL)
    # the work at the published sizes is hundreds of times the scaled one
    published = _work(path, path.read_text(), problem.constants)
    assert published > 100 * _work(path, path.read_text(), scaled)


@pytest.mark.parametrize("groups", [4, 16])
def test_scaling_keeps_the_relations_the_model_checks(tmp_path, groups):
    """GroupNorm over out_channels: halving to odd sizes would break the divisibility the model
    checks, so the scaled sizes are ones it builds at (smaller than published all the same)."""
    _, problem = _problem(tmp_path, groups)
    out = problem.model()(problem.inputs(0)[0])
    assert out.shape[1] % problem.namespace["groups"] == 0
    assert problem.scaled["out_channels"] < 64
    assert all(problem.scaled[k] <= problem.constants[k] for k in problem.constants)


def test_a_matmul_size_stays_at_the_floor_whatever_its_flops(tmp_path):
    """A square matmul's FLOPs stay above the work budget at the floor, yet no size goes below
    FLOOR (a 64-wide tile would then run once)."""
    path = tmp_path / "level1" / "1_Square_matrix_multiplication_.py"
    path.parent.mkdir()
    path.write_text("""
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)

N = 2048 * 2

def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]

def get_init_inputs():
    return []
""")
    problem = load(path)
    assert FLOOR <= problem.scaled["N"] < 2 * FLOOR
    assert math.prod(problem.inputs(0)[0].shape) <= BUDGET


def test_a_group_count_s_multiple_is_kept_while_equal_sizes_are_halved(tmp_path):
    """in_features == out_features (halved together) with a GroupNorm of 16 over them: odd
    halves break the divisibility, so the sizes are halved in multiples of 16 instead of
    being kept as published (which made a 9 x 8192 x 8192 matmul to emulate)."""
    path = tmp_path / "level2" / "30_Gemm_GroupNorm.py"
    path.parent.mkdir()
    path.write_text("""
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features, num_groups):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.norm = nn.GroupNorm(num_groups, out_features)

    def forward(self, x):
        return self.norm(self.gemm(x))

batch_size = 1024
in_features = 8192
out_features = 8192
num_groups = 16

def get_inputs():
    return [torch.rand(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features, num_groups]
""")
    problem = load(path)
    scaled = problem.scaled
    assert scaled["out_features"] % 16 == 0 and scaled["out_features"] % 64 != 0  # a tail
    assert all(FLOOR <= v < 4 * FLOOR for v in scaled.values()), scaled
    assert math.prod(problem.inputs(0)[0].shape) <= BUDGET

import torch
import torch.nn as nn


class Model(nn.Module):
    """A clamp to [-1, 1] written with masks and torch.where, then a ReLU variant that keeps
    values above a threshold."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.where(x > 1.0, 1.0, torch.where(x < -1.0, -1.0, x))
        return torch.where(y >= 0.25, y, torch.zeros_like(y) * 0.0 + 0.5 * y)


batch_size = 4096
dim = 16385


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []

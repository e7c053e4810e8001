import torch
import torch.nn as nn


class Model(nn.Module):
    """Reverse cumulative product along the last axis, written with flips."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumprod(x.flip(self.dim), dim=self.dim).flip(self.dim)


batch_size = 4096
length = 1500


def get_inputs():
    # factors near 1 keep long products in range
    return [1.0 + 0.01 * torch.randn(batch_size, length)]


def get_init_inputs():
    return [1]

import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer, exact GELU, then a clamp written as torch.where over a mask."""

    def __init__(self, in_features, out_features, limit):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.gelu = nn.GELU()
        self.limit = limit

    def forward(self, x):
        x = self.gelu(self.gemm(x))
        return torch.where(x > self.limit, self.limit, x)


batch_size = 1024
in_features = 4096
out_features = 4095
limit = 1.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, limit]

import torch
import torch.nn as nn


class Model(nn.Module):
    """Argmin over the last axis of a 2-D tensor (rows across lanes)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmin(x, dim=self.dim)


rows = 2048
cols = 3001
reduce_dim = -1


def get_inputs():
    # rounded to a coarse grid so that ties occur and the lowest index must win
    x = torch.round(torch.randn(rows, cols) * 4) / 4
    return [x]


def get_init_inputs():
    return [reduce_dim]

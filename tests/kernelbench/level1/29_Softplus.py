import torch
import torch.nn as nn


class Model(nn.Module):
    """Softplus of a 2-D tensor."""

    def __init__(self, alpha: float = 1.5):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softplus(x)


batch_size = 4096
dim = 65535


def get_inputs():
    x = torch.randn(batch_size, dim) * 4
    return [x]


def get_init_inputs():
    return []

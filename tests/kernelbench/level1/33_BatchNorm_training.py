import torch
import torch.nn as nn


class Model(nn.Module):
    """2-D batch normalisation in training mode: statistics over axes 0, 2 and 3."""

    def __init__(self, num_features: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features=num_features)
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


batch_size = 24
features = 40
dim1 = 120
dim2 = 90


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2) * 2 + 1]


def get_init_inputs():
    return [features]

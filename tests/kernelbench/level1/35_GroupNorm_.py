import torch
import torch.nn as nn


class Model(nn.Module):
    """Group normalisation of an NCHW tensor with a per-channel affine."""

    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)
        with torch.no_grad():          # weights away from 1 and 0, so the affine shows
            self.gn.weight.uniform_(0.5, 1.5)
            self.gn.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


batch_size = 32
features = 48
num_groups = 6
dim1 = 100
dim2 = 100


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [features, num_groups]

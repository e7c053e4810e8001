import torch
import torch.nn as nn


class Model(nn.Module):
    """1-D max pooling."""

    def __init__(self, kernel_size: int, stride: int):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size=kernel_size, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


batch_size = 32
channels = 64
length = 4096


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [4, 2]

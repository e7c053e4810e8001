import torch
import torch.nn as nn


class Model(nn.Module):
    """A grouped 2-D convolution with an asymmetric window, a stride along the rows, padding
    on both axes and a dilation along the columns, with a bias."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: tuple, stride: tuple,
                 padding: tuple, dilation: tuple, groups: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding, dilation=dilation, groups=groups, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


batch_size = 8
in_channels = 6
out_channels = 9
height = 96
width = 80
kernel_size = (3, 2)
stride = (2, 1)
padding = (1, 1)
dilation = (1, 2)
groups = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, dilation, groups]

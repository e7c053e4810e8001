import torch
import torch.nn as nn


class Model(nn.Module):
    """A padded 2-D convolution, then a scale, the exact GELU and a clamp (one fused chain)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, scale: float,
                 lo: float, hi: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)
        self.scale, self.lo, self.hi = scale, lo, hi

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x) * self.scale
        x = torch.nn.functional.gelu(x)
        return torch.clamp(x, min=self.lo, max=self.hi)


batch_size = 4
in_channels = 3
out_channels = 10
height = 72
width = 90
kernel_size = 3
scale = 1.5
lo = -0.1
hi = 0.8


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale, lo, hi]

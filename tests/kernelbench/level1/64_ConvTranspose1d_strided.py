import torch
import torch.nn as nn


class Model(nn.Module):
    """A strided, padded and dilated transposed 1-D convolution with output padding and no
    bias."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 padding: int, output_padding: int, dilation: int):
        super().__init__()
        self.deconv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride,
                                         padding=padding, output_padding=output_padding,
                                         dilation=dilation, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.deconv(x)


batch_size = 4
in_channels = 5
out_channels = 7
length = 300
kernel_size = 4
stride = 3
padding = 2
output_padding = 1
dilation = 2


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding, dilation]

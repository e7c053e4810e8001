import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer, Swish, softmax over the features."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = x * torch.sigmoid(x)
        x = torch.softmax(x, dim=1)
        return x


batch_size = 1024
in_features = 8192
out_features = 8192


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]

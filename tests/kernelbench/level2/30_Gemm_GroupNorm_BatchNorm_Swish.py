import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear, group norm, batch norm over the batch (training mode), then swish."""

    def __init__(self, in_features, out_features, num_groups):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.batch_norm = nn.BatchNorm1d(out_features)

    def forward(self, x):
        x = self.group_norm(self.gemm(x))
        x = self.batch_norm(x)
        return x * torch.sigmoid(x)


batch_size = 256
in_features = 512
out_features = 1024
num_groups = 16


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, num_groups]

import torch
import torch.nn as nn


class Model(nn.Module):
    """Scaled dot-product attention, then an einsum contracting the head dimension with a
    weight (a batched and a plain matrix product, one with a transposed operand)."""

    def __init__(self):
        super().__init__()

    def forward(self, Q, K, V, W):
        out = torch.nn.functional.scaled_dot_product_attention(Q, K, V)
        return torch.einsum("bhsd,ed->bhse", out, W)


batch_size = 2
num_heads = 4
sequence_length = 200
head_dim = 96
out_dim = 80


def get_inputs():
    shape = (batch_size, num_heads, sequence_length, head_dim)
    return [torch.rand(shape), torch.rand(shape), torch.rand(shape),
            torch.rand(out_dim, head_dim)]


def get_init_inputs():
    return []

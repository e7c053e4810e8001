import torch
import torch.nn as nn


class Model(nn.Module):
    """The upper triangle (above the first superdiagonal's offset) of a matmul's result."""

    def __init__(self, diagonal: int):
        super().__init__()
        self.diagonal = diagonal

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.triu(torch.matmul(A, B), diagonal=self.diagonal)


N = 2000


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return [1]

"""Vector fields with closed-form solutions, shared by the tests."""

from __future__ import annotations

import torch
from torch import nn


class Linear(nn.Module):
    """``dx/dt = A x`` with ``A`` a parameter: ``x(t) = exp(A t) x0``."""

    def __init__(self, a: torch.Tensor) -> None:
        super().__init__()
        self.a = nn.Parameter(a)

    def forward(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x @ self.a.T

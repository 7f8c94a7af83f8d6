"""The model of ``contnet-adjoint`` and its gradient comparison with backprop's; see
docs/odebench/experiments/contnet-adjoint.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

import contnet
import odecore
import torch
from odelayers.basis import PiecewiseConstant
from torch import Tensor, nn


@dataclass(frozen=True)
class Method:
    """One way to differentiate the block at ``N_t = factor * M``: contnet's block under
    autograd (``"backprop"``), or an odecore solve of its field with ``Adjoint`` or
    ``Checkpoint``, the basis knots as ``jump_ts`` where ``knots``."""

    gradient: Literal["backprop", "adjoint", "checkpoint"]
    factor: int = 1
    knots: bool = False

    @property
    def key(self) -> str:
        """``backprop``, ``adjoint-2M``, ``knot-1M``, ``checkpoint-1M``: runs, metrics."""
        if self.gradient == "backprop":
            return "backprop" if self.factor == 1 else f"backprop-{self.factor}M"
        name = "knot" if self.gradient == "adjoint" and self.knots else self.gradient
        return f"{name}-{self.factor}M"

    @property
    def label(self) -> str:
        """The method in words, for the report."""
        knots = self.gradient == "adjoint" and self.knots
        what = "adjoint with jump_t at the knots" if knots else self.gradient
        return f"{what}, N_t = {'M' if self.factor == 1 else f'{self.factor}M'}"

    def n_steps(self, pieces: int) -> int:
        return self.factor * pieces


BACKPROP = Method("backprop")

#: The parts of the parameters a gradient error is over: all of them, the block's alone.
ALL, BLOCK = "", "/block"


class AdjointNet(nn.Module):
    """A stride-2 stem to ``channels``, one OdeBlock ``dx/dt = M R(x; theta(t))`` (Euler,
    ``theta`` piecewise constant on ``M = pieces`` pieces), a head pooled to ``pool``."""

    def __init__(
        self, in_channels: int, num_classes: int, *, channels: int, pieces: int, pool: int,
        method: Method = BACKPROP,
    ) -> None:  # fmt: skip
        super().__init__()
        groups = 2 if channels % 2 == 0 else 1
        self.method = method
        self.stem = nn.Conv2d(in_channels, channels, 3, stride=2, padding=1, bias=False)
        residual = nn.Sequential(  # the paper's unit, group norm in place of batch norm
            nn.GroupNorm(groups, channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1, bias=False),
            nn.GroupNorm(groups, channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1, bias=False),
        )  # fmt: skip
        self.block = contnet.OdeBlock(
            residual, basis=PiecewiseConstant(pieces=pieces), solver="euler", n_steps=pieces,
            epsilon=float(pieces),
        )  # fmt: skip
        self.head = nn.Sequential(
            nn.GroupNorm(groups, channels), nn.ReLU(), nn.AdaptiveAvgPool2d(pool), nn.Flatten(),
            nn.Linear(channels * pool * pool, num_classes),
        )  # fmt: skip

    def forward(self, x: Tensor, method: Method | None = None) -> Tensor:
        """The logits, the block differentiated by ``method`` (default :attr:`method`)."""
        out: Tensor = self.head(integrate(self.block, self.stem(x), method or self.method))
        return out


def integrate(block: contnet.OdeBlock, x: Tensor, method: Method) -> Tensor:
    """The block's output at ``N_t = method.factor * M``, differentiated by ``method``:
    contnet's block for backprop (and without gradients), else Euler by odecore.solve."""
    n_steps = method.n_steps(block.basis.size)
    if method.gradient == "backprop" or not torch.is_grad_enabled():
        out: Tensor = block.manifest(n_steps=n_steps)(x)
        return out
    gradient = odecore.Adjoint if method.gradient == "adjoint" else odecore.Checkpoint

    def field(t: Tensor, y: Tensor | tuple[Tensor, ...]) -> Tensor:
        return block.field(float(t), cast(Tensor, y))  # y0 is one tensor: so is y

    solution = odecore.solve(
        field, x, t0=0.0, t1=1.0, solver=block.solver, dt0=1.0 / n_steps,
        jump_ts=block.basis.jump_ts if method.knots else None,
        gradient=gradient(params=tuple(block.parameters())),
    )  # fmt: skip
    return cast(Tensor, solution.ys)[-1]


def full_gradient(net: AdjointNet, images: Tensor, labels: Tensor, method: Method) -> Tensor:
    """The gradient of the mean cross-entropy, flattened in the order of the parameters."""
    loss = nn.functional.cross_entropy(net(images, method), labels)
    grads = torch.autograd.grad(loss, list(net.parameters()), materialize_grads=True)
    return torch.cat([g.reshape(-1) for g in grads])


def gradient_errors(
    net: AdjointNet, images: Tensor, labels: Tensor, methods: Sequence[Method]
) -> dict[tuple[str, str], float]:
    """``{(method.key, part): |g - g_bp| / |g_bp|}`` against backprop at the same ``N_t``,
    over every parameter (part :data:`ALL`) and the block's alone (:data:`BLOCK`)."""
    start = sum(p.numel() for p in net.stem.parameters())  # the block's coefficients
    block = slice(start, start + sum(p.numel() for p in net.block.parameters()))
    references = {
        k: full_gradient(net, images, labels, Method("backprop", k))
        for k in dict.fromkeys(m.factor for m in methods)
    }
    out: dict[tuple[str, str], float] = {}
    for method in methods:
        gradient, reference = full_gradient(net, images, labels, method), references[method.factor]
        for part, where in ((ALL, slice(None)), (BLOCK, block)):
            error = (gradient[where] - reference[where]).norm() / reference[where].norm()
            out[method.key, part] = float(error)
    return out

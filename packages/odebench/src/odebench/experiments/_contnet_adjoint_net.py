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
    """One way to differentiate the block: a gradient method at ``N_t = factor * M``.

    Args:
        gradient: ``"backprop"`` (contnet's :class:`~contnet.OdeBlock` under autograd),
            ``"adjoint"`` (:class:`odecore.Adjoint`) or ``"checkpoint"``
            (:class:`odecore.Checkpoint`, backprop's gradient in less memory), the last
            two on an odecore solve of the block's field.
        factor: ``N_t`` over ``M``.
        knots: the solve gets the basis knots as ``jump_ts`` (it restarts at each, and
            a step next to one reads the limit from its own side).
    """

    gradient: Literal["backprop", "adjoint", "checkpoint"]
    factor: int = 1
    knots: bool = False

    @property
    def key(self) -> str:
        """The run's name and the metrics' ``method``: ``backprop``, ``adjoint-2M``,
        ``knot-1M``, ``checkpoint-1M``."""
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
        """``N_t`` of a block of ``pieces`` pieces."""
        return self.factor * pieces


BACKPROP = Method("backprop")

#: The parts of the parameters a gradient error is over: all of them, the block's alone.
ALL, BLOCK = "", "/block"


def residual_module(channels: int) -> nn.Sequential:
    """``R``: the paper's pre-activation unit with group norm in place of batch norm,
    so that ``R`` is one function of ``(t, x)`` on the adjoint's backward states too."""
    groups = 2 if channels % 2 == 0 else 1
    return nn.Sequential(
        nn.GroupNorm(groups, channels), nn.ReLU(),
        nn.Conv2d(channels, channels, 3, padding=1, bias=False),
        nn.GroupNorm(groups, channels), nn.ReLU(),
        nn.Conv2d(channels, channels, 3, padding=1, bias=False),
    )  # fmt: skip


class AdjointNet(nn.Module):
    """A stride-2 stem to ``channels``, one OdeBlock, a head pooled to ``pool x pool``.

    The block integrates ``dx/dt = M R(x; theta(t))`` on ``[0, 1]`` by forward Euler,
    ``theta`` piecewise constant on ``M = pieces`` pieces: at ``N_t = M`` a ResNet of
    ``M`` units, at ``N_t = kM`` the same continuous model in ``k`` times finer steps;
    :meth:`forward` differentiates it by ``method`` (see :func:`integrate`).
    """

    def __init__(
        self, in_channels: int, num_classes: int, *, channels: int, pieces: int, pool: int,
        method: Method = BACKPROP,
    ) -> None:  # fmt: skip
        super().__init__()
        groups = 2 if channels % 2 == 0 else 1
        self.method = method
        self.stem = nn.Conv2d(in_channels, channels, 3, stride=2, padding=1, bias=False)
        self.block = contnet.OdeBlock(
            residual_module(channels), basis=PiecewiseConstant(pieces=pieces), solver="euler",
            n_steps=pieces, epsilon=float(pieces),
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
    """The block's output at ``N_t = method.factor * M``, differentiated by ``method``.

    Backprop, and every method when no gradient is recorded, is contnet's own block at
    that ``N_t`` (:meth:`contnet.OdeBlock.manifest`). The others solve the block's field
    (:meth:`contnet.OdeBlock.field`) with :func:`odecore.solve`, forward Euler in steps
    of ``1 / N_t``, the basis knots as ``jump_ts`` where ``method.knots``; the adjoint's
    backward solve is Euler with the same step.
    """
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
    """Every parameter's gradient of the mean cross-entropy, flattened into one vector
    in the order of ``net.parameters()`` (stem, block, head)."""
    params = list(net.parameters())
    loss = nn.functional.cross_entropy(net(images, method), labels)
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return torch.cat(
        [(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, grads)]
    )


def gradient_errors(
    net: AdjointNet, images: Tensor, labels: Tensor, methods: Sequence[Method]
) -> dict[tuple[str, str], float]:
    """Each method's relative gradient error ``|g - g_bp| / |g_bp|`` against backprop at
    the same ``N_t``, of the mean cross-entropy of ``images``: ``{(method.key, part):
    error}``, over every parameter (part :data:`ALL`) and the block's alone (:data:`BLOCK`).
    """
    start = sum(p.numel() for p in net.stem.parameters())  # the block's coefficients
    block = slice(start, start + sum(p.numel() for p in net.block.parameters()))
    references: dict[int, Tensor] = {}
    out: dict[tuple[str, str], float] = {}
    for method in methods:
        if method.factor not in references:
            backprop = Method("backprop", method.factor)
            references[method.factor] = full_gradient(net, images, labels, backprop)
        reference = references[method.factor]
        gradient = full_gradient(net, images, labels, method)
        out[method.key, ALL] = float((gradient - reference).norm() / reference.norm())
        ref = reference[block]
        out[method.key, BLOCK] = float((gradient[block] - ref).norm() / ref.norm())
    return out

"""What the models share: activations, gradient methods, the ODE layer's solver, norms."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import odecore
from odelayers import NeuralODE
from torch import Tensor, nn

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "softplus": nn.Softplus,
    "tanh": nn.Tanh,
    "silu": nn.SiLU,
}
"""Activation names for ``build_model(activation=...)``: ReLU (the papers') or a smooth one."""

GRADIENTS: dict[str, Callable[[], odecore.AbstractGradient]] = {
    "backprop": odecore.Autograd,
    "adjoint": odecore.Adjoint,
    "checkpoint": odecore.Checkpoint,
}
"""Gradient names for ``build_model(gradient=...)`` and the odecore objects they make."""


@dataclass(frozen=True)
class OdeConfig:
    """How every adaptive ``NeuralODE`` of a model solves: method, tolerance, gradient."""

    solver: str
    tol: float
    gradient: str

    def layer(self, field: Callable[[Tensor, Tensor], Tensor]) -> NeuralODE:
        """A ``NeuralODE`` on ``[0, 1]`` with this configuration."""
        return NeuralODE(
            field,
            solver=odecore.ADAPTIVE_METHODS[self.solver](),
            controller=odecore.PIDController(rtol=self.tol, atol=self.tol),
            gradient=GRADIENTS[self.gradient](),
        )


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` if it is an integer ``>= minimum``, else a ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value!r}.")
    return value


def check_choice(name: str, value: object, known: dict[str, object] | tuple[str, ...]) -> str:
    """``value`` if it is one of ``known``, else a ``ValueError`` listing them."""
    if not isinstance(value, str) or value not in known:
        raise ValueError(f"Unknown `{name}` {value!r}; known: {', '.join(known)}.")
    return value


def check_tol(tol: object) -> float:
    """``tol`` as a float if it is a positive finite number."""
    if (
        isinstance(tol, bool)
        or not isinstance(tol, (int, float))
        or not math.isfinite(tol)
        or tol <= 0
    ):
        raise ValueError(f"`tol` must be a positive finite number, got {tol!r}.")
    return float(tol)


def group_norm(channels: int) -> nn.GroupNorm:
    """GroupNorm with at most 32 groups of at least two channels (Chen's ``min(32, C)``).

    64 channels: 32 groups of 2, as in Chen et al.'s reference code; 42: 21 groups.
    """
    limit = min(32, max(1, channels // 2))
    groups = max(g for g in range(1, limit + 1) if channels % g == 0)
    return nn.GroupNorm(groups, channels)

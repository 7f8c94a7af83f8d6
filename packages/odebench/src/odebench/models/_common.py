"""What the models share: activations, argument checks, norms, the augment-ODE-head layout."""

from __future__ import annotations

from collections import OrderedDict

import odecore
from odelayers import NeuralODE
from torch import nn

from .._io import whole

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "softplus": nn.Softplus,
    "tanh": nn.Tanh,
    "silu": nn.SiLU,
}
"""Activation names for ``build_model(activation=...)``: ReLU (the papers') or a smooth one."""


def check_int(name: str, value: object, minimum: int) -> None:
    """Refuse ``value`` unless it is an integer ``>= minimum``: a ``ValueError`` naming ``name``."""
    if not whole(minimum)(value):
        raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value!r}.")


def group_norm(channels: int) -> nn.GroupNorm:
    """GroupNorm with at most 32 groups of at least two channels (Chen's ``min(32, C)``): 64
    channels give 32 groups of 2, as in Chen et al.'s reference code; 42 give 21."""
    limit = min(32, max(1, channels // 2))
    groups = max(g for g in range(1, limit + 1) if channels % g == 0)
    return nn.GroupNorm(groups, channels)


def augmented_node(
    augment: nn.Module, field: nn.Module, spec: odecore.OdeSpec, head: nn.Module
) -> nn.Sequential:
    """``augment``, a :class:`odelayers.NeuralODE` of ``field`` solved by ``spec``, ``head``."""
    return nn.Sequential(OrderedDict(augment=augment, ode=NeuralODE(field, spec=spec), head=head))

"""Chen et al. (2018)'s MNIST models: the MLP, the ResNet, the ODE-Net and the RK-Net, laid
out as the authors' reference code (the models page tables them)."""

from __future__ import annotations

from collections import OrderedDict

import odecore
from odelayers import DepthConcat, DepthSequential, NeuralODE
from torch import Tensor, nn

from ._common import group_norm

WIDTH = 64
"""Channels after the stem, of the residual blocks and of the ODE block."""
RESNET_BLOCKS = 6
"""Residual blocks of the ResNet (Chen et al., Sec. 3)."""
RKNET_STEPS = 6
"""RK4 steps of the RK-Net over ``[0, 1]``: one per residual block of the ResNet."""
MLP_HIDDEN = 300
"""Hidden units of the one-layer MLP (LeCun et al. 1998, as quoted in Table 1)."""


def mlp(in_features: int, num_classes: int, activation: type[nn.Module]) -> nn.Sequential:
    """Flatten, ``in_features -> 300``, activation, ``300 -> num_classes``."""
    return nn.Sequential(
        OrderedDict(
            flatten=nn.Flatten(),
            hidden=nn.Linear(in_features, MLP_HIDDEN),
            activation=activation(),
            out=nn.Linear(MLP_HIDDEN, num_classes),
        )
    )


def _stem(in_channels: int) -> nn.Sequential:
    """28x28 -> 6x6 (32x32 -> 7x7) at 64 channels: two down-samplings."""
    return nn.Sequential(
        nn.Conv2d(in_channels, WIDTH, 3, 1),
        group_norm(WIDTH),
        nn.ReLU(),
        nn.Conv2d(WIDTH, WIDTH, 4, 2, 1),
        group_norm(WIDTH),
        nn.ReLU(),
        nn.Conv2d(WIDTH, WIDTH, 4, 2, 1),
    )


def _head(num_classes: int) -> nn.Sequential:
    return nn.Sequential(
        group_norm(WIDTH),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(WIDTH, num_classes),
    )


class ResBlock(nn.Module):
    """The pre-activation residual block ``x + R(x)``: GN, act, conv3x3, GN, act, conv3x3."""

    def __init__(self, channels: int, activation: type[nn.Module]) -> None:
        super().__init__()
        self.residual = nn.Sequential(
            group_norm(channels),
            activation(),
            nn.Conv2d(channels, channels, 3, 1, 1, bias=False),
            group_norm(channels),
            activation(),
            nn.Conv2d(channels, channels, 3, 1, 1, bias=False),
        )

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = x + self.residual(x)
        return out


def ode_function(channels: int, activation: type[nn.Module]) -> DepthSequential:
    """GN, act, conv3x3 with ``t`` as a channel, GN, act, the same conv, GN: ``f(t, x)``."""
    return DepthSequential(
        group_norm(channels),
        activation(),
        DepthConcat(),
        nn.Conv2d(channels + 1, channels, 3, 1, 1),
        group_norm(channels),
        activation(),
        DepthConcat(),
        nn.Conv2d(channels + 1, channels, 3, 1, 1),
        group_norm(channels),
    )


def resnet(in_channels: int, num_classes: int, activation: type[nn.Module]) -> nn.Sequential:
    """Stem, six residual blocks, head (Chen et al.'s ResNet, about 0.58M parameters)."""
    blocks = nn.Sequential(*(ResBlock(WIDTH, activation) for _ in range(RESNET_BLOCKS)))
    return nn.Sequential(
        OrderedDict(stem=_stem(in_channels), blocks=blocks, head=_head(num_classes))
    )


def odenet(
    in_channels: int, num_classes: int, activation: type[nn.Module], spec: odecore.OdeSpec
) -> nn.Sequential:
    """Stem, one adaptive ODE block, head (Chen et al.'s ODE-Net, about 0.21M parameters)."""
    ode = NeuralODE(ode_function(WIDTH, activation), spec=spec)
    return nn.Sequential(OrderedDict(stem=_stem(in_channels), ode=ode, head=_head(num_classes)))


def rknet(in_channels: int, num_classes: int, activation: type[nn.Module]) -> nn.Sequential:
    """The ODE-Net's layout with RK4 in fixed steps, differentiated by backprop (RK-Net)."""
    spec = odecore.OdeSpec(solver=odecore.RK4(), n_steps=RKNET_STEPS, gradient=odecore.Autograd())
    return odenet(in_channels, num_classes, activation, spec)

"""Image models of the augmentation papers: Dupont et al. (2019), Massaroli et al. (2020).

Dupont et al.'s NODE and ANODE run the ODE on the image itself: a convolutional field
(1x1 conv, activation, 3x3 conv, activation, 1x1 conv, every convolution seeing the
depth ``t`` as one more channel), optionally ``p`` zero channels appended first, and a
linear readout of the flattened terminal state. The widths are the papers' budgets:
``F = 92`` (NODE) and ``F = 64, p = 5`` (ANODE) on MNIST, ``F = 125`` and
``F = 64, p = 10`` on CIFAR-10; the configuration is chosen by the number of input
channels (1: MNIST's, otherwise CIFAR-10's).

Massaroli et al.'s IL-NODE and second-order model follow the authors' CIFAR-10
notebooks: a 3x3 convolution (no bias) lifts the image to ``W = 42`` channels (IL-NODE)
or to ``W / 2`` positions with as many zero velocities (second order); the
depth-invariant field is GN, 3x3 conv (no bias), activation, 3x3 conv, activation,
GN, 1x1 conv; the head a 1x1 conv to 6 channels, 4x4 average pooling and a linear
layer. For 1-channel images ``W = 32``, our reconstruction of the MNIST models, whose
code is not published (it comes within 2% of the poster's 20.7k and 20.0k).
"""

from __future__ import annotations

from collections import OrderedDict

from odelayers import (
    DepthConcat,
    DepthSequential,
    DropAugmented,
    HigherOrder,
    InputLayerAugmentation,
    ZeroAugmentation,
)
from torch import Tensor, nn

from ._common import OdeConfig, group_norm

DUPONT: dict[str, dict[bool, tuple[int, int]]] = {
    "node": {True: (92, 0), False: (125, 0)},
    "anode": {True: (64, 5), False: (64, 10)},
}
"""``(filters F, augmented channels p)`` by model and by ``in_channels == 1`` (MNIST)."""

HEAD_CHANNELS = 6
"""Channels of Massaroli et al.'s 1x1 readout convolution."""
HEAD_POOL = 4
"""Side of the average-pooled map in Massaroli et al.'s head."""


class FlatReadout(nn.Module):
    """A linear layer on the flattened ``(channels, size, size)`` terminal state."""

    def __init__(self, channels: int, image_size: int, num_classes: int) -> None:
        super().__init__()
        self.shape = (channels, image_size, image_size)
        self.linear = nn.Linear(channels * image_size * image_size, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        if tuple(x.shape[1:]) != self.shape:
            expected = ", ".join(map(str, self.shape))
            raise ValueError(
                f"The readout was built for states of shape (batch, {expected}), got "
                f"{tuple(x.shape)}; build the model with the data's `in_channels` and "
                "`image_size`."
            )
        out: Tensor = self.linear(x.flatten(1))
        return out

    def extra_repr(self) -> str:
        return f"shape={self.shape}"


def dupont_field(channels: int, filters: int, activation: type[nn.Module]) -> DepthSequential:
    """Conv 1x1, act, conv 3x3, act, conv 1x1, each with ``t`` as an extra input channel."""
    return DepthSequential(
        DepthConcat(),
        nn.Conv2d(channels + 1, filters, 1),
        activation(),
        DepthConcat(),
        nn.Conv2d(filters + 1, filters, 3, padding=1),
        activation(),
        DepthConcat(),
        nn.Conv2d(filters + 1, channels, 1),
    )


def dupont(
    name: str,
    in_channels: int,
    num_classes: int,
    image_size: int,
    activation: type[nn.Module],
    config: OdeConfig,
) -> nn.Sequential:
    """Dupont et al.'s NODE (``name="node"``) or ANODE (``"anode"``) image classifier."""
    filters, extra = DUPONT[name][in_channels == 1]
    channels = in_channels + extra
    augment: nn.Module = ZeroAugmentation(extra) if extra else nn.Identity()
    return nn.Sequential(
        OrderedDict(
            augment=augment,
            ode=config.layer(dupont_field(channels, filters, activation)),
            head=FlatReadout(channels, image_size, num_classes),
        )
    )


def massaroli_width(in_channels: int) -> int:
    """The ODE state's channels: 42 (the CIFAR-10 notebooks), 32 for 1-channel images."""
    return 32 if in_channels == 1 else 42


def massaroli_field(
    channels: int, out_channels: int, activation: type[nn.Module]
) -> DepthSequential:
    """GN, conv3x3 (no bias), act, conv3x3, act, GN, conv1x1 to ``out_channels``."""
    return DepthSequential(
        group_norm(channels),
        nn.Conv2d(channels, channels, 3, padding=1, bias=False),
        activation(),
        nn.Conv2d(channels, channels, 3, padding=1),
        activation(),
        group_norm(channels),
        nn.Conv2d(channels, out_channels, 1),
    )


def _massaroli_head(channels: int, num_classes: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(channels, HEAD_CHANNELS, 1),
        nn.AdaptiveAvgPool2d(HEAD_POOL),
        nn.Flatten(),
        nn.Linear(HEAD_CHANNELS * HEAD_POOL * HEAD_POOL, num_classes),
    )


def ilnode(
    in_channels: int, num_classes: int, activation: type[nn.Module], config: OdeConfig
) -> nn.Sequential:
    """Input-layer augmentation: ``z(0) = conv3x3(x)`` at ``W`` channels, a NODE, the head."""
    width = massaroli_width(in_channels)
    lift = nn.Conv2d(in_channels, width, 3, padding=1, bias=False)
    return nn.Sequential(
        OrderedDict(
            augment=InputLayerAugmentation(in_channels, width, layer=lift),
            ode=config.layer(massaroli_field(width, width, activation)),
            head=_massaroli_head(width, num_classes),
        )
    )


def sonode(
    in_channels: int, num_classes: int, activation: type[nn.Module], config: OdeConfig
) -> nn.Sequential:
    """Second order: positions ``conv3x3(x)``, zero velocities, ``q'' = f(q, q')``, the head.

    The state holds ``W / 2`` position and ``W / 2`` velocity channels; the field sees
    both and returns the acceleration (:class:`odelayers.HigherOrder`); the head reads
    the positions.
    """
    positions = massaroli_width(in_channels) // 2
    lift = nn.Conv2d(in_channels, positions, 3, padding=1, bias=False)
    field = massaroli_field(2 * positions, positions, activation)
    return nn.Sequential(
        OrderedDict(
            lift=InputLayerAugmentation(in_channels, positions, layer=lift),
            augment=ZeroAugmentation(positions),
            ode=config.layer(HigherOrder(field, features=positions, order=2)),
            drop=DropAugmented(positions),
            head=_massaroli_head(positions, num_classes),
        )
    )

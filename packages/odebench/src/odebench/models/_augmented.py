"""Image models of the augmentation papers: Dupont et al. (2019), Massaroli et al. (2020).

The configuration follows the input channels (1: MNIST's, else CIFAR-10's); the models
page tables the layouts and where they come from.
"""

from __future__ import annotations

from collections import OrderedDict

import odecore
from odelayers import (
    DepthConcat,
    DepthSequential,
    DropAugmented,
    HigherOrder,
    InputLayerAugmentation,
    NeuralODE,
    ZeroAugmentation,
)
from torch import Tensor, nn

from ._common import augmented_node, group_norm

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


def dupont(
    name: str,
    in_channels: int,
    num_classes: int,
    image_size: int,
    activation: type[nn.Module],
    spec: odecore.OdeSpec,
) -> nn.Sequential:
    """Dupont et al.'s NODE (``name="node"``) or ANODE (``"anode"``) image classifier: the
    field is conv 1x1, act, conv 3x3, act, conv 1x1, each with ``t`` as an extra channel."""
    filters, extra = DUPONT[name][in_channels == 1]
    channels = in_channels + extra
    field = DepthSequential(
        DepthConcat(),
        nn.Conv2d(channels + 1, filters, 1),
        activation(),
        DepthConcat(),
        nn.Conv2d(filters + 1, filters, 3, padding=1),
        activation(),
        DepthConcat(),
        nn.Conv2d(filters + 1, channels, 1),
    )
    augment = ZeroAugmentation(extra) if extra else nn.Identity()
    return augmented_node(augment, field, spec, FlatReadout(channels, image_size, num_classes))


def massaroli_width(in_channels: int) -> int:
    """The ODE state's channels: 42 (the CIFAR-10 notebooks), 32 for 1-channel images."""
    return 32 if in_channels == 1 else 42


def massaroli_field(
    channels: int, out_channels: int, activation: type[nn.Module], hidden: int | None = None
) -> DepthSequential:
    """GN, conv3x3 (no bias) to ``hidden`` (default ``channels``), act, conv3x3, act, GN,
    conv1x1 to ``out_channels``."""
    hidden = channels if hidden is None else hidden
    return DepthSequential(
        group_norm(channels),
        nn.Conv2d(channels, hidden, 3, padding=1, bias=False),
        activation(),
        nn.Conv2d(hidden, hidden, 3, padding=1),
        activation(),
        group_norm(hidden),
        nn.Conv2d(hidden, out_channels, 1),
    )


def _massaroli_head(
    channels: int, num_classes: int, head_channels: int = HEAD_CHANNELS
) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(channels, head_channels, 1),
        nn.AdaptiveAvgPool2d(HEAD_POOL),
        nn.Flatten(),
        nn.Linear(head_channels * HEAD_POOL * HEAD_POOL, num_classes),
    )


def massaroli_vanilla(
    in_channels: int, num_classes: int, activation: type[nn.Module], spec: odecore.OdeSpec
) -> nn.Sequential:
    """No augmentation: the ODE on the image's own channels, a wider field, the head (its
    1x1 conv keeping the ``C`` channels)."""
    hidden = 48 if in_channels == 1 else 62  # 62: the CIFAR-10 notebook's
    return augmented_node(
        nn.Identity(),
        massaroli_field(in_channels, in_channels, activation, hidden),
        spec,
        _massaroli_head(in_channels, num_classes, head_channels=in_channels),
    )


def massaroli_augmented(
    in_channels: int,
    num_classes: int,
    activation: type[nn.Module],
    spec: odecore.OdeSpec,
    *,
    lift: bool,
) -> nn.Sequential:
    """The image augmented to ``W`` channels (IL-NODE with ``lift``: ``z(0) = conv3x3(x)``;
    else zero channels), a NODE of the field on ``W``, the head."""
    width = massaroli_width(in_channels)
    _check_fits(in_channels, width if lift else width - 1, f"a state of {width} channels")
    if lift:
        layer = nn.Conv2d(in_channels, width, 3, padding=1, bias=False)
        augment: nn.Module = InputLayerAugmentation(in_channels, width, layer=layer)
    else:
        augment = ZeroAugmentation(width - in_channels)
    field = massaroli_field(width, width, activation)
    return augmented_node(augment, field, spec, _massaroli_head(width, num_classes))


def _check_fits(in_channels: int, most: int, into: str) -> None:
    """Refuse more image channels than the model's state can take in."""
    if in_channels > most:
        raise ValueError(
            f"`in_channels` must be at most {most} for this model, which lifts or augments "
            f"the image to {into}; got {in_channels}."
        )


def sonode(
    in_channels: int, num_classes: int, activation: type[nn.Module], spec: odecore.OdeSpec
) -> nn.Sequential:
    """Second order: ``W / 2`` positions ``conv3x3(x)``, as many zero velocities,
    ``q'' = f(q, q')``, the head on the positions."""
    positions = massaroli_width(in_channels) // 2
    _check_fits(in_channels, positions, f"{positions} position channels")
    lift = nn.Conv2d(in_channels, positions, 3, padding=1, bias=False)
    field = massaroli_field(2 * positions, positions, activation)
    return nn.Sequential(
        OrderedDict(
            lift=InputLayerAugmentation(in_channels, positions, layer=lift),
            augment=ZeroAugmentation(positions),
            ode=NeuralODE(HigherOrder(field, features=positions, order=2), spec=spec),
            drop=DropAugmented(positions),
            head=_massaroli_head(positions, num_classes),
        )
    )

"""Dupont et al. (2019)'s toy regression models for ``g(x)``: a NODE and an ANODE on vectors."""

from __future__ import annotations

import odecore
from odelayers import DepthConcat, DepthSequential, ZeroAugmentation
from torch import nn

from ._common import augmented_node

TOY_HIDDEN = 32
"""Hidden units of the toy vector field's two layers."""
TOY_AUGMENT = 5
"""Zero dimensions of the toy ANODE (``p = 5`` in the authors' configuration)."""


def toy(
    in_features: int,
    out_features: int,
    augment: int,
    activation: type[nn.Module],
    spec: odecore.OdeSpec,
) -> nn.Sequential:
    """``augment`` zero dimensions (none: a NODE), the ODE of the time-dependent MLP field
    ``[x, t] -> 32 -> act -> 32 -> act -> features``, a linear readout."""
    features = in_features + augment
    field = DepthSequential(
        DepthConcat(),
        nn.Linear(features + 1, TOY_HIDDEN),
        activation(),
        nn.Linear(TOY_HIDDEN, TOY_HIDDEN),
        activation(),
        nn.Linear(TOY_HIDDEN, features),
    )
    augmentation = ZeroAugmentation(augment) if augment else nn.Identity()
    return augmented_node(augmentation, field, spec, nn.Linear(features, out_features))

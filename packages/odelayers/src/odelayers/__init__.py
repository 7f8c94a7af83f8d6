"""odelayers: Neural ODE layers for PyTorch, built on odecore.

* :class:`NeuralODE`, :class:`AdaptiveDepthNODE`, :class:`CNF`: the layers;
* vector-field blocks: :class:`DepthConcat`, :class:`DataControl`,
  :class:`GalerkinLinear`, :class:`GalerkinConv2d`, :class:`DepthSequential`, and the
  depth bases in :mod:`odelayers.basis`;
* augmentation: :class:`ZeroAugmentation`, :class:`InputLayerAugmentation`,
  :class:`HigherOrder`, :class:`DropAugmented`, :class:`ProjectAugmented`;
* integrals along the solve: :class:`KineticEnergy`, :class:`JacobianFrobenius`,
  :class:`IntegralLoss`.
"""

from . import basis
from ._augment import (
    DropAugmented,
    HigherOrder,
    InputLayerAugmentation,
    ProjectAugmented,
    ZeroAugmentation,
)
from ._cnf import CNF, NegativeTrace, standard_normal_log_prob
from ._fields import (
    DataControl,
    DepthConcat,
    DepthLayer,
    DepthSequential,
    GalerkinConv2d,
    GalerkinLinear,
)
from ._integrals import IntegralLoss, IntegralTerm, JacobianFrobenius, KineticEnergy
from ._neural_ode import AdaptiveDepthNODE, NeuralODE

__version__ = "0.1.0"

__all__ = [
    "CNF",
    "AdaptiveDepthNODE",
    "DataControl",
    "DepthConcat",
    "DepthLayer",
    "DepthSequential",
    "DropAugmented",
    "GalerkinConv2d",
    "GalerkinLinear",
    "HigherOrder",
    "InputLayerAugmentation",
    "IntegralLoss",
    "IntegralTerm",
    "JacobianFrobenius",
    "KineticEnergy",
    "NegativeTrace",
    "NeuralODE",
    "ProjectAugmented",
    "ZeroAugmentation",
    "basis",
    "standard_normal_log_prob",
]

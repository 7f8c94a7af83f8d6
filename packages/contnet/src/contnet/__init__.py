"""contnet: continuous-in-depth networks (ContinuousNet) for PyTorch.

A :class:`ContinuousNet` is a residual module ``R`` and a weight function
``theta(t)`` (a basis expansion over depth); a fixed-step solver and a step count
``N_t``, the paper's manifestation (scheme, N_t), turn it into one discrete network
(Queiruga et al. 2020). :meth:`ContinuousNet.manifest` evaluates the same weights with
another solver or step count, :func:`refine` changes the step count, the solver or the
basis without changing the model, and
:meth:`ContinuousNet.to_resnet` / :meth:`ContinuousNet.from_resnet` move between the
continuous form and a plain ResNet.
"""

from ._analysis import Convergence, convergence_study, manifestation_sweep
from ._block import CarriedStatisticsWarning, OdeBlock, carry_statistics, fixed_solver
from ._continuous import ContinuousModule, transfer
from ._net import (
    ContinuousNet,
    ResidualUnit,
    ResNet,
    ResNetBlock,
    Stitch,
    make_basis,
    residual_module,
)
from ._recalibrate import recalibrate
from ._refine import RefinementSchedule, carry_optimizer, refine

__version__ = "0.1.0"

__all__ = [
    "CarriedStatisticsWarning",
    "ContinuousModule",
    "ContinuousNet",
    "Convergence",
    "OdeBlock",
    "RefinementSchedule",
    "ResNet",
    "ResNetBlock",
    "ResidualUnit",
    "Stitch",
    "carry_optimizer",
    "carry_statistics",
    "convergence_study",
    "fixed_solver",
    "make_basis",
    "manifestation_sweep",
    "recalibrate",
    "refine",
    "residual_module",
    "transfer",
]

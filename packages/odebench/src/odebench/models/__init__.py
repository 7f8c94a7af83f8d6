"""The papers' models by name: Chen et al., Dupont et al., Massaroli et al., Queiruga et al.

:func:`build_model` makes any model of :data:`MODELS`; :func:`count_parameters`,
:func:`ode_layers` and :func:`nfe` read what a trainer logs off it.

Example:
    >>> import torch
    >>> from odebench.models import MODELS, build_model, count_parameters
    >>> model = build_model("anode", in_channels=1, num_classes=10, image_size=28)
    >>> model(torch.randn(2, 1, 28, 28)).shape
    torch.Size([2, 10])
    >>> count_parameters(model), MODELS["anode"].published_params
    (85462, 84000)
"""

from ._build import MODELS, ModelInfo, build_model, count_parameters, nfe, ode_layers

# isort: split
# For the layers above, not for users (not in __all__).
from ._build import CONTINUOUS_NETS as CONTINUOUS_NETS
from ._build import CONTNET_METHOD as CONTNET_METHOD
from ._build import CONTNET_STEPS as CONTNET_STEPS
from ._build import ODE_MODELS as ODE_MODELS
from ._build import TRAIN_METHOD as TRAIN_METHOD
from ._build import TRAIN_TOL as TRAIN_TOL
from ._toy import TOY_HIDDEN as TOY_HIDDEN

__all__ = ["MODELS", "ModelInfo", "build_model", "count_parameters", "nfe", "ode_layers"]

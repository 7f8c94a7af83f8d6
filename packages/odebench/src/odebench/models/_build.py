"""The registry of models, :func:`build_model`, and what a trainer reads off a model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import Literal

import odecore
from contnet import ContinuousNet, fixed_solver
from odelayers import NeuralODE
from torch import nn

from . import _augmented, _chen, _toy
from ._common import ACTIVATIONS, check_int

TRAIN_METHOD = "dopri5"
"""The method of odebench's ODE models when none is named."""
TRAIN_TOL = 1e-3
"""``rtol = atol`` of odebench's ODE models when none is given: Chen et al.'s MNIST setting
(``odebench train --help`` says why it is not odecore's default)."""
TRAIN_SPEC = odecore.OdeSpec.from_method(TRAIN_METHOD, rtol=TRAIN_TOL, atol=TRAIN_TOL)
"""The spec of odebench's ODE models when none is given: dopri5 at 1e-3, backprop."""

CONTNET_METHOD = "euler"
"""The method of the ContinuousNet models when none is named (a ResNet's forward pass)."""
CONTNET_STEPS = 8
"""``N_t = M`` of the ContinuousNet models: the 8-8-8 networks of the authors' README."""
CONTNET_SPEC = odecore.OdeSpec.from_method(CONTNET_METHOD, options={"n_steps": CONTNET_STEPS})
"""The spec of the ContinuousNet models when none is given: Euler, 8 steps per block."""

CONTINUOUS_NETS: tuple[str, ...] = ("continuousnet", "wide-continuousnet")
"""The models that are a ContinuousNet: they step a fixed-step method ``n_steps``
times per block, take ``epsilon``, and can be refined."""

ODE_MODELS: tuple[str, ...] = (
    "odenet", "node", "anode", "dissecting-node", "dissecting-anode", "ilnode", "sonode",
    "toy-node", "toy-anode",
)  # fmt: skip
"""The models whose :class:`odelayers.NeuralODE` layers solve by the given spec, with
any method and gradient (the RK-Net's block is always 6 RK4 steps)."""

MIN_IMAGE_SIZE = 8
"""The smallest image side the image models accept (Chen et al.'s stem needs 8)."""


@dataclass(frozen=True)
class ModelInfo:
    """What :data:`MODELS` says about one model: where it comes from and its published size.

    Args:
        name: the name :func:`build_model` takes.
        description: one line, shown by ``odebench list``.
        kind: ``"image"`` (takes ``(N, C, H, W)`` images) or ``"toy"`` (takes
            ``(N, d)`` vectors).
        paper: a short reference, such as ``"Chen et al. 2018"``.
        published_params: the paper's parameter count on ``dataset``; ``None``
            where none is published.
        dataset: the data set of ``published_params`` (``"mnist"``, ``"cifar10"``,
            ``"cifar100"``); ``None`` without a count.
        also_published: more ``(dataset, count)`` pairs.

    Example:
        >>> from odebench.models import MODELS
        >>> info = MODELS["odenet"]
        >>> info.paper, info.published_params, info.dataset
        ('Chen et al. 2018', 220000, 'mnist')
    """

    name: str
    description: str
    kind: Literal["image", "toy"]
    paper: str
    published_params: int | None = None
    dataset: str | None = None
    also_published: tuple[tuple[str, int], ...] = ()


_CHEN = "Chen et al. 2018"
_DUPONT = "Dupont et al. 2019"
_MASSAROLI = "Massaroli et al. 2020"
_QUEIRUGA = "Queiruga et al. 2020"


def _image_info(
    paper: str, dataset: str, name: str, description: str, params: int, *also: tuple[str, int]
) -> ModelInfo:
    """An image model of ``paper`` with ``params`` parameters published on ``dataset``."""
    return ModelInfo(name, description, "image", paper, params, dataset, also)


_chen_info = partial(_image_info, _CHEN, "mnist")
# Dupont et al.'s image NODE and ANODE share one budget: 84k on MNIST, 172k on CIFAR-10.
_dupont_info = partial(_image_info, _DUPONT, "mnist")
_massaroli_info = partial(_image_info, _MASSAROLI, "cifar10")
_queiruga_info = partial(_image_info, _QUEIRUGA, "cifar10")

_INFOS = (
    _chen_info(
        "mlp",
        "One-hidden-layer MLP, pixels -> 300 -> classes (Chen et al.'s Table 1 baseline).",
        240_000,
    ),
    _chen_info(
        "resnet",
        "Chen et al.'s ResNet: two down-samplings, six residual blocks at 64 channels.",
        600_000,
    ),
    _chen_info(
        "odenet",
        "Chen et al.'s ODE-Net: the ResNet with its blocks replaced by one adaptive ODE block.",
        220_000,
    ),
    _chen_info(
        "rknet",
        "Chen et al.'s RK-Net: the ODE-Net's block in 6 fixed RK4 steps, backpropagated.",
        220_000,
    ),
    _dupont_info(
        "node",
        "Dupont et al.'s image NODE: conv field on the image itself, linear readout.",
        84_000,
        ("cifar10", 172_000),
    ),
    _dupont_info(
        "anode",
        "Dupont et al.'s image ANODE: the NODE on the image plus zero channels.",
        84_000,
        ("cifar10", 172_000),
    ),
    _massaroli_info(
        "dissecting-node",
        "Massaroli et al.'s vanilla image NODE: no augmentation, the field on the image itself.",
        37_100,
        ("mnist", 21_400),
    ),
    _massaroli_info(
        "dissecting-anode",
        "Massaroli et al.'s 0-augmented image NODE: the image plus zero channels, W = 42.",
        35_000,
        ("mnist", 20_400),
    ),
    _massaroli_info(
        "ilnode",
        "Massaroli et al.'s IL-NODE: a conv input layer lifts the image, then a NODE.",
        36_100,
        ("mnist", 20_700),
    ),
    _massaroli_info(
        "sonode",
        "Massaroli et al.'s second-order image NODE: conv positions, zero velocities.",
        34_600,
        ("mnist", 20_000),
    ),
    _queiruga_info(
        "continuousnet",
        "Queiruga et al.'s ContinuousNet, channels 16-32-64, Euler, N_t = M = 8.",
        860_000,
    ),
    _image_info(
        _QUEIRUGA,
        "cifar100",
        "wide-continuousnet",
        "Queiruga et al.'s Wide-ContinuousNet, channels 64-128-256, Euler, N_t = M = 8.",
        13_630_000,
    ),
    _queiruga_info(
        "continuous-resnet",
        "A plain ResNet of the ContinuousNet layout (8 units per block), the baseline.",
        850_000,
    ),
    ModelInfo(
        "toy-node",
        "Dupont et al.'s toy NODE for g(x): MLP field d+t -> 32 -> 32 -> d, linear readout.",
        "toy",
        _DUPONT,
    ),
    ModelInfo(
        "toy-anode",
        "Dupont et al.'s toy ANODE for g(x): the toy NODE with 5 zero dimensions.",
        "toy",
        _DUPONT,
    ),
)

MODELS: Mapping[str, ModelInfo] = MappingProxyType({info.name: info for info in _INFOS})
"""Every model :func:`build_model` knows, by name, in a read-only mapping."""


def build_model(
    name: str,
    *,
    in_channels: int,
    num_classes: int,
    image_size: int,
    activation: str = "relu",
    spec: odecore.OdeSpec | None = None,
    epsilon: float | None = None,
) -> nn.Module:
    """A freshly initialised model of :data:`MODELS` by name (the models page says what the
    options do to each).

    Args:
        name: a key of :data:`MODELS`.
        in_channels: image channels; for toy models the input dimension ``d``.
        num_classes: outputs (logits); for toy models the output dimension (1 for
            ``g(x)``).
        image_size: the side of the square images, at least 8; toy models ignore it.
        activation: the nonlinearity of the vector field: ``"relu"``, ``"softplus"``,
            ``"tanh"`` or ``"silu"``.
        spec: how the model solves, passed on unchanged to every
            :class:`odelayers.NeuralODE`; ``None``: dopri5 at ``rtol = atol = 1e-3``,
            backprop (the ContinuousNet models: Euler, 8 steps per block).
        epsilon: the ContinuousNet models only: the time scale of every block;
            ``None``: ``spec.n_steps``.

    Returns:
        The model, in float32 on the CPU, in training mode: image models map
        normalised ``(N, in_channels, image_size, image_size)`` to logits
        ``(N, num_classes)``, toy models ``(N, in_channels)`` to ``(N, num_classes)``.

    Raises:
        ValueError: for an unknown ``name`` or ``activation``, ``in_channels``,
            ``num_classes``, (image models) ``image_size`` or ``epsilon`` out of
            range, a spec for a model that takes none, an adaptive or ``dt0`` spec,
            a gradient other than backprop, a ``max_steps`` or ``compile`` for a
            ContinuousNet, or ``epsilon``
            for a model that is not a ContinuousNet.
        TypeError: if ``spec`` is not an :class:`odecore.OdeSpec`.

    Example:
        >>> import torch
        >>> from odebench.models import build_model
        >>> model = build_model("odenet", in_channels=1, num_classes=10, image_size=28)
        >>> model(torch.randn(2, 1, 28, 28)).shape
        torch.Size([2, 10])
    """
    if name not in MODELS:
        raise ValueError(f"Unknown model {name!r}; known models: {', '.join(MODELS)}.")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(f"Unknown `activation` {activation!r}; known: {', '.join(ACTIVATIONS)}.")
    act = ACTIVATIONS[activation]
    check_int("in_channels", in_channels, 1)
    check_int("num_classes", num_classes, 1)
    if spec is not None and not isinstance(spec, odecore.OdeSpec):
        raise TypeError(f"`spec` must be an odecore.OdeSpec, got {spec!r}.")
    if spec is not None and name not in (*ODE_MODELS, *CONTINUOUS_NETS):
        raise ValueError(
            f"`spec` does not apply to {name!r}, which solves no ODE (or, the RK-Net, always "
            "the same 6 RK4 steps); leave it unset."
        )
    if epsilon is not None and name not in CONTINUOUS_NETS:
        raise ValueError(
            f"`epsilon` applies to the ContinuousNet models only "
            f"({', '.join(CONTINUOUS_NETS)}), not to {name!r}; leave it unset."
        )
    ode = TRAIN_SPEC if spec is None else spec
    if MODELS[name].kind == "toy":
        augment = _toy.TOY_AUGMENT if name == "toy-anode" else 0
        return _toy.toy(in_channels, num_classes, augment, act, ode)
    check_int("image_size", image_size, MIN_IMAGE_SIZE)
    if name == "mlp":
        return _chen.mlp(in_channels * image_size * image_size, num_classes, act)
    if name == "resnet":
        return _chen.resnet(in_channels, num_classes, act)
    if name == "odenet":
        return _chen.odenet(in_channels, num_classes, act, ode)
    if name == "rknet":
        return _chen.rknet(in_channels, num_classes, act)
    if name in ("node", "anode"):
        return _augmented.dupont(name, in_channels, num_classes, image_size, act, ode)
    if name == "dissecting-node":
        return _augmented.massaroli_vanilla(in_channels, num_classes, act, ode)
    if name in ("dissecting-anode", "ilnode"):
        lift = name == "ilnode"
        return _augmented.massaroli_augmented(in_channels, num_classes, act, ode, lift=lift)
    if name == "sonode":
        return _augmented.sonode(in_channels, num_classes, act, ode)
    solver, steps = _contnet_steps(name, spec)
    channels = (64, 128, 256) if name == "wide-continuousnet" else (16, 32, 64)
    net = ContinuousNet(
        in_channels,
        num_classes,
        channels,
        n_steps=steps,
        solver=solver,
        epsilon=epsilon,  # contnet checks it
        activation=act,
    )
    return net.to_resnet() if name == "continuous-resnet" else net


def _contnet_steps(
    name: str, spec: odecore.OdeSpec | None
) -> tuple[odecore.AbstractExplicitRK, int]:
    """The solver and ``N_t`` of a ContinuousNet model from its spec, checked."""
    spec = CONTNET_SPEC if spec is None else spec
    try:  # contnet decides which solvers a ContinuousNet steps
        solver = fixed_solver(spec.solver)[1]
    except ValueError:
        solver = None
    if solver is None or spec.dt0 is not None:
        raise ValueError(
            f"{name!r} steps a fixed-step method a fixed number of times per block; give a "
            f"spec with a fixed-step solver and `n_steps`, got {spec.solver!r}"
            + (f" with dt0={spec.dt0}." if spec.dt0 is not None else ".")
        )
    if not isinstance(spec.gradient, odecore.Autograd):
        raise ValueError(
            f"{name!r} is a discrete network differentiated by backprop through its steps; "
            f"the gradient method {spec.gradient!r} does not apply."
        )
    if spec.max_steps != odecore.OdeSpec().max_steps or spec.compile:
        raise ValueError(
            f"{name!r} steps its solver `n_steps` times per block, neither capped nor "
            f"compiled; leave `max_steps` and `compile` of the spec unset, got "
            f"max_steps={spec.max_steps}, compile={spec.compile}."
        )
    return solver, CONTNET_STEPS if spec.n_steps is None else spec.n_steps


def ode_layers(model: nn.Module) -> list[NeuralODE]:
    """The :class:`odelayers.NeuralODE` layers of ``model``, in the order of ``modules()``.

    Args:
        model: any module.

    Returns:
        The layers; empty for a model without one.

    Example:
        >>> from odebench.models import build_model, ode_layers
        >>> len(ode_layers(build_model("anode", in_channels=1, num_classes=10, image_size=28)))
        1
    """
    return [m for m in model.modules() if isinstance(m, NeuralODE)]


def nfe(model: nn.Module) -> tuple[int, int]:
    """Function evaluations of the model's ``NeuralODE`` layers in their last forward and
    backward pass.

    Args:
        model: any module.

    Returns:
        ``(forward NFE, backward NFE)``; ``(0, 0)`` without such layers or before a pass.

    Example:
        >>> import odecore, torch
        >>> from odebench.models import build_model, nfe
        >>> model = build_model("toy-node", in_channels=2, num_classes=1, image_size=0,
        ...                     spec=odecore.OdeSpec(gradient=odecore.Adjoint()))
        >>> model(torch.randn(4, 2)).sum().backward()
        >>> forward, backward = nfe(model)
        >>> forward > 0, backward > 0
        (True, True)
    """
    layers = ode_layers(model)
    return sum(m.nfe for m in layers), sum(m.nfe_backward for m in layers)


def count_parameters(model: nn.Module) -> int:
    """The number of parameters of ``model``, trainable or not, shared ones counted once.

    Args:
        model: any module.

    Returns:
        The count.

    Example:
        >>> from odebench.models import build_model, count_parameters
        >>> count_parameters(build_model("mlp", in_channels=1, num_classes=10, image_size=28))
        238510
    """
    return sum(p.numel() for p in model.parameters())

"""``TrainConfig``: everything a training run depends on, validated once."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

Optimizer = Literal["sgd", "adam"]


def _check_positive_int(name: str, value: object, *, zero: bool = False) -> None:
    low = 0 if zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        what = "a non-negative" if zero else "a positive"
        raise ValueError(f"`{name}` must be {what} integer, got {value!r}.")


#: The largest seed: the derived seeds of the data order and augmentation stay in 64 bits.
MAX_SEED = 2**32 - 1


def _check_positive_float(name: str, value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"`{name}` must be a positive number, got {value!r}.")


@dataclass(frozen=True)
class TrainConfig:
    """One training run: model, data, optimiser, schedule, solver and machine settings.

    The defaults are Chen et al.'s MNIST settings (SGD with momentum 0.9, learning
    rate 0.1, batch 128, ``tol = 1e-3``), with one epoch. Construction checks every
    field, so a bad value fails before any data is read.

    Args:
        model: a name from :data:`odebench.models.MODELS`.
        dataset: ``"mnist"``, ``"fashion-mnist"``, ``"cifar10"``, ``"cifar100"``,
            ``"svhn"`` (read from ``data_dir``), or a toy set generated in code: ``"annuli-1d"``,
            ``"annuli-2d"``, ``"spirals"``, ``"reflection"``.
        epochs: passes over the training set.
        batch_size: the global batch (split evenly over processes under ``torchrun``).
        eval_batch_size: batch of the evaluation passes.
        lr: learning rate at epoch 0.
        optimizer: ``"sgd"`` (with ``momentum``) or ``"adam"``.
        momentum: SGD momentum.
        weight_decay: L2 penalty of the optimiser.
        milestones: epochs at which the learning rate is multiplied by ``gamma``.
        gamma: the factor of each milestone.
        seed: the seed of the initialisation, the data order and the augmentation.
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        data_dir: where the image data sets are (see :func:`find_data`).
        train_size: train on this many examples only (a seeded subset); ``None``: all.
        test_size: evaluate on this many examples only; ``None``: all.
        augment: random crops (padding 4) and, for CIFAR, horizontal flips.
        activation: the activation of the model's vector field.
        tol: ``rtol = atol`` of the adaptive solver of ODE models.
        gradient: ``"backprop"``, ``"adjoint"`` or ``"checkpoint"`` for ODE models.
        solver: the adaptive solver of ODE models.
        scheme: the ContinuousNet models only: the fixed-step scheme of their blocks
            (``"euler"``, ``"midpoint"``, ``"rk4"``, ...); ``None``: Euler.
        n_steps: the ContinuousNet models only: ``N_t = M`` of every block at epoch 0;
            ``None``: 8.
        refine_epochs: the ContinuousNet models only: the (0-based) epochs at whose
            start ``N_t`` and ``M`` double (:class:`contnet.RefinementSchedule`, the
            optimiser's state carried over), as Queiruga et al. train. The blocks'
            time scale is the final ``N_t``, ``n_steps * 2 ** len(refine_epochs)``, so
            a refined run trains the same continuous model as a fixed-depth run at
            that ``N_t``. Epochs at or beyond ``epochs`` never come.
        bf16: autocast to bfloat16. Adaptive solvers then meet their tolerance
            against a vector field evaluated to about three digits, so keep ``tol``
            at 1e-3 or looser.
        compile: ``torch.compile`` the model in place: the vector fields of its
            Neural ODE layers (the solver loop stays eager: its step sizes are
            chosen at run time), or the whole model when it has no ODE layer. Not
            for the ContinuousNet models.
        progress: show a progress bar per epoch.

    Example:
        >>> TrainConfig(model="toy-node", dataset="annuli-1d", optimizer="adam", lr=1e-2).loss
        'mse'
        >>> TrainConfig(model="odenet", dataset="mnist", epochs=-1)
        Traceback (most recent call last):
        ...
        ValueError: `epochs` must be a non-negative integer, got -1.
        >>> TrainConfig(model="continuousnet", dataset="cifar10", scheme="rk4", n_steps=1,
        ...             refine_epochs=(20, 40)).final_steps
        4
    """

    model: str
    dataset: str
    epochs: int = 1
    batch_size: int = 128
    eval_batch_size: int = 1000
    lr: float = 0.1
    optimizer: Optimizer = "sgd"
    momentum: float = 0.9
    weight_decay: float = 0.0
    milestones: tuple[int, ...] = ()
    gamma: float = 0.1
    seed: int = 0
    device: str = "auto"
    data_dir: str | None = None
    train_size: int | None = None
    test_size: int | None = None
    augment: bool = False
    activation: str = "relu"
    tol: float = 1e-3
    gradient: str = "backprop"
    solver: str = "dopri5"
    scheme: str | None = None
    n_steps: int | None = None
    refine_epochs: tuple[int, ...] = ()
    bf16: bool = False
    compile: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        from ..models import MODELS

        if self.model not in MODELS:
            raise ValueError(f"Unknown `model` {self.model!r}; known: {', '.join(MODELS)}.")
        if self.dataset not in DATASETS:
            raise ValueError(f"Unknown `dataset` {self.dataset!r}; known: {', '.join(DATASETS)}.")
        _check_positive_int("epochs", self.epochs, zero=True)
        _check_positive_int("batch_size", self.batch_size)
        _check_positive_int("eval_batch_size", self.eval_batch_size)
        _check_positive_int("seed", self.seed, zero=True)
        if self.seed > MAX_SEED:
            raise ValueError(f"`seed` must be at most {MAX_SEED}, got {self.seed!r}.")
        for name in ("train_size", "test_size"):
            if getattr(self, name) is not None:
                _check_positive_int(name, getattr(self, name))
        _check_positive_float("lr", self.lr)
        _check_positive_float("tol", self.tol)
        _check_positive_float("gamma", self.gamma)
        if self.optimizer not in ("sgd", "adam"):
            raise ValueError(f"`optimizer` must be 'sgd' or 'adam', got {self.optimizer!r}.")
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"`momentum` must lie in [0, 1), got {self.momentum!r}.")
        if not 0.0 <= self.weight_decay < math.inf:
            raise ValueError(
                f"`weight_decay` must be a finite number >= 0, got {self.weight_decay!r}."
            )
        if list(self.milestones) != sorted(set(self.milestones)) or any(
            m < 1 for m in self.milestones
        ):
            raise ValueError(
                f"`milestones` must be increasing positive epochs, got {self.milestones!r}."
            )
        self._check_continuous()
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise ValueError(
                f"`device` must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {self.device!r}."
            )

    def _check_continuous(self) -> None:
        """``scheme``, ``n_steps`` and ``refine_epochs``: valid, and for a ContinuousNet."""
        import odecore

        from ..models._build import CONTINUOUS_NETS

        if isinstance(self.refine_epochs, list):
            object.__setattr__(self, "refine_epochs", tuple(self.refine_epochs))
        epochs = self.refine_epochs
        if (
            not isinstance(epochs, tuple)
            or any(isinstance(e, bool) or not isinstance(e, int) or e < 1 for e in epochs)
            or list(epochs) != sorted(set(epochs))
        ):
            raise ValueError(
                f"`refine_epochs` must be a tuple of increasing positive epochs, got "
                f"{epochs!r}; for example (20, 40)."
            )
        if self.n_steps is not None:
            _check_positive_int("n_steps", self.n_steps)
        if self.scheme is not None and self.scheme not in odecore.FIXED_METHODS:
            raise ValueError(
                f"Unknown `scheme` {self.scheme!r}; known: {', '.join(odecore.FIXED_METHODS)}."
            )
        given = [
            name
            for name, value in (
                ("refine_epochs", epochs or None),
                ("scheme", self.scheme),
                ("n_steps", self.n_steps),
            )
            if value is not None
        ]
        if given and self.model not in CONTINUOUS_NETS:
            raise ValueError(
                f"`{given[0]}` applies to the ContinuousNet models only "
                f"({', '.join(CONTINUOUS_NETS)}), not to `model` {self.model!r}; leave it unset."
            )
        if self.compile and self.model in CONTINUOUS_NETS:
            raise ValueError(
                f"`compile` does not apply to `model` {self.model!r}: a ContinuousNet swaps "
                "the weights of its residual module at every stage, which torch.compile "
                "cannot follow; compile its `to_resnet()` export instead."
            )

    @property
    def final_steps(self) -> int | None:
        """``N_t`` after every refinement (``None`` for a model that is not a ContinuousNet)."""
        from ..models._build import CONTINUOUS_NETS, CONTNET_STEPS

        if self.model not in CONTINUOUS_NETS:
            return None
        start = CONTNET_STEPS if self.n_steps is None else self.n_steps
        return start * (1 << len(self.refine_epochs))

    def refinements_before(self, epoch: int, batch: int = 0) -> int:
        """How many refinements a run has made when it stands at ``(epoch, batch)``.

        A refinement comes at the start of its epoch, so a checkpoint inside epoch
        ``e`` (``batch > 0``) has made the one of ``e``, a checkpoint at its start not.
        """
        return sum(1 for e in self.refine_epochs if e < epoch or (e == epoch and batch > 0))

    @property
    def loss(self) -> str:
        """``"cross_entropy"`` for classification sets, ``"mse"`` for regression sets."""
        return "mse" if DATASETS[self.dataset].regression else "cross_entropy"

    def lr_at(self, epoch: int) -> float:
        """The learning rate of ``epoch`` (0-based) under the milestone schedule."""
        return self.lr * self.gamma ** sum(1 for m in self.milestones if m <= epoch)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary of the fields."""
        out = dataclasses.asdict(self)
        out["milestones"] = list(self.milestones)
        out["refine_epochs"] = list(self.refine_epochs)
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """The inverse of :meth:`to_dict`; unknown keys are an error."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"Unknown TrainConfig fields: {unknown}.")
        values = dict(values)
        for key in ("milestones", "refine_epochs"):
            if key in values:
                values[key] = tuple(values[key])
        return cls(**values)


@dataclass(frozen=True)
class DatasetInfo:
    """What the trainer needs to know of a data set before reading it."""

    description: str
    regression: bool = False
    toy: bool = False
    folders: tuple[str, ...] = ()


DATASETS: Mapping[str, DatasetInfo] = MappingProxyType(
    {
        "mnist": DatasetInfo("MNIST digits, IDX files", folders=("mnist", "MNIST", "mnist-10k")),
        "fashion-mnist": DatasetInfo(
            "Fashion-MNIST, IDX files", folders=("fashion-mnist", "FashionMNIST", "fashion_mnist")
        ),
        "cifar10": DatasetInfo(
            "CIFAR-10, python batch files", folders=("cifar10", "cifar-10-batches-py", "cifar-10")
        ),
        "cifar100": DatasetInfo(
            "CIFAR-100, python batch files", folders=("cifar100", "cifar-100-python", "cifar-100")
        ),
        "svhn": DatasetInfo(
            "SVHN cropped digits, train_32x32.mat and test_32x32.mat", folders=("svhn", "SVHN")
        ),
        "annuli-1d": DatasetInfo("Dupont et al.'s g(x) on [-1.5, 1.5]", regression=True, toy=True),
        "annuli-2d": DatasetInfo(
            "Dupont et al.'s g(x) on concentric annuli", regression=True, toy=True
        ),
        "reflection": DatasetInfo("x -> -x, Massaroli et al.", regression=True, toy=True),
        "spirals": DatasetInfo("two nested 2-D spirals, two classes", toy=True),
    }
)


def default_out(config: TrainConfig) -> Path:
    """The output directory when none is given: ``runs/<model>-<dataset>``."""
    return Path("runs") / f"{config.model}-{config.dataset}"

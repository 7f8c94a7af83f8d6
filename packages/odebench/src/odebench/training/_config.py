"""``TrainConfig``: everything a training run depends on, validated once."""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any, Literal, get_args

import odecore
from contnet import fixed_solver

from .._io import JsonObject, flag, whole
from ..models import (
    CONTINUOUS_NETS,
    CONTNET_METHOD,
    CONTNET_STEPS,
    MODELS,
    ODE_MODELS,
    TRAIN_METHOD,
    TRAIN_TOL,
)

Optimizer = Literal["sgd", "adam"]


#: The largest seed: the derived seeds of the data order and augmentation stay in 64 bits.
MAX_SEED = 2**32 - 1

#: What a field must be, as a check's message says it after the field's name.
COUNT = "must be a positive integer, got {!r}."
NON_NEGATIVE = "must be a non-negative integer, got {!r}."
_PROGRESS = "must be True, False or None (only on a terminal), got {!r}."
_OPTIONS = "must be a dict of odecore's options, got {!r}."
_REFINE = "must be a tuple of increasing positive epochs, got {!r}; for example (20, 40)."

#: Fields, whether a value of theirs is right, and what it must be.
Check = tuple[tuple[str, ...], Callable[[Any], bool], str]


def _positive(value: object) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0  # type: ignore[arg-type,operator]


def _epochs(value: object) -> bool:
    """Whether ``value`` is a tuple of increasing positive epochs."""
    return (
        isinstance(value, tuple) and all(map(whole(1), value)) and list(value) == sorted(set(value))
    )


def check_fields(owner: object, checks: Iterable[Check]) -> None:
    """Raise a ``ValueError`` at the first field of ``owner`` that fails its check."""
    for names, test, must in checks:
        for name in names:
            value = getattr(owner, name)
            if not test(value):
                raise ValueError(f"`{name}` {must.format(value)}")


def check_device(name: object) -> None:
    """Refuse a ``device`` that is not ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.

    Raises:
        ValueError: in one line, naming what was given.
    """
    if not isinstance(name, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", name):
        raise ValueError(f"`device` must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {name!r}.")


@dataclass(frozen=True)
class DatasetInfo:
    """What the trainer needs to know of a data set before reading it.

    Args:
        description: one line for ``odebench list``.
        regression: targets are numbers (MSE), not classes.
        toy: generated from the seed, not read from files.
        folders: sub-folders of a search path that may hold its files.
        label: its name in reports (``"CIFAR-10"``); empty: the key.
    """

    description: str
    regression: bool = False
    toy: bool = False
    folders: tuple[str, ...] = ()
    label: str = ""


DATASETS: Mapping[str, DatasetInfo] = MappingProxyType(
    {
        "mnist": DatasetInfo(
            "MNIST digits, IDX files", folders=("mnist", "MNIST", "mnist-10k"), label="MNIST"
        ),
        "fashion-mnist": DatasetInfo(
            "Fashion-MNIST, IDX files",
            folders=("fashion-mnist", "FashionMNIST", "fashion_mnist"),
            label="Fashion-MNIST",
        ),
        "cifar10": DatasetInfo(
            "CIFAR-10, python batch files",
            folders=("cifar10", "cifar-10-batches-py", "cifar-10"),
            label="CIFAR-10",
        ),
        "cifar100": DatasetInfo(
            "CIFAR-100, python batch files",
            folders=("cifar100", "cifar-100-python", "cifar-100"),
            label="CIFAR-100",
        ),
        "svhn": DatasetInfo(
            "SVHN cropped digits, train_32x32.mat and test_32x32.mat",
            folders=("svhn", "SVHN"),
            label="SVHN",
        ),
        "annuli-1d": DatasetInfo("Dupont et al.'s g(x) on [-1.5, 1.5]", regression=True, toy=True),
        "annuli-2d": DatasetInfo(
            "Dupont et al.'s g(x) on concentric annuli", regression=True, toy=True
        ),
        "reflection": DatasetInfo("x -> -x, Massaroli et al.", regression=True, toy=True),
        "spirals": DatasetInfo("two nested 2-D spirals of half a turn, two classes", toy=True),
    }
)


#: The metadata of a field whose option ``odebench run`` has too (``--epochs``,
#: ``--seed``, ...): the command line declares those once, for both commands.
_SHARED: Mapping[str, Any] = MappingProxyType({"flag": "shared"})


#: The checks of :class:`TrainConfig`'s fields that need no other field, in order.
_CHECKS: tuple[Check, ...] = (
    (("epochs", "seed"), whole(0), NON_NEGATIVE),
    (("seed",), lambda seed: seed <= MAX_SEED, f"must be at most {MAX_SEED}, got {{!r}}."),
    (("batch_size", "eval_batch_size"), whole(1), COUNT),
    (("train_size", "test_size", "n_steps"), lambda n: n is None or whole(1)(n), COUNT),
    (("lr", "rtol", "atol", "gamma"), _positive, "must be a positive number, got {!r}."),
    (("optimizer",), lambda v: v in get_args(Optimizer), "must be 'sgd' or 'adam', got {!r}."),
    (("momentum",), lambda m: 0.0 <= m < 1.0, "must lie in [0, 1), got {!r}."),
    (("weight_decay",), lambda w: 0.0 <= w < math.inf, "must be a finite number >= 0, got {!r}."),
    (("milestones",), _epochs, "must be increasing positive epochs, got {!r}."),
    (("progress",), lambda p: p is None or isinstance(p, bool), _PROGRESS),
    (("refine_epochs",), _epochs, _REFINE),
    (("solver_options",), lambda v: isinstance(v, dict), _OPTIONS),
)


def _default(name: str) -> object:
    """The default of :class:`TrainConfig`'s field ``name``."""
    f = TrainConfig.__dataclass_fields__[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _unset(config: TrainConfig, names: Iterable[str], why: str, fix: str = "") -> None:
    """Refuse a field of ``names`` set away from its default: ``why`` says why it would
    change nothing, ``fix`` what to do besides leaving it unset."""
    for name in names:
        if getattr(config, name) != _default(name):
            raise ValueError(f"`{name}` {why}; leave it unset{fix}.")


@dataclass(frozen=True)
class TrainConfig:
    """One training run: model, data, optimiser, schedule, solver and machine settings.

    The defaults are Chen et al.'s MNIST settings (SGD with momentum 0.9, learning
    rate 0.1, batch 128, dopri5 at ``rtol = atol = 1e-3``), with one epoch.
    Construction checks every field and resolves the solver fields once into
    :attr:`spec`, so a bad value fails before any data is read.

    Each field is an option of ``odebench train`` too (``batch_size``: ``--batch-size``),
    and its metadata holds the option's help.

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
        augment: random crops (padding 4) and, for CIFAR, horizontal flips; image
            sets only.
        activation: the activation of the model's vector field.
        method: the ODE method by name, any that ``odecore.OdeSpec.from_method`` knows;
            ``None``: ``"dopri5"`` for the ODE models, ``"euler"`` for the ContinuousNet
            models (see "Options of the solver").
        rtol: relative tolerance of adaptive methods (Chen et al.'s MNIST setting).
        atol: absolute tolerance of adaptive methods.
        gradient: a name of ``odecore.GRADIENTS``, for the ODE models.
        n_steps: steps of a fixed-step method over ``[0, 1]`` (required by one); for the
            ContinuousNet models ``N_t = M`` of every block at epoch 0 (``None``: 8).
        solver_options: further options of ``method`` by odecore's names, as
            ``odecore.OdeSpec.from_method`` takes its ``options``; none for the
            ContinuousNet models.
        refine_epochs: the ContinuousNet models only: the (0-based) epochs at whose
            start ``N_t`` and ``M`` double (see "Refinement of ContinuousNets").
        bf16: autocast to bfloat16 (keep the tolerances at 1e-3 or looser).
        compile: ``torch.compile`` the model in place (see "Devices and several
            processes"); not for the ContinuousNet models.
        progress: a progress bar per epoch on stderr: ``True`` always, ``False`` never,
            ``None`` only when stderr is a terminal (in a notebook, pass ``True``).

    Example:
        >>> TrainConfig(model="toy-node", dataset="annuli-1d", optimizer="adam", lr=1e-2).loss
        'mse'
        >>> TrainConfig(model="odenet", dataset="mnist", epochs=-1)
        Traceback (most recent call last):
        ...
        ValueError: `epochs` must be a non-negative integer, got -1.
        >>> TrainConfig(model="continuousnet", dataset="cifar10", method="rk4", n_steps=1,
        ...             refine_epochs=(20, 40)).final_steps
        4
        >>> spec = TrainConfig(model="odenet", dataset="mnist", rtol=1e-4, gradient="adjoint").spec
        >>> spec.solver, spec.controller.rtol, spec.controller.atol, type(spec.gradient).__name__
        (Dopri5(interpolation='auto'), 0.0001, 0.001, 'Adjoint')
    """

    model: str = field(metadata=flag(f"one of: {', '.join(MODELS)}", metavar="M"))
    dataset: str = field(metadata=flag(f"one of: {', '.join(DATASETS)}", metavar="D"))
    epochs: int = field(default=1, metadata=_SHARED)
    batch_size: int = field(default=128, metadata=flag(
        "the global batch, split over the processes", metavar="N",
        type="positive_int"))  # fmt: skip
    eval_batch_size: int = field(default=1000, metadata=flag(
        "the batch of the evaluation passes", metavar="N", type="positive_int"))  # fmt: skip
    lr: float = field(default=0.1, metadata=flag("learning rate", type="positive_float"))
    optimizer: Optimizer = field(default="sgd", metadata=flag(
        "sgd (with --momentum) or adam", choices=get_args(Optimizer)))  # fmt: skip
    momentum: float = field(default=0.9, metadata=flag("SGD momentum, in [0, 1)", type="fraction"))
    weight_decay: float = field(default=0.0, metadata=flag(
        "L2 penalty", type="non_negative_float"))  # fmt: skip
    milestones: tuple[int, ...] = field(default=(), metadata=flag(
        "epochs at which the learning rate is multiplied by --gamma (default: none)",
        metavar="E,E,...", type="int_list"))  # fmt: skip
    gamma: float = field(default=0.1, metadata=flag(
        "learning-rate factor of a milestone", type="positive_float"))  # fmt: skip
    seed: int = field(default=0, metadata=_SHARED)
    device: str = field(default="auto", metadata=_SHARED)
    data_dir: str | None = field(default=None, metadata=_SHARED)
    train_size: int | None = field(default=None, metadata=flag(
        "train on a seeded subset of N examples (default: all)", metavar="N",
        type="positive_int"))  # fmt: skip
    test_size: int | None = field(default=None, metadata=flag(
        "evaluate on a seeded subset of N examples (default: all)", metavar="N",
        type="positive_int"))  # fmt: skip
    augment: bool = field(default=False, metadata=flag(
        "random crops (pad 4); flips on CIFAR", action="store_true"))  # fmt: skip
    activation: str = field(default="relu", metadata=flag(
        "of the vector field: relu, softplus, ..."))  # fmt: skip
    method: str | None = field(default=None, metadata=flag(
        "ODE method: an adaptive one (dopri5, tsit5, bosh3, ...) or a fixed-step one with "
        f"--n-steps (euler, rk4, ...) (default: {TRAIN_METHOD} for ODE models, "
        f"{CONTNET_METHOD} for ContinuousNet models)", metavar="NAME"))  # fmt: skip
    rtol: float = field(default=TRAIN_TOL, metadata=flag(
        "relative tolerance (default: %(default)g, Chen et al.'s MNIST setting; odecore's own "
        f"default, {odecore.PIDController().rtol:g}, is for reference accuracy and costs "
        "several times more)", type="positive_float"))  # fmt: skip
    atol: float = field(default=TRAIN_TOL, metadata=flag(
        "absolute tolerance (default: %(default)g; odecore's own default is "
        f"{odecore.PIDController().atol:g})", type="positive_float"))  # fmt: skip
    gradient: str = field(default="backprop", metadata=flag(
        "gradient method of ODE models", choices=tuple(odecore.GRADIENTS)))  # fmt: skip
    n_steps: int | None = field(default=None, metadata=flag(
        "steps of a fixed-step --method; ContinuousNet models: N_t = M of every block at "
        "epoch 0 (default: none, required by a fixed-step method; ContinuousNet models: "
        f"{CONTNET_STEPS})", metavar="N", type="positive_int"))  # fmt: skip
    solver_options: dict[str, bool | int | float | str] = field(
        default_factory=dict, hash=False, metadata=flag(
        "an option of --method by odecore's name, as odecore.odeint takes it (implicit "
        "methods: max_iters, Newton's iterations per step; adaptive: max_num_steps, "
        "first_step, ...); repeat for more (default: odecore's)", option="--solver-option",
        metavar="NAME=VALUE", type="option", action="append"))  # fmt: skip
    refine_epochs: tuple[int, ...] = field(default=(), metadata=flag(
        "ContinuousNet models: epochs at whose start N_t and M double (default: none)",
        metavar="E,E,...", type="int_list"))  # fmt: skip
    bf16: bool = field(default=False, metadata=flag("bfloat16 autocast", action="store_true"))
    compile: bool = field(default=False, metadata=flag(
        "torch.compile the ODE layers' solves where they compile, else their vector "
        "fields (or a model without ODE layers)", action="store_true"))  # fmt: skip
    progress: bool | None = field(default=None, metadata=_SHARED)

    def __post_init__(self) -> None:
        names = {"model": MODELS, "dataset": DATASETS, "gradient": odecore.GRADIENTS}
        for name, known in names.items():
            if (value := getattr(self, name)) not in known:
                raise ValueError(f"Unknown `{name}` {value!r}; known: {', '.join(known)}.")
        for name in ("milestones", "refine_epochs"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        check_fields(self, _CHECKS)
        if self.optimizer == "adam":
            _unset(self, ("momentum",), "changes nothing: `optimizer` is 'adam'")
        if not self.milestones:
            _unset(self, ("gamma",), "changes nothing: no `milestones`")
        if DATASETS[self.dataset].toy:
            _unset(self, ("augment",), f"crops images, not the toy set {self.dataset!r}")
        if self.model not in CONTINUOUS_NETS:
            _unset(self, ("refine_epochs",), "applies to the ContinuousNet models only "
                   f"({', '.join(CONTINUOUS_NETS)}), not to `model` {self.model!r}")  # fmt: skip
        object.__setattr__(self, "_spec", self._resolve())
        if self.compile and self.model in CONTINUOUS_NETS:
            raise ValueError(
                f"`compile` does not apply to `model` {self.model!r}: a ContinuousNet swaps "
                "the weights of its residual module at every stage, which torch.compile "
                "cannot follow; compile its `to_resnet()` export instead."
            )
        check_device(self.device)
        toy = MODELS[self.model].kind == "toy"
        if toy != DATASETS[self.dataset].toy:
            sets = ", ".join(name for name, info in DATASETS.items() if info.toy == toy)
            raise ValueError(
                f"`model` {self.model!r} takes {'points' if toy else 'images'}, "
                f"not those of `dataset` {self.dataset!r}; its data sets: {sets}."
            )

    def _resolve(self) -> odecore.OdeSpec | None:
        """The spec of the solver fields (``None`` for a model that solves no ODE)."""
        contnet = self.model in CONTINUOUS_NETS
        if contnet:
            _unset(self, ("gradient",), f"{self.gradient!r} does not apply to `model` "
                   f"{self.model!r}, a discrete network differentiated by backprop through "
                   "its steps")  # fmt: skip
            _unset(self, ("solver_options",), f"does not apply to `model` {self.model!r}, "
                   "which steps its method `n_steps` times per block")  # fmt: skip
        if "n_steps" in self.solver_options:
            raise ValueError("`solver_options` cannot set n_steps; use `n_steps` (--n-steps).")
        if self.model not in (*ODE_MODELS, *CONTINUOUS_NETS):
            names = ("method", "n_steps", "solver_options", "rtol", "atol", "gradient")
            _unset(self, names, f"does not apply to `model` {self.model!r}, which solves no "
                   "ODE (the RK-Net: always 6 RK4 steps, backpropagated)")  # fmt: skip
            return None
        method = self.method or (CONTNET_METHOD if contnet else TRAIN_METHOD)
        # The name is parsed once, by odecore; whether a ContinuousNet steps it, by contnet.
        spec = odecore.OdeSpec.from_method(
            method,
            rtol=self.rtol,
            atol=self.atol,
            gradient=self.gradient,
            options=self.solver_options,
        )
        if contnet:
            try:
                fixed_solver(spec.solver)
            except ValueError:
                raise ValueError(
                    f"`method` {method!r} does not apply to `model` {self.model!r}: a "
                    f"ContinuousNet steps a fixed-step method ({', '.join(odecore.FIXED_METHODS)})."
                ) from None
        if not spec.solver.adaptive:
            _unset(self, ("rtol", "atol"), f"applies to adaptive methods, not to the fixed-step "
                   f"{method!r}", " or choose an adaptive `method`")  # fmt: skip
        if not contnet and not spec.solver.adaptive and self.n_steps is None:
            raise ValueError(
                f"The fixed-step `method` {method!r} needs `n_steps`, the number of steps "
                "over the ODE's depth [0, 1]."
            )
        if spec.solver.adaptive:
            _unset(self, ("n_steps",), "applies to fixed-step methods, not to the adaptive "
                   f"{method!r}", " or choose a fixed-step `method`")  # fmt: skip
        steps = self.n_steps if self.n_steps is not None else (CONTNET_STEPS if contnet else None)
        if steps is not None and steps > spec.max_steps:
            raise ValueError(
                f"`solver_options` max_num_steps={spec.max_steps} is below `n_steps` {steps}: "
                f"every solve of the fixed-step {method!r} would stop short; leave it unset."
            )
        return spec if steps is None else dataclasses.replace(spec, n_steps=steps)

    @property
    def spec(self) -> odecore.OdeSpec | None:
        """How the model solves, resolved once from ``method``, ``rtol``, ``atol``,
        ``gradient`` and ``n_steps``; ``None`` for a model that solves no ODE."""
        spec: odecore.OdeSpec | None = self.__dict__["_spec"]
        return spec

    @property
    def final_steps(self) -> int | None:
        """``N_t`` after every refinement (``None`` for a model that is not a ContinuousNet)."""
        if self.model not in CONTINUOUS_NETS or self.spec is None or self.spec.n_steps is None:
            return None
        return self.spec.n_steps * (1 << len(self.refine_epochs))

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

    def to_dict(self) -> JsonObject:
        """A JSON-ready dictionary of the fields (a tuple as a list)."""
        return {
            k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """The inverse of :meth:`to_dict`; unknown keys are an error."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"Unknown TrainConfig fields: {unknown}.")
        return cls(**values)


def show_progress(progress: bool | None, stream: IO[str] | None = None) -> bool:
    """Whether to draw progress bars: ``progress`` itself, or for ``None`` whether
    ``stream`` (default ``sys.stderr``) is a terminal; the one place that decides."""
    if progress is not None:
        return progress
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):  # no stream, or a closed one
        return False


def default_out(config: TrainConfig) -> Path:
    """The output directory when none is given: ``runs/<model>-<dataset>``."""
    return Path("runs") / f"{config.model}-{config.dataset}"

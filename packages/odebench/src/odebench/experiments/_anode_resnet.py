"""``odebench run anode-resnet``: Dupont et al. (2019)'s Fig. 5, a ResNet against a NODE
of the same size on g(x) and on a separable function (docs/odebench/experiments/anode-resnet.md).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .._io import JsonObject
from .._metrics import Metric, Values
from .._tables import Col, Row, Table
from ..data import Dataset, annuli
from ..models import TOY_HIDDEN, build_model, count_parameters
from . import _anode_common as common
from ._claims import Claim
from ._runner import register_template
from ._template import Measurement, Plot, Run, Setup, Template, Trained, TrainingSettings

TASKS = (("1d", "g(x), d = 1"), ("2d", "g(x), d = 2"), ("separable", "separable function, d = 2"))
MODELS = ("node", "resnet")
SHIFT = 1.4  # the distance between the two sine curves (authors' config)
NOISE = 0.1  # the standard deviation of the noise on their height (authors' config)

# The claims' thresholds, read off the paper's words.
EASILY = 0.1  # d = 1, "easily fits" / "cannot approximate": ResNet MSE below 1/10 of the NODE's
STRUGGLES = 0.5  # d = 2, NODE "struggles compared to ResNets": ResNet MSE below half the NODE's
LESS_PRONOUNCED = 0.5  # separable: NODE-minus-ResNet MSE gap below half that on 2-D g(x)
MATCHED = 0.1  # parameter counts: the ResNet's within 10 % of the NODE's
FLOOR_SLACK = 0.99  # the 1-D NODE's MSE at least 0.99 x the monotone floor (solver error)

TRAIN_MSE = Metric("train_mse", spec=".4f")
TEST_MSE = Metric("test_mse", spec=".4f")
MEAN_LOSS = Metric("mean_train_loss", spec=".3f")
PARAMETERS = Metric("parameters", spec=".0f")


@dataclass(frozen=True, kw_only=True)
class ResnetSettings(TrainingSettings):
    """The training of every run of one mode, its sizes per task; ``record_every``: the
    iterations per point of the loss curve."""

    train_size: int
    test_size: int
    record_every: int

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size > self.train_size:
            raise ValueError(
                f"`batch_size` ({self.batch_size}) must not exceed `train_size` "
                f"({self.train_size}): every epoch needs one full batch."
            )


STANDARD = ResnetSettings(
    seeds=5, epochs=30, lr=1e-3, batch_size=64, train_size=3000, test_size=1000, record_every=20
)
MODES = {
    "quick": ResnetSettings(seeds=2, epochs=4, lr=3e-3, batch_size=64, train_size=600,
                            test_size=200, record_every=3),
    "standard": STANDARD,
    "full": dataclasses.replace(STANDARD, seeds=20),
}  # fmt: skip


def shifted_sines(n: int, *, generator: torch.Generator | None = None) -> Dataset:
    """``n`` points ``(x1, sin(pi x1) + NOISE * N(0, 1) ± SHIFT / 2)``, ``x1`` uniform in
    ``[-1, 1]``, shuffled: the upper curve's (+1), then the lower's (-1)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"`n` must be an integer of at least 2, got {n!r}.")
    f64 = torch.float64
    upper = n - n // 2
    label = torch.cat([torch.ones(upper, dtype=f64), -torch.ones(n - upper, dtype=f64)])
    x1 = 2.0 * torch.rand(n, generator=generator, dtype=f64) - 1.0
    x2 = torch.sin(math.pi * x1) + NOISE * torch.randn(n, generator=generator, dtype=f64)
    x2 = x2 + label * SHIFT / 2.0
    perm = torch.randperm(n, generator=generator)
    inputs = torch.stack([x1, x2], dim=1)[perm].to(torch.float32)
    return Dataset(inputs, label[perm, None].to(torch.float32), "shifted-sines", num_classes=None)


DRAW: dict[str, Callable[..., Dataset]] = {
    "1d": functools.partial(annuli, dim=1), "2d": functools.partial(annuli, dim=2),
    "separable": shifted_sines,
}  # fmt: skip
"""How each task of :data:`TASKS` draws its points."""


@functools.lru_cache(maxsize=16)
def task_data(task: str, n: int, seed: int, test: bool = False) -> Dataset:
    """The ``n`` points of ``task`` for ``seed``, the same for both models; with ``test``
    from another stream.

    Example:
        >>> task_data("2d", 30, 0).name, len(task_data("separable", 30, 0, test=True))
        ('annuli-2d', 30)
    """
    return DRAW[task](n, generator=torch.Generator().manual_seed(2 * seed + test))


class ToyResNet(nn.Module):
    """``blocks`` residual blocks ``h -> h + W2 ReLU(W1 h + b1) + b2`` in R^features, then a
    linear readout: Euler steps of size 1, their state in R^d as a NODE's."""

    def __init__(self, features: int, out_features: int, blocks: int, hidden: int = TOY_HIDDEN):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, features))
            for _ in range(blocks)
        )
        self.head = nn.Linear(features, out_features)

    def states(self, x: Tensor) -> list[Tensor]:
        """The state before the first block and after each: ``blocks + 1`` tensors."""
        hs = [x]
        for block in self.blocks:
            hs.append(hs[-1] + block(hs[-1]))
        return hs

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.head(self.states(x)[-1])
        return out


def block_parameters(dim: int, hidden: int = TOY_HIDDEN) -> int:
    """The parameters of one residual block of :class:`ToyResNet` in R^dim."""
    return 2 * dim * hidden + hidden + dim


def resnet_blocks(dim: int) -> int:
    """The number of blocks whose ResNet has the parameter count nearest the toy NODE's
    (both end in the same readout).

    Example:
        >>> resnet_blocks(1), resnet_blocks(2)
        (12, 8)
    """
    node = build_model("toy-node", in_channels=dim, num_classes=1, image_size=0)
    field = count_parameters(node) - (dim + 1)  # less the readout Linear(d, 1)
    return max(1, round(field / block_parameters(dim)))


def build(model: str, dim: int) -> nn.Module:
    """A fresh ``"resnet"`` (the matched :class:`ToyResNet`) or ``"node"`` in R^dim."""
    if model == "resnet":
        return ToyResNet(dim, 1, blocks=resnet_blocks(dim))
    return build_model("toy-node", in_channels=dim, num_classes=1, image_size=0)


def runs(setup: Setup[ResnetSettings], seed: int) -> list[Run]:
    """Both models on each task, in the order of :data:`TASKS`, every batch's loss kept."""
    s = setup.settings
    return [
        Run(f"{task}/{model}", task=common.mse_task(
            s, functools.partial(build, model, data.inputs.shape[1]),
            (data.inputs, data.targets), seed, f"{task}/{model}",
            row=lambda epoch: {"losses": list(epoch.losses), "epoch_seconds": epoch.seconds},
        ))
        for task, _ in TASKS
        for data in [task_data(task, s.train_size, seed)]
        for model in MODELS
    ]  # fmt: skip


def _curve(rows: Sequence[Mapping[str, Any]], every: int) -> list[tuple[float, float]]:
    """``(iteration, mean batch loss)`` per ``every`` iterations (and the rest)."""
    losses = [loss for row in rows for loss in row["losses"]]
    return [(float(min(k + every, len(losses))), _mean(losses[k : k + every]))
            for k in range(0, len(losses), every)]  # fmt: skip


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def measure(setup: Setup[ResnetSettings], trained: Trained) -> Measurement:
    """The metrics; the loss curve, the ResNet's blocks, in 1-D :func:`common.flow_1d`."""
    s = setup.settings
    task, model_name = trained.run.name.split("/")
    model = trained.load()
    train_set = task_data(task, s.train_size, trained.seed)
    test_set = task_data(task, s.test_size, trained.seed, test=True)
    curve = _curve(trained.history, s.record_every)
    metrics: dict[str, float | None] = {
        TRAIN_MSE.key(): common.mse(model, train_set.inputs, train_set.targets),
        TEST_MSE.key(): common.mse(model, test_set.inputs, test_set.targets),
        MEAN_LOSS.key(): _mean([loss for _, loss in curve]),
        PARAMETERS.key(): float(count_parameters(model)),
    }
    resnet = model if isinstance(model, ToyResNet) else None
    details: JsonObject = {"curve": [{"iteration": i, "train_loss": loss} for i, loss in curve]}
    if resnet:
        details["blocks"] = len(resnet.blocks)
    if task == "1d":
        if model_name == "node":
            metrics[common.FLOOR.key()] = common.monotone_floor(train_set.inputs, train_set.targets)
        details.update(common.flow_1d(model.cpu(), resnet.states if resnet else None))
    return Measurement(metrics, details)


def _gap(v: Values, task: str) -> float:
    """The NODE's final train MSE minus the ResNet's on ``task``."""
    return v[TRAIN_MSE.of(f"{task}/node")] - v[TRAIN_MSE.of(f"{task}/resnet")]


def _worst_parameter_ratio(v: Values) -> float:
    """The ResNet's parameters over the NODE's, on the task where it is farthest from 1."""
    ratios = [
        v[PARAMETERS.of(f"{task}/resnet")] / v[PARAMETERS.of(f"{task}/node")] for task, _ in TASKS
    ]
    return max(ratios, key=lambda r: abs(r - 1.0) if math.isfinite(r) else math.inf)


CLAIMS = [
    Claim.ratio(
        "resnet_fits_1d", "g(x) in 1-D: the ResNet's final train MSE is far below the NODE's",
        "ResNet fits, NODE cannot (Fig. 5a, curves only)", TRAIN_MSE.of("1d/resnet"),
        TRAIN_MSE.of("1d/node"), below=EASILY, kind="paper", spec=".3g",
    ),
    Claim.ratio(
        "resnet_below_node_2d", "g(x) in 2-D: the ResNet's final train MSE is below the NODE's",
        "NODE struggles (Fig. 5b, curves only)", TRAIN_MSE.of("2d/resnet"),
        TRAIN_MSE.of("2d/node"), below=STRUGGLES, kind="paper", spec=".3g",
    ),
    Claim(
        "separable_gap_smaller",
        "Separable function: the NODE-ResNet loss gap is smaller than on 2-D g(x)",
        "\"less pronounced\" (Fig. 5c, curves only)",
        ours=lambda v: _gap(v, "separable") / _gap(v, "2d"),
        holds=lambda v: _gap(v, "separable") < LESS_PRONOUNCED * _gap(v, "2d"),
        spec=".3f", unit="×", kind="paper",
    ),
    Claim.between(
        "matched_parameters", "The ResNet and the NODE have matched parameter counts (within 10 %)",
        "not stated (authors' ResNet: 5 blocks of width 32)", _worst_parameter_ratio,
        1.0 - MATCHED, 1.0 + MATCHED, spec=".3f", unit="×", kind="check",
    ),
    common.floor_claim(
        "The 1-D NODE's train MSE is not below the floor of monotone maps",
        "cannot represent g(x) (Sec. 3)", TRAIN_MSE, FLOOR_SLACK, ".3f",
    ),
]  # fmt: skip


def _pair(what: str, metric: Metric, spread: bool = True) -> list[Col]:
    """A column of ``metric`` per model: the run ``<row's task>/<model>``."""
    return [Col(f"{common.LABELS[m]} {what}", metric, run=f"{{run}}/{m}", spread=spread)
            for m in MODELS]  # fmt: skip


LOSSES = Table("task", [Row(title, task) for task, title in TASKS], [
    *_pair("train MSE", TRAIN_MSE), *_pair("test MSE", TEST_MSE),
    *_pair("mean loss over training", MEAN_LOSS), *_pair("parameters", PARAMETERS, spread=False),
])  # fmt: skip


TEMPLATE = register_template(Template(
    name="anode-resnet",
    description="Dupont et al.'s Fig. 5: a ResNet against a NODE of the same size on "
    "g(x) in 1-D and 2-D and on a separable function, training loss per iteration",
    title="ResNet against NODE on g(x) and a separable function (Dupont et al., Fig. 5)",
    modes=MODES, one_thread_modes=("quick", "standard"),
    runs=runs, measure=measure, claims=lambda setup: CLAIMS,
    tables=lambda setup: {"losses": LOSSES},
    words=lambda result: {"less_pronounced": LESS_PRONOUNCED, "matched": MATCHED},
    figures=[
        Plot("loss.png", lambda result: common.curve_panels(
            result, TASKS, "train_loss", "training loss (MSE)", yscale="log", models=MODELS,
            x="iteration")),
        Plot("crossing_1d.png", lambda result: common.flow_panels(
            {m: result.details(f"1d/{m}") for m in MODELS})),
    ],
    data=lambda setup: f"annuli-1d, annuli-2d, shifted sines ({setup.settings.train_size} "
    f"train / {setup.settings.test_size} test each)",
))  # fmt: skip

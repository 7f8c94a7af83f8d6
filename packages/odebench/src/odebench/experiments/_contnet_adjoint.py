"""``odebench run contnet-adjoint``: a ContinuousNet trained by backprop and by the
adjoint, Queiruga et al. (2020), Sec. 5.2; see docs/odebench/experiments/contnet-adjoint.md."""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import CosineAnnealingLR

from .._figures import Lines
from .._io import JsonObject
from .._metrics import Metric, Ref, Values
from .._tables import Col, Row, Table, by_run
from ..data import Dataset
from ..training import Epoch, Task, TrainConfig, evaluate, load_splits
from . import _contnet_common as common
from ._claims import Claim
from ._contnet_adjoint_net import ALL, BACKPROP, BLOCK, AdjointNet, Method, gradient_errors
from ._images import data_name
from ._result import Result
from ._runner import register_template
from ._template import Measurement, Plot, Run, Setup, Template, Trained, TrainingSettings

FACTORS = (1, 2, 3, 4)
"""``N_t / M`` of the plain adjoint, trained and compared."""
TRAINED = (BACKPROP, *(Method("adjoint", k) for k in FACTORS), Method("adjoint", 1, knots=True))
"""The gradient methods a model is trained with, one run each."""
COMPARED = (
    *(Method("adjoint", k, knots) for knots in (False, True) for k in FACTORS),
    Method("checkpoint", 1, knots=True),
)
"""The gradient methods compared with backprop at the same ``N_t``."""

# The claims' thresholds (the docs page says how each was chosen).
ACC_GAP, EXACT, FALL, KNOT_RATIO, KNOT_FLOOR = 0.01, 1e-5, 0.5, 0.85, 1e-2
PUBLISHED: dict[str, str] = {
    "adjoint": "adjoint gradients sensitive to N_t; converging to high accuracy needed "
    "N_t >= 3M (Sec. 5.2); no numbers",
    "data": "CIFAR-10 in the paper; here the digits found (quick mode), Fashion-MNIST "
    "(standard mode), CIFAR-10 (full mode)",
}

# What each net measures (the docs page lists them); backprop's also the gradient errors.
TEST_ACCURACY = Metric("test_accuracy", spec=".1f", scale=100, unit="%")
TRAIN_LOSS = Metric("train_loss", spec=".3f")
TRAIN_ACCURACY = Metric("train_accuracy")
N_STEPS = Metric("n_steps")
SECONDS = Metric("train_seconds", spec=".0f")
GRAD_ERROR = Metric(
    "grad_error", over=("method", "part"), spec=".2e", key_format="{name}@{method}{part}"
)
GRAD_ERROR_TRAINED = dataclasses.replace(GRAD_ERROR, name="grad_error_trained")


@dataclass(frozen=True, kw_only=True)
class AdjointSettings(TrainingSettings):
    """The data (``None``: the digits found), the net (``pieces``: ``M``) and its
    training (SGD, cosine-annealed to ``lr / 100``), the same for every method, and the
    training images the gradients are compared on (``grad_batch``)."""

    dataset: str | None
    channels: int
    pieces: int
    pool: int
    momentum: float = 0.9
    weight_decay: float = 5e-4
    grad_batch: int = 256
    eval_batch_size: int = 500


MODES = {
    "quick": AdjointSettings(
        dataset=None, train_size=256, test_size=128, channels=4, pieces=2, pool=2, epochs=1,
        batch_size=32, lr=0.05, grad_batch=32, eval_batch_size=128,
    ),
    "standard": AdjointSettings(
        seeds=5, dataset="fashion-mnist", train_size=4000, test_size=2000, channels=16,
        pieces=4, pool=4, epochs=4, batch_size=64, lr=0.05,
    ),
    "full": AdjointSettings(
        seeds=5, dataset="cifar10", train_size=None, test_size=None, channels=64, pieces=8,
        pool=4, epochs=30, batch_size=128, lr=0.1, grad_batch=512, eval_batch_size=1000,
    ),
}  # fmt: skip


@functools.lru_cache(maxsize=4)
def data_of(s: AdjointSettings, seed: int, data_dir: str | None) -> tuple[Dataset, Dataset]:
    """The seed's training and test subsets, read once for the six runs of a seed (the
    loader's ``FileNotFoundError`` when absent)."""
    return load_splits(TrainConfig(
        model="continuousnet", dataset=common.found(s.dataset, data_dir),
        train_size=s.train_size, test_size=s.test_size, seed=seed, data_dir=data_dir,
    ))  # fmt: skip


def build(s: AdjointSettings, train: Dataset, seed: int, method: Method = BACKPROP) -> AdjointNet:
    """The net of ``seed``, the same initialisation for every method."""
    torch.manual_seed(seed)
    classes = train.num_classes or 10
    return AdjointNet(int(train.inputs.shape[1]), classes, channels=s.channels,
                      pieces=s.pieces, pool=s.pool, method=method)  # fmt: skip


def runs(setup: Setup[AdjointSettings], seed: int) -> list[Run]:
    """One net per method of :data:`TRAINED`, from the same initialisation and batches."""
    train, _ = data_of(setup.settings, seed, setup.options.data_dir)  # not found: fails now
    return [Run(m.key, task=_task(setup.settings, train, m, seed)) for m in TRAINED]


def _task(s: AdjointSettings, train: Dataset, method: Method, seed: int) -> Task:
    """SGD with ``method``'s gradients, cosine-annealed per batch, the full batches in the
    order ``seed * 1000 + epoch`` draws."""
    n, gen = len(train), torch.Generator()

    def loss(net: nn.Module, batch: tuple[Tensor, ...]) -> tuple[Tensor, dict[str, Tensor]]:
        logits = net(train.normalize(batch[0]))
        correct = (logits.detach().argmax(1) == batch[1]).sum()
        return nn.functional.cross_entropy(logits, batch[1]), {"correct": correct}

    return Task(
        model=functools.partial(build, s, train, seed, method),
        data=(train.inputs, train.targets), loss=loss,
        optimizer=functools.partial(torch.optim.SGD, lr=s.lr, momentum=s.momentum,
                                    weight_decay=s.weight_decay),
        epochs=s.epochs, batch_size=s.batch_size, seed=seed,
        order=lambda e, _: torch.randperm(n, generator=gen.manual_seed(seed * 1000 + e)),
        schedule=lambda o: CosineAnnealingLR(o, max(1, s.epochs * (n // s.batch_size)), s.lr / 100),
        row=_row, settings={"run": method.key, "seed": seed, **dataclasses.asdict(s)},
    )  # fmt: skip


def _row(epoch: Epoch) -> JsonObject:
    accuracy = epoch.sums["correct"] / max(epoch.count, 1)
    return {"epoch": epoch.index + 1.0, "train_loss": epoch.loss, "train_accuracy": accuracy,
            "epoch_seconds": epoch.seconds}  # fmt: skip


def measure(setup: Setup[AdjointSettings], trained: Trained) -> Measurement:
    """The metrics above; backprop's also the gradient errors on a fixed batch of training
    images, with the seed's initial weights (rebuilt) and trained."""
    s, method = setup.settings, next(m for m in TRAINED if m.key == trained.run.name)
    net = cast(AdjointNet, trained.model)  # a task run's model, built by build
    train, test = data_of(s, trained.seed, setup.options.data_dir)
    device = next(net.parameters()).device
    result = evaluate(net, test, "cross_entropy", batch_size=s.eval_batch_size, device=device)
    rows = trained.history
    metrics: dict[str, float | None] = {
        TEST_ACCURACY.key(): result["acc"],
        TRAIN_LOSS.key(): rows[-1]["train_loss"],
        TRAIN_ACCURACY.key(): rows[-1]["train_accuracy"],
        N_STEPS.key(): float(method.n_steps(s.pieces)),
        SECONDS.key(): trained.seconds,
    }
    if method == BACKPROP:
        ((images, labels),) = common.batches(train, min(s.grad_batch, len(train)), trained.seed, 1)
        images, labels = train.normalize(images.to(device)), labels.to(device)
        initial = build(s, train, trained.seed).to(device)
        for metric, model in ((GRAD_ERROR, initial), (GRAD_ERROR_TRAINED, net)):
            errors = gradient_errors(model, images, labels, COMPARED)
            metrics.update({metric.key(method=k, part=p): v for (k, p), v in errors.items()})
    per_epoch = [{k: row[k] for k in ("epoch", "train_loss", "epoch_seconds")} for row in rows]
    return Measurement(metrics, {"per_epoch": per_epoch})


def _error(key: str, metric: Metric = GRAD_ERROR) -> Ref:
    """The gradient error of method ``key`` over every parameter (backprop's run)."""
    return metric.of("backprop", method=key, part=ALL)


def _checkpoint(v: Values) -> float:
    """The larger of Checkpoint's errors at initialisation and trained; NaN where either is
    (``max`` would drop a NaN second)."""
    errors = v[_error("checkpoint-1M")], v[_error("checkpoint-1M", GRAD_ERROR_TRAINED)]
    return math.nan if any(map(math.isnan, errors)) else max(errors)


def _knot_first_order(v: Values) -> bool:
    first, last = v[_error("knot-1M")], v[_error("knot-4M")]
    return first > KNOT_FLOOR and last < FALL * first


BACKPROP_ACCURACY = TEST_ACCURACY.of("backprop")
CLAIMS = [
    Claim.difference(
        "adjoint_m_below_backprop",
        "The adjoint at N_t = M trains to a lower test accuracy than backprop",
        PUBLISHED["adjoint"], TEST_ACCURACY.of("adjoint-1M"), BACKPROP_ACCURACY,
        below=-ACC_GAP, kind="paper", spec="+.1f", scale=100, unit=" points",
    ),
    *(Claim.difference(
        f"adjoint_{k}m_reaches_backprop",
        f"The adjoint at N_t = {k}M trains to backprop's test accuracy",
        PUBLISHED["adjoint"], TEST_ACCURACY.of(f"adjoint-{k}M"), BACKPROP_ACCURACY,
        above=-ACC_GAP, kind="paper", spec="+.1f", scale=100, unit=" points",
    ) for k in (3, 4)),
    Claim.at_most(
        "checkpoint_is_backprop",
        "odecore.solve of the block's field gives backprop's gradient (Checkpoint)",
        "not in the paper", _checkpoint, EXACT, strict=True, spec=".1e", kind="check",
    ),
    Claim.ratio(
        "adjoint_error_falls_with_nt",
        "The adjoint's gradient error falls with N_t: at 4M below half that at M",
        "adjoint gradients sensitive to N_t (Sec. 5.2)", _error("adjoint-4M"),
        _error("adjoint-1M"), below=FALL, kind="check",
    ),
    Claim.ratio(
        "knots_lower_adjoint_error",
        "jump_t at the knots lowers the adjoint's gradient error at N_t = M",
        "not in the paper", _error("knot-1M"), _error("adjoint-1M"), below=KNOT_RATIO,
        kind="check",
    ),
    Claim(
        "knot_adjoint_error_is_first_order",
        "With jump_t the adjoint still differs from backprop by O(h), not rounding",
        "not in the paper", ours=lambda v: v[_error("knot-1M")], holds=_knot_first_order,
        spec=".2e", kind="check", low=KNOT_FLOOR,
    ),
]  # fmt: skip


def tables(setup: Setup[AdjointSettings]) -> dict[str, Table]:
    """Each trained net's numbers, and the gradient errors of each compared method."""
    accuracy = by_run("method", {m.key: m.label for m in TRAINED}, [
        Col("N_t", N_STEPS), Col("test accuracy", TEST_ACCURACY),
        Col("train loss (last epoch)", TRAIN_LOSS), Col("training s", SECONDS),
    ])  # fmt: skip
    compared = [Row(m.label, "backprop", {"method": m.key}) for m in COMPARED]
    gradients = Table("method", compared, [
        Col(f"{where}, {when}", metric, {"part": part})
        for where, part in (("all", ALL), ("block", BLOCK))
        for when, metric in (("at initialisation", GRAD_ERROR),
                             ("after training", GRAD_ERROR_TRAINED))
    ])  # fmt: skip
    return {"accuracy": accuracy, "gradients": gradients}


def _panels(result: Result[AdjointSettings]) -> list[Lines]:
    """Gradient error against ``N_t / M``, with and without jump_t, at initialisation
    and after training."""
    series = {
        f"{name} ({when})": [(k, result.stat(_error(f"{key}-{k}M", metric)).mean) for k in FACTORS]
        for key, name in (("adjoint", "adjoint"), ("knot", "adjoint, jump_t"))
        for when, metric in (("init", GRAD_ERROR), ("trained", GRAD_ERROR_TRAINED))
    }
    return [Lines("gradients at the same N_t", "N_t / M", "relative gradient error vs backprop",
                  series, xscale="log", yscale="log", xticks=FACTORS)]  # fmt: skip


def _data(setup: Setup[AdjointSettings]) -> str:
    """The data set and its sizes, for ``results.json``."""
    s = setup.settings
    name = data_name(common.found(s.dataset, setup.options.data_dir))
    train, test = ("all" if n is None else n for n in (s.train_size, s.test_size))
    return f"{name} ({train} train / {test} test)"


TEMPLATE = register_template(
    Template(
        name="contnet-adjoint",
        description="a ContinuousNet trained by backprop, by the adjoint at N_t = M..4M and "
        "by the adjoint with jump_t at the knots (Queiruga et al. 2020, Sec. 5.2)",
        title="ContinuousNet gradients: backprop against the adjoint at N_t = M ... 4M",
        modes=MODES,
        one_thread_modes=("quick", "standard"),
        runs=runs,
        measure=measure,
        claims=lambda setup: CLAIMS,
        tables=tables,
        figures=[Plot("adjoint.png", _panels, size=(5.25, 4.0), dpi=100)],
        published=PUBLISHED,
        data=_data,
    )
)

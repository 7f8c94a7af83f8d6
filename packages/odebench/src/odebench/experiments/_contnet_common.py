"""What the ContinuousNet experiments of Queiruga et al. (2020) share: the nets and
their training, the measurement of a trained net with its batch-norm statistics
recalibrated, and the per-epoch figure."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TypeVar, cast

import contnet
import torch

from .._figures import Lines, Mark
from .._metrics import Metric
from ..data import Dataset
from ..training import TrainConfig, evaluate, find_data, load_splits
from ._result import Result
from ._template import Measurement, Run, Settings, Setup, Trained


def found(dataset: str | None, data_dir: str | None) -> str:
    """``dataset`` where ``data_dir`` (or, without one, a default place) holds it; for
    ``None``, ``"mnist"`` where MNIST is found, else ``"fashion-mnist"``. The loader's
    ``FileNotFoundError`` where it (or neither digit set) is not found."""
    if dataset is not None:
        find_data(dataset, data_dir)
        return dataset
    try:
        find_data("mnist", data_dir)
    except FileNotFoundError:
        find_data("fashion-mnist", data_dir)
        return "fashion-mnist"
    return "mnist"


def batches(data: Dataset, size: int, seed: int, n: int) -> list[tuple[torch.Tensor, ...]]:
    """The first ``n`` full batches of ``data`` (images, labels) in the order ``seed``
    draws."""
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))
    chosen = order[: min(n, len(order) // size) * size].view(-1, size)
    return [(data.inputs[idx], data.targets[idx]) for idx in chosen]


@dataclass(frozen=True)
class Net:
    """One ContinuousNet run (``key`` its folder and metrics, ``label`` the report's
    name): ``N_t = M = n_steps``, doubled at the start of each of ``refine_epochs``
    (0-based), on ``dataset`` (``None``: the digits :func:`found`)."""

    key: str
    label: str
    model: str
    dataset: str | None
    method: str
    n_steps: int
    refine_epochs: tuple[int, ...] = ()

    @property
    def final_steps(self) -> int:
        """``N_t = M`` once every refinement is made."""
        return self.n_steps << len(self.refine_epochs)


@dataclass(frozen=True)
class Training:
    """The :class:`~odebench.training.TrainConfig` fields every run shares (SGD);
    ``eval_batch_size`` is also that of the recalibrated test passes."""

    train_size: int | None
    test_size: int | None
    augment: bool
    batch_size: int
    lr: float
    milestones: tuple[int, ...]
    momentum: float = 0.9
    weight_decay: float = 5e-4
    eval_batch_size: int = 1000


#: Quick mode: 512 + 256 digits, batch 32, lr 0.05, no schedule or augmentation.
QUICK_TRAINING = Training(512, 256, False, 32, 0.05, ())
#: Full mode, the authors' script: crops, batch 128, lr 0.1 x0.1 at epochs 80, 120, 140.
FULL_TRAINING = Training(None, None, True, 128, 0.1, (80, 120, 140))
#: Full mode, the authors' script (``script_it.py``, seeds 1-5): five seeds.
FULL_SEEDS = 5


@dataclass(frozen=True, kw_only=True)
class NetSettings(Settings):
    """The nets of one mode, their epochs and training, and the training batches the
    batch-norm statistics are recalibrated on."""

    nets: tuple[Net, ...]
    epochs: int
    training: Training
    recal_batches: int


@dataclass(frozen=True, kw_only=True)
class RefineSettings(NetSettings):
    """:class:`NetSettings` with how far (absolute) a refined RK4 run's recalibrated
    test accuracy may fall below that of the run it is compared with."""

    acc_tolerance: float


N = TypeVar("N", bound=NetSettings)


def refine_runs(setup: Setup[N], seed: int) -> list[Run]:
    """The :func:`odebench.training.train` run of each net for ``seed``; a data set not
    found fails now, not hours later (the loader's ``FileNotFoundError``)."""
    s, data_dir = setup.settings, setup.options.data_dir
    return [
        Run(net.key, config=TrainConfig(
            model=net.model, dataset=found(net.dataset, data_dir), epochs=s.epochs,
            method=net.method, n_steps=net.n_steps, refine_epochs=net.refine_epochs,
            seed=seed, **dataclasses.asdict(s.training),
        ))
        for net in s.nets
    ]  # fmt: skip


@dataclass(frozen=True)
class Restored:
    """A trained net (eval mode) with its configuration, its test set and the training
    batches (normalised, on its device) its batch-norm statistics were recalibrated on."""

    net: contnet.ContinuousNet
    config: TrainConfig
    test: Dataset
    batches: list[torch.Tensor]

    def accuracy(self, net: contnet.ContinuousNet) -> float:
        """The test accuracy of ``net`` (:attr:`net` or a manifestation of it)."""
        device, config = next(net.parameters()).device, self.config
        result = evaluate(net, self.test, config.loss, batch_size=config.eval_batch_size,
                          device=device)  # fmt: skip
        return cast(float, result["acc"])


def restore(setup: Setup[N], trained: Trained) -> Restored:
    """The trained net of a :func:`refine_runs` run, :func:`contnet.recalibrate`-d on the
    first ``recal_batches`` training batches of its seed."""
    config = cast(TrainConfig, trained.config)
    net = cast(contnet.ContinuousNet, trained.load(setup.device))
    train, test = load_splits(config)
    device = next(net.parameters()).device
    chosen = batches(train, config.batch_size, config.seed, setup.settings.recal_batches)
    recal = [train.normalize(images.to(device)) for images, _ in chosen]
    contnet.recalibrate(net, recal).eval()
    return Restored(net, config, test, recal)


#: The numbers of each epoch a run keeps in its details.
EPOCH_ROW = ("epoch", "n_steps", "parameters", "epoch_seconds", "test_acc", "train_acc")

#: What :func:`measure_refined` measures of every run, in the reports' formats.
PARAMETERS = Metric("parameters", spec=".3f", scale=1e-6, unit="M")
EPOCHS = Metric("epochs", spec=".0f")
N_STEPS_FINAL = Metric("n_steps_final", spec=".0f")
N_STEPS_SUM = Metric("n_steps_sum", spec=".0f")
TEST_ACCURACY = Metric("test_accuracy", spec=".2f", scale=100, unit="%")
RECALIBRATED = Metric("test_accuracy_recalibrated", spec=".2f", scale=100, unit="%")
TRAIN_ACCURACY = Metric("train_accuracy", spec=".2f", scale=100, unit="%")
SECONDS_PER_EPOCH = Metric("seconds_per_epoch", spec=".2f")
SECONDS_FIRST_EPOCH = Metric("seconds_first_epoch", spec=".2f")
SECONDS_LAST_EPOCH = Metric("seconds_last_epoch", spec=".2f")
TRAIN_SECONDS = Metric("train_seconds", spec=".2f", scale=1 / 60, unit=" min")
RUN_WALL_SECONDS = Metric("run_wall_seconds", spec=".2f", scale=1 / 60, unit=" min")


def measure_refined(
    setup: Setup[N], trained: Trained, restored: Restored | None = None
) -> Measurement:
    """The metrics above and the details (data set, :data:`EPOCH_ROW`); no wall time
    under ``--resume``, where :func:`~odebench.training.train` knows its last stretch's."""
    r = restored or restore(setup, trained)
    result, rows = trained.result, trained.history
    seconds = [row["epoch_seconds"] for row in rows]
    final = trained.final_metrics()
    values = {
        PARAMETERS: result["parameters"],
        EPOCHS: result["epochs"],
        N_STEPS_FINAL: final.get("n_steps"),
        N_STEPS_SUM: sum(row["n_steps"] for row in rows),
        TEST_ACCURACY: final.get("test_acc"),
        RECALIBRATED: r.accuracy(r.net),
        TRAIN_ACCURACY: final.get("train_acc"),
        SECONDS_PER_EPOCH: sum(seconds) / len(seconds),
        SECONDS_FIRST_EPOCH: seconds[0],
        SECONDS_LAST_EPOCH: seconds[-1],
        TRAIN_SECONDS: result["train_seconds"],
        RUN_WALL_SECONDS: None if setup.options.resume else result["wall_seconds"],
    }
    return Measurement(
        {metric.key(): value for metric, value in values.items()},
        {"dataset": r.config.dataset,
         "per_epoch": [{k: row.get(k) for k in EPOCH_ROW} for row in rows]},
    )  # fmt: skip


def epoch_panels(result: Result[N]) -> list[Lines]:
    """Training seconds per epoch (log scale, dotted lines at the refinements) and test
    accuracy per epoch, a line per net (first seed)."""
    nets = result.settings.nets
    rows = {net.label: result.details(net.key)["per_epoch"] for net in nets}
    times = {k: [(r["epoch"], r["epoch_seconds"]) for r in v] for k, v in rows.items()}
    accs = {k: [(r["epoch"], r["test_acc"] and 100 * r["test_acc"]) for r in v]
            for k, v in rows.items()}  # fmt: skip
    refinements = [Mark(epoch + 0.5, axis="x") for net in nets for epoch in net.refine_epochs]
    return [
        Lines("dotted: refinements (N_t and M double)", "epoch", "training seconds per epoch",
              times, yscale="log", marks=refinements),
        Lines("", "epoch", "test accuracy (%)", accs),
    ]  # fmt: skip

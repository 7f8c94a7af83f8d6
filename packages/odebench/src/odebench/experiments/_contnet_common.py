"""What the ContinuousNet experiments of Queiruga et al. (2020) share.

All three train ContinuousNets, whose residual modules hold batch norms, on 28x28
digits in quick mode (:func:`digits`, :func:`batches`, :func:`recalibrate`).
``continuousnet-cifar`` and ``refinement-timing`` train, measure and draw the same
kind of run: a ContinuousNet at a fixed depth or refined during training (:class:`Net`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import contnet
import torch
from torch import nn

from ..data import Dataset
from ..training import TrainConfig, evaluate, find_data
from ..training._data import load_splits
from ..training._io import pyplot, save_png
from ._template import Measurement, Result, Run, Settings, Setup, Trained


def digits(data_dir: str | None) -> str:
    """``"mnist"`` where ``data_dir`` (or, without one, a default place) holds MNIST,
    else ``"fashion-mnist"``; the loader's ``FileNotFoundError`` where neither is."""
    try:
        find_data("mnist", data_dir)
    except FileNotFoundError:
        find_data("fashion-mnist", data_dir)
        return "fashion-mnist"
    return "mnist"


def batches(data: Dataset, batch: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The full batches of ``data`` (images, labels) in the order ``seed`` draws."""
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))
    for i in range(len(order) // batch):
        idx = order[i * batch : (i + 1) * batch]
        yield data.inputs[idx], data.targets[idx]


def recalibrate(
    net: contnet.ContinuousNet, data: Dataset, n_batches: int, batch: int, seed: int
) -> None:
    """Running statistics of ``net`` as the plain average over every batch-norm call.

    Train mode, no gradients, ``n_batches`` batches of ``data``. Before each call a
    batch norm's momentum is set to ``1 / (n + 1)``, ``n`` the calls so far on the
    statistics tensor it is about to update (each depth piece of a residual module has
    its own, visited once per stage and step in it), so every piece ends with the
    average of all its calls and the old statistics are discarded. The momenta are
    restored and ``net`` is left in eval mode.
    """
    modules = list(net.modules())
    for block in net.ode_blocks():  # the residual modules' templates
        modules += list(block.continuous.module.modules())
    norms = [m for m in modules if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    counts: dict[int, int] = {}

    def count(module: nn.Module, args: object) -> None:
        bn = cast(nn.modules.batchnorm._BatchNorm, module)
        key = cast(torch.Tensor, bn.running_mean).data_ptr()
        n = counts.get(key, 0)
        bn.momentum = 1.0 / (n + 1)
        counts[key] = n + 1

    hooks = [m.register_forward_pre_hook(count) for m in norms]
    device = next(net.parameters()).device
    net.train()
    try:
        with torch.no_grad():
            for k, (images, _) in enumerate(batches(data, batch, seed)):
                if k >= n_batches:
                    break
                net(data.normalize(images.to(device)))
    finally:
        for hook in hooks:
            hook.remove()
        for m, momentum in zip(norms, momenta):
            m.momentum = momentum
        net.eval()


@dataclass(frozen=True)
class Net:
    """One ContinuousNet run: at a fixed depth, or refined during training.

    Args:
        key: the run's name (its folder, the key of its metrics).
        label: how the report names it.
        model: ``"continuousnet"`` or ``"wide-continuousnet"``.
        dataset: its data set; ``None``: the :func:`digits` found (quick mode).
        method: its fixed-step method (``"euler"``, ``"rk4"``).
        n_steps: ``N_t = M`` at the first epoch.
        refine_epochs: the (0-based) epochs at whose start ``N_t`` and ``M`` double.

    Example:
        >>> Net("rk4-refined", "RK4", "continuousnet", None, "rk4", 1, (1, 2)).final_steps
        4
    """

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
    """The :class:`~odebench.training.TrainConfig` fields every run shares (SGD)."""

    train_size: int | None
    test_size: int | None
    augment: bool
    batch_size: int
    lr: float
    milestones: tuple[int, ...]
    momentum: float = 0.9
    weight_decay: float = 5e-4


#: Quick mode: 512 + 256 digits, batch 32, lr 0.05, no schedule or augmentation.
QUICK_TRAINING = Training(512, 256, False, 32, 0.05, ())
#: Full mode, the authors' script: crops, batch 128, lr 0.1 x0.1 at epochs 80, 120, 140.
FULL_TRAINING = Training(None, None, True, 128, 0.1, (80, 120, 140))


@dataclass(frozen=True)
class RefineSettings(Settings):
    """The runs of one mode and how they train.

    Args:
        nets: the runs, in order.
        epochs: epochs of every run (but the CIFAR-100 ones with ``epochs_cifar100``).
        training: the optimiser and data.
        recal_batches: training batches the batch-norm statistics are recalibrated on.
        acc_tolerance: how far (absolute) a refined RK4 run's recalibrated test
            accuracy may fall below that of the run it is compared with.
        epochs_cifar100: epochs of the CIFAR-100 runs; ``None``: ``epochs``.
    """

    nets: tuple[Net, ...]
    epochs: int
    training: Training
    recal_batches: int
    acc_tolerance: float
    epochs_cifar100: int | None = None

    def epochs_of(self, net: Net) -> int:
        """The epochs of ``net``."""
        if net.dataset == "cifar100" and self.epochs_cifar100 is not None:
            return self.epochs_cifar100
        return self.epochs


def refine_runs(setup: Setup[RefineSettings], seed: int) -> list[Run]:
    """One :func:`odebench.training.train` run per net, on its data set or the
    :func:`digits` found."""
    s, data_dir = setup.settings, setup.options.data_dir
    for name in sorted({net.dataset for net in s.nets if net.dataset}):
        find_data(name, data_dir)  # a missing data set fails now, not hours later
    return [
        Run(
            net.key,
            config=TrainConfig(
                model=net.model,
                dataset=net.dataset or digits(data_dir),
                epochs=s.epochs_of(net),
                method=net.method,
                n_steps=net.n_steps,
                refine_epochs=net.refine_epochs,
                seed=seed,
                **dataclasses.asdict(s.training),
            ),
        )
        for net in s.nets
    ]


#: The numbers of each epoch a run keeps in its details.
EPOCH_ROW = ("epoch", "n_steps", "parameters", "epoch_seconds", "test_acc", "train_acc")


def measure_refined(setup: Setup[RefineSettings], trained: Trained) -> Measurement:
    """Accuracy (as trained, and with recalibrated batch-norm statistics), size, depth
    and training time of a run; its details: the data set and :data:`EPOCH_ROW`."""
    config, result, rows = cast(TrainConfig, trained.config), trained.result, trained.history
    net = cast(contnet.ContinuousNet, trained.load(setup.device))
    train, test = load_splits(config)
    recalibrate(net, train, setup.settings.recal_batches, config.batch_size, config.seed)
    recal = evaluate(net, test, config.loss, batch_size=config.eval_batch_size, device=setup.device)
    seconds = [row["epoch_seconds"] for row in rows]
    final = trained.final_metrics()
    return Measurement(
        {
            "parameters": result["parameters"],
            "epochs": result["epochs"],
            "n_steps_final": final.get("n_steps"),
            "n_steps_sum": sum(row["n_steps"] for row in rows),
            "test_accuracy": final.get("test_acc"),
            "test_accuracy_recalibrated": recal["acc"],
            "train_accuracy": final.get("train_acc"),
            "seconds_per_epoch": sum(seconds) / len(seconds),
            "seconds_first_epoch": seconds[0],
            "seconds_last_epoch": seconds[-1],
            "train_seconds": result["train_seconds"],
            "run_wall_seconds": result["wall_seconds"],
        },
        {"dataset": config.dataset, "per_epoch": [{k: r.get(k) for k in EPOCH_ROW} for r in rows]},
    )


def plot_epochs(result: Result[RefineSettings], path: Path, *, stacked: bool) -> None:
    """Training seconds per epoch (log scale, dotted lines at the refinements) and test
    accuracy per epoch, a line per run (first seed), one panel above the other
    (``stacked``) or side by side."""
    plt = pyplot()
    if stacked:
        fig, (times, accs) = plt.subplots(2, 1, figsize=(6.4, 6.0), sharex=True)
        times.set_title("dotted: refinements (N_t and M double)", fontsize=9)
    else:
        fig, (times, accs) = plt.subplots(1, 2, figsize=(9.6, 3.6))
        times.set(xlabel="epoch", title="dotted: refinements")
    for net in result.settings.nets:
        rows = result.details(net.key)["per_epoch"]
        epochs = [row["epoch"] for row in rows]
        times.plot(epochs, [row["epoch_seconds"] for row in rows], "o-", label=net.label)
        acc = [float("nan") if r["test_acc"] is None else 100 * r["test_acc"] for r in rows]
        accs.plot(epochs, acc, "o-", label=net.label)
        for epoch in net.refine_epochs:
            times.axvline(epoch + 0.5, color="0.6", ls=":", lw=1)
    times.set(ylabel="training seconds per epoch", yscale="log")
    accs.set(xlabel="epoch", ylabel="test accuracy (%)")
    for ax in (times, accs):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(path, fig, dpi=90)

"""``odebench run chen-table1``: Chen et al. (2018), Table 1 on MNIST."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from torch import nn

from ..data import Dataset
from ..models import nfe
from ..perf._contnet import saved_bytes
from ..training import TrainConfig
from ..training._data import load_splits
from ._template import (
    Claim,
    Measurement,
    Result,
    Run,
    Settings,
    Setup,
    Template,
    Trained,
    register_template,
)

#: Table 1 of Chen et al. (2018): test error (%) and parameters, with the memory and
#: time complexities the paper gives (L: layers, L~: function evaluations).
PUBLISHED = {
    "mlp": {"error": 1.60, "params": "0.24M", "memory": "–", "time": "–"},
    "resnet": {"error": 0.41, "params": "0.60M", "memory": "O(L)", "time": "O(L)"},
    "rknet": {"error": 0.47, "params": "0.22M", "memory": "O(L~)", "time": "O(L~)"},
    "odenet": {"error": 0.42, "params": "0.22M", "memory": "O(1)", "time": "O(L~)"},
}
LABELS = {"mlp": "1-layer MLP", "resnet": "ResNet", "rknet": "RK-Net", "odenet": "ODE-Net"}


@dataclass(frozen=True)
class ChenSettings(Settings):
    """The training of the four models, and the batch their costs are measured on.

    Args:
        epochs: epochs of every model.
        batch_size: the training batch.
        lr: SGD's learning rate (momentum 0.9).
        milestones: epochs at which the rate is multiplied by 0.1.
        augment: random crops with padding 4.
        train_size: training images (``None``: all).
        test_size: test images (``None``: all).
        cost_batch: the batch of test images memory and time are measured on.
    """

    epochs: int
    batch_size: int
    lr: float
    milestones: tuple[int, ...]
    augment: bool
    train_size: int | None
    test_size: int | None
    cost_batch: int


MODES = {
    "quick": ChenSettings(
        epochs=1, batch_size=32, lr=0.05, milestones=(), augment=False,
        train_size=512, test_size=256, cost_batch=32,
    ),
    # torchdiffeq's reproduction of the paper (the paper states no epochs or optimiser).
    "full": ChenSettings(
        epochs=160, batch_size=128, lr=0.1, milestones=(60, 100, 140), augment=True,
        train_size=None, test_size=None, cost_batch=128,
    ),
}  # fmt: skip


def runs(setup: Setup[ChenSettings], seed: int) -> list[Run]:
    """The four models of Table 1 on the same data; the ODE-Net trains with the adjoint."""
    s = setup.settings
    return [
        Run(
            model,
            config=TrainConfig(
                model=model,
                dataset="mnist",
                epochs=s.epochs,
                batch_size=s.batch_size,
                lr=s.lr,
                milestones=s.milestones,
                augment=s.augment,
                train_size=s.train_size,
                test_size=s.test_size,
                gradient="adjoint" if model == "odenet" else "backprop",
                rtol=1e-3,
                atol=1e-3,
                seed=seed,
            ),
        )
        for model in PUBLISHED
    ]


def measure(setup: Setup[ChenSettings], trained: Trained) -> Measurement:
    """Test error and parameters, and the costs of one training step on test images."""
    assert trained.config is not None  # every run of `runs` has a config
    acc = trained.final_metrics()["test_acc"]
    _, test = load_splits(trained.config)
    return Measurement(
        {
            "parameters": trained.result["parameters"],
            "test_error": None if acc is None else 1.0 - acc,
            "epochs": trained.result["epochs"],
            "train_seconds": trained.result["train_seconds"],
            **_costs(trained.load(setup.device), test, setup.settings.cost_batch),
        }
    )


def _costs(model: nn.Module, test: Dataset, batch: int) -> dict[str, float]:
    """Memory saved for the backward pass and the time of one training step, on one
    batch of test images (the median of three steps after a warm-up)."""
    device = next(model.parameters()).device
    x = test.normalize(test.inputs[:batch].to(device))
    y = test.targets[:batch].to(device)
    model.train()
    memory = saved_bytes(model, x, y) / 2**20
    times = []
    for _ in range(4):
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        times.append(time.perf_counter() - start)
    forward, backward = nfe(model)
    return {
        "saved_mib": memory,
        "step_seconds": statistics.median(times[1:]),
        "nfe_forward": float(forward),
        "nfe_backward": float(backward),
        "batch": float(len(y)),
    }


def claims(setup: Setup[ChenSettings]) -> list[Claim]:
    """The paper's claims about memory and size, checked on our figures."""
    saved, params = "saved_mib", "parameters"
    return [
        Claim.ratio(
            "odenet_saves_less_than_rknet",
            "the ODE-Net's memory is below the RK-Net's (adjoint against backprop through "
            "the steps); ours: the ratio",
            "O(1) against O(L~)",
            ("odenet", saved),
            ("rknet", saved),
            below=1.0,
        ),
        Claim.ratio(
            "odenet_saves_less_than_resnet",
            "the ODE-Net's memory is below the ResNet's; ours: the ratio",
            "O(1) against O(L)",
            ("odenet", saved),
            ("resnet", saved),
            below=1.0,
        ),
        Claim.ratio(
            "odenet_params_below_half_of_resnet",
            "the ODE-Net has less than half the ResNet's parameters; ours: the ratio",
            0.22 / 0.60,
            ("odenet", params),
            ("resnet", params),
            below=0.5,
        ),
    ]


def sections(result: Result[ChenSettings]) -> str:
    """Table 1, ours beside the paper's, column by column."""
    lines = [
        "## Table 1",
        "",
        "| model | test error (ours) | test error (paper) | parameters (ours) | parameters "
        "(paper) | saved for backward, MiB | memory (paper) | time per step, ms | "
        "time (paper) | NFE forward / backward |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, p in PUBLISHED.items():
        forward, backward = (
            result.cell(name, f"nfe_{way}", ".0f") for way in ("forward", "backward")
        )
        nfe_cell = f"{forward} / {backward}" if result.stat(name, "nfe_forward").mean else "–"
        lines.append(
            f"| {LABELS[name]} | {result.cell(name, 'test_error', '.2f', 100, '%')} | "
            f"{p['error']:.2f}% | {result.cell(name, 'parameters', '.3f', 1e-6, 'M')} | "
            f"{p['params']} | {result.cell(name, 'saved_mib', '.1f')} | {p['memory']} | "
            f"{result.cell(name, 'step_seconds', '.0f', 1e3)} | {p['time']} | {nfe_cell} |"
        )
    s = result.settings
    lines += [
        "",
        f"Trained for {s.epochs} epoch(s)"
        + (
            " on a subset (quick mode): the errors are far from the paper's."
            if result.setup.mode == "quick"
            else "."
        ),
        f"Memory is what autograd saves for the backward pass of one training step on a "
        f"batch of {s.cost_batch} test images; time is one training step on that batch. "
        "The ODE-Net trains with the adjoint method, which saves only the block's input "
        "and output.",
    ]
    return "\n".join(lines)


register_template(
    Template(
        name="chen-table1",
        description="Chen et al. (2018) Table 1: MNIST test error, parameters, memory and "
        "time of the 1-layer MLP, ResNet, RK-Net and ODE-Net",
        title="Chen et al. (2018), Table 1: MNIST",
        modes=MODES,
        runs=runs,
        measure=measure,
        claims=claims,
        sections=sections,
        published=PUBLISHED,
    )
)

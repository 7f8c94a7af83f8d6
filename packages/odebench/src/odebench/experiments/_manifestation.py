"""``odebench run manifestation-sweep``: Queiruga et al. (2020), Fig. 9, on MNIST.

Two ContinuousNets with the same channels, ``N_t`` and piecewise-constant basis
``M`` train from the same seed on the same batches, one manifested with forward Euler,
one with RK4 (classic). Each is then evaluated with every ``(scheme, N_t)`` of a grid:
the same weights, another computational graph. The paper: the RK4-trained model's
accuracy stays flat across manifestations, the Euler-trained one's degrades. The
batch-norm statistics are recalibrated after training and for every manifestation
(:func:`~odebench.experiments._contnet_common.recalibrate`); a second grid keeps those
of the training manifestation.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import contnet
import torch
from torch import nn

from ..data import Dataset, load_mnist
from ..training import evaluate, find_data
from ..training._io import pyplot, save_png
from ._contnet_common import batches, digits, recalibrate
from ._template import (
    Claim,
    Figure,
    Fitted,
    Measurement,
    Run,
    Settings,
    Stat,
    Template,
    register_template,
)

if TYPE_CHECKING:
    from ._template import Result, Setup, Trained

#: The schemes of the grid (rows of Fig. 9), and the two trained with.
SCHEMES: tuple[str, ...] = ("euler", "midpoint", "rk4", "rk4_38")
TRAINED: tuple[str, ...] = ("euler", "rk4")
#: Flat: the RK4-trained range at most this; degrades: the Euler-trained at least this.
FLAT_RANGE, DEGRADED_RANGE = 0.05, 0.10
#: The two grids, by how their batch-norm statistics were set.
GRIDS = {
    "grid": "recalibrated per manifestation",
    "grid_fixed_stats": "statistics of the training manifestation",
}
#: What Queiruga et al. (2020), Fig. 9 and its text, report.
PUBLISHED: dict[str, Any] = {
    "rk4_trained": "accuracy does not degrade when time steps are added (or removed, up to a "
    "point) or the scheme is exchanged (Fig. 9, CIFAR-10/100); numbers not published",
    "euler_trained": "test error changes with the manifestation (Fig. 9); numbers not published",
    "data": "CIFAR-10 and CIFAR-100 in the paper; MNIST here",
}


@dataclass(frozen=True)
class SweepSettings(Settings):
    """The two nets (Adam), their data, and the grid they are evaluated on.

    Args:
        channels: the ContinuousNet's channels.
        n_steps: ``N_t = M`` in training.
        grid_steps: the step counts ``N_t`` of the grid (its columns).
        epochs: epochs of both nets, at least one.
        batch_size: the training batch (and the recalibration's).
        lr: Adam's learning rate.
        train_size: training images (``None``: all).
        test_size: test images (``None``: all).
        recal_batches: training batches the batch-norm statistics are recalibrated on.
        eval_batch: the batch of the test passes.
    """

    channels: tuple[int, int, int]
    n_steps: int
    grid_steps: tuple[int, ...]
    epochs: int
    batch_size: int
    lr: float
    train_size: int | None
    test_size: int | None
    recal_batches: int
    eval_batch: int


MODES = {
    # 1024 + 256 images, N_t = M = 2, evaluated at N_t/2 ... 4 N_t.
    "quick": SweepSettings(
        channels=(8, 16, 32), n_steps=2, grid_steps=(1, 2, 4, 8), epochs=3, batch_size=32,
        lr=2e-3, train_size=1024, test_size=256, recal_batches=4, eval_batch=256,
    ),
    # All of MNIST, N_t = M = 4: a short run, not the paper's CIFAR schedule.
    "full": SweepSettings(
        channels=(16, 32, 64), n_steps=4, grid_steps=(2, 4, 8, 16), epochs=3, batch_size=128,
        lr=1e-3, train_size=None, test_size=None, recal_batches=20, eval_batch=500,
    ),
}  # fmt: skip


@functools.lru_cache(maxsize=1)
def _data(setup: Setup[SweepSettings], seed: int) -> tuple[str, Dataset, Dataset]:
    """The digits found, and their seeded training and test subsets (read once)."""
    s, data_dir = setup.settings, setup.options.data_dir
    kind = digits(data_dir)
    root, gen = find_data(kind, data_dir), torch.Generator().manual_seed(seed)
    train = load_mnist(root, train=True, kind=kind).subset(s.train_size, generator=gen)
    return kind, train, load_mnist(root, train=False, kind=kind).subset(s.test_size, generator=gen)


def runs(setup: Setup[SweepSettings], seed: int) -> list[Run]:
    """A net per training scheme, trained by :func:`_fit`; the data are looked up now."""
    if setup.settings.epochs < 1:
        raise ValueError(
            f"manifestation-sweep needs at least one epoch, got {setup.settings.epochs}."
        )
    _data(setup, seed)
    return [Run(method, fit=functools.partial(_fit, setup, seed, method)) for method in TRAINED]


def _fit(setup: Setup[SweepSettings], seed: int, method: str, device: torch.device) -> Fitted:
    """Adam from the seed's initialisation; a row per epoch (train-mode accuracy)."""
    s, (_, data, _) = setup.settings, _data(setup, seed)
    torch.manual_seed(seed)
    net = contnet.ContinuousNet(
        in_channels=1, channels=s.channels, n_steps=s.n_steps, solver=method,
        basis="piecewise_constant",
    ).to(device)  # fmt: skip
    opt = torch.optim.Adam(net.parameters(), lr=s.lr)
    net.train()
    history = []
    for epoch in range(s.epochs):
        start, correct, seen = time.perf_counter(), 0, 0
        for images, labels in batches(data, s.batch_size, seed + epoch):
            x, y = data.normalize(images.to(device)), labels.to(device)
            opt.zero_grad(set_to_none=True)
            logits = net(x)
            nn.functional.cross_entropy(logits, y).backward()  # type: ignore[no-untyped-call]
            opt.step()
            correct += int((logits.argmax(1) == y).sum())
            seen += len(y)
        history.append(
            {"train_acc": correct / max(seen, 1), "seconds": time.perf_counter() - start}
        )
    return Fitted(net, history)


def measure(setup: Setup[SweepSettings], trained: Trained) -> Measurement:
    """The accuracy at the training manifestation, both grids, and their ranges."""
    s, seed = setup.settings, trained.seed
    kind, train, test = _data(setup, seed)
    net = cast(contnet.ContinuousNet, trained.load())
    recalibrate(net, train, s.recal_batches, s.batch_size, seed)
    metrics: dict[str, float | None] = {
        "train_accuracy": trained.history[-1]["train_acc"],
        "test_accuracy": _accuracy(net, test, s.eval_batch),
        "train_seconds": sum(row["seconds"] for row in trained.history),
    }
    grids = {key: _grid(net, train, test, s, seed, recal=key == "grid") for key in GRIDS}
    for key, grid in grids.items():
        suffix = key.removeprefix("grid")
        metrics[f"range{suffix}"] = _range(grid, s.grid_steps)
        metrics[f"range_refined{suffix}"] = _range(grid, s.grid_steps, s.n_steps)
    setup.log(
        f"[{trained.run.name}-trained] train acc {metrics['train_accuracy']:.3f}, test acc "
        f"{metrics['test_accuracy']:.3f}, grid range {metrics['range']:.3f}"
    )
    return Measurement(metrics, {"data": kind, **grids})


def _accuracy(net: nn.Module, test: Dataset, batch: int) -> float:
    device = next(net.parameters()).device
    return cast(float, evaluate(net, test, "cross_entropy", batch_size=batch, device=device)["acc"])


def _grid(
    net: contnet.ContinuousNet, train: Dataset, test: Dataset, s: SweepSettings, seed: int,
    recal: bool,
) -> list[list[float]]:  # fmt: skip
    """Test accuracy of every manifestation: rows ``SCHEMES``, columns ``grid_steps``."""
    trained = {name: b.detach().clone() for name, b in net.named_buffers()}

    def metric(model: contnet.ContinuousNet) -> float:
        if recal:
            recalibrate(model, train, s.recal_batches, s.batch_size, seed)
        acc = _accuracy(model, test, s.eval_batch)
        with torch.no_grad():
            for name, b in net.named_buffers():
                b.copy_(trained[name])
        return acc

    sweep = contnet.manifestation_sweep(net, metric, solvers=SCHEMES, n_steps=s.grid_steps)
    return [[sweep[(method, n)] for n in s.grid_steps] for method in SCHEMES]


def _range(grid: list[list[float]], steps: tuple[int, ...], least: int = 0) -> float:
    """Largest minus smallest accuracy over the columns with ``N_t >= least``."""
    values = [v for row in grid for v, n in zip(row, steps) if n >= least]
    return max(values) - min(values)


#: How the claims show a range: in points.
POINTS: dict[str, Any] = {"spec": ".1f", "scale": 100, "unit": " points"}


def claims(setup: Setup[SweepSettings]) -> list[Claim]:
    """Fig. 9 on the accuracy ranges: RK4-trained below Euler-trained (over the whole
    grid, over ``N_t >=`` the training ``N_t``, where the paper expects no degradation,
    and with fixed statistics); RK4-trained flat, Euler-trained degraded."""
    n = setup.settings.n_steps
    fixed = "over the whole grid with the statistics of the training manifestation"
    return [
        *(_below(suffix, where) for suffix, where in (("", "over the whole grid"),
                                                      ("_refined", f"over N_t >= {n}"),
                                                      ("_fixed_stats", fixed))),
        Claim(
            key="rk4_trained_flat_refined",
            text=f"the RK4-trained model is flat: its range over N_t >= {n} is at most "
            f"{FLAT_RANGE * 100:g} points; ours: the range",
            published=PUBLISHED["rk4_trained"],
            ours=lambda v: v["rk4", "range_refined"],
            holds=lambda v: v["rk4", "range_refined"] <= FLAT_RANGE,
            **POINTS,
        ),
        Claim(
            key="euler_trained_degrades_refined",
            text=f"the Euler-trained model degrades: its range over N_t >= {n} is at least "
            f"{DEGRADED_RANGE * 100:g} points; ours: the range",
            published=PUBLISHED["euler_trained"],
            ours=lambda v: v["euler", "range_refined"],
            holds=lambda v: v["euler", "range_refined"] >= DEGRADED_RANGE,
            **POINTS,
        ),
    ]  # fmt: skip


def _below(suffix: str, where: str) -> Claim:
    """The RK4-trained accuracy range ``range<suffix>`` below the Euler-trained one."""
    metric = "range" + suffix
    return Claim(
        key=f"rk4_range_below_euler_range{suffix}",
        text=f"the RK4-trained accuracy range is below the Euler-trained one, {where}; "
        "ours: RK4's minus Euler's",
        published="RK4-trained flat, Euler-trained not (Fig. 9); numbers not published",
        ours=lambda v: v["rk4", metric] - v["euler", metric],
        holds=lambda v: v["rk4", metric] < v["euler", metric],
        **{**POINTS, "spec": "+.1f"},
    )


def _mean_grid(result: Result[SweepSettings], run: str, key: str) -> list[list[Stat]]:
    """Each cell of one grid of ``run`` over the seeds."""
    grids = [m.details[key] for m in result.measurements[run]]
    return [[Stat.of(cells) for cells in zip(*rows)] for rows in zip(*grids)]


def _ranges(result: Result[SweepSettings], run: str, metric: str) -> str:
    """A range in points, recalibrated and with fixed statistics."""
    fixed = result.cell(run, metric + "_fixed_stats", ".1f", 100)
    return f"{result.cell(run, metric, '.1f', 100)} points (fixed statistics: {fixed})"


def sections(result: Result[SweepSettings]) -> str:
    """The settings, the published statements beside ours, both grids, the figures."""
    s, n, cell = result.settings, result.settings.n_steps, result.cell
    size = ["all" if k is None else k for k in (s.train_size, s.test_size)]
    lines = [
        f"Data {result.details('euler')['data']}. ContinuousNet channels {s.channels}, "
        f"N_t = M = {n} (piecewise constant), {s.epochs} epoch(s) of {size[0]} training "
        f"images, Adam lr {s.lr:g}, batch {s.batch_size}; {size[1]} test images. Batch-norm "
        f"statistics recalibrated on {s.recal_batches} training batches per manifestation.",
        "",
        "## Published beside ours",
        "",
        "| Quantity | Published | Ours |",
        "|---|---|---|",
    ]
    for r in TRAINED:
        lines.append(f"| {r}-trained: accuracy range over the grid | {PUBLISHED[r + '_trained']} | "
                     f"{_ranges(result, r, 'range')} |")  # fmt: skip
    for r in TRAINED:
        lines.append(
            f"| {r}-trained: test accuracy at its own manifestation | not published | "
            f"{cell(r, 'test_accuracy', '.1f', 100, '%')} "
            f"(train {cell(r, 'train_accuracy', '.1f', 100, '%')}) |"
        )
    for r in TRAINED:
        lines.append(f"| {r}-trained: range over N_t >= {n} | not published | "
                     f"{_ranges(result, r, 'range_refined')} |")  # fmt: skip
    lines += ["", "## Grids (test accuracy, %)", ""]
    for r in TRAINED:
        for key, label in GRIDS.items():
            lines += [
                f"Trained [{r}, N_t = {n}], {label}:",
                "",
                "| scheme | " + " | ".join(f"N_t={k}" for k in s.grid_steps) + " |",
                "|---" * (len(s.grid_steps) + 1) + "|",
                *(
                    f"| {name} | " + " | ".join(c.cell(".1f", 100) for c in row) + " |"
                    for name, row in zip(SCHEMES, _mean_grid(result, r, key))
                ),
                "",
            ]
    figures = [
        "![Fig. 9 analogue](fig9_heatmaps.png)",
        "![accuracy against N_t](accuracy_vs_steps.png)",
    ]
    return "\n".join([*lines, figures[0], "", figures[1]])


def _grids(result: Result[SweepSettings]) -> dict[str, list[list[float]]]:
    """The recalibrated grid of each trained net, each cell its mean over the seeds."""
    return {
        r: [[cast(float, c.mean) for c in row] for row in _mean_grid(result, r, "grid")]
        for r in TRAINED
    }


def _plot_heatmaps(result: Result[SweepSettings], path: Path) -> None:
    """Fig. 9 analogue: test accuracy over schemes x N_t, one panel per trained model."""
    s, grids = result.settings, _grids(result)
    values = [v for grid in grids.values() for row in grid for v in row]
    lo, hi = min(values), max(values)
    fig, axes = pyplot().subplots(1, 2, figsize=(10.2, 3.6), layout="constrained")
    for ax, (scheme, grid) in zip(axes, grids.items()):
        image = ax.imshow(grid, vmin=lo, vmax=hi, cmap="viridis", aspect="auto")
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                ax.text(j, i, f"{100 * v:.1f}", ha="center", va="center", fontsize=8,
                        color="w" if v < (lo + hi) / 2 else "k")  # fmt: skip
        ax.set_xticks(range(len(s.grid_steps)), [str(n) for n in s.grid_steps])
        ax.set_yticks(range(len(SCHEMES)), list(SCHEMES))
        ax.set(xlabel="N_t at evaluation", title=f"trained [{scheme}, N_t={s.n_steps}]")
    fig.colorbar(image, ax=list(axes), label="test accuracy")
    save_png(path, fig, dpi=90)


def _plot_lines(result: Result[SweepSettings], path: Path) -> None:
    """Test accuracy against N_t, one line per evaluation scheme, one panel per model."""
    s, grids = result.settings, _grids(result)
    fig, axes = pyplot().subplots(1, 2, figsize=(9.0, 3.4), sharey=True)
    for ax, (scheme, grid) in zip(axes, grids.items()):
        for name, row in zip(SCHEMES, grid):
            ax.plot(s.grid_steps, [100 * v for v in row], "o-", label=name)
        ax.axvline(s.n_steps, color="0.5", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xticks(s.grid_steps, [str(n) for n in s.grid_steps])
        ax.set(xlabel="N_t at evaluation", title=f"trained with {scheme}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (%)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


register_template(
    Template(
        name="manifestation-sweep",
        modes=MODES,
        one_thread_modes=("quick",),
        title="Queiruga et al. (2020), Fig. 9: manifestation sweep on MNIST",
        description="Queiruga et al. (2020) Fig. 9: Euler- and RK4-trained ContinuousNets "
        "evaluated over schemes x step counts on MNIST",
        runs=runs,
        measure=measure,
        claims=claims,
        published=PUBLISHED,
        figures=[Figure("fig9_heatmaps.png", _plot_heatmaps),
                 Figure("accuracy_vs_steps.png", _plot_lines)],
        sections=sections,
    )
)  # fmt: skip

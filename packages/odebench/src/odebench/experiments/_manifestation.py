"""``odebench run manifestation-sweep``: Queiruga et al. (2020), Fig. 9.

Two ContinuousNets with the same channels, final ``N_t`` and piecewise-constant basis
``M`` train with :func:`odebench.training.train` from the same seed on the same batches,
one manifested with forward Euler, one with RK4 (classic; refined during training in
full mode, as the paper's model is). Each is then evaluated with every
``(scheme, N_t)`` of a grid: the same weights, another computational graph. The paper
(CIFAR-10 and CIFAR-100): the RK4-trained model's accuracy stays flat across
manifestations, the Euler-trained one's degrades. The batch-norm statistics are
recalibrated after training and for every manifestation
(:func:`~odebench.experiments._contnet_common.recalibrate`); a second grid keeps those
of the training manifestation. Quick mode runs on the digits found, standard mode on
a subset of Fashion-MNIST, full mode on CIFAR-10.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import contnet
import torch

from .._io import pyplot, save_png
from . import _contnet_common as common
from ._claims import Claim
from ._images import data_name
from ._metrics import Stat
from ._template import Figure, Measurement, Template, register_template

if TYPE_CHECKING:
    from ._template import Result, Setup, Trained

#: The schemes of the grid (rows of Fig. 9), and the two trained with (the nets' keys).
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
    "data": "CIFAR-10 and CIFAR-100 in the paper; here the digits found (quick mode), "
    "Fashion-MNIST (standard mode), CIFAR-10 (full mode)",
}


@dataclass(frozen=True, kw_only=True)
class SweepSettings(common.NetSettings):
    """The two nets, their training, and the grid they are evaluated on.

    ``nets`` are an Euler-trained and an RK4-trained net, keyed and trained as
    :data:`TRAINED` says, that end training at the same ``N_t = M``.

    Args:
        grid_steps: the step counts ``N_t`` of the grid (its columns), the nets' final
            ``N_t`` among them.

    Raises:
        ValueError: other nets, nets of different final ``N_t``, a grid without it, or
            no epoch.

    Example:
        >>> from dataclasses import replace
        >>> replace(MODES["quick"], epochs=0)
        Traceback (most recent call last):
        ...
        ValueError: manifestation-sweep needs at least one epoch, got 0.
    """

    grid_steps: tuple[int, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        if [(net.key, net.method) for net in self.nets] != [(m, m) for m in TRAINED]:
            raise ValueError(
                f"manifestation-sweep trains one net per scheme of {TRAINED}, keyed by it; "
                f"got {[(net.key, net.method) for net in self.nets]}."
            )
        steps = sorted({net.final_steps for net in self.nets})
        if len(steps) > 1:
            raise ValueError(f"the nets must end at one N_t = M, got {steps}.")
        if steps[0] not in self.grid_steps:
            raise ValueError(f"`grid_steps` {self.grid_steps} must hold the nets' N_t {steps[0]}.")
        if self.epochs < 1:
            raise ValueError(f"manifestation-sweep needs at least one epoch, got {self.epochs}.")

    @property
    def n_steps(self) -> int:
        """``N_t = M`` of both nets at the end of training."""
        return self.nets[0].final_steps


def _nets(dataset: str | None, steps: int, refine: tuple[int, ...] = ()) -> tuple[common.Net, ...]:
    """``[euler, N_t = M = steps]`` and ``[rk4, ...]``, the RK4 one refined up to
    ``steps`` at the epochs ``refine``."""
    first = steps >> len(refine)
    return (
        common.Net("euler", "Euler-trained", "continuousnet", dataset, "euler", steps),
        common.Net("rk4", "RK4-trained", "continuousnet", dataset, "rk4", first, refine),
    )


MODES = {
    # The digits found (512 + 256 images), N_t = M = 2, evaluated at N_t/2 ... 2 N_t.
    "quick": SweepSettings(
        nets=_nets(None, 2), epochs=3, training=common.QUICK_TRAINING, recal_batches=4,
        grid_steps=(1, 2, 4),
    ),
    # A seeded 2000-image subset of Fashion-MNIST (1000 test images), 3 seeds, N_t = M = 2
    # evaluated at N_t/2 ... 4 N_t; six epochs, the lr dropping for the last. On an idle
    # 2-core CPU an epoch with its test pass takes about 2.5 s (Euler) and 8.5 s (RK4),
    # and the two grids of a net, 2 x 16 manifestations on 1000 test images, about 65 s:
    # about 3.3 min per seed, 10 min in all (the budget is 12). The grids cost the most,
    # so the training set stays small.
    "standard": SweepSettings(
        nets=_nets("fashion-mnist", 2), epochs=6, seeds=3,
        training=common.Training(2000, 1000, False, 64, 0.1, (5,), eval_batch_size=128),
        recal_batches=4, grid_steps=(1, 2, 4, 8),
    ),
    # The paper's CIFAR-10 models of Fig. 9, [Euler, 32] and [RK4, 1 -> 32 refined at
    # epochs 20, 40, 60, 70, 80], trained as the authors' script does, 5 seeds;
    # evaluated at N_t/8 ... 2 N_t.
    "full": SweepSettings(
        nets=_nets("cifar10", 32, (20, 40, 60, 70, 80)), epochs=150, seeds=common.FULL_SEEDS,
        training=common.FULL_TRAINING, recal_batches=20, grid_steps=(4, 8, 16, 32, 64),
    ),
}  # fmt: skip


def measure(setup: Setup[SweepSettings], trained: Trained) -> Measurement:
    """:func:`~odebench.experiments._contnet_common.measure_refined`'s numbers, both
    grids and their ranges."""
    s, restored = setup.settings, common.restore(setup, trained)
    base = common.measure_refined(setup, trained, restored)
    metrics = dict(base.metrics)
    grids = {key: _grid(restored, s, recal=key == "grid") for key in GRIDS}
    for key, grid in grids.items():
        suffix = key.removeprefix("grid")
        metrics[f"range{suffix}"] = _range(grid, s.grid_steps)
        metrics[f"range_refined{suffix}"] = _range(grid, s.grid_steps, s.n_steps)
    setup.log(
        f"[{trained.run.name}-trained] train acc {metrics['train_accuracy']:.3f}, test acc "
        f"{metrics['test_accuracy_recalibrated']:.3f} (recalibrated), grid range "
        f"{metrics['range']:.3f}"
    )
    return Measurement(metrics, {**base.details, **grids})


def _grid(restored: common.Restored, s: SweepSettings, recal: bool) -> list[list[float]]:
    """Test accuracy of every manifestation: rows ``SCHEMES``, columns ``grid_steps``."""
    net = restored.net
    trained = {name: b.detach().clone() for name, b in net.named_buffers()}

    def metric(model: contnet.ContinuousNet) -> float:
        if recal:
            restored.recalibrate(model, s.recal_batches)
        acc = restored.accuracy(model)
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
    and with fixed statistics); RK4-trained flat, Euler-trained degraded. All are
    tested by training: the ranges are those of the trained weights."""
    n = setup.settings.n_steps
    return [
        *(_below(suffix, where, detail) for suffix, where, detail in (
            ("", "over the whole grid", "over the whole grid"),
            ("_refined", f"over N_t >= {n}", f"over N_t >= {n}"),
            ("_fixed_stats", "with fixed BN statistics",
             "over the whole grid with the statistics of the training manifestation"))),
        Claim(
            key="rk4_trained_flat_refined",
            text=f"the RK4-trained model's accuracy is flat over N_t >= {n} (Fig. 9)",
            published=PUBLISHED["rk4_trained"],
            ours=lambda v: v["rk4", "range_refined"],
            holds=lambda v: v["rk4", "range_refined"] <= FLAT_RANGE,
            **POINTS,
            kind="paper",
            detail=f"ours: the range (largest minus smallest test accuracy) of the RK4-trained "
            f"model over the manifestations with N_t >= {n}; holds at most "
            f"{FLAT_RANGE * 100:g} points",
        ),
        Claim(
            key="euler_trained_degrades_refined",
            text=f"the Euler-trained model's accuracy changes over N_t >= {n} (Fig. 9)",
            published=PUBLISHED["euler_trained"],
            ours=lambda v: v["euler", "range_refined"],
            holds=lambda v: v["euler", "range_refined"] >= DEGRADED_RANGE,
            **POINTS,
            kind="paper",
            detail=f"ours: the range of the Euler-trained model's test accuracy over the "
            f"manifestations with N_t >= {n}; holds at {DEGRADED_RANGE * 100:g} points or more",
        ),
    ]  # fmt: skip


def _below(suffix: str, where: str, detail: str) -> Claim:
    """The RK4-trained accuracy range ``range<suffix>`` below the Euler-trained one."""
    metric = "range" + suffix
    return Claim.difference(
        f"rk4_range_below_euler_range{suffix}",
        f"RK4-trained accuracy varies less than Euler-trained, {where} (Fig. 9)",
        "RK4-trained flat, Euler-trained not (Fig. 9); numbers not published",
        ("rk4", metric),
        ("euler", metric),
        below=0.0,
        kind="paper",
        **{**POINTS, "spec": "+.1f"},
        detail=f"ours: the RK4-trained model's accuracy range {detail}, minus the "
        "Euler-trained one's, paired by seed; holds below 0",
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
    nets = {net.key: net for net in s.nets}
    data = data_name(result.details("euler")["dataset"])
    lines = [
        f"Data: {data}, {s.sizes()}. ContinuousNet channels "
        f"16-32-64, piecewise-constant basis; Euler-trained [{nets['euler'].depth()}], "
        f"RK4-trained [{nets['rk4'].depth()}]; {s.epochs} epochs, {s.training.describe()}. "
        f"Batch-norm statistics recalibrated on {s.recal_batches} training batches after "
        "training and per manifestation.",
        *(["", common.QUICK_NOTE] if result.setup.mode == "quick" else []),
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
            f"{cell(r, 'test_accuracy_recalibrated', '.1f', 100, '%')} recalibrated, "
            f"{cell(r, 'test_accuracy', '.1f', 100, '%')} as trained "
            f"(train {cell(r, 'train_accuracy', '.1f', 100, '%')}) |"
        )
    for r in TRAINED:
        lines.append(f"| {r}-trained: range over N_t >= {n} | not published | "
                     f"{_ranges(result, r, 'range_refined')} |")  # fmt: skip
    lines += ["", "## Grids (test accuracy, %, mean ± std over the seeds)", ""]
    for r in TRAINED:
        for key, label in GRIDS.items():
            lines += [
                f"Trained [{nets[r].depth()}], {label}:",
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
        title="Queiruga et al. (2020), Fig. 9: manifestation sweep",
        description="Queiruga et al. (2020) Fig. 9: Euler- and RK4-trained ContinuousNets "
        "evaluated over schemes x step counts (Fashion-MNIST; CIFAR-10 in full mode)",
        runs=common.refine_runs,
        measure=measure,
        claims=claims,
        published=PUBLISHED,
        figures=[Figure("fig9_heatmaps.png", _plot_heatmaps),
                 Figure("accuracy_vs_steps.png", _plot_lines)],
        sections=sections,
    )
)  # fmt: skip

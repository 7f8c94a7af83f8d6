"""``odebench run anode-toy``: Dupont et al. (2019)'s toy experiments, NODE against ANODE.

g(x) in one and two dimensions over several seeds (Figs. 5-8, Prop. 1 of the paper),
and the generalisation test of Fig. 9, where a slice of the plane is left out of the
training set and the models are evaluated on it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from .._io import pyplot, save_png
from ..data import Dataset, annuli
from ..models import build_model, ode_layers
from ..training import Task, load_model, load_splits
from ._anode_common import (
    COLORS,
    LABELS,
    AnodeSettings,
    epoch_numbers,
    panels,
    plot_curves,
    train_config,
)
from ._claims import Claim
from ._registry import fmt
from ._template import Figure, Measurement, Run, Template, register_template

if TYPE_CHECKING:
    from ._metrics import Values
    from ._template import Result, Setup, Trained

MODELS = (("node", "toy-node"), ("anode", "toy-anode"))
"""``(short name, model name)`` of the two models compared."""
DIMS = (1, 2)
"""The dimensions of g(x)."""
PANELS = [(f"{dim}d", f"{dim}-D g(x)") for dim in DIMS]
"""The panels of the loss and NFE figures: the runs of each dimension."""
SLICE = (0.0, math.pi / 5)
"""Angles of the points left out of the training set in the generalisation test."""

# Thresholds that decide whether a claim of the paper held (each claim states its own).
NEAR_ZERO = 0.05  # an MSE below this is "about zero"
FLOOR_MARGIN = 0.9  # a 1-D NODE "sits at the floor": train MSE at least this × the floor
DOUBLES = 1.5  # NFE growth (last epoch over first) at least this: "nearly doubles"
HARDLY = 1.25  # NFE growth at most this: "hardly increases"
LARGE_GAP = 0.1  # held-out-slice MSE minus train MSE at least this: "a large gap"


@dataclass(frozen=True)
class ToySettings(AnodeSettings):
    """The runs of one mode (``epochs`` and the rest also train the slice test).

    Args:
        slice_points: points drawn for the slice test, before the slice is removed.
    """

    slice_points: int


MODES = {
    "quick": ToySettings(
        seeds=2, epochs=6, lr=3e-3, batch_size=64, train_size=960, test_size=300,
        slice_points=1200,
    ),
    # The paper's: Adam 1e-3, batch 64, 3000 training and 1000 test points; 30 epochs
    # as in the authors' config.json (the appendix says 50). A CPU runs it as it is.
    "standard": (PAPER := ToySettings(
        seeds=5, epochs=30, lr=1e-3, batch_size=64, train_size=None, test_size=None,
        slice_points=3000,
    )),
    "full": PAPER,
}  # fmt: skip


def monotone_floor(inputs: Tensor, targets: Tensor) -> float:
    """The least MSE any monotone map ``x -> prediction`` reaches on 1-D g(x) data.

    A 1-D NODE's flow is an increasing map of the line and its readout is affine, so
    its prediction is monotone in ``x``. On g(x) the best nondecreasing fit pools the
    left shell (+1, ``a`` points) with the ball (-1, ``b`` points), costing
    ``4ab / (a + b)`` in squared error, and keeps the right shell at +1; the best
    nonincreasing fit does the same on the right. About 2/3 for the paper's sizes.

    Args:
        inputs: ``(n, 1)`` points.
        targets: ``(n, 1)`` their g(x), -1 or +1.

    Returns:
        The floor, a mean squared error.

    Example:
        >>> x = torch.tensor([[-1.2], [-0.2], [0.3], [1.1]])
        >>> y = torch.tensor([[1.0], [-1.0], [-1.0], [1.0]])
        >>> round(monotone_floor(x, y), 4)
        0.6667
    """
    x, y = inputs[:, 0], targets[:, 0]
    inner = int((y < 0).sum())
    left = int(((y > 0) & (x < 0)).sum())
    right = int(((y > 0) & (x > 0)).sum())

    def pooled(outer: int) -> float:
        return 4.0 * outer * inner / (outer + inner) if outer + inner else 0.0

    return min(pooled(left), pooled(right)) / max(len(y), 1)


def runs(setup: Setup[ToySettings], seed: int) -> list[Run]:
    """Both models on g(x) in each dimension, then both in the slice test."""
    s = setup.settings
    return [
        *(
            Run(f"{dim}d/{name}", config=train_config(s, model, f"annuli-{dim}d", seed))
            for dim in DIMS
            for name, model in MODELS
        ),
        *(Run(f"slice/{name}", task=_slice_task(s, model, seed)) for name, model in MODELS),
    ]


def _slice_data(s: ToySettings, seed: int) -> tuple[Dataset, Tensor]:
    """The slice test's 2-D g(x) points, and the mask of those whose angle is in :data:`SLICE`."""
    data = annuli(s.slice_points, dim=2, generator=torch.Generator().manual_seed(10_007 + seed))
    angle = torch.atan2(data.inputs[:, 1], data.inputs[:, 0])
    return data, (angle >= SLICE[0]) & (angle <= SLICE[1])


def _slice_task(s: ToySettings, model: str, seed: int) -> Task:
    """Train on 2-D g(x) without the slice of :data:`SLICE`: Adam on the MSE, batch
    ``s.batch_size``, ``s.epochs`` epochs, the model's default solver (dopri5 at
    ``rtol = atol = 1e-3``), the model builder of :func:`odebench.training.train`;
    initialisation and order drawn from ``seed``."""
    data, held = _slice_data(s, seed)
    return Task(
        model=functools.partial(build_model, model, in_channels=2, num_classes=1, image_size=0),
        data=(data.inputs[~held], data.targets[~held]),
        loss=lambda net, batch: nn.functional.mse_loss(net(batch[0]), batch[1]),
        optimizer=functools.partial(torch.optim.Adam, lr=s.lr),
        epochs=s.epochs,
        batch_size=s.batch_size,
        seed=seed,
        settings={"run": f"slice/{model}", "seed": seed, **dataclasses.asdict(s)},
    )


def measure(setup: Setup[ToySettings], trained: Trained) -> Measurement:
    """Final MSEs and forward NFE per batch (first and last epoch), the 1-D NODE's
    monotone floor; for the slice test, the MSE on the points kept and removed."""
    name = trained.run.name
    if trained.config is None:
        return _measure_slice(setup, trained)
    extra: dict[str, float | None] = {}
    if name == "1d/node":
        train_set, _ = load_splits(trained.config)
        extra["monotone_floor"] = monotone_floor(train_set.inputs, train_set.targets)
    return epoch_numbers(trained, {"train_mse": "train_loss", "test_mse": "test_loss"}, extra)


def _measure_slice(setup: Setup[ToySettings], trained: Trained) -> Measurement:
    data, held = _slice_data(setup.settings, trained.seed)
    model = trained.load()
    device = next(model.parameters()).device

    def mse_on(mask: Tensor) -> float:
        with torch.no_grad():
            prediction = model(data.inputs[mask].to(device))
            return float(nn.functional.mse_loss(prediction, data.targets[mask].to(device)))

    mse = {"train_mse": mse_on(~held), "slice_mse": mse_on(held)}
    setup.log(
        f"[{trained.run.name} seed {trained.seed}] train MSE {fmt(mse['train_mse'])}, "
        f"held-out slice MSE {fmt(mse['slice_mse'])}"
    )
    counts = {"train_points": int((~held).sum()), "slice_points": int(held.sum())}
    return Measurement(mse, {"angles": list(SLICE), **counts})


def _growth(v: Values, name: str, dim: int) -> float:
    """Forward NFE per batch, last epoch over first."""
    return v[f"{dim}d/{name}", "nfe_last"] / v[f"{dim}d/{name}", "nfe_first"]


CLAIMS = [
    Claim(
        "node_1d_at_floor",
        "Prop. 1: a 1-D NODE cannot fit g(x); its MSE stays at the floor of monotone maps",
        "cannot fit g(x); no MSE published",
        ours=lambda v: v["1d/node", "train_mse"] / v["1d/node", "monotone_floor"],
        holds=lambda v: v["1d/node", "train_mse"] >= FLOOR_MARGIN * v["1d/node", "monotone_floor"],
        spec=".2f", unit="×", kind="check",
        detail="ours: its train MSE over the floor (the least MSE of any monotone map on our "
        f"training set); passes at {FLOOR_MARGIN}× or more. A check of our model, not a "
        "reproduction: a 1-D flow is an increasing map of the line and the readout affine, "
        "so no seed can go below the floor (the margin covers the solver's tolerance and "
        "the per-batch mean of the training loss)",
    ),
    Claim(
        "anode_1d_near_zero",
        "an ANODE fits 1-D g(x), MSE about 0",
        "about 0 (0.0000 in a replication)",
        ours=lambda v: v["1d/anode", "train_mse"],
        holds=lambda v: v["1d/anode", "train_mse"] < NEAR_ZERO,
        spec=".3f", kind="paper",
        detail=f"ours: its train MSE; holds below {NEAR_ZERO}",
    ),
    Claim.difference(
        "anode_1d_below_node",
        "an ANODE fits 1-D g(x) better than a NODE",
        "ANODE ~0, NODE at a floor",
        ("1d/anode", "train_mse"), ("1d/node", "train_mse"),
        below=0.0, spec="+.3f", kind="paper",
        detail="ours: the ANODE's train MSE minus the NODE's, paired per seed; holds below 0",
    ),
    Claim(
        "node_nfe_nearly_doubles",
        'Fig. 8: the NFE of a NODE "nearly doubles" during training',
        '"nearly doubles" (curves only)',
        ours=lambda v: min(_growth(v, "node", dim) for dim in DIMS),
        holds=lambda v: all(_growth(v, "node", dim) >= DOUBLES for dim in DIMS),
        spec=".2f", unit="×", kind="paper",
        detail="ours: forward NFE per batch, last epoch over first, the smaller of 1-D and "
        f"2-D; holds at {DOUBLES}× or more in both",
    ),
    Claim(
        "anode_nfe_hardly_increases",
        'Fig. 8: the NFE of an ANODE "hardly increases" during training',
        '"hardly increases" (curves only)',
        ours=lambda v: max(_growth(v, "anode", dim) for dim in DIMS),
        holds=lambda v: all(_growth(v, "anode", dim) <= HARDLY for dim in DIMS),
        spec=".2f", unit="×", kind="paper",
        detail="ours: forward NFE per batch, last epoch over first, the larger of 1-D and "
        f"2-D; holds at {HARDLY}× or less in both",
    ),
    Claim(
        "node_slice_gap_large",
        "Fig. 9: NODEs show a large generalisation gap on a held-out slice",
        "a large gap (curves only)",
        ours=lambda v: v["slice/node", "slice_mse"] - v["slice/node", "train_mse"],
        holds=lambda v: v["slice/node", "slice_mse"] - v["slice/node", "train_mse"] >= LARGE_GAP,
        spec=".3f", kind="paper",
        detail="ours: the NODE's MSE on the held-out slice minus its train MSE; holds at "
        f"{LARGE_GAP} or more",
    ),
    Claim(
        "anode_slice_near_zero",
        "Fig. 9: ANODEs reach near-zero loss on the held-out slice",
        "near zero (curves only)",
        ours=lambda v: v["slice/anode", "slice_mse"],
        holds=lambda v: v["slice/anode", "slice_mse"] < NEAR_ZERO,
        spec=".3f", kind="paper",
        detail=f"ours: the ANODE's MSE on the held-out slice; holds below {NEAR_ZERO}",
    ),
]  # fmt: skip
"""The paper's claims on g(x) (Figs. 8-9) and the check of Prop. 1's floor."""


def sections(result: Result[ToySettings]) -> str:
    """Our numbers beside the published ones, the monotone floor, the figures."""
    s = result.settings

    def mse(run: str, metric: str) -> list[str]:
        return [result.cell(f"{run}/{name}", metric, ".3f") for name, _ in MODELS]

    def nfe(dim: int) -> list[str]:
        cells = []
        for name, _ in MODELS:
            first, last = (
                result.stat(f"{dim}d/{name}", f"nfe_{k}").mean for k in ("first", "last")
            )
            growth = last / first if first and last is not None else None
            cells.append(f"{fmt(first, '.1f')} → {fmt(last, '.1f')} (×{fmt(growth, '.2f')})")
        return cells

    fig8 = 'NODE "nearly doubles", ANODE "hardly increases" (Fig. 8, numbers not published)'
    rows = [
        ("1-D train MSE", *mse("1d", "train_mse"), "NODE at a floor (1.0001 on the ±1 crossing map "
         "of Prop. 1, replication), ANODE ~0 (0.0000)"),
        ("1-D test MSE", *mse("1d", "test_mse"), "not published"),
        ("2-D train MSE", *mse("2d", "train_mse"), "not published (curves only, Fig. 7)"),
        ("2-D test MSE", *mse("2d", "test_mse"), "not published"),
        ("1-D forward NFE, first → last epoch (growth)", *nfe(1), fig8),
        ("2-D forward NFE, first → last epoch (growth)", *nfe(2), fig8),
        ("slice test: train MSE", *mse("slice", "train_mse"), "not published"),
        ("slice test: held-out slice MSE", *mse("slice", "slice_mse"),
         "NODE large gap, ANODE near zero (Fig. 9, numbers not published)"),
    ]  # fmt: skip
    floor = result.stat("1d/node", "monotone_floor").mean
    train = "3000 (1000 inner + 2000 outer)" if s.train_size is None else s.train_size
    held = result.details("slice/node")["slice_points"]
    return "\n".join(
        [
            "## Ours against the paper",
            "",
            f"Settings: {s.epochs} epochs; Adam, learning rate {s.lr:g}, batch {s.batch_size}; "
            f"dopri5 at rtol = atol = 1e-3; {train} training points; "
            f"{'1000' if s.test_size is None else s.test_size} test points. Paper: Adam 1e-3, "
            "batch 64, 30 (repo) or 50 (appendix) epochs, 1000 inner + 2000 outer points, p = 5.",
            "",
            "| figure | NODE (ours) | ANODE (ours) | published |",
            "|---|---|---|---|",
            *(f"| {' | '.join(row)} |" for row in rows),
            "",
            "The 1-D NODE's prediction is a monotone function of x (its flow is an increasing "
            "map of the line, its readout affine), so its MSE on g(x) cannot go below "
            f"**{fmt(floor, '.3f')}**, the best monotone fit of our training sets (2/3 for "
            "equal thirds). The replication's 1.0001 is the floor of a different map, Prop. "
            "1's x = ±1 -> ∓1; the paper gives no number for g(x).",
            "",
            "Quick runs (`--quick`) train for a few epochs at a higher learning rate: expect the",
            "ANODE's MSE above zero there and the NFE growth to differ from a standard run's.",
            "",
            "## Figures",
            "",
            "Loss per epoch (mean over seeds, band from min to max; dashed: test):",
            "",
            "![loss curves](loss.png)",
            "",
            "Forward NFE per batch during training (Fig. 8):",
            "",
            "![NFE per epoch](nfe.png)",
            "",
            "1-D: the learned map against g(x), and the state over depth t for inputs in "
            "[-1.5, 1.5] (NODE trajectories cannot cross; the ANODE's first coordinate can, "
            "since they separate in the augmented dimensions):",
            "",
            "![1-D flows](flows_1d.png)",
            "",
            "2-D: the test points and their features at t = 1 (first two coordinates), "
            "coloured by g(x):",
            "",
            "![2-D features](features_2d.png)",
            "",
            f"Slice test (Fig. 9): points with angle in [0, π/5] ({held} of {s.slice_points}) "
            "removed from training and used for evaluation:",
            "",
            "![slice test](slice.png)",
            "",
            "Every training run (configuration, metrics per epoch, curves, checkpoint) is in "
            "`<dim>d/<model>/seed<N>/`.",
        ]
    )


def _plot_flows_1d(result: Result[ToySettings], path: Path) -> None:
    """1-D: the learned map against g(x), and the state over depth for a few inputs."""
    seed = result.setup.seeds[0]
    fig, axes = pyplot().subplots(1, 3, figsize=(13, 3.6))
    x = torch.linspace(-1.5, 1.5, 300)[:, None]
    g = torch.where(x.abs() <= 0.5, -1.0, torch.where(x.abs() >= 1.0, 1.0, math.nan))
    axes[0].plot(x[:, 0], g[:, 0], color="0.5", lw=3, label="g(x)")
    starts = torch.tensor([-1.4, -1.2, -1.05, -0.45, -0.25, 0.0, 0.25, 0.45, 1.05, 1.2, 1.4])
    ts = torch.linspace(0.0, 1.0, 41).tolist()
    for ax, (name, _) in zip(axes[1:], MODELS, strict=True):
        model, _config = load_model(result.setup.run_dir(f"1d/{name}", seed), "cpu")
        with torch.no_grad():
            axes[0].plot(x[:, 0], model(x)[:, 0], color=COLORS[name], label=LABELS[name])
        z = _trajectory(model, starts[:, None], ts)
        for i, start in enumerate(starts.tolist()):
            ax.plot(ts, z[:, i, 0], color="tab:blue" if abs(start) <= 0.5 else "tab:red", lw=1.2)
        ax.set(
            xlabel="depth t",
            ylabel="h(t), first coordinate",
            title=f"{LABELS[name]} trajectories (blue: g = -1)",
        )
        ax.grid(alpha=0.3)
    axes[0].set(xlabel="x", ylabel="prediction", title=f"learned map, seed {seed}")
    axes[0].legend(fontsize=8)
    axes[0].grid(alpha=0.3)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


def _plot_features_2d(result: Result[ToySettings], path: Path) -> None:
    """2-D: the test inputs and the features at t = 1 of NODE and ANODE, by target."""
    seed = result.setup.seeds[0]
    _model, config = load_model(result.setup.run_dir("2d/node", seed), "cpu")
    _, test_set = load_splits(config)
    x, y = test_set.inputs[:600], test_set.targets[:600, 0]
    fig, axes = pyplot().subplots(1, 3, figsize=(13, 4))
    axes[0].scatter(x[:, 0], x[:, 1], c=y, cmap="coolwarm", s=5)
    axes[0].set(title="test inputs (blue: g = -1)", xlabel="x1", ylabel="x2")
    for ax, (name, _) in zip(axes[1:], MODELS, strict=True):
        model, _c = load_model(result.setup.run_dir(f"2d/{name}", seed), "cpu")
        z = _trajectory(model, x, [0.0, 1.0])[-1]
        ax.scatter(z[:, 0], z[:, 1], c=y, cmap="coolwarm", s=5)
        ax.set(title=f"{LABELS[name]} features at t = 1", xlabel="h1", ylabel="h2")
    for ax in axes:
        ax.set_aspect("equal", adjustable="datalim")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


def _plot_slice(result: Result[ToySettings], path: Path) -> None:
    """The slice left out of training, and train against held-out MSE per model."""
    data, held = _slice_data(result.settings, result.setup.seeds[0])
    fig, axes = panels(2, height=4)
    kept = data.inputs[~held]
    axes[0].scatter(kept[:, 0], kept[:, 1], c=data.targets[~held, 0], cmap="coolwarm", s=4)
    axes[0].scatter(
        data.inputs[held, 0], data.inputs[held, 1], c="k", s=6, label="held out: angle in [0, π/5]"
    )
    axes[0].set(title="training points and the held-out slice", xlabel="x1", ylabel="x2")
    axes[0].set_aspect("equal")
    axes[0].legend(fontsize=8, loc="lower left")
    pos = torch.arange(len(MODELS), dtype=torch.float64)
    for offset, key, label in ((-0.2, "train_mse", "train"), (0.2, "slice_mse", "held-out slice")):
        stats = [result.stat(f"slice/{name}", key) for name, _ in MODELS]
        means, stds = [st.mean or 0.0 for st in stats], [st.std or 0.0 for st in stats]
        axes[1].bar(pos + offset, means, width=0.4, yerr=stds, label=label)
    axes[1].set_xticks(pos.tolist(), [LABELS[name] for name, _ in MODELS])
    axes[1].set(ylabel="MSE", title="train against held-out slice (Fig. 9)")
    axes[1].legend(fontsize=8)
    axes[1].grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save_png(path, fig, dpi=90)


def _trajectory(model: nn.Module, x: Tensor, ts: list[float]) -> Tensor:
    """The ODE state of ``model`` at depths ``ts`` for inputs ``x``: ``(len(ts), N, d + p)``."""
    layer = ode_layers(model)[0]
    saved = layer.ts
    layer.ts = ts
    try:
        with torch.no_grad():
            z: Tensor = layer(model.get_submodule("augment")(x))
    finally:
        layer.ts = saved
    return z


TEMPLATE = register_template(
    Template(
        name="anode-toy",
        description="Dupont et al.'s toy experiments: NODE against ANODE on g(x) in 1-D and "
        "2-D over seeds (loss, NFE, flows, features) and the held-out-slice generalisation test",
        title="NODE against ANODE on Dupont et al.'s toy problems",
        modes=MODES,
        one_thread_modes=tuple(MODES),  # the models are tiny
        runs=runs,
        measure=measure,
        claims=lambda setup: CLAIMS,
        sections=sections,
        figures=[
            Figure(
                "loss.png",
                functools.partial(
                    plot_curves, PANELS, "train_loss", "MSE", dashed="test_loss", log=True
                ),
            ),
            Figure(
                "nfe.png",
                functools.partial(plot_curves, PANELS, "nfe_forward", "forward NFE per batch"),
            ),
            Figure("flows_1d.png", _plot_flows_1d),
            Figure("features_2d.png", _plot_features_2d),
            Figure("slice.png", _plot_slice),
        ],
    )
)

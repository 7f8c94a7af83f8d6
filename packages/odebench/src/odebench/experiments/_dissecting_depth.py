"""``odebench run dissecting-depth``: Massaroli et al. (2020)'s variants of the vector field.

Five Neural ODEs without augmentation, over several seeds, on two toy tasks of
"Dissecting Neural ODEs": the 1-D reflection ``x -> -x`` (Sec. 5, trained with an L1
loss on the ODE's output) and the 2-D concentric annuli (Sec. 5.3, the inner ball
against the outer shell, an MSE on the label through a linear readout). The models:
a vanilla (depth-invariant) field, two depth-varying ones (Galerkin, in a Fourier
basis, and stacked, piecewise constant in depth; Sec. 3), a data-controlled field
(Sec. 5.1) and an adaptive-depth model (Sec. 5.2). Each is trained full-batch
(:func:`_task`), so an "epoch" (``--epochs``) is one Adam step.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import odecore
import torch
from odelayers import (
    AdaptiveDepthNODE,
    DataControl,
    DepthConcat,
    DepthSequential,
    GalerkinLinear,
    NeuralODE,
    basis,
)
from torch import Tensor, nn

from .._io import CHECKPOINT, pyplot, save_png
from ..data import annuli, reflection
from ..training import Task
from ._claims import Claim, ClaimKind
from ._template import Figure, Measurement, Run, Settings, Template, register_template

if TYPE_CHECKING:
    from ._metrics import Values
    from ._template import Result, Setup, Trained

LABELS = {
    "vanilla": "vanilla NODE",
    "galerkin": "Galerkin (Fourier)",
    "stacked": "stacked (piecewise const.)",
    "data_control": "data-controlled",
    "adaptive_depth": "adaptive depth",
}
"""The five vector fields compared, in the order of the tables and figures, and their names."""
MODELS = tuple(LABELS)
COLORS = dict(zip(MODELS, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")))
TASKS = ("reflection", "annuli")
"""The 1-D reflection and the 2-D concentric annuli."""
FOURIER_MODES = 2
"""Modes of the Galerkin basis: ``2 * 2 + 1 = 5`` functions of depth."""
PIECES = 3
"""Pieces of the stacked model's piecewise-constant basis."""

# Thresholds that decide whether a claim of the paper held (stated in the report).
AT_BOUND = 0.95
"""A 1-D flow "stays at the bound" when its L1 loss is at least this times the bound."""
WELL_BELOW = 0.2
"""A model "learns the reflection" when its L1 loss is below this times the bound."""
FITS = 0.95
"""A model "solves the annuli" when its accuracy on held-out points is at least this."""

PUBLISHED = {
    "reflection": {
        "vanilla": "fails (figure; no number)",
        "galerkin": "fails (figure; no number)",
        "stacked": "not published",
        "data_control": "learns it (figure; no number)",
        "adaptive_depth": "learns it, proof of concept (figure; no number)",
    },
    "annuli": {
        "vanilla": "not published (decision boundary figure)",
        "galerkin": "solves it (figure; no number)",
        "stacked": "not published",
        "data_control": "solves it (figure; no number)",
        "adaptive_depth": "not published",
    },
}
"""What the paper reports per task and model: figures only, no numbers."""


@dataclass(frozen=True)
class DepthSettings(Settings):
    """The sizes of one mode.

    Args:
        reflection_points: points uniform in ``[-1, 1]`` for the reflection.
        reflection_iterations: full-batch Adam steps on the reflection.
        reflection_lr: Adam's learning rate on the reflection.
        annuli_points: points of the 2-D annuli (a third inside, two thirds outside).
        annuli_iterations: full-batch Adam steps on the annuli.
        annuli_lr: Adam's learning rate on the annuli.
        tol: ``rtol = atol`` of the dopri5 solves.
        grid: points per side of the grid of the decision-boundary figure.
    """

    reflection_points: int
    reflection_iterations: int
    reflection_lr: float
    annuli_points: int
    annuli_iterations: int
    annuli_lr: float
    tol: float
    grid: int


MODES = {
    "quick": DepthSettings(
        seeds=2, reflection_points=64, reflection_iterations=150, reflection_lr=1e-2,
        annuli_points=210, annuli_iterations=100, annuli_lr=1e-2, tol=1e-3, grid=60,
    ),
    # The authors' notebooks' sizes and iterations; a CPU runs them as they are.
    "standard": (PAPER := DepthSettings(
        seeds=5, reflection_points=100, reflection_iterations=1000, reflection_lr=1e-2,
        annuli_points=1024, annuli_iterations=1024, annuli_lr=1e-3, tol=1e-4, grid=120,
    )),
    "full": PAPER,
}  # fmt: skip


def l1_median_bound(targets: Tensor) -> float:
    """The least L1 loss of any nondecreasing map fitted to the reflection's targets.

    A 1-D Neural ODE without data control maps the line increasingly (its trajectories
    cannot cross). On ``y = -x`` an increasing fit pays at least as much as the
    constant at the median of ``y``: for every pair ``x_i < x_j`` the fit's values are
    ordered the wrong way round, so the best it can do is to merge them.

    Args:
        targets: ``(n, 1)`` the targets ``-x``.

    Returns:
        ``mean |y - median(y)|``; about 0.5 for points uniform in ``[-1, 1]``.

    Example:
        >>> round(l1_median_bound(-torch.linspace(-1.0, 1.0, 5)[:, None]), 4)
        0.6
    """
    y = targets.reshape(-1).to(torch.float64)
    return float((y - y.median()).abs().mean())


def build(kind: str, dim: int, tol: float) -> nn.Module:
    """The ODE layer of ``kind`` (one of :data:`MODELS`) on states of size ``dim``.

    Every field has one hidden layer with tanh: 32 units, or 16 for the depth-varying
    ones (whose parameters are multiplied by the basis size). The solves use dopri5
    at ``rtol = atol = tol`` and backpropagate through the solver.

    Raises:
        ValueError: an unknown ``kind``.

    Example:
        >>> layer = build("data_control", 1, 1e-3)
        >>> layer(torch.zeros(4, 1)).shape
        torch.Size([4, 1])
    """
    spec = odecore.OdeSpec.from_method("dopri5", rtol=tol, atol=tol, gradient="backprop")
    layers: list[nn.Module]
    if kind == "vanilla":
        layers = [nn.Linear(dim, 32), nn.Tanh(), nn.Linear(32, dim)]
    elif kind in ("galerkin", "stacked"):
        b = (
            basis.Fourier(modes=FOURIER_MODES)
            if kind == "galerkin"
            else basis.PiecewiseConstant(pieces=PIECES)
        )
        layers = [GalerkinLinear(dim, 16, basis=b), nn.Tanh(), GalerkinLinear(16, dim, basis=b)]
    elif kind == "data_control":
        layers = [DataControl(), nn.Linear(2 * dim, 32), nn.Tanh(), nn.Linear(32, dim)]
    elif kind == "adaptive_depth":
        layers = [DepthConcat(), nn.Linear(dim + 1, 32), nn.Tanh(), nn.Linear(32, dim)]
        horizon = nn.Sequential(nn.Linear(dim, 16), nn.Tanh(), nn.Linear(16, 1))
        return AdaptiveDepthNODE(DepthSequential(*layers), horizon, spec=spec)
    else:
        raise ValueError(f"Unknown model {kind!r}; known: {', '.join(MODELS)}.")
    return NeuralODE(DepthSequential(*layers), spec=spec)


TEST_SEED = 1_000_003
"""Offset of the held-out points' seed: a fresh draw of the same size as the training set."""


def _data(task: str, s: DepthSettings, seed: int, test: bool = False) -> tuple[Tensor, Tensor]:
    """The training points of ``task`` for ``seed``, or with ``test`` a held-out draw."""
    gen = torch.Generator().manual_seed(20_011 + seed + (TEST_SEED if test else 0))
    if task == "reflection":
        ds = reflection(s.reflection_points, dim=1, generator=gen)
    else:
        ds = annuli(s.annuli_points, dim=2, generator=gen)
    return ds.inputs, ds.targets


def _model(task: str, kind: str, tol: float) -> nn.Module:
    """Reflection: the ODE layer alone; annuli: the ODE layer then a linear readout."""
    if task == "reflection":
        return build(kind, 1, tol)
    return nn.Sequential(build(kind, 2, tol), nn.Linear(2, 1))


def _ode(model: nn.Module) -> NeuralODE | AdaptiveDepthNODE:
    layer = model[0] if isinstance(model, nn.Sequential) else model
    assert isinstance(layer, (NeuralODE, AdaptiveDepthNODE))  # as _model builds it
    return layer


def _loss(task: str, prediction: Tensor, targets: Tensor) -> Tensor:
    if task == "reflection":
        return (prediction - targets).abs().mean()
    return nn.functional.mse_loss(prediction, targets)


def runs(setup: Setup[DepthSettings], seed: int) -> list[Run]:
    """Every model on both tasks (``"<task>/<model>"``), each a :func:`_task`."""
    return [Run(f"{t}/{kind}", task=_task(setup.settings, t, kind, seed))
            for t in TASKS for kind in MODELS]  # fmt: skip


def _task(s: DepthSettings, name: str, kind: str, seed: int) -> Task:
    """Full-batch Adam on the task ``name``, one step an epoch; ``seed`` seeds the data
    and the initialisation. One row per step: ``step``, ``loss``, ``epoch_seconds``."""
    x, y = _data(name, s, seed)
    lr = s.reflection_lr if name == "reflection" else s.annuli_lr
    return Task(
        model=functools.partial(_model, name, kind, s.tol), data=(x, y),
        loss=lambda model, batch: _loss(name, model(batch[0]), batch[1]),
        optimizer=functools.partial(torch.optim.Adam, lr=lr),
        epochs=s.reflection_iterations if name == "reflection" else s.annuli_iterations,
        batch_size=len(x), seed=seed, order=lambda epoch, generator: torch.arange(len(x)),
        row=lambda e: {"step": e.index + 1.0, "loss": e.losses[0], "epoch_seconds": e.seconds},
        after_epoch=lambda rows: None,  # a line per step would drown the log
        settings={"run": f"{name}/{kind}", "seed": seed, **dataclasses.asdict(s)},
    )  # fmt: skip


def measure(setup: Setup[DepthSettings], trained: Trained) -> Measurement:
    """On the training points and on held-out ones (``test_`` names): the full-batch
    loss, the annuli accuracy, the reflection's L1-median bound; the forward NFE of the
    training evaluation."""
    s, task = setup.settings, trained.run.name.split("/")[0]
    model = trained.load()
    device = next(model.parameters()).device
    metrics = {"seconds": trained.seconds}
    for prefix, test in (("test_", True), ("", False)):  # NFE: of the training points
        x, y = (v.to(device) for v in _data(task, s, trained.seed, test))
        with torch.no_grad():
            prediction = model(x)
        metrics[f"{prefix}loss"] = float(_loss(task, prediction, y))
        if task == "reflection":
            metrics[f"{prefix}l1_bound"] = l1_median_bound(y)
        else:
            metrics[f"{prefix}accuracy"] = float((prediction.sign() == y).float().mean())
    metrics["nfe"] = float(_ode(model).nfe)
    numbers = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items())
    setup.log(f"[{trained.run.name} seed {trained.seed}] {numbers}")
    return Measurement(metrics)


_BOUND = (
    "A check of our models, not a reproduction: a 1-D flow, however its field varies with "
    "depth, is an increasing map of the line, and no increasing map goes below the bound, "
    "so this passes on every seed whatever the training"
)

_CLAIMS: dict[str, tuple[str, str, float, float, ClaimKind]] = {
    "vanilla_reflection_at_bound": ("Sec. 5: a vanilla NODE cannot learn the 1-D reflection",
                                    "reflection/vanilla", AT_BOUND, math.inf, "check"),
    "galerkin_reflection_at_bound": ("Sec. 5: a Galerkin (depth-varying) NODE cannot learn "
                                     "the 1-D reflection either", "reflection/galerkin",
                                     AT_BOUND, math.inf, "check"),
    "stacked_reflection_at_bound": ("a stacked NODE cannot learn the 1-D reflection either "
                                    "(any 1-D flow is increasing)", "reflection/stacked",
                                    AT_BOUND, math.inf, "check"),
    "data_control_reflects": ("Sec. 5.1: a data-controlled NODE learns the reflection",
                              "reflection/data_control", -math.inf, WELL_BELOW, "paper"),
    "adaptive_depth_reflects": ("Sec. 5.2: an adaptive-depth NODE learns the reflection "
                                "(proof of concept)",
                                "reflection/adaptive_depth", -math.inf, WELL_BELOW, "paper"),
    "galerkin_annuli_fits": ("Sec. 4 / 5.3: depth variance alone solves the 2-D annuli, "
                             "without augmentation", "annuli/galerkin", FITS, math.inf, "paper"),
    "data_control_annuli_fits": ("Sec. 5.3: a data-controlled NODE solves the 2-D annuli",
                                 "annuli/data_control", FITS, math.inf, "paper"),
}  # fmt: skip
"""``{claim: (what the paper says, run, low, high, kind)}``: the claim holds when ``low <=
ours < high`` on the means, ours on held-out points: the reflection's L1 loss over their
L1-median bound, or the annuli's accuracy."""


def _test(run: str, low: float, high: float, kind: ClaimKind) -> str:
    verb = "holds" if kind == "paper" else "passes"
    if run.startswith("annuli"):
        return f"ours: the held-out accuracy; {verb} at {low} or more"
    if low > 0:
        return f"ours: the held-out L1 loss over their L1-median bound; {verb} at {low}× or more"
    return f"ours: the held-out L1 loss over their L1-median bound; {verb} below {high}×"


CLAIMS = {key: (c[0], _test(*c[1:])) for key, c in _CLAIMS.items()}
"""``{claim: (what the paper says, what ours is and the test applied to it)}``."""


def _claim(key: str) -> Claim:
    said, run, low, high, kind = _CLAIMS[key]
    task, model = run.split("/")

    def ours(v: Values) -> float:
        if task == "reflection":
            return v[run, "test_loss"] / v[run, "test_l1_bound"]
        return v[run, "test_accuracy"]

    return Claim(
        key=key,
        text=said,
        published=PUBLISHED[task][model],
        ours=ours,
        holds=lambda v: low <= ours(v) < high,
        spec=".3f",
        kind=kind,
        detail=CLAIMS[key][1] + (f". {_BOUND}" if kind == "check" else ""),
    )


def sections(result: Result[DepthSettings]) -> str:
    """The settings, the table of both tasks beside the paper's, the figures."""
    s = result.settings
    bound = result.stat("reflection/vanilla", "l1_bound").mean or math.nan
    lines = [
        f"Settings: full-batch Adam; dopri5 at rtol = atol = {s.tol:g}, backpropagation "
        f"through the solver. Reflection: {s.reflection_points} points uniform in [-1, 1], "
        f"{s.reflection_iterations} steps at learning rate {s.reflection_lr:g}, L1 loss on "
        f"z(1). Annuli: {s.annuli_points} points in 2-D (radius <= 0.5: -1, 1 <= radius <= "
        f"1.5: +1), {s.annuli_iterations} steps at learning rate {s.annuli_lr:g}, MSE through "
        "a linear readout. Paper (annuli, official code): AdamW 1e-3, weight decay 1e-6, "
        "1024-2000 steps on batches of 1024, dopri5 at 1e-5, 0/1 labels; reflection: equally "
        "spaced points in [-1, 1], L1 loss, the rest unpublished.",
        "",
        "Models (no augmentation): vanilla, a depth-invariant 1-hidden-layer tanh field "
        f"(32 units); Galerkin, its weights in a Fourier basis of {2 * FOURIER_MODES + 1} "
        f"functions of depth (16 units); stacked, piecewise constant on {PIECES} pieces "
        "(16 units); data-controlled, the input concatenated to the state at every depth "
        "(32 units); adaptive depth, a depth-concat field integrated up to a depth T(x) "
        "given by a small network.",
        "",
        "## Ours against the paper",
        "",
        f"Reflection: the L1-median bound of our samples is **{bound:.3f}** (mean over seeds); "
        "no increasing map of the line does better, so a 1-D flow without data control "
        "cannot go below it.",
        "",
        "| model | reflection L1, train / held-out | NFE | published | annuli MSE, train / "
        "held-out | annuli accuracy, train / held-out | NFE | published |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind in MODELS:
        ref, ann = f"reflection/{kind}", f"annuli/{kind}"

        def both(run: str, metric: str) -> str:
            return (
                f"{result.cell(run, metric, '.3f')} / {result.cell(run, 'test_' + metric, '.3f')}"
            )

        cells = [both(ref, "loss"), result.cell(ref, "nfe", ".0f"), PUBLISHED["reflection"][kind],
                 both(ann, "loss"), both(ann, "accuracy"), result.cell(ann, "nfe", ".0f"),
                 PUBLISHED["annuli"][kind]]  # fmt: skip
        lines.append(" | ".join(["", LABELS[kind], *cells, ""]).strip())
    lines += [
        "",
        "Losses: the final full-batch loss on the training points, then on as many "
        "held-out points drawn afresh (the claims are judged on these); NFE: the forward "
        "evaluations on the training points; mean ± std over the seeds.",
        "",
        "Quick runs (`--quick`) take few steps at a high learning rate on small samples: "
        "the annuli accuracies in particular are lower than a standard run's.",
        "",
        "## Figures",
        "",
        "Loss per step (mean over seeds, band from min to max):",
        "",
        "![loss curves](loss.png)",
        "",
        "Reflection: the state over depth for inputs in [-1, 1] (red: x < 0, blue: x > 0; "
        "the adaptive-depth model's curves end at their own depth T(x)), and the learned "
        "map against -x. The vanilla, Galerkin and stacked trajectories cannot cross; the "
        "data-controlled ones do:",
        "",
        "![reflection trajectories](reflection.png)",
        "",
        "Annuli: the prediction on a grid (colour, the black line is the decision "
        "boundary, prediction 0) and the training points:",
        "",
        "![annuli decision boundaries](annuli.png)",
    ]
    return "\n".join(lines)


def _load(result: Result[DepthSettings], task: str, kind: str) -> nn.Module:
    """The model of the first seed, from its run's checkpoint."""
    setup = result.setup
    with torch.random.fork_rng(devices=[]):
        model = _model(task, kind, result.settings.tol)
    weights = setup.run_dir(f"{task}/{kind}", setup.seeds[0]) / CHECKPOINT
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True)["model"])
    return model


def _plot_curves(result: Result[DepthSettings], path: Path) -> None:
    """Loss per step, one panel per task."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(TASKS), figsize=(11, 3.8))
    for ax, task in zip(axes, TASKS, strict=True):
        for kind in MODELS:
            dirs = [result.setup.run_dir(f"{task}/{kind}", seed) for seed in result.setup.seeds]
            rows = [json.loads((d / "metrics.json").read_text(encoding="utf-8")) for d in dirs]
            curves = torch.tensor([[r["loss"] for r in run] for run in rows], dtype=torch.float64)
            steps = list(range(1, curves.shape[1] + 1))
            ax.plot(steps, curves.mean(0), color=COLORS[kind], label=LABELS[kind])
            ax.fill_between(
                steps, curves.min(0).values, curves.max(0).values, color=COLORS[kind], alpha=0.2
            )
        ylabel = "L1 loss" if task == "reflection" else "MSE"
        ax.set(xlabel="Adam step", ylabel=ylabel, title=task, yscale="log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(path, fig, dpi=80)


def _trajectory(layer: nn.Module, x: Tensor, steps: int) -> tuple[Tensor, Tensor]:
    """States ``(steps, N)`` of a 1-D ODE layer at ``steps`` depths, and those depths."""
    node = layer.node if isinstance(layer, AdaptiveDepthNODE) else layer
    assert isinstance(node, NeuralODE)
    s = torch.linspace(0.0, 1.0, steps)
    saved = node.ts
    node.ts = s.tolist()
    try:
        with torch.no_grad():
            z: Tensor = layer(x)[..., 0]
    finally:
        node.ts = saved
    if isinstance(layer, AdaptiveDepthNODE):
        assert layer.depth is not None
        depths = s[:, None] * layer.depth.detach()[None, :]
    else:
        depths = s[:, None].expand_as(z)
    return z, depths


def _plot_reflection(result: Result[DepthSettings], path: Path) -> None:
    """State over depth per model for inputs in [-1, 1], and the learned maps."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(MODELS) + 1, figsize=(19, 3.5))
    x = torch.linspace(-1.0, 1.0, 13)[:, None]
    grid = torch.linspace(-1.0, 1.0, 200)[:, None]
    axes[-1].plot(grid[:, 0], -grid[:, 0], color="0.5", lw=3, label="-x")
    for ax, kind in zip(axes, MODELS, strict=False):
        layer = _load(result, "reflection", kind)
        z, depths = _trajectory(layer, x, 41)
        for i in range(len(x)):
            color = "tab:red" if float(x[i, 0]) < 0 else "tab:blue"
            ax.plot(depths[:, i], z[:, i], color=color, lw=1.1)
        ax.set(xlabel="depth t", ylabel="z(t)", title=LABELS[kind])
        ax.grid(alpha=0.3)
        with torch.no_grad():
            axes[-1].plot(grid[:, 0], layer(grid)[:, 0], color=COLORS[kind], label=LABELS[kind])
    axes[-1].set(xlabel="x", ylabel="z(1)", title=f"learned maps, seed {result.setup.seeds[0]}")
    axes[-1].legend(fontsize=7)
    axes[-1].grid(alpha=0.3)
    fig.tight_layout()
    save_png(path, fig, dpi=80)


def _plot_annuli(result: Result[DepthSettings], path: Path) -> None:
    """The prediction of each model on a grid, its zero level and the training points."""
    plt = pyplot()
    s = result.settings
    x, y = _data("annuli", s, result.setup.seeds[0])
    g = torch.linspace(-2.0, 2.0, s.grid)
    gx, gy = torch.meshgrid(g, g, indexing="xy")
    points = torch.stack([gx.reshape(-1), gy.reshape(-1)], dim=1)
    fig, axes = plt.subplots(1, len(MODELS), figsize=(19, 3.9))
    for ax, kind in zip(axes, MODELS, strict=True):
        with torch.no_grad():
            pred = _load(result, "annuli", kind)(points).reshape(s.grid, s.grid)
        ax.contourf(gx, gy, pred.clamp(-1.5, 1.5), levels=20, cmap="coolwarm", alpha=0.8)
        ax.contour(gx, gy, pred, levels=[0.0], colors="k", linewidths=1.5)
        ax.scatter(x[:, 0], x[:, 1], c=y[:, 0], cmap="coolwarm", s=4, edgecolors="k", lw=0.2)
        ax.set(title=LABELS[kind], xlabel="x1", ylabel="x2")
        ax.set_aspect("equal")
    fig.tight_layout()
    save_png(path, fig, dpi=80)


TEMPLATE = register_template(
    Template(
        name="dissecting-depth",
        title="Dissecting Neural ODEs: depth variance, data control, adaptive depth",
        description="Massaroli et al.'s vector fields (vanilla, Galerkin, stacked, "
        "data-controlled, adaptive depth) on the 1-D reflection and the 2-D concentric "
        "annuli over seeds",
        modes=MODES,
        runs=runs,
        measure=measure,
        claims=lambda setup: [_claim(key) for key in CLAIMS],
        sections=sections,
        figures=[
            Figure("loss.png", _plot_curves),
            Figure("reflection.png", _plot_reflection),
            Figure("annuli.png", _plot_annuli),
        ],
        epoch_fields=("reflection_iterations", "annuli_iterations"),
        data=lambda setup: (
            f"reflection ({setup.settings.reflection_points} train / as many held-out), "
            f"annuli-2d ({setup.settings.annuli_points} train / as many held-out)"
        ),
        one_thread_modes=tuple(MODES),  # the models are tiny
        published=PUBLISHED,
    )
)

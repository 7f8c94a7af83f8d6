"""``odebench run dissecting-depth``: Massaroli et al. (2020)'s variants of the vector field
on the 1-D reflection and the 2-D concentric annuli; docs/odebench/experiments/dissecting-depth.md
says what it trains and why.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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

from .._figures import Lines, Point, Style, seed_lines
from .._io import pyplot, save_png
from .._metrics import Metric, Values
from .._tables import Col, Row, Table
from ..data import annuli, reflection
from ..models import ode_layers
from ..training import Task
from ._claims import Claim
from ._result import Result
from ._run_files import first_model, seed_rows, states_at
from ._runner import register_template
from ._template import Figure, Measurement, Plot, Run, Settings, Setup, Template, Trained

LABELS = {"vanilla": "vanilla NODE", "galerkin": "Galerkin (Fourier)",
          "stacked": "stacked (piecewise const.)", "data_control": "data-controlled",
          "adaptive_depth": "adaptive depth"}  # fmt: skip
"""The five vector fields compared, in the order of the tables and figures, and their names."""
MODELS = tuple(LABELS)
STYLES = {label: Style("-") for label in LABELS.values()}  # lines in the colours' order
TASKS = ("reflection", "annuli")  # the 1-D reflection and the 2-D concentric annuli
BASES = {"galerkin": basis.Fourier(modes=2), "stacked": basis.PiecewiseConstant(pieces=3)}
"""The depth-varying fields' bases: 5 Fourier functions of depth, and 3 constant pieces."""

TRAIN = {name: Metric(name, spec=".3f") for name in ("loss", "accuracy", "l1_bound")}
"""On the training points: the final loss, the annuli's accuracy, the reflection's bound."""
HELD_OUT = {name: Metric(f"test_{name}", spec=".3f") for name in TRAIN}
"""The same on as many held-out points, drawn afresh: what the claims are judged on."""
NFE = Metric("nfe", spec=".0f")  # the forward evaluations on the training points
SECONDS = Metric("seconds")

PUBLISHED = {
    "reflection": {"vanilla": "fails (figure; no number)", "galerkin": "fails (figure; no number)",
                   "stacked": "not published", "data_control": "learns it (figure; no number)",
                   "adaptive_depth": "learns it, proof of concept (figure; no number)"},
    "annuli": {"vanilla": "not published (decision boundary figure)",
               "galerkin": "solves it (figure; no number)", "stacked": "not published",
               "data_control": "solves it (figure; no number)", "adaptive_depth": "not published"},
}  # fmt: skip
"""What the paper reports per task and model: figures only, no numbers."""


@dataclass(frozen=True)
class DepthSettings(Settings):
    """Of each task, the points, full-batch Adam steps and learning rate; dopri5's
    ``rtol = atol = tol``; the points per side of the decision-boundary figure's ``grid``."""

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
    """The least L1 loss of any nondecreasing map (a 1-D flow) fitted to the reflection's
    ``(n, 1)`` targets: ``mean |y - median(y)|``."""
    y = targets.reshape(-1).to(torch.float64)
    return float((y - y.median()).abs().mean())


def build(kind: str, dim: int, tol: float) -> nn.Module:
    """The ODE layer of ``kind`` (one of :data:`MODELS`, the docs page's table of models) on
    states of size ``dim``, dopri5 at ``rtol = atol = tol``, backprop through it.

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
    elif kind in BASES:
        b = BASES[kind]
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


TEST_SEED = 1_000_003  # offset of the held-out points' seed: a fresh draw as large


def _data(task: str, s: DepthSettings, seed: int, test: bool = False) -> tuple[Tensor, Tensor]:
    """The training points of ``task`` for ``seed``, or with ``test`` a held-out draw."""
    gen = torch.Generator().manual_seed(20_011 + seed + (TEST_SEED if test else 0))
    draw = reflection if task == "reflection" else functools.partial(annuli, dim=2)
    ds = draw(getattr(s, f"{task}_points"), generator=gen)
    return ds.inputs, ds.targets


def _model(task: str, kind: str, tol: float) -> nn.Module:
    """Reflection: the ODE layer alone; annuli: the ODE layer then a linear readout."""
    if task == "reflection":
        return build(kind, 1, tol)
    return nn.Sequential(build(kind, 2, tol), nn.Linear(2, 1))


LOSSES = {"reflection": nn.functional.l1_loss, "annuli": nn.functional.mse_loss}


def runs(setup: Setup[DepthSettings], seed: int) -> list[Run]:
    """Every model on both tasks (``"<task>/<model>"``), each a :func:`_task`."""
    return [Run(f"{t}/{kind}", task=_task(setup.settings, t, kind, seed))
            for t in TASKS for kind in MODELS]  # fmt: skip


def _task(s: DepthSettings, name: str, kind: str, seed: int) -> Task:
    """Full-batch Adam on the task ``name``, one step an epoch; ``seed`` seeds the data
    and the initialisation. One row per step: ``step``, ``loss``, ``epoch_seconds``."""
    x, y = _data(name, s, seed)
    return Task(
        model=functools.partial(_model, name, kind, s.tol), data=(x, y),
        loss=lambda model, batch: LOSSES[name](model(batch[0]), batch[1]),
        optimizer=functools.partial(torch.optim.Adam, lr=getattr(s, f"{name}_lr")),
        epochs=getattr(s, f"{name}_iterations"),
        batch_size=len(x), seed=seed, order=lambda epoch, generator: torch.arange(len(x)),
        row=lambda e: {"step": e.index + 1.0, "loss": e.losses[0], "epoch_seconds": e.seconds},
        after_epoch=lambda rows: None,  # a line per step would drown the log
        settings={"run": f"{name}/{kind}", "seed": seed, **dataclasses.asdict(s)},
    )  # fmt: skip


def measure(setup: Setup[DepthSettings], trained: Trained) -> Measurement:
    """:data:`TRAIN`, :data:`HELD_OUT`, the :data:`NFE` and the training time of a run."""
    s, task = setup.settings, trained.run.name.split("/")[0]
    model = trained.load()
    device = next(model.parameters()).device
    metrics = {SECONDS.key(): trained.seconds}
    for on, test in ((HELD_OUT, True), (TRAIN, False)):  # NFE: of the training points
        x, y = (v.to(device) for v in _data(task, s, trained.seed, test))
        with torch.no_grad():
            prediction = model(x)
        metrics[on["loss"].key()] = float(LOSSES[task](prediction, y))
        if task == "reflection":
            metrics[on["l1_bound"].key()] = l1_median_bound(y)
        else:
            metrics[on["accuracy"].key()] = float((prediction.sign() == y).float().mean())
    metrics[NFE.key()] = float(ode_layers(model)[0].nfe)  # an adaptive depth's: its NODE's
    numbers = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items())
    setup.log(f"[{trained.run.name} seed {trained.seed}] {numbers}")
    return Measurement(metrics)


def _relative_l1(model: str) -> Callable[[Values], float]:
    """The held-out L1 loss of ``model`` on the reflection over its L1-median bound."""
    loss, bound = (HELD_OUT[name].of(f"reflection/{model}") for name in ("loss", "l1_bound"))
    return lambda v: v[loss] / v[bound]


CLAIMS = [
    *(Claim.at_least(f"{model}_reflection_at_bound", said, PUBLISHED["reflection"][model],
                     _relative_l1(model), 0.95, spec=".3f", kind="check")
      for model, said in (
          ("vanilla", "Sec. 5: a vanilla NODE cannot learn the 1-D reflection"),
          ("galerkin", "Sec. 5: a Galerkin (depth-varying) NODE cannot learn the 1-D "
                       "reflection either"),
          ("stacked", "a stacked NODE cannot learn the 1-D reflection either (any 1-D flow "
                      "is increasing)"),
      )),
    *(Claim.at_most(f"{model}_reflects", said, PUBLISHED["reflection"][model],
                    _relative_l1(model), 0.2, strict=True, spec=".3f", kind="paper")
      for model, said in (
          ("data_control", "Sec. 5.1: a data-controlled NODE learns the reflection"),
          ("adaptive_depth", "Sec. 5.2: an adaptive-depth NODE learns the reflection (proof "
                             "of concept)"),
      )),
    *(Claim.at_least(f"{model}_annuli_fits", said, PUBLISHED["annuli"][model],
                     HELD_OUT["accuracy"].of(f"annuli/{model}"), 0.95, kind="paper")
      for model, said in (
          ("galerkin", "Sec. 4 / 5.3: depth variance alone solves the 2-D annuli, without "
                       "augmentation"),
          ("data_control", "Sec. 5.3: a data-controlled NODE solves the 2-D annuli"),
      )),
]  # fmt: skip
"""The claims, judged on held-out points (their details, in the text)."""


def tables(setup: Setup[DepthSettings]) -> dict[str, Table]:
    """Both tasks, model by model (the row's run), on the training and held-out points."""

    def of(header: str, task: str, *metrics: Metric) -> Col:
        return Col.joined(header, *(Col("", m, run=f"{task}/{{run}}") for m in metrics))

    loss, accuracy = (TRAIN["loss"], HELD_OUT["loss"]), (TRAIN["accuracy"], HELD_OUT["accuracy"])
    columns = [of("reflection L1, train / held-out", "reflection", *loss),
               of("NFE", "reflection", NFE), of("annuli MSE, train / held-out", "annuli", *loss),
               of("annuli accuracy, train / held-out", "annuli", *accuracy),
               of("NFE", "annuli", NFE)]  # fmt: skip
    return {"models": Table("model", [Row(LABELS[k], k) for k in MODELS], columns)}


def words(result: Result[DepthSettings]) -> dict[str, object]:
    """The bases' sizes and the reflection's mean L1-median bound."""
    bound = result.stat(TRAIN["l1_bound"].of("reflection/vanilla")).mean or math.nan
    return {"fourier": BASES["galerkin"].size, "pieces": BASES["stacked"].size, "bound": bound}


def _load(result: Result[DepthSettings], task: str, kind: str) -> nn.Module:
    """The model of the first seed, from its run's checkpoint."""
    build = functools.partial(_model, task, kind, result.settings.tol)
    return first_model(result.setup, f"{task}/{kind}", build)


def _loss_panel(result: Result[DepthSettings], task: str) -> Lines:
    """Loss per Adam step on ``task``: each model's mean over the seeds, and their band."""
    runs = {LABELS[kind]: seed_rows(result.setup, f"{task}/{kind}") for kind in MODELS}
    ylabel = "L1 loss" if task == "reflection" else "MSE"
    return seed_lines(task, "Adam step", ylabel, runs, "loss", styles=STYLES, yscale="log")


def _paths(layer: nn.Module, x: Tensor) -> dict[str, list[Point]]:
    """The state of a 1-D ODE layer over depth from each input, as ``_<i>``: ``(t, z(t))``."""
    s = torch.linspace(0.0, 1.0, 41)
    z = states_at(ode_layers(layer)[0], s.tolist(), lambda: layer(x))[..., 0]
    depths = s[:, None].expand_as(z)
    if isinstance(layer, AdaptiveDepthNODE):  # each sample's curve ends at its own depth
        assert layer.depth is not None
        depths = s[:, None] * layer.depth.detach()[None, :]
    return {f"_{i}": list(zip(depths[:, i].tolist(), z[:, i].tolist())) for i in range(len(x))}


def _reflection_panels(result: Result[DepthSettings]) -> list[Lines]:
    """State over depth of each model for inputs in [-1, 1] (red: negative), and the
    learned maps, of the first seed."""
    x = torch.linspace(-1.0, 1.0, 13)[:, None]
    grid = torch.linspace(-1.0, 1.0, 200)[:, None]
    signs = {f"_{i}": Style("-", "tab:red" if v < 0 else "tab:blue")
             for i, v in enumerate(x[:, 0].tolist())}  # fmt: skip
    maps: dict[str, list[Point]] = {}
    panels = []
    for kind in MODELS:
        layer = _load(result, "reflection", kind)
        panels.append(Lines(LABELS[kind], "depth t", "z(t)", _paths(layer, x), signs, legend=None))
        with torch.no_grad():
            maps[LABELS[kind]] = list(zip(grid[:, 0].tolist(), layer(grid)[:, 0].tolist()))
    maps["-x"] = list(zip(grid[:, 0].tolist(), (-grid[:, 0]).tolist()))  # on top, seen through
    title = f"learned maps, seed {result.setup.seeds[0]}"
    return [*panels, Lines(title, "x", "z(1)", maps, STYLES | {"-x": Style("-", "0.5", 0.5)})]


def _plot_annuli(result: Result[DepthSettings], path: Path) -> None:
    """The prediction of each model on a grid, its zero level and the training points."""
    s = result.settings
    x, y = _data("annuli", s, result.setup.seeds[0])
    g = torch.linspace(-2.0, 2.0, s.grid)
    gx, gy = torch.meshgrid(g, g, indexing="xy")
    points = torch.stack([gx.reshape(-1), gy.reshape(-1)], dim=1)
    fig, axes = pyplot().subplots(1, len(MODELS), figsize=(19, 3.9))
    for ax, kind in zip(axes, MODELS, strict=True):
        with torch.no_grad():
            pred = _load(result, "annuli", kind)(points).reshape(s.grid, s.grid)
        ax.contourf(gx, gy, pred.clamp(-1.5, 1.5), levels=20, cmap="coolwarm", alpha=0.8)
        ax.contour(gx, gy, pred, levels=[0.0], colors="k", linewidths=1.5)
        ax.scatter(x[:, 0], x[:, 1], c=y[:, 0], cmap="coolwarm", s=4, edgecolors="k", lw=0.2)
        ax.set(title=LABELS[kind], xlabel="x1", ylabel="x2")
        ax.set_aspect("equal")
    save_png(path, fig, dpi=80)


TEMPLATE = register_template(
    Template(
        name="dissecting-depth",
        title="Dissecting Neural ODEs: depth variance, data control, adaptive depth",
        description="Massaroli et al.'s vector fields (vanilla, Galerkin, stacked, "
        "data-controlled, adaptive depth) on the 1-D reflection and the 2-D concentric "
        "annuli over seeds",
        modes=MODES, runs=runs, measure=measure, tables=tables, words=words,
        claims=lambda setup: CLAIMS,
        figures=[Plot("loss.png", lambda result: [_loss_panel(result, t) for t in TASKS],
                      size=(5.5, 3.8), dpi=80),
                 Plot("reflection.png", _reflection_panels, size=(19 / 6, 3.5), dpi=80),
                 Figure("annuli.png", _plot_annuli)],
        epoch_fields=("reflection_iterations", "annuli_iterations"),
        data=lambda setup: f"reflection ({setup.settings.reflection_points} train / as many "
        f"held-out), annuli-2d ({setup.settings.annuli_points} train / as many held-out)",
        one_thread_modes=tuple(MODES), published=PUBLISHED,  # the models are tiny
    )
)  # fmt: skip

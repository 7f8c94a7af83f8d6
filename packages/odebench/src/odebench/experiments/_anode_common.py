"""What the experiments of Dupont et al. (2019) share: the authors' training, each run's
epochs, and on g(x) the monotone floor and the 1-D flows."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from .._figures import Lines, Style, seed_lines
from .._io import JsonObject
from .._metrics import Metric
from ..models import ode_layers
from ..training import Epoch, Task, TrainConfig, default_row
from ._claims import Claim
from ._result import Result
from ._run_files import states_at
from ._template import Measurement, Run, Trained, TrainingSettings

MODELS = ("node", "anode")
LABELS = {"node": "NODE", "anode": "ANODE", "resnet": "ResNet"}
COLORS = {"node": "tab:blue", "anode": "tab:orange", "resnet": "tab:green"}
TEST_ACC = Metric("test_acc", spec=".1f", scale=100, unit="%")
PARAMETERS = Metric("parameters", spec=",.0f")
NFE_FIRST = Metric("nfe_first", spec=".1f")  # forward NFE per batch, first epoch
NFE_LAST = Metric("nfe_last", spec=".1f")  # and last epoch
FLOOR = Metric("monotone_floor", spec=".3f")  # see monotone_floor
PATH_STARTS = (-1.4, -1.2, -1.05, -0.45, -0.25, 0.0, 0.25, 0.45, 1.05, 1.2, 1.4)
MAP_POINTS = 121  # points of a learned 1-D map on [-1.5, 1.5]
NODE_DEPTHS = 21  # depths in [0, 1] of a NODE's 1-D trajectories


def train_config(
    s: TrainingSettings, model: str, dataset: str, seed: int, **changes: Any
) -> TrainConfig:
    """The authors' configuration: Adam without weight decay, dopri5 at ``rtol = atol =
    1e-3``, ReLU, backpropagation through the solver steps; ``changes``: fields set otherwise.

    Example:
        >>> s = TrainingSettings(epochs=2, lr=1e-3, batch_size=64)
        >>> c = train_config(s, "toy-anode", "annuli-1d", seed=3)
        >>> c.optimizer, c.method, c.rtol, c.atol, c.gradient, c.seed
        ('adam', 'dopri5', 0.001, 0.001, 'backprop', 3)
    """
    return dataclasses.replace(TrainConfig(
        model=model, dataset=dataset, epochs=s.epochs, batch_size=s.batch_size, optimizer="adam",
        lr=s.lr, train_size=s.train_size, test_size=s.test_size, rtol=1e-3, atol=1e-3,
        method="dopri5", gradient="backprop", activation="relu", seed=seed,
    ), **changes)  # fmt: skip


def image_runs(
    datasets: Sequence[str], models: Mapping[str, str], config: Callable[[str, str], TrainConfig]
) -> list[Run]:
    """A run ``<dataset>/<name>`` of ``config(model, dataset)`` per data set and ``{name:
    model}``; one on a data set other than MNIST needs it (:attr:`Run.needs`): where it is
    not found, it trains nothing (MNIST's absence, training reports)."""
    return [Run(f"{d}/{name}", config=config(model, d), needs=None if d == "mnist" else d)
            for d in datasets for name, model in models.items()]  # fmt: skip


def epoch_numbers(
    trained: Trained, final: Mapping[str, str], extra: Mapping[str, float | None]
) -> Measurement:
    """The last epoch's ``{metric: column}`` of ``final``, the NFE of the first and last
    epoch, and ``extra``; details: the ``curve`` of those columns per epoch."""
    rows = trained.history
    keys = dict.fromkeys(("epoch", "nfe_forward", *final.values()))
    first, last = NFE_FIRST.key(), NFE_LAST.key()
    return Measurement(
        {**{metric: rows[-1][column] for metric, column in final.items()},
         first: rows[0]["nfe_forward"], last: rows[-1]["nfe_forward"], **extra},
        {"curve": [{k: row[k] for k in keys} for row in rows]},
    )  # fmt: skip


def curves(result: Result[Any], run: str) -> list[Sequence[Mapping[str, Any]]]:
    """The curve of ``run`` (:func:`epoch_numbers`), one per seed."""
    return [m.details["curve"] for m in result.measurements[run]]


def curve_panels(
    result: Result[Any], groups: Sequence[tuple[str, str]], key: str, ylabel: str, *,
    test: str | None = None, yscale: str = "linear", models: Sequence[str] = MODELS,
    x: str | None = None,
) -> list[Lines]:  # fmt: skip
    """A panel of ``key`` over the seeds per ``(prefix, title)`` of ``groups``, a line per
    run ``<prefix>/<model>``; ``test``, ``yscale`` and ``x`` as for ``seed_lines``."""
    panels = []
    for prefix, title in groups:
        runs = {LABELS[m]: curves(result, f"{prefix}/{m}") for m in models}
        styles = {  # markers where they can be told apart
            LABELS[m]: Style("o-" if len(runs[LABELS[m]][0]) <= 40 else "-", COLORS[m])
            for m in models
        }
        panels.append(seed_lines(title, x or "epoch", ylabel, runs, key, styles=styles, x=x,
                                 test=test, yscale=yscale))  # fmt: skip
    return panels


def mse_task(
    s: TrainingSettings, model: Callable[[], nn.Module], data: tuple[Tensor, Tensor], seed: int,
    run: str, row: Callable[[Epoch], JsonObject] = default_row,
) -> Task:  # fmt: skip
    """Adam on the MSE of ``data`` (inputs, targets), seeded: every model of a seed sees
    the same batches (the last partial one dropped)."""
    return Task(
        model=model, data=data, optimizer=functools.partial(torch.optim.Adam, lr=s.lr),
        loss=lambda net, batch: nn.functional.mse_loss(net(batch[0]), batch[1]),
        epochs=s.epochs, batch_size=s.batch_size, seed=seed, row=row,
        settings={"run": run, "seed": seed, **dataclasses.asdict(s)},
    )  # fmt: skip


def mse(model: nn.Module, inputs: Tensor, targets: Tensor) -> float:
    """The MSE of ``model`` on ``inputs`` against ``targets``, on the model's device."""
    device = next(model.parameters()).device
    with torch.no_grad():
        return float(nn.functional.mse_loss(model(inputs.to(device)), targets.to(device)))


def monotone_floor(inputs: Tensor, targets: Tensor) -> float:
    """The least MSE of a monotone map on 1-D g(x) data, which binds every 1-D NODE."""
    x, y = inputs[:, 0], targets[:, 0]
    inner = int((y < 0).sum())
    left = int(((y > 0) & (x < 0)).sum())
    right = int(((y > 0) & (x > 0)).sum())

    def pooled(outer: int) -> float:  # one shell pooled with the ball, the other kept at +1
        return 4.0 * outer * inner / (outer + inner) if outer + inner else 0.0

    return min(pooled(left), pooled(right)) / max(len(y), 1)


def floor_claim(text: str, published: str, train_mse: Metric, slack: float, spec: str) -> Claim:
    """A check: the train MSE of ``1d/node`` is at least ``slack`` times its :data:`FLOOR`."""
    mse, floor = train_mse.of("1d/node"), FLOOR.of("1d/node")
    return Claim.at_least("node_1d_at_floor", text, published, lambda v: v[mse] / v[floor], slack,
                          spec=spec, unit="×", kind="check")  # fmt: skip


def trajectory(model: nn.Module, x: Tensor, ts: list[float]) -> Tensor:
    """The ODE state of a toy ``model`` at depths ``ts`` for inputs ``x``:
    ``(len(ts), N, d + p)``."""
    layer = ode_layers(model)[0]
    return states_at(layer, ts, lambda: layer(model.get_submodule("augment")(x)))


def flow_1d(model: nn.Module, steps: Callable[[Tensor], list[Tensor]] | None = None) -> JsonObject:
    """A 1-D toy ``model``'s map on ``[-1.5, 1.5]`` and the first coordinate over depth
    of :data:`PATH_STARTS`: a NODE's, or ``steps(x)``, a ResNet's states block by block."""
    x = torch.linspace(-1.5, 1.5, MAP_POINTS)[:, None]
    starts = torch.tensor(PATH_STARTS)[:, None]
    with torch.no_grad():
        prediction = model(x)[:, 0]
        if steps is None:
            depths = torch.linspace(0.0, 1.0, NODE_DEPTHS).tolist()
            states = trajectory(model, starts, depths)[:, :, 0]
        else:
            hs = steps(starts)
            depths = [k / (len(hs) - 1) for k in range(len(hs))]
            states = torch.stack(hs)[:, :, 0]
    return {
        "map": {"x": x[:, 0].tolist(), "prediction": prediction.tolist()},
        "paths": {"starts": list(PATH_STARTS), "depths": depths, "states": states.T.tolist()},
    }


def flow_panels(flows: Mapping[str, Mapping[str, Any]]) -> list[Lines]:
    """The learned maps against g(x), then each model's trajectories over depth (blue
    where g = -1, red where g = +1); ``flows``: :func:`flow_1d` by model."""
    x = torch.linspace(-1.5, 1.5, MAP_POINTS).tolist()
    g = [(v, -1.0 if abs(v) <= 0.5 else 1.0 if abs(v) >= 1.0 else None) for v in x]
    maps = {LABELS[m]: list(zip(f["map"]["x"], f["map"]["prediction"])) for m, f in flows.items()}
    styles = {"g(x)": Style("-", "0.5"), **{LABELS[m]: Style("-", COLORS[m]) for m in flows}}
    panels = [Lines("learned map, first seed", "x", "prediction", {"g(x)": g, **maps}, styles)]
    for model, flow in flows.items():
        paths = flow["paths"]
        names = [f"_{start}" for start in paths["starts"]]  # "_": not in the legend
        colors = ["tab:blue" if abs(start) <= 0.5 else "tab:red" for start in paths["starts"]]
        fmt = "o-" if model == "resnet" else "-"  # discrete steps: a point per block
        panels.append(Lines(
            f"{LABELS[model]} trajectories (blue: g = -1)", "depth", "h(t), first coordinate",
            {name: list(zip(paths["depths"], h)) for name, h in zip(names, paths["states"])},
            {name: Style(fmt, color) for name, color in zip(names, colors)}, legend=None,
        ))  # fmt: skip
    return panels

"""What Dupont et al. (2019)'s two experiments share: settings, training, curves.

``anode-toy`` and ``anode-images`` train a NODE and an ANODE the way the authors'
configurations do (Adam, dopri5 at ``rtol = atol = 1e-3``, backpropagation through
the solver, ReLU), read the same numbers off each run's epochs, and draw per-epoch
curves as a mean over the seeds with a band from the minimum to the maximum.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._io import pyplot, save_png
from ..training import TrainConfig
from ._template import Measurement, Result, Settings, Trained

MODELS = ("node", "anode")
"""The two models compared, by their short names."""
LABELS = {"node": "NODE", "anode": "ANODE"}
COLORS = {"node": "tab:blue", "anode": "tab:orange"}
Curves = list[Sequence[Mapping[str, Any]]]
"""The per-epoch rows of one run, one list per seed."""


@dataclass(frozen=True)
class AnodeSettings(Settings):
    """The training of every run of one mode.

    Args:
        epochs: epochs of every run.
        lr: Adam's learning rate.
        batch_size: the training batch.
        train_size: training examples per run (``None``: all).
        test_size: test examples per run (``None``: all).
    """

    epochs: int
    lr: float
    batch_size: int
    train_size: int | None
    test_size: int | None


def train_config(s: AnodeSettings, model: str, dataset: str, seed: int) -> TrainConfig:
    """The authors' configuration: Adam without weight decay, dopri5 at ``rtol = atol =
    1e-3``, ReLU, backpropagation through the solver steps.

    Example:
        >>> s = AnodeSettings(epochs=2, lr=1e-3, batch_size=64, train_size=None, test_size=None)
        >>> c = train_config(s, "toy-anode", "annuli-1d", seed=3)
        >>> c.optimizer, c.method, c.rtol, c.atol, c.gradient, c.seed
        ('adam', 'dopri5', 0.001, 0.001, 'backprop', 3)
    """
    return TrainConfig(
        model=model,
        dataset=dataset,
        epochs=s.epochs,
        batch_size=s.batch_size,
        optimizer="adam",
        lr=s.lr,
        train_size=s.train_size,
        test_size=s.test_size,
        rtol=1e-3,
        atol=1e-3,
        method="dopri5",
        gradient="backprop",
        activation="relu",
        seed=seed,
    )


def epoch_numbers(
    trained: Trained, final: Mapping[str, str], extra: Mapping[str, float | None] | None = None
) -> Measurement:
    """The numbers of a trained run's epochs, and its curve for the figures.

    Args:
        trained: the run, with its per-epoch rows.
        final: ``{metric: column}``: the metrics read off the last epoch's row.
        extra: more metrics, as they are.

    Returns:
        The ``final`` metrics, ``nfe_first`` and ``nfe_last`` (forward NFE per batch in
        the first and last epoch) and ``extra``; details ``{"curve": rows}``, one row per
        epoch with ``epoch``, ``nfe_forward`` and the ``final`` columns.
    """
    rows = trained.history
    keys = ("epoch", "nfe_forward", *final.values())
    return Measurement(
        {
            **{metric: rows[-1][column] for metric, column in final.items()},
            "nfe_first": rows[0]["nfe_forward"],
            "nfe_last": rows[-1]["nfe_forward"],
            **(extra or {}),
        },
        {"curve": [{k: row[k] for k in dict.fromkeys(keys)} for row in rows]},
    )


def panels(n: int, height: float = 3.6) -> tuple[Any, list[Any]]:
    """A figure of ``n`` panels side by side (at least one), and their axes."""
    fig, axes = pyplot().subplots(1, max(n, 1), figsize=(5 * max(n, 1), height), squeeze=False)
    return fig, list(axes[0])


def curves(result: Result[Any], run: str) -> Curves:
    """The per-epoch rows of ``run`` (see :func:`epoch_numbers`), one list per seed."""
    return [m.details["curve"] for m in result.measurements[run]]


def plot_curves(
    groups: Sequence[tuple[str, str]],
    key: str,
    ylabel: str,
    result: Result[Any],
    path: Path,
    dashed: str | None = None,
    log: bool = False,
) -> None:
    """``key`` per epoch (the mean over the seeds, with a band from the least to the
    largest), NODE against ANODE, in a panel per ``(prefix, title)`` of ``groups``: the
    runs ``<prefix>/node`` and ``<prefix>/anode``. ``dashed``: a second column, dashed
    and without a band (the test loss)."""
    fig, axes = panels(len(groups))
    for ax, (prefix, title) in zip(axes, groups, strict=False):
        for model in MODELS:
            rows = curves(result, f"{prefix}/{model}")
            _plot_mean(ax, rows, key, model, LABELS[model])
            if dashed is not None:
                _plot_mean(ax, rows, dashed, model, f"{LABELS[model]} test", band=False)
        ax.set(xlabel="epoch", ylabel=ylabel, title=title, yscale="log" if log else "linear")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


def _plot_mean(ax: Any, rows: Curves, key: str, model: str, label: str, band: bool = True) -> None:
    """``key`` per epoch: the mean over the seeds' ``rows``, with a band from the least
    to the largest seed (dashed and without the band when ``band`` is false)."""
    n = min(len(c) for c in rows)
    epochs = list(range(1, n + 1))
    values = [[num(c[e][key]) for c in rows] for e in range(n)]
    means = [sum(v) / len(v) for v in values]
    ax.plot(epochs, means, "o-" if band else "--", color=COLORS[model], label=label)
    if band:
        lows, highs = [min(v) for v in values], [max(v) for v in values]
        ax.fill_between(epochs, lows, highs, color=COLORS[model], alpha=0.2)


def num(value: float | None) -> float:
    """``value`` as a float for a plot: NaN for a missing one."""
    return math.nan if value is None else float(value)

"""Figures as data: panels of lines or bars, and one function that draws them.

A figure is a list of panels, each :class:`Lines` or :class:`Bars`: what to show, not
how to draw it. :func:`draw` lays the panels out in a grid and writes the PNG. The
experiments declare their figures this way (``odebench.experiments.Plot``), and
``odebench perf plot`` builds its panels from a run's document; both draw through
:func:`draw`, so a figure looks the same wherever it comes from.

Example:
    >>> from pathlib import Path
    >>> import tempfile
    >>> panel = Lines("error against dt", "dt", "error", xscale="log", yscale="log",
    ...               series={"rk4": [(0.1, 1e-4), (0.2, 1.6e-3)]})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     draw(Path(tmp) / "error.png", [panel]).name
    'error.png'
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._io import LOSS_LABELS, Json, metric_label, pyplot, save_png

Point = tuple[float, "float | None"]
"""An ``(x, y)`` point of a line; a ``None`` ``y`` is a gap."""


@dataclass(frozen=True)
class Style:
    """How one series of a :class:`Lines` panel is drawn.

    Args:
        fmt: a matplotlib format string: marker and line (``"o-"``, ``"s--"``, ``":"``).
        color: a matplotlib colour; ``None``: the next of the cycle.
        alpha: the line's opacity.
    """

    fmt: str = "o-"
    color: str | None = None
    alpha: float = 1.0


@dataclass(frozen=True)
class Mark:
    """A reference line across a panel: at ``x = at`` (``axis="x"``) or ``y = at``.

    ``label`` is written beside it, in the panel (not in the legend).
    """

    at: float
    axis: str = "y"
    label: str = ""
    fmt: str = ":"
    color: str = "0.5"


@dataclass(frozen=True)
class Lines:
    """Curves of ``(x, y)`` points, one per named series, on one panel.

    A series whose name starts with ``_`` is left out of the legend (matplotlib's
    rule): the seeds' lines beside their mean, say.

    Args:
        title: the panel's title.
        xlabel: the x axis' label.
        ylabel: the y axis' label.
        series: the points of each series, in the legend's order.
        styles: how a series is drawn (:class:`Style`); others: ``"o-"`` in the next colour.
        bands: a shaded band per series, ``(x, low, high)`` points: the seeds' spread.
        labels: a text beside each point of a series (perf's tolerances).
        xscale: ``"linear"``, ``"log"``, or ``"log2"`` (base 2).
        yscale: ``"linear"`` or ``"log"``.
        xticks: ticks at these x values only, written as numbers.
        marks: reference lines (:class:`Mark`).
        empty: why the panel has nothing to draw; written in it.
        notes: sentences printed below the panel (a configuration that failed).
        legend: the legend's title (``""``: none); ``None``: no legend.
        integer_x: ticks at whole numbers only (epochs, steps).
        invert_x: the x axis decreasing (tolerances from loose to tight).
        ylim: the y axis' limits; a ``None`` is matplotlib's choice.
        equal: a unit as long on both axes (points of a plane), the limits widened to fill
            the panel.
    """

    title: str
    xlabel: str = ""
    ylabel: str = ""
    series: Mapping[str, Sequence[Point]] = field(default_factory=dict)
    styles: Mapping[str, Style] = field(default_factory=dict)
    bands: Mapping[str, Sequence[tuple[float, float, float]]] = field(default_factory=dict)
    labels: Mapping[str, Sequence[str]] = field(default_factory=dict)
    xscale: str = "linear"
    yscale: str = "linear"
    xticks: Sequence[float] | None = None
    marks: Sequence[Mark] = ()
    empty: str | None = None
    notes: Sequence[str] = ()
    legend: str | None = ""
    integer_x: bool = False
    invert_x: bool = False
    ylim: tuple[float | None, float | None] = (None, None)
    equal: bool = False


@dataclass(frozen=True)
class Bars:
    """Grouped bars: for each series, one value per group (``None``: "n/a").

    Args:
        title: the panel's title.
        ylabel: the y axis' label.
        groups: the groups' names, on the x axis.
        series: each series' values, one per group, in the legend's order.
        errors: an error bar per value (the seeds' standard deviation).
        inner: shaped like ``series``, the part of each bar drawn solid, the rest pale.
        colors: a series' colour; others: the next of the cycle.
        reference: a value to mark with a dashed line and ``reference_label``.
        reference_label: the words beside the reference line.
        sections: labels under runs of groups, ``(label, first, last)``, both included.
        yscale: ``"linear"`` or ``"log"``.
        empty: why the panel has nothing to draw; written in it.
    """

    title: str
    ylabel: str = ""
    groups: Sequence[str] = ()
    series: Mapping[str, Sequence[float | None]] = field(default_factory=dict)
    errors: Mapping[str, Sequence[float | None]] = field(default_factory=dict)
    inner: Mapping[str, Sequence[float | None]] = field(default_factory=dict)
    colors: Mapping[str, str] = field(default_factory=dict)
    reference: float | None = None
    reference_label: str = ""
    sections: Sequence[tuple[str, int, int]] = ()
    yscale: str = "linear"
    empty: str | None = None


def mean_band(
    curves: Sequence[Sequence[float | None]], x: Sequence[float] | None = None
) -> tuple[list[Point], list[tuple[float, float, float]]]:
    """The mean of ``curves`` (one per seed) point by point, and their least-to-largest band.

    The curves are cut to the shortest; ``x`` defaults to ``1, 2, ...`` (the epochs). A
    point where any seed has ``None`` is a gap in the mean and in the band.

    Example:
        >>> mean_band([[1.0, 4.0], [3.0, None]])
        ([(1, 2.0), (2, None)], [(1, 1.0, 3.0)])
    """
    n = min((len(c) for c in curves), default=0)
    xs = list(x) if x is not None else list(range(1, n + 1))
    mean: list[Point] = []
    band: list[tuple[float, float, float]] = []
    for i in range(n):
        values = [c[i] for c in curves]
        if any(v is None for v in values):
            mean.append((xs[i], None))
            continue
        finite = [float(v) for v in values if v is not None]
        mean.append((xs[i], sum(finite) / len(finite)))
        band.append((xs[i], min(finite), max(finite)))
    return mean, band


def seed_lines(
    title: str,
    xlabel: str,
    ylabel: str,
    runs: Mapping[str, Sequence[Sequence[Mapping[str, Json]]]],
    key: str,
    *,
    styles: Mapping[str, Style] | None = None,
    x: str | None = None,
    test: str | None = None,
    yscale: str = "linear",
) -> Lines:
    """A panel of the column ``key`` of runs' rows (a list per seed, by the line's name):
    a line per run, its mean over the seeds with their band (:func:`mean_band`), against
    the column ``x`` (``None``: the row's number from 1, the epoch); ``test``: a second
    column, dashed in the line's colour and without a band, as ``"<name> test"``.

    Example:
        >>> runs = {"NODE": [[{"loss": 1.0}, {"loss": 0.5}], [{"loss": 3.0}, {"loss": 0.5}]]}
        >>> panel = seed_lines("", "epoch", "loss", runs, "loss")
        >>> panel.series["NODE"], panel.bands["NODE"]
        ([(1, 2.0), (2, 0.5)], [(1, 1.0, 3.0), (2, 0.5, 0.5)])
    """
    series: dict[str, list[Point]] = {}
    bands: dict[str, list[tuple[float, float, float]]] = {}
    all_styles = dict(styles or {})
    for name, seeds in runs.items():
        xs = [_float(row[x]) for row in seeds[0]] if x else None
        series[name], bands[name] = mean_band(
            [[_scaled(r[key]) for r in rows] for rows in seeds], xs
        )
        if test is not None:
            tests = [[_scaled(r[test]) for r in rows] for rows in seeds]
            series[f"{name} test"] = mean_band(tests, xs)[0]
            all_styles[f"{name} test"] = Style("--", all_styles.get(name, Style()).color)
    return Lines(title, xlabel, ylabel, series, all_styles, bands, yscale=yscale)


def curve_panels(rows: Sequence[Mapping[str, Json]], *, loss: str | None = None) -> list[Lines]:
    """Loss, accuracy (in %) and NFE against the epoch, each panel where some row has one of
    its metrics: the panels of a run's ``curves.png``.

    Args:
        rows: the rows of ``metrics.json`` (each with ``"epoch"``).
        loss: the run's loss (``"cross_entropy"`` or ``"mse"``), named on the loss axis;
            ``None``: just "loss".

    Example:
        >>> rows = [{"epoch": 1, "train_loss": 0.9, "test_loss": 1.0, "test_acc": 0.5}]
        >>> for panel in curve_panels(rows, loss="mse"):
        ...     print(panel.ylabel, list(panel.series))
        mean squared error ['train loss', 'test loss']
        accuracy (%) ['test accuracy (%)']
    """
    words = "function evaluations per batch"
    panels = [
        (LOSS_LABELS.get(loss or "", "loss"), ("train_loss", "test_loss"), 1.0, "log"),
        ("accuracy (%)", ("train_acc", "test_acc"), 100.0, "linear"),
        (words, ("nfe_forward", "nfe_backward", "test_nfe"), 1.0, "linear"),
    ]
    epochs = [_float(row["epoch"]) for row in rows]
    out = []
    for ylabel, keys, scale, yscale in panels:
        series = {
            metric_label(key): [(e, _scaled(row.get(key), scale)) for e, row in zip(epochs, rows)]
            for key in keys
            if any(row.get(key) is not None for row in rows)
        }
        if series:
            out.append(
                Lines("", metric_label("epoch"), ylabel, series, yscale=yscale, integer_x=True)
            )
    return out


def _float(value: Json) -> float:
    assert isinstance(value, (int, float)), value  # a number in a row of metrics
    return float(value)


def _scaled(value: Json, scale: float = 1.0) -> float | None:
    return None if value is None else scale * _float(value)


def draw(
    path: Path,
    panels: Sequence[Lines | Bars],
    *,
    columns: int | None = None,
    size: tuple[float, float] = (5.0, 3.6),
    dpi: int = 90,
    title: str | None = None,
    sharey: bool = False,
) -> Path:
    """Draw ``panels`` in a grid (one row of them unless ``columns``) and write the PNG.

    Args:
        path: where to write it (atomically; directories are created).
        panels: the panels, row by row.
        columns: panels per row; ``None``: all in one row.
        size: one panel's width and height, in inches.
        dpi: the PNG's dots per inch.
        title: the figure's title.
        sharey: the panels share their y axis.

    Returns:
        ``path``.
    """
    columns = columns or max(len(panels), 1)
    rows = max(math.ceil(len(panels) / columns), 1)
    figsize = (size[0] * columns, size[1] * rows)
    fig, axes = pyplot().subplots(rows, columns, figsize=figsize, squeeze=False, sharey=sharey)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_axis_off()
    for ax, panel in zip(axes.flat, panels):
        ax.set_title(panel.title, fontsize=10)
        ax.set_ylabel(panel.ylabel)
        ax.set_yscale(panel.yscale)
        if panel.empty is not None:
            ax.text(0.5, 0.5, panel.empty, ha="center", va="center", transform=ax.transAxes)
        if isinstance(panel, Bars):
            _draw_bars(ax, panel)
        else:
            _draw_lines(ax, panel)
    if title is not None:
        fig.suptitle(title, fontsize=11)
    save_png(path, fig, dpi=dpi)
    return path


def _draw_lines(ax: Any, panel: Lines) -> None:
    ax.set_xlabel(panel.xlabel)
    for name, points in panel.series.items():
        style = panel.styles.get(name, Style())
        xs = [x for x, _ in points]
        ys = [math.nan if y is None else y for _, y in points]
        (line,) = ax.plot(xs, ys, style.fmt, color=style.color, alpha=style.alpha, label=name)
        for (x, y), text in zip(points, panel.labels.get(name, ())):
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                        color=line.get_color())  # fmt: skip
        if name in panel.bands:
            bx, low, high = zip(*panel.bands[name]) if panel.bands[name] else ((), (), ())
            ax.fill_between(bx, low, high, color=line.get_color(), alpha=0.2)
    for mark in panel.marks:
        _draw_mark(ax, mark)
    if panel.xscale == "log2":
        ax.set_xscale("log", base=2)
    else:
        ax.set_xscale(panel.xscale)
    if panel.xticks is not None:
        ax.set_xticks(list(panel.xticks), [f"{x:g}" for x in panel.xticks], minor=False)
        ax.set_xticks([], minor=True)
    if panel.integer_x:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    if panel.invert_x:
        ax.invert_xaxis()
    if panel.ylim != (None, None):
        ax.set_ylim(*panel.ylim)
    if panel.equal:
        ax.set_aspect("equal", adjustable="datalim")
    if panel.series:
        ax.grid(alpha=0.3, which="both" if "log" in panel.xscale + panel.yscale else "major")
        if panel.legend is not None:
            ax.legend(fontsize=7, title=panel.legend or None, title_fontsize=7)
    if panel.notes:  # below the axis: a failed configuration has no point to draw
        text = "\n".join(textwrap.fill(note, 120) for note in panel.notes)
        ax.text(0.0, -0.12, text, fontsize=7, transform=ax.transAxes, ha="left", va="top")


def _draw_mark(ax: Any, mark: Mark) -> None:
    line = ax.axvline if mark.axis == "x" else ax.axhline
    line(mark.at, ls=mark.fmt, color=mark.color, lw=1)
    if mark.label:
        if mark.axis == "x":
            ax.text(mark.at, 1.0, f" {mark.label}", va="top", fontsize=7, color=mark.color,
                    transform=ax.get_xaxis_transform())  # fmt: skip
        else:
            ax.text(1.0, mark.at, f" {mark.label}", ha="left", va="center", fontsize=7,
                    color=mark.color, transform=ax.get_yaxis_transform())  # fmt: skip


def _draw_bars(ax: Any, panel: Bars) -> None:
    n = max(len(panel.series), 1)
    width = 0.8 / n
    for j, (name, values) in enumerate(panel.series.items()):
        offset = (j - (n - 1) / 2) * width
        at = [(i + offset, v) for i, v in enumerate(values) if v is not None]
        color = panel.colors.get(name)
        errors = [e for e, v in zip(panel.errors.get(name, ()), values) if v is not None] or None
        solid = panel.inner.get(name)
        bars = ax.bar([x for x, _ in at], [v for _, v in at], width, yerr=errors, color=color,
                      label=None if solid is not None else name,
                      alpha=0.4 if solid is not None else 1.0)  # fmt: skip
        color = color or (bars.patches[0].get_facecolor() if bars.patches else None)
        if solid is not None:
            parts = [(i + offset, v) for i, v in enumerate(solid) if v is not None]
            ax.bar([x for x, _ in parts], [v for _, v in parts], width, label=name, color=color)
        for i, v in enumerate(values):
            if v is None:  # no value there: say so rather than leave a gap
                ax.text(i + offset, 0.02, "n/a", rotation=90, ha="center", va="bottom",
                        fontsize=6, color=color, transform=ax.get_xaxis_transform())  # fmt: skip
    ax.set_xticks(range(len(panel.groups)), list(panel.groups), fontsize=7)
    for label, first, last in panel.sections:
        ax.text((first + last) / 2, -0.1, label, ha="center", va="top", fontsize=8,
                transform=ax.get_xaxis_transform())  # fmt: skip
        if first > 0:
            ax.axvline(first - 0.5, color="gray", lw=0.8)
    if panel.reference is not None:
        from matplotlib.ticker import FormatStrFormatter

        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))  # factors near 1: not 10^x
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        ax.tick_params(axis="y", which="minor", labelsize=7)
        _draw_mark(ax, Mark(panel.reference, label=panel.reference_label, fmt="--", color="black"))
    if panel.series and panel.empty is None:
        ax.grid(True, axis="y", which="major", alpha=0.3)
        ax.legend(fontsize=7)

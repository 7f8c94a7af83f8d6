"""A solver benchmark's JSON document as one figure of four panels.

:func:`solver_panels` reads what is drawn out of the document (plain data, so it can
be checked against the rows it came from); :func:`plot_solvers` draws it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..training._io import pyplot, save_png

_LIBRARY_COLORS = {
    "odecore": "#1f77b4",
    "torchdiffeq": "#ff7f0e",
    "torchode": "#2ca02c",
    "torchdyn": "#9467bd",
}
_GRADIENT_STYLES = {"backprop": "-", "checkpoint": "--", "adjoint": ":"}


@dataclass(frozen=True)
class Bars:
    """Grouped bars: for each series (a library), one value per group, ``None`` for none.

    ``reference`` is a value to mark with a line (the overhead factors' physical
    limit, 1.0); ``sections`` label runs of groups (``(label, first, last)``, both
    indices included); ``empty`` says why a panel has nothing to draw. ``inner``,
    shaped like ``series``, is the part of each bar drawn solid (the rest pale): for
    the forward overhead factor, 1 + the solver alone (``forward_solver_overhead``).
    """

    title: str
    ylabel: str
    groups: list[str]
    series: dict[str, list[float | None]]
    reference: float | None = None
    sections: list[tuple[str, int, int]] = field(default_factory=list)
    empty: str | None = None
    inner: dict[str, list[float | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class Lines:
    """Curves of ``(x, y)`` points, one per series (``"library, gradient"``)."""

    title: str
    xlabel: str
    ylabel: str
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    empty: str | None = None


def _rows(doc: Mapping[str, Any], section: str) -> list[dict[str, Any]]:
    rows = doc.get(section, [])
    if not isinstance(rows, list):
        raise ValueError(f"`doc[{section!r}]` must be a list of rows, got {type(rows).__name__}.")
    return rows


def _check(doc: Any) -> None:
    if not isinstance(doc, Mapping):
        raise ValueError(
            f"expected the JSON object written by `odebench perf solvers --json`, got a "
            f"{type(doc).__name__}."
        )
    missing = [k for k in ("environment", "problems", "results") if k not in doc]
    if missing:
        raise ValueError(
            f"not a result of `odebench perf solvers --json`: no {', '.join(map(repr, missing))} "
            f"(it has {', '.join(map(repr, doc)) or 'no keys'})."
        )


def _libraries(doc: Mapping[str, Any], rows: Sequence[dict[str, Any]]) -> list[str]:
    """The libraries of ``rows``, in the run's order (odecore first)."""
    order = list(doc["environment"].get("libraries", {}))
    seen = {r["library"] for r in rows}
    return [n for n in order if n in seen] + sorted(seen.difference(order))


def _tightest_dopri5(doc: Mapping[str, Any]) -> str | None:
    """The ``dopri5@tol`` method of the run with the smallest tolerance, or ``None``."""
    tols = {}
    for r in _rows(doc, "results"):
        name, _, tol = str(r["method"]).partition("@")
        if name == "dopri5" and tol:
            tols[r["method"]] = float(tol)
    return min(tols, key=tols.__getitem__) if tols else None


def _figure_rows(doc: Mapping[str, Any], figure: str, method: str | None) -> list[dict[str, Any]]:
    return [r for r in _rows(doc, "results") if r["figure"] == figure and r["method"] == method]


def _by_library(
    doc: Mapping[str, Any], rows: Sequence[dict[str, Any]], problems: list[str]
) -> dict[str, list[float | None]]:
    """Each library's value in ``rows`` per problem, ``None`` where it has none."""
    value = {(r["problem"], r["library"]): r["value"] for r in rows}
    return {lib: [value.get((p, lib)) for p in problems] for lib in _libraries(doc, rows)}


def _overhead(doc: Mapping[str, Any], figure: str, title: str, ylabel: str) -> Bars:
    method = _tightest_dopri5(doc)
    rows = _figure_rows(doc, figure, method)
    if not rows:
        return Bars(title, ylabel, [], {}, empty=f"no {figure} figures in this run")
    problems = [p["name"] for p in doc["problems"] if any(r["problem"] == p["name"] for r in rows)]
    series = _by_library(doc, rows, problems)
    assert method is not None  # rows exist, so the method does
    tol = method.partition("@")[2]
    title = f"{title}, dopri5 at {tol}"
    inner = _solver_alone(doc, method, problems) if figure == "forward_overhead" else {}
    if inner:
        title += "\nsolid: field + solver alone (a replay of its steps); pale: the rest"
    return Bars(title, ylabel, problems, series, reference=1.0, inner=inner)


def _solver_alone(
    doc: Mapping[str, Any], method: str, problems: list[str]
) -> dict[str, list[float | None]]:
    """1 + ``forward_solver_overhead`` per library and problem, where measured."""
    rows = _figure_rows(doc, "forward_solver_overhead", method)
    return {
        lib: [None if v is None else 1.0 + v for v in values]
        for lib, values in _by_library(doc, rows, problems).items()
        if any(v is not None for v in values)
    }


def _memory(doc: Mapping[str, Any]) -> Lines:
    title = "Peak memory of forward + backward"
    rows = [
        r
        for r in _rows(doc, "memory")
        if r["figure"] == "peak_delta_mib" and r["n_steps"] is not None and r["value"] is not None
    ]
    if not rows:
        return Lines(title, "steps", "MiB", empty="memory not measured in this run")
    problem = rows[0]["problem"]  # the benchmark measures memory on one problem
    rows = [r for r in rows if r["problem"] == problem]
    method = str(rows[0]["method"]).partition("x")[0]
    series: dict[str, list[tuple[float, float]]] = {}
    for lib in _libraries(doc, rows):
        for grad in _GRADIENT_STYLES:
            points = sorted(
                (float(r["n_steps"]), float(r["value"]))
                for r in rows
                if r["library"] == lib and r["gradient"] == grad and r["value"] > 0
            )
            if points:
                series[f"{lib}, {grad}"] = points
    return Lines(f"{title}, {problem}, {method}", "steps", "peak above baseline, MiB", series)


def _gradient_error(doc: Mapping[str, Any]) -> Bars:
    title = "Gradient error against finite differences"
    ylabel = "relative error"
    rows = [r for r in _rows(doc, "gradients") if r["figure"] == "grad_rel_error"]
    if not rows:
        return Bars(title, ylabel, [], {}, empty="gradients not checked in this run")
    keys: list[tuple[str, str]] = []
    for r in rows:
        if (r["problem"], r["gradient"]) not in keys:
            keys.append((r["problem"], r["gradient"]))
    value = {(r["problem"], r["gradient"], r["library"]): r["value"] for r in rows}
    series = {lib: [value.get((p, g, lib)) for p, g in keys] for lib in _libraries(doc, rows)}
    methods = sorted({r["method"] for r in rows})
    groups = [g.replace("adjoint_", "") for _, g in keys]
    sections: list[tuple[str, int, int]] = []
    for i, (p, _) in enumerate(keys):
        if sections and sections[-1][0] == p:
            sections[-1] = (p, sections[-1][1], i)
        else:
            sections.append((p, i, i))
    return Bars(
        f"{title}, {', '.join(methods)}, float64", ylabel, groups, series, sections=sections
    )


def solver_panels(doc: Mapping[str, Any]) -> list[Bars | Lines]:
    """What :func:`plot_solvers` draws, as data: the four panels in order.

    1. the forward solve's overhead factor per problem and library (time over NFE x
       one evaluation of the field alone; 1.0 is the physical limit), the part that
       the field and the solver alone explain drawn solid;
    2. the same for forward + backward by backprop (over NFE x evaluation with its
       vector-Jacobian product);
    3. peak memory against the number of rk4 steps for each library and gradient
       method;
    4. the gradient's relative error against finite differences for each problem
       and gradient method.

    Panels 1 and 2 use the run's tightest dopri5 tolerance. A ``None`` value (a
    library without that method) is kept as ``None`` and drawn as "n/a". Every axis
    but the steps' is logarithmic, so panel 3 leaves out peaks not above the
    baseline.

    Raises:
        ValueError: when ``doc`` is not the document of ``odebench perf solvers``.
    """
    _check(doc)
    try:
        return [
            _overhead(doc, "forward_overhead", "Forward solve", "time / (NFE x evaluation)"),
            _overhead(
                doc,
                "backprop_overhead",
                "Forward + backward by backprop",
                "time / (NFE x (evaluation + VJP))",
            ),
            _memory(doc),
            _gradient_error(doc),
        ]
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"a row of this document does not have the fields of `odebench perf solvers` "
            f"({type(exc).__name__}: {exc})."
        ) from exc


def _draw_bars(ax: Any, panel: Bars) -> None:
    from matplotlib.ticker import FormatStrFormatter

    n = max(len(panel.series), 1)
    width = 0.8 / n
    for j, (lib, values) in enumerate(panel.series.items()):
        offset = (j - (n - 1) / 2) * width
        xs = [i + offset for i, v in enumerate(values) if v is not None]
        ys = [v for v in values if v is not None]
        solid = panel.inner.get(lib)
        color = _LIBRARY_COLORS.get(lib)
        if solid is None:
            ax.bar(xs, ys, width, label=lib, color=color)
        else:
            ax.bar(xs, ys, width, color=color, alpha=0.4)
            parts = [(i + offset, v) for i, v in enumerate(solid) if v is not None]
            ax.bar([x for x, _ in parts], [v for _, v in parts], width, label=lib, color=color)
        for i, v in enumerate(values):
            if v is None:  # the library has no such method: say so rather than leave a gap
                ax.text(
                    i + offset, 0.02, "n/a", rotation=90, ha="center", va="bottom",
                    fontsize=6, color=_LIBRARY_COLORS.get(lib), transform=ax.get_xaxis_transform(),
                )  # fmt: skip
    ax.set_xticks(range(len(panel.groups)), panel.groups, fontsize=7)
    for label, first, last in panel.sections:
        ax.text(
            (first + last) / 2, -0.1, label, ha="center", va="top", fontsize=8,
            transform=ax.get_xaxis_transform(),
        )  # fmt: skip
        if first > 0:
            ax.axvline(first - 0.5, color="gray", lw=0.8)
    ax.set_yscale("log")
    if panel.reference is not None:  # factors near 1: plain numbers read better than 10^x
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.axhline(panel.reference, color="black", lw=0.8, ls="--")
        ax.text(
            1.0, panel.reference, " field alone", ha="left", va="center", fontsize=7,
            transform=ax.get_yaxis_transform(),
        )  # fmt: skip


def _draw_lines(ax: Any, panel: Lines) -> None:
    for name, points in panel.series.items():
        lib, _, grad = name.partition(", ")
        xs, ys = zip(*points)
        ax.plot(
            xs, ys, marker="o", label=name, color=_LIBRARY_COLORS.get(lib),
            ls=_GRADIENT_STYLES.get(grad, "-"),
        )  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(panel.xlabel)


def plot_solvers(doc: Mapping[str, Any], path: str | Path) -> Path:
    """Draw a run of ``odebench perf solvers`` as one PNG of four panels (see
    :func:`solver_panels`), titled with the run's date, torch version and threads.

    Args:
        doc: the document that :func:`~odebench.perf.run_solvers` returns, or its
            ``--json`` file loaded with ``json.load``.
        path: where to write the PNG (written atomically; directories are created).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: when ``doc`` is not the document of ``odebench perf solvers``.

    Example:
        >>> import json
        >>> from odebench.perf import plot_solvers
        >>> doc = json.load(open("solvers.json"))  # doctest: +SKIP
        >>> plot_solvers(doc, "solvers.png")  # doctest: +SKIP
        PosixPath('solvers.png')
    """
    panels = solver_panels(doc)
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    for ax, panel in zip(axes.flat, panels):
        ax.set_title(panel.title, fontsize=10)
        ax.set_ylabel(panel.ylabel)
        if panel.empty is not None:
            ax.text(0.5, 0.5, panel.empty, ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        if isinstance(panel, Bars):
            _draw_bars(ax, panel)
        else:
            _draw_lines(ax, panel)
        ax.grid(True, axis="y", which="major", alpha=0.3)
        ax.legend(fontsize=7)
    env = doc["environment"]
    quick = ", quick run" if env.get("quick") else ""
    date = str(env.get("date", "?"))[:16].replace("T", " ")
    fig.suptitle(
        f"odebench perf solvers, {date} UTC: torch {env.get('torch', '?')}, "
        f"{env.get('threads', '?')} threads, {env.get('cpu_count', '?')} CPUs{quick}",
        fontsize=11,
    )
    fig.tight_layout()
    out = Path(path)
    save_png(out, fig)
    return out

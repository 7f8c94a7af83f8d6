"""A solver benchmark's JSON document as one figure of four panels, and the stiff
problems' work-precision plot.

:func:`solver_panels` and :func:`stiff_panels` read what is drawn out of the document
(plain data, so it can be checked against the rows it came from); :func:`plot_solvers`
and :func:`plot_stiff` draw it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._io import pyplot, save_png

_LIBRARY_COLORS = {
    "odecore": "#1f77b4",
    "torchdiffeq": "#ff7f0e",
    "torchode": "#2ca02c",
    "torchdyn": "#9467bd",
}
_GRADIENT_STYLES = {"backprop": "-", "checkpoint": "--", "adjoint": ":"}

_STIFF_SOLVERS = {
    "kvaerno5": ("kvaerno5: odecore's ESDIRK 5(4), implicit", "#1f77b4", "o"),
    "scipy:Radau": ("Radau IIA, order 5: SciPy through odecore", "#d62728", "s"),
    "scipy:BDF": ("BDF, orders 1 to 5: SciPy through odecore", "#2ca02c", "^"),
}
"""Each stiff solver's name in words, colour and marker on the work-precision plot."""


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
    """Curves of ``(x, y)`` points, one per series (``"library, gradient"``, or a
    stiff solver's name in words).

    ``labels``, shaped like ``series``, names each point (the work-precision plot:
    its tolerance); ``notes`` are sentences to print on the panel (a configuration
    that failed).
    """

    title: str
    xlabel: str
    ylabel: str
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    empty: str | None = None
    labels: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


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
    keys = list(dict.fromkeys((r["problem"], r["gradient"]) for r in rows))
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


STIFF_XLABEL = "error: largest |y(t1) - reference| (log)"
STIFF_YLABEL = "wall time of one solve, s (log)"


def stiff_panels(doc: Mapping[str, Any]) -> list[Lines]:
    """The work-precision panels of the document's stiff problems, one per problem.

    Each panel has one curve per implicit solver (named in words): a point per
    tolerance of the sweep at (error at ``t1``, median wall time), in the order of
    the tolerances, loosest first, each labelled with its tolerance. A configuration
    without an error to draw (``dopri5`` out of its step budget, SciPy not installed)
    is a sentence in ``notes``. An empty list: no stiff rows in the document.

    Raises:
        ValueError: when ``doc`` is not the document of ``odebench perf solvers``.
    """
    _check(doc)
    rows = _rows(doc, "stiff")
    try:
        problems = list(dict.fromkeys(r["problem"] for r in rows))
        described = {p["name"]: p.get("description", p["name"]) for p in doc["problems"]}
        panels = []
        for problem in problems:
            mine = [r for r in rows if r["problem"] == problem]
            value = {(r["method"], r["figure"]): r for r in mine}
            methods = list(dict.fromkeys(r["method"] for r in mine))
            series: dict[str, list[tuple[float, float, float]]] = {}
            notes: list[str] = []
            for method in methods:
                time_row = value.get((method, "forward_time_s"))
                error_row = value.get((method, "error"))
                t = time_row["value"] if time_row else None
                e = error_row["value"] if error_row else None
                solver = str((time_row or error_row or {}).get("solver", method))
                if t is None or e is None or e <= 0 or solver not in _STIFF_SOLVERS:
                    note = (time_row or error_row or {}).get("note") or "no error measured"
                    notes.append(f"{method}: {note.replace('failed: SolverError: ', 'failed: ')}")
                    continue
                tol = float((time_row or {}).get("rtol") or 0.0)
                series.setdefault(_STIFF_SOLVERS[solver][0], []).append((tol, float(e), float(t)))
            for points in series.values():
                points.sort(key=lambda p: -p[0])
            panels.append(
                Lines(
                    f"Work against precision: {described.get(problem, problem)}\n"
                    "one point per tolerance (rtol = atol); lower left is better",
                    STIFF_XLABEL,
                    STIFF_YLABEL,
                    {k: [(e, t) for _, e, t in v] for k, v in series.items()},
                    empty=None if series else "no stiff solve reached t1",
                    labels={k: [f"{tol:g}" for tol, _, _ in v] for k, v in series.items()},
                    notes=notes,
                )
            )
        return panels
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"a row of this document's `stiff` section does not have the fields of "
            f"`odebench perf solvers` ({type(exc).__name__}: {exc})."
        ) from exc


def stiff_path(path: str | Path) -> Path:
    """Where :func:`plot_solvers` puts the stiff problems' figure: ``PATH`` with
    ``_stiff`` before its suffix (``solvers.png`` -> ``solvers_stiff.png``)."""
    out = Path(path)
    return out.with_name(f"{out.stem}_stiff{out.suffix or '.png'}")


def plot_stiff(doc: Mapping[str, Any], path: str | Path) -> Path:
    """Draw the stiff problems' work-precision plot (see :func:`stiff_panels`) as a PNG.

    Error (x) against wall time (y), both logarithmic, one curve per implicit solver,
    its points labelled with their tolerances; failed configurations are written
    under the curves.

    Args:
        doc: the document of :func:`~odebench.perf.run_solvers`, with a ``stiff``
            section.
        path: where to write the PNG (written atomically; directories are created).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: when ``doc`` is not the document of ``odebench perf solvers``, or
            has no stiff rows.

    Example:
        >>> import json
        >>> from odebench.perf._plot import plot_stiff
        >>> doc = json.load(open("solvers.json"))  # doctest: +SKIP
        >>> plot_stiff(doc, "solvers_stiff.png")  # doctest: +SKIP
        PosixPath('solvers_stiff.png')
    """
    panels = stiff_panels(doc)
    if not panels:
        raise ValueError(
            "this document has no stiff rows: run `odebench perf solvers --problems vdp_stiff`."
        )
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels), 6), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        _draw_work_precision(ax, panel)
    return _save(fig, doc["environment"], path, what=", stiff problems")


def _save(
    fig: Any, env: Mapping[str, Any], path: str | Path, what: str = "", more: str = ""
) -> Path:
    """Title ``fig`` with the run (its date, torch version and threads) and write it to ``path``."""
    date = str(env.get("date", "?"))[:16].replace("T", " ")
    fig.suptitle(
        f"odebench perf solvers{what}, {date} UTC: torch {env.get('torch', '?')}, "
        f"{env.get('threads', '?')} threads{more}",
        fontsize=11,
    )
    out = Path(path)
    save_png(out, fig)
    return out


def _draw_work_precision(ax: Any, panel: Lines) -> None:
    ax.set_title(panel.title, fontsize=10)
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel)
    if panel.empty is not None:
        ax.text(0.5, 0.6, panel.empty, ha="center", va="center", transform=ax.transAxes)
    styles = {words: (color, marker) for words, color, marker in _STIFF_SOLVERS.values()}
    for name, points in panel.series.items():
        color, marker = styles.get(name, (None, "o"))
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker=marker, label=name, color=color)
        for (x, y), label in zip(points, panel.labels.get(name, [])):
            ax.annotate(
                label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                color=color,
            )  # fmt: skip
    if panel.series:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    if panel.notes:  # below the axis: a failed configuration has no point to draw
        text = "\n".join(textwrap.fill(note, 120) for note in panel.notes)
        ax.text(0.0, -0.12, text, fontsize=7, transform=ax.transAxes, ha="left", va="top")


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

    When the run has stiff problems, their work-precision plot (error against wall
    time per solver) goes beside it, to ``path`` with ``_stiff`` before the suffix
    (``solvers_stiff.png``).

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
    out = _save(fig, env, path, more=f", {env.get('cpu_count', '?')} CPUs{quick}")
    if _rows(doc, "stiff"):
        plot_stiff(doc, stiff_path(out))
    return out

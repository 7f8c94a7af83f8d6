"""A solver benchmark's document as one figure of four panels, and the stiff problems'
work-precision plot: :func:`solver_panels` and :func:`stiff_panels` read them out of the
document as data, :func:`plot_solvers` and :func:`plot_stiff` draw them."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._figures import Bars, Lines, Style, draw
from ._document import Document, StiffRow

_LIBRARY_COLORS = {
    "odecore": "#1f77b4",
    "torchdiffeq": "#ff7f0e",
    "torchode": "#2ca02c",
    "torchdyn": "#9467bd",
}
_GRADIENT_STYLES = {"backprop": "-", "checkpoint": "--", "adjoint": ":", "reversible": "-."}

_STIFF_SOLVERS = {
    "kvaerno5": ("kvaerno5: odecore's ESDIRK 5(4), implicit", "#1f77b4", "o"),
    "rodas4": ("rodas4: odecore's Rosenbrock 4(3), linearly implicit", "#ff7f0e", "D"),
    "rodas5p": ("rodas5p: odecore's Rosenbrock 5(4), linearly implicit", "#8c564b", "P"),
    "scipy:Radau": ("Radau IIA, order 5: SciPy through odecore", "#d62728", "s"),
    "scipy:BDF": ("BDF, orders 1 to 5: SciPy through odecore", "#2ca02c", "^"),
    "scipy:LSODA": ("LSODA, Adams or BDF: SciPy through odecore", "#9467bd", "v"),
}
"""Each stiff solver's name in words, colour and marker on the work-precision plot."""
_STIFF_STYLES = {
    words: Style(marker + "-", color) for words, color, marker in _STIFF_SOLVERS.values()
}


def _read(doc: Any) -> tuple[Document, dict[str, str]]:
    """The sections that the panels draw, typed, and each problem's description by name."""
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
    try:
        described = {p["name"]: p.get("description", p["name"]) for p in doc["problems"]}
        d = Document.from_json(dict(doc), skip=("problems", "evaluations", "ratios", "compiled"))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"a row of this document does not have the fields of `odebench perf solvers` "
            f"({type(exc).__name__}: {exc})."
        ) from exc
    return d, described


def _tightest_dopri5(d: Document) -> str | None:
    """The ``dopri5@tol`` method of the run with the smallest tolerance, or ``None``."""
    tols = {
        r.method: float(r.method[len("dopri5@") :])
        for r in d.results
        if r.method.startswith("dopri5@")
    }
    return min(tols, key=tols.__getitem__, default=None)


def _by_library(
    d: Document, figure: str, method: str | None, problems: list[str]
) -> dict[str, list[float | None]]:
    """Each library's value of ``figure`` by ``method`` per problem, ``None`` where it has
    none."""
    rows = [r for r in d.results if r.figure == figure and r.method == method]
    value = {(r.problem, r.library): r.value for r in rows}
    return {lib: [value.get((p, lib)) for p in problems] for lib in d.libraries(rows)}


def _overhead(d: Document, problems: list[str], figure: str, title: str, ylabel: str) -> Bars:
    method = _tightest_dopri5(d)
    drawn = {r.problem for r in d.results if r.figure == figure and r.method == method}
    if not drawn:
        return Bars(title, ylabel, [], {}, empty=f"no {figure} figures in this run", yscale="log")
    problems = [p for p in problems if p in drawn]
    series = _by_library(d, figure, method, problems)
    assert method is not None  # rows exist, so the method does
    title = f"{title}, dopri5 at {method.partition('@')[2]}"
    inner = {}
    if figure == "forward_overhead":  # 1 + the solver's part, where measured
        inner = {
            lib: [None if v is None else 1.0 + v for v in values]
            for lib, values in _by_library(d, "forward_solver_overhead", method, problems).items()
            if any(v is not None for v in values)
        }
    if inner:
        title += "\nsolid: field + solver alone (a replay of its steps); pale: the rest"
    return Bars(title, ylabel, problems, series, inner=inner, colors=_LIBRARY_COLORS,
                reference=1.0, reference_label="field alone", yscale="log")  # fmt: skip


def _memory(d: Document) -> Lines:
    title = "Peak memory of forward + backward"
    rows = [
        r for r in d.memory if r.figure == "peak_delta_mib" and r.n_steps and r.value is not None
    ]
    if not rows:
        return Lines(title, "steps", "MiB", empty="memory not measured in this run")
    problem = rows[0].problem  # the benchmark measures memory on one problem
    method = rows[0].method.partition("x")[0]
    styles = {
        f"{lib}, {grad}": Style("o" + line, _LIBRARY_COLORS.get(lib))
        for lib in d.libraries(rows)
        for grad, line in _GRADIENT_STYLES.items()
    }
    points: dict[str, list[tuple[float, float | None]]] = {name: [] for name in styles}
    for r in rows:
        if r.problem == problem and r.n_steps and r.value and r.value > 0:
            points.get(f"{r.library}, {r.gradient}", []).append((float(r.n_steps), r.value))
    series = {name: sorted(line) for name, line in points.items() if line}
    return Lines(f"{title}, {problem}, {method}", "steps", "peak above baseline, MiB", series,
                 styles, xscale="log", yscale="log")  # fmt: skip


def _gradient_error(d: Document) -> Bars:
    title = "Gradient error against finite differences"
    ylabel = "relative error"
    rows = [r for r in d.gradients if r.figure == "grad_rel_error"]
    if not rows:
        return Bars(title, ylabel, [], {}, empty="gradients not checked in this run", yscale="log")
    keys = list(dict.fromkeys((r.problem, r.gradient) for r in rows))
    value = {(r.problem, r.gradient, r.library): r.value for r in rows}
    series = {lib: [value.get((p, g, lib)) for p, g in keys] for lib in d.libraries(rows)}
    methods = sorted({r.method for r in rows})
    short = {"adjoint_seminorm": "seminorm", "checkpoint": "ckpt", "reversible": "rev"}
    groups = [short.get(g, g) for _, g in keys]  # the report's words: the labels fit
    sections = []
    for p, run in itertools.groupby(enumerate(keys), key=lambda k: k[1][0]):
        indices = [i for i, _ in run]
        sections.append((p, indices[0], indices[-1]))
    return Bars(f"{title}, {', '.join(methods)}, float64", ylabel, groups, series,
                colors=_LIBRARY_COLORS, sections=sections, yscale="log")  # fmt: skip


def solver_panels(doc: Mapping[str, Any]) -> list[Bars | Lines]:
    """What :func:`plot_solvers` draws, as data: the four panels that :doc:`/odebench/index`
    describes ("The figure"), in order. A ``None`` value (a library without that method, or a
    run that failed) is kept as ``None`` and drawn as "n/a"; peaks not above the baseline
    are left out of the memory panel's log axis.

    Raises:
        ValueError: when ``doc`` is not the document of ``odebench perf solvers``.
    """
    d, described = _read(doc)
    problems = list(described)
    return [
        _overhead(d, problems, "forward_overhead", "Forward solve", "time / (NFE x evaluation)"),
        _overhead(
            d,
            problems,
            "backprop_overhead",
            "Forward + backward by backprop",
            "time / (NFE x (evaluation + VJP))",
        ),
        _memory(d),
        _gradient_error(d),
    ]


STIFF_XLABEL = "error: largest |y(t1) - reference| (log)"
STIFF_YLABEL = "wall time of one solve, s (log)"


def stiff_panels(doc: Mapping[str, Any]) -> list[Lines]:
    """A work-precision panel per stiff problem of the document: a curve per implicit solver,
    a point per tolerance at (error at ``t1``, median wall time), loosest first; a
    configuration without an error to draw is a sentence in ``notes``.

    Raises:
        ValueError: when ``doc`` is not the document of ``odebench perf solvers``.
    """
    d, described = _read(doc)
    cells: dict[str, dict[str, dict[str, StiffRow]]] = {}  # problem, method, figure
    for r in d.stiff:
        cells.setdefault(r.problem, {}).setdefault(r.method, {})[r.figure] = r
    panels = []
    for problem, methods in cells.items():
        series: dict[str, list[tuple[float, float, float]]] = {}
        notes: list[str] = []
        for method, figures in methods.items():
            first = next(iter(figures.values()))  # the configuration's first figure, its time
            t, e = (figures[f].value if f in figures else None for f in ("forward_time_s", "error"))
            if t is None or e is None or e <= 0 or first.solver not in _STIFF_SOLVERS:
                note = first.note or "no error measured"
                notes.append(f"{method}: {note.replace('failed: SolverError: ', 'failed: ')}")
                continue
            tol = first.rtol or 0.0
            series.setdefault(_STIFF_SOLVERS[first.solver][0], []).append((tol, e, t))
        for points in series.values():
            points.sort(key=lambda p: -p[0])
        panels.append(
            Lines(
                f"Work against precision: {described.get(problem, problem)}\n"
                "one point per rtol (atol = rtol unless the problem says); "
                "lower left is better",
                STIFF_XLABEL,
                STIFF_YLABEL,
                {k: [(e, t) for _, e, t in v] for k, v in series.items()},
                empty=None if series else "no stiff solve reached t1",
                styles=_STIFF_STYLES,
                labels={k: [f"{tol:g}" for tol, _, _ in v] for k, v in series.items()},
                xscale="log",
                yscale="log",
                notes=notes,
            )
        )
    return panels


def stiff_path(path: str | Path) -> Path:
    """Where :func:`plot_solvers` puts the stiff problems' figure: ``PATH`` with
    ``_stiff`` before its suffix (``solvers.png`` -> ``solvers_stiff.png``)."""
    out = Path(path)
    return out.with_name(f"{out.stem}_stiff{out.suffix or '.png'}")


def plot_stiff(doc: Mapping[str, Any], path: str | Path) -> Path:
    """Draw the work-precision panels of :func:`stiff_panels` as a PNG at ``path``."""
    panels = stiff_panels(doc)
    if not panels:
        raise ValueError(
            "this document has no stiff rows: run `odebench perf solvers --problems vdp_stiff`."
        )
    return draw(Path(path), panels, size=(7.5, 6), dpi=110,
                title=_title(doc["environment"], ", stiff problems"))  # fmt: skip


def _title(env: Mapping[str, Any], what: str = "", more: str = "") -> str:
    """The figure's title: the run's date, torch version and threads."""
    date = str(env.get("date", "?"))[:16].replace("T", " ")
    return (
        f"odebench perf solvers{what}, {date} UTC: torch {env.get('torch', '?')}, "
        f"{env.get('threads', '?')} threads{more}"
    )


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
    panels = solver_panels(doc)  # first: it refuses what is not a document
    env = doc["environment"]
    quick = ", quick run" if env.get("quick") else ""
    title = _title(env, more=f", {env.get('cpu_count', '?')} CPUs{quick}")
    out = draw(Path(path), panels, columns=2, size=(6, 4.25), dpi=110, title=title)
    if doc.get("stiff"):  # a list of rows, as solver_panels checked
        plot_stiff(doc, stiff_path(out))
    return out

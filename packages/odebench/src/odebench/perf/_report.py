"""The benchmark's document as plain-text tables for the terminal, declared with the
tables of the experiments' reports (:mod:`odebench._tables`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any

from .._io import JsonObject, text_parts
from .._metrics import Coordinate, Metric, fmt
from .._tables import Col, Column, Measured, Row, Table, figure_columns, key_of, keyed_rows
from ._document import Document, GradientRow, json_object
from ._solvers import MODE_FIGURES, RATIO_FIGURES
from ._stats import ratio

_MS, _US = (".3g", 1e3), (".1f", 1e6)  # seconds as milliseconds, as microseconds
_INT, _F1, _F2, _E = ((spec, 1.0) for spec in (".0f", ".1f", ".2f", ".1e"))


def _blank(rows: Sequence[Row]) -> list[Row]:
    """``rows`` with their first two labels left empty where they repeat the row above's."""
    above = [None, *(row.label[:2] for row in rows)]
    return [
        dataclasses.replace(row, label=("", "", *row.label[2:])) if row.label[:2] == a else row
        for row, a in zip(rows, above)
    ]


_TEXT = text_parts((resources.files(__package__) / "text" / "report.md").read_text("utf-8"))[1]
"""The words above each table, by section (``text/report.md``)."""


def _section(name: str, table: Table, source: Measured, after: Sequence[str] = ()) -> list[str]:
    """A section of the report: its words, the table, ``after`` and a blank line; nothing
    without rows or ``after``."""
    if not table.rows and not after:
        return []
    return [*_TEXT[name].splitlines(), table.text(source), *after, ""]


def _grid(
    section: str,
    rows: Sequence[Any],
    names: tuple[str, ...],
    columns: Iterable[Column],
    after: Sequence[str] = (),
    blank: bool = False,
) -> list[str]:
    """A section of a line per distinct ``names`` of ``rows`` and a column per figure
    (with ``blank``, the first two left blank where they repeat the line above's)."""
    lines = _blank(keyed_rows(rows, names)) if blank else keyed_rows(rows, names)
    return _section(
        section,
        Table(names, lines, figure_columns(names, columns)),
        Measured.of(rows, names),
        after,
    )


def format_report(doc: JsonObject) -> str:
    """The JSON document of :func:`~odebench.perf.run_solvers` as readable tables."""
    d = Document.from_json(doc)
    sections = (_problems, _speed, _forward_split, _ratios, _compiled, _stiff, _memory, _gradients)
    out = _heading(d)
    for section in sections:
        out += section(d)
    out += _failures(d)
    out.append(f"Wall time: {d.environment.get('wall_time_s', 0.0):.0f} s")
    return "\n".join(out)


def _heading(d: Document) -> list[str]:
    env = d.environment
    libs = ", ".join(f"{k} {v}" for k, v in json_object(env["libraries"]).items())
    return [
        f"odebench perf solvers: {env['date']}, torch {env['torch']}, {env['threads']} threads, "
        f"{env['cpu_count']} CPUs ({env['machine']}), python {env['python']}"
        + (", QUICK" if env.get("quick") else ""),
        f"libraries: {libs}",
        *(
            f"left out: {name}: {why}"
            for name, why in json_object(env.get("unavailable", {})).items()
        ),
        "",
    ]


_EVAL = {"eval": "eval_time_s", "eval+VJP": "eval_vjp_time_s"}


def _problems(d: Document) -> list[str]:
    def cells(problem: str, field: str) -> str:
        """``low-high`` of ``field`` over the cells of ``problem``, in microseconds."""
        values = [
            v
            for e in d.evaluations
            if e.problem == problem and (v := getattr(e, field)) is not None
        ]
        return "-".join(fmt(v, *_US) for v in (min(values), max(values))) if values else "–"

    rows = [
        Row(
            p.name,
            at={"problem": p.name},
            text={"description": p.description}
            | {f"{h}, cells": cells(p.name, f) for h, f in _EVAL.items()},
        )
        for p in d.problems
    ]
    columns = [
        Col("description"),
        *figure_columns(("problem",), ((f"{h} us", f, *_US) for h, f in _EVAL.items())),
        *(Col(f"{h}, cells") for h in _EVAL),
    ]
    refs: dict[str, list[str]] = {}
    for p in d.problems:
        refs.setdefault(p.reference, []).append(p.name)
    after = [f"error reference of {', '.join(names)}: {ref}" for ref, names in refs.items()]
    values = Measured.of(d.problems, ("name",), tuple(_EVAL.values()))
    return _section("problems", Table("problem", rows, columns), values, after)


_KEY = ("problem", "method", "library")
_SPEED: tuple[Column, ...] = (
    ("fwd ms", "forward_time_s", *_MS),
    ("NFE", "nfe_forward", *_INT),
    ("ovh", "forward_overhead", *_F2),
    ("us/ev", "forward_cost_per_eval_us", *_F1),
    ("error", "error", *_E),
    ("bp ms", "backprop_time_s", *_MS),
    ("ovh", "backprop_overhead", *_F2),
    ("adj ms", "adjoint_time_s", *_MS),
    ("NFEb", "adjoint_nfe_backward", *_INT),
    ("ovh", "adjoint_overhead", *_F2),
    ("gdiff", "adjoint_grad_diff", *_E),
    ("semi ms", "adjoint_seminorm_time_s", *_MS),
    ("NFEb", "adjoint_seminorm_nfe_backward", *_INT),
    ("ckpt ms", "checkpoint_time_s", *_MS),
    ("NFEb", "checkpoint_nfe_backward", *_INT),
    ("ovh", "checkpoint_overhead", *_F2),
    ("gdiff", "checkpoint_grad_diff", *_E),
    ("rev ms", "reversible_time_s", *_MS),
    ("NFEb", "reversible_nfe_backward", *_INT),
    ("ovh", "reversible_overhead", *_F2),
    ("gdiff", "reversible_grad_diff", *_E),
)


def _speed(d: Document) -> list[str]:
    """Every figure of ``results``, one line per problem, method and library."""
    return _grid("speed", d.results, _KEY, _SPEED, blank=True)


_SPLIT: tuple[Column, ...] = (
    ("ovh", "forward_overhead", *_F2),
    ("floor", "floor", *_F2),
    ("solver", "forward_solver_overhead", *_F2),
    ("rest", "rest", *_F2),
    ("solver us/ev", "forward_solver_cost_per_eval_us", *_F1),
)


def _forward_split(d: Document) -> list[str]:
    """The table that splits each forward overhead factor into floor, solver and the rest."""
    chained: dict[tuple[Coordinate, ...], float | None] = {
        (e.problem, e.method): ratio(e.chained_eval_time_s, e.eval_time_s)
        for e in d.evaluations
        if e.mode == "forward"
    }
    values, rows = dict(Measured.of(d.results, _KEY).values), []
    for row in keyed_rows(d.results, _KEY):
        key = tuple(row.at.values())
        overhead, solver = (
            values.get((f, key)) for f in ("forward_overhead", "forward_solver_overhead")
        )
        if overhead is None or solver is None:
            continue
        floor = values["floor", key] = chained.get(key[:2])
        values["rest", key] = None if floor is None else overhead - floor - solver
        rows.append(row)
    table = Table(_KEY, _blank(rows), figure_columns(_KEY, _SPLIT))
    return _section("forward_split", table, Measured(values))


_RATIO_HEADERS = "fwd, NFE, error, fwd ovh, us/ev, solver us/ev, bp, adj, adj NFEb, semi, semi NFEb"
"""The ratios table's header of each of ``RATIO_FIGURES``, in order."""


def _ratios(d: Document) -> list[str]:
    headers = _RATIO_HEADERS.split(", ")
    # three digits, not two decimals: a ratio far below 1 (an error 400 times smaller) is
    # no 0.00
    columns = ((h, f, ".3g", 1.0) for h, f in zip(headers, RATIO_FIGURES, strict=True))
    return _grid("ratios", d.ratios, ("problem", "method", "peer"), columns)


_COMPILED: tuple[Column, ...] = (
    ("eager ms", "eager_time_s", *_MS),
    ("compiled ms", "compiled_time_s", *_MS),
    ("ratio", "ratio", *_F2),
    ("first s", "first_call_s", ".3g", 1.0),
    ("y1 diff", "y1_max_abs_diff", *_E),
    ("grad diff", "grad_rel_diff", *_E),
)


def _compiled(d: Document) -> list[str]:
    """``--compile``: compiled odecore against eager odecore, one line per cell."""
    key = ("problem", "method", "mode")
    notes = {key_of(r, key): r.note or "" for r in d.compiled}
    note = Col("note", cell=lambda _, row: notes[tuple(row.at.values())])
    table = Table(key, keyed_rows(d.compiled, key), [*figure_columns(key, _COMPILED), note])
    return _section("compiled", table, Measured.of(d.compiled, key, [c[1] for c in _COMPILED]))


_STIFF = tuple(c for c in _SPEED if c[1] in ("forward_time_s", "nfe_forward", "error"))
"""The stiff sweep's columns: those of the speed table that it measures."""


def _stiff(d: Document) -> list[str]:
    """The stiff problems' sweep: one line per problem and configuration."""
    return _grid("stiff", d.stiff, _KEY, _STIFF)


def _memory(d: Document) -> list[str]:
    key = ("library", "gradient")
    order = d.libraries(d.memory)
    rows = sorted(keyed_rows(d.memory, key), key=lambda row: order.index(str(row.at["library"])))
    steps = sorted({r.n_steps for r in d.memory if r.n_steps is not None})
    at = ("library", "gradient", "n_steps")
    columns = [
        *(Col(f"{n} steps", Metric("peak_delta_mib", at, *_F1), at={"n_steps": n}) for n in steps),
        *(
            Col(h, Metric(f, at, ".3g"), at={"n_steps": ""})
            for h, f in (("MiB/step", "mib_per_step"), ("growth", "delta_growth"))
        ),
    ]
    return _section("memory", Table(key, rows, columns), Measured.of(d.memory, at))


_GRADIENTS: tuple[Column, ...] = (
    ("abs err", "grad_abs_error", *_E),
    ("rel err", "grad_rel_error", *_E),
    ("NFE", "nfe_forward", *_INT),
    ("NFEb", "nfe_backward", *_INT),
    ("b/f", "nfe_backward_over_forward", *_F2),
    ("s", "time_s", ".3g", 1.0),
)


def _gradients(d: Document) -> list[str]:
    key = ("problem", "library", "gradient")
    checked = [r for r in d.gradients if r.library != "finite differences"]
    after = [_reference(r) for r in d.gradients if r.library == "finite differences"]
    return _grid("gradients", checked, key, _GRADIENTS, after)


def _reference(r: GradientRow) -> str:
    value = fmt(r.value, ".3g") if r.figure == "time_s" else fmt(r.value, ".1e")
    return f"  {r.problem} reference {r.figure}: {value} ({r.note})"


_MODE_OF = {f: mode for mode, figures in MODE_FIGURES.items() for f in figures}


def _failures(d: Document) -> list[str]:
    """One line per failed (section, problem, method, library, gradient or mode)."""
    failures: dict[str, str] = {}
    for section in ("results", "stiff", "memory", "gradients"):
        for r in getattr(d, section):
            note = r.note or ""
            later = note.startswith("a later run failed")  # the runs before it stand
            if (r.value is not None and not later) or not getattr(r, "supported", True):
                continue
            if not (later or note.startswith("failed") or "Error" in note or "NaN" in note):
                continue
            what = getattr(r, "gradient", None) or _MODE_OF.get(r.figure, "forward")
            failures.setdefault(f"  {section}: {r.problem} {r.method} {r.library} {what}", note)
    lines = [f"{run}: {note}" for run, note in failures.items()]
    return ["Failed runs:", *lines, ""] if lines else []

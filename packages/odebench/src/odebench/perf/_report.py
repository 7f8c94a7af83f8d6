"""The benchmark's document as plain-text tables for the terminal."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from importlib import resources
from operator import attrgetter
from typing import Any

from .._io import JsonObject, text_parts, text_table
from ._document import Document, FigureRow, GradientRow, json_object
from ._solvers import MODE_FIGURES, RATIO_FIGURES
from ._stats import ratio

Formatter = Callable[[float | None], str]


def _written(spec: str) -> Formatter:
    """A value in ``format``'s ``spec``; ``-`` for none."""
    return lambda v: "-" if v is None else format(v, spec)


_g, _int, _f1, _f2, _e = map(_written, (".3g", ".0f", ".1f", ".2f", ".1e"))


def _ms(v: float | None) -> str:
    """Seconds in milliseconds: three digits, or whole ones from a second on."""
    ms = None if v is None else v * 1e3
    return _int(ms) if ms is not None and ms >= 1000 else _g(ms)


def _keys(rows: Sequence[FigureRow], *names: str) -> list[tuple[Any, ...]]:
    """The distinct ``names`` tuples, in order, that have at least one supported row."""
    get = attrgetter(*names)
    return list(dict.fromkeys(get(r) for r in rows if getattr(r, "supported", True)))


def _values(rows: Sequence[FigureRow], *names: str) -> Callable[..., float | None]:
    """``value(*key)``: the value of the row whose ``names`` are ``key``, or ``None``."""
    index: dict[Hashable, float | None] = {attrgetter(*names)(r): r.value for r in rows}
    return lambda *key: index.get(key)


Column = tuple[str, str, Formatter]
"""A column of a table: its header, its figure (or field), how a value is written."""


def _grid(
    rows: Sequence[FigureRow], names: tuple[str, ...], columns: Sequence[Column]
) -> tuple[list[str], list[list[str]]]:
    """The header, and a line per distinct ``names`` of the supported ``rows`` with a cell
    per column."""
    value = _values(rows, *names, "figure")
    lines = [
        [*key, *(fmt(value(*key, figure)) for _, figure, fmt in columns)]
        for key in _keys(rows, *names)
    ]
    return [*names, *(c[0] for c in columns)], lines


def _range(doc: Document, problem: str, key: str) -> str:
    """``low-high`` in microseconds of ``key`` over the cells of ``problem``, or ``-``."""
    values = [getattr(e, key) for e in doc.evaluations if e.problem == problem]
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{min(values) * 1e6:.1f}-{max(values) * 1e6:.1f}"


def _blank_repeats(rows: list[list[str]]) -> list[list[str]]:
    """Rows with problem and method left blank where they repeat the row above's."""
    out, previous = [], None
    for row in rows:
        out.append(["", "", *row[2:]] if row[:2] == previous else row)
        previous = row[:2]
    return out


_TEXT = text_parts((resources.files(__package__) / "text" / "report.md").read_text("utf-8"))[1]
"""The words above each table, by section (``text/report.md``)."""


def _table(
    section: str,
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    after: Sequence[str] = (),
) -> list[str]:
    """A section of the report: its words, the table, ``after`` and a blank line; nothing
    without rows or ``after``."""
    if not rows and not after:
        return []
    return [*_TEXT[section].splitlines(), text_table(header, rows), *after, ""]


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


def _problems(d: Document) -> list[str]:
    rows = [
        [
            p.name,
            p.description,
            _f1(p.eval_time_s * 1e6),
            _f1(p.eval_vjp_time_s * 1e6),
            _range(d, p.name, "eval_time_s"),
            _range(d, p.name, "eval_vjp_time_s"),
        ]
        for p in d.problems
    ]
    header = ["problem", "description", "eval us", "eval+VJP us", "eval, cells", "eval+VJP, cells"]
    refs: dict[str, list[str]] = {}
    for p in d.problems:
        refs.setdefault(p.reference, []).append(p.name)
    after = [f"error reference of {', '.join(names)}: {ref}" for ref, names in refs.items()]
    return _table("problems", header, rows, after)


_SPEED: tuple[Column, ...] = (
    ("fwd ms", "forward_time_s", _ms),
    ("NFE", "nfe_forward", _int),
    ("ovh", "forward_overhead", _f2),
    ("us/ev", "forward_cost_per_eval_us", _f1),
    ("error", "error", _e),
    ("bp ms", "backprop_time_s", _ms),
    ("ovh", "backprop_overhead", _f2),
    ("adj ms", "adjoint_time_s", _ms),
    ("NFEb", "adjoint_nfe_backward", _int),
    ("ovh", "adjoint_overhead", _f2),
    ("gdiff", "adjoint_grad_diff", _e),
    ("semi ms", "adjoint_seminorm_time_s", _ms),
    ("NFEb", "adjoint_seminorm_nfe_backward", _int),
    ("ckpt ms", "checkpoint_time_s", _ms),
    ("NFEb", "checkpoint_nfe_backward", _int),
    ("ovh", "checkpoint_overhead", _f2),
    ("gdiff", "checkpoint_grad_diff", _e),
    ("rev ms", "reversible_time_s", _ms),
    ("NFEb", "reversible_nfe_backward", _int),
    ("ovh", "reversible_overhead", _f2),
    ("gdiff", "reversible_grad_diff", _e),
)


def _speed(d: Document) -> list[str]:
    """Every figure of ``results``, one line per problem, method and library."""
    header, rows = _grid(d.results, ("problem", "method", "library"), _SPEED)
    return _table("speed", header, _blank_repeats(rows))


def _forward_split(d: Document) -> list[str]:
    """The table that splits each forward overhead factor into floor, solver and the rest."""
    chained = {
        (e.problem, e.method): ratio(e.chained_eval_time_s, e.eval_time_s)
        for e in d.evaluations
        if e.mode == "forward"
    }
    value = _values(d.results, "problem", "method", "library", "figure")
    rows = []
    for key in _keys(d.results, "problem", "method", "library"):
        overhead = value(*key, "forward_overhead")
        solver = value(*key, "forward_solver_overhead")
        if overhead is None or solver is None:
            continue
        floor = chained.get(key[:2])
        rest = None if floor is None else overhead - floor - solver
        per_eval = value(*key, "forward_solver_cost_per_eval_us")
        rows.append([*key, *map(_f2, (overhead, floor, solver, rest)), _f1(per_eval)])
    header = ["problem", "method", "library", "ovh", "floor", "solver", "rest", "solver us/ev"]
    return _table("forward_split", header, _blank_repeats(rows))


_RATIO_HEADERS = "fwd, NFE, error, fwd ovh, us/ev, solver us/ev, bp, adj, adj NFEb, semi, semi NFEb"
"""The ratios table's header of each of ``RATIO_FIGURES``, in order."""
_RATIOS: tuple[Column, ...] = tuple(
    (header, figure, _f2)
    for header, figure in zip(_RATIO_HEADERS.split(", "), RATIO_FIGURES, strict=True)
)


def _ratios(d: Document) -> list[str]:
    return _table("ratios", *_grid(d.ratios, ("problem", "method", "peer"), _RATIOS))


_COMPILED: tuple[Column, ...] = (
    ("eager ms", "eager_time_s", _ms),
    ("compiled ms", "compiled_time_s", _ms),
    ("ratio", "ratio", _f2),
    ("first s", "first_call_s", _g),
    ("y1 diff", "y1_max_abs_diff", _e),
    ("grad diff", "grad_rel_diff", _e),
)


def _compiled(d: Document) -> list[str]:
    """``--compile``: compiled odecore against eager odecore, one line per cell."""
    rows = [
        [
            r.problem,
            r.method,
            r.mode,
            *(fmt(getattr(r, a)) for _, a, fmt in _COMPILED),
            r.note or "",
        ]
        for r in d.compiled
    ]
    header = ["problem", "method", "mode", *(c[0] for c in _COMPILED), "note"]
    return _table("compiled", header, rows)


_STIFF = tuple(c for c in _SPEED if c[1] in ("forward_time_s", "nfe_forward", "error"))
"""The stiff sweep's columns: those of the speed table that it measures."""


def _stiff(d: Document) -> list[str]:
    """The stiff problems' sweep: one line per problem and configuration."""
    return _table("stiff", *_grid(d.stiff, ("problem", "method", "library"), _STIFF))


def _memory(d: Document) -> list[str]:
    value = _values(d.memory, "library", "gradient", "n_steps", "figure")
    steps = sorted({r.n_steps for r in d.memory if r.n_steps is not None})
    pairs = _keys(d.memory, "library", "gradient")
    order = d.libraries(d.memory)
    pairs.sort(key=lambda p: order.index(p[0]))
    rows = [
        [
            *pair,
            *(_f1(value(*pair, n, "peak_delta_mib")) for n in steps),
            _g(value(*pair, None, "mib_per_step")),
            _g(value(*pair, None, "delta_growth")),
        ]
        for pair in pairs
    ]
    header = ["library", "gradient", *(f"{n} steps" for n in steps), "MiB/step", "growth"]
    return _table("memory", header, rows)


_GRADIENTS: tuple[Column, ...] = (
    ("abs err", "grad_abs_error", _e),
    ("rel err", "grad_rel_error", _e),
    ("NFE", "nfe_forward", _int),
    ("NFEb", "nfe_backward", _int),
    ("b/f", "nfe_backward_over_forward", _f2),
    ("s", "time_s", _g),
)


def _gradients(d: Document) -> list[str]:
    checked = [r for r in d.gradients if r.library != "finite differences"]
    header, rows = _grid(checked, ("problem", "library", "gradient"), _GRADIENTS)
    after = [_reference(r) for r in d.gradients if r.library == "finite differences"]
    return _table("gradients", header, rows, after)


def _reference(r: GradientRow) -> str:
    value = _g(r.value) if r.figure == "time_s" else _e(r.value)
    return f"  {r.problem} reference {r.figure}: {value} ({r.note})"


_MODE_OF = {f: mode for mode, figures in MODE_FIGURES.items() for f in figures}


def _failures(d: Document) -> list[str]:
    """One line per failed (section, problem, method, library, gradient or mode)."""
    failures: dict[str, str] = {}
    for section in ("results", "stiff", "memory", "gradients"):
        for r in getattr(d, section):
            note = r.note or ""
            if r.value is not None or not getattr(r, "supported", True):
                continue
            if not (note.startswith("failed") or "Error" in note or "NaN" in note):
                continue
            what = getattr(r, "gradient", None) or _MODE_OF.get(r.figure, "forward")
            failures.setdefault(f"  {section}: {r.problem} {r.method} {r.library} {what}", note)
    lines = [f"{run}: {note}" for run, note in failures.items()]
    return ["Failed runs:", *lines, ""] if lines else []

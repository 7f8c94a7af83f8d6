"""The benchmark's document as plain-text tables for the terminal."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._libraries import GRADIENT_MODES
from ._stats import finite, ratio

Formatter = Callable[[float | None], str]


def _g(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    ms = v * 1e3
    return f"{ms:.0f}" if ms >= 1000 else f"{ms:.3g}"


def _int(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def _f2(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _e(v: float | None) -> str:
    return "-" if v is None else f"{v:.1e}"


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _mib(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _supported_keys(rows: Sequence[dict[str, Any]], *names: str) -> list[tuple[Any, ...]]:
    """The distinct ``names`` tuples, in order, that have at least one supported row."""
    keys: list[tuple[Any, ...]] = []
    for r in rows:
        key = tuple(r.get(n) for n in names)
        if r.get("supported", True) and key not in keys:
            keys.append(key)
    return keys


def _mode_of(figure: str) -> str:
    for mode in sorted(GRADIENT_MODES, key=len, reverse=True):
        if figure.startswith(mode + "_"):
            return mode
    return "forward"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """Columns padded to their widest cell; the first ``left`` columns flush left."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            str(c).ljust(w) if i < left else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths))
        ]
        return "  ".join(parts).rstrip()

    out = [line(header), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return out


def _range(rows: Sequence[dict[str, Any]], problem: str, key: str) -> str:
    """``low-high`` in microseconds of ``key`` over the rows of ``problem``, or ``-``."""
    values = [r[key] for r in rows if r["problem"] == problem and r.get(key) is not None]
    if not values:
        return "-"
    return f"{min(values) * 1e6:.1f}-{max(values) * 1e6:.1f}"


def _index(rows: Sequence[dict[str, Any]], *keys: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(r.get(k) for k in keys): r for r in rows}


def format_report(doc: dict[str, Any]) -> str:
    """The JSON document of :func:`~odebench.perf.run_solvers` as readable tables."""
    env = doc["environment"]
    out: list[str] = []
    libs = ", ".join(f"{k} {v}" for k, v in env["libraries"].items())
    out.append(
        f"odebench perf solvers: {env['date']}, torch {env['torch']}, {env['threads']} threads, "
        f"{env['cpu_count']} CPUs ({env['machine']}), python {env['python']}"
        + (", QUICK" if env.get("quick") else "")
    )
    out.append(f"libraries: {libs}")
    for name, reason in env.get("unavailable", {}).items():
        out.append(f"left out: {name}: {reason}")
    out.append("")

    out.append(
        "Problems (one evaluation of the field alone, and with its VJP, before the runs; "
        "then the range of the same over the cells, timed among the runs):"
    )
    out += _table(
        ["problem", "description", "eval us", "eval+VJP us", "eval, cells", "eval+VJP, cells"],
        [
            [
                p["name"],
                p["description"],
                _us(p["eval_time_s"] * 1e6),
                _us(p["eval_vjp_time_s"] * 1e6),
                _range(doc.get("evaluations", []), p["name"], "eval_time_s"),
                _range(doc.get("evaluations", []), p["name"], "eval_vjp_time_s"),
            ]
            for p in doc["problems"]
        ],
        left=2,
    )
    refs: dict[str, list[str]] = {}
    for p in doc["problems"]:
        refs.setdefault(p["reference"], []).append(p["name"])
    for ref, names in refs.items():
        out.append(f"error reference of {', '.join(names)}: {ref}")
    out.append("")

    results = _index(doc["results"], "problem", "method", "library", "figure")
    keys = _supported_keys(doc["results"], "problem", "method", "library")

    columns: list[tuple[str, str, Formatter]] = [
        ("fwd ms", "forward_time_s", _ms),
        ("NFE", "nfe_forward", _int),
        ("ovh", "forward_overhead", _f2),
        ("us/ev", "forward_cost_per_eval_us", _us),
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
    ]
    if keys:  # none when the run has only stiff problems
        out.append(
            "Speed (medians). fwd: forward solve; bp: forward + backward by backprop; adj: by the "
            "adjoint; semi: adjoint with seminorm;"
        )
        out.append(
            "ckpt: checkpointing. ovh: overhead factor (1.0 = only the field's own time). us/ev: "
            "solver's own time per evaluation."
        )
        out.append(
            "NFE/NFEb: evaluations forward/backward. error: max abs error at t1. gdiff: relative "
            "difference from the same library's backprop gradient."
        )
        rows = []
        previous: tuple[str, str] | None = None
        for problem, method, library in keys:
            shown = (problem, method) != previous
            previous = (problem, method)
            cells = [problem if shown else "", method if shown else "", library]
            for _, figure, fmt in columns:
                r = results.get((problem, method, library, figure))
                cells.append(fmt(r["value"] if r else None))
            rows.append(cells)
        out += _table(["problem", "method", "library", *(c[0] for c in columns)], rows, left=3)
        out.append("")

    out += _forward_split(doc)

    if doc["ratios"]:
        ratio_cols = [
            ("fwd", "forward_time_s"),
            ("NFE", "nfe_forward"),
            ("error", "error"),
            ("fwd ovh", "forward_overhead"),
            ("us/ev", "forward_cost_per_eval_us"),
            ("solver us/ev", "forward_solver_cost_per_eval_us"),
            ("bp", "backprop_time_s"),
            ("adj", "adjoint_time_s"),
            ("adj NFEb", "adjoint_nfe_backward"),
            ("semi", "adjoint_seminorm_time_s"),
            ("semi NFEb", "adjoint_seminorm_nfe_backward"),
        ]
        ratios = _index(doc["ratios"], "problem", "method", "peer", "figure")
        rkeys: list[tuple[str, str, str]] = []
        for r in doc["ratios"]:
            key = (r["problem"], r["method"], r["peer"])
            if key not in rkeys:
                rkeys.append(key)
        out.append(
            "Ratios odecore / peer (below 1: odecore faster, fewer evaluations, more accurate):"
        )
        rrows = []
        for problem, method, peer in rkeys:
            cells = [problem, method, peer]
            for _, figure in ratio_cols:
                r = ratios.get((problem, method, peer, figure))
                cells.append(_f2(r["value"] if r else None))
            rrows.append(cells)
        out += _table(["problem", "method", "peer", *(c[0] for c in ratio_cols)], rrows, left=3)
        out.append("")

    out += _compiled_table(doc)
    out += _stiff_table(doc)

    if doc["memory"]:
        mem = _index(doc["memory"], "library", "gradient", "n_steps", "figure")
        steps = sorted({r["n_steps"] for r in doc["memory"] if r["n_steps"] is not None})
        pairs = _supported_keys(doc["memory"], "library", "gradient")
        order = list(env["libraries"])
        pairs.sort(key=lambda p: order.index(p[0]) if p[0] in order else len(order))
        out.append(
            "Peak memory of forward + backward, MLP field, rk4: MiB above the baseline, "
            "each in a fresh process:"
        )
        mrows = []
        for library, gradient in pairs:
            cells = [library, gradient]
            for n in steps:
                r = mem.get((library, gradient, n, "peak_delta_mib"))
                cells.append(_mib(r["value"] if r else None))
            slope = mem.get((library, gradient, None, "mib_per_step"))
            growth = mem.get((library, gradient, None, "delta_growth"))
            cells.append(_g(slope["value"] if slope else None))
            cells.append(_g(growth["value"] if growth else None))
            mrows.append(cells)
        header = ["library", "gradient", *(f"{n} steps" for n in steps), "MiB/step"]
        header.append(f"{steps[-1]}/{steps[0]}" if steps else "growth")
        out += _table(header, mrows, left=2)
        out.append("")

    if doc["gradients"]:
        grads = _index(doc["gradients"], "problem", "library", "gradient", "figure")
        out.append(
            "Gradient error against finite differences (float64; dopri5 at the tolerance "
            "shown; reference: fine rk4):"
        )
        gkeys = [
            k
            for k in _supported_keys(doc["gradients"], "problem", "library", "gradient")
            if k[1] != "finite differences"
        ]
        grows = []
        for problem, library, gradient in gkeys:
            cells = [problem, library, gradient]
            for figure, fmt in (
                ("grad_abs_error", _e),
                ("grad_rel_error", _e),
                ("nfe_forward", _int),
                ("nfe_backward", _int),
                ("nfe_backward_over_forward", _f2),
                ("time_s", _g),
            ):
                r = grads.get((problem, library, gradient, figure))
                cells.append(fmt(r["value"] if r else None))
            grows.append(cells)
        out += _table(
            ["problem", "library", "gradient", "abs err", "rel err", "NFE", "NFEb", "b/f", "s"],
            grows,
            left=3,
        )
        for r in doc["gradients"]:
            if r["library"] == "finite differences":
                value = _g(r["value"]) if r["figure"] == "time_s" else _e(r["value"])
                out.append(f"  {r['problem']} reference {r['figure']}: {value} ({r['note']})")
        out.append("")

    failures: list[str] = []
    seen: set[tuple[Any, ...]] = set()
    for section in ("results", "stiff", "memory", "gradients"):
        for r in doc.get(section, []):
            note = r.get("note") or ""
            if r["value"] is not None or not r.get("supported", True):
                continue
            if not (note.startswith("failed") or "Error" in note or "NaN" in note):
                continue
            what = r.get("gradient") or _mode_of(r["figure"])
            seen_key = (section, r["problem"], r["method"], r["library"], what)
            if seen_key in seen:
                continue
            seen.add(seen_key)
            failures.append(
                f"  {section}: {r['problem']} {r['method']} {r['library']} {what}: {note}"
            )
    if failures:
        out.append("Failed runs:")
        out += failures
        out.append("")
    out.append(f"Wall time: {env.get('wall_time_s', 0.0):.0f} s")
    return "\n".join(out)


def _compiled_table(doc: dict[str, Any]) -> list[str]:
    """``--compile``: compiled odecore against eager odecore, one line per cell."""
    rows = doc.get("compiled") or []
    if not rows:
        return []
    table = [
        [
            r["problem"],
            r["method"],
            r["mode"],
            _ms(r["eager_time_s"]),
            _ms(r["compiled_time_s"]),
            _f2(r["ratio"]),
            _g(r["first_call_s"]),
            _e(r["y1_max_abs_diff"]),
            _e(r["grad_rel_diff"]),
            r["note"] or "",
        ]
        for r in rows
    ]
    header = ["problem", "method", "mode", "eager ms", "compiled ms", "ratio", "first s"]
    out = [
        "Compiled odecore / eager odecore (ratio below 1: compiled faster; first: the "
        "first call, which compiles; diff: compiled result and gradient against eager):"
    ]
    out += _table([*header, "y1 diff", "grad diff", "note"], table, left=3)
    out.append("")
    return out


def _stiff_table(doc: dict[str, Any]) -> list[str]:
    """The stiff problems' sweep: one line per problem and configuration."""
    rows = doc.get("stiff", [])
    if not rows:
        return []
    values = _index(rows, "problem", "method", "figure")
    keys = _supported_keys(rows, "problem", "method", "library")
    table = []
    for problem, method, library in keys:
        cells = [problem, method, library]
        for figure, fmt in (("forward_time_s", _ms), ("nfe_forward", _int), ("error", _e)):
            r = values.get((problem, method, figure))
            cells.append(fmt(r["value"] if r else None))
        table.append(cells)
    out = [
        "Stiff problems: forward solves in float64 (medians; error: max abs error at t1 "
        "against the reference above; failures under Failed runs):"
    ]
    out += _table(["problem", "method", "library", "fwd ms", "NFE", "error"], table, left=3)
    out.append("")
    return out


def _forward_split(doc: dict[str, Any]) -> list[str]:
    """The table that splits each forward overhead factor into floor, solver and the rest."""
    chained = {
        (e["problem"], e["method"]): ratio(e.get("chained_eval_time_s"), e.get("eval_time_s"))
        for e in doc.get("evaluations", [])
        if e["mode"] == "forward"
    }
    results = _index(doc["results"], "problem", "method", "library", "figure")

    def value(key: tuple[str, str, str], figure: str) -> float | None:
        r = results.get((*key, figure))
        return None if r is None else finite(r["value"])

    rows = []
    previous: tuple[str, str] | None = None
    for key in _supported_keys(doc["results"], "problem", "method", "library"):
        overhead, solver = value(key, "forward_overhead"), value(key, "forward_solver_overhead")
        if overhead is None or solver is None:
            continue
        floor = chained.get(key[:2])
        rest = None if floor is None else overhead - floor - solver
        problem, method, library = key
        shown = (problem, method) != previous
        previous = (problem, method)
        rows.append(
            [
                problem if shown else "",
                method if shown else "",
                library,
                _f2(overhead),
                _f2(floor),
                _f2(solver),
                _f2(rest),
                _us(value(key, "forward_solver_cost_per_eval_us")),
            ]
        )
    if not rows:
        return []
    return [
        "Where the forward time goes, in units of NFE x one evaluation alone: ovh = floor + "
        "solver + rest. floor: evaluations chained by one axpy;",
        "solver: the solve replayed from a tape of the field's outputs (the same steps, no "
        "evaluations); rest: the field and the solver slowing each other.",
        *_table(
            ["problem", "method", "library", "ovh", "floor", "solver", "rest", "solver us/ev"],
            rows,
            left=3,
        ),
        "",
    ]

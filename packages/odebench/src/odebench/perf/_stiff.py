"""The stiff problems' work-precision sweep, forward only, into the document's ``stiff``
section (what it runs and why: docs/odebench/index.md)."""

from __future__ import annotations

import importlib.util
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

from torch import Tensor

from ._document import StiffRow, figure_rows, unmeasured
from ._libraries import STIFF_METHODS, Library, Method, describe_error
from ._problems import CountingField, Problem, error_figure, reference_solution
from ._stats import median
from ._timing import Observation, loss_weight, run_once

SWEEP_TOLERANCES = (1e-4, 1e-5, 1e-6, 1e-7, 1e-8)
"""``rtol = atol`` of the full run's sweep."""

QUICK_SWEEP_TOLERANCES = (1e-4, 1e-6)
"""``rtol = atol`` of ``--quick``'s sweep."""

DOPRI5_BUDGET = 10_000
"""Steps ``dopri5`` may take on a stiff problem: about 2 s of steps, far short of the
span (on ``vdp_stiff`` they reach ``t = 11`` of 3000), then a clear failure."""

QUICK_DOPRI5_BUDGET = 2_000

STIFF_LIMIT = 200_000
"""The most evaluations of the field one stiff run may take (``kvaerno5`` at ``1e-8``
on ``[0, 3000]`` takes about 20,000; ``dopri5``'s budget is about 60,000)."""

REFERENCE_TOL = 1e-12
"""``rtol = atol`` of the reference solve (SciPy's Radau, through odecore's backend)."""

STIFF_FIGURE_UNITS: dict[str, str] = {
    "forward_time_s": "s",
    "nfe_forward": "evaluations",
    "error": "max abs error at t1",
}
"""The figures of the ``stiff`` section and their units, the first of a forward cell's."""


def stiff_methods(quick: bool = False) -> tuple[Method, ...]:
    """The configurations of the stiff sweep, in order: every stiff method at each tolerance,
    then ``dopri5`` at ``1e-6`` with its step budget."""
    tols = QUICK_SWEEP_TOLERANCES if quick else SWEEP_TOLERANCES
    sweep = tuple(Method(name, rtol=tol, atol=tol) for name in STIFF_METHODS for tol in tols)
    budget = QUICK_DOPRI5_BUDGET if quick else DOPRI5_BUDGET
    return (*sweep, Method("dopri5", rtol=1e-6, atol=1e-6, max_steps=budget))


def scipy_available() -> bool:
    """Whether SciPy imports here (odecore's ``scipy:`` methods need it)."""
    return importlib.util.find_spec("scipy") is not None


def stiff_reference(problem: Problem, tol: float = REFERENCE_TOL) -> tuple[Tensor, str]:
    """``y(t1)`` of a stiff problem in float64 and where it came from: odecore's
    ``scipy:Radau`` at ``rtol = atol = tol``, or ``kvaerno5`` without SciPy."""
    if not scipy_available():
        y1, note = reference_solution(problem, tol, "kvaerno5")
        return y1, f"{note} (no SciPy)"
    y1, _ = reference_solution(problem, tol, "scipy:Radau")
    return y1, f"SciPy Radau (odecore's scipy:Radau) in float64 at rtol = atol = {tol:g}"


def _unavailable(method: Method) -> str | None:
    if method.name.startswith("scipy:") and not scipy_available():
        return f"{method.name} needs SciPy, which is not installed (pip install scipy)"
    return None


def run_stiff(
    library: Library,
    problem: Problem,
    methods: Sequence[Method],
    reference: Tensor,
    *,
    repeats: int,
    warm_up: bool = True,
    budget_s: float | None = None,
    log: Callable[[str], None] | None = None,
) -> list[StiffRow]:
    """The ``stiff`` rows of odecore's forward solves of ``problem`` by each of ``methods``
    (``atol`` scaled by the problem's ``atol_ratio``): a warm-up run, then ``repeats`` timed
    runs cut to fit ``budget_s``; a failed run is not repeated, its note ``failed: ...``."""
    say = log or (lambda _: None)
    counter = CountingField(problem.field, limit=STIFF_LIMIT)
    weight = loss_weight(problem)
    rows: list[StiffRow] = []
    for given in methods:
        m = given if given.atol is None else replace(given, atol=given.atol * problem.atol_ratio)
        why = _unavailable(m) or library.unsupported(m, "forward")
        if why is not None:
            say(f"  {problem.name} {m.label}: left out ({why})")
            figures = unmeasured(STIFF_FIGURE_UNITS, why)
        else:
            once = partial(run_once, library, problem, counter, m, "forward", weight)
            runs, failure = _runs(once, counter, repeats, warm_up, budget_s)
            figures = _figures(runs, failure, repeats, reference)
            error, why = figures["error"]
            if error is not None:
                t, nfe = figures["forward_time_s"][0], figures["nfe_forward"][0]
                seconds = "-" if t is None else f"{t:.2f} s"
                why = f"{seconds}, {nfe or 0:,.0f} evaluations, error {error:.1e}"
            say(f"  {problem.name} {m.label}: {why}")
        key = (problem.name, m.label, m.name, m.rtol, m.atol, m.max_steps, library.name)
        rows += figure_rows(StiffRow, key, figures, STIFF_FIGURE_UNITS)
    return rows


def _figures(
    observations: list[Observation], failure: str | None, repeats: int, reference: Tensor
) -> dict[str, tuple[float | None, str | None]]:
    """A configuration's figures from its runs (the failure's note where none succeeded)."""
    if not observations:
        return unmeasured(STIFF_FIGURE_UNITS, failure or "no run")
    t = median(o.time_s for o in observations)
    nfe = median(o.nfe_forward for o in observations)
    note = None
    if len(observations) < repeats:
        note = f"{len(observations)} runs instead of {repeats} to fit the time budget"
    if failure is not None:
        note = f"a later run {failure}"
    error = error_figure(observations[-1].y1, reference)
    return {"forward_time_s": (t, note), "nfe_forward": (nfe, None), "error": error}


def _runs(
    once: Callable[[], Observation],
    counter: CountingField,
    repeats: int,
    warm_up: bool,
    budget_s: float | None,
) -> tuple[list[Observation], str | None]:
    """The timed runs of ``once``, and the failure that ended them, if one did."""
    observations: list[Observation] = []
    started = time.perf_counter()
    wanted = repeats
    while len(observations) < wanted:
        try:
            o = once()
        except Exception as exc:
            elapsed = time.perf_counter() - started
            return observations, (
                f"failed: {describe_error(exc)} (after {counter.nfe:,} evaluations, "
                f"{elapsed:.1f} s)"
            )
        if not warm_up:
            observations.append(o)
        elif budget_s is not None and o.time_s > 0:
            wanted = max(1, min(repeats, math.floor(budget_s / o.time_s)))
        warm_up = False
    return observations, None

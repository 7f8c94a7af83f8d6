"""The arithmetic of the benchmark: medians, ratios, overhead factors, interleaving.

Every helper takes ``None`` for a figure that could not be measured and returns
``None`` when its answer is not a finite number, so that a failed run never turns
into a made-up value.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")


def finite(value: float | None) -> float | None:
    """``value`` as a float if it is a finite number, else ``None``."""
    if value is None or isinstance(value, bool):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def median(values: Iterable[float | None]) -> float | None:
    """The median of the finite values (mean of the middle two for an even count).

    ``None`` and non-finite values are left out; ``None`` if nothing is left.
    """
    kept = [v for v in (finite(x) for x in values) if v is not None]
    return statistics.median(kept) if kept else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or ``None`` if either is missing or the quotient is not finite.

    A zero denominator gives ``None`` (no ratio), not infinity, except ``0 / 0``
    which is also ``None``.
    """
    num, den = finite(numerator), finite(denominator)
    if num is None or den is None or den == 0.0:
        return None
    return finite(num / den)


def overhead_factor(
    time_s: float | None, terms: Sequence[tuple[float | None, float | None]]
) -> float | None:
    """A solve's time over the time its function evaluations alone would take.

    ``terms`` holds pairs ``(count, seconds per evaluation)``; the ideal time is
    ``sum(count * seconds)``. For a forward solve that is ``[(nfe, t_eval)]``; for
    forward plus backward with backpropagation ``[(nfe, t_eval_vjp)]``, where
    ``t_eval_vjp`` is one evaluation with its vector-Jacobian product; for the
    adjoint ``[(nfe_forward, t_eval), (nfe_backward, t_eval_vjp)]``. The physical
    limit is 1.0: everything above it is the solver's own cost.

    Returns ``None`` if a figure is missing or the ideal time is zero.
    """
    ideal = 0.0
    for count, seconds in terms:
        c, s = finite(count), finite(seconds)
        if c is None or s is None:
            return None
        ideal += c * s
    return ratio(time_s, ideal)


def cost_per_evaluation(
    time_s: float | None, nfe: float | None, eval_s: float | None
) -> float | None:
    """The solver's own time per function evaluation: ``(time - nfe * eval_s) / nfe``."""
    t, n, e = finite(time_s), finite(nfe), finite(eval_s)
    if t is None or n is None or e is None or n <= 0:
        return None
    return (t - n * e) / n


def interleaved(names: Sequence[T], repeats: int) -> list[tuple[int, T]]:
    """The order of the timed runs: every library once per round, ``A B A B ...``.

    Returns ``(round, name)`` pairs. Interleaving spreads slow drifts of the machine
    (another process, the CPU's clock) over all libraries instead of one.
    """
    if repeats < 0:
        raise ValueError(f"`repeats` must be non-negative, got {repeats}.")
    return [(r, name) for r in range(repeats) for name in names]

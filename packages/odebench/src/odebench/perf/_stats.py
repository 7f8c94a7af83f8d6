"""The arithmetic of the benchmark: medians, ratios, overhead factors.

Every helper takes ``None`` for a figure that could not be measured and returns
``None`` when its answer is not a finite number, so that a failed run never turns
into a made-up value.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence


def finite(value: float | None) -> float | None:
    """``value`` as a float if it is a finite number, else ``None``."""
    if value is None or isinstance(value, bool):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def median(values: Iterable[float | None]) -> float | None:
    """The median of the finite values, ``None`` and non-finite ones left out; ``None`` if
    nothing is left."""
    kept = [v for v in (finite(x) for x in values) if v is not None]
    return statistics.median(kept) if kept else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``; ``None`` if either is missing, the denominator is zero
    or the quotient is not finite."""
    num, den = finite(numerator), finite(denominator)
    if num is None or den is None or den == 0.0:
        return None
    return finite(num / den)


def overhead_factor(
    time_s: float | None, terms: Sequence[tuple[float | None, float | None]]
) -> float | None:
    """A solve's time over ``sum(count * seconds)`` of its ``(count, seconds per evaluation)``
    terms: the overhead factor of docs/odebench/perf.md, 1.0 at the physical limit."""
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

"""The pendulum experiment's model, an MLP field stepped by a fixed-step scheme, and the
errors of its rollouts."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import odecore
import torch
from contnet import fixed_solver
from torch import Tensor, nn

Field = Callable[[Tensor], Tensor]


def mlp_field(hidden: int) -> nn.Sequential:
    """The learned vector field ``f(y)``: float64, 2 -> hidden -> hidden -> 2 with tanh."""
    layers = (nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
    return nn.Sequential(*layers, nn.Linear(hidden, 2)).to(torch.float64)


def step(field: Field, y: Tensor, dt: float, scheme: str) -> Tensor:
    """One step of ``scheme`` (a name of :data:`odecore.FIXED_METHODS`) from ``y``.

    Raises:
        ValueError: for a scheme that is not a fixed-step method of odecore.
    """
    solver = _fixed(scheme)

    def f(t: float, z: Tensor) -> Tensor:
        return field(z)

    return solver.step(f, 0.0, dt, y, solver.init(f, 0.0, y)).y1


@functools.lru_cache(maxsize=32)  # a rollout asks at every step; solvers are immutable
def _fixed(scheme: str) -> odecore.AbstractExplicitRK:
    """The solver ``scheme`` names, one a ContinuousNet steps (as contnet decides)."""
    try:
        return fixed_solver(scheme)[1]
    except ValueError:
        known = ", ".join(odecore.FIXED_METHODS)
        raise ValueError(f"Unknown scheme {scheme!r}; known: {known}.") from None


def rollout(field: Field, y0: Tensor, dt: float, n_steps: int, scheme: str) -> Tensor:
    """The states ``(N, n_steps + 1, 2)`` of ``n_steps`` steps of ``scheme`` from ``y0``."""
    ys = [y0]
    for _ in range(n_steps):
        ys.append(step(field, ys[-1], dt, scheme))
    return torch.stack(ys, dim=1)


def fit_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of ``log(ys)`` against ``log(xs)``; NaN with < 2 points.
    Non-positive or non-finite values are left out."""
    pts = [
        (math.log(x), math.log(y))
        for x, y in zip(xs, ys)
        if x > 0 and y > 0 and math.isfinite(x) and math.isfinite(y)
    ]
    if len(pts) < 2:
        return math.nan
    mx = sum(a for a, _ in pts) / len(pts)
    my = sum(b for _, b in pts) / len(pts)
    den = sum((a - mx) ** 2 for a, _ in pts)
    return sum((a - mx) * (b - my) for a, b in pts) / den if den > 0 else math.nan


def global_error(ys: Tensor, truth: Tensor) -> float:
    """Mean over trajectories of the largest Euclidean state error over the samples
    of ``ys`` and ``truth``, both ``(N, T, 2)`` at the same times."""
    return float((ys - truth).norm(dim=-1).amax(dim=1).mean())

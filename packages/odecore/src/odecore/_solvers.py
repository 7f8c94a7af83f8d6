"""Solvers: how one step is taken and how the solution is read off inside it.

Every Runge-Kutta method is a :class:`ButcherTableau` plus a thin final class;
the stepping code lives once, in :class:`AbstractExplicitRK`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, final

import torch
from torch import Tensor

from ._tableau import (
    BOSH3_TABLEAU,
    DOPRI5_TABLEAU,
    DOPRI8_TABLEAU,
    EULER_TABLEAU,
    HEUN_EULER_TABLEAU,
    HEUN_TABLEAU,
    MIDPOINT_TABLEAU,
    RALSTON_TABLEAU,
    RK4_38_TABLEAU,
    RK4_TABLEAU,
    TSIT5_TABLEAU,
    ButcherTableau,
)

Field = Callable[[float, Tensor], Tensor]
"""A vector field as solvers see it: ``f(t, y)`` with the time as a Python float."""


@dataclass(frozen=True)
class StepResult:
    """What one step computed.

    Attributes:
        y1: the state at the end of the step.
        y_err: the embedded local error estimate, or ``None`` for fixed-step methods.
        ks: the stages ``k_i`` (used for dense output).
        f1: ``f(t1, y1)`` when the method computed it anyway (FSAL), else ``None``.
    """

    y1: Tensor
    y_err: Tensor | None
    ks: tuple[Tensor, ...]
    f1: Tensor | None


class AbstractSolver(abc.ABC):
    """A one-step method: ``step`` advances the state, ``interpolate`` reads inside a step.

    Solvers are stateless; what carries from one step to the next is ``f0``, the
    derivative at the start of the step.

    Attributes:
        order: the order of convergence of the solution.
    """

    order: ClassVar[int]

    @property
    @abc.abstractmethod
    def adaptive(self) -> bool:
        """Whether ``step`` returns an error estimate that a controller can use."""

    def init(self, f: Field, t0: float, y0: Tensor) -> Tensor:
        """Return ``f0 = f(t0, y0)``, the derivative that starts the first step."""
        return f(t0, y0)

    @abc.abstractmethod
    def step(self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor) -> StepResult:
        """Take one step from ``(t0, y0)`` to ``t1``; ``f0`` is ``f(t0, y0)``."""

    @abc.abstractmethod
    def interpolate(
        self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor, step: StepResult, t: float
    ) -> Tensor:
        """The solution at ``t`` in ``(t0, t1]`` of the step that produced ``step``."""


class AbstractExplicitRK(AbstractSolver):
    """Generic explicit Runge-Kutta stepping over any :class:`ButcherTableau`.

    Dense output uses the tableau's continuous extension when it has one (a free
    polynomial in the stages). Otherwise the value at an output time ``t`` inside
    a step ``[t0, t1]`` is computed by a *sub-step*: one step of the same method from
    ``t0`` to ``t``, reusing ``f0``. That is exact to the method's order and its
    error is never larger than the full step's, at ``stages - 1`` extra evaluations
    per output time (and none when output times fall on step ends).

    Subclasses set ``tableau`` and ``order`` only.
    """

    tableau: ClassVar[ButcherTableau]

    @property
    def adaptive(self) -> bool:
        return self.tableau.adaptive

    def step(self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor) -> StepResult:
        tab = self.tableau
        h = t1 - t0
        ks = [f0]
        yi = y0
        for i in range(1, tab.stages):
            yi = _combine(y0, h, tab.a[i], ks)
            ti = t1 if tab.c[i] == 1.0 else t0 + tab.c[i] * h
            ks.append(f(ti, yi))
        if tab.fsal:
            y1, f1 = yi, ks[-1]
        else:
            y1, f1 = _combine(y0, h, tab.b, ks), None
        y_err = None
        if tab.b_err is not None:
            y_err = _combine(torch.zeros_like(y0), h, tab.b_err, ks)
        return StepResult(y1=y1, y_err=y_err, ks=tuple(ks), f1=f1)

    def interpolate(
        self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor, step: StepResult, t: float
    ) -> Tensor:
        if t == t1:
            return step.y1
        tab = self.tableau
        if tab.dense is None:
            return self.step(f, t0, t, y0, f0).y1
        theta = (t - t0) / (t1 - t0)
        weights = [sum(p * theta ** (j + 1) for j, p in enumerate(row)) for row in tab.dense]
        return _combine(y0, t1 - t0, weights, step.ks)


def _combine(
    y0: Tensor,
    h: float,
    weights: tuple[float, ...] | list[float],
    ks: list[Tensor] | tuple[Tensor, ...],
) -> Tensor:
    """``y0 + h * sum_i w_i k_i`` skipping zero weights, without in-place writes."""
    out = y0
    for w, k in zip(weights, ks):
        if w != 0.0:
            out = out.add(k, alpha=h * w)
    return out


# --- fixed-step schemes -------------------------------------------------------------


@final
class Euler(AbstractExplicitRK):
    """Forward Euler: ``y1 = y0 + h f(t0, y0)``.

    Order 1, one stage, fixed step. A residual network's block is one Euler step.

    Example:
        >>> import torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(2), t0=0.0, t1=1.0,
        ...                     solver=odecore.Euler(), dt0=0.5)
        >>> sol.ys[-1]
        tensor([0.2500, 0.2500])

    References:
        L. Euler, Institutionum calculi integralis, 1768.
    """

    tableau = EULER_TABLEAU
    order = 1


@final
class Midpoint(AbstractExplicitRK):
    """The explicit midpoint method.

    Order 2, two stages, fixed step.

    Example:
        >>> import torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1), t0=0.0, t1=1.0,
        ...                     solver=odecore.Midpoint(), dt0=0.5)
        >>> round(sol.ys[-1].item(), 6)
        0.390625

    References:
        C. Runge, Mathematische Annalen 46, 1895.
    """

    tableau = MIDPOINT_TABLEAU
    order = 2


@final
class Heun(AbstractExplicitRK):
    """Heun's method (the explicit trapezoidal rule).

    Order 2, two stages, fixed step.

    Example:
        >>> import torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1), t0=0.0, t1=1.0,
        ...                     solver=odecore.Heun(), dt0=0.5)
        >>> round(sol.ys[-1].item(), 6)
        0.390625

    References:
        K. Heun, Zeitschrift für Mathematik und Physik 45, 1900.
    """

    tableau = HEUN_TABLEAU
    order = 2


@final
class Ralston(AbstractExplicitRK):
    """Ralston's second-order method, the two-stage method of least error bound.

    Order 2, two stages, fixed step.

    Example:
        >>> import torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1), t0=0.0, t1=1.0,
        ...                     solver=odecore.Ralston(), dt0=0.5)
        >>> round(sol.ys[-1].item(), 6)
        0.390625

    References:
        A. Ralston, Mathematics of Computation 16(80), 1962.
    """

    tableau = RALSTON_TABLEAU
    order = 2


@final
class RK4(AbstractExplicitRK):
    """The classic fourth-order Runge-Kutta method (RK4-classic).

    Order 4, four stages, fixed step.

    Example:
        >>> import math, torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1, dtype=torch.float64),
        ...                     t0=0.0, t1=1.0, solver=odecore.RK4(), dt0=0.1)
        >>> abs(sol.ys[-1].item() - math.exp(-1.0)) < 1e-6
        True

    References:
        W. Kutta, Zeitschrift für Mathematik und Physik 46, 1901.
    """

    tableau = RK4_TABLEAU
    order = 4


@final
class RK4ThreeEighths(AbstractExplicitRK):
    """Kutta's 3/8 rule (RK4-3/8).

    Order 4, four stages, fixed step.

    Example:
        >>> import math, torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1, dtype=torch.float64),
        ...                     t0=0.0, t1=1.0, solver=odecore.RK4ThreeEighths(), dt0=0.1)
        >>> abs(sol.ys[-1].item() - math.exp(-1.0)) < 1e-6
        True

    References:
        W. Kutta, Zeitschrift für Mathematik und Physik 46, 1901.
    """

    tableau = RK4_38_TABLEAU
    order = 4


# --- embedded pairs -----------------------------------------------------------------


@final
class HeunEuler(AbstractExplicitRK):
    """Heun's method with an embedded Euler error estimate: the pair 2(1).

    Order 2, two stages, adaptive, no FSAL. Cheap per step; for loose tolerances.

    Example:
        >>> import torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1), t0=0.0, t1=1.0,
        ...                     solver=odecore.HeunEuler())
        >>> sol.status
        <Status.SUCCESS: 0>
    """

    tableau = HEUN_EULER_TABLEAU
    order = 2


@final
class Bosh3(AbstractExplicitRK):
    """Bogacki-Shampine 3(2).

    Order 3 with a second-order estimate, four stages, FSAL (three evaluations per
    step), cubic Hermite dense output. Good at loose tolerances.

    Example:
        >>> import torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1), t0=0.0, t1=1.0,
        ...                     solver=odecore.Bosh3())
        >>> sol.status
        <Status.SUCCESS: 0>

    References:
        P. Bogacki, L. F. Shampine, Applied Mathematics Letters 2(4), 1989.
    """

    tableau = BOSH3_TABLEAU
    order = 3


@final
class Dopri5(AbstractExplicitRK):
    """Dormand-Prince 5(4), the default adaptive solver (torchdiffeq's and scipy's RK45).

    Order 5 with a fourth-order estimate, seven stages, FSAL (six evaluations per
    step), Shampine's free fourth-order dense output.

    Example:
        >>> import math, torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1, dtype=torch.float64),
        ...                     t0=0.0, t1=1.0, solver=odecore.Dopri5(),
        ...                     controller=odecore.PIDController(rtol=1e-8, atol=1e-10))
        >>> abs(sol.ys[-1].item() - math.exp(-1.0)) < 1e-8
        True

    References:
        J. R. Dormand, P. J. Prince, J. Comput. Appl. Math. 6(1), 1980;
        L. F. Shampine, Math. Comp. 46(173), 1986 (dense output).
    """

    tableau = DOPRI5_TABLEAU
    order = 5


@final
class Tsit5(AbstractExplicitRK):
    """Tsitouras' fifth-order Runge-Kutta method with an embedded fourth-order estimate.

    Seven stages, FSAL (six evaluations per step), adaptive, free fourth-order
    dense output. A good default for non-stiff problems.

    Example:
        >>> import torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(2, 1), t0=0.0,
        ...                     t1=1.0, solver=odecore.Tsit5())
        >>> sol.status
        <Status.SUCCESS: 0>

    References:
        Ch. Tsitouras, Computers & Mathematics with Applications 62(2), 2011.
    """

    tableau = TSIT5_TABLEAU
    order = 5


@final
class Dopri8(AbstractExplicitRK):
    """Prince-Dormand 8(7) (RK8(7)13M), for tight tolerances.

    Order 8 with a seventh-order estimate, thirteen stages, adaptive, no FSAL.
    Output times inside a step are computed by an eighth-order sub-step, so their
    error is no larger than at the step ends.

    Example:
        >>> import math, torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1, dtype=torch.float64),
        ...                     t0=0.0, t1=1.0, solver=odecore.Dopri8(),
        ...                     controller=odecore.PIDController(rtol=1e-12, atol=1e-14))
        >>> abs(sol.ys[-1].item() - math.exp(-1.0)) < 1e-12
        True

    References:
        P. J. Prince, J. R. Dormand, J. Comput. Appl. Math. 7(1), 1981.
    """

    tableau = DOPRI8_TABLEAU
    order = 8

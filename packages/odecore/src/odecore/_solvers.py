"""Solvers: how one step is taken and how the solution is read off inside it.

Every Runge-Kutta method is a :class:`ButcherTableau` plus a thin final class;
the stepping code lives once, in :class:`AbstractExplicitRK`.
"""

from __future__ import annotations

import abc
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar, Literal, final

import torch
from torch import Tensor

from ._errors import ConfigurationError, SolverError
from ._tableau import (
    BOSH3_TABLEAU,
    DOPRI5_TABLEAU,
    DOPRI8_TABLEAU,
    EULER_TABLEAU,
    FEHLBERG2_TABLEAU,
    HEUN3_TABLEAU,
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
        failure: why the solver could not take the step (an implicit method's Newton
            iteration failed), as a :class:`SolverError` that is not raised; else
            ``None``. ``y1`` and ``y_err`` are then NaN, so that a controller rejects
            the step; a solve that accepts it ends with the error's status and message.
    """

    y1: Tensor
    y_err: Tensor | None
    ks: tuple[Tensor, ...]
    f1: Tensor | None
    failure: SolverError | None = None


@dataclass
class SolveState:
    """What a solver carries from one step of a solve to the next besides ``f0``.

    Created per solve by :meth:`AbstractSolver.new_state` and passed to every step of
    the solve's loop (:meth:`AbstractSolver.step_with`); the solver objects stay
    frozen. This base holds the counts that :class:`~odecore.Stats` reports; an
    implicit solver's subclass also keeps its Jacobian and factorisation.

    Attributes:
        n_jacobians: Jacobians of the field evaluated.
        n_factorisations: iteration matrices LU-factorised.
        n_newton_iters: Newton iterations made.
    """

    n_jacobians: int = 0
    n_factorisations: int = 0
    n_newton_iters: int = 0


class AbstractSolver(abc.ABC):
    """A one-step method: ``step`` advances the state, ``interpolate`` reads inside a step.

    Solvers hold configuration only; what carries from one step to the next is
    ``f0``, the derivative at the start of the step, and for a solver that keeps more
    (an implicit solver's Jacobian) a :class:`SolveState` made per solve by
    :meth:`new_state`. Times given to a solver always increase (``solve`` flips
    backward problems).

    Attributes:
        order: the order of convergence of the solution.
    """

    order: ClassVar[int]

    @property
    @abc.abstractmethod
    def adaptive(self) -> bool:
        """Whether ``step`` returns an error estimate that a controller can use."""

    @property
    def independent_samples(self) -> bool:
        """Whether a step keeps the samples (rows) of a batch apart, so that each may
        take its own step size (``PIDController(per_sample=True)``)."""
        return False

    def init(self, f: Field, t0: float, y0: Tensor) -> Tensor:
        """Return ``f0 = f(t0, y0)``, the derivative that starts the first step."""
        return f(t0, y0)

    @abc.abstractmethod
    def step(self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor) -> StepResult:
        """Take one step from ``(t0, y0)`` to ``t1``; ``f0`` is ``f(t0, y0)``."""

    def new_state(self) -> SolveState | None:
        """The state a solve threads through its steps; ``None``: the solver keeps none."""
        return None

    def step_with(
        self, state: SolveState | None, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor
    ) -> StepResult:
        """:meth:`step`, with the solve's :meth:`new_state` (which this default ignores)."""
        return self.step(f, t0, t1, y0, f0)

    @abc.abstractmethod
    def interpolate(
        self,
        f: Field,
        t0: float,
        t1: float,
        y0: Tensor,
        f0: Tensor,
        step: StepResult,
        ts: Sequence[float],
    ) -> list[Tensor]:
        """The solution at the times ``ts`` (increasing, in ``(t0, t1]``) of an accepted step."""

    def reader(
        self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor, step: StepResult
    ) -> Callable[[float], Tensor]:
        """The solution inside an accepted step as a function of time, for many reads
        of one step (root finding): ``reader(...)(t)`` is ``interpolate(..., [t])[0]``.
        A solver whose interpolant needs work per step does it once here."""
        return lambda t: self.interpolate(f, t0, t1, y0, f0, step, [t])[0]

    def slopes(
        self,
        f: Field,
        t0: float,
        t1: float,
        y0: Tensor,
        f0: Tensor,
        step: StepResult,
        ts: Sequence[float],
        ys: Sequence[Tensor],
    ) -> list[Tensor]:
        """The time derivative of the dense output at ``ts``, where it takes the values ``ys``.

        Exact gradients with respect to output times that fall inside a step need it.
        This default evaluates the field at the interpolated states, which agrees with
        the interpolant's own derivative to the accuracy of the step; a solver with a
        dense output of its own overrides it with that derivative.
        """
        return [f(t, y) for t, y in zip(ts, ys)]


class _HermiteDense(AbstractSolver):
    """Dense output by the Hermite interpolant through the values and derivatives that
    :meth:`_hermite_data` gives at nodes of the step (its ends, and interior nodes where
    the method's order asks for them). The explicit, implicit and ESDIRK solvers share it.
    """

    interpolation: str = "hermite"

    def _hermite_data(
        self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor, step: StepResult
    ) -> tuple[tuple[tuple[float, ...], ...], list[Tensor], list[Tensor]]:
        """The Hermite interpolant's matrix, and the values and derivatives at its nodes
        (the interior ones reached by sub-steps of the method, none for
        ``interpolation="cubic"``; the cubic through the ends if a sub-step fails)."""
        cubic = self.interpolation == "cubic"
        nodes, matrix = _hermite_basis(0 if cubic else _interior_nodes(self.order))
        ys, fs = [y0], [f0]
        for theta in nodes[1:-1]:
            tm = t0 + theta * (t1 - t0)
            sub = self.step(f, t0, tm, y0, f0)
            if sub.failure is not None:  # the cubic through the ends
                f1 = step.f1 if step.f1 is not None else f(t1, step.y1)
                return _hermite_basis(0)[1], [y0, step.y1], [f0, f1]
            ys.append(sub.y1)
            fs.append(sub.f1 if sub.f1 is not None else f(tm, sub.y1))
        ys.append(step.y1)
        fs.append(step.f1 if step.f1 is not None else f(t1, step.y1))
        return matrix, ys, fs

    def interpolate(
        self,
        f: Field,
        t0: float,
        t1: float,
        y0: Tensor,
        f0: Tensor,
        step: StepResult,
        ts: Sequence[float],
    ) -> list[Tensor]:
        inside = [t for t in ts if t != t1]
        if not inside:
            return [step.y1 for _ in ts]
        read = self.reader(f, t0, t1, y0, f0, step)
        values = {t: read(t) for t in inside}
        return [step.y1 if t == t1 else values[t] for t in ts]

    def reader(
        self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor, step: StepResult
    ) -> Callable[[float], Tensor]:
        matrix, ys, fs = self._hermite_data(f, t0, t1, y0, f0, step)
        n, h = len(ys), t1 - t0

        def read(t: float) -> Tensor:
            if t == t1:
                return step.y1
            w = _hermite_weights(matrix, (t - t0) / h)
            return _combine(_combine(None, 1.0, w[:n], ys), h, w[n:], fs)

        return read

    def slopes(
        self,
        f: Field,
        t0: float,
        t1: float,
        y0: Tensor,
        f0: Tensor,
        step: StepResult,
        ts: Sequence[float],
        ys: Sequence[Tensor],
    ) -> list[Tensor]:
        """The exact time derivative of :meth:`interpolate`'s interpolant at ``ts``."""
        h = t1 - t0
        matrix, values, fs = self._hermite_data(f, t0, t1, y0, f0, step)
        n = len(values)
        out = []
        for t in ts:
            w = _hermite_slopes(matrix, (t - t0) / h)  # d/dtheta of the weights
            out.append(_combine(_combine(None, 1.0 / h, w[:n], values), 1.0, w[n:], fs))
        return out


Interpolation = Literal["auto", "polynomial", "hermite", "cubic"]


@dataclass(frozen=True)
class AbstractExplicitRK(_HermiteDense):
    """Generic explicit Runge-Kutta stepping over any :class:`ButcherTableau`.

    Subclasses set the class variables ``tableau`` and ``order`` only.

    Dense output (the solution at output times inside a step) comes in two kinds:

    * ``"polynomial"``: the tableau's own continuous extension, a polynomial in the
      stages already computed; free, of the order ``tableau.dense_order``.
    * ``"hermite"``: Hermite interpolation of the values and derivatives at the step
      ends and at ``m`` equally spaced interior nodes, whose values come from
      sub-steps of the method itself. With ``m = max(0, ceil((order - 3) / 2))`` the
      interpolant's error is of order ``h**(2m + 4)``, at least the method's local
      error ``h**(order + 1)``, so values between step ends are as accurate as those
      at the ends. It costs ``m`` sub-steps and up to ``m + 1`` evaluations, once
      per step that holds output times (not per output time), and nothing for steps
      without any.
    * ``"cubic"``: the cubic Hermite interpolant of the step's ends alone (``m = 0``),
      torchdiffeq's ``interp="cubic"``: free, but of third order (an error of order
      ``h**4``) whatever the method's order.

    Args:
        interpolation: ``"polynomial"``, ``"hermite"``, ``"cubic"``, or ``"auto"``
            (the default): the polynomial when its order reaches the method's, else
            Hermite.

    Raises:
        ValueError: for an unknown ``interpolation``, or ``"polynomial"`` for a
            tableau without a continuous extension.
    """

    tableau: ClassVar[ButcherTableau]
    interpolation: Interpolation = "auto"

    def __post_init__(self) -> None:
        if self.interpolation not in ("auto", "polynomial", "hermite", "cubic"):
            raise ConfigurationError(
                "`interpolation` must be 'auto', 'polynomial', 'hermite' or 'cubic', got "
                f"{self.interpolation!r}."
            )
        if self.interpolation == "polynomial" and self.tableau.dense is None:
            raise ConfigurationError(
                f"`interpolation='polynomial'`: {type(self).__name__} has no continuous "
                "extension; use 'hermite'."
            )

    @property
    def adaptive(self) -> bool:
        return self.tableau.adaptive

    @property
    def independent_samples(self) -> bool:
        return True  # every stage is the field at its own sample's state

    @property
    def dense_kind(self) -> Literal["polynomial", "hermite"]:
        """The interpolation that ``"auto"`` resolves to for this method (``"cubic"``
        is Hermite's, without interior nodes)."""
        if self.interpolation == "cubic":
            return "hermite"
        if self.interpolation != "auto":
            return self.interpolation
        tab = self.tableau
        if tab.dense is not None and tab.dense_order is not None and tab.dense_order >= self.order:
            return "polynomial"
        return "hermite"

    def step(self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor) -> StepResult:
        plan = _plan(self.tableau)
        h = t1 - t0
        ks = [f0]
        yi = y0
        for c, terms in plan.stages:
            yi = _combine_terms(y0, h, terms, ks)
            ks.append(f(t1 if c == 1.0 else t0 + c * h, yi))
        if plan.fsal:
            y1, f1 = yi, ks[-1]
        else:
            y1, f1 = _combine_terms(y0, h, plan.b, ks), None
        y_err = None
        if plan.err is not None:
            if torch.is_grad_enabled():
                with torch.no_grad():  # step-size control only: no graph, no saved tensors
                    y_err = _combine_terms(None, h, plan.err, ks)
            else:
                y_err = _combine_terms(None, h, plan.err, ks)
        return StepResult(y1=y1, y_err=y_err, ks=tuple(ks), f1=f1)

    def interpolate(
        self,
        f: Field,
        t0: float,
        t1: float,
        y0: Tensor,
        f0: Tensor,
        step: StepResult,
        ts: Sequence[float],
    ) -> list[Tensor]:
        if self.dense_kind != "polynomial":
            return super().interpolate(f, t0, t1, y0, f0, step, ts)
        h = t1 - t0
        inside = [t for t in ts if t != t1]
        if not inside:
            return [step.y1 for _ in ts]
        assert self.tableau.dense is not None  # ensured by dense_kind
        dense = self.tableau.dense
        values = {t: _combine(y0, h, _poly_weights(dense, (t - t0) / h), step.ks) for t in inside}
        return [step.y1 if t == t1 else values[t] for t in ts]

    def reader(
        self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor, step: StepResult
    ) -> Callable[[float], Tensor]:
        if self.dense_kind == "polynomial":
            return AbstractSolver.reader(self, f, t0, t1, y0, f0, step)
        return super().reader(f, t0, t1, y0, f0, step)

    def slopes(
        self,
        f: Field,
        t0: float,
        t1: float,
        y0: Tensor,
        f0: Tensor,
        step: StepResult,
        ts: Sequence[float],
        ys: Sequence[Tensor],
    ) -> list[Tensor]:
        """The exact time derivative of :meth:`interpolate`'s interpolant at ``ts``."""
        if self.dense_kind != "polynomial":
            return super().slopes(f, t0, t1, y0, f0, step, ts, ys)
        h = t1 - t0
        assert self.tableau.dense is not None  # ensured by dense_kind
        dense = self.tableau.dense
        return [_combine(None, 1.0, _poly_slopes(dense, (t - t0) / h), step.ks) for t in ts]


def _poly_slopes(dense: tuple[tuple[float, ...], ...], theta: float) -> list[float]:
    """d/dtheta of :func:`_poly_weights`."""
    return [sum((j + 1) * p * theta**j for j, p in enumerate(row)) for row in dense]


def _hermite_slopes(matrix: tuple[tuple[float, ...], ...], theta: float) -> list[float]:
    """d/dtheta of :func:`_hermite_weights`."""
    u = 2.0 * theta - 1.0
    n = len(matrix)
    return [math.fsum(2 * k * u ** (k - 1) * matrix[k][j] for k in range(1, n)) for j in range(n)]


def _interior_nodes(order: int) -> int:
    return max(0, math.ceil((order - 3) / 2))


def _poly_weights(dense: tuple[tuple[float, ...], ...], theta: float) -> list[float]:
    return [sum(p * theta ** (j + 1) for j, p in enumerate(row)) for row in dense]


@functools.cache
def _hermite_basis(m: int) -> tuple[tuple[float, ...], tuple[tuple[float, ...], ...]]:
    """Nodes ``0, 1/(m+1), ..., 1`` and the matrix mapping node data to coefficients.

    The interpolant is ``p(θ) = sum_k c_k u^k`` in the centred variable
    ``u = 2θ - 1``; it matches ``p(θ_j) = y_j`` and ``dp/dθ(θ_j) = h f_j`` at every
    node, and ``c = M @ [y_0..y_{m+1}, hf_0..hf_{m+1}]``. ``M`` is solved in exact
    rational arithmetic; centring keeps its entries below ~60 for ``m = 3`` (in
    ``θ`` they reach ~1e5), so evaluating in floats loses no more than a few ulps.
    """
    us = [Fraction(2 * j, m + 1) - 1 for j in range(m + 2)]
    n = 2 * len(us)
    rows = [[u**k for k in range(n)] for u in us]
    rows += [[2 * k * u ** (k - 1) if k > 0 else Fraction(0) for k in range(n)] for u in us]
    matrix = tuple(tuple(float(v) for v in r) for r in _invert(rows))
    return tuple(float((u + 1) / 2) for u in us), matrix


def _invert(a: list[list[Fraction]]) -> list[list[Fraction]]:
    """Gauss-Jordan inverse of a small non-singular matrix of fractions."""
    n = len(a)
    aug = [row[:] + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(a)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if aug[r][col] != 0)
        aug[col], aug[pivot] = aug[pivot], aug[col]
        p = aug[col][col]
        aug[col] = [v / p for v in aug[col]]
        for r in range(n):
            if r != col and aug[r][col] != 0:
                factor = aug[r][col]
                aug[r] = [v - factor * w for v, w in zip(aug[r], aug[col])]
    return [row[n:] for row in aug]


def _hermite_weights(matrix: tuple[tuple[float, ...], ...], theta: float) -> list[float]:
    """Weights of the node data ``[y_j..., h f_j...]`` at ``theta``."""
    u = 2.0 * theta - 1.0
    n = len(matrix)
    powers = [u**k for k in range(n)]
    return [math.fsum(powers[k] * matrix[k][j] for k in range(n)) for j in range(n)]


@dataclass(frozen=True)
class _Sum:
    """A weighted sum of stages ``sum_i w_i k_i``, zero weights dropped, laid out for
    :func:`_combine_terms` as ``weight * (k_base + sum_j ratio_j k_j)``.

    ``base`` is the stage of largest weight, so every ratio is at most 1 in size.
    """

    base: int
    weight: float
    rest: tuple[tuple[int, float], ...]


def _sum_of(weights: Sequence[float]) -> _Sum | None:
    """The sum with these stage weights, or ``None`` when every weight is zero."""
    terms = [(i, w) for i, w in enumerate(weights) if w != 0.0]
    if not terms:
        return None
    base, weight = max(terms, key=lambda term: abs(term[1]))
    return _Sum(base, weight, tuple((i, w / weight) for i, w in terms if i != base))


@dataclass(frozen=True)
class _Plan:
    """A tableau's coefficients as the step loop reads them.

    ``stages[i]`` is ``(c, sum)`` for stage ``i + 1``; ``b`` and ``err`` give ``y1``
    and the error estimate.
    """

    stages: tuple[tuple[float, _Sum | None], ...]
    b: _Sum | None
    err: _Sum | None
    fsal: bool


@functools.cache
def _plan(tab: ButcherTableau) -> _Plan:
    return _Plan(
        stages=tuple((tab.c[i], _sum_of(tab.a[i])) for i in range(1, tab.stages)),
        b=_sum_of(tab.b),
        err=None if tab.b_err is None else _sum_of(tab.b_err),
        fsal=tab.fsal,
    )


def _combine_terms(
    y0: Tensor | None, h: float, stage_sum: _Sum | None, ks: Sequence[Tensor]
) -> Tensor:
    """``y0 + h * sum_i w_i k_i`` (``y0 = None``: zero).

    The stages are summed first, at their own scale, and the sum joins ``y0`` in one
    addition. Adding the terms to ``y0`` one by one would round at ``y0``'s scale once
    per term: in float32 that was most of a tight dopri5 solve's global error. The
    sum costs as many ops as the term-by-term form, and leaves the inputs alone.

    Half-precision stages (float16, bfloat16) are summed in float32 and the result
    rounded once: rounding each partial sum cost several ulps a step where the
    weights cancel (Tsit5's reach 12 in size), an error the embedded estimate
    does not see, so a bfloat16 solve missed its tolerance five times over.
    """
    if stage_sum is None:
        return torch.zeros_like(ks[0]) if y0 is None else y0
    scale = h * stage_sum.weight
    base = ks[stage_sum.base]
    if base.dtype in (torch.float16, torch.bfloat16):
        wide = base.float()  # a copy: the in-place sums below leave `ks` alone
        for i, ratio in stage_sum.rest:
            wide.add_(ks[i], alpha=ratio)
        out = wide.mul_(scale) if y0 is None else torch.add(y0, wide, alpha=scale)
        return out.to(base.dtype)
    if not stage_sum.rest:
        return base * scale if y0 is None else y0.add(base, alpha=scale)
    (i, ratio), more = stage_sum.rest[0], stage_sum.rest[1:]
    acc = base.add(ks[i], alpha=ratio)
    for i, ratio in more:
        acc.add_(ks[i], alpha=ratio)
    return acc.mul_(scale) if y0 is None else y0.add(acc, alpha=scale)


def _combine(
    y0: Tensor | None,
    h: float,
    weights: Sequence[float],
    ks: Sequence[Tensor],
) -> Tensor:
    """``y0 + h * sum_i w_i k_i`` (``y0 = None``: zero), skipping zero weights."""
    return _combine_terms(y0, h, _sum_of(weights), ks)


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
class Heun3(AbstractExplicitRK):
    """Heun's third-order method (torchdiffeq's ``heun3``).

    Order 3, three stages (at ``0``, ``h/3`` and ``2h/3``), fixed step, no error
    estimate, no FSAL.

    Example:
        >>> import torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1), t0=0.0, t1=1.0,
        ...                     solver=odecore.Heun3(), dt0=0.5)
        >>> round(sol.ys[-1].item(), 6)  # (1 - h + h**2/2 - h**3/6)**2 with h = 1/2
        0.365017

    References:
        K. Heun, Zeitschrift für Mathematik und Physik 45, 1900.
    """

    tableau = HEUN3_TABLEAU
    order = 3


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

    References:
        K. Heun, Zeitschrift für Mathematik und Physik 45, 1900 (the method); the
        embedded Euler estimate is the classic textbook pair.
    """

    tableau = HEUN_EULER_TABLEAU
    order = 2


@final
class Fehlberg2(AbstractExplicitRK):
    """Fehlberg's pair 2(1) (torchdiffeq's ``fehlberg2``).

    Order 2 with a first-order estimate, three stages, adaptive. The second-order
    solution is propagated (local extrapolation); the third stage is ``f`` at the
    first-order solution, so it is not first-same-as-last here and a step costs
    three evaluations. Output between step ends is cubic Hermite. For loose
    tolerances.

    Example:
        >>> import torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1), t0=0.0, t1=1.0,
        ...                     solver=odecore.Fehlberg2(),
        ...                     controller=odecore.PIDController(rtol=1e-4, atol=1e-6))
        >>> sol.status
        <Status.SUCCESS: 0>

    References:
        E. Fehlberg, Low-order classical Runge-Kutta formulas with stepsize control
        and their application to some heat transfer problems, NASA TR R-315, 1969.
    """

    tableau = FEHLBERG2_TABLEAU
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
    step). Dense output by default: a quintic Hermite interpolant on one sub-step
    (six evaluations per step that holds output times), as accurate as the step
    ends; ``interpolation="polynomial"`` selects Shampine's free fourth-order
    extension instead, whose error between step ends approaches the tolerance.

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

    Seven stages, FSAL (six evaluations per step), adaptive. A good default for
    non-stiff problems. Dense output as :class:`Dopri5`: Hermite on one sub-step by
    default, Tsitouras' free fourth-order extension with
    ``interpolation="polynomial"``.

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
    Output times inside a step are read off a Hermite interpolant of degree nine
    built from three sub-steps, so their error is no larger than at the step ends.

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

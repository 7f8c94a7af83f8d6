"""Implicit Runge-Kutta methods: a full Butcher tableau, stages solved by Newton.

A step of an ``s``-stage implicit method solves for all stage increments
``Z_i = Y_i - y0`` at once,

``Z_i = h sum_j a_ij f(t0 + c_j h, y0 + Z_j)``,

with the simplified Newton iteration of ``_newton.py`` (at most one Jacobian and one
factorisation per step, kept over later steps while the iteration contracts fast:
``Newton.reuse``), and then ``y1 = y0 + h sum_i b_i k_i``. The stage
derivatives are recovered from the increments, ``K = A^{-1} Z / h``, rather than by
evaluating the field again: at a stiff component ``f`` multiplies the Newton error
by the stiffness, ``A^{-1}`` does not (Hairer and Wanner, Solving ODEs II, IV.8).
A stiffly accurate method (last row of ``A`` equal to ``b``) takes ``y1 = y0 + Z_s``.
A method whose first stage is explicit (the first row of ``A`` is zero, as in the
trapezoidal rule) takes ``k_1 = f0`` and solves for the others only.

These are fixed-step methods: :class:`ConstantStepSize` (or ``odeint``'s
``step_size``/``n_steps``) chooses the steps.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal, final

import torch
from torch import Tensor

from ._errors import ConfigurationError
from ._newton import (
    Newton,
    NewtonState,
    attach_gradient,
    failed_step,
    failure,
    newton_solve,
    sum_rows,
)
from ._solvers import (
    Field,
    SolveState,
    StepResult,
    _HermiteDense,
)
from ._tableau import check_weights

_TOL = 1e-12


@dataclass(frozen=True)
class ImplicitButcherTableau:
    """The coefficients of an implicit Runge-Kutta method: a full ``s x s`` matrix.

    A step of size ``h`` from ``(t0, y0)`` solves the stages
    ``k_i = f(t0 + c_i h, y0 + h * sum_j a_ij k_j)`` (every stage may depend on every
    other) and takes ``y1 = y0 + h * sum_i b_i k_i``.

    Args:
        c: the stage times as fractions of the step.
        a: the stage matrix, ``s`` rows of ``s`` entries.
        b: the solution weights; they sum to one.
        b_err: for an embedded pair, ``b`` minus the embedded weights; ``None`` for
            a fixed-step method.

    Raises:
        ValueError: if the shapes disagree, a row of ``a`` does not sum to its ``c``,
            or ``b`` does not sum to one.

    Example:
        >>> tab = ImplicitButcherTableau(c=(1.0,), a=((1.0,),), b=(1.0,))
        >>> tab.stages, tab.stiffly_accurate
        (1, True)
    """

    c: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    b_err: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        s = len(self.c)
        check_weights(self.c, self.a, self.b, self.b_err, lambda i: s, "a full matrix")
        if self.explicit_first and self.c[0] != 0.0:
            raise ValueError(f"a zero first row of `a` needs `c[0] == 0`, got {self.c[0]!r}.")

    @property
    def stages(self) -> int:
        """Number of stages."""
        return len(self.c)

    @property
    def adaptive(self) -> bool:
        """Whether the tableau has an embedded error estimate."""
        return self.b_err is not None

    @property
    def fsal(self) -> bool:
        """Always ``False``: the next step's ``f0`` is evaluated at ``y1``."""
        return False

    @property
    def explicit_first(self) -> bool:
        """Whether the first stage is ``f(t0, y0)`` itself (the first row of ``a`` is zero)."""
        return all(x == 0.0 for x in self.a[0])

    @property
    def stiffly_accurate(self) -> bool:
        """Whether ``y1`` is the last stage: the last row of ``a`` equals ``b``, ``c[-1] == 1``."""
        return self.c[-1] == 1.0 and all(abs(x - y) <= _TOL for x, y in zip(self.a[-1], self.b))


@dataclass(frozen=True)
class _Plan:
    """A tableau as the step reads it: the implicit stages ``I``, the coefficients
    among them, and the weights of ``y1`` on the increments ``Z_I``."""

    implicit: tuple[int, ...]
    a: tuple[tuple[float, ...], ...]  # a[I][I]
    first: tuple[float, ...]  # a[I][0] when the first stage is explicit, else ()
    times: tuple[float, ...]  # c[I]
    d: tuple[float, ...]  # y1 = y0 + h b_0 f0 (explicit first) + sum_i d_i (Z_I - h a_I0 f0)_i
    b0: float
    last: bool  # stiffly accurate: y1 = y0 + Z_last
    err: tuple[float, ...] | None  # the same for b_err: y_err = h e_0 f0 + sum_i err_i (...)_i
    err0: float


@functools.cache
def _plan(tab: ImplicitButcherTableau) -> _Plan:
    start = 1 if tab.explicit_first else 0
    idx = tuple(range(start, tab.stages))
    a = tuple(tuple(tab.a[i][j] for j in idx) for i in idx)
    matrix = torch.tensor(a, dtype=torch.float64)
    weights = torch.tensor([tab.b[i] for i in idx], dtype=torch.float64)
    # d^T = b_I^T A_II^{-1}: the weights of y1 on the increments.
    d = torch.linalg.solve(matrix.T, weights).tolist()
    err = None
    if tab.b_err is not None:
        err_weights = torch.tensor([tab.b_err[i] for i in idx], dtype=torch.float64)
        err = tuple(torch.linalg.solve(matrix.T, err_weights).tolist())
    return _Plan(
        implicit=idx,
        a=a,
        first=tuple(tab.a[i][0] for i in idx) if start else (),
        times=tuple(tab.c[i] for i in idx),
        d=tuple(d),
        b0=tab.b[0] if start else 0.0,
        last=tab.stiffly_accurate,
        err=err,
        err0=tab.b_err[0] if start and tab.b_err is not None else 0.0,
    )


def check_settings(newton: object, interpolation: object) -> None:
    """The checks of an implicit solver's ``newton`` and ``interpolation``.

    Raises:
        ConfigurationError: a ``newton`` that is not a :class:`Newton`, or an
            ``interpolation`` other than ``"hermite"`` and ``"cubic"``.
    """
    if not isinstance(newton, Newton):
        raise ConfigurationError(
            "`newton` must be an odecore.Newton (e.g. odecore.Newton(max_iters=8)), "
            f"got {newton!r}."
        )
    if interpolation not in ("hermite", "cubic"):
        raise ConfigurationError(
            f"`interpolation` must be 'hermite' or 'cubic', got {interpolation!r}."
        )


@dataclass(frozen=True)
class AbstractImplicitRK(_HermiteDense):
    """Generic implicit Runge-Kutta stepping over any :class:`ImplicitButcherTableau`.

    Subclasses set the class variables ``tableau`` and ``order``. The stage
    equations are solved by simplified Newton (see :class:`Newton`): a Jacobian of
    the field at the start of a step and its factorisation, kept over the following
    steps while the iteration contracts fast (``Newton.reuse``), and a few iterations
    of ``s`` evaluations each. A step whose iteration fails with a kept Jacobian is
    retried once with a new one. A step whose iteration fails (it runs out of
    ``max_iters``, stops contracting, or meets a singular iteration matrix) is a NaN
    step that carries the reason: a fixed-step solve ends there with
    ``Status.NEWTON_FAILED`` (under ``throw=True`` a :class:`SolverError` naming the
    step size, the time and the reason), with the output up to the step's start as a
    solve to that time gives it; a step-size controller would retry it smaller.

    Gradients: the iteration runs without a graph, and the stages get the
    derivative of the exact solution of the stage equations from the implicit
    function theorem (one more Jacobian per stage and a transposed solve in the
    backward pass), so backpropagation costs no memory per iteration and is exact
    for the discrete scheme. That correction costs one more evaluation per stage in
    every step taken with gradients enabled; run inference under ``torch.no_grad()``.

    Dense output is Hermite interpolation on the step's ends and ``m`` interior
    nodes reached by sub-steps, as :class:`AbstractExplicitRK`'s ``"hermite"``:
    cubic for order up to 3, as accurate as the step's ends above;
    ``interpolation="cubic"`` keeps the cubic on the ends at every order
    (torchdiffeq's ``interp="cubic"``: free, but of third order).

    A tableau with ``b_err`` gives the raw embedded estimate
    ``h sum_i b_err_i k_i`` as the step's error, for a step-size controller; the
    methods shipped here have none (they are fixed-step).

    Args:
        newton: the settings of the Newton iteration.
        interpolation: output between step ends: ``"hermite"`` (default) or
            ``"cubic"``.

    Raises:
        ConfigurationError: if ``newton`` is not a :class:`Newton`, or for an unknown
            ``interpolation``.
    """

    tableau: ClassVar[ImplicitButcherTableau]
    newton: Newton = field(default_factory=Newton)
    interpolation: Literal["hermite", "cubic"] = "hermite"

    def __post_init__(self) -> None:
        check_settings(self.newton, self.interpolation)

    @property
    def adaptive(self) -> bool:
        return self.tableau.adaptive

    @property
    def dense_kind(self) -> Literal["hermite"]:
        """Always ``"hermite"``."""
        return "hermite"

    def new_state(self) -> NewtonState:
        return NewtonState()

    def step(self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor) -> StepResult:
        return self.step_with(None, f, t0, t1, y0, f0)

    def step_with(
        self, state: SolveState | None, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor
    ) -> StepResult:
        plan = _plan(self.tableau)
        work = state if isinstance(state, NewtonState) else NewtonState()
        h = t1 - t0
        times = [t1 if c == 1.0 else t0 if c == 0.0 else t0 + c * h for c in plan.times]
        rtol, atol = self.newton.tolerances(y0)
        base0, f0_bare = y0.detach(), f0.detach()
        scale = atol + rtol * base0.abs()

        def residual(z: Tensor, base: Tensor, fa: Tensor) -> Tensor:
            derivs = [f(t, base + zi) for t, zi in zip(times, z.unbind(0))]
            out = []
            for i, row in enumerate(plan.a):
                rhs = sum_rows(row, derivs)
                if plan.first:
                    rhs = rhs.add(fa, alpha=plan.first[i])
                out.append(z[i] - h * rhs)
            return torch.stack(out)

        guess = torch.stack([(c * h) * f0_bare for c in plan.times])
        for _ in range(2):  # a kept Jacobian that fails is replaced once (it is fresh then)
            matrix, fresh = work.step_matrix(f, t0, base0, h, plan.a, self.newton)
            result = newton_solve(
                lambda z: residual(z, base0, f0_bare), guess, matrix, self.newton, scale
            )
            work.iterated(result, self.newton)
            if result.converged or fresh:
                break
        if not result.converged:
            why = failure(result, t0, t1, getattr(f, "direction", 1.0))
            return failed_step(y0, why, 1, self.tableau.adaptive)
        z = result.z
        if torch.is_grad_enabled():
            with torch.enable_grad():
                exact = residual(z, y0, f0)
            if exact.requires_grad:
                points = [(t, base0 + zi) for t, zi in zip(times, z.unbind(0))]
                exact_matrix = work.build(f, points, h, plan.a, self.newton, exact=True)
                z = attach_gradient(z, exact, exact_matrix)
        zs = z.unbind(0)
        if plan.first:  # h A_II K_I: the increments less the explicit stage's part
            zs = tuple(zi - (h * ai) * f0 for zi, ai in zip(zs, plan.first))
        if plan.last:
            y1 = y0 + z[-1]
        else:
            y1 = y0 + sum_rows(plan.d, zs)
            if plan.b0 != 0.0:
                y1 = y1 + (h * plan.b0) * f0
        y_err = None
        if plan.err is not None:
            with torch.no_grad():  # step-size control only
                y_err = sum_rows(plan.err, [x.detach() for x in zs])
                if plan.err0 != 0.0:
                    y_err = y_err + (h * plan.err0) * f0_bare
        return StepResult(y1=y1, y_err=y_err, ks=(f0,), f1=None)


_SQRT3 = math.sqrt(3.0)
_SQRT6 = math.sqrt(6.0)
_SQRT15 = math.sqrt(15.0)

IMPLICIT_EULER_TABLEAU = ImplicitButcherTableau(c=(1.0,), a=((1.0,),), b=(1.0,))
"""Backward Euler: order 1, one stage, stiffly accurate (Radau IIA with one stage)."""

IMPLICIT_MIDPOINT_TABLEAU = ImplicitButcherTableau(c=(0.5,), a=((0.5,),), b=(1.0,))
"""The implicit midpoint rule: order 2, one stage (Gauss-Legendre with one stage)."""

TRAPEZOID_TABLEAU = ImplicitButcherTableau(c=(0.0, 1.0), a=((0.0, 0.0), (0.5, 0.5)), b=(0.5, 0.5))
"""The trapezoidal rule (Crank-Nicolson, Lobatto IIIA with two stages): order 2, the
first stage explicit, stiffly accurate."""

GAUSS_LEGENDRE4_TABLEAU = ImplicitButcherTableau(
    c=(0.5 - _SQRT3 / 6, 0.5 + _SQRT3 / 6),
    a=((0.25, 0.25 - _SQRT3 / 6), (0.25 + _SQRT3 / 6, 0.25)),
    b=(0.5, 0.5),
)
"""Gauss-Legendre with two stages: order 4."""

GAUSS_LEGENDRE6_TABLEAU = ImplicitButcherTableau(
    c=(0.5 - _SQRT15 / 10, 0.5, 0.5 + _SQRT15 / 10),
    a=(
        (5 / 36, 2 / 9 - _SQRT15 / 15, 5 / 36 - _SQRT15 / 30),
        (5 / 36 + _SQRT15 / 24, 2 / 9, 5 / 36 - _SQRT15 / 24),
        (5 / 36 + _SQRT15 / 30, 2 / 9 + _SQRT15 / 15, 5 / 36),
    ),
    b=(5 / 18, 4 / 9, 5 / 18),
)
"""Gauss-Legendre with three stages: order 6."""

RADAU_IIA3_TABLEAU = ImplicitButcherTableau(
    c=(1 / 3, 1.0), a=((5 / 12, -1 / 12), (0.75, 0.25)), b=(0.75, 0.25)
)
"""Radau IIA with two stages: order 3, stiffly accurate, L-stable."""

RADAU_IIA5_TABLEAU = ImplicitButcherTableau(
    c=(0.4 - _SQRT6 / 10, 0.4 + _SQRT6 / 10, 1.0),
    a=(
        (11 / 45 - 7 * _SQRT6 / 360, 37 / 225 - 169 * _SQRT6 / 1800, -2 / 225 + _SQRT6 / 75),
        (37 / 225 + 169 * _SQRT6 / 1800, 11 / 45 + 7 * _SQRT6 / 360, -2 / 225 - _SQRT6 / 75),
        (4 / 9 - _SQRT6 / 36, 4 / 9 + _SQRT6 / 36, 1 / 9),
    ),
    b=(4 / 9 - _SQRT6 / 36, 4 / 9 + _SQRT6 / 36, 1 / 9),
)
"""Radau IIA with three stages: order 5, stiffly accurate, L-stable (RADAU5's method)."""

_GAMMA = 1.0 - math.sqrt(2.0) / 2

SDIRK2_TABLEAU = ImplicitButcherTableau(
    c=(_GAMMA, 1.0), a=((_GAMMA, 0.0), (1.0 - _GAMMA, _GAMMA)), b=(1.0 - _GAMMA, _GAMMA)
)
"""Alexander's two-stage SDIRK: order 2, one diagonal ``gamma = 1 - sqrt(2)/2``,
stiffly accurate, L-stable."""

TRBDF2_TABLEAU = ImplicitButcherTableau(
    c=(0.0, 2 * _GAMMA, 1.0),
    a=(
        (0.0, 0.0, 0.0),
        (_GAMMA, _GAMMA, 0.0),
        (math.sqrt(2.0) / 4, math.sqrt(2.0) / 4, _GAMMA),
    ),
    b=(math.sqrt(2.0) / 4, math.sqrt(2.0) / 4, _GAMMA),
)
"""TR-BDF2 as an ESDIRK: a trapezoidal stage to ``2 gamma h``, then BDF2 to the step's
end (``gamma = 1 - sqrt(2)/2``): order 2, the first stage explicit, stiffly accurate,
L-stable."""


@final
@dataclass(frozen=True)
class ImplicitEuler(AbstractImplicitRK):
    """Backward (implicit) Euler: ``y1 = y0 + h f(t1, y1)``.

    Order 1, one implicit stage, fixed step, L-stable: the stiff components decay
    at any step size. torchdiffeq's ``implicit_euler``.

    Args:
        newton: the settings of the Newton iteration.

    Example:
        >>> import torch, odecore
        >>> sol = odecore.solve(lambda t, y: -1e4 * y, torch.ones(1, dtype=torch.float64),
        ...                     t0=0.0, t1=1.0, solver=odecore.ImplicitEuler(), dt0=0.1)
        >>> bool(0 < sol.ys[-1].item() < 1e-30)  # explicit Euler would blow up
        True

    References:
        E. Hairer, G. Wanner, Solving Ordinary Differential Equations II, 2nd ed.,
        Springer 1996, Section IV.3.
    """

    tableau = IMPLICIT_EULER_TABLEAU
    order = 1


@final
@dataclass(frozen=True)
class ImplicitMidpoint(AbstractImplicitRK):
    """The implicit midpoint rule: ``y1 = y0 + h f(t0 + h/2, (y0 + y1) / 2)``.

    Order 2, one implicit stage, fixed step, A-stable and symplectic: it conserves
    every quadratic invariant (the energy of a linear oscillator, the norm under a
    rotation). torchdiffeq's ``implicit_midpoint``; the same method as
    :class:`GaussLegendre2`.

    Args:
        newton: the settings of the Newton iteration.

    Example:
        >>> import torch, odecore
        >>> rotation = lambda t, y: torch.stack([-y[1], y[0]])
        >>> sol = odecore.solve(rotation, torch.tensor([1.0, 0.0], dtype=torch.float64),
        ...                     t0=0.0, t1=10.0, solver=odecore.ImplicitMidpoint(), dt0=0.5)
        >>> abs(sol.ys[-1].norm().item() - 1.0) < 1e-9  # the norm is conserved
        True

    References:
        E. Hairer, C. Lubich, G. Wanner, Geometric Numerical Integration, 2nd ed.,
        Springer 2006, Section IV.2.
    """

    tableau = IMPLICIT_MIDPOINT_TABLEAU
    order = 2


@final
@dataclass(frozen=True)
class Trapezoid(AbstractImplicitRK):
    """The trapezoidal rule (Crank-Nicolson): ``y1 = y0 + h/2 (f(t0, y0) + f(t1, y1))``.

    Order 2, two stages of which the first is explicit (Lobatto IIIA), fixed step,
    A-stable but not L-stable: very stiff components are not damped, they flip sign
    from step to step. torchdiffeq's ``trapezoid``.

    Args:
        newton: the settings of the Newton iteration.

    Example:
        >>> import math, torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1, dtype=torch.float64),
        ...                     t0=0.0, t1=1.0, solver=odecore.Trapezoid(), dt0=0.5)
        >>> round(sol.ys[-1].item(), 6)  # ((1 - h/2) / (1 + h/2))**2 with h = 1/2
        0.36

    References:
        J. Crank, P. Nicolson, Proc. Cambridge Philos. Soc. 43(1), 1947.
    """

    tableau = TRAPEZOID_TABLEAU
    order = 2


@final
@dataclass(frozen=True)
class GaussLegendre2(AbstractImplicitRK):
    """Gauss-Legendre collocation with one stage: the implicit midpoint rule.

    Order 2 (the highest for one stage), fixed step, A-stable and symplectic.
    torchdiffeq's ``gauss_legendre2``; the same method as :class:`ImplicitMidpoint`.

    Args:
        newton: the settings of the Newton iteration.

    Example:
        >>> import math, torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1, dtype=torch.float64),
        ...                     t0=0.0, t1=1.0, solver=odecore.GaussLegendre2(), dt0=0.5)
        >>> round(sol.ys[-1].item(), 6)  # ((1 - h/2) / (1 + h/2))**2 with h = 1/2
        0.36

    References:
        J. C. Butcher, Math. Comp. 18(85), 1964.
    """

    tableau = IMPLICIT_MIDPOINT_TABLEAU
    order = 2


@final
@dataclass(frozen=True)
class GaussLegendre4(AbstractImplicitRK):
    """Gauss-Legendre collocation with two stages.

    Order 4 (the highest for two stages), fixed step, A-stable and symplectic.
    torchdiffeq's ``gauss_legendre4``.

    Args:
        newton: the settings of the Newton iteration.

    Example:
        >>> import math, torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1, dtype=torch.float64),
        ...                     t0=0.0, t1=1.0, solver=odecore.GaussLegendre4(), dt0=0.1)
        >>> abs(sol.ys[-1].item() - math.exp(-1.0)) < 1e-7
        True

    References:
        J. C. Butcher, Math. Comp. 18(85), 1964.
    """

    tableau = GAUSS_LEGENDRE4_TABLEAU
    order = 4


@final
@dataclass(frozen=True)
class GaussLegendre6(AbstractImplicitRK):
    """Gauss-Legendre collocation with three stages.

    Order 6 (the highest for three stages), fixed step, A-stable and symplectic.
    torchdiffeq's ``gauss_legendre6``.

    Args:
        newton: the settings of the Newton iteration.

    Example:
        >>> import math, torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1, dtype=torch.float64),
        ...                     t0=0.0, t1=1.0, solver=odecore.GaussLegendre6(), dt0=0.25)
        >>> abs(sol.ys[-1].item() - math.exp(-1.0)) < 1e-9
        True

    References:
        J. C. Butcher, Math. Comp. 18(85), 1964.
    """

    tableau = GAUSS_LEGENDRE6_TABLEAU
    order = 6


@final
@dataclass(frozen=True)
class RadauIIA3(AbstractImplicitRK):
    """Radau IIA collocation with two stages.

    Order 3, fixed step, stiffly accurate and L-stable: stiff components decay at
    any step size. torchdiffeq's ``radauIIA3``.

    Args:
        newton: the settings of the Newton iteration.

    Example:
        >>> import torch, odecore
        >>> sol = odecore.solve(lambda t, y: -1e4 * y, torch.ones(1, dtype=torch.float64),
        ...                     t0=0.0, t1=1.0, solver=odecore.RadauIIA3(), dt0=0.1)
        >>> bool(abs(sol.ys[-1].item()) < 1e-20)
        True

    References:
        B. L. Ehle, Report CS 2, University of Waterloo, 1969; E. Hairer, G. Wanner,
        Solving Ordinary Differential Equations II, 2nd ed., Springer 1996, IV.5.
    """

    tableau = RADAU_IIA3_TABLEAU
    order = 3


@final
@dataclass(frozen=True)
class RadauIIA5(AbstractImplicitRK):
    """Radau IIA collocation with three stages, the method of Hairer and Wanner's RADAU5.

    Order 5, fixed step, stiffly accurate and L-stable. torchdiffeq's ``radauIIA5``.

    Args:
        newton: the settings of the Newton iteration.

    Example:
        >>> import math, torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1, dtype=torch.float64),
        ...                     t0=0.0, t1=1.0, dt0=0.1,
        ...                     solver=odecore.RadauIIA5(newton=odecore.Newton(max_iters=8)))
        >>> abs(sol.ys[-1].item() - math.exp(-1.0)) < 1e-9
        True

    References:
        B. L. Ehle, Report CS 2, University of Waterloo, 1969; E. Hairer, G. Wanner,
        Solving Ordinary Differential Equations II, 2nd ed., Springer 1996, IV.5.
    """

    tableau = RADAU_IIA5_TABLEAU
    order = 5


@final
@dataclass(frozen=True)
class SDIRK2(AbstractImplicitRK):
    """Alexander's singly diagonally implicit Runge-Kutta method with two stages.

    Order 2, fixed step, stiffly accurate and L-stable: both stages share the
    diagonal ``gamma = 1 - sqrt(2)/2``. torchdiffeq's ``sdirk2``.

    Args:
        newton: the settings of the Newton iteration.

    Example:
        >>> import torch, odecore
        >>> sol = odecore.solve(lambda t, y: -1e4 * y, torch.ones(1, dtype=torch.float64),
        ...                     t0=0.0, t1=1.0, solver=odecore.SDIRK2(), dt0=0.1)
        >>> bool(abs(sol.ys[-1].item()) < 1e-20)
        True

    References:
        R. Alexander, SIAM J. Numer. Anal. 14(6), 1977; E. Hairer, G. Wanner, Solving
        Ordinary Differential Equations II, 2nd ed., Springer 1996, IV.6.
    """

    tableau = SDIRK2_TABLEAU
    order = 2


@final
@dataclass(frozen=True)
class TRBDF2(AbstractImplicitRK):
    """TR-BDF2: a trapezoidal step to ``2 gamma h``, then BDF2 to the step's end.

    Order 2, fixed step, stiffly accurate and L-stable, written as a three-stage
    ESDIRK whose first stage is explicit (``gamma = 1 - sqrt(2)/2``).
    torchdiffeq's ``trbdf2``.

    Args:
        newton: the settings of the Newton iteration.

    Example:
        >>> import math, torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1, dtype=torch.float64),
        ...                     t0=0.0, t1=1.0, solver=odecore.TRBDF2(), dt0=0.01)
        >>> abs(sol.ys[-1].item() - math.exp(-1.0)) < 1e-5
        True

    References:
        R. E. Bank et al., IEEE Trans. Electron Devices 32(10), 1985; M. E. Hosea,
        L. F. Shampine, Appl. Numer. Math. 20, 1996.
    """

    tableau = TRBDF2_TABLEAU
    order = 2

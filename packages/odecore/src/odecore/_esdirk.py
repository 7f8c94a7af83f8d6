"""ESDIRK methods: adaptive implicit Runge-Kutta pairs for stiff problems.

An ESDIRK method (explicit first stage, singly diagonally implicit) has a lower
triangular coefficient matrix whose diagonal is ``0, gamma, gamma, ..., gamma``. Its
first stage is ``f(t0, y0)``, known from the previous step; every later stage solves
one implicit equation of the state's size,

``z_i = psi_i + h gamma f(t0 + c_i h, z_i)``,  ``psi_i = y0 + h sum_{j<i} a_ij k_j``,

and its derivative is read back as ``k_i = (z_i - psi_i) / (h gamma)``: no extra
evaluation, and for a stiff component more accurate than ``f(t_i, z_i)``, which
amplifies the iteration's error by the stiffness.

**At most one factorisation per step.** Because the diagonal is constant, every
stage's simplified Newton iteration (see :mod:`odecore._newton`) uses the same matrix
``I - h gamma J`` with ``J`` the field's Jacobian at ``(t0, y0)``: it is built and
LU-factorised once per step (or, for large states, applied matrix-free by GMRES) and
reused by all six implicit stages and all their iterations. With ``Newton.reuse`` (the
default) the matrix is kept over the following steps too while the iterations contract
fast, as RADAU5 keeps it (:class:`odecore._newton.NewtonState`, made per solve by
:meth:`new_state`).

**Jacobians** come from :func:`odecore._newton.jacobian` (autograd, or forward
differences for a field without a graph from the state, such as the adjoint's
augmented field); a state larger than ``Newton.dense_limit`` is solved matrix-free by
GMRES. Either way the Jacobian only steers the iteration: the stages are solved to the
Newton tolerance whatever it is.

**Failed iterations.** When a stage's iteration does not converge with the Jacobian of
the step's start (a strongly nonlinear field, or a long step), the Jacobian is taken
again at that stage's first guess, kept for the later stages, and the stage retried
once. If it fails again the step is rejected: its state and error estimate are NaN,
which the :class:`~odecore.PIDController` answers with a step five times smaller, as it
does for any non-finite step. The step carries the reason
(:func:`odecore._newton.failure`): under :class:`~odecore.ConstantStepSize`, which
accepts every step, the solve ends before the step with ``Status.NEWTON_FAILED``, and a
:class:`~odecore.SolverError` under ``throw=True`` names the step size, the time and
the reason; so does an adaptive solve whose retries shrink the step to nothing.

**Gradients** of a step by backpropagation do not go through the iterations: each
stage's converged value gets the implicit function theorem's derivative
(:func:`odecore._newton.attach_gradient`), with the exact Jacobian at the stage.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import ClassVar, Literal, final

import torch
from torch import Tensor

from ._controllers import ATOL, RTOL
from ._implicit import ImplicitButcherTableau, check_settings
from ._newton import (
    Newton,
    NewtonState,
    attach_gradient,
    failed_step,
    failure,
    newton_solve,
)
from ._solvers import (
    AbstractSolver,
    Field,
    SolveState,
    StepResult,
    _combine,
    _HermiteDense,
)

# --- the tableau ----------------------------------------------------------------------


def _esdirk_tableau(gamma: str, rows: Sequence[Sequence[str]]) -> ImplicitButcherTableau:
    """The full tableau of a stiffly accurate ESDIRK pair from the published decimals
    of its strictly lower part: the diagonal is ``0, gamma, ..., gamma``, ``c`` the
    exact row sums, the solution the last stage and the embedded one the stage before."""
    g = Fraction(gamma)
    s = len(rows)
    full = [
        [Fraction(row[j]) if j < i else (g if j == i and i > 0 else Fraction(0)) for j in range(s)]
        for i, row in enumerate(rows)
    ]
    return ImplicitButcherTableau(
        c=tuple(float(sum(row, Fraction(0))) for row in full),
        a=tuple(tuple(float(x) for x in row) for row in full),
        b=tuple(float(x) for x in full[-1]),
        b_err=tuple(float(x - y) for x, y in zip(full[-1], full[-2])),
    )


KVAERNO5_TABLEAU = _esdirk_tableau(
    "0.26",
    [
        [],
        ["0.26"],
        ["0.13", "0.84033320996790809"],
        ["0.22371961478320505", "0.47675532319799699", "-0.06470895363112615"],
        ["0.16648564323248321", "0.10450018841591720", "0.03631482272098715",
         "-0.13090704451073998"],
        ["0.13855640231268224", "0", "-0.04245337201752043", "0.02446657898003141",
         "0.61943039072480676"],
        ["0.13659751177640291", "0", "-0.05496908796538376", "-0.04118626728321046",
         "0.62993304899016403", "0.06962479448202728"],
    ],
)  # fmt: skip
"""Kværnø's ESDIRK 5(4) pair as a full implicit tableau: seven stages, the first
explicit, the diagonal ``gamma = 0.26`` after it. The solution is the last stage value
(``b`` is the last row of ``a``) and the embedded fourth-order solution the one before
(``b - b_err`` is the sixth row): both stiffly accurate; the solution is L-stable,
the embedded one A-stable. The stage times are
``c = (0, 0.52, 1.2303..., 0.8958..., 0.4364..., 1, 1)``: the third stage is evaluated
past the end of the step.

The coefficients are the published 17-digit decimals; they meet the order conditions
of order 5 (the solution) and 4 (the embedded one) to rounding.
"""


@dataclass(frozen=True)
class _Plan:
    """An ESDIRK tableau as the step reads it."""

    gamma: float
    lower: tuple[tuple[float, ...], ...]  # row i: a_ij for j < i
    c: tuple[float, ...]


def _last_two(tab: ImplicitButcherTableau) -> bool:
    """Whether ``b`` is the last row of ``a`` and ``b - b_err`` the row before, at ``c = 1``."""
    if tab.b_err is None or tab.b != tab.a[-1] or tab.c[-2] != 1.0:
        return False
    return all(abs(b - e - x) <= 1e-15 for b, e, x in zip(tab.b, tab.b_err, tab.a[-2]))


@functools.cache
def _plan(tab: ImplicitButcherTableau) -> _Plan:
    """The ESDIRK structure of ``tab``, checked: explicit first stage, one diagonal
    value after it, nothing above the diagonal, solution and embedded solution the
    last two stages."""
    s = tab.stages
    gamma = tab.a[1][1] if s > 1 else 0.0
    problems = []
    if s < 3:
        problems.append(f"it has {s} stages, fewer than 3")
    else:
        if any(x != 0.0 for x in tab.a[0]):
            problems.append("its first stage is not explicit")
        if not gamma > 0 or any(tab.a[i][i] != gamma for i in range(1, s)):
            problems.append("its diagonal is not one positive value after the first stage")
        if any(tab.a[i][j] != 0.0 for i in range(s) for j in range(i + 1, s)):
            problems.append("it has coefficients above the diagonal")
        if not _last_two(tab):
            problems.append("its solution and embedded solution are not its last two stages")
    if problems:
        raise ValueError(f"Not a stiffly accurate ESDIRK pair: {'; '.join(problems)}.")
    return _Plan(gamma=gamma, lower=tuple(row[:i] for i, row in enumerate(tab.a)), c=tab.c)


_ONE = ((1.0,),)  # the coefficient matrix of one stage: I - hg J on (1, *state) tensors


# --- the solver -----------------------------------------------------------------------


Interpolation = Literal["hermite", "cubic"]


@dataclass(frozen=True)
class _AbstractESDIRK(_HermiteDense):
    """Generic stepping over a stiffly accurate ESDIRK tableau (see :func:`_plan`) and
    Hermite dense output; see the module's notes."""

    tableau: ClassVar[ImplicitButcherTableau]
    newton: Newton = field(default_factory=lambda: _newton_for(RTOL, ATOL))
    interpolation: Interpolation = "hermite"

    def __post_init__(self) -> None:
        check_settings(self.newton, self.interpolation)

    @property
    def adaptive(self) -> bool:
        return True

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
        hg = h * plan.gamma
        rtol, atol = self.newton.tolerances(y0)
        with torch.no_grad():
            scale = y0.detach().abs().mul_(rtol).add_(atol)
            matrix, _ = work.step_matrix(f, t0, y0.detach(), hg, _ONE, self.newton)
        graph = torch.is_grad_enabled()
        ks: list[Tensor] = [f0]
        zs: list[Tensor] = []
        for i in range(1, len(plan.c)):
            c = plan.c[i]
            ti = t1 if c == 1.0 else t0 + c * h
            psi = _combine(y0, h, plan.lower[i], ks)
            psi_now = psi.detach()
            # First guess: the stage's derivative equal to the previous stage's.
            guess = (psi_now + hg * ks[-1].detach()).unsqueeze(0)

            def residual(z: Tensor, ti: float = ti, psi_now: Tensor = psi_now) -> Tensor:
                return (z[0] - psi_now - hg * f(ti, z[0])).unsqueeze(0)

            result = newton_solve(residual, guess, matrix, self.newton, scale)
            work.iterated(result, self.newton)
            if not result.converged:
                # The Jacobian the iteration used may be stale here: take it again at
                # this stage's first guess (kept for the later stages), try once more.
                with torch.no_grad():
                    matrix = work.build(f, [(ti, guess[0])], hg, _ONE, self.newton)
                result = newton_solve(residual, guess, matrix, self.newton, scale)
                work.iterated(result, self.newton)
            if not result.converged:
                why = failure(result, t0, t1, getattr(f, "direction", 1.0))
                return failed_step(y0, why, len(ks), adaptive=True)
            z = result.z[0]
            if graph:
                z = self._with_gradient(work, f, ti, z, psi, hg)
            ks.append((z - psi) / hg)
            zs.append(z)
        with torch.no_grad():
            y_err = zs[-1].detach() - zs[-2].detach()
        return StepResult(y1=zs[-1], y_err=y_err, ks=tuple(ks), f1=ks[-1])

    def _with_gradient(
        self, work: NewtonState, f: Field, t: float, z: Tensor, psi: Tensor, hg: float
    ) -> Tensor:
        """``z`` with the implicit function theorem's derivative with respect to
        everything ``psi`` and the field depend on; ``z`` itself if nothing does. The
        Jacobian is the exact one at ``z``, whatever the iteration used."""
        res = (z - psi - hg * f(t, z)).unsqueeze(0)
        if not res.requires_grad:
            return z
        exact = work.build(f, [(t, z)], hg, _ONE, self.newton, exact=True)
        return attach_gradient(z.unsqueeze(0), res, exact)[0]


NEWTON_FRACTION = 0.01
"""The Newton tolerances of an adaptive implicit solve as a fraction of its own: the
stages' iteration error stays well below the local error the controller accepts."""


def _newton_for(rtol: float, atol: float, newton: Newton | None = None) -> Newton:
    """``newton`` (default settings if ``None``) with the tolerances of a solve at
    ``rtol``, ``atol``."""
    base = Newton() if newton is None else newton

    def part(tol: float) -> float:
        return float(f"{NEWTON_FRACTION * tol:.12g}")  # 1e-11, not 1.0000000000000001e-11

    return replace(base, rtol=part(rtol), atol=part(atol))


def with_solve_tolerances(solver: AbstractSolver, rtol: float, atol: float) -> AbstractSolver:
    """An ESDIRK solver made by name for a solve at ``rtol``, ``atol`` (``odeint``'s
    ``method="kvaerno5"``) gets Newton tolerances to match; any other is returned as is."""
    if isinstance(solver, _AbstractESDIRK):
        return replace(solver, newton=_newton_for(rtol, atol, solver.newton))
    return solver


@final
@dataclass(frozen=True)
class Kvaerno5(_AbstractESDIRK):
    """Kværnø's ESDIRK 5(4): an adaptive implicit method for stiff problems.

    Order 5 with an embedded fourth-order estimate, seven stages: the first explicit
    (the previous step's last, first same as last), six implicit ones with the same
    diagonal coefficient ``gamma = 0.26``. The solution is L-stable (stiff components
    are damped at any step size) and the embedded one A-stable; both are stage values
    (stiffly accurate), so the error estimate, their difference, stays meaningful on
    stiff problems.

    Each implicit stage is solved by simplified Newton iteration with at most one
    factorisation of ``I - h gamma J`` per step (``J`` the field's Jacobian at the
    step's start, from autograd, or finite differences for a field without a graph,
    kept over later steps while Newton converges fast: ``Newton.reuse``);
    states with more than ``newton.dense_limit`` elements use matrix-free GMRES
    instead. A step whose iteration does not converge is rejected and retried
    smaller; under :class:`~odecore.ConstantStepSize` it ends the solve with
    ``Status.NEWTON_FAILED``. A step costs one evaluation per Newton iteration, a few
    per stage, and a Jacobian where it is not kept from an earlier step
    (``Solution.stats`` counts both). Gradients by backpropagation come from the implicit
    function theorem at each stage, not from the iterations; with gradients enabled a
    stage costs one more evaluation and the exact Jacobian at the stage, so run
    inference under ``torch.no_grad()``.

    The third stage is evaluated at ``t0 + 1.23 h``, past the end of the step: a
    field must accept times slightly beyond the solve's span. In a step that ends on
    a time of ``jump_ts``, that stage sees the field's limit before the jump, at the
    jump.

    Args:
        newton: the Newton iteration's settings. Its tolerances should be about a
            hundredth of the controller's: the default, ``Newton(rtol=1e-9,
            atol=1e-11)``, suits odecore's default tolerances (``1e-7``, ``1e-9``);
            for others pass ``Newton(rtol=rtol / 100, atol=atol / 100)``.
            ``odeint(..., method="kvaerno5", rtol=rtol, atol=atol)`` does so itself.
            Tighter costs iterations and gains nothing; looser lets the iteration's
            error, which the error estimate does not see, add up over the steps.
        interpolation: output between step ends. ``"hermite"`` (default): a quintic
            Hermite interpolant through the ends and a sub-step to the middle, of the
            step's order (on a stiff problem at a loose tolerance less accurate than the
            step ends: pass the output times as ``step_ts`` too), one extra step's work
            for each step that holds output times; ``"cubic"``: the cubic Hermite
            interpolant of the ends, free but of third order.

    Raises:
        ConfigurationError: for a ``newton`` that is not a :class:`Newton`, or an
            unknown ``interpolation``.

    Example:
        >>> import torch, odecore
        >>> def robertson(t, y):  # a classic stiff chemical kinetics problem
        ...     a, b, c = y.unbind(-1)
        ...     return torch.stack([-0.04 * a + 1e4 * b * c,
        ...                         0.04 * a - 1e4 * b * c - 3e7 * b**2,
        ...                         3e7 * b**2], dim=-1)
        >>> y0 = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
        >>> sol = odecore.solve(robertson, y0, t0=0.0, t1=40.0, solver=odecore.Kvaerno5(),
        ...                     controller=odecore.PIDController(rtol=1e-6, atol=1e-10))
        >>> sol.status, sol.stats.n_accepted < 200
        (<Status.SUCCESS: 0>, True)

    References:
        A. Kværnø, Singly diagonally implicit Runge-Kutta methods with an explicit
        first stage, BIT Numerical Mathematics 44(3), 489-502, 2004.
    """

    tableau = KVAERNO5_TABLEAU
    order = 5

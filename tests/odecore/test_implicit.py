"""Implicit Runge-Kutta methods and the Newton iteration behind them.

Tableaus against Butcher's order conditions (the helpers of ``test_tableau``),
convergence orders against closed forms, stiff decay, Newton's failures, the
matrix-free path against the dense one, gradients (backpropagation, checkpointing,
the adjoint) against finite differences, the ``odeint`` names, and the geometric
properties of the Gauss methods.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import odecore
import oracles
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from odecore import ImplicitButcherTableau, Newton
from odecore._newton import gmres
from test_fixed import fitted_order
from test_tableau import order_residuals, residuals_of_order

IMPLICIT = dict(sorted(odecore.IMPLICIT_METHODS.items()))
CLASSES = sorted(set(IMPLICIT.values()), key=lambda cls: cls.__name__)
ORDER = {
    "implicit_euler": 1,
    "implicit_midpoint": 2,
    "trapezoid": 2,
    "gauss_legendre2": 2,
    "gauss_legendre4": 4,
    "gauss_legendre6": 6,
    "radauIIA3": 3,
    "radauIIA5": 5,
    "gl4": 4,
    "gl6": 6,
    "sdirk2": 2,
    "trbdf2": 2,
}
STIFFLY_ACCURATE = {"implicit_euler", "trapezoid", "radauIIA3", "radauIIA5", "sdirk2", "trbdf2"}
L_STABLE = {"implicit_euler", "radauIIA3", "radauIIA5", "sdirk2", "trbdf2"}
GAUSS = ["implicit_midpoint", "gauss_legendre2", "gauss_legendre4", "gauss_legendre6", "gl4", "gl6"]
F64 = torch.float64

SETTINGS = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _ids(cls: type) -> str:
    return cls.__name__


# --- the registry -----------------------------------------------------------------------


def test_the_implicit_methods_are_torchdiffeqs():
    assert IMPLICIT.keys() == ORDER.keys()
    assert {name: cls.order for name, cls in IMPLICIT.items()} == ORDER
    assert not set(IMPLICIT) & (set(odecore.FIXED_METHODS) | set(odecore.ADAPTIVE_METHODS))


@pytest.mark.parametrize("name", IMPLICIT)
def test_names_resolve_to_fixed_step_solvers(name):
    solver = odecore.OdeSpec.from_method(name, options={"step_size": 0.1}).solver
    assert type(solver) is IMPLICIT[name]
    assert isinstance(solver, odecore.AbstractImplicitRK)
    assert not solver.adaptive


def test_torchdiffeqs_newer_gauss_names_are_the_same_solvers():
    assert odecore.IMPLICIT_METHODS["gl4"] is odecore.GaussLegendre4
    assert odecore.IMPLICIT_METHODS["gl6"] is odecore.GaussLegendre6


def _trbdf2_step(z: complex) -> complex:
    """One TR-BDF2 step on ``y' = lambda y``, ``z = h lambda``, as Bank et al. define it
    (not from the tableau): the trapezoidal rule to ``g h`` with ``g = 2 - sqrt(2)``,
    then BDF2 through ``y0``, ``y_g`` and ``y1``."""
    g = 2 - math.sqrt(2)
    y_g = (1 + g * z / 2) / (1 - g * z / 2)
    rhs = y_g / (g * (2 - g)) - (1 - g) ** 2 / (g * (2 - g))
    return rhs / (1 - (1 - g) / (2 - g) * z)


def _sdirk2_step(z: complex) -> complex:
    """One step of Alexander's SDIRK2 on ``y' = lambda y`` solved stage by stage:
    ``Y1 = y0 + g z Y1``, ``y1 = y0 + (1 - g) z Y1 + g z y1``, ``g = 1 - sqrt(2)/2``."""
    g = 1 - math.sqrt(2) / 2
    y_1 = 1 / (1 - g * z)
    return (1 + (1 - g) * z * y_1) / (1 - g * z)


@pytest.mark.parametrize(("name", "step"), [("trbdf2", _trbdf2_step), ("sdirk2", _sdirk2_step)])
@pytest.mark.parametrize("lam", [-1e6, -50.0, -1.0, 0.3, complex(-2.0, 5.0)])
def test_one_step_is_the_published_method(name, step, lam):
    # The tableau against the method's own definition, on y' = lambda y (real and
    # imaginary parts as a 2-d real system), one step of h = 0.1.
    a, b = lam.real, complex(lam).imag
    matrix = torch.tensor([[a, -b], [b, a]], dtype=F64)
    y1 = odecore.odeint(
        lambda t, y: matrix @ y,
        torch.tensor([1.0, 0.0], dtype=F64),
        torch.tensor([0.0, 0.1], dtype=F64),
        method=name,
        options={"step_size": 0.1},
    )[-1]
    expected = step(0.1 * complex(lam))
    assert complex(y1[0].item(), y1[1].item()) == pytest.approx(expected, rel=1e-10, abs=1e-12)


def test_max_iters_option_reaches_newton():
    spec = odecore.OdeSpec.from_method("radauIIA5", options={"step_size": 0.1, "max_iters": 8})
    assert spec.solver == odecore.RadauIIA5(newton=Newton(max_iters=8))
    assert spec.controller == odecore.ConstantStepSize()
    assert spec.dt0 == 0.1


# --- tableaus: order conditions -----------------------------------------------------------


@pytest.mark.parametrize("name", IMPLICIT)
def test_order_conditions_met(name):
    tab = IMPLICIT[name].tableau
    res = order_residuals(tab.b, tab, ORDER[name])
    assert np.abs(res).max() < 1e-12, res


@pytest.mark.parametrize("name", IMPLICIT)
def test_next_order_conditions_not_all_met(name):
    # The order is exact, not a lower bound.
    tab = IMPLICIT[name].tableau
    assert np.abs(residuals_of_order(tab.b, tab, ORDER[name] + 1)).max() > 1e-6


@pytest.mark.parametrize("name", IMPLICIT)
def test_stage_times_are_row_sums(name):
    tab = IMPLICIT[name].tableau
    np.testing.assert_allclose(np.sum(tab.a, axis=1), tab.c, rtol=0, atol=1e-15)


def _stability(tab: ImplicitButcherTableau, z: complex) -> complex:
    """``R(z) = 1 + z b^T (I - z A)^{-1} 1``: one step on ``y' = lambda y``, ``z = h lambda``."""
    a = np.array(tab.a, dtype=complex)
    ones = np.ones(tab.stages)
    return complex(1 + z * np.array(tab.b) @ np.linalg.solve(np.eye(tab.stages) - z * a, ones))


@pytest.mark.parametrize("name", IMPLICIT)
def test_stiff_accuracy_and_stability_at_infinity(name):
    tab = IMPLICIT[name].tableau
    assert tab.stiffly_accurate == (name in STIFFLY_ACCURATE)
    at_infinity = abs(_stability(tab, -1e9))
    if name in L_STABLE:
        assert at_infinity < 1e-6  # L-stable: stiff components are damped out
    else:
        assert at_infinity == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("name", IMPLICIT)
@pytest.mark.parametrize("y", [0.0, 0.5, 3.0, 40.0, 1e4])
@pytest.mark.parametrize("x", [-1e4, -30.0, -2.0, -0.1, 0.0])
def test_a_stable(name, x, y):
    # |R(z)| <= 1 on the closed left half-plane.
    assert abs(_stability(IMPLICIT[name].tableau, complex(x, y))) <= 1 + 1e-12


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"c": (), "a": (), "b": ()}, "at least one stage"),
        ({"c": (1.0,), "a": ((1.0, 0.0),), "b": (1.0,)}, "must have 1 entries"),
        ({"c": (0.5,), "a": ((1.0,),), "b": (1.0,)}, r"row 0 of `a` sums to 1.0, but `c\[0\]`"),
        ({"c": (1.0,), "a": ((1.0,),), "b": (0.9,)}, "`b` must sum to 1"),
        ({"c": (1.0,), "a": ((1.0,),), "b": (1.0,), "b_err": (0.1,)}, "`b_err` must sum to 0"),
    ],
)
def test_tableau_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ImplicitButcherTableau(**kwargs)


# --- convergence orders -------------------------------------------------------------------

# Coarsest number of steps over the span per order (twice that for the oscillator,
# whose span holds a period): in the asymptotic range, and after three halvings the
# errors stay well above the Newton tolerance (1e-12) and rounding.
N0 = {1: 64, 2: 16, 3: 16, 4: 8, 5: 4, 6: 2}
HALVINGS = 3
FRACTIONS = torch.tensor([0.0, 0.137, 0.31, 0.5, 0.77, 0.913, 1.0], dtype=F64)


@pytest.mark.parametrize("prob", [oracles.decay, oracles.linear_system, oracles.harmonic], ids=repr)
@pytest.mark.parametrize("name", IMPLICIT)
def test_convergence_order(name, prob):
    # Output times off the grid too (a step size that divides no interval): the
    # dense output keeps the order.
    order = ORDER[name]
    span = prob.t1 - prob.t0
    t = prob.t0 + span * FRACTIONS
    y0 = prob.y0_as()
    n0 = N0[order] * (2 if prob is oracles.harmonic else 1)
    dts = [span / (n0 * 2**k + 0.37) for k in range(HALVINGS + 1)]
    errors = []
    for dt in dts:
        ys = odecore.odeint(prob.f, y0, t, method=name, options={"step_size": dt})
        errors.append(float((ys - prob.exact(t, y0)).abs().max()))
    slope = fitted_order(dts, errors)
    assert abs(slope - order) < 0.2, (slope, errors)


@pytest.mark.parametrize("name", IMPLICIT)
def test_one_step_on_a_linear_system_is_the_stability_matrix(name):
    # For y' = A y the stage equations are linear: one step is
    # y1 = (I + (b^T (x) hA) (I - a (x) hA)^{-1} (1 (x) I)) y0, computed here by one
    # dense solve, independently of Newton's iteration and of how the solver recovers
    # the stage derivatives.
    tab = IMPLICIT[name].tableau
    a_sys = np.array([[-50.0, 2.0, 0.0], [-2.0, -0.5, 1.0], [0.3, 0.0, -3.0]])
    y0 = np.array([1.0, -0.5, 2.0])
    h, n, s = 0.2, 3, tab.stages
    ha = h * a_sys
    stages = np.linalg.solve(
        np.eye(s * n) - np.kron(np.array(tab.a), ha), np.kron(np.ones(s), y0)
    )  # the stage values Y_i
    y1 = y0 + np.kron(np.array(tab.b), ha) @ stages
    a_t = torch.tensor(a_sys)
    sol = odecore.solve(
        lambda t, y: a_t @ y, torch.tensor(y0), t0=0.0, t1=h, dt0=h, solver=IMPLICIT[name]()
    )
    np.testing.assert_allclose(sol.ys[-1].numpy(), y1, rtol=1e-13, atol=1e-14)


@dataclasses.dataclass(frozen=True)
class _EmbeddedGauss(odecore.AbstractImplicitRK):
    """Gauss-Legendre 4 with a crude embedded estimate: the stages weighted (1, 0)."""

    tableau = ImplicitButcherTableau(
        c=odecore.GaussLegendre4.tableau.c,
        a=odecore.GaussLegendre4.tableau.a,
        b=odecore.GaussLegendre4.tableau.b,
        b_err=(-0.5, 0.5),
    )
    order = 4


def test_an_embedded_tableau_gives_an_error_estimate():
    a_sys = np.array([[-50.0, 2.0], [-2.0, -0.5]])
    y0, h = np.array([1.0, -0.5]), 0.2
    tab = _EmbeddedGauss.tableau
    stages = np.linalg.solve(
        np.eye(4) - np.kron(np.array(tab.a), h * a_sys), np.kron(np.ones(2), y0)
    ).reshape(2, 2)
    expected = h * sum(e * (a_sys @ y) for e, y in zip(tab.b_err, stages))
    a_t = torch.tensor(a_sys)
    solver = _EmbeddedGauss()
    assert solver.adaptive
    f0 = a_t @ torch.tensor(y0)
    step = solver.step(lambda t, y: a_t @ y, 0.0, h, torch.tensor(y0), f0)
    np.testing.assert_allclose(step.y_err.numpy(), expected, rtol=1e-9, atol=1e-12)
    sol = odecore.solve(
        lambda t, y: a_t @ y,
        torch.tensor(y0),
        t0=0.0,
        t1=1.0,
        solver=solver,
        controller=odecore.PIDController(rtol=1e-6, atol=1e-8),
    )
    assert sol.status == odecore.Status.SUCCESS and sol.stats.n_steps > 1


# --- stiffness -----------------------------------------------------------------------------


def _stiff(t, y):
    return -1e4 * y


@pytest.mark.parametrize("name", ["implicit_euler", "radauIIA3", "radauIIA5"])
def test_l_stable_methods_damp_a_stiff_decay(name):
    # h * lambda = -1000: any explicit method is unstable, an L-stable one decays.
    y0 = torch.ones(2, dtype=F64)
    ys = odecore.odeint(
        _stiff, y0, torch.tensor([0.0, 1.0], dtype=F64), method=name, options={"step_size": 0.1}
    )
    assert 0 < ys[-1].abs().max() < 1e-20


@pytest.mark.parametrize("name", ["trapezoid", "gauss_legendre4"])
def test_a_stable_methods_stay_bounded_without_damping(name):
    # |R(-1000)| is just below 1 (0.996 and 0.988): bounded, but the stiff component
    # barely decays, where its exact value is exp(-10000).
    y0 = torch.ones(2, dtype=F64)
    ys = odecore.odeint(
        _stiff, y0, torch.tensor([0.0, 1.0], dtype=F64), method=name, options={"step_size": 0.1}
    )
    assert 0.8 < ys[-1].abs().max() <= 1.0


def test_explicit_euler_blows_up_on_the_same_problem():
    y0 = torch.ones(2, dtype=F64)
    ys = odecore.odeint(
        _stiff, y0, torch.tensor([0.0, 1.0], dtype=F64), method="euler", options={"step_size": 0.1}
    )
    assert ys[-1].abs().max() > 1e25  # (1 - 1000)**10


def _vdp(mu):
    def f(t, y):
        return torch.stack([y[..., 1], mu * (1 - y[..., 0] ** 2) * y[..., 1] - y[..., 0]], dim=-1)

    return f


def test_radau_solves_a_stiff_van_der_pol_against_scipy():
    scipy_integrate = pytest.importorskip("scipy.integrate")
    mu = 1000.0

    def f_np(t, y):
        return [y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]]

    t = torch.tensor([0.0, 0.5, 1.0, 2.0], dtype=F64)
    ref = scipy_integrate.solve_ivp(
        f_np, (0.0, 2.0), [2.0, 0.0], method="Radau", t_eval=t.numpy(), rtol=1e-12, atol=1e-12
    )
    ys = odecore.odeint(
        _vdp(mu),
        torch.tensor([2.0, 0.0], dtype=F64),
        t,
        method="radauIIA5",
        options={"step_size": 0.05},
    )
    np.testing.assert_allclose(ys.numpy(), ref.y.T, rtol=1e-6, atol=1e-9)


# --- Newton's failures ---------------------------------------------------------------------


def test_newton_that_does_not_converge_raises_solver_error():
    # One iteration from an explicit-Euler guess cannot solve a stiff nonlinear stage.
    with pytest.raises(
        odecore.SolverError,
        match=(
            r"Newton did not converge at step size h = 0\.1 \(t = 0\.0\) after 1 "
            r"iteration\(s\): the iterations ran out \(`max_iters` = 1\); the last update's "
            r"scaled norm was .*`step_size`.*`max_iters`.*rtol=\.\.\., atol=\.\.\.\)`"
        ),
    ):
        odecore.odeint(
            _vdp(1000.0),
            torch.tensor([2.0, 0.0], dtype=F64),
            torch.tensor([0.0, 1.0], dtype=F64),
            method="radauIIA5",
            options={"step_size": 0.1, "max_iters": 1},
        )


def test_newton_failure_names_the_time_of_a_backward_solve():
    with pytest.raises(odecore.SolverError, match=r"h = 0\.1 \(t = 0\.0\) ") as info:
        odecore.solve(
            _vdp(1000.0),
            torch.tensor([2.0, 0.0], dtype=F64),
            t0=0.0,
            t1=-1.0,
            solver=odecore.ImplicitEuler(newton=Newton(max_iters=1)),
            dt0=0.1,
        )
    assert info.value.t == 0.0
    assert info.value.status is odecore.Status.NEWTON_FAILED


def test_a_diverging_newton_iteration_raises():
    # A Jacobian of the wrong sign (a field that hides its state from autograd and
    # is steep): the difference quotient at y0 misleads, the iterates run away.
    def f(t, y):
        return -1e6 * torch.sign(y) * y.abs().sqrt()

    with pytest.raises(odecore.SolverError, match="Newton did not converge") as info:
        odecore.solve(
            f,
            torch.tensor([1.0], dtype=F64),
            t0=0.0,
            t1=1.0,
            solver=odecore.ImplicitEuler(newton=Newton(max_iters=50)),
            dt0=0.5,
        )
    assert info.value.status is odecore.Status.NEWTON_FAILED


SWITCH = 0.44
TS = [i / 10 for i in range(11)]


def stiffens(t, y):
    """``y' = -y``, and from ``t = 0.44`` on ``y' = -y - 1000 y^3``: Newton's iteration
    converges on every step up to ``t = 0.4``; in the step from 0.4 to 0.5 a stage past
    the switch meets a field whose Jacobian is hundreds of times that at the step's
    start, and the iteration fails (it runs out of iterations, or diverges)."""
    c = 1000.0 if float(t) > SWITCH else 0.0
    return -y - c * y**3


def solve_stiffening(solver, t1=1.0, **kwargs):
    return odecore.solve(
        stiffens,
        torch.ones(2, dtype=F64),
        t0=0.0,
        t1=t1,
        dt0=0.1,
        solver=solver,
        saveat=odecore.SaveAt(ts=[t for t in TS if t <= t1]),
        **kwargs,
    )


REASONS = {2: r"the iterations ran out \(`max_iters` = 2\)", 10: r"the iteration diverged"}


@pytest.mark.parametrize("max_iters", sorted(REASONS))
@pytest.mark.parametrize("cls", CLASSES, ids=_ids)
def test_newton_failure_is_a_status_without_throw(cls, max_iters):
    solver = cls(newton=Newton(max_iters=max_iters))
    sol = solve_stiffening(solver, throw=False)
    assert sol.status is odecore.Status.NEWTON_FAILED
    assert sol.t_final == 0.4
    # What was reached is what a solve that stops there gives; the rest is NaN.
    ref = solve_stiffening(solver, t1=0.4)
    assert ref.status is odecore.Status.SUCCESS
    assert torch.equal(sol.ys[:5], ref.ys)
    assert torch.isnan(sol.ys[5:]).all()


@pytest.mark.parametrize("max_iters", sorted(REASONS))
@pytest.mark.parametrize("cls", CLASSES, ids=_ids)
def test_newton_failure_raises_naming_t_h_and_the_reason(cls, max_iters):
    with pytest.raises(odecore.SolverError) as info:
        solve_stiffening(cls(newton=Newton(max_iters=max_iters)))
    err = info.value
    assert err.status is odecore.Status.NEWTON_FAILED
    assert err.t == 0.4
    message = str(err)
    assert message.startswith("solve() stopped at t = 0.4 before reaching t1 = 1.0: ")
    assert re.search(
        r"Newton did not converge at step size h = 0\.1 \(t = 0\.4\) after \d+ "
        rf"iteration\(s\): {REASONS[max_iters]}",
        message,
    )
    for option in ("`step_size`", "`n_steps`", "`dt0`", "`max_iters`", "rtol=..., atol=..."):
        assert option in message


@pytest.mark.parametrize("jacobian", ["dense", "krylov"])
@pytest.mark.parametrize(("cls", "h"), [(odecore.ImplicitEuler, 1.0), (odecore.Trapezoid, 2.0)])
def test_a_singular_iteration_matrix_is_a_newton_failure(cls, h, jacobian):
    # y' = y: the iteration matrix 1 - h a J is zero when h a = 1, and the stage
    # equation y1 = y0 + y1 has no solution. The dense path's LU factorisation used
    # to raise torch's own error; the matrix-free one returned y0 + h f0 as if solved.
    solver = cls(newton=Newton(jacobian=jacobian))
    y0 = torch.ones(1, dtype=F64)
    sol = odecore.solve(lambda t, y: y, y0, t0=0.0, t1=2 * h, dt0=h, solver=solver, throw=False)
    assert sol.status is odecore.Status.NEWTON_FAILED
    assert sol.t_final == 0.0
    assert torch.isnan(sol.ys[-1]).all()
    with pytest.raises(
        odecore.SolverError,
        match=(
            rf"Newton did not converge at step size h = {h:g} \(t = 0\.0\) after 0 "
            r"iteration\(s\): the iteration matrix I - h \(A ⊗ J\) is singular"
        ),
    ):
        odecore.solve(lambda t, y: y, y0, t0=0.0, t1=2 * h, dt0=h, solver=solver)


@pytest.mark.parametrize("name", sorted(IMPLICIT))
def test_odeint_reports_a_newton_failure_at_the_step(name):
    with pytest.raises(odecore.SolverError) as info:
        odecore.odeint(
            stiffens,
            torch.ones(2, dtype=F64),
            torch.tensor(TS, dtype=F64),
            method=name,
            options={"step_size": 0.1, "max_iters": 2},
        )
    assert info.value.status is odecore.Status.NEWTON_FAILED
    assert info.value.t == pytest.approx(0.4)
    assert re.search(
        r"Newton did not converge at step size h = 0\.1 \(t = 0\.4\d*\) after 2 "
        r"iteration\(s\): the iterations ran out \(`max_iters` = 2\)",
        str(info.value),
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_iters": 0}, "`max_iters` must be a positive integer, got 0"),
        ({"max_iters": 2.5}, "`max_iters` must be a positive integer"),
        ({"rtol": -1.0}, "`rtol` must be a positive number, got -1.0"),
        ({"kappa": 0.0}, "`kappa` must be a positive number"),
        ({"jacobian": "lu"}, "`jacobian` must be 'auto', 'dense' or 'krylov', got 'lu'"),
        ({"dense_limit": 0}, "`dense_limit` must be a positive integer"),
    ],
)
def test_newton_settings_are_validated(kwargs, match):
    with pytest.raises(odecore.ConfigurationError, match=match):
        Newton(**kwargs)


def test_solver_needs_newton_settings():
    with pytest.raises(odecore.ConfigurationError, match=r"`newton` must be an odecore\.Newton"):
        odecore.RadauIIA5(newton=8)  # type: ignore[arg-type]


def test_unknown_option_lists_max_iters():
    with pytest.raises(
        odecore.ConfigurationError,
        match=r"Unknown option\(s\) \['max_iter'\] "
        r"for method 'radauIIA5'; known options: .*max_iters",
    ):
        odecore.odeint(
            _stiff,
            torch.ones(1),
            torch.tensor([0.0, 1.0]),
            method="radauIIA5",
            options={"max_iter": 3},
        )


def test_explicit_methods_reject_max_iters():
    with pytest.raises(odecore.ConfigurationError, match=r"Unknown option\(s\) \['max_iters'\]"):
        odecore.odeint(
            _stiff, torch.ones(1), torch.tensor([0.0, 1.0]), method="rk4", options={"max_iters": 3}
        )


@pytest.mark.parametrize("max_iters", [0, True, "3"])
def test_max_iters_option_is_validated(max_iters):
    with pytest.raises(ValueError, match="`max_iters` must be a positive integer"):
        odecore.OdeSpec.from_method("radauIIA5", options={"max_iters": max_iters})


# --- the linear solves -------------------------------------------------------------------


def _coupled(t, y):
    """Nonlinear, stiff-ish, time-dependent, and couples a (3, 2) state's elements."""
    a = torch.tensor([[-20.0, 1.0], [-1.0, -0.5]], dtype=y.dtype)
    return y @ a.T + 0.5 * torch.sin(y.sum(0, keepdim=True)) + torch.cos(t)


@pytest.mark.parametrize("name", ["radauIIA5", "gauss_legendre4", "trapezoid"])
def test_krylov_path_equals_dense_path(name):
    y0 = torch.linspace(-1.0, 1.0, 6, dtype=F64).reshape(3, 2)
    t = torch.tensor([0.0, 0.3, 0.8], dtype=F64)
    cls = IMPLICIT[name]
    ys = {
        kind: odecore.solve(
            _coupled,
            y0,
            t0=0.0,
            t1=0.8,
            dt0=0.1,
            solver=cls(newton=Newton(jacobian=kind)),
            saveat=odecore.SaveAt(ts=t),
        ).ys
        for kind in ("dense", "krylov")
    }
    # Both converge to the Newton tolerance (1e-12, relative to the state).
    torch.testing.assert_close(ys["krylov"], ys["dense"], rtol=1e-10, atol=1e-10)


def test_auto_switches_to_krylov_above_the_dense_limit():
    assert Newton().dense(512) and not Newton().dense(513)
    assert Newton(dense_limit=4).dense(4) and not Newton(dense_limit=4).dense(6)
    assert not Newton(jacobian="krylov").dense(1) and Newton(jacobian="dense").dense(10**6)
    y0 = torch.linspace(-1.0, 1.0, 6, dtype=F64).reshape(3, 2)
    auto = odecore.solve(
        _coupled,
        y0,
        t0=0.0,
        t1=0.5,
        dt0=0.1,
        solver=odecore.RadauIIA5(newton=Newton(dense_limit=4)),
    ).ys
    krylov = odecore.solve(
        _coupled,
        y0,
        t0=0.0,
        t1=0.5,
        dt0=0.1,
        solver=odecore.RadauIIA5(newton=Newton(jacobian="krylov")),
    ).ys
    torch.testing.assert_close(auto, krylov, rtol=0, atol=0)


def test_a_field_without_a_graph_still_converges():
    # Forward differences stand in for the autograd Jacobian (the adjoint's
    # augmented system computes its state this way).
    def hidden(t, y):
        return _coupled(t, y.detach()).detach()

    y0 = torch.linspace(-1.0, 1.0, 6, dtype=F64).reshape(3, 2)
    for kind in ("dense", "krylov"):
        solver = odecore.RadauIIA5(newton=Newton(jacobian=kind))
        got = odecore.solve(hidden, y0, t0=0.0, t1=0.5, dt0=0.1, solver=solver).ys
        want = odecore.solve(_coupled, y0, t0=0.0, t1=0.5, dt0=0.1, solver=solver).ys
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("restart", [3, 40])
def test_gmres_solves_a_nonsymmetric_system(restart):
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(20, 20, generator=gen, dtype=F64) + 8 * torch.eye(20, dtype=F64)
    b = torch.randn(20, generator=gen, dtype=F64)
    x = gmres(lambda v: a @ v, b, rtol=1e-12, restart=restart, max_iters=400)
    assert float(torch.linalg.vector_norm(a @ x - b)) <= 1e-11 * float(torch.linalg.vector_norm(b))


def test_gmres_of_zero_is_zero():
    x = gmres(lambda v: 2 * v, torch.zeros(3, dtype=F64))
    assert torch.equal(x, torch.zeros(3, dtype=F64))


def test_batch_elements_match_their_own_solves():
    # One Newton iteration for the whole batch: each element is solved to the tolerance.
    f = oracles.decay.f
    y0 = torch.tensor([[1.0, -0.5, 2.0], [0.3, 0.1, -4.0]], dtype=F64)
    solver = odecore.RadauIIA5()
    batch = odecore.solve(f, y0, t0=0.0, t1=1.0, dt0=0.1, solver=solver).ys[-1]
    for i in range(2):
        alone = odecore.solve(f, y0[i], t0=0.0, t1=1.0, dt0=0.1, solver=solver).ys[-1]
        torch.testing.assert_close(batch[i], alone, rtol=1e-11, atol=1e-11)


def test_tuple_state():
    q0, p0 = torch.tensor([1.0], dtype=F64), torch.tensor([0.5], dtype=F64)
    t = torch.tensor([0.0, 1.0], dtype=F64)
    q, p = odecore.odeint(
        oracles.harmonic_tuple_f, (q0, p0), t, method="gauss_legendre4", options={"step_size": 0.05}
    )
    exact = oracles.harmonic.exact(t, torch.tensor([1.0, 0.5], dtype=F64))
    torch.testing.assert_close(torch.cat([q, p], dim=-1), exact, rtol=0, atol=1e-6)


# --- gradients -------------------------------------------------------------------------------


def _linear_field(k):
    def f(t, y):
        return torch.stack([k * y[0] + y[1], -y[0] - 0.5 * y[1] + torch.sin(t)])

    return f


PROBLEMS = {
    # (field of a parameter, y0, parameter): a stiff-ish linear one, and Van der Pol.
    "linear": (_linear_field, [1.0, 0.5], -10.0),
    "vdp10": (lambda mu: _vdp(mu), [2.0, 0.0], 10.0),
}
GRAD_SOLVERS = {
    "implicit_euler": odecore.ImplicitEuler(),
    "trapezoid": odecore.Trapezoid(),
    "gauss_legendre4": odecore.GaussLegendre4(),
    "radauIIA5": odecore.RadauIIA5(),
    "radauIIA3-krylov": odecore.RadauIIA3(newton=Newton(jacobian="krylov")),
    "sdirk2": odecore.SDIRK2(),
    "trbdf2": odecore.TRBDF2(),
}


def _end_state(problem, solver, gradient, dt=0.05):
    make, _, _ = PROBLEMS[problem]

    def run(y0, p, t1):
        ts = torch.stack([torch.zeros((), dtype=F64), t1])
        sol = odecore.solve(
            make(p),
            y0,
            t0=0.0,
            t1=float(t1.detach()),
            solver=solver,
            dt0=dt,
            gradient=gradient,
            saveat=odecore.SaveAt(ts=ts),
        )
        return sol.ys[-1]

    return run


def _inputs(problem):
    _, y0, p = PROBLEMS[problem]
    return (
        torch.tensor(y0, dtype=F64, requires_grad=True),
        torch.tensor(p, dtype=F64, requires_grad=True),
        # Off the grid of steps: the last step's size moves with t1.
        torch.tensor(0.52, dtype=F64, requires_grad=True),
    )


@pytest.mark.parametrize("gradient", [odecore.Autograd(), odecore.Checkpoint()], ids=repr)
@pytest.mark.parametrize("solver", GRAD_SOLVERS)
@pytest.mark.parametrize("problem", PROBLEMS)
def test_gradcheck_of_the_discrete_scheme(problem, solver, gradient):
    # Exact gradients of the discrete scheme, with respect to y0, a parameter of the
    # field and the end time, without differentiating through Newton's iterations.
    run = _end_state(problem, GRAD_SOLVERS[solver], gradient)
    assert torch.autograd.gradcheck(run, _inputs(problem), atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize(
    ("solver", "dt"),
    [("gauss_legendre4", 0.02), ("radauIIA5", 0.02), ("sdirk2", 0.002), ("trbdf2", 0.002)],
)
@pytest.mark.parametrize("problem", PROBLEMS)
def test_gradcheck_of_the_adjoint(problem, solver, dt):
    # The adjoint differentiates the continuous problem; at these orders and steps it
    # agrees with the discrete scheme's derivative to ~1e-6 (the second-order methods
    # need ten times smaller steps for that). Its backward solve uses the forward
    # (implicit) solver.
    run = _end_state(problem, GRAD_SOLVERS[solver], odecore.Adjoint(), dt=dt)
    assert torch.autograd.gradcheck(run, _inputs(problem), atol=1e-5, rtol=1e-5)


def test_backprop_keeps_no_graph_of_the_iterations():
    # Memory per step does not grow with the iterations: the graph of a solve holds
    # one differentiable correction per step, however many iterations were made.
    y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)

    def nodes(max_iters, tol):
        solver = odecore.RadauIIA5(newton=Newton(max_iters=max_iters, rtol=tol, atol=tol))
        out = odecore.solve(_vdp(10.0), y0, t0=0.0, t1=0.2, dt0=0.1, solver=solver).ys[-1]
        seen, stack = set(), [out.grad_fn]
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            stack.extend(n for n, _ in node.next_functions)
        return len(seen), out

    loose, out_loose = nodes(20, 1e-6)
    tight, out_tight = nodes(20, 1e-14)
    assert loose == tight
    torch.testing.assert_close(out_loose, out_tight, rtol=1e-5, atol=1e-6)


def test_adjoint_uses_the_forward_implicit_solver_by_default():
    # On a stiff problem the adjoint's backward solve needs an implicit method: the
    # default is the forward solver, and an explicit one at the same step diverges.
    k = torch.tensor(-400.0, dtype=F64, requires_grad=True)
    y0 = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)

    def grads(gradient):
        sol = odecore.solve(
            _linear_field(k),
            y0,
            t0=0.0,
            t1=0.5,
            dt0=0.05,
            solver=odecore.RadauIIA5(),
            gradient=gradient,
        )
        return torch.autograd.grad(sol.ys[-1].sum(), y0)[0]

    default = grads(odecore.Adjoint())
    assert torch.equal(default, grads(odecore.Adjoint(solver=odecore.RadauIIA5())))
    torch.testing.assert_close(default, grads(odecore.Autograd()), rtol=1e-6, atol=1e-8)
    explicit = grads(odecore.Adjoint(solver=odecore.RK4()))
    assert not torch.isfinite(explicit).all() or explicit.abs().max() > 1e6


def test_odeint_adjoint_with_an_implicit_method():
    k = torch.tensor(-10.0, dtype=F64, requires_grad=True)

    class Field(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.k = torch.nn.Parameter(k.detach().clone())

        def forward(self, t, y):
            return _linear_field(self.k)(t, y)

    field = Field()
    y0 = torch.tensor([1.0, 0.5], dtype=F64)
    t = torch.tensor([0.0, 0.25, 0.5], dtype=F64)
    options = {"step_size": 0.02, "max_iters": 8}
    ys = odecore.odeint_adjoint(field, y0, t, method="radauIIA5", options=options)
    (g_adjoint,) = torch.autograd.grad(ys.sum(), field.k)
    ys = odecore.odeint(field, y0, t, method="radauIIA5", options=options)
    (g_backprop,) = torch.autograd.grad(ys.sum(), field.k)
    # The continuous problem's gradient and the scheme's: equal to the scheme's error.
    torch.testing.assert_close(g_adjoint, g_backprop, rtol=1e-6, atol=1e-9)


# --- odeint ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", IMPLICIT)
def test_odeint_is_solve_with_constant_steps(name):
    # The facade only translates: the same numbers as the structured call.
    prob = oracles.van_der_pol
    t = torch.tensor([0.0, 0.4, 1.0], dtype=F64)
    ys = odecore.odeint(prob.f, prob.y0, t, method=name, options={"step_size": 0.1, "max_iters": 8})
    sol = odecore.solve(
        prob.f,
        prob.y0,
        t0=0.0,
        t1=1.0,
        dt0=0.1,
        solver=IMPLICIT[name](newton=Newton(max_iters=8)),
        controller=odecore.ConstantStepSize(),
        saveat=odecore.SaveAt(ts=t),
    )
    assert torch.equal(ys, sol.ys)


def _torchdiffeq_has(name: str) -> bool:
    try:
        from torchdiffeq._impl.odeint import SOLVERS
    except ImportError:
        return False
    return name in SOLVERS


@pytest.mark.parametrize("name", IMPLICIT)
def test_odeint_matches_torchdiffeq(name):
    # torchdiffeq's implicit methods (newer than its 0.2.5 release) iterate to a
    # residual of 1e-8 in float64: the results agree to that, scaled by the step.
    if not _torchdiffeq_has(name):
        pytest.skip(f"the installed torchdiffeq has no {name!r}")
    import torchdiffeq

    prob = oracles.linear_system
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64)
    options = {"step_size": 0.05}
    ours = odecore.odeint(prob.f, prob.y0, t, method=name, options=options)
    theirs = torchdiffeq.odeint(prob.f, prob.y0, t, method=name, options=options)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["radauIIA5", "trapezoid"])
def test_planned_torchdiffeq_names_now_run(name):
    ys = odecore.odeint(
        _stiff, torch.ones(1, dtype=F64), torch.tensor([0.0, 0.1], dtype=F64), method=name
    )
    assert ys.shape == (2, 1)


def test_event_needs_a_step_size():
    with pytest.raises(odecore.ConfigurationError, match="needs a step size"):
        odecore.odeint_event(
            _stiff,
            torch.ones(1, dtype=F64),
            torch.tensor(0.0, dtype=F64),
            event_fn=lambda t, y: y[0] - 0.5,
            method="radauIIA5",
        )


# --- geometric properties -------------------------------------------------------------------


def _skew(seed: int, n: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    b = torch.randn(n, n, generator=gen, dtype=F64)
    return b - b.T


@SETTINGS
@given(seed=st.integers(0, 2**16), n=st.integers(2, 5), h=st.floats(0.01, 2.0))
@pytest.mark.parametrize("name", GAUSS)
def test_gauss_methods_conserve_the_norm_of_a_rotation(name, seed, n, h):
    # y' = S y with S skew: |y|^2 is a quadratic invariant, kept exactly (to the Newton
    # tolerance) by every Gauss method at any step size.
    s = _skew(seed, n)
    y0 = torch.randn(n, generator=torch.Generator().manual_seed(seed + 1), dtype=F64)
    sol = odecore.solve(lambda t, y: s @ y, y0, t0=0.0, t1=5 * h, dt0=h, solver=IMPLICIT[name]())
    norm = float(torch.linalg.vector_norm(sol.ys[-1]))
    assert norm == pytest.approx(float(torch.linalg.vector_norm(y0)), rel=1e-10)


@SETTINGS
@given(seed=st.integers(0, 2**16), n=st.integers(2, 5), h=st.floats(0.01, 10.0))
@pytest.mark.parametrize("name", ["implicit_euler", "radauIIA3", "radauIIA5", "gauss_legendre4"])
def test_algebraically_stable_methods_contract_contractive_systems(name, seed, n, h):
    # y' = A y with A + A^T negative semidefinite never grows |y|; neither does one
    # step of an algebraically stable method, at any step size.
    gen = torch.Generator().manual_seed(seed)
    b = torch.randn(n, n, generator=gen, dtype=F64)
    a = _skew(seed, n) - b @ b.T
    y0 = torch.randn(n, generator=gen, dtype=F64)
    sol = odecore.solve(
        lambda t, y: a @ y,
        y0,
        t0=0.0,
        t1=3 * h,
        dt0=h,
        solver=IMPLICIT[name](),
        saveat=odecore.SaveAt(ts=[0.0, h, 2 * h, 3 * h]),
    )
    norms = torch.linalg.vector_norm(sol.ys, dim=-1)
    assert bool((norms[1:] <= norms[:-1] * (1 + 1e-10) + 1e-12).all()), norms


def test_radau_does_not_conserve_the_rotation():
    # The counterpart: L-stable methods damp even a pure rotation.
    s = _skew(0, 3)
    y0 = torch.ones(3, dtype=F64)
    sol = odecore.solve(lambda t, y: s @ y, y0, t0=0.0, t1=5.0, dt0=0.5, solver=odecore.RadauIIA5())
    assert float(torch.linalg.vector_norm(sol.ys[-1])) < float(torch.linalg.vector_norm(y0)) - 1e-6


# --- statistics ---------------------------------------------------------------------------------


@pytest.mark.parametrize("reuse", [True, False])
@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize(
    ("cls", "s"), [(odecore.ImplicitEuler, 1), (odecore.RadauIIA5, 3), (odecore.Trapezoid, 1)]
)
def test_evaluations_are_counted(cls, s, grad, reuse):
    # A linear field: Newton with the exact Jacobian converges in two iterations, so a
    # step of a method with s implicit stages costs two residuals (2 s) and f at the
    # new state (1; the solve's start instead for the first step), and the Jacobian
    # (1) at every step without reuse; with reuse at the first only (the Jacobian is
    # exact, so the iteration is as fast as it gets, and the step size never changes).
    # With gradients enabled, the residual once more with a graph (s).
    f = oracles.linear_system.f
    y0 = oracles.linear_system.y0
    with torch.set_grad_enabled(grad):
        solver = cls(newton=odecore.Newton(reuse=reuse))
        sol = odecore.solve(f, y0, t0=0.0, t1=1.0, dt0=0.25, solver=solver)
    jacobians = 1 if reuse else 4
    assert sol.stats.n_steps == 4
    assert sol.stats.nfe == jacobians + 4 * (2 * s + 1 + (s if grad else 0))
    assert (sol.stats.n_jacobians, sol.stats.n_factorisations) == (jacobians, jacobians)
    assert sol.stats.n_newton_iters == 4 * 2


def test_radau5_rate_on_a_known_value():
    # One step of Radau IIA(5) on y' = -y is R(-h), the (2, 3) Pade approximant of exp(-h).
    h = 0.5
    sol = odecore.solve(
        lambda t, y: -y, torch.ones(1, dtype=F64), t0=0.0, t1=h, dt0=h, solver=odecore.RadauIIA5()
    )
    z = -h
    pade = (1 + 2 * z / 5 + z**2 / 20) / (1 - 3 * z / 5 + 3 * z**2 / 20 - z**3 / 60)
    assert sol.ys[-1].item() == pytest.approx(pade, rel=1e-13)
    assert pade == pytest.approx(math.exp(z), rel=1e-4)


@pytest.mark.parametrize(
    "solver",
    [odecore.Kvaerno5(), odecore.RadauIIA5(), odecore.ImplicitEuler(), odecore.Rodas5P()],
    ids=lambda s: type(s).__name__,
)
def test_an_empty_state_is_solved(solver):
    # Its Jacobian is 0 x 0: no vector-Jacobian product to batch (an IndexError once).
    y0 = torch.ones(0, dtype=torch.float64)
    sol = odecore.solve(lambda t, y: -y, y0, t0=0.0, t1=1.0, solver=solver, dt0=0.25)
    assert sol.status == odecore.Status.SUCCESS
    assert sol.ys.shape == (1, 0)

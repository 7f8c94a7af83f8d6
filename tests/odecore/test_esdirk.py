"""Kværnø's ESDIRK 5(4) (``Kvaerno5``): the tableau, convergence, stiff problems, gradients.

The goal problem is Van der Pol's oscillator with ``mu = 1000`` on ``[0, 3000]``
(two periods of relaxation oscillations; between its jumps the Jacobian has an
eigenvalue near ``-3 mu``), ``y0 = (2, 0)``, ``rtol = atol = 1e-6``, float64.
"""

from __future__ import annotations

import math

import numpy as np
import odecore
import oracles
import pytest
import torch
from odecore import Kvaerno5, Newton
from scipy.integrate import solve_ivp
from test_fixed import fitted_order
from test_tableau import order_residuals

F64 = torch.float64
TAB = Kvaerno5.tableau

# --- the tableau ----------------------------------------------------------------------


def test_solution_weights_meet_the_order_conditions_of_order_5_only():
    assert np.abs(order_residuals(TAB.b, TAB, 5)).max() < 1e-15
    assert np.abs(order_residuals(TAB.b, TAB, 6)).max() > 1e-3


def test_embedded_weights_meet_the_order_conditions_of_order_4_only():
    b_hat = [b - e for b, e in zip(TAB.b, TAB.b_err)]
    assert np.abs(order_residuals(b_hat, TAB, 4)).max() < 1e-15
    assert np.abs(order_residuals(b_hat, TAB, 5)).max() > 1e-4


def test_tableau_is_a_stiffly_accurate_esdirk_pair():
    a = np.array(TAB.a)
    s = TAB.stages
    assert s == 7
    assert (a[0] == 0).all()  # explicit first stage
    assert (np.diag(a)[1:] == 0.26).all()  # one diagonal value
    assert (np.triu(a, 1) == 0).all()  # singly diagonally implicit: nothing above
    assert TAB.b == TAB.a[-1]  # stiffly accurate: y1 is the last stage value
    b_hat = np.array(TAB.b) - np.array(TAB.b_err)
    assert np.abs(b_hat - a[-2]).max() < 1e-16  # the embedded one the stage before
    assert np.allclose(a.sum(axis=1), TAB.c, rtol=0, atol=1e-15)
    assert TAB.c[-1] == TAB.c[-2] == 1.0
    assert TAB.c[2] > 1.0  # the third stage is evaluated past the step (documented)


def _stability(weights, z):
    """``R(z) = 1 + z w^T (I - z A)^{-1} 1``: a step of ``y' = lambda y`` at ``z = h lambda``."""
    a = np.array(TAB.a)
    one = np.ones(TAB.stages)
    return 1 + z * np.asarray(weights) @ np.linalg.solve(np.eye(TAB.stages) - z * a, one)


def test_solution_is_l_stable_and_embedded_a_stable():
    b_hat = np.array(TAB.b) - np.array(TAB.b_err)
    ys = np.concatenate([-np.logspace(-3, 8, 300), np.logspace(-3, 8, 300)])
    for w in (TAB.b, b_hat):
        assert max(abs(_stability(w, 1j * y)) for y in ys) <= 1 + 1e-12
    # Stiff components are damped, R(z) ~ 6.5 / |z| (evaluated where the solve with
    # I - z A is still well conditioned).
    for z in (-1e4, -1e6, -1e8):
        assert abs(_stability(TAB.b, z)) < 10 / abs(z)


def test_a_tableau_that_is_not_esdirk_is_refused():
    from odecore._esdirk import _plan

    radau = odecore.RadauIIA5.tableau
    with pytest.raises(ValueError, match=r"Not a stiffly accurate ESDIRK pair: .*first stage"):
        _plan(radau)


# --- configuration --------------------------------------------------------------------


def test_registered_for_odeint_and_exported():
    assert odecore.ADAPTIVE_METHODS["kvaerno5"] is Kvaerno5
    assert Kvaerno5().adaptive and Kvaerno5.order == 5
    assert odecore.OdeSpec.from_method("kvaerno5").solver == Kvaerno5()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"newton": 8}, r"`newton` must be an odecore.Newton \(e.g. odecore.Newton"),
        ({"interpolation": "linear"}, "`interpolation` must be 'hermite' or 'cubic', got 'linear'"),
    ],
)
def test_bad_settings_are_refused(kwargs, match):
    with pytest.raises(odecore.ConfigurationError, match=match):
        Kvaerno5(**kwargs)


# --- accuracy on smooth problems ------------------------------------------------------

TIGHT = Newton(rtol=1e-14, atol=1e-14)  # stages solved to rounding: the scheme itself
CLOSED = [oracles.decay, oracles.cos_growth, oracles.linear_system, oracles.harmonic]
FRACTIONS = [0.0, 0.137, 0.31, 0.5, 0.77, 0.913, 1.0]


def _fixed_errors(prob, interpolation):
    span = prob.t1 - prob.t0
    ts = prob.t0 + span * torch.tensor(FRACTIONS, dtype=F64)
    y0 = prob.y0_as(F64)
    dts = [span / (4 * 2**k + 0.37) for k in range(5)]  # steps off the output grid
    errors = []
    for dt in dts:
        sol = odecore.solve(
            prob.f,
            y0,
            t0=prob.t0,
            t1=prob.t1,
            solver=Kvaerno5(newton=TIGHT, interpolation=interpolation),
            controller=odecore.ConstantStepSize(),
            dt0=dt,
            saveat=odecore.SaveAt(ts=ts),
        )
        errors.append(float((sol.ys - prob.exact(ts, y0)).abs().max()))
    return dts, errors


@pytest.mark.parametrize("prob", CLOSED, ids=repr)
def test_convergence_order_at_off_grid_times(prob):
    # The quintic Hermite output is as accurate as the step ends: order 5 everywhere.
    dts, errors = _fixed_errors(prob, "hermite")
    slope = fitted_order(dts, errors)
    assert abs(slope - 5) < 0.2, (slope, errors)


@pytest.mark.parametrize("prob", CLOSED, ids=repr)
def test_cubic_output_is_fourth_order_between_step_ends(prob):
    dts, errors = _fixed_errors(prob, "cubic")
    slope = fitted_order(dts, errors)
    assert abs(slope - 4) < 0.4, (slope, errors)


def test_adaptive_solve_meets_its_tolerance_on_a_smooth_problem():
    prob = oracles.harmonic
    y0 = prob.y0_as(F64)
    ts = torch.linspace(prob.t0, prob.t1, 9, dtype=F64)
    ys = odecore.odeint(prob.f, y0, ts, method="kvaerno5", rtol=1e-8, atol=1e-10)
    assert (ys - prob.exact(ts, y0)).abs().max() < 1e-6


def test_odeint_is_solve_with_the_same_objects():
    prob = oracles.van_der_pol
    y0 = prob.y0_as(F64)
    ts = torch.linspace(prob.t0, prob.t1, 5, dtype=F64)
    ys = odecore.odeint(prob.f, y0, ts, method="kvaerno5", rtol=1e-6, atol=1e-6)
    sol = odecore.solve(
        prob.f,
        y0,
        t0=prob.t0,
        t1=prob.t1,
        solver=Kvaerno5(newton=Newton(rtol=1e-8, atol=1e-8)),  # what odeint makes of 1e-6
        controller=odecore.PIDController(rtol=1e-6, atol=1e-6),
        saveat=odecore.SaveAt(ts=ts),
    )
    assert torch.equal(ys, sol.ys)


def test_odeint_solves_the_stages_to_a_hundredth_of_its_tolerances():
    spec = odecore.OdeSpec.from_method("kvaerno5", rtol=1e-4, atol=1e-6)
    assert (spec.solver.newton.rtol, spec.solver.newton.atol) == (1e-6, 1e-8)
    # the default solver is that of odecore's default tolerances, 1e-7 and 1e-9
    assert Kvaerno5().newton == Newton(rtol=1e-9, atol=1e-11)
    assert odecore.OdeSpec.from_method("kvaerno5").solver == Kvaerno5()
    # other settings of a solver made by name stay
    assert spec.solver.newton.max_iters == Newton().max_iters


def test_krylov_path_agrees_with_the_dense_path():
    # A batch of three stiff Van der Pol oscillators as one system: the matrix-free
    # Newton-Krylov iteration solves the same stages as the dense one, to its tolerance.
    y0 = torch.tensor([[2.0, 0.0], [1.0, 0.5], [-1.5, 0.2]], dtype=F64)
    runs = {}
    for jac in ("dense", "krylov"):
        newton = Newton(jacobian=jac, rtol=1e-10, atol=1e-12, krylov_rtol=1e-8)
        sol = odecore.solve(
            _vdp(100.0),
            y0,
            t0=0.0,
            t1=1.0,
            solver=Kvaerno5(newton=newton),
            controller=odecore.PIDController(rtol=1e-6, atol=1e-6),
        )
        assert sol.ys.shape == (1, 3, 2)
        runs[jac] = sol
    assert torch.allclose(runs["dense"].ys, runs["krylov"].ys, rtol=1e-6, atol=1e-8)
    assert runs["dense"].stats.n_accepted == runs["krylov"].stats.n_accepted


# --- Newton failures ----------------------------------------------------------------


def test_a_failed_iteration_rejects_the_step():
    f = _vdp(1000.0)
    y0 = torch.tensor([2.0, 0.0], dtype=F64)
    solver = Kvaerno5(newton=Newton(max_iters=1))
    step = solver.step(lambda t, y: f(torch.tensor(t, dtype=F64), y), 0.0, 50.0, y0, f(0.0, y0))
    assert torch.isnan(step.y_err).all()
    controller = odecore.PIDController(rtol=1e-6, atol=1e-6)
    _, state = controller.init(f, 0.0, 50.0, y0, f(0.0, y0), solver, 50.0)
    verdict = controller.adapt(0.0, 50.0, y0, step, solver, state)
    assert not verdict.accept and verdict.dt == pytest.approx(50.0 * controller.factor_min)


def test_failed_iterations_are_retried_smaller_and_the_solve_succeeds():
    # Two iterations per stage are too few for the large steps this problem allows:
    # those steps are rejected and retried smaller, and the answer is unchanged.
    f = _vdp(1000.0)
    y0 = torch.tensor([2.0, 0.0], dtype=F64)
    runs = [
        odecore.solve(
            f,
            y0,
            t0=0.0,
            t1=300.0,
            solver=Kvaerno5(newton=Newton(max_iters=n)),
            controller=odecore.PIDController(rtol=1e-6, atol=1e-6),
        )
        for n in (2, 10)
    ]
    assert runs[0].stats.n_rejected > runs[1].stats.n_rejected
    assert torch.allclose(runs[0].ys, runs[1].ys, rtol=1e-4, atol=1e-6)


def test_a_failed_iteration_under_constant_steps_fails_the_solve():
    f = _vdp(1000.0)
    y0 = torch.tensor([2.0, 0.0], dtype=F64)
    with pytest.raises(
        odecore.SolverError,
        match=r"Newton did not converge at step size h = 50 \(t = 0\.0\) after 1 iteration",
    ) as info:
        odecore.solve(
            f,
            y0,
            t0=0.0,
            t1=100.0,
            solver=Kvaerno5(newton=Newton(max_iters=1)),
            controller=odecore.ConstantStepSize(),
            dt0=50.0,
        )
    assert info.value.status is odecore.Status.NEWTON_FAILED


def _stiffens(t, y):
    """``y' = -y``, and from ``t = 0.44`` on ``y' = -y - 1000 y^3``: the iteration
    fails in the step from 0.4 to 0.5 (see ``test_implicit.stiffens``)."""
    c = 1000.0 if float(t) > 0.44 else 0.0
    return -y - c * y**3


def _solve_stiffening(max_iters, t1=1.0, **kwargs):
    return odecore.solve(
        _stiffens,
        torch.ones(2, dtype=F64),
        t0=0.0,
        t1=t1,
        dt0=0.1,
        solver=Kvaerno5(newton=Newton(max_iters=max_iters)),
        controller=odecore.ConstantStepSize(),
        saveat=odecore.SaveAt(ts=[i / 10 for i in range(11) if i / 10 <= t1]),
        **kwargs,
    )


@pytest.mark.parametrize("max_iters", [2, 10])
def test_a_failed_iteration_under_constant_steps_is_a_status_without_throw(max_iters):
    sol = _solve_stiffening(max_iters, throw=False)
    assert sol.status is odecore.Status.NEWTON_FAILED
    assert sol.t_final == 0.4
    ref = _solve_stiffening(max_iters, t1=0.4)
    assert torch.equal(sol.ys[:5], ref.ys)
    assert torch.isnan(sol.ys[5:]).all()
    with pytest.raises(
        odecore.SolverError,
        match=(
            r"^solve\(\) stopped at t = 0\.4 before reaching t1 = 1\.0: .* Newton did not "
            r"converge at step size h = 0\.1 \(t = 0\.4\) after \d+ iteration\(s\): .*`max_iters`"
        ),
    ):
        _solve_stiffening(max_iters)


def test_a_failed_iteration_at_the_smallest_step_is_a_newton_failure():
    # The controller retries a failed step shorter, but not below dt_min: there the
    # solve ends with the iteration's failure, not as a non-finite state.
    kwargs = {
        "t0": 0.0,
        "t1": 1.0,
        "dt0": 0.1,
        "solver": Kvaerno5(newton=Newton(max_iters=2)),
        "controller": odecore.PIDController(rtol=1e-6, atol=1e-6, dt_min=0.1),
    }
    y0 = torch.ones(2, dtype=F64)
    sol = odecore.solve(_stiffens, y0, throw=False, **kwargs)
    assert sol.status is odecore.Status.NEWTON_FAILED
    assert sol.t_final == pytest.approx(0.4)
    with pytest.raises(
        odecore.SolverError, match=r"Newton did not converge at step size h = 0\.1 \(t = 0\.4"
    ):
        odecore.solve(_stiffens, y0, **kwargs)


# --- the stiff goal: Van der Pol, mu = 1000 --------------------------------------------

MU = 1000.0
SPAN = (0.0, 3000.0)
TOL = 1e-6

RK45_STEPS = 1_689_072
"""SciPy's RK45 on the goal problem: accepted steps over [0, 3000] at rtol = atol = 1e-6,
measured by ``python examples/stiff.py --rk45`` (11,823,044 evaluations, 48 to 60 s
in three runs). An explicit method's steps are bounded by stability, not accuracy, so
the count does not depend on SciPy's version beyond a few per cent."""


class VanDerPol(torch.nn.Module):
    """``x'' = mu (1 - x^2) x' - x`` as ``y = (x, x')``, ``mu`` a parameter."""

    def __init__(self, mu: float) -> None:
        super().__init__()
        self.mu = torch.nn.Parameter(torch.tensor(mu, dtype=F64))

    def forward(self, t, y):
        x, v = y[..., 0], y[..., 1]
        return torch.stack([v, self.mu * (1 - x * x) * v - x], dim=-1)


def _vdp(mu):
    return VanDerPol(mu).requires_grad_(False)


def _scipy(mu, y0, t1, method, tol, t_eval=None):
    def f(t, y):
        return [y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]]

    def jac(t, y):
        return [[0.0, 1.0], [-2 * mu * y[0] * y[1] - 1, mu * (1 - y[0] ** 2)]]

    sol = solve_ivp(f, (0.0, t1), y0, method=method, rtol=tol, atol=tol, jac=jac, t_eval=t_eval)
    assert sol.status == 0, sol.message
    return sol


@pytest.fixture(scope="module")
def goal():
    """The goal problem solved once by kvaerno5, with outputs at 31 times."""
    ts = torch.linspace(*SPAN, 31, dtype=F64)
    y0 = torch.tensor([2.0, 0.0], dtype=F64)
    with torch.no_grad():
        sol = odecore.solve(
            _vdp(MU),
            y0,
            t0=SPAN[0],
            t1=SPAN[1],
            solver=Kvaerno5(),
            controller=odecore.PIDController(rtol=TOL, atol=TOL),
            saveat=odecore.SaveAt(ts=ts),
            max_steps=20_000,
        )
    return ts, sol


def test_goal_is_solved_where_dopri5_runs_out_of_steps(goal):
    _, sol = goal
    assert sol.status == odecore.Status.SUCCESS
    with pytest.raises(odecore.SolverError, match="maximum number of steps"), torch.no_grad():
        odecore.solve(
            _vdp(MU),
            torch.tensor([2.0, 0.0], dtype=F64),
            t0=SPAN[0],
            t1=SPAN[1],
            solver=odecore.Dopri5(),
            controller=odecore.PIDController(rtol=TOL, atol=TOL),
            max_steps=20_000,  # fifty times what kvaerno5 takes
        )


def test_goal_takes_under_five_percent_of_rk45s_steps(goal):
    _, sol = goal
    assert sol.stats.n_steps < 0.05 * RK45_STEPS
    # and is within a factor of two of SciPy's Radau IIA (order 5, three stages), counted
    # here and now, accepted plus rejected steps against its accepted ones
    radau = _scipy(MU, [2.0, 0.0], SPAN[1], "Radau", TOL)
    assert sol.stats.n_steps < 2 * (len(radau.t) - 1)


def test_goal_agrees_with_a_tight_radau_solve(goal):
    ts, sol = goal
    ref = _scipy(MU, [2.0, 0.0], SPAN[1], "Radau", 1e-10, t_eval=ts.numpy()).y.T
    # Global errors of a stiff solve are some ten times its local tolerance: x is O(1)
    # (relative 1e-4), x' is O(1e-3) between the jumps (absolute 1e-5, ten atol).
    np.testing.assert_allclose(sol.ys.numpy(), ref, rtol=1e-4, atol=1e-5)


# --- gradients ------------------------------------------------------------------------


def _fd_jacobian(mu, t1):
    """d y(t1) / d (y0, mu) by central differences of a tight Radau solve."""
    y0 = np.array([2.0, 0.0])
    cols = []
    for j in range(3):
        d = np.zeros(3)
        d[j] = 1e-6 * (mu if j == 2 else 1.0)

        def at(sign, d=d):
            return _scipy(mu + sign * d[2], y0 + sign * d[:2], t1, "Radau", 1e-12).y[:, -1]

        cols.append((at(1) - at(-1)) / (2 * d[j]))
    return np.stack(cols, axis=1)


def _jacobian(gradient, mu, t1, tol):
    f = VanDerPol(mu)
    y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)
    sol = odecore.solve(
        f,
        y0,
        t0=0.0,
        t1=t1,
        solver=Kvaerno5(),
        controller=odecore.PIDController(rtol=tol, atol=tol),
        gradient=gradient,
    )
    rows = []
    for i in range(2):
        g_y0, g_mu = torch.autograd.grad(sol.ys[-1][i], (y0, f.mu), retain_graph=True)
        rows.append([*g_y0.tolist(), g_mu.item()])
    return np.array(rows)


@pytest.fixture(scope="module")
def stiff_fd():
    return _fd_jacobian(MU, 1.0)


@pytest.mark.parametrize(
    "gradient",
    [
        odecore.Autograd(),
        odecore.Checkpoint(),
        # The default for an implicit solver: the state read from the forward steps.
        odecore.Adjoint(),
        odecore.Adjoint(state="interpolated"),
    ],
    ids=["backprop", "checkpoint", "adjoint", "adjoint-interpolated"],
)
def test_gradients_on_stiff_van_der_pol_match_finite_differences(gradient, stiff_fd):
    # d y(1) / d (x0, v0, mu) at mu = 1000, from (2, 0): through the initial transient
    # (x' falls from 0 to -2 / (3 mu) in a millisecond) onto the slow manifold.
    jac = _jacobian(gradient, MU, 1.0, 1e-8)
    scale = np.abs(stiff_fd).max(axis=1, keepdims=True)  # per output, dy/dx0 dominates
    assert (np.abs(jac - stiff_fd) / scale).max() < 1e-4
    assert np.abs(jac[:, 2] - stiff_fd[:, 2]).max() < 1e-4 * np.abs(stiff_fd[:, 2]).max()


class ProtheroRobinson(torch.nn.Module):
    """``u' = -lam (u - p sin t) + p cos t``, ``w' = -w``: ``u = p sin t`` from ``u(0) = 0``,
    so ``d u(t1) / d p = sin t1`` and ``d w(t1) / d w0 = exp(-t1)``."""

    def __init__(self, lam: float) -> None:
        super().__init__()
        self.lam = lam
        self.p = torch.nn.Parameter(torch.tensor(0.7, dtype=F64))

    def forward(self, t, y):
        u, w = y[0], y[1]
        return torch.stack([-self.lam * (u - self.p * torch.sin(t)) + self.p * torch.cos(t), -w])


def _pr_gradients(gradient, lam=100.0, tol=1e-8):
    field = ProtheroRobinson(lam)
    y0 = torch.tensor([0.0, 1.0], dtype=F64, requires_grad=True)
    sol = odecore.solve(
        field, y0, t0=0.0, t1=2.0, solver=Kvaerno5(),
        controller=odecore.PIDController(rtol=tol, atol=tol), gradient=gradient,
    )  # fmt: skip
    return torch.autograd.grad(sol.ys[-1].sum(), (field.p, y0))


def test_adjoint_backward_solve_is_the_forward_solver_by_default(monkeypatch):
    # The backward solve steps with kvaerno5 too. By default for an implicit solver it
    # reads the state from the forward steps: adjoint and the parameter's gradient, 3
    # elements. Integrating the state backward too (5 elements) works on this mildly
    # stiff problem (lam = 100), though its stiff mode grows backward in time.
    sizes = []
    step = Kvaerno5.step_with

    def spy(self, state, f, t0, t1, y0, f0):
        sizes.append(y0.numel())
        return step(self, state, f, t0, t1, y0, f0)

    monkeypatch.setattr(Kvaerno5, "step_with", spy)
    for gradient, size in ((odecore.Adjoint(), 3), (odecore.Adjoint(state="backsolve"), 5)):
        sizes.clear()
        g_p, g_y0 = _pr_gradients(gradient)
        assert set(sizes) == {2, size}
        assert g_p.item() == pytest.approx(math.sin(2.0), rel=1e-6)
        assert g_y0[1].item() == pytest.approx(math.exp(-2.0), rel=1e-6)


def test_adjoint_agrees_with_backprop_on_a_stiff_problem():
    for a, b in zip(_pr_gradients(odecore.Autograd()), _pr_gradients(odecore.Adjoint())):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(
    "gradient", [odecore.Autograd(), odecore.Checkpoint(every=2)], ids=["backprop", "checkpoint"]
)
def test_gradcheck_of_the_discrete_scheme(gradient):
    # Fixed steps and stages solved to rounding: the solve is a smooth function of y0,
    # the field's parameters and the output times (inside steps, read off the Hermite
    # interpolant), and its gradient is exact (the implicit function theorem at every
    # stage, not the iterations). The field is stiff (rates 50 and 1) and nonlinear.

    def run(y0, k, c, ts):
        def field(t, y):
            return -k * (y - torch.cos(t)) + c * y.flip(-1) ** 2

        sol = odecore.solve(
            field, y0, t0=0.0, t1=0.6, solver=Kvaerno5(newton=TIGHT),
            controller=odecore.ConstantStepSize(), dt0=0.15,
            saveat=odecore.SaveAt(ts=ts), gradient=gradient,
        )  # fmt: skip
        return sol.ys

    inputs = (
        torch.tensor([0.4, -0.2], dtype=F64, requires_grad=True),
        torch.tensor([50.0, 1.0], dtype=F64, requires_grad=True),
        torch.tensor(0.3, dtype=F64, requires_grad=True),
        torch.tensor([0.2, 0.37, 0.5], dtype=F64, requires_grad=True),
    )
    assert torch.autograd.gradcheck(run, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(("t0", "t1"), [(0.0, 0.7), (0.7, 0.0)])
def test_the_stage_past_the_step_sees_the_field_before_a_jump(t0, t1):
    # y' = -0.8 y before t = 0.5 and 0.6 y after. The third stage, at t + 1.23 h, of the
    # step that ends on the jump saw the field after it: 5.9e-3 off with steps of 0.1.
    def field(t, y):
        return torch.where(t < 0.5, -0.8 * y, 0.6 * y)

    y0 = torch.ones(1, dtype=F64)
    sol = odecore.solve(
        field, y0, t0=t0, t1=t1, solver=Kvaerno5(), controller=odecore.ConstantStepSize(),
        dt0=0.1, jump_ts=[0.5],
    )  # fmt: skip
    growth = math.exp(-0.8 * 0.5 + 0.6 * 0.2)
    expected = growth if t1 > t0 else 1 / growth
    assert sol.ys[-1, 0].item() == pytest.approx(expected, rel=1e-8)

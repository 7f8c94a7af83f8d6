"""Rosenbrock methods (``Rodas4``, ``Rodas5P``): order, stiff problems against SciPy,
gradients, batches."""

from __future__ import annotations

import math

import numpy as np
import odecore
import oracles
import pytest
import torch
from odecore import Rodas4, Rodas5P
from scipy.integrate import solve_ivp
from test_esdirk import VanDerPol, _fd_jacobian, _scipy
from test_fixed import fitted_order

F64 = torch.float64
METHODS = pytest.mark.parametrize("method", [Rodas4, Rodas5P], ids=["rodas4", "rodas5p"])

# --- the tableau and configuration ----------------------------------------------------


def _stability(tab, weights, z):
    """``y1 / y0`` for ``y' = lambda y``, ``z = h lambda``, from the transformed stages:
    ``(1 / gamma - z) u_i = z (1 + sum a_ij u_j) + sum c_ij u_j``."""
    us: list[complex] = []
    for i in range(tab.stages):
        arg = 1 + sum(a * u for a, u in zip(tab.a[i], us))
        rhs = z * arg + sum(c * u for c, u in zip(tab.c[i], us))
        us.append(rhs / (1 / tab.gamma - z))
    return 1 + sum(m * u for m, u in zip(weights, us))


@METHODS
def test_solution_is_l_stable_and_the_embedded_one_a_stable(method):
    tab = method.tableau
    m_hat = [m - e for m, e in zip(tab.m, tab.m_err)]
    ys = np.logspace(-3, 8, 300)
    for w in (tab.m, m_hat):
        assert max(abs(_stability(tab, w, 1j * y)) for y in ys) <= 1 + 1e-12
        assert max(abs(_stability(tab, w, -y)) for y in ys) <= 1 + 1e-12
    for z in (-1e4, -1e6, -1e8):  # stiff components are damped: R(z) ~ 1 / z
        assert abs(_stability(tab, tab.m, z)) < 20 / abs(z)


@pytest.mark.parametrize(
    ("name", "method", "order", "tableau"),
    [
        ("rodas4", Rodas4, 4, odecore.RODAS4_TABLEAU),
        ("rodas5p", Rodas5P, 5, odecore.RODAS5P_TABLEAU),
    ],
)
def test_registered_for_odeint_and_exported(name, method, order, tableau):
    assert odecore.ROSENBROCK_METHODS[name] is method
    assert method().adaptive and method.order == order
    assert odecore.OdeSpec.from_method(name).solver == method()
    assert method.tableau is tableau


def test_a_dense_row_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="Each row of `dense` must have 2 entries"):
        odecore.RosenbrockTableau(
            gamma=0.5, alpha=(0.0, 1.0), gammas=(0.5, 0.0), a=((), (1.0,)), c=((), (1.0,)),
            m=(0.5, 0.5), m_err=(0.0, 1.0), dense=((1.0, 2.0, 3.0),),
        )  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"independent": 1}, "`independent` must be True or False, got 1"),
        ({"dense_limit": 0}, "`dense_limit` must be a positive integer, got 0"),
        ({"interpolation": "linear"}, "`interpolation` must be 'rosenbrock', 'hermite' or"),
    ],
)
def test_bad_settings_are_refused(kwargs, match):
    with pytest.raises(odecore.ConfigurationError, match=match):
        Rodas4(**kwargs)


def test_a_tableau_with_ragged_rows_is_refused():
    with pytest.raises(ValueError, match="strictly lower"):
        odecore.RosenbrockTableau(
            gamma=0.5, alpha=(0.0, 1.0), gammas=(0.5, 0.0), a=((), ()), c=((), (1.0,)),
            m=(0.5, 0.5), m_err=(0.0, 1.0),
        )  # fmt: skip


# --- accuracy -------------------------------------------------------------------------

FRACTIONS = [0.0, 0.137, 0.31, 0.5, 0.77, 0.913, 1.0]


def _fixed_errors(prob, interpolation, fractions=(1.0,), method=Rodas4):
    span = prob.t1 - prob.t0
    ts = prob.t0 + span * torch.tensor(fractions, dtype=F64)
    y0 = prob.y0_as(F64)
    dts = [span / (4 * 2**k + 0.37) for k in range(5)]  # steps off the output grid
    errors = []
    for dt in dts:
        sol = odecore.solve(
            prob.f, y0, t0=prob.t0, t1=prob.t1, solver=method(interpolation=interpolation),
            controller=odecore.ConstantStepSize(), dt0=dt, saveat=odecore.SaveAt(ts=ts),
        )  # fmt: skip
        errors.append(float((sol.ys - prob.exact(ts, y0)).abs().max()))
    return dts, errors


@pytest.mark.parametrize("prob", [oracles.linear_system, oracles.harmonic], ids=repr)
def test_convergence_order_is_four_at_step_ends(prob):
    dts, errors = _fixed_errors(prob, "rosenbrock")
    slope = fitted_order(dts, errors)
    assert abs(slope - 4) < 0.2, (slope, errors)


@pytest.mark.parametrize(
    ("method", "order"), [(Rodas4, 4), (Rodas5P, 5)], ids=["rodas4", "rodas5p"]
)
def test_a_time_dependent_field_keeps_the_order(method, order):
    # cos_growth depends on t: df/dt comes from a difference in time.
    dts, errors = _fixed_errors(oracles.cos_growth, "rosenbrock", method=method)
    slope = fitted_order(dts, errors)
    assert abs(slope - order) < 0.3, (slope, errors)


def test_rodas5p_is_of_order_five_on_a_nonlinear_field():
    # On linear fields Rodas5P's error falls like h^6; the pendulum shows its order.
    prob = oracles.pendulum
    y0, ts = prob.y0_as(F64), torch.tensor([prob.t1], dtype=F64)
    ref = oracles.reference(prob, y0, ts)
    dts = [(prob.t1 - prob.t0) / (32 * 2**k + 0.37) for k in range(3)]
    errors = [
        float((odecore.solve(
            prob.f, y0, t0=prob.t0, t1=prob.t1, solver=Rodas5P(), dt0=dt,
            controller=odecore.ConstantStepSize(), saveat=odecore.SaveAt(ts=ts),
        ).ys - ref).abs().max())
        for dt in dts
    ]  # fmt: skip
    slope = fitted_order(dts, errors)
    assert abs(slope - 5) < 0.3, (slope, errors)


@pytest.mark.parametrize(
    ("method", "interpolation", "order"),
    [(Rodas4, "rosenbrock", 4), (Rodas4, "hermite", 4), (Rodas5P, "rosenbrock", 5)],
)
def test_dense_output_keeps_the_order_between_step_ends(method, interpolation, order):
    # Rodas4's continuous extension is of order 3 (an error of h^4 inside each step,
    # as the global error), the Hermite one's h^6; Rodas5P's is of order 4.
    dts, errors = _fixed_errors(oracles.linear_system, interpolation, FRACTIONS, method)
    slope = fitted_order(dts, errors)
    assert abs(slope - order) < 0.3, (slope, errors)


def test_odeint_by_name_meets_its_tolerance():
    prob = oracles.harmonic
    y0 = prob.y0_as(F64)
    ts = torch.linspace(prob.t0, prob.t1, 9, dtype=F64)
    ys = odecore.odeint(prob.f, y0, ts, method="rodas4", rtol=1e-8, atol=1e-10)
    assert (ys - prob.exact(ts, y0)).abs().max() < 1e-6


def test_a_huge_step_of_a_very_stiff_decay_stays_bounded():
    # y' = -1e6 y with h = 1 (h lambda = -1e6): L-stable, the step damps y.
    y0 = torch.tensor([1.0], dtype=F64)
    sol = odecore.solve(
        lambda t, y: -1e6 * y, y0, t0=0.0, t1=5.0, solver=Rodas4(),
        controller=odecore.ConstantStepSize(), dt0=1.0,
        saveat=odecore.SaveAt(ts=[1.0, 2.0, 3.0, 4.0, 5.0]),
    )  # fmt: skip
    assert torch.isfinite(sol.ys).all()
    assert sol.ys.abs().max() < 1e-5


@pytest.mark.slow
@METHODS
def test_stiff_van_der_pol_agrees_with_a_tight_radau_solve(method):
    ts = torch.linspace(0.0, 3000.0, 31, dtype=F64)
    with torch.no_grad():
        sol = odecore.solve(
            VanDerPol(1000.0), torch.tensor([2.0, 0.0], dtype=F64), t0=0.0, t1=3000.0,
            solver=method(), controller=odecore.PIDController(rtol=1e-6, atol=1e-6),
            saveat=odecore.SaveAt(ts=ts),
        )  # fmt: skip
    ref = _scipy(1000.0, [2.0, 0.0], 3000.0, "Radau", 1e-10, t_eval=ts.numpy()).y.T
    # x is O(1) (relative 1e-4), x' is O(1e-3) between the jumps (ten atol)
    np.testing.assert_allclose(sol.ys.numpy(), ref, rtol=1e-4, atol=1e-5)


def _robertson(t, y):
    a, b, c = y.unbind(-1)
    return torch.stack(
        [-0.04 * a + 1e4 * b * c, 0.04 * a - 1e4 * b * c - 3e7 * b**2, 3e7 * b**2], dim=-1
    )


@METHODS
def test_robertson_agrees_with_a_tight_radau_solve(method):
    ts = np.array([1e-3, 1.0, 40.0, 1e3, 1e5])

    def f(t, y):
        return [-0.04 * y[0] + 1e4 * y[1] * y[2],
                0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2, 3e7 * y[1] ** 2]  # fmt: skip

    ref = solve_ivp(f, (0, 1e5), [1, 0, 0], method="Radau", rtol=1e-10, atol=1e-14, t_eval=ts)
    with torch.no_grad():
        sol = odecore.solve(
            _robertson, torch.tensor([1.0, 0.0, 0.0], dtype=F64), t0=0.0, t1=1e5,
            solver=method(), controller=odecore.PIDController(rtol=1e-6, atol=1e-10),
            saveat=odecore.SaveAt(ts=torch.tensor(ts)),
        )  # fmt: skip
    np.testing.assert_allclose(sol.ys.numpy(), ref.y.T, rtol=1e-4, atol=1e-9)


@METHODS
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("independent", [False, True], ids=["dense", "per-sample"])
def test_a_half_precision_state_is_factorised_in_float32(method, dtype, independent):
    # LAPACK has no half-precision LU: the matrix is factorised in float32 and the
    # stages are rounded back, so the solution keeps the state's dtype and tolerance.
    y0 = torch.tensor([[2.0, 0.5], [1.0, -0.5]])
    sols = {}
    for dt in (dtype, F64):
        sols[dt] = odecore.solve(
            _prothero_robinson, y0.to(dt), t0=0.0, t1=2.0, solver=method(independent=independent),
            controller=odecore.PIDController(rtol=1e-2, atol=1e-2),
        )  # fmt: skip
    assert sols[dtype].ys.dtype == dtype
    exact = torch.cos(torch.tensor(2.0, dtype=F64))
    assert (sols[dtype].ys[-1].double() - exact).abs().max() < 3e-2
    assert (sols[F64].ys[-1] - exact).abs().max() < 1e-2


def _prothero_robinson(t, y):
    return -1000.0 * (y - torch.cos(t)) - torch.sin(t)


@pytest.mark.parametrize(
    ("method", "growth"), [(Rodas4, 0.4), (Rodas5P, 0.25)], ids=["rodas4", "rodas5p"]
)
def test_steps_on_a_stiff_mode_driven_by_time(method, growth):
    # Prothero-Robinson, y = cos(t) after the transient: a method of order p that keeps
    # its order takes steps that grow like tol^(-1/p). Rodas4's estimate loses order
    # here (its steps grow like tol^-0.45); Rodas5P's does not.
    y0 = torch.tensor([2.0], dtype=F64)
    steps = {}
    for tol in (1e-6, 1e-9):
        sol = odecore.solve(
            _prothero_robinson, y0, t0=0.0, t1=5.0, solver=method(),
            controller=odecore.PIDController(rtol=tol, atol=tol),
        )  # fmt: skip
        assert abs(float(sol.ys[-1, 0]) - math.cos(5.0)) < 10 * tol
        steps[tol] = sol.stats.n_steps
    exponent = math.log(steps[1e-9] / steps[1e-6]) / math.log(1e3)
    assert (exponent > growth) if method is Rodas4 else (exponent < growth), steps


@METHODS
def test_a_step_hits_an_event_on_the_dense_output(method):
    # y' = -y from 1: y = 0.3 at t = log(1 / 0.3).
    sol = odecore.solve(
        lambda t, y: -y, torch.ones(1, dtype=F64), t0=0.0, t1=5.0, solver=method(),
        controller=odecore.PIDController(rtol=1e-9, atol=1e-9),
        event=odecore.Event(lambda t, y: y[0] - 0.3),
    )  # fmt: skip
    assert float(sol.event_t) == pytest.approx(math.log(1 / 0.3), abs=1e-7)


def test_a_state_above_the_dense_limit_is_refused():
    with pytest.raises(odecore.ConfigurationError, match=r"has 10 elements, above `dense_limit`"):
        odecore.solve(
            lambda t, y: -y, torch.ones(10, dtype=F64), t0=0.0, t1=1.0,
            solver=Rodas4(dense_limit=4),
        )  # fmt: skip


# --- gradients ------------------------------------------------------------------------


def _jacobian(gradient, mu, t1, tol, batch=False, method=Rodas4):
    f = VanDerPol(mu)
    y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)
    start = y0.unsqueeze(0) if batch else y0
    sol = odecore.solve(
        f, start, t0=0.0, t1=t1, solver=method(independent=batch),
        controller=odecore.PIDController(rtol=tol, atol=tol), gradient=gradient,
    )  # fmt: skip
    end = sol.ys[-1].reshape(-1)
    rows = []
    for i in range(2):
        g_y0, g_mu = torch.autograd.grad(end[i], (y0, f.mu), retain_graph=True)
        rows.append([*g_y0.tolist(), g_mu.item()])
    return np.array(rows)


@pytest.fixture(scope="module")
def stiff_fd():
    return _fd_jacobian(1000.0, 1.0)


@pytest.mark.parametrize(
    "gradient",
    [
        odecore.Autograd(),
        odecore.Checkpoint(),
        odecore.Adjoint(state="interpolated"),
        odecore.Adjoint(),
    ],
    ids=["backprop", "checkpoint", "adjoint-interpolated", "adjoint-default"],
)
@METHODS
def test_gradients_on_stiff_van_der_pol_match_finite_differences(gradient, method, stiff_fd):
    # d y(1) / d (x0, v0, mu) at mu = 1000 through the initial transient.
    jac = _jacobian(gradient, 1000.0, 1.0, 1e-8, method=method)
    scale = np.abs(stiff_fd).max(axis=1, keepdims=True)
    assert (np.abs(jac - stiff_fd) / scale).max() < 1e-4
    assert np.abs(jac[:, 2] - stiff_fd[:, 2]).max() < 1e-4 * np.abs(stiff_fd[:, 2]).max()


def test_the_adjoint_reads_the_forward_steps_by_default():
    # Integrating the stiff state backward fails (test_adjoint_interpolated), so the
    # default state of the adjoint is the forward solve's, as for Kvaerno5.
    assert odecore.Adjoint().interpolates(Rodas4())
    assert odecore.Adjoint().interpolates(Rodas4(independent=True))
    assert not odecore.Adjoint(state="backsolve").interpolates(Rodas4())


def test_batched_backprop_gives_the_dense_gradients(stiff_fd):
    jac = _jacobian(odecore.Autograd(), 1000.0, 1.0, 1e-8, batch=True)
    scale = np.abs(stiff_fd).max(axis=1, keepdims=True)
    assert (np.abs(jac - stiff_fd) / scale).max() < 1e-4


def _discrete(gradient, method):
    def run(y0, k, c, ts):
        def field(t, y):
            return -k * (y - torch.cos(t)) + c * y.flip(-1) ** 2

        sol = odecore.solve(
            field, y0, t0=0.0, t1=0.6, solver=method(),
            controller=odecore.ConstantStepSize(), dt0=0.15,
            saveat=odecore.SaveAt(ts=ts), gradient=gradient,
        )  # fmt: skip
        return sol.ys

    return run


def _inputs():
    return (
        torch.tensor([0.4, -0.2], dtype=F64, requires_grad=True),
        torch.tensor([50.0, 1.0], dtype=F64, requires_grad=True),
        torch.tensor(0.3, dtype=F64, requires_grad=True),
        torch.tensor([0.2, 0.37, 0.5], dtype=F64, requires_grad=True),
    )


@pytest.mark.parametrize(
    "gradient", [odecore.Autograd(), odecore.Checkpoint(every=2)], ids=["backprop", "checkpoint"]
)
@METHODS
def test_gradcheck_of_the_discrete_scheme(gradient, method):
    # Fixed steps: the solve is a smooth function of y0, the field's parameters and
    # the output times (inside steps, on the continuous extension), and
    # backpropagation differentiates it exactly, the Jacobian's graph included.
    assert torch.autograd.gradcheck(_discrete(gradient, method), _inputs(), eps=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize(
    "gradient", [odecore.Adjoint(), odecore.Adjoint(state="interpolated")],
    ids=["adjoint", "adjoint-interpolated"],
)  # fmt: skip
def test_gradcheck_of_the_adjoint_at_a_tight_tolerance(gradient):
    # The adjoint differentiates the ODE, not the scheme: it matches finite
    # differences of the solve to the solve's tolerance.
    def run(y0, k):
        def field(t, y):
            return -k * (y - torch.cos(t)) + 0.3 * y.flip(-1) ** 2

        sol = odecore.solve(
            field, y0, t0=0.0, t1=0.6, solver=Rodas4(), gradient=gradient,
            controller=odecore.PIDController(rtol=1e-9, atol=1e-9),
        )  # fmt: skip
        return sol.ys

    inputs = (
        torch.tensor([0.4, -0.2], dtype=F64, requires_grad=True),
        torch.tensor([5.0, 1.0], dtype=F64, requires_grad=True),
    )
    assert torch.autograd.gradcheck(run, inputs, eps=1e-5, atol=1e-5, rtol=1e-4)


# --- batches of independent systems -----------------------------------------------------


def _batch_vdp(mu):
    def f(t, y):
        x, v = y[..., :1], y[..., 1:]
        return torch.cat([v, mu * (1 - x * x) * v - x], dim=-1)

    return f


@METHODS
def test_independent_batch_equals_the_dense_solve(method):
    # Eight Van der Pol oscillators, mu from 10 to 1000 as a (B, 1) tensor.
    mu = torch.logspace(1, 3, 8, dtype=F64).unsqueeze(1)
    y0 = torch.stack([torch.linspace(1.0, 2.0, 8), torch.zeros(8)], dim=1).to(F64)
    runs = {}
    for independent in (False, True):
        with torch.no_grad():
            runs[independent] = odecore.solve(
                _batch_vdp(mu), y0, t0=0.0, t1=20.0, solver=method(independent=independent),
                controller=odecore.PIDController(rtol=1e-6, atol=1e-6),
            )  # fmt: skip
    assert runs[True].ys.shape == (1, 8, 2)
    torch.testing.assert_close(runs[True].ys, runs[False].ys, rtol=1e-9, atol=1e-12)
    assert runs[True].stats.n_accepted == runs[False].stats.n_accepted


def test_the_batched_jacobian_is_block_diagonal_and_never_dense(monkeypatch):
    from odecore import _rosenbrock

    shapes = []
    build = _rosenbrock._Matrix.__init__

    def spy(self, jac, gh):
        shapes.append(tuple(jac.shape))
        build(self, jac, gh)

    monkeypatch.setattr(_rosenbrock._Matrix, "__init__", spy)
    mu = torch.full((8, 1), 5.0, dtype=F64)
    y0 = torch.ones(8, 2, dtype=F64)
    odecore.solve(_batch_vdp(mu), y0, t0=0.0, t1=1.0, solver=Rodas4(independent=True))
    assert set(shapes) == {(8, 2, 2)}


@METHODS
def test_an_empty_batch_of_independent_systems_is_solved(method):
    # No sample: the per-sample Jacobian blocks and their solves have no rows.
    y0 = torch.zeros(0, 2, dtype=F64, requires_grad=True)
    sol = odecore.solve(
        _batch_vdp(5.0), y0, t0=0.0, t1=1.0, solver=method(independent=True),
        saveat=odecore.SaveAt(ts=[0.0, 0.5, 1.0]),
    )  # fmt: skip
    assert sol.ys.shape == (3, 0, 2)
    sol.ys.sum().backward()
    assert y0.grad is not None and y0.grad.shape == (0, 2)


def test_a_coupled_batch_is_refused():
    def coupled(t, y):
        return -(y - y.mean(0))

    with pytest.raises(odecore.ConfigurationError, match=r"`independent=True`: the derivative"):
        odecore.solve(
            coupled, torch.randn(4, 2, dtype=F64), t0=0.0, t1=1.0,
            solver=Rodas4(independent=True),
        )  # fmt: skip


@pytest.mark.parametrize("batch", [3, 5, 8])
def test_a_batch_coupled_past_its_first_sample_is_refused(batch):
    # The first sample is a system of its own; the last reads the one before it.
    def coupled(t, y):
        out = -y.clone()
        out[-1] = -1000.0 * (y[-1] - y[-2])
        return out

    with pytest.raises(odecore.ConfigurationError, match=r"`independent=True`: the derivative"):
        odecore.solve(
            coupled, torch.ones(batch, 2, dtype=F64), t0=0.0, t1=1.0,
            solver=Rodas4(independent=True),
        )  # fmt: skip


def test_batched_gradcheck_of_the_discrete_scheme():
    def run(y0, k):
        def field(t, y):
            return -k * (y - torch.cos(t)) + 0.3 * y.flip(-1) ** 2

        sol = odecore.solve(
            field, y0, t0=0.0, t1=0.6, solver=Rodas4(independent=True),
            controller=odecore.ConstantStepSize(), dt0=0.15,
        )  # fmt: skip
        return sol.ys

    inputs = (
        torch.tensor([[0.4, -0.2], [0.1, 0.3], [-0.5, 0.2]], dtype=F64, requires_grad=True),
        torch.tensor([[50.0, 1.0], [2.0, 3.0], [10.0, 0.5]], dtype=F64, requires_grad=True),
    )
    assert torch.autograd.gradcheck(run, inputs, eps=1e-5, atol=1e-6)


# --- the Jacobian kept between steps ----------------------------------------------------


@pytest.mark.parametrize("graph", [False, True], ids=["no_grad", "graph"])
def test_steps_with_kept_jacobians_equal_fresh_steps(monkeypatch, graph):
    # A retry after a rejection keeps its start's Jacobian; the next step takes its
    # Jacobian from the evaluation of f at the step's end. Each step must be exactly the
    # step that a fresh Jacobian (a step without the solve's state) gives.
    calls = []
    step_with = Rodas4.step_with

    def spy(self, state, f, t0, t1, y0, f0):
        result = step_with(self, state, f, t0, t1, y0, f0)
        calls.append((f, t0, t1, y0, f0, result))
        return result

    monkeypatch.setattr(Rodas4, "step_with", spy)
    with torch.set_grad_enabled(graph):  # mu, a parameter, requires grad
        sol = odecore.solve(
            VanDerPol(1000.0), torch.tensor([2.0, 0.0], dtype=F64), t0=0.0, t1=1.0,
            solver=Rodas4(), controller=odecore.PIDController(rtol=1e-6, atol=1e-6),
        )  # fmt: skip
        fresh = [step_with(Rodas4(), None, f, t0, t1, y0, f0) for f, t0, t1, y0, f0, _ in calls]
    assert sol.stats.n_rejected > 0
    assert sol.stats.n_jacobians == sol.stats.n_accepted < sol.stats.n_steps == len(calls)
    for (*_, kept), new in zip(calls, fresh):
        assert torch.equal(kept.y1, new.y1) and torch.equal(kept.y_err, new.y_err)
        assert torch.equal(kept.f1, new.f1)


def test_a_singular_matrix_is_a_clear_failure():
    # y' = 8 y with h = 0.5: I / (gamma h) - J = 8 - 8 = 0.
    with pytest.raises(
        odecore.SolverError, match=r"I / \(gamma h\) - J is singular at step size h = 0.5"
    ):
        odecore.solve(
            lambda t, y: 8.0 * y, torch.ones(1, dtype=F64), t0=0.0, t1=1.0, solver=Rodas4(),
            controller=odecore.ConstantStepSize(), dt0=0.5,
        )  # fmt: skip


@METHODS
def test_a_scalar_state(method) -> None:
    # A 0-dim state failed in the stage solve with a bare IndexError (its shape[0]).
    sol = odecore.solve(
        lambda t, y: -y, torch.tensor(0.7, dtype=F64), t0=0.0, t1=1.0,
        solver=method(), controller=odecore.PIDController(rtol=1e-10, atol=1e-12),
    )  # fmt: skip
    assert sol.ys.shape == (1,)
    assert sol.ys.item() == pytest.approx(0.7 * math.exp(-1.0), rel=1e-10)

"""Newton with reuse: the Jacobian and the factorisation kept from step to step.

The results with reuse are not bit for bit those without: a kept Jacobian steers the
iteration differently, so the stages converge to the Newton tolerance from other
iterates (and the error estimates, hence the steps, differ by as much). They agree to
the solve's tolerance, and gradients, which use the exact Jacobian at the converged
stages either way, agree to the Newton tolerance.
"""

from __future__ import annotations

import math

import numpy as np
import odecore
import pytest
import torch
from odecore import Kvaerno5, Newton, RadauIIA5
from odecore._controllers import AbstractController, Adaptation
from odecore._newton import NewtonResult, NewtonState
from scipy.integrate import solve_ivp

F64 = torch.float64
MU = 1000.0


def _vdp(mu):
    def f(t, y):
        return torch.stack([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]])

    return f


def _vdp_np(t, y):
    return [y[1], MU * (1 - y[0] ** 2) * y[1] - y[0]]


def _robertson(t, y):
    a, b, c = y.unbind(-1)
    return torch.stack([-0.04 * a + 1e4 * b * c, 0.04 * a - 1e4 * b * c - 3e7 * b**2, 3e7 * b**2])


def _robertson_np(t, y):
    a, b, c = y
    return [-0.04 * a + 1e4 * b * c, 0.04 * a - 1e4 * b * c - 3e7 * b**2, 3e7 * b**2]


# Van der Pol with mu = 1000 through its first jump (near t = 807), and Robertson's
# kinetics over ten decades; the problems, tolerances and bounds of test_esdirk's goal.
PROBLEMS = {
    "van_der_pol": (_vdp(MU), _vdp_np, [2.0, 0.0], np.linspace(0.0, 1000.0, 11), 1e-6, 1e-6),
    "robertson": (
        _robertson,
        _robertson_np,
        [1.0, 0.0, 0.0],
        np.concatenate([[0.0], np.logspace(-5, 5, 11)]),
        1e-6,
        1e-10,
    ),
}


def _solve(name, reuse):
    f, _, y0, ts, rtol, atol = PROBLEMS[name]
    newton = Newton(rtol=rtol / 100, atol=atol / 100, reuse=reuse)
    with torch.no_grad():
        return odecore.solve(
            f,
            torch.tensor(y0, dtype=F64),
            t0=0.0,
            t1=float(ts[-1]),
            solver=Kvaerno5(newton=newton),
            controller=odecore.PIDController(rtol=rtol, atol=atol),
            saveat=odecore.SaveAt(ts=torch.tensor(ts, dtype=F64)),
        )


@pytest.fixture(scope="module", params=sorted(PROBLEMS))
def solved(request):
    name = request.param
    _, f_np, y0, ts, _, atol = PROBLEMS[name]
    ref = solve_ivp(
        f_np, (0.0, ts[-1]), y0, method="Radau", rtol=1e-10, atol=atol * 1e-4, t_eval=ts
    )
    assert ref.status == 0, ref.message
    return name, _solve(name, True), _solve(name, False), ref.y.T


def test_reuse_agrees_with_no_reuse_and_a_tight_radau_solve(solved):
    name, kept, fresh, ref = solved
    # Global errors some ten times the local tolerance (test_esdirk's goal): relative
    # 1e-4, and absolute ten atol.
    atol = 10 * PROBLEMS[name][5]
    for sol in (kept, fresh):
        assert sol.status == odecore.Status.SUCCESS
        np.testing.assert_allclose(sol.ys.numpy(), ref, rtol=1e-4, atol=atol)
    np.testing.assert_allclose(kept.ys.numpy(), fresh.ys.numpy(), rtol=1e-4, atol=atol)


def test_reuse_takes_fewer_jacobians_than_steps(solved):
    _, kept, fresh, _ = solved
    # Without reuse: a Jacobian and a factorisation at every attempt (more where a
    # stage's iteration fails and is retried with a Jacobian at the stage).
    assert fresh.stats.n_jacobians >= fresh.stats.n_steps
    assert fresh.stats.n_factorisations == fresh.stats.n_jacobians
    assert kept.stats.n_jacobians < 0.9 * kept.stats.n_steps
    assert kept.stats.n_factorisations <= kept.stats.n_steps + kept.stats.n_jacobians
    # six implicit stages per attempt, at least one iteration each
    for sol in (kept, fresh):
        assert sol.stats.n_newton_iters >= 6 * sol.stats.n_steps


class _RejectFirst(AbstractController):
    """Rejects the first attempt of every step and retries it at the same size."""

    def __init__(self, dt: float) -> None:
        self.dt = dt

    def init(self, f, t0, t1, y0, f0, solver, dt0):
        return self.dt, None

    def adapt(self, t0, t1, y0, step, solver, state):
        retry = state == t0
        return Adaptation(accept=retry, dt=self.dt, state=None if retry else t0)


@pytest.mark.parametrize("cls", [Kvaerno5, RadauIIA5])
def test_a_rejected_step_takes_a_new_jacobian(cls):
    # A linear field: its Jacobian is exact wherever it was taken, Newton converges at
    # once and the step size never changes, so reuse alone would keep the first
    # Jacobian and factorisation for the whole solve. Each retry of a rejected step
    # takes a new one, except the first step's, whose Jacobian is already at its start.
    a = torch.tensor([[-1000.0, 1.0], [0.0, -0.5]], dtype=F64)
    y0 = torch.tensor([1.0, 1.0], dtype=F64)
    with torch.no_grad():
        kept = odecore.solve(
            lambda t, y: a @ y, y0, t0=0.0, t1=1.0, solver=cls(), controller=_RejectFirst(0.125)
        )
        plain = odecore.solve(
            lambda t, y: a @ y,
            y0,
            t0=0.0,
            t1=1.0,
            solver=cls(),
            controller=odecore.ConstantStepSize(),
            dt0=0.125,
        )
    assert (kept.stats.n_accepted, kept.stats.n_rejected) == (8, 8)
    assert kept.stats.n_jacobians == kept.stats.n_factorisations == 8
    assert plain.stats.n_jacobians == plain.stats.n_factorisations == 1
    torch.testing.assert_close(kept.ys, plain.ys, rtol=1e-12, atol=1e-14)


def _result(converged, iters, rate):
    return NewtonResult(torch.zeros(1, 2), converged, iters, 0.5, rate, not converged)


def test_the_state_keeps_what_converges_fast_and_renews_the_rest():
    a = torch.tensor([[-3.0, 1.0], [0.0, -2.0]], dtype=F64)
    calls = []

    def f(t, y):
        calls.append(t)
        return a @ y

    y = torch.ones(2, dtype=F64)
    newton = Newton()
    state = NewtonState()

    def step(t, h):
        fresh = state.step_matrix(f, t, y, h, [[1.0]], newton)[1]
        return fresh, state.n_jacobians, state.n_factorisations

    assert step(0.0, 0.1) == (True, 1, 1)
    state.iterated(_result(True, 3, 1e-4), newton)  # fast: kept
    assert step(1.0, 0.1) == (False, 1, 1)
    assert step(2.0, 0.11) == (False, 1, 1)  # within a growth of 1.2: the same LU
    assert step(3.0, 0.2) == (False, 1, 2)  # grown more: refactorised, same Jacobian
    assert step(4.0, 0.19) == (False, 1, 3)  # shrunk: refactorised
    state.iterated(_result(True, 3, 0.01), newton)  # slow
    assert step(5.0, 0.19) == (True, 2, 4)
    state.iterated(_result(False, 10, 0.9), newton)  # failed, with a Jacobian at t = 5
    assert step(5.0, 0.1) == (True, 2, 5)  # retried from t = 5: the same Jacobian, new LU
    state.iterated(_result(False, 10, 0.9), newton)  # failed again, next step anew
    assert step(6.0, 0.1) == (True, 3, 6)
    assert step(7.0, 0.1) == (False, 3, 6)
    assert step(7.0, 0.05) == (True, 4, 7)  # a retried step whose Jacobian was older
    assert state.n_newton_iters == 3 + 3 + 10 + 10
    off = Newton(reuse=False)
    assert state.step_matrix(f, 8.0, y, 0.05, [[1.0]], off)[1]
    assert (state.n_jacobians, state.n_factorisations) == (5, 8)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("reuse", 1),
        ("reuse_rate", 0.0),
        ("reuse_rate", 1.0),
        ("reuse_growth", 0.9),
        ("reuse_growth", math.inf),
        ("reuse_rate", "fast"),
    ],
)
def test_reuse_settings_are_checked(name, value):
    with pytest.raises(odecore.ConfigurationError, match=f"`{name}` must be"):
        Newton(**{name: value})


# --- gradients ------------------------------------------------------------------------


def _gradient_solve(cls, reuse, mu, y0, gradient=None):
    # Fixed steps, so that reuse changes the iteration and not the steps; Newton solved
    # to 1e-12, the floor the comparison below rests on.
    newton = Newton(rtol=1e-12, atol=1e-12, reuse=reuse, reuse_rate=0.5)
    return odecore.solve(
        lambda t, y: torch.stack([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]]),
        y0,
        t0=0.0,
        t1=1.0,
        dt0=0.05,
        solver=cls(newton=newton),
        gradient=gradient or odecore.Autograd(),
    )


@pytest.mark.parametrize("cls", [Kvaerno5, RadauIIA5])
def test_gradcheck_through_a_solve_with_reuse(cls):
    mu = torch.tensor(5.0, dtype=F64, requires_grad=True)
    y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda m, y: _gradient_solve(cls, True, m, y).ys[-1], (mu, y0), atol=1e-6, rtol=1e-5
    )


@pytest.mark.parametrize(
    "gradient", [odecore.Autograd(), odecore.Checkpoint(every=3)], ids=["autograd", "checkpoint"]
)
@pytest.mark.parametrize("cls", [Kvaerno5, RadauIIA5])
def test_gradients_with_reuse_are_those_without(cls, gradient):
    grads, stats = [], []
    for reuse in (True, False):
        mu = torch.tensor(5.0, dtype=F64, requires_grad=True)
        y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)
        sol = _gradient_solve(cls, reuse, mu, y0, gradient)
        g_mu, g_y0 = torch.autograd.grad(sol.ys[-1].sum(), (mu, y0))
        grads.append(torch.cat([g_mu.reshape(1), g_y0]))
        stats.append(sol.stats)
    assert stats[0].n_jacobians < stats[1].n_jacobians  # the forward iteration did reuse
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-10, atol=1e-10)

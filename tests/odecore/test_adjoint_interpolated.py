"""The adjoint whose backward pass reads the state from the forward steps
(``Adjoint(state="interpolated")``): stiff problems, and agreement with backprop."""

from __future__ import annotations

import numpy as np
import odecore
import pytest
import torch
from odecore import ConfigurationError, Kvaerno5, RadauIIA5
from scipy.integrate import solve_ivp

F64 = torch.float64
MU = 1000.0


class VanDerPol(torch.nn.Module):
    """``x'' = mu (1 - x^2) x' - x`` as ``y = (x, x')``, ``mu`` a parameter."""

    def __init__(self, mu: float) -> None:
        super().__init__()
        self.mu = torch.nn.Parameter(torch.tensor(mu, dtype=F64))

    def forward(self, t, y):
        x, v = y[..., 0], y[..., 1]
        return torch.stack([v, self.mu * (1 - x * x) * v - x], dim=-1)


def _radau_end(mu, y0, t1):
    def f(t, y):
        return [y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]]

    def jac(t, y):
        return [[0.0, 1.0], [-2 * mu * y[0] * y[1] - 1, mu * (1 - y[0] ** 2)]]

    sol = solve_ivp(f, (0.0, t1), y0, method="Radau", rtol=1e-12, atol=1e-12, jac=jac)
    assert sol.status == 0, sol.message
    return sol.y[:, -1]


@pytest.fixture(scope="module")
def stiff_fd():
    """d y(1) / d (x0, v0, mu) at mu = 1000 by central differences of a tight Radau solve."""
    y0 = np.array([2.0, 0.0])
    cols = []
    for j in range(3):
        d = np.zeros(3)
        d[j] = 1e-6 * (MU if j == 2 else 1.0)
        plus = _radau_end(MU + d[2], y0 + d[:2], 1.0)
        minus = _radau_end(MU - d[2], y0 - d[:2], 1.0)
        cols.append((plus - minus) / (2 * d[j]))
    return np.stack(cols, axis=1)


def _stiff_jacobian(gradient, solver):
    f = VanDerPol(MU)
    y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)
    sol = odecore.solve(
        f, y0, t0=0.0, t1=1.0, solver=solver,
        controller=odecore.PIDController(rtol=1e-8, atol=1e-8), gradient=gradient,
    )  # fmt: skip
    rows = []
    for i in range(2):
        g_y0, g_mu = torch.autograd.grad(sol.ys[-1][i], (y0, f.mu), retain_graph=True)
        rows.append([*g_y0.tolist(), g_mu.item()])
    return np.array(rows), sol


def test_interpolated_adjoint_on_stiff_van_der_pol_matches_finite_differences(stiff_fd):
    jac, sol = _stiff_jacobian(odecore.Adjoint(state="interpolated"), Kvaerno5())
    scale = np.abs(stiff_fd).max(axis=1, keepdims=True)  # per output, dy/dx0 dominates
    assert (np.abs(jac - stiff_fd) / scale).max() < 1e-4
    assert np.abs(jac[:, 2] - stiff_fd[:, 2]).max() < 1e-4 * np.abs(stiff_fd[:, 2]).max()
    assert sol.stats.nfe_backward > 0


@pytest.mark.parametrize("interpolation", ["hermite", "cubic"])
def test_nfe_backward_counts_the_dense_outputs_sub_steps(interpolation):
    # Kvaerno5's quintic dense output takes a sub-step of the method (Newton
    # iterations, a Jacobian) at each forward step the backward field reads: those
    # evaluations of the field are the backward pass's too.
    calls = [0]
    field = VanDerPol(100.0)

    def f(t, y):
        calls[0] += 1
        return field(t, y)

    y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)
    sol = odecore.solve(
        f, y0, t0=0.0, t1=3.0, solver=Kvaerno5(interpolation=interpolation),
        controller=odecore.PIDController(rtol=1e-6, atol=1e-6), gradient=odecore.Adjoint(),
    )  # fmt: skip
    calls[0] = 0
    sol.ys[-1].sum().backward()
    assert sol.stats.nfe_backward == calls[0] > 0


def test_backsolve_fails_on_stiff_van_der_pol(stiff_fd):
    # The state integrated backward in time: its damped mode grows like exp(3000 t).
    with pytest.raises((AssertionError, odecore.SolverError)):
        jac, _ = _stiff_jacobian(odecore.Adjoint(state="backsolve"), Kvaerno5())
        assert (np.abs(jac - stiff_fd) / np.abs(stiff_fd).max()).max() < 1e-4


def test_default_state_is_interpolated_for_implicit_solvers_only():
    assert odecore.Adjoint().interpolates(Kvaerno5())
    assert odecore.Adjoint().interpolates(RadauIIA5())
    assert not odecore.Adjoint().interpolates(odecore.Dopri5())
    assert odecore.Adjoint(state="interpolated").interpolates(odecore.Dopri5())
    assert not odecore.Adjoint(state="backsolve").interpolates(Kvaerno5())


def test_unknown_state_is_rejected():
    with pytest.raises(ConfigurationError, match="`state`"):
        odecore.Adjoint(state="dense")  # type: ignore[arg-type]


class Field(torch.nn.Module):
    """A small smooth field with a weight matrix and a time dependence."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(0.5 * torch.randn(3, 3, generator=gen, dtype=F64))

    def forward(self, t, y):
        return torch.tanh(self.w @ y) * torch.cos(t) - 0.3 * y


def _solve(gradient, field, y0, t1, solver=None, rtol=1e-10):
    ts = torch.stack([t1 * 0.5, t1])
    sol = odecore.solve(
        field, y0, t0=0.0, t1=t1.item(), solver=solver or odecore.Dopri5(),
        controller=odecore.PIDController(rtol=rtol, atol=rtol), gradient=gradient,
        saveat=odecore.SaveAt(ts=ts),
    )  # fmt: skip
    return sol.ys


@pytest.mark.parametrize("solver", [odecore.Dopri5(), odecore.Tsit5()], ids=["dopri5", "tsit5"])
def test_interpolated_adjoint_passes_gradcheck(solver):
    # y0, t1 (the last output time) and a weight the field closes over, found by the
    # adjoint from the field's graph.
    gen = torch.Generator().manual_seed(0)
    w = (0.5 * torch.randn(3, 3, generator=gen, dtype=F64)).requires_grad_(True)
    y0 = torch.tensor([0.5, -1.0, 0.25], dtype=F64, requires_grad=True)
    t1 = torch.tensor(1.5, dtype=F64, requires_grad=True)

    def fn(y0, t1, w):
        def field(t, y):
            return torch.tanh(w @ y) * torch.cos(t) - 0.3 * y

        return _solve(odecore.Adjoint(state="interpolated"), field, y0, t1, solver)

    assert torch.autograd.gradcheck(fn, (y0, t1, w), eps=1e-6, atol=1e-5, rtol=1e-4)


def test_interpolated_adjoint_agrees_with_backprop():
    y0 = torch.tensor([0.5, -1.0, 0.25], dtype=F64, requires_grad=True)
    t1 = torch.tensor(1.5, dtype=F64, requires_grad=True)
    grads = []
    for gradient in (odecore.Autograd(), odecore.Adjoint(state="interpolated")):
        field = Field()
        ys = _solve(gradient, field, y0, t1)
        weights = torch.arange(1.0, ys.numel() + 1, dtype=F64).view_as(ys)
        grads.append(torch.autograd.grad((ys * weights).sum(), (y0, t1, field.w)))
    for backprop, adjoint in zip(*grads):
        torch.testing.assert_close(adjoint, backprop, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("side", ["<", "<="])
@pytest.mark.parametrize(("t0", "t1"), [(0.0, 1.0), (1.0, 0.0)])
def test_interpolated_adjoint_reads_the_steps_next_to_a_jump_from_their_side(side, t0, t1):
    # y' = p y before t = 0.5 and q y after, whichever side owns 0.5. The dense output of
    # a step ending on the jump took the field at the jump from the other side (the
    # last step's limits were still set), and the gradient was off by 1.3e-4.
    p = torch.tensor(-0.8, dtype=F64, requires_grad=True)
    q = torch.tensor(0.6, dtype=F64, requires_grad=True)
    y0 = torch.tensor([1.0, 0.3], dtype=F64, requires_grad=True)

    def field(t, y):
        before = t < 0.5 if side == "<" else t <= 0.5
        return torch.where(before, p * y, q * y)

    sol = odecore.solve(
        field, y0, t0=t0, t1=t1, solver=odecore.GaussLegendre4(), dt0=0.05, jump_ts=[0.5],
        gradient=odecore.Adjoint(state="interpolated"),
    )  # fmt: skip
    got = torch.autograd.grad(sol.ys[-1].sum(), (y0, p, q))
    sign = 1.0 if t1 > t0 else -1.0
    growth = torch.exp(sign * 0.5 * (p + q)).detach()
    end = (y0.detach() * growth).sum()
    expected = (growth.expand(2), sign * 0.5 * end, sign * 0.5 * end)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-8, atol=0)

"""The reversible gradient method against oracles: backpropagation through a plain loop
of its two formulas, gradcheck, convergence order, reconstruction over long solves."""

from __future__ import annotations

import itertools
import math

import odecore
import pytest
import torch

F64 = torch.float64
FIXED = [odecore.Euler, odecore.Midpoint, odecore.Heun3, odecore.RK4, odecore.RK4ThreeEighths]
ADAPTIVE = [odecore.Dopri5, odecore.Tsit5, odecore.Bosh3]


class Field(torch.nn.Module):
    """A small nonlinear field with parameters, a closed-over tensor and a time input."""

    def __init__(self, scale: torch.Tensor) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(3, 3, dtype=F64)
        self.scale = scale  # a closure tensor, not a parameter
        self.ends: list[float] = []

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.scale * torch.tanh(self.lin(y)) + 0.1 * torch.cos(t) * y


class Recording(Field):
    """The field, recording the end of every accepted step of an adaptive solve."""

    def callback_accept_step(self, t: torch.Tensor, y: torch.Tensor, dt: torch.Tensor) -> None:
        self.ends.append(float(t) + float(dt))


def _psi(f, solver, t0: float, t1: float, x: torch.Tensor, jumps=None) -> torch.Tensor:
    """One step of the base solver from ``(t0, x)`` to ``t1``, by backpropagation."""
    sol = odecore.solve(
        lambda t, y: f(t, y), x, t0=t0, t1=t1, solver=solver,
        controller=odecore.ConstantStepSize(), dt0=t1 - t0, jump_ts=jumps,
    )  # fmt: skip
    return sol.ys[-1]


def _oracle(f, solver, y0, grid, ts, lam, jumps=None) -> torch.Tensor:
    """The reversible solve as a plain loop of its two formulas, outputs at ``ts``."""
    y = z = y0
    outs = [y0] if ts[0] == grid[0] else []
    for a, b in itertools.pairwise(grid):
        y_next = lam * y + (1 - lam) * z + (_psi(f, solver, a, b, z, jumps) - z)
        z = z - (_psi(f, solver, b, a, y_next, jumps) - y_next)
        y = y_next
        outs += [y] * sum(1 for t in ts if math.isclose(t, b, rel_tol=1e-12, abs_tol=1e-12))
    return torch.stack(outs)


def _grads(out: torch.Tensor, inputs) -> list[torch.Tensor]:
    weights = torch.linspace(0.5, 1.5, out.numel(), dtype=F64).view_as(out)
    return list(torch.autograd.grad((weights * out.sin()).sum(), inputs))


def _assert_close(got, want, rtol=1e-12):
    for g, w in zip(got, want):
        scale = w.abs().max().item()
        assert (g - w).abs().max().item() <= rtol * scale, (g, w)


def _inputs(cls=Field):
    scale = torch.tensor(0.8, dtype=F64, requires_grad=True)
    f = cls(scale)
    y0 = torch.tensor([0.3, -0.5, 0.9], dtype=F64, requires_grad=True)
    return f, y0, (y0, scale, *f.parameters())


@pytest.mark.parametrize("solver_cls", FIXED)
@pytest.mark.parametrize("lam", [0.999, 0.9])
@pytest.mark.parametrize("ts", [[0.0, 0.3, 0.7, 1.0], [0.3, 0.3, 0.7]])
def test_fixed_gradient_equals_backprop_of_the_reversible_loop(solver_cls, lam, ts):
    f, y0, inputs = _inputs()
    sol = odecore.solve(
        f, y0, t0=0.0, t1=1.0, solver=solver_cls(), dt0=0.1, saveat=odecore.SaveAt(ts=ts),
        gradient=odecore.Reversible(coupling=lam),
    )  # fmt: skip
    grid = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    want = _oracle(f, solver_cls(), y0, grid, ts, lam)
    _assert_close([sol.ys], [want.detach()], rtol=1e-13)
    _assert_close(_grads(sol.ys, inputs), _grads(want, inputs))
    assert sol.stats.nfe_backward > 0


@pytest.mark.parametrize("solver_cls", ADAPTIVE)
def test_adaptive_gradient_equals_backprop_through_the_accepted_steps(solver_cls):
    f, y0, inputs = _inputs(Recording)
    ts = [0.25, 1.0, 2.0]
    controller = odecore.PIDController(rtol=1e-6, atol=1e-8)
    sol = odecore.solve(
        f, y0, t0=0.0, t1=2.0, solver=solver_cls(), controller=controller,
        saveat=odecore.SaveAt(ts=ts), gradient=odecore.Reversible(),
    )  # fmt: skip
    assert sol.stats.n_accepted > 5 and sol.stats.n_accepted == len(f.ends)
    want = _oracle(f, solver_cls(), y0, [0.0, *f.ends], ts, 0.999)
    _assert_close([sol.ys], [want.detach()], rtol=1e-13)
    _assert_close(_grads(sol.ys, inputs), _grads(want, inputs))


def test_jump_ts_steps_on_the_jump_and_sees_its_one_sided_limits():
    scale = torch.tensor(0.5, dtype=F64, requires_grad=True)

    class Jumpy(Recording):
        def forward(self, t, y):
            return torch.where(t < 0.5, -self.scale * y, torch.sin(y)) + self.lin(y) * 0.1

    f = Jumpy(scale)
    y0 = torch.tensor([0.3, -0.5, 0.9], dtype=F64, requires_grad=True)
    inputs = (y0, scale, *f.parameters())
    sol = odecore.solve(
        f, y0, t0=0.0, t1=1.0, solver=odecore.Dopri5(), jump_ts=[0.5],
        controller=odecore.PIDController(rtol=1e-6, atol=1e-8), gradient=odecore.Reversible(),
    )  # fmt: skip
    assert any(math.isclose(e, 0.5) for e in f.ends)
    want = _oracle(f, odecore.Dopri5(), y0, [0.0, *f.ends], [1.0], 0.999, jumps=[0.5])
    _assert_close(_grads(sol.ys, inputs), _grads(want, inputs))


@pytest.mark.parametrize("solver_cls", [odecore.RK4, odecore.Midpoint])
def test_gradcheck(solver_cls):
    w = torch.tensor([[0.2, -1.0], [1.0, -0.3]], dtype=F64, requires_grad=True)
    y0 = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)

    def run(y0, w):
        return odecore.solve(
            lambda t, y: torch.tanh(y @ w.T) + t * y, y0, t0=0.0, t1=1.0,
            solver=solver_cls(), dt0=0.05, saveat=odecore.SaveAt(ts=[0.5, 1.0]),
            gradient=odecore.Reversible(coupling=0.99, params=(w,)),
        ).ys  # fmt: skip

    assert torch.autograd.gradcheck(run, (y0, w))


def _decay_error(solver_cls, n: int) -> float:
    a = torch.tensor([[0.0, 1.0], [-1.0, -0.1]], dtype=F64)
    y0 = torch.tensor([1.0, 0.0], dtype=F64)
    sol = odecore.solve(
        lambda t, y: y @ a.T, y0, t0=0.0, t1=2.0, solver=solver_cls(), dt0=2.0 / n,
        gradient=odecore.Reversible(),
    )  # fmt: skip
    exact = torch.linalg.matrix_exp(2.0 * a) @ y0
    return (sol.ys[-1] - exact).abs().max().item()


@pytest.mark.parametrize(
    "solver_cls", [odecore.Euler, odecore.Midpoint, odecore.Heun3, odecore.RK4]
)
def test_converges_at_the_base_order(solver_cls):
    ns = [20, 40, 80, 160]
    errors = [_decay_error(solver_cls, n) for n in ns]
    slope = -(math.log(errors[-1]) - math.log(errors[0])) / (math.log(ns[-1]) - math.log(ns[0]))
    assert abs(slope - solver_cls.order) < 0.2, (slope, errors)


def test_reconstruction_over_ten_thousand_steps():
    """The backward pass rebuilds y0 from the final state: after 10,000 steps of a
    harmonic oscillator the state it rebuilds at t0 (the field sees it there) is y0
    to within 1e-10 (1.0e-11 measured: rounding grows by up to 0.999**-10000, 2e4)."""
    seen: list[torch.Tensor] = []
    forward = [True]

    def f(t, y):
        if not forward[0] and float(t) == 0.0:
            seen.append(y.detach().clone())
        return torch.stack([y[1], -y[0]])

    y0 = torch.tensor([1.0, 0.0], dtype=F64, requires_grad=True)
    sol = odecore.solve(
        f, y0, t0=0.0, t1=100.0, solver=odecore.RK4(), dt0=0.01, gradient=odecore.Reversible()
    )
    assert sol.stats.n_accepted == 10_000
    forward[0] = False
    (grad,) = torch.autograd.grad(sol.ys[-1].sum(), y0)
    error = (seen[-1] - y0.detach()).abs().max().item()
    assert 0.0 < error < 1e-10, error
    # The exact gradient of the linear map; the discrete one differs by the RK4 error.
    c, s = math.cos(100.0), math.sin(100.0)
    assert torch.allclose(grad, torch.tensor([c - s, s + c], dtype=F64), atol=1e-6)


def test_van_der_pol_gradient_matches_finite_differences():
    """Van der Pol (mu = 1) over one and a half periods from off the limit cycle: the
    gradient matches central differences of the same discrete solve."""
    mu = torch.tensor(1.0, dtype=F64, requires_grad=True)
    f = _vdp(mu)

    def end(y0, gradient):
        return odecore.solve(
            f, y0, t0=0.0, t1=10.0, solver=odecore.RK4(), dt0=0.01, gradient=gradient
        ).ys[-1].sum()  # fmt: skip

    method = odecore.Reversible(coupling=0.985)
    y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)
    grads = torch.autograd.grad(end(y0, method), (y0, mu))
    eps = 1e-6
    with torch.no_grad():
        fd = [
            (end(y0 + e, method) - end(y0 - e, method)) / (2 * eps)
            for e in eps * torch.eye(2, dtype=F64)
        ]
        mu += eps
        up = end(y0, method)
        mu -= 2 * eps
        down = end(y0, method)
        mu += eps
        fd.append((up - down) / (2 * eps))
    got = torch.cat([grads[0], grads[1].view(1)])
    assert torch.allclose(got, torch.stack(fd), rtol=1e-6, atol=1e-8), (got, fd)


def test_van_der_pol_unstable_coupling_raises_rather_than_a_wrong_gradient():
    """Two periods with a coupling that damps the forward solve: rebuilding y0 loses
    every digit (its gradient came out 2.09 where finite differences give 2.81), and
    backward() says so."""
    y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)
    sol = odecore.solve(
        _vdp(torch.tensor(1.0, dtype=F64)), y0, t0=0.0, t1=13.3, solver=odecore.RK4(), dt0=0.01,
        gradient=odecore.Reversible(coupling=0.98),
    )  # fmt: skip
    with pytest.raises(odecore.ConfigurationError, match="rebuilt y0 after 1330 steps"):
        sol.ys[-1].sum().backward()


def _vdp(mu: torch.Tensor):
    return lambda t, y: torch.stack([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]])


def _vdp_reference(t1: float) -> torch.Tensor:
    """Van der Pol (mu = 1) from (2, 0) at ``t1``, by SciPy's DOP853 at 1e-13."""
    from scipy.integrate import solve_ivp

    sol = solve_ivp(
        lambda t, y: [y[1], (1 - y[0] ** 2) * y[1] - y[0]], (0.0, t1), [2.0, 0.0],
        method="DOP853", rtol=1e-13, atol=1e-13,
    )  # fmt: skip
    return torch.tensor(sol.y[:, -1], dtype=F64)


def _vdp_solve(coupling: float, tol: float):
    y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)
    return odecore.solve(
        _vdp(torch.tensor(1.0, dtype=F64)), y0, t0=0.0, t1=10.0, solver=odecore.Dopri5(),
        controller=odecore.PIDController(rtol=tol, atol=tol), dt0=1e-3,
        gradient=odecore.Reversible(coupling=coupling),
    )  # fmt: skip


@pytest.mark.parametrize("coupling", [0.999, 0.99])
def test_adaptive_drift_raises_rather_than_a_solution_off_its_tolerance(coupling):
    """An adaptive solve's error estimate is that of the step from z: on Van der Pol's
    contracting stretches the parasitic mode grows unseen, and y(10) came out 0.065
    (0.999) and 0.014 (0.99) from the solution at rtol = atol = 1e-8, where the plain
    solve is 4e-8 off. The distance between y and z shows it, and the solve raises."""
    with pytest.raises(odecore.ConfigurationError, match=r"drifted apart by .* the tolerance"):
        _vdp_solve(coupling, 1e-8)


def test_adaptive_solution_within_its_tolerance_where_the_coupling_is_stable():
    """A coupling low enough for the same solve keeps y and z together: y(10) is as
    close to SciPy's solution as the plain solve's."""
    sol = _vdp_solve(0.9, 1e-8)
    plain = odecore.solve(
        _vdp(torch.tensor(1.0, dtype=F64)), torch.tensor([2.0, 0.0], dtype=F64), t0=0.0,
        t1=10.0, solver=odecore.Dopri5(), controller=odecore.PIDController(rtol=1e-8, atol=1e-8),
        dt0=1e-3,
    )  # fmt: skip
    reference = _vdp_reference(10.0)
    error = float((sol.ys[-1].detach() - reference).norm())
    assert error <= 2 * float((plain.ys[-1] - reference).norm()), error


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_drift_is_judged_as_the_controller_judges_an_error(dtype):
    """In float16, atol = 1e-9 rounds to zero and a component that stays 0 in y and z
    would read 0/0: the drift is scaled in float32, as the controller's error is."""
    y0 = torch.tensor([[1.0, 0.0], [0.5, 0.0]], dtype=dtype, requires_grad=True)
    sol = odecore.solve(
        lambda t, y: torch.stack([-y[..., 0], 0 * y[..., 1]], -1), y0, t0=0.0, t1=1.0,
        solver=odecore.Dopri5(), controller=odecore.PIDController(rtol=1e-2, atol=1e-9),
        gradient=odecore.Reversible(),
    )  # fmt: skip
    expected = torch.tensor([[math.exp(-1.0), 0.0], [0.5 * math.exp(-1.0), 0.0]])
    assert sol.ys[-1].dtype == dtype
    assert torch.allclose(sol.ys[-1].float(), expected, rtol=2e-2, atol=0.0)


def test_a_failed_solve_keeps_its_status_without_throw():
    """A forward solve that stops (here at max_steps) reports its status with
    throw=False; the drift check judges finished solves only."""
    y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)
    sol = odecore.solve(
        _vdp(torch.tensor(1000.0, dtype=F64)), y0, t0=0.0, t1=10.0, solver=odecore.Dopri5(),
        controller=odecore.PIDController(rtol=1e-6, atol=1e-6), max_steps=50, throw=False,
        gradient=odecore.Reversible(),
    )  # fmt: skip
    assert sol.status == odecore.Status.MAX_STEPS_REACHED


def test_van_der_pol_gradient_matches_the_continuous_one():
    """Over 1.5 periods from off the limit cycle, where the backsolve adjoint at
    rtol = atol = 1e-6 is 1.6e-2 off (its backward solve leaves the cycle, which repels
    in reverse time): rk4's reversible gradient, h = 0.01 at a coupling of 0.99, is
    within rk4's error of backprop through dopri5 at 1e-12."""

    def grads(gradient, solver, **options):
        mu = torch.tensor(1.0, dtype=F64, requires_grad=True)
        y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)
        end = odecore.solve(
            _vdp(mu), y0, t0=0.0, t1=10.0, solver=solver, gradient=gradient, **options
        ).ys[-1]
        g_y0, g_mu = torch.autograd.grad(end.sum(), (y0, mu))
        return torch.cat([g_y0, g_mu.view(1)])

    tight = odecore.PIDController(rtol=1e-12, atol=1e-12)
    reference = grads(None, odecore.Dopri5(), controller=tight, dt0=1e-3)
    got = grads(odecore.Reversible(coupling=0.99), odecore.RK4(), dt0=0.01)
    assert float((got - reference).norm() / reference.norm()) < 1e-5


def test_by_name_and_spec():
    assert odecore.GRADIENTS["reversible"] is odecore.Reversible
    spec = odecore.OdeSpec.from_method("rk4", gradient="reversible", options={"step_size": 0.1})
    assert spec.gradient == odecore.Reversible()


@pytest.mark.parametrize("coupling", [0.0, -0.5, 1.5, math.nan, True])
def test_coupling_out_of_range(coupling):
    with pytest.raises(odecore.ConfigurationError, match="`coupling` must be a number in"):
        odecore.Reversible(coupling=coupling)


def test_implicit_solver_is_refused():
    with pytest.raises(odecore.ConfigurationError, match="explicit Runge-Kutta `solver`"):
        odecore.solve(
            lambda t, y: -y, torch.ones(2), t0=0.0, t1=1.0, solver=odecore.ImplicitEuler(),
            dt0=0.1, gradient=odecore.Reversible(),
        )  # fmt: skip


def test_time_gradients_are_refused():
    ts = torch.tensor([0.0, 0.5, 1.0], requires_grad=True)
    with pytest.raises(odecore.ConfigurationError, match="does not differentiate the times"):
        odecore.solve(
            lambda t, y: -y, torch.ones(2), t0=0.0, t1=1.0, solver=odecore.RK4(), dt0=0.1,
            saveat=odecore.SaveAt(ts=ts), gradient=odecore.Reversible(),
        )  # fmt: skip


@pytest.mark.parametrize(
    ("method", "options"), [("rk4", {"step_size": 0.1}), ("dopri5", {"first_step": 0.1})]
)
def test_odeint_option(method, options):
    f, y0, inputs = _inputs()
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64)
    ys = odecore.odeint(f, y0, t, method=method, options={**options, "gradient": "reversible"})
    spec = odecore.OdeSpec.from_method(method, gradient="reversible", options=options)
    sol = odecore.solve(
        f, y0, t0=0.0, t1=1.0, solver=spec.solver, controller=spec.controller,
        dt0=spec.step_size(0.0, 1.0), saveat=odecore.SaveAt(ts=t), gradient=spec.gradient,
    )  # fmt: skip
    assert torch.equal(ys, sol.ys)
    _assert_close(_grads(ys, inputs), _grads(sol.ys, inputs), rtol=0.0)
    backprop = odecore.odeint(f, y0, t, method=method, options=options)
    assert not torch.equal(ys, backprop)  # another scheme, to the solver's accuracy
    assert torch.allclose(ys, backprop, atol=1e-4)


def test_gradient_is_not_an_option_of_a_spec_or_of_odeint_adjoint():
    with pytest.raises(odecore.ConfigurationError, match=r"Unknown option\(s\) \['gradient'\]"):
        odecore.OdeSpec.from_method("rk4", options={"gradient": "reversible"})
    t = torch.tensor([0.0, 1.0])
    with pytest.raises(odecore.ConfigurationError, match="odeint_adjoint's gradient is the"):
        odecore.odeint_adjoint(lambda t, y: -y, torch.ones(2), t, options={"gradient": "adjoint"})

"""Dense output over the whole span: ``SaveAt(dense=True)``, ``Solution.evaluate`` and
torchdiffeq's ``odeint_dense``. Oracles: the closed form of y' = -y, and torchdiffeq."""

from __future__ import annotations

import math

import odecore
import pytest
import torch

F64 = torch.float64
SOLVERS = [odecore.Dopri5(), odecore.Tsit5(), odecore.Bosh3(), odecore.Dopri8()]


def _decay(t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return -y


@pytest.mark.parametrize("solver", SOLVERS, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize(("t0", "t1"), [(0.0, 2.0), (2.0, -1.0)])
def test_evaluate_matches_the_closed_form_anywhere(solver, t0: float, t1: float) -> None:
    y0 = torch.tensor([1.0, -2.0], dtype=F64)
    sol = odecore.solve(
        _decay, y0, t0=t0, t1=t1, solver=solver,
        controller=odecore.PIDController(rtol=1e-10, atol=1e-12),
        saveat=odecore.SaveAt(dense=True),
    )  # fmt: skip
    ts = torch.linspace(t0, t1, 37, dtype=F64)
    exact = y0 * torch.exp(-(ts - t0))[:, None]
    torch.testing.assert_close(sol.evaluate(ts), exact, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(sol.evaluate(t0), y0, rtol=0, atol=0)


def test_evaluate_at_an_output_time_is_that_output() -> None:
    ts = torch.tensor([0.0, 0.3, 1.1], dtype=F64)
    sol = odecore.solve(
        _decay, torch.ones(3, dtype=F64), t0=0.0, t1=1.1, solver=odecore.Dopri5(),
        saveat=odecore.SaveAt(ts=ts, dense=True),
    )  # fmt: skip
    torch.testing.assert_close(sol.evaluate(ts), sol.ys, rtol=0, atol=0)


def test_evaluate_on_a_tuple_state_keeps_its_structure() -> None:
    y0 = (torch.ones(2, dtype=F64), torch.zeros(3, dtype=F64))
    sol = odecore.solve(
        lambda t, y: (-y[0], y[0].sum().expand(3)), y0, t0=0.0, t1=1.0,
        solver=odecore.Tsit5(), controller=odecore.PIDController(rtol=1e-10, atol=1e-12),
        saveat=odecore.SaveAt(dense=True),
    )  # fmt: skip
    a, b = sol.evaluate(torch.tensor([0.5, 1.0]))
    assert a.shape == (2, 2) and b.shape == (2, 3)
    torch.testing.assert_close(a[:, 0], torch.exp(-torch.tensor([0.5, 1.0], dtype=F64)))
    torch.testing.assert_close(b[1], torch.full((3,), 2 * (1 - math.exp(-1.0)), dtype=F64))


def test_evaluate_differentiates_by_backprop() -> None:
    rate = torch.tensor(0.7, dtype=F64, requires_grad=True)
    sol = odecore.solve(
        lambda t, y: -rate * y, torch.ones(1, dtype=F64), t0=0.0, t1=2.0,
        solver=odecore.Dopri5(), controller=odecore.PIDController(rtol=1e-10, atol=1e-12),
        saveat=odecore.SaveAt(dense=True),
    )  # fmt: skip
    sol.evaluate(1.3).sum().backward()
    assert rate.grad is not None
    assert rate.grad.item() == pytest.approx(-1.3 * math.exp(-0.7 * 1.3), rel=1e-7)


@pytest.mark.parametrize("solver", SOLVERS, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize(("t0", "t1"), [(0.0, 2.0), (2.0, 0.0)])
def test_evaluate_differentiates_the_times(solver, t0: float, t1: float) -> None:
    # y' = -y + sin t, y(t0) = 1: dy/dt at the times asked for is f(t, y(t)).
    def field(t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return -y + torch.sin(t)

    def exact(t: torch.Tensor) -> torch.Tensor:
        def particular(s: torch.Tensor | float) -> torch.Tensor:
            s = torch.as_tensor(s, dtype=F64)
            return (torch.sin(s) - torch.cos(s)) / 2

        return (1.0 - particular(t0)) * torch.exp(-(t - t0)) + particular(t)

    sol = odecore.solve(
        field, torch.ones(1, dtype=F64, requires_grad=True), t0=t0, t1=t1, solver=solver,
        controller=odecore.PIDController(rtol=1e-11, atol=1e-12),
        saveat=odecore.SaveAt(dense=True),
    )  # fmt: skip
    ts = torch.tensor([t0, 0.4, 1.3, t1], dtype=F64, requires_grad=True)
    (grad,) = torch.autograd.grad(sol.evaluate(ts).sum(), ts, retain_graph=True)
    (expected,) = torch.autograd.grad(exact(ts).sum(), ts)
    torch.testing.assert_close(grad, expected, rtol=1e-8, atol=1e-10)
    one = torch.tensor(1.1, dtype=F64, requires_grad=True)
    (grad,) = torch.autograd.grad(sol.evaluate(one).sum(), one)
    torch.testing.assert_close(grad, torch.autograd.grad(exact(one), one)[0], rtol=1e-8, atol=0)


@pytest.mark.parametrize("solver", [*SOLVERS, odecore.RK4()], ids=lambda s: type(s).__name__)
@pytest.mark.parametrize(("t0", "t1"), [(0.0, 2.0), (2.0, 0.0)])
def test_evaluate_moves_with_the_start_and_end_of_the_solve(solver, t0: float, t1: float):
    # y' = -y + sin t, y(t0) = 1, with the start and end as output times that require
    # grad: a value between them at a fixed time moves with the start.
    def field(t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return -y + torch.sin(t)

    def exact(start: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        def particular(s: torch.Tensor) -> torch.Tensor:
            return (torch.sin(s) - torch.cos(s)) / 2

        return (1.0 - particular(start)) * torch.exp(-(t - start)) + particular(t)

    ends = torch.tensor([t0, t1], dtype=F64, requires_grad=True)
    sol = odecore.solve(
        field, torch.ones(1, dtype=F64), t0=t0, t1=t1, solver=solver,
        dt0=None if solver.adaptive else 0.01,
        controller=odecore.PIDController(rtol=1e-11, atol=1e-12) if solver.adaptive else None,
        saveat=odecore.SaveAt(ts=ends, dense=True),
    )  # fmt: skip
    at = torch.tensor([0.4, 1.3], dtype=F64)
    (grad,) = torch.autograd.grad(sol.evaluate(at).sum(), ends)
    start = torch.tensor(t0, dtype=F64, requires_grad=True)
    (expected,) = torch.autograd.grad(exact(start, at).sum(), start)
    torch.testing.assert_close(grad, torch.stack([expected, torch.zeros_like(expected)]),
                               rtol=1e-7, atol=1e-9)  # fmt: skip


@pytest.mark.parametrize("solver", [odecore.RK4(), odecore.GaussLegendre4()], ids=type)
@pytest.mark.parametrize("side", ["<", "<="])
@pytest.mark.parametrize(("t0", "t1"), [(0.0, 1.0), (1.0, 0.0)])
def test_evaluate_next_to_a_jump_reads_the_field_from_the_steps_side(solver, side, t0, t1):
    # y' = -0.8 y before t = 0.5 and 0.6 y after. The interpolant of a step ending on
    # the jump took the field there from the other side: 4.6e-3 off (RK4).
    def field(t, y):
        before = t < 0.5 if side == "<" else t <= 0.5
        return torch.where(before, -0.8 * y, 0.6 * y)

    def exact(t: torch.Tensor) -> torch.Tensor:
        log = torch.where(t < 0.5, -0.8 * t, -0.4 + 0.6 * (t - 0.5))
        start = -0.8 * t0 if t0 < 0.5 else -0.4 + 0.6 * (t0 - 0.5)
        return torch.exp(log - start)[:, None]

    sol = odecore.solve(
        field, torch.ones(1, dtype=F64), t0=t0, t1=t1, solver=solver, dt0=0.05,
        jump_ts=[0.5], saveat=odecore.SaveAt(dense=True),
    )  # fmt: skip
    ts = torch.tensor([0.41, 0.47, 0.5, 0.53, 0.58], dtype=F64)
    torch.testing.assert_close(sol.evaluate(ts), exact(ts), rtol=1e-7, atol=0)


@pytest.mark.parametrize("t", [-0.1, 2.5, math.nan])
def test_evaluate_outside_the_span_is_an_error(t: float) -> None:
    sol = odecore.solve(
        _decay, torch.ones(1), t0=0.0, t1=2.0, solver=odecore.Dopri5(),
        saveat=odecore.SaveAt(dense=True),
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"is outside the span solved, \[0.0, 2.0\]"):
        sol.evaluate(t)


class _Relaxation(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.k = torch.nn.Parameter(torch.tensor(50.0, dtype=F64))

    def forward(self, t, y):
        return -self.k * (y - torch.cos(t))


@pytest.mark.parametrize("solver", [odecore.Kvaerno5(), odecore.Tsit5()], ids=type)
def test_evaluate_refuses_a_dense_output_that_evaluates_a_changed_field(solver) -> None:
    # Kvaerno5's interpolant takes a sub-step of the field, Tsit5's a Hermite one reads
    # its slopes: after an optimiser step they would mix the new field into the old
    # solution (0.9195 for 0.9169 at t = 0.43 with k moved from 50 to 5).
    field = _Relaxation()
    y0 = torch.tensor([2.0], dtype=F64)
    sol = odecore.solve(field, y0, t0=0.0, t1=1.0, solver=solver, saveat=odecore.SaveAt(dense=True))
    before = sol.evaluate(0.43)
    assert torch.equal(sol.evaluate(0.43), before)  # its own evaluations change nothing
    with torch.no_grad():
        field.k.fill_(5.0)
    with pytest.raises(odecore.ConfigurationError, match="changed after the solve"):
        sol.evaluate(0.43)


def test_evaluate_of_a_stored_dense_output_ignores_a_changed_field() -> None:
    # Rodas5P's continuous extension is made of the step's own stages: nothing to refuse.
    field = _Relaxation()
    y0 = torch.tensor([2.0], dtype=F64)
    sol = odecore.solve(
        field, y0, t0=0.0, t1=1.0, solver=odecore.Rodas5P(), saveat=odecore.SaveAt(dense=True)
    )
    before = sol.evaluate(0.43)
    with torch.no_grad():
        field.k.fill_(5.0)
    assert torch.equal(sol.evaluate(0.43), before)


class _Normalised(torch.nn.Module):
    """A BatchNorm field: another function in training mode than in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.lin = torch.nn.Linear(3, 3, dtype=F64)
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(3, 3, generator=gen) / 2)
        self.norm = torch.nn.BatchNorm1d(3, dtype=F64)

    def forward(self, t, y):
        return torch.tanh(self.norm(self.lin(y)))


@pytest.mark.parametrize("solver", [odecore.RK4(), odecore.Dopri5()], ids=type)
def test_evaluate_reads_the_field_in_the_mode_of_the_solve(solver) -> None:
    # The dense output's slopes or sub-steps evaluated the field in the mode it had
    # at the call: after train(), Dopri5's value at t = 0.6 moved by 0.074.
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(1), dtype=F64)
    field = _Normalised().eval()
    options = {"dt0": 0.25} if solver == odecore.RK4() else {}
    sol = odecore.solve(
        field, x, t0=0.0, t1=1.0, solver=solver, saveat=odecore.SaveAt(dense=True), **options
    )
    at = odecore.solve(
        field, x, t0=0.0, t1=1.0, solver=solver, saveat=odecore.SaveAt(ts=[0.6]), **options
    )
    field.train()
    torch.testing.assert_close(sol.evaluate(0.6), at.ys[0], rtol=1e-12, atol=1e-12)
    assert field.training and field.norm.training


def test_evaluate_without_dense_is_an_error() -> None:
    sol = odecore.solve(_decay, torch.ones(1), t0=0.0, t1=1.0, solver=odecore.Dopri5())
    with pytest.raises(ValueError, match=r"solve with `saveat=SaveAt\(dense=True\)`"):
        sol.evaluate(0.5)


@pytest.mark.parametrize("gradient", [odecore.Adjoint(), odecore.Checkpoint()])
def test_dense_needs_backprop(gradient: odecore.AbstractGradient) -> None:
    with pytest.raises(ValueError, match=r"it needs `gradient=Autograd\(\)`"):
        odecore.solve(
            _decay, torch.ones(1), t0=0.0, t1=1.0, solver=odecore.Dopri5(),
            saveat=odecore.SaveAt(dense=True), gradient=gradient,
        )  # fmt: skip


def test_odeint_dense_matches_torchdiffeq() -> None:
    torchdiffeq = pytest.importorskip("torchdiffeq")
    y0 = torch.tensor([1.0, 0.5], dtype=F64)
    t0, t1 = torch.tensor(0.0, dtype=F64), torch.tensor(3.0, dtype=F64)

    def pendulum(t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.stack([y[1], -torch.sin(y[0])])

    ours = odecore.odeint_dense(pendulum, y0, t0, t1, rtol=1e-10, atol=1e-12)
    theirs = torchdiffeq.odeint_dense(pendulum, y0, t0, t1, rtol=1e-10, atol=1e-12)
    for t in torch.linspace(0.05, 2.95, 11, dtype=F64):
        torch.testing.assert_close(ours(t), theirs(t), rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize(
    ("method", "options", "rel"),
    [
        ("rk4", {"step_size": 0.01}, 1e-7),
        ("bosh3", {}, 1e-7),
        ("gl6", {"step_size": 0.05}, 1e-7),
        # Second order: the global error at h = 0.01 is about 1e-6 of the value.
        ("sdirk2", {"step_size": 0.01}, 1e-5),
        ("trbdf2", {"step_size": 0.01}, 1e-5),
    ],
)
def test_odeint_dense_takes_every_method(method: str, options: dict, rel: float) -> None:
    y = odecore.odeint_dense(
        _decay, torch.ones(1, dtype=F64), 0.0, 1.0, method=method, options=options,
        rtol=1e-9, atol=1e-11,
    )  # fmt: skip
    assert y(0.4).item() == pytest.approx(math.exp(-0.4), rel=rel)


def test_odeint_dense_refuses_span_ends_that_require_grad() -> None:
    t0 = torch.tensor(0.0, requires_grad=True)
    with pytest.raises(ValueError, match=r"`t0` requires grad, but `odeint_dense` takes it"):
        odecore.odeint_dense(_decay, torch.ones(1), t0, 1.0)


@pytest.mark.parametrize("method", ["scipy:RK45", "torchdiffeq:dopri5"])
def test_odeint_dense_needs_an_odecore_method(method: str) -> None:
    with pytest.raises(ValueError, match="`odeint_dense` needs one of odecore's methods"):
        odecore.odeint_dense(_decay, torch.ones(1), 0.0, 1.0, method=method)


def test_evaluate_hands_out_tensors_of_its_own() -> None:
    # At t0 and at a step's end evaluate returned y0 itself and the step's own state:
    # changed in place by the caller, they changed y0 and every later read of the steps.
    y0 = torch.tensor([1.0, 0.5], dtype=F64)
    sol = odecore.solve(
        _decay, y0, t0=0.0, t1=1.0, solver=odecore.RK4(), dt0=0.25,
        saveat=odecore.SaveAt(dense=True),
    )  # fmt: skip
    before = sol.evaluate(torch.tensor([0.1, 0.3], dtype=F64))
    sol.evaluate(0.0).mul_(10.0)
    sol.evaluate(0.25).mul_(10.0)
    assert torch.equal(y0, torch.tensor([1.0, 0.5], dtype=F64))
    assert torch.equal(sol.evaluate(torch.tensor([0.1, 0.3], dtype=F64)), before)


def test_evaluate_takes_no_times_and_refuses_a_grid_of_them() -> None:
    sol = odecore.solve(
        lambda t, y: (-y[0], -y[1]), (torch.ones(2, dtype=F64), torch.ones(3, 1, dtype=F64)),
        t0=0.0, t1=1.0,
        solver=odecore.RK4(), dt0=0.25, saveat=odecore.SaveAt(dense=True),
    )  # fmt: skip
    none = sol.evaluate(torch.zeros(0, dtype=F64))  # was a bare error from torch.stack
    assert [x.shape for x in none] == [(0, 2), (0, 3, 1)]
    with pytest.raises(ValueError, match=r"0-dim or 1-D tensor of times, got a tensor of shape"):
        sol.evaluate(torch.full((2, 2), 0.5, dtype=F64))

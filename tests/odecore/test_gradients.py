"""Gradients by backpropagation through the solver steps (float64 gradcheck)."""

from __future__ import annotations

import contextlib
import math

import odecore
import pytest
import torch
from torch.autograd import gradcheck
from torch.func import functional_call

F64 = torch.float64

# Adaptive methods with the step sequence pinned: the first step and the cap are the
# same, and the tolerance is loose enough that no step is rejected or shortened. Then
# the steps do not depend on the inputs, and finite differences see the same
# discrete scheme that backpropagation differentiates. (With free steps, a
# perturbation may change an accepted step, which backpropagation does not see.)
PINNED = {
    "dopri5": {"first_step": 0.15, "max_step": 0.15},
    "tsit5": {"first_step": 0.15, "max_step": 0.15},
    "bosh3": {"first_step": 0.1, "max_step": 0.1},
    "dopri8": {"first_step": 0.3, "max_step": 0.3},
    "adaptive_heun": {"first_step": 0.05, "max_step": 0.05},
}
FIXED = {
    "rk4": {"step_size": 0.15},
    "euler": {"n_steps": 7},
    "midpoint": {"step_size": 0.13},
    "rk4_38": {"n_steps": 5},
}
METHODS = {**FIXED, **PINNED}


def odeint(func, y0, t, method):
    return odecore.odeint(func, y0, t, rtol=1e-3, atol=1e-3, method=method, options=METHODS[method])


class Field(torch.nn.Module):
    """A small nonlinear, time-dependent vector field with parameters."""

    def __init__(self, dim: int = 3) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(dim, dim, dtype=F64)

    def forward(self, t, y):
        return torch.tanh(self.lin(y)) * torch.cos(t) - 0.1 * y


@pytest.fixture
def field():
    torch.manual_seed(1)
    return Field()


T_GRID = torch.tensor([0.0, 0.5, 1.0], dtype=F64)
T_DENSE = torch.tensor([0.0, 0.13, 0.377, 0.61, 0.8, 1.0], dtype=F64)


@pytest.mark.parametrize("method", list(METHODS))
def test_gradcheck_y0(method, field):
    y0 = torch.randn(2, 3, dtype=F64, requires_grad=True)
    assert gradcheck(lambda y: odeint(field, y, T_GRID, method), (y0,))
    assert gradcheck(lambda y: odeint(field, y, T_GRID, method), (y0,), fast_mode=True)


@pytest.mark.parametrize("method", ["rk4", "euler", "dopri5", "tsit5"])
def test_gradcheck_parameters(method, field):
    y0 = torch.randn(3, dtype=F64)
    names = [name for name, _ in field.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for p in field.parameters())

    def solve(*values):
        def func(t, y):
            return functional_call(field, dict(zip(names, values)), (t, y))

        return odeint(func, y0, T_GRID, method)

    assert gradcheck(solve, params, fast_mode=True)


@pytest.mark.parametrize("method", ["rk4", "midpoint", "dopri5", "tsit5", "bosh3", "dopri8"])
def test_gradcheck_through_dense_output(method, field):
    # Output times inside steps: polynomial dense output (dopri5, tsit5, bosh3) or a
    # sub-step (rk4, midpoint, dopri8); both are differentiable.
    y0 = torch.randn(3, dtype=F64, requires_grad=True)
    assert gradcheck(lambda y: odeint(field, y, T_DENSE, method), (y0,), fast_mode=True)


@pytest.mark.parametrize("method", ["rk4", "dopri5"])
def test_gradcheck_backward_in_time(method, field):
    y0 = torch.randn(3, dtype=F64, requires_grad=True)
    assert gradcheck(lambda y: odeint(field, y, T_DENSE.flip(0), method), (y0,), fast_mode=True)


@pytest.mark.parametrize("method", ["rk4", "dopri5"])
def test_gradcheck_tuple_state(method):
    q0 = torch.randn(2, dtype=F64, requires_grad=True)
    p0 = torch.randn(2, dtype=F64, requires_grad=True)

    def pendulum(t, state):
        q, p = state
        return p, -torch.sin(q)

    assert gradcheck(
        lambda q, p: odeint(pendulum, (q, p), T_DENSE, method), (q0, p0), fast_mode=True
    )


@pytest.mark.parametrize("method", ["rk4", "dopri5"])
def test_gradcheck_through_jumps(method):
    # A time-dependent rate with a jump: y' = c(t) y, c = a for t < 0.4 and 2a after.
    a0 = torch.tensor(0.7, dtype=F64, requires_grad=True)
    y0 = torch.tensor([1.0, -2.0], dtype=F64, requires_grad=True)

    def solve(a, y):
        def func(t, s):
            return torch.where(t < 0.4, a, 2 * a) * s

        return odecore.odeint(
            func,
            y,
            T_DENSE,
            rtol=1e-3,
            atol=1e-3,
            method=method,
            options={**METHODS[method], "jump_t": [0.4]},
        )

    assert gradcheck(solve, (a0, y0))


# --- against the analytic gradient, with free (unpinned) adaptive steps ------------------------


@pytest.mark.parametrize("method", ["dopri5", "tsit5", "bosh3", "dopri8"])
def test_gradient_matches_analytic_at_dense_times(method):
    # y' = a y: y(t) = y0 exp(a t), dy(t)/da = t y(t), dy(t)/dy0 = exp(a t). The
    # gradient of the discrete solution is that of the exact one to the tolerance.
    a = torch.tensor(-0.8, dtype=F64, requires_grad=True)
    y0 = torch.tensor([1.5], dtype=F64, requires_grad=True)
    t = torch.linspace(0.0, 2.0, 41, dtype=F64)
    ys = odecore.odeint(lambda t, y: a * y, y0, t, rtol=1e-10, atol=1e-10, method=method)
    weights = torch.linspace(1.0, 2.0, len(t), dtype=F64)[:, None]
    (weights * ys).sum().backward()
    exact = torch.exp(a.detach() * t)[:, None]
    d_a = (weights * t[:, None] * 1.5 * exact).sum()
    d_y0 = (weights * exact).sum()
    assert a.grad.item() == pytest.approx(d_a.item(), rel=1e-7)
    assert y0.grad.item() == pytest.approx(d_y0.item(), rel=1e-7)


@pytest.mark.parametrize("method", ["dopri5", "tsit5"])
def test_gradient_of_final_state_matches_analytic(method):
    a = torch.tensor(0.5, dtype=F64, requires_grad=True)
    y0 = torch.tensor([2.0], dtype=F64)
    T = 1.7
    yT = odecore.odeint(lambda t, y: a * y, y0, torch.tensor([0.0, T], dtype=F64), method=method)
    yT[-1].sum().backward()
    assert a.grad.item() == pytest.approx(T * 2.0 * math.exp(0.5 * T), rel=1e-6)


def test_no_graph_without_requires_grad(field):
    with torch.no_grad():
        ys = odeint(field, torch.randn(3, dtype=F64), T_DENSE, "dopri5")
    assert not ys.requires_grad
    ys = odeint(field, torch.randn(3, dtype=F64), T_DENSE, "dopri5")
    assert ys.requires_grad  # through the module's parameters


@pytest.mark.parametrize(
    "gradient", [odecore.Checkpoint(), odecore.Adjoint(), odecore.Reversible()], ids=repr
)
def test_inference_mode_solves_as_no_grad_does(field, gradient):
    # The state is made under inference mode, as a model's input is: an inference
    # tensor, which has no version counter.
    with torch.no_grad():
        expected = odecore.solve(field, torch.ones(3, dtype=F64), t0=0.0, t1=1.0,
                                 solver=odecore.Dopri5()).ys  # fmt: skip
    with torch.inference_mode():
        y0 = torch.ones(3, dtype=F64)
        sol = odecore.solve(field, y0, t0=0.0, t1=1.0, solver=odecore.Dopri5(), gradient=gradient)
    torch.testing.assert_close(sol.ys, expected, rtol=1e-8, atol=1e-9)


def _copies():
    """A saved-tensors hook that keeps a detached copy of each saved tensor, as
    ``torch.autograd.graph.save_on_cpu`` (from a GPU) or a memory counter does."""
    return torch.autograd.graph.saved_tensors_hooks(lambda x: x.detach().clone(), lambda x: x)


@pytest.mark.parametrize(
    "gradient",
    [odecore.Adjoint(), odecore.Checkpoint(), odecore.Adjoint(state="interpolated")],
    ids=["adjoint", "checkpoint", "adjoint-interpolated"],
)
@pytest.mark.parametrize("event", [False, True], ids=["solve", "event"])
def test_gradients_hold_under_a_saved_tensors_hook(gradient, event):
    # The parameters reached the backward pass through save_for_backward, whose hook
    # returned copies the field's graph knows nothing of: their gradients came back
    # zero (the adjoint's) without a word. Backprop without a hook is the oracle.
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    net = net.to(F64)
    w = torch.tensor(0.7, dtype=F64, requires_grad=True)  # closed over
    c = torch.tensor(0.6, dtype=F64, requires_grad=True)  # the event function's

    def field(t, y):
        return w * net(y)

    y0 = torch.tensor([[0.3, -0.2, 0.5]], dtype=F64, requires_grad=True)
    crossing = odecore.Event(lambda t, y: t + 0.1 * y[..., 0].sum() - c)
    kwargs = {"event": crossing} if event else {}
    inputs = (*net.parameters(), w, y0, *((c,) if event else ()))

    def grads(method, hook):
        for q in inputs:
            q.grad = None
        with hook:
            sol = odecore.solve(field, y0, t0=0.0, t1=1.0, solver=odecore.Dopri5(),
                                controller=odecore.PIDController(rtol=1e-10, atol=1e-12),
                                gradient=method, **kwargs)  # fmt: skip
            loss = sol.ys[-1].pow(2).sum() + (sol.ts[-1] if event else 0.0)
            loss.backward()
        return [q.grad.clone() for q in inputs]

    expected = grads(odecore.Autograd(), contextlib.nullcontext())
    for got, want in zip(grads(gradient, _copies()), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-8)


# --- a tensor changed in place between the solve and its backward pass -------------------


def _event_solve(w, y0):
    return odecore.solve(
        lambda t, y: -y, y0, t0=0.0, t1=5.0, solver=odecore.Tsit5(),
        event=odecore.Event(lambda t, y: y[0] - w),
    )  # fmt: skip


IN_PLACE = {
    "checkpoint": odecore.Checkpoint(),
    "adjoint": odecore.Adjoint(),
    "adjoint-interpolated": odecore.Adjoint(state="interpolated"),
    "reversible": odecore.Reversible(),
}


@pytest.mark.parametrize(
    ("method", "changed"), [*((m, c) for m in IN_PLACE for c in ("w", "y0")), ("event", "w")]
)
def test_a_tensor_changed_in_place_before_backward_is_refused(method, changed):
    # Backprop differentiates the solve that ran (its graph holds what it read); the
    # methods that evaluate the field again would differentiate another solve (the
    # adjoint's gradient of w came out at 1e231, the checkpoint's 40 % off).
    w = torch.tensor(0.7, dtype=F64, requires_grad=True)
    y0 = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)
    if method == "event":
        sol = _event_solve(w, y0)
    else:
        sol = odecore.solve(
            lambda t, y: -w * y**3, y0, t0=0.0, t1=1.0, solver=odecore.RK4(), dt0=0.1,
            gradient=IN_PLACE[method],
        )  # fmt: skip
    loss = sol.ys[-1].sum() if method != "event" else sol.event_t
    with torch.no_grad():
        (w if changed == "w" else y0).mul_(2.0)
    with pytest.raises(RuntimeError, match="modified in place"):
        torch.autograd.grad(loss, (w, y0))


# --- a backward pass that evaluates the field again --------------------------------------


class _Normalised(torch.nn.Module):
    """A field with a BatchNorm in training mode (running statistics) or dropout."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.lin = torch.nn.Linear(3, 3)
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(3, 3, generator=gen) / 2)
            self.lin.bias.copy_(torch.randn(3, generator=gen) / 2)
        self.norm = torch.nn.BatchNorm1d(3)
        self.drop = torch.nn.Dropout(dropout)

    def forward(self, t, y):
        return torch.tanh(self.drop(self.norm(self.lin(y))))


AGAIN = {
    "checkpoint": odecore.Checkpoint(every=2),
    "adjoint": odecore.Adjoint(),
    "adjoint-interpolated": odecore.Adjoint(state="interpolated"),
    "reversible": odecore.Reversible(),
}


@pytest.mark.parametrize("method", sorted(AGAIN))
def test_running_statistics_count_the_forward_solve_only(method):
    # Backprop's backward pass evaluates nothing: the statistics are the forward solve's.
    # The other methods' evaluations in the backward pass counted again (16 batches
    # tracked became 32, and the running mean moved to the backward pass's states).
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(1))
    stats = {}
    for name, gradient in (("backprop", odecore.Autograd()), (method, AGAIN[method])):
        field = _Normalised()
        sol = odecore.solve(
            field, x, t0=0.0, t1=1.0, solver=odecore.RK4(), dt0=0.25, gradient=gradient
        )
        forward = [b.clone() for b in field.norm.buffers()]
        sol.ys[-1].square().sum().backward()
        stats[name] = [b.clone() for b in field.norm.buffers()]
        for got, want in zip(stats[name], forward):
            assert torch.equal(got, want)
    if method != "reversible":  # whose forward solve evaluates the field elsewhere
        for got, want in zip(stats[method], stats["backprop"]):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


def test_running_statistics_count_the_forward_solve_only_in_an_event_gradient():
    # The event time's backward pass evaluates the field at the event: 78 batches
    # tracked became 79.
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(1), dtype=F64)
    field = _Normalised().double()
    sol = odecore.solve(
        field, x, t0=0.0, t1=5.0, solver=odecore.RK4(), dt0=0.125,
        event=odecore.Event(lambda t, y: y.square().sum() - 1.5 * x.square().sum()),
    )  # fmt: skip
    forward = [b.clone() for b in field.norm.buffers()]
    sol.event_t.backward()
    for got, want in zip(field.norm.buffers(), forward):
        assert torch.equal(got, want)


@pytest.mark.parametrize("method", sorted(AGAIN))
def test_a_field_also_differentiated_by_backprop_keeps_its_saved_statistics(method):
    # The same BatchNorm field in two solves of one loss, one by backprop (whose graph
    # saves the running statistics): putting them back after the other method's
    # backward pass gave them a new version, and backward() refused them as
    # modified in place.
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(1), dtype=F64)
    grads = []
    for gradient in (odecore.Autograd(), AGAIN[method]):
        field = _Normalised().double()
        ys = [
            odecore.solve(field, x, t0=0.0, t1=1.0, solver=odecore.RK4(), dt0=0.125,
                          gradient=g).ys[-1]
            for g in (odecore.Autograd(), gradient)
        ]  # fmt: skip
        (ys[0].sum() + ys[1].square().sum()).backward()
        grads.append([q.grad for q in field.parameters()])
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_running_statistics_count_the_forward_solve_only_in_odeint_adjoint_adams():
    field = _Normalised()
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(1))
    t = torch.tensor([0.0, 1.0])
    ys = odecore.odeint_adjoint(field, x, t, method="explicit_adams", options={"step_size": 0.25})
    forward = [b.clone() for b in field.norm.buffers()]
    ys[-1].square().sum().backward()
    for got, want in zip(field.norm.buffers(), forward):
        assert torch.equal(got, want)


def _mode_solve(field, x, method):
    """The solve of ``method`` (a gradient method of AGAIN, backprop, an Adams
    ``odeint_adjoint`` or an event solve by the adjoint) and the loss to differentiate."""
    if method in ("adams", "adams-backprop"):
        run = odecore.odeint_adjoint if method == "adams" else odecore.odeint
        t = torch.tensor([0.0, 1.0], dtype=F64)
        ys = run(field, x, t, method="explicit_adams", options={"step_size": 1 / 32})
        return ys[-1].square().sum()
    if method in ("event", "event-backprop"):
        sol = odecore.solve(
            field, x, t0=0.0, t1=5.0, solver=odecore.RK4(), dt0=0.125,
            gradient=odecore.Adjoint() if method == "event" else odecore.Autograd(),
            event=odecore.Event(lambda t, y: y.square().sum() - 1.5 * x.square().sum()),
        )  # fmt: skip
        return sol.event_t
    gradient = AGAIN[method] if method in AGAIN else odecore.Autograd()
    sol = odecore.solve(
        field, x, t0=0.0, t1=1.0, solver=odecore.RK4(), dt0=0.125, gradient=gradient
    )
    return sol.ys[-1].square().sum()


@pytest.mark.parametrize("first", ["eval", "train"])
@pytest.mark.parametrize("method", [*sorted(AGAIN), "adams", "event"])
def test_a_mode_changed_before_backward_leaves_the_gradient_of_the_forward_solve(method, first):
    # Backprop's graph holds the forward solve's function; a backward pass that
    # evaluates the field again did so in the mode it found there: after eval() the
    # adjoint's gradient used the running statistics where the forward solve used the
    # batch's (14.3 for 23.9, without a word), Checkpoint and Reversible raised.
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(1), dtype=F64)
    grads = {}
    for name in (method, "adams-backprop" if method == "adams" else f"{method}-backprop"):
        field = _Normalised().double()
        field.train(first == "train")
        loss = _mode_solve(field, x, name)
        field.train(first != "train")  # the other mode, between the solve and backward()
        loss.backward()
        grads[name] = [q.grad for q in field.parameters()]
        assert all(m.training == (first != "train") for m in field.modules())  # put back
    for got, want in zip(*grads.values()):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("every", [2, 100])
def test_a_checkpoint_replay_that_does_not_retrace_the_forward_solve_raises(every):
    # Dropout draws other masks in the replay: the gradient was 23 % off without a word.
    field = _Normalised(dropout=0.5)
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(1))
    sol = odecore.solve(
        field, x, t0=0.0, t1=1.0, solver=odecore.RK4(), dt0=0.25,
        gradient=odecore.Checkpoint(every=every),
    )  # fmt: skip
    with pytest.raises(odecore.ConfigurationError, match=r"replay.*deterministic"):
        sol.ys[-1].sum().backward()
    field.eval()  # no dropout: the replay retraces the solve
    sol = odecore.solve(
        field, x, t0=0.0, t1=1.0, solver=odecore.RK4(), dt0=0.25,
        gradient=odecore.Checkpoint(every=every),
    )  # fmt: skip
    sol.ys[-1].sum().backward()
    assert field.lin.weight.grad is not None


def test_a_checkpointed_solve_of_an_empty_batch_replays_without_a_check_to_make():
    # The replay's check took the largest difference of no numbers, and raised.
    w = torch.tensor(0.5, requires_grad=True)
    y0 = torch.ones(0, 2, requires_grad=True)
    sol = odecore.solve(
        lambda t, y: -w * y, y0, t0=0.0, t1=1.0, solver=odecore.RK4(), dt0=0.25,
        gradient=odecore.Checkpoint(every=2),
    )  # fmt: skip
    sol.ys[-1].sum().backward()
    assert y0.grad.shape == (0, 2)
    assert w.grad == 0.0

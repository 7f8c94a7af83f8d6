"""Checkpointing: backprop's exact discrete gradients with one segment's graph at a time."""

from __future__ import annotations

import math
import subprocess
import sys

import odecore
import pytest
import torch
from graphs import graph_size

F64 = torch.float64


class Field(torch.nn.Module):
    def __init__(self, activation: torch.nn.Module) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(3, 16), activation, torch.nn.Linear(16, 3)
        ).to(F64)

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(y) * (1 + 0.5 * torch.sin(3 * t))


def solve_and_grad(field, y0, gradient, solver, ts, **kwargs):
    tensors = [y0, *field.parameters()]
    for x in tensors:
        x.grad = None
    sol = odecore.solve(
        field,
        y0,
        t0=float(ts[0]),
        t1=float(ts[-1]),
        solver=solver,
        saveat=odecore.SaveAt(ts=ts),
        gradient=gradient,
        **kwargs,
    )
    (sol.ys**2).sum().backward()
    return sol, [x.grad.clone() for x in tensors]


CASES = [
    (odecore.Dopri5(), {}, [0.0, 0.5, 1.0, 2.0]),
    (odecore.Tsit5(), {}, [2.0, 1.3, -1.0]),
    (odecore.Dopri8(), {}, [0.0, 0.7, 2.0]),
    (odecore.RK4(), {"dt0": 0.05}, [0.0, 0.33, 1.0, 2.0]),
    (odecore.Euler(), {"dt0": 0.01, "jump_ts": [0.25, 0.5]}, [0.0, 1.0]),
    (odecore.Dopri5(), {"jump_ts": [0.3, 0.6]}, [0.0, 0.45, 1.0]),
]


@pytest.mark.parametrize("every", [None, 1, 3, 10_000])
@pytest.mark.parametrize("activation", [torch.nn.Tanh, torch.nn.ReLU])
@pytest.mark.parametrize(("solver", "kwargs", "ts"), CASES)
def test_checkpoint_equals_backprop(solver, kwargs, ts, activation, every):
    torch.manual_seed(0)
    field = Field(activation())
    y0 = torch.randn(4, 3, dtype=F64, requires_grad=True)
    ts = torch.tensor(ts, dtype=F64)
    sol_b, back = solve_and_grad(field, y0, odecore.Autograd(), solver, ts, **kwargs)
    sol_c, check = solve_and_grad(field, y0, odecore.Checkpoint(every=every), solver, ts, **kwargs)
    torch.testing.assert_close(sol_c.ys, sol_b.ys, rtol=0, atol=0)
    for g_back, g_check in zip(back, check):
        torch.testing.assert_close(g_check, g_back, rtol=1e-12, atol=1e-13)
    # The replay costs at most one more forward solve: the accepted steps again
    # (no rejections, no first-step search), FSAL reuse lost across segments.
    stages = solver.tableau.stages
    assert sol_c.stats.n_accepted * (stages - 1) <= sol_c.stats.nfe_backward
    assert sol_c.stats.nfe_backward <= 2 * sol_c.stats.nfe


def test_tuple_state():
    w = torch.nn.Parameter(torch.tensor(1.3, dtype=F64))

    def field(t, state):
        q, p = state
        return p, -(w**2) * torch.sin(q)

    q0 = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)
    p0 = torch.tensor([0.0, 0.2], dtype=F64, requires_grad=True)
    grads = []
    for gradient in (odecore.Autograd(), odecore.Checkpoint(params=(w,))):
        for x in (q0, p0, w):
            x.grad = None
        sol = odecore.solve(
            field, (q0, p0), t0=0.0, t1=3.0, solver=odecore.Tsit5(), gradient=gradient
        )
        (sol.ys[0] ** 2).sum().add(sol.ys[1].sum()).backward()
        grads.append([x.grad.clone() for x in (q0, p0, w)])
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-13)


def test_forward_keeps_no_graph_of_the_steps():
    field = Field(torch.nn.Tanh())
    y0 = torch.randn(3, dtype=F64, requires_grad=True)
    sizes = []
    for dt0 in (0.1, 0.01):
        sol = odecore.solve(
            field,
            y0,
            t0=0.0,
            t1=1.0,
            solver=odecore.RK4(),
            dt0=dt0,
            gradient=odecore.Checkpoint(),
        )
        sizes.append(graph_size(sol.ys))
    assert sizes[0] == sizes[1]


@pytest.mark.parametrize("every", [0, -1, 2.5, True])
def test_every_must_be_a_positive_integer(every):
    with pytest.raises(ValueError, match=r"`every` must be a positive integer"):
        odecore.Checkpoint(every=every)


@pytest.mark.parametrize("form", ["leaf", "non-leaf"])
def test_checkpoint_finds_a_tensor_read_only_after_t0(form):
    # w.grad was None without an error: the tensors were searched at (t0, y0) only.
    # ``-y`` until t = 0.5, then ``-(1 + w (t - 0.5)) y``: y(1) = y0 exp(-1 - w / 8).
    w = torch.tensor(0.7, dtype=F64, requires_grad=True)
    y0 = torch.tensor([1.5], dtype=F64, requires_grad=True)
    grads = []
    for gradient in (odecore.Autograd(), odecore.Checkpoint(every=3)):
        w.grad, y0.grad = None, None
        read = w * 1.0 if form == "non-leaf" else w

        def field(t, y, read=read):
            return -y if float(t) <= 0.5 else -(1 + read * (t - 0.5)) * y

        sol = odecore.solve(
            field, y0, t0=0.0, t1=1.0, solver=odecore.Dopri5(),
            controller=odecore.PIDController(rtol=1e-11, atol=1e-12), gradient=gradient,
        )  # fmt: skip
        sol.ys[-1].sum().backward()
        assert w.grad is not None, f"{gradient} left w without a gradient"
        grads.append((w.grad.clone(), y0.grad.clone()))
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-12, atol=1e-14)
    y1 = 1.5 * math.exp(-1 - 0.7 / 8)
    assert grads[1][0].item() == pytest.approx(-y1 / 8, rel=1e-7)


@pytest.mark.parametrize("gradient", [odecore.Autograd(), odecore.Checkpoint()])
def test_checkpoint_of_a_solve_without_steps(gradient):
    # t1 == t0: no step to replay (the replay indexed an empty list of step ends).
    y0 = torch.tensor([1.5, -2.0], dtype=F64, requires_grad=True)
    sol = odecore.solve(lambda t, y: -y, y0, t0=0.3, t1=0.3, solver=odecore.Dopri5(),
                        gradient=gradient)  # fmt: skip
    (2 * sol.ys[-1]).sum().backward()
    torch.testing.assert_close(y0.grad, torch.full_like(y0, 2.0))


@pytest.mark.parametrize(
    "gradient", [odecore.Checkpoint(), odecore.Adjoint(), odecore.Reversible()], ids=repr
)
def test_a_failed_solve_refuses_a_gradient_it_does_not_have(gradient):
    """With ``throw=False`` a failed solve's outputs came back without a graph: their
    share of the gradients of ``y0`` and of the field's tensors was silently missing
    (backpropagation has it; the reversible method gave ``y0`` a zero gradient and the
    field's tensors none). A backward pass through them now raises; ``y0`` at ``t0``
    keeps its gradient, and a solve without a graph returns the same outputs."""
    w = torch.tensor(-0.7, dtype=F64, requires_grad=True)
    y0 = torch.tensor([1.5, -2.0], dtype=F64, requires_grad=True)

    def failed():
        return odecore.solve(lambda t, y: w * y, y0, t0=0.0, t1=1.0, solver=odecore.RK4(),
                             dt0=0.1, saveat=odecore.SaveAt(ts=[0.0, 0.2, 0.5]), max_steps=3,
                             throw=False, gradient=gradient)  # fmt: skip

    sol = failed()
    assert sol.status == odecore.Status.MAX_STEPS_REACHED
    with pytest.raises(odecore.ConfigurationError, match="reaches `t1` only"):
        torch.autograd.grad(sol.ys[1].sum(), (y0, w))
    (grad,) = torch.autograd.grad(sol.ys[0].sum(), y0)
    torch.testing.assert_close(grad, torch.ones_like(y0))
    with torch.no_grad():
        plain = failed()
    torch.testing.assert_close(plain.ys, sol.ys.detach(), equal_nan=True, rtol=0, atol=0)


def test_backward_holds_one_segment_graph_at_a_time():
    # The replay of a segment kept its graph (retain_graph) while the next segment was
    # replayed: two segments' activations at once, twice the memory checkpointing promises.
    live = [0]

    class Token:
        def __init__(self) -> None:
            live[0] += 1

        def __del__(self) -> None:
            live[0] -= 1

    class Mark(torch.autograd.Function):
        """Identity whose graph node holds a Token: live Tokens count live evaluations."""

        @staticmethod
        def forward(ctx, y):
            ctx.token = Token()
            return y.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad

    lin = torch.nn.Linear(3, 3, dtype=F64)
    y0 = torch.randn(3, dtype=F64, requires_grad=True)
    seen: list[int] = []

    def field(t, y):
        seen.append(live[0])
        return Mark.apply(torch.tanh(lin(y)))

    sol = odecore.solve(
        field, y0, t0=0.0, t1=1.0, solver=odecore.RK4(), dt0=0.05,
        gradient=odecore.Checkpoint(every=5),
    )  # fmt: skip
    seen.clear()
    sol.ys[-1].sum().backward()
    assert len(seen) == 80  # four segments of 5 steps of 4 stages, replayed
    assert max(seen) == 19  # at most the other 19 evaluations of the segment replayed


def test_an_eager_checkpoint_runs_in_a_process_that_never_compiled():
    # The replays switch off a compiled step's buffer reuse from torch._functorch's
    # config, which `import torch` does not load; an eager solve loads neither it up
    # front nor torch._dynamo. In a fresh process, as a user's first solve.
    code = (
        "import math, sys, torch, odecore\n"
        "w = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)\n"
        "sol = odecore.solve(lambda t, y: -w * y, torch.ones(2, dtype=torch.float64), t0=0.0,\n"
        "    t1=1.0, solver=odecore.RK4(), dt0=0.1, gradient=odecore.Checkpoint())\n"
        "sol.ys[-1].sum().backward()\n"
        "assert abs(w.grad.item() + 2 * math.exp(-0.5)) < 1e-6, w.grad  # d/dw 2 exp(-w)\n"
        "assert 'torch._dynamo' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

"""Second derivatives through a solve (a Hessian, a gradient penalty): right, against
central differences of the gradient, or refused with ``ConfigurationError``; never a
constant gradient that silently drops the second-order terms."""

import math

import odecore
import pytest
import torch
from odecore import ConfigurationError
from torch import nn

A0 = torch.tensor([[-1.0, 2.0], [-2.0, -1.0]], dtype=torch.float64)
V = torch.tensor([[0.3, -0.7], [0.5, 0.2]], dtype=torch.float64)  # the Hessian's direction
Y0 = torch.tensor([1.0, 0.5], dtype=torch.float64)
STEP = {"controller": odecore.ConstantStepSize(), "dt0": 0.1}


class Field(nn.Module):
    def __init__(self, a: torch.Tensor) -> None:
        super().__init__()
        self.a = nn.Parameter(a.clone())

    def forward(self, t, y):
        return torch.tanh(y @ self.a.T)


def _solve(gradient=None, solver=None, **kwargs):
    def run(field):
        sol = odecore.solve(
            field, Y0, t0=0.0, t1=1.0, solver=solver or odecore.RK4(),
            gradient=gradient or odecore.Autograd(), **{**STEP, **kwargs},
        )  # fmt: skip
        return sol.ys[-1] if sol.event_t is None else sol.ys[-1] * sol.event_t

    return run


def _odeint_adjoint(field):
    t = torch.tensor([0.0, 1.0], dtype=torch.float64)
    options = {"step_size": 0.01}
    return odecore.odeint_adjoint(field, Y0, t, method="explicit_adams", options=options)[-1]


def _odeint_adjoint_torchdiffeq(field):
    # torchdiffeq's adjoint hands back gradients without a graph under create_graph=True.
    pytest.importorskip("torchdiffeq")
    t = torch.tensor([0.0, 1.0], dtype=torch.float64)
    return odecore.odeint_adjoint(field, Y0, t, method="torchdiffeq:dopri5", rtol=1e-10,
                                  atol=1e-12)[-1]  # fmt: skip


CASES = {
    "autograd-rk4": (_solve(), "exact"),
    "autograd-rodas5p": (_solve(solver=odecore.Rodas5P()), "exact"),
    "autograd-kvaerno5": (_solve(solver=odecore.Kvaerno5()), "refused"),
    "autograd-event": (
        _solve(
            solver=odecore.Tsit5(),
            controller=odecore.PIDController(rtol=1e-10, atol=1e-12),
            dt0=None,
            event=odecore.Event(lambda t, y: y[0] - 0.6),  # near t = 0.79
        ),
        "refused",
    ),
    "checkpoint": (_solve(odecore.Checkpoint()), "refused"),
    "adjoint": (_solve(odecore.Adjoint()), "refused"),
    "adjoint-interpolated": (_solve(odecore.Adjoint(state="interpolated")), "refused"),
    "reversible": (_solve(odecore.Reversible()), "refused"),
    "odeint_adjoint-adams": (_odeint_adjoint, "refused"),
    "odeint_adjoint-torchdiffeq": (_odeint_adjoint_torchdiffeq, "refused"),
}


def _gradient(run, a, create_graph=False):
    field = Field(a)
    loss = run(field).pow(2).sum()
    (g,) = torch.autograd.grad(loss, field.a, create_graph=create_graph)
    return field, g


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_second_derivative_is_right_or_refused(case):
    run, outcome = CASES[case]
    eps = 1e-6
    plus, minus = (_gradient(run, A0 + s * eps * V)[1] for s in (1.0, -1.0))
    fd = (plus - minus) / (2 * eps)
    if outcome == "refused":
        # The first derivative is there (the refusal is not of every backward pass; the
        # adjoint's is the continuous problem's, near the discrete one's) ...
        field, g = _gradient(run, A0)
        plus, minus = (run(Field(A0 + s * eps * V)).pow(2).sum().item() for s in (1.0, -1.0))
        assert (g * V).sum().item() == pytest.approx((plus - minus) / (2 * eps), rel=1e-4)
        # ... the second is refused, in words that say what to do.
        with pytest.raises(ConfigurationError, match=r"first order.*higher-order gradients"):
            _gradient(run, A0, create_graph=True)
        return
    field, g = _gradient(run, A0, create_graph=True)
    (hv,) = torch.autograd.grad((g * V).sum(), field.a)
    assert torch.allclose(hv, fd, rtol=1e-5, atol=1e-7), (hv, fd)


def test_a_gradient_penalty_through_the_adjoint_is_refused_not_dropped():
    # The penalty's own gradient was silently zero: the loss below trained as if it were L.
    field = Field(A0)
    y = _solve(odecore.Adjoint())(field)
    loss = y.pow(2).sum()
    with pytest.raises(ConfigurationError, match="adjoint"):
        torch.autograd.grad(loss, field.a, create_graph=True)


def _square_at(t: torch.Tensor, inside: bool, dense: bool = False) -> torch.Tensor:
    """``y(t)^2`` for ``y' = -y^2``, ``y(0) = 1`` (``y = 1 / (1 + t)``), with ``t`` an
    output time inside the solve (or read from its dense output) or its end."""
    f64 = torch.float64
    solver = {
        "solver": odecore.Dopri5(),
        "controller": odecore.PIDController(rtol=1e-12, atol=1e-12),
    }
    if dense:
        sol = odecore.solve(lambda s, y: -y * y, torch.ones(1, dtype=f64), t0=0.0, t1=2.0,
                            saveat=odecore.SaveAt(dense=True), **solver)  # fmt: skip
        return (sol.evaluate(t) ** 2).sum()
    end = torch.tensor(2.0, dtype=f64)
    ts = torch.stack(
        [torch.zeros((), dtype=f64), t, end] if inside else [torch.zeros((), dtype=f64), t]
    )
    ys = odecore.odeint(lambda s, y: -y * y, torch.ones(1, dtype=f64), ts, method="dopri5",
                        rtol=1e-12, atol=1e-12)  # fmt: skip
    return (ys[1] ** 2).sum()


def test_the_second_derivative_for_the_end_time_is_exact():
    t = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(_square_at(t, inside=False), t, create_graph=True)
    (h,) = torch.autograd.grad(g, t)
    assert g.item() == pytest.approx(-2 / 2**3, rel=1e-9)
    assert h.item() == pytest.approx(6 / 2**4, rel=1e-9)  # d2/dt2 (1 + t)^-2


@pytest.mark.parametrize("dense", [False, True])
def test_the_second_derivative_for_a_time_inside_a_step_is_refused(dense):
    # It came out 0.125 for 0.375: the dense output's slope was a constant of the graph.
    t = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    loss = _square_at(t, inside=True, dense=dense)
    (g,) = torch.autograd.grad(loss, t, retain_graph=True)
    assert g.item() == pytest.approx(-0.25, rel=1e-9)  # the first derivative is right
    with pytest.raises(ConfigurationError, match="output time inside a step is first order"):
        torch.autograd.grad(loss, t, create_graph=True)


def test_a_gradient_penalty_through_torchdiffeqs_adjoint_is_refused_not_dropped():
    # The penalty's gradient was silently missing: w.grad came out -0.607 for -1.342,
    # the gradient of y alone.
    pytest.importorskip("torchdiffeq")
    w = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([0.0, 1.0], dtype=torch.float64)
    y0 = torch.ones(1, dtype=torch.float64)
    y = odecore.odeint_adjoint(
        lambda s, y: -w * y, y0, t, method="torchdiffeq:dopri5", adjoint_params=(w,)
    )[-1].sum()
    with pytest.raises(ConfigurationError, match=r"torchdiffeq's adjoint.*first order"):
        torch.autograd.grad(y, w, create_graph=True)
    # A tuple state's parts are passed on alike; its first derivative is there.
    ys = odecore.odeint_adjoint(
        lambda s, y: (-w * y[0], -w * y[1]), (torch.ones(1, dtype=torch.float64),) * 2, t,
        method="torchdiffeq:dopri5", rtol=1e-10, atol=1e-12, adjoint_params=(w,),
    )  # fmt: skip
    (g,) = torch.autograd.grad((ys[0][-1] + ys[1][-1]).sum(), w)
    assert g.item() == pytest.approx(-2 * math.exp(-0.5), rel=1e-7)

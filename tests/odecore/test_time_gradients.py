"""No silent gradient: every input that requires grad gets the right one.

Oracles: torchdiffeq on the same call, ``torch.autograd.gradcheck`` in float64 (exact
for the discrete scheme), and the closed forms of ``y' = a y + b sin(t)`` and
``y' = -0.7 y + sin(3 t)``.
"""

from __future__ import annotations

import math

import odecore
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

F64 = torch.float64
GRADIENTS = {
    "autograd": odecore.Autograd(),
    "checkpoint": odecore.Checkpoint(every=3),
    "adjoint": odecore.Adjoint(),
}


def _linear(a: torch.Tensor, b: torch.Tensor):
    return lambda t, y: a * y + b * torch.sin(t)


def _closed_form(a, b, y0, t):
    """``y(t)`` of ``y' = a y + b sin(t)``, ``y(t[0]) = y0``, at every time of ``t``."""

    def particular(s):
        return b * (-a * torch.sin(s) - torch.cos(s)) / (a * a + 1)

    return torch.stack(
        [(y0 - particular(t[0])) * torch.exp(a * (s - t[0])) + particular(s) for s in t]
    )


def _inputs(requires: frozenset[str]) -> dict[str, torch.Tensor]:
    return {
        "a": torch.tensor(-0.7, dtype=F64, requires_grad="a" in requires),
        "b": torch.tensor(1.3, dtype=F64, requires_grad="b" in requires),
        "y0": torch.tensor([1.0, -0.5], dtype=F64, requires_grad="y0" in requires),
        "t": torch.tensor([0.1, 0.45, 0.8, 1.2], dtype=F64, requires_grad="t" in requires),
    }


def _loss(ys: torch.Tensor) -> torch.Tensor:
    weights = torch.linspace(0.5, 2.0, ys.numel(), dtype=ys.dtype).view_as(ys)
    return (weights * ys * ys).sum()


# --- the issue's example, against torchdiffeq ----------------------------------------


@pytest.mark.parametrize(
    ("ours", "theirs", "rtol"),
    [
        ("dopri5", "dopri5", 1e-5),  # other step sequences: alike to the tolerance
        ("rk4_38", "rk4", 1e-12),  # torchdiffeq's rk4 is Kutta's 3/8 rule; same grid
        ("euler", "euler", 1e-12),
        ("midpoint", "midpoint", 1e-12),
    ],
)
def test_time_gradient_matches_torchdiffeq(ours: str, theirs: str, rtol: float) -> None:
    torchdiffeq = pytest.importorskip("torchdiffeq")
    a = torch.tensor(-0.7, dtype=F64)
    f = _linear(a, torch.tensor(1.0, dtype=F64))
    y0 = torch.tensor([1.0], dtype=F64)
    grads = []
    for lib, method in ((odecore, ours), (torchdiffeq, theirs)):
        t = torch.tensor([0.0, 0.5, 1.0], dtype=F64, requires_grad=True)
        ys = lib.odeint(f, y0, t, method=method)
        (grad,) = torch.autograd.grad(ys[-1].sum(), t)
        grads.append(grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=rtol, atol=rtol)


# --- exact for the discrete scheme: gradcheck ------------------------------------------


@pytest.mark.parametrize(
    ("method", "options"),
    [
        ("euler", {}),
        ("rk4", {}),
        ("midpoint", {"step_size": 0.07}),  # not a divisor of the span: no kink
        ("rk4", {"step_size": 0.13}),
        ("dopri5", {}),
        ("bosh3", {}),
        ("tsit5", {}),
    ],
)
@pytest.mark.parametrize("reverse", [False, True])
def test_backprop_time_gradient_is_exact_for_the_scheme(
    method: str, options: dict, reverse: bool
) -> None:
    a, b = torch.tensor(-0.7, dtype=F64), torch.tensor(1.3, dtype=F64)
    f = _linear(a, b)
    y0 = torch.tensor([1.0, -0.5], dtype=F64, requires_grad=True)
    t = torch.tensor([0.1, 0.45, 0.8, 1.2], dtype=F64)
    t = t.flip(0) if reverse else t
    t.requires_grad_(True)

    def run(t: torch.Tensor, y0: torch.Tensor) -> torch.Tensor:
        return odecore.odeint(f, y0, t, method=method, options=options, rtol=1e-6, atol=1e-8)

    assert torch.autograd.gradcheck(run, (t, y0), eps=1e-7, atol=1e-6)


@pytest.mark.parametrize("solver", [odecore.Dopri5(), odecore.Bosh3(), odecore.RK4()])
@pytest.mark.parametrize("every", [1, 2, 5])
def test_checkpoint_time_gradient_equals_backprop(solver: odecore.AbstractSolver, every: int):
    a, b = torch.tensor(-0.7, dtype=F64), torch.tensor(1.3, dtype=F64)
    f = _linear(a, b)
    y0 = torch.tensor([1.0, -0.5], dtype=F64)
    grads = []
    for gradient in (odecore.Autograd(), odecore.Checkpoint(every=every)):
        ts = torch.tensor([0.0, 0.3, 0.55, 1.0], dtype=F64, requires_grad=True)
        sol = odecore.solve(
            f,
            y0,
            t0=0.0,
            t1=1.0,
            solver=solver,
            dt0=0.1,
            controller=None if solver.adaptive else odecore.ConstantStepSize(),
            saveat=odecore.SaveAt(ts=ts),
            gradient=gradient,
        )
        grads.append(torch.autograd.grad(_loss(sol.ys), ts)[0])
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-12, atol=1e-12)


def test_an_appended_end_time_keeps_the_gradients_of_the_others() -> None:
    f = _linear(torch.tensor(-0.7, dtype=F64), torch.tensor(1.0, dtype=F64))
    ts = torch.tensor([0.0, 0.5], dtype=F64, requires_grad=True)
    sol = odecore.solve(
        f,
        torch.ones(1, dtype=F64),
        t0=0.0,
        t1=1.0,
        solver=odecore.Dopri5(),
        saveat=odecore.SaveAt(ts=ts, t1=True),
        gradient=odecore.Adjoint(),
    )
    sol.ys[1].sum().backward()
    assert ts.grad is not None and ts.grad[1].item() == pytest.approx(
        f(torch.tensor(0.5, dtype=F64), sol.ys[1]).item(), rel=1e-6
    )


def test_jump_times_that_require_grad_are_refused() -> None:
    jumps = torch.tensor([0.5], requires_grad=True)
    with pytest.raises(ValueError, match="`jump_ts` requires grad"):
        odecore.solve(
            lambda t, y: -y, torch.ones(1), t0=0.0, t1=1.0, solver=odecore.Dopri5(), jump_ts=jumps
        )


_LISTED = torch.tensor(0.5, dtype=F64, requires_grad=True)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"saveat": odecore.SaveAt(ts=[_LISTED, 1.0])}, r"`saveat\.ts\[0\]` is a tensor that"),
        ({"step_ts": [0.2, _LISTED]}, r"`step_ts\[1\]` is a tensor that requires grad"),
        ({"jump_ts": [_LISTED]}, r"`jump_ts` requires grad"),
    ],
    ids=["saveat", "step_ts", "jump_ts"],
)
@pytest.mark.parametrize("solver", [odecore.Dopri5(), odecore.RK4()], ids=repr)
def test_solve_refuses_listed_times_that_require_grad(kwargs: dict, match: str, solver) -> None:
    # A list of 0-dim tensors was read as numbers: their gradients were None, silently.
    y0 = torch.ones(1, dtype=F64, requires_grad=True)
    dt0 = None if solver.adaptive else 0.1
    with pytest.raises(ValueError, match=match):
        odecore.solve(_forced, y0, t0=0.0, t1=1.0, solver=solver, dt0=dt0, **kwargs)
    with torch.no_grad():  # nothing to differentiate: read as numbers
        odecore.solve(_forced, y0, t0=0.0, t1=1.0, solver=solver, dt0=dt0, **kwargs)


@pytest.mark.parametrize(
    ("method", "options"),
    [("dopri5", {}), ("rk4", {}), ("rk4", {"n_steps": 4}), ("rk4", {"perturb": True})],
    ids=str,
)
def test_odeint_refuses_a_step_t_list_of_tensors_that_require_grad(method: str, options: dict):
    y0 = torch.ones(1, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 1.0], dtype=F64)
    with pytest.raises(ValueError, match=r"`step_ts?\[0\]` is a tensor that requires grad"):
        odecore.odeint(_forced, y0, t, method=method, options={**options, "step_t": [_LISTED]})


@pytest.mark.parametrize(
    "options", [{}, {"perturb": True}, {"perturb": True, "step_size": 0.1}, {"n_steps": 4}], ids=str
)
def test_odeint_refuses_jump_t_that_requires_grad(options: dict) -> None:
    # With `perturb` the jump times were read as numbers beside the step ends, past the
    # refusal: their gradient was None.
    jumps = torch.tensor([0.5], dtype=F64, requires_grad=True)
    y0 = torch.ones(1, dtype=F64, requires_grad=True)
    with pytest.raises(ValueError, match="`jump_ts` requires grad"):
        odecore.odeint(_forced, y0, torch.tensor([0.0, 1.0], dtype=F64), method="rk4",
                       options={**options, "jump_t": jumps})  # fmt: skip


@pytest.mark.parametrize("name", ["t0", "t1"])
@pytest.mark.parametrize("event", [None, odecore.Event(lambda t, y: y - 0.5)])
def test_solve_refuses_span_ends_that_require_grad(name: str, event) -> None:
    # float(t0) dropped the graph: the outputs, event time included, had no gradient.
    span = {"t0": 0.0, "t1": 1.0 if event is None else math.inf}
    span[name] = torch.tensor(span[name], dtype=F64, requires_grad=True)
    with pytest.raises(ValueError, match=f"`{name}` requires grad, but `solve` takes it"):
        odecore.solve(
            lambda t, y: -y, torch.ones(1, dtype=F64), solver=odecore.Dopri5(), event=event,
            **span,
        )  # fmt: skip
    with torch.no_grad():  # no gradient is asked for
        odecore.solve(
            lambda t, y: -y, torch.ones(1, dtype=F64), solver=odecore.Dopri5(), event=event,
            **span,
        )  # fmt: skip


# --- no None anywhere --------------------------------------------------------------------


class _Field(nn.Module):
    """``a y + b sin(t)`` with ``a`` a parameter and ``b`` a tensor it closes over."""

    def __init__(self, a: torch.Tensor, b: torch.Tensor) -> None:
        super().__init__()
        self.a = nn.Parameter(a.detach().clone(), requires_grad=a.requires_grad)
        self._b = [b]  # held, not registered

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.a * y + self._b[0] * torch.sin(t)


@pytest.mark.parametrize("gradient", list(GRADIENTS))
@pytest.mark.parametrize("form", ["closure", "module", "non-leaf closure"])
def test_no_gradient_method_leaves_an_input_without_its_gradient(gradient: str, form: str):
    x = _inputs(frozenset({"a", "b", "y0", "t"}))
    if form == "module":
        field = _Field(x["a"], x["b"])
        a = field.a
    elif form == "closure":
        field, a = _linear(x["a"], x["b"]), x["a"]
    else:
        raw = x["a"]
        field, a = _linear(raw * 1.0, x["b"]), raw
    sol = odecore.solve(
        field,
        x["y0"],
        t0=0.1,
        t1=1.2,
        solver=odecore.Dopri5(),
        controller=odecore.PIDController(rtol=1e-10, atol=1e-12),
        saveat=odecore.SaveAt(ts=x["t"]),
        gradient=GRADIENTS[gradient],
    )
    _loss(sol.ys).backward()
    inputs = {"a": a, "b": x["b"], "y0": x["y0"], "t": x["t"]}
    missing = [name for name, v in inputs.items() if v.grad is None]
    assert not missing, f"{gradient} left {missing} without a gradient"
    oracle = _inputs(frozenset({"a", "b", "y0", "t"}))
    _loss(_closed_form(oracle["a"], oracle["b"], oracle["y0"], oracle["t"])).backward()
    for name, v in inputs.items():
        torch.testing.assert_close(v.grad, oracle[name].grad, rtol=2e-6, atol=2e-8)


@pytest.mark.parametrize("gradient", [*GRADIENTS.values(), odecore.Reversible()], ids=repr)
def test_a_field_that_returns_the_tensor_it_closes_over_gives_it_its_gradient(gradient):
    """``y' = c``: the field's result is ``c`` itself, a leaf with no graph to walk."""
    c = torch.tensor([1.0, -2.0], dtype=F64, requires_grad=True)
    y0 = torch.zeros(2, dtype=F64, requires_grad=True)
    sol = odecore.solve(
        lambda t, y: c, y0, t0=0.0, t1=1.0, solver=odecore.RK4(), dt0=0.1,
        saveat=odecore.SaveAt(ts=[0.5, 1.0]), gradient=gradient,
    )  # fmt: skip
    sol.ys.sum().backward()
    assert c.grad is not None, f"{gradient!r} left `c` without a gradient"
    torch.testing.assert_close(c.grad, torch.full_like(c, 1.5))
    torch.testing.assert_close(y0.grad, torch.full_like(y0, 2.0))


@pytest.mark.parametrize("method", [odecore.Adjoint, odecore.Checkpoint, odecore.Reversible])
def test_params_named_twice_or_without_grad_give_each_gradient_once(method):
    def gradient(how):
        w = torch.tensor([0.7, -0.3], dtype=F64, requires_grad=True)
        sol = odecore.solve(
            lambda t, y: -w * y, torch.ones(2, dtype=F64), t0=0.0, t1=1.0,
            solver=odecore.RK4(), dt0=0.1, gradient=how(w),
        )  # fmt: skip
        sol.ys[-1].sum().backward()
        return w.grad

    constant = torch.tensor(1.0, dtype=F64)
    twice = gradient(lambda w: method(params=(w, w, constant)))
    torch.testing.assert_close(twice, gradient(lambda w: method(params=(w,))))
    torch.testing.assert_close(twice, gradient(lambda w: odecore.Autograd()), rtol=1e-6, atol=0)


@pytest.mark.parametrize("method", ["dopri5", "scipy:LSODA"])
def test_odeint_adjoint_differentiates_what_a_plain_function_closes_over(method: str) -> None:
    pytest.importorskip("scipy")
    w = torch.tensor(1.0, dtype=F64, requires_grad=True)
    y0 = torch.ones(2, dtype=F64)
    t = torch.linspace(0.0, 1.0, 3, dtype=F64)
    ys = odecore.odeint_adjoint(lambda t, y: -w * y, y0, t, method=method, rtol=1e-10, atol=1e-12)
    ys[-1].sum().backward()
    assert w.grad is not None
    assert w.grad.item() == pytest.approx(-2 * math.exp(-1.0), rel=1e-6)


@pytest.mark.parametrize("method", ["scipy:LSODA", "scipy:RK45"])
@pytest.mark.parametrize("interface", ["odeint", "odeint_adjoint"])
def test_the_scipy_backend_gives_every_input_its_gradient(method: str, interface: str) -> None:
    pytest.importorskip("scipy")
    names = frozenset({"a", "b", "y0", "t"})
    x = _inputs(names)
    ys = getattr(odecore, interface)(
        _linear(x["a"], x["b"]), x["y0"], x["t"], method=method, rtol=1e-11, atol=1e-13
    )
    _loss(ys).backward()
    oracle = _inputs(names)
    _loss(_closed_form(oracle["a"], oracle["b"], oracle["y0"], oracle["t"])).backward()
    for name in sorted(names):
        assert x[name].grad is not None, f"{method} gave {name} no gradient"
        torch.testing.assert_close(x[name].grad, oracle[name].grad, rtol=1e-6, atol=1e-8)


# --- one property over gradient method x method x inputs --------------------------------

METHODS = {
    "rk4": {"options": {"step_size": 0.01}},
    "dopri5": {},
    "bosh3": {},
    "tsit5": {},
    "dopri8": {},
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gradient=st.sampled_from(sorted(GRADIENTS)),
    method=st.sampled_from(sorted(METHODS)),
    requires=st.sets(st.sampled_from(["a", "b", "y0", "t"]), min_size=1).map(frozenset),
    reverse=st.booleans(),
)
def test_every_gradient_method_gives_every_input_its_gradient(
    gradient: str, method: str, requires: frozenset[str], reverse: bool
) -> None:
    x = _inputs(requires)
    t = x["t"].flip(0) if reverse else x["t"]
    field = _linear(x["a"], x["b"])
    kwargs = dict(method=method, rtol=1e-10, atol=1e-12, **METHODS[method])
    if gradient == "adjoint":
        ys = odecore.odeint_adjoint(field, x["y0"], t, **kwargs)
    elif gradient == "autograd":
        ys = odecore.odeint(field, x["y0"], t, **kwargs)
    else:  # checkpoint: the structured API with the same objects
        ys = _checkpointed(field, x["y0"], t, method)
    _loss(ys).backward()
    oracle = _inputs(requires)
    t_oracle = oracle["t"].flip(0) if reverse else oracle["t"]
    _loss(_closed_form(oracle["a"], oracle["b"], oracle["y0"], t_oracle)).backward()
    for name in sorted(requires):
        assert x[name].grad is not None, f"{gradient}/{method} gave {name} no gradient"
        torch.testing.assert_close(x[name].grad, oracle[name].grad, rtol=1e-5, atol=1e-7)


def _checkpointed(field, y0, t, method):
    solver = odecore.ADAPTIVE_METHODS.get(method) or odecore.FIXED_METHODS[method]
    adaptive = method in odecore.ADAPTIVE_METHODS
    sol = odecore.solve(
        field,
        y0,
        t0=float(t[0].detach()),
        t1=float(t[-1].detach()),
        solver=solver(),
        controller=odecore.PIDController(rtol=1e-10, atol=1e-12)
        if adaptive
        else odecore.ConstantStepSize(),
        dt0=None if adaptive else 0.01,
        saveat=odecore.SaveAt(ts=t),
        gradient=odecore.Checkpoint(every=4),
    )
    return sol.ys


@pytest.mark.parametrize("gradient", list(GRADIENTS))
def test_event_solve_gives_the_start_and_output_times_their_gradients(gradient: str) -> None:
    """A falling ball pushed by sin(t): the loss reads the event time, an output time's
    state and the state at the event; central differences are the oracle."""
    g = 9.81

    def loss(h: torch.Tensor, t0: torch.Tensor) -> torch.Tensor:
        ts = torch.stack([t0, t0 + 0.2])
        sol = odecore.solve(
            lambda t, y: (y[1], torch.full_like(y[1], -g) + 0.3 * torch.sin(t)),
            (h, torch.zeros((), dtype=F64)),
            t0=float(t0.detach()),
            t1=math.inf,
            solver=odecore.Tsit5(),
            controller=odecore.PIDController(rtol=1e-10, atol=1e-12),
            saveat=odecore.SaveAt(ts=ts, t1=True),
            event=odecore.Event(lambda t, y: y[0]),
            gradient=GRADIENTS[gradient],
        )
        return sol.event_t + 0.5 * sol.ys[0][1] + sol.ys[1][-1]

    h = torch.tensor(2.0, dtype=F64, requires_grad=True)
    t0 = torch.tensor(0.1, dtype=F64, requires_grad=True)
    loss(h, t0).backward()
    eps = 1e-6
    with torch.no_grad():
        one = torch.tensor(eps, dtype=F64)
        fd_h = (loss(h + one, t0) - loss(h - one, t0)) / (2 * eps)
        fd_t0 = (loss(h, t0 + one) - loss(h, t0 - one)) / (2 * eps)
    assert h.grad is not None and t0.grad is not None
    assert h.grad.item() == pytest.approx(fd_h.item(), rel=1e-6)
    assert t0.grad.item() == pytest.approx(fd_t0.item(), rel=1e-6)


class _Counted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.calls = 0

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.tanh(self.linear(y))


@pytest.mark.parametrize("gradient", ["adjoint", "checkpoint"])
def test_finding_the_tensors_a_field_reads_costs_no_evaluation(gradient: str) -> None:
    """The evaluation whose graph is walked is the forward solve's first."""
    field = _Counted()
    sol = odecore.solve(
        field, torch.randn(2, 3), t0=0.0, t1=1.0, solver=odecore.RK4(), dt0=0.1,
        gradient=GRADIENTS[gradient],
    )  # fmt: skip
    assert field.calls == sol.stats.nfe == 40


@pytest.mark.parametrize("gradient", list(GRADIENTS))
def test_a_jump_at_t0_starts_from_the_limit_after_it(gradient: str) -> None:
    """The closure search's evaluation at exactly t0 is not the solve's first there:
    at a jump the solve starts from f's limit after t0."""
    w = torch.tensor(1.0, dtype=F64, requires_grad=True)
    sol = odecore.solve(
        lambda t, y: torch.where(t > 0.5, 2.0, -1.0) * w * torch.ones_like(y),
        torch.zeros(1, dtype=F64), t0=0.5, t1=1.0, solver=odecore.Dopri5(), jump_ts=[0.5],
        gradient=GRADIENTS[gradient],
    )  # fmt: skip
    assert sol.ys[-1].item() == pytest.approx(1.0, rel=1e-12)
    sol.ys[-1].sum().backward()
    assert w.grad is not None and w.grad.item() == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize("at_jump", ["t > 0.5", "t >= 0.5"])
@pytest.mark.parametrize(
    "times", [[0.5, 1.0], [0.0, 0.5], [0.0, 0.5, 1.0], [0.5, 0.5, 1.0], [1.0, 0.5, 0.0]], ids=str
)
def test_the_adjoint_reads_an_output_time_at_a_jump_from_inside_the_span(times, at_jump):
    """``y' = -1`` before 0.5 and ``2`` after, a jump of ``jump_ts``: the slope of an
    output at the jump is the field's limit from inside the span, after the start and
    before any other output, whatever the field's value at 0.5 itself; as for
    backpropagation (exact here: the solution is piecewise linear)."""

    def field(t, y):
        after = t > 0.5 if at_jump == "t > 0.5" else t >= 0.5
        return torch.where(after, 2.0, -1.0) * torch.ones_like(y)

    grads = []
    for gradient in ("autograd", "adjoint"):
        ts = torch.tensor(times, dtype=F64, requires_grad=True)
        sol = odecore.solve(
            field, torch.zeros(1, dtype=F64), t0=times[0], t1=times[-1], solver=odecore.Dopri5(),
            saveat=odecore.SaveAt(ts=ts), jump_ts=[0.5], gradient=GRADIENTS[gradient],
        )  # fmt: skip
        grads.append(torch.autograd.grad(sol.ys.sum(), ts)[0])
    torch.testing.assert_close(grads[1], grads[0])


# --- fixed grids: every step end and every output time keeps its time gradient ----------
#
# y' = -0.7 y + sin(3 t), y(t[0]) = 1; the outputs are y at t[1] and t[2]. An output time
# that falls on the fixed grid used to lose its gradient to the grid point of the same
# value (the grid of `n_steps` or `grid_constructor` is a function of t[0] and t[-1]
# only), and the grids of the Adams methods' `step_size` were Python floats.

ADAMS = ["explicit_adams", "implicit_adams", "fixed_adams"]
ONE_STEP = sorted(odecore.FIXED_METHODS)
IMPLICIT = sorted(odecore.IMPLICIT_METHODS)
_A = -0.7


def _forced(t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return _A * y + torch.sin(3 * t)


def _forced_exact(t: torch.Tensor) -> torch.Tensor:
    """``y(t)`` of ``y' = a y + sin(3 t)``, ``y(t[0]) = 1``: ``C e^{a t}`` plus the
    particular solution ``-(a sin(3 t) + 3 cos(3 t)) / (9 + a^2)``."""

    def particular(s: torch.Tensor) -> torch.Tensor:
        return -(_A * torch.sin(3 * s) + 3 * torch.cos(3 * s)) / (9 + _A * _A)

    return (1.0 - particular(t[0])) * torch.exp(_A * (t - t[0])) + particular(t)


def _uniform4(func, y0, t: torch.Tensor) -> torch.Tensor:
    """Four uniform steps, built from ``t`` so that the grid carries its gradient."""
    inner = t[0] + (t[-1] - t[0]) * torch.tensor([0.25, 0.5, 0.75], dtype=t.dtype)
    return torch.cat([t[:1], inner, t[-1:]])


GRIDS = {
    # t[1] = 0.5 is on the grid of n_steps 4 and 2, of step_size 0.25 and of _uniform4.
    "n_steps=4": ([0.0, 0.5, 1.0], {"n_steps": 4}),
    "n_steps=2": ([0.0, 0.5, 1.0], {"n_steps": 2}),
    "n_steps=4 backward": ([1.0, 0.5, 0.0], {"n_steps": 4}),
    "n_steps=5 (off the grid)": ([0.0, 0.5, 1.0], {"n_steps": 5}),
    # A step size that divides the span puts a kink at t[0] and t[-1] (one step more or
    # less): these spans are not multiples of it.
    "step_size=0.25": ([0.0, 0.5, 1.1], {"step_size": 0.25}),
    "step_size=0.25 backward": ([1.0, 0.5, -0.1], {"step_size": 0.25}),
    "step_size=0.3 (off the grid)": ([0.0, 0.5, 1.1], {"step_size": 0.3}),
    "grid_constructor": ([0.0, 0.5, 1.0], {"grid_constructor": _uniform4}),
    "default grid": ([0.0, 0.5, 1.0], {}),
}


def _outputs(method: str, options: dict):
    def run(t: torch.Tensor) -> torch.Tensor:
        y0 = torch.ones(1, dtype=F64)
        return odecore.odeint(_forced, y0, t, method=method, options=options)[1:, 0]

    return run


@pytest.mark.filterwarnings("ignore:the Adams-Moulton corrector:RuntimeWarning")
@pytest.mark.parametrize("grid", list(GRIDS))
@pytest.mark.parametrize("method", ONE_STEP + ADAMS)
def test_every_fixed_grid_gives_each_time_its_gradient(method: str, grid: str) -> None:
    """Backprop is exact for the discrete scheme: gradcheck's central differences of the
    same solve, float64 (the wrong gradients were off by 0.1 to 1; the interpolant's
    second derivative, which jumps at a grid point, costs about eps here)."""
    times, options = GRIDS[grid]
    t = torch.tensor(times, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(_outputs(method, options), (t,), eps=1e-7, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "grid", ["n_steps=4", "step_size=0.3 (off the grid)", "grid_constructor", "default grid"]
)
@pytest.mark.parametrize("perturb", [False, True], ids=["", "perturb"])
@pytest.mark.parametrize("method", ["rk4", "midpoint"])
def test_a_step_t_tensor_gets_its_gradient_on_every_fixed_grid(
    method: str, grid: str, perturb: bool
) -> None:
    """The option ``step_t`` as a tensor that requires grad: the steps that end on it
    move with it, on every grid (beside the default grid, ``n_steps`` and
    ``grid_constructor`` its gradient was None: the times were copied into a new
    tensor; with ``step_size`` they were not, but with ``perturb`` too)."""
    times, options = GRIDS[grid]
    options = {**options, "perturb": True} if perturb else options

    def run(steps: torch.Tensor) -> torch.Tensor:
        t = torch.tensor(times, dtype=F64)
        y0 = torch.ones(1, dtype=F64)
        opts = {**options, "step_t": steps}
        return odecore.odeint(_forced, y0, t, method=method, options=opts)[1:, 0]

    steps = torch.tensor([0.2, 0.7], dtype=F64, requires_grad=True)
    assert torch.autograd.grad(run(steps).sum(), steps)[0].abs().min() > 1e-7
    assert torch.autograd.gradcheck(run, (steps,), eps=1e-7, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("method", ["dopri5", "rodas5p", "scipy:RK45"])
def test_the_adjoint_gives_step_times_that_require_grad_zero(method: str) -> None:
    """Where the solver steps does not change the ODE's solution, whose gradient the
    adjoint gives: step times that require grad get zero (they got None), and
    backpropagation through the steps at a tight tolerance gets about as much."""
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64)
    grads = {}
    for entry in (odecore.odeint_adjoint, odecore.odeint):
        steps = torch.tensor([0.2, 0.7], dtype=F64, requires_grad=True)
        ys = entry(_forced, torch.ones(1, dtype=F64), t, method=method, rtol=1e-10,
                   atol=1e-12, options={"step_t": steps})  # fmt: skip
        (grads[entry],) = torch.autograd.grad(ys.sum(), steps, allow_unused=True)
    assert grads[odecore.odeint_adjoint] is not None
    assert torch.equal(grads[odecore.odeint_adjoint], torch.zeros(2, dtype=F64))
    assert grads[odecore.odeint] is not None  # scipy's odeint is the adjoint too
    torch.testing.assert_close(grads[odecore.odeint], torch.zeros(2, dtype=F64), rtol=0, atol=1e-8)


@pytest.mark.parametrize("grid", ["n_steps=4", "step_size=0.25", "default grid"])
@pytest.mark.parametrize("method", IMPLICIT)
def test_implicit_fixed_grids_give_each_time_its_gradient(method: str, grid: str) -> None:
    times, options = GRIDS[grid]
    t = torch.tensor(times, dtype=F64, requires_grad=True)
    run = _outputs(method, {**options, "max_iters": 50})
    assert torch.autograd.gradcheck(run, (t,), eps=1e-7, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    ("method", "options"),
    [
        *(
            (method, options)
            for method in ("rk4", "rk4_38")
            for options in (
                {"n_steps": 4},
                {"n_steps": 40},
                {"step_size": 0.05},
                {"step_size": 0.25},
            )
        ),
        # The Adams methods' coefficients assume equal steps: with `step_size` the
        # shortened last step makes the discrete time gradient an O(h) one.
        *((method, {"n_steps": 40}) for method in ADAMS),
    ],
    ids=str,
)
def test_the_issue_example_against_the_closed_form(method: str, options: dict) -> None:
    """The issue's loss ``2 y(0.5) + 3 y(1)``: close to the exact gradient (loosely, the
    scheme's error), ``[2.03, 0.62, -1.63]`` and not ``[2.34, 0, -1.31]``."""
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64, requires_grad=True)
    ys = odecore.odeint(_forced, torch.ones(1, dtype=F64), t, method=method, options=options)
    (grad,) = torch.autograd.grad(2 * ys[1, 0] + 3 * ys[2, 0], t)
    exact = t.detach().clone().requires_grad_(True)
    y = _forced_exact(exact)
    (oracle,) = torch.autograd.grad(2 * y[1] + 3 * y[2], exact)
    torch.testing.assert_close(grad, oracle, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("method", ONE_STEP)
def test_n_steps_with_the_adjoint_against_the_closed_form(method: str) -> None:
    """The adjoint's time gradient is the continuous one, on any grid."""
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64, requires_grad=True)
    ys = odecore.odeint_adjoint(
        _forced, torch.ones(1, dtype=F64), t, method=method, options={"n_steps": 400}
    )
    (grad,) = torch.autograd.grad(2 * ys[1, 0] + 3 * ys[2, 0], t)
    exact = t.detach().clone().requires_grad_(True)
    y = _forced_exact(exact)
    (oracle,) = torch.autograd.grad(2 * y[1] + 3 * y[2], exact)
    torch.testing.assert_close(grad, oracle, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(
    "options",
    [
        {"step_size": 0.3, "jump_t": [0.5]},
        {"step_size": 0.3, "step_t": [0.5]},
        {"step_size": 0.3, "step_t": torch.tensor([0.5], dtype=F64)},
        {"n_steps": 4, "perturb": True},  # 0.6 on the grid, every step end a jump
        {"n_steps": 4, "step_t": [0.5]},
        {"perturb": True},
    ],
    ids=str,
)
@pytest.mark.parametrize("method", ["rk4", "midpoint"])
def test_a_constant_step_time_on_an_output_time_stays_put(method: str, options: dict) -> None:
    """A jump or step time given as a number is a constant: a step that ends on it does
    not move with the output time of the same value (0.5 here; 1.2 is no multiple of
    0.3 after 0.5, which would put a kink at the end)."""
    t = torch.tensor([0.0, 0.5, 0.6, 1.2], dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(_outputs(method, options), (t,), eps=1e-7, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("gradient", ["autograd", "checkpoint"])
@pytest.mark.parametrize("solver", [odecore.RK4(), odecore.Midpoint()], ids=repr)
def test_solve_tells_an_output_time_from_a_step_time_of_the_same_value(
    solver: odecore.AbstractSolver, gradient: str
) -> None:
    """``solve`` with a constant step size, step times and output times as separate
    tensors that share the value 0.5: each gets its own gradient."""

    def run(ts: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        sol = odecore.solve(
            _forced,
            torch.ones(1, dtype=F64),
            t0=0.0,
            t1=1.0,
            solver=solver,
            controller=odecore.ConstantStepSize(),
            dt0=0.3,
            step_ts=steps,
            saveat=odecore.SaveAt(ts=ts),
            gradient=GRADIENTS[gradient],
        )
        return sol.ys[:, 0]

    ts = torch.tensor([0.2, 0.5, 0.9], dtype=F64, requires_grad=True)
    steps = torch.tensor([0.25, 0.5, 0.75], dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(run, (ts, steps), eps=1e-7, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("gradient", list(GRADIENTS))
@pytest.mark.parametrize(
    ("solver", "dt0"), [(odecore.RK4(), 0.25), (odecore.Dopri5(), None)], ids=["rk4", "dopri5"]
)
def test_repeated_output_times_each_keep_their_gradient(
    solver: odecore.AbstractSolver, dt0: float | None, gradient: str
) -> None:
    """``SaveAt(ts=[0.2, 0.5, 0.5, 0.8])``: the two outputs at 0.5 are two inputs, each
    with the gradient of its own output (the slope there, times its weight)."""
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64)
    grads = []
    for times in ([0.2, 0.5, 0.5, 0.8], [0.2, 0.5, 0.8]):
        ts = torch.tensor(times, dtype=F64, requires_grad=True)
        sol = odecore.solve(
            _forced, torch.ones(1, dtype=F64), t0=0.0, t1=1.0, solver=solver, dt0=dt0,
            saveat=odecore.SaveAt(ts=ts), gradient=GRADIENTS[gradient],
        )  # fmt: skip
        w = weights if len(times) == 4 else torch.ones(3, dtype=F64)
        (grad,) = torch.autograd.grad((w * sol.ys[:, 0]).sum(), ts)
        grads.append(grad)
    repeated, single = grads
    slope = single[1]
    expected = torch.stack([single[0], 2 * slope, 3 * slope, 4 * single[2]])
    torch.testing.assert_close(repeated, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("gradient", list(GRADIENTS))
@pytest.mark.parametrize("start", [0.2, 0.8], ids=["forward", "backward"])
def test_an_output_time_repeated_at_the_start_moves_from_it(gradient: str, start: float):
    """``SaveAt(ts=[0.2, 0.2, 0.5, 0.8])`` from ``t0 = 0.2`` (and its mirror from 0.8):
    the first output time is the start; the second moves from it along the field,
    slope ``f(t0, y0)``, and moving the start moves that output the other way
    (one-sided differences agree)."""
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64)
    end = 1.0 - start
    grads = []
    for times in ([start, start, 0.5, end], [start, 0.5, end]):
        ts = torch.tensor(times, dtype=F64, requires_grad=True)
        sol = odecore.solve(
            _forced, torch.ones(1, dtype=F64), t0=start, t1=end, solver=odecore.Dopri5(),
            controller=odecore.PIDController(rtol=1e-10, atol=1e-12),
            saveat=odecore.SaveAt(ts=ts), gradient=GRADIENTS[gradient],
        )  # fmt: skip
        w = weights if len(times) == 4 else weights[[0, 2, 3]]
        (grad,) = torch.autograd.grad(w @ sol.ys[:, 0], ts)
        grads.append(grad)
    repeated, single = grads
    slope = _forced(torch.tensor(start, dtype=F64), torch.ones(1, dtype=F64))[0]
    expected = torch.stack([single[0] - 2 * slope, 2 * slope, single[1], single[2]])
    torch.testing.assert_close(repeated, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("gradient", list(GRADIENTS))
def test_an_output_time_repeated_in_a_solve_of_no_length_moves_from_the_start(gradient: str):
    """``t0 = t1 = 0.2``, ``SaveAt(ts=[0.2, 0.2])``: the first time is the start, the
    second moves from it along ``f(t0, y0)`` (one-sided differences agree)."""
    ts = torch.tensor([0.2, 0.2], dtype=F64, requires_grad=True)
    y0 = torch.ones(1, dtype=F64, requires_grad=True)
    sol = odecore.solve(
        _forced, y0, t0=0.2, t1=0.2, solver=odecore.Dopri5(), saveat=odecore.SaveAt(ts=ts),
        gradient=GRADIENTS[gradient],
    )  # fmt: skip
    (grad,) = torch.autograd.grad(torch.tensor([1.0, 2.0], dtype=F64) @ sol.ys[:, 0], ts)
    slope = _forced(torch.tensor(0.2, dtype=F64), y0.detach())[0]
    torch.testing.assert_close(grad, torch.stack([-2 * slope, 2 * slope]))

"""torchdiffeq's step callbacks: found on the vector field, called by the solve loop."""

from __future__ import annotations

import itertools
import math
import re
import warnings

import odecore
import pytest
import torch

torchdiffeq = pytest.importorskip("torchdiffeq")

F64 = torch.float64
NAMES = ("callback_step", "callback_accept_step", "callback_reject_step")


class Recording(torch.nn.Module):
    """A small field that records every callback: ``(name, t0, dt, structure of y0)``."""

    def __init__(self, tuple_state: bool = False) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 2).double()
        self.tuple_state = tuple_state
        self.calls: list[tuple[str, float, float, object]] = []

    def forward(self, t, y):
        if self.tuple_state:
            return (torch.tanh(self.linear(y[0])), -y[1])
        return torch.tanh(self.linear(y)) * torch.cos(t)

    def _record(self, name, t0, y0, dt):
        shape = tuple(y.shape for y in y0) if isinstance(y0, tuple) else y0.shape
        self.calls.append((name, float(t0), float(dt), shape))

    def callback_step(self, t0, y0, dt):
        self._record("step", t0, y0, dt)

    def callback_accept_step(self, t0, y0, dt):
        self._record("accept", t0, y0, dt)

    def callback_reject_step(self, t0, y0, dt):
        self._record("reject", t0, y0, dt)

    def callback_step_adjoint(self, t0, y0, dt):
        self._record("step_adjoint", t0, y0, dt)

    def callback_accept_step_adjoint(self, t0, y0, dt):
        self._record("accept_adjoint", t0, y0, dt)

    def of(self, name):
        return [(t0, dt) for n, t0, dt, _ in self.calls if n == name]


def _pairs(calls):
    return [pytest.approx(pair, abs=1e-12) for pair in calls]


# --- against torchdiffeq, fixed steps: the same grid gives the same calls --------------


def _unsupported(warned) -> list[set[str]]:
    """The callback names of each of torchdiffeq's "does not support callbacks" warnings."""
    found = [re.search(r"does not support callbacks \{(.*?)\}", str(w.message)) for w in warned]
    return [set(re.findall(r"'(\w+)'", m.group(1))) for m in found if m is not None]


@pytest.mark.parametrize(
    "method", ["euler", "rk4", "midpoint", "explicit_adams", "implicit_adams", "fixed_adams"]
)
@pytest.mark.parametrize(
    ("t", "options"),
    [
        (torch.linspace(0.0, 1.0, 6, dtype=F64), None),
        (torch.linspace(1.0, -1.0, 5, dtype=F64), None),
        (torch.tensor([0.0, 1.0], dtype=F64), {"step_size": 0.125}),
        (torch.tensor([0.5, -0.5], dtype=F64), {"step_size": 0.25}),
    ],
    ids=["grid", "grid-backward", "step-size", "step-size-backward"],
)
def test_fixed_step_calls_match_torchdiffeq(method, t, options):
    ours, theirs = Recording(), Recording()
    theirs.load_state_dict(ours.state_dict())
    y0 = torch.randn(3, 2, dtype=F64)
    # Both warn once, in the same words, that the accept and reject callbacks will not
    # be called (the multistep methods as well: they step on the same grid).
    with warnings.catch_warnings(record=True) as ours_warned:
        warnings.simplefilter("always")
        odecore.odeint(ours, y0, t, method=method, options=options)
    with warnings.catch_warnings(record=True) as theirs_warned:
        warnings.simplefilter("always")
        torchdiffeq.odeint(theirs, y0, t, method=method, options=options)
    expected = [{"callback_accept_step", "callback_reject_step"}]
    assert _unsupported(ours_warned) == _unsupported(theirs_warned) == expected
    assert ours.of("step") == _pairs(theirs.of("step"))
    assert [c[3] for c in ours.calls] == [c[3] for c in theirs.calls]
    # fixed-step methods call callback_step only, as torchdiffeq's do
    assert ours.of("accept") == ours.of("reject") == []


# --- against the solve's own statistics ----------------------------------------------


@pytest.mark.parametrize("rtol", [1e-3, 1e-8])
@pytest.mark.parametrize("t1", [2.0, -2.0], ids=["forward", "backward"])
def test_adaptive_calls_match_the_statistics(rtol, t1):
    field = Recording()
    sol = odecore.solve(
        field,
        torch.randn(3, 2, dtype=F64),
        t0=0.0,
        t1=t1,
        solver=odecore.Dopri5(),
        controller=odecore.PIDController(rtol=rtol, atol=rtol),
        dt0=1.0,  # too large at 1e-8: a rejection first
    )
    stats = sol.stats
    assert len(field.of("step")) == stats.n_steps
    assert len(field.of("accept")) == stats.n_accepted
    assert len(field.of("reject")) == stats.n_rejected
    if rtol == 1e-8:
        assert stats.n_rejected > 0
    # Each callback_step is followed by its verdict on the same step.
    verdicts = [(t0, dt) for n, t0, dt, _ in field.calls if n != "step"]
    assert field.of("step") == verdicts
    # The accepted steps tile [t0, t1] in the caller's time; dt is the step's length.
    sign = math.copysign(1.0, t1)
    accepted = field.of("accept")
    ends = [t0 + sign * dt for t0, dt in accepted]
    assert [t0 for t0, _ in accepted] == pytest.approx([0.0, *ends[:-1]], abs=1e-12)
    assert ends[-1] == pytest.approx(t1, abs=1e-12)
    assert all(dt > 0 for _, dt in field.of("step"))


def test_tuple_state_callbacks_see_the_users_structure():
    field = Recording(tuple_state=True)
    y0 = (torch.randn(3, 2, dtype=F64), torch.randn(4, dtype=F64))
    sol = odecore.solve(field, y0, t0=0.0, t1=1.0, solver=odecore.Tsit5())
    assert len(field.calls) == 2 * sol.stats.n_steps
    assert {shape for *_, shape in field.calls} == {((3, 2), (4,))}


# --- the adjoint's backward pass -----------------------------------------------------


@pytest.mark.parametrize("interface", ["odeint_adjoint", "solve"])
def test_backward_pass_calls_the_adjoint_callbacks(interface):
    field = Recording()
    y0 = torch.randn(3, 2, dtype=F64, requires_grad=True)
    if interface == "solve":
        sol = odecore.solve(field, y0, t0=0.0, t1=1.0, solver=odecore.Dopri5(),
                            gradient=odecore.Adjoint())  # fmt: skip
        ys, n_forward = sol.ys, sol.stats.n_steps
    else:
        ys = odecore.odeint_adjoint(field, y0, torch.tensor([0.0, 1.0], dtype=F64))
        n_forward = len(field.of("step"))
    forward = list(field.calls)
    ys[-1].sum().backward()
    backward = field.calls[len(forward) :]
    assert len(forward) == 2 * n_forward
    assert {name for name, *_ in backward} == {"step_adjoint", "accept_adjoint"}
    steps = field.of("step_adjoint")
    assert steps[0][0] == pytest.approx(1.0)
    # backward in time, in the caller's time, with positive lengths
    assert all(later[0] < earlier[0] for earlier, later in itertools.pairwise(steps))
    assert steps[-1][0] - steps[-1][1] == pytest.approx(0.0, abs=1e-12)
    # the backward state: (y, a, *parameter gradients)
    weight, bias = field.linear.weight.shape, field.linear.bias.shape
    assert {shape for *_, shape in backward} == {((3, 2), (3, 2), weight, bias)}


@pytest.mark.parametrize("interface", ["odeint", "odeint_adjoint"])
def test_scipy_solver_warns_that_it_calls_no_callback(interface):
    # SciPy takes the steps: none of the callbacks is called, and both libraries say so
    # for the forward solve (odecore once more for the adjoint's backward solve, whose
    # `_adjoint` callbacks SciPy does not call either).
    calls = {}
    for library in (odecore, torchdiffeq):
        field = Recording()
        y0 = torch.randn(3, 2, dtype=F64)
        params = (
            {"adjoint_params": tuple(field.parameters())} if interface == "odeint_adjoint" else {}
        )
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            getattr(library, interface)(
                field, y0, torch.tensor([0.0, 1.0], dtype=F64), method="scipy_solver",
                options={"solver": "RK45"}, **params,
            )  # fmt: skip
        calls[library.__name__] = (_unsupported(warned), field.calls)
    ours, theirs = calls["odecore"], calls["torchdiffeq"]
    assert ours[0][0] == theirs[0][0] == set(NAMES)
    assert ours[1] == theirs[1] == []


def test_an_adaptive_method_does_not_warn_about_its_callbacks():
    field = Recording()
    y0 = torch.randn(3, 2, dtype=F64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        odecore.odeint(field, y0, torch.tensor([0.0, 1.0], dtype=F64), method="dopri5")
    assert field.of("accept")


def test_no_callbacks_no_hooks():
    from odecore import _events

    assert _events.step_hooks(lambda t, y: -y, None, odecore.Dopri5(), 1.0) is None
    assert _events.step_hooks(torch.nn.Linear(2, 2), None, odecore.Dopri5(), 1.0) is None
    assert _events.step_hooks(Recording(), None, odecore.Dopri5(), 1.0) is not None
    assert set(NAMES) <= set(dir(Recording))

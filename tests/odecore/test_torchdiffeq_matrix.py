"""Every method name torchdiffeq accepts, called as its users call it: ``odeint`` and
``odeint_adjoint``, with ``step_size``, ``perturb``, an event and step callbacks.

Each call is checked against the closed form of a linear problem, and, where the
installed torchdiffeq release has the method, against torchdiffeq's answer to the same
call. Both libraries approximate the same solution, so each is held to the accuracy of
the method's order (their schemes differ where the guide's table says so: ``rk4`` is
Kutta's 3/8 rule in torchdiffeq, ``explicit_adams`` defaults to a lower order here).
"""

from __future__ import annotations

import math
import warnings

import odecore
import pytest
import torch

torchdiffeq = pytest.importorskip("torchdiffeq")
from torchdiffeq._impl.odeint import SOLVERS as RELEASE  # noqa: E402

F64 = torch.float64
ADAPTIVE = ["dopri8", "dopri5", "tsit5", "bosh3", "fehlberg2", "adaptive_heun"]
FIXED = ["euler", "midpoint", "heun2", "heun3", "rk4"]
ADAMS = ["explicit_adams", "implicit_adams", "fixed_adams"]
IMPLICIT = [
    "implicit_euler", "implicit_midpoint", "trapezoid", "radauIIA3", "radauIIA5",
    "gauss_legendre2", "gauss_legendre4", "gauss_legendre6", "gl4", "gl6", "sdirk2", "trbdf2",
]  # fmt: skip
NAMES = [*ADAPTIVE, *FIXED, *ADAMS, *IMPLICIT, "scipy_solver"]
RTOL = {"adaptive_heun": 1e-6, "fehlberg2": 1e-6, "bosh3": 1e-7}
"""The adaptive methods' ``rtol`` (``atol`` a hundredth of it): 1e-8 unless here."""
ORDER = {"euler": 1, "implicit_euler": 1, "midpoint": 2, "heun2": 2, "implicit_midpoint": 2,
         "trapezoid": 2, "gauss_legendre2": 2, "sdirk2": 2, "trbdf2": 2, "heun3": 3,
         "radauIIA3": 3}  # fmt: skip
"""The fixed-step methods' orders below 4: their tolerance at the step below."""
STEP = 0.01

A = torch.tensor([[-0.5, 1.0], [-1.0, -0.5]], dtype=F64)
T = torch.tensor([0.0, 0.5, 1.2], dtype=F64)


class Linear(torch.nn.Module):
    """``y' = A y`` (a decaying rotation), with torchdiffeq's step callback counted."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(A.clone())
        self.steps = 0

    def forward(self, t, y):
        return y @ self.a.T

    def callback_step(self, t0, y0, dt):
        self.steps += 1


def _fixed(method: str) -> bool:
    return method not in ADAPTIVE and method != "scipy_solver"


def _tolerance(method: str) -> float:
    """The error a method may make on this problem: ``STEP`` to its order (4 and above:
    the fourth), or a hundred times an adaptive method's ``rtol``. The errors measured
    are at most 0.6 of it (the event gradients of the Adams adjoint apart, see there);
    a method of a lower order than its name's fails it."""
    if not _fixed(method):
        return 100 * RTOL.get(method, 1e-8)
    return STEP ** ORDER.get(method, 4)


def _options(method: str, perturb: bool = False) -> dict:
    if method == "scipy_solver":
        return {"solver": "RK45"}
    if not _fixed(method):
        return {}
    return {"step_size": STEP, **({"perturb": True} if perturb else {})}


def _call(library, interface: str, method: str, options: dict, event_fn=None):
    """``library``'s ``interface`` on the problem: its result, the gradient with
    respect to y0 of the sum of the last state (and of the event time), and the
    field's count of steps."""
    field = Linear()
    y0 = torch.tensor([1.0, 0.0], dtype=F64, requires_grad=True)
    extra = {"adjoint_params": tuple(field.parameters())} if interface == "odeint_adjoint" else {}
    t = T if event_fn is None else T[[0, -1]]
    rtol = RTOL.get(method, 1e-8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the Adams correctors' and scipy's notes
        out = getattr(library, interface)(
            field, y0, t, method=method, options=options, rtol=rtol, atol=rtol / 100,
            **extra, **({} if event_fn is None else {"event_fn": event_fn}),
        )  # fmt: skip
        loss = out[-1].sum() if event_fn is None else out[1][-1].sum() + out[0]
        # torchdiffeq's scipy_solver gives no graph: no gradient to compare there.
        grad = torch.autograd.grad(loss, y0)[0] if loss.requires_grad else None
    return out, grad, field.steps


def _exact(t: float) -> torch.Tensor:
    return torch.matrix_exp(A * t) @ torch.tensor([1.0, 0.0], dtype=F64)


def _in_release(method: str) -> bool:
    return method in RELEASE


@pytest.mark.parametrize("perturb", [False, True], ids=["plain", "perturb"])
@pytest.mark.parametrize("interface", ["odeint", "odeint_adjoint"])
@pytest.mark.parametrize("method", NAMES)
def test_every_name_solves_and_differentiates(method, interface, perturb):
    if perturb and not _fixed(method):
        pytest.skip("perturb is an option of the fixed-grid methods")
    options = _options(method, perturb)
    ys, grad, steps = _call(odecore, interface, method, options)
    tol = _tolerance(method)
    exact = torch.stack([_exact(float(t)) for t in T])
    torch.testing.assert_close(ys, exact, rtol=0, atol=tol)
    # d sum(y(T)) / d y0 = exp(A T)^T 1
    expected = torch.matrix_exp(A * float(T[-1])).T @ torch.ones(2, dtype=F64)
    torch.testing.assert_close(grad, expected, rtol=0, atol=2 * tol)
    if method != "scipy_solver":  # scipy takes the steps and calls no callback
        assert steps > 0
    if _in_release(method):
        theirs, their_grad, their_steps = _call(torchdiffeq, interface, method, options)
        rtol = 0.0
        if method == "explicit_adams":  # torchdiffeq's order 12 is unstable at this step:
            assert not torch.allclose(theirs, exact, rtol=0, atol=1.0)  # it diverges, and
            ys, grad, _ = _call(odecore, interface, method, {**options, "max_order": 12})
            rtol = 1e-6  # so does ours at that order, to the rounding that it amplifies
        torch.testing.assert_close(ys, theirs, rtol=rtol, atol=2 * tol)
        if their_grad is not None:
            torch.testing.assert_close(grad, their_grad, rtol=rtol, atol=4 * tol)
        if _fixed(method):  # the same grid: the same steps, forward
            assert steps == their_steps


@pytest.mark.parametrize("interface", ["odeint", "odeint_adjoint"])
@pytest.mark.parametrize("method", [m for m in NAMES if m != "scipy_solver"])
def test_every_name_finds_an_event_with_its_time_gradient(method, interface):
    # y[0] of the decaying rotation falls to 0.25 at a time the closed form gives, and
    # the event time moves with y0 as the implicit function theorem says.
    level = 0.25
    t_e = _bisect(lambda t: float(_exact(t)[0]) - level, 0.0, 1.2)
    out, grad, _ = _call(
        odecore, interface, method, _options(method), lambda t, y: y[..., 0] - level
    )
    event_t, ys = out
    tol = _tolerance(method)
    assert event_t.item() == pytest.approx(t_e, abs=tol)
    assert ys[-1, 0].item() == pytest.approx(level, abs=tol)
    # d t_e / d y0 = -(d y_0(t_e) / d y0) / y_0'(t_e), and the state is that at t_e as
    # a fixed time (torchdiffeq's): d sum(y(t_e)) / d y0 = exp(A t_e)^T 1.
    phi = torch.matrix_exp(A * t_e)
    d_te = -phi[0] / (A @ _exact(t_e))[0]
    expected = d_te + phi.T @ torch.ones(2, dtype=F64)
    # The Adams adjoint steps back from the event in steps of `step_size`, the last one
    # short, where the equal-step coefficients lose their order (so do torchdiffeq's).
    short = method in ADAMS and interface == "odeint_adjoint"
    torch.testing.assert_close(grad, expected, rtol=0, atol=5e-5 if short else 2 * tol)
    if _in_release(method) and method in ADAPTIVE:
        theirs, _, _ = _call(
            torchdiffeq, interface, method, _options(method), lambda t, y: y[..., 0] - level
        )
        assert event_t.item() == pytest.approx(theirs[0].item(), abs=2 * tol)


def _bisect(c, a: float, b: float) -> float:
    for _ in range(200):
        m = 0.5 * (a + b)
        a, b = (m, b) if c(m) > 0 else (a, m)
    return 0.5 * (a + b)


def test_the_names_are_torchdiffeqs():
    # Every name of the installed release is covered here, and every one resolves.
    assert set(RELEASE) <= set(NAMES)
    for method in NAMES:
        assert math.isfinite(float(_call(odecore, "odeint", method, _options(method))[0][-1, 0]))

"""Backends chosen by the method name: ``scipy:<name>`` and ``torchdiffeq:<name>``.

scipy's solvers against closed forms and against odecore's own solvers on the same
problems, their adjoint gradients against backprop and finite differences, jumps,
failures; torchdiffeq delegation against torchdiffeq called directly; the errors
when either is missing.
"""

from __future__ import annotations

import math
import sys

import odecore
import oracles
import pytest
import torch
import torchdiffeq

F64 = torch.float64
F32 = torch.float32

SCIPY = ["RK23", "RK45", "DOP853", "Radau", "BDF", "LSODA"]
STIFF = ["LSODA", "BDF", "Radau"]

# At rtol = atol = 1e-10 on the closed-form problems of oracles.py, outputs between
# step ends included, the errors measured were RK23 2.4e-9, RK45 3.3e-10, DOP853
# 3.4e-10, Radau 6.8e-13, BDF 2.2e-8, LSODA 1.9e-9; the bounds are ~10x that.
TIGHT = 1e-10
BOUND = {
    "RK23": 3e-8,
    "RK45": 5e-9,
    "DOP853": 5e-9,
    "Radau": 1e-11,
    "BDF": 3e-7,
    "LSODA": 3e-8,
}


def scipy_odeint(name, f, y0, t, tol=TIGHT, **kwargs):
    return odecore.odeint(f, y0, t, rtol=tol, atol=tol, method=f"scipy:{name}", **kwargs)


class Counting:
    """Counts the calls of a vector field and records the dtypes it sees."""

    def __init__(self, f):
        self.f = f
        self.calls = 0
        self.dtypes: set[tuple[torch.dtype, torch.dtype, int]] = set()

    def __call__(self, t, y):
        self.calls += 1
        first = y[0] if isinstance(y, tuple) else y
        self.dtypes.add((t.dtype, first.dtype, t.dim()))
        return self.f(t, y)


class MLPField(torch.nn.Module):
    """A small smooth time-dependent field with parameters."""

    def __init__(self, dim: int = 2, hidden: int = 6) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(dim, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, dim)
        ).to(F64)

    def forward(self, t, y):
        return self.net(y) * torch.cos(t)


class TupleField(torch.nn.Module):
    """A damped oscillator on a ``(q, p)`` tuple state with two parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.omega = torch.nn.Parameter(torch.tensor(1.3, dtype=F64))
        self.damping = torch.nn.Parameter(torch.tensor(0.2, dtype=F64))

    def forward(self, t, state):
        q, p = state
        return p, -(self.omega**2) * q - self.damping * p


def gradients(loss_fn, tensors):
    for x in tensors:
        x.grad = None
    loss_fn().backward()
    return [x.grad.clone() for x in tensors]


# --- scipy: forward ---------------------------------------------------------------------


@pytest.mark.parametrize("prob", oracles.CLOSED_FORM, ids=repr)
@pytest.mark.parametrize("name", SCIPY)
def test_scipy_matches_closed_form(name, prob):
    t = prob.times(21)
    ys = scipy_odeint(name, prob.f, prob.y0, t)
    assert ys.shape == (21, *prob.y0.shape)
    assert ys.dtype == F64
    assert torch.equal(ys[0], prob.y0)
    torch.testing.assert_close(ys, prob.exact(t, prob.y0), rtol=BOUND[name], atol=BOUND[name])


@pytest.mark.parametrize("prob", oracles.NONLINEAR, ids=repr)
@pytest.mark.parametrize("name", SCIPY)
def test_scipy_matches_odecore_dopri8(name, prob):
    t = prob.times(9)
    expected = odecore.odeint(prob.f, prob.y0, t, rtol=1e-13, atol=1e-13, method="dopri8")
    ys = scipy_odeint(name, prob.f, prob.y0, t)
    # The nonlinear problems are less forgiving than the closed-form ones.
    torch.testing.assert_close(ys, expected, rtol=10 * BOUND[name], atol=10 * BOUND[name])


@pytest.mark.parametrize("name", SCIPY)
def test_scipy_and_odecore_dopri5_agree_at_a_moderate_tolerance(name):
    prob = oracles.van_der_pol
    t = prob.times(5)
    ours = odecore.odeint(prob.f, prob.y0, t, rtol=1e-6, atol=1e-6, method="dopri5")
    theirs = scipy_odeint(name, prob.f, prob.y0, t, tol=1e-6)
    torch.testing.assert_close(theirs, ours, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", SCIPY)
def test_scipy_tuple_state(name):
    q0 = torch.tensor([[1.0], [0.5]], dtype=F64)
    p0 = torch.tensor([[0.0], [0.3]], dtype=F64)
    t = oracles.harmonic.times(7)
    qs, ps = scipy_odeint(name, oracles.harmonic_tuple_f, (q0, p0), t)
    assert qs.shape == ps.shape == (7, 2, 1)
    expected = oracles.harmonic.exact(t, torch.cat([q0, p0], dim=-1))
    torch.testing.assert_close(qs, expected[..., :1], rtol=BOUND[name], atol=BOUND[name])
    torch.testing.assert_close(ps, expected[..., 1:], rtol=BOUND[name], atol=BOUND[name])


@pytest.mark.parametrize("name", SCIPY)
def test_scipy_backward_in_time(name):
    prob = oracles.linear_system
    t = torch.linspace(prob.t1, prob.t0, 6, dtype=F64)
    y_end = prob.exact(t[:1], prob.y0)[0]
    ys = scipy_odeint(name, prob.f, y_end, t)
    torch.testing.assert_close(ys, prob.exact(t, prob.y0), rtol=BOUND[name], atol=BOUND[name])


@pytest.mark.parametrize("name", SCIPY)
def test_scipy_keeps_float32_and_calls_the_field_in_float32(name):
    field = Counting(oracles.decay.f)
    y0 = oracles.decay.y0_as(F32)
    t = oracles.decay.times(5, F32)
    ys = scipy_odeint(name, field, y0, t, tol=1e-6)
    assert ys.dtype == F32
    assert field.dtypes == {(F32, F32, 0)}
    torch.testing.assert_close(ys, oracles.decay.exact(t, y0), rtol=1e-4, atol=1e-4)


def prothero_robinson(t, y):
    """``y' = -1e4 (y - cos t) - sin t``: stiff, with ``y = cos t`` from ``y(0) = 1``."""
    return -1e4 * (y - torch.cos(t)) - torch.sin(t)


@pytest.fixture(scope="module")
def explicit_nfe():
    field = Counting(prothero_robinson)
    t = torch.linspace(0.0, 2.0, 5, dtype=F64)
    odecore.odeint(field, torch.ones(1, dtype=F64), t, rtol=1e-6, atol=1e-8, method="dopri5")
    return field.calls


@pytest.mark.parametrize("name", STIFF)
def test_scipy_stiff_solvers_need_far_fewer_evaluations(name, explicit_nfe):
    field = Counting(prothero_robinson)
    t = torch.linspace(0.0, 2.0, 5, dtype=F64)
    ys = odecore.odeint(
        field, torch.ones(1, dtype=F64), t, rtol=1e-6, atol=1e-8, method=f"scipy:{name}"
    )
    torch.testing.assert_close(ys[:, 0], torch.cos(t), rtol=0, atol=1e-5)
    # Measured: dopri5 36,000 evaluations (its steps are held back by stability),
    # LSODA 200, BDF 110, Radau 80 (Jacobians by finite differences included).
    assert 50 * field.calls < explicit_nfe


@pytest.mark.parametrize("name", SCIPY)
def test_scipy_jump_t_integrates_piecewise_constant_field_exactly(name):
    def weights(t, y):  # y(1) = 0.5 * 1 + 0.5 * (-3)
        return torch.where(t < 0.5, 1.0, -3.0).to(y.dtype).expand_as(y)

    t = torch.tensor([0.0, 0.25, 0.5, 1.0], dtype=F64)
    ys = scipy_odeint(name, weights, torch.zeros(1, dtype=F64), t, options={"jump_t": [0.5]})
    expected = torch.tensor([[0.0], [0.25], [0.5], [-1.0]], dtype=F64)
    torch.testing.assert_close(ys, expected, rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", ["RK45", "LSODA"])
def test_scipy_jump_t_backward_in_time(name):
    def weights(t, y):
        return torch.where(t < 0.5, 1.0, -3.0).to(y.dtype).expand_as(y)

    t = torch.tensor([1.0, 0.0], dtype=F64)
    ys = scipy_odeint(name, weights, torch.zeros(1, dtype=F64), t, options={"jump_t": [0.5]})
    torch.testing.assert_close(ys[-1], torch.tensor([1.0], dtype=F64), rtol=0, atol=1e-14)


def test_scipy_options_first_and_max_step():
    field = Counting(oracles.decay.f)
    t = torch.tensor([0.0, 1.0], dtype=F64)
    scipy_odeint("RK45", field, oracles.decay.y0, t, tol=1e-3)
    loose = field.calls
    field.calls = 0
    ys = scipy_odeint(
        "RK45", field, oracles.decay.y0, t, tol=1e-3, options={"max_step": 0.01, "first_step": 1e-3}
    )
    assert field.calls >= 6 * 100 > loose  # at least 100 steps of six evaluations
    torch.testing.assert_close(ys, oracles.decay.exact(t, oracles.decay.y0), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["RK45", "BDF"])
def test_scipy_step_t(name):
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64)
    ys = scipy_odeint(name, oracles.decay.f, oracles.decay.y0, t, options={"step_t": [0.3, 0.7]})
    expected = oracles.decay.exact(t, oracles.decay.y0)
    torch.testing.assert_close(ys, expected, rtol=BOUND[name], atol=BOUND[name])


def test_scipy_lsoda_min_step():
    from odecore._backends import lsoda_ignores_min_step

    if lsoda_ignores_min_step():
        pytest.skip("this SciPy's LSODA ignores min_step: odecore refuses it")
    t = torch.tensor([0.0, 1.0], dtype=F64)
    ys = scipy_odeint("LSODA", oracles.decay.f, oracles.decay.y0, t, options={"min_step": 1e-6})
    torch.testing.assert_close(ys, oracles.decay.exact(t, oracles.decay.y0), rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("method", ["scipy:LSODA", "scipy_solver"])
def test_scipy_lsoda_min_step_zero_is_no_bound(method):
    # torchdiffeq's default, and odecore's adaptive methods' and `scipy_solver`'s "none";
    # `scipy:LSODA` refused it ("must be a positive number").
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64)
    extra = {"solver": "LSODA"} if method == "scipy_solver" else {}
    ys = odecore.odeint(oracles.decay.f, oracles.decay.y0, t, method=method,
                        options={"min_step": 0, **extra})  # fmt: skip
    assert torch.equal(
        ys, odecore.odeint(oracles.decay.f, oracles.decay.y0, t, method="scipy:LSODA")
    )


@pytest.mark.parametrize("method", ["scipy:LSODA", "scipy_solver"])
def test_scipy_lsoda_min_step_bounds_the_steps_or_is_refused(method):
    # SciPy 1.17's LSODA ignores min_step (scipy/scipy#25827): passed on, it would leave
    # the steps as they are without it. A lower bound of a quarter of the span at a
    # tight tolerance either changes the steps (or fails the solve) or is refused.
    t = torch.tensor([0.0, 1.0], dtype=F64)
    options = (
        {"min_step": 0.25} if method == "scipy:LSODA" else {"min_step": 0.25, "solver": "LSODA"}
    )
    bounded = Counting(oracles.decay.f)
    try:
        odecore.odeint(
            bounded, oracles.decay.y0, t, rtol=TIGHT, atol=TIGHT, method=method, options=options
        )
    except odecore.ConfigurationError as error:
        assert "ignores it (scipy/scipy#25827)" in str(error)
        return
    except odecore.SolverError:
        return  # the bound holds, and no step that long meets the tolerance
    free = Counting(oracles.decay.f)
    scipy_odeint("LSODA", free, oracles.decay.y0, t)
    assert bounded.calls != free.calls


# --- scipy: failures ------------------------------------------------------------------------


def blow_up(t, y):  # y' = y**2, y(0) = 1: y = 1 / (1 - t) is infinite at t = 1
    return y**2


@pytest.mark.parametrize("name", ["RK23", "RK45", "DOP853", "Radau", "BDF"])
def test_scipy_failure_raises_solver_error_with_scipys_message(name):
    t = torch.tensor([0.0, 2.0], dtype=F64)
    with pytest.raises(
        odecore.SolverError,
        match=rf"stopped at t = [\d.]+ before reaching t1 = 2\.0: the step size underflowed.*"
        rf"scipy's {name} says: Required step size is less than spacing between numbers\.",
    ) as info:
        scipy_odeint(name, blow_up, torch.ones(1, dtype=F64), t, tol=1e-8)
    assert info.value.status == odecore.Status.DT_UNDERFLOW
    assert info.value.t == pytest.approx(1.0, abs=1e-4)


def test_scipy_step_budget():
    t = torch.tensor([0.0, 2.0], dtype=F64)
    with pytest.raises(odecore.SolverError, match=r"maximum number of steps reached") as info:
        scipy_odeint("LSODA", blow_up, torch.ones(1, dtype=F64), t, options={"max_num_steps": 50})
    assert info.value.status == odecore.Status.MAX_STEPS_REACHED
    assert 0.0 < info.value.t < 1.0


@pytest.mark.filterwarnings("ignore:At least one element of `rtol` is too small")
def test_scipy_lsoda_failure_says_why():
    t = torch.tensor([0.0, 2.0], dtype=F64)
    with pytest.raises(
        odecore.SolverError,
        match=r"the backend's solver failed .* scipy's LSODA says: Excess accuracy requested",
    ) as info:
        odecore.odeint(
            blow_up, torch.ones(1, dtype=F64), t, rtol=1e-20, atol=1e-300, method="scipy:LSODA"
        )
    assert info.value.status == odecore.Status.BACKEND_FAILED
    assert "BACKEND_FAILED" in repr(odecore.Status.BACKEND_FAILED)


@pytest.mark.parametrize("name", SCIPY)
def test_scipy_nonfinite_field(name):
    def nan_after_half(t, y):
        return y * torch.where(t < 0.5, 1.0, math.nan)

    t = torch.tensor([0.0, 0.25, 1.0], dtype=F64)
    with pytest.raises(odecore.SolverError, match=r"non-finite") as info:
        scipy_odeint(name, nan_after_half, torch.ones(1, dtype=F64), t, tol=1e-6)
    assert info.value.status == odecore.Status.NONFINITE
    assert info.value.t <= 0.5


def test_scipy_refuses_a_later_result_of_another_dtype():
    """Only the field's first result was checked: a float32 one after t = 0.5 lost its
    precision in a float64 solve, silently."""
    with pytest.raises(TypeError, match=r"`func` returned dtype torch.float32, but the state"):
        scipy_odeint(
            "RK45",
            lambda t, y: (-y).float() if t > 0.5 else -y,
            torch.ones(1, dtype=F64),
            torch.tensor([0.0, 1.0], dtype=F64),
        )


def test_scipy_errors_in_the_field_propagate():
    with pytest.raises(ValueError, match=r"`func` returned shape \(2,\), but the state"):
        scipy_odeint(
            "BDF",
            lambda t, y: torch.ones(2, dtype=F64),
            torch.ones(1, dtype=F64),
            torch.tensor([0.0, 1.0], dtype=F64),
        )


# --- scipy: gradients through the adjoint ------------------------------------------------


@pytest.mark.parametrize("adjoint", [False, True], ids=["odeint", "odeint_adjoint"])
@pytest.mark.parametrize("name", SCIPY)
def test_scipy_gradients_match_backprop(name, adjoint):
    field = MLPField()
    y0 = torch.randn(3, 2, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 0.5, 1.5], dtype=F64)
    tensors = [y0, *field.parameters()]
    backprop = gradients(
        lambda: odecore.odeint(field, y0, t, rtol=1e-12, atol=1e-12, method="dopri8").pow(2).sum(),
        tensors,
    )
    entry = odecore.odeint_adjoint if adjoint else odecore.odeint
    through_scipy = gradients(
        lambda: entry(field, y0, t, rtol=TIGHT, atol=TIGHT, method=f"scipy:{name}").pow(2).sum(),
        tensors,
    )
    bound = 30 * BOUND[name]
    for ours, theirs in zip(backprop, through_scipy):
        torch.testing.assert_close(theirs, ours, rtol=bound, atol=bound)


def directional_fd(loss_fn, tensor, direction, eps=1e-5):
    with torch.no_grad():
        tensor += eps * direction
        up = loss_fn().item()
        tensor -= 2 * eps * direction
        down = loss_fn().item()
        tensor += eps * direction
    return (up - down) / (2 * eps)


@pytest.mark.parametrize("name", ["RK45", "Radau", "LSODA"])
def test_scipy_gradients_match_finite_differences(name):
    field = MLPField()
    y0 = torch.randn(3, 2, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 1.0], dtype=F64)

    def exact_loss():  # a tight solve of odecore's own, for the finite differences
        return odecore.odeint(field, y0, t, rtol=1e-13, atol=1e-13, method="dopri8")[-1].sum()

    weight = field.net[0].weight
    grads = gradients(lambda: scipy_odeint(name, field, y0, t)[-1].sum(), [y0, weight])
    for tensor, grad in zip([y0, weight], grads):
        direction = torch.randn_like(tensor)
        fd = directional_fd(exact_loss, tensor, direction)
        assert (grad * direction).sum().item() == pytest.approx(fd, rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("name", ["DOP853", "BDF"])
def test_scipy_gradients_tuple_state(name):
    field = TupleField()
    q0 = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)
    p0 = torch.tensor([0.0, -0.2], dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 1.0, 2.0], dtype=F64)
    tensors = [q0, p0, field.omega, field.damping]

    def loss(method, tol):
        qs, ps = odecore.odeint_adjoint(field, (q0, p0), t, rtol=tol, atol=tol, method=method)
        return (qs**2).sum() + ps[-1].sum()

    backprop = gradients(lambda: loss("dopri8", 1e-12), tensors)
    through_scipy = gradients(lambda: loss(f"scipy:{name}", TIGHT), tensors)
    bound = 30 * BOUND[name]
    for ours, theirs in zip(backprop, through_scipy):
        torch.testing.assert_close(theirs, ours, rtol=bound, atol=bound)
    # and against finite differences of a tight solve
    fd = directional_fd(lambda: loss("dopri8", 1e-13), field.omega, torch.tensor(1.0, dtype=F64))
    assert through_scipy[2].item() == pytest.approx(fd, rel=1e-6)


def test_scipy_gradients_closed_form_with_time():
    # y' = a y: dy(T)/da = T y0 exp(aT), dy(T)/dy0 = exp(aT), dy(T)/dT = a y(T).
    a = torch.nn.Parameter(torch.tensor(-0.7, dtype=F64))
    y0 = torch.tensor([1.5], dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 2.0], dtype=F64, requires_grad=True)
    ys = odecore.odeint_adjoint(
        lambda t, y: a * y,
        y0,
        t,
        rtol=1e-12,
        atol=1e-12,
        method="scipy:Radau",
        adjoint_params=(a,),
    )
    ys[-1].sum().backward()
    e = math.exp(-0.7 * 2.0)
    assert a.grad.item() == pytest.approx(2.0 * 1.5 * e, rel=1e-9)
    assert y0.grad.item() == pytest.approx(e, rel=1e-9)
    assert t.grad[1].item() == pytest.approx(-0.7 * 1.5 * e, rel=1e-9)


@pytest.mark.parametrize("entry", [odecore.odeint, odecore.odeint_adjoint])
def test_scipy_gradients_reach_a_tensor_a_plain_function_closes_over(entry):
    # y' = a y: dy(T)/da = T y0 exp(aT), found in the forward evaluations' graphs.
    a = torch.tensor(-0.7, dtype=F64, requires_grad=True)
    ys = entry(lambda t, y: a * y, torch.tensor([1.5], dtype=F64),
               torch.tensor([0.0, 2.0], dtype=F64), rtol=1e-12, atol=1e-12,
               method="scipy:Radau")  # fmt: skip
    ys[-1].sum().backward()
    assert a.grad.item() == pytest.approx(2.0 * 1.5 * math.exp(-1.4), rel=1e-9)


@pytest.mark.parametrize(
    ("method", "adjoint_method"), [("scipy:RK45", "dopri5"), ("dopri5", "scipy:LSODA")]
)
def test_scipy_mixed_with_odecore_in_the_adjoint(method, adjoint_method):
    field = MLPField()
    y0 = torch.randn(3, 2, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 1.0], dtype=F64)
    tensors = [y0, *field.parameters()]
    reference = gradients(
        lambda: odecore.odeint(field, y0, t, rtol=1e-12, atol=1e-12, method="dopri8").sum(),
        tensors,
    )
    mixed = gradients(
        lambda: odecore.odeint_adjoint(
            field, y0, t, rtol=TIGHT, atol=TIGHT, method=method, adjoint_method=adjoint_method
        ).sum(),
        tensors,
    )
    for ours, theirs in zip(reference, mixed):
        torch.testing.assert_close(theirs, ours, rtol=1e-7, atol=1e-7)


class PiecewiseWeights(torch.nn.Module):
    """``f(t, y) = w[k]`` on the k-th quarter of ``[0, 1]``: ``y(1) = y0 + sum(w) / 4``."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=F64))

    def forward(self, t, y):
        k = torch.clamp((t * 4).floor().long(), 0, 3)
        return self.w[k] * torch.ones_like(y)


@pytest.mark.parametrize("name", SCIPY)
def test_scipy_adjoint_restarts_at_jumps(name):
    field = PiecewiseWeights()
    y0 = torch.zeros(2, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 1.0], dtype=F64, requires_grad=True)
    ys = scipy_odeint(name, field, y0, t, options={"jump_t": [0.25, 0.5, 0.75]})
    torch.testing.assert_close(ys[-1], torch.full((2,), 2.5 / 4, dtype=F64), rtol=0, atol=1e-14)
    ys[-1].sum().backward()
    torch.testing.assert_close(field.w.grad, torch.full((4,), 0.5, dtype=F64), rtol=0, atol=1e-12)
    torch.testing.assert_close(y0.grad, torch.ones(2, dtype=F64), rtol=0, atol=1e-12)
    torch.testing.assert_close(t.grad[1], torch.tensor(2 * 3.0, dtype=F64), rtol=0, atol=1e-12)


def test_scipy_backward_failure_raises_in_backward():
    def nan_in_backward(t, y):  # fine forward, NaN in the adjoint's solve (y needs grad)
        return -y * (math.nan if y.requires_grad else 1.0)

    y0 = torch.ones(1, dtype=F64, requires_grad=True)
    ys = scipy_odeint("RK45", nan_in_backward, y0, torch.tensor([0.0, 1.0], dtype=F64))
    with pytest.raises(
        odecore.SolverError, match=r"the adjoint's backward solve stopped .* non-finite.*RK45"
    ):
        ys.sum().backward()


# --- scipy: arguments --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "options", "match"),
    [
        (
            "scipy:RK45",
            {"safety": 0.8},
            r"Unknown option\(s\) \['safety'\] for method "
            r"'scipy:RK45'; known options: first_step, max_step, jump_t, step_t, max_num_steps\.",
        ),
        ("scipy:BDF", {"min_step": 1e-3}, r"Unknown option\(s\) \['min_step'\]"),
        ("scipy:LSODA", {"norm": None}, r"known options: first_step, max_step, min_step, "),
        ("scipy:RK45", {"max_step": -1.0}, r"`max_step` must be a positive number, got -1\.0"),
        ("scipy:LSODA", {"min_step": -1.0}, r"`min_step` must be a finite number >= 0, got -1\.0"),
        ("scipy:rk45", {}, r"Unknown `method` 'scipy:rk45'; known methods: .* scipy:RK45"),
        ("scipy:", {}, r"Unknown `method` 'scipy:'"),
    ],
)
def test_scipy_argument_errors(method, options, match):
    with pytest.raises(ValueError, match=match):
        odecore.odeint(
            lambda t, y: -y, torch.ones(1), torch.tensor([0.0, 1.0]), method=method, options=options
        )


def test_scipy_seminorm_is_an_error():
    with pytest.raises(ValueError, match=r"seminorm'}` is not available with SciPy's methods"):
        odecore.odeint_adjoint(
            lambda t, y: -y,
            torch.ones(1),
            torch.tensor([0.0, 1.0]),
            method="scipy:LSODA",
            adjoint_options={"norm": "seminorm"},
        )


def test_unknown_method_lists_the_backend_families():
    with pytest.raises(ValueError, match=r"Unknown `method` 'rk45'") as info:
        odecore.odeint(lambda t, y: -y, torch.ones(1), torch.tensor([0.0, 1.0]), method="rk45")
    message = str(info.value)
    assert all(f"scipy:{name}" in message for name in SCIPY)
    assert "torchdiffeq:<name> (any torchdiffeq method)" in message


def test_missing_scipy(monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.integrate", None)
    with pytest.raises(
        ImportError,
        match=r"method 'scipy:LSODA' needs SciPy, an optional dependency of odecore; install "
        r"it with `pip install odecore\[scipy\]`\.",
    ):
        odecore.odeint(
            lambda t, y: -y, torch.ones(1), torch.tensor([0.0, 1.0]), method="scipy:LSODA"
        )


# --- torchdiffeq ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "options"),
    [
        ("dopri5", None),
        ("bosh3", None),
        ("rk4", {"step_size": 0.1}),
        ("dopri5", {"jump_t": torch.tensor([0.3])}),
    ],
    ids=["dopri5", "bosh3", "rk4-step", "dopri5-jump"],
)
def test_torchdiffeq_delegation_is_bit_identical(method, options):
    field = MLPField()
    y0 = torch.randn(3, 2, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64)
    tensors = [y0, *field.parameters()]
    kw = {"rtol": 1e-6, "atol": 1e-8, "options": options}
    direct = torchdiffeq.odeint(field, y0, t, method=method, **kw)
    ours = odecore.odeint(field, y0, t, method=f"torchdiffeq:{method}", **kw)
    assert torch.equal(ours, direct)
    g_direct = gradients(
        lambda: torchdiffeq.odeint(field, y0, t, method=method, **kw).sum(), tensors
    )
    g_ours = gradients(
        lambda: odecore.odeint(field, y0, t, method=f"torchdiffeq:{method}", **kw).sum(), tensors
    )
    assert all(torch.equal(a, b) for a, b in zip(g_ours, g_direct))


def test_torchdiffeq_adjoint_delegation_is_bit_identical():
    field = MLPField()
    y0 = torch.randn(3, 2, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64, requires_grad=True)
    tensors = [y0, t, *field.parameters()]
    kw = {
        "rtol": 1e-6,
        "atol": 1e-8,
        "adjoint_rtol": 1e-7,
        "adjoint_atol": 1e-9,
        "adjoint_options": {"norm": "seminorm"},
    }

    def direct():
        ys = torchdiffeq.odeint_adjoint(field, y0, t, method="dopri5", adjoint_method="bosh3", **kw)
        return ys.pow(2).sum()

    def ours():
        ys = odecore.odeint_adjoint(
            field, y0, t, method="torchdiffeq:dopri5", adjoint_method="torchdiffeq:bosh3", **kw
        )
        return ys.pow(2).sum()

    assert torch.equal(ours(), direct())
    assert all(
        torch.equal(a, b) for a, b in zip(gradients(ours, tensors), gradients(direct, tensors))
    )


def test_torchdiffeq_tuple_state_is_bit_identical():
    q0, p0 = torch.ones(2, dtype=F64), torch.zeros(2, dtype=F64)
    t = torch.linspace(0.0, 1.0, 4, dtype=F64)
    direct = torchdiffeq.odeint(oracles.harmonic_tuple_f, (q0, p0), t, method="dopri5")
    ours = odecore.odeint(oracles.harmonic_tuple_f, (q0, p0), t, method="torchdiffeq:dopri5")
    assert all(torch.equal(a, b) for a, b in zip(ours, direct))


@pytest.mark.parametrize("entry", [odecore.odeint, odecore.odeint_adjoint])
@pytest.mark.parametrize("method", ["torchdiffeq:dopri5", "dopri5"])
def test_a_tuple_state_of_mixed_dtypes_is_refused(entry, method):
    # torchdiffeq promotes every member to one dtype: a float32 member came back float64.
    y0 = (torch.ones(2, dtype=F64), torch.ones(3, dtype=torch.float32))
    with pytest.raises(TypeError, match=r"`y0\[1\]` has dtype torch\.float32 on cpu, but"):
        entry(lambda t, y: (-y[0], -y[1]), y0, torch.tensor([0.0, 1.0], dtype=F64), method=method)


# At rtol = atol = 1e-8 on Van der Pol, the two differ by 1.8e-8 (dopri5), 2.1e-6
# (bosh3) and 2.4e-6 (dopri8): torchdiffeq's outputs between steps, read off
# lower-order interpolants, are the less accurate (odecore's errors: 1.1e-8, 4.2e-8,
# 5.5e-10).
@pytest.mark.parametrize(("method", "bound"), [("dopri5", 1e-7), ("bosh3", 2e-5), ("dopri8", 2e-5)])
def test_torchdiffeq_agrees_with_odecore(method, bound):
    prob = oracles.van_der_pol
    t = prob.times(5)
    kw = {"rtol": 1e-8, "atol": 1e-8}
    ours = odecore.odeint(prob.f, prob.y0, t, method=method, **kw)
    theirs = odecore.odeint(prob.f, prob.y0, t, method=f"torchdiffeq:{method}", **kw)
    torch.testing.assert_close(theirs, ours, rtol=bound, atol=bound)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"y0": torch.ones(2, dtype=torch.long)}, TypeError, r"`y0` has dtype torch\.int64"),
        ({"y0": (torch.ones(1), torch.tensor([math.nan]))}, ValueError, r"`y0\[1\]` holds non"),
        ({"t": torch.tensor([0.0, 1.0, 0.5])}, ValueError, r"`t` must be strictly increasing"),
        ({"rtol": -1.0}, ValueError, r"`rtol` must be a positive number, got -1\.0"),
        ({"atol": "1e-6"}, TypeError, r"`atol` must be a number, got str"),
        ({"method": "torchdiffeq:rk5"}, ValueError, r"Invalid method"),
    ],
)
def test_torchdiffeq_arguments_are_validated(kwargs, error, match):
    args = {
        "func": lambda t, y: y,
        "y0": torch.ones(2),
        "t": torch.tensor([0.0, 1.0]),
        "method": "torchdiffeq:dopri5",
        **kwargs,
    }
    with pytest.raises(error, match=match):
        odecore.odeint(**args)


@pytest.mark.parametrize(
    ("entry", "where", "options"),
    [
        ("odeint", "options", {"gradient": "adjoint"}),
        ("odeint", "options", {"compile": True}),
        ("odeint_adjoint", "options", {"compile": True}),
        ("odeint_adjoint", "adjoint_options", {"compile": "stepped"}),
    ],
)
def test_torchdiffeq_refuses_odecores_own_options(entry, where, options):
    # torchdiffeq warned of an unexpected argument and solved by backpropagation,
    # uncompiled: the gradient method or compilation asked for was not the one run.
    args = (MLPField(), torch.ones(3, 2, dtype=F64), torch.tensor([0.0, 1.0], dtype=F64))
    with pytest.warns(UserWarning, match="Unexpected arguments"):
        torchdiffeq.odeint(*args, method="dopri5", options=options)
    key = next(iter(options))
    with pytest.raises(ValueError, match=rf"`{where}` \['{key}'\] are odecore's, for its own"):
        getattr(odecore, entry)(*args, method="torchdiffeq:dopri5", **{where: options})


@pytest.mark.parametrize(
    ("method", "adjoint_method", "match"),
    [
        ("torchdiffeq:dopri5", "dopri5", r"`adjoint_method` must be a torchdiffeq method too"),
        ("dopri5", "torchdiffeq:dopri5", r"needs a torchdiffeq `method` as well"),
        ("scipy:LSODA", "torchdiffeq:dopri5", r"needs a torchdiffeq `method` as well"),
    ],
)
def test_torchdiffeq_cannot_be_mixed(method, adjoint_method, match):
    with pytest.raises(ValueError, match=match):
        odecore.odeint_adjoint(
            torch.nn.Linear(1, 1),
            torch.ones(1),
            torch.tensor([0.0, 1.0]),
            method=method,
            adjoint_method=adjoint_method,
        )


@pytest.mark.parametrize("adjoint", [False, True], ids=["odeint", "odeint_adjoint"])
def test_missing_torchdiffeq(monkeypatch, adjoint):
    monkeypatch.setitem(sys.modules, "torchdiffeq", None)
    entry = odecore.odeint_adjoint if adjoint else odecore.odeint
    with pytest.raises(
        ImportError,
        match=r"method 'torchdiffeq:dopri5' needs torchdiffeq, an optional dependency of "
        r"odecore; install it with `pip install odecore\[torchdiffeq\]`\.",
    ):
        entry(
            torch.nn.Linear(1, 1),
            torch.ones(1),
            torch.tensor([0.0, 1.0]),
            method="torchdiffeq:dopri5",
        )


@pytest.mark.parametrize(
    ("func", "t1", "options", "status", "said"),
    [
        (lambda t, y: y**2, 2.0, None, odecore.Status.DT_UNDERFLOW, r"underflow in dt"),
        (lambda t, y: -y, 100.0, {"max_num_steps": 5}, odecore.Status.MAX_STEPS_REACHED,
         r"max_num_steps exceeded \(5>=5\)"),
    ],
    ids=["underflow", "max_num_steps"],
)  # fmt: skip
@pytest.mark.parametrize("adjoint", [False, True], ids=["odeint", "odeint_adjoint"])
def test_torchdiffeq_failure_is_a_solver_error(func, t1, options, status, said, adjoint):
    # torchdiffeq fails with an AssertionError: odecore's SolverError with the status
    # that says so, quoting torchdiffeq's message, the assertion its cause.
    t = torch.tensor([0.0, t1], dtype=F64)
    y0 = torch.ones(1, dtype=F64, requires_grad=adjoint)
    kw = {"method": "torchdiffeq:dopri5", "options": options}
    with pytest.raises(odecore.SolverError, match=said) as info:
        if adjoint:
            odecore.odeint_adjoint(func, y0, t, adjoint_params=(), **kw)
        else:
            odecore.odeint(func, y0, t, **kw)
    error = info.value
    assert error.status is status
    assert str(error).startswith(
        f"torchdiffeq's dopri5 stopped before reaching t1 = {t1!r} (it does not say at which t): "
        f"{status}. torchdiffeq says: "
    )
    assert math.isnan(error.t)
    assert isinstance(error.__cause__, AssertionError)


def test_an_assertion_in_the_field_is_not_torchdiffeqs():
    def field(t, y):
        assert float(t) < 0.5, "the field's own check"
        return -y

    with pytest.raises(AssertionError, match="the field's own check"):
        odecore.odeint(field, torch.ones(1, dtype=F64), torch.tensor([0.0, 1.0], dtype=F64),
                       method="torchdiffeq:dopri5")  # fmt: skip


CLOSED_OVER = torch.tensor(0.5, dtype=F64, requires_grad=True)


@pytest.mark.parametrize(
    ("y0", "t", "func", "wanted"),
    [
        (torch.ones(2, dtype=F64, requires_grad=True), None, None, r"`y0`"),
        ((torch.ones(2, dtype=F64), torch.ones(1, dtype=F64, requires_grad=True)), None,
         lambda t, y: (-y[0], -y[1]), r"`y0\[1\]`"),
        (torch.ones(2, dtype=F64), torch.tensor([0.0, 1.0], dtype=F64, requires_grad=True),
         None, r"`t`"),
        (torch.ones(2, dtype=F64), None, lambda t, y: -CLOSED_OVER * y,
         r"a tensor that `func` reads"),
        (torch.ones(2, dtype=F64), None, MLPField().double(), r"a tensor that `func` reads"),
    ],
    ids=["y0", "tuple-y0", "t", "closure", "module"],
)  # fmt: skip
def test_torchdiffeq_scipy_solver_refuses_a_gradient_it_would_drop(y0, t, func, wanted):
    # torchdiffeq's scipy_solver builds its solution from NumPy arrays: it has no graph,
    # so y0's, t's and the field's gradients through it were None without a word.
    t = torch.tensor([0.0, 1.0], dtype=F64) if t is None else t
    func = (lambda t, y: -y) if func is None else func
    direct = torchdiffeq.odeint(func, y0, t, method="scipy_solver")
    assert not any(ys.requires_grad for ys in (direct if isinstance(direct, tuple) else [direct]))
    with pytest.raises(ValueError, match=rf"returns a solution without a gradient .*{wanted} "):
        odecore.odeint(func, y0, t, method="torchdiffeq:scipy_solver")
    with torch.no_grad():  # without a gradient to lose, it runs
        odecore.odeint(func, y0, t, method="torchdiffeq:scipy_solver")


def test_torchdiffeq_scipy_solver_without_a_gradient_is_torchdiffeqs():
    y0, t = torch.ones(2, dtype=F64), torch.tensor([0.0, 0.5, 1.0], dtype=F64)
    ours = odecore.odeint(lambda t, y: -y, y0, t, method="torchdiffeq:scipy_solver")
    direct = torchdiffeq.odeint(lambda t, y: -y, y0, t, method="scipy_solver")
    assert torch.equal(ours, direct)

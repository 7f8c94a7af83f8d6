"""Fixed-grid Adams methods (torchdiffeq's ``explicit_adams``, ``implicit_adams``,
``fixed_adams``): coefficients, convergence order, agreement with torchdiffeq,
gradients, and errors on bad options."""

from __future__ import annotations

import math
import re
import warnings
from fractions import Fraction

import odecore
import oracles
import pytest
import torch
from odecore._adams import (
    AdamsBashforthMoulton,
    adams_for,
    bashforth_coefficients,
    moulton_coefficients,
)
from test_fixed import fitted_order

torchdiffeq = pytest.importorskip("torchdiffeq")

F64 = torch.float64
ADAMS = ["explicit_adams", "implicit_adams", "fixed_adams"]
# cos_growth is left out: its explicit error is still pre-asymptotic on these grids.
PROBLEMS = [oracles.decay, oracles.linear_system, oracles.harmonic]


def global_error(prob: oracles.Problem, method: str, t: torch.Tensor, options: dict) -> float:
    """The largest error at ``t``, with the corrector iterated to convergence (tight
    ``rtol``/``atol`` and enough ``max_iters``): the error is then the scheme's."""
    if method != "explicit_adams":
        options = {"max_iters": 30, **options}
    y0 = prob.y0_as(F64)
    ys = odecore.odeint(prob.f, y0, t, method=method, options=options, rtol=1e-12, atol=1e-12)
    return float((ys - prob.exact(t, y0)).abs().max())


def _from_their_table(table: torch.Tensor) -> list[float]:
    return [float(x) for x in table]


def test_coefficients_are_the_classical_ones():
    assert bashforth_coefficients(1) == (1,)
    assert bashforth_coefficients(2) == (Fraction(3, 2), Fraction(-1, 2))
    assert [c * 24 for c in bashforth_coefficients(4)] == [55, -59, 37, -9]
    assert moulton_coefficients(1) == (1,)  # backward Euler
    assert moulton_coefficients(2) == (Fraction(1, 2), Fraction(1, 2))  # trapezoid
    assert [c * 24 for c in moulton_coefficients(4)] == [9, 19, -5, 1]


@pytest.mark.parametrize("k", range(1, 13))
def test_coefficients_are_exact_and_consistent(k):
    # Consistency: the weights integrate the constant 1 over one step exactly.
    assert sum(bashforth_coefficients(k)) == 1
    assert sum(moulton_coefficients(k)) == 1
    # torchdiffeq's tables (its order-1 Moulton row is unused and not a weight).
    from torchdiffeq._impl.fixed_adams import _BASHFORTH_DIVISOR, _MOULTON_DIVISOR

    theirs = _from_their_table(_BASHFORTH_DIVISOR[k])
    assert [float(c) for c in bashforth_coefficients(k)] == pytest.approx(theirs, rel=1e-13)
    if k > 1:
        theirs = _from_their_table(_MOULTON_DIVISOR[k])
        assert [float(c) for c in moulton_coefficients(k)] == pytest.approx(theirs, rel=1e-13)


# The order with max_order=m: Adams-Bashforth with m-1 steps (order m-1); with the
# Adams-Moulton corrector through m points, order m.
CASES = [
    ("explicit_adams", 4, 3),
    ("explicit_adams", 5, 4),
    ("implicit_adams", 4, 4),
    ("fixed_adams", 4, 4),
    ("implicit_adams", 5, 5),
]


@pytest.mark.parametrize("prob", PROBLEMS, ids=repr)
@pytest.mark.parametrize(("method", "max_order", "order"), CASES)
def test_convergence_order(method, max_order, order, prob):
    span = prob.t1 - prob.t0
    t = torch.tensor([prob.t0, prob.t1], dtype=F64)
    ns = [32 * 2**k for k in range(4 if order < 5 else 3)]  # above float64 rounding
    errors = [global_error(prob, method, t, {"n_steps": n, "max_order": max_order}) for n in ns]
    slope = fitted_order([span / n for n in ns], errors)
    assert abs(slope - order) < 0.3, (slope, errors)


@pytest.mark.parametrize("method", ADAMS)
def test_convergence_order_at_off_grid_times(method):
    # Between grid points the cubic Hermite interpolant keeps order 4. (The grid is
    # uniform: the coefficients assume equal steps, as torchdiffeq's do.)
    prob = oracles.harmonic
    span = prob.t1 - prob.t0
    fractions = torch.tensor([0.0, 0.137, 0.31, 0.5, 0.77, 0.913, 1.0], dtype=F64)
    t = prob.t0 + span * fractions
    ns = [32 * 2**k for k in range(4)]
    options = {"max_order": 5 if method == "explicit_adams" else 4}
    errors = [global_error(prob, method, t, {"n_steps": n, **options}) for n in ns]
    assert abs(fitted_order([span / n for n in ns], errors) - 4) < 0.3, errors


@pytest.mark.parametrize(
    "options",
    [
        {"step_size": 0.05},
        {"step_size": 0.05, "max_order": 5},
        {"step_size": 0.02, "max_order": 6, "max_iters": 8},
    ],
    ids=str,
)
@pytest.mark.parametrize("method", ADAMS)
def test_agrees_with_torchdiffeq(method, options):
    # The same scheme on the same grid: the same numbers up to rounding (sums in
    # another order), which the weakly stable high-order explicit steps (max_order 12)
    # amplify: relative differences of some 1e-10 there, 1e-15 otherwise.
    if method == "explicit_adams":
        options = {k: v for k, v in options.items() if k != "max_iters"}
    prob = oracles.linear_system
    t = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0], dtype=F64)
    ours_options = {"max_order": 12, **options}  # torchdiffeq's default (not explicit_adams')
    ours = odecore.odeint(prob.f, prob.y0_as(F64), t, method=method, options=ours_options)
    theirs = torchdiffeq.odeint(prob.f, prob.y0_as(F64), t, method=method, options=options)
    torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-12)


def _jump_at_half(t, y):
    """dy/dt = y before t = 0.5, -y after: discontinuous at a grid point."""
    return torch.where(t < 0.5, 1.0, -1.0).to(y) * y


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("method", ADAMS)
def test_perturb_matches_torchdiffeq(method, backward):
    # With perturb the steps on either side of the jump see the field's one-sided
    # limits (the history from after a grid point, the corrector and RK4's last stage
    # from before it), in both libraries.
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64)
    t = t.flip(0) if backward else t
    y0 = torch.tensor([1.0, -0.5], dtype=F64)
    options = {"step_size": 0.05, "perturb": True}
    ours = odecore.odeint(_jump_at_half, y0, t, method=method, options={"max_order": 12, **options})
    theirs = torchdiffeq.odeint(_jump_at_half, y0, t, method=method, options=options)
    torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-12)
    # Without it the field at the jump is its value there (after it going forward),
    # which only a step that evaluates the field from before the jump can tell apart:
    # the corrector, or any step going backward.
    plain = odecore.odeint(
        _jump_at_half, y0, t, method=method, options={"step_size": 0.05, "max_order": 12}
    )
    differs = not torch.allclose(plain, ours, rtol=1e-6, atol=0)
    assert differs == (method != "explicit_adams" or backward)


@pytest.mark.parametrize("method", ADAMS)
def test_default_grid_is_t_like_torchdiffeq(method):
    prob = oracles.harmonic
    t = torch.linspace(0.0, 2.0, 41, dtype=F64)
    ours = odecore.odeint(prob.f, prob.y0_as(F64), t, method=method, options={"max_order": 12})
    theirs = torchdiffeq.odeint(prob.f, prob.y0_as(F64), t, method=method)
    torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("method", ADAMS)
def test_the_default_order_is_stable_at_a_hundredth_of_the_time_scale(method):
    # torchdiffeq's explicit_adams (max_order 12) returns 0.735 here for exp(-1) = 0.368:
    # its 11-step Adams-Bashforth is unstable at h * lambda = -0.01.
    t = torch.tensor([0.0, 1.0], dtype=F64)
    y0 = torch.ones(1, dtype=F64)
    y1 = odecore.odeint(lambda t, y: -y, y0, t, method=method, options={"step_size": 0.01})[-1]
    assert abs(float(y1) - math.exp(-1)) < 1e-9
    if method == "explicit_adams":
        unstable = odecore.odeint(lambda t, y: -y, y0, t, method=method,
                                  options={"step_size": 0.01, "max_order": 12})[-1]  # fmt: skip
        assert abs(float(unstable) - math.exp(-1)) > 0.3  # what the default avoids


def test_backward_in_time_and_tuple_state():
    t = torch.linspace(1.0, 0.0, 21, dtype=F64)
    y0 = (torch.tensor([1.0], dtype=F64), torch.tensor([0.0], dtype=F64))
    ys = odecore.odeint(oracles.harmonic_tuple_f, y0, t, method="implicit_adams")
    assert isinstance(ys, tuple) and ys[0].shape == (21, 1)
    flat = odecore.odeint(
        lambda t, y: torch.cat(oracles.harmonic_tuple_f(t, (y[:1], y[1:]))),
        torch.cat(y0),
        t,
        method="implicit_adams",
    )
    torch.testing.assert_close(torch.cat(ys, dim=1), flat, rtol=0, atol=0)


@pytest.mark.parametrize("method", ADAMS)
def test_gradcheck(method):
    w = torch.tensor([[-0.5, 1.0], [-1.0, -0.3]], dtype=F64, requires_grad=True)
    y0 = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 0.3, 1.0], dtype=F64)

    def run(w: torch.Tensor, y0: torch.Tensor) -> torch.Tensor:
        return odecore.odeint(
            lambda t, y: torch.tanh(w @ y), y0, t, method=method, options={"step_size": 0.1}
        )

    assert torch.autograd.gradcheck(run, (w, y0))


IMPLICIT_ADAMS = ["implicit_adams", "fixed_adams"]
T101 = torch.linspace(0.0, 1.0, 101, dtype=F64)  # the default grid: steps of 0.01


def stiff_from_half(t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """y' = -y, and from t = 0.505 on y' = -2000 y: the corrector's fixed-point
    iteration (contraction about h |b0| 2000 > 1) cannot converge in the step from 0.5."""
    return -(2000.0 if float(t) > 0.505 else 1.0) * y


def nan_from_half(t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """y' = -y, NaN from t = 0.505 on."""
    return -y * (math.nan if float(t) > 0.505 else 1.0)


@pytest.mark.parametrize("method", IMPLICIT_ADAMS)
def test_corrector_that_does_not_converge_fails(method):
    # torchdiffeq warns and goes on with the unconverged value; odecore stops at the
    # step's start, as its implicit one-step methods do, and says why.
    with pytest.raises(odecore.SolverError) as info:
        odecore.odeint(stiff_from_half, torch.ones(2, dtype=F64), T101, method=method)
    error = info.value
    assert error.status is odecore.Status.NEWTON_FAILED
    assert error.t == pytest.approx(0.5)
    message = str(error)
    assert message.startswith(f"odeint stopped at t = {error.t!r} before reaching t1 = 1.0: ")
    assert str(odecore.Status.NEWTON_FAILED) in message
    assert re.search(
        r"the Adams-Moulton corrector \(a fixed-point iteration, not Newton's\) did not "
        r"converge at step size h = 0\.01 \(t = 0\.5\) after \d+ iteration\(s\): the "
        r"iteration diverged \(its update stopped shrinking\)",
        message,
    )
    assert "`step_size`" in message and "`max_iters`" in message


def test_corrector_that_runs_out_of_iterations_warns_and_goes_on():
    # y' = -y with steps of 0.1: one iteration leaves the corrector short of its
    # fixed point, still contracting; torchdiffeq warns and goes on, and so does
    # odecore, once, naming the first corrected step (t = 0.2), with a value that is
    # still an approximation of the solution.
    f = lambda t, y: -y  # noqa: E731
    y0, t = torch.ones(1, dtype=F64), torch.tensor([0.0, 1.0], dtype=F64)
    options = {"step_size": 0.1, "max_iters": 1}
    with pytest.warns(RuntimeWarning) as caught:
        ours = odecore.odeint(f, y0, t, method="implicit_adams", options=options)
    messages = [str(w.message) for w in caught if "corrector" in str(w.message)]
    assert len(messages) == 1
    assert re.search(
        r"did not converge at step size h = 0\.1 \(t = 0\.2\) after 1 iteration\(s\): "
        r"the iterations ran out \(`max_iters` = 1\)",
        messages[0],
    )
    assert "goes on with the unconverged value" in messages[0]
    assert torch.isfinite(ours).all()
    assert float(ours[-1]) == pytest.approx(math.exp(-1.0), abs=1e-4)


def test_a_corrector_whose_update_grows_once_at_its_last_iteration_runs_out():
    # A step of 0.9 after one of 0.001 on a rotating linear field: the corrector
    # contracts (its scaled update falls 14-fold), but a component of the increment
    # nears zero and the last scaled update is 1 % larger than the one before. That
    # read as divergence and raised where torchdiffeq (and 8 iterations) converge.
    a = torch.tensor([[-0.5, 1.0], [-1.0, -0.3]], dtype=F64)
    f = lambda t, y: y @ a.T  # noqa: E731
    y0, t = torch.tensor([1.0, 0.5], dtype=F64), torch.tensor([0.0, 0.1, 0.101, 1.0], dtype=F64)
    with pytest.warns(RuntimeWarning, match=r"the iterations ran out \(`max_iters` = 4\)"):
        ours = odecore.odeint(f, y0, t, method="implicit_adams")
    theirs = torchdiffeq.odeint(f, y0, t, method="implicit_adams")
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


def test_a_contracting_corrector_within_the_tolerance_of_its_fixed_point_passes():
    # Steps of 0.25 on y' = -0.7 y + sin(3 t): after 4 iterations successive increments
    # still differ by more than rtol, but the contraction rate (about 0.07) puts the
    # increment within the tolerance of the fixed point: the same values as ever.
    def forced(t, y):
        return -0.7 * y + torch.sin(3 * t)

    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64)
    ours = odecore.odeint(forced, torch.ones(1, dtype=F64), t, method="implicit_adams",
                          options={"n_steps": 40}, rtol=1e-4, atol=1e-6)  # fmt: skip
    theirs = torchdiffeq.odeint(forced, torch.ones(1, dtype=F64), t, method="implicit_adams",
                                options={"step_size": 0.025}, rtol=1e-4, atol=1e-6)  # fmt: skip
    torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize(
    ("method", "field", "status"),
    [
        *((method, nan_from_half, odecore.Status.NONFINITE) for method in ADAMS),
        *((method, stiff_from_half, odecore.Status.NEWTON_FAILED) for method in IMPLICIT_ADAMS),
    ],
    ids=lambda v: getattr(v, "__name__", None) or getattr(v, "name", str(v)),
)
def test_a_failure_keeps_the_outputs_before_it(method, field, status):
    # A failed run returns the outputs up to where it stopped, those of a solve that
    # ends there, and NaN after (what odeint raises for).
    adams = adams_for(method, {})
    y0 = torch.tensor([1.0, 2.0], dtype=F64)
    done = adams.run(field, y0, T101, T101, 1e-7, 1e-9)
    assert done.status is status
    assert str(status) in done.message and f"stopped at t = {done.t_final!r}" in done.message
    # The explicit method's state is NaN from 0.52 on (f(0.51) is NaN); the corrector
    # evaluates f at the step's end, so the implicit ones stop at 0.5.
    assert done.t_final == pytest.approx(0.51 if method == "explicit_adams" else 0.5)
    n = sum(1 for v in T101.tolist() if v <= done.t_final)
    oracle = odecore.odeint(field, y0, T101[:n], method=method)
    torch.testing.assert_close(done.ys[:n], oracle, rtol=0, atol=0)
    assert torch.isnan(done.ys[n:]).all()
    with pytest.raises(odecore.SolverError) as info:
        odecore.odeint(field, y0, T101, method=method)
    assert info.value.status is status
    assert info.value.t == done.t_final
    assert str(info.value) == done.message


@pytest.mark.parametrize("method", ADAMS)
def test_a_nonfinite_state_raises(method):
    with pytest.raises(odecore.SolverError, match=r"became non-finite") as info:
        odecore.odeint(nan_from_half, torch.ones(3, dtype=F64), T101, method=method,
                       options={"step_size": 0.01})  # fmt: skip
    assert info.value.status is odecore.Status.NONFINITE
    assert info.value.t == pytest.approx(0.51 if method == "explicit_adams" else 0.5)


def test_a_failure_between_output_times_keeps_the_earlier_outputs():
    # Outputs every 0.25 on a grid of 0.01: the one at 0.25 is read from the grid, the
    # ones after the failure (at 0.5) are NaN.
    t = torch.tensor([0.0, 0.25, 0.75, 1.0], dtype=F64)
    grid = T101
    done = adams_for("implicit_adams", {}).run(stiff_from_half, torch.ones(1, dtype=F64),
                                                grid, t, 1e-7, 1e-9)  # fmt: skip
    assert done.status is odecore.Status.NEWTON_FAILED
    oracle = odecore.odeint(stiff_from_half, torch.ones(1, dtype=F64), t[:2],
                            method="implicit_adams", options={"step_size": 0.01})  # fmt: skip
    torch.testing.assert_close(done.ys[:2], oracle, rtol=0, atol=0)
    assert torch.isnan(done.ys[2:]).all()


def test_a_failure_in_the_first_step_keeps_y0():
    done = adams_for("explicit_adams", {}).run(
        lambda t, y: y * math.nan, torch.ones(2, dtype=F64), T101[:3], T101[:3], 1e-7, 1e-9
    )
    assert done.status is odecore.Status.NONFINITE
    assert done.t_final == 0.0
    assert torch.equal(done.ys[0], torch.ones(2, dtype=F64))
    assert torch.isnan(done.ys[1:]).all()


def test_converged_corrector_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        odecore.odeint(
            oracles.decay.f,
            oracles.decay.y0_as(F64),
            torch.tensor([0.0, 1.0], dtype=F64),
            method="implicit_adams",
            options={"step_size": 0.01},
        )


@pytest.mark.parametrize(
    ("method", "options", "error", "match"),
    [
        ("implicit_adams", {"max_order": 3}, odecore.ConfigurationError, r"`max_order` must be"),
        ("implicit_adams", {"max_order": 13}, odecore.ConfigurationError, r"from 4 to 12"),
        ("explicit_adams", {"max_order": 4.0}, odecore.ConfigurationError, r"`max_order`"),
        ("implicit_adams", {"max_iters": 0}, odecore.ConfigurationError, r"`max_iters` must be"),
        (
            "explicit_adams",
            {"max_iters": 2},
            odecore.ConfigurationError,
            r"Unknown option.*max_iters",
        ),
        ("fixed_adams", {"jump_t": [0.5]}, odecore.ConfigurationError, r"Unknown option.*jump_t"),
        ("fixed_adams", {"perturb": 1}, odecore.ConfigurationError, r"`perturb` must be True"),
        ("implicit_adams", {"interp": "linear"}, odecore.ConfigurationError, r"only be 'cubic'"),
        ("fixed_adams", {"step_size": -0.1}, ValueError, r"`step_size` must be a positive"),
        ("fixed_adams", {"n_steps": 0}, ValueError, r"`n_steps` must be a positive integer"),
        (
            "fixed_adams",
            {"step_size": 0.1, "n_steps": 4},
            odecore.ConfigurationError,
            r"give one of them, got step_size, n_steps",
        ),
    ],
)
def test_bad_options_are_refused(method, options, error, match):
    with pytest.raises(error, match=match):
        odecore.odeint(
            oracles.decay.f, torch.ones(1), torch.tensor([0.0, 1.0]), method=method, options=options
        )


@pytest.mark.parametrize(
    ("field", "y0", "error", "match"),
    [
        (lambda t, y: -y[:1], torch.ones(3, 2, dtype=F64), ValueError, r"returned shape \(1, 2\)"),
        (
            lambda t, y: -y.float(),
            torch.ones(3, dtype=F64),
            TypeError,
            r"returned dtype torch.float32",
        ),
        (lambda t, y: 1.0, torch.ones(3, dtype=F64), TypeError, r"must return a Tensor, got float"),
        (
            lambda t, y: (-y[0][:1], -y[1]),
            (torch.ones(2, dtype=F64), torch.ones(3, dtype=F64)),
            ValueError,
            r"returned shape \(1,\) for `y0\[0\]`",
        ),
        (
            lambda t, y: (-y[0].float(), -y[1]),
            (torch.ones(2, dtype=F64), torch.ones(3, dtype=F64)),
            TypeError,
            r"returned dtype torch.float32 for `y0\[0\]`",
        ),
    ],
)
@pytest.mark.parametrize("interface", ["odeint", "odeint_adjoint"])
@pytest.mark.parametrize("method", ADAMS)
def test_a_field_unlike_the_state_is_refused(method, interface, field, y0, error, match):
    # As by every other method: a result that broadcasts, of another dtype or not a
    # tensor gave a solution of the state's shape, of a field that is not the one given.
    with pytest.raises(error, match=match):
        getattr(odecore, interface)(
            field, y0, torch.tensor([0.0, 1.0], dtype=F64), method=method,
            options={"step_size": 0.1},
        )  # fmt: skip


@pytest.mark.parametrize("interface", ["odeint", "odeint_adjoint"])
@pytest.mark.parametrize("method", ["explicit_adams", "implicit_adams"])
def test_a_tuple_state_with_a_0_dim_tensor_and_an_empty_state(method, interface):
    # A 0-dim tensor of a tuple state raised reshape()'s TypeError, an empty state
    # the corrector's max() of nothing; every other method solves both.
    solve = getattr(odecore, interface)
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64)
    options = {"step_size": 0.01}
    q, p = solve(
        lambda t, y: (y[1].sum(), -y[0].expand(2)), (torch.tensor(1.0, dtype=F64),
        torch.zeros(2, dtype=F64)), t, method=method, options=options,
    )  # fmt: skip
    rq, rp = odecore.odeint(
        lambda t, y: (y[1].sum(), -y[0].expand(2)), (torch.tensor(1.0, dtype=F64),
        torch.zeros(2, dtype=F64)), t, method="rk4", options=options,
    )  # fmt: skip
    assert q.shape == (3,) and p.shape == (3, 2)
    torch.testing.assert_close(q, rq, rtol=0, atol=1e-7)
    torch.testing.assert_close(p, rp, rtol=0, atol=1e-7)
    empty = solve(lambda t, y: -y, torch.ones(0, dtype=F64), t, method=method, options=options)
    assert empty.shape == (3, 0)


@pytest.mark.parametrize("method", ADAMS)
def test_solver_objects_are_refused_with_the_way_out(method):
    with pytest.raises(odecore.ConfigurationError, match=r"multistep method, which only odeint"):
        odecore.OdeSpec.from_method(method)
    with pytest.raises(odecore.ConfigurationError, match=r"must be an Adams method"):
        odecore.odeint_adjoint(
            oracles.decay.f, torch.ones(1), torch.tensor([0.0, 1.0]), method=method,
            options={"step_size": 0.1}, adjoint_method="rk4", adjoint_params=(),
        )  # fmt: skip


class _Tanh(torch.nn.Module):
    """A small nonlinear, time-dependent field with a weight matrix."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([[-0.5, 1.0], [-1.0, -0.3]], dtype=F64))

    def forward(self, t, y):
        return torch.tanh(y @ self.w.T) * torch.cos(t)


def _gradients(library, interface, method, options):
    """The outputs and the gradients of a loss of them with respect to y0, the weights
    and the output times."""
    field = _Tanh()
    y0 = torch.tensor([[1.0, 0.5], [0.2, -0.3]], dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 0.4, 1.0], dtype=F64, requires_grad=True)
    ys = getattr(library, interface)(field, y0, t, method=method, options=options)
    (ys**2).sum().backward()
    return ys.detach(), y0.grad, field.w.grad, t.grad


@pytest.mark.filterwarnings("ignore:Functional iteration did not converge")
@pytest.mark.parametrize("method", ADAMS)
def test_odeint_adjoint_matches_torchdiffeq(method):
    # The forward solve, then the adjoint equations integrated backward by the same
    # Adams method with the same steps: the same numbers, time gradients included.
    options = {"step_size": 0.01, "max_order": 12}
    ours = _gradients(odecore, "odeint_adjoint", method, options)
    theirs = _gradients(torchdiffeq, "odeint_adjoint", method, options)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("method", ["explicit_adams", "implicit_adams"])
def test_odeint_adjoint_agrees_with_backprop(method):
    # The adjoint differentiates the continuous problem, backpropagation the scheme:
    # at h = 0.01 they agree to the scheme's accuracy (the time gradients of a grid
    # anchored at t[0] differ more: backpropagation moves the grid with it).
    adjoint = _gradients(odecore, "odeint_adjoint", method, {"step_size": 0.01})
    backprop = _gradients(odecore, "odeint", method, {"step_size": 0.01})
    for a, b in zip(adjoint[:3], backprop[:3], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(adjoint[3], backprop[3], rtol=0, atol=5e-3)


@pytest.mark.parametrize("method", ["explicit_adams", "implicit_adams"])
def test_odeint_adjoint_calls_the_grid_constructor_once(method):
    # torchdiffeq's forward pass calls it once; the backward solve retraces the grid
    # that the forward one took. A constructor that draws its grid (here the second
    # call's is coarser) made the backward solve step on another grid.
    def fine(func, y0, t):
        return torch.linspace(float(t[0]), float(t[-1]), 101, dtype=F64)

    def drawn():
        grids = iter([101, 3])
        return lambda func, y0, t: torch.linspace(float(t[0]), float(t[-1]), next(grids), dtype=F64)

    rate = torch.tensor(0.8, dtype=F64, requires_grad=True)
    grads = []
    for constructor in (fine, drawn()):
        y0 = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)
        ys = odecore.odeint_adjoint(
            lambda t, y: -rate * y + torch.sin(t), y0, torch.tensor([0.0, 1.0], dtype=F64),
            method=method, options={"grid_constructor": constructor}, adjoint_params=(rate,),
        )  # fmt: skip
        grads.append(torch.autograd.grad(ys[-1].pow(2).sum(), (y0, rate)))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("method", ["explicit_adams", "implicit_adams"])
def test_odeint_adjoint_differentiates_a_tensor_computed_from_a_parameter(method):
    # The field closes over `2 k`, whose graph every backward evaluation walks.
    def gradient(interface):
        k = torch.tensor(0.7, dtype=F64, requires_grad=True)
        rate = 2 * k
        y0 = torch.tensor([1.0, 0.2], dtype=F64)
        t = torch.tensor([0.0, 1.0], dtype=F64)
        ys = getattr(odecore, interface)(
            lambda t, y: -rate * y, y0, t, method=method, options={"step_size": 0.01}
        )
        ys[-1].sum().backward()
        return k.grad

    torch.testing.assert_close(gradient("odeint_adjoint"), gradient("odeint"), rtol=1e-6, atol=0)


def test_odeint_adjoint_of_a_tuple_state_calls_the_adjoint_callbacks():
    calls = []

    class Oscillator(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.k = torch.nn.Parameter(torch.tensor(0.7, dtype=F64))

        def forward(self, t, y):
            return (y[1], -self.k * y[0])

        def callback_step_adjoint(self, t0, state, dt):
            (y, adjoint, *grads) = state  # y and its adjoint structured as the state
            calls.append((float(t0), float(dt), [s.shape for s in (*y, *adjoint, *grads)]))

    field = Oscillator()
    x0 = torch.tensor([1.0], dtype=F64, requires_grad=True)
    ys = odecore.odeint_adjoint(
        field, (x0, torch.tensor([0.0], dtype=F64)), torch.tensor([0.0, 1.0], dtype=F64),
        method="implicit_adams", options={"step_size": 0.01},
    )  # fmt: skip
    ys[0][-1].sum().backward()
    # x = cos(sqrt(k) t): d/dx0 = cos(sqrt(k)), d/dk = -sin(sqrt(k)) / (2 sqrt(k))
    root = math.sqrt(0.7)
    assert x0.grad.item() == pytest.approx(math.cos(root), rel=1e-6)
    assert field.k.grad.item() == pytest.approx(-math.sin(root) / (2 * root), rel=1e-6)
    # Before every backward step, from t = 1 down: the state (x, v), its adjoint, dk.
    assert len(calls) == 100
    assert calls[0][:2] == pytest.approx((1.0, 0.01))
    assert calls[0][2] == [(1,), (1,), (1,), (1,), ()]


@pytest.mark.parametrize("method", ADAMS)
def test_odeint_event_through_the_adjoint_matches_torchdiffeq(method):
    options = {"step_size": 0.01, "interp": "cubic", "max_order": 12}
    results = []
    for library in (odecore, torchdiffeq):
        y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)
        event_t, ys = library.odeint_event(
            lambda t, y: torch.stack([y[1], -9.81 - y[1] * y[1].abs() / 10]), y0,
            torch.tensor(0.0, dtype=F64), event_fn=lambda t, y: y[0] - 0.5 * torch.cos(3 * t),
            method=method, options=options, odeint_interface=library.odeint_adjoint,
            adjoint_params=(),
        )  # fmt: skip
        (ys[-1].sum() + event_t).backward()
        results.append((event_t.detach(), ys[-1].detach(), y0.grad))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-8)


def _drag_event(library, method, options, reverse_time=False):
    """A ball with drag onto a wavy floor, by ``library``'s ``odeint_event``: the event
    time, the state there and the event time's gradient with respect to ``y0``."""
    y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)
    event_t, ys = library.odeint_event(
        lambda t, y: torch.stack([y[1], -9.81 - y[1] * y[1].abs() / 10]), y0,
        torch.tensor(0.0, dtype=F64), event_fn=lambda t, y: y[0] - 0.5 * torch.cos(3 * t),
        method=method, options=options, reverse_time=reverse_time,
    )  # fmt: skip
    (grad,) = torch.autograd.grad(event_t, y0)
    return event_t, ys[-1], grad


@pytest.mark.filterwarnings("ignore:Functional iteration did not converge")
@pytest.mark.parametrize("reverse_time", [False, True])
@pytest.mark.parametrize("method", ADAMS)
def test_events_match_torchdiffeq(method, reverse_time):
    # torchdiffeq finds a fixed-grid event on the interpolant of `interp`; the Adams
    # methods' own is its 'cubic'. The same order as torchdiffeq's (max_order 12).
    options = {"step_size": 0.05, "interp": "cubic", "max_order": 12}
    ours = _drag_event(odecore, method, options, reverse_time)
    theirs = _drag_event(torchdiffeq, method, options, reverse_time)
    # Each finds the root by its own iteration, to about 1e-9, not to rounding.
    torch.testing.assert_close(ours[0], theirs[0], rtol=0, atol=1e-8)
    torch.testing.assert_close(ours[1], theirs[1], rtol=0, atol=1e-7)
    torch.testing.assert_close(ours[2], theirs[2], rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("method", ["explicit_adams", "implicit_adams"])
def test_event_time_and_gradient_converge_to_the_closed_form(method):
    # y' = -y from y0 reaches 0.3 at ln(y0 / 0.3), d/dy0 = 1 / y0: the direct keyword
    # carries the event time's gradient, the state there is on the event surface.
    y0 = torch.tensor([1.5], dtype=F64, requires_grad=True)
    event_t, ys = odecore.odeint(
        lambda t, y: -y, y0, torch.tensor([0.0, 1.0], dtype=F64), method=method,
        options={"step_size": 0.01}, event_fn=lambda t, y: y[0] - 0.3,
    )  # fmt: skip
    assert event_t.item() == pytest.approx(math.log(1.5 / 0.3), abs=1e-8)
    assert ys[-1].item() == pytest.approx(0.3, abs=1e-12)
    event_t.backward()
    assert y0.grad.item() == pytest.approx(1 / 1.5, rel=1e-7)


def test_an_event_that_never_happens_says_so():
    with pytest.raises(odecore.SolverError, match=r"did not happen within `max_steps`"):
        odecore.odeint(
            lambda t, y: torch.zeros_like(y), torch.ones(1, dtype=F64),
            torch.tensor([0.0, 1.0], dtype=F64), method="explicit_adams",
            options={"step_size": 1.0}, event_fn=lambda t, y: y + 1,
        )  # fmt: skip


def test_an_event_needs_a_step_size():
    with pytest.raises(odecore.ConfigurationError, match=r"needs a step size"):
        odecore.odeint(
            lambda t, y: -y, torch.ones(1, dtype=F64), torch.tensor([0.0, 1.0], dtype=F64),
            method="fixed_adams", event_fn=lambda t, y: y - 0.5,
        )  # fmt: skip


def test_the_dataclass_validates_itself():
    with pytest.raises(odecore.ConfigurationError, match="`max_iters`"):
        AdamsBashforthMoulton(max_iters=True)  # type: ignore[arg-type]

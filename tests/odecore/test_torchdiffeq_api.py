"""torchdiffeq's methods and options through ``odecore.odeint``, against torchdiffeq itself.

Each comparison makes the same call to both libraries, in float64. Where odecore
differs from torchdiffeq by design (it evaluates ``f`` at the propagated solution,
interpolates at the scheme's order), the comparison is arranged so that the design
does not enter: output times on step ends, or a single step.
"""

from __future__ import annotations

import importlib
import math

import odecore
import oracles
import pytest
import torch
import torchdiffeq

F64 = torch.float64
T = torch.tensor([0.0, 0.5, 1.0], dtype=F64)
Y0 = torch.tensor([1.0, -0.5], dtype=F64)

# odecore's name -> torchdiffeq's name of the same fixed-step scheme. torchdiffeq's
# `rk4` is Kutta's 3/8 rule, odecore's `rk4_38`.
FIXED_TWINS = {
    "euler": "euler",
    "midpoint": "midpoint",
    "heun": "heun2",
    "heun2": "heun2",
    "heun3": "heun3",
    "rk4_38": "rk4",
}
FIXED = sorted(FIXED_TWINS)
# Schemes with a stage at the end of the step, where `perturb` changes the answer.
LAST_STAGE_AT_END = ["heun", "heun2", "rk4_38"]


def smooth(t, y):
    return torch.stack([y[1], -torch.sin(y[0]) + 0.3 * torch.cos(2.0 * t)])


def jump_at_half(t, y):
    """dy/dt = y before t = 0.5, -y after: discontinuous at a grid point."""
    return torch.where(t < 0.5, 1.0, -1.0).to(y) * y


def both(method, f=smooth, y0=Y0, t=T, **kwargs):
    """``odecore.odeint`` and ``torchdiffeq.odeint`` of the same call."""
    ours = odecore.odeint(f, y0, t, method=method, **kwargs)
    theirs = torchdiffeq.odeint(f, y0, t, method=FIXED_TWINS.get(method, method), **kwargs)
    return ours, theirs


def solve_call(monkeypatch):
    """Record the keyword arguments that ``odeint`` hands to the solve."""
    module = importlib.import_module("odecore._odeint")
    calls: list[dict] = []
    inner = module._solve

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return inner(*args, **kwargs)

    monkeypatch.setattr(module, "_solve", spy)
    return calls


# --- heun3 and fehlberg2 ----------------------------------------------------------------


@pytest.mark.parametrize("options", [{}, {"step_size": 0.125}, {"step_size": 0.3}], ids=repr)
@pytest.mark.parametrize("method", FIXED)
def test_fixed_methods_match_torchdiffeq(method, options):
    # Output times on the grid (every step end is one): the same scheme gives the
    # same numbers.
    t = torch.tensor([0.0, 0.3, 0.6, 0.9, 1.2], dtype=F64) if "step_size" in options else T
    if options.get("step_size") == 0.125:
        t = torch.tensor([0.0, 0.25, 0.5, 1.0], dtype=F64)
    ours, theirs = both(method, t=t, options=options)
    torch.testing.assert_close(ours, theirs, rtol=1e-14, atol=1e-14)


def test_heun3_is_third_order_not_heun():
    # Guards the comparison above: heun3 and heun differ at the step ends.
    assert not torch.allclose(odecore.odeint(smooth, Y0, T, method="heun3"), both("heun")[1])


@pytest.mark.parametrize("method", ["fehlberg2", "adaptive_heun", "bosh3", "dopri5", "dopri8"])
def test_one_adaptive_step_matches_torchdiffeq(method):
    # min_step = max_step = the whole span: both take one step, accepted whatever
    # its error, from the same f(t0, y0). The tableaus agree to rounding.
    t = torch.tensor([0.0, 0.25], dtype=F64)
    options = {"min_step": 0.25, "max_step": 0.25}
    ours, theirs = both(method, t=t, rtol=1e-12, atol=1e-12, options=options)
    torch.testing.assert_close(ours, theirs, rtol=1e-14, atol=1e-14)
    assert (ours[-1] - Y0).abs().max() > 0.05  # a step that moved


@pytest.mark.parametrize("method", ["bosh3", "dopri5"])
def test_forced_steps_match_torchdiffeq(method):
    # min_step = max_step = h turns an adaptive method into a fixed-step one in both
    # libraries; for these first-same-as-last pairs the whole solve agrees.
    options = {"min_step": 0.125, "max_step": 0.125}
    ours, theirs = both(method, rtol=1e-12, atol=1e-12, options=options)
    torch.testing.assert_close(ours, theirs, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("tol", [1e-4, 1e-6])
@pytest.mark.parametrize("prob", [oracles.decay, oracles.linear_system, oracles.harmonic], ids=repr)
def test_fehlberg2_is_as_accurate_as_torchdiffeqs(prob, tol):
    # torchdiffeq starts each step from f at the first-order solution; odecore from f
    # at the propagated one. The errors are alike (the method's, 100-1000x tol).
    t = prob.times(6)
    y0 = prob.y0_as()
    exact = prob.exact(t, y0)
    ours, theirs = both("fehlberg2", prob.f, y0, t, rtol=tol, atol=tol)
    err_ours = (ours - exact).abs().max().item()
    err_theirs = (theirs - exact).abs().max().item()
    assert err_ours <= 1.2 * err_theirs, (err_ours, err_theirs)
    assert err_ours <= 2000 * tol


def test_fehlberg2_is_adaptive_and_second_order():
    assert odecore.ADAPTIVE_METHODS["fehlberg2"] is odecore.Fehlberg2
    assert odecore.FIXED_METHODS["heun3"] is odecore.Heun3
    assert (odecore.Fehlberg2.order, odecore.Heun3.order) == (2, 3)
    assert odecore.FEHLBERG2_TABLEAU.adaptive and not odecore.HEUN3_TABLEAU.adaptive


# --- scipy_solver ------------------------------------------------------------------------


# torchdiffeq's call passes min_step=0 and max_step=inf to every solver; SciPy warns
# that they have no effect on the ones other than LSODA.
scipy_warnings = pytest.mark.filterwarnings("ignore:The following arguments have no effect")


@scipy_warnings
@pytest.mark.parametrize(
    ("solver", "close"),
    # LSODA's result through torchdiffeq differs from solve_ivp's own by ~1e-8 (its
    # tolerance); odecore's equals solve_ivp's (test_backends).
    [("LSODA", 1e-7), ("RK45", 1e-10), ("RK23", 1e-10), ("DOP853", 1e-10), ("BDF", 1e-10),
     ("Radau", 1e-10)],
)  # fmt: skip
def test_scipy_solver_matches_torchdiffeq(solver, close):
    # The same scipy solver with the same tolerances: the same steps, so the same
    # value at t1 (between steps the two interpolate differently).
    t = torch.tensor([0.0, 1.0], dtype=F64)
    ours, theirs = both("scipy_solver", t=t, rtol=1e-8, atol=1e-10, options={"solver": solver})
    torch.testing.assert_close(ours, theirs, rtol=close, atol=close)


@scipy_warnings
def test_scipy_solver_defaults_to_lsoda():
    ours = odecore.odeint(smooth, Y0, T, rtol=1e-8, atol=1e-10, method="scipy_solver")
    lsoda = odecore.odeint(smooth, Y0, T, rtol=1e-8, atol=1e-10, method="scipy:LSODA")
    assert torch.equal(ours, lsoda)
    theirs = torchdiffeq.odeint(smooth, Y0, T, rtol=1e-8, atol=1e-10, method="scipy_solver")
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


@scipy_warnings
@pytest.mark.parametrize(
    ("options", "close"),
    [({"solver": "LSODA", "min_step": 0.05}, 1e-6), ({"solver": "RK45", "max_step": 0.01}, 1e-10)],
    ids=["LSODA-min_step", "RK45-max_step"],
)
def test_scipy_solver_step_bounds_match_torchdiffeq(options, close):
    from odecore._backends import lsoda_ignores_min_step

    if "min_step" in options and lsoda_ignores_min_step():
        pytest.skip("this SciPy's LSODA ignores min_step: odecore refuses it")
    t = torch.tensor([0.0, 2.0], dtype=F64)
    ours, theirs = both("scipy_solver", t=t, rtol=1e-3, atol=1e-3, options=options)
    torch.testing.assert_close(ours, theirs, rtol=close, atol=close)


def test_scipy_solver_max_step_takes_effect():
    t = torch.tensor([0.0, 2.0], dtype=F64)
    options = {"solver": "RK45", "max_step": 0.01}
    bounded = odecore.odeint(smooth, Y0, t, rtol=1e-3, atol=1e-3, method="scipy_solver",
                             options=options)  # fmt: skip
    plain = odecore.odeint(smooth, Y0, t, rtol=1e-3, atol=1e-3, method="scipy:RK45")
    assert not torch.allclose(bounded, plain, rtol=0, atol=1e-9)


def test_scipy_solver_options_reach_scipy(monkeypatch):
    # Whether this SciPy's LSODA honours min_step is test_backends' concern.
    monkeypatch.setattr(
        importlib.import_module("odecore._backends"), "lsoda_ignores_min_step", lambda: False
    )
    calls = solve_call(monkeypatch)
    options = {"solver": "LSODA", "min_step": 0.05, "max_step": 0.5}
    odecore.odeint(smooth, Y0, T, method="scipy_solver", options=options)
    (kwargs,) = calls
    assert (kwargs["solver"].method, kwargs["solver"].min_step) == ("LSODA", 0.05)
    assert kwargs["controller"].dt_max == 0.5


def test_scipy_solver_gives_adjoint_gradients():
    # torchdiffeq's scipy_solver returns no gradient; odecore's comes from the adjoint.
    y0 = Y0.clone().requires_grad_(True)
    ys = odecore.odeint(smooth, y0, T, rtol=1e-8, atol=1e-10, method="scipy_solver")
    ys[-1].sum().backward()
    assert y0.grad is not None and torch.isfinite(y0.grad).all()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"solver": "rk45"}, r"option `solver` of method 'scipy_solver' must name one of SciPy"),
        ({"solver": "RK45", "min_step": 0.1}, r"`min_step` applies to SciPy's LSODA only"),
        ({"solver": "LSODA", "min_step": -1.0}, r"`min_step` must be a finite number >= 0"),
        ({"safety": 0.8}, r"Unknown option\(s\) \['safety'\] for method 'scipy_solver'"),
    ],
    ids=["solver-name", "min_step-not-lsoda", "min_step-negative", "unknown"],
)
def test_scipy_solver_errors(options, match):
    with pytest.raises(ValueError, match=match):
        odecore.odeint(smooth, Y0, T, method="scipy_solver", options=options)


def test_scipy_solver_min_step_zero_is_accepted_for_any_solver():
    # torchdiffeq's default min_step is 0 for every solver: "no bound".
    ours = odecore.odeint(
        smooth, Y0, T, method="scipy_solver", options={"solver": "RK45", "min_step": 0.0}
    )
    assert torch.equal(ours, odecore.odeint(smooth, Y0, T, method="scipy:RK45"))


# --- min_step ------------------------------------------------------------------------------


def test_min_step_accepts_steps_whatever_their_error():
    # At rtol = 1e-12 every step of 1/8 fails the error test; at min_step it is kept.
    sol = odecore.solve(
        smooth,
        Y0,
        t0=0.0,
        t1=1.0,
        solver=odecore.Dopri5(),
        controller=odecore.PIDController(rtol=1e-12, atol=1e-12, dt_min=0.125),
    )
    assert (sol.stats.n_accepted, sol.stats.n_rejected) == (8, 0)
    free = odecore.solve(
        smooth,
        Y0,
        t0=0.0,
        t1=1.0,
        solver=odecore.Dopri5(),
        controller=odecore.PIDController(rtol=1e-12, atol=1e-12),
    )
    assert free.stats.n_accepted > 8


def test_min_step_matches_torchdiffeq():
    t = torch.tensor([0.0, 1.0], dtype=F64)
    ours, theirs = both("dopri5", t=t, rtol=1e-12, atol=1e-12, options={"min_step": 0.125})
    torch.testing.assert_close(ours, theirs, rtol=1e-13, atol=1e-13)


def test_min_step_keeps_a_shortened_step():
    # A step cut short to land on an output time is below min_step and kept.
    t = torch.tensor([0.0, 0.3, 1.0], dtype=F64)
    ys = odecore.odeint(smooth, Y0, t, rtol=1e-12, atol=1e-12, options={"min_step": 0.25})
    assert torch.isfinite(ys).all()


def test_nonfinite_step_at_min_step_fails_at_once():
    def blow_up(t, y):
        return torch.where(t > 0.5, torch.nan, 1.0).to(y) * torch.ones_like(y)

    sol = odecore.solve(
        blow_up,
        Y0,
        t0=0.0,
        t1=1.0,
        solver=odecore.Dopri5(),
        controller=odecore.PIDController(dt_min=0.01),
        max_steps=1000,
        throw=False,
    )
    assert sol.status == odecore.Status.NONFINITE
    assert sol.stats.n_steps < 100


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dt_min": -0.1}, r"`dt_min` must be a finite number >= 0, got -0\.1"),
        ({"dt_min": math.inf}, r"`dt_min` must be a finite number >= 0, got inf"),
        ({"dt_min": 0.5, "dt_max": 0.25}, r"`dt_min` \(0\.5\) must not exceed `dt_max` \(0\.25\)"),
    ],
    ids=["negative", "infinite", "above-dt_max"],
)
def test_dt_min_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        odecore.PIDController(**kwargs)


def test_min_step_option_errors():
    with pytest.raises(ValueError, match=r"`min_step` must be a finite number >= 0, got -1\.0"):
        odecore.odeint(smooth, Y0, T, options={"min_step": -1.0})


# --- grid_constructor and n_steps -----------------------------------------------------------


def uneven_grid(func, y0, t):
    return torch.cat([t[:1], torch.tensor([0.1, 0.3, 0.45], dtype=t.dtype), t[1:2], t[-1:]])


@pytest.mark.parametrize("method", FIXED)
def test_grid_constructor_matches_torchdiffeq(method):
    # The grid is 0, 0.1, 0.3, 0.45, 0.5, 1: outputs at 0.5 and 1 are step ends.
    ours, theirs = both(method, options={"grid_constructor": uneven_grid})
    torch.testing.assert_close(ours, theirs, rtol=1e-14, atol=1e-14)
    assert not torch.allclose(ours, odecore.odeint(smooth, Y0, T, method=method))


def test_grid_constructor_goes_to_the_solve_as_a_tensor(monkeypatch):
    calls = solve_call(monkeypatch)
    t = T.clone().requires_grad_(True)
    seen = []

    def grid(func, y0, t):
        g = torch.cat([t[:1], (t[0] + t[-1]) * torch.tensor([0.2, 0.4], dtype=F64), t[1:]])
        seen.append(g)
        return g

    odecore.odeint(smooth, Y0, t, method="rk4", options={"grid_constructor": grid})
    (kwargs,) = calls
    assert kwargs["step_ts"] is seen[0]
    assert kwargs["step_ts"].grad_fn is not None  # the graph back to t is kept
    assert kwargs["dt0"] == 1.0


def test_n_steps_goes_to_the_solve_as_a_tensor(monkeypatch):
    calls = solve_call(monkeypatch)
    t = torch.tensor([0.1, 0.5, 1.5], dtype=torch.float32, requires_grad=True)
    odecore.odeint(smooth, Y0.float(), t, method="rk4", options={"n_steps": 7})
    (kwargs,) = calls
    grid = kwargs["step_ts"]
    assert isinstance(grid, torch.Tensor) and grid.grad_fn is not None
    expected = 0.1 + (1.5 - 0.1) * torch.arange(8, dtype=F64) / 7
    torch.testing.assert_close(grid.detach(), expected, rtol=0, atol=1e-7)
    assert grid[-1].item() == t[-1].item() and grid[0].item() == t[0].item()
    assert kwargs["dt0"] == pytest.approx(1.4)


def test_n_steps_and_step_size_give_the_same_solution():
    fine = odecore.odeint(smooth, Y0, T, method="rk4", options={"n_steps": 8})
    same = odecore.odeint(smooth, Y0, T, method="rk4", options={"step_size": 0.125})
    torch.testing.assert_close(fine, same, rtol=1e-15, atol=1e-15)


def fine_grid(func, y0, t):
    return torch.linspace(float(t[0]), float(t[-1]), 41, dtype=t.dtype)


def test_grid_constructor_with_odeint_adjoint_matches_torchdiffeq():
    """The backward solve steps on the forward grid (torchdiffeq builds a grid per
    interval): the gradients agree to the scheme's error on these grids."""
    grads = []
    for lib, method in ((odecore, "rk4_38"), (torchdiffeq, "rk4")):
        y0 = Y0.clone().requires_grad_(True)
        ys = lib.odeint_adjoint(
            smooth, y0, T, method=method, options={"grid_constructor": fine_grid},
            adjoint_params=(),
        )  # fmt: skip
        ys[-1].sum().backward()
        grads.append(y0.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-6, atol=1e-8)


def bad_shape(func, y0, t):
    return torch.stack([t, t])


def bad_start(func, y0, t):
    return torch.cat([t[:1] + 0.01, t[1:]])


def bad_end(func, y0, t):
    return torch.cat([t[:-1], t[-1:] - 0.01])


def not_monotone(func, y0, t):
    return torch.tensor([0.0, 0.6, 0.4, 1.0], dtype=t.dtype)


def not_a_tensor(func, y0, t):
    return [0.0, 1.0]


@pytest.mark.parametrize(
    ("constructor", "error", "match"),
    [
        (
            bad_shape,
            ValueError,
            r"must return a 1-D tensor of at least two times.*got shape \(2, 3\)",
        ),
        (
            bad_start,
            ValueError,
            r"from t\[0\] = 0\.0 to t\[-1\] = 1\.0 exactly, got one from 0\.01",
        ),
        (bad_end, ValueError, r"got one from 0\.0 to 0\.99"),
        (
            not_monotone,
            ValueError,
            r"strictly increasing, like `t`; got grid\[1\] = 0\.6 and grid\[2\] = 0\.4",
        ),
        (not_a_tensor, TypeError, r"must return a 1-D torch\.Tensor of times, got list"),
        (1.0, TypeError, r"`grid_constructor` must be a callable \(func, y0, t\)"),
    ],
    ids=["2-D", "start", "end", "not-monotone", "not-a-tensor", "not-callable"],
)
def test_grid_constructor_errors(constructor, error, match):
    with pytest.raises(error, match=match):
        odecore.odeint(smooth, Y0, T, method="euler", options={"grid_constructor": constructor})


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (
            {"grid_constructor": uneven_grid, "step_size": 0.1},
            r"`step_size`, `n_steps` and `grid_constructor` each set the whole grid.*"
            r"got step_size, grid_constructor",
        ),
        ({"grid_constructor": uneven_grid, "n_steps": 3}, r"got n_steps, grid_constructor"),
    ],
    ids=["step_size", "n_steps"],
)
def test_grid_constructor_is_exclusive(options, match):
    with pytest.raises(ValueError, match=match):
        odecore.odeint(smooth, Y0, T, method="euler", options=options)


def test_another_grid_constructor_for_the_backward_solve_is_refused():
    with pytest.raises(
        ValueError, match=r"adjoint_option `grid_constructor` is not available for the adjoint"
    ):
        odecore.odeint_adjoint(
            smooth, Y0, T, method="euler", options={"grid_constructor": uneven_grid},
            adjoint_options={"grid_constructor": fine_grid}, adjoint_params=(),
        )  # fmt: skip


# --- perturb ----------------------------------------------------------------------------------


GRIDS = {
    "default": {},
    "step_size": {"step_size": 0.25},
    "grid_constructor": {"grid_constructor": uneven_grid},
}


@pytest.mark.parametrize("t", [T, T.flip(0)], ids=["forward", "backward"])
@pytest.mark.parametrize("grid", sorted(GRIDS))
@pytest.mark.parametrize("method", FIXED)
def test_perturb_matches_torchdiffeq(method, grid, t):
    # The field jumps at t = 0.5, a grid point: with perturb, the stages on either
    # side of it see the one-sided limits, in both libraries.
    options = {**GRIDS[grid], "perturb": True}
    if grid == "grid_constructor" and t[0] > t[-1]:
        options["grid_constructor"] = lambda f, y0, t: uneven_grid(f, y0, t.flip(0)).flip(0)
    ours, theirs = both(method, jump_at_half, Y0, t, options=options)
    torch.testing.assert_close(ours, theirs, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("method", LAST_STAGE_AT_END)
def test_perturb_changes_the_answer_at_a_jump(method):
    # Guards the comparison above: without perturb the last stage of the step that
    # ends at 0.5 sees f after the jump.
    plain = odecore.odeint(jump_at_half, Y0, T, method=method)
    limited = odecore.odeint(jump_at_half, Y0, T, method=method, options={"perturb": True})
    assert not torch.allclose(plain[1], limited[1])
    # Steps that end on the jump see the limit from before it: exp(t) up to 0.5.
    exact = math.exp(0.5)
    assert abs(limited[1, 0].item() - exact) < abs(plain[1, 0].item() - exact)


def test_perturb_with_n_steps_matches_step_size():
    a = odecore.odeint(jump_at_half, Y0, T, method="rk4", options={"n_steps": 4, "perturb": True})
    b = odecore.odeint(
        jump_at_half, Y0, T, method="rk4", options={"step_size": 0.25, "perturb": True}
    )
    torch.testing.assert_close(a, b, rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("t", [T, T.flip(0)], ids=["forward", "backward"])
@pytest.mark.parametrize("method", ["euler", "midpoint", "rk4", "implicit_euler"])
def test_perturb_with_step_size_keeps_the_time_gradients(method, t):
    # On a smooth field the one-sided limits are f itself: the solve and its
    # gradients are those without perturb. The steps of size 0.3 from t[0] (the last
    # one shorter) move with t[0]; with perturb they landed on constant step ends.
    grads = []
    for perturb in (False, True):
        tt = t.clone().requires_grad_(True)
        ys = odecore.odeint(
            smooth, Y0, tt, method=method, options={"step_size": 0.3, "perturb": perturb}
        )
        grads.append(torch.autograd.grad((ys**2).sum(), tt)[0])
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-12, atol=1e-12)


def test_perturb_must_be_a_bool():
    with pytest.raises(TypeError, match=r"The option `perturb` must be True or False, got 1"):
        odecore.odeint(smooth, Y0, T, method="euler", options={"perturb": 1})


def test_adjoint_perturb_needs_forward_perturb():
    with pytest.raises(ValueError, match=r"`adjoint_options=\{'perturb': True\}` needs"):
        odecore.odeint_adjoint(
            smooth, Y0, T, method="euler", adjoint_options={"perturb": True}, adjoint_params=()
        )


@pytest.mark.parametrize("method", ["euler", "midpoint", "heun3", "rk4_38"])
def test_empty_adjoint_options_are_given_not_the_forward_ones(method):
    # `adjoint_options={}` is torchdiffeq's "no options" for the backward solve: one
    # step per interval of `t`. It read as "not given" and took the forward step_size.
    w = torch.tensor([0.7, 0.3], dtype=F64, requires_grad=True)

    def field(t, y):
        return torch.stack([y[1], -w[0] * torch.sin(y[0]) + w[1] * torch.cos(2.0 * t)])

    grads = []
    for lib, name in ((odecore, method), (torchdiffeq, FIXED_TWINS[method])):
        y0 = Y0.clone().requires_grad_(True)
        ys = lib.odeint_adjoint(
            field, y0, T, method=name, options={"step_size": 0.05}, adjoint_options={},
            adjoint_params=(w,),
        )  # fmt: skip
        grads.append(torch.autograd.grad(ys[1:].sum(), (y0, w)))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-12, atol=1e-12)


# --- the adjoint's norm -------------------------------------------------------------------------


@pytest.mark.parametrize("y0", [Y0, (Y0[:1], Y0[1:])], ids=["tensor", "tuple"])
def test_an_adjoint_norm_takes_the_backward_state_as_torchdiffeq_gives_it(y0):
    # torchdiffeq calls `adjoint_options["norm"]` with (t, y, a, *parameter grads), y
    # and a as the tuple's tensors for a tuple state; it was called with a state like
    # y0, so a norm written for torchdiffeq read other numbers without a word.
    w = torch.tensor([0.7, 0.3], dtype=F64, requires_grad=True)

    def field(t, y):
        if isinstance(y, tuple):
            return (y[1], -w[0] * y[0] + w[1] * torch.sin(t))
        return torch.stack([y[1], -w[0] * y[0] + w[1] * torch.sin(t)])

    results = []
    for lib in (odecore, torchdiffeq):
        shapes = set()

        def norm(parts, shapes=shapes):
            shapes.add(tuple(tuple(p.shape) for p in parts))
            return max(p.pow(2).mean().sqrt() for p in parts[1:-1])  # a seminorm

        ys = lib.odeint_adjoint(
            field, y0, torch.tensor([0.0, 2.0], dtype=F64), rtol=1e-9, atol=1e-9,
            adjoint_options={"norm": norm}, adjoint_params=(w,),
        )  # fmt: skip
        loss = sum(y[-1].sum() for y in ys) if isinstance(ys, tuple) else ys[-1].sum()
        results.append((shapes, torch.autograd.grad(loss, w)[0]))
    (ours, grad), (theirs, expected) = results
    assert ours == theirs
    torch.testing.assert_close(grad, expected, rtol=1e-7, atol=1e-7)


# --- interp and dtype -------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["euler", "midpoint", "heun2", "heun3", "rk4_38"])
def test_cubic_interp_matches_torchdiffeq(method):
    # For order <= 3 odecore's own interpolant is torchdiffeq's cubic Hermite; above,
    # `interp="cubic"` asks for that cubic instead of the interpolant of the method's order.
    t = torch.tensor([0.0, 0.1, 0.37, 0.5, 0.81, 1.0], dtype=F64)
    options = {"step_size": 0.25, "interp": "cubic"}
    ours, theirs = both(method, t=t, options=options)
    torch.testing.assert_close(ours, theirs, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize(
    ("method", "interp", "match"),
    [
        ("euler", "linear", r"`interp='linear'` cannot be honoured: odecore reads times"),
        ("rk4", "linear", r"`interp='linear'` cannot be honoured.*here order 4"),
        ("heun3", "quadratic", r"`interp` must be 'linear' or 'cubic'.*got 'quadratic'"),
    ],
)
def test_interp_errors(method, interp, match):
    with pytest.raises(ValueError, match=match):
        odecore.odeint(smooth, Y0, T, method=method, options={"interp": interp})


def _ball_event(library, method, interface="odeint", step_size=0.1):
    """The event time, the state there and the event time's gradient with respect to
    ``y0`` of a ball with cubic drag falling onto a wavy floor, as ``library`` gives them
    with ``interp="cubic"``."""
    y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)
    event_t, ys = library.odeint_event(
        lambda t, y: torch.stack([y[1], -9.81 - y[1] ** 3 / 10]), y0,
        torch.tensor(0.0, dtype=F64), event_fn=lambda t, y: y[0] - 0.5 * torch.cos(3 * t),
        method=method, options={"step_size": step_size, "interp": "cubic"},
        odeint_interface=getattr(library, interface),
        **({"adjoint_params": ()} if interface == "odeint_adjoint" else {}),
    )  # fmt: skip
    (grad,) = torch.autograd.grad(event_t, y0)
    return event_t, ys[-1], grad


@pytest.mark.parametrize("method", ["rk4_38", "midpoint"])
def test_event_on_the_cubic_interpolant_matches_torchdiffeq(method):
    # torchdiffeq locates a fixed-grid event on the cubic Hermite interpolant of the
    # step's ends; so does odecore with `interp="cubic"`, whatever the method's order,
    # and the event time's gradient goes through that interpolant as well.
    t_ours, y_ours, g_ours = _ball_event(odecore, method)
    t_theirs, y_theirs, g_theirs = _ball_event(torchdiffeq, FIXED_TWINS[method])
    # Both find the root to about 1e-9 (each by its own iteration), not to rounding.
    torch.testing.assert_close(t_ours, t_theirs, rtol=0, atol=1e-8)
    torch.testing.assert_close(y_ours, y_theirs, rtol=0, atol=1e-7)
    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("method", ["rk4", "rk4_38", "gl6"])
def test_event_time_gradient_of_the_adjoint_on_the_cubic_interpolant(method):
    # The adjoint differentiates the continuous problem; at h = 0.01 it agrees with the
    # exact derivative of the discrete scheme (backpropagation) to the scheme's accuracy.
    t_back, _, g_back = _ball_event(odecore, method, step_size=0.01)
    t_adj, _, g_adj = _ball_event(odecore, method, "odeint_adjoint", step_size=0.01)
    assert t_adj.item() == t_back.item()  # the same search on the same interpolant
    torch.testing.assert_close(g_adj, g_back, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("method", ["rk4", "gl6"])
def test_event_time_on_the_cubic_interpolant_converges_at_fourth_order(method):
    # The cubic Hermite interpolant's error is O(h^4): so is the event time's, whatever
    # the method's order above 3 (the guide says so). y' = -y from 1, y = 0.3 at
    # ln(10/3), in the middle of a step at every step size (the interpolant's error
    # varies across the step).
    exact = math.log(10 / 3)
    errors, steps = [], [exact / (3 * 2**k + 0.5) for k in range(4)]
    for h in steps:
        event_t, _ = odecore.odeint_event(
            lambda t, y: -y, torch.ones(1, dtype=F64), torch.tensor(0.0, dtype=F64),
            event_fn=lambda t, y: y[0] - 0.3, method=method,
            options={"step_size": h, "interp": "cubic"},
        )  # fmt: skip
        errors.append(abs(event_t.item() - exact))
    slopes = [
        math.log(e1 / e2) / math.log(h1 / h2)
        for e1, e2, h1, h2 in zip(errors, errors[1:], steps, steps[1:])
    ]
    assert all(3.6 < s < 4.4 for s in slopes), (slopes, errors)


def test_dtype_float64_is_accepted():
    ours = odecore.odeint(smooth, Y0, T, method="dopri5", options={"dtype": torch.float64})
    assert torch.equal(ours, odecore.odeint(smooth, Y0, T, method="dopri5"))


def test_dtype_float32_is_refused():
    with pytest.raises(
        ValueError, match=r"`dtype` can only be torch\.float64 here, got torch\.float32"
    ):
        odecore.odeint(smooth, Y0, T, method="dopri5", options={"dtype": torch.float32})


# --- planned methods --------------------------------------------------------------------------


PLANNED = ["adams"]  # the fixed-grid Adams methods run: tests/odecore/test_adams.py


@pytest.mark.parametrize("method", PLANNED)
def test_planned_methods_say_how_to_run_them_today(method):
    with pytest.raises(
        odecore.ConfigurationError,
        match=rf"`method` '{method}' is planned for odecore but not built yet.*"
        rf"`method='torchdiffeq:{method}'` runs it today in torchdiffeq",
    ):
        odecore.odeint(smooth, Y0, T, method=method)


@pytest.mark.parametrize("method", ["explicit_adams", "implicit_adams", "fixed_adams"])
def test_fixed_grid_adams_methods_run_here(method):
    # At torchdiffeq's max_order (explicit_adams' own default is 5: stable steps).
    options = {"step_size": 0.05, "max_order": 12}
    ours = odecore.odeint(smooth, Y0, T, method=method, options=options)
    theirs = torchdiffeq.odeint(smooth, Y0, T, method=method, options={"step_size": 0.05})
    torch.testing.assert_close(ours, theirs)  # the same scheme; tests/odecore/test_adams.py


def test_planned_adams_runs_through_torchdiffeq():
    ours = odecore.odeint(smooth, Y0, T, method="torchdiffeq:implicit_adams")
    theirs = torchdiffeq.odeint(smooth, Y0, T, method="implicit_adams")
    assert torch.equal(ours, theirs)


def test_unknown_method_names_scipy_solver():
    with pytest.raises(ValueError, match=r"also as 'scipy_solver' with options=\{'solver'"):
        odecore.odeint(smooth, Y0, T, method="rk45")

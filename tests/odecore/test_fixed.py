"""Fixed-step schemes: empirical convergence order, off-grid output, step counts."""

from __future__ import annotations

import math

import numpy as np
import odecore
import oracles
import pytest
import torch

FIXED = sorted(odecore.FIXED_METHODS)
ORDER = {name: cls.order for name, cls in odecore.FIXED_METHODS.items()}
PROBLEMS = [oracles.decay, oracles.cos_growth, oracles.linear_system, oracles.harmonic]

# Coarsest number of steps over the span per order: in the asymptotic range, and
# after four halvings still well above float64 rounding.
N0 = {1: 64, 2: 16, 3: 64, 4: 16}
HALVINGS = 4


def fitted_order(dts: list[float], errors: list[float]) -> float:
    """Slope of log(error) against log(dt), by least squares."""
    return float(np.polyfit(np.log(dts), np.log(errors), 1)[0])


def global_error(prob: oracles.Problem, method: str, t: torch.Tensor, options: dict) -> float:
    y0 = prob.y0_as(torch.float64)
    ys = odecore.odeint(prob.f, y0, t, method=method, options=options)
    return float((ys - prob.exact(t, y0)).abs().max())


def test_fixed_methods_are_the_seven_schemes():
    # heun2 is torchdiffeq's name of heun.
    assert FIXED == ["euler", "heun", "heun2", "heun3", "midpoint", "ralston", "rk4", "rk4_38"]
    assert odecore.FIXED_METHODS["heun2"] is odecore.Heun
    assert ORDER == {
        "euler": 1,
        "midpoint": 2,
        "heun": 2,
        "heun2": 2,
        "heun3": 3,
        "ralston": 2,
        "rk4": 4,
        "rk4_38": 4,
    }


@pytest.mark.parametrize("prob", PROBLEMS, ids=repr)
@pytest.mark.parametrize("method", FIXED)
def test_convergence_order(method, prob):
    order = ORDER[method]
    span = prob.t1 - prob.t0
    t = torch.tensor([prob.t0, prob.t1], dtype=torch.float64)
    ns = [N0[order] * 2**k for k in range(HALVINGS + 1)]
    errors = [global_error(prob, method, t, {"n_steps": n}) for n in ns]
    slope = fitted_order([span / n for n in ns], errors)
    assert abs(slope - order) < 0.2, (slope, errors)


@pytest.mark.parametrize("prob", [oracles.decay, oracles.harmonic], ids=repr)
@pytest.mark.parametrize("method", FIXED)
def test_convergence_order_at_off_grid_times(method, prob):
    # Output times that are not on the step grid (and a step size that divides
    # neither the span nor any interval) are interpolated to the scheme's order.
    order = ORDER[method]
    span = prob.t1 - prob.t0
    fractions = torch.tensor([0.0, 0.137, 0.31, 0.5, 0.77, 0.913, 1.0], dtype=torch.float64)
    t = prob.t0 + span * fractions
    dts = [span / (N0[order] * 2**k + 0.37) for k in range(HALVINGS + 1)]
    errors = [global_error(prob, method, t, {"step_size": dt}) for dt in dts]
    slope = fitted_order(dts, errors)
    assert abs(slope - order) < 0.2, (slope, errors)


@pytest.mark.parametrize("method", FIXED)
def test_default_is_one_step_per_interval(method):
    # torchdiffeq's convention: without step_size/n_steps, the grid is `t` itself.
    prob = oracles.decay
    y0 = prob.y0_as()
    t = torch.tensor([0.0, 0.1, 0.25, 0.3], dtype=torch.float64)
    ys = odecore.odeint(prob.f, y0, t, method=method)
    expected = [y0]
    for a, b in zip(t[:-1].tolist(), t[1:].tolist()):
        step = odecore.solve(
            prob.f, expected[-1], t0=a, t1=b, solver=odecore.FIXED_METHODS[method](), dt0=b - a
        )
        expected.append(step.ys[-1])
    torch.testing.assert_close(ys, torch.stack(expected), rtol=0, atol=1e-15)


@pytest.mark.parametrize("method", FIXED)
def test_off_grid_output_does_not_change_the_grid(method):
    # The values at on-grid times are the same whether or not off-grid times are asked for.
    prob = oracles.linear_system
    y0 = prob.y0_as()
    coarse = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
    fine = torch.tensor([0.0, 0.13, 0.5, 0.61, 0.97, 1.0], dtype=torch.float64)
    options = {"step_size": 0.125}
    ys_coarse = odecore.odeint(prob.f, y0, coarse, method=method, options=options)
    ys_fine = odecore.odeint(prob.f, y0, fine, method=method, options=options)
    torch.testing.assert_close(ys_fine[[0, 2, 5]], ys_coarse, rtol=0, atol=0)


# --- step counts and NFE --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("t1", "dt0", "steps"),
    [
        (1.0, 0.25, 4),
        (1.0, 0.1, 10),
        (1.0, 0.3, 4),
        (2.0, 1 / 3, 6),
        (1.0, 2.0, 1),
        (-1.0, 0.25, 4),
    ],
)
@pytest.mark.parametrize("method", FIXED)
def test_constant_step_count_and_nfe(method, t1, dt0, steps):
    solver = odecore.FIXED_METHODS[method]()
    sol = odecore.solve(
        oracles.decay.f,
        oracles.decay.y0_as(),
        t0=0.0,
        t1=t1,
        solver=solver,
        controller=odecore.ConstantStepSize(),
        dt0=dt0,
    )
    assert sol.status == odecore.Status.SUCCESS
    assert sol.stats.n_accepted == steps
    assert sol.stats.n_rejected == 0
    assert sol.stats.n_steps == steps
    assert sol.stats.nfe == solver.tableau.stages * steps


class CountingField:
    """A vector field that counts its evaluations and records their times."""

    def __init__(self, f):
        self.f = f
        self.times: list[float] = []

    @property
    def nfe(self) -> int:
        return len(self.times)

    def __call__(self, t, y):
        self.times.append(float(t))
        return self.f(t, y)


@pytest.mark.parametrize("n_steps", [1, 7, 16])
@pytest.mark.parametrize("method", FIXED)
def test_n_steps_option(method, n_steps):
    field = CountingField(oracles.decay.f)
    t = torch.tensor([0.0, 1.5], dtype=torch.float64)
    odecore.odeint(field, oracles.decay.y0_as(), t, method=method, options={"n_steps": n_steps})
    stages = odecore.FIXED_METHODS[method].tableau.stages
    assert field.nfe == stages * n_steps
    # Every step starts on the uniform grid, where f0 is evaluated.
    grid = np.linspace(0.0, 1.5, n_steps + 1)[:-1]
    evaluated = np.array(field.times)
    assert np.abs(evaluated[None, :] - grid[:, None]).min(axis=1).max() < 1e-12


@pytest.mark.parametrize("method", FIXED)
def test_n_steps_spans_the_whole_interval_not_each(method):
    # n_steps is the number of uniform steps over the whole span, whatever `t` holds.
    field = CountingField(oracles.decay.f)
    t = torch.tensor([0.0, 0.5, 1.0, 1.5], dtype=torch.float64)
    odecore.odeint(field, oracles.decay.y0_as(), t, method=method, options={"n_steps": 3})
    stages = odecore.FIXED_METHODS[method].tableau.stages
    assert field.nfe == stages * 3


@pytest.mark.parametrize(("step_size", "steps"), [(0.5, 3), (0.25, 6), (0.4, 4), (0.7, 3)])
@pytest.mark.parametrize("method", ["euler", "rk4"])
def test_step_size_option(method, step_size, steps):
    field = CountingField(oracles.decay.f)
    t = torch.tensor([0.0, 1.5], dtype=torch.float64)
    odecore.odeint(field, oracles.decay.y0_as(), t, method=method, options={"step_size": step_size})
    assert field.nfe == odecore.FIXED_METHODS[method].tableau.stages * steps


@pytest.mark.parametrize(("method", "nodes"), [("euler", 0), ("heun", 0), ("rk4", 1)])
def test_off_grid_outputs_cost_once_per_step(method, nodes):
    # Interpolation inside a step builds one Hermite interpolant per step that holds
    # output times: `nodes` sub-steps reusing f0 (stages - 1 evaluations each) plus
    # the derivative there, and f(t1, y1); nothing for times on the grid.
    stages = odecore.FIXED_METHODS[method].tableau.stages
    field = CountingField(oracles.decay.f)
    t = torch.tensor([0.0, 0.25, 0.3, 0.35, 0.5, 0.9, 1.0], dtype=torch.float64)
    odecore.odeint(field, oracles.decay.y0_as(), t, method=method, options={"step_size": 0.25})
    holding = 2  # [0.25, 0.5] holds 0.3 and 0.35, [0.75, 1] holds 0.9
    assert field.nfe == stages * 4 + holding * (nodes * stages + 1)


@pytest.mark.parametrize("method", FIXED)
def test_one_step_is_the_truncated_exponential_series(method):
    # One step of every scheme on y' = -y from 1 is the truncated series of exp(-h),
    # to the scheme's order, for these linear constant-coefficient problems.
    h = 0.1
    t = torch.tensor([0.0, h], dtype=torch.float64)
    ys = odecore.odeint(lambda t, y: -y, torch.ones(1, dtype=torch.float64), t, method=method)
    order = ORDER[method]
    series = sum((-h) ** k / math.factorial(k) for k in range(order + 1))
    assert ys[-1].item() == pytest.approx(series, rel=0, abs=1e-15)

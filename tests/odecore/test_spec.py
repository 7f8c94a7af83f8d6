"""``OdeSpec``: the one place a method name and options become odecore's objects."""

from __future__ import annotations

import math

import odecore
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

METHODS = sorted([*odecore.FIXED_METHODS, *odecore.ADAPTIVE_METHODS])


def _field(t, y):
    return torch.sin(t) * y - 0.3 * y**3


def test_defaults_are_odeints():
    """One set of library defaults: a bare spec is odeint's and solve's default solve."""
    spec = odecore.OdeSpec()
    assert spec == odecore.OdeSpec.from_method()
    assert spec.solver == odecore.Dopri5()
    assert spec.controller == odecore.PIDController(rtol=1e-7, atol=1e-9)
    assert spec.gradient == odecore.Autograd()
    t = torch.linspace(0.0, 2.0, 5, dtype=torch.float64)
    y0 = torch.tensor([0.5, -1.0], dtype=torch.float64)
    sol = odecore.solve(
        _field, y0, t0=0.0, t1=2.0, solver=spec.solver, controller=spec.controller,
        saveat=odecore.SaveAt(ts=t),
    )  # fmt: skip
    assert torch.equal(sol.ys, odecore.odeint(_field, y0, t))


@settings(max_examples=30, deadline=None)
@given(
    method=st.sampled_from(METHODS),
    tol=st.sampled_from([1e-3, 1e-6]),
    # The reversible method solves another (coupled) scheme: test_reversible.py checks it.
    gradient=st.sampled_from(sorted(set(odecore.GRADIENTS) - {"reversible"})),
)
def test_spec_solves_as_odeint(method, tol, gradient):
    """``solve`` with the spec's objects gives odeint's answer bit for bit."""
    options = {"step_size": 0.25} if method in odecore.FIXED_METHODS else {"first_step": 0.1}
    spec = odecore.OdeSpec.from_method(
        method, rtol=tol, atol=tol, gradient=gradient, options=options
    )
    assert isinstance(spec.gradient, odecore.GRADIENTS[gradient])
    y0 = torch.tensor([0.5, -1.0], dtype=torch.float64)
    t = torch.tensor([0.0, 1.0], dtype=torch.float64)
    ours = odecore.solve(
        _field, y0, t0=0.0, t1=1.0, solver=spec.solver, controller=spec.controller,
        dt0=spec.step_size(0.0, 1.0), saveat=odecore.SaveAt(ts=t), gradient=spec.gradient,
    ).ys  # fmt: skip
    reference = odecore.odeint(_field, y0, t, rtol=tol, atol=tol, method=method, options=options)
    assert torch.equal(ours, reference)


def test_n_steps_is_a_step_size_over_the_span():
    spec = odecore.OdeSpec.from_method("rk4", options={"n_steps": 8})
    assert spec.n_steps == 8 and spec.dt0 is None
    assert spec.step_size(1.0, 3.0) == 0.25
    assert spec.step_size(3.0, 1.0) == 0.25
    y0 = torch.ones(1, dtype=torch.float64)
    sol = odecore.solve(
        lambda t, y: -y, y0, t0=0.0, t1=2.0, solver=spec.solver, controller=spec.controller,
        dt0=spec.step_size(0.0, 2.0),
    )  # fmt: skip
    assert sol.stats.n_steps == 8
    assert math.isclose(sol.ys[-1].item(), math.exp(-2.0), rel_tol=1e-4)


def test_adaptive_options_reach_the_controller():
    spec = odecore.OdeSpec.from_method(
        "tsit5",
        rtol=1e-4,
        atol=1e-6,
        options={"safety": 0.8, "ifactor": 5.0, "dfactor": 0.3, "max_step": 0.5, "min_step": 1e-6},
    )
    assert spec.controller == odecore.PIDController(
        rtol=1e-4, atol=1e-6, safety=0.8, factor_max=5.0, factor_min=0.3, dt_max=0.5, dt_min=1e-6
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"method": "dopri"}, ValueError, r"Unknown `method` 'dopri'; known methods: .*dopri5"),
        ({"gradient": "adjiont"}, ValueError, r"Unknown `gradient` 'adjiont'; known: backprop"),
        ({"rtol": -1.0}, ValueError, r"`rtol` must be a positive number, got -1.0"),
        ({"atol": float("nan")}, ValueError, r"`atol` must be a positive number, got nan"),
        (
            {"method": "rk4", "options": {"first_step": 0.1}},
            ValueError,
            r"Unknown option\(s\) \['first_step'\] for method 'rk4'; known options: step_size",
        ),
        (
            {"method": "dopri5", "options": {"jump_t": [0.5]}},
            ValueError,
            r"Unknown option\(s\) \['jump_t'\] for method 'dopri5'",
        ),
        (
            {"method": "rk4", "options": {"step_size": 0.1, "n_steps": 3}},
            ValueError,
            r"Give one of the options `step_size` and `n_steps`",
        ),
        ({"method": "rk4", "options": {"n_steps": 0}}, ValueError, r"`n_steps` must be a pos"),
        ({"method": "adams"}, ValueError, r"planned for odecore but not built yet"),
        ({"method": 5}, TypeError, r"`method` must be a string, got int"),
        # Both were "Unknown `method`", with a list of known methods that named them.
        (
            {"method": "torchdiffeq:dopri5"},
            ValueError,
            r"`method` 'torchdiffeq:dopri5' has no solver object for OdeSpec or solve: it "
            r"runs only in odeint or odeint_adjoint, .*scipy:BDF",
        ),
        (
            {"method": "scipy_solver"},
            ValueError,
            r"`method` 'scipy_solver' has no solver object .* it runs only in odeint \(with "
            r"options=\{'solver': <name>\}\) or as 'scipy:<name>' here",
        ),
    ],
)
def test_from_method_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        odecore.OdeSpec.from_method(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"solver": "dopri5"},
            r"`solver` must be an odecore AbstractSolver .* OdeSpec.from_method",
        ),
        ({"gradient": "adjoint"}, r"`gradient` must be an odecore AbstractGradient"),
        ({"controller": 1e-3}, r"`controller` must be an odecore AbstractController"),
        ({"n_steps": 4}, r"`n_steps` applies to fixed-step solvers"),
        ({"solver": odecore.RK4(), "n_steps": 4, "dt0": 0.1}, r"Give one of `dt0` and `n_steps`"),
        ({"solver": odecore.RK4(), "n_steps": 0}, r"`n_steps` must be a positive integer"),
        ({"dt0": -0.1}, r"`dt0` must be a positive number"),
        ({"max_steps": 0}, r"`max_steps` must be a positive integer"),
    ],
)
def test_spec_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        odecore.OdeSpec(**kwargs)


def test_controller_default_follows_the_solver():
    assert odecore.OdeSpec(solver=odecore.Euler()).controller == odecore.ConstantStepSize()
    assert odecore.OdeSpec(solver=odecore.Bosh3()).controller == odecore.PIDController()


def test_scipy_methods_resolve_too():
    pytest.importorskip("scipy")
    spec = odecore.OdeSpec.from_method(
        "scipy:LSODA", rtol=1e-5, atol=1e-7, options={"min_step": 1e-8, "max_step": 0.5}
    )
    assert spec.solver.min_step == 1e-8
    assert spec.controller == odecore.PIDController(rtol=1e-5, atol=1e-7, dt_max=0.5)

"""The problems: shapes, the NFE counter, and the linear system's exact solution."""

from __future__ import annotations

import odecore
import pytest
import torch
from odebench.perf._problems import (
    PROBLEMS,
    ConvField,
    CountingField,
    Sizes,
    make_problem,
    max_abs_error,
    reference_solution,
)

F64 = torch.float64
SMALL = Sizes.quick()


@pytest.mark.parametrize("name", PROBLEMS)
def test_field_returns_the_state_shape(name):
    problem = make_problem(name, SMALL)
    out = problem.field(torch.tensor(0.3), problem.y0)
    assert out.shape == problem.y0.shape
    assert out.dtype == problem.y0.dtype
    assert problem.n_parameters > 0


def test_full_sizes_are_the_issue_sizes():
    assert make_problem("mlp").y0.shape == (256, 32)
    assert make_problem("conv_relu").y0.shape == (32, 16, 8, 8)
    assert make_problem("vdp").y0.shape == (64, 2)
    assert make_problem("vdp").t1 == 5.0


def test_problems_are_reproducible():
    a, b = make_problem("mlp", SMALL, seed=3), make_problem("mlp", SMALL, seed=3)
    torch.testing.assert_close(a.y0, b.y0)
    for p, q in zip(a.field.parameters(), b.field.parameters()):
        torch.testing.assert_close(p, q)


def test_conv_field_uses_time():
    field = ConvField(4, "softplus")
    y = torch.randn(2, 4, 5, 5)
    assert not torch.allclose(field(torch.tensor(0.0), y), field(torch.tensor(1.0), y))


def test_conv_field_rejects_unknown_activation():
    with pytest.raises(ValueError, match="`activation` must be 'relu' or 'softplus', got 'gelu'"):
        ConvField(4, "gelu")


def test_unknown_problem():
    with pytest.raises(ValueError, match="Unknown problem 'spiral'; known problems: mlp"):
        make_problem("spiral")


def test_counting_field_counts_calls():
    counter = CountingField(make_problem("linear", SMALL).field)
    y = torch.ones(3, SMALL.linear_state)
    for _ in range(5):
        counter(torch.tensor(0.0), y)
    assert counter.nfe == 5


def test_counting_field_agrees_with_odecore_stats():
    problem = make_problem("mlp", SMALL)
    counter = CountingField(problem.field)
    sol = odecore.solve(
        counter, problem.y0, t0=0.0, t1=1.0, solver=odecore.Dopri5(),
        controller=odecore.PIDController(rtol=1e-5, atol=1e-5),
    )  # fmt: skip
    assert counter.nfe == sol.stats.nfe > 0


def test_counting_field_counts_the_adjoints_backward_pass():
    problem = make_problem("mlp", SMALL)
    counter = CountingField(problem.field)
    y0 = problem.y0.clone().requires_grad_(True)
    sol = odecore.solve(
        counter, y0, t0=0.0, t1=1.0, solver=odecore.Dopri5(),
        controller=odecore.PIDController(rtol=1e-4, atol=1e-4), gradient=odecore.Adjoint(),
    )  # fmt: skip
    forward = counter.nfe
    assert forward == sol.stats.nfe
    sol.ys[-1].sum().backward()
    assert counter.nfe - forward == sol.stats.nfe_backward > 0


def test_counting_field_passes_parameters_through():
    problem = make_problem("mlp", SMALL)
    counter = CountingField(problem.field)
    assert list(counter.parameters()) == list(problem.field.parameters())


def test_linear_exact_solution_matches_a_tight_solve():
    problem = make_problem("linear", SMALL, dtype=F64)
    t = torch.tensor([problem.t0, problem.t1], dtype=F64)
    ys = odecore.odeint(problem.field, problem.y0, t, rtol=1e-11, atol=1e-12, method="dopri5")
    assert problem.exact is not None
    torch.testing.assert_close(ys[-1], problem.exact, rtol=1e-8, atol=1e-9)


def test_linear_exact_solution_at_time_zero_is_y0():
    problem = make_problem("linear", SMALL, dtype=F64)
    torch.testing.assert_close(problem.field.exact(problem.y0, 0.0), problem.y0)


def test_linear_system_decays():
    # A = S - 0.5 I with S skew: |y(t)| = exp(-0.5 t) |y0| for every row.
    problem = make_problem("linear", SMALL, dtype=F64)
    norms = problem.exact.norm(dim=-1) / problem.y0.norm(dim=-1)
    torch.testing.assert_close(norms, torch.full_like(norms, torch.exp(torch.tensor(-0.5)).item()))


def test_reference_of_the_linear_system_is_exact():
    problem = make_problem("linear", SMALL)
    ref, note = reference_solution(problem)
    assert note == "exact solution"
    assert ref.dtype == F64


def test_reference_of_van_der_pol_is_a_tight_solve():
    problem = make_problem("vdp", SMALL)
    ref, note = reference_solution(problem, tol=1e-9)
    assert "dopri8" in note
    t = torch.tensor([problem.t0, problem.t1], dtype=F64)
    field64 = make_problem("vdp", SMALL, dtype=F64).field
    ys = odecore.odeint(field64, problem.y0.to(F64), t, rtol=1e-9, atol=1e-9, method="tsit5")
    assert max_abs_error(ys[-1], ref) < 1e-5

"""Property tests (Hypothesis) over state shapes, dtypes and batches."""

from __future__ import annotations

import odecore
import oracles
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

FIXED = {"euler": {"n_steps": 9}, "midpoint": {"n_steps": 5}, "rk4": {"step_size": 0.13}}
ADAPTIVE = ["bosh3", "dopri5", "tsit5", "dopri8"]
DTYPES = [torch.float32, torch.float64]

shapes = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)
batched_shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)
dtypes = st.sampled_from(DTYPES)
seeds = st.integers(0, 2**16)


def field(t, y):
    """Elementwise, nonlinear and time-dependent: each batch element evolves alone."""
    return -0.5 * y + torch.sin(t) * y**2 / (1 + y**2) + 0.1 * torch.cos(3 * t)


def state(shape, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)


T = torch.tensor([0.0, 0.3, 0.75, 1.2], dtype=torch.float64)


def tolerance(method, dtype):
    """rtol = atol of an adaptive solve: float32 cannot go much below 1e-5, and the
    third-order bosh3 gets slow below 1e-6."""
    tol = 1e-5 if dtype == torch.float32 else 1e-8
    return 100 * tol if method == "bosh3" else tol


def solve(y0, method, t=T):
    options = FIXED.get(method, {})
    tol = tolerance(method, y0.dtype)
    return odecore.odeint(
        field, y0, t.to(y0.dtype), rtol=tol, atol=tol, method=method, options=options
    )


@pytest.mark.parametrize("method", [*FIXED, *ADAPTIVE])
@SETTINGS
@given(shape=shapes, dtype=dtypes, seed=seeds)
def test_shape_and_dtype_preserved(method, shape, dtype, seed):
    y0 = state(shape, dtype, seed)
    ys = solve(y0, method)
    assert ys.shape == (len(T), *shape)
    assert ys.dtype == dtype
    assert torch.equal(ys[0], y0)
    assert bool(torch.isfinite(ys).all())


@pytest.mark.parametrize("method", list(FIXED))
@SETTINGS
@given(shape=batched_shapes, dtype=dtypes, seed=seeds, data=st.data())
def test_permuting_the_batch_permutes_the_result_exactly_fixed(method, shape, dtype, seed, data):
    y0 = state(shape, dtype, seed)
    perm = torch.tensor(data.draw(st.permutations(range(shape[0]))))
    assert torch.equal(solve(y0[perm], method), solve(y0, method)[:, perm])


@pytest.mark.parametrize("method", ADAPTIVE)
@SETTINGS
@given(shape=batched_shapes, dtype=dtypes, seed=seeds, data=st.data())
def test_permuting_the_batch_permutes_the_result_adaptive(method, shape, dtype, seed, data):
    # The rms error norm is permutation invariant up to the order of summation, so
    # the steps, and the result, agree to rounding and in any case within tolerance.
    y0 = state(shape, dtype, seed)
    perm = torch.tensor(data.draw(st.permutations(range(shape[0]))))
    tol = tolerance(method, dtype)
    torch.testing.assert_close(
        solve(y0[perm], method), solve(y0, method)[:, perm], rtol=tol, atol=tol
    )


@pytest.mark.parametrize("method", list(FIXED))
@SETTINGS
@given(shape=batched_shapes, dtype=dtypes, seed=seeds, data=st.data())
def test_splitting_the_batch_changes_nothing_fixed(method, shape, dtype, seed, data):
    if shape[0] < 2:
        shape = (2, *shape[1:])
    y0 = state(shape, dtype, seed)
    k = data.draw(st.integers(1, shape[0] - 1))
    whole = solve(y0, method)
    parts = torch.cat([solve(y0[:k], method), solve(y0[k:], method)], dim=1)
    assert torch.equal(parts, whole)


@pytest.mark.parametrize("method", ADAPTIVE)
@SETTINGS
@given(shape=batched_shapes, seed=seeds, data=st.data())
def test_splitting_the_batch_adaptive_within_tolerance(method, shape, seed, data):
    # Each part takes its own steps (one step size per solve), so the results agree
    # within the tolerance, not exactly.
    if shape[0] < 2:
        shape = (2, *shape[1:])
    y0 = state(shape, torch.float64, seed)
    k = data.draw(st.integers(1, shape[0] - 1))
    whole = solve(y0, method)
    parts = torch.cat([solve(y0[:k], method), solve(y0[k:], method)], dim=1)
    tol = 10 * tolerance(method, torch.float64)
    torch.testing.assert_close(parts, whole, rtol=tol, atol=tol)


@pytest.mark.parametrize("method", [*FIXED, *ADAPTIVE])
@SETTINGS
@given(shape=shapes, seed=seeds)
def test_float32_close_to_float64(method, shape, seed):
    y64 = state(shape, torch.float64, seed)
    ys64 = solve(y64, method)
    ys32 = solve(y64.float(), method)
    assert ys32.dtype == torch.float32
    tol = 10 * tolerance(method, torch.float32)
    torch.testing.assert_close(ys32.double(), ys64, rtol=tol, atol=tol)


@pytest.mark.parametrize("solver", oracles.RK_SOLVERS, ids=lambda cls: cls.__name__)
@SETTINGS
@given(seed=seeds, h=st.floats(1e-4, 1e-2))
def test_a_float32_step_is_the_exact_step_correctly_rounded(solver, seed, h):
    """The stages are summed before they join ``y0``, so ``y1`` is rounded once.

    Adding each stage to ``y0`` in turn rounds at ``y0``'s scale once per stage:
    up to 1.5-3.5 units in the last place, and most of a float32 solve's error at
    tight tolerances. The reference is the same step in float64 from the same
    float32 ``y0``. Half a unit is the rounding of ``y1`` itself; the stages' own
    rounding, through ``h`` times coefficients up to ~10 (Tsit5), adds a few hundredths.
    """
    gen = torch.Generator().manual_seed(seed)
    y0 = (1 + torch.rand(20_000, generator=gen)).float()

    def f(t, y):
        return torch.cos(y) + t

    step = solver().step
    y1 = step(f, 0.0, h, y0, f(0.0, y0)).y1
    exact = step(f, 0.0, h, y0.double(), f(0.0, y0.double())).y1
    ulp = torch.finfo(torch.float32).eps * torch.exp2(torch.floor(torch.log2(exact.abs())))
    assert float(((y1.double() - exact).abs() / ulp).max()) <= 0.6


@pytest.mark.parametrize("method", ["rk4", "dopri5", "tsit5"])
@SETTINGS
@given(shape=shapes, seed=seeds)
def test_forward_then_back_recovers_y0(method, shape, seed):
    y0 = state(shape, torch.float64, seed)
    fwd = solve(y0, method)
    back = solve(fwd[-1], method, t=T.flip(0))
    tol = 1e-5 if method == "rk4" else 10 * tolerance(method, torch.float64)
    torch.testing.assert_close(back[-1], y0, rtol=tol, atol=tol)


@SETTINGS
@given(
    t1=st.floats(0.05, 3.0),
    n=st.integers(1, 30),
    method=st.sampled_from(sorted(odecore.FIXED_METHODS)),
)
def test_n_steps_counts(t1, n, method):
    stages = odecore.FIXED_METHODS[method].tableau.stages
    calls = []

    def counted(t, y):
        calls.append(float(t))
        return -y

    odecore.odeint(
        counted,
        torch.ones(1, dtype=torch.float64),
        torch.tensor([0.0, t1], dtype=torch.float64),
        method=method,
        options={"n_steps": n},
    )
    assert len(calls) == stages * n
    assert max(calls) <= t1

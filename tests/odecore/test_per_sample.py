"""Per-sample step sizes (``PIDController(per_sample=True)``) and Rodas4's counts."""

from __future__ import annotations

import math

import odecore
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from odecore import Dopri5, PIDController, Rodas4, Rodas5P, Tsit5

F64 = torch.float64
SOLVERS = [Dopri5(), Tsit5(), Rodas4(independent=True)]
IDS = ["dopri5", "tsit5", "rodas4"]


def _rows(rtol=1e-8, atol=1e-10, **kwargs):
    return PIDController(rtol=rtol, atol=atol, per_sample=True, **kwargs)


def _vdp(mu):
    def f(t, y):
        x, v = y[..., :1], y[..., 1:]
        return torch.cat([v, mu * (1 - x * x) * v - x], dim=-1)

    return f


# Eight Van der Pol oscillators, mu from 1 to 1000 as a (B, 1) tensor.
MU = torch.logspace(0, 3, 8, dtype=F64).unsqueeze(1)
VDP_Y0 = torch.stack([torch.linspace(1.0, 2.0, 8), torch.zeros(8)], dim=1).to(F64)


def _linear():
    """Per-sample ``y' = A_b y``: decays and rotations of different rates."""
    rates = torch.tensor([0.1, 1.0, 5.0, 20.0], dtype=F64)
    freqs = torch.tensor([0.0, 2.0, 0.5, 8.0], dtype=F64)
    a = torch.stack(
        [torch.stack([-rates, freqs], -1), torch.stack([-freqs, -rates], -1)], dim=1
    )  # (B, 2, 2)
    y0 = torch.tensor([[1.0, 0.0], [0.5, -1.0], [2.0, 1.0], [-1.0, 0.3]], dtype=F64)
    return a, y0


def _linear_field(a):
    def f(t, y):
        return torch.einsum("bij,bj->bi", a, y)

    return f


# --- against each system alone -----------------------------------------------------------


@torch.no_grad()
@pytest.mark.parametrize("solver", [Rodas4(independent=True), Rodas5P(independent=True)],
                         ids=["rodas4", "rodas5p"])  # fmt: skip
def test_van_der_pol_batch_equals_each_system_alone(solver):
    control = _rows(rtol=1e-6, atol=1e-6)
    alone = PIDController(rtol=1e-6, atol=1e-6)
    sol = odecore.solve(_vdp(MU), VDP_Y0, t0=0.0, t1=20.0, solver=solver, controller=control)
    for b in range(8):
        one = odecore.solve(
            _vdp(MU[b : b + 1]), VDP_Y0[b : b + 1], t0=0.0, t1=20.0, solver=solver,
            controller=alone,
        )  # fmt: skip
        torch.testing.assert_close(sol.ys[-1, b], one.ys[-1, 0], rtol=1e-6, atol=1e-6)
        # The same steps: the controller judges a sample as it judges it alone.
        assert int(sol.n_accepted_per_sample[b]) == one.stats.n_accepted
        assert int(sol.n_rejected_per_sample[b]) == one.stats.n_rejected
    assert sol.status == odecore.Status.SUCCESS


@torch.no_grad()
@pytest.mark.parametrize("solver", SOLVERS, ids=IDS)
@pytest.mark.parametrize("t1", [1.5, -1.5], ids=["forward", "backward"])
def test_linear_system_meets_the_closed_form(solver, t1):
    a, y0 = _linear()
    exact = torch.einsum("bij,bj->bi", torch.linalg.matrix_exp(a * t1), y0)
    sol = odecore.solve(
        _linear_field(a), y0, t0=0.0, t1=t1, solver=solver, controller=_rows(),
        saveat=odecore.SaveAt(ts=[0.0, t1]),
    )  # fmt: skip
    assert sol.ys.shape == (2, 4, 2)
    torch.testing.assert_close(sol.ys[0], y0, rtol=0, atol=0)
    scale = exact.abs().amax(dim=1, keepdim=True).clamp(min=1.0)
    assert ((sol.ys[-1] - exact).abs() / scale).max() < 1e-6
    # A slow decay takes fewer steps than a fast rotation.
    assert sol.n_accepted_per_sample[0] < sol.n_accepted_per_sample[3]


@torch.no_grad()
@pytest.mark.parametrize("solver", SOLVERS, ids=IDS)
def test_output_times_inside_the_span_meet_the_closed_form(solver):
    # Each sample reaches an output time in a step of its own, and reads it off that
    # step's dense output.
    a, y0 = _linear()
    ts = torch.tensor([0.0, 0.1, 0.37, 0.8, 0.8, 1.5], dtype=F64)
    exact = torch.einsum("kbij,bj->kbi", torch.linalg.matrix_exp(a * ts.view(-1, 1, 1, 1)), y0)
    sol = odecore.solve(
        _linear_field(a), y0, t0=0.0, t1=1.5, solver=solver, controller=_rows(),
        saveat=odecore.SaveAt(ts=ts),
    )  # fmt: skip
    assert sol.ys.shape == (6, 4, 2)
    assert (sol.ys - exact).abs().max() < 1e-7


@pytest.mark.parametrize("solver", SOLVERS, ids=IDS)
def test_each_sample_reads_its_own_time(solver):
    # y' = k cos(t): y(t) = y0 + k sin(t), with t each sample's own time.
    k = torch.tensor([[0.5], [3.0], [20.0]], dtype=F64)
    shapes = set()

    def f(t, y):
        shapes.add(tuple(t.shape))
        return k * torch.cos(t).unsqueeze(-1)

    y0 = torch.zeros(3, 1, dtype=F64)
    sol = odecore.solve(f, y0, t0=0.0, t1=4.0, solver=solver, controller=_rows())
    torch.testing.assert_close(sol.ys[-1], k * math.sin(4.0), rtol=1e-6, atol=1e-7)
    assert shapes == {(3,)}


@pytest.mark.parametrize("solver", [Rodas4(independent=True), Rodas5P(independent=True)],
                         ids=["rodas4", "rodas5p"])  # fmt: skip
@torch.no_grad()
def test_a_rosenbrock_step_far_from_time_zero_takes_the_shared_steps(solver):
    # A stiff mode forced by the time, far from t = 0: each sample's df/dt is a difference
    # in its own time, as the shared loop takes it, not eps^(1/3) of a step (which 1e6
    # drowns in rounding: 84,683 steps for rodas4 where the shared loop takes 325).
    w, t0 = 2.0, 1e6

    def f(t, y):
        return -1e3 * (y - torch.sin(w * t).unsqueeze(-1)) + w * torch.cos(w * t).unsqueeze(-1)

    y0 = torch.sin(w * torch.tensor([t0, t0], dtype=F64)).unsqueeze(-1)
    kwargs = dict(t0=t0, t1=t0 + 2.0, solver=solver, max_steps=2000)
    shared = odecore.solve(f, y0, controller=PIDController(rtol=1e-6, atol=1e-8), **kwargs)
    rows = odecore.solve(f, y0, controller=_rows(1e-6, 1e-8), **kwargs)
    assert rows.status == odecore.Status.SUCCESS
    assert rows.stats.n_steps <= 1.05 * shared.stats.n_steps
    torch.testing.assert_close(rows.ys[-1], shared.ys[-1], rtol=0.0, atol=1e-7)


def _random_system(seed, batch, n, nonlinear):
    """``y' = k_b A_b y (+ w_b sin(y) cos(t) - tanh(y)^3)`` per sample: ``A``, ``w`` and the
    closed-over ``k`` (one per sample) require grad."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(batch, n, n, generator=g, dtype=F64) - 2 * torch.eye(n, dtype=F64)
    w = torch.randn(batch, n, generator=g, dtype=F64)
    k = torch.rand(batch, 1, generator=g, dtype=F64) + 0.5
    y0 = torch.randn(batch, n, generator=g, dtype=F64)
    return a, w, k, y0


def _random_field(a, w, k, nonlinear):
    def f(t, y):
        out = k * torch.einsum("bij,bj->bi", a, y)
        if nonlinear:
            out = out + w * torch.sin(y) * torch.cos(t).unsqueeze(-1) - torch.tanh(y) ** 3
        return out

    return f


@settings(max_examples=6, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    batch=st.integers(1, 5),
    n=st.integers(1, 3),
    nonlinear=st.booleans(),
    solver=st.sampled_from(
        [Dopri5(), Tsit5(), odecore.Bosh3(), Rodas4(independent=True), Rodas5P(independent=True)]
    ),
    rtol=st.floats(1e-8, 1e-4),
    atol=st.floats(1e-9, 1e-5),
    t1=st.sampled_from([0.7, -0.7]),
    ts=st.lists(st.floats(0.05, 0.65), max_size=2),
)
def test_a_batch_is_each_sample_solved_alone(seed, batch, n, nonlinear, solver, rtol, atol,
                                             t1, ts):  # fmt: skip
    # States, output times, each sample's step counts, the status and the gradients
    # by y0, the field's tensors and a closed-over one: each sample's are those of
    # its own solve (a batch of one), to rounding.
    a, w, k, y0 = _random_system(seed, batch, n, nonlinear)
    leaves = [x.requires_grad_() for x in (y0, a, w, k)]
    kwargs = dict(
        t0=0.0, t1=t1, solver=solver, controller=_rows(rtol, atol),
        saveat=odecore.SaveAt(ts=sorted({math.copysign(t, t1) for t in ts}, key=abs), t1=True),
    )  # fmt: skip
    sol = odecore.solve(_random_field(a, w, k, nonlinear), y0, **kwargs)
    weights = torch.linspace(1.0, 2.0, sol.ys.numel(), dtype=F64).reshape(sol.ys.shape)
    grads = torch.autograd.grad((sol.ys * weights).sum(), leaves, materialize_grads=True)
    assert sol.status == odecore.Status.SUCCESS
    for b in range(batch):
        mine = [x[b : b + 1].detach().requires_grad_() for x in leaves]
        one = odecore.solve(_random_field(*mine[1:], nonlinear), mine[0], **kwargs)
        assert one.status == sol.status and torch.equal(one.ts, sol.ts)
        assert int(one.n_accepted_per_sample[0]) == int(sol.n_accepted_per_sample[b])
        assert int(one.n_rejected_per_sample[0]) == int(sol.n_rejected_per_sample[b])
        torch.testing.assert_close(one.ys[:, 0], sol.ys[:, b], rtol=1e-12, atol=1e-14)
        alone = torch.autograd.grad(
            (one.ys * weights[:, b : b + 1]).sum(), mine, materialize_grads=True
        )
        for batched, single in zip(grads, alone, strict=True):
            torch.testing.assert_close(batched[b : b + 1], single, rtol=1e-9, atol=1e-12)


# --- masking ------------------------------------------------------------------------------


def test_a_finished_sample_does_not_move():
    # Sample 0 (mu = 1) finishes long before sample 1 (mu = 100); from the step that
    # ends it on t1, every evaluation sees it there, at its final state, and the
    # batch's answer for it is the one alone.
    mu = torch.tensor([[1.0], [100.0]], dtype=F64)
    y0 = torch.tensor([[2.0, 0.0], [2.0, 0.0]], dtype=F64)
    seen = []

    def f(t, y):
        seen.append((float(t[0]), y[0].clone()))
        return _vdp(mu)(t, y)

    sol = odecore.solve(f, y0, t0=0.0, t1=3.0, solver=Dopri5(), controller=_rows(1e-5, 1e-5))
    alone = odecore.solve(
        _vdp(mu[:1]), y0[:1], t0=0.0, t1=3.0, solver=Dopri5(), controller=_rows(1e-5, 1e-5)
    )
    final = sol.ys[-1, 0]
    first = next(i for i, (t, y) in enumerate(seen) if t == 3.0 and torch.equal(y, final))
    after = seen[first:]
    assert len(after) > 100  # sample 1 kept stepping
    assert all(t == 3.0 and torch.equal(y, final) for t, y in after)
    assert torch.equal(sol.ys[-1, 0], alone.ys[-1, 0])


def test_a_trivial_sample_takes_many_fewer_steps_than_a_stiff_one():
    # Van der Pol, mu = 100: sample 0 rests at the equilibrium, sample 1 goes
    # through the fast transitions of its relaxation oscillations.
    mu = torch.full((2, 1), 100.0, dtype=F64)
    y0 = torch.tensor([[0.0, 0.0], [2.0, 0.0]], dtype=F64)
    with torch.no_grad():
        sol = odecore.solve(
            _vdp(mu), y0, t0=0.0, t1=100.0, solver=Rodas4(independent=True),
            controller=_rows(1e-6, 1e-6),
        )  # fmt: skip
    acc, rej = sol.n_accepted_per_sample, sol.n_rejected_per_sample
    assert acc[0] * 10 < acc[1]
    assert torch.equal(sol.ys[-1, 0], y0[0])
    # Every batch step is a step of each unfinished sample.
    assert sol.stats.n_steps == int((acc + rej).max())
    assert sol.stats.n_accepted + sol.stats.n_rejected == sol.stats.n_steps


@torch.no_grad()
def test_a_step_budget_that_runs_out_fails_the_unfinished_samples_only():
    mu = torch.full((2, 1), 100.0, dtype=F64)
    y0 = torch.tensor([[0.0, 0.0], [2.0, 0.0]], dtype=F64)
    kwargs = dict(t0=0.0, t1=100.0, solver=Rodas4(independent=True), max_steps=60)
    sol = odecore.solve(_vdp(mu), y0, controller=_rows(1e-6, 1e-6), throw=False, **kwargs)
    assert sol.status == odecore.Status.MAX_STEPS_REACHED
    assert torch.equal(sol.ys[-1, 0], y0[0]) and torch.isnan(sol.ys[-1, 1]).all()
    assert "Samples [1] (1 of 2) did not reach t1" in sol.message
    with pytest.raises(odecore.SolverError, match=r"Samples \[1\]"):
        odecore.solve(_vdp(mu), y0, controller=_rows(1e-6, 1e-6), **kwargs)


@torch.no_grad()
def test_a_sample_that_turns_nonfinite_fails_only_itself():
    # Sample 1's field is NaN after t = 0.5; samples 0 and 2 reach t1 before its steps
    # shrink to nothing, and keep their outputs after the time sample 1 stopped at.
    rate = torch.tensor([[0.0], [1.0], [1.0]], dtype=F64)

    def f(t, y):
        bad = (t > 0.5).unsqueeze(-1) & torch.tensor([[False], [True], [False]])
        return -rate * y + torch.where(bad, math.nan, 0.0)

    ts = [0.25, 0.75, 1.0]
    sol = odecore.solve(
        f, torch.ones(3, 1, dtype=F64), t0=0.0, t1=1.0, solver=Dopri5(), controller=_rows(),
        saveat=odecore.SaveAt(ts=ts), throw=False,
    )  # fmt: skip
    assert sol.status == odecore.Status.NONFINITE
    assert "Samples [1] (1 of 3) did not reach t1" in sol.message
    exact = torch.exp(-rate.squeeze(-1) * torch.tensor(ts, dtype=F64).unsqueeze(-1))
    for b in (0, 2):
        torch.testing.assert_close(sol.ys[:, b, 0], exact[:, b], rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(sol.ys[0, 1, 0], exact[0, 1], rtol=1e-6, atol=1e-8)
    assert torch.isnan(sol.ys[1:, 1]).all()


def _rotation_and_failure(t, y):
    """Sample 0 rotates fast (many steps to t = 2); sample 1's field is NaN after
    t = 0.2; sample 2 decays slowly."""
    rot = torch.stack([10 * y[:, 1], -10 * y[:, 0]], -1)
    bad = (t > 0.2).unsqueeze(-1) & torch.tensor([[False], [True], [False]])
    out = torch.cat([rot[:2], -0.1 * y[2:]])
    return out + torch.where(bad, math.nan, 0.0)


@pytest.mark.parametrize("solver", [Dopri5(), Rodas4(independent=True)], ids=["dopri5", "rodas4"])
@torch.no_grad()
def test_a_failed_sample_stops_alone_and_the_others_reach_t1(solver):
    # Sample 1 fails at t = 0.2 while sample 0 is still far from t1: sample 0 goes on
    # and ends as it does alone (it was NaN after t = 0.2, the solve stopped with it).
    y0 = torch.tensor([[1.0, 0.0], [1.0, 1.0], [2.0, -1.0]], dtype=F64)
    ts = odecore.SaveAt(ts=[0.1, 1.5, 2.0])
    kwargs = dict(
        t0=0.0, t1=2.0, solver=solver, controller=_rows(1e-6, 1e-8), saveat=ts, throw=False
    )
    sol = odecore.solve(_rotation_and_failure, y0, **kwargs)
    assert sol.status == odecore.Status.NONFINITE
    assert "Samples [1] (1 of 3) did not reach t1." in sol.message
    assert torch.isnan(sol.ys[1:, 1]).all() and sol.t_final < 0.21
    for b in (0, 2):

        def one(t, y, b=b):  # sample b alone, in its place in the batch's field
            return _rotation_and_failure(t, y0.index_copy(0, torch.tensor([b]), y))[b : b + 1]

        alone = odecore.solve(one, y0[b : b + 1], **kwargs)
        assert alone.status == odecore.Status.SUCCESS
        torch.testing.assert_close(sol.ys[:, b], alone.ys[:, 0], rtol=1e-12, atol=1e-14)
        assert sol.n_accepted_per_sample[b] == alone.n_accepted_per_sample[0]
    with pytest.raises(odecore.SolverError, match=r"Samples \[1\] \(1 of 3\)"):
        odecore.solve(_rotation_and_failure, y0, **(kwargs | dict(throw=True)))


@torch.no_grad()
def test_samples_that_fail_differently_are_each_named():
    # Sample 1 turns non-finite; sample 0 then runs out of steps; sample 2 is done.
    y0 = torch.tensor([[1.0, 0.0], [1.0, 1.0], [2.0, -1.0]], dtype=F64)
    sol = odecore.solve(
        _rotation_and_failure, y0, t0=0.0, t1=2.0, solver=Dopri5(), controller=_rows(),
        max_steps=120, throw=False,
    )  # fmt: skip
    assert sol.status == odecore.Status.NONFINITE
    assert sol.message.endswith(
        "Samples [1] (1 of 3) did not reach t1. Samples [0] (1 of 3) did not reach t1: "
        f"{odecore.Status.MAX_STEPS_REACHED}."
    )
    assert torch.isnan(sol.ys[-1, :2]).all()
    torch.testing.assert_close(sol.ys[-1, 2], y0[2] * math.exp(-0.2), rtol=1e-7, atol=0)


@pytest.mark.parametrize("solver", [Dopri5(), Rodas4(independent=True)], ids=["dopri5", "rodas4"])
def test_an_empty_batch_returns_empty_outputs(solver):
    # As with shared steps: a batch of no samples has nothing to step.
    sol = odecore.solve(
        _decay, torch.ones(0, 2, dtype=F64), t0=0.0, t1=-1.0, solver=solver,
        controller=_rows(), saveat=odecore.SaveAt(ts=[0.0, -0.5, -1.0]),
    )  # fmt: skip
    assert sol.ys.shape == (3, 0, 2) and sol.status == odecore.Status.SUCCESS
    assert sol.n_accepted_per_sample.shape == (0,) and sol.t_final == -1.0


# --- gradients ----------------------------------------------------------------------------


def _grad_run(solver, rtol):
    def run(y0, k):
        def f(t, y):
            return -k * y * (1 + 0.5 * torch.sin(t).unsqueeze(-1)) + 0.2 * y.flip(-1) ** 2

        return odecore.solve(
            f, y0, t0=0.0, t1=1.0, solver=solver, controller=_rows(rtol, rtol),
            saveat=odecore.SaveAt(ts=[0.3, 0.75, 1.0]),
        ).ys  # fmt: skip

    return run


def _grad_inputs():
    return (
        torch.tensor([[0.4, -0.2], [0.1, 0.3], [-0.5, 0.2]], dtype=F64, requires_grad=True),
        torch.tensor([[50.0, 1.0], [0.2, 0.3], [5.0, 0.5]], dtype=F64, requires_grad=True),
    )


@pytest.mark.parametrize("solver", [Dopri5(), Rodas4(independent=True)], ids=["dopri5", "rodas4"])
def test_gradcheck_at_a_tight_tolerance(solver):
    # Finite differences also move the step sizes; at 1e-10 that is below the
    # comparison's tolerance.
    assert torch.autograd.gradcheck(
        _grad_run(solver, 1e-10), _grad_inputs(), eps=1e-6, atol=1e-5, rtol=1e-4, fast_mode=True
    )


@pytest.mark.parametrize("solver", [Dopri5(), Rodas4(independent=True)], ids=["dopri5", "rodas4"])
def test_backprop_through_the_masks_is_each_sample_alone(solver):
    # Each sample's gradient is exactly that of its own discrete solve: nothing leaks
    # through the masks of finished samples or rejected steps.
    y0, k = _grad_inputs()
    run = _grad_run(solver, 1e-6)
    g_y0, g_k = torch.autograd.grad(run(y0, k).sum(), (y0, k))
    for b in range(3):
        yb, kb = y0[b : b + 1].detach().requires_grad_(), k[b : b + 1].detach().requires_grad_()
        a_y0, a_k = torch.autograd.grad(run(yb, kb).sum(), (yb, kb))
        torch.testing.assert_close(run(yb, kb)[:, 0], run(y0, k)[:, b], rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(g_y0[b : b + 1], a_y0, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(g_k[b : b + 1], a_k, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("solver", [Dopri5(), Rodas4(independent=True)], ids=["dopri5", "rodas4"])
def test_a_rejected_non_finite_step_leaves_the_gradient_finite(solver):
    # y' = -k y^3 from y0 = 10 with a first step of 10: the stages overflow, the step
    # is rejected and retried smaller. Its rows stayed in the graph behind the mask, and
    # backpropagation gave 0 * inf = NaN for dy/dk and dy/dy0 (dopri5) of a solve that
    # succeeded. Closed form: y = y0 (1 + a)^(-1/2), a = 2 k y0^2 t.
    k = torch.tensor([[1.0], [0.5]], dtype=F64, requires_grad=True)
    y0 = torch.tensor([[10.0], [1.0]], dtype=F64, requires_grad=True)
    t1 = 10.0
    sol = odecore.solve(
        lambda t, y: -k * y**3, y0, t0=0.0, t1=t1, solver=solver, dt0=t1,
        controller=_rows(1e-9, 1e-11),
    )  # fmt: skip
    assert int(sol.n_rejected_per_sample[0]) > 0
    g_k, g_y0 = torch.autograd.grad(sol.ys[-1].sum(), (k, y0))
    a = 2 * k.detach() * y0.detach() ** 2 * t1
    exact_k = -(y0.detach() ** 3) * t1 * (1 + a) ** -1.5
    exact_y0 = (1 + a) ** -1.5
    torch.testing.assert_close(sol.ys[-1], y0.detach() * (1 + a) ** -0.5, rtol=1e-7, atol=0)
    torch.testing.assert_close(g_k, exact_k, rtol=1e-5, atol=0)
    torch.testing.assert_close(g_y0, exact_y0, rtol=1e-5, atol=0)


# --- errors -------------------------------------------------------------------------------

_Y0 = torch.ones(3, 2, dtype=F64)


def _decay(t, y):
    return -y


class _WithCallback(torch.nn.Module):
    """A field with a step callback, which the per-sample loop would not call."""

    def forward(self, t, y):
        return -y

    def callback_step(self, t0, y0, dt):
        raise AssertionError("not called")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(solver=Rodas4()), r"needs a solver whose steps keep the samples apart.*Rodas4\("),
        (dict(solver=odecore.Kvaerno5()), r"keep the samples apart.*Kvaerno5"),
        (dict(y0=torch.ones(3, dtype=F64)), r"shape \(batch, \*state\), got shape \(3,\)"),
        (dict(y0=(_Y0, _Y0)), r"one tensor of shape \(batch, \*state\), got tuple"),
        (dict(gradient=odecore.Adjoint()), r"cannot be used with `gradient=Adjoint"),
        (dict(gradient=odecore.Checkpoint()), r"cannot be used with `gradient=Checkpoint"),
        (dict(event=odecore.Event(lambda t, y: y.sum() - 0.5)), r"cannot be used with `event`"),
        (dict(jump_ts=[0.5]), r"cannot be used with `jump_ts`"),
        (dict(step_ts=[0.5]), r"cannot be used with `step_ts`"),
        (dict(saveat=odecore.SaveAt(dense=True)), r"`SaveAt\(dense=True\)`"),
        (
            dict(saveat=odecore.SaveAt(ts=torch.tensor([0.5, 1.0], requires_grad=True))),
            r"cannot be used with a `saveat.ts` that requires grad",
        ),
        (dict(f=_WithCallback()), r"cannot be used with step callbacks"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_what_per_sample_steps_cannot_do_is_refused(kwargs, match):
    call = dict(y0=_Y0, t0=0.0, t1=1.0, solver=Dopri5(), controller=_rows()) | kwargs
    y0, f = call.pop("y0"), call.pop("f", _decay)
    with pytest.raises(odecore.ConfigurationError, match=match):
        odecore.solve(f, y0, **call)


def test_a_coupled_batch_is_refused():
    def coupled(t, y):
        return -(y - y.mean(0))

    with pytest.raises(odecore.ConfigurationError, match=r"depends on the state of other samples"):
        odecore.solve(coupled, _Y0, t0=0.0, t1=1.0, solver=Dopri5(), controller=_rows())


def test_a_batch_coupled_past_its_first_sample_is_refused():
    # The first sample is a system of its own; the third reads the second.
    def coupled(t, y):
        return torch.stack([-y[0], -y[1], -1000.0 * (y[2] - y[1])])

    y0 = torch.tensor([[1.0], [2.0], [0.0]], dtype=torch.float64)
    with pytest.raises(odecore.ConfigurationError, match=r"depends on the state of other samples"):
        odecore.solve(coupled, y0, t0=0.0, t1=1.0, solver=Dopri5(), controller=_rows())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(per_sample=1), r"`per_sample` must be True or False, got 1"),
        (dict(per_sample=True, norm=odecore.rms_norm), r"cannot use a `norm`"),
    ],
)
def test_bad_per_sample_settings_are_refused(kwargs, match):
    with pytest.raises(odecore.ConfigurationError, match=match):
        PIDController(**kwargs)


# --- Rodas4's counts -----------------------------------------------------------------------


@pytest.mark.parametrize("per_sample", [False, True], ids=["shared", "per_sample"])
def test_rodas4_counts_one_factorisation_per_step_and_one_jacobian_per_start(per_sample):
    controller = PIDController(rtol=1e-6, atol=1e-6, per_sample=per_sample)
    sol = odecore.solve(
        _vdp(MU[:3]), VDP_Y0[:3], t0=0.0, t1=5.0, solver=Rodas4(independent=True),
        controller=controller,
    )  # fmt: skip
    stats = sol.stats
    assert stats.n_steps > 10 and (per_sample or stats.n_rejected > 0)
    assert stats.n_factorisations == stats.n_steps
    # A shared step retried after a rejection starts where it did: the same Jacobian.
    # Per-sample steps rescale the field every step: a Jacobian each.
    assert stats.n_jacobians == (stats.n_steps if per_sample else stats.n_accepted)
    assert stats.n_newton_iters == 0


def test_each_step_starts_from_the_exact_derivative(monkeypatch):
    # f0 is the field at the step's start bit for bit (not the end's g / h, rounded), so
    # Rodas4 sees that an autonomous field does not read the time, and skips the second
    # evaluation of its difference in time.
    mismatches = []
    step_with = Rodas4.step_with

    def spy(self, state, f, t0, t1, y0, f0):
        mismatches.append(not torch.equal(f0, f(t0, y0)))
        return step_with(self, state, f, t0, t1, y0, f0)

    monkeypatch.setattr(Rodas4, "step_with", spy)
    odecore.solve(
        _vdp(MU), VDP_Y0, t0=0.0, t1=5.0, solver=Rodas4(independent=True),
        controller=_rows(1e-6, 1e-6),
    )  # fmt: skip
    assert len(mismatches) > 10 and not any(mismatches)

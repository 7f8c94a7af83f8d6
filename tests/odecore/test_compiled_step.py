"""``compile=True`` on adaptive explicit solves: every step one compiled graph.

The oracle is the eager solve of the same call: the same steps accepted and rejected,
the same evaluations, the same outputs and gradients to rounding. Steps compile with
``"aot_eager"`` (dynamo and AOTAutograd, no inductor C++), or with dynamo's
``CompileCounter`` to count compilations; ``test_compile.py`` runs inductor.
"""

from __future__ import annotations

import warnings

import odecore
import pytest
import torch
from odecore import _compiled, _compiled_step
from torch._dynamo.testing import CompileCounter

pytestmark = pytest.mark.compile

F64, F32 = torch.float64, torch.float32
TOL = {F64: 1e-12, F32: 1e-5}


class VanDerPol(torch.nn.Module):
    """Van der Pol's oscillator, ``mu`` a parameter (1 here)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.mu = torch.nn.Parameter(torch.tensor(1.0, dtype=dtype))

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x, v = y[..., 0], y[..., 1]
        return torch.stack((v, self.mu * (1 - x * x) * v - x), dim=-1)


class Linear(torch.nn.Module):
    """``dy/dt = A y + b cos(t)``: a damped rotation, driven in time."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor([[-0.1, 1.0], [-1.0, -0.1]], dtype=dtype))
        self.b = torch.nn.Parameter(torch.tensor([0.2, -0.1], dtype=dtype))

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return y @ self.a.T + self.b * torch.cos(t)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max())


def _solve(field, y0, *, compile, solver=None, t0=0.0, t1=10.0, rtol=1e-6, ts=None, dt0=None):
    ts = [t0, t0 + 0.3 * (t1 - t0), t0 + 0.75 * (t1 - t0)] if ts is None else ts
    with warnings.catch_warnings():
        warnings.simplefilter("error", odecore.CompileFallbackWarning)  # it compiles
        return odecore.solve(
            field, y0, t0=t0, t1=t1, solver=solver or odecore.Dopri5(),
            controller=odecore.PIDController(rtol=rtol, atol=rtol * 1e-2),
            saveat=odecore.SaveAt(ts=ts, t1=True), dt0=dt0, compile=compile,
        )  # fmt: skip


CASES = [(odecore.Dopri5, VanDerPol), (odecore.Tsit5, Linear), (odecore.Bosh3, VanDerPol)]


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize(("solver", "problem"), CASES)
def test_compiled_steps_match_the_eager_solve(solver, problem, dtype):
    field = problem(dtype)
    for batch in (1, 16):
        y0 = torch.randn(batch, 2, dtype=dtype, generator=torch.Generator().manual_seed(batch))
        # A first step of 2 is rejected: the retries are compared too. In float32 the
        # tolerance stays well above rounding, where the verdicts are not its noise.
        kwargs = {"solver": solver(), "dt0": 2.0, "rtol": 1e-6 if dtype == F64 else 1e-4}
        eager = _solve(field, y0, compile=False, **kwargs)
        compiled = _solve(field, y0, compile=True, **kwargs)
        assert compiled.ys.dtype == dtype
        assert _rel(compiled.ys, eager.ys) <= TOL[dtype]
        assert compiled.stats.n_rejected > 0
        got, want = compiled.stats, eager.stats
        assert (got.n_accepted, got.n_rejected, got.nfe) == (
            want.n_accepted,
            want.n_rejected,
            want.nfe,
        )


@pytest.mark.parametrize(("problem", "t0", "t1"), [(VanDerPol, 0.0, 6.0), (Linear, 6.0, 0.0)])
def test_gradients_through_the_compiled_steps_match_eager(problem, t0, t1):
    field = problem(F64)
    y0 = torch.randn(16, 2, dtype=F64, generator=torch.Generator().manual_seed(0))
    grads = []
    for compile in (False, True):
        x = y0.clone().requires_grad_()
        sol = _solve(field, x, t0=t0, t1=t1, compile=compile)
        loss = (sol.ys * torch.linspace(-1.0, 1.0, 2, dtype=F64)).square().sum()
        grads.append(torch.autograd.grad(loss, (x, *field.parameters())))
    for got, want in zip(grads[1], grads[0]):
        assert _rel(got, want) <= 1e-10


@pytest.mark.parametrize(
    ("solver", "step", "state"),
    [
        (odecore.Dopri5(), _compiled_step._step, (16, 2)),
        (odecore.Rodas5P(), _compiled_step._rosenbrock_step, (2,)),
        (odecore.Rodas5P(independent=True), _compiled_step._rosenbrock_step, (16, 2)),
    ],
    ids=["dopri5", "rodas5p", "rodas5p-independent"],
)
def test_the_step_is_one_graph_without_breaks(solver, step, state):
    field = VanDerPol(F64)
    y0 = torch.randn(*state, dtype=F64)
    c = odecore.PIDController(rtol=1e-6, atol=1e-8)
    run = _compiled_step.stepper(solver, c, 1.0).run  # type: ignore[attr-defined]
    program = run.__wrapped__.__defaults__[0]
    scalar = [torch.tensor(v, dtype=F64) for v in (0.0, 0.1, 1e-6, 1e-8, 1.0, 1.0)]
    explanation = torch._dynamo.explain(step)(field, y0, field(0.0, y0).detach(), *scalar, program)
    assert explanation.graph_break_count == 0
    assert explanation.graph_count == 1


def test_new_times_tolerances_outputs_or_batch_sizes_do_not_recompile(monkeypatch):
    counter = CompileCounter()
    monkeypatch.setattr(_compiled, "_BACKEND", counter)
    field = Linear(F32)
    calls = [
        (4, 0.0, 2.0, 1e-6, None),
        (4, 1.0, 5.0, 1e-6, None),  # other times
        (4, 0.0, 2.0, 1e-4, None),  # another tolerance
        (4, 0.0, 2.0, 1e-6, [0.0, 0.1, 0.2, 1.9]),  # other output times
        (9, 0.0, 2.0, 1e-6, None),  # another batch size
    ]
    for batch, t0, t1, rtol, ts in calls:
        y0 = torch.randn(batch, 2)
        _solve(field, y0, t0=t0, t1=t1, rtol=rtol, ts=ts, compile=True)
    assert counter.frame_count == 1
    assert counter.op_count > 0


# --- Rosenbrock methods: the Jacobian, the factorisation and the stages in one graph ----


def _stiff(dtype: torch.dtype, mu: float = 200.0) -> VanDerPol:
    field = VanDerPol(dtype)
    with torch.no_grad():
        field.mu.fill_(mu)
    return field


@pytest.mark.parametrize(
    ("solver", "dtype"),
    [(odecore.Rodas4, F64), (odecore.Rodas5P, F64), (odecore.Rodas5P, F32)],
    ids=["rodas4", "rodas5p", "rodas5p-f32"],
)
def test_compiled_rosenbrock_steps_match_the_eager_solve(solver, dtype):
    # One oscillator (its dense Jacobian) and the same step sequence, retries included:
    # each compiled step takes a fresh Jacobian, as the eager one from the same point.
    y0 = torch.tensor([2.0, 0.0], dtype=dtype)
    kwargs = {"solver": solver(), "t1": 300.0, "dt0": 50.0, "rtol": 1e-6 if dtype == F64 else 1e-4}
    with torch.no_grad():
        eager = _solve(_stiff(dtype), y0, compile=False, **kwargs)
        compiled = _solve(_stiff(dtype), y0, compile=True, **kwargs)
    assert compiled.ys.dtype == dtype
    got, want = compiled.stats, eager.stats
    assert got.n_rejected > 0
    assert got.n_jacobians == got.n_factorisations == got.n_steps
    if dtype == F32:  # rounding tips a few verdicts near 1: other steps, as accurate
        assert _rel(compiled.ys, eager.ys) <= 10 * kwargs["rtol"]
        return
    assert _rel(compiled.ys, eager.ys) <= TOL[dtype]
    assert (got.n_accepted, got.n_rejected) == (want.n_accepted, want.n_rejected)
    assert got.nfe == 1 + got.n_steps * (solver.tableau.stages + 3)  # and f(t0, y0)


@pytest.mark.parametrize("size", [1, 2, 3, 5, _compiled_step.UNROLLED, _compiled_step.UNROLLED + 1])
@pytest.mark.parametrize("rows", [False, True], ids=["one", "per-sample"])
def test_the_step_graphs_lu_solves_as_lapack_does_with_row_swaps(size, rows):
    # Matrices that need pivoting: a permutation of a well-conditioned one puts small
    # or zero entries on the diagonal, which elimination without swaps divides by.
    gen = torch.Generator().manual_seed(size)
    batch = (4,) if rows else ()
    eye = torch.eye(size, dtype=F64)
    base = torch.randn(*batch, size, size, dtype=F64, generator=gen) + 3 * eye
    m = base[..., torch.randperm(size, generator=gen).flip(0), :]
    if size > 1:
        m[..., 0, 0] = 0.0  # a zero where the first pivot would be without a swap
    r = torch.randn(*batch, size, dtype=F64, generator=gen)
    solve, singular = _compiled_step._factored(m, rows)
    want = torch.linalg.solve(m, r.unsqueeze(-1)).squeeze(-1)
    assert not singular
    assert _rel(solve(r), want) <= 1e-12
    zero = m.clone()
    zero[..., :, -1] = 0.0  # a zero column: singular, as lu_factor_ex's info says
    assert _compiled_step._factored(zero, rows)[1]


@pytest.mark.parametrize("size", [2, _compiled_step.UNROLLED + 2], ids=["unrolled", "lapack"])
def test_compiled_independent_batches_match_the_eager_solve(size):
    # A batch of systems with per-sample Jacobians, each an LU written out in the graph
    # or, above UNROLLED elements, LAPACK's; the batch size may change without a new graph.
    rates = torch.logspace(0, 3, size, dtype=F64)

    def decay(t, y):  # stiff, coupled inside each sample
        return -rates * (y - torch.cos(t)) + 0.1 * y.roll(1, dims=-1) ** 2

    for batch in (3, 5):
        y0 = torch.rand(batch, size, dtype=F64, generator=torch.Generator().manual_seed(batch))
        kwargs = {"solver": odecore.Rodas5P(independent=True), "t1": 2.0, "rtol": 1e-7}
        eager = _solve(decay, y0, compile=False, **kwargs)
        compiled = _solve(decay, y0, compile=True, **kwargs)
        # The graph's substitutions round apart from LAPACK's by an ulp or so per solve,
        # which the stiff matrices (condition numbers up to 1e3 here) amplify.
        assert _rel(compiled.ys, eager.ys) <= 1e-10
        assert compiled.stats.n_accepted == eager.stats.n_accepted


@pytest.mark.parametrize(
    ("solver", "t0", "t1"),
    [(odecore.Rodas4, 0.0, 2.0), (odecore.Rodas5P, 2.0, 0.0)],
    ids=["rodas4-forward", "rodas5p-backward"],
)
def test_gradients_through_compiled_rosenbrock_steps_match_eager(solver, t0, t1):
    # Backpropagation through the graph's Jacobian: a second derivative of the field.
    field = _stiff(F64, 20.0)
    grads = []
    for compile in (False, True):
        x = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)
        sol = _solve(field, x, solver=solver(), t0=t0, t1=t1, rtol=1e-7, compile=compile)
        loss = (sol.ys * torch.tensor([1.0, -0.5], dtype=F64)).square().sum()
        grads.append(torch.autograd.grad(loss, (x, field.mu)))
    # To rounding: on a long stiff solve the gradient amplifies an ulp far more, as
    # much in eager with the state reordered (docs/results/compile-gradients/rounding.py).
    for got, want in zip(grads[1], grads[0]):
        assert _rel(got, want) <= 1e-12


def test_a_singular_rosenbrock_matrix_is_retried_as_the_eager_solve_retries_it():
    # y' = 8 y from dt0 = 0.5: I / (gamma h) - J = 8 - 8 = 0 for Rodas4's gamma = 1/4.
    # The compiled step sees the singular factorisation and hands the step to the eager
    # solver, whose failure the controller retries smaller.
    y0 = torch.ones(1, dtype=F64)
    kwargs = {"solver": odecore.Rodas4(), "t1": 1.0, "dt0": 0.5, "rtol": 1e-8}
    eager = _solve(lambda t, y: 8.0 * y, y0, compile=False, **kwargs)
    compiled = _solve(lambda t, y: 8.0 * y, y0, compile=True, **kwargs)
    assert eager.stats.n_rejected > 0
    assert (compiled.stats.n_accepted, compiled.stats.n_rejected) == (
        eager.stats.n_accepted,
        eager.stats.n_rejected,
    )
    assert _rel(compiled.ys, eager.ys) <= 1e-12


@pytest.mark.parametrize("independent", [False, True], ids=["dense", "per-sample"])
def test_a_compiled_half_precision_rosenbrock_step_factorises_in_float32(independent):
    def decay(t, y):
        return -50.0 * (y - torch.cos(t))

    y0 = torch.tensor([[2.0, 0.5], [1.0, -0.5]])
    kwargs = {"solver": odecore.Rodas5P(independent=independent), "t1": 1.0}
    exact = _solve(decay, y0.double(), compile=False, rtol=1e-10, **kwargs).ys
    for compile in (False, True):
        sol = _solve(decay, y0.bfloat16(), compile=compile, rtol=1e-2, **kwargs)
        assert sol.ys.dtype == torch.bfloat16
        assert (sol.ys.double() - exact).abs().max() < 5e-2  # the tolerance, in bfloat16


# --- Checkpoint: the forward solve and its replays over compiled steps -----------------


@pytest.mark.parametrize(
    ("solver", "compile"),
    [(odecore.Dopri5, True), (odecore.Tsit5, True), (odecore.RK4, True), (odecore.RK4, "stepped")],
    ids=["dopri5", "tsit5", "rk4", "rk4-stepped"],
)
def test_checkpointed_gradients_over_compiled_steps_match_eager(solver, compile):
    # The module's parameter and a tensor the field closes over are found by the forward
    # solve's first evaluation; backward time; segments of 3 steps.
    field = VanDerPol(F64)
    scale = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)
    fixed = solver is odecore.RK4
    results = []
    for c in (False, compile):
        x = torch.randn(8, 2, dtype=F64, generator=torch.Generator().manual_seed(1))
        x.requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("error", odecore.CompileFallbackWarning)
            sol = odecore.solve(
                lambda t, y: field(t, y) * scale, x, t0=4.0, t1=0.0, solver=solver(),
                controller=odecore.ConstantStepSize() if fixed else odecore.PIDController(
                    rtol=1e-7, atol=1e-9),
                dt0=0.1 if fixed else None, saveat=odecore.SaveAt(ts=[4.0, 3.0, 1.5], t1=True),
                gradient=odecore.Checkpoint(every=3), compile=c,
            )  # fmt: skip
        loss = (sol.ys * torch.tensor([1.0, -2.0], dtype=F64)).square().sum()
        results.append((sol, torch.autograd.grad(loss, (x, field.mu, scale))))
    (eager, want), (compiled, got) = results
    assert _rel(compiled.ys, eager.ys) <= 1e-12
    assert compiled.stats.nfe_backward == eager.stats.nfe_backward > 0
    for g, w in zip(got, want, strict=True):
        assert _rel(g, w) <= 1e-11


@pytest.mark.parametrize("gradient", [odecore.Checkpoint(), odecore.Adjoint()], ids=repr)
@pytest.mark.parametrize("solver", [odecore.Tsit5, odecore.RK4], ids=lambda c: c.__name__)
def test_a_failed_solve_keeps_y0_at_t0_as_eager(gradient, solver):
    """A solve that keeps no graph forward and fails (the step budget ends, ``throw=False``)
    returns the loop's outputs as they are: the one at ``t0`` is ``y0`` itself, with its
    gradient, as the eager loop's, not the alias the compiled steps start from."""
    y0 = torch.tensor([[1.0, 0.2], [0.3, -0.4]], dtype=F64, requires_grad=True)
    fixed = solver is odecore.RK4
    grads = []
    for compile in (True, False):
        sol = odecore.solve(
            lambda t, y: -y, y0, t0=1.0, t1=0.0, solver=solver(), dt0=0.1 if fixed else None,
            saveat=odecore.SaveAt(ts=[1.0, 0.9, 0.5]), max_steps=3, throw=False,
            gradient=gradient, compile=compile,
        )  # fmt: skip
        assert sol.status == odecore.Status.MAX_STEPS_REACHED
        (grad,) = torch.autograd.grad(sol.ys[0].sum(), y0, allow_unused=True)
        grads.append(grad)
    assert grads[0] is not None and torch.equal(grads[0], grads[1])


def test_the_forward_solve_finds_a_tensor_that_only_compiled_steps_read():
    # A method that keeps no graph forward finds the tensors to differentiate by
    # walking the graphs of the field's evaluations; inside a compiled step, by walking
    # the step's. A field whose compiled evaluations read a tensor its eager ones (the
    # first, and the first step size's trial) do not: `extra` gets its gradient, that of
    # backpropagation through the same compiled solve (one segment: the replay retraces
    # the forward solve's evaluations, eager and compiled, exactly).
    extra = torch.tensor(0.5, dtype=F64, requires_grad=True)

    def field(t, y):
        return -y * extra if torch.compiler.is_compiling() else -y

    grads = []
    for gradient in (odecore.Autograd(), odecore.Checkpoint(every=10**6)):
        y0 = torch.ones(4, 2, dtype=F64, requires_grad=True)
        sol = odecore.solve(
            field, y0, t0=0.0, t1=1.0, solver=odecore.Dopri5(), gradient=gradient,
            compile=True,
        )  # fmt: skip
        sol.ys[-1].sum().backward()
        grads.append((y0.grad, extra.grad))
        extra.grad = None
    assert grads[1][1] is not None
    for g, w in zip(grads[1], grads[0], strict=True):
        assert _rel(g, w) <= 1e-12


# --- Adjoint: the forward solve and the backward one over compiled steps ---------------


def _adjoint_run(field, scale, x, *, compile, gradient, solver, t0=0.0, t1=4.0):
    fixed = isinstance(solver, odecore.RK4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", odecore.CompileFallbackWarning)
        sol = odecore.solve(
            lambda t, y: field(t, y) * scale, x, t0=t0, t1=t1, solver=solver,
            controller=odecore.ConstantStepSize() if fixed else odecore.PIDController(
                rtol=1e-7, atol=1e-9),
            dt0=0.1 if fixed else None,
            saveat=odecore.SaveAt(ts=[t0, t0 + 0.25 * (t1 - t0), t0 + 0.6 * (t1 - t0)], t1=True),
            gradient=gradient, compile=compile,
        )  # fmt: skip
        loss = (sol.ys * torch.tensor([1.0, -2.0], dtype=F64)).square().sum()
        return sol, torch.autograd.grad(loss, (x, field.mu, scale))


@pytest.mark.parametrize(
    ("solver", "gradient", "t0", "t1"),
    [
        (odecore.Dopri5(), odecore.Adjoint(), 0.0, 4.0),
        (odecore.Dopri5(), odecore.Adjoint(), 1.0, 0.0),
        (odecore.Tsit5(), odecore.Adjoint(seminorm=True), 0.0, 4.0),
        (odecore.Dopri5(), odecore.Adjoint(solver=odecore.Tsit5()), 0.0, 4.0),
        (odecore.RK4(), odecore.Adjoint(), 0.0, 4.0),
    ],
    ids=["dopri5", "dopri5-backward-in-time", "tsit5-seminorm", "dopri5-tsit5-backward", "rk4"],
)
def test_adjoint_gradients_over_compiled_steps_match_eager(solver, gradient, t0, t1):
    # The module's parameter and a closed-over tensor, found by the forward solve in the
    # graphs of its compiled steps; the backward solve's augmented field differentiates
    # the vector field inside each compiled step.
    field = VanDerPol(F64)
    scale = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)
    runs = []
    for compile in (False, True):
        x = torch.randn(8, 2, dtype=F64, generator=torch.Generator().manual_seed(2))
        runs.append(_adjoint_run(field, scale, x.requires_grad_(), compile=compile,
                                 gradient=gradient, solver=solver, t0=t0, t1=t1))  # fmt: skip
    (eager, want), (compiled, got) = runs
    assert _rel(compiled.ys, eager.ys) <= 1e-12
    assert compiled.stats.nfe_backward == eager.stats.nfe_backward > 0
    for g, w in zip(got, want, strict=True):
        assert _rel(g, w) <= 1e-11


def test_the_compiled_adjoint_compiles_once_for_new_times_and_batch_sizes(monkeypatch):
    # The backward field is a new object in every backward pass, the seminorm a value:
    # neither is a new graph. The first call compiles the forward steps (the search for
    # tensors runs them with a graph) and the backward ones; later calls compile nothing.
    counter = CompileCounter()
    monkeypatch.setattr(_compiled, "_BACKEND", counter)
    field = VanDerPol(F64)
    scale = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)
    frames = []
    for batch, t1 in ((8, 4.0), (8, 3.0), (5, 4.0)):
        x = torch.randn(batch, 2, dtype=F64, requires_grad=True)
        _adjoint_run(field, scale, x, compile=True, gradient=odecore.Adjoint(seminorm=True),
                     solver=odecore.Dopri5(), t1=t1)  # fmt: skip
        frames.append(counter.frame_count)
    assert frames[0] > 0
    assert frames == [frames[0]] * 3


# --- solves without a graph: runs of steps as one compiled loop ---------------------------


def _count_runs(monkeypatch) -> list[int]:
    """Counts the calls of the compiled loop (``_Looper.steps``) in a list of one."""
    calls = [0]
    steps = _compiled_step._Looper.steps

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return steps(self, *args, **kwargs)

    monkeypatch.setattr(_compiled_step._Looper, "steps", counted)
    return calls


LOOPS = [*CASES, (odecore.Rodas5P, VanDerPol)]


# Each method forward in float64 and backward in float32: every direction, dtype and
# method without their product (each case compiles its own loop, 5 to 12 s).
@pytest.mark.parametrize(
    ("dtype", "t0", "t1"), [(F64, 0.0, 10.0), (F32, 1.0, 0.0)], ids=["forward-f64", "backward-f32"]
)
@pytest.mark.parametrize(("solver", "problem"), LOOPS)
def test_a_solve_without_a_graph_runs_its_steps_as_one_loop(
    monkeypatch, solver, problem, dtype, t0, t1
):
    field = problem(dtype)
    y0 = 0.5 * torch.randn(16, 2, dtype=dtype, generator=torch.Generator().manual_seed(0))
    # Outputs inside steps and on them, a rejected first step (dt0 = 2), and a loose
    # float32 tolerance, well above rounding, where the verdicts are not its noise.
    ts = torch.linspace(t0, t1, 41).tolist()
    kwargs = {"solver": solver(), "t0": t0, "t1": t1, "ts": ts, "dt0": 2.0,
              "rtol": 1e-6 if dtype == F64 else 1e-4}  # fmt: skip
    steps = _solve(field, y0, compile=True, **kwargs)  # with a graph: one call a step
    runs = _count_runs(monkeypatch)
    with torch.no_grad():
        eager = _solve(field, y0, compile=False, **kwargs)
        compiled = _solve(field, y0, compile=True, **kwargs)
    assert compiled.ys.dtype == dtype
    assert _rel(compiled.ys, steps.ys) <= TOL[dtype]
    got, want = compiled.stats, steps.stats
    assert got.n_rejected > 0
    assert (got.n_accepted, got.n_rejected, got.nfe, got.n_jacobians) == (
        want.n_accepted, want.n_rejected, want.nfe, want.n_jacobians,
    )  # fmt: skip
    # As the compiled steps: a Rosenbrock step's float32 LU tips a few verdicts near 1.
    rosenbrock_f32 = solver is odecore.Rodas5P and dtype == F32
    assert _rel(compiled.ys, eager.ys) <= (10 * kwargs["rtol"] if rosenbrock_f32 else TOL[dtype])
    assert 0 < runs[0] <= len(ts) + got.n_accepted // _compiled_step.LOOP_ENDS + 1


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        (lambda t, y: -y, {"max_steps": 7}),  # the budget ends inside a run
        (lambda t, y: y * y, {"t1": 2.0}),  # a blow-up at t = 1: the eager loop judges it
        (lambda t, y: torch.sin(t) * y, {"dt_min": 0.4, "rtol": 1e-10}),  # dt_min accepts
    ],
    ids=["max-steps", "blow-up", "dt-min"],
)
def test_a_loop_of_steps_ends_as_the_eager_loop_does(field, kwargs):
    y0 = torch.tensor([[1.0], [0.5]], dtype=F64)
    kwargs = {"t0": 0.0, "t1": 10.0, "rtol": 1e-8, **kwargs}
    controller = odecore.PIDController(rtol=kwargs.pop("rtol"), atol=1e-10,
                                       dt_min=kwargs.pop("dt_min", 0.0))  # fmt: skip
    sols = []
    for compile in (False, True):
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("error", odecore.CompileFallbackWarning)
            sols.append(odecore.solve(field, y0, solver=odecore.Dopri5(), controller=controller,
                                      saveat=odecore.SaveAt(t1=True), throw=False,
                                      compile=compile, **kwargs))  # fmt: skip
    eager, compiled = sols
    assert compiled.status == eager.status
    assert compiled.stats == eager.stats
    assert float(compiled.ts[-1]) == float(eager.ts[-1])
    torch.testing.assert_close(compiled.ys, eager.ys, rtol=1e-12, atol=0.0, equal_nan=True)


def test_a_loop_of_steps_compiles_once_for_new_times_tolerances_and_batch_sizes(monkeypatch):
    counter = CompileCounter()
    monkeypatch.setattr(_compiled, "_BACKEND", counter)
    field = Linear(F32)
    calls = [(4, 0.0, 2.0, 1e-6, None), (4, 1.0, 5.0, 1e-6, None), (4, 0.0, 2.0, 1e-4, None),
             (4, 0.0, 2.0, 1e-6, [0.0, 0.1, 0.2, 1.9]), (9, 0.0, 2.0, 1e-6, None)]  # fmt: skip
    runs = _count_runs(monkeypatch)
    with torch.no_grad():
        for batch, t0, t1, rtol, ts in calls:
            _solve(field, torch.randn(batch, 2), t0=t0, t1=t1, rtol=rtol, ts=ts, compile=True)
    assert runs[0] >= len(calls)
    assert counter.frame_count == 1


def test_the_loop_of_steps_is_one_graph_without_breaks():
    field = VanDerPol(F64)
    y0 = torch.randn(16, 2, dtype=F64)
    c = odecore.PIDController(rtol=1e-6, atol=1e-8)
    looper = _compiled_step.stepper(odecore.Dopri5(), c, 1.0, loops=True)
    program = looper.loop.__wrapped__.__defaults__[0]  # type: ignore[attr-defined]
    st = torch.zeros(7 + _compiled_step.LOOP_ENDS, dtype=F64)
    st[1] = 0.1
    scalars = [torch.tensor(v, dtype=F64) for v in (1.0, 1.0)]
    limits = torch.tensor([1.0, 0.5, 1.0, 100.0], dtype=F64)
    tols = [torch.tensor(v, dtype=F64) for v in (1e-6, 1e-8)]
    ks = torch.zeros(7, 16, 2, dtype=F64)
    explanation = torch._dynamo.explain(_compiled_step._steps)(
        field, y0, field(0.0, y0).detach(), ks, st, *scalars, limits, *tols, program
    )
    assert explanation.graph_break_count == 0
    assert explanation.graph_count == 1


# --- per-sample step sizes: runs of the loop's iterations as one compiled graph -----------


def _solve_rows(field, y0, *, compile, solver, t0=0.0, t1=3.0, ts=None, **kwargs):
    controller = odecore.PIDController(rtol=1e-7, atol=1e-9, per_sample=True)
    saveat = odecore.SaveAt(ts=ts, t1=True) if ts is not None else odecore.SaveAt(t1=True)
    return odecore.solve(field, y0, t0=t0, t1=t1, solver=solver, controller=controller,
                         saveat=saveat, compile=compile, **kwargs)  # fmt: skip


def _oscillators(dtype: torch.dtype = F64):
    """A batch of Van der Pol oscillators, each sample with its own stiffness."""
    mu = torch.linspace(1.0, 30.0, 8, dtype=dtype)

    def field(t, y):
        x, v = y.unbind(-1)
        return torch.stack((v, mu * (1 - x * x) * v - x + 0.1 * torch.cos(t)), -1)

    y0 = torch.tensor([2.0, 0.0], dtype=dtype) * torch.linspace(0.5, 1.0, 8, dtype=dtype)[:, None]
    return field, y0


@pytest.mark.parametrize(
    ("solver", "t0", "t1"),
    [(odecore.Dopri5, 3.0, 0.0), (lambda: odecore.Rodas5P(independent=True), 0.0, 3.0)],
    ids=["dopri5-backward", "rodas5p-forward"],
)
def test_per_sample_steps_compile_as_one_loop(monkeypatch, solver, t0, t1):
    field, y0 = _oscillators()
    ts = torch.linspace(t0, t1, 4, dtype=F64)  # outputs inside the samples' steps
    runs = []
    call = odecore._per_sample._Runs.__call__
    monkeypatch.setattr(
        odecore._per_sample._Runs, "__call__", lambda *a: runs.append(1) or call(*a)
    )
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", odecore.CompileFallbackWarning)
        eager, compiled = (
            _solve_rows(field, y0, compile=c, solver=solver(), t0=t0, t1=t1, ts=ts)
            for c in (False, True)
        )
    # A run ends where a sample's step reaches an output time: at most once for each.
    assert 0 < len(runs) <= (len(ts) - 1) * y0.shape[0] + 1 < compiled.stats.n_steps / 3
    assert torch.equal(compiled.n_accepted_per_sample, eager.n_accepted_per_sample)
    assert torch.equal(compiled.n_rejected_per_sample, eager.n_rejected_per_sample)
    assert compiled.stats.n_steps == eager.stats.n_steps
    assert compiled.stats.n_accepted == eager.stats.n_accepted
    # A Rosenbrock step's Jacobian and LU differ in rounding, amplified by the stiffness.
    assert _rel(compiled.ys, eager.ys) <= (1e-12 if isinstance(solver(), odecore.Dopri5) else 1e-10)


def test_per_sample_runs_leave_an_unusual_iteration_to_the_eager_loop():
    # Sample 0 blows up at t = 1: its step size underflows, as in the eager loop.
    y0 = torch.tensor([[1.0], [0.5]], dtype=F64)
    sols = []
    for compile in (False, True):
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("error", odecore.CompileFallbackWarning)
            sols.append(_solve_rows(lambda t, y: y * y, y0, compile=compile,
                                    solver=odecore.Dopri5(), t1=1.5, throw=False))  # fmt: skip
    eager, compiled = sols
    assert eager.status == odecore.Status.DT_UNDERFLOW
    assert (compiled.status, compiled.message) == (eager.status, eager.message)
    assert compiled.stats == eager.stats
    torch.testing.assert_close(compiled.ys, eager.ys, rtol=1e-12, atol=0.0, equal_nan=True)


@pytest.mark.parametrize(
    ("grad", "solver", "why"),
    [(True, odecore.Dopri5, "without a graph"), (False, odecore.Dopri8, "Dopri8's")],
    ids=["with-a-graph", "no-f1"],
)
def test_per_sample_steps_that_cannot_compile_say_so_and_solve_eagerly(grad, solver, why):
    field, y0 = _oscillators()
    with torch.no_grad():
        eager = _solve_rows(field, y0, compile=False, solver=solver())
    with torch.set_grad_enabled(grad), pytest.warns(odecore.CompileFallbackWarning, match=why):
        compiled = _solve_rows(field, y0, compile=True, solver=solver())
    assert torch.equal(compiled.ys, eager.ys)
    assert compiled.stats == eager.stats


@pytest.mark.parametrize("per_sample", [False, True], ids=["one-system", "per-sample"])
def test_a_rosenbrock_loop_that_dynamo_cannot_trace_solves_all_the_same(per_sample):
    """A field that takes a view of a tensor it closes over (``w.T``) inside a Rosenbrock
    loop graph, where torch 2.13's dynamo fails with a bare ``AssertionError``: the solve
    takes its steps one by one (one system) or eagerly, with the warning (per sample)."""
    w = torch.tensor([[-50.0, 1.0], [-1.0, -2.0]], dtype=F64)

    def field(t, y):
        return y @ w.T + torch.cos(3 * t)[..., None]

    y0 = torch.tensor([[1.0, 0.2], [0.3, -0.4]], dtype=F64)
    controller = odecore.PIDController(rtol=1e-6, atol=1e-8, per_sample=per_sample)
    solver = odecore.Rodas5P(independent=True)
    sols = []
    for compile in (True, False):
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", odecore.CompileFallbackWarning)
            sols.append(odecore.solve(field, y0, t0=0.0, t1=1.0, solver=solver,
                                      controller=controller, compile=compile))  # fmt: skip
        if compile:
            assert len(caught) == per_sample  # "torch.compile failed on this solve"
    torch.testing.assert_close(sols[0].ys, sols[1].ys, rtol=1e-10, atol=0.0)

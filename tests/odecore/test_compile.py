"""``compile=True``: a fixed-step solve as one ``torch.compile`` graph of its grid, and
``compile="stepped"``: every step one compiled graph, with the eager loop around it.

Most tests compile with dynamo's ``CompileCounter`` or ``"aot_eager"`` backends: the
same graph capture and AOTAutograd as inductor, without its C++. One test runs
inductor itself, and is skipped, with the reason, where inductor cannot run.
"""

from __future__ import annotations

import math
import re
import warnings

import odecore
import pytest
import torch
from odecore import _compiled
from torch._dynamo.testing import CompileCounter

pytestmark = pytest.mark.compile

F64, F32 = torch.float64, torch.float32
TOL = {F64: 1e-12, F32: 1e-5}
FIXED = sorted({cls for cls in odecore.FIXED_METHODS.values()}, key=lambda cls: cls.__name__)
COMPILES = pytest.mark.parametrize("compile", [True, "stepped"], ids=["grid", "stepped"])


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> CompileCounter:
    """Compile with a counter of frames (graphs) and operations, no backend at all."""
    count = CompileCounter()
    monkeypatch.setattr(_compiled, "_BACKEND", count)
    return count


class Field(torch.nn.Module):
    """A small nonlinear field with parameters, reading its time."""

    def __init__(self, dtype: torch.dtype = F64) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor([[-0.5, 1.0], [-1.0, -0.2]], dtype=dtype))
        self.b = torch.nn.Parameter(torch.tensor([0.1, -0.3], dtype=dtype))

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.tanh(y @ self.a) + self.b * torch.cos(t)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max()) if b.numel() else 0.0


def _solve(solver, y0, *, compile, ts=(0.0, 0.3, 0.7), dt0=0.25, field=None, **kwargs):
    """Four steps of 0.25 (the last one shortened to end on 1.0), with output times at
    step ends and inside steps: the dense output is compiled too."""
    field = field if field is not None else Field(y0.dtype)
    return odecore.solve(
        field, y0, t0=0.0, t1=1.0, solver=solver, dt0=dt0,
        saveat=odecore.SaveAt(ts=list(ts), t1=True), compile=compile, **kwargs,
    )  # fmt: skip


# --- the same numbers -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F64, F32], ids=["float64", "float32"])
@pytest.mark.parametrize("method", FIXED, ids=lambda cls: cls.__name__)
@COMPILES
def test_compiled_solve_matches_eager(method, dtype, compile):
    y0 = torch.tensor([[1.0, 0.5], [-0.3, 2.0], [0.2, 0.0]], dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", odecore.CompileFallbackWarning)  # it compiled
        compiled = _solve(method(), y0, compile=compile)
    eager = _solve(method(), y0, compile=False)
    assert _rel(compiled.ys.detach(), eager.ys.detach()) <= TOL[dtype]
    assert compiled.stats == eager.stats
    assert compiled.status == eager.status and compiled.t_final == eager.t_final
    assert torch.equal(compiled.ts, eager.ts)


@pytest.mark.parametrize(
    ("method", "dtype"),
    [*((cls, F64) for cls in FIXED), (odecore.RK4, F32), (odecore.Heun3, F32)],
    ids=lambda p: getattr(p, "__name__", str(p).removeprefix("torch.")),
)
def test_compiled_gradients_match_eager(method, dtype):
    grads = []
    for compile in (True, "stepped", False):
        field = Field(dtype)
        y0 = torch.tensor([[1.0, 0.5], [-0.3, 2.0]], dtype=dtype, requires_grad=True)
        sol = _solve(method(), y0, compile=compile, field=field)
        (sol.ys**2).sum().backward()
        grads.append([y0.grad, field.a.grad, field.b.grad])
    for grid, stepped, eager in zip(*grads):
        assert _rel(grid, eager) <= TOL[dtype] and _rel(stepped, eager) <= TOL[dtype]


@pytest.mark.parametrize("method", [odecore.RK4, odecore.RK4ThreeEighths], ids=lambda c: c.__name__)
@COMPILES
def test_the_cubic_interpolant_is_the_eager_one(method, compile):
    """``interpolation="cubic"`` (odeint's ``interp="cubic"``): outputs inside a step come
    from the cubic through its ends, without the interior node of a fourth-order method's
    own Hermite interpolant."""
    y0 = torch.tensor([[1.0, 0.5], [-0.3, 2.0]], dtype=F64, requires_grad=True)
    sols, grads = [], []
    for c in (compile, False):
        sol = _solve(method(interpolation="cubic"), y0, compile=c, ts=(0.0, 0.1, 0.6))
        sols.append(sol)
        grads.append(torch.autograd.grad((sol.ys**2).sum(), y0)[0])
    assert _rel(sols[0].ys, sols[1].ys) <= 1e-12 and _rel(grads[0], grads[1]) <= 1e-12
    assert sols[0].stats == sols[1].stats


def _state(shape, dtype):
    """A state of ``shape`` (``"tuple"``: a 0-dim and a 1-dim tensor) in ``dtype``."""
    if shape == "tuple":
        return (torch.tensor(0.8, dtype=dtype), torch.tensor([0.1, -0.4], dtype=dtype))
    return torch.linspace(-1.0, 1.0, math.prod(shape), dtype=dtype).reshape(shape) + 0.3


def _reads_time(t, y):
    """A field that reads its time: the time's dtype meets the state's."""
    if isinstance(y, tuple):
        x, v = y
        return -x * torch.cos(t) + v.sum(), x - v
    return torch.cos(t) * y - 0.5 * y**3


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [*((s, d) for s in [(), (3,), (2, 3), "tuple"] for d in (F32, F64)), ((), torch.bfloat16)],
    ids=str,
)
@COMPILES
def test_outputs_keep_the_state_dtype(shape, dtype, compile):
    """Step sizes and dense-output weights are 0-dim float64 tensors in the graph; times
    one 0-dim float32 state, they promoted every output to float64."""
    y0 = _state(shape, dtype)
    kwargs = {"solver": odecore.Midpoint(), "dt0": 0.5, "ts": (0.0, 0.3), "field": _reads_time}
    with warnings.catch_warnings():
        warnings.simplefilter("error", odecore.CompileFallbackWarning)  # it compiled
        compiled = _solve(y0=y0, compile=compile, **kwargs)
    eager = _solve(y0=y0, compile=False, **kwargs)
    if shape == "tuple":
        pairs = list(zip(compiled.ys, eager.ys, y0))
    else:
        pairs = [(compiled.ys, eager.ys, y0)]
    for c, e, y in pairs:
        assert c.dtype == e.dtype == y.dtype
        assert _rel(c.double(), e.double()) <= TOL.get(dtype, 1e-2)


@pytest.mark.parametrize(
    ("compile", "solver", "kwargs"),
    [
        (True, odecore.Midpoint, {}),
        ("stepped", odecore.Midpoint, {}),
        (True, odecore.Dopri5, {"controller": odecore.PIDController(rtol=1e-8, atol=1e-10)}),
    ],
    ids=["grid", "stepped", "adaptive"],
)
def test_second_derivatives_and_second_backward_passes_solve_again_eagerly(compile, solver, kwargs):
    """AOTAutograd compiles a first-order backward. The first backward pass goes through
    the compiled graph, without a word; a second derivative (``create_graph=True``) or a
    second pass (``retain_graph=True``) differentiates an eager solve again, after the
    warning, and equals the eager solve's. ``w`` makes ``y0`` and the field's tensor
    ``scale``, which the loss reads too: each path to it is counted once."""
    w = torch.tensor(0.7, dtype=F64, requires_grad=True)
    x = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)

    def loss(compile):
        scale = 2 * w

        def field(t, y):
            return torch.cos(t) * y - scale * y**3

        sol = _solve(solver(), w * x, compile=compile, field=field, **kwargs)
        return sol.ys.pow(2).sum() + scale

    eager = torch.autograd.grad(loss(False), (w, x), create_graph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", odecore.CompileFallbackWarning)
        first = torch.autograd.grad(loss(compile), (w, x))
    for got, want in zip(first, eager):
        assert _rel(got, want) <= 1e-12
    with pytest.warns(odecore.CompileFallbackWarning, match="create_graph=True"):
        twice = torch.autograd.grad(loss(compile), (w, x), create_graph=True)
    second = torch.autograd.grad(twice[0] + twice[1].sum(), (w, x))
    for got, want in zip(second, torch.autograd.grad(eager[0] + eager[1].sum(), (w, x))):
        assert _rel(got, want) <= 1e-10
    total = loss(compile)
    total.backward(retain_graph=True)
    grads = w.grad.clone(), x.grad.clone()
    w.grad = x.grad = None
    with pytest.warns(odecore.CompileFallbackWarning, match="retain_graph=True"):
        total.backward()
    for got, want in zip((w.grad, x.grad), grads):
        assert _rel(got, want) <= 1e-12


@pytest.mark.parametrize(
    ("compile", "solver", "kwargs"),
    [
        (True, odecore.RK4, {"dt0": 0.25}),
        ("stepped", odecore.RK4, {"dt0": 0.25}),
        (True, odecore.Dopri5, {"controller": odecore.PIDController(rtol=1e-8, atol=1e-10)}),
    ],
    ids=["grid", "stepped", "adaptive"],
)
def test_a_field_reading_a_parameter_and_a_tensor_made_from_it_counts_each_path_once(
    compile, solver, kwargs
):
    """The field reads ``p`` itself and tensors made from it before the solve: ``c = x + p``
    (whose node saves nothing) and ``y0 = x * p`` (whose node saves ``x``). The compiled
    graph's backward pass took ``p``'s gradient at the solve's edges, which already sums
    the paths through ``c``'s node, then carried ``c``'s on to ``p`` again: 21 % off,
    without a word; through ``y0``'s node it freed what that node saved and raised. Such
    a solve runs again eagerly, with the warning, and its gradient is the eager one's.
    The loss reads ``c`` too, so its node must outlive the solve's backward pass."""
    p = torch.tensor([0.7, -0.3], dtype=F64, requires_grad=True)
    x = torch.tensor([[1.0, 2.0], [0.5, -1.0]], dtype=F64)

    def loss(compile):
        c, y0 = x + p, x * p

        def field(t, y):
            return -p * y + 0.1 * c + 0.05 * y0

        sol = odecore.solve(field, y0, t0=0.0, t1=1.0, solver=solver(), compile=compile, **kwargs)
        return sol.ys.pow(2).sum() + c.sum()

    eager = torch.autograd.grad(loss(False), p)[0]
    with pytest.warns(odecore.CompileFallbackWarning, match="itself and through a tensor"):
        got = torch.autograd.grad(loss(compile), p)[0]
    assert _rel(got, eager) <= 1e-12


def test_a_parameter_changed_in_place_after_a_compiled_solve_stops_its_second_derivative():
    """The eager solve again would read the new value: as eager autograd, it raises."""
    w = torch.tensor(0.7, dtype=F64, requires_grad=True)
    y0 = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)
    sol = _solve(odecore.Midpoint(), y0, compile=True, field=lambda t, y: -w * y**3)
    with torch.no_grad():
        w.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified in place"):
        torch.autograd.grad(sol.ys.sum(), (w, y0), create_graph=True)


@pytest.mark.parametrize(("compile", "jumps"), [(True, [0.5]), ("stepped", [])])
def test_backward_in_time_tuple_state_and_jumps_match_eager(compile, jumps):
    """Integration from 1 down to 0, a tuple state, a jump of the field at 0.5 (the
    stages next to it see one-sided limits; compiled steps do not take them) or none,
    and a step time at 0.6."""

    def field(t, state):
        x, v = state
        kick = torch.where(t < 0.5, 1.0, -2.0).to(x.dtype)
        return v, -x * kick

    x0, v0 = torch.tensor([1.0, 0.2], dtype=F64), torch.tensor([0.0, 1.0], dtype=F64)
    out = []
    for c in (compile, False):
        sol = odecore.solve(
            field, (x0, v0), t0=1.0, t1=0.0, solver=odecore.RK4(), dt0=0.15,
            saveat=odecore.SaveAt(ts=[1.0, 0.55, 0.2, 0.0]), jump_ts=jumps, step_ts=[0.6],
            compile=c,
        )  # fmt: skip
        out.append(sol)
    (cx, cv), (ex, ev) = out[0].ys, out[1].ys
    assert _rel(cx, ex) <= 1e-12 and _rel(cv, ev) <= 1e-12
    assert out[0].stats == out[1].stats


@pytest.mark.parametrize(("t0", "t1"), [(0.0, 1.0), (1.0, 0.0)], ids=["forward", "backward"])
def test_jumps_step_times_and_repeated_outputs_differentiate_as_eager(t0, t1):
    """The whole grid with a jump and a step time, outputs repeated at both ends and at
    the jump, and gradients of ``y0``, of the field's parameters and of a tensor made
    from a leaf before the solve that the field closes over."""
    field = Field()
    base = torch.tensor([0.3, -0.1], dtype=F64, requires_grad=True)
    y0 = torch.tensor([[1.0, 0.2], [0.3, -0.4]], dtype=F64, requires_grad=True)
    ts = [t0, t0, 0.45, 0.45, 0.7 if t0 < t1 else 0.2, t1, t1]
    sols, grads = [], []
    for compile in (True, False):
        made = base.exp()  # a node before the solve, between the field and the leaf

        def kicked(t, y, made=made):
            return field(t, y) * torch.where(t < 0.45, 1.0, -2.0).to(y) + made * torch.sin(t)

        with warnings.catch_warnings():
            warnings.simplefilter("error", odecore.CompileFallbackWarning)  # it compiled
            sol = odecore.solve(
                kicked, y0, t0=t0, t1=t1, solver=odecore.RK4(), dt0=0.15, jump_ts=[0.45],
                step_ts=[0.6, 0.3], saveat=odecore.SaveAt(ts=ts, t1=True), compile=compile,
            )  # fmt: skip
        sols.append(sol)
        grads.append(torch.autograd.grad((sol.ys**2).sum(), (y0, field.a, field.b, base)))
    (compiled, eager), (g_compiled, g_eager) = sols, grads
    assert _rel(compiled.ys, eager.ys) <= 1e-12 and compiled.stats == eager.stats
    assert all(_rel(a, b) <= 1e-12 for a, b in zip(g_compiled, g_eager, strict=True))


@pytest.mark.parametrize(("dtype", "tol"), [(F64, 1e-12), (torch.bfloat16, 1e-2)])
def test_perturbed_grid_and_half_precision_match_eager(dtype, tol):
    """``perturb``: every step end is a jump, so the stages at both ends of every step
    see one-sided limits; outputs fall inside steps of 0.3."""

    def switch(t, y):
        return torch.where(t < 0.5, 1.0, -1.0).to(y) * y.flip(-1) - y

    y0 = torch.tensor([[0.5, 1.0], [1.0, -1.0]], dtype=dtype)
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64)
    opts = {"perturb": True, "step_size": 0.3}
    compiled = odecore.odeint(switch, y0, t, method="rk4", options={**opts, "compile": True})
    eager = odecore.odeint(switch, y0, t, method="rk4", options=opts)
    assert compiled.dtype == dtype
    assert _rel(compiled.double(), eager.double()) <= tol


@COMPILES
def test_failures_are_the_eager_statuses(compile):
    y0 = torch.tensor([1.0, 2.0], dtype=F64)
    # The step budget runs out after three steps of four.
    short = [_solve(odecore.RK4(), y0, compile=c, max_steps=3, throw=False)
             for c in (compile, False)]  # fmt: skip
    assert short[0].status == short[1].status == odecore.Status.MAX_STEPS_REACHED
    assert short[0].t_final == short[1].t_final
    assert torch.equal(short[0].ys.isnan(), short[1].ys.isnan())

    def blows_up(t, y):
        return torch.where(t > 0.4, torch.full_like(y, math.inf), -y)

    bad = [_solve(odecore.RK4(), y0, compile=c, field=blows_up, throw=False)
           for c in (compile, False)]  # fmt: skip
    assert bad[0].status == bad[1].status == odecore.Status.NONFINITE
    assert bad[0].t_final == bad[1].t_final == 0.25
    assert torch.allclose(bad[0].ys, bad[1].ys, equal_nan=True)


def test_a_field_error_is_the_eager_error():
    with pytest.raises(ValueError, match=r"`func` returned shape \(3,\)"):
        _solve(odecore.RK4(), torch.ones(2, dtype=F64), compile=True,
               field=lambda t, y: torch.ones(3, dtype=F64))  # fmt: skip


# --- one graph, compiled once -------------------------------------------------------------


@COMPILES
def test_the_solve_is_one_graph(counter, compile):
    y0 = torch.ones(4, 2, dtype=F64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", odecore.CompileFallbackWarning)
        _solve(odecore.RK4(), y0, compile=compile)
    assert counter.frame_count == 1  # one frame, one graph (of the grid or a step): no break
    assert counter.op_count > 0


def test_explain_finds_no_graph_break():
    # Four steps of RK4 over [0, 1], outputs at 0.3 and 0.7 (inside steps) and at 1.
    schedule = _compiled._schedule(
        odecore.RK4(), 0.0, 1.0, (0.3, 0.7, 1.0), (1.0,), frozenset(), 0.25, 100, 1.0
    )
    assert len(schedule.program.steps) == 4
    y0 = torch.ones(4, 2, dtype=F64)
    tables = schedule.tensors(F64, y0.device)
    explanation = torch._dynamo.explain(_compiled._graph)(Field(), y0, *tables, schedule.program)
    assert explanation.graph_break_count == 0
    assert explanation.graph_count == 1


def test_no_recompilation_for_new_times_or_batch_size(counter):
    field = Field(F32)
    for batch, t in ((8, [0.0, 0.5, 1.0]), (5, [0.0, 0.7, 2.0]), (11, [1.0, 1.2, 1.3])):
        odecore.odeint(field, torch.randn(batch, 2), torch.tensor(t), method="rk4",
                       options={"compile": True})  # fmt: skip
    assert counter.frame_count == 1


@pytest.mark.parametrize(
    ("compile", "steps", "graphs"), [(True, (3, 4, 3, 4), 2), ("stepped", (3, 4, 40, 3), 1)]
)
def test_a_new_number_of_steps_compiles_the_grid_once_more_and_reuses_the_step(
    counter, compile, steps, graphs
):
    field = Field(F32)
    for n in steps:
        t = torch.linspace(0.0, 1.0, n + 1)
        odecore.odeint(field, torch.randn(2, 2), t, method="euler", options={"compile": compile})
    assert counter.frame_count == graphs


def test_the_recompile_limit_is_named_once_with_how_to_raise_it(counter):
    """Each new field is a new graph of one step (the method); past dynamo's
    limit (2 here, 8 by default) the solve ran eagerly with "Hard failure due to
    fullgraph=True" as its reason, and dynamo logged the limit at every solve."""
    fields = [lambda t, y: -y, lambda t, y: -2 * y, lambda t, y: y / -3, lambda t, y: y.neg()]
    y0 = torch.tensor([1.0, 2.0], dtype=F64)
    with torch._dynamo.config.patch(recompile_limit=2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", odecore.CompileFallbackWarning)
            sols = [_solve(odecore.Euler(), y0, compile=True, field=f) for f in fields]
        messages = [str(w.message) for w in caught if w.category is odecore.CompileFallbackWarning]
        assert len(messages) == 1, messages
        assert re.search(
            r"recompile limit.*`torch\._dynamo\.config\.recompile_limit` = 2.*one field.*"
            r"torch\._dynamo\.config\.recompile_limit = 4",
            messages[0],
        ), messages[0]
        assert "Hard failure" not in messages[0]
        assert counter.frame_count == 2
        for sol, f in zip(sols, fields):
            assert _rel(sol.ys, _solve(odecore.Euler(), y0, compile=False, field=f).ys) <= 1e-12
        # Raised as the warning says, the limit lets the next field compile.
        with torch._dynamo.config.patch(recompile_limit=4), warnings.catch_warnings():
            warnings.simplefilter("error", odecore.CompileFallbackWarning)
            _solve(odecore.Euler(), y0, compile=True, field=fields[-1])
    assert counter.frame_count == 3


# --- the switch ----------------------------------------------------------------------------


def test_the_odeint_option_compiles(counter):
    t = torch.linspace(0.0, 1.0, 4, dtype=F64)
    y0 = torch.ones(3, 2, dtype=F64)
    ys = odecore.odeint(Field(), y0, t, method="midpoint", options={"compile": True})
    assert counter.frame_count == 1
    assert _rel(ys, odecore.odeint(Field(), y0, t, method="midpoint")) <= 1e-12


def test_the_spec_carries_compile():
    spec = odecore.OdeSpec.from_method("rk4", options={"n_steps": 4, "compile": True})
    assert spec.compile is True
    assert odecore.OdeSpec().compile is False
    assert odecore.OdeSpec(solver=odecore.RK4(), n_steps=2, compile=True).compile


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: odecore.OdeSpec(compile=1),
            r"`compile` must be True, False or \"stepped\", got 1",
        ),
        (
            lambda: odecore.OdeSpec.from_method("rk4", options={"compile": "yes"}),
            r"The option `compile` must be True, False or \"stepped\", got 'yes'",
        ),
        (
            lambda: _solve(odecore.RK4(), torch.ones(1), compile="inductor"),
            r"`compile` must be True, False or \"stepped\", got 'inductor'",
        ),
    ],
    ids=["spec", "option", "solve"],
)
def test_compile_must_be_a_bool_or_stepped(call, match):
    with pytest.raises(TypeError, match=match):
        call()


def test_stepped_is_an_adaptive_solves_compile_and_jumps_fall_back_with_stepped(counter):
    t, y0 = torch.tensor([0.0, 1.0], dtype=F64), torch.ones(2, dtype=F64)
    odecore.odeint(Field(), y0, t, method="dopri5", options={"compile": "stepped"})
    assert counter.frame_count == 1  # an adaptive solve's steps, as with True
    with pytest.warns(odecore.CompileFallbackWarning, match=r'jump_ts with compile="stepped"'):
        opts = {"compile": "stepped", "step_size": 0.1, "jump_t": [0.5]}
        ys = odecore.odeint(Field(), y0, t, method="rk4", options=opts)
    expected = odecore.odeint(
        Field(), y0, t, method="rk4", options={"step_size": 0.1, "jump_t": [0.5]}
    )
    assert torch.equal(ys, expected)


def test_unknown_option_lists_compile():
    with pytest.raises(ValueError, match=r"known options: .*compile"):
        odecore.odeint(lambda t, y: -y, torch.ones(1), torch.tensor([0.0, 1.0]),
                       method="rk4", options={"compiled": True})  # fmt: skip


# --- what does not compile says so ---------------------------------------------------------


def _event(t, y):
    return y[0] - 0.5


FALLBACKS = {
    "adaptive, constant steps": (
        {"solver": odecore.Dopri5(), "controller": odecore.ConstantStepSize()},
        r"the controller ConstantStepSize of an adaptive solver",
    ),
    "adaptive, jumps": (
        {"solver": odecore.Dopri5(), "controller": odecore.PIDController(), "jump_ts": [0.5]},
        r"jump_ts with an adaptive solver",
    ),
    "implicit": ({"solver": odecore.ImplicitEuler()}, r"the solver ImplicitEuler"),
    "adjoint, interpolated": (
        {"gradient": odecore.Adjoint(state="interpolated")},
        r"the gradient method Adjoint",
    ),
    "adjoint, implicit backward": (
        {"gradient": odecore.Adjoint(solver=odecore.ImplicitEuler())},
        r"the solver ImplicitEuler .* in the adjoint's backward solve",
    ),
    "checkpoint, rosenbrock": (
        {
            "solver": odecore.Rodas5P(),
            "controller": odecore.PIDController(),
            "gradient": odecore.Checkpoint(),
        },
        r"the gradient method Checkpoint",
    ),
    "checkpoint, jumps": (
        {"gradient": odecore.Checkpoint(), "jump_ts": [0.5]},
        r"jump_ts with .*Checkpoint",
    ),
    "adjoint, rosenbrock backward": (
        {"gradient": odecore.Adjoint(solver=odecore.Rodas5P())},
        r"the solver Rodas5P in the adjoint's backward solve",
    ),
    "adjoint, jumps": (
        {"gradient": odecore.Adjoint(), "jump_ts": [0.5]},
        r"jump_ts with .*Adjoint",
    ),
    "event": ({"event": odecore.Event(_event)}, r"an event"),
    "dense": ({"saveat": odecore.SaveAt(dense=True)}, r"SaveAt\(dense=True\)"),
}


@pytest.mark.parametrize("case", sorted(FALLBACKS))
def test_what_does_not_compile_runs_eagerly_with_one_warning(case, counter):
    kwargs, match = FALLBACKS[case]
    kwargs = {"solver": odecore.RK4(), "dt0": 0.25, **kwargs}
    y0 = torch.tensor([1.0, 2.0], dtype=F64)
    with pytest.warns(odecore.CompileFallbackWarning, match=match) as caught:
        sol = odecore.solve(lambda t, y: -y, y0, t0=0.0, t1=1.0, compile=True, **kwargs)
    assert len(caught) == 1
    assert caught[0].filename == __file__  # points at the caller's line
    assert counter.frame_count == 0
    eager = odecore.solve(lambda t, y: -y, y0, t0=0.0, t1=1.0, **kwargs)
    if sol.ys.numel():
        assert torch.equal(sol.ys, eager.ys)


def test_odeint_adjoint_compiles_and_matches_eager(counter):
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64)
    rate = torch.tensor(-0.7, dtype=F64, requires_grad=True)
    grads = []
    for compile in (False, True):
        y0 = torch.ones(2, dtype=F64, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error", odecore.CompileFallbackWarning)
            ys = odecore.odeint_adjoint(lambda t, y: rate * y, y0, t, method="rk4",
                                        options={"compile": compile, "step_size": 0.1})  # fmt: skip
        grads.append(torch.autograd.grad(ys.square().sum(), (y0, rate)))
    assert counter.frame_count > 0
    for got, want in zip(grads[1], grads[0], strict=True):
        assert torch.allclose(got, want, rtol=1e-12, atol=0)


def test_a_field_that_does_not_compile_runs_eagerly_with_a_warning():
    def reads_the_host(t, y):
        return -torch.tensor(y.tolist(), dtype=y.dtype)  # a host read: no single graph

    y0 = torch.tensor([1.0, 2.0], dtype=F64)
    with pytest.warns(odecore.CompileFallbackWarning, match=r"torch.compile failed"):
        sol = _solve(odecore.RK4(), y0, compile=True, field=reads_the_host)
    eager = _solve(odecore.RK4(), y0, compile=False, field=reads_the_host)
    assert torch.equal(sol.ys, eager.ys)


def test_without_inductor_the_solve_runs_eagerly(monkeypatch):
    monkeypatch.setattr(_compiled, "_BACKEND", "inductor")
    monkeypatch.setattr(_compiled, "inductor_problem", lambda device: "no C++ compiler (test)")
    y0 = torch.tensor([1.0, 2.0], dtype=F64)
    with pytest.warns(odecore.CompileFallbackWarning, match=r"inductor cannot run here: no C\+\+"):
        sol = _solve(odecore.RK4(), y0, compile=True)
    assert torch.equal(sol.ys, _solve(odecore.RK4(), y0, compile=False).ys)


# --- inductor itself -----------------------------------------------------------------------

_INDUCTOR = _compiled.inductor_problem("cpu")


@pytest.mark.slow
@pytest.mark.skipif(_INDUCTOR is not None, reason=f"inductor cannot run here: {_INDUCTOR}")
def test_inductor_compiles_forward_and_backward(monkeypatch):
    monkeypatch.setattr(_compiled, "_BACKEND", "inductor")
    grads = []
    for compile in (True, False):
        field = Field()
        y0 = torch.tensor([[1.0, 0.5], [-0.3, 2.0]], dtype=F64, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error", odecore.CompileFallbackWarning)
            sol = odecore.solve(field, y0, t0=0.0, t1=1.0, solver=odecore.Midpoint(),
                                dt0=0.5, compile=compile)  # fmt: skip
        sol.ys.sum().backward()
        grads.append((sol.ys.detach(), y0.grad, field.a.grad))
    for compiled, eager in zip(*grads):
        assert _rel(compiled, eager) <= 1e-12


@pytest.mark.slow
@pytest.mark.skipif(_INDUCTOR is not None, reason=f"inductor cannot run here: {_INDUCTOR}")
@pytest.mark.parametrize("dtype", [torch.float32, F64], ids=str)
def test_inductor_keeps_the_stage_weights_of_a_field_ending_in_a_matrix_product(monkeypatch, dtype):
    # Inductor rewrote ``torch.add(acc, k, alpha=w)`` of a stage ``k = y @ A.T`` into an
    # addmm without the weight: one rk4 step of a linear system was 0.5 off, silently.
    monkeypatch.setattr(_compiled, "_BACKEND", "inductor")
    torch.manual_seed(0)
    m = torch.randn(16, 16, dtype=dtype) / 4
    a = torch.nn.Parameter(m - m.T - 0.5 * torch.eye(16, dtype=dtype))
    y0 = torch.randn(64, 16, dtype=dtype)
    for solver in (odecore.RK4(), odecore.Heun3()):
        with torch.no_grad():
            compiled, eager = (
                odecore.solve(lambda t, y: y @ a.T, y0, t0=0.0, t1=1.0, solver=solver, dt0=0.5,
                              compile=compile).ys[-1]
                for compile in (True, False)
            )  # fmt: skip
        assert _rel(compiled, eager) <= (1e-12 if dtype == F64 else 1e-5), solver


@pytest.mark.slow
@pytest.mark.skipif(_INDUCTOR is not None, reason=f"inductor cannot run here: {_INDUCTOR}")
def test_inductor_compiles_rosenbrock_steps_forward_and_backward(monkeypatch):
    # Its C++ kernels fuse the LU substitutions: results within rounding of eager.
    monkeypatch.setattr(_compiled, "_BACKEND", "inductor")
    runs = []
    for compile in (True, False):
        mu = torch.tensor(100.0, dtype=F64, requires_grad=True)
        y0 = torch.tensor([2.0, 0.0], dtype=F64, requires_grad=True)

        def vdp(t, y, mu=mu):
            x, v = y.unbind(-1)
            return torch.stack([v, mu * (1 - x * x) * v - x], dim=-1)

        with warnings.catch_warnings():
            warnings.simplefilter("error", odecore.CompileFallbackWarning)
            sol = odecore.solve(vdp, y0, t0=0.0, t1=5.0, solver=odecore.Rodas5P(),
                                controller=odecore.PIDController(rtol=1e-7, atol=1e-7),
                                compile=compile)  # fmt: skip
        runs.append((sol.ys.detach(), *torch.autograd.grad(sol.ys.sum(), (y0, mu))))
        runs[-1] += (torch.tensor(float(sol.stats.n_steps)),)
    for compiled, eager in zip(*runs):
        assert _rel(compiled, eager) <= 1e-10


@pytest.mark.slow
@pytest.mark.skipif(_INDUCTOR is not None, reason=f"inductor cannot run here: {_INDUCTOR}")
def test_inductor_runs_a_solve_without_a_graph_as_one_loop(monkeypatch):
    # The loop graph in inductor's C++ wrapper, over a module that reads a view of its
    # parameter (a.T) at every stage: no fallback to the compiled steps one by one.
    from odecore import _compiled_step

    monkeypatch.setattr(_compiled, "_BACKEND", "inductor")
    monkeypatch.setattr(_compiled, "_NO_LOOP", set())
    runs = []
    steps = _compiled_step._Looper.steps
    monkeypatch.setattr(_compiled_step._Looper, "steps", lambda *a: runs.append(1) or steps(*a))

    class Transposed(Field):
        def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.tanh(y @ self.a.T) + self.b * torch.cos(t)

    y0 = torch.tensor([[1.0, 0.5], [-0.3, 2.0]], dtype=F64)
    sols = []
    for compile in (True, False):
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("error", odecore.CompileFallbackWarning)
            sols.append(odecore.solve(Transposed(), y0, t0=0.0, t1=5.0, solver=odecore.Dopri5(),
                                      controller=odecore.PIDController(rtol=1e-8, atol=1e-10),
                                      saveat=odecore.SaveAt(ts=[1.0, 2.5, 5.0]),
                                      compile=compile))  # fmt: skip
    compiled, eager = sols
    assert runs and not _compiled._NO_LOOP
    assert compiled.stats == eager.stats
    assert _rel(compiled.ys, eager.ys) <= 1e-12


@pytest.mark.slow
@pytest.mark.skipif(_INDUCTOR is not None, reason=f"inductor cannot run here: {_INDUCTOR}")
def test_inductor_runs_per_sample_rosenbrock_steps_as_one_loop_at_any_batch_size(monkeypatch):
    # The per-sample loop of a Rosenbrock method in inductor's C++, its LU written out,
    # at a batch of 1 and then of 16: the second is a graph with a dynamic batch, which
    # failed to lower (torch 2.13) while the loop closed over the batch size.
    monkeypatch.setattr(_compiled, "_BACKEND", "inductor")
    monkeypatch.setattr(odecore._per_sample, "_FAILED", set())
    control = odecore.PIDController(rtol=1e-7, atol=1e-9, per_sample=True)
    for batch in (1, 16):
        mu = torch.linspace(5.0, 50.0, batch, dtype=F64)[:, None]

        def vdp(t, y, mu=mu):
            x, v = y[..., :1], y[..., 1:]
            return torch.cat((v, mu * (1 - x * x) * v - x), -1)

        y0 = torch.tensor([[2.0, 0.0]], dtype=F64).repeat(batch, 1)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("error", odecore.CompileFallbackWarning)
            compiled, eager = (
                odecore.solve(vdp, y0, t0=0.0, t1=2.0, solver=odecore.Rodas5P(independent=True),
                              controller=control, compile=compile)
                for compile in (True, False)
            )  # fmt: skip
        assert torch.equal(compiled.n_accepted_per_sample, eager.n_accepted_per_sample)
        assert _rel(compiled.ys, eager.ys) <= 1e-10


SPECS = [
    ("rk4", {"n_steps": 4}, "backprop"),
    ("euler", {"n_steps": 3}, "backprop"),
    ("dopri5", None, "backprop"),
    ("dopri5", None, "adjoint"),
    ("rk4", {"n_steps": 4}, "adjoint"),
    ("rk4", {"n_steps": 4}, "checkpoint"),
    ("implicit_euler", {"n_steps": 4}, "backprop"),
]


@pytest.mark.parametrize(("method", "options", "gradient"), SPECS)
def test_compile_blockers_name_what_makes_a_solve_of_the_spec_fall_back(
    method, options, gradient, counter
):
    spec = odecore.OdeSpec.from_method(method, options=options, gradient=gradient)
    blockers = spec.compile_blockers()
    compiled = odecore.OdeSpec.from_method(
        method, options={**(options or {}), "compile": True}, gradient=gradient
    )
    y0 = torch.tensor([[1.0, -0.5]], dtype=F64)
    field = Field()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", odecore.CompileFallbackWarning)
        odecore.solve(
            field, y0, t0=0.0, t1=1.0, solver=compiled.solver, controller=compiled.controller,
            gradient=compiled.gradient, dt0=compiled.step_size(0.0, 1.0), compile=True,
        )  # fmt: skip
    fallbacks = [str(w.message) for w in caught if w.category is odecore.CompileFallbackWarning]
    if blockers:
        assert len(fallbacks) == 1 and all(b in fallbacks[0] for b in blockers)
        assert counter.frame_count == 0
    else:
        assert fallbacks == [] and counter.frame_count == 1

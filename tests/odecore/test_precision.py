"""Half-precision states, tolerances a dtype cannot hold, and fields of the wrong dtype."""

from __future__ import annotations

import math

import numpy as np
import odecore
import pytest
import torch
from scipy.integrate import solve_ivp

HALF = [torch.bfloat16, torch.float16]
ADAPTIVE = [odecore.Dopri5(), odecore.Bosh3(), odecore.Tsit5()]
FIXED = [
    odecore.Euler(),
    odecore.Midpoint(),
    odecore.Heun(),
    odecore.Ralston(),
    odecore.RK4(),
    odecore.RK4ThreeEighths(),
]


def _name(x: object) -> str:
    return type(x).__name__


def _ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of ``dtype`` at ``x`` (normal range), in float64."""
    x = x.double().abs().clamp_min(torch.finfo(dtype).tiny)
    return torch.finfo(dtype).eps * torch.exp2(torch.floor(torch.log2(x)))


# --- adaptive solves in half precision ---------------------------------------------


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("solver", ADAPTIVE, ids=_name)
@pytest.mark.parametrize("multiple", [1, 4])
def test_half_precision_decay_meets_its_tolerance(dtype, solver, multiple):
    """y' = -y at the smallest allowed rtol (and above) lands within 3 tolerances of exp(-t)."""
    rtol = multiple * torch.finfo(dtype).eps
    atol = rtol * 1e-2
    y0 = torch.tensor([1.0, 0.3, -3.0], dtype=dtype)
    ts = [0.5, 1.0]
    sol = odecore.solve(
        lambda t, y: -y,
        y0,
        t0=0.0,
        t1=1.0,
        solver=solver,
        controller=odecore.PIDController(rtol=rtol, atol=atol),
        saveat=odecore.SaveAt(ts=ts),
    )
    assert sol.ys.dtype == dtype
    exact = y0.double() * torch.tensor([math.exp(-t) for t in ts], dtype=torch.float64)[:, None]
    error = (sol.ys.double() - exact).abs() / (atol + rtol * exact.abs())
    assert error.max() <= 3.0


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_precision_scaled_error_reaches_the_norm_in_float32(dtype):
    """In float16 the scaled error overflows at 65504; the ratio is computed in float32."""
    seen = []

    def norm(scaled):
        seen.append(scaled.dtype)
        return odecore.rms_norm(scaled)

    controller = odecore.PIDController(rtol=1e-2, atol=1e-6, norm=norm)
    odecore.solve(
        lambda t, y: -y, torch.ones(2, dtype=dtype), t0=0.0, t1=1.0,
        solver=odecore.Dopri5(), controller=controller, dt0=0.1,
    )  # fmt: skip
    assert set(seen) == {torch.float32}


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_precision_first_step_with_a_zero_component_and_a_small_atol(dtype):
    """The automatic first step divides by atol where y0 is 0: in float16 that overflowed
    (a ZeroDivisionError); it is measured in float32."""
    y0 = torch.tensor([1.0, 0.0], dtype=dtype)
    push = torch.tensor([0.0, 5.0], dtype=dtype)
    sol = odecore.solve(
        lambda t, y: -y + push, y0, t0=0.0, t1=1.0, solver=odecore.Dopri5(),
        controller=odecore.PIDController(rtol=1e-2, atol=1e-5),
    )  # fmt: skip
    exact = torch.tensor([math.exp(-1.0), 5 * (1 - math.exp(-1.0))], dtype=torch.float64)
    assert (sol.ys[-1].double() - exact).abs().max() <= 3 * (1e-5 + 1e-2 * exact.abs().max())


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_precision_adjoint_gradient(dtype):
    """d y(1) / d y0 = exp(-1) through the backward solve, in the state's dtype."""
    rtol = torch.finfo(dtype).eps
    y0 = torch.ones(1, dtype=dtype, requires_grad=True)
    t = torch.tensor([0.0, 1.0])
    ys = odecore.odeint_adjoint(lambda t, y: -y, y0, t, rtol=rtol, atol=rtol * 1e-2)
    ys[-1].sum().backward()
    assert y0.grad is not None and y0.grad.dtype == dtype
    assert abs(y0.grad.double().item() - math.exp(-1.0)) <= 3 * rtol * math.exp(-1.0)


# --- tolerances the dtype cannot hold -------------------------------------------------

REFUSAL = (
    r"`{name}` is {tol!r}, below the resolution of the state's dtype {dtype} "
    r"\(eps = {eps!r}\).*Loosen it to `{name}` >= {eps!r}, or solve in float32"
)


def _refusal(name: str, tol: float, dtype: torch.dtype) -> str:
    eps = torch.finfo(dtype).eps
    return REFUSAL.format(name=name, tol=tol, dtype=dtype, eps=eps)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("solver", ADAPTIVE, ids=_name)
def test_solve_refuses_the_default_tolerance_in_half_precision(dtype, solver):
    with pytest.raises(odecore.ConfigurationError, match=_refusal("rtol", 1e-7, dtype)):
        odecore.solve(lambda t, y: -y, torch.ones(1, dtype=dtype), t0=0.0, t1=1.0, solver=solver)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_solve_refuses_a_tolerance_just_below_eps(dtype):
    rtol = 0.9 * torch.finfo(dtype).eps
    with pytest.raises(odecore.ConfigurationError, match=_refusal("rtol", rtol, dtype)):
        odecore.solve(
            lambda t, y: -y, (torch.ones(1, dtype=dtype), torch.ones(2, dtype=dtype)),
            t0=0.0, t1=1.0, solver=odecore.Dopri5(),
            controller=odecore.PIDController(rtol=rtol),
        )  # fmt: skip


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("method", ["dopri5", "bosh3", "tsit5"])
def test_odeint_refuses_the_default_tolerance_in_half_precision(dtype, method):
    with pytest.raises(odecore.ConfigurationError, match=_refusal("rtol", 1e-7, dtype)):
        odecore.odeint(lambda t, y: -y, torch.ones(1, dtype=dtype), torch.tensor([0.0, 1.0]),
                       method=method)  # fmt: skip


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_odeint_adjoint_refuses_a_backward_tolerance_below_eps(dtype):
    rtol = torch.finfo(dtype).eps
    with pytest.raises(odecore.ConfigurationError, match=_refusal("adjoint_rtol", 1e-5, dtype)):
        odecore.odeint_adjoint(
            lambda t, y: -y, torch.ones(1, dtype=dtype), torch.tensor([0.0, 1.0]),
            rtol=rtol, atol=rtol, adjoint_rtol=1e-5, adjoint_atol=rtol,
        )  # fmt: skip


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_solve_refuses_an_adjoint_controller_below_eps(dtype):
    rtol = torch.finfo(dtype).eps
    backward = odecore.Adjoint(controller=odecore.PIDController(rtol=1e-4))
    with pytest.raises(odecore.ConfigurationError, match=_refusal("adjoint_rtol", 1e-4, dtype)):
        odecore.solve(
            lambda t, y: -y, torch.ones(1, dtype=dtype), t0=0.0, t1=1.0,
            solver=odecore.Dopri5(), controller=odecore.PIDController(rtol=rtol),
            gradient=backward,
        )  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_single_and_double_precision_keep_tight_tolerances(dtype):
    """float32 below its eps is not refused: a step there still moves the state."""
    ys = odecore.odeint(lambda t, y: -y, torch.ones(1, dtype=dtype), torch.tensor([0.0, 1.0]),
                        rtol=1e-9, atol=1e-11)  # fmt: skip
    assert abs(ys[-1].item() - math.exp(-1.0)) <= 4 * max(torch.finfo(dtype).eps, 1e-9)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("solver", FIXED, ids=_name)
def test_fixed_steps_are_not_refused(dtype, solver):
    sol = odecore.solve(lambda t, y: -y, torch.ones(1, dtype=dtype), t0=0.0, t1=1.0,
                        solver=solver, dt0=0.25)  # fmt: skip
    assert sol.ys.dtype == dtype


# --- fixed steps in half precision ------------------------------------------------------


def _forced(t, y):
    return -y + torch.sin(3 * t)


def _steps_rounded(solver, ys, h, dtype):
    """Each step taken in float32 from the half-precision state before it, then rounded."""
    out = [
        odecore.solve(_forced, y.float(), t0=i * h, t1=(i + 1) * h, solver=solver, dt0=h)
        .ys[-1]
        .to(dtype)
        for i, y in enumerate(ys[:-1])
    ]
    return torch.stack(out)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("solver", FIXED, ids=_name)
def test_fixed_steps_match_float32_steps_rounded(dtype, solver):
    h, n = 0.125, 8
    y0 = torch.tensor([1.0, -0.5, 3.0, 0.01, 100.0], dtype=dtype)
    sol = odecore.solve(_forced, y0, t0=0.0, t1=n * h, solver=solver, dt0=h,
                        saveat=odecore.SaveAt(ts=[i * h for i in range(n + 1)]))  # fmt: skip
    expected = _steps_rounded(solver, sol.ys, h, dtype)
    ulps = (sol.ys[1:].double() - expected.double()).abs() / _ulp(expected, dtype)
    assert ulps.max() <= 2


def _rk4_times(t0, h, n):
    """Where an RK4 solve evaluates, in float64: ``f(t0)``, then per step the stages at
    ``c = 1/2, 1/2, 1`` and ``f`` at the step's end to start the next (RK4 is not FSAL)."""
    ends = [t0 + (i + 1) * h for i in range(n)]
    stages = [[t0 + i * h + h / 2, t0 + i * h + h / 2, ends[i], ends[i]] for i in range(n)]
    return [t0, *[t for step in stages for t in step][:-1]]


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize(("t0", "t1"), [(0.0, 3.0), (3.0, 0.0), (100.0, 103.0)])
def test_times_seen_by_the_field_are_the_stage_times_rounded_once(dtype, t0, t1):
    """The loop keeps time in float64; the field sees each stage time rounded once."""
    seen = []

    def field(t, y):
        seen.append(t)
        return -y

    n = 30
    h = (t1 - t0) / n
    odecore.solve(field, torch.ones(1, dtype=dtype), t0=t0, t1=t1, solver=odecore.RK4(), dt0=h)
    expected = _rk4_times(t0, h, n)
    assert all(t.dtype == dtype and t.dim() == 0 for t in seen)
    assert torch.stack(seen).tolist() == torch.tensor(expected, dtype=dtype).tolist()


# --- what func returns ---------------------------------------------------------------------

F32, F64 = torch.float32, torch.float64
T = torch.tensor([0.0, 1.0], dtype=F64)


def _run(entry, func, y0):
    if entry == "solve":
        return odecore.solve(func, y0, t0=0.0, t1=1.0, solver=odecore.Dopri5())
    if entry == "solve-adjoint":
        return odecore.solve(func, y0, t0=0.0, t1=1.0, solver=odecore.Dopri5(),
                             gradient=odecore.Adjoint())  # fmt: skip
    if entry == "odeint-rk4":
        return odecore.odeint(func, y0, T, method="rk4")
    return getattr(odecore, entry)(func, y0, T)


ENTRIES = ["solve", "solve-adjoint", "odeint", "odeint-rk4", "odeint_adjoint"]


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(
    ("func", "y0", "error", "match"),
    [
        (
            lambda t, y: -y.float(),
            torch.ones(3, dtype=F64),
            TypeError,
            r"`func` returned dtype torch.float32, but the state `y0` has dtype torch.float64; "
            r".*expected shape \(3,\) and dtype torch.float64, got shape \(3,\) and dtype "
            r"torch.float32. Cast the result with `.to\(y.dtype\)`",
        ),
        (
            lambda t, y: torch.zeros(2, 3, dtype=torch.int64),
            torch.ones(2, 3, dtype=F64),
            TypeError,
            r"`func` returned dtype torch.int64, but the state `y0` has dtype torch.float64; "
            r".*expected shape \(2, 3\) and dtype torch.float64, got shape \(2, 3\) and dtype "
            r"torch.int64",
        ),
        (
            lambda t, y: -y[:2].float(),
            torch.ones(3, dtype=F64),
            ValueError,
            r"`func` returned shape \(2,\), but the state `y0` has shape \(3,\); .*expected "
            r"shape \(3,\) and dtype torch.float64, got shape \(2,\) and dtype torch.float32",
        ),
        (
            lambda t, y: torch.zeros(3, dtype=F64, device="meta"),
            torch.ones(3, dtype=F64),
            TypeError,
            r"`func` returned a tensor on meta, but the state `y0` is on cpu",
        ),
    ],
    ids=["float32", "int64", "shape", "device"],
)
def test_tensor_state_field_mismatch(entry, func, y0, error, match):
    with pytest.raises(error, match=match):
        _run(entry, func, y0)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(
    ("func", "error", "match"),
    [
        (
            lambda t, s: (-s[0], -s[1].float()),
            TypeError,
            r"`func` returned dtype torch.float32 for `y0\[1\]`, but `y0\[1\]` has dtype "
            r"torch.float64; .*expected shape \(2,\) and dtype torch.float64, got shape "
            r"\(2,\) and dtype torch.float32",
        ),
        (
            lambda t, s: (-s[0].long(), -s[1]),
            TypeError,
            r"`func` returned dtype torch.int64 for `y0\[0\]`, but `y0\[0\]` has dtype "
            r"torch.float64; .*expected shape \(3,\) and dtype torch.float64",
        ),
        (
            lambda t, s: (-s[0], -s[1][:1].float()),
            ValueError,
            r"`func` returned shape \(1,\) for `y0\[1\]`, but `y0\[1\]` has shape \(2,\); "
            r".*expected shape \(2,\) and dtype torch.float64, got shape \(1,\) and dtype "
            r"torch.float32",
        ),
        (
            lambda t, s: (-s[0], torch.zeros(2, dtype=F64, device="meta")),
            TypeError,
            r"`func` returned a tensor on meta for `y0\[1\]`, but `y0\[1\]` is on cpu",
        ),
    ],
    ids=["float32", "int64", "shape", "device"],
)
def test_tuple_state_field_mismatch(entry, func, error, match):
    y0 = (torch.ones(3, dtype=F64), torch.ones(2, dtype=F64))
    with pytest.raises(error, match=match):
        _run(entry, func, y0)


@pytest.mark.parametrize("state", ["tensor", "tuple"])
def test_an_autocast_field_is_brought_to_the_state_dtype(state):
    """Under torch.autocast a field's layers return bfloat16 by design: the solve keeps
    its sums in the state's float32, as it would with the field cast by hand."""
    lin = torch.nn.Linear(3, 3)
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    if state == "tuple":
        y0, field = (x,), (lambda t, y: (torch.tanh(lin(y[0])),))
        by_hand = lambda t, y: (torch.tanh(lin(y[0])).bfloat16().float(),)  # noqa: E731
    else:
        y0, field = x, (lambda t, y: torch.tanh(lin(y)))
        by_hand = lambda t, y: torch.tanh(lin(y.bfloat16().float())).bfloat16().float()  # noqa: E731
    solver, controller = odecore.Dopri5(), odecore.PIDController(rtol=1e-3, atol=1e-4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        sol = odecore.solve(field, y0, t0=0.0, t1=1.0, solver=solver, controller=controller)
    ys = sol.ys[0] if state == "tuple" else sol.ys
    assert ys.dtype == torch.float32
    reference = odecore.solve(by_hand, y0, t0=0.0, t1=1.0, solver=solver, controller=controller)
    expected = reference.ys[0] if state == "tuple" else reference.ys
    torch.testing.assert_close(ys, expected, rtol=2e-2, atol=2e-2)


# --- a 0-dim state keeps its dtype ------------------------------------------------------

ZERO_DIM_METHODS = {
    "euler": {"step_size": 0.25},
    "rk4": {"step_size": 0.25},
    "explicit_adams": {"step_size": 0.1},
    "implicit_adams": {"step_size": 0.1},
    "implicit_euler": {"step_size": 0.25},
    "radauIIA5": {"step_size": 0.25},
    "dopri5": None,
    "tsit5": None,
    "kvaerno5": None,
}


@pytest.mark.parametrize("method", sorted(ZERO_DIM_METHODS))
def test_a_zero_dim_float32_state_stays_float32(method):
    """Two 0-dim tensors promote: a 0-dim float64 step size or time times a 0-dim
    float32 state would make the solution float64. Times are float64 here."""
    y0 = torch.tensor(0.7, requires_grad=True)
    t = torch.tensor([0.0, 0.3, 1.0], dtype=torch.float64)
    ys = odecore.odeint(lambda t, y: torch.cos(t) * y - 0.5 * y**3, y0, t, method=method,
                        options=ZERO_DIM_METHODS[method])  # fmt: skip
    assert ys.dtype == torch.float32 and ys.shape == (3,)
    ys.sum().backward()
    assert y0.grad is not None and y0.grad.dtype == torch.float32


@pytest.mark.parametrize("solver", [odecore.RadauIIA5, odecore.Kvaerno5])
def test_an_implicit_solve_in_float32_does_not_depend_on_the_states_size(solver):
    """The stages of a float32 state of size 1e-6 are solved as closely, relative to
    it, as those of a state of size 1: Newton's absolute tolerance was raised to
    1.2e-5 whatever the state's size, so the first update passed and the solution
    was 1.3e-2 off (relative), against 1.2e-5 for the same problem at size 1."""

    def errors(size: float) -> float:
        def f(t, u):
            v = u / size
            return size * (-(v**3) - 3 * v + torch.cos(t))

        ts = [0.5, 1.0, 2.0]
        reference = solve_ivp(
            lambda t, v: -(v**3) - 3 * v + np.cos(t), (0, 2), [2.0], method="Radau",
            rtol=1e-12, atol=1e-14, t_eval=ts,
        ).y[0]  # fmt: skip
        fixed = solver is odecore.RadauIIA5
        sol = odecore.solve(
            f, torch.tensor([2 * size], dtype=torch.float32), t0=0.0, t1=2.0,
            solver=solver(newton=odecore.Newton(rtol=1e-12, atol=1e-14 * size)),
            controller=odecore.ConstantStepSize() if fixed
            else odecore.PIDController(rtol=1e-5, atol=1e-12 * size),
            dt0=0.05 if fixed else None, saveat=odecore.SaveAt(ts=ts),
        )  # fmt: skip
        return float(np.abs(sol.ys[:, 0].double().numpy() / size - reference).max())

    small, unit = errors(1e-6), errors(1.0)
    assert unit < 1e-4
    assert small < 2 * unit


# --- per-sample steps in half precision ----------------------------------------------


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("solver", [odecore.Dopri5(), odecore.Rodas4(independent=True)], ids=_name)
def test_half_precision_per_sample_steps_with_a_small_atol(dtype, solver):
    """Each sample's error ratio is measured in float32, as the shared controller's: in
    float16 ``y_err / (atol + rtol |y|)`` overflowed 65504 at atol = 1e-5, every step
    read as non-finite and the solve failed with a step size underflow."""
    y0 = torch.tensor([[1.0, 0.0], [2.0, 0.5]], dtype=dtype)
    push = torch.tensor([0.0, 5.0], dtype=dtype)
    rtol, atol = 1e-2, 1e-5
    sol = odecore.solve(
        lambda t, y: -y + push, y0, t0=0.0, t1=1.0, solver=solver,
        controller=odecore.PIDController(rtol=rtol, atol=atol, per_sample=True),
    )  # fmt: skip
    assert sol.ys.dtype == dtype
    e = math.exp(-1.0)
    exact = y0.double() * e + push.double() * (1 - e)
    error = (sol.ys[-1].double() - exact).abs() / (atol + rtol * exact.abs())
    assert error.max() <= 3.0

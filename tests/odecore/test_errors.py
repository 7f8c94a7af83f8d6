"""Every error path: wrong arguments raise at once, failed solves raise SolverError."""

from __future__ import annotations

import math
import re
import signal

import odecore
import pytest
import torch
from odecore import SolverError, Status

F64 = torch.float64
T01 = torch.tensor([0.0, 1.0], dtype=F64)


def decay(t, y):
    return -y


def odeint(y0=None, t=None, **kwargs):
    """``odecore.odeint`` on y' = -y with defaults for what a test does not vary."""
    func = kwargs.pop("func", decay)
    y0 = torch.ones(3, dtype=F64) if y0 is None else y0
    return odecore.odeint(func, y0, T01 if t is None else t, **kwargs)


# --- y0 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_y0_must_be_floating(dtype):
    y0 = torch.ones(3, dtype=dtype)
    match = rf"`y0` has dtype {re.escape(str(dtype))}; the solver needs a floating dtype"
    with pytest.raises(TypeError, match=match):
        odeint(y0)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_a_complex_y0_is_refused_without_advice_to_drop_its_imaginary_part(dtype):
    # The advice was `y0.float()`, which discards the imaginary part (y' = i y then
    # solves y' = 0 for real y0 = 1: a constant instead of a rotation).
    match = (
        rf"`y0` has dtype {re.escape(str(dtype))}; the solver needs a real floating dtype "
        r"and does not take complex states.*`torch\.view_as_real\(y0\)`"
    )
    with pytest.raises(TypeError, match=match) as raised:
        odeint(torch.ones(3, dtype=dtype), func=lambda t, y: 1j * y)
    assert ".float()" not in str(raised.value)
    with pytest.raises(TypeError, match=r"`y0\[1\]` has dtype .*`torch\.view_as_real\(y0\[1\]\)`"):
        odecore.solve(lambda t, s: s, (torch.ones(2), torch.ones(2, dtype=dtype)), t0=0.0,
                      t1=1.0, solver=odecore.Dopri5())  # fmt: skip


def test_y0_must_be_a_tensor():
    with pytest.raises(TypeError, match=r"`y0` must be a torch\.Tensor, got list"):
        odeint([1.0, 2.0])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_y0_must_be_finite(bad):
    y0 = torch.tensor([1.0, bad, 0.0], dtype=F64)
    with pytest.raises(ValueError, match=r"`y0` holds non-finite values \(NaN or inf\)"):
        odeint(y0)


def test_tuple_y0_components_must_be_finite():
    y0 = (torch.ones(2, dtype=F64), torch.tensor([0.0, math.nan], dtype=F64))
    with pytest.raises(ValueError, match=r"`y0\[1\]` holds non-finite values"):
        odeint(y0, func=lambda t, y: y)


def test_tuple_y0_components_must_be_floating():
    y0 = (torch.ones(2, dtype=F64), torch.ones(2, dtype=torch.int64))
    with pytest.raises(TypeError, match=r"`y0\[1\]` has dtype torch\.int64"):
        odeint(y0, func=lambda t, y: y)


def test_tuple_y0_components_must_share_dtype():
    y0 = (torch.ones(2, dtype=F64), torch.ones(2, dtype=torch.float32))
    with pytest.raises(
        TypeError,
        match=r"`y0\[1\]` has dtype torch\.float32 on cpu, but `y0\[0\]` has torch\.float64 "
        r"on cpu; every tensor of a tuple state needs the same dtype and device",
    ):
        odeint(y0, func=lambda t, y: y)


def test_empty_tuple_y0():
    with pytest.raises(ValueError, match=r"`y0` is an empty tuple"):
        odeint((), func=lambda t, y: y)


# --- t -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("t", "match"),
    [
        (torch.zeros(2, 2, dtype=F64), r"`t` must be a non-empty 1-D tensor, got shape \(2, 2\)"),
        (torch.tensor(1.0, dtype=F64), r"`t` must be a non-empty 1-D tensor, got shape \(\)"),
        (torch.zeros(0, dtype=F64), r"`t` must be a non-empty 1-D tensor, got shape \(0,\)"),
    ],
    ids=["2-d", "0-d", "empty"],
)
def test_t_must_be_1d(t, match):
    with pytest.raises(ValueError, match=match):
        odeint(t=t)


def test_t_must_be_a_tensor():
    with pytest.raises(TypeError, match=r"`t` must be a 1-D torch\.Tensor of times, got list"):
        odeint(t=[0.0, 1.0])


@pytest.mark.parametrize(
    "values",
    [[0.0, 1.0, 0.5], [0.0, 1.0, 1.0, 2.0], [0.0, 0.0], [1.0, 0.0, 0.5], [2.0, 1.0, 1.0]],
    ids=["zigzag", "repeated", "repeated-start", "down-up", "repeated-backward"],
)
@pytest.mark.parametrize("method", ["dopri5", "rk4"])
def test_t_must_be_strictly_monotone(values, method):
    with pytest.raises(ValueError, match=r"`t` must be strictly increasing or strictly decreasing"):
        odeint(t=torch.tensor(values, dtype=F64), method=method)


@pytest.mark.parametrize("bad", [math.nan, math.inf], ids=["nan", "inf"])
def test_t_must_be_finite(bad):
    with pytest.raises(ValueError, match=r"`t` must hold finite times"):
        odeint(t=torch.tensor([0.0, bad, 2.0], dtype=F64))


# --- tolerances, method, options ------------------------------------------------------------


@pytest.mark.parametrize("name", ["rtol", "atol"])
@pytest.mark.parametrize("value", [0.0, -1e-6, math.nan, math.inf])
def test_tolerances_must_be_positive(name, value):
    with pytest.raises(ValueError, match=rf"`{name}` must be a positive number, got {value!r}"):
        odeint(**{name: value})


@pytest.mark.parametrize("name", ["rtol", "atol"])
def test_tolerances_must_be_numbers(name):
    with pytest.raises(TypeError, match=rf"`{name}` must be a number, got str"):
        odeint(**{name: "1e-6"})


def test_unknown_method():
    with pytest.raises(
        ValueError, match=r"Unknown `method` 'RK4'; known methods: adaptive_heun, bosh3, "
    ):
        odeint(method="RK4")


def test_method_must_be_a_string():
    with pytest.raises(TypeError, match=r"`method` must be a string, got ABCMeta"):
        odeint(method=odecore.RK4)


def test_unknown_option():
    with pytest.raises(
        ValueError,
        match=r"Unknown option\(s\) \['atol', 'stepsize'\] for method 'rk4'; known options: "
        r"step_size, n_steps, jump_t, step_t, max_num_steps",
    ):
        odeint(method="rk4", options={"stepsize": 0.1, "atol": 1e-3})


def test_step_size_and_n_steps_together():
    with pytest.raises(
        ValueError, match=r"Give one of the options `step_size` and `n_steps`, not both"
    ):
        odeint(method="rk4", options={"step_size": 0.1, "n_steps": 10})


@pytest.mark.parametrize("value", [0, -3, 2.5, True, "4"], ids=repr)
def test_n_steps_must_be_a_positive_integer(value):
    with pytest.raises(ValueError, match=r"`n_steps` must be a positive integer, got "):
        odeint(method="euler", options={"n_steps": value})


@pytest.mark.parametrize(("method", "name"), [("rk4", "step_size"), ("dopri5", "first_step")])
@pytest.mark.parametrize("value", [0.0, -0.1, math.nan])
def test_step_options_must_be_positive(method, name, value):
    with pytest.raises(ValueError, match=rf"`{name}` must be a positive number"):
        odeint(method=method, options={name: value})


@pytest.mark.parametrize("value", [0, -1, 1.5, True], ids=repr)
def test_max_num_steps_must_be_a_positive_integer(value):
    with pytest.raises(ValueError, match=r"`max_num_steps` must be a positive integer"):
        odeint(options={"max_num_steps": value})


@pytest.mark.parametrize(
    ("option", "value", "match"),
    [
        ("safety", 2.0, r"`safety` must be in \(0, 1\]"),
        ("ifactor", 0.5, r"`factor_max` must be > 1"),
        ("dfactor", 1.5, r"`factor_min` must be in \(0, 1\)"),
        ("max_step", -1.0, r"`dt_max` must be positive"),
        # Was: taken, then a TypeError at the first step ('str' object is not callable).
        ("norm", "rms", r"`norm` must be a function of the scaled error"),
    ],
)
def test_controller_options_validated(option, value, match):
    with pytest.raises(ValueError, match=match):
        odeint(options={option: value})


@pytest.mark.parametrize(("name", "value"), [("jump_t", [0.5, math.nan]), ("step_t", [math.inf])])
def test_jump_and_step_times_must_be_finite(name, value):
    with pytest.raises(ValueError, match=rf"`{name[:4]}_ts` must hold finite times"):
        odeint(options={name: value})


# --- solve() arguments ------------------------------------------------------------------------


def solve(**kwargs):
    args = {
        "f": decay,
        "y0": torch.ones(2, dtype=F64),
        "t0": 0.0,
        "t1": 1.0,
        "solver": odecore.Dopri5(),
    }
    args.update(kwargs)
    return odecore.solve(**args)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"solver": "dopri5"}, TypeError, r"`solver` must be an odecore solver"),
        ({"controller": "pid"}, TypeError, r"`controller` must be an odecore controller"),
        ({"t1": math.inf}, ValueError, r"`t0` and `t1` must be finite"),
        ({"t0": math.nan}, ValueError, r"`t0` and `t1` must be finite"),
        (
            {"t1": torch.tensor([1.0, 2.0])},
            ValueError,
            r"`t1` must be a number or a one-element tensor, got a tensor of shape \(2,\)",
        ),
        (
            {
                "t0": torch.zeros(2, 1),
                "y0": torch.ones(2, 1, dtype=F64),
                "controller": odecore.PIDController(per_sample=True),
            },
            ValueError,
            r"`t0` must be a number or a one-element tensor, got .* shape \(2, 1\)",
        ),
        ({"max_steps": 0}, ValueError, r"`max_steps` must be a positive integer, got 0"),
        ({"dt0": 0.0}, ValueError, r"`dt0` must be a non-zero finite number, got 0\.0"),
        ({"dt0": math.inf}, ValueError, r"`dt0` must be a non-zero finite number"),
        # A dt0 that requires grad raised "add(): argument 'alpha' must be Number".
        (
            {"dt0": torch.tensor(0.1, dtype=F64, requires_grad=True)},
            ValueError,
            r"`dt0` requires grad, but `solve` takes it as a number, which has no gradient",
        ),
        ({"dt0": True}, ValueError, r"`dt0` must be a number, got True"),
        ({"dt0": torch.ones(2)}, ValueError, r"`dt0` must be a number, got tensor"),
        (
            {"saveat": odecore.SaveAt(ts=[0.0, 2.0])},
            ValueError,
            r"`saveat\.ts` must lie within \[0\.0, 1\.0\]",
        ),
        (
            {"saveat": odecore.SaveAt(ts=[0.5, 0.2])},
            ValueError,
            r"`saveat\.ts` must be monotone in the direction of integration \(increasing\)",
        ),
        (
            {"t0": 1.0, "t1": 0.0, "saveat": odecore.SaveAt(ts=[0.2, 0.5])},
            ValueError,
            r"`saveat\.ts` must be monotone in the direction of integration \(decreasing\)",
        ),
        (
            {"saveat": odecore.SaveAt(ts=torch.zeros(2, 2))},
            ValueError,
            r"`saveat\.ts` must be 1-D, got shape \(2, 2\)",
        ),
    ],
    ids=[
        "solver",
        "controller",
        "t1-inf",
        "t0-nan",
        "t1-tensor",
        "t0-tensor-per-sample",
        "max_steps",
        "dt0-zero",
        "dt0-inf",
        "dt0-requires-grad",
        "dt0-bool",
        "dt0-tensor",
        "saveat-outside",
        "saveat-order",
        "saveat-order-backward",
        "saveat-2d",
    ],
)
def test_solve_argument_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        solve(**kwargs)


def test_saveat_must_save_something():
    with pytest.raises(
        ValueError, match=r"`SaveAt\(\)` saves nothing; pass `ts=`, `t1=True` or `dense=True`"
    ):
        odecore.SaveAt()


def test_configuration_errors_are_odecore_errors():
    with pytest.raises(odecore.OdeCoreError):
        solve(max_steps=-1)


# --- what func returns ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["dopri5", "rk4", "euler"])
def test_func_returning_wrong_shape(method):
    with pytest.raises(
        ValueError,
        match=r"`func` returned shape \(2,\), but the state `y0` has shape \(3,\)",
    ):
        odeint(func=lambda t, y: y[:2], method=method)


def test_func_returning_broadcastable_shape_is_still_wrong():
    with pytest.raises(ValueError, match=r"`func` returned shape \(1, 3\)"):
        odeint(func=lambda t, y: -y[None])


@pytest.mark.parametrize(
    ("later", "error", "match"),
    [
        (lambda y: (-y).float(), TypeError, r"`func` returned dtype torch.float32, but"),
        (lambda y: -y[..., :1], ValueError, r"`func` returned shape \(1, 1\), but"),
    ],
    ids=["dtype", "shape"],
)
@pytest.mark.parametrize(
    ("gradient", "per_sample"),
    [
        (odecore.Autograd(), False),
        (odecore.Adjoint(), False),
        (odecore.Checkpoint(), False),
        (odecore.Autograd(), True),
    ],
    ids=["autograd", "adjoint", "checkpoint", "per_sample"],
)
def test_func_returning_another_dtype_or_shape_later_is_refused(
    later, error, match, gradient, per_sample
):
    """Only the field's first result was checked: one that branches on ``t`` and returns
    float32 later was promoted to float64 silently, and one of shape (1, 1) broadcast
    over the state (both solves returned plausible numbers)."""
    y0 = torch.ones(1, 3, dtype=F64, requires_grad=True)
    with pytest.raises(error, match=match):
        odecore.solve(
            lambda t, y: later(y) if bool((t > 0.5).all()) else -y, y0, t0=0.0, t1=1.0,
            solver=odecore.Dopri5(), controller=odecore.PIDController(per_sample=per_sample),
            gradient=gradient,
        )  # fmt: skip


def test_func_returning_non_tensor():
    with pytest.raises(TypeError, match=r"`func` must return a Tensor, got list"):
        odeint(func=lambda t, y: [0.0, 0.0, 0.0])


@pytest.mark.parametrize(
    ("func", "error", "match"),
    [
        (
            lambda t, s: s[0],
            TypeError,
            r"`func` must return a tuple of 2 tensors for a tuple state, got Tensor",
        ),
        (
            lambda t, s: (s[0], s[1], s[1]),
            TypeError,
            r"`func` must return a tuple of 2 tensors for a tuple state, got tuple",
        ),
        (
            lambda t, s: [s[0], s[1]],
            TypeError,
            r"`func` must return a tuple of 2 tensors for a tuple state, got list",
        ),
        (
            lambda t, s: (s[0], s[0]),
            ValueError,
            r"`func` returned shape \(3,\) for `y0\[1\]`, but `y0\[1\]` has shape \(2,\)",
        ),
        (
            lambda t, s: (s[0], 1.0),
            TypeError,
            r"`func` must return a Tensor for `y0\[1\]`, got float",
        ),
    ],
    ids=["tensor", "three", "list", "shape", "float"],
)
def test_func_returning_wrong_tuple_structure(func, error, match):
    y0 = (torch.ones(3, dtype=F64), torch.ones(2, dtype=F64))
    with pytest.raises(error, match=match):
        odeint(y0, func=func)


# --- SolverError ----------------------------------------------------------------------------------


def assert_says_where(err: SolverError, status: Status, t1: float) -> None:
    assert err.status is status
    assert isinstance(err, RuntimeError) and isinstance(err, odecore.OdeCoreError)
    assert f"stopped at t = {err.t!r} before reaching t1 = {t1!r}" in str(err)
    assert str(status) in str(err)


@pytest.mark.parametrize("method", ["dopri5", "tsit5", "bosh3", "dopri8", "adaptive_heun"])
def test_max_num_steps_exhausted_adaptive(method):
    t = torch.tensor([0.0, 100.0], dtype=F64)
    with pytest.raises(SolverError, match=r"maximum number of steps reached") as info:
        odeint(t=t, method=method, options={"max_num_steps": 20})
    assert_says_where(info.value, Status.MAX_STEPS_REACHED, 100.0)
    assert 0.0 < info.value.t < 100.0


@pytest.mark.parametrize("method", ["rk4", "euler"])
def test_max_num_steps_exhausted_fixed(method):
    with pytest.raises(SolverError, match=r"maximum number of steps reached") as info:
        odeint(method=method, options={"n_steps": 100, "max_num_steps": 10})
    assert_says_where(info.value, Status.MAX_STEPS_REACHED, 1.0)
    assert info.value.t == pytest.approx(0.1)


@pytest.mark.parametrize("method", ["dopri5", "tsit5", "bosh3", "dopri8", "adaptive_heun"])
def test_step_size_underflow(method):
    # y' = y^2 from y(0) = 1 blows up at t = 1.
    t = torch.tensor([0.0, 2.0], dtype=F64)
    with pytest.raises(SolverError, match=r"the step size underflowed") as info:
        odeint(
            torch.ones(1, dtype=F64), t, func=lambda t, y: y**2, method=method, rtol=1e-4, atol=1e-4
        )
    assert_says_where(info.value, Status.DT_UNDERFLOW, 2.0)
    assert info.value.t == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("method", ["rk4", "euler", "heun"])
def test_blow_up_with_fixed_steps_is_nonfinite(method):
    # Fixed steps cannot underflow: the state overflows and the solve reports it.
    t = torch.tensor([0.0, 2.0], dtype=F64)
    with pytest.raises(SolverError, match=r"became non-finite") as info:
        odeint(
            torch.ones(1, dtype=F64),
            t,
            func=lambda t, y: y**2,
            method=method,
            options={"step_size": 0.01},
        )
    assert_says_where(info.value, Status.NONFINITE, 2.0)
    assert 1.0 <= info.value.t < 2.0


@pytest.mark.parametrize(
    ("t0", "t1", "dt0"),
    [(1e7, 1e7 + 1e-7, 1e-10), (0.0, 1.0, 1e-300), (1.0, 0.0, -1e-300)],
    ids=["far-from-zero", "subnormal", "backward"],
)
def test_a_constant_step_lost_to_the_rounding_of_t_is_refused_by_name(t0, t1, dt0):
    # Such a step does not move t: the loop stopped on it with DT_UNDERFLOW and the
    # advice to check for stiffness or loosen tolerances, which a constant step has not.
    with pytest.raises(odecore.ConfigurationError, match=r"`dt0` is .*too small for the times"):
        odecore.solve(decay, torch.ones(3, dtype=F64), t0=t0, t1=t1, solver=odecore.RK4(),
                      controller=odecore.ConstantStepSize(), dt0=dt0)  # fmt: skip
    # A step that moves t is taken: here one RK4 step over the span.
    sol = odecore.solve(decay, torch.ones(3, dtype=F64), t0=t0, t1=t1, solver=odecore.RK4(),
                        dt0=t1 - t0)  # fmt: skip
    h = -(t1 - t0)
    assert sol.ys[-1].tolist() == pytest.approx(
        [sum(h**k / math.factorial(k) for k in range(5))] * 3
    )


def test_a_step_size_option_lost_to_the_rounding_of_t_is_refused_by_name():
    with pytest.raises(odecore.ConfigurationError, match=r"`step_size` or `n_steps`"):
        odeint(t=torch.tensor([1e7, 1e7 + 1e-7], dtype=F64), method="rk4",
               options={"step_size": 1e-10})  # fmt: skip


def _within_seconds(seconds, call):
    """``call()``, or ``TimeoutError`` after ``seconds`` (what a hang becomes)."""

    def hung(signum, frame):
        raise TimeoutError("odeint hung on a tiny `step_size`")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        call()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(
    ("method", "options"),
    [("rk4", {}), ("rk4", {"perturb": True}), ("implicit_adams", {})],
    ids=["rk4", "perturb", "adams"],
)
def test_a_step_size_option_lost_to_rounding_is_refused_at_once(method, options):
    # odeint listed every step end first (1e300 of them here): it hung.
    def call():
        with pytest.raises(odecore.ConfigurationError, match=r"too small for the times"):
            odeint(method=method, options={"step_size": 1e-300, **options})

    _within_seconds(20, call)


def test_a_step_size_option_past_the_budget_fails_at_once():
    # A billion step ends were listed before `max_num_steps` could stop the solve.
    def call():
        with pytest.raises(SolverError, match=r"maximum number of steps reached"):
            odeint(method="rk4", options={"step_size": 1e-9, "max_num_steps": 10})

    _within_seconds(20, call)


def nan_after(t_bad: float, direction: float = 1.0):
    def field(t, y):
        past = (t - t_bad) * direction > 0
        return torch.where(past, torch.full_like(y, math.nan), -y)

    return field


@pytest.mark.parametrize("method", ["dopri5", "tsit5", "bosh3", "dopri8", "adaptive_heun"])
def test_nonfinite_state_adaptive(method):
    t = torch.tensor([0.0, 2.0], dtype=F64)
    with pytest.raises(SolverError, match=r"became non-finite") as info:
        odeint(t=t, func=nan_after(0.5), method=method)
    assert_says_where(info.value, Status.NONFINITE, 2.0)
    # The solve got as close to the bad region as the step size allows.
    assert info.value.t == pytest.approx(0.5, abs=1e-6)
    assert info.value.t <= 0.5


@pytest.mark.parametrize(("method", "reached"), [("rk4", 0.5), ("euler", 0.6), ("midpoint", 0.5)])
def test_nonfinite_state_fixed(method, reached):
    # The last finite time is reported, as for adaptive solves: for rk4 the start of
    # the step that has a stage past 0.5, for Euler the start of the one after (its
    # only stage is at the step's start).
    t = torch.tensor([0.0, 2.0], dtype=F64)
    with pytest.raises(SolverError, match=r"became non-finite") as info:
        odeint(t=t, func=nan_after(0.5), method=method, options={"step_size": 0.1})
    assert_says_where(info.value, Status.NONFINITE, 2.0)
    assert info.value.t == pytest.approx(reached)


@pytest.mark.parametrize(("method", "options"), [("dopri5", {}), ("rk4", {"step_size": 0.1})])
def test_nonfinite_state_backward_reports_caller_time(method, options):
    t = torch.tensor([0.0, -2.0], dtype=F64)
    with pytest.raises(SolverError, match=r"became non-finite") as info:
        odeint(t=t, func=nan_after(-0.5, direction=-1.0), method=method, options=options)
    assert_says_where(info.value, Status.NONFINITE, -2.0)
    assert -0.7 < info.value.t <= -0.5 + 1e-9


@pytest.mark.parametrize("method", ["dopri5", "rk4"])
def test_nonfinite_derivative_at_start(method):
    field = CountingField(lambda t, y: y * math.inf)
    with pytest.raises(SolverError, match=r"became non-finite") as info:
        odeint(func=field, method=method)
    assert_says_where(info.value, Status.NONFINITE, 1.0)
    assert info.value.t == 0.0
    assert field.nfe == 1  # no step is tried


def test_nonfinite_derivative_at_start_throw_false():
    sol = odecore.solve(
        lambda t, y: y * math.inf,
        torch.ones(2, dtype=F64),
        t0=0.0,
        t1=1.0,
        solver=odecore.Dopri5(),
        saveat=odecore.SaveAt(ts=[0.0, 0.5, 1.0]),
        throw=False,
    )
    assert sol.status is Status.NONFINITE
    assert sol.t_final == 0.0
    assert sol.stats.n_steps == 0
    assert torch.equal(sol.ys[0], torch.ones(2, dtype=F64))
    assert torch.isnan(sol.ys[1:]).all()


class CountingField:
    def __init__(self, f):
        self.f = f
        self.nfe = 0

    def __call__(self, t, y):
        self.nfe += 1
        return self.f(t, y)


# --- throw=False ------------------------------------------------------------------------------

TS = [0.0, 0.25, 0.5, 0.75, 1.0, 2.0]


@pytest.mark.parametrize(
    ("solver", "dt0", "reached"),
    [(odecore.Dopri5(), None, 0.5), (odecore.Tsit5(), None, 0.5), (odecore.RK4(), 0.1, 0.5)],
    ids=["dopri5", "tsit5", "rk4"],
)
def test_throw_false_nonfinite(solver, dt0, reached):
    sol = odecore.solve(
        nan_after(0.5),
        torch.ones(2, dtype=F64),
        t0=0.0,
        t1=2.0,
        solver=solver,
        dt0=dt0,
        saveat=odecore.SaveAt(ts=TS),
        throw=False,
    )
    assert sol.status == Status.NONFINITE
    assert sol.status != 0
    assert sol.t_final == pytest.approx(reached, abs=1e-6)
    assert sol.ys.shape == (len(TS), 2)
    # Reached times hold the solution, the others NaN.
    for i, t in enumerate(TS):
        if t <= sol.t_final:
            expected = torch.full((2,), math.exp(-t), dtype=F64)
            torch.testing.assert_close(sol.ys[i], expected, rtol=1e-5, atol=1e-5)
        else:
            assert torch.isnan(sol.ys[i]).all()


def test_nonfinite_found_past_the_first_record_chunk():
    # 3000 fixed steps: the record of extremes spans three chunks, and the first
    # non-finite state lies in the third.
    sol = odecore.solve(
        nan_after(2.5),
        torch.ones(2, dtype=F64),
        t0=0.0,
        t1=3.0,
        solver=odecore.Euler(),
        dt0=1e-3,
        throw=False,
    )
    assert sol.status == Status.NONFINITE
    assert sol.t_final == pytest.approx(2.5, abs=1.5e-3)


def test_throw_false_underflow():
    sol = odecore.solve(
        lambda t, y: y**2,
        torch.ones(1, dtype=F64),
        t0=0.0,
        t1=2.0,
        solver=odecore.Dopri5(),
        saveat=odecore.SaveAt(ts=[0.0, 0.5, 0.9, 1.5, 2.0]),
        throw=False,
    )
    assert sol.status == Status.DT_UNDERFLOW
    assert sol.t_final == pytest.approx(1.0, abs=1e-3)
    expected = torch.tensor([1.0, 2.0, 10.0], dtype=F64)  # 1 / (1 - t)
    torch.testing.assert_close(sol.ys[:3, 0], expected, rtol=1e-5, atol=0)
    assert torch.isnan(sol.ys[3:]).all()


def test_throw_false_max_steps_tuple_state():
    sol = odecore.solve(
        lambda t, s: (-s[0], s[1]),
        (torch.ones(2, dtype=F64), torch.ones(3, dtype=F64)),
        t0=0.0,
        t1=10.0,
        solver=odecore.Dopri5(),
        saveat=odecore.SaveAt(ts=[0.0, 5.0, 10.0]),
        max_steps=5,
        throw=False,
    )
    assert sol.status == Status.MAX_STEPS_REACHED
    assert sol.stats.n_steps == 5
    assert isinstance(sol.ys, tuple)
    assert sol.ys[0].shape == (3, 2) and sol.ys[1].shape == (3, 3)
    assert torch.equal(sol.ys[0][0], torch.ones(2, dtype=F64))
    assert torch.isnan(sol.ys[0][1:]).all() and torch.isnan(sol.ys[1][1:]).all()


def test_successful_solve_status():
    sol = solve()
    assert sol.status is Status.SUCCESS
    assert sol.status == 0
    assert sol.t_final == 1.0
    assert str(Status.SUCCESS) == "the solve reached its end time"


@pytest.mark.parametrize("status", list(Status), ids=lambda s: s.name)
def test_every_status_reads_as_a_sentence(status):
    assert len(str(status)) > 20


def test_newton_failure_status_names_the_options_to_change():
    # A fixed-step implicit solve whose Newton iteration fails: the status says the
    # step is the suspect, with the option names odeint and solve spell.
    sentence = str(Status.NEWTON_FAILED)
    assert sentence.startswith(
        "Newton's iteration for an implicit method's stages did not converge"
    )
    for option in ("`step_size`", "`n_steps`", "`dt0`", "`max_iters`", "rtol=..., atol=..."):
        assert option in sentence


@pytest.mark.parametrize(
    "method",
    ["implicit_euler", "implicit_midpoint", "trapezoid", "gauss_legendre2", "gauss_legendre4",
     "gauss_legendre6", "radauIIA3", "radauIIA5"],
)  # fmt: skip
def test_newton_failure_with_fixed_steps(method):
    # y' = -y, then from t = 0.44 on a stiff cubic term: the step from 0.4 to 0.5 fails.
    def field(t, y):
        return -y - (1000.0 if float(t) > 0.44 else 0.0) * y**3

    t = torch.tensor([0.0, 1.0], dtype=F64)
    with pytest.raises(
        SolverError, match=r"Newton did not converge at step size h = 0\.1 "
    ) as info:
        odeint(t=t, func=field, method=method, options={"step_size": 0.1, "max_iters": 2})
    assert_says_where(info.value, Status.NEWTON_FAILED, 1.0)
    assert info.value.t == pytest.approx(0.4)


def _stiffens(t, y):  # the field of test_newton_failure_with_fixed_steps
    return -y - (1000.0 if float(t) > 0.44 else 0.0) * y**3


@pytest.mark.parametrize(
    ("kwargs", "status", "says"),
    [
        (
            {"f": _stiffens, "solver": odecore.RadauIIA5(newton=odecore.Newton(max_iters=2)),
             "dt0": 0.1},
            Status.NEWTON_FAILED,
            r"Newton did not converge at step size h = 0\.1 \(t = 0\.4\)",
        ),
        ({"f": nan_after(0.5), "solver": odecore.RK4(), "dt0": 0.1}, Status.NONFINITE, ""),
        ({"f": lambda t, y: y**2, "t1": 2.0}, Status.DT_UNDERFLOW, ""),
        ({"t1": 10.0, "max_steps": 5}, Status.MAX_STEPS_REACHED, ""),
    ],
    ids=["newton", "nonfinite", "underflow", "max_steps"],
)  # fmt: skip
def test_throw_false_keeps_the_message_the_error_would_have(kwargs, status, says):
    # With throw=False the status and t_final remain, and the text of the SolverError
    # that throw=True raises: where, the status's sentence, and the step size and
    # reason of a failed Newton iteration.
    sol = solve(throw=False, **kwargs)
    with pytest.raises(SolverError) as info:
        solve(**kwargs)
    assert sol.status is status is info.value.status
    assert sol.message == str(info.value)
    assert sol.message.startswith(f"solve() stopped at t = {sol.t_final!r} before reaching t1")
    assert str(status) in sol.message
    assert re.search(says, sol.message)


def test_a_solve_that_succeeds_has_no_message():
    sol = solve(throw=False)
    assert sol.status is Status.SUCCESS and sol.message == ""


def test_checkpoint_replay_failure_says_why():
    # The field turns stiff between the forward solve and backward(): the replay's
    # Newton iteration fails, and its error names the step size and the reason, as
    # the adjoint's backward solve does.
    stiff = {"on": False}

    def field(t, y):
        return -y - (1000.0 if stiff["on"] and float(t) > 0.44 else 0.0) * y**3

    y0 = torch.ones(2, dtype=F64, requires_grad=True)
    sol = odecore.solve(
        field, y0, t0=0.0, t1=1.0, dt0=0.1,
        solver=odecore.RadauIIA5(newton=odecore.Newton(max_iters=2)),
        gradient=odecore.Checkpoint(),
    )  # fmt: skip
    stiff["on"] = True
    with pytest.raises(SolverError, match=r"the checkpointed replay did not retrace") as info:
        sol.ys.sum().backward()
    assert info.value.status is Status.NEWTON_FAILED
    # The replay runs backward segment by segment: the last one, from t = 0.8, fails.
    assert info.value.t == pytest.approx(0.8)
    assert f"Newton did not converge at step size h = 0.1 (t = {info.value.t!r})" in str(info.value)

"""The torchdiffeq-compatible facade ``odecore.odeint``."""

from __future__ import annotations

import itertools
import math

import odecore
import oracles
import pytest
import torch

FIXED = sorted(odecore.FIXED_METHODS)
ADAPTIVE = sorted(odecore.ADAPTIVE_METHODS)
ALL = FIXED + ADAPTIVE

# Per method: options, and an error bound that they reach on these mild problems, in
# the sense of ``assert_close(rtol=bound, atol=bound)`` (adaptive methods at
# rtol = atol = 1e-8, the second-order pairs at 1e-6; the bounds are about 10x the errors seen).
ACCURATE = {
    "euler": ({"step_size": 1e-3}, 1e-2),
    "midpoint": ({"step_size": 1e-2}, 1e-3),
    "heun": ({"step_size": 1e-2}, 1e-3),
    "heun2": ({"step_size": 1e-2}, 1e-3),
    "heun3": ({"step_size": 1e-2}, 1e-4),
    "ralston": ({"step_size": 1e-2}, 1e-3),
    "rk4": ({"step_size": 2e-2}, 1e-6),
    "rk4_38": ({"step_size": 2e-2}, 1e-6),
    "adaptive_heun": ({}, 1e-4),
    "fehlberg2": ({}, 1e-2),  # its error runs to 1000x the tolerance (see test_adaptive)
    "bosh3": ({}, 5e-6),
    "dopri5": ({}, 5e-7),
    "tsit5": ({}, 5e-7),
    "dopri8": ({}, 5e-8),
    "kvaerno5": ({}, 5e-7),
}


def assert_accurate(actual, expected, method, factor=1.0):
    bound = factor * ACCURATE[method][1]
    torch.testing.assert_close(actual, expected, rtol=bound, atol=bound)


def run(method, f, y0, t, **options):
    opts, _ = ACCURATE[method]
    tol = 1e-6 if method in ("adaptive_heun", "fehlberg2") else 1e-8
    return odecore.odeint(f, y0, t, rtol=tol, atol=tol, method=method, options={**opts, **options})


class RecordingField:
    """Records the times (as floats) at which it is evaluated."""

    def __init__(self, f):
        self.f = f
        self.times: list[float] = []
        self.time_dtypes: set[torch.dtype] = set()

    def __call__(self, t, y):
        self.times.append(float(t))
        self.time_dtypes.add(t.dtype)
        assert t.dim() == 0
        return self.f(t, y)


# --- shapes and results -----------------------------------------------------------------


@pytest.mark.parametrize("shape", [(), (1,), (3,), (2, 3), (2, 1, 4)], ids=str)
@pytest.mark.parametrize("method", ["euler", "rk4", "bosh3", "dopri5", "dopri8"])
def test_result_shape(method, shape):
    y0 = torch.rand(shape, dtype=torch.float64) + 0.5
    t = torch.linspace(0.0, 1.0, 5, dtype=torch.float64)
    ys = run(method, lambda t, y: -y, y0, t)
    assert ys.shape == (5, *shape)
    assert ys.dtype == y0.dtype
    torch.testing.assert_close(ys[0], y0, rtol=0, atol=0)
    expected = y0 * torch.exp(-t).reshape(-1, *([1] * len(shape)))
    assert_accurate(ys, expected, method)


@pytest.mark.parametrize("method", ALL)
def test_first_output_is_y0_exactly(method):
    y0 = torch.randn(3, dtype=torch.float64)
    ys = run(method, oracles.decay.f, y0, torch.tensor([0.0, 0.5], dtype=torch.float64))
    assert torch.equal(ys[0], y0)


@pytest.mark.parametrize("method", ALL)
def test_func_sees_0_dim_time_in_state_dtype(method):
    field = RecordingField(oracles.decay.f)
    run(method, field, oracles.decay.y0_as(), torch.tensor([0.0, 0.5], dtype=torch.float64))
    assert field.time_dtypes == {torch.float64}
    assert min(field.times) == 0.0
    # Kvaerno5's third stage sits at c = 1.23, past its step's end (documented).
    reach = 0.5 if method != "kvaerno5" else 0.5 + 0.24 * 0.5
    assert max(field.times) <= reach


@pytest.mark.parametrize("method", ALL)
@pytest.mark.parametrize("prob", [oracles.decay, oracles.linear_system], ids=repr)
def test_matches_closed_form(prob, method):
    t = prob.times(6)
    ys = run(method, prob.f, prob.y0_as(), t)
    assert_accurate(ys, prob.exact(t, prob.y0_as()), method)


@pytest.mark.parametrize("method", ["rk4", "dopri5"])
def test_single_time_returns_y0(method):
    y0 = torch.randn(2, 3, dtype=torch.float64)
    field = RecordingField(lambda t, y: -y)
    ys = odecore.odeint(field, y0, torch.tensor([0.7], dtype=torch.float64), method=method)
    assert ys.shape == (1, 2, 3)
    assert torch.equal(ys, y0[None])
    assert field.times == []


def test_single_time_tuple_state():
    q, p = torch.ones(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    out = odecore.odeint(oracles.harmonic_tuple_f, (q, p), torch.tensor([0.0], dtype=torch.float64))
    assert isinstance(out, tuple)
    assert torch.equal(out[0], q[None])
    assert torch.equal(out[1], p[None])


def test_default_method_is_dopri5():
    t = torch.tensor([0.0, 1.0], dtype=torch.float64)
    y0 = oracles.van_der_pol.y0_as()
    default = odecore.odeint(oracles.van_der_pol.f, y0, t)
    explicit = odecore.odeint(oracles.van_der_pol.f, y0, t, rtol=1e-7, atol=1e-9, method="dopri5")
    assert torch.equal(default, explicit)


def test_options_dict_is_not_mutated():
    options = {"jump_t": [0.5], "first_step": 0.1}
    odecore.odeint(lambda t, y: -y, torch.ones(1), torch.tensor([0.0, 1.0]), options=options)
    assert options == {"jump_t": [0.5], "first_step": 0.1}


def test_tensor_tolerances_accepted():
    t = torch.tensor([0.0, 1.0], dtype=torch.float64)
    y0 = torch.ones(1, dtype=torch.float64)
    rtol, atol = torch.tensor(1e-6, dtype=torch.float64), torch.tensor(1e-8, dtype=torch.float64)
    a = odecore.odeint(lambda t, y: -y, y0, t, rtol=rtol, atol=atol)
    b = odecore.odeint(lambda t, y: -y, y0, t, rtol=1e-6, atol=1e-8)
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("method", "options"),
    [("dopri5", None), ("rk4", {"step_size": 0.01}), ("implicit_adams", {"step_size": 0.01})],
)
def test_integer_times_are_refused(method, options):
    # The event time comes back in t's dtype: an Adams solve gave event_t = 0 and y0
    # for a ball that lands at 0.64 (the others raised torch's overflow error).
    def fall(t, y):
        return torch.stack([y[1], torch.full_like(y[1], -9.81)])

    with pytest.raises(TypeError, match=r"`t` must be a floating point tensor, got torch.int64"):
        odecore.odeint(
            fall, torch.tensor([2.0, 0.0]), torch.tensor([0, 1]), method=method,
            options=options, event_fn=lambda t, y: y[0],
        )  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"rtol": 1e-6}, "rtol"),
        ({"options": {"first_step": 0.1}}, r"options\['first_step'\]"),
        ({"options": {"ifactor": 5.0}}, r"options\['ifactor'\]"),
        ({"options": {"max_step": 0.1}}, r"options\['max_step'\]"),
        ({"method": "rk4", "options": {"step_size": 0.1}}, r"options\['step_size'\]"),
        ({"method": "implicit_adams", "options": {"step_size": 0.1}}, "step_size"),
        ({"adjoint_options": {"first_step": 0.1}}, r"adjoint_options\['first_step'\]"),
    ],
)
def test_a_number_given_as_a_tensor_that_requires_grad_is_refused(kwargs, name):
    # torchdiffeq differentiates step_size, first_step and max_step; here they become
    # numbers, and their gradient was None without a word.
    def requiring(value):
        return torch.tensor(value, dtype=torch.float64, requires_grad=True)

    for key in ("options", "adjoint_options"):
        if key in kwargs:
            kwargs = {**kwargs, key: {k: requiring(v) for k, v in kwargs[key].items()}}
    if "rtol" in kwargs:
        kwargs = {**kwargs, "rtol": requiring(kwargs["rtol"])}
    y0 = torch.ones(1, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([0.0, 1.0], dtype=torch.float64)
    odeint = odecore.odeint_adjoint if "adjoint_options" in kwargs else odecore.odeint
    with pytest.raises(ValueError, match=rf"`{name}` is a tensor that requires grad"):
        odeint(lambda t, y: -y, y0, t, **kwargs)


# --- backward in time ------------------------------------------------------------------------


@pytest.mark.parametrize("method", ALL)
@pytest.mark.parametrize("prob", [oracles.decay, oracles.harmonic], ids=repr)
def test_backward_solve_matches_closed_form(prob, method):
    t_fwd = prob.times(6)
    t = t_fwd.flip(0)  # from t1 down to t0
    exact = prob.exact(t, prob.y0_as())
    ys = run(method, prob.f, exact[0], t)
    assert_accurate(ys, exact, method)


@pytest.mark.parametrize("method", ALL)
def test_backward_solve_is_forward_solve_of_reversed_field(method):
    # Integrating f from t0 down to t1 is integrating g(s, y) = -f(-s, y) from -t0 up to
    # -t1: the same arithmetic, so bitwise the same result.
    prob = oracles.cos_growth
    t = torch.tensor([2.0, 1.3, 0.4, -0.5], dtype=torch.float64)
    y0 = prob.y0_as()

    def reversed_field(s, y):
        return -prob.f(-s, y)

    back = run(method, prob.f, y0, t)
    fwd = run(method, reversed_field, y0, -t)
    assert torch.equal(back, fwd)


@pytest.mark.parametrize("method", ALL)
def test_forward_then_back_recovers_y0(method):
    prob = oracles.van_der_pol
    t = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    y0 = prob.y0_as()
    fwd = run(method, prob.f, y0, t)
    back = run(method, prob.f, fwd[-1], t.flip(0))
    assert_accurate(back[-1], y0, method, factor=10)
    assert_accurate(back.flip(0), fwd, method, factor=10)


# --- tuple states ------------------------------------------------------------------------


@pytest.mark.parametrize("method", FIXED)
def test_tuple_state_equals_concatenated_state_fixed(method):
    t = torch.linspace(0.0, 3.0, 7, dtype=torch.float64)
    q, p = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    out = run(method, oracles.harmonic_tuple_f, (q, p), t)
    cat = run(method, oracles.harmonic.f, torch.stack([q, p], dim=-1), t)
    assert isinstance(out, tuple) and len(out) == 2
    assert out[0].shape == out[1].shape == (7, 5)
    assert torch.equal(out[0], cat[..., 0])
    assert torch.equal(out[1], cat[..., 1])


@pytest.mark.parametrize("method", ADAPTIVE)
def test_tuple_state_close_to_concatenated_state_adaptive(method):
    # The default error norm of a tuple state is the max over its tensors of their rms
    # norms, so the steps differ from the concatenated state's; the answers agree
    # within the tolerance.
    t = torch.linspace(0.0, 3.0, 7, dtype=torch.float64)
    q, p = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    out = run(method, oracles.harmonic_tuple_f, (q, p), t)
    exact = oracles.harmonic.exact(t, torch.stack([q, p], dim=-1))
    assert isinstance(out, tuple)
    assert_accurate(out[0], exact[..., 0], method, factor=10)
    assert_accurate(out[1], exact[..., 1], method, factor=10)


def test_tuple_state_with_different_shapes():
    # A state of two tensors of different shapes: y' = -y and z' = 2z.
    y0 = (torch.ones(2, 3, dtype=torch.float64), torch.ones(4, dtype=torch.float64))
    t = torch.tensor([0.0, 0.5], dtype=torch.float64)
    y, z = odecore.odeint(lambda t, s: (-s[0], 2 * s[1]), y0, t, rtol=1e-10, atol=1e-10)
    assert y.shape == (2, 2, 3) and z.shape == (2, 4)
    torch.testing.assert_close(y[-1], torch.full((2, 3), math.exp(-0.5), dtype=torch.float64))
    torch.testing.assert_close(z[-1], torch.full((4,), math.exp(1.0), dtype=torch.float64))


def test_tuple_state_norm_option_sees_a_tuple():
    seen = []

    def norm(err):
        seen.append(type(err))
        return torch.stack([e.abs().max() for e in err]).max()

    y0 = (torch.ones(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64))
    out = odecore.odeint(
        oracles.harmonic_tuple_f,
        y0,
        torch.tensor([0.0, 1.0], dtype=torch.float64),
        options={"norm": norm},
    )
    assert seen and set(seen) == {tuple}
    torch.testing.assert_close(out[0][-1], torch.full((2,), math.cos(2.0), dtype=torch.float64))


# --- options ------------------------------------------------------------------------------


def test_unknown_method_lists_known_methods():
    with pytest.raises(ValueError, match=r"Unknown `method` 'rk45'; known methods: ") as info:
        odecore.odeint(lambda t, y: -y, torch.ones(1), torch.tensor([0.0, 1.0]), method="rk45")
    for name in ALL:
        assert name in str(info.value)


@pytest.mark.parametrize(
    ("method", "option", "known"),
    [
        ("rk4", "first_step", odecore.FIXED_OPTIONS),
        ("euler", "rtol", odecore.FIXED_OPTIONS),
        ("dopri5", "n_steps", odecore.ADAPTIVE_OPTIONS),
        ("tsit5", "step_size", odecore.ADAPTIVE_OPTIONS),
        ("dopri8", "grid_points", odecore.ADAPTIVE_OPTIONS),
    ],
)
def test_unknown_option_lists_known_options(method, option, known):
    with pytest.raises(ValueError, match=rf"Unknown option\(s\) \['{option}'\] for method") as info:
        odecore.odeint(
            lambda t, y: -y,
            torch.ones(1),
            torch.tensor([0.0, 1.0]),
            method=method,
            options={option: 1},
        )
    assert f"known options: {', '.join(known)}" in str(info.value)


def test_option_lists():
    assert odecore.FIXED_OPTIONS == (
        "step_size",
        "n_steps",
        "jump_t",
        "step_t",
        "max_num_steps",
        "grid_constructor",
        "perturb",
        "interp",
        "compile",
        "gradient",
    )
    assert set(odecore.ADAPTIVE_OPTIONS) == {
        "first_step",
        "safety",
        "ifactor",
        "dfactor",
        "pcoeff",
        "icoeff",
        "dcoeff",
        "max_step",
        "norm",
        "jump_t",
        "step_t",
        "max_num_steps",
        "min_step",
        "dtype",
        "compile",
        "gradient",
    }


@pytest.mark.parametrize("first_step", [1e-3, 0.05, 0.3])
@pytest.mark.parametrize("method", ["dopri5", "tsit5", "dopri8"])
def test_first_step_option(method, first_step):
    field = RecordingField(oracles.decay.f)
    odecore.odeint(
        field,
        oracles.decay.y0_as(),
        torch.tensor([0.0, 1.5], dtype=torch.float64),
        rtol=1e-3,
        atol=1e-3,
        method=method,
        options={"first_step": first_step},
    )
    # f(t0), then the first step's second stage at c_2 * first_step (no probe for an
    # automatic first step in between).
    c2 = odecore.ADAPTIVE_METHODS[method].tableau.c[1]
    assert field.times[0] == 0.0
    assert field.times[1] == pytest.approx(c2 * first_step, rel=1e-12)


@pytest.mark.parametrize("max_step", [0.01, 0.1])
@pytest.mark.parametrize("method", ["bosh3", "dopri5", "dopri8"])
def test_max_step_option(method, max_step):
    field = RecordingField(lambda t, y: -y)
    free = RecordingField(lambda t, y: -y)
    t = torch.tensor([0.0, 2.0], dtype=torch.float64)
    y0 = torch.ones(1, dtype=torch.float64)
    odecore.odeint(
        field, y0, t, rtol=1e-3, atol=1e-3, method=method, options={"max_step": max_step}
    )
    odecore.odeint(free, y0, t, rtol=1e-3, atol=1e-3, method=method)
    times = sorted(set(field.times))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) <= max_step * (1 + 1e-9)
    assert max(times) == 2.0
    # The cap is active: without it the steps are larger and fewer.
    assert len(field.times) > len(free.times)


@pytest.mark.parametrize("method", ["dopri5", "bosh3"])
def test_growth_options(method):
    # ifactor limits how fast the step grows from a tiny first step.
    t = torch.tensor([0.0, 1.0], dtype=torch.float64)
    y0 = torch.ones(1, dtype=torch.float64)
    slow = RecordingField(lambda t, y: -y)
    fast = RecordingField(lambda t, y: -y)
    common = {"first_step": 1e-4}
    odecore.odeint(
        slow, y0, t, rtol=1e-3, atol=1e-3, method=method, options={**common, "ifactor": 1.5}
    )
    odecore.odeint(fast, y0, t, rtol=1e-3, atol=1e-3, method=method, options=common)
    # Growing from 1e-4 to 0.1 at 1.5 per step takes 17 steps.
    stages = odecore.ADAPTIVE_METHODS[method].tableau.evaluations_per_step
    assert len(slow.times) >= stages * math.log(1e3) / math.log(1.5)
    assert len(fast.times) < len(slow.times) / 2


def test_norm_option_is_used():
    calls = []

    def max_norm(x):
        calls.append(tuple(x.shape))
        return x.abs().max()

    y0 = torch.randn(3, 2, dtype=torch.float64)
    t = torch.tensor([0.0, 1.0], dtype=torch.float64)
    out = odecore.odeint(oracles.linear_system.f, y0.T.contiguous(), t, options={"norm": max_norm})
    assert calls and set(calls) == {(2, 3)}
    torch.testing.assert_close(
        out, oracles.linear_system.exact(t, y0.T.contiguous()), rtol=0, atol=1e-7
    )


@pytest.mark.parametrize("method", ["dopri5", "tsit5", "rk4"])
def test_step_t_makes_steps_land(method):
    landing = 0.4567
    opts = {"step_size": 0.1} if method == "rk4" else {}
    with_step = RecordingField(oracles.decay.f)
    without = RecordingField(oracles.decay.f)
    t = torch.tensor([0.0, 1.5], dtype=torch.float64)
    y0 = oracles.decay.y0_as()
    ys = odecore.odeint(with_step, y0, t, method=method, options={**opts, "step_t": [landing]})
    odecore.odeint(without, y0, t, method=method, options=opts)
    # Each of these methods has a stage at the step end (c = 1), evaluated exactly there.
    assert landing in with_step.times
    assert landing not in without.times
    torch.testing.assert_close(ys, oracles.decay.exact(t, y0), rtol=0, atol=1e-4)


# --- jump_t -------------------------------------------------------------------------------

JUMPS = torch.tensor([0.3, 0.5, 0.8], dtype=torch.float64)
LEVELS = torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=torch.float64)
EDGES = [-math.inf, 0.3, 0.5, 0.8, math.inf]


def piecewise(t, y):
    """``f(t) = LEVELS[k]`` on ``[JUMPS[k-1], JUMPS[k])``: right-continuous, ignores ``y``."""
    k = torch.bucketize(t, JUMPS.to(t.dtype), right=True)
    return LEVELS.to(y.dtype)[k].expand_as(y)


def piecewise_integral(a: float, b: float) -> float:
    """``int_a^b f(t) dt`` for :func:`piecewise`."""
    sign = 1.0
    if b < a:
        a, b, sign = b, a, -1.0
    total = 0.0
    for k, level in enumerate(LEVELS.tolist()):
        lo, hi = max(a, EDGES[k]), min(b, EDGES[k + 1])
        total += level * max(0.0, hi - lo)
    return sign * total


JUMP_METHODS = [
    ("dopri5", {}),
    ("tsit5", {}),
    ("bosh3", {}),
    ("dopri8", {}),
    ("adaptive_heun", {}),
    ("rk4", {"n_steps": 7}),
    ("rk4_38", {"n_steps": 7}),
    ("euler", {"n_steps": 7}),
    ("midpoint", {"step_size": 0.13}),
    ("heun", {"step_size": 0.13}),
    ("ralston", {"n_steps": 3}),
]
JUMP_IDS = [m for m, _ in JUMP_METHODS]


@pytest.mark.parametrize(("method", "opts"), JUMP_METHODS, ids=JUMP_IDS)
def test_jump_t_integrates_piecewise_constant_exactly(method, opts):
    # The steps (n_steps not aligned to the jumps) end on each jump; the stages next
    # to it see f's one-sided limit. Every RK method integrates a constant exactly.
    t = torch.tensor([0.0, 0.25, 0.5, 0.65, 1.0], dtype=torch.float64)
    y0 = torch.zeros(2, dtype=torch.float64)
    ys = odecore.odeint(piecewise, y0, t, method=method, options={**opts, "jump_t": JUMPS})
    exact = torch.tensor([piecewise_integral(0.0, s) for s in t.tolist()], dtype=torch.float64)
    torch.testing.assert_close(ys, exact[:, None].expand(-1, 2), rtol=0, atol=1e-14)


@pytest.mark.parametrize("method", ["dopri5", "tsit5", "bosh3"])
def test_without_jump_t_the_adaptive_error_is_visibly_larger(method):
    t = torch.tensor([0.0, 1.0], dtype=torch.float64)
    y0 = torch.zeros(1, dtype=torch.float64)
    exact = piecewise_integral(0.0, 1.0)
    with_jumps = odecore.odeint(piecewise, y0, t, method=method, options={"jump_t": JUMPS})
    without = odecore.odeint(piecewise, y0, t, method=method)
    err_with = abs(with_jumps[-1].item() - exact)
    err_without = abs(without[-1].item() - exact)
    assert err_with <= 1e-15
    assert err_without > 1e-8
    assert err_without > 1e6 * max(err_with, 1e-17)


@pytest.mark.parametrize("method", ["rk4", "heun", "euler"])
def test_without_jump_t_fixed_steps_are_first_order_wrong(method):
    t = torch.tensor([0.0, 1.0], dtype=torch.float64)
    y0 = torch.zeros(1, dtype=torch.float64)
    without = odecore.odeint(piecewise, y0, t, method=method, options={"n_steps": 7})
    assert abs(without[-1].item() - piecewise_integral(0.0, 1.0)) > 1e-2


@pytest.mark.parametrize(("method", "opts"), JUMP_METHODS, ids=JUMP_IDS)
def test_jump_t_backward_in_time(method, opts):
    t = torch.tensor([1.0, 0.7, 0.5, 0.1, 0.0], dtype=torch.float64)
    y0 = torch.zeros(1, dtype=torch.float64)
    ys = odecore.odeint(piecewise, y0, t, method=method, options={**opts, "jump_t": JUMPS})
    exact = torch.tensor([piecewise_integral(1.0, s) for s in t.tolist()], dtype=torch.float64)
    torch.testing.assert_close(ys[:, 0], exact, rtol=0, atol=1e-14)


@pytest.mark.parametrize("method", ["dopri5", "rk4"])
def test_jump_t_with_state_dependence(method):
    # y' = c(t) y with c piecewise constant: y(t) = y0 exp(int c), reached to the
    # method's accuracy despite the discontinuities.
    def field(t, y):
        return piecewise(t, y) * y

    opts = {"step_size": 0.01} if method == "rk4" else {}
    t = torch.tensor([0.0, 0.4, 1.0], dtype=torch.float64)
    y0 = torch.ones(1, dtype=torch.float64)
    ys = odecore.odeint(field, y0, t, method=method, options={**opts, "jump_t": JUMPS})
    exact = torch.tensor([math.exp(piecewise_integral(0.0, s)) for s in t.tolist()])
    torch.testing.assert_close(ys[:, 0], exact.double(), rtol=1e-7, atol=0)


def test_jump_t_outside_the_span_is_ignored():
    t = torch.tensor([0.0, 0.25], dtype=torch.float64)
    y0 = torch.zeros(1, dtype=torch.float64)
    ys = odecore.odeint(piecewise, y0, t, method="rk4", options={"jump_t": [-1.0, 0.9, 2.0]})
    assert ys[-1].item() == pytest.approx(0.25, abs=1e-15)


@pytest.mark.parametrize(
    ("method", "opts"),
    [("dopri5", {}), ("tsit5", {}), ("rk4", {"n_steps": 7}), ("heun", {"n_steps": 7})],
    ids=["dopri5", "tsit5", "rk4", "heun"],
)
def test_jump_t_at_end_time(method, opts):
    t = torch.tensor([0.0, 0.8], dtype=torch.float64)  # 0.8 is a jump
    y0 = torch.zeros(1, dtype=torch.float64)
    ys = odecore.odeint(piecewise, y0, t, method=method, options={**opts, "jump_t": JUMPS})
    assert ys[-1].item() == pytest.approx(piecewise_integral(0.0, 0.8), abs=1e-14)


def _left_continuous(t, y):
    """``f = 1`` for ``t <= 0.5`` and ``-2`` after: the jump belongs to the left piece."""
    return torch.where(t <= 0.5, 1.0, -2.0).to(y.dtype).expand_as(y)


@pytest.mark.parametrize(
    ("method", "opts"),
    [("dopri5", {}), ("rk4", {"n_steps": 3}), ("euler", {"n_steps": 3})],
    ids=["dopri5", "rk4", "euler"],
)
def test_jump_t_at_start_time(method, opts):
    t = torch.tensor([0.5, 1.0], dtype=torch.float64)
    y0 = torch.zeros(1, dtype=torch.float64)
    ys = odecore.odeint(_left_continuous, y0, t, method=method, options={**opts, "jump_t": [0.5]})
    assert ys[-1].item() == pytest.approx(-1.0, abs=1e-14)


@pytest.mark.parametrize("method", ["dopri5", "rk4", "euler"])
def test_jump_t_inside_with_left_continuous_field(method):
    # The same field with the jump inside the span: integrated exactly.
    opts = {"n_steps": 3} if method in FIXED else {}
    t = torch.tensor([0.0, 1.0], dtype=torch.float64)
    y0 = torch.zeros(1, dtype=torch.float64)
    ys = odecore.odeint(_left_continuous, y0, t, method=method, options={**opts, "jump_t": [0.5]})
    assert ys[-1].item() == pytest.approx(0.5 - 1.0, abs=1e-14)


@pytest.mark.parametrize(
    ("method", "opts"),
    [("rk4", {}), ("euler", {}), ("dopri5", {"step_t": [0.6]})],
    ids=["rk4", "euler", "dopri5-step_t"],
)
def test_jump_t_an_ulp_away_from_another_stop(method, opts):
    # Jumps at k / 10 computed as 0.1 * k, output times from linspace: at 0.6 and 0.7
    # the two differ by one ulp.
    t = torch.linspace(0.0, 1.0, 11, dtype=torch.float64)
    jumps = [0.1 * k for k in range(1, 10)]
    assert jumps[5] != t[6].item()
    ys = odecore.odeint(
        lambda t, y: -y,
        torch.ones(1, dtype=torch.float64),
        t,
        method=method,
        options={**opts, "jump_t": jumps},
    )
    torch.testing.assert_close(ys[:, 0], torch.exp(-t), rtol=0, atol=5e-2)


@pytest.mark.parametrize("method", ["rk4", "dopri5"])
def test_jump_t_on_output_times(method):
    # Jumps that are exactly output times are fine.
    t = torch.linspace(0.0, 1.0, 11, dtype=torch.float64)
    ys = odecore.odeint(
        lambda t, y: -y,
        torch.ones(1, dtype=torch.float64),
        t,
        method=method,
        options={"jump_t": t[1:-1]},
    )
    torch.testing.assert_close(ys[:, 0], torch.exp(-t), rtol=0, atol=1e-5)

"""Terminal events: ``solve(event=...)``, ``odeint(event_fn=...)`` and ``odeint_event``."""

from __future__ import annotations

import math

import odecore
import pytest
import torch

torchdiffeq = pytest.importorskip("torchdiffeq")

G = 9.81
F64 = torch.float64


def _scalar(x: float, requires_grad: bool = False) -> torch.Tensor:
    return torch.tensor(x, dtype=F64, requires_grad=requires_grad)


class Ball(torch.nn.Module):
    """A falling ball, ``(height, velocity)``: ``x'' = -g``."""

    def __init__(self) -> None:
        super().__init__()
        self.g = torch.nn.Parameter(_scalar(G))

    def forward(self, t, y):
        return (y[1], -self.g * torch.ones_like(y[1]))


def height(t, y):
    return y[0]


GRADIENTS = {
    "autograd": odecore.Autograd,
    "adjoint": odecore.Adjoint,
    "checkpoint": odecore.Checkpoint,
}


def _impact(h, gradient, solver=None, **kwargs):
    return odecore.solve(
        Ball(),
        (h, _scalar(0.0)),
        t0=0.0,
        t1=math.inf,
        solver=solver or odecore.Tsit5(),
        controller=odecore.PIDController(rtol=1e-10, atol=1e-12),
        gradient=GRADIENTS[gradient](),
        event=odecore.Event(height),
        **kwargs,
    )


# --- the bouncing ball against its closed form ---------------------------------------


@pytest.mark.parametrize("gradient", sorted(GRADIENTS))
@pytest.mark.parametrize("h0", [0.5, 2.0, 10.0])
def test_impact_time_and_its_gradient_match_the_closed_form(gradient, h0):
    h = _scalar(h0, requires_grad=True)
    sol = _impact(h, gradient)
    assert sol.event_t is not None
    assert sol.event_t.item() == pytest.approx(math.sqrt(2 * h0 / G), rel=1e-10)
    sol.event_t.backward()
    assert h.grad.item() == pytest.approx(1 / math.sqrt(2 * h0 * G), rel=1e-7)


@pytest.mark.parametrize("gradient", sorted(GRADIENTS))
def test_impact_velocity_gradient_includes_the_moving_event_time(gradient):
    # v(t_e) = -g sqrt(2h/g) = -sqrt(2 g h): dv/dh = -sqrt(g / (2 h)).
    h0 = 2.0
    h = _scalar(h0, requires_grad=True)
    sol = _impact(h, gradient)
    height_e, velocity_e = (y[-1] for y in sol.ys)
    assert velocity_e.item() == pytest.approx(-math.sqrt(2 * G * h0), rel=1e-9)
    assert abs(height_e.item()) < 1e-9
    velocity_e.backward()
    assert h.grad.item() == pytest.approx(-math.sqrt(G / (2 * h0)), rel=1e-7)


@pytest.mark.parametrize("gradient", ["autograd", "adjoint"])
def test_gradient_reaches_the_parameters_of_the_field(gradient):
    # d/dg sqrt(2h/g) = -sqrt(2h) / (2 g^1.5)
    field = Ball()
    sol = odecore.solve(
        field,
        (_scalar(2.0), _scalar(0.0)),
        t0=0.0,
        t1=math.inf,
        solver=odecore.Dopri5(),
        controller=odecore.PIDController(rtol=1e-10, atol=1e-12),
        gradient=GRADIENTS[gradient](),
        event=odecore.Event(height),
    )
    sol.event_t.backward()
    assert field.g.grad.item() == pytest.approx(-math.sqrt(4.0) / (2 * G**1.5), rel=1e-7)


class Wall(torch.nn.Module):
    """An event function with a parameter: the height of the floor."""

    def __init__(self, level: float) -> None:
        super().__init__()
        self.level = torch.nn.Parameter(_scalar(level))

    def forward(self, t, y):
        return y[0] - self.level


@pytest.mark.parametrize("form", ["module", "closure", "odeint_event closure"])
def test_gradient_reaches_the_tensors_of_the_event_function(form):
    # t_e = sqrt(2 (h - l) / g): dt_e/dl = -1 / sqrt(2 (h - l) g)
    if form == "module":
        wall = Wall(0.5)
        level = wall.level
    else:
        level = _scalar(0.5).requires_grad_(True)
        wall = lambda t, y: y[0] - level  # noqa: E731
    y0 = (_scalar(2.0), _scalar(0.0))
    if form.startswith("odeint_event"):
        event_t, _ = odecore.odeint_event(
            Ball(), y0, _scalar(0.0), event_fn=wall, rtol=1e-10, atol=1e-12
        )
    else:
        event_t = odecore.solve(
            Ball(),
            y0,
            t0=0.0,
            t1=math.inf,
            solver=odecore.Tsit5(),
            controller=odecore.PIDController(rtol=1e-10, atol=1e-12),
            event=odecore.Event(wall),
        ).event_t
    event_t.backward()
    assert level.grad is not None
    assert level.grad.item() == pytest.approx(-1 / math.sqrt(2 * 1.5 * G), rel=1e-7)


# --- the event time's gradient against finite differences ----------------------------


def _damped(k, gradient):
    """``y' = -k y + sin(3 t)`` from 1 until ``y`` falls to 0.4: a nonlinear event time."""
    return odecore.solve(
        lambda t, y: -k * y + torch.sin(3 * t),
        _scalar(1.0).reshape(1),
        t0=0.0,
        t1=10.0,
        solver=odecore.Dopri5(),
        controller=odecore.PIDController(rtol=1e-11, atol=1e-12),
        gradient=gradient,
        event=odecore.Event(lambda t, y: y - 0.4),
    )


@pytest.mark.parametrize(
    "gradient",
    [odecore.Autograd(), "adjoint"],
    ids=["autograd", "adjoint"],
)
def test_event_time_gradient_matches_central_differences(gradient):
    k = _scalar(1.3, requires_grad=True)
    if gradient == "adjoint":
        gradient = odecore.Adjoint(params=(k,))
    sol = _damped(k, gradient)
    sol.event_t.backward()
    eps = 1e-5
    with torch.no_grad():
        up = _damped(_scalar(1.3 + eps), odecore.Autograd()).event_t.item()
        down = _damped(_scalar(1.3 - eps), odecore.Autograd()).event_t.item()
    assert k.grad.item() == pytest.approx((up - down) / (2 * eps), rel=1e-5)


@pytest.mark.parametrize("interface", ["odeint", "odeint_adjoint"])
def test_odeint_event_gradient_matches_central_differences(interface):
    k = _scalar(1.3, requires_grad=True)

    def run(rate):
        kwargs = {"adjoint_params": (rate,)} if interface == "odeint_adjoint" else {}
        return odecore.odeint_event(
            lambda t, y: -rate * y + torch.sin(3 * t),
            _scalar(1.0).reshape(1),
            _scalar(0.0),
            event_fn=lambda t, y: y - 0.4,
            odeint_interface=getattr(odecore, interface),
            rtol=1e-11,
            atol=1e-12,
            **kwargs,
        )

    event_t, _ = run(k)
    event_t.backward()
    eps = 1e-5
    with torch.no_grad():
        up = run(_scalar(1.3 + eps))[0].item()
        down = run(_scalar(1.3 - eps))[0].item()
    assert k.grad.item() == pytest.approx((up - down) / (2 * eps), rel=1e-5)


# --- odeint_event against torchdiffeq's --------------------------------------------


INTERFACES = [("odeint", "odeint"), ("odeint_adjoint", "odeint_adjoint")]


@pytest.mark.parametrize(("ours", "theirs"), INTERFACES, ids=[i for i, _ in INTERFACES])
@pytest.mark.parametrize("reverse_time", [False, True])
def test_odeint_event_matches_torchdiffeq(ours, theirs, reverse_time):
    results = []
    for library, interface in ((odecore, ours), (torchdiffeq, theirs)):
        field = Ball()
        h = _scalar(2.0, requires_grad=True)
        v = _scalar(1.0)  # thrown upward (forward) or arriving from below (backward)
        event_t, (x, vel) = library.odeint_event(
            field,
            (h, v),
            _scalar(0.5),
            event_fn=height,
            reverse_time=reverse_time,
            odeint_interface=getattr(library, interface),
            rtol=1e-10,
            atol=1e-12,
        )
        (event_t + vel[-1] ** 2).backward()
        results.append(
            (event_t.item(), x[-1].item(), vel[-1].item(), h.grad.item(), field.g.grad.item())
        )
    ours_result, theirs_result = results
    assert ours_result == pytest.approx(theirs_result, rel=1e-7, abs=1e-9)
    # and the closed form: x(t) = h + v (t - t0) - g (t - t0)^2 / 2
    sign = -1.0 if reverse_time else 1.0
    disc = math.sqrt(1.0 + 2 * G * 2.0)
    expected = 0.5 + ((1.0 + disc) / G if not reverse_time else (1.0 - disc) / G)
    assert ours_result[0] == pytest.approx(expected, rel=1e-10)
    assert sign * (ours_result[0] - 0.5) > 0


@pytest.mark.parametrize("method", ["dopri5", "bosh3", "rk4"])
def test_odeint_event_mode_matches_torchdiffeq(method):
    options = {"step_size": 0.01} if method == "rk4" else None
    y0 = torch.tensor([1.0, 0.5], dtype=F64)
    t = torch.tensor([0.0, 1.0], dtype=F64)

    def field(t, y):
        return torch.stack([y[1], -y[0]])

    def event_fn(t, y):
        return y[0] + 0.5

    ours_t, ours = odecore.odeint(field, y0, t, method=method, options=options, event_fn=event_fn)
    theirs_t, theirs = torchdiffeq.odeint(
        field, y0, t, method=method, options=options, event_fn=event_fn, rtol=1e-9, atol=1e-11
    )
    assert ours.shape == theirs.shape == (2, 2)
    assert ours_t.dtype == t.dtype
    # torchdiffeq's fixed-step methods find the root on a linear interpolant.
    close = 1e-4 if method == "rk4" else 1e-6
    assert ours_t.item() == pytest.approx(theirs_t.item(), abs=close)
    torch.testing.assert_close(ours, theirs, atol=close, rtol=close)
    # y = cos t + 0.5 sin t = R cos(t - phi), R = sqrt(1.25), phi = atan(0.5)
    exact = math.atan(0.5) + math.acos(-0.5 / math.sqrt(1.25))
    assert ours_t.item() == pytest.approx(exact, abs=1e-6)


class _Falling(torch.nn.Module):
    """A ball under a learnable gravity ``g``; the event ``height = floor`` ends it."""

    def __init__(self) -> None:
        super().__init__()
        self.g = torch.nn.Parameter(torch.tensor(G, dtype=F64))

    def forward(self, t, y):
        return torch.stack([y[1], -self.g + 0 * y[1]])


@pytest.mark.parametrize("interface", ["odeint", "odeint_adjoint"])
@pytest.mark.parametrize(("method", "options"), [("dopri5", None), ("rk4", {"step_size": 0.01})])
def test_event_time_of_odeint_event_mode_has_its_gradient(interface, method, options):
    # t_e = (v0 + sqrt(v0^2 + 2 g (h0 - floor))) / g for a ball thrown up at v0 from h0:
    # its gradient with respect to y0, g and the floor, by the implicit function theorem.
    # torchdiffeq's odeint_adjoint gives all of them as 0 (and its odeint no graph).
    h0, v0 = 2.0, 1.5
    y0 = torch.tensor([h0, v0], dtype=F64, requires_grad=True)
    floor = torch.tensor(0.25, dtype=F64, requires_grad=True)
    field = _Falling()
    kwargs = {"adjoint_params": (field.g,)} if interface == "odeint_adjoint" else {}
    event_t, ys = getattr(odecore, interface)(
        field, y0, torch.tensor([0.0, 1.0], dtype=F64), event_fn=lambda t, y: y[0] - floor,
        method=method, options=options, rtol=1e-10, atol=1e-12, **kwargs,
    )  # fmt: skip
    # The solution is the state at the event time as a fixed time (torchdiffeq's):
    # its height's gradient with respect to h0 is 1, not 0 as at a moving event.
    (dh,) = torch.autograd.grad(ys[-1, 0], y0, retain_graph=True)
    assert dh[0].item() == pytest.approx(1.0, rel=1e-9)
    event_t.backward()
    root = math.sqrt(v0**2 + 2 * G * (h0 - 0.25))
    t_e = (v0 + root) / G
    assert event_t.item() == pytest.approx(t_e, rel=1e-9)
    assert y0.grad[0].item() == pytest.approx(1 / root, rel=1e-7)
    assert y0.grad[1].item() == pytest.approx((1 + v0 / root) / G, rel=1e-7)
    assert floor.grad.item() == pytest.approx(-1 / root, rel=1e-7)
    dg = -t_e / G + (h0 - 0.25) / (G * root)
    assert field.g.grad.item() == pytest.approx(dg, rel=1e-7)


# --- the structured API --------------------------------------------------------------


def test_output_times_after_the_event_are_left_out():
    sol = _impact(_scalar(2.0), "autograd", saveat=odecore.SaveAt(ts=[0.0, 0.3, 0.5, 0.9, 2.0]))
    # with t1=inf the output times must lie within [t0, inf)
    assert sol.ts.tolist() == [0.0, 0.3, 0.5]
    assert sol.ys[0].shape == (3,)
    assert sol.t_final == pytest.approx(math.sqrt(4 / G), rel=1e-10)


def test_saveat_t1_saves_the_state_at_the_event():
    sol = _impact(_scalar(2.0), "autograd", saveat=odecore.SaveAt(ts=[0.0, 0.3], t1=True))
    assert sol.ts.tolist()[:2] == [0.0, 0.3]
    assert sol.ts[-1].item() == pytest.approx(math.sqrt(4 / G), rel=1e-10)
    assert sol.ys[0][-1].item() == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("gradient", sorted(GRADIENTS))
def test_event_after_t1_leaves_the_solve_unchanged(gradient):
    h = _scalar(2.0, requires_grad=True)
    sol = odecore.solve(
        Ball(),
        (h, _scalar(0.0)),
        t0=0.0,
        t1=0.5,
        solver=odecore.Tsit5(),
        gradient=GRADIENTS[gradient](),
        saveat=odecore.SaveAt(ts=[0.0, 0.25], t1=True),
        event=odecore.Event(height),
    )
    assert sol.event_t is None
    assert sol.status == odecore.Status.SUCCESS
    assert sol.ts.tolist() == [0.0, 0.25, 0.5]
    assert sol.ys[0][-1].item() == pytest.approx(2.0 - G * 0.125, rel=1e-8)
    sol.ys[0][-1].backward()
    assert h.grad.item() == pytest.approx(1.0)


def test_event_at_the_start_time_ends_the_solve_there():
    sol = odecore.solve(
        lambda t, y: -y,
        torch.tensor([1.0, 0.0], dtype=F64),
        t0=0.0,
        t1=1.0,
        solver=odecore.Dopri5(),
        event=odecore.Event(lambda t, y: y),
    )
    assert sol.event_t.item() == 0.0
    assert sol.stats.n_steps == 0
    assert sol.ts.tolist() == [0.0]


@pytest.mark.parametrize("gradient", ["autograd", "adjoint"])
def test_backward_in_time(gradient):
    # y' = y, y(0) = 1, integrated backward until y = 0.5: t_e = log(0.5).
    y0 = torch.ones(1, dtype=F64, requires_grad=True)
    sol = odecore.solve(
        lambda t, y: y,
        y0,
        t0=0.0,
        t1=-math.inf,
        solver=odecore.Tsit5(),
        controller=odecore.PIDController(rtol=1e-10, atol=1e-12),
        gradient=GRADIENTS[gradient](),
        event=odecore.Event(lambda t, y: y - 0.5),
    )
    assert sol.event_t.item() == pytest.approx(math.log(0.5), rel=1e-9)
    sol.event_t.backward()  # t_e = log(0.5 / y0): dt_e/dy0 = -1 / y0
    assert y0.grad.item() == pytest.approx(-1.0, rel=1e-7)


def test_multi_element_event_stops_at_the_first_crossing():
    # Two decays towards 0.3 at different rates: the faster one decides.
    rates = torch.tensor([1.0, 2.0], dtype=F64)
    sol = odecore.solve(
        lambda t, y: -rates * y,
        torch.ones(2, dtype=F64),
        t0=0.0,
        t1=5.0,
        solver=odecore.Dopri5(),
        controller=odecore.PIDController(rtol=1e-10, atol=1e-12),
        event=odecore.Event(lambda t, y: y - 0.3),
    )
    assert sol.event_t.item() == pytest.approx(math.log(1 / 0.3) / 2.0, rel=1e-9)


@pytest.mark.parametrize("solver", [odecore.RK4(), odecore.Euler()], ids=["rk4", "euler"])
def test_fixed_step_event_time_is_found_inside_the_step(solver):
    # Dense output of the fixed-step scheme: exact for the ball's quadratic with RK4.
    sol = odecore.solve(
        Ball(),
        (_scalar(2.0), _scalar(0.0)),
        t0=0.0,
        t1=math.inf,
        solver=solver,
        dt0=0.1,
        event=odecore.Event(height),
    )
    tolerance = 1e-12 if isinstance(solver, odecore.RK4) else 0.1
    assert sol.event_t.item() == pytest.approx(math.sqrt(4 / G), abs=tolerance)
    assert sol.stats.n_accepted == math.ceil(math.sqrt(4 / G) / 0.1)


@pytest.mark.parametrize("gradient", sorted(GRADIENTS))
@pytest.mark.parametrize("solver", [odecore.SDIRK2(), odecore.TRBDF2()], ids=["sdirk2", "trbdf2"])
def test_implicit_fixed_step_event_time_and_gradient(solver, gradient):
    # The ball's state is a polynomial of degree 2 in t, which these second-order
    # methods and their cubic dense output reproduce exactly: the closed form holds
    # to Newton's tolerance, and so does the event time's gradient through the state.
    h = _scalar(2.0, requires_grad=True)
    sol = odecore.solve(
        Ball(), (h, _scalar(0.0)), t0=0.0, t1=math.inf, solver=solver, dt0=0.1,
        gradient=GRADIENTS[gradient](), event=odecore.Event(height),
    )  # fmt: skip
    assert sol.event_t.item() == pytest.approx(math.sqrt(4 / G), rel=1e-10)
    sol.event_t.backward()
    assert h.grad.item() == pytest.approx(1 / math.sqrt(4 * G), rel=1e-7)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_stats_count_every_solve(requires_grad):
    sol = _impact(_scalar(2.0, requires_grad=requires_grad), "adjoint")
    assert sol.stats.n_accepted > 0
    assert sol.stats.nfe >= 6 * sol.stats.n_accepted


# --- an event that does not happen, and errors ---------------------------------------


def test_event_that_never_happens_fails_with_a_clear_error():
    with pytest.raises(odecore.SolverError, match=r"event did not happen within `max_steps` = 50"):
        odecore.solve(
            lambda t, y: -y,
            torch.ones(1, dtype=F64),
            t0=0.0,
            t1=math.inf,
            solver=odecore.Dopri5(),
            max_steps=50,
            event=odecore.Event(lambda t, y: y + 1.0),
        )


def test_event_that_never_happens_is_a_status_without_throw():
    sol = odecore.solve(
        lambda t, y: -y,
        torch.ones(1, dtype=F64),
        t0=0.0,
        t1=math.inf,
        solver=odecore.Dopri5(),
        max_steps=50,
        throw=False,
        event=odecore.Event(lambda t, y: y + 1.0),
    )
    assert sol.status == odecore.Status.MAX_STEPS_REACHED
    assert sol.event_t is None
    assert torch.isnan(sol.ys[-1]).all()


def test_odeint_event_that_never_happens_names_max_num_steps():
    with pytest.raises(odecore.SolverError, match=r"event did not happen"):
        odecore.odeint_event(
            lambda t, y: -y,
            torch.ones(1, dtype=F64),
            _scalar(0.0),
            event_fn=lambda t, y: y + 1.0,
            options={"max_num_steps": 30},
        )


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"t": torch.tensor([0.0, 1.0, 2.0])},
            ValueError,
            r"`t` must hold 2 times with `event_fn`",
        ),
        ({"method": "rk4"}, ValueError, r"needs a step size: pass options=\{'step_size'"),
        ({"method": "scipy:RK45"}, ValueError, r"`event_fn` needs one of odecore's methods"),
        ({"method": "torchdiffeq:dopri5"}, ValueError, r"`event_fn` needs one of odecore's"),
        ({"event_fn": 3}, TypeError, r"`event_fn` must be a callable"),
        ({"event_fn": lambda t, y: 1.0}, TypeError, r"must return a non-empty floating tensor"),
    ],
    ids=["three-times", "fixed-step", "scipy", "torchdiffeq", "not-callable", "not-a-tensor"],
)
def test_odeint_event_mode_errors(kwargs, error, match):
    call = {"t": torch.tensor([0.0, 1.0]), "event_fn": lambda t, y: y - 0.5, **kwargs}
    with pytest.raises(error, match=match):
        odecore.odeint(lambda t, y: -y, torch.ones(1), call.pop("t"), **call)


def test_event_needs_a_callable():
    with pytest.raises(TypeError, match=r"`Event\(fn=...\)` must be a callable"):
        odecore.Event(3)  # type: ignore[arg-type]


def test_infinite_t1_needs_an_event():
    with pytest.raises(ValueError, match=r"`t0` and `t1` must be finite, got 0.0 and inf\."):
        odecore.solve(lambda t, y: -y, torch.ones(1), t0=0.0, t1=math.inf, solver=odecore.Dopri5())


def test_event_must_be_an_event():
    with pytest.raises(TypeError, match=r"`event` must be an odecore.Event\(fn\)"):
        odecore.solve(
            lambda t, y: -y,
            torch.ones(1),
            t0=0.0,
            t1=1.0,
            solver=odecore.Dopri5(),
            event=lambda t, y: y,  # type: ignore[arg-type]
        )


# --- degenerate events ----------------------------------------------------------------

AT_START = {
    "t - t0": lambda t, y: t - 0.25,
    "y - y0": lambda t, y: y[..., 0] - 1.5,
}


def _start_state(loss_of_y0, at_y0: float = 1.5) -> tuple[float, float]:
    """The value and central difference of ``loss_of_y0`` at ``y0 = at_y0``."""
    h = 1e-6
    diff = (loss_of_y0(at_y0 + h) - loss_of_y0(at_y0 - h)) / (2 * h)
    return loss_of_y0(at_y0), diff


@pytest.mark.parametrize("event", sorted(AT_START))
@pytest.mark.parametrize("interface", ["odeint", "odeint_adjoint"])
def test_odeint_event_at_the_start_time_has_the_identity_gradient(event, interface):
    # The event happens at t0 (an element is zero there), so it ends at (t0, y0): the
    # state's gradient is the identity and the event time's zero. It was NaN: the
    # implicit function theorem divided 0 by 0.
    y0 = torch.tensor([1.5], dtype=F64, requires_grad=True)
    t0 = _scalar(0.25)
    interface_fn = getattr(odecore, interface)
    t_e, ys = odecore.odeint_event(
        lambda t, y: -y, y0, t0, event_fn=AT_START[event], odeint_interface=interface_fn
    )
    assert t_e.item() == 0.25
    (t_e + 3 * ys[-1].sum()).backward()
    assert y0.grad.item() == 3.0
    if event == "t - t0":  # the event time is t0 for every y0: finite differences agree

        def loss(v: float) -> float:
            start = torch.tensor([v], dtype=F64)
            te, yv = odecore.odeint_event(
                lambda t, y: -y, start, t0, event_fn=AT_START[event],
                odeint_interface=interface_fn,
            )  # fmt: skip
            return float(te + 3 * yv[-1].sum())

        assert y0.grad.item() == pytest.approx(_start_state(loss)[1], rel=1e-8)


@pytest.mark.parametrize("event", sorted(AT_START))
@pytest.mark.parametrize("gradient", sorted(GRADIENTS))
def test_solve_event_at_the_start_time_has_the_identity_gradient(event, gradient):
    # NaN under backpropagation and the adjoint; an IndexError under checkpointing
    # (the second solve, from t0 to the event at t0, has no step to replay).
    y0 = torch.tensor([1.5, 2.0], dtype=F64, requires_grad=True)
    sol = odecore.solve(
        lambda t, y: -y, y0, t0=0.25, t1=math.inf, solver=odecore.Dopri5(),
        gradient=GRADIENTS[gradient](), event=odecore.Event(AT_START[event]),
        saveat=odecore.SaveAt(t1=True),
    )  # fmt: skip
    assert sol.event_t.item() == 0.25
    torch.testing.assert_close(sol.ys[-1], y0.detach())
    (sol.event_t + (sol.ys[-1] * torch.tensor([3.0, -1.0], dtype=F64)).sum()).backward()
    torch.testing.assert_close(y0.grad, torch.tensor([3.0, -1.0], dtype=F64))


@pytest.mark.parametrize("solver", [odecore.Dopri5(), odecore.Tsit5()], ids=["dopri5", "tsit5"])
def test_event_that_never_happens_on_a_zero_field_is_a_status_without_throw(solver):
    # A zero field lets the adaptive steps grow without bound: the windows of the
    # search for t1 = inf doubled until 2**k overflowed a float (OverflowError).
    sol = odecore.solve(
        lambda t, y: torch.zeros_like(y), torch.ones(1, dtype=F64), t0=0.0, t1=math.inf,
        solver=solver, event=odecore.Event(lambda t, y: y - 0.5), throw=False,
    )  # fmt: skip
    assert sol.status == odecore.Status.MAX_STEPS_REACHED
    assert sol.event_t is None
    assert sol.t_final > 1e300


def test_event_that_never_happens_on_a_zero_field_raises_solver_error():
    with pytest.raises(odecore.SolverError, match=r"event did not happen"):
        odecore.solve(
            lambda t, y: torch.zeros_like(y), torch.ones(1, dtype=F64), t0=0.0,
            t1=-math.inf, solver=odecore.Dopri5(), event=odecore.Event(lambda t, y: y - 0.5),
        )  # fmt: skip


def test_odeint_event_that_never_happens_on_a_zero_field_raises_solver_error():
    with pytest.raises(odecore.SolverError, match=r"event did not happen"):
        odecore.odeint_event(
            lambda t, y: torch.zeros_like(y), torch.ones(1, dtype=F64), _scalar(0.0),
            event_fn=lambda t, y: y - 0.5,
        )  # fmt: skip


@pytest.mark.parametrize("reverse_time", [False, True])
@pytest.mark.parametrize("interface", ["odeint", "odeint_adjoint"])
def test_odeint_event_at_the_start_time_moves_with_the_start_time(interface, reverse_time):
    # `y - y0` is zero at t0 wherever t0 is: the event is at t0, d t_e / d t0 = 1 (the
    # event time came back from a number, connected to nothing: its gradient was None).
    # The state there is y0 for every t0, d y_e / d t0 = 0: the loss's is 1 as well.
    def run(start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return odecore.odeint_event(
            lambda t, y: -y * torch.cos(t), torch.tensor([1.5], dtype=F64), start,
            event_fn=AT_START["y - y0"], reverse_time=reverse_time,
            odeint_interface=getattr(odecore, interface),
        )  # fmt: skip

    t0 = _scalar(0.25, requires_grad=True)
    t_e, ys = run(t0)
    assert t_e.item() == 0.25
    (t_e + 3 * ys[-1].sum()).backward()
    h = 1e-6
    with torch.no_grad():
        fd = (run(_scalar(0.25 + h))[0] - run(_scalar(0.25 - h))[0]).item() / (2 * h)
    assert fd == pytest.approx(1.0, rel=1e-8)
    assert t0.grad is not None
    assert t0.grad.item() == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("interface", ["odeint", "odeint_adjoint"])
def test_odeint_event_mode_time_moves_with_the_start_time(interface):
    # The direct keyword's event time carries its gradient (torchdiffeq's none, or a
    # zero one): at t0 it moves with t0 alone; y' = -y from 1.5 reaches 1 at
    # t0 + ln(1.5), which moves with t0 too. The state at an event at t0 is y0.
    for event_fn in (AT_START["y - y0"], lambda t, y: y[..., 0] - 1.0):
        t = torch.tensor([0.25, 1.25], dtype=F64, requires_grad=True)
        t_e, ys = getattr(odecore, interface)(
            lambda t, y: -y, torch.tensor([1.5], dtype=F64), t, event_fn=event_fn
        )
        t_e.backward()
        assert t.grad.tolist() == pytest.approx([1.0, 0.0], abs=1e-6)  # dopri5 at 1e-7
    y0 = torch.tensor([1.5], dtype=F64, requires_grad=True)
    t = torch.tensor([0.25, 1.25], dtype=F64)
    t_e, ys = getattr(odecore, interface)(lambda t, y: -y, y0, t, event_fn=AT_START["y - y0"])
    assert t_e.item() == 0.25
    (ys[-1] * 3).sum().backward()
    assert y0.grad.item() == 3.0


@pytest.mark.parametrize("t0", [0.1, 10000.3])
def test_odeint_event_takes_a_number_t0_in_the_states_dtype(t0):
    """A number ``t0`` is a time of the state's dtype: built in float32 (the default
    dtype), 10000.3 started the solve at 10000.2998 and the event time came back in
    float32, 6e-4 early."""
    y0 = torch.zeros(1, dtype=torch.float64)
    event_t, _ = odecore.odeint_event(
        lambda t, y: torch.ones_like(y), y0, t0, event_fn=lambda t, y: y[0] - 0.123456789
    )
    assert event_t.dtype == torch.float64
    assert event_t.item() == pytest.approx(t0 + 0.123456789, rel=1e-15, abs=1e-12)


@pytest.mark.parametrize(
    "fn",
    [lambda t, y: y[0] * math.nan, lambda t, y: (y[0] - 1.0) / (y[0] - 1.0)],
    ids=["nan", "zero-over-zero"],
)
def test_an_event_function_that_is_nan_at_t0_is_refused(fn):
    # NaN has no sign: the event never happened, or (sign 0) at the first step end.
    with pytest.raises(ValueError, match=r"the event function is NaN at t0 = 0.0"):
        odecore.solve(
            lambda t, y: -y,
            torch.ones(1, dtype=F64),
            t0=0.0,
            t1=2.0,
            solver=odecore.Tsit5(),
            event=odecore.Event(fn),
        )


@pytest.mark.parametrize("gradient", [odecore.Adjoint(), odecore.Checkpoint()], ids=repr)
def test_a_failed_event_solve_keeps_the_outputs_it_reached(gradient):
    # Only the times not reached hold NaN, as without an event; the reached ones were
    # NaN too, with no graph, under a gradient method that locates the event first.
    y0 = torch.ones(1, dtype=F64, requires_grad=True)
    sol = odecore.solve(
        lambda t, y: -y,
        y0,
        t0=0.0,
        t1=100.0,
        solver=odecore.Tsit5(),
        max_steps=20,
        throw=False,
        saveat=odecore.SaveAt(ts=[0.5, 1.0, 99.0]),
        gradient=gradient,
        event=odecore.Event(lambda t, y: y + 1.0),
    )
    assert sol.status == odecore.Status.MAX_STEPS_REACHED
    expected = torch.exp(-torch.tensor([0.5, 1.0], dtype=F64))
    torch.testing.assert_close(sol.ys[:2, 0], expected, rtol=1e-5, atol=0)
    assert torch.isnan(sol.ys[2]).all()
    # Their gradient is refused, as without an event (it was silently missing).
    with pytest.raises(odecore.ConfigurationError, match=r"have no gradient"):
        torch.autograd.grad(sol.ys[:2].sum(), y0)


FAILURES = {
    # (field, y0, output times, solve options): y' = -y runs out of steps before the
    # event; y' = y^2 from 1 blows up at t = 1, a non-finite state.
    "max_steps": (lambda t, y: -y, 1.0, [0.5, 1.0, 99.0], {"max_steps": 20}),
    "nonfinite": (lambda t, y: y * y, 1.0, [0.25, 0.5, 2.0], {}),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
@pytest.mark.parametrize(
    "gradient",
    [odecore.Autograd(), odecore.Adjoint(), odecore.Checkpoint(), odecore.Reversible()],
    ids=lambda g: type(g).__name__,
)
@pytest.mark.parametrize("t1", [math.inf, 100.0])
def test_a_failed_event_solve_returns_what_backprop_returns(failure, gradient, t1):
    # To an infinite t1, the methods that locate the event first returned NaN for
    # the outputs reached (0.61 and 0.37 at t = 0.5 and 1), with no graph.
    field, start, ts, options = FAILURES[failure]
    outputs = {}
    for method in (odecore.Autograd(), gradient):
        y0 = torch.full((1,), start, dtype=F64, requires_grad=True)
        sol = odecore.solve(
            field, y0, t0=0.0, t1=t1, solver=odecore.Tsit5(), throw=False,
            saveat=odecore.SaveAt(ts=ts), gradient=method,
            event=odecore.Event(lambda t, y: y + 1.0), **options,
        )  # fmt: skip
        assert sol.status != odecore.Status.SUCCESS
        outputs[type(method).__name__] = sol.ys, y0
    (want, _), (got, y0) = outputs["Autograd"], outputs[type(gradient).__name__]
    assert torch.isfinite(want[:2]).all() and torch.isnan(want[2]).all()
    # Reversible's solve to a finite t1 is its own scheme's: rounding apart, the same.
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0, equal_nan=True)
    if isinstance(gradient, odecore.Autograd):
        assert torch.autograd.grad(got[:2].sum(), y0)[0].isfinite().all()
    else:  # the method's own refusal of a failed solve's gradient
        with pytest.raises(odecore.ConfigurationError, match=r"have no gradient"):
            torch.autograd.grad(got[:2].sum(), y0)

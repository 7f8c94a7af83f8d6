"""The continuous adjoint: gradients against backprop, finite differences and closed forms."""

from __future__ import annotations

import math

import odecore
import pytest
import torch
from graphs import graph_size

F64 = torch.float64


class MLPField(torch.nn.Module):
    """A small smooth time-dependent field with parameters."""

    def __init__(self, dim: int = 3, hidden: int = 8) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(dim, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, dim)
        ).to(F64)

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(y) * torch.cos(t)


def gradients(loss_fn, tensors):
    for x in tensors:
        x.grad = None
    loss_fn().backward()
    return [x.grad.clone() if x.grad is not None else None for x in tensors]


@pytest.mark.parametrize("method", ["dopri5", "tsit5", "dopri8"])
def test_adjoint_matches_backprop(method):
    field = MLPField()
    y0 = torch.randn(4, 3, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 0.4, 1.1, 2.0], dtype=F64)
    tensors = [y0, *field.parameters()]
    kw = {"rtol": 1e-11, "atol": 1e-11, "method": method}
    back = gradients(lambda: (odecore.odeint(field, y0, t, **kw) ** 2).sum(), tensors)
    adj = gradients(lambda: (odecore.odeint_adjoint(field, y0, t, **kw) ** 2).sum(), tensors)
    for g_back, g_adj in zip(back, adj):
        torch.testing.assert_close(g_adj, g_back, rtol=1e-7, atol=1e-8)


def test_adjoint_closed_form():
    # y' = a y: dy(T)/da = T y0 exp(aT), dy(T)/dy0 = exp(aT), dy(T)/dT = a y(T).
    a = torch.nn.Parameter(torch.tensor(-0.7, dtype=F64))
    y0 = torch.tensor([1.5], dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 2.0], dtype=F64, requires_grad=True)
    ys = odecore.odeint_adjoint(
        lambda t, y: a * y, y0, t, rtol=1e-12, atol=1e-12, adjoint_params=(a,)
    )
    ys[-1].sum().backward()
    e = math.exp(-0.7 * 2.0)
    assert a.grad.item() == pytest.approx(2.0 * 1.5 * e, rel=1e-9)
    assert y0.grad.item() == pytest.approx(e, rel=1e-9)
    assert t.grad[1].item() == pytest.approx(-0.7 * 1.5 * e, rel=1e-9)
    assert t.grad[0].item() == pytest.approx(0.7 * 1.5 * e, rel=1e-9)  # -a y0 Phi


def test_time_gradients_match_finite_differences():
    field = MLPField()
    y0 = torch.randn(2, 3, dtype=F64)
    t = torch.tensor([0.1, 0.5, 1.3, 2.0], dtype=F64, requires_grad=True)
    tol = {"rtol": 1e-12, "atol": 1e-12}
    ys = odecore.odeint_adjoint(field, y0, t, **tol)
    (ys**2).sum().backward()

    def loss(times):
        return (odecore.odeint(field, y0, times, **tol) ** 2).sum().item()

    eps = 1e-6
    for i in range(len(t)):
        up, down = t.detach().clone(), t.detach().clone()
        up[i] += eps
        down[i] -= eps
        fd = (loss(up) - loss(down)) / (2 * eps)
        assert t.grad[i].item() == pytest.approx(fd, rel=1e-6, abs=1e-7)


def test_tuple_state():
    # The harmonic oscillator as (q, p) with a learnable frequency.
    w = torch.nn.Parameter(torch.tensor(1.3, dtype=F64))
    q0 = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)
    p0 = torch.tensor([0.0, 0.2], dtype=F64, requires_grad=True)
    t = torch.linspace(0.0, 3.0, 4, dtype=F64)

    def field(t, state):
        q, p = state
        return p, -(w**2) * q

    tensors = [q0, p0, w]
    kw = {"rtol": 1e-11, "atol": 1e-11}

    def back_loss():
        q, p = odecore.odeint(field, (q0, p0), t, **kw)
        return (q**2).sum() + p.sum()

    def adj_loss():
        q, p = odecore.odeint_adjoint(field, (q0, p0), t, adjoint_params=(w,), **kw)
        assert isinstance(q, torch.Tensor) and q.shape == (4, 2)
        return (q**2).sum() + p.sum()

    for g_back, g_adj in zip(gradients(back_loss, tensors), gradients(adj_loss, tensors)):
        torch.testing.assert_close(g_adj, g_back, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("seminorm", [False, True])
def test_tuple_state_through_solve(seminorm):
    # solve() gives a tuple state a norm of its own (the largest per-tensor RMS); the
    # backward solve of the state, its adjoint and the parameter gradients must
    # measure its parts with it, not apply it to the longer augmented vector.
    w = torch.nn.Parameter(torch.tensor(1.3, dtype=F64))
    q0 = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)
    p0 = torch.tensor([0.0, 0.2, 0.1], dtype=F64, requires_grad=True)

    def field(t, state):
        q, p = state
        return p[:2], -(w**2) * torch.cat([q, q[:1]])

    def loss(gradient):
        sol = odecore.solve(
            field,
            (q0, p0),
            t0=0.0,
            t1=2.0,
            solver=odecore.Dopri5(),
            controller=odecore.PIDController(rtol=1e-10, atol=1e-10),
            gradient=gradient,
        )
        q, p = sol.ys
        return lambda: (q[-1] ** 2).sum() + p[-1].sum()

    tensors = [q0, p0, w]
    backprop = gradients(loss(odecore.Autograd()), tensors)
    adjoint = gradients(loss(odecore.Adjoint(params=(w,), seminorm=seminorm)), tensors)
    for g_adj, g_back in zip(adjoint, backprop):
        torch.testing.assert_close(g_adj, g_back, rtol=1e-7, atol=1e-8)


def test_backward_in_time():
    field = MLPField()
    y0 = torch.randn(3, dtype=F64, requires_grad=True)
    t = torch.tensor([1.0, 0.2, -0.5], dtype=F64)
    tensors = [y0, *field.parameters()]
    kw = {"rtol": 1e-11, "atol": 1e-11}
    back = gradients(lambda: odecore.odeint(field, y0, t, **kw).sum(), tensors)
    adj = gradients(lambda: odecore.odeint_adjoint(field, y0, t, **kw).sum(), tensors)
    for g_back, g_adj in zip(back, adj):
        torch.testing.assert_close(g_adj, g_back, rtol=1e-7, atol=1e-8)


def test_gradcheck_fixed_step():
    # rk4 with 64 steps: the adjoint's continuous gradient equals the discrete one to
    # O(h^4), well inside gradcheck's tolerances.
    scale = torch.tensor([[0.3, -1.0], [1.0, -0.2]], dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64)

    def fn(y0, w):
        return odecore.odeint_adjoint(
            lambda t, y: torch.tanh(y @ w.T) * (1 + t),
            y0,
            t,
            method="rk4",
            options={"n_steps": 64},
            adjoint_params=(w,),
        )

    y0 = torch.randn(3, 2, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(fn, (y0, scale), atol=1e-6, rtol=1e-4)


def test_seminorm_saves_backward_evaluations():
    field = MLPField(hidden=32)
    y0 = torch.randn(8, 3, dtype=F64, requires_grad=True)
    results = {}
    for norm in ("default", "seminorm"):
        sol = odecore.solve(
            field,
            y0,
            t0=0.0,
            t1=3.0,
            solver=odecore.Dopri5(),
            controller=odecore.PIDController(rtol=1e-8, atol=1e-8),
            gradient=odecore.Adjoint(seminorm=norm == "seminorm"),
        )
        grads = gradients(lambda sol=sol: sol.ys.sum(), [y0, *field.parameters()])
        results[norm] = (sol.stats.nfe_backward, grads)
    assert 0 < results["seminorm"][0] < results["default"][0]
    for a, b in zip(results["default"][1], results["seminorm"][1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def piecewise_constant_problem(n_pieces: int):
    """y' = W(t) y with W constant on each of n_pieces intervals of [0, 1]."""
    weights = torch.nn.Parameter(0.5 * torch.randn(n_pieces, 2, 2, dtype=F64))
    jumps = torch.arange(1, n_pieces, dtype=F64) / n_pieces

    def field(t, y):
        k = torch.bucketize(t, jumps, right=True)
        return y @ weights[k].T

    return field, weights, jumps


def exact_piecewise_gradients(field, weights, jumps, y0, t, wrt):
    """Gradients of sum(y(t1)) by a tight adjoint that restarts at every jump."""
    return gradients(
        lambda: odecore.odeint_adjoint(
            field,
            y0,
            t,
            rtol=1e-12,
            atol=1e-12,
            options={"jump_t": jumps},
            adjoint_params=(weights,),
        )[-1].sum(),
        wrt,
    )


@pytest.mark.parametrize("method", ["euler", "rk4"])
def test_piecewise_constant_weights_at_n_steps_equal_pieces(method):
    # The continuous-in-depth paper's failure case: N_t = M steps over M constant
    # pieces. With the backward solve restarting at every jump, the adjoint gradient
    # agrees with backpropagation through the same scheme to the scheme's accuracy.
    m = 8
    field, weights, jumps = piecewise_constant_problem(m)
    y0 = torch.randn(5, 2, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 1.0], dtype=F64)
    opts = {"n_steps": m, "jump_t": jumps}
    back = gradients(
        lambda: odecore.odeint(field, y0, t, method=method, options=opts)[-1].sum(),
        [weights, y0],
    )
    exact = exact_piecewise_gradients(field, weights, jumps, y0, t, [weights, y0])
    adj = gradients(
        lambda: odecore.odeint_adjoint(
            field, y0, t, method=method, options=opts, adjoint_params=(weights,)
        )[-1].sum(),
        [weights, y0],
    )
    order = {"euler": 1, "rk4": 4}[method]
    tol = 3 * (1 / m) ** order
    # Both discrete gradients approximate the exact one to the scheme's order ...
    for g_back, g_adj, g_exact in zip(back, adj, exact):
        assert (g_back - g_exact).abs().max() < tol * g_exact.abs().max()
        assert (g_adj - g_exact).abs().max() < tol * g_exact.abs().max()
    # ... and for RK4 they agree with each other far better than 1e-3.
    if method == "rk4":
        for g_back, g_adj in zip(back, adj):
            torch.testing.assert_close(g_adj, g_back, rtol=1e-3, atol=1e-4)


def test_piecewise_constant_without_jump_t_is_wrong():
    # Without jump_t the last stage of each RK4 step sees the next piece's weights,
    # forward and backward: the gradient is off at O(1), not O(h^4).
    m = 8
    field, weights, jumps = piecewise_constant_problem(m)
    y0 = torch.randn(5, 2, dtype=F64)
    t = torch.tensor([0.0, 1.0], dtype=F64)
    exact = exact_piecewise_gradients(field, weights, jumps, y0, t, [weights])[0]
    wrong = gradients(
        lambda: odecore.odeint_adjoint(
            field, y0, t, method="rk4", options={"n_steps": m}, adjoint_params=(weights,)
        )[-1].sum(),
        [weights],
    )[0]
    assert (wrong - exact).abs().max() > 1e-2 * exact.abs().max()


def test_backward_statistics_and_failure():
    field = MLPField()
    y0 = torch.randn(3, dtype=F64, requires_grad=True)
    sol = odecore.solve(
        field,
        y0,
        t0=0.0,
        t1=1.0,
        solver=odecore.Dopri5(),
        controller=odecore.PIDController(rtol=1e-3, atol=1e-3),
        gradient=odecore.Adjoint(controller=odecore.PIDController(rtol=1e-13, atol=1e-13)),
        max_steps=30,
    )
    assert sol.stats.nfe_backward == 0
    with pytest.raises(odecore.SolverError, match=r"adjoint's backward solve stopped at t = "):
        sol.ys.sum().backward()


def test_backward_nfe_is_counted():
    field = MLPField()
    y0 = torch.randn(3, dtype=F64, requires_grad=True)
    sol = odecore.solve(
        field, y0, t0=0.0, t1=1.0, solver=odecore.Tsit5(), gradient=odecore.Adjoint()
    )
    sol.ys.sum().backward()
    assert sol.stats.nfe_backward > 0
    assert y0.grad is not None


@pytest.mark.parametrize("adjoint", [False, True])
def test_adjoint_graph_does_not_grow_with_steps(adjoint):
    # Backprop records every stage of every step; the adjoint one node per solve.
    field = MLPField()
    y0 = torch.randn(3, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 1.0], dtype=F64)
    solve = odecore.odeint_adjoint if adjoint else odecore.odeint
    sizes = [
        graph_size(solve(field, y0, t, method="rk4", options={"n_steps": n})) for n in (10, 100)
    ]
    if adjoint:
        assert sizes[0] == sizes[1]
    else:
        assert sizes[1] > 5 * sizes[0]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"adjoint_method": "rk5"}, ValueError, r"Unknown `adjoint_method` 'rk5'"),
        ({"adjoint_options": {"bogus": 1}}, ValueError, r"Unknown adjoint_option\(s\) \['bogus'\]"),
        ({"adjoint_rtol": -1.0}, ValueError, r"`adjoint_rtol` must be a positive number"),
        (
            {"adjoint_method": "rk4", "adjoint_options": {"norm": "seminorm"}},
            ValueError,
            r"needs an adaptive `adjoint_method`",
        ),
        ({"adjoint_params": [1.0]}, TypeError, r"`params\[0\]` must be a Tensor"),
        # The backward solve runs in the forward loop: these were ignored.
        ({"adjoint_options": {"max_num_steps": 2}}, ValueError, r"\['max_num_steps'\] cannot"),
        ({"adjoint_options": {"jump_t": [0.5]}}, ValueError, r"\['jump_t'\] cannot differ"),
        ({"adjoint_options": {"step_t": [0.5]}}, ValueError, r"\['step_t'\] cannot differ"),
        (
            {"options": {"jump_t": [0.5]}, "adjoint_options": {"jump_t": [0.25]}},
            ValueError,
            r"\['jump_t'\] cannot differ",
        ),
    ],
)
def test_adjoint_argument_errors(kwargs, error, match):
    y0 = torch.ones(2, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 1.0], dtype=F64)
    with pytest.raises(error, match=match):
        odecore.odeint_adjoint(lambda t, y: -y, y0, t, **kwargs)


def test_adjoint_options_may_repeat_the_forward_ones_as_equal_values():
    # The same step budget and jumps written twice (distinct objects) are not "another".
    y0 = torch.ones(2, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 1.0], dtype=F64)
    big = int("100000")  # not the object the literal below makes
    out = odecore.odeint_adjoint(
        lambda t, y: -y, y0, t, options={"max_num_steps": 100000, "jump_t": [0.5]},
        adjoint_options={"max_num_steps": big, "jump_t": [0.5]},
    )  # fmt: skip
    out[-1].sum().backward()
    torch.testing.assert_close(y0.grad, torch.full((2,), math.exp(-1.0), dtype=F64))


class Scaled(torch.nn.Module):
    """``dy/dt = -rate * scale * y``: a parameter and a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.rate = torch.nn.Parameter(torch.tensor(0.7, dtype=F64))
        self.register_buffer("scale", torch.tensor(1.5, dtype=F64))

    def forward(self, t, y):
        return -self.rate * self.scale * y


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"method": "implicit_adams", "options": {"step_size": 0.01}}, {"method": "scipy:RK45"}],
)
def test_adjoint_params_may_hold_a_buffer(kwargs):
    # torchdiffeq's `adjoint_params=tuple(func.buffers()) + ...` works: a tensor that
    # does not require grad is left out (backward() raised torch's bare RuntimeError).
    field = Scaled()
    y0 = torch.ones(2, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 1.0], dtype=F64)
    ys = odecore.odeint_adjoint(
        field, y0, t, rtol=1e-10, atol=1e-10, adjoint_params=(field.scale, field.rate), **kwargs
    )
    ys[-1].sum().backward()
    expected = -1.5 * math.exp(-1.05) * 2
    assert field.scale.grad is None
    assert abs(field.rate.grad.item() - expected) < 1e-6


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"method": "implicit_adams", "options": {"step_size": 0.01}}, {"method": "scipy:RK45"}],
)
def test_adjoint_params_listed_twice_get_their_gradient_once(kwargs):
    # Each listing got the whole gradient, and autograd summed them: twice the gradient.
    field = Scaled()
    grads = []
    for params in ((field.rate,), (field.rate, field.rate)):
        y0 = torch.ones(2, dtype=F64, requires_grad=True)
        t = torch.tensor([0.0, 1.0], dtype=F64)
        ys = odecore.odeint_adjoint(field, y0, t, adjoint_params=params, **kwargs)
        grads.append(torch.autograd.grad(ys[-1].sum(), field.rate)[0])
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-14, atol=0.0)


@pytest.mark.parametrize(
    "gradient",
    [
        {},
        {"method": "implicit_adams", "options": {"step_size": 0.01}},
        {"method": "scipy:RK45"},
        odecore.Adjoint,
        odecore.Checkpoint,
    ],
    ids=["odeint_adjoint", "adams", "scipy", "Adjoint", "Checkpoint"],
)
def test_params_may_be_a_generator(gradient):
    # The check of the given tensors spent a generator, and the gradient was None.
    field = Scaled()
    y0 = torch.ones(2, dtype=F64)
    if isinstance(gradient, dict):
        ys = odecore.odeint_adjoint(
            field, y0, torch.tensor([0.0, 1.0], dtype=F64),
            adjoint_params=(p for p in [field.rate]), **gradient,
        )  # fmt: skip
    else:
        ys = odecore.solve(
            field, y0, t0=0.0, t1=1.0, solver=odecore.Dopri5(),
            gradient=gradient(params=(p for p in [field.rate])),
        ).ys  # fmt: skip
    (grad,) = torch.autograd.grad(ys[-1].sum(), field.rate, allow_unused=True)
    assert grad is not None
    assert abs(grad.item() - (-1.5 * math.exp(-1.05) * 2)) < 1e-5


def test_checkpoint_params_listed_twice_get_their_gradient_once():
    field = Scaled()
    grads = []
    for params in ((field.rate,), (field.rate, field.rate)):
        sol = odecore.solve(
            field, torch.ones(2, dtype=F64), t0=0.0, t1=1.0, solver=odecore.Dopri5(),
            gradient=odecore.Checkpoint(params=params),
        )  # fmt: skip
        grads.append(torch.autograd.grad(sol.ys[-1].sum(), field.rate)[0])
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-14, atol=0.0)


class VanDerPol(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mu = torch.nn.Parameter(torch.tensor(5.0))

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x, v = y[..., 0], y[..., 1]
        return torch.stack([v, self.mu * (1 - x**2) * v - x], dim=-1)


def test_van_der_pol_adjoint_is_right_or_says_why():
    # mu = 5 on [0, 5]: integrating the state backward is unstable. The adjoint must
    # either give backprop's gradient within 1e-3 or raise SolverError; the
    # checkpoint method gives backprop's gradient.
    field = VanDerPol()
    y0 = torch.randn(64, 2)
    control = odecore.PIDController(rtol=1e-6, atol=1e-6)

    def mu_gradient(gradient):
        field.mu.grad = None
        sol = odecore.solve(
            field, y0, t0=0.0, t1=5.0, solver=odecore.Dopri5(), controller=control,
            gradient=gradient,
        )  # fmt: skip
        sol.ys[-1].pow(2).sum().backward()
        return field.mu.grad.item()

    reference = mu_gradient(odecore.Autograd())
    assert mu_gradient(odecore.Checkpoint()) == pytest.approx(reference, rel=1e-5)
    try:
        adjoint = mu_gradient(odecore.Adjoint())
    except odecore.SolverError as error:
        assert "adjoint's backward solve stopped at t = " in str(error)
    else:
        assert adjoint == pytest.approx(reference, rel=1e-3)


class _TimeOnly(torch.nn.Module):
    """A field that reads neither its state nor a parameter: autograd sees a constant."""

    def forward(self, t, y):
        return -0.1 * torch.exp(-0.1 * t) * torch.ones_like(y)


@pytest.mark.parametrize("method", ["dopri5", "rk4"])
def test_adjoint_of_a_field_without_the_state_or_parameters(method):
    # Raised "element 0 of tensors does not require grad" in the backward pass. The
    # gradient of y(t1) = y0 + integral of f(t) is the identity in y0, and f at the
    # ends in the times.
    y0 = torch.ones(3, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64, requires_grad=True)
    options = {"step_size": 0.05} if method == "rk4" else None
    ys = odecore.odeint_adjoint(_TimeOnly(), y0, t, method=method, options=options,
                                adjoint_params=())  # fmt: skip
    ys[-1].sum().backward()
    torch.testing.assert_close(y0.grad, torch.ones(3, dtype=torch.float64))
    f = lambda s: -0.1 * math.exp(-0.1 * s)  # noqa: E731
    expected = torch.tensor([-3 * f(0.0), 0.0, 3 * f(1.0)], dtype=torch.float64)
    torch.testing.assert_close(t.grad, expected, rtol=1e-10, atol=1e-12)


# --- tensors the field reads only after t0 ---------------------------------------------


def _late_field(w: torch.Tensor):
    """``-y`` until t = 0.5, then ``-(1 + w (t - 0.5)) y``: ``w`` is read only after 0.5,
    never at ``(t0, y0)``. ``y(1) = y0 exp(-1 - w / 8)``."""

    def field(t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if float(t) <= 0.5:
            return -y
        return -(1 + w * (t - 0.5)) * y

    return field


class _LateModule(torch.nn.Module):
    """:func:`_late_field` as a module that holds ``w`` without registering it."""

    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self._w = [w]

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return _late_field(self._w[0])(t, y)


def _late_oracle(w: float, y0: float) -> tuple[float, float]:
    """``d y(1) / dw`` and ``d y(1) / d y0`` in closed form."""
    y1 = y0 * math.exp(-1 - w / 8)
    return -y1 / 8, y1 / y0


@pytest.mark.parametrize("form", ["leaf", "non-leaf", "module-held"])
@pytest.mark.parametrize("interface", ["odeint_adjoint", "solve", "interpolated"])
def test_adjoint_finds_a_tensor_read_only_after_t0(form, interface):
    # w.grad was None without an error: the tensors were searched at (t0, y0) only.
    w = torch.tensor(0.7, dtype=F64, requires_grad=True)
    read = w * 1.0 if form == "non-leaf" else w
    field = _LateModule(read) if form == "module-held" else _late_field(read)
    y0 = torch.tensor([1.5], dtype=F64, requires_grad=True)
    if interface == "odeint_adjoint":
        t = torch.tensor([0.0, 1.0], dtype=F64)
        y1 = odecore.odeint_adjoint(field, y0, t, rtol=1e-11, atol=1e-12)[-1]
    else:
        state = "interpolated" if interface == "interpolated" else "auto"
        y1 = odecore.solve(
            field, y0, t0=0.0, t1=1.0, solver=odecore.Dopri5(),
            controller=odecore.PIDController(rtol=1e-11, atol=1e-12),
            gradient=odecore.Adjoint(state=state),
        ).ys[-1]  # fmt: skip
    y1.sum().backward()
    dw, dy0 = _late_oracle(0.7, 1.5)
    assert w.grad is not None, "the adjoint left w without a gradient"
    assert w.grad.item() == pytest.approx(dw, rel=1e-7)
    assert y0.grad.item() == pytest.approx(dy0, rel=1e-7)


def test_adjoint_raises_for_a_tensor_only_its_backward_pass_reads():
    # The forward RK4 steps of 0.25 never evaluate the field inside (0.04, 0.06); the
    # backward steps of 0.1 do (at 0.05). w's gradient cannot be returned: an error
    # that says which argument takes it, not a silent None.
    w = torch.tensor(0.7, dtype=F64, requires_grad=True)

    def field(t, y):
        return -w * y if 0.04 < float(t) < 0.06 else -y

    y0 = torch.ones(1, dtype=F64, requires_grad=True)
    sol = odecore.solve(
        field, y0, t0=0.0, t1=1.0, solver=odecore.RK4(), dt0=0.25,
        gradient=odecore.Adjoint(dt0=0.1),
    )  # fmt: skip
    with pytest.raises(
        odecore.ConfigurationError,
        match=r"Adjoint\(params=\.\.\.\).*`adjoint_params=` of `odeint_adjoint`",
    ):
        sol.ys[-1].sum().backward()


def test_adjoint_of_a_field_that_differentiates_inside():
    # A Hamiltonian field makes a fresh leaf of its state at every call to take
    # dH/dy: that leaf is no parameter, and the backward pass does not flag it.
    w = torch.tensor(0.8, dtype=F64, requires_grad=True)

    def field(t, y):
        with torch.enable_grad():
            x = y if y.requires_grad else y.detach().requires_grad_(True)
            energy = 0.5 * (w * x[..., 0] ** 2 + x[..., 1] ** 2)
            (d,) = torch.autograd.grad(energy.sum(), x, create_graph=True)
        return torch.stack([d[..., 1], -d[..., 0]], dim=-1)

    y0 = torch.tensor([1.0, 0.0], dtype=F64, requires_grad=True)
    kw = {"solver": odecore.Dopri5(), "controller": odecore.PIDController(rtol=1e-11, atol=1e-12)}
    grads = []
    for gradient in (odecore.Autograd(), odecore.Adjoint()):
        w.grad, y0.grad = None, None
        odecore.solve(field, y0, t0=0.0, t1=1.0, gradient=gradient, **kw).ys[-1][0].backward()
        grads.append((w.grad.clone(), y0.grad.clone()))
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-7, atol=1e-9)


def _pendulum(t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.stack([y[..., 1], -1.3 * torch.sin(y[..., 0])], dim=-1)


@pytest.mark.parametrize("call", ["odeint_adjoint", "adjoint_option"])
@pytest.mark.parametrize("tuple_state", [False, True])
def test_a_norm_of_the_users_sees_the_state_as_written_in_the_backward_solve(call, tuple_state):
    """A norm written for the state's shape (here: the error of its second row only)
    gets that shape, or the tuple, in the adjoint's backward solve too. Given flat
    slices, ``x[1]`` read one element, zero, and the steps grew unchecked: the
    gradient came out near -9.6e3 where it is -16.6."""
    seen = set()

    def norm(x):
        seen.add(type(x).__name__ if isinstance(x, tuple) else tuple(x.shape))
        return x[1].pow(2).mean().sqrt()  # a tuple's second tensor, a tensor's second row

    y0 = torch.tensor([[0.0, 0.0], [2.5, 0.5]], dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 10.0], dtype=F64)

    def field(t, y):
        return tuple(_pendulum(t, torch.stack(y))) if tuple_state else _pendulum(t, y)

    def grad(fn, **kw):
        state = tuple(y0.unbind()) if tuple_state else y0
        ys = fn(field, state, t, **kw)
        last = torch.stack([y[-1] for y in ys]) if tuple_state else ys[-1]
        return torch.autograd.grad(last[1, 0] ** 2 + last[1, 1], y0)[0][1]

    reference = grad(odecore.odeint, rtol=1e-12, atol=1e-12)
    if call == "odeint_adjoint":
        got = grad(odecore.odeint_adjoint, rtol=1e-6, atol=1e-6, options={"norm": norm})
    else:
        options = {"norm": norm, "gradient": "adjoint"}
        got = grad(odecore.odeint, rtol=1e-6, atol=1e-6, options=options)
    assert seen == ({"tuple"} if tuple_state else {(2, 2)})
    torch.testing.assert_close(got, reference, rtol=2e-4, atol=0)


def _linear_solve(gradient, w, y0):
    return odecore.solve(
        lambda t, y: w @ y, y0, t0=0.0, t1=1.0, solver=odecore.Dopri5(), gradient=gradient,
        controller=odecore.PIDController(rtol=1e-10, atol=1e-10),
        saveat=odecore.SaveAt(ts=[0.5, 1.0]),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("gradient", "match"),
    [
        (odecore.Adjoint(solver=odecore.RK4()), r"constant steps.*Adjoint\(dt0=\.\.\.\)"),
        (
            odecore.Adjoint(solver=odecore.RK4(), controller=odecore.PIDController(), dt0=0.1),
            r"RK4\(\)` has no error estimate",
        ),
        (odecore.Adjoint(solver=odecore.RK4(), dt0=0.1, seminorm=True), r"needs a PIDController"),
    ],
)
def test_a_backward_solve_that_cannot_run_is_refused_at_the_solve(gradient, match):
    # A fixed-step backward solver after an adaptive forward solve failed in
    # backward(), once the whole forward solve had run.
    w = torch.tensor([[-0.5, 1.0], [-1.0, -0.3]], dtype=F64, requires_grad=True)
    y0 = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)
    with pytest.raises(odecore.ConfigurationError, match=match):
        _linear_solve(gradient, w, y0)


def test_a_fixed_step_backward_solver_after_an_adaptive_forward_solve_takes_constant_steps():
    # It inherited the forward PIDController, which cannot adapt RK4's steps.
    w = torch.tensor([[-0.5, 1.0], [-1.0, -0.3]], dtype=F64, requires_grad=True)
    y0 = torch.tensor([1.0, 0.5], dtype=F64, requires_grad=True)
    grads = []
    for gradient in (odecore.Autograd(), odecore.Adjoint(solver=odecore.RK4(), dt0=0.01)):
        sol = _linear_solve(gradient, w, y0)
        grads.append(torch.autograd.grad(sol.ys.square().sum(), (w, y0)))
    assert sol.stats.nfe_backward == 2 * 50 * 4  # 50 RK4 steps per output interval
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-10)

"""PyTorch's function transforms (torch.func) and forward-mode AD around a solve: the
right answer (against the matrix exponential: y' = A y gives y(t) = expm(tA) y0, whose
Jacobian in y0 is expm(tA)) or a refusal in odecore's words that names what is not
supported; never PyTorch's advice to rewrite a Function, nor a host read under vmap."""

import math

import odecore
import pytest
import torch
from odecore import ConfigurationError
from scipy.linalg import expm
from torch.autograd import forward_ad

F64 = torch.float64
A = torch.tensor([[-0.5, 1.0], [-1.0, -0.3]], dtype=F64)
Y0 = torch.tensor([1.0, 0.5], dtype=F64)
E = torch.tensor(expm(A.numpy()), dtype=F64)  # y(1) = E y0
V = torch.tensor([0.3, -0.7], dtype=F64)

SOLVERS = {
    "rk4": {"solver": odecore.RK4(), "dt0": 0.01},
    "dopri5": {
        "solver": odecore.Dopri5(),
        "controller": odecore.PIDController(rtol=1e-10, atol=1e-12),
    },
}
OWN_BACKWARD = {
    "adjoint": odecore.Adjoint(),
    "checkpoint": odecore.Checkpoint(),
    "reversible": odecore.Reversible(),
}


def _end(y0, gradient=None, solver="dopri5", a=A):
    sol = odecore.solve(
        lambda t, y: y @ a.T, y0, t0=0.0, t1=1.0, gradient=gradient or odecore.Autograd(),
        **SOLVERS[solver],
    )  # fmt: skip
    return sol.ys[-1]


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_jacrev_and_grad_of_backpropagation_are_the_matrix_exponential(solver):
    jac = torch.func.jacrev(lambda y: _end(y, solver=solver))(Y0)
    assert torch.allclose(jac, E, atol=1e-8)
    grad = torch.func.grad(lambda a: _end(Y0, solver=solver, a=a).sum())(A)
    (want,) = torch.autograd.grad(_end(Y0, solver=solver, a=A.requires_grad_()).sum(), A)
    A.requires_grad_(False)
    assert torch.allclose(grad, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("method", sorted(OWN_BACKWARD))
def test_torch_func_grad_of_a_method_with_its_own_backward_is_refused_by_name(method):
    # It raised PyTorch's "must override the setup_context staticmethod".
    gradient = OWN_BACKWARD[method]
    name = type(gradient).__name__
    with pytest.raises(ConfigurationError, match=rf"gradient={name}\(\).*torch\.func"):
        torch.func.grad(lambda y: _end(y, gradient).sum())(Y0)
    # torch.autograd still differentiates it.
    jac = torch.autograd.functional.jacobian(lambda y: _end(y, gradient), Y0)
    assert torch.allclose(jac, E, atol=1e-6)


@pytest.mark.parametrize("solver", [odecore.Rodas5P(), odecore.Kvaerno5()])
def test_torch_func_grad_of_a_solver_that_takes_the_jacobian_is_refused_by_name(solver):
    # It raised "Batching rule not implemented for aten::_local_scalar_dense" (Rodas5P)
    # and PyTorch's "requires_grad_() ... inside of a function being transformed".
    def end(y):
        return odecore.solve(lambda t, y: y @ A.T, y, t0=0.0, t1=1.0, solver=solver).ys[-1]

    name = type(solver).__name__
    with pytest.raises(ConfigurationError, match=rf"solver={name}\(\).*Jacobian.*torch\.func"):
        torch.func.jacrev(end)(Y0)
    assert torch.allclose(torch.autograd.functional.jacobian(end, Y0), E, atol=1e-5)


def test_odeint_adjoint_under_torch_func_is_refused_by_name():
    t = torch.tensor([0.0, 1.0], dtype=F64)
    with pytest.raises(ConfigurationError, match=r"that of odeint_adjoint.*torch\.func"):
        torch.func.jacrev(lambda y: odecore.odeint_adjoint(lambda s, y: y @ A.T, y, t)[-1])(Y0)
    with pytest.raises(ConfigurationError, match=r"odeint_adjoint's gradient.*torch\.func"):
        torch.func.jacrev(
            lambda y: odecore.odeint_adjoint(
                lambda s, y: y @ A.T, y, t, method="explicit_adams", options={"step_size": 0.1}
            )[-1]
        )(Y0)


def test_a_function_of_the_solve_under_torch_func_is_refused_by_name():
    # Backpropagation through an event's time: the event's own Function.
    def at_event(y):
        sol = odecore.solve(
            lambda t, y: y @ A.T, y, t0=0.0, t1=1.0, **SOLVERS["dopri5"],
            event=odecore.Event(lambda t, y: y[0] - 0.8),
        )  # fmt: skip
        return sol.ys[-1]

    with pytest.raises(ConfigurationError, match=r"an event ends.*torch\.func.*fixed end time"):
        torch.func.jacrev(at_event)(Y0)


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_vmap_over_a_solve_is_refused_by_name(solver):
    # It raised PyTorch's "calling .item() ... please file a bug report".
    with pytest.raises(ConfigurationError, match=r"torch\.func\.vmap.*y0's leading dimension"):
        torch.func.vmap(lambda y: _end(y, solver=solver))(torch.stack([Y0, 2 * Y0]))
    # What it points to: the batch as one solve, each row E y0.
    batch = torch.stack([Y0, 2 * Y0])
    assert torch.allclose(_end(batch, solver=solver), batch @ E.T, atol=1e-8)


def test_per_sample_gradients_by_vmap_of_grad_are_refused_by_name():
    with pytest.raises(ConfigurationError, match=r"torch\.func\.vmap"):
        torch.func.vmap(torch.func.grad(lambda a, y: _end(y, a=a).sum()), in_dims=(None, 0))(
            A, torch.stack([Y0, Y0])
        )


@pytest.mark.parametrize("transform", ["jacfwd", "jvp"])
def test_torch_func_forward_mode_is_refused_by_name(transform):
    # It raised "Trying to use forward AD with aminmax_out ... an out= function".
    with pytest.raises(ConfigurationError, match="forward mode"):
        if transform == "jacfwd":
            torch.func.jacfwd(lambda y: _end(y, solver="rk4"))(Y0)
        else:
            torch.func.jvp(lambda a: _end(Y0, solver="rk4", a=a), (A,), (A,))


@pytest.mark.parametrize("dual", ["y0", "parameter"])
def test_forward_ad_dual_tensors_are_refused_by_name(dual):
    with forward_ad.dual_level():
        if dual == "y0":
            y0, a = forward_ad.make_dual(Y0, V), A
        else:
            y0, a = Y0, forward_ad.make_dual(A, torch.ones_like(A))
        with pytest.raises(ConfigurationError, match="forward mode"):
            _end(y0, solver="rk4", a=a)
        # A solve that reads no dual tensor runs inside a dual level.
        assert torch.allclose(_end(Y0, solver="rk4"), E @ Y0, atol=1e-8)


@pytest.mark.parametrize("method", ["adjoint", "adjoint-interpolated", "odeint_adjoint-adams"])
def test_a_batched_backward_through_the_adjoint_is_refused_by_name(method):
    # It raised "Batching rule not implemented for aten::detach".
    t = torch.tensor([0.0, 1.0], dtype=F64)
    runs = {
        "adjoint": lambda y: _end(y, odecore.Adjoint()),
        "adjoint-interpolated": lambda y: _end(y, odecore.Adjoint(state="interpolated")),
        "odeint_adjoint-adams": lambda y: odecore.odeint_adjoint(
            lambda s, y: y @ A.T, y, t, method="explicit_adams", options={"step_size": 0.1}
        )[-1],
    }
    with pytest.raises(ConfigurationError, match=r"vectorize=True.*leave out"):
        torch.autograd.functional.jacobian(runs[method], Y0, vectorize=True)


@pytest.mark.parametrize("method", ["autograd", *sorted(OWN_BACKWARD)])
@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_a_batched_backward_is_the_jacobian_or_refused(method, solver):
    gradient = OWN_BACKWARD.get(method, odecore.Autograd())
    run = lambda y: _end(y, gradient, solver)  # noqa: E731
    if method == "adjoint":
        with pytest.raises(ConfigurationError, match="vectorize=True"):
            torch.autograd.functional.jacobian(run, Y0, vectorize=True)
        return
    jac = torch.autograd.functional.jacobian(run, Y0, vectorize=True)
    assert torch.allclose(jac, E, atol=1e-6)


@pytest.mark.compile
@pytest.mark.slow
def test_a_solve_inside_torch_compile_still_runs_its_functions():
    # Dynamo traces the refusal before odecore's Functions, and the Functions themselves.
    w = torch.tensor(0.5, dtype=F64, requires_grad=True)

    def run(y):
        gradient = odecore.Adjoint(params=(w,))
        sol = odecore.solve(lambda t, x: -w * x, y, t0=0.0, t1=1.0, solver=odecore.RK4(),
                            dt0=0.5, gradient=gradient)  # fmt: skip
        return sol.ys[-1].sum()

    torch.compile(run, backend="eager")(torch.ones(2, dtype=F64)).backward()
    assert w.grad.item() == pytest.approx(-2 * math.exp(-0.5), rel=1e-3)  # d/dw 2 exp(-w)


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("method", ["adjoint", "checkpoint"])
def test_a_solve_inside_torch_compile_finds_the_tensors_its_field_reads(method):
    # Inside the caller's torch.compile an evaluation's graph is traced, not built: the
    # search for what the field closes over found nothing, and w's gradient lost the
    # solve's share (1.4, the w**2 term's, for 1.4 - exp(-0.7)) without a word.
    w = torch.tensor(0.7, dtype=F64, requires_grad=True)
    gradient = odecore.Adjoint() if method == "adjoint" else odecore.Checkpoint()

    def loss():
        sol = odecore.solve(lambda t, y: -w * y, torch.ones(1, dtype=F64), t0=0.0, t1=1.0,
                            solver=odecore.Dopri5(), gradient=gradient)  # fmt: skip
        return sol.ys[-1].sum() + w**2

    try:
        torch.compile(loss, backend="eager")().backward()
    except ConfigurationError as exc:  # or refused, naming `params=`
        assert "params" in str(exc)
        return
    assert w.grad.item() == pytest.approx(1.4 - math.exp(-0.7), rel=1e-5)

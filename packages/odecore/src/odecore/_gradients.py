"""Gradient methods: how a solve is differentiated.

A gradient method receives the solve loop as a function (``loop``) and the problem;
it never imports the module that defines the loop.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, final

import torch
from torch import Tensor

from ._controllers import AbstractController, PIDController, rms_norm
from ._errors import ConfigurationError, SolverError, Status
from ._solvers import AbstractSolver

FlatField = Callable[[Tensor, Tensor], Tensor]
"""A vector field on the flat state, in the caller's time: ``f(t, y) -> dy/dt``."""


@dataclass
class Stats:
    """Counts of one solve.

    Attributes:
        nfe: evaluations of the vector field, forward.
        n_steps: steps attempted (accepted plus rejected), forward.
        n_accepted: accepted steps, forward.
        n_rejected: rejected steps, forward.
        nfe_backward: evaluations of the vector field and its vector-Jacobian product
            in the backward pass of :class:`Adjoint` (filled in when ``backward``
            runs; 0 for backpropagation, whose backward pass autograd does).
    """

    nfe: int = 0
    n_steps: int = 0
    n_accepted: int = 0
    n_rejected: int = 0
    nfe_backward: int = 0


@dataclass
class LoopResult:
    """What one run of the solve loop returns.

    Attributes:
        ys: the flat state at each output time, ``None`` where not reached.
        stats: the loop's counts.
        status: how the loop ended.
        t_final: the last time reached, in the caller's time.
        step_ends: the end of every accepted step, in the caller's time.
    """

    ys: list[Tensor | None]
    stats: Stats
    status: Status
    t_final: float
    step_ends: list[float] = field(default_factory=list)


class Loop(Protocol):
    """The solve loop as gradient methods receive it.

    ``loop(f, y0, t0, t1, ts, solver, controller, dt0)`` runs one solve from ``t0`` to
    ``t1`` with outputs at ``ts``; the jump and step times are those of the call
    being differentiated, plus ``step_ts``; ``on_step(t, y)`` sees every accepted
    step. It never raises for a failed solve: the status says.
    """

    def __call__(
        self,
        f: FlatField,
        y0: Tensor,
        t0: float,
        t1: float,
        ts: Sequence[float],
        solver: AbstractSolver,
        controller: AbstractController,
        dt0: float | None,
        *,
        step_ts: Sequence[float] = (),
        on_step: Callable[[float, Tensor], None] | None = None,
    ) -> LoopResult: ...


@dataclass
class Problem:
    """A solve, as a gradient method sees it: flat state, times as floats.

    Attributes:
        f: the vector field on the flat state.
        y0: the flat initial state.
        t0: start time.
        t1: end time (``t1 < t0`` for a backward solve).
        ts: output times, in the direction of integration.
        ts_tensor: the tensor the output times came from, when the caller gave one;
            gradients with respect to the times flow into it.
        solver: the forward solver.
        controller: the forward controller.
        dt0: the forward ``dt0``.
        module: ``f``'s module, when the caller's vector field is an ``nn.Module``.
    """

    f: FlatField
    y0: Tensor
    t0: float
    t1: float
    ts: list[float]
    ts_tensor: Tensor | None
    solver: AbstractSolver
    controller: AbstractController
    dt0: float | None
    module: torch.nn.Module | None = None


class AbstractGradient(abc.ABC):
    """How a solve is differentiated: ``run`` runs the loop it is given."""

    @abc.abstractmethod
    def run(self, loop: Loop, problem: Problem) -> LoopResult:
        """Run the forward solve so that its outputs carry the right gradients."""


@final
@dataclass(frozen=True)
class Autograd(AbstractGradient):
    """Backpropagation through every operation of the solver (the default).

    Exact gradients of the discrete scheme, for everything the vector field reads.
    Memory grows with the number of steps: every stage's activations are kept.

    Example:
        >>> import torch, odecore
        >>> y0 = torch.ones(2, requires_grad=True)
        >>> sol = odecore.solve(lambda t, y: -y, y0, t0=0.0, t1=1.0, solver=odecore.RK4(),
        ...                     dt0=0.1, gradient=odecore.Autograd())
        >>> sol.ys[-1].sum().backward()
        >>> y0.grad.shape
        torch.Size([2])
    """

    def run(self, loop: Loop, problem: Problem) -> LoopResult:
        p = problem
        return loop(p.f, p.y0, p.t0, p.t1, p.ts, p.solver, p.controller, p.dt0)


@final
@dataclass(frozen=True)
class Adjoint(AbstractGradient):
    """The continuous adjoint method (Chen et al. 2018): memory constant in the steps.

    The forward solve keeps no graph. The backward pass integrates the state, its
    adjoint ``a = dL/dy`` and the parameter gradients backward in time,
    ``da/dt = -a ∂f/∂y`` and ``dg/dt = -a ∂f/∂θ``, restarting at every output time
    (where ``dL/dy(t_i)`` is added to ``a``) and at every jump of ``jump_ts``, so a
    piecewise-constant weight function is handled exactly. Gradients reach ``y0``,
    the output times (``ts`` of :class:`SaveAt`, ``t`` of :func:`odeint_adjoint`) and
    the parameters: ``params`` if given, else those of the vector field when it is
    an ``nn.Module``.

    The gradient is that of the continuous problem, accurate to the backward
    solve's tolerance; it differs from the discrete scheme's (:class:`Autograd`) by
    the forward error. A vector field that is not smooth (ReLU) makes the adjoint
    system discontinuous in time and the backward solve expensive.

    Args:
        solver: the backward solver; default the forward one.
        controller: the backward controller; default the forward one.
        dt0: the backward solve's first (or fixed) step size; default the forward one.
        seminorm: measure the backward error on the state and its adjoint only, not
            on the parameter gradients (Kidger et al. 2021): fewer backward steps.
        params: the tensors to differentiate besides ``y0`` and the times.

    Example:
        >>> import torch, odecore
        >>> rate = torch.nn.Parameter(torch.tensor(-0.5))
        >>> sol = odecore.solve(lambda t, y: rate * y, torch.ones(1), t0=0.0, t1=2.0,
        ...                     solver=odecore.Dopri5(),
        ...                     gradient=odecore.Adjoint(params=(rate,)))
        >>> sol.ys[-1].sum().backward()   # d/d(rate) exp(2 rate) = 2 exp(2 rate)
        >>> abs(rate.grad.item() - 2 * torch.exp(torch.tensor(-1.0)).item()) < 1e-5
        True
    """

    solver: AbstractSolver | None = None
    controller: AbstractController | None = None
    dt0: float | None = None
    seminorm: bool = False
    params: Sequence[Tensor] | None = field(default=None, compare=False)

    def run(self, loop: Loop, problem: Problem) -> LoopResult:
        p = problem
        if self.params is not None:
            params = tuple(self.params)
        elif p.module is not None:
            params = tuple(q for q in p.module.parameters() if q.requires_grad)
        else:
            params = ()
        for i, q in enumerate(params):
            if not isinstance(q, Tensor):
                raise TypeError(f"`params[{i}]` must be a Tensor, got {type(q).__name__}.")
        with torch.no_grad():
            result = loop(p.f, p.y0, p.t0, p.t1, p.ts, p.solver, p.controller, p.dt0)
        if result.status != Status.SUCCESS or not p.ts:
            return result
        forward = torch.stack([y for y in result.ys if y is not None])
        ts = p.ts_tensor if p.ts_tensor is not None else torch.tensor(p.ts, dtype=torch.float64)
        spec = _AdjointSpec(self, loop, p, result.stats, len(params))
        ys = _AdjointFunction.apply(spec, forward, p.y0, ts, *params)  # type: ignore[no-untyped-call]
        return replace(result, ys=list(ys.unbind(0)))


@dataclass
class _AdjointSpec:
    method: Adjoint
    loop: Loop
    problem: Problem
    stats: Stats
    n_params: int


class _AdjointFunction(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, spec: _AdjointSpec, forward: Tensor, y0: Tensor, ts: Tensor, *params: Tensor
    ) -> Tensor:
        ctx.spec = spec
        ctx.save_for_backward(forward, *params)
        return forward.clone()

    @staticmethod
    def backward(ctx: Any, grad_ys: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        spec: _AdjointSpec = ctx.spec
        forward, *params = ctx.saved_tensors
        grads = _adjoint_backward(spec, forward, tuple(params), grad_ys)
        grad_y0, grad_ts, grad_params = grads
        return (None, None, grad_y0, grad_ts, *grad_params)


def _adjoint_backward(
    spec: _AdjointSpec, forward: Tensor, params: tuple[Tensor, ...], grad_ys: Tensor
) -> tuple[Tensor, Tensor, tuple[Tensor | None, ...]]:
    p, method = spec.problem, spec.method
    n = p.y0.numel()
    sizes = [q.numel() for q in params]
    solver = method.solver or p.solver
    controller = method.controller or p.controller
    if method.seminorm and isinstance(controller, PIDController):
        inner = controller.norm or rms_norm
        controller = replace(controller, norm=lambda x: inner(x[: 2 * n]))
    elif method.seminorm:
        raise ConfigurationError(
            f"`Adjoint(seminorm=True)` needs a PIDController, got {type(controller).__name__}."
        )
    nfe = 0

    shape = p.y0.shape

    def augmented(t: Tensor, z: Tensor) -> Tensor:
        nonlocal nfe
        nfe += 1
        y, a = z[:n].view(shape), z[n : 2 * n].view(shape)
        with torch.enable_grad():
            y = y.detach().requires_grad_(True)
            fy = p.f(t, y)
            vjps = torch.autograd.grad(fy, (y, *params), -a, allow_unused=True)
        parts = [
            fy.detach().reshape(-1),
            (vjps[0] if vjps[0] is not None else torch.zeros_like(a)).reshape(-1),
        ]
        for q, g in zip(params, vjps[1:]):
            parts.append((g if g is not None else torch.zeros_like(q)).reshape(-1).to(z.dtype))
        return torch.cat(parts)

    ts = p.ts
    grad_ts = torch.zeros(len(ts), dtype=forward.dtype, device=forward.device)
    a = torch.zeros_like(p.y0)
    g = torch.zeros(sum(sizes), dtype=p.y0.dtype, device=p.y0.device)
    with torch.no_grad():
        for i in range(len(ts) - 1, -1, -1):
            y_i = forward[i]
            gy = grad_ys[i]
            if i > 0 or ts[0] != p.t0:
                grad_ts[i] = (gy * p.f(_time(ts[i], y_i), y_i)).sum()
                nfe += 1
            a = a + gy
            t_from = ts[i]
            t_to = ts[i - 1] if i > 0 else p.t0
            if t_from == t_to:
                continue
            z0 = torch.cat([y_i.reshape(-1), a.reshape(-1), g])
            dt0 = p.dt0 if method.dt0 is None else method.dt0
            res = spec.loop(augmented, z0, t_from, t_to, [t_to], solver, controller, dt0)
            if res.status != Status.SUCCESS or res.ys[-1] is None:
                raise SolverError(
                    f"the adjoint's backward solve stopped at t = {res.t_final!r} before "
                    f"reaching t = {t_to!r}: {res.status}.",
                    status=res.status,
                    t=res.t_final,
                )
            z = res.ys[-1]
            a, g = z[n : 2 * n].view(shape), z[2 * n :]
        if ts[0] == p.t0:
            f0 = p.f(_time(p.t0, p.y0), p.y0)
            nfe += 1
            grad_ts[0] = grad_ts[0] - (a * f0).sum() + (grad_ys[0] * f0).sum()
    spec.stats.nfe_backward += nfe
    grad_params = tuple(
        chunk.view_as(q).to(q.dtype) for chunk, q in zip(torch.split(g, sizes), params)
    )
    return a, grad_ts, grad_params


def _time(t: float, like: Tensor) -> Tensor:
    return torch.tensor(t, dtype=like.dtype, device=like.device)

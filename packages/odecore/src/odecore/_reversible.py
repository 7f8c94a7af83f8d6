"""The reversible gradient method: exact gradients of the discrete solve in memory
constant in the number of steps (McCallum and Foster 2024)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, final

import torch
from torch import Tensor

from ._controllers import _EPS, AbstractController, PIDController, rms_norm, scaled_error
from ._errors import ConfigurationError, SolverError, Status, first_order
from ._gradients import (
    AbstractGradient,
    FlatField,
    Kept,
    Loop,
    LoopResult,
    Problem,
    Stats,
    _failed,
    _parameters,
    _Replay,
    as_solved,
    beyond_rounding,
    found_tensors,
)
from ._solvers import AbstractExplicitRK, AbstractSolver, Field, SolveState, StepResult
from ._transforms import ReverseOnly
from ._transforms import apply as reverse_only


@final
@dataclass(frozen=True)
class Reversible(AbstractGradient):
    """Backpropagation through an algebraically reversible solve: exact gradients of
    the discrete scheme in memory constant in the number of steps (McCallum and
    Foster 2024).

    The solver (any explicit Runge-Kutta method, fixed or adaptive) becomes a
    reversible one on two states ``y`` and ``z``, both starting at ``y0``: with
    ``Psi_h(t, x)`` the solver's increment over a step of size ``h`` from ``(t, x)``
    and ``λ`` the ``coupling``,

    ``y_{n+1} = λ y_n + (1 - λ) z_n + Psi_h(t_n, z_n)``,
    ``z_{n+1} = z_n - Psi_{-h}(t_{n+1}, y_{n+1})``.

    The solution is ``y``; it converges at the solver's order, and an adaptive
    solver's error estimate is that of the step from ``z_n``. Each step can be undone
    exactly, so the forward solve keeps no graph and only the accepted step times:
    the backward pass rebuilds ``(y_n, z_n)`` from ``(y_{n+1}, z_{n+1})``, last step
    first, and backpropagates through that step alone. The gradient is that of the
    reversible solve (to rounding), for ``y0`` and every tensor the field reads; a
    forward step costs two steps of the solver, a backward one two more with their
    vector-Jacobian products (counted in ``Stats.nfe_backward``). An ``nn.Module``
    field is evaluated there in the training mode each of its submodules had in the
    forward solve.

    Rebuilding ``y_n`` divides by ``λ``: over ``N`` steps a rounding error may grow
    by up to ``λ**-N`` (about 2e4 for the default at 10,000 steps), small in float64,
    visible in float32 on long solves. A decaying mode of rate ``a`` on the other
    hand makes the two states drift apart unless ``h |a|`` is below about
    ``1 - λ``: a ``λ`` low enough for a dissipative problem's forward solve makes
    the backward pass amplify rounding by at least the contraction it undoes (the
    gradients guide measures both).

    Output times are step ends: the steps stop on every time of ``SaveAt(ts=...)``
    (no dense output between step ends).

    Args:
        coupling: ``λ`` in ``(0, 1]``; default 0.999.
        params: the tensors to differentiate besides ``y0``; default every tensor
            requiring grad that an evaluation of the forward solve reads, as for
            :class:`Adjoint`.

    Raises:
        ConfigurationError: if ``coupling`` is not in ``(0, 1]``; when the solve
            starts, for a solver that is not an explicit Runge-Kutta method or for
            output or step times that require grad; after an adaptive solve, if
            ``y`` and ``z`` drifted apart by more than 100 times the tolerance at a
            step's end (in the controller's norm of the error ratio: ``y`` would
            miss the tolerance); in ``backward()``, if the ``y0`` it rebuilt differs
            from ``y0`` by more than the cube root of the dtype's resolution (the
            coupled solve is unstable there, and its gradient would be wrong); in
            ``backward()`` through an output of a solve that failed (``throw=False``),
            which it does not differentiate (only ``y0`` at ``t0``).
        SolverError: in ``backward()``, if the backward pass could not retrace the
            forward steps (a non-finite state).

    Example:
        >>> import torch, odecore
        >>> field = torch.nn.Linear(2, 2)
        >>> y0 = torch.ones(2)
        >>> sol = odecore.solve(lambda t, y: field(y), y0, t0=0.0, t1=1.0,
        ...                     solver=odecore.RK4(), dt0=0.01,
        ...                     gradient=odecore.Reversible(params=tuple(field.parameters())))
        >>> sol.ys[-1].sum().backward()
        >>> field.weight.grad.shape, sol.stats.n_accepted
        (torch.Size([2, 2]), 100)

    References:
        S. McCallum, J. Foster, Efficient, Accurate and Stable Gradients for Neural
        ODEs, arXiv:2410.11648, 2024.
    """

    coupling: float = 0.999
    params: Sequence[Tensor] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        lam = self.coupling
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not 0.0 < lam <= 1.0:
            raise ConfigurationError(f"`coupling` must be a number in (0, 1], got {lam!r}.")

    def run(self, loop: Loop, problem: Problem) -> LoopResult:
        p = problem
        _check(p)
        reads, f = _parameters(self.params, p)
        # Named as the solver it wraps, for the messages that name the solver.
        coupled = type(type(p.solver).__name__, (_Coupled,), {})(
            p.solver, float(self.coupling), p.controller
        )
        with torch.no_grad():
            result = loop(
                f, p.y0, p.t0, p.t1, p.ts, coupled, p.controller, p.dt0,
                step_ts=p.ts, on_step=coupled.accepted,
            )  # fmt: skip
        params = found_tensors(self.params, p.module, reads)
        if result.status != Status.SUCCESS or not p.ts:
            return _failed(result, p, params, "Reversible")
        _check_drift(coupled, self.coupling)
        ends = [p.t0, *result.step_ends]
        # The state index of each output: the step end nearest to its time.
        sign = 1.0 if p.t1 >= p.t0 else -1.0
        keys = [sign * t for t in ends]
        where = [_nearest(keys, sign * t) for t in p.ts]
        spec = _Spec(
            loop, p, result.stats, float(self.coupling), ends, where, len(params),
            p.y0 if coupled.y is None else coupled.y,
            p.y0 if coupled.z is None else coupled.z,
        )  # fmt: skip
        forward = torch.stack([y for y in result.ys if y is not None])
        ys = reverse_only(_ReversibleFunction, spec, forward, p.y0, *params)
        return replace(result, ys=list(ys.unbind(0)))


def _check(p: Problem) -> None:
    """Refuse what the reversible method cannot do, naming the argument."""
    if not isinstance(p.solver, AbstractExplicitRK):
        raise ConfigurationError(
            f"`Reversible()` needs an explicit Runge-Kutta `solver` (RK4(), Dopri5(), "
            f"Tsit5(), ...), got {p.solver!r}; use `Checkpoint()` or `Adjoint()` for it."
        )
    times = p.times()
    if times is not None:
        raise ConfigurationError(
            "`Reversible()` does not differentiate the times: the output times "
            "(`saveat.ts`, odeint's `t`) or `step_ts` require grad. Pass them detached, "
            "or use `gradient=Autograd()` or `Checkpoint()`."
        )


def _nearest(keys: list[float], key: float) -> int:
    """The index of the value of the increasing ``keys`` nearest to ``key``."""
    i = bisect.bisect_left(keys, key)
    if i == len(keys):
        return i - 1
    if i > 0 and key - keys[i - 1] <= keys[i] - key:
        return i - 1
    return i


def _psi(solver: AbstractSolver, f: Field, t0: float, t1: float, x: Tensor, f0: Tensor) -> Tensor:
    """The solver's step from ``(t0, x)`` to ``t1``: ``x + Psi_{t1 - t0}(t0, x)``."""
    return solver.step(f, t0, t1, x, f0).y1


class _Coupled(AbstractSolver):
    """The reversible method on an explicit solver, as the solve loop steps it: the
    loop's state is ``y``; ``z`` is kept here, and moves on only when the loop
    accepts the step (``accepted`` is the loop's ``on_step``)."""

    def __init__(
        self, solver: AbstractSolver, coupling: float, controller: AbstractController
    ) -> None:
        self.solver = solver
        self.coupling = coupling
        self.y: Tensor | None = None  # the last accepted state; None: y0
        self.z: Tensor | None = None  # None: z is y0
        self.pending: tuple[Tensor, Tensor] | None = None  # (y1, z1) of the last step
        # An adaptive solve's controller, and the largest norm of |y - z| in its units at
        # an accepted step's end, kept on the device (read once, after the solve).
        self.controller: PIDController | None = None
        if solver.adaptive and isinstance(controller, PIDController):
            self.controller = controller
        self.drift: Tensor | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.solver, name)

    @property
    def adaptive(self) -> bool:
        return self.solver.adaptive

    def step(self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor) -> StepResult:
        z0 = y0 if self.z is None else self.z
        fz = f0 if self.z is None else f(t0, z0)  # f0 is f(t0, y0)
        forward = self.solver.step(f, t0, t1, z0, fz)
        y1 = torch.add(forward.y1, y0 - z0, alpha=self.coupling)
        f1 = f(t1, y1)
        z1 = z0 + (y1 - _psi(self.solver, f, t1, t0, y1, f1))
        self.pending = (y1, z1)
        return StepResult(y1=y1, y_err=forward.y_err, ks=(), f1=f1)

    def new_state(self) -> SolveState | None:
        return None

    def accepted(self, t: float, y: Tensor) -> None:
        if self.pending is not None and self.pending[0] is y:
            self.y, self.z = self.pending
            if self.controller is not None and y.numel():
                self._track_drift(self.controller)
        self.pending = None

    def _track_drift(self, c: PIDController) -> None:
        """Keep the largest norm of ``y - z`` so far, scaled and normed as ``c`` judges
        a step's error."""
        assert self.y is not None and self.z is not None
        y, z = self.y, self.z
        scaled = scaled_error(y - z, y.abs(), z.abs(), c.rtol, c.atol)
        drift = (c.norm or rms_norm)(scaled)
        self.drift = drift if self.drift is None else torch.maximum(self.drift, drift)

    def interpolate(
        self,
        f: Field,
        t0: float,
        t1: float,
        y0: Tensor,
        f0: Tensor,
        step: StepResult,
        ts: Sequence[float],
    ) -> list[Tensor]:
        for t in ts:  # the output times are stops: each is the step's end, to rounding
            if abs(t - t1) > 8 * _EPS * max(abs(t), abs(t1 - t0)):
                raise ConfigurationError(
                    f"`Reversible()` has no dense output: t = {t!r} lies inside the step "
                    f"({t0!r}, {t1!r}); its outputs are at step ends."
                )
        return [step.y1 for _ in ts]


@dataclass
class _Spec:
    """What the backward pass needs: the step ends (``ends[0]`` is ``t0``), the state
    index of each output, and the final pair ``(y_N, z_N)``."""

    loop: Loop
    problem: Problem
    stats: Stats
    coupling: float
    ends: list[float]
    where: list[int]
    n_params: int
    y_end: Tensor
    z_end: Tensor


class _ReversibleFunction(ReverseOnly):
    what = "The reversible method's gradient"

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, spec: _Spec, forward: Tensor, y0: Tensor, *params: Tensor
    ) -> Tensor:
        ctx.spec = spec
        ctx.kept = Kept((y0, *params))
        return forward.clone()

    @staticmethod
    def backward(ctx: Any, grad_ys: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        first_order("The reversible method's gradient")  # its steps' graphs are dropped
        spec: _Spec = ctx.spec
        p = spec.problem
        back = _Uncoupled(spec, ctx.kept.get()[1:], grad_ys)
        n = len(spec.ends) - 1
        if n:
            with as_solved(p.module, p.modes):  # the field's evaluations count once
                run = spec.loop(
                    _plain(p.f), spec.y_end, spec.ends[-1], p.t0, [p.t0], back, _Replay(), None,
                    step_ts=spec.ends[1:-1],
                )  # fmt: skip
            spec.stats.nfe_backward += run.stats.nfe
            rebuilt = run.ys[-1]
            if run.status != Status.SUCCESS or back.index != 0 or rebuilt is None:
                raise SolverError(
                    "the reversible backward pass did not retrace the forward steps: it "
                    f"stopped at t = {run.t_final!r} after {n - back.index} of {n} steps: "
                    f"{run.status}." + (f" {run.message}" if run.message else "")
                    + _UNSTABLE,
                    status=run.status,
                    t=run.t_final,
                )  # fmt: skip
            _check_rebuilt(p.y0.detach(), rebuilt, back.z, n)
        back.add_outputs(0)
        return (None, None, back.a_y + back.a_z, *back.grads)


_UNSTABLE = (
    " The coupled solve is unstable here: a coupling closer to 1 steadies the backward "
    "pass, one further from 1 (or smaller steps) the forward one; `Checkpoint()` has "
    "neither limit."
)


MAX_DRIFT = 100.0
"""How far apart, in units of an adaptive solve's tolerance (the controller's norm of the
error ratio), the two states ``y`` and ``z`` may drift at a step's end before the
solve raises. Both approximate the solution, so their distance is an error estimate
of ``y`` that the step's own estimate (that of the step from ``z``) does not see: a
decaying mode with ``h |a| > 1 - coupling`` makes it grow every step."""


def _check_drift(coupled: _Coupled, coupling: float) -> None:
    """Raise if the coupled states of an adaptive solve drifted apart by more than
    :data:`MAX_DRIFT` times the tolerance: ``y`` would miss it without a word."""
    if coupled.drift is None:
        return
    drift = float(coupled.drift)
    if not drift <= MAX_DRIFT:  # NaN fails too
        raise ConfigurationError(
            f"`Reversible(coupling={coupling!r})`: the coupled states y and z drifted "
            f"apart by {drift:.3g} times the tolerance (at most {MAX_DRIFT:g}), so the "
            "solution is not within the tolerance asked for." + _UNSTABLE
        )


def _check_rebuilt(y0: Tensor, y: Tensor, z: Tensor, n: int) -> None:
    """Raise if the backward pass rebuilt ``(y0, y0)`` no better than the cube root of
    the dtype's resolution: the gradient would be wrong without a word."""
    off = beyond_rounding(y0, y, z)
    if off is not None:
        error, tol = off
        raise ConfigurationError(
            f"`Reversible(coupling=...)`: the backward pass rebuilt y0 after {n} steps with "
            f"an error of {error:.3g}, above {tol:.3g} (the cube root of {y0.dtype}'s "
            "resolution), so its gradient cannot be trusted." + _UNSTABLE
        )


def _plain(f: FlatField) -> FlatField:
    """``f`` without its attributes: the backward loop calls no step callback."""
    return lambda t, y: f(t, y)


class _Uncoupled(AbstractSolver):
    """The backward pass as a solver that the loop steps backward over the forward
    step ends: each step rebuilds ``(y_n, z_n)`` from ``(y_{n+1}, z_{n+1})`` (the loop
    carries ``y``; ``z`` and the adjoints live here) and backpropagates through it.

    The loop integrates in the reversed time, so the solver's ``t0`` is ``t_{n+1}``
    and its ``t1`` is ``t_n``: the step from ``(t0, y)`` to ``t1`` is the forward
    step's ``Psi_{-h}`` and the step back from ``(t1, z)`` its ``Psi_h``.
    """

    def __init__(self, spec: _Spec, params: tuple[Tensor, ...], grad_ys: Tensor) -> None:
        self.solver = spec.problem.solver
        self.coupling = spec.coupling
        self.params = params
        self.grad_ys = grad_ys
        self.where = spec.where
        self.index = len(spec.ends) - 1
        self.z = spec.z_end
        self.a_y = torch.zeros_like(spec.y_end)
        self.a_z = torch.zeros_like(spec.y_end)
        self.grads: list[Tensor | None] = [None] * len(params)

    @property
    def adaptive(self) -> bool:
        return False

    def init(self, f: Field, t0: float, y0: Tensor) -> Tensor:
        return y0  # unused: every step evaluates what it needs, with a graph

    def add_outputs(self, index: int) -> None:
        """Add the gradients of the outputs at the state ``index`` to ``y``'s adjoint."""
        for i, k in enumerate(self.where):
            if k == index:
                self.a_y = self.a_y + self.grad_ys[i]

    def _accumulate(self, grads: Sequence[Tensor | None]) -> None:
        for j, g in enumerate(grads):
            previous = self.grads[j]
            if g is not None:
                self.grads[j] = g if previous is None else previous + g

    def step(self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor) -> StepResult:
        self.add_outputs(self.index)
        lam, params = self.coupling, self.params
        with torch.enable_grad():
            # z_n = z_{n+1} + Psi_{-h}(t_{n+1}, y_{n+1}), and its vector-Jacobian product.
            y1 = y0.detach().requires_grad_(True)
            back = _psi(self.solver, f, t0, t1, y1, f(t0, y1))
            grads = torch.autograd.grad(
                back, (y1, *params), -self.a_z, allow_unused=True, retain_graph=bool(params)
            )
            z = (self.z + (back.detach() - y0)).requires_grad_(True)
            # y_n = z_n + (y_{n+1} - z_n - Psi_h(t_n, z_n)) / λ
            forward = _psi(self.solver, f, t1, t0, z, f(t1, z))
            # The adjoint of y_{n+1}, through y and through z_{n+1} = z_n + y - Psi(y).
            a_y1 = self.a_y + self.a_z + (grads[0] if grads[0] is not None else 0.0)
            more = torch.autograd.grad(
                forward, (z, *params), a_y1, allow_unused=True, retain_graph=bool(params)
            )
        self._accumulate(grads[1:])
        self._accumulate(more[1:])
        y = torch.add(z.detach(), y0 - forward.detach(), alpha=1.0 / lam)
        a_z = self.a_z - lam * a_y1 + (more[0] if more[0] is not None else 0.0)
        self.a_y, self.a_z, self.z = lam * a_y1, a_z, z.detach()
        self.index -= 1
        return StepResult(y1=y, y_err=None, ks=(), f1=None)

    def interpolate(
        self,
        f: Field,
        t0: float,
        t1: float,
        y0: Tensor,
        f0: Tensor,
        step: StepResult,
        ts: Sequence[float],
    ) -> list[Tensor]:
        return [step.y1 for _ in ts]

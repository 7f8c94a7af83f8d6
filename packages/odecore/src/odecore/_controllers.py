"""Step-size controllers: which step to try next, and whether to accept the last one."""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, final

import torch
from torch import Tensor

from ._errors import ConfigurationError
from ._solvers import AbstractSolver, Field, StepResult

Norm = Callable[[Any], Tensor]
"""Maps the scaled error ``y_err / (atol + rtol * max(|y0|, |y1|))`` to a 0-dim tensor.

It receives a tensor, or for a tuple state a tuple of tensors shaped like the state.
"""

_EPS = 2.220446049250313e-16  # float64 machine epsilon: times are Python floats
SNAP = 1e-7
"""A step that ends within ``SNAP * dt`` of a stop lands on it (the solve loops' rule,
shared and per-sample)."""


RTOL = 1e-7
"""The default relative tolerance of adaptive solves (torchdiffeq's)."""
ATOL = 1e-9
"""The default absolute tolerance of adaptive solves (torchdiffeq's)."""


def rms_norm(x: Tensor) -> Tensor:
    """Root mean square over every element: the default error norm.

    Example:
        >>> import torch
        >>> rms_norm(torch.tensor([3.0, 4.0, 0.0, 0.0]))
        tensor(2.5000)
    """
    if x.numel() == 0:
        return x.new_zeros(())
    norm: Tensor = torch.linalg.vector_norm(x)
    return norm / math.sqrt(x.numel())


def scaled_error(
    err: Tensor, abs_y0: Tensor, abs_y1: Tensor, rtol: Tensor | float, atol: Tensor | float
) -> Tensor:
    """``err / (atol + rtol * max(|y0|, |y1|))``, a new tensor; a half-precision one in
    float32, where ``atol`` cannot round to zero nor the quotient overflow (65504)."""
    if err.dtype in (torch.float16, torch.bfloat16):
        err, abs_y0, abs_y1 = err.float(), abs_y0.float(), abs_y1.float()
    scale = torch.maximum(abs_y0, abs_y1).mul_(rtol).add_(atol)
    return torch.div(err, scale, out=scale)


def _no_graph(x: Tensor) -> Tensor:
    """``x.detach()``, or ``x`` itself when it carries no graph (saves a dispatch)."""
    return x.detach() if x.requires_grad else x


def _tolerance(value: float, like: Tensor) -> Tensor:
    """``value`` as a 0-dim CPU tensor for the arithmetic on ``like``.

    A Python number in ``x.mul_(rtol)`` is wrapped and converted on every call;
    this tensor is made once per solve. It is float32 for half-precision ``like``
    (float64 for float64), so the kernels read the same value as from the number,
    and the scale comes out bit for bit the same.
    """
    return torch.tensor(value, dtype=torch.promote_types(like.dtype, torch.float32))


class Adaptation(NamedTuple):
    """A controller's verdict on one step.

    Attributes:
        accept: whether the step is kept.
        dt: the step size to try next (from the end of an accepted step, or again
            from its start after a rejection).
        state: the controller's state to pass to the next call.
        finite: ``False`` when the step produced a non-finite state or error.
    """

    accept: bool
    dt: float
    state: Any
    finite: bool = True


class AbstractController(abc.ABC):
    """Chooses step sizes. ``init`` picks the first, ``adapt`` judges each step.

    Attributes:
        stretch: a step that would end short of the next stop (``t1``, a jump or a
            step time) by at most ``stretch`` times its size is stretched to end on
            the stop, unless it retries a rejected step. 0 here: the solve takes the
            proposed steps as they are, apart from rounding.
    """

    stretch: float = 0.0

    @abc.abstractmethod
    def init(
        self,
        f: Field,
        t0: float,
        t1: float,
        y0: Tensor,
        f0: Tensor,
        solver: AbstractSolver,
        dt0: float | None,
    ) -> tuple[float, Any]:
        """Return the first step size to try and the controller's initial state."""

    @abc.abstractmethod
    def adapt(
        self,
        t0: float,
        t1: float,
        y0: Tensor,
        step: StepResult,
        solver: AbstractSolver,
        state: Any,
    ) -> Adaptation:
        """Judge the step from ``t0`` to ``t1`` and propose the next step size."""


@final
@dataclass(frozen=True)
class ConstantStepSize(AbstractController):
    """Fixed steps of size ``dt0`` (the last one before each stop may be shorter).

    The solve must be given ``dt0``; :func:`odecore.odeint` computes it from its
    ``step_size`` or ``n_steps`` option.

    Example:
        >>> import torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1), t0=0.0, t1=1.0,
        ...                     solver=odecore.RK4(), controller=odecore.ConstantStepSize(),
        ...                     dt0=0.25)
        >>> sol.stats.n_accepted
        4
    """

    def init(
        self,
        f: Field,
        t0: float,
        t1: float,
        y0: Tensor,
        f0: Tensor,
        solver: AbstractSolver,
        dt0: float | None,
    ) -> tuple[float, Any]:
        if dt0 is None:
            raise ConfigurationError(
                "`ConstantStepSize()` needs a step size: pass `dt0=` to solve() (or the "
                "`step_size` / `n_steps` option to odeint)."
            )
        return dt0, dt0

    def adapt(
        self,
        t0: float,
        t1: float,
        y0: Tensor,
        step: StepResult,
        solver: AbstractSolver,
        state: Any,
    ) -> Adaptation:
        return Adaptation(accept=True, dt=state, state=state)


@final
@dataclass(frozen=True)
class PIDController(AbstractController):
    """Adaptive step sizes from the embedded error estimate, with PI(D) control.

    The error ratio of a step is ``norm(y_err / (atol + rtol * max(|y0|, |y1|)))``;
    a step is accepted when it is at most 1. The next step is
    ``dt * safety * r_n**(-(pcoeff + icoeff + dcoeff) / k) * r_{n-1}**((pcoeff + 2 dcoeff) / k)
    * r_{n-2}**(-dcoeff / k)`` with ``k`` the solver's order, clipped to
    ``[factor_min, factor_max] * dt``; after a rejection the step never grows.
    The defaults ``pcoeff=0.1, icoeff=0.9`` keep the integral controller's
    exponent ``1/k`` on the current ratio and add a small proportional term
    (exponent 0.02 on the previous ratio for order 5) that damps oscillating step
    sequences. Hairer's PI controller of DOPRI5, ``pcoeff=0.2, icoeff=0.65``
    (exponents 0.17 and 0.04), grows steps more cautiously: on the short solves of
    neural ODEs (a handful of steps) it costs up to 30% more evaluations for the
    same tolerance. ``pcoeff=0, icoeff=1`` is the classic integral controller that
    torchdiffeq uses.

    The first step, unless given, is chosen by Hairer's rule from ``f(t0, y0)`` and
    one more evaluation.

    A step that would end short of a stop (``t1``, a jump or a step time) by at most
    ``stretch`` times its size ends on the stop instead, as in MATLAB's ``ode45``
    (Shampine and Reichelt 1997): a sliver of a step costs as many evaluations as a
    full one. The stretched step is judged like any other; a rejected step's retry
    is never stretched, so the retries shrink. On long solves it rarely matters: over
    five test problems at eight tolerances, ``stretch=0.1`` saved a step in 4 of the
    40 solves, cost one in none, and left the error at ``t1`` where it was. On a solve
    of three or four steps, one saved step is a quarter of the cost.

    Args:
        rtol: relative tolerance, positive.
        atol: absolute tolerance, positive.
        pcoeff: proportional coefficient.
        icoeff: integral coefficient.
        dcoeff: derivative coefficient.
        safety: factor applied to every proposal, in ``(0, 1]``.
        factor_min: the largest shrink of one step, in ``(0, 1)``.
        factor_max: the largest growth of one step, ``> 1``.
        dt_max: an upper bound on the step size (a step stretched onto a stop may
            exceed it by the fraction ``stretch``).
        dt_min: a lower bound on the step size, torchdiffeq's ``min_step``: every
            proposed step is at least ``dt_min``, and a step of at most ``dt_min``
            (proposed, or shortened to end on a stop) is accepted whatever its error,
            so the error is no longer controlled there. A step whose error is not
            finite is still rejected, and at ``dt_min`` it fails the solve
            (``Status.NONFINITE``). 0 (the default): no bound.
        stretch: how far a step may be stretched to end on a stop, as a fraction of
            its size, in ``[0, 1)``; 0 never stretches.
        norm: the error norm, a function of the scaled error tensor to a scalar;
            default :func:`odecore.rms_norm` over the whole state (the batch is one
            system with one step size).
        per_sample: give each sample of a batch ``(batch, *state)`` its own time,
            step size, acceptance and controller state (the error norm is the RMS
            over each sample's elements), for a batch of independent systems: a
            sample's steps are then those it would take alone. Finished samples are
            frozen at ``t1`` and the solve ends when every sample is done; a
            sample that fails (a step size underflow, a non-finite step) is frozen
            where it stopped, its outputs after it NaN, while the others go on
            (``Solution.message`` names the failed samples of each status). The
            field then receives ``t`` as a ``(batch,)`` tensor, each sample's own
            time (an autonomous field need not care). Off by default: the batch is
            one system. Needs a solver that keeps samples apart
            (``Rodas4`` or ``Rodas5P`` with ``independent=True``, or an explicit
            embedded pair), backpropagation
            (:class:`~odecore.Autograd`), a tensor state of at least two dimensions,
            and no ``norm``, ``event``, ``jump_ts``, ``step_ts``,
            ``SaveAt(dense=True)``, output times that require grad or step
            callbacks on the field (``callback_step``, ...);
            :func:`~odecore.solve` refuses the rest at its start. Output times
            (``SaveAt(ts=...)``) are read per sample off the dense output of the
            sample's own step that holds them.
            ``Solution.n_accepted_per_sample`` and ``n_rejected_per_sample`` count
            each sample's steps.

    Raises:
        ValueError: if a tolerance, factor or step bound is out of range, or ``norm``
            is not a function.

    Example:
        >>> import torch, odecore
        >>> c = odecore.PIDController(rtol=1e-6, atol=1e-8)
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(3), t0=0.0, t1=2.0,
        ...                     solver=odecore.Dopri5(), controller=c)
        >>> sol.stats.n_accepted > 0
        True
    """

    rtol: float = RTOL
    atol: float = ATOL
    pcoeff: float = 0.1
    icoeff: float = 0.9
    dcoeff: float = 0.0
    safety: float = 0.9
    factor_min: float = 0.2
    factor_max: float = 10.0
    dt_max: float = math.inf
    dt_min: float = 0.0
    stretch: float = 0.1
    norm: Norm | None = None
    per_sample: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.per_sample, bool):
            raise ConfigurationError(
                f"`per_sample` must be True or False, got {self.per_sample!r}."
            )
        if self.norm is not None and not callable(self.norm):
            raise ConfigurationError(
                f"`norm` must be a function of the scaled error, such as odecore.rms_norm, "
                f"or None, got {self.norm!r}."
            )
        if self.per_sample and self.norm is not None:
            raise ConfigurationError(
                "`per_sample=True` measures each sample's error by its own RMS norm and "
                "cannot use a `norm`; drop `norm=` or `per_sample=True`."
            )
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigurationError(f"`{name}` must be a positive number, got {value!r}.")
        if not 0 < self.safety <= 1:
            raise ConfigurationError(f"`safety` must be in (0, 1], got {self.safety!r}.")
        if not 0 < self.factor_min < 1:
            raise ConfigurationError(f"`factor_min` must be in (0, 1), got {self.factor_min!r}.")
        if not self.factor_max > 1:
            raise ConfigurationError(f"`factor_max` must be > 1, got {self.factor_max!r}.")
        if not 0 <= self.stretch < 1:
            raise ConfigurationError(f"`stretch` must be in [0, 1), got {self.stretch!r}.")
        if not self.dt_max > 0:
            raise ConfigurationError(f"`dt_max` must be positive, got {self.dt_max!r}.")
        if (
            isinstance(self.dt_min, bool)
            or not isinstance(self.dt_min, (int, float))
            or not (math.isfinite(self.dt_min) and self.dt_min >= 0)
        ):
            raise ConfigurationError(
                f"`dt_min` must be a finite number >= 0, got {self.dt_min!r}; use 0 for no "
                "lower bound on the step size."
            )
        if self.dt_min > self.dt_max:
            raise ConfigurationError(
                f"`dt_min` ({self.dt_min!r}) must not exceed `dt_max` ({self.dt_max!r}); lower "
                "`dt_min` or raise `dt_max`."
            )
        if self.icoeff + self.pcoeff + self.dcoeff <= 0:
            raise ConfigurationError(
                "`pcoeff + icoeff + dcoeff` must be positive, got "
                f"{self.pcoeff + self.icoeff + self.dcoeff!r}."
            )

    def _norm(self, scaled: Tensor) -> float:
        """The error norm of ``scaled`` as a float (the RMS norm divides on the host)."""
        if self.norm is None:
            n = scaled.numel()
            return float(torch.linalg.vector_norm(scaled)) / math.sqrt(n) if n else 0.0
        return float(self.norm(scaled))

    def _ratio(
        self, y_err: Tensor, abs_y0: Tensor, abs_y1: Tensor, tols: tuple[Tensor, Tensor]
    ) -> float:
        """The error ratio; ``y_err`` holds no graph, the arguments are not changed.

        ``tols`` is ``(rtol, atol)`` as made by :func:`_tolerance`. A half-precision
        state's ratio is computed in float32: in float16 ``atol`` can round to zero
        and ``y_err / scale`` overflow (65504) long before the step is bad, which
        reads as a non-finite step.
        """
        return self._norm(scaled_error(y_err, abs_y0, abs_y1, *tols))

    def init(
        self,
        f: Field,
        t0: float,
        t1: float,
        y0: Tensor,
        f0: Tensor,
        solver: AbstractSolver,
        dt0: float | None,
    ) -> tuple[float, Any]:
        if not solver.adaptive:
            raise ConfigurationError(
                f"`{type(solver).__name__}()` has no error estimate, so `PIDController` "
                "cannot adapt its steps; use `ConstantStepSize()` with `dt0`, or an "
                "embedded pair such as `Dopri5()`."
            )
        # The previous two error ratios, |y| of the last state measured (the start of
        # the next step is the end of the last accepted one, or its start again), and
        # the tolerances as tensors.
        abs_y0 = _no_graph(y0).abs()
        tols = (_tolerance(self.rtol, abs_y0), _tolerance(self.atol, abs_y0))
        state = (1.0, 1.0, y0, abs_y0, tols)
        if dt0 is not None:
            return self._clamp(dt0), state
        with torch.no_grad():
            # Half-precision states are measured in float32: their scaled values can
            # overflow 65504 (float16), or a small atol round to a subnormal.
            wide = torch.promote_types(y0.dtype, torch.float32)
            y0, f0 = y0.to(wide), f0.to(wide)
            scale = abs_y0.to(wide).mul(tols[0]).add_(tols[1])  # abs_y0 is kept: no in-place
            if self.norm is None and y0.numel():
                # Both RMS norms in one reduction and one host sync.
                scaled = torch.stack((y0, f0)).div_(scale).reshape(2, -1)
                root = math.sqrt(y0.numel())
                d0, d1 = (v / root for v in torch.linalg.vector_norm(scaled, dim=1).tolist())
            else:
                d0 = self._norm(torch.div(y0, scale))
                d1 = self._norm(torch.div(f0, scale))
            h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 or not math.isfinite(d0 / d1) else 0.01 * d0 / d1
            h0 = min(h0, abs(t1 - t0))
            if not h0 > 0:  # an infinite derivative
                return self._clamp(1e-6), state
            f1 = f(t0 + h0, (y0 + h0 * f0).to(abs_y0.dtype)).to(wide)
            d2 = self._norm(torch.sub(f1, f0).div_(scale)) / h0
        if not math.isfinite(d2):
            return self._clamp(h0), state
        if max(d1, d2) <= 1e-15:
            h1 = max(1e-6, h0 * 1e-3)
        else:
            # Hairer's code, SciPy and torchdiffeq take the root of the embedded
            # estimate's order plus one (1/5 for dopri5). With the solver's order plus
            # one, the benchmark's conv-ReLU field at 1e-6 takes 50 evaluations instead
            # of 56; Van der Pol moves by up to 5% either way, the rest not at all.
            h1 = (0.01 / max(d1, d2)) ** (1.0 / (solver.order + 1))
        return self._clamp(min(100 * h0, h1)), state

    def _clamp(self, dt: float) -> float:
        """``dt`` within ``[dt_min, dt_max]``."""
        return min(max(dt, self.dt_min), self.dt_max)

    def _at_dt_min(self, t0: float, t1: float) -> bool:
        """Whether the step from ``t0`` to ``t1`` is at most ``dt_min``, up to the
        rounding of ``t0 + dt``."""
        if self.dt_min <= 0:
            return False
        return t1 - t0 <= self.dt_min + 4 * _EPS * max(abs(t0), abs(t1))

    def adapt(
        self,
        t0: float,
        t1: float,
        y0: Tensor,
        step: StepResult,
        solver: AbstractSolver,
        state: Any,
    ) -> Adaptation:
        if step.y_err is None:
            raise ConfigurationError(
                f"`{type(solver).__name__}()` returned no error estimate; PIDController "
                "needs an embedded pair."
            )
        dt = t1 - t0
        prev1, prev2, last_y, last_abs, tols = state
        abs_y0 = last_abs if y0 is last_y else _no_graph(y0).abs()
        abs_y1 = _no_graph(step.y1).abs()
        ratio = self._ratio(step.y_err, abs_y0, abs_y1, tols)
        if not math.isfinite(ratio):
            # At dt_min a retry would take the same step again: a zero step fails the solve.
            dt_retry = 0.0 if self._at_dt_min(t0, t1) else max(dt * self.factor_min, self.dt_min)
            return Adaptation(accept=False, dt=dt_retry, state=state, finite=False)
        k = solver.order
        r = max(ratio, 1e-10)
        factor = (
            self.safety
            * r ** (-(self.pcoeff + self.icoeff + self.dcoeff) / k)
            * prev1 ** ((self.pcoeff + 2 * self.dcoeff) / k)
            * prev2 ** (-self.dcoeff / k)
        )
        accept = ratio <= 1.0 or self._at_dt_min(t0, t1)
        factor = min(max(factor, self.factor_min), self.factor_max if accept else 1.0)
        dt_next = self._clamp(dt * factor)
        if accept:
            new_state = (max(ratio, 1e-4), prev1, step.y1, abs_y1, tols)
        else:
            new_state = (prev1, prev2, y0, abs_y0, tols)
        return Adaptation(accept=accept, dt=dt_next, state=new_state)


# --- per-sample control (PIDController(per_sample=True)) ------------------------------


class RowAdaptation(NamedTuple):
    """:class:`Adaptation` per sample: ``accept``, ``dt`` and ``finite`` are ``(batch,)``."""

    accept: Tensor
    dt: Tensor
    state: tuple[Tensor, Tensor]
    finite: Tensor


def _row_rms(x: Tensor) -> Tensor:
    """The RMS of each sample (row) of ``x``, ``(batch,)`` in float64."""
    flat = x.reshape(x.shape[0], -1).to(torch.float64)
    if flat.shape[1] == 0:
        return flat.new_zeros(flat.shape[0])
    norm: Tensor = torch.linalg.vector_norm(flat, dim=1)
    return norm / math.sqrt(flat.shape[1])


def _row_scale(c: PIDController, y0: Tensor, y1: Tensor | None = None, tols: Any = None) -> Tensor:
    """``atol + rtol * max(|y0|, |y1|)`` without a graph; ``tols``: ``(rtol, atol)`` in
    place of the controller's (tensors, in a compiled loop). A half-precision state's
    scale is float32, as :func:`scaled_error`'s: in float16 ``atol`` can round to a
    subnormal and the quotients by the scale overflow (65504), which reads as a
    non-finite step; dividing by it promotes the quotient to float32."""
    big = _no_graph(y0).abs()
    if y1 is not None:
        big = torch.maximum(big, _no_graph(y1).abs())
    if big.dtype in (torch.float16, torch.bfloat16):
        big = big.float()
    rtol, atol = (c.rtol, c.atol) if tols is None else tols
    return big * rtol + atol


def row_init(
    c: PIDController,
    f_after: Callable[[Tensor, Tensor], Tensor],
    span: float,
    y0: Tensor,
    f0: Tensor,
    solver: AbstractSolver,
    dt0: float | None,
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """Hairer's first step, per sample, as :meth:`PIDController.init` takes it for
    one system; ``f_after(dt, y)`` is the field at ``t0 + dt``, ``dt`` ``(batch,)``."""
    if not solver.adaptive:
        c.init(lambda t, y: y, 0.0, span, y0, f0, solver, dt0)  # its error names the fix
    batch = y0.shape[0]
    ones = torch.ones(batch, dtype=torch.float64, device=y0.device)
    state = (ones, ones)
    if dt0 is not None:
        return torch.full_like(ones, c._clamp(dt0)), state
    with torch.no_grad():
        scale = _row_scale(c, y0)
        d0, d1 = _row_rms(y0 / scale), _row_rms(f0 / scale)
        small = (d0 < 1e-5) | (d1 < 1e-5) | ~torch.isfinite(d0 / d1)
        h0 = torch.where(small, 1e-6, 0.01 * d0 / d1).clamp(max=span)
        h0 = torch.where(h0 > 0, h0, 1e-6)
        view = (batch,) + (1,) * (y0.dim() - 1)
        f1 = f_after(h0, y0 + h0.view(view).to(y0.dtype) * f0)
        d2 = _row_rms((f1 - f0) / scale) / h0
        big = torch.maximum(d1, d2)
        h1 = torch.where(
            big <= 1e-15,
            torch.clamp(h0 * 1e-3, min=1e-6),
            (0.01 / big) ** (1.0 / (solver.order + 1)),
        )
        dt = torch.where(torch.isfinite(d2), torch.minimum(100 * h0, h1), h0)
    return dt.clamp(min=c.dt_min, max=c.dt_max), state


def row_adapt(
    c: PIDController,
    h: Tensor,
    y0: Tensor,
    step: StepResult,
    solver: AbstractSolver,
    state: tuple[Tensor, Tensor],
    tols: Any = None,
) -> RowAdaptation:
    """:meth:`PIDController.adapt` per sample, for steps of sizes ``h`` ``(batch,)``;
    ``tols`` as :func:`_row_scale` takes them."""
    if step.y_err is None:
        c.adapt(0.0, 1.0, y0, step, solver, None)  # its error names the fix
    assert step.y_err is not None
    prev1, prev2 = state
    ratio = _row_rms(step.y_err / _row_scale(c, y0, step.y1, tols))
    finite = torch.isfinite(ratio)
    k = solver.order
    r = torch.where(finite, ratio, 1.0).clamp(min=1e-10)
    factor = (
        c.safety
        * r ** (-(c.pcoeff + c.icoeff + c.dcoeff) / k)
        * prev1 ** ((c.pcoeff + 2 * c.dcoeff) / k)
        * prev2 ** (-c.dcoeff / k)
    )
    at_min = (h <= c.dt_min + 4 * _EPS * h.abs()) if c.dt_min > 0 else torch.zeros_like(finite)
    accept = finite & ((ratio <= 1.0) | at_min)
    factor = torch.minimum(factor.clamp(min=c.factor_min), torch.where(accept, c.factor_max, 1.0))
    dt = (h * factor).clamp(min=c.dt_min, max=c.dt_max)
    retry = torch.where(at_min, 0.0, (h * c.factor_min).clamp(min=c.dt_min))
    dt = torch.where(finite, dt, retry)
    new_prev1 = torch.where(accept, ratio.clamp(min=1e-4), prev1)
    new_prev2 = torch.where(accept, prev1, prev2)
    return RowAdaptation(accept=accept, dt=dt, state=(new_prev1, new_prev2), finite=finite)

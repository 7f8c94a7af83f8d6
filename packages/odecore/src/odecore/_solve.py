"""``solve``: the one entry point that runs a solver, a controller and a SaveAt."""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import math
import numbers
import operator
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor

from ._controllers import (
    _EPS,
    SNAP,
    AbstractController,
    Adaptation,
    ConstantStepSize,
    PIDController,
    _no_graph,
    rms_norm,
)
from ._errors import ConfigurationError, SolverError, Status, first_order
from ._events import CALLBACKS, Event, StepHooks, copy_callbacks, run_event, step_hooks
from ._gradients import (
    AbstractGradient,
    Adjoint,
    AugmentedNorm,
    Autograd,
    FlatField,
    Loop,
    LoopResult,
    Problem,
    Stats,
    TimeTensors,
    modes_pinned,
    takes_jacobian,
)
from ._per_sample import PerSampleLoop, check_per_sample, per_sample
from ._solvers import AbstractSolver, SolveState, StepResult
from ._transforms import (
    AUTOGRAD_ONLY,
    ReverseOnly,
    check_no_tangent,
    check_transforms,
)
from ._transforms import (
    apply as reverse_only,
)

State = Tensor | tuple[Tensor, ...]
VectorField = Callable[[Tensor, State], State]
"""The user's vector field ``f(t, y)``: ``t`` a 0-dim tensor, ``y`` like ``y0``."""

Times = Sequence[float] | Tensor


def _as_floats(name: str, value: Times | None) -> list[float]:
    if value is None:
        return []
    if isinstance(value, Tensor):
        if value.dim() > 1:
            raise ConfigurationError(f"`{name}` must be 1-D, got shape {tuple(value.shape)}.")
        values = value.detach().reshape(-1).tolist()
    else:
        value = list(value)
        for i, v in enumerate(value):
            if isinstance(v, Tensor) and v.requires_grad and torch.is_grad_enabled():
                raise ConfigurationError(
                    f"`{name}[{i}]` is a tensor that requires grad, but a sequence of times "
                    "is read as numbers: no gradient would reach it. Pass the times as one "
                    f"tensor (`torch.stack`) to differentiate them, or detach them."
                )
        values = [float(v) for v in value]
    if not all(math.isfinite(v) for v in values):
        raise ConfigurationError(f"`{name}` must hold finite times, got {values}.")
    return [float(v) for v in values]


@dataclass(frozen=True)
class SaveAt:
    """Which times a solve returns.

    Args:
        ts: output times, monotone in the direction of integration and within
            ``[t0, t1]``. Values between step ends come from the solver's dense
            output, not from extra steps.
        t1: also return the state at the end time (ignored when ``ts`` is given
            and already ends there).
        dense: keep every accepted step, so that :meth:`Solution.evaluate` gives
            the solution at any time of the span from the solver's dense output
            (memory grows with the steps; backpropagation only).

    Raises:
        ValueError: if nothing is asked for.

    Example:
        >>> import torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1), t0=0.0, t1=1.0,
        ...                     solver=odecore.Tsit5(),
        ...                     saveat=odecore.SaveAt(ts=[0.0, 0.5, 1.0]))
        >>> sol.ys.shape
        torch.Size([3, 1])
    """

    ts: Times | None = None
    t1: bool = False
    dense: bool = False

    def __post_init__(self) -> None:
        if self.ts is None and not self.t1 and not self.dense:
            raise ConfigurationError(
                "`SaveAt()` saves nothing; pass `ts=`, `t1=True` or `dense=True`."
            )


@dataclass
class Solution:
    """The result of :func:`solve`.

    Attributes:
        ts: the output times, a 1-D tensor in the time dtype.
        ys: the states at ``ts`` stacked on a new first dimension (a tuple of such
            tensors for a tuple state). After a failure with ``throw=False`` the
            times not reached hold NaN.
        stats: function evaluations and step counts.
        status: :class:`Status` of the solve; ``Status.SUCCESS`` (0) when it reached ``t1``.
        t_final: the last time reached (the event time after an event).
        event_t: with an :class:`Event`, the time it happened, a 0-dim tensor in the
            time dtype whose gradient is the event time's (implicit function
            theorem); ``None`` when the solve reached ``t1`` first or had no event.
        message: empty when the solve reached ``t1``; after a failure with
            ``throw=False``, the text of the :class:`SolverError` that ``throw=True``
            raises: where the solve stopped, the status's sentence and the failure's
            own account (an implicit method's step size and reason, a backend's
            message).
        n_accepted_per_sample: with ``PIDController(per_sample=True)``, each
            sample's accepted steps, an int64 tensor ``(batch,)``; else ``None``.
            ``stats`` then counts the batch steps: ``n_steps`` the steps of the loop
            (each a step of every unfinished sample), ``n_accepted`` those in which
            some sample kept its step and ``n_rejected`` the others.
        n_rejected_per_sample: likewise, each sample's rejected steps.
    """

    ts: Tensor
    ys: State
    stats: Stats = field(default_factory=Stats)
    status: Status = Status.SUCCESS
    t_final: float = math.nan
    event_t: Tensor | None = None
    message: str = ""
    dense: _Dense | None = field(default=None, repr=False)
    n_accepted_per_sample: Tensor | None = None
    n_rejected_per_sample: Tensor | None = None

    def evaluate(self, t: float | Tensor) -> State:
        """The solution at ``t`` (a number or a 0-dim or 1-D tensor of times) from the
        solver's dense output, as accurate as at the step ends; ``t`` must lie between
        the start time and ``t_final``. Needs ``SaveAt(dense=True)``. A ``t`` that
        requires grad gets the exact derivative of the dense output; where output
        times that require grad move the steps (the start, the end), the value at a
        fixed ``t`` moves with them. A dense output that evaluates the field (an
        ``nn.Module``) does so in the training mode each of its submodules had in
        the solve, whatever it is now.

        Raises:
            ConfigurationError: without ``SaveAt(dense=True)``, for a time outside
                the span solved or a tensor of times of more than one dimension,
                or where the solver's dense output evaluates the
                field (a sub-step, slopes) and the field, an ``nn.Module``, holds
                other parameters or buffers than after the solve, or ones changed in
                place (an optimiser step). A field that is not a module is evaluated
                as it is at the call.

        Example:
            >>> import math, torch, odecore
            >>> sol = odecore.solve(lambda t, y: -y, torch.ones(1, dtype=torch.float64),
            ...                     t0=0.0, t1=2.0, solver=odecore.Dopri5(),
            ...                     saveat=odecore.SaveAt(dense=True))
            >>> abs(sol.evaluate(1.3).item() - math.exp(-1.3)) < 1e-7
            True
        """
        if self.dense is None:
            raise ConfigurationError(
                "`Solution.evaluate` needs the steps: solve with `saveat=SaveAt(dense=True)`."
            )
        if isinstance(t, Tensor) and t.dim() > 1:
            raise ConfigurationError(
                "`Solution.evaluate` takes a number or a 0-dim or 1-D tensor of times, got "
                f"a tensor of shape {tuple(t.shape)}."
            )
        if isinstance(t, Tensor) and t.dim() == 1 and t.numel() == 0:  # no time: no row
            assert self.dense.y0 is not None
            like = self.dense.y0 if self.dense.unpack is None else self.dense.unpack(self.dense.y0)
            if isinstance(like, Tensor):
                return like.new_empty((0, *like.shape))
            return tuple(x.new_empty((0, *x.shape)) for x in like)
        if isinstance(t, Tensor) and t.dim() == 1:
            flat = torch.stack([self.dense(x) for x in t.unbind()])
            return flat if self.dense.unpack is None else _split(flat, self.dense.unpack)
        value = self.dense(t)
        return value if self.dense.unpack is None else self.dense.unpack(value)


class _Field:
    """The vector field as a solver sees it: float time that increases, flat state.

    Counts evaluations, maps reversed time back, checks the shape of what ``f``
    returns, and evaluates one-sided limits at jump times.
    """

    def __init__(self, f: FlatField, direction: float, y0: Tensor) -> None:
        self.f = f
        self.direction = direction
        self.time_dtype = y0.dtype
        self.device = y0.device
        self.shape = y0.shape
        self.nfe = 0
        self.left_limit_at: float | None = None  # the step ends on a jump here
        self.right_limit_at: float | None = None  # the step starts on a jump here
        self.jumps: Collection[float] = ()  # the times where the field jumps
        self.clock: _Clock | None = None  # differentiable times, when a time needs a gradient

    @contextlib.contextmanager
    def inside(self, s0: float, s1: float) -> Iterator[None]:
        """Evaluate as inside the step from ``s0`` to ``s1``, with the one-sided limits
        at its ends that are jumps: for reading a step's dense output after the solve,
        whose last step left its own limits set."""
        kept = self.left_limit_at, self.right_limit_at
        self.left_limit_at = s1 if s1 in self.jumps else None
        self.right_limit_at = s0 if s0 in self.jumps else None
        try:
            yield
        finally:
            self.left_limit_at, self.right_limit_at = kept

    def time(self, t: float) -> Tensor:
        tt = torch.scalar_tensor(self.direction * t, dtype=self.time_dtype, device=self.device)
        if t == self.left_limit_at:
            tt = torch.nextafter(tt, torch.full_like(tt, -self.direction * math.inf))
        elif t == self.right_limit_at:
            tt = torch.nextafter(tt, torch.full_like(tt, self.direction * math.inf))
        return tt

    def __call__(self, t: float, y: Tensor) -> Tensor:
        self.nfe += 1
        # A stage time past a jump that ends the step (Kvaerno5's c = 1.23) sees the
        # limit before the jump too, not the field after it; likewise before the start.
        if self.left_limit_at is not None and t > self.left_limit_at:
            t = self.left_limit_at
        elif self.right_limit_at is not None and t < self.right_limit_at:
            t = self.right_limit_at
        tt, scale = self.time(t), None
        if self.clock is not None:  # the time, and inside a step its size, as tensors
            shift, scale = self.clock.at(t)
            if shift is not None:
                tt = tt + (self.direction * shift).to(tt.dtype)
        out = self.f(tt, y)
        # Every result, not the first only: a field may branch on ``t`` (or ``y``), and a
        # later result in float32 would be promoted silently, one of shape (1,) broadcast.
        if _check_derivative(out, self.shape, self.time_dtype, self.device):
            out = out.to(self.time_dtype)  # autocast
        out = out if self.direction > 0 else -out
        return out if scale is None else out * scale.to(out.dtype)


def _check_derivative(
    out: object, shape: torch.Size, dtype: torch.dtype, device: torch.device, name: str = "y0"
) -> bool:
    """Check what the vector field returned against the state ``name`` (``y0``, or a
    component ``y0[i]`` of a tuple state): a tensor of its shape, dtype and device, or
    an error that names ``func`` and both.

    Under :func:`torch.autocast`, whose operations return lower precision by design, a
    floating result of another dtype is accepted: the return value says it must be cast
    to the state's dtype, in which the solver keeps its sums. The solve loops check
    every result of the field: a result like the state costs four comparisons.
    """
    if (
        isinstance(out, Tensor)
        and out.shape == shape
        and out.dtype == dtype
        and out.device == device
    ):
        return False
    where, state = ("", "the state `y0`") if name == "y0" else (f" for `{name}`", f"`{name}`")
    if not isinstance(out, Tensor):
        raise TypeError(f"`func` must return a Tensor{where}, got {type(out).__name__}.")
    like = (
        f"the vector field must return dy/dt like the state: expected shape "
        f"{tuple(shape)} and dtype {dtype}, got shape {tuple(out.shape)} and dtype "
        f"{out.dtype}"
    )
    if out.shape != shape:
        raise ValueError(
            f"`func` returned shape {tuple(out.shape)}{where}, but {state} has shape "
            f"{tuple(shape)}; {like}."
        )
    if out.device != device:
        raise TypeError(
            f"`func` returned a tensor on {out.device}{where}, but {state} is on "
            f"{device}; the vector field must return dy/dt on the state's device. "
            f"Move the field (or what it closes over) to `{name}.device`, or `{name}` to "
            "the field's."
        )
    if out.dtype == dtype:
        return False
    if out.is_floating_point() and torch.is_autocast_enabled(device.type):
        return True
    raise TypeError(
        f"`func` returned dtype {out.dtype}{where}, but {state} has dtype {dtype}; "
        f"{like}. Cast the result with `.to(y.dtype)`, or give `{name}` the field's dtype."
    )


class _Clock:
    """Times as differentiable tensors, for exact gradients with respect to them.

    The loop decides every step in floats. The clock attaches to each time ``s`` a
    zero-valued tensor ``shift(s)`` that carries the derivative of ``s`` with respect
    to the time tensors of the call: each step end is its anchor (``t0``, a stop
    given as a tensor, or a constant stop) plus a constant offset, as a step of a
    fixed size taken from there. An output time is not a step time, even where the
    two have the same value (an output on the grid of ``n_steps``): it has its own
    tensor, ``outputs[s][k]`` for the ``k``-th output at ``s``, and moves relative to
    the step it falls in. Inside a step from ``S`` to ``E`` the stage times
    are ``S + c (E - S)`` and the field is scaled by ``(E - S) / h``, so that
    ``h * k_i`` is ``(E - S) * f(S + c (E - S), Y_i)``: autograd then sees the
    step as the discrete scheme computes it, and every value stays bit for bit the
    one of the float loop. Times are increasing ``s = direction * t`` here.
    """

    def __init__(
        self,
        anchors: dict[float, Tensor | None],
        outputs: dict[float, list[Tensor]],
        grid: list[float],
    ) -> None:
        self.anchors = anchors  # step time s -> zero-valued tensor (None: a constant time)
        self.outputs = outputs  # output time s -> a zero-valued tensor per output at s
        self.grid = sorted(grid)  # the times a step end is measured from
        self.step: tuple[float, float, Tensor | None, Tensor | None, Tensor | None] | None = None

    def shift(self, s: float) -> Tensor | None:
        """The derivative carrier of the step end ``s``: that of the grid time before it."""
        i = bisect.bisect_right(self.grid, s) - 1
        return self.anchors.get(self.grid[max(i, 0)])

    def begin(self, s0: float, s1: float) -> Tensor | None:
        """Enter the step from ``s0`` to ``s1``; return the scale of the field in it."""
        start, end = self.shift(s0), self.shift(s1)
        span = None if end is start else _plus(end, _minus(start))
        h = s1 - s0
        scale = None if span is None else 1.0 + span / h
        self.step = (s0, h, start, span, scale)
        return scale

    def end(self) -> None:
        """Leave the step: evaluations are at single times again."""
        self.step = None

    def at(self, s: float) -> tuple[Tensor | None, Tensor | None]:
        """The shift of the time ``s`` and the scale of the field there."""
        if self.step is None:
            return self.shift(s), None
        s0, h, start, span, scale = self.step
        return _plus(start, None if span is None else span * ((s - s0) / h)), scale

    def offset(self, tau: float, k: int = 0) -> Tensor | None:
        """How the ``k``-th output at the time ``tau`` moves within the current step:
        the shift of ``T - S - theta (E - S)``, with ``theta`` its place in the step."""
        assert self.step is not None
        own = self.outputs.get(tau, [])
        if k < len(own) and self.anchors.get(tau) is own[k]:
            return None  # the step's end itself (the solve's), which moves with it
        return self.within(tau, own[k] if k < len(own) else None)

    def within(self, tau: float, own: Tensor | None) -> Tensor | None:
        """How a time ``tau`` of the current step, moved by ``own`` (``None``: a fixed
        time), moves relative to the step: the shift of ``T - S - theta (E - S)``."""
        assert self.step is not None
        s0, h, start, span, _ = self.step
        moved = None if span is None else span * (-(tau - s0) / h)
        return _plus(own, _minus(start), moved)

    def offset_at_start(self, s0: float, k: int) -> Tensor | None:
        """How the ``k``-th output at the start ``s0`` moves from it: the start is the
        first output there (:func:`_clock`), and a later one moves from the start
        along the field, as an output inside the first step does."""
        own = self.outputs.get(s0, [])
        return _plus(own[k], _minus(self.shift(s0))) if k < len(own) else None


def _plus(*terms: Tensor | None) -> Tensor | None:
    """The sum of the terms that are not ``None``; ``None`` when none is."""
    present = [x for x in terms if x is not None]
    return functools.reduce(operator.add, present) if present else None


def _minus(x: Tensor | None) -> Tensor | None:
    return None if x is None else -x


def check_alike(y0: tuple[Tensor, ...]) -> None:
    """Every tensor of a tuple state must have ``y0[0]``'s dtype and device."""
    dtype, device = y0[0].dtype, y0[0].device
    for i, y in enumerate(y0):
        if y.dtype != dtype or y.device != device:
            raise TypeError(
                f"`y0[{i}]` has dtype {y.dtype} on {y.device}, but `y0[0]` has {dtype} on "
                f"{device}; every tensor of a tuple state needs the same dtype and device."
            )


def _packing(
    y0: tuple[Tensor, ...],
) -> tuple[Tensor, Callable[[Tensor], State], Callable[[State], Tensor]]:
    shapes = [y.shape for y in y0]
    sizes = [y.numel() for y in y0]
    check_alike(y0)
    dtype, device = y0[0].dtype, y0[0].device

    def pack(ys: State) -> Tensor:
        if not isinstance(ys, tuple) or len(ys) != len(shapes):
            raise TypeError(
                f"`func` must return a tuple of {len(shapes)} tensors for a tuple state, "
                f"got {type(ys).__name__}."
            )
        parts = []
        for i, (y, shape) in enumerate(zip(ys, shapes)):
            if _check_derivative(y, shape, dtype, device, f"y0[{i}]"):
                y = y.to(dtype)  # autocast
            parts.append(y.reshape(-1))
        return torch.cat(parts)

    def unpack(flat: Tensor) -> State:
        return tuple(p.view(s) for p, s in zip(torch.split(flat, sizes), shapes))

    return pack(y0), unpack, pack


def _mixed_norm(sizes: list[int]) -> Callable[[Tensor], Tensor]:
    def norm(x: Tensor) -> Tensor:
        return torch.stack([rms_norm(p) for p in torch.split(x, sizes)]).max()

    return norm


def _tiny(s: float, span: float) -> float:
    """Step sizes at or below this are lost in the rounding of ``s``."""
    return 8 * _EPS * max(abs(s), span)


def _merge_stops(
    s0: float, s1: float, jumps: set[float], steps: set[float]
) -> tuple[list[float], set[float]]:
    """Sorted times in ``(s0, s1]`` on which steps must end, and those that are jumps.

    Stops closer together than rounding (e.g. ``0.1 * 6`` and ``0.6``) are merged,
    keeping a jump's own value; stops within rounding of ``s0`` or ``s1`` merge into
    them, so jumps at either end are kept (the first and last stages see the limit
    from inside the interval).
    """
    tol = _tiny(max(abs(s0), abs(s1)), s1 - s0)
    candidates = sorted(
        [(t, t in jumps) for t in (jumps | steps) if s0 - tol <= t <= s1 + tol]
        + [(s0, False), (s1, False)]
    )
    merged: list[tuple[float, bool]] = []
    for t, is_jump in candidates:
        if merged and t - merged[-1][0] <= tol:
            prev, prev_jump = merged[-1]
            keep = prev if prev in (s0, s1) or (prev_jump and not is_jump) else t
            if t in (s0, s1):
                keep = t
            merged[-1] = (keep, prev_jump or is_jump)
        else:
            merged.append((t, is_jump))
    jump_set = {t for t, is_jump in merged if is_jump}
    return [t for t, _ in merged if t > s0], jump_set


def _check_y0(y0: Tensor, name: str) -> None:
    if not isinstance(y0, Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor, got {type(y0).__name__}.")
    if y0.is_complex():  # a cast to a real dtype would drop the imaginary part
        raise TypeError(
            f"`{name}` has dtype {y0.dtype}; the solver needs a real floating dtype and "
            "does not take complex states. Solve for the real and imaginary parts as a "
            f"real state: `torch.view_as_real({name})`, with a field that takes and "
            "returns that layout (`torch.view_as_complex` inside it)."
        )
    if not y0.is_floating_point():
        raise TypeError(
            f"`{name}` has dtype {y0.dtype}; the solver needs a floating dtype. Cast with "
            f"{name}.float() or {name}.double()."
        )
    if not _all_finite(y0):
        raise ValueError(f"`{name}` holds non-finite values (NaN or inf).")


def _extremes(x: Tensor) -> tuple[Tensor, Tensor]:
    """The smallest and largest element, both finite exactly when every element is.

    One pass over ``x`` and no host sync: several times cheaper than
    ``torch.isfinite(x).all()``, and unlike a sum it cannot overflow.
    """
    if x.numel() == 0:
        zero = x.new_zeros(())
        return zero, zero
    return torch.aminmax(x)


def _all_finite(x: Tensor) -> bool:
    """Whether every element of ``x`` is finite (one host sync)."""
    low, high = _extremes(x.detach())
    return math.isfinite(float(low)) and math.isfinite(float(high))


class _FiniteRecord:
    """A record of each accepted state's extremes, in chunks of preallocated tensors.

    Read once at the end: no host sync per step, and no thousands of tiny tensors
    (which fragment the heap enough to make memory grow with the number of steps).
    A non-finite element never becomes finite again (every step adds to the state),
    so a finite last state clears the whole record with one look at its last entry.
    """

    _CHUNK = 1024

    def __init__(self, like: Tensor) -> None:
        self.like = like
        self.lows: list[Tensor] = []
        self.highs: list[Tensor] = []
        self.times: list[float] = []

    def append(self, t: float, y: Tensor) -> None:
        i = len(self.times) % self._CHUNK
        if i == 0:
            self.lows.append(self.like.new_zeros(self._CHUNK))
            self.highs.append(self.like.new_zeros(self._CHUNK))
        if y.numel():
            torch.aminmax(_no_graph(y), out=(self.lows[-1][i], self.highs[-1][i]))
        self.times.append(t)

    def first_false(self) -> int | None:
        """Index of the first state with a non-finite element, or ``None``; one host sync."""
        if not self.times:
            return None
        i = (len(self.times) - 1) % self._CHUNK
        last = torch.stack((self.lows[-1][i], self.highs[-1][i])).tolist()
        if all(math.isfinite(v) for v in last):
            return None
        n = len(self.times)
        lows, highs = (torch.cat(chunks)[:n] for chunks in (self.lows, self.highs))
        flags = torch.isfinite(lows) & torch.isfinite(highs)
        return int((~flags).nonzero()[0])


class _Dense:
    """The dense output of one solve: every accepted step, and how to read inside it."""

    def __init__(self, unpack: Callable[[Tensor], State] | None) -> None:
        self.unpack = unpack  # a tuple state's structure
        self.steps: list[tuple[float, float, Tensor, Tensor, StepResult]] = []
        self.fe: _Field | None = None
        self.solver: AbstractSolver | None = None
        self.y0: Tensor | None = None
        self.s0 = math.nan
        self.module: torch.nn.Module | None = None
        self.tensors: list[tuple[int, int | None]] = []
        self.modes: tuple[tuple[torch.nn.Module, bool], ...] = ()

    def keep(
        self, module: torch.nn.Module | None, modes: tuple[tuple[torch.nn.Module, bool], ...]
    ) -> None:
        """Note the field's module's parameters and buffers as the solve left them: a
        dense output that evaluates the field (a sub-step, a Hermite interpolant's
        slopes) is that of this solve only while they are unchanged. It evaluates the
        field in the training modes of the solve (``modes``), whatever they are now."""
        self.module = module
        self.tensors = _held(module)
        self.modes = modes

    def _read(self, read: Callable[[], list[Tensor]]) -> list[Tensor]:
        """``read()``, refused where it evaluated the field after the field's module
        changed since the solve (an optimiser step, a new parameter)."""
        assert self.fe is not None
        changed = self.module is not None and _held(self.module) != self.tensors
        before = self.fe.nfe
        with modes_pinned(self.modes):
            value = read()
        if self.fe.nfe != before and self.module is not None:
            if changed:
                raise ConfigurationError(
                    "`Solution.evaluate`: this solver's dense output evaluates the vector "
                    "field, whose parameters or buffers changed after the solve (an "
                    "optimizer step?), so the value would mix two fields; evaluate before "
                    "changing them, or solve again."
                )
            self.tensors = _held(self.module)  # the field's own evaluations (running stats)
        return value

    def __call__(self, t: float | Tensor) -> Tensor:
        """The flat state at the caller's time ``t``; a ``t`` that requires grad moves
        it along the dense output, whose exact derivative is used."""
        assert self.fe is not None and self.solver is not None and self.y0 is not None
        moved = isinstance(t, Tensor) and t.requires_grad and torch.is_grad_enabled()
        time = float(t.detach() if isinstance(t, Tensor) else t)
        s = self.fe.direction * time
        end = self.steps[-1][1] if self.steps else self.s0
        if not (math.isfinite(s) and self.s0 <= s <= end):
            lo, hi = sorted((self.s0 * self.fe.direction, end * self.fe.direction))
            raise ConfigurationError(f"`t` = {time!r} is outside the span solved, [{lo}, {hi}].")
        i = bisect.bisect_left([e for _, e, *_ in self.steps], s) if self.steps else 0
        if s == self.s0 and not (moved and self.steps):
            return self.y0.clone()  # the caller's to change, not the steps' own tensor
        s0, s1, y, f0, step = self.steps[i]
        clock = self.fe.clock  # the solve's times need gradients: its steps move
        shift = None
        if moved:
            assert isinstance(t, Tensor)
            shift = self.fe.direction * (t - t.detach())
        with self.fe.inside(s0, s1):
            if clock is not None:
                clock.begin(s0, s1)
            try:
                solver, fe = self.solver, self.fe
                if s == self.s0:
                    value = self.y0
                else:
                    (value,) = self._read(lambda: solver.interpolate(fe, s0, s1, y, f0, step, [s]))
                if clock is not None and s != self.s0:  # a fixed time in a moving step
                    shift = clock.within(s, shift)
                if shift is None:  # a copy where it is a tensor the steps hold
                    own = (step.y1, y, self.y0)
                    return value.clone() if any(value is x for x in own) else value
                with torch.no_grad():
                    (slope,) = self._read(
                        lambda: solver.slopes(fe, s0, s1, y, f0, step, [s], [value])
                    )
            finally:
                if clock is not None:
                    clock.end()
        return value + _along(slope, shift.to(value.dtype))


def _held(module: torch.nn.Module | None) -> list[tuple[int, int | None]]:
    """Which tensors ``module`` holds (parameters, buffers) and their versions (``None``
    for an inference tensor, which has none)."""
    if module is None:
        return []
    held = itertools.chain(module.parameters(), module.buffers())
    return [(id(q), None if q.is_inference() else q._version) for q in held]


def _split(flat: Tensor, unpack: Callable[[Tensor], State]) -> State:
    """Stacked flat states (one per row) as a tuple of stacked components."""
    rows = [unpack(row) for row in flat]
    return tuple(torch.stack(parts) for parts in zip(*rows))  # type: ignore[arg-type]


CompiledStep = Callable[
    [_Field, float, float, Tensor, Tensor, Any, SolveState | None], tuple[StepResult, Adaptation]
]
"""A compiled step of the loop: ``(fe, s, s_next, y, f0, controller_state,
solver_state)`` to the step and the controller's verdict (``_compiled_step``); it counts
its Jacobians and factorisations in the solver's state."""


class Ran(NamedTuple):
    """What a compiled run of ordinary steps did (``steps`` of a compiled step that has
    it, ``_compiled_step._Looper``): where it left the loop's variables, its attempts
    and accepted steps, their ends, whether it stopped before an attempt the eager loop
    must take itself (``unusual``), and its last accepted step as ``(s, y, f0, step)``
    from its start, for the dense output (``None`` without one)."""

    s: float
    dt: float
    retry: bool
    y: Tensor
    f0: Tensor
    cstate: Any
    attempts: int
    accepted: int
    ends: list[float]
    unusual: bool
    last: tuple[float, Tensor, Tensor, StepResult] | None


@dataclass
class _Run:
    ys: list[Tensor | None]
    stats: Stats
    status: Status
    s_reached: float
    message: str = ""


def _integrate(
    fe: _Field,
    solver: AbstractSolver,
    controller: AbstractController,
    flat0: Tensor,
    s0: float,
    s1: float,
    taus: list[float],
    stops: list[float],
    jump_set: set[float],
    dt0: float | None,
    max_steps: int,
    ends: list[float],
    on_step: Callable[[float, Tensor], None] | None,
    hooks: StepHooks | None = None,
    dense: _Dense | None = None,
    compiled: CompiledStep | None = None,
) -> _Run:
    """The step loop, in increasing time ``s``: step, judge, save, repeat.

    Returns the states at ``taus`` (``None`` where not reached), the statistics, the
    status and the last time reached. Failures are statuses, never exceptions; a step
    the solver could not take (``step.failure``) ends the loop before it, with its
    status and message, unless the controller retries it smaller.
    Every accepted step's end is appended to ``ends``, and ``on_step(s, y)`` called
    after it; ``hooks`` (the field's step callbacks, an event) around every step, and
    an event stops the loop. A compiled step with ``steps`` (:class:`Ran`) takes runs
    of ordinary steps in one call where nothing is called per step.
    """
    stats = Stats()
    state = solver.new_state()  # the solver's per-solve state (an implicit one's Jacobian)
    status = Status.SUCCESS
    message = ""
    ys: list[Tensor | None] = [None] * len(taus)

    out_i = 0
    while out_i < len(taus) and taus[out_i] == s0:
        ys[out_i] = flat0
        out_i += 1

    s = s0
    y = flat0
    finite = _FiniteRecord(flat0)  # finiteness of every accepted step, read at the end
    # Outputs at t0 after the start's own move from it along f(t0, y0), in a solve of
    # no length too.
    moving = fe.clock is not None and out_i > 1
    if s0 < s1 or moving:
        fe.right_limit_at = s0 if s0 in jump_set else None
        f0 = solver.init(fe, s, y)
        check_no_tangent(f0)
        if not _all_finite(f0):
            status = Status.NONFINITE
        elif fe.clock is not None and moving:
            for k in range(1, out_i):
                offset = fe.clock.offset_at_start(s0, k)
                if offset is not None:  # moves along the field from the start
                    ys[k] = flat0 + _along(f0, offset.to(flat0.dtype))
    if s0 < s1 and status == Status.SUCCESS:
        dt, cstate = controller.init(fe, s0, s1, y, f0, solver, None if dt0 is None else abs(dt0))
        span = s1 - s0
        stop_i = 0
        snap = max(SNAP, controller.stretch)  # never after a rejection, so retries shrink
        retry = single = False
        runs = getattr(compiled, "steps", None)  # a compiled run of steps, where nothing
        per_step = (on_step, hooks, dense, fe.clock)  # is called or read per step
        if jump_set or any(x is not None for x in per_step):
            runs = None
        while s < s1:
            if stats.n_steps >= max_steps:
                status = Status.MAX_STEPS_REACHED
                break
            while stops[stop_i] <= s:
                stop_i += 1
            target = stops[stop_i]
            if runs is not None and not single:
                next_out = taus[out_i] if out_i < len(taus) else math.inf
                limits = (target, next_out, span, max_steps - stats.n_steps)
                ran: Ran = runs(fe, s, dt, retry, y, f0, cstate, state, limits)
                stats.n_steps += ran.attempts
                stats.n_accepted += ran.accepted
                stats.n_rejected += ran.attempts - ran.accepted
                s, dt, retry, y, f0, cstate = ran[:6]
                ends.extend(ran.ends)
                single = ran.unusual  # the eager loop takes that attempt
                if ran.last is not None:  # the run's states are finite; it ends on outputs
                    finite.append(s, y)
                    s_prev, y_prev, f0_prev, step = ran.last
                    out_i = _save(ys, taus, out_i, fe, solver, s_prev, s, y_prev, f0_prev, step)
                continue
            single = False
            s_next = s + dt
            if s_next >= target - (SNAP if retry else snap) * dt:
                s_next = target
            if dt <= _tiny(s, span):
                status = Status.DT_UNDERFLOW
                break
            fe.left_limit_at = s_next if s_next in jump_set else None
            fe.right_limit_at = s if s in jump_set else None
            f0_step, scale = f0, None
            if fe.clock is not None:
                scale = fe.clock.begin(s, s_next)
                f0_step = f0 if scale is None else f0 * scale.to(f0.dtype)
            if hooks is not None:
                hooks.before(s, s_next, y)
            if compiled is None:
                step = solver.step_with(state, fe, s, s_next, y, f0_step)
                verdict = controller.adapt(s, s_next, y, step, solver, cstate)
            else:  # the step and the controller's verdict as one compiled graph
                step, verdict = compiled(fe, s, s_next, y, f0_step, cstate, state)
            stats.n_steps += 1
            cstate = verdict.state
            retry = not verdict.accept
            if verdict.accept and step.failure is not None:  # no smaller step follows
                if fe.clock is not None:
                    fe.clock.end()
                status, message = step.failure.status, str(step.failure)
                break
            if verdict.accept:
                stats.n_accepted += 1
                out_i = _save(ys, taus, out_i, fe, solver, s, s_next, y, f0_step, step)
                finite.append(s_next, step.y1)  # checked once at the end
                ends.append(s_next)
                if on_step is not None:
                    on_step(s_next, step.y1)
                if dense is not None:
                    dense.steps.append((s, s_next, y, f0_step, step))
                if hooks is not None and hooks.accepted(s, s_next, y, f0_step, step):
                    search = hooks.search
                    if fe.clock is not None and search is not None and search.found is not None:
                        # The state at the event follows the step's times too.
                        t_e, y_e = search.found
                        (y_e,) = _moved(
                            fe, fe.clock, solver, s, s_next, y, f0_step, step,
                            [fe.direction * t_e], [y_e],
                        )  # fmt: skip
                        search.found = (t_e, y_e)
                    s = s_next  # an event happened in this step
                    break
                if fe.clock is not None:
                    fe.clock.end()
                s, y = s_next, step.y1
                if step.f1 is not None and s not in jump_set:
                    # Inside the step the field was scaled by `scale` (value 1).
                    f0 = step.f1 if scale is None else step.f1 / scale.to(step.f1.dtype)
                elif s < s1:
                    fe.left_limit_at = None
                    fe.right_limit_at = s if s in jump_set else None
                    f0 = solver.init(fe, s, y)
            else:
                stats.n_rejected += 1
                if hooks is not None:
                    hooks.rejected(s, s_next, y)
                if fe.clock is not None:
                    fe.clock.end()
                if not verdict.finite and verdict.dt <= _tiny(s, span):
                    status = Status.NONFINITE
                    if step.failure is not None:
                        status, message = step.failure.status, str(step.failure)
                    break
            if verdict.accept and s_next == target and verdict.dt < dt:
                # A step shortened to land on a stop says little about the step size.
                dt = max(verdict.dt, dt)
            else:
                dt = verdict.dt
        first = finite.first_false() if status == Status.SUCCESS else None
        if first is not None:
            s = finite.times[first - 1] if first > 0 else s0
            status = Status.NONFINITE
    stats.nfe = fe.nfe
    if state is not None:
        stats.n_jacobians = state.n_jacobians
        stats.n_factorisations = state.n_factorisations
        stats.n_newton_iters = state.n_newton_iters
    return _Run(ys=ys, stats=stats, status=status, s_reached=s, message=message)


def _save(
    ys: list[Tensor | None],
    taus: list[float],
    out_i: int,
    fe: _Field,
    solver: AbstractSolver,
    s: float,
    s_next: float,
    y: Tensor,
    f0: Tensor,
    step: StepResult,
) -> int:
    """Saves the outputs ``taus[out_i:]`` that the step from ``s`` to ``s_next`` passes
    into ``ys`` from its dense output; the index of the next output."""
    out_j = bisect.bisect_right(taus, s_next, lo=out_i)
    if out_j > out_i:
        outs = taus[out_i:out_j]
        values = solver.interpolate(fe, s, s_next, y, f0, step, outs)
        if fe.clock is not None:
            values = _moved(fe, fe.clock, solver, s, s_next, y, f0, step, outs, values)
        ys[out_i:out_j] = values
    return out_j


def _moved(
    fe: _Field,
    clock: _Clock,
    solver: AbstractSolver,
    s0: float,
    s1: float,
    y0: Tensor,
    f0: Tensor,
    step: StepResult,
    taus: list[float],
    values: list[Tensor],
) -> list[Tensor]:
    """Output values inside a step, with the derivative of the dense output along the
    moves of their times relative to the step (a zero-valued term)."""
    # Equal output times are consecutive, and all in this step: the k-th of them is
    # the k-th output at that time.
    offsets = [clock.offset(tau, taus[:i].count(tau)) for i, tau in enumerate(taus)]
    if all(offset is None for offset in offsets):
        return values
    with torch.no_grad():
        slopes = solver.slopes(fe, s0, s1, y0, f0, step, taus, values)
    return [
        v if offset is None else v + _along(slope, offset.to(v.dtype))
        for v, slope, offset in zip(values, slopes, offsets)
    ]


def _along(slope: Tensor, shift: Tensor) -> Tensor:
    """``slope * shift``, a zero whose derivative for the time is first order."""
    moved: Tensor = reverse_only(_Along, slope, shift)
    return moved


class _Along(ReverseOnly):
    """``slope * shift``: the zero-valued move of a dense-output value along the
    interpolant's slope when its time moves by ``shift``. The slope is a constant of
    the graph, so the derivative is first order, and a second one refuses."""

    what = "The gradient with respect to an output time inside a step"
    instead = f"{AUTOGRAD_ONLY}."

    @staticmethod
    def forward(ctx: Any, slope: Tensor, shift: Tensor) -> Tensor:
        ctx.save_for_backward(slope)
        ctx.shape = shift.shape
        return slope * shift

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, Tensor]:
        first_order(
            "The gradient with respect to an output time inside a step",
            "The end of a solve moves with its last step to every order: for a second "
            "derivative, make the time the solve's last output time (`t1`).",
        )
        (slope,) = ctx.saved_tensors
        return None, (grad * slope).sum().reshape(ctx.shape)


def _clock(times: TimeTensors, direction: float, stops: Sequence[float]) -> _Clock:
    """The clock of a solve whose times ``times.tensors`` need gradients.

    Step ends are anchored to the step times given as tensors, and to the output
    times only at ``t0`` and ``t1``, where the solve starts and ends; an output time
    elsewhere is never a step end's anchor, nor a stop given as a number (a jump, a
    step time), which stays where it is when an output time of its value moves.
    """
    anchors: dict[float, Tensor | None] = {}
    outputs: dict[float, list[Tensor]] = {}
    for i, tensor in enumerate(times.tensors):
        shift = direction * (tensor - tensor.detach())
        for value, part in zip(tensor.detach().reshape(-1).tolist(), shift.reshape(-1).unbind()):
            if not math.isfinite(value):  # an event solve's end may be infinite
                continue
            s = direction * float(value)
            if i == times.output:
                outputs.setdefault(s, []).append(part)
            else:
                anchors[s] = part
    s0, s1 = direction * times.t0, direction * times.t1
    if s1 in outputs:
        anchors[s1] = outputs[s1][-1]
    if s0 in outputs:
        anchors[s0] = outputs[s0][0]
    grid = [s0, s1, *(direction * t for t in stops)]
    return _Clock(anchors, outputs, grid)


def _make_loop(
    jumps: list[float],
    steps: list[float],
    max_steps: int,
    dense: _Dense | None = None,
    compiled: Callable[[AbstractSolver, AbstractController, float], CompiledStep] | None = None,
) -> Loop:
    """The solve loop over these jump and step times, as gradient methods call it;
    with ``dense``, its steps are kept there; with ``compiled``, each step is the one
    it makes for the solver, the controller and the direction of time."""

    def loop(
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
        times: TimeTensors | None = None,
    ) -> LoopResult:
        # Work in tau = direction * t, which always increases.
        direction = 1.0 if t1 >= t0 else -1.0
        s0, s1 = direction * t0, direction * t1
        stops, jump_set = _merge_stops(
            s0,
            s1,
            {direction * t for t in jumps},
            {direction * t for t in (*steps, *step_ts)},
        )
        fe = _Field(f, direction, y0)
        fe.jumps = jump_set
        if dense is not None:
            dense.fe, dense.solver, dense.y0, dense.s0 = fe, solver, y0, s0
        if times is not None and times.tensors:
            fe.clock = _clock(times, direction, [*jumps, *steps])
        ends: list[float] = []

        def record(s: float, y: Tensor) -> None:
            assert on_step is not None
            on_step(direction * s, y)

        run = _integrate(
            fe, solver, controller, y0, s0, s1, [direction * t for t in ts], stops,
            jump_set, dt0, max_steps, ends, None if on_step is None else record,
            step_hooks(f, fe, solver, direction),
            dense, None if compiled is None else compiled(solver, controller, direction),
        )  # fmt: skip
        step_ends = [direction * s for s in ends]
        return LoopResult(
            run.ys, run.stats, run.status, direction * run.s_reached, step_ends, run.message
        )

    return loop


def solve(
    f: VectorField,
    y0: State,
    *,
    t0: float,
    t1: float,
    solver: AbstractSolver,
    controller: AbstractController | None = None,
    saveat: SaveAt | None = None,
    dt0: float | None = None,
    jump_ts: Times | None = None,
    step_ts: Times | None = None,
    max_steps: int = 100_000,
    throw: bool = True,
    gradient: AbstractGradient | None = None,
    event: Event | None = None,
    compile: Compile = False,
) -> Solution:
    """Solve ``dy/dt = f(t, y)`` from ``y(t0) = y0`` to ``t1``.

    The whole state, batch included, is one system with one step size; with
    ``PIDController(per_sample=True)`` each sample of a batch of independent systems
    takes its own steps instead. Gradients flow by backpropagation through the steps
    (exact for the discrete scheme), or by the continuous adjoint with
    ``gradient=Adjoint()``.

    Args:
        f: the vector field ``f(t, y)``. ``t`` is a 0-dim tensor in ``y0``'s dtype and
            device (with ``PIDController(per_sample=True)``, a ``(batch,)`` tensor of
            each sample's time); ``y`` and the return value have ``y0``'s structure
            and shapes.
        y0: the initial state, a floating tensor of any shape or a tuple of them.
        t0: the start time.
        t1: the end time; ``t1 < t0`` integrates backward in time. With an ``event``
            it may be ``math.inf`` (``-math.inf``): integrate until the event.
        solver: the one-step method, e.g. :class:`Dopri5` or :class:`RK4`.
        controller: the step-size controller. Default: :class:`PIDController` for
            solvers with an error estimate, :class:`ConstantStepSize` for the rest.
        saveat: which times to return; default ``SaveAt(t1=True)``.
        dt0: the first step size (adaptive) or the step size (constant), positive;
            its sign follows the direction of integration.
        jump_ts: times where ``f`` is discontinuous in ``t``. A step ends exactly on
            each; the stages next to a jump see ``f``'s one-sided limit, and no stage
            is reused across it.
        step_ts: times on which a step must end (no restart).
        max_steps: the most steps (accepted and rejected) before the solve fails.
        throw: raise :class:`SolverError` on failure; with ``False`` the failure is
            reported in ``Solution.status``, and the error's text in
            ``Solution.message``.
        gradient: how the solve is differentiated: :class:`Autograd` (the default,
            backpropagation through the steps) or :class:`Adjoint`.
        event: an :class:`Event` that stops the solve where its function changes
            sign; ``Solution.event_t`` says when. Output times after the event are
            left out, and ``SaveAt(t1=True)`` saves the state at the event. If ``f``
            has torchdiffeq's step callbacks (``callback_step``,
            ``callback_accept_step``, ``callback_reject_step``), the loop calls them.
        compile: compile the solve with ``torch.compile`` (``fullgraph=True``),
            forward and backward, with the same result. With ``True`` an explicit
            fixed-step solver with :class:`ConstantStepSize` runs as one graph of its
            whole grid (compiled in minutes, again for a new number of steps, and
            several times faster than eager on small fields); with ``"stepped"`` it
            takes every step as one compiled graph in the eager loop (compiled in
            seconds, for any number of steps). An explicit adaptive solver or a
            Rosenbrock one (:class:`Rodas5P`, :class:`Rodas4`) with
            :class:`PIDController` takes compiled steps with either. All take
            :class:`Autograd`, and the explicit ones :class:`Checkpoint` and
            :class:`Adjoint` (their solves over compiled steps, even with ``True``);
            anything else, or a machine where inductor cannot
            run, solves eagerly with one :class:`CompileFallbackWarning` that says
            why. Later calls with other times, tolerances or batch size reuse the
            graph. Under ``torch.no_grad()``, an adaptive solve with nothing called
            per step runs its steps inside one compiled loop (several times faster
            on small states). The backward pass is compiled and first order: a
            second derivative (``create_graph=True``) or a second backward pass
            (``retain_graph=True``) differentiates an eager solve again, after the
            warning.

    Returns:
        A :class:`Solution` with ``ys``, ``ts``, ``stats`` and ``status``.

    Raises:
        TypeError: if ``y0`` is not a floating tensor (or tuple of them) or ``f``
            returns something else.
        ValueError: for invalid times, tolerances, shapes, or a non-finite ``y0``.
        SolverError: if the solve cannot reach ``t1`` and ``throw`` is true.

    Example:
        >>> import torch, odecore
        >>> sol = odecore.solve(lambda t, y: -y, torch.ones(2, 3), t0=0.0, t1=1.0,
        ...                     solver=odecore.Dopri5())
        >>> sol.ys.shape, sol.stats.nfe > 0
        (torch.Size([1, 2, 3]), True)
    """
    return _solve(
        f,
        y0,
        t0=t0,
        t1=t1,
        solver=solver,
        controller=controller,
        saveat=saveat,
        dt0=dt0,
        jump_ts=jump_ts,
        step_ts=step_ts,
        max_steps=max_steps,
        throw=throw,
        gradient=gradient,
        make_loop=_make_loop,
        event=event,
        compile=compile,
    )


LoopFactory = Callable[[list[float], list[float], int], Loop]
"""Builds the solve loop from the jump times, the step times and the step budget."""


STEPPED = "stepped"
"""``compile="stepped"``: a fixed-step solve over one compiled graph of a step, as an
adaptive solve always is, instead of one graph of its whole grid."""
Compile = bool | Literal["stepped"]
"""What ``compile`` takes: ``False``, ``True`` or :data:`STEPPED`."""


def check_compile(value: object, kind: str = "") -> None:
    """``value`` must be ``True``, ``False`` or ``"stepped"`` (``kind``: "option " for an
    option)."""
    if not (isinstance(value, bool) or (isinstance(value, str) and value == STEPPED)):
        raise TypeError(f'The {kind}`compile` must be True, False or "{STEPPED}", got {value!r}.')


def _compiled_or_eager(
    compile: object,
    loop: Loop,
    problem: Problem,
    gradient: AbstractGradient,
    f: VectorField,
    event: Event | None,
    saveat: SaveAt,
    make_loop: LoopFactory,
    jumps: list[float],
    steps: list[float],
    max_steps: int,
) -> Loop:
    """The compiled loop for ``compile=True`` or ``"stepped"``, or ``loop`` with a
    warning that says what keeps the solve from compiling."""
    check_compile(compile)
    # Imported here: an eager solve never loads torch._dynamo.
    from ._compiled import compiled_loop, fall_back, fallback_reasons, not_covered

    if problem.f is not f:  # a tuple state's flat field: failures are the user's field's
        problem.f.__wrapped__ = f  # type: ignore[attr-defined]
    reasons = fallback_reasons(
        solver=problem.solver,
        controller=problem.controller,
        gradient=gradient,
        problem=problem,
        f=problem.f,
        event=event is not None,
        dense=saveat.dense,
        backend=make_loop is not _make_loop,
        stepped=compile == STEPPED,
    )
    if reasons:
        fall_back(not_covered(reasons))
        return loop
    return compiled_loop(jumps, steps, max_steps, stepped=compile == STEPPED)


def _solve(
    f: VectorField,
    y0: State,
    *,
    t0: float,
    t1: float,
    solver: AbstractSolver,
    controller: AbstractController | None,
    saveat: SaveAt | None,
    dt0: float | None,
    jump_ts: Times | None,
    step_ts: Times | None,
    max_steps: int,
    throw: bool,
    gradient: AbstractGradient | None,
    make_loop: LoopFactory,
    event: Event | None = None,
    event_time_gradient: bool = True,
    compile: Compile = False,
) -> Solution:
    """:func:`solve`, with the solve loop built by ``make_loop``.

    The hook for backends (``odeint``'s ``scipy:`` methods): they bring their own
    loop, and share everything else — validation, packing of tuple states, the
    gradient method, NaN outputs after a failure and ``throw``. Without
    ``event_time_gradient`` an event's time carries no gradient and the state at it
    only that of a solve to a fixed time (torchdiffeq's ``odeint(event_fn=...)``).
    """
    if not isinstance(solver, AbstractSolver):
        raise TypeError(f"`solver` must be an odecore solver such as Dopri5(), got {solver!r}.")
    controller = _checked_controller(controller, solver)
    gradient = _checked_gradient(gradient)
    check_transforms(y0, gradient, isinstance(gradient, Autograd), solver, takes_jacobian(solver))
    saveat = SaveAt(t1=True) if saveat is None else saveat
    rows = per_sample(controller)
    if rows:
        timed = isinstance(saveat.ts, Tensor) and saveat.ts.requires_grad
        unsupported = {
            "`event`": event is not None, "`jump_ts`": jump_ts is not None,
            "`step_ts`": step_ts is not None, "`SaveAt(dense=True)`": saveat.dense,
            "a `saveat.ts` that requires grad": timed,
            "step callbacks (`f.callback_step`, ...)": any(
                getattr(f, name, None) is not None for name in CALLBACKS
            ),
        }  # fmt: skip
        check_per_sample(solver, y0, gradient, unsupported)
    t0, t1, dt0 = _checked_span(t0, t1, event, max_steps, dt0)
    _check_constant_step(controller, dt0, t0, t1)
    f_flat, flat0, unpack, controller = _flattened(f, y0, controller)
    if unpack is not None and isinstance(gradient, Adjoint):  # its backward controller too
        back = gradient.controller
        if isinstance(back, PIDController) and isinstance(back.norm, AugmentedNorm):
            back = replace(back, norm=replace(back.norm, unpack=unpack))
            gradient = replace(gradient, controller=back)
        elif isinstance(back, PIDController) and back.norm is not None:
            gradient = replace(gradient, controller=_unpacking(back, unpack))
    _check_resolution(flat0.dtype, controller, gradient)
    out_ts = _output_times(saveat, t0, t1)
    jumps, steps = _jump_times(jump_ts), _as_floats("step_ts", step_ts)
    dense = None
    if saveat.dense:
        if not isinstance(gradient, Autograd) or event is not None or make_loop is not _make_loop:
            raise ConfigurationError(
                "`SaveAt(dense=True)` keeps the steps of odecore's own loop under "
                "backpropagation: it needs `gradient=Autograd()`, no `event` and an odecore "
                f"solver, got {gradient!r}, event={event!r}, solver={solver!r}."
            )
        dense = _Dense(unpack)
    loop: Loop = (
        _make_loop(jumps, steps, max_steps, dense) if dense is not None
        else PerSampleLoop(max_steps, compiled=compile is not False) if rows
        else make_loop(jumps, steps, max_steps)
    )  # fmt: skip
    problem = Problem(
        f=f_flat,
        y0=flat0,
        t0=t0,
        t1=t1,
        ts=out_ts,
        ts_tensor=_times_tensor(saveat.ts, len(out_ts), t1),
        solver=solver,
        controller=controller,
        dt0=dt0,
        module=f if isinstance(f, torch.nn.Module) else None,
        step_tensor=step_ts if isinstance(step_ts, Tensor) else None,
        jump_ts=tuple(jumps),
    )
    if compile is not False and rows:
        check_compile(compile)  # the per-sample loop compiles its own runs
    elif compile is not False:
        loop = _compiled_or_eager(
            compile, loop, problem, gradient, f, event, saveat, make_loop, jumps, steps, max_steps
        )
    event_t = None
    if event is None:
        run = gradient.run(loop, problem)
    else:  # stop at the event: the output times become those up to it
        done_event = run_event(
            event, gradient, make_loop, jumps, steps, max_steps, problem, y0, saveat.t1,
            event_time_gradient,
        )  # fmt: skip
        run, out_ts, event_t = done_event.result, done_event.ts, done_event.event_t
    message = _failure(run, t1, throw)
    if dense is not None:
        dense.keep(problem.module, problem.modes)
    rows_loop = loop if isinstance(loop, PerSampleLoop) else None
    return Solution(
        ts=torch.tensor(out_ts, dtype=flat0.dtype, device=flat0.device),
        ys=_outputs(run, out_ts, flat0, y0, 1.0 if t1 >= t0 else -1.0, rows_loop is not None),
        stats=run.stats,
        status=run.status,
        t_final=run.t_final,
        event_t=event_t,
        message=message,
        dense=dense,
        n_accepted_per_sample=None if rows_loop is None else rows_loop.accepted,
        n_rejected_per_sample=None if rows_loop is None else rows_loop.rejected,
    )


def _checked_controller(
    controller: AbstractController | None, solver: AbstractSolver
) -> AbstractController:
    """``controller``, or the default for ``solver``: a PID controller for an adaptive
    one, constant steps otherwise."""
    if controller is None:
        return PIDController() if solver.adaptive else ConstantStepSize()
    if not isinstance(controller, AbstractController):
        raise TypeError(
            "`controller` must be an odecore controller such as PIDController(), "
            f"got {controller!r}."
        )
    return controller


def _checked_gradient(gradient: AbstractGradient | None) -> AbstractGradient:
    """``gradient``, or backpropagation (:class:`Autograd`) by default."""
    if gradient is None:
        return Autograd()
    if not isinstance(gradient, AbstractGradient):
        raise TypeError(
            f"`gradient` must be an odecore gradient method such as Adjoint(), got {gradient!r}."
        )
    return gradient


def numbers_only(t0: float | Tensor, t1: float | Tensor, who: str, instead: str) -> None:
    """Refuse a ``t0`` or ``t1`` that requires grad: ``who`` takes them as numbers, which
    have no gradient; ``instead`` says what to do."""
    for name, value in (("t0", t0), ("t1", t1)):
        if isinstance(value, Tensor) and value.requires_grad and torch.is_grad_enabled():
            raise ConfigurationError(
                f"`{name}` requires grad, but `{who}` takes it as a number, which has no "
                f"gradient; pass `{name}.detach()`, {instead}"
            )


def _checked_span(
    t0: float, t1: float, event: Event | None, max_steps: int, dt0: float | None
) -> tuple[float, float, float | None]:
    """``t0``, ``t1`` and ``dt0`` as floats, once they and ``event`` and ``max_steps``
    are what :func:`solve` takes."""
    numbers_only(
        t0, t1, "solve", "and the times to differentiate as a tensor `SaveAt(ts=...)`: an "
        "output time at `t0` or `t1` moves the start or the end of the solve."
    )  # fmt: skip
    for name, value in (("t0", t0), ("t1", t1)):
        if isinstance(value, Tensor) and value.numel() != 1:
            raise ConfigurationError(
                f"`{name}` must be a number or a one-element tensor, got a tensor of shape "
                f"{tuple(value.shape)}: every sample of a batch is solved over the same "
                "span, with per-sample steps too. Solve spans of their own in separate "
                "calls, or map each sample's span onto one in the field."
            )
    t0, t1 = float(t0), float(t1)
    if not (math.isfinite(t0) and (math.isfinite(t1) or (event is not None and t1 == t1))):
        raise ConfigurationError(
            f"`t0` and `t1` must be finite, got {t0} and {t1}"
            + ("." if event is None else " (`t1` may be ±inf with an `event`).")
        )
    if event is not None and not isinstance(event, Event):
        raise TypeError(f"`event` must be an odecore.Event(fn), got {event!r}.")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigurationError(f"`max_steps` must be a positive integer, got {max_steps!r}.")
    if dt0 is None:
        return t0, t1, None
    if isinstance(dt0, Tensor) and dt0.requires_grad and torch.is_grad_enabled():
        raise ConfigurationError(
            "`dt0` requires grad, but `solve` takes it as a number, which has no gradient; "
            "pass `dt0.detach()`, and the step times to differentiate as a tensor `step_ts`."
        )
    if (
        isinstance(dt0, bool)
        or not isinstance(dt0, (numbers.Real, Tensor))
        or (isinstance(dt0, Tensor) and dt0.numel() != 1)
    ):
        raise ConfigurationError(f"`dt0` must be a number, got {dt0!r}.")
    dt0 = float(dt0)
    if not (math.isfinite(dt0) and dt0 != 0):
        raise ConfigurationError(f"`dt0` must be a non-zero finite number, got {dt0!r}.")
    return t0, t1, dt0


def _check_constant_step(
    controller: AbstractController, dt0: float | None, t0: float, t1: float
) -> None:
    """Refuse a constant ``dt0`` that the times of the span cannot resolve
    (:func:`check_step_resolves`)."""
    if not isinstance(controller, ConstantStepSize) or dt0 is None:
        return
    if not math.isfinite(t1):  # an event solve's open end: its steps are where it stops
        return
    check_step_resolves(
        "dt0", dt0, t0, t1, "Pass a larger `dt0` (`step_size` or `n_steps` in odeint's "
        "options), or measure time from a start nearer 0."
    )  # fmt: skip


def check_step_resolves(name: str, dt: float, t0: float, t1: float, advice: str) -> None:
    """Refuse a constant step ``dt`` (the argument ``name``) that the times from ``t0``
    to ``t1`` cannot resolve: a step of at most :func:`_tiny` does not move ``t``
    there, and a loop would stop on it with ``Status.DT_UNDERFLOW``, whose advice
    (stiffness, tolerances) is not this fault, or never reach ``t1``."""
    far, span = max(abs(t0), abs(t1)), abs(t1 - t0)
    smallest = _tiny(far, span)
    if span > 0 and abs(dt) <= smallest:
        raise ConfigurationError(
            f"`{name}` is {dt!r}, too small for the times of the span from {t0!r} to {t1!r}: "
            f"the solve takes no step of at most {smallest:.3g} there (a few rounding "
            f"units of t = {far!r} or of the span), where t + dt loses the step to "
            f"rounding. {advice}"
        )


def _flattened(
    f: VectorField, y0: State, controller: AbstractController
) -> tuple[FlatField, Tensor, Callable[[Tensor], State] | None, AbstractController]:
    """The field on one flat tensor, the flat ``y0``, how to unpack a flat state into
    ``y0``'s tuple (``None`` for a tensor ``y0``), and the controller, whose norm takes
    the flat state: by default each tensor of a tuple weighs by its size."""
    if not isinstance(y0, tuple):
        _check_y0(y0, "y0")
        return f, y0, None, controller  # type: ignore[return-value]
    if len(y0) == 0:
        raise ValueError("`y0` is an empty tuple; the state needs at least one tensor.")
    for i, y in enumerate(y0):
        _check_y0(y, f"y0[{i}]")
    flat0, unpack, pack = _packing(y0)

    def f_flat(t: Tensor, y: Tensor) -> Tensor:
        return pack(f(t, unpack(y)))

    copy_callbacks(f_flat, f, unpack)  # torchdiffeq's step callbacks, if `f` has any
    if isinstance(controller, PIDController) and controller.norm is None:
        controller = replace(controller, norm=_mixed_norm([y.numel() for y in y0]))
    elif isinstance(controller, PIDController):
        controller = _unpacking(controller, unpack)
    return f_flat, flat0, unpack, controller


def _unpacking(controller: PIDController, unpack: Callable[[Tensor], State]) -> PIDController:
    """``controller`` with its norm, written for a tuple state, taking the flat one."""
    user_norm = controller.norm
    assert user_norm is not None
    return replace(controller, norm=lambda x: user_norm(unpack(x)))


def _check_resolution(
    dtype: torch.dtype, controller: AbstractController, gradient: AbstractGradient
) -> None:
    """Refuse a relative tolerance below a half-precision state's resolution.

    A half-precision state is rounded by a relative eps / 2 at every step, an error
    the embedded estimate never sees: below eps a tolerance cannot be held, and far
    below it the steps shrink until they no longer change the state (bfloat16 at
    rtol 1e-7 returned y0 unchanged). The adjoint's backward solve has y0's dtype too.
    """
    if dtype not in (torch.float16, torch.bfloat16):
        return
    eps = torch.finfo(dtype).eps
    back = getattr(gradient, "controller", None)  # Adjoint's backward controller
    for name, tol in (("rtol", controller), ("adjoint_rtol", back)):
        if isinstance(tol, PIDController) and tol.rtol < eps:
            raise ConfigurationError(
                f"`{name}` is {tol.rtol!r}, below the resolution of the state's dtype "
                f"{dtype} (eps = {eps!r}): every step rounds the state by up to "
                "eps / 2, so the solve cannot hold that tolerance, and the steps shrink "
                f"until they no longer move the state. Loosen it to `{name}` >= {eps!r}, "
                "or solve in float32 (`y0.float()`)."
            )


def _output_times(saveat: SaveAt, t0: float, t1: float) -> list[float]:
    """The times of the outputs: ``saveat.ts``, checked to be monotone in the direction
    of integration and within the span, and ``t1`` after them with ``saveat.t1``."""
    direction = 1.0 if t1 >= t0 else -1.0
    out_ts = _as_floats("saveat.ts", saveat.ts)
    for a, b in itertools.pairwise(out_ts):
        if (b - a) * direction < 0:
            raise ConfigurationError(
                f"`saveat.ts` must be monotone in the direction of integration "
                f"({'increasing' if direction > 0 else 'decreasing'}), got {out_ts}."
            )
    lo, hi = min(t0, t1), max(t0, t1)
    if out_ts and not (lo <= min(out_ts) and max(out_ts) <= hi):
        raise ConfigurationError(f"`saveat.ts` must lie within [{lo}, {hi}], got {out_ts}.")
    if saveat.t1 and (not out_ts or out_ts[-1] != t1):
        out_ts.append(t1)
    return out_ts


def _jump_times(jump_ts: Times | None) -> list[float]:
    """``jump_ts`` as floats; refused where it requires grad, as no gradient method
    differentiates the times of the field's discontinuities."""
    if jump_ts is not None and not isinstance(jump_ts, Tensor):
        jump_ts = list(jump_ts)  # read once; an element may be a tensor too
    parts = [jump_ts] if isinstance(jump_ts, Tensor) else (jump_ts or [])
    if torch.is_grad_enabled() and any(isinstance(v, Tensor) and v.requires_grad for v in parts):
        raise ConfigurationError(
            "`jump_ts` requires grad, but no gradient method differentiates the times of "
            "the field's discontinuities (they are where `func` jumps, not where the "
            "solver steps); pass `jump_ts.detach()`."
        )
    return _as_floats("jump_ts", jump_ts)


def _times_tensor(ts: Times | None, n: int, t1: float) -> Tensor | None:
    """``saveat.ts`` as the tensor its gradient flows to, ``t1`` joined as a constant
    where :func:`_output_times` appended it (``n`` outputs); ``None`` for a list."""
    if not isinstance(ts, Tensor):
        return None
    if ts.numel() == n:
        return ts
    end = torch.tensor([t1], dtype=ts.dtype, device=ts.device)
    return torch.cat([ts.reshape(-1), end])


def _failure(run: LoopResult, t1: float, throw: bool) -> str:
    """What a solve that stopped before ``t1`` says (nothing for one that got there),
    raised as :class:`SolverError` with ``throw``."""
    if run.status == Status.SUCCESS:
        return ""
    message = f"solve() stopped at t = {run.t_final!r} before reaching t1 = {t1!r}: {run.status}."
    message += f" {run.message}" if run.message else ""
    if throw:
        raise SolverError(message, status=run.status, t=run.t_final)
    return message


def _outputs(
    run: LoopResult,
    out_ts: Sequence[float],
    flat0: Tensor,
    y0: State,
    direction: float,
    per_sample: bool = False,
) -> State:
    """The outputs stacked on a new first dimension, in ``y0``'s form; NaN at the times a
    failed solve (``throw=False``) did not get to. With ``per_sample`` the loop has
    already put NaN where each sample did not get to: ``t_final`` is the least advanced
    sample's time, and a sample that went further keeps its outputs."""
    ys, status, t_reached = run.ys, run.status, run.t_final

    def reached(i: int, v: Tensor | None) -> bool:
        if v is None:
            return False
        if per_sample or status != Status.NONFINITE:
            return True
        return direction * out_ts[i] <= direction * t_reached

    done = [v for i, v in enumerate(ys) if reached(i, v) and v is not None]
    if not ys:
        stacked = flat0.new_empty((0, *flat0.shape))
    elif len(done) == len(ys):
        stacked = torch.stack(done)
    else:
        nan = torch.full_like(flat0, math.nan)
        stacked = torch.stack(
            [v if v is not None and reached(i, v) else nan for i, v in enumerate(ys)]
        )
    if not isinstance(y0, tuple):
        return stacked
    sizes = [y.numel() for y in y0]
    return tuple(
        p.reshape(len(out_ts), *y.shape)
        for p, y in zip(torch.split(stacked, sizes, dim=1), y0, strict=True)
    )

"""Terminal events and torchdiffeq's step callbacks, as the solve loop sees them.

An event solve runs the loop with the vector field wrapped in an :class:`_EventSearch`;
the loop's hooks (:func:`step_hooks`) check the event function after every accepted
step and find its root on the solver's dense output. The gradient of the event time
comes from the implicit function theorem (:class:`_EventTimeGradient`).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, final

import torch
from torch import Tensor

from ._controllers import _EPS, ConstantStepSize
from ._errors import ConfigurationError, Status, first_order
from ._gradients import (
    AbstractGradient,
    Autograd,
    FlatField,
    Kept,
    Loop,
    LoopResult,
    Problem,
    Stats,
    _failed,
    _parameters,
    as_solved,
    found_tensors,
    graph_leaves,
    training_modes,
)
from ._solvers import AbstractSolver, StepResult
from ._transforms import AUTOGRAD_ONLY, ReverseOnly
from ._transforms import apply as reverse_only

_MAX_ROOT_ITERATIONS = 200  # Illinois with bisection: ~10 typical, ~3 per bit at worst
_MAX_EXPONENT = 1024  # 2.0**1024 overflows a double
CALLBACKS = ("callback_step", "callback_accept_step", "callback_reject_step")
"""The step callbacks that the solve loop looks up on the vector field (torchdiffeq's)."""


@final
@dataclass(frozen=True)
class Event:
    """A terminal event: the solve stops where ``fn(t, y)`` changes sign.

    The event happens at the first time after ``t0`` where an element of
    ``fn(t, y)`` reaches zero or takes the opposite sign to the one it had at
    ``t0`` (an element that is zero at ``t0`` makes the event happen at ``t0``, as
    in torchdiffeq, whatever the inputs: its time has a zero gradient and the
    state there, ``y0``, the identity; one that is NaN at ``t0`` is refused with a
    ``ValueError``). The solve checks ``fn`` at the end of every
    accepted step and, once the sign has changed, finds the crossing on the
    solver's dense output by the Illinois method (regula falsi that halves a stale
    end's value, with a bisection step whenever the bracket shrinks slowly) down to
    the rounding of the time: the event time is as accurate as the solution is. A sign change that
    starts and ends inside one step (two crossings) goes unseen.

    With an event, :func:`solve` stops there: ``Solution.event_t`` holds the event
    time, ``t1`` may be ``math.inf`` (or ``-math.inf``) to integrate until the
    event, ``SaveAt(t1=True)`` saves the state at the event (in place of ``t1``),
    and the times of ``SaveAt.ts`` after the event are left out of ``Solution.ts``
    and ``Solution.ys``. The batch is one system: the first element to cross stops
    the whole solve.

    Gradients reach the event time through the implicit function theorem: with
    ``c(t) = fn(t, y(t))``, ``dt_e/dθ = -(∂fn/∂y ∂y/∂θ + ∂fn/∂θ) / (dc/dt)``; the
    state at the event moves with it by ``f(t_e, y_e) dt_e``. This holds for every
    gradient method; the tensors ``fn`` reads (an ``nn.Module``'s parameters, what
    a plain function closes over) get their share. An event that grazes zero
    (``dc/dt = 0``) has no gradient: it comes out infinite or NaN.

    Args:
        fn: the event function ``fn(t, y) -> Tensor``: ``t`` a 0-dim tensor in the
            state's dtype, ``y`` structured like ``y0``; any shape of result.

    Raises:
        TypeError: if ``fn`` is not callable.

    Example:
        >>> import math, torch, odecore
        >>> g = 9.81   # a ball dropped from 2 m hits the ground at sqrt(2 h / g)
        >>> sol = odecore.solve(lambda t, y: (y[1], torch.full_like(y[1], -g)),
        ...                     (torch.tensor(2.0, dtype=torch.float64),
        ...                      torch.tensor(0.0, dtype=torch.float64)),
        ...                     t0=0.0, t1=math.inf, solver=odecore.Tsit5(),
        ...                     event=odecore.Event(lambda t, y: y[0]))
        >>> abs(sol.event_t.item() - math.sqrt(2 * 2.0 / g)) < 1e-8
        True
    """

    fn: Callable[[Tensor, Any], Tensor]

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(
                f"`Event(fn=...)` must be a callable `fn(t, y) -> Tensor`, got "
                f"{type(self.fn).__name__}."
            )


# --- the solve loop's hooks -----------------------------------------------------------


class _EventSearch:
    """The vector field, plus what the loop needs to stop at an event.

    The loop recognises it (:func:`step_hooks`); it calls through to ``f``.
    ``value(t, y)`` is the combined event function: positive before the event.
    """

    def __init__(
        self,
        f: FlatField,
        value: Callable[[float, Tensor], float],
        *,
        callbacks: bool,
    ) -> None:
        self.f = f
        self.value = value
        self.callbacks = callbacks  # the step callbacks of `f` fire in this solve
        self.last = math.nan  # `value` at the start of the next step
        self.found: tuple[float, Tensor] | None = None  # (t_e, y_e)
        self.seen = False  # the loop took the hooks (odecore's loop, not a backend's)

    def __call__(self, t: Tensor, y: Tensor) -> Tensor:
        return self.f(t, y)

    def check(
        self,
        fe: Any,
        solver: AbstractSolver,
        direction: float,
        s: float,
        s_next: float,
        y: Tensor,
        f0: Tensor,
        step: StepResult,
    ) -> bool:
        """After an accepted step from ``s`` to ``s_next``: whether the event happened in
        it; if so, record its time and the state there (dense output, with a graph when
        grad mode is on)."""
        with torch.no_grad():
            c1 = self.value(direction * s_next, step.y1)
        if not c1 <= 0:  # NaN reads as "not yet"
            self.last = c1
            return False

        with torch.no_grad():
            read = solver.reader(fe, s, s_next, y, f0, step)  # the step's work done once

        def c(sigma: float) -> float:
            with torch.no_grad():
                return self.value(direction * sigma, read(sigma))

        s_e = _find_root(c, s, s_next, self.last, c1)
        (y_e,) = solver.interpolate(fe, s, s_next, y, f0, step, [s_e])
        self.found = (direction * s_e, y_e)
        return True


def _find_root(c: Callable[[float], float], a: float, b: float, ca: float, cb: float) -> float:
    """A root of ``c`` in ``(a, b]`` with ``c(a) > 0 >= c(b)``, to the rounding of the time.

    The Illinois method (regula falsi, halving the value kept at an end that stays
    twice), with a bisection step after three steps that did not halve the bracket.
    Returns the end with ``c <= 0``: the event has happened there.
    """
    side = 0  # the end the last iterate replaced: -1 for a, +1 for b
    slow = 0  # steps since the bracket last halved
    for _ in range(_MAX_ROOT_ITERATIONS):
        width = b - a
        if cb == 0.0 or width <= 4 * _EPS * max(abs(a), abs(b)):
            break
        m = (a * cb - b * ca) / (cb - ca) if cb != ca else math.nan
        if slow >= 3 or not a < m < b:
            m = 0.5 * (a + b)
            if not a < m < b:
                break
        cm = c(m)
        if not cm <= 0:
            if side == -1:
                cb *= 0.5
            a, ca, side = m, cm, -1
        else:
            if side == 1:
                ca *= 0.5
            b, cb, side = m, cm, 1
        slow = 0 if b - a <= 0.5 * width else slow + 1
    return b


class StepHooks:
    """What the loop calls around each step: the step callbacks and the event search.

    Times are the caller's; ``dt`` is the step's length (positive), as in torchdiffeq.
    """

    def __init__(
        self,
        fe: Any,
        solver: AbstractSolver,
        direction: float,
        callbacks: Sequence[Callable[..., object] | None],
        search: _EventSearch | None,
    ) -> None:
        self.fe = fe
        self.solver = solver
        self.direction = direction
        self.on_step, on_accept, on_reject = callbacks
        # torchdiffeq calls these for adaptive methods only, and warns that it will not.
        if not solver.adaptive:
            warn_unsupported_callbacks(
                type(solver).__name__,
                [name for name, c in zip(CALLBACKS[1:], (on_accept, on_reject)) if c is not None],
                FIXED_STEPS,
            )
        self.on_accept = on_accept if solver.adaptive else None
        self.on_reject = on_reject if solver.adaptive else None
        self.search = search

    def _call(self, callback: Callable[..., object], s: float, s_next: float, y: Tensor) -> None:
        fe = self.fe
        t = torch.tensor(self.direction * s, dtype=fe.time_dtype, device=fe.device)
        callback(t, y, torch.tensor(s_next - s, dtype=fe.time_dtype, device=fe.device))

    def before(self, s: float, s_next: float, y: Tensor) -> None:
        """Before the step from ``s`` to ``s_next`` (loop time)."""
        if self.on_step is not None:
            self._call(self.on_step, s, s_next, y)

    def accepted(self, s: float, s_next: float, y: Tensor, f0: Tensor, step: StepResult) -> bool:
        """After an accepted step; ``True`` stops the loop (the event happened)."""
        if self.on_accept is not None:
            self._call(self.on_accept, s, s_next, y)
        if self.search is None:
            return False
        return self.search.check(self.fe, self.solver, self.direction, s, s_next, y, f0, step)

    def rejected(self, s: float, s_next: float, y: Tensor) -> None:
        """After a rejected step."""
        if self.on_reject is not None:
            self._call(self.on_reject, s, s_next, y)


FIXED_STEPS = (
    "it takes fixed steps, none accepted or rejected by a controller (torchdiffeq does not "
    "call them either); `callback_step` runs before every step"
)
"""Why a fixed-step solve calls neither ``callback_accept_step`` nor ``callback_reject_step``."""


def warn_unsupported_callbacks(solver: str, names: Sequence[str], why: str) -> None:
    """torchdiffeq's warning about step callbacks that a solve will not call, one for
    all of them, in its words, with odecore's reason after them."""
    if names:
        listed = ", ".join(repr(name) for name in sorted(names))
        warnings.warn(
            f"Solver '{solver}' does not support callbacks {{{listed}}}: {why}.", stacklevel=3
        )


def step_hooks(
    f: Callable[..., Any], fe: Any, solver: AbstractSolver, direction: float
) -> StepHooks | None:
    """The hooks of one loop over the field ``f``: ``None`` when it has neither step
    callbacks nor an event (the loop then does nothing more per step)."""
    search = f if isinstance(f, _EventSearch) else None
    owner = f if search is None else (search.f if search.callbacks else None)
    callbacks = [getattr(owner, name, None) for name in CALLBACKS]
    if search is None and all(c is None for c in callbacks):
        return None
    if search is not None:
        search.seen = True
    return StepHooks(fe, solver, direction, callbacks, search)


def copy_callbacks(target: Callable[..., Any], source: object, unpack: Callable[..., Any]) -> None:
    """Give the flat field ``target`` the step callbacks of the user's field ``source``,
    with the state unpacked to the user's structure; the adjoint's callbacks as they are."""
    for name in CALLBACKS:
        callback = getattr(source, name, None)
        if callback is not None:

            def flat(t: Tensor, y: Tensor, dt: Tensor, _cb: Any = callback) -> object:
                return _cb(t, unpack(y), dt)

            setattr(target, name, flat)
        adjoint = getattr(source, name + "_adjoint", None)
        if adjoint is not None:
            setattr(target, name + "_adjoint", adjoint)


# --- the event solve ------------------------------------------------------------------


def _unpacker(y0: Tensor | tuple[Tensor, ...]) -> Callable[[Tensor], Any]:
    if not isinstance(y0, tuple):
        return lambda y: y
    shapes = [y.shape for y in y0]
    sizes = [y.numel() for y in y0]
    return lambda y: tuple(p.view(s) for p, s in zip(torch.split(y, sizes), shapes))


def combined_event(
    fn: Callable[[Tensor, Any], Tensor], t0: float, y0: Tensor, unpack: Callable[[Tensor], Any]
) -> tuple[CombinedEvent, bool]:
    """The event function on the flat state as one scalar, positive before the event,
    and whether the event happens at ``t0`` already.

    Each element is multiplied by its sign at ``t0``, and the minimum taken (the
    first element to cross decides), as torchdiffeq combines them.
    """
    t = torch.tensor(t0, dtype=y0.dtype, device=y0.device)
    with torch.no_grad():
        g0 = fn(t, unpack(y0))
    if not isinstance(g0, Tensor) or not g0.is_floating_point() or g0.numel() == 0:
        got = (
            f"a {g0.dtype} tensor of shape {tuple(g0.shape)}"
            if isinstance(g0, Tensor)
            else (type(g0).__name__)
        )
        raise TypeError(
            f"the event function must return a non-empty floating tensor, got {got}; "
            "return e.g. `y[..., 0]` (an element crossing zero is the event)."
        )
    if bool(g0.isnan().any()):  # no sign to cross from: the event would never or always be
        raise ValueError(
            f"the event function is NaN at t0 = {t0!r} (got {g0.tolist()}); it needs a "
            "value at the start whose sign can change."
        )
    at_start = bool((g0 == 0).any())
    return CombinedEvent(fn, unpack, torch.sign(g0), at_start), at_start


@dataclass(frozen=True, eq=False)
class CombinedEvent:
    """The combined event function ``value(t, y)`` of :func:`combined_event`.

    Attributes:
        fn: the user's event function.
        unpack: the flat state to the user's structure.
        sign0: the sign of each element of ``fn`` at ``t0``.
        at_start: an element is zero at ``t0``: the event happens there, whatever
            the inputs (its time does not move with them).
    """

    fn: Callable[[Tensor, Any], Tensor]
    unpack: Callable[[Tensor], Any]
    sign0: Tensor
    at_start: bool

    def __call__(self, t: Tensor, y: Tensor) -> Tensor:
        return (self.fn(t, self.unpack(y)) * self.sign0).min()


@dataclass
class EventRun:
    """An event solve's outcome: the loop's result at ``ts``, and the event time."""

    result: LoopResult
    ts: list[float]
    event_t: Tensor | None


def run_event(
    event: Event,
    gradient: AbstractGradient,
    make_loop: Callable[[list[float], list[float], int], Loop],
    jumps: list[float],
    steps: list[float],
    max_steps: int,
    problem: Problem,
    y0: Tensor | tuple[Tensor, ...],
    save_end: bool,
    time_gradient: bool,
) -> EventRun:
    """Solve ``problem`` until the event or ``t1``, whichever comes first.

    ``problem.ts`` are the output times, the last one ``t1`` when ``save_end``.
    A first solve, with ``problem.f`` wrapped to stop at the event, locates it: with
    backpropagation (or no gradient at all) it is the solve itself, outputs and
    state at the event from the dense output. Any other gradient method then solves
    again from ``t0`` to the event time, which is now an ordinary end time. With
    ``time_gradient`` the state at the event and its time carry the gradient of the
    event time (implicit function theorem).
    """
    p = problem
    direction = 1.0 if p.t1 >= p.t0 else -1.0
    unpack = _unpacker(y0)
    value, at_start = combined_event(event.fn, p.t0, p.y0, unpack)
    dtype, device = p.y0.dtype, p.y0.device

    def scalar(t: float, y: Tensor) -> float:
        with torch.no_grad():
            return float(value(torch.tensor(t, dtype=dtype, device=device), y))

    single = isinstance(gradient, Autograd) or not torch.is_grad_enabled()
    user_ts = p.ts[:-1] if save_end else list(p.ts)
    search = _EventSearch(p.f, scalar, callbacks=single)
    run: LoopResult
    y_end: Tensor | None = None
    if at_start:
        search.found = (p.t0, p.y0)
        run = LoopResult([p.y0 for t in user_ts if t == p.t0], Stats(), Status.SUCCESS, p.t0)
    else:
        with contextlib.nullcontext() if single else torch.no_grad():
            run, y_end = _locate(
                search, make_loop, jumps, steps, max_steps, p, user_ts if single else []
            )
    if search.found is None:
        # Without the event the solve is an ordinary one; a failed one to a finite t1
        # fails again at the same step, with the outputs it reached and their graph.
        if not single and (run.status == Status.SUCCESS or math.isfinite(p.t1)):
            run = _add_stats(gradient.run(make_loop(jumps, steps, max_steps), p), run.stats)
        elif not single:  # failed on the way to an infinite t1, outputs not kept
            reached = _reached(gradient, search, make_loop, jumps, steps, max_steps, p, user_ts)
            run = _add_stats(reached, run.stats)
        else:
            ends = [y_end] if save_end and run.status == Status.SUCCESS else []
            ys = [*run.ys, *ends]
            run = replace(run, ys=ys + [None] * (len(p.ts) - len(ys)))
        return EventRun(run, list(p.ts), None)

    t_e, y_e = search.found
    kept = [t for t in user_ts if direction * t <= direction * t_e]
    ts = [*kept, t_e]
    if single or at_start:  # at t0 there is nothing to solve again: the state is y0
        ys = [*run.ys[: len(kept)], y_e]
    else:
        ts_tensor = p.ts_tensor
        if ts_tensor is not None:
            end = torch.tensor([t_e], dtype=ts_tensor.dtype, device=ts_tensor.device)
            ts_tensor = torch.cat([ts_tensor.reshape(-1)[: len(kept)], end])
        second = replace(p, t1=t_e, ts=ts, ts_tensor=ts_tensor)
        run = _add_stats(gradient.run(make_loop(jumps, steps, max_steps), second), run.stats)
        if run.status != Status.SUCCESS:
            return EventRun(run, ts if save_end else kept, None)
        ys = list(run.ys)
    t_tensor = torch.tensor(t_e, dtype=dtype, device=device)
    end_state = ys[-1]
    if time_gradient and end_state is not None:
        t_tensor, end_state = reroute(p.f, value, t_tensor, end_state, p.module)
        ys[-1] = end_state
    if not save_end:
        ts, ys = kept, ys[:-1]
    return EventRun(replace(run, ys=ys, status=Status.SUCCESS, t_final=t_e), ts, t_tensor)


def _reached(
    gradient: AbstractGradient,
    search: _EventSearch,
    make_loop: Callable[[list[float], list[float], int], Loop],
    jumps: list[float],
    steps: list[float],
    max_steps: int,
    p: Problem,
    ts: list[float],
) -> LoopResult:
    """The outputs at ``ts`` of an event search to an infinite ``t1`` that failed
    (``max_steps``, a non-finite state) before the event, for a gradient method that
    located it without outputs: the same search again, which fails at the same step,
    with the outputs it reaches, as backprop's search keeps them. The method cannot
    differentiate a solve that failed, so their backward pass raises
    (:func:`_failed`), as after a failed solve to a finite ``t1``; the tensors they
    depend on are found as the method finds them."""
    given = getattr(gradient, "params", None)
    reads, f = _parameters(given, p)
    again = _EventSearch(f, search.value, callbacks=False)
    with torch.no_grad():
        run, _ = _locate(again, make_loop, jumps, steps, max_steps, p, ts)
    params = found_tensors(given, p.module, reads)
    run = replace(run, ys=run.ys + [None] * (len(p.ts) - len(run.ys)))
    return _failed(run, p, params, type(gradient).__name__)


def _windows(t0: float, t1: float, dt0: float | None) -> Iterator[float]:
    """The ends of the solves that cover ``[t0, t1]``: ``t1`` alone when finite, else
    ends at ``t0 + D (2^k - 1)`` (multiples of a constant step ``dt0``) as long as a
    float holds them."""
    if math.isfinite(t1):
        yield t1
        return
    direction = 1.0 if t1 > t0 else -1.0
    unit = max(1.0, abs(t0))
    if dt0 is not None:
        unit = abs(dt0) * math.ceil(unit / abs(dt0))
    for k in range(1, _MAX_EXPONENT):  # until the ends overflow a float
        end = t0 + direction * unit * float(2**k - 1)
        if not math.isfinite(end):
            return
        yield end


def _locate(
    search: _EventSearch,
    make_loop: Callable[[list[float], list[float], int], Loop],
    jumps: list[float],
    steps: list[float],
    max_steps: int,
    p: Problem,
    ts: list[float],
) -> tuple[LoopResult, Tensor | None]:
    """Run the loop from ``t0`` until the event or ``t1`` (a sequence of solves when
    ``t1`` is infinite); the outputs at ``ts`` up to there, and the state at the end
    of the last solve."""
    direction = 1.0 if p.t1 >= p.t0 else -1.0
    constant = isinstance(p.controller, ConstantStepSize)
    a, y, dt0 = p.t0, p.y0, p.dt0
    search.last = search.value(a, y)
    stats: Stats | None = None
    ys: list[Tensor | None] = []
    ends: list[float] = []
    remaining = max_steps
    for b in _windows(p.t0, p.t1, p.dt0 if constant else None):
        if remaining < 1:
            status = Status.MAX_STEPS_REACHED
            message = f"The event did not happen within `max_steps` = {max_steps} steps."
            return LoopResult(ys, stats or Stats(), status, a, ends, message), None
        inside = [t for t in ts if direction * a < direction * t <= direction * b]
        inside = [t for t in ts if t == p.t0] + inside if a == p.t0 else inside
        loop = make_loop(jumps, steps, remaining)
        end_state: list[Tensor] = []  # the state at the last step end, which is b

        def keep(t: float, y_t: Tensor, end_state: list[Tensor] = end_state) -> None:
            end_state[:] = [y_t]

        run = loop(
            search, y, a, b, [*inside, b], p.solver, p.controller, dt0,
            on_step=keep, times=p.times(),
        )  # fmt: skip
        if not search.seen:
            raise ConfigurationError(
                "`event` needs odecore's own solve loop; SciPy's methods cannot stop at an "
                "event. Use an odecore solver such as `Dopri5()`."
            )
        stats = run.stats if stats is None else _sum_stats(stats, run.stats)
        ys.extend(run.ys[: len(inside)])
        ends.extend(run.step_ends)
        remaining -= run.stats.n_steps
        if run.status != Status.SUCCESS or search.found is not None or b == p.t1:
            message = run.message
            if run.status == Status.MAX_STEPS_REACHED and not math.isfinite(p.t1):
                message = f"The event did not happen within `max_steps` = {max_steps} steps."
            result = LoopResult(ys, stats, run.status, run.t_final, ends, message)
            return result, run.ys[-1]
        # The state at the step end b (not the output at b: with time gradients a
        # window's end moves with its steps, as the next window's start does).
        y = end_state[-1]
        if not constant and len(run.step_ends) >= 1:
            last = [a, *run.step_ends][-2:]
            dt0 = abs(last[1] - last[0])
        a = b
    # The windows ran out of floats (a field that lets the steps grow without bound,
    # such as a zero one): no number of steps goes further.
    message = (
        f"The event did not happen by t = {a!r}, the last time of the search before a "
        "float overflows; more steps would not reach it."
    )
    return LoopResult(ys, stats or Stats(), Status.MAX_STEPS_REACHED, a, ends, message), None


def _sum_stats(into: Stats, more: Stats) -> Stats:
    for spec in fields(Stats):
        setattr(into, spec.name, getattr(into, spec.name) + getattr(more, spec.name))
    return into


def _add_stats(run: LoopResult, more: Stats) -> LoopResult:
    """``run`` with the counts of the locating solve added (in place: a gradient
    method may still add its backward counts to ``run.stats``)."""
    _sum_stats(run.stats, more)
    return run


# --- the gradient through the event time ----------------------------------------------


@dataclass
class _EventSpec:
    f: FlatField
    value: Callable[[Tensor, Tensor], Tensor]
    fixed: bool = False  # the event is at t0 whatever the inputs: no time gradient
    module: torch.nn.Module | None = None  # the field's, evaluated as the solve found it
    modes: tuple[tuple[torch.nn.Module, bool], ...] = ()


class _EventTimeGradient(ReverseOnly):
    """``(t_e, y_e) -> (t_e, y_e)``, whose backward adds the event time's gradient.

    With ``c(t, y)`` the event function (zero at the event) and ``f`` the field,
    ``dc/dt = ∂c/∂t + ∂c/∂y f``; a loss ``L(t_e, y(t_e))`` sees
    ``dL/dt_e = ∂L/∂t_e + ∂L/∂y f``, and the event time moves by
    ``-(∂c/∂y δy + ∂c/∂θ δθ) / (dc/dt)`` (implicit function theorem). So the
    gradient of the state becomes ``∂L/∂y - ∂c/∂y dL/dt_e / (dc/dt)``, and the
    event function's parameters get ``-∂c/∂θ dL/dt_e / (dc/dt)``.
    """

    what = "The gradient of a solve that an event ends"
    instead = f"{AUTOGRAD_ONLY}, or solve to a fixed end time."

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, spec: _EventSpec, t_e: Tensor, y_e: Tensor, *params: Tensor
    ) -> tuple[Tensor, Tensor]:
        ctx.spec = spec
        ctx.kept = Kept(params)
        ctx.save_for_backward(t_e, y_e)
        return t_e.clone(), y_e.clone()

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_t: Tensor, grad_y: Tensor
    ) -> tuple[Tensor | None, ...]:
        spec: _EventSpec = ctx.spec
        t_e, y_e = ctx.saved_tensors
        params = ctx.kept.get()
        if spec.fixed:  # t_e = t0 and y_e = y0 for all inputs: the identity
            return (None, None, grad_y, *(None for _ in params))
        first_order(
            "The gradient of a solve that an event ends",
            "For higher-order gradients, solve to a fixed end time.",
        )
        with as_solved(spec.module, spec.modes), torch.enable_grad():
            t = t_e.detach().to(y_e.dtype).requires_grad_(True)
            y = y_e.detach().requires_grad_(True)
            c = spec.value(t, y)
            dc_t, dc_y, *dc_params = torch.autograd.grad(c, (t, y, *params), allow_unused=True)
            with torch.no_grad():
                f = spec.f(t.detach(), y_e.detach())
        with torch.no_grad():
            dc_t = torch.zeros_like(t) if dc_t is None else dc_t
            dc_y = torch.zeros_like(y) if dc_y is None else dc_y
            dcdt = dc_t + (dc_y * f).sum()
            total = grad_t.to(dcdt.dtype) + (grad_y * f).sum()
            factor = -total / dcdt
            grad_state = grad_y + dc_y * factor
            grad_params = [None if g is None else g * factor.to(g.dtype) for g in dc_params]
        return (None, None, grad_state, *grad_params)


def reroute(
    f: FlatField,
    value: Callable[[Tensor, Tensor], Tensor],
    event_t: Tensor,
    state: Tensor,
    module: torch.nn.Module | None = None,
) -> tuple[Tensor, Tensor]:
    """``(event_t, state)`` with the event time's gradient added by the implicit
    function theorem (flat state, caller's time). The event function's own tensors
    (a module's parameters, what a plain function closes over) get their share: they
    are found by one evaluation at the event whose graph is walked. The backward pass
    evaluates ``f`` (whose module is ``module``) and the event function in the
    training modes they have now, at the solve (:func:`as_solved`).

    An event at ``t0`` because an element of the event function is zero there
    (``value.at_start``) is at ``t0`` for all inputs: its time has a zero gradient and
    the state there is ``y0``, whose gradient passes unchanged (the implicit function
    theorem would divide 0 by 0 there: the combined function is zero near ``t0``)."""
    fixed = isinstance(value, CombinedEvent) and value.at_start
    params: tuple[Tensor, ...] = ()
    if torch.is_grad_enabled() and not fixed:
        with torch.enable_grad():
            params = graph_leaves(value(event_t.detach().to(state.dtype), state.detach()))
    out: tuple[Tensor, Tensor] = reverse_only(
        _EventTimeGradient,
        _EventSpec(f, value, fixed, module, training_modes(module, getattr(value, "fn", None))),
        event_t,
        state,
        *params,
    )
    return out

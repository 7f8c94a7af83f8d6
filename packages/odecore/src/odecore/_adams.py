"""Fixed-step Adams methods under torchdiffeq's names: ``explicit_adams``,
``implicit_adams`` and ``fixed_adams``.

A multistep method needs the derivatives of the last few steps, which the one-step
interface of :class:`AbstractSolver` (``step(f, t0, t1, y0, f0)``) does not carry, and
adding that state to the solve loop would touch every Runge-Kutta method for the
sake of three fixed-step ones. These methods are therefore a self-contained
fixed-grid integrator: :class:`AdamsBashforthMoulton` (frozen data: predictor only or
predictor-corrector, the highest order, the corrector's iterations) steps over the
grid that :func:`odeint` builds for every fixed-step method (``step_size``,
``n_steps``, ``grid_constructor``, or one step per interval of ``t``), with plain
tensor operations, so backpropagation runs through the steps.

The scheme is torchdiffeq's: the first two steps are Runge-Kutta 4 (the 3/8 rule);
then step ``n`` uses the ``k = min(n + 1, max_order - 1)`` latest derivatives,
Adams-Bashforth with ``k`` steps (order ``k``) and, for the implicit methods, an
Adams-Moulton corrector through ``k + 1`` points (order ``k + 1``), iterated as a
fixed point at most ``max_iters`` times, until successive increments agree within
``rtol`` and ``atol``. The coefficients are computed exactly with fractions (the
integrals of the Lagrange basis polynomials), for any order. Between grid points the
output is the cubic Hermite interpolant on the step's ends.

A corrector that is not within the tolerance of its fixed point after ``max_iters``
iterations (judged, as :class:`~odecore.Newton` judges its iteration, by the last
update and the contraction rate ``theta``: ``theta / (1 - theta)`` times the update
within the tolerance) warns once, naming the step, and goes on, as torchdiffeq does.
One whose update stops shrinking (grows twice in a row, or ends no smaller than it
began) has diverged, where torchdiffeq warns and goes on with a meaningless value: it
ends the solve at the step's start with
``Status.NEWTON_FAILED``; a non-finite state (or a non-finite value in the corrector)
ends it at the last finite grid point with ``Status.NONFINITE``. :meth:`run` returns
the outputs up to there and NaN after; :meth:`integrate` (``odeint``) raises
:class:`~odecore.SolverError`, naming the step size, the time and the reason.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any, final

import torch
from torch import Tensor

from ._errors import ConfigurationError, SolverError, Status
from ._solve import _check_derivative, _FiniteRecord, _packing

MAX_ORDER = 12
"""The highest ``max_order`` (torchdiffeq's bound, and its default)."""
EXPLICIT_MAX_ORDER = 5
"""``explicit_adams``' default ``max_order`` (Adams-Bashforth 4), not torchdiffeq's 12.

Adams-Bashforth's stability interval on the negative real axis shrinks with the
order, to about ``-0.003`` for the 11 steps that ``max_order=12`` allows: there
``y' = -y`` with ``step_size=0.01`` over ``[0, 1]`` grows to ``0.735`` where
``exp(-1) = 0.368``, which torchdiffeq returns as its answer. At order 4 the interval
is about ``-0.3`` (steps up to 30 % of the time scale), and the error on that problem
is 1e-10. ``options={"max_order": 12}`` asks for torchdiffeq's scheme.
"""
_MIN_ORDER = 4  # below it, torchdiffeq's Adams methods are RK4 throughout


def _lagrange_weights(nodes: tuple[int, ...]) -> tuple[Fraction, ...]:
    """``int_0^1 L_j(u) du`` for the Lagrange basis ``L_j`` on integer ``nodes``."""
    weights = []
    for j, node in enumerate(nodes):
        poly = [Fraction(1)]  # coefficients of prod_{i != j} (u - x_i), lowest first
        denom = Fraction(1)
        for i, other in enumerate(nodes):
            if i == j:
                continue
            shifted = [Fraction(0), *poly]
            poly = [s - other * p for s, p in zip(shifted, [*poly, Fraction(0)], strict=True)]
            denom *= node - other
        integral = sum((c / (d + 1) for d, c in enumerate(poly)), Fraction(0))
        weights.append(integral / denom)
    return tuple(weights)


@cache
def bashforth_coefficients(k: int) -> tuple[Fraction, ...]:
    """The ``k``-step Adams-Bashforth weights of ``f_n, f_{n-1}, ..., f_{n-k+1}`` (order ``k``).

    Args:
        k: the number of steps, at least 1.

    Returns:
        The weights, exact; ``y_{n+1} = y_n + h * sum(w_j f_{n-j})``.
    """
    if k < 1:
        raise ValueError(f"`k` must be at least 1, got {k!r}.")
    return _lagrange_weights(tuple(-j for j in range(k)))


@cache
def moulton_coefficients(k: int) -> tuple[Fraction, ...]:
    """The Adams-Moulton weights of ``f_{n+1}, f_n, ..., f_{n-k+2}`` (``k`` points, order ``k``).

    Args:
        k: the number of points, at least 1 (1 is backward Euler).

    Returns:
        The weights, exact; ``y_{n+1} = y_n + h * sum(w_j f_{n+1-j})``.
    """
    if k < 1:
        raise ValueError(f"`k` must be at least 1, got {k!r}.")
    return _lagrange_weights(tuple(1 - j for j in range(k)))


Field = Callable[[Tensor, Tensor], Tensor]
StepCallback = Callable[[Tensor, Tensor, Tensor], object]
"""``on_step(t0, y0, dt)``: called before a step of length ``dt`` from ``(t0, y0)``."""


@final
@dataclass(frozen=True)
class AdamsBashforthMoulton:
    """torchdiffeq's fixed-grid Adams methods as data; :meth:`integrate` runs one.

    Args:
        implicit: with the Adams-Moulton corrector (``implicit_adams``,
            ``fixed_adams``); ``False``: Adams-Bashforth alone (``explicit_adams``).
        max_order: the highest order, 4 to 12: at most ``max_order - 1`` past
            derivatives (torchdiffeq's default 12; ``explicit_adams`` defaults to
            :data:`EXPLICIT_MAX_ORDER`, 5, whose stability region holds the usual steps).
        max_iters: the corrector's fixed-point iterations per step, at most
            (torchdiffeq's default 4).
        perturb: torchdiffeq's option: the field is evaluated at one-sided limits of
            the grid points, from after a step's start (its derivative there, the
            history) and from before its end (the corrector, RK4's last stage).

    Raises:
        ConfigurationError: a ``max_order`` or ``max_iters`` out of range, or a
            ``perturb`` that is not a bool.
    """

    implicit: bool = True
    max_order: int = MAX_ORDER
    max_iters: int = 4
    perturb: bool = False

    def __post_init__(self) -> None:
        order = self.max_order
        if (
            isinstance(order, bool)
            or not isinstance(order, int)
            or not (_MIN_ORDER <= order <= MAX_ORDER)
        ):
            raise ConfigurationError(
                f"The option `max_order` must be an integer from {_MIN_ORDER} to {MAX_ORDER}, "
                f"got {order!r}; below {_MIN_ORDER} the Adams methods are RK4 throughout: "
                "use method='rk4_38' for that."
            )
        iters = self.max_iters
        if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
            raise ConfigurationError(
                f"The option `max_iters` must be a positive integer, got {iters!r}."
            )
        if not isinstance(self.perturb, bool):
            raise ConfigurationError(
                f"The option `perturb` must be True or False, got {self.perturb!r}."
            )

    def integrate(
        self,
        f: Field,
        y0: Tensor,
        grid: Tensor,
        t: Tensor,
        rtol: float,
        atol: float,
        on_step: StepCallback | None = None,
    ) -> Tensor:
        """Step over ``grid`` and return the solution at the times ``t``.

        Args:
            f: the vector field ``f(t, y)`` on a flat state.
            y0: the state at ``grid[0]``.
            grid: the step ends, from ``t[0]`` to ``t[-1]``, strictly monotone.
            t: the output times, monotone like ``grid``.
            rtol: relative tolerance of the corrector's convergence test.
            atol: absolute tolerance of the corrector's convergence test.
            on_step: ``on_step(t0, y0, dt)`` before every step, ``dt`` its length
                (torchdiffeq's ``callback_step``).

        Returns:
            The solution at each time of ``t``, stacked on a new first dimension.

        Raises:
            SolverError: a step failed (see :meth:`run`); the message names the time
                reached, the status and, for the corrector, the step size and why.
        """
        done = self.run(f, y0, grid, t, rtol, atol, on_step)
        if done.status != Status.SUCCESS:
            raise SolverError(done.message, status=done.status, t=done.t_final)
        return done.ys

    def run(
        self,
        f: Field,
        y0: Tensor,
        grid: Tensor,
        t: Tensor,
        rtol: float,
        atol: float,
        on_step: StepCallback | None = None,
    ) -> AdamsRun:
        """:meth:`integrate`, with a failure as a status instead of an exception.

        A corrector that diverges ends the solve at the start of its step
        (``Status.NEWTON_FAILED``); a non-finite state or corrector value, at the last
        finite grid point (``Status.NONFINITE``). The outputs up to there are those of
        a solve that ends there; the later ones are NaN.

        Args:
            f, y0, grid, t, rtol, atol, on_step: as for :meth:`integrate`.

        Returns:
            The outputs at ``t``, the status, the last time reached and, after a
            failure, the message of the :class:`SolverError` that :meth:`integrate`
            raises.
        """
        # Output times on another grid move relative to it (not so on the grid `t`).
        moves = grid is not t and t.requires_grad and torch.is_grad_enabled()
        grid = grid.to(y0.dtype)
        times = [float(v) for v in grid.detach().tolist()]
        ys, fs, finite, failed = self.march(f, y0, grid, rtol, atol, on_step)
        first = finite.first_false()  # index into ys[1:]
        if first is not None:
            reached, status, why = (
                first,
                Status.NONFINITE,
                (
                    f"the state became non-finite in the step from t = {times[first]!r} to "
                    f"t = {times[first + 1]!r}."
                ),
            )
        elif failed is not None:
            n, status, why = failed
            reached, why = n, why.format(h=abs(times[n + 1] - times[n]), t=times[n])
        else:
            return AdamsRun(_read_out(f, grid, times, ys, fs, t, moves), Status.SUCCESS, times[-1])
        return _failed_run(f, grid, times, ys, fs, t, moves, reached, status, why)

    def march(
        self,
        f: Field,
        y0: Tensor,
        grid: Tensor,
        rtol: float,
        atol: float,
        on_step: StepCallback | None = None,
        until: Callable[[Tensor, Tensor], bool] | None = None,
    ) -> tuple[list[Tensor], list[Tensor], _FiniteRecord, tuple[int, Status, str] | None]:
        """The steps over ``grid``: the states at its points, the derivatives (all but
        the last point's), each state's extremes, and the failed step, its status and
        why (``{h}`` and ``{t}`` to fill in). ``until(t1, y1)``, after each step, ends
        the march there when true."""
        times = [float(v) for v in grid.detach().tolist()]
        after, before = f, f
        if self.perturb:  # one-sided limits at the grid points, as torchdiffeq's Perturb
            way = 1.0 if times[-1] >= times[0] else -1.0

            def after(t: Tensor, y: Tensor) -> Tensor:
                return f(torch.nextafter(t, t + way), y)

            def before(t: Tensor, y: Tensor) -> Tensor:
                return f(torch.nextafter(t, t - way), y)

        ys, fs = [y0], [after(grid[0], y0)]
        finite = _FiniteRecord(y0.detach().reshape(-1))  # each state's extremes, read once
        history: list[Tensor] = []  # newest first
        warned = False  # a corrector that ran out while contracting warns once
        for n in range(len(times) - 1):
            t0, t1 = grid[n], grid[n + 1]
            dt = t1 - t0
            y, f0 = ys[-1], fs[-1]
            if on_step is not None:
                on_step(t0, y, dt.abs())
            history = [f0, *history][: self.max_order - 1]
            k = len(history)
            if k < _MIN_ORDER - 1:
                dy = _rk4_38(f, t0, dt, y, f0, before)
            else:
                ab = bashforth_coefficients(k)
                dy = dt * sum((float(w) * fj for w, fj in zip(ab, history, strict=True)))
                if self.implicit:
                    am = moulton_coefficients(k + 1)
                    known = dt * sum((float(w) * fj for w, fj in zip(am[1:], history, strict=True)))
                    w = dt * float(am[0])
                    dy, failure = self._correct(before, t1, y, dy, w, known, rtol, atol)
                    if failure is not None and failure[0] is not None:
                        return ys, fs, finite, (n, failure[0], failure[1])
                    if failure is not None and not warned:
                        warned = True
                        h = abs(times[n + 1] - times[n])
                        warnings.warn(
                            failure[1].format(h=h, t=times[n]), RuntimeWarning, stacklevel=5
                        )
            ys.append(y + dy)
            finite.append(times[n + 1], ys[-1])
            if until is not None and until(t1, ys[-1]):
                break
            if n + 2 < len(times):
                fs.append(after(t1, ys[-1]))
        return ys, fs, finite, None

    def _correct(
        self,
        f: Field,
        t1: Tensor,
        y: Tensor,
        dy: Tensor,
        weight: Tensor,
        known: Tensor,
        rtol: float,
        atol: float,
    ) -> tuple[Tensor, tuple[Status | None, str] | None]:
        """The Adams-Moulton corrector's fixed-point iteration from the predicted ``dy``:
        the increment, and ``None`` or what went wrong: a status and a message with
        ``{h}`` and ``{t}`` to fill in. The status is ``None`` for an iteration that ran
        out while contracting: the caller warns, as torchdiffeq does, and goes on.

        The iterates are torchdiffeq's: at most ``max_iters``, until successive
        increments agree within the tolerance (a scaled update below 1). Stopped
        short of that, the increment is still taken as converged when the contraction
        rate ``theta`` says it is within the tolerance of the fixed point (``theta /
        (1 - theta)`` times the update at most 1, :class:`~odecore.Newton`'s test).
        An iteration whose update stops shrinking (grows twice in a row, or ends no
        smaller than it began) diverges: its value is no approximation of the step, and
        the step fails.
        """
        update, rate, growing, first = math.inf, math.nan, 0, math.inf
        iters = 0
        for iters in range(1, self.max_iters + 1):
            previous, last = dy, update
            dy = weight * f(t1, y + dy) + known
            tol = atol + rtol * torch.maximum(previous.abs(), dy.abs())
            scaled = (dy - previous).abs() / tol
            update = float(scaled.max().detach()) if scaled.numel() else 0.0  # one host sync
            first = update if iters == 1 else first
            if not math.isfinite(update):
                return dy, (
                    Status.NONFINITE,
                    "the Adams-Moulton corrector produced a non-finite value in the step "
                    f"of size h = {{h:.6g}} from t = {{t!r}} (iteration {iters}).",
                )
            if update < 1:
                return dy, None
            if math.isfinite(last):
                rate = update / last
                growing = growing + 1 if rate >= 1 else 0
                if growing >= 2:
                    break
        if rate < 1 and rate / (1 - rate) * update <= 1:
            return dy, None
        # Diverged: the update grew twice in a row, or is no smaller than the first. One
        # that grew once at the end, after shrinking, ran out: the scaled update of a
        # state that turns (a component through zero) need not shrink every iteration.
        diverged = growing >= 2 or (rate >= 1 and update >= first)
        rate_said = "" if math.isnan(rate) else f", contraction rate {rate:.3g}"
        said = (
            "the Adams-Moulton corrector (a fixed-point iteration, not Newton's) did not "
            f"converge at step size h = {{h:.6g}} (t = {{t!r}}) after {iters} iteration(s): "
            + (
                "the iteration diverged (its update stopped shrinking)"
                if diverged
                else f"the iterations ran out (`max_iters` = {self.max_iters})"
            )
            + f"; the last update's scaled norm was {update:.3g} (1 is the tolerance)"
            f"{rate_said}. A smaller `step_size` (or more `n_steps`), a larger `max_iters` "
            "or looser `rtol` and `atol` may converge"
        )
        if diverged:
            return dy, (Status.NEWTON_FAILED, said + ".")
        return dy, (None, said + "; the solve goes on with the unconverged value.")


@dataclass(frozen=True)
class AdamsRun:
    """What :meth:`AdamsBashforthMoulton.run` returns.

    Attributes:
        ys: the solution at each output time, stacked; NaN at the times not reached.
        status: how the solve ended.
        t_final: the last time reached: the end time, or where the solve stopped.
        message: empty on success, else the text of the :class:`SolverError` that
            :meth:`AdamsBashforthMoulton.integrate` raises.
    """

    ys: Tensor
    status: Status
    t_final: float
    message: str = ""


def _failed_run(
    f: Field,
    grid: Tensor,
    times: list[float],
    ys: list[Tensor],
    fs: list[Tensor],
    t: Tensor,
    moves: bool,
    reached: int,
    status: Status,
    why: str,
) -> AdamsRun:
    """The outputs of a solve that reached only ``grid[reached]``: as a solve that ends
    there, NaN after."""
    direction = 1.0 if times[-1] >= times[0] else -1.0
    end = times[reached]
    outs = [float(v) for v in t.detach().tolist()]
    n_in = sum(1 for tj in outs if (tj - end) * direction <= 0)
    nan = torch.full_like(ys[0], math.nan)
    if reached == 0:
        values = [ys[0] for _ in range(n_in)]
    else:
        del fs[reached + 1 :]
        kept = slice(0, reached + 1)
        values = list(_read_out(f, grid[kept], times[kept], ys[kept], fs, t[:n_in], moves))
    out = torch.stack([*values, *(nan for _ in range(len(outs) - n_in))])
    message = f"odeint stopped at t = {end!r} before reaching t1 = {times[-1]!r}: {status}. {why}"
    return AdamsRun(out, status, end, message)


def _rk4_38(f: Field, t0: Tensor, dt: Tensor, y: Tensor, k1: Tensor, f_end: Field) -> Tensor:
    """The increment of one step of RK4's 3/8 rule (``f_end`` for the stage at its end)."""
    k2 = f(t0 + dt / 3, y + dt * k1 / 3)
    k3 = f(t0 + 2 * dt / 3, y + dt * (k2 - k1 / 3))
    k4 = f_end(t0 + dt, y + dt * (k1 - k2 + k3))
    return dt * (k1 + 3 * (k2 + k3) + k4) / 8


def _read_out(
    f: Field,
    grid: Tensor,
    times: list[float],
    ys: list[Tensor],
    fs: list[Tensor],
    t: Tensor,
    moves: bool,
) -> Tensor:
    """The solution at ``t``: on the grid as stepped, between grid points cubic Hermite.

    With ``moves``, an output time on the grid is a time of its own that may move off
    it: its value is the grid point's, and its derivative that of the interpolant
    there, ``f`` at the grid point, times ``t[j] - grid[i]`` (zero-valued).
    """
    direction = 1.0 if times[-1] >= times[0] else -1.0
    out = []
    i = 0
    for j, tj in enumerate(float(v) for v in t.detach().tolist()):
        while i + 1 < len(times) - 1 and (times[i + 1] - tj) * direction < 0:
            i += 1
        on = i if tj == times[i] else i + 1 if tj == times[i + 1] else None
        if on is not None:
            if moves and len(fs) < len(ys) and on == len(ys) - 1:
                fs.append(f(grid[-1], ys[-1]))
            moved = (t[j].to(grid.dtype) - grid[on]) * fs[on] if moves else None
            out.append(ys[on] if moved is None else ys[on] + moved)
        else:
            if len(fs) < len(ys):  # the last step's end derivative, only when needed
                fs.append(f(grid[-1], ys[-1]))
            h = grid[i + 1] - grid[i]
            s = (t[j].to(grid.dtype) - grid[i]) / h
            out.append(cubic_hermite(s, h, ys[i], fs[i], ys[i + 1], fs[i + 1]))
    return torch.stack(out)


def cubic_hermite(
    s: Tensor | float, h: Tensor | float, y0: Tensor, f0: Tensor, y1: Tensor, f1: Tensor
) -> Tensor:
    """The cubic Hermite interpolant of a step of length ``h`` at the fraction ``s`` of
    it, from the values and derivatives at its ends."""
    h00, h10 = (1 + 2 * s) * (1 - s) ** 2, s * (1 - s) ** 2
    h01, h11 = s**2 * (3 - 2 * s), s**2 * (s - 1)
    return h00 * y0 + h10 * h * f0 + h01 * y1 + h11 * h * f1


ADAMS_METHODS: Mapping[str, AdamsBashforthMoulton] = {
    "explicit_adams": AdamsBashforthMoulton(implicit=False, max_order=EXPLICIT_MAX_ORDER),
    "implicit_adams": AdamsBashforthMoulton(implicit=True),
    "fixed_adams": AdamsBashforthMoulton(implicit=True),
}
"""torchdiffeq's fixed-grid Adams methods by name (``fixed_adams`` is ``implicit_adams``)."""

ADAMS_OPTIONS = (
    "step_size", "n_steps", "grid_constructor", "max_order", "perturb", "interp", "max_iters"
)  # fmt: skip
"""Options of the Adams methods (``interp`` only as ``"cubic"``, their interpolant;
``max_iters`` only for the implicit ones)."""


def adams_for(method: str, options: Mapping[str, Any]) -> AdamsBashforthMoulton:
    """The method ``method`` with the options ``max_order`` and ``max_iters`` applied.

    Raises:
        ConfigurationError: an unknown option, or ``max_iters`` for ``explicit_adams``.
    """
    base = ADAMS_METHODS[method]
    known = ADAMS_OPTIONS if base.implicit else ADAMS_OPTIONS[:-1]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigurationError(
            f"Unknown option(s) {unknown} for method {method!r}; known options: "
            f"{', '.join(known)} (a multistep method takes no `jump_t` or `step_t`)."
        )
    if options.get("interp", "cubic") != "cubic":
        raise ConfigurationError(
            f"The option `interp` of {method!r} can only be 'cubic', the cubic Hermite "
            "interpolant of the step's ends that the Adams methods read between grid "
            f"points (torchdiffeq's 'linear' is less accurate), got {options['interp']!r}."
        )
    return AdamsBashforthMoulton(
        implicit=base.implicit,
        max_order=options.get("max_order", base.max_order),
        max_iters=options.get("max_iters", base.max_iters),
        perturb=options.get("perturb", False),
    )


FlatState = Tensor | tuple[Tensor, ...]


def flat_field(
    func: Callable[[Tensor, Any], Any], y0: FlatState
) -> tuple[Field, Tensor, Callable[[Tensor], FlatState]]:
    """``func`` on one flat tensor, the flat ``y0``, and the map from flat outputs back.

    A tensor state passes through unchanged; a tuple of tensors is concatenated. What
    ``func`` returns is checked against the state as by the other methods: a tensor
    (a tuple of them) of the state's shape, dtype and device, or an error that says so.
    """
    if not isinstance(y0, tuple):
        shape, dtype, device = y0.shape, y0.dtype, y0.device

        def same(ys: Tensor) -> FlatState:
            return ys

        def checked(t: Tensor, y: Tensor) -> Tensor:
            out = func(t, y)
            if _check_derivative(out, shape, dtype, device):
                out = out.to(dtype)  # autocast
            return out  # type: ignore[no-any-return]

        return checked, y0, same
    shapes = [y.shape for y in y0]
    sizes = [math.prod(s) for s in shapes]
    dtype = y0[0].dtype
    if any(y.dtype != dtype for y in y0):
        raise TypeError(
            "The Adams methods need the tensors of a tuple state in one dtype, got "
            f"{[y.dtype for y in y0]}."
        )
    flat, _, pack = _packing(y0)

    def split(flat: Tensor) -> tuple[Tensor, ...]:
        parts = torch.split(flat, sizes, dim=-1)
        lead = flat.shape[:-1]
        return tuple(p.reshape((*lead, *s)) for p, s in zip(parts, shapes, strict=True))

    def field(t: Tensor, y: Tensor) -> Tensor:
        return pack(func(t, split(y)))

    return field, flat, split

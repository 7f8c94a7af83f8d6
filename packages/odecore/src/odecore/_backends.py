"""Backends: other libraries' solvers behind :func:`odecore.odeint`'s method names.

* ``scipy:<name>`` — one of :mod:`scipy.integrate`'s solvers takes the steps. It
  runs inside a solve loop with the signature of odecore's own (``Loop``), so a
  gradient method receives it like any loop; the facade pairs it with
  :class:`~odecore.Adjoint`, whose backward system scipy then integrates too.
* ``torchdiffeq:<name>`` — the whole call goes to torchdiffeq.

SciPy, NumPy and torchdiffeq are optional: they are imported when such a method is
used, never when odecore is.
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar, NoReturn, TypeVar, final

import torch
from torch import Tensor

from ._controllers import AbstractController, PIDController
from ._errors import ConfigurationError, SolverError, Status, first_order
from ._events import CALLBACKS, warn_unsupported_callbacks
from ._gradients import FlatField, Loop, LoopResult, Stats, TimeTensors
from ._solve import _check_derivative, _make_loop, _merge_stops
from ._solvers import (
    AbstractSolver,
    Field,
    StepResult,
    _hermite_basis,
    _hermite_weights,
    _interior_nodes,
)
from ._transforms import ReverseOnly
from ._transforms import apply as reverse_only

Array = Any
"""A 1-D float64 ``numpy.ndarray``, as scipy passes states; numpy stays optional."""

_T = TypeVar("_T")

SCIPY_PREFIX = "scipy:"
TORCHDIFFEQ_PREFIX = "torchdiffeq:"

SCIPY_SOLVER = "scipy_solver"
"""torchdiffeq's name of SciPy's solvers (``options={"solver": <name>}``)."""

SCIPY_METHODS = ("BDF", "DOP853", "LSODA", "RK23", "RK45", "Radau")
"""The ``scipy.integrate`` solvers that ``method="scipy:<name>"`` can name."""

# Outputs between step ends. RK23's dense output (cubic Hermite) and BDF's and
# LSODA's (their history polynomials) have the order of the method, and are used
# as they are. The others' are of a lower order than their steps (RK45's has order
# 4, DOP853's 7, Radau's collocation polynomial 3), 10-100x less accurate at tight
# tolerances. For the explicit pairs, outputs come from a Hermite interpolant on
# sub-steps of the method itself, of the order given here, as for odecore's own
# solvers. Radau is for stiff problems, where derivative data would amplify the
# error by the stiffness: each output is reached by a step of its own from the
# start of the step it falls in.
_HERMITE_ORDER = {"RK45": 5, "DOP853": 8}
_SUBSTEP = ("Radau",)


def scipy_integrate(method: str) -> ModuleType:
    """``scipy.integrate``, or an ``ImportError`` that says how to install it."""
    try:
        import scipy.integrate  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError as error:
        raise ImportError(
            f"method {method!r} needs SciPy, an optional dependency of odecore; install it "
            "with `pip install odecore[scipy]`."
        ) from error
    module: ModuleType = scipy.integrate
    return module


def torchdiffeq_module(method: str) -> ModuleType:
    """The ``torchdiffeq`` package, or an ``ImportError`` that says how to install it."""
    try:
        import torchdiffeq  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError as error:
        raise ImportError(
            f"method {method!r} needs torchdiffeq, an optional dependency of odecore; "
            "install it with `pip install odecore[torchdiffeq]`."
        ) from error
    module: ModuleType = torchdiffeq
    return module


# --- scipy ----------------------------------------------------------------------------


@final
@dataclass(frozen=True)
class ScipySolver(AbstractSolver):
    """Which of scipy's solvers takes the steps, for the loop of :func:`make_loop`.

    Configuration only, not a one-step method: odecore's own loop cannot step it
    (``init``, ``step`` and ``interpolate`` raise). The loop takes the tolerances and
    the largest step from the controller, a :class:`PIDController`, and the first
    step from ``dt0``.

    Args:
        method: the name of the ``scipy.integrate`` solver, one of ``SCIPY_METHODS``.
        min_step: LSODA's smallest step size (0: none). A SciPy whose LSODA ignores
            it (1.17, scipy/scipy#25827) makes the solve refuse it
            (:func:`lsoda_ignores_min_step`).
    """

    method: str
    min_step: float = 0.0
    # There is no single order: LSODA and BDF change theirs as they go. Nothing
    # reads it (the step-size control is scipy's).
    order: ClassVar[int] = 0

    @property
    def adaptive(self) -> bool:
        return True

    def _not_a_stepper(self) -> NoReturn:
        raise ConfigurationError(
            f"{self!r} is run by scipy through odeint(method='scipy:{self.method}'); "
            "odecore's own loop cannot step it."
        )

    def init(self, f: Field, t0: float, y0: Tensor) -> Tensor:
        self._not_a_stepper()

    def step(self, f: Field, t0: float, t1: float, y0: Tensor, f0: Tensor) -> StepResult:
        self._not_a_stepper()

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
        self._not_a_stepper()


def make_loop(jumps: list[float], steps: list[float], max_steps: int) -> Loop:
    """odecore's solve loop, except that a :class:`ScipySolver` has scipy take the steps.

    The scipy loop keeps the loop's contract: outputs at ``ts`` (``None`` where not
    reached), a status instead of an exception when the solve fails (with scipy's
    message), ``on_step`` after every accepted step. It restarts scipy at every
    jump and step time, so each piece between them is a smooth problem of its own.
    """
    native = _make_loop(jumps, steps, max_steps)

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
        if not isinstance(solver, ScipySolver):
            return native(
                f, y0, t0, t1, ts, solver, controller, dt0,
                step_ts=step_ts, on_step=on_step, times=times,
            )  # fmt: skip
        warn_unsupported_callbacks(
            f"scipy:{solver.method}",
            [name for name in CALLBACKS if getattr(f, name, None) is not None],
            "SciPy takes the steps and calls none of them (torchdiffeq's scipy_solver "
            "does not either)",
        )
        # Only the adjoint runs scipy, and it differentiates the times itself.
        run = _ScipyRun(f, y0, solver, controller, dt0, max_steps)
        return run.solve(t0, t1, list(ts), jumps, [*steps, *step_ts], on_step)

    return loop


class _NumpyField:
    """The vector field as scipy calls it: float time, float64 vector in and out.

    ``f`` sees tensors in ``y0``'s shape, dtype and device, and a 0-dim time tensor
    in the same dtype. Counts evaluations, checks the shape of every result,
    notes non-finite results, and evaluates one-sided limits at jumps: on a piece
    that starts (ends) on a jump, times at or before (after) it are moved to the
    neighbouring floating-point number inside the piece.
    """

    def __init__(self, f: FlatField, y0: Tensor) -> None:
        self.f = f
        self.shape = y0.shape
        self.dtype = y0.dtype
        self.device = y0.device
        self.nfe = 0
        self.nonfinite = False
        self.direction = 1.0
        self.lo: float | None = None  # the earliest time f may see on this piece
        self.hi: float | None = None  # the latest

    def piece(self, a: float, b: float, a_jump: bool, b_jump: bool) -> None:
        """Integrate from ``a`` to ``b`` next; ``a_jump``/``b_jump``: ends on jumps."""
        self.direction = 1.0 if b >= a else -1.0
        self.lo = self._inside(a, b) if a_jump else None
        self.hi = self._inside(b, a) if b_jump else None

    def _inside(self, t: float, towards: float) -> float:
        tt = torch.scalar_tensor(t, dtype=self.dtype)
        return float(torch.nextafter(tt, torch.scalar_tensor(towards, dtype=self.dtype)))

    def time(self, t: float) -> Tensor:
        d = self.direction
        if self.lo is not None and d * (t - self.lo) < 0:
            t = self.lo
        if self.hi is not None and d * (t - self.hi) > 0:
            t = self.hi
        return torch.scalar_tensor(t, dtype=self.dtype, device=self.device)

    def tensor(self, y: Array) -> Tensor:
        # A copy: scipy (LSODA) reuses its arrays.
        return torch.tensor(y, dtype=self.dtype, device=self.device).view(self.shape)

    def __call__(self, t: float, y: Array) -> Array:
        import numpy as np

        self.nfe += 1
        if not math.isfinite(t):
            self.nonfinite = True
            raise _NonFiniteTimeError
        out = self.f(self.time(t), self.tensor(y))
        # every result: a later one in float32 would lose its precision silently
        _check_derivative(out, self.shape, self.dtype, self.device)
        values = out.detach().reshape(-1).to("cpu", torch.float64).numpy().copy()
        if not np.isfinite(values).all():
            self.nonfinite = True
        return values


@dataclass
class _Failure:
    status: Status
    message: str = ""


@functools.cache
def lsoda_ignores_min_step() -> bool:
    """Whether the installed SciPy's LSODA ignores its ``min_step``, as SciPy 1.17 does
    (scipy/scipy#25827): a solve of ``y' = -y`` at a tight tolerance takes the same
    steps with ``min_step`` a quarter of the span as without it (an LSODA that honours
    it takes no step below that, or fails)."""
    lsoda = scipy_integrate(f"{SCIPY_PREFIX}LSODA").LSODA

    def steps(**options: float) -> list[float]:
        solver = lsoda(lambda t, y: -y, 0.0, [1.0], 1.0, rtol=1e-10, atol=1e-12, **options)
        ends: list[float] = []
        while solver.status == "running" and len(ends) < 1000:
            solver.step()
            ends.append(float(solver.t))
        return ends

    return steps() == steps(min_step=0.25)


def _scipy_version() -> str:
    import scipy  # type: ignore[import-untyped, import-not-found, unused-ignore]

    return str(scipy.__version__)


class _NonFiniteTimeError(Exception):
    """scipy asked for the derivative at a NaN time: its step size is NaN."""


class _ScipyRun:
    """One solve by a scipy solver, piece by piece between jumps and step times."""

    def __init__(
        self,
        f: FlatField,
        y0: Tensor,
        solver: ScipySolver,
        controller: AbstractController,
        dt0: float | None,
        max_steps: int,
    ) -> None:
        if not isinstance(controller, PIDController):
            raise ConfigurationError(
                f"`scipy:{solver.method}` takes its tolerances from a PIDController, got "
                f"{type(controller).__name__}."
            )
        self.cls = getattr(scipy_integrate(f"{SCIPY_PREFIX}{solver.method}"), solver.method)
        self.method = solver.method
        self.options: dict[str, float] = {"rtol": controller.rtol, "atol": controller.atol}
        if math.isfinite(controller.dt_max):
            self.options["max_step"] = controller.dt_max
        if solver.min_step > 0:
            if lsoda_ignores_min_step():
                raise ConfigurationError(
                    f"`min_step` ({solver.min_step!r}) for SciPy's LSODA: the installed SciPy "
                    f"{_scipy_version()} ignores it (scipy/scipy#25827), so its steps would "
                    "not be bounded. Remove `min_step`, or use one of odecore's adaptive "
                    "methods, whose `min_step` bounds the steps (e.g. method='dopri5' or "
                    "'rodas5p')."
                )
            self.options["min_step"] = solver.min_step
        self.first_step = None if dt0 is None else abs(dt0)
        self.max_steps = max_steps
        self.y0 = y0
        self.field = _NumpyField(f, y0)

    def _start(self, t0: float, y0: Array, t1: float, first_step: float | None) -> Any:
        if first_step is not None:
            first_step = min(first_step, abs(t1 - t0))
        return self.cls(self.field, t0, y0, t1, first_step=first_step, **self.options)

    def solve(
        self,
        t0: float,
        t1: float,
        ts: list[float],
        jumps: list[float],
        steps: list[float],
        on_step: Callable[[float, Tensor], None] | None,
    ) -> LoopResult:
        d = 1.0 if t1 >= t0 else -1.0
        stops, jump_set = _merge_stops(
            d * t0, d * t1, {d * t for t in jumps}, {d * t for t in steps}
        )
        stats = Stats()
        ys: list[Tensor | None] = [None] * len(ts)
        out_i = 0
        while out_i < len(ts) and ts[out_i] == t0:
            ys[out_i] = self.y0
            out_i += 1
        step_ends: list[float] = []
        failure: _Failure | None = None
        y = self.y0.detach().reshape(-1).to("cpu", torch.float64).numpy().copy()
        t, s = t0, d * t0
        first_step = self.first_step
        for s_next in stops:
            a, b = d * s, d * s_next
            self.field.piece(a, b, s in jump_set, s_next in jump_set)
            self.field.nonfinite = False
            started = self._guarded(self._start, a, y, b, first_step)
            if isinstance(started, _Failure):
                failure = started
                break
            solver = started
            first_step = None  # scipy chooses the first step after a restart
            while solver.status == "running":
                if stats.n_steps >= self.max_steps:
                    failure = _Failure(Status.MAX_STEPS_REACHED)
                    break
                t_old, y_old = float(solver.t), solver.y.copy()
                f_old = solver.f.copy() if self.method in _HERMITE_ORDER else None
                self.field.nonfinite = False
                message = self._guarded(self._step, solver)
                if isinstance(message, _Failure):
                    failure = message
                    break
                if solver.status == "failed":
                    failure = self._failure(message)
                    break
                stats.n_steps += 1
                stats.n_accepted += 1
                t_new = b if solver.status == "finished" else float(solver.t)
                y_new = solver.y.copy()
                if not _finite(y_new):
                    failure = _Failure(Status.NONFINITE)
                    break
                t = t_new
                out_j = out_i
                while out_j < len(ts) and d * ts[out_j] <= d * t_new:
                    out_j += 1
                if out_j > out_i:
                    values = self._outputs(
                        solver, t_old, y_old, f_old, t_new, y_new, ts[out_i:out_j]
                    )
                    ys[out_i:out_j] = [self.field.tensor(v) for v in values]
                    out_i = out_j
                step_ends.append(t_new)
                if on_step is not None:
                    on_step(t_new, self.field.tensor(y_new))
                y = y_new
            if failure is not None:
                break
            s = s_next
        stats.nfe = self.field.nfe
        if failure is None:
            return LoopResult(ys, stats, Status.SUCCESS, t, step_ends)
        return LoopResult(ys, stats, failure.status, t, step_ends, failure.message)

    def _guarded(self, action: Callable[..., _T], *args: Any) -> _T | _Failure:
        """``action(*args)``, or the failure when scipy cannot go on with non-finite values.

        With a NaN derivative at the start, scipy's first step size is NaN, and its
        step loop would go on forever at NaN times; BDF and Radau factorise
        matrices of NaN before they notice. Both become ``Status.NONFINITE``.
        """
        import numpy as np

        try:
            return action(*args)
        except _NonFiniteTimeError:
            return _Failure(Status.NONFINITE, f"scipy's {self.method} took a step of size NaN.")
        except (ValueError, ArithmeticError, np.linalg.LinAlgError) as error:
            if not self.field.nonfinite:
                raise
            return _Failure(Status.NONFINITE, f"scipy's {self.method} raised: {error}")

    def _step(self, solver: Any) -> str | None:
        """``solver.step()``; for LSODA, with the reason for a failure in the message.

        LSODA says why it failed only in a warning ("lsoda: Repeated error test
        failures ..."); its message is "Unexpected istate in LSODA.". The warning's
        text becomes the message; any other warning is passed on.
        """
        if self.method != "LSODA":
            message: str | None = solver.step()
            return message
        with warnings.catch_warnings(record=True) as caught:
            message = solver.step()
        said = []
        for w in caught:
            text = str(w.message)
            if solver.status == "failed" and text.startswith("lsoda:"):
                said.append(text.removeprefix("lsoda:").strip())
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return " ".join(said) if said else message

    def _failure(self, message: str | None) -> _Failure:
        said = f"scipy's {self.method} says: {message}" if message else ""
        if self.field.nonfinite:
            return _Failure(Status.NONFINITE, said)
        if message and "step size is less than spacing" in message:
            return _Failure(Status.DT_UNDERFLOW, said)
        return _Failure(Status.BACKEND_FAILED, said)

    def _outputs(
        self,
        solver: Any,
        t_old: float,
        y_old: Array,
        f_old: Array | None,
        t_new: float,
        y_new: Array,
        taus: list[float],
    ) -> list[Array]:
        """The solution at ``taus`` (in ``(t_old, t_new]``) of the step just taken."""
        inside = [tau for tau in taus if tau != t_new]
        values: dict[float, Array] = {}
        order = _HERMITE_ORDER.get(self.method)
        if inside and order is not None and f_old is not None:
            hermite = self._hermite(order, t_old, y_old, f_old, t_new, y_new, solver.f)
            if hermite is not None:
                values = {tau: hermite(tau) for tau in inside}
        elif inside and self.method in _SUBSTEP:
            for tau in inside:
                reached = self._substep(t_old, y_old, tau)
                if reached is not None:
                    values[tau] = reached[0]
        missing = [tau for tau in inside if tau not in values]
        if missing:
            dense = solver.dense_output()
            values.update({tau: dense(tau) for tau in missing})
        return [y_new if tau == t_new else values[tau] for tau in taus]

    def _substep(self, t_old: float, y_old: Array, tau: float) -> tuple[Array, Array] | None:
        """The state and derivative at ``tau``, by a fresh solver from ``(t_old, y_old)``.

        Its first step lands on ``tau``; a step shorter than one the solver
        accepted is nearly always accepted too. ``None`` if it fails.
        """

        def run() -> Any:
            sub = self._start(t_old, y_old, tau, abs(tau - t_old))
            while sub.status == "running":
                sub.step()
            return sub

        sub = self._guarded(run)
        if isinstance(sub, _Failure) or sub.status != "finished":
            return None
        return sub.y, sub.f

    def _hermite(
        self,
        order: int,
        t_old: float,
        y_old: Array,
        f_old: Array,
        t_new: float,
        y_new: Array,
        f_new: Array,
    ) -> Callable[[float], Array] | None:
        """Hermite interpolant of the step on sub-steps of the method itself.

        Values and derivatives at the step ends and at ``m`` equally spaced interior
        nodes, each reached by a fresh solver from ``(t_old, y_old)`` whose first
        step lands on it: error ``O(h**(2m + 4))``, at least the method's own local
        error (see ``AbstractExplicitRK``). ``None`` if a sub-step fails, and the
        solver's own dense output stands in.
        """
        h = t_new - t_old
        nodes, matrix = _hermite_basis(_interior_nodes(order))
        ys, fs = [y_old], [f_old]
        for theta in nodes[1:-1]:
            reached = self._substep(t_old, y_old, t_old + theta * h)
            if reached is None:
                return None
            ys.append(reached[0])
            fs.append(reached[1])
        ys.append(y_new)
        fs.append(f_new)
        n = len(ys)

        def value(tau: float) -> Array:
            w = _hermite_weights(matrix, (tau - t_old) / h)
            out = w[0] * ys[0]
            for j in range(1, n):
                out = out + w[j] * ys[j]
            for j in range(n):
                out = out + (h * w[n + j]) * fs[j]
            return out

        return value


def _finite(y: Array) -> bool:
    import numpy as np

    return bool(np.isfinite(y).all())


# --- torchdiffeq ----------------------------------------------------------------------


def torchdiffeq_odeint(
    func: Any,
    y0: Any,
    t: Tensor,
    *,
    rtol: float,
    atol: float,
    method: str,
    options: Mapping[str, Any] | None,
) -> Any:
    """``torchdiffeq.odeint`` with ``method`` (``"torchdiffeq:<name>"``) and the rest as given.

    Raises:
        SolverError: torchdiffeq failed the solve with one of its assertions (see
            :func:`_torchdiffeq_failure`); the assertion is its ``__cause__``.
    """
    tdq = torchdiffeq_module(method)
    name = method.removeprefix(TORCHDIFFEQ_PREFIX)
    if name == SCIPY_SOLVER and torch.is_grad_enabled():
        _refuse_lost_gradient(func, y0, t)
    with _torchdiffeq_failures(name, t):
        return tdq.odeint(func, y0, t, rtol=rtol, atol=atol, method=name, options=options)


def _refuse_lost_gradient(func: Any, y0: Any, t: Tensor) -> None:
    """Refuse ``torchdiffeq.odeint`` with ``scipy_solver`` where a gradient is wanted.

    torchdiffeq's ``scipy_solver`` returns a new tensor built from SciPy's NumPy
    arrays, cut from ``y0``, ``t`` and every tensor the field reads: their gradients
    through it would be ``None`` (or missing from a sum) without a word. One is
    wanted if ``y0`` or ``t`` requires grad, or the field's result at ``t[0]`` does
    (its parameters, or what it closes over): that costs one evaluation, and only
    here.
    """
    states = y0 if isinstance(y0, tuple) else (y0,)
    wanted = [
        f"`y0[{i}]`" if isinstance(y0, tuple) else "`y0`"
        for i, y in enumerate(states)
        if y.requires_grad
    ]
    if t.requires_grad:
        wanted.append("`t`")
    if not wanted:
        out = func(t[0].detach().to(states[0].dtype), y0)
        if any(o.requires_grad for o in (out if isinstance(out, tuple) else (out,))):
            wanted.append("a tensor that `func` reads")
    if wanted:
        verb = "require" if len(wanted) > 1 else "requires"
        raise ConfigurationError(
            f"`method='{TORCHDIFFEQ_PREFIX}{SCIPY_SOLVER}'` returns a solution without a "
            f"gradient (torchdiffeq's scipy_solver solves in NumPy), but {' and '.join(wanted)} "
            f"{verb} grad: no gradient would reach it. Use odecore's `method='{SCIPY_SOLVER}'` "
            "or 'scipy:<name>' (differentiated by the adjoint), `odeint_adjoint`, or call "
            "under `torch.no_grad()`."
        )


def torchdiffeq_odeint_adjoint(
    func: Any,
    y0: Any,
    t: Tensor,
    *,
    rtol: float,
    atol: float,
    method: str,
    options: Mapping[str, Any] | None,
    adjoint_rtol: float | None,
    adjoint_atol: float | None,
    adjoint_method: str | None,
    adjoint_options: Mapping[str, Any] | None,
    adjoint_params: Sequence[Tensor] | None,
) -> Any:
    """``torchdiffeq.odeint_adjoint``: both methods ``"torchdiffeq:<name>"`` (or no adjoint one).

    Raises:
        SolverError: as :func:`torchdiffeq_odeint`, for the forward solve (the backward
            one runs in torchdiffeq's ``backward()``, where its assertions pass as they
            are).
    """
    tdq = torchdiffeq_module(method)
    name = method.removeprefix(TORCHDIFFEQ_PREFIX)
    with _torchdiffeq_failures(name, t):
        ys = _torchdiffeq_adjoint(
            tdq, func, y0, t, rtol, atol, name, options, adjoint_rtol, adjoint_atol,
            adjoint_method, adjoint_options, adjoint_params,
        )  # fmt: skip
    outs = ys if isinstance(ys, tuple) else (ys,)
    if not (torch.is_grad_enabled() and any(y.requires_grad for y in outs)):
        return ys
    gated = reverse_only(_FirstOrderOutputs, *outs)
    return gated if isinstance(ys, tuple) else gated[0]


class _FirstOrderOutputs(ReverseOnly):
    """``(*ys) -> ys``: the outputs of torchdiffeq's adjoint, whose backward pass runs
    under ``torch.no_grad()`` and so hands back gradients without a graph even where
    one is asked for (``create_graph=True``): a second derivative through them would
    be silently zero or lack their terms (a gradient penalty would train as if it were
    not there). Its backward pass refuses that, and passes the gradients on otherwise."""

    what = "odeint_adjoint's gradient with a torchdiffeq method"

    @staticmethod
    def forward(ctx: Any, *ys: Tensor) -> tuple[Tensor, ...]:  # type: ignore[override]
        return tuple(y.view_as(y) for y in ys)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> tuple[Tensor, ...]:  # type: ignore[override]
        first_order(
            "odeint_adjoint's gradient with a torchdiffeq method (torchdiffeq's adjoint)",
            "Use odeint for higher-order gradients.",
        )
        return grads


def _torchdiffeq_adjoint(
    tdq: ModuleType,
    func: Any,
    y0: Any,
    t: Tensor,
    rtol: float,
    atol: float,
    name: str,
    options: Mapping[str, Any] | None,
    adjoint_rtol: float | None,
    adjoint_atol: float | None,
    adjoint_method: str | None,
    adjoint_options: Mapping[str, Any] | None,
    adjoint_params: Sequence[Tensor] | None,
) -> Any:
    return tdq.odeint_adjoint(
        func,
        y0,
        t,
        rtol=rtol,
        atol=atol,
        method=name,
        options=options,
        adjoint_rtol=adjoint_rtol,
        adjoint_atol=adjoint_atol,
        adjoint_method=(
            None if adjoint_method is None else adjoint_method.removeprefix(TORCHDIFFEQ_PREFIX)
        ),
        adjoint_options=adjoint_options,
        adjoint_params=adjoint_params,
    )


# torchdiffeq's run-time failures are assertions; what each says, and its status.
_TORCHDIFFEQ_FAILURES = (
    ("underflow in dt", Status.DT_UNDERFLOW),
    ("max_num_steps exceeded", Status.MAX_STEPS_REACHED),
    ("non-finite values", Status.NONFINITE),
)


@contextlib.contextmanager
def _torchdiffeq_failures(name: str, t: Tensor) -> Iterator[None]:
    """Raise torchdiffeq's assertions that say why a solve failed as :class:`SolverError`
    (see :func:`_torchdiffeq_failure`), with the assertion as ``__cause__``."""
    try:
        yield
    except AssertionError as error:
        failure = _torchdiffeq_failure(error, name, t)
        if failure is None:
            raise
        raise failure from error


def _torchdiffeq_failure(error: AssertionError, name: str, t: Tensor) -> SolverError | None:
    """The :class:`SolverError` for an assertion that torchdiffeq raised, or ``None``
    when it came from elsewhere (the vector field's own ``assert``).

    torchdiffeq fails a solve with an ``AssertionError`` ("underflow in dt ...",
    "max_num_steps exceeded ...", "non-finite values in state ..."): it becomes the
    status that says so, any other of its assertions ``Status.BACKEND_FAILED``. The
    message quotes torchdiffeq's. torchdiffeq does not say at which time it stopped:
    the error's ``t`` is NaN.
    """
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = "" if tb is None else str(tb.tb_frame.f_globals.get("__name__", ""))
    if where.split(".")[0] != "torchdiffeq":
        return None
    said = str(error)
    status = next((s for text, s in _TORCHDIFFEQ_FAILURES if text in said), Status.BACKEND_FAILED)
    t1 = float(t.detach()[-1])
    return SolverError(
        f"torchdiffeq's {name} stopped before reaching t1 = {t1!r} (it does not say at "
        f"which t): {status}. torchdiffeq says: {said}",
        status=status,
        t=math.nan,
    )

"""``odeint``: torchdiffeq's call signature over :func:`odecore.solve`.

This module only translates a method name and an options dict into solver and
controller objects; it holds no solver logic. Methods of the ``scipy:`` and
``torchdiffeq:`` families go to the backends of ``_backends``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from torch import Tensor

from ._backends import (
    SCIPY_METHODS,
    SCIPY_PREFIX,
    TORCHDIFFEQ_PREFIX,
    ScipySolver,
    make_loop,
    scipy_integrate,
    torchdiffeq_odeint,
    torchdiffeq_odeint_adjoint,
)
from ._controllers import ConstantStepSize, PIDController
from ._errors import ConfigurationError
from ._gradients import AbstractGradient, Adjoint
from ._solve import SaveAt, State, VectorField, _check_y0, _make_loop, _solve
from ._solvers import (
    RK4,
    AbstractSolver,
    Bosh3,
    Dopri5,
    Dopri8,
    Euler,
    Heun,
    HeunEuler,
    Midpoint,
    Ralston,
    RK4ThreeEighths,
    Tsit5,
)

FIXED_METHODS: dict[str, type[AbstractSolver]] = {
    "euler": Euler,
    "midpoint": Midpoint,
    "heun": Heun,
    "ralston": Ralston,
    "rk4": RK4,
    "rk4_38": RK4ThreeEighths,
}
"""Fixed-step methods by name."""

ADAPTIVE_METHODS: dict[str, type[AbstractSolver]] = {
    "adaptive_heun": HeunEuler,
    "bosh3": Bosh3,
    "dopri5": Dopri5,
    "tsit5": Tsit5,
    "dopri8": Dopri8,
}
"""Adaptive embedded pairs by name."""

_COMMON_OPTIONS = ("jump_t", "step_t", "max_num_steps")
FIXED_OPTIONS = ("step_size", "n_steps", *_COMMON_OPTIONS)
"""Options accepted by fixed-step methods."""
ADAPTIVE_OPTIONS = (
    "first_step",
    "safety",
    "ifactor",
    "dfactor",
    "pcoeff",
    "icoeff",
    "dcoeff",
    "max_step",
    "norm",
    *_COMMON_OPTIONS,
)
"""Options accepted by adaptive methods."""

_SCIPY_OPTIONS = ("first_step", "max_step", *_COMMON_OPTIONS)
_LSODA_OPTIONS = ("first_step", "max_step", "min_step", *_COMMON_OPTIONS)


def _solver_for(method: str, name: str = "") -> AbstractSolver:
    if not isinstance(method, str):
        raise TypeError(f"`{name}method` must be a string, got {type(method).__name__}.")
    if method.startswith(SCIPY_PREFIX) and method.removeprefix(SCIPY_PREFIX) in SCIPY_METHODS:
        scipy_integrate(method)  # fail now, with the fix, if SciPy is missing
        return ScipySolver(method.removeprefix(SCIPY_PREFIX))
    cls = FIXED_METHODS.get(method) or ADAPTIVE_METHODS.get(method)
    if cls is None:
        known = ", ".join(sorted([*FIXED_METHODS, *ADAPTIVE_METHODS]))
        scipy = ", ".join(SCIPY_PREFIX + m for m in SCIPY_METHODS)
        raise ConfigurationError(
            f"Unknown `{name}method` {method!r}; known methods: {known}; {scipy} (SciPy's "
            f"solvers); {TORCHDIFFEQ_PREFIX}<name> (any torchdiffeq method)."
        )
    return cls()


def _delegated(method: object) -> bool:
    """Whether ``method`` names a torchdiffeq method, which torchdiffeq runs whole."""
    return isinstance(method, str) and method.startswith(TORCHDIFFEQ_PREFIX)


def _check_state(y0: State) -> None:
    if isinstance(y0, tuple):
        if len(y0) == 0:
            raise ValueError("`y0` is an empty tuple; the state needs at least one tensor.")
        for i, y in enumerate(y0):
            _check_y0(y, f"y0[{i}]")
    else:
        _check_y0(y0, "y0")


def _check_t(t: Tensor) -> list[float]:
    if not isinstance(t, Tensor):
        raise TypeError(f"`t` must be a 1-D torch.Tensor of times, got {type(t).__name__}.")
    if t.dim() != 1 or t.numel() == 0:
        raise ValueError(f"`t` must be a non-empty 1-D tensor, got shape {tuple(t.shape)}.")
    ts = t.detach().tolist()
    if not all(math.isfinite(x) for x in ts):
        raise ValueError(f"`t` must hold finite times, got {ts}.")
    diffs = [b - a for a, b in itertools.pairwise(ts)]
    if diffs and not (all(d > 0 for d in diffs) or all(d < 0 for d in diffs)):
        raise ValueError(f"`t` must be strictly increasing or strictly decreasing, got {ts}.")
    return [float(x) for x in ts]


def _positive(name: str, value: Any) -> float:
    if isinstance(value, Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"`{name}` must be a number, got {type(value).__name__}.")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"`{name}` must be a positive number, got {value!r}.")
    return float(value)


def odeint(
    func: VectorField,
    y0: State,
    t: Tensor,
    *,
    rtol: float = 1e-7,
    atol: float = 1e-9,
    method: str = "dopri5",
    options: Mapping[str, Any] | None = None,
) -> State:
    """Solve ``dy/dt = func(t, y)`` and return the solution at every time in ``t``.

    The signature and meaning are torchdiffeq's, so switching is a change of import.
    Gradients flow by backpropagation through the solver's steps — except with
    ``scipy:`` methods, whose steps autograd cannot see: there they come from the
    continuous adjoint, as with :func:`odeint_adjoint`, and reach ``y0``, ``t`` and
    the parameters of ``func`` when it is an ``nn.Module`` (not tensors it merely
    closes over; pass those to :func:`odeint_adjoint` as ``adjoint_params``).

    Args:
        func: the vector field ``func(t, y)``; ``t`` is a 0-dim tensor in ``y0``'s
            dtype, ``y`` has the structure of ``y0``.
        y0: the initial state at ``t[0]``: a floating tensor of any shape, or a tuple
            of tensors.
        t: 1-D tensor of times, strictly increasing or strictly decreasing; backward
            solves integrate from ``t[0]`` down to ``t[-1]``.
        rtol: relative tolerance of adaptive methods.
        atol: absolute tolerance of adaptive methods.
        method: one of ``euler``, ``midpoint``, ``heun``, ``ralston``, ``rk4``
            (RK4-classic), ``rk4_38`` (fixed step) or ``adaptive_heun``, ``bosh3``,
            ``dopri5``, ``tsit5``, ``dopri8`` (adaptive); or a backend:
            ``scipy:LSODA``, ``scipy:BDF``, ``scipy:Radau`` (stiff problems),
            ``scipy:RK45``, ``scipy:DOP853``, ``scipy:RK23`` — SciPy's ``solve_ivp``
            solvers take the steps (needs ``pip install odecore[scipy]``) — or
            ``torchdiffeq:<name>`` for any torchdiffeq method, which hands the whole
            call to ``torchdiffeq.odeint`` (needs ``pip install odecore[torchdiffeq]``).
        options: for fixed-step methods ``step_size`` or ``n_steps`` (uniform steps
            over the whole span; the default is one step per interval of ``t``);
            for adaptive ones ``first_step``, ``safety``, ``ifactor`` (largest growth),
            ``dfactor`` (largest shrink), ``pcoeff``, ``icoeff``, ``dcoeff``, ``max_step``
            and ``norm`` (a callable on the scaled error, structured like ``y0``);
            for both ``jump_t`` (discontinuities of ``func`` in time), ``step_t``
            (times to step on) and ``max_num_steps``. ``scipy:`` methods take
            ``first_step``, ``max_step``, ``jump_t`` and ``step_t`` (scipy restarts
            at each), ``max_num_steps`` (accepted steps), and for LSODA ``min_step``;
            ``torchdiffeq:`` methods pass ``options`` to torchdiffeq unchanged.

    Returns:
        The solution at each time of ``t`` stacked on a new first dimension: a
        tensor of shape ``(len(t), *y0.shape)``, or a tuple of such tensors.

    Raises:
        TypeError: if ``y0`` or ``t`` has the wrong type or dtype.
        ValueError: for an unknown method or option, bad times, tolerances,
            shapes, or a non-finite ``y0``.
        SolverError: if the solve cannot finish (step size underflow, step budget
            exhausted, non-finite state, a failure of scipy's solver in its own
            words); it says at which ``t``.
        ImportError: for a ``scipy:`` or ``torchdiffeq:`` method whose package is
            not installed; the message names the extra to install.

    Example:
        >>> import torch, odecore
        >>> t = torch.linspace(0.0, 1.0, 5)
        >>> ys = odecore.odeint(lambda t, y: -y, torch.ones(3), t)
        >>> ys.shape
        torch.Size([5, 3])
        >>> torch.allclose(ys[:, 0], torch.exp(-t))
        True
        >>> stiff = odecore.odeint(lambda t, y: -1e4 * (y - torch.cos(t)), torch.ones(1), t,
        ...                        rtol=1e-6, atol=1e-8, method="scipy:LSODA")
        >>> stiff.dtype, torch.allclose(stiff[:, 0], torch.cos(t), atol=1e-3)
        (torch.float32, True)
    """
    ts = _check_t(t)
    if _delegated(method):
        _check_state(y0)
        rtol, atol = _positive("rtol", rtol), _positive("atol", atol)
        return torchdiffeq_odeint(  # type: ignore[no-any-return]
            func, y0, t, rtol=rtol, atol=atol, method=method, options=options
        )
    config = _configure(method, options, rtol, atol, ts)
    gradient = None
    if isinstance(config.solver, ScipySolver):
        # No graph runs through scipy: the gradient is always the adjoint's.
        gradient = Adjoint(solver=config.solver, controller=config.controller, dt0=config.dt0)
    return _run(func, y0, t, ts, config, gradient)


def odeint_adjoint(
    func: VectorField,
    y0: State,
    t: Tensor,
    *,
    rtol: float = 1e-7,
    atol: float = 1e-9,
    method: str = "dopri5",
    options: Mapping[str, Any] | None = None,
    adjoint_rtol: float | None = None,
    adjoint_atol: float | None = None,
    adjoint_method: str | None = None,
    adjoint_options: Mapping[str, Any] | None = None,
    adjoint_params: Sequence[Tensor] | None = None,
) -> State:
    """:func:`odeint` with gradients by the continuous adjoint method (:class:`Adjoint`).

    torchdiffeq's signature and meaning. The forward solve keeps no graph, so memory
    does not grow with the number of steps; the backward pass solves the adjoint
    system backward in time, restarting at every time of ``t`` and of ``jump_t``.
    Gradients reach ``y0``, ``t`` and the parameters of ``func`` (an ``nn.Module``)
    or the tensors in ``adjoint_params``.

    Args:
        func: the vector field, as for :func:`odeint`.
        y0: the initial state, a tensor or a tuple of tensors.
        t: 1-D tensor of times, strictly monotone.
        rtol: relative tolerance of the forward solve.
        atol: absolute tolerance of the forward solve.
        method: the forward method, as for :func:`odeint`. With ``torchdiffeq:<name>``
            the whole call, ``adjoint_*`` arguments included, goes to
            ``torchdiffeq.odeint_adjoint``.
        options: the forward options, as for :func:`odeint`.
        adjoint_rtol: relative tolerance of the backward solve; default ``rtol``.
        adjoint_atol: absolute tolerance of the backward solve; default ``atol``.
        adjoint_method: the backward method; default ``method``. A ``scipy:`` method
            has scipy integrate the backward system, with vector-Jacobian products
            from torch; odecore's and scipy's methods mix freely, torchdiffeq's go
            only with torchdiffeq's.
        adjoint_options: the backward options (default: ``options`` when the method
            is the same); ``{"norm": "seminorm"}`` measures the backward error on
            the state and its adjoint only (Kidger et al. 2021), which saves steps
            (not with ``scipy:`` methods, whose norm is their own).
        adjoint_params: the tensors to differentiate besides ``y0`` and ``t``; default
            the parameters of ``func`` that require gradients.

    Returns:
        The solution at each time of ``t``, as :func:`odeint`.

    Raises:
        TypeError, ValueError: as :func:`odeint`, for the forward and the backward
            arguments alike.
        SolverError: if the forward solve, or in ``backward()`` the adjoint solve,
            cannot finish.
        ImportError: as :func:`odeint`, for a backend that is not installed.

    Example:
        >>> import torch, odecore
        >>> y0 = torch.ones(3, requires_grad=True)
        >>> t = torch.linspace(0.0, 1.0, 5)
        >>> ys = odecore.odeint_adjoint(lambda t, y: -y, y0, t)
        >>> ys[-1].sum().backward()
        >>> torch.allclose(y0.grad, torch.exp(torch.tensor(-1.0)).expand(3))
        True
    """
    ts = _check_t(t)
    if _delegated(method):
        if adjoint_method is not None and not _delegated(adjoint_method):
            raise ConfigurationError(
                f"`adjoint_method` must be a torchdiffeq method too when `method` is one "
                f"(torchdiffeq runs both passes), got {adjoint_method!r}; use "
                f"'{TORCHDIFFEQ_PREFIX}<name>' or leave it out."
            )
        _check_state(y0)
        rtol, atol = _positive("rtol", rtol), _positive("atol", atol)
        if adjoint_rtol is not None:
            adjoint_rtol = _positive("adjoint_rtol", adjoint_rtol)
        if adjoint_atol is not None:
            adjoint_atol = _positive("adjoint_atol", adjoint_atol)
        return torchdiffeq_odeint_adjoint(  # type: ignore[no-any-return]
            func,
            y0,
            t,
            rtol=rtol,
            atol=atol,
            method=method,
            options=options,
            adjoint_rtol=adjoint_rtol,
            adjoint_atol=adjoint_atol,
            adjoint_method=adjoint_method,
            adjoint_options=adjoint_options,
            adjoint_params=adjoint_params,
        )
    if _delegated(adjoint_method):
        raise ConfigurationError(
            f"`adjoint_method` {adjoint_method!r} needs a torchdiffeq `method` as well "
            f"(torchdiffeq runs both passes), got {method!r}."
        )
    config = _configure(method, options, rtol, atol, ts)
    back_method = method if adjoint_method is None else adjoint_method
    back_opts = dict(adjoint_options or (options if back_method == method else None) or {})
    seminorm = back_opts.get("norm") == "seminorm"
    if seminorm:
        del back_opts["norm"]
    back = _configure(
        back_method,
        back_opts,
        rtol if adjoint_rtol is None else adjoint_rtol,
        atol if adjoint_atol is None else adjoint_atol,
        ts,
        name="adjoint_",
    )
    if seminorm and isinstance(back.solver, ScipySolver):
        raise ConfigurationError(
            "`adjoint_options={'norm': 'seminorm'}` is not available with SciPy's methods, "
            f"whose error norm covers the whole backward state; got `adjoint_method` "
            f"{back_method!r}."
        )
    if seminorm and not isinstance(back.controller, PIDController):
        raise ConfigurationError(
            "`adjoint_options={'norm': 'seminorm'}` needs an adaptive `adjoint_method`, got "
            f"{back_method!r}."
        )
    if adjoint_params is not None:
        adjoint_params = tuple(adjoint_params)
    gradient = Adjoint(
        solver=back.solver,
        controller=back.controller,
        dt0=back.dt0,
        seminorm=seminorm,
        params=adjoint_params,
    )
    return _run(func, y0, t, ts, config, gradient)


def _run(
    func: VectorField,
    y0: State,
    t: Tensor,
    ts: list[float],
    config: _Config,
    gradient: AbstractGradient | None,
) -> State:
    """``solve`` at the times ``t``; with the scipy loop if a scipy method takes part."""
    scipy = isinstance(config.solver, ScipySolver) or (
        isinstance(gradient, Adjoint) and isinstance(gradient.solver, ScipySolver)
    )
    sol = _solve(
        func,
        y0,
        t0=ts[0],
        t1=ts[-1],
        solver=config.solver,
        controller=config.controller,
        saveat=SaveAt(ts=t),
        dt0=config.dt0,
        jump_ts=config.jump_ts,
        step_ts=config.step_ts,
        max_steps=config.max_steps,
        throw=True,
        gradient=gradient,
        make_loop=make_loop if scipy else _make_loop,
    )
    return sol.ys


@dataclass(frozen=True)
class _Config:
    solver: AbstractSolver
    controller: PIDController | ConstantStepSize
    dt0: float | None
    jump_ts: Any
    step_ts: Any
    max_steps: int


def _configure(
    method: str,
    options: Mapping[str, Any] | None,
    rtol: float,
    atol: float,
    ts: list[float],
    name: str = "",
) -> _Config:
    """Translate a method name and torchdiffeq options into odecore objects."""
    solver = _solver_for(method, name)
    opts = dict(options or {})
    adaptive = method in ADAPTIVE_METHODS
    known: tuple[str, ...]
    if isinstance(solver, ScipySolver):
        known = _LSODA_OPTIONS if method == f"{SCIPY_PREFIX}LSODA" else _SCIPY_OPTIONS
    else:
        known = ADAPTIVE_OPTIONS if adaptive else FIXED_OPTIONS
    unknown = sorted(set(opts) - set(known))
    if unknown:
        raise ConfigurationError(
            f"Unknown {name}option(s) {unknown} for method {method!r}; known options: "
            f"{', '.join(known)}."
        )
    rtol = _positive(f"{name}rtol", rtol)
    atol = _positive(f"{name}atol", atol)
    max_steps = opts.get("max_num_steps", 100_000)
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"`max_num_steps` must be a positive integer, got {max_steps!r}.")
    span = abs(ts[-1] - ts[0])

    dt0: float | None
    if isinstance(solver, ScipySolver):
        max_step = _positive("max_step", opts["max_step"]) if "max_step" in opts else math.inf
        controller: PIDController | ConstantStepSize = PIDController(
            rtol=rtol, atol=atol, dt_max=max_step
        )
        dt0 = _positive("first_step", opts["first_step"]) if "first_step" in opts else None
        if "min_step" in opts:
            solver = replace(solver, min_step=_positive("min_step", opts["min_step"]))
        return _Config(solver, controller, dt0, opts.get("jump_t"), opts.get("step_t"), max_steps)
    if adaptive:
        kwargs: dict[str, Any] = {"rtol": rtol, "atol": atol}
        for option, field in (
            ("safety", "safety"),
            ("ifactor", "factor_max"),
            ("dfactor", "factor_min"),
            ("pcoeff", "pcoeff"),
            ("icoeff", "icoeff"),
            ("dcoeff", "dcoeff"),
            ("max_step", "dt_max"),
            ("norm", "norm"),
        ):
            if option in opts:
                kwargs[field] = opts[option]
        controller = PIDController(**kwargs)
        dt0 = _positive("first_step", opts["first_step"]) if "first_step" in opts else None
    else:
        controller = ConstantStepSize()
        if "step_size" in opts and "n_steps" in opts:
            raise ConfigurationError("Give one of the options `step_size` and `n_steps`, not both.")
        if "step_size" in opts:
            dt0 = _positive("step_size", opts["step_size"])
        elif "n_steps" in opts:
            n = opts["n_steps"]
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"`n_steps` must be a positive integer, got {n!r}.")
            dt0 = span / n if span > 0 else 1.0
        else:
            dt0 = None
    step_ts = opts.get("step_t")
    if not adaptive and dt0 is None:
        # torchdiffeq's default for fixed-step methods: one step per interval of `t`.
        step_ts = list(ts) + (list(_times(step_ts)) if step_ts is not None else [])
        dt0 = span if span > 0 else 1.0
    return _Config(solver, controller, dt0, opts.get("jump_t"), step_ts, max_steps)


def _times(value: Any) -> list[float]:
    if isinstance(value, Tensor):
        return [float(v) for v in value.detach().reshape(-1).tolist()]
    return [float(v) for v in value]

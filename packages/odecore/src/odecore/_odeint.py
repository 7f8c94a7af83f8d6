"""``odeint``: torchdiffeq's call signature over :func:`odecore.solve`.

This module only translates a method name and an options dict into solver and
controller objects; it holds no solver logic.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

from torch import Tensor

from ._controllers import ConstantStepSize, PIDController
from ._errors import ConfigurationError
from ._solve import SaveAt, State, VectorField, solve
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


def _solver_for(method: str) -> AbstractSolver:
    if not isinstance(method, str):
        raise TypeError(f"`method` must be a string, got {type(method).__name__}.")
    cls = FIXED_METHODS.get(method) or ADAPTIVE_METHODS.get(method)
    if cls is None:
        known = ", ".join(sorted([*FIXED_METHODS, *ADAPTIVE_METHODS]))
        raise ConfigurationError(f"Unknown `method` {method!r}; known methods: {known}.")
    return cls()


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
    Gradients flow by backpropagation through the solver's steps.

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
            ``dopri5``, ``tsit5``, ``dopri8`` (adaptive).
        options: for fixed-step methods ``step_size`` or ``n_steps`` (uniform steps
            over the whole span; the default is one step per interval of ``t``);
            for adaptive ones ``first_step``, ``safety``, ``ifactor`` (largest growth),
            ``dfactor`` (largest shrink), ``pcoeff``, ``icoeff``, ``dcoeff``, ``max_step``
            and ``norm`` (a callable on the scaled error, structured like ``y0``);
            for both ``jump_t`` (discontinuities of ``func`` in time), ``step_t``
            (times to step on) and ``max_num_steps``.

    Returns:
        The solution at each time of ``t`` stacked on a new first dimension: a
        tensor of shape ``(len(t), *y0.shape)``, or a tuple of such tensors.

    Raises:
        TypeError: if ``y0`` or ``t`` has the wrong type or dtype.
        ValueError: for an unknown method or option, bad times, tolerances,
            shapes, or a non-finite ``y0``.
        SolverError: if the solve cannot finish (step size underflow, step budget
            exhausted, non-finite state); it says at which ``t``.

    Example:
        >>> import torch, odecore
        >>> t = torch.linspace(0.0, 1.0, 5)
        >>> ys = odecore.odeint(lambda t, y: -y, torch.ones(3), t)
        >>> ys.shape
        torch.Size([5, 3])
        >>> torch.allclose(ys[:, 0], torch.exp(-t))
        True
    """
    solver = _solver_for(method)
    ts = _check_t(t)
    opts = dict(options or {})
    adaptive = method in ADAPTIVE_METHODS
    known = ADAPTIVE_OPTIONS if adaptive else FIXED_OPTIONS
    unknown = sorted(set(opts) - set(known))
    if unknown:
        raise ConfigurationError(
            f"Unknown option(s) {unknown} for method {method!r}; known options: {', '.join(known)}."
        )
    rtol = _positive("rtol", rtol)
    atol = _positive("atol", atol)
    max_steps = opts.get("max_num_steps", 100_000)
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"`max_num_steps` must be a positive integer, got {max_steps!r}.")
    t0, t1 = ts[0], ts[-1]
    span = abs(t1 - t0)

    if adaptive:
        kwargs: dict[str, Any] = {"rtol": rtol, "atol": atol}
        for name, field in (
            ("safety", "safety"),
            ("ifactor", "factor_max"),
            ("dfactor", "factor_min"),
            ("pcoeff", "pcoeff"),
            ("icoeff", "icoeff"),
            ("dcoeff", "dcoeff"),
            ("max_step", "dt_max"),
            ("norm", "norm"),
        ):
            if name in opts:
                kwargs[field] = opts[name]
        controller: PIDController | ConstantStepSize = PIDController(**kwargs)
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
            # torchdiffeq's default: one step per interval of `t`.
            dt0 = None
    step_ts = opts.get("step_t")
    if not adaptive and dt0 is None:
        step_ts = list(ts) + (list(_times(step_ts)) if step_ts is not None else [])
        dt0 = span if span > 0 else 1.0

    sol = solve(
        func,
        y0,
        t0=t0,
        t1=t1,
        solver=solver,
        controller=controller,
        saveat=SaveAt(ts=ts),
        dt0=dt0,
        jump_ts=opts.get("jump_t"),
        step_ts=step_ts,
        max_steps=max_steps,
    )
    return sol.ys


def _times(value: Any) -> list[float]:
    if isinstance(value, Tensor):
        return [float(v) for v in value.detach().reshape(-1).tolist()]
    return [float(v) for v in value]

"""Reference answers for the odecore tests.

Two kinds of oracle:

* :class:`Problem` s with a closed-form solution (``exact``), vectorised over any
  batch shape of the state and written in torch so that they run in float64 or
  float32 alike;
* :func:`scipy_reference`: a tight-tolerance (``rtol = atol = 1e-12``, DOP853)
  ``scipy.integrate.solve_ivp`` solution for problems without one (Van der Pol,
  the nonlinear pendulum).

``RK_SOLVERS`` lists the Runge-Kutta solver classes odecore ships, for tests that
check a property of each.

Every problem is autonomous or not as its name says; ``f(t, y)`` takes the time as
a 0-dim tensor, as :func:`odecore.odeint` passes it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import odecore
import torch
from scipy.integrate import solve_ivp
from torch import Tensor

__all__ = [
    "CLOSED_FORM",
    "NONLINEAR",
    "Problem",
    "cos_growth",
    "decay",
    "harmonic",
    "linear_system",
    "pendulum",
    "problem",
    "reference",
    "scipy_reference",
    "van_der_pol",
]


@dataclass(frozen=True)
class Problem:
    """An initial value problem ``y' = f(t, y)``, ``y(t0) = y0`` on ``[t0, t1]``.

    Attributes:
        name: short id, used in test ids.
        f: the vector field on torch tensors; the last dimension of ``y`` is the
            system's, leading dimensions are a batch.
        y0: the default initial state (float64, shape ``(dim,)``).
        t0, t1: the default time span.
        exact: ``exact(t, y0) -> y(t)`` for a closed-form problem (``t`` a 1-D
            tensor; the result has shape ``(len(t), *y0.shape)``), else ``None``.
        f_numpy: the same field on a 1-D numpy state, for scipy (nonlinear ones).
    """

    name: str
    f: Callable[[Tensor, Tensor], Tensor]
    y0: Tensor
    t0: float
    t1: float
    exact: Callable[[Tensor, Tensor], Tensor] | None = None
    f_numpy: Callable[[float, np.ndarray], np.ndarray] | None = None

    def __repr__(self) -> str:  # short test ids
        return self.name

    def y0_as(self, dtype: torch.dtype = torch.float64) -> Tensor:
        return self.y0.to(dtype)

    def times(self, n: int, dtype: torch.dtype = torch.float64) -> Tensor:
        return torch.linspace(self.t0, self.t1, n, dtype=dtype)


def _bcast_t(t: Tensor, y0: Tensor) -> Tensor:
    """``t`` of shape ``(T,)`` reshaped to broadcast against ``(T, *y0.shape)``."""
    return t.to(y0.dtype).reshape(-1, *([1] * y0.dim()))


# --- closed-form problems -----------------------------------------------------------


def _decay_f(t: Tensor, y: Tensor) -> Tensor:
    return -(1.0 + t) * y


def _decay_exact(t: Tensor, y0: Tensor) -> Tensor:
    tt = _bcast_t(t, y0)
    return y0 * torch.exp(-(tt + 0.5 * tt**2))


decay = Problem(
    name="decay",
    f=_decay_f,
    y0=torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64),
    t0=0.0,
    t1=1.5,
    exact=_decay_exact,
)
"""Exponential decay with a time-dependent rate: ``y' = -(1 + t) y``,
``y(t) = y0 exp(-(t + t^2 / 2))``. Explicit time dependence."""


def _cos_f(t: Tensor, y: Tensor) -> Tensor:
    return torch.cos(t) * y


def _cos_exact(t: Tensor, y0: Tensor) -> Tensor:
    return y0 * torch.exp(torch.sin(_bcast_t(t, y0)))


cos_growth = Problem(
    name="cos",
    f=_cos_f,
    y0=torch.tensor([1.0, 0.25], dtype=torch.float64),
    t0=0.0,
    t1=2.0,
    exact=_cos_exact,
)
"""``y' = cos(t) y``, ``y(t) = y0 exp(sin t)``. Explicit time dependence."""

_A = torch.tensor(
    [[-0.5, 1.0, 0.0], [-1.0, -0.5, 0.3], [0.2, 0.0, -1.0]],
    dtype=torch.float64,
)


def _linear_f(t: Tensor, y: Tensor) -> Tensor:
    return y @ _A.to(y.dtype).T


def _linear_exact(t: Tensor, y0: Tensor) -> Tensor:
    a = _A.to(y0.dtype)
    expm = torch.linalg.matrix_exp(t.to(y0.dtype).reshape(-1, 1, 1) * a)  # (T, n, n)
    # y(t) = expm(t A) y0 for every batch element: y0 (..., n) -> (T, ..., n).
    return torch.einsum("tij,...j->t...i", expm, y0)


linear_system = Problem(
    name="linear",
    f=_linear_f,
    y0=torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64),
    t0=0.0,
    t1=2.0,
    exact=_linear_exact,
)
"""A damped, rotating linear system ``y' = A y``, ``y(t) = expm(t A) y0``."""

OMEGA = 2.0


def _harmonic_f(t: Tensor, y: Tensor) -> Tensor:
    q, p = y[..., :1], y[..., 1:]
    return torch.cat([p, -(OMEGA**2) * q], dim=-1)


def harmonic_tuple_f(t: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """The harmonic oscillator on a ``(q, p)`` tuple state."""
    q, p = state
    return p, -(OMEGA**2) * q


def _harmonic_exact(t: Tensor, y0: Tensor) -> Tensor:
    tt = _bcast_t(t, y0[..., 0])
    q0, p0 = y0[..., 0], y0[..., 1]
    c, s = torch.cos(OMEGA * tt), torch.sin(OMEGA * tt)
    q = q0 * c + p0 / OMEGA * s
    p = -q0 * OMEGA * s + p0 * c
    return torch.stack([q, p], dim=-1)


harmonic = Problem(
    name="harmonic",
    f=_harmonic_f,
    y0=torch.tensor([1.0, 0.5], dtype=torch.float64),
    t0=0.0,
    t1=3.0,
    exact=_harmonic_exact,
)
"""The harmonic oscillator ``q' = p, p' = -w^2 q`` (``w = 2``) on the state ``(q, p)``."""

CLOSED_FORM = (decay, cos_growth, linear_system, harmonic)
"""Every problem with a closed-form solution."""


# --- nonlinear problems (scipy reference) -----------------------------------------------

MU = 1.0


def _vdp_f(t: Tensor, y: Tensor) -> Tensor:
    x, v = y[..., :1], y[..., 1:]
    return torch.cat([v, MU * (1 - x**2) * v - x], dim=-1)


def _vdp_np(t: float, y: np.ndarray) -> np.ndarray:
    return np.array([y[1], MU * (1 - y[0] ** 2) * y[1] - y[0]])


van_der_pol = Problem(
    name="vdp",
    f=_vdp_f,
    y0=torch.tensor([2.0, 0.0], dtype=torch.float64),
    t0=0.0,
    t1=4.0,
    f_numpy=_vdp_np,
)
"""Van der Pol's oscillator, ``mu = 1``."""


def _pendulum_f(t: Tensor, y: Tensor) -> Tensor:
    th, om = y[..., :1], y[..., 1:]
    return torch.cat([om, -torch.sin(th)], dim=-1)


def _pendulum_np(t: float, y: np.ndarray) -> np.ndarray:
    return np.array([y[1], -math.sin(y[0])])


pendulum = Problem(
    name="pendulum",
    f=_pendulum_f,
    y0=torch.tensor([2.5, 0.0], dtype=torch.float64),
    t0=0.0,
    t1=5.0,
    f_numpy=_pendulum_np,
)
"""The nonlinear pendulum ``theta'' = -sin(theta)`` at a large amplitude."""

NONLINEAR = (van_der_pol, pendulum)
"""Problems whose reference comes from scipy."""

_BY_NAME = {p.name: p for p in (*CLOSED_FORM, *NONLINEAR)}


def problem(name: str) -> Problem:
    """The problem called ``name``."""
    return _BY_NAME[name]


@functools.lru_cache(maxsize=256)
def _scipy_cached(
    name: str, y0: tuple[float, ...], t0: float, ts: tuple[float, ...]
) -> tuple[tuple[float, ...], ...]:
    prob = _BY_NAME[name]
    assert prob.f_numpy is not None, f"{name} has no numpy field"
    # One solve per interval, so that every output time is a step end of DOP853: its
    # seventh-order dense output (``t_eval``) is about 20x less accurate than its steps
    # (7e-12 against 4e-13 on Van der Pol).
    y = np.asarray(y0, dtype=np.float64)
    out = []
    start = t0
    for t in ts:
        if t != start:
            sol = solve_ivp(prob.f_numpy, (start, t), y, method="DOP853", rtol=1e-12, atol=1e-12)
            assert sol.success, sol.message
            y, start = sol.y[:, -1], t
        out.append(tuple(float(v) for v in y))
    return tuple(out)


def scipy_reference(prob: Problem, y0: Tensor, t: Tensor, *, t0: float | None = None) -> Tensor:
    """``solve_ivp(..., method="DOP853", rtol=atol=1e-12)`` at the times ``t``.

    The solve is restarted at each output time, so each is reached by a step
    rather than by interpolation.

    ``y0`` is the 1-D state at ``t0`` (default ``prob.t0``); ``t`` is monotone away
    from ``t0`` (either direction). The result has shape ``(len(t), *y0.shape)`` in
    float64. Cached, so several tests may ask for the same reference.
    """
    ys = _scipy_cached(
        prob.name,
        tuple(float(v) for v in y0.detach().double().reshape(-1)),
        float(prob.t0 if t0 is None else t0),
        tuple(float(v) for v in t.detach().double().reshape(-1)),
    )
    return torch.tensor(ys, dtype=torch.float64).reshape(len(t), *y0.shape)


def reference(prob: Problem, y0: Tensor, t: Tensor) -> Tensor:
    """The best available answer at ``t`` for ``y(prob.t0) = y0``, in float64.

    Closed form when there is one (every closed-form problem starts at ``t0 = 0``),
    else :func:`scipy_reference`.
    """
    if prob.exact is not None:
        assert prob.t0 == 0.0
        return prob.exact(t.double(), y0.double())
    return scipy_reference(prob, y0, t)


RK_SOLVERS = sorted(
    (
        obj
        for obj in (getattr(odecore, name) for name in odecore.__all__)
        if isinstance(obj, type)
        and issubclass(obj, odecore.AbstractExplicitRK)
        and obj is not odecore.AbstractExplicitRK
    ),
    key=lambda cls: cls.__name__,
)
"""Every Runge-Kutta solver class odecore exports, by name."""

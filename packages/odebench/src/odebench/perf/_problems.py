"""The benchmark's problems: vector fields, initial states, time spans, exact solutions.

Every vector field is an ``nn.Module`` whose ``forward(t, y)`` takes the time as a
0-dim tensor (or a float) and returns ``dy/dt`` with the shape of ``y``; its
parameters are what the gradient methods differentiate besides ``y0``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import odecore
import torch
from torch import Tensor, nn

PROBLEMS = ("mlp", "conv_relu", "conv_softplus", "vdp", "linear")
"""The names of the explicit problems, in the order the benchmark runs them."""

STIFF_PROBLEMS = ("vdp_stiff", "robertson")
"""The stiff problems, run after the others with the implicit methods' sweep."""

KNOWN_PROBLEMS = (*PROBLEMS, *STIFF_PROBLEMS)
"""Every problem name that :func:`make_problem` builds."""

VDP_STIFF_MU = 1000.0
"""The stiffness of ``vdp_stiff``: on the slow drifts the Jacobian has an eigenvalue near
``-3 mu``, so an explicit method's steps stay below about ``1e-3``."""


MAX_EVALUATIONS = 20_000
"""The most evaluations of the field one run may take, forward and backward together.

Ten times the most any library takes on a problem it solves (2,000); a peer whose
adjoint creeps along at tiny steps on Van der Pol is stopped here instead of
running for hours.
"""


class EvaluationLimitError(RuntimeError):
    """A run took more evaluations of the field than its :class:`CountingField` allows."""


class CountingField(nn.Module):
    """Wraps a vector field and counts its evaluations in ``nfe``.

    The benchmark hands this wrapper, not the bare field, to every library, so the
    counts are the same kind of number whichever library asks: one per call of the
    field, forward or inside a backward pass. The caller resets ``nfe`` before each
    run; a call beyond ``limit`` raises :class:`EvaluationLimitError`, which ends the
    run as a failure.

    Args:
        field: the vector field.
        limit: the most calls between two resets; ``None`` for no limit.
    """

    def __init__(self, field: nn.Module, limit: int | None = MAX_EVALUATIONS) -> None:
        super().__init__()
        if limit is not None and limit < 1:
            raise ValueError(f"`limit` must be a positive number of evaluations, got {limit!r}.")
        self.field = field
        self.limit = limit
        self.nfe = 0

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        self.nfe += 1
        if self.limit is not None and self.nfe > self.limit:
            raise EvaluationLimitError(
                f"stopped after {self.limit:,} evaluations of the field in one run"
            )
        out: Tensor = self.field(t, y)
        return out


class MLPField(nn.Module):
    """``dy/dt = W3 tanh(W2 tanh(W1 y + b1) + b2) + b3``: two tanh layers, autonomous."""

    def __init__(self, state: int = 32, hidden: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, state),
        )

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        out: Tensor = self.net(y)
        return out


def _group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(32, channels), channels)


class ConvField(nn.Module):
    """Chen et al.'s ODE-Net block: (GroupNorm, activation, 3x3 conv with time as a channel) x 2.

    Args:
        channels: channels of the state ``(batch, channels, height, width)``.
        activation: ``"relu"`` (the ODE-Net block) or ``"softplus"`` (its smooth twin).
    """

    def __init__(self, channels: int = 16, activation: str = "relu") -> None:
        super().__init__()
        if activation not in ("relu", "softplus"):
            raise ValueError(f"`activation` must be 'relu' or 'softplus', got {activation!r}.")
        self.act = torch.relu if activation == "relu" else nn.functional.softplus
        self.norm1 = _group_norm(channels)
        self.conv1 = nn.Conv2d(channels + 1, channels, 3, padding=1)
        self.norm2 = _group_norm(channels)
        self.conv2 = nn.Conv2d(channels + 1, channels, 3, padding=1)

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        tt = torch.as_tensor(t, dtype=y.dtype, device=y.device).reshape(())
        tt = tt.expand(y.shape[0], 1, *y.shape[2:])
        h = self.conv1(torch.cat([tt, self.act(self.norm1(y))], 1))
        out: Tensor = self.conv2(torch.cat([tt, self.act(self.norm2(h))], 1))
        return out


class VanDerPol(nn.Module):
    """The Van der Pol oscillator ``x'' = mu (1 - x^2) x' - x`` as ``y = (x, x')``.

    ``mu`` is a parameter (so it has a gradient); the state is ``(batch, 2)``.
    """

    def __init__(self, mu: float = 5.0) -> None:
        super().__init__()
        self.mu = nn.Parameter(torch.tensor(float(mu)))

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        x, v = y[..., 0], y[..., 1]
        return torch.stack([v, self.mu * (1 - x * x) * v - x], dim=-1)


class Robertson(nn.Module):
    """Robertson's chemical kinetics, ``y1' = -k1 y1 + k3 y2 y3``,
    ``y2' = k1 y1 - k3 y2 y3 - k2 y2^2``, ``y3' = k2 y2^2``, with the rate constants
    ``(k1, k2, k3) = (0.04, 3e7, 1e4)`` as parameters; the state is ``(batch, 3)``."""

    def __init__(self) -> None:
        super().__init__()
        self.rates = nn.Parameter(torch.tensor([0.04, 3e7, 1e4]))

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        k1, k2, k3 = self.rates.unbind()
        y1, y2, y3 = y.unbind(-1)
        fast, slow = k3 * y2 * y3, k2 * y2 * y2
        return torch.stack([-k1 * y1 + fast, k1 * y1 - fast - slow, slow], dim=-1)


class LinearField(nn.Module):
    """``dy/dt = A y`` with ``A = S - decay * I``, ``S`` skew-symmetric: a damped rotation.

    The exact solution is ``y(t) = expm(A (t - t0)) y0``; see :meth:`exact`.
    """

    def __init__(
        self, state: int = 16, decay: float = 0.5, generator: torch.Generator | None = None
    ):
        super().__init__()
        m = torch.randn(state, state, generator=generator) / state**0.5
        self.a = nn.Parameter(m - m.T - decay * torch.eye(state))

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        return y @ self.a.T

    def exact(self, y0: Tensor, dt: float) -> Tensor:
        """``y(t0 + dt)`` from ``y(t0) = y0`` (rows of ``y0`` are states), in float64."""
        a = self.a.detach().to(torch.float64)
        out: Tensor = y0.detach().to(torch.float64) @ torch.linalg.matrix_exp(a * dt).T
        return out


@dataclass
class Problem:
    """One benchmark problem, ``dy/dt = field(t, y)`` from ``y0`` at ``t0`` to ``t1``:
    ``description`` says what it is with its sizes, for the report, and ``exact`` is
    the exact ``y(t1)`` in float64 where known."""

    name: str
    description: str
    field: nn.Module
    y0: Tensor
    t0: float
    t1: float
    exact: Tensor | None = None
    atol_ratio: float = 1.0
    """The stiff sweep's ``atol`` over its ``rtol`` (Robertson's: ``1e-4``)."""

    @property
    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.field.parameters())


@dataclass(frozen=True)
class Sizes:
    """Batch and state sizes of the problems (the full run's, or smaller ones for ``--quick``)."""

    mlp_batch: int = 256
    mlp_state: int = 32
    mlp_hidden: int = 128
    conv_batch: int = 32
    conv_channels: int = 16
    conv_size: int = 8
    vdp_batch: int = 64
    linear_batch: int = 64
    linear_state: int = 16
    vdp_stiff_t1: float = 3000.0

    @classmethod
    def quick(cls) -> Sizes:
        return cls(mlp_batch=32, conv_batch=4, vdp_batch=8, linear_batch=16, vdp_stiff_t1=300.0)


def make_problem(
    name: str, sizes: Sizes | None = None, dtype: torch.dtype = torch.float32, seed: int = 0
) -> Problem:
    """Build a problem by name, with its parameters and ``y0`` drawn from ``seed``.

    ``vdp_stiff`` (Van der Pol at ``mu = 1000`` from ``y0 = (2, 0)``, one state) has
    no random part and is always float64, whatever ``dtype`` says: its reference and
    the tight end of its tolerance sweep need the precision. On ``[0, 3000]`` (the
    full run) it holds two periods: slow drifts, where the Jacobian has an
    eigenvalue near ``-3000``, joined by four jumps a few time units long; on
    ``[0, 300]`` (``Sizes.quick``) the first drift only, stiff as well. ``robertson``
    (:class:`Robertson` from ``y0 = (1, 0, 0)`` on ``[0, 1e5]``, in float64 too, in
    quick mode as well) is solved at ``atol = 1e-4 rtol``: ``y2`` stays below
    ``4e-5``.

    Raises:
        ValueError: for an unknown name.
    """
    s = sizes or Sizes()
    gen = torch.Generator().manual_seed(seed)
    atol_ratio = 1.0
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if name == "mlp":
            field: nn.Module = MLPField(s.mlp_state, s.mlp_hidden)
            y0 = torch.randn(s.mlp_batch, s.mlp_state, generator=gen)
            desc = (
                f"MLP field, batch {s.mlp_batch}, state {s.mlp_state}, "
                f"two tanh layers of {s.mlp_hidden}, t in [0, 1]"
            )
            t1 = 1.0
        elif name in ("conv_relu", "conv_softplus"):
            act = name.split("_", 1)[1]
            field = ConvField(s.conv_channels, act)
            y0 = torch.randn(s.conv_batch, s.conv_channels, s.conv_size, s.conv_size, generator=gen)
            desc = (
                f"ODE-Net conv block ({act}), batch {s.conv_batch} x {s.conv_channels} x "
                f"{s.conv_size} x {s.conv_size}, t in [0, 1]"
            )
            t1 = 1.0
        elif name == "vdp":
            field = VanDerPol(5.0)
            y0 = 4 * torch.rand(s.vdp_batch, 2, generator=gen) - 2
            desc = f"Van der Pol, mu = 5, batch {s.vdp_batch}, t in [0, 5]"
            t1 = 5.0
        elif name == "vdp_stiff":
            field = VanDerPol(VDP_STIFF_MU)
            y0 = torch.tensor([[2.0, 0.0]])
            t1 = s.vdp_stiff_t1
            desc = f"Van der Pol, mu = {VDP_STIFF_MU:g}, y0 = (2, 0), t in [0, {t1:g}], float64"
            dtype = torch.float64
        elif name == "robertson":
            field = Robertson()
            y0 = torch.tensor([[1.0, 0.0, 0.0]])
            t1 = 1e5
            desc = "Robertson, y0 = (1, 0, 0), t in [0, 1e5], atol = 1e-4 rtol, float64"
            dtype = torch.float64
            atol_ratio = 1e-4
        elif name == "linear":
            field = LinearField(s.linear_state, generator=gen)
            y0 = torch.randn(s.linear_batch, s.linear_state, generator=gen)
            desc = (
                f"linear system y' = A y (damped rotation), batch {s.linear_batch}, "
                f"state {s.linear_state}, t in [0, 1]"
            )
            t1 = 1.0
        else:
            raise ValueError(
                f"Unknown problem {name!r}; known problems: {', '.join(KNOWN_PROBLEMS)}."
            )
    field = field.to(dtype)
    y0 = y0.to(dtype)
    exact = field.exact(y0, t1) if isinstance(field, LinearField) else None
    return Problem(name, desc, field, y0, 0.0, t1, exact, atol_ratio)


def reference_solution(problem: Problem, tol: float = 1e-10) -> tuple[Tensor, str]:
    """``y(t1)`` in float64: the exact solution if known, else a tight solve.

    The tight solve is odecore's eighth-order pair (``Dopri8``) in float64 at
    ``rtol = atol = tol``, on a float64 copy of the field; it is a different
    method from the fifth-order pair under test.

    Returns:
        The reference state and a sentence saying where it came from.
    """
    if problem.exact is not None:
        return problem.exact, "exact solution"
    field = copy.deepcopy(problem.field).to(torch.float64)
    with torch.no_grad():
        sol = odecore.solve(
            field,
            problem.y0.to(torch.float64),
            t0=problem.t0,
            t1=problem.t1,
            solver=odecore.Dopri8(),
            controller=odecore.PIDController(rtol=tol, atol=tol),
        )
    return last_state(sol.ys), f"odecore dopri8 in float64 at rtol = atol = {tol:g}"


def last_state(ys: object) -> Tensor:
    """The last of a solution's states: every state of the benchmark is one tensor."""
    if not isinstance(ys, Tensor):  # pragma: no cover - every state here is a tensor
        raise TypeError(f"expected a tensor solution, got {type(ys).__name__}")
    return ys[-1]


def max_abs_error(y: Tensor, reference: Tensor) -> float:
    """The largest absolute difference, computed in float64."""
    return float((y.detach().to(torch.float64) - reference).abs().max())


def error_figure(y1: Tensor, reference: Tensor) -> tuple[float | None, str | None]:
    """A run's ``error``, its largest absolute difference from ``reference`` at ``t1``,
    as ``(value, note)``: none where the solution is not finite."""
    if not bool(torch.isfinite(y1).all()):
        return None, "the solution holds NaN or inf"
    return max_abs_error(y1, reference), None

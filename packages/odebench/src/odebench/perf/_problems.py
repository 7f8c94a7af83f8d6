"""The benchmark's problems (docs/odebench/index.md): vector fields as ``nn.Module``
``forward(t, y)``, initial states, time spans and exact solutions."""

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
"""The most evaluations of the field one run may take, forward and backward together
(why: docs/odebench/index.md)."""


class EvaluationLimitError(RuntimeError):
    """A run took more evaluations of the field than its :class:`CountingField` allows."""


class CountingField(nn.Module):
    """The field that every library gets: it counts its calls in ``nfe`` (reset by the
    caller before each run), and a call beyond ``limit`` (``None``: none) raises
    :class:`EvaluationLimitError`."""

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
    """Chen et al.'s ODE-Net block: (GroupNorm, activation, 3x3 conv with time as a channel)
    x 2, with ``"relu"`` or ``"softplus"``, on states ``(batch, channels, height, width)``
    at a time ``t`` of shape ``()`` or one per sample, ``(batch,)`` (torchode's)."""

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
        tt = torch.as_tensor(t, dtype=y.dtype, device=y.device).reshape(-1, 1, 1, 1)
        tt = tt.expand(y.shape[0], 1, *y.shape[2:])
        h = self.conv1(torch.cat([tt, self.act(self.norm1(y))], 1))
        out: Tensor = self.conv2(torch.cat([tt, self.act(self.norm2(h))], 1))
        return out


class VanDerPol(nn.Module):
    """Van der Pol, ``x'' = mu (1 - x^2) x' - x`` as ``y = (x, x')`` of shape ``(batch, 2)``,
    with ``mu`` a parameter."""

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
        # In float64: 0.04 in float32 is 0.0399999991, another problem once widened.
        self.rates = nn.Parameter(torch.tensor([0.04, 3e7, 1e4], dtype=torch.float64))

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        k1, k2, k3 = self.rates.unbind()
        y1, y2, y3 = y.unbind(-1)
        fast, slow = k3 * y2 * y3, k2 * y2 * y2
        return torch.stack([-k1 * y1 + fast, k1 * y1 - fast - slow, slow], dim=-1)


class LinearField(nn.Module):
    """``dy/dt = A y`` with ``A = S - decay * I``, ``S`` skew-symmetric: a damped rotation."""

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
    """``dy/dt = field(t, y)`` from ``y0`` at ``t0`` to ``t1``, described for the report, with
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
    """Build a problem by name (docs/odebench/index.md), its parameters and ``y0`` drawn
    from ``seed``; the stiff ones are float64 whatever ``dtype`` says.

    Raises:
        ValueError: for an unknown name.
    """
    s = sizes or Sizes()
    gen = torch.Generator().manual_seed(seed)
    t1, atol_ratio = 1.0, 1.0
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if name == "mlp":
            field: nn.Module = MLPField(s.mlp_state, s.mlp_hidden)
            y0 = torch.randn(s.mlp_batch, s.mlp_state, generator=gen)
            desc = (
                f"MLP field, batch {s.mlp_batch}, state {s.mlp_state}, "
                f"two tanh layers of {s.mlp_hidden}, t in [0, 1]"
            )
        elif name in ("conv_relu", "conv_softplus"):
            act = name.split("_", 1)[1]
            field = ConvField(s.conv_channels, act)
            y0 = torch.randn(s.conv_batch, s.conv_channels, s.conv_size, s.conv_size, generator=gen)
            desc = (
                f"ODE-Net conv block ({act}), batch {s.conv_batch} x {s.conv_channels} x "
                f"{s.conv_size} x {s.conv_size}, t in [0, 1]"
            )
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
        else:
            raise ValueError(
                f"Unknown problem {name!r}; known problems: {', '.join(KNOWN_PROBLEMS)}."
            )
    field = field.to(dtype)
    y0 = y0.to(dtype)
    exact = field.exact(y0, t1) if isinstance(field, LinearField) else None
    return Problem(name, desc, field, y0, 0.0, t1, exact, atol_ratio)


def reference_solution(
    problem: Problem, tol: float = 1e-10, method: str = "dopri8"
) -> tuple[Tensor, str]:
    """``y(t1)`` in float64 and where it came from: the exact solution if known, else
    odecore's ``method`` (``dopri8``: not the pair under test) on a float64 copy at
    ``rtol = atol = tol``."""
    if problem.exact is not None:
        return problem.exact, "exact solution"
    field = copy.deepcopy(problem.field).to(torch.float64)
    t = torch.tensor([problem.t0, problem.t1], dtype=torch.float64)
    with torch.no_grad():
        ys = odecore.odeint(
            field, problem.y0.to(torch.float64), t, method=method, rtol=tol, atol=tol
        )
    return last_state(ys), f"odecore {method} in float64 at rtol = atol = {tol:g}"


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

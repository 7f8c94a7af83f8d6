"""Gradient error against finite differences on the conv fields (docs/odebench/index.md):
central differences of ``L = sum(w * y(t1))`` along random unit directions in ``(y0,
parameters)``, each loss from a fine float64 RK4 solve written here, no library's."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ._document import GradientRow, Measured, figure_rows, unmeasured
from ._libraries import GRADIENT_MODES, Library, Method, describe_error
from ._problems import ConvField, CountingField, Problem
from ._timing import run_once

F64 = torch.float64


@dataclass(frozen=True)
class GradcheckSizes:
    """Sizes and resolution of the check; the ReLU field's solution is only piecewise smooth,
    so its reference needs more rk4 steps."""

    batch: int = 8
    channels: int = 16
    size: int = 8
    fd_steps_relu: int = 2000
    fd_steps_softplus: int = 400
    eps: float = 1e-4
    directions: int = 2
    tol: float = 1e-6

    @classmethod
    def quick(cls) -> GradcheckSizes:
        return cls(
            batch=2, channels=8, size=4, fd_steps_relu=100, fd_steps_softplus=50, directions=1
        )


def rk4_final(field: nn.Module, y0: Tensor, t0: float, t1: float, n_steps: int) -> Tensor:
    """``y(t1)`` by classic RK4 with ``n_steps`` uniform steps (the reference's own solver)."""
    h = (t1 - t0) / n_steps
    y = y0
    for i in range(n_steps):
        t = t0 + i * h
        ta = torch.tensor(t, dtype=y0.dtype)
        tm = torch.tensor(t + h / 2, dtype=y0.dtype)
        tb = torch.tensor(t + h, dtype=y0.dtype)
        k1 = field(ta, y)
        k2 = field(tm, y + (h / 2) * k1)
        k3 = field(tm, y + (h / 2) * k2)
        k4 = field(tb, y + h * k3)
        y = y + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
    return y


@dataclass(frozen=True)
class _Case:
    """One conv field in float64 with its ``y0``, loss weight and random unit directions
    in ``(y0, parameters)``."""

    name: str
    field: nn.Module
    y0: Tensor
    w: Tensor
    directions: list[list[Tensor]]

    @classmethod
    def build(cls, activation: str, s: GradcheckSizes, seed: int) -> _Case:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            field = ConvField(s.channels, activation).to(F64)
            y0 = torch.randn(s.batch, s.channels, s.size, s.size, dtype=F64)
            w = torch.randn(y0.shape, dtype=F64) / y0.numel() ** 0.5
            directions = []
            for _ in range(s.directions):
                parts = [torch.randn_like(x) for x in (y0, *field.parameters())]
                norm = torch.sqrt(sum((p * p).sum() for p in parts))  # type: ignore[arg-type]
                directions.append([p / norm for p in parts])
        return cls(f"conv_{activation}", field, y0, w, directions)

    @property
    def problem(self) -> Problem:
        """The case as a problem on ``[0, 1]``, for :func:`~odebench.perf._timing.run_once`."""
        return Problem(self.name, self.name, self.field, self.y0, 0.0, 1.0)

    def loss(self, n_steps: int) -> float:
        """The loss of the reference's own rk4 solve with ``n_steps`` steps."""
        with torch.no_grad():
            return float((self.w * rk4_final(self.field, self.y0, 0.0, 1.0, n_steps)).sum())

    def derivative(self, direction: list[Tensor], eps: float, n_steps: int) -> float:
        """Central difference of :meth:`loss` along ``direction``, moving ``y0`` and the
        parameters in place and back."""
        tensors = [self.y0, *self.field.parameters()]
        values = []
        for sign in (1.0, -1.0):
            with torch.no_grad():
                for x, v in zip(tensors, direction):
                    x.add_(sign * eps * v)
            try:
                values.append(self.loss(n_steps))
            finally:
                with torch.no_grad():
                    for x, v in zip(tensors, direction):
                        x.sub_(sign * eps * v)
        return (values[0] - values[1]) / (2 * eps)


def gradient_check(
    libraries: list[Library],
    *,
    sizes: GradcheckSizes | None = None,
    log: Callable[[str], None] = lambda _: None,
    seed: int = 0,
) -> list[GradientRow]:
    """The ``gradients`` rows of every library's gradient methods on each conv field, after
    the field's reference rows (``library = "finite differences"``)."""
    s = sizes or GradcheckSizes()
    method = Method("dopri5", rtol=s.tol, atol=s.tol)
    rows: list[GradientRow] = []
    for activation in ("relu", "softplus"):
        case = _Case.build(activation, s, seed)
        fd_steps = s.fd_steps_relu if activation == "relu" else s.fd_steps_softplus
        log(f"  gradient check {case.name}: finite differences ({fd_steps} rk4 steps, float64)")
        reference, figures = _finite_differences(case, s, fd_steps)
        key = (case.name, "rk4 reference", "finite differences", "-")
        rows += figure_rows(GradientRow, key, figures, _FD_UNITS)
        for library in libraries:
            for mode in GRADIENT_MODES:
                key = (case.name, method.label, library.name, mode)
                reason = library.unsupported(method, mode)
                if reason is not None:
                    rows += figure_rows(GradientRow, key, reason, _UNITS)
                    continue
                log(f"  gradient check {case.name}: {library.name} {mode}")
                figures = _library_gradient(case, library, method, mode, reference)
                rows += figure_rows(GradientRow, key, figures, _UNITS)
    return rows


def _finite_differences(
    case: _Case, s: GradcheckSizes, fd_steps: int
) -> tuple[list[float], Measured]:
    """The reference's directional derivatives, and its figures: resolution, scale, time."""
    start = time.perf_counter()
    reference = [case.derivative(d, s.eps, fd_steps) for d in case.directions]
    coarse = [case.derivative(d, s.eps, fd_steps // 2) for d in case.directions]
    resolution = max(abs(a - b) for a, b in zip(reference, coarse))
    return reference, {
        "fd_resolution": (
            resolution,
            f"|D(n) - D(n/2)| with n = {fd_steps} rk4 steps, eps = {s.eps:g}",
        ),
        "fd_scale": (
            max(abs(r) for r in reference),
            "largest directional derivative |D| (the scale of the errors below)",
        ),
        "time_s": (
            time.perf_counter() - start,
            f"state {s.batch} x {s.channels} x {s.size} x {s.size} in float64, "
            f"{s.directions} random unit direction(s) in (y0, parameters)",
        ),
    }


def _library_gradient(
    case: _Case, library: Library, method: Method, mode: str, reference: list[float]
) -> Measured:
    """One library's gradient by ``mode``: its error along the directions, its evaluations
    and its time; a failure is every figure's note."""
    try:
        run = run_once(library, case.problem, CountingField(case.field), method, mode, case.w)
    except Exception as exc:
        return unmeasured(_UNITS, describe_error(exc))
    assert run.gradient is not None  # a gradient mode's run has one
    # y0's gradient, then each parameter's: the parts of a direction
    grads = torch.split(run.gradient, [v.numel() for v in case.directions[0]])
    derivs = [
        float(sum((g.view_as(v) * v).sum() for g, v in zip(grads, d))) for d in case.directions
    ]
    nfe_forward, nfe_backward = run.nfe_forward, run.nfe_backward
    rel = [abs(a - b) / abs(b) for a, b in zip(derivs, reference) if b != 0]
    return {
        "grad_abs_error": (max(abs(a - b) for a, b in zip(derivs, reference)), None),
        "grad_rel_error": (max(rel) if rel else None, None if rel else "zero reference derivative"),
        "nfe_forward": (nfe_forward, None),
        "nfe_backward": (nfe_backward, None),
        "nfe_backward_over_forward": (
            nfe_backward / nfe_forward if nfe_forward else None,
            None if nfe_forward else "no forward evaluations",
        ),
        "time_s": (run.time_s, None),
    }


_UNITS = {
    "grad_abs_error": "abs",
    "grad_rel_error": "relative",
    "nfe_forward": "evaluations",
    "nfe_backward": "evaluations",
    "nfe_backward_over_forward": "ratio",
    "time_s": "s",
}
_FD_UNITS = {"fd_resolution": "abs", "fd_scale": "abs", "time_s": "s"}

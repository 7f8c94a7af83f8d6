"""Gradient error against finite differences, for the conv fields with ReLU and softplus.

The reference is library-neutral: central differences of the loss
``L = sum(w * y(t1))`` along a few random unit directions in ``(y0, parameters)``,
each loss from a fine fixed-step classic RK4 solve in float64 written here (not any
library's solver). Its resolution is reported too: the change of the difference
quotients when the number of steps is halved.

Each library's gradient methods then solve the same problem with dopri5 at
``rtol = atol = 1e-6`` in float64, and the benchmark reports their directional
derivatives' error against the reference, with the forward and backward function
evaluations that it took.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ._libraries import GRADIENT_MODES, Library, Method, describe_error
from ._problems import ConvField, CountingField
from ._stats import finite

F64 = torch.float64


@dataclass(frozen=True)
class GradcheckSizes:
    """Sizes and resolution of the check (the full run's, or smaller ones for ``--quick``).

    The ReLU field's reference needs more steps than the softplus one: its solution
    is only piecewise smooth, so rk4 converges more slowly there.
    """

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


def _directional_fd(
    loss: Callable[[int], float],
    tensors: list[Tensor],
    direction: list[Tensor],
    eps: float,
    n_steps: int,
) -> float:
    """Central difference of ``loss`` along ``direction``, moving ``tensors`` in place and back."""
    values = []
    for sign in (1.0, -1.0):
        with torch.no_grad():
            for x, v in zip(tensors, direction):
                x.add_(sign * eps * v)
        try:
            values.append(loss(n_steps))
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
) -> list[dict[str, Any]]:
    """Measure every library's gradient methods against finite differences.

    Returns:
        Rows ``{problem, method, library, gradient, figure, value, unit, note}``;
        the reference's own rows have ``library = "finite differences"``.
    """
    s = sizes or GradcheckSizes()
    method = Method("dopri5", rtol=s.tol, atol=s.tol)
    rows: list[dict[str, Any]] = []

    def row(
        problem: str,
        library: str,
        gradient: str,
        figure: str,
        value: float | None,
        unit: str,
        note: str | None = None,
        supported: bool = True,
    ) -> None:
        value = finite(value)
        if value is None and note is None:
            note = "not measured"
        rows.append(
            {
                "problem": problem,
                "method": method.label if library != "finite differences" else "rk4 reference",
                "library": library,
                "gradient": gradient,
                "figure": figure,
                "value": value,
                "unit": unit,
                "note": note,
                "supported": supported,
            }
        )

    for activation in ("relu", "softplus"):
        name = f"conv_{activation}"
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            field = ConvField(s.channels, activation).to(F64)
            y0 = torch.randn(s.batch, s.channels, s.size, s.size, dtype=F64)
            w = torch.randn(y0.shape, dtype=F64) / y0.numel() ** 0.5
            params = list(field.parameters())
            directions = []
            for _ in range(s.directions):
                parts = [torch.randn_like(x) for x in (y0, *params)]
                norm = torch.sqrt(sum((p * p).sum() for p in parts))  # type: ignore[arg-type]
                directions.append([p / norm for p in parts])

        def loss(n_steps: int, field: nn.Module = field, y0: Tensor = y0, w: Tensor = w) -> float:
            with torch.no_grad():
                return float((w * rk4_final(field, y0, 0.0, 1.0, n_steps)).sum())

        fd_steps = s.fd_steps_relu if activation == "relu" else s.fd_steps_softplus
        log(f"  gradient check {name}: finite differences ({fd_steps} rk4 steps, float64)")
        start = time.perf_counter()
        tensors = [y0, *params]
        reference = [_directional_fd(loss, tensors, d, s.eps, fd_steps) for d in directions]
        coarse = [_directional_fd(loss, tensors, d, s.eps, fd_steps // 2) for d in directions]
        resolution = max(abs(a - b) for a, b in zip(reference, coarse))
        row(
            name,
            "finite differences",
            "-",
            "fd_resolution",
            resolution,
            "abs",
            f"|D(n) - D(n/2)| with n = {fd_steps} rk4 steps, eps = {s.eps:g}",
        )
        row(
            name,
            "finite differences",
            "-",
            "fd_scale",
            max(abs(r) for r in reference),
            "abs",
            "largest directional derivative |D| (the scale of the errors below)",
        )
        row(
            name,
            "finite differences",
            "-",
            "time_s",
            time.perf_counter() - start,
            "s",
            f"state {s.batch} x {s.channels} x {s.size} x {s.size} in float64, "
            f"{s.directions} random unit direction(s) in (y0, parameters)",
        )

        for library in libraries:
            for mode in GRADIENT_MODES:
                reason = library.unsupported(method, mode)
                if reason is not None:
                    for figure in _FIGURES:
                        row(name, library.name, mode, figure, None, _UNITS[figure], reason, False)
                    continue
                log(f"  gradient check {name}: {library.name} {mode}")
                counter = CountingField(field)
                for p in params:
                    p.grad = None
                y = y0.detach().clone().requires_grad_(True)
                start = time.perf_counter()
                try:
                    y1 = library.solve(counter, y, 0.0, 1.0, method, mode)
                    nfe_forward = counter.nfe
                    torch.autograd.backward((w * y1).sum())
                except Exception as exc:
                    for figure in _FIGURES:
                        row(
                            name,
                            library.name,
                            mode,
                            figure,
                            None,
                            _UNITS[figure],
                            describe_error(exc),
                        )
                    continue
                elapsed = time.perf_counter() - start
                nfe_backward = counter.nfe - nfe_forward
                grads = [y.grad, *(p.grad for p in params)]
                derivs = [
                    float(sum((g * v).sum() for g, v in zip(grads, d) if g is not None))
                    for d in directions
                ]
                abs_err = max(abs(a - b) for a, b in zip(derivs, reference))
                rel = [abs(a - b) / abs(b) for a, b in zip(derivs, reference) if b != 0]
                row(name, library.name, mode, "grad_abs_error", abs_err, "abs")
                row(
                    name,
                    library.name,
                    mode,
                    "grad_rel_error",
                    max(rel) if rel else None,
                    "relative",
                    None if rel else "zero reference derivative",
                )
                row(name, library.name, mode, "nfe_forward", nfe_forward, "evaluations")
                row(name, library.name, mode, "nfe_backward", nfe_backward, "evaluations")
                row(
                    name,
                    library.name,
                    mode,
                    "nfe_backward_over_forward",
                    nfe_backward / nfe_forward if nfe_forward else None,
                    "ratio",
                    None if nfe_forward else "no forward evaluations",
                )
                row(name, library.name, mode, "time_s", elapsed, "s")
        for p in params:
            p.grad = None
    return rows


_UNITS = {
    "grad_abs_error": "abs",
    "grad_rel_error": "relative",
    "nfe_forward": "evaluations",
    "nfe_backward": "evaluations",
    "nfe_backward_over_forward": "ratio",
    "time_s": "s",
}
_FIGURES = tuple(_UNITS)

"""Small problems against SciPy: dopri5 at 1e-6, batch 1, float64, one thread, under
``torch.no_grad()``, odecore eager and with ``compile=True``, beside SciPy's
``solve_ivp`` RK45 and torchdiffeq's dopri5 at the same tolerances (median of 21
solves after a first one).

Run from the repository root: python docs/results/compile-loop/small.py
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import odecore
import scipy.integrate as si
import torch
import torchdiffeq

torch.set_num_threads(1)
warnings.simplefilter("error", odecore.CompileFallbackWarning)


def vdp_np(t: float, y: np.ndarray) -> list[float]:
    return [y[1], (1 - y[0] ** 2) * y[1] - y[0]]


def lorenz_np(t: float, y: np.ndarray) -> list[float]:
    return [10 * (y[1] - y[0]), y[0] * (28 - y[2]) - y[1], y[0] * y[1] - 8 / 3 * y[2]]


def vdp(t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, v = y.unbind(-1)
    return torch.stack((v, (1 - x * x) * v - x), -1)


def lorenz(t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a, b, c = y.unbind(-1)
    return torch.stack((10 * (b - a), a * (28 - c) - b, a * b - 8 / 3 * c), -1)


PROBLEMS = {"vdp": (vdp_np, vdp, [2.0, 0.0]), "lorenz": (lorenz_np, lorenz, [1.0, 1.0, 1.0])}


def timed(fn: Callable[..., Any], *args: Any, repeats: int = 21) -> tuple[float, Any, float]:
    """The median time of ``repeats`` calls ``fn(*args)`` after a first one, the last
    result, and the first call's time."""
    start = time.perf_counter()
    fn(*args)
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times), out, first


def odecore_solve(field: Any, y0: torch.Tensor, compile: bool) -> odecore.Solution:
    with torch.no_grad():
        return odecore.solve(
            field, y0, t0=0.0, t1=10.0, solver=odecore.Dopri5(),
            controller=odecore.PIDController(rtol=1e-6, atol=1e-6), compile=compile,
        )  # fmt: skip


def rk45(field: Callable[..., Any], y0: list[float]) -> Any:
    return si.solve_ivp(field, (0, 10), y0, method="RK45", rtol=1e-6, atol=1e-6)


def torchdiffeq_solve(field: Any, y0: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        t = torch.tensor([0.0, 10.0], dtype=torch.float64)
        ys: torch.Tensor = torchdiffeq.odeint(field, y0, t, rtol=1e-6, atol=1e-6, method="dopri5")
        return ys


def main() -> None:
    for name, (numpy_field, field, y0) in PROBLEMS.items():
        ref = si.solve_ivp(numpy_field, (0, 10), y0, method="DOP853", rtol=1e-13, atol=1e-13)
        exact = ref.y[:, -1]
        scipy_time, sol, _ = timed(rk45, numpy_field, y0)
        error = np.abs(sol.y[:, -1] - exact).max()
        print(f"{name} scipy RK45 {scipy_time * 1e3:.2f} ms steps {sol.t.size - 1} err {error}")
        y0t = torch.tensor([y0], dtype=torch.float64)
        median, ys, _ = timed(torchdiffeq_solve, field, y0t)
        error = np.abs(ys[-1, 0].numpy() - exact).max()
        print(f"{name} torchdiffeq {median * 1e3:.2f} ms err {error} "
              f"ratio {median / scipy_time:.2f}", flush=True)  # fmt: skip
        for compile in (False, True):
            median, out, first = timed(odecore_solve, field, y0t, compile)
            error = np.abs(out.ys[-1, 0].numpy() - exact).max()
            print(
                f"{name} {'compile' if compile else 'eager'} {median * 1e3:.2f} ms first "
                f"{first:.1f}s {out.stats} err {error} ratio {median / scipy_time:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()

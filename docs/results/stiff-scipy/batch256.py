"""The batch of 256 stiff Van der Pol oscillators of docs/odecore/stiff.md: per-sample
Rodas5P and Rodas4, eager and compiled (compile=True: runs of batch steps as one
graph), against SciPy's LSODA and Radau solving the systems one by one.

mu evenly spaced over [100, 1000], y(0) = (2, 0), t in [0, 300], rtol = atol = 1e-6,
float64, one thread, no gradient; three timed runs after a warm-up. The error is the
largest over five oscillators of |y(300) - y_ref| / max(|y_ref|, 1), against SciPy's
Radau at 1e-12. Then, at equal error: compiled Rodas5P and LSODA over a sweep of
tolerances, and LSODA's time at each Rodas5P error, interpolated in log-log between
its two nearest runs. Run from the repository root (about four minutes):

    python docs/results/stiff-scipy/batch256.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np
import odecore
import torch
from scipy.integrate import solve_ivp

B = 256
F64 = torch.float64
MUS = torch.linspace(100.0, 1000.0, B, dtype=F64).unsqueeze(1)
CHECKED = (0, 63, 127, 191, 255)
ODECORE = (odecore.Rodas5P, odecore.Rodas4)


def batch(t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, v = y[..., :1], y[..., 1:]
    return torch.cat([v, MUS * (1 - x * x) * v - x], dim=-1)


def one(t: float, y: np.ndarray, mu: float) -> list[float]:
    return [y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]]


def jac(t: float, y: np.ndarray, mu: float) -> list[list[float]]:
    return [[0.0, 1.0], [-2 * mu * y[0] * y[1] - 1, mu * (1 - y[0] ** 2)]]


def scipy_solve(i: int, method: str, tol: float) -> np.ndarray:
    mu = float(MUS[i])
    r = solve_ivp(partial(one, mu=mu), (0, 300), [2, 0], method=method, rtol=tol, atol=tol,
                  jac=partial(jac, mu=mu))  # fmt: skip
    return r.y[:, -1]


def error(ys: Callable[[int], np.ndarray], refs: dict[int, np.ndarray]) -> float:
    """The largest relative error at t = 300 over the checked oscillators."""
    return max(np.abs(ys(i) - ref).max() / max(np.abs(ref).max(), 1.0) for i, ref in refs.items())


def timed(run: Callable[[], object]) -> tuple[list[float], object]:
    out = run()  # the warm-up: with compile=True, the compilation
    times = []
    for _ in range(3):
        start = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - start)
    return times, out


def odecore_run(
    solver: type, compile: bool, tol: float, y0: torch.Tensor, refs: dict[int, np.ndarray]
) -> tuple[list[float], odecore.Solution, float]:
    """The times, the last solution and its error of the batch's per-sample solve."""
    control = odecore.PIDController(rtol=tol, atol=tol, per_sample=True)
    run = partial(odecore.solve, batch, y0, t0=0.0, t1=300.0, compile=compile,
                  solver=solver(independent=True), controller=control)  # fmt: skip
    with torch.no_grad():
        times, sol = timed(run)
    assert isinstance(sol, odecore.Solution)
    return times, sol, error(lambda i: sol.ys[-1, i].numpy(), refs)


def main() -> None:
    torch.set_num_threads(1)
    refs = {i: scipy_solve(i, "Radau", 1e-12) for i in CHECKED}
    y0 = torch.tensor([[2.0, 0.0]], dtype=F64).repeat(B, 1)
    runs = [(solver, compile) for compile in (False, True) for solver in ODECORE]
    for solver, compile in runs:
        times, sol, err = odecore_run(solver, compile, 1e-6, y0, refs)
        steps = sol.n_accepted_per_sample
        assert steps is not None
        label = f"{solver.__name__}{', compiled' if compile else ''}"
        print(f"{label} per sample: median {statistics.median(times):.3f} s "
              f"{[round(t, 3) for t in times]}, {sol.stats.n_steps} batch steps (per "
              f"oscillator {int(steps.min())} to {int(steps.max())}, median "
              f"{int(steps.median())}), error {err:.1e}", flush=True)  # fmt: skip
    for method in ("LSODA", "Radau"):
        times, _ = timed(lambda method=method: [scipy_solve(i, method, 1e-6) for i in range(B)])
        print(f"SciPy {method}, one after another: median {statistics.median(times):.3f} s "
              f"{[round(t, 3) for t in times]}", flush=True)  # fmt: skip
    equal_error(y0, refs)


def equal_error(y0: torch.Tensor, refs: dict[int, np.ndarray]) -> None:
    """Compiled Rodas5P against LSODA at equal error, over a sweep of tolerances."""
    lsoda = []
    for tol in (1e-6, 1e-7, 1e-8, 1e-9, 1e-10):
        times, ys = timed(lambda tol=tol: [scipy_solve(i, "LSODA", tol) for i in range(B)])
        lsoda.append((error(lambda i, ys=ys: ys[i], refs), statistics.median(times)))
        print(f"LSODA at {tol:g}: median {lsoda[-1][1]:.3f} s, error {lsoda[-1][0]:.1e}")
    lsoda.sort()  # by error, as np.interp needs
    log_e, log_t = np.log([e for e, _ in lsoda]), np.log([t for _, t in lsoda])
    for tol in (1e-5, 1e-6, 1e-7, 1e-8):
        times, _, err = odecore_run(odecore.Rodas5P, True, tol, y0, refs)
        seconds = statistics.median(times)
        at = float(np.exp(np.interp(np.log(err), log_e, log_t, left=np.nan, right=np.nan)))
        print(f"Rodas5P compiled at {tol:g}: median {seconds:.3f} s, error {err:.1e}; LSODA "
              f"at that error {at:.3f} s: {at / seconds:.1f} times")  # fmt: skip


if __name__ == "__main__":
    main()

"""odecore's stiff solvers against SciPy's, called directly, on one small system.

Two problems people cite, in float64 on one thread: Van der Pol's oscillator with
mu = 1000 on [0, 3000] (rtol = atol) and Robertson's kinetics on [0, 1e5]
(atol = 1e-4 rtol). odecore's ``rodas5p``, ``rodas4`` and ``kvaerno5`` solve a torch
field with ``odecore.solve`` (no gradient; with ``--compile`` also ``rodas5p`` and
``rodas4`` with ``compile=True``, runs of steps as one compiled loop, whose first
call, the compilation, is the warm-up); SciPy's Radau, BDF and LSODA solve a NumPy
field with its analytic Jacobian through ``scipy.integrate.solve_ivp``. Each row is the
median wall time of three solves after a warm-up, the steps (accepted and rejected for
odecore, accepted for SciPy), Jacobians, LU factorisations, evaluations of the field,
and the error: the largest difference at t1 from SciPy's Radau at rtol = 1e-12.

Run it from the repository root (it needs SciPy):

    python examples/stiff_scipy.py                    # rtol 1e-4 ... 1e-8, a few minutes
    python examples/stiff_scipy.py --rtol 1e-6        # one tolerance, about 15 s
    python examples/stiff_scipy.py --smoke            # Robertson to t = 40, seconds
    python examples/stiff_scipy.py --compile          # also the compiled steps
    python examples/stiff_scipy.py --out DIR          # also write DIR/stiff_scipy.json

Compare solvers by the error they reach, not by their tolerance.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import odecore
import torch
from scipy.integrate import solve_ivp

MU = 1000.0
F64 = torch.float64
ODECORE = {"rodas5p": odecore.Rodas5P, "rodas4": odecore.Rodas4, "kvaerno5": odecore.Kvaerno5}
COMPILED = ("rodas5p", "rodas4")
SCIPY = ("Radau", "BDF", "LSODA")


def _vdp_torch(t: Any, y: torch.Tensor) -> torch.Tensor:
    x, v = y.unbind(-1)
    return torch.stack([v, MU * (1 - x * x) * v - x], dim=-1)


def _vdp_numpy(t: float, y: np.ndarray) -> np.ndarray:
    return np.array([y[1], MU * (1 - y[0] ** 2) * y[1] - y[0]])


def _vdp_jacobian(t: float, y: np.ndarray) -> np.ndarray:
    return np.array([[0.0, 1.0], [-2 * MU * y[0] * y[1] - 1, MU * (1 - y[0] ** 2)]])


def _robertson_torch(t: Any, y: torch.Tensor) -> torch.Tensor:
    a, b, c = y.unbind(-1)
    return torch.stack(
        [-0.04 * a + 1e4 * b * c, 0.04 * a - 1e4 * b * c - 3e7 * b * b, 3e7 * b * b], dim=-1
    )


def _robertson_numpy(t: float, y: np.ndarray) -> np.ndarray:
    return np.array(
        [
            -0.04 * y[0] + 1e4 * y[1] * y[2],
            0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2,
            3e7 * y[1] ** 2,
        ]
    )


def _robertson_jacobian(t: float, y: np.ndarray) -> np.ndarray:
    return np.array(
        [
            [-0.04, 1e4 * y[2], 1e4 * y[1]],
            [0.04, -1e4 * y[2] - 6e7 * y[1], -1e4 * y[1]],
            [0.0, 6e7 * y[1], 0.0],
        ]
    )


PROBLEMS = {
    # name: torch field, NumPy field, its Jacobian, y0, t1, atol / rtol
    "Van der Pol": (_vdp_torch, _vdp_numpy, _vdp_jacobian, [2.0, 0.0], 3000.0, 1.0),
    "Robertson": (_robertson_torch, _robertson_numpy, _robertson_jacobian, [1.0, 0.0, 0.0],
                  1e5, 1e-4),
}  # fmt: skip


def _median_time(solve: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """The median wall time of ``repeats`` calls after one warm-up, and the last result."""
    out = solve()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = solve()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def measure(
    name: str, rtol: float, t1: float, repeats: int, compiled: bool = False
) -> list[dict[str, Any]]:
    """One row per solver for ``name`` at ``rtol``, solved up to ``t1``; with
    ``compiled``, also :data:`COMPILED` with ``compile=True``."""
    f, f_np, jac, y0, _, ratio = PROBLEMS[name]
    atol = rtol * ratio
    ref = solve_ivp(f_np, (0, t1), y0, method="Radau", rtol=1e-12, atol=1e-12 * ratio, jac=jac)
    rows = []
    runs = [(label, label, False) for label in ODECORE]
    runs += [(f"{label} compiled", label, True) for label in COMPILED if compiled]
    for label, method, compile in runs:
        pid = odecore.PIDController(rtol=rtol, atol=atol)
        with torch.no_grad():
            solve = partial(odecore.solve, f, torch.tensor(y0, dtype=F64), t0=0.0, t1=t1,
                            solver=ODECORE[method](), controller=pid, compile=compile)  # fmt: skip
            seconds, sol = _median_time(solve, repeats)
        s = sol.stats
        counts = (s.n_steps, s.n_jacobians, s.n_factorisations, s.nfe)
        rows.append((label, seconds, counts, sol.ys[-1].numpy()))
    for method in SCIPY:
        solve = partial(solve_ivp, f_np, (0, t1), y0, method=method, rtol=rtol, atol=atol, jac=jac)
        seconds, r = _median_time(solve, repeats)
        counts = (len(r.t) - 1, int(r.njev), int(r.nlu), int(r.nfev))
        rows.append((f"SciPy {method}", seconds, counts, r.y[:, -1]))
    keys = ("steps", "jacobians", "factorisations", "nfe")
    return [
        {"problem": name, "rtol": rtol, "atol": atol, "solver": label, "seconds": seconds,
         **dict(zip(keys, counts)), "error": float(np.abs(end - ref.y[:, -1]).max())}
        for label, seconds, counts, end in rows
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtol", type=float, nargs="+", default=[1e-4, 1e-5, 1e-6, 1e-7, 1e-8])
    parser.add_argument("--repeats", type=int, default=3, help="timed solves per row")
    parser.add_argument("--smoke", action="store_true", help="Robertson to t = 40, rtol 1e-6")
    parser.add_argument("--compile", action="store_true", help="also the compiled steps")
    parser.add_argument("--out", type=Path, help="write stiff_scipy.json here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = [("Robertson", 40.0)] if args.smoke else [(n, p[4]) for n, p in PROBLEMS.items()]
    tols = [1e-6] if args.smoke else args.rtol
    print(f"{'problem':12} {'rtol':>6} {'solver':17} {'time (s)':>9} {'steps':>6} "
          f"{'Jacobians':>9} {'LU':>6} {'nfe':>7} {'error':>8}")  # fmt: skip
    rows = []
    for name, t1 in runs:
        for rtol in tols:
            for row in measure(name, rtol, t1, 1 if args.smoke else args.repeats, args.compile):
                rows.append(row)
                print(f"{name:12} {rtol:6.0e} {row['solver']:17} {row['seconds']:9.3f} "
                      f"{row['steps']:6d} {row['jacobians']:9d} {row['factorisations']:6d} "
                      f"{row['nfe']:7d} {row['error']:8.1e}", flush=True)  # fmt: skip
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "stiff_scipy.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()

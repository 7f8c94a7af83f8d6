"""Convergence order of the fixed-step Runge-Kutta schemes on the nonlinear pendulum.

A scheme of order p has a global error that shrinks like dt**p: halve the step and the
error at the end time falls by 2**p. This script measures that. It solves the
nonlinear pendulum

    theta'' = -sin(theta),    theta(0) = 1.0 rad,  omega(0) = theta'(0) = 0,

as the first-order system y = (theta, omega) up to T = 5 in float64, with every
fixed-step scheme of ``odecore.FIXED_METHODS`` (euler, midpoint, heun, heun2, heun3,
ralston, rk4, rk4_38) and n = 20, 40, ..., 10240 uniform steps. The error of each run is the largest
component of |y_n - y(T)|, where y(T) comes from odecore's own eighth-order adaptive
pair (dopri8) at rtol = atol = 1e-13.

The fitted order is the least-squares slope of log(error) against log(dt). Points
whose error is at the level of round-off are left out of the fit: with n steps,
rounding can accumulate to about n * eps (eps = 2.2e-16), so a point counts only if
its error is at least 100 * n * eps. The plot shows them as hollow markers; for rk4
and rk4_38 the error stops falling there.

Run it from the repository root (with odecore and matplotlib installed):

    python examples/convergence.py               # full sweep, about 10 s
    python examples/convergence.py --smoke       # four step counts, a few seconds
    python examples/convergence.py --out DIR     # write DIR/convergence.png
    python examples/convergence.py --no-plot     # only the table; needs no matplotlib

It prints a table of the fitted orders and writes ``convergence.png`` (global error
against step size, log-log, one line per scheme, with dashed lines of slope 1, 2 and 4
for comparison). The exit status is 1 if a fitted order is more than 0.2 away from
the scheme's order.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import odecore
import torch

THETA0 = 1.0  # initial angle, rad
OMEGA0 = 0.0  # initial angular velocity, rad per unit time
T = 5.0  # end time
EPS = torch.finfo(torch.float64).eps
ROUNDOFF_FACTOR = 100.0  # a point is fitted only if error >= ROUNDOFF_FACTOR * n * EPS
TOLERANCE = 0.2  # allowed distance between the fitted and the theoretical order

FULL_STEPS = [20 * 2**k for k in range(10)]  # 20 ... 10240
SMOKE_STEPS = [80, 160, 320, 640]


def pendulum(t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The vector field of theta'' = -sin(theta) with y = (theta, omega)."""
    theta, omega = y[0], y[1]
    return torch.stack([omega, -torch.sin(theta)])


def reference(y0: torch.Tensor) -> tuple[torch.Tensor, odecore.Stats]:
    """y(T) from dopri8 at tight tolerances, and the statistics of that solve."""
    sol = odecore.solve(
        pendulum,
        y0,
        t0=0.0,
        t1=T,
        solver=odecore.Dopri8(),
        controller=odecore.PIDController(rtol=1e-13, atol=1e-13),
    )
    return sol.ys[-1], sol.stats


def global_errors(
    method: str, y0: torch.Tensor, y_ref: torch.Tensor, steps: list[int]
) -> list[float]:
    """The error at T of ``method`` with each number of uniform steps."""
    t = torch.tensor([0.0, T], dtype=torch.float64)
    errors = []
    for n in steps:
        ys = odecore.odeint(pendulum, y0, t, method=method, options={"n_steps": n})
        errors.append(float((ys[-1] - y_ref).abs().max()))
    return errors


def fitted(steps: list[int], errors: list[float]) -> list[bool]:
    """Which points are above round-off and enter the fit."""
    return [e >= ROUNDOFF_FACTOR * n * EPS for n, e in zip(steps, errors)]


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(ys) against log(xs)."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxx = sum((x - mx) ** 2 for x in lx)
    sxy = sum((x - mx) * (y - my) for x, y in zip(lx, ly))
    return sxy / sxx


def plot(results: dict[str, dict], steps: list[int], path: Path) -> None:
    """Global error against step size, log-log, one line per scheme."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dts = [T / n for n in steps]
    fig, ax = plt.subplots(figsize=(10, 5.5), dpi=110)
    markers = ["o", "s", "^", "v", "D", "P", "X", "*"]
    colors = plt.get_cmap("tab10").colors
    for i, (method, r) in enumerate(results.items()):
        color = colors[i % len(colors)]
        ax.loglog(
            dts,
            r["errors"],
            color=color,
            marker=markers[i % len(markers)],
            markersize=5,
            linewidth=1.3,
            label=f"{method} (order {r['order']}, fitted {r['fitted_order']:.2f})",
        )
        outside = [(dt, e) for dt, e, used in zip(dts, r["errors"], r["used"]) if not used]
        if outside:
            ax.loglog(
                *zip(*outside),
                linestyle="none",
                marker=markers[i % len(markers)],
                markersize=7,
                markerfacecolor="white",
                markeredgecolor=color,
            )

    # Dashed lines of slope p, a factor of 4 below the first scheme of that order.
    dt_max = max(dts)
    for p in sorted({r["order"] for r in results.values()}):
        first = next(r for r in results.values() if r["order"] == p)
        c = first["errors"][0] / 4 / dts[0] ** p
        ax.loglog(dts, [c * dt**p for dt in dts], "--", color="0.55", linewidth=1)
        ax.annotate(
            f"slope {p}",
            (dt_max, c * dt_max**p),
            xytext=(4, -4),
            textcoords="offset points",
            fontsize=8,
            color="0.35",
            va="top",
        )
    floor = [ROUNDOFF_FACTOR * n * EPS for n in steps]
    ax.loglog(dts, floor, ":", color="0.4", linewidth=1, label="round-off level, 100·n·ε")

    ax.set_xlabel("step size dt = T / n")
    ax.set_ylabel("global error at T:  max |y_n − y(T)|")
    ax.set_title(
        "Fixed-step schemes on the nonlinear pendulum θ'' = −sin θ\n"
        f"θ(0) = {THETA0}, ω(0) = {OMEGA0}, T = {T}, float64; hollow markers: not fitted",
        fontsize=10,
    )
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.1)
    ax.set_xlim(min(dts) / 1.5, dt_max * 2.5)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Convergence order of odecore's fixed-step schemes on the nonlinear "
        "pendulum: prints the fitted orders and plots error against step size."
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "output",
        help="folder for convergence.png (default: examples/output)",
    )
    parser.add_argument("--smoke", action="store_true", help="four step counts only: a few seconds")
    parser.add_argument("--no-plot", action="store_true", help="print the table only")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    steps = SMOKE_STEPS if args.smoke else FULL_STEPS
    y0 = torch.tensor([THETA0, OMEGA0], dtype=torch.float64)
    y_ref, ref_stats = reference(y0)

    results: dict[str, dict] = {}
    for method, cls in odecore.FIXED_METHODS.items():
        errors = global_errors(method, y0, y_ref, steps)
        used = fitted(steps, errors)
        points = [(T / n, e) for n, e, u in zip(steps, errors, used) if u]
        order = slope(*zip(*points)) if len(points) >= 2 else math.nan
        results[method] = {
            "order": cls.order,
            "errors": errors,
            "used": used,
            "fitted_order": order,
        }

    print("Convergence of the fixed-step schemes on the nonlinear pendulum")
    print(f"  theta'' = -sin(theta), theta(0) = {THETA0}, omega(0) = {OMEGA0}, T = {T}, float64")
    print(
        f"  reference y(T): dopri8, rtol = atol = 1e-13 ({ref_stats.n_accepted} steps, "
        f"{ref_stats.nfe} evaluations)"
    )
    print(f"  n = {', '.join(map(str, steps))} uniform steps (dt = T / n)")
    print("  fit: least squares of log(error) on log(dt), points with error >= 100 n eps\n")
    header = (
        f"{'scheme':<10}{'order':>6}{'fitted':>8}{'points':>8}"
        f"{f'error n={steps[0]}':>16}{f'error n={steps[-1]}':>18}"
    )
    print(header)
    print("-" * len(header))
    failed = []
    for method, r in results.items():
        n_used = sum(r["used"])
        print(
            f"{method:<10}{r['order']:>6}{r['fitted_order']:>8.2f}"
            f"{f'{n_used}/{len(steps)}':>8}{r['errors'][0]:>16.2e}{r['errors'][-1]:>18.2e}"
        )
        if not abs(r["fitted_order"] - r["order"]) <= TOLERANCE:
            failed.append(method)
    print()

    if not args.no_plot:
        path = args.out / "convergence.png"
        plot(results, steps, path)
        print(f"wrote {path}")
    print(f"done in {time.perf_counter() - start:.1f} s")
    if failed:
        print(
            f"fitted order more than {TOLERANCE} from the scheme's order: {', '.join(failed)}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

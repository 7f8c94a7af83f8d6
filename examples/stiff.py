"""A stiff problem: Van der Pol's oscillator with mu = 1000, solved five ways.

    x'' = mu (1 - x^2) x' - x,    y = (x, x'),    y(0) = (2, 0),    t in [0, 3000]

has two periods of relaxation oscillations: slow drifts, where the Jacobian has an
eigenvalue near -3 mu, joined by jumps a few time units long. An explicit method's
steps are bounded by stability on the slow drifts (h < 3.3 / (3 mu)), not by accuracy;
an implicit one's only by accuracy. This script measures, in float64 on one thread:

* odecore's ``Kvaerno5`` (ESDIRK 5(4), adaptive, implicit) at several tolerances,
  as ``odeint(method="kvaerno5")`` makes it (the stages solved to a hundredth of the
  tolerances), and with ``Kvaerno5()``'s fixed Newton tolerances (1e-9, 1e-11, a
  hundredth of odecore's default tolerances);
* SciPy's Radau IIA (order 5) and BDF (orders 1-5) through odecore's ``scipy:``
  backend, at the same tolerances;
* odecore's ``Dopri5`` (explicit) at rtol = atol = 1e-6, stopped at a budget of
  100,000 steps;
* odecore's fixed-step ``RadauIIA5`` with 12,000 steps (h = 0.25), which stops at
  the first jump (t = 806): its Newton iteration does not converge on a step that
  long across a transient of a few time units;
* with ``--rk45``, SciPy's RK45 (explicit) on the whole span at 1e-6 (about a minute),
  the count that ``tests/odecore/test_esdirk.py`` compares with.

Each row gives the steps (accepted plus rejected), the evaluations of the field (the
Jacobians' included), the wall time, and the error: the largest |x - x_ref| at 31
equally spaced times, against SciPy's Radau at rtol = atol = 1e-10 with the exact
Jacobian (odecore's Kvaerno5 at 1e-10 where SciPy is not installed).

Run it from the repository root:

    python examples/stiff.py                 # the table and the plot, about a minute
    python examples/stiff.py --smoke         # t in [0, 300], two tolerances, seconds
    python examples/stiff.py --out DIR       # write DIR/stiff.png (work-precision)
    python examples/stiff.py --rk45          # also SciPy's RK45 (about a minute more)

The plot has two panels, error against wall time and error against evaluations, one
line per adaptive method over its tolerances. The exit status is 1 if Kvaerno5 fails
to solve the problem, or misses the reference by more than 100 times its tolerance
atol + rtol |x| (with |x| up to 2: 300 times rtol = atol).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import odecore
import torch

MU = 1000.0
Y0 = (2.0, 0.0)
T_FULL = 3000.0
T_SMOKE = 300.0
TOLS_FULL = (1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8)
TOLS_SMOKE = (1e-4, 1e-6)
DOPRI5_BUDGET = 100_000
RADAU_FIXED_STEPS = 12_000
F64 = torch.float64


def vdp(t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The Van der Pol field on y = (x, x')."""
    x, v = y.unbind(-1)
    return torch.stack([v, MU * (1 - x * x) * v - x], dim=-1)


@dataclass
class Row:
    """One measured solve."""

    method: str
    tol: float | None
    steps: int
    nfe: int
    seconds: float
    error: float | None
    note: str = ""


def _scipy_reference(t1: float, ts: torch.Tensor) -> tuple[torch.Tensor, str]:
    try:
        from scipy.integrate import solve_ivp
    except ImportError:
        sol = odecore.solve(
            vdp,
            torch.tensor(Y0, dtype=F64),
            t0=0.0,
            t1=t1,
            solver=odecore.Kvaerno5(newton=odecore.Newton(rtol=1e-12, atol=1e-12)),
            controller=odecore.PIDController(rtol=1e-10, atol=1e-10),
            saveat=odecore.SaveAt(ts=ts),
        )
        return sol.ys, "odecore Kvaerno5 at rtol = atol = 1e-10 (SciPy is not installed)"

    def f(t: float, y: list[float]) -> list[float]:
        return [y[1], MU * (1 - y[0] ** 2) * y[1] - y[0]]

    def jac(t: float, y: list[float]) -> list[list[float]]:
        return [[0.0, 1.0], [-2 * MU * y[0] * y[1] - 1, MU * (1 - y[0] ** 2)]]

    ref = solve_ivp(
        f, (0.0, t1), Y0, method="Radau", rtol=1e-10, atol=1e-10, jac=jac, t_eval=ts.numpy()
    )
    return torch.tensor(ref.y.T), "SciPy Radau at rtol = atol = 1e-10, exact Jacobian"


def _measure(
    method: str,
    solver: odecore.AbstractSolver,
    controller: odecore.AbstractController,
    tol: float | None,
    t1: float,
    ts: torch.Tensor,
    ref: torch.Tensor,
    *,
    dt0: float | None = None,
    max_steps: int = 1_000_000,
) -> Row:
    start = time.perf_counter()
    with torch.no_grad():
        sol = odecore.solve(
            vdp,
            torch.tensor(Y0, dtype=F64),
            t0=0.0,
            t1=t1,
            solver=solver,
            controller=controller,
            dt0=dt0,
            saveat=odecore.SaveAt(ts=ts),
            max_steps=max_steps,
            throw=False,
        )
    seconds = time.perf_counter() - start
    ys = sol.ys
    assert isinstance(ys, torch.Tensor)
    if sol.status != odecore.Status.SUCCESS:
        note = f"stopped at t = {sol.t_final:.4g}: {str(sol.status).split(';')[0]}"
        return Row(method, tol, sol.stats.n_steps, sol.stats.nfe, seconds, None, note)
    error = float((ys[:, 0] - ref[:, 0]).abs().max())
    return Row(method, tol, sol.stats.n_steps, sol.stats.nfe, seconds, error)


def _measure_scipy(method: str, tol: float, t1: float, ts: torch.Tensor, ref: torch.Tensor) -> Row:
    """SciPy's stepper on the same torch field (as odecore's ``scipy:`` backend calls
    it), its Jacobian by SciPy's finite differences, every call of the field counted.
    SciPy retries rejected steps inside a step: the count is of accepted steps."""
    import numpy as np
    from scipy import integrate

    calls = 0

    def f(t: float, y: np.ndarray) -> np.ndarray:
        nonlocal calls
        calls += 1
        with torch.no_grad():
            out: np.ndarray = vdp(torch.tensor(t, dtype=F64), torch.as_tensor(y)).numpy()
        return out

    start = time.perf_counter()
    stepper = getattr(integrate, method)(f, 0.0, np.array(Y0), t1, rtol=tol, atol=tol)
    times = ts.tolist()
    xs = [Y0[0]] if times and times[0] == 0.0 else []
    steps = 0
    while stepper.status == "running":
        stepper.step()
        steps += 1
        inside = [t for t in times[len(xs) :] if t <= stepper.t]
        if inside:
            dense = stepper.dense_output()
            xs.extend(float(dense(t)[0]) for t in inside)
    seconds = time.perf_counter() - start
    name = f"scipy:{method}"
    if stepper.status != "finished":
        return Row(name, tol, steps, calls, seconds, None, "failed")
    error = float((torch.tensor(xs, dtype=F64) - ref[:, 0]).abs().max())
    return Row(name, tol, steps, calls, seconds, error, "accepted steps")


def _fixed_radau(t1: float, ts: torch.Tensor, ref: torch.Tensor, n: int) -> Row:
    # A failed Newton iteration is a status (throw=False); with throw=True it raises.
    start = time.perf_counter()
    try:
        return _measure(
            f"radauIIA5, {n} fixed steps",
            odecore.RadauIIA5(),
            odecore.ConstantStepSize(),
            None,
            t1,
            ts,
            ref,
            dt0=t1 / n,
        )
    except odecore.SolverError as exc:
        seconds = time.perf_counter() - start
        return Row(f"radauIIA5, {n} fixed steps", None, 0, 0, seconds, None,
                   f"SolverError at t = {exc.t:.4g} (Newton)")  # fmt: skip


def measure(smoke: bool) -> tuple[list[Row], str]:
    """Every row of the table, and where the reference comes from."""
    t1 = T_SMOKE if smoke else T_FULL
    ts = torch.linspace(0.0, t1, 31, dtype=F64)
    ref, source = _scipy_reference(t1, ts)
    rows: list[Row] = []
    scipy_methods = ["Radau", "BDF"]
    try:
        import scipy  # noqa: F401
    except ImportError:
        scipy_methods = []
    for tol in TOLS_SMOKE if smoke else TOLS_FULL:
        pid = odecore.PIDController(rtol=tol, atol=tol)
        # As odeint(method="kvaerno5", rtol=tol, atol=tol) makes it: Newton at tol / 100.
        spec = odecore.OdeSpec.from_method("kvaerno5", rtol=tol, atol=tol)
        rows.append(_measure("kvaerno5", spec.solver, pid, tol, t1, ts, ref))
        fixed = odecore.Kvaerno5()  # Newton at 1e-9, 1e-11 whatever the tolerance
        rows.append(_measure("kvaerno5, Newton at 1e-9", fixed, pid, tol, t1, ts, ref))
        for name in scipy_methods:
            rows.append(_measure_scipy(name, tol, t1, ts, ref))
    budget = 5_000 if smoke else DOPRI5_BUDGET
    pid = odecore.PIDController(rtol=1e-6, atol=1e-6)
    rows.append(_measure("dopri5", odecore.Dopri5(), pid, 1e-6, t1, ts, ref, max_steps=budget))
    rows.append(_fixed_radau(t1, ts, ref, RADAU_FIXED_STEPS // (10 if smoke else 1)))
    return rows, source


def rk45_steps(t1: float) -> Row:
    """SciPy's RK45 on ``[0, t1]`` at rtol = atol = 1e-6: accepted steps and time."""
    from scipy.integrate import solve_ivp

    def f(t: float, y: list[float]) -> list[float]:
        return [y[1], MU * (1 - y[0] ** 2) * y[1] - y[0]]

    start = time.perf_counter()
    sol = solve_ivp(f, (0.0, t1), Y0, method="RK45", rtol=1e-6, atol=1e-6)
    seconds = time.perf_counter() - start
    return Row("scipy RK45 (direct)", 1e-6, len(sol.t) - 1, sol.nfev, seconds, None,
               "accepted steps only; error not measured")  # fmt: skip


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| method | tol | steps | NFE | time (s) | error |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        tol = "" if r.tol is None else f"{r.tol:g}"
        err = f"{r.error:.1e}" if r.error is not None else r.note
        lines.append(f"| {r.method} | {tol} | {r.steps:,} | {r.nfe:,} | {r.seconds:.2f} | {err} |")
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> None:
    """Work-precision: error against wall time and against evaluations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    methods = sorted({r.method for r in rows if r.tol is not None and r.error is not None})
    for method in methods:
        mine = [r for r in rows if r.method == method and r.error is not None]
        if len(mine) < 2:
            continue
        errors = [max(r.error or 0.0, 1e-16) for r in mine]
        for ax, xs in zip(axes, ([r.seconds for r in mine], [r.nfe for r in mine])):
            ax.loglog(xs, errors, "o-", label=method)
    for ax, xlabel in zip(axes, ("wall time (s)", "evaluations of the field")):
        ax.xaxis.set_minor_formatter(NullFormatter())  # labels of 2e-1, 3e-1, ... collide
        ax.set_xlabel(xlabel)
        ax.set_ylabel("max |x - x_ref| at 31 times")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("Van der Pol, mu = 1000, t in [0, 3000]: work against precision")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a short span, two tolerances")
    parser.add_argument("--out", type=Path, default=None, help="write DIR/stiff.png")
    parser.add_argument("--no-plot", action="store_true", help="only the table")
    parser.add_argument("--rk45", action="store_true", help="also time SciPy's RK45 (slow)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows, source = measure(args.smoke)
    t1 = T_SMOKE if args.smoke else T_FULL
    if args.rk45:
        rows.append(rk45_steps(t1))
    print(f"Van der Pol, mu = {MU:g}, y0 = {Y0}, t in [0, {t1:g}], float64")
    print(f"reference: {source}\n")
    print(table(rows))
    if not args.no_plot and args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "stiff.png"
        plot(rows, path)
        print(f"\nwrote {path}")
    ours = [r for r in rows if r.method.startswith("kvaerno5")]
    # x is at most about 2 in size: 100 times the local tolerance, relative and absolute
    bad = [r for r in ours if r.error is None or r.error > 100 * (r.tol or 0.0) * (1 + 2.0)]
    if bad:
        print(f"\nKvaerno5 missed: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

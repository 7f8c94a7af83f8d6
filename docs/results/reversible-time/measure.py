"""Time the reversible gradient against backpropagation through the same forward solve.

The reversible method (``odecore.Reversible``) differentiates a coupled solve on two
states y and z (a step of the solver from z, then one back from the new y). This script
times forward plus backward on perf's MLP field (batch 256, state 32, two tanh layers of
128, float32, t in [0, 1]) three ways:

- ``reversible``: ``odecore.solve(..., gradient=odecore.Reversible())``;
- ``backprop, coupled``: backpropagation through the same coupled solve on the same
  steps, a plain loop of the solver's ``step`` recorded by autograd (no solve loop
  around it, so if anything faster than one);
- ``backprop, plain``: ``odecore.solve(..., gradient=odecore.Autograd())`` of the plain
  solver on the same steps (one solver step and one vector-Jacobian product a step;
  the adaptive solve's as stops of a constant step size longer than the interval).

rk4 with 10, 100 and 1,000 steps, and dopri5 at rtol = atol = 1e-6 (the loops take the
steps the reversible solve accepted). Each line: medians of 7 interleaved calls after a
warm-up, and the relative distance of the coupled loop's gradient from the reversible
method's (float32 rounding).

    OMP_NUM_THREADS=1 python docs/results/reversible-time/measure.py
"""

from __future__ import annotations

import itertools
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import cast

import odecore
import torch
from torch import Tensor, nn

LAMBDA = 0.999  # Reversible's default coupling
REPEATS = 7


class Field(nn.Module):
    """perf's MLP field."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(32, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh(), nn.Linear(128, 32)
        )

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        out: Tensor = self.net(y)
        return out


class Recording(Field):
    """The field, recording the end of every step an adaptive solve accepts."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[float] = [0.0]

    def callback_accept_step(self, t: Tensor, y: Tensor, dt: Tensor) -> None:
        self.ends.append(float(t) + float(dt))


def coupled(f: Field, solver: odecore.AbstractExplicitRK, y0: Tensor, ends: list[float]) -> Tensor:
    """The reversible method's forward solve as a plain loop, recorded by autograd."""
    y = z = y0
    for a, b in itertools.pairwise(ends):
        y1 = LAMBDA * y + (1 - LAMBDA) * z + (solver.step(f, a, b, z, f(a, z)).y1 - z)
        z = z - (solver.step(f, b, a, y1, f(b, y1)).y1 - y1)
        y = y1
    return y


def row(solver: odecore.AbstractExplicitRK, steps: int | None) -> None:
    """One line of the table: ``steps`` fixed steps, or (``None``) adaptive at 1e-6."""
    torch.manual_seed(0)
    f = Field() if steps else Recording()
    y0 = torch.randn(256, 32, requires_grad=True)
    inputs = [y0, *f.parameters()]
    weight = torch.randn(256, 32) / 90.0
    name = f"{type(solver).__name__} x {steps}" if steps else f"{type(solver).__name__}, 1e-6"
    control = odecore.ConstantStepSize() if steps else odecore.PIDController(rtol=1e-6, atol=1e-6)
    dt0 = 1.0 / steps if steps else None

    def reversible() -> Tensor:
        if isinstance(f, Recording):
            f.ends[:] = [0.0]
        sol = odecore.solve(f, y0, t0=0.0, t1=1.0, solver=solver, controller=control,
                            dt0=dt0, gradient=odecore.Reversible())  # fmt: skip
        return sol.ys[-1]

    with torch.no_grad():
        reversible()
    ends = [k / steps for k in range(steps + 1)] if steps else list(cast(Recording, f).ends)
    calls: dict[str, Callable[[], Tensor]] = {
        "reversible": reversible,
        "coupled": lambda: coupled(f, solver, y0, ends),
        "plain": lambda: odecore.solve(
            f, y0, t0=0.0, t1=1.0, solver=solver, controller=odecore.ConstantStepSize(),
            dt0=dt0 or 1.0, step_ts=None if steps else ends[1:-1],
            gradient=odecore.Autograd(),
        ).ys[-1],
    }  # fmt: skip
    times: dict[str, list[float]] = {k: [] for k in calls}
    grads: dict[str, tuple[Tensor, ...]] = {}
    for i in range(REPEATS + 1):
        for key, call in calls.items():
            start = time.perf_counter()
            grads[key] = torch.autograd.grad((weight * call()).sum(), inputs)
            if i:
                times[key].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    diff = sum(float((a - b).norm() ** 2) for a, b in zip(grads["reversible"], grads["coupled"]))
    size = sum(float(b.norm() ** 2) for b in grads["coupled"])
    print(
        f"| {name} | {len(ends) - 1} | {1e3 * med['reversible']:.1f} | "
        f"{1e3 * med['coupled']:.1f} | {1e3 * med['plain']:.1f} | "
        f"**{med['reversible'] / med['coupled']:.2f}** | "
        f"{med['reversible'] / med['plain']:.2f} | {(diff / size) ** 0.5:.1e} |",
        flush=True,
    )


def main() -> None:
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()  # fmt: skip
    print(f"commit {commit}, torch {torch.__version__}, {platform.machine()}, "
          f"{torch.get_num_threads()} thread(s), load {os.getloadavg()[0]:.2f}")  # fmt: skip
    print("\n| solve | steps | reversible (ms) | backprop, coupled (ms) | backprop, plain (ms) "
          "| reversible / coupled | reversible / plain | gradient distance |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for steps in (10, 100, 1000):
        row(odecore.RK4(), steps)
    row(odecore.Dopri5(), None)
    print(f"\nload at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

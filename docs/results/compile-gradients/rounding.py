"""How far a compiled Rosenbrock solve's gradients are from eager's, beside how far eager's
are from themselves when only the rounding changes.

The same Van der Pol solve three ways, float64, rtol = atol = 1e-7, backpropagation:
eager; compiled (``compile=True``: the step's LU written out in the graph); and eager
again with the state's two components swapped (the same equations, another order of
the same float64 operations). Each line gives the largest difference relative to the
largest entry, of the loss and of its gradients with respect to y0 and mu.

    OMP_NUM_THREADS=1 python docs/results/compile-gradients/rounding.py
"""

import subprocess

import odecore
import torch

F64 = torch.float64
CASES = [  # (method, mu, t0, t1)
    (odecore.Rodas4, 20.0, 0.0, 2.0),
    (odecore.Rodas5P, 20.0, 2.0, 0.0),
    (odecore.Rodas4, 200.0, 0.0, 300.0),
    (odecore.Rodas5P, 200.0, 0.0, 300.0),
]


class VanDerPol(torch.nn.Module):
    """``x'' = mu (1 - x^2) x' - x``, as (x, x') or, ``swap``, as (x', x)."""

    def __init__(self, mu: float, swap: bool) -> None:
        super().__init__()
        self.mu = torch.nn.Parameter(torch.tensor(mu, dtype=F64))
        self.swap = swap

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x, v = (y[..., 1], y[..., 0]) if self.swap else (y[..., 0], y[..., 1])
        dv = self.mu * (1 - x**2) * v - x
        return torch.stack([dv, v] if self.swap else [v, dv], dim=-1)


def solve(method, mu, t0, t1, *, compile, swap):
    """The loss, its gradients (y0 in (x, x') order, mu) and the number of steps."""
    field = VanDerPol(mu, swap)
    order = [1, 0] if swap else [0, 1]
    y0 = torch.tensor([2.0, 0.0], dtype=F64)[order].requires_grad_()
    weights = torch.tensor([1.0, -0.5], dtype=F64)[order]
    control = odecore.PIDController(rtol=1e-7, atol=1e-7)
    sol = odecore.solve(
        field, y0, t0=t0, t1=t1, solver=method(), controller=control, compile=compile
    )
    loss = (sol.ys * weights).square().sum()
    dy0, dmu = torch.autograd.grad(loss, (y0, field.mu))
    return (loss.detach(), dy0[order], dmu), sol.stats.n_steps


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
    print(f"odecore at {commit}, torch {torch.__version__}, float64, rtol = atol = 1e-7")
    print("method   mu     t0 -> t1   steps  of         compiled-eager  swapped eager-eager")
    for method, mu, t0, t1 in CASES:
        eager, steps = solve(method, mu, t0, t1, compile=False, swap=False)
        compiled, _ = solve(method, mu, t0, t1, compile=True, swap=False)
        swapped, _ = solve(method, mu, t0, t1, compile=False, swap=True)
        for name, e, c, s in zip(("loss", "d/dy0", "d/dmu"), eager, compiled, swapped):
            print(f"{method.__name__:8s} {mu:5g}  {t0:4g} -> {t1:<4g}  {steps:5d}  {name:9s}  "
                  f"{rel(c, e):14.2e}  {rel(s, e):19.2e}")  # fmt: skip


if __name__ == "__main__":
    main()

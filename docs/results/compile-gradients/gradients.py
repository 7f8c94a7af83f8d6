"""Compiled against eager odecore, forward and backward, with each gradient method that
compiles: backpropagation, checkpointing and the adjoint (with its seminorm), the last
two with the tensors to differentiate searched for by the forward solve or given.

dopri5 and tsit5 at rtol = atol = 1e-6, batch 256, float32, one thread: Van der Pol
(mu = 1, its parameter differentiated) from inside its limit cycle over [0, 3], where
the adjoint's backward solve stays stable (the cycle repels backward in time, and a
state outside it grows without bound), and a linear system of 16 (a 16 x 16
matrix differentiated) over [0, 10]. The first call of each (which compiles) is timed apart; then
the median of 5 calls. Eager and compiled calls alternate, so both see the same load.

    OMP_NUM_THREADS=1 python docs/results/compile-gradients/gradients.py
"""

import statistics
import subprocess
import time
import warnings

import odecore
import torch

torch.set_num_threads(1)
GEN = torch.Generator().manual_seed(0)


class VanDerPol(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mu = torch.nn.Parameter(torch.tensor(1.0))

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x, v = y[..., 0], y[..., 1]
        return torch.stack((v, self.mu * (1 - x * x) * v - x), -1)


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        a = torch.randn(16, 16, generator=GEN) / 4.0
        self.a = torch.nn.Parameter(a - a.T - 0.1 * torch.eye(16))  # a damped rotation

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return y @ self.a.T


FIELDS = {  # the field, the state's shape and scale, t1
    "vdp": (VanDerPol(), (256, 2), 0.5, 3.0),
    "linear": (Linear(), (256, 16), 1.0, 10.0),
}
GRADIENTS = {  # given the field; "params": the tensors to differentiate given, not searched
    "backprop": lambda field: odecore.Autograd(),
    "checkpoint": lambda field: odecore.Checkpoint(),
    "checkpoint-params": lambda field: odecore.Checkpoint(params=tuple(field.parameters())),
    "adjoint": lambda field: odecore.Adjoint(),
    "adjoint-params": lambda field: odecore.Adjoint(params=tuple(field.parameters())),
    "adjoint-seminorm": lambda field: odecore.Adjoint(seminorm=True),
}
SOLVERS = {"dopri5": odecore.Dopri5, "tsit5": odecore.Tsit5}


def call(name: str, solver: str, gradient: str, compile: bool) -> tuple[float, torch.Tensor]:
    field, shape, scale, t1 = FIELDS[name]
    y0 = scale * torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    y0.requires_grad_()
    start = time.perf_counter()
    sol = odecore.solve(
        field, y0, t0=0.0, t1=t1, solver=SOLVERS[solver](),
        controller=odecore.PIDController(rtol=1e-6, atol=1e-6),
        gradient=GRADIENTS[gradient](field), compile=compile,
    )  # fmt: skip
    sol.ys[-1].square().sum().backward()
    seconds = time.perf_counter() - start
    grad = next(field.parameters()).grad
    assert grad is not None
    out = grad.clone()
    field.zero_grad()
    return seconds, out


def main() -> None:
    warnings.simplefilter("error", odecore.CompileFallbackWarning)  # eager is no result
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True
    ).stdout.strip()
    print(f"commit {commit}, torch {torch.__version__}, {torch.get_num_threads()} thread")
    for name in FIELDS:
        for solver in SOLVERS:
            for gradient in GRADIENTS:
                first, _ = call(name, solver, gradient, True)
                eager, compiled = [], []
                for _ in range(5):
                    s, g_eager = call(name, solver, gradient, False)
                    eager.append(s)
                    s, g_compiled = call(name, solver, gradient, True)
                    compiled.append(s)
                e, c = statistics.median(eager), statistics.median(compiled)
                diff = float((g_compiled - g_eager).abs().max() / g_eager.abs().max())
                print(
                    f"{name:6} {solver:6} {gradient:16} eager {e * 1e3:8.1f} ms  "
                    f"compiled {c * 1e3:8.1f} ms  ratio {c / e:5.2f}  first {first:6.1f} s  "
                    f"gradient rel. diff {diff:.1e}",
                    flush=True,
                )


if __name__ == "__main__":
    main()

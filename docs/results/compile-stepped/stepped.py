"""rk4 x N on Van der Pol (mu = 1), batch 256, float32, one thread: eager, compile="stepped"
(one compiled graph per step) and compile=True (the grid as one graph; N <= 100 only),
forward and forward + backward. The first call (which compiles) is timed apart; then the
best of 7 runs of 10 calls.

    OMP_NUM_THREADS=1 python docs/results/compile-stepped/stepped.py 100
"""

import sys
import time

import odecore
import torch

torch.set_num_threads(1)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 100
Y0 = torch.randn(256, 2, generator=torch.Generator().manual_seed(0))
T = torch.linspace(0.0, 1.0, 2)


def vdp(t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, v = y[..., 0], y[..., 1]
    return torch.stack((v, (1 - x * x) * v - x), -1)


def call(compile: bool | str, backward: bool) -> None:
    y = Y0.clone().requires_grad_(backward)
    ys = odecore.odeint(vdp, y, T, method="rk4", options={"n_steps": N, "compile": compile})
    if backward:
        ys[-1].square().sum().backward()


def seconds(compile: bool | str, backward: bool, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call(compile, backward)
    return (time.perf_counter() - start) / calls


def main() -> None:
    best: dict[tuple[str, str], float] = {}
    for compile in (False, "stepped", True) if N <= 100 else (False, "stepped"):
        for backward in (False, True):
            kind = "fwd+bwd" if backward else "fwd"
            first = seconds(compile, backward, 1)
            best[str(compile), kind] = min(seconds(compile, backward, 10) for _ in range(7))
            print(
                f"compile={compile!s:9} {kind:7} first {first:8.2f} s  "
                f"best {best[str(compile), kind] * 1e3:8.3f} ms",
                flush=True,
            )
    for (compile, kind), value in best.items():
        print(f"{compile}/{kind:20s} / eager {value / best['False', kind]:.2f}")


if __name__ == "__main__":
    main()

"""The first compiled call of `dopri5` on Van der Pol, forward and backward (backprop,
gradients.py's cell), each in a fresh process with an inductor cache of its own:

- from an empty cache: inductor first compiles a probe program for each vector
  instruction set the CPU reports (AVX2, AVX-512, ...), once per cache, before any
  kernel of the solve;
- from a cache where inductor has only compiled an unrelated function (the state of
  any machine where `torch.compile` ran once): the solve's own graphs are new;
- again in a new process with that cache, which now holds the solve's graphs too.

    OMP_NUM_THREADS=1 python docs/results/compile-gradients/first_call.py
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
FIRST_CALL = """
import warnings, odecore, gradients
warnings.simplefilter("error", odecore.CompileFallbackWarning)  # eager is no result
print(gradients.call("vdp", "dopri5", "backprop", True)[0])
"""
UNRELATED = "import torch; torch.compile(lambda x: x.sin().sum())(torch.randn(8))"
REPEATS = 3


def seconds(code: str, cache: str) -> float:
    """What ``code`` prints last, run in a fresh process with the inductor cache ``cache``."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=HERE, env=env, capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    return float(out.split()[-1]) if out.strip() else float("nan")


def main() -> None:
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=HERE
    ).stdout.strip()
    print(f"commit {commit}, torch {torch.__version__}, 1 thread, {os.cpu_count()} CPUs")
    for _ in range(REPEATS):
        with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as probed:
            cold = seconds(FIRST_CALL, empty)
            seconds(UNRELATED, probed)
            first, again = seconds(FIRST_CALL, probed), seconds(FIRST_CALL, probed)
        print(
            f"first call: empty cache {cold:5.1f} s, after an unrelated compile {first:5.1f} s, "
            f"next process {again:5.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()

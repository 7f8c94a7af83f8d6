"""Batch norm in depth: a ContinuousNet's accuracy in train mode against ``eval()``.

A ContinuousNet's residual module ``R`` holds batch norms. In train mode each call of
``R`` normalises with its own batch's statistics; in ``eval()`` it uses running
statistics. A multi-stage solver calls ``R`` several times per step on differently
distributed inputs (RK4: ``y``, ``y + h/2 k1``, ``y + h/2 k2``, ``y + h k3``), so the
running statistics have to belong to each call of the manifested network for
``eval()`` to compute what training did. This script trains the manifestation
sweep's standard recipe and measures, on held-out images:

- the accuracy in train mode (every call normalised with its batch's statistics)
  and in ``eval()`` (running statistics) at the training manifestation;
- the one-batch test: statistics recalibrated on one batch with
  ``contnet.recalibrate``, then ``eval()`` against train mode on that same batch
  (the share of equal predictions and the largest logit difference);
- the accuracy of the trained weights at other manifestations (solver, N_t), with the
  statistics they are given by ``manifest`` and after ``contnet.recalibrate`` on
  training batches.

Setting (the issue's): Fashion-MNIST, 2,000 training and 1,000 held-out images, both
drawn from the training split; ``ContinuousNet(in_channels=1, channels=(16, 32, 64),
n_steps=2, n_basis=2)`` with a piecewise-constant basis; 6 epochs of SGD (lr 0.1,
momentum 0.9, weight decay 5e-4, lr x0.1 at epoch 5), batch 64.

Data: the four Fashion-MNIST IDX files in ``--data DIR`` (Debian's
``dataset-fashion-mnist`` installs them in ``/usr/share/datasets/fashion-mnist``, the
default). ``--smoke`` trains two tiny epochs on 256 of them, or on random images when
the files are missing, and says so.

    python examples/batchnorm.py --solver rk4 --seed 0          # about 3 minutes
    python examples/batchnorm.py --solver euler rk4 --seed 0 1 2 --json out.json
    python examples/batchnorm.py --smoke                         # a few seconds

It prints one row per (solver, seed) and, with ``--json``, writes every figure.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import contnet
import torch
from torch import Tensor

DEFAULT_DATA = Path("/usr/share/datasets/fashion-mnist")
MEAN, STD = 0.2860, 0.3530
OTHER_MANIFESTATIONS = [("euler", 2), ("midpoint", 2), ("rk4", 2), ("rk4", 4), ("rk4", 8)]


def load(folder: Path, n: int, seed: int) -> tuple[Tensor, Tensor] | None:
    """``n`` images and labels drawn (seeded) from the training split, or ``None``."""
    images, labels = folder / "train-images-idx3-ubyte.gz", folder / "train-labels-idx1-ubyte.gz"
    if not (images.exists() and labels.exists()):
        return None
    with gzip.open(images) as f:
        x = torch.frombuffer(bytearray(f.read()[16:]), dtype=torch.uint8).view(-1, 1, 28, 28)
    with gzip.open(labels) as f:
        y = torch.frombuffer(bytearray(f.read()[8:]), dtype=torch.uint8).long()
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:n]
    return (x[order].float() / 255 - MEAN) / STD, y[order]


def batches(x: Tensor, y: Tensor, size: int, seed: int) -> list[tuple[Tensor, Tensor]]:
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    return [(x[order[i : i + size]], y[order[i : i + size]]) for i in range(0, len(x), size)]


@torch.no_grad()
def accuracy(net: torch.nn.Module, x: Tensor, y: Tensor, *, train_mode: bool) -> float:
    """Accuracy in batches of 250; train mode normalises each batch with its own
    statistics (and leaves the running statistics as they are)."""
    state = {k: v.clone() for k, v in net.state_dict().items()}
    net.train(train_mode)
    correct = sum(
        int((net(x[i : i + 250]).argmax(1) == y[i : i + 250]).sum()) for i in range(0, len(x), 250)
    )
    net.load_state_dict(state)
    net.eval()
    return correct / len(x)


@torch.no_grad()
def one_batch_test(net: contnet.ContinuousNet, x: Tensor) -> tuple[float, float]:
    """Recalibrate on ``x``, then ``eval()`` against train mode on ``x``: the share of
    equal predictions and the largest logit difference."""
    state = {k: v.clone() for k, v in net.state_dict().items()}
    contnet.recalibrate(net, [x])
    net.eval()
    a = net(x)
    net.train()
    b = net(x)
    net.load_state_dict(state)
    net.eval()
    return float((a.argmax(1) == b.argmax(1)).float().mean()), float((a - b).abs().max())


def run(solver: str, seed: int, sizes: dict[str, int], data: Path) -> dict[str, Any]:
    loaded = load(data, sizes["train"] + sizes["test"], seed=1234)
    if loaded is None:
        print(f"{data}: no Fashion-MNIST files; random images instead", file=sys.stderr)
        g = torch.Generator().manual_seed(0)
        n = sizes["train"] + sizes["test"]
        loaded = torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)
    x, y = loaded
    n = sizes["train"]
    xtr, ytr, xte, yte = x[:n], y[:n], x[n:], y[n:]
    torch.manual_seed(seed)
    net = contnet.ContinuousNet(in_channels=1, channels=(16, 32, 64), n_steps=2, n_basis=2,
                                solver=solver)  # fmt: skip
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[sizes["drop"]], gamma=0.1)
    start = time.perf_counter()
    for epoch in range(sizes["epochs"]):
        net.train()
        for xb, yb in batches(xtr, ytr, 64, seed * 1000 + epoch):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(xb), yb).backward()
            opt.step()
        sched.step()
    seconds = time.perf_counter() - start
    net.eval()
    out: dict[str, Any] = {
        "solver": solver,
        "seed": seed,
        "train_seconds": seconds,
        "train_accuracy_eval": accuracy(net, xtr, ytr, train_mode=False),
        "test_accuracy_train_mode": accuracy(net, xte, yte, train_mode=True),
        "test_accuracy_eval": accuracy(net, xte, yte, train_mode=False),
    }
    out["one_batch_agreement"], out["one_batch_max_logit_diff"] = one_batch_test(net, xtr[:256])
    recal = [xb for xb, _ in batches(xtr, ytr, 64, seed)]
    for method, n_steps in OTHER_MANIFESTATIONS:
        other = net.manifest(solver=method, n_steps=n_steps)
        key = f"{method}@{n_steps}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", contnet.CarriedStatisticsWarning)
            out[f"manifest_{key}_as_given"] = accuracy(other, xte, yte, train_mode=False)
        state = {k: v.clone() for k, v in net.state_dict().items()}
        contnet.recalibrate(other, recal)
        out[f"manifest_{key}_recalibrated"] = accuracy(other, xte, yte, train_mode=False)
        net.load_state_dict(state)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solver", nargs="+", default=["rk4"])
    parser.add_argument("--seed", nargs="+", type=int, default=[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="two tiny epochs: a few seconds")
    parser.add_argument("--out", type=Path, default=None, help="folder for --smoke's JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = {"train": 2000, "test": 1000, "epochs": 6, "drop": 5}
    if args.smoke:
        sizes = {"train": 256, "test": 128, "epochs": 2, "drop": 1}
    rows = []
    for solver in args.solver:
        for seed in args.seed:
            r = run(solver, seed, sizes, args.data)
            rows.append(r)
            print(
                f"{solver:8s} seed {seed}  train mode {r['test_accuracy_train_mode']:.3f}  "
                f"eval {r['test_accuracy_eval']:.3f}  one-batch agreement "
                f"{r['one_batch_agreement']:.3f} "
                f"(max |dlogit| {r['one_batch_max_logit_diff']:.2g})  "
                f"{r['train_seconds']:.0f} s",
                flush=True,
            )
    path = args.json or (args.out / "batchnorm.json" if args.out else None)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

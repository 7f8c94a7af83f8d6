"""A Neural ODE and an Augmented Neural ODE on the concentric annuli g(x).

Dupont et al. (2019), "Augmented Neural ODEs", Sec. 4-5: the function

    g(x) = -1  for |x| <= r1,        g(x) = +1  for r2 <= |x| <= r3,

with r1 = 0.5, r2 = 1.0, r3 = 1.5 in the plane, cannot be represented by a Neural ODE
followed by a linear layer: the flow of an ODE is a homeomorphism, so it cannot move
the inner disc out through the annulus that surrounds it. On finitely many training
points the flow can still squeeze the disc through the gaps between them, at the
price of a complicated flow whose number of function evaluations (NFE) grows during
training. Augmenting the state with zeros (ANODE) lets the flow lift the disc out of
the plane instead: a simpler flow, and Dupont et al. find that its NFE hardly grows
while a NODE's nearly doubles.

The script trains both on the same seeded sample, 500 points uniform in the disc and
1000 in the annulus (``--smoke``: 40 and 80), full batch, with the mean squared error
to the labels -1 / +1 (as Dupont et al.) and Adam (learning rate 3e-3, ``--lr``):

* NODE:  ``NeuralODE(f) -> Linear(2, 1)``, f: R^2 -> R^2;
* ANODE: ``ZeroAugmentation(p) -> NeuralODE(f) -> readout -> Linear(2, 1)``, f on
  R^(2 + p); the readout is ``ProjectAugmented(2 + p, 2)`` (a learned linear map of the
  whole state, default) or ``DropAugmented(2)`` (the first two features only).

Both vector fields are ``[x, t] -> 32 -> ReLU -> 32 -> ReLU -> out``, the toy model of
Dupont et al. The solves use odecore's Dopri5 at rtol = atol = 1e-4 (``--tol``) with
backprop through the steps (``--gradient adjoint`` for the adjoint). Every iteration
records the loss and the NFE of the forward solve (``NeuralODE.nfe``).

Run it from the repository root (with odecore, odelayers and matplotlib installed):

    python examples/annuli.py                    # 600 iterations each, under a minute
    python examples/annuli.py --smoke            # a few iterations: a few seconds
    python examples/annuli.py --out DIR          # write DIR/annuli.png
    python examples/annuli.py --no-plot          # only the table; needs no matplotlib
    python examples/annuli.py --iterations 1000 --seed 1 --augment 5 --readout drop

It prints a table of the final training loss, the training and test accuracy (sign of
the output against the label; the test set is a fresh sample of the same size), the
NFE of the first and of the last iterations and their ratio, and writes
``annuli.png``: the learned flows (trajectories of the training points, the ANODE's in
three dimensions), the decision boundaries and the loss and NFE curves.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import odecore
import odelayers as ol
import torch
from torch import Tensor, nn

R1, R2, R3 = 0.5, 1.0, 1.5  # g(x) = -1 for |x| <= R1, +1 for R2 <= |x| <= R3
HIDDEN = 32
FULL = {"inner": 500, "outer": 1000, "iterations": 600}
SMOKE = {"inner": 40, "outer": 80, "iterations": 6}
WINDOW = 10  # iterations averaged for the NFE at the start and at the end


def annuli(inner: int, outer: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Points uniform in the disc |x| <= R1 (label -1) and the annulus R2..R3 (label +1)."""

    def ring(n: int, r_lo: float, r_hi: float) -> Tensor:
        # Uniform in area: r^2 is uniform between r_lo^2 and r_hi^2.
        r = torch.sqrt(r_lo**2 + (r_hi**2 - r_lo**2) * torch.rand(n, generator=generator))
        angle = 2 * math.pi * torch.rand(n, generator=generator)
        return torch.stack([r * torch.cos(angle), r * torch.sin(angle)], dim=1)

    x = torch.cat([ring(inner, 0.0, R1), ring(outer, R2, R3)])
    y = torch.cat([-torch.ones(inner, 1), torch.ones(outer, 1)])
    return x, y


def vector_field(dim: int) -> nn.Module:
    """``f(t, x)``: the depth appended to the state, two ReLU layers of 32."""
    return ol.DepthSequential(
        ol.DepthConcat(),
        nn.Linear(dim + 1, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, dim),
    )


def build(augment: int, readout: str, tol: float, gradient: str) -> tuple[nn.Sequential, Any]:
    """The model ``[augmentation] -> NeuralODE -> [readout] -> Linear(2, 1)`` and its ODE layer."""
    dim = 2 + augment
    node = ol.NeuralODE(
        vector_field(dim),
        controller=odecore.PIDController(rtol=tol, atol=tol),
        gradient=odecore.Autograd() if gradient == "backprop" else odecore.Adjoint(),
    )
    layers: list[nn.Module] = []
    if augment:
        layers.append(ol.ZeroAugmentation(augment))
    layers.append(node)
    if augment:
        layers.append(ol.ProjectAugmented(dim, 2) if readout == "project" else ol.DropAugmented(2))
    layers.append(nn.Linear(2, 1))
    return nn.Sequential(*layers), node


def accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    with torch.no_grad():
        return float((torch.sign(model(x)) == y).float().mean())


def train(
    name: str,
    augment: int,
    args: argparse.Namespace,
    data: tuple[Tensor, Tensor, Tensor, Tensor],
) -> dict[str, Any]:
    """Train one model; the history of loss and NFE, the final figures, the model."""
    x, y, x_test, y_test = data
    torch.manual_seed(args.seed)  # the same initialisation for a given seed
    model, node = build(augment, args.readout, args.tol, args.gradient)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    losses, nfes, nfes_backward = [], [], []
    start = time.perf_counter()
    for _ in range(args.iterations):
        loss = (model(x) - y).pow(2).mean()
        nfes.append(node.nfe)
        optimizer.zero_grad()
        loss.backward()
        nfes_backward.append(node.nfe_backward)
        optimizer.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - start
    with torch.no_grad():
        final_loss = (model(x) - y).pow(2).mean().item()
    window = min(WINDOW, len(nfes))
    nfe_start = sum(nfes[:window]) / window
    nfe_end = sum(nfes[-window:]) / window
    return {
        "name": name,
        "augment": augment,
        "model": model,
        "node": node,
        "params": sum(p.numel() for p in model.parameters()),
        "losses": losses,
        "nfes": nfes,
        "nfes_backward": nfes_backward,
        "final_loss": final_loss,
        "train_acc": accuracy(model, x, y),
        "test_acc": accuracy(model, x_test, y_test),
        "nfe_start": nfe_start,
        "nfe_end": nfe_end,
        "growth": nfe_end / nfe_start,
        "seconds": seconds,
    }


def trajectories(result: dict[str, Any], x: Tensor, steps: int = 41) -> Tensor:
    """The trained flow of ``x``, ``(steps, n, 2 + p)``, at equally spaced depths."""
    node = result["node"]
    layer = ol.NeuralODE(
        node.vector_field,
        ts=torch.linspace(0.0, 1.0, steps),
        controller=odecore.PIDController(rtol=1e-5, atol=1e-5),
        gradient=odecore.Autograd(),
    )
    z0 = ol.ZeroAugmentation(result["augment"])(x) if result["augment"] else x
    with torch.no_grad():
        return layer(z0)


def plot(results: list[dict[str, Any]], x: Tensor, y: Tensor, args: argparse.Namespace) -> Path:
    """Flows, decision regions, loss and NFE curves in one figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {-1.0: "tab:blue", 1.0: "tab:red"}
    label_colors = [colors[float(v)] for v in y[:, 0]]
    fig = plt.figure(figsize=(13, 8.2), dpi=100)
    grid = fig.add_gridspec(2, 3)

    # Flows: a subset of the training points, so that the lines stay readable.
    keep = torch.arange(0, x.shape[0], max(1, x.shape[0] // 150))
    node, anode = results
    traj = trajectories(node, x[keep])
    ax = fig.add_subplot(grid[0, 0])
    for i, j in enumerate(keep.tolist()):
        ax.plot(traj[:, i, 0], traj[:, i, 1], color=label_colors[j], linewidth=0.6, alpha=0.6)
    ax.scatter(traj[-1, :, 0], traj[-1, :, 1], c=[label_colors[j] for j in keep], s=6)
    ax.set_title("NODE: flow of the training points in R^2\n(dots: features z(1))", fontsize=10)
    ax.set_aspect("equal", adjustable="datalim")

    traj = trajectories(anode, x[keep])
    ax3 = fig.add_subplot(grid[0, 1], projection="3d")
    for i, j in enumerate(keep.tolist()):
        ax3.plot(traj[:, i, 0], traj[:, i, 1], traj[:, i, 2], color=label_colors[j], lw=0.6)
    ax3.scatter(
        traj[-1, :, 0], traj[-1, :, 1], traj[-1, :, 2], c=[label_colors[j] for j in keep], s=6
    )
    ax3.set_title(
        f"ANODE (p = {anode['augment']}): flow in R^{2 + anode['augment']}"
        + (" (first 3 dims)" if anode["augment"] > 1 else ""),
        fontsize=10,
    )
    ax3.set_zlabel("augmented dim 1", fontsize=8)
    ax3.view_init(elev=22, azim=-60)

    # Decision regions of both models on a grid of the input plane.
    side = torch.linspace(-2.0, 2.0, 121)
    gx, gy = torch.meshgrid(side, side, indexing="xy")
    points = torch.stack([gx.reshape(-1), gy.reshape(-1)], dim=1)
    ax = fig.add_subplot(grid[0, 2])
    for result, style in zip(results, ("--", "-")):
        with torch.no_grad():
            out = result["model"](points).reshape(gx.shape)
        ax.contour(gx, gy, out, levels=[0.0], colors="k", linestyles=style, linewidths=1.2)
    ax.scatter(x[:, 0], x[:, 1], c=label_colors, s=3, alpha=0.5)
    ax.plot([], [], "k--", label="NODE")
    ax.plot([], [], "k-", label="ANODE")
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title("decision boundaries (output = 0) on g(x)", fontsize=10)
    ax.set_aspect("equal")

    its = range(1, args.iterations + 1)
    ax = fig.add_subplot(grid[1, 0:2])
    for result, color in zip(results, ("tab:purple", "tab:green")):
        ax.semilogy(its, result["losses"], color=color, label=result["name"])
    ax.set_xlabel("iteration")
    ax.set_ylabel("training loss (MSE)")
    ax.set_title("loss", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)

    ax = fig.add_subplot(grid[1, 2])
    for result, color in zip(results, ("tab:purple", "tab:green")):
        ax.plot(its, result["nfes"], color=color, label=f"{result['name']} forward")
        if args.gradient == "adjoint":
            ax.plot(its, result["nfes_backward"], ":", color=color, label="backward")
    ax.set_xlabel("iteration")
    ax.set_ylabel("NFE")
    ax.set_title(f"function evaluations (Dopri5, tol {args.tol:g})", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)

    fig.suptitle(
        f"NODE vs ANODE on the concentric annuli, r = {R1}, {R2}, {R3}; "
        f"{x.shape[0]} points, seed {args.seed}",
        fontsize=11,
    )
    fig.tight_layout()
    path = args.out / "annuli.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Train a Neural ODE and an Augmented Neural ODE on the concentric "
        "annuli g(x) of Dupont et al. (2019); print loss, accuracy and NFE, plot the flows."
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "output",
        help="folder for annuli.png (default: examples/output)",
    )
    parser.add_argument("--smoke", action="store_true", help="a few iterations on few points")
    parser.add_argument("--no-plot", action="store_true", help="print the table only")
    parser.add_argument("--seed", type=int, default=0, help="seed of data and initialisation")
    parser.add_argument(
        "--iterations", type=int, default=None, help=f"per model (default {FULL['iterations']})"
    )
    parser.add_argument("--augment", type=int, default=1, help="ANODE's extra dimensions p")
    parser.add_argument(
        "--readout",
        choices=("project", "drop"),
        default="project",
        help="ANODE's readout: ProjectAugmented (default) or DropAugmented",
    )
    parser.add_argument("--tol", type=float, default=1e-4, help="rtol = atol of Dopri5")
    parser.add_argument("--gradient", choices=("backprop", "adjoint"), default="backprop")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam's learning rate")
    args = parser.parse_args(argv)
    sizes = SMOKE if args.smoke else FULL
    if args.iterations is None:
        args.iterations = sizes["iterations"]
    if args.iterations < 1 or args.augment < 1:
        parser.error("--iterations and --augment must be positive")

    start = time.perf_counter()
    generator = torch.Generator().manual_seed(args.seed)
    x, y = annuli(sizes["inner"], sizes["outer"], generator)
    x_test, y_test = annuli(sizes["inner"], sizes["outer"], generator)
    data = (x, y, x_test, y_test)
    results = [train("NODE", 0, args, data), train("ANODE", args.augment, args, data)]

    print("NODE vs ANODE on the concentric annuli g(x) (Dupont et al. 2019)")
    print(
        f"  r1, r2, r3 = {R1}, {R2}, {R3}; {sizes['inner']} inner + {sizes['outer']} outer "
        f"points (test: a fresh sample of as many); seed {args.seed}"
    )
    print(
        f"  Dopri5, rtol = atol = {args.tol:g}, gradient by {args.gradient}; Adam, "
        f"lr {args.lr:g}, {args.iterations} full-batch iterations; MSE to -1 / +1"
    )
    readout = "ProjectAugmented" if args.readout == "project" else "DropAugmented"
    print(f"  ANODE: p = {args.augment} zero dimensions, readout {readout}")
    print(f"  NFE: forward evaluations, mean of the first / last {WINDOW} iterations\n")
    header = (
        f"{'model':<7}{'params':>8}{'final loss':>12}{'train acc':>11}{'test acc':>10}"
        f"{'NFE start':>11}{'NFE final':>11}{'growth':>8}{'time s':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['name']:<7}{r['params']:>8}{r['final_loss']:>12.4f}{r['train_acc']:>11.3f}"
            f"{r['test_acc']:>10.3f}{r['nfe_start']:>11.1f}{r['nfe_end']:>11.1f}"
            f"{r['growth']:>7.2f}x{r['seconds']:>8.1f}"
        )
    print()
    if not args.no_plot:
        path = plot(results, x, y, args)
        print(f"wrote {path}")
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

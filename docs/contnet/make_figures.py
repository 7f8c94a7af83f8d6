"""Draw the figures of the contnet page into ``docs/_static/contnet/``.

Run from the repository root, with odecore, odelayers, contnet and matplotlib
installed::

    python docs/contnet/make_figures.py                 # every figure, a few seconds
    python docs/contnet/make_figures.py manifestations  # only this one

Every figure is seeded and drawn from the package itself; nothing is trained. The
PNGs are kept in the repository, so the documentation build needs neither this script
nor matplotlib.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import contnet
import matplotlib
import matplotlib.pyplot as plt
import torch
from odelayers import basis
from torch import nn

matplotlib.use("Agg")

OUT = Path(__file__).resolve().parent.parent / "_static" / "contnet"
DPI = 85
REFERENCE_STEPS = 128
METHODS = ("euler", "midpoint", "heun", "rk4", "rk4_38")
ORDERS = {"euler": 1, "midpoint": 2, "heun": 2, "rk4": 4, "rk4_38": 4}
COLORS = {
    "euler": "tab:blue",
    "midpoint": "tab:orange",
    "heun": "tab:olive",
    "rk4": "tab:red",
    "rk4_38": "tab:purple",
}


def _save(fig: plt.Figure, name: str, dpi: int = DPI) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(OUT / name, dpi=dpi)
    plt.close(fig)
    print(f"wrote {OUT / name} ({(OUT / name).stat().st_size // 1024} KiB)")


def _smooth_net(activation: type[nn.Module]) -> contnet.ContinuousNet:
    """A small random ContinuousNet whose weights vary smoothly with depth.

    A Legendre basis starts with only its constant part; the other coefficients get
    random values here so that ``theta(t)`` really depends on ``t``.
    """
    torch.manual_seed(0)
    net = contnet.ContinuousNet(
        in_channels=1,
        num_classes=4,
        channels=(2, 3, 4),
        n_steps=1,
        basis="legendre",
        n_basis=4,
        epsilon=1.0,
        activation=activation,
    )
    net = net.double().eval()
    with torch.no_grad():
        for block in net.ode_blocks():
            for coefficients in block.continuous.coefficients.values():
                scale = coefficients[0].abs().mean() + 0.1
                coefficients[1:].normal_(0.0, 0.3).mul_(scale)
    return net


def manifestations() -> None:
    """The (solver, N_t) grid: max output difference from a fine reference manifestation."""
    steps = (1, 2, 4, 8, 16, 32)
    x = torch.randn(4, 1, 12, 12, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    errors: dict[str, dict[str, list[float]]] = {}
    for label, activation in (("Softplus", nn.Softplus), ("ReLU", nn.ReLU)):
        net = _smooth_net(activation)
        methods = METHODS if label == "Softplus" else ("rk4",)
        with torch.no_grad():
            reference = net.manifest(solver="rk4", n_steps=REFERENCE_STEPS)(x)
            sweep = contnet.manifestation_sweep(
                net,
                lambda m, ref=reference: float((m(x) - ref).abs().max()),
                solvers=methods,
                n_steps=steps,
            )
        errors[label] = {s: [sweep[(s, n)] for n in steps] for s in methods}

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [1, 1.15]})
    grid = torch.tensor([errors["Softplus"][s] for s in METHODS]).log10()
    low, high = float(grid.min().floor()), float(grid.max().ceil())
    shown = axes[0].imshow(grid, cmap="viridis_r", aspect="auto", vmin=low, vmax=high)
    for i, method in enumerate(METHODS):
        for j, value in enumerate(errors["Softplus"][method]):
            axes[0].text(
                j, i, f"{value:.0e}", ha="center", va="center", fontsize=7.5,
                color="white" if grid[i, j] > (low + high) / 2 else "black",
            )  # fmt: skip
    axes[0].set_xticks(range(len(steps)), [str(n) for n in steps])
    axes[0].set_yticks(range(len(METHODS)), METHODS)
    axes[0].set_xlabel("$N_t$")
    axes[0].set_title("max |output - reference| (colour: log10), Softplus", fontsize=10)
    fig.colorbar(shown, ax=axes[0], fraction=0.046)

    ax = axes[1]
    n = torch.tensor(steps, dtype=torch.float64)
    for method in METHODS:
        label = f"{method} (order {ORDERS[method]})"
        ax.loglog(steps, errors["Softplus"][method], "o-", color=COLORS[method],
                  markersize=4, linewidth=1.3, label=label)  # fmt: skip
    ax.loglog(steps, errors["ReLU"]["rk4"], "s--", color="0.45", markersize=3.5,
              linewidth=1.1, label="rk4, ReLU")  # fmt: skip
    for order, anchor in ((1, errors["Softplus"]["euler"][0]), (4, errors["Softplus"]["rk4"][1])):
        start = 0 if order == 1 else 1
        guide = anchor * 3 * (n[start:] / n[start]) ** (-order)
        ax.loglog(steps[start:], guide, ":", color="k", linewidth=0.9)
        ax.annotate(
            f"$N_t^{{-{order}}}$", (steps[-1], float(guide[-1])), fontsize=8,
            xytext=(4, 0), textcoords="offset points", va="center",
        )  # fmt: skip
    ax.set_xlabel("$N_t$")
    ax.set_ylabel("max |output - reference|")
    title = f"one set of weights, every manifestation; reference (rk4, {REFERENCE_STEPS})"
    ax.set_title(title, fontsize=10)
    ax.set_xlim(0.8, 60)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7.5, loc="lower left")
    _save(fig, "manifestations.png")


def refinement() -> None:
    """One weight entry of a piecewise-constant block, refined and projected onto Legendre."""
    torch.manual_seed(0)
    net = contnet.ContinuousNet(in_channels=1, num_classes=4, channels=(2, 3, 4), n_steps=4)
    fine, _ = contnet.refine(net)
    source = net.blocks[0].basis
    target = fine.blocks[0].basis
    coarse_entry = net.blocks[0].continuous.coefficient("2.weight")[:, 0, 0, 1, 1].detach()
    fine_entry = fine.blocks[0].continuous.coefficient("2.weight")[:, 0, 0, 1, 1].detach()
    t = torch.linspace(0.0, 1.0, 1001)

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    ax = axes[0]
    ax.plot(t, source(t) @ coarse_entry, color="k", linewidth=3.5, alpha=0.3,
            label=f"before: {source.pieces} pieces, N_t = {net.n_steps}")  # fmt: skip
    ax.plot(t, target(t) @ fine_entry, "--", color="tab:red", linewidth=1.3,
            label=f"after refine: {target.pieces} pieces, N_t = {fine.n_steps}")  # fmt: skip
    centres = (torch.arange(target.pieces) + 0.5) / target.pieces
    ax.plot(centres, fine_entry, "o", color="tab:red", markersize=4, label="the 8 coefficients")
    centres = (torch.arange(source.pieces) + 0.5) / source.pieces
    ax.plot(centres, coarse_entry, "s", color="0.35", markersize=6, label="the 4 coefficients")
    ax.set_title("contnet.refine: each piece split in two, its value copied", fontsize=10)
    ax.set_xlabel("depth t")
    ax.set_ylabel("weight entry θ(t)")
    ax.legend(fontsize=8, loc="best")

    ax = axes[1]
    ax.plot(t, source(t) @ coarse_entry, color="k", linewidth=3.5, alpha=0.3,
            label=f"{source.pieces} pieces")  # fmt: skip
    for degree, color in ((1, "tab:green"), (3, "tab:blue"), (7, "tab:purple")):
        legendre = basis.Legendre(degree=degree)
        projected = contnet.transfer(coarse_entry, source, legendre)
        ax.plot(t, legendre(t) @ projected, color=color, linewidth=1.3,
                label=f"Legendre(degree={degree})")  # fmt: skip
    ax.set_title("contnet.transfer onto Legendre: the L2 projection", fontsize=10)
    ax.set_xlabel("depth t")
    ax.legend(fontsize=8, loc="best")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    _save(fig, "refinement.png")


FIGURES: dict[str, Callable[[], None]] = {
    "manifestations": manifestations,
    "refinement": refinement,
}


def main(argv: list[str]) -> int:
    names = argv or list(FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        print(f"unknown figures {unknown}; known: {', '.join(FIGURES)}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    for name in names:
        FIGURES[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

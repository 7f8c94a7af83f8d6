"""Draw the figures of the odelayers pages into ``docs/_static/odelayers/``.

Run from the repository root, with odecore, odelayers and matplotlib installed::

    python docs/odelayers/make_figures.py            # every figure, about 10 s
    python docs/odelayers/make_figures.py cnf basis  # only these

Every figure is seeded and drawn from the layers themselves; only the 1-D NODE and
ANODE of the augmentation page are trained (300 Adam steps each, a few seconds). The
PNGs are kept in the repository, so the documentation build needs neither this script
nor matplotlib.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import odecore
import odelayers as ol
import torch
from odelayers import basis
from torch import Tensor, nn

matplotlib.use("Agg")

OUT = Path(__file__).resolve().parent.parent / "_static" / "odelayers"
DPI = 85
BLUE, RED = "tab:blue", "tab:red"


def _save(fig: plt.Figure, name: str, dpi: int = DPI) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(OUT / name, dpi=dpi)
    plt.close(fig)
    print(f"wrote {OUT / name} ({(OUT / name).stat().st_size // 1024} KiB)")


def _linear(weight: list[list[float]]) -> nn.Linear:
    """A bias-free linear layer with the given (hand-made) weight."""
    w = torch.tensor(weight)
    layer = nn.Linear(w.shape[1], w.shape[0], bias=False)
    with torch.no_grad():
        layer.weight.copy_(w)
    return layer


def data_control() -> None:
    """Trajectories of a NODE (never cross) and of a data-controlled NODE (reflection)."""
    theta = 3.0
    ts = torch.linspace(0.0, 1.0, 101)
    x = torch.linspace(-1.0, 1.0, 9)[:, None]
    plain = ol.NeuralODE(ol.DepthSequential(_linear([[-theta]])), ts=ts)
    controlled = ol.NeuralODE(
        ol.DepthSequential(ol.DataControl(), _linear([[-theta, -theta]])), ts=ts
    )
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for ax, layer, title in (
        (axes[0], plain, "NODE  dz/dt = -θ z: the flow cannot reorder points"),
        (axes[1], controlled, "data control  dz/dt = -θ (z + x): z(1) ≈ -x"),
    ):
        with torch.no_grad():
            z = layer(x)[:, :, 0]
        colors = plt.get_cmap("coolwarm")((x[:, 0] + 1) / 2)
        for i in range(x.shape[0]):
            ax.plot(ts, z[:, i], color=colors[i], linewidth=1.4)
        ax.scatter(torch.zeros(9), x[:, 0], c=colors, s=14, zorder=3)
        ax.set_title(title, fontsize=9.5)
        ax.set_xlabel("depth t")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("z(t)")
    _save(fig, "data_control.png")


def basis_functions() -> None:
    """The functions of every basis on [0, 1]."""
    t = torch.linspace(0.0, 1.0, 801)
    bases = [
        basis.Fourier(modes=2),
        basis.Legendre(degree=4),
        basis.Chebyshev(degree=4),
        basis.PiecewiseConstant(pieces=4),
        basis.PiecewiseLinear(pieces=4),
    ]
    fig, axes = plt.subplots(1, 5, figsize=(13, 2.8), sharey=True)
    for ax, b in zip(axes, bases):
        values = b(t)
        for i in range(b.size):
            ax.plot(t, values[:, i], linewidth=1.3, label=f"φ{i}")
        ax.set_title(repr(b).replace("(t0=0.0, t1=1.0, ", "("), fontsize=9)
        ax.set_xlabel("t")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylim(-1.25, 1.25)
    _save(fig, "basis_functions.png")


def basis_projection() -> None:
    """A piecewise-constant weight and its projections onto other bases."""
    source = basis.PiecewiseConstant(pieces=4)
    coefficients = torch.tensor([0.8, -0.4, 0.3, 1.0])
    t = torch.linspace(0.0, 1.0, 1001)
    targets = [
        (basis.PiecewiseConstant(pieces=8), "PiecewiseConstant(8): the same function"),
        (basis.PiecewiseLinear(pieces=8), "PiecewiseLinear(8)"),
        (basis.Legendre(degree=8), "Legendre(8)"),
        (basis.Fourier(modes=6), "Fourier(6)"),
    ]
    fig, ax = plt.subplots(figsize=(8, 3.4))
    ax.plot(t, source(t) @ coefficients, color="k", linewidth=3, alpha=0.35, label="θ(t), 4 pieces")
    styles = ["--", "-", "-", "-"]
    for (target, label), style in zip(targets, styles):
        d = basis.project(coefficients, source, target)
        ax.plot(t, target(t) @ d, style, linewidth=1.2, label=label)
    ax.set_xlabel("depth t")
    ax.set_ylabel("weight θ(t)")
    ax.set_title("basis.project: L2 projection of a piecewise-constant weight", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    _save(fig, "basis_projection.png")


def oscillator() -> None:
    """A hand-made second-order NODE against the closed form of the damped oscillator."""
    omega, zeta = 2.0, 0.15
    spring = ol.HigherOrder(
        lambda t, z: -(omega**2) * z[:, :1] - 2 * zeta * omega * z[:, 1:], features=1
    )
    ts = torch.linspace(0.0, 8.0, 41, dtype=torch.float64)
    model = nn.Sequential(
        ol.ZeroAugmentation(1),
        ol.NeuralODE(spring, t1=8.0, ts=ts, controller=odecore.PIDController(rtol=1e-6, atol=1e-8)),
    )
    q0 = torch.tensor([[1.0], [0.5], [-0.8]], dtype=torch.float64)
    with torch.no_grad():
        z = model(q0)  # (time, batch, [q, q'])
    fine = torch.linspace(0.0, 8.0, 400, dtype=torch.float64)
    wd = omega * math.sqrt(1 - zeta**2)
    envelope = torch.exp(-zeta * omega * fine)
    exact = (
        q0[:, 0]
        * (envelope * (torch.cos(wd * fine) + zeta * omega / wd * torch.sin(wd * fine)))[:, None]
    )
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), gridspec_kw={"width_ratios": [2, 1]})
    colors = ["tab:blue", "tab:orange", "tab:green"]
    for i, color in enumerate(colors):
        axes[0].plot(fine, exact[:, i], color=color, linewidth=1.2)
        axes[0].plot(ts, z[:, i, 0], "o", color=color, markersize=3.5)
        axes[1].plot(z[:, i, 0], z[:, i, 1], "-o", color=color, markersize=2.5, linewidth=0.8)
    axes[0].plot([], [], "k-", label="closed form")
    axes[0].plot([], [], "ko", markersize=3.5, label="HigherOrder + NeuralODE")
    axes[0].legend(fontsize=8)
    axes[0].set_xlabel("t")
    axes[0].set_ylabel("q(t)")
    axes[0].set_title(f"q'' = -ω² q - 2ζω q',  ω = {omega}, ζ = {zeta}", fontsize=10)
    axes[1].set_xlabel("q")
    axes[1].set_ylabel("q'")
    axes[1].set_title("the state [q, q']", fontsize=10)
    for ax in axes:
        ax.grid(True, alpha=0.3)
    _save(fig, "higher_order.png")


def _g1d(n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """g(x) of Dupont et al. in one dimension: -1 on |x| <= 0.5, +1 on 1 <= |x| <= 1.5."""
    inner = (2 * torch.rand(n, 1, generator=generator) - 1) * 0.5
    sign = torch.where(torch.rand(n, 1, generator=generator) < 0.5, -1.0, 1.0)
    outer = (1.0 + 0.5 * torch.rand(n, 1, generator=generator)) * sign
    return torch.cat([inner, outer]), torch.cat([-torch.ones(n, 1), torch.ones(n, 1)])


def anode_1d() -> None:
    """A 1-D NODE and a 1-D ANODE (one zero dimension) trained on g(x)."""
    x, y = _g1d(40, torch.Generator().manual_seed(0))
    ts = torch.linspace(0.0, 1.0, 41)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
    colors = [BLUE if v < 0 else RED for v in y[:, 0]]
    for ax, augment, color in ((axes[0], 0, "tab:purple"), (axes[1], 1, "tab:green")):
        torch.manual_seed(0)
        dim = 1 + augment
        field = ol.DepthSequential(
            ol.DepthConcat(), nn.Linear(dim + 1, 32), nn.Tanh(), nn.Linear(32, dim)
        )
        controller = odecore.PIDController(rtol=1e-3, atol=1e-3)
        node = ol.NeuralODE(field, controller=controller, gradient=odecore.Autograd())
        front = [ol.ZeroAugmentation(augment)] if augment else []
        model = nn.Sequential(*front, node, nn.Linear(dim, 1))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses = []
        for _ in range(300):
            loss = (model(x) - y).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        name = "ANODE" if augment else "NODE"
        axes[2].semilogy(losses, color=color, label=f"{name} (final NFE {node.nfe})")
        flow = ol.NeuralODE(field, ts=ts, controller=controller)
        with torch.no_grad():
            z = flow(nn.Sequential(*front)(x) if front else x)
        for i in range(x.shape[0]):
            if augment:
                ax.plot(z[:, i, 0], z[:, i, 1], color=colors[i], linewidth=0.7)
            else:
                ax.plot(ts, z[:, i, 0], color=colors[i], linewidth=0.7)
        if augment:
            ax.scatter(z[-1, :, 0], z[-1, :, 1], c=colors, s=8, zorder=3)
            ax.scatter(x[:, 0], torch.zeros(x.shape[0]), c=colors, s=8, marker="x")
            ax.set_xlabel("h (the input's dimension)")
            ax.set_ylabel("a (augmented)")
            ax.set_title("ANODE: the flow lifts the inner points", fontsize=10)
        else:
            ax.set_xlabel("depth t")
            ax.set_ylabel("z(t)")
            ax.set_title("NODE: 1-D trajectories cannot cross", fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[2].set_xlabel("Adam step")
    axes[2].set_ylabel("MSE")
    axes[2].set_title("training loss on g(x), d = 1", fontsize=10)
    axes[2].legend(fontsize=8)
    axes[2].grid(True, alpha=0.3)
    _save(fig, "anode_1d.png", dpi=80)


def adaptive_depth() -> None:
    """A reflection by adaptive depth: dz/dt = -1 until the sample's own depth T(x) = 2x."""
    horizon = nn.Linear(1, 1)
    with torch.no_grad():
        horizon.weight.fill_(2.0)
        horizon.bias.zero_()
    layer = ol.AdaptiveDepthNODE(lambda t, z: -torch.ones_like(z), horizon, positive=torch.relu)
    x = torch.linspace(0.2, 1.0, 5)[:, None]
    with torch.no_grad():
        out = layer(x)
    depth = layer.depth
    assert depth is not None
    colors = plt.get_cmap("viridis")(torch.linspace(0.0, 0.9, 5))
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for i in range(5):
        t = torch.linspace(0.0, float(depth[i]), 50)
        ax.plot(t, x[i, 0] - t, color=colors[i], linewidth=1.4)
        ax.plot([0.0], [x[i, 0]], "o", color=colors[i], markersize=4)
        ax.plot([float(depth[i])], [float(out[i, 0])], "s", color=colors[i], markersize=5)
        ax.annotate(
            f"T = {float(depth[i]):.1f}",
            (float(depth[i]), float(out[i, 0])),
            xytext=(5, -3),
            textcoords="offset points",
            fontsize=8,
        )
    ax.axhline(0.0, color="0.6", linewidth=0.8)
    ax.set_xlabel("depth t")
    ax.set_ylabel("z(t)")
    ax.set_xlim(-0.05, 2.35)
    ax.set_title("AdaptiveDepthNODE: dz/dt = -1 up to T(x) = 2x gives z(T) = -x", fontsize=10)
    ax.grid(True, alpha=0.3)
    _save(fig, "adaptive_depth.png")


def integrals() -> None:
    """Integrals along the solve against their closed forms, for linear fields."""
    depths = torch.linspace(0.25, 3.0, 12)
    x = torch.tensor([[1.0, 2.0]])
    kinetic = []
    for t1 in depths.tolist():
        layer = ol.NeuralODE(lambda t, z: -z, t1=t1, integrals=[ol.KineticEnergy()])
        layer(x)
        kinetic.append(float(layer.integrals["kinetic_energy"][0]))
    fine = torch.linspace(0.0, 3.0, 200)
    exact = 5.0 * (1 - torch.exp(-2 * fine)) / 2
    a = torch.tensor([[-0.5, 2.0], [-2.0, -0.5]])
    batch = torch.zeros(256, 2)
    layer = ol.NeuralODE(
        lambda t, z: z @ a.T,
        t1=1.0,
        integrals=[ol.JacobianFrobenius(torch.Generator().manual_seed(0))],
    )
    estimates = []
    for t1 in depths.tolist():
        layer.t1 = t1
        layer(batch)
        estimates.append(layer.integrals["jacobian_frobenius"])
    est = torch.stack(estimates)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    axes[0].plot(fine, exact, "k-", linewidth=1, label="closed form |x|² (1 - e^(-2T)) / 2")
    axes[0].plot(depths, kinetic, "o", color="tab:orange", label="KineticEnergy()")
    axes[0].set_title("∫ |f|² dt along dz/dt = -z, x = (1, 2)", fontsize=10)
    axes[0].set_xlabel("end depth T")
    axes[0].legend(fontsize=8)
    frob = float(a.pow(2).sum())
    axes[1].plot(fine, frob * fine, "k-", linewidth=1, label=f"exact ‖A‖²_F T = {frob:g} T")
    axes[1].errorbar(
        depths,
        est.mean(dim=1),
        yerr=est.std(dim=1),
        fmt="o",
        color="tab:purple",
        capsize=2,
        markersize=4,
        label="JacobianFrobenius(): mean ± std of 256 estimates",
    )
    axes[1].set_title("∫ ‖∂f/∂z‖²_F dt along dz/dt = A z (Hutchinson)", fontsize=10)
    axes[1].set_xlabel("end depth T")
    axes[1].legend(fontsize=8)
    for ax in axes:
        ax.grid(True, alpha=0.3)
    _save(fig, "integrals.png")


def cnf() -> None:
    """The density of a linear CNF against the exact Gaussian; a data-controlled CNF."""
    a = torch.tensor([[0.3, 0.8], [0.0, -0.4]])
    flow = ol.CNF(lambda t, z: z @ a.T)
    side = torch.linspace(-4.0, 4.0, 81)
    gx, gy = torch.meshgrid(side, side, indexing="xy")
    grid = torch.stack([gx.reshape(-1), gy.reshape(-1)], dim=1)
    with torch.no_grad():
        log_p = flow.log_prob(grid).reshape(gx.shape)
    # z(1) = e^A z(0), so p1(x) = N(e^-A x; 0, I) / det(e^A) and log det(e^A) = tr A.
    inverse = torch.linalg.matrix_exp(-a)
    exact = (ol.standard_normal_log_prob(grid @ inverse.T) - torch.trace(a)).reshape(gx.shape)
    error = float((log_p - exact).abs().max())
    torch.manual_seed(0)
    with torch.no_grad():
        samples = flow.sample(300, (2,))
    # dz/dt = c - z: the condition c is where the flow contracts to.
    field = ol.DepthSequential(
        ol.DataControl(), _linear([[-1.0, 0.0, 1.0, 0.0], [0.0, -1.0, 0.0, 1.0]])
    )
    conditional = ol.CNF(field)
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 4.0))
    levels = torch.linspace(-9.0, -1.0, 9).tolist()
    shown = axes[0].contourf(gx, gy, log_p, levels=levels, cmap="Blues", extend="min")
    axes[0].contour(gx, gy, exact, levels=levels, colors="k", linewidths=0.6, linestyles="--")
    axes[0].scatter(samples[:, 0], samples[:, 1], s=2, color="tab:red")
    fig.colorbar(shown, ax=axes[0], fraction=0.046, label="log p(x)")
    axes[0].set_title(
        "CNF(dz/dt = A z): log_prob (filled), exact (dashed),\n"
        f"sample (dots); largest error {error:.0e} (rtol = atol = 1e-4)",
        fontsize=9,
    )
    torch.manual_seed(1)
    base = torch.randn(300, 2)
    axes[1].scatter(base[:, 0], base[:, 1], s=3, color="0.7", label="base N(0, I)")
    for condition, color in zip(([-2.5, 0.0], [2.5, 2.0]), ("tab:blue", "tab:orange")):
        c = torch.tensor(condition).expand(300, 2)
        with torch.no_grad():
            points, _ = conditional(base, condition=c)
        axes[1].scatter(
            points[:, 0], points[:, 1], s=3, color=color, label=f"c = ({c[0, 0]:g}, {c[0, 1]:g})"
        )
    axes[1].set_title(
        "data-controlled CNF dz/dt = c - z:\none model, one flow per condition", fontsize=9
    )
    axes[1].legend(fontsize=8, loc="lower left")
    for ax in axes:
        ax.set_aspect("equal")
        ax.set_xlim(-4, 4)
        ax.set_ylim(-4, 4)
    _save(fig, "cnf.png")


FIGURES: dict[str, Callable[[], None]] = {
    "data_control": data_control,
    "basis": basis_functions,
    "projection": basis_projection,
    "higher_order": oscillator,
    "anode": anode_1d,
    "adaptive_depth": adaptive_depth,
    "integrals": integrals,
    "cnf": cnf,
}


def main(argv: list[str]) -> int:
    names = argv or list(FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        print(f"unknown figures {unknown}; known: {', '.join(FIGURES)}", file=sys.stderr)
        return 2
    for name in names:
        FIGURES[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

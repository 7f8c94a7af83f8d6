"""The papers' claims, small enough for a CPU in seconds, seeded.

A Neural ODE on the line is an increasing map (flows cannot cross), so its best fit
of a target is bounded below by isotonic regression; the tests compute that bound on
the very sample and check that the trained NODE cannot beat it, while the variants
that the papers propose fit the target.
"""

from __future__ import annotations

import odecore
import torch
from odelayers import (
    AdaptiveDepthNODE,
    DataControl,
    DepthConcat,
    DepthSequential,
    JacobianFrobenius,
    KineticEnergy,
    NeuralODE,
    ZeroAugmentation,
)
from torch import nn

LOOSE = odecore.PIDController(rtol=1e-3, atol=1e-3)


def isotonic_mse(y: torch.Tensor) -> float:
    """Least mean squared error of a non-decreasing fit to ``y`` (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight]
    for v in y.tolist():
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, w2), (m1, w1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    fit = torch.cat([torch.full((int(w),), m) for m, w in blocks])
    return float((fit - y).pow(2).mean())


def monotone_mse_bound(x: torch.Tensor, y: torch.Tensor) -> float:
    """The least MSE of any monotone function of ``x`` (1-D) fitted to ``y``."""
    ys = y[x.squeeze(1).argsort()].squeeze(1)
    return min(isotonic_mse(ys), isotonic_mse(-ys))


def annuli_1d(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """g(x) of Dupont et al. in 1-D: -1 for |x| <= 0.5, +1 for 1 <= |x| <= 1.5."""
    gen = torch.Generator().manual_seed(seed)
    inner = (2 * torch.rand(n, 1, generator=gen) - 1) * 0.5
    sign = torch.where(torch.rand(n, 1, generator=gen) < 0.5, -1.0, 1.0)
    outer = sign * (1.0 + 0.5 * torch.rand(n, 1, generator=gen))
    return torch.cat([inner, outer]), torch.cat([-torch.ones(n, 1), torch.ones(n, 1)])


def train_g(
    augment: int, seed: int = 0, iterations: int = 150, regularise: float = 0.0
) -> tuple[float, list[int]]:
    torch.manual_seed(seed)
    x, y = annuli_1d(50, seed)
    d = 1 + augment
    field = DepthSequential(
        nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, d)
    )
    terms = [KineticEnergy(), JacobianFrobenius()] if regularise else []
    node = NeuralODE(field, controller=LOOSE, gradient=odecore.Autograd(), integrals=terms)
    net = nn.Sequential(*([ZeroAugmentation(augment)] if augment else []), node, nn.Linear(d, 1))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    nfe = []
    for _ in range(iterations):
        opt.zero_grad()
        loss = (net(x) - y).pow(2).mean()
        if regularise:
            loss = loss + regularise * sum(v.mean() for v in node.integrals.values())
        loss.backward()
        opt.step()
        nfe.append(node.nfe)
    node.integral_terms = ()  # the last entry: a plain forward pass, as at inference
    with torch.no_grad():
        final = float((net(x) - y).pow(2).mean())
    return final, [*nfe, node.nfe]


def test_node_cannot_fit_g_anode_can_and_needs_fewer_new_evaluations():
    # ANODE Sec. 4 and 5.1: the NODE's features are a monotone function of x, so its
    # loss stays at the isotonic bound (about 2/3); one extra dimension fits g.
    x, y = annuli_1d(50, 0)
    bound = monotone_mse_bound(x, y)
    assert 0.5 < bound < 0.8
    node_loss, node_nfe = train_g(augment=0)
    anode_loss, anode_nfe = train_g(augment=1)
    assert node_loss >= bound * (1 - 1e-3)
    assert anode_loss < 0.05

    # The NODE's flow gets harder to solve as it squeezes the space (Fig. 8): its NFE
    # grows by more than the ANODE's.
    def growth(nfe: list[int]) -> float:
        return (sum(nfe[-10:]) / 10) / (sum(nfe[:10]) / 10)

    assert growth(node_nfe) > growth(anode_nfe)


def test_kinetic_and_jacobian_regularisers_lower_the_nfe():
    # Finlay et al. 2020: penalising |f|^2 and |df/dx|_F^2 along the solve keeps the
    # flow straight, so the trained ANODE fits as well with far fewer evaluations at
    # inference (the solve without the integrals).
    plain_loss, plain_nfe = train_g(augment=1, iterations=200)
    reg_loss, reg_nfe = train_g(augment=1, iterations=200, regularise=0.01)
    assert plain_loss < 0.01 and reg_loss < 0.01
    assert reg_nfe[-1] < 0.7 * plain_nfe[-1]


def train_reflection(kind: str, seed: int = 0, iterations: int = 300) -> float:
    torch.manual_seed(seed)
    x = torch.linspace(-1.0, 1.0, 64)[:, None]
    y = -x
    control = odecore.PIDController(rtol=1e-4, atol=1e-4)
    head = DataControl() if kind == "data_control" else DepthConcat()
    field = DepthSequential(head, nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 1))
    model: nn.Module
    if kind == "adaptive_depth":
        horizon = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
        model = AdaptiveDepthNODE(field, horizon, controller=control, gradient=odecore.Autograd())
    else:
        model = NeuralODE(field, controller=control, gradient=odecore.Autograd())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(iterations):
        opt.zero_grad()
        loss = (model(x) - y).abs().mean()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return float((model(x) - y).abs().mean())


def test_vanilla_node_cannot_reflect():
    # Dissecting Sec. 5 / C.3: x -> -x needs crossing trajectories. An increasing map
    # fits decreasing targets no better in L1 than their median does.
    y = -torch.linspace(-1.0, 1.0, 64)
    bound = float((y - y.median()).abs().mean())
    assert train_reflection("vanilla") >= bound * (1 - 1e-3)


def test_data_controlled_node_learns_the_reflection():
    assert train_reflection("data_control") < 0.03


def test_adaptive_depth_node_learns_the_reflection():
    # With a depth-varying field and a depth of its own, every sample can stop where
    # the flow has carried it to -x (Dissecting Sec. 5.2). Where 300 Adam steps end
    # depends on the seed, and changes in the last bits of a solve (one of seeds 0-3
    # ends near 0.07, the others at 0.02-0.03), so the claim is judged on the median
    # of three seeds; the vanilla NODE's floor is 0.5.
    losses = sorted(train_reflection("adaptive_depth", seed=seed) for seed in range(3))
    assert losses[1] < 0.05

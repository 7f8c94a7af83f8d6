"""``odebench run chen-cnf``: continuous normalizing flows fitted to 2-D densities.

Chen et al. (2018), Sec. 4 and Figs. 4-5: a continuous normalizing flow (CNF) turns a
standard normal into a target density through the flow of ``dz/dt = f(t, z)``, and
the log-density changes by ``-int tr(df/dz) dt`` (the instantaneous change of
variables). The experiment fits :class:`odelayers.CNF` by maximum likelihood to
samples of two densities of the paper's Fig. 5 (two moons, two circles) and compares
its held-out negative log-likelihood with the best single Gaussian (fitted in closed
form) and with the true density, which is known here. Two checks test the code rather
than the paper: the learned density integrates to one, and the exact trace integral
equals the log-determinant of the flow map's Jacobian taken by finite differences.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import odecore
import odelayers
import torch
from torch import Tensor, nn

from .._io import pyplot, save_png
from ..training import Epoch, Task
from . import _metrics, _template
from ._claims import Claim
from ._template import Figure, Measurement, Result, Run, Settings, Setup, Trained

DENSITIES: tuple[str, ...] = ("moons", "circles")
"""The target densities, each trained as its own CNF and Gaussian."""

LABELS = {"moons": "two moons", "circles": "two circles"}

RADII = (1.6, 0.8)
"""The radii of the two circles (outer, inner)."""

TRUTH_NODES = 4000
"""Quadrature nodes along the centre curve for the true density."""

# Thresholds of the claims, and why each is what it is (the report repeats them).
NATS_BETTER = 0.1  # the CNF's test NLL at least this far below the Gaussian's
GAP_CLOSED = 0.8  # the CNF closes at least this fraction of the Gaussian-to-truth gap
NFE_GROWTH = 1.5  # adaptive NFE of the trained flow over that of the initial flow
MASS_TOL = 0.01  # abs(mass on the grid + mass of the samples outside it - 1)
LOGDET_TOL = 1e-4  # abs(delta + log abs det J) in nats, float64, J by central differences

_F64 = torch.float64
Field = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class CnfSettings(Settings):
    """The sizes of one mode.

    Args:
        n_train: training points of each density, drawn from the seed.
        n_test: held-out points of each density, drawn from the seed after them.
        noise: standard deviation of the Gaussian noise around each density's curve.
        hidden: width of the two hidden layers of the field (tanh).
        iterations: Adam steps (``--epochs`` sets them).
        batch_size: training points per step, drawn with replacement.
        lr: Adam's initial learning rate, cosine-annealed to ``lr / 100``.
        steps: RK4 steps over ``t in [0, 1]`` in training.
        rtol: the tolerance (relative and absolute) of the adaptive Dopri5 solves that
            evaluate the trained flow.
        eval_every: iterations between two readings of the test NLL and the NFE.
        grid: points per side of the grid of the density check and the figure.
        box: the grid covers ``[-box, box]^2``.
        n_samples: base draws pushed through the flow (figure, mass outside the grid).
        n_logdet: points of the finite-difference log-determinant check.
        logdet_steps: RK4 steps of the float64 solves of that check.
    """

    n_train: int
    n_test: int
    noise: float
    hidden: int
    iterations: int
    batch_size: int
    lr: float
    steps: int
    rtol: float
    eval_every: int
    grid: int
    box: float
    n_samples: int
    n_logdet: int = 8
    logdet_steps: int = 128

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.iterations < 1:
            raise ValueError(f"`iterations` must be a positive integer, got {self.iterations}.")
        if self.eval_every < 1:
            raise ValueError(f"`eval_every` must be a positive integer, got {self.eval_every}.")


MODES = {
    "quick": CnfSettings(
        n_train=256, n_test=128, noise=0.15, hidden=16, iterations=20, batch_size=64,
        lr=5e-3, steps=4, rtol=1e-5, eval_every=10, grid=31, box=4.0, n_samples=512,
        n_logdet=4, logdet_steps=32,
    ),
    "standard": CnfSettings(
        seeds=3, n_train=8192, n_test=2048, noise=0.15, hidden=64, iterations=1500,
        batch_size=256, lr=5e-3, steps=8, rtol=1e-5, eval_every=100, grid=161, box=4.0,
        n_samples=4096,
    ),
    "full": CnfSettings(
        seeds=5, n_train=8192, n_test=2048, noise=0.15, hidden=64, iterations=10_000,
        batch_size=512, lr=5e-3, steps=8, rtol=1e-5, eval_every=500, grid=161, box=4.0,
        n_samples=4096,
    ),
}  # fmt: skip


def _centres(density: str, u: Tensor) -> Tensor:
    """The point of ``density``'s centre curve at the parameters ``u`` in ``[0, 1)``.

    Uniform ``u`` gives each half (moon or circle) half of the mass, uniform in angle.
    """
    first = u < 0.5
    frac = torch.where(first, 2 * u, 2 * u - 1)
    if density == "moons":
        angle = math.pi * frac
        x = torch.where(first, torch.cos(angle), 1 - torch.cos(angle))
        y = torch.where(first, torch.sin(angle), 0.5 - torch.sin(angle))
        return 1.5 * torch.stack([x - 0.5, y - 0.25], dim=-1)
    if density == "circles":
        angle = 2 * math.pi * frac
        radius = torch.where(first, RADII[0], RADII[1]).to(u.dtype)
        return radius[:, None] * torch.stack([torch.cos(angle), torch.sin(angle)], dim=-1)
    raise ValueError(f"Unknown `density` {density!r}; known: {', '.join(DENSITIES)}.")


def sample_density(density: str, n: int, noise: float, generator: torch.Generator) -> Tensor:
    """``n`` points of ``density``: its centre curve plus Gaussian noise of std ``noise``.

    Two moons: two interleaved half circles, centred and scaled by 1.5 (the tutorial's);
    two circles: radii 1.6 and 0.8. Each half holds half the points.

    Raises:
        ValueError: an unknown ``density``.

    Example:
        >>> import torch
        >>> x = sample_density("circles", 1000, 0.0, torch.Generator().manual_seed(0))
        >>> sorted({round(r, 4) for r in x.norm(dim=1).tolist()})
        [0.8, 1.6]
    """
    u = torch.rand(n, generator=generator)
    return _centres(density, u) + noise * torch.randn(n, 2, generator=generator)


def true_log_prob(density: str, x: Tensor, noise: float, nodes: int = TRUTH_NODES) -> Tensor:
    """The exact log-density of :func:`sample_density` at ``x``, in float64.

    The density is the mean over the curve parameter ``u`` of ``N(x; centre(u),
    noise^2 I)``, computed by the midpoint rule over ``nodes`` values of ``u`` (the
    nodes lie far closer than ``noise`` along the curve, so the sum is exact to many
    digits).

    Example:
        >>> import math, torch
        >>> x = torch.tensor([[1.6, 0.0], [0.0, 0.0]])
        >>> p = true_log_prob("circles", x, 0.15).exp()
        >>> bool(p[0] > 100 * p[1])  # on the outer circle, not in the hole
        True
    """
    u = (torch.arange(nodes, dtype=_F64) + 0.5) / nodes
    centres = _centres(density, u)
    out = []
    for chunk in torch.split(x.to(_F64), 1024):
        sq = (chunk[:, None, :] - centres[None]).pow(2).sum(-1)
        out.append(torch.logsumexp(-sq / (2 * noise**2), dim=1))
    return torch.cat(out) - math.log(nodes) - math.log(2 * math.pi * noise**2)


@functools.lru_cache(maxsize=8)
def _data(s: CnfSettings, density: str, seed: int) -> tuple[Tensor, Tensor]:
    """The training and held-out points of ``density`` for ``seed`` (one generator)."""
    generator = torch.Generator().manual_seed(seed * 1000 + DENSITIES.index(density))
    train = sample_density(density, s.n_train, s.noise, generator)
    test = sample_density(density, s.n_test, s.noise, generator)
    return train, test


def flow_field(hidden: int) -> odelayers.DepthSequential:
    """The vector field ``f(t, z)``: ``[z, t] -> hidden -> hidden -> 2`` with tanh.

    The field of tutorial 06; no normalisation, so that samples do not interact.
    """
    return odelayers.DepthSequential(
        odelayers.DepthConcat(),
        nn.Linear(3, hidden),
        nn.Tanh(),
        nn.Linear(hidden, hidden),
        nn.Tanh(),
        nn.Linear(hidden, 2),
    )


def adaptive_flow(field: Field, rtol: float) -> odelayers.CNF:
    """The CNF of ``field`` solved by Dopri5 at ``rtol = atol``: the continuous model."""
    return odelayers.CNF(
        field, solver=odecore.Dopri5(), controller=odecore.PIDController(rtol=rtol, atol=rtol)
    )


def grid_points(grid: int, box: float) -> tuple[Tensor, float]:
    """The centres of ``grid x grid`` cells tiling ``[-box, box]^2`` (row-major in y),
    and the cell side."""
    h = 2 * box / grid
    side = -box + h * (torch.arange(grid, dtype=torch.float32) + 0.5)
    gx, gy = torch.meshgrid(side, side, indexing="xy")
    return torch.stack([gx.flatten(), gy.flatten()], dim=1), h


def trace_and_logdet(
    field: Field, z0: Tensor, steps: int, eps: float = 1e-5
) -> tuple[Tensor, Tensor]:
    """The CNF's change of log-density and the log-determinant of its map, per point.

    ``delta = -int tr(df/dz) dt`` is the CNF's exact-trace integral from ``z0``, and
    ``log abs det J`` that of the Jacobian ``J`` of the map ``z0 -> z(1)``, by central
    differences of step ``eps`` of plain solves of the state (no trace). Both come
    from RK4 solves of a float64 copy of ``field`` in ``steps`` steps. The change of
    variables, ``log p1(z(1)) = log p0(z0) - log abs det J``, makes ``delta =
    -log abs det J``.

    Example:
        >>> import torch
        >>> a = torch.tensor([[0.3, 0.8], [0.0, -0.5]], dtype=torch.float64)
        >>> delta, logdet = trace_and_logdet(lambda t, z: z @ a.T, torch.randn(3, 2), steps=16)
        >>> delta.round(decimals=6).tolist(), logdet.round(decimals=6).tolist()
        ([0.2, 0.2, 0.2], [-0.2, -0.2, -0.2])
    """
    field64 = copy.deepcopy(field).to(_F64) if isinstance(field, nn.Module) else field
    spec = odecore.OdeSpec(solver=odecore.RK4(), n_steps=steps)
    z0 = z0.detach().to(_F64)
    n, dim = z0.shape
    # Every perturbed point in one batch: +eps e_j for each j, then -eps e_j.
    shift = eps * torch.eye(dim, dtype=_F64, device=z0.device)
    shifted = torch.cat([z0[None] + shift[:, None], z0[None] - shift[:, None]])
    with torch.no_grad():
        _, delta = odelayers.CNF(field64, spec=spec)(z0)
        ends = odelayers.NeuralODE(field64, spec=spec)(shifted.reshape(-1, dim))
    plus, minus = ends.reshape(2, dim, n, dim)
    jacobian = ((plus - minus) / (2 * eps)).permute(1, 2, 0)  # (point, out, in)
    return delta.detach(), torch.linalg.slogdet(jacobian).logabsdet


def logdet_error(field: Field, z0: Tensor, steps: int, eps: float = 1e-5) -> float:
    """The largest ``abs(delta + log abs det J)`` over the points ``z0`` (see
    :func:`trace_and_logdet`): zero up to the solves' and the differences' errors.

    Example:
        >>> import torch
        >>> logdet_error(flow_field(8), torch.randn(4, 2), steps=32) < 1e-6
        True
    """
    delta, logdet = trace_and_logdet(field, z0, steps, eps)
    return float((delta + logdet).abs().max())


def mass(
    log_prob: Callable[[Tensor], Tensor], samples: Tensor, grid: int, box: float
) -> tuple[float, float, Tensor]:
    """How much probability a density puts on the grid, and its samples outside it.

    Args:
        log_prob: the log-density, per point.
        samples: points drawn from the same density.
        grid: cells per side of the grid on ``[-box, box]^2``.
        box: the grid's half-width.

    Returns:
        The midpoint sum of the density over the grid's cells, the fraction of
        ``samples`` outside the grid (their sum is 1 for a normalised density), and
        the log-density at the cells' centres, ``(grid, grid)`` with y along the rows.

    Example:
        >>> import torch
        >>> normal = torch.distributions.MultivariateNormal(torch.zeros(2), torch.eye(2))
        >>> on_grid, outside, _ = mass(normal.log_prob, normal.sample((1000,)), 80, 6.0)
        >>> round(on_grid, 6), outside
        (1.0, 0.0)
    """
    points, h = grid_points(grid, box)
    with torch.no_grad():
        log_density = torch.cat([log_prob(p).detach().cpu() for p in torch.split(points, 8192)])
    on_grid = float(log_density.double().exp().sum()) * h * h
    outside = float((samples.abs() > box).any(dim=1).double().mean())
    return on_grid, outside, log_density.reshape(grid, grid)


class Gaussian(nn.Module):
    """The maximum-likelihood Gaussian of some points: their mean and covariance.

    Example:
        >>> import torch
        >>> g = Gaussian(torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 2.0]]))
        >>> g.mean.tolist(), g.cov.tolist()
        ([1.0, 1.0], [[1.0, 0.0], [0.0, 1.0]])
    """

    mean: Tensor
    cov: Tensor

    def __init__(self, points: Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", points.mean(dim=0))
        self.register_buffer("cov", torch.cov(points.T, correction=0))

    def log_prob(self, x: Tensor) -> Tensor:
        """The log-density at ``x``, per point."""
        chol = torch.linalg.cholesky(self.cov)
        white = torch.linalg.solve_triangular(chol, (x - self.mean).T, upper=False)
        log_det = 2 * chol.diagonal().log().sum()
        out: Tensor = white.pow(2).sum(dim=0) + log_det + x.shape[1] * math.log(2 * math.pi)
        return -0.5 * out


def runs(setup: Setup[CnfSettings], seed: int) -> list[Run]:
    """Per density, a CNF on that density's data of ``seed`` (:func:`measure` fits the
    Gaussian it is compared with, in closed form)."""
    return [Run(f"{density}/cnf", task=_task(setup, density, seed)) for density in DENSITIES]


def _reading(flow: nn.Module, test: Tensor, rtol: float) -> dict[str, float]:
    """The test NLL and the NFE of the adaptive Dopri5 solve of ``flow``'s field."""
    adaptive = adaptive_flow(cast(odelayers.CNF, flow).vector_field, rtol)
    with torch.no_grad():
        nll = -float(adaptive.log_prob(test.to(next(flow.parameters()).device)).mean())
    return {"test_nll": nll, "nfe": float(adaptive.nfe)}


def _task(setup: Setup[CnfSettings], density: str, seed: int) -> Task:
    """Maximum likelihood with RK4 in ``steps`` steps, backpropagating through them, by
    Adam, its rate cosine-annealed over the iterations. Each iteration draws
    ``batch_size`` training points with replacement from the order generator (seeded
    with ``seed``); an epoch is ``eval_every`` iterations (the last, what is left), after
    which the test NLL and the NFE of the adaptive solve are read. ``train_nll`` is the
    mean batch loss of the epoch."""
    s = setup.settings
    train, test = _data(s, density, seed)

    def order(epoch: int, generator: torch.Generator) -> Tensor:
        draws = min(s.eval_every, s.iterations - epoch * s.eval_every) * s.batch_size
        return torch.randint(0, len(train), (draws,), generator=generator)

    def row(epoch: Epoch) -> dict[str, Any]:
        return {
            "iteration": float(min((epoch.index + 1) * s.eval_every, s.iterations)),
            "train_nll": sum(epoch.losses) / len(epoch.losses),
            **epoch.evaluation,
            "epoch_seconds": epoch.seconds,
        }

    def after_epoch(rows: list[dict[str, Any]]) -> None:
        r = rows[-1]
        setup.log(
            f"[{density}] iteration {r['iteration']:.0f}/{s.iterations}: train NLL "
            f"{r['train_nll']:.3f}, test NLL {r['test_nll']:.3f}, NFE {r['nfe']:g}"
        )

    spec = odecore.OdeSpec(solver=odecore.RK4(), n_steps=s.steps)
    return Task(
        model=lambda: odelayers.CNF(flow_field(s.hidden), spec=spec),
        data=(train,),
        loss=lambda flow, batch: -cast(odelayers.CNF, flow).log_prob(batch[0]).mean(),
        optimizer=functools.partial(torch.optim.Adam, lr=s.lr),
        schedule=functools.partial(
            torch.optim.lr_scheduler.CosineAnnealingLR, T_max=s.iterations, eta_min=s.lr / 100
        ),
        epochs=math.ceil(s.iterations / s.eval_every),
        batch_size=s.batch_size,
        seed=seed,
        order=order,
        row=row,
        evaluate=lambda flow, epoch: _reading(flow, test, s.rtol),
        after_epoch=after_epoch,
        settings={"run": f"{density}/cnf", "seed": seed, **dataclasses.asdict(s)},
    )


def measure(setup: Setup[CnfSettings], trained: Trained) -> Measurement:
    """The numbers of one trained CNF, and of the Gaussian fitted to its training points.

    The CNF's test NLL with the adaptive solve (``test_nll``) and with the RK4 steps it
    trained with (``test_nll_rk4``), that of the true density (``true_test_nll``), the
    NFE of the adaptive solve before training (of the initial model, rebuilt from the
    seed) and after, the mass of its density on the grid plus that of its samples
    outside the grid (``mass``), and the two check errors; the Gaussian's train and
    test NLL (``gaussian_train_nll``, ``gaussian_test_nll``). Saves what the figure
    draws (``flow.pt``).
    """
    s = setup.settings
    density = trained.run.name.split("/")[0]
    train, test = _data(s, density, trained.seed)
    model = cast(odelayers.CNF, trained.load())
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(trained.seed)  # as fit builds it
        initial = cast(Task, trained.run.task).model().to(device)
    history = [
        {"iteration": 0.0, "train_nll": math.nan, **_reading(initial, test, s.rtol)},
        *trained.history,
    ]
    adaptive = adaptive_flow(model.vector_field, s.rtol)
    gaussian = Gaussian(train)
    z0 = torch.randn(s.n_samples, 2, generator=torch.Generator().manual_seed(trained.seed + 1))
    with torch.no_grad():
        test_nll_rk4 = -float(model.log_prob(test.to(device)).mean())
        log_p = adaptive.log_prob(test.to(device)).cpu()
        test_nll = -float(log_p.mean())
        nfe = adaptive.nfe
        # The per-point NLL difference from the Gaussian, for its standard error.
        diff = gaussian.log_prob(test) - log_p
        samples = adaptive(z0.to(device))[0].cpu()
        nfe_sampling = adaptive.nfe
    on_grid, outside, log_density = mass(
        lambda x: adaptive.log_prob(x.to(device)), samples, s.grid, s.box
    )
    total = on_grid + outside
    error = logdet_error(model.vector_field, z0[: s.n_logdet].to(device), s.logdet_steps)
    trained.dir.mkdir(parents=True, exist_ok=True)
    torch.save({"log_density": log_density, "samples": samples}, trained.dir / "flow.pt")
    metrics = {
        "test_nll": test_nll,
        "test_nll_rk4": test_nll_rk4,
        "true_test_nll": -float(true_log_prob(density, test, s.noise).mean()),
        "gaussian_train_nll": -float(gaussian.log_prob(train).mean()),
        "gaussian_test_nll": -float(gaussian.log_prob(test).mean()),
        "paired_se": float(diff.std() / math.sqrt(len(diff))),
        "train_nll": history[-1]["train_nll"],
        "nfe_initial": history[0]["nfe"],
        "nfe": float(nfe),
        "nfe_sampling": float(nfe_sampling),
        "nfe_training": 4.0 * s.steps,
        "mass_in_grid": on_grid,
        "mass_outside": outside,
        "mass": total,
        "mass_error": abs(total - 1.0),
        "logdet_error": error,
        "train_seconds": trained.seconds,
    }
    setup.log(
        f"[{density}] test NLL {test_nll:.3f} (RK4 {test_nll_rk4:.3f}, truth "
        f"{metrics['true_test_nll']:.3f}); NFE {metrics['nfe_initial']:g} -> {nfe}; mass "
        f"{total:.4f}; log-det error {error:.1e}"
    )
    return Measurement(metrics, {"history": [dict(row) for row in history]})


def gap_closed(v: _metrics.Values, density: str) -> float:
    """The fraction of the test-NLL gap from the Gaussian to the true density that the
    CNF closes: 1 matches the truth, 0 is no better than the Gaussian.

    Example:
        >>> from odebench.experiments._template import Values
        >>> v = Values({"moons/cnf": {"test_nll": 1.9, "true_test_nll": 1.8,
        ...                           "gaussian_test_nll": 2.8}})
        >>> round(gap_closed(v, "moons"), 3)
        0.9
    """
    cnf = f"{density}/cnf"
    gaussian = v[cnf, "gaussian_test_nll"]
    return (gaussian - v[cnf, "test_nll"]) / (gaussian - v[cnf, "true_test_nll"])


def _fits(v: _metrics.Values, density: str) -> bool:
    """Whether the CNF closes at least :data:`GAP_CLOSED` of the gap on ``density``."""
    return gap_closed(v, density) >= GAP_CLOSED


def _worst(v: _metrics.Values, metric: str) -> float:
    """The largest value of a CNF metric over the densities."""
    return max(v[f"{density}/cnf", metric] for density in DENSITIES)


def claims(setup: Setup[CnfSettings]) -> list[Claim]:
    """Per density: the CNF beats the Gaussian, closes most of the gap to the truth, and
    its adaptive NFE grows in training. Over both: the two checks of the code."""
    s = setup.settings
    tol = f"Dopri5 at rtol = atol = {s.rtol:g}"
    out: list[Claim] = []
    for density in DENSITIES:
        label = LABELS[density]
        cnf = f"{density}/cnf"
        out += [
            Claim.difference(
                f"{density}_beats_gaussian",
                f"Sec. 4: on {label} the CNF's test NLL beats the best Gaussian's",
                "figures only, no number",
                (cnf, "test_nll"), (cnf, "gaussian_test_nll"),
                below=-NATS_BETTER, kind="paper", spec="+.3f", unit=" nats",
                detail=f"ours: the CNF's held-out NLL ({tol}) minus the closed-form Gaussian's, "
                f"paired per seed; holds below -{NATS_BETTER:g} nats, a margin several times "
                "the standard error of a paired difference over the test set and still far "
                "from what a flow that learnt only a linear map (the Gaussian) can reach",
            ),
            Claim(
                key=f"{density}_fits_density",
                text=f"Fig. 5: the CNF fits {label}: most of the NLL gap to the truth closed",
                published="figures only, no number",
                ours=functools.partial(gap_closed, density=density),
                holds=functools.partial(_fits, density=density),
                spec=".0f", scale=100, unit="%", kind="paper",
                detail="ours: (Gaussian's test NLL - CNF's) / (Gaussian's - true density's), "
                f"the fraction of the way from the best Gaussian to the exact density; holds "
                f"at {GAP_CLOSED:.0%} or more. The paper shows the fit as pictures; this "
                "threshold turns 'looks like the target' into a number a picture cannot hide",
            ),
            Claim.ratio(
                f"{density}_nfe_grows",
                f"Fig. 3d: the NFE grows during training ({label})",
                "stated, no number",
                (cnf, "nfe"), (cnf, "nfe_initial"),
                above=NFE_GROWTH, kind="paper",
                detail=f"ours: the NFE of the adaptive solve ({tol}) of the held-out log-density "
                f"after training over that before; holds above {NFE_GROWTH:g}×. The paper "
                "states it for its MNIST ODE-Net; training here takes fixed RK4 steps, so the "
                "NFE measures how hard the learned field is to integrate",
            ),
        ]  # fmt: skip
    out += [
        Claim(
            key="density_integrates_to_one",
            text="the CNF's density integrates to one (change of variables)",
            published="exact identity",
            ours=lambda v: _worst(v, "mass_error"),
            holds=lambda v: _worst(v, "mass_error") < MASS_TOL,
            spec=".1e", kind="check",
            detail=f"ours: the largest abs(mass - 1) over the densities, where mass is the "
            f"density ({tol}) summed over a {s.grid}×{s.grid} grid on [-{s.box:g}, {s.box:g}]² "
            f"plus the fraction of {s.n_samples} flow samples outside it; passes below "
            f"{MASS_TOL:g}. A wrong sign or a missing term of the trace moves it by far more; "
            "training cannot, since any field's flow conserves mass",
        ),
        Claim(
            key="trace_matches_logdet",
            text="the exact trace integral equals log abs det J by finite differences",
            published="exact identity",
            ours=lambda v: _worst(v, "logdet_error"),
            holds=lambda v: _worst(v, "logdet_error") < LOGDET_TOL,
            spec=".1e", unit=" nats", kind="check",
            detail=f"ours: the largest abs(delta + log abs det J) over {s.n_logdet} base points "
            "and the densities, delta the CNF's -int tr(df/dz) dt and J the Jacobian of z0 -> z(1) "
            f"by central differences (step 1e-5), both from float64 RK4 solves in "
            f"{s.logdet_steps} steps of the trained field; passes below {LOGDET_TOL:g} nats, "
            "far above the solves' and differences' errors and far below any error of the trace",
        ),
    ]  # fmt: skip
    return out


def sections(result: Result[CnfSettings]) -> str:
    """The set-up, the NLL and NFE table, the checks table, the figures."""
    s = result.settings
    lines = [
        "Chen et al. (2018), Sec. 4 and Figs. 4-5. For each density, a CNF "
        f"(`odelayers.CNF`, exact trace; field [z, t] -> {s.hidden} -> {s.hidden} -> 2 with "
        f"tanh) is trained by maximum likelihood on {s.n_train} points drawn from the "
        f"seed (noise std {s.noise:g} around the curve), with RK4 in {s.steps} steps over "
        f"t in [0, 1] and backpropagation through them, Adam, lr {s.lr:g} cosine-annealed, "
        f"batch {s.batch_size}, {s.iterations} iterations, one torch thread. The trained "
        f"field is evaluated as the continuous model: Dopri5 at rtol = atol = {s.rtol:g}. "
        f"The Gaussian is the maximum-likelihood one (mean and covariance of the training "
        f"points). The true density is exact (a mean of Gaussians along the curve, "
        f"{TRUTH_NODES} nodes). NLLs are in nats per point on {s.n_test} held-out points.",
        "",
        "## Negative log-likelihood and function evaluations",
        "",
        "| density | model | train NLL | test NLL (Dopri5) | test NLL (RK4, as trained) "
        "| gap closed | NFE before → after training |",
        "|---|---|---|---|---|---|---|",
    ]
    for density in DENSITIES:
        cnf = f"{density}/cnf"
        values = [
            _metrics.Values({cnf: {m: st.values[k] for m, st in result.metrics[cnf].items()}})
            for k in range(len(result.setup.seeds))
        ]
        closed = _metrics.Stat.of([gap_closed(v, density) for v in values])
        nfe = f"{result.cell(cnf, 'nfe_initial', '.0f')} → {result.cell(cnf, 'nfe', '.0f')}"
        label = LABELS[density]
        lines += [
            f"| {label} | CNF | {result.cell(cnf, 'train_nll', '.3f')} | "
            f"{result.cell(cnf, 'test_nll', '.3f')} | {result.cell(cnf, 'test_nll_rk4', '.3f')} "
            f"| {closed.cell('.0f', 100, '%')} | {nfe} |",
            f"| {label} | Gaussian | {result.cell(cnf, 'gaussian_train_nll', '.3f')} | "
            f"{result.cell(cnf, 'gaussian_test_nll', '.3f')} | – | 0% | – |",
            f"| {label} | true density | – | {result.cell(cnf, 'true_test_nll', '.3f')} | – "
            "| 100% | – |",
        ]
    lines += [
        "",
        "The paper gives no numbers for these densities (Figs. 4-5 are pictures). "
        f"Training takes {4 * s.steps} evaluations per solve (RK4, {s.steps} steps) "
        "whatever the field; the NFE columns are the adaptive solve's on the held-out "
        "points, before and after training. The train NLL is the mean minibatch loss "
        f"over the last {s.eval_every} iterations. The standard error of the mean "
        "per-point difference of test NLL between the CNF and the Gaussian (the paired "
        "difference the first claim of each density tests) is "
        + ", ".join(
            f"{result.cell(f'{d}/cnf', 'paired_se', '.3f')} nats on {LABELS[d]}" for d in DENSITIES
        )
        + ".",
        "",
        "## The checks in numbers",
        "",
        "| density | mass on the grid | mass of samples outside it | total | "
        "max log-det error (nats) |",
        "|---|---|---|---|---|",
    ]
    for density in DENSITIES:
        cnf = f"{density}/cnf"
        lines.append(
            f"| {LABELS[density]} | {result.cell(cnf, 'mass_in_grid', '.4f')} | "
            f"{result.cell(cnf, 'mass_outside', '.4f')} | {result.cell(cnf, 'mass', '.4f')} | "
            f"{result.cell(cnf, 'logdet_error', '.1e')} |"
        )
    lines += [
        "",
        "![densities](densities.png)",
        "",
        "First seed. Columns: held-out points of the target; the true density; the "
        "CNF's density on the grid (Dopri5); base samples pushed through the flow. The "
        "two density columns share one colour scale per row.",
        "",
        "![training](training.png)",
        "",
        "Held-out NLL (Dopri5) and the adaptive solve's NFE during training, one line "
        "per seed; dashed: the Gaussian's and the true density's test NLL (first seed).",
    ]
    return "\n".join(lines)


def _plot_densities(result: Result[CnfSettings], path: Path) -> None:
    """Per density: the target's held-out points, the true density, the CNF's, its samples."""
    s, setup = result.settings, result.setup
    seed = setup.seeds[0]
    points, _ = grid_points(s.grid, s.box)
    plt = pyplot()
    fig, axes = plt.subplots(len(DENSITIES), 4, figsize=(13, 3.3 * len(DENSITIES)))
    extent = (-s.box, s.box, -s.box, s.box)
    for row, density in zip(axes, DENSITIES):
        _, test = _data(s, density, seed)
        saved = torch.load(setup.run_dir(f"{density}/cnf", seed) / "flow.pt", weights_only=True)
        truth = true_log_prob(density, points, s.noise).exp().reshape(s.grid, s.grid).numpy()
        learned = saved["log_density"].double().exp().numpy()
        top = float(truth.max())
        row[0].scatter(*test.T.numpy(), s=1.5, color="black")
        row[1].imshow(truth, origin="lower", extent=extent, cmap="viridis", vmin=0, vmax=top)
        row[2].imshow(learned, origin="lower", extent=extent, cmap="viridis", vmin=0, vmax=top)
        row[3].scatter(*saved["samples"][: len(test)].T.numpy(), s=1.5, color="tab:blue")
        titles = ("held-out points", "true density", "CNF density", "CNF samples")
        for ax, title in zip(row, titles):
            ax.set(xlim=(-s.box, s.box), ylim=(-s.box, s.box), aspect="equal")
            ax.set_title(f"{LABELS[density]}: {title}", fontsize=9)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


def _plot_training(result: Result[CnfSettings], path: Path) -> None:
    """Held-out NLL and NFE of the adaptive solve against the iteration, per density."""
    plt = pyplot()
    fig, axes = plt.subplots(2, len(DENSITIES), figsize=(5.2 * len(DENSITIES), 6.4))
    for k, density in enumerate(DENSITIES):
        cnf = f"{density}/cnf"
        for i, m in enumerate(result.measurements[cnf]):
            rows = m.details["history"]
            its = [r["iteration"] for r in rows]
            axes[0, k].plot(its, [r["test_nll"] for r in rows], color=f"C{i}", lw=1)
            axes[1, k].plot(its, [r["nfe"] for r in rows], color=f"C{i}", lw=1)
        gaussian = result.stat(cnf, "gaussian_test_nll").values[0]
        truth = result.stat(cnf, "true_test_nll").values[0]
        for value, name in ((gaussian, "Gaussian"), (truth, "true density")):
            if value is not None:
                axes[0, k].axhline(value, color="0.4", ls="--", lw=1)
                axes[0, k].text(0, value, f" {name}", va="bottom", fontsize=8, color="0.3")
        axes[0, k].set(title=LABELS[density], ylabel="held-out NLL (nats)")
        axes[1, k].set(xlabel="iteration", ylabel="NFE (Dopri5)")
        for ax in axes[:, k]:
            ax.grid(alpha=0.3)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


_template.register_template(
    _template.Template(
        name="chen-cnf",
        description="a continuous normalizing flow fitted to two 2-D densities against the "
        "best Gaussian and the true density (Chen et al. 2018, Sec. 4, Figs. 4-5)",
        title="Continuous normalizing flows on 2-D densities",
        data=lambda setup: (
            f"two moons and two circles ({setup.settings.n_train} train / "
            f"{setup.settings.n_test} test points each, drawn from the seed)"
        ),
        modes=MODES,
        epoch_fields=("iterations",),
        one_thread_modes=("quick", "standard"),
        runs=runs,
        measure=measure,
        claims=claims,
        sections=sections,
        figures=[
            Figure("densities.png", _plot_densities),
            Figure("training.png", _plot_training),
        ],
    )
)

"""chen-cnf's data, model and measurement: the 2-D densities and their exact log-density,
the Gaussian, the CNF, its training, and the two checks of the code (mass, log-det)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import odecore
import odelayers
import torch
from torch import Tensor, nn

from .._io import JsonObject
from .._metrics import Metric
from ..training import Epoch, Task
from ._template import Measurement, Setup, Trained

if TYPE_CHECKING:
    from ._chen_cnf import CnfSettings

DENSITIES: tuple[str, ...] = ("moons", "circles")  # each fitted by its run <density>/cnf
RADII = (1.6, 0.8)  # of the two circles, outer and inner
TRUTH_NODES = 4000  # quadrature nodes along the centre curve for the true density

# What measure records of each CNF. NLLs are in nats per held-out point, of the adaptive
# solve (Dopri5) unless said otherwise; NFEs are the adaptive solve's.
TEST_NLL = Metric("test_nll", spec=".3f")
TEST_NLL_RK4 = Metric("test_nll_rk4", spec=".3f")  # with the RK4 steps it trained with
TRUE_TEST_NLL = Metric("true_test_nll", spec=".3f")
GAUSSIAN_TRAIN_NLL = Metric("gaussian_train_nll", spec=".3f")
GAUSSIAN_TEST_NLL = Metric("gaussian_test_nll", spec=".3f")
PAIRED_SE = Metric("paired_se", spec=".3f")  # standard error of the CNF's - Gaussian's
TRAIN_NLL = Metric("train_nll", spec=".3f")  # mean batch loss of the last epoch
NFE_INITIAL = Metric("nfe_initial", spec=".0f")
NFE = Metric("nfe", spec=".0f")
NFE_SAMPLING = Metric("nfe_sampling", spec=".0f")  # pushing the base samples through
NFE_TRAINING = Metric("nfe_training", spec=".0f")  # per RK4 solve in training
MASS_IN_GRID = Metric("mass_in_grid", spec=".4f")
MASS_OUTSIDE = Metric("mass_outside", spec=".4f")  # the flow's samples outside the grid
MASS = Metric("mass", spec=".4f")
MASS_ERROR = Metric("mass_error", spec=".1e")
LOGDET_ERROR = Metric("logdet_error", spec=".1e")

_F64 = torch.float64
Field = Callable[[Tensor, Tensor], Tensor]


def _centres(density: str, u: Tensor) -> Tensor:
    """The points of ``density``'s centre curve at ``u`` in ``[0, 1)``: a uniform ``u`` gives
    each half (moon or circle) half of the mass, uniform in angle."""
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
    """``n`` points of ``density``: its centre curve plus Gaussian noise of std ``noise``
    (``ValueError`` for an unknown ``density``)."""
    u = torch.rand(n, generator=generator)
    return _centres(density, u) + noise * torch.randn(n, 2, generator=generator)


def true_log_prob(density: str, x: Tensor, noise: float) -> Tensor:
    """The exact log-density of :func:`sample_density` at ``x``, in float64: the mean over
    the curve of ``N(x; centre(u), noise^2 I)``, by the midpoint rule on TRUTH_NODES ``u``."""
    centres = _centres(density, (torch.arange(TRUTH_NODES, dtype=_F64) + 0.5) / TRUTH_NODES)
    out = []
    for chunk in torch.split(x.to(_F64), 1024):
        sq = (chunk[:, None, :] - centres[None]).pow(2).sum(-1)
        out.append(torch.logsumexp(-sq / (2 * noise**2), dim=1))
    return torch.cat(out) - math.log(TRUTH_NODES) - math.log(2 * math.pi * noise**2)


def gaussian(points: Tensor) -> Callable[[Tensor], Tensor]:
    """The log-density, per point, of the maximum-likelihood Gaussian of ``points`` (their
    mean and covariance): what a flow that learnt only a linear map would reach."""
    mean, chol = points.mean(dim=0), torch.linalg.cholesky(torch.cov(points.T, correction=0))
    log_det = 2 * chol.diagonal().log().sum()

    def log_prob(x: Tensor) -> Tensor:
        white = torch.linalg.solve_triangular(chol, (x - mean).T, upper=False)
        out: Tensor = white.pow(2).sum(dim=0) + log_det + x.shape[1] * math.log(2 * math.pi)
        return -0.5 * out

    return log_prob


def flow_field(hidden: int) -> odelayers.DepthSequential:
    """Tutorial 06's field ``f(t, z)``: ``[z, t] -> hidden -> hidden -> 2`` with tanh, no
    normalisation (samples must not interact)."""
    layers = (nn.Linear(3, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
    return odelayers.DepthSequential(odelayers.DepthConcat(), *layers, nn.Linear(hidden, 2))


def adaptive_flow(field: Field, rtol: float) -> odelayers.CNF:
    """The CNF of ``field`` solved by Dopri5 at ``rtol = atol``: the continuous model."""
    controller = odecore.PIDController(rtol=rtol, atol=rtol)
    return odelayers.CNF(field, solver=odecore.Dopri5(), controller=controller)


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
    """Per point ``z0``: the CNF's ``delta = -int tr(df/dz) dt``, and ``log abs det J`` of
    the map ``z0 -> z(1)`` by central differences of step ``eps``; both by RK4 in ``steps``
    steps of a float64 copy of ``field``. The change of variables makes them opposite."""
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


def mass(
    log_prob: Callable[[Tensor], Tensor], samples: Tensor, grid: int, box: float
) -> tuple[float, float, Tensor]:
    """The midpoint sum of the density ``log_prob`` over the ``grid x grid`` cells on
    ``[-box, box]^2``, the fraction of its ``samples`` outside them (the two sum to 1 for a
    normalised density), and the log-density at the cells, ``(grid, grid)``, y along rows."""
    points, h = grid_points(grid, box)
    with torch.no_grad():
        log_density = torch.cat([log_prob(p).detach().cpu() for p in torch.split(points, 8192)])
    on_grid = float(log_density.double().exp().sum()) * h * h
    outside = float((samples.abs() > box).any(dim=1).double().mean())
    return on_grid, outside, log_density.reshape(grid, grid)


@functools.lru_cache(maxsize=8)
def data_points(s: CnfSettings, density: str, seed: int) -> tuple[Tensor, Tensor]:
    """The training and held-out points of ``density`` for ``seed`` (one generator)."""
    generator = torch.Generator().manual_seed(seed * 1000 + DENSITIES.index(density))
    train = sample_density(density, s.n_train, s.noise, generator)
    return train, sample_density(density, s.n_test, s.noise, generator)


def _reading(flow: nn.Module, test: Tensor, rtol: float) -> dict[str, float]:
    """The test NLL and the NFE of the adaptive Dopri5 solve of ``flow``'s field."""
    adaptive = adaptive_flow(cast(odelayers.CNF, flow).vector_field, rtol)
    with torch.no_grad():
        nll = -float(adaptive.log_prob(test.to(next(flow.parameters()).device)).mean())
    return {TEST_NLL.key(): nll, NFE.key(): float(adaptive.nfe)}


def task(setup: Setup[CnfSettings], density: str, seed: int) -> Task:
    """The training of ``density``'s CNF: epochs of ``eval_every`` iterations (the last,
    what is left) of ``batch_size`` points drawn with replacement, each epoch ending with a
    reading of the test NLL and the NFE of the adaptive solve."""
    s = setup.settings
    train, test = data_points(s, density, seed)

    def order(epoch: int, generator: torch.Generator) -> Tensor:
        draws = min(s.eval_every, s.iterations - epoch * s.eval_every) * s.batch_size
        return torch.randint(0, len(train), (draws,), generator=generator)

    def row(epoch: Epoch) -> JsonObject:
        return {
            "iteration": float(min((epoch.index + 1) * s.eval_every, s.iterations)),
            TRAIN_NLL.key(): sum(epoch.losses) / len(epoch.losses),
            **epoch.evaluation,
            "epoch_seconds": epoch.seconds,
        }

    spec = odecore.OdeSpec(solver=odecore.RK4(), n_steps=s.steps)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR
    return Task(
        model=lambda: odelayers.CNF(flow_field(s.hidden), spec=spec), data=(train,),
        loss=lambda flow, batch: -cast(odelayers.CNF, flow).log_prob(batch[0]).mean(),
        optimizer=functools.partial(torch.optim.Adam, lr=s.lr),
        schedule=functools.partial(schedule, T_max=s.iterations, eta_min=s.lr / 100),
        epochs=math.ceil(s.iterations / s.eval_every), batch_size=s.batch_size, seed=seed,
        order=order, row=row, evaluate=lambda flow, epoch: _reading(flow, test, s.rtol),
        settings={"run": f"{density}/cnf", "seed": seed, **dataclasses.asdict(s)},
    )  # fmt: skip


def measure(setup: Setup[CnfSettings], trained: Trained) -> Measurement:
    """The metrics declared above of one trained CNF, and of the Gaussian fitted to its
    training points; the readings of its training (the first, of the initial model
    rebuilt from the seed) as details. Saves what the figure draws (``flow.pt``)."""
    s = setup.settings
    density = trained.run.name.split("/")[0]
    train, test = data_points(s, density, trained.seed)
    model = cast(odelayers.CNF, trained.load())
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(trained.seed)  # as fit builds it
        initial = cast(Task, trained.run.task).model().to(device)
    first = {"iteration": 0.0, TRAIN_NLL.key(): math.nan, **_reading(initial, test, s.rtol)}
    adaptive, fitted = adaptive_flow(model.vector_field, s.rtol), gaussian(train)
    z0 = torch.randn(s.n_samples, 2, generator=torch.Generator().manual_seed(trained.seed + 1))
    with torch.no_grad():
        test_nll_rk4 = -float(model.log_prob(test.to(device)).mean())
        log_p = adaptive.log_prob(test.to(device)).cpu()
        nfe = adaptive.nfe
        diff = fitted(test) - log_p  # per point, for the standard error
        samples = adaptive(z0.to(device))[0].cpu()
        nfe_sampling = adaptive.nfe
    z_logdet = z0[: s.n_logdet].to(device)
    delta, logdet = trace_and_logdet(model.vector_field, z_logdet, s.logdet_steps)
    on_grid, outside, log_density = mass(
        lambda x: adaptive.log_prob(x.to(device)), samples, s.grid, s.box
    )
    torch.save({"log_density": log_density, "samples": samples}, trained.dir / "flow.pt")
    values = {
        TEST_NLL: -float(log_p.mean()),
        TEST_NLL_RK4: test_nll_rk4,
        TRUE_TEST_NLL: -float(true_log_prob(density, test, s.noise).mean()),
        GAUSSIAN_TRAIN_NLL: -float(fitted(train).mean()),
        GAUSSIAN_TEST_NLL: -float(fitted(test).mean()),
        PAIRED_SE: float(diff.std() / math.sqrt(len(diff))),
        TRAIN_NLL: trained.history[-1][TRAIN_NLL.key()],
        NFE_INITIAL: first[NFE.key()],
        NFE: float(nfe),
        NFE_SAMPLING: float(nfe_sampling),
        NFE_TRAINING: 4.0 * s.steps,
        MASS_IN_GRID: on_grid,
        MASS_OUTSIDE: outside,
        MASS: on_grid + outside,
        MASS_ERROR: abs(on_grid + outside - 1.0),
        LOGDET_ERROR: float((delta + logdet).abs().max()),
    }
    details = {"history": [first, *(dict(row) for row in trained.history)]}
    return Measurement({m.key(): v for m, v in values.items()}, details)

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
from ._claims import Claim
from ._metrics import Metric, Stat, Values
from ._result import Result
from ._runner import register_template
from ._tables import Col, Row, Table, by_run
from ._template import Figure, Measurement, Run, Settings, Setup, Template, Trained

DENSITIES: tuple[str, ...] = ("moons", "circles")
"""The target densities, each fitted by its own CNF (the run ``<density>/cnf``)."""

LABELS = {"moons": "two moons", "circles": "two circles"}
RADII = (1.6, 0.8)  # of the two circles, outer and inner
TRUTH_NODES = 4000  # quadrature nodes along the centre curve for the true density

# Thresholds of the claims (the text says why each is what it is).
NATS_BETTER = 0.1  # the CNF's test NLL at least this far below the Gaussian's
GAP_CLOSED = 0.8  # the CNF closes at least this fraction of the Gaussian-to-truth gap
NFE_GROWTH = 1.5  # adaptive NFE of the trained flow over that of the initial flow
MASS_TOL = 0.01  # abs(mass on the grid + mass of the samples outside it - 1)
LOGDET_TOL = 1e-4  # abs(delta + log abs det J) in nats, float64, J by central differences

# What measure records of each CNF, in this order. NLLs are in nats per held-out point,
# of the adaptive solve (Dopri5) unless said otherwise; NFEs are the adaptive solve's.
TEST_NLL = Metric("test_nll", spec=".3f")
TEST_NLL_RK4 = Metric("test_nll_rk4", spec=".3f")  # with the RK4 steps it trained with
TRUE_TEST_NLL = Metric("true_test_nll", spec=".3f")
GAUSSIAN_TRAIN_NLL = Metric("gaussian_train_nll", spec=".3f")
GAUSSIAN_TEST_NLL = Metric("gaussian_test_nll", spec=".3f")
PAIRED_SE = Metric("paired_se", spec=".3f")  # standard error of the CNF's - Gaussian's
TRAIN_NLL = Metric("train_nll", spec=".3f")  # mean batch loss of the last epoch
NFE_INITIAL = Metric("nfe_initial", spec=".0f")  # before training
NFE = Metric("nfe", spec=".0f")
NFE_SAMPLING = Metric("nfe_sampling", spec=".0f")  # pushing the base samples through
NFE_TRAINING = Metric("nfe_training", spec=".0f")  # per RK4 solve in training
MASS_IN_GRID = Metric("mass_in_grid", spec=".4f")
MASS_OUTSIDE = Metric("mass_outside", spec=".4f")  # the flow's samples outside the grid
MASS = Metric("mass", spec=".4f")
MASS_ERROR = Metric("mass_error", spec=".1e")
LOGDET_ERROR = Metric("logdet_error", spec=".1e")
TRAIN_SECONDS = Metric("train_seconds", spec=".0f", unit=" s")

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
        for name in ("iterations", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be a positive integer, got {getattr(self, name)}.")


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
    """
    u = torch.rand(n, generator=generator)
    return _centres(density, u) + noise * torch.randn(n, 2, generator=generator)


def true_log_prob(density: str, x: Tensor, noise: float, nodes: int = TRUTH_NODES) -> Tensor:
    """The exact log-density of :func:`sample_density` at ``x``, in float64.

    The density is the mean over the curve parameter ``u`` of ``N(x; centre(u),
    noise^2 I)``, computed by the midpoint rule over ``nodes`` values of ``u`` (the
    nodes lie far closer than ``noise`` along the curve, so the sum is exact to many
    digits).
    """
    u = (torch.arange(nodes, dtype=_F64) + 0.5) / nodes
    centres = _centres(density, u)
    out = []
    for chunk in torch.split(x.to(_F64), 1024):
        sq = (chunk[:, None, :] - centres[None]).pow(2).sum(-1)
        out.append(torch.logsumexp(-sq / (2 * noise**2), dim=1))
    return torch.cat(out) - math.log(nodes) - math.log(2 * math.pi * noise**2)


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
    :func:`trace_and_logdet`): zero up to the solves' and the differences' errors."""
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
    """
    points, h = grid_points(grid, box)
    with torch.no_grad():
        log_density = torch.cat([log_prob(p).detach().cpu() for p in torch.split(points, 8192)])
    on_grid = float(log_density.double().exp().sum()) * h * h
    outside = float((samples.abs() > box).any(dim=1).double().mean())
    return on_grid, outside, log_density.reshape(grid, grid)


def runs(setup: Setup[CnfSettings], seed: int) -> list[Run]:
    """Per density, a CNF on that density's data of ``seed`` (:func:`measure` fits the
    Gaussian it is compared with, in closed form)."""
    return [Run(f"{density}/cnf", task=_task(setup, density, seed)) for density in DENSITIES]


def _reading(flow: nn.Module, test: Tensor, rtol: float) -> dict[str, float]:
    """The test NLL and the NFE of the adaptive Dopri5 solve of ``flow``'s field."""
    adaptive = adaptive_flow(cast(odelayers.CNF, flow).vector_field, rtol)
    with torch.no_grad():
        nll = -float(adaptive.log_prob(test.to(next(flow.parameters()).device)).mean())
    return {TEST_NLL.key(): nll, NFE.key(): float(adaptive.nfe)}


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
            TRAIN_NLL.key(): sum(epoch.losses) / len(epoch.losses),
            **epoch.evaluation,
            "epoch_seconds": epoch.seconds,
        }

    def after_epoch(rows: list[dict[str, Any]]) -> None:
        r = rows[-1]
        setup.log(
            f"[{density}] iteration {r['iteration']:.0f}/{s.iterations}: train NLL "
            f"{r[TRAIN_NLL.key()]:.3f}, test NLL {r[TEST_NLL.key()]:.3f}, NFE {r[NFE.key()]:g}"
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
    """The metrics declared above of one trained CNF, and of the Gaussian fitted to its
    training points; the readings of its training (the first, of the initial model
    rebuilt from the seed) as details. Saves what the figure draws (``flow.pt``)."""
    s = setup.settings
    density = trained.run.name.split("/")[0]
    train, test = _data(s, density, trained.seed)
    model = cast(odelayers.CNF, trained.load())
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(trained.seed)  # as fit builds it
        initial = cast(Task, trained.run.task).model().to(device)
    history = [
        {"iteration": 0.0, TRAIN_NLL.key(): math.nan, **_reading(initial, test, s.rtol)},
        *trained.history,
    ]
    adaptive = adaptive_flow(model.vector_field, s.rtol)
    fitted = gaussian(train)
    z0 = torch.randn(s.n_samples, 2, generator=torch.Generator().manual_seed(trained.seed + 1))
    with torch.no_grad():
        test_nll_rk4 = -float(model.log_prob(test.to(device)).mean())
        log_p = adaptive.log_prob(test.to(device)).cpu()
        nfe = adaptive.nfe
        diff = fitted(test) - log_p  # per point, for the standard error
        samples = adaptive(z0.to(device))[0].cpu()
        nfe_sampling = adaptive.nfe
    on_grid, outside, log_density = mass(
        lambda x: adaptive.log_prob(x.to(device)), samples, s.grid, s.box
    )
    trained.dir.mkdir(parents=True, exist_ok=True)
    torch.save({"log_density": log_density, "samples": samples}, trained.dir / "flow.pt")
    values = {
        TEST_NLL: -float(log_p.mean()),
        TEST_NLL_RK4: test_nll_rk4,
        TRUE_TEST_NLL: -float(true_log_prob(density, test, s.noise).mean()),
        GAUSSIAN_TRAIN_NLL: -float(fitted(train).mean()),
        GAUSSIAN_TEST_NLL: -float(fitted(test).mean()),
        PAIRED_SE: float(diff.std() / math.sqrt(len(diff))),
        TRAIN_NLL: history[-1][TRAIN_NLL.key()],
        NFE_INITIAL: history[0][NFE.key()],
        NFE: float(nfe),
        NFE_SAMPLING: float(nfe_sampling),
        NFE_TRAINING: 4.0 * s.steps,
        MASS_IN_GRID: on_grid,
        MASS_OUTSIDE: outside,
        MASS: on_grid + outside,
        MASS_ERROR: abs(on_grid + outside - 1.0),
        LOGDET_ERROR: logdet_error(model.vector_field, z0[: s.n_logdet].to(device), s.logdet_steps),
        TRAIN_SECONDS: trained.seconds,
    }
    details = {"history": [dict(row) for row in history]}
    return Measurement({m.key(): v for m, v in values.items()}, details)


def gap_closed(v: Values, run: str) -> float:
    """The fraction of the test-NLL gap from the Gaussian to the true density that the
    CNF of ``run`` closes: 1 matches the truth, 0 is no better than the Gaussian.

    Example:
        >>> v = Values({"moons/cnf": {"test_nll": 1.9, "true_test_nll": 1.8,
        ...                           "gaussian_test_nll": 2.8}})
        >>> round(gap_closed(v, "moons/cnf"), 3)
        0.9
    """
    gaussian_nll = v[GAUSSIAN_TEST_NLL.of(run)]
    return (gaussian_nll - v[TEST_NLL.of(run)]) / (gaussian_nll - v[TRUE_TEST_NLL.of(run)])


def _fits(v: Values, run: str) -> bool:
    """Whether the CNF of ``run`` closes at least :data:`GAP_CLOSED` of the gap."""
    return gap_closed(v, run) >= GAP_CLOSED


def _worst(metric: Metric) -> Callable[[Values], float]:
    """The largest value of ``metric`` over the CNFs."""
    return lambda v: max(v[metric.of(f"{density}/cnf")] for density in DENSITIES)


def claims(setup: Setup[CnfSettings]) -> list[Claim]:
    """Per density: the CNF beats the Gaussian, closes most of the gap to the truth, and
    its adaptive NFE grows in training. Over both: the two checks of the code. Their
    details are in the text."""
    out: list[Claim] = []
    for density, label in LABELS.items():
        cnf = f"{density}/cnf"
        out += [
            Claim.difference(
                f"{density}_beats_gaussian",
                f"Sec. 4: on {label} the CNF's test NLL beats the best Gaussian's",
                "figures only, no number", TEST_NLL.of(cnf), GAUSSIAN_TEST_NLL.of(cnf),
                below=-NATS_BETTER, kind="paper", spec="+.3f", unit=" nats",
            ),
            Claim(
                f"{density}_fits_density",
                f"Fig. 5: the CNF fits {label}: most of the NLL gap to the truth closed",
                "figures only, no number", ours=functools.partial(gap_closed, run=cnf),
                holds=functools.partial(_fits, run=cnf), spec=".0f", scale=100, unit="%",
                kind="paper",
            ),
            Claim.ratio(
                f"{density}_nfe_grows", f"Fig. 3d: the NFE grows during training ({label})",
                "stated, no number", NFE.of(cnf), NFE_INITIAL.of(cnf), above=NFE_GROWTH,
                kind="paper",
            ),
        ]  # fmt: skip
    mass_error, logdet = _worst(MASS_ERROR), _worst(LOGDET_ERROR)
    return [
        *out,
        Claim(
            "density_integrates_to_one",
            "the CNF's density integrates to one (change of variables)", "exact identity",
            ours=mass_error, holds=lambda v: mass_error(v) < MASS_TOL, spec=".1e", kind="check",
        ),
        Claim(
            "trace_matches_logdet",
            "the exact trace integral equals log abs det J by finite differences",
            "exact identity", ours=logdet, holds=lambda v: logdet(v) < LOGDET_TOL, spec=".1e",
            unit=" nats", kind="check",
        ),
    ]  # fmt: skip


MODELS = ("CNF", "Gaussian", "true density")
"""The rows of each density in the table of NLLs."""

Cell = Metric | str | Callable[[Result[Any], str], str]
"""A cell of the table of NLLs: a metric of the density's CNF run, a text, or
``cell(result, run)``."""


def _by_model(header: str, cnf: Cell, gaussian: Cell = "–", truth: Cell = "–") -> Col:
    """A column of the table of NLLs, whose cell depends on the row's model."""
    cells = dict(zip(MODELS, (cnf, gaussian, truth)))

    def cell(result: Result[Any], row: Row) -> str:
        this = cells[row.text["model"]]
        if isinstance(this, Metric):
            return result.cell(this.of(row.run))
        return this if isinstance(this, str) else this(result, row.run)

    return Col(header, cell=cell)


def _gap_cell(result: Result[Any], run: str) -> str:
    """The gap the CNF of ``run`` closes, over the seeds."""
    seeds = [
        Values({run: {m: st.values[k] for m, st in result.metrics[run].items()}})
        for k in range(len(result.setup.seeds))
    ]
    return Stat.of([gap_closed(v, run) for v in seeds]).cell(".0f", 100, "%")


def _nfe_cell(result: Result[Any], run: str) -> str:
    """The NFE of the CNF of ``run`` before and after training."""
    return f"{result.cell(NFE_INITIAL.of(run))} → {result.cell(NFE.of(run))}"


def tables(setup: Setup[CnfSettings]) -> dict[str, Table]:
    """The table of NLLs and NFEs (per density: the CNF, the Gaussian, the true density),
    and that of the checks' numbers."""
    runs = {f"{density}/cnf": label for density, label in LABELS.items()}
    rows = [Row(label, run, text={"model": m}) for run, label in runs.items() for m in MODELS]
    nll = [
        Col("model"),
        _by_model("train NLL", TRAIN_NLL, GAUSSIAN_TRAIN_NLL),
        _by_model("test NLL (Dopri5)", TEST_NLL, GAUSSIAN_TEST_NLL, TRUE_TEST_NLL),
        _by_model("test NLL (RK4, as trained)", TEST_NLL_RK4),
        _by_model("gap closed", _gap_cell, "0%", "100%"),
        _by_model("NFE before → after training", _nfe_cell),
    ]
    checks = [
        Col("mass on the grid", MASS_IN_GRID),
        Col("mass of samples outside it", MASS_OUTSIDE),
        Col("total", MASS),
        Col("max log-det error (nats)", LOGDET_ERROR),
    ]
    return {"nll": Table("density", rows, nll), "checks": by_run("density", runs, checks)}


def words(result: Result[CnfSettings]) -> dict[str, object]:
    """What the text reads beyond the settings: the claims' thresholds, the true
    density's nodes, RK4's evaluations per training solve, the paired standard errors."""
    return {
        "nats_better": NATS_BETTER, "gap_closed": GAP_CLOSED, "nfe_growth": NFE_GROWTH,
        "mass_tol": MASS_TOL, "logdet_tol": LOGDET_TOL, "truth_nodes": TRUTH_NODES,
        "rk4_evaluations": 4 * result.settings.steps,
        "paired_se": {d: result.cell(PAIRED_SE.of(f"{d}/cnf")) for d in DENSITIES},
    }  # fmt: skip


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
            axes[0, k].plot(its, [r[TEST_NLL.key()] for r in rows], color=f"C{i}", lw=1)
            axes[1, k].plot(its, [r[NFE.key()] for r in rows], color=f"C{i}", lw=1)
        for metric, name in ((GAUSSIAN_TEST_NLL, "Gaussian"), (TRUE_TEST_NLL, "true density")):
            value = result.stat(metric.of(cnf)).values[0]
            if value is not None:
                axes[0, k].axhline(value, color="0.4", ls="--", lw=1)
                axes[0, k].text(0, value, f" {name}", va="bottom", fontsize=8, color="0.3")
        axes[0, k].set(title=LABELS[density], ylabel="held-out NLL (nats)")
        axes[1, k].set(xlabel="iteration", ylabel="NFE (Dopri5)")
        for ax in axes[:, k]:
            ax.grid(alpha=0.3)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


register_template(
    Template(
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
        text="chen-cnf.md",
        tables=tables,
        words=words,
        figures=[
            Figure("densities.png", _plot_densities),
            Figure("training.png", _plot_training),
        ],
    )
)

"""``odebench run pendulum``: ODE-Nets of the nonlinear pendulum at other time steps.

Queiruga et al. (2020), Sec. 3 and Figs. 3-4: a small MLP vector field trained as the one-step
map of a fixed-step scheme, then rolled out at other steps. docs/odebench/experiments/pendulum.md
says what it trains and why; text/pendulum.md is its report.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence

import torch
from contnet import fixed_solver
from torch import Tensor, nn
from torch.optim.lr_scheduler import CosineAnnealingLR

from .._figures import Lines, Mark, Point, Style
from .._io import JsonObject
from .._metrics import Metric
from .._tables import Col, Table, by_run
from ..data import pendulum as pendulum_data
from ..training import Task
from ._claims import Claim
from ._result import Result
from ._run_files import first_model
from ._runner import register_template
from ._template import Measurement, Plot, Run, Settings, Setup, Template, Trained

LABELS = {"euler": "Euler (ResNet)", "midpoint": "Midpoint", "rk4": "RK4"}
SCHEMES = tuple(LABELS)  # names of odecore.FIXED_METHODS, one model each
DT_FACTORS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0)  # the evaluation steps dt' over dt (default)
NO_NUMBER = "stated, no number"  # what the paper's text gives for each claim

# What measure records of each model. An error is global (see global_error), at dt' = dt
# times the coordinate ``dt``; a field's error is that of its fine RK4 rollout.
TRAIN_MSE = Metric("train_mse", spec=".3g")  # of the last epoch
ERROR = Metric("error", over=("dt",), spec=".3g", key_format="{name}@{dt}dt")
ERROR_VS_OWN_LIMIT = dataclasses.replace(ERROR, name="error_vs_own_limit")  # vs the fine rollout
ERROR_FINE_RK4 = Metric("error_fine_rk4", spec=".3g")
SLOPE = Metric("slope", spec=".2f")  # of log error against log dt', over every dt'
SLOPE_REFINE = Metric("slope_refine", spec=".2f")  # over dt' <= dt
SLOPE_VS_OWN_LIMIT = Metric("slope_vs_own_limit", spec=".2f")

Field = Callable[[Tensor], Tensor]


@dataclasses.dataclass(frozen=True)
class PendulumSettings(Settings):
    """The sizes of one mode (the docs page tables them). An epoch is a pass over every
    consecutive pair of the training trajectories; ``lr`` is cosine-annealed to ``lr / 100``."""

    epochs: int
    batch_size: int  # pairs per Adam step
    lr: float
    dt: float  # the training time step, the sample spacing of the data
    n_train: int  # training trajectories
    steps: int  # samples per training trajectory, minus one
    noise: float  # std of the Gaussian noise on the training states
    hidden: int  # width of the MLP's two hidden layers
    n_test: int  # held-out clean initial states
    horizon: float  # the length of the evaluation rollouts, a multiple of max(dt_factors) dt
    dt_factors: tuple[float, ...] = DT_FACTORS  # increasing, with 1.0, each dividing the last
    fine_factor: float = 1.0 / 32.0  # the step of the fine RK4 rollouts over dt

    def __post_init__(self) -> None:
        super().__post_init__()
        factors = self.dt_factors
        # measure reads every rollout, and the truth, at the multiples of the largest step.
        if (
            1.0 not in factors
            or list(factors) != sorted(factors)
            or any(factors[-1] / f % 1 for f in factors)
        ):
            raise ValueError(
                f"`dt_factors` must increase, hold 1.0 and divide the largest, got {factors}."
            )


MODES = {
    "quick": PendulumSettings(
        dt=0.1, n_train=32, steps=40, noise=0.01, hidden=50, epochs=500, batch_size=128,
        lr=5e-3, n_test=16, horizon=2.0,
    ),
    "standard": (STANDARD := PendulumSettings(
        seeds=3, dt=0.1, n_train=256, steps=100, noise=0.01, hidden=50, epochs=125,
        batch_size=128, lr=1e-3, n_test=64, horizon=2.0,
    )),
    "full": dataclasses.replace(STANDARD, seeds=5),  # the same runs, over more seeds
}  # fmt: skip


def mlp_field(hidden: int) -> nn.Sequential:
    """The learned vector field ``f(y)``: float64, 2 -> hidden -> hidden -> 2 with tanh."""
    layers = (nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
    return nn.Sequential(*layers, nn.Linear(hidden, 2)).to(torch.float64)


def step(field: Field, y: Tensor, dt: float, scheme: str) -> Tensor:
    """One step of ``scheme`` from ``y``, as a ContinuousNet steps it (``ValueError`` for a
    name that is not a fixed-step method of :data:`odecore.FIXED_METHODS`)."""
    solver = fixed_solver(scheme)[1]

    def f(t: float, z: Tensor) -> Tensor:
        return field(z)

    return solver.step(f, 0.0, dt, y, solver.init(f, 0.0, y)).y1


@torch.no_grad()
def rollout(field: Field, y0: Tensor, dt: float, horizon: float, scheme: str) -> Tensor:
    """The states ``(N, n + 1, 2)`` of ``n = round(horizon / dt)`` steps of ``scheme`` from
    ``y0``, without gradients."""
    ys = [y0]
    for _ in range(round(horizon / dt)):
        ys.append(step(field, ys[-1], dt, scheme))
    return torch.stack(ys, dim=1)


def fit_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of ``log(ys)`` against ``log(xs)``, leaving out the points
    that are not positive and finite; NaN with fewer than two.

    Example:
        >>> fit_slope([1.0, 2.0, 4.0], [3.0, 12.0, 48.0])
        2.0
    """
    kept = [(x, y) for x, y in zip(xs, ys) if all(0 < v < math.inf for v in (x, y))]
    pts = [(math.log(x), math.log(y)) for x, y in kept]
    if len(pts) < 2:
        return math.nan
    mx, my = (sum(c) / len(pts) for c in zip(*pts))
    den = sum((a - mx) ** 2 for a, _ in pts)
    return sum((a - mx) * (b - my) for a, b in pts) / den if den > 0 else math.nan


def global_error(ys: Tensor, truth: Tensor) -> float:
    """Mean over trajectories of the largest Euclidean state error over the samples
    of ``ys`` and ``truth``, both ``(N, T, 2)`` at the same times."""
    return float((ys - truth).norm(dim=-1).amax(dim=1).mean())


@functools.lru_cache(maxsize=8)
def _data(s: PendulumSettings, seed: int) -> tuple[tuple[Tensor, Tensor], Tensor, Tensor]:
    """Training pairs of noisy states, and the held-out initial states with their truth
    every ``dt * min(dt_factors)``; made once per seed for the three models."""
    gen = torch.Generator().manual_seed(seed)
    states = pendulum_data(
        s.n_train, dt=s.dt, steps=s.steps, noise=s.noise, dtype=torch.float64, generator=gen
    ).inputs
    h = s.dt * min(s.dt_factors)
    gen = torch.Generator().manual_seed(seed + 10_000)
    truth = pendulum_data(
        s.n_test, dt=h, steps=round(s.horizon / h), dtype=torch.float64, generator=gen
    ).targets
    return (states[:, :-1].reshape(-1, 2), states[:, 1:].reshape(-1, 2)), truth[:, 0], truth


def runs(setup: Setup[PendulumSettings], seed: int) -> list[Run]:
    """One model per scheme, on the data of ``seed``; the k-th initialises and shuffles
    with ``seed + k``. Fit ``f`` so that ``step(f, x, dt, scheme) ~ y``: Adam,
    cosine-annealed per batch, the last batch kept; the tiny float64 model trains on the
    CPU, whatever ``--device``."""
    s = setup.settings
    (x, y), _, _ = _data(s, seed)

    def task(scheme: str, k: int) -> Task:
        def log_progress(rows: list[JsonObject]) -> None:  # every fifth of the epochs
            if len(rows) == s.epochs or len(rows) % max(1, s.epochs // 5) == 0:
                mse = rows[-1][TRAIN_MSE.key()]
                setup.log(f"[{scheme}] epoch {len(rows)}/{s.epochs}: train MSE {mse:.3e}")

        return Task(
            model=functools.partial(mlp_field, s.hidden), data=(x, y),
            loss=lambda f, batch: ((step(f, batch[0], s.dt, scheme) - batch[1]) ** 2).mean(),
            optimizer=functools.partial(torch.optim.Adam, lr=s.lr), epochs=s.epochs,
            batch_size=s.batch_size, seed=seed + k, drop_last=False,
            schedule=lambda o: CosineAnnealingLR(
                o, T_max=s.epochs * math.ceil(len(x) / s.batch_size), eta_min=s.lr / 100
            ),
            row=lambda e: {"epoch": e.index + 1.0, TRAIN_MSE.key(): e.loss,
                           "epoch_seconds": e.seconds},
            after_epoch=log_progress, device="cpu",
            settings={"run": scheme, "seed": seed + k, **dataclasses.asdict(s)},
        )  # fmt: skip

    return [Run(scheme, task=task(scheme, k)) for k, scheme in enumerate(SCHEMES)]


def measure(setup: Setup[PendulumSettings], trained: Trained) -> Measurement:
    """The metrics declared above of one trained model: its errors with its scheme at
    each ``dt'``, read every ``dt * max(dt_factors)`` (which every ``dt'`` hits), against
    the truth and against its own limit (a fine RK4 rollout, whose error is the field's),
    and the slopes."""
    s, scheme = setup.settings, trained.run.name
    model = trained.load()
    _, y0, truth = _data(s, trained.seed)
    coarsest = max(s.dt_factors)

    def sampled(factor: float, scheme_: str) -> Tensor:
        ys = rollout(model, y0, s.dt * factor, s.horizon, scheme_)
        return ys[:, :: round(coarsest / factor)]

    common = truth[:, :: round(coarsest / min(s.dt_factors))]
    fine = sampled(s.fine_factor, "rk4")
    rollouts = [sampled(factor, scheme) for factor in s.dt_factors]
    errors = [global_error(ys, common) for ys in rollouts]
    own = [global_error(ys, fine) for ys in rollouts]
    dts = [s.dt * f for f in s.dt_factors]
    refine = s.dt_factors.index(1.0) + 1
    metrics = {
        TRAIN_MSE.key(): trained.history[-1][TRAIN_MSE.key()],
        **{ERROR.key(dt=f): e for f, e in zip(s.dt_factors, errors)},
        ERROR_FINE_RK4.key(): global_error(fine, common),
        **{ERROR_VS_OWN_LIMIT.key(dt=f): e for f, e in zip(s.dt_factors, own)},
        SLOPE.key(): fit_slope(dts, errors),
        SLOPE_REFINE.key(): fit_slope(dts[:refine], errors[:refine]),
        SLOPE_VS_OWN_LIMIT.key(): fit_slope(dts, own),
    }
    return Measurement(metrics)


def claims(setup: Setup[PendulumSettings]) -> list[Claim]:
    """The paper's claims (Sec. 3), each a ratio of two of our errors against a bound or
    a paired difference, and the check that the RK4 rollouts reach their own limit.
    Their details are in the text."""
    factors = setup.settings.dt_factors
    fine, coarse = min(factors), max(factors)
    euler_field, rk4_field = ERROR_FINE_RK4.of("euler"), ERROR_FINE_RK4.of("rk4")
    euler_fine, euler_dt = ERROR.of("euler", dt=fine), ERROR.of("euler", dt=1.0)
    rk4_fine = ERROR.of("rk4", dt=fine)
    return [
        Claim.at_least("euler_error_flat", "Sec. 3: the Euler (ResNet) model's error does not "
                       "shrink as dt' is refined", NO_NUMBER,
                       lambda v: v[euler_fine] / v[euler_dt], 0.5, unit="×", kind="paper"),
        Claim.ratio("euler_accurate_at_training_dt", "Sec. 3: at dt the ResNet is much more "
                    "accurate than a discretisation of its own field", NO_NUMBER, euler_dt,
                    euler_field, below=1.0, kind="paper", spec=".3g"),
        Claim.ratio("euler_field_worse_than_rk4", "Sec. 3: the ResNet overfits to the sample "
                    "rate: its f is not the vector field", NO_NUMBER, euler_field, rk4_field,
                    above=2.0, kind="paper", spec=".3g"),
        Claim.ratio("rk4_error_shrinks", "Sec. 3: the RK4 model is a discretisation of an ODE: "
                    "its error shrinks with dt'", NO_NUMBER, rk4_fine,
                    ERROR.of("rk4", dt=coarse), below=0.5, kind="paper", spec=".3g"),
        Claim.ratio("rk4_reaches_model_error", "Sec. 3: the RK4 model's error shrinks down to "
                    "the model error", NO_NUMBER, rk4_fine, rk4_field, below=2.0, kind="check",
                    spec=".3g"),
        Claim.difference("rk4_beats_euler_at_finest", "Sec. 3: higher-order schemes have much "
                         "lower discretisation error", NO_NUMBER, rk4_fine, euler_fine,
                         below=0.0, kind="paper", spec="+.3g"),
    ]  # fmt: skip


def tables(setup: Setup[PendulumSettings]) -> dict[str, Table]:
    """The models' errors at each ``dt'`` and their slopes (the paper gives no numbers)."""
    columns = [
        Col("train MSE", TRAIN_MSE),
        *(Col(f"dt' = {f:g} dt", ERROR, {"dt": f}) for f in setup.settings.dt_factors),
        Col("field error (fine RK4)", ERROR_FINE_RK4),
        Col("slope (all dt')", SLOPE),
        Col("slope (dt' <= dt)", SLOPE_REFINE),
        Col("slope against own limit", SLOPE_VS_OWN_LIMIT),
    ]
    return {"errors": by_run("model", LABELS, columns)}


def _error_panels(result: Result[PendulumSettings]) -> list[Lines]:
    """Global error against dt' (log-log), one line per model, its field's error dashed."""
    s = result.settings
    dts = [s.dt * f for f in s.dt_factors]
    series: dict[str, list[Point]] = {
        LABELS[scheme]: [
            (dt, result.stat(ERROR.of(scheme, dt=f)).mean) for dt, f in zip(dts, s.dt_factors)
        ]
        for scheme in SCHEMES
    }
    fields = [result.stat(ERROR_FINE_RK4.of(scheme)).mean for scheme in SCHEMES]
    marks = [
        Mark(math.nan if e is None else e, fmt="--", color=f"C{i}") for i, e in enumerate(fields)
    ]
    return [Lines("ODE-Nets of the pendulum at other time steps", "evaluation step dt'",
                  f"global error over t in [0, {s.horizon:g}]", series, xscale="log", yscale="log",
                  xticks=dts, marks=[Mark(s.dt, "x", "training dt"), *marks],
                  legend="solid: same scheme; dashed: fine RK4")]  # fmt: skip


def _phase_panels(result: Result[PendulumSettings]) -> list[Lines]:
    """Phase portraits of the first seed: each model's rollouts of the first three held-out
    trajectories at dt (solid) and at the finest dt' (dashed), and the truth (grey)."""
    s, setup = result.settings, result.setup
    _, y0, truth = _data(s, setup.seeds[0])
    panels = []
    for scheme in SCHEMES:
        field = first_model(setup, scheme, functools.partial(mlp_field, s.hidden))
        curves = {f"dt' = {s.dt * f:g}": (fmt, rollout(field, y0[:3], s.dt * f, s.horizon, scheme))
                  for f, fmt in ((1.0, "-"), (min(s.dt_factors), "--"))}  # fmt: skip
        curves["exact"] = ("-", truth[:3])  # drawn last, on top
        series: dict[str, list[Point]] = {}
        styles = {}
        for label, (fmt, ys) in curves.items():
            for i, path in enumerate(ys.tolist()):  # the legend names each kind once
                name = label if i == 0 else f"_{label} {i}"
                series[name] = [(theta, omega) for theta, omega in path]
                styles[name] = Style("-", "0.5", 0.5) if label == "exact" else Style(fmt, f"C{i}")
        ylabel = "omega (rad/s)" if scheme == SCHEMES[0] else ""
        panels.append(Lines(f"{LABELS[scheme]} model", "theta (rad)", ylabel, series, styles))
    return panels


def _at(factor: float) -> str:
    """A step as a multiple of the training step, in words: dt/8, dt, 4 dt."""
    if factor == 1.0:
        return "dt"
    return f"dt/{1 / factor:g}" if factor < 1.0 else f"{factor:g} dt"


def words(result: Result[PendulumSettings]) -> dict[str, object]:
    """What the text reads beyond the settings: the steps in words."""
    s = result.settings
    fine, coarse = min(s.dt_factors), max(s.dt_factors)
    return {
        "at_fine": _at(fine), "at_coarse": _at(coarse), "at_field": _at(s.fine_factor),
        "every": f"{_at(coarse)}, {_at(2 * coarse)}",
    }  # fmt: skip


register_template(
    Template(
        name="pendulum", title="ODE-Nets of the nonlinear pendulum at other time steps",
        description="Euler (ResNet), Midpoint and RK4 ODE-Nets of the nonlinear pendulum "
        "evaluated at other time steps: global error against dt' (Queiruga et al. 2020, Sec. 3)",
        data=lambda setup: f"pendulum ({setup.settings.n_train} noisy trajectories of "
        f"{setup.settings.steps} steps / {setup.settings.n_test} clean test states)",
        modes=MODES, one_thread_modes=tuple(MODES),  # the model is tiny
        runs=runs, measure=measure, claims=claims, tables=tables, words=words,
        figures=[
            Plot("error_vs_dt.png", _error_panels, size=(6.4, 4.4), dpi=100),
            Plot("phase.png", _phase_panels, size=(13 / 3, 4.2), dpi=100, sharey=True),
        ],
    )
)  # fmt: skip

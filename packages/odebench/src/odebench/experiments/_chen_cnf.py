"""``odebench run chen-cnf``: continuous normalizing flows fitted to two 2-D densities
against the best Gaussian and the true density, with two checks of the trace code (Chen
et al. 2018, Sec. 4, Figs. 4-5; docs/odebench/experiments/chen-cnf.md says what it runs and
why). The data, the flow, its training and its measurement are in ``_chen_cnf_flow``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from .._figures import Lines, Mark, Style
from .._io import pyplot, save_png
from . import _chen_cnf_flow as flow
from ._claims import Claim
from ._metrics import Metric, Values
from ._result import Result
from ._runner import register_template
from ._tables import Col, Row, Table, by_run
from ._template import Figure, Plot, Run, Settings, Setup, Template

LABELS = {"moons": "two moons", "circles": "two circles"}

# Thresholds of the claims (the text says why each is what it is).
NATS_BETTER = 0.1  # the CNF's test NLL at least this far below the Gaussian's
GAP_CLOSED = 0.8  # the CNF closes at least this fraction of the Gaussian-to-truth gap
NFE_GROWTH = 1.5  # adaptive NFE of the trained flow over that of the initial flow
MASS_TOL = 0.01  # abs(mass on the grid + mass of the samples outside it - 1)
LOGDET_TOL = 1e-4  # abs(delta + log abs det J) in nats, float64, J by central differences


@dataclass(frozen=True, kw_only=True)
class CnfSettings(Settings):
    """The sizes of one mode (the docs page tables them); a default is every mode's. Adam
    steps of points drawn with replacement, ``lr`` cosine-annealed to ``lr / 100``."""

    n_train: int  # training points per density, then
    n_test: int  # held-out points, from one generator
    noise: float = 0.15  # std of the Gaussian noise around the curve
    hidden: int  # the field's width
    iterations: int  # Adam steps (--epochs)
    batch_size: int
    lr: float = 5e-3
    steps: int  # RK4 steps of the training solves
    rtol: float = 1e-5  # rtol = atol of Dopri5, the evaluation's solver
    eval_every: int  # iterations between two readings of the test NLL and NFE
    grid: int  # grid x grid cells on [-box, box]^2 for the mass check and the figure
    box: float = 4.0
    n_samples: int  # flow samples for the mass check and the figure
    n_logdet: int = 8  # base points of the log-det check
    logdet_steps: int = 128  # its float64 RK4 steps


MODES = {
    "quick": CnfSettings(
        n_train=256, n_test=128, hidden=16, iterations=20, batch_size=64, steps=4,
        eval_every=10, grid=31, n_samples=512, n_logdet=4, logdet_steps=32,
    ),
    "standard": CnfSettings(
        seeds=3, n_train=8192, n_test=2048, hidden=64, iterations=1500, batch_size=256,
        steps=8, eval_every=100, grid=161, n_samples=4096,
    ),
    "full": CnfSettings(
        seeds=5, n_train=8192, n_test=2048, hidden=64, iterations=10_000, batch_size=512,
        steps=8, eval_every=500, grid=161, n_samples=4096,
    ),
}  # fmt: skip


def runs(setup: Setup[CnfSettings], seed: int) -> list[Run]:
    """Per density, a CNF on that density's data of ``seed`` (:func:`measure` fits the
    Gaussian it is compared with, in closed form)."""
    return [
        Run(f"{density}/cnf", task=flow.task(setup, density, seed)) for density in flow.DENSITIES
    ]


def gap_closed(v: Values, run: str) -> float:
    """The fraction of the test-NLL gap from the Gaussian to the true density that the
    CNF of ``run`` closes: 1 matches the truth, 0 is no better than the Gaussian."""
    gaussian_nll = v[flow.GAUSSIAN_TEST_NLL.of(run)]
    return (gaussian_nll - v[flow.TEST_NLL.of(run)]) / (
        gaussian_nll - v[flow.TRUE_TEST_NLL.of(run)]
    )


def _worst(metric: Metric) -> Callable[[Values], float]:
    """The largest value of ``metric`` over the CNFs."""
    return lambda v: max(v[metric.of(f"{density}/cnf")] for density in flow.DENSITIES)


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
                "figures only, no number", flow.TEST_NLL.of(cnf), flow.GAUSSIAN_TEST_NLL.of(cnf),
                below=-NATS_BETTER, kind="paper", spec="+.3f", unit=" nats",
            ),
            Claim.at_least(
                f"{density}_fits_density",
                f"Fig. 5: the CNF fits {label}: most of the NLL gap to the truth closed",
                "figures only, no number", functools.partial(gap_closed, run=cnf), GAP_CLOSED,
                spec=".0f", scale=100, unit="%", kind="paper",
            ),
            Claim.ratio(
                f"{density}_nfe_grows", f"Fig. 3d: the NFE grows during training ({label})",
                "stated, no number", flow.NFE.of(cnf), flow.NFE_INITIAL.of(cnf), above=NFE_GROWTH,
                kind="paper",
            ),
        ]  # fmt: skip
    return [
        *out,
        Claim.at_most(
            "density_integrates_to_one",
            "the CNF's density integrates to one (change of variables)", "exact identity",
            _worst(flow.MASS_ERROR), MASS_TOL, strict=True, spec=".1e", kind="check",
        ),
        Claim.at_most(
            "trace_matches_logdet",
            "the exact trace integral equals log abs det J by finite differences",
            "exact identity", _worst(flow.LOGDET_ERROR), LOGDET_TOL, strict=True, spec=".1e",
            unit=" nats", kind="check",
        ),
    ]  # fmt: skip


MODELS = ("CNF", "Gaussian", "true density")  # the rows of each density in the table of NLLs


def _by_model(header: str, *cells: Col | Metric | str) -> Col:
    """A column of the table of NLLs whose cell is that of the row's model (the CNF, the
    Gaussian, the true density; "–" after the cells given): a column, a metric of the
    density's CNF run, or a text."""
    by_model = {
        m: Col("", text=c) if isinstance(c, str) else Col.joined("", c)
        for m, c in zip(MODELS, (*cells, "–", "–"))
    }
    return Col(header, cell=lambda result, row: by_model[row.text["model"]].render(result, row))


def tables(setup: Setup[CnfSettings]) -> dict[str, Table]:
    """The table of NLLs and NFEs (per density: the CNF, the Gaussian, the true density),
    and that of the checks' numbers."""
    runs = {f"{density}/cnf": label for density, label in LABELS.items()}
    rows = [Row(label, run, text={"model": m}) for run, label in runs.items() for m in MODELS]
    nll = [
        Col("model"),
        _by_model("train NLL", flow.TRAIN_NLL, flow.GAUSSIAN_TRAIN_NLL),
        _by_model("test NLL (Dopri5)", flow.TEST_NLL, flow.GAUSSIAN_TEST_NLL, flow.TRUE_TEST_NLL),
        _by_model("test NLL (RK4, as trained)", flow.TEST_NLL_RK4),
        _by_model(
            "gap closed",
            Col.per_seed("", lambda v, row: gap_closed(v, row.run), ".0f", 100, "%"),
            "0%",
            "100%",
        ),
        _by_model(
            "NFE before → after training", Col.joined("", flow.NFE_INITIAL, flow.NFE, sep=" → ")
        ),
    ]
    checks = [
        Col("mass on the grid", flow.MASS_IN_GRID),
        Col("mass of samples outside it", flow.MASS_OUTSIDE),
        Col("total", flow.MASS),
        Col("max log-det error (nats)", flow.LOGDET_ERROR),
    ]
    return {"nll": Table("density", rows, nll), "checks": by_run("density", runs, checks)}


def words(result: Result[CnfSettings]) -> dict[str, object]:
    """What the text reads beyond the settings: the claims' thresholds, the true
    density's nodes, RK4's evaluations per training solve, the paired standard errors."""
    return {
        "nats_better": NATS_BETTER, "gap_closed": GAP_CLOSED, "nfe_growth": NFE_GROWTH,
        "mass_tol": MASS_TOL, "logdet_tol": LOGDET_TOL, "truth_nodes": flow.TRUTH_NODES,
        "rk4_evaluations": 4 * result.settings.steps,
        "paired_se": {d: result.cell(flow.PAIRED_SE.of(f"{d}/cnf")) for d in flow.DENSITIES},
    }  # fmt: skip


def _plot_densities(result: Result[CnfSettings], path: Path) -> None:
    """Per density: the target's held-out points, the true density, the CNF's, its samples."""
    s, setup = result.settings, result.setup
    seed = setup.seeds[0]
    points, _ = flow.grid_points(s.grid, s.box)
    plt = pyplot()
    fig, axes = plt.subplots(len(flow.DENSITIES), 4, figsize=(13, 3.3 * len(flow.DENSITIES)))
    extent = (-s.box, s.box, -s.box, s.box)
    for row, density in zip(axes, flow.DENSITIES):
        _, test = flow.data_points(s, density, seed)
        saved = torch.load(setup.run_dir(f"{density}/cnf", seed) / "flow.pt", weights_only=True)
        truth = flow.true_log_prob(density, points, s.noise).exp().reshape(s.grid, s.grid).numpy()
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
    save_png(path, fig, dpi=90)


def _training_panels(result: Result[CnfSettings]) -> list[Lines]:
    """Held-out NLL (above, with the Gaussian's and the true density's) and NFE of the
    adaptive solve (below) against the iteration, per density and seed."""
    nll, nfe = [], []
    for density in flow.DENSITIES:
        cnf = f"{density}/cnf"
        histories = [m.details["history"] for m in result.measurements[cnf]]
        styles = {f"seed {i}": Style("-", f"C{i}") for i in range(len(histories))}
        losses, evaluations = (
            {
                f"seed {i}": [(r["iteration"], r[key]) for r in rows]
                for i, rows in enumerate(histories)
            }
            for key in (flow.TEST_NLL.key(), flow.NFE.key())
        )
        marks = [
            Mark(value, label=name, fmt="--", color="0.4")
            for metric, name in (
                (flow.GAUSSIAN_TEST_NLL, "Gaussian"),
                (flow.TRUE_TEST_NLL, "true density"),
            )
            if (value := result.stat(metric.of(cnf)).values[0]) is not None
        ]
        nll.append(Lines(LABELS[density], "", "held-out NLL (nats)", losses, styles, marks=marks,
                         legend=None))  # fmt: skip
        nfe.append(Lines("", "iteration", "NFE (Dopri5)", evaluations, styles, legend=None))
    return [*nll, *nfe]


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
        measure=flow.measure,
        claims=claims,
        tables=tables,
        words=words,
        figures=[
            Figure("densities.png", _plot_densities),
            Plot("training.png", _training_panels, columns=len(flow.DENSITIES), size=(5.2, 3.2)),
        ],
    )
)

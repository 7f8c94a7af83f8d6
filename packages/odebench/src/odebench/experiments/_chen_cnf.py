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
from typing import Any

import torch

from .._figures import Lines, Mark, Style
from .._io import pyplot, save_png
from ._chen_cnf_flow import (
    DENSITIES,
    GAUSSIAN_TEST_NLL,
    GAUSSIAN_TRAIN_NLL,
    LOGDET_ERROR,
    MASS,
    MASS_ERROR,
    MASS_IN_GRID,
    MASS_OUTSIDE,
    NFE,
    NFE_INITIAL,
    PAIRED_SE,
    TEST_NLL,
    TEST_NLL_RK4,
    TRAIN_NLL,
    TRUE_TEST_NLL,
    TRUTH_NODES,
    data_points,
    grid_points,
    measure,
    task,
    true_log_prob,
)
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
    """The sizes of one mode (the docs page tables them): per density, ``n_train`` then
    ``n_test`` points with Gaussian ``noise`` around its curve; the field's ``hidden`` width;
    ``iterations`` Adam steps (``--epochs``) of ``batch_size`` points drawn with replacement,
    ``lr`` cosine-annealed to ``lr / 100``; RK4 in ``steps`` steps in training, Dopri5 at
    ``rtol = atol`` in evaluation, read every ``eval_every`` iterations; ``grid x grid``
    cells on ``[-box, box]^2`` and ``n_samples`` flow samples for the mass check and the
    figure; ``n_logdet`` points and ``logdet_steps`` float64 RK4 steps for the log-det check.
    The noise, the rate, the tolerance and the box are the same in every mode."""

    n_train: int
    n_test: int
    noise: float = 0.15
    hidden: int
    iterations: int
    batch_size: int
    lr: float = 5e-3
    steps: int
    rtol: float = 1e-5
    eval_every: int
    grid: int
    box: float = 4.0
    n_samples: int
    n_logdet: int = 8
    logdet_steps: int = 128


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
    return [Run(f"{density}/cnf", task=task(setup, density, seed)) for density in DENSITIES]


def gap_closed(v: Values, run: str) -> float:
    """The fraction of the test-NLL gap from the Gaussian to the true density that the
    CNF of ``run`` closes: 1 matches the truth, 0 is no better than the Gaussian."""
    gaussian_nll = v[GAUSSIAN_TEST_NLL.of(run)]
    return (gaussian_nll - v[TEST_NLL.of(run)]) / (gaussian_nll - v[TRUE_TEST_NLL.of(run)])


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
            Claim.at_least(
                f"{density}_fits_density",
                f"Fig. 5: the CNF fits {label}: most of the NLL gap to the truth closed",
                "figures only, no number", functools.partial(gap_closed, run=cnf), GAP_CLOSED,
                spec=".0f", scale=100, unit="%", kind="paper",
            ),
            Claim.ratio(
                f"{density}_nfe_grows", f"Fig. 3d: the NFE grows during training ({label})",
                "stated, no number", NFE.of(cnf), NFE_INITIAL.of(cnf), above=NFE_GROWTH,
                kind="paper",
            ),
        ]  # fmt: skip
    return [
        *out,
        Claim.at_most(
            "density_integrates_to_one",
            "the CNF's density integrates to one (change of variables)", "exact identity",
            _worst(MASS_ERROR), MASS_TOL, strict=True, spec=".1e", kind="check",
        ),
        Claim.at_most(
            "trace_matches_logdet",
            "the exact trace integral equals log abs det J by finite differences",
            "exact identity", _worst(LOGDET_ERROR), LOGDET_TOL, strict=True, spec=".1e",
            unit=" nats", kind="check",
        ),
    ]  # fmt: skip


MODELS = ("CNF", "Gaussian", "true density")
"""The rows of each density in the table of NLLs."""

Cell = Col | Metric | str
"""A cell of the table of NLLs: a column (of the row), a metric of the density's CNF
run, or a text."""


def _by_model(header: str, cnf: Cell, gaussian: Cell = "–", truth: Cell = "–") -> Col:
    """A column of the table of NLLs, whose cell depends on the row's model."""
    cells = dict(zip(MODELS, (cnf, gaussian, truth)))

    def cell(result: Result[Any], row: Row) -> str:
        this = cells[row.text["model"]]
        if isinstance(this, str):
            return this
        return (this if isinstance(this, Col) else Col("", this)).render(result, row)

    return Col(header, cell=cell)


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
        _by_model(
            "gap closed",
            Col.per_seed("", lambda v, row: gap_closed(v, row.run), ".0f", 100, "%"),
            "0%",
            "100%",
        ),
        _by_model("NFE before → after training", Col.joined("", NFE_INITIAL, NFE, sep=" → ")),
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
        _, test = data_points(s, density, seed)
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
    save_png(path, fig, dpi=90)


def _training_panels(result: Result[CnfSettings]) -> list[Lines]:
    """Held-out NLL (above, with the Gaussian's and the true density's) and NFE of the
    adaptive solve (below) against the iteration, per density and seed."""
    nll, nfe = [], []
    for density in DENSITIES:
        cnf = f"{density}/cnf"
        histories = [m.details["history"] for m in result.measurements[cnf]]
        styles = {f"seed {i}": Style("-", f"C{i}") for i in range(len(histories))}
        losses, evaluations = (
            {
                f"seed {i}": [(r["iteration"], r[key]) for r in rows]
                for i, rows in enumerate(histories)
            }
            for key in (TEST_NLL.key(), NFE.key())
        )
        marks = [
            Mark(value, label=name, fmt="--", color="0.4")
            for metric, name in ((GAUSSIAN_TEST_NLL, "Gaussian"), (TRUE_TEST_NLL, "true density"))
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
        measure=measure,
        claims=claims,
        text="chen-cnf.md",
        tables=tables,
        words=words,
        figures=[
            Figure("densities.png", _plot_densities),
            Plot("training.png", _training_panels, columns=len(DENSITIES), size=(5.2, 3.2)),
        ],
    )
)

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

import numpy as np
import torch

from .._figures import Lines, seed_lines
from .._io import pyplot, save_png
from .._metrics import Metric, Values
from .._tables import Col, Table, by_run
from . import _chen_cnf_flow as flow
from ._claims import Claim
from ._result import Result
from ._runner import register_template
from ._template import Figure, Plot, Run, Settings, Setup, Template

LABELS = {"moons": "two moons", "circles": "two circles"}
CNFS = {f"{density}/cnf": label for density, label in LABELS.items()}  # the runs, by name
FIGURES_ONLY = "figures only, no number"


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
    return [Run(f"{density}/cnf", task=flow.task(setup, density, seed)) for density in LABELS]


def gap_closed(v: Values, run: str) -> float:
    """The fraction of the test-NLL gap from the Gaussian to the true density that the
    CNF of ``run`` closes: 1 matches the truth, 0 is no better than the Gaussian."""
    gaussian = v[flow.GAUSSIAN_TEST_NLL.of(run)]
    return (gaussian - v[flow.TEST_NLL.of(run)]) / (gaussian - v[flow.TRUE_TEST_NLL.of(run)])


def _worst(metric: Metric) -> Callable[[Values], float]:
    """The largest value of ``metric`` over the CNFs; NaN where one is missing (numpy's max
    keeps a NaN, Python's would skip it after the first value and pass on the other CNF)."""
    return lambda v: float(np.max([v[metric.of(run)] for run in CNFS]))


def claims(setup: Setup[CnfSettings]) -> list[Claim]:
    """Per density: the CNF beats the Gaussian, closes most of the gap to the truth, and
    its adaptive NFE grows in training. Over both: the two checks of the code. Their
    details are in the text."""
    out: list[Claim] = []
    for density, label in LABELS.items():
        run = f"{density}/cnf"
        out += [
            Claim.difference(f"{density}_beats_gaussian",
                             f"Sec. 4: on {label} the CNF's test NLL beats the best Gaussian's",
                             FIGURES_ONLY, flow.TEST_NLL.of(run), flow.GAUSSIAN_TEST_NLL.of(run),
                             below=-0.1, kind="paper", spec="+.3f", unit=" nats"),
            Claim.at_least(f"{density}_fits_density",
                           f"Fig. 5: the CNF fits {label}: most of the NLL gap to the truth closed",
                           FIGURES_ONLY, functools.partial(gap_closed, run=run), 0.8,
                           spec=".0f", scale=100, unit="%", kind="paper"),
            Claim.ratio(f"{density}_nfe_grows", f"Fig. 3d: the NFE grows during training ({label})",
                        "stated, no number", flow.NFE.of(run), flow.NFE_INITIAL.of(run),
                        above=1.5, kind="paper"),
        ]  # fmt: skip
    return [
        *out,
        Claim.at_most("density_integrates_to_one",
                      "the CNF's density integrates to one (change of variables)", "exact identity",
                      _worst(flow.MASS_ERROR), 0.01, strict=True, spec=".1e", kind="check"),
        Claim.at_most("trace_matches_logdet",
                      "the exact trace integral equals log abs det J by finite differences",
                      "exact identity", _worst(flow.LOGDET_ERROR), 1e-4, strict=True,
                      spec=".1e", unit=" nats", kind="check"),
    ]  # fmt: skip


def tables(setup: Setup[CnfSettings]) -> dict[str, Table]:
    """Per density: the test NLLs of the CNF, the Gaussian and the true density, and the
    CNF's adaptive NFE before and after training."""
    columns = [
        Col("CNF train NLL", flow.TRAIN_NLL),
        Col("CNF test NLL", flow.TEST_NLL),
        Col("CNF test NLL, RK4 as trained", flow.TEST_NLL_RK4),
        Col("Gaussian test NLL", flow.GAUSSIAN_TEST_NLL),
        Col("true test NLL", flow.TRUE_TEST_NLL),
        Col("paired SE, CNF − Gaussian", flow.PAIRED_SE),
        Col.joined("CNF NFE before → after", flow.NFE_INITIAL, flow.NFE, sep=" → "),
    ]
    return {"nll": by_run("density", CNFS, columns)}


def _plot_densities(result: Result[CnfSettings], path: Path) -> None:
    """Per density: the target's held-out points, the true density, the CNF's, its samples."""
    s, setup = result.settings, result.setup
    points, _ = flow.grid_points(s.grid, s.box)
    fig, axes = pyplot().subplots(len(CNFS), 4, figsize=(13, 3.3 * len(CNFS)))
    extent = (-s.box, s.box, -s.box, s.box)
    for row, (density, label) in zip(axes, LABELS.items()):
        run = f"{density}/cnf"
        _, test = flow.data_points(s, density, setup.seeds[0])
        saved = torch.load(setup.run_dir(run, setup.seeds[0]) / "flow.pt", weights_only=True)
        truth = flow.true_log_prob(density, points, s.noise).exp().reshape(s.grid, s.grid).numpy()
        top = float(truth.max())
        row[0].scatter(*test.T.numpy(), s=1.5, color="black")
        for ax, density_map in zip(row[1:3], (truth, saved["log_density"].double().exp().numpy())):
            ax.imshow(density_map, origin="lower", extent=extent, cmap="viridis", vmin=0, vmax=top)
        row[3].scatter(*saved["samples"][: len(test)].T.numpy(), s=1.5, color="tab:blue")
        titles = ("held-out points", "true density", "CNF density", "CNF samples")
        for ax, title in zip(row, titles):
            ax.set(xlim=(-s.box, s.box), ylim=(-s.box, s.box), aspect="equal")
            ax.set_title(f"{label}: {title}", fontsize=9)
    save_png(path, fig, dpi=90)


def _training_panels(result: Result[CnfSettings]) -> list[Lines]:
    """Held-out NLL and NFE of the adaptive solve against the iteration, per density: the
    mean over the seeds and their band."""
    histories = {
        label: [m.details["history"] for m in result.measurements[run]]
        for run, label in CNFS.items()
    }
    return [
        seed_lines("", "iteration", ylabel, histories, metric.key(), x="iteration")
        for metric, ylabel in ((flow.TEST_NLL, "held-out NLL (nats)"), (flow.NFE, "NFE (Dopri5)"))
    ]


register_template(
    Template(
        name="chen-cnf", title="Continuous normalizing flows on 2-D densities",
        description="a continuous normalizing flow fitted to two 2-D densities against the "
        "best Gaussian and the true density (Chen et al. 2018, Sec. 4, Figs. 4-5)",
        data=lambda setup: f"two moons and two circles ({setup.settings.n_train} train / "
        f"{setup.settings.n_test} test points each, drawn from the seed)",
        modes=MODES, epoch_fields=("iterations",), one_thread_modes=("quick", "standard"),
        runs=runs, measure=flow.measure, claims=claims, tables=tables,
        words=lambda result: {"truth_nodes": flow.TRUTH_NODES},
        figures=[
            Figure("densities.png", _plot_densities),
            Plot("training.png", _training_panels, size=(5.2, 3.2)),
        ],
    )
)  # fmt: skip

"""``odebench run manifestation-sweep``: Queiruga et al. (2020), Fig. 9: an Euler- and
an RK4-trained ContinuousNet evaluated over a grid of schemes and step counts, with the
batch-norm statistics recalibrated per manifestation and with those of training. See
docs/odebench/experiments/manifestation-sweep.md."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, cast

import contnet

from .._figures import Lines, Mark
from .._io import pyplot, save_png
from .._metrics import Metric, Stat
from .._tables import Col, Row, Table, by_run
from . import _contnet_common as common
from ._claims import Claim
from ._runner import register_template
from ._template import Figure, Measurement, Plot, Template

if TYPE_CHECKING:
    from ._result import Result
    from ._template import Setup, Trained

#: The schemes of the grid (rows of Fig. 9), and the two trained with (the nets' keys).
SCHEMES: tuple[str, ...] = ("euler", "midpoint", "rk4", "rk4_38")
TRAINED: tuple[str, ...] = ("euler", "rk4")
#: Largest minus smallest test accuracy of a grid (``stats``: ``RECAL``, recalibrated per
#: manifestation, or ``FIXED``), over all its columns (``columns``: ``WHOLE``) or over
#: ``N_t >=`` the training ``N_t`` (``REFINED``), where the paper expects no degradation.
RANGE = Metric(
    "range", over=("columns", "stats"), key_format="{name}{columns}{stats}", spec=".1f", scale=100
)
WHOLE, REFINED, RECAL, FIXED = "", "_refined", "", "_fixed_stats"
#: The two grids by their key in the details, with the ``stats`` of their ranges.
GRIDS = {"grid": RECAL, "grid_fixed_stats": FIXED}
#: What Queiruga et al. (2020), Fig. 9 and its text, report.
PUBLISHED: dict[str, str] = {
    "rk4_trained": "accuracy does not degrade when time steps are added (or removed, up to a "
    "point) or the scheme is exchanged (Fig. 9, CIFAR-10/100); numbers not published",
    "euler_trained": "test error changes with the manifestation (Fig. 9); numbers not published",
    "data": "CIFAR-10 and CIFAR-100 in the paper; here the digits found (quick mode), "
    "Fashion-MNIST (standard mode), CIFAR-10 (full mode)",
}


@dataclass(frozen=True, kw_only=True)
class SweepSettings(common.NetSettings):
    """The nets of :data:`TRAINED`, ending at one ``N_t = M``, and the step counts of
    the grid (its columns), that ``N_t`` among them; other settings raise ``ValueError``."""

    grid_steps: tuple[int, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        if [(net.key, net.method) for net in self.nets] != [(m, m) for m in TRAINED]:
            raise ValueError(
                f"manifestation-sweep trains one net per scheme of {TRAINED}, keyed by it; "
                f"got {[(net.key, net.method) for net in self.nets]}."
            )
        steps = sorted({net.final_steps for net in self.nets})
        if len(steps) > 1:
            raise ValueError(f"the nets must end at one N_t = M, got {steps}.")
        if steps[0] not in self.grid_steps:
            raise ValueError(f"`grid_steps` {self.grid_steps} must hold the nets' N_t {steps[0]}.")

    @property
    def n_steps(self) -> int:
        return self.nets[0].final_steps


def _nets(dataset: str | None, steps: int, refine: tuple[int, ...] = ()) -> tuple[common.Net, ...]:
    """``[euler, N_t = M = steps]`` and ``[rk4, ...]``, refined up to it at ``refine``."""
    first = steps >> len(refine)
    return (
        common.Net("euler", "Euler-trained", "continuousnet", dataset, "euler", steps),
        common.Net("rk4", "RK4-trained", "continuousnet", dataset, "rk4", first, refine),
    )


MODES = {
    "quick": SweepSettings(
        nets=_nets(None, 2), epochs=3, training=common.QUICK_TRAINING, recal_batches=4,
        grid_steps=(1, 2, 4),
    ),
    "standard": SweepSettings(
        nets=_nets("fashion-mnist", 2), epochs=6, seeds=3,
        training=common.Training(2000, 1000, False, 64, 0.1, (5,), eval_batch_size=128),
        recal_batches=4, grid_steps=(1, 2, 4, 8),
    ),
    "full": SweepSettings(
        nets=_nets("cifar10", 32, (20, 40, 60, 70, 80)), epochs=150, seeds=common.FULL_SEEDS,
        training=common.FULL_TRAINING, recal_batches=20, grid_steps=(4, 8, 16, 32, 64),
    ),
}  # fmt: skip


def measure(setup: Setup[SweepSettings], trained: Trained) -> Measurement:
    """The shared numbers of a net, both grids (rows ``SCHEMES``, columns ``grid_steps``;
    in ``"grid"`` each manifestation recalibrated first, on a copy) and their ranges."""
    s, restored = setup.settings, common.restore(setup, trained)
    base = common.measure_refined(setup, trained, restored)
    metrics, grids = dict(base.metrics), {}
    for key, stats in GRIDS.items():
        batches = restored.batches if stats == RECAL else None
        sweep = contnet.manifestation_sweep(restored.net, restored.accuracy, solvers=SCHEMES,
                                            n_steps=s.grid_steps, batches=batches)  # fmt: skip
        grids[key] = [[sweep[(method, n)] for n in s.grid_steps] for method in SCHEMES]
        for columns, least in ((WHOLE, 0), (REFINED, s.n_steps)):
            values = [v for (_, n), v in sweep.items() if n >= least]
            metrics[RANGE.key(columns=columns, stats=stats)] = max(values) - min(values)
    return Measurement(metrics, {**base.details, **grids})


def claims(setup: Setup[SweepSettings]) -> list[Claim]:
    """Fig. 9 on the accuracy ranges: RK4-trained below Euler-trained (three ways),
    RK4-trained flat, Euler-trained degraded."""
    n = setup.settings.n_steps
    rk4, euler = (RANGE.of(run, columns=REFINED, stats=RECAL) for run in ("rk4", "euler"))
    return [
        _below("over the whole grid", columns=WHOLE, stats=RECAL),
        _below(f"over N_t >= {n}", columns=REFINED, stats=RECAL),
        _below("with fixed BN statistics", columns=WHOLE, stats=FIXED),
        Claim.at_most("rk4_trained_flat_refined",
                      f"the RK4-trained model's accuracy is flat over N_t >= {n} (Fig. 9)",
                      PUBLISHED["rk4_trained"], rk4, 0.05, unit=" points", kind="paper"),
        Claim.at_least("euler_trained_degrades_refined",
                       f"the Euler-trained model's accuracy changes over N_t >= {n} (Fig. 9)",
                       PUBLISHED["euler_trained"], euler, 0.10, unit=" points",
                       kind="paper"),
    ]  # fmt: skip


def _below(where: str, **at: str) -> Claim:
    """The RK4-trained accuracy range at ``at`` below the Euler-trained one."""
    rk4, euler = RANGE.of("rk4", **at), RANGE.of("euler", **at)
    return Claim.difference(
        f"rk4_range_below_euler_{rk4.key}",
        f"RK4-trained accuracy varies less than Euler-trained, {where} (Fig. 9)",
        "RK4-trained flat, Euler-trained not (Fig. 9); numbers not published",
        rk4, euler, below=0.0, kind="paper", spec="+.1f", scale=100, unit=" points",
    )  # fmt: skip


def _mean_grid(result: Result[SweepSettings], run: str, key: str) -> list[list[Stat]]:
    """Each cell of one grid of ``run`` over the seeds."""
    grids = [m.details[key] for m in result.measurements[run]]
    return [[Stat.of(cells) for cells in zip(*rows)] for rows in zip(*grids)]


def tables(setup: Setup[SweepSettings]) -> dict[str, Table]:
    """Each net's accuracies at its own manifestation and ranges, and each of its grids."""
    columns = [
        Col("test acc., recalibrated", common.RECALIBRATED),
        Col("as trained", common.TEST_ACCURACY), Col("train acc.", common.TRAIN_ACCURACY),
        Col("range, whole grid", RANGE, {"columns": WHOLE, "stats": RECAL}),
        Col("range, N_t >= training", RANGE, {"columns": REFINED, "stats": RECAL}),
        Col("range, fixed statistics", RANGE, {"columns": WHOLE, "stats": FIXED}),
        Col("range, N_t >= training, fixed", RANGE, {"columns": REFINED, "stats": FIXED}),
    ]  # fmt: skip
    nets = by_run("net", {r: f"{r}-trained" for r in TRAINED}, columns)
    steps = setup.settings.grid_steps
    grids = {f"{r}_{key}": _grid_table(r, key, steps) for key in GRIDS for r in TRAINED}
    return {"nets": nets, **grids}


def _grid_table(run: str, key: str, steps: tuple[int, ...]) -> Table:
    """One grid of ``run``: schemes by ``N_t``, each cell the accuracy (%), mean ± std
    over the seeds."""

    def cell(result: Result[SweepSettings], row: Row, column: int) -> str:
        return _mean_grid(result, run, key)[SCHEMES.index(row.label)][column].cell(".1f", 100)

    cols = [Col(f"N_t={n}", cell=partial(cell, column=j)) for j, n in enumerate(steps)]
    return Table("scheme", [Row(scheme, run) for scheme in SCHEMES], cols)


def _grids(result: Result[SweepSettings]) -> dict[str, list[list[float]]]:
    """The recalibrated grid of each trained net, each cell its mean over the seeds."""
    return {
        r: [[cast(float, c.mean) for c in row] for row in _mean_grid(result, r, "grid")]
        for r in TRAINED
    }


def _plot_heatmaps(result: Result[SweepSettings], path: Path) -> None:
    """Fig. 9 analogue: test accuracy over schemes x N_t, one panel per trained model
    (the cells' numbers are in the grid tables)."""
    s, grids = result.settings, _grids(result)
    values = [v for grid in grids.values() for row in grid for v in row]
    fig, axes = pyplot().subplots(1, 2, figsize=(10.2, 3.6), layout="constrained")
    for ax, (scheme, grid) in zip(axes, grids.items()):
        image = ax.imshow(grid, vmin=min(values), vmax=max(values), cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(s.grid_steps)), [str(n) for n in s.grid_steps])
        ax.set_yticks(range(len(SCHEMES)), list(SCHEMES))
        ax.set(xlabel="N_t at evaluation", title=f"trained [{scheme}, N_t={s.n_steps}]")
    fig.colorbar(image, ax=list(axes), label="test accuracy")
    save_png(path, fig, dpi=90, tight=False)


def _lines(result: Result[SweepSettings]) -> list[Lines]:
    """Test accuracy against N_t, one line per evaluation scheme, one panel per model."""
    s = result.settings
    return [
        Lines(f"trained with {scheme}", "N_t at evaluation",
              "test accuracy (%)" if scheme == TRAINED[0] else "",
              {name: [(n, 100 * v) for n, v in zip(s.grid_steps, row)]
               for name, row in zip(SCHEMES, grid)},
              xscale="log2", xticks=s.grid_steps, marks=[Mark(s.n_steps, axis="x")],
              legend="" if scheme == TRAINED[0] else None)
        for scheme, grid in _grids(result).items()
    ]  # fmt: skip


register_template(
    Template(
        name="manifestation-sweep",
        modes=MODES,
        one_thread_modes=("quick",),
        title="Queiruga et al. (2020), Fig. 9: manifestation sweep",
        description="Queiruga et al. (2020) Fig. 9: Euler- and RK4-trained ContinuousNets "
        "evaluated over schemes x step counts (Fashion-MNIST; CIFAR-10 in full mode)",
        runs=common.refine_runs,
        measure=measure,
        claims=claims,
        published=PUBLISHED,
        figures=[Figure("fig9_heatmaps.png", _plot_heatmaps),
                 Plot("accuracy_vs_steps.png", _lines, size=(4.5, 3.4), sharey=True)],
        tables=tables,
    )
)  # fmt: skip

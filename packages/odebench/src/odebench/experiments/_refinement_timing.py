"""``odebench run refinement-timing``: Queiruga et al. (2020), Sec. 5.2 and Fig. 7: RK4
trained at its final depth against RK4 refined up to it, training time and accuracy.
See docs/odebench/experiments/refinement-timing.md."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from . import _contnet_common as common
from ._claims import Claim
from ._metrics import Metric, Stat, Values
from ._registry import fmt
from ._report import Prose
from ._runner import register_template
from ._tables import Col, Row, Table
from ._template import Plot, Template

if TYPE_CHECKING:
    from ._result import Result
    from ._template import Setup

#: Sec. 5.2 of the paper: a single V100, training only.
PUBLISHED: dict[str, float | str] = {
    "fixed_minutes": 1053.0, "refined_minutes": 608.0, "time_ratio": 608.0 / 1053.0,
    "seconds_per_epoch_shallow": 16.0, "seconds_per_epoch_deep": 394.0,
    "accuracy": "nearly identical with and without refinement (footnote); numbers not confirmed",
    "schedule": "N_t = M = 1 -> 32, doubling at epochs 20, 40, 60, 70, 80 (CIFAR-10)",
}  # fmt: skip
#: Faster: the refined run's training time below this fraction of the fixed run's.
TIME_RATIO_MAX = 1.0
FIXED, REFINED = "rk4-fixed", "rk4-refined"
#: The report's text; its part ``resumed`` says why a resumed run shows no wall time.
TEXT = "refinement-timing.md"


def _nets(dataset: str | None, steps: int, schedule: tuple[int, ...]) -> tuple[common.Net, ...]:
    """RK4 at ``N_t = M = steps`` throughout, and RK4 refined from 1 to ``steps``."""
    fixed, refined = f"RK4, N_t = {steps} throughout", f"RK4, refined 1 -> {steps}"
    return (
        common.Net(FIXED, fixed, "continuousnet", dataset, "rk4", steps),
        common.Net(REFINED, refined, "continuousnet", dataset, "rk4", 1, schedule),
    )


MODES = {
    "quick": common.RefineSettings(
        nets=_nets(None, 4, (1, 2)), epochs=3, training=common.QUICK_TRAINING,
        recal_batches=4, acc_tolerance=0.05,
    ),
    "standard": common.RefineSettings(
        nets=_nets("fashion-mnist", 4, (2, 4)), epochs=8, seeds=3,
        training=common.Training(2000, 1500, False, 64, 0.1, (6,), eval_batch_size=128),
        recal_batches=8, acc_tolerance=0.015,
    ),
    "full": common.RefineSettings(
        nets=_nets("cifar10", 32, (20, 40, 60, 70, 80)), epochs=150,
        seeds=common.FULL_SEEDS, training=common.FULL_TRAINING, recal_batches=20,
        acc_tolerance=0.01,
    ),
}  # fmt: skip


def _ratio(v: Values, metric: Metric) -> float:
    """The refined run's ``metric`` over the fixed run's."""
    return v[metric.of(REFINED)] / v[metric.of(FIXED)]


def steps_ratio(s: common.RefineSettings) -> float:
    """The sum of ``N_t`` over the epochs, refined run over fixed run.

    Example:
        >>> round(steps_ratio(MODES["quick"]), 4), round(steps_ratio(MODES["full"]), 4)
        (0.5833, 0.5458)
    """
    nets = {net.key: net for net in s.nets}

    def total(net: common.Net) -> int:
        return sum(
            net.n_steps << sum(1 for e in net.refine_epochs if e <= epoch)
            for epoch in range(s.epochs_of(net))
        )

    return total(nets[REFINED]) / total(nets[FIXED])


def claims(setup: Setup[common.RefineSettings]) -> list[Claim]:
    """Refinement is faster (a check), at comparable accuracy, and both at once."""
    tol = setup.settings.acc_tolerance
    time_ratio = partial(_ratio, metric=common.TRAIN_SECONDS)
    accuracy = Claim.difference(
        "accuracy_comparable",
        "refinement keeps the accuracy nearly identical (Sec. 5.2)",
        PUBLISHED["accuracy"],
        common.RECALIBRATED.of(REFINED),
        common.RECALIBRATED.of(FIXED),
        above=-tol, kind="paper", spec="+.1f", scale=100, unit=" points",
    )  # fmt: skip
    faster = Claim.at_most(
        "refinement_faster",
        "refinement trains faster than the fixed depth (Sec. 5.2, Fig. 7)",
        PUBLISHED["time_ratio"],
        time_ratio,
        TIME_RATIO_MAX,
        strict=True,
        spec=".2f",
        kind="check",
    )
    return [
        faster,
        accuracy,
        Claim("refinement_faster_at_comparable_accuracy",
              "refinement is faster at nearly identical accuracy (Sec. 5.2: 608 vs 1053 min)",
              f"{PUBLISHED['time_ratio']:.2f} at nearly identical accuracy", time_ratio,
              lambda v: faster.holds(v) and accuracy.holds(v), spec=".2f", kind="paper",
              timing=True),
    ]  # fmt: skip


def _ratios(result: Result[common.RefineSettings], metric: Metric) -> str:
    """The refined run's ``metric`` over the fixed run's on each seed, over the seeds."""
    return Stat.of([_ratio(v, metric) for v in result.per_seed()]).cell(".2f")


@dataclass(frozen=True, kw_only=True)
class _Quantity(Row):
    """A row of the comparison: ``metric`` of both runs (``refined`` the words around
    the refined run's cell), and their ratio per seed where ``ratio``."""

    metric: Metric
    ratio: bool = False
    refined: str = "{}"


def tables(setup: Setup[common.RefineSettings]) -> dict[str, Table]:
    """The comparison, ours beside the paper's, and each epoch of both runs (first seed)."""
    s, p = setup.settings, PUBLISHED
    net = next(net for net in s.nets if net.key == REFINED)
    schedule = ", ".join(str(e) for e in net.refine_epochs)
    deep, shallow = (f"{p[f'seconds_per_epoch_{k}']:.0f}" for k in ("deep", "shallow"))
    paper = ("fixed (paper)", "refined (paper)", "ratio (paper)")

    def row(label: str, metric: Metric, *published: str, **kw: Any) -> _Quantity:
        return _Quantity(label, text=dict(zip(paper, published)), metric=metric, **kw)

    wall = row("wall time of the run (with evaluation)", common.RUN_WALL_SECONDS,
               "not published", "not published", ratio=True)  # fmt: skip
    rows = [
        row("N_t = M", common.N_STEPS_FINAL, "32", "1 -> 32 (epochs 20, 40, 60, 70, 80)",
            refined=f"{net.n_steps} -> {{}} (epochs {schedule})"),
        row("training time", common.TRAIN_SECONDS, f"{p['fixed_minutes']:.0f} min",
            f"{p['refined_minutes']:.0f} min", f"{p['time_ratio']:.2f}", ratio=True),
        *([] if setup.options.resume else [wall]),
        row("s/epoch, first epoch", common.SECONDS_FIRST_EPOCH, deep, shallow),
        row("s/epoch, last epoch", common.SECONDS_LAST_EPOCH, deep, deep),
        row("test accuracy", common.TEST_ACCURACY, "not confirmed", "not confirmed"),
        row("test accuracy, recalibrated BN", common.RECALIBRATED, "not confirmed",
            "not confirmed"),
        row("parameters (final)", common.PARAMETERS, "about 3.2M", "about 3.2M"),
    ]  # fmt: skip
    ours = [
        Col(f"{name} (ours)", cell=partial(_ours, run=run))
        for name, run in (("fixed depth", FIXED), ("refined", REFINED), ("ratio", None))
    ]
    comparison = Table("quantity", rows, [*ours, *(Col(h) for h in paper)])
    epochs = [
        Col(f"{what} {name}", cell=partial(_epoch, run=run, key=key))
        for run, name in ((FIXED, "fixed"), (REFINED, "refined"))
        for what, key in (("N_t", "n_steps"), ("s", "epoch_seconds"), ("test acc.", "test_acc"))
    ]
    per_epoch = Table("epoch", [Row(str(e)) for e in range(1, s.epochs + 1)], epochs)
    return {"comparison": comparison, "per_epoch": per_epoch}


def _ours(result: Result[common.RefineSettings], row: Row, run: str | None) -> str:
    """The cell of ``run`` in a row of the comparison; ``None``: the ratio's."""
    q = cast(_Quantity, row)
    if run is None:
        return _ratios(result, q.metric) if q.ratio else "–"
    cell = result.cell(q.metric.of(run))
    return q.refined.format(cell) if run == REFINED else cell


#: How the per-epoch table shows each number of an epoch.
EPOCH_CELLS: dict[str, Callable[[Any], str]] = {
    "n_steps": str,
    "epoch_seconds": lambda v: fmt(v, ".2f"),
    "test_acc": lambda v: f"{fmt(v, '.1f', 100)}%",
}


def _epoch(result: Result[common.RefineSettings], row: Row, run: str, key: str) -> str:
    """One number of one epoch (the row) of ``run``'s first seed."""
    return EPOCH_CELLS[key](result.details(run)["per_epoch"][int(row.label) - 1][key])


def words(result: Result[common.RefineSettings]) -> dict[str, object]:
    """The shared fields, the epochs, the ratio of the sums of ``N_t``, the notes of a
    resumed run and of several seeds, and the thresholds."""
    s, setup = result.settings, result.setup
    resumed = f" {Prose.of(TEXT).part('resumed')}" if setup.options.resume else ""
    return {
        **common.words(result),
        "epochs": result.cell(common.EPOCHS.of(FIXED)),
        "n_steps_ratio": _ratios(result, common.N_STEPS_SUM),
        "resumed": resumed,
        "seed": f" (seed {setup.seeds[0]})" if len(setup.seeds) > 1 else "",
        "time_ratio_max": TIME_RATIO_MAX,
        "final": next(net for net in s.nets if net.key == REFINED).final_steps,
        "steps_ratio": steps_ratio(s),
        "tolerance": s.acc_tolerance * 100,
    }


register_template(
    Template(
        name="refinement-timing",
        modes=MODES,
        title="Queiruga et al. (2020), Sec. 5.2: training time with refinement",
        runs=common.refine_runs,
        measure=common.measure_refined,
        one_thread_modes=("quick",),
        description="Queiruga et al. (2020) Sec. 5.2: wall time of RK4 training with "
        "refinement against fixed depth at comparable accuracy (paper: 608 vs 1053 min)",
        claims=claims,
        published=PUBLISHED,
        tables=tables,
        words=words,
        figures=[Plot("time_and_accuracy_per_epoch.png", common.epoch_panels, size=(4.8, 3.6))],
    )
)

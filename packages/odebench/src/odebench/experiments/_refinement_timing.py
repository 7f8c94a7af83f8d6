"""``odebench run refinement-timing``: Queiruga et al. (2020), Sec. 5.2 and Fig. 7: RK4
trained at its final depth against RK4 refined up to it, training time and accuracy.
See docs/odebench/experiments/refinement-timing.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._metrics import Values
from .._tables import Col, Table, by_run
from . import _contnet_common as common
from ._claims import Claim
from ._runner import register_template
from ._template import Plot, Template

if TYPE_CHECKING:
    from ._template import Setup

#: Sec. 5.2 of the paper: a single V100, training only.
PUBLISHED: dict[str, float | str] = {
    "fixed_minutes": 1053.0, "refined_minutes": 608.0, "time_ratio": 608.0 / 1053.0,
    "seconds_per_epoch_shallow": 16.0, "seconds_per_epoch_deep": 394.0,
    "accuracy": "nearly identical with and without refinement (footnote); numbers not confirmed",
    "schedule": "N_t = M = 1 -> 32, doubling at epochs 20, 40, 60, 70, 80 (CIFAR-10)",
}  # fmt: skip
FIXED, REFINED = "rk4-fixed", "rk4-refined"


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


def _time_ratio(v: Values) -> float:
    """The refined run's training time over the fixed run's."""
    return v[common.TRAIN_SECONDS.of(REFINED)] / v[common.TRAIN_SECONDS.of(FIXED)]


def claims(setup: Setup[common.RefineSettings]) -> list[Claim]:
    """Refinement is faster (a check), at comparable accuracy, and both at once."""
    faster = Claim.at_most(
        "refinement_faster", "refinement trains faster than the fixed depth (Sec. 5.2, Fig. 7)",
        PUBLISHED["time_ratio"], _time_ratio, 1.0, strict=True, spec=".2f",
        kind="check",
    )  # fmt: skip
    accuracy = Claim.difference(
        "accuracy_comparable", "refinement keeps the accuracy nearly identical (Sec. 5.2)",
        PUBLISHED["accuracy"], common.RECALIBRATED.of(REFINED), common.RECALIBRATED.of(FIXED),
        above=-setup.settings.acc_tolerance, kind="paper", spec="+.1f", scale=100,
        unit=" points",
    )  # fmt: skip
    return [
        faster,
        accuracy,
        Claim("refinement_faster_at_comparable_accuracy",
              "refinement is faster at nearly identical accuracy (Sec. 5.2: 608 vs 1053 min)",
              f"{PUBLISHED['time_ratio']:.2f} at nearly identical accuracy", _time_ratio,
              lambda v: faster.holds(v) and accuracy.holds(v), spec=".2f", kind="paper",
              timing=True),
    ]  # fmt: skip


def tables(setup: Setup[common.RefineSettings]) -> dict[str, Table]:
    """Both runs side by side, the paper's training times beside ours."""
    nets = {net.key: net.label for net in setup.settings.nets}
    paper = {FIXED: f"{PUBLISHED['fixed_minutes']:.0f} min",
             REFINED: f"{PUBLISHED['refined_minutes']:.0f} min"}  # fmt: skip
    comparison = by_run("run", nets, [
        Col("N_t = M, last epoch", common.N_STEPS_FINAL),
        Col("sum of N_t over the epochs", common.N_STEPS_SUM),
        Col("training time", common.TRAIN_SECONDS), Col("paper (V100)"),
        Col("s/epoch, first", common.SECONDS_FIRST_EPOCH),
        Col("s/epoch, last", common.SECONDS_LAST_EPOCH),
        Col("test acc.", common.TEST_ACCURACY), Col("recalibrated BN", common.RECALIBRATED),
        Col("parameters", common.PARAMETERS),
    ], {key: {"paper (V100)": cell} for key, cell in paper.items()})  # fmt: skip
    return {"comparison": comparison}


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
        figures=[Plot("time_and_accuracy_per_epoch.png", common.epoch_panels, size=(4.8, 3.6))],
    )
)

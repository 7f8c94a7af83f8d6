"""``odebench run continuousnet-cifar``: Queiruga et al. (2020), Table 1 and Fig. 7,
ContinuousNet at a fixed depth against refined, on CIFAR-10 and CIFAR-100; a model
whose data set is not found is reported as not run. See
docs/odebench/experiments/continuousnet-cifar.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._tables import Col, Table, by_run
from . import _contnet_common as common
from ._claims import Claim
from ._runner import register_template
from ._template import Plot, Template

if TYPE_CHECKING:
    from ._result import Result
    from ._template import Setup

NOT_CONFIRMED, NOT_PUBLISHED = "not confirmed", "not published"
#: What Queiruga et al. (2020) publish for each model (Table 1 and Sec. 5.2, single
#: V100, training only). Words where there is no confirmed number.
PUBLISHED: dict[str, dict[str, float | str]] = {
    "euler": {"test_accuracy": NOT_CONFIRMED, "parameters": NOT_CONFIRMED,
              "seconds_per_epoch": 113.0, "total_minutes": 295.0},
    "rk4-refined": {
        "test_accuracy": NOT_CONFIRMED,
        "parameters": "about 3.2M at N_t = M = 32 (Sec. 5.2 text; Table 1 cell not confirmed)",
        "seconds_per_epoch": "16 at N_t = 1 (first 20 epochs), 394 at N_t = 32 (last 80)",
        "total_minutes": 608.0,
        "total_minutes_without_refinement": 1053.0,
        "schedule": "N_t = M = 1 -> 32 at epochs 20, 40, 60, 70, 80 (Sec. 5.2)",
    },
    "wide-euler": {"test_accuracy": NOT_CONFIRMED, "parameters": NOT_CONFIRMED,
                   "seconds_per_epoch": NOT_PUBLISHED, "total_minutes": NOT_PUBLISHED},
    "wide-rk4-refined": {"test_accuracy": NOT_CONFIRMED, "parameters": NOT_CONFIRMED,
                         "seconds_per_epoch": NOT_PUBLISHED, "total_minutes": NOT_PUBLISHED,
                         "schedule": "N_t = M = 1 -> 8 at epochs 20, 50, 80 (Sec. 5.2)"},
}  # fmt: skip


def _pair(
    wide: bool, dataset: str | None, steps: int, refine: tuple[int, ...]
) -> tuple[common.Net, common.Net]:
    """``[Euler, N_t = M = steps]`` and its RK4 twin refined from 1 at epochs ``refine``."""
    prefix, name = ("wide-", "Wide-ContinuousNet") if wide else ("", "ContinuousNet")
    model = f"{prefix}continuousnet"
    return (
        common.Net(f"{prefix}euler", f"{name}(Euler)", model, dataset, "euler", steps),
        common.Net(f"{prefix}rk4-refined", f"{name}(RK4), refined", model, dataset, "rk4", 1,
                   refine),
    )  # fmt: skip


MODES = {
    "quick": common.RefineSettings(
        nets=_pair(False, None, 4, (1, 2)), epochs=3, training=common.QUICK_TRAINING,
        recal_batches=4, acc_tolerance=0.10,
    ),
    "standard": common.RefineSettings(
        nets=(*_pair(False, "cifar10", 4, (2, 4)), *_pair(True, "cifar100", 2, (2,))),
        epochs=8, epochs_cifar100=4, seeds=5,
        training=common.Training(2000, 1000, True, 64, 0.1, (6,), eval_batch_size=128),
        recal_batches=8, acc_tolerance=0.02,
    ),
    "full": common.RefineSettings(
        nets=(*_pair(False, "cifar10", 32, (20, 40, 60, 70, 80)),
              *_pair(True, "cifar100", 8, (20, 50, 80))),
        epochs=150, epochs_cifar100=160, seeds=common.FULL_SEEDS,
        training=common.FULL_TRAINING, recal_batches=20, acc_tolerance=0.02,
    ),
}  # fmt: skip
#: Each model trained at a fixed depth with Euler, and its twin refined with RK4.
PAIRS = (("euler", "rk4-refined"), ("wide-euler", "wide-rk4-refined"))


def claims(setup: Setup[common.RefineSettings]) -> list[Claim]:
    """The claims of each pair trained (its data set found)."""
    nets = {net.key: net for net in common.ran(setup)}
    tol = setup.settings.acc_tolerance
    return [c for e, r in PAIRS if r in nets for c in _claims(nets[e], nets[r], tol)]


def _claims(euler: common.Net, rk4: common.Net, tol: float) -> list[Claim]:
    """The refined model reaches its depth and its shallow epochs are cheaper (checks:
    the schedule makes them so), and is at most slightly worse (tested by training)."""
    e, r, final = euler.key, rk4.key, rk4.final_steps
    first, last = common.SECONDS_FIRST_EPOCH.of(r), common.SECONDS_LAST_EPOCH.of(r)
    return [
        Claim.between(f"{r}_reached_final_steps",
                      f"{rk4.label} reaches N_t = M = {final} by refinement (Sec. 5.2)",
                      PUBLISHED[r]["schedule"], common.N_STEPS_FINAL.of(r), final, final,
                      kind="check", detail=f"ours: its N_t at the last epoch; holds at {final}, "
                      "which its schedule sets on any seed"),
        Claim.ratio(f"{r}_first_epoch_faster_than_last",
                    f"{rk4.label}: a shallow epoch trains faster than a deep one (Fig. 7)",
                    PUBLISHED[r]["seconds_per_epoch"], first, last, below=1.0, kind="check",
                    detail="ours: the first epoch's training time over the last's; holds below "
                    "1, which its schedule makes so: no reproduction"),
        Claim.difference(
            f"{r}_within_tolerance_of_{e}",
            f"{rk4.label}: at most slightly worse than the Euler model (Table 1)",
            "(slightly) worse; Table 1 numbers not confirmed",
            common.RECALIBRATED.of(r), common.RECALIBRATED.of(e), above=-tol, kind="paper",
            spec="+.1f", scale=100, unit=" points", detail=f"ours: its recalibrated test "
            f"accuracy minus {euler.label}'s, paired by seed; holds above -{tol * 100:g} points",
        ),
    ]  # fmt: skip


def _paper(value: float | str, unit: str) -> str:
    """A published number with its unit, or the paper's words."""
    return value if isinstance(value, str) else f"{value:g}{unit}"


def tables(setup: Setup[common.RefineSettings]) -> dict[str, Table]:
    """Table 1 and Fig. 7 of the nets trained, the paper's times beside ours."""
    nets = {net.key: net.label for net in common.ran(setup)}
    table1 = by_run("model", nets, [
        Col("N_t = M, last epoch", common.N_STEPS_FINAL),
        Col("test acc.", common.TEST_ACCURACY),
        Col("recalibrated BN", common.RECALIBRATED),
        Col("parameters", common.PARAMETERS),
    ])  # fmt: skip
    fig7 = by_run("model", nets, [
        Col("s/epoch, mean", common.SECONDS_PER_EPOCH),
        Col("first epoch", common.SECONDS_FIRST_EPOCH),
        Col("last epoch", common.SECONDS_LAST_EPOCH),
        Col("s/epoch (paper, V100)"),
        Col("total training", common.TRAIN_SECONDS),
        Col("total (paper, V100)"),
    ], {k: {"s/epoch (paper, V100)": _paper(PUBLISHED[k]["seconds_per_epoch"], ""),
            "total (paper, V100)": _paper(PUBLISHED[k]["total_minutes"], " min")}
        for k in nets})  # fmt: skip
    return {"table1": table1, "fig7": fig7}


def words(result: Result[common.RefineSettings]) -> dict[str, str]:
    """A line per model not run (its data set not found)."""
    details = {net.label: result.details(net.key) for net in result.settings.nets}
    lines = [f"- {label}: {d['not_run']}." for label, d in details.items() if "not_run" in d]
    return {"not_run": "\n".join(lines) or "- none"}


register_template(
    Template(
        name="continuousnet-cifar",
        title="Queiruga et al. (2020), Table 1 and Fig. 7: ContinuousNet, fixed depth "
        "against refined",
        modes=MODES,
        epoch_fields=("epochs", "epochs_cifar100"),
        description="Queiruga et al. (2020) Table 1 / Fig. 7: ContinuousNet Euler (fixed "
        "depth) and RK4 (refined) on CIFAR-10, the wide ones on CIFAR-100: accuracy, "
        "parameters, time",
        runs=common.runs_where_found,
        measure=common.measure_refined,
        claims=claims,
        figures=[
            Plot("fig7_time_and_accuracy.png", common.epoch_panels, columns=1, size=(6.4, 3.0))
        ],
        tables=tables,
        words=words,
        one_thread_modes=("quick",),
        published=PUBLISHED,
    )
)

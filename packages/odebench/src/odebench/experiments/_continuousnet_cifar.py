"""``odebench run continuousnet-cifar``: Queiruga et al. (2020), Table 1 and Fig. 7,
ContinuousNet at a fixed depth against refined, on CIFAR-10 and CIFAR-100; a model
whose data set is not found is reported as not run. See
docs/odebench/experiments/continuousnet-cifar.md."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from . import _contnet_common as common
from ._claims import Claim
from ._images import data_name
from ._report import Prose
from ._runner import register_template
from ._tables import Col, Row, Table, by_run
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
TEXT = "continuousnet-cifar.md"


def claims(setup: Setup[common.RefineSettings]) -> list[Claim]:
    """The claims of each pair trained (its data set found)."""
    nets = {net.key: net for net in common.ran(setup)}
    tol = setup.settings.acc_tolerance
    return [c for e, r in PAIRS if r in nets for c in _claims(nets[e], nets[r], tol)]


def _claims(euler: common.Net, rk4: common.Net, tol: float) -> list[Claim]:
    """The refined model reaches its depth and its shallow epochs are cheaper (checks:
    the schedule makes them so), and is at most slightly worse (tested by training)."""
    e, r, final = euler.key, rk4.key, rk4.final_steps
    detail = partial(Prose.of(TEXT).part, final=final, depth=rk4.depth(), first=rk4.n_steps,
                     euler=euler.label, tolerance=tol * 100)  # fmt: skip
    steps = common.N_STEPS_FINAL.of(r)
    first, last = common.SECONDS_FIRST_EPOCH.of(r), common.SECONDS_LAST_EPOCH.of(r)
    return [
        Claim.between(f"{r}_reached_final_steps",
                      f"{rk4.label} reaches N_t = M = {final} by refinement (Sec. 5.2)",
                      PUBLISHED[r]["schedule"], steps, final, final, kind="check",
                      detail=detail("reached_final_steps")),
        Claim.ratio(f"{r}_first_epoch_faster_than_last",
                    f"{rk4.label}: a shallow epoch trains faster than a deep one (Fig. 7)",
                    PUBLISHED[r]["seconds_per_epoch"], first, last, below=1.0, kind="check",
                    detail=detail("first_epoch_faster_than_last")),
        Claim.difference(
            f"{r}_within_tolerance_of_{e}",
            f"{rk4.label}: at most slightly worse than the Euler model (Table 1)",
            "(slightly) worse; Table 1 numbers not confirmed",
            common.RECALIBRATED.of(r), common.RECALIBRATED.of(e), above=-tol, kind="paper",
            spec="+.1f", scale=100, unit=" points", detail=detail("within_tolerance"),
        ),
    ]  # fmt: skip


def tables(setup: Setup[common.RefineSettings]) -> dict[str, Table]:
    """Table 1 and Fig. 7 of the nets trained, ours beside the paper's."""
    nets = {net.key: net.label for net in common.ran(setup)}
    table1 = by_run("model", nets, [
        Col("data", cell=lambda result, row: data_name(result.details(row.run)["dataset"])),
        Col("scheme, N_t = M", cell=_depth),
        Col("test acc. (ours)", common.TEST_ACCURACY),
        Col("recalibrated BN (ours)", common.RECALIBRATED),
        Col("test acc. (paper)"),
        Col("parameters (ours)", common.PARAMETERS),
        Col("parameters (paper)"),
    ], {k: {"test acc. (paper)": str(PUBLISHED[k]["test_accuracy"]),
            "parameters (paper)": str(PUBLISHED[k]["parameters"])} for k in nets})  # fmt: skip
    fig7 = by_run("model", nets, [
        Col("s/epoch, mean (ours)", common.SECONDS_PER_EPOCH),
        Col("first epoch", common.SECONDS_FIRST_EPOCH),
        Col("last epoch", common.SECONDS_LAST_EPOCH),
        Col("s/epoch (paper, V100)"),
        Col("total training (ours)", common.TRAIN_SECONDS),
        Col("total (paper, V100)"),
    ], {k: _published_time(PUBLISHED[k]) for k in nets})  # fmt: skip
    return {"table1": table1, "fig7": fig7}


def _depth(result: Result[common.RefineSettings], row: Row) -> str:
    """``"rk4, 1 -> 4 (refined at epochs 1, 2)"``, the final ``N_t`` as measured."""
    net = next(net for net in result.settings.nets if net.key == row.run)
    return net.depth("", result.cell(common.N_STEPS_FINAL.of(net.key)))


def _published_time(p: dict[str, float | str]) -> dict[str, str]:
    """The paper's cells of Fig. 7 for one net: seconds per epoch and total minutes."""
    total, per_epoch = p["total_minutes"], p["seconds_per_epoch"]
    if not isinstance(total, str):
        total = f"{total:.0f} min"
    if "total_minutes_without_refinement" in p:
        total += f" ({p['total_minutes_without_refinement']:.0f} min without refinement)"
    per_epoch = per_epoch if isinstance(per_epoch, str) else f"{per_epoch:.0f}"
    return {"s/epoch (paper, V100)": per_epoch, "total (paper, V100)": total}


def words(result: Result[common.RefineSettings]) -> dict[str, str]:
    """The report: the models not run (no data set), then the part ``trained`` (or
    ``nothing_trained``) with the shared words and the CIFAR-100 nets' epochs."""
    s, prose, trained = result.settings, Prose.of(TEXT), common.ran(result.setup)
    absent: dict[str, list[str]] = {}
    for net in s.nets:
        why = result.details(net.key).get("not_run")
        if why is not None:
            absent.setdefault(why, []).append(net.label)
    models = "\n".join(f"- {'; '.join(labels)}: {why}." for why, labels in absent.items())
    if trained:
        wide = s.epochs_cifar100 is not None and any(n.dataset == "cifar100" for n in trained)
        epochs = f" ({s.epochs_cifar100} on CIFAR-100)" if wide else ""
        table = {name: t.markdown(result) for name, t in tables(result.setup).items()}
        fields = {**common.words(result), "cifar100_epochs": epochs}
        report = prose.part("trained", s=s, table=table, **fields)
    else:
        report = prose.part("nothing_trained")
    not_run = f"{prose.part('not_run', models=models)}\n\n" if absent else ""
    return {"not_run": not_run, "report": report}


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

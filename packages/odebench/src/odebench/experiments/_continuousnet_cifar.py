"""``odebench run continuousnet-cifar``: Queiruga et al. (2020), Table 1 and Fig. 7.

ContinuousNet(Euler) trained at a fixed depth and ContinuousNet(RK4-classic) trained
with refinement (``N_t = M`` doubling at given epochs, the optimiser's state carried
over) on CIFAR-10; the wide variants of both on CIFAR-100. Every model trains through
:func:`odebench.training.train` with the authors' script's recipe (SGD, momentum 0.9,
lr 0.1, weight decay 5e-4, random crops and flips): in full mode with the paper's
depths and schedules, in standard mode shallower, shorter and on subsets, sized for a
CPU. Quick mode trains the two smaller models on a subset of the digits found, for a
few epochs.

A model whose data set is not found is not trained: the report says what to download
and ``results.json`` marks it (``details``, ``"not_run"``), and its claims are left
out (:func:`~odebench.experiments._contnet_common.runs_where_found`). Nothing stands in
for the CIFAR data.

Reported per model: test accuracy (as trained, and with the batch-norm statistics
recalibrated), parameters, training time per epoch and in total, beside the paper's.
The Table 1 accuracies are not confirmed and are never quoted; the V100 timings are.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from . import _contnet_common as common
from ._claims import Claim
from ._images import data_name
from ._template import Figure, Template, register_template

if TYPE_CHECKING:
    from ._template import Result, Setup

NOT_CONFIRMED, NOT_PUBLISHED = "not confirmed", "not published"
#: What Queiruga et al. (2020) publish for each model (Table 1 and Sec. 5.2, single
#: V100, training only). Words where there is no confirmed number.
PUBLISHED: dict[str, dict[str, Any]] = {
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
#: The paper's qualitative reading of Table 1 (Sec. 5 text).
PUBLISHED_READING = (
    "ContinuousNet(Euler) generalises about as well as the ResNet; ContinuousNet(RK4-classic) "
    "is (slightly) worse; RK4 trained without refinement gives nearly identical results "
    "except for time"
)


def _pair(
    wide: bool, dataset: str | None, steps: int, refine: tuple[int, ...]
) -> tuple[common.Net, common.Net]:
    """``[Euler, N_t = M = steps]`` and its RK4 twin refined from ``N_t = M = 1`` at
    the epochs ``refine`` (up to ``2 ** len(refine)``), wide or not."""
    prefix, name = ("wide-", "Wide-ContinuousNet") if wide else ("", "ContinuousNet")
    model = f"{prefix}continuousnet"
    return (
        common.Net(f"{prefix}euler", f"{name}(Euler)", model, dataset, "euler", steps),
        common.Net(f"{prefix}rk4-refined", f"{name}(RK4), refined", model, dataset, "rk4", 1,
                   refine),
    )  # fmt: skip


MODES = {
    # [Euler, 4] and [RK4, 1 -> 4 at epochs 1, 2] on the digits found.
    "quick": common.RefineSettings(
        nets=_pair(False, None, 4, (1, 2)), epochs=3, training=common.QUICK_TRAINING,
        recal_batches=4, acc_tolerance=0.10,
    ),
    # The same pairs cut to a 2-core CPU, 5 seeds as the authors' script: CIFAR-10 at
    # N_t = M = 4 (RK4 1 -> 4 at epochs 2 and 4 of 8, lr drop at 6), the wide pair on
    # CIFAR-100 at N_t = M = 2 (RK4 1 -> 2 at epoch 2 of 4), 2000 training and 1000 test
    # images each. Measured on 32x32 batches (one thread, x2 for two idle cores): per
    # seed about 2.5 min for the CIFAR-10 pair and 7.5 min for the wide pair, whose
    # 13.6M parameters bound its epochs; about 50 min in all. Nothing runs without the
    # data: the report says what to download.
    "standard": common.RefineSettings(
        nets=(*_pair(False, "cifar10", 4, (2, 4)), *_pair(True, "cifar100", 2, (2,))),
        epochs=8, epochs_cifar100=4, seeds=5,
        training=common.Training(2000, 1000, True, 64, 0.1, (6,), eval_batch_size=128),
        recal_batches=8, acc_tolerance=0.02,
    ),
    # The paper's models and schedules, the authors' script's epochs and seeds.
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
    """Per pair trained (its data set found): the refined model reaches its depth, its
    shallow epochs are cheaper, and its recalibrated accuracy is at most the tolerance
    below the Euler model's."""
    s = setup.settings
    nets, gone = {net.key: net for net in s.nets}, common.missing(s.nets, setup.options.data_dir)
    return [
        c
        for e, r in PAIRS
        if r in nets and nets[r].dataset not in gone
        for c in _claims(nets[e], nets[r], s.acc_tolerance)
    ]


def _claims(euler: common.Net, rk4: common.Net, tol: float) -> list[Claim]:
    """The claims of one pair. That the refined model reaches its depth, and that its
    shallow first epoch is cheaper than its deep last one, follow from the schedule on
    any seed: checks. The accuracy comparison is tested by training."""
    e, r, acc = euler.key, rk4.key, "test_accuracy_recalibrated"
    final = rk4.final_steps
    return [
        Claim(
            key=f"{r}_reached_final_steps",
            text=f"{rk4.label} reaches N_t = M = {final} by refinement (Sec. 5.2)",
            published=PUBLISHED[r]["schedule"],
            ours=lambda v: v[r, "n_steps_final"],
            holds=lambda v: v[r, "n_steps_final"] == final,
            spec=".0f",
            kind="check",
            detail=f"ours: its N_t at the last epoch; holds at {final}. The schedule "
            f"({rk4.depth()}) sets it on any seed",
        ),
        Claim(
            key=f"{r}_first_epoch_faster_than_last",
            text=f"{rk4.label}: a shallow epoch trains faster than a deep one (Fig. 7)",
            published=PUBLISHED[r]["seconds_per_epoch"],
            ours=lambda v: v[r, "seconds_first_epoch"] / v[r, "seconds_last_epoch"],
            holds=lambda v: v[r, "seconds_first_epoch"] < v[r, "seconds_last_epoch"],
            spec=".2f",
            unit="×",
            kind="check",
            detail=f"ours: the first epoch's training time (N_t = {rk4.n_steps}) over the "
            f"last's (N_t = {final}); holds below 1. The schedule makes the first epoch's "
            "blocks take fewer steps: no reproduction",
        ),
        Claim.difference(
            f"{r}_within_tolerance_of_{e}",
            f"{rk4.label}: at most slightly worse than the Euler model (Table 1)",
            "(slightly) worse; Table 1 numbers not confirmed",
            (r, acc),
            (e, acc),
            above=-tol,
            kind="paper",
            spec="+.1f",
            scale=100,
            unit=" points",
            detail=f"ours: its recalibrated test accuracy minus {euler.label}'s, paired by "
            f"seed; holds above -{tol * 100:g} points (no more than slightly worse)",
        ),
    ]


def sections(result: Result[common.RefineSettings]) -> str:
    """The models not run (their data set not found), then, of those trained, Table 1
    (accuracy, parameters) and Fig. 7 (time), ours beside the paper's."""
    s, cell = result.settings, result.cell
    nets = common.ran(result)
    absent: dict[str, list[str]] = {}
    for net in s.nets:
        if net not in nets:
            absent.setdefault(result.details(net.key)["not_run"], []).append(net.label)
    lines = []
    if absent:
        lines += [
            "## Not run here",
            "",
            *(f"- {'; '.join(labels)}: {why}." for why, labels in absent.items()),
            "",
        ]
    if not nets:
        return "\n".join(
            [*lines, "No model was trained: no data set of this experiment was found."]
        )
    data = ", ".join(dict.fromkeys(data_name(result.details(n.key)["dataset"]) for n in nets))
    wide = s.epochs_cifar100 is not None and any(n.dataset == "cifar100" for n in nets)
    lines += [
        f"Data: {data}, {s.sizes()}; {s.epochs} epochs"
        f"{f' ({s.epochs_cifar100} on CIFAR-100)' if wide else ''}, {s.training.describe()}.",
        *(["", common.QUICK_NOTE] if result.setup.mode == "quick" else []),
        "",
        "## Table 1: accuracy and parameters",
        "",
        "| model | data | scheme, N_t = M | test acc. (ours) | recalibrated BN (ours) "
        "| test acc. (paper) | parameters (ours) | parameters (paper) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for net in nets:
        k, p = net.key, PUBLISHED[net.key]
        depth = f"{net.method}, {net.n_steps}"
        if net.refine_epochs:
            epochs = ", ".join(str(e) for e in net.refine_epochs)
            depth += f" -> {cell(k, 'n_steps_final', '.0f')} (refined at epochs {epochs})"
        lines.append(
            f"| {net.label} | {data_name(result.details(k)['dataset'])} | {depth} | "
            f"{cell(k, 'test_accuracy', '.2f', 100, '%')} | "
            f"{cell(k, 'test_accuracy_recalibrated', '.2f', 100, '%')} | {p['test_accuracy']} | "
            f"{cell(k, 'parameters', '.3f', 1e-6, 'M')} | {p['parameters']} |"
        )
    lines += [
        "",
        "## Fig. 7: training time",
        "",
        "| model | s/epoch, mean (ours) | first epoch | last epoch | s/epoch (paper, V100) | "
        "total training (ours) | total (paper, V100) |",
        "|---|---|---|---|---|---|---|",
    ]
    for net in nets:
        k, p = net.key, PUBLISHED[net.key]
        total, per_epoch = p["total_minutes"], p["seconds_per_epoch"]
        if not isinstance(total, str):
            total = f"{total:.0f} min"
        if "total_minutes_without_refinement" in p:
            total += f" ({p['total_minutes_without_refinement']:.0f} min without refinement)"
        lines.append(
            f"| {net.label} | {cell(k, 'seconds_per_epoch', '.2f')} | "
            f"{cell(k, 'seconds_first_epoch', '.2f')} | {cell(k, 'seconds_last_epoch', '.2f')} "
            f"| {per_epoch if isinstance(per_epoch, str) else f'{per_epoch:.0f}'} | "
            f"{cell(k, 'train_seconds', '.2f', 1 / 60, ' min')} | {total} |"
        )
    lines += [
        "",
        "Times are the training passes only (test evaluation excluded, as in the paper's "
        "Fig. 7). Test accuracy is that of the last epoch; the recalibrated column "
        "re-estimates the batch-norm statistics on a few training batches first. The "
        "Table 1 accuracies and parameter counts are not confirmed from the paper, so none "
        "is quoted. The paper's reading of Table 1: " + PUBLISHED_READING + ".",
        "",
        "![time per epoch and test accuracy](fig7_time_and_accuracy.png)",
    ]
    return "\n".join(lines)


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
        figures=[Figure("fig7_time_and_accuracy.png", partial(common.plot_epochs, stacked=True))],
        sections=sections,
        one_thread_modes=("quick",),
        published=PUBLISHED,
    )
)

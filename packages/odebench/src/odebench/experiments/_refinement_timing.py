"""``odebench run refinement-timing``: Queiruga et al. (2020), Sec. 5.2 and Fig. 7.

The paper trains ContinuousNet(RK4-classic) on CIFAR-10 in about 608 minutes with
refinement (``N_t = M`` from 1, doubling at epochs 20, 40, 60, 70, 80 up to 32) and
about 1053 minutes at ``N_t = 32`` throughout (0.58x), with "nearly identical"
accuracy. This experiment trains both, RK4 at the final depth from the start and RK4
with refinement ending at that depth, with the same seed, data, epochs and settings,
and compares training time and test accuracy. The blocks' time scale is the final
``N_t`` in both (:attr:`odebench.training.TrainConfig.final_steps`), so both train
the same continuous model. Quick mode does the same on a subset of MNIST.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..training._io import pyplot, save_png, write_json, write_text
from ._continuousnet_cifar import Run, train_plan
from ._registry import Log, RunOptions, command, fmt, held, register

#: Sec. 5.2 of the paper: a single V100, training only.
PUBLISHED: dict[str, Any] = {
    "fixed_minutes": 1053.0,
    "refined_minutes": 608.0,
    "time_ratio": 608.0 / 1053.0,
    "seconds_per_epoch_shallow": 16.0,
    "seconds_per_epoch_deep": 394.0,
    "accuracy": "nearly identical with and without refinement (footnote); numbers not confirmed",
    "schedule": "N_t = M = 1 -> 32, doubling at epochs 20, 40, 60, 70, 80 (CIFAR-10)",
}
#: Faster: the refined run's training time below this fraction of the fixed run's.
TIME_RATIO_MAX = 1.0
#: Comparable accuracy: the refined run within this of the fixed run (absolute).
ACC_TOLERANCE = {"full": 0.01, "quick": 0.05}


def runs(options: RunOptions, data: str = "mnist") -> list[Run]:
    """Fixed-depth RK4 and refined RK4 ending at the same depth.

    Full: CIFAR-10, ``N_t = 32`` against ``1 -> 32`` at epochs 20, 40, 60, 70, 80.
    Quick: ``data``, ``N_t = 4`` against ``1 -> 4`` at epochs 1 and 2.

    Example:
        >>> [(r.key, r.final_steps) for r in runs(RunOptions(out=Path("x"), quick=True))]
        [('rk4-fixed', 4), ('rk4-refined', 4)]
    """
    schedule: tuple[int, ...]
    if options.quick:
        schedule, steps, dataset = (1, 2), 4, data
    else:
        schedule, steps, dataset = (20, 40, 60, 70, 80), 32, "cifar10"
    return [
        Run("rk4-fixed", f"RK4, N_t = {steps} throughout", "continuousnet", dataset, "rk4",
            steps),
        Run("rk4-refined", f"RK4, refined 1 -> {steps}", "continuousnet", dataset, "rk4", 1,
            schedule),
    ]  # fmt: skip


@register(
    "refinement-timing",
    "Queiruga et al. (2020) Sec. 5.2: wall time of RK4 training with refinement against "
    "fixed depth at comparable accuracy (paper: 608 vs 1053 min)",
)
def refinement_timing(options: RunOptions, log: Log) -> dict[str, Any]:
    """Train both runs, write ``report.md``, ``results.json`` and the per-epoch figure."""
    started = time.perf_counter()
    plan, models = train_plan(runs, options, log)
    fixed, refined = models["rk4-fixed"], models["rk4-refined"]
    mode = "quick" if options.quick else "full"
    comparison = {
        "time_ratio": refined["train_seconds"] / fixed["train_seconds"],
        "wall_ratio": refined["run_wall_seconds"] / fixed["run_wall_seconds"],
        "accuracy_difference": _diff(refined["test_accuracy"], fixed["test_accuracy"]),
        "accuracy_difference_recalibrated": _diff(
            refined["test_accuracy_recalibrated"], fixed["test_accuracy_recalibrated"]
        ),
        # What the schedule predicts from the step counts alone (time ~ N_t).
        "cost_ratio_of_schedule": sum(p["n_steps"] for p in refined["per_epoch"])
        / max(sum(p["n_steps"] for p in fixed["per_epoch"]), 1),
    }
    thresholds = {"time_ratio_max": TIME_RATIO_MAX, "accuracy_tolerance": ACC_TOLERANCE[mode]}
    _plot(options.out / "time_and_accuracy_per_epoch.png", models)
    summary: dict[str, Any] = {
        "experiment": "refinement-timing",
        "quick": options.quick,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "data": plan[0].dataset,
        "models": models,
        "comparison": comparison,
        "published": PUBLISHED,
        "thresholds": thresholds,
        "conclusions": _conclusions(comparison, thresholds),
    }
    summary["wall_seconds"] = time.perf_counter() - started
    write_json(options.out / "results.json", summary)
    write_text(options.out / "report.md", _report(summary, options))
    log(f"refinement-timing: report in {options.out / 'report.md'}")
    return summary


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _conclusions(comparison: dict[str, Any], thresholds: dict[str, float]) -> dict[str, bool]:
    """Faster (time ratio below the threshold), comparable (recalibrated accuracy of
    the refined run at most the tolerance below the fixed run's), and both."""
    faster = comparison["time_ratio"] < thresholds["time_ratio_max"]
    diff = comparison["accuracy_difference_recalibrated"]
    comparable = diff is not None and diff >= -thresholds["accuracy_tolerance"]
    return {
        "refinement_faster": faster,
        "accuracy_comparable": comparable,
        "refinement_faster_at_comparable_accuracy": faster and comparable,
    }


def _plot(path: Path, models: dict[str, dict[str, Any]]) -> None:
    """Training seconds per epoch (left) and test accuracy per epoch (right)."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    for m in models.values():
        epochs = [p["epoch"] for p in m["per_epoch"]]
        left.plot(epochs, [p["epoch_seconds"] for p in m["per_epoch"]], "o-", label=m["label"])
        acc = [p["test_acc"] for p in m["per_epoch"]]
        right.plot(epochs, [float("nan") if a is None else 100 * a for a in acc], "o-",
                   label=m["label"])  # fmt: skip
        for e in m["refine_epochs"]:
            left.axvline(e + 0.5, color="0.6", ls=":", lw=1)
    left.set(xlabel="epoch", ylabel="training seconds per epoch", yscale="log",
             title="dotted: refinements")  # fmt: skip
    right.set(xlabel="epoch", ylabel="test accuracy (%)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


def _report(summary: dict[str, Any], options: RunOptions) -> str:
    models, c, t = summary["models"], summary["comparison"], summary["thresholds"]
    fixed, refined = models["rk4-fixed"], models["rk4-refined"]
    claim = summary["conclusions"]
    p = PUBLISHED
    lines = [
        "# Queiruga et al. (2020), Sec. 5.2: training time with refinement",
        "",
        f"`{command('refinement-timing', options)}`, {summary['date']}, "
        f"{summary['wall_seconds']:.0f} s in all, data {summary['data']}, "
        f"{fixed['epochs']} epochs each"
        + (
            " (quick mode: a 512-image subset of 28x28 digits, CPU times)."
            if options.quick
            else "."
        ),
        "",
        "| quantity | fixed depth (ours) | refined (ours) | ratio (ours) | fixed (paper) | "
        "refined (paper) | ratio (paper) |",
        "|---|---|---|---|---|---|---|",
        f"| N_t = M | {fixed['n_steps_final']} | {refined['n_steps_start']} -> "
        f"{refined['n_steps_final']} (epochs {', '.join(str(e) for e in refined['refine_epochs'])})"
        f" | – | 32 | 1 -> 32 (epochs 20, 40, 60, 70, 80) | – |",
        f"| training time | {fixed['train_seconds'] / 60:.2f} min | "
        f"{refined['train_seconds'] / 60:.2f} min | {c['time_ratio']:.2f} | "
        f"{p['fixed_minutes']:.0f} min | {p['refined_minutes']:.0f} min | "
        f"{p['time_ratio']:.2f} |",
        f"| wall time of the run (with evaluation) | {fixed['run_wall_seconds'] / 60:.2f} min | "
        f"{refined['run_wall_seconds'] / 60:.2f} min | {c['wall_ratio']:.2f} | not published | "
        "not published | – |",
        f"| s/epoch, first epoch | {fmt(fixed['seconds_first_epoch'], '.2f')} | "
        f"{fmt(refined['seconds_first_epoch'], '.2f')} | – | 394 | 16 | – |",
        f"| s/epoch, last epoch | {fmt(fixed['seconds_last_epoch'], '.2f')} | "
        f"{fmt(refined['seconds_last_epoch'], '.2f')} | – | 394 | 394 | – |",
        f"| test accuracy | {fmt(fixed['test_accuracy'], '.2f', 100)}% | "
        f"{fmt(refined['test_accuracy'], '.2f', 100)}% | – | not confirmed | not confirmed | "
        "– |",
        f"| test accuracy, recalibrated BN | "
        f"{fmt(fixed['test_accuracy_recalibrated'], '.2f', 100)}% | "
        f"{fmt(refined['test_accuracy_recalibrated'], '.2f', 100)}% | – | not confirmed | "
        "not confirmed | – |",
        f"| parameters (final) | {fixed['parameters'] / 1e6:.3f}M | "
        f"{refined['parameters'] / 1e6:.3f}M | – | about 3.2M | about 3.2M | – |",
        "",
        f"Sum of N_t over the epochs, refined over fixed (the ratio if time were "
        f"proportional to N_t): {c['cost_ratio_of_schedule']:.2f}. Training time excludes "
        "test evaluation, as the paper's Fig. 7 does; the paper's figures are on one V100 "
        "with 150-160 epochs. The paper gives no accuracies for this comparison beyond "
        "'nearly identical'.",
        "",
        "## Per epoch",
        "",
        "| epoch | N_t fixed | s fixed | test acc. fixed | N_t refined | s refined | "
        "test acc. refined |",
        "|---|---|---|---|---|---|---|",
    ]
    for a, b in zip(fixed["per_epoch"], refined["per_epoch"]):
        lines.append(
            f"| {a['epoch']} | {a['n_steps']} | {fmt(a['epoch_seconds'], '.2f')} | "
            f"{fmt(a['test_acc'], '.1f', 100)}% | {b['n_steps']} | "
            f"{fmt(b['epoch_seconds'], '.2f')} | {fmt(b['test_acc'], '.1f', 100)}% |"
        )
    diff = c["accuracy_difference_recalibrated"]
    lines += [
        "",
        "## Claims checked",
        "",
        f"- refinement is faster: training-time ratio {c['time_ratio']:.2f} < "
        f"{t['time_ratio_max']:g}: {held(claim['refinement_faster'])};",
        f"- at comparable accuracy: recalibrated test accuracy of the refined run "
        f"{fmt(diff, '+.1f', 100)} points against the fixed run, at least "
        f"-{t['accuracy_tolerance'] * 100:g} points: {held(claim['accuracy_comparable'])};",
        "- refinement is faster at comparable accuracy (both): "
        f"{held(claim['refinement_faster_at_comparable_accuracy'])}.",
        "",
        "![time and test accuracy per epoch](time_and_accuracy_per_epoch.png)",
        "",
    ]
    return "\n".join(lines)

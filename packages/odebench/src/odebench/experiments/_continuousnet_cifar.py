"""``odebench run continuousnet-cifar``: Queiruga et al. (2020), Table 1 and Fig. 7.

ContinuousNet(Euler) trained at a fixed depth and ContinuousNet(RK4-classic) trained
with refinement (``N_t = M`` doubling at given epochs, the optimiser's state carried
over) on CIFAR-10; the wide variants of both on CIFAR-100 in full mode. Every model
trains through :func:`odebench.training.train` with the authors' script's settings
(SGD, momentum 0.9, lr 0.1, weight decay 5e-4, lr x0.1 at epochs 80, 120, 140, batch
128, random crops and flips). Quick mode trains the two CIFAR-10 models on a subset of
MNIST (or Fashion-MNIST) for a few epochs.

Reported per model: test accuracy (as trained, and with the batch-norm statistics
recalibrated, see :func:`odebench.experiments._manifestation.recalibrate`),
parameters, training time per epoch and in total, beside the paper's. The Table 1
accuracies are not confirmed and are never quoted; the V100 timings are published.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import contnet

from ..training import TrainConfig, evaluate, find_data, load_model, resolve_device, train
from ..training._data import load_splits
from ..training._io import pyplot, save_png, write_json, write_text
from ._manifestation import recalibrate
from ._registry import Log, RunOptions, command, fmt, held, one_thread, prefixed, register

NOT_CONFIRMED = "not confirmed"
NOT_PUBLISHED = "not published"

#: What Queiruga et al. (2020) publish for each model (Table 1 and Sec. 5.2, single
#: V100, training only). Strings where there is no confirmed number.
PUBLISHED: dict[str, dict[str, Any]] = {
    "euler": {
        "test_accuracy": NOT_CONFIRMED,
        "parameters": NOT_CONFIRMED,
        "seconds_per_epoch": 113.0,
        "total_minutes": 295.0,
    },
    "rk4-refined": {
        "test_accuracy": NOT_CONFIRMED,
        "parameters": "about 3.2M at N_t = M = 32 (Sec. 5.2 text; Table 1 cell not confirmed)",
        "seconds_per_epoch": "16 at N_t = 1 (first 20 epochs), 394 at N_t = 32 (last 80)",
        "total_minutes": 608.0,
        "total_minutes_without_refinement": 1053.0,
    },
    "wide-euler": {
        "test_accuracy": NOT_CONFIRMED,
        "parameters": NOT_CONFIRMED,
        "seconds_per_epoch": NOT_PUBLISHED,
        "total_minutes": NOT_PUBLISHED,
    },
    "wide-rk4-refined": {
        "test_accuracy": NOT_CONFIRMED,
        "parameters": NOT_CONFIRMED,
        "seconds_per_epoch": NOT_PUBLISHED,
        "total_minutes": NOT_PUBLISHED,
    },
}
#: The paper's qualitative reading of Table 1 (Sec. 5 text).
PUBLISHED_READING = (
    "ContinuousNet(Euler) generalises about as well as the ResNet; ContinuousNet(RK4-classic) "
    "is (slightly) worse; RK4 trained without refinement gives nearly identical results "
    "except for time"
)
#: The claims' thresholds: RK4-refined accuracy within this of Euler's (absolute).
ACC_TOLERANCE = {"full": 0.02, "quick": 0.10}


@dataclasses.dataclass(frozen=True)
class Run:
    """One training run of the experiment."""

    key: str
    label: str
    model: str
    dataset: str
    scheme: str
    n_steps: int
    refine_epochs: tuple[int, ...] = ()

    @property
    def final_steps(self) -> int:
        """``N_t = M`` once every refinement is made."""
        return self.n_steps * (1 << len(self.refine_epochs))


def runs(options: RunOptions, data: str = "mnist") -> list[Run]:
    """The runs of ``options``' mode; ``data`` is the quick mode's data set.

    Full: ContinuousNet [Euler, N_t = 32] and [RK4, 1 -> 32 at epochs 20, 40, 60,
    70, 80] on CIFAR-10, Wide-ContinuousNet [Euler, 8] and [RK4, 1 -> 8 at 20, 50,
    80] on CIFAR-100. Quick: [Euler, 4] and [RK4, 1 -> 4 at epochs 1, 2] on ``data``.

    Example:
        >>> [r.final_steps for r in runs(RunOptions(out=Path("x"), quick=True))]
        [4, 4]
    """
    if options.quick:
        return [
            Run("euler", "ContinuousNet(Euler)", "continuousnet", data, "euler", 4),
            Run("rk4-refined", "ContinuousNet(RK4), refined", "continuousnet", data, "rk4", 1,
                (1, 2)),
        ]  # fmt: skip
    return [
        Run("euler", "ContinuousNet(Euler)", "continuousnet", "cifar10", "euler", 32),
        Run("rk4-refined", "ContinuousNet(RK4), refined", "continuousnet", "cifar10", "rk4", 1,
            (20, 40, 60, 70, 80)),
        Run("wide-euler", "Wide-ContinuousNet(Euler)", "wide-continuousnet", "cifar100",
            "euler", 8),
        Run("wide-rk4-refined", "Wide-ContinuousNet(RK4), refined", "wide-continuousnet",
            "cifar100", "rk4", 1, (20, 50, 80)),
    ]  # fmt: skip


def config(run: Run, options: RunOptions) -> TrainConfig:
    """The authors' script's settings in full mode (150 epochs on CIFAR-10, 160 on
    CIFAR-100); 3 epochs of 512 images, batch 32, lr 0.05, no augmentation in quick
    mode. ``--epochs`` overrides the epochs, not the refinement epochs."""
    quick = options.quick
    return TrainConfig(
        model=run.model,
        dataset=run.dataset,
        epochs=options.epochs_or(3 if quick else (150 if run.dataset == "cifar10" else 160)),
        batch_size=32 if quick else 128,
        lr=0.05 if quick else 0.1,
        momentum=0.9,
        weight_decay=5e-4,
        milestones=() if quick else (80, 120, 140),
        augment=not quick,
        train_size=512 if quick else None,
        test_size=256 if quick else None,
        scheme=run.scheme,
        n_steps=run.n_steps,
        refine_epochs=run.refine_epochs,
        seed=options.seed,
        device=options.device,
        data_dir=options.data_dir,
        progress=options.progress,
    )


def quick_data(options: RunOptions) -> str:
    """``"mnist"`` when ``--data-dir`` (or the default places) hold MNIST, else
    ``"fashion-mnist"``; raises the loader's ``FileNotFoundError`` when neither is there."""
    try:
        find_data("mnist", options.data_dir)
        return "mnist"
    except FileNotFoundError:
        find_data("fashion-mnist", options.data_dir)
        return "fashion-mnist"


def check_data(datasets: set[str], options: RunOptions) -> None:
    """Fail before the first run, not hours later, when a data set is missing."""
    for name in sorted(datasets):
        find_data(name, options.data_dir)


def recalibrated_accuracy(out: Path, config: TrainConfig, batches: int) -> float | None:
    """Test accuracy of the run in ``out`` with its batch-norm statistics recalibrated
    on ``batches`` training batches (the model as the last checkpoint left it)."""
    device = resolve_device(config.device)
    model, _ = load_model(out, str(device))
    net = cast(contnet.ContinuousNet, model)
    train_set, test_set = load_splits(config)
    recalibrate(net, train_set, batches, config.batch_size, config.seed)
    return evaluate(net, test_set, config.loss, batch_size=config.eval_batch_size, device=device)[
        "acc"
    ]


def train_run(run: Run, options: RunOptions, log: Log) -> dict[str, Any]:
    """Train ``run`` in ``options.out / run.key`` and gather its figures."""
    cfg = config(run, options)
    out = options.out / run.key
    result = train(cfg, out, resume=options.resume, log=prefixed(log, run.key))
    metrics: list[dict[str, Any]] = _read_metrics(out)
    final = result["final"] or {}
    seconds = [m["epoch_seconds"] for m in metrics]
    return {
        "label": run.label,
        "model": run.model,
        "dataset": run.dataset,
        "scheme": run.scheme,
        "n_steps_start": run.n_steps,
        "refine_epochs": list(run.refine_epochs),
        "n_steps_final": final.get("n_steps"),
        "epochs": result["epochs"],
        "parameters": result["parameters"],
        "test_accuracy": final.get("test_acc"),
        "test_accuracy_recalibrated": recalibrated_accuracy(out, cfg, 4 if options.quick else 20),
        "train_accuracy": final.get("train_acc"),
        "seconds_per_epoch": sum(seconds) / len(seconds) if seconds else None,
        "seconds_first_epoch": seconds[0] if seconds else None,
        "seconds_last_epoch": seconds[-1] if seconds else None,
        "train_seconds": result["train_seconds"],
        "run_wall_seconds": result["wall_seconds"],
        "per_epoch": [
            {
                "epoch": m["epoch"],
                "n_steps": m.get("n_steps"),
                "parameters": m.get("parameters"),
                "epoch_seconds": m["epoch_seconds"],
                "test_acc": m["test_acc"],
                "train_acc": m["train_acc"],
            }
            for m in metrics
        ],
    }


def _read_metrics(out: Path) -> Any:
    return json.loads((out / "metrics.json").read_text(encoding="utf-8"))


def train_plan(
    make_runs: Callable[[RunOptions, str], list[Run]], options: RunOptions, log: Log
) -> tuple[list[Run], dict[str, dict[str, Any]]]:
    """The runs ``make_runs`` plans, and their figures by key once trained: on the
    quick data set (one thread) in quick mode, on the paper's after checking that its
    files are there otherwise."""
    if options.quick:
        plan = make_runs(options, quick_data(options))
    else:
        plan = make_runs(options, "mnist")
        check_data({r.dataset for r in plan}, options)
    with one_thread(options.quick):
        return plan, {run.key: train_run(run, options, log) for run in plan}


@register(
    "continuousnet-cifar",
    "Queiruga et al. (2020) Table 1 / Fig. 7: ContinuousNet Euler (fixed depth) and RK4 "
    "(refined) on CIFAR-10, the wide ones on CIFAR-100: accuracy, parameters, time",
)
def continuousnet_cifar(options: RunOptions, log: Log) -> dict[str, Any]:
    """Train the models, write ``report.md``, ``results.json`` and the Fig. 7 analogue."""
    started = time.perf_counter()
    plan, models = train_plan(runs, options, log)
    mode = "quick" if options.quick else "full"
    _plot(options.out / "fig7_time_and_accuracy.png", models)
    summary: dict[str, Any] = {
        "experiment": "continuousnet-cifar",
        "quick": options.quick,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "data": sorted({r.dataset for r in plan}),
        "settings": {r.key: config(r, options).to_dict() for r in plan},
        "models": models,
        "published": PUBLISHED,
        "published_reading": PUBLISHED_READING,
        "thresholds": {"accuracy_tolerance": ACC_TOLERANCE[mode]},
        "conclusions": _conclusions(models, ACC_TOLERANCE[mode]),
    }
    summary["wall_seconds"] = time.perf_counter() - started
    write_json(options.out / "results.json", summary)
    write_text(options.out / "report.md", _report(summary, options))
    log(f"continuousnet-cifar: report in {options.out / 'report.md'}")
    return summary


def _conclusions(models: dict[str, dict[str, Any]], tolerance: float) -> dict[str, bool]:
    """The paper's statements checked on our figures (recalibrated accuracies)."""
    out: dict[str, bool] = {}
    for euler, rk4 in (("euler", "rk4-refined"), ("wide-euler", "wide-rk4-refined")):
        if euler not in models or rk4 not in models:
            continue
        e, r = models[euler], models[rk4]
        acc_e, acc_r = e["test_accuracy_recalibrated"], r["test_accuracy_recalibrated"]
        out[f"{rk4}_within_tolerance_of_{euler}"] = (
            acc_e is not None and acc_r is not None and acc_r >= acc_e - tolerance
        )
        # Refinement starts shallow: the first epoch is cheaper than the last.
        out[f"{rk4}_first_epoch_faster_than_last"] = (
            r["seconds_first_epoch"] is not None
            and r["seconds_first_epoch"] < r["seconds_last_epoch"]
        )
        out[f"{rk4}_reached_final_steps"] = r["n_steps_final"] == r["n_steps_start"] * (
            1 << len(r["refine_epochs"])
        )
    return out


def _plot(path: Path, models: dict[str, dict[str, Any]]) -> None:
    """Fig. 7 analogue: training seconds per epoch (top) and test accuracy (bottom)."""
    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 6.0), sharex=True)
    for m in models.values():
        epochs = [p["epoch"] for p in m["per_epoch"]]
        top.plot(epochs, [p["epoch_seconds"] for p in m["per_epoch"]], "o-", label=m["label"])
        acc = [p["test_acc"] for p in m["per_epoch"]]
        bottom.plot(epochs, [float("nan") if a is None else 100 * a for a in acc], "o-",
                    label=m["label"])  # fmt: skip
        for e in m["refine_epochs"]:
            top.axvline(e + 0.5, color="0.6", ls=":", lw=1)
    top.set(ylabel="training seconds per epoch", yscale="log")
    bottom.set(xlabel="epoch", ylabel="test accuracy (%)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    top.set_title("dotted: refinements (N_t and M double)", fontsize=9)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


def _cell(value: Any, spec: str = ".0f") -> str:
    """A published figure: the number formatted, or the words saying why there is none."""
    return value if isinstance(value, str) else fmt(value, spec)


def _report(summary: dict[str, Any], options: RunOptions) -> str:
    models = summary["models"]
    claim = summary["conclusions"]
    tolerance = summary["thresholds"]["accuracy_tolerance"]
    lines = [
        "# Queiruga et al. (2020), Table 1 and Fig. 7: ContinuousNet on CIFAR",
        "",
        f"`{command('continuousnet-cifar', options)}`, {summary['date']}, "
        f"{summary['wall_seconds']:.0f} s in all, data {', '.join(summary['data'])}"
        + (
            " (quick mode: a 512-image subset of 28x28 digits instead of CIFAR, a few epochs, "
            "so the accuracies say nothing about the paper's and the times are CPU times)."
            if options.quick
            else "."
        ),
        "",
        "## Table 1: accuracy and parameters",
        "",
        "| model | data | scheme, N_t = M | test acc. (ours) | recalibrated BN (ours) "
        "| test acc. (paper) | parameters (ours) | parameters (paper) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, m in models.items():
        p = PUBLISHED[key]
        depth = (
            f"{m['scheme']}, {m['n_steps_start']}"
            if not m["refine_epochs"]
            else f"{m['scheme']}, {m['n_steps_start']} -> {m['n_steps_final']} "
            f"(refined at epochs {', '.join(str(e) for e in m['refine_epochs'])})"
        )
        lines.append(
            f"| {m['label']} | {m['dataset']} | {depth} | "
            f"{fmt(m['test_accuracy'], '.2f', 100)}% | "
            f"{fmt(m['test_accuracy_recalibrated'], '.2f', 100)}% | {_cell(p['test_accuracy'])} | "
            f"{m['parameters'] / 1e6:.3f}M | {_cell(p['parameters'])} |"
        )
    lines += [
        "",
        "## Fig. 7: training time",
        "",
        "| model | s/epoch, mean (ours) | first epoch | last epoch | s/epoch (paper, V100) | "
        "total training (ours) | total (paper, V100) |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, m in models.items():
        p = PUBLISHED[key]
        total = p["total_minutes"]
        total_cell = _cell(total) + (" min" if not isinstance(total, str) else "")
        if "total_minutes_without_refinement" in p:
            total_cell += f" ({p['total_minutes_without_refinement']:.0f} min without refinement)"
        lines.append(
            f"| {m['label']} | {fmt(m['seconds_per_epoch'], '.2f')} | "
            f"{fmt(m['seconds_first_epoch'], '.2f')} | {fmt(m['seconds_last_epoch'], '.2f')} | "
            f"{_cell(p['seconds_per_epoch'])} | {m['train_seconds'] / 60:.2f} min | "
            f"{total_cell} |"
        )
    lines += [
        "",
        "Times are the training passes only (test evaluation excluded, as in the paper's "
        "Fig. 7). Test accuracy is that of the last epoch; the recalibrated column "
        "re-estimates the batch-norm statistics on a few training batches first. The "
        "Table 1 accuracies and parameter counts are not confirmed from the paper, so none "
        "is quoted. The paper's reading of Table 1: " + PUBLISHED_READING + ".",
        "",
        "## Claims checked",
        "",
    ]
    for euler, rk4 in (("euler", "rk4-refined"), ("wide-euler", "wide-rk4-refined")):
        if f"{rk4}_reached_final_steps" not in claim:
            continue
        lines += [
            f"- {models[rk4]['label']} reaches N_t = M = "
            f"{models[rk4]['n_steps_start'] * (1 << len(models[rk4]['refine_epochs']))} by "
            f"refinement: {held(claim[f'{rk4}_reached_final_steps'])};",
            f"- its first epoch (shallow) trains faster than its last (deep), as in Fig. 7: "
            f"{held(claim[f'{rk4}_first_epoch_faster_than_last'])};",
            f"- its recalibrated test accuracy is at most {tolerance * 100:g} points below "
            f"{models[euler]['label']}'s ('slightly worse'): "
            f"{held(claim[f'{rk4}_within_tolerance_of_{euler}'])}.",
        ]
    lines += ["", "![time per epoch and test accuracy](fig7_time_and_accuracy.png)", ""]
    return "\n".join(lines)

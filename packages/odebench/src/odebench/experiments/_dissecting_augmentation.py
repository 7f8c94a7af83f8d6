"""``odebench run dissecting-augmentation``: Massaroli et al. (2020)'s augmentation table.

Four ways to start an image Neural ODE, in the architecture of the authors' CIFAR-10
notebooks: no augmentation (``dissecting-node``), zero channels (``dissecting-anode``),
an input layer (``ilnode``) and a second-order system (``sonode``). Each is trained on
MNIST, and on CIFAR-10 when its files are found; the report puts test accuracy, NFE at
convergence (the forward NFE per batch of the last epoch) and parameters beside the
numbers of the authors' NeurIPS poster.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..training import TrainConfig
from ..training._io import pyplot, save_png, write_json, write_text
from ._images import DATASET_LABELS, available_datasets, train_seeds
from ._registry import Log, RunOptions, command, fmt, held, mean_std, prefixed, register

NAME = "dissecting-augmentation"
DATASETS = ("mnist", "cifar10")
"""MNIST always; CIFAR-10 when :func:`odebench.training.find_data` finds it."""
MODELS = {
    "node": "dissecting-node",
    "anode": "dissecting-anode",
    "ilnode": "ilnode",
    "sonode": "sonode",
}
"""``{short name: model name}`` of the four variants, in the poster's order."""
LABELS = {
    "node": "NODE (no augmentation)",
    "anode": "ANODE (0-augmented)",
    "ilnode": "IL-NODE (input layer)",
    "sonode": "2nd-order",
}

PUBLISHED: dict[str, dict[str, dict[str, float]]] = {
    "mnist": {
        "node": {"acc": 0.968, "nfe": 98, "params": 21_400},
        "anode": {"acc": 0.989, "nfe": 71, "params": 20_400},
        "ilnode": {"acc": 0.991, "nfe": 44, "params": 20_700},
        "sonode": {"acc": 0.992, "nfe": 43, "params": 20_000},
    },
    "cifar10": {
        "node": {"acc": 0.589, "nfe": 93, "params": 37_100},
        "anode": {"acc": 0.708, "nfe": 169, "params": 35_000},
        "ilnode": {"acc": 0.734, "nfe": 65, "params": 36_100},
        "sonode": {"acc": 0.728, "nfe": 59, "params": 34_600},
    },
}
"""The poster's "Ranking Augmentation Strategies" panel: rounded means, no std."""

# Thresholds that decide whether a claim of the paper held (stated in the report).
NEAR_BEST = 0.01
"""IL-NODE "performs best" when its accuracy is within this of the best model's."""
POSTER_PARAMS = 0.05
"""Our parameter counts match the poster's when within this fraction."""


@dataclass(frozen=True)
class Settings:
    """The sizes of one run of the experiment.

    Args:
        seeds: training runs per model and data set (seeds ``base, base + 1, ...``).
        epochs: epochs of every run.
        batch_size: the training batch.
        train_size: training images per run (``None``: all).
        test_size: test images per run (``None``: all).
    """

    seeds: int
    epochs: int
    batch_size: int
    train_size: int | None
    test_size: int | None


def settings(options: RunOptions) -> Settings:
    """The full (notebook) or quick settings of ``options``; ``options.epochs`` overrides.

    Example:
        >>> from pathlib import Path
        >>> settings(RunOptions(out=Path("x"))).epochs
        20
        >>> settings(RunOptions(out=Path("x"), quick=True)).seeds
        1
    """
    if options.quick:
        return Settings(
            seeds=1, epochs=options.epochs_or(1), batch_size=32, train_size=64, test_size=64
        )
    return Settings(
        seeds=3, epochs=options.epochs_or(20), batch_size=64, train_size=None, test_size=None
    )


def _config(model: str, dataset: str, seed: int, s: Settings, options: RunOptions) -> TrainConfig:
    """The notebooks' settings as far as :class:`~odebench.training.TrainConfig` has them.

    Adam at 1e-3 without weight decay where the notebooks use AdamW (1e-3, decoupled
    weight decay 5e-4); the StepLR of 0.9 every 5 epochs as milestones 5, 10, 15 (the
    same rates); dopri5 at 1e-4, the adjoint, softplus; no data augmentation.
    """
    return TrainConfig(
        model=model,
        dataset=dataset,
        epochs=s.epochs,
        batch_size=s.batch_size,
        optimizer="adam",
        lr=1e-3,
        weight_decay=0.0,
        milestones=(5, 10, 15),
        gamma=0.9,
        train_size=s.train_size,
        test_size=s.test_size,
        tol=1e-4,
        solver="dopri5",
        gradient="adjoint",
        activation="softplus",
        seed=seed,
        device=options.device,
        data_dir=options.data_dir,
        progress=options.progress,
    )


def _summary(results: list[dict[str, Any]], metrics: list[list[dict[str, Any]]]) -> dict[str, Any]:
    acc = mean_std([m[-1]["test_acc"] for m in metrics])
    forward = mean_std([m[-1]["nfe_forward"] for m in metrics])
    backward = mean_std([m[-1]["nfe_backward"] for m in metrics])
    return {
        "test_acc_mean": acc[0],
        "test_acc_std": acc[1],
        "nfe_mean": forward[0],
        "nfe_std": forward[1],
        "nfe_backward_mean": backward[0],
        "parameters": results[0]["parameters"],
        "epochs": len(metrics[0]),
        "seeds": len(metrics),
        "train_seconds": mean_std([r["train_seconds"] for r in results])[0],
        "nfe_per_epoch": [[row["nfe_forward"] for row in m] for m in metrics],
    }


@register(
    NAME,
    "Massaroli et al. (2020) augmentation table: NODE, 0-augmented, input-layer and "
    "second-order image NODEs on MNIST (and CIFAR-10 when found): accuracy, NFE, parameters",
)
def dissecting_augmentation(options: RunOptions, log: Log) -> dict[str, Any]:
    """Train the four variants on the image sets found, write figures and ``report.md``."""
    started = time.perf_counter()
    out = options.out
    s = settings(options)
    seeds = [options.seed + k for k in range(s.seeds)]
    datasets, skipped = available_datasets(DATASETS, options, log)
    figures: dict[str, dict[str, Any]] = {}
    for dataset in datasets:
        figures[dataset] = {}
        for name, model in MODELS.items():
            runs = train_seeds(
                out / dataset / name,
                {seed: _config(model, dataset, seed, s, options) for seed in seeds},
                options,
                prefixed(log, f"{dataset} {name}"),
            )
            figures[dataset][name] = _summary(*runs)
    _plot_table(out / "augmentation.png", figures)
    _plot_nfe(out / "nfe.png", figures)
    summary: dict[str, Any] = {
        "experiment": NAME,
        "quick": options.quick,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command(NAME, options),
        "settings": asdict(s),
        "seeds": seeds,
        "datasets": figures,
        "skipped": skipped,
        "published": PUBLISHED,
    }
    summary["conclusions"] = conclusions(figures)
    summary["wall_seconds"] = time.perf_counter() - started
    write_json(out / "results.json", summary)
    write_text(out / "report.md", report(summary))
    log(f"{NAME}: {summary['wall_seconds']:.0f} s; report in {out / 'report.md'}")
    return summary


def _gt(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and a > b


def conclusions(figures: dict[str, dict[str, Any]]) -> dict[str, dict[str, bool]]:
    """Which of the poster's claims held on each data set, from its numbers.

    Args:
        figures: ``{dataset: {model: summary}}`` as in ``results.json``.

    Returns:
        ``{dataset: {claim: held}}`` for the claims of :data:`CLAIMS`.

    Example:
        >>> def row(acc, nfe, params):
        ...     return {"test_acc_mean": acc, "nfe_mean": nfe, "parameters": params}
        >>> rows = {"node": row(0.96, 98, 21_500), "anode": row(0.98, 71, 20_800),
        ...         "ilnode": row(0.99, 44, 21_100), "sonode": row(0.99, 43, 20_300)}
        >>> claims = conclusions({"mnist": rows})["mnist"]
        >>> all(claims.values()), len(claims)
        (True, 5)
    """
    claims: dict[str, dict[str, bool]] = {}
    for dataset, rows in figures.items():
        acc = {k: r["test_acc_mean"] for k, r in rows.items()}
        params = {k: r["parameters"] for k, r in rows.items()}
        best = max((a for a in acc.values() if a is not None), default=None)
        published = PUBLISHED[dataset]
        claims[dataset] = {
            "augmentation_beats_vanilla": _gt(acc["ilnode"], acc["node"])
            and _gt(acc["sonode"], acc["node"]),
            "zero_augmentation_needs_more_nfe": _gt(
                rows["anode"]["nfe_mean"], rows["ilnode"]["nfe_mean"]
            ),
            "input_layer_near_best": acc["ilnode"] is not None
            and best is not None
            and acc["ilnode"] >= best - NEAR_BEST,
            "second_order_fewest_parameters": params["sonode"] == min(params.values()),
            "parameters_match_poster": all(
                abs(params[k] - published[k]["params"]) <= POSTER_PARAMS * published[k]["params"]
                for k in params
            ),
        }
    return claims


CLAIMS = {
    "augmentation_beats_vanilla": (
        "no augmentation has limited expressivity and low performance",
        "IL-NODE and 2nd-order test accuracy > the NODE's",
    ),
    "zero_augmentation_needs_more_nfe": (
        "0-augmentation cannot learn the initial condition and needs more NFE",
        "0-augmented NFE at the last epoch > IL-NODE's",
    ),
    "input_layer_near_best": (
        "an input layer gives the best performance",
        f"IL-NODE accuracy >= the best model's - {NEAR_BEST * 100:.0f} point",
    ),
    "second_order_fewest_parameters": (
        "2nd order is the most parameter-efficient",
        "the 2nd-order model has the fewest parameters",
    ),
    "parameters_match_poster": (
        "the poster's parameter counts",
        f"every count within {POSTER_PARAMS:.0%} of the poster's",
    ),
}
"""``{claim: (what the poster says, the test applied to our numbers)}``."""


def report(summary: dict[str, Any]) -> str:
    """The Markdown report of a run: our numbers beside the poster's, the figures.

    Args:
        summary: the content of ``results.json``.

    Returns:
        The report's text.
    """
    st = summary["settings"]
    seeds = summary["seeds"]
    sizes = (
        "all training and test images"
        if st["train_size"] is None
        else f"{st['train_size']} training and {st['test_size']} test images"
    )
    lines = [
        "# Augmentation strategies for image NODEs (Massaroli et al. 2020)",
        "",
        f"`{summary['command']}`, {summary['date']}, {summary['wall_seconds']:.0f} s in all.",
        "",
        f"Settings: seeds {', '.join(str(x) for x in seeds)}; {st['epochs']} epoch(s); "
        f"batch {st['batch_size']}; Adam, learning rate 1e-3, no weight decay, times 0.9 "
        "every 5 epochs; dopri5 at rtol = atol = 1e-4 with the adjoint; softplus; "
        f"{sizes}. The authors' notebooks: AdamW (1e-3, weight decay 5e-4; the trainer "
        "has no AdamW), the same schedule, batch 64, 20 epochs, the same solver.",
        "",
    ]
    for dataset, rows in summary["datasets"].items():
        published = PUBLISHED[dataset]
        lines += [
            f"## {DATASET_LABELS[dataset]}",
            "",
            f"| model | test accuracy (ours, {len(seeds)} seed(s)) | test accuracy (poster) | "
            "NFE at convergence (ours) | NFE (poster) | parameters (ours) | parameters "
            "(poster) |",
            "|---|---|---|---|---|---|---|",
        ]
        for name in MODELS:
            r, p = rows[name], published[name]
            lines.append(
                f"| {LABELS[name]} | {fmt(r['test_acc_mean'], '.1f', 100)} ± "
                f"{fmt(r['test_acc_std'], '.1f', 100)}% | {p['acc'] * 100:.1f}% | "
                f"{fmt(r['nfe_mean'], '.1f')} | {p['nfe']:.0f} | {r['parameters']:,} | "
                f"{p['params'] / 1e3:.1f}k |"
            )
        lines.append("")
    for dataset, reason in summary["skipped"].items():
        lines += [
            f"## {DATASET_LABELS[dataset]}",
            "",
            f"Skipped: {reason}. Poster: accuracy "
            + ", ".join(f"{LABELS[k]} {v['acc'] * 100:.1f}%" for k, v in PUBLISHED[dataset].items())
            + ".",
            "",
        ]
    lines += [
        "NFE at convergence is the forward NFE per training batch in the last epoch (the "
        "poster's \"NFE\", the authors' per-step count of the forward solve). The poster "
        "gives rounded means without standard deviations. The MNIST architectures are "
        "our reconstruction (no MNIST code is published): the counts differ from the "
        "poster's by up to 2.1%.",
        "",
        "## Claims checked",
        "",
    ]
    for dataset, claims in summary["conclusions"].items():
        for key, value in claims.items():
            said, test = CLAIMS[key]
            lines.append(f"- {DATASET_LABELS[dataset]}: {said} ({test}): {held(value)};")
    if lines[-1].endswith(";"):
        lines[-1] = lines[-1][:-1] + "."
    lines += [
        "",
        "Quick runs (`--quick`) train one epoch on a small subset: the accuracies and NFE "
        "are those of barely trained models, not of converged ones.",
        "",
        "## Figures",
        "",
        "Test accuracy, NFE at convergence and parameters, ours beside the poster's:",
        "",
        "![augmentation table](augmentation.png)",
        "",
        "Forward NFE per batch over training (mean over seeds), one point per epoch:",
        "",
        "![NFE per epoch](nfe.png)",
        "",
        "Every training run (configuration, metrics per epoch, curves, checkpoint) is in "
        "`<dataset>/<model>/seed<N>/`.",
        "",
    ]
    return "\n".join(lines)


def _plot_table(path: Path, figures: dict[str, dict[str, Any]]) -> None:
    """Bars per data set: accuracy, NFE and parameters of the four models, ours and poster's."""
    plt = pyplot()
    fig, axes = plt.subplots(len(figures), 3, figsize=(13, 3.4 * len(figures)), squeeze=False)
    names = list(MODELS)
    pos = list(range(len(names)))
    for row, (dataset, rows) in zip(axes, figures.items(), strict=True):
        for ax, key, paper_key, scale, label in (
            (row[0], "test_acc_mean", "acc", 100.0, "test accuracy, %"),
            (row[1], "nfe_mean", "nfe", 1.0, "NFE at convergence"),
            (row[2], "parameters", "params", 1e-3, "parameters, thousands"),
        ):
            ours = [(rows[n][key] or 0.0) * scale for n in names]
            paper = [PUBLISHED[dataset][n][paper_key] * scale for n in names]
            ax.bar([p - 0.2 for p in pos], ours, width=0.4, label="ours")
            ax.bar([p + 0.2 for p in pos], paper, width=0.4, label="poster")
            ax.set_xticks(pos, ["NODE", "0-aug", "IL", "2nd order"], fontsize=8)
            ax.set(ylabel=label, title=f"{DATASET_LABELS[dataset]}: {label}")
            ax.grid(alpha=0.3, axis="y")
            ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


def _plot_nfe(path: Path, figures: dict[str, dict[str, Any]]) -> None:
    """Forward NFE per batch against the epoch, the four models, one panel per data set."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(figures), figsize=(5 * len(figures), 3.6), squeeze=False)
    for ax, (dataset, rows) in zip(axes[0], figures.items(), strict=True):
        for name in MODELS:
            runs = rows[name]["nfe_per_epoch"]
            n = min(len(r) for r in runs)
            means = [sum(float(r[e] or 0.0) for r in runs) / len(runs) for e in range(n)]
            ax.plot(range(1, n + 1), means, "o-", label=LABELS[name])
        ax.set(xlabel="epoch", ylabel="forward NFE per batch", title=DATASET_LABELS[dataset])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(path, fig, dpi=90)

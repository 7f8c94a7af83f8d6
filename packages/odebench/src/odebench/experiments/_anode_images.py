"""``odebench run anode-images``: Dupont et al. (2019), Sec. 5.2, Table 1 and Fig. 10.

NODE against ANODE on MNIST, and on CIFAR-10 and SVHN when their files are found: test accuracy
(mean and standard deviation over seeds) and parameters beside Table 1, the forward
NFE per batch over training, and Fig. 10's loss against NFE. The models are
:mod:`odebench.models`' ``node`` and ``anode``, built with the paper's matched
parameter budgets (84k on MNIST, 172k on CIFAR-10 and SVHN).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..training import TrainConfig
from ..training._io import pyplot, save_png, write_json, write_text
from ._images import DATASET_LABELS, available_datasets, train_seeds
from ._registry import Log, RunOptions, command, fmt, held, mean_std, prefixed, register

NAME = "anode-images"
MODELS = ("node", "anode")
"""The two models compared, by their :data:`odebench.models.MODELS` names."""
LABELS = {"node": "NODE", "anode": "ANODE"}
DATASETS = ("mnist", "cifar10", "svhn")
"""MNIST always; CIFAR-10 and SVHN when :func:`odebench.training.find_data` finds them."""

PUBLISHED: dict[str, dict[str, dict[str, float]]] = {
    "mnist": {
        "node": {"acc": 0.964, "acc_std": 0.005, "params": 84_000},
        "anode": {"acc": 0.982, "acc_std": 0.001, "params": 84_000},
    },
    "cifar10": {
        "node": {"acc": 0.537, "acc_std": 0.002, "params": 172_000},
        "anode": {"acc": 0.606, "acc_std": 0.004, "params": 172_000},
    },
    "svhn": {
        "node": {"acc": 0.810, "acc_std": 0.006, "params": 172_000},
        "anode": {"acc": 0.835, "acc_std": 0.005, "params": 172_000},
    },
}
"""Table 1 (test accuracy, mean ± std over seeds) and the rounded budgets of Sec. 5.2.

The budgets are the paper's text; the accuracies are Table 1 as quoted by two
third-party documents (not yet checked against the PDF)."""
PUBLISHED_NFE = "not published (Fig. 10: curves)"
NFE_NOTE = (
    "The paper gives no NFE table: its Fig. 10 shows curves, and its text says that to "
    "reach a loss of 0.8 on CIFAR-10 a NODE needs about 100 function evaluations and an "
    "ANODE about 50."
)

# Thresholds that decide whether a claim of the paper held (stated in the report).
MATCHED = 0.02
"""The two models' parameter counts differ by at most this fraction: "matched"."""
BUDGET = 0.05
"""Each count is within this fraction of the paper's budget (84k or 172k)."""


@dataclass(frozen=True)
class Settings:
    """The sizes of one run of the experiment.

    Args:
        seeds: training runs per model and data set (seeds ``base, base + 1, ...``).
        epochs: epochs of every run.
        lr: Adam's learning rate.
        batch_size: the training batch.
        train_size: training images per run (``None``: all).
        test_size: test images per run (``None``: all).
    """

    seeds: int
    epochs: int
    lr: float
    batch_size: int
    train_size: int | None
    test_size: int | None


def settings(options: RunOptions) -> Settings:
    """The full (paper) or quick settings of ``options``; ``options.epochs`` overrides.

    Example:
        >>> from pathlib import Path
        >>> settings(RunOptions(out=Path("x"))).batch_size
        256
        >>> settings(RunOptions(out=Path("x"), quick=True, epochs=3)).epochs
        3
    """
    if options.quick:
        return Settings(
            seeds=2,
            epochs=options.epochs_or(1),
            lr=1e-3,
            batch_size=32,
            train_size=128,
            test_size=128,
        )
    return Settings(
        seeds=5,
        epochs=options.epochs_or(20),
        lr=1e-3,
        batch_size=256,
        train_size=None,
        test_size=None,
    )


def _config(model: str, dataset: str, seed: int, s: Settings, options: RunOptions) -> TrainConfig:
    """The authors' ``config_img.json``: Adam, no weight decay, dopri5 at 1e-3, ReLU,
    backpropagation through the solver."""
    return TrainConfig(
        model=model,
        dataset=dataset,
        epochs=s.epochs,
        batch_size=s.batch_size,
        optimizer="adam",
        lr=s.lr,
        train_size=s.train_size,
        test_size=s.test_size,
        tol=1e-3,
        solver="dopri5",
        gradient="backprop",
        activation="relu",
        seed=seed,
        device=options.device,
        data_dir=options.data_dir,
        progress=options.progress,
    )


def _summary(results: list[dict[str, Any]], metrics: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Final test accuracy and loss over seeds, parameters, forward NFE per batch."""
    acc = mean_std([m[-1]["test_acc"] for m in metrics])
    loss = mean_std([m[-1]["train_loss"] for m in metrics])
    first = mean_std([m[0]["nfe_forward"] for m in metrics])
    last = mean_std([m[-1]["nfe_forward"] for m in metrics])
    return {
        "test_acc_mean": acc[0],
        "test_acc_std": acc[1],
        "train_loss_mean": loss[0],
        "train_loss_std": loss[1],
        "parameters": results[0]["parameters"],
        "nfe_first": first[0],
        "nfe_last": last[0],
        "nfe_last_std": last[1],
        "epochs": len(metrics[0]),
        "seeds": len(metrics),
        "train_seconds": mean_std([r["train_seconds"] for r in results])[0],
        "curves": [
            [{k: row[k] for k in ("epoch", "train_loss", "test_acc", "nfe_forward")} for row in m]
            for m in metrics
        ],
    }


@register(
    NAME,
    "Dupont et al. (2019) Table 1 and Fig. 10: NODE against ANODE on MNIST (and CIFAR-10 "
    "and SVHN when found): accuracy, parameters, NFE over training, loss against NFE",
)
def anode_images(options: RunOptions, log: Log) -> dict[str, Any]:
    """Train NODEs and ANODEs on the image sets found, write figures and ``report.md``."""
    started = time.perf_counter()
    out = options.out
    s = settings(options)
    seeds = [options.seed + k for k in range(s.seeds)]
    datasets, skipped = available_datasets(DATASETS, options, log)
    figures: dict[str, dict[str, Any]] = {}
    for dataset in datasets:
        figures[dataset] = {}
        for model in MODELS:
            runs = train_seeds(
                out / dataset / model,
                {seed: _config(model, dataset, seed, s, options) for seed in seeds},
                options,
                prefixed(log, f"{dataset} {model}"),
            )
            figures[dataset][model] = _summary(*runs)
    _plot_accuracy_params(out / "accuracy_params.png", figures)
    _plot_nfe(out / "nfe.png", figures)
    _plot_loss_nfe(out / "loss_nfe.png", figures)
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


def _ge(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and a >= b


def _lt(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and a < b


def conclusions(figures: dict[str, dict[str, Any]]) -> dict[str, dict[str, bool]]:
    """Which of the paper's claims held on each data set, from its numbers.

    Args:
        figures: ``{dataset: {model: summary}}`` as in ``results.json``.

    Returns:
        ``{dataset: {claim: held}}`` for the claims of :data:`CLAIMS`.

    Example:
        >>> row = {"test_acc_mean": 0.9, "nfe_last": 20.0, "parameters": 85_000}
        >>> claims = conclusions({"mnist": {"node": row, "anode": {**row, "nfe_last": 14.0}}})
        >>> all(claims["mnist"].values()), len(claims["mnist"])
        (True, 4)
    """
    claims: dict[str, dict[str, bool]] = {}
    for dataset, rows in figures.items():
        node, anode = rows["node"], rows["anode"]
        pn, pa = node["parameters"], anode["parameters"]
        budget = PUBLISHED[dataset]["node"]["params"]
        claims[dataset] = {
            "anode_accuracy_at_least_node": _ge(anode["test_acc_mean"], node["test_acc_mean"]),
            "anode_fewer_nfe_at_end": _lt(anode["nfe_last"], node["nfe_last"]),
            "parameters_matched": abs(pa - pn) <= MATCHED * pn,
            "parameters_on_budget": all(abs(p - budget) <= BUDGET * budget for p in (pn, pa)),
        }
    return claims


CLAIMS = {
    "anode_accuracy_at_least_node": (
        "Table 1: ANODEs are more accurate than NODEs",
        "ANODE mean test accuracy >= NODE mean test accuracy",
    ),
    "anode_fewer_nfe_at_end": (
        "Fig. 10: ANODEs need fewer function evaluations than NODEs",
        "ANODE forward NFE per batch at the last epoch < NODE's",
    ),
    "parameters_matched": (
        "Sec. 5.2: the two models have matched parameter counts",
        f"counts differ by at most {MATCHED:.0%}",
    ),
    "parameters_on_budget": (
        "Sec. 5.2: 84k parameters on MNIST, 172k on CIFAR-10 and SVHN",
        f"both counts within {BUDGET:.0%} of the budget",
    ),
}
"""``{claim: (what the paper says, the test applied to our numbers)}``."""


def _pct(mean: float | None, std: float | None) -> str:
    return f"{fmt(mean, '.1f', 100)} ± {fmt(std, '.1f', 100)}%"


def report(summary: dict[str, Any]) -> str:
    """The Markdown report of a run: our numbers beside the published ones, the figures.

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
        "# NODE against ANODE on images (Dupont et al. 2019, Table 1 and Fig. 10)",
        "",
        f"`{summary['command']}`, {summary['date']}, {summary['wall_seconds']:.0f} s in all.",
        "",
        f"Settings: seeds {', '.join(str(x) for x in seeds)}; {st['epochs']} epoch(s); "
        f"Adam, learning rate {st['lr']:g}, batch {st['batch_size']}; dopri5 at "
        f"rtol = atol = 1e-3, backpropagation through the solver; {sizes}. "
        "Paper (the authors' `config_img.json`): Adam 1e-3, batch 256, 5 repeats; 20 "
        "epochs in that file, not stated in the paper.",
        "",
    ]
    for dataset, rows in summary["datasets"].items():
        published = PUBLISHED[dataset]
        lines += [
            f"## {DATASET_LABELS[dataset]}",
            "",
            f"| model | test accuracy (ours, {len(seeds)} seeds) | test accuracy (paper) | "
            "parameters (ours) | parameters (paper) | forward NFE per batch, first → last "
            "epoch (ours) | NFE (paper) |",
            "|---|---|---|---|---|---|---|",
        ]
        for model in MODELS:
            r, p = rows[model], published[model]
            lines.append(
                f"| {LABELS[model]} | {_pct(r['test_acc_mean'], r['test_acc_std'])} | "
                f"{_pct(p['acc'], p['acc_std'])} | {r['parameters']:,} | "
                f"{p['params'] / 1e3:.0f}k | {fmt(r['nfe_first'], '.1f')} → "
                f"{fmt(r['nfe_last'], '.1f')} | {PUBLISHED_NFE} |"
            )
        lines.append("")
    for dataset, reason in summary["skipped"].items():
        lines += [
            f"## {DATASET_LABELS[dataset]}",
            "",
            f"Skipped: {reason}. Published: NODE "
            f"{_pct(PUBLISHED[dataset]['node']['acc'], PUBLISHED[dataset]['node']['acc_std'])}, "
            f"ANODE "
            f"{_pct(PUBLISHED[dataset]['anode']['acc'], PUBLISHED[dataset]['anode']['acc_std'])}"
            f", {PUBLISHED[dataset]['node']['params'] / 1e3:.0f}k parameters each.",
            "",
        ]
    lines += [
        NFE_NOTE,
        "",
        "The paper's accuracies are Table 1 as two third-party documents quote it (not yet "
        "checked against the PDF); its parameter budgets are the rounded ones of Sec. 5.2. "
        "Our counts are those of the authors' code, which a replication also finds 0.4–1.1% "
        "above the paper's.",
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
        "Quick runs (`--quick`) train one epoch on a small subset: the accuracies say "
        "nothing about the paper's, and the NFE curves have one point per epoch only.",
        "",
        "## Figures",
        "",
        "Test accuracy (mean ± std over seeds) and parameters, ours beside the paper's:",
        "",
        "![accuracy and parameters](accuracy_params.png)",
        "",
        "Forward NFE per batch over training (mean over seeds, band from min to max), one "
        "point per epoch:",
        "",
        "![NFE per epoch](nfe.png)",
        "",
        "Fig. 10: training loss against the forward NFE per batch, one point per epoch and "
        "seed (the paper's curves are per iteration; NFE grows as the loss falls, and a "
        "NODE needs more evaluations than an ANODE at the same loss):",
        "",
        "![loss against NFE](loss_nfe.png)",
        "",
        "Every training run (configuration, metrics per epoch, curves, checkpoint) is in "
        "`<dataset>/<model>/seed<N>/`.",
        "",
    ]
    return "\n".join(lines)


COLORS = {"node": "tab:blue", "anode": "tab:orange"}


def _panels(n: int, height: float = 3.6) -> tuple[Any, list[Any]]:
    plt = pyplot()
    fig, axes = plt.subplots(1, max(n, 1), figsize=(5 * max(n, 1), height), squeeze=False)
    return fig, list(axes[0])


def _plot_accuracy_params(path: Path, figures: dict[str, dict[str, Any]]) -> None:
    """Bars: test accuracy per data set and parameters, ours against the paper's."""
    fig, (acc_ax, par_ax) = _panels(2)
    groups = [(d, m) for d in figures for m in MODELS]
    pos = list(range(len(groups)))
    ticks = [f"{DATASET_LABELS[d]}\n{LABELS[m]}" for d, m in groups]
    for ax, key, ours_std, paper_std, scale, label in (
        (acc_ax, "test_acc_mean", "test_acc_std", "acc_std", 100.0, "test accuracy, %"),
        (par_ax, "parameters", None, None, 1e-3, "parameters, thousands"),
    ):
        ours = [(figures[d][m][key] or 0.0) * scale for d, m in groups]
        paper_key = "acc" if key == "test_acc_mean" else "params"
        paper = [PUBLISHED[d][m][paper_key] * scale for d, m in groups]
        ours_err = (
            [(figures[d][m][ours_std] or 0.0) * scale for d, m in groups] if ours_std else None
        )
        paper_err = [PUBLISHED[d][m][paper_std] * scale for d, m in groups] if paper_std else None
        ax.bar([p - 0.2 for p in pos], ours, width=0.4, yerr=ours_err, label="ours")
        ax.bar([p + 0.2 for p in pos], paper, width=0.4, yerr=paper_err, label="paper")
        ax.set_xticks(pos, ticks, fontsize=8)
        ax.set(ylabel=label)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    acc_ax.set_title("test accuracy (Table 1)")
    par_ax.set_title("parameters (Sec. 5.2)")
    fig.tight_layout()
    save_png(path, fig, dpi=90)


def _plot_nfe(path: Path, figures: dict[str, dict[str, Any]]) -> None:
    """Forward NFE per batch against the epoch, one panel per data set."""
    fig, axes = _panels(len(figures))
    for ax, (dataset, rows) in zip(axes, figures.items(), strict=False):
        for model in MODELS:
            curves = rows[model]["curves"]
            n = min(len(c) for c in curves)
            epochs = list(range(1, n + 1))
            values = [[_num(c[e]["nfe_forward"]) for c in curves] for e in range(n)]
            ax.plot(
                epochs,
                [sum(v) / len(v) for v in values],
                "o-",
                color=COLORS[model],
                label=LABELS[model],
            )
            ax.fill_between(
                epochs,
                [min(v) for v in values],
                [max(v) for v in values],
                color=COLORS[model],
                alpha=0.2,
            )
        ax.set(xlabel="epoch", ylabel="forward NFE per batch", title=DATASET_LABELS[dataset])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


def _plot_loss_nfe(path: Path, figures: dict[str, dict[str, Any]]) -> None:
    """Fig. 10: training loss against forward NFE per batch, each seed a line."""
    fig, axes = _panels(len(figures))
    for ax, (dataset, rows) in zip(axes, figures.items(), strict=False):
        for model in MODELS:
            for k, curve in enumerate(rows[model]["curves"]):
                ax.plot(
                    [_num(r["nfe_forward"]) for r in curve],
                    [_num(r["train_loss"]) for r in curve],
                    "o-",
                    color=COLORS[model],
                    alpha=0.8,
                    label=LABELS[model] if k == 0 else None,
                )
        ax.set(
            xlabel="forward NFE per batch",
            ylabel="training loss",
            title=f"{DATASET_LABELS[dataset]}: loss against NFE (Fig. 10)",
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


def _num(value: float | None) -> float:
    return math.nan if value is None else float(value)

"""``odebench run quickstart``: the README's first job, a couple of minutes on a CPU."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from ..training import TrainConfig, find_data, load_model, train
from ..training._io import pyplot, save_png, write_json, write_text
from ._registry import Log, RunOptions, fmt, prefixed, register

TOY = (("node", "toy-node"), ("anode", "toy-anode"))


def _image_dataset(data_dir: str | None) -> str:
    """MNIST when its files are found, else Fashion-MNIST, else the toy spirals."""
    for name in ("mnist", "fashion-mnist"):
        try:
            find_data(name, data_dir)
        except FileNotFoundError:
            continue
        return name
    return "spirals"


@register(
    "quickstart",
    "NODE against ANODE on the 1-D g(x), and a small ODE-Net on MNIST digits "
    "(Fashion-MNIST or a toy set when absent); a Markdown report with plots",
)
def quickstart(options: RunOptions, log: Log) -> dict[str, Any]:
    """Train the toy NODE and ANODE and an ODE-Net, then write ``report.md``."""
    started = time.perf_counter()
    out = options.out
    common: dict[str, Any] = {
        "seed": options.seed,
        "device": options.device,
        "data_dir": options.data_dir,
        "progress": options.progress,
    }
    runs: dict[str, dict[str, Any]] = {}
    for name, model in TOY:
        config = TrainConfig(
            model=model,
            dataset="annuli-1d",
            epochs=options.epochs_or(3 if options.quick else 15),
            batch_size=64,
            optimizer="adam",
            lr=3e-3,
            train_size=600 if options.quick else None,
            test_size=300 if options.quick else None,
            **common,
        )
        runs[name] = train(config, out / name, resume=options.resume, log=prefixed(log, name))
    dataset = _image_dataset(options.data_dir)
    image_model = "odenet" if dataset != "spirals" else "toy-anode"
    config = TrainConfig(
        model=image_model,
        dataset=dataset,
        epochs=options.epochs_or(1 if options.quick else 2),
        batch_size=32 if options.quick else 64,
        lr=0.1,
        train_size=256 if options.quick else None,
        test_size=256 if options.quick else None,
        **common,
    )
    runs["image"] = train(config, out / "image", resume=options.resume, log=prefixed(log, "image"))
    _plot_toy(out, options.device)
    seconds = time.perf_counter() - started
    summary = {
        "experiment": "quickstart",
        "quick": options.quick,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_seconds": seconds,
        "runs": runs,
    }
    write_json(out / "results.json", summary)
    write_text(out / "report.md", _report(summary, options))
    log(f"quickstart: {seconds:.0f} s; report in {out / 'report.md'}")
    return summary


def _plot_toy(out: Path, device: str) -> None:
    """What the NODE and ANODE learned of g(x), and their NFE and loss per epoch."""
    import json

    from ..data import annuli

    plt = pyplot()

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    data = annuli(400, dim=1, generator=torch.Generator().manual_seed(0))
    x = torch.linspace(-1.6, 1.6, 400)[:, None]
    axes[0].scatter(data.inputs[:, 0], data.targets[:, 0], s=4, c="0.6", label="g(x) samples")
    for name, _ in TOY:
        model, _config = load_model(out / name, "cpu")
        with torch.no_grad():
            axes[0].plot(x[:, 0], model(x)[:, 0], label=name.upper())
        metrics = json.loads((out / name / "metrics.json").read_text(encoding="utf-8"))
        epochs = [m["epoch"] for m in metrics]
        axes[1].plot(epochs, [m["train_loss"] for m in metrics], "o-", label=name.upper())
        axes[2].plot(epochs, [m["nfe_forward"] for m in metrics], "o-", label=name.upper())
    axes[0].set(xlabel="x", ylabel="prediction", title="learned g(x)")
    axes[1].set(xlabel="epoch", ylabel="train MSE", yscale="log", title="loss")
    axes[2].set(xlabel="epoch", ylabel="forward NFE per batch", title="NFE during training")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(out / "toy.png", fig)


def _size(n: int | None) -> str:
    return "all" if n is None else str(n)


def _report(summary: dict[str, Any], options: RunOptions) -> str:
    runs = summary["runs"]
    mode = " --quick" if options.quick else ""
    lines = [
        "# odebench quickstart",
        "",
        f"`odebench run quickstart{mode}`, {summary['date']}, "
        f"{summary['wall_seconds']:.0f} s in all.",
        "",
        "## NODE against ANODE on g(x) in one dimension",
        "",
        "g(x) = -1 for |x| <= 0.5 and +1 for 1 <= |x| <= 1.5 (Dupont et al., 2019). A NODE",
        "on a line is an increasing map, so it cannot send the inner points below the outer",
        "ones on both sides; an ANODE, with five extra zero dimensions, can.",
        "",
        "| model | parameters | epochs | train MSE | test MSE | forward NFE | backward NFE |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, _ in TOY:
        r = runs[name]
        f = r["final"]
        lines.append(
            f"| {name.upper()} | {r['parameters']} | {r['epochs']} | {fmt(f['train_loss'])} | "
            f"{fmt(f['test_loss'])} | {fmt(f['nfe_forward'], '.1f')} | "
            f"{fmt(f['nfe_backward'], '.1f')} |"
        )
    image = runs["image"]
    f = image["final"]
    lines += [
        "",
        "![learned g(x), loss and NFE](toy.png)",
        "",
        f"## {image['model']} on {image['dataset']}",
        "",
        f"Trained on {_size(image['config']['train_size'])} examples, evaluated on "
        f"{_size(image['config']['test_size'])}; SGD with momentum 0.9, learning rate "
        f"{image['config']['lr']}, batch {image['config']['batch_size']}.",
        "",
        "| model | parameters | epochs | test accuracy | test loss | forward NFE | images/s | "
        "train time (s) |",
        "|---|---|---|---|---|---|---|---|",
        f"| {image['model']} | {image['parameters']} | {image['epochs']} | "
        f"{fmt(f['test_acc'], '.2f', 100)}% | {fmt(f['test_loss'])} | "
        f"{fmt(f['nfe_forward'], '.1f')} | {fmt(f['images_per_second'], '.0f')} | "
        f"{fmt(image['train_seconds'], '.1f')} |",
        "",
        "![training curves](image/curves.png)",
        "",
        "Every run's configuration, metrics per epoch (JSON, CSV), curves and checkpoint",
        "are in its sub-directory (`node/`, `anode/`, `image/`).",
        "",
    ]
    return "\n".join(lines)

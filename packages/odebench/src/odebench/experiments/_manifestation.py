"""``odebench run manifestation-sweep``: Queiruga et al. (2020), Fig. 9, on MNIST.

Two ContinuousNets with the same channels, ``N_t`` and piecewise-constant basis
``M`` train from the same seed on the same batches, one manifested with forward Euler,
one with RK4 (classic). Each trained model is then evaluated with every
``(scheme, N_t)`` of a grid of schemes x step counts: the same weights, a different
computational graph. The paper's claim: the RK4-trained model's accuracy stays flat
across manifestations, the Euler-trained one's degrades.

Batch norm: the running statistics lag the weights early in training (eval-mode
accuracy far below train-mode accuracy), and a manifestation with other steps sees
other activations. So after training, and again for every evaluated manifestation,
the running statistics are recalibrated: a pass over a few training batches in train
mode without gradients, every piece's statistics the plain average over all the calls
that update them (contnet keeps the statistics of each depth piece as its own
coefficient, updated in place; several stages or steps may fall in one piece).
The trained statistics are restored after each manifestation. A second grid with the
statistics fixed at those of the training manifestation is recorded as well.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import contnet
import torch
from torch import nn

from ..data import Dataset, load_mnist
from ..training import evaluate, find_data, resolve_device
from ..training._io import pyplot, save_png, write_json, write_text
from ._registry import Log, RunOptions, fmt, held, one_thread, register

#: The schemes of the grid (rows of Fig. 9).
SCHEMES: tuple[str, ...] = ("euler", "midpoint", "rk4", "rk4_38")
#: The training schemes compared.
TRAINED: tuple[str, ...] = ("euler", "rk4")
#: Flat: the RK4-trained accuracy range over the grid at most this (absolute).
FLAT_RANGE = 0.05
#: Degrades: the Euler-trained accuracy range over the grid at least this (absolute).
DEGRADED_RANGE = 0.10

#: What Queiruga et al. (2020), Fig. 9 and its text, report.
PUBLISHED: dict[str, Any] = {
    "rk4_trained": "accuracy does not degrade when time steps are added (or removed, up to a "
    "point) or the scheme is exchanged (Fig. 9, CIFAR-10/100); numbers not published",
    "euler_trained": "test error changes with the manifestation (Fig. 9); numbers not published",
    "data": "CIFAR-10 and CIFAR-100 in the paper; MNIST here",
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """The sizes of one run (full or quick mode)."""

    train_size: int | None
    test_size: int | None
    epochs: int
    batch_size: int
    lr: float
    channels: tuple[int, int, int]
    n_steps: int
    grid_steps: tuple[int, ...]
    recal_batches: int
    eval_batch: int


def settings(options: RunOptions) -> Settings:
    """The settings of ``options``' mode.

    Full: all of MNIST, 3 epochs, batch 128, Adam (lr 1e-3), channels (16, 32, 64),
    ``N_t = M = 4``, step counts 2 ... 16, 20 recalibration batches. Quick: 512
    training and 256 test images, 2 epochs, batch 32, channels (8, 16, 32),
    ``N_t = M = 2``, step counts 1 ... 8, 4 recalibration batches.

    Example:
        >>> settings(RunOptions(out=Path("x"), quick=True)).grid_steps
        (1, 2, 4, 8)
    """
    if options.quick:
        return Settings(
            1024, 256, options.epochs_or(3), 32, 2e-3, (8, 16, 32), 2, (1, 2, 4, 8), 4, 256
        )
    return Settings(
        None, None, options.epochs_or(3), 128, 1e-3, (16, 32, 64), 4, (2, 4, 8, 16), 20, 500
    )


def _batches(data: Dataset, batch: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))
    for i in range(len(order) // batch):
        idx = order[i * batch : (i + 1) * batch]
        yield data.inputs[idx], data.targets[idx]


def _train(
    method: str, data: Dataset, s: Settings, options: RunOptions, device: torch.device
) -> tuple[contnet.ContinuousNet, float]:
    """Adam from the seed's initialisation; returns the net and its last-epoch train accuracy."""
    torch.manual_seed(options.seed)
    net = contnet.ContinuousNet(
        in_channels=1,
        channels=s.channels,
        n_steps=s.n_steps,
        solver=cast(Any, method),
        basis="piecewise_constant",
    ).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=s.lr)
    net.train()
    correct = seen = 0
    for epoch in range(s.epochs):
        correct = seen = 0
        for images, labels in _batches(data, s.batch_size, options.seed + epoch):
            x, y = data.normalize(images.to(device)), labels.to(device)
            opt.zero_grad(set_to_none=True)
            logits = net(x)
            nn.functional.cross_entropy(logits, y).backward()  # type: ignore[no-untyped-call]
            opt.step()
            correct += int((logits.argmax(1) == y).sum())
            seen += len(y)
    return net, correct / max(seen, 1)


def _batch_norms(net: contnet.ContinuousNet) -> list[nn.modules.batchnorm._BatchNorm]:
    """Every batch norm of ``net``, the residual modules' templates included."""
    modules = list(net.modules())
    for block in net.ode_blocks():
        modules += list(block.continuous.module.modules())
    return [m for m in modules if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def recalibrate(
    net: contnet.ContinuousNet, data: Dataset, batches: int, batch: int, seed: int
) -> None:
    """Running statistics of ``net`` as the plain average over every batch-norm call.

    Train mode, no gradients, ``batches`` training batches. Before each call a batch
    norm's momentum is set to ``1 / (n + 1)``, ``n`` the calls so far on the statistics
    tensor it is about to update (each depth piece of a residual module has its own,
    visited once per stage and step in it), so every piece ends with the average of
    all its calls and the old statistics are discarded. The momenta are restored and
    ``net`` is left in eval mode.
    """
    norms = _batch_norms(net)
    momenta = [m.momentum for m in norms]
    counts: dict[int, int] = {}

    def count(module: nn.Module, args: object) -> None:
        bn = cast(nn.modules.batchnorm._BatchNorm, module)
        key = cast(torch.Tensor, bn.running_mean).data_ptr()
        n = counts.get(key, 0)
        bn.momentum = 1.0 / (n + 1)
        counts[key] = n + 1

    hooks = [m.register_forward_pre_hook(count) for m in norms]
    device = next(net.parameters()).device
    net.train()
    try:
        with torch.no_grad():
            for k, (images, _) in enumerate(_batches(data, batch, seed)):
                if k >= batches:
                    break
                net(data.normalize(images.to(device)))
    finally:
        for hook in hooks:
            hook.remove()
        for m, momentum in zip(norms, momenta):
            m.momentum = momentum
        net.eval()


def _accuracy(net: nn.Module, test: Dataset, batch: int, device: torch.device) -> float:
    acc = evaluate(net, test, "cross_entropy", batch_size=batch, device=device)["acc"]
    assert acc is not None  # classification
    return acc


def _grid(
    net: contnet.ContinuousNet,
    train: Dataset,
    test: Dataset,
    s: Settings,
    seed: int,
    device: torch.device,
    recal: bool,
) -> list[list[float]]:
    """Test accuracy of every manifestation: rows ``SCHEMES``, columns ``grid_steps``."""
    trained = {name: b.detach().clone() for name, b in net.named_buffers()}

    def metric(model: contnet.ContinuousNet) -> float:
        if recal:
            recalibrate(model, train, s.recal_batches, s.batch_size, seed)
        acc = _accuracy(model, test, s.eval_batch, device)
        with torch.no_grad():
            for name, b in net.named_buffers():
                b.copy_(trained[name])
        return acc

    sweep = contnet.manifestation_sweep(
        net, metric, solvers=cast(Any, SCHEMES), n_steps=s.grid_steps
    )
    return [[sweep[(method, n)] for n in s.grid_steps] for method in SCHEMES]


def _range(grid: list[list[float]], steps: tuple[int, ...], least: int = 0) -> float:
    """Largest minus smallest accuracy over the columns with ``N_t >= least``."""
    values = [v for row in grid for v, n in zip(row, steps) if n >= least]
    return max(values) - min(values)


@register(
    "manifestation-sweep",
    "Queiruga et al. (2020) Fig. 9: Euler- and RK4-trained ContinuousNets evaluated over "
    "schemes x step counts on MNIST",
)
def manifestation_sweep(options: RunOptions, log: Log) -> dict[str, Any]:
    """Train both nets, sweep the manifestations, write figures and ``report.md``."""
    started = time.perf_counter()
    try:
        root, kind = find_data("mnist", options.data_dir), "mnist"
    except FileNotFoundError:
        root, kind = find_data("fashion-mnist", options.data_dir), "fashion-mnist"
    s = settings(options)
    if s.epochs < 1:
        raise ValueError(f"manifestation-sweep needs at least one epoch, got {s.epochs}.")
    device = resolve_device(options.device)
    gen = torch.Generator().manual_seed(options.seed)
    train = load_mnist(root, train=True, kind=kind).subset(s.train_size, generator=gen)
    test = load_mnist(root, train=False, kind=kind).subset(s.test_size, generator=gen)
    models: dict[str, dict[str, Any]] = {}
    with one_thread(options.quick):
        for scheme in TRAINED:
            t0 = time.perf_counter()
            net, train_acc = _train(scheme, train, s, options, device)
            recalibrate(net, train, s.recal_batches, s.batch_size, options.seed)
            test_acc = _accuracy(net, test, s.eval_batch, device)
            grid = _grid(net, train, test, s, options.seed, device, recal=True)
            fixed = _grid(net, train, test, s, options.seed, device, recal=False)
            models[scheme] = {
                "train_accuracy": train_acc,
                "test_accuracy": test_acc,
                "grid": grid,
                "grid_fixed_stats": fixed,
                "range": _range(grid, s.grid_steps),
                "range_fixed_stats": _range(fixed, s.grid_steps),
                "range_refined": _range(grid, s.grid_steps, s.n_steps),
                "range_refined_fixed_stats": _range(fixed, s.grid_steps, s.n_steps),
                "seconds": time.perf_counter() - t0,
            }
            log(
                f"[{scheme}-trained] train acc {train_acc:.3f}, test acc {test_acc:.3f}, "
                f"grid range {models[scheme]['range']:.3f}"
            )
    out = options.out
    _plot_heatmaps(out / "fig9_heatmaps.png", models, s)
    _plot_lines(out / "accuracy_vs_steps.png", models, s)
    summary: dict[str, Any] = {
        "experiment": "manifestation-sweep",
        "quick": options.quick,
        "data": kind,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": dataclasses.asdict(s) | {"schemes": list(SCHEMES), "seed": options.seed},
        "models": models,
        "published": PUBLISHED,
        "thresholds": {"flat_range": FLAT_RANGE, "degraded_range": DEGRADED_RANGE},
        "conclusions": _conclusions(models),
    }
    summary["wall_seconds"] = time.perf_counter() - started
    write_json(out / "results.json", summary)
    write_text(out / "report.md", _report(summary, options))
    log(f"manifestation-sweep: report in {out / 'report.md'}")
    return summary


def _conclusions(models: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """Fig. 9's claims decided on our numbers.

    ``range``: over the whole grid; ``range_refined``: over the columns with at least
    the training ``N_t`` (the paper: no degradation when steps are added, fewer steps
    only "up to a point"). Flat and degraded use :data:`FLAT_RANGE` and
    :data:`DEGRADED_RANGE` on the refined columns.
    """
    rk4, euler = models["rk4"], models["euler"]
    return {
        "rk4_range_below_euler_range": rk4["range"] < euler["range"],
        "rk4_range_below_euler_range_refined": rk4["range_refined"] < euler["range_refined"],
        "rk4_range_below_euler_range_fixed_stats": rk4["range_fixed_stats"]
        < euler["range_fixed_stats"],
        "rk4_trained_flat_refined": rk4["range_refined"] <= FLAT_RANGE,
        "euler_trained_degrades_refined": euler["range_refined"] >= DEGRADED_RANGE,
    }


def _plot_heatmaps(path: Path, models: dict[str, dict[str, Any]], s: Settings) -> None:
    """Fig. 9 analogue: test accuracy over schemes x N_t, one panel per trained model."""
    plt = pyplot()
    values = [v for m in models.values() for row in m["grid"] for v in row]
    lo, hi = min(values), max(values)
    fig, axes = plt.subplots(
        1, len(models), figsize=(4.6 * len(models) + 1, 3.6), layout="constrained"
    )
    for ax, (scheme, m) in zip(axes, models.items()):
        image = ax.imshow(m["grid"], vmin=lo, vmax=hi, cmap="viridis", aspect="auto")
        for i, row in enumerate(m["grid"]):
            for j, v in enumerate(row):
                ax.text(j, i, f"{100 * v:.1f}", ha="center", va="center", fontsize=8,
                        color="w" if v < (lo + hi) / 2 else "k")  # fmt: skip
        ax.set_xticks(range(len(s.grid_steps)), [str(n) for n in s.grid_steps])
        ax.set_yticks(range(len(SCHEMES)), list(SCHEMES))
        ax.set(xlabel="N_t at evaluation", title=f"trained [{scheme}, N_t={s.n_steps}]")
    fig.colorbar(image, ax=list(axes), label="test accuracy")
    save_png(path, fig, dpi=90)


def _plot_lines(path: Path, models: dict[str, dict[str, Any]], s: Settings) -> None:
    """Test accuracy against N_t, one line per evaluation scheme, one panel per model."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(models), figsize=(4.5 * len(models), 3.4), sharey=True)
    for ax, (scheme, m) in zip(axes, models.items()):
        for name, row in zip(SCHEMES, m["grid"]):
            ax.plot(s.grid_steps, [100 * v for v in row], "o-", label=name)
        ax.axvline(s.n_steps, color="0.5", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xticks(s.grid_steps, [str(n) for n in s.grid_steps])
        ax.set(xlabel="N_t at evaluation", title=f"trained with {scheme}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (%)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


#: The two grids and how their batch-norm statistics were set.
GRID_LABELS = {
    "grid": "recalibrated per manifestation",
    "grid_fixed_stats": "statistics of the training manifestation",
}


def _report(summary: dict[str, Any], options: RunOptions) -> str:
    mode = " --quick" if options.quick else ""
    s = summary["settings"]
    models = summary["models"]
    claim = summary["conclusions"]
    lines = [
        "# Queiruga et al. (2020), Fig. 9: manifestation sweep on MNIST",
        "",
        f"`odebench run manifestation-sweep{mode}`, {summary['date']}, "
        f"{summary['wall_seconds']:.0f} s in all, data {summary['data']}. ContinuousNet "
        f"channels {tuple(s['channels'])}, N_t = M = {s['n_steps']} (piecewise constant), "
        f"{s['epochs']} epoch(s) of {'all' if s['train_size'] is None else s['train_size']} "
        f"training images, Adam lr {s['lr']:g}, batch {s['batch_size']}; "
        f"{'all' if s['test_size'] is None else s['test_size']} test images. Batch-norm "
        f"statistics recalibrated on {s['recal_batches']} training batches per manifestation.",
        "",
        "## Published beside ours",
        "",
        "| Quantity | Published | Ours |",
        "|---|---|---|",
    ]
    for scheme in TRAINED:
        m = models[scheme]
        lines.append(
            f"| {scheme}-trained: accuracy range over the grid | "
            f"{PUBLISHED[scheme + '_trained']} | {fmt(m['range'], '.1f', 100)} points "
            f"(fixed statistics: {fmt(m['range_fixed_stats'], '.1f', 100)}) |"
        )
    for scheme in TRAINED:
        m = models[scheme]
        lines.append(
            f"| {scheme}-trained: test accuracy at its own manifestation | not published | "
            f"{fmt(m['test_accuracy'], '.1f', 100)}% "
            f"(train {fmt(m['train_accuracy'], '.1f', 100)}%) |"
        )
    for scheme in TRAINED:
        m = models[scheme]
        lines.append(
            f"| {scheme}-trained: range over N_t >= {s['n_steps']} | not published | "
            f"{fmt(m['range_refined'], '.1f', 100)} points (fixed statistics: "
            f"{fmt(m['range_refined_fixed_stats'], '.1f', 100)}) |"
        )
    lines += ["", "## Grids (test accuracy, %)", ""]
    for scheme in TRAINED:
        for key, label in GRID_LABELS.items():
            lines += [
                f"Trained [{scheme}, N_t = {s['n_steps']}], {label}:",
                "",
                "| scheme | " + " | ".join(f"N_t={n}" for n in s["grid_steps"]) + " |",
                "|---" * (len(s["grid_steps"]) + 1) + "|",
            ]
            for name, row in zip(SCHEMES, models[scheme][key]):
                lines.append(f"| {name} | " + " | ".join(fmt(v, ".1f", 100) for v in row) + " |")
            lines.append("")
    lines += [
        "## Claims",
        "",
        "- RK4-trained range below Euler-trained range, whole grid: "
        f"{held(claim['rk4_range_below_euler_range'])}.",
        f"- The same over N_t >= {s['n_steps']}: "
        f"{held(claim['rk4_range_below_euler_range_refined'])}.",
        "- The same with the statistics of the training manifestation, whole grid: "
        f"{held(claim['rk4_range_below_euler_range_fixed_stats'])}.",
        f"- RK4-trained flat (range over N_t >= {s['n_steps']} at most "
        f"{FLAT_RANGE * 100:g} points): {held(claim['rk4_trained_flat_refined'])}.",
        f"- Euler-trained degrades (range over N_t >= {s['n_steps']} at least "
        f"{DEGRADED_RANGE * 100:g} points): {held(claim['euler_trained_degrades_refined'])}.",
        "",
        "![Fig. 9 analogue](fig9_heatmaps.png)",
        "",
        "![accuracy against N_t](accuracy_vs_steps.png)",
        "",
    ]
    return "\n".join(lines)

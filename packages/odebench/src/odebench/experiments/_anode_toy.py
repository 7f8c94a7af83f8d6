"""``odebench run anode-toy``: Dupont et al. (2019)'s toy experiments, NODE against ANODE.

g(x) in one and two dimensions over several seeds (Figs. 5-8, Prop. 1 of the paper),
and the generalisation test of Fig. 9, where a slice of the plane is left out of the
training set and the models are evaluated on it.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..data import annuli
from ..models import build_model, ode_layers
from ..training import TrainConfig, load_model, resolve_device, train
from ..training._data import load_splits
from ..training._io import pyplot, save_png, write_json, write_text
from ._registry import Log, RunOptions, command, fmt, mean_std, plus_minus, prefixed, register

MODELS = (("node", "toy-node"), ("anode", "toy-anode"))
"""``(short name, model name)`` of the two models compared."""
DIMS = (1, 2)
"""The dimensions of g(x)."""
SLICE = (0.0, math.pi / 5)
"""Angles of the points left out of the training set in the generalisation test."""

# Thresholds that decide whether a claim of the paper held (stated in the report).
NEAR_ZERO = 0.05
"""An MSE below this is "about zero"."""
FLOOR_MARGIN = 0.9
"""A 1-D NODE "sits at the floor" when its train MSE is at least this times the floor."""
DOUBLES = 1.5
"""NFE growth (last epoch over first) at least this: "nearly doubles"."""
HARDLY = 1.25
"""NFE growth at most this: "hardly increases"."""
LARGE_GAP = 0.1
"""Held-out-slice MSE minus train MSE at least this: "a large generalisation gap"."""


@dataclass(frozen=True)
class Settings:
    """The sizes of one run of the experiment.

    Args:
        seeds: training runs per model and dimension (seeds ``base, base + 1, ...``).
        epochs: epochs of every run, the slice test's included.
        lr: Adam's learning rate.
        batch_size: the batch of every run.
        train_size: training points per run (``None``: all 3000, the paper's 1000 inner
            and 2000 outer ones).
        test_size: test points per run (``None``: all 1000).
        slice_points: points drawn for the slice test, before the slice is removed.
    """

    seeds: int
    epochs: int
    lr: float
    batch_size: int
    train_size: int | None
    test_size: int | None
    slice_points: int


def settings(options: RunOptions) -> Settings:
    """The full (paper) or quick settings of ``options``; ``options.epochs`` overrides.

    Example:
        >>> from pathlib import Path
        >>> settings(RunOptions(out=Path("x"), quick=True, epochs=2)).epochs
        2
        >>> settings(RunOptions(out=Path("x"))).lr
        0.001
    """
    if options.quick:
        return Settings(
            seeds=2,
            epochs=options.epochs_or(6),
            lr=3e-3,
            batch_size=64,
            train_size=960,
            test_size=300,
            slice_points=1200,
        )
    return Settings(
        seeds=5,
        epochs=options.epochs_or(30),
        lr=1e-3,
        batch_size=64,
        train_size=None,
        test_size=None,
        slice_points=3000,
    )


def monotone_floor(inputs: Tensor, targets: Tensor) -> float:
    """The least MSE any monotone map ``x -> prediction`` reaches on 1-D g(x) data.

    A 1-D NODE's flow is an increasing map of the line and its readout is affine, so
    its prediction is monotone in ``x``. On g(x) the best nondecreasing fit pools the
    left shell (+1, ``a`` points) with the ball (-1, ``b`` points), costing
    ``4ab / (a + b)`` in squared error, and keeps the right shell at +1; the best
    nonincreasing fit does the same on the right. About 2/3 for the paper's sizes.

    Args:
        inputs: ``(n, 1)`` points.
        targets: ``(n, 1)`` their g(x), -1 or +1.

    Returns:
        The floor, a mean squared error.

    Example:
        >>> x = torch.tensor([[-1.2], [-0.2], [0.3], [1.1]])
        >>> y = torch.tensor([[1.0], [-1.0], [-1.0], [1.0]])
        >>> round(monotone_floor(x, y), 4)
        0.6667
    """
    x, y = inputs[:, 0], targets[:, 0]
    inner = int((y < 0).sum())
    left = int(((y > 0) & (x < 0)).sum())
    right = int(((y > 0) & (x > 0)).sum())

    def pooled(outer: int) -> float:
        return 4.0 * outer * inner / (outer + inner) if outer + inner else 0.0

    return min(pooled(left), pooled(right)) / max(len(y), 1)


def _run_dir(out: Path, dim: int, name: str, seed: int) -> Path:
    return out / f"{dim}d" / name / f"seed{seed}"


def _config(model: str, dim: int, seed: int, s: Settings, options: RunOptions) -> TrainConfig:
    return TrainConfig(
        model=model,
        dataset=f"annuli-{dim}d",
        epochs=s.epochs,
        batch_size=s.batch_size,
        optimizer="adam",
        lr=s.lr,
        train_size=s.train_size,
        test_size=s.test_size,
        tol=1e-3,
        solver="dopri5",
        seed=seed,
        device=options.device,
        progress=options.progress,
    )


def _summary(metrics: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Final MSEs (mean, std over seeds) and the forward NFE at the first and last epoch."""
    train_mse = mean_std([m[-1]["train_loss"] for m in metrics])
    test_mse = mean_std([m[-1]["test_loss"] for m in metrics])
    first = mean_std([m[0]["nfe_forward"] for m in metrics])[0]
    last = mean_std([m[-1]["nfe_forward"] for m in metrics])[0]
    return {
        "train_mse_mean": train_mse[0],
        "train_mse_std": train_mse[1],
        "test_mse_mean": test_mse[0],
        "test_mse_std": test_mse[1],
        "nfe_first": first,
        "nfe_last": last,
        "nfe_growth": last / first if first and last is not None else None,
        "seeds": len(metrics),
    }


def _slice_mask(inputs: Tensor) -> Tensor:
    """The points whose angle lies in :data:`SLICE`."""
    angle = torch.atan2(inputs[:, 1], inputs[:, 0])
    return (angle >= SLICE[0]) & (angle <= SLICE[1])


def slice_test(model_name: str, seed: int, s: Settings, device: torch.device) -> dict[str, float]:
    """Train on 2-D g(x) without the slice of :data:`SLICE`, then evaluate on that slice.

    A plain loop: Adam, batch ``s.batch_size``, ``s.epochs`` epochs, dopri5 at
    ``tol = 1e-3``, the same model builder as :func:`odebench.training.train`, seeded
    (initialisation, data and order) without touching the global random state.

    Args:
        model_name: ``"toy-node"`` or ``"toy-anode"``.
        seed: the seed of the data, the initialisation and the batch order.
        s: the experiment's settings.
        device: where to train.

    Returns:
        ``train_mse`` (on the points kept), ``slice_mse`` (on the points removed) and
        their counts.
    """
    data = annuli(s.slice_points, dim=2, generator=torch.Generator().manual_seed(10_007 + seed))
    held = _slice_mask(data.inputs)
    x_train, y_train = data.inputs[~held].to(device), data.targets[~held].to(device)
    x_held, y_held = data.inputs[held].to(device), data.targets[held].to(device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        model = build_model(
            model_name, in_channels=2, num_classes=1, image_size=0, tol=1e-3, solver="dopri5"
        ).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=s.lr)
        order_gen = torch.Generator().manual_seed(seed)
        model.train()
        for _ in range(s.epochs):
            order = torch.randperm(len(x_train), generator=order_gen).to(device)
            for start in range(0, len(order) - s.batch_size + 1, s.batch_size):
                idx = order[start : start + s.batch_size]
                loss = nn.functional.mse_loss(model(x_train[idx]), y_train[idx])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
        model.eval()
        with torch.no_grad():
            train_mse = float(nn.functional.mse_loss(model(x_train), y_train))
            slice_mse = float(nn.functional.mse_loss(model(x_held), y_held))
    return {
        "train_mse": train_mse,
        "slice_mse": slice_mse,
        "train_points": len(x_train),
        "slice_points": len(x_held),
    }


@register(
    "anode-toy",
    "Dupont et al.'s toy experiments: NODE against ANODE on g(x) in 1-D and 2-D over "
    "seeds (loss, NFE, flows, features) and the held-out-slice generalisation test",
)
def anode_toy(options: RunOptions, log: Log) -> dict[str, Any]:
    """Train NODEs and ANODEs on g(x), run the slice test, write figures and ``report.md``."""
    started = time.perf_counter()
    out = options.out
    s = settings(options)
    seeds = [options.seed + k for k in range(s.seeds)]
    device = resolve_device(options.device)
    metrics: dict[int, dict[str, list[list[dict[str, Any]]]]] = {}
    dims: dict[str, dict[str, Any]] = {}
    for dim in DIMS:
        metrics[dim] = {}
        dims[f"{dim}d"] = {}
        for name, model in MODELS:
            runs = []
            for seed in seeds:
                run_dir = _run_dir(out, dim, name, seed)
                train(
                    _config(model, dim, seed, s, options),
                    run_dir,
                    resume=options.resume,
                    log=prefixed(log, f"{dim}d {name} seed {seed}"),
                )
                runs.append(json.loads((run_dir / "metrics.json").read_text(encoding="utf-8")))
            metrics[dim][name] = runs
            dims[f"{dim}d"][name] = _summary(runs)
    floors = [
        monotone_floor(*_inputs_targets(_config("toy-node", 1, seed, s, options))) for seed in seeds
    ]
    slices: dict[str, dict[str, Any]] = {}
    for name, model in MODELS:
        tests = [slice_test(model, seed, s, device) for seed in seeds]
        train_mse = mean_std([t["train_mse"] for t in tests])
        slice_mse = mean_std([t["slice_mse"] for t in tests])
        slices[name] = {
            "train_mse_mean": train_mse[0],
            "train_mse_std": train_mse[1],
            "slice_mse_mean": slice_mse[0],
            "slice_mse_std": slice_mse[1],
            "gap": None
            if train_mse[0] is None or slice_mse[0] is None
            else slice_mse[0] - train_mse[0],
            "train_points": tests[0]["train_points"],
            "slice_points": tests[0]["slice_points"],
        }
        log(f"[slice {name}] train MSE {fmt(train_mse[0])}, held-out slice MSE {fmt(slice_mse[0])}")
    _plot_curves(out, metrics, "train_loss", "MSE", "loss.png")
    _plot_curves(out, metrics, "nfe_forward", "forward NFE per batch", "nfe.png")
    _plot_flows_1d(out, seeds[0])
    _plot_features_2d(out, seeds[0])
    _plot_slice(out, slices, s, seeds[0])
    summary: dict[str, Any] = {
        "experiment": "anode-toy",
        "quick": options.quick,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command("anode-toy", options),
        "settings": asdict(s),
        "seeds": seeds,
        "dims": dims,
        "monotone_floor_1d": statistics.fmean(floors),
        "slice": {"angles": list(SLICE), **slices},
    }
    summary["claims"] = claims(summary)
    summary["wall_seconds"] = time.perf_counter() - started
    write_json(out / "results.json", summary)
    write_text(out / "report.md", report(summary))
    log(f"anode-toy: {summary['wall_seconds']:.0f} s; report in {out / 'report.md'}")
    return summary


def _inputs_targets(config: TrainConfig) -> tuple[Tensor, Tensor]:
    train_set, _ = load_splits(config)
    return train_set.inputs, train_set.targets


def _lt(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and a < b


def claims(summary: dict[str, Any]) -> dict[str, bool]:
    """Which of the paper's claims held in a run, from its numbers.

    Args:
        summary: the experiment's results (``dims``, ``monotone_floor_1d``, ``slice``).

    Returns:
        ``{claim: held}`` for the claims of :data:`CLAIMS`.
    """
    d1, d2 = summary["dims"]["1d"], summary["dims"]["2d"]
    floor = summary["monotone_floor_1d"]
    node_growth = [d[k]["nfe_growth"] for d in (d1, d2) for k in ("node",)]
    anode_growth = [d[k]["nfe_growth"] for d in (d1, d2) for k in ("anode",)]
    sl = summary["slice"]
    node_1d = d1["node"]["train_mse_mean"]
    return {
        "node_1d_at_floor": node_1d is not None and node_1d >= FLOOR_MARGIN * floor,
        "anode_1d_near_zero": _lt(d1["anode"]["train_mse_mean"], NEAR_ZERO),
        "anode_1d_below_node": _lt(d1["anode"]["train_mse_mean"], node_1d),
        "node_nfe_nearly_doubles": all(g is not None and g >= DOUBLES for g in node_growth),
        "anode_nfe_hardly_increases": all(g is not None and g <= HARDLY for g in anode_growth),
        "node_slice_gap_large": sl["node"]["gap"] is not None and sl["node"]["gap"] >= LARGE_GAP,
        "anode_slice_near_zero": _lt(sl["anode"]["slice_mse_mean"], NEAR_ZERO),
    }


CLAIMS = {
    "node_1d_at_floor": (
        "Prop. 1: a 1-D NODE cannot fit g(x) and stays at the MSE floor of monotone maps",
        f"1-D NODE train MSE >= {FLOOR_MARGIN} x the floor",
    ),
    "anode_1d_near_zero": (
        "ANODE fits 1-D g(x), MSE about 0",
        f"1-D ANODE train MSE < {NEAR_ZERO}",
    ),
    "anode_1d_below_node": ("ANODE fits 1-D g(x) better than NODE", "ANODE MSE < NODE MSE"),
    "node_nfe_nearly_doubles": (
        'Fig. 8: NODE NFE "nearly doubles" during training',
        f"NFE last / first epoch >= {DOUBLES} in 1-D and 2-D",
    ),
    "anode_nfe_hardly_increases": (
        'Fig. 8: ANODE NFE "hardly increases"',
        f"NFE last / first epoch <= {HARDLY} in 1-D and 2-D",
    ),
    "node_slice_gap_large": (
        "Fig. 9: NODEs show a large generalisation gap",
        f"slice MSE - train MSE >= {LARGE_GAP}",
    ),
    "anode_slice_near_zero": (
        "Fig. 9: ANODEs reach near-zero validation loss",
        f"ANODE slice MSE < {NEAR_ZERO}",
    ),
}
"""``{claim: (what the paper says, the test applied to our numbers)}``."""


def _cell(d: dict[str, Any], model: str, figure: str) -> str:
    """``mean ± std`` of ``figure`` for ``model`` in one dimension's summary."""
    return plus_minus(d[model][f"{figure}_mean"], d[model][f"{figure}_std"])


def report(summary: dict[str, Any]) -> str:
    """The Markdown report of a run: our numbers beside the published ones, the figures.

    Args:
        summary: the content of ``results.json``.

    Returns:
        The report's text.
    """
    st = summary["settings"]
    floor = summary["monotone_floor_1d"]
    d1, d2 = summary["dims"]["1d"], summary["dims"]["2d"]
    sl = summary["slice"]
    train_size = "3000 (1000 inner + 2000 outer)" if st["train_size"] is None else st["train_size"]
    lines = [
        "# NODE against ANODE on Dupont et al.'s toy problems",
        "",
        f"`{summary['command']}`, {summary['date']}, {summary['wall_seconds']:.0f} s in all.",
        "",
        f"Settings: seeds {', '.join(str(x) for x in summary['seeds'])}; {st['epochs']} "
        f"epochs; Adam, learning rate {st['lr']:g}, batch {st['batch_size']}; dopri5 at "
        f"rtol = atol = 1e-3; {train_size} training points; "
        f"{'1000' if st['test_size'] is None else st['test_size']} test points. "
        "Paper: Adam 1e-3, batch 64, 30 (repo) or 50 (appendix) epochs, 1000 inner + 2000 "
        "outer points, p = 5.",
        "",
        "## Ours against the paper",
        "",
        "| figure | NODE (ours) | ANODE (ours) | published |",
        "|---|---|---|---|",
        f"| 1-D train MSE | {_cell(d1, 'node', 'train_mse')} | "
        f"{_cell(d1, 'anode', 'train_mse')} | "
        "NODE at a floor (1.0001 on the ±1 crossing map of Prop. 1, replication), ANODE "
        "~0 (0.0000) |",
        f"| 1-D test MSE | {_cell(d1, 'node', 'test_mse')} | "
        f"{_cell(d1, 'anode', 'test_mse')} | not published |",
        f"| 2-D train MSE | {_cell(d2, 'node', 'train_mse')} | "
        f"{_cell(d2, 'anode', 'train_mse')} | "
        "not published (curves only, Fig. 7) |",
        f"| 2-D test MSE | {_cell(d2, 'node', 'test_mse')} | "
        f"{_cell(d2, 'anode', 'test_mse')} | not published |",
    ]
    for dim, d in (("1-D", d1), ("2-D", d2)):
        n, a = d["node"], d["anode"]
        lines.append(
            f"| {dim} forward NFE, first → last epoch (growth) | "
            f"{fmt(n['nfe_first'], '.1f')} → {fmt(n['nfe_last'], '.1f')} "
            f"(×{fmt(n['nfe_growth'], '.2f')}) | {fmt(a['nfe_first'], '.1f')} → "
            f"{fmt(a['nfe_last'], '.1f')} (×{fmt(a['nfe_growth'], '.2f')}) | "
            'NODE "nearly doubles", ANODE "hardly increases" (Fig. 8, numbers not '
            "published) |"
        )
    n, a = sl["node"], sl["anode"]
    lines += [
        f"| slice test: train MSE | {plus_minus(n['train_mse_mean'], n['train_mse_std'])} | "
        f"{plus_minus(a['train_mse_mean'], a['train_mse_std'])} | not published |",
        f"| slice test: held-out slice MSE | {plus_minus(n['slice_mse_mean'], n['slice_mse_std'])} "
        f"| {plus_minus(a['slice_mse_mean'], a['slice_mse_std'])} | NODE large gap, ANODE near "
        "zero (Fig. 9, numbers not published) |",
        "",
        f"The 1-D NODE's prediction is a monotone function of x (its flow is an increasing "
        f"map of the line, its readout affine), so its MSE on g(x) cannot go below "
        f"**{floor:.3f}**, the best monotone fit of our training sets (2/3 for equal "
        "thirds). The replication's 1.0001 is the floor of a different map, Prop. 1's "
        "x = ±1 -> ∓1; the paper gives no number for g(x).",
        "",
        "## Which claims held",
        "",
        "| the paper says | our test | held |",
        "|---|---|---|",
    ]
    for key, held in summary["claims"].items():
        said, test = CLAIMS[key]
        lines.append(f"| {said} | {test} | {'yes' if held else '**no**'} |")
    lines += [
        "",
        "Quick runs (`--quick`) train for a few epochs at a higher learning rate: expect the",
        "ANODE's MSE above zero there and the NFE growth to differ from a full run's.",
        "",
        "## Figures",
        "",
        "Loss per epoch (mean over seeds, band from min to max; dashed: test):",
        "",
        "![loss curves](loss.png)",
        "",
        "Forward NFE per batch during training (Fig. 8):",
        "",
        "![NFE per epoch](nfe.png)",
        "",
        "1-D: the learned map against g(x), and the state over depth t for inputs in "
        "[-1.5, 1.5] (NODE trajectories cannot cross; the ANODE's first coordinate can, "
        "since they separate in the augmented dimensions):",
        "",
        "![1-D flows](flows_1d.png)",
        "",
        "2-D: the test points and their features at t = 1 (first two coordinates), "
        "coloured by g(x):",
        "",
        "![2-D features](features_2d.png)",
        "",
        f"Slice test (Fig. 9): points with angle in [0, π/5] "
        f"({sl['node']['slice_points']} of {st['slice_points']}) removed from training and "
        "used for evaluation:",
        "",
        "![slice test](slice.png)",
        "",
        "Every training run (configuration, metrics per epoch, curves, checkpoint) is in "
        "`<dim>d/<model>/seed<N>/`.",
        "",
    ]
    return "\n".join(lines)


COLORS = {"node": "tab:blue", "anode": "tab:orange"}


def _plot_curves(
    out: Path,
    metrics: dict[int, dict[str, list[list[dict[str, Any]]]]],
    key: str,
    label: str,
    filename: str,
) -> None:
    """``key`` per epoch, NODE against ANODE, one panel per dimension."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(DIMS), figsize=(10, 3.6))
    for ax, dim in zip(axes, DIMS, strict=True):
        for name, _ in MODELS:
            keys = [key, "test_loss"] if key == "train_loss" else [key]
            for k in keys:
                runs = metrics[dim][name]
                n = min(len(r) for r in runs)
                values = torch.tensor(
                    [[math.nan if r[e][k] is None else r[e][k] for e in range(n)] for r in runs],
                    dtype=torch.float64,
                )
                epochs = list(range(1, n + 1))
                test = k == "test_loss"
                ax.plot(
                    epochs,
                    values.mean(0),
                    "--" if test else "o-",
                    color=COLORS[name],
                    label=f"{name.upper()}{' test' if test else ''}",
                )
                if not test:
                    ax.fill_between(
                        epochs,
                        values.min(0).values,
                        values.max(0).values,
                        color=COLORS[name],
                        alpha=0.2,
                    )
        ax.set(xlabel="epoch", ylabel=label, title=f"{dim}-D g(x)")
        if key == "train_loss":
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(out / filename, fig, dpi=90)


def _trajectory(model: nn.Module, x: Tensor, ts: list[float]) -> Tensor:
    """The ODE state of ``model`` at depths ``ts`` for inputs ``x``: ``(len(ts), N, d + p)``."""
    layer = ode_layers(model)[0]
    saved = layer.ts
    layer.ts = ts
    try:
        with torch.no_grad():
            z: Tensor = layer(model.get_submodule("augment")(x))
    finally:
        layer.ts = saved
    return z


def _plot_flows_1d(out: Path, seed: int) -> None:
    """1-D: the learned map against g(x), and the state over depth for a few inputs."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    x = torch.linspace(-1.5, 1.5, 300)[:, None]
    g = torch.where(x.abs() <= 0.5, -1.0, torch.where(x.abs() >= 1.0, 1.0, math.nan))
    axes[0].plot(x[:, 0], g[:, 0], color="0.5", lw=3, label="g(x)")
    starts = torch.tensor([-1.4, -1.2, -1.05, -0.45, -0.25, 0.0, 0.25, 0.45, 1.05, 1.2, 1.4])[
        :, None
    ]
    ts = torch.linspace(0.0, 1.0, 41).tolist()
    for ax, (name, _) in zip(axes[1:], MODELS, strict=True):
        model, _config = load_model(_run_dir(out, 1, name, seed), "cpu")
        with torch.no_grad():
            axes[0].plot(x[:, 0], model(x)[:, 0], color=COLORS[name], label=name.upper())
        z = _trajectory(model, starts, ts)
        for i in range(len(starts)):
            inner = abs(float(starts[i, 0])) <= 0.5
            ax.plot(ts, z[:, i, 0], color="tab:blue" if inner else "tab:red", lw=1.2)
        ax.set(
            xlabel="depth t",
            ylabel="h(t), first coordinate",
            title=f"{name.upper()} trajectories (blue: g = -1)",
        )
        ax.grid(alpha=0.3)
    axes[0].set(xlabel="x", ylabel="prediction", title=f"learned map, seed {seed}")
    axes[0].legend(fontsize=8)
    axes[0].grid(alpha=0.3)
    fig.tight_layout()
    save_png(out / "flows_1d.png", fig, dpi=90)


def _plot_features_2d(out: Path, seed: int) -> None:
    """2-D: the test inputs and the features at t = 1 of NODE and ANODE, by target."""
    plt = pyplot()
    _model, config = load_model(_run_dir(out, 2, "node", seed), "cpu")
    _, test_set = load_splits(config)
    x, y = test_set.inputs[:600], test_set.targets[:600, 0]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    axes[0].scatter(x[:, 0], x[:, 1], c=y, cmap="coolwarm", s=5)
    axes[0].set(title="test inputs (blue: g = -1)", xlabel="x1", ylabel="x2")
    for ax, (name, _) in zip(axes[1:], MODELS, strict=True):
        model, _c = load_model(_run_dir(out, 2, name, seed), "cpu")
        z = _trajectory(model, x, [0.0, 1.0])[-1]
        ax.scatter(z[:, 0], z[:, 1], c=y, cmap="coolwarm", s=5)
        ax.set(title=f"{name.upper()} features at t = 1", xlabel="h1", ylabel="h2")
    for ax in axes:
        ax.set_aspect("equal", adjustable="datalim")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    save_png(out / "features_2d.png", fig, dpi=90)


def _plot_slice(out: Path, slices: dict[str, dict[str, Any]], s: Settings, seed: int) -> None:
    """The slice left out of training, and train against held-out MSE per model."""
    plt = pyplot()
    data = annuli(s.slice_points, dim=2, generator=torch.Generator().manual_seed(10_007 + seed))
    held = _slice_mask(data.inputs)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    kept = data.inputs[~held]
    axes[0].scatter(kept[:, 0], kept[:, 1], c=data.targets[~held, 0], cmap="coolwarm", s=4)
    axes[0].scatter(
        data.inputs[held, 0], data.inputs[held, 1], c="k", s=6, label="held out: angle in [0, π/5]"
    )
    axes[0].set(title="training points and the held-out slice", xlabel="x1", ylabel="x2")
    axes[0].set_aspect("equal")
    axes[0].legend(fontsize=8, loc="lower left")
    names = [name for name, _ in MODELS]
    pos = torch.arange(len(names), dtype=torch.float64)
    for offset, key, label in ((-0.2, "train_mse", "train"), (0.2, "slice_mse", "held-out slice")):
        means = [slices[n][f"{key}_mean"] or 0.0 for n in names]
        stds = [slices[n][f"{key}_std"] or 0.0 for n in names]
        axes[1].bar(pos + offset, means, width=0.4, yerr=stds, label=label)
    axes[1].set_xticks(pos.tolist(), [n.upper() for n in names])
    axes[1].set(ylabel="MSE", title="train against held-out slice (Fig. 9)")
    axes[1].legend(fontsize=8)
    axes[1].grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save_png(out / "slice.png", fig, dpi=90)

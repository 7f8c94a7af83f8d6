"""``odebench run chen-tolerance``: Chen et al. (2018), Fig. 3 on MNIST.

Four ODE-Nets train from the same initialisation on the same batches: ReLU or
softplus vector field, adjoint with the default error norm or with the seminorm.
Every training step records the forward and backward function evaluations (NFE).
Then the solver tolerance of one trained model is swept: test error, forward NFE and
forward time per batch (Fig. 3a-b). The backward/forward NFE ratio over training is
Fig. 3c, the forward NFE over training Fig. 3d.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import odecore
import torch
from torch import nn

from ..data import Augment, Dataset, load_mnist
from ..models import build_model, nfe, ode_layers
from ..training import find_data
from ..training._config import Optimizer
from ..training._io import pyplot, save_png
from ._chen import MNIST_10K, fit_line, optimiser_words
from ._registry import fmt
from ._template import (
    Claim,
    Figure,
    Fitted,
    Measurement,
    Result,
    Run,
    Settings,
    Setup,
    Template,
    Trained,
    Values,
    register_template,
)

#: The variants trained: ``name -> (activation, seminorm)``.
VARIANTS: dict[str, tuple[str, bool]] = {
    "relu": ("relu", False),
    "relu-seminorm": ("relu", True),
    "softplus": ("softplus", False),
    "softplus-seminorm": ("softplus", True),
}


@dataclass(frozen=True)
class ToleranceSettings(Settings):
    """The training of the four variants and the tolerance sweep of one mode.

    Args:
        train_size: training images (``None``: all).
        test_size: test images (``None``: all).
        epochs: epochs of every variant, at least one.
        batch_size: the training batch.
        lr: the learning rate.
        optimizer: ``"sgd"`` (momentum 0.9) or ``"adam"``.
        tolerances: the sweep's ``rtol = atol``, loosest first.
        eval_batch: the batch of the test passes.
        train_tol: ``rtol = atol`` in training (Chen et al.'s).
        sweep: the variant whose trained model the sweep runs on.
        milestones: epochs (from 0) at which the rate is multiplied by 0.1.
        augment: random crops with padding 4.

    Example:
        >>> ToleranceSettings(train_size=64, test_size=64, epochs=1, batch_size=32, lr=1e-3,
        ...                   optimizer="adam", tolerances=(1e-3, 1e-1), eval_batch=64)
        Traceback (most recent call last):
        ...
        ValueError: `tolerances` must be positive and loosest first, got (0.001, 0.1).
    """

    train_size: int | None
    test_size: int | None
    epochs: int
    batch_size: int
    lr: float
    optimizer: Optimizer
    tolerances: tuple[float, ...]
    eval_batch: int
    train_tol: float = 1e-3
    sweep: str = "softplus"
    milestones: tuple[int, ...] = ()
    augment: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.epochs < 1:
            raise ValueError(f"chen-tolerance needs at least one epoch, got {self.epochs}.")
        if self.optimizer not in ("sgd", "adam"):
            raise ValueError(f"`optimizer` must be 'sgd' or 'adam', got {self.optimizer!r}.")
        if self.train_size is not None and self.train_size < self.batch_size:
            raise ValueError(
                f"`train_size` ({self.train_size}) must hold one batch ({self.batch_size})."
            )
        tols = self.tolerances
        if len(tols) < 2 or min(tols) <= 0 or list(tols) != sorted(tols, reverse=True):
            raise ValueError(
                f"`tolerances` must be positive and loosest first, got {self.tolerances!r}."
            )
        if self.sweep not in VARIANTS:
            raise ValueError(f"`sweep` must be one of {', '.join(VARIANTS)}, got {self.sweep!r}.")

    def lr_at(self, epoch: int) -> float:
        """The learning rate of ``epoch`` (from 0) under the milestones."""
        return self.lr * 0.1 ** sum(1 for m in self.milestones if m <= epoch)


MODES = {
    # 768 + 256 images, one epoch, Adam (which learns something in 24 steps).
    "quick": ToleranceSettings(
        train_size=768, test_size=256, epochs=1, batch_size=32, lr=1e-3, optimizer="adam",
        tolerances=(1e-1, 1e-3, 1e-5), eval_batch=128,
    ),
    # Sized for a 2-core CPU: 15 minutes with the three seeds. Four variants of the
    # ODE-Net at about 23 s per epoch of MNIST-10k (more for ReLU, whose adjoint is
    # dearer) leave room for 12,000 images each: 3 epochs of 4000 images, 186 steps of
    # batch 64, over which NFE can grow. Adam at 1e-3 as in chen-table1. The sweep runs
    # over 1996 test images (all of MNIST-10k's) at the five tolerances of the full mode.
    "standard": ToleranceSettings(
        seeds=3, train_size=4000, test_size=MNIST_10K[1], epochs=3, batch_size=64, lr=1e-3,
        optimizer="adam", tolerances=(1e-1, 1e-2, 1e-3, 1e-4, 1e-5), eval_batch=500,
    ),
    # The trained ODE-Net of the paper: torchdiffeq's reproduction of its training (160
    # epochs of all of MNIST, SGD, the rate times 0.1 at epochs 60, 100, 140, random
    # crops; Fig. 3d spans the training), one run, five tolerances 1e-1 to 1e-5.
    "full": ToleranceSettings(
        seeds=1, train_size=None, test_size=None, epochs=160, batch_size=128, lr=0.1,
        optimizer="sgd", milestones=(60, 100, 140), augment=True,
        tolerances=(1e-1, 1e-2, 1e-3, 1e-4, 1e-5), eval_batch=500,
    ),
}  # fmt: skip


@functools.lru_cache(maxsize=1)
def _mnist(
    data_dir: str | None, train_size: int | None, test_size: int | None, seed: int
) -> tuple[Dataset, Dataset]:
    """The seeded training and test subsets, read once for the four variants."""
    root = find_data("mnist", data_dir)
    gen = torch.Generator().manual_seed(seed)
    train = load_mnist(root, train=True).subset(train_size, generator=gen)
    return train, load_mnist(root, train=False).subset(test_size, generator=gen)


def _data(setup: Setup[ToleranceSettings], seed: int) -> tuple[Dataset, Dataset]:
    s = setup.settings
    return _mnist(setup.options.data_dir, s.train_size, s.test_size, seed)


def _spec(tol: float, seminorm: bool = False) -> odecore.OdeSpec:
    """Dopri5 at ``rtol = atol = tol``, the adjoint (with or without the seminorm)."""
    gradient = odecore.Adjoint(seminorm=seminorm)
    return odecore.OdeSpec.from_method("dopri5", rtol=tol, atol=tol, gradient=gradient)


def runs(setup: Setup[ToleranceSettings], seed: int) -> list[Run]:
    """The four variants, each trained by :func:`_fit` in its own loop."""
    return [
        Run(name, fit=functools.partial(_fit, setup, seed, activation, seminorm))
        for name, (activation, seminorm) in VARIANTS.items()
    ]


def _fit(
    setup: Setup[ToleranceSettings],
    seed: int,
    activation: str,
    seminorm: bool,
    device: torch.device,
) -> Fitted:
    """From the seed's initialisation, one record per step (NFE, loss, seconds), with
    the milestones' rates and, with ``augment``, random crops."""
    s = setup.settings
    data, _ = _data(setup, seed)
    torch.manual_seed(seed)
    model = build_model(
        "odenet",
        in_channels=1,
        num_classes=10,
        image_size=28,
        activation=activation,
        spec=_spec(s.train_tol, seminorm),
    ).to(device)
    opt: torch.optim.Optimizer = (
        torch.optim.Adam(model.parameters(), lr=s.lr)
        if s.optimizer == "adam"
        else torch.optim.SGD(model.parameters(), lr=s.lr, momentum=0.9)
    )
    augment = Augment(crop_padding=4, flip=False) if s.augment else None
    history: list[dict[str, float]] = []
    model.train()
    for epoch in range(s.epochs):
        for group in opt.param_groups:
            group["lr"] = s.lr_at(epoch)
        order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed + epoch))
        crops = torch.Generator(device=device).manual_seed(seed * 7919 + epoch)
        for i in range(len(order) // s.batch_size):
            idx = order[i * s.batch_size : (i + 1) * s.batch_size]
            x = data.normalize(data.inputs[idx].to(device))
            x = x if augment is None else augment(x, crops)
            y = data.targets[idx].to(device)
            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            forward, backward = nfe(model)
            history.append(
                {
                    "iteration": float(len(history)),
                    "loss": float(loss.item()),
                    "nfe_forward": float(forward),
                    "nfe_backward": float(backward),
                    "seconds": time.perf_counter() - start,
                }
            )
    return Fitted(model, history)


MAX_ROWS = 2000
"""The most training steps a variant's history keeps in ``results.json`` (every k-th
step of a longer training); its summary is of every step."""


def measure(setup: Setup[ToleranceSettings], trained: Trained) -> Measurement:
    """NFE over training and the test error; for the sweep's variant also the sweep."""
    s = setup.settings
    model = trained.load()
    _, test = _data(setup, trained.seed)
    history = [dict(h) for h in trained.history]
    metrics: dict[str, float | None] = {
        **_summary(history),
        "test_error": _error(model, test, s.eval_batch),
    }
    setup.log(
        f"[{trained.run.name}] {len(history)} steps, NFE forward "
        f"{metrics['mean_nfe_forward']:.1f}, median backward/forward {metrics['median_ratio']:.2f}"
    )
    details: dict[str, Any] = {"history": history[:: max(1, math.ceil(len(history) / MAX_ROWS))]}
    if trained.run.name == s.sweep:
        rows = _sweep(model, test, s)
        fit = fit_line([(n, t) for r in rows for n, t in r["batches"]])
        setup.log(f"[sweep] time vs NFE correlation {fmt(fit['correlation'], '.3f')}")
        for r in rows:
            metrics |= {f"{key}@{r['tol']:g}": r[key] for key in _SWEPT}
        metrics |= {f"time_nfe_{key}": value for key, value in fit.items()}
        details["tolerance_sweep"] = rows
    return Measurement(metrics, details)


#: The sweep's metrics per tolerance, ``<metric>@<tol>`` in the sweep variant's metrics.
_SWEPT = ("test_error", "nfe_forward", "seconds_per_batch")


def _with_tol(model: nn.Module, tol: float) -> None:
    """Every ODE layer of ``model`` at ``rtol = atol = tol`` (its spec's controller)."""
    for layer in ode_layers(model):
        if isinstance(layer.spec.controller, odecore.PIDController):
            controller = dataclasses.replace(layer.spec.controller, rtol=tol, atol=tol)
            layer.spec = dataclasses.replace(layer.spec, controller=controller)


def _sweep(model: nn.Module, test: Dataset, s: ToleranceSettings) -> list[dict[str, Any]]:
    """Test error, forward NFE and forward seconds per batch at each tolerance."""
    device = next(model.parameters()).device
    model.eval()
    rows = []
    for tol in s.tolerances:
        _with_tol(model, tol)
        wrong, nfes, seconds = 0, [], []
        with torch.no_grad():
            for i in range(0, len(test), s.eval_batch):
                x = test.normalize(test.inputs[i : i + s.eval_batch].to(device))
                y = test.targets[i : i + s.eval_batch].to(device)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                logits = model(x)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                seconds.append(time.perf_counter() - start)
                nfes.append(float(nfe(model)[0]))
                wrong += int((logits.argmax(1) != y).sum().item())
        rows.append(
            {
                "tol": tol,
                "test_error": wrong / len(test),
                "nfe_forward": statistics.mean(nfes),
                "seconds_per_batch": statistics.mean(seconds),
                "batches": [[n, t] for n, t in zip(nfes, seconds)],
            }
        )
    _with_tol(model, s.train_tol)
    return rows


def _summary(history: list[dict[str, float]]) -> dict[str, float]:
    ratios = [h["nfe_backward"] / h["nfe_forward"] for h in history if h["nfe_forward"] > 0]
    tenth = max(1, len(history) // 10)
    return {
        "median_ratio": statistics.median(ratios) if ratios else math.nan,
        "mean_nfe_forward": statistics.mean(h["nfe_forward"] for h in history),
        "mean_nfe_backward": statistics.mean(h["nfe_backward"] for h in history),
        "nfe_forward_first": statistics.mean(h["nfe_forward"] for h in history[:tenth]),
        "nfe_forward_last": statistics.mean(h["nfe_forward"] for h in history[-tenth:]),
        "train_seconds": sum(h["seconds"] for h in history),
        "steps": float(len(history)),
    }


def _error(model: nn.Module, test: Dataset, batch: int) -> float:
    device = next(model.parameters()).device
    model.eval()
    wrong = 0
    with torch.no_grad():
        for i in range(0, len(test), batch):
            x = test.normalize(test.inputs[i : i + batch].to(device))
            wrong += int((model(x).argmax(1) != test.targets[i : i + batch].to(device)).sum())
    return wrong / len(test)


def claims(setup: Setup[ToleranceSettings]) -> list[Claim]:
    """Fig. 3's claims, and the ratio claims, on our numbers.

    Every one is tested by training: the NFE, the errors and the ratios are those of
    the trained fields, which differ from seed to seed. The time claim compares times,
    so it is judged only on a machine that was not contended.
    """
    s = setup.settings
    sweep, loose, tight = s.sweep, f"@{s.tolerances[0]:g}", f"@{s.tolerances[-1]:g}"
    tols = f"{s.tolerances[0]:g} and {s.tolerances[-1]:g}"

    def nfes(v: Values) -> list[float]:
        return [v[sweep, f"nfe_forward@{tol:g}"] for tol in s.tolerances]

    def ratio(v: Values) -> float:
        return v["softplus", "median_ratio"]

    def nfe_ratio(v: Values, a: tuple[str, str], b: tuple[str, str]) -> float:
        return v[b] / v[a]

    growth = [((n, "nfe_forward_first"), (n, "nfe_forward_last")) for n in VARIANTS]
    seminorm = [
        Claim.difference(
            f"seminorm_fewer_backward_nfe_{n}",
            f"the seminorm needs fewer backward NFE ({n}; Kidger et al., 2021)",
            "fewer (Kidger et al., 2021)",
            (f"{n}-seminorm", "mean_nfe_backward"),
            (n, "mean_nfe_backward"),
            below=0.0,
            kind="paper",
            spec="+.1f",
            detail=f"ours: the mean backward NFE per step of the {n} field trained with the "
            "seminorm minus that of its twin trained with the default norm (same "
            "initialisation and batches), paired by seed; holds below 0",
        )
        for n in ("relu", "softplus")
    ]
    return [
        Claim("nfe_grows_as_tolerance_tightens",
              "forward NFE grows as the tolerance tightens (Fig. 3a-b)",
              "grows; numbers not published",
              ours=lambda v: v[sweep, "nfe_forward" + tight] / v[sweep, "nfe_forward" + loose],
              holds=lambda v: all(b >= a for a, b in itertools.pairwise(nfes(v)))
              and nfes(v)[-1] > nfes(v)[0], spec=".2f", unit="×", kind="paper",
              detail=f"ours: the {sweep} model's forward NFE at tolerances {tols}, tightest "
              "over loosest; holds where it never falls from one tolerance to the next and "
              "ends higher. Measured on the trained field, whose stiffness training sets"),
        Claim("error_at_tightest_not_above_loosest",
              "test error is no higher at the tightest tolerance (Fig. 3a)",
              "falls as it tightens; numbers not published",
              ours=lambda v: v[sweep, "test_error" + tight] - v[sweep, "test_error" + loose],
              holds=lambda v: v[sweep, "test_error" + tight] <= v[sweep, "test_error" + loose],
              spec="+.2f", scale=100, unit=" points", kind="paper",
              detail=f"ours: the {sweep} model's test error at tolerances {tols}, tightest "
              "minus loosest (one model, two tolerances); holds at 0 or below"),
        Claim("time_proportional_to_nfe",
              "forward time is proportional to NFE (Fig. 3b)",
              "proportional; slope not published",
              ours=lambda v: v[sweep, "time_nfe_correlation"],
              holds=lambda v: v[sweep, "time_nfe_correlation"] > 0.9, kind="paper",
              timing=True,
              detail="ours: the correlation of forward time and NFE over every test batch of "
              "the sweep; holds above 0.9"),
        Claim("softplus_ratio_roughly_half",
              "softplus backward NFE is roughly half the forward (Fig. 3c)",
              "about 0.5", ours=ratio, holds=lambda v: 0.35 <= ratio(v) <= 0.65, spec=".2f",
              kind="paper",
              detail="ours: the softplus model's median backward/forward NFE over the "
              "training steps; holds from 0.35 to 0.65"),
        Claim("softplus_ratio_near_corrected",
              "the softplus ratio is near the corrected ~0.8 (third party, Fig. 3c)",
              "about 0.8 (0.78-0.86)", ours=ratio, holds=lambda v: 0.7 <= ratio(v) <= 0.95,
              spec=".2f", kind="paper",
              detail="ours: the softplus model's median backward/forward NFE over the "
              "training steps; holds from 0.7 to 0.95"),
        Claim.difference(
            "relu_ratio_above_softplus",
            "the ReLU field's backward/forward NFE ratio exceeds the softplus one",
            "not published (smooth fields only)",
            ("relu", "median_ratio"), ("softplus", "median_ratio"), above=0.0, kind="paper",
            detail="ours: the ReLU model's median backward/forward NFE minus the softplus "
            "model's, paired by seed; holds above 0"),
        *seminorm,
        Claim("nfe_increases_during_training",
              "forward NFE increases during training, every variant (Fig. 3d)",
              "increases; numbers not published",
              ours=lambda v: min(nfe_ratio(v, *pair) for pair in growth),
              holds=lambda v: all(nfe_ratio(v, *pair) > 1 for pair in growth),
              spec=".2f", unit="×", kind="paper",
              detail="ours: the forward NFE of the last tenth of the steps over the first "
              "tenth, the smallest over the four variants; holds where every one is above 1"),
    ]  # fmt: skip


def sections(result: Result[ToleranceSettings]) -> str:
    """The sweep's table, the ratio table, the figures."""
    s = result.settings
    sweep = s.sweep
    lines = [
        f"ODE-Net, Dopri5 at tol {s.train_tol:g} in training, {s.epochs} epoch(s) of "
        f"{'all' if s.train_size is None else s.train_size} training images, batch "
        f"{s.batch_size}, {optimiser_words(s.optimizer, s.lr, s.milestones, s.augment)}.",
        "",
        f"## Fig. 3a-b: tolerance sweep ({sweep} model)",
        "",
        "| tolerance | test error (ours) | forward NFE | forward time per batch, ms | paper |",
        "|---|---|---|---|---|",
    ]
    for tol in s.tolerances:
        lines.append(
            f"| {tol:g} | {result.cell(sweep, f'test_error@{tol:g}', '.2f', 100, '%')} | "
            f"{result.cell(sweep, f'nfe_forward@{tol:g}', '.1f')} | "
            f"{result.cell(sweep, f'seconds_per_batch@{tol:g}', '.1f', 1e3)} | not published |"
        )
    lines += [
        "",
        f"Time against NFE over every batch: correlation "
        f"{result.cell(sweep, 'time_nfe_correlation', '.3f')}, "
        f"{result.cell(sweep, 'time_nfe_slope', '.2f', 1e3)} ms per evaluation (paper: "
        "proportional, slope not published).",
        "",
        "![error vs tolerance](fig3a_error_vs_tol.png) ![time vs NFE](fig3b_time_vs_nfe.png)",
        "",
        "## Fig. 3c-d: NFE over training",
        "",
        "| variant | median backward/forward (ours) | paper | corrected (third party) | "
        "forward NFE first / last 10% | test error |",
        "|---|---|---|---|---|---|",
    ]
    for name in VARIANTS:
        lines.append(
            f"| {name} | {result.cell(name, 'median_ratio', '.2f')} | ~0.5 | ~0.8 (0.78-0.86) | "
            f"{result.cell(name, 'nfe_forward_first', '.1f')} / "
            f"{result.cell(name, 'nfe_forward_last', '.1f')} | "
            f"{result.cell(name, 'test_error', '.2f', 100, '%')} |"
        )
    lines += [
        "",
        "The published ratios are for smooth dynamics; the adjoint of a ReLU field has a",
        "right-hand side discontinuous in time, which can make it far more expensive.",
        "",
        "![ratio](fig3c_ratio.png) ![NFE](fig3d_nfe.png)",
    ]
    return "\n".join(lines)


def _plot_error(result: Result[ToleranceSettings], path: Path) -> None:
    """Fig. 3a: test error against tolerance (the first seed)."""
    rows = result.details(result.settings.sweep)["tolerance_sweep"]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.semilogx([r["tol"] for r in rows], [100 * r["test_error"] for r in rows], "o-")
    ax.set(
        xlabel="tolerance (rtol = atol)", ylabel="test error (%)", title="(a) error vs tolerance"
    )
    ax.invert_xaxis()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


def _plot_time(result: Result[ToleranceSettings], path: Path) -> None:
    """Fig. 3b: forward time per batch against NFE, with the fit (the first seed)."""
    sweep = result.settings.sweep
    rows = result.details(sweep)["tolerance_sweep"]
    first = result.measurements[sweep][0].metrics
    slope, intercept = first["time_nfe_slope"], first["time_nfe_intercept"]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for r in rows:
        ax.plot(*zip(*r["batches"]), "o", alpha=0.6, label=f"tol {r['tol']:g}")
    if slope is not None and intercept is not None:
        xs = [n for r in rows for n, _ in r["batches"]]
        lo, hi = min(xs), max(xs)
        ax.plot(
            [lo, hi],
            [slope * lo + intercept, slope * hi + intercept],
            "k--",
            lw=1,
            label=f"fit, r = {first['time_nfe_correlation']:.3f}",
        )
    ax.set(xlabel="forward NFE", ylabel="forward time per batch (s)", title="(b) time vs NFE")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


def _plot_training(key: str, result: Result[ToleranceSettings], path: Path) -> None:
    """Fig. 3c (``key="ratio"``): backward/forward NFE per step; Fig. 3d
    (``key="nfe_forward"``): forward NFE per step. The first seed of every variant."""
    ylabel, title = {
        "ratio": ("backward NFE / forward NFE", "(c) backward vs forward NFE"),
        "nfe_forward": ("forward NFE", "(d) NFE over training"),
    }[key]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name in VARIANTS:
        hist = result.details(name)["history"]
        ys = [h["nfe_backward"] / h["nfe_forward"] if key == "ratio" else h[key] for h in hist]
        style = "--" if name.endswith("seminorm") else "-"
        ax.plot([h["iteration"] for h in hist], ys, style, lw=1.2, label=name)
    if key == "ratio":
        from matplotlib.ticker import FormatStrFormatter

        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        ax.axhline(0.5, color="0.5", ls=":", lw=1, label="paper: 0.5")
        ax.axhline(0.8, color="0.3", ls="--", lw=1, label="corrected: 0.8")
    ax.set(xlabel="training iteration", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(path, fig, dpi=90)


register_template(
    Template(
        name="chen-tolerance",
        description="Chen et al. (2018) Fig. 3: error, time and NFE against the solver "
        "tolerance, and forward/backward NFE over training (ReLU/softplus, adjoint "
        "with/without seminorm)",
        title="Chen et al. (2018), Fig. 3: tolerance and NFE on MNIST",
        modes=MODES,
        runs=runs,
        measure=measure,
        claims=claims,
        sections=sections,
        figures=[
            Figure("fig3a_error_vs_tol.png", _plot_error),
            Figure("fig3b_time_vs_nfe.png", _plot_time),
            Figure("fig3c_ratio.png", functools.partial(_plot_training, "ratio")),
            Figure("fig3d_nfe.png", functools.partial(_plot_training, "nfe_forward")),
        ],
        one_thread_modes=("quick",),
    )
)

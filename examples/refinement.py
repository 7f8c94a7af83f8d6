"""Refinement training of a ContinuousNet on MNIST digits: N_t = M = 1 -> 2 -> 4 -> 8.

Queiruga et al. (2020, Sec. 5.2) train a ContinuousNet shallow first and deepen it
as training goes on. Every block starts with one step (N_t = 1) and a weight
function theta(t) of one piece (M = 1, piecewise constant over depth t in [0, 1]); at
set epochs ``contnet.refine`` doubles both: each piece splits in two with its value
copied, so theta(t) is exactly the same function, now with twice as many trainable
pieces, and the block takes twice as many steps. The optimizer's state (momentum
buffers) is split the same way (``contnet.RefinementSchedule`` does both). Training
then lets neighbouring pieces move apart, a little: theta(t) stays close to the
function the coarse model learnt, so it is much smoother than M independent pieces.

Refinement keeps the model, not necessarily its outputs: the refined network run with
the old (solver, N_t) computes exactly what the old one did, while the new N_t
integrates the same ODE with half the step, which changes the outputs by the
discretisation error of the old step. The script checks both at every refinement,
on the test images: theta(t) before and after on a grid of depths (must be equal,
bit for bit), the logits of the refined net at the old N_t with batch statistics
(must be equal, bit for bit: batch norm's running statistics belong to each
manifestation, and the old N_t gets carried-over ones), and the test accuracy in
eval mode before against after at the new N_t,
with the number of test digits whose predicted class changed; and that every SGD
momentum buffer came across (split like its weights).

The network is ``ContinuousNet(in_channels=1, channels=(8, 16, 16), solver="midpoint",
basis="piecewise_constant", n_steps=1)``: a 3x3 stem convolution, three OdeBlocks of
R = BN-ReLU-conv-BN-ReLU-conv at 28x28, 14x14 and 7x7 joined by down-sampling
units, pooling and a linear classifier. It is trained with SGD (momentum 0.9, weight
decay 5e-4, learning rate 0.05 on a cosine schedule over all iterations), batch 64,
on digits shifted at random by up to 2 pixels. Full run: 3,000 training digits (a
seeded random subset of the training file), 6 epochs, refinement after epochs 2, 3
and 4 (``--refine-at 2 3 4``: the epochs counted from 0 at whose start
``contnet.RefinementSchedule`` refines, so that the printed epochs 3, 4 and 5 run at
N_t = 2, 4 and 8), test accuracy on 1,000 digits of the test file. At the end the
trained weights are evaluated in other manifestations, ``net.manifest(solver=s,
n_steps=n)`` for euler, midpoint and rk4 at N_t = 4, 8, 16 (Sec. 5.3, Fig. 9), each
with its batch-norm statistics recalibrated on 20 training batches.

Data: MNIST in the standard gzip IDX files (``train-images-idx3-ubyte.gz``,
``train-labels-idx1-ubyte.gz``, ``t10k-images-idx3-ubyte.gz``,
``t10k-labels-idx1-ubyte.gz``) in the folder given by ``--data DIR`` or, without it,
by the environment variable ``MNIST_DIR``. Any folder with these four files works
(the full MNIST or a subset). ``--smoke`` uses 128 training and 64 test digits of
it, or, when no folder is given or the files are missing, a small synthetic set of
digit-like images (seven-segment glyphs with random shift, slant and stroke width)
made by the script, and says so.

Run it from the repository root (with odecore, odelayers, contnet and matplotlib
installed):

    python examples/refinement.py --data DIR     # full run, under 2 minutes on one thread
    MNIST_DIR=DIR python examples/refinement.py  # the same
    python examples/refinement.py --smoke        # 4 tiny epochs: a few seconds
    python examples/refinement.py --out OUT      # write OUT/refinement.png
    python examples/refinement.py --no-plot      # only the tables; needs no matplotlib
    python examples/refinement.py --data DIR --solver rk4 --train 8000 --epochs 8 \\
        --refine-at 2 4 6 --threads 2

It prints one line per epoch, a table of the refinements with the checks above, the
final figures (N_t, M, parameters, test accuracy) and the accuracy of the
manifestations, and writes ``refinement.png``: theta(t) of a few weights of the first
block at the start, at each refinement and at the end, and the training loss and test
accuracy with the refinements marked. The exit status is 1 if a refinement changed
theta(t) or the outputs at the old N_t, or did not carry the momentum buffers over.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import math
import os
import struct
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import contnet
import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor

FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
MEAN, STD = 0.1307, 0.3081  # of the MNIST training pixels, scaled to [0, 1]
FULL = {"train": 3000, "test": 1000, "epochs": 6, "refine_at": [2, 3, 4], "batch": 64}
SMOKE = {"train": 128, "test": 64, "epochs": 4, "refine_at": [1, 2, 3], "batch": 16}
MANIFEST_METHODS = ("euler", "midpoint", "rk4")
MANIFEST_STEPS = (4, 8, 16)
PLOT_ENTRIES = 4  # weights of the first block whose theta(t) is plotted
THETA_GRID = 64  # depths at which theta(t) is compared before and after a refinement


# --------------------------------------------------------------------------- data


def read_idx(path: Path) -> Tensor:
    """An unsigned-byte IDX array (the MNIST format), gzip-compressed or not."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path.name}: not an unsigned-byte IDX file (magic {data[:4]!r})")
    shape = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    body = data[4 + 4 * ndim :]
    if len(body) != math.prod(shape):
        raise ValueError(f"{path.name}: {len(body)} bytes of data for the shape {shape}")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(shape)


def mnist_files(folder: Path | None) -> dict[str, tuple[Path, Path]] | None:
    """The four IDX files in ``folder`` (``.gz`` or not), or None if any is missing."""
    if folder is None:
        return None
    found = {}
    for split, names in FILES.items():
        paths = []
        for name in names:
            for candidate in (folder / name, folder / name.removesuffix(".gz")):
                if candidate.is_file():
                    paths.append(candidate)
                    break
            else:
                return None
        found[split] = (paths[0], paths[1])
    return found


def load_mnist(
    files: dict[str, tuple[Path, Path]], n_train: int, n_test: int, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Seeded random subsets of the training and test files, as float images and labels."""
    out = []
    for split, n in (("train", n_train), ("test", n_test)):
        images, labels = (read_idx(p) for p in files[split])
        if images.shape[0] != labels.shape[0] or images.shape[1:] != (28, 28):
            raise ValueError(f"{split}: {tuple(images.shape)} images, {labels.shape[0]} labels")
        keep = torch.randperm(images.shape[0], generator=generator)[: min(n, images.shape[0])]
        out += [normalise(images[keep]), labels[keep].long()]
    return out[0], out[1], out[2], out[3]


def normalise(images: Tensor) -> Tensor:
    """uint8 ``(n, 28, 28)`` to standardised float ``(n, 1, 28, 28)``."""
    return ((images.float() / 255.0 - MEAN) / STD).unsqueeze(1)


# Seven segments a (top), b (top right), c (bottom right), d (bottom), e (bottom left),
# f (top left), g (middle) as lines between corners of a 1 x 2 box.
SEGMENTS = {
    "a": ((0, 0), (1, 0)),
    "b": ((1, 0), (1, 1)),
    "c": ((1, 1), (1, 2)),
    "d": ((0, 2), (1, 2)),
    "e": ((0, 1), (0, 2)),
    "f": ((0, 0), (0, 1)),
    "g": ((0, 1), (1, 1)),
}
GLYPHS = ["abcdef", "bc", "abged", "abgcd", "fgbc", "afgcd", "afgedc", "abc", "abcdefg", "abcdfg"]


def synthetic_digits(n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """``n`` seven-segment digits 0-9 on 28x28, random shift, size, slant and width."""
    labels = torch.arange(n) % 10
    labels = labels[torch.randperm(n, generator=generator)]
    ys, xs = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
    pixels = torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=1)  # (784, 2) as (x, y)
    images = torch.zeros(n, 28 * 28)
    for i, label in enumerate(labels.tolist()):
        u = torch.rand(6, generator=generator)
        width, height = 8 + 4 * u[0], 7 + 3 * u[1]  # box 1 x 2 scaled to width x 2 height
        x0, y0 = 14 - width / 2 + 4 * (u[2] - 0.5), 14 - height + 4 * (u[3] - 0.5)
        slant, stroke = 0.3 * (u[4] - 0.5), 1.2 + 0.8 * u[5]
        strokes = torch.zeros(28 * 28)
        for s in GLYPHS[label]:
            (ax, ay), (bx, by) = SEGMENTS[s]
            a = torch.tensor([x0 + ax * width - slant * ay * height, y0 + ay * height])
            b = torch.tensor([x0 + bx * width - slant * by * height, y0 + by * height])
            d = b - a
            t = ((pixels - a) @ d / (d @ d)).clamp(0, 1)
            dist = (pixels - a - t[:, None] * d).norm(dim=1)
            strokes = torch.maximum(strokes, (1.0 + stroke - dist).clamp(0, 1))
        images[i] = strokes
    noise = 0.05 * torch.rand(n, 28 * 28, generator=generator)
    images = ((images + noise).clamp(0, 1) * 255).round().to(torch.uint8)
    return normalise(images.reshape(n, 28, 28)), labels


def shift(images: Tensor, pixels: int, generator: torch.Generator) -> Tensor:
    """Each image translated by its own random offset of up to ``pixels`` in x and y."""
    if pixels == 0:
        return images
    n, _, h, w = images.shape
    background = -MEAN / STD  # a black pixel after normalisation
    padded = F.pad(images, (pixels, pixels, pixels, pixels), value=background)
    dy, dx = torch.randint(0, 2 * pixels + 1, (2, n), generator=generator)
    rows = dy[:, None] + torch.arange(h)  # (n, h)
    cols = dx[:, None] + torch.arange(w)  # (n, w)
    out = padded[torch.arange(n)[:, None, None], 0, rows[:, :, None], cols[:, None, :]]
    return out.unsqueeze(1)


# ------------------------------------------------------------------------ helpers


def n_basis(net: contnet.ContinuousNet) -> int:
    """M, the number of basis functions (pieces) of the blocks."""
    return net.ode_blocks()[0].basis.size


def n_params(net: contnet.ContinuousNet) -> int:
    return sum(p.numel() for p in net.parameters())


def logits(net: contnet.ContinuousNet, x: Tensor, batch: int = 500) -> Tensor:
    """The outputs on ``x`` in eval mode (the mode of ``net`` is restored).

    Right after a refinement the new N_t normalises with batch-norm statistics carried
    over from the old one (contnet warns about that in eval mode): here that is the
    point, the accuracy a refined net starts its next epoch from.
    """
    mode = net.training
    net.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", contnet.CarriedStatisticsWarning)
        out = torch.cat([net(x[i : i + batch]) for i in range(0, x.shape[0], batch)])
    net.train(mode)
    return out


def batch_logits(net: contnet.ContinuousNet, x: Tensor) -> Tensor:
    """The outputs on ``x`` in train mode, every batch norm normalising with the
    statistics of ``x`` itself (a copy runs, so no running statistic moves)."""
    with torch.no_grad():
        out: Tensor = copy.deepcopy(net).train()(x)
    return out


def score(out: Tensor, y: Tensor) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of the logits ``out``."""
    return float((out.argmax(1) == y).float().mean()), float(F.cross_entropy(out, y))


def theta(net: contnet.ContinuousNet, ts: Tensor) -> dict[str, Tensor]:
    """Every parameter and floating buffer of every block at the depths ``ts``, stacked."""
    out = {}
    for b, block in enumerate(net.ode_blocks()):
        values = [block.continuous.evaluate(float(t)) for t in ts]
        for name in values[0]:
            if values[0][name].is_floating_point():
                out[f"{b}.{name}"] = torch.stack([v[name].detach().clone() for v in values])
    return out


def entries(net: contnet.ContinuousNet, ts: Tensor) -> Tensor:
    """theta(t) at ``ts`` of the plotted entries: centre taps of the first conv of block 0."""
    cont = net.ode_blocks()[0].continuous
    name = next(n for n in cont.names if n.endswith("weight") and cont.coefficient(n).dim() == 5)
    rows = [cont.evaluate(float(t))[name][:PLOT_ENTRIES, 0, 1, 1].detach() for t in ts]
    return torch.stack(rows, dim=1)  # (entries, len(ts))


def roughness(net: contnet.ContinuousNet) -> float:
    """Mean |theta_{k+1} - theta_k| over neighbouring pieces, relative to mean |theta|.

    Over every conv weight of every block; 0 for a constant theta(t).
    """
    jumps, sizes = [], []
    for block in net.ode_blocks():
        cont = block.continuous
        for name in cont.names:
            c = cont.coefficient(name).detach()
            if c.dim() == 5 and c.shape[0] > 1:
                jumps.append((c[1:] - c[:-1]).abs().mean())
                sizes.append(c.abs().mean())
    return float(torch.stack(jumps).mean() / torch.stack(sizes).mean()) if jumps else 0.0


def carried(
    old: contnet.ContinuousNet,
    old_optimizer: torch.optim.Optimizer,
    new: contnet.ContinuousNet,
    new_optimizer: torch.optim.Optimizer,
) -> int:
    """How many parameters of ``new`` got their old momentum buffer, split like the weights.

    A refined coefficient tensor must have the old buffer with every piece repeated (as
    many times as the pieces were split); any other tensor the old buffer unchanged.
    """
    old_buffers = {
        name: old_optimizer.state.get(p, {}).get("momentum_buffer")
        for name, p in old.named_parameters()
    }
    count = 0
    for name, p in new.named_parameters():
        before = old_buffers.get(name)
        after = new_optimizer.state.get(p, {}).get("momentum_buffer")
        if before is None or after is None or after.shape != p.shape:
            continue
        if before.shape != after.shape:
            before = before.repeat_interleave(after.shape[0] // before.shape[0], dim=0)
        count += int(torch.equal(before, after))
    return count


# ----------------------------------------------------------------------- training


def train(args: argparse.Namespace, data: tuple[Tensor, Tensor, Tensor, Tensor]) -> dict[str, Any]:
    """Train with refinement; the history, the refinement checks and the final net."""
    x, y, x_test, y_test = data
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed + 1)
    net = contnet.ContinuousNet(
        in_channels=1,
        channels=tuple(args.channels),
        n_steps=1,
        n_basis=1,
        solver=args.solver,
        basis="piecewise_constant",
    )
    optimizer = torch.optim.SGD(
        net.parameters(), lr=args.lr, momentum=0.9, weight_decay=args.weight_decay
    )
    schedule = contnet.RefinementSchedule(epochs=args.refine_at)
    per_epoch = math.ceil(x.shape[0] / args.batch)
    total = per_epoch * args.epochs
    ts = (torch.arange(THETA_GRID) + 0.5) / THETA_GRID
    plot_ts = torch.linspace(0.0, 1.0, 801)

    history: dict[str, Any] = {"loss": [], "epochs": [], "refinements": [], "theta": []}
    history["theta"].append(("initial (M = 1)", entries(net, plot_ts)))
    out = logits(net, x_test)
    acc, test_loss = score(out, y_test)
    history["epochs"].append({"epoch": 0, "acc": acc, "loss": test_loss})
    print(
        f"start     N_t {net.n_steps:>2}  M {n_basis(net):>2}  params {n_params(net):>6}  "
        f"test acc {acc:.3f}"
    )
    step, train_seconds = 0, 0.0
    for epoch in range(args.epochs):
        if epoch in schedule.epochs:
            before_net, before_out = net, logits(net, x_test)
            before_theta, before_optimizer = theta(net, ts), optimizer
            net, optimizer = schedule.step(epoch, net, optimizer)
            after_out = logits(net, x_test)
            old_manifest = net.manifest(n_steps=before_net.n_steps)
            same_out = logits(old_manifest, x_test)
            # The weights are what refinement keeps: with the same (batch) statistics the
            # refined net at the old N_t must give the old net's logits exactly. (Running
            # statistics belong to the manifestation; the old N_t gets carried-over ones.)
            same_batch, before_batch = (
                batch_logits(old_manifest, x_test),
                batch_logits(before_net, x_test),
            )
            after_theta = theta(net, ts)
            record = {
                "epoch": epoch,
                "from": (before_net.n_steps, n_basis(before_net)),
                "to": (net.n_steps, n_basis(net)),
                "params": (n_params(before_net), n_params(net)),
                "acc_before": score(before_out, y_test)[0],
                "acc_after": score(after_out, y_test)[0],
                "acc_old_nt": score(same_out, y_test)[0],
                "loss_before": score(before_out, y_test)[1],
                "loss_after": score(after_out, y_test)[1],
                "theta_diff": max(
                    float((after_theta[k] - v).abs().max()) for k, v in before_theta.items()
                ),
                "logit_diff_old_nt": float((same_batch - before_batch).abs().max()),
                "logit_diff_new_nt": float((after_out - before_out).abs().max()),
                "changed": int((after_out.argmax(1) != before_out.argmax(1)).sum()),
                "carried": carried(before_net, before_optimizer, net, optimizer),
                "n_tensors": len(list(net.parameters())),
            }
            history["refinements"].append(record)
            label = f"after epoch {epoch} (M = {record['from'][1]})"
            history["theta"].append((label, entries(before_net, plot_ts)))
            exact = record["theta_diff"] == 0.0 and record["logit_diff_old_nt"] == 0.0
            (n0, m0), (n1, m1), (p0, p1) = record["from"], record["to"], record["params"]
            print(
                f"refine    N_t {n0} -> {n1}, M {m0} -> {m1}, params {p0} -> {p1}: test acc "
                f"{record['acc_before']:.3f} before, {record['acc_after']:.3f} after; theta(t) "
                f"and outputs at the old N_t unchanged: {'yes' if exact else 'NO'}; momentum "
                f"carried for {record['carried']}/{record['n_tensors']} tensors"
            )
        net.train()
        start = time.perf_counter()
        order = torch.randperm(x.shape[0], generator=generator)
        losses = []
        for i in range(0, x.shape[0], args.batch):
            lr = args.lr * 0.5 * (1.0 + math.cos(math.pi * step / total))
            for group in optimizer.param_groups:
                group["lr"] = lr
            idx = order[i : i + args.batch]
            loss = F.cross_entropy(net(shift(x[idx], args.shift, generator)), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            history["loss"].append((step / per_epoch, loss.item()))
            step += 1
        seconds = time.perf_counter() - start
        train_seconds += seconds
        out = logits(net, x_test)
        acc, test_loss = score(out, y_test)
        history["epochs"].append(
            {"epoch": epoch + 1, "acc": acc, "loss": test_loss, "seconds": seconds}
        )
        print(
            f"epoch {epoch + 1:>2}  N_t {net.n_steps:>2}  M {n_basis(net):>2}  params "
            f"{n_params(net):>6}  train loss {sum(losses) / len(losses):.3f}  test loss "
            f"{test_loss:.3f}  test acc {acc:.3f}  ({seconds:.1f} s)"
        )
    history["theta"].append((f"final (M = {n_basis(net)})", entries(net, plot_ts)))
    history["plot_ts"] = plot_ts
    return {
        "net": net,
        "history": history,
        "acc": history["epochs"][-1]["acc"],
        "loss": history["epochs"][-1]["loss"],
        "train_seconds": train_seconds,
    }


def manifestations(
    net: contnet.ContinuousNet, x: Tensor, y: Tensor, recalibrate_on: list[Tensor]
) -> dict[tuple[str, int], float]:
    """Test accuracy of the trained weights in other (solver, N_t) manifestations, each
    with its batch-norm statistics recalibrated on ``recalibrate_on`` (training batches)."""
    grid = contnet.manifestation_sweep(
        net.eval(),
        lambda m: score(logits(m.eval(), x), y)[0],
        solvers=MANIFEST_METHODS,
        n_steps=MANIFEST_STEPS,
        batches=recalibrate_on,
    )
    return grid


# ------------------------------------------------------------------------- output


def plot(result: dict[str, Any], args: argparse.Namespace, title: str) -> Path:
    """theta(t) of a few weights, loss and accuracy with the refinements marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = result["history"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), dpi=100)

    ax = axes[0]
    ts = history["plot_ts"]
    snapshots = history["theta"]
    colors = plt.get_cmap("tab10")
    for k, (label, values) in enumerate(snapshots):
        first, last = k == 0, k == len(snapshots) - 1
        for e in range(values.shape[0]):
            ax.plot(
                ts,
                values[e],
                color=colors(e),
                linestyle="--" if first else "-",
                linewidth=1.8 if last else 0.9,
                alpha=1.0 if first or last else 0.35,
            )
        style = {"linestyle": "--" if first else "-", "linewidth": 1.8 if last else 0.9}
        ax.plot([], [], color="k", alpha=1.0 if first or last else 0.35, label=label, **style)
    ax.set_xlabel("depth t")
    ax.set_ylabel("theta(t)")
    ax.set_title(
        f"theta(t) of {PLOT_ENTRIES} weights of the first block (first conv, centre taps)\n"
        "dashed: initial, faint: at refinements, solid: final",
        fontsize=9,
    )
    ax.grid(True, alpha=0.3)

    epochs = [e["epoch"] for e in history["epochs"]]
    ax = axes[1]
    steps, losses = zip(*history["loss"])
    ax.plot(steps, losses, color="tab:gray", linewidth=0.6, alpha=0.6, label="training batch")
    window = max(1, len(losses) // 40)
    smooth = [sum(losses[max(0, i - window + 1) : i + 1]) / min(window, i + 1) for i in
              range(len(losses))]  # fmt: skip
    ax.plot(steps, smooth, color="k", linewidth=1.2, label=f"training, mean of {window}")
    ax.plot(epochs, [e["loss"] for e in history["epochs"]], "o-", color="tab:red", label="test")
    for r in history["refinements"]:
        ax.plot([r["epoch"]], [r["loss_after"]], "x", color="tab:orange", markersize=8)
    ax.plot([], [], "x", color="tab:orange", label="test, just after refinement")
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("cross-entropy")
    ax.set_title("loss", fontsize=10)

    ax = axes[2]
    ax.plot(epochs, [e["acc"] for e in history["epochs"]], "o-", color="tab:blue",
            label="test accuracy (eval mode)")  # fmt: skip
    for r in history["refinements"]:
        ax.plot([r["epoch"]], [r["acc_after"]], "x", color="tab:orange", markersize=8)
    ax.plot([], [], "x", color="tab:orange", label="just after refinement")
    ax.set_ylim(max(0.0, min(e["acc"] for e in history["epochs"][1:]) - 0.05), 1.0)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy")
    ax.set_title("test accuracy", fontsize=10)
    for ax in axes[1:]:
        for r in history["refinements"]:
            ax.axvline(r["epoch"], color="tab:green", linestyle=":", linewidth=1.2)
            ax.text(r["epoch"], 1.0, f" N_t={r['to'][0]}", transform=ax.get_xaxis_transform(),
                    fontsize=8, va="top", color="tab:green")  # fmt: skip
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower right" if ax is axes[2] else "lower left")
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path = args.out / "refinement.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Train a ContinuousNet on MNIST with refinement N_t = M = 1 -> 2 -> 4 -> 8; "
        "check that refinement keeps the model, print accuracies, plot theta(t)."
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="folder of the MNIST IDX files (default: the environment variable MNIST_DIR)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "output",
        help="folder for refinement.png (default: examples/output)",
    )
    parser.add_argument("--smoke", action="store_true", help="a few tiny epochs: a few seconds")
    parser.add_argument("--no-plot", action="store_true", help="print the tables only")
    parser.add_argument("--seed", type=int, default=0, help="seed of subsets and initialisation")
    parser.add_argument("--train", type=int, default=None, help="training digits (default 3000)")
    parser.add_argument("--test", type=int, default=None, help="test digits (default 1000)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default 6)")
    parser.add_argument(
        "--refine-at",
        type=int,
        nargs="*",
        default=None,
        help="epochs after which N_t and M double (default 2 3 4)",
    )
    parser.add_argument("--solver", default="midpoint", help="fixed-step method (default midpoint)")
    parser.add_argument("--channels", type=int, nargs=3, default=[8, 16, 16])
    parser.add_argument("--batch", type=int, default=None, help="batch size (default 64)")
    parser.add_argument("--lr", type=float, default=0.05, help="initial SGD learning rate")
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--shift", type=int, default=2, help="random shift in pixels (0: none)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    sizes = SMOKE if args.smoke else FULL
    for key in ("train", "test", "epochs", "refine_at", "batch"):
        if getattr(args, key) is None:
            setattr(args, key, sizes[key])
    if min(args.train, args.test, args.epochs, args.batch, args.threads) < 1 or args.shift < 0:
        parser.error("--train, --test, --epochs, --batch and --threads must be positive")
    if any(not 0 < e < args.epochs for e in args.refine_at):
        parser.error(f"--refine-at epochs must lie between 1 and {args.epochs - 1}")
    torch.set_num_threads(args.threads)

    start = time.perf_counter()
    folder = args.data
    if folder is None and os.environ.get("MNIST_DIR"):
        folder = Path(os.environ["MNIST_DIR"])
    files = mnist_files(folder)
    generator = torch.Generator().manual_seed(args.seed)
    if files is not None:
        data = load_mnist(files, args.train, args.test, generator)
        source = f"MNIST, {data[0].shape[0]} training / {data[2].shape[0]} test digits"
    elif args.smoke:
        where = "no --data or MNIST_DIR given" if folder is None else "no MNIST IDX files found"
        print(f"{where}: smoke run on synthetic seven-segment digits instead of MNIST")
        x, y = synthetic_digits(args.train, generator)
        x_test, y_test = synthetic_digits(args.test, generator)
        data = (x, y, x_test, y_test)
        source = f"synthetic digits, {args.train} training / {args.test} test"
    else:
        wanted = ", ".join(name for names in FILES.values() for name in names)
        where = "no data folder given" if folder is None else f"no MNIST IDX files in {folder}"
        print(
            f"{where}. Give the folder of the MNIST IDX files ({wanted}) with --data DIR "
            "or the environment variable MNIST_DIR (or run with --smoke).",
            file=sys.stderr,
        )
        return 2

    print("Refinement training of a ContinuousNet (Queiruga et al. 2020, Sec. 5.2)")
    print(f"  data: {source}; random shifts of up to {args.shift} px")
    print(
        f"  ContinuousNet(channels={tuple(args.channels)}, solver={args.solver!r}, piecewise "
        f"constant basis), N_t = M = 1 at the start"
    )
    print(
        f"  SGD momentum 0.9, lr {args.lr:g} cosine, weight decay {args.weight_decay:g}, batch "
        f"{args.batch}, {args.epochs} epochs; N_t and M double after epochs "
        f"{', '.join(map(str, args.refine_at))}; seed {args.seed}, {args.threads} thread(s)\n"
    )
    result = train(args, data)
    net = result["net"]
    failed = [
        r for r in result["history"]["refinements"]
        if r["theta_diff"] != 0.0
        or r["logit_diff_old_nt"] != 0.0
        or r["carried"] != r["n_tensors"]
    ]  # fmt: skip

    print("\nRefinements (on the test digits, eval mode)")
    header = (
        f"{'epoch':>5}{'N_t':>9}{'M':>9}{'params':>16}{'acc before':>12}{'acc after':>11}"
        f"{'loss before':>13}{'loss after':>12}{'changed':>9}{'acc old N_t':>13}"
        f"{'max|dlogit|':>13}{'max|dtheta|':>13}{'momentum':>10}"
    )
    print(header)
    print("-" * len(header))
    for r in result["history"]["refinements"]:
        steps, pieces = (f"{a} -> {b}" for a, b in zip(r["from"], r["to"]))
        params = "{} -> {}".format(*r["params"])
        momentum = f"{r['carried']}/{r['n_tensors']}"
        print(
            f"{r['epoch']:>5}{steps:>9}{pieces:>9}{params:>16}{r['acc_before']:>12.3f}"
            f"{r['acc_after']:>11.3f}{r['loss_before']:>13.3f}{r['loss_after']:>12.3f}"
            f"{r['changed']:>9}{r['acc_old_nt']:>13.3f}{r['logit_diff_old_nt']:>13.1e}"
            f"{r['theta_diff']:>13.1e}{momentum:>10}"
        )
    print(
        "after, changed (predicted classes): the refined net at the new N_t; acc old N_t,\n"
        "max|dlogit|: the refined net run at the old N_t against the net before; max|dtheta|:\n"
        f"every weight at {THETA_GRID} depths (max|dlogit| with batch statistics); momentum: "
        "SGD buffers carried"
    )
    ok = "yes" if not failed else "NO"
    print(
        "theta(t), the outputs at the old N_t and the momentum unchanged by every refinement: " + ok
    )

    recalibrate_on = [
        data[0][i : i + args.batch]
        for i in range(0, min(len(data[0]), 20 * args.batch), args.batch)
    ]
    grid = manifestations(net, data[2], data[3], recalibrate_on)
    print("\nFinal model")
    header = f"{'method':<10}{'N_t':>5}{'M':>5}{'params':>8}{'test acc':>10}{'test loss':>11}"
    header += f"{'roughness':>11}{'train s':>9}"
    print(header)
    print("-" * len(header))
    print(
        f"{net.method:<10}{net.n_steps:>5}{n_basis(net):>5}{n_params(net):>8}"
        f"{result['acc']:>10.3f}{result['loss']:>11.3f}{roughness(net):>11.3f}"
        f"{result['train_seconds']:>9.1f}"
    )
    fresh = contnet.ContinuousNet(
        in_channels=1, channels=tuple(args.channels), n_steps=n_basis(net), solver=args.solver
    )
    print(
        "roughness: mean |theta_k+1 - theta_k| of the conv weights over mean |theta|; "
        f"{roughness(fresh):.3f}\nfor a freshly initialised net of M = {n_basis(fresh)} "
        "independent pieces (like the units of a ResNet)"
    )

    print(f"\nManifestations of the trained weights: test accuracy (trained: {net.method}, "
          f"N_t = {net.n_steps})")  # fmt: skip
    header = f"{'method':<10}" + "".join(f"{f'N_t={n}':>9}" for n in MANIFEST_STEPS)
    print(header)
    print("-" * len(header))
    for method in MANIFEST_METHODS:
        print(f"{method:<10}" + "".join(f"{grid[(method, n)]:>9.3f}" for n in MANIFEST_STEPS))
    print()
    if not args.no_plot:
        title = (
            f"ContinuousNet[{net.method}] on {source}: refinement N_t = M = 1 -> "
            f"{net.n_steps} after epochs {', '.join(map(str, args.refine_at))}; seed {args.seed}"
        )
        path = plot(result, args, title)
        print(f"wrote {path}")
    print(f"done in {time.perf_counter() - start:.1f} s")
    if failed:
        print(
            "a refinement changed theta(t), the outputs at the old N_t or the momentum at "
            "epoch(s) "
            f"{', '.join(str(r['epoch']) for r in failed)}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``odebench run contnet-adjoint``: a ContinuousNet trained by backprop and by the adjoint.

Queiruga et al. (2020), Sec. 5.2, on training ContinuousNets with the adjoint: "the
adjoint gradients were sensitive to the number of time steps: for the network to
converge to a high accuracy, the time steps needed to be one third the width of the
basis function intervals, i.e. N_t >= 3M". The weights ``theta(t)`` are piecewise
constant on ``M`` pieces, so the field jumps at every knot. A backward Euler step of
the adjoint that starts on a knot reads the weights of the piece after it, and
credits that piece with the gradient: at ``N_t = M`` every step does, and the first
piece gets no gradient at all; at ``N_t = kM`` one step in ``k``. On top of that the
continuous adjoint integrated in steps differs from the gradient of the discrete
network (backprop's) by an error of first order in the step.

One small ContinuousNet (a stride-2 stem, one :class:`contnet.OdeBlock` of forward
Euler over ``M`` pieces, a pooled linear head; group norm where the paper has batch
norm, see :func:`residual_module`) trains from the same initialisation on the same
batches with each gradient method of :data:`TRAINED`: backprop at ``N_t = M``,
odecore's continuous adjoint (:class:`odecore.Adjoint`, Euler backward with the
forward's step) at ``N_t = M, 2M, 3M, 4M``, and the same adjoint with ``jump_ts`` at
the basis knots (restarted at each, every step reading its own piece) at ``N_t = M``.
The gradients are also compared with backprop's at the same ``N_t``
(:func:`gradient_errors`) at initialisation and after training.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import contnet
import odecore
import torch
from odelayers.basis import PiecewiseConstant
from torch import Tensor, nn
from torch.optim.lr_scheduler import CosineAnnealingLR

from .._io import pyplot, save_png
from ..data import Dataset
from ..training import Epoch, Task, TrainConfig, evaluate, load_splits
from . import _contnet_common as common
from ._claims import Claim
from ._images import data_name
from ._metrics import Stat, Values
from ._template import (
    Figure,
    Measurement,
    Result,
    Run,
    Settings,
    Setup,
    Template,
    Trained,
    register_template,
)

Gradient = Literal["backprop", "adjoint", "checkpoint"]
"""How a gradient is computed: contnet's own block by autograd, or an odecore solve of
the block's field with :class:`odecore.Adjoint` or :class:`odecore.Checkpoint`."""


@dataclass(frozen=True)
class Method:
    """One way to differentiate the block: a gradient method at ``N_t = factor * M``.

    Args:
        gradient: ``"backprop"`` (contnet's :class:`~contnet.OdeBlock` under
            autograd), ``"adjoint"`` (:class:`odecore.Adjoint`) or ``"checkpoint"``
            (:class:`odecore.Checkpoint`, backprop's gradient in less memory).
        factor: ``N_t`` over ``M``.
        knots: the solve gets the basis knots as ``jump_ts`` (it restarts at each,
            and a step next to one reads the limit from its own side).

    Example:
        >>> Method("adjoint", 3).key, Method("adjoint", 1, knots=True).label
        ('adjoint-3M', 'adjoint with jump_t at the knots, N_t = M')
        >>> Method("adjoint", 2).n_steps(4)
        8
    """

    gradient: Gradient
    factor: int = 1
    knots: bool = False

    @property
    def key(self) -> str:
        """The run's name and the metrics' suffix: ``backprop``, ``adjoint-2M``,
        ``knot-1M``, ``checkpoint-1M``."""
        if self.gradient == "backprop":
            return "backprop" if self.factor == 1 else f"backprop-{self.factor}M"
        name = "knot" if self.gradient == "adjoint" and self.knots else self.gradient
        return f"{name}-{self.factor}M"

    @property
    def label(self) -> str:
        """The method in words, for the report."""
        steps = "N_t = M" if self.factor == 1 else f"N_t = {self.factor}M"
        what = {
            "backprop": "backprop",
            "adjoint": "adjoint with jump_t at the knots" if self.knots else "adjoint",
            "checkpoint": "checkpoint",
        }[self.gradient]
        return f"{what}, {steps}"

    def n_steps(self, pieces: int) -> int:
        """``N_t`` of a block of ``pieces`` pieces."""
        return self.factor * pieces


BACKPROP = Method("backprop")
FACTORS: tuple[int, ...] = (1, 2, 3, 4)
"""``N_t / M`` of the plain adjoint, trained and compared."""
TRAINED: tuple[Method, ...] = (
    BACKPROP,
    *(Method("adjoint", k) for k in FACTORS),
    Method("adjoint", 1, knots=True),
)
"""The gradient methods a model is trained with, one run each."""
COMPARED: tuple[Method, ...] = (
    *(Method("adjoint", k) for k in FACTORS),
    *(Method("adjoint", k, knots=True) for k in FACTORS),
    Method("checkpoint", 1, knots=True),
)
"""The gradient methods compared with backprop at the same ``N_t``."""
BY_KEY = {m.key: m for m in TRAINED}

ACC_GAP = 0.01
"""Accuracy within this (1 point) of backprop's is "reaches backprop's"; more than
this below it is "lower". About the spread of a paired per-seed difference of two
briefly trained nets on a couple of thousand test images."""
EXACT = 1e-5
"""Relative gradient error below which two gradients are the same (float32)."""
FALL = 0.5
"""An adjoint's gradient error at ``N_t = 4M`` is below this fraction of that at
``N_t = M`` (first order in the step: 0.25; 0.31-0.39 measured at initialisation in
standard mode, 0.36-0.50 in quick mode)."""
KNOT_RATIO = 0.85
"""The adjoint with ``jump_ts`` at the knots has below this fraction of the plain
adjoint's gradient error at ``N_t = M`` (0.67-0.74 measured in standard mode,
0.51-0.81 in quick mode)."""
KNOT_FLOOR = 1e-2
"""The adjoint with ``jump_ts`` at ``N_t = M`` differs from backprop by more than this:
a discretisation error, three orders above rounding (about 0.4 measured)."""
PUBLISHED: dict[str, Any] = {
    "adjoint": "adjoint gradients sensitive to N_t; converging to high accuracy needed "
    "N_t >= 3M (Sec. 5.2); no numbers",
    "data": "CIFAR-10 in the paper; here the digits found (quick mode), Fashion-MNIST "
    "(standard mode), CIFAR-10 (full mode)",
}


@dataclass(frozen=True, kw_only=True)
class AdjointSettings(Settings):
    """The data, the net and its training; the same for every gradient method.

    Args:
        dataset: the data set; ``None``: the digits found (MNIST, else Fashion-MNIST).
        train_size: training images (a subset drawn by the seed); ``None``: all.
        test_size: test images; ``None``: all.
        channels: the block's channels.
        pieces: ``M``, the pieces of the piecewise-constant basis.
        pool: the head pools to ``pool x pool`` before its linear layer.
        epochs: passes over the training images.
        batch_size: images per SGD step.
        lr: the initial learning rate, cosine-annealed to ``lr / 100``.
        momentum: SGD's momentum.
        weight_decay: SGD's weight decay.
        grad_batch: training images of the gradient comparison.
        eval_batch_size: images per test pass.

    Raises:
        ValueError: a count that is not positive.

    Example:
        >>> from dataclasses import replace
        >>> replace(MODES["quick"], pieces=0)
        Traceback (most recent call last):
        ...
        ValueError: `pieces` must be a positive integer, got 0.
    """

    dataset: str | None
    train_size: int | None
    test_size: int | None
    channels: int
    pieces: int
    pool: int
    epochs: int
    batch_size: int
    lr: float
    momentum: float = 0.9
    weight_decay: float = 5e-4
    grad_batch: int = 256
    eval_batch_size: int = 500

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("channels", "pieces", "pool", "epochs", "batch_size", "grad_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")


MODES = {
    # The digits found, 256 + 128 images, a 4-channel net with M = 2: the code path.
    "quick": AdjointSettings(
        dataset=None, train_size=256, test_size=128, channels=4, pieces=2, pool=2, epochs=1,
        batch_size=32, lr=0.05, grad_batch=32, eval_batch_size=128,
    ),
    # A seeded subset of Fashion-MNIST, 5 seeds, 16 channels, M = 4, four epochs. Six
    # nets per seed; one seed of three epochs took 102 s of CPU on one thread (the
    # adjoint at 3M and 4M most of it), so four epochs take about 2.4 min per seed with
    # the gradient comparisons, about 12 min for the five seeds on an idle CPU.
    "standard": AdjointSettings(
        seeds=5, dataset="fashion-mnist", train_size=4000, test_size=2000, channels=16,
        pieces=4, pool=4, epochs=4, batch_size=64, lr=0.05,
    ),
    # The paper's data set (CIFAR-10, all of it), a wider net with M = 8, 5 seeds: a GPU job.
    "full": AdjointSettings(
        seeds=5, dataset="cifar10", train_size=None, test_size=None, channels=64, pieces=8,
        pool=4, epochs=30, batch_size=128, lr=0.1, grad_batch=512, eval_batch_size=1000,
    ),
}  # fmt: skip


def residual_module(channels: int) -> nn.Sequential:
    """``R``: the paper's pre-activation unit with group norm in place of batch norm.

    Group norm, ReLU, 3x3 conv, group norm, ReLU, 3x3 conv. Batch norm would couple
    the samples of a batch and needs running statistics per evaluation of ``R``
    (:class:`contnet.OdeBlock` keeps them in its own forward pass); the adjoint's
    backward solve evaluates ``R`` again, on states integrated backward, which no
    statistic belongs to. Group norm normalises each sample by itself: ``R`` is one
    function of ``(t, x)`` in every evaluation, forward and backward.

    Example:
        >>> residual_module(4)(torch.zeros(2, 4, 6, 6)).shape
        torch.Size([2, 4, 6, 6])
    """
    groups = 2 if channels % 2 == 0 else 1
    return nn.Sequential(
        nn.GroupNorm(groups, channels),
        nn.ReLU(),
        nn.Conv2d(channels, channels, 3, padding=1, bias=False),
        nn.GroupNorm(groups, channels),
        nn.ReLU(),
        nn.Conv2d(channels, channels, 3, padding=1, bias=False),
    )


class AdjointNet(nn.Module):
    """Stem, one OdeBlock of forward Euler over ``M`` pieces, head; differentiated by ``method``.

    The block integrates ``dx/dt = M R(x; theta(t))`` on ``[0, 1]`` with
    ``theta`` piecewise constant on ``M`` pieces: at ``N_t = M`` a ResNet of ``M``
    units, at ``N_t = kM`` the same continuous model in ``k`` times finer steps.

    Args:
        in_channels: image channels.
        num_classes: outputs.
        channels: the block's channels (the stem halves the image size).
        pieces: ``M``.
        pool: the head's pooled size.
        method: how :meth:`forward` differentiates the block (see :func:`integrate`).

    Example:
        >>> net = AdjointNet(1, 10, channels=4, pieces=2, pool=2)
        >>> net(torch.zeros(3, 1, 28, 28)).shape
        torch.Size([3, 10])
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        *,
        channels: int,
        pieces: int,
        pool: int,
        method: Method = BACKPROP,
    ) -> None:
        super().__init__()
        groups = 2 if channels % 2 == 0 else 1
        self.method = method
        self.stem = nn.Conv2d(in_channels, channels, 3, stride=2, padding=1, bias=False)
        self.block = contnet.OdeBlock(
            residual_module(channels),
            basis=PiecewiseConstant(pieces=pieces),
            solver="euler",
            n_steps=pieces,
            epsilon=float(pieces),
        )
        self.head = nn.Sequential(
            nn.GroupNorm(groups, channels),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(pool),
            nn.Flatten(),
            nn.Linear(channels * pool * pool, num_classes),
        )

    def forward(self, x: Tensor, method: Method | None = None) -> Tensor:
        """The logits, the block differentiated by ``method`` (default :attr:`method`)."""
        z = integrate(self.block, self.stem(x), method or self.method)
        out: Tensor = self.head(z)
        return out


def integrate(block: contnet.OdeBlock, x: Tensor, method: Method) -> Tensor:
    """The block's output at ``N_t = method.factor * M``, differentiated by ``method``.

    Backprop, and every method when no gradient is recorded, is contnet's own block
    at that ``N_t`` (:meth:`contnet.OdeBlock.manifest`). The others solve the block's
    field (:meth:`contnet.OdeBlock.field`, the same ``epsilon R(x; theta(t))``) with
    :func:`odecore.solve`, forward Euler in steps of ``1 / N_t``, and the basis knots
    as ``jump_ts`` where ``method.knots``; the adjoint's backward solve is Euler with
    the same step.

    Example:
        >>> net = AdjointNet(1, 10, channels=4, pieces=2, pool=2)
        >>> x = net.stem(torch.randn(2, 1, 8, 8))
        >>> same = integrate(net.block, x, Method("adjoint", 2, knots=True))
        >>> bool(torch.allclose(same, integrate(net.block, x, Method("backprop", 2)), atol=1e-6))
        True
    """
    n_steps = method.n_steps(block.basis.size)
    if method.gradient == "backprop" or not torch.is_grad_enabled():
        out: Tensor = block.manifest(n_steps=n_steps)(x)
        return out
    params = tuple(block.parameters())
    gradient = odecore.Adjoint if method.gradient == "adjoint" else odecore.Checkpoint
    spec = odecore.OdeSpec(block.solver, gradient=gradient(params=params), n_steps=n_steps)

    def field(t: Tensor, y: Tensor | tuple[Tensor, ...]) -> Tensor:
        return block.field(float(t), cast(Tensor, y))  # y0 is one tensor: so is y

    solution = odecore.solve(
        field, x, t0=0.0, t1=1.0, solver=spec.solver, dt0=spec.step_size(0.0, 1.0),
        jump_ts=block.basis.jump_ts if method.knots else None, gradient=spec.gradient,
    )  # fmt: skip
    return cast(Tensor, solution.ys)[-1]


def full_gradient(net: AdjointNet, images: Tensor, labels: Tensor, method: Method) -> Tensor:
    """Every parameter's gradient of the mean cross-entropy, flattened into one vector
    in the order of ``net.parameters()`` (stem, block, head)."""
    params = list(net.parameters())
    loss = nn.functional.cross_entropy(net(images, method), labels)
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return torch.cat(
        [(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, grads)]
    )


def _block_slice(net: AdjointNet) -> slice:
    """Where the block's coefficients lie in :func:`full_gradient`'s vector."""
    sizes = {id(p): p.numel() for p in net.parameters()}
    start = sum(p.numel() for p in net.stem.parameters())
    return slice(start, start + sum(sizes[id(p)] for p in net.block.parameters()))


def gradient_errors(
    net: AdjointNet, images: Tensor, labels: Tensor, methods: Sequence[Method] = COMPARED
) -> dict[str, float]:
    """Each method's relative gradient error against backprop at the same ``N_t``.

    ``|g - g_bp| / |g_bp|`` over the full gradient vector (stem, block, head) of the
    mean cross-entropy of ``images`` (key ``method.key``), and over the block's
    coefficients alone (key ``method.key + "/block"``).

    Returns:
        ``{method.key: error, method.key + "/block": error}``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> net = AdjointNet(1, 10, channels=4, pieces=2, pool=2)
        >>> images, labels = torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 3])
        >>> errors = gradient_errors(net, images, labels, [Method("checkpoint")])
        >>> sorted(errors), errors["checkpoint-1M"] < 1e-5
        (['checkpoint-1M', 'checkpoint-1M/block'], True)
    """
    block = _block_slice(net)
    references: dict[int, Tensor] = {}
    out = {}
    for method in methods:
        if method.factor not in references:
            backprop = Method("backprop", method.factor)
            references[method.factor] = full_gradient(net, images, labels, backprop)
        reference = references[method.factor]
        gradient = full_gradient(net, images, labels, method)
        out[method.key] = float((gradient - reference).norm() / reference.norm())
        ref = reference[block]
        out[f"{method.key}/block"] = float((gradient[block] - ref).norm() / ref.norm())
    return out


@functools.lru_cache(maxsize=4)
def _splits(
    dataset: str, train_size: int | None, test_size: int | None, seed: int, data_dir: str | None
) -> tuple[Dataset, Dataset]:
    """The seed's training and test subsets, read once for the six runs of a seed."""
    config = TrainConfig(
        model="continuousnet", dataset=dataset, train_size=train_size, test_size=test_size,
        seed=seed, data_dir=data_dir,
    )  # fmt: skip
    return load_splits(config)


def data_of(setup: Setup[AdjointSettings], seed: int) -> tuple[Dataset, Dataset]:
    """The training and test sets of ``seed``: the mode's data set or the digits found
    (the loader's ``FileNotFoundError`` when absent)."""
    s, data_dir = setup.settings, setup.options.data_dir
    dataset = s.dataset or common.digits(data_dir)
    return _splits(dataset, s.train_size, s.test_size, seed, data_dir)


def build(s: AdjointSettings, train: Dataset, seed: int, method: Method = BACKPROP) -> AdjointNet:
    """The net of ``seed``, the same initialisation for every method."""
    torch.manual_seed(seed)
    classes = train.num_classes or 10
    return AdjointNet(int(train.inputs.shape[1]), classes, channels=s.channels,
                      pieces=s.pieces, pool=s.pool, method=method)  # fmt: skip


def runs(setup: Setup[AdjointSettings], seed: int) -> list[Run]:
    """One net per method of :data:`TRAINED`, from the same initialisation and batches."""
    train, _ = data_of(setup, seed)  # a data set not found fails now, not after a run
    return [Run(m.key, task=_task(setup.settings, train, m, seed)) for m in TRAINED]


def _grad_batch(
    train: Dataset, size: int, seed: int, device: torch.device
) -> tuple[Tensor, Tensor]:
    """The fixed training images of the gradient comparison, normalised, on ``device``."""
    images, labels = next(common.batches(train, min(size, len(train)), seed))
    return train.normalize(images.to(device)), labels.to(device)


def _task(s: AdjointSettings, train: Dataset, method: Method, seed: int) -> Task:
    """SGD with ``method``'s gradients, the learning rate cosine-annealed per batch, the
    full batches in the order ``seed * 1000 + epoch`` draws; one row per epoch."""
    n, gen = len(train), torch.Generator()

    def loss(net: nn.Module, batch: tuple[Tensor, ...]) -> tuple[Tensor, dict[str, Tensor]]:
        logits = net(train.normalize(batch[0]))
        correct = (logits.detach().argmax(1) == batch[1]).sum()
        return nn.functional.cross_entropy(logits, batch[1]), {"correct": correct}

    return Task(
        model=functools.partial(build, s, train, seed, method),
        data=(train.inputs, train.targets), loss=loss,
        optimizer=functools.partial(torch.optim.SGD, lr=s.lr, momentum=s.momentum,
                                    weight_decay=s.weight_decay),
        epochs=s.epochs, batch_size=s.batch_size, seed=seed,
        order=lambda e, _: torch.randperm(n, generator=gen.manual_seed(seed * 1000 + e)),
        schedule=lambda o: CosineAnnealingLR(o, max(1, s.epochs * (n // s.batch_size)), s.lr / 100),
        row=_row, settings={"run": method.key, "seed": seed, **dataclasses.asdict(s)},
    )  # fmt: skip


def _row(epoch: Epoch) -> dict[str, float]:
    accuracy = epoch.sums["correct"] / max(epoch.count, 1)
    return {"epoch": epoch.index + 1.0, "train_loss": epoch.loss, "train_accuracy": accuracy,
            "epoch_seconds": epoch.seconds}  # fmt: skip


def measure(setup: Setup[AdjointSettings], trained: Trained) -> Measurement:
    """Test accuracy at the net's own ``N_t``, last epoch's train loss and accuracy,
    training time; for backprop's run also the gradient comparison with the weights
    at initialisation (the seed's, rebuilt) and after training (``grad_error@<method>``
    and ``grad_error_trained@<method>``)."""
    s, method = setup.settings, BY_KEY[trained.run.name]
    net = cast(AdjointNet, trained.model)  # a task run's model, built by build
    train, test = data_of(setup, trained.seed)
    device = next(net.parameters()).device
    result = evaluate(net, test, "cross_entropy", batch_size=s.eval_batch_size, device=device)
    rows = trained.history
    last = rows[-1]
    metrics: dict[str, float | None] = {
        "test_accuracy": result["acc"],
        "train_loss": last["train_loss"],
        "train_accuracy": last["train_accuracy"],
        "n_steps": float(method.n_steps(s.pieces)),
        "train_seconds": trained.seconds,
        "seconds_per_epoch": trained.seconds / len(rows),
    }
    if method == BACKPROP:
        images, labels = _grad_batch(train, s.grad_batch, trained.seed, device)
        initial = build(s, train, trained.seed).to(device)
        before = gradient_errors(initial, images, labels)
        metrics.update({f"grad_error@{k}": v for k, v in before.items()})
        after = gradient_errors(net, images, labels)
        metrics.update({f"grad_error_trained@{k}": v for k, v in after.items()})
        setup.log(
            f"[backprop seed {trained.seed}] gradient error at N_t = M, init/trained: adjoint "
            f"{metrics['grad_error@adjoint-1M']:.2e}/{after['adjoint-1M']:.2e}, knots "
            f"{metrics['grad_error@knot-1M']:.2e}/{after['knot-1M']:.2e}, checkpoint "
            f"{metrics['grad_error@checkpoint-1M']:.1e}/{after['checkpoint-1M']:.1e}"
        )
    setup.log(f"[{method.key} seed {trained.seed}] test accuracy {result['acc']:.4f}")
    per_epoch = [{k: row[k] for k in ("epoch", "train_loss", "epoch_seconds")} for row in rows]
    return Measurement(metrics, {"per_epoch": per_epoch})


#: How the claims show accuracies: in points.
POINTS: dict[str, Any] = {"spec": "+.1f", "scale": 100, "unit": " points"}


def claims(setup: Setup[AdjointSettings]) -> list[Claim]:
    """The paper's claim on accuracy (paired per-seed differences with backprop), and
    checks of the gradients, at initialisation, against backprop's at the same ``N_t``."""
    gap = f"{ACC_GAP * 100:g}"

    def error(key: str) -> tuple[str, str]:
        return ("backprop", f"grad_error@{key}")

    def checkpoint(v: Values) -> float:
        return max(v[error("checkpoint-1M")], v["backprop", "grad_error_trained@checkpoint-1M"])

    def knot_first_order(v: Values) -> bool:
        first, last = v[error("knot-1M")], v[error("knot-4M")]
        return first > KNOT_FLOOR and last < FALL * first

    return [
        Claim.difference(
            "adjoint_m_below_backprop",
            "The adjoint at N_t = M trains to a lower test accuracy than backprop",
            PUBLISHED["adjoint"], ("adjoint-1M", "test_accuracy"), ("backprop", "test_accuracy"),
            below=-ACC_GAP, kind="paper", **POINTS,
            detail=f"ours: test accuracy of the net trained by the adjoint at N_t = M minus "
            f"that of the net trained by backprop (N_t = M), same initialisation and batches, "
            f"paired by seed; holds below -{gap} point",
        ),
        *(Claim.difference(
            f"adjoint_{k}m_reaches_backprop",
            f"The adjoint at N_t = {k}M trains to backprop's test accuracy",
            PUBLISHED["adjoint"], (f"adjoint-{k}M", "test_accuracy"),
            ("backprop", "test_accuracy"), above=-ACC_GAP, kind="paper", **POINTS,
            detail=f"ours: test accuracy of the net trained by the adjoint at N_t = {k}M "
            f"(tested at N_t = {k}M) minus backprop's at N_t = M, paired by seed; holds "
            f"above -{gap} point",
        ) for k in (3, 4)),
        Claim(
            key="checkpoint_is_backprop",
            text="odecore.solve of the block's field gives backprop's gradient (Checkpoint)",
            published="not in the paper", ours=checkpoint,
            holds=lambda v: checkpoint(v) < EXACT, spec=".1e", kind="check",
            detail="ours: the larger relative error, at initialisation and after training, "
            "of the full gradient through odecore.solve of OdeBlock.field with "
            "odecore.Checkpoint (with jump_t) against backprop through contnet's block at "
            f"N_t = M; holds below {EXACT:g}: the solve computes the same network, so the "
            "adjoint's errors are the adjoint's",
        ),
        Claim.ratio(
            "adjoint_error_falls_with_nt",
            "The adjoint's gradient error falls with N_t: at 4M below half that at M",
            "adjoint gradients sensitive to N_t (Sec. 5.2)", error("adjoint-4M"),
            error("adjoint-1M"), below=FALL, kind="check",
            detail="ours: relative error of the adjoint's full gradient against backprop's "
            "at the same N_t, at initialisation, N_t = 4M over N_t = M; an error of first "
            f"order in the step gives 0.25; holds below {FALL:g}",
        ),
        Claim.ratio(
            "knots_lower_adjoint_error",
            "jump_t at the knots lowers the adjoint's gradient error at N_t = M",
            "not in the paper", error("knot-1M"), error("adjoint-1M"), below=KNOT_RATIO,
            kind="check",
            detail="ours: at initialisation, the relative gradient error of the adjoint "
            "with jump_t at the basis knots over that of the plain adjoint, both at "
            f"N_t = M; holds below {KNOT_RATIO:g}. Without jump_t each backward step that "
            "starts on a knot reads the next piece's weights and credits that piece",
        ),
        Claim(
            key="knot_adjoint_error_is_first_order",
            text="With jump_t the adjoint still differs from backprop by O(h), not rounding",
            published="not in the paper", ours=lambda v: v[error("knot-1M")],
            holds=knot_first_order, spec=".2e", kind="check",
            detail="ours: at initialisation, the relative gradient error of the adjoint "
            f"with jump_t at N_t = M; holds above {KNOT_FLOOR:g} (far from the {EXACT:g} "
            f"of rounding) with the error at N_t = 4M below {FALL:g} times it. The "
            "continuous adjoint integrated by Euler is not the discrete adjoint of "
            "forward Euler: its Jacobians are taken at the end of each step, on a state "
            "integrated backward, so it differs from backprop by O(h), and at N_t = M a "
            "step is a whole ResNet unit",
        ),
    ]  # fmt: skip


def sections(result: Result[AdjointSettings]) -> str:
    """The set-up, accuracy per method, the gradient comparison, the figure."""
    s, cell = result.settings, result.cell
    dataset = data_name(s.dataset) if s.dataset else "the digits found"
    sizes = ", ".join(
        f"{'all' if n is None else n} {what}"
        for n, what in ((s.train_size, "training"), (s.test_size, "test images"))
    )
    lines = [
        f"Data: {dataset}, {sizes} (subsets drawn by the seed). The net: a stride-2 3x3 "
        f"stem to {s.channels} channels, one OdeBlock dx/dt = M R(x; theta(t)) on [0, 1] "
        f"with theta piecewise constant on M = {s.pieces} pieces, forward Euler, R = "
        "group norm, ReLU, conv, group norm, ReLU, conv (group norm in place of the "
        f"paper's batch norm), a head pooling to {s.pool}x{s.pool} and a linear layer. "
        f"Each method trains it from the same initialisation on the same batches: SGD "
        f"(momentum {s.momentum:g}, weight decay {s.weight_decay:g}), lr {s.lr:g} "
        f"cosine-annealed to {s.lr / 100:g}, batch {s.batch_size}, {s.epochs} epochs. The "
        "adjoint is odecore.Adjoint on odecore.solve of OdeBlock.field: Euler in steps of "
        "1/N_t forward and backward (the state integrated backward); 'jump_t' adds the "
        "basis knots as jump_ts. Each net is tested at its own N_t.",
        "",
        "## Test accuracy per gradient method",
        "",
        "| method | N_t | test accuracy | minus backprop's (paired) | train loss "
        "(last epoch) | training s |",
        "|---|---|---|---|---|---|",
    ]
    for method in TRAINED:
        key = method.key
        diffs = [
            None if a is None or b is None else a - b
            for a, b in zip(
                result.stat(key, "test_accuracy").values,
                result.stat("backprop", "test_accuracy").values,
            )
        ]
        paired = "–" if method == BACKPROP else Stat.of(diffs).cell("+.1f", 100, " points")
        lines.append(
            f"| {method.label} | {method.n_steps(s.pieces)} | "
            f"{cell(key, 'test_accuracy', '.1f', 100, '%')} | {paired} | "
            f"{cell(key, 'train_loss', '.3f')} | {cell(key, 'train_seconds', '.0f')} |"
        )
    lines += [
        "",
        "## Gradients against backprop's at the same N_t",
        "",
        f"Relative error |g - g_backprop| / |g_backprop| of the gradient of the mean "
        f"cross-entropy of {s.grad_batch} training images, over every parameter (stem, "
        "block and head: what the optimiser sees) and over the block's coefficients "
        "alone, with the weights at initialisation and after backprop's training; "
        "backprop is contnet's block at the same N_t. The head's gradient is exact under "
        "every method (it needs only the block's output), so the block's error is larger.",
        "",
        "| method | all, at initialisation | all, after training | block, at "
        "initialisation | block, after training |",
        "|---|---|---|---|---|",
    ]
    for method in COMPARED:
        cells = [
            cell("backprop", f"{prefix}@{method.key}{part}", ".2e")
            for part in ("", "/block")
            for prefix in ("grad_error", "grad_error_trained")
        ]
        lines.append(f"| {method.label} | {' | '.join(cells)} |")
    lines += [
        "",
        "![gradient error against N_t, and test accuracy per method](adjoint.png)",
        "",
        "Left: the relative gradient error against N_t / M (log-log), solid at "
        "initialisation, dashed after training; the grey line is 1/N_t. Right: the test "
        "accuracy of each method, a dot per seed.",
    ]
    return "\n".join(lines)


def _plot(result: Result[AdjointSettings], path: Path) -> None:
    """Gradient error against ``N_t / M`` per adjoint, and test accuracy per method."""
    plt = pyplot()
    fig, (grads, accs) = plt.subplots(1, 2, figsize=(10.5, 4.0))
    ks = list(FACTORS)
    for knots, color, name in ((False, "C3", "adjoint"), (True, "C0", "adjoint, jump_t")):
        for prefix, style, when in (("grad_error", "o-", "init"),
                                    ("grad_error_trained", "s--", "trained")):  # fmt: skip
            ys = [
                result.stat("backprop", f"{prefix}@{Method('adjoint', k, knots).key}").mean
                for k in ks
            ]
            values = [math.nan if y is None else y for y in ys]
            grads.loglog(ks, values, style, color=color, label=f"{name} ({when})")
    first = result.stat("backprop", "grad_error@adjoint-1M").mean
    if first is not None:
        grads.loglog(ks, [first / k for k in ks], color="0.6", lw=1, label="1/N_t")
    grads.set_xticks(ks, [f"{k}M" for k in ks], minor=False)
    grads.set_xticks([], minor=True)
    grads.set(xlabel="N_t", ylabel="relative gradient error vs backprop",
              title="gradients at the same N_t")  # fmt: skip
    grads.grid(alpha=0.3, which="both")
    grads.legend(fontsize=7)
    for i, method in enumerate(TRAINED):
        stat = result.stat(method.key, "test_accuracy")
        values = [100 * v for v in stat.values if v is not None]
        accs.bar(i, 100 * stat.mean if stat.mean is not None else 0, color="C0", alpha=0.4)
        accs.plot([i] * len(values), values, "k.", ms=5)
    accs.set_xticks(range(len(TRAINED)), [m.key for m in TRAINED], rotation=30, fontsize=8)
    means = [result.stat(m.key, "test_accuracy").mean for m in TRAINED]
    finite = [100 * m for m in means if m is not None]
    if finite:
        accs.set_ylim(max(0.0, min(finite) - 10), min(100.0, max(finite) + 5))
    accs.set(ylabel="test accuracy (%)", title="trained by each gradient method")
    accs.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    save_png(path, fig, dpi=100)


def _data(setup: Setup[AdjointSettings]) -> str:
    s = setup.settings
    name = data_name(s.dataset or common.digits(setup.options.data_dir))
    train = "all" if s.train_size is None else str(s.train_size)
    test = "all" if s.test_size is None else str(s.test_size)
    return f"{name} ({train} train / {test} test)"


register_template(
    Template(
        name="contnet-adjoint",
        description="a ContinuousNet trained by backprop, by the adjoint at N_t = M..4M and "
        "by the adjoint with jump_t at the knots (Queiruga et al. 2020, Sec. 5.2)",
        title="ContinuousNet gradients: backprop against the adjoint at N_t = M ... 4M",
        modes=MODES,
        one_thread_modes=("quick", "standard"),
        runs=runs,
        measure=measure,
        claims=claims,
        sections=sections,
        figures=[Figure("adjoint.png", _plot)],
        published=PUBLISHED,
        data=_data,
    )
)

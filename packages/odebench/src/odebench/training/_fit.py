"""``fit``: one training run of a :class:`Task`, inside a run folder that survives a crash."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import importlib
import json
import math
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import odecore
import torch
import torch.distributed as dist
from torch import Tensor, nn

from .. import _io, _provenance
from .._io import Json, JsonObject, whole
from ..models import nfe
from ._config import COUNT, NON_NEGATIVE, check_fields, show_progress
from ._data import shard
from ._run_dir import (
    BAD_CHECKPOINT_FIX,
    BadCheckpointError,
    Checkpoint,
    Log,
    RunFolder,
    RunFolderError,
    load_checkpoint,
)

Batch = tuple[Tensor, ...]
Loss = Tensor | tuple[Tensor, Mapping[str, Tensor]]
Optimizer = torch.optim.Optimizer
Schedule = torch.optim.lr_scheduler.LRScheduler


class TrainingFailedError(RuntimeError):
    """Training stopped on a non-finite loss or weight, or on a solver's failure."""


class Interrupted(KeyboardInterrupt):
    """Training stopped on SIGINT or SIGTERM after saving a checkpoint."""


@dataclass(frozen=True)
class Epoch:
    """One finished epoch, as ``Task.row`` receives it (sums over every process).

    Args:
        index: the epoch, from 0.
        loss: the mean training loss per example.
        losses: each batch's loss, in order (this process's share of the batch).
        sums: the sums of what the loss returned beside the loss (``{"correct": ...}``).
        count: the examples trained on.
        batches: the batches of this process.
        nfe_forward: function evaluations of the ODE layers in the forward passes.
        nfe_backward: the same in the backward passes.
        seconds: the time the epoch took, over all its resumptions.
        world: the number of processes.
        evaluation: what ``Task.evaluate`` returned at its end (``{}`` without one).
    """

    index: int
    loss: float
    losses: tuple[float, ...]
    sums: Mapping[str, float]
    count: int
    batches: int
    nfe_forward: int
    nfe_backward: int
    seconds: float
    world: int = 1
    evaluation: Mapping[str, float | None] = field(default_factory=dict)


def default_row(epoch: Epoch) -> JsonObject:
    """The row of an epoch: ``epoch`` (from 1), ``train_loss``, every sum per example,
    the evaluation's numbers and ``epoch_seconds``."""
    per_example = {k: v / max(epoch.count, 1) for k, v in epoch.sums.items()}
    return {
        "epoch": epoch.index + 1,
        "train_loss": epoch.loss,
        **per_example,
        **epoch.evaluation,
        "epoch_seconds": epoch.seconds,
    }


def _number(row: JsonObject, key: str) -> float:
    """The number ``row[key]`` (0 when the row has none)."""
    value = row.get(key)
    return value if isinstance(value, (int, float)) else 0.0


@dataclass(frozen=True, kw_only=True)
class Task:
    """What one training run needs; :func:`fit` runs it in a run folder.

    Every random stream of the run (torch's global generator too, which dropout draws
    from, alike on every process under ``torchrun``) is seeded from ``seed`` and saved in
    the checkpoint, so a run killed at any point and resumed with :func:`fit`
    ``(resume=True)`` ends with the same weights and rows as an uninterrupted one.

    Args:
        model: builds the model, after :func:`torch.manual_seed` ``(seed)``.
        data: the training tensors, indexed together by each batch's examples.
        loss: ``loss(model, batch) -> loss``, the mean loss of a batch (a tuple of
            ``data``'s rows); or ``(loss, {name: tensor})``, whose values are summed
            over the epoch into ``Epoch.sums``. ``fit`` zeroes the gradients,
            backpropagates and steps the optimiser.
        optimizer: ``optimizer(parameters)``, e.g. ``partial(torch.optim.Adam, lr=1e-3)``.
        epochs: passes over ``data``.
        batch_size: examples per step (the global batch, split over the processes).
        seed: seeds the model, the order generator and the augmentation.
        order: ``order(epoch, generator) -> indices`` of the epoch's examples (their number
            sets the epoch's batches), from ``fit``'s generator, seeded once with ``seed``
            and checkpointed. ``None``: ``torch.randperm(len(data[0]), generator=generator)``.
        drop_last: drop the epoch's last incomplete batch (under ``torchrun``, a last
            batch kept must split evenly over the processes).
        schedule: ``schedule(optimizer)``, a learning-rate scheduler, stepped after
            every batch or at the end of every epoch (``schedule_every``).
        schedule_every: ``"batch"`` or ``"epoch"``.
        row: the epoch's row of the run's rows (``metrics.json``) from its
            :class:`Epoch`; JSON-ready values only.
        evaluate: ``evaluate(model, epoch) -> numbers``, at the end of every epoch,
            given to ``row`` as ``Epoch.evaluation``; a ``FloatingPointError`` it raises
            (a number that is not finite) stops the run as a non-finite loss does.
        after_epoch: ``after_epoch(rows)``, after each epoch's checkpoint, on every
            process (write files from the first); ``None``: a line to the log.
        refine: ``refine(epoch, model, optimizer, log) -> (model, optimizer)`` at the
            start of each epoch of ``refine_epochs``; replayed, silently, on a fresh
            model before a checkpoint is loaded into it.
        refine_epochs: the epochs (from 0) at whose start ``refine`` is called.
        augment: ``augment(batch, generator) -> batch`` before the loss, with a
            generator on the device seeded per epoch and checkpointed inside it.
        compile: compiles the model in place before training (and after a refinement).
        device: where it trains, whatever :func:`fit`'s ``device`` (``"cpu"`` for a
            model too small for a GPU); ``None``: :func:`fit`'s.
        settings: what ``resume`` compares with the checkpoint's (JSON-ready); only
            ``epochs``, ``device``, ``data_dir``, ``progress`` and ``compile`` may
            change on resume. :func:`fit` adds the data's SHA-256, ``batch_size``,
            ``seed``, ``drop_last``, ``schedule_every``, ``refine_epochs``, the
            optimiser's kind and options, and the schedule's settings as it starts: one whose
            length follows ``epochs`` keeps them. A model of other shapes does not load the
            checkpoint, but one of the same shapes (another activation) does: name what
            builds the model in ``settings``.

    Raises:
        ValueError: a bad number, no tensor in ``data``, ``refine_epochs`` without ``refine``.

    Example:
        >>> import functools, tempfile
        >>> x = torch.linspace(-1, 1, 64)[:, None]
        >>> task = Task(
        ...     model=lambda: nn.Linear(1, 1),
        ...     data=(x, 3 * x),
        ...     loss=lambda model, batch: nn.functional.mse_loss(model(batch[0]), batch[1]),
        ...     optimizer=functools.partial(torch.optim.Adam, lr=0.1),
        ...     epochs=3, batch_size=16, seed=0, settings={"lr": 0.1},
        ... )
        >>> with tempfile.TemporaryDirectory() as out:
        ...     done = fit(task, out, log=lambda line: None, progress=False)
        ...     again = fit(task, out, resume=True, log=lambda line: None, progress=False)
        >>> [row["epoch"] for row in done.rows], again.rows == done.rows
        ([1, 2, 3], True)
    """

    model: Callable[[], nn.Module]
    data: tuple[Tensor, ...]
    loss: Callable[[nn.Module, Batch], Loss]
    optimizer: Callable[[Iterator[nn.Parameter]], Optimizer]
    epochs: int
    batch_size: int
    seed: int = 0
    order: Callable[[int, torch.Generator], Tensor] | None = None
    drop_last: bool = True
    schedule: Callable[[Optimizer], Schedule] | None = None
    schedule_every: Literal["batch", "epoch"] = "batch"
    row: Callable[[Epoch], JsonObject] = default_row
    evaluate: Callable[[nn.Module, int], Mapping[str, float | None]] | None = None
    after_epoch: Callable[[list[JsonObject]], None] | None = None
    refine: Callable[[int, nn.Module, Optimizer, Log], tuple[nn.Module, Optimizer]] | None = None
    refine_epochs: tuple[int, ...] = ()
    augment: Callable[[Batch, torch.Generator], Batch] | None = None
    compile: Callable[[nn.Module], None] | None = None
    device: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_fields(
            self, ((("epochs",), whole(0), NON_NEGATIVE), (("batch_size",), whole(1), COUNT))
        )
        if not self.data:
            raise ValueError("`data` must hold at least one tensor.")
        if self.refine_epochs and self.refine is None:
            raise ValueError("Task: `refine_epochs` needs `refine`, called at their start.")


@dataclass
class _Process:
    """Where this process stands among the processes of a ``torchrun`` job."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def _process() -> _Process:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return _Process()
    return _Process(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``"auto"``: the GPU when there is one (``cuda:LOCAL_RANK`` under torchrun)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"`device` is {name!r} but torch sees no CUDA device; use --device cpu.")
    if name == "cuda":
        return torch.device("cuda", local_rank)
    return torch.device(name)


@dataclass
class _Tally:
    """Running sums over one epoch, on the device (no host sync per batch)."""

    loss: Tensor
    sums: dict[str, Tensor] = field(default_factory=dict)
    losses: list[Tensor] = field(default_factory=list)
    count: int = 0
    nfe_forward: int = 0
    nfe_backward: int = 0
    seconds: float = 0.0

    @classmethod
    def zeros(cls, device: torch.device) -> _Tally:
        return cls(torch.zeros((), dtype=torch.float64, device=device))

    @classmethod
    def load(cls, state: Mapping[str, Any]) -> _Tally:
        """The tally of a mid-epoch checkpoint (what :meth:`state` saved)."""
        fields = {f.name: state[f.name] for f in dataclasses.fields(cls)}
        return cls(**{**fields, "losses": list(state["losses"])})

    def add(
        self, loss: Tensor, extras: Mapping[str, Tensor], n: int, counts: tuple[int, int]
    ) -> None:
        """Count one batch of ``n`` examples: its mean ``loss``, its extras, its NFE."""
        self.loss += loss.detach().double() * n
        for name, value in extras.items():
            total = self.sums.setdefault(name, torch.zeros_like(self.loss))
            total += value.detach().double()
        self.losses.append(loss.detach())
        self.count += n
        self.nfe_forward += counts[0]
        self.nfe_backward += counts[1]

    def state(self) -> dict[str, Any]:
        losses = torch.stack(self.losses) if self.losses else torch.zeros(0)
        return {**vars(self), "losses": losses}

    def close(self, index: int, process: _Process) -> Epoch:
        """The epoch, summed over every process (of a pass whose shards they each took)."""
        names = sorted(self.sums)
        floats = torch.stack([self.loss, *(self.sums[k] for k in names)])
        ints = [self.count, self.nfe_forward, self.nfe_backward]
        if process.world > 1:
            summed = torch.tensor(ints, dtype=torch.float64, device=floats.device)
            dist.all_reduce(summed)
            dist.all_reduce(floats)
            ints = [int(v) for v in summed.tolist()]
        values = floats.tolist()
        losses = tuple(torch.stack(self.losses).tolist()) if self.losses else ()
        sums = dict(zip(names, values[1:], strict=True))
        return Epoch(
            index, values[0] / max(ints[0], 1), losses, sums, ints[0], len(self.losses),
            ints[1], ints[2], self.seconds, process.world,
        )  # fmt: skip


@dataclass(frozen=True)
class _Start:
    """Where a run starts: an epoch, a batch in it, and what a mid-epoch checkpoint kept."""

    epoch: int = 0
    batch: int = 0
    partial: Mapping[str, Any] | None = None  # the epoch's running totals so far
    aug_rng: Tensor | None = None  # the state of the epoch's augmentation generator


#: How a solve ends when the weights have grown too large for it.
_DIVERGED = (
    odecore.Status.NONFINITE,
    odecore.Status.MAX_STEPS_REACHED,
    odecore.Status.DT_UNDERFLOW,
)


def _postfix(tally: _Tally, seconds: float, process: _Process) -> dict[str, str]:
    count = max(tally.count, 1)
    post = {"loss": f"{float(tally.loss) / count:.4f}"}
    if "correct" in tally.sums and float(tally.sums["correct"]):
        post["acc"] = f"{100 * float(tally.sums['correct']) / count:.1f}%"
    if tally.nfe_forward:
        post["nfe"] = f"{tally.nfe_forward / max(len(tally.losses), 1):.0f}"
    post["img/s"] = f"{tally.count * process.world / max(seconds, 1e-9):.0f}"
    return post


class Training:
    """One run of a :class:`Task` in ``out``, in steps: build, :meth:`resume`, :meth:`run`.

    ``Training(task, out)`` moves the data to the device, builds the model (seeded),
    its optimiser and schedule. It neither locks nor checks ``out``: :func:`fit` (and
    :func:`train`) build it inside the run folder they hold, with the process group started.

    Args:
        task: the run.
        out: its folder: ``checkpoint.pt`` (after every epoch, and mid-epoch on
            SIGINT/SIGTERM) and ``metrics.json`` (the rows).
        device: where it trains.
        log: where the one-line summaries go.
        progress: draw a progress bar per epoch on stderr (``None``: when it is a terminal).

    Raises:
        ValueError: ``batch_size`` exceeds the training examples.

    Attributes:
        model: the model as it trains, unwrapped (a refinement replaces it).
        optimizer: its optimiser (a refinement replaces it).
        rows: one row per finished epoch.
    """

    def __init__(
        self,
        task: Task,
        out: str | os.PathLike[str],
        *,
        device: torch.device,
        log: Log = print,
        progress: bool | None = None,
    ) -> None:
        self.task = task
        self.out = Path(out)
        self.process = _process()
        self.device = device
        self._log = log
        self._progress = progress
        self.data = tuple(t.to(device) for t in task.data)
        torch.manual_seed(task.seed)  # the initialisation, then the run's draws (dropout)
        self.model: nn.Module = task.model().to(device)
        self.optimizer = task.optimizer(self.model.parameters())
        self.schedule = task.schedule(self.optimizer) if task.schedule is not None else None
        self.rows: list[JsonObject] = []
        self._order_gen = torch.Generator().manual_seed(task.seed)
        self._order_state = self._order_gen.get_state()  # before the epoch in progress drew
        self._examples = len(self.data[0])  # the epoch in progress's, once its order is drawn
        self._aug_gen = torch.Generator(device=device)  # the current epoch's augmentation
        self._start = _Start()
        self._net = self.model  # as it trains: compiled, under DDP (see `_wrap`)
        self._stopped = ""  # the name of the signal that asked the run to stop
        self._nan_batch = torch.full((), -1, device=device)  # the epoch's first, on the device
        self._segments: list[JsonObject] = []  # of the stretches before this one
        self._segment = dict(_provenance.UNKNOWN_SEGMENT)  # this one's, set by `run`
        if self.n_batches == 0:  # before anything is written into the folder
            raise ValueError(
                f"`batch_size` {task.batch_size} exceeds the {len(self.data[0])} training examples."
            )

    @property
    def checkpoint_path(self) -> Path:
        """``out/checkpoint.pt``."""
        return self.out / _io.CHECKPOINT

    @property
    def n_batches(self) -> int:
        """Global batches of the epoch in progress (of ``data``, before the first)."""
        n, size = self._examples, self.task.batch_size
        return n // size if self.task.drop_last else math.ceil(n / size)

    @property
    def seconds(self) -> float:
        """The epochs' time (``epoch_seconds`` of the rows), over every resumption."""
        return float(sum(_number(row, "epoch_seconds") for row in self.rows))

    def resume(self) -> bool:
        """Continue the run from ``out/checkpoint.pt``, when there is one.

        Returns:
            Whether there was a checkpoint (without one the run starts afresh).

        Raises:
            ValueError: the checkpoint is empty, truncated, corrupt, not a checkpoint of
                a training run, asks for code to run (refused unrun), or holds tensors
                that do not fit the model or optimiser (missing keys, other shapes); or
                was saved inside an epoch on another kind of device (CPU, CUDA), or is
                resumed inside its epoch on several processes.
        """
        if not self.checkpoint_path.exists():
            self._log(f"no checkpoint in {self.out}: starting afresh")
            return False
        state = load_checkpoint(self.checkpoint_path, self.device)
        aug_rng, size = state.get("aug_rng"), self._aug_gen.get_state().numel()
        if state["batch"] and aug_rng is not None and aug_rng.numel() != size:
            raise RunFolderError(
                f"{self.checkpoint_path} stopped inside epoch {state['epoch'] + 1} on another kind "
                f"of device than {self.device.type}, whose random draws it cannot go on with; "
                "resume it on the kind of device it ran on"
            )
        if state["batch"] and self.process.world > 1:  # each process would add its totals
            raise RunFolderError(
                f"{self.checkpoint_path} stopped inside epoch {state['epoch'] + 1}, on one "
                f"process, whose totals of the epoch so far {self.process.world} processes "
                "would each count; resume it on one process, and on more after that epoch"
            )
        try:
            self.restore(state)
        except (RuntimeError, KeyError, ValueError) as exc:  # tensors that do not fit
            # load_state_dict's first line only names the module; the next says what.
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            detail = (lines[1:2] or lines or [repr(exc)])[0].rstrip(".")
            if len(detail) > 160:
                detail = detail[:157] + "..."
            raise BadCheckpointError(
                f"{self.checkpoint_path} does not fit this run's model or optimiser: {detail}. "
                + BAD_CHECKPOINT_FIX
            ) from None
        start = self._start
        self._log(f"resuming {self.out} at epoch {start.epoch + 1}, batch {start.batch}")
        return True

    def restore(self, state: Checkpoint) -> None:
        """Put the run back where ``state``, a checkpoint of :meth:`save_checkpoint`, left it.

        The refinements made so far are replayed first; then the model, the optimiser,
        the schedule, torch's random state, the order generator, the rows and the
        position (epoch and batch, with the running totals of a mid-epoch checkpoint).
        """
        epoch, batch = state["epoch"], state["batch"]
        # A refinement comes at the start of its epoch: a run inside epoch e has made e's.
        for done in (e for e in self.task.refine_epochs if (e, 0) < (epoch, batch)):
            self._refine(done, lambda line: None)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.schedule is not None:
            if state["schedule"] is None:
                raise KeyError("schedule")
            self.schedule.load_state_dict(state["schedule"])
        torch.set_rng_state(state["rng"].cpu())
        cuda_rng = state.get("cuda_rng")
        if self.device.type == "cuda" and cuda_rng is not None:
            torch.cuda.set_rng_state(cuda_rng.cpu(), self.device)
        self._order_gen.set_state(state["order_rng"].cpu())
        self.rows = list(state["metrics"])
        self._segments = list(state.get("segments") or [_provenance.UNKNOWN_SEGMENT])
        self._start = _Start(epoch, batch, state.get("partial"), state.get("aug_rng"))

    def save_checkpoint(self, epoch: int, batch: int, tally: _Tally | None = None) -> None:
        """Save the run, ``batch`` batches into ``epoch``, to ``out/checkpoint.pt``.

        Only the first process writes; the file is replaced atomically and loads with
        ``torch.load(..., weights_only=True)``.
        """
        if not self.process.main:
            return
        cuda = self.device.type == "cuda"
        state: Checkpoint = {
            "epoch": epoch,
            "batch": batch,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict() if self.schedule is not None else None,
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state(self.device) if cuda else None,
            "aug_rng": self._aug_gen.get_state(),
            "order_rng": self._order_state if batch else self._order_gen.get_state(),
            "partial": tally.state() if tally is not None else None,
            "metrics": self.rows,
            "config": dict(self.task.settings),
            "segments": self.segments(),
        }
        _io.save_checkpoint(self.checkpoint_path, dict(state))

    def segments(self) -> list[JsonObject]:
        """Where each stretch of the run came from: one provenance segment per start or
        resume (``finished``: when the last one last saved)."""
        return [*self._segments, {**self._segment, "finished": _provenance.now()}]

    def run(self) -> None:
        """Train from where the run stands to ``task.epochs``.

        A signal after the last batch lets the run finish: :meth:`raise_if_stopped`
        then tells the caller, after it has written what it writes at the end.

        Raises:
            ValueError: a last batch kept does not split evenly over the processes.
            Interrupted: on SIGINT or SIGTERM (a single process), after the checkpoint
                is saved.
            TrainingFailedError: a non-finite loss or weight, or a solver's failure.
        """
        self._segment = _provenance.segment()
        self._net = self._wrap(self.model)
        start = self._start
        with self._stop_on_signals():
            for epoch in range(start.epoch, self.task.epochs):
                # A run resumed inside a refinement's epoch has made it (see `restore`).
                if epoch in self.task.refine_epochs and (epoch, 0) >= (start.epoch, start.batch):
                    self._refine(epoch, self._log)
                    self._net = self._wrap(self.model)
                tally = self._train_epoch(epoch)
                self._finish_epoch(epoch, tally)
        if self.rows and start.epoch >= self.task.epochs:
            # resumed after its last checkpoint, which a stop may have cut off from its rows
            if self.process.main:
                _io.write_json(self.out / "metrics.json", self.rows)
            if self.task.after_epoch is not None:  # and from what the task writes of them
                self.task.after_epoch(self.rows)
        self._net = self.model  # nothing may hold the DDP wrapper when the group ends

    def raise_if_stopped(self) -> None:
        """Raise :class:`Interrupted` if a signal came after the last batch.

        Raises:
            Interrupted: the run is complete, but the caller should stop all the same.
        """
        if self._stopped:
            raise Interrupted(
                f"{self._stopped}: stopped after the last epoch, {len(self.rows)}; "
                f"the run is complete in {self.out}"
            )

    @contextlib.contextmanager
    def _stop_on_signals(self) -> Iterator[None]:
        """Turn SIGINT/SIGTERM into a request to stop at the next batch; only for a single
        process (under torchrun the launcher stops every worker)."""
        self._stopped = ""
        if self.process.world > 1 or threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: FrameType | None) -> None:
            if self._stopped:  # a second Ctrl-C: stop now
                raise KeyboardInterrupt
            self._stopped = signal.Signals(signum).name

        signals = (signal.SIGINT.value, signal.SIGTERM.value)
        previous = {sig: signal.signal(sig, handler) for sig in signals}
        try:
            yield
        finally:
            for sig, handled in previous.items():
                signal.signal(sig, handled)

    def _wrap(self, module: nn.Module) -> nn.Module:
        """``module`` as it trains: compiled if asked, under DDP across processes."""
        if self.task.compile is not None:
            self.task.compile(module)
        if self.process.world > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            module = nn.parallel.DistributedDataParallel(module, device_ids=ids)
        return module

    def _refine(self, epoch: int, log: Log) -> None:
        """Refine for ``epoch``: train the new model and optimiser; the schedule carries over."""
        assert self.task.refine is not None  # only called for refine_epochs
        model, optimizer = self.task.refine(epoch, self.model, self.optimizer, log)
        self.model, self.optimizer = model, optimizer
        if self.schedule is not None and self.task.schedule is not None:
            state = self.schedule.state_dict()
            self.schedule = self.task.schedule(optimizer)
            self.schedule.load_state_dict(state)
            for group, lr in zip(optimizer.param_groups, self.schedule.get_last_lr(), strict=True):
                group["lr"] = lr

    def _train_epoch(self, epoch: int) -> _Tally:
        """Train one epoch (its remaining batches, in a run resumed inside it), seeding its
        augmentation; the first process draws its tqdm bar on stderr when ``progress`` asks."""
        from tqdm.auto import tqdm  # type: ignore[import-untyped]

        seed = self.task.seed * 7919 + epoch
        self._aug_gen = torch.Generator(device=self.device).manual_seed(seed)
        first, tally, start = 0, _Tally.zeros(self.device), self._start
        if epoch == start.epoch and start.partial is not None and start.aug_rng is not None:
            self._aug_gen.set_state(start.aug_rng.cpu())
            first, tally = start.batch, _Tally.load(start.partial)
        self._nan_batch.fill_(-1)
        self._order_state = self._order_gen.get_state()
        if self.task.order is not None:
            order = self.task.order(epoch, self._order_gen)
        else:
            order = torch.randperm(len(self.data[0]), generator=self._order_gen)
        order = order.to(self.data[0].device)
        self._examples = len(order)
        last, world = self._examples % self.task.batch_size, self.process.world
        if not self.task.drop_last and last % world:  # each process would take last // world
            raise ValueError(
                f"The last batch of epoch {epoch + 1}, {last} examples, does not split evenly "
                f"over {world} processes; set `drop_last`, or another `batch_size`."
            )
        bar = tqdm(
            total=self.n_batches,
            initial=first,
            desc=f"epoch {epoch + 1}/{self.task.epochs}",
            file=sys.stderr,
            disable=not (show_progress(self._progress) and self.process.main),
            dynamic_ncols=True,
            leave=False,
        )
        size = self.task.batch_size
        self._net.train()
        tick, done = time.perf_counter(), first
        for i in range(first, self.n_batches):
            self._step(epoch, i, order[i * size : (i + 1) * size], tally)
            bar.update(1)
            done = i + 1  # a host sync every 10 batches, and none without a bar
            if not bar.disable and (done % 10 == 0 or done == self.n_batches):
                seconds = time.perf_counter() - tick + tally.seconds
                bar.set_postfix(_postfix(tally, seconds, self.process))
            if self._stopped:
                break
        bar.close()
        tally.seconds += time.perf_counter() - tick
        self._check_finite(epoch, done)
        if self._stopped:
            self.save_checkpoint(epoch, done, tally)
            raise Interrupted(
                f"{self._stopped}: stopped at epoch {epoch + 1}, batch {done}; "
                f"checkpoint saved in {self.checkpoint_path}"
            )
        if self.schedule is not None and self.task.schedule_every == "epoch":
            with warnings.catch_warnings():  # an epoch resumed after its last batch
                warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler")
                self.schedule.step()
        return tally

    def _diverged(self, epoch: int, at: str, exc: Exception | str) -> TrainingFailedError:
        """The error of a non-finite number or a solver's failure at ``at`` of ``epoch``; the
        weights are blamed only when the solver's status says the state blew up."""
        path = self.checkpoint_path
        kept = f"; {path} holds epoch {epoch}" if path.exists() else ""
        if isinstance(exc, odecore.SolverError) and exc.status not in _DIVERGED:
            hint = "The solver's options: --n-steps, --rtol, --atol, --solver-option NAME=VALUE"
        else:
            hint = "The weights have probably diverged: lower --lr"
        return TrainingFailedError(f"epoch {epoch + 1}, {at}: {exc} {hint}{kept}.")

    def _check_finite(self, epoch: int, batches: int) -> None:
        """Raise :class:`TrainingFailedError` before a checkpoint if a loss of the epoch
        (marked on the device as it came) or a weight is not finite, on every process."""
        first = self._nan_batch.clone()
        if self.process.world > 1:
            dist.all_reduce(first, op=dist.ReduceOp.MAX)
        if int(first) >= 0:
            at, what = f"batch {int(first) + 1}", "the training loss is nan"
        else:
            name = next(
                (n for n, p in self.model.named_parameters() if not p.isfinite().all()), None
            )
            if name is None:
                return
            at, what = f"batch {batches}", f"the weight {name} is not finite"
        raise self._diverged(epoch, at, f"{what}.")

    def _step(self, epoch: int, i: int, idx: Tensor, tally: _Tally) -> None:
        """Train on batch ``i`` of ``epoch``, the examples ``idx``; add it to ``tally``."""
        batch = tuple(t[idx] for t in self.data)
        if self.task.augment is not None:
            batch = self.task.augment(batch, self._aug_gen)
        batch = tuple(shard(t, self.process.rank, self.process.world) for t in batch)
        try:
            out = self.task.loss(self._net, batch)
            loss, extras = out if isinstance(out, tuple) else (out, {})
            bad = (self._nan_batch < 0) & ~loss.detach().isfinite()
            self._nan_batch = torch.where(bad, i, self._nan_batch)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
        except odecore.SolverError as exc:
            raise self._diverged(epoch, f"batch {i + 1}", exc) from exc
        self.optimizer.step()
        if self.schedule is not None and self.task.schedule_every == "batch":
            self.schedule.step()
        tally.add(loss, extras, len(batch[0]), nfe(self.model))

    def _finish_epoch(self, epoch: int, tally: _Tally) -> None:
        """Evaluate ``epoch``, record and save it; stop after it if a signal asked to."""
        summed, evaluate = tally.close(epoch, self.process), self.task.evaluate
        try:
            evaluation = {} if evaluate is None else evaluate(self.model, epoch)
        except (odecore.SolverError, FloatingPointError) as exc:  # the latter: a NaN result
            raise self._diverged(epoch, "evaluation", exc) from exc
        summed = dataclasses.replace(summed, evaluation=evaluation)
        self.rows.append(self.task.row(summed))
        self.save_checkpoint(epoch + 1, 0)
        if self.process.main:
            _io.write_json(self.out / "metrics.json", self.rows)
        if self.task.after_epoch is not None:
            self.task.after_epoch(self.rows)
        else:
            self._log(
                f"epoch {epoch + 1}/{self.task.epochs}  train loss {summed.loss:.4g}  "
                f"{summed.seconds:.1f} s"
            )
        if self._stopped and epoch + 1 < self.task.epochs:
            raise Interrupted(
                f"{self._stopped}: stopped after epoch {epoch + 1}; "
                f"checkpoint saved in {self.checkpoint_path}"
            )


@contextlib.contextmanager
def held(
    out: str | os.PathLike[str],
    *,
    device: str,
    batch_size: int,
    settings: Mapping[str, Json],
    epochs: int,
    resume: bool,
    overwrite: bool,
    log: Log,
    defaults: Mapping[str, Json],
) -> Iterator[torch.device]:
    """Hold the run folder ``out`` (the first process locks and checks it, every process
    raises its error) and the process group; yield this process's device."""
    process = _process()
    where = resolve_device(device, process.local_rank)
    started_group = False
    if process.world > 1 and not dist.is_initialized():
        # DDP imports this (through torch._dynamo) when it first wraps a module, and
        # imported after the group has started, it would bind the group into its
        # functions' defaults for good; imported first, its defaults are None.
        importlib.import_module("torch.distributed.nn.functional")
        dist.init_process_group("nccl" if where.type == "cuda" else "gloo")
        started_group = True
    folder = RunFolder(out)
    try:
        if where.type == "cuda":
            torch.cuda.set_device(where)
        if process.world > 1 and batch_size % process.world:
            raise ValueError(
                f"`batch_size` {batch_size} does not split evenly over {process.world} "
                "processes; choose a multiple of the number of processes."
            )
        error: BaseException | None = None
        if process.main:
            try:
                folder.acquire(log)
                folder.prepare(resume=resume, overwrite=overwrite, log=log)
                if resume:
                    folder.check_resume(settings, epochs, defaults)
            except (ValueError, OSError) as exc:
                error = exc
        if process.world > 1:  # every process raises the first one's error
            verdict = [error]
            dist.broadcast_object_list(verdict, src=0)
            error = verdict[0]
        if error is not None:
            raise error
        yield where
    finally:
        folder.release()
        if started_group:
            # Reference cycles (caught exceptions' tracebacks) can hold the DDP wrapper and
            # so the group, whose gloo threads then abort the worker at exit.
            gc.collect()
            dist.destroy_process_group()


def fit(
    task: Task,
    out: str | os.PathLike[str],
    *,
    resume: bool = False,
    overwrite: bool = False,
    log: Log = print,
    device: str = "auto",
    progress: bool | None = None,
) -> Training:
    """Run ``task`` in the run folder ``out``: locked, checkpointed, resumable, as the training
    guide's "One run per folder" and "Crashes and resuming" describe; under ``torchrun``
    in ``DistributedDataParallel``.

    Args:
        task: the run.
        out: its folder.
        resume: continue from ``out/checkpoint.pt`` (a fresh start when there is none).
        overwrite: move what ``out`` holds aside, then start afresh.
        log: where the one-line summaries go.
        device: where it trains (see :func:`resolve_device`), unless ``task.device`` says.
        progress: draw a progress bar (``None``: when stderr is a terminal).

    Returns:
        The finished run: its ``model``, ``rows`` and ``seconds``.

    Raises:
        RunExistsError: ``out`` holds a run and neither ``resume`` nor ``overwrite`` is
            set, or another process holds its lock (a ``FileExistsError``).
        ValueError: ``resume`` with changed settings; a bad checkpoint.
        Interrupted: on SIGINT or SIGTERM, after the checkpoint is saved.
        TrainingFailedError: a non-finite loss or weight, or a solver's failure.
    """
    digest = hashlib.sha256()
    for tensor in task.data:  # a resume checks that it trains on the same data
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().data)
    data: dict[str, Json] = {"data_sha256": digest.hexdigest()}
    # and how it cuts, orders and schedules it, whatever its own settings name
    names = ("batch_size", "seed", "drop_last", "schedule_every", "refine_epochs")
    data["task"] = json.loads(json.dumps({k: getattr(task, k) for k in names}))
    # and its optimiser, whose saved rate and options loading its state would put back
    bare = task.optimizer(iter([nn.Parameter(torch.zeros(1))]))
    groups = [{k: v for k, v in group.items() if k != "params"} for group in bare.param_groups]
    # What JSON cannot hold (a function's repr names its address) is not compared.
    data["optimizer"] = json.loads(
        json.dumps([type(bare).__name__, groups], default=lambda _: None)
    )
    if task.schedule is not None:  # and that its schedule is the same (a length of epochs)
        schedule = task.schedule(bare).state_dict()
        data["schedule"] = json.loads(json.dumps(schedule, default=lambda _: None))
    task = dataclasses.replace(task, settings={**task.settings, **data})
    with held(
        out, device=task.device or str(device), batch_size=task.batch_size,
        settings=task.settings, epochs=task.epochs, resume=resume, overwrite=overwrite, log=log,
        defaults=data,  # a run saved before it was recorded
    ) as where:  # fmt: skip
        training = Training(task, out, device=where, log=log, progress=progress)
        if resume:
            training.resume()
        training.run()
    training.raise_if_stopped()
    return training

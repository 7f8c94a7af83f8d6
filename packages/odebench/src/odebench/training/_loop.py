"""``train``: the training loop with its checkpoints, metrics, plots and processes."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, cast

import odecore
import torch
import torch.distributed as dist
from contnet import ContinuousNet, RefinementSchedule, refine
from odelayers import NeuralODE
from torch import Tensor, nn

from .. import _io, _provenance
from ..data import Augment, Dataset
from ..models import MODELS, build_model, count_parameters, nfe
from ._config import TrainConfig, show_progress
from ._data import epoch_order, load_splits, shard, train_batches
from ._run_dir import BadCheckpointError, RunFolder, load_checkpoint

Log = Callable[[str], None]


class TrainingFailedError(RuntimeError):
    """Training stopped on a non-finite loss or weight, or on a solver's failure."""


class Interrupted(KeyboardInterrupt):
    """Training stopped on SIGINT or SIGTERM after saving a checkpoint."""


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


def _compile_in_place(module: nn.Module) -> None:
    """``torch.compile`` what of ``module`` compiles.

    A Neural ODE layer whose spec compiles (a fixed-step explicit solver with
    backprop, :meth:`odecore.OdeSpec.compile_blockers`) solves as one graph,
    ``compile=True``: the steps and the field together. Any other ODE layer keeps its
    eager solver loop, whose step sizes are Python floats chosen at run time, and
    compiles its vector field alone. A model without ODE layers is compiled whole.
    Parameter names do not change, so checkpoints are the same with and without
    compilation.
    """
    layers = [
        node
        for node in module.modules()
        if isinstance(node, NeuralODE) and isinstance(node.vector_field, nn.Module)
    ]
    for layer in layers:
        if layer.spec.compile_blockers():
            cast(nn.Module, layer.vector_field).compile()
        else:
            layer.spec = dataclasses.replace(layer.spec, compile=True)
    if not layers:
        module.compile()


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
class _Totals:
    """Running sums over one pass, on the device (no host sync per batch)."""

    loss: Tensor
    correct: Tensor
    count: int = 0
    batches: int = 0
    nfe_forward: int = 0
    nfe_backward: int = 0
    seconds: float = 0.0

    @classmethod
    def zeros(cls, device: torch.device) -> _Totals:
        z = torch.zeros((), dtype=torch.float64, device=device)
        return cls(loss=z.clone(), correct=z.clone())

    def add(
        self, loss: Tensor, out: Tensor, target: Tensor, *, classify: bool, nfe: tuple[int, int]
    ) -> None:
        """Count one batch: its mean ``loss``, its correct predictions, its NFE."""
        self.loss += loss.detach().double() * len(target)
        if classify:
            self.correct += (out.detach().argmax(dim=1) == target).sum()
        self.count += len(target)
        self.batches += 1
        self.nfe_forward += nfe[0]
        self.nfe_backward += nfe[1]

    def state(self) -> dict[str, Any]:
        return {
            "loss": self.loss,
            "correct": self.correct,
            "count": self.count,
            "batches": self.batches,
            "nfe_forward": self.nfe_forward,
            "nfe_backward": self.nfe_backward,
            "seconds": self.seconds,
        }

    def reduce(self, process: _Process) -> _Totals:
        """The sums over every process (of a pass whose shards they each took)."""
        if process.world == 1:
            return self
        device = self.loss.device
        ints = torch.tensor(
            [self.count, self.nfe_forward, self.nfe_backward], dtype=torch.float64, device=device
        )
        floats = torch.stack([self.loss, self.correct])
        dist.all_reduce(ints)
        dist.all_reduce(floats)
        count, nf, nb = (int(v) for v in ints.tolist())
        return _Totals(floats[0], floats[1], count, self.batches, nf, nb, self.seconds)


@dataclass
class _Stop:
    """Set by SIGINT/SIGTERM; the loop checks it between batches."""

    requested: bool = False
    signal_name: str = ""
    previous: dict[int, Any] = field(default_factory=dict)


@contextlib.contextmanager
def _stop_on_signals(enabled: bool) -> Iterator[_Stop]:
    """Turn SIGINT/SIGTERM into a request to stop at the next batch.

    Only for a single process: under torchrun the launcher stops every worker, and a
    worker that ignored its SIGTERM would only delay that.
    """
    stop = _Stop()
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.requested:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        stop.requested = True
        stop.signal_name = signal.Signals(signum).name

    for sig in (signal.SIGINT.value, signal.SIGTERM.value):
        stop.previous[sig] = signal.signal(sig, handler)
    try:
        yield stop
    finally:
        for sig, previous in stop.previous.items():
            signal.signal(sig, previous)


def _loss(kind: str, out: Tensor, target: Tensor) -> Tensor:
    if kind == "mse":
        return nn.functional.mse_loss(out.float(), target)
    return nn.functional.cross_entropy(out.float(), target)


def _dims(data: Dataset) -> dict[str, int]:
    if data.inputs.dim() == 4:
        image_size = data.inputs.shape[-1]
        return {"in_channels": data.inputs.shape[1], "image_size": image_size}
    return {"in_channels": data.inputs.shape[-1], "image_size": 0}


def _outputs(data: Dataset) -> int:
    if data.num_classes is not None:
        return data.num_classes
    return int(data.targets.shape[-1]) if data.targets.dim() > 1 else 1


def evaluate(
    model: nn.Module,
    data: Dataset,
    loss_kind: str,
    *,
    batch_size: int,
    device: torch.device,
    bf16: bool = False,
    process: _Process | None = None,
) -> dict[str, float | None]:
    """Loss, accuracy (classification) and mean forward NFE of ``model`` on ``data``.

    Under ``torchrun`` every process takes its share of the examples and the sums
    are combined.
    """
    process = process or _Process()
    totals = _Totals.zeros(device)
    indices = torch.arange(len(data), device=data.inputs.device)[process.rank :: process.world]
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for start in range(0, len(indices), batch_size):
            idx = indices[start : start + batch_size]
            x = data.normalize(data.inputs[idx].to(device, non_blocking=True))
            y = data.targets[idx].to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                out = model(x)
            classify = loss_kind == "cross_entropy"
            totals.add(_loss(loss_kind, out, y), out, y, classify=classify, nfe=(nfe(model)[0], 0))
    model.train(was_training)
    totals = totals.reduce(process)
    count = max(totals.count, 1)
    batches = max(math.ceil(len(data) / batch_size), 1)
    return {
        "loss": float(totals.loss) / count,
        "acc": float(totals.correct) / count if loss_kind == "cross_entropy" else None,
        "nfe": totals.nfe_forward / batches / process.world if totals.nfe_forward else None,
    }


# A process group that something still holds after `destroy_process_group` keeps
# gloo's threads running until the interpreter's shutdown tears them down. A worker
# that had finished its run once aborted at exit in that state ("terminate called
# without an active exception"). `_start_group` and `_end_group` make sure nothing
# holds the group when it is destroyed, so its worker threads end before `train`
# returns.


def _start_group(backend: str) -> None:
    """Start the default process group; see ``_end_group``.

    ``torch.distributed.nn.functional`` binds ``group.WORLD`` into the defaults of its
    functions when it is imported, and ``DistributedDataParallel`` imports it (through
    ``torch._dynamo``) the first time it wraps a module. Imported after the group has
    started, it would hold the group for good; imported first, its defaults are ``None``.
    """
    importlib.import_module("torch.distributed.nn.functional")
    dist.init_process_group(backend)


def _end_group() -> None:
    """Destroy the default process group, and with it gloo's worker threads.

    The ``DistributedDataParallel`` wrapper holds the group, and reference cycles can
    hold the wrapper after ``Trainer.fit`` returns: the exceptions that pyparsing raises
    and catches while matplotlib draws the curves sit in cycles with their tracebacks,
    whose frames reach up to ``fit``'s, and through its ``self`` to the wrapper.
    Collecting the cycles first leaves the group's registry, which
    ``destroy_process_group`` empties, its last holder.
    """
    gc.collect()
    dist.destroy_process_group()


def train(
    config: TrainConfig,
    out: str | os.PathLike[str],
    *,
    resume: bool = False,
    overwrite: bool = False,
    log: Log = print,
) -> dict[str, Any]:
    """Train ``config.model`` on ``config.dataset`` and write the run into ``out``.

    Files (written by the first process only, each atomically):
    ``config.json`` (the resolved configuration and the environment),
    ``metrics.json`` and ``metrics.csv`` (one row per epoch), ``curves.png``,
    ``checkpoint.pt`` (after every epoch, and mid-epoch on SIGINT/SIGTERM) and, at the
    end, ``results.json``. With ``resume`` the run continues from ``checkpoint.pt``:
    the data order and augmentation depend only on the seed and the epoch, and the
    random state is restored, so on the CPU a resumed run ends with the same
    metrics as an uninterrupted one.

    While it runs, the run holds the lock ``out/.lock``: a second run into ``out``
    is refused, and the lock of a run that was killed is taken over. A folder that
    holds anything is never overwritten: ``resume`` continues the run in it (with the
    same settings but for ``epochs``, ``device``, ``data_dir``, ``progress`` and
    ``compile``), ``overwrite`` moves it aside to ``<out>.old-<time>`` first.

    Under ``torchrun`` (``WORLD_SIZE > 1``) the model is wrapped in
    ``DistributedDataParallel`` (gloo on the CPU, NCCL on GPUs) and every global
    batch is split evenly over the processes. The process group is started here
    unless one is already running, and a group started here is destroyed at the end
    of the run. Only the first process locks and checks ``out``; the others learn
    its verdict.

    Args:
        config: the run.
        out: its output directory.
        resume: continue from ``out/checkpoint.pt`` (a fresh start when there is none).
        overwrite: move what ``out`` holds aside to ``<out>.old-<time>``, then start afresh.
        log: where the one-line summaries go (a line per epoch).

    Returns:
        The content of ``results.json``.

    Raises:
        RunExistsError: ``out`` holds a run and neither ``resume`` nor ``overwrite`` is
            set, or another process holds its lock (a ``FileExistsError``).
        ValueError: ``out`` is a file; ``resume`` with changed settings; a checkpoint
            that is empty, truncated, corrupt or asks for code to run (refused unrun).
        Interrupted: on SIGINT or SIGTERM, after the checkpoint is saved.
        TrainingFailedError: the solver of an ODE model failed (diverged weights) in
            training or evaluation; the checkpoint of the last finished epoch is kept.
        FileNotFoundError: the data set's files are not where they were looked for.
        WriteError: a file of the run cannot be written (a full disk); the file it
            would have replaced is kept (an ``OSError``).
    """
    out = Path(out)
    process = _process()
    started_group = False
    if process.world > 1 and not dist.is_initialized():
        _start_group("nccl" if resolve_device(config.device).type == "cuda" else "gloo")
        started_group = True
    folder = RunFolder(out)
    try:
        device = resolve_device(config.device, process.local_rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        _check_split(config, process)
        _claim(folder, config, process, resume=resume, overwrite=overwrite, log=log)
        trainer = Trainer(config, out, device=device, log=log)
        if resume:
            trainer.resume()
        results = trainer.fit()
        del trainer  # nothing may hold the DDP wrapper when the group ends: see `_end_group`
        return results
    finally:
        folder.release()
        if started_group:
            _end_group()


def _check_split(config: TrainConfig, process: _Process) -> None:
    """Refuse a global batch that the processes cannot share evenly."""
    if process.world > 1 and config.batch_size % process.world:
        raise ValueError(
            f"`batch_size` {config.batch_size} does not split evenly over {process.world} "
            "processes; choose a multiple of the number of processes."
        )


def _claim(
    folder: RunFolder,
    config: TrainConfig,
    process: _Process,
    *,
    resume: bool,
    overwrite: bool,
    log: Log,
) -> None:
    """Lock ``folder`` and check it may take the run (first process); tell the others.

    Every process raises the first process's error, so that none of them starts
    training into a folder the first one refused.
    """
    error: BaseException | None = None
    if process.main:
        try:
            folder.acquire(log)
            folder.prepare(resume=resume, overwrite=overwrite, log=log)
            if resume:
                folder.check_resume(config)
        except (ValueError, OSError) as exc:
            error = exc
    if process.world > 1:
        verdict: list[BaseException | None] = [error]
        dist.broadcast_object_list(verdict, src=0)
        error = verdict[0]
    if error is not None:
        raise error


@dataclass(frozen=True)
class _Start:
    """Where a run starts: an epoch, a batch in it, and what a mid-epoch checkpoint kept."""

    epoch: int = 0
    batch: int = 0
    partial: dict[str, Any] | None = None  # the epoch's running totals so far
    aug_rng: Tensor | None = None  # the state of the epoch's augmentation generator

    @property
    def inside(self) -> bool:
        """Whether the run resumes inside :attr:`epoch` (refined already, if it refines)."""
        return self.batch > 0


def _optimizer(config: TrainConfig, model: nn.Module) -> torch.optim.Optimizer:
    """The optimiser of ``config`` over the parameters of ``model``."""
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            model.parameters(),
            lr=config.lr,
            momentum=config.momentum,
            weight_decay=config.weight_decay,
        )
    return torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)


def _augment(config: TrainConfig) -> Augment | None:
    """Random crops (and flips on CIFAR) when ``config.augment``, else ``None``."""
    if not config.augment:
        return None
    return Augment(crop_padding=4, flip=config.dataset.startswith("cifar"))


class Trainer:
    """One training run of a :class:`TrainConfig`: its data, model, optimiser and state.

    ``Trainer(config, out)`` loads the data and builds the model (initialised from
    ``config.seed``) and its optimiser. :meth:`resume` puts the run back where
    ``out/checkpoint.pt`` left it; :meth:`fit` trains to ``config.epochs`` and writes
    the files that :func:`train` describes. :func:`train` is this class behind the lock
    of ``out`` (and, under ``torchrun``, the process group): a ``Trainer`` neither locks
    nor checks ``out``, and under ``torchrun`` needs the process group started.

    Args:
        config: the run.
        out: its output directory.
        device: where it trains; ``None``: ``config.device`` (see :func:`resolve_device`).
        log: where the one-line summaries go.

    Attributes:
        config: the run.
        out: its output directory.
        device: where it trains.
        model: the model as it trains, unwrapped (refined ContinuousNets replace it).
        optimizer: its optimiser (replaced with its state carried over at a refinement).
        metrics: one row per finished epoch, as in ``metrics.json``.

    Raises:
        FileNotFoundError: the data set's files are not where they were looked for.
        ValueError: ``config.device`` is a GPU that torch does not see; under
            ``torchrun``, ``batch_size`` does not split evenly over the processes.

    Example:
        >>> import tempfile
        >>> from dataclasses import replace
        >>> from pathlib import Path
        >>> from odebench.training import TrainConfig, Trainer
        >>> config = TrainConfig(model="toy-node", dataset="annuli-1d", optimizer="adam",
        ...                      lr=3e-3, epochs=1, batch_size=32, train_size=64,
        ...                      test_size=64, device="cpu", progress=False)
        >>> quiet = lambda line: None
        >>> with tempfile.TemporaryDirectory() as out:
        ...     results = Trainer(config, out, log=quiet).fit()
        ...     files = sorted(p.name for p in Path(out).iterdir())
        ...     longer = Trainer(replace(config, epochs=2), out, log=quiet)
        ...     resumed = longer.resume()
        ...     final = longer.fit()
        >>> files  # doctest: +NORMALIZE_WHITESPACE
        ['checkpoint.pt', 'config.json', 'curves.png', 'metrics.csv', 'metrics.json',
         'results.json']
        >>> resumed, results["epochs"], final["epochs"], [row["epoch"] for row in longer.metrics]
        (True, 1, 2, [1, 2])
    """

    def __init__(
        self,
        config: TrainConfig,
        out: str | os.PathLike[str],
        *,
        device: torch.device | None = None,
        log: Log = print,
    ) -> None:
        self.config = config
        self.out = Path(out)
        self._process = _process()
        _check_split(config, self._process)
        if device is None:
            device = resolve_device(config.device, self._process.local_rank)
        self.device = device
        self._log = log
        train_set, test_set = load_splits(config)
        self._train_set, self._test_set = train_set.to(device), test_set.to(device)
        torch.manual_seed(config.seed)
        self._dims = {**_dims(self._train_set), "num_classes": _outputs(self._train_set)}
        self.model: nn.Module = _build(config, self._dims).to(device)
        self._parameters = count_parameters(self.model)  # of the model as it starts
        self.optimizer = _optimizer(config, self.model)
        self.metrics: list[dict[str, Any]] = []
        self._augment = _augment(config)
        self._schedule = RefinementSchedule(epochs=config.refine_epochs)
        self._start = _Start()
        self._net = self.model  # as it trains: compiled, under DDP (see `_wrap`)
        self._gen = torch.Generator(device=device)  # the current epoch's augmentation
        self._stop = _Stop()
        self._nan_batch = torch.full((), -1, device=device)  # the epoch's first, on the device
        self._segments: list[dict[str, Any]] = []  # of the stretches before this one
        self._segment = dict(_provenance.UNKNOWN_SEGMENT)  # this one's, set by `fit`
        log(self._summary())

    @property
    def checkpoint_path(self) -> Path:
        """``out/checkpoint.pt``."""
        return self.out / _io.CHECKPOINT

    @property
    def n_batches(self) -> int:
        """Full global batches per epoch (the last incomplete one is dropped)."""
        return len(self._train_set) // self.config.batch_size

    def _summary(self) -> str:
        config, process = self.config, self._process
        published = MODELS[config.model].published_params
        return (
            f"{config.model} on {config.dataset}: {self._parameters:,} parameters"
            + (f" (published {published / 1e6:.2f}M)" if published else "")
            + f", {len(self._train_set)} training and {len(self._test_set)} test examples, "
            + f"{self.device}"
            + (f", {process.world} processes" if process.world > 1 else "")
        )

    def resume(self) -> bool:
        """Continue the run from ``out/checkpoint.pt``, when there is one.

        Returns:
            Whether there was a checkpoint (without one the run starts afresh).

        Raises:
            ValueError: the checkpoint is empty, truncated, corrupt, not a checkpoint of
                a training run, asks for code to run (refused unrun), or holds tensors
                that do not fit the model or optimiser (missing keys, other shapes).
        """
        if not self.checkpoint_path.exists():
            self._log(f"no checkpoint in {self.out}: starting afresh")
            return False
        state = load_checkpoint(self.checkpoint_path, self.device)
        try:
            self.restore(state)
        except (RuntimeError, KeyError, ValueError) as exc:  # tensors that do not fit
            # load_state_dict's first line only names the module; the next says what.
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            detail = lines[1] if len(lines) > 1 else (lines[0] if lines else repr(exc))
            detail = detail.rstrip(".")
            if len(detail) > 160:
                detail = detail[:157] + "..."
            raise BadCheckpointError(
                f"{self.checkpoint_path} does not fit this run's model or optimiser: {detail}. "
                "Delete it, or pass --overwrite to move the run aside and start afresh"
            ) from None
        start = self._start
        self._log(f"resuming {self.out} at epoch {start.epoch + 1}, batch {start.batch}")
        return True

    def restore(self, state: dict[str, Any]) -> None:
        """Put the run back where ``state``, a checkpoint of ``save_checkpoint``, left it.

        The model, the optimiser, torch's random state, the metrics and the position
        (epoch and batch, with the running totals of a mid-epoch checkpoint). A
        ContinuousNet is refined first as often as the checkpointed one was.

        Args:
            state: the checkpoint, as ``torch.load`` returns it.
        """
        done = self.config.refinements_before(state["epoch"], state["batch"])
        for epoch in self.config.refine_epochs[:done]:
            net = cast(ContinuousNet, self.model)
            self.model, self.optimizer = self._schedule.step(epoch, net, self.optimizer)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"].cpu())
        if self.device.type == "cuda" and state.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(state["cuda_rng"].cpu(), self.device)
        self.metrics = list(state["metrics"])
        self._segments = list(state.get("segments") or [_provenance.UNKNOWN_SEGMENT])
        self._start = _Start(
            state["epoch"], state["batch"], state.get("partial"), state.get("aug_rng")
        )
        self._net = self.model

    def save_checkpoint(self, epoch: int, batch: int, totals: _Totals | None = None) -> None:
        """Save the run, ``batch`` batches into ``epoch``, to ``out/checkpoint.pt``.

        Only the first process writes; the file is replaced atomically and loads with
        ``torch.load(..., weights_only=True)``.

        Args:
            epoch: the epoch the run stands in (the number of finished epochs).
            batch: the batches of ``epoch`` done; 0 at an epoch's end.
            totals: the epoch's running totals when ``batch`` is not 0.
        """
        if not self._process.main:
            return
        state = {
            "epoch": epoch,
            "batch": batch,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "cuda_rng": (
                torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
            ),
            "aug_rng": self._gen.get_state(),
            "partial": totals.state() if totals is not None else None,
            "metrics": self.metrics,
            "config": self.config.to_dict(),
            "segments": self.segments(),
        }
        _io.save_checkpoint(self.checkpoint_path, state)

    def segments(self) -> list[dict[str, Any]]:
        """Where each stretch of the run came from: one segment per start or resume.

        Each holds the ``commit``, whether the tree was ``dirty``, the ``source`` hash
        of the packages, when it ``started`` and when it ``finished`` (or last saved,
        for this one). A stretch of a checkpoint from before segments were recorded
        has every field ``None``.
        """
        return [*self._segments, {**self._segment, "finished": _provenance.now()}]

    def fit(self) -> dict[str, Any]:
        """Train from where the run stands to ``config.epochs``, writing the run's files.

        Returns:
            The content of ``results.json``.

        Raises:
            ValueError: ``batch_size`` exceeds the training examples.
            Interrupted: on SIGINT or SIGTERM (a single process), after the checkpoint
                is saved; after ``results.json`` too when the signal came after the last
                batch, so that the caller stops all the same.
            TrainingFailedError: the solver of an ODE model failed.
        """
        self._segment = _provenance.segment()
        if self._process.main:
            _io.write_json(self.out / "config.json", self._description())
        self._net = self._wrap(self.model)
        if self.n_batches == 0:
            raise ValueError(
                f"`batch_size` {self.config.batch_size} exceeds the "
                f"{len(self._train_set)} training examples."
            )
        started = time.perf_counter()
        with _stop_on_signals(self._process.world == 1) as self._stop:
            for epoch in range(self._start.epoch, self.config.epochs):
                self._refine(epoch)
                totals = self.train_epoch(epoch)
                self._finish_epoch(epoch, totals)
        results = self._results(time.perf_counter() - started)
        if self._process.main:
            _io.write_json(self.out / "results.json", results)
        if self._stop.requested:  # after the last batch (evaluation, save): the run is whole
            raise Interrupted(
                f"{self._stop.signal_name}: stopped after the last epoch, {len(self.metrics)}; "
                f"the run is complete in {self.out}"
            )
        return results

    def _description(self) -> dict[str, Any]:
        """The content of ``config.json``."""
        return {
            "config": self.config.to_dict(),
            "parameters": self._parameters,
            "dims": self._dims,
            "environment": {
                **_provenance.environment(self.device),
                "processes": self._process.world,
            },
        }

    def _wrap(self, module: nn.Module) -> nn.Module:
        """``module`` as it trains: compiled if asked, under DDP across processes."""
        if self.config.compile:
            _compile_in_place(module)
        if self._process.world > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            module = nn.parallel.DistributedDataParallel(module, device_ids=ids)
        return module

    def _refine(self, epoch: int) -> None:
        """Refine the ContinuousNet at the start of ``epoch`` if ``refine_epochs`` says so.

        A new module and a new optimiser with the state carried over; every process
        refines alike, then DDP (and compile) wrap the new module.
        """
        inside = epoch == self._start.epoch and self._start.inside
        if epoch not in self.config.refine_epochs or inside:
            return
        net = cast(ContinuousNet, self.model)
        refined, self.optimizer = self._schedule.step(epoch, net, self.optimizer)
        self.model = refined
        self._net = self._wrap(refined)
        self._log(
            f"epoch {epoch + 1}: refined to N_t = M = {refined.n_steps}, "
            f"{count_parameters(refined):,} parameters"
        )

    def train_epoch(self, epoch: int) -> _Totals:
        """Train one epoch (its remaining batches, in a run resumed inside it).

        Args:
            epoch: the epoch, from 0; it fixes the learning rate, the data order and the
                augmentation.

        Returns:
            This process's running totals of the epoch.

        Raises:
            Interrupted: a signal arrived; the checkpoint is saved after the batch.
            TrainingFailedError: the solver of an ODE model failed.
        """
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.lr_at(epoch)
        first, totals = self._epoch_start(epoch)
        self._nan_batch.fill_(-1)
        order = epoch_order(len(self._train_set), self.config.seed, epoch)
        order = order.to(self._train_set.inputs.device)
        bar = self._progress_bar(epoch, first)
        self._net.train()
        tick = time.perf_counter()
        for i, idx in train_batches(order, self.config.batch_size, start=first):
            self._step(epoch, i, idx, totals)
            bar.update(1)
            done = i + 1  # a host sync every 10 batches, and none without a bar
            if not bar.disable and (done % 10 == 0 or done == self.n_batches):
                seconds = time.perf_counter() - tick + totals.seconds
                bar.set_postfix(_postfix(totals, seconds, self._process))
            if self._stop.requested:
                totals.seconds += time.perf_counter() - tick
                self._check_finite(epoch, i + 1)
                self.save_checkpoint(epoch, i + 1, totals)
                bar.close()
                raise Interrupted(
                    f"{self._stop.signal_name}: stopped at epoch {epoch + 1}, batch {i + 1}; "
                    f"checkpoint saved in {self.checkpoint_path}"
                )
        bar.close()
        totals.seconds += time.perf_counter() - tick
        self._check_finite(epoch, self.n_batches)
        return totals

    def _check_finite(self, epoch: int, batches: int) -> None:
        """Stop the run, before anything of it is recorded, on a non-finite loss or weight.

        The losses are checked on the device as they come (no host sync per batch);
        the first non-finite one of the epoch is looked at here, at the end of the
        epoch and before a checkpoint, once for every process. The weights are the
        same on every process.

        Args:
            epoch: the epoch, from 0.
            batches: the batches of ``epoch`` done.

        Raises:
            TrainingFailedError: naming the epoch and the batch.
        """
        first = self._nan_batch.clone()
        if self._process.world > 1:
            dist.all_reduce(first, op=dist.ReduceOp.MAX)
        if int(first) >= 0:
            where, what = f"epoch {epoch + 1}, batch {int(first) + 1}", "the training loss is nan"
        else:
            name = next(
                (n for n, p in self.model.named_parameters() if not p.isfinite().all()), None
            )
            if name is None:
                return
            where, what = f"epoch {epoch + 1}, batch {batches}", f"the weight {name} is not finite"
        raise _diverged(where, f"{what}.", self.checkpoint_path, epoch)

    def _epoch_start(self, epoch: int) -> tuple[int, _Totals]:
        """The first batch of ``epoch`` and its totals so far; seeds its augmentation."""
        self._gen = torch.Generator(device=self.device).manual_seed(self.config.seed * 7919 + epoch)
        start = self._start
        if epoch != start.epoch:
            return 0, _Totals.zeros(self.device)
        if start.partial is None:
            return start.batch, _Totals.zeros(self.device)
        if start.aug_rng is not None:
            self._gen.set_state(start.aug_rng.cpu())
        return start.batch, _Totals(**start.partial)

    def _progress_bar(self, epoch: int, first: int) -> Any:
        """The epoch's tqdm bar on stderr, drawn by the first process when
        ``config.progress`` asks for it (``None``: when stderr is a terminal)."""
        from tqdm.auto import tqdm  # type: ignore[import-untyped]

        draw = show_progress(self.config.progress) and self._process.main
        return tqdm(
            total=self.n_batches,
            initial=first,
            desc=f"epoch {epoch + 1}/{self.config.epochs}",
            file=sys.stderr,
            disable=not draw,
            dynamic_ncols=True,
            leave=False,
        )

    def _step(self, epoch: int, i: int, idx: Tensor, totals: _Totals) -> None:
        """Train on batch ``i`` of ``epoch``, the examples ``idx``; add it to ``totals``."""
        data, process = self._train_set, self._process
        x = data.normalize(data.inputs[idx])
        if self._augment is not None:
            x = self._augment(x, self._gen)
        x = shard(x, process.rank, process.world)
        y = shard(data.targets[idx], process.rank, process.world)
        try:
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.config.bf16):
                logits = self._net(x)
            loss = _loss(self.config.loss, logits, y)
            bad = (self._nan_batch < 0) & ~loss.detach().isfinite()
            self._nan_batch = torch.where(bad, i, self._nan_batch)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
        except odecore.SolverError as exc:
            where = f"epoch {epoch + 1}, batch {i + 1}"
            raise _diverged(where, exc, self.checkpoint_path, epoch) from exc
        self.optimizer.step()
        classify = self.config.loss == "cross_entropy"
        totals.add(loss, logits, y, classify=classify, nfe=nfe(self.model))

    def evaluate(self, epoch: int) -> dict[str, float | None]:
        """Test loss, accuracy and forward NFE of the model at the end of ``epoch``.

        Args:
            epoch: the epoch just trained, from 0 (for the error message).

        Returns:
            What the function :func:`evaluate` returns, on the test set.

        Raises:
            TrainingFailedError: the solver of an ODE model failed, or the test loss is
                not finite.
        """
        try:
            test = evaluate(
                self.model,
                self._test_set,
                self.config.loss,
                batch_size=self.config.eval_batch_size,
                device=self.device,
                bf16=self.config.bf16,
                process=self._process,
            )
        except odecore.SolverError as exc:
            where = f"epoch {epoch + 1}, evaluation"
            raise _diverged(where, exc, self.checkpoint_path, epoch) from exc
        loss = cast(float, test["loss"])
        if not math.isfinite(loss):
            where = f"epoch {epoch + 1}, evaluation"
            raise _diverged(where, f"the test loss is {loss}.", self.checkpoint_path, epoch)
        return test

    def _finish_epoch(self, epoch: int, totals: _Totals) -> None:
        """Evaluate ``epoch``, record and save it; stop after it if a signal asked to."""
        row = _row(
            epoch, self.config, totals.reduce(self._process), self.evaluate(epoch), self._process
        )
        if isinstance(self.model, ContinuousNet):
            row |= {"n_steps": self.model.n_steps, "parameters": count_parameters(self.model)}
        self.metrics.append(row)
        self.save_checkpoint(epoch + 1, 0)
        if self._process.main:
            _io.write_json(self.out / "metrics.json", self.metrics)
            _io.write_csv(self.out / "metrics.csv", self.metrics)
            title = f"{self.config.model} on {self.config.dataset}"
            _io.plot_curves(self.out / "curves.png", self.metrics, title, loss=self.config.loss)
        self._log(_line(row, self.config.epochs))
        if self._stop.requested and epoch + 1 < self.config.epochs:
            raise Interrupted(
                f"{self._stop.signal_name}: stopped after epoch {epoch + 1}; "
                f"checkpoint saved in {self.checkpoint_path}"
            )

    def _results(self, wall_seconds: float) -> dict[str, Any]:
        """The content of ``results.json``."""
        metrics = self.metrics
        accuracies = [m["test_acc"] for m in metrics if m["test_acc"] is not None]
        return {
            "model": self.config.model,
            "dataset": self.config.dataset,
            "examples": {"train": len(self._train_set), "test": len(self._test_set)},
            "data_files": [*self._train_set.sources, *self._test_set.sources],
            "parameters": count_parameters(self.model),
            "epochs": len(metrics),
            "final": metrics[-1] if metrics else None,
            "best_test_acc": max(accuracies, default=None),
            "train_seconds": sum(m["epoch_seconds"] for m in metrics),
            "wall_seconds": wall_seconds,
            "config": self.config.to_dict(),
            "provenance": {
                "commit": self._segment["commit"],
                "dirty": self._segment["dirty"],
                "resumed": bool(self._segments),
                "segments": self.segments(),
            },
        }


#: How a solve ends when the weights have grown too large for it.
_DIVERGED = (
    odecore.Status.NONFINITE,
    odecore.Status.MAX_STEPS_REACHED,
    odecore.Status.DT_UNDERFLOW,
)


def _diverged(
    where: str, exc: odecore.SolverError | str, path: Path, epoch: int
) -> TrainingFailedError:
    """The one-line error of a non-finite loss or weight, or of a solver's failure.

    A solver's failure is blamed on the weights (lower the rate) only when its status
    says the state blew up; any other (Newton's iteration at too large a step, a
    backend) passes the solver's own message on, with how the options reach it.
    """
    kept = f"; {path} holds epoch {epoch}" if path.exists() else ""
    if isinstance(exc, odecore.SolverError) and exc.status not in _DIVERGED:
        hint = "The solver's options: --n-steps, --rtol, --atol, --solver-option NAME=VALUE"
    else:
        hint = "The weights have probably diverged: lower --lr"
    return TrainingFailedError(f"{where}: {exc} {hint}{kept}.")


def _postfix(totals: _Totals, seconds: float, process: _Process) -> dict[str, str]:
    count = max(totals.count, 1)
    post = {"loss": f"{float(totals.loss) / count:.4f}"}
    if float(totals.correct):
        post["acc"] = f"{100 * float(totals.correct) / count:.1f}%"
    if totals.nfe_forward:
        post["nfe"] = f"{totals.nfe_forward / max(totals.batches, 1):.0f}"
    post["img/s"] = f"{totals.count * process.world / max(seconds, 1e-9):.0f}"
    return post


def _row(
    epoch: int,
    config: TrainConfig,
    totals: _Totals,
    test: dict[str, float | None],
    process: _Process,
) -> dict[str, Any]:
    count = max(totals.count, 1)
    batches = max(totals.batches, 1)
    classify = config.loss == "cross_entropy"
    return {
        "epoch": epoch + 1,
        "lr": config.lr_at(epoch),
        "train_loss": float(totals.loss) / count,
        "train_acc": float(totals.correct) / count if classify else None,
        "test_loss": test["loss"],
        "test_acc": test["acc"],
        "nfe_forward": totals.nfe_forward / batches / process.world or None,
        "nfe_backward": totals.nfe_backward / batches / process.world or None,
        "test_nfe": test["nfe"],
        "images_per_second": totals.count / max(totals.seconds, 1e-9),
        "epoch_seconds": totals.seconds,
    }


def _line(row: dict[str, Any], epochs: int) -> str:
    parts = [f"epoch {row['epoch']}/{epochs}", f"train loss {row['train_loss']:.4g}"]
    if row["train_acc"] is not None:
        parts.append(f"acc {100 * row['train_acc']:.2f}%")
    parts.append(f"test loss {row['test_loss']:.4g}")
    if row["test_acc"] is not None:
        parts.append(f"acc {100 * row['test_acc']:.2f}%")
    if row["nfe_forward"] is not None:
        nb = row["nfe_backward"]
        parts.append(
            f"nfe {row['nfe_forward']:.1f}/{nb:.1f}" if nb else f"nfe {row['nfe_forward']:.1f}"
        )
    if row.get("n_steps") is not None:
        parts.append(f"N_t {row['n_steps']}")
    parts.append(f"{row['images_per_second']:.0f} img/s")
    parts.append(f"{row['epoch_seconds']:.1f} s")
    return "  ".join(parts)


def _build(config: TrainConfig, dims: dict[str, int]) -> nn.Module:
    """The run's model as it starts, before any refinement.

    A ContinuousNet's blocks get the time scale of its final ``N_t``
    (:attr:`TrainConfig.final_steps`), the same with or without refinement.
    """
    final = config.final_steps
    return build_model(
        config.model,
        in_channels=dims["in_channels"],
        image_size=dims["image_size"],
        num_classes=dims["num_classes"],
        activation=config.activation,
        spec=config.spec,
        epsilon=None if final is None else float(final),
    )


def load_model(out: str | os.PathLike[str], device: str = "cpu") -> tuple[nn.Module, TrainConfig]:
    """The model of a run directory, rebuilt from ``config.json`` and ``checkpoint.pt``.

    A ContinuousNet run refined during training comes back refined as far as the
    checkpoint had come (``N_t``, ``M`` and the parameters of the checkpoint).

    Returns:
        The model in eval mode on ``device``, with the weights of the last checkpoint,
        and the run's configuration.

    Raises:
        FileNotFoundError: ``out`` holds no finished epoch.
    """
    import json

    out = Path(out)
    if not (out / "config.json").exists() or not (out / _io.CHECKPOINT).exists():
        raise FileNotFoundError(
            f"{out} holds no run with a checkpoint (config.json, checkpoint.pt)"
        )
    saved = json.loads((out / "config.json").read_text(encoding="utf-8"))
    config = TrainConfig.from_dict(saved["config"])
    model = _build(config, saved["dims"])
    state = load_checkpoint(out / _io.CHECKPOINT, torch.device(device))
    for _ in range(config.refinements_before(state["epoch"], state["batch"])):
        model = refine(cast(ContinuousNet, model))[0]
    model.load_state_dict(state["model"])
    return model.to(device).eval(), config

"""``train``: the training loop with its checkpoints, metrics, plots and processes."""

from __future__ import annotations

import contextlib
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

from ..data import Augment, Dataset
from ..models import MODELS, build_model, count_parameters, nfe
from . import _io
from ._config import TrainConfig
from ._data import epoch_order, load_splits, shard, train_batches
from ._run_dir import RunFolder, load_checkpoint

Log = Callable[[str], None]


class TrainingFailedError(RuntimeError):
    """The solver of an ODE model failed during training (the weights diverged)."""


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
    """``torch.compile`` what of ``module`` compiles: the vector fields of its ODE layers.

    The solver loop stays eager: its step sizes are Python floats chosen at run time,
    on which a compiled loop would specialise and recompile (or fail) at every step.
    A model without ODE layers is compiled whole. Parameter names do not change, so
    checkpoints are the same with and without compilation.
    """
    fields = [
        node.vector_field
        for node in module.modules()
        if isinstance(node, NeuralODE) and isinstance(node.vector_field, nn.Module)
    ]
    for vector_field in fields:
        vector_field.compile()
    if not fields:
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
            totals.loss += _loss(loss_kind, out, y).double() * len(idx)
            if loss_kind == "cross_entropy":
                totals.correct += (out.argmax(dim=1) == y).sum()
            totals.count += len(idx)
            totals.batches += 1
            totals.nfe_forward += nfe(model)[0]
    model.train(was_training)
    totals = totals.reduce(process)
    count = max(totals.count, 1)
    batches = max(math.ceil(len(data) / batch_size), 1)
    return {
        "loss": float(totals.loss) / count,
        "acc": float(totals.correct) / count if loss_kind == "cross_entropy" else None,
        "nfe": totals.nfe_forward / batches / process.world if totals.nfe_forward else None,
    }


def _environment(device: torch.device, process: _Process) -> dict[str, Any]:
    from .. import __version__

    return {
        "odebench": __version__,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "processes": process.world,
        "threads": torch.get_num_threads(),
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
    hold the wrapper after ``_train`` returns: the exceptions that pyparsing raises and
    catches while matplotlib draws the curves sit in cycles with their tracebacks,
    whose frames reach up to ``_train``'s. Collecting the cycles first leaves the
    group's registry, which ``destroy_process_group`` empties, its last holder.
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
    """
    from tqdm.auto import tqdm  # type: ignore[import-untyped]

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
        if process.world > 1 and config.batch_size % process.world:
            raise ValueError(
                f"`batch_size` {config.batch_size} does not split evenly over {process.world} "
                "processes; choose a multiple of the number of processes."
            )
        _claim(folder, config, process, resume=resume, overwrite=overwrite, log=log)
        return _train(config, out, out / _io.CHECKPOINT, resume, process, device, log, tqdm)
    finally:
        folder.release()
        if started_group:
            _end_group()


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


def _train(
    config: TrainConfig,
    out: Path,
    path: Path,
    resume: bool,
    process: _Process,
    device: torch.device,
    log: Log,
    tqdm: Any,
) -> dict[str, Any]:
    train_set, test_set = load_splits(config)
    train_set, test_set = train_set.to(device), test_set.to(device)
    torch.manual_seed(config.seed)
    dims = {**_dims(train_set), "num_classes": _outputs(train_set)}
    model = _build(config, dims).to(device)
    params = count_parameters(model)
    published = MODELS[config.model].published_params
    log(
        f"{config.model} on {config.dataset}: {params:,} parameters"
        + (f" (published {published / 1e6:.2f}M)" if published else "")
        + f", {len(train_set)} training and {len(test_set)} test examples, {device}"
        + (f", {process.world} processes" if process.world > 1 else "")
    )
    optimizer: torch.optim.Optimizer
    if config.optimizer == "sgd":
        optimizer = torch.optim.SGD(
            model.parameters(),
            lr=config.lr,
            momentum=config.momentum,
            weight_decay=config.weight_decay,
        )
    else:
        optimizer = torch.optim.Adam(
            model.parameters(), lr=config.lr, weight_decay=config.weight_decay
        )
    augment = (
        Augment(crop_padding=4, flip=config.dataset.startswith("cifar")) if config.augment else None
    )
    metrics: list[dict[str, Any]] = []
    start_epoch, start_batch = 0, 0
    partial: dict[str, Any] | None = None
    aug_state: Tensor | None = None
    schedule = RefinementSchedule(epochs=config.refine_epochs)
    if resume and path.exists():
        state = load_checkpoint(path, device)
        # The checkpoint holds a refined model: refine the fresh one as often first.
        for e in config.refine_epochs[: config.refinements_before(state["epoch"], state["batch"])]:
            refined, optimizer = schedule.step(e, cast(ContinuousNet, model), optimizer)
            model = refined
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"].cpu())
        if device.type == "cuda" and state.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(state["cuda_rng"].cpu(), device)
        metrics = list(state["metrics"])
        start_epoch, start_batch = state["epoch"], state["batch"]
        partial, aug_state = state.get("partial"), state.get("aug_rng")
        log(f"resuming {out} at epoch {start_epoch + 1}, batch {start_batch}")
    elif resume:
        log(f"no checkpoint in {out}: starting afresh")
    if process.main:
        _io.write_json(
            out / "config.json",
            {
                "config": config.to_dict(),
                "parameters": params,
                "dims": dims,
                "environment": _environment(device, process),
            },
        )

    def wrap(module: nn.Module) -> nn.Module:
        """``module`` as it trains: compiled if asked, under DDP across processes."""
        if config.compile:
            _compile_in_place(module)
        if process.world > 1:
            ids = [device.index] if device.type == "cuda" else None
            module = nn.parallel.DistributedDataParallel(module, device_ids=ids)
        return module

    raw = model
    net = wrap(raw)

    def checkpoint(epoch: int, batch: int, totals: _Totals | None, gen: torch.Generator) -> None:
        if not process.main:
            return
        state = {
            "epoch": epoch,
            "batch": batch,
            "model": raw.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            "aug_rng": gen.get_state(),
            "partial": totals.state() if totals is not None else None,
            "metrics": metrics,
            "config": config.to_dict(),
        }
        _io.save_checkpoint(path, state)

    n_batches = len(train_set) // config.batch_size
    if n_batches == 0:
        raise ValueError(
            f"`batch_size` {config.batch_size} exceeds the {len(train_set)} training examples."
        )
    loss_kind = config.loss
    run_started = time.perf_counter()
    with _stop_on_signals(process.world == 1) as stop:
        for epoch in range(start_epoch, config.epochs):
            resumed_inside = epoch == start_epoch and start_batch > 0  # refined already
            if epoch in config.refine_epochs and not resumed_inside:
                # A new module and a new optimizer with the state carried over; every
                # process refines alike, then DDP (and compile) wrap the new module.
                refined, optimizer = schedule.step(epoch, cast(ContinuousNet, raw), optimizer)
                raw = refined
                net = wrap(raw)
                log(
                    f"epoch {epoch + 1}: refined to N_t = M = {refined.n_steps}, "
                    f"{count_parameters(raw):,} parameters"
                )
            for group in optimizer.param_groups:
                group["lr"] = config.lr_at(epoch)
            gen = torch.Generator(device=device).manual_seed(config.seed * 7919 + epoch)
            totals = _Totals.zeros(device)
            if epoch == start_epoch and partial is not None:
                totals = _Totals(**partial)
                if aug_state is not None:
                    gen.set_state(aug_state.cpu())
            first = start_batch if epoch == start_epoch else 0
            order = epoch_order(len(train_set), config.seed, epoch).to(train_set.inputs.device)
            bar = tqdm(
                total=n_batches,
                initial=first,
                desc=f"epoch {epoch + 1}/{config.epochs}",
                disable=not (config.progress and process.main),
                dynamic_ncols=True,
                leave=False,
            )
            net.train()
            tick = time.perf_counter()
            for i, idx in train_batches(order, config.batch_size, start=first):
                x = train_set.normalize(train_set.inputs[idx])
                if augment is not None:
                    x = augment(x, gen)
                x = shard(x, process.rank, process.world)
                y = shard(train_set.targets[idx], process.rank, process.world)
                try:
                    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.bf16):
                        logits = net(x)
                    loss = _loss(loss_kind, logits, y)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()  # type: ignore[no-untyped-call]
                except odecore.SolverError as exc:
                    raise _diverged(f"epoch {epoch + 1}, batch {i + 1}", exc, path, epoch) from exc
                optimizer.step()
                totals.loss += loss.detach().double() * len(y)
                if loss_kind == "cross_entropy":
                    totals.correct += (logits.detach().argmax(dim=1) == y).sum()
                totals.count += len(y)
                totals.batches += 1
                f, b = nfe(raw)
                totals.nfe_forward += f
                totals.nfe_backward += b
                bar.update(1)
                if bar.n % 10 == 0 or bar.n == n_batches:  # a host sync every 10 batches
                    now = time.perf_counter()
                    bar.set_postfix(_postfix(totals, now - tick + totals.seconds, process))
                if stop.requested:
                    totals.seconds += time.perf_counter() - tick
                    checkpoint(epoch, i + 1, totals, gen)
                    bar.close()
                    raise Interrupted(
                        f"{stop.signal_name}: stopped at epoch {epoch + 1}, batch {i + 1}; "
                        f"checkpoint saved in {path}"
                    )
            bar.close()
            totals.seconds += time.perf_counter() - tick
            reduced = totals.reduce(process)
            try:
                test = evaluate(
                    raw,
                    test_set,
                    loss_kind,
                    batch_size=config.eval_batch_size,
                    device=device,
                    bf16=config.bf16,
                    process=process,
                )
            except odecore.SolverError as exc:
                raise _diverged(f"epoch {epoch + 1}, evaluation", exc, path, epoch) from exc
            row = _row(epoch, config, reduced, test, process)
            if isinstance(raw, ContinuousNet):
                row |= {"n_steps": raw.n_steps, "parameters": count_parameters(raw)}
            metrics.append(row)
            checkpoint(epoch + 1, 0, None, gen)
            if process.main:
                _io.write_json(out / "metrics.json", metrics)
                _io.write_csv(out / "metrics.csv", metrics)
                _io.plot_curves(out / "curves.png", metrics, f"{config.model} on {config.dataset}")
            log(_line(row, config.epochs))
            if stop.requested and epoch + 1 < config.epochs:
                raise Interrupted(
                    f"{stop.signal_name}: stopped after epoch {epoch + 1}; "
                    f"checkpoint saved in {path}"
                )
    results = {
        "model": config.model,
        "dataset": config.dataset,
        "parameters": count_parameters(raw),
        "epochs": len(metrics),
        "final": metrics[-1] if metrics else None,
        "best_test_acc": max(
            (m["test_acc"] for m in metrics if m["test_acc"] is not None), default=None
        ),
        "train_seconds": sum(m["epoch_seconds"] for m in metrics),
        "wall_seconds": time.perf_counter() - run_started,
        "config": config.to_dict(),
    }
    if process.main:
        _io.write_json(out / "results.json", results)
    return results


def _diverged(where: str, exc: odecore.SolverError, path: Path, epoch: int) -> TrainingFailedError:
    """The one-line error of a solver failure in training or evaluation."""
    kept = f"; {path} holds epoch {epoch}" if path.exists() else ""
    return TrainingFailedError(
        f"{where}: {exc} The weights have probably diverged: lower --lr{kept}."
    )


def _postfix(totals: _Totals, seconds: float, process: _Process) -> dict[str, str]:
    count = max(totals.count, 1)
    post = {"loss": f"{float(totals.loss) / count:.4f}"}
    if float(totals.correct):
        post["acc"] = f"{100 * float(totals.correct) / count:.1f}%"
    if totals.nfe_forward:
        post["nfe"] = f"{totals.nfe_forward / max(totals.batches, 1):.0f}"
    post["img/s"] = f"{totals.count * process.world / max(seconds, 1e-9):.0f}"
    return post


def _finite(value: float | None) -> float | None:
    """``None`` for a NaN or infinite figure (a diverged run), which JSON cannot hold."""
    return value if value is None or math.isfinite(value) else None


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
    row: dict[str, Any] = {
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
    return {k: _finite(v) if isinstance(v, float) else v for k, v in row.items()}


def _line(row: dict[str, Any], epochs: int) -> str:
    def num(value: float | None) -> str:
        return "nan" if value is None else f"{value:.4g}"

    parts = [f"epoch {row['epoch']}/{epochs}", f"train loss {num(row['train_loss'])}"]
    if row["train_acc"] is not None:
        parts.append(f"acc {100 * row['train_acc']:.2f}%")
    parts.append(f"test loss {num(row['test_loss'])}")
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

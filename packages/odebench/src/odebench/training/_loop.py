"""``train``: a :class:`TrainConfig` (the CLI's flags) as a :class:`Task`, run like ``fit``."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import torch
from contnet import ContinuousNet, RefinementSchedule, refine
from odelayers import NeuralODE
from torch import Tensor, nn

from .. import _io, _provenance
from .._figures import curve_panels, draw
from .._io import Json, JsonObject
from ..data import Augment, Dataset
from ..models import MODELS, build_model, count_parameters, nfe
from ._config import TrainConfig
from ._data import epoch_order, load_splits
from ._fit import (
    Batch,
    Epoch,
    Task,
    Training,
    _number,
    _Process,
    _process,
    _Tally,
    held,
)
from ._run_dir import Log, load_checkpoint


def _compile_in_place(module: nn.Module) -> None:
    """``torch.compile`` what of ``module`` compiles, as :class:`TrainConfig`'s ``compile``
    says; parameter names, and so checkpoints, stay the same."""
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


def _loss(
    model: nn.Module, batch: Batch, *, kind: str, device: torch.device, bf16: bool
) -> tuple[Tensor, dict[str, Tensor]]:
    """The loss ``kind`` of ``model`` on ``batch``, with its correct predictions when it
    classifies."""
    x, y = batch
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        out = model(x)
    out = out.to(torch.promote_types(out.dtype, torch.float32))  # bfloat16 up, float64 kept
    if kind == "mse":
        return nn.functional.mse_loss(out, y), {}
    correct = (out.detach().argmax(dim=1) == y).sum()
    return nn.functional.cross_entropy(out, y), {"correct": correct}


def _dims(data: Dataset) -> dict[str, int]:
    """The model's ``in_channels``, ``image_size`` and ``num_classes`` (outputs) for ``data``."""
    outputs = data.num_classes or (int(data.targets.shape[-1]) if data.targets.dim() > 1 else 1)
    if data.inputs.dim() == 4:
        channels, size = data.inputs.shape[1], data.inputs.shape[-1]
    else:
        channels, size = data.inputs.shape[-1], 0
    return {"in_channels": channels, "image_size": size, "num_classes": outputs}


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
    tally = _Tally.zeros(device)
    indices = torch.arange(len(data), device=data.inputs.device)[process.rank :: process.world]
    was_training = model.training
    model.eval()
    classify = loss_kind == "cross_entropy"
    with torch.no_grad():
        for start in range(0, len(indices), batch_size):
            idx = indices[start : start + batch_size]
            x = data.normalize(data.inputs[idx].to(device, non_blocking=True))
            y = data.targets[idx].to(device, non_blocking=True)
            loss, extras = _loss(model, (x, y), kind=loss_kind, device=device, bf16=bf16)
            tally.add(loss, extras, len(y), (nfe(model)[0], 0))
    model.train(was_training)
    summed = tally.close(0, process)
    shares = (len(range(rank, len(data), process.world)) for rank in range(process.world))
    batches = sum(math.ceil(share / batch_size) for share in shares)  # of every process
    return {
        "loss": summed.loss,
        "acc": summed.sums.get("correct", 0.0) / max(summed.count, 1) if classify else None,
        "nfe": summed.nfe_forward / batches if summed.nfe_forward else None,
    }


def train(
    config: TrainConfig,
    out: str | os.PathLike[str],
    *,
    resume: bool = False,
    overwrite: bool = False,
    log: Log = print,
) -> JsonObject:
    """Train ``config.model`` on ``config.dataset`` and write the run into ``out``.

    The config as a :class:`Task`, run by :class:`Training` in a run folder as :func:`fit`
    holds it (the same guarantees and errors), writing the files of "What a run writes"
    in the training guide.

    Args:
        config: the run.
        out: its output directory.
        resume: continue from ``out/checkpoint.pt`` (a fresh start when there is none).
        overwrite: move what ``out`` holds aside to ``<out>.old-<time>``, then start afresh.
        log: where the one-line summaries go (a line per epoch).

    Returns:
        The content of ``results.json``.

    Raises:
        FileNotFoundError: (beside :func:`fit`'s errors) the data set's files are not
            where they were looked for.
        OSError: a file of the run cannot be written (a full disk); the file it
            would have replaced is kept, and the message names it.
    """
    splits = load_splits(config)  # read first: a resume checks the files are the run's
    files: list[Json] = [s["sha256"] for split in splits for s in split.sources]
    settings: JsonObject = {**config.to_dict(), "data_sha256": files}
    defaults = TrainConfig(model=config.model, dataset=config.dataset).to_dict()
    with held(
        out, device=config.device, batch_size=config.batch_size, settings=settings,
        epochs=config.epochs, resume=resume, overwrite=overwrite, log=log,
        defaults={**defaults, "data_sha256": files},  # a run saved before it was recorded
    ) as device:  # fmt: skip
        train_set, test_set = (split.to(device) for split in splits)
        dims = _dims(train_set)

        def row(epoch: Epoch) -> JsonObject:  # of the model as it stands, refined or not
            return _row(config, epoch, training.model)

        def after_epoch(rows: list[JsonObject]) -> None:
            if training.process.main:
                _io.write_csv(training.out / "metrics.csv", rows)
                panels = curve_panels(rows, loss=config.loss)
                title = f"{config.model} on {config.dataset}"
                draw(training.out / "curves.png", panels, size=(4.2, 3.4), dpi=110, title=title)
            log(_line(rows[-1], config.epochs))

        task = _task(config, (train_set, test_set), dims, device, settings=settings, row=row,
                     after_epoch=after_epoch)  # fmt: skip
        training = Training(task, out, device=device, log=log, progress=config.progress)
        parameters = count_parameters(training.model)  # of the model as it starts
        published = MODELS[config.model].published_params
        world = training.process.world
        log(
            f"{config.model} on {config.dataset}: {parameters:,} parameters"
            + (f" (published {published / 1e6:.2f}M)" if published else "")
            + f", {len(train_set)} training and {len(test_set)} test examples, {device}"
            + (f", {world} processes" if world > 1 else "")
        )
        if resume:
            training.resume()
        if training.process.main:
            environment = {**_provenance.environment(device), "processes": world}
            description = {
                "config": config.to_dict(),
                "parameters": parameters,
                "dims": dims,
                "environment": environment,
            }
            _io.write_json(training.out / "config.json", description)
        started = time.perf_counter()
        training.run()
        results = _results(config, training, (train_set, test_set), time.perf_counter() - started)
        if training.process.main:
            _io.write_json(training.out / "results.json", results)
        training.raise_if_stopped()
        return results


def _optimizer(config: TrainConfig, parameters: Iterator[nn.Parameter]) -> torch.optim.Optimizer:
    """The optimiser of ``config`` over ``parameters``."""
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            parameters, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
        )
    return torch.optim.Adam(parameters, lr=config.lr, weight_decay=config.weight_decay)


def _task(
    config: TrainConfig,
    splits: tuple[Dataset, Dataset],
    dims: dict[str, int],
    device: torch.device,
    *,
    settings: JsonObject,
    row: Callable[[Epoch], JsonObject],
    after_epoch: Callable[[list[JsonObject]], None],
) -> Task:
    """``config`` as a :class:`Task` on its training and test sets (on ``device``), with the
    ``settings`` its checkpoints save."""
    train_set, test_set = splits
    flip = config.dataset.startswith("cifar")  # random crops, and flips on CIFAR
    augment = Augment(crop_padding=4, flip=flip) if config.augment else None
    schedule = RefinementSchedule(epochs=config.refine_epochs)
    n, gamma, milestones = len(train_set), config.gamma, config.milestones

    def prepare(batch: Batch, generator: torch.Generator) -> Batch:
        # Augmented as stored (uint8), then normalised: a crop's padding is black.
        x = batch[0] if augment is None else augment(batch[0], generator)
        return train_set.normalize(x), batch[1]

    def refine(
        epoch: int, model: nn.Module, optimizer: torch.optim.Optimizer, log: Log
    ) -> tuple[nn.Module, torch.optim.Optimizer]:
        refined, optimizer = schedule.step(epoch, cast(ContinuousNet, model), optimizer)
        log(
            f"epoch {epoch + 1}: refined to N_t = M = {refined.n_steps}, "
            f"{count_parameters(refined):,} parameters"
        )
        return refined, optimizer

    def test(model: nn.Module, epoch: int) -> dict[str, float | None]:
        numbers = evaluate(
            model,
            test_set,
            config.loss,
            batch_size=config.eval_batch_size,
            device=device,
            bf16=config.bf16,
            process=_process(),
        )
        loss = cast(float, numbers["loss"])
        if not math.isfinite(loss):
            raise FloatingPointError(f"the test loss is {loss}.")
        return numbers

    return Task(
        model=functools.partial(_build, config, dims),
        data=(train_set.inputs, train_set.targets),
        loss=functools.partial(_loss, kind=config.loss, device=device, bf16=config.bf16),
        optimizer=functools.partial(_optimizer, config),
        epochs=config.epochs,
        batch_size=config.batch_size,
        seed=config.seed,
        order=lambda epoch, generator: epoch_order(n, config.seed, epoch),
        schedule=lambda opt: torch.optim.lr_scheduler.LambdaLR(
            opt, lambda epoch: gamma ** sum(1 for m in milestones if m <= epoch)
        ),
        schedule_every="epoch",
        row=row,
        evaluate=test,
        after_epoch=after_epoch,
        refine=refine if config.refine_epochs else None,
        refine_epochs=config.refine_epochs,
        augment=prepare,
        compile=_compile_in_place if config.compile else None,
        settings=settings,
    )


def _row(config: TrainConfig, epoch: Epoch, model: nn.Module) -> JsonObject:
    """The row of ``metrics.json`` of a finished epoch."""
    count = max(epoch.count, 1)
    test, correct = epoch.evaluation, epoch.sums.get("correct")
    row: JsonObject = {
        "epoch": epoch.index + 1,
        "lr": config.lr_at(epoch.index),
        "train_loss": epoch.loss,
        "train_acc": correct / count if correct is not None else None,
        "test_loss": test["loss"],
        "test_acc": test["acc"],
        "nfe_forward": epoch.nfe_forward / max(epoch.batches, 1) / epoch.world or None,
        "nfe_backward": epoch.nfe_backward / max(epoch.batches, 1) / epoch.world or None,
        "test_nfe": test["nfe"],
        "images_per_second": epoch.count / max(epoch.seconds, 1e-9),
        "epoch_seconds": epoch.seconds,
    }
    if isinstance(model, ContinuousNet):
        row |= {"n_steps": model.n_steps, "parameters": count_parameters(model)}
    return row


def _results(
    config: TrainConfig, training: Training, splits: tuple[Dataset, Dataset], wall: float
) -> JsonObject:
    """The content of ``results.json``."""
    metrics = training.rows
    accuracies = [_number(m, "test_acc") for m in metrics if m["test_acc"] is not None]
    segments = training.segments()
    return {
        "model": config.model,
        "dataset": config.dataset,
        "examples": {"train": len(splits[0]), "test": len(splits[1])},
        "data_files": [dict(s) for split in splits for s in split.sources],
        "parameters": count_parameters(training.model),
        "epochs": len(metrics),
        "final": metrics[-1] if metrics else None,
        "best_test_acc": max(accuracies, default=None),
        "train_seconds": training.seconds,
        "wall_seconds": wall,
        "config": config.to_dict(),
        "provenance": {
            "commit": segments[-1]["commit"],
            "dirty": segments[-1]["dirty"],
            "resumed": len(segments) > 1,
            "segments": [*segments],
        },
    }


def _line(row: JsonObject, epochs: int) -> str:
    parts = [f"epoch {row['epoch']}/{epochs}", f"train loss {row['train_loss']:.4g}"]
    if row["train_acc"] is not None:
        parts.append(f"acc {row['train_acc']:.2%}")
    parts.append(f"test loss {row['test_loss']:.4g}")
    if row["test_acc"] is not None:
        parts.append(f"acc {row['test_acc']:.2%}")
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
    """The run's model as it starts; a ContinuousNet's blocks get the time scale of its
    final ``N_t`` (:attr:`TrainConfig.final_steps`), the same with or without refinement."""
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

"""``odebench perf contnet``: ContinuousNet against its own ResNet export, side by side
(what it times and why: the command's section of docs/odebench/index.md)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch
from contnet import ContinuousNet
from torch import Tensor, nn

from .._io import JsonObject, flag, text_table, whole
from .._provenance import now
from .._tables import Column, Measured, Table, figure_columns, keyed_rows
from ._document import Row, environment, json_array, json_object
from ._solvers import command_line, count_flag

SCHEMA_VERSION = 1
GOAL = 1.15
"""The most that ContinuousNet[Euler, N_t = M] may cost over its ResNet export."""


@dataclass(frozen=True)
class ContnetConfig:
    """What ``odebench perf contnet`` runs.

    Args:
        quick: a small batch, two steps and one repetition (seconds).
        threads: torch threads.
        repeats: timed repetitions per model (default 7; quick: 2).
        batch: images per batch (default 32; quick: 8).
        n_steps: ``N_t = M`` of every block (default 4; quick: 2).
        channels: channels of the three blocks.
    """

    quick: bool = field(default=False, metadata=flag("a small batch, seconds", action="store_true"))
    threads: int = field(default=2, metadata=count_flag("torch threads"))
    repeats: int | None = field(
        default=None, metadata=count_flag("timed runs per model", "n_repeats")
    )
    batch: int | None = field(default=None, metadata=count_flag("images per batch", "n_batch"))
    n_steps: int | None = field(
        default=None, metadata=count_flag("N_t = M of every block", "steps")
    )
    channels: tuple[int, int, int] = (16, 32, 64)

    def __post_init__(self) -> None:
        for name in ("repeats", "batch", "n_steps"):
            value = getattr(self, name)
            if value is not None and not whole(1)(value):
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")

    @property
    def n_repeats(self) -> int:
        return self.repeats or (2 if self.quick else 7)

    @property
    def n_batch(self) -> int:
        return self.batch or (8 if self.quick else 32)

    @property
    def steps(self) -> int:
        return self.n_steps or (2 if self.quick else 4)


def _train_step(model: nn.Module, x: Tensor, y: Tensor) -> None:
    model.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()  # type: ignore[no-untyped-call]


@torch.no_grad()
def _forward(model: nn.Module, x: Tensor, y: Tensor) -> None:
    model(x)


def saved_bytes(model: nn.Module, x: Tensor, y: Tensor) -> int:
    """Bytes of the tensors autograd saves for the backward pass of one training step."""
    seen: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()  # type: ignore[no-untyped-call]
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in seen.items() if ptr not in params)


@dataclass(frozen=True)
class ModelFigure(Row):
    """A row of ``results``: one figure of one model."""

    model: str
    figure: str
    value: float
    unit: str


@dataclass(frozen=True)
class ModelRatio(Row):
    """A row of ``ratios``: a figure of one model over the same of another."""

    figure: str
    numerator: str
    denominator: str
    value: float


_UNITS = {"saved_for_backward_mib": "MiB", "parameters": "count"}
"""The units of the figures that are not times (``{mode}_time_s``, in seconds)."""


def _models(config: ContnetConfig) -> dict[str, nn.Module]:
    """ContinuousNet[euler, n], its ResNet export and its RK4 manifestation, in training mode."""
    n = config.steps
    net = ContinuousNet(3, 10, config.channels, n_steps=n).train()
    return {
        f"ContinuousNet[euler, {n}]": net,
        "ResNet export": net.to_resnet().train(),
        f"ContinuousNet[rk4, {n}]": net.manifest(solver="rk4"),
    }


def _times(
    models: dict[str, nn.Module], x: Tensor, y: Tensor, repeats: int, log: Callable[[str], None]
) -> dict[tuple[str, str], float]:
    """Median seconds of each ``(model, figure)``: a training step and a forward pass,
    after one warm-up run each, the models interleaved (A B C A B C ...)."""
    times: dict[tuple[str, str], float] = {}
    for mode, step in (("train_step", _train_step), ("forward", _forward)):
        runs = {name: partial(step, m, x, y) for name, m in models.items()}
        for run in runs.values():  # warm-up
            run()
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        for name in list(runs) * repeats:
            t0 = time.perf_counter()
            runs[name]()
            seconds[name].append(time.perf_counter() - t0)
        for name, values in seconds.items():
            times[(name, f"{mode}_time_s")] = statistics.median(values)
        summary = ", ".join(f"{k} {times[(k, f'{mode}_time_s')] * 1e3:.1f} ms" for k in runs)
        log(f"  {mode}: {summary}")
    return times


def run_contnet(config: ContnetConfig, log: Callable[[str], None] = print) -> JsonObject:
    """Run the benchmark and return its JSON document (see :doc:`/odebench/index`); the
    caller's torch threads and global random state are as they were."""
    threads_before = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        with torch.random.fork_rng():
            return _run(config, log)
    finally:
        torch.set_num_threads(threads_before)


def _run(config: ContnetConfig, log: Callable[[str], None]) -> JsonObject:
    started = time.perf_counter()
    date = now()
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    n = config.steps
    x = torch.randn(config.n_batch, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (config.n_batch,), generator=gen)
    models = _models(config)
    cont, res, rk = list(models)
    with torch.no_grad():
        models[cont].eval()
        models[res].eval()
        agreement = float((models[cont](x) - models[res](x)).abs().max())
        models[cont].train()
        models[res].train()
    log(f"contnet: batch {config.n_batch} x 3 x 32 x 32, channels {config.channels}, N_t = M = {n}")
    figures = _times(models, x, y, config.n_repeats, log)
    for name, model in models.items():
        figures[(name, "saved_for_backward_mib")] = saved_bytes(model, x, y) / 2**20
        figures[(name, "parameters")] = float(sum(p.numel() for p in model.parameters()))
    results = [ModelFigure(m, f, v, _UNITS.get(f, "s")) for (m, f), v in figures.items()]

    def ratio(a: str, b: str, figure: str) -> ModelRatio:
        return ModelRatio(figure, a, b, figures[(a, figure)] / figures[(b, figure)])

    timed = ("train_step_time_s", "forward_time_s")
    ratios = [ratio(cont, res, f) for f in (*timed, "saved_for_backward_mib")]
    ratios += [ratio(rk, cont, f) for f in timed]
    return {
        "environment": environment(
            SCHEMA_VERSION,
            date,
            quick=config.quick,
            repeats=config.n_repeats,
            batch=config.n_batch,
            n_steps=n,
            channels=list(config.channels),
            command=command_line(),
            wall_time_s=time.perf_counter() - started,
        ),
        "results": [r.to_json() for r in results],
        "ratios": [r.to_json() for r in ratios],
        "checks": {"max_abs_output_difference_eval": agreement},
        "notes": [
            f"Goal: ContinuousNet[euler, N_t = M] at most {GOAL}x its ResNet export "
            "(train_step_time_s ratio).",
            "train_step: forward + cross-entropy + backward in training mode; forward: "
            "no_grad. Medians of interleaved repetitions after one warm-up run each.",
        ],
    }


_MODEL_COLUMNS: tuple[Column, ...] = (
    ("train step ms", "train_step_time_s", ".1f", 1e3),
    ("forward ms", "forward_time_s", ".1f", 1e3),
    ("saved MiB", "saved_for_backward_mib", ".2f", 1.0),
    ("params", "parameters", ".0f", 1.0),
)


def format_contnet_report(doc: JsonObject) -> str:
    """The document as the tables the command prints."""
    env = json_object(doc["environment"])
    results = [ModelFigure.from_json(r) for r in json_array(doc["results"])]
    model = ("model",)
    table = Table(model, keyed_rows(results, model), figure_columns(model, _MODEL_COLUMNS))
    ratios = [
        [r.figure, f"{r.numerator} / {r.denominator}", f"{r.value:.3f}"]
        for r in map(ModelRatio.from_json, json_array(doc["ratios"]))
    ]
    diff = json_object(doc["checks"])["max_abs_output_difference_eval"]
    return "\n".join(
        [
            f"odebench perf contnet: {env['date']}, torch {env['torch']}, {env['threads']} threads",
            f"batch {env['batch']} x 3 x 32 x 32, channels {tuple(json_array(env['channels']))}, "
            f"N_t = M = {env['n_steps']}, {env['repeats']} repetitions",
            "",
            table.text(Measured.of(results, model)),
            "",
            "Ratios:",
            text_table(["figure", "numerator / denominator", "ratio"], ratios),
            "",
            f"ContinuousNet vs its export, eval outputs: max |difference| {diff:.1e}",
            *(f"note: {note}" for note in json_array(doc["notes"])),
        ]
    )

"""The experiment template: what an experiment declares it trains, measures and claims."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import torch
from torch import nn

from .._figures import Bars, Lines, draw
from .._io import whole
from .._tables import Table
from ..training import Task, TrainConfig, load_model, resolve_device
from ._claims import Claim
from ._registry import MODES, Log, RunOptions

if TYPE_CHECKING:
    from ._result import Result


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The base of an experiment's settings: subclass it as a frozen dataclass.

    One instance per mode holds every number the mode changes. Each is validated by its
    fields' types and names: an ``int`` field is a positive integer, ``lr`` and ``*_lr``
    positive numbers, ``optimizer`` ``"sgd"`` or ``"adam"``.

    Args:
        seeds: how many seeds each run trains: ``--seed S`` gives ``S, S + 1, ...``.

    Example:
        >>> Settings(seeds=0)
        Traceback (most recent call last):
        ...
        ValueError: `seeds` must be a positive integer, got 0.
        >>> TrainingSettings(epochs=2, batch_size=32, lr=0.0)
        Traceback (most recent call last):
        ...
        ValueError: `lr` must be a positive number, got 0.0.
    """

    seeds: int = 1

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            # the annotation as text (postponed annotations) or as the type itself
            optional = f.type in ("int | None", int | None) and value is not None
            integer = f.type in ("int", int) or optional
            if integer and not whole(1)(value):
                raise ValueError(f"`{f.name}` must be a positive integer, got {value!r}.")
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if (f.name == "lr" or f.name.endswith("_lr")) and not (number and value > 0):
                raise ValueError(f"`{f.name}` must be a positive number, got {value!r}.")
            if f.name == "optimizer" and value not in ("sgd", "adam"):
                raise ValueError(f"`optimizer` must be 'sgd' or 'adam', got {value!r}.")


@dataclass(frozen=True, kw_only=True)
class TrainingSettings(Settings):
    """The settings most modes share: how every run of the mode trains.

    Args:
        epochs: epochs of every run (``--epochs`` replaces it).
        batch_size: the training batch.
        lr: the (initial) learning rate.
        train_size: training examples per run (``None``: all).
        test_size: test examples per run (``None``: all).
    """

    epochs: int
    batch_size: int
    lr: float
    train_size: int | None = None
    test_size: int | None = None


S = TypeVar("S", bound=Settings)


@dataclass(frozen=True)
class Setup(Generic[S]):
    """What every hook of a :class:`Template` is given: the mode, its settings, the options.

    Args:
        name: the experiment's name.
        mode: the mode's name (``"quick"``, ``"standard"``, ``"full"``).
        settings: the mode's settings, with ``--epochs`` applied.
        options: the options of ``odebench run``.
        seeds: the seeds every run trains, in order.
        log: where progress lines go.
        trained: the runs that trained (from ``runs``, or from ``results.json`` on
            :func:`~odebench.experiments.rerender`).
    """

    name: str
    mode: str
    settings: S
    options: RunOptions
    seeds: tuple[int, ...]
    log: Log
    trained: tuple[str, ...] = ()

    @property
    def out(self) -> Path:
        """The experiment's output directory."""
        return self.options.out

    @property
    def device(self) -> torch.device:
        """The device of ``--device``, resolved (``"auto"``: CUDA when available)."""
        return resolve_device(self.options.device)

    def run_dir(self, run: str, seed: int) -> Path:
        """Where ``run`` of ``seed`` trains: ``out/<run>``, or ``out/<run>/seed<N>`` for
        several seeds."""
        return self.out / run if len(self.seeds) == 1 else self.out / run / f"seed{seed}"


@dataclass(frozen=True)
class Run:
    """One model an experiment trains for one seed: a configuration or a task.

    Give exactly one of ``config``, ``task`` and ``skipped``.

    Args:
        name: the run's name, and its folder (a ``/`` nests folders: ``"mnist/node"``).
        config: trained by :func:`odebench.training.train`; its ``device``, ``data_dir``
            and ``progress`` are replaced by the options'.
        task: trained by :func:`odebench.training.fit`.
        skipped: why the run trains nothing (its data set was not found); kept in
            ``results.json`` as its ``"not_run"`` detail.
        needs: an image data set the run reads: where it is not found, the run trains
            nothing and is ``skipped``, the report saying what to download.

    Example:
        >>> Run("node")
        Traceback (most recent call last):
        ...
        ValueError: Run 'node': give exactly one of `config`, `task` and `skipped`.
    """

    name: str
    config: TrainConfig | None = None
    task: Task | None = None
    skipped: str | None = None
    needs: str | None = None

    def __post_init__(self) -> None:
        if not self.name or self.name.startswith("/") or ".." in self.name.split("/"):
            raise ValueError(f"`name` must be a relative folder name, got {self.name!r}.")
        if [self.config, self.task, self.skipped].count(None) != 2:
            raise ValueError(
                f"Run {self.name!r}: give exactly one of `config`, `task` and `skipped`."
            )


@dataclass(frozen=True)
class Trained:
    """One trained run of one seed, as the ``measure`` of a :class:`Template` receives it.

    Args:
        run: what was trained.
        seed: its seed.
        dir: its folder.
        config: the configuration it trained with; ``None`` for a ``task`` run.
        result: :func:`odebench.training.train`'s results; empty for a ``task`` run.
        history: the rows of ``metrics.json`` (one per epoch).
        model: the trained model of a ``task`` run; ``None`` for a ``config`` run.
        seconds: its training time, over all its resumptions.
    """

    run: Run
    seed: int
    dir: Path
    config: TrainConfig | None
    result: Mapping[str, Any]
    history: Sequence[Mapping[str, Any]]
    model: nn.Module | None = None
    seconds: float = 0.0

    def load(self, device: torch.device | str = "cpu") -> nn.Module:
        """The trained model: the ``task``'s, or rebuilt from the checkpoint in eval mode."""
        if self.model is not None:
            return self.model
        return load_model(self.dir, str(device))[0]

    def final_metrics(self) -> dict[str, float | None]:
        """A ``config`` run's ``parameters``, ``epochs``, ``train_seconds``,
        ``best_test_acc`` and every number of its last epoch's row."""
        final = self.result.get("final") or {}
        numbers = {k: v for k, v in final.items() if k not in ("epoch", "lr")}
        keys = ("parameters", "epochs", "train_seconds", "best_test_acc")
        return {**{k: self.result.get(k) for k in keys}, **numbers}


@dataclass(frozen=True)
class Measurement:
    """What an experiment measures of one trained run of one seed.

    Args:
        metrics: named numbers, aggregated over the seeds (``None``, NaN and
            infinities count as missing).
        details: JSON-ready values the figures or tables need, kept per seed.
    """

    metrics: Mapping[str, float | None]
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Figure(Generic[S]):
    """One figure of the report: a file, and the function that draws it.

    Args:
        path: the file, relative to the output directory.
        draw: ``draw(result, path)`` writes the figure to ``path``.
    """

    path: str
    draw: Callable[[Result[S], Path], None]


@dataclass(frozen=True)
class Plot(Generic[S]):
    """One figure of the report declared as data: panels of lines or bars.

    Args:
        path: the file, relative to the output directory.
        panels: ``panels(result)``, the panels, row by row:
            :class:`odebench.perf.Lines` or :class:`odebench.perf.Bars`.
        columns: panels per row; ``None``: all in one row.
        size: one panel's width and height, in inches.
        dpi: the PNG's dots per inch.
        sharey: the panels share their y axis.
    """

    path: str
    panels: Callable[[Result[S]], Sequence[Lines | Bars]]
    columns: int | None = None
    size: tuple[float, float] = (5.0, 3.6)
    dpi: int = 90
    sharey: bool = False

    def draw(self, result: Result[S], path: Path) -> None:
        """Draw the panels of ``result`` to ``path``."""
        draw(path, self.panels(result), columns=self.columns, size=self.size, dpi=self.dpi,
             sharey=self.sharey)  # fmt: skip


@dataclass(frozen=True)
class Template(Generic[S]):
    """An experiment of ``odebench run``, declared; :func:`register_template` adds it.

    Args:
        name: the name of ``odebench run NAME``.
        description: one line for ``odebench list``.
        title: the report's title.
        modes: ``{mode: settings}`` for each of :data:`~odebench.experiments.MODES`,
            every value of one class.
        runs: ``runs(setup, seed)``: what to train for ``seed``; the same names, in
            the same order, for every seed.
        measure: ``measure(setup, trained)``: the numbers of one trained run of one seed.
        claims: ``claims(setup)``: the claims, checked on the aggregated numbers.
        text: its text file, in ``text/`` (or an absolute path); ``""``: none; ``None``
            (the default): ``text/<name>.md`` where it exists, else none.
        tables: ``tables(setup)``: its tables by name (``{table[name]}`` in the text).
        words: ``words(result)``: further values the text's fields read.
        figures: drawn after the runs, before the report.
        epoch_fields: the settings' fields that ``--epochs`` sets; ``()``: none.
        one_thread_modes: modes that run on one torch thread (steadier timings).
        published: the paper's numbers, copied into ``results.json``.
        data: ``data(setup)``: the data of task runs, in words; ``None``: read from the
            configurations of the trained runs.

    Raises:
        ValueError: a mode missing or unknown, modes of different classes, or an ``epoch_fields``
            entry that is not a field of the settings.

    Example:
        >>> from dataclasses import dataclass
        >>> from odebench.experiments import Metric
        >>> @dataclass(frozen=True)
        ... class Toy(Settings):
        ...     epochs: int
        >>> def runs(setup, seed):
        ...     config = TrainConfig(model="toy-node", dataset="annuli-1d", optimizer="adam",
        ...                          epochs=setup.settings.epochs, seed=seed, progress=False)
        ...     return [Run("node", config=config)]
        >>> loss = Metric("test_loss").of("node")
        >>> toy = Template(
        ...     name="toy-example", description="a NODE on g(x)", title="A NODE on g(x)",
        ...     modes={"quick": Toy(epochs=1), "standard": Toy(epochs=5, seeds=3),
        ...            "full": Toy(epochs=10, seeds=5)},
        ...     runs=runs, measure=lambda setup, trained: Measurement(trained.final_metrics()),
        ...     claims=lambda setup: [Claim.at_most("fits", "the NODE's test MSE is below 1",
        ...                               "not published", loss, 1, strict=True, kind="paper")],
        ... )
        >>> toy.settings_for("standard", epochs=2)
        Toy(seeds=3, epochs=2)
    """

    name: str
    description: str
    title: str
    modes: Mapping[str, S]
    runs: Callable[[Setup[S], int], Sequence[Run]]
    measure: Callable[[Setup[S], Trained], Measurement]
    claims: Callable[[Setup[S]], Sequence[Claim]] = lambda setup: ()
    text: str | None = None
    tables: Callable[[Setup[S]], Mapping[str, Table]] = lambda setup: {}
    words: Callable[[Result[S]], Mapping[str, object]] = lambda result: {}
    figures: Sequence[Figure[S] | Plot[S]] = ()
    epoch_fields: tuple[str, ...] = ("epochs",)
    one_thread_modes: tuple[str, ...] = ()
    published: Mapping[str, Any] = field(default_factory=dict)
    data: Callable[[Setup[S]], str] | None = None

    def __post_init__(self) -> None:
        if set(self.modes) != set(MODES):
            raise ValueError(
                f"Template {self.name!r}: `modes` has {', '.join(self.modes) or 'none'}; "
                f"give exactly {', '.join(MODES)}."
            )
        object.__setattr__(self, "modes", MappingProxyType(dict(self.modes)))
        if self.text is None:
            found = (resources.files(__package__) / "text" / f"{self.name}.md").is_file()
            object.__setattr__(self, "text", f"{self.name}.md" if found else "")
        kinds = {type(s) for s in self.modes.values()}
        if len(kinds) > 1 or not isinstance(next(iter(self.modes.values())), Settings):
            raise ValueError(
                f"Template {self.name!r}: every mode's settings must be one Settings "
                f"subclass, got {', '.join(sorted(k.__name__ for k in kinds))}."
            )
        fields = {f.name for f in dataclasses.fields(next(iter(self.modes.values())))}
        unknown = [f for f in self.epoch_fields if f not in fields]
        if unknown:
            raise ValueError(
                f"Template {self.name!r}: `epoch_fields` {unknown} are not fields of its "
                f"settings ({', '.join(sorted(fields))})."
            )

    def settings_for(self, mode: str, epochs: int | None = None) -> S:
        """The settings of ``mode``, with ``epochs`` (``--epochs``) in every epoch field.

        Raises:
            ValueError: ``epochs`` for an experiment without epoch fields.
        """
        settings = self.modes[mode]
        if epochs is None:
            return settings
        if not self.epoch_fields:
            raise ValueError(f"--epochs does not apply to {self.name}: it trains no epochs.")
        return dataclasses.replace(settings, **{f: epochs for f in self.epoch_fields})
